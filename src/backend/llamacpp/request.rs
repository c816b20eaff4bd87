//! A request in the generation thread's terms: the prompt's tokens, the grammar
//! that forces a tool call, the sampler; and the generated text back as a
//! [`Reply`], a forced call parsed.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use super::prompt_tokens::PromptTokens;
use crate::backend::{Infill, PromptPart, Reply, ResponseFormat, Sampling, ToolChoice};
use crate::core::{BackendError, FinishReason, ToolCall, ToolSpec};
use crate::llama::grammar::CallShape;
use std::borrow::Cow;

use crate::core::{Image, Message};
use crate::llama::vision::{ImageChunk, Piece, Vision};
use crate::llama::{self, Model, SamplerParams, Token};
use crate::stream::syntax::CallSyntax;
use crate::stream::textcalls;

/// Why an image part is refused by a model without a vision projector.
pub(crate) const NO_VISION: &str = "this model takes no images: it has no vision projector \
     (start shepherd with --mmproj FILE, the model's mmproj-*.gguf)";

pub(super) fn tokenize_prompt(
    model: &Model,
    cache: &mut PromptTokens,
    prompt: &str,
) -> Result<Vec<Token>, BackendError> {
    let bos = model.bos_text();
    let add_bos = model.adds_bos() && (bos.is_empty() || !prompt.starts_with(&bos));
    let tokens = cache
        .tokenize(model, prompt, add_bos)
        .map_err(|e| BackendError::Config(e.to_string()))?;
    if tokens.is_empty() {
        return Err(BackendError::Config("the rendered prompt is empty".into()));
    }
    Ok(tokens)
}

/// The tokens of a prompt continued as it is. A text alone is tokenized as a
/// chat prompt is (the model's BOS unless the text opens with it); in a mixed
/// prompt, as llama-server reads one, token ids go in as given (checked against
/// the vocabulary) and text is tokenized in place, the BOS only before text
/// that opens the prompt. An image goes in as the projector lays it out
/// (after the BOS where it opens the prompt).
pub(super) fn raw_tokens(
    model: &Model,
    cache: &mut PromptTokens,
    vision: Option<&Vision<'_>>,
    parts: &[PromptPart],
    room: InfillRoom,
) -> Result<Tokens, BackendError> {
    match parts {
        [PromptPart::Text(text)] => return Ok((tokenize_prompt(model, cache, text)?, Vec::new())),
        [PromptPart::Infill(infill)] => {
            return Ok((infill_tokens(model, infill, room)?, Vec::new()))
        }
        _ => {}
    }
    let mut out: Tokens = (Vec::new(), Vec::new());
    for (i, part) in parts.iter().enumerate() {
        let tokens = &mut out.0;
        match part {
            PromptPart::Text(text) if i == 0 => tokens.extend(tokenize_prompt(model, cache, text)?),
            PromptPart::Text(text) => tokens.extend(
                model
                    .tokenize(text, false)
                    .map_err(|e| BackendError::Config(e.to_string()))?,
            ),
            PromptPart::Image(image) => {
                if i == 0 && model.adds_bos() {
                    tokens.extend(model.tokenize("", true).unwrap_or_default());
                }
                push_image(vision, image, &mut out)?;
            }
            PromptPart::Infill(_) => {
                return Err(BackendError::Config(
                    "a fill-in-the-middle prompt stands alone".into(),
                ))
            }
            PromptPart::Tokens(ids) => {
                if let Some(bad) = ids.iter().find(|&&t| t < 0 || t >= model.n_vocab()) {
                    return Err(BackendError::Config(format!(
                        "token id {bad} is outside the vocabulary (0 to {})",
                        model.n_vocab() - 1
                    )));
                }
                tokens.extend_from_slice(ids);
            }
        }
    }
    if out.0.is_empty() {
        return Err(BackendError::Config("the prompt is empty".into()));
    }
    ends_in_text(out)
}

/// A sampler that could not be built: the client's grammar did not parse (a
/// 400), or a fault of ours.
/// What a fill-in-the-middle prompt may take: the logical batch (the prefix and
/// suffix fit one, 3:1), the slot's context and the answer's length (the other
/// files fill what is left).
#[derive(Debug, Clone, Copy)]
pub(super) struct InfillRoom {
    pub n_batch: usize,
    pub n_ctx: usize,
    pub n_predict: usize,
}

/// llama-server's fill-in-the-middle layout, token for token: the other files
/// (each after the file separator and its name, or a plain-text separator where
/// the model has none, all after the repository token where it has one), then
/// `[PRE] prefix prompt [SUF] suffix [MID]`; the prefix keeps its end and the
/// suffix its start where they are too long, the other files their end. Every
/// text is tokenized as plain text: markup in the user's code is not a token.
fn infill_tokens(
    model: &Model,
    infill: &Infill,
    room: InfillRoom,
) -> Result<Vec<Token>, BackendError> {
    let fim = model.fim_tokens();
    let (Some(pre), Some(suf), Some(mid)) = (fim.pre, fim.suf, fim.mid) else {
        return Err(BackendError::Config(
            "infill is not supported by this model: it has no fill-in-the-middle tokens".into(),
        ));
    };
    let plain = |text: &str| {
        model
            .tokenize_plain(text)
            .map_err(|e| BackendError::Config(e.to_string()))
    };
    let mut extra = Vec::new();
    if let Some(rep) = fim.rep {
        extra.push(rep);
        extra.extend(plain("myproject\n")?);
    }
    for (filename, text) in &infill.extra {
        match fim.sep {
            Some(sep) => {
                extra.push(sep);
                extra.extend(plain(&format!("{filename}\n"))?);
            }
            None => extra.extend(plain("\n\n--- snippet ---\n\n")?),
        }
        extra.extend(plain(text)?);
    }
    if let Some(sep) = fim.sep {
        extra.push(sep);
        extra.extend(plain("filename\n")?);
    }
    let prompt = plain(&infill.prompt)?;
    let mut prefix = plain(&infill.prefix)?;
    let mut suffix = plain(&infill.suffix)?;
    let prefix_take = prefix.len().min(3 * (room.n_batch / 4));
    let suffix_take = suffix
        .len()
        .min((room.n_batch / 4).saturating_sub(2 + prompt.len()));
    let extra_take = extra
        .len()
        .min(room.n_ctx.saturating_sub(room.n_batch + 2 * room.n_predict));
    prefix.drain(..prefix.len() - prefix_take);
    suffix.truncate(suffix_take);
    let mut tokens = extra.split_off(extra.len() - extra_take);
    tokens.extend(model.bos_added());
    tokens.push(pre);
    tokens.extend(prefix);
    tokens.extend(prompt);
    tokens.push(suf);
    tokens.extend(suffix);
    tokens.push(mid);
    Ok(tokens)
}

pub(super) fn sampler_error(error: llama::SamplerError, sampling: &Sampling) -> BackendError {
    match (&error, &sampling.response_format) {
        (llama::SamplerError::Grammar(_), Some(ResponseFormat::Grammar(_))) => {
            BackendError::Invalid {
                param: Some("grammar"),
                message: format!("'grammar' is not valid GBNF: {error}"),
            }
        }
        // A grammar too costly to sample: the client's, its schema's or its tools'.
        (llama::SamplerError::Limit(message), format) => BackendError::Invalid {
            param: matches!(format, Some(ResponseFormat::Grammar(_))).then_some("grammar"),
            message: message.clone(),
        },
        _ => BackendError::Config(error.to_string()),
    }
}

/// How many tokens `a` and `b` share from their start, never ending inside an
/// image: an image's embeddings go into the cache whole or not at all.
pub(super) fn common_prefix(a: &[Token], b: &[Token]) -> usize {
    let mut n = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let inside = |t: &[Token]| n > 0 && n < t.len() && t[n] < 0 && t[n - 1] == t[n];
    if inside(a) || inside(b) {
        let image = a[n - 1];
        while n > 0 && a[n - 1] == image {
            n -= 1;
        }
    }
    n
}

/// An image's place in a prompt: its span of tokens (each holding the image's
/// [`image_token`]) starts at `start`; `chunk` is what the projector decodes there.
pub(super) struct PromptImage {
    pub start: usize,
    pub chunk: ImageChunk,
}

/// The token that fills an image's span in a prompt's and a slot's tokens: negative
/// (no vocabulary id is), and the same for the same file, so prefixes compare as
/// they would with the image's embeddings.
fn image_token(image: &Image) -> Token {
    let bits = u32::from_str_radix(image.sha256.get(..8).unwrap_or("0"), 16).unwrap_or(0);
    -1 - (bits & 0x3fff_ffff) as Token
}

/// The text that stands for an image in a rendered chat prompt: random for each
/// run, so no text a user writes holds it.
pub(super) fn image_marker() -> &'static str {
    static MARKER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    MARKER.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        format!("<__shepherd_image_{:016x}__>", hasher.finish())
    })
}

/// The messages with an [`image_marker`] where each image stands, and the images
/// in that order; the messages as they are when none holds an image.
pub(super) fn marked_messages(messages: &[Message]) -> (Cow<'_, [Message]>, Vec<Image>) {
    if messages.iter().all(|m| m.images.is_empty()) {
        return (Cow::Borrowed(messages), Vec::new());
    }
    let mut images = Vec::new();
    let marked = messages
        .iter()
        .map(|message| {
            let mut message = message.clone();
            let parts = std::mem::take(&mut message.images);
            let pieces = crate::core::image::pieces(&message.content, &parts);
            message.content = pieces.join(image_marker());
            images.extend(parts.into_iter().map(|part| part.image));
            message
        })
        .collect();
    (Cow::Owned(marked), images)
}

/// A prompt's tokens and its images.
pub(super) type Tokens = (Vec<Token>, Vec<PromptImage>);

/// Appends `image` to `tokens` as the projector lays it out: its own text tokens
/// around the image's span.
fn push_image(
    vision: Option<&Vision<'_>>,
    image: &Image,
    (tokens, images): &mut Tokens,
) -> Result<(), BackendError> {
    let vision = vision.ok_or_else(|| BackendError::invalid(NO_VISION))?;
    let rgb = image
        .rgb()
        .map_err(|e| BackendError::invalid(e.to_string()))?;
    let pieces = vision
        .pieces(&rgb.data, rgb.width, rgb.height, &image.sha256)
        .map_err(|e| BackendError::invalid(e.to_string()))?;
    for piece in pieces {
        match piece {
            Piece::Text(text) => tokens.extend(text),
            Piece::Image(chunk) => {
                let start = tokens.len();
                tokens.extend(std::iter::repeat_n(image_token(image), chunk.n_tokens()));
                images.push(PromptImage { start, chunk });
            }
        }
    }
    Ok(())
}

/// The tokens of a rendered chat prompt that holds [`image_marker`]s, one for each
/// of `images`, in order.
pub(super) fn chat_tokens(
    model: &Model,
    cache: &mut PromptTokens,
    vision: Option<&Vision<'_>>,
    prompt: &str,
    images: &[Image],
) -> Result<Tokens, BackendError> {
    if images.is_empty() {
        return Ok((tokenize_prompt(model, cache, prompt)?, Vec::new()));
    }
    let texts: Vec<&str> = prompt.split(image_marker()).collect();
    if texts.len() != images.len() + 1 {
        return Err(BackendError::invalid(format!(
            "the chat template kept {} of the conversation's {} images: this model's template does not show images in every kind of message",
            texts.len() - 1,
            images.len()
        )));
    }
    let mut out: Tokens = (tokenize_prompt(model, cache, texts[0])?, Vec::new());
    for (text, image) in texts[1..].iter().zip(images) {
        push_image(vision, image, &mut out)?;
        out.0.extend(
            model
                .tokenize(text, false)
                .map_err(|e| BackendError::Config(e.to_string()))?,
        );
    }
    ends_in_text(out)
}

/// Refuses a prompt that ends with an image: its last position gives the logits
/// the answer starts from, and only a token's do.
fn ends_in_text(out: Tokens) -> Result<Tokens, BackendError> {
    match out.0.last() {
        Some(&last) if last < 0 => Err(BackendError::invalid(
            "the prompt ends with an image: put text after it",
        )),
        _ => Ok(out),
    }
}

/// The grammar that constrains a request's tool calls.
#[derive(Debug)]
pub(super) struct ToolGrammar {
    pub grammar: String,
    /// The call comes out as shepherd's generic JSON (`{"name", "arguments"}`), not
    /// as the model family's own text: it is parsed here, not by the output filter.
    pub json: bool,
    /// The text that starts the grammar (lazily), `None` when it holds from the start.
    pub trigger: Option<String>,
}

/// The grammar for the request's tools: a forced call (`required` or a named tool)
/// in the family's own syntax where the template's probe found one (else in the
/// generic JSON shape); with `auto`, the same syntax applied lazily from the
/// call's marker, so a call the model starts is always a valid call. `None` when
/// the model answers freely.
pub(super) fn tool_grammar(
    tools: &[ToolSpec],
    choice: &ToolChoice,
    syntax: Option<&CallSyntax>,
) -> Result<Option<ToolGrammar>, BackendError> {
    let selected: Vec<&ToolSpec> = match choice {
        ToolChoice::Required => tools.iter().collect(),
        ToolChoice::Named(name) => tools.iter().filter(|t| &t.name == name).collect(),
        ToolChoice::Auto => {
            let lazy = syntax.and_then(|s| Some((s, s.trigger?, s.trigger_onward()?)));
            return Ok(lazy
                .filter(|_| !tools.is_empty())
                .map(|(syntax, trigger, before)| ToolGrammar {
                    grammar: shaped(syntax, before, tools.iter(), true),
                    json: false,
                    trigger: Some(trigger.to_string()),
                }));
        }
        ToolChoice::None => return Ok(None),
    };
    if selected.is_empty() {
        return Err(BackendError::Config(format!(
            "tool_choice {choice:?} names no offered tool"
        )));
    }
    let grammar = match syntax {
        Some(syntax) => ToolGrammar {
            grammar: shaped(syntax, &syntax.before, selected.into_iter(), false),
            json: false,
            trigger: None,
        },
        None => {
            let pairs = selected.iter().map(|t| (t.name.as_str(), &t.parameters));
            ToolGrammar {
                grammar: llama::grammar::tool_call_grammar(pairs),
                json: true,
                trigger: None,
            }
        }
    };
    Ok(Some(grammar))
}

/// The grammar of calls to `tools` in `syntax`, its text before the name `before`.
fn shaped<'a>(
    syntax: &CallSyntax,
    before: &str,
    tools: impl Iterator<Item = &'a ToolSpec>,
    repeat: bool,
) -> String {
    let shape = CallShape {
        before,
        between: &syntax.between,
        after: &syntax.after,
        id: syntax.id.as_deref(),
    };
    let pairs = tools.map(|t| (t.name.as_str(), &t.parameters));
    llama::grammar::shaped_call_grammar(&shape, pairs, repeat)
}

pub(super) fn sampler_params(
    sampling: &Sampling,
    tools: Option<&ToolGrammar>,
) -> Result<SamplerParams, BackendError> {
    let defaults = SamplerParams::default();
    // A forced tool call wins over `response_format`; `response_format` wins over
    // the lazy grammar of `auto` (an answer in that format is what was asked for).
    let tools = tools.filter(|t| t.trigger.is_none() || sampling.response_format.is_none());
    let grammar_trigger = tools.and_then(|t| t.trigger.clone());
    // A schema outside the supported subset is an invalid request: the API
    // server checks it first (`check_schema`); this covers every other caller.
    let grammar = match tools {
        Some(tools) => Some(tools.grammar.clone()),
        None => match &sampling.response_format {
            None => None,
            Some(ResponseFormat::JsonObject) => Some(llama::grammar::json_grammar(None)),
            Some(ResponseFormat::JsonSchema { schema, .. }) => {
                Some(llama::grammar::json_grammar(Some(schema)))
            }
            Some(ResponseFormat::Grammar(grammar)) => Some(Ok(grammar.clone())),
        }
        .transpose()
        .map_err(|e| BackendError::Config(format!("response_format: {e}")))?,
    };
    let params = SamplerParams {
        temperature: sampling.temperature.unwrap_or(defaults.temperature),
        top_p: sampling.top_p.unwrap_or(defaults.top_p),
        top_k: sampling
            .top_k
            .map_or(defaults.top_k, |k| i32::try_from(k).unwrap_or(i32::MAX)),
        seed: sampling.seed.map_or(defaults.seed, |s| s as u32),
        min_p: sampling.min_p.unwrap_or(defaults.min_p),
        repeat_penalty: sampling.repeat_penalty.unwrap_or(defaults.repeat_penalty),
        penalty_last_n: sampling.repeat_last_n.unwrap_or(defaults.penalty_last_n),
        frequency_penalty: sampling
            .frequency_penalty
            .unwrap_or(defaults.frequency_penalty),
        presence_penalty: sampling
            .presence_penalty
            .unwrap_or(defaults.presence_penalty),
        grammar,
        grammar_trigger,
        logit_bias: sampling.logit_bias.clone(),
    };
    params
        .validate()
        .map_err(|e| BackendError::Config(e.to_string()))?;
    Ok(params)
}

/// The reply for the generated `text`: a forced tool call parsed, else the text.
pub(super) fn finish_reply(
    forced_tools: bool,
    text: String,
    finish: FinishReason,
) -> Result<Reply, BackendError> {
    let mut reply = Reply {
        content: String::new(),
        thinking: String::new(),
        tool_calls: Vec::new(),
        finish,
        usage: None,
        artefacts: Vec::new(),
        stop_sequence: None,
    };
    if finish == FinishReason::Cancelled {
        reply.content = text;
        return Ok(reply);
    }
    if forced_tools {
        match parse_forced_call(&text) {
            Ok(call) => {
                reply.tool_calls.push(call);
                reply.finish = FinishReason::ToolCalls;
            }
            // Cut by the length limit before the grammar closed it: the call as far
            // as written, in a `Length` reply, which runs it nowhere.
            Err(_) if finish == FinishReason::Length => {
                if let Some((name, arguments)) = textcalls::cut_json_parts(&text) {
                    reply.tool_calls.push(ToolCall {
                        id: forced_id(),
                        name: name.to_string(),
                        arguments: Value::String(arguments.to_string()),
                    });
                }
            }
            Err(err) => return Err(err),
        }
        return Ok(reply);
    }
    // The caller's output filter turns this text into content, thinking and tool calls.
    reply.content = text;
    Ok(reply)
}

/// Parses the grammar-forced `{"name": ..., "arguments": {...}}` object.
fn parse_forced_call(text: &str) -> Result<ToolCall, BackendError> {
    let value: Value = serde_json::from_str(text.trim()).map_err(|e| {
        BackendError::Protocol(format!("forced tool call is not JSON ({e}): {text}"))
    })?;
    call_from_json(&value)
        .ok_or_else(|| BackendError::Protocol(format!("forced tool call has no name: {text}")))
}

/// A forced call's id: unique across the whole conversation, not just one reply.
fn forced_id() -> String {
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);
    format!("call_forced_{}", NEXT_ID.fetch_add(1, Ordering::Relaxed))
}

fn call_from_json(value: &Value) -> Option<ToolCall> {
    let name = value.get("name")?.as_str()?.to_string();
    let arguments = value
        .get("arguments")
        .cloned()
        .unwrap_or_else(|| serde_json::json!({}));
    Some(ToolCall {
        id: forced_id(),
        name,
        arguments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A grammar-forced call cut by the length limit is no error: the reply ends
    /// `Length` with the call as far as written (it runs nowhere); whole, it is a call.
    #[test]
    fn a_forced_call_cut_at_the_length_limit_is_a_length_reply() {
        let cut = r#"{"name": "bash", "arguments": {"command": "rm -r"#;
        let reply = finish_reply(true, cut.into(), FinishReason::Length).expect("no error");
        assert_eq!(reply.finish, FinishReason::Length);
        assert_eq!(reply.tool_calls[0].name, "bash");
        assert_eq!(
            reply.tool_calls[0].arguments,
            Value::String(r#"{"command": "rm -r"#.into())
        );
        let whole = r#"{"name": "bash", "arguments": {"command": "ls"}}"#;
        let reply = finish_reply(true, whole.into(), FinishReason::Stop).expect("a call");
        assert_eq!(reply.finish, FinishReason::ToolCalls);
        assert_eq!(reply.tool_calls[0].arguments, json!({"command": "ls"}));
        assert!(finish_reply(true, "not json".into(), FinishReason::Stop).is_err());
    }

    fn tool(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters: json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
        }
    }

    fn hermes() -> CallSyntax {
        CallSyntax {
            before: "<think>\n\n</think>\n\n<tool_call>\n{\"name\": \"".into(),
            between: "\", \"arguments\": ".into(),
            after: "}\n</tool_call>".into(),
            id: None,
            trigger: Some("<tool_call>"),
            prompt_end: None,
        }
    }

    #[test]
    fn each_tool_choice_gets_its_grammar() {
        let tools = [tool("count"), tool("add")];
        let syntax = hermes();
        // auto: lazy, from the marker on, one or more calls.
        let auto = tool_grammar(&tools, &ToolChoice::Auto, Some(&syntax))
            .unwrap()
            .unwrap();
        assert_eq!(auto.trigger.as_deref(), Some("<tool_call>"));
        assert!(!auto.json);
        assert!(
            auto.grammar.starts_with("root ::= call ( ws call )*\n"),
            "{}",
            auto.grammar
        );
        assert!(!auto.grammar.contains("think"), "{}", auto.grammar);
        // required: from the first token, in the family's syntax.
        let required = tool_grammar(&tools, &ToolChoice::Required, Some(&syntax))
            .unwrap()
            .unwrap();
        assert_eq!(required.trigger, None);
        assert!(
            required
                .grammar
                .contains(r#""<think>\n\n</think>\n\n<tool_call>\n{\"name\": \"" "count""#),
            "{}",
            required.grammar
        );
        // A named tool: only that one.
        let named = ToolChoice::Named("add".into());
        let one = tool_grammar(&tools, &named, Some(&syntax))
            .unwrap()
            .unwrap();
        assert!(one.grammar.contains("\"add\"") && !one.grammar.contains("\"count\""));
        // No syntax: the generic JSON shape, parsed here; auto stays free.
        let generic = tool_grammar(&tools, &ToolChoice::Required, None)
            .unwrap()
            .unwrap();
        assert!(generic.json);
        assert!(tool_grammar(&tools, &ToolChoice::Auto, None)
            .unwrap()
            .is_none());
        assert!(tool_grammar(&tools, &ToolChoice::None, Some(&syntax))
            .unwrap()
            .is_none());
        assert!(tool_grammar(&[], &ToolChoice::Auto, Some(&syntax))
            .unwrap()
            .is_none());
        let missing = ToolChoice::Named("nope".into());
        assert!(tool_grammar(&tools, &missing, Some(&syntax)).is_err());
    }
}
