//! The `SHEPHERD_*` environment layer: each variable read once and checked
//! as its flag is, with an error naming the variable.

use super::*;

/// Values from `SHEPHERD_*` variables, checked.
#[derive(Debug, Default)]
pub(super) struct EnvLayer {
    pub(super) provider: Option<String>,
    pub(super) model: Option<String>,
    pub(super) backend: Option<String>,
    pub(super) api_base: Option<String>,
    pub(super) api_key: Option<String>,
    pub(super) system_prompt: Option<String>,
    pub(super) max_tokens: Option<i64>,
    pub(super) temperature: Option<f32>,
    pub(super) context_size: Option<u64>,
    pub(super) debug: Option<Vec<Category>>,
    pub(super) tool_backend: Option<String>,
    pub(super) tool_backend_token: Option<String>,
}

pub(super) fn read_env(env: EnvLookup) -> Result<EnvLayer, ConfigError> {
    // An empty variable counts as unset, as shells make `VAR=` easy to leave behind.
    let get = |name: &str| env(name).filter(|v| !v.is_empty());
    Ok(EnvLayer {
        provider: get("SHEPHERD_PROVIDER"),
        model: get("SHEPHERD_MODEL"),
        backend: env_number("SHEPHERD_BACKEND", get, |r| {
            Ok(backend_kind(r)?.as_str().into())
        })?,
        api_base: get("SHEPHERD_API_BASE"),
        api_key: get("SHEPHERD_API_KEY"),
        system_prompt: get("SHEPHERD_SYSTEM_PROMPT"),
        max_tokens: env_number("SHEPHERD_MAX_TOKENS", get, args::max_tokens)?,
        temperature: env_number("SHEPHERD_TEMPERATURE", get, |r| {
            args::parse_unit_float(r, 2.0)
        })?,
        context_size: env_number("SHEPHERD_CONTEXT_SIZE", get, context_size)?,
        debug: env_number("SHEPHERD_DEBUG", get, env_debug)?,
        tool_backend: env_number("SHEPHERD_TOOL_BACKEND", get, args::parse_host_port)?,
        tool_backend_token: get("SHEPHERD_TOOL_BACKEND_TOKEN"),
    })
}

pub(super) fn env_number<T>(
    name: &str,
    get: impl Fn(&str) -> Option<String>,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Option<T>, ConfigError> {
    get(name)
        .map(|raw| parse(&raw).map_err(|e| env_error(name, &raw, &e)))
        .transpose()
}

pub(super) fn env_error(name: &str, raw: &str, expected: &str) -> ConfigError {
    ConfigError::invalid(
        format!("environment variable {name}"),
        format!("'{raw}' is not valid, expected {expected}"),
    )
}

pub(super) fn backend_kind(raw: &str) -> Result<ProviderKind, String> {
    ProviderKind::parse(raw).ok_or_else(|| format!("one of {}", args::BACKEND_NAMES.join(", ")))
}

pub(super) fn context_size(raw: &str) -> Result<u64, String> {
    match raw.trim().parse::<u64>() {
        Ok(n) if n <= MAX_TOKEN_COUNT => Ok(n),
        _ => Err(format!("a whole number up to {MAX_TOKEN_COUNT}")),
    }
}

/// `SHEPHERD_DEBUG`: `0`/`false`/`off` turn it off, `1`/`true`/`on` mean all, else a list.
pub(super) fn env_debug(raw: &str) -> Result<Vec<Category>, String> {
    match raw.trim() {
        "0" | "false" | "off" => Ok(Vec::new()),
        "1" | "true" | "on" => Ok(Category::ALL.to_vec()),
        list => args::debug_categories(list),
    }
}
