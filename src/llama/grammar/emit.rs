//! Typed schema nodes to GBNF rules, written as llama.cpp's converter writes
//! them (`common_chat_schema_converter`): the same primitives, the same rule
//! names (`a-kv`, `a-rest`, `ref-defs-node`, `item`, ...), the same object and
//! repetition shapes, so a grammar reads like llama.cpp's for the same schema.
//!
//! [`Rules`] is the rule table one grammar is built in; several schemas (one per
//! tool) can share it.

use std::collections::{BTreeMap, HashSet};

use serde_json::Value;

use super::node::{Document, Format, Node, Object, Property, StringNode};
use super::range;

mod regex;

/// llama.cpp's optional whitespace between tokens.
const SPACE_RULE: &str = r#"| " " | "\n"{1,2} [ \t]{0,20}"#;

/// A string character with no escape: the keys that may not equal a property's
/// name are written with these only, so no escape can spell such a name.
const PLAIN_CHAR: &str = r#"[^"\\\x7F\x00-\x1F]"#;

/// llama.cpp's primitive rules (and this converter's `plain-char`): name, body,
/// and the rules the body uses.
const PRIMITIVES: &[(&str, &str, &[&str])] = &[
    ("boolean", r#"("true" | "false")"#, &[]),
    ("decimal-part", "[0-9]{1,16}", &[]),
    ("integral-part", "[0] | [1-9] [0-9]{0,15}", &[]),
    (
        "number",
        r#"("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?"#,
        &["integral-part", "decimal-part"],
    ),
    ("integer", r#"("-"? integral-part)"#, &["integral-part"]),
    (
        "value",
        "object | array | string | number | boolean | null",
        &["object", "array", "string", "number", "boolean", "null"],
    ),
    (
        "object",
        r#""{" space ( string ":" space value ("," space string ":" space value)* )? space "}""#,
        &["string", "value"],
    ),
    (
        "array",
        r#""[" space ( value ("," space value)* )? space "]""#,
        &["value"],
    ),
    (
        "uuid",
        r#""\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\"""#,
        &[],
    ),
    (
        "char",
        r#"[^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})"#,
        &[],
    ),
    ("string", r#""\"" char* "\"""#, &["char"]),
    ("null", r#""null""#, &[]),
    ("plain-char", PLAIN_CHAR, &[]),
    (
        "date",
        r#"[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )"#,
        &[],
    ),
    (
        "time",
        r#"([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )"#,
        &[],
    ),
    ("date-time", r#"date "T" time"#, &["date", "time"]),
    ("date-string", r#""\"" date "\"""#, &["date"]),
    ("time-string", r#""\"" time "\"""#, &["time"]),
    ("date-time-string", r#""\"" date-time "\"""#, &["date-time"]),
];

fn primitive_rule(name: &str) -> Option<(&'static str, &'static [&'static str])> {
    PRIMITIVES
        .iter()
        .find(|(n, ..)| *n == name)
        .map(|(_, body, deps)| (*body, *deps))
}

/// Names a schema's rules may not take: they would shadow a primitive.
fn is_reserved(name: &str) -> bool {
    name == "root" || primitive_rule(name).is_some()
}

/// The rules of one grammar, by name (rendered in name order, as llama.cpp does).
pub(crate) struct Rules {
    rules: BTreeMap<String, String>,
    /// Names promised to `$ref` targets that are being written.
    reserved: HashSet<String>,
}

impl Rules {
    pub(crate) fn new() -> Rules {
        let mut rules = BTreeMap::new();
        rules.insert("space".to_string(), SPACE_RULE.to_string());
        Rules {
            rules,
            reserved: HashSet::new(),
        }
    }

    /// Adds the rule `name ::= body` under `name` (made a valid rule name), or
    /// under `name` plus a number when another body has it; returns the name.
    pub(crate) fn add(&mut self, name: &str, body: String) -> String {
        let name = rule_name(name);
        if self.reserved.remove(&name) {
            self.rules.insert(name.clone(), body);
            return name;
        }
        if self.rules.get(&name).is_none_or(|b| *b == body) {
            self.rules.insert(name.clone(), body);
            return name;
        }
        let mut i = 0;
        loop {
            let key = format!("{name}{i}");
            let taken =
                self.reserved.contains(&key) || self.rules.get(&key).is_some_and(|b| *b != body);
            if !taken {
                self.rules.insert(key.clone(), body);
                return key;
            }
            i += 1;
        }
    }

    /// A free name for a rule that is still to be written.
    fn reserve(&mut self, name: &str) -> String {
        let name = rule_name(name);
        let free = |key: &String| !self.rules.contains_key(key) && !self.reserved.contains(key);
        let key = if free(&name) {
            name
        } else {
            (0..)
                .map(|i| format!("{name}{i}"))
                .find(free)
                .unwrap_or_default()
        };
        self.reserved.insert(key.clone());
        key
    }

    /// The primitive rule `kind` (and the rules it uses); returns its name.
    pub(crate) fn primitive(&mut self, kind: &str) -> String {
        self.primitive_as(kind, kind)
    }

    /// The primitive `kind`'s body under `name` (only `root` differs), and the
    /// primitives it uses.
    fn primitive_as(&mut self, name: &str, kind: &str) -> String {
        let Some((body, deps)) = primitive_rule(kind) else {
            return self.add(name, r#""""#.to_string());
        };
        let name = self.add(name, body.to_string());
        for dep in deps {
            if !self.rules.contains_key(*dep) {
                self.primitive(dep);
            }
        }
        name
    }

    /// Writes the rules of `doc` under `name`; returns the rule for its value.
    pub(super) fn schema(&mut self, doc: &Document, name: &str) -> String {
        let mut emitter = Emitter {
            rules: self,
            doc,
            refs: vec![RefName::Pending; doc.refs.len()],
        };
        emitter.visit(&doc.root, name)
    }

    /// The grammar: `root ::= root_body` first, then every rule by name.
    pub(crate) fn render(&self, root_body: &str) -> String {
        let mut out = format!("root ::= {root_body}\n");
        for (name, body) in &self.rules {
            out.push_str(&format!("{name} ::= {body}\n"));
        }
        out
    }

    /// Every rule by name, `root` among them (llama.cpp's output).
    #[cfg(test)]
    pub(super) fn render_all(&self) -> String {
        self.rules
            .iter()
            .map(|(name, body)| format!("{name} ::= {body}\n"))
            .collect()
    }
}

/// `name` with each run of characters a rule name cannot hold made one `-`.
fn rule_name(name: &str) -> String {
    let mut out = String::new();
    let mut in_run = false;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '-' {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('-');
            in_run = true;
        }
    }
    out
}

/// A `$ref` target's rule, as the writing goes.
#[derive(Debug, Clone)]
enum RefName {
    Pending,
    /// Being written under this (reserved) name: a recursive use refers to it.
    Writing(String),
    Done(String),
}

struct Emitter<'r, 'd> {
    rules: &'r mut Rules,
    doc: &'d Document,
    refs: Vec<RefName>,
}

impl Emitter<'_, '_> {
    /// The rule for `node`, named after `name` (llama.cpp's `visit`).
    fn visit(&mut self, node: &Node, name: &str) -> String {
        let rule = if is_reserved(name) {
            format!("{name}-")
        } else if name.is_empty() {
            "root".to_string()
        } else {
            name.to_string()
        };
        let sub = if name.is_empty() {
            String::new()
        } else {
            format!("{name}-")
        };
        match node {
            Node::Ref(id) => {
                let target = self.reference(*id);
                self.rules.add(&rule, target)
            }
            Node::AnyOf(alternatives) => {
                let body = self.union(name, alternatives);
                self.rules.add(&rule, body)
            }
            Node::Const(value) => self.rules.add(&rule, json_literal(value)),
            Node::Enum(values) => {
                let literals: Vec<String> = values.iter().map(json_literal).collect();
                self.rules.add(&rule, format!("({})", literals.join(" | ")))
            }
            Node::Object(object) => self.object(object, name, &rule),
            Node::Tuple(items) => {
                let mut parts = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    parts.push(self.visit(item, &format!("{sub}tuple-{i}")));
                }
                let body = format!(r#""[" space {} space "]""#, parts.join(r#" "," space "#));
                self.rules.add(&rule, body)
            }
            Node::Array { items, min, max } => self.array(items, (*min, *max), &sub, &rule),
            Node::String(string) => self.string(string, &rule),
            Node::Integer {
                min: None,
                max: None,
            } => self.primitive(&rule, "integer"),
            Node::Integer { min, max } => {
                let body = format!("({})", range::int_range(*min, *max));
                self.rules.add(&rule, body)
            }
            Node::Number => self.primitive(&rule, "number"),
            Node::Boolean => self.primitive(&rule, "boolean"),
            Node::Null => self.primitive(&rule, "null"),
            Node::Any => {
                let value = self.rules.primitive("value");
                self.rules.add(&rule, value)
            }
        }
    }

    /// The primitive `kind`: its own rule, or the root's body at the root
    /// (llama.cpp's `_visit_primitive`).
    fn primitive(&mut self, rule: &str, kind: &str) -> String {
        let name = if rule == "root" { "root" } else { kind };
        self.rules.primitive_as(name, kind)
    }

    /// The rule of `$ref` target `id`, written on first use.
    fn reference(&mut self, id: usize) -> String {
        match &self.refs[id] {
            RefName::Writing(name) | RefName::Done(name) => return name.clone(),
            RefName::Pending => {}
        }
        let doc = self.doc;
        let target = &doc.refs[id];
        let fragment = target.pointer.split_once('#').map_or("", |(_, f)| f);
        let name = self.rules.reserve(&format!("ref{fragment}"));
        self.refs[id] = RefName::Writing(name.clone());
        let written = self.visit(&target.node, &name);
        // A target without a rule of its own (a primitive) uses none of the name.
        self.rules.reserved.remove(&name);
        self.refs[id] = RefName::Done(written.clone());
        written
    }

    fn union(&mut self, name: &str, alternatives: &[Node]) -> String {
        let prefix = if name.is_empty() {
            "alternative-".to_string()
        } else {
            format!("{name}-")
        };
        let mut rules = Vec::new();
        for (i, alternative) in alternatives.iter().enumerate() {
            rules.push(self.visit(alternative, &format!("{prefix}{i}")));
        }
        rules.join(" | ")
    }

    fn array(
        &mut self,
        items: &Node,
        (min, max): (u32, Option<u32>),
        sub: &str,
        rule: &str,
    ) -> String {
        if matches!(items, Node::Any) && min == 0 && max.is_none() {
            return self.primitive(rule, "array");
        }
        let item = self.visit(items, &format!("{sub}item"));
        let repeated = build_repetition(&item, min, max, Some(r#""," space"#));
        self.rules
            .add(rule, format!(r#""[" space {repeated} space "]""#))
    }

    fn string(&mut self, string: &StringNode, rule: &str) -> String {
        match string {
            StringNode::Pattern(pattern) => regex::emit(pattern, rule, self.rules),
            StringNode::Format(Format::Uuid) => self.primitive(rule, "uuid"),
            StringNode::Format(format) => {
                let kind = match format {
                    Format::Date => "date-string",
                    Format::Time => "time-string",
                    _ => "date-time-string",
                };
                let primitive = self.rules.primitive(kind);
                self.rules.add(rule, primitive)
            }
            StringNode::Plain { min: 0, max: None } => self.primitive(rule, "string"),
            StringNode::Plain { min, max } => {
                let char_rule = self.rules.primitive("char");
                let repeated = build_repetition(&char_rule, *min, *max, None);
                self.rules.add(rule, format!(r#""\"" {repeated} "\"""#))
            }
        }
    }

    fn object(&mut self, object: &Object, name: &str, rule: &str) -> String {
        if object.properties.is_empty() && matches!(object.additional.as_deref(), Some(Node::Any)) {
            let primitive = self.rules.primitive("object");
            return self.rules.add(rule, primitive);
        }
        let body = self.object_body(&object.properties, name, object.additional.as_deref());
        self.rules.add(rule, body)
    }

    /// llama.cpp's object: the required members in schema order, then any
    /// ordered subset of the optional ones (other members last).
    fn object_body(
        &mut self,
        properties: &[Property],
        name: &str,
        additional: Option<&Node>,
    ) -> String {
        let prefix = if name.is_empty() {
            String::new()
        } else {
            format!("{name}-")
        };
        let mut required = Vec::new();
        let mut optional = Vec::new();
        for property in properties {
            let value = self.visit(&property.node, &format!("{prefix}{}", property.name));
            let key = literal(&Value::String(property.name.clone()).to_string());
            let body = format!(r#"{key} space ":" space {value}"#);
            let kv = self
                .rules
                .add(&format!("{prefix}{}-kv", property.name), body);
            if property.required {
                required.push(kv);
            } else {
                optional.push(Optional {
                    key: property.name.clone(),
                    kv,
                    others: false,
                });
            }
        }
        if let Some(extra) = additional {
            let kv = self.other_members(properties, extra, &prefix);
            optional.push(Optional {
                key: "*".to_string(),
                kv,
                others: true,
            });
        }
        if required.is_empty() && optional.is_empty() {
            return r#""{" space "}""#.to_string();
        }
        let mut body = format!(r#""{{" space {}"#, required.join(r#" "," space "#));
        if !optional.is_empty() {
            body.push_str(" (");
            if !required.is_empty() {
                body.push_str(r#" "," space ( "#);
            }
            body.push_str(&self.optional_members(&optional, &prefix).join(" | "));
            if !required.is_empty() {
                body.push_str(" )");
            }
            body.push_str(" )?");
        }
        body.push_str(r#" space "}""#);
        body
    }

    /// The key-value rule of the members that are not properties.
    fn other_members(&mut self, properties: &[Property], extra: &Node, prefix: &str) -> String {
        let sub = format!("{prefix}additional");
        let value = match extra {
            Node::Any => self.rules.primitive("value"),
            node => self.visit(node, &format!("{sub}-value")),
        };
        let key = if properties.is_empty() {
            self.rules.primitive("string")
        } else {
            let names: Vec<&str> = properties.iter().map(|p| p.name.as_str()).collect();
            let char_rule = self.rules.primitive("plain-char");
            let body = not_strings(&names, &char_rule);
            self.rules.add(&format!("{sub}-k"), body)
        };
        self.rules
            .add(&format!("{sub}-kv"), format!(r#"{key} ":" space {value}"#))
    }

    /// One alternative per optional member that comes first, each followed by
    /// a `-rest` rule for the later ones (llama.cpp's `get_recursive_refs`).
    fn optional_members(&mut self, optional: &[Optional], prefix: &str) -> Vec<String> {
        let n = optional.len();
        // rests[j]: the rule for what may follow member j.
        let mut rests: Vec<Option<String>> = vec![None; n];
        for j in (0..n.saturating_sub(1)).rev() {
            let next = &optional[j + 1];
            let mut body = format!(
                "{}{}",
                next.comma_ref(),
                if next.others { "*" } else { "?" }
            );
            if let Some(rest) = &rests[j + 1] {
                body.push_str(&format!(" {rest}"));
            }
            let rest = self
                .rules
                .add(&format!("{prefix}{}-rest", optional[j].key), body);
            rests[j] = Some(rest);
        }
        let mut alternatives = Vec::new();
        for (member, rest) in optional.iter().zip(&rests) {
            let mut alternative = member.kv.clone();
            if member.others {
                alternative.push_str(&format!(" {}*", member.comma_ref()));
            }
            if let Some(rest) = rest {
                alternative.push_str(&format!(" {rest}"));
            }
            alternatives.push(alternative);
        }
        alternatives
    }
}

/// An optional member of an object: a property, or (`others`) the members
/// that are not properties.
struct Optional {
    key: String,
    kv: String,
    others: bool,
}

impl Optional {
    fn comma_ref(&self) -> String {
        format!(r#"( "," space {} )"#, self.kv)
    }
}

/// `item` repeated `min` to `max` times, `separator` between two (llama.cpp's
/// `build_repetition`).
pub(super) fn build_repetition(
    item: &str,
    min: u32,
    max: Option<u32>,
    separator: Option<&str>,
) -> String {
    if max == Some(0) {
        return String::new();
    }
    if min == 0 && max == Some(1) {
        return format!("{item}?");
    }
    let Some(separator) = separator else {
        return match (min, max) {
            (1, None) => format!("{item}+"),
            (0, None) => format!("{item}*"),
            (min, None) => format!("{item}{{{min},}}"),
            (min, Some(max)) => format!("{item}{{{min},{max}}}"),
        };
    };
    let rest = format!("({separator} {item})");
    let more = build_repetition(&rest, min.saturating_sub(1), max.map(|m| m - 1), None);
    let result = format!("{item} {more}");
    if min == 0 {
        format!("({result})?")
    } else {
        result
    }
}

/// A JSON string (quotes included) that is none of `names`, as llama.cpp's
/// `_not_strings` writes it over a trie of the names, but with plain
/// characters only (`char_rule`): no escape can then spell a name. Names that
/// need escapes cannot be produced that way and are left out of the trie.
fn not_strings(names: &[&str], char_rule: &str) -> String {
    let plain = |name: &&&str| {
        !name
            .chars()
            .any(|c| c < ' ' || c == '"' || c == '\\' || c == '\u{7f}')
    };
    let trie = Trie::new(names.iter().filter(plain).copied());
    let root = &trie.nodes[0];
    if root.children.is_empty() {
        let repeat = if root.end { '+' } else { '*' };
        return format!(r#"["] {char_rule}{repeat} ["]"#);
    }
    let mut out = String::from(r#"["] ( "#);
    // Depth-first with an explicit stack: names may be long.
    let mut stack: Vec<(usize, usize)> = vec![(0, 0)];
    while let Some(&(node, next)) = stack.last() {
        let children = &trie.nodes[node].children;
        if let Some(&(c, child)) = children.get(next) {
            if next > 0 {
                out.push_str(" | ");
            }
            if let Some(top) = stack.last_mut() {
                top.1 += 1;
            }
            out.push_str(&format!("[{}]", class_char(c)));
            if trie.nodes[child].children.is_empty() {
                out.push_str(&format!(" {char_rule}+"));
            } else {
                out.push_str(" (");
                stack.push((child, 0));
            }
            continue;
        }
        let rejects: String = children.iter().map(|&(c, _)| class_char(c)).collect();
        out.push_str(&format!(r#" | [^"\\\x7F\x00-\x1F{rejects}] {char_rule}*"#));
        stack.pop();
        if !stack.is_empty() {
            out.push(')');
        }
    }
    out.push_str(" )");
    if !root.end {
        out.push('?');
    }
    out.push_str(r#" ["]"#);
    out
}

struct Trie {
    nodes: Vec<TrieNode>,
}

#[derive(Default)]
struct TrieNode {
    /// By character, in order.
    children: Vec<(char, usize)>,
    /// A name ends here.
    end: bool,
}

impl Trie {
    fn new<'n>(names: impl Iterator<Item = &'n str>) -> Trie {
        let mut nodes = vec![TrieNode::default()];
        for name in names {
            let mut at = 0;
            for c in name.chars() {
                let found = nodes[at].children.binary_search_by_key(&c, |&(k, _)| k);
                at = match found {
                    Ok(i) => nodes[at].children[i].1,
                    Err(i) => {
                        let child = nodes.len();
                        nodes.push(TrieNode::default());
                        nodes[at].children.insert(i, (c, child));
                        child
                    }
                };
            }
            nodes[at].end = true;
        }
        Trie { nodes }
    }
}

/// `text` as a GBNF string literal.
pub(crate) fn literal(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c < ' ' => out.push_str(&format!("\\x{:02X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The JSON text of `value` as a GBNF literal.
fn json_literal(value: &Value) -> String {
    literal(&value.to_string())
}

/// `c` inside a GBNF character class.
pub(super) fn class_char(c: char) -> String {
    match c {
        '\\' => "\\\\".to_string(),
        ']' => "\\]".to_string(),
        '[' => "\\[".to_string(),
        '-' => "\\-".to_string(),
        '"' => "\\\"".to_string(),
        '^' => "\\x5E".to_string(),
        '\u{2028}' => "\\u2028".to_string(),
        '\u{2029}' => "\\u2029".to_string(),
        c if c < ' ' || c == '\u{7f}' => format!("\\x{:02X}", u32::from(c)),
        c => c.to_string(),
    }
}
