/* nn/gemm_engine.c - which fp32 GEMM engine a process runs (oneDNN or
 * OpenBLAS), chosen from a measurement made once per machine.
 *
 *   mtc bench-peak: nn_gemm_engine_measure (both engines, alternating, best
 *     round each; OpenBLAS also in a child process with the core type the
 *     library picks itself) -> core/peak.h's cache
 *   every process: nn_gemm_engine_choose (once, pool.c) -> the engine
 *     requested (nn_gemm_engine_request: the CLI's MTC_GEMM), else the
 *     cached rates for the OpenBLAS core this process loaded (measured by
 *     a build of this one's kind: mtc_peak_usable), else oneDNN
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
    char other[160]; /* a debug or sanitizer build's rates say nothing of this build's */
    if (!mtc_peak_usable(&pk, other, sizeof other)) {
        snprintf(why, size, "the default: the cached engine rates were %s", other);
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

/* The shapes of a GPT step, forward, dinp and dw of each: a transformer
 * layer's linear (1024 tokens, 512 -> 1536) and one chunk of the LM head
 * (128 tokens, 384 -> a 50304 vocabulary: wide, short products whose rate
 * differs from the layer's). In a small GPT the two carry about equal
 * FLOPs (GPT-2 124M: 1.1 : 1), so an engine's rate is their FLOP-weighted
 * harmonic mean. */
typedef struct {
    int n, in, out;
} ge_shape;
static const ge_shape ge_shapes[] = {{1024, 512, 1536}, {128, 384, 50304}};
enum { GE_SHAPES = (int)(sizeof ge_shapes / sizeof ge_shapes[0]) };

static double ge_flop(const ge_shape *g) { return 3 * 2.0 * g->n * (double)g->in * g->out; }

static double engine_round(nn_pool *pool, const ge_shape *g, float *x, float *w, float *y,
                           float *dx, float *dw) {
    int n = g->n, in = g->in, out = g->out;
    uint64_t t0 = mtc_time_ns();
    nn_sgemm(pool, 0, 1, n, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
    nn_sgemm(pool, 0, 0, n, in, out, 1.0f, y, out, w, in, 0.0f, dx, in);
    nn_sgemm(pool, 1, 0, out, in, n, 1.0f, y, out, x, in, 1.0f, dw, in);
    return (double)(mtc_time_ns() - t0) * 1e-9;
}

mtc_result_t nn_gemm_engine_measure(int threads, int rounds, double *gf_dnnl, double *gf_blas) {
    if (gf_dnnl) *gf_dnnl = 0;
    *gf_blas = 0;
    if (threads < 1 || rounds < 1)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "GEMM engine probe: threads=%d rounds=%d",
                         threads, rounds);
    size_t nx = 0, nw = 0, ny = 0;
    for (int k = 0; k < GE_SHAPES; k++) {
        const ge_shape *g = &ge_shapes[k];
        size_t a = (size_t)g->n * g->in, b = (size_t)g->out * g->in, c = (size_t)g->n * g->out;
        nx = a > nx ? a : nx, nw = b > nw ? b : nw, ny = c > ny ? c : ny;
    }
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
    /* per shape, each engine's best round (round -1 warms up; the engines
     * alternate, so a slow phase of a shared machine falls on both) */
    double sec_d = 0, sec_b = 0;
    for (int k = 0; rc == MTC_OK && k < GE_SHAPES; k++) {
        const ge_shape *g = &ge_shapes[k];
        double best_d = 0, best_b = 0;
        for (int r = -1; r < rounds; r++) {
            double sd = dnnl ? engine_round(pd, g, x, w, y, dx, dw) : 0;
            double sb = engine_round(pb, g, x, w, y, dx, dw);
            if (r < 0) continue;
            if (dnnl && (best_d == 0 || sd < best_d)) best_d = sd;
            if (best_b == 0 || sb < best_b) best_b = sb;
        }
        /* equal FLOP weight: each shape's seconds per FLOP, summed */
        double f = ge_flop(g);
        sec_d += best_d / f, sec_b += best_b / f;
    }
    if (rc == MTC_OK && sec_d > 0) *gf_dnnl = GE_SHAPES / sec_d * 1e-9;
    if (rc == MTC_OK && sec_b > 0) *gf_blas = GE_SHAPES / sec_b * 1e-9;
    nn_pool_free(pd), nn_pool_free(pb);
    free(x), free(w), free(y), free(dx), free(dw);
    return rc;
}
