//! Build script: records what `shepherd --version` reports about the build.
//!
//! - `SHEPHERD_GIT_REV`: the git revision, or the `SHEPHERD_GIT_REV` environment
//!   variable when set (a source tarball has no `.git`), else `unknown`.
//! - `SHEPHERD_LLAMA_CRATE`: the locked `llama-cpp-sys-2` version, which pins the
//!   llama.cpp sources compiled in (read from `Cargo.lock`).
//!
//! The llama.cpp build itself is done by the `llama-cpp-sys-2` crate's own
//! build script; C/C++ sources of ours live in `ffi/`. This script only checks
//! that it has ggml's RPC backend when `GGML_RPC=ON` (`.cargo/config.toml`): see
//! [`check_llama_has_rpc`].
//!
//! - feature `cuda`: `SHEPHERD_CUDA`, what `--version` says of the CUDA build (the
//!   toolkit's version from `$CUDA_PATH/bin/nvcc`, the GPU architectures from
//!   `CMAKE_CUDA_ARCHITECTURES`, how the runtime is linked); with
//!   `SHEPHERD_CUDA_RUNTIME=dynamic` (`make CUDA=1`) cudart and cuBLAS are linked as
//!   shared libraries (the Makefile hands llama-cpp-sys-2 empty static stand-ins);
//!   with `cublas-dlopen` (`make CUDA=1 static CUDA_CUBLAS=dlopen`) static cuBLAS's
//!   stand-ins are empty too and `ffi/cublas_open.c` is compiled and linked in its
//!   place, and `cfg(cublas_dlopen)` lets `--version` ask it which library it opened.
//! - feature `tensorrt`: bindgen on `ffi/trtllm.h`, `ffi/trtllm_shim.cpp` compiled
//!   as C++17 against `$TRTLLM_ROOT` with the C++ ABI of its `libtensorrt_llm.so`,
//!   linked to `tensorrt_llm` and `nvinfer_plugin_tensorrt_llm`.
//! - feature `tensorrt-testlib`: the same bindings, linked to the scripted test
//!   library `tests/trtllm_testlib/trtllm_testlib.c` instead (it wins when both
//!   features are on, so `--all-features` builds anywhere).
//!
//! The default build compiles none of this and needs nothing new. Every build links
//! with `--wrap=ggml_backend_init_by_type` and `--wrap=llamafile_sgemm` (see
//! `src/llama/context.rs`, `Context::decode_batch_invariant`) and, on x86-64, compiles
//! `ffi/lone.c` (`src/llama/lone.rs`).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SHEPHERD_GIT_REV");
    let revision = std::env::var("SHEPHERD_GIT_REV")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .or_else(git_revision)
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=SHEPHERD_GIT_REV={}", revision.trim());

    println!("cargo:rerun-if-changed=Cargo.lock");
    let llama = std::fs::read_to_string("Cargo.lock")
        .ok()
        .and_then(|lock| locked_version(&lock, "llama-cpp-sys-2"))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=SHEPHERD_LLAMA_CRATE={llama}");

    check_llama_has_rpc();
    // Set by the CUDA build with cuBLAS opened at run time (`cuda::build`).
    println!("cargo::rustc-check-cfg=cfg(cublas_dlopen)");

    // `src/llama/context.rs` finds each context's CPU backend through the first
    // wrapper, to turn ggml's reference kernels on for generation steps, and
    // `src/llama/lone/sgemm.rs` makes llamafile's sgemm take a lone token's products
    // through the second, so that a token's numbers do not depend on the batch it is in.
    println!("cargo:rustc-link-arg=-Wl,--wrap=ggml_backend_init_by_type");
    println!("cargo:rustc-link-arg=-Wl,--wrap=llamafile_sgemm");
    lone();

    #[cfg(feature = "cuda")]
    cuda::build();

    #[cfg(any(feature = "tensorrt", feature = "tensorrt-testlib"))]
    trtllm::build();
}

/// `ffi/lone.c`: a lone token's products as llamafile's sgemm computes a column
/// (`src/llama/lone.rs`). Optimised whatever the profile (a test build decoded at 6
/// t/s with them in unoptimised Rust), with ggml's AVX2 kernels' instruction set and
/// no contraction, so that nothing is fused that sgemm does not fuse. x86-64 only.
fn lone() {
    const LONE: &str = "ffi/lone.c";
    println!("cargo:rerun-if-changed={LONE}");
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() != Ok("x86_64") {
        return;
    }
    cc::Build::new()
        .file(LONE)
        .std("c11")
        .opt_level(2)
        .flag("-mavx2")
        .flag("-mfma")
        .flag("-mf16c")
        .flag("-ffp-contract=off")
        .warnings(true)
        .extra_warnings(true)
        .compile("shepherd_lone");
}

/// Stops the build when `GGML_RPC=ON` but the llama.cpp build it links has no
/// `libggml-rpc`. llama-cpp-sys-2 runs CMake's configure step only in a fresh
/// build directory, and re-runs at all only for `GGML_*` variables it saw last
/// time, so a target directory built before RPC was turned on keeps a llama.cpp
/// without it; the binary would then refuse `--rpc` at run time.
fn check_llama_has_rpc() {
    println!("cargo:rerun-if-env-changed=GGML_RPC");
    println!("cargo:rerun-if-env-changed=DEP_LLAMA_GGML_CMAKE_DIR");
    if std::env::var("GGML_RPC").as_deref() != Ok("ON") {
        return;
    }
    // `lib/cmake` (or `lib64/cmake`) of llama-cpp-sys-2's install directory.
    let Some(cmake_dir) = std::env::var_os("DEP_LLAMA_GGML_CMAKE_DIR").map(PathBuf::from) else {
        return;
    };
    let Some(lib_dir) = cmake_dir.parent() else {
        return;
    };
    let built = ["libggml-rpc.a", "libggml-rpc.so"]
        .iter()
        .any(|name| lib_dir.join(name).is_file());
    if !built {
        panic!(
            "\n\nGGML_RPC=ON, but the llama.cpp build in {} has no ggml-rpc library: it was \
             configured before the RPC backend was turned on, and llama-cpp-sys-2 does not \
             configure an existing build again.\nRebuild it once: cargo clean -p llama-cpp-sys-2 \
             (add --target-dir target/static --target x86_64-unknown-linux-gnu for `make static`)\n\n",
            lib_dir.display()
        );
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use std::env;
    use std::process::Command;

    pub fn build() {
        for var in [
            "CUDA_PATH",
            "CMAKE_CUDA_ARCHITECTURES",
            "SHEPHERD_CUDA_RUNTIME",
        ] {
            println!("cargo:rerun-if-env-changed={var}");
        }
        let runtime = match env::var("SHEPHERD_CUDA_RUNTIME").as_deref() {
            Ok("dynamic") => {
                for lib in ["cudart", "cublas", "cublasLt"] {
                    println!("cargo:rustc-link-lib=dylib={lib}");
                }
                "runtime dynamic: libcudart.so, libcublas.so"
            }
            // `make CUDA=1 static CUDA_CUBLAS=dlopen`: ffi/cublas_open.c stands in for
            // static cuBLAS and opens the box's library; `--version` asks it which.
            Ok("cublas-dlopen") => {
                println!("cargo:rustc-cfg=cublas_dlopen");
                cublas_open();
                "runtime static: cudart linked in, cuBLAS opened at run time (libcublas.so.13 or .12)"
            }
            _ => "runtime static: cudart and cuBLAS linked in",
        };
        let archs = env::var("CMAKE_CUDA_ARCHITECTURES").map_or_else(
            |_| "GPU code: llama.cpp's default architectures".to_string(),
            |list| format!("GPU code: {}", describe_archs(&list)),
        );
        println!(
            "cargo:rustc-env=SHEPHERD_CUDA=CUDA {} ({runtime}; driver opened at run time), {archs}",
            toolkit_version()
        );
    }

    /// `ffi/cublas_open.c`, in place of static cuBLAS (the Makefile hands llama-cpp-sys-2
    /// empty stand-ins). Whole-archive: the symbols are wanted by libggml-cuda, which a
    /// linker that reads archives in order meets only after this library.
    fn cublas_open() {
        const FILE: &str = "ffi/cublas_open.c";
        println!("cargo:rerun-if-changed={FILE}");
        let include = env::var("CUDA_PATH").map_or_else(
            |_| "/usr/local/cuda/include".into(),
            |p| format!("{p}/include"),
        );
        cc::Build::new()
            .file(FILE)
            .include(include)
            .opt_level(2)
            .warnings(true)
            .extra_warnings(true)
            .cargo_metadata(false)
            .compile("shepherd_cublas_open");
        let out = env::var("OUT_DIR").expect("cargo sets OUT_DIR");
        println!("cargo:rustc-link-search=native={out}");
        println!("cargo:rustc-link-lib=static:+whole-archive=shepherd_cublas_open");
        println!("cargo:rustc-link-lib=dylib=dl");
    }

    /// `12.4.131` from `nvcc --version` ("Cuda compilation tools, release 12.4, V12.4.131").
    fn toolkit_version() -> String {
        let nvcc =
            env::var("CUDA_PATH").map_or_else(|_| "nvcc".to_string(), |p| format!("{p}/bin/nvcc"));
        let out = Command::new(nvcc).arg("--version").output().ok();
        let text = out
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        // One line only: a newline would end cargo's rustc-env directive.
        text.split_once(", V")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .map_or_else(|| "(unknown version)".to_string(), str::to_string)
    }

    /// `80-real;90-virtual;89` -> `sm_80, compute_90 (PTX), sm_89 + compute_89 (PTX)`.
    fn describe_archs(list: &str) -> String {
        let names: Vec<String> = list
            .split([';', ','])
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(|arch| match arch.split_once('-') {
                Some((n, "real")) => format!("sm_{n}"),
                Some((n, "virtual")) => format!("compute_{n} (PTX)"),
                _ => format!("sm_{arch} + compute_{arch} (PTX)"),
            })
            .collect();
        names.join(", ")
    }
}

/// `git rev-parse --short=12 HEAD` of this tree's own repository, re-run when HEAD or
/// its branch moves. In a worktree `.git` is a file, so the paths to watch come from git.
fn git_revision() -> Option<String> {
    // A source tarball unpacked inside some other repository must not report its HEAD.
    let top = PathBuf::from(git(&["rev-parse", "--show-toplevel"])?);
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    if top.canonicalize().ok()? != manifest.canonicalize().ok()? {
        return None;
    }
    let revision = git(&["rev-parse", "--short=12", "HEAD"])?;
    // HEAD, the branch it names (absent when detached) and packed-refs, where a branch
    // moves after `git pack-refs`; not all of refs/heads, which other worktrees move.
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    for name in ["HEAD", "packed-refs"].into_iter().chain(branch.as_deref()) {
        if let Some(path) = git(&["rev-parse", "--git-path", name]).map(PathBuf::from) {
            // Watching a missing path would re-run this script on every build.
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    Some(revision)
}

/// One line of git output, or `None` without git or outside a repository.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}

/// The `version` of package `name` in a Cargo.lock.
fn locked_version(lock: &str, name: &str) -> Option<String> {
    let wanted = format!("name = \"{name}\"");
    let mut lines = lock.lines().skip_while(|l| l.trim() != wanted).skip(1);
    let version = lines.next()?.trim().strip_prefix("version = \"")?;
    Some(version.trim_end_matches('"').to_string())
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
        let mut build = cc::Build::new();
        build
            .cpp(true)
            .std("c++17")
            .file(SHIM)
            .include(&include)
            .include(cuda.join("include"));
        // executor/types.h includes <cuda_fp16.h>, which includes CCCL's <nv/target>;
        // CUDA 13 toolkits keep CCCL in include/cccl, which only nvcc searches by itself.
        let cccl = cuda.join("include").join("cccl");
        if cccl.is_dir() {
            build.include(cccl);
        }
        build
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
