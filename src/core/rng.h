/* core/rng.h - counter-based random numbers (Philox4x32-10).
 *
 * A value is a pure function of (seed, stream, index): no state is carried
 * from one draw to the next. That is what makes initial weights and dropout
 * masks independent of how a tensor is sharded: a rank holding rows 64..127
 * of a weight draws exactly the numbers the serial run draws for those rows.
 *
 * Mapping used everywhere (keep it stable: checkpoints and tests rely on it):
 *   key     = (seed lo32, seed hi32)
 *   counter = (block lo32, block hi32, stream lo32, stream hi32)
 *   u32(i)     = philox(counter with block = i / 4)[i % 4]
 *   uniform(i) = (u32(i) >> 8) * 2^-24                  in [0, 1)
 *   normal(i)  = Box-Muller on words (0,1) of block i/2 when i is even,
 *                words (2,3) when i is odd; the cosine branch.
 * Does not provide a sequential generator API; callers pass indices. */
#ifndef MTC_CORE_RNG_H
#define MTC_CORE_RNG_H

#include <stddef.h>
#include <stdint.h>

void mtc_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

uint32_t mtc_rng_u32(uint64_t seed, uint64_t stream, uint64_t index);
float mtc_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);
float mtc_rng_normal(uint64_t seed, uint64_t stream, uint64_t index);

/* dst[k] = mean + std * normal(first + k) for k < n. */
void mtc_rng_fill_normal(float *dst, size_t n, uint64_t seed, uint64_t stream, uint64_t first,
                         float mean, float std);
/* dst[k] = uniform(first + k) for k < n. */
void mtc_rng_fill_uniform(float *dst, size_t n, uint64_t seed, uint64_t stream, uint64_t first);

/* Stable 64-bit id of a name (FNV-1a), for deriving streams from parameter
 * names ("h.3.attn.c_attn.weight") so they do not depend on layout. */
uint64_t mtc_rng_stream_of(const char *name);

#endif
