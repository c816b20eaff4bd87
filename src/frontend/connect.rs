//! Builds the backend: every provider of the configured chain, in priority
//! order, wrapped in a [`FailoverBackend`] when there is more than one (the
//! API server's per-worker chains share one [`Board`], so providers of equal
//! priority share the load across workers); and
//! any single provider when the interactive front-ends switch.
//!
//! Each backend gets its own small config struct; this module is where the
//! resolved [`Settings`] and a [`ProviderConfig`] are turned into one.
//! Providers of a type this build cannot run are left out of the chain (with a
//! debug note); only when none can run is that an error.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::anthropic::{self, AnthropicBackend, AnthropicConfig};
use crate::backend::cli::{CliBackend, CliConfig};
use crate::backend::failover::{Board, FailoverBackend, Provider};
use crate::backend::gemini::{self, GeminiBackend, GeminiConfig};
use crate::backend::http::{ApiSettings, Limits};
use crate::backend::llamacpp::prompt_cache::PromptCacheConfig;
use crate::backend::llamacpp::speculative::{SpecConfig, SpecMode};
use crate::backend::llamacpp::{self, LlamaBackend, LlamaConfig, LocalModel};
use crate::backend::local;
use crate::backend::ollama::{self, OllamaBackend, OllamaConfig};
use crate::backend::openai::{AzureDeployment, MaxTokensParam, OpenAiBackend, OpenAiConfig};
#[cfg(feature = "tensorrt")]
use crate::backend::tensorrt::{TensorRtBackend, TensorRtConfig};
use crate::backend::Backend;
use crate::config::resolve::Settings;
use crate::config::{ProviderConfig, ProviderKind};
use crate::llama::{rpc, GpuSplit};
use crate::util::log;

/// Why no backend could be built. All of these are configuration problems (exit 2).
pub enum OpenError {
    Usage(String),
}

/// Default CLI server when a `cli` provider names none.
const CLI_BASE: &str = "http://localhost:8000";

/// Default OpenAI endpoint when a provider names none.
const OPENAI_BASE: &str = "https://api.openai.com/v1";

/// Opens the provider chain; the returned config is the first provider's,
/// whose sampling settings the agent uses.
pub fn open_backend(settings: &Settings) -> Result<(Box<dyn Backend>, ProviderConfig), OpenError> {
    open_chain(settings, &Arc::new(Board::default()))
}

/// Opens the provider chain, sharing `board` (load and failures of providers
/// of equal priority) with the other chains opened with it.
fn open_chain(
    settings: &Settings,
    board: &Arc<Board>,
) -> Result<(Box<dyn Backend>, ProviderConfig), OpenError> {
    let providers = if settings.providers.is_empty() {
        vec![embedded_default()?]
    } else {
        settings.providers.clone()
    };
    let first = &providers[0];
    let mut chain = Vec::new();
    let mut first_error = None;
    for provider in &providers {
        match open_provider(settings, provider) {
            Ok(backend) => chain.push(Provider {
                name: provider.name.clone(),
                priority: provider.priority,
                backend,
            }),
            Err(OpenError::Usage(message)) => {
                log::debug(log::Category::Llm, || {
                    format!("skipping provider: {message}")
                });
                first_error.get_or_insert(OpenError::Usage(message));
            }
        }
    }
    let first_config = providers
        .iter()
        .find(|p| chain.first().is_some_and(|c| c.name == p.name))
        .unwrap_or(first)
        .clone();
    if chain.len() == 1 {
        let only = chain.remove(0);
        return Ok((only.backend, first_config));
    }
    match FailoverBackend::new(chain, Arc::clone(board)) {
        Some(failover) => Ok((Box::new(failover), first_config)),
        None => Err(first_error.unwrap_or_else(|| OpenError::Usage("no usable provider".into()))),
    }
}

/// The API server's backends, one per worker: `n` handles on one in-process
/// model (clones share its generation thread, which decodes their requests
/// together), or `n` independent API backends. A chain that mixes the
/// in-process model with API providers gets one worker, so the model is
/// never loaded twice. The config is the first provider's.
pub fn open_backends(settings: &Settings, n: usize) -> Result<Opened, OpenError> {
    let providers = if settings.providers.is_empty() {
        vec![embedded_default()?]
    } else {
        settings.providers.clone()
    };
    if let [only] = providers.as_slice() {
        if only.kind == ProviderKind::Llamacpp {
            check_tape(settings, only)?;
            let llama = LlamaBackend::new(llama_config(settings, only)?)
                .map_err(|e| OpenError::Usage(e.to_string()))?;
            keep_rpc_connections_alive(settings);
            let backends = (0..n.max(1))
                .map(|_| Box::new(llama.clone()) as Box<dyn Backend>)
                .collect();
            return Ok(Opened {
                backends,
                provider: only.clone(),
                local: Some(llama.local_model()),
            });
        }
    }
    let local = providers.iter().any(|p| p.kind == ProviderKind::Llamacpp);
    let board = Arc::new(Board::default());
    let (first, config) = open_chain(settings, &board)?;
    let mut backends = vec![first];
    while !local && backends.len() < n {
        backends.push(open_chain(settings, &board)?.0);
    }
    Ok(Opened {
        backends,
        provider: config,
        local: None,
    })
}

/// What [`open_backends`] opened.
pub struct Opened {
    pub backends: Vec<Box<dyn Backend>>,
    /// The first provider's config.
    pub provider: ProviderConfig,
    /// The in-process model's embeddings and tokenizer, when it is the only
    /// provider (a chain that mixes it with API providers has none).
    pub local: Option<LocalModel>,
}

/// Builds one provider's backend (connecting happens on the first request):
/// each provider of the chain at start, another for the REPL's
/// `/provider use|next` and `/model NAME`.
pub fn open_provider(
    settings: &Settings,
    provider: &ProviderConfig,
) -> Result<Box<dyn Backend>, OpenError> {
    let reasoning = settings.reasoning.as_deref();
    check_tape(settings, provider)?;
    Ok(match provider.kind {
        ProviderKind::Openai => Box::new(OpenAiBackend::new(openai_config(settings, provider)?)),
        ProviderKind::Anthropic => Box::new(AnthropicBackend::new(AnthropicConfig {
            api: api_settings(settings, provider, ANTHROPIC_BASE)?,
            thinking_budget: anthropic::thinking_budget(reasoning),
        })),
        ProviderKind::Gemini => Box::new(GeminiBackend::new(GeminiConfig {
            api: api_settings(settings, provider, GEMINI_BASE)?,
            thinking_budget: gemini::thinking_budget(reasoning),
        })),
        ProviderKind::Ollama => Box::new(OllamaBackend::new(OllamaConfig {
            api: api_settings(settings, provider, OLLAMA_BASE)?,
            think: ollama::think(reasoning),
        })),
        ProviderKind::Cli => Box::new(CliBackend::new(cli_config(settings, provider))),
        ProviderKind::Llamacpp => {
            let llama = LlamaBackend::new(llama_config(settings, provider)?)
                .map_err(|e| OpenError::Usage(e.to_string()))?;
            keep_rpc_connections_alive(settings);
            Box::new(llama)
        }
        #[cfg(feature = "tensorrt")]
        ProviderKind::Tensorrt => Box::new(
            TensorRtBackend::new(tensorrt_config(settings, provider)?)
                .map_err(|e| OpenError::Usage(e.to_string()))?,
        ),
        #[cfg(not(feature = "tensorrt"))]
        ProviderKind::Tensorrt => {
            return Err(OpenError::Usage(format!(
                "provider '{}' has type 'tensorrt', but this build has no TensorRT-LLM backend: \
                 build with `make TENSORRT=1 TRTLLM_ROOT=...` (docs/tensorrt.md)",
                provider.name
            )))
        }
    })
}

/// The provider a chat would try first (the embedded default when none is configured).
pub fn first_provider(settings: &Settings) -> Result<ProviderConfig, OpenError> {
    match settings.providers.first() {
        Some(first) => Ok(first.clone()),
        None => embedded_default(),
    }
}

/// The models `provider` offers, for `--list-models` and `/model list`: the
/// API's model list, or the GGUF files of the local models directories for
/// the in-process backends (no model is loaded to list them).
pub fn list_models(settings: &Settings, provider: &ProviderConfig) -> Result<Vec<String>, String> {
    if matches!(
        provider.kind,
        ProviderKind::Llamacpp | ProviderKind::Tensorrt
    ) {
        let models = crate::backend::models::scan(&settings.local.models_dirs);
        return Ok(models.into_iter().map(|m| m.name).collect());
    }
    // Listing needs no model: `--list-models` is how a user finds one.
    let mut provider = provider.clone();
    provider.model.get_or_insert_with(String::new);
    let backend = open_provider(settings, &provider).map_err(|OpenError::Usage(m)| m)?;
    backend.list_models().map_err(|e| e.to_string())
}

/// `--record`/`--replay` work on the HTTP requests of the API backends: the
/// in-process model and TensorRT-LLM send none, and the `cli` thin client's
/// `/updates` listener runs beside its requests, so their order is not
/// reproducible. Asking for either with those is a usage error rather than an
/// empty recording a user would only discover when attaching it. Otherwise
/// the directory is readied (the manifest written or checked) now, so a bad
/// `--replay DIR` fails before the first prompt.
fn check_tape(settings: &Settings, provider: &ProviderConfig) -> Result<(), OpenError> {
    if !settings.tape.is_on() {
        return Ok(());
    }
    let kind = provider.kind;
    if matches!(
        kind,
        ProviderKind::Llamacpp | ProviderKind::Tensorrt | ProviderKind::Cli
    ) {
        return Err(OpenError::Usage(format!(
            "--record and --replay cover the API providers (openai, anthropic, gemini, ollama); \
             provider '{}' is of type '{}', which sends no upstream requests that can be recorded",
            provider.name,
            kind.as_str()
        )));
    }
    let model = provider.model.as_deref().unwrap_or_default();
    settings
        .tape
        .prepare(kind.as_str(), model)
        .map_err(|e| OpenError::Usage(e.to_string()))
}

/// With no provider configured, the embedded default model, when `make model` fetched it.
fn embedded_default() -> Result<ProviderConfig, OpenError> {
    let path = llamacpp::default_model().map_err(|e| {
        OpenError::Usage(format!(
            "{e}; or configure an API provider: \
             'shepherd provider add NAME --type openai --base-url URL --model MODEL'"
        ))
    })?;
    let mut provider = ProviderConfig::new("default", ProviderKind::Llamacpp);
    provider.model = Some(path.display().to_string());
    Ok(provider)
}

/// The in-process model's settings for `shepherd bench`: the first llama.cpp
/// provider of the chain (`-m FILE.gguf` makes one), else the embedded default.
pub fn local_config(settings: &Settings) -> Result<LlamaConfig, OpenError> {
    let provider = match settings
        .providers
        .iter()
        .find(|p| p.kind == ProviderKind::Llamacpp)
    {
        Some(provider) => provider.clone(),
        None if settings.providers.is_empty() => embedded_default()?,
        None => {
            return Err(OpenError::Usage(
                "bench measures the in-process model: give one with -m FILE.gguf".into(),
            ))
        }
    };
    llama_config(settings, &provider)
}

/// Speculative decoding: `--model-draft` implies `--spec draft`, which needs it.
fn spec_config(local: &crate::config::resolve::LocalSettings) -> Result<SpecConfig, OpenError> {
    let defaults = SpecConfig::default();
    let mode = match (local.spec, &local.model_draft) {
        (None, Some(_)) => SpecMode::Draft,
        (None, None) => defaults.mode,
        (Some(mode), _) => mode,
    };
    if mode == SpecMode::Draft && local.model_draft.is_none() {
        return Err(OpenError::Usage(
            "--spec draft needs a draft model: --model-draft FILE.gguf (or --spec ngram, which needs none)".into(),
        ));
    }
    Ok(SpecConfig {
        mode,
        draft_max: local.draft_max.map_or(defaults.draft_max, |n| n as usize),
        draft_model: local.model_draft.clone(),
    })
}

/// The in-process model's settings: `--model-path`, `--gpu-layers`, threads, batches, cache.
fn llama_config(settings: &Settings, provider: &ProviderConfig) -> Result<LlamaConfig, OpenError> {
    let local = &settings.local;
    let dir = provider
        .model_path
        .as_deref()
        .map(std::path::Path::new)
        .or(local.model_path.as_deref());
    let model = local::resolve_model_path(&model_of(provider)?, dir, &local.models_dirs)
        .map_err(|e| OpenError::Usage(e.to_string()))?;
    connect_rpc_workers(&local.rpc_workers)?;
    let defaults = LlamaConfig::new(model.clone());
    let spec = spec_config(local)?;
    let config = LlamaConfig {
        context_size: settings
            .context_size_for(provider)
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
        gpu_layers: local.gpu_layers.unwrap_or(if local.rpc_workers.is_empty() {
            DEFAULT_GPU_LAYERS
        } else {
            -1
        }),
        split: gpu_split(local),
        threads: local.threads.map(|t| i32::try_from(t).unwrap_or(i32::MAX)),
        n_batch: local.n_batch.unwrap_or(defaults.n_batch),
        ubatch: local.ubatch,
        cache_type: local.cache_type,
        flash_attn: local.flash_attn,
        parallel: local.parallel.unwrap_or(defaults.parallel),
        pooling: local.pooling,
        progress: super::progress::for_mode(&settings.mode),
        prompt_cache: (local.prompt_cache_bytes > 0).then(|| PromptCacheConfig {
            dir: crate::util::dirs::kv_cache_dir(),
            max_bytes: local.prompt_cache_bytes,
        }),
        spec,
        chat_template: local.chat_template.clone(),
        chat_template_kwargs: local.chat_template_kwargs.clone(),
        slot_save_path: local.slot_save_path.clone(),
        sleep_idle: (local.sleep_idle_seconds)
            .map(|secs| std::time::Duration::from_secs(u64::from(secs))),
        mmproj: match (&local.mmproj, local.no_mmproj) {
            (_, true) => None,
            (Some(path), false) => Some(path.clone()),
            (None, false) => local::find_mmproj(&model),
        },
        ..defaults
    };
    if settings.stats {
        eprintln!("{}", placement_text(&config, &local.rpc_workers));
    }
    if config.gpu_layers != 0 {
        if let Some(notice) = crate::llama::devices::no_gpu_notice() {
            eprintln!("shepherd: {notice}");
        }
    }
    Ok(config)
}

/// `--rpc`: checks the workers and registers them with ggml as devices, before
/// the generation thread loads the model, so that the placement checks, `--stats`
/// and the tuning see them. A worker lost later ends the process with a message
/// naming it ([`super::signals::lost_worker`]); servers included, as nothing can
/// go on without the layers it held (a service manager restarts the server).
fn connect_rpc_workers(names: &[String]) -> Result<(), OpenError> {
    if names.is_empty() {
        return Ok(());
    }
    let workers = names
        .iter()
        .map(|name| rpc::Worker::resolve(name))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| OpenError::Usage(format!("--rpc: {e}")))?;
    rpc::on_lost_worker(super::signals::lost_worker);
    rpc::connect(&workers).map_err(|e| OpenError::Usage(format!("--rpc: {e}")))
}

/// Once the model is spread over `--rpc` workers: keepalive on ggml's connections
/// to them, so a worker box that vanishes ends in the lost-worker message.
fn keep_rpc_connections_alive(settings: &Settings) {
    if settings.local.rpc_workers.is_empty() {
        return;
    }
    let found = rpc::keep_connections_alive();
    log::debug(log::Category::Llm, || {
        format!("TCP keepalive on {found} connection(s) to RPC workers")
    });
}

/// `--split-mode`, `--tensor-split` and `--main-gpu` (checked against the
/// GPUs when the model loads).
fn gpu_split(local: &crate::config::resolve::LocalSettings) -> GpuSplit {
    GpuSplit {
        mode: local.split_mode,
        main_gpu: local.main_gpu as usize,
        tensor_split: local.tensor_split.clone(),
    }
}

/// Where the in-process model runs, and the devices there are (`--stats`).
fn placement_text(config: &LlamaConfig, rpc_workers: &[String]) -> String {
    let placement = if crate::backend::llamacpp::tuning::all_on_cpu(config.gpu_layers) {
        "model on: the CPU".to_string()
    } else {
        let layers = match config.gpu_layers {
            -1 => "every layer".to_string(),
            n => format!("{n} layers"),
        };
        let split = &config.split;
        let shares = if split.tensor_split.is_empty() {
            "by free memory".to_string()
        } else {
            format!("shares {:?}", split.tensor_split)
        };
        // llama.cpp lists RPC workers first, then the GPUs.
        let devices = if rpc_workers.is_empty() {
            "the GPU(s)".to_string()
        } else {
            format!("the RPC workers {} and any GPU(s)", rpc_workers.join(", "))
        };
        format!(
            "model on: {devices}, {layers}, split {:?} ({shares}), main device {}",
            split.mode, split.main_gpu
        )
    };
    format!("{placement}\n{}", crate::llama::devices::report())
}

/// `--backend tensorrt -m ENGINE_DIR`: the engine directory (relative to
/// `--model-path` like a GGUF file) and the context cap.
#[cfg(feature = "tensorrt")]
fn tensorrt_config(
    settings: &Settings,
    provider: &ProviderConfig,
) -> Result<TensorRtConfig, OpenError> {
    let dir = provider
        .model_path
        .as_deref()
        .map(std::path::Path::new)
        .or(settings.local.model_path.as_deref());
    let engine_dir =
        local::resolve_model_path(&model_of(provider)?, dir, &settings.local.models_dirs)
            .map_err(|e| OpenError::Usage(e.to_string()))?;
    Ok(TensorRtConfig {
        context_size: settings
            .context_size_for(provider)
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
        ..TensorRtConfig::new(engine_dir)
    })
}

/// Every layer on the GPU when the build has one; none otherwise.
const DEFAULT_GPU_LAYERS: i32 = if cfg!(feature = "cuda") { -1 } else { 0 };

const ANTHROPIC_BASE: &str = "https://api.anthropic.com";
const GEMINI_BASE: &str = "https://generativelanguage.googleapis.com/v1beta";
const OLLAMA_BASE: &str = "http://localhost:11434";

fn model_of(provider: &ProviderConfig) -> Result<String, OpenError> {
    provider.model.clone().ok_or_else(|| {
        OpenError::Usage(format!(
            "provider '{}' has no model; set one with -m MODEL or 'shepherd provider {} set model MODEL'",
            provider.name, provider.name
        ))
    })
}

fn limits(settings: &Settings) -> Limits {
    Limits {
        overall: Duration::from_secs(settings.timeout_secs),
        reply_bytes: settings.max_reply_bytes,
        ..Limits::default()
    }
}

/// The settings every API backend shares.
fn api_settings(
    settings: &Settings,
    provider: &ProviderConfig,
    default_base: &str,
) -> Result<ApiSettings, OpenError> {
    let base = provider.base_url.as_deref().unwrap_or(default_base);
    Ok(ApiSettings {
        api_key: provider.api_key.clone(),
        context_size: settings.context_size_for(provider).unwrap_or(0),
        extra_headers: provider
            .extra_headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        limits: limits(settings),
        tape: settings.tape.clone(),
        ..ApiSettings::new(base, model_of(provider)?)
    })
}

fn openai_config(
    settings: &Settings,
    provider: &ProviderConfig,
) -> Result<OpenAiConfig, OpenError> {
    let azure = provider
        .deployment_name
        .clone()
        .map(|deployment| AzureDeployment {
            deployment,
            api_version: provider
                .api_version
                .clone()
                .unwrap_or_else(|| "2024-10-21".to_string()),
        });
    let max_tokens_param = match provider.max_tokens_param_name.as_deref() {
        Some("max_completion_tokens") => MaxTokensParam::MaxCompletionTokens,
        _ => MaxTokensParam::MaxTokens,
    };
    Ok(OpenAiConfig {
        api: api_settings(settings, provider, OPENAI_BASE)?,
        azure,
        max_tokens_param,
    })
}

/// A `cli` provider needs no model: the server decides.
fn cli_config(settings: &Settings, provider: &ProviderConfig) -> CliConfig {
    CliConfig {
        base_url: provider
            .base_url
            .clone()
            .unwrap_or_else(|| CLI_BASE.to_string()),
        api_key: provider.api_key.clone(),
        model: provider
            .model
            .clone()
            .unwrap_or_else(|| "remote".to_string()),
        limits: Limits {
            per_read: Duration::from_secs(settings.timeout_secs.max(30)),
            reply_bytes: settings.max_reply_bytes,
            ..Limits::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::config::resolve::resolve_with;
    use crate::config::ConfigFile;

    fn settings(argv: &[&str]) -> Settings {
        let low = crate::args::parse(argv).expect("valid test argv");
        resolve_with(
            &low,
            &ConfigFile::default(),
            PathBuf::from("c.json"),
            &|_| None,
        )
        .expect("resolves")
    }

    #[cfg(not(feature = "tensorrt"))]
    #[test]
    fn tensorrt_without_the_feature_says_how_to_build_it() {
        let Err(OpenError::Usage(message)) =
            open_backend(&settings(&["--backend", "tensorrt", "-m", "/engine"]))
        else {
            panic!("a build without the feature cannot open a tensorrt provider");
        };
        assert!(message.contains("make TENSORRT=1"), "{message}");
    }

    #[cfg(feature = "tensorrt-testlib")]
    #[test]
    fn backend_tensorrt_with_an_engine_dir_opens_the_tensorrt_backend() {
        let dir = crate::backend::tensorrt::tests::engine("connect", "");
        let path = dir.display().to_string();
        let Ok((backend, _)) = open_backend(&settings(&["--backend", "tensorrt", "-m", &path]))
        else {
            panic!("the engine directory opens");
        };
        let info = backend.info();
        assert_eq!(
            (info.kind, info.local, info.context_size),
            ("tensorrt", true, 256)
        );
        assert_eq!(info.model, path);
    }
}
