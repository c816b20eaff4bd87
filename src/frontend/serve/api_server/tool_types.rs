//! Tool types other than `function`, in one place for every route: OpenAI's
//! `custom` tools (free-text input, Codex's `apply_patch`) and `local_shell`
//! (Codex), offered to the model as functions; Anthropic's client tools with
//! fixed schemas (`bash_*`, `text_editor_*`); and the tools that only the
//! provider can run (web search, code interpreter, ...), which are dropped
//! with a `Warning` header rather than failing the request.
//!
//! The core [`ToolSpec`] stays a function; [`ToolKinds`] remembers which
//! offered names were something else, so the answer shows their calls in the
//! client's shape (`custom_tool_call`, `local_shell_call`, legacy
//! `function_call`).

use std::collections::HashSet;

use serde_json::{json, Value};

use crate::core::{ToolCall, ToolSpec};

/// The function name `local_shell` is offered as.
pub const LOCAL_SHELL: &str = "local_shell";

/// OpenAI's tool types that run at the provider.
const HOSTED: [&str; 8] = [
    "web_search",
    "file_search",
    "code_interpreter",
    "computer_use_preview",
    "computer_use",
    "image_generation",
    "mcp",
    "web_search_preview",
];

/// Whether an OpenAI tool `type` is one only the provider runs.
pub fn hosted_openai(kind: &str) -> bool {
    HOSTED.contains(&kind) || kind.starts_with("web_search_preview_")
}

/// What the offered tools were, beyond their function specs.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ToolKinds {
    /// Names the client defined as `custom` tools.
    pub custom: HashSet<String>,
    /// `local_shell` was offered.
    pub local_shell: bool,
    /// The request used chat's legacy `functions`: the answer uses
    /// `function_call`.
    pub legacy: bool,
    /// Hosted tools dropped, for the warning.
    pub dropped: Vec<String>,
}

impl ToolKinds {
    pub fn is_custom(&self, name: &str) -> bool {
        self.custom.contains(name)
    }

    pub fn is_local_shell(&self, name: &str) -> bool {
        self.local_shell && name == LOCAL_SHELL
    }

    /// Notes a dropped hosted tool once.
    pub fn drop_hosted(&mut self, kind: &str) {
        let kind: String = kind
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
            .take(64)
            .collect();
        if !self.dropped.contains(&kind) {
            self.dropped.push(kind);
        }
    }
}

/// The `Warning` headers naming each dropped tool.
pub fn warnings(dropped: &[String]) -> Vec<(&'static str, String)> {
    dropped
        .iter()
        .map(|kind| {
            (
                "Warning",
                format!("299 shepherd \"tool '{kind}' is hosted by its provider and was dropped\""),
            )
        })
        .collect()
}

/// A `custom` tool as a function of one string, `input`; a `format` grammar
/// (lark or regex) is told in the description, not enforced.
pub fn custom_spec(name: &str, description: &str, format: Option<&Value>) -> ToolSpec {
    let mut text = description.trim().to_string();
    if !text.is_empty() {
        text.push_str("\n\n");
    }
    text.push_str(
        "Call with one parameter, `input`: the tool's whole input as raw text (not JSON).",
    );
    if let Some(format) =
        format.filter(|f| f.get("type").and_then(Value::as_str) == Some("grammar"))
    {
        let syntax = format
            .get("syntax")
            .and_then(Value::as_str)
            .unwrap_or("lark");
        if let Some(definition) = format.get("definition").and_then(Value::as_str) {
            text.push_str(&format!(
                " The input must match this {syntax} grammar:\n{definition}"
            ));
        }
    }
    ToolSpec {
        name: name.to_string(),
        description: text,
        parameters: json!({
            "type": "object",
            "properties": {"input": {"type": "string", "description": "The tool's input, raw text"}},
            "required": ["input"],
        }),
    }
}

/// Codex's `local_shell` as a function.
pub fn local_shell_spec() -> ToolSpec {
    ToolSpec {
        name: LOCAL_SHELL.to_string(),
        description: "Runs a command on the user's machine and returns its output.".into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "command": {"type": "array", "items": {"type": "string"},
                            "description": "The program and its arguments"},
                "workdir": {"type": "string", "description": "The working directory"},
                "timeout_ms": {"type": "integer", "description": "The time limit in milliseconds"},
                "env": {"type": "object", "additionalProperties": {"type": "string"}},
            },
            "required": ["command"],
        }),
    }
}

/// A custom tool call's input text: `input` of the model's arguments (or the
/// arguments as they came, when the model wrote something else).
pub fn custom_input(call: &ToolCall) -> String {
    match &call.arguments {
        Value::String(raw) => raw.clone(),
        Value::Object(map) => match map.get("input") {
            Some(Value::String(input)) => input.clone(),
            Some(other) => other.to_string(),
            None => call.arguments.to_string(),
        },
        other => other.to_string(),
    }
}

/// A custom tool call from history, as the function call the model made.
pub fn custom_call(id: &str, name: &str, input: &str) -> ToolCall {
    ToolCall {
        id: id.to_string(),
        name: name.to_string(),
        arguments: json!({ "input": input }),
    }
}

/// A `local_shell` call's `action`, as the Responses API shows it.
pub fn local_shell_action(call: &ToolCall) -> Value {
    let args = &call.arguments;
    let command = match args.get("command") {
        Some(Value::Array(parts)) => Value::Array(parts.clone()),
        Some(Value::String(line)) => json!(["bash", "-lc", line]),
        _ => json!([]),
    };
    json!({
        "type": "exec",
        "command": command,
        "working_directory": args.get("workdir").cloned().unwrap_or(Value::Null),
        "timeout_ms": args.get("timeout_ms").cloned().unwrap_or(Value::Null),
        "env": args.get("env").filter(|e| e.is_object()).cloned().unwrap_or(json!({})),
        "user": Value::Null,
    })
}

/// A `local_shell_call` item's `action` from history, as the function call.
pub fn local_shell_call(id: &str, action: Option<&Value>) -> ToolCall {
    let field = |key: &str| action.and_then(|a| a.get(key)).cloned();
    let mut arguments = serde_json::Map::new();
    arguments.insert("command".into(), field("command").unwrap_or(json!([])));
    for (from, to) in [
        ("working_directory", "workdir"),
        ("timeout_ms", "timeout_ms"),
        ("env", "env"),
    ] {
        if let Some(value) = field(from).filter(|v| !v.is_null()) {
            arguments.insert(to.into(), value);
        }
    }
    ToolCall {
        id: id.to_string(),
        name: LOCAL_SHELL.to_string(),
        arguments: Value::Object(arguments),
    }
}

/// What an Anthropic tool of `kind` (its `type`, not a custom tool) becomes:
/// a function with the documented schema for the client-run `bash_*` and
/// `text_editor_*`, else `None` (hosted, or one shepherd has no schema for).
pub fn anthropic_client_tool(kind: &str, name: &str) -> Option<ToolSpec> {
    if kind.starts_with("bash_") {
        return Some(ToolSpec {
            name: name.to_string(),
            description: "Runs a shell command in a persistent bash session.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command to run"},
                    "restart": {"type": "boolean", "description": "Restart the session"},
                },
            }),
        });
    }
    if kind.starts_with("text_editor_") {
        return Some(ToolSpec {
            name: name.to_string(),
            description: "Views, creates and edits files: commands view, create, str_replace, insert (and undo_edit where supported).".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert", "undo_edit"]},
                    "path": {"type": "string"},
                    "file_text": {"type": "string"},
                    "old_str": {"type": "string"},
                    "new_str": {"type": "string"},
                    "insert_line": {"type": "integer"},
                    "view_range": {"type": "array", "items": {"type": "integer"}},
                },
                "required": ["command", "path"],
            }),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_calls_round_trip_and_shell_actions_read_back() {
        let spec = custom_spec(
            "apply_patch",
            "Patch files",
            Some(&json!({"type": "grammar", "syntax": "lark", "definition": "start: /.+/"})),
        );
        assert!(
            spec.description.contains("start: /.+/"),
            "{}",
            spec.description
        );
        assert_eq!(spec.parameters["required"], json!(["input"]));
        let call = custom_call("c1", "apply_patch", "*** Begin Patch");
        assert_eq!(custom_input(&call), "*** Begin Patch");
        let shell = local_shell_call(
            "s1",
            Some(
                &json!({"type": "exec", "command": ["ls"], "working_directory": "/tmp", "timeout_ms": null}),
            ),
        );
        assert_eq!(
            shell.arguments,
            json!({"command": ["ls"], "workdir": "/tmp"})
        );
        let action = local_shell_action(&shell);
        assert_eq!(action["working_directory"], "/tmp");
        assert_eq!(action["env"], json!({}));
        assert!(hosted_openai("web_search_preview_2025_03_11") && !hosted_openai("custom"));
        let mut kinds = ToolKinds::default();
        kinds.drop_hosted("web\r\nsearch");
        kinds.drop_hosted("websearch");
        assert_eq!(kinds.dropped, ["websearch"]);
        assert_eq!(
            warnings(&kinds.dropped)[0].1,
            "299 shepherd \"tool 'websearch' is hosted by its provider and was dropped\""
        );
    }
}
