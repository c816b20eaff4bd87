//! llama-server's own `POST /completion`, for the scripts written against it:
//! its request (`prompt` as text, token ids or both mixed, `n_predict`,
//! `stream`, the sampling fields) and its answer (`content`, `stop`,
//! `stop_type`, `stopping_word`, `tokens_predicted`, `tokens_evaluated`,
//! `generation_settings`, `timings`), streamed as `data:` lines of
//! `{"content", "stop": false}` and a last one with `"stop": true` and the
//! figures, with no `[DONE]`, as llama-server streams it. The in-process model
//! only, like `/v1/completions`, whose prompt and sampling checks it shares.
//!
//! Several prompts in one request (an array of prompts, no token id at its top
//! level, as llama-server reads it) run side by side and are answered with an
//! array of answers in their order, each naming its `index`; streamed, the
//! chunks of all interleave, each with its `index`. A prompt may also be
//! llama-server's `{"prompt_string": ..., "multimodal_data": [...]}` object
//! (its multimodal form: each `<__media__>` marker of the text stands for one
//! base64 image, in order; [`super::completions::prompts`]).
//!
//! `n_probs` adds llama-server's `completion_probabilities` (each token's id,
//! text, bytes and log-probability, with the `n_probs` likeliest others;
//! `post_sampling_probs` writes them as probabilities, `prob` and `top_probs`,
//! leaving out those that round to 0 — the model's distribution, before the
//! sampler's stages, where llama-server's are after them) and `return_tokens`
//! the ids in `tokens`, streamed with the chunk that carries their text.
//! `ignore_eos` bans the model's end-of-generation tokens (a -infinity bias,
//! listed in `generation_settings.logit_bias` as llama-server lists it). A
//! field neither server knows is ignored and named in a debug line.
//!
//! Also llama-server's `POST /apply-template`: a chat request's `messages`
//! (and `tools`) rendered with the model's chat template as a generation
//! would read them, `{"prompt": "..."}`.

use std::io;
use std::sync::atomic::Ordering;

use super::completions::prompts;
use super::error::ApiError;
use super::fields::{json_body, unknown_fields, Fields};
use super::images::Images;
use super::sampling_fields;

use super::pool::Work;
use super::text::{Assembler, Piece};
use super::wire::encode;
use super::wire::llama as wire;
use super::wire::openai::Timings;
use super::wire::openai::{wire_logprobs, wire_progress, wire_timings};
use super::writer::ReplyWriter;
use super::{Defaults, Usage};
use crate::backend::llamacpp::LocalModel;
use crate::backend::{Infill, PromptPart, Reply, Sampling, ToolChoice};
use crate::core::{FinishReason, PromptProgress, Session, TokenLogprobs, TokenProb};
use crate::frontend::serve::http::{Request, Responder, SseStream};

/// A checked `/completion` request.
#[derive(Debug)]
pub struct NativeRequest {
    /// The work of every prompt but its prompt (`raw_prompt` is `None`).
    pub work: Work,
    /// The prompts, one answer each.
    pub prompts: Vec<Vec<PromptPart>>,
    /// Write the probabilities as `prob`/`top_probs` (`post_sampling_probs`).
    pub post_sampling: bool,
    /// Ban the end-of-generation tokens (`ignore_eos`).
    pub ignore_eos: bool,
    /// Whether the answer reports `completion_probabilities` (`n_probs` > 0).
    pub n_probs: bool,
    /// Whether the answer lists its token ids (`return_tokens`).
    pub return_tokens: bool,
    pub stream: bool,
    /// Fields neither this server nor llama-server's route reads, ignored.
    pub ignored: Vec<String>,
}

/// Fields llama-server reads that change nothing here: its cache and slot
/// hints (the prompt cache is always on; slots are chosen by prefix).
const IGNORED: [&str; 3] = ["cache_prompt", "id_slot", "t_max_predict_ms"];

/// Every field this route reads.
const KNOWN: [&str; 23] = [
    "return_progress",
    "timings_per_token",
    "grammar",
    "json_schema",
    "prompt",
    "stream",
    "n_predict",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repeat_penalty",
    "repeat_last_n",
    "frequency_penalty",
    "presence_penalty",
    "seed",
    "stop",
    "n_probs",
    "return_tokens",
    "model",
    "post_sampling_probs",
    "ignore_eos",
];

/// The fields `/infill` reads besides `/completion`'s.
const INFILL: [&str; 3] = ["input_prefix", "input_suffix", "input_extra"];

/// Checks a `/completion` body field by field; token ids against `n_vocab`.
pub fn parse(body: &[u8], defaults: &Defaults, n_vocab: i32) -> Result<NativeRequest, ApiError> {
    let mut images = Images::new(&defaults.image_urls);
    parse_with(body, defaults, &KNOWN, |f| prompts(f, n_vocab, &mut images))
}

/// Checks an `/infill` body: `/completion`'s fields, with the code before and
/// after the gap (`input_prefix`, `input_suffix`, both required strings), other
/// files (`input_extra`: `{filename, text}` objects) and a `prompt` text that
/// starts the middle, in place of the prompt.
pub fn parse_infill(body: &[u8], defaults: &Defaults) -> Result<NativeRequest, ApiError> {
    let known: Vec<&str> = KNOWN.iter().chain(&INFILL).copied().collect();
    parse_with(body, defaults, &known, |f| {
        let text = |key: &str| -> Result<String, ApiError> {
            f.str(key)?
                .map(str::to_string)
                .ok_or_else(|| f.missing(key, "a string"))
        };
        let mut extra = Vec::new();
        for (i, chunk) in f.array("input_extra")?.into_iter().flatten().enumerate() {
            let c = Fields::of(chunk, &format!("input_extra[{i}]"))?;
            let filename = c.str("filename")?.unwrap_or("tmp").to_string();
            extra.push((filename, c.required_str("text")?.to_string()));
        }
        let prompt = match f.get("prompt") {
            None => String::new(),
            Some(_) => f.required_str("prompt")?.to_string(),
        };
        Ok(vec![vec![PromptPart::Infill(Infill {
            prefix: text("input_prefix")?,
            suffix: text("input_suffix")?,
            prompt,
            extra,
        })]])
    })
}

/// The checks `/completion` and `/infill` share, with the prompt read by `prompt`.
fn parse_with(
    body: &[u8],
    defaults: &Defaults,
    known: &[&str],
    prompts: impl FnOnce(&Fields<'_>) -> Result<Vec<Vec<PromptPart>>, ApiError>,
) -> Result<NativeRequest, ApiError> {
    let value = json_body(body)?;
    let f = Fields::of(&value, "")?;
    let ignored = unknown_fields(&value, known, &IGNORED);
    let prompts = prompts(&f)?;
    let stream = f.bool("stream")?.unwrap_or(false);
    let n_probs = f.integer("n_probs", 0, 100)?.filter(|&n| n > 0);
    let return_tokens = f.bool("return_tokens")?.unwrap_or(false);
    let mut sampling = sampling_fields::sampling(&f, defaults)?;
    sampling.telemetry = sampling_fields::telemetry(&f, stream)?;
    // The ids come with the probabilities; with `return_tokens` alone no
    // alternatives are looked up.
    sampling.logprobs = n_probs.map(|n| n as u32).or(return_tokens.then_some(0));
    Ok(NativeRequest {
        n_probs: n_probs.is_some(),
        post_sampling: f.bool("post_sampling_probs")?.unwrap_or(false),
        ignore_eos: f.bool("ignore_eos")?.unwrap_or(false),
        return_tokens,
        prompts,
        work: Work {
            session: Session::new(String::new()),
            tools: Vec::new(),
            tool_choice: ToolChoice::None,
            sampling,
            use_tools: false,
            raw_prompt: None,
        },
        stream,
        ignored,
    })
}

/// How one `/completion` is answered, whole or streamed.
#[derive(Debug)]
pub struct NativeWriter {
    pub model: String,
    /// Each prompt as text (token ids written out), as llama-server echoes it.
    pub prompts: Vec<String>,
    pub sampling: Sampling,
    /// Report `completion_probabilities` (`n_probs`).
    pub n_probs: bool,
    /// As probabilities (`post_sampling_probs`).
    pub post_sampling: bool,
    /// List the token ids (`return_tokens`).
    pub return_tokens: bool,
}

/// The prompt as llama-server echoes it: text as given, token ids written
/// out through `detokenize`.
pub fn prompt_text(
    parts: &[PromptPart],
    detokenize: impl Fn(Vec<i32>) -> Option<String>,
) -> String {
    parts
        .iter()
        .map(|part| match part {
            PromptPart::Text(text) => text.clone(),
            PromptPart::Tokens(ids) => detokenize(ids.clone()).unwrap_or_default(),
            // The code around the gap, as written (the FIM tokens are the model's).
            PromptPart::Infill(infill) => {
                format!("{}{}{}", infill.prefix, infill.prompt, infill.suffix)
            }
            PromptPart::Image(_) => crate::backend::MEDIA_MARKER.to_string(),
        })
        .collect()
}

/// llama-server's `stop_type` and `stopping_word` for `reply`.
fn stop_type(reply: &Reply) -> (&'static str, &str) {
    match (&reply.stop_sequence, reply.finish) {
        (Some(word), _) => ("word", word),
        (None, FinishReason::Length) => ("limit", ""),
        (None, FinishReason::Stop | FinishReason::ToolCalls) => ("eos", ""),
        (None, FinishReason::Cancelled | FinishReason::Error) => ("none", ""),
    }
}

impl NativeWriter {
    /// The native answer chat's `__verbose` repeats (its prompt given with it).
    pub fn verbose(model: String, sampling: Sampling) -> NativeWriter {
        NativeWriter {
            model,
            prompts: Vec::new(),
            sampling,
            n_probs: false,
            post_sampling: false,
            return_tokens: false,
        }
    }

    /// The ids of `probs` with `return_tokens`, else none.
    fn tokens(&self, probs: &[TokenLogprobs]) -> Vec<i32> {
        if !self.return_tokens {
            return Vec::new();
        }
        probs.iter().map(|p| p.chosen.id).collect()
    }

    /// `completion_probabilities` for `probs` with `n_probs`.
    fn probabilities<'a>(&self, probs: &'a [TokenLogprobs]) -> Option<wire::Probabilities<'a>> {
        if !self.n_probs {
            return None;
        }
        Some(match self.post_sampling {
            false => wire::Probabilities::Log(wire_logprobs(probs)),
            true => wire::Probabilities::Post(post_probs(probs)),
        })
    }

    /// Prompt `index` as llama-server echoes it.
    fn prompt(&self, index: u32) -> &str {
        self.prompts.get(index as usize).map_or("", String::as_str)
    }

    /// Prompt `index`'s whole answer (or, with `content` empty, its stream's
    /// last chunk), echoing `prompt`.
    pub(super) fn completion<'a>(
        &'a self,
        index: u32,
        prompt: &'a str,
        content: &'a str,
        probs: &'a [TokenLogprobs],
        reply: &'a Reply,
        usage: &Usage,
    ) -> wire::Completion<'a> {
        let (stop_type, stopping_word) = stop_type(reply);
        wire::Completion {
            index,
            content,
            tokens: self.tokens(probs),
            id_slot: 0,
            stop: true,
            model: &self.model,
            tokens_predicted: usage.completion,
            tokens_evaluated: usage.prompt,
            generation_settings: wire::params(&self.sampling),
            prompt,
            has_new_line: content.contains('\n'),
            truncated: false,
            stop_type,
            stopping_word,
            tokens_cached: usage.prompt + usage.completion,
            timings: wire_timings(usage),
            completion_probabilities: (!content.is_empty() || !probs.is_empty())
                .then(|| self.probabilities(probs))
                .flatten(),
        }
    }

    /// The whole answer of finished jobs, one per prompt: the one answer, or
    /// with several prompts the list of them.
    pub fn whole<'a>(&'a self, choices: &'a [(Assembler, Reply)]) -> wire::Completions<'a> {
        let mut all: Vec<wire::Completion<'a>> = (0u32..)
            .zip(choices)
            .map(|(index, (text, reply))| {
                let usage = Usage::of(reply, text.stats.as_ref());
                let prompt = self.prompt(index);
                self.completion(index, prompt, &text.text, &text.logprobs, reply, &usage)
            })
            .collect();
        match self.prompts.len() {
            1 if all.len() == 1 => wire::Completions::One(Box::new(all.remove(0))),
            _ => wire::Completions::Many(all),
        }
    }
}

impl ReplyWriter for NativeWriter {
    fn piece(
        &mut self,
        sse: &mut SseStream,
        index: u32,
        piece: Piece,
        logprobs: &[TokenLogprobs],
        timings: Option<Timings>,
    ) -> io::Result<()> {
        match piece {
            Piece::Text(content) => sse.send(&encode(&wire::CompletionChunk {
                index,
                content: &content,
                tokens: self.tokens(logprobs),
                stop: false,
                id_slot: -1,
                completion_probabilities: self.probabilities(logprobs),
                timings,
                prompt_progress: None,
            })),
            // The raw path has no output filter, so no reasoning is ever split off.
            Piece::Reasoning(_) => Ok(()),
        }
    }
    /// How far prompt `index` is: a chunk with no content and `prompt_progress`.
    fn progress(
        &mut self,
        sse: &mut SseStream,
        index: u32,
        prompt: &PromptProgress,
        timings: Option<Timings>,
    ) -> io::Result<()> {
        sse.send(&encode(&wire::CompletionChunk {
            index,
            content: "",
            tokens: Vec::new(),
            stop: false,
            id_slot: -1,
            completion_probabilities: None,
            timings,
            prompt_progress: Some(wire_progress(prompt)),
        }))
    }
    /// Prompt `index`'s last chunk: `"stop": true`, empty content (it was
    /// streamed), the figures.
    fn finish(
        &mut self,
        sse: &mut SseStream,
        index: u32,
        reply: &Reply,
        usage: &Usage,
    ) -> io::Result<()> {
        let prompt = self.prompt(index);
        sse.send(&encode(&self.completion(
            index,
            prompt,
            "",
            &[],
            reply,
            usage,
        )))
    }

    fn respond(
        &self,
        responder: Responder,
        _first: (&Assembler, &Reply),
        choices: &[(Assembler, Reply)],
        _usage: &Usage,
    ) {
        responder.json(200, &self.whole(choices));
    }
}

/// `probs` as probabilities, llama-server's `post_sampling_probs` shape; an
/// alternative whose probability rounds to 0 is left out, as llama-server
/// never reports one.
fn post_probs(probs: &[TokenLogprobs]) -> Vec<wire::TokenProb<'_>> {
    fn entry(p: &TokenProb) -> wire::TokenProb<'_> {
        wire::TokenProb {
            id: p.id,
            token: String::from_utf8_lossy(&p.bytes).into_owned(),
            bytes: &p.bytes,
            prob: p.logprob.exp(),
            top_probs: None,
        }
    }
    probs
        .iter()
        .map(|t| wire::TokenProb {
            top_probs: Some(t.top.iter().map(entry).filter(|e| e.prob > 0.0).collect()),
            ..entry(&t.chosen)
        })
        .collect()
}

impl super::ApiServer {
    /// `POST /completion`.
    pub(super) fn native_completion(&self, request: &Request, responder: Responder) {
        self.metrics
            .completions_requests
            .fetch_add(1, Ordering::Relaxed);
        let Some((loaded, model, responder)) = self.local_model("/completion", responder) else {
            return;
        };
        let parsed = match parse(&request.body, &loaded.defaults, model.props().n_vocab) {
            Ok(parsed) => parsed,
            Err(error) => return self.refuse(responder, &error),
        };
        super::log_ignored("/completion", &parsed.ignored);
        self.answer_native(loaded, model, parsed, true, responder);
    }

    /// `POST /infill`: a fill-in-the-middle completion, for a model with FIM
    /// tokens (501 otherwise, as llama-server answers).
    pub(super) fn infill(&self, request: &Request, responder: Responder) {
        self.metrics
            .completions_requests
            .fetch_add(1, Ordering::Relaxed);
        let Some((loaded, model, responder)) = self.local_model("/infill", responder) else {
            return;
        };
        if !model.props().infill {
            let error = ApiError::new(
                501,
                "not_supported_error",
                "infill is not supported by this model: it has no fill-in-the-middle tokens",
            );
            return self.refuse(responder, &error);
        }
        let parsed = match parse_infill(&request.body, &loaded.defaults) {
            Ok(parsed) => parsed,
            Err(error) => return self.refuse(responder, &error),
        };
        super::log_ignored("/infill", &parsed.ignored);
        self.answer_native(loaded, model, parsed, false, responder);
    }

    /// Serves a checked `/completion` or `/infill` request: one job per prompt
    /// (`detokenize`: echo token ids as their text).
    fn answer_native(
        &self,
        loaded: &super::Loaded,
        model: &LocalModel,
        mut parsed: NativeRequest,
        detokenize: bool,
        responder: Responder,
    ) {
        if parsed.ignore_eos {
            let eog = model.props().eog_tokens.iter();
            (parsed.work.sampling.logit_bias).extend(eog.map(|&t| (t, f32::NEG_INFINITY)));
        }
        if let Err(error) = super::local_sampling(loaded, &mut parsed.work.sampling) {
            return self.refuse(responder, &error);
        }
        let prompts = (parsed.prompts.iter())
            .map(|parts| {
                prompt_text(parts, |ids| {
                    detokenize.then(|| model.detokenize(ids).ok())?
                })
            })
            .collect();
        let answer = NativeWriter {
            model: loaded.defaults.model.clone(),
            prompts,
            sampling: parsed.work.sampling.clone(),
            n_probs: parsed.n_probs,
            post_sampling: parsed.post_sampling,
            return_tokens: parsed.return_tokens,
        };
        let works = (parsed.prompts.into_iter())
            .map(|parts| Work {
                raw_prompt: Some(parts),
                ..parsed.work.clone()
            })
            .collect();
        self.serve_each(loaded, answer, works, "prompt", parsed.stream, responder);
    }
}

#[cfg(test)]
mod tests {
    use super::super::images::tests as pictures;
    use super::*;
    use serde_json::{json, Value};

    fn parse_json(body: Value) -> Result<NativeRequest, ApiError> {
        parse(body.to_string().as_bytes(), &Defaults::default(), 1000)
    }

    #[test]
    fn multimodal_data_takes_the_places_of_the_media_markers() {
        let data = pictures::png_base64();
        let prompt = |prompt: Value| parse_json(json!({ "prompt": prompt })).map(|r| r.prompts);
        let marked = json!({"prompt_string": "<__media__>What is this? <__media__>",
                            "multimodal_data": [data, data]});
        let parts = &prompt(json!(["plain", marked])).unwrap()[1];
        assert_eq!(parts.len(), 3);
        assert!(matches!(&parts[0], PromptPart::Image(image) if image.height == 3));
        assert_eq!(parts[1], PromptPart::Text("What is this? ".into()));
        assert!(matches!(&parts[2], PromptPart::Image(_)));
        assert_eq!(
            prompt_text(parts, |_| None),
            "<__media__>What is this? <__media__>"
        );
        // Without multimodal_data the marker is text, as llama-server reads it.
        let text = prompt(json!({"prompt_string": "a <__media__>"})).unwrap();
        assert_eq!(text, [vec![PromptPart::Text("a <__media__>".into())]]);
        for (bad, param, words) in [
            (
                json!({"prompt_string": "one <__media__>", "multimodal_data": [data, data]}),
                "prompt.multimodal_data",
                "has 1 <__media__> markers and 'prompt.multimodal_data' has 2 items",
            ),
            (
                json!([{"prompt_string": "none", "multimodal_data": [data]}]),
                "prompt[0].multimodal_data",
                "has 0 <__media__> markers",
            ),
            (
                json!({"prompt_string": "<__media__>", "multimodal_data": ["!!"]}),
                "prompt.multimodal_data[0]",
                "not valid base64",
            ),
            (
                json!({"prompt_string": "<__media__>", "multimodal_data": [3]}),
                "prompt.multimodal_data[0]",
                "must be a base64 string",
            ),
            (
                json!({"prompt_string": [1, 2], "multimodal_data": []}),
                "prompt.prompt_string",
                "must be a string",
            ),
            (
                json!({"prompt_string": "x", "multimodal_data": "AAAA"}),
                "prompt.multimodal_data",
                "must be an array",
            ),
        ] {
            let error = prompt(bad.clone()).expect_err("a 400");
            assert_eq!(
                (error.status, error.param.as_deref()),
                (400, Some(param)),
                "{bad}"
            );
            assert!(error.message.contains(words), "{bad}: {}", error.message);
        }
    }

    #[test]
    fn llama_servers_fields_are_read_and_its_hints_ignored() {
        let request = parse_json(json!({
            "prompt": [1, 2, "x"], "n_predict": 5, "stream": true, "top_k": 3,
            "cache_prompt": true, "id_slot": 2, "mirostat": 0, "stop": ["\n"]
        }))
        .unwrap();
        assert_eq!(
            request.prompts,
            [vec![
                PromptPart::Tokens(vec![1, 2]),
                PromptPart::Text("x".into())
            ]]
        );
        assert_eq!(request.work.sampling.max_tokens, Some(5));
        assert_eq!(request.work.sampling.top_k, Some(3));
        assert_eq!(request.work.sampling.stop, ["\n"]);
        assert!(request.stream);
        assert_eq!(request.ignored, ["mirostat"]);
    }

    #[test]
    fn a_wrong_field_is_a_400_naming_it_and_probabilities_are_asked_for() {
        for (body, param) in [
            (json!({"prompt": "a", "n_probs": 101}), "n_probs"),
            (json!({"prompt": "a", "return_tokens": 1}), "return_tokens"),
            (json!({"prompt": [5000]}), "prompt"),
            (json!({}), "prompt"),
            (json!({"prompt": "a", "n_predict": "x"}), "n_predict"),
        ] {
            let error = parse_json(body.clone()).expect_err("a 400");
            assert_eq!(error.status, 400, "{body}");
            assert_eq!(error.param.as_deref(), Some(param), "{body}");
        }
        let none = parse_json(json!({"prompt": "a", "n_probs": 0})).unwrap();
        assert_eq!((none.n_probs, none.work.sampling.logprobs), (false, None));
        let probs = parse_json(json!({"prompt": "a", "n_probs": 3})).unwrap();
        assert_eq!(
            (probs.n_probs, probs.work.sampling.logprobs),
            (true, Some(3))
        );
        // Ids alone need the chosen tokens, not their alternatives.
        let ids = parse_json(json!({"prompt": "a", "return_tokens": true})).unwrap();
        assert_eq!(
            (ids.return_tokens, ids.work.sampling.logprobs),
            (true, Some(0))
        );
    }

    #[test]
    fn several_prompts_and_prompt_objects_are_read_as_llama_server_reads_them() {
        let prompts = |prompt: Value| parse_json(json!({ "prompt": prompt })).map(|r| r.prompts);
        let text = |t: &str| vec![PromptPart::Text(t.into())];
        assert_eq!(
            prompts(json!([[1, 2], "a", {"prompt_string": "b"}])).unwrap(),
            [vec![PromptPart::Tokens(vec![1, 2])], text("a"), text("b")]
        );
        assert_eq!(prompts(json!({"prompt_string": "b"})).unwrap(), [text("b")]);
        // A token id at the top level makes the array one mixed prompt.
        assert_eq!(prompts(json!([1, "a"])).unwrap().len(), 1);
        for bad in [json!({"text": "a"}), json!([]), json!(["a", ""])] {
            let error = prompts(bad.clone()).expect_err("a 400");
            assert_eq!(error.param.as_deref(), Some("prompt"), "{bad}");
        }
        let flags =
            parse_json(json!({"prompt": "a", "post_sampling_probs": true, "ignore_eos": true}))
                .unwrap();
        assert!(flags.post_sampling && flags.ignore_eos);
    }

    #[test]
    fn the_stop_type_says_what_ended_the_answer() {
        let reply = |finish, word: Option<&str>| Reply {
            content: String::new(),
            thinking: String::new(),
            tool_calls: Vec::new(),
            finish,
            usage: None,
            artefacts: Vec::new(),
            stop_sequence: word.map(String::from),
        };
        assert_eq!(stop_type(&reply(FinishReason::Stop, None)), ("eos", ""));
        assert_eq!(
            stop_type(&reply(FinishReason::Stop, Some("\n\n"))),
            ("word", "\n\n")
        );
        assert_eq!(stop_type(&reply(FinishReason::Length, None)), ("limit", ""));
    }
}
