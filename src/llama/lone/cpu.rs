//! What this build of ggml and this CPU run: whether ggml's CPU kernels are the ones
//! `ffi/lone.c` mirrors ([`enabled`]), and which instruction set the batch kernels
//! take ([`Isa`]).

#![allow(unsafe_code)] // FFI module: every block carries a `// SAFETY:` comment.

use std::ffi::c_int;
use std::sync::OnceLock;

use llama_cpp_sys_2 as sys;

#[cfg(target_arch = "x86_64")]
extern "C" {
    /// Whether the CPU has the instruction set `isa` names ([`Isa`]).
    fn shepherd_isa_supported(isa: c_int) -> c_int;
}

/// Whether the loaded ggml computes with the kernels `ffi/lone.c` mirrors.
pub fn enabled() -> bool {
    build().is_some()
}

/// Whether ggml's CPU kernels are x86's AVX2 ones (a portable build, or a CPU
/// without AVX-512), which flash attention's choice depends on (`tuning`).
pub fn avx2_kernels() -> bool {
    build() == Some(Build::Avx2)
}

/// How the loaded ggml was built, as far as its F16 kernel goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Build {
    /// AVX2, FMA and F16C: sgemm's eight-lane F16 kernel.
    Avx2,
    /// The same with AVX-512: sgemm's sixteen-lane F16 kernel.
    Avx512,
}

pub(super) fn build() -> Option<Build> {
    static BUILD: OnceLock<Option<Build>> = OnceLock::new();
    *BUILD.get_or_init(|| {
        // SAFETY: each only reports how ggml's CPU backend was compiled.
        let (built, avx512) = unsafe {
            (
                sys::ggml_cpu_has_llamafile() != 0
                    && sys::ggml_cpu_has_avx2() != 0
                    && sys::ggml_cpu_has_fma() != 0
                    && sys::ggml_cpu_has_f16c() != 0,
                sys::ggml_cpu_has_avx512() != 0,
            )
        };
        let build = if avx512 { Build::Avx512 } else { Build::Avx2 };
        (built && cpu_runs_it(build)).then_some(build)
    })
}

#[cfg(target_arch = "x86_64")]
fn cpu_runs_it(build: Build) -> bool {
    std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
        && std::arch::is_x86_feature_detected!("f16c")
        && (build == Build::Avx2 || std::arch::is_x86_feature_detected!("avx512f"))
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_runs_it(_: Build) -> bool {
    false
}

/// The instruction sets `ffi/lone.c`'s batch kernels are written for (its `enum`):
/// AVX2, FMA and F16C alone, or with AVX-VNNI's or AVX-512 VNNI's `dpbusd`, which sums
/// a lane's four byte products in one instruction where AVX2 takes two. The sums are
/// exact either way, so the numbers are the same (ggml's own kernels take `dpbusd`
/// where built for it); the speed is not (docs/LLAMA.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub(super) enum Isa {
    Avx2 = 0,
    AvxVnni = 1,
    Avx512Vnni = 2,
}

impl Isa {
    /// Whether this CPU runs the kernels built for `self`.
    pub(super) fn supported(self) -> bool {
        // SAFETY: only asks the CPU (cpuid) and the OS (xgetbv).
        cfg!(target_arch = "x86_64") && unsafe { isa_supported(self as c_int) }
    }

    /// Whether this CPU runs the wide kernels (AVX-512 VNNI), asked once.
    pub(super) fn wide() -> bool {
        static WIDE: OnceLock<bool> = OnceLock::new();
        *WIDE.get_or_init(|| Isa::Avx512Vnni.supported())
    }

    /// The set this CPU runs fastest: AVX-VNNI's short encoding before AVX-512's.
    pub(super) fn best() -> Isa {
        static BEST: OnceLock<Isa> = OnceLock::new();
        *BEST.get_or_init(|| {
            [Isa::AvxVnni, Isa::Avx512Vnni]
                .into_iter()
                .find(|isa| isa.supported())
                .unwrap_or(Isa::Avx2)
        })
    }
}

#[cfg(target_arch = "x86_64")]
unsafe fn isa_supported(isa: c_int) -> bool {
    // SAFETY: the caller's promise; `ffi/lone.c` only reads cpuid's answers.
    unsafe { shepherd_isa_supported(isa) != 0 }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn isa_supported(_: c_int) -> bool {
    false
}
