/* tests/nn/test_nn_gemm_engine.c - nn/gemm_engine.c: the fp32 GEMM engine
 * a process picks from bench-peak's cache (core/peak.h), and the probe.
 *
 * 1. nn_gemm_engine_choose: no cache -> oneDNN (the default, where built);
 *    a cache where this process's OpenBLAS core is faster -> OpenBLAS, and
 *    slower -> oneDNN; a cache that measured another core only -> the
 *    default; a request for openblas / dnnl (the CLI's MTC_GEMM) overrides
 *    the cache; the reason names what decided; a cache another kind of
 *    build measured (a debug build's rates for a release build, or one
 *    that records no kind) -> the default, the reason naming both kinds.
 * 2. nn_gemm_engine_force: pools made while forced run that engine, and
 *    both engines' GEMMs agree with a double-precision product (the pool
 *    of 2 and a pool of 1 give the same bits for each engine).
 * 3. nn_gemm_engine_measure gives positive rates and leaves nothing forced.
 * No rate is compared with another (the machine is shared). */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/peak.h"
#include "nn/lowp.h"
#include "nn/nn.h"
#include "test.h"

/* a cache measured by a build of kind `build` (this binary's: mtc_peak_build_kind) */
static void write_cache_of(const char *build, double dnnl, const char *core, double blas) {
    mtc_peak p;
    memset(&p, 0, sizeof p);
    snprintf(p.build, sizeof p.build, "%s", build);
    p.fma_fp32_tflops = 1, p.cores = 2, p.gemm_threads = 2, p.gemm_dnnl_gflops = dnnl;
    snprintf(p.isa, sizeof p.isa, "test");
    snprintf(p.measured_at, sizeof p.measured_at, "2026-12-02 00:00:00");
    snprintf(p.gemm_measured_at, sizeof p.gemm_measured_at, "2026-12-02 00:00:01");
    p.blas_count = 1;
    snprintf(p.blas[0].core, sizeof p.blas[0].core, "%s", core);
    p.blas[0].gflops = blas;
    T_CHECK(mtc_peak_save(&p) == MTC_OK);
}

static void write_cache(double dnnl, const char *core, double blas) {
    write_cache_of(mtc_peak_build_kind(), dnnl, core, blas);
}

/* C (M,N) = A (M,K) B (K,N) on `pool`, against double */
static double gemm_err(nn_pool *pool, float *c, int M, int N, int K) {
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
    for (int i = 0; i < M * K; i++)
        a[i] = (float)((i * 37 % 23) - 11) / 16.0f;
    for (int i = 0; i < K * N; i++)
        b[i] = (float)((i * 53 % 19) - 9) / 8.0f;
    nn_sgemm(pool, 0, 0, M, N, K, 1.0f, a, K, b, N, 0.0f, c, N);
    double worst = 0;
    for (int r = 0; r < M; r++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int p = 0; p < K; p++)
                s += (double)a[r * K + p] * b[p * N + j];
            double e = fabs(s - c[r * N + j]);
            worst = e > worst ? e : worst;
        }
    free(a), free(b);
    return worst;
}

int main(void) {
    char path[64], why[256];
    snprintf(path, sizeof path, "/tmp/mtc_test_gemm_engine_%d.json", (int)getpid());
    mtc_peak_set_cache_path(path);
    remove(path);
    int dnnl = nn_lowp_available();
    nn_gemm_engine def = dnnl ? NN_GEMM_DNNL : NN_GEMM_OPENBLAS;
    const char *core = openblas_get_corename();

    /* 1. the choice */
    T_CHECK(nn_gemm_engine_choose(NN_GEMM_AUTO, why, sizeof why) == def);
    T_CHECKF(strstr(why, dnnl ? "not measured" : "not built in") != NULL, "%s", why);
    write_cache(100, core, 150);
    T_CHECKF(nn_gemm_engine_choose(NN_GEMM_AUTO, why, sizeof why) == NN_GEMM_OPENBLAS || !dnnl,
             "%s", why);
    if (dnnl) T_CHECKF(strstr(why, core) && strstr(why, "00:00:01"), "%s", why);
    write_cache(150, core, 100);
    T_CHECKF(nn_gemm_engine_choose(NN_GEMM_AUTO, why, sizeof why) == def, "%s", why);
    write_cache(100, "NoSuchCore", 150);
    T_CHECKF(nn_gemm_engine_choose(NN_GEMM_AUTO, why, sizeof why) == def, "%s", why);
    if (dnnl) T_CHECKF(strstr(why, "not measured") != NULL, "%s", why);
    write_cache(150, core, 100);
    T_CHECK(nn_gemm_engine_choose(NN_GEMM_OPENBLAS, why, sizeof why) == NN_GEMM_OPENBLAS);
    T_CHECKF(strstr(why, "MTC_GEMM=openblas") != NULL, "%s", why);
    write_cache(100, core, 150);
    T_CHECK(nn_gemm_engine_choose(NN_GEMM_DNNL, why, sizeof why) == def);
    /* OpenBLAS faster, but measured by another kind of build: the default */
    const char *kind = mtc_peak_build_kind(), *other = strcmp(kind, "debug") ? "debug" : "release";
    char want[128];
    snprintf(want, sizeof want, "measured by a %s build and this is %s %s build", other,
             kind[0] == 'a' ? "an" : "a", kind);
    write_cache_of(other, 100, core, 150);
    T_CHECKF(nn_gemm_engine_choose(NN_GEMM_AUTO, why, sizeof why) == def, "%s", why);
    if (dnnl)
        T_CHECKF(strstr(why, "the default") && strstr(why, want) && strstr(why, "mtc bench-peak"),
                 "%s", why);
    write_cache_of("", 100, core, 150); /* a cache from before the kind was recorded */
    T_CHECKF(nn_gemm_engine_choose(NN_GEMM_AUTO, why, sizeof why) == def, "%s", why);
    if (dnnl) T_CHECKF(strstr(why, "did not record its kind") && strstr(why, kind), "%s", why);
    write_cache_of(other, 150, core, 100); /* a request still overrides */
    T_CHECK(nn_gemm_engine_choose(NN_GEMM_OPENBLAS, why, sizeof why) == NN_GEMM_OPENBLAS);
    remove(path);
    T_CHECK(!strcmp(nn_gemm_engine_name(NN_GEMM_DNNL), "dnnl") &&
            !strcmp(nn_gemm_engine_name(NN_GEMM_OPENBLAS), "openblas"));

    /* 2. forced engines: correct, and the same bits on 1 and 2 threads */
    enum { M = 300, N = 200, K = 96 };
    static float c1[M * N], c2[M * N];
    for (int e = NN_GEMM_DNNL; e <= NN_GEMM_OPENBLAS; e++) {
        if (e == NN_GEMM_DNNL && !dnnl) continue;
        nn_gemm_engine_force((nn_gemm_engine)e);
        T_CHECK(nn_gemm_engine_current() == (nn_gemm_engine)e);
        nn_pool *p1 = NULL, *p2 = NULL;
        T_CHECK(nn_pool_create(1, &p1) == MTC_OK && nn_pool_create(2, &p2) == MTC_OK);
        nn_gemm_engine_force(NN_GEMM_AUTO); /* the pools keep the engine they were made with */
        double e1 = gemm_err(p1, c1, M, N, K), e2 = gemm_err(p2, c2, M, N, K);
        /* operands are multiples of 1/16 and 1/8 with small numerators: every
         * partial sum is exact in fp32, so both engines must be exact */
        T_CHECKF(e1 == 0 && e2 == 0, "%s: errors %g %g", nn_gemm_engine_name(e), e1, e2);
        T_CHECK(memcmp(c1, c2, sizeof c1) == 0);
        nn_pool_free(p1), nn_pool_free(p2);
    }

    /* 3. the probe */
    double gd = -1, gb = -1;
    T_CHECK(nn_gemm_engine_measure(2, 1, &gd, &gb) == MTC_OK);
    T_CHECKF(gb > 0 && (dnnl ? gd > 0 : gd == 0), "dnnl %g openblas %g", gd, gb);
    T_CHECK(nn_gemm_engine_measure(1, 1, NULL, &gb) == MTC_OK && gb > 0);
    T_CHECK(nn_gemm_engine_current() == def); /* no cache: the default again */
    T_CHECK(nn_gemm_engine_measure(0, 1, &gd, &gb) == MTC_ERR_INVALID_ARGUMENT);
    return T_DONE();
}
