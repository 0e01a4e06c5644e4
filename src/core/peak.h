/* core/peak.h - this machine's compute peak, for model FLOPs utilization.
 *
 * A peak is measured once (mtc_peak_measure: every core running independent
 * fused multiply-adds on the widest vectors the build targets, fp32) and
 * kept in a small JSON cache (mtc_peak_save / mtc_peak_load) so runs can
 * print MFU without measuring. The cache lives where the process says
 * (mtc_peak_set_cache_path; the CLI's is $MTC_PEAK_CACHE, else
 * $XDG_CACHE_HOME/mtc/peak.json, else $HOME/.cache/mtc/peak.json). The figure
 * is for the whole machine; a run divides it by the ranks sharing the
 * machine. Whatever command measures and caches it (the planner's
 * `mtc bench-peak`) should call these so every reader agrees.
 * Does not measure GEMM throughput itself: nn/gemm_engine.c does, and the
 * cache keeps its figures (gemm_tflops, and the fp32 GEMM engines' rates
 * from which every process picks its engine, nn_gemm_engine_choose) nor bf16.
 * The cache records the kind of build that measured it (mtc_peak_build_kind):
 * a debug or sanitizer build runs several times slower, so its figures say
 * nothing of an optimized build's; every reader checks mtc_peak_usable. */
#ifndef MTC_CORE_PEAK_H
#define MTC_CORE_PEAK_H

#include <stddef.h>

#include "core/result.h"

/* One OpenBLAS core type's measured fp32 GEMM rate (its kernels are chosen
 * when the library loads: by the CPU, or by OPENBLAS_CORETYPE). */
#define MTC_PEAK_BLAS_CORES 4
typedef struct {
    char core[32]; /* openblas_get_corename(), e.g. "Cooperlake", "Haswell" */
    double gflops; /* the whole machine, every core (0: not measured) */
} mtc_peak_blas;

typedef struct {
    double fma_fp32_tflops; /* the whole machine, every core */
    double gemm_tflops;     /* measured fp32 GEMM (0: unknown) */
    int cores;              /* threads the measurement ran */
    char isa[32];           /* "avx512", "avx2+fma", "scalar" */
    char build[16];         /* mtc_peak_build_kind() of the measuring build ("": not recorded) */
    char measured_at[32];   /* UTC, "2026-12-01 10:30:00" */
    /* fp32 GEMM engines at a transformer linear layer's three GEMMs on every
     * core (nn_gemm_engine_measure); 0 / no entries: not measured */
    double gemm_dnnl_gflops;
    int gemm_threads;          /* the pool size they ran on */
    char gemm_measured_at[32]; /* UTC, as measured_at */
    int blas_count;
    mtc_peak_blas blas[MTC_PEAK_BLAS_CORES];
} mtc_peak;

/* Model FLOPs utilization, the one definition `mtc train` logs and `mtc
 * plan` predicts: Megatron's model FLOPs (no recomputation) per second per
 * rank over the peak FLOP/s of one rank (a host's peak divided by the ranks
 * sharing it; a GPU's data-sheet peak). 0 when the peak is unknown. */
static inline double mtc_mfu(double model_flops, double seconds, int ranks,
                             double peak_flops_per_rank) {
    if (!(peak_flops_per_rank > 0) || !(seconds > 0) || ranks < 1) return 0;
    return model_flops / (seconds * ranks) / peak_flops_per_rank;
}

/* Where the process's cache is: set once, before any thread reads it (the
 * CLI: $MTC_PEAK_CACHE, else $XDG_CACHE_HOME/mtc/peak.json, else
 * $HOME/.cache/mtc/peak.json). NULL or "": no cache (the default). */
void mtc_peak_set_cache_path(const char *path);
/* Where the cache is (buf gets the path; "" without one). */
void mtc_peak_cache_path(char *buf, size_t len);
/* The cache's directory (dir gets it, "" without a cache), created if
 * missing: other per-machine measurements (nn/bf16_engine.c's) live beside
 * peak.json. */
void mtc_peak_cache_dir(char *dir, size_t len);
/* MTC_ERR_IO when there is no cache, MTC_ERR_FORMAT when it is not ours. */
mtc_result_t mtc_peak_load(mtc_peak *out);
/* Written to a temporary name and renamed; creates the directory. */
mtc_result_t mtc_peak_save(const mtc_peak *p);
/* Runs `threads` threads (0: every online core) for about `seconds`. */
mtc_result_t mtc_peak_measure(mtc_peak *out, int threads, double seconds);
/* This binary's kind, decided when core/peak.c was compiled: "asan"
 * (AddressSanitizer), "tsan" (ThreadSanitizer), "debug" (not optimized) or
 * "release". */
const char *mtc_peak_build_kind(void);
/* 1 when p was measured by a build of this binary's kind; else 0, and why
 * gets the reason to follow "the cached ... were": "measured by a debug
 * build and this is a release build (run mtc bench-peak)" (a cache that
 * records no kind, from before the check, never matches; why may be NULL
 * with len 0). */
int mtc_peak_usable(const mtc_peak *p, char *why, size_t len);

#endif
