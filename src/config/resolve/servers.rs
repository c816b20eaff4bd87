//! Stage two for the servers: where they listen ([`ServerSettings`], with Vertex
//! AI's routes) and who may use them ([`ServerAuth`]: the token from flag, flag
//! file, environment or config.json, and the CORS origins).

use super::*;

/// Where the servers listen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSettings {
    pub host: String,
    pub port: u16,
    /// `--alias`: the model's names, sorted, without repeats (llama-server's
    /// set); the first is the id the API server reports instead of the model's name.
    pub aliases: Vec<String>,
    /// `--tags`: listed with the model, sorted, without repeats.
    pub tags: Vec<String>,
    /// `--responses-store`: `/v1/responses` answers kept for `previous_response_id`.
    pub responses_store: usize,
    /// `--verbose`: answers carry llama-server's `__verbose` object (the rendered prompt).
    pub verbose: bool,
    /// `GET /slots` is served (`--slots`, the default; `--no-slots` makes it a 501).
    pub slots: bool,
    /// `--allow-image-urls`: image parts may be http(s) URLs, fetched through the
    /// web tools' address checks; without it only inline images are read.
    pub allow_image_urls: bool,
    /// Vertex AI's prediction routes, where `AIP_MODE=PREDICTION` asks for them.
    pub vertex: Option<VertexRoutes>,
}

/// The routes Vertex AI's custom containers are called on, from its environment
/// (`AIP_PREDICT_ROUTE`, `AIP_HEALTH_ROUTE`), as llama-server reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VertexRoutes {
    /// Where `POST {"instances": [...]}` is answered (`/predict` by default).
    pub predict: String,
    /// A second spelling of `/health`, where one is named.
    pub health: Option<String>,
}

impl ServerSettings {
    /// The addresses to listen on: `--host` may name several, comma-separated,
    /// as llama-server's does.
    pub fn hosts(&self) -> Vec<&str> {
        self.host.split(',').map(str::trim).collect()
    }
}

/// Who may use the servers: the token (flag, flag file, `SHEPHERD_AUTH_TOKEN`,
/// config.json, in that order) and the web origins that get CORS headers.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct ServerAuth {
    pub token: Option<String>,
    /// `--no-auth`: no generated token for servers that run tools (loopback only).
    pub no_auth: bool,
    pub cors_origins: Vec<String>,
}

/// Never prints the token.
impl std::fmt::Debug for ServerAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerAuth")
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("no_auth", &self.no_auth)
            .field("cors_origins", &self.cors_origins)
            .finish()
    }
}

/// API-server requests that may wait for a slot when `--queue-size` is not given.
pub(super) const DEFAULT_QUEUE_SIZE: usize = 16;
/// `/v1/responses` answers kept when `--responses-store` is not given.
const DEFAULT_RESPONSES_STORE: usize = 100;

pub(super) fn server(
    low: &LowArgs,
    mode: &Mode,
    env: EnvLookup,
) -> Result<ServerSettings, ConfigError> {
    let default_port = match mode {
        Mode::ToolServer => DEFAULT_TOOLSERVER_PORT,
        Mode::RpcWorker => crate::llama::rpc::DEFAULT_PORT,
        _ => DEFAULT_PORT,
    };
    let vertex = (matches!(mode, Mode::ApiServer))
        .then(|| vertex_routes(env))
        .flatten();
    Ok(ServerSettings {
        host: low.host.clone().unwrap_or_else(|| DEFAULT_HOST.to_string()),
        port: match vertex {
            Some(_) => vertex_port(env)?,
            None => None,
        }
        .or(low.port)
        .unwrap_or(default_port),
        aliases: sorted_set(&low.alias),
        tags: sorted_set(&low.tags),
        responses_store: low
            .responses_store
            .map_or(DEFAULT_RESPONSES_STORE, |n| n as usize),
        verbose: low.verbose,
        slots: low.slots.unwrap_or(true),
        allow_image_urls: low.allow_image_urls,
        vertex,
    })
}

/// Vertex AI's routes where `AIP_MODE` is `PREDICTION`; a route named without
/// its leading slash gets one, as llama-server adds it.
fn vertex_routes(env: EnvLookup) -> Option<VertexRoutes> {
    if env("AIP_MODE").as_deref() != Some("PREDICTION") {
        return None;
    }
    let route = |name: &str| {
        env(name)
            .filter(|v| !v.is_empty())
            .map(|v| match v.starts_with('/') {
                true => v,
                false => format!("/{v}"),
            })
    };
    Some(VertexRoutes {
        predict: route("AIP_PREDICT_ROUTE").unwrap_or_else(|| "/predict".into()),
        health: route("AIP_HEALTH_ROUTE"),
    })
}

/// `AIP_HTTP_PORT`, which Vertex AI sets and llama-server listens on in its
/// prediction mode (over `--port`); unset, `--port` holds.
fn vertex_port(env: EnvLookup) -> Result<Option<u16>, ConfigError> {
    match env("AIP_HTTP_PORT").filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(text) => (text.parse().ok().filter(|&p: &u16| p > 0))
            .map(Some)
            .ok_or_else(|| {
                ConfigError::invalid(
                    "AIP_HTTP_PORT",
                    format!("'{text}' is not a port (1 to 65535)"),
                )
            }),
    }
}

/// `names` sorted, each once (llama-server keeps its aliases and tags in a set).
fn sorted_set(names: &[String]) -> Vec<String> {
    let mut names = names.to_vec();
    names.sort();
    names.dedup();
    names
}

/// llama-server's `--api-key` is the key its clients must send. With the model in
/// process there is no provider to give a key to, so `--server --api-key KEY` means
/// that here too: the server's token (unless `--auth-token` names one).
pub(super) fn llama_server_key(
    low: &LowArgs,
    mode: &Mode,
    providers: &[ProviderConfig],
) -> Option<String> {
    let in_process = providers
        .first()
        .is_some_and(|p| matches!(p.kind, ProviderKind::Llamacpp | ProviderKind::Tensorrt));
    (*mode == Mode::ApiServer && in_process)
        .then(|| low.api_key.clone())
        .flatten()
}

pub(super) fn server_auth(
    low: &LowArgs,
    env: EnvLookup,
    file: &ConfigFile,
    llama_server_key: Option<String>,
) -> Result<ServerAuth, ConfigError> {
    let from_file = match &low.auth_token_file {
        Some(path) => Some(read_token_file(path)?),
        None => None,
    };
    let token = low
        .auth_token
        .clone()
        .or(from_file)
        .or(llama_server_key)
        .or_else(|| env("SHEPHERD_AUTH_TOKEN"))
        .or_else(|| file.auth_token.clone())
        .filter(|t| !t.trim().is_empty());
    let mut cors_origins = file.cors_origins.clone();
    cors_origins.extend(low.cors_origins.iter().cloned());
    Ok(ServerAuth {
        token,
        no_auth: low.no_auth,
        cors_origins,
    })
}

/// The first line of a token file, trimmed.
fn read_token_file(path: &Path) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.is_empty() {
        return Err(ConfigError::invalid(
            format!("--auth-token-file {}", path.display()),
            "the file holds no token",
        ));
    }
    Ok(token)
}
