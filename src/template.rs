//! Chat templates: turns a conversation into the exact prompt text a model was trained on.
//!
//! The GGUF file's Jinja template is rendered with minijinja the way Hugging Face
//! transformers renders it (trim/lstrip blocks, loop controls, Python string and dict
//! methods from minijinja-contrib's pycompat), plus compatibility shims measured
//! against real templates: a `tojson` filter identical to Python's `json.dumps`,
//! insertion-ordered maps (the `preserve_order` features), `none` not iterable, and
//! stripping the `{% generation %}` tags that only training code understands.
//! `raise_exception` and `strftime_now` are registered like transformers does.
//!
//! Where a template cannot render what shepherd has, shepherd adapts the messages the
//! way llama.cpp does, each adaptation found by probing the template when it is
//! loaded (never by its name): a system prompt folded into the first turn, tool-call
//! ids of 9 alphanumerics, arguments as JSON text, reasoning under `thinking`, tool
//! results as user turns, llama.cpp's `functions`/`datetime` globals, and lists in a
//! `namespace` that `append` and `pop` change (llama.cpp's engine allows that; the
//! sandbox transformers uses refuses it). [`ChatTemplate::prepare`] returns the
//! adapted context, which is what the corpus test gives the jinja2 reference.
//!
//! A GGUF may carry a second template for requests with tools (`tool_use`: Hermes 2
//! Pro, Command R+); it is used whenever tools are offered, and for everything when it
//! is the only one, as llama.cpp does. When a model has no template, llama.cpp's
//! built-in ChatML is the fallback; `--chat-template NAME` picks any other of
//! llama.cpp's built-in (non-Jinja) templates by name, as llama-server does.
//! `crate::backend::local` renders every turn.

mod environment;

use minijinja::value::{Serde, Value as JinjaValue};
use minijinja::{Environment, Error};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::core::ToolSpec;
use crate::core::{Message, Role};
#[cfg(test)]
use environment::strip_generation_tags;
use environment::{jinja_environment, strftime_now, write_python_json, TEMPLATE_NAME};

mod shape;
pub use shape::nine_alphanumerics;
use shape::*;

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
    /// The assistant's reasoning, under the name llama.cpp passes it and Qwen3,
    /// DeepSeek and GLM templates read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// The same reasoning under the name gpt-oss reads: set only for a template that
    /// reads it (see [`ChatTemplate::prepare`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
}

impl TemplateMessage {
    pub fn new(role: &str, content: &str) -> Self {
        TemplateMessage {
            role: role.to_string(),
            content: content.to_string(),
            tool_calls: None,
            tool_call_id: None,
            name: None,
            reasoning_content: None,
            thinking: None,
        }
    }

    /// A session message as templates read it: tool calls in the OpenAI shape (arguments
    /// as an object), a tool result's id and tool name, an assistant's reasoning.
    pub fn from_message(message: &Message) -> Self {
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
        if message.role == Role::Assistant {
            out.reasoning_content = message.thinking.clone().filter(|t| !t.is_empty());
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

/// What a template is rendered with once shepherd has adapted the messages to it: the
/// context minijinja gets, serialisable as the jinja2 reference takes it.
#[derive(Debug, Clone, Serialize)]
pub struct RenderContext {
    pub messages: Vec<TemplateMessage>,
    /// `None` when no tools are offered, as transformers passes it.
    pub tools: Option<Vec<Value>>,
    pub add_generation_prompt: bool,
    pub bos_token: String,
    pub eos_token: String,
    /// llama.cpp's `functions` (the tools as indented JSON) and `datetime`, only for a
    /// template that cannot render without them (Firefunction v2).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A conversation ready to render: the template variant it goes through and the
/// adapted context.
pub struct Prepared<'a> {
    jinja: Option<&'a Jinja>,
    /// The built-in template that renders it when there is no Jinja.
    builtin: &'a str,
    pub context: RenderContext,
}

impl Prepared<'_> {
    /// The Jinja source that renders it; `None` for the ChatML fallback.
    #[cfg(test)]
    pub fn source(&self) -> Option<&str> {
        self.jinja.map(|j| j.source.as_str())
    }

    pub fn render(&self) -> Result<String, TemplateError> {
        match self.jinja {
            Some(jinja) => jinja.render(&self.context),
            None => render_builtin(
                self.builtin,
                &self.context.messages,
                self.context.add_generation_prompt,
            ),
        }
    }
}

/// A model's chat template (and its `tool_use` variant), parsed and probed.
pub struct ChatTemplate {
    /// `None` (with no `tool_use` either) selects the built-in template.
    default: Option<Jinja>,
    tool_use: Option<Jinja>,
    /// The llama.cpp built-in template used without Jinja: ChatML unless named.
    builtin: String,
    /// The built-in template's end of turn (`<|im_end|>` for ChatML), learnt by
    /// rendering; empty with Jinja or where the template writes none.
    builtin_end: String,
    /// The configured variables every render gets (`--chat-template-kwargs`).
    kwargs: Map<String, Value>,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("jinja", &self.default.is_some())
            .field("tool_use", &self.tool_use.is_some())
            .field("builtin", &self.builtin)
            .finish()
    }
}

/// The name that selects the built-in ChatML where a template is given
/// (`--chat-template chatml`, as llama-server spells it).
pub const CHATML: &str = "chatml";

/// Whether `name` is one of llama.cpp's built-in templates (`chatml`, `llama3`, …).
pub fn is_builtin(name: &str) -> bool {
    builtin_names().iter().any(|n| n == name)
}

/// llama.cpp's built-in template names, sorted.
pub fn builtin_names() -> Vec<String> {
    let mut names = crate::llama::model::builtin_template_names();
    names.sort();
    names
}

impl ChatTemplate {
    /// Parses a Jinja template; `None` selects the ChatML fallback.
    pub fn new(
        source: Option<&str>,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<Self, TemplateError> {
        Self::with_tool_use(source, None, bos_token, eos_token)
    }

    /// Parses the default template and the `tool_use` one (either may be missing). A
    /// `tool_use` template that does not parse is left out, as llama.cpp does.
    pub fn with_tool_use(
        source: Option<&str>,
        tool_use: Option<&str>,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<Self, TemplateError> {
        let parse = |s: &str| Jinja::new(s, bos_token, eos_token);
        let default = source.map(parse).transpose()?;
        let tool_use = tool_use.and_then(|s| match parse(s) {
            Ok(jinja) => Some(jinja),
            Err(err) => {
                crate::util::log::debug(crate::util::log::Category::Llm, || {
                    format!("tool_use template left out: {err}")
                });
                None
            }
        });
        let builtin_end = match (&default, &tool_use) {
            (None, None) => end_of_turn(CHATML),
            _ => String::new(),
        };
        Ok(ChatTemplate {
            default,
            tool_use,
            builtin: CHATML.to_string(),
            builtin_end,
            kwargs: Map::new(),
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
        })
    }

    /// One of llama.cpp's built-in templates by name ([`is_builtin`]); it renders
    /// roles and text (tools are described in the system prompt, as with ChatML).
    pub fn builtin(name: &str, bos_token: &str, eos_token: &str) -> Result<Self, TemplateError> {
        if !is_builtin(name) {
            return Err(TemplateError(format!(
                "'{name}' is not a built-in template (one of: {})",
                builtin_names().join(", ")
            )));
        }
        Ok(ChatTemplate {
            default: None,
            tool_use: None,
            builtin: name.to_string(),
            builtin_end: end_of_turn(name),
            kwargs: Map::new(),
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
        })
    }

    /// The template with `kwargs` given to every render (`--chat-template-kwargs`).
    pub fn with_kwargs(mut self, kwargs: Map<String, Value>) -> Self {
        self.kwargs = kwargs;
        self
    }

    /// Adds the variables a render gets beside messages and tools to `extra`, as
    /// llama-server passes them: `enable_thinking` (true unless set), today's date
    /// as `date_string` and `datetime` (Llama 3.x and Firefunction print them), then
    /// the configured ones, then the request's (`chat_template_kwargs`), later
    /// winning.
    pub fn add_kwargs(&self, extra: &mut Map<String, Value>, request: &Map<String, Value>) {
        extra.insert("enable_thinking".into(), Value::Bool(true));
        let today = |format: &str| Value::String(strftime_now(format.into()));
        extra.insert("date_string".into(), today("%d %b %Y"));
        extra.insert("datetime".into(), today("%b %d %Y"));
        for (key, value) in self.kwargs.iter().chain(request) {
            extra.insert(key.clone(), value.clone());
        }
    }

    /// The variant that renders a request with `tools`: `tool_use` when tools are
    /// offered, or when it is the only template; `None` is ChatML.
    fn variant(&self, tools: &[Value]) -> Option<&Jinja> {
        let (first, second) = match tools.is_empty() {
            true => (&self.default, &self.tool_use),
            false => (&self.tool_use, &self.default),
        };
        first.as_ref().or(second.as_ref())
    }

    /// Whether the template that renders requests with tools describes them to the
    /// model; if not, tools must be described in the system prompt.
    pub fn handles_tools(&self) -> bool {
        let with_tools = self.tool_use.as_ref().or(self.default.as_ref());
        with_tools.is_some_and(|j| j.caps.renders_tools)
    }

    /// What the template can render, in llama-server's words (`/props`'
    /// `chat_template_caps`), from the probes: the template that renders requests
    /// with tools is asked, as llama-server asks it; the ChatML fallback renders
    /// system messages and nothing of tools.
    pub fn capabilities(&self) -> Vec<(&'static str, bool)> {
        let caps = match self.tool_use.as_ref().or(self.default.as_ref()) {
            Some(jinja) => jinja.caps,
            None => Caps {
                system_role: true,
                ..Caps::default()
            },
        };
        vec![
            ("supports_string_content", true),
            ("supports_system_role", caps.system_role),
            ("supports_tools", caps.renders_tools),
            ("supports_tool_calls", caps.renders_calls),
            ("supports_parallel_tool_calls", caps.renders_parallel_calls),
            (
                "supports_object_arguments",
                caps.renders_calls && !caps.string_arguments,
            ),
            ("supports_preserve_reasoning", caps.reads_thinking),
        ]
    }

    /// The strings an answer rendered with this template stops at: the request's
    /// (empty ones dropped) and, with a built-in template, the end of turn it writes
    /// (`<|im_end|>` for ChatML). A model that has no template of its own usually has
    /// no such token either, so that text is all that ends its turn.
    pub fn stop_strings(&self, requested: &[String]) -> Vec<String> {
        let end_of_turn = (!self.builtin_end.is_empty()).then(|| self.builtin_end.clone());
        let requested = requested.iter().filter(|s| !s.is_empty()).cloned();
        requested.chain(end_of_turn).collect()
    }

    /// Renders `messages`; `tools` empty renders as `tools: none` like transformers does.
    #[cfg(test)]
    pub fn render(
        &self,
        messages: &[TemplateMessage],
        tools: &[Value],
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        self.prepare(messages, tools, add_generation_prompt)
            .render()
    }

    /// The variant that renders `messages` and the context it renders them with: the
    /// messages adapted to what the template's probes found.
    pub fn prepare(
        &self,
        messages: &[TemplateMessage],
        tools: &[Value],
        add_generation_prompt: bool,
    ) -> Prepared<'_> {
        let jinja = self.variant(tools);
        let context = match jinja {
            Some(jinja) => jinja.context(messages, tools, add_generation_prompt),
            None => RenderContext {
                messages: messages.to_vec(),
                tools: None,
                add_generation_prompt,
                bos_token: self.bos_token.clone(),
                eos_token: self.eos_token.clone(),
                extra: Map::new(),
            },
        };
        Prepared {
            jinja,
            builtin: &self.builtin,
            context,
        }
    }
}

/// What probing a template found; each field names the adaptation it turns on.
#[derive(Debug, Clone, Copy, Default)]
struct Caps {
    /// The template fails without llama.cpp's `functions` and `datetime` globals.
    llama_globals: bool,
    /// A system message renders; where the template refuses one (Gemma 2 raises) it
    /// is folded into the next message, as llama.cpp does.
    system_role: bool,
    /// The template refuses tool-call ids that are not 9 alphanumerics (Mistral Nemo,
    /// Small 3.2); shepherd's ids are then rendered as [`nine_alphanumerics`].
    nine_char_ids: bool,
    /// Arguments must be JSON text: calls with object arguments fail where text
    /// renders (Functionary v3.2 concatenates them), llama.cpp's probe.
    string_arguments: bool,
    /// The tool descriptions appear in the prompt; if not, they go in the system prompt.
    renders_tools: bool,
    /// The template reads reasoning as `thinking` (gpt-oss).
    reads_thinking: bool,
    /// …and refuses it beside content in a message with tool calls (gpt-oss): the
    /// content goes, as llama.cpp drops it.
    thinking_or_content: bool,
    /// Tool results cannot render as such (see [`Jinja::refuses_tool_results`]): they
    /// go as user turns instead.
    tool_results_as_user: bool,
    /// An assistant message's tool call shows in the prompt; two calls both show.
    renders_calls: bool,
    renders_parallel_calls: bool,
    /// Two calls in one message make the template raise (Llama 3.x: "only supports
    /// single tool-calls at once"): each call goes in an assistant message of its
    /// own, followed by its result, as llama.cpp splits them.
    one_call_each: bool,
}

/// One parsed Jinja template, with what its probes found.
struct Jinja {
    env: Environment<'static>,
    /// The source as the model gives it, for the tests' jinja2 reference.
    #[cfg(test)]
    source: String,
    bos_token: String,
    eos_token: String,
    caps: Caps,
}

const PROBE_TOOL: &str = "probe_tool";
const REASONING_MARKER: &str = "Reasoning marker";

impl Jinja {
    fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, TemplateError> {
        let mut jinja = Jinja {
            env: jinja_environment(source).map_err(describe)?,
            #[cfg(test)]
            source: source.to_string(),
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            caps: Caps {
                system_role: true,
                ..Caps::default()
            },
        };
        jinja.probe();
        Ok(jinja)
    }

    /// Runs the probes in order; each renders its messages adapted by what the earlier
    /// ones found.
    fn probe(&mut self) {
        let user = || TemplateMessage::new("user", "User message");
        let plain = [user()];
        self.caps.llama_globals = self.probe_render(&plain, &[]).is_err() && {
            self.caps.llama_globals = true;
            self.probe_render(&plain, &[]).is_ok()
        };
        let with_system = [TemplateMessage::new("system", "System message"), user()];
        self.caps.system_role =
            self.probe_render(&with_system, &[]).is_ok() || self.probe_render(&plain, &[]).is_err();
        let renders_call = |jinja: &Self, id: &str, arguments: Value| {
            let messages = probe_call(id, arguments, "");
            jinja.probe_render(&messages, &probe_tools()).is_ok()
        };
        let object = || serde_json::json!({"arg": "value"});
        self.caps.nine_char_ids =
            !renders_call(self, "call_0", object()) && renders_call(self, "abcdefghi", object());
        let text = Value::String(object().to_string());
        self.caps.string_arguments =
            !renders_call(self, "call_0", object()) && renders_call(self, "call_0", text);
        self.caps.renders_tools = [&plain[..], &with_system[..]].iter().any(|m| {
            let out = self.probe_render(m, &probe_tools());
            out.is_ok_and(|out| out.contains(PROBE_TOOL))
        });
        self.probe_reasoning();
        self.caps.tool_results_as_user = self.refuses_tool_results();
        self.probe_calls();
    }

    /// Whether a call the assistant made shows in the prompt (no tools offered, so
    /// only the call can name the tool), and whether two calls in one message do.
    fn probe_calls(&mut self) {
        const SECOND: &str = "second_probe_tool";
        let id = match self.caps.nine_char_ids {
            true => "abcdefghi",
            false => "call_0",
        };
        let mut arguments = serde_json::json!({"arg": "value"});
        if self.caps.string_arguments {
            arguments = Value::String(arguments.to_string());
        }
        let mut messages = probe_call(id, arguments, "");
        messages.truncate(2);
        let shows = |out: &Result<String, TemplateError>, name: &str| {
            out.as_ref().is_ok_and(|out| out.contains(name))
        };
        self.caps.renders_calls = shows(&self.probe_render(&messages, &[]), PROBE_TOOL);
        if let Some(calls) = messages[1].tool_calls.as_mut() {
            let mut second = calls[0].clone();
            second["id"] = Value::String(format!("{}1", &id[..id.len() - 1]));
            second["function"]["name"] = Value::String(SECOND.into());
            calls.push(second);
        }
        let both = self.probe_render(&messages, &[]);
        self.caps.renders_parallel_calls =
            self.caps.renders_calls && shows(&both, PROBE_TOOL) && shows(&both, SECOND);
        if both.is_err() && self.caps.renders_calls {
            self.caps.one_call_each = true;
            let split = self.probe_render(&messages, &[]);
            self.caps.one_call_each = shows(&split, PROBE_TOOL) && shows(&split, SECOND);
        }
    }

    /// Whether a tool result renders to nothing (Phi-3.5 knows no tool role) or fails
    /// where the same text as a user turn renders (Gemma 2 wants roles to alternate).
    fn refuses_tool_results(&self) -> bool {
        let tools = match self.caps.renders_tools {
            true => probe_tools(),
            false => Vec::new(),
        };
        let mut call = probe_call("call_0", serde_json::json!({"arg": "value"}), "");
        let with_result = self.probe_render(&call, &tools);
        let result = call.pop().expect("the probe ends with a result");
        if with_result.is_err() {
            call.push(tool_result_as_user(&result));
            return self.probe_render(&call, &tools).is_ok();
        }
        with_result == self.probe_render(&call, &tools)
    }

    /// Whether reasoning given only as `thinking` shows, after a tool call or before an
    /// answer; then whether it may stand beside content in a message with tool calls.
    fn probe_reasoning(&mut self) {
        let thinking_only = |mut messages: Vec<TemplateMessage>| {
            messages[1].thinking = Some(REASONING_MARKER.into());
            messages
        };
        let mut answer = probe_call("call_0", serde_json::json!({}), "");
        answer.truncate(1);
        answer.push(TemplateMessage::new("assistant", "Answer"));
        answer.push(TemplateMessage::new("user", "User message"));
        let call = probe_call("call_0", serde_json::json!({}), "");
        self.caps.reads_thinking = [call, answer].into_iter().any(|m| {
            let out = self.probe_render(&thinking_only(m), &probe_tools());
            out.is_ok_and(|out| out.contains(REASONING_MARKER))
        });
        if self.caps.reads_thinking {
            let both = thinking_only(probe_call("call_0", serde_json::json!({}), "Content"));
            self.caps.thinking_or_content = self.probe_render(&both, &probe_tools()).is_err();
        }
    }

    /// Renders probe messages adapted by the caps found so far, with `tools` and the
    /// generation prompt.
    fn probe_render(
        &self,
        messages: &[TemplateMessage],
        tools: &[Value],
    ) -> Result<String, TemplateError> {
        self.render(&self.context(messages, tools, true))
    }

    /// What `messages` render with: adapted, `tools` none when empty, and llama.cpp's
    /// globals where the template needs them.
    fn context(
        &self,
        messages: &[TemplateMessage],
        tools: &[Value],
        add_generation_prompt: bool,
    ) -> RenderContext {
        let extra = match self.caps.llama_globals {
            true => llama_globals(tools),
            false => Map::new(),
        };
        RenderContext {
            messages: self.adapt(messages),
            tools: (!tools.is_empty()).then(|| tools.to_vec()),
            add_generation_prompt,
            bos_token: self.bos_token.clone(),
            eos_token: self.eos_token.clone(),
            extra,
        }
    }

    /// `messages` as this template can render them (see [`Caps`]).
    fn adapt(&self, messages: &[TemplateMessage]) -> Vec<TemplateMessage> {
        let caps = self.caps;
        let mut adapted = if caps.system_role {
            messages.to_vec()
        } else {
            fold_system_message(messages)
        };
        if caps.one_call_each {
            adapted = one_call_each(adapted);
        }
        for message in &mut adapted {
            if caps.nine_char_ids {
                shorten_ids(message);
            }
            if caps.string_arguments {
                arguments_as_text(message);
            }
            if caps.reads_thinking && message.reasoning_content.is_some() {
                message.thinking.clone_from(&message.reasoning_content);
            }
            if caps.thinking_or_content
                && message.thinking.is_some()
                && message.tool_calls.is_some()
            {
                message.content.clear();
            }
            if caps.tool_results_as_user && message.role == Role::Tool.as_str() {
                *message = tool_result_as_user(message);
            }
        }
        if caps.tool_results_as_user {
            adapted = merge_user_turns(adapted);
        }
        adapted
    }

    fn render(&self, context: &RenderContext) -> Result<String, TemplateError> {
        let template = self.env.get_template(TEMPLATE_NAME).map_err(describe)?;
        template
            .render(JinjaValue::from(Serde(context)))
            .map_err(describe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;
    use std::io::Write;
    use std::process::{Command, Stdio};

    /// Renders `context` with the Python jinja2 reference (scripts/render_template.py).
    fn python_render(source: &str, context: &RenderContext) -> String {
        let request = json!({"template": source, "context": context});
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/render_template.py");
        let mut child = Command::new("python3")
            .arg(script)
            .env("TZ", "UTC")
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

    /// Renders `source` with minijinja and with Python's jinja2, both given what
    /// shepherd renders (the messages adapted to the template), and demands identical bytes.
    fn check(source: &str, messages: &[TemplateMessage], tools: &[Value], add_gen: bool) -> String {
        let template = ChatTemplate::new(Some(source), "<s>", "</s>").unwrap();
        let prepared = template.prepare(messages, tools, add_gen);
        let ours = prepared.render().unwrap();
        assert_eq!(
            ours,
            python_render(source, &prepared.context),
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
    fn builtin_templates_render_by_name_and_stop_at_their_end_of_turn() {
        let names = builtin_names();
        for name in ["chatml", "llama3", "gemma", "mistral-v7", "phi3"] {
            assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
        }
        let llama3 = ChatTemplate::builtin("llama3", "", "").unwrap();
        let out = llama3.render(&chat(), &[], true).unwrap();
        assert!(
            out.contains("<|start_header_id|>user<|end_header_id|>")
                && out.ends_with("<|start_header_id|>assistant<|end_header_id|>\n\n"),
            "{out}"
        );
        assert_eq!(llama3.stop_strings(&[]), ["<|eot_id|>"]);
        let gemma = ChatTemplate::builtin("gemma", "", "").unwrap();
        assert_eq!(gemma.stop_strings(&[]), ["<end_of_turn>"]);
        let fallback = ChatTemplate::new(None, "", "").unwrap();
        assert_eq!(fallback.stop_strings(&[]), ["<|im_end|>"]);
        let jinja = ChatTemplate::new(Some("{{ messages[0].content }}"), "", "").unwrap();
        assert!(jinja.stop_strings(&[]).is_empty());
        let err = ChatTemplate::builtin("llama99", "", "").unwrap_err();
        assert!(err.0.contains("llama3"), "{err:?}");
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
    fn capabilities_say_what_the_probes_saw_render() {
        let caps = |source: Option<&str>| {
            let template = ChatTemplate::new(source, "", "").expect("parses");
            template
                .capabilities()
                .into_iter()
                .collect::<BTreeMap<_, _>>()
        };
        // ChatML: system messages, nothing of tools.
        let chatml = caps(None);
        assert!(chatml["supports_system_role"] && !chatml["supports_tools"]);
        assert!(!chatml["supports_tool_calls"]);
        // One call per message only, object arguments, tools listed, no system.
        let one_call = "{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no') }}{% endif %}{% if m.tool_calls %}<{{ m.tool_calls[0].function.name }} {{ m.tool_calls[0].function.arguments.arg }}>{% else %}{{ m.content }}{% endif %}{% endfor %}";
        let one = caps(Some(one_call));
        assert!(!one["supports_system_role"] && one["supports_tools"]);
        assert!(one["supports_tool_calls"] && !one["supports_parallel_tool_calls"]);
        assert!(one["supports_object_arguments"]);
        // Every call, its arguments as text.
        let every = "{% for m in messages %}{% for c in m.tool_calls or [] %}<{{ c.function.name }} {{ c.function.arguments + '' }}>{% endfor %}{{ m.content }}{% endfor %}";
        let all = caps(Some(every));
        assert!(all["supports_tool_calls"] && all["supports_parallel_tool_calls"]);
        assert!(!all["supports_object_arguments"] && !all["supports_tools"]);
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

    /// A question, the assistant's call to `lookup` (with `content` and `thinking`)
    /// and its result, as the session stores them.
    fn tool_turn(content: &str, thinking: Option<&str>) -> Vec<TemplateMessage> {
        let call = crate::core::ToolCall {
            id: "call_0".into(),
            name: "lookup".into(),
            arguments: json!({"zeta": "z"}),
        };
        let result = Message::tool_result(&call, "found");
        let mut asks = Message::assistant(content);
        asks.tool_calls = vec![call];
        asks.thinking = thinking.map(str::to_string);
        conversation("", &[Message::user("Hi"), asks, result])
    }

    #[test]
    fn reasoning_goes_as_reasoning_content_and_as_thinking_where_the_template_reads_it() {
        let messages = tool_turn("", Some("Ponder."));
        assert_eq!(messages[1].reasoning_content.as_deref(), Some("Ponder."));
        assert_eq!(messages[1].thinking, None);
        assert_eq!(
            tool_turn("", Some(""))[1].reasoning_content,
            None,
            "empty is none"
        );
        // Qwen3 and DeepSeek read reasoning_content: no `thinking` is added.
        let qwen = "{% for m in messages %}{{ m.reasoning_content }}|{% endfor %}";
        let template = ChatTemplate::new(Some(qwen), "", "").unwrap();
        let prepared = template.prepare(&messages, &tools(), true);
        assert_eq!(prepared.context.messages[1].thinking, None);
        assert_eq!(check(qwen, &messages, &tools(), true), "|Ponder.||");
        // gpt-oss reads `thinking`.
        let gpt_oss = "{% for m in messages %}{% if m.thinking %}<think>{{ m.thinking }}</think>{% endif %}{{ m.content }}{% endfor %}";
        let out = check(gpt_oss, &messages, &tools(), true);
        assert_eq!(out, "Hi<think>Ponder.</think>found");
    }

    #[test]
    fn a_template_that_takes_thinking_or_content_beside_a_call_gets_the_thinking() {
        // gpt-oss's refusal, as its template words it; llama.cpp drops the content.
        let source = "{% for m in messages %}{% if m.tool_calls and m.content and m.thinking %}{{ raise_exception('Cannot pass both content and thinking in an assistant message with tool calls!') }}{% endif %}[{{ m.thinking or m.content }}]{% endfor %}";
        let out = check(
            source,
            &tool_turn("Let me look.", Some("Ponder.")),
            &tools(),
            true,
        );
        assert_eq!(out, "[Hi][Ponder.][found]");
        let out = check(source, &tool_turn("Let me look.", None), &tools(), true);
        assert_eq!(
            out, "[Hi][Let me look.][found]",
            "without reasoning the content stays"
        );
    }

    #[test]
    fn arguments_go_as_json_text_where_objects_fail() {
        // Functionary v3.2 concatenates the arguments to its text.
        let source = "{% for m in messages %}{% for c in m.tool_calls or [] %}{{ c.function.name + ' ' + c.function.arguments }}{% endfor %}{% endfor %}";
        let out = check(source, &tool_turn("", None), &tools(), true);
        assert_eq!(out, "lookup {\"zeta\":\"z\"}");
        let source = "{% for m in messages %}{% for c in m.tool_calls or [] %}{{ c.function.arguments | tojson }}{% endfor %}{% endfor %}";
        let out = check(source, &tool_turn("", None), &tools(), true);
        assert_eq!(
            out, "{\"zeta\": \"z\"}",
            "where objects render they stay objects"
        );
    }

    #[test]
    fn tool_results_go_as_user_turns_where_the_template_drops_or_refuses_them() {
        // Phi-3.5 knows no tool role; Gemma 2 wants user and assistant to alternate.
        let drops = "{% for m in messages %}{% if m.role != 'tool' %}<{{ m.role }}>{{ m.content }}{% endif %}{% endfor %}";
        let want = "<user>Hi<assistant><user><tool_response>\nfound\n</tool_response>";
        assert_eq!(check(drops, &tool_turn("", None), &[], true), want);
        let alternates = "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}<{{ m.role }}>{{ m.content }}{% endfor %}";
        assert_eq!(check(alternates, &tool_turn("", None), &[], true), want);
        let shows = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}";
        let out = check(shows, &tool_turn("", None), &[], true);
        assert!(
            out.ends_with("<tool>found"),
            "a template that shows results keeps them: {out}"
        );
    }

    #[test]
    fn tools_go_to_a_template_only_where_it_describes_them() {
        let describes = "{% for t in tools or [] %}{{ t.function.name }}{% endfor %}";
        assert!(ChatTemplate::new(Some(describes), "", "")
            .unwrap()
            .handles_tools());
        // Mentions `tools` but never shows them (DeepSeek V3.1 leaves that to the caller).
        let mentions = "{% if tools %}You have tools.{% endif %}{{ messages[0].content }}";
        assert!(!ChatTemplate::new(Some(mentions), "", "")
            .unwrap()
            .handles_tools());
    }

    #[test]
    fn the_tool_use_template_renders_requests_with_tools() {
        let default = "default:{{ messages[0].content }}";
        let tool_use = "tool_use:{% for t in tools or [] %}{{ t.function.name }}{% endfor %}";
        let both = ChatTemplate::with_tool_use(Some(default), Some(tool_use), "", "").unwrap();
        assert_eq!(
            both.render(&chat(), &[], true).unwrap(),
            "default:You are terse."
        );
        assert_eq!(
            both.render(&chat(), &tools(), true).unwrap(),
            "tool_use:lookup"
        );
        assert!(both.handles_tools());
        // The only template renders everything, as llama.cpp does.
        let only = ChatTemplate::with_tool_use(None, Some(tool_use), "", "").unwrap();
        assert_eq!(only.render(&chat(), &[], true).unwrap(), "tool_use:");
        assert!(only.stop_strings(&[]).is_empty(), "not the ChatML fallback");
        // A tool_use template that does not parse is left out.
        let broken = ChatTemplate::with_tool_use(Some(default), Some("{% if %}"), "", "").unwrap();
        assert_eq!(
            broken.render(&chat(), &tools(), true).unwrap(),
            "default:You are terse."
        );
    }

    #[test]
    fn a_template_that_needs_llama_cpps_functions_and_datetime_gets_them() {
        // Firefunction v2 concatenates both into its system prompt.
        let source = "{{ 'Functions:' + functions + '|Today is ' + datetime + '.' }}";
        assert!(ChatTemplate::new(Some(source), "", "")
            .unwrap()
            .handles_tools());
        let today = strftime_now("%b %d %Y".into());
        let out = check(source, &chat(), &tools(), true);
        assert!(
            out.starts_with("Functions:[\n  {\n    \"type\": \"function\",\n"),
            "{out}"
        );
        assert!(out.ends_with(&format!("}}\n]|Today is {today}.")), "{out}");
        let out = check(source, &chat(), &[], true);
        assert_eq!(out, format!("Functions:|Today is {today}."));
    }

    #[test]
    fn lists_in_a_namespace_change_in_place_as_in_llama_cpp() {
        // Kimi K2 queues its tool-call ids this way; transformers' sandbox refuses it.
        let source = "{% set q = namespace(ids=[], n=0) %}{% set _ = q.ids.append('a') %}{% set _ = q.ids.append('b') %}{% set _ = q.ids.extend(['c', 'b']) %}{% set _ = q.ids.extend(q.ids) %}{{ q.ids.pop(0) }}{{ q.ids | length }}{{ q.ids[-1] }}{{ q.ids | tojson }}{% if q.ids %}T{% endif %}{{ q.ids.pop() }}{{ q.ids.count('b') }}{{ q.n }}";
        let template = ChatTemplate::new(Some(source), "", "").unwrap();
        let out = template.render(&chat(), &[], true).unwrap();
        assert_eq!(
            out,
            "a7b[\"b\", \"c\", \"b\", \"a\", \"b\", \"c\", \"b\"]Tb30"
        );
        let empty = "{% set q = namespace(ids=[]) %}{{ q.ids.pop() }}";
        let err = ChatTemplate::new(Some(empty), "", "")
            .unwrap()
            .render(&chat(), &[], true);
        assert!(err.unwrap_err().to_string().contains("pop"));
    }

    #[test]
    fn indent_matches_jinja2() {
        // Command R+ indents '{\n' and keeps its newline, as jinja2 does.
        check(
            "{{ '{\\n' | indent(4, first=true) }}|{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\n\\nb' | indent('> ', true, true) }}|{{ 'x\\r\\ny\\u2028z' | indent }}|{{ '' | indent(width=3, first=true) }}|{{ tools[0] | tojson(indent=4) | indent(8) }}",
            &chat(),
            &tools(),
            false,
        );
    }
}
