/* tests/core/test_peak.c - the peak cache of core/peak.h: a missing cache
 * is MTC_ERR_IO, a file that is not ours MTC_ERR_FORMAT, a measured peak
 * is positive and comes back from the cache as saved, with the fp32 GEMM
 * engines' rates (nn_gemm_engine_choose reads them) and the kind of build
 * that measured it; a cache of another kind, or of none (from before the
 * kind was recorded), is not usable, and the reason names both kinds.
 * (The figure itself depends on the machine and its load: not asserted
 * beyond > 0.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/peak.h"
#include "test.h"

int main(void) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/mtc_test_peak_%d.json", (int)getpid());
    char got[4096];
    mtc_peak p, q;
    mtc_peak_cache_path(got, sizeof got);
    T_CHECK(!got[0] && mtc_peak_load(&q) == MTC_ERR_IO); /* none set: no cache */
    mtc_peak_set_cache_path(path);                       /* the CLI's MTC_PEAK_CACHE */
    mtc_peak_cache_path(got, sizeof got);
    T_CHECK(!strcmp(got, path));
    remove(path);
    T_CHECK(mtc_peak_load(&q) == MTC_ERR_IO);
    FILE *f = fopen(path, "w");
    T_CHECK(f != NULL);
    if (f) fputs("{\"something\": 1}\n", f), fclose(f);
    T_CHECK(mtc_peak_load(&q) == MTC_ERR_FORMAT);
    T_CHECK(mtc_peak_measure(&p, 1, 0.02) == MTC_OK);
    T_CHECKF(p.fma_fp32_tflops > 0 && p.cores == 1, "%g TFLOP/s on %d cores", p.fma_fp32_tflops,
             p.cores);
    const char *kind = mtc_peak_build_kind();
    T_CHECKF(!strcmp(kind, "release") || !strcmp(kind, "debug") || !strcmp(kind, "asan") ||
                 !strcmp(kind, "tsan"),
             "build kind '%s'", kind);
    T_CHECKF(!strcmp(p.build, kind), "measured build '%s', this is '%s'", p.build, kind);
    char why[256] = "untouched";
    T_CHECK(mtc_peak_usable(&p, why, sizeof why) == 1 && !strcmp(why, "untouched"));
    p.gemm_tflops = 0.125;
    T_CHECK(mtc_peak_save(&p) == MTC_OK);
    T_CHECK(mtc_peak_load(&q) == MTC_OK);
    T_CLOSE(q.fma_fp32_tflops, p.fma_fp32_tflops, 0, 1e-5);
    T_CHECK(q.gemm_tflops == 0.125 && q.cores == 1 && !strcmp(q.isa, p.isa) &&
            !strcmp(q.measured_at, p.measured_at));
    T_CHECKF(!strcmp(q.build, kind) && mtc_peak_usable(&q, why, sizeof why), "build '%s'", q.build);
    T_CHECK(q.gemm_dnnl_gflops == 0 && q.blas_count == 0); /* engines not measured */
    p.gemm_dnnl_gflops = 226.5, p.gemm_threads = 2, p.blas_count = 2;
    snprintf(p.gemm_measured_at, sizeof p.gemm_measured_at, "2026-12-02 07:00:00");
    snprintf(p.blas[0].core, sizeof p.blas[0].core, "Cooperlake"), p.blas[0].gflops = 341.25;
    snprintf(p.blas[1].core, sizeof p.blas[1].core, "Haswell"), p.blas[1].gflops = 194;
    T_CHECK(mtc_peak_save(&p) == MTC_OK);
    T_CHECK(mtc_peak_load(&q) == MTC_OK);
    T_CHECKF(q.gemm_dnnl_gflops == 226.5 && q.gemm_threads == 2 && q.blas_count == 2 &&
                 !strcmp(q.gemm_measured_at, p.gemm_measured_at),
             "dnnl %g threads %d blas %d at %s", q.gemm_dnnl_gflops, q.gemm_threads, q.blas_count,
             q.gemm_measured_at);
    T_CHECK(!strcmp(q.blas[0].core, "Cooperlake") && q.blas[0].gflops == 341.25 &&
            !strcmp(q.blas[1].core, "Haswell") && q.blas[1].gflops == 194);
    /* another kind's cache: loaded as it is, not usable, the reason names both */
    const char *other = strcmp(kind, "debug") ? "debug" : "release";
    snprintf(p.build, sizeof p.build, "%s", other);
    T_CHECK(mtc_peak_save(&p) == MTC_OK);
    T_CHECK(mtc_peak_load(&q) == MTC_OK && !strcmp(q.build, other));
    why[0] = 0;
    T_CHECK(mtc_peak_usable(&q, why, sizeof why) == 0);
    char want[128];
    snprintf(want, sizeof want, "by a %s build and this is %s %s build", other,
             kind[0] == 'a' ? "an" : "a", kind);
    T_CHECKF(strstr(why, want) && strstr(why, "mtc bench-peak"), "%s", why);
    /* a cache from before the kind was recorded: no "build" field */
    f = fopen(path, "w");
    T_CHECK(f != NULL);
    if (f) {
        fputs("{\"fma_fp32_tflops\": 0.5, \"cores\": 2, \"isa\": \"avx2+fma\", \"measured_at\": "
              "\"2026-12-01 10:30:00\", \"gemm_engines\": {\"dnnl\": 4.7, \"openblas\": "
              "{\"Haswell\": 6.4}}}\n",
              f);
        fclose(f);
    }
    T_CHECK(mtc_peak_load(&q) == MTC_OK && q.build[0] == 0 && q.gemm_dnnl_gflops == 4.7);
    why[0] = 0;
    T_CHECK(mtc_peak_usable(&q, why, sizeof why) == 0);
    T_CHECKF(strstr(why, "did not record its kind") && strstr(why, kind), "%s", why);
    remove(path);
    return T_DONE();
}
