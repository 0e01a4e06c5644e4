/* tests/core/test_peak.c - the peak cache of core/peak.h: a missing cache
 * is MTC_ERR_IO, a file that is not ours MTC_ERR_FORMAT, a measured peak
 * is positive and comes back from the cache as saved, with the fp32 GEMM
 * engines' rates (nn_gemm_engine_choose reads them). (The figure itself
 * depends on the machine and its load: not asserted beyond > 0.) */
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
    p.gemm_tflops = 0.125;
    T_CHECK(mtc_peak_save(&p) == MTC_OK);
    T_CHECK(mtc_peak_load(&q) == MTC_OK);
    T_CLOSE(q.fma_fp32_tflops, p.fma_fp32_tflops, 0, 1e-5);
    T_CHECK(q.gemm_tflops == 0.125 && q.cores == 1 && !strcmp(q.isa, p.isa) &&
            !strcmp(q.measured_at, p.measured_at));
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
    remove(path);
    return T_DONE();
}
