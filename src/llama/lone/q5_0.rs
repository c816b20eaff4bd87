//! Q5_0 weights and Q8_0 columns as sgemm computes them: the tile of four columns (up
//! to [`super::Q0_COLUMNS`], [`super::batch`]), and past that the weights converted
//! to Q8_0 rows and multiplied as Q8_0 ([`q5_0_through_q8_0`]).

#![allow(unsafe_code)] // FFI module: every block carries a `// SAFETY:` comment.

use std::ffi::c_void;

use super::ggml::{for_each_chunk, ComputeParams, CHUNK_ROWS, GGML_TYPE_F32, GGML_TYPE_Q8_0};
use super::sgemm::__real_llamafile_sgemm;
use super::wide::{wide_rows, with_packed, Wide};

batch_kernel! {
    /// `ffi/lone.c`: the same as `shepherd_q4_1` for Q5_0 weights and Q8_0 columns.
    shepherd_q5_0
}

#[cfg(target_arch = "x86_64")]
extern "C" {
    /// `ffi/lone.c`: rows `from..to` of `a` (Q5_0 blocks, `lda` apart, `k` long) as
    /// Q8_0 blocks into `out`, row after row: the same scales, the quants as bytes.
    fn shepherd_q5_0_as_q8_0(
        k: i64,
        a: *const c_void,
        lda: i64,
        out: *mut c_void,
        from: i64,
        to: i64,
    );
}

/// Rows a thread converts at a time in [`q5_0_through_q8_0`]: ggml's own chunk.
const PANEL_ROWS: i64 = CHUNK_ROWS;

/// `c = a · b` for Q5_0 weights and `n` Q8_0 columns as sgemm computes it, faster:
/// sgemm's Q5_0 kernel unpacks a block of weights to bytes again for every four
/// columns it multiplies (where much of Gemma 3 270M's prompt time went), so each
/// thread converts its rows to Q8_0 blocks once, [`PANEL_ROWS`] at a time (the same
/// scales, the bytes that kernel unpacks), and multiplies them as Q8_0 weights: with
/// the wide kernel where `wide` ([`wide_product`]), else with sgemm's Q8_0 kernel as a
/// product of its own, one thread's. Per element sgemm's Q0 kernels are one computation
/// for both types (`ffi/lone.c`'s `q0_tile`), so every number is the one sgemm's Q5_0
/// kernel gives.
///
/// # Safety
/// As [`batch`], for Q5_0 weights and Q8_0 columns, `n` at least 2; the CPU runs
/// AVX-512 VNNI and VL where `wide`.
pub(super) unsafe fn q5_0_through_q8_0(
    params: &ComputeParams,
    (m, n, k): (i64, i64, i64),
    (a, lda): (*const c_void, i64),
    (b, ldb): (*const c_void, i64),
    (c, ldc): (*mut f32, i64),
    wide: bool,
) {
    thread_local! {
        /// This thread's converted rows, kept for its next product.
        static PANEL: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    /// ggml's `block_q8_0`, in bytes.
    const Q8_0_BYTES: usize = 34;
    // sgemm's Q0 kernels read only the thread's index and count.
    let alone = ComputeParams {
        ith: 0,
        nth: 1,
        wsize: 0,
        wdata: std::ptr::null_mut(),
        threadpool: std::ptr::null_mut(),
    };
    let row_bytes = usize::try_from(k).unwrap_or(0) * Q8_0_BYTES;
    let run = |packed: Option<*const c_void>| {
        for_each_chunk(params, (m, n), b, |from, to| {
            PANEL.with_borrow_mut(|panel| {
                for start in (from..to).step_by(PANEL_ROWS as usize) {
                    let end = (start + PANEL_ROWS).min(to);
                    panel.resize(row_bytes * (end - start) as usize, 0);
                    let rows = (panel.as_ptr().cast(), k);
                    // The same rows of the caller's result (`ldc` is at least `m`, so
                    // at least these rows), which no other thread writes.
                    // SAFETY: `start` is within `m`.
                    let c = (unsafe { c.add(start as usize) }, ldc);
                    // SAFETY: rows `start..end` of the caller's Q5_0 weights, into room
                    // for as many rows of `k` Q8_0 blocks; then those rows times the
                    // caller's columns (packed, or as they are) into those of `c`; the
                    // caller's promise of the instruction set.
                    unsafe {
                        let out = panel.as_mut_ptr().cast();
                        q5_0_as_q8_0(k, (a, lda), out, (start, end));
                        match packed {
                            Some(packed) => {
                                wide_rows(Wide::Q8_0, (n, k), rows, packed, c, (0, end - start))
                            }
                            None => {
                                let done = __real_llamafile_sgemm(
                                    std::ptr::from_ref(&alone).cast(),
                                    end - start,
                                    n,
                                    k,
                                    rows.0,
                                    rows.1,
                                    b,
                                    ldb,
                                    c.0.cast(),
                                    c.1,
                                    GGML_TYPE_Q8_0,
                                    GGML_TYPE_Q8_0,
                                    GGML_TYPE_F32,
                                );
                                // sgemm's AVX kernels take Q8_0 products of two columns
                                // and more.
                                debug_assert!(done, "sgemm declined a Q8_0 product of {n} columns");
                            }
                        }
                    }
                }
            });
        });
    };
    if wide {
        // SAFETY: the caller's columns.
        unsafe { with_packed(Wide::Q8_0, (n, k), (b, ldb), |packed| run(Some(packed))) };
    } else {
        run(None);
    }
}

/// Rows `from..to` of Q5_0 weights as Q8_0 blocks into `out` (`ffi/lone.c`'s
/// `shepherd_q5_0_as_q8_0`).
///
/// # Safety
/// `a` holds rows `from..to` of `k` Q5_0 blocks `lda` apart, `out` room for as many
/// rows of `k` Q8_0 blocks.
#[cfg(target_arch = "x86_64")]
unsafe fn q5_0_as_q8_0(
    k: i64,
    (a, lda): (*const c_void, i64),
    out: *mut c_void,
    (from, to): (i64, i64),
) {
    // SAFETY: the caller's rows and room for them.
    unsafe { shepherd_q5_0_as_q8_0(k, a, lda, out, from, to) }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn q5_0_as_q8_0(_: i64, _: (*const c_void, i64), _: *mut c_void, _: (i64, i64)) {}
