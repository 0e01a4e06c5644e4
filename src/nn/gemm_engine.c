/* nn/gemm_engine.c - which fp32 GEMM engine a process runs (oneDNN or
 * OpenBLAS), chosen from a measurement made once per machine.
 *
 *   mtc bench-peak: nn_gemm_engine_measure (both engines, alternating, best
 *     round each; OpenBLAS also in a child process with the core type the
 *     library picks itself) -> core/peak.h's cache
 *   every process: nn_gemm_engine_choose (once, pool.c) -> the engine
 *     requested (nn_gemm_engine_request: the CLI's MTC_GEMM), else the
 *     cached rates for the OpenBLAS core this process loaded, else oneDNN
 *
 * The choice is read, never measured, at start-up: the same command on the
 * same machine with the same cache computes the same bits.
 * Relies on OpenBLAS's openblas_get_corename and nn_sgemm's engines.
 * Does not: measure bf16 (bf16_engine.c), or change engine mid-process. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/peak.h"
#include "core/timer.h"
#include "nn/lowp.h"
#include "nn/nn.h"

static const char *const gemm_engine_names[] = {"auto", "dnnl", "openblas"};

const char *nn_gemm_engine_name(nn_gemm_engine e) {
    return e >= NN_GEMM_AUTO && e <= NN_GEMM_OPENBLAS ? gemm_engine_names[e] : "?";
}

nn_gemm_engine nn_gemm_engine_choose(nn_gemm_engine requested, char *why, size_t size) {
    int have_dnnl = nn_lowp_available();
    if (requested == NN_GEMM_OPENBLAS) {
        snprintf(why, size, "MTC_GEMM=openblas");
        return NN_GEMM_OPENBLAS;
    }
    if (requested == NN_GEMM_DNNL) {
        snprintf(why, size, "MTC_GEMM=dnnl%s", have_dnnl ? "" : ", but oneDNN is not built in");
        return have_dnnl ? NN_GEMM_DNNL : NN_GEMM_OPENBLAS;
    }
    if (!have_dnnl) {
        snprintf(why, size, "oneDNN not built in");
        return NN_GEMM_OPENBLAS;
    }
    mtc_peak pk;
    if (mtc_peak_load(&pk) != MTC_OK || !(pk.gemm_dnnl_gflops > 0)) {
        snprintf(why, size, "the default: engines not measured on this machine (mtc bench-peak)");
        return NN_GEMM_DNNL;
    }
    const char *core = openblas_get_corename();
    const mtc_peak_blas *b = NULL;
    for (int i = 0; i < pk.blas_count && !b; i++)
        if (core && !strcasecmp(pk.blas[i].core, core)) b = &pk.blas[i];
    if (!b) {
        snprintf(why, size, "the default: OpenBLAS's %s kernels not measured by mtc bench-peak",
                 core ? core : "?");
        return NN_GEMM_DNNL;
    }
    int blas = b->gflops > pk.gemm_dnnl_gflops;
    snprintf(why, size, "bench-peak %s: oneDNN %.0f, OpenBLAS %s %.0f GFLOP/s on %d threads",
             pk.gemm_measured_at, pk.gemm_dnnl_gflops, b->core, b->gflops, pk.gemm_threads);
    return blas ? NN_GEMM_OPENBLAS : NN_GEMM_DNNL;
}

/* a linear layer at 1024 tokens, 512 in, 1536 out: forward, dinp, dw */
enum { GE_N = 1024, GE_IN = 512, GE_OUT = 1536 };

static double engine_round(nn_pool *pool, float *x, float *w, float *y, float *dx, float *dw) {
    uint64_t t0 = mtc_time_ns();
    nn_sgemm(pool, 0, 1, GE_N, GE_OUT, GE_IN, 1.0f, x, GE_IN, w, GE_IN, 0.0f, y, GE_OUT);
    nn_sgemm(pool, 0, 0, GE_N, GE_IN, GE_OUT, 1.0f, y, GE_OUT, w, GE_IN, 0.0f, dx, GE_IN);
    nn_sgemm(pool, 1, 0, GE_OUT, GE_IN, GE_N, 1.0f, y, GE_OUT, x, GE_IN, 1.0f, dw, GE_IN);
    return (double)(mtc_time_ns() - t0) * 1e-9;
}

mtc_result_t nn_gemm_engine_measure(int threads, int rounds, double *gf_dnnl, double *gf_blas) {
    if (gf_dnnl) *gf_dnnl = 0;
    *gf_blas = 0;
    if (threads < 1 || rounds < 1)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "GEMM engine probe: threads=%d rounds=%d",
                         threads, rounds);
    size_t nx = (size_t)GE_N * GE_IN, nw = (size_t)GE_OUT * GE_IN, ny = (size_t)GE_N * GE_OUT;
    float *x = malloc(nx * sizeof(float)), *w = malloc(nw * sizeof(float));
    float *y = malloc(ny * sizeof(float)), *dx = malloc(nx * sizeof(float));
    float *dw = calloc(nw, sizeof(float));
    nn_pool *pd = NULL, *pb = NULL;
    mtc_result_t rc = x && w && y && dx && dw
                          ? MTC_OK
                          : mtc_error(MTC_ERR_OUT_OF_MEMORY, "GEMM engine probe buffers");
    for (size_t i = 0; rc == MTC_OK && i < nx; i++)
        x[i] = (float)((int)(i * 7919 % 61) - 30) * 0.03125f;
    for (size_t i = 0; rc == MTC_OK && i < nw; i++)
        w[i] = (float)((int)(i * 104729 % 53) - 26) * 0.0078125f;
    int dnnl = gf_dnnl && nn_lowp_available();
    if (rc == MTC_OK && dnnl) {
        nn_gemm_engine_force(NN_GEMM_DNNL);
        rc = nn_pool_create(threads, &pd);
    }
    if (rc == MTC_OK) {
        nn_gemm_engine_force(NN_GEMM_OPENBLAS);
        rc = nn_pool_create(threads, &pb);
    }
    nn_gemm_engine_force(NN_GEMM_AUTO);
    double best_d = 0, best_b = 0;
    for (int r = -1; rc == MTC_OK && r < rounds; r++) { /* round -1 warms up */
        double sd = dnnl ? engine_round(pd, x, w, y, dx, dw) : 0;
        double sb = engine_round(pb, x, w, y, dx, dw);
        if (r < 0) continue;
        if (dnnl && (best_d == 0 || sd < best_d)) best_d = sd;
        if (best_b == 0 || sb < best_b) best_b = sb;
    }
    double flop = 3 * 2.0 * GE_N * (double)GE_IN * GE_OUT;
    if (rc == MTC_OK && best_d > 0) *gf_dnnl = flop / best_d * 1e-9;
    if (rc == MTC_OK && best_b > 0) *gf_blas = flop / best_b * 1e-9;
    nn_pool_free(pd), nn_pool_free(pb);
    free(x), free(w), free(y), free(dx), free(dw);
    return rc;
}
