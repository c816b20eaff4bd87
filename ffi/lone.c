/* A lone token's matrix products, computed exactly as llamafile's sgemm computes each
 * column of a batch (see src/llama/lone.rs, which calls these, for why).
 *
 * Each function mirrors one of sgemm's AVX2 kernels in ggml-cpu/llamafile/sgemm.cpp
 * (llama.cpp, MIT licence): the same intrinsics in the same order per output element,
 * so the result is bit for bit that of sgemm's tiles. Always compiled with
 * optimisation (build.rs), whatever the Rust profile, and with contraction off, so
 * that the compiler fuses nothing sgemm does not fuse. Thread `ith` of `nth` computes
 * its own share of the rows; there is no barrier (ggml puts one after every node).
 */
#include <immintrin.h>
#include <stdint.h>

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

static void rows(int64_t m, int ith, int nth, int64_t *from, int64_t *to) {
    *from = m * ith / nth;
    *to = m * (ith + 1) / nth;
}

/* tinyBLAS_Q0_AVX<block_q8_0, block_q8_0, float> for one column: per block,
 * updot(|a|, sign(b, a)) (exact sums of four byte products per lane), then
 * fma(scale_a * scale_b, dot, acc). */
void shepherd_lone_q8_0(int64_t m, int64_t k, const block_q8_0 *a, int64_t lda,
                        const block_q8_0 *b, float *c, int ith, int nth) {
    int64_t from, to;
    rows(m, ith, nth, &from, &to);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t i = from; i < to; i++) {
        const block_q8_0 *row = a + lda * i;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t l = 0; l < k; l++) {
            const __m256i av = _mm256_loadu_si256((const __m256i *)row[l].qs);
            const __m256i bv = _mm256_loadu_si256((const __m256i *)b[l].qs);
            const __m256i prod = _mm256_maddubs_epi16(_mm256_sign_epi8(av, av), _mm256_sign_epi8(bv, av));
            const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(ones, prod));
            const __m256 scale = _mm256_set1_ps(half(row[l].d) * half(b[l].d));
            acc = _mm256_fmadd_ps(scale, dot, acc);
        }
        c[i] = hsum(acc);
    }
}

/* tinyBLAS<8, __m256, __m256, ggml_fp16_t, ggml_fp16_t, float> for one column:
 * eight elements at a time widened to F32, fma(a, b, acc); k is a multiple of 8. */
void shepherd_lone_f16(int64_t m, int64_t k, const uint16_t *a, int64_t lda,
                       const uint16_t *b, float *c, int ith, int nth) {
    int64_t from, to;
    rows(m, ith, nth, &from, &to);
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
