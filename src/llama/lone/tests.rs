//! `lone`'s kernels against ggml's and sgemm's own, bit for bit.

use llama_cpp_sys_2 as sys;

use super::cpu::{build, Build};
use super::f16::column_kernel;
use super::ggml::*;
use super::q8_0::shepherd_q8_0_wide;
use super::sgemm::__real_llamafile_sgemm;
use super::wide::{with_packed, WIDE_COLUMNS};
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
fn params(ith: i32, nth: i32, wdata: *const u8, pool: *mut sys::ggml_threadpool) -> ComputeParams {
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
                        let want = ggml_rows(dot, k * 32, &a, lda * a_bytes, m, &b[j * ldb * 34..]);
                        let column = &got[j * ldc..(j + 1) * ldc];
                        assert_rows_match(
                            column,
                            &want,
                            &format!("{case} column {j} threads {nth}"),
                        );
                    }
                    if n > 1 {
                        let want = sgemm(types, (m, n, k), (&a, lda), (&b, ldb), ldc);
                        let bits = |c: &[f32]| c.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
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
