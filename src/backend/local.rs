//! What the two in-process backends (llama.cpp and TensorRT-LLM) share: the
//! model path, the chat template and its fallback, rendering with tools, the
//! answer's reserve and the overflow error, stop strings, and the reply read
//! from the output filter.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::models::{self, FindError};
use crate::core::{BackendError, Message, Role, ToolCall, ToolSpec};
use crate::stream::syntax::{self, CallSyntax};
use crate::template::{self, ChatTemplate, Prepared, TemplateMessage};

/// The model file for `-m NAME`, the one place `-m` becomes a path: an
/// absolute path as given; `model_path/NAME` or `NAME` when that exists; a
/// path with a directory part as given (the loader names what is missing);
/// else a GGUF file in `model_path` or `models_dirs` by name or unique prefix
/// ([`models::find`], whose error names the directories searched).
pub fn resolve_model_path(
    model: &str,
    model_path: Option<&Path>,
    models_dirs: &[PathBuf],
) -> Result<PathBuf, FindError> {
    let given = PathBuf::from(model);
    if given.is_absolute() {
        return Ok(given);
    }
    let joined = model_path.map_or_else(|| given.clone(), |dir| dir.join(&given));
    if joined.exists() || given.exists() {
        return Ok(if joined.exists() { joined } else { given });
    }
    if model.contains('/') {
        return Ok(joined);
    }
    let mut dirs: Vec<PathBuf> = model_path
        .filter(|dir| dir.is_dir())
        .map(Path::to_path_buf)
        .into_iter()
        .collect();
    for dir in models_dirs {
        if !dirs.contains(dir) {
            dirs.push(dir.clone());
        }
    }
    models::find(model, &dirs)
}

/// The vision projector beside `model`, as llama-server finds one with its model:
/// the `mmproj*.gguf` in the model's folder, and where there are several, the one
/// whose name after `mmproj-` shares the longest start with the model's name.
pub fn find_mmproj(model: &Path) -> Option<PathBuf> {
    let name = model.file_name()?.to_string_lossy().to_lowercase();
    let dir = model.parent().filter(|d| !d.as_os_str().is_empty());
    let entries = std::fs::read_dir(dir.unwrap_or(Path::new("."))).ok()?;
    let mut found: Vec<(usize, String, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let file = entry.file_name().to_string_lossy().to_lowercase();
            let projector = models::is_mmproj_name(&file) && file != name;
            projector.then(|| {
                let rest = file
                    .trim_start_matches("mmproj")
                    .trim_start_matches(['-', '_', '.']);
                let shared = rest
                    .bytes()
                    .zip(name.bytes())
                    .take_while(|(a, b)| a == b)
                    .count();
                (shared, file, entry.path())
            })
        })
        .collect();
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    found.into_iter().next().map(|(_, _, path)| path)
}

/// The text a message's tokens are counted from: its content and its calls as JSON.
pub(crate) fn message_text(message: &Message) -> String {
    let mut text = message.content.clone();
    for call in &message.tool_calls {
        text.push_str(&tool_call_json(call));
    }
    text
}

fn tool_call_json(call: &ToolCall) -> String {
    serde_json::json!({"name": call.name, "arguments": call.arguments}).to_string()
}

/// The model's chat template (`source`), or ChatML when it has none or it does not parse.
#[cfg(feature = "tensorrt")]
pub(crate) fn load_template(source: Option<&str>, bos: &str, eos: &str) -> ChatTemplate {
    load_templates(source, None, bos, eos)
}

/// The model's chat template (`source`) and the GGUF's `tool_use` variant, used when
/// tools are offered; ChatML when it has neither or the default does not parse.
pub(crate) fn load_templates(
    source: Option<&str>,
    tool_use: Option<&str>,
    bos: &str,
    eos: &str,
) -> ChatTemplate {
    ChatTemplate::with_tool_use(source, tool_use, bos, eos).unwrap_or_else(|err| {
        crate::util::log::debug(crate::util::log::Category::Llm, || {
            format!("{err}; using ChatML")
        });
        ChatTemplate::new(None, bos, eos).expect("the ChatML fallback needs no parsing")
    })
}

/// The conversation as the model's chat template writes it, with the tools.
pub(crate) fn render(
    template: &ChatTemplate,
    conversation: &[TemplateMessage],
    tools: &[ToolSpec],
    kwargs: &Map<String, Value>,
) -> Result<String, BackendError> {
    render_turn(template, conversation, tools, kwargs, true)
}

/// [`render`], with or without the assistant's opening at the end.
///
/// A conversation that ends with an assistant's text (no calls) after other
/// messages is continued, as llama-server continues it (its "prefill"): the
/// messages before it are rendered with the assistant's opening, and its text
/// follows that opening unclosed, so the model writes on from its last word.
pub(crate) fn render_turn(
    template: &ChatTemplate,
    conversation: &[TemplateMessage],
    tools: &[ToolSpec],
    kwargs: &Map<String, Value>,
    generation_prompt: bool,
) -> Result<String, BackendError> {
    let (head, prefill) = match conversation {
        [head @ .., last]
            if generation_prompt
                && !head.is_empty()
                && last.role == "assistant"
                && last.tool_calls.as_ref().is_none_or(Vec::is_empty) =>
        {
            (head, last.content.as_str())
        }
        _ => (conversation, ""),
    };
    let mut prompt = prepare_turn(template, head, tools, kwargs, generation_prompt)
        .render()
        .map_err(|e| BackendError::Config(e.to_string()))?;
    prompt.push_str(prefill);
    Ok(prompt)
}

/// What [`render`] renders: the template's own tool handling where it describes tools,
/// else the tools described in the system message and no `tools` passed (the
/// template corpus tests render through it).
#[cfg(test)]
pub(crate) fn prepare<'a>(
    template: &'a ChatTemplate,
    conversation: &[TemplateMessage],
    tools: &[ToolSpec],
) -> Prepared<'a> {
    prepare_turn(template, conversation, tools, &Map::new(), true)
}

/// [`prepare`], with the request's template variables and with or without the
/// generation prompt.
fn prepare_turn<'a>(
    template: &'a ChatTemplate,
    conversation: &[TemplateMessage],
    tools: &[ToolSpec],
    kwargs: &Map<String, Value>,
    generation_prompt: bool,
) -> Prepared<'a> {
    let mut prepared = if tools.is_empty() || template.handles_tools() {
        let tools = template::template_tools(tools);
        template.prepare(conversation, &tools, generation_prompt)
    } else {
        let messages = with_tool_instructions(conversation, tools);
        template.prepare(&messages, &[], generation_prompt)
    };
    template.add_kwargs(&mut prepared.context.extra, kwargs);
    prepared
}

/// How a tool call is written in prompts rendered with `template`, learnt by rendering
/// a probe call the way [`render`] renders every prompt ([`syntax::call_syntax`]): the
/// template's own syntax where it renders tools, else the `<tool_call>` form the tool
/// instructions ask for. `None` where the call's arguments are not JSON. `turn_end`
/// finds the end-of-turn token in the text after the arguments.
pub(crate) fn call_syntax(
    template: &ChatTemplate,
    turn_end: impl Fn(&str) -> usize,
) -> Option<CallSyntax> {
    let probe = ToolSpec {
        name: syntax::PROBE_TOOL.into(),
        description: "A probe.".into(),
        parameters: serde_json::json!({"type": "object",
            "properties": {"probe_arg": {"type": "string"}}}),
    };
    let user = Message::user("Call the probe.");
    let mut call = Message::assistant("");
    call.tool_calls = vec![ToolCall {
        id: syntax::PROBE_ID.into(),
        name: syntax::PROBE_TOOL.into(),
        arguments: syntax::probe_arguments(),
    }];
    let tools = [probe];
    let render = |messages: &[Message], generation_prompt: bool| {
        let conversation = template::conversation("", messages);
        let prepared = prepare_turn(
            template,
            &conversation,
            &tools,
            &Map::new(),
            generation_prompt,
        );
        prepared.render().ok()
    };
    let plain = render(std::slice::from_ref(&user), true)?;
    let with_call = render(&[user, call], false)?;
    let short_id = template::nine_alphanumerics(syntax::PROBE_ID);
    let syntax = syntax::call_syntax(&plain, &with_call, &short_id, turn_end);
    if syntax.is_none() {
        crate::util::log::debug(crate::util::log::Category::Llm, || {
            format!("no tool-call syntax in the probe: {plain:?} then {with_call:?}")
        });
    }
    syntax
}

/// The typed overflow for a prompt of `prompt` tokens that, with `reserve` for the
/// answer, does not fit `n_ctx`.
pub(crate) fn overflow(prompt: usize, reserve: usize, n_ctx: usize) -> BackendError {
    BackendError::ContextOverflow {
        message: format!("the prompt needs {prompt} tokens plus {reserve} for the answer; the context holds {n_ctx}"),
        prompt_tokens: Some((prompt + reserve) as u64),
        limit: Some(n_ctx as u64),
    }
}

/// Adds a tool description to the system message for templates that ignore `tools`,
/// and writes earlier tool calls as text so the model sees them.
pub(crate) fn with_tool_instructions(
    conversation: &[TemplateMessage],
    tools: &[ToolSpec],
) -> Vec<TemplateMessage> {
    let listing: Vec<String> = template::template_tools(tools)
        .iter()
        .map(Value::to_string)
        .collect();
    let instructions = format!(
        "You can call tools. To call one, reply with only a JSON object {{\"name\": <tool name>, \"arguments\": <arguments object>}} inside <tool_call></tool_call> tags.\nTools:\n{}",
        listing.join("\n")
    );
    let mut messages: Vec<TemplateMessage> = conversation.iter().map(tool_calls_as_text).collect();
    match messages.first_mut() {
        Some(first) if first.role == Role::System.as_str() => {
            first.content = format!("{}\n\n{instructions}", first.content);
        }
        _ => messages.insert(0, TemplateMessage::new("system", &instructions)),
    }
    messages
}

fn tool_calls_as_text(message: &TemplateMessage) -> TemplateMessage {
    let mut out = message.clone();
    for call in out.tool_calls.take().unwrap_or_default() {
        let function = call.get("function").cloned().unwrap_or(Value::Null);
        out.content
            .push_str(&format!("<tool_call>{function}</tool_call>"));
    }
    out
}

/// Holds back text that may be the start of a stop string, and cuts at the first stop.
#[derive(Debug)]
pub(crate) struct StopMatcher {
    stops: Vec<String>,
    pending: String,
    /// The stop string that was reached, once one was.
    matched: Option<usize>,
}

impl StopMatcher {
    pub(crate) fn new(stops: Vec<String>) -> Self {
        StopMatcher {
            stops,
            pending: String::new(),
            matched: None,
        }
    }

    /// Returns the text that is safe to show and whether a stop string was reached.
    pub(crate) fn push(&mut self, text: &str) -> (String, bool) {
        self.pending.push_str(text);
        let first_stop = self
            .stops
            .iter()
            .enumerate()
            .filter_map(|(i, s)| self.pending.find(s.as_str()).map(|at| (at, i)))
            .min();
        if let Some((at, i)) = first_stop {
            let visible = self.pending[..at].to_string();
            self.pending.clear();
            self.matched = Some(i);
            return (visible, true);
        }
        let hold = self.held_suffix();
        let visible = self.pending[..self.pending.len() - hold].to_string();
        self.pending.drain(..self.pending.len() - hold);
        (visible, false)
    }

    /// Length of the longest tail of `pending` that begins some stop string.
    fn held_suffix(&self) -> usize {
        let mut best = 0;
        for stop in &self.stops {
            for (i, _) in self.pending.char_indices() {
                let tail = &self.pending[i..];
                if tail.len() > best && stop.starts_with(tail) {
                    best = tail.len();
                }
            }
        }
        best
    }

    /// The stop string that ended the text, when one did.
    pub(crate) fn matched(&self) -> Option<&str> {
        self.matched.map(|i| self.stops[i].as_str())
    }

    pub(crate) fn finish(&mut self, text: &str) -> String {
        let (mut visible, stopped) = self.push(text);
        if !stopped {
            visible.push_str(&self.pending);
        }
        self.pending.clear();
        visible
    }
}

#[cfg(test)]
mod chat_corpus;
#[cfg(test)]
mod template_corpus;

#[cfg(test)]
mod tests {
    use super::*;

    fn check_stops(stops: &[&str], pieces: &[&str], expected: (&str, bool)) {
        let mut matcher = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut shown = String::new();
        let mut stopped = false;
        for piece in pieces {
            let (text, hit) = matcher.push(piece);
            shown.push_str(&text);
            if hit {
                stopped = true;
                break;
            }
        }
        if !stopped {
            shown.push_str(&matcher.finish(""));
        }
        assert_eq!((shown.as_str(), stopped), expected);
    }

    #[test]
    fn the_stop_string_that_ended_the_text_is_named() {
        let stops = || vec!["STOP".to_string(), "ST".to_string()];
        let mut matcher = StopMatcher::new(stops());
        assert_eq!(matcher.push("a S"), ("a ".to_string(), false));
        assert_eq!(matcher.matched(), None);
        assert_eq!(matcher.push("Tx"), (String::new(), true));
        assert_eq!(matcher.matched(), Some("ST"));
        // Two stops at the same place: the first listed.
        let mut matcher = StopMatcher::new(stops());
        assert!(matcher.push("xSTOP").1);
        assert_eq!(matcher.matched(), Some("STOP"));
        let mut matcher = StopMatcher::new(stops());
        assert_eq!(matcher.finish("plain"), "plain");
        assert_eq!(matcher.matched(), None);
    }

    #[test]
    fn a_model_is_a_path_or_a_name_in_the_model_dirs() {
        let root = std::env::temp_dir().join(format!("shepherd-local-{}", std::process::id()));
        let (dir, store) = (root.join("dir"), root.join("store"));
        for d in [&dir, &store] {
            std::fs::create_dir_all(d).expect("dir");
        }
        std::fs::write(dir.join("m.gguf"), b"x").expect("file");
        std::fs::write(store.join("Qwen3-8B-Q4_K_M.gguf"), b"x").expect("file");
        let stores = [store.clone()];
        let resolve = |m: &str, d: Option<&Path>| resolve_model_path(m, d, &stores);
        assert_eq!(
            resolve("/abs/m.gguf", Some(&dir)),
            Ok(PathBuf::from("/abs/m.gguf"))
        );
        assert_eq!(resolve("m.gguf", Some(&dir)), Ok(dir.join("m.gguf")));
        assert_eq!(
            resolve("M", Some(&dir)),
            Ok(dir.join("m.gguf")),
            "by name in --model-path"
        );
        assert_eq!(
            resolve("qwen3", None),
            Ok(store.join("Qwen3-8B-Q4_K_M.gguf"))
        );
        assert_eq!(resolve("sub/x.gguf", None), Ok(PathBuf::from("sub/x.gguf")));
        let missing = resolve("llama", Some(&dir)).unwrap_err().to_string();
        for named in [&dir, &store] {
            assert!(missing.contains(&named.display().to_string()), "{missing}");
        }
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn stop_matcher_holds_back_partial_matches() {
        check_stops(&["END"], &["abc E", "N", "D tail"], ("abc ", true));
        check_stops(&["END"], &["abc E", "N", "x"], ("abc ENx", false));
        check_stops(&["</s>", "\n\n"], &["a\n", "\nb"], ("a", true));
        check_stops(&[], &["é", "z"], ("éz", false));
    }
}
