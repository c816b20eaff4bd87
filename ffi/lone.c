/* Matrix products computed the same way for any number of columns (see
 * src/llama/lone.rs, which calls these, for why): a lone token's as llamafile's sgemm
 * computes each column of a batch, and Q4_1 weights' for every column count as
 * ggml's own dot product computes each element. For Q8_0 and Q5_0 weights sgemm's
 * columns and ggml's dot product are the same computation, so their kernels serve
 * products of a few columns, a lone token's included. The weight kernels ask for the
 * row PREFETCH_BYTES ahead as they go, which ggml's do not; that is where they gain.
 *
 * Each function mirrors one of the AVX2 kernels in ggml-cpu/llamafile/sgemm.cpp or
 * ggml-cpu/arch/x86/quants.c (llama.cpp, MIT licence): the same intrinsics in the
 * same order per output element, so the result is bit for bit ggml's. The batch
 * kernels sum byte products with AVX-VNNI's or AVX-512 VNNI's dpbusd where the CPU
 * has them, as ggml's own kernels do where built for them: the same exact integer
 * sums (updot). Always compiled with optimisation (build.rs), whatever the Rust
 * profile, and with contraction off, so that the compiler fuses nothing sgemm does not
 * fuse. Loops over a tile's columns are unrolled by pragma: rolled, GCC kept the four
 * accumulators in memory, and a Q8_0 product of four columns took 1.2x (AVX2) to
 * 1.8x (VNNI) as long. A call computes the rows `from..to` of the result it is given:
 * src/llama/lone.rs hands each thread its rows, in chunks as ggml hands out its own;
 * there is no barrier (ggml puts one after every node).
 */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* How far ahead of the block it multiplies a kernel asks for a row's weights: on a
 * 2-core Intel Xeon VM (SmolLM2 Q4_1 tg128, paired) 1024 bytes decoded 1.18x as fast
 * as none, 2048 1.07x as fast again, 4096 no faster, 512 slower. The hardware's
 * prefetchers do not keep a decode step's weights coming there. A prefetch is a hint:
 * it changes no result, and one past the matrix never faults. */
#define PREFETCH_BYTES 2048

/* The builtin, not _mm_prefetch: GCC 12 dropped every _mm_prefetch in this file at -O1
 * and above once it was called through this function (a file of a few lines keeps
 * them). Read access, kept in every cache level: what _mm_prefetch's T0 asks. */
static inline void prefetch(const void *p) {
    __builtin_prefetch((const char *)p + PREFETCH_BYTES, 0, 3);
}

/* Asks for every cache line of the `len` bytes at `p`. */
static inline void prefetch_bytes(const void *p, size_t len) {
    const char *end = (const char *)p + len;
    for (const char *line = (const char *)((uintptr_t)p & ~(uintptr_t)63); line < end; line += 64) {
        __builtin_prefetch(line, 0, 3);
    }
}

/* ggml's block_q8_0: an F16 scale and 32 signed bytes. */
typedef struct {
    uint16_t d;
    int8_t qs[32];
} block_q8_0;

/* sgemm's hsum(__m256): the halves added, then hsum(__m128) as with AVX. */
static inline float hsum(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

static inline float half(uint16_t h) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

/* ggml's block_q5_0: an F16 scale, the quants' fifth bits, 32 four-bit quants. */
typedef struct {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[16];
} block_q5_0;

/* Sixteen bytes of nibbles as 32 bytes: the low nibbles, then the high ones
 * (sgemm's denibble, ggml's bytes_from_nibbles_32). */
static inline __m256i denibble(const uint8_t *p) {
    const __m128i x = _mm_loadu_si128((const __m128i *)p);
    return _mm256_and_si256(_mm256_set1_epi8(15),
                            _mm256_insertf128_si256(_mm256_castsi128_si256(x), _mm_srli_epi16(x, 4), 1));
}

/* A Q5_0 block's quants as signed bytes: each nibble, minus 16 where its fifth bit
 * is clear (sgemm's bittobyte, ggml's bytes_from_bits_32 and andnot). */
static inline __m256i q5_0_bytes(const block_q5_0 *b) {
    uint32_t x32;
    memcpy(&x32, b->qh, sizeof(x32));
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x32),
                                        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                          0x0101010101010101, 0x0000000000000000));
    bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    const __m256i set = _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
    return _mm256_or_si256(denibble(b->qs), _mm256_andnot_si256(set, _mm256_set1_epi8((char)0xF0)));
}

/* tinyBLAS<8, __m256, __m256, ggml_fp16_t, ggml_fp16_t, float> for one column:
 * eight elements at a time widened to F32, fma(a, b, acc); k is a multiple of 8. */
void shepherd_lone_f16(int64_t k, const uint16_t *a, int64_t lda,
                       const uint16_t *b, float *c, int64_t from, int64_t to) {
    for (int64_t i = from; i < to; i++) {
        const uint16_t *row = a + lda * i;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t l = 0; l < k; l += 8) {
            const __m256 av = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + l)));
            const __m256 bv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + l)));
            acc = _mm256_fmadd_ps(av, bv, acc);
        }
        c[i] = hsum(acc);
    }
}

/* Sixteen rows' _mm512_reduce_add_ps at once: each row's sum adds the same pairs in
 * the same order as GCC's header does one register (the 256-bit halves, then the
 * 128-bit halves, then lanes 0+2 and 1+3, then those two), so every sum is the one
 * reduce_add would give; lane r of the result is acc[r]'s. */
__attribute__((target("avx512f")))
static inline __m512 reduce_add16(const __m512 *acc) {
    __m512 s[8], r[4], p[2];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        s[j] = _mm512_add_ps(_mm512_shuffle_f32x4(acc[2 * j], acc[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(acc[2 * j], acc[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        r[j] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * j], s[2 * j + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(s[2 * j], s[2 * j + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    }
#pragma GCC unroll 2
    for (int j = 0; j < 2; j++) {
        p[j] = _mm512_add_ps(_mm512_shuffle_ps(r[2 * j], r[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(r[2 * j], r[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    }
    const __m512 q = _mm512_add_ps(_mm512_shuffle_ps(p[0], p[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(p[0], p[1], _MM_SHUFFLE(3, 1, 3, 1)));
    /* Element 4L + j of q is row 4j + L's sum. */
    return _mm512_permutexvar_ps(_mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0), q);
}

/* The same for ggml built with AVX-512 (GGML_NATIVE on such a CPU), where sgemm takes
 * tinyBLAS<16, __m512, __m512, ggml_fp16_t, ggml_fp16_t, float>: sixteen elements at a
 * time, fma(a, b, acc) into one 16-lane accumulator, then hsum(__m512), which is
 * _mm512_reduce_add_ps (the header's own order of halves); k is a multiple of 16.
 * Rows go sixteen at a time: each chunk of the column widened once for all sixteen,
 * sixteen accumulators, one shared reduction (reduce_add16); the same numbers. Both of
 * attention's products gain: K·q (a short row per cached token, where the reduction
 * was most of the work) and the weights' sum over the cached tokens (64 long rows,
 * where the column was widened again for every row).
 * Compiled for AVX-512 here only; called only where ggml was built for it. */
__attribute__((target("avx512f,f16c,fma")))
void shepherd_lone_f16_avx512(int64_t k, const uint16_t *a, int64_t lda,
                              const uint16_t *b, float *c, int64_t from, int64_t to) {
    /* Unrolled, so that the sixteen accumulators stay in registers (at -O2 GCC keeps
     * them in memory: an FMA from and a store to the stack each). */
    for (; from + 16 <= to; from += 16) {
        __m512 acc[16];
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) {
            acc[j] = _mm512_setzero_ps();
        }
        for (int64_t l = 0; l < k; l += 16) {
            const __m512 bv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + l)));
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++) {
                const uint16_t *row = a + lda * (from + j) + l;
                acc[j] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)row)), bv, acc[j]);
            }
        }
        _mm512_storeu_ps(c + from, reduce_add16(acc));
    }
    for (int64_t i = from; i < to; i++) {
        const uint16_t *row = a + lda * i;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t l = 0; l < k; l += 16) {
            const __m512 av = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + l)));
            const __m512 bv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + l)));
            acc = _mm512_fmadd_ps(av, bv, acc);
        }
        c[i] = _mm512_reduce_add_ps(acc);
    }
}

/* ggml's block_q4_1 (an F16 scale and minimum, 32 four-bit quants) and block_q8_1
 * (an F16 scale, the F16 sum of its quants times the scale, 32 signed bytes). */
typedef struct {
    uint16_t d;
    uint16_t m;
    uint8_t qs[16];
} block_q4_1;

typedef struct {
    uint16_t d;
    uint16_t s;
    int8_t qs[32];
} block_q8_1;

/* The longest inner dimension the batch kernels (shepherd_q4_1, shepherd_q8_0,
 * shepherd_q5_0) take, in blocks (32,768 elements), for their columns' scales on the
 * stack; beyond it ggml's own kernels run (the same numbers, more slowly). Exported
 * so that src/llama/lone.rs asks before it takes chunks of ggml's counter. */
#define MAX_BLOCKS 1024
const int64_t shepherd_max_blocks = MAX_BLOCKS;

/* Columns j0.. of a batch, at most four: their indices into col (the missing ones
 * repeat column j0, never read); returns how many there are. */
static inline int column_group(int64_t n, int64_t j0, int64_t *col) {
    const int nc = n - j0 < 4 ? (int)(n - j0) : 4;
    for (int j = 0; j < 4; j++) {
        col[j] = j0 + (j < nc ? j : 0);
    }
    return nc;
}

/* The instruction sets the batch kernels run with, each kernel's first argument
 * (src/llama/lone.rs chooses the CPU's best once): AVX2 alone, or with AVX-VNNI or
 * AVX-512 VNNI, whose dpbusd sums a lane's four byte products in one instruction. */
enum { AVX2, AVX_VNNI, AVX512_VNNI };

/* Whether this CPU has `isa` (and the OS keeps its registers). */
int shepherd_isa_supported(int isa) {
    __builtin_cpu_init();
    switch (isa) {
    case AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case AVX_VNNI: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avxvnni");
    case AVX512_VNNI:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512vnni") &&
               __builtin_cpu_supports("avx512vl");
    default: return 0;
    }
}

/* The sum of each 32-bit lane's four products of an unsigned byte of u and a signed
 * byte of s (sgemm's updot and ggml's mul_sum_us8_pairs before the conversion to
 * float). With AVX2 the bytes' products are added in pairs into 16 bits, which
 * saturates nowhere on the kernels' inputs (u at most 128 in the Q8_0 and Q5_0
 * kernels, 15 in the Q4_1 one: a pair's sum lies in [-32768, 32512]), so every
 * instruction set gives the same exact sums, as ggml's own kernels rely on. dpbusd is
 * written in assembly (`%{vex%}`: GCC's escaped braces): its intrinsic needs its
 * instruction set for the whole function it is inlined into, and the kernels are one
 * source for all three. */
static inline __attribute__((always_inline)) __m256i updot(int isa, __m256i u, __m256i s) {
    if (isa == AVX2) {
        return _mm256_madd_epi16(_mm256_set1_epi16(1), _mm256_maddubs_epi16(u, s));
    }
    __m256i sum = _mm256_setzero_si256();
    if (isa == AVX_VNNI) {
        __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(sum) : "x"(u), "x"(s));
    } else {
        __asm__("%{evex%} vpdpbusd %2, %1, %0" : "+x"(sum) : "x"(u), "x"(s));
    }
    return sum;
}

/* ggml_vec_dot_q4_1_q8_1 (ggml-cpu/arch/x86/quants.c, AVX2) for rows `from..to` of
 * `a` against `nc` columns of `b` at once, the row's quants unpacked once for all.
 * Per output element exactly ggml's operations in ggml's order: per block
 * acc = fma(d_a * d_b, float(sum of byte products), acc) and
 * summs = fma(m_a, s_b, summs) (ggml's compiled code fuses that line), then
 * hsum(acc) + summs (m_a * s_b, two F16 numbers, is exact in F32 anyway). `d1` and
 * `s1` hold the columns' scales and sums as floats, four per block. Every step is
 * per element; the columns only share the unpacked row. */
static inline __attribute__((always_inline)) void q4_1_tile(
    int isa, int nc, int64_t from, int64_t to, int64_t k, const block_q4_1 *a, int64_t lda,
    const block_q8_1 *const *cols, const float *d1, const float *s1, float *const *out) {
    for (int64_t i = from; i < to; i++) {
        const block_q4_1 *row = a + lda * i;
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                         _mm256_setzero_ps()};
        __m128 summs = _mm_setzero_ps();
        for (int64_t l = 0; l < k; l++) {
            prefetch(row + l);
            const __m256i qx = denibble(row[l].qs);
            const __m256 d0 = _mm256_set1_ps(half(row[l].d));
            summs = _mm_fmadd_ps(_mm_set1_ps(half(row[l].m)), _mm_loadu_ps(s1 + 4 * l), summs);
#pragma GCC unroll 4
            for (int j = 0; j < nc; j++) {
                const __m256i qy = _mm256_loadu_si256((const __m256i *)cols[j][l].qs);
                const __m256 xy = _mm256_cvtepi32_ps(updot(isa, qx, qy));
                const __m256 d0d1 = _mm256_mul_ps(d0, _mm256_broadcast_ss(d1 + 4 * l + j));
                acc[j] = _mm256_fmadd_ps(d0d1, xy, acc[j]);
            }
        }
        float sums[4];
        _mm_storeu_ps(sums, summs);
        for (int j = 0; j < nc; j++) {
            out[j][i] = hsum(acc[j]) + sums[j];
        }
    }
}

/* c = a · b for Q4_1 weights `a` (m rows of k blocks, lda blocks apart) and n
 * columns of Q8_1 blocks `b` (ldb blocks apart) into c (columns ldc floats apart),
 * each element exactly as ggml_vec_dot_q4_1_q8_1 computes it, whatever n is.
 * Computes rows `from..to` of c. Returns 0, computing nothing, when k is over
 * MAX_BLOCKS. */
static inline __attribute__((always_inline)) int q4_1(
    int isa, int64_t n, int64_t k, const block_q4_1 *a, int64_t lda, const block_q8_1 *b,
    int64_t ldb, float *c, int64_t ldc, int64_t from, int64_t to) {
    if (k > MAX_BLOCKS) {
        return 0;
    }
    float d1[4 * MAX_BLOCKS];
    float s1[4 * MAX_BLOCKS];
    for (int64_t j0 = 0; j0 < n; j0 += 4) {
        int64_t col[4];
        const int nc = column_group(n, j0, col);
        const block_q8_1 *cols[4] = {b + ldb * col[0], b + ldb * col[1], b + ldb * col[2], b + ldb * col[3]};
        float *out[4] = {c + ldc * col[0], c + ldc * col[1], c + ldc * col[2], c + ldc * col[3]};
        for (int64_t l = 0; l < k; l++) {
            for (int j = 0; j < 4; j++) {
                d1[4 * l + j] = half(cols[j][l].d);
                s1[4 * l + j] = half(cols[j][l].s);
            }
        }
        switch (nc) {
        case 4: q4_1_tile(isa, 4, from, to, k, a, lda, cols, d1, s1, out); break;
        case 3: q4_1_tile(isa, 3, from, to, k, a, lda, cols, d1, s1, out); break;
        case 2: q4_1_tile(isa, 2, from, to, k, a, lda, cols, d1, s1, out); break;
        default: q4_1_tile(isa, 1, from, to, k, a, lda, cols, d1, s1, out); break;
        }
    }
    return 1;
}

int shepherd_q4_1(int isa, int64_t n, int64_t k, const block_q4_1 *a, int64_t lda,
                  const block_q8_1 *b, int64_t ldb, float *c, int64_t ldc, int64_t from,
                  int64_t to) {
    switch (isa) {
    case AVX_VNNI: return q4_1(AVX_VNNI, n, k, a, lda, b, ldb, c, ldc, from, to);
    case AVX512_VNNI: return q4_1(AVX512_VNNI, n, k, a, lda, b, ldb, c, ldc, from, to);
    default: return q4_1(AVX2, n, k, a, lda, b, ldb, c, ldc, from, to);
    }
}

/* tinyBLAS_Q0_AVX<block_q8_0 or block_q5_0, block_q8_0, float> (every tile shape:
 * gemm, gemm4xN, gemmMx4), which is also ggml_vec_dot_q8_0_q8_0 and
 * ggml_vec_dot_q5_0_q8_0 (AVX2), for rows `from..to` of `a` against `nc` columns at
 * once, the row's block unpacked once for all. Per element and block:
 * updot(|a|, sign(b, a)) (exact sums of four byte products per lane, however the CPU
 * computes them), then fma(scale_a * scale_b, dot, acc); then hsum. `d1` holds the
 * columns' scales as floats, four per block. `isa`, `q5` and `nc` are constants
 * where it is inlined. */
static inline __attribute__((always_inline)) void q0_tile(
    int isa, int q5, int nc, int64_t from, int64_t to, int64_t k, const void *a, int64_t lda,
    const block_q8_0 *const *cols, const float *d1, float *const *out) {
    for (int64_t i = from; i < to; i++) {
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                         _mm256_setzero_ps()};
        for (int64_t l = 0; l < k; l++) {
            __m256i av;
            float d;
            if (q5) {
                const block_q5_0 *block = (const block_q5_0 *)a + lda * i + l;
                prefetch(block);
                av = q5_0_bytes(block);
                d = half(block->d);
            } else {
                const block_q8_0 *block = (const block_q8_0 *)a + lda * i + l;
                prefetch(block);
                av = _mm256_loadu_si256((const __m256i *)block->qs);
                d = half(block->d);
            }
            const __m256i ua = _mm256_sign_epi8(av, av);
#pragma GCC unroll 4
            for (int j = 0; j < nc; j++) {
                const __m256i bv = _mm256_loadu_si256((const __m256i *)cols[j][l].qs);
                const __m256 dot = _mm256_cvtepi32_ps(updot(isa, ua, _mm256_sign_epi8(bv, av)));
                acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * d1[4 * l + j]), dot, acc[j]);
            }
        }
        for (int j = 0; j < nc; j++) {
            out[j][i] = hsum(acc[j]);
        }
    }
}

/* c = a · b for Q8_0 (q5 0) or Q5_0 (q5 1) weights `a` (m rows of k blocks, lda
 * blocks apart) and n columns of Q8_0 blocks `b` (ldb blocks apart) into c (columns
 * ldc floats apart), each element exactly as sgemm and ggml's dot product compute it,
 * whatever n is. Rows `from..to` of c; 0, computing nothing, when k is over
 * MAX_BLOCKS. */
static inline __attribute__((always_inline)) int q0(
    int isa, int q5, int64_t n, int64_t k, const void *a, int64_t lda, const block_q8_0 *b,
    int64_t ldb, float *c, int64_t ldc, int64_t from, int64_t to) {
    if (k > MAX_BLOCKS) {
        return 0;
    }
    float d1[4 * MAX_BLOCKS];
    for (int64_t j0 = 0; j0 < n; j0 += 4) {
        int64_t col[4];
        const int nc = column_group(n, j0, col);
        const block_q8_0 *cols[4] = {b + ldb * col[0], b + ldb * col[1], b + ldb * col[2], b + ldb * col[3]};
        float *out[4] = {c + ldc * col[0], c + ldc * col[1], c + ldc * col[2], c + ldc * col[3]};
        for (int64_t l = 0; l < k; l++) {
            for (int j = 0; j < 4; j++) {
                d1[4 * l + j] = half(cols[j][l].d);
            }
        }
        switch (nc) {
        case 4: q0_tile(isa, q5, 4, from, to, k, a, lda, cols, d1, out); break;
        case 3: q0_tile(isa, q5, 3, from, to, k, a, lda, cols, d1, out); break;
        case 2: q0_tile(isa, q5, 2, from, to, k, a, lda, cols, d1, out); break;
        default: q0_tile(isa, q5, 1, from, to, k, a, lda, cols, d1, out); break;
        }
    }
    return 1;
}

static inline __attribute__((always_inline)) int q0_isa(
    int isa, int q5, int64_t n, int64_t k, const void *a, int64_t lda, const block_q8_0 *b,
    int64_t ldb, float *c, int64_t ldc, int64_t from, int64_t to) {
    switch (isa) {
    case AVX_VNNI: return q0(AVX_VNNI, q5, n, k, a, lda, b, ldb, c, ldc, from, to);
    case AVX512_VNNI: return q0(AVX512_VNNI, q5, n, k, a, lda, b, ldb, c, ldc, from, to);
    default: return q0(AVX2, q5, n, k, a, lda, b, ldb, c, ldc, from, to);
    }
}

int shepherd_q8_0(int isa, int64_t n, int64_t k, const void *a, int64_t lda,
                  const block_q8_0 *b, int64_t ldb, float *c, int64_t ldc, int64_t from,
                  int64_t to) {
    return q0_isa(isa, 0, n, k, a, lda, b, ldb, c, ldc, from, to);
}

int shepherd_q5_0(int isa, int64_t n, int64_t k, const void *a, int64_t lda,
                  const block_q8_0 *b, int64_t ldb, float *c, int64_t ldc, int64_t from,
                  int64_t to) {
    return q0_isa(isa, 1, n, k, a, lda, b, ldb, c, ldc, from, to);
}

/* Rows `from..to` of Q5_0 weights `a` (k blocks each, lda apart) as Q8_0 blocks into
 * `out`, k per row, row after row: each block's scale, and its quants as the signed
 * bytes sgemm's Q5_0 kernel unpacks them to before each product (q5_0_bytes), so
 * that its Q8_0 kernel (or shepherd_q8_0_wide) computes with the very numbers. */
void shepherd_q5_0_as_q8_0(int64_t k, const block_q5_0 *a, int64_t lda, block_q8_0 *out,
                           int64_t from, int64_t to) {
    for (int64_t i = from; i < to; i++) {
        for (int64_t l = 0; l < k; l++) {
            const block_q5_0 *block = a + lda * i + l;
            block_q8_0 *to_block = out + k * (i - from) + l;
            to_block->d = block->d;
            _mm256_storeu_si256((__m256i *)to_block->qs, q5_0_bytes(block));
        }
    }
}

/* Q8_0 products of many columns (a verification batch, many slots' step, a prompt)
 * with AVX-512 VNNI, each element as sgemm computes it, faster. sgemm's Q0 kernel
 * takes a tile of four rows and columns and, per pair and block, the signs of both
 * operands, one dpbusd on 32 bytes, a conversion, the scales' product broadcast and
 * an fma: about six instructions per 32 byte products (Gemma 3 270M's Q8_0 output
 * layer, 262,144 rows, is half a verification batch's time). Here sixteen columns
 * lie in a register's lanes: chunk j of a block (its bytes 4j..4j+3) of every
 * column side by side, so one dpbusd against a row's chunk, broadcast from memory,
 * sums the chunk's four products for all sixteen columns. That partial sum is what
 * lane j of sgemm's 8-lane accumulator gets for the block, and it goes through the
 * same conversion and fma(scale_a * scale_b, partial, acc_j), then sgemm's
 * horizontal sum of the eight lanes, ((0+4)+(2+6))+((1+5)+(3+7)): bit for bit
 * sgemm's. dpbusd multiplies unsigned bytes by signed ones, so the packed columns'
 * bytes are stored plus 128 (their top bit flipped) and each of a row's chunks
 * starts its sum at -128 times the chunk's sum (one dpbusd per row and block finds
 * all eight): exact integers either way. Three instructions per chunk, row and
 * sixteen columns: dpbusd, the conversion and the fma. */

/* A block of sixteen packed columns: chunk j of each column's block (q[j]: column c's
 * four bytes at 4c; Q8_0 columns' plus 128, Q8_1 columns' as they are), and the
 * columns' F16 scales as floats (and, for Q8_1 columns, their F16 sums). Columns past
 * the product's are zero. */
#define WIDE 16
typedef struct {
    uint8_t q[8][4 * WIDE];
    float d[WIDE];
    float s[WIDE];
} wide_block;
const int64_t shepherd_wide_block_bytes = sizeof(wide_block);

/* Packs n columns of k blocks (ldb apart) for shepherd_q8_0_wide (Q8_0 columns, q8_1
 * 0) or shepherd_q4_1_wide (Q8_1 columns, q8_1 1): group g (columns 16g..16g+15),
 * block l at out[g * k + l]. */
void shepherd_wide_pack(int q8_1, int64_t n, int64_t k, const void *b, int64_t ldb,
                        wide_block *out) {
    const int64_t groups = (n + WIDE - 1) / WIDE;
    const size_t block = q8_1 ? sizeof(block_q8_1) : sizeof(block_q8_0);
    memset(out, 0, sizeof(wide_block) * (size_t)(groups * k));
    for (int64_t col = 0; col < n; col++) {
        const int c = (int)(col % WIDE);
        for (int64_t l = 0; l < k; l++) {
            const uint8_t *src = (const uint8_t *)b + block * (size_t)(ldb * col + l);
            const uint8_t *qs = src + block - 32;
            uint16_t d;
            memcpy(&d, src, sizeof(d));
            wide_block *w = out + (col / WIDE) * k + l;
            w->d[c] = half(d);
            if (q8_1) {
                uint16_t sum;
                memcpy(&sum, src + 2, sizeof(sum));
                w->s[c] = half(sum);
            }
            for (int j = 0; j < 8; j++) {
                for (int t = 0; t < 4; t++) {
                    w->q[j][4 * c + t] = (uint8_t)(q8_1 ? qs[4 * j + t] : qs[4 * j + t] ^ 0x80);
                }
            }
        }
    }
}

#define WIDE_TARGET "avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c"

/* Rows r[0..nr) (nr 1 or 2) against one group of packed columns `w` (k blocks):
 * res[r] gets the sixteen sums. The group's chunk is loaded once for both rows.
 *
 * The rows are Q8_0 blocks, or Q4_1 blocks where q4: those are
 * ggml_vec_dot_q4_1_q8_1's operations (AVX2) sixteen columns at once, as q4_1_tile's
 * are four at once. A Q4_1 block's nibbles, unpacked as denibble does, are unsigned,
 * dpbusd's side as in ggml's own kernel, and the columns its signed side as they are:
 * no correction. The scales go in as d_a * d_b, the minimum as fma(m_a, s_b, summs),
 * and the result is its hsum(acc) + summs.
 *
 * A Q8_0 chunk's sum starts at its correction, broadcast from the stack where
 * `loads` (an Intel Xeon, Emerald Rapids: its one 512-bit shuffle port is busy
 * enough) or taken from its register by GCC's two shuffles (an AMD EPYC, Zen 5: 1.15x
 * as fast there, 120.8 -> 102.2 us for a 16-column product of 1,536 rows of 18
 * blocks). Every argument but k, rows, w and res is a constant where inlined. */
static inline __attribute__((always_inline, target(WIDE_TARGET))) void wide_tile(
    int q4, int loads, int nr, int64_t k, const void *const *rows, const wide_block *w,
    __m512 *res) {
    /* Every loop over the accumulators unrolled: rolled, GCC zeroed them in memory
     * (rep stos) for each tile. */
    __m512 acc[2][8];
    __m512 summs[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
#pragma GCC unroll 2
    for (int r = 0; r < 2; r++) {
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            acc[r][j] = _mm512_setzero_ps();
        }
    }
    const __m256i k128 = _mm256_set1_epi8((char)0x80);
    for (int64_t l = 0; l < k; l++) {
        __m512 sc[2];
        /* A Q8_0 row's correction for each chunk of its block. */
        int32_t fix[2][8] __attribute__((aligned(32)));
        /* A Q4_1 row's block unpacked, broadcast from here four bytes at a time. */
        int32_t unpacked[2][8] __attribute__((aligned(32)));
        const int8_t *qs[2] = {NULL, NULL};
#pragma GCC unroll 2
        for (int r = 0; r < nr; r++) {
            float d;
            if (q4) {
                const block_q4_1 *block = (const block_q4_1 *)rows[r] + l;
                prefetch(block);
                _mm256_store_si256((__m256i *)unpacked[r], denibble(block->qs));
                d = half(block->d);
                summs[r] = _mm512_fmadd_ps(_mm512_set1_ps(half(block->m)), _mm512_loadu_ps(w[l].s),
                                           summs[r]);
            } else {
                const block_q8_0 *block = (const block_q8_0 *)rows[r] + l;
                prefetch(block);
                const __m256i bytes = _mm256_loadu_si256((const __m256i *)block->qs);
                qs[r] = block->qs;
                d = half(block->d);
                /* -128 times each chunk's sum, where its sums start: the columns are
                 * stored plus 128, the unsigned side. */
                const __m256i sums = _mm256_dpbusd_epi32(_mm256_setzero_si256(), k128, bytes);
                _mm256_store_si256((__m256i *)fix[r], _mm256_sub_epi32(_mm256_setzero_si256(), sums));
            }
            sc[r] = _mm512_mul_ps(_mm512_set1_ps(d), _mm512_loadu_ps(w[l].d));
        }
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const __m512i bq = _mm512_loadu_si512((const void *)w[l].q[j]);
#pragma GCC unroll 2
            for (int r = 0; r < nr; r++) {
                /* The row's chunk broadcast from memory: a load rather than two
                 * shuffles (GCC would take an unpacked row from its register so,
                 * 1.11x as long on the EPYC). */
                __m512i t;
                if (q4) {
                    __m512i row;
                    __asm__("vpbroadcastd %1, %0" : "=v"(row) : "m"(unpacked[r][j]));
                    t = _mm512_dpbusd_epi32(_mm512_setzero_si512(), row, bq);
                } else {
                    if (loads) {
                        __asm__("vpbroadcastd %1, %0" : "=v"(t) : "m"(fix[r][j]));
                    } else {
                        t = _mm512_set1_epi32(fix[r][j]);
                    }
                    int32_t chunk;
                    memcpy(&chunk, qs[r] + 4 * j, sizeof(chunk));
                    t = _mm512_dpbusd_epi32(t, bq, _mm512_set1_epi32(chunk));
                }
                acc[r][j] = _mm512_fmadd_ps(sc[r], _mm512_cvtepi32_ps(t), acc[r][j]);
            }
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < nr; r++) {
        res[r] = _mm512_add_ps(
            _mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][4]), _mm512_add_ps(acc[r][2], acc[r][6])),
            _mm512_add_ps(_mm512_add_ps(acc[r][1], acc[r][5]), _mm512_add_ps(acc[r][3], acc[r][7])));
        if (q4) {
            res[r] = _mm512_add_ps(res[r], summs[r]);
        }
    }
}

/* Rows a call of the wide kernels multiplies by one group of columns before the
 * next group: their weights stay in cache for all the groups. */
#define WIDE_PANEL 64

/* Rows from..to of c = a · b for weights `a` (Q8_0, or Q4_1 where q4; k blocks a row,
 * lda apart) and the n columns `packed` holds, into c (columns ldc floats apart). */
static inline __attribute__((always_inline, target(WIDE_TARGET))) void wide(
    int q4, int loads, int64_t n, int64_t k, const void *a, int64_t lda, const wide_block *packed,
    float *c, int64_t ldc, int64_t from, int64_t to) {
    const int64_t groups = (n + WIDE - 1) / WIDE;
    const size_t block = q4 ? sizeof(block_q4_1) : sizeof(block_q8_0);
    for (int64_t p0 = from; p0 < to; p0 += WIDE_PANEL) {
        const int64_t p1 = p0 + WIDE_PANEL < to ? p0 + WIDE_PANEL : to;
        for (int64_t g = 0; g < groups; g++) {
            const wide_block *w = packed + g * k;
            const int nc = n - g * WIDE < WIDE ? (int)(n - g * WIDE) : WIDE;
            for (int64_t i = p0; i < p1; i += 2) {
                const int64_t i1 = i + 1 < p1 ? i + 1 : i;
                const void *rows[2] = {(const uint8_t *)a + block * (size_t)(lda * i),
                                       (const uint8_t *)a + block * (size_t)(lda * i1)};
                __m512 res[2];
                const int nr = i + 1 < p1 ? 2 : 1;
                if (nr == 2) {
                    wide_tile(q4, loads, 2, k, rows, w, res);
                } else {
                    wide_tile(q4, loads, 1, k, rows, w, res);
                }
                for (int r = 0; r < nr; r++) {
                    float out[WIDE];
                    _mm512_storeu_ps(out, res[r]);
                    for (int j = 0; j < nc; j++) {
                        c[ldc * (g * WIDE + j) + i + r] = out[j];
                    }
                }
            }
        }
    }
}

/* Rows from..to of c = a · b for Q8_0 weights `a` and the n Q8_0 columns `packed`
 * holds (shepherd_wide_pack), every element bit for bit as sgemm's Q0 kernel computes
 * it, in wide_tile's form `loads` (shepherd_wide_loads says which this CPU runs
 * faster; both give the same numbers). Call only where the CPU has AVX-512 VNNI and
 * VL. */
__attribute__((target(WIDE_TARGET)))
void shepherd_q8_0_wide(int64_t n, int64_t k, const block_q8_0 *a, int64_t lda,
                        const wide_block *packed, float *c, int64_t ldc, int64_t from,
                        int64_t to, int loads) {
    if (loads) {
        wide(0, 1, n, k, a, lda, packed, c, ldc, from, to);
    } else {
        wide(0, 0, n, k, a, lda, packed, c, ldc, from, to);
    }
}

/* The form of shepherd_q8_0_wide this CPU runs faster (wide_tile's `loads`): loads
 * but on AMD's CPUs. */
int shepherd_wide_loads(void) {
    __builtin_cpu_init();
    return !__builtin_cpu_is("amd");
}

/* The same for Q4_1 weights and n packed Q8_1 columns, every element bit for bit as
 * ggml_vec_dot_q4_1_q8_1 computes it. */
__attribute__((target(WIDE_TARGET)))
void shepherd_q4_1_wide(int64_t n, int64_t k, const block_q4_1 *a, int64_t lda,
                        const wide_block *packed, float *c, int64_t ldc, int64_t from,
                        int64_t to) {
    wide(1, 0, n, k, a, lda, packed, c, ldc, from, to);
}

/* ggml's `ggml_vec_dot_t`: one dot product of `n` elements into `*s` (nrc 1). */
typedef void (*vec_dot_t)(int n, float *s, size_t bs, const void *x, size_t bx,
                          const void *y, size_t by, int nrc);

/* Rows `from..to` of c = a · b for one column `b`, each element ggml's own dot
 * product `dot` of a row (`len` bytes, `stride` apart, `n` elements) and the column,
 * called as ggml_compute_forward_mul_mat_one_chunk calls it for a single column: the
 * same numbers. The dot product is ggml's, so the row PREFETCH_BYTES ahead is asked
 * for whole before each call rather than block by block. */
void shepherd_dot_rows(vec_dot_t dot, int n, const void *a, size_t stride, size_t len,
                       const void *b, float *c, int64_t from, int64_t to) {
    const int64_t ahead = len == 0 ? 1 : (int64_t)((PREFETCH_BYTES + len - 1) / len);
    for (int64_t i = from; i < to; i++) {
        if (i + ahead < to) {
            prefetch_bytes((const char *)a + (size_t)(i + ahead) * stride, len);
        }
        dot(n, c + i, 0, (const char *)a + (size_t)i * stride, 0, b, 0, 1);
    }
}
