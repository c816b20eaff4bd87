//! The one tool-call accumulator: merges streamed tool-call fragments into
//! whole [`ToolCall`]s.
//!
//! OpenAI-style deltas carry an `index`, an `id` and `name` in the first
//! fragment and pieces of the `arguments` string afterwards; parallel calls
//! interleave. Backends whose calls arrive whole (Ollama, Gemini) push them
//! in one piece. The output filter's text-parsed calls meet these in
//! [`ensure_ids`], which gives every call of a reply a unique id.

use std::collections::HashSet;

use serde_json::Value;

use crate::core::ToolCall;

/// One fragment of a streamed tool call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToolCallDelta<'a> {
    pub index: Option<usize>,
    pub id: Option<&'a str>,
    pub name: Option<&'a str>,
    /// A piece of the arguments' JSON text.
    pub arguments: Option<&'a str>,
}

#[derive(Debug, Clone)]
struct Partial {
    index: Option<usize>,
    id: String,
    name: String,
    arguments: String,
}

/// Collects fragments until the stream ends.
#[derive(Debug, Clone, Default)]
pub struct ToolCallAccumulator {
    partials: Vec<Partial>,
}

impl ToolCallAccumulator {
    pub fn new() -> Self {
        Self::default()
    }

    /// Merges one fragment.
    pub fn push(&mut self, delta: ToolCallDelta<'_>) {
        let slot = self.slot_for(&delta);
        let partial = &mut self.partials[slot];
        if let Some(id) = delta.id.filter(|id| !id.is_empty()) {
            partial.id = id.to_string();
        }
        if let Some(name) = delta.name {
            // Names arrive whole in the first fragment; a few servers repeat them.
            if partial.name.is_empty() || !partial.name.ends_with(name) {
                partial.name.push_str(name);
            }
        }
        if let Some(arguments) = delta.arguments {
            partial.arguments.push_str(arguments);
        }
    }

    /// Adds a call that arrived whole with its arguments as a JSON value
    /// (Gemini and Ollama send calls this way).
    pub fn push_whole(&mut self, id: Option<&str>, name: &str, arguments: &Value) {
        let text = match arguments {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        self.partials.push(Partial {
            index: None,
            id: id.unwrap_or_default().to_string(),
            name: name.to_string(),
            arguments: text,
        });
    }

    /// Which partial call a fragment belongs to, creating one when it starts a call.
    fn slot_for(&mut self, delta: &ToolCallDelta<'_>) -> usize {
        let new_id = delta.id.filter(|id| !id.is_empty());
        let existing = match delta.index {
            Some(index) => self.partials.iter().rposition(|p| p.index == Some(index)),
            None => self.partials.len().checked_sub(1),
        };
        match existing {
            // A different id under the same index (or with no index) starts a new call.
            Some(slot) if !starts_new_call(&self.partials[slot], new_id) => slot,
            _ => {
                self.partials.push(Partial {
                    index: delta.index,
                    id: String::new(),
                    name: String::new(),
                    arguments: String::new(),
                });
                self.partials.len() - 1
            }
        }
    }

    /// The whole calls in index order, arguments parsed, ids unique.
    pub fn finish(self) -> Vec<ToolCall> {
        let mut partials: Vec<(usize, Partial)> = self.partials.into_iter().enumerate().collect();
        partials.sort_by_key(|(seq, p)| (p.index.unwrap_or(usize::MAX), *seq));
        let mut calls: Vec<ToolCall> = partials
            .into_iter()
            .map(|(_, p)| p)
            .filter(|p| !p.name.is_empty())
            .map(|p| ToolCall {
                id: p.id,
                name: p.name,
                arguments: parse_arguments(&p.arguments),
            })
            .collect();
        ensure_ids(&mut calls);
        calls
    }
}

fn starts_new_call(partial: &Partial, new_id: Option<&str>) -> bool {
    match new_id {
        Some(id) => !partial.id.is_empty() && partial.id != id,
        None => false,
    }
}

/// Parses a call's arguments text: empty is `{}`; text that is not JSON is
/// kept as a string so the agent can tell the model its arguments were malformed.
pub fn parse_arguments(text: &str) -> Value {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(trimmed).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// Gives every call without an id, or with an id already used earlier in the
/// list, a synthesised `call_<n>` (n counting from the call's position), so
/// the same reply always gets the same ids.
pub fn ensure_ids(calls: &mut [ToolCall]) {
    let mut used: HashSet<String> = calls
        .iter()
        .filter(|c| !c.id.is_empty())
        .map(|c| c.id.clone())
        .collect();
    let mut seen = HashSet::new();
    for (position, call) in calls.iter_mut().enumerate() {
        if !call.id.is_empty() && seen.insert(call.id.clone()) {
            continue;
        }
        let mut n = position;
        while used.contains(&format!("call_{n}")) {
            n += 1;
        }
        call.id = format!("call_{n}");
        used.insert(call.id.clone());
        seen.insert(call.id.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn d<'a>(
        index: Option<usize>,
        id: Option<&'a str>,
        name: Option<&'a str>,
        arguments: Option<&'a str>,
    ) -> ToolCallDelta<'a> {
        ToolCallDelta {
            index,
            id,
            name,
            arguments,
        }
    }

    fn call(id: &str, name: &str, arguments: Value) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments,
        }
    }

    fn check(deltas: &[ToolCallDelta<'_>], expected: &[ToolCall]) {
        let mut acc = ToolCallAccumulator::new();
        for delta in deltas {
            acc.push(*delta);
        }
        assert_eq!(acc.finish(), expected, "deltas {deltas:?}");
    }

    #[test]
    fn fragments_merge_by_index() {
        check(
            &[
                d(Some(0), Some("call_a"), Some("read"), Some("")),
                d(Some(0), None, None, Some("{\"path\":")),
                d(Some(0), None, None, Some("\"x\"}")),
            ],
            &[call("call_a", "read", json!({"path":"x"}))],
        );
    }

    #[test]
    fn parallel_calls_interleave_and_come_out_in_index_order() {
        check(
            &[
                d(Some(1), Some("B"), Some("write"), None),
                d(Some(0), Some("A"), Some("read"), None),
                d(Some(1), None, None, Some("{\"a\"")),
                d(Some(0), None, None, Some("{\"b\":2")),
                d(Some(1), None, None, Some(":1}")),
                d(Some(0), None, None, Some("}")),
            ],
            &[
                call("A", "read", json!({"b":2})),
                call("B", "write", json!({"a":1})),
            ],
        );
    }

    #[test]
    fn whole_calls_and_missing_index() {
        check(
            &[
                d(None, Some("x1"), Some("a"), Some("{}")),
                d(None, Some("x2"), Some("b"), Some("{\"k\"")),
                d(None, None, None, Some(":true}")),
            ],
            &[
                call("x1", "a", json!({})),
                call("x2", "b", json!({"k":true})),
            ],
        );
    }

    #[test]
    fn new_id_under_a_reused_index_starts_a_new_call() {
        check(
            &[
                d(Some(0), Some("one"), Some("a"), Some("{}")),
                d(Some(0), Some("two"), Some("b"), Some("{}")),
            ],
            &[call("one", "a", json!({})), call("two", "b", json!({}))],
        );
    }

    #[test]
    fn arguments_empty_invalid_and_ids_synthesised() {
        check(
            &[
                d(Some(0), None, Some("a"), None),
                d(Some(1), None, Some("b"), Some("{\"broken\":")),
            ],
            &[
                call("call_0", "a", json!({})),
                call("call_1", "b", json!("{\"broken\":")),
            ],
        );
    }

    #[test]
    fn nameless_fragments_are_dropped() {
        check(&[d(Some(0), None, None, Some("{}"))], &[]);
    }

    #[test]
    fn push_whole_accepts_objects_and_strings() {
        let mut acc = ToolCallAccumulator::new();
        acc.push_whole(None, "a", &json!({"x":1}));
        acc.push_whole(Some("id9"), "b", &json!("{\"y\":2}"));
        assert_eq!(
            acc.finish(),
            [
                call("call_0", "a", json!({"x":1})),
                call("id9", "b", json!({"y":2}))
            ]
        );
    }

    #[test]
    fn ensure_ids_fixes_duplicates_and_blanks_stably() {
        let mut calls = vec![
            call("call_1", "a", json!({})),
            call("", "b", json!({})),
            call("call_1", "c", json!({})),
        ];
        ensure_ids(&mut calls);
        let ids: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["call_1", "call_2", "call_3"]);
    }
}
