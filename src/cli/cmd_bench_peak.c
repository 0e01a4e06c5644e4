/* cli/cmd_bench_peak.c - `mtc bench-peak`: measure this machine (GEMM rate
 * per core, copy bandwidth, shm collective alpha/beta; plan/peak.c) and
 * cache it as the machine description `mtc plan --machine this` reads. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "core/peak.h"
#include "plan/plan.h"

int cli_cmd_bench_peak(int argc, char **argv) {
    int iters = 9, print = 0;
    const char *out = NULL;
    mtc_arg args[] = {
        {"iters", NULL, MTC_ARG_INT, &iters, "N", "repetitions per measurement (median; default 9)",
         0},
        {"output", "o", MTC_ARG_STRING, &out, "FILE",
         "where to write the description (default the cache, $MTC_CACHE_DIR/machine.json or "
         "~/.cache/mtc/machine.json)",
         0},
        {"print", NULL, MTC_ARG_FLAG, &print, NULL, "print the cached description and exit", 0},
    };
    int nargs = (int)(sizeof args / sizeof args[0]);
    int st =
        cli_parse("bench-peak", "[--iters N] [--output FILE]",
                  "Measure this machine's fp32 GEMM rate, copy bandwidth, shared-memory\n"
                  "collective latency / bandwidth, the cost of mtc's kernels and the resident\n"
                  "set of a process, and cache them for `mtc plan`. Timings on a shared\n"
                  "machine vary: run again to refresh.",
                  args, nargs, argc, argv);
    if (st >= 0) return st;
    if (iters < 1 || iters > 1000)
        return cli_usage_error("bench-peak", "iters=%d must be in 1..1000", iters);
    char path[1024];
    if (out)
        snprintf(path, sizeof path, "%s", out);
    else
        mtc_plan_machine_cache_path(path, sizeof path);
    mtc_plan_machine m;
    if (print) {
        mtc_result_t rc = mtc_plan_machine_load(out ? out : "this", &m);
        if (rc == MTC_ERR_INVALID_ARGUMENT)
            return cli_usage_error("bench-peak", "%s", mtc_error_detail());
        if (rc != MTC_OK) return cli_fail("bench-peak", rc);
        printf("%s: %s\n  %.2f GFLOP/s fp32 per core (512^3), %.2f at mtc's shapes, %.2f of a core "
               "under the load then, %d cores, copy %.2f GB/s, shm lat %.2f us, bw %.2f GB/s, "
               "oversubscription +%.2f us\n",
               path, m.description, m.peak_flops_fp32 * 1e-9, m.shape_flops_fp32 * 1e-9,
               m.cpu_share, m.devices_per_node, m.mem_bw * 1e-9, m.intra.lat * 1e6,
               m.intra.bw * 1e-9, m.oversub_lat * 1e6);
        if (m.kern.measured)
            printf("  kernels: a layer's linears %.2f GFLOP/s + %.2f us per call, attention "
                   "%.0f + %.1f HS / %.0f + %.1f HS ns per tile, GELU %.2f / %.2f ns, dropout "
                   "%.2f ns per element; collectives wait %.2f us for their peer; a process "
                   "without a model holds %.1f MB\n",
                   m.kern.gemm_rate * 1e-9, m.kern.gemm_call * 1e6, m.kern.attn_fwd_tile * 1e9,
                   m.kern.attn_fwd_hs * 1e9, m.kern.attn_bwd_tile * 1e9, m.kern.attn_bwd_hs * 1e9,
                   m.kern.gelu_fwd * 1e9, m.kern.gelu_bwd * 1e9, m.kern.dropout * 1e9,
                   m.intra.sync * 1e6, m.kern.base_rss / 1048576.0);
        return 0;
    }
    mtc_result_t rc = mtc_plan_measure_host(&m, iters, stdout);
    if (rc == MTC_OK) rc = mtc_plan_machine_write(&m, path);
    if (rc != MTC_OK) return cli_fail("bench-peak", rc);
    printf("> wrote %s (figures taken now, on a machine that may be shared)\n", path);
    if (out) return 0; /* an explicit --output file: nothing else is cached */
    /* the same measurement feeds the log line's MFU (core/peak.h's cache):
     * the FMA peak of every core, and the GEMM rate just measured */
    mtc_peak pk;
    rc = mtc_peak_measure(&pk, 0, 0.5);
    if (rc == MTC_OK) {
        pk.gemm_tflops = m.peak_flops_fp32 * m.devices_per_node * 1e-12;
        rc = mtc_peak_save(&pk);
    }
    if (rc != MTC_OK) return cli_fail("bench-peak", rc);
    char pp[1024];
    mtc_peak_cache_path(pp, sizeof pp);
    printf("> wrote %s (fp32 FMA peak %.3f TFLOP/s over %d cores: what `mtc train` reports MFU "
           "against)\n",
           pp, pk.fma_fp32_tflops, pk.cores);
    return 0;
}
