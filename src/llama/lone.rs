//! A lone token's matrix products, computed exactly as llamafile's sgemm computes
//! each column of a batch, so that a token gets the same numbers decoded alone as
//! in a verification batch (speculative decoding) or beside other slots.
//!
//! ggml's CPU backend hands every matrix product to llamafile's sgemm first, and
//! sgemm refuses a single column (`n < 2`): a lone token's products fall to ggml's
//! dot products, which add in another order. `sgemm::__wrap_llamafile_sgemm` (the
//! linker's `--wrap`, build.rs) sends a single column here while a live context
//! needs it exact (`sgemm::EXACT_COLUMNS`); for a model with K-quants nothing
//! can be, and ggml's own dot products are faster. For the two products a
//! decode step is made of on the models we claim ([`super::context`]'s
//! `fast_kernels_batch_invariant`), Q8_0 weights (SmolLM2's output layer) and the F16
//! cache (attention scores and values), `ffi/lone.c` computes the column with the
//! very operations, in the very order, of sgemm's AVX2 kernels (`tinyBLAS_Q0_AVX`
//! and `tinyBLAS<8, __m256, ...>` in `ggml-cpu/llamafile/sgemm.cpp`): per output
//! element one 8-lane accumulator, a fused multiply-add per block of the inner
//! dimension, then sgemm's horizontal sum. It is C, built optimised in every
//! profile: the same kernels in unoptimised Rust made a test build too slow to decode
//! with. sgemm's tiles change which thread computes an element, never how, so the
//! result is bit for bit that of any batch. Each thread takes its share of rows with
//! no barrier (ggml puts one after every node): fixed shares of a single column, a
//! batch's handed out in chunks ([`for_each_chunk`]).
//! Other products of a single column go to sgemm itself as two equal columns (exact,
//! and slower; see the wrapper).
//!
//! For Q8_0 and Q5_0 weights sgemm's column and ggml's own dot product
//! (`ggml_vec_dot_q8_0_q8_0`, `ggml_vec_dot_q5_0_q8_0`) are the same computation, so
//! [`batch`] takes their products of up to four columns whether or not a context needs
//! them exact: the kernels ask for the weights ahead of the block they multiply
//! (`ffi/lone.c`'s `prefetch`), which neither ggml's dot products nor sgemm do, and a
//! lone token or a few slots' step streams every weight once.
//!
//! Q4_1 weights (most of SmolLM2's) are the other way round: sgemm refuses them for
//! any column count and ggml multiplies them with its dot product, once per row and
//! column, unpacking every weight again for each column of a batch. [`batch`] (every
//! column count, through the same wrapper) computes each element with exactly the
//! operations of that dot product (`ggml_vec_dot_q4_1_q8_1`, AVX2) but unpacks a row
//! once for four columns: the same numbers as llama.cpp's, alone or in any batch, and
//! a verification batch, four slots' step or a prompt costs less (docs/LLAMA.md).
//!
//! Products of more columns with Q8_0 weights (and Q5_0 weights, converted) go to a
//! wide kernel of its own where the CPU has AVX-512 VNNI ([`wide_product`]): sixteen
//! columns a register, and still each element bit for bit sgemm's, faster. Q4_1
//! products of more columns take the same layout, each element bit for bit ggml's dot
//! product.
//!
//! This holds for the ggml builds it was written against: AVX2, FMA and F16C, and
//! the same with AVX-512 (a native build on such a CPU), where sgemm's F16 kernel
//! takes sixteen lanes and `_mm512_reduce_add_ps` for its sum and `ffi/lone.c` has
//! that kernel's twin; the integer parts of the Q8_0 and Q4_1 kernels (VNNI's
//! `dpbusd` where ggml has it) give the same exact sums either way. [`enabled`] asks
//! ggml how it was built; elsewhere nothing here runs and the context falls back to
//! ggml's reference kernels for verification. The tests in `super::context` check
//! the claim on the real model, bit for bit.
//!
//! The files: this one the dispatch ([`batch`]); `sgemm` the wrap and the count of
//! contexts that need a lone column exact; `f16` and `dot` a lone column's kernels;
//! `q4_1`, `q8_0` and `q5_0` each quantisation's kernels, tile and wide; `wide` the
//! wide kernels' packing; `ggml` and `cpu` what ggml and the CPU are. Every speed
//! cited for a choice here (each constant's crossover, each kernel's gain) is in
//! docs/LLAMA.md, "`lone`'s figures".

#![allow(unsafe_code)] // FFI module: every block carries a `// SAFETY:` comment.

use std::ffi::{c_int, c_void};

/// Declares a batch kernel of `ffi/lone.c` (a [`BatchKernel`]): each quantisation's
/// file names its own, with the one signature they share spelled here once.
macro_rules! batch_kernel {
    ($(#[$doc:meta])* $name:ident) => {
        #[cfg(target_arch = "x86_64")]
        extern "C" {
            $(#[$doc])*
            pub(super) fn $name(
                isa: std::ffi::c_int,
                n: i64,
                k: i64,
                a: *const std::ffi::c_void,
                lda: i64,
                b: *const std::ffi::c_void,
                ldb: i64,
                c: *mut f32,
                ldc: i64,
                from: i64,
                to: i64,
            ) -> i32;
        }
    };
}

mod cpu;
mod dot;
mod f16;
mod ggml;
mod q4_1;
mod q5_0;
mod q8_0;
mod sgemm;
mod wide;

pub use cpu::{avx2_kernels, enabled};
pub(super) use sgemm::EXACT_COLUMNS;

use cpu::Isa;
use dot::dot_rows;
use f16::column;
use ggml::{
    compute_params, for_each_chunk, GGML_TYPE_F32, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q8_0,
    GGML_TYPE_Q8_1,
};
use q5_0::q5_0_through_q8_0;
use wide::{packed_bytes, wide_product, Wide, WIDE_PACKED_BYTES};
#[cfg(target_arch = "x86_64")]
use {q4_1::shepherd_q4_1, q5_0::shepherd_q5_0, q8_0::shepherd_q8_0};

#[cfg(target_arch = "x86_64")]
extern "C" {
    /// The longest inner dimension, in blocks, the batch kernels take.
    static shepherd_max_blocks: i64;
}

/// The most columns a product of Q8_0 or Q5_0 weights takes through [`batch`]'s
/// kernels; sgemm, which computes each element the same, takes more (its tiles of four
/// rows reuse each column across rows, where these stream the rows once per four
/// columns). Where the two cross over, measured against sgemm: docs/LLAMA.md.
const Q0_COLUMNS: i64 = 8;

/// A batch kernel of `ffi/lone.c`: rows `from..to` of `c = a · b` for `n` columns,
/// `0` when it declined `k`.
type BatchKernel = unsafe extern "C" fn(
    c_int,
    i64,
    i64,
    *const c_void,
    i64,
    *const c_void,
    i64,
    *mut f32,
    i64,
    i64,
    i64,
) -> i32;

/// Computes `c = a · b` where `ffi/lone.c` has a kernel for the weights and this many
/// columns, each element exactly as llama.cpp computes it for any column count, so a
/// token gets the same numbers alone and in any batch; true when done.
///
/// Q4_1 weights and Q8_1 columns, any number: as ggml's own dot product
/// (`ggml_vec_dot_q4_1_q8_1`). ggml offers these to sgemm, which refuses them, and then
/// runs its dot product once per row and column: a batch's columns each unpack every
/// weight again. The kernel unpacks a row once for four columns, which makes a
/// verification batch (or four slots' tokens, or a prompt) cheaper, and a lone token
/// no dearer. From [`WIDE_COLUMNS`] columns, where the CPU has AVX-512 VNNI, the wide
/// kernel takes them, sixteen at once ([`wide_product`]).
///
/// Q8_0 and Q5_0 weights and Q8_0 columns, up to [`Q0_COLUMNS`]: as sgemm computes a
/// column and ggml's dot product an element, which for these types are one
/// computation, so they come here whether or not a context needs a lone column exact.
/// The kernels ask for the weights ahead of the block they multiply, which neither
/// ggml's dot products nor sgemm do: a lone token and a few slots' step stream every
/// weight once (Gemma 3 270M Q4_K_M, whose output layer is Q8_0 and many of whose
/// layers are Q5_0, gains most; docs/LLAMA.md).
///
/// Q8_0 weights and [`WIDE_COLUMNS`] columns or more (a verification batch, a prompt)
/// where the CPU has AVX-512 VNNI: the wide kernel ([`wide_product`]), sgemm's numbers
/// faster; elsewhere sgemm past [`Q0_COLUMNS`]. Q5_0 weights and more
/// columns: each thread's rows converted to Q8_0 first, then through the wide kernel
/// or sgemm's own Q8_0 kernel ([`q5_0_through_q8_0`]).
///
/// # Safety
/// The arguments are those of a `llamafile_sgemm` call: `params` is ggml's compute
/// params, `a` holds `m` rows of `k` blocks of its type `lda` blocks apart, `b` `n`
/// columns of `k` blocks of theirs `ldb` blocks apart, `c` room for `n` columns of `m`
/// floats, `ldc` floats apart; [`enabled`] returned true.
#[allow(clippy::too_many_arguments)]
pub unsafe fn batch(
    params: *const c_void,
    dims: (i64, i64, i64),
    a: (*const c_void, i64),
    b: (*const c_void, i64),
    c: (*mut c_void, i64),
    types: (i32, i32, i32),
) -> bool {
    // SAFETY: the caller's matrices, as this function requires; the CPU's best set,
    // and the wide kernel where the CPU runs it.
    unsafe { batch_with((Isa::best(), Isa::wide()), params, dims, a, b, c, types) }
}

/// [`batch`] with the instruction set `isa`, and with [`wide_product`] for Q8_0 and
/// Q4_1 products of [`WIDE_COLUMNS`] columns or more (and Q5_0 ones past
/// [`Q0_COLUMNS`]) where `wide`; the CPU must run both.
///
/// # Safety
/// As [`batch`]; `isa.supported()`, and `Isa::Avx512Vnni.supported()` where `wide`.
#[allow(clippy::too_many_arguments)]
unsafe fn batch_with(
    (isa, wide): (Isa, bool),
    params: *const c_void,
    (m, n, k): (i64, i64, i64),
    (a, lda): (*const c_void, i64),
    (b, ldb): (*const c_void, i64),
    (c, ldc): (*mut c_void, i64),
    types: (i32, i32, i32),
) -> bool {
    if m < 0 || n < 1 || k < 0 || lda < 0 || ldb < 0 || ldc < 0 {
        return false;
    }
    let wide = wide && packed_bytes(n, k) <= WIDE_PACKED_BYTES;
    if let Some(kind) = Wide::of(n, types).filter(|_| wide) {
        // SAFETY: `params` points at ggml's compute params.
        let Some(params) = (unsafe { compute_params(params) }) else {
            return false;
        };
        // SAFETY: the caller's matrices, of the types `kind` takes; the CPU runs
        // AVX-512 VNNI (the caller's promise).
        unsafe {
            wide_product(
                &params,
                kind,
                (m, n, k),
                (a, lda),
                (b, ldb),
                (c.cast(), ldc),
            )
        };
        return true;
    }
    let wide_q5_0 = types == (GGML_TYPE_Q5_0, GGML_TYPE_Q8_0, GGML_TYPE_F32) && n > Q0_COLUMNS;
    let kernel = batch_kernel(n, types);
    if !(wide_q5_0 && enabled() || kernel.is_some() && batch_takes(k)) {
        return false;
    }
    // SAFETY: `params` points at ggml's compute params.
    let Some(params) = (unsafe { compute_params(params) }) else {
        return false;
    };
    let c = c.cast::<f32>();
    let Some(kernel) = kernel.filter(|_| !wide_q5_0) else {
        // SAFETY: the caller's matrices, Q5_0 weights and Q8_0 columns; the caller's
        // promise of the wide kernel's instruction set.
        unsafe { q5_0_through_q8_0(&params, (m, n, k), (a, lda), (b, ldb), (c, ldc), wide) };
        return true;
    };
    let mut done = true;
    for_each_chunk(&params, (m, n), b, |from, to| {
        // SAFETY: the matrices of the `llamafile_sgemm` call, as this function
        // requires, rows within `m`; `batch_takes` checked `k`, the caller `isa`.
        done &= unsafe { kernel(isa as c_int, n, k, a, lda, b, ldb, c, ldc, from, to) } != 0;
    });
    done
}

/// The kernel for `n` columns of these types, if `ffi/lone.c` has one.
#[cfg(target_arch = "x86_64")]
fn batch_kernel(n: i64, types: (i32, i32, i32)) -> Option<BatchKernel> {
    match types {
        (GGML_TYPE_Q4_1, GGML_TYPE_Q8_1, GGML_TYPE_F32) => Some(shepherd_q4_1),
        (GGML_TYPE_Q8_0, GGML_TYPE_Q8_0, GGML_TYPE_F32) if n <= Q0_COLUMNS => Some(shepherd_q8_0),
        (GGML_TYPE_Q5_0, GGML_TYPE_Q8_0, GGML_TYPE_F32) if n <= Q0_COLUMNS => Some(shepherd_q5_0),
        _ => None,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn batch_kernel(_: i64, _: (i32, i32, i32)) -> Option<BatchKernel> {
    None
}

/// Whether the batch kernels take an inner dimension of `k` blocks: asked before any
/// row is computed, so that a product they decline never takes chunks of ggml's
/// counter.
#[cfg(target_arch = "x86_64")]
fn batch_takes(k: i64) -> bool {
    // SAFETY: a constant `ffi/lone.c` defines.
    k <= unsafe { shepherd_max_blocks }
}

#[cfg(not(target_arch = "x86_64"))]
fn batch_takes(_: i64) -> bool {
    false
}

#[cfg(test)]
mod tests;
