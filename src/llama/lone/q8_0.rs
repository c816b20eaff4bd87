//! `ffi/lone.c`'s kernels for Q8_0 weights and Q8_0 columns, each element as sgemm
//! (and ggml's dot product) computes it: the tile of four columns (up to
//! [`super::Q0_COLUMNS`], [`super::batch`]) and the wide one (AVX-512 VNNI, sixteen
//! columns a register, [`super::wide`]).

#![allow(unsafe_code)] // FFI module: every block carries a `// SAFETY:` comment.

use std::ffi::{c_int, c_void};

batch_kernel! {
    /// `ffi/lone.c`: the same as `shepherd_q4_1` for Q8_0 weights and Q8_0 columns, as
    /// sgemm (and ggml's dot product) computes each element.
    shepherd_q8_0
}

#[cfg(target_arch = "x86_64")]
extern "C" {
    /// `ffi/lone.c`: rows `from..to` of `c = a · b` for Q8_0 weights and the `n`
    /// columns `packed` holds, each element as sgemm computes it; AVX-512 VNNI. Each
    /// chunk's correction broadcast from memory where `loads` is 1, else from its
    /// register: the same numbers.
    pub(super) fn shepherd_q8_0_wide(
        n: i64,
        k: i64,
        a: *const c_void,
        lda: i64,
        packed: *const c_void,
        c: *mut f32,
        ldc: i64,
        from: i64,
        to: i64,
        loads: c_int,
    );
    /// `ffi/lone.c`: the form of `shepherd_q8_0_wide` this CPU runs faster.
    pub(super) fn shepherd_wide_loads() -> c_int;
}
