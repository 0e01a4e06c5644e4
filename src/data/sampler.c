/* data/sampler.c - --split weights, Megatron's split bounds, and the seeded
 * per-epoch permutation of windows.
 *
 * Split bounds follow megatron/core/datasets/utils.py _get_split_indices
 * (Python's round is round-half-even; nearbyint in the default rounding
 * mode is the same). The permutation is a pure function of
 * (seed, key, n, i): a balanced Feistel network over 2^b >= n (b even) with
 * Philox as the round function, plus cycle walking (re-encrypt until the
 * value falls in [0, n)), which keeps it a bijection of [0, n).
 * Limitations: the permutation is a good shuffle, not a uniformly random
 * one (6 Feistel rounds); that is all a data order needs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "data/data.h"

mtc_result_t data_split_parse(const char *split, double weights[3]) {
    double w[3] = {0, 0, 0};
    int n = 0;
    const char *p = split;
    if (!p || !*p)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "--split is empty (use weights like 949,50,1)");
    while (*p) {
        while (*p == ' ')
            p++;
        char *end;
        double v = strtod(p, &end);
        if (end == p || n == 3 || !(v >= 0) || isinf(v))
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "--split \"%s\": expected up to 3 non-negative weights like 949,50,1",
                             split);
        w[n++] = v;
        p = end;
        while (*p == ' ')
            p++;
        if (*p == ',' || *p == '/') {
            p++;
            if (!*p)
                return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                                 "--split \"%s\": trailing separator (use weights like 949,50,1)",
                                 split);
        } else if (*p) {
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "--split \"%s\": expected up to 3 non-negative weights like 949,50,1",
                             split);
        }
    }
    double sum = w[0] + w[1] + w[2];
    if (!(sum > 0))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "--split \"%s\": the weights sum to 0 (give the train split a weight)",
                         split);
    for (int i = 0; i < 3; i++)
        weights[i] = w[i] / sum;
    return MTC_OK;
}

void data_split_bounds(const double weights[3], uint64_t n, uint64_t bounds[4]) {
    int64_t b[4] = {0, 0, 0, 0};
    for (int i = 0; i < 3; i++)
        b[i + 1] = b[i] + (int64_t)nearbyint(weights[i] * (double)n);
    int64_t diff = b[3] - (int64_t)n;
    for (int i = 1; i < 4; i++)
        b[i] -= diff;
    /* Megatron asserts instead; clamp so bounds stay ordered inside [0, n] */
    bounds[0] = 0;
    for (int i = 1; i < 4; i++) {
        int64_t v = b[i] < (int64_t)bounds[i - 1] ? (int64_t)bounds[i - 1] : b[i];
        bounds[i] = v > (int64_t)n ? n : (uint64_t)v;
    }
    bounds[3] = n;
}

enum { PERM_ROUNDS = 6 };

uint64_t data_permute(uint64_t i, uint64_t n, uint64_t seed, uint64_t key) {
    if (n <= 1) return 0;
    int bits = 2;
    while (bits < 64 && (n - 1) >> bits)
        bits += 2;
    int half = bits / 2;
    uint64_t mask = half == 32 ? 0xffffffffull : ((1ull << half) - 1);
    uint64_t base = mtc_rng_stream_of("data.permutation") + key * PERM_ROUNDS;
    uint64_t x = i;
    do {
        uint64_t L = x >> half, R = x & mask;
        for (int r = 0; r < PERM_ROUNDS; r++) {
            uint64_t F = mtc_rng_u32(seed, base + (uint64_t)r, R) & mask;
            uint64_t nl = R;
            R = L ^ F;
            L = nl;
        }
        x = (L << half) | R;
    } while (x >= n);
    return x;
}
