//! `pattern` regexes to GBNF: the syntax llama.cpp's converter translates
//! (`^...$` anchored; literals, `.`, classes, groups, `(?:...)`, `|`, `*`, `+`,
//! `?`, `{m}`, `{m,}`, `{m,n}`, and the escapes `\x`, `\u`, `\t`, `\n`, `\r` and
//! of metacharacters), nothing else.
//!
//! The grammar matches the JSON text of the string, so where llama.cpp writes
//! a character as it is, this writes it as JSON does: a `"` in the pattern
//! comes out as `\"`, a newline as `\n`. `.` and negated classes never produce
//! raw quotes, backslashes or control characters (a narrowing: they may still
//! produce the short escapes `\"`, `\\`, `\b`, `\f`, `\t`, ...).

use std::collections::HashMap;

use super::emit::{build_repetition, class_char, literal, Rules};
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
pub(super) struct Pattern(Alternation);

#[derive(Debug, Clone)]
struct Alternation(Vec<Vec<Piece>>);

/// An atom repeated `min` to `max` times (1 to 1 without a quantifier).
#[derive(Debug, Clone)]
struct Piece {
    atom: Atom,
    min: u32,
    max: Option<u32>,
}

#[derive(Debug, Clone)]
enum Atom {
    Char(char),
    /// `.`: anything but a line terminator.
    Dot,
    Class(CharClass),
    Group(Alternation),
}

#[derive(Debug, Clone)]
struct CharClass {
    negated: bool,
    /// Inclusive ranges.
    ranges: Vec<(char, char)>,
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

/// Adds the rule `name` for a JSON string matching `pattern`; returns its name.
pub(super) fn emit(pattern: &Pattern, name: &str, rules: &mut Rules) -> String {
    let mut writer = Writer {
        rules,
        name,
        sub_rules: HashMap::new(),
    };
    let body = writer.alternation(&pattern.0);
    writer.rules.add(name, format!(r#""\"" ({body}) "\"""#))
}

struct Writer<'r> {
    rules: &'r mut Rules,
    /// The pattern's rule, the prefix of its sub-rules.
    name: &'r str,
    /// Sub-rules by body, for `{m,n}` of anything but a literal (as llama.cpp
    /// does: the grammar engine copies what it repeats).
    sub_rules: HashMap<String, String>,
}

impl Writer<'_> {
    fn alternation(&mut self, alternation: &Alternation) -> String {
        let sequences: Vec<String> = alternation.0.iter().map(|s| self.sequence(s)).collect();
        sequences.join(" | ")
    }

    /// The pieces, runs of plain characters joined into one literal.
    fn sequence(&mut self, pieces: &[Piece]) -> String {
        let mut items = Vec::new();
        let mut text = String::new();
        for piece in pieces {
            if let (Atom::Char(c), 1, Some(1)) = (&piece.atom, piece.min, piece.max) {
                text.push_str(&json_char(*c));
                continue;
            }
            if !text.is_empty() {
                items.push(literal(&std::mem::take(&mut text)));
            }
            items.push(self.piece(piece));
        }
        if !text.is_empty() {
            items.push(literal(&text));
        }
        items.join(" ")
    }

    fn piece(&mut self, piece: &Piece) -> String {
        let (item, is_literal) = match &piece.atom {
            Atom::Char(c) => (literal(&json_char(*c)), true),
            Atom::Dot => (self.rules.add("dot", dot()), false),
            Atom::Class(class) => (class_items(class), false),
            Atom::Group(alternation) => (format!("({})", self.alternation(alternation)), false),
        };
        match (piece.min, piece.max) {
            (1, Some(1)) => item,
            (0, None) => format!("{item}*"),
            (1, None) => format!("{item}+"),
            (0, Some(1)) => format!("{item}?"),
            (min, max) if is_literal => build_repetition(&item, min, max, None),
            (min, max) => {
                let sub_rule = self.sub_rule(item);
                build_repetition(&sub_rule, min, max, None)
            }
        }
    }

    fn sub_rule(&mut self, body: String) -> String {
        if let Some(name) = self.sub_rules.get(&body) {
            return name.clone();
        }
        let wanted = format!("{}-{}", self.name, self.sub_rules.len() + 1);
        let name = self.rules.add(&wanted, body.clone());
        self.sub_rules.insert(body, name.clone());
        name
    }
}

/// `c` as it appears inside a JSON string.
fn json_char(c: char) -> String {
    match c {
        '"' => "\\\"".to_string(),
        '\\' => "\\\\".to_string(),
        '\n' => "\\n".to_string(),
        '\r' => "\\r".to_string(),
        '\t' => "\\t".to_string(),
        '\u{8}' => "\\b".to_string(),
        '\u{c}' => "\\f".to_string(),
        c if c < ' ' => format!("\\u{:04x}", u32::from(c)),
        c => c.to_string(),
    }
}

/// `.`: any character but `\n`, `\r`, U+2028 and U+2029 (ECMAScript's line
/// terminators), as JSON text.
fn dot() -> String {
    let line_ends = CharClass {
        negated: true,
        ranges: vec![('\n', '\n'), ('\r', '\r'), ('\u{2028}', '\u{2029}')],
    };
    class_items(&line_ends)
}

/// The special characters whose short JSON escapes a negated class may produce.
const SHORT_ESCAPED: [char; 7] = ['"', '\\', '\u{8}', '\u{c}', '\n', '\r', '\t'];

/// A character class as JSON text: the plain characters as a GBNF class, the
/// special ones as their escapes.
fn class_items(class: &CharClass) -> String {
    let contains = |c: char| {
        class
            .ranges
            .iter()
            .any(|&(low, high)| low <= c && c <= high)
    };
    let mut items = Vec::new();
    if class.negated {
        let mut text = String::from("[^");
        for &(low, high) in &class.ranges {
            push_range(&mut text, low, high);
        }
        text.push_str(r#""\\\x00-\x1F]"#);
        items.push(text);
        let escapes = SHORT_ESCAPED.iter().filter(|&&c| !contains(c));
        items.extend(escapes.map(|&c| literal(&json_char(c))));
    } else {
        let plain = plain_ranges(&class.ranges);
        if !plain.is_empty() {
            let mut text = String::from("[");
            for (low, high) in plain {
                push_range(&mut text, low, high);
            }
            text.push(']');
            items.push(text);
        }
        let specials = ('\0'..' ').chain(['"', '\\']).filter(|&c| contains(c));
        items.extend(specials.map(|c| literal(&json_char(c))));
    }
    match items.len() {
        1 => items.remove(0),
        _ => format!("({})", items.join(" | ")),
    }
}

/// `ranges` without the special characters.
fn plain_ranges(ranges: &[(char, char)]) -> Vec<(char, char)> {
    const SPECIAL: [(u32, u32); 3] = [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)];
    let mut out = Vec::new();
    for &(low, high) in ranges {
        let (mut from, to) = (u32::from(low), u32::from(high));
        for (special_low, special_high) in SPECIAL {
            if special_high < from || special_low > to {
                continue;
            }
            if special_low > from {
                out.extend(char::from_u32(from).zip(char::from_u32(special_low - 1)));
            }
            from = special_high + 1;
        }
        if from <= to {
            out.extend(char::from_u32(from).zip(char::from_u32(to)));
        }
    }
    out
}

fn push_range(text: &mut String, low: char, high: char) {
    text.push_str(&class_char(low));
    if high != low {
        text.push('-');
        text.push_str(&class_char(high));
    }
}
