//! Which providers a run uses: the selection from flags and environment, the
//! failover chain from config.json with the selection's overrides, a GGUF
//! named on the command line, and the refusal of a model name that is not
//! found locally (with the near names and where shepherd looked).

use super::*;

/// Provider selection after flags have been laid over the environment.
#[derive(Debug, Default)]
pub(super) struct Selection {
    pub(super) provider: Option<(String, &'static str)>,
    pub(super) model: Option<String>,
    pub(super) backend: Option<ProviderKind>,
    pub(super) api_base: Option<String>,
    pub(super) api_key: Option<String>,
}

pub(super) fn selection(low: &LowArgs, env: &EnvLayer) -> Selection {
    let provider = match (&low.provider, &env.provider) {
        (Some(name), _) => Some((name.clone(), "-p")),
        (None, Some(name)) => Some((name.clone(), "SHEPHERD_PROVIDER")),
        (None, None) => None,
    };
    let backend = low.backend.as_deref().or(env.backend.as_deref());
    Selection {
        provider,
        model: low.model.clone().or_else(|| env.model.clone()),
        // Both layers were checked against the same names when they were parsed.
        backend: backend.and_then(ProviderKind::parse),
        api_base: low.api_base.clone().or_else(|| env.api_base.clone()),
        api_key: low.api_key.clone().or_else(|| env.api_key.clone()),
    }
}

/// Builds the failover chain from the configured providers and the selection.
pub(super) fn provider_chain(
    file: &ConfigFile,
    sel: &Selection,
    env: EnvLookup,
) -> Result<Vec<ProviderConfig>, ConfigError> {
    let mut chain = if let Some((name, origin)) = &sel.provider {
        let chosen = file
            .provider(name)
            .ok_or_else(|| unknown_provider(file, name, origin))?;
        vec![overridden(chosen.clone(), sel)]
    } else if sel.backend.is_some() || sel.api_base.is_some() || names_gguf(sel) {
        vec![cmdline_provider(file, sel, false)]
    } else if sel.model.is_some() || sel.api_key.is_some() {
        // A model or key alone is meant for the preferred provider; with none
        // configured, a model the local models directories hold is the in-process one.
        match file.providers.first() {
            Some(first) => vec![overridden(first.clone(), sel)],
            None => {
                let local = names_local_model(sel, file);
                if !local && sel.api_key.is_none() {
                    refuse_unknown_model(sel, file, env)?;
                }
                vec![cmdline_provider(file, sel, local)]
            }
        }
    } else {
        file.providers.clone()
    };
    chain.iter_mut().for_each(|p| fill_api_key(p, env));
    Ok(chain)
}

pub(super) fn unknown_provider(file: &ConfigFile, name: &str, origin: &str) -> ConfigError {
    let known = if file.providers.is_empty() {
        "no providers are configured (see `shepherd provider add`)".to_string()
    } else {
        format!("known providers: {}", file.provider_names().join(", "))
    };
    ConfigError::invalid(origin, format!("unknown provider '{name}'; {known}"))
}

pub(super) fn overridden(mut p: ProviderConfig, sel: &Selection) -> ProviderConfig {
    if let Some(kind) = sel.backend {
        p.kind = kind;
    }
    if let Some(model) = &sel.model {
        p.model = Some(model.clone());
    }
    if let Some(base) = &sel.api_base {
        p.base_url = Some(base.clone());
    }
    if let Some(key) = &sel.api_key {
        p.api_key = Some(key.clone());
    }
    p
}

/// `-m FILE.gguf` with no API base means the in-process model.
pub(super) fn names_gguf(sel: &Selection) -> bool {
    sel.api_base.is_none()
        && sel
            .model
            .as_deref()
            .is_some_and(|m| m.to_ascii_lowercase().ends_with(".gguf"))
}

/// `-m NAME` names a GGUF file in the local models directories (or is a
/// prefix of several: loading it then says which).
pub(super) fn names_local_model(sel: &Selection, file: &ConfigFile) -> bool {
    let Some(model) = sel.model.as_deref() else {
        return false;
    };
    let found = crate::backend::models::find(model, &models_dirs(file));
    !matches!(found, Err(FindError::NotFound { .. }))
}

/// `-m NAME` with no provider configured, no key and nothing local of that name:
/// Ollama's and llama-server's users mean a local model, so say it is not found,
/// where shepherd looked and which local names are near, rather than send the name
/// to OpenAI without a key. With `OPENAI_API_KEY` set it goes to OpenAI as before.
pub(super) fn refuse_unknown_model(
    sel: &Selection,
    file: &ConfigFile,
    env: EnvLookup,
) -> Result<(), ConfigError> {
    let Some(model) = sel.model.as_deref() else {
        return Ok(());
    };
    let has_key = ProviderKind::Openai
        .key_env_vars()
        .iter()
        .any(|name| env(name).is_some_and(|v| !v.is_empty()));
    if has_key || Path::new(model).exists() {
        return Ok(());
    }
    match crate::backend::models::find(model, &models_dirs(file)) {
        Err(error @ FindError::NotFound { .. }) => Err(ConfigError::invalid(
            "-m",
            format!("{error}; for a provider's model, configure one (`shepherd provider add`) or pass --backend"),
        )),
        _ => Ok(()),
    }
}

/// The directories `-m NAME` and `shepherd models` search.
pub fn models_dirs(file: &ConfigFile) -> Vec<PathBuf> {
    crate::backend::models::model_dirs(file.models_dir.as_deref().map(Path::new))
}

/// The one-off provider for `--backend`/`--api-base` without `-p`; `local`
/// when `-m` names a model of the local models directories.
pub(super) fn cmdline_provider(file: &ConfigFile, sel: &Selection, local: bool) -> ProviderConfig {
    let kind = sel
        .backend
        .or_else(|| (local || names_gguf(sel)).then_some(ProviderKind::Llamacpp))
        .or_else(|| file.providers.first().map(|p| p.kind))
        .unwrap_or_default();
    let mut p = overridden(ProviderConfig::new(CMDLINE_PROVIDER, kind), sel);
    p.priority = 0;
    p
}

/// Takes the key from the provider's usual variable (e.g. `OPENAI_API_KEY`) when it has none.
pub(super) fn fill_api_key(p: &mut ProviderConfig, env: EnvLookup) {
    if p.api_key.as_deref().is_some_and(|k| !k.is_empty()) {
        return;
    }
    let from_env = p
        .kind
        .key_env_vars()
        .iter()
        .find_map(|name| env(name).filter(|v| !v.is_empty()));
    if from_env.is_some() {
        p.api_key = from_env;
    }
}
