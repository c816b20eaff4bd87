//! Tool names on the wire: shepherd's names made acceptable to providers with
//! strict name rules, and turned back when the model calls them.
//!
//! Inside shepherd an MCP tool is `server:tool` (the server's name, a colon,
//! the server's own tool name). OpenAI, Gemini and Anthropic only accept
//! names matching `^[a-zA-Z0-9_-]{1,64}$` (Gemini also wants a letter or `_`
//! first), so their backends build one [`ToolNames`] per
//! request from the offered tools and the tool calls already in the history,
//! send [`ToolNames::wire`] names, and map every returned call through
//! [`ToolNames::internal`]. Names that are already valid (every built-in) pass
//! unchanged.
//!
//! The encoding is a pure function of the name, so the same tool has the same
//! wire name in every request and the history stays consistent: `:` becomes
//! `__`, any other character outside the set becomes `_`, and a name that is
//! then too long, or that collides with another name of the request, is cut
//! and given an 8-hex-digit hash of the uncut name. Decoding is a table lookup,
//! so it is exact whatever the encoding did; a wire name not in the table (a
//! model inventing one) comes back unchanged and fails as an unknown tool.

use std::borrow::Cow;
use std::collections::HashMap;

use super::{GenerateRequest, Reply, ToolChoice};
use crate::core::ToolSpec;
use crate::core::{BackendError, Session};

/// The longest name OpenAI, Gemini and Anthropic all accept.
pub const MAX_WIRE_NAME: usize = 64;

/// The name mapping for one request.
#[derive(Debug, Default, Clone)]
pub struct ToolNames {
    to_wire: HashMap<String, String>,
    from_wire: HashMap<String, String>,
}

impl ToolNames {
    /// The mapping for every tool offered and every tool called in `session`.
    pub fn for_request(tools: &[ToolSpec], session: &Session) -> ToolNames {
        let offered = tools.iter().map(|t| t.name.as_str());
        let called = session
            .messages
            .iter()
            .flat_map(|m| m.tool_calls.iter().map(|c| c.name.as_str()));
        Self::from_names(offered.chain(called))
    }

    /// The mapping for `names` (duplicates are fine).
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> ToolNames {
        let mut table = ToolNames::default();
        for name in names {
            table.add(name);
        }
        table
    }

    fn add(&mut self, name: &str) {
        if self.to_wire.contains_key(name) {
            return;
        }
        let mut wire = encode(name);
        if self.from_wire.contains_key(&wire) {
            wire = with_hash(&sanitize(name), name);
        }
        self.from_wire.insert(wire.clone(), name.to_string());
        self.to_wire.insert(name.to_string(), wire);
    }

    /// The name to send for shepherd's `name`.
    pub fn wire<'a>(&'a self, name: &'a str) -> &'a str {
        self.to_wire.get(name).map_or(name, String::as_str)
    }

    /// Shepherd's name for a name the provider sent back.
    pub fn internal(&self, wire: &str) -> String {
        match self.from_wire.get(wire) {
            Some(name) => name.clone(),
            None => wire.to_string(),
        }
    }

    /// Maps the names of the calls in a reply back to shepherd's names.
    pub fn decode_calls(&self, calls: &mut [crate::core::ToolCall]) {
        for call in calls {
            call.name = self.internal(&call.name);
        }
    }
}

/// Runs `generate` with every tool name in the session and request in wire
/// form, and maps the calls of the reply back: the one wrapper the strict
/// backends put around building and sending a request. When every name is
/// already valid nothing is copied.
pub fn with_wire_names(
    session: &Session,
    request: &GenerateRequest<'_>,
    generate: impl FnOnce(&Session, &GenerateRequest<'_>) -> Result<Reply, BackendError>,
) -> Result<Reply, BackendError> {
    let names = ToolNames::for_request(request.tools, session);
    if names.is_identity() {
        return generate(session, request);
    }
    let session = names.encode_session(session);
    let tools = names.encode_specs(request.tools);
    let choice = match request.tool_choice {
        ToolChoice::Named(name) => Cow::Owned(ToolChoice::Named(names.wire(name).to_string())),
        other => Cow::Borrowed(other),
    };
    let wire_request = GenerateRequest {
        tools: &tools,
        tool_choice: &choice,
        ..*request
    };
    let mut reply = generate(&session, &wire_request)?;
    names.decode_calls(&mut reply.tool_calls);
    Ok(reply)
}

impl ToolNames {
    /// True when no name changes on the wire.
    fn is_identity(&self) -> bool {
        self.to_wire.iter().all(|(name, wire)| name == wire)
    }

    fn encode_specs(&self, tools: &[ToolSpec]) -> Vec<ToolSpec> {
        tools
            .iter()
            .map(|spec| ToolSpec {
                name: self.wire(&spec.name).to_string(),
                ..spec.clone()
            })
            .collect()
    }

    /// A copy of `session` whose tool calls and tool results carry wire names.
    fn encode_session(&self, session: &Session) -> Session {
        let mut copy = session.clone();
        for message in &mut copy.messages {
            for call in &mut message.tool_calls {
                call.name = self.wire(&call.name).to_string();
            }
            if let Some(name) = &message.tool_name {
                message.tool_name = Some(self.wire(name).to_string());
            }
        }
        copy
    }
}

/// Whether `name` is acceptable to every strict provider as it is.
pub fn is_valid_wire_name(name: &str) -> bool {
    let first_ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    first_ok
        && name.len() <= MAX_WIRE_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The wire name of `name` when nothing collides with it.
pub fn encode(name: &str) -> String {
    if is_valid_wire_name(name) {
        return name.to_string();
    }
    let clean = sanitize(name);
    if clean.len() <= MAX_WIRE_NAME {
        clean
    } else {
        with_hash(&clean, name)
    }
}

/// `:` → `__`, other characters outside `[a-zA-Z0-9_-]` → `_`, and a `_` in
/// front when the name does not start with a letter or `_`.
fn sanitize(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    if !name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
    {
        out.push('_');
    }
    for c in name.chars() {
        match c {
            ':' => out.push_str("__"),
            c if c.is_ascii_alphanumeric() || c == '_' || c == '-' => out.push(c),
            _ => out.push('_'),
        }
    }
    out
}

/// `clean` cut to leave room for `_` and 8 hex digits of a hash of `original`.
fn with_hash(clean: &str, original: &str) -> String {
    let keep = MAX_WIRE_NAME - 9;
    let head: String = clean.chars().take(keep).collect();
    format!("{head}_{:08x}", fnv1a(original.as_bytes()) as u32)
}

/// FNV-1a, 64 bits: stable across runs and platforms, unlike std's hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &str, expected: &str) {
        assert_eq!(encode(name), expected, "{name}");
        let table = ToolNames::from_names([name]);
        assert_eq!(table.internal(table.wire(name)), name);
    }

    #[test]
    fn builtins_pass_and_mcp_names_are_encoded() {
        check("read", "read");
        check("list_directory", "list_directory");
        check("files:read_file", "files__read_file");
        check("my-server:do.it", "my-server__do_it");
        check("1st:tool", "_1st__tool");
        check("ünï:x", "__n___x");
    }

    #[test]
    fn long_names_are_cut_with_a_hash_and_stay_valid() {
        let long = format!("server:{}", "t".repeat(100));
        let wire = encode(&long);
        assert_eq!(wire.len(), MAX_WIRE_NAME);
        assert!(is_valid_wire_name(&wire), "{wire}");
        let other = format!("server:{}u", "t".repeat(100));
        assert_ne!(encode(&other), wire);
        let table = ToolNames::from_names([long.as_str(), other.as_str()]);
        assert_eq!(table.internal(table.wire(&long)), long);
        assert_eq!(table.internal(table.wire(&other)), other);
    }

    #[test]
    fn collisions_get_distinct_names_both_ways() {
        let names = ["a:b", "a__b", "a.b", "a_b"];
        let table = ToolNames::from_names(names);
        let wires: Vec<&str> = names.iter().map(|n| table.wire(n)).collect();
        for (i, wire) in wires.iter().enumerate() {
            assert!(is_valid_wire_name(wire), "{wire}");
            assert!(!wires[..i].contains(wire), "{wires:?}");
            assert_eq!(table.internal(wire), names[i]);
        }
    }

    #[test]
    fn requests_go_out_encoded_and_replies_come_back_decoded() {
        use crate::backend::{Sampling, ToolChoice};
        use crate::core::{FinishReason, Message, ToolCall};
        let call = |name: &str| ToolCall {
            id: "c1".into(),
            name: name.into(),
            arguments: serde_json::json!({}),
        };
        let spec = |name: &str| ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters: serde_json::json!({}),
        };
        let mut session = Session::new("sys");
        let mut asked = Message::assistant(String::new());
        asked.tool_calls = vec![call("fs:read")];
        session.messages.push(asked);
        session
            .messages
            .push(Message::tool_result(&call("fs:read"), "data"));
        let tools = [spec("read"), spec("fs:read"), spec("web:get")];
        let choice = ToolChoice::Named("web:get".into());
        let sampling = Sampling::default();
        let request = GenerateRequest {
            tools: &tools,
            tool_choice: &choice,
            sampling: &sampling,
            stream: true,
        };
        let reply = with_wire_names(&session, &request, |wire_session, wire_request| {
            let names: Vec<&str> = wire_request.tools.iter().map(|t| t.name.as_str()).collect();
            assert_eq!(names, ["read", "fs__read", "web__get"]);
            assert_eq!(
                *wire_request.tool_choice,
                ToolChoice::Named("web__get".into())
            );
            assert_eq!(wire_session.messages[0].tool_calls[0].name, "fs__read");
            assert_eq!(
                wire_session.messages[1].tool_name.as_deref(),
                Some("fs__read")
            );
            Ok(Reply {
                content: String::new(),
                thinking: String::new(),
                tool_calls: vec![call("web__get"), call("read"), call("nope__x")],
                finish: FinishReason::ToolCalls,
                usage: None,
                artefacts: Vec::new(),
                stop_sequence: None,
            })
        })
        .unwrap();
        let names: Vec<&str> = reply.tool_calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["web:get", "read", "nope__x"]);
        assert_eq!(session.messages[0].tool_calls[0].name, "fs:read");
    }

    #[test]
    fn unknown_wire_names_come_back_unchanged() {
        let table = ToolNames::from_names(["s:t"]);
        assert_eq!(table.internal("made_up"), "made_up");
        assert_eq!(table.wire("not_offered:x"), "not_offered:x");
    }

    #[test]
    fn every_ascii_name_round_trips() {
        let names: Vec<String> = (0u8..128)
            .map(|b| format!("s{}:{}t", char::from(b), char::from(b)))
            .collect();
        let table = ToolNames::from_names(names.iter().map(String::as_str));
        for name in &names {
            let wire = table.wire(name);
            assert!(is_valid_wire_name(wire), "{name:?} -> {wire}");
            assert_eq!(&table.internal(wire), name);
        }
    }
}
