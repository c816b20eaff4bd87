//! Shaping the messages a template sees: the probes that learn what it renders,
//! llama-server's globals, and the rewrites for templates that take less
//! (a folded system message, short ids, one call a message, merged turns).

use super::*;

/// The probe's tool, shaped like llama.cpp's (a described string argument).
pub(super) fn probe_tools() -> Vec<Value> {
    vec![
        serde_json::json!({"type": "function", "function": {"name": PROBE_TOOL,
        "description": "A probe.", "parameters": {"type": "object", "properties": {
        "arg": {"type": "string", "description": "An argument."}}, "required": ["arg"]}}}),
    ]
}

/// A user message, an assistant message with `content` and one call with `id` and
/// `arguments`, and the call's result.
pub(super) fn probe_call(id: &str, arguments: Value, content: &str) -> Vec<TemplateMessage> {
    let mut call = TemplateMessage::new("assistant", content);
    call.tool_calls = Some(vec![serde_json::json!({"id": id, "type": "function",
        "function": {"name": PROBE_TOOL, "arguments": arguments}})]);
    let mut result = TemplateMessage::new("tool", "Tool result");
    result.tool_call_id = Some(id.to_string());
    result.name = Some(PROBE_TOOL.into());
    vec![TemplateMessage::new("user", "User message"), call, result]
}

/// llama.cpp's globals: `functions`, the tools as JSON indented by 2 (empty without
/// tools), and `datetime`, today as `%b %d %Y`.
pub(super) fn llama_globals(tools: &[Value]) -> Map<String, Value> {
    let mut functions = String::new();
    if !tools.is_empty() {
        write_python_json(&Value::Array(tools.to_vec()), Some(2), 0, &mut functions);
    }
    let mut globals = Map::new();
    globals.insert("functions".into(), Value::String(functions));
    globals.insert(
        "datetime".into(),
        Value::String(strftime_now("%b %d %Y".into())),
    );
    globals
}

/// For a template without a system role: a leading system message joins the next
/// message's text (`system + "\n" + content`), or goes when it is alone, as llama.cpp's
/// `system_message_not_supported` does.
pub(super) fn fold_system_message(messages: &[TemplateMessage]) -> Vec<TemplateMessage> {
    match messages {
        [system, next, rest @ ..] if system.role == "system" => {
            let mut joined = next.clone();
            joined.content = format!("{}\n{}", system.content, next.content);
            std::iter::once(joined)
                .chain(rest.iter().cloned())
                .collect()
        }
        [system] if system.role == "system" => Vec::new(),
        other => other.to_vec(),
    }
}

/// A message's tool-call ids and result id as [`nine_alphanumerics`].
pub(super) fn shorten_ids(message: &mut TemplateMessage) {
    for call in message.tool_calls.iter_mut().flatten() {
        if let Some(id) = call.get("id").and_then(Value::as_str) {
            call["id"] = Value::String(nine_alphanumerics(id));
        }
    }
    if let Some(id) = &message.tool_call_id {
        message.tool_call_id = Some(nine_alphanumerics(id));
    }
}

/// A message's call arguments as compact JSON text, as llama.cpp passes them.
pub(super) fn arguments_as_text(message: &mut TemplateMessage) {
    for call in message.tool_calls.iter_mut().flatten() {
        if let Some(arguments) = call.pointer_mut("/function/arguments") {
            if !arguments.is_string() {
                *arguments = Value::String(arguments.to_string());
            }
        }
    }
}

/// Each assistant message with several calls as one message per call, each followed
/// by the results that answer it (matched by id; results no call claims come after
/// the last). The message's content and reasoning stay with its first call.
pub(super) fn one_call_each(messages: Vec<TemplateMessage>) -> Vec<TemplateMessage> {
    let mut out = Vec::with_capacity(messages.len());
    let mut rest = messages.into_iter().peekable();
    while let Some(message) = rest.next() {
        let calls = message.tool_calls.clone().unwrap_or_default();
        if calls.len() < 2 {
            out.push(message);
            continue;
        }
        let mut results = Vec::new();
        while let Some(result) = rest.next_if(|m| m.role == Role::Tool.as_str()) {
            results.push(result);
        }
        for (n, call) in calls.into_iter().enumerate() {
            let id = call.get("id").and_then(Value::as_str).map(str::to_string);
            let mut part = match n {
                0 => message.clone(),
                _ => TemplateMessage::new("assistant", ""),
            };
            part.tool_calls = Some(vec![call]);
            out.push(part);
            let answers = |r: &TemplateMessage| id.is_some() && r.tool_call_id == id;
            out.extend(results.iter().filter(|r| answers(r)).cloned());
            results.retain(|r| !answers(r));
        }
        out.extend(results);
    }
    out
}

/// Consecutive user turns (tool results rendered as user turns, one per result) as
/// one, for templates that want roles to alternate (Gemma 2).
pub(super) fn merge_user_turns(messages: Vec<TemplateMessage>) -> Vec<TemplateMessage> {
    let mut out: Vec<TemplateMessage> = Vec::with_capacity(messages.len());
    for message in messages {
        match out.last_mut() {
            Some(last) if last.role == "user" && message.role == "user" => {
                last.content.push_str("\n\n");
                last.content.push_str(&message.content);
            }
            _ => out.push(message),
        }
    }
    out
}

/// A tool result as a user turn, in the `<tool_response>` tags that go with the
/// `<tool_call>` tags of shepherd's own tool instructions.
pub(super) fn tool_result_as_user(message: &TemplateMessage) -> TemplateMessage {
    let content = format!("<tool_response>\n{}\n</tool_response>", message.content);
    TemplateMessage::new("user", &content)
}

/// The id a template that demands 9 alphanumerics gets for `id`: the id itself when it
/// already is one, else 9 base-62 digits of its FNV-1a hash, so that a call and the
/// result that answers it (the same stored id) keep matching on every turn.
pub fn nine_alphanumerics(id: &str) -> String {
    if id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return id.to_string();
    }
    const DIGITS: &[u8; 62] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let mut hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    (0..9)
        .map(|_| {
            let digit = DIGITS[(hash % 62) as usize];
            hash /= 62;
            char::from(digit)
        })
        .collect()
}

/// A built-in template (ChatML, the fallback when a model has none, or one named by
/// `--chat-template`) through llama.cpp's own code.
pub(super) fn render_builtin(
    name: &str,
    messages: &[TemplateMessage],
    add_generation_prompt: bool,
) -> Result<String, TemplateError> {
    let pairs: Vec<(&str, &str)> = messages
        .iter()
        .map(|m| (m.role.as_str(), m.content.as_str()))
        .collect();
    crate::llama::model::apply_builtin_template(name, &pairs, add_generation_prompt)
        .map_err(|e| TemplateError(e.to_string()))
}

/// The text a built-in template writes after an assistant's answer, which ends the
/// model's turn: what follows a probe answer in a rendered conversation, trimmed.
pub(super) fn end_of_turn(name: &str) -> String {
    const PROBE: &str = "PROBE-ANSWER";
    let turns = [("user", "hi"), ("assistant", PROBE)];
    let rendered = crate::llama::model::apply_builtin_template(name, &turns, false);
    rendered
        .ok()
        .and_then(|text| {
            text.rfind(PROBE)
                .map(|at| text[at + PROBE.len()..].trim().to_string())
        })
        .unwrap_or_default()
}

pub(super) fn describe(err: Error) -> TemplateError {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(inner) = source {
        text.push_str(&format!(": {inner}"));
        source = inner.source();
    }
    TemplateError(text)
}
