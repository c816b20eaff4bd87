//! What a GBNF grammar may cost before llama.cpp sees it.
//!
//! llama.cpp parses a grammar recursively (a group within a group is a call
//! within a call), follows rule references recursively when it builds its
//! stacks, expands `x{m,n}` by copying `x`, and keeps one stack per
//! alternative that can start the text, each checked against the whole
//! vocabulary when a token is refused. So 20,000 nested parentheses or a chain
//! of 50,000 rules overflow the generation thread's stack (the process dies),
//! `(("a"{2000}){2000}){2000}` exhausts memory, and 20,000 alternatives cost
//! seconds per token. [`check`] reads the text once, without building
//! anything, and refuses a grammar past any of [`LIMITS`] with the limit's name,
//! before llama.cpp parses it; every grammar shepherd samples with passes here
//! (a client's `grammar`, a `json_schema`'s and the tool calls').
//!
//! The counts are upper bounds of what llama.cpp builds: every group,
//! repetition and rule counts as a rule (llama.cpp generates one for each), a
//! repetition multiplies what it repeats by its largest count, and every
//! character of a literal is a symbol. A text that does not parse is left to
//! llama.cpp's own error.

use std::fmt;

/// The limits [`check`] holds a grammar to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of grammar text.
    pub bytes: usize,
    /// Rules, groups and repetitions together: what llama.cpp turns into rules,
    /// and so the deepest chain of references it may follow.
    pub rules: usize,
    /// Alternatives (`|`) in the whole grammar.
    pub alternatives: usize,
    /// Groups within groups in one rule.
    pub depth: usize,
    /// The count of one repetition (`x{n}`, `x{m,n}`), llama.cpp's converter's
    /// own limit.
    pub repeat: u64,
    /// Symbols once every repetition is expanded.
    pub symbols: u64,
}

/// The most repetitions llama.cpp's grammar engine expands
/// (`MAX_REPETITION_THRESHOLD`); past it `{m,n}` silently loses its maximum. The
/// schema converter refuses counts past it, and a grammar's `{m,n}` too ([`LIMITS`]).
pub(super) const MAX_REPEAT: u32 = 2000;

/// The limits: generous for any grammar a schema or a tool list yields (llama.cpp's
/// and shepherd's converters stay far below), small enough that parsing stays well
/// under a second and llama.cpp's recursion fits the generation thread's stack (a
/// chain of 15,000 rules fits 2 MiB; that thread has 64 MiB, so 32,768 leaves a
/// wide margin).
pub const LIMITS: Limits = Limits {
    bytes: 256 * 1024,
    rules: 32 * 1024,
    alternatives: 8192,
    depth: 100,
    repeat: MAX_REPEAT as u64,
    symbols: 1 << 20,
};

/// A grammar past one of the [`Limits`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitError {
    /// The limit's name as the message gives it.
    pub what: &'static str,
    pub limit: u64,
    /// How far the grammar got when it crossed the limit (at least `limit + 1`).
    pub found: u64,
}

impl fmt::Display for LimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the grammar is too large: {} {} (the limit is {})",
            self.found, self.what, self.limit
        )
    }
}

/// Checks `text` against [`LIMITS`].
pub fn check(text: &str) -> Result<(), LimitError> {
    check_with(text, &LIMITS)
}

/// One group being read: the symbols of its finished items, and of its last one
/// (which a repetition after it multiplies).
#[derive(Default)]
struct Frame {
    total: u64,
    last: u64,
}

impl Frame {
    fn item(&mut self, size: u64) {
        self.total = self.total.saturating_add(self.last);
        self.last = size;
    }
    fn size(&self) -> u64 {
        self.total.saturating_add(self.last)
    }
}

/// Checks `text` against `limits`.
pub fn check_with(text: &str, limits: &Limits) -> Result<(), LimitError> {
    let over = |what, limit: u64, found: u64| {
        if found > limit {
            Err(LimitError { what, limit, found })
        } else {
            Ok(())
        }
    };
    over("bytes", limits.bytes as u64, text.len() as u64)?;
    let bytes = text.as_bytes();
    let mut frames = vec![Frame::default()];
    let (mut rules, mut alternatives) = (0u64, 0u64);
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        i += 1;
        match b {
            b'#' => i = skip_until(bytes, i, b'\n'),
            b'"' => {
                let (end, chars) = literal_end(bytes, i, b'"');
                i = end;
                item(&mut frames, chars.max(1));
            }
            b'[' => {
                let (end, _) = literal_end(bytes, i, b']');
                i = end;
                item(&mut frames, 1);
            }
            b'<' => {
                i = skip_until(bytes, i, b'>');
                item(&mut frames, 1);
            }
            b'(' => {
                rules += 1;
                frames.push(Frame::default());
                over(
                    "nested groups",
                    limits.depth as u64,
                    frames.len() as u64 - 1,
                )?;
            }
            b')' if frames.len() > 1 => {
                let size = frames.pop().map_or(0, |f| f.size());
                item(&mut frames, size);
            }
            b'|' => alternatives += 1,
            b'*' | b'+' | b'?' => rules += 1,
            b'{' => {
                let (end, counts) = repetition(bytes, i);
                i = end;
                let most = counts.iter().copied().max().unwrap_or(0);
                over("repetitions in one {m,n}", limits.repeat, most)?;
                rules = rules.saturating_add(most.max(1));
                if let Some(frame) = frames.last_mut() {
                    frame.last = frame.last.saturating_mul(most.max(1));
                }
            }
            b':' if bytes[i..].starts_with(b":=") => {
                i += 2;
                rules += 1;
            }
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' => {
                while i < bytes.len()
                    && (bytes[i].is_ascii_alphanumeric() || b"-_".contains(&bytes[i]))
                {
                    i += 1;
                }
                item(&mut frames, 1);
            }
            b'.' => item(&mut frames, 1),
            _ => {}
        }
        over("rules, groups and repetitions", limits.rules as u64, rules)?;
        over("alternatives", limits.alternatives as u64, alternatives)?;
        let symbols = frames.iter().fold(0u64, |n, f| n.saturating_add(f.size()));
        over("symbols with repetitions expanded", limits.symbols, symbols)?;
    }
    Ok(())
}

/// A finished item of `size` symbols in the innermost group.
fn item(frames: &mut [Frame], size: u64) {
    if let Some(frame) = frames.last_mut() {
        frame.item(size);
    }
}

/// The index just past the next `end` byte from `i` (or the text's end).
fn skip_until(bytes: &[u8], mut i: usize, end: u8) -> usize {
    while i < bytes.len() && bytes[i] != end {
        i += 1;
    }
    (i + 1).min(bytes.len())
}

/// The index just past the closing `end` of a literal or class opened before
/// `i` (backslash escapes skipped), and the characters it holds.
fn literal_end(bytes: &[u8], mut i: usize, end: u8) -> (usize, u64) {
    let mut chars = 0u64;
    while i < bytes.len() && bytes[i] != end {
        if bytes[i] == b'\\' {
            i += 1;
        }
        // A UTF-8 character counts once, at its first byte.
        if i < bytes.len() && bytes[i] & 0xC0 != 0x80 {
            chars += 1;
        }
        i += 1;
    }
    ((i + 1).min(bytes.len()), chars)
}

/// The counts of a `{m}`, `{m,}` or `{m,n}` opened before `i` (digits only,
/// saturating), and the index past its `}`.
fn repetition(bytes: &[u8], mut i: usize) -> (usize, Vec<u64>) {
    let mut counts = vec![0u64];
    while i < bytes.len() && bytes[i] != b'}' {
        match bytes[i] {
            d @ b'0'..=b'9' => {
                if let Some(n) = counts.last_mut() {
                    *n = n.saturating_mul(10).saturating_add(u64::from(d - b'0'));
                }
            }
            b',' => counts.push(0),
            _ => {}
        }
        i += 1;
    }
    // `{m,}` has no upper count: its last copy repeats, so m + 1 copies are built.
    if counts.len() == 2 && bytes[i.saturating_sub(1)] == b',' {
        counts[1] = counts[0].saturating_add(1);
    }
    ((i + 1).min(bytes.len()), counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words_of(n: usize) -> String {
        (0..n)
            .map(|i| format!("\"word{i:05}\""))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn refused(text: &str) -> &'static str {
        check(text).expect_err(text.get(..60).unwrap_or(text)).what
    }

    #[test]
    fn every_grammar_shepherd_writes_passes() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "maxLength": 2000},
                "lines": {"type": "array", "items": {"type": "integer"}, "maxItems": 2000},
                "mode": {"enum": ["a", "b", "c"]},
                "when": {"type": "string", "format": "date-time"}
            },
            "required": ["path"]
        });
        let grammar = super::super::schema_grammar(&schema).unwrap();
        assert_eq!(check(&grammar), Ok(()), "{grammar}");
        let any = super::super::json_grammar(None).unwrap();
        assert_eq!(check(&any), Ok(()));
    }

    #[test]
    fn what_crashes_or_stalls_llama_cpp_is_refused_by_name() {
        let nested = format!("root ::= {}\"a\"{}", "(".repeat(20_000), ")".repeat(20_000));
        assert_eq!(refused(&nested), "nested groups");
        // Each repetition is rules of llama.cpp's own making.
        let chain = format!("root ::= {}", "\"a\"{2000} ".repeat(17));
        assert_eq!(refused(&chain), "rules, groups and repetitions");
        let alternatives = format!(
            "root ::= {}",
            (0..20_000)
                .map(|i| format!("\"w{i}\""))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        assert_eq!(refused(&alternatives), "alternatives");
        let long = format!("root ::= {}", words_of(30_000));
        assert_eq!(refused(&long), "bytes");
        let short = format!(
            "root ::= {}",
            (0..9_000)
                .map(|i| format!("x{i}"))
                .collect::<Vec<_>>()
                .join("|")
        );
        assert_eq!(refused(&short), "alternatives");
        assert_eq!(
            refused("root ::= ((\"a\"{2000}){2000}){2000}"),
            "symbols with repetitions expanded"
        );
        assert_eq!(
            refused("root ::= \"a\"{0,99999999999999999999999}"),
            "repetitions in one {m,n}"
        );
        assert_eq!(refused("root ::= \"a\"{3000,}"), "repetitions in one {m,n}");
        let error = check(&"#".repeat(300 * 1024)).unwrap_err();
        assert_eq!(
            error.to_string(),
            "the grammar is too large: 307200 bytes (the limit is 262144)"
        );
    }

    #[test]
    fn literals_classes_and_comments_are_not_structure() {
        // Parentheses, bars and braces inside literals, classes, tokens and comments.
        let text = format!(
            "root ::= \"{}\" [|(){{}}\\]] <|im_end|> # (((|||\n",
            "(|{9999}".repeat(100)
        );
        assert_eq!(check(&text), Ok(()));
        // Unterminated literals and stray closers end quietly (llama.cpp reports them).
        assert_eq!(check("root ::= \"abc"), Ok(()));
        assert_eq!(check("root ::= ))) [abc"), Ok(()));
        assert_eq!(check("root ::= \"a\"{"), Ok(()));
    }

    #[test]
    fn limits_hold_at_their_edge() {
        let at = |n: usize| format!("root ::= {}\"a\"{}", "(".repeat(n), ")".repeat(n));
        assert_eq!(check(&at(LIMITS.depth)), Ok(()));
        assert_eq!(refused(&at(LIMITS.depth + 1)), "nested groups");
        assert_eq!(check("root ::= \"a\"{2000}"), Ok(()));
        assert_eq!(check("root ::= (\"ab\"{2000}){200}"), Ok(()));
    }
}
