//! A lone F16 column (attention's scores and values over the F16 cache) as sgemm's
//! F16 kernel computes a column of a batch, eight lanes or sixteen ([`column`]).

#![allow(unsafe_code)] // FFI module: every block carries a `// SAFETY:` comment.

use std::ffi::c_void;

use super::cpu::{build, Build};
use super::ggml::{compute_params, for_each_chunk, GGML_TYPE_F16, GGML_TYPE_F32};

/// Declares F16 column kernels of `ffi/lone.c` (each a [`ColumnKernel`]), their one
/// signature spelled here once: rows `from..to` of `c = a · b` for F16 rows `a` (`lda`
/// apart, `k` long) and the F16 column `b`.
macro_rules! column_kernels {
    ($($(#[$doc:meta])* $name:ident;)*) => {
        #[cfg(target_arch = "x86_64")]
        extern "C" {
            $(
                $(#[$doc])*
                fn $name(
                    k: i64,
                    a: *const c_void,
                    lda: i64,
                    b: *const c_void,
                    c: *mut f32,
                    from: i64,
                    to: i64,
                );
            )*
        }
    };
}

column_kernels! {
    /// Each element as sgemm's AVX-512 kernel computes it, `k` a multiple of 16.
    shepherd_lone_f16_avx512;
    /// Each element as sgemm's AVX2 kernel computes it, `k` a multiple of 8.
    shepherd_lone_f16;
}

/// Computes `c = a · b` for one column `b` as sgemm computes a column, if there is a
/// kernel for it: `Some(true)` when done, `Some(false)` where sgemm would refuse the
/// product for any column count too, `None` when the caller must go on. The F16
/// kernels, the only ones here, round as sgemm does, not as ggml's dot product, so
/// only an `exact` column takes them (Q8_0 and Q5_0 columns go through [`batch`]).
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
    exact: bool,
) -> Option<bool> {
    if m < 0 || k < 0 || lda < 0 {
        return None;
    }
    // SAFETY: `params` points at ggml's compute params.
    let params = unsafe { compute_params(params) }?;
    let kernel = match column_kernel(m, k, types, exact)? {
        Ok(kernel) => kernel,
        Err(refused) => return Some(refused),
    };
    let c = c.cast::<f32>();
    for_each_chunk(&params, (m, 1), b, |from, to| {
        // SAFETY: the matrices of the `llamafile_sgemm` call (see above), rows within
        // `m`; `column_kernel` chose a kernel this build and CPU run.
        unsafe { kernel(k, a, lda, b, c, from, to) }
    });
    Some(true)
}

/// A lone F16 column's kernel in `ffi/lone.c`: rows `from..to` of `c = a · b`.
type ColumnKernel =
    unsafe extern "C" fn(i64, *const c_void, i64, *const c_void, *mut f32, i64, i64);

/// The kernel for a single column of these types and sizes: `Ok` a kernel,
/// `Err(false)` where sgemm refuses the product for any column count, `None` where
/// the caller must go on. Only an `exact` column takes the F16 kernels ([`column`]).
#[cfg(target_arch = "x86_64")]
pub(super) fn column_kernel(
    m: i64,
    k: i64,
    types: (i32, i32, i32),
    exact: bool,
) -> Option<Result<ColumnKernel, bool>> {
    let kernel: ColumnKernel = match types {
        (GGML_TYPE_F16, GGML_TYPE_F16, GGML_TYPE_F32) if !exact => return None,
        // sgemm's F16 kernel takes no row count that is not a multiple of 4.
        (GGML_TYPE_F16, GGML_TYPE_F16, GGML_TYPE_F32) if m % 4 != 0 => return Some(Err(false)),
        (GGML_TYPE_F16, GGML_TYPE_F16, GGML_TYPE_F32) => match build()? {
            Build::Avx2 if k % 8 == 0 => shepherd_lone_f16,
            Build::Avx512 if k % 16 == 0 => shepherd_lone_f16_avx512,
            // sgemm's partial loads for the rest: a lone column goes as two.
            _ => return None,
        },
        _ => return None,
    };
    Some(Ok(kernel))
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) fn column_kernel(
    _: i64,
    _: i64,
    _: (i32, i32, i32),
    _: bool,
) -> Option<Result<ColumnKernel, bool>> {
    None
}
