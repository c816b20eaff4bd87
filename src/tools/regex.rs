//! A small backtracking regular-expression matcher for `grep` (no regex crate is available).
//!
//! Supported: literals, `.`, `^`, `$`, `*`, `+`, `?`, `{n}`, `{n,}`, `{n,m}`,
//! `[...]` classes with ranges and negation, `\d \w \s \D \W \S`, escaped
//! metacharacters, groups `( )` and alternation `|`. Matching is per line
//! and bounded by a step budget, so a pathological pattern gives up (no
//! match) instead of hanging the agent.

use std::cell::Cell;

/// A compiled pattern.
#[derive(Debug, Clone)]
pub struct Regex {
    alternatives: Vec<Vec<Node>>,
    case_insensitive: bool,
}

#[derive(Debug, Clone)]
enum Node {
    Char(char),
    Any,
    Class(Class),
    Start,
    End,
    Group(Vec<Vec<Node>>),
    Repeat {
        node: Box<Node>,
        min: u32,
        max: Option<u32>,
    },
}

#[derive(Debug, Clone)]
struct Class {
    negated: bool,
    items: Vec<ClassItem>,
}

#[derive(Debug, Clone)]
enum ClassItem {
    Range(char, char),
    Digit(bool),
    Word(bool),
    Space(bool),
}

/// Steps one line may take before the match is abandoned.
const STEP_BUDGET: u32 = 200_000;

impl Regex {
    pub fn new(pattern: &str, case_insensitive: bool) -> Result<Regex, String> {
        let mut parser = Parser {
            chars: pattern.chars().collect(),
            pos: 0,
        };
        let alternatives = parser.alternation()?;
        if parser.pos < parser.chars.len() {
            return Err(format!("unmatched ')' at position {}", parser.pos));
        }
        Ok(Regex {
            alternatives,
            case_insensitive,
        })
    }

    /// Whether the pattern matches anywhere in `line`.
    pub fn is_match(&self, line: &str) -> bool {
        let text: Vec<char> = if self.case_insensitive {
            line.chars().flat_map(char::to_lowercase).collect()
        } else {
            line.chars().collect()
        };
        let matcher = Matcher {
            text: &text,
            steps: Cell::new(0),
            ci: self.case_insensitive,
        };
        (0..=text.len()).any(|start| matcher.alternatives(&self.alternatives, start, &|_| true))
    }
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn next(&mut self) -> Option<char> {
        let c = self.peek();
        self.pos += 1;
        c
    }

    fn alternation(&mut self) -> Result<Vec<Vec<Node>>, String> {
        let mut alternatives = vec![self.sequence()?];
        while self.peek() == Some('|') {
            self.pos += 1;
            alternatives.push(self.sequence()?);
        }
        Ok(alternatives)
    }

    fn sequence(&mut self) -> Result<Vec<Node>, String> {
        let mut nodes = Vec::new();
        while let Some(c) = self.peek() {
            if c == '|' || c == ')' {
                break;
            }
            let atom = self.atom()?;
            nodes.push(self.repetition(atom)?);
        }
        Ok(nodes)
    }

    fn atom(&mut self) -> Result<Node, String> {
        let c = self.next().ok_or("unexpected end of pattern")?;
        Ok(match c {
            '.' => Node::Any,
            '^' => Node::Start,
            '$' => Node::End,
            '(' => {
                // Non-capturing groups spell the same thing here.
                if self.chars[self.pos..].starts_with(&['?', ':']) {
                    self.pos += 2;
                }
                let inner = self.alternation()?;
                if self.next() != Some(')') {
                    return Err("missing ')'".into());
                }
                Node::Group(inner)
            }
            '[' => Node::Class(self.class()?),
            '\\' => self.escape()?,
            '*' | '+' | '?' => return Err(format!("'{c}' has nothing to repeat")),
            c => Node::Char(c),
        })
    }

    fn escape(&mut self) -> Result<Node, String> {
        let c = self.next().ok_or("pattern ends with '\\'")?;
        Ok(match shorthand(c) {
            Some(item) => Node::Class(Class {
                negated: false,
                items: vec![item],
            }),
            None => Node::Char(unescape(c)),
        })
    }

    fn class(&mut self) -> Result<Class, String> {
        let negated = self.peek() == Some('^');
        if negated {
            self.pos += 1;
        }
        let mut items = Vec::new();
        let mut first = true;
        loop {
            let c = self.next().ok_or("missing ']'")?;
            if c == ']' && !first {
                return Ok(Class { negated, items });
            }
            first = false;
            let low = match c {
                '\\' => {
                    let e = self.next().ok_or("missing ']'")?;
                    if let Some(item) = shorthand(e) {
                        items.push(item);
                        continue;
                    }
                    unescape(e)
                }
                c => c,
            };
            items.push(self.range_from(low));
        }
    }

    fn range_from(&mut self, low: char) -> ClassItem {
        let is_range =
            self.peek() == Some('-') && self.chars.get(self.pos + 1).is_some_and(|&c| c != ']');
        if !is_range {
            return ClassItem::Range(low, low);
        }
        self.pos += 1;
        let high = match self.next() {
            Some('\\') => self.next().map(unescape).unwrap_or('\\'),
            Some(c) => c,
            None => low,
        };
        ClassItem::Range(low, high)
    }

    fn repetition(&mut self, atom: Node) -> Result<Node, String> {
        let (min, max) = match self.peek() {
            Some(c @ ('*' | '+' | '?')) => {
                self.pos += 1;
                match c {
                    '*' => (0, None),
                    '+' => (1, None),
                    _ => (0, Some(1)),
                }
            }
            Some('{') => match self.braces() {
                Some(bounds) => bounds,
                None => return Ok(atom),
            },
            _ => return Ok(atom),
        };
        if matches!(atom, Node::Start | Node::End) {
            return Err("an anchor cannot be repeated".into());
        }
        // A lazy `?` suffix changes nothing for a yes/no line match.
        if self.peek() == Some('?') {
            self.pos += 1;
        }
        Ok(Node::Repeat {
            node: Box::new(atom),
            min,
            max,
        })
    }

    /// Parses `{n}`, `{n,}` or `{n,m}`; anything else leaves `{` as a literal.
    fn braces(&mut self) -> Option<(u32, Option<u32>)> {
        let rest: String = self.chars[self.pos..]
            .iter()
            .take_while(|&&c| c != '}')
            .collect();
        if self.chars.get(self.pos + rest.chars().count()) != Some(&'}') {
            return None;
        }
        let inner = &rest[1..];
        let bounds = match inner.split_once(',') {
            None => inner.parse().ok().map(|n| (n, Some(n))),
            Some((lo, "")) => lo.parse().ok().map(|n| (n, None)),
            Some((lo, hi)) => Some((lo.parse().ok()?, Some(hi.parse().ok()?))),
        }?;
        self.pos += rest.chars().count() + 1;
        Some(bounds)
    }
}

fn shorthand(c: char) -> Option<ClassItem> {
    Some(match c {
        'd' => ClassItem::Digit(true),
        'D' => ClassItem::Digit(false),
        'w' => ClassItem::Word(true),
        'W' => ClassItem::Word(false),
        's' => ClassItem::Space(true),
        'S' => ClassItem::Space(false),
        _ => return None,
    })
}

fn unescape(c: char) -> char {
    match c {
        'n' => '\n',
        't' => '\t',
        'r' => '\r',
        c => c,
    }
}

struct Matcher<'t> {
    text: &'t [char],
    steps: Cell<u32>,
    ci: bool,
}

type Next<'a> = &'a dyn Fn(usize) -> bool;

impl Matcher<'_> {
    fn alternatives(&self, alternatives: &[Vec<Node>], pos: usize, next: Next) -> bool {
        alternatives.iter().any(|seq| self.sequence(seq, pos, next))
    }

    /// Matches `seq` at `pos`, then hands the end position to `next`.
    fn sequence(&self, seq: &[Node], pos: usize, next: Next) -> bool {
        self.steps.set(self.steps.get() + 1);
        if self.steps.get() > STEP_BUDGET {
            return false;
        }
        match seq.split_first() {
            None => next(pos),
            Some((node, rest)) => self.node(node, pos, &|end| self.sequence(rest, end, next)),
        }
    }

    fn node(&self, node: &Node, pos: usize, next: Next) -> bool {
        match node {
            Node::Start => pos == 0 && next(pos),
            Node::End => pos == self.text.len() && next(pos),
            Node::Group(alternatives) => self.alternatives(alternatives, pos, next),
            Node::Repeat { node, min, max } => self.repeat(node, (*min, *max), 0, pos, next),
            single => match self.text.get(pos) {
                Some(&c) if self.single(single, c) => next(pos + 1),
                _ => false,
            },
        }
    }

    /// Greedy repetition: try one more, then settle for what we have.
    fn repeat(
        &self,
        node: &Node,
        bounds: (u32, Option<u32>),
        count: u32,
        pos: usize,
        next: Next,
    ) -> bool {
        let (min, max) = bounds;
        let more = max.is_none_or(|m| count < m)
            && self.node(node, pos, &|end| {
                end != pos && self.repeat(node, bounds, count + 1, end, next)
            });
        more || (count >= min && next(pos))
    }

    fn single(&self, node: &Node, c: char) -> bool {
        match node {
            Node::Any => true,
            Node::Char(want) if self.ci => want.to_lowercase().eq(std::iter::once(c)),
            Node::Char(want) => *want == c,
            Node::Class(class) => self.class(class, c),
            _ => false,
        }
    }

    fn class(&self, class: &Class, c: char) -> bool {
        let hit = class.items.iter().any(|item| match *item {
            ClassItem::Range(lo, hi) if self.ci => {
                (lo..=hi).contains(&c)
                    || lo
                        .to_lowercase()
                        .zip(hi.to_lowercase())
                        .any(|(l, h)| (l..=h).contains(&c))
            }
            ClassItem::Range(lo, hi) => (lo..=hi).contains(&c),
            ClassItem::Digit(yes) => c.is_ascii_digit() == yes,
            ClassItem::Word(yes) => (c.is_alphanumeric() || c == '_') == yes,
            ClassItem::Space(yes) => c.is_whitespace() == yes,
        });
        hit != class.negated
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(pattern: &str, line: &str, expected: bool) {
        let re = Regex::new(pattern, false).unwrap_or_else(|e| panic!("{pattern}: {e}"));
        assert_eq!(re.is_match(line), expected, "{pattern} vs {line:?}");
    }

    #[test]
    fn matching() {
        check("foo", "a foo b", true);
        check("foo", "a fo b", false);
        check("^foo", "foo bar", true);
        check("^foo", "a foo", false);
        check("bar$", "foo bar", true);
        check("bar$", "bar foo", false);
        check("^$", "", true);
        check("f.o", "fxo", true);
        check("fo*", "f", true);
        check("fo+b", "fb", false);
        check("fo+b", "foob", true);
        check("colou?r", "color", true);
        check("colou?r", "colour", true);
        check("a{2}", "a", false);
        check("a{2}", "baab", true);
        check("^a{2,3}$", "aaaa", false);
        check("^a{2,}$", "aaaa", true);
        check("x{y", "x{y", true);
        check("[abc]+d", "zzbcad", true);
        check("[^abc]", "abc", false);
        check("[a-z]+[0-9]", "abc9", true);
        check("\\d+\\.\\d+", "version 1.25", true);
        check("\\d+\\.\\d+", "version 125", false);
        check("\\w+\\s\\w+", "hello world", true);
        check("\\S", "   ", false);
        check("fn (main|run)\\(", "pub fn run()", true);
        check("fn (main|run)\\(", "pub fn walk()", false);
        check("cat|dog", "hotdog", true);
        check("(?:ab)+c", "ababc", true);
        check("(a*)*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false);
        check("é.", "café!", true);
    }

    #[test]
    fn case_insensitive() {
        let re = Regex::new("Hello [A-Z]+", true).unwrap();
        assert!(re.is_match("say HELLO world"));
        assert!(!Regex::new("Hello", false).unwrap().is_match("HELLO"));
    }

    #[test]
    fn parse_errors() {
        for bad in ["(abc", "abc)", "[abc", "*a", "a\\", "^*"] {
            assert!(Regex::new(bad, false).is_err(), "{bad} should not compile");
        }
    }
}
