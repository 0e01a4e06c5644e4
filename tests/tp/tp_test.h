/* tests/tp/tp_test.h - helpers shared by the tp/ tests: random tensors from
 * the counter-based RNG (so a rank draws its shard by global index, as the
 * model's initialisation does), shard extraction written independently of
 * tp/mappings.c, array comparison with a stated tolerance, and launching
 * thread-ranks.
 *
 * Tolerance for "parallel vs serial" (fp32), per element:
 *   |got - want| <= ATOL + RTOL*|want| + NRTOL*max|want over the array|
 * with RTOL = 1e-5, ATOL = 2e-6 (O(1) data) and NRTOL = 1e-6 (8 ulps of the
 * array's largest element). TP changes only the order of summation
 * (per-rank partial sums added by the all-reduce, other GEMM shapes), which
 * moves a result by a few ulps of the magnitudes summed, not of the result:
 * a weight-gradient element that cancels to 1e-4 while its array reaches 39
 * moves by 1e-5 already when the serial run's inputs are perturbed by one
 * ulp (measured for the attention block's c_attn gradient), hence the
 * normwise term, as in GEMM error bounds. Bugs move results by O(1)
 * relative. With tp = 1 the layers call the serial kernels exactly, so
 * those cases are compared bit for bit. */
#ifndef MTC_TESTS_TP_TEST_H
#define MTC_TESTS_TP_TEST_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/rng.h"
#include "test.h"

#define TP_RTOL 1e-5
#define TP_ATOL 2e-6
#define TP_NRTOL 1e-6
#define TP_SEED 20261129u

static inline float *tt_alloc(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    if (!p) abort();
    return p;
}

/* dst (n) = normal(stream, first + k) * scale */
static inline void tt_fill(float *dst, size_t n, uint64_t stream, uint64_t first, float scale) {
    mtc_rng_fill_normal(dst, n, TP_SEED, stream, first, 0.0f, scale);
}

/* dst (R, C/p) = column block r of a (R, C) tensor drawn with tt_fill:
 * element (i, r*C_p + j) is index i*C + r*C_p + j of the stream. */
static inline void tt_fill_cols(float *dst, int R, int C, int p, int r, uint64_t stream,
                                float scale) {
    int C_p = C / p;
    for (int i = 0; i < R; i++)
        tt_fill(dst + (size_t)i * C_p, (size_t)C_p, stream, (uint64_t)i * C + (uint64_t)r * C_p,
                scale);
}

/* dst (R, C/p) = column block r of src (R, C) */
static inline void tt_cols(float *dst, const float *src, int R, int C, int p, int r) {
    int C_p = C / p;
    for (int i = 0; i < R; i++)
        memcpy(dst + (size_t)i * C_p, src + (size_t)i * C + (size_t)r * C_p,
               (size_t)C_p * sizeof(float));
}

/* dst (B, T/p, C) = positions [r*T/p, (r+1)*T/p) of every row of src (B, T, C) */
static inline void tt_seq(float *dst, const float *src, int B, int T, int C, int p, int r) {
    int T_p = T / p;
    for (int b = 0; b < B; b++)
        memcpy(dst + (size_t)b * T_p * C, src + ((size_t)b * T + (size_t)r * T_p) * C,
               (size_t)T_p * C * sizeof(float));
}

/* One check per array: reports the worst element. exact: bitwise equal. */
static inline void tt_cmp(const char *what, int rank, const float *got, const float *want, size_t n,
                          int exact) {
    double worst = 0, excess = -INFINITY, wmax = 0;
    size_t at = 0;
    for (size_t k = 0; k < n; k++)
        wmax = fabs((double)want[k]) > wmax ? fabs((double)want[k]) : wmax;
    for (size_t k = 0; k < n; k++) {
        double d = fabs((double)got[k] - (double)want[k]);
        double lim = TP_ATOL + TP_RTOL * fabs((double)want[k]) + TP_NRTOL * wmax;
        double e = d - (exact ? 0.0 : lim);
        if (d != d) e = INFINITY; /* NaN */
        if (e > excess) {
            excess = e;
            at = k;
        }
        if (d > worst || d != d) worst = d;
    }
    int bad = n && excess > 0;
    T_CHECKF(!bad, "%s (rank %d): element %zu is %.9g, want %.9g (max |diff| %.3g, %s)", what, rank,
             at, n ? (double)got[at] : 0.0, n ? (double)want[at] : 0.0, worst,
             exact ? "exact" : "tolerance");
}

static inline mtc_result_t tt_launch(int world, mtc_rank_fn fn, void *arg) {
    mtc_launch_opts o;
    memset(&o, 0, sizeof o);
    o.backend = MTC_BACKEND_SHM;
    o.world_size = world;
    o.timeout_s = 60;
    o.pin_threads = 0;
    return mtc_launch(&o, fn, arg);
}

#endif
