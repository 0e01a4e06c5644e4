/* nn/rng_run.c - runs of counter-based uniforms for dropout masks, eight
 * Philox blocks (32 values) at a time with AVX2.
 *
 * Must equal core/rng.c's mtc_rng_uniform value for value (tested): same
 * key/counter mapping (key = seed, counter = (block lo, block hi, stream lo,
 * stream hi), value i = word i%4 of block i/4, uniform = (u32 >> 8) 2^-24).
 * Lanes hold consecutive blocks; the block's high word is computed per lane
 * so runs may cross a 2^32-block boundary. Without AVX2 it is the scalar
 * Philox from core/rng.h, one block per four values. */
#include <string.h>

#include "core/rng.h"
#include "nn/nn_internal.h"

#define U24 (1.0f / 16777216.0f)

#if defined(__AVX2__)
#include <immintrin.h>

/* out[w][lane] = word w of Philox4x32-10 of block (first_block + lane) */
static void philox8(uint32_t out[4][8], uint64_t first_block, uint64_t seed, uint64_t stream) {
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
    const __m256i odd = _mm256_set_epi32(-1, 0, -1, 0, -1, 0, -1, 0);
    for (int r = 0; r < 10; r++) {
        /* 32x32 -> 64 products: even lanes directly, odd lanes after a shift */
        __m256i pe0 = _mm256_mul_epu32(c0, m0),
                po0 = _mm256_mul_epu32(_mm256_srli_epi64(c0, 32), m0);
        __m256i pe1 = _mm256_mul_epu32(c2, m1),
                po1 = _mm256_mul_epu32(_mm256_srli_epi64(c2, 32), m1);
        __m256i hi0 = _mm256_blendv_epi8(_mm256_srli_epi64(pe0, 32), po0, odd);
        __m256i hi1 = _mm256_blendv_epi8(_mm256_srli_epi64(pe1, 32), po1, odd);
        __m256i lo0 = _mm256_mullo_epi32(c0, m0), lo1 = _mm256_mullo_epi32(c2, m1);
        __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32((int)k0));
        __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32((int)k1));
        c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    _mm256_storeu_si256((__m256i *)out[0], c0);
    _mm256_storeu_si256((__m256i *)out[1], c1);
    _mm256_storeu_si256((__m256i *)out[2], c2);
    _mm256_storeu_si256((__m256i *)out[3], c3);
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
#if defined(__AVX2__)
    uint32_t o[4][8];
    for (; k + 32 <= n; k += 32) { /* first + k is a multiple of 4 here */
        philox8(o, (first + k) >> 2, seed, stream);
        for (int l = 0; l < 8; l++)
            for (int q = 0; q < 4; q++)
                dst[k + 4 * l + q] = (float)(o[q][l] >> 8) * U24;
    }
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
    for (size_t k = 0; k < n; k++)
        dst[k] = dst[k] >= p ? scale : 0.0f;
}
