/* nn/bf16_engine.c - choosing a --bf16 model's GEMM engine by measurement
 * (see lowp.h, nn_bf16_gemm): oneDNN's bf16 matmul or fp32 GEMMs on
 * bf16-valued operands.
 *
 *   fill A, B with bf16 values  ->  warm both  ->  R rounds of
 *   [bf16 GEMM, fp32 GEMM] alternating  ->  best time of each engine
 *
 * Alternating and keeping each engine's best round makes the comparison
 * fair on a machine shared with other work (both see the same load).
 * The rates of a shape are measured once per machine and kept beside the peak
 * cache (bf16-gemm-MxNxK-tT-KIND-vV.txt; the first process to write one wins,
 * every later one reads it), so the same command on the same machine picks the same
 * engine and computes the same bits: two engines' sums differ in order, and a
 * choice re-measured under load could flip between runs. KIND is the build's
 * (mtc_peak_build_kind: a Debug or sanitizer build's rates are not a Release
 * build's) and V the rates' version, BF16_CACHE_VERSION: raised when the
 * GEMMs change speed (2: bf16 B packed, lowp.h), so no older rate is read.
 * Relies on nn_lowp_gemm (bf16) and nn_sgemm (whatever fp32 GEMM mtc
 * picked: oneDNN fp32 or OpenBLAS). Does not: decide (the caller compares
 * the rates), or run in the step loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/peak.h"
#include "core/timer.h"
#include "nn/lowp.h"

#define BF16_CACHE_VERSION 2

static const char *const engine_names[] = {"auto", "dnnl-bf16", "fp32"};

const char *nn_bf16_gemm_name(nn_bf16_gemm e) {
    return e >= NN_BF16_GEMM_AUTO && e <= NN_BF16_GEMM_F32 ? engine_names[e] : "?";
}

int nn_bf16_gemm_parse(const char *s) {
    for (int i = 0; s && i < 3; i++)
        if (!strcmp(s, engine_names[i])) return i;
    return -1;
}

#define MEASURE_ROUNDS 4
#define MEASURE_MAX_ROWS 1024

mtc_result_t nn_bf16_gemm_measure(nn_pool *pool, int M, int N, int K, double *gf_bf16,
                                  double *gf_f32) {
    *gf_bf16 = *gf_f32 = 0;
    if (M > MEASURE_MAX_ROWS) M = MEASURE_MAX_ROWS;
    if (M <= 0 || N <= 0 || K <= 0) return MTC_OK;
    size_t na = (size_t)M * K, nb = (size_t)N * K, nc = (size_t)M * N;
    float *a = malloc(na * sizeof(float)), *b = malloc(nb * sizeof(float));
    float *c = malloc(nc * sizeof(float));
    mtc_bf16 *a16 = malloc(na * sizeof(mtc_bf16)), *b16 = malloc(nb * sizeof(mtc_bf16));
    nn_lowp *lp = NULL;
    mtc_result_t rc = a && b && c && a16 && b16 ? MTC_OK
                                                : mtc_error(MTC_ERR_OUT_OF_MEMORY,
                                                            "bf16 GEMM probe of %dx%dx%d", M, N, K);
    if (rc == MTC_OK && nn_lowp_available()) rc = nn_lowp_create(&lp);
    if (rc != MTC_OK) goto out;
    /* values of either sign and a few magnitudes, bf16 already (as the model's operands) */
    for (size_t i = 0; i < na; i++)
        a[i] = (float)((int)(i * 7919 % 61) - 30) * 0.03125f;
    for (size_t i = 0; i < nb; i++)
        b[i] = (float)((int)(i * 104729 % 53) - 26) * 0.0078125f;
    nn_f32_to_bf16(a16, a, na);
    nn_f32_to_bf16(b16, b, nb);
    double best16 = 0, best32 = 0;
    for (int r = -1; r < MEASURE_ROUNDS; r++) { /* round -1 warms up (primitives, caches) */
        if (lp) {
            uint64_t t0 = mtc_time_ns();
            rc = nn_lowp_gemm(pool, lp, MTC_DTYPE_BF16, MTC_DTYPE_F32, 0, 1, M, N, K, 1.0f, a16, K,
                              b16, K, NULL, 0.0f, c, N);
            if (rc != MTC_OK) goto out;
            double s = (double)(mtc_time_ns() - t0) * 1e-9;
            if (r >= 0 && (best16 == 0 || s < best16)) best16 = s;
        }
        uint64_t t0 = mtc_time_ns();
        nn_sgemm(pool, 0, 1, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
        double s = (double)(mtc_time_ns() - t0) * 1e-9;
        if (r >= 0 && (best32 == 0 || s < best32)) best32 = s;
    }
    double flop = 2.0 * M * (double)N * K;
    if (best16 > 0) *gf_bf16 = flop / best16 * 1e-9;
    if (best32 > 0) *gf_f32 = flop / best32 * 1e-9;
out:
    nn_lowp_free(lp);
    free(a), free(b), free(c), free(a16), free(b16);
    return rc;
}

/* The shape's cached rates: 1 when read. */
static int bf16_cache_read(const char *path, double *gf_bf16, double *gf_f32) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    double a = 0, b = 0;
    int ok = fscanf(f, "%lf %lf", &a, &b) == 2 && a >= 0 && b > 0;
    fclose(f);
    if (ok) *gf_bf16 = a, *gf_f32 = b;
    return ok;
}

mtc_result_t nn_bf16_gemm_rates(nn_pool *pool, int threads, int M, int N, int K, double *gf_bf16,
                                double *gf_f32, int *cached) {
    char dir[4096], path[4300], tmp[4400];
    int Mm = M > MEASURE_MAX_ROWS ? MEASURE_MAX_ROWS : M;
    mtc_peak_cache_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/bf16-gemm-%dx%dx%d-t%d-%s-v%d.txt", dir, Mm, N, K, threads,
             mtc_peak_build_kind(), BF16_CACHE_VERSION);
    *cached = dir[0] && bf16_cache_read(path, gf_bf16, gf_f32);
    if (*cached) return MTC_OK;
    MTC_CHECK(nn_bf16_gemm_measure(pool, M, N, K, gf_bf16, gf_f32));
    if (!(*gf_f32 > 0) || !dir[0]) return MTC_OK; /* without a cache: this run's own */
    /* written whole under a private name, then linked into place: a process
     * that lost the race takes the winner's rates, so all agree */
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return MTC_OK; /* no cache here: this run's own measurement */
    int ok = fprintf(f, "%.6g %.6g\n", *gf_bf16, *gf_f32) > 0;
    ok = fclose(f) == 0 && ok;
    if (ok && link(tmp, path) != 0) *cached = bf16_cache_read(path, gf_bf16, gf_f32);
    remove(tmp);
    return MTC_OK;
}
