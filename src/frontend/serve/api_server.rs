//! `shepherd --server`: an OpenAI-compatible API (and Anthropic's Messages
//! API) in front of any backend, stateless: each request brings its whole
//! conversation (but for the Responses API's `previous_response_id`, which
//! reads the answers [`stored`] keeps).
//!
//! Routes: `POST /v1/chat/completions`, `POST /v1/messages`,
//! `POST /v1/completions` (a raw prompt, no chat template; [`completions`]),
//! `GET /v1/models`, `GET /v1/models/{id}`, `GET /health` (503 while the
//! model loads; public, as is the chat page at `GET /`, `super::ui`),
//! `GET /metrics` (Prometheus text, shepherd's and llama-server's names,
//! [`metrics`]), `POST /v1/responses` ([`responses`]) with
//! `GET`/`DELETE /v1/responses/{id}` ([`stored`]); llama-server's unprefixed
//! spellings of the OpenAI routes (`/chat/completions`, `/completions`,
//! `/models`, `/responses`) are the same routes. Every answer carries
//! llama-server's `Process-Start-Time-Unix`.
//! With the in-process model also `POST /v1/embeddings`, and llama-server's
//! `POST /embedding` (its own shape; `POST /embeddings` too for a body with
//! `content`, else OpenAI's), `POST /tokenize`, `POST /detokenize`,
//! `POST /apply-template`, `GET /props` and `GET /slots` ([`local`]; a 501 with
//! `--no-slots`), its own `POST /completion` ([`native`]) and, on a reranker
//! started with `--pooling rank`, `POST /rerank` ([`rerank`]); other backends
//! answer those, and `/v1/completions`, with 501. With `AIP_MODE=PREDICTION`,
//! Vertex AI's `POST /predict` runs instances through these routes ([`predict`]).
//! Ollama's API (`/api/chat`, `/api/generate`, `/api/tags`, `/api/show`,
//! `/api/ps`, `/api/version`, `/api/embed`, `/api/embeddings`, `/api/pull`,
//! `/api/copy`, `/api/delete`) is [`ollama`].
//!
//! Flow of a generation request, on its connection's thread:
//! 1. The body is checked field by field ([`openai::parse`],
//!    [`anthropic::parse`]); any fault is a 400 naming the field, and nothing
//!    reaches a backend. Image parts of every route are read there by
//!    [`images`] (decoded under the limits; http(s) URLs only with
//!    `--allow-image-urls`); whether the model takes them is the backend's to say.
//! 2. The [`pool::Pool`] admits it (a free worker or room in the FIFO queue)
//!    or it gets 503 with `Retry-After`.
//! 3. The response head is written only when the job's first output
//!    arrives: an error before any output (context overflow from the prefill,
//!    an upstream error) becomes a proper status, for every backend.
//! 4. Until then, and between events, the connection watches its client; one
//!    that hung up cancels its job (out of the queue, or stopped at the next
//!    token), so its slot is free within a tick.
//!
//! The backends are loaded on a thread after the socket is bound, so
//! `/health` answers 503 while a model loads.
//! The in-process model may leave memory when idle (`--sleep-idle-seconds`):
//! `/health`, `/props` (`is_sleeping`), the model lists, `/metrics` and
//! `/api/ps` answer without waking it; every route that asks the model wakes it.

mod anthropic;
mod completions;
mod error;
mod fields;
mod images;
mod local;
mod metrics;
mod model_routes;
mod native;
mod ollama;
mod openai;
mod pool;
mod predict;
mod rerank;
mod responses;
mod sampling_fields;
mod serve;
mod stored;
mod text;
mod tool_types;
mod usage;
mod wire;
mod writer;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::backend::llamacpp::LocalModel;
use crate::backend::{BackendInfo, Sampling};
use crate::config::resolve::Settings;
use crate::core::{Message, Role, ToolCall};

use super::access::{Access, ServerKind};
use super::agent_api::{self, AgentApi};
use super::http::{Handler, Request, Responder};
use super::ui;
use crate::frontend::connect;
use error::ApiError;
use metrics::Metrics;
use model_routes::CountRoute;
use pool::{Pool, ServerTools};
pub use usage::Usage;

/// How often a waiting connection checks whether its client is still there.
const TICK: Duration = Duration::from_millis(100);
/// Longest silence on a stream before a keep-alive comment.
const KEEPALIVE: Duration = Duration::from_secs(10);
/// Parallel requests to an API backend when `--parallel` is not given (the
/// in-process model defaults to one slot).
const DEFAULT_API_PARALLEL: usize = 4;

/// What a request falls back to for the fields it leaves out.
#[derive(Debug, Clone, Default)]
pub struct Defaults {
    /// The model id served (and echoed when a request names none).
    pub model: String,
    pub system_prompt: String,
    pub sampling: Sampling,
    pub use_tools: bool,
    /// Answers carry llama-server's `__verbose` object unless a request says
    /// otherwise (`--verbose`).
    pub verbose: bool,
    /// Whether image parts may be http(s) URLs (`--allow-image-urls`).
    pub image_urls: images::ImageUrls,
}

impl Defaults {
    /// The largest `max_tokens` accepted: any count a client may write. It is a cap,
    /// not a reservation (`Sampling::answer_reserve`): as with llama-server, an answer
    /// that reaches the end of the context stops there with `finish_reason: length`.
    fn max_tokens_limit(&self) -> i64 {
        i64::from(u32::MAX)
    }
}

/// The server once its backends are loaded.
struct Loaded {
    pool: Arc<Pool>,
    defaults: Defaults,
    /// The model's names (`--alias`, its id first; else the id) and tags
    /// (`--tags`), listed in `/v1/models` as llama-server lists them.
    aliases: Vec<String>,
    tags: Vec<String>,
    info: BackendInfo,
    /// The in-process model's embeddings, tokenizer and properties; `None`
    /// for API backends.
    local: Option<LocalModel>,
}

/// The server's shared state.
pub struct ApiServer {
    loaded: OnceLock<Loaded>,
    /// The agent management endpoints (MCP servers, profiles, tool calls,
    /// emergency stop), mounted with `--use-tools`.
    agent_api: Option<AgentApi>,
    metrics: Metrics,
    /// The Responses API's stored answers (`--responses-store`).
    responses: Arc<stored::Store>,
    started: u64,
    next_id: AtomicU64,
    /// The models directories (`models_dir`, then the model cache): `/api/tags`
    /// lists their GGUF files; `/api/pull` writes into the first.
    models_dirs: Vec<std::path::PathBuf>,
    /// `GET /slots` is served (`--slots`, the default; `--no-slots`: 501).
    slots: bool,
    /// Vertex AI's routes (`AIP_MODE=PREDICTION`).
    vertex: Option<crate::config::resolve::VertexRoutes>,
}

/// Warns of the hosted tools a request offered and this server dropped: a
/// `Warning` header each, and a debug line.
fn warn_dropped(route: &str, dropped: &[String], responder: &mut Responder) {
    if dropped.is_empty() {
        return;
    }
    crate::util::log::debug(crate::util::log::Category::Http, || {
        format!("{route}: dropped hosted tools: {}", dropped.join(", "))
    });
    for (name, value) in tool_types::warnings(dropped) {
        responder.add_header(name, value);
    }
}

/// Names in a debug line (`--debug=http`) the request fields a route ignored, as
/// llama-server ignores a field it does not know.
fn log_ignored(route: &str, ignored: &[String]) {
    if !ignored.is_empty() {
        crate::util::log::debug(crate::util::log::Category::Http, || {
            format!("{route}: ignored request fields: {}", ignored.join(", "))
        });
    }
}

/// Token probabilities and logit biases name the in-process model's tokens: with
/// another backend they are a 400; a biased id must be in the vocabulary, and a
/// bias keyed by text becomes the bias of each of its tokens (as llama-server
/// tokenizes it: no BOS).
fn local_sampling(loaded: &Loaded, sampling: &mut Sampling) -> Result<(), ApiError> {
    let wants = if sampling.logprobs.is_some() {
        "logprobs"
    } else if !sampling.logit_bias.is_empty() || !sampling.logit_bias_text.is_empty() {
        "logit_bias"
    } else {
        return Ok(());
    };
    let Some(model) = &loaded.local else {
        return Err(ApiError::invalid(
            wants,
            format!("'{wants}' needs the in-process model (--server -m FILE.gguf)"),
        ));
    };
    for (text, bias) in std::mem::take(&mut sampling.logit_bias_text) {
        let tokens = model
            .tokenize(text, false)
            .map_err(|e| local::from_model(e, "logit_bias"))?;
        sampling
            .logit_bias
            .extend(tokens.into_iter().map(|(id, _)| (id, bias)));
    }
    let n_vocab = model.props().n_vocab;
    match sampling.logit_bias.iter().find(|(id, _)| *id >= n_vocab) {
        Some((id, _)) => Err(ApiError::invalid(
            "logit_bias",
            format!(
                "token id {id} is outside the vocabulary (0 to {})",
                n_vocab - 1
            ),
        )),
        None => Ok(()),
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl ApiServer {
    fn new(responses_store: usize) -> ApiServer {
        ApiServer {
            loaded: OnceLock::new(),
            agent_api: None,
            metrics: Metrics::default(),
            responses: Arc::new(stored::Store::new(responses_store)),
            started: now_secs(),
            next_id: AtomicU64::new(1),
            models_dirs: Vec::new(),
            slots: true,
            vertex: None,
        }
    }

    /// A fresh id: `<prefix><24 hex>`, unique within this process and run.
    fn new_id(&self, prefix: &str) -> String {
        let n = self.next_id.fetch_add(1, Ordering::SeqCst);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        format!(
            "{prefix}{:08x}{:08x}{:08x}",
            self.started as u32, nanos, n as u32
        )
    }

    fn loaded(&self, responder: Responder) -> Option<(&Loaded, Responder)> {
        match self.loaded.get() {
            Some(loaded) => Some((loaded, responder)),
            None => {
                let error = ApiError::busy("the model is still loading", 5);
                responder.json_with(503, &error.openai_body(), &error.headers());
                None
            }
        }
    }

    fn health(&self, responder: Responder) {
        match self.loaded.get() {
            Some(_) => responder.json(200, &wire::Health { status: "ok" }),
            None => responder.json_with(
                503,
                &wire::Health { status: "loading" },
                &[("Retry-After", "5".into())],
            ),
        }
    }

    fn model_entry<'a>(&self, loaded: &'a Loaded) -> wire::openai::Model<'a> {
        wire::openai::Model {
            id: &loaded.defaults.model,
            aliases: &loaded.aliases,
            tags: &loaded.tags,
            object: "model",
            created: self.started,
            owned_by: "shepherd",
            max_model_len: loaded.info.context_size,
            backend: None,
        }
    }

    fn models(&self, responder: Responder) {
        let Some((loaded, responder)) = self.loaded(responder) else {
            return;
        };
        responder.json(
            200,
            &wire::openai::ModelList {
                object: "list",
                data: [self.model_entry(loaded)],
            },
        );
    }

    fn model(&self, id: &str, responder: Responder) {
        let Some((loaded, responder)) = self.loaded(responder) else {
            return;
        };
        if id == loaded.defaults.model || loaded.aliases.iter().any(|a| a == id) {
            let body = wire::openai::Model {
                backend: Some(loaded.info.kind),
                ..self.model_entry(loaded)
            };
            responder.json(200, &body);
        } else {
            let mut error = ApiError::new(
                404,
                "invalid_request_error",
                format!(
                    "the model '{id}' does not exist; this server serves '{}'",
                    loaded.defaults.model
                ),
            );
            error.code = Some("model_not_found".into());
            responder.json_with(404, &error.openai_body(), &[]);
        }
    }

    /// A request refused before any work: counted, answered in OpenAI's shape.
    fn refuse(&self, responder: Responder, error: &ApiError) {
        self.metrics
            .rejected_invalid
            .fetch_add(1, Ordering::Relaxed);
        responder.json_with(error.status, &error.openai_body(), &error.headers());
    }

    /// The in-process model's handle, or the 501 (or the 503 while loading)
    /// already answered.
    fn local_model(
        &self,
        route: &str,
        responder: Responder,
    ) -> Option<(&Loaded, &LocalModel, Responder)> {
        let (loaded, responder) = self.loaded(responder)?;
        match &loaded.local {
            Some(model) => Some((loaded, model, responder)),
            None => {
                self.refuse(responder, &local::unsupported(route));
                None
            }
        }
    }
}

impl Handler for ApiServer {
    /// Routes a request: long because it is the route table, one arm per route.
    fn handle(&self, request: Request, mut responder: Responder) {
        // When this server started, in Unix seconds, on every answer (llama-server
        // sends it with `/metrics`; exporters read it there).
        responder.add_header("Process-Start-Time-Unix", self.started.to_string());
        let path = openai_route(request.path.trim_end_matches('/'));
        match (request.method.as_str(), path.as_ref()) {
            ("GET", "/health" | "/v1/health") => self.health(responder),
            ("GET", "/metrics") => {
                let loaded = self.loaded.get();
                let pool = loaded.map(|l| &*l.pool);
                let local = loaded.and_then(|l| l.local.as_ref());
                let decode = local.map(LocalModel::counters).unwrap_or_default();
                let text = self.metrics.render(pool, decode);
                responder.text(200, "text/plain; version=0.0.4", &text);
            }
            ("GET", "/v1/models") => self.models(responder),
            ("GET", id) if id.starts_with("/v1/models/") => {
                self.model(&id["/v1/models/".len()..], responder)
            }
            ("POST", "/v1/chat/completions") => self.chat(&request, responder),
            ("POST", "/v1/messages") => self.messages(&request, responder),
            ("POST", "/v1/responses") => self.responses(&request, responder),
            ("GET" | "DELETE", id) if id.starts_with("/v1/responses/") => {
                self.stored_response(&request.method, &id["/v1/responses/".len()..], responder)
            }
            ("POST", "/v1/messages/count_tokens") => {
                self.count_tokens(&request, responder, CountRoute::Messages)
            }
            ("POST", "/v1/chat/completions/input_tokens") => {
                self.count_tokens(&request, responder, CountRoute::Chat)
            }
            ("POST", "/v1/responses/input_tokens") => {
                self.count_tokens(&request, responder, CountRoute::Responses)
            }
            ("POST", "/v1/completions") => self.completions(&request, responder),
            ("POST", "/v1/embeddings") => self.embeddings(&request, responder),
            ("POST", "/embeddings") => self.unprefixed_embeddings(&request, responder),
            ("POST", "/embedding") => self.native_embeddings("/embedding", &request, responder),
            ("POST", "/tokenize") => self.tokenize(&request, responder),
            ("POST", "/detokenize") => self.detokenize(&request, responder),
            ("GET", "/props") => self.props(responder),
            ("GET", "/slots") => self.slots(&request, responder),
            ("POST", slot) if slot.starts_with("/slots/") => self.slots(&request, responder),
            ("POST", "/completion") => self.native_completion(&request, responder),
            ("POST", "/infill") => self.infill(&request, responder),
            ("POST", "/apply-template") => self.apply_template(&request, responder),
            ("POST", route @ ("/rerank" | "/reranking" | "/v1/rerank" | "/v1/reranking")) => {
                self.rerank(route, &request, responder)
            }
            ("POST", "/api/chat") => {
                self.ollama_generation(ollama::Route::Chat, &request, responder)
            }
            ("POST", "/api/generate") => {
                self.ollama_generation(ollama::Route::Generate, &request, responder)
            }
            ("GET", "/api/tags") => self.ollama_tags(responder),
            ("POST", "/api/show") => self.ollama_show(&request, responder),
            ("GET", "/api/ps") => self.ollama_ps(responder),
            ("GET", "/api/version") => ollama::version(responder),
            ("POST", "/api/pull") => self.ollama_pull(&request, responder),
            ("DELETE", "/api/delete") => self.ollama_delete(&request, responder),
            ("POST", "/api/copy") => self.ollama_copy(&request, responder),
            ("POST", "/api/embed") => {
                self.ollama_embed(ollama::EmbedRoute::Embed, &request, responder)
            }
            ("POST", "/api/embeddings") => {
                self.ollama_embed(ollama::EmbedRoute::Legacy, &request, responder)
            }
            (_, path) if ollama::UNSERVED.contains(&path) => ollama::unserved(path, responder),
            (_, path) if ollama::ROUTES.contains(&path) => ollama::wrong_method(responder),
            (
                _,
                "/health"
                | "/metrics"
                | "/v1/models"
                | "/v1/chat/completions"
                | "/v1/messages"
                | "/v1/responses"
                | "/v1/messages/count_tokens"
                | "/v1/chat/completions/input_tokens"
                | "/v1/responses/input_tokens"
                | "/v1/completions"
                | "/v1/embeddings"
                | "/embeddings"
                | "/embedding"
                | "/tokenize"
                | "/detokenize"
                | "/props"
                | "/slots"
                | "/completion"
                | "/infill"
                | "/apply-template"
                | "/rerank"
                | "/reranking"
                | "/v1/rerank"
                | "/v1/reranking",
            ) => {
                let error = ApiError::new(405, "invalid_request_error", "method not allowed");
                responder.json_with(405, &error.openai_body(), &[]);
            }
            (method, path) if self.vertex_route(method, path) => match method {
                "POST" => self.predict(&request, responder),
                _ => self.health(responder),
            },
            _ => {
                let Some(responder) = ui::route(&request, responder) else {
                    return;
                };
                let responder = match &self.agent_api {
                    Some(api) => match agent_api::route(&request, responder, api) {
                        Some(responder) => responder,
                        None => return,
                    },
                    None => responder,
                };
                let error = ApiError::new(404, "invalid_request_error", "no such route");
                responder.json_with(404, &error.openai_body(), &[]);
            }
        }
    }
}

impl ApiServer {
    /// Whether `path` is Vertex AI's predict route (`POST`) or its health route
    /// (`GET`). Matched after every route of this server's own, so a Vertex
    /// route that names one of them never shadows it (nor runs itself).
    fn vertex_route(&self, method: &str, path: &str) -> bool {
        let Some(vertex) = &self.vertex else {
            return false;
        };
        match method {
            "POST" => vertex.predict == path,
            "GET" => vertex.health.as_deref() == Some(path),
            _ => false,
        }
    }
}

/// What built the answers (`system_fingerprint`, `/props`' `build_info`): this
/// program and its version, as llama-server puts its build there.
pub(crate) const FINGERPRINT: &str = concat!("shepherd-", env!("CARGO_PKG_VERSION"));

/// llama-server's unprefixed spellings of the OpenAI routes, as their `/v1`
/// forms: the `openai` SDKs given a base URL without `/v1` call these.
fn openai_route(path: &str) -> std::borrow::Cow<'_, str> {
    const UNPREFIXED: [&str; 5] = [
        "/chat/completions",
        "/chat/completions/input_tokens",
        "/completions",
        "/models",
        "/responses",
    ];
    let with_id = path.starts_with("/models/") || path.starts_with("/responses/");
    if UNPREFIXED.contains(&path) || with_id {
        std::borrow::Cow::Owned(format!("/v1{path}"))
    } else {
        std::borrow::Cow::Borrowed(path)
    }
}

/// The latest assistant tool call with `id`: a tool result must answer one.
fn earlier_call<'a>(messages: &'a [Message], id: &str) -> Option<&'a ToolCall> {
    messages
        .iter()
        .rev()
        .filter(|msg| msg.role == Role::Assistant)
        .flat_map(|msg| msg.tool_calls.iter())
        .find(|call| call.id == id)
}

// ---------------------------------------------------------------------------
// Start-up.

/// The id clients see without `--alias`: the configured model name, or a model
/// file's name.
fn model_id(provider: &crate::config::ProviderConfig) -> String {
    let name = provider
        .model
        .clone()
        .unwrap_or_else(|| provider.name.clone());
    match std::path::Path::new(&name).file_name() {
        Some(file) if name.contains('/') => file.to_string_lossy().into_owned(),
        _ => name,
    }
}

/// Opens the backends (one per worker, `--parallel`) and starts the pool.
fn load(settings: &Settings) -> Result<Loaded, String> {
    let parallel = settings.local.parallel.map(|n| n as usize);
    let wanted = match &settings.providers[..] {
        [] => parallel.unwrap_or(1),
        [only] if only.kind == crate::config::ProviderKind::Llamacpp => parallel.unwrap_or(1),
        _ => parallel.unwrap_or(DEFAULT_API_PARALLEL),
    };
    let connect::Opened {
        backends,
        provider,
        local,
    } = match connect::open_backends(settings, wanted) {
        Ok(opened) => opened,
        Err(connect::OpenError::Usage(message)) => return Err(message),
    };
    let info = backends[0].info();
    let tools = if settings.use_tools {
        // The agent's own registry (built-ins or `--tool-backend`, MCP), under the profile.
        let mut registry = crate::frontend::wiring::tool_registry(settings)
            .map_err(|_| "cannot list the tools of the tool backend".to_string())?;
        settings.profile.apply_tools(&mut registry);
        Some(Arc::new(ServerTools {
            registry,
            root: std::env::current_dir().unwrap_or_else(|_| ".".into()),
            max_rounds: settings.max_rounds,
            policy: settings.approvals.policy.clone(),
        }))
    } else {
        None
    };
    let pool = Pool::new(settings.queue_size);
    for backend in backends {
        pool.start_worker(backend, tools.clone())
            .map_err(|e| format!("cannot start a worker thread: {e}"))?;
    }
    let defaults = Defaults {
        model: (settings.server.aliases.first().cloned()).unwrap_or_else(|| model_id(&provider)),
        system_prompt: api_system_prompt(settings),
        sampling: settings.sampling_for(&provider),
        use_tools: settings.use_tools,
        verbose: settings.server.verbose,
        image_urls: match settings.server.allow_image_urls {
            true => images::ImageUrls::Fetched(crate::tools::web::policy_check(false)),
            false => images::ImageUrls::Refused,
        },
    };
    let aliases = match settings.server.aliases.as_slice() {
        [] => vec![defaults.model.clone()],
        names => names.to_vec(),
    };
    Ok(Loaded {
        pool,
        defaults,
        aliases,
        tags: settings.server.tags.clone(),
        info,
        local,
    })
}

/// The system prompt of a request that brings none: the one configured
/// (`--system-prompt`, `SHEPHERD_SYSTEM_PROMPT`, `system_prompt`), else, where the
/// server runs shepherd's tools (`--use-tools`), the agent's own; else none, so the
/// template's own default holds, as in llama-server (the agent's prompt speaks of
/// tools and a working directory that a plain API server does not have).
fn api_system_prompt(settings: &Settings) -> String {
    let default = settings.system_prompt == crate::config::resolve::DEFAULT_SYSTEM_PROMPT;
    if default && !settings.use_tools {
        String::new()
    } else {
        settings.system_prompt.clone()
    }
}

/// `--server`: binds (refusing a non-loopback address without a token),
/// loads the backends in the background and serves until stopped.
pub fn run(settings: &Settings) -> i32 {
    let kind = ServerKind::Api {
        tools: settings.use_tools,
    };
    let access = match Access::decide(&settings.server, &settings.server_auth, kind) {
        Ok(access) => access,
        Err(message) => {
            eprintln!("shepherd: {message}");
            return 2;
        }
    };
    let server = &settings.server;
    let listener = match access.bind(server) {
        Ok(listener) => listener,
        Err(code) => return code,
    };
    let mut api = ApiServer::new(server.responses_store);
    api.models_dirs = settings.local.models_dirs.clone();
    api.slots = server.slots;
    api.vertex = server.vertex.clone();
    if settings.use_tools {
        api.agent_api = Some(super::agent_api::for_settings(settings));
    }
    let api = Arc::new(api);
    let loader = {
        let api = api.clone();
        let settings = settings.clone();
        std::thread::Builder::new()
            .name("shepherd-load".into())
            .spawn(move || {
                let started = Instant::now();
                match load(&settings) {
                    Ok(loaded) => {
                        eprintln!(
                            "shepherd: serving {} ({} slot(s), queue {}), loaded in {:.1}s",
                            loaded.defaults.model,
                            loaded.pool.workers(),
                            loaded.pool.capacity(),
                            started.elapsed().as_secs_f64()
                        );
                        let _ = api.loaded.set(loaded);
                    }
                    Err(message) => {
                        eprintln!("shepherd: {message}");
                        crate::frontend::signals::exit(2);
                    }
                }
            })
    };
    if let Err(error) = loader {
        eprintln!("shepherd: cannot start the loader thread: {error}");
        return 1;
    }
    // Stateless: a signal ends the process at once (clients see their
    // connections close), through the one cleanup. In place before the
    // listening line, so a signal right after it is handled too.
    crate::frontend::signals::watch(crate::frontend::signals::Watch::server(
        Box::new(|| false),
        Box::new(|| {}),
    ));
    match listener.local_addr() {
        Ok(addr) => access.announce(
            addr,
            &format!("API server listening on {}", listener.urls()),
        ),
        Err(error) => eprintln!("shepherd: API server listening (address unknown: {error})"),
    }
    listener.run(api);
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::serve::http::{self, Limits, Policy};
    use std::io::{Read, Write};
    use std::net::TcpStream;

    fn raw(addr: std::net::SocketAddr, request: &str) -> String {
        let mut stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        let _ = stream.read_to_string(&mut out);
        out
    }

    #[test]
    fn while_loading_health_and_generation_answer_503() {
        let server =
            http::Server::bind("127.0.0.1", 0, Limits::default(), Policy::default()).expect("bind");
        let addr = server.local_addr().unwrap();
        let api = Arc::new(ApiServer::new(0));
        std::thread::spawn(move || server.run(api));
        let health = raw(addr, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        assert!(health.starts_with("HTTP/1.1 503"), "{health}");
        assert!(health.contains("\"loading\""), "{health}");
        let body = r#"{"messages":[{"role":"user","content":"hi"}]}"#;
        let chat = raw(
            addr,
            &format!(
                "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            ),
        );
        assert!(chat.starts_with("HTTP/1.1 503"), "{chat}");
        assert!(chat.contains("Retry-After: 5"), "{chat}");
        let metrics = raw(addr, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        assert!(
            metrics.contains("shepherd_requests_total{endpoint=\"chat_completions\"} 1"),
            "{metrics}"
        );
        let missing = raw(addr, "GET /nope HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
    }
}
