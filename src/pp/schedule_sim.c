/* pp/schedule_sim.c - run per-rank compute orders against the pipeline's
 * point-to-point dependencies and report when each op runs.
 *
 *   virtual stage s = chunk*pp + rank;  S = pp*vpp stages
 *   F(m, s) needs F(m, s-1)            (activation from the previous stage)
 *   B(m, s) needs B(m, s+1)            (gradient from the next stage)
 *   B(m, S-1) needs F(m, S-1)          (the loss)
 *   B(m, s) needs F(m, s)              (its own saved activations)
 * Each rank runs its ops strictly in the given order, one at a time; an op
 * starts when its rank is free and its dependency has finished. Transfers
 * cost nothing. The result is the earliest-start timeline, or a deadlock
 * report when no rank can make progress.
 * Limitations: no communication time, no overlap of compute with compute. */
#include <stdlib.h>

#include "pp/schedule.h"

static double sim_max(double a, double b) { return a > b ? a : b; }

mtc_result_t pp_schedule_simulate(pp_sim_span *spans, double *makespan, const pp_op *ops,
                                  const pp_schedule_counts *counts, const pp_schedule_config *cfg,
                                  double t_fwd, double t_bwd) {
    int pp = cfg->pp, v = pp_schedule_vpp(cfg), M = cfg->num_microbatches;
    int S = pp * v, max_ops = pp_schedule_max_ops(cfg);
    if (pp < 1 || M < 1)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "simulate needs pp >= 1 and M >= 1");
    double *fwd = malloc(sizeof(double) * (size_t)S * (size_t)M);
    double *bwd = malloc(sizeof(double) * (size_t)S * (size_t)M);
    int *next = calloc((size_t)pp, sizeof(int));
    double *free_at = calloc((size_t)pp, sizeof(double));
    mtc_result_t rc = MTC_OK;
    if (!fwd || !bwd || !next || !free_at) {
        rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "schedule simulation for %d stages x %d microbatches",
                       S, M);
        goto out;
    }
    for (size_t i = 0; i < (size_t)S * (size_t)M; i++)
        fwd[i] = bwd[i] = -1.0;
    int remaining = 0;
    for (int r = 0; r < pp; r++) {
        if (counts[r].nops < 0 || counts[r].nops > max_ops) {
            rc = mtc_error(MTC_ERR_INVALID_ARGUMENT, "rank %d has %d ops, at most %d fit", r,
                           counts[r].nops, max_ops);
            goto out;
        }
        remaining += counts[r].nops;
    }
    *makespan = 0.0;
    for (int progress = 1; progress && remaining > 0;) {
        progress = 0;
        for (int r = 0; r < pp; r++) {
            while (next[r] < counts[r].nops) {
                const pp_op *op = &ops[(size_t)r * max_ops + next[r]];
                if (op->microbatch < 0 || op->microbatch >= M || op->chunk < 0 || op->chunk >= v) {
                    rc = mtc_error(MTC_ERR_INVALID_ARGUMENT,
                                   "rank %d op %d names microbatch %d chunk %d", r, next[r],
                                   op->microbatch, op->chunk);
                    goto out;
                }
                int s = pp_virtual_stage(pp, r, op->chunk);
                size_t at = (size_t)s * M + op->microbatch;
                double dep;
                if (op->kind == PP_OP_FORWARD) {
                    dep = s == 0 ? 0.0 : fwd[at - M];
                } else {
                    dep = s == S - 1 ? fwd[at] : bwd[at + M];
                    if (fwd[at] < 0) dep = -1.0; /* own forward not run yet */
                }
                if (dep < 0) break; /* blocked: try the other ranks */
                double *done = op->kind == PP_OP_FORWARD ? &fwd[at] : &bwd[at];
                if (*done >= 0) {
                    rc =
                        mtc_error(MTC_ERR_INVALID_USAGE, "rank %d runs %c%d.%d twice", r,
                                  op->kind == PP_OP_FORWARD ? 'F' : 'B', op->microbatch, op->chunk);
                    goto out;
                }
                double start = sim_max(free_at[r], dep);
                double end = start + (op->kind == PP_OP_FORWARD ? t_fwd : t_bwd);
                spans[(size_t)r * max_ops + next[r]] = (pp_sim_span){start, end};
                *done = end;
                free_at[r] = end;
                *makespan = sim_max(*makespan, end);
                next[r]++, remaining--, progress = 1;
            }
        }
    }
    if (remaining > 0) {
        char msg[512];
        int n = 0;
        for (int r = 0; r < pp && n < (int)sizeof msg - 64; r++) {
            if (next[r] >= counts[r].nops) continue;
            const pp_op *op = &ops[(size_t)r * max_ops + next[r]];
            n += snprintf(msg + n, sizeof msg - (size_t)n, " rank %d waits at %c%d.%d;", r,
                          op->kind == PP_OP_FORWARD ? 'F' : 'B', op->microbatch, op->chunk);
        }
        rc = mtc_error(MTC_ERR_INVALID_USAGE, "pipeline orders deadlock with %d ops left:%s",
                       remaining, msg);
    }
out:
    free(fwd), free(bwd), free(next), free(free_at);
    return rc;
}

double pp_sim_bubble_fraction(double makespan, const pp_schedule_config *cfg, double t_fwd,
                              double t_bwd) {
    double per_mb = cfg->forward_only ? t_fwd : t_fwd + t_bwd;
    double busy = (double)cfg->num_microbatches * pp_schedule_vpp(cfg) * per_mb;
    return busy > 0 ? (makespan - busy) / busy : 0.0;
}

double pp_bubble_formula(const pp_schedule_config *cfg) {
    return (double)(cfg->pp - 1) / ((double)cfg->num_microbatches * pp_schedule_vpp(cfg));
}
