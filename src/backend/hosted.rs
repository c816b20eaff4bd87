//! What every hosted API backend (OpenAI, Anthropic, Gemini, Ollama) does the
//! same way, written once: [`Backend`] is implemented here over a [`Dialect`],
//! which holds only what differs (how one request is sent, how the model list
//! is read). Here the tool names are put into the API's grammar and back, the
//! token estimate is calibrated on every reply's usage and asked for counts,
//! and the backend's info is built.
//!
//! Images are decided here too: [`TEXT_ONLY_MODELS`] is the one table of
//! hosted models known to read no images, and a session with images goes out
//! only when the dialect says its model reads them and every image's bytes
//! were loaded ([`check_images`]), so a text-only model gets a clear
//! [`BackendError::Invalid`] before the request rather than an upstream 400.
//! [`wire_image`] gives each dialect an image in a type its API takes.

use std::borrow::Cow;

use super::estimate::TokenEstimator;
use super::{toolnames, Backend, BackendInfo, GenerateRequest, Reply};
use crate::core::{BackendError, EventSink, Image, Message, Session};

/// Hosted models known to read no images, as name patterns (a trailing `*`
/// matches any rest), compared case-insensitively with the model name after
/// its last `/` (so `openai/gpt-3.5-turbo` on a router matches too). Every
/// other model is taken to read images: a provider's newer models do, and an
/// unknown one answers for itself.
pub const TEXT_ONLY_MODELS: &[&str] = &[
    // OpenAI: the GPT-3.5 and first GPT-4 generations, the small reasoners, the old completions models.
    "gpt-3.5*",
    "gpt-4",
    "gpt-4-0314",
    "gpt-4-0613",
    "gpt-4-32k*",
    "o1-mini*",
    "o1-preview*",
    "o3-mini*",
    "davinci*",
    "babbage*",
    "text-davinci*",
    // Anthropic before Claude 3.
    "claude-2*",
    "claude-instant*",
    // DeepSeek's API (behind the OpenAI backend) and its open reasoner.
    "deepseek-chat",
    "deepseek-reasoner",
    "deepseek-coder*",
    "deepseek-r1*",
    // Gemini 1.0 Pro (its vision model was a separate name).
    "gemini-pro",
    "gemini-1.0-pro",
    "gemini-1.0-pro-0*",
];

/// Whether `model` is in [`TEXT_ONLY_MODELS`].
pub fn known_text_only(model: &str) -> bool {
    let name = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    TEXT_ONLY_MODELS
        .iter()
        .any(|pattern| match pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == *pattern,
        })
}

/// One hosted API's own part of a backend.
pub trait Dialect: Send {
    /// The backend's kind (`BackendInfo::kind`).
    const KIND: &'static str;
    /// Whether tool names are put into the API's name grammar for the request
    /// and back in the reply (`toolnames`); Ollama takes any name.
    const WIRE_NAMES: bool = true;

    /// The model asked for and its context size in tokens (0 when unknown).
    fn model(&self) -> (String, u64);

    /// Sends one request and reads its reply, retrying where that is safe.
    fn send(
        &mut self,
        session: &Session,
        request: &GenerateRequest<'_>,
        sink: &mut dyn EventSink,
    ) -> Result<Reply, BackendError>;

    /// The model ids the provider lists.
    fn models(&self) -> Result<Vec<String>, BackendError>;

    fn estimator(&self) -> &TokenEstimator;
    fn estimator_mut(&mut self) -> &mut TokenEstimator;

    /// Whether the model reads images ([`Backend::takes_images`]): unless it is
    /// known not to. Ollama asks the server instead.
    fn reads_images(&self) -> bool {
        !known_text_only(&self.model().0)
    }
}

/// Refuses a session with images that the model cannot read, or whose image
/// bytes were never loaded (a session back from disk before its store was
/// read): an empty image must never be sent.
fn check_images<D: Dialect>(dialect: &D, session: &Session) -> Result<(), BackendError> {
    let images: Vec<&Image> = session
        .messages
        .iter()
        .flat_map(|m| &m.images)
        .map(|part| &part.image)
        .collect();
    if images.is_empty() {
        return Ok(());
    }
    if !dialect.reads_images() {
        return Err(BackendError::Invalid(format!(
            "the {} model {} takes no images; send text only, or choose a model that reads images",
            D::KIND,
            dialect.model().0
        )));
    }
    match images.iter().find(|image| image.bytes.is_empty()) {
        // `get`, not slicing: a hand-edited session may hold any text there.
        Some(image) => Err(BackendError::Invalid(format!(
            "image {} ({}) has no bytes: the session's image store was not loaded",
            image.sha256.get(..12).unwrap_or(&image.sha256),
            image.mime
        ))),
        None => Ok(()),
    }
}

/// `image` for an API that takes the types in `accepted`: itself when its type
/// is one of them, else re-encoded as PNG (Gemini, for one, takes no GIF).
pub fn wire_image<'a>(image: &'a Image, accepted: &[&str]) -> Result<Cow<'a, Image>, BackendError> {
    if accepted.contains(&image.mime.as_str()) {
        return Ok(Cow::Borrowed(image));
    }
    image.to_png().map(Cow::Owned).map_err(|e| {
        BackendError::Invalid(format!("cannot convert a {} image to PNG: {e}", image.mime))
    })
}

impl<D: Dialect> Backend for D {
    fn info(&self) -> BackendInfo {
        let (model, context_size) = self.model();
        BackendInfo {
            kind: D::KIND,
            model,
            context_size,
            local: false,
        }
    }

    fn takes_images(&self) -> bool {
        self.reads_images()
    }

    fn generate(
        &mut self,
        session: &Session,
        request: &GenerateRequest<'_>,
        sink: &mut dyn EventSink,
    ) -> Result<Reply, BackendError> {
        check_images(self, session)?;
        let reply = if D::WIRE_NAMES {
            toolnames::with_wire_names(session, request, |session, request| {
                self.send(session, request, sink)
            })?
        } else {
            self.send(session, request, sink)?
        };
        self.estimator_mut().observe(session, &reply);
        Ok(reply)
    }

    fn count_tokens(&self, message: &Message) -> u32 {
        self.estimator().count_message(message)
    }

    fn list_models(&self) -> Result<Vec<String>, BackendError> {
        self.models()
    }
}
