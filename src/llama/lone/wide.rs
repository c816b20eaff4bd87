//! The wide kernels' common part (AVX-512 VNNI): a product of [`WIDE_COLUMNS`]
//! columns or more, its columns packed sixteen to a register once per thread
//! ([`with_packed`]), then each thread's rows through the weights' kernel
//! ([`super::q8_0`], [`super::q4_1`]).

#![allow(unsafe_code)] // FFI module: every block carries a `// SAFETY:` comment.

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

use super::ggml::{
    for_each_chunk, ComputeParams, GGML_TYPE_F32, GGML_TYPE_Q4_1, GGML_TYPE_Q8_0, GGML_TYPE_Q8_1,
};
#[cfg(target_arch = "x86_64")]
use super::q4_1::shepherd_q4_1_wide;
#[cfg(target_arch = "x86_64")]
use super::q8_0::{shepherd_q8_0_wide, shepherd_wide_loads};

#[cfg(target_arch = "x86_64")]
extern "C" {
    /// The bytes of one block of sixteen packed columns (`wide_block`).
    static shepherd_wide_block_bytes: i64;
    /// `ffi/lone.c`: `n` columns of `k` blocks (`ldb` apart; Q8_0, or Q8_1 where
    /// `q8_1` is 1) packed for `shepherd_q8_0_wide` or `shepherd_q4_1_wide` into `out`,
    /// `ceil(n / 16) * k` blocks of `shepherd_wide_block_bytes`.
    fn shepherd_wide_pack(
        q8_1: c_int,
        n: i64,
        k: i64,
        b: *const c_void,
        ldb: i64,
        out: *mut c_void,
    );
}

/// The fewest columns a Q8_0 or Q4_1 product takes through the wide kernels
/// ([`wide_product`]) where the CPU has them; fewer go through [`batch`]'s, which
/// take four columns at a time. Sixteen lanes cost the same however few are used, so
/// the crossover is the CPU's; eight is where neither CPU measured loses much
/// (docs/LLAMA.md).
pub(super) const WIDE_COLUMNS: i64 = 8;

/// The weights and columns the wide kernels take: Q8_0 weights (and Q5_0 ones as
/// converted) with Q8_0 columns, Q4_1 weights with Q8_1 columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wide {
    Q8_0,
    Q4_1,
}

impl Wide {
    /// The wide kernel for a product of `n` columns of these types, if one takes it.
    pub(super) fn of(n: i64, types: (i32, i32, i32)) -> Option<Wide> {
        let kind = match types {
            (GGML_TYPE_Q8_0, GGML_TYPE_Q8_0, GGML_TYPE_F32) => Wide::Q8_0,
            (GGML_TYPE_Q4_1, GGML_TYPE_Q8_1, GGML_TYPE_F32) => Wide::Q4_1,
            _ => return None,
        };
        (n >= WIDE_COLUMNS).then_some(kind)
    }
}

/// `c = a · b` for Q8_0 weights and [`WIDE_COLUMNS`] Q8_0 columns or more, every
/// element bit for bit as sgemm computes it, with `ffi/lone.c`'s `shepherd_q8_0_wide`
/// (AVX-512 VNNI): sixteen columns a register, a row's four bytes at a time broadcast
/// against them, three instructions per 64 byte products where sgemm takes about
/// six per 32 (its speed against sgemm's: docs/LLAMA.md). Or Q4_1 weights and
/// [`WIDE_COLUMNS`] Q8_1 columns or more, with `shepherd_q4_1_wide`: the same
/// layout, each element bit for bit as ggml's dot product computes it. Each thread
/// packs the columns for itself first ([`with_packed`]), then takes its rows as
/// [`for_each_chunk`] hands them out.
///
/// # Safety
/// As [`batch`], for the weights and columns `kind` takes; the CPU runs AVX-512 VNNI
/// and VL.
pub(super) unsafe fn wide_product(
    params: &ComputeParams,
    kind: Wide,
    (m, n, k): (i64, i64, i64),
    a: (*const c_void, i64),
    b: (*const c_void, i64),
    c: (*mut f32, i64),
) {
    let rows = |packed| {
        for_each_chunk(params, (m, n), b.0, |from, to| {
            // SAFETY: the caller's weights and result, rows within `m`, the columns
            // packed; the caller's promise of the instruction set.
            unsafe { wide_rows(kind, (n, k), a, packed, c, (from, to)) };
        });
    };
    // SAFETY: the caller's columns.
    unsafe { with_packed(kind, (n, k), b, rows) };
}

/// The most bytes of packed columns a thread keeps for the wide kernel; a larger
/// product goes to sgemm. A verification batch's 65 columns of Gemma 3 270M's 20
/// blocks take 58 KB; a 512-token prompt's columns of 4,096 elements 2.4 MB, those of
/// an FFN's 14,336 8.3 MB (each thread keeps its own; the kernel is faster than sgemm
/// at 512 columns too, packing included).
pub(super) const WIDE_PACKED_BYTES: usize = 8 << 20;

/// The bytes `n` columns of `k` blocks take packed for the wide kernels.
#[cfg(target_arch = "x86_64")]
pub(super) fn packed_bytes(n: i64, k: i64) -> usize {
    // SAFETY: a constant `ffi/lone.c` defines.
    let block_bytes = unsafe { shepherd_wide_block_bytes };
    usize::try_from((n + 15) / 16 * k * block_bytes).unwrap_or(usize::MAX)
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) fn packed_bytes(_: i64, _: i64) -> usize {
    usize::MAX
}

/// Calls `f` with `n` columns of `k` blocks (`ldb` apart; Q8_0 or Q8_1, as `kind`
/// takes) packed for the wide kernel, in this thread's buffer (kept for its next
/// product). A verification batch's 65 columns of 20 blocks take 58 KB, and packing
/// them a small fraction of the product's time, so each thread packs them for itself.
///
/// # Safety
/// `b` holds `n` columns of `k` blocks of `kind`'s column type `ldb` apart.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn with_packed(
    kind: Wide,
    (n, k): (i64, i64),
    (b, ldb): (*const c_void, i64),
    f: impl FnOnce(*const c_void),
) {
    /// A cache line, the packed columns' unit: zmm loads never split one.
    #[derive(Clone, Copy)]
    #[repr(C, align(64))]
    struct Line([u8; 64]);
    thread_local! {
        static PACKED: std::cell::RefCell<Vec<Line>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    PACKED.with_borrow_mut(|packed| {
        packed.resize(packed_bytes(n, k).div_ceil(64), Line([0; 64]));
        let q8_1 = c_int::from(kind == Wide::Q4_1);
        // SAFETY: the caller's columns, into room for their packed blocks.
        unsafe { shepherd_wide_pack(q8_1, n, k, b, ldb, packed.as_mut_ptr().cast()) };
        f(packed.as_ptr().cast());
    });
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) unsafe fn with_packed(
    _: Wide,
    _: (i64, i64),
    _: (*const c_void, i64),
    _: impl FnOnce(*const c_void),
) {
}

/// Rows `from..to` of `c = a · b` for weights `a` of `kind` (`lda` blocks apart) and
/// the `n` columns of `k` blocks [`with_packed`] packed.
///
/// # Safety
/// `a` holds rows `from..to` of `k` blocks, `c` those rows of `n` columns `ldc` apart;
/// the CPU runs AVX-512 VNNI and VL.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn wide_rows(
    kind: Wide,
    (n, k): (i64, i64),
    (a, lda): (*const c_void, i64),
    packed: *const c_void,
    (c, ldc): (*mut f32, i64),
    (from, to): (i64, i64),
) {
    /// Which form of the Q8_0 kernel this CPU runs, asked once.
    static LOADS: OnceLock<c_int> = OnceLock::new();
    // SAFETY: only asks the CPU (cpuid).
    let loads = *LOADS.get_or_init(|| unsafe { shepherd_wide_loads() });
    // SAFETY: the caller's promises.
    unsafe {
        match kind {
            Wide::Q8_0 => shepherd_q8_0_wide(n, k, a, lda, packed, c, ldc, from, to, loads),
            Wide::Q4_1 => shepherd_q4_1_wide(n, k, a, lda, packed, c, ldc, from, to),
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) unsafe fn wide_rows(
    _: Wide,
    _: (i64, i64),
    _: (*const c_void, i64),
    _: *const c_void,
    _: (*mut f32, i64),
    _: (i64, i64),
) {
}
