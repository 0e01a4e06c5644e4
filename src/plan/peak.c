/* plan/peak.c - this machine as a plan/ machine description: the fp32
 * GEMM rate of one core and of all cores (nn_sgemm on a square 512 GEMM,
 * the fastest of `iters`: other jobs on a shared machine only add time), the
 * rate at mtc's GEMM shapes and the share of a core the load leaves
 * (gemm_step_rates),
 * the copy bandwidth (memcpy of 64 MiB, read + write counted, fastest) and the shm collectives'
 * alpha and beta (comm/bench.h: 8 B and 1 MiB all-reduce on 2 rank-threads, and 8 B on twice as
 * many ranks as cores for the oversubscription penalty), what a collective waits for its peer
 * between compute phases (busy_coll), mtc's own kernels (plan/kernels.c) and the resident set
 * of a process without a model and of one rank-thread. A "device" of this machine is one core;
 * the planner gives a rank min(threads, cores / ranks) of them. Timings on a shared machine vary
 * run to run: the cache holds one measurement; run `mtc bench-peak` again to refresh it.
 * Also the cost of moving a page between a buffer and Megatron-FSDP's page pool (page_move). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mremap's MREMAP_DONTUNMAP */
#endif
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "comm/bench.h"
#include "core/mem.h"
#include "core/timer.h"
#include "nn/nn.h"
#include "plan/plan.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The fastest repetition. */
static double fastest(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[0];
}

/* FLOP/s of an n x n x n sgemm on a pool of `threads`. */
static mtc_result_t gemm_rate(int threads, int n, int iters, double *out) {
    nn_pool *pool = NULL;
    MTC_CHECK(nn_pool_create(threads, &pool));
    size_t nn = (size_t)n * n;
    float *a = malloc(nn * sizeof(float)), *b = malloc(nn * sizeof(float)),
          *c = malloc(nn * sizeof(float));
    double *t = malloc((size_t)iters * sizeof(double));
    mtc_result_t rc = a && b && c && t ? MTC_OK : mtc_error(MTC_ERR_OUT_OF_MEMORY, "bench-peak");
    for (size_t i = 0; rc == MTC_OK && i < nn; i++)
        a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.1f, c[i] = 0;
    if (rc == MTC_OK) nn_sgemm(pool, 0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n); /* warm-up */
    for (int it = 0; rc == MTC_OK && it < iters; it++) {
        uint64_t t0 = mtc_time_ns();
        nn_sgemm(pool, 0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        t[it] = (double)(mtc_time_ns() - t0) * 1e-9;
    }
    if (rc == MTC_OK) *out = 2.0 * n * n * (double)n / fastest(t, iters);
    free(a), free(b), free(c), free(t), nn_pool_free(pool);
    return rc;
}

/* The GEMMs of a training step: every core runs, on its own thread and
 * buffers, the three GEMMs of a linear layer at a small model's shape
 * (forward C = A B, backward dA = dC B^T and dW = A^T dC; M = 256 tokens,
 * K = 128, N = 512, the fc1 of the planner's test GPT) for a window as
 * long as a step (~0.2 s), all cores at once, `windows` times. Each thread
 * times itself on its CPU clock and on the wall clock:
 *   shape: FLOPs / CPU seconds, per core (the rate at mtc's shapes while a
 *          rank has its core, every core busy), the best window;
 *   share: FLOP/s of wall time over that, the best window: the fraction of
 *          a core a compute-bound thread gets over a step while other jobs
 *          load the machine (1 on an idle host). Linux shares the cores
 *          between sessions (autogroups) first, so a rank-thread of a later
 *          `mtc train` run from the same session gets this share too. */
enum { HOG_M = 256, HOG_K = 128, HOG_N = 512 };

typedef struct {
    float *a, *b, *c, *da, *dw;
    int reps;
    double cpu_s, wall_s;
} hog_arg;

static void *hog_thread(void *vp) {
    hog_arg *h = vp;
    double c0 = mtc_thread_cpu_s();
    uint64_t t0 = mtc_time_ns();
    for (int r = 0; r < h->reps; r++) {
        nn_sgemm(NULL, 0, 0, HOG_M, HOG_N, HOG_K, 1.0f, h->a, HOG_K, h->b, HOG_N, 0.0f, h->c,
                 HOG_N);
        nn_sgemm(NULL, 0, 1, HOG_M, HOG_K, HOG_N, 1.0f, h->c, HOG_N, h->b, HOG_N, 0.0f, h->da,
                 HOG_K);
        nn_sgemm(NULL, 1, 0, HOG_K, HOG_N, HOG_M, 1.0f, h->a, HOG_K, h->c, HOG_N, 0.0f, h->dw,
                 HOG_N);
    }
    h->cpu_s = mtc_thread_cpu_s() - c0;
    h->wall_s = (double)(mtc_time_ns() - t0) * 1e-9;
    return NULL;
}

static mtc_result_t gemm_step_rates(int cores, double burst_per_core, int windows, double *shape,
                                    double *share) {
    double rep_flops = 3.0 * 2.0 * HOG_M * HOG_N * (double)HOG_K;
    int reps = (int)(0.2 * burst_per_core / rep_flops) + 1;
    if (reps > 2000) reps = 2000;
    hog_arg *h = calloc((size_t)cores, sizeof *h);
    pthread_t *th = calloc((size_t)cores, sizeof *th);
    mtc_result_t rc = h && th ? MTC_OK : mtc_error(MTC_ERR_OUT_OF_MEMORY, "bench-peak: GEMMs");
    for (int i = 0; rc == MTC_OK && i < cores; i++) {
        h[i].a = calloc((size_t)HOG_M * HOG_K, sizeof(float));
        h[i].b = calloc((size_t)HOG_K * HOG_N, sizeof(float));
        h[i].c = calloc((size_t)HOG_M * HOG_N, sizeof(float));
        h[i].da = calloc((size_t)HOG_M * HOG_K, sizeof(float));
        h[i].dw = calloc((size_t)HOG_K * HOG_N, sizeof(float));
        if (!h[i].a || !h[i].b || !h[i].c || !h[i].da || !h[i].dw)
            rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "bench-peak: GEMM buffers");
        for (size_t k = 0; rc == MTC_OK && k < (size_t)HOG_M * HOG_K; k++)
            h[i].a[k] = (float)(k % 7) * 0.01f;
        for (size_t k = 0; rc == MTC_OK && k < (size_t)HOG_K * HOG_N; k++)
            h[i].b[k] = (float)(k % 5) * 0.01f;
    }
    if (rc == MTC_OK) { /* warm-up: oneDNN makes its kernels on first use */
        h[0].reps = 1;
        hog_thread(&h[0]);
    }
    double best_rate = 0, best_wall = 0;
    for (int w = 0; rc == MTC_OK && w < windows; w++) {
        int started = 0;
        for (int i = 0; i < cores; i++) {
            h[i].reps = reps;
            if (pthread_create(&th[i], NULL, hog_thread, &h[i]) != 0) break;
            started++;
        }
        for (int i = 0; i < started; i++)
            pthread_join(th[i], NULL);
        if (started < cores) {
            rc = mtc_error(MTC_ERR_SYSTEM, "bench-peak: could not start %d threads", cores);
            break;
        }
        double cpu = 0, wall = 0; /* FLOP/s per core of CPU time and of wall time */
        for (int i = 0; i < cores; i++) {
            cpu += h[i].cpu_s;
            wall += h[i].wall_s > 0 ? rep_flops * reps / h[i].wall_s / cores : 0;
        }
        double rate = cpu > 0 ? rep_flops * reps * cores / cpu : 0;
        if (rate > best_rate) best_rate = rate;
        if (wall > best_wall) best_wall = wall;
    }
    for (int i = 0; h && i < cores; i++)
        free(h[i].a), free(h[i].b), free(h[i].c), free(h[i].da), free(h[i].dw);
    free(h), free(th);
    if (rc == MTC_OK) {
        double sh = best_rate > 0 ? best_wall / best_rate : 0;
        *shape = best_rate, *share = sh > 1 ? 1 : sh;
    }
    return rc;
}

static mtc_result_t copy_bw(int iters, double *out) {
    size_t bytes = (size_t)64 << 20;
    char *a = malloc(bytes), *b = malloc(bytes);
    double *t = malloc((size_t)iters * sizeof(double));
    if (!a || !b || !t) {
        free(a), free(b), free(t);
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "bench-peak: copy buffers");
    }
    memset(a, 1, bytes), memset(b, 2, bytes);
    for (int it = 0; it < iters; it++) {
        uint64_t t0 = mtc_time_ns();
        memcpy(it % 2 ? a : b, it % 2 ? b : a, bytes);
        t[it] = (double)(mtc_time_ns() - t0) * 1e-9;
    }
    *out = 2.0 * (double)bytes / fastest(t, iters);
    free(a), free(b), free(t);
    return MTC_OK;
}

typedef struct {
    mtc_bench_opts b;
    double us[MTC_BENCH_MAX_SIZES];
} comm_job;

static void comm_row(const mtc_bench_row *row, void *ctx) {
    comm_job *j = ctx;
    for (int i = 0; i < j->b.nsizes; i++)
        if (j->b.sizes[i] == row->bytes) j->us[i] = row->time_us;
}

static mtc_result_t comm_rank(mtc_comm_t world, void *arg) {
    comm_job *j = arg;
    int ok = 1;
    return mtc_bench_comm(world, &j->b, &ok);
}

/* Median all-reduce times (us) of the given sizes on `ranks` rank-threads. */
static mtc_result_t comm_times(int ranks, const size_t *sizes, int n, int iters, double *us) {
    comm_job j;
    memset(&j, 0, sizeof j);
    j.b.ops[0] = MTC_COLL_ALL_REDUCE, j.b.nops = 1;
    j.b.algo = MTC_ALGO_AUTO;
    for (int i = 0; i < n; i++)
        j.b.sizes[i] = sizes[i];
    j.b.nsizes = n, j.b.iters = iters, j.b.warmup = 3, j.b.dtype = MTC_DTYPE_F32;
    j.b.row = comm_row, j.b.ctx = &j;
    mtc_launch_opts lo = {.backend = MTC_BACKEND_SHM, .world_size = ranks, .pin_threads = -1};
    MTC_CHECK(mtc_launch(&lo, comm_rank, &j));
    for (int i = 0; i < n; i++)
        us[i] = j.us[i];
    return MTC_OK;
}

/* Collectives between compute phases, as training issues them: each of 2
 * rank-threads runs a 256 x 128 x 128 GEMM (~0.1 ms, on buffers that push
 * the message out of cache) then a collective, BUSY_ITERS times, timing
 * each call: what a collective costs inside a step (the peers' skew, the
 * spin-then-sleep wait's wake-up, cold buffers, the algorithm's copies)
 * rather than back to back: an 8 B all-reduce, and an
 * all-gather and a reduce-scatter of a 128 KiB (b, s, h) tensor, the size
 * of the planner's test GPT's TP messages. */
enum { BUSY_M = 256, BUSY_K = 128, BUSY_ITERS = 200, BUSY_BYTES = 128 << 10, BUSY_OPS = 3 };

typedef struct {
    int op;           /* 0: all-reduce 8 B, 1: all-gather, 2: reduce-scatter of BUSY_BYTES */
    double call_s[2]; /* per rank: the median time of one call */
} busy_job;

static mtc_result_t busy_call(const busy_job *j, float *x, float *y, mtc_comm_t w) {
    size_t n = BUSY_BYTES / sizeof(float);
    if (j->op == 0) return mtc_all_reduce(x, y, 2, MTC_DTYPE_F32, MTC_OP_SUM, w);
    if (j->op == 1) return mtc_all_gather(x, y, n / 2, MTC_DTYPE_F32, w);
    return mtc_reduce_scatter(x, y, n / 2, MTC_DTYPE_F32, MTC_OP_SUM, w);
}

static mtc_result_t busy_rank(mtc_comm_t world, void *arg) {
    busy_job *j = arg;
    int r = mtc_comm_rank(world);
    float *a = calloc((size_t)BUSY_M * BUSY_K, sizeof(float));
    float *b = calloc((size_t)BUSY_K * BUSY_K, sizeof(float));
    float *c = calloc((size_t)BUSY_M * BUSY_K, sizeof(float));
    float *x = calloc(BUSY_BYTES / sizeof(float), sizeof(float));
    float *y = calloc(BUSY_BYTES / sizeof(float), sizeof(float));
    double *t = calloc(BUSY_ITERS, sizeof(double));
    mtc_result_t rc =
        a && b && c && x && y && t ? MTC_OK : mtc_error(MTC_ERR_OUT_OF_MEMORY, "bench-peak: busy");
    for (int i = 0; rc == MTC_OK && i < 5; i++) { /* warm-up */
        nn_sgemm(NULL, 0, 0, BUSY_M, BUSY_K, BUSY_K, 1.0f, a, BUSY_K, b, BUSY_K, 0.0f, c, BUSY_K);
        rc = busy_call(j, x, y, world);
    }
    if (rc == MTC_OK) rc = mtc_barrier(world);
    for (int i = 0; rc == MTC_OK && i < BUSY_ITERS; i++) {
        nn_sgemm(NULL, 0, 0, BUSY_M, BUSY_K, BUSY_K, 1.0f, a, BUSY_K, b, BUSY_K, 0.0f, c, BUSY_K);
        uint64_t t0 = mtc_time_ns();
        rc = busy_call(j, x, y, world);
        t[i] = (double)(mtc_time_ns() - t0) * 1e-9;
    }
    if (rc == MTC_OK) {
        qsort(t, BUSY_ITERS, sizeof t[0], cmp_double);
        j->call_s[r] = t[BUSY_ITERS / 2];
        rc = mtc_barrier(world);
    }
    free(a), free(b), free(c), free(x), free(y), free(t);
    return rc;
}

/* Seconds each op costs between compute phases on 2 rank-threads: per
 * call the median over the calls (a preempted peer's rare long waits are
 * the load's, which cpu_share prices), the larger of the two ranks' (the
 * one that arrives first waits); the median of `reps` runs. */
static mtc_result_t busy_coll(int reps, double out[BUSY_OPS]) {
    double v[BUSY_OPS][9];
    if (reps > 9) reps = 9;
    for (int k = 0; k < reps; k++)
        for (int op = 0; op < BUSY_OPS; op++) {
            busy_job j;
            memset(&j, 0, sizeof j);
            j.op = op;
            mtc_launch_opts lo = {.backend = MTC_BACKEND_SHM, .world_size = 2, .pin_threads = -1};
            MTC_CHECK(mtc_launch(&lo, busy_rank, &j));
            v[op][k] = j.call_s[0] > j.call_s[1] ? j.call_s[0] : j.call_s[1];
        }
    for (int op = 0; op < BUSY_OPS; op++) {
        qsort(v[op], (size_t)reps, sizeof v[op][0], cmp_double);
        out[op] = v[op][reps / 2];
    }
    return MTC_OK;
}

/* Ranks outnumbering the cores (mtc_plan_oversub_probe; plan.h). */
enum { OVS_ITERS = 2000, OVS_REPS = 9 }; /* ~0.3 and ~0.6 s a run: many scheduler slices */

/* One run: iters x (a 256 x K x K GEMM, an 8 B all-reduce of the world);
 * on rank 0 *extra = the wall time per iteration beyond the GEMMs' CPU
 * time (summed over the ranks) / cores, *ideal = the latter. */
static mtc_result_t ovs_run(mtc_comm_t world, int cores, int K, int iters, double *extra,
                            double *ideal) {
    float *a = calloc((size_t)BUSY_M * K, sizeof(float)), *b = calloc((size_t)K * K, 4);
    float *c = calloc((size_t)BUSY_M * K, sizeof(float)), x[2] = {1, 2}, y[2];
    mtc_result_t rc = a && b && c ? MTC_OK : mtc_error(MTC_ERR_OUT_OF_MEMORY, "bench-peak");
    for (int i = 0; rc == MTC_OK && i < 3; i++) { /* warm-up */
        nn_sgemm(NULL, 0, 0, BUSY_M, K, K, 1.0f, a, K, b, K, 0.0f, c, K);
        rc = mtc_all_reduce(x, y, 2, MTC_DTYPE_F32, MTC_OP_SUM, world);
    }
    if (rc == MTC_OK) rc = mtc_barrier(world);
    uint64_t t0 = mtc_time_ns();
    double g = 0, gsum = 0;
    for (int i = 0; rc == MTC_OK && i < iters; i++) {
        double c0 = mtc_thread_cpu_s();
        nn_sgemm(NULL, 0, 0, BUSY_M, K, K, 1.0f, a, K, b, K, 0.0f, c, K);
        g += mtc_thread_cpu_s() - c0;
        rc = mtc_all_reduce(x, y, 2, MTC_DTYPE_F32, MTC_OP_SUM, world);
    }
    if (rc == MTC_OK) rc = mtc_barrier(world);
    double wall = (double)(mtc_time_ns() - t0) * 1e-9;
    if (rc == MTC_OK) rc = mtc_all_reduce(&g, &gsum, 1, MTC_DTYPE_F64, MTC_OP_SUM, world);
    *ideal = gsum / cores / iters, *extra = wall / iters - *ideal;
    free(a), free(b), free(c);
    return rc;
}

mtc_result_t mtc_plan_oversub_probe(mtc_comm_t world, int cores, int reps, double *sync,
                                    double *frac) {
    double e1[OVS_REPS], i1[OVS_REPS], e2[OVS_REPS], i2[OVS_REPS];
    if (cores < 1) cores = 1;
    if (reps < 1) reps = 1;
    if (reps > OVS_REPS) reps = OVS_REPS;
    for (int k = 0; k < reps; k++) {
        MTC_CHECK(ovs_run(world, cores, BUSY_K, OVS_ITERS, &e1[k], &i1[k]));
        MTC_CHECK(ovs_run(world, cores, 4 * BUSY_K, OVS_ITERS / 10, &e2[k], &i2[k]));
    }
    double a1 = mtc_median(e1, reps), x1 = mtc_median(i1, reps);
    double a2 = mtc_median(e2, reps), x2 = mtc_median(i2, reps);
    double b = x2 > x1 ? (a2 - a1) / (x2 - x1) : 0;
    if (b < 0) b = 0;
    double a = a1 - b * x1;
    *sync = a > 0 ? a : 0, *frac = b;
    return MTC_OK;
}

typedef struct {
    int cores;
    double sync, frac;
} ovs_job;

static mtc_result_t ovs_rank(mtc_comm_t world, void *arg) {
    ovs_job *j = arg;
    double s, f;
    MTC_CHECK(mtc_plan_oversub_probe(world, j->cores, 5, &s, &f));
    if (mtc_comm_rank(world) == 0) j->sync = s, j->frac = f;
    return MTC_OK;
}

/* The probe on twice as many rank-threads as cores. */
static mtc_result_t oversub_threads(int cores, double *sync, double *frac) {
    ovs_job j = {.cores = cores};
    mtc_launch_opts lo = {.backend = MTC_BACKEND_SHM,
                          .world_size = MTC_PLAN_OVERSUB_PER_CORE * cores,
                          .pin_threads = -1};
    MTC_CHECK(mtc_launch(&lo, ovs_rank, &j));
    *sync = j.sync, *frac = j.frac;
    return MTC_OK;
}

/* The resident set a rank-thread adds to its process beyond its model:
 * its stack (the tiled attention keeps its tiles there), its malloc arena,
 * oneDNN's per-thread state. Each rank runs a GEMM and an attention
 * forward on buffers it frees, then rank 0 reads the process's VmRSS while
 * every rank is alive. */
typedef struct {
    double rss;
} rss_job;

static mtc_result_t rss_rank(mtc_comm_t world, void *arg) {
    rss_job *j = arg;
    enum { T = 128, C = 128 };
    float *qkv = calloc((size_t)T * 3 * C, sizeof(float)), *out = calloc((size_t)T * C, 4);
    float *lse = calloc((size_t)2 * T, sizeof(float)), *c = calloc((size_t)T * 3 * C, 4);
    mtc_result_t rc = qkv && out && lse && c ? MTC_OK : mtc_error(MTC_ERR_OUT_OF_MEMORY, "rss");
    if (rc == MTC_OK) {
        nn_sgemm(NULL, 0, 0, T, C, C, 1.0f, qkv, 3 * C, qkv, 3 * C, 0.0f, c, C);
        nn_attention_shape sh = nn_attention_shape_qkv(1, T, 2, C / 2);
        nn_attention_forward(NULL, out, lse, qkv, qkv + C, qkv + 2 * C, &sh, NULL);
    }
    free(qkv), free(out), free(lse), free(c);
    if (rc == MTC_OK) rc = mtc_barrier(world);
    if (rc == MTC_OK && mtc_comm_rank(world) == 0) j->rss = mtc_mem_proc_status("VmRSS");
    if (rc == MTC_OK) rc = mtc_barrier(world);
    return rc;
}

/* Bytes of resident set per rank-thread: R = 2 and R = 2 x cores ranks. */
static mtc_result_t rank_rss(int cores, double *out) {
    rss_job a = {0}, b = {0};
    int n = 2 * cores > 2 ? 2 * cores : 3;
    mtc_launch_opts lo = {.backend = MTC_BACKEND_SHM, .world_size = 2, .pin_threads = -1};
    MTC_CHECK(mtc_launch(&lo, rss_rank, &a));
    lo.world_size = n;
    MTC_CHECK(mtc_launch(&lo, rss_rank, &b));
    *out = b.rss > a.rss ? (b.rss - a.rss) / (n - 2) : 0;
    return MTC_OK;
}

/* Seconds of CPU time per 4 KiB page that dp/fsdp.c's page pool spends
 * moving a released unit's pages into a slot and a gathered unit's back
 * (mremap(2) MREMAP_DONTUNMAP of 12 MiB each way after mincore(2) of the
 * range, as fsdp_release_bucket / fsdp_acquire do), the median of 7;
 * 0 when the kernel has no MREMAP_DONTUNMAP. */
static inline void cpu_relax_spin(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *page_spin(void *arg) { /* another thread of the process, running */
    volatile int *stop = arg;
    while (!*stop)
        cpu_relax_spin();
    return NULL;
}

static double page_move_cost(void) {
#ifdef MREMAP_DONTUNMAP
    /* a page past a 2 MiB boundary, as a unit's ranges start: aligned
     * ranges would move whole page tables at once */
    const size_t pg = 4096, n = ((size_t)12 << 20) - 3 * pg, map = (size_t)16 << 20;
    char *ma = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *mb =
        mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    unsigned char *vec = malloc(n / pg + 1);
    double t[7], r = 0;
    int ok = ma != MAP_FAILED && mb != MAP_FAILED && vec;
    char *a = ok ? ma + pg : NULL, *b = ok ? mb + 2 * pg : NULL;
#ifdef MADV_NOHUGEPAGE
    if (ok) (void)madvise(ma, map, MADV_NOHUGEPAGE), (void)madvise(mb, map, MADV_NOHUGEPAGE);
#endif
    if (ok) memset(a, 1, n); /* resident, as a gathered unit */
    /* rank-threads run on the other cores meanwhile: each move shoots
     * down their TLBs too (the inter-processor interrupts are its cost) */
    volatile int stop = 0;
    pthread_t th;
    int spun = ok && pthread_create(&th, NULL, page_spin, (void *)&stop) == 0;
    for (int i = 0; ok && i < 7; i++) {
        double c0 = mtc_thread_cpu_s();
        ok = mincore(b, n, vec) == 0 &&
             mremap(a, n, n, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, b) == b &&
             mincore(a, n, vec) == 0 &&
             mremap(b, n, n, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, a) == a;
        t[i] = (mtc_thread_cpu_s() - c0) / 2 / (double)(n / pg);
    }
    stop = 1;
    if (spun) pthread_join(th, NULL);
    if (ok) qsort(t, 7, sizeof t[0], cmp_double), r = t[3];
    if (ma != MAP_FAILED) munmap(ma, map);
    if (mb != MAP_FAILED) munmap(mb, map);
    free(vec);
    return r;
#else
    return 0;
#endif
}

mtc_result_t mtc_plan_measure_host(mtc_plan_machine *m, int iters, FILE *log) {
    if (iters < 1) return mtc_error(MTC_ERR_INVALID_ARGUMENT, "iters=%d must be >= 1", iters);
    memset(m, 0, sizeof *m);
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGE_SIZE);
    double one = 0, all = 0, bw = 0;
    MTC_CHECK(gemm_rate(1, 512, iters, &one));
    MTC_CHECK(gemm_rate(cores, 512, iters, &all));
    MTC_CHECK(copy_bw(iters, &bw));
    size_t sizes[2] = {8, (size_t)1 << 20};
    double us[2] = {0, 0}, over[1] = {0};
    MTC_CHECK(comm_times(2, sizes, 2, iters * 5, us));
    MTC_CHECK(comm_times(2 * cores, sizes, 1, iters * 5, over));
    double busy[BUSY_OPS] = {0, 0, 0};
    MTC_CHECK(busy_coll(5, busy));
    snprintf(m->name, sizeof m->name, "this");
    snprintf(m->description, sizeof m->description,
             "this host as measured by mtc bench-peak: %d cores (one core = one device), shm "
             "rank-threads",
             cores);
    m->is_cpu = 1;
    m->devices_per_node = cores;
    /* a core's rate: the all-core figure over the cores when it is the
     * smaller (shared caches and memory bus), else the one-core figure */
    double per_core = all / cores < one ? all / cores : one;
    m->peak_flops_fp32 = per_core;
    MTC_CHECK(gemm_step_rates(cores, per_core, iters / 3 > 3 ? iters / 3 : 3, &m->shape_flops_fp32,
                              &m->cpu_share));
    MTC_CHECK(mtc_plan_measure_kernels(&m->kern, cores, 5));
    /* the resident set of a process that has run mtc's kernels, a pool's
     * GEMMs and shm rank-threads but holds no model (code, BLAS / oneDNN /
     * OpenMP state; the 64 MiB copy buffers are unmapped again): every mtc
     * process holds this besides its allocation; glibc keeps freed heap
     * pages resident until trimmed */
    malloc_trim(0); /* the freed measurement buffers are not the process's */
    m->kern.base_rss = mtc_mem_proc_status("VmRSS");
    MTC_CHECK(rank_rss(cores, &m->kern.rank_rss));
    /* after the resident set: what these leave behind (oneDNN's kernels
     * for their shapes, the probe's threads' state) is not every process's */
    MTC_CHECK(mtc_plan_measure_moe_kernels(&m->kern, cores, 5));
    m->kern.page_move = page_move_cost();
    double ovs_sync = 0, ovs_frac = 0;
    MTC_CHECK(oversub_threads(cores, &ovs_sync, &ovs_frac));
    m->peak_flops = 0; /* bf16 GEMMs: not measured here */
    m->achieved = 1.0; /* the rate is measured, not a data-sheet peak */
    m->mem_bytes = pages > 0 && psize > 0 ? (double)pages * (double)psize : 0;
    m->mem_bw = bw;
    /* two ranks: all-reduce = 2 (n-1)/n bytes/bw + 2 (n-1) lat = bytes/bw + 2 lat */
    m->intra.lat = us[0] * 1e-6 / 2;
    double t1 = us[1] * 1e-6 - 2 * m->intra.lat;
    m->intra.bw = t1 > 0 ? (double)sizes[1] / t1 : bw;
    /* a collective between compute phases waits for its peer once per call
     * (the skew, the wake-up): each op's call beyond its alpha-beta time
     * (all-reduce: 2 steps; all-gather, reduce-scatter on 2 ranks: one step
     * moving half the tensor), the median of the three */
    double half = (double)BUSY_BYTES / 2 / m->intra.bw,
           sy[BUSY_OPS] = {busy[0] - 2 * m->intra.lat, busy[1] - m->intra.lat - half,
                           busy[2] - m->intra.lat - half};
    qsort(sy, BUSY_OPS, sizeof sy[0], cmp_double);
    m->intra.sync = sy[1] > 0 ? sy[1] : 0;
    m->inter = m->intra; /* one host: no second node */
    int n = 2 * cores;
    double per_step = over[0] * 1e-6 / (2.0 * (n - 1));
    m->oversub_lat = per_step > m->intra.lat ? per_step - m->intra.lat : 0;
    /* the probe's wall time also carries other jobs' load (a rank-thread
     * gets cpu_share of a core), which the planner prices apart (it divides
     * the compute by the share): take it out, so the load is not counted
     * twice (1 + frac = wall / CPU-over-cores = (1 + frac_own) / share) */
    double sh = m->cpu_share > 0 && m->cpu_share < 1 ? m->cpu_share : 1;
    m->oversub_sync = ovs_sync * sh;
    m->oversub_frac = (1 + ovs_frac) * sh - 1 > 0 ? (1 + ovs_frac) * sh - 1 : 0;
    if (log)
        fprintf(log,
                "> GEMM fp32 %dx%dx%d forward and backward on every core for 0.2 s: %.2f GFLOP/s "
                "per core of CPU time; a compute-bound thread got %.2f of a core (the load)\n",
                HOG_M, HOG_N, HOG_K, m->shape_flops_fp32 * 1e-9, m->cpu_share);
    const mtc_plan_kernels *k = &m->kern;
    if (log)
        fprintf(log,
                "> kernels (ns per element, one thread, every core busy, CPU time): norm %.2f / "
                "%.2f, GELU %.2f / %.2f, dropout %.2f, residual %.2f, cross-entropy %.2f, Adam "
                "%.2f; attention per 64x64 tile %.0f + %.1f HS / %.0f + %.1f HS, dropout %.2f per "
                "score; a layer's linears %.2f GFLOP/s + %.2f us per call; an MoE layer beside its "
                "GEMMs %.2f / %.2f per row element; process resident %.1f MB + %.2f MB per "
                "rank-thread; a page moved to or from the FSDP pool %.0f ns\n",
                k->norm_fwd * 1e9, k->norm_bwd * 1e9, k->gelu_fwd * 1e9, k->gelu_bwd * 1e9,
                k->dropout * 1e9, k->resid * 1e9, k->xent * 1e9, k->adam * 1e9,
                k->attn_fwd_tile * 1e9, k->attn_fwd_hs * 1e9, k->attn_bwd_tile * 1e9,
                k->attn_bwd_hs * 1e9, k->attn_drop * 1e9, k->gemm_rate * 1e-9, k->gemm_call * 1e6,
                k->moe_row_fwd * 1e9, k->moe_row_bwd * 1e9, k->base_rss / 1048576.0,
                k->rank_rss / 1048576.0, k->page_move * 1e9);
    if (log)
        fprintf(
            log,
            "> GEMM fp32 512^3: %.2f GFLOP/s on 1 core, %.2f GFLOP/s on %d cores; copy %.2f "
            "GB/s\n> shm all-reduce on 2 ranks: 8 B %.2f us, 1 MiB %.2f us (lat %.2f us, bw "
            "%.2f GB/s); 8 B on %d ranks %.2f us (oversubscription +%.2f us per step); 8 B between "
            "GEMMs %.2f us, 128 KiB all-gather %.2f us and reduce-scatter %.2f us (a call waits "
            "%.2f us for its peer); %d rank-threads on %d cores between GEMMs: +%.1f us per call "
            "and +%.1f%% of the compute\n",
            one * 1e-9, all * 1e-9, cores, bw * 1e-9, us[0], us[1], m->intra.lat * 1e6,
            m->intra.bw * 1e-9, n, over[0], m->oversub_lat * 1e6, busy[0] * 1e6, busy[1] * 1e6,
            busy[2] * 1e6, m->intra.sync * 1e6, MTC_PLAN_OVERSUB_PER_CORE * cores, cores,
            m->oversub_sync * 1e6, m->oversub_frac * 100);
    return MTC_OK;
}
