/* tests/pp/bench_executor.c - the pipeline bubble of the executor,
 * measured, against the dependency simulation and the paper's (p-1)/(m*v).
 * Built as pp_bench_executor (not a ctest: timings are not asserted); run by
 * bench/pipeline.sh.
 *
 * Each rank-thread runs the executor with a toy model whose forward of one
 * chunk is a busy loop of UNIT/v (timed by the clock) and whose backward is 2*UNIT/v
 * (a rank's work per microbatch is the same for every v, as when the same
 * layers are cut into v chunks). Per repetition: a barrier, then one
 * iteration; busy_r = time rank r spent in callbacks; makespan = last end -
 * first start over all ranks; bubble_r = (makespan - busy_r) / busy_r. The
 * table shows the least over repetitions of the ranks' mean bubble (other
 * processes only ever add idle time, so the least disturbed repetition is
 * the best estimate) with the median beside it, next
 * to the same orders on an ideal machine: exec-sim with the executor's
 * blocking exchanges (pp_plan_simulate), sched-sim with free asynchronous
 * transfers (pp_schedule_simulate), and the paper's closed form.
 * Messages are `--count` floats (default 4096 = 16 KiB) over shm.
 *
 * usage: pp_bench_executor [--unit-us U] [--reps R] [--pp P] [--count N]
 *        defaults U=2000, R=5, P=2; configurations vpp in {1,2} x M in
 *        {2,4,8,16} (only those valid for Megatron). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/timer.h"
#include "pp/executor.h"

/* Busy loop of `ns` nanoseconds of wall time: compute that keeps the core,
 * calibrated against the clock rather than an iteration count, so its
 * length does not depend on the CPU's frequency or on a calibration run
 * that another process disturbed. */
static void spin_ns(uint64_t ns) {
    volatile double x = 1.0;
    uint64_t end = mtc_time_ns() + ns;
    while (mtc_time_ns() < end)
        for (int i = 0; i < 64; i++)
            x = x * 1.0000001 + 1e-9;
}

typedef struct {
    pp_schedule_config sc;
    size_t count;
    double unit_us;
    int reps;
    /* per rank, per rep */
    double *start, *end, *busy; /* seconds */
} bench_world;

typedef struct {
    uint64_t fwd_ns, bwd_ns;
    double busy;
} bench_rank;

static mtc_result_t bench_forward(void *ctx, int mb, int chunk, const float *in, float *out) {
    (void)mb, (void)chunk, (void)in;
    bench_rank *b = ctx;
    uint64_t t0 = mtc_time_ns();
    spin_ns(b->fwd_ns);
    if (out) out[0] = 1.0f;
    b->busy += (double)(mtc_time_ns() - t0) * 1e-9;
    return MTC_OK;
}

static mtc_result_t bench_backward(void *ctx, int mb, int chunk, const float *gout, float *gin) {
    (void)mb, (void)chunk, (void)gout;
    bench_rank *b = ctx;
    uint64_t t0 = mtc_time_ns();
    spin_ns(b->bwd_ns);
    if (gin) gin[0] = 1.0f;
    b->busy += (double)(mtc_time_ns() - t0) * 1e-9;
    return MTC_OK;
}

static mtc_result_t bench_rank_fn(mtc_comm_t world, void *arg) {
    bench_world *w = arg;
    int r = mtc_comm_rank(world), v = pp_schedule_vpp(&w->sc);
    bench_rank b = {.fwd_ns = (uint64_t)(1e3 * w->unit_us / v),
                    .bwd_ns = (uint64_t)(2e3 * w->unit_us / v)};
    pp_executor_config ec = {w->sc, w->count, NULL};
    pp_executor_t ex;
    pp_channels ch = {0}; /* the pipeline channels, as the grid splits them */
    if (w->sc.pp > 1) {
        MTC_CHECK(mtc_comm_split(world, 0, r, "PIPELINE_ACTIVATIONS", &ch.act));
        MTC_CHECK(mtc_comm_split(world, 0, r, "PIPELINE_GRADIENTS", &ch.grad));
    }
    MTC_CHECK(pp_executor_init(&ex, &ec, &ch, NULL));
    pp_callbacks cb = {bench_forward, bench_backward, &b, NULL};
    mtc_result_t rc = pp_executor_run(ex, &cb, 0, NULL, NULL); /* warm-up */
    for (int i = 0; i < w->reps && rc == MTC_OK; i++) {
        MTC_CHECK_GOTO(mtc_barrier(world), rc, out);
        b.busy = 0;
        double t0 = mtc_time_s();
        MTC_CHECK_GOTO(pp_executor_run(ex, &cb, 0, NULL, NULL), rc, out);
        size_t k = (size_t)r * (size_t)w->reps + (size_t)i;
        w->start[k] = t0, w->end[k] = mtc_time_s(), w->busy[k] = b.busy;
    }
out:
    pp_executor_free(ex);
    mtc_comm_free(ch.act), mtc_comm_free(ch.grad);
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double simulated_bubble(const pp_schedule_config *sc) {
    int pp = sc->pp, v = pp_schedule_vpp(sc), max_ops = pp_schedule_max_ops(sc);
    pp_op *ops = calloc((size_t)pp * (size_t)max_ops, sizeof *ops);
    pp_sim_span *spans = calloc((size_t)pp * (size_t)max_ops, sizeof *spans);
    pp_schedule_counts *counts = calloc((size_t)pp, sizeof *counts);
    double makespan = 0, bubble = -1;
    int ok = 1;
    for (int r = 0; r < pp && ok; r++)
        ok = pp_schedule_build(ops + (size_t)r * max_ops, &counts[r], sc, r) == MTC_OK;
    if (ok && pp_schedule_simulate(spans, &makespan, ops, counts, sc, 1.0 / v, 2.0 / v) == MTC_OK)
        bubble = pp_sim_bubble_fraction(makespan, sc, 1.0 / v, 2.0 / v);
    free(ops), free(spans), free(counts);
    return bubble;
}

/* The same with the executor's blocking exchanges (pp_plan_simulate). */
static double plan_bubble(const pp_schedule_config *sc) {
    int pp = sc->pp, v = pp_schedule_vpp(sc), ok = 1;
    pp_plan *plans = calloc((size_t)pp, sizeof *plans);
    double makespan = 0, bubble = -1;
    for (int r = 0; r < pp && ok; r++)
        ok = pp_plan_build(&plans[r], sc, r) == MTC_OK;
    if (ok && pp_plan_simulate(&makespan, plans, pp, 1.0 / v, 2.0 / v) == MTC_OK)
        bubble = pp_sim_bubble_fraction(makespan, sc, 1.0 / v, 2.0 / v);
    for (int r = 0; r < pp; r++)
        pp_plan_free(&plans[r]);
    free(plans);
    return bubble;
}

int main(int argc, char **argv) {
    double unit_us = 2000;
    int reps = 5, pp = 2;
    size_t count = 4096;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--unit-us"))
            unit_us = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--pp"))
            pp = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--count"))
            count = (size_t)atol(argv[i + 1]);
        else {
            fprintf(stderr, "pp_bench_executor: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (unit_us <= 0 || reps < 1 || pp < 1 || count < 1) {
        fprintf(stderr, "pp_bench_executor: --unit-us, --reps, --pp, --count must be positive\n");
        return 2;
    }
    printf(
        "pipeline bubble of the executor: pp=%d, forward %g us, backward %g us per "
        "microbatch and rank (split over vpp chunks), %zu-float messages, best and median of %d\n",
        pp, unit_us, 2 * unit_us, count, reps);
    printf("%4s %4s %4s %10s %10s %10s %10s %10s %12s %10s\n", "pp", "vpp", "M", "measured",
           "(median)", "exec-sim", "sched-sim", "(p-1)/(mv)", "meas/formula", "best ms");
    int ms[] = {2, 4, 8, 16}, status = 0;
    for (int v = 1; v <= 2; v++)
        for (size_t j = 0; j < sizeof ms / sizeof *ms; j++) {
            bench_world w = {
                .sc = {pp, v, ms[j], 0, 0}, .count = count, .unit_us = unit_us, .reps = reps};
            if (pp_schedule_validate(&w.sc) != MTC_OK) continue;
            size_t n = (size_t)pp * (size_t)reps;
            w.start = calloc(n, sizeof(double)), w.end = calloc(n, sizeof(double));
            w.busy = calloc(n, sizeof(double));
            mtc_launch_opts lo = {.backend = MTC_BACKEND_SHM, .world_size = pp, .pin_threads = -1};
            mtc_result_t rc = mtc_launch(&lo, bench_rank_fn, &w);
            if (rc != MTC_OK) {
                fprintf(stderr, "pp_bench_executor: pp=%d vpp=%d M=%d: %s\n", pp, v, ms[j],
                        mtc_error_detail());
                status = 1;
            } else {
                double *bub = calloc((size_t)reps, sizeof(double));
                double *len = calloc((size_t)reps, sizeof(double));
                for (int i = 0; i < reps; i++) {
                    double first = 1e300, last = -1e300, sum = 0;
                    for (int r = 0; r < pp; r++) {
                        size_t k = (size_t)r * (size_t)reps + (size_t)i;
                        if (w.start[k] < first) first = w.start[k];
                        if (w.end[k] > last) last = w.end[k];
                    }
                    for (int r = 0; r < pp; r++) {
                        double busy = w.busy[(size_t)r * (size_t)reps + (size_t)i];
                        sum += (last - first - busy) / busy;
                    }
                    bub[i] = sum / pp, len[i] = (last - first) * 1e3;
                }
                qsort(bub, (size_t)reps, sizeof(double), cmp_double);
                qsort(len, (size_t)reps, sizeof(double), cmp_double);
                double formula = pp_bubble_formula(&w.sc), meas = bub[0];
                printf("%4d %4d %4d %10.4f %10.4f %10.4f %10.4f %10.4f %12.3f %10.2f\n", pp, v,
                       ms[j], meas, bub[reps / 2], plan_bubble(&w.sc), simulated_bubble(&w.sc),
                       formula, formula > 0 ? meas / formula : 0.0, len[0]);
                free(bub), free(len);
            }
            free(w.start), free(w.end), free(w.busy);
        }
    return status;
}
