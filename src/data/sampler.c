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
    /* Megatron's parse_and_normalize_split: the numbers are re.findall(r"[.0-9]+"),
     * whatever stands between them (so a quoted "'99,1,0'" from a shell array
     * works), each float()ed, padded with zeros to 3, then normalized */
    double w[3] = {0, 0, 0};
    int n = 0;
    const char *p = split ? split : "";
    while (*p) {
        if (!((*p >= '0' && *p <= '9') || *p == '.')) {
            p++;
            continue;
        }
        const char *q = p;
        while ((*q >= '0' && *q <= '9') || *q == '.')
            q++;
        char num[64], *end;
        int len = (int)(q - p);
        if (len >= (int)sizeof num)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "--split \"%s\": number %.20s... is too long", split, p);
        memcpy(num, p, (size_t)len), num[len] = 0;
        double v = strtod(num, &end);
        if (*end || isinf(v))
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "--split \"%s\": %s is not a number (use weights like 949,50,1)",
                             split, num);
        if (n == 3)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "--split \"%s\": more than 3 weights (train,valid,test like 949,50,1)",
                             split);
        w[n++] = v;
        p = q;
    }
    double sum = w[0] + w[1] + w[2];
    if (!(sum > 0))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "--split \"%s\": the weights sum to 0 (give the train split a weight, "
                         "like 949,50,1)",
                         split ? split : "");
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
