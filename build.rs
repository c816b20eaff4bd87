//! Build script: records the git revision for `shepherd --version`, and with the
//! TensorRT-LLM features builds the C side of `ffi/trtllm.h`.
//!
//! The llama.cpp build itself is done by the `llama-cpp-sys-2` crate's own
//! build script; C/C++ sources of ours live in `ffi/`.
//!
//! - feature `tensorrt`: bindgen on `ffi/trtllm.h`, `ffi/trtllm_shim.cpp` compiled
//!   as C++17 against `$TRTLLM_ROOT` with the C++ ABI of its `libtensorrt_llm.so`,
//!   linked to `tensorrt_llm` and `nvinfer_plugin_tensorrt_llm`.
//! - feature `tensorrt-testlib`: the same bindings, linked to the scripted test
//!   library `tests/trtllm_testlib/trtllm_testlib.c` instead (it wins when both
//!   features are on, so `--all-features` builds anywhere).
//!
//! The default build compiles none of this and needs nothing new.

use std::process::Command;

fn main() {
    let revision = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=SHEPHERD_GIT_REV={revision}");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/refs/heads");
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(any(feature = "tensorrt", feature = "tensorrt-testlib"))]
    trtllm::build();
}

#[cfg(any(feature = "tensorrt", feature = "tensorrt-testlib"))]
mod trtllm {
    use std::env;
    use std::path::{Path, PathBuf};

    const HEADER: &str = "ffi/trtllm.h";
    const SHIM: &str = "ffi/trtllm_shim.cpp";
    const TESTLIB: &str = "tests/trtllm_testlib/trtllm_testlib.c";

    pub fn build() {
        println!("cargo:rerun-if-changed={HEADER}");
        // The shim first: without TRTLLM_ROOT it stops with the explanation at once.
        if cfg!(feature = "tensorrt-testlib") {
            testlib();
        } else {
            shim();
        }
        bindings();
    }

    /// Rust declarations for `ffi/trtllm.h`, included by `src/backend/tensorrt/ffi.rs`.
    fn bindings() {
        let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
        let bindings = bindgen::Builder::default()
            .header(HEADER)
            .allowlist_function("shp_trt_.*")
            .allowlist_type("shp_trt_.*")
            .allowlist_var("SHP_TRT_.*")
            .prepend_enum_name(false)
            .generate()
            .unwrap_or_else(|e| panic!("bindgen failed on {HEADER}: {e}"));
        bindings
            .write_to_file(out.join("trtllm_bindings.rs"))
            .expect("cannot write the TensorRT-LLM bindings");
    }

    fn testlib() {
        println!("cargo:rerun-if-changed={TESTLIB}");
        cc::Build::new()
            .file(TESTLIB)
            .std("c11")
            .warnings(true)
            .extra_warnings(true)
            .compile("shepherd_trtllm_testlib");
    }

    fn shim() {
        println!("cargo:rerun-if-changed={SHIM}");
        println!("cargo:rerun-if-env-changed=TRTLLM_ROOT");
        println!("cargo:rerun-if-env-changed=TRTLLM_CXX11_ABI");
        println!("cargo:rerun-if-env-changed=CUDA_HOME");
        let root = env::var_os("TRTLLM_ROOT").filter(|r| !r.is_empty());
        let Some(root) = root.map(PathBuf::from) else {
            panic!(
                "\n\nthe `tensorrt` feature needs TRTLLM_ROOT: the TensorRT-LLM installation holding \
                 include/tensorrt_llm/executor/executor.h and libtensorrt_llm.so \
                 (e.g. the tensorrt_llm Python package directory).\n\
                 Build with: make TENSORRT=1 TRTLLM_ROOT=/path/to/tensorrt_llm\n\
                 See docs/tensorrt.md. To run the tests without TensorRT-LLM use the \
                 `tensorrt-testlib` feature.\n\n"
            );
        };
        let include = first_existing(
            &root,
            &["include", "cpp/include"],
            "tensorrt_llm/executor/executor.h",
        );
        let lib_dir = first_existing(
            &root,
            &["libs", "lib", "cpp/build/tensorrt_llm"],
            "libtensorrt_llm.so",
        );
        let abi = cxx11_abi(&lib_dir.join("libtensorrt_llm.so"));
        let cuda = env::var_os("CUDA_HOME")
            .map_or_else(|| PathBuf::from("/usr/local/cuda"), PathBuf::from);
        cc::Build::new()
            .cpp(true)
            .std("c++17")
            .file(SHIM)
            .include(&include)
            .include(cuda.join("include"))
            .define("_GLIBCXX_USE_CXX11_ABI", abi)
            .define("ENABLE_BF16", None)
            .define("ENABLE_FP8", None)
            .compile("shepherd_trtllm_shim");
        println!("cargo:rustc-link-search=native={}", lib_dir.display());
        println!("cargo:rustc-link-lib=dylib=nvinfer_plugin_tensorrt_llm");
        println!("cargo:rustc-link-lib=dylib=tensorrt_llm");
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib_dir.display());
    }

    /// The first `root/candidate` that holds `marker`, or a panic naming every place looked at.
    fn first_existing(root: &Path, candidates: &[&str], marker: &str) -> PathBuf {
        for candidate in candidates {
            let dir = root.join(candidate);
            if dir.join(marker).is_file() {
                return dir;
            }
        }
        let tried: Vec<String> = candidates
            .iter()
            .map(|c| root.join(c).join(marker).display().to_string())
            .collect();
        panic!(
            "\n\nTRTLLM_ROOT={} does not look like a TensorRT-LLM installation: none of {} exists (docs/tensorrt.md)\n\n",
            root.display(),
            tried.join(", ")
        );
    }

    /// `_GLIBCXX_USE_CXX11_ABI` must match the library's, as the executor examples
    /// probe with `nm`: the new ABI leaves `__cxx11` in its symbol names.
    fn cxx11_abi(library: &Path) -> &'static str {
        if let Ok(forced) = env::var("TRTLLM_CXX11_ABI") {
            return if forced == "0" { "0" } else { "1" };
        }
        let bytes = std::fs::read(library)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", library.display()));
        let uses_cxx11 = bytes.windows(7).any(|w| w == b"__cxx11");
        if uses_cxx11 {
            "1"
        } else {
            "0"
        }
    }
}
