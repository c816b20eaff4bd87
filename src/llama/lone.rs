//! A lone token's matrix products, computed exactly as llamafile's sgemm computes
//! each column of a batch, so that a token gets the same numbers decoded alone as
//! in a verification batch (speculative decoding) or beside other slots.
//!
//! ggml's CPU backend hands every matrix product to llamafile's sgemm first, and
//! sgemm refuses a single column (`n < 2`): a lone token's products fall to ggml's
//! dot products, which add in another order. `context::__wrap_llamafile_sgemm` (the
//! linker's `--wrap`, build.rs) sends a single column here. For the two products a
//! decode step is made of on the models we claim ([`super::context`]'s
//! `fast_kernels_batch_invariant`), Q8_0 weights (SmolLM2's output layer) and the F16
//! cache (attention scores and values), `ffi/lone.c` computes the column with the
//! very operations, in the very order, of sgemm's AVX2 kernels (`tinyBLAS_Q0_AVX`
//! and `tinyBLAS<8, __m256, ...>` in `ggml-cpu/llamafile/sgemm.cpp`): per output
//! element one 8-lane accumulator, a fused multiply-add per block of the inner
//! dimension, then sgemm's horizontal sum. It is C, built optimised in every
//! profile: the same kernels in unoptimised Rust made a test build decode at 6 t/s. sgemm's tiles change which thread computes
//! an element, never how, so the result is bit for bit that of any batch. Each
//! thread takes its share of rows with no barrier (ggml puts one after every node).
//! Other products of a single column go to sgemm itself as two equal columns (exact,
//! and slower; see the wrapper).
//!
//! This holds only for the ggml build it was written against: AVX2, FMA and F16C,
//! without AVX-512 (whose F16 kernel takes 16 lanes and another sum). [`enabled`]
//! asks ggml how it was built; elsewhere nothing here runs and the context falls
//! back to ggml's reference kernels for verification. The tests in
//! `super::context` check the claim on the real model, bit for bit.

#![allow(unsafe_code)] // FFI module: every block carries a `// SAFETY:` comment.

use std::ffi::c_void;
use std::sync::OnceLock;

use llama_cpp_sys_2 as sys;

/// ggml's `GGML_TYPE_F32`, `GGML_TYPE_F16` and `GGML_TYPE_Q8_0`.
const GGML_TYPE_F32: i32 = 0;
const GGML_TYPE_F16: i32 = 1;
const GGML_TYPE_Q8_0: i32 = 8;

/// The start of ggml's `struct ggml_compute_params`: this thread's index and the
/// thread count (the rest is not read).
#[repr(C)]
struct ComputeParams {
    ith: i32,
    nth: i32,
}

#[cfg(target_arch = "x86_64")]
extern "C" {
    /// `ffi/lone.c`: rows `m * ith / nth .. m * (ith + 1) / nth` of `a` (Q8_0 blocks,
    /// `lda` blocks apart, `k` blocks long) times the column `b` (`k` blocks) into `c`.
    fn shepherd_lone_q8_0(
        m: i64,
        k: i64,
        a: *const c_void,
        lda: i64,
        b: *const c_void,
        c: *mut f32,
        ith: i32,
        nth: i32,
    );
    /// The same for F16 elements, `k` a multiple of 8.
    fn shepherd_lone_f16(
        m: i64,
        k: i64,
        a: *const c_void,
        lda: i64,
        b: *const c_void,
        c: *mut f32,
        ith: i32,
        nth: i32,
    );
}

/// Whether the loaded ggml computes with the kernels `ffi/lone.c` mirrors.
pub fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| {
        // SAFETY: each only reports how ggml's CPU backend was compiled.
        let built = unsafe {
            sys::ggml_cpu_has_llamafile() != 0
                && sys::ggml_cpu_has_avx2() != 0
                && sys::ggml_cpu_has_fma() != 0
                && sys::ggml_cpu_has_f16c() != 0
                && sys::ggml_cpu_has_avx512() == 0
        };
        built && cpu_runs_it()
    })
}

#[cfg(target_arch = "x86_64")]
fn cpu_runs_it() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
        && std::arch::is_x86_feature_detected!("f16c")
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_runs_it() -> bool {
    false
}

/// Computes `c = a · b` for one column `b` as sgemm computes a column, if there is a
/// kernel for it: `Some(true)` when done, `Some(false)` where sgemm would refuse the
/// product for any column count too, `None` when the caller must go on.
///
/// # Safety
/// The arguments are those of a `llamafile_sgemm` call with `n == 1`: `params` is
/// ggml's compute params, `a` holds `m` rows of `k` blocks `lda` blocks apart, `b` one
/// column of `k` blocks, `c` room for `m` floats; [`enabled`] returned true.
#[allow(clippy::too_many_arguments)]
pub unsafe fn column(
    params: *const c_void,
    m: i64,
    k: i64,
    a: *const c_void,
    lda: i64,
    b: *const c_void,
    c: *mut c_void,
    types: (i32, i32, i32),
) -> Option<bool> {
    if m < 0 || k < 0 || lda < 0 {
        return None;
    }
    // SAFETY: `params` points at ggml's compute params, which start with these two.
    let ComputeParams { ith, nth } = unsafe { std::ptr::read(params.cast::<ComputeParams>()) };
    if ith < 0 || nth <= ith {
        return None;
    }
    let (a, b, c) = (Matrix(a), Matrix(b), c.cast::<f32>());
    kernel(m, k, a, lda, b, c, (ith, nth), types)
}

/// A matrix of the `llamafile_sgemm` call, as the kernels read it.
#[derive(Clone, Copy)]
struct Matrix(*const c_void);

#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
fn kernel(
    m: i64,
    k: i64,
    a: Matrix,
    lda: i64,
    b: Matrix,
    c: *mut f32,
    (ith, nth): (i32, i32),
    types: (i32, i32, i32),
) -> Option<bool> {
    match types {
        (GGML_TYPE_Q8_0, GGML_TYPE_Q8_0, GGML_TYPE_F32) => {
            // SAFETY: the matrices of the `llamafile_sgemm` call (see `column`), Q8_0
            // blocks; `enabled` checked that this CPU has AVX2, FMA and F16C.
            unsafe { shepherd_lone_q8_0(m, k, a.0, lda, b.0, c, ith, nth) };
            Some(true)
        }
        // sgemm's F16 kernel takes no row count that is not a multiple of 4.
        (GGML_TYPE_F16, GGML_TYPE_F16, GGML_TYPE_F32) if m % 4 != 0 => Some(false),
        (GGML_TYPE_F16, GGML_TYPE_F16, GGML_TYPE_F32) if k % 8 == 0 => {
            // SAFETY: the matrices of the `llamafile_sgemm` call (see `column`), F16
            // elements, `k` a multiple of 8; `enabled` checked AVX2, FMA and F16C.
            unsafe { shepherd_lone_f16(m, k, a.0, lda, b.0, c, ith, nth) };
            Some(true)
        }
        _ => None,
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
fn kernel(
    _: i64,
    _: i64,
    _: Matrix,
    _: i64,
    _: Matrix,
    _: *mut f32,
    _: (i32, i32),
    _: (i32, i32, i32),
) -> Option<bool> {
    None
}
