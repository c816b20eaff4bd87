//! `pattern` regexes, parsed for GBNF (`emit/regex.rs` writes the rules): the syntax llama.cpp's converter translates
//! (`^...$` anchored; literals, `.`, classes, groups, `(?:...)`, `|`, `*`, `+`,
//! `?`, `{m}`, `{m,}`, `{m,n}`, and the escapes `\x`, `\u`, `\t`, `\n`, `\r` and
//! of metacharacters), nothing else.
//!
//! The grammar matches the JSON text of the string, so where llama.cpp writes
//! a character as it is, this writes it as JSON does: a `"` in the pattern
//! comes out as `\"`, a newline as `\n`. `.` and negated classes never produce
//! raw quotes, backslashes or control characters (a narrowing: they may still
//! produce the short escapes `\"`, `\\`, `\b`, `\f`, `\t`, ...).

use super::limits::MAX_REPEAT;

/// How deep groups may nest.
const MAX_NESTING: usize = 64;

/// Why a pattern has no grammar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum PatternError {
    /// A valid regex outside the subset.
    Unsupported(String),
    /// Not a valid regex.
    Invalid(String),
}

/// A parsed, anchored pattern.
#[derive(Debug, Clone)]
pub(super) struct Pattern(pub(super) Alternation);

#[derive(Debug, Clone)]
pub(super) struct Alternation(pub(super) Vec<Vec<Piece>>);

/// An atom repeated `min` to `max` times (1 to 1 without a quantifier).
#[derive(Debug, Clone)]
pub(super) struct Piece {
    pub(super) atom: Atom,
    pub(super) min: u32,
    pub(super) max: Option<u32>,
}

#[derive(Debug, Clone)]
pub(super) enum Atom {
    Char(char),
    /// `.`: anything but a line terminator.
    Dot,
    Class(CharClass),
    Group(Alternation),
}

#[derive(Debug, Clone)]
pub(super) struct CharClass {
    pub(super) negated: bool,
    /// Inclusive ranges.
    pub(super) ranges: Vec<(char, char)>,
}

fn unsupported<T>(why: impl Into<String>) -> Result<T, PatternError> {
    Err(PatternError::Unsupported(why.into()))
}

fn invalid<T>(why: impl Into<String>) -> Result<T, PatternError> {
    Err(PatternError::Invalid(why.into()))
}

/// Parses `pattern`, which must be anchored at both ends.
pub(super) fn parse(pattern: &str) -> Result<Pattern, PatternError> {
    let Some(inner) = pattern.strip_prefix('^').and_then(|p| p.strip_suffix('$')) else {
        return unsupported("it is not anchored with ^ and $");
    };
    let mut reader = Reader {
        chars: inner.chars().collect(),
        pos: 0,
        depth: 0,
    };
    let alternation = reader.alternation()?;
    if reader.pos < reader.chars.len() {
        return invalid("unbalanced parentheses");
    }
    Ok(Pattern(alternation))
}

struct Reader {
    chars: Vec<char>,
    pos: usize,
    depth: usize,
}

impl Reader {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.pos + offset).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek();
        self.pos += 1;
        c
    }

    fn alternation(&mut self) -> Result<Alternation, PatternError> {
        let mut sequences = vec![self.sequence()?];
        while self.peek() == Some('|') {
            self.pos += 1;
            sequences.push(self.sequence()?);
        }
        Ok(Alternation(sequences))
    }

    fn sequence(&mut self) -> Result<Vec<Piece>, PatternError> {
        let mut pieces = Vec::new();
        while let Some(c) = self.peek() {
            if c == '|' || c == ')' {
                break;
            }
            let atom = self.atom()?;
            let (min, max) = self.quantifier()?;
            pieces.push(Piece { atom, min, max });
        }
        Ok(pieces)
    }

    fn atom(&mut self) -> Result<Atom, PatternError> {
        match self.bump() {
            Some('(') => self.group(),
            Some('[') => self.class().map(Atom::Class),
            Some('.') => Ok(Atom::Dot),
            Some('\\') => self.escape(false).map(Atom::Char),
            Some('^' | '$') => unsupported("an anchor inside the pattern"),
            Some('*' | '+' | '?' | '{') => invalid("a quantifier with nothing to repeat"),
            Some(c @ (']' | '}')) => unsupported(format!("an unescaped '{c}'")),
            Some(c) => Ok(Atom::Char(c)),
            None => invalid("unexpected end"),
        }
    }

    fn group(&mut self) -> Result<Atom, PatternError> {
        if self.peek() == Some('?') {
            if self.peek_at(1) != Some(':') {
                return unsupported("lookarounds, named groups and flags");
            }
            self.pos += 2;
        }
        if self.depth >= MAX_NESTING {
            return unsupported(format!("groups nested more than {MAX_NESTING} deep"));
        }
        self.depth += 1;
        let alternation = self.alternation()?;
        self.depth -= 1;
        if self.bump() != Some(')') {
            return invalid("unbalanced parentheses");
        }
        Ok(Atom::Group(alternation))
    }

    /// A class after its `[`.
    fn class(&mut self) -> Result<CharClass, PatternError> {
        let negated = self.peek() == Some('^');
        if negated {
            self.pos += 1;
        }
        if self.peek() == Some(']') {
            return unsupported("an empty character class");
        }
        let mut ranges = Vec::new();
        loop {
            let low = match self.bump() {
                None => return invalid("an unterminated character class"),
                Some(']') => break,
                Some('\\') => self.escape(true)?,
                Some(c) => c,
            };
            let is_range = self.peek() == Some('-') && self.peek_at(1).is_some_and(|c| c != ']');
            if !is_range {
                ranges.push((low, low));
                continue;
            }
            self.pos += 1;
            let high = match self.bump() {
                Some('\\') => self.escape(true)?,
                Some(c) => c,
                None => return invalid("an unterminated character class"),
            };
            if high < low {
                return invalid(format!("the range {low}-{high} is out of order"));
            }
            ranges.push((low, high));
        }
        Ok(CharClass { negated, ranges })
    }

    /// The character an escape stands for, after its backslash.
    fn escape(&mut self, in_class: bool) -> Result<char, PatternError> {
        let Some(c) = self.bump() else {
            return invalid("a trailing backslash");
        };
        match c {
            't' => Ok('\t'),
            'n' => Ok('\n'),
            'r' => Ok('\r'),
            'x' => self.hex(2),
            'u' => self.hex(4),
            '\\' | '"' | '[' | ']' | '-' => Ok(c),
            '^' | '$' | '.' | '(' | ')' | '|' | '{' | '}' | '*' | '+' | '?' if !in_class => Ok(c),
            c => unsupported(format!("the escape \\{c}")),
        }
    }

    fn hex(&mut self, digits: usize) -> Result<char, PatternError> {
        let mut value = 0u32;
        for _ in 0..digits {
            match self.bump().and_then(|c| c.to_digit(16)) {
                Some(digit) => value = value * 16 + digit,
                None => return unsupported("an escape without its hex digits"),
            }
        }
        match char::from_u32(value) {
            Some(c) => Ok(c),
            None => unsupported("an escaped surrogate code point"),
        }
    }

    /// The repetition after an atom: `(1, Some(1))` when there is none.
    fn quantifier(&mut self) -> Result<(u32, Option<u32>), PatternError> {
        let bounds = match self.peek() {
            Some('*') => self.skip((0, None)),
            Some('+') => self.skip((1, None)),
            Some('?') => self.skip((0, Some(1))),
            Some('{') => {
                self.pos += 1;
                self.braces()?
            }
            _ => return Ok((1, Some(1))),
        };
        // A lazy quantifier matches the same strings.
        if self.peek() == Some('?') {
            self.pos += 1;
        }
        if matches!(self.peek(), Some('*' | '+' | '?' | '{')) {
            return invalid("a quantifier with nothing to repeat");
        }
        Ok(bounds)
    }

    /// `bounds`, past the one-character quantifier that gave them.
    fn skip(&mut self, bounds: (u32, Option<u32>)) -> (u32, Option<u32>) {
        self.pos += 1;
        bounds
    }

    /// `{m}`, `{m,}` or `{m,n}` after its `{`, up to its `}`.
    fn braces(&mut self) -> Result<(u32, Option<u32>), PatternError> {
        let Some(min) = self.number()? else {
            return unsupported("a '{' that does not start a repetition");
        };
        let max = match self.bump() {
            Some('}') => Some(min),
            Some(',') => {
                let max = self.number()?;
                if self.bump() != Some('}') {
                    return unsupported("a '{' that does not start a repetition");
                }
                max
            }
            _ => return unsupported("a '{' that does not start a repetition"),
        };
        if max.is_some_and(|max| max < min) {
            return invalid(format!("the repetition {{{min},..}} is out of order"));
        }
        if min > MAX_REPEAT || max.is_some_and(|max| max > MAX_REPEAT) {
            return unsupported(format!("more than {MAX_REPEAT} repetitions"));
        }
        Ok((min, max))
    }

    fn number(&mut self) -> Result<Option<u32>, PatternError> {
        let mut value: Option<u32> = None;
        while let Some(digit) = self.peek().and_then(|c| c.to_digit(10)) {
            self.pos += 1;
            let next = value
                .unwrap_or(0)
                .checked_mul(10)
                .and_then(|v| v.checked_add(digit));
            match next {
                Some(next) => value = Some(next),
                None => return unsupported(format!("more than {MAX_REPEAT} repetitions")),
            }
        }
        Ok(value)
    }
}
