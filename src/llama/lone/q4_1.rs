//! `ffi/lone.c`'s kernels for Q4_1 weights and Q8_1 columns, each element as ggml's
//! dot product (`ggml_vec_dot_q4_1_q8_1`) computes it: the tile of four columns
//! (every column count, [`super::batch`]) and the wide one (AVX-512 VNNI, sixteen
//! columns a register, [`super::wide`]).

#![allow(unsafe_code)] // FFI module: every block carries a `// SAFETY:` comment.

use std::ffi::c_void;

batch_kernel! {
    /// `ffi/lone.c`: rows `from..to` of `a` (Q4_1 blocks, `lda` apart, `k` long)
    /// times the `n` columns of `b` (Q8_1 blocks, `ldb` apart) into `c` (columns
    /// `ldc` floats apart), as ggml's dot product computes each, with the instruction
    /// set `isa`; 0 (nothing done) when `k` is over `shepherd_max_blocks`.
    shepherd_q4_1
}

#[cfg(target_arch = "x86_64")]
extern "C" {
    /// `ffi/lone.c`: rows `from..to` of `c = a · b` for Q4_1 weights and the `n`
    /// packed Q8_1 columns `packed` holds, each element as `ggml_vec_dot_q4_1_q8_1`
    /// computes it; AVX-512 VNNI.
    pub(super) fn shepherd_q4_1_wide(
        n: i64,
        k: i64,
        a: *const c_void,
        lda: i64,
        packed: *const c_void,
        c: *mut f32,
        ldc: i64,
        from: i64,
        to: i64,
    );
}
