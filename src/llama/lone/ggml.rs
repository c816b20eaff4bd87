//! What `lone` reads of ggml's CPU backend: its type numbers, the compute params
//! each thread of a matrix product gets, and the chunk counter a batch's rows are
//! handed out with ([`for_each_chunk`]).

#![allow(unsafe_code)] // FFI module: every block carries a `// SAFETY:` comment.

use std::ffi::c_void;

use llama_cpp_sys_2 as sys;

/// ggml's element types `lone` has kernels for, as the `c_int` a `llamafile_sgemm`
/// call carries them (bindgen's `ggml_type` is unsigned; each is a small number).
pub(super) const GGML_TYPE_F32: i32 = sys::GGML_TYPE_F32 as i32;
pub(super) const GGML_TYPE_F16: i32 = sys::GGML_TYPE_F16 as i32;
pub(super) const GGML_TYPE_Q4_1: i32 = sys::GGML_TYPE_Q4_1 as i32;
pub(super) const GGML_TYPE_Q5_0: i32 = sys::GGML_TYPE_Q5_0 as i32;
pub(super) const GGML_TYPE_Q8_0: i32 = sys::GGML_TYPE_Q8_0 as i32;
pub(super) const GGML_TYPE_Q8_1: i32 = sys::GGML_TYPE_Q8_1 as i32;

/// ggml's `struct ggml_compute_params` (`ggml-cpu-impl.h`) up to its thread pool: this
/// thread's index, the thread count, the node's work buffer and the pool, whose chunk
/// counter hands out rows ([`for_each_chunk`]; the rest is not read).
#[repr(C)]
pub(super) struct ComputeParams {
    pub(super) ith: i32,
    pub(super) nth: i32,
    pub(super) wsize: usize,
    pub(super) wdata: *mut c_void,
    pub(super) threadpool: *mut c_void,
}

/// Rows a thread takes at a time from ggml's chunk counter ([`for_each_chunk`], a
/// batch's products only): ggml's own chunk for a single column
/// (`ggml_compute_forward_mul_mat`; a batch's it cuts 16 rows by 16 columns), here
/// for a batch's columns too, where the Q4_1 kernel reads each column's scales again
/// per call.
pub(super) const CHUNK_ROWS: i64 = 64;

extern "C" {
    /// ggml's chunk counter (`ggml-cpu.c`): adds `value`, returns what it held.
    pub(super) fn ggml_threadpool_chunk_add(threadpool: *mut c_void, value: i32) -> i32;
}

/// Reads ggml's compute params; `None` where they name no thread of theirs.
///
/// # Safety
/// `params` points at ggml's compute params.
pub(super) unsafe fn compute_params(params: *const c_void) -> Option<ComputeParams> {
    // SAFETY: the caller's pointer to ggml's compute params, which start so.
    let params = unsafe { std::ptr::read(params.cast::<ComputeParams>()) };
    (params.ith >= 0 && params.ith < params.nth).then_some(params)
}

/// Calls `rows(from, to)` for each range of an `m`-row product of `n` columns this
/// thread computes. A batch's rows are handed out as ggml hands out its own dot
/// products': a thread starts with chunk `ith` of [`CHUNK_ROWS`] rows and takes the
/// next from the pool's counter as it comes free, so a thread the machine holds back
/// computes less and the node's barrier waits less (docs/LLAMA.md). ggml sets the counter
/// (to `nth`) only before the barrier that precedes a node's sgemm calls on its
/// converted columns, which lie in the work buffer; a node makes one such call per head
/// in attention, and only the first, whose columns start the work buffer (`b`), finds
/// the counter fresh. Every other call, a product too short for four chunks a thread,
/// and a single column take fixed shares: handed out, a lone token's rows decoded
/// slower, the rows each thread streams no longer contiguous. Which
/// thread computes a row never changes how, so exactness holds.
pub(super) fn for_each_chunk(
    params: &ComputeParams,
    (m, n): (i64, i64),
    b: *const c_void,
    mut rows: impl FnMut(i64, i64),
) {
    let (ith, nth) = (i64::from(params.ith), i64::from(params.nth));
    let chunks = (m + CHUNK_ROWS - 1) / CHUNK_ROWS;
    if n < 2 || b != params.wdata.cast_const() || params.threadpool.is_null() || chunks < nth * 4 {
        rows(m * ith / nth, m * (ith + 1) / nth);
        return;
    }
    let mut chunk = ith;
    while chunk < chunks {
        let from = chunk * CHUNK_ROWS;
        rows(from, (from + CHUNK_ROWS).min(m));
        // SAFETY: the pool computing this node; every thread of the node takes its
        // chunks from this counter, which ggml set before the node's last barrier.
        chunk = i64::from(unsafe { ggml_threadpool_chunk_add(params.threadpool, 1) });
    }
}
