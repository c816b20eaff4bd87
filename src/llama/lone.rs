//! A lone token's matrix products, computed exactly as llamafile's sgemm computes
//! each column of a batch, so that a token gets the same numbers decoded alone as
//! in a verification batch (speculative decoding) or beside other slots.
//!
//! ggml's CPU backend hands every matrix product to llamafile's sgemm first, and
//! sgemm refuses a single column (`n < 2`): a lone token's products fall to ggml's
//! dot products, which add in another order. `context::__wrap_llamafile_sgemm` (the
//! linker's `--wrap`, build.rs) sends a single column here while a live context
//! needs it exact (`context::EXACT_COLUMNS`); for a model with K-quants nothing
//! can be, and ggml's own dot products are faster. For the two products a
//! decode step is made of on the models we claim ([`super::context`]'s
//! `fast_kernels_batch_invariant`), Q8_0 weights (SmolLM2's output layer) and the F16
//! cache (attention scores and values), `ffi/lone.c` computes the column with the
//! very operations, in the very order, of sgemm's AVX2 kernels (`tinyBLAS_Q0_AVX`
//! and `tinyBLAS<8, __m256, ...>` in `ggml-cpu/llamafile/sgemm.cpp`): per output
//! element one 8-lane accumulator, a fused multiply-add per block of the inner
//! dimension, then sgemm's horizontal sum. It is C, built optimised in every
//! profile: the same kernels in unoptimised Rust made a test build decode at 6 t/s. sgemm's tiles change which thread computes
//! an element, never how, so the result is bit for bit that of any batch. Each
//! thread takes its share of rows with no barrier (ggml puts one after every node):
//! fixed shares of a single column, a batch's handed out in chunks ([`for_each_chunk`]).
//! Other products of a single column go to sgemm itself as two equal columns (exact,
//! and slower; see the wrapper).
//!
//! For Q8_0 and Q5_0 weights sgemm's column and ggml's own dot product
//! (`ggml_vec_dot_q8_0_q8_0`, `ggml_vec_dot_q5_0_q8_0`) are the same computation, so
//! [`batch`] takes their products of up to four columns whether or not a context needs
//! them exact: the kernels ask for the weights ahead of the block they multiply
//! (`ffi/lone.c`'s `prefetch`), which neither ggml's dot products nor sgemm do, and a
//! lone token or a few slots' step streams every weight once (Gemma 3 270M Q4_K_M,
//! whose output layer is Q8_0: tg128 1.26x, docs/LLAMA.md).
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
//! columns a register, and still each element bit for bit sgemm's, at twice its speed
//! (Gemma 3 270M's edit workload 1.35x). Q4_1 products of more columns take the same
//! layout, each element bit for bit ggml's dot product.
//!
//! This holds for the ggml builds it was written against: AVX2, FMA and F16C, and
//! the same with AVX-512 (a native build on such a CPU), where sgemm's F16 kernel
//! takes sixteen lanes and `_mm512_reduce_add_ps` for its sum and `ffi/lone.c` has
//! that kernel's twin; the integer parts of the Q8_0 and Q4_1 kernels (VNNI's
//! `dpbusd` where ggml has it) give the same exact sums either way. [`enabled`] asks
//! ggml how it was built; elsewhere nothing here runs and the context falls back to
//! ggml's reference kernels for verification. The tests in `super::context` check
//! the claim on the real model, bit for bit.

#![allow(unsafe_code)] // FFI module: every block carries a `// SAFETY:` comment.

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

use llama_cpp_sys_2 as sys;

/// ggml's `GGML_TYPE_F32`, `GGML_TYPE_F16`, `GGML_TYPE_Q4_1`, `GGML_TYPE_Q8_0` and
/// `GGML_TYPE_Q8_1`.
const GGML_TYPE_F32: i32 = 0;
const GGML_TYPE_F16: i32 = 1;
const GGML_TYPE_Q4_1: i32 = 3;
const GGML_TYPE_Q5_0: i32 = 6;
const GGML_TYPE_Q8_0: i32 = 8;
const GGML_TYPE_Q8_1: i32 = 9;

/// ggml's `struct ggml_compute_params` (`ggml-cpu-impl.h`) up to its thread pool: this
/// thread's index, the thread count, the node's work buffer and the pool, whose chunk
/// counter hands out rows ([`for_each_chunk`]; the rest is not read).
#[repr(C)]
struct ComputeParams {
    ith: i32,
    nth: i32,
    wsize: usize,
    wdata: *mut c_void,
    threadpool: *mut c_void,
}

/// Rows a thread takes at a time from ggml's chunk counter ([`for_each_chunk`], a
/// batch's products only): ggml's own chunk for a single column
/// (`ggml_compute_forward_mul_mat`; a batch's it cuts 16 rows by 16 columns), here
/// for a batch's columns too, where the Q4_1 kernel reads each column's scales again
/// per call.
const CHUNK_ROWS: i64 = 64;

extern "C" {
    /// ggml's chunk counter (`ggml-cpu.c`): adds `value`, returns what it held.
    fn ggml_threadpool_chunk_add(threadpool: *mut c_void, value: i32) -> i32;
    /// llamafile's own `llamafile_sgemm` (the linker's `--wrap`, build.rs; the
    /// wrapper is `context::__wrap_llamafile_sgemm`).
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

#[cfg(target_arch = "x86_64")]
extern "C" {
    /// The same for F16 elements as sgemm's AVX-512 kernel computes them, `k` a
    /// multiple of 16.
    fn shepherd_lone_f16_avx512(
        k: i64,
        a: *const c_void,
        lda: i64,
        b: *const c_void,
        c: *mut f32,
        from: i64,
        to: i64,
    );
    /// The same for F16 elements, `k` a multiple of 8.
    fn shepherd_lone_f16(
        k: i64,
        a: *const c_void,
        lda: i64,
        b: *const c_void,
        c: *mut f32,
        from: i64,
        to: i64,
    );
    /// Whether the CPU has the instruction set `isa` names ([`Isa`]).
    fn shepherd_isa_supported(isa: c_int) -> c_int;
    /// `ffi/lone.c`: rows `from..to` of `a` (Q4_1 blocks, `lda` apart, `k` long)
    /// times the `n` columns of `b` (Q8_1 blocks, `ldb` apart) into `c` (columns
    /// `ldc` floats apart), as ggml's dot product computes each, with the instruction
    /// set `isa`; 0 (nothing done) when `k` is over [`shepherd_max_blocks`].
    fn shepherd_q4_1(
        isa: c_int,
        n: i64,
        k: i64,
        a: *const c_void,
        lda: i64,
        b: *const c_void,
        ldb: i64,
        c: *mut f32,
        ldc: i64,
        from: i64,
        to: i64,
    ) -> i32;
    /// The same for Q8_0 weights and Q8_0 columns, as sgemm (and ggml's dot
    /// product) computes each element.
    fn shepherd_q8_0(
        isa: c_int,
        n: i64,
        k: i64,
        a: *const c_void,
        lda: i64,
        b: *const c_void,
        ldb: i64,
        c: *mut f32,
        ldc: i64,
        from: i64,
        to: i64,
    ) -> i32;
    /// The same for Q5_0 weights and Q8_0 columns.
    fn shepherd_q5_0(
        isa: c_int,
        n: i64,
        k: i64,
        a: *const c_void,
        lda: i64,
        b: *const c_void,
        ldb: i64,
        c: *mut f32,
        ldc: i64,
        from: i64,
        to: i64,
    ) -> i32;
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
    /// The longest inner dimension, in blocks, the batch kernels take.
    static shepherd_max_blocks: i64;
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
    /// `ffi/lone.c`: rows `from..to` of `c = a · b` for Q8_0 weights and the `n`
    /// columns `packed` holds, each element as sgemm computes it; AVX-512 VNNI. Each
    /// chunk's correction broadcast from memory where `loads` is 1, else from its
    /// register: the same numbers.
    fn shepherd_q8_0_wide(
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
    fn shepherd_wide_loads() -> c_int;
    /// `ffi/lone.c`: the same for Q4_1 weights and packed Q8_1 columns, each element as
    /// `ggml_vec_dot_q4_1_q8_1` computes it; AVX-512 VNNI.
    fn shepherd_q4_1_wide(
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

/// Whether the loaded ggml computes with the kernels `ffi/lone.c` mirrors.
pub fn enabled() -> bool {
    build().is_some()
}

/// Whether ggml's CPU kernels are x86's AVX2 ones (a portable build, or a CPU
/// without AVX-512), which flash attention's choice depends on (`tuning`).
pub fn avx2_kernels() -> bool {
    build() == Some(Build::Avx2)
}

/// How the loaded ggml was built, as far as its F16 kernel goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Build {
    /// AVX2, FMA and F16C: sgemm's eight-lane F16 kernel.
    Avx2,
    /// The same with AVX-512: sgemm's sixteen-lane F16 kernel.
    Avx512,
}

fn build() -> Option<Build> {
    static BUILD: OnceLock<Option<Build>> = OnceLock::new();
    *BUILD.get_or_init(|| {
        // SAFETY: each only reports how ggml's CPU backend was compiled.
        let (built, avx512) = unsafe {
            (
                sys::ggml_cpu_has_llamafile() != 0
                    && sys::ggml_cpu_has_avx2() != 0
                    && sys::ggml_cpu_has_fma() != 0
                    && sys::ggml_cpu_has_f16c() != 0,
                sys::ggml_cpu_has_avx512() != 0,
            )
        };
        let build = if avx512 { Build::Avx512 } else { Build::Avx2 };
        (built && cpu_runs_it(build)).then_some(build)
    })
}

#[cfg(target_arch = "x86_64")]
fn cpu_runs_it(build: Build) -> bool {
    std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
        && std::arch::is_x86_feature_detected!("f16c")
        && (build == Build::Avx2 || std::arch::is_x86_feature_detected!("avx512f"))
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_runs_it(_: Build) -> bool {
    false
}

/// Reads ggml's compute params; `None` where they name no thread of theirs.
///
/// # Safety
/// `params` points at ggml's compute params.
unsafe fn compute_params(params: *const c_void) -> Option<ComputeParams> {
    // SAFETY: the caller's pointer to ggml's compute params, which start so.
    let params = unsafe { std::ptr::read(params.cast::<ComputeParams>()) };
    (params.ith >= 0 && params.ith < params.nth).then_some(params)
}

/// Calls `rows(from, to)` for each range of an `m`-row product of `n` columns this
/// thread computes. A batch's rows are handed out as ggml hands out its own dot
/// products': a thread starts with chunk `ith` of [`CHUNK_ROWS`] rows and takes the
/// next from the pool's counter as it comes free, so a thread the machine holds back
/// computes less and the node's barrier waits less (SmolLM2 Q4_1 on a 2-core VM, paired
/// against fixed halves: pp512 1.21x, pp64 1.16x; docs/LLAMA.md). ggml sets the counter
/// (to `nth`) only before the barrier that precedes a node's sgemm calls on its
/// converted columns, which lie in the work buffer; a node makes one such call per head
/// in attention, and only the first, whose columns start the work buffer (`b`), finds
/// the counter fresh. Every other call, a product too short for four chunks a thread,
/// and a single column take fixed shares: handed out, a lone token's rows decoded
/// 0.97x as fast (20 pairs), the rows each thread streams no longer contiguous. Which
/// thread computes a row never changes how, so exactness holds.
fn for_each_chunk(
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

/// A lone F16 column's kernel in `ffi/lone.c`: rows `from..to` of `c = a · b`.
type ColumnKernel =
    unsafe extern "C" fn(i64, *const c_void, i64, *const c_void, *mut f32, i64, i64);

/// The kernel for a single column of these types and sizes: `Ok` a kernel,
/// `Err(false)` where sgemm refuses the product for any column count, `None` where
/// the caller must go on. Only an `exact` column takes the F16 kernels ([`column`]).
#[cfg(target_arch = "x86_64")]
fn column_kernel(
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
fn column_kernel(
    _: i64,
    _: i64,
    _: (i32, i32, i32),
    _: bool,
) -> Option<Result<ColumnKernel, bool>> {
    None
}

/// The most columns a product of Q8_0 or Q5_0 weights takes through [`batch`]'s
/// kernels; sgemm, which computes each element the same, takes more (its tiles of four
/// rows reuse each column across rows, where these stream the rows once per four
/// columns). Gemma 3 270M's Q8_0 output layer (262,144 rows of 640) on 2 threads of an
/// Intel Xeon, against sgemm: 1.6x as fast at 2 to 5 columns, 1.2x at 8, even at 12,
/// 0.98x at 16; a 2,048-row matrix that stays in cache, 0.9x at 8.
const Q0_COLUMNS: i64 = 8;

/// The fewest columns a Q8_0 or Q4_1 product takes through the wide kernels
/// ([`wide_product`]) where the CPU has them; fewer go through [`batch`]'s, which
/// take four columns at a time. Sixteen lanes cost the same however few are used, so
/// the crossover is the CPU's: one thread, against `q0_tile` on Gemma 3 270M's Q8_0
/// output layer, an Intel Xeon (Emerald Rapids) 0.63x at 4 columns, 1.07x at 5, 1.25x
/// at 8; an AMD EPYC (Zen 5) 0.49x at 4, 0.75x at 5, 1.05x at 8 (a 1,536-row matrix
/// 1.16x), and Q4_1 against `q4_1_tile` there 0.76x at 5, 1.08x to 1.15x at 8, 1.3x
/// to 1.4x at 9, 2.1x at 16. Eight loses the Xeon a little at 5 to 7 and the EPYC
/// nothing.
const WIDE_COLUMNS: i64 = 8;

/// The weights and columns the wide kernels take: Q8_0 weights (and Q5_0 ones as
/// converted) with Q8_0 columns, Q4_1 weights with Q8_1 columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wide {
    Q8_0,
    Q4_1,
}

impl Wide {
    /// The wide kernel for a product of `n` columns of these types, if one takes it.
    fn of(n: i64, types: (i32, i32, i32)) -> Option<Wide> {
        let kind = match types {
            (GGML_TYPE_Q8_0, GGML_TYPE_Q8_0, GGML_TYPE_F32) => Wide::Q8_0,
            (GGML_TYPE_Q4_1, GGML_TYPE_Q8_1, GGML_TYPE_F32) => Wide::Q4_1,
            _ => return None,
        };
        (n >= WIDE_COLUMNS).then_some(kind)
    }
}

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
/// kernel takes them, sixteen at once ([`wide_product`]; SmolLM2's layers, one thread
/// of an AMD EPYC: 2.0x to 2.2x as fast at 16 to 512 columns).
///
/// Q8_0 and Q5_0 weights and Q8_0 columns, up to [`Q0_COLUMNS`]: as sgemm computes a
/// column and ggml's dot product an element, which for these types are one
/// computation, so they come here whether or not a context needs a lone column exact.
/// The kernels ask for the weights ahead of the block they multiply, which neither
/// ggml's dot products nor sgemm do: a lone token and a few slots' step stream every
/// weight once (Gemma 3 270M Q4_K_M, whose output layer is Q8_0 and many of whose
/// layers are Q5_0: tg128 1.26x; 4 streams 1.21x of llama-server, 1.10x before;
/// docs/LLAMA.md).
///
/// Q8_0 weights and [`WIDE_COLUMNS`] columns or more (a verification batch, a prompt)
/// where the CPU has AVX-512 VNNI: the wide kernel ([`wide_product`]), sgemm's numbers
/// at twice its speed; elsewhere sgemm past [`Q0_COLUMNS`]. Q5_0 weights and more
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

/// The instruction sets `ffi/lone.c`'s batch kernels are written for (its `enum`):
/// AVX2, FMA and F16C alone, or with AVX-VNNI's or AVX-512 VNNI's `dpbusd`, which sums
/// a lane's four byte products in one instruction where AVX2 takes two. The sums are
/// exact either way, so the numbers are the same (ggml's own kernels take `dpbusd`
/// where built for it); the speed is not (a Q8_0 product of four columns on an Intel
/// Xeon: 1.4x as fast with AVX-VNNI).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
enum Isa {
    Avx2 = 0,
    AvxVnni = 1,
    Avx512Vnni = 2,
}

impl Isa {
    /// Whether this CPU runs the kernels built for `self`.
    fn supported(self) -> bool {
        // SAFETY: only asks the CPU (cpuid) and the OS (xgetbv).
        cfg!(target_arch = "x86_64") && unsafe { isa_supported(self as c_int) }
    }

    /// Whether this CPU runs the wide kernels (AVX-512 VNNI), asked once.
    fn wide() -> bool {
        static WIDE: OnceLock<bool> = OnceLock::new();
        *WIDE.get_or_init(|| Isa::Avx512Vnni.supported())
    }

    /// The set this CPU runs fastest: AVX-VNNI's short encoding before AVX-512's.
    fn best() -> Isa {
        static BEST: OnceLock<Isa> = OnceLock::new();
        *BEST.get_or_init(|| {
            [Isa::AvxVnni, Isa::Avx512Vnni]
                .into_iter()
                .find(|isa| isa.supported())
                .unwrap_or(Isa::Avx2)
        })
    }
}

#[cfg(target_arch = "x86_64")]
unsafe fn isa_supported(isa: c_int) -> bool {
    // SAFETY: the caller's promise; `ffi/lone.c` only reads cpuid's answers.
    unsafe { shepherd_isa_supported(isa) != 0 }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn isa_supported(_: c_int) -> bool {
    false
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

/// Rows a thread converts at a time in [`q5_0_through_q8_0`]: ggml's own chunk.
const PANEL_ROWS: i64 = CHUNK_ROWS;

/// `c = a · b` for Q5_0 weights and `n` Q8_0 columns as sgemm computes it, faster:
/// sgemm's Q5_0 kernel unpacks a block of weights to bytes again for every four
/// columns it multiplies (half of Gemma 3 270M's prompt time went there), so each
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
unsafe fn q5_0_through_q8_0(
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

/// `c = a · b` for Q8_0 weights and [`WIDE_COLUMNS`] Q8_0 columns or more, every
/// element bit for bit as sgemm computes it, with `ffi/lone.c`'s `shepherd_q8_0_wide`
/// (AVX-512 VNNI): sixteen columns a register, a row's four bytes at a time broadcast
/// against them, three instructions per 64 byte products where sgemm takes about
/// six per 32. Gemma 3 270M's output layer (262,144 rows of 640), one thread of an
/// Intel Xeon: 2.0x to 2.5x sgemm's speed from 9 to 512 columns, about 60 G byte
/// products a second (its 512-bit units are the limit: the xor-free form, one
/// instruction fewer, ran no faster there). Or Q4_1 weights and
/// [`WIDE_COLUMNS`] Q8_1 columns or more, with `shepherd_q4_1_wide`: the same
/// layout, each element bit for bit as ggml's dot product computes it. Each thread
/// packs the columns for itself first ([`with_packed`]), then takes its rows as
/// [`for_each_chunk`] hands them out.
///
/// # Safety
/// As [`batch`], for the weights and columns `kind` takes; the CPU runs AVX-512 VNNI
/// and VL.
unsafe fn wide_product(
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
/// an FFN's 14,336 8.3 MB (each thread keeps its own; the kernel is twice sgemm's speed
/// at 512 columns too, packing included).
const WIDE_PACKED_BYTES: usize = 8 << 20;

/// The bytes `n` columns of `k` blocks take packed for the wide kernels.
#[cfg(target_arch = "x86_64")]
fn packed_bytes(n: i64, k: i64) -> usize {
    // SAFETY: a constant `ffi/lone.c` defines.
    let block_bytes = unsafe { shepherd_wide_block_bytes };
    usize::try_from((n + 15) / 16 * k * block_bytes).unwrap_or(usize::MAX)
}

#[cfg(not(target_arch = "x86_64"))]
fn packed_bytes(_: i64, _: i64) -> usize {
    usize::MAX
}

/// Calls `f` with `n` columns of `k` blocks (`ldb` apart; Q8_0 or Q8_1, as `kind`
/// takes) packed for the wide kernel, in this thread's buffer (kept for its next product). A verification
/// batch's 65 columns of 20 blocks take 58 KB, and packing them a small fraction of
/// the product's time, so each thread packs them for itself.
///
/// # Safety
/// `b` holds `n` columns of `k` blocks of `kind`'s column type `ldb` apart.
#[cfg(target_arch = "x86_64")]
unsafe fn with_packed(
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
unsafe fn with_packed(
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
unsafe fn wide_rows(
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
unsafe fn wide_rows(
    _: Wide,
    _: (i64, i64),
    _: (*const c_void, i64),
    _: *const c_void,
    _: (*mut f32, i64),
    _: (i64, i64),
) {
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
mod tests {
    use super::*;
    use crate::util::rng::Rng;

    extern "C" {
        /// ggml's own dot product of a Q4_1 row and a Q8_1 column (`nrc` 1).
        fn ggml_vec_dot_q4_1_q8_1(
            n: i32,
            s: *mut f32,
            bs: usize,
            x: *const c_void,
            bx: usize,
            y: *const c_void,
            by: usize,
            nrc: i32,
        );
        /// ggml's chunk counter, as a node's thread 0 sets it before its barrier.
        fn ggml_threadpool_chunk_set(threadpool: *mut c_void, value: i32);
    }

    /// A thread pool of one thread (no workers), for its chunk counter.
    struct Pool(*mut sys::ggml_threadpool);

    impl Pool {
        fn new() -> Pool {
            // SAFETY: default parameters for one thread; freed in `drop`.
            Pool(unsafe {
                let mut params = sys::ggml_threadpool_params_default(1);
                sys::ggml_threadpool_new(&mut params)
            })
        }
    }

    impl Drop for Pool {
        fn drop(&mut self) {
            // SAFETY: made by `ggml_threadpool_new`, freed once.
            unsafe { sys::ggml_threadpool_free(self.0) };
        }
    }

    /// ggml's compute params for thread `ith` of `nth`, with the work buffer at `wdata`
    /// and `pool`'s counter (null: none).
    fn params(
        ith: i32,
        nth: i32,
        wdata: *const u8,
        pool: *mut sys::ggml_threadpool,
    ) -> ComputeParams {
        ComputeParams {
            ith,
            nth,
            wsize: 0,
            wdata: wdata.cast_mut().cast(),
            threadpool: pool.cast(),
        }
    }

    /// ggml's `block_q4_1` and `block_q8_1`, as bytes.
    const Q4_1_BYTES: usize = 20;
    const Q8_1_BYTES: usize = 36;

    fn half(rng: &mut Rng, scale: f32) -> [u8; 2] {
        // SAFETY: a pure conversion.
        unsafe { sys::ggml_fp32_to_fp16(rng.unit() * scale) }.to_le_bytes()
    }

    /// `count` blocks of `bytes` bytes: two F16 numbers, then random quants.
    fn blocks(rng: &mut Rng, count: usize, bytes: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(count * bytes);
        for _ in 0..count {
            out.extend(half(rng, 0.05));
            out.extend(half(rng, 2.0));
            out.extend((4..bytes).map(|_| rng.next() as u8));
        }
        out
    }

    #[test]
    fn the_q4_1_kernel_computes_every_element_as_ggml_does_for_any_column_count() {
        let types = (GGML_TYPE_Q4_1, GGML_TYPE_Q8_1, GGML_TYPE_F32);
        if !ggml_ready() {
            return;
        }
        let pool = Pool::new();
        let mut rng = Rng(0x0004_0001);
        // Rows not a multiple of the threads, columns on both sides of the tile of 4,
        // inner dimensions of SmolLM2 (18 and 48 blocks) and one past the limit; 777
        // rows make 13 chunks, enough to hand out to up to three threads.
        for (m, k) in [(7, 18), (33, 48), (5, 1), (3, 1025), (777, 18)] {
            let lda = k + 1;
            let a = blocks(&mut rng, m * lda, Q4_1_BYTES);
            // Past the tile of 4, the wide kernel's groups of 16, full and partial.
            for n in [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 40] {
                let ldb = k + 2;
                let b = blocks(&mut rng, n * ldb, Q8_1_BYTES);
                let ldc = m + 3;
                let mut want = vec![f32::NAN; n * ldc];
                for j in 0..n {
                    for i in 0..m {
                        // SAFETY: row `i` and column `j` hold `k` blocks each.
                        unsafe {
                            ggml_vec_dot_q4_1_q8_1(
                                (k * 32) as i32,
                                &mut want[j * ldc + i],
                                0,
                                a[i * lda * Q4_1_BYTES..].as_ptr().cast(),
                                0,
                                b[j * ldb * Q8_1_BYTES..].as_ptr().cast(),
                                0,
                                1,
                            )
                        };
                    }
                }
                // Fixed shares (the columns elsewhere than the work buffer), then rows
                // handed out from the counter by threads running at once (the columns
                // at the start of the work buffer, as a node's first call has them).
                // Every instruction set the CPU runs, and the wide kernel.
                let runs = kernel_sets().into_iter().flat_map(|set| {
                    [1, 2, 3]
                        .into_iter()
                        .flat_map(move |t| [(set, t, false), (set, t, true)])
                });
                for ((isa, wide), nth, chunked) in runs {
                    let (wdata, counter) = if chunked {
                        // SAFETY: the pool's counter, set as ggml's thread 0 sets it.
                        unsafe { ggml_threadpool_chunk_set(pool.0.cast(), nth) };
                        (b.as_ptr(), pool.0)
                    } else {
                        (std::ptr::null(), std::ptr::null_mut())
                    };
                    let mut got = vec![f32::NAN; n * ldc];
                    let out = got.as_mut_ptr() as usize;
                    let done: Vec<bool> = std::thread::scope(|scope| {
                        let threads: Vec<_> = (0..nth)
                            .map(|ith| {
                                let (a, b) = (&a, &b);
                                let p = SendParams(params(ith, nth, wdata, counter));
                                scope.spawn(move || {
                                    // The whole wrapper moves in (a closure would
                                    // capture only the field, which is not `Send`).
                                    let p = p;
                                    // SAFETY: `m` rows of `k` blocks `lda` apart, `n`
                                    // columns of `k` blocks `ldb` apart, room for `n`
                                    // columns `ldc` apart; threads write other rows.
                                    unsafe {
                                        batch_with(
                                            (isa, wide),
                                            std::ptr::from_ref(&p.0).cast(),
                                            (m as i64, n as i64, k as i64),
                                            (a.as_ptr().cast(), lda as i64),
                                            (b.as_ptr().cast(), ldb as i64),
                                            (out as *mut c_void, ldc as i64),
                                            types,
                                        )
                                    }
                                })
                            })
                            .collect();
                        threads.into_iter().map(|t| t.join().unwrap()).collect()
                    });
                    let case = format!(
                        "{isa:?} wide {wide} m {m} k {k} n {n} threads {nth} chunked {chunked}"
                    );
                    // The wide kernel keeps no columns' scales on the stack.
                    let wide = wide && Wide::of(n as i64, types).is_some();
                    if k > 1024 && !wide {
                        assert!(
                            done.iter().all(|&d| !d),
                            "{case}: over the limit it declines"
                        );
                        continue;
                    }
                    assert!(done.iter().all(|&d| d), "{case}");
                    if chunked {
                        let chunks = (m as i64 + CHUNK_ROWS - 1) / CHUNK_ROWS;
                        // SAFETY: reads the pool's counter.
                        let taken = unsafe { ggml_threadpool_chunk_add(pool.0.cast(), 0) };
                        let handed = n > 1 && chunks >= 4 * i64::from(nth);
                        assert_eq!(
                            i64::from(taken) > i64::from(nth),
                            handed,
                            "{case}: counter at {taken}"
                        );
                    }
                    for j in 0..n {
                        for i in 0..m {
                            let (g, w) = (got[j * ldc + i], want[j * ldc + i]);
                            assert_eq!(
                                g.to_bits(),
                                w.to_bits(),
                                "{case}: [{i}, {j}] {g} against ggml's {w}"
                            );
                        }
                        assert!(got[j * ldc + m..(j + 1) * ldc].iter().all(|x| x.is_nan()));
                    }
                }
                // A type pair no kernel here takes (Q4_0 weights).
                let p = params(0, 1, std::ptr::null(), std::ptr::null_mut());
                let mut c = vec![0f32; n * ldc];
                let other = (2, GGML_TYPE_Q8_0, GGML_TYPE_F32);
                // SAFETY: declined before any access.
                let done = unsafe {
                    batch(
                        std::ptr::from_ref(&p).cast(),
                        (m as i64, n as i64, k as i64),
                        (a.as_ptr().cast(), lda as i64),
                        (b.as_ptr().cast(), ldb as i64),
                        (c.as_mut_ptr().cast(), ldc as i64),
                        other,
                    )
                };
                assert!(!done);
            }
        }
    }

    /// `count` Q8_0 blocks as ggml quantizes a batch's columns: quants within
    /// [-127, 127]. (sgemm takes a column's -128 times a negative weight as -128 times
    /// its size, its sign trick wrapping; ggml's quantizer never writes -128.)
    fn q8_0_columns(rng: &mut Rng, count: usize) -> Vec<u8> {
        let mut out = blocks(rng, count, 34);
        for block in out.chunks_mut(34) {
            for q in &mut block[2..] {
                if *q == 0x80 {
                    *q = 0x81;
                }
            }
        }
        out
    }

    #[test]
    fn both_forms_of_the_wide_q8_0_kernel_give_the_same_numbers() {
        if !Isa::wide() {
            eprintln!("this CPU runs no AVX-512 VNNI: the wide kernels are not compared");
            return;
        }
        // The form this CPU runs is compared with sgemm's numbers below; the other
        // must give the very same.
        let mut rng = Rng(0x0008_0016);
        for (m, k, n) in [(130, 20, 40), (7, 18, 8), (3, 1, 17)] {
            let a = blocks(&mut rng, m * k, 34);
            let b = q8_0_columns(&mut rng, n * k);
            let [mut loads, mut shuffles] = [vec![f32::NAN; n * m], vec![f32::NAN; n * m]];
            for (form, c) in [(1, &mut loads), (0, &mut shuffles)] {
                let (m, n, k) = (m as i64, n as i64, k as i64);
                // SAFETY: `m` rows and `n` columns of `k` Q8_0 blocks, packed; room for
                // `n` columns of `m`; the CPU runs AVX-512 VNNI.
                unsafe {
                    with_packed(Wide::Q8_0, (n, k), (b.as_ptr().cast(), k), |packed| {
                        let a = a.as_ptr().cast();
                        shepherd_q8_0_wide(n, k, a, k, packed, c.as_mut_ptr(), m, 0, m, form);
                    })
                };
            }
            let bits = |c: &[f32]| c.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert!(loads.iter().all(|x| x.is_finite()), "m {m} k {k} n {n}");
            assert_eq!(bits(&loads), bits(&shuffles), "m {m} k {k} n {n}");
        }
    }

    #[test]
    fn q8_0_and_q5_0_products_of_a_few_columns_are_sgemms_and_ggmls() {
        if !ggml_ready() {
            return;
        }
        let mut rng = Rng(0x0008_0005);
        // ggml's block_q8_0 and block_q5_0, in bytes; both multiply Q8_0 columns.
        for (a_type, a_bytes) in [(GGML_TYPE_Q8_0, 34), (GGML_TYPE_Q5_0, 22)] {
            let types = (a_type, GGML_TYPE_Q8_0, GGML_TYPE_F32);
            // SAFETY: ggml's table of CPU traits, for a type it has.
            let traits = unsafe { &*sys::ggml_get_type_traits_cpu(a_type as sys::ggml_type) };
            let dot = traits.vec_dot.expect("ggml has a dot product for the type");
            // Inner dimensions of SmolLM2 (18 blocks) and Gemma 3 270M (20, 64); sgemm
            // tiles 7 and 130 rows unevenly, and past the inner limit only it runs.
            for (m, k) in [(7, 18), (130, 20), (5, 64), (1, 1), (4, 1025)] {
                let lda = k + 3;
                let a = blocks(&mut rng, m * lda, a_bytes);
                // Past Q0_COLUMNS, Q5_0 weights go through sgemm's Q8_0 kernel (any k),
                // Q8_0 weights to the wide kernel where the CPU has it (groups of 16,
                // whole and not), else to sgemm itself.
                for n in (1..=Q0_COLUMNS as usize + 1).chain([13, 16, 17, 40, 65]) {
                    let (ldb, ldc) = (k + 1, m + 2);
                    let b = q8_0_columns(&mut rng, n * ldb);
                    let case = format!("type {a_type} m {m} k {k} n {n}");
                    for (isa, wide, nth) in kernel_sets()
                        .into_iter()
                        .flat_map(|set| (1..=3).map(move |t| (set.0, set.1, t)))
                    {
                        let taken = if n as i64 > Q0_COLUMNS {
                            a_type == GGML_TYPE_Q5_0 || wide
                        } else {
                            batch_takes(k as i64)
                                || wide && a_type == GGML_TYPE_Q8_0 && n as i64 >= WIDE_COLUMNS
                        };
                        let case = format!("{case} {isa:?} wide {wide}");
                        let mut got = vec![f32::NAN; n * ldc];
                        for ith in 0..nth {
                            let p = params(ith, nth, std::ptr::null(), std::ptr::null_mut());
                            // SAFETY: `m` rows of `k` blocks `lda` apart, `n` columns of
                            // `k` blocks `ldb` apart, room for `n` columns `ldc` apart;
                            // the CPU runs `isa`.
                            let done = unsafe {
                                batch_with(
                                    (isa, wide),
                                    std::ptr::from_ref(&p).cast(),
                                    (m as i64, n as i64, k as i64),
                                    (a.as_ptr().cast(), lda as i64),
                                    (b.as_ptr().cast(), ldb as i64),
                                    (got.as_mut_ptr().cast(), ldc as i64),
                                    types,
                                )
                            };
                            assert_eq!(done, taken, "{case}");
                        }
                        if !taken {
                            continue;
                        }
                        for j in 0..n {
                            let want =
                                ggml_rows(dot, k * 32, &a, lda * a_bytes, m, &b[j * ldb * 34..]);
                            let column = &got[j * ldc..(j + 1) * ldc];
                            assert_rows_match(
                                column,
                                &want,
                                &format!("{case} column {j} threads {nth}"),
                            );
                        }
                        if n > 1 {
                            let want = sgemm(types, (m, n, k), (&a, lda), (&b, ldb), ldc);
                            let bits =
                                |c: &[f32]| c.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                            assert_eq!(bits(&got), bits(&want), "{case} threads {nth}: sgemm's");
                        }
                    }
                }
            }
        }
        // The F16 kernels round as sgemm does: only an exact column takes them.
        let f16 = (GGML_TYPE_F16, GGML_TYPE_F16, GGML_TYPE_F32);
        assert!(column_kernel(16, 64, f16, false).is_none());
        assert!(matches!(column_kernel(16, 64, f16, true), Some(Ok(_))));
    }

    /// One element of sgemm's AVX-512 F16 kernel, written out: sixteen lanes of
    /// fused multiply-adds over `a` and `b`, then `_mm512_reduce_add_ps`'s order of
    /// halves (the 256-bit halves, the 128-bit halves, lanes 0+2 and 1+3, those two).
    /// (sgemm itself cannot be called here for F16: its chunking needs ggml's pool.)
    fn sgemm_f16_element(a: &[u16], b: &[u16]) -> f32 {
        // SAFETY: pure conversions.
        let f = |h: u16| unsafe { sys::ggml_fp16_to_fp32(h) };
        let mut acc = [0f32; 16];
        for (a, b) in a.chunks(16).zip(b.chunks(16)) {
            for j in 0..16 {
                acc[j] = f(a[j]).mul_add(f(b[j]), acc[j]);
            }
        }
        let t3: Vec<f32> = (0..8).map(|j| acc[j + 8] + acc[j]).collect();
        let t6: Vec<f32> = (0..4).map(|j| t3[j + 4] + t3[j]).collect();
        (t6[0] + t6[2]) + (t6[1] + t6[3])
    }

    /// The lone F16 column (attention's products, exact) computes every element as
    /// sgemm's AVX-512 kernel does, bit for bit: short rows (K·q: sixteen at a time
    /// with one shared reduction, the rows left over one by one) and long ones (the
    /// weights' sum over the cached tokens), split among threads at any row.
    #[test]
    fn the_f16_column_is_sgemms_column_bit_for_bit() {
        if !ggml_ready() || build() != Some(Build::Avx512) {
            eprintln!("ggml is not built for AVX-512 here: its F16 column is not compared");
            return;
        }
        let mut rng = Rng(0x0016_0016);
        let f16 = (GGML_TYPE_F16, GGML_TYPE_F16, GGML_TYPE_F32);
        for (m, k) in [
            (4, 64),
            (20, 64),
            (1876, 64),
            (36, 128),
            (68, 256),
            (12, 272),
            (64, 1904),
        ] {
            let Some(Ok(kernel)) = column_kernel(m, k, f16, true) else {
                panic!("an AVX-512 build takes a lone F16 column of {k}");
            };
            let (m, k) = (m as usize, k as usize);
            let lda = k + 16;
            let mut half16 = || u16::from_le_bytes(half(&mut rng, 1.0));
            let a: Vec<u16> = (0..m * lda).map(|_| half16()).collect();
            let b: Vec<u16> = (0..k).map(|_| half16()).collect();
            let want: Vec<u32> = (0..m)
                .map(|i| sgemm_f16_element(&a[i * lda..i * lda + k], &b).to_bits())
                .collect();
            for split in [m, 7, 16, 33] {
                let mut got = vec![f32::NAN; m];
                for from in (0..m).step_by(split) {
                    let to = (from + split).min(m);
                    // SAFETY: `m` rows of `k` F16 numbers `lda` apart, a column of `k`,
                    // room for `m` results; the kernel writes rows `from..to`.
                    unsafe {
                        kernel(
                            k as i64,
                            a.as_ptr().cast(),
                            lda as i64,
                            b.as_ptr().cast(),
                            got.as_mut_ptr(),
                            from as i64,
                            to as i64,
                        )
                    };
                }
                let got: Vec<u32> = got.iter().map(|x| x.to_bits()).collect();
                assert_eq!(got, want, "m {m} k {k} rows {split} at a time");
            }
        }
    }

    /// llamafile's sgemm itself (the wrapper's `__real_`) on `n` columns, one thread:
    /// `n` columns of `m` floats, `ldc` apart, NaN between them.
    fn sgemm(
        (a_type, b_type, c_type): (i32, i32, i32),
        (m, n, k): (usize, usize, usize),
        (a, lda): (&[u8], usize),
        (b, ldb): (&[u8], usize),
        ldc: usize,
    ) -> Vec<f32> {
        let p = params(0, 1, std::ptr::null(), std::ptr::null_mut());
        let mut c = vec![f32::NAN; n * ldc];
        // SAFETY: the caller's matrices of these types and sizes; room for `n` columns.
        let done = unsafe {
            __real_llamafile_sgemm(
                std::ptr::from_ref(&p).cast(),
                m as i64,
                n as i64,
                k as i64,
                a.as_ptr().cast(),
                lda as i64,
                b.as_ptr().cast(),
                ldb as i64,
                c.as_mut_ptr().cast(),
                ldc as i64,
                a_type,
                b_type,
                c_type,
            )
        };
        assert!(done, "sgemm takes types {a_type} {b_type} for {n} columns");
        c
    }

    /// The instruction sets of the batch kernels this CPU runs (AVX2 at least, where
    /// [`ggml_ready`]); the others are named, untested.
    fn isas() -> Vec<Isa> {
        let (run, skip): (Vec<Isa>, Vec<Isa>) = [Isa::Avx2, Isa::AvxVnni, Isa::Avx512Vnni]
            .into_iter()
            .partition(|isa| isa.supported());
        if !skip.is_empty() {
            eprintln!("this CPU runs no {skip:?}: those kernels are not compared here");
        }
        run
    }

    /// The instruction sets to compare, each without the wide kernels, and the CPU's
    /// best with them where the CPU runs them.
    fn kernel_sets() -> Vec<(Isa, bool)> {
        let mut sets: Vec<(Isa, bool)> = isas().into_iter().map(|isa| (isa, false)).collect();
        if Isa::Avx512Vnni.supported() {
            sets.push((Isa::best(), true));
        } else {
            eprintln!("this CPU runs no AVX-512 VNNI: the wide kernels are not compared");
        }
        sets
    }

    /// Whether ggml computes with the kernels `lone` mirrors, its tables filled; where
    /// it does not, the wrapper never calls them (`context`'s tests check the gate on
    /// the real model) and a test has nothing to compare.
    fn ggml_ready() -> bool {
        if !enabled() {
            eprintln!("ggml is not built with the kernels lone mirrors: nothing to compare");
            return false;
        }
        // SAFETY: fills ggml's F16 table, which its dot products read; idempotent.
        unsafe { sys::ggml_cpu_init() };
        true
    }

    /// ggml's own dot product `dot` of each of `m` rows of `a` (`row` bytes apart,
    /// `n` elements each) with the column `b`, as its single-column path calls it.
    fn ggml_rows(dot: DotFn, n: usize, a: &[u8], row: usize, m: usize, b: &[u8]) -> Vec<f32> {
        (0..m)
            .map(|i| {
                let mut out = f32::NAN;
                // SAFETY: row `i` and the column hold `n` elements of the dot's types.
                unsafe {
                    dot(
                        n as i32,
                        &mut out,
                        0,
                        a[i * row..].as_ptr().cast(),
                        0,
                        b.as_ptr().cast(),
                        0,
                        1,
                    )
                };
                out
            })
            .collect()
    }

    /// ggml's dot product, as its traits hold it.
    type DotFn =
        unsafe extern "C" fn(i32, *mut f32, usize, *const c_void, usize, *const c_void, usize, i32);

    /// The first `want.len()` results are `want`'s bit for bit, and the one after them
    /// was not written.
    fn assert_rows_match(got: &[f32], want: &[f32], case: &str) {
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(
                g.to_bits(),
                w.to_bits(),
                "{case} row {i}: {g} against ggml's {w}"
            );
        }
        assert!(
            got[want.len()].is_nan(),
            "{case}: nothing written past the rows"
        );
    }

    /// `rows` rows of `n` random floats quantized to `kind` by ggml itself.
    fn quantized(rng: &mut Rng, kind: sys::ggml_type, rows: usize, n: usize) -> Vec<u8> {
        let floats: Vec<f32> = (0..rows * n).map(|_| rng.unit()).collect();
        // SAFETY: sizes of a type ggml has.
        let row = unsafe { sys::ggml_row_size(kind, n as i64) };
        let mut out = vec![0u8; rows * row];
        // SAFETY: `rows` rows of `n` floats into room for as many quantized rows; the
        // types used need no importance matrix.
        let written = unsafe {
            sys::ggml_quantize_init(kind);
            sys::ggml_quantize_chunk(
                kind,
                floats.as_ptr(),
                out.as_mut_ptr().cast(),
                0,
                rows as i64,
                n as i64,
                std::ptr::null(),
            )
        };
        assert_eq!(written, out.len());
        out
    }

    #[test]
    fn other_columns_are_ggmls_dot_products_with_the_rows_ahead_asked_for() {
        if !ggml_ready() {
            return;
        }
        let mut rng = Rng(0x0006_000e);
        // Q6_K, Q5_K, Q4_K and Q3_K (ggml repacks Q4_K only where its rows suit the
        // layout; these products come here where they do not), F16 and BF16.
        for kind in [14, 13, 12, 11, 1, 30] {
            // SAFETY: ggml's table of CPU traits, for a type it has.
            let traits = unsafe { &*sys::ggml_get_type_traits_cpu(kind) };
            let (dot, dot_type) = (traits.vec_dot.unwrap(), traits.vec_dot_type);
            // SAFETY: block size of a type ggml has.
            let block = unsafe { sys::ggml_blck_size(kind) } as usize;
            for (m, n) in [(9, 512), (70, 256), (1, 1536)] {
                // Rows one block longer than the product reads, as in a view.
                let lda = n / block + 1;
                let a = quantized(&mut rng, kind, m, n + block);
                // The column as ggml converts it, with the dot product's type's own.
                let floats: Vec<f32> = (0..n).map(|_| rng.unit()).collect();
                // SAFETY: ggml's traits and sizes for the types it has; `n` floats
                // into room for one row of the dot product's type.
                let b = unsafe {
                    let from_float = (*sys::ggml_get_type_traits_cpu(dot_type))
                        .from_float
                        .unwrap();
                    let mut b = vec![0u8; sys::ggml_row_size(dot_type, n as i64)];
                    from_float(floats.as_ptr(), b.as_mut_ptr().cast(), n as i64);
                    b
                };
                // SAFETY: sizes of a type ggml has.
                let row = unsafe { sys::ggml_row_size(kind, (n + block) as i64) };
                let want = ggml_rows(dot, n, &a, row, m, &b);
                for nth in [1, 2, 3] {
                    let mut got = vec![f32::NAN; m + 1];
                    for ith in 0..nth {
                        let p = params(ith, nth, std::ptr::null(), std::ptr::null_mut());
                        // SAFETY: `m` rows of `n / block` blocks `lda` blocks apart,
                        // one column of the dot product's type, room for `m` floats.
                        let done = unsafe {
                            dot_rows(
                                std::ptr::from_ref(&p).cast(),
                                m as i64,
                                (n / block) as i64,
                                a.as_ptr().cast(),
                                lda as i64,
                                b.as_ptr().cast(),
                                got.as_mut_ptr().cast(),
                                (kind as i32, dot_type as i32, GGML_TYPE_F32),
                            )
                        };
                        assert!(done, "type {kind}");
                    }
                    assert_rows_match(
                        &got,
                        &want,
                        &format!("type {kind} m {m} n {n} threads {nth}"),
                    );
                }
                // A column not of the dot product's type is ggml's to convert.
                let p = params(0, 1, std::ptr::null(), std::ptr::null_mut());
                // SAFETY: declined before any access.
                let done = unsafe {
                    dot_rows(
                        std::ptr::from_ref(&p).cast(),
                        m as i64,
                        (n / block) as i64,
                        a.as_ptr().cast(),
                        lda as i64,
                        b.as_ptr().cast(),
                        std::ptr::null_mut(),
                        (kind as i32, GGML_TYPE_F32, GGML_TYPE_F32),
                    )
                };
                assert!(!done || dot_type == 0, "type {kind}");
            }
        }
    }

    /// Compute params sent to a test's thread (the pointers are the test's own).
    struct SendParams(ComputeParams);

    // SAFETY: the pointers it holds outlive the scoped threads that read them.
    unsafe impl Send for SendParams {}
}
