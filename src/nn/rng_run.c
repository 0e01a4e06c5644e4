/* nn/rng_run.c - runs of counter-based uniforms for dropout masks, eight
 * Philox blocks (32 values) at a time with AVX2.
 *
 * Must equal core/rng.c's mtc_rng_uniform value for value (tested): same
 * key/counter mapping (key = seed, counter = (block lo, block hi, stream lo,
 * stream hi), value i = word i%4 of block i/4, uniform = (u32 >> 8) 2^-24).
 * Lanes hold consecutive blocks; the block's high word is computed per lane
 * so runs may cross a 2^32-block boundary. With AVX-512 sixteen blocks (64
 * values) go at a time, then the AVX2 path; without AVX2 it is the scalar
 * Philox from core/rng.h, one block per four values. Every path computes
 * the same integers, so the values never depend on the path. */
#include <string.h>

#include "core/rng.h"
#include "nn/nn_internal.h"

#define U24 (1.0f / 16777216.0f)

#if defined(__AVX2__)
#include <immintrin.h>

/* dst[4 l + q] = uniform from word q of Philox4x32-10 of block first_block + l,
 * l < 8: the 32 values of 8 consecutive blocks in index order */
static void philox8_uniform(float *dst, uint64_t first_block, uint64_t seed, uint64_t stream) {
    uint32_t lo[8], hi[8];
    for (int l = 0; l < 8; l++) {
        uint64_t b = first_block + (uint64_t)l;
        lo[l] = (uint32_t)b;
        hi[l] = (uint32_t)(b >> 32);
    }
    __m256i c0 = _mm256_loadu_si256((const __m256i *)lo);
    __m256i c1 = _mm256_loadu_si256((const __m256i *)hi);
    __m256i c2 = _mm256_set1_epi32((int)(uint32_t)stream);
    __m256i c3 = _mm256_set1_epi32((int)(uint32_t)(stream >> 32));
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    const __m256i m0 = _mm256_set1_epi32((int)0xD2511F53u),
                  m1 = _mm256_set1_epi32((int)0xCD9E8D57u);
    for (int r = 0; r < 10; r++) {
        /* 32x32 -> 64 products: even lanes directly, odd lanes after a shift;
         * blend the high and low halves back into 8 lanes */
        __m256i pe0 = _mm256_mul_epu32(c0, m0),
                po0 = _mm256_mul_epu32(_mm256_srli_epi64(c0, 32), m0);
        __m256i pe1 = _mm256_mul_epu32(c2, m1),
                po1 = _mm256_mul_epu32(_mm256_srli_epi64(c2, 32), m1);
        __m256i hi0 = _mm256_blend_epi32(_mm256_srli_epi64(pe0, 32), po0, 0xAA);
        __m256i hi1 = _mm256_blend_epi32(_mm256_srli_epi64(pe1, 32), po1, 0xAA);
        __m256i lo0 = _mm256_blend_epi32(pe0, _mm256_slli_epi64(po0, 32), 0xAA);
        __m256i lo1 = _mm256_blend_epi32(pe1, _mm256_slli_epi64(po1, 32), 0xAA);
        __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32((int)k0));
        __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32((int)k1));
        c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    /* uniforms (u32 >> 8) 2^-24, then transpose lanes x words into value order:
     * value 4 l + q = word q of block l */
    const __m256 u24 = _mm256_set1_ps(U24);
    __m256 w0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(c0, 8)), u24);
    __m256 w1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(c1, 8)), u24);
    __m256 w2 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(c2, 8)), u24);
    __m256 w3 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(c3, 8)), u24);
    __m256 t0 = _mm256_unpacklo_ps(w0, w1), t1 = _mm256_unpackhi_ps(w0, w1);
    __m256 t2 = _mm256_unpacklo_ps(w2, w3), t3 = _mm256_unpackhi_ps(w2, w3);
    __m256 b04 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)); /* blocks 0 | 4 */
    __m256 b15 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2)); /* blocks 1 | 5 */
    __m256 b26 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)); /* blocks 2 | 6 */
    __m256 b37 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2)); /* blocks 3 | 7 */
    _mm256_storeu_ps(dst, _mm256_permute2f128_ps(b04, b15, 0x20));
    _mm256_storeu_ps(dst + 8, _mm256_permute2f128_ps(b26, b37, 0x20));
    _mm256_storeu_ps(dst + 16, _mm256_permute2f128_ps(b04, b15, 0x31));
    _mm256_storeu_ps(dst + 24, _mm256_permute2f128_ps(b26, b37, 0x31));
}
#endif

#if defined(__AVX512F__)
/* the same on 16 lanes: dst[4 l + q] = word q of block first_block + l, l < 16 */
static void philox16_uniform(float *dst, uint64_t first_block, uint64_t seed, uint64_t stream) {
    uint32_t lo[16], hi[16];
    for (int l = 0; l < 16; l++) {
        uint64_t b = first_block + (uint64_t)l;
        lo[l] = (uint32_t)b;
        hi[l] = (uint32_t)(b >> 32);
    }
    __m512i c0 = _mm512_loadu_si512(lo), c1 = _mm512_loadu_si512(hi);
    __m512i c2 = _mm512_set1_epi32((int)(uint32_t)stream);
    __m512i c3 = _mm512_set1_epi32((int)(uint32_t)(stream >> 32));
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    const __m512i m0 = _mm512_set1_epi32((int)0xD2511F53u),
                  m1 = _mm512_set1_epi32((int)0xCD9E8D57u);
    for (int r = 0; r < 10; r++) {
        __m512i pe0 = _mm512_mul_epu32(c0, m0),
                po0 = _mm512_mul_epu32(_mm512_srli_epi64(c0, 32), m0);
        __m512i pe1 = _mm512_mul_epu32(c2, m1),
                po1 = _mm512_mul_epu32(_mm512_srli_epi64(c2, 32), m1);
        __m512i hi0 = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(pe0, 32), po0);
        __m512i hi1 = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(pe1, 32), po1);
        __m512i lo0 = _mm512_mask_blend_epi32(0xAAAA, pe0, _mm512_slli_epi64(po0, 32));
        __m512i lo1 = _mm512_mask_blend_epi32(0xAAAA, pe1, _mm512_slli_epi64(po1, 32));
        __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32((int)k0));
        __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32((int)k1));
        c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    const __m512 u24 = _mm512_set1_ps(U24);
    __m512 w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(c0, 8)), u24);
    __m512 w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(c1, 8)), u24);
    __m512 w2 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(c2, 8)), u24);
    __m512 w3 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(c3, 8)), u24);
    /* within each 128-bit lane j: B0 = block 4j, B1 = 4j+1, B2 = 4j+2, B3 = 4j+3 */
    __m512 t0 = _mm512_unpacklo_ps(w0, w1), t1 = _mm512_unpackhi_ps(w0, w1);
    __m512 t2 = _mm512_unpacklo_ps(w2, w3), t3 = _mm512_unpackhi_ps(w2, w3);
    __m512 B0 = _mm512_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
    __m512 B1 = _mm512_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    __m512 B2 = _mm512_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
    __m512 B3 = _mm512_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    /* a 4 x 4 transpose of 128-bit lanes: output v holds blocks 4v .. 4v+3 */
    __m512 X = _mm512_shuffle_f32x4(B0, B1, _MM_SHUFFLE(1, 0, 1, 0));
    __m512 Y = _mm512_shuffle_f32x4(B2, B3, _MM_SHUFFLE(1, 0, 1, 0));
    __m512 Xh = _mm512_shuffle_f32x4(B0, B1, _MM_SHUFFLE(3, 2, 3, 2));
    __m512 Yh = _mm512_shuffle_f32x4(B2, B3, _MM_SHUFFLE(3, 2, 3, 2));
    _mm512_storeu_ps(dst, _mm512_shuffle_f32x4(X, Y, _MM_SHUFFLE(2, 0, 2, 0)));
    _mm512_storeu_ps(dst + 16, _mm512_shuffle_f32x4(X, Y, _MM_SHUFFLE(3, 1, 3, 1)));
    _mm512_storeu_ps(dst + 32, _mm512_shuffle_f32x4(Xh, Yh, _MM_SHUFFLE(2, 0, 2, 0)));
    _mm512_storeu_ps(dst + 48, _mm512_shuffle_f32x4(Xh, Yh, _MM_SHUFFLE(3, 1, 3, 1)));
}
#endif

static void block1(uint32_t w[4], uint64_t block, uint64_t seed, uint64_t stream) {
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)stream,
                       (uint32_t)(stream >> 32)};
    mtc_philox4x32_10(ctr, key, w);
}

void nn_rng_uniform_run(float *dst, size_t n, uint64_t seed, uint64_t stream, uint64_t first) {
    size_t k = 0;
    uint32_t w[4];
    if (n > 0 && (first & 3)) { /* head: finish the first block */
        block1(w, first >> 2, seed, stream);
        for (unsigned q = (unsigned)(first & 3); q < 4 && k < n; q++, k++)
            dst[k] = (float)(w[q] >> 8) * U24;
    }
#if defined(__AVX512F__)
    for (; k + 64 <= n; k += 64) /* first + k is a multiple of 4 here */
        philox16_uniform(dst + k, (first + k) >> 2, seed, stream);
#endif
#if defined(__AVX2__)
    for (; k + 32 <= n; k += 32)
        philox8_uniform(dst + k, (first + k) >> 2, seed, stream);
#endif
    while (k < n) {
        block1(w, (first + k) >> 2, seed, stream);
        for (unsigned q = 0; q < 4 && k < n; q++, k++)
            dst[k] = (float)(w[q] >> 8) * U24;
    }
}

void nn_dropout_scale_run(float *dst, size_t n, const nn_dropout_spec *s, uint64_t first) {
    nn_rng_uniform_run(dst, n, s->seed, s->stream, first);
    float p = s->p, scale = 1.0f / (1.0f - s->p);
    nn_v8 pv = NN_V8_SET1(p);
    nn_v8i sv = (nn_v8i)NN_V8_SET1(scale);
    size_t k = 0;
    for (; k + 8 <= n; k += 8) /* the comparison gives all-ones lanes where kept */
        NN_V8_ST(dst + k, (nn_v8)((NN_V8_LD(dst + k) >= pv) & sv));
    for (; k < n; k++)
        dst[k] = dst[k] >= p ? scale : 0.0f;
}
