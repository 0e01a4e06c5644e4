/* pp/schedule.h - the per-rank compute order of Megatron-LM core_v0.18.0's
 * pipeline schedules (pipeline_parallel/schedules.py), as plain data.
 *
 * What: which forward/backward (microbatch, model chunk) each pipeline rank
 * runs, in order, for the three schedules Megatron picks from
 *   pp == 1            forward_backward_no_pipelining      F0 B0 F1 B1 ...
 *   pp > 1, no vpp     1F1B: warm-up min(pp-r-1, M) forwards, steady
 *                      (F, B) pairs, cool-down backwards
 *   pp > 1, vpp > 1    interleaved 1F1B over vpp model chunks per rank,
 *                      driven by Megatron's schedule table
 * plus Megatron's validity rules with its exact messages, the training-
 * argument rules that derive vpp, the stage/chunk helpers the executor needs,
 * a dependency-respecting timeline simulation and an SVG drawing of it, and
 * the executed schedule read back from a training trace (its own SVG).
 * Relies on: core/result.h (and cJSON for reading traces). Does not
 * communicate, allocate behind the caller's back (the caller passes the ops
 * array; a trace timeline owns its rows) or print.
 *
 * Conventions: chunk c of pp rank r holds virtual stage c*pp + r
 * (transformer_layer.py offset rule); vpp == 1 means "not interleaved"
 * (Megatron's training turns vpp=1 into None). */
#ifndef MTC_PP_SCHEDULE_H
#define MTC_PP_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/result.h"

typedef enum {
    PP_OP_FORWARD = 0,
    PP_OP_BACKWARD = 1,
} pp_op_kind_t;

typedef struct {
    pp_op_kind_t kind;
    int microbatch; /* 0..M-1 */
    int chunk;      /* model chunk on this rank, 0..vpp-1 */
} pp_op;

typedef enum {
    PP_SCHEDULE_NO_PIPELINING, /* forward_backward_no_pipelining */
    PP_SCHEDULE_1F1B,          /* forward_backward_pipelining_without_interleaving */
    PP_SCHEDULE_INTERLEAVED,   /* forward_backward_pipelining_with_interleaving */
} pp_schedule_kind_t;

typedef struct {
    int pp;               /* pipeline-model-parallel size, >= 1 */
    int vpp;              /* model chunks per rank; 0 or 1 = not interleaved */
    int num_microbatches; /* M >= 1 */
    int group_size;       /* microbatch_group_size_per_vp_stage; 0 = default (pp) */
    int forward_only;     /* evaluation: forwards only */
} pp_schedule_config;

typedef struct {
    int num_warmup;   /* leading forwards */
    int num_steady;   /* (F, B) pairs; forwards only when forward_only */
    int num_cooldown; /* trailing backwards */
    int nops;         /* total ops written */
} pp_schedule_counts;

/* Which of Megatron's three functions runs this config (after validation). */
pp_schedule_kind_t pp_schedule_kind(const pp_schedule_config *cfg);
/* "1f1b", "interleaved", "no_pipelining" and Megatron's function names. */
const char *pp_schedule_kind_name(pp_schedule_kind_t kind);
const char *pp_schedule_function_name(pp_schedule_kind_t kind);
/* Effective values: vpp (1 when not interleaved) and group size (pp by default). */
int pp_schedule_vpp(const pp_schedule_config *cfg);
int pp_schedule_group_size(const pp_schedule_config *cfg);

/* Megatron's checks, in Megatron's order; on failure the detail message
 * (mtc_error_detail) is Megatron's text verbatim, e.g. the interleaved
 * "The number of contiguous micro-batches in a virtual pipeline stageshould
 * range in [PP=2 , M=1]" (sic). INVALID_ARGUMENT for every refusal. */
mtc_result_t pp_schedule_validate(const pp_schedule_config *cfg);
/* mtc's own bounds (checked first): model chunks per rank, and microbatches
 * x chunks per rank, so every op count fits an int. */
#define PP_MAX_VPP 1024
#define PP_MAX_CHUNK_STEPS (1 << 26)

/* Upper bound of ops on any rank: 2 * M * vpp (M * vpp when forward_only). */
int pp_schedule_max_ops(const pp_schedule_config *cfg);

/* The compute order of pipeline rank `rank`: ops[0..counts->nops) with
 * ops sized pp_schedule_max_ops(cfg). Validates cfg first. */
mtc_result_t pp_schedule_build(pp_op *ops, pp_schedule_counts *counts,
                               const pp_schedule_config *cfg, int rank);

/* Megatron's get_schedule_table: entry k = (microbatch mb[k], chunk chunk[k])
 * for k in 0..M*vpp-1. The interleaved forward k runs entry k, backward k runs
 * (mb[k], vpp-1-chunk[k]). Arrays sized M*vpp. */
void pp_schedule_table(int *mb, int *chunk, int num_microbatches, int vpp, int group_size);

/* ---- stage helpers for the executor ---- */
static inline int pp_virtual_stage(int pp, int rank, int chunk) { return chunk * pp + rank; }
static inline int pp_stage_rank(int pp, int stage) { return stage % pp; }
static inline int pp_stage_chunk(int pp, int stage) { return stage / pp; }
static inline int pp_is_first_stage(int pp, int rank, int chunk) {
    return pp_virtual_stage(pp, rank, chunk) == 0;
}
static inline int pp_is_last_stage(int pp, int vpp, int rank, int chunk) {
    return pp_virtual_stage(pp, rank, chunk) == pp * (vpp < 1 ? 1 : vpp) - 1;
}

/* ---- training arguments that derive vpp (megatron/training/arguments.py) ---- */
typedef struct {
    int pp;
    int num_layers;               /* 0 = not given */
    int layers_per_virtual_stage; /* --num-layers-per-virtual-pipeline-stage, 0 = not given */
    int virtual_stages_per_rank;  /* --num-virtual-stages-per-pipeline-rank, 0 = not given */
    int account_for_embedding;    /* --account-for-embedding-in-pipeline-split */
    int account_for_loss;         /* --account-for-loss-in-pipeline-split */
    int overlap_p2p_comm;         /* training default 1; 0 requires pp > 2 */
    /* the uneven split flags and the layout string (pp/layout.h), NULL =
     * none; with a split the two account_for fields above are not read */
    const struct pp_layout_args *split;
} pp_vpp_args;

/* Megatron training's three spellings of the virtual pipeline size are
 * exclusive: vpp_given (--vpp) with either of the others is refused. */
mtc_result_t pp_vpp_given_once(int vpp_given, int layers_per_virtual_stage,
                               int virtual_stages_per_rank);
/* vpp as training derives it (1 when it ends up None); Megatron's assertion
 * text as the detail message on refusal. */
mtc_result_t pp_vpp_from_args(int *vpp, const pp_vpp_args *a);

/* ---- timeline simulation (pp/schedule_sim.c) ---- */
typedef struct {
    double start, end;
} pp_sim_span;

/* Run every rank's order against the p2p dependencies: F of virtual stage s
 * for microbatch m after F of stage s-1; B of stage s after B of stage s+1
 * (the last stage's B after its own F); an op also waits for its rank to be
 * free. Costs: forward t_fwd, backward t_bwd, transfers free.
 *   spans[r * max_ops + i]  the i-th op of rank r   (pp * max_ops entries)
 *   ops / counts            as pp_schedule_build wrote them, per rank
 * Returns INVALID_USAGE (naming the blocked ops) if the orders deadlock. */
mtc_result_t pp_schedule_simulate(pp_sim_span *spans, double *makespan, const pp_op *ops,
                                  const pp_schedule_counts *counts, const pp_schedule_config *cfg,
                                  double t_fwd, double t_bwd);

/* Bubble fraction of a simulated timeline: idle time / busy time of one rank
 * (the Megatron paper's definition; every rank is busy the same amount), and
 * the paper's closed form (pp-1)/(M*vpp). */
double pp_sim_bubble_fraction(double makespan, const pp_schedule_config *cfg, double t_fwd,
                              double t_bwd);
double pp_bubble_formula(const pp_schedule_config *cfg);

/* ---- drawing (pp/schedule_svg.c) ---- */
/* One SVG document: ranks as rows, op boxes labelled F<m>.<c>/B<m>.<c> at their
 * simulated times, idle time visible as gaps, bubble figures in the title. */
mtc_result_t pp_schedule_svg(FILE *f, const pp_op *ops, const pp_schedule_counts *counts,
                             const pp_sim_span *spans, double makespan,
                             const pp_schedule_config *cfg, double t_fwd, double t_bwd);
/* The fill of an op box (blue forwards, green backwards, darker per chunk). */
const char *pp_schedule_svg_fill(pp_op_kind_t kind, int chunk);

/* ---- the executed schedule, from a trace (pp/schedule_trace.c) ---- */
typedef struct {
    pp_op_kind_t kind;
    int microbatch, chunk;
    double t0, t1; /* ms after the timeline's origin */
} pp_trace_op;

typedef struct {
    double t0, t1;
    char op[24];    /* "all_reduce", "send", ... */
    char group[64]; /* Megatron's group name */
} pp_trace_comm;

typedef struct {
    int rank, pp_stage;
    char name[128];      /* "rank 3 (tp 1 cp 0 dp 0 pp 1 ep 0)" */
    double fb0, fb1;     /* its forward-backward span (ms) */
    double busy, bubble; /* ms in forwards and backwards; 1 - busy / (fb1 - fb0) */
    pp_trace_op *ops;    /* training forwards/backwards in start order */
    pp_trace_comm *comm; /* communication calls inside the span */
    int nops, ncomm, cap_ops, cap_comm;
} pp_trace_row;

typedef struct {
    int64_t iteration;
    int nrows; /* every rank of the trace, by pipeline stage then rank */
    pp_trace_row *rows;
    int pp, vpp, microbatches; /* as the spans show them */
    double makespan;           /* ms from the earliest forward-backward start to the last end */
    int64_t dropped;           /* events the ranks dropped at the trace's memory bound */
} pp_trace_timeline;

/* Iteration `iteration` (-1: the last traced) of a trace `mtc train --trace`
 * wrote. IO when unreadable, FORMAT when not such a trace or without
 * iteration spans, INVALID_ARGUMENT (naming the traced range) when that
 * iteration is not in it. */
mtc_result_t pp_trace_timeline_load(pp_trace_timeline *t, const char *path, int64_t iteration);
void pp_trace_timeline_free(pp_trace_timeline *t);
/* (p-1)/(v*m+p-1) for the timeline's sizes (0 without pipelining). */
double pp_trace_bubble_formula(const pp_trace_timeline *t);
/* Rows of measured op boxes, idle gaps, a communication lane per rank, the
 * per-rank and mean bubble beside the formula; `source` names the trace. */
mtc_result_t pp_trace_timeline_svg(FILE *f, const pp_trace_timeline *t, const char *source);

/* Per model chunk (nchunks), the most microbatches pipeline rank `rank`
 * holds between their forward and backward in sc's schedule, at least 1
 * (pp/inflight.c): train's activation slots, the planner's in-flight count. */
mtc_result_t pp_schedule_peak_inflight(const pp_schedule_config *sc, int rank, int nchunks,
                                       int *peak);

#endif
