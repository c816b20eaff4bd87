//! Calls written as Python (LFM2's `[NAME(k=v)]`, Llama 3.x's `<|python_tag|>`
//! built-in calls) and Gemma 4's `call:NAME{key:VALUE}`: one small cursor
//! ([`PyParser`]) over literal arguments reads both.

use serde_json::{Map, Value};

use super::{call, parse_json_object};
use crate::core::ToolCall;

/// Llama 3.x after `<|python_tag|>`: JSON calls (`;`-separated), a built-in tool's
/// `NAME.call(k=v)`, or code for the `python` tool.
pub fn parse_python_tag(rest: &str) -> Option<Vec<ToolCall>> {
    let rest = rest.trim();
    if rest.starts_with('{') {
        return rest
            .split(';')
            .filter(|part| !part.trim().is_empty())
            .map(parse_json_object)
            .collect();
    }
    if let Some((name, args)) = rest.split_once(".call(") {
        if is_identifier(name) {
            return python_calls(&format!("{name}({args}")).filter(|c| c.len() == 1);
        }
    }
    Some(vec![call("python", serde_json::json!({ "code": rest }))])
}

/// Gemma 4: `call:NAME{key:VALUE,…}`, keys bare, strings quoted by `<|"|>`.
pub fn parse_gemma4(body: &str) -> Option<Vec<ToolCall>> {
    let rest = body.trim().strip_prefix("call:")?;
    let open = rest.find('{')?;
    let mut parser = PyParser {
        text: &rest[open..],
        at: 0,
    };
    let arguments = parser.value()?;
    Some(vec![call(&rest[..open], arguments)])
}

fn is_identifier(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Python-style calls, `[NAME(k=v, …), …]` or one `NAME(k=v)` (LFM2, Llama's built-in tools).
pub fn python_calls(text: &str) -> Option<Vec<ToolCall>> {
    let mut parser = PyParser {
        text: text.trim(),
        at: 0,
    };
    let listed = parser.eat('[');
    let mut calls = Vec::new();
    loop {
        calls.push(parser.call()?);
        if !listed || !parser.eat(',') {
            break;
        }
    }
    if listed && !parser.eat(']') {
        return None;
    }
    Some(calls)
}

/// Gemma 4's string quote.
const GEMMA_QUOTE: &str = "<|\"|>";

/// A cursor over Python call syntax with literal arguments (and Gemma 4's values).
struct PyParser<'a> {
    text: &'a str,
    at: usize,
}

impl PyParser<'_> {
    fn rest(&self) -> &str {
        &self.text[self.at..]
    }

    fn skip_space(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start().len();
    }

    fn eat(&mut self, c: char) -> bool {
        self.skip_space();
        if self.rest().starts_with(c) {
            self.at += c.len_utf8();
            return true;
        }
        false
    }

    fn word(&mut self) -> &str {
        self.skip_space();
        let rest = self.rest();
        let len = rest
            .find(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.')))
            .unwrap_or(rest.len());
        self.at += len;
        &self.text[self.at - len..self.at]
    }

    fn call(&mut self) -> Option<ToolCall> {
        let name = self.word().to_string();
        if name.is_empty() || !self.eat('(') {
            return None;
        }
        let mut arguments = Map::new();
        while !self.eat(')') {
            let key = self.word().to_string();
            if key.is_empty() || !self.eat('=') {
                return None;
            }
            arguments.insert(key, self.value()?);
            self.eat(',');
        }
        Some(call(&name, Value::Object(arguments)))
    }

    fn value(&mut self) -> Option<Value> {
        self.skip_space();
        if let Some(quoted) = self.rest().strip_prefix(GEMMA_QUOTE) {
            let end = quoted.find(GEMMA_QUOTE)?;
            let text = quoted[..end].to_string();
            self.at += 2 * GEMMA_QUOTE.len() + end;
            return Some(Value::String(text));
        }
        let first = self.rest().chars().next()?;
        match first {
            '"' | '\'' => self.string(first).map(Value::String),
            '[' => {
                self.at += 1;
                let mut items = Vec::new();
                while !self.eat(']') {
                    items.push(self.value()?);
                    self.eat(',');
                }
                Some(Value::Array(items))
            }
            '{' => {
                self.at += 1;
                let mut object = Map::new();
                while !self.eat('}') {
                    self.skip_space();
                    let quoted = self.rest().starts_with(['"', '\''])
                        || self.rest().starts_with(GEMMA_QUOTE);
                    let key = match quoted {
                        true => match self.value()? {
                            Value::String(key) => key,
                            other => other.to_string(),
                        },
                        // Gemma 4 writes keys bare.
                        false => self.word().to_string(),
                    };
                    if !self.eat(':') {
                        return None;
                    }
                    object.insert(key, self.value()?);
                    self.eat(',');
                }
                Some(Value::Object(object))
            }
            _ => match self.word() {
                "True" | "true" => Some(Value::Bool(true)),
                "False" | "false" => Some(Value::Bool(false)),
                "None" | "null" => Some(Value::Null),
                number => serde_json::from_str(number).ok(),
            },
        }
    }

    fn string(&mut self, quote: char) -> Option<String> {
        let mut out = String::new();
        let mut chars = self.rest().char_indices().skip(1);
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    let (_, escaped) = chars.next()?;
                    out.push(match escaped {
                        'n' => '\n',
                        't' => '\t',
                        other => other,
                    });
                }
                c if c == quote => {
                    self.at += i + c.len_utf8();
                    return Some(out);
                }
                c => out.push(c),
            }
        }
        None
    }
}
