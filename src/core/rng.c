/* core/rng.c - Philox4x32-10 (Salmon et al., SC'11) and the index mapping
 * described in rng.h. */
#include "core/rng.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void mtc_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

static inline void rng_block(uint64_t seed, uint64_t stream, uint64_t block, uint32_t out[4]) {
    uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)stream,
                       (uint32_t)(stream >> 32)};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    mtc_philox4x32_10(ctr, key, out);
}

uint32_t mtc_rng_u32(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t w[4];
    rng_block(seed, stream, index >> 2, w);
    return w[index & 3];
}

static inline float u32_to_unit(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

float mtc_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    return u32_to_unit(mtc_rng_u32(seed, stream, index));
}

static inline float box_muller(uint32_t a, uint32_t b) {
    /* u1 in (0, 1] so the log is finite; u2 in [0, 1) */
    double u1 = ((double)(a >> 8) + 1.0) * (1.0 / 16777216.0);
    double u2 = (double)(b >> 8) * (1.0 / 16777216.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

float mtc_rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t w[4];
    rng_block(seed, stream, index >> 1, w);
    return (index & 1) ? box_muller(w[2], w[3]) : box_muller(w[0], w[1]);
}

void mtc_rng_fill_normal(float *dst, size_t n, uint64_t seed, uint64_t stream, uint64_t first,
                         float mean, float std) {
    size_t k = 0;
    uint32_t w[4];
    if (n > 0 && (first & 1)) { /* odd start: take the second half of a block */
        rng_block(seed, stream, first >> 1, w);
        dst[k++] = mean + std * box_muller(w[2], w[3]);
    }
    for (; k + 1 < n; k += 2) {
        rng_block(seed, stream, (first + k) >> 1, w);
        dst[k] = mean + std * box_muller(w[0], w[1]);
        dst[k + 1] = mean + std * box_muller(w[2], w[3]);
    }
    if (k < n) dst[k] = mean + std * mtc_rng_normal(seed, stream, first + k);
}

void mtc_rng_fill_uniform(float *dst, size_t n, uint64_t seed, uint64_t stream, uint64_t first) {
    for (size_t k = 0; k < n; k++)
        dst[k] = mtc_rng_uniform(seed, stream, first + k);
}

uint64_t mtc_rng_stream_of(const char *name) {
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 1099511628211ull;
    }
    return h;
}
