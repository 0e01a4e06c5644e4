/* train/train_obs.c - what a rank records of its own run: Megatron's timers
 * (always on: two clock reads per timed region), the trace recorder
 * (core/trace.h) attached to the rank's communicators when --trace /
 * --profile or --metrics asks for it, the timer block printed at each log
 * with min/max across ranks and the measured pipeline bubble beside the
 * formula, the per-group communication totals of --metrics, and the one
 * trace file assembled from every rank's events on the last rank.
 *
 * Timer names and levels are Megatron's (training.py's timers_to_log):
 * level 1 forward-backward, all-grads-sync, layernorm-grads-all-reduce,
 * embedding-grads-all-reduce, params-all-gather, optimizer-clip-main-grad,
 * optimizer-inner-step, optimizer; level 2 adds forward-compute,
 * backward-compute, batch-generator and the pipeline transfer timers. mtc
 * issues a pipeline exchange as two phases (pp/executor.h), so its transfer
 * timers are the phases' names (forward-send, forward-recv,
 * forward-send-forward-recv and the backward ones); Megatron's mixed names
 * (forward-send-backward-recv, ...) do not occur. optimizer-clip-main-grad
 * is the gradient norm (the clipping itself is folded into AdamW); the
 * logged loss's DP all-reduce is a span (loss-all-reduce) but not printed; the
 * param all-gather of the distributed optimizer's step is inside
 * optimizer-inner-step (params-all-gather times the waits before a pass).
 * Relies on comm/, core/trace.h, pp/executor.h. Does not print the log line
 * (train.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/timer.h"
#include "core/trace.h"
#include "core/outfile.h"
#include "train/train_internal.h"

static const char *train_timer_name(int id) {
    static const char *const names[TRAIN_T_COUNT] = {
        [TRAIN_T_FORWARD_BACKWARD] = "forward-backward",
        [TRAIN_T_FORWARD_COMPUTE] = "forward-compute",
        [TRAIN_T_BACKWARD_COMPUTE] = "backward-compute",
        [TRAIN_T_BATCH_GENERATOR] = "batch-generator",
        [TRAIN_T_ALL_GRADS_SYNC] = "all-grads-sync",
        [TRAIN_T_LAYERNORM_GRADS] = "layernorm-grads-all-reduce",
        [TRAIN_T_EMBEDDING_GRADS] = "embedding-grads-all-reduce",
        [TRAIN_T_PARAMS_ALL_GATHER] = "params-all-gather",
        [TRAIN_T_OPTIMIZER_CLIP] = "optimizer-clip-main-grad",
        [TRAIN_T_OPTIMIZER_INNER] = "optimizer-inner-step",
        [TRAIN_T_OPTIMIZER] = "optimizer",
        [TRAIN_T_LOSS_REDUCE] = "loss-all-reduce"};
    if (id >= TRAIN_T_P2P_FIRST && id < TRAIN_T_P2P_FIRST + PP_P2P_KIND_COUNT)
        return pp_p2p_name(id - TRAIN_T_P2P_FIRST);
    return id >= 0 && id < TRAIN_T_COUNT ? names[id] : "?";
}

static int train_timer_level(int id) {
    if (id == TRAIN_T_LOSS_REDUCE) return 3; /* not one of Megatron's: never printed */
    return id == TRAIN_T_FORWARD_COMPUTE || id == TRAIN_T_BACKWARD_COMPUTE ||
                   id == TRAIN_T_BATCH_GENERATOR ||
                   (id >= TRAIN_T_P2P_FIRST && id < TRAIN_T_P2P_FIRST + PP_P2P_KIND_COUNT)
               ? 2
               : 1;
}

/* Megatron's print order. */
static const int timer_order[TRAIN_T_COUNT] = {
    TRAIN_T_FORWARD_BACKWARD, TRAIN_T_FORWARD_COMPUTE,   TRAIN_T_BACKWARD_COMPUTE,
    TRAIN_T_BATCH_GENERATOR,  TRAIN_T_P2P_FIRST + 1,     TRAIN_T_P2P_FIRST + 0,
    TRAIN_T_P2P_FIRST + 4,    TRAIN_T_P2P_FIRST + 3,     TRAIN_T_P2P_FIRST + 2,
    TRAIN_T_P2P_FIRST + 5,    TRAIN_T_LAYERNORM_GRADS,   TRAIN_T_EMBEDDING_GRADS,
    TRAIN_T_ALL_GRADS_SYNC,   TRAIN_T_PARAMS_ALL_GATHER, TRAIN_T_OPTIMIZER_CLIP,
    TRAIN_T_OPTIMIZER_INNER,  TRAIN_T_OPTIMIZER,         TRAIN_T_LOSS_REDUCE};

mtc_result_t train_obs_setup(train_rank *x, mtc_comm_t world) {
    const mtc_train_config *c = x->cfg;
    x->obs.world = world;
    if (!c->trace_path && !c->metrics_path) return MTC_OK;
    const mtc_grid_coord *co = mtc_grid_coords(x->grid);
    char name[128];
    snprintf(name, sizeof name, "rank %d (tp %d cp %d dp %d pp %d ep %d)", x->world_rank, co->tp,
             co->cp, co->dp, co->pp, co->ep);
    MTC_CHECK(mtc_trace_init(&x->obs.trace, x->world_rank, name));
    mtc_trace_set_limit(x->obs.trace,
                        c->trace_buffer_mb > 0 ? (size_t)(c->trace_buffer_mb * 1048576.0) : 0);
    /* one origin: on one host every rank reads the same CLOCK_MONOTONIC, so
     * rank 0's reading after a barrier aligns them exactly; across hosts each
     * rank's own reading after the barrier (aligned to the barrier's skew) */
    MTC_CHECK(mtc_barrier(world));
    int64_t origin = (int64_t)mtc_time_ns();
    if (mtc_comm_node_count(world) == 1)
        MTC_CHECK(mtc_broadcast(&origin, 1, MTC_DTYPE_I64, 0, world));
    mtc_trace_set_origin(x->obs.trace, (uint64_t)origin);
    mtc_comm_set_trace(world, x->obs.trace);
    return MTC_OK;
}

void train_obs_free(train_rank *x) {
    if (x->obs.world && x->obs.trace) mtc_comm_set_trace(x->obs.world, NULL);
    mtc_trace_free(x->obs.trace);
    x->obs.trace = NULL;
}

void train_obs_iteration(train_rank *x, int64_t it) {
    const mtc_train_config *c = x->cfg;
    if (!x->obs.trace || !c->trace_path) return;
    mtc_trace_window(x->obs.trace, it > c->profile_step_start && it <= c->profile_step_end);
}

uint64_t train_obs_span(train_rank *x, train_timer id, uint64_t t0, const char *name,
                        const char *args) {
    uint64_t t1 = mtc_time_ns();
    if (x->cur_train) x->obs.timer_ns[id] += t1 - t0;
    if (mtc_trace_recording(x->obs.trace))
        mtc_trace_span(x->obs.trace, MTC_TRACK_COMPUTE, name ? name : train_timer_name(id),
                       train_timer_name(id), t0, t1, args);
    return t1;
}

void train_obs_exchanged(void *ctx, int kind, uint64_t t0, uint64_t t1) {
    train_rank *x = ctx;
    (void)t1;
    train_obs_span(x, (train_timer)(TRAIN_T_P2P_FIRST + kind), t0, NULL, NULL);
}

/* "name ......: " padded as Megatron's (name + ' ').ljust(48, '.'). */
static void timer_label(char *buf, size_t len, const char *name) {
    int n = snprintf(buf, len, "%s ", name);
    while (n < 48 && (size_t)n + 1 < len)
        buf[n++] = '.';
    buf[n] = 0;
}

mtc_result_t train_obs_log(train_rank *x, FILE *out, int n) {
    const mtc_train_config *c = x->cfg;
    if (c->timing_log_level <= 0 || n < 1) return MTC_OK;
    int W = mtc_comm_size(x->obs.world);
    double mine[TRAIN_T_COUNT], *all = NULL;
    for (int i = 0; i < TRAIN_T_COUNT; i++)
        mine[i] = (double)x->obs.timer_ns[i] * 1e-6 / n;
    MTC_CHECK(mtc_mem_alloc((size_t)W * TRAIN_T_COUNT * sizeof(double), (void **)&all));
    /* comm: all-gather(world) of every rank's timers */
    mtc_result_t rc = mtc_all_gather(mine, all, TRAIN_T_COUNT, MTC_DTYPE_F64, x->obs.world);
    memset(x->obs.timer_ns, 0, sizeof x->obs.timer_ns);
    if (rc != MTC_OK || !out) {
        free(all);
        return rc;
    }
    static const char *const heads[3] = {
        "max time across ranks (ms):", "(min, max) time across ranks (ms):",
        "times across ranks (ms):"};
    int opt = c->timing_log_option >= 0 && c->timing_log_option <= 2 ? c->timing_log_option : 1;
    fprintf(out, "%s", heads[opt]);
    for (int k = 0; k < TRAIN_T_COUNT; k++) {
        int id = timer_order[k];
        if (train_timer_level(id) > c->timing_log_level) continue;
        double lo = all[id], hi = all[id];
        for (int r = 1; r < W; r++) {
            double v = all[(size_t)r * TRAIN_T_COUNT + id];
            lo = v < lo ? v : lo, hi = v > hi ? v : hi;
        }
        if (hi <= 0) continue; /* as Megatron: only timers that ran */
        if (rc == MTC_OK) rc = train_tb_timer(x, train_timer_name(id), hi); /* TensorBoard */
        char label[96];
        timer_label(label, sizeof label, train_timer_name(id));
        if (opt == 0) fprintf(out, "\n    %s: %.2f", label, hi);
        if (opt == 1) fprintf(out, "\n    %s: (%.2f, %.2f)", label, lo, hi);
        if (opt == 2) {
            fprintf(out, "\n    %s:", train_timer_name(id));
            for (int r = 0; r < W; r++)
                fprintf(out, "\n     rank %2d: %.2f", r, all[(size_t)r * TRAIN_T_COUNT + id]);
        }
    }
    fprintf(out, "\n");
    if (x->pp_size > 1) { /* idle share of forward-backward: neither compute nor batches */
        double lo = 1, hi = 0, sum = 0;
        for (int r = 0; r < W; r++) {
            const double *t = all + (size_t)r * TRAIN_T_COUNT;
            double fb = t[TRAIN_T_FORWARD_BACKWARD] - t[TRAIN_T_BATCH_GENERATOR];
            double b =
                fb > 0 ? 1 - (t[TRAIN_T_FORWARD_COMPUTE] + t[TRAIN_T_BACKWARD_COMPUTE]) / fb : 0;
            lo = b < lo ? b : lo, hi = b > hi ? b : hi, sum += b;
        }
        int p = x->pp_size, v = x->vpp, m = x->nmb;
        double formula = (double)(p - 1) / ((double)v * m + p - 1);
        fprintf(out,
                " pipeline bubble: measured %.1f%% of forward-backward (mean over ranks; min "
                "%.1f%%, max %.1f%%), schedule (p-1)/(%sm+p-1) = %.1f%% for p=%d%s m=%d\n",
                100 * sum / W, 100 * lo, 100 * hi, v > 1 ? "v*" : "", 100 * formula, p,
                v > 1 ? (v == 2 ? " v=2" : " v>2") : "", m);
    }
    fflush(out);
    free(all);
    return rc;
}

/* This process's peak resident set in bytes: VmHWM, or getrusage's
 * ru_maxrss (kB on Linux) where there is no /proc. */
static int64_t peak_rss_bytes(void) {
    double b = mtc_mem_proc_status("VmHWM");
    struct rusage ru;
    if (b <= 0 && getrusage(RUSAGE_SELF, &ru) == 0) b = (double)ru.ru_maxrss * 1024;
    return (int64_t)b;
}

mtc_result_t train_obs_rss(train_rank *x, FILE *metrics) {
    int W = mtc_comm_size(x->obs.world);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the host name */
    for (const char *p = host; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    int64_t mine[3] = {(int64_t)(h >> 1), (int64_t)getpid(), peak_rss_bytes()}, *all = NULL;
    MTC_CHECK(mtc_mem_alloc((size_t)W * 3 * sizeof(int64_t), (void **)&all));
    /* comm: all-gather(world) of (host, process, peak) */
    mtc_result_t rc = mtc_all_gather(mine, all, 3, MTC_DTYPE_I64, x->obs.world);
    if (rc == MTC_OK && metrics) {
        int procs = 0;
        fprintf(metrics, ", \"peak_rss_bytes\": [");
        for (int r = 0; r < W; r++) {
            const int64_t *e = all + 3 * (size_t)r;
            int seen = 0;
            for (int q = 0; q < r && !seen; q++)
                seen = all[3 * (size_t)q] == e[0] && all[3 * (size_t)q + 1] == e[1];
            procs += !seen;
            fprintf(metrics, "%s%lld", r ? ", " : "", (long long)e[2]);
        }
        fprintf(metrics, "], \"rss_processes\": %d", procs);
    }
    free(all);
    return rc;
}

void train_obs_metrics(train_rank *x, FILE *metrics, int n) {
    if (!x->obs.trace) return;
    const mtc_trace_group_stats *g;
    int ng = mtc_trace_stats(x->obs.trace, &g);
    if (metrics && n > 0) {
        fprintf(metrics, ", \"comm_groups\": {");
        for (int i = 0; i < ng; i++) {
            fprintf(metrics, "%s\"%s\": {\"bytes\": %.0f, \"ms\": %.3f, \"calls\": %.1f",
                    i ? ", " : "", g[i].name, (double)g[i].bytes / n, (double)g[i].ns * 1e-6 / n,
                    (double)g[i].calls / n);
            /* the split by kind of call, the kinds this group made */
            for (int o = 0; o < MTC_TRACE_NOPS; o++)
                if (g[i].op_calls[o])
                    fprintf(metrics, ", \"%s\": {\"bytes\": %.0f, \"ms\": %.3f, \"calls\": %.1f}",
                            mtc_trace_op_name(o), (double)g[i].op_bytes[o] / n,
                            (double)g[i].op_ns[o] * 1e-6 / n, (double)g[i].op_calls[o] / n);
            fprintf(metrics, "}");
        }
        fprintf(metrics, "}");
    }
    mtc_trace_stats_reset(x->obs.trace);
}

/* The last rank receives every other rank's events (length, then the text
 * padded to whole int32s) over the world and writes one JSON document. */
mtc_result_t train_obs_write(train_rank *x, int is_last) {
    const mtc_train_config *c = x->cfg;
    if (!x->obs.trace || !c->trace_path) return MTC_OK;
    mtc_trace_window(x->obs.trace, 0);
    mtc_comm_t w = x->obs.world;
    int W = mtc_comm_size(w), me = mtc_comm_rank(w);
    size_t len;
    const char *text = mtc_trace_events(x->obs.trace, &len);
    /* comm: all-gather(world) of the events each rank dropped at its bound */
    int64_t mine = (int64_t)mtc_trace_dropped(x->obs.trace), *dropped = NULL, total = 0;
    MTC_CHECK(mtc_mem_alloc((size_t)W * sizeof(int64_t), (void **)&dropped));
    mtc_result_t rg = mtc_all_gather(&mine, dropped, 1, MTC_DTYPE_I64, w);
    for (int r = 0; rg == MTC_OK && r < W; r++)
        total += dropped[r];
    if (rg != MTC_OK) {
        free(dropped);
        return rg;
    }
    if (is_last && total > 0) {
        int n = 0;
        for (int r = 0; r < W; r++)
            n += dropped[r] > 0;
        fprintf(stderr,
                "WARNING: the trace %s lacks %lld events that %d rank(s) recorded past "
                "--trace-buffer-mb %g MiB per rank (each rank kept its first events; raise the "
                "bound or narrow --profile-step-start/--profile-step-end)\n",
                c->trace_path, (long long)total, n,
                c->trace_buffer_mb > 0 ? c->trace_buffer_mb
                                       : (double)MTC_TRACE_DEFAULT_LIMIT / 1048576.0);
    }
    if (!is_last) {
        free(dropped);
        int64_t n = (int64_t)len;
        /* comm: send(world) of this rank's events to the last rank */
        MTC_CHECK(mtc_send(&n, 1, MTC_DTYPE_I64, W - 1, w));
        size_t words = (len + 3) / 4;
        int32_t *buf = NULL;
        MTC_CHECK(mtc_mem_alloc(words * 4 + 4, (void **)&buf));
        memset(buf, ' ', words * 4 + 4);
        memcpy(buf, text, len);
        mtc_result_t rc = mtc_send(buf, words, MTC_DTYPE_I32, W - 1, w);
        free(buf);
        return rc;
    }
    mtc_outfile of; /* a temporary beside the trace, fsync, rename; removed on failure */
    mtc_result_t rc = mtc_outfile_open(&of, c->trace_path, "--trace");
    FILE *f = rc == MTC_OK ? of.f : NULL;
    if (f) {
        fprintf(f,
                "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"producer\": \"mtc\", "
                "\"world_size\": %d, \"profile_step_start\": %lld, \"profile_step_end\": %lld, "
                "\"dropped_events\": %lld, \"dropped_events_per_rank\": [",
                W, (long long)c->profile_step_start, (long long)c->profile_step_end,
                (long long)total);
        for (int r = 0; r < W; r++)
            fprintf(f, "%s%lld", r ? ", " : "", (long long)dropped[r]);
        fprintf(f, "]},\n\"traceEvents\": [\n");
    }
    free(dropped);
    for (int r = 0; r < W; r++) { /* receive from everyone even after a write error */
        if (r == me) {
            if (f) fwrite(text, 1, len, f), fputs(r + 1 < W ? ",\n" : "\n", f);
            continue;
        }
        int64_t n = 0;
        char *buf = NULL;
        mtc_result_t rr = mtc_recv(&n, 1, MTC_DTYPE_I64, r, w);
        size_t words = ((size_t)n + 3) / 4;
        if (rr == MTC_OK) rr = mtc_mem_alloc(words * 4 + 4, (void **)&buf);
        if (rr == MTC_OK) rr = mtc_recv(buf, words, MTC_DTYPE_I32, r, w);
        if (rr == MTC_OK && f) fwrite(buf, 1, (size_t)n, f), fputs(",\n", f);
        free(buf);
        if (rr != MTC_OK) {
            if (f) mtc_outfile_abort(&of);
            return rr;
        }
    }
    if (f) {
        fputs("]}\n", f);
        rc = mtc_outfile_commit(&of);
    }
    return rc;
}
