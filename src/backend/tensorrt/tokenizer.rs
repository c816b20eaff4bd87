//! What the TensorRT-LLM executor leaves to us: tokens in, tokens out. This module
//! loads the engine directory's Hugging Face tokenizer files and turns text into
//! ids and ids back into text.
//!
//! - `tokenizer.json` through the `tokenizers` crate (Hugging Face's own
//!   implementation, so ids match the engine's; docs/DEPENDENCIES.md says why a crate).
//! - `tokenizer_config.json`: `bos_token`, `eos_token` (strings or added-token
//!   objects) and `chat_template`; a `chat_template.jinja` file wins over the
//!   latter, as in transformers. `generation_config.json`'s `eos_token_id` (one
//!   id or a list) adds end-of-turn ids, as do the usual end-of-turn special
//!   tokens the vocabulary has.
//! - [`Detokenizer`] decodes cumulatively, the way TGI does: it re-decodes a short
//!   window of recent ids and emits only what grew, so a SentencePiece `▁` space
//!   at a chunk boundary survives and a character split over several byte tokens
//!   comes out whole, once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

use crate::core::BackendError;

/// End-of-turn special tokens of common chat formats; ids are taken only when
/// the vocabulary has them.
const END_OF_TURN_TOKENS: [&str; 6] = [
    "<|im_end|>",
    "<|eot_id|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|return|>",
];

/// An engine directory's tokenizer and the chat settings beside it.
pub struct EngineTokenizer {
    inner: tokenizers::Tokenizer,
    pub bos_text: String,
    pub eos_text: String,
    /// The id the executor stops at (`endId`).
    pub eos_id: Option<u32>,
    /// Every id that ends a turn, `eos_id` included.
    pub end_ids: BTreeSet<u32>,
    /// The Jinja chat template, `None` when the engine directory has none.
    pub chat_template: Option<String>,
    /// The special tokens that are chat-format markers, decoded as text for the
    /// output filter (llama-server's preserved tokens; see
    /// [`crate::stream::format::is_marker`]); other special tokens are left out.
    markers: BTreeMap<u32, String>,
}

fn config_error(path: &Path, what: impl std::fmt::Display) -> BackendError {
    BackendError::Config(format!("{}: {what}", path.display()))
}

fn read_json(path: &Path) -> Result<Option<Value>, BackendError> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| config_error(path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(config_error(path, e)),
    }
}

/// A special token given as a string or as an added-token object `{"content": ...}`.
fn token_text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) => Some(s.clone()),
        Value::Object(map) => map.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

/// `chat_template` as one string, or the `default` entry of a named list.
fn template_from_config(config: &Value) -> Option<String> {
    match config.get("chat_template")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(entries) => {
            let named = |name: &str| {
                entries
                    .iter()
                    .find(|e| e.get("name").and_then(Value::as_str) == Some(name))
            };
            let entry = named("default").or_else(|| entries.first())?;
            entry.get("template")?.as_str().map(str::to_string)
        }
        _ => None,
    }
}

/// `eos_token_id` of `generation_config.json`: one id or a list.
fn generation_eos_ids(config: Option<&Value>) -> Vec<u32> {
    let Some(value) = config.and_then(|c| c.get("eos_token_id")) else {
        return Vec::new();
    };
    let as_id = |v: &Value| v.as_u64().and_then(|n| u32::try_from(n).ok());
    match value {
        Value::Array(ids) => ids.iter().filter_map(as_id).collect(),
        other => as_id(other).into_iter().collect(),
    }
}

impl EngineTokenizer {
    /// Loads the tokenizer files of `dir`; `tokenizer.json` is required.
    pub fn load(dir: &Path) -> Result<EngineTokenizer, BackendError> {
        let path = dir.join("tokenizer.json");
        if !path.is_file() {
            return Err(config_error(
                &path,
                "missing: copy the model's Hugging Face tokenizer files into the engine directory (docs/tensorrt.md)",
            ));
        }
        let inner = tokenizers::Tokenizer::from_file(&path).map_err(|e| config_error(&path, e))?;
        let config = read_json(&dir.join("tokenizer_config.json"))?.unwrap_or(Value::Null);
        let generation = read_json(&dir.join("generation_config.json"))?;
        let jinja_path = dir.join("chat_template.jinja");
        let chat_template = match std::fs::read_to_string(&jinja_path) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => template_from_config(&config),
            Err(e) => return Err(config_error(&jinja_path, e)),
        };
        let bos_text = token_text(config.get("bos_token")).unwrap_or_default();
        let eos_text = token_text(config.get("eos_token")).unwrap_or_default();
        let eos_id = inner
            .token_to_id(&eos_text)
            .or_else(|| generation_eos_ids(generation.as_ref()).first().copied());
        let mut end_ids: BTreeSet<u32> = generation_eos_ids(generation.as_ref())
            .into_iter()
            .collect();
        end_ids.extend(eos_id);
        end_ids.extend(
            END_OF_TURN_TOKENS
                .iter()
                .filter_map(|t| inner.token_to_id(t)),
        );
        let markers = inner
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, token)| token.special && crate::stream::format::is_marker(&token.content))
            .map(|(id, token)| (id, token.content))
            .collect();
        Ok(EngineTokenizer {
            inner,
            bos_text,
            eos_text,
            eos_id,
            end_ids,
            chat_template,
            markers,
        })
    }

    /// The ids of `text`, without adding special tokens: the chat template already
    /// wrote them, as transformers' `apply_chat_template` assumes.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, BackendError> {
        let encoding = self
            .inner
            .encode(text, false)
            .map_err(|e| BackendError::Config(format!("cannot tokenize the prompt: {e}")))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The text of `ids`, special tokens left out except the chat-format markers.
    fn decode(&self, ids: &[u32]) -> String {
        let mut text = String::new();
        let mut run = 0;
        for (i, id) in ids.iter().enumerate() {
            if let Some(marker) = self.markers.get(id) {
                text.push_str(&self.inner.decode(&ids[run..i], true).unwrap_or_default());
                text.push_str(marker);
                run = i + 1;
            }
        }
        text.push_str(&self.inner.decode(&ids[run..], true).unwrap_or_default());
        text
    }

    /// The text of `ids` with special tokens, to read what was enqueued.
    #[cfg(test)]
    pub fn decode_for_test(&self, ids: &[u32]) -> String {
        self.inner.decode(ids, false).unwrap_or_default()
    }

    /// The id of `text` when it is one token of the vocabulary.
    #[cfg(test)]
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.inner.token_to_id(text)
    }
}

/// Turns a stream of generated ids into text deltas (see the module doc).
#[derive(Debug, Default)]
pub struct Detokenizer {
    ids: Vec<u32>,
    /// Start of the window re-decoded for context (its text is already out).
    prefix_offset: usize,
    /// End of what has been emitted.
    read_offset: usize,
}

impl Detokenizer {
    /// Adds `ids` and returns the text that is now complete.
    pub fn push(&mut self, tokenizer: &EngineTokenizer, ids: &[u32]) -> String {
        let mut out = String::new();
        // One id at a time, so a window never spans more than the pending tail.
        for &id in ids {
            self.ids.push(id);
            out.push_str(&self.step(tokenizer));
        }
        out
    }

    fn step(&mut self, tokenizer: &EngineTokenizer) -> String {
        let prefix = tokenizer.decode(&self.ids[self.prefix_offset..self.read_offset]);
        let full = tokenizer.decode(&self.ids[self.prefix_offset..]);
        // An incomplete character decodes to U+FFFD: wait for the rest of its bytes.
        if full.ends_with(char::REPLACEMENT_CHARACTER) || full.len() <= prefix.len() {
            return String::new();
        }
        let delta = match full.strip_prefix(prefix.as_str()) {
            Some(delta) => delta.to_string(),
            // The window decodes differently with the new id (rare merges of
            // whitespace): emit what follows the common part.
            None => full.chars().skip(prefix.chars().count()).collect(),
        };
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
        delta
    }

    /// Whatever is still held back at the end (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self, tokenizer: &EngineTokenizer) -> String {
        if self.read_offset == self.ids.len() {
            return String::new();
        }
        let prefix = tokenizer.decode(&self.ids[self.prefix_offset..self.read_offset]);
        let full = tokenizer.decode(&self.ids[self.prefix_offset..]);
        self.prefix_offset = self.ids.len();
        self.read_offset = self.ids.len();
        full.strip_prefix(prefix.as_str()).map_or_else(
            || full.chars().skip(prefix.chars().count()).collect(),
            str::to_string,
        )
    }
}
