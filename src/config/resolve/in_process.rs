//! Stage two for the in-process llama.cpp backend: [`LocalSettings`], read from
//! the flags (and config.json's `models_dir`, `kv_cache_max_mb`), with the
//! llama.cpp words (`--cache-type`, `--pooling`, `--split-mode`, `--spec`) read
//! here once into their types.

use super::*;

/// Knobs for the in-process llama.cpp backend, as typed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LocalSettings {
    pub model_path: Option<PathBuf>,
    pub gpu_layers: Option<i32>,
    /// `--split-mode`, `--tensor-split`, `--main-gpu`: several GPUs.
    pub split_mode: SplitMode,
    pub tensor_split: Vec<f32>,
    pub main_gpu: u32,
    /// `--rpc`: the `shepherd --rpc-worker`s the layers are spread over.
    pub rpc_workers: Vec<String>,
    /// `--rpc-allow-remote`: a `--rpc-worker` may listen on a non-loopback address.
    pub rpc_allow_remote: bool,
    pub threads: Option<u32>,
    pub n_batch: Option<u32>,
    pub ubatch: Option<u32>,
    /// `--cache-type`: the K and V caches' element type.
    pub cache_type: CacheType,
    /// Forced on or off; `None` leaves the choice to the backend.
    pub flash_attn: Option<bool>,
    /// `--parallel`: slots decoded together; `None` means one.
    pub parallel: Option<u32>,
    /// Where `-m NAME` looks for GGUF files by name: `models_dir`, then the model cache.
    pub models_dirs: Vec<PathBuf>,
    /// `--pooling` (`--reranking`: rank): how embeddings pool a sequence.
    pub pooling: Pooling,
    /// `--slot-save-path`: where the API server saves and restores slot caches.
    pub slot_save_path: Option<PathBuf>,
    /// `--sleep-idle-seconds`: idle seconds before the model leaves memory; `None`: never.
    pub sleep_idle_seconds: Option<u32>,
    /// `--chat-template` or the text of `--chat-template-file`: the template to
    /// use instead of the model's own (`chatml`: the built-in ChatML).
    pub chat_template: Option<String>,
    /// The variables every chat template render gets: `--chat-template-kwargs`,
    /// with `--reasoning` as `enable_thinking` (and `reasoning_effort` for a level),
    /// as llama-server's `--reasoning on|off` sets it.
    pub chat_template_kwargs: serde_json::Map<String, serde_json::Value>,
    /// The prompt cache's cap on disk in bytes; 0 with `--no-prompt-cache`
    /// (or `kv_cache_max_mb` 0): no cache.
    pub prompt_cache_bytes: u64,
    /// `--spec`, `--draft-max`, `--model-draft`; `spec` is `None` when not given
    /// (the backend then decides, from `--model-draft`).
    pub spec: Option<SpecMode>,
    pub draft_max: Option<u32>,
    pub model_draft: Option<PathBuf>,
    /// `--mmproj`: the vision projector; `--no-mmproj`: none, not even one
    /// found beside the model.
    pub mmproj: Option<PathBuf>,
    pub no_mmproj: bool,
}

/// The prompt cache's default cap on disk (`kv_cache_max_mb`).
const DEFAULT_KV_CACHE_MAX_MB: u64 = 1024;

/// `--chat-template-kwargs` with `--reasoning` over it ([`LocalSettings::chat_template_kwargs`]).
fn template_kwargs(low: &LowArgs) -> serde_json::Map<String, serde_json::Value> {
    use serde_json::Value;
    let mut kwargs = low.chat_template_kwargs.clone().unwrap_or_default();
    match low.reasoning.as_deref() {
        None | Some("auto") => {}
        Some("off") => {
            kwargs.insert("enable_thinking".into(), Value::Bool(false));
        }
        Some(level) => {
            kwargs.insert("enable_thinking".into(), Value::Bool(true));
            if level != "on" {
                kwargs.insert("reasoning_effort".into(), Value::String(level.into()));
            }
        }
    }
    kwargs
}

/// A llama.cpp word flag's value as its type, read here once: `None` when the
/// flag was not given; an unknown word is an error naming the flag and the
/// type's own words.
fn word<T>(
    flag: &str,
    raw: Option<&str>,
    names: &[&str],
    parse: fn(&str) -> Option<T>,
) -> Result<Option<T>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    parse(raw).map(Some).ok_or_else(|| {
        ConfigError::invalid(
            flag,
            format!(
                "invalid value '{raw}': expected one of {}",
                names.join(", ")
            ),
        )
    })
}

pub(super) fn local(low: &LowArgs, file: &ConfigFile) -> Result<LocalSettings, ConfigError> {
    let cap_mb = file.kv_cache_max_mb.unwrap_or(DEFAULT_KV_CACHE_MAX_MB);
    let split_mode = low.split_mode.as_deref();
    let cache_type = low.cache_type.as_deref();
    let pooling = low.pooling.as_deref();
    Ok(LocalSettings {
        models_dirs: models_dirs(file),
        prompt_cache_bytes: if low.no_prompt_cache {
            0
        } else {
            cap_mb.saturating_mul(1024 * 1024)
        },
        model_path: low.model_path.clone(),
        gpu_layers: low.gpu_layers,
        split_mode: word(
            "--split-mode",
            split_mode,
            &SplitMode::NAMES,
            SplitMode::parse,
        )?
        .unwrap_or_default(),
        tensor_split: low.tensor_split.clone().unwrap_or_default(),
        main_gpu: low.main_gpu.unwrap_or(0),
        rpc_workers: low.rpc.clone(),
        rpc_allow_remote: low.rpc_allow_remote,
        threads: low.threads,
        n_batch: low.n_batch,
        ubatch: low.ubatch,
        cache_type: word(
            "--cache-type",
            cache_type,
            &CacheType::NAMES,
            CacheType::parse,
        )?
        .unwrap_or_default(),
        flash_attn: low.flash_attn,
        parallel: low.parallel,
        pooling: word("--pooling", pooling, &Pooling::NAMES, Pooling::parse)?.unwrap_or_default(),
        slot_save_path: low.slot_save_path.clone(),
        sleep_idle_seconds: low.sleep_idle_seconds,
        chat_template: None,
        chat_template_kwargs: template_kwargs(low),
        spec: word(
            "--spec",
            low.spec.as_deref(),
            &SpecMode::NAMES,
            SpecMode::parse,
        )?,
        draft_max: low.draft_max,
        model_draft: low.model_draft.clone(),
        mmproj: low.mmproj.clone(),
        no_mmproj: low.no_mmproj,
    })
}
