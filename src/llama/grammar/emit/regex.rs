//! A parsed `pattern` regex ([`super::super::pattern`]) written as GBNF rules
//! for the JSON text of a string (see the pattern module's doc).

use std::collections::HashMap;

use super::{build_repetition, class_char, literal, Rules};
use crate::llama::grammar::pattern::{Alternation, Atom, CharClass, Pattern, Piece};

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
