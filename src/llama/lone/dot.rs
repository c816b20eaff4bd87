//! A lone column of any other type ggml multiplies with its own dot product, row by
//! row as ggml does, the row ahead asked for ([`dot_rows`]).

#![allow(unsafe_code)] // FFI module: every block carries a `// SAFETY:` comment.

use std::ffi::{c_int, c_void};

use llama_cpp_sys_2 as sys;

use super::ggml::{compute_params, for_each_chunk, GGML_TYPE_F32};

#[cfg(target_arch = "x86_64")]
extern "C" {
    /// `ffi/lone.c`: rows `from..to` of `a` (`len` bytes each, `stride` apart, `n`
    /// elements) times the column `b` into `c`, each ggml's dot product `dot`.
    fn shepherd_dot_rows(
        dot: sys::ggml_vec_dot_t,
        n: c_int,
        a: *const c_void,
        stride: usize,
        len: usize,
        b: *const c_void,
        c: *mut f32,
        from: i64,
        to: i64,
    );
}

/// Computes `c = a · b` for one column `b` with ggml's own dot product for `a`'s type,
/// row by row as ggml's single-column path calls it (`ggml_compute_forward_mul_mat`
/// once sgemm refuses the column), so the numbers are llama.cpp's; true when done.
/// What differs is that each thread asks for the row ahead of the one it computes
/// (`shepherd_dot_rows`), as [`column`]'s kernels do block by block. For the types
/// no kernel here mirrors (the K-quants ggml does not repack, F16 where no context
/// needs a column exact, ...). Only a column of the dot product's own type (ggml's
/// converted column), F32 results, and dot products of one row at a time (x86's).
///
/// # Safety
/// As [`column`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn dot_rows(
    params: *const c_void,
    m: i64,
    k: i64,
    a: *const c_void,
    lda: i64,
    b: *const c_void,
    c: *mut c_void,
    (a_type, b_type, c_type): (i32, i32, i32),
) -> bool {
    if m < 0 || k < 0 || lda < 0 || c_type != GGML_TYPE_F32 || !cfg!(target_arch = "x86_64") {
        return false;
    }
    let Ok(a_type) = sys::ggml_type::try_from(a_type) else {
        return false;
    };
    if a_type >= sys::GGML_TYPE_COUNT {
        return false;
    }
    // SAFETY: ggml's table of CPU traits, indexed by a type below its count.
    let Some(traits) = (unsafe { sys::ggml_get_type_traits_cpu(a_type).as_ref() }) else {
        return false;
    };
    if traits.vec_dot.is_none()
        || traits.nrows != 1
        || i64::from(traits.vec_dot_type) != i64::from(b_type)
    {
        return false;
    }
    // SAFETY: sizes of a type below ggml's count.
    let (block, size) = unsafe { (sys::ggml_blck_size(a_type), sys::ggml_type_size(a_type)) };
    let (Ok(n), Ok(stride), Ok(len)) = (
        c_int::try_from(k.saturating_mul(block)),
        usize::try_from(lda),
        usize::try_from(k),
    ) else {
        return false;
    };
    let (stride, len) = (stride.saturating_mul(size), len.saturating_mul(size));
    // SAFETY: `params` points at ggml's compute params.
    let Some(params) = (unsafe { compute_params(params) }) else {
        return false;
    };
    let c = c.cast::<f32>();
    for_each_chunk(&params, (m, 1), b, |from, to| {
        // SAFETY: the matrices of the `llamafile_sgemm` call, rows within `m`, each
        // `len` bytes of `k` blocks of `a`'s type `stride` apart; `b` one column of
        // the dot product's type, as ggml's own path passes it.
        unsafe { dot_rows_kernel(traits.vec_dot, n, (a, stride, len), b, c, (from, to)) }
    });
    true
}

#[cfg(target_arch = "x86_64")]
unsafe fn dot_rows_kernel(
    dot: sys::ggml_vec_dot_t,
    n: c_int,
    (a, stride, len): (*const c_void, usize, usize),
    b: *const c_void,
    c: *mut f32,
    (from, to): (i64, i64),
) {
    // SAFETY: the caller's matrices and ggml's dot product for them (see `dot_rows`).
    unsafe { shepherd_dot_rows(dot, n, a, stride, len, b, c, from, to) }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn dot_rows_kernel(
    _: sys::ggml_vec_dot_t,
    _: c_int,
    _: (*const c_void, usize, usize),
    _: *const c_void,
    _: *mut f32,
    _: (i64, i64),
) {
}
