//! What every hosted API backend (OpenAI, Anthropic, Gemini, Ollama) does the
//! same way, written once: [`Backend`] is implemented here over a [`Dialect`],
//! which holds only what differs (the URL, the key and other headers, the
//! request body, the reply's reader, the model list's place and shape). Here a
//! request is encoded once, sent and retried ([`super::http::with_retries`]),
//! the model list is asked for, the tool names are put into the API's grammar
//! and back, the token estimate is calibrated on every reply's usage and asked
//! for counts, and the backend's info is built. [`read_sse`] is the one loop
//! over an SSE reply; each provider's [`SseReply`] applies its own events.
//!
//! Images are decided here too: [`TEXT_ONLY_MODELS`] is the one table of
//! hosted models known to read no images, and a session with images goes out
//! only when the dialect says its model reads them and every image's bytes
//! were loaded ([`check_images`]), so a text-only model gets a clear
//! [`BackendError::Invalid`] before the request rather than an upstream 400.
//! [`wire_image`] gives each dialect an image in a type its API takes.

use std::borrow::Cow;
use std::cell::Cell;
use std::io::{BufRead, Read};

use serde_json::Value;

use super::estimate::TokenEstimator;
use super::http::{self, ApiSettings};
use super::{toolnames, Backend, BackendInfo, GenerateRequest, Reply};
use crate::core::{BackendError, EventSink, FinishReason, Flow, Image, Message, Session};
use crate::stream::filter::OutputFilter;
use crate::stream::sse::SseDecoder;
use crate::util::log::{self, Category};

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

/// What every hosted backend holds besides its settings: its HTTP agent
/// (built once, with the settings' timeouts) and its token estimate (a
/// `Cell`, so that calibrating it after a reply needs no `&mut` way in).
pub struct Client {
    agent: ureq::Agent,
    estimator: Cell<TokenEstimator>,
}

impl Client {
    pub fn new(api: &ApiSettings) -> Self {
        Client {
            agent: http::build_agent(&api.base_url, &api.limits),
            estimator: Cell::new(TokenEstimator::default()),
        }
    }

    /// Runs `f` on the token estimate, taken out of its cell and put back.
    fn estimate<T>(&self, f: impl FnOnce(&mut TokenEstimator) -> T) -> T {
        let mut estimator = self.estimator.take();
        let out = f(&mut estimator);
        self.estimator.set(estimator);
        out
    }
}

/// Which request a dialect's headers are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// A JSON `POST`: the reply (streamed or not), or a dialect's own request.
    Post { stream: bool },
    /// The `GET` of the model list.
    ModelList,
}

/// A request body, encoded once so that retries resend the very same bytes,
/// and how many entries (messages, turns, contents) it carries, for the log.
pub struct Body {
    pub bytes: Vec<u8>,
    pub entries: usize,
}

impl Body {
    pub fn encode<T: serde::Serialize>(wire: &T, entries: usize) -> Result<Body, BackendError> {
        Ok(Body {
            bytes: http::encode(wire)?,
            entries,
        })
    }
}

/// How a reply is to be read: the output filter for the request's tools, the
/// context size the figures report, and whether it comes as a stream.
pub struct ReplyStart {
    pub filter: OutputFilter,
    pub context_size: u64,
    pub stream: bool,
}

/// One hosted API's own part of a backend: only what differs between the
/// providers. Sending, retrying, the model list's request, the model and the
/// token estimate are [`Backend`]'s, written once below.
pub trait Dialect: Send {
    /// The backend's kind (`BackendInfo::kind`).
    const KIND: &'static str;
    /// Whether tool names are put into the API's name grammar for the request
    /// and back in the reply (`toolnames`); Ollama takes any name.
    const WIRE_NAMES: bool = true;
    /// What the request's entries are called in the log.
    const ENTRIES: &'static str = "messages";

    /// The settings and the client.
    fn client(&self) -> (&ApiSettings, &Client);

    /// The context size in tokens (0 when unknown): the configured one, unless
    /// the dialect learns it from the server.
    fn context_size(&self) -> u64 {
        self.client().0.context_size
    }

    /// Where a reply is asked for.
    fn url(&self, request: &GenerateRequest<'_>) -> String;

    /// The key and the API's own headers for a request (the configured
    /// extra headers follow them).
    fn headers(&self, call: Call) -> Vec<(&'static str, String)>;

    /// The request body in the API's shape; a dialect that must refuse a
    /// session before sending (Ollama, one that cannot fit) does it here.
    fn body(
        &mut self,
        session: &Session,
        request: &GenerateRequest<'_>,
    ) -> Result<Body, BackendError>;

    /// Whether the response body is held to the stream's cap rather than a
    /// plain body's (Ollama's NDJSON always is).
    fn streamed(&self, request: &GenerateRequest<'_>) -> bool {
        request.stream
    }

    /// How the reply is read from the response body.
    type Reader: ReadReply;

    /// Where the model list is (or why this provider has none to ask for).
    fn models_url(&self) -> Result<String, BackendError>;

    /// The model ids in the model list's JSON.
    fn model_ids(&self, list: &Value) -> Vec<String>;

    /// Whether the model reads images ([`Backend::takes_images`]): unless it is
    /// known not to. Ollama asks the server instead.
    fn reads_images(&self) -> bool {
        !known_text_only(&self.client().0.model)
    }
}

/// The string field `key` of every object in `list` (the model lists).
pub fn ids_in(list: &Value, key: &str) -> Vec<String> {
    list.as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|m| m[key].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The partial reply after a cancel: what was shown so far (the thinking that
/// came apart from the text first), no calls run.
pub fn cancelled_reply(filter: &OutputFilter, thinking: String) -> Reply {
    Reply {
        content: filter.content().to_string(),
        thinking: thinking + filter.thinking(),
        tool_calls: Vec::new(),
        finish: FinishReason::Cancelled,
        usage: None,
        artefacts: Vec::new(),
        stop_sequence: None,
    }
}

/// A reply decoded from SSE events, one provider's state: how its events
/// parse and apply, and how its stream must end.
pub trait SseReply: Sized {
    type Event;
    /// A data line that ends the stream by itself (OpenAI's `[DONE]`).
    const END: Option<&'static str> = None;

    /// The state before the first event: the output filter for the request's
    /// tools, the context size the figures report.
    fn new(filter: OutputFilter, context_size: u64) -> Self;

    /// One event's data (typed errors for the error events).
    fn parse(data: &str) -> Result<Self::Event, BackendError>;
    fn apply(&mut self, event: Self::Event, sink: &mut dyn EventSink)
        -> Result<Flow, BackendError>;
    /// Whether an event said the reply is over (reading stops there).
    fn ended(&self) -> bool {
        false
    }
    /// What the stream still lacked when it closed (`closed`: [`Self::END`]
    /// arrived); `None` when the reply is whole.
    fn missing(&self, closed: bool) -> Option<&'static str>;
    fn cancelled(self) -> Reply;
    /// Flushes the filter, emits `Stats` and builds the reply.
    fn complete(self, sink: &mut dyn EventSink) -> Reply;
    /// Reads a whole (not streamed) body: by default one event's JSON.
    fn read_whole(
        mut self,
        body: impl Read,
        sink: &mut dyn EventSink,
        url: &str,
    ) -> Result<Reply, BackendError> {
        let text = http::read_text(body, url)?;
        if self.apply(Self::parse(&text)?, sink)? == Flow::Cancel {
            return Ok(self.cancelled());
        }
        Ok(self.complete(sink))
    }
}

/// Reads a reply from a response body into events and a [`Reply`].
pub trait ReadReply {
    fn read(
        body: http::BodyReader,
        start: ReplyStart,
        sink: &mut dyn EventSink,
        url: &str,
    ) -> Result<Reply, BackendError>;
}

/// A streamed body through [`read_sse`], a whole one through the provider's
/// [`SseReply::read_whole`].
impl<S: SseReply> ReadReply for S {
    fn read(
        body: http::BodyReader,
        start: ReplyStart,
        sink: &mut dyn EventSink,
        url: &str,
    ) -> Result<Reply, BackendError> {
        let state = S::new(start.filter, start.context_size);
        match start.stream {
            true => read_sse(body, state, sink, url),
            false => state.read_whole(body, sink, url),
        }
    }
}

/// Reads an SSE body into `state` until its end; a stream cut off before
/// its end is a `Protocol` error, a cancel keeps what was shown.
pub fn read_sse<S: SseReply>(
    reader: impl BufRead,
    mut state: S,
    sink: &mut dyn EventSink,
    url: &str,
) -> Result<Reply, BackendError> {
    let mut closed = false;
    for event in SseDecoder::new(reader) {
        let event = event.map_err(|e| http::io_error(e, url))?;
        let data = event.data.trim();
        if S::END == Some(data) {
            closed = true;
            break;
        }
        if data.is_empty() {
            continue;
        }
        if state.apply(S::parse(data)?, sink)? == Flow::Cancel || sink.cancelled() {
            return Ok(state.cancelled());
        }
        if state.ended() {
            break;
        }
    }
    if let Some(missing) = state.missing(closed) {
        return Err(BackendError::Protocol(format!(
            "{url}: the stream ended before {missing}"
        )));
    }
    Ok(state.complete(sink))
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
        return Err(BackendError::invalid(format!(
            "the {} model {} takes no images; send text only, or choose a model that reads images",
            D::KIND,
            dialect.client().0.model
        )));
    }
    match images.iter().find(|image| image.bytes.is_empty()) {
        // `get`, not slicing: a hand-edited session may hold any text there.
        Some(image) => Err(BackendError::invalid(format!(
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
        BackendError::invalid(format!("cannot convert a {} image to PNG: {e}", image.mime))
    })
}

/// Sends one reply's request, retrying where that is safe, names already in
/// wire form.
fn send<D: Dialect>(
    dialect: &mut D,
    session: &Session,
    request: &GenerateRequest<'_>,
    sink: &mut dyn EventSink,
) -> Result<Reply, BackendError> {
    let body = dialect.body(session, request)?;
    let url = dialect.url(request);
    log::debug(Category::Llm, || {
        format!(
            "request: {} {}, {} bytes",
            body.entries,
            D::ENTRIES,
            body.bytes.len()
        )
    });
    let (api, _) = dialect.client();
    if let Some(key) = &api.api_key {
        log::debug(Category::Http, || {
            format!("POST {url} with key {}", log::redact(key))
        });
    }
    let policy = api.policy();
    let dialect = &*dialect;
    http::with_retries(&policy, sink, |sink| {
        attempt(dialect, &url, &body.bytes, request, sink)
    })
}

/// One try: the request sent, its reply read.
fn attempt<D: Dialect>(
    dialect: &D,
    url: &str,
    body: &[u8],
    request: &GenerateRequest<'_>,
    sink: &mut dyn EventSink,
) -> Result<Reply, BackendError> {
    let (api, _) = dialect.client();
    let call = Call::Post {
        stream: request.stream,
    };
    let response = http::send(post(dialect, url, call), body, url, &api.tape)?;
    let reader = http::body_reader(response, &api.limits, dialect.streamed(request));
    let start = ReplyStart {
        filter: OutputFilter::for_tools(request.tools),
        context_size: dialect.context_size(),
        stream: request.stream,
    };
    D::Reader::read(reader, start, sink, url)
}

/// A JSON `POST` to `url` with the dialect's headers, then the configured ones.
pub fn post<D: Dialect>(
    dialect: &D,
    url: &str,
    call: Call,
) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
    let builder = dialect.client().1.agent.post(url);
    with_headers(
        dialect,
        builder.header("Content-Type", "application/json"),
        call,
    )
}

/// The dialect's headers for `call`, then the configured extra ones.
fn with_headers<D: Dialect, B>(
    dialect: &D,
    mut builder: ureq::RequestBuilder<B>,
    call: Call,
) -> ureq::RequestBuilder<B> {
    for (name, value) in dialect.headers(call) {
        builder = builder.header(name, value);
    }
    dialect.client().0.with_headers(builder)
}

impl<D: Dialect> Backend for D {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            kind: D::KIND,
            model: self.client().0.model.clone(),
            context_size: self.context_size(),
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
                send(self, session, request, sink)
            })?
        } else {
            send(self, session, request, sink)?
        };
        self.client()
            .1
            .estimate(|estimator| estimator.observe(session, &reply));
        Ok(reply)
    }

    fn count_tokens(&self, message: &Message) -> u32 {
        self.client()
            .1
            .estimate(|estimator| estimator.count_message(message))
    }

    /// The model list's `GET`, with the dialect's headers.
    fn list_models(&self) -> Result<Vec<String>, BackendError> {
        let url = self.models_url()?;
        let builder = with_headers(self, self.client().1.agent.get(&url), Call::ModelList);
        let value = http::get_json(builder, &url)?;
        Ok(self.model_ids(&value))
    }
}

/// The fuzzers' entry (`crate::fuzz`): `bytes` read as an SSE stream and as a whole body.
#[cfg(test)]
pub(crate) fn fuzz_sse<S: SseReply>(bytes: &[u8]) {
    let state = || S::new(OutputFilter::new(vec!["read".into()]), 0);
    let _ = read_sse(bytes, state(), &mut Vec::new(), "fuzz");
    let _ = state().read_whole(bytes, &mut Vec::new(), "fuzz");
}
