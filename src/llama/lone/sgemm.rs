//! The wrap of llamafile's `llamafile_sgemm` (the linker's `--wrap`, build.rs): every
//! matrix product ggml's CPU backend offers sgemm comes to [`__wrap_llamafile_sgemm`],
//! which sends what `lone` has a kernel for there and the rest on to the real one,
//! [`__real_llamafile_sgemm`]. [`EXACT_COLUMNS`] counts the live contexts that need a
//! lone column exact.

#![allow(unsafe_code)] // FFI module: every block carries a `// SAFETY:` comment.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

extern "C" {
    /// llamafile's own `llamafile_sgemm` (the linker's `--wrap`, build.rs; the
    /// wrapper is [`__wrap_llamafile_sgemm`]).
    pub(super) fn __real_llamafile_sgemm(
        params: *const c_void,
        m: i64,
        n: i64,
        k: i64,
        a: *const c_void,
        lda: i64,
        b: *const c_void,
        ldb: i64,
        c: *mut c_void,
        ldc: i64,
        a_type: c_int,
        b_type: c_int,
        c_type: c_int,
    ) -> bool;
}

/// How many live contexts compute a lone token as sgemm computes a batch's column
/// (`context::fast_kernels_batch_invariant`). While none does (a model with K-quants or
/// other repacked weights, flash attention on, a quantized cache), nothing can make
/// a lone token agree with a batch, and [`__wrap_llamafile_sgemm`] leaves single
/// columns to ggml's own dot products, but for Q8_0 and Q5_0 weights, whose
/// `lone` kernel is that dot product, prefetching: sgemm taking a column as
/// two, or sgemm's F16 kernel, would only cost speed there (docs/LLAMA.md, "Bit for
/// bit").
pub(in crate::llama) static EXACT_COLUMNS: AtomicUsize = AtomicUsize::new(0);

/// Every matrix product ggml's CPU backend offers llamafile's sgemm comes here
/// (build.rs links with `--wrap`). llamafile refuses a single column (`n < 2`), so
/// a lone token's products fell to ggml's dot products, which round differently
/// from sgemm: the same token decoded alone and as a column of a batch (a verified
/// draft, several slots in one step) got different logits. Where `lone`
/// mirrors sgemm's kernels, a single column is computed there, exactly as sgemm
/// computes each column; any other single column sgemm would take in a batch goes
/// to sgemm as a batch of two equal columns (`ldb` and `ldc` 0: both read the one
/// input column and write the one output column, and each tile of two columns is
/// computed by one thread, so each result is written twice, with the same value, by
/// that thread). Q4_1 weights, which sgemm refuses, go to [`super::batch`] for
/// every column count: ggml's dot product per element, a row unpacked once for four
/// columns. Q8_0 and Q5_0 products of up to four columns go there too whether or not
/// a context needs them exact (the kernel is sgemm's per element, and ggml's dot
/// product, with the weights asked for ahead). While no live context needs a lone
/// column exact ([`EXACT_COLUMNS`]), other single columns of ggml's dot-product types
/// go to [`super::dot_rows`]: ggml's own dot product per row, the row ahead
/// prefetched. Where `lone` does not apply, single
/// columns go through unchanged.
///
/// # Safety
/// As llamafile's `llamafile_sgemm`: the arguments describe valid matrices.
#[no_mangle]
pub unsafe extern "C" fn __wrap_llamafile_sgemm(
    params: *const c_void,
    m: i64,
    n: i64,
    k: i64,
    a: *const c_void,
    lda: i64,
    b: *const c_void,
    ldb: i64,
    c: *mut c_void,
    ldc: i64,
    a_type: c_int,
    b_type: c_int,
    c_type: c_int,
) -> bool {
    let enabled = super::enabled();
    let types = (a_type, b_type, c_type);
    // Q4_1 weights, every column count, and Q8_0 and Q5_0 weights, a few columns:
    // through `lone`'s kernels, as llama.cpp computes each element.
    if enabled {
        // SAFETY: the caller's matrices, as `batch` requires; `enabled` returned true.
        let done = unsafe { super::batch(params, (m, n, k), (a, lda), (b, ldb), (c, ldc), types) };
        if done {
            return true;
        }
    }
    let exact = EXACT_COLUMNS.load(Ordering::SeqCst) > 0;
    if n == 1 && enabled {
        // SAFETY: the caller's matrices, one column, as `column` requires; `enabled`.
        let done = unsafe { super::column(params, m, k, a, lda, b, c, types, exact) };
        if let Some(done) = done {
            return done;
        }
        // Any other single column not needed exact: ggml's own dot products, the row
        // ahead prefetched.
        // SAFETY: the caller's matrices, one column, as `dot_rows` requires.
        if !exact && unsafe { super::dot_rows(params, m, k, a, lda, b, c, types) } {
            return true;
        }
    }
    let lone = n == 1 && enabled && exact;
    let (n, ldb, ldc) = if lone { (2, 0, 0) } else { (n, ldb, ldc) };
    // SAFETY: the caller's matrices, unchanged but for a single column read and
    // written as two: `ldb` 0 reads only the column `b` holds and `ldc` 0 writes only
    // the column `c` holds, so no access goes past either.
    unsafe {
        __real_llamafile_sgemm(
            params, m, n, k, a, lda, b, ldb, c, ldc, a_type, b_type, c_type,
        )
    }
}
