//! Where shepherd keeps its files, after the XDG base directory spec: one
//! function per kind of directory, so every module agrees.

use std::path::PathBuf;

/// The embedded default model's file name (SmolLM2-135M-Instruct, fetched by `make model`).
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// `$XDG_DATA_HOME/shepherd`, else `$HOME/.local/share/shepherd` (saved sessions).
pub fn data_dir() -> PathBuf {
    xdg_dir("XDG_DATA_HOME", ".local/share")
}

/// `$XDG_STATE_HOME/shepherd`, else `$HOME/.local/state/shepherd`.
pub fn state_dir() -> PathBuf {
    xdg_dir("XDG_STATE_HOME", ".local/state")
}

/// Where the model cache lives (`$HOME/.cache/shepherd/models`).
pub fn model_cache_dir() -> PathBuf {
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache/shepherd/models")
}

/// `$XDG_CACHE_HOME/shepherd/kv`, else `$HOME/.cache/shepherd/kv`: the
/// in-process model's prompt cache (KV states of decoded prompts).
pub fn kv_cache_dir() -> PathBuf {
    xdg_dir("XDG_CACHE_HOME", ".cache").join("kv")
}

/// `$NAME/shepherd` when `NAME` is set to an absolute path (the spec says
/// relative and empty values must be ignored), else `$HOME/FALLBACK/shepherd`.
fn xdg_dir(name: &str, fallback: &str) -> PathBuf {
    let non_empty = |name| std::env::var_os(name).filter(|v| !v.is_empty());
    match non_empty(name).map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir.join("shepherd"),
        _ => non_empty("HOME")
            .map_or_else(|| PathBuf::from("."), PathBuf::from)
            .join(fallback)
            .join("shepherd"),
    }
}

/// The models the tests load, from the environment or the `make` cache.
#[cfg(test)]
pub mod test_models {
    use super::{model_cache_dir, DEFAULT_MODEL_FILE};
    use std::path::PathBuf;

    /// The CPU threads a test model decodes with: one. Cargo runs tests side by
    /// side, one per core, and ggml's thread pool waits at every barrier by
    /// spinning, so two models of two threads each on CI's two cores each wait
    /// for a thread the other holds: measured here, the four official-client
    /// server tests took 231 s at two threads against 15 s at one (18 s one at
    /// a time), and on CI a request ran into its client's 120 s timeout.
    pub const TEST_THREADS: i32 = 1;

    /// The model the tests use: `SHEPHERD_TEST_MODEL`, else the `make model` cache.
    /// Panics (failing the test) with instructions when the file is missing.
    pub fn test_model_path() -> PathBuf {
        cached_test_model("SHEPHERD_TEST_MODEL", DEFAULT_MODEL_FILE, "model")
    }

    /// The tests' second architecture, Gemma 3 270M: `SHEPHERD_SWA_MODEL`, else the
    /// `make swa-model` cache.
    pub fn swa_test_model_path() -> PathBuf {
        cached_test_model(
            "SHEPHERD_SWA_MODEL",
            "gemma-3-270m-q4_k_m.gguf",
            "swa-model",
        )
    }

    fn cached_test_model(var: &str, file: &str, make_target: &str) -> PathBuf {
        let path =
            std::env::var_os(var).map_or_else(|| model_cache_dir().join(file), PathBuf::from);
        assert!(
            path.is_file(),
            "test model {} is missing: run `make {make_target}`",
            path.display()
        );
        path
    }

    /// Runs `scripts/synthetic_gguf.py` (standard library only) with `args`
    /// under `SHEPHERD_TEST_PYTHON` (default `python3`); panics, failing the
    /// test, when it does not succeed.
    pub fn synthetic_gguf(args: &[&std::ffi::OsStr]) {
        let python = std::env::var("SHEPHERD_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/synthetic_gguf.py");
        let status = std::process::Command::new(&python)
            .arg(script)
            .args(args)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("run synthetic_gguf.py");
        assert!(status.success(), "synthetic_gguf.py {args:?}");
    }
}
