//! The safe wrapper around llama.cpp (through `llama-cpp-sys-2`): the only `unsafe` in shepherd.
//!
//! Each C object is an owned handle (`NonNull` plus `Drop`): [`Model`], [`Context`]
//! (which borrows its model, so it can never outlive it), [`Batch`] and [`Sampler`].
//! Every numeric parameter is range-checked before it reaches C, and each C operation
//! has its own error type in [`error`]. None of the handles is `Send`: the model and
//! its context are created and used on one generation thread (see
//! `crate::backend::llamacpp`), so C state never crosses threads.
//!
//! [`vision`] is libmtmd: a vision projector that turns an image into embeddings.
//!
//! [`rpc`] is ggml's RPC backend: this process as a worker that lends its devices,
//! or as the host that spreads a model over workers.
//!
//! Pure-Rust helpers that the token loop needs but that touch no C code live here too:
//! [`utf8`] (streaming detokenisation) and [`grammar`] (JSON schema to GBNF).

// llama.cpp calls live here and in batch, context, devices, lone, model, rpc, sampler and vision; the
// pure-Rust helpers (error, gguf, grammar, utf8) forbid `unsafe` again.
#![allow(unsafe_code)]

pub mod batch;
pub mod context;
pub mod devices;
pub mod error;
pub mod gguf;
pub mod grammar;
mod lone;
pub mod model;
pub mod rpc;
pub mod sampler;
pub mod utf8;
pub mod vision;

use std::ffi::{c_char, c_void, CStr};
use std::sync::{Once, OnceLock};

use llama_cpp_sys_2 as sys;

pub use batch::Batch;
pub use context::{CacheType, Context, ContextParams, Pooling};
pub use devices::{GpuSplit, SplitMode};
pub use error::{DecodeError, SamplerError};
pub use lone::avx2_kernels;
pub use model::{LoadProgress, Model, ModelParams, Token};
pub use sampler::{log_probs, Sampler, SamplerParams};

static BACKEND_INIT: Once = Once::new();

/// Initialises llama.cpp once per process and routes its logging to shepherd's log.
pub fn init() {
    BACKEND_INIT.call_once(|| {
        // SAFETY: `llama_log_set` stores a plain function pointer and a null user pointer;
        // `forward_log` is a valid `extern "C"` function for the whole program.
        unsafe { sys::llama_log_set(Some(forward_log), std::ptr::null_mut()) };
        // SAFETY: `llama_backend_init` has no preconditions; `Once` runs it exactly once.
        unsafe { sys::llama_backend_init() };
    });
}

/// Why llama.cpp's CUDA backend found no GPU, as it logged it ("failed to initialize
/// CUDA: ..."), for the notice a CUDA build gives when it runs on the CPU.
static CUDA_INIT_ERROR: OnceLock<String> = OnceLock::new();

/// The CUDA runtime's reason for finding no GPU, if this is a CUDA build and it found none.
pub fn cuda_init_error() -> Option<&'static str> {
    CUDA_INIT_ERROR.get().map(String::as_str)
}

/// llama.cpp's own log lines go to the `llm` debug category, so they are quiet by default.
unsafe extern "C" fn forward_log(_level: sys::ggml_log_level, text: *const c_char, _: *mut c_void) {
    if text.is_null() {
        return;
    }
    if cfg!(feature = "cuda") {
        // SAFETY: as below.
        let line = unsafe { CStr::from_ptr(text) }.to_string_lossy();
        if let Some((_, why)) = line.split_once("failed to initialize CUDA: ") {
            let _ = CUDA_INIT_ERROR.set(why.trim().to_string());
        }
    }
    if !crate::util::log::enabled(crate::util::log::Category::Llm) {
        return;
    }
    // SAFETY: llama.cpp passes a NUL-terminated string that lives for the duration of the call.
    let line = unsafe { CStr::from_ptr(text) }.to_string_lossy();
    let line = line.trim_end();
    if !line.is_empty() {
        crate::util::log::debug(crate::util::log::Category::Llm, || {
            format!("llama.cpp: {line}")
        });
    }
}

/// ggml's version and the commit it was built from, as compiled in (`0.26.0`,
/// commit `unknown` when the crate's sources carried no git metadata).
pub fn ggml_build() -> (String, String) {
    // SAFETY: both return pointers to static NUL-terminated strings inside ggml (or null).
    let (version, commit) = unsafe { (sys::ggml_version(), sys::ggml_commit()) };
    (static_str(version), static_str(commit))
}

/// A copy of a static C string; empty for null.
fn static_str(text: *const c_char) -> String {
    if text.is_null() {
        return String::new();
    }
    // SAFETY: non-null, NUL-terminated and static as documented by the caller; copied at once.
    unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .trim()
        .to_string()
}

/// Whether layers can be offloaded: a GPU this build can use, or an RPC worker
/// `--rpc` registered. (Not `llama_supports_gpu_offload`, which says yes in every
/// build with the RPC backend, workers or not.)
pub fn supports_gpu_offload() -> bool {
    devices::offload_device_count() > 0
}

/// llama.cpp's build and CPU feature summary, for `--version`.
pub fn system_info() -> String {
    init();
    // SAFETY: returns a pointer to a static NUL-terminated buffer inside llama.cpp (or null).
    let info = unsafe { sys::llama_print_system_info() };
    if info.is_null() {
        return String::new();
    }
    // SAFETY: non-null and NUL-terminated as checked above; copied out at once.
    unsafe { CStr::from_ptr(info) }
        .to_string_lossy()
        .trim()
        .to_string()
}

/// The test model, loaded on the CPU without a progress bar.
#[cfg(test)]
pub(crate) fn test_model() -> Model {
    let path = crate::util::dirs::test_models::test_model_path();
    let params = ModelParams {
        gpu_layers: 0,
        progress: None,
        ..Default::default()
    };
    Model::load(&path, &params).unwrap()
}

/// Context parameters for tests: `n_ctx` positions, batches of 256, `n_seq_max`
/// sequences.
#[cfg(test)]
pub(crate) fn test_context_params(n_ctx: u32, n_seq_max: u32) -> ContextParams {
    ContextParams {
        n_ctx,
        n_batch: 256,
        n_ubatch: 256,
        n_seq_max,
        n_threads: crate::util::dirs::test_models::TEST_THREADS,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ggml_build_reports_a_version() {
        let (version, commit) = ggml_build();
        let parts: Vec<&str> = version.split('.').collect();
        assert_eq!(parts.len(), 3, "unexpected ggml version: {version}");
        assert!(parts.iter().all(|p| p.parse::<u32>().is_ok()), "{version}");
        assert!(!commit.is_empty());
    }

    #[test]
    fn system_info_names_the_cpu_backend() {
        let info = system_info();
        assert!(info.contains("CPU"), "unexpected system info: {info}");
    }
}
