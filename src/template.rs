//! Chat templates: turns a conversation into the exact prompt text a model was trained on.
//!
//! The GGUF file's Jinja template is rendered with minijinja the way Hugging Face
//! transformers renders it (trim/lstrip blocks, loop controls, Python string and dict
//! methods from minijinja-contrib's pycompat), plus three compatibility shims measured
//! against real templates: a `tojson` filter identical to Python's `json.dumps`,
//! insertion-ordered maps (the `preserve_order` features), and stripping the
//! `{% generation %}` tags that only training code understands. `raise_exception` and
//! `strftime_now` are registered like transformers does.
//!
//! When a model has no template, llama.cpp's built-in ChatML is the fallback.
//! `crate::backend::llamacpp` calls [`ChatTemplate::render`] for every turn.

use minijinja::value::{Kwargs, Serde, Value as JinjaValue};
use minijinja::{Environment, Error, ErrorKind};
use serde::Serialize;
use serde_json::Value;

use crate::core::ToolSpec;
use crate::core::{Message, Role};

const TEMPLATE_NAME: &str = "chat";

/// Why a prompt could not be rendered.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateError(pub String);

impl std::fmt::Display for TemplateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "chat template cannot render: {}", self.0)
    }
}

impl std::error::Error for TemplateError {}

/// A message in the shape Hugging Face templates expect.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TemplateMessage {
    pub role: String,
    pub content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl TemplateMessage {
    pub fn new(role: &str, content: &str) -> Self {
        TemplateMessage {
            role: role.to_string(),
            content: content.to_string(),
            tool_calls: None,
            tool_call_id: None,
            name: None,
        }
    }

    fn from_message(message: &Message) -> Self {
        let mut out = TemplateMessage::new(message.role.as_str(), &message.content);
        if !message.tool_calls.is_empty() {
            let calls = message.tool_calls.iter().map(|c| {
                serde_json::json!({
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                })
            });
            out.tool_calls = Some(calls.collect());
        }
        if message.role == Role::Tool {
            out.tool_call_id.clone_from(&message.tool_call_id);
            out.name.clone_from(&message.tool_name);
        }
        out
    }
}

/// Tools in the OpenAI function shape that templates iterate over.
pub fn template_tools(tools: &[ToolSpec]) -> Vec<Value> {
    let tool = |t: &ToolSpec| {
        serde_json::json!({
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        })
    };
    tools.iter().map(tool).collect()
}

/// The system prompt (when not empty) followed by the session's messages.
pub fn conversation(system_prompt: &str, messages: &[Message]) -> Vec<TemplateMessage> {
    let system = (!system_prompt.is_empty()).then(|| TemplateMessage::new("system", system_prompt));
    system
        .into_iter()
        .chain(messages.iter().map(TemplateMessage::from_message))
        .collect()
}

/// A parsed chat template ready to render.
pub struct ChatTemplate {
    env: Option<Environment<'static>>,
    /// Whether the Jinja source looks at `tools`; if not, tools must be described in the system prompt.
    handles_tools: bool,
    /// Whether a system message renders; where the template refuses one (Gemma 2
    /// raises) it is folded into the next message, as llama.cpp does.
    system_role: bool,
    /// Whether the template refuses tool-call ids that are not 9 alphanumerics (Mistral
    /// Nemo, Small 3.2); shepherd's ids are then rendered as [`nine_alphanumerics`].
    nine_char_ids: bool,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("jinja", &self.env.is_some())
            .finish()
    }
}

impl ChatTemplate {
    /// Parses a Jinja template; `None` selects the ChatML fallback.
    pub fn new(
        source: Option<&str>,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<Self, TemplateError> {
        let env = source.map(jinja_environment).transpose()?;
        let mut template = ChatTemplate {
            env,
            handles_tools: source.is_some_and(|s| s.contains("tools")),
            system_role: true,
            nine_char_ids: false,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
        };
        template.system_role = template.renders_system_role();
        template.nine_char_ids = template.wants_nine_char_ids();
        Ok(template)
    }

    /// A tool call and its result rendered with the id `call_0`, then with a 9-character
    /// one: the template demands the second form when only it renders.
    fn wants_nine_char_ids(&self) -> bool {
        let Some(env) = &self.env else {
            return false;
        };
        let tools = [
            serde_json::json!({"type": "function", "function": {"name": "probe_tool",
            "description": "A probe.", "parameters": {"type": "object", "properties": {}}}}),
        ];
        let conversation = |id: &str| {
            let mut call = TemplateMessage::new("assistant", "");
            call.tool_calls = Some(vec![serde_json::json!({"id": id, "type": "function",
                "function": {"name": "probe_tool", "arguments": {}}})]);
            let mut result = TemplateMessage::new("tool", "Tool result");
            result.tool_call_id = Some(id.to_string());
            result.name = Some("probe_tool".into());
            [TemplateMessage::new("user", "User message"), call, result]
        };
        let renders = |id: &str| {
            self.render_jinja(env, &conversation(id), &tools, true)
                .is_ok()
        };
        !renders("call_0") && renders("abcdefghi")
    }

    /// Whether the template renders a system message: false only when a system and a
    /// user message fail where the user message alone renders. (llama.cpp also folds
    /// where a template renders but ignores the system text; transformers then drops
    /// it, and shepherd renders as transformers does wherever that renders.)
    fn renders_system_role(&self) -> bool {
        let Some(env) = &self.env else {
            return true;
        };
        let user = TemplateMessage::new("user", "User message");
        let with_system = [
            TemplateMessage::new("system", "System message"),
            user.clone(),
        ];
        self.render_jinja(env, &with_system, &[], false).is_ok()
            || self.render_jinja(env, &[user], &[], false).is_err()
    }

    pub fn handles_tools(&self) -> bool {
        self.handles_tools
    }

    /// The strings an answer rendered with this template stops at: the request's
    /// (empty ones dropped) and, with the ChatML fallback, `<|im_end|>`. A model that
    /// has no template of its own usually has no `<|im_end|>` token either, so that
    /// text is all that ends its turn.
    pub fn stop_strings(&self, requested: &[String]) -> Vec<String> {
        let end_of_turn = self.env.is_none().then(|| "<|im_end|>".to_string());
        let requested = requested.iter().filter(|s| !s.is_empty()).cloned();
        requested.chain(end_of_turn).collect()
    }

    /// Renders `messages`; `tools` empty renders as `tools: none` like transformers does.
    pub fn render(
        &self,
        messages: &[TemplateMessage],
        tools: &[Value],
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        let Some(env) = &self.env else {
            return render_chatml(messages, add_generation_prompt);
        };
        if self.system_role && !self.nine_char_ids {
            return self.render_jinja(env, messages, tools, add_generation_prompt);
        }
        let mut adapted = if self.system_role {
            messages.to_vec()
        } else {
            fold_system_message(messages)
        };
        if self.nine_char_ids {
            adapted.iter_mut().for_each(shorten_ids);
        }
        self.render_jinja(env, &adapted, tools, add_generation_prompt)
    }

    fn render_jinja(
        &self,
        env: &Environment<'static>,
        messages: &[TemplateMessage],
        tools: &[Value],
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        let template = env.get_template(TEMPLATE_NAME).map_err(describe)?;
        let tools = if tools.is_empty() { None } else { Some(tools) };
        let ctx = minijinja::context! {
            messages => JinjaValue::from(Serde(messages)),
            tools => JinjaValue::from(Serde(tools)),
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
        };
        template.render(ctx).map_err(describe)
    }
}

/// For a template without a system role: a leading system message joins the next
/// message's text (`system + "\n" + content`), or goes when it is alone, as llama.cpp's
/// `system_message_not_supported` does.
fn fold_system_message(messages: &[TemplateMessage]) -> Vec<TemplateMessage> {
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
fn shorten_ids(message: &mut TemplateMessage) {
    for call in message.tool_calls.iter_mut().flatten() {
        if let Some(id) = call.get("id").and_then(Value::as_str) {
            call["id"] = Value::String(nine_alphanumerics(id));
        }
    }
    if let Some(id) = &message.tool_call_id {
        message.tool_call_id = Some(nine_alphanumerics(id));
    }
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

/// ChatML through llama.cpp's built-in template code (the fallback when a model has none).
fn render_chatml(
    messages: &[TemplateMessage],
    add_generation_prompt: bool,
) -> Result<String, TemplateError> {
    let pairs: Vec<(&str, &str)> = messages
        .iter()
        .map(|m| (m.role.as_str(), m.content.as_str()))
        .collect();
    crate::llama::model::apply_builtin_template("chatml", &pairs, add_generation_prompt)
        .map_err(|e| TemplateError(e.to_string()))
}

fn describe(err: Error) -> TemplateError {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(inner) = source {
        text.push_str(&format!(": {inner}"));
        source = inner.source();
    }
    TemplateError(text)
}

fn jinja_environment(source: &str) -> Result<Environment<'static>, TemplateError> {
    let mut env = Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()
        .map_err(describe)?;
    env.set_syntax(syntax);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_filter("tojson", tojson);
    env.add_test("iterable", is_iterable);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env.add_template_owned(TEMPLATE_NAME, strip_generation_tags(source))
        .map_err(describe)?;
    Ok(env)
}

/// Removes `{% generation %}` / `{% endgeneration %}` (with any whitespace control).
pub fn strip_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        let Some(len) = rest[start..].find("%}") else {
            break;
        };
        let tag = &rest[start..start + len + 2];
        let word = tag
            .trim_start_matches("{%")
            .trim_end_matches("%}")
            .trim_matches(['-', '+', ' ', '\t', '\n']);
        out.push_str(&rest[..start]);
        if word != "generation" && word != "endgeneration" {
            out.push_str(tag);
        }
        rest = &rest[start + len + 2..];
    }
    out.push_str(rest);
    out
}

/// Python's `iterable` test: `none` is not iterable there, although minijinja iterates
/// it as empty (and its own test says yes). Qwen3-Coder's and Nemotron's templates ask
/// `tools is iterable and tools | length > 0`, which then failed on `none | length`
/// whenever no tools were offered. Undefined stays iterable, as in jinja2.
fn is_iterable(value: &JinjaValue) -> bool {
    !value.is_none() && value.try_iter().is_ok()
}

fn raise_exception(message: String) -> Result<JinjaValue, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// transformers passes the current local time; shepherd formats UTC with the one
/// strftime subset of `util::time`.
fn strftime_now(format: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    crate::util::time::strftime(&format, i64::try_from(secs).unwrap_or(i64::MAX))
}

/// Python's `json.dumps(value, ensure_ascii=False, indent=indent)`: `", "` and `": "`
/// separators (`","` between items when indenting), no HTML escaping. `ensure_ascii`,
/// `sort_keys` and `separators` are accepted and ignored, as the measured templates need.
fn tojson(value: JinjaValue, kwargs: Kwargs) -> Result<JinjaValue, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    for ignored in ["ensure_ascii", "sort_keys", "separators"] {
        let _: Option<JinjaValue> = kwargs.get(ignored)?;
    }
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(&value)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    let mut out = String::new();
    write_python_json(&json, indent, 0, &mut out);
    Ok(JinjaValue::from_safe_string(out))
}

fn write_python_json(value: &Value, indent: Option<usize>, depth: usize, out: &mut String) {
    match value {
        Value::Array(items) if !items.is_empty() => {
            let parts = items.iter().map(|v| {
                let mut s = String::new();
                write_python_json(v, indent, depth + 1, &mut s);
                s
            });
            write_container(('[', ']'), parts.collect(), indent, depth, out);
        }
        Value::Object(map) if !map.is_empty() => {
            let parts = map.iter().map(|(k, v)| {
                let mut s = Value::String(k.clone()).to_string();
                s.push_str(": ");
                write_python_json(v, indent, depth + 1, &mut s);
                s
            });
            write_container(('{', '}'), parts.collect(), indent, depth, out);
        }
        other => out.push_str(&other.to_string()),
    }
}

fn write_container(
    brackets: (char, char),
    parts: Vec<String>,
    indent: Option<usize>,
    depth: usize,
    out: &mut String,
) {
    out.push(brackets.0);
    match indent {
        None => out.push_str(&parts.join(", ")),
        Some(width) => {
            let inner = " ".repeat(width * (depth + 1));
            let sep = format!(",\n{inner}");
            out.push('\n');
            out.push_str(&inner);
            out.push_str(&parts.join(&sep));
            out.push('\n');
            out.push_str(&" ".repeat(width * depth));
        }
    }
    out.push(brackets.1);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::io::Write;
    use std::process::{Command, Stdio};

    /// Renders with the Python jinja2 reference (scripts/render_template.py).
    fn python_render(
        source: &str,
        messages: &[TemplateMessage],
        tools: &[Value],
        add_gen: bool,
    ) -> String {
        let request = json!({
            "template": source,
            "messages": messages,
            "tools": if tools.is_empty() { Value::Null } else { json!(tools) },
            "add_generation_prompt": add_gen,
            "bos_token": "<s>",
            "eos_token": "</s>",
        });
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/render_template.py");
        let mut child = Command::new("python3")
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3 is needed for the template reference tests (run `make jinja2`)");
        let mut stdin = child.stdin.take().expect("stdin was piped");
        stdin
            .write_all(request.to_string().as_bytes())
            .expect("write to python");
        drop(stdin);
        let output = child.wait_with_output().expect("python3 ran");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "python reference failed (run `make jinja2`): {stderr}"
        );
        String::from_utf8(output.stdout).expect("python output is UTF-8")
    }

    /// Renders `source` with minijinja and with Python's jinja2 and demands identical bytes.
    fn check(source: &str, messages: &[TemplateMessage], tools: &[Value], add_gen: bool) -> String {
        let template = ChatTemplate::new(Some(source), "<s>", "</s>").unwrap();
        let ours = template.render(messages, tools, add_gen).unwrap();
        assert_eq!(
            ours,
            python_render(source, messages, tools, add_gen),
            "template:\n{source}"
        );
        ours
    }

    fn chat() -> Vec<TemplateMessage> {
        let mut messages = conversation(
            "You are terse.",
            &[
                Message::user("Hi <b> & \"you\""),
                Message::assistant("Héllo!"),
            ],
        );
        messages.push(TemplateMessage::new("user", "What is 2+2?"));
        messages
    }

    fn tools() -> Vec<Value> {
        let parameters = json!({"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}}, "required": ["zeta"]});
        let spec = ToolSpec {
            name: "lookup".into(),
            description: "Finds <things> & stuff: ünïcode".into(),
            parameters,
        };
        template_tools(&[spec])
    }

    /// The GGUF template of the test model (SmolLM2: ChatML with a default system line).
    fn smollm2_template() -> String {
        let path = crate::util::dirs::test_models::test_model_path();
        let params = crate::llama::ModelParams {
            gpu_layers: 0,
            progress: None,
            ..Default::default()
        };
        let model = crate::llama::Model::load(&path, &params).expect("test model loads");
        model
            .chat_template()
            .expect("SmolLM2 ships a chat template")
    }

    #[test]
    fn smollm2_template_renders_like_transformers() {
        let source = smollm2_template();
        let out = check(&source, &chat(), &[], true);
        assert!(out.ends_with("<|im_start|>assistant\n"), "{out}");
        check(&source, &chat(), &[], false);
        let no_system = conversation("", &[Message::user("Hi")]);
        let out = check(&source, &no_system, &[], true);
        assert!(
            out.starts_with("<|im_start|>system\n"),
            "SmolLM2 adds its default system line: {out}"
        );
    }

    #[test]
    fn tojson_matches_python_json_dumps() {
        let out = check(
            "{{ tools | tojson }}|{{ tools[0] | tojson(ensure_ascii=False, sort_keys=False) }}",
            &chat(),
            &tools(),
            false,
        );
        assert!(
            out.contains("<things> & stuff: ünïcode"),
            "no HTML escaping, no ASCII escaping: {out}"
        );
        assert!(
            out.contains("\"type\": \"function\", "),
            "Python separators: {out}"
        );
        check("{{ tools | tojson(indent=2) }}\n{{ messages[0] | tojson(indent=4) }}{{ [] | tojson }}{{ {} | tojson(indent=2) }}", &chat(), &tools(), false);
    }

    #[test]
    fn a_template_without_a_system_role_gets_the_system_prompt_in_the_first_turn() {
        // Gemma 2's refusal, as its template words it.
        let source = "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}<{{ m.role }}>{{ m.content }}{% endfor %}";
        let template = ChatTemplate::new(Some(source), "", "").unwrap();
        let out = template.render(&chat(), &[], false).unwrap();
        assert_eq!(
            out,
            "<user>You are terse.\nHi <b> & \"you\"<assistant>Héllo!<user>What is 2+2?"
        );
        // A template that has the role keeps it as it is.
        let source = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}";
        let out = check(source, &chat(), &[], false);
        assert!(out.starts_with("<system>You are terse.<user>"), "{out}");
    }

    #[test]
    fn a_template_that_demands_nine_character_ids_gets_them_and_calls_still_match() {
        // Mistral Nemo's checks, as its template words them.
        let source = "{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}{% if c.id | length != 9 %}{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{% endif %}[CALL {{ c.id }}]{% endfor %}{% elif m.role == 'tool' %}{% if m.tool_call_id | length != 9 %}{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{% endif %}[RESULT {{ m.tool_call_id }}]{% else %}{{ m.content }}{% endif %}{% endfor %}";
        let template = ChatTemplate::new(Some(source), "", "").unwrap();
        let tool_call = crate::core::ToolCall {
            id: "call_7".into(),
            name: "read".into(),
            arguments: json!({}),
        };
        let result = Message::tool_result(&tool_call, "text");
        let mut call = Message::assistant("");
        call.tool_calls = vec![tool_call];
        let messages = conversation("", &[Message::user("Hi"), call, result]);
        let out = template.render(&messages, &tools(), true).unwrap();
        let id = nine_alphanumerics("call_7");
        assert_eq!(out, format!("Hi[CALL {id}][RESULT {id}]"));
        assert!(
            id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric()),
            "{id}"
        );
        assert_ne!(nine_alphanumerics("call_8"), id);
        assert_eq!(nine_alphanumerics("abcdefghi"), "abcdefghi");
        // A template without the demand keeps shepherd's ids.
        let plain = ChatTemplate::new(
            Some("{% for m in messages %}{{ m.tool_call_id }}{% endfor %}"),
            "",
            "",
        )
        .unwrap();
        assert!(plain
            .render(&messages, &[], true)
            .unwrap()
            .contains("call_7"));
    }

    #[test]
    fn none_is_not_iterable_as_in_python() {
        // Qwen3-Coder's and Nemotron's guard around their tool section.
        let source = "{% if tools is iterable and tools | length > 0 %}T{% else %}N{% endif %}";
        assert_eq!(check(source, &chat(), &[], false), "N");
        assert_eq!(check(source, &chat(), &tools(), false), "T");
    }

    #[test]
    fn maps_keep_insertion_order() {
        let out = check(
            "{% for k, v in tools[0].function.parameters.properties.items() %}{{ k }};{% endfor %}",
            &chat(),
            &tools(),
            false,
        );
        assert_eq!(out, "zeta;alpha;");
    }

    #[test]
    fn generation_tags_are_stripped() {
        let source = "{% for m in messages %}{% if m.role == 'assistant' %}{%- generation -%}{{ m.content }}{%- endgeneration -%}{% else %}[{{ m.content }}]{% endif %}{% endfor %}";
        let out = check(source, &chat(), &[], false);
        assert!(
            out.contains("Héllo!") && !out.contains("generation"),
            "{out}"
        );
        assert_eq!(
            strip_generation_tags("a{% generation %}b{%- endgeneration %}c"),
            "abc"
        );
    }

    #[test]
    fn no_tools_is_none_and_loop_controls_and_python_methods_work() {
        check(
            "{% if tools is none %}none{% else %}{{ tools | length }}{% endif %}",
            &chat(),
            &[],
            false,
        );
        check(
            "{% if tools is none %}none{% else %}{{ tools | length }}{% endif %}",
            &chat(),
            &tools(),
            false,
        );
        check("{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}{% if m.role == 'system' %}{% continue %}{% endif %}{{ m.content.strip().upper() }}|{{ m.get('name', 'x') }}{% endfor %}", &chat(), &[], true);
    }

    #[test]
    fn raise_exception_is_a_clear_error() {
        let template = ChatTemplate::new(
            Some("{{ raise_exception('System role not supported') }}"),
            "",
            "",
        )
        .unwrap();
        let err = template.render(&chat(), &[], true).unwrap_err();
        assert!(
            err.to_string().contains("System role not supported"),
            "{err}"
        );
    }

    #[test]
    fn missing_template_falls_back_to_chatml() {
        let template = ChatTemplate::new(None, "", "").unwrap();
        let out = template
            .render(&conversation("S", &[Message::user("U")]), &[], true)
            .unwrap();
        assert_eq!(out, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
        // Its end of turn is a stop string; a model's own template brings its tokens.
        let requested = ["".to_string(), "END".to_string()];
        assert_eq!(template.stop_strings(&requested), ["END", "<|im_end|>"]);
        let own = ChatTemplate::new(Some("{{ messages[0].content }}"), "", "").unwrap();
        assert_eq!(own.stop_strings(&requested), ["END"]);
    }

    #[test]
    fn strftime_now_formats_dates() {
        // 2024-02-29 is day 19782 since the epoch.
        assert_eq!(
            crate::util::time::strftime("%d %B %Y (%b, %m) %%", 19_782 * 86_400),
            "29 February 2024 (Feb, 02) %"
        );
    }
}
