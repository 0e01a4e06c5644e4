/* pp/schedule.c - Megatron-LM core_v0.18.0's pipeline compute orders.
 *
 * Mirrors pipeline_parallel/schedules.py:
 *   forward_backward_no_pipelining           F0 B0 F1 B1 ... (B skipped when forward_only)
 *   ..._pipelining_without_interleaving      W = min(pp-r-1, M), S = M-W:
 *       warm-up F(0..W-1) | steady F(W+i) B(i) | cool-down B(S..M-1)
 *   ..._pipelining_with_interleaving         T = M*vpp virtual microbatches:
 *       W = 2*(pp-r-1) + (vpp-1)*N, clamped to T (T when forward_only);
 *       warm-up F(0..W-1) | steady F(W+k) B(k) | cool-down B(T-W..T-1),
 *       forward k = table[k], backward k = (table[k].mb, vpp-1-table[k].chunk)
 * and the training-argument rules that produce vpp (training/arguments.py).
 * Does not: simulate time (schedule_sim.c), draw (schedule_svg.c), or model
 * the p2p calls themselves (only the compute order, which Megatron's overlap
 * variants leave unchanged). */
#include "pp/schedule.h"
#include "pp/layout.h"

#include <stdio.h>

pp_schedule_kind_t pp_schedule_kind(const pp_schedule_config *cfg) {
    if (cfg->pp <= 1) return PP_SCHEDULE_NO_PIPELINING;
    return cfg->vpp > 1 ? PP_SCHEDULE_INTERLEAVED : PP_SCHEDULE_1F1B;
}

const char *pp_schedule_kind_name(pp_schedule_kind_t kind) {
    switch (kind) {
    case PP_SCHEDULE_NO_PIPELINING: return "no_pipelining";
    case PP_SCHEDULE_1F1B: return "1f1b";
    case PP_SCHEDULE_INTERLEAVED: return "interleaved";
    }
    return "?";
}

const char *pp_schedule_function_name(pp_schedule_kind_t kind) {
    switch (kind) {
    case PP_SCHEDULE_NO_PIPELINING: return "forward_backward_no_pipelining";
    case PP_SCHEDULE_1F1B: return "forward_backward_pipelining_without_interleaving";
    case PP_SCHEDULE_INTERLEAVED: return "forward_backward_pipelining_with_interleaving";
    }
    return "?";
}

int pp_schedule_vpp(const pp_schedule_config *cfg) { return cfg->vpp > 1 ? cfg->vpp : 1; }

int pp_schedule_group_size(const pp_schedule_config *cfg) {
    return cfg->group_size > 0 ? cfg->group_size : cfg->pp;
}

mtc_result_t pp_schedule_validate(const pp_schedule_config *cfg) {
    /* mtc's own guards first: Megatron never sees these values. */
    if (cfg->pp < 1)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "pipeline-model-parallel-size=%d must be at least 1", cfg->pp);
    if (cfg->vpp < 0)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "virtual pipeline size %d must be at least 1",
                         cfg->vpp);
    if (cfg->num_microbatches < 1)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "number of microbatches %d must be at least 1 "
                         "(global-batch-size / (micro-batch-size * data-parallel-size))",
                         cfg->num_microbatches);
    if (cfg->group_size < 0)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "microbatch group size %d must be at least 1 (0 = default pp)",
                         cfg->group_size);
    /* bounds before any op count (2 x M x vpp per rank, in int) is formed */
    if (cfg->vpp > PP_MAX_VPP)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "virtual pipeline size %d is above %d (model chunks per rank)", cfg->vpp,
                         PP_MAX_VPP);
    if ((int64_t)cfg->num_microbatches * (cfg->vpp > 1 ? cfg->vpp : 1) > PP_MAX_CHUNK_STEPS)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "%d microbatches x %d model chunks is above %d forward steps per rank "
                         "(fewer microbatches or chunks)",
                         cfg->num_microbatches, cfg->vpp > 1 ? cfg->vpp : 1, PP_MAX_CHUNK_STEPS);
    /* parallel_state.py:741-744 (rule 5) */
    if (cfg->vpp > 1 && cfg->pp <= 1)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "pipeline-model-parallel size should be greater than 1 with "
                         "interleaved schedule");
    if (pp_schedule_kind(cfg) != PP_SCHEDULE_INTERLEAVED) return MTC_OK;
    /* schedules.py:1068-1088 */
    int M = cfg->num_microbatches, pp = cfg->pp, N = pp_schedule_group_size(cfg);
    if (N > M || N < pp)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "The number of contiguous micro-batches in a virtual pipeline stage"
                         "should range in [PP=%d , M=%d]",
                         pp, M);
    int final_group = M % N;
    if (final_group > 0 && final_group < pp)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "The remainder of M (the total micro-batches) divided by N (number of "
                         "contiguous micro-batches in a virtual pipeline stage) should be 0, "
                         "or larger than or equal to the pipeline-parallel size, but it is %d. "
                         "Otherwise, it introduces dependency bubbles in the pipeline "
                         "and reduces throughput.",
                         final_group);
    return MTC_OK;
}

int pp_schedule_max_ops(const pp_schedule_config *cfg) {
    int T = cfg->num_microbatches * pp_schedule_vpp(cfg);
    return cfg->forward_only ? T : 2 * T;
}

void pp_schedule_table(int *mb, int *chunk, int num_microbatches, int vpp, int group_size) {
    int k = 0;
    for (int g = 0; g < num_microbatches; g += group_size) {
        /* the last group takes every remaining microbatch */
        int end = g + group_size >= num_microbatches ? num_microbatches : g + group_size;
        for (int c = 0; c < vpp; c++)
            for (int m = g; m < end; m++)
                mb[k] = m, chunk[k] = c, k++;
    }
}

static void schedule_put(pp_op *ops, int *n, pp_op_kind_t kind, int mb, int chunk) {
    ops[*n] = (pp_op){.kind = kind, .microbatch = mb, .chunk = chunk};
    (*n)++;
}

/* 1F1B (and no pipelining, which is 1F1B with W = 0). */
static void schedule_1f1b(pp_op *ops, pp_schedule_counts *c, const pp_schedule_config *cfg,
                          int rank) {
    int M = cfg->num_microbatches;
    int W = cfg->pp - rank - 1;
    if (W > M) W = M;
    int S = M - W, n = 0;
    for (int i = 0; i < W; i++)
        schedule_put(ops, &n, PP_OP_FORWARD, i, 0);
    for (int i = 0; i < S; i++) {
        schedule_put(ops, &n, PP_OP_FORWARD, W + i, 0);
        if (!cfg->forward_only) schedule_put(ops, &n, PP_OP_BACKWARD, i, 0);
    }
    if (!cfg->forward_only)
        for (int i = S; i < M; i++)
            schedule_put(ops, &n, PP_OP_BACKWARD, i, 0);
    *c = (pp_schedule_counts){
        .num_warmup = W, .num_steady = S, .num_cooldown = cfg->forward_only ? 0 : W, .nops = n};
}

/* Entry k of the schedule table in closed form (no table in memory): groups
 * of N microbatches take N*v entries each, chunk-major; the last group (the
 * first g with g + N >= M) takes every remaining microbatch. */
static void schedule_entry(int *mb, int *chunk, int k, int M, int v, int N) {
    int g_last = (M % N == 0) ? M - N : (M / N) * N;
    if (k < g_last * v) {
        int base = (k / (N * v)) * N, off = k - base * v;
        *mb = base + off % N, *chunk = off / N;
    } else {
        int len = M - g_last, off = k - g_last * v;
        *mb = g_last + off % len, *chunk = off / len;
    }
}

/* The interleaved order (get_pp_rank_microbatches + the three loops). */
static void schedule_interleaved(pp_op *ops, pp_schedule_counts *c, const pp_schedule_config *cfg,
                                 int rank) {
    int M = cfg->num_microbatches, v = cfg->vpp, N = pp_schedule_group_size(cfg);
    int T = M * v;
    int W = cfg->forward_only ? T : 2 * (cfg->pp - rank - 1) + (v - 1) * N;
    if (W >= T) W = T;
    int S = T - W, n = 0, mb, ch;
    for (int k = 0; k < W; k++) {
        schedule_entry(&mb, &ch, k, M, v, N);
        schedule_put(ops, &n, PP_OP_FORWARD, mb, ch);
    }
    for (int k = 0; k < S; k++) {
        schedule_entry(&mb, &ch, W + k, M, v, N);
        schedule_put(ops, &n, PP_OP_FORWARD, mb, ch);
        if (cfg->forward_only) continue;
        schedule_entry(&mb, &ch, k, M, v, N);
        schedule_put(ops, &n, PP_OP_BACKWARD, mb, v - 1 - ch);
    }
    if (!cfg->forward_only)
        for (int k = S; k < T; k++) {
            schedule_entry(&mb, &ch, k, M, v, N);
            schedule_put(ops, &n, PP_OP_BACKWARD, mb, v - 1 - ch);
        }
    *c = (pp_schedule_counts){
        .num_warmup = W, .num_steady = S, .num_cooldown = cfg->forward_only ? 0 : W, .nops = n};
}

mtc_result_t pp_schedule_build(pp_op *ops, pp_schedule_counts *counts,
                               const pp_schedule_config *cfg, int rank) {
    MTC_CHECK(pp_schedule_validate(cfg));
    if (rank < 0 || rank >= cfg->pp)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "pipeline rank %d is outside 0..%d", rank,
                         cfg->pp - 1);
    if (pp_schedule_kind(cfg) == PP_SCHEDULE_INTERLEAVED)
        schedule_interleaved(ops, counts, cfg, rank);
    else
        schedule_1f1b(ops, counts, cfg, rank);
    return MTC_OK;
}

mtc_result_t pp_vpp_given_once(int vpp_given, int layers_per_virtual_stage,
                               int virtual_stages_per_rank) {
    if (vpp_given && (layers_per_virtual_stage || virtual_stages_per_rank))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "give the virtual pipeline size once: --vpp or "
                                                   "--num-virtual-stages-per-pipeline-rank or "
                                                   "--num-layers-per-virtual-pipeline-stage");
    return MTC_OK;
}

mtc_result_t pp_vpp_from_args(int *vpp, const pp_vpp_args *a) {
    *vpp = 1;
    const pp_layout_args none = {.account_for_embedding = a->account_for_embedding,
                                 .account_for_loss = a->account_for_loss};
    const pp_layout_args *sp = a->split ? a->split : &none;
    int uneven = sp->first_num_layers || sp->last_num_layers;
    if (a->layers_per_virtual_stage < 0 || a->virtual_stages_per_rank < 0 || a->num_layers < 0)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "layer and stage counts must be positive");
    if ((a->layers_per_virtual_stage > 0) + (a->virtual_stages_per_rank > 0) + !!sp->layout > 1)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "No more than one of the following arguments can be set at the same "
                         "time: --num-layers-per-virtual-pipeline-stage, "
                         "--num-virtual-stages-per-pipeline-rank,--pipeline-model-parallel-layout. "
                         "args.num_layers_per_virtual_pipeline_stage=%d, "
                         "args.num_virtual_stages_per_pipeline_rank=%d, "
                         "args.pipeline_model_parallel_layout=%s.",
                         a->layers_per_virtual_stage, a->virtual_stages_per_rank,
                         sp->layout ? sp->layout : "None");
    int pp = a->pp < 1 ? 1 : a->pp;
    int L = a->num_layers + (sp->account_for_embedding ? 1 : 0) + (sp->account_for_loss ? 1 : 0);
    int v = 0; /* 0 = None */
    if (sp->layout) {
        int ns = 0;
        MTC_CHECK(pp_layout_num_stages(&ns, sp->layout));
        if (ns % pp)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "The length of pipeline_model_parallel_layout must be divisible by "
                             "pipeline_model_parallel_size (num_stages=%d, "
                             "args.pipeline_model_parallel_size=%d): '%s' (give a multiple of %d "
                             "stages separated by |)",
                             ns, pp, sp->layout, pp);
        v = ns / pp;
    } else if (a->layers_per_virtual_stage > 0) {
        if (uneven)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "please use --num-virtual-stages-per-pipeline-rank to specify "
                             "virtual pipeline parallel degree when enable uneven pipeline "
                             "parallelism");
        if (a->num_layers <= 0)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "--num-layers-per-virtual-pipeline-stage needs --num-layers");
        if (L % pp != 0)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "number of layers of the model must be divisible pipeline model "
                             "parallel size");
        if ((L / pp) % a->layers_per_virtual_stage != 0)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "number of layers per pipeline stage must be divisible number of "
                             "layers per virtual pipeline stage");
        v = L / pp / a->layers_per_virtual_stage;
    } else if (a->virtual_stages_per_rank > 0) {
        v = a->virtual_stages_per_rank;
    } else if (!uneven && a->num_layers > 0 && L % pp != 0) {
        char hint[160] = "";
        pp_layout_suggest(hint, sizeof hint, a->num_layers, pp, 1);
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "Number of layers should be divisible by the pipeline-model-parallel "
                         "size (num-layers=%d%s, pipeline-model-parallel-size=%d)%s",
                         a->num_layers,
                         sp->account_for_embedding || sp->account_for_loss
                             ? " plus the embedding/loss counted as layers"
                             : "",
                         pp, hint);
    }
    if (v == 1) v = 0;
    if (v > 1) {
        if (a->overlap_p2p_comm && a->pp <= 1)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "When interleaved schedule is used, pipeline-model-parallel size "
                             "should be greater than 1");
        if (!a->overlap_p2p_comm && a->pp <= 2)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "When interleaved schedule is used and p2p communication overlap is "
                             "disabled, pipeline-model-parallel size should be greater than 2 to "
                             "avoid having multiple p2p sends and recvs between same 2 ranks per "
                             "communication batch");
    }
    *vpp = v > 1 ? v : 1;
    return MTC_OK;
}
