/* plan/memory.c - the layout rules and the memory per rank of a layout.
 *
 * Parameters come from the model's own registry (model/family.c registers
 * exactly what a chunk holds: tied-embedding copies on the last stage,
 * biases and norms of the family), so the count is the banner's; the flat
 * buffer size from dp/layout.h (the distributed optimizer's 64-element
 * alignment, lcm(dp, 128) bucket padding and the embedding's own bucket);
 * the optimizer state from the rank's shard of that layout. In-flight
 * microbatches per chunk are the schedule's peak between a microbatch's
 * forward and its backward (pp_schedule_build, as train/train_setup.c
 * sizes its slots). Byte widths: fp32 (mtc today) 4 + 4 + 8 per element
 * (weights, gradients, Adam m and v); bf16 (Megatron mixed precision)
 * 2 + 4 + 12 (fp32 master copy with m and v), the optimizer terms on the
 * owned shard only under the distributed optimizer. Communication buffers:
 * the pipeline executor's message slots (pp_executor_buffer_bytes) for
 * mtc; one tensor each way per neighbour for Megatron. */
#include <stdlib.h>
#include <string.h>

#include "cp/cp.h"
#include "dp/chunk_layout.h"
#include "dp/ddp.h"
#include "dp/fsdp.h"
#include "dp/layout.h"
#include "grid/grid.h"
#include "model/family.h"
#include "plan/plan.h"
#include "pp/executor.h"
#include "pp/schedule.h"

int mtc_plan_hfsdp(const mtc_plan_layout *l) {
    return l->fsdp_outer_optim && l->fsdp_strategy == MTC_FSDP_OPTIM_GRADS_PARAMS && l->distopt &&
           l->distopt_instances > 1;
}

mtc_result_t mtc_plan_layout_check(mtc_plan_layout *l) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    if (l->world < 1) return mtc_error(E, "world-size=%d must be >= 1", l->world);
    if (l->tp < 1) l->tp = 1;
    if (l->pp < 1) l->pp = 1;
    if (l->cp < 1) l->cp = 1;
    if (l->vpp < 1 || l->pp == 1) l->vpp = 1;
    if (l->tp == 1) l->sequence_parallel = 0;
    if (l->micro_batch < 1) return mtc_error(E, "micro-batch-size=%d must be >= 1", l->micro_batch);
    if (l->global_batch < 1)
        return mtc_error(E, "global-batch-size=%d must be >= 1", l->global_batch);
    int div = l->vocab_divisible > 0 ? l->vocab_divisible : 128;
    l->model.padded_vocab_size = mtc_model_pad_vocab(l->model.vocab_size, div, l->tp);
    if (l->model.max_position_embeddings < l->model.seq_length)
        l->model.max_position_embeddings = l->model.seq_length;
    MTC_CHECK(mtc_model_config_validate(&l->model));
    /* mtc train's expert rules: etp is 1 or the TP size (0: the TP size) */
    if (l->ep < 1) l->ep = 1;
    MTC_CHECK(mtc_moe_validate_etp(l->etp, l->tp));
    if (l->etp == 0) l->etp = l->tp;
    mtc_grid_config gc;
    mtc_grid_config_default(&gc);
    gc.world_size = l->world, gc.tp = l->tp, gc.pp = l->pp, gc.cp = l->cp;
    gc.ep = l->ep, gc.etp = l->etp;
    if (l->distopt) gc.num_dist_opt_instances = l->distopt_instances;
    mtc_grid_spec spec;
    MTC_CHECK(mtc_grid_spec_init(&spec, &gc));
    MTC_CHECK(mtc_grid_validate_model(
        &spec, l->model.num_heads, l->model.seq_length, l->model.moe.num_experts,
        pp_layout_given(&l->split) ? 0 : l->model.num_layers, l->vpp > 1 ? l->vpp : 0));
    if (pp_layout_given(&l->split))
        MTC_CHECK(pp_layout_validate(&l->split, l->model.num_layers, l->pp, l->vpp));
    MTC_CHECK(mtc_model_validate_tp(&l->model, l->tp, l->sequence_parallel));
    const mtc_model_config *mc = &l->model;
    MTC_CHECK(mtc_moe_validate(&mc->moe, mc->num_layers, mc->ffn_hidden_size, l->tp,
                               l->sequence_parallel, l->ep, l->etp, !mc->disable_bias_linear));
    l->dp = spec.dp, l->edp = spec.edp;
    if (l->cp > 1) { /* mtc train's rules for context parallelism on top of TP */
        int T_cp = l->model.seq_length / l->cp, NH = l->model.num_heads / l->tp;
        int NG = mtc_model_groups(&l->model) / l->tp;
        if (l->sequence_parallel && T_cp % l->tp)
            return mtc_error(E,
                             "seq-length=%d / context-parallel-size=%d = %d positions per rank is "
                             "not divisible by tensor-model-parallel-size=%d, which sequence "
                             "parallelism needs",
                             l->model.seq_length, l->cp, T_cp, l->tp);
        if (l->cp_comm_type == CP_COMM_A2A && (NH % l->cp || NG % l->cp))
            return mtc_error(E,
                             "cp-comm-type a2a splits the heads over context-parallel-size=%d, but "
                             "a tensor-parallel rank has %d query heads and %d key/value heads "
                             "(use p2p or all_gather, or a cp dividing both)",
                             l->cp, NH, NG);
    }
    if (l->global_batch % ((int64_t)l->micro_batch * l->dp))
        return mtc_error(E,
                         "global-batch-size=%d is not divisible by micro-batch-size=%d x "
                         "data-parallel size %d (use a multiple of %lld)",
                         l->global_batch, l->micro_batch, l->dp, (long long)l->micro_batch * l->dp);
    int nd = l->distopt_instances > 1 ? l->distopt_instances : 1;
    if (nd > 1 && !l->distopt)
        return mtc_error(
            E, "num-distributed-optimizer-instances=%d needs --use-distributed-optimizer", nd);
    if (nd > 1 && l->dp % nd)
        return mtc_error(E,
                         "num-distributed-optimizer-instances=%d does not divide the data-parallel "
                         "size %d (use a divisor of %d)",
                         nd, l->dp, l->dp);
    if (l->vpp > 64) return mtc_error(E, "virtual pipeline size %d is above 64", l->vpp);
    if (l->pp > 1) {
        pp_schedule_config sc = {.pp = l->pp,
                                 .vpp = l->vpp > 1 ? l->vpp : 0,
                                 .group_size = l->mb_group,
                                 .num_microbatches = l->global_batch / (l->micro_batch * l->dp)};
        MTC_CHECK(pp_schedule_validate(&sc));
    }
    return MTC_OK;
}

/* The schedule's peak of live microbatches per chunk of pipeline rank r. */
static mtc_result_t plan_inflight(const mtc_plan_layout *l, int r, int *peak) {
    for (int k = 0; k < l->vpp; k++)
        peak[k] = 1;
    if (l->pp == 1) return MTC_OK;
    pp_schedule_config sc = {.pp = l->pp,
                             .vpp = l->vpp > 1 ? l->vpp : 0,
                             .group_size = l->mb_group,
                             .num_microbatches = l->global_batch / (l->micro_batch * l->dp)};
    return pp_schedule_peak_inflight(&sc, r, l->vpp, peak);
}

/* One chunk's gradient buffers from the model's own registration of it
 * (model/family.h, on TP and EP rank 0: every EP rank holds as many
 * experts), laid out by the function train's layout hook calls
 * (dp/chunk_layout.h) over groups of nparts (dense) and xparts
 * (expert-parallel) ranks; *sum its params, *xsum the expert ones. */
static mtc_result_t plan_chunk_layout(const mtc_plan_layout *l, int r, int k,
                                      const pp_layout_stage *ls, int nparts, int xparts,
                                      int64_t *sum, int64_t *xsum, mtc_ddp_chunk_layout *cl) {
    int first = ls->first_layer, last = first + ls->num_layers;
    int has_emb = ls->has_embedding, has_head = ls->has_loss;
    const mtc_model_config *c = &l->model;
    mtc_registry reg;
    memset(&reg, 0, sizeof reg);
    int pidx[MTC_NGLOBAL_ROLES];
    int *lf = calloc((size_t)c->num_layers + 1, sizeof(int));
    if (!lf) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "plan: layer table");
    int E = c->moe.num_experts;
    model_register_opts o = {first, last, has_emb, has_head, l->sequence_parallel,
                             /* with the loss, or on a standalone MTP stage */
                             l->split.mtp_num_layers             ? ls->num_mtp
                             : has_head && last == c->num_layers ? c->mtp_num_layers
                                                                 : 0,
                             pp_layout_mtp_role(ls)};
    model_rank_split rs = {.tp = l->tp, .etp = E > 0 ? l->etp : 0, .ep = E > 0 ? l->ep : 1};
    mtc_result_t rc = model_family_register_rank(&reg, c, &o, &rs, pidx, lf);
    *sum = *xsum = 0;
    for (int i = 0; rc == MTC_OK && i < reg.count; i++) {
        *sum += (int64_t)reg.params[i].local_numel;
        if (reg.params[i].expert >= 0) *xsum += (int64_t)reg.params[i].local_numel;
    }
    /* train's kinds (dp/groups.c): the expert-parallel buffer with experts over EP */
    int split = E > 0 && l->ep > 1;
    mtc_ddp_params params[2] = {split ? MTC_DDP_PARAMS_DENSE : MTC_DDP_PARAMS_ALL,
                                MTC_DDP_PARAMS_EXPERT};
    int ranks[2] = {nparts, xparts};
    mtc_ddp_chunk_opts co = {.use_distopt = l->distopt,
                             .overlap_grad_reduce = l->overlap_grad_reduce,
                             .bucket_size = l->ddp_bucket_size,
                             .pad_high_busbw = l->pad_high_busbw,
                             .fsdp_strategy = l->fsdp_strategy,
                             .fsdp_unit_size = l->fsdp_unit_size,
                             .num_layers = c->num_layers,
                             .dp = l->dp,
                             .dp_cp = l->dp * l->cp,
                             .pp_size = l->pp,
                             .pp_rank = r,
                             .chunk = k,
                             .placement_only = 1}; /* held from the gaps: O(params) */
    if (mtc_plan_hfsdp(l)) /* train_setup.c: whole pages per optimizer slice too */
        for (int b = 0; b < 2; b++)
            co.fsdp_pad_ranks[b] = ranks[b] * l->distopt_instances;
    if (rc == MTC_OK) rc = mtc_ddp_chunk_layout_init(cl, &reg, &co, split ? 2 : 1, params, ranks);
    mtc_registry_free(&reg);
    free(lf);
    return rc;
}

/* A chunk buffer's FSDP units (buckets; bucket 0 is the last unit in
 * forward order, nb - 1 the first) in elements. */
typedef struct {
    int n;
    int64_t total, first, second, last, before_last; /* before_last: bucket 1 */
} plan_units;

/* One buffer of a chunk (the dense one, or the expert-parallel one): its
 * elements, distributed-optimizer padding included, and the optimizer
 * elements of shard rank `rank` (-1: the largest), as train/train_setup.c
 * lays it out (the other buffer's params and other EP ranks' experts take
 * no room); *pu its FSDP units. HFSDP over `outer` instances: rank
 * (inner r, instance o) holds slice o of its inner shard, the
 * (r x outer + o)-th of every unit cut in inner x outer (dp/fsdp.c). */
static mtc_result_t plan_buffer(const mtc_plan_layout *l, const dp_layout *lay, int rank, int outer,
                                int64_t *buf, int64_t *held, int64_t *unit_out, plan_units *pu) {
    *unit_out = 0;
    *buf = lay->numel;
    memset(pu, 0, sizeof *pu);
    if (lay->nbuckets > 0) {
        int nb = lay->nbuckets;
        pu->n = nb, pu->total = lay->numel;
        pu->first = lay->bucket[nb - 1].end - lay->bucket[nb - 1].start;
        pu->second = nb > 1 ? lay->bucket[nb - 2].end - lay->bucket[nb - 2].start : 0;
        pu->last = lay->bucket[0].end - lay->bucket[0].start;
        pu->before_last = nb > 1 ? lay->bucket[1].end - lay->bucket[1].start : 0;
    }
    if (!l->distopt) {
        *held = *buf;
        return MTC_OK;
    }
    /* the optimizer state covers the param pieces of the shard, not
     * its padding (distopt.c / ddp_for_each_held); the largest shard
     * unless a DP rank is named */
    dp_layout sl = *lay; /* read only: the slices' cut of the same buckets */
    sl.dp = lay->dp * outer;
    int q = rank < 0 ? -1 : rank % lay->dp * outer + rank / lay->dp % outer;
    *held = dp_layout_held_numel(&sl, q);
    if (*held < 0) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "plan: shard gaps");
    for (int b = 0; b < lay->nbuckets; b++) { /* the largest unit's other shards */
        int64_t size = lay->bucket[b].end - lay->bucket[b].start, out = size - size / lay->dp;
        if (out > *unit_out) *unit_out = out;
    }
    return MTC_OK;
}

/* One chunk's FSDP collectives per step (mtc_plan_fsdp_comm's rules) into c. */
static void plan_fsdp_comm(const mtc_plan_layout *l, const plan_units *u, int has_emb, int has_head,
                           int nparts, int nd, mtc_plan_fsdp_comm *c) {
    int hf = mtc_plan_hfsdp(l);
    double M = l->global_batch / (l->micro_batch * l->dp), n = u->n, T = (double)u->total * 4;
    double e = has_emb ? (double)u->first * 4 : 0;
    double l1 = (double)(has_emb ? u->second : u->first) * 4, h = (double)u->last * 4;
    int tied = has_emb && has_head && !l->model.untie_embeddings;
    if (u->n <= 0 || M < 1) return;
    /* bf16 optim_grads_params: each unit gathered as bf16 into the compute copies */
    double w =
        l->precision == MTC_PLAN_BF16 && l->fsdp_strategy == MTC_FSDP_OPTIM_GRADS_PARAMS ? 2 : 4;
    c->ag_width = w;
    c->units += n;
    c->rs_calls += M * n, c->rs_bytes += M * T;
    if (nd > 1 && !hf) c->ar_calls += M * n, c->ar_bytes += M * T / nparts;
    if (hf) { /* once per step: each unit's shard */
        c->outer_rs_calls += n, c->outer_rs_bytes += T / nparts;
        c->outer_ag_calls += n, c->outer_ag_bytes += T / nparts;
    }
    if (l->fsdp_strategy == MTC_FSDP_OPTIM_GRADS) {
        c->ag_step_calls += n, c->ag_step_bytes += T;
        return;
    }
    /* the first microbatch, then M - 1 more without the first layer's gather */
    double ag0 = c->ag_fwd_bytes, ab0 = c->ag_bwd_bytes;
    c->ag_fwd_calls += M * (n + tied) - (M - 1),
        c->ag_fwd_bytes += M * (T + tied * e) - (M - 1) * l1;
    /* the backward's first units resident: the last; the one before too
     * unless a tied head's call for the embedding came between */
    int thead = has_head && !l->model.untie_embeddings;
    double keep = thead || u->n < 2 ? 0 : (double)u->before_last * 4;
    if (has_emb && u->n == 2) keep = 0; /* the one before is the embedding, counted in e */
    double bc = n - 1 - (keep > 0 ? 1 : 0) - (has_emb ? 1 : 0), bb = T - h - e - keep;
    if (bc > 0) c->ag_bwd_calls += M * bc, c->ag_bwd_bytes += M * bb;
    if (l->overlap_param_gather) {
        if (has_emb) c->ag_bwd_calls += 1, c->ag_bwd_bytes += e;
        if (tied) c->ag_bwd_calls += M, c->ag_bwd_bytes += M * l1;
    }
    c->ag_fwd_bytes = ag0 + (c->ag_fwd_bytes - ag0) * w / 4; /* this chunk's, at its width */
    c->ag_bwd_bytes = ab0 + (c->ag_bwd_bytes - ab0) * w / 4;
}

mtc_result_t mtc_plan_memory_rank(const mtc_plan_layout *lin, int r, int dp_rank,
                                  mtc_plan_memory *out) {
    mtc_plan_layout lv = *lin;
    mtc_plan_layout *l = &lv;
    MTC_CHECK(mtc_plan_layout_check(l));
    memset(out, 0, sizeof *out);
    if (r < 0 || r >= l->pp)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "pipeline rank %d outside [0, %d)", r, l->pp);
    out->pp_rank = r;
    out->nchunks = l->vpp;
    MTC_CHECK(plan_inflight(l, r, out->inflight));
    int L = l->model.num_layers;
    int nd = l->distopt && l->distopt_instances > 1 ? l->distopt_instances : 1;
    int bf16 = l->precision == MTC_PLAN_BF16;
    int nparts = l->dp * l->cp / nd; /* the dense buffer's shard group (dp x cp, an instance) */
    int xparts = l->edp / nd;        /* the expert buffer's (expert-DP, an instance) */
    int outer = mtc_plan_hfsdp(l) ? nd : 1; /* HFSDP: the optimizer slices over the instances */
    /* the expert shard of DP position dp_rank: its last TP rank's expert-DP
     * rank (tp-cp-dp order within a stage, etp-ep-edp in the expert one) */
    int xrank = dp_rank >= 0 ? (dp_rank * l->tp + l->tp - 1) / (l->etp * l->ep) : -1;
    for (int k = 0; k < l->vpp; k++) {
        int st = pp_virtual_stage(l->pp, r, k);
        pp_layout_stage ls; /* pp/layout.c */
        MTC_CHECK(pp_layout_stage_get(&ls, &l->split, L, l->pp, l->vpp, st));
        int first = ls.first_layer, last = first + ls.num_layers;
        int has_emb = ls.has_embedding, has_head = ls.has_loss;
        mtc_ddp_chunk_layout cl;
        int64_t sum = 0, xsum = 0, buf = 0, held = 0, xbuf = 0, xheld = 0, unit = 0, xunit = 0;
        plan_units pu, xpu;
        memset(&xpu, 0, sizeof xpu);
        mtc_result_t rc = plan_chunk_layout(l, r, k, &ls, nparts, xparts, &sum, &xsum, &cl);
        /* the activations' view of a standalone MTP stage (activations.c) */
        has_head |= pp_layout_mtp_role(&ls) << 1;
        if (rc == MTC_OK)
            rc = plan_buffer(l, &cl.layout[0], dp_rank, outer, &buf, &held, &unit, &pu);
        if (rc == MTC_OK && cl.n > 1 && cl.held[1]) /* train's expert DDP exists */
            rc = plan_buffer(l, &cl.layout[1], xrank, outer, &xbuf, &xheld, &xunit, &xpu);
        mtc_ddp_chunk_layout_free(&cl);
        MTC_CHECK(rc);
        out->params += sum;
        out->expert_params += xsum;
        out->buffer_numel += buf + xbuf;
        out->optim_numel += held + xheld;
        out->expert_buffer_numel += xbuf;
        out->expert_optim_numel += xheld;
        if (l->fsdp_strategy >= MTC_FSDP_OPTIM_GRADS) {
            /* Megatron-FSDP's resident pages (dp/fsdp.c): the shards plus
             * the gathered units' other shards, two of the largest (three
             * with the prefetch of --overlap-param-gather); the gradients
             * at most the same two */
            int K = l->overlap_param_gather ? 3 : 2;
            int64_t sh = buf / nparts + (xbuf ? xbuf / xparts : 0);
            int64_t g = sh + 2 * (unit > xunit ? unit : xunit);
            out->fsdp_param_numel += l->fsdp_strategy == MTC_FSDP_OPTIM_GRADS_PARAMS
                                         ? sh + K * (unit > xunit ? unit : xunit)
                                         : buf + xbuf;
            out->fsdp_grad_numel += g;
            out->fsdp_shard_numel += sh;
            plan_fsdp_comm(l, &pu, has_emb, ls.has_loss, nparts, nd, &out->fsdp_comm);
        }
        size_t slot = mtc_plan_act_slot_bytes(l, last - first, has_emb, has_head);
        size_t moe = mtc_plan_act_moe_slot_bytes(l, last - first, has_head);
        if (k == 0) out->act_slot_bytes = slot;
        out->act_bytes +=
            slot * (size_t)out->inflight[k] + mtc_plan_act_shared_bytes(l, last - first, has_head);
        out->moe_act_bytes += moe * (size_t)out->inflight[k];
    }
    out->param_bytes = (size_t)out->buffer_numel * (bf16 ? 2 : 4);
    out->grad_bytes = (size_t)out->buffer_numel * 4;
    out->optim_bytes = (size_t)out->optim_numel * (bf16 ? 12 : 8);
    if (l->fsdp_strategy >= MTC_FSDP_OPTIM_GRADS) {
        /* mtc's FSDP: fp32 params resident as above (the main params: the
         * optimizer holds Adam's m and v only); with bf16 the fp32 main
         * params are the shard and the bf16 compute copy is what the units
         * gather into (optim_grads: fp32 whole and the bf16 copy whole) */
        int ogp = l->fsdp_strategy == MTC_FSDP_OPTIM_GRADS_PARAMS;
        out->param_bytes =
            !bf16 ? (size_t)out->fsdp_param_numel * 4
            : ogp ? (size_t)out->fsdp_shard_numel * 4 + (size_t)out->fsdp_param_numel * 2
                  : (size_t)out->fsdp_param_numel * 4 + (size_t)out->buffer_numel * 2;
        out->grad_bytes = (size_t)out->fsdp_grad_numel * 4;
        out->optim_bytes = (size_t)out->optim_numel * 8;
    }
    if (l->pp > 1) { /* pipeline messages of (B, T_loc, C) */
        size_t T_loc = (size_t)l->model.seq_length / l->cp / (l->sequence_parallel ? l->tp : 1);
        size_t msg = (size_t)l->micro_batch * T_loc * (size_t)l->model.hidden_size;
        if (l->act_model == MTC_PLAN_ACT_MTC) { /* mtc's executor: its live message slots */
            pp_executor_config ec = {
                .schedule = {.pp = l->pp,
                             .vpp = l->vpp > 1 ? l->vpp : 0,
                             .group_size = l->mb_group,
                             .num_microbatches = l->global_batch / (l->micro_batch * l->dp)},
                .count = msg};
            size_t *counts = NULL; /* a standalone MTP stage's 1 + D states (pp/layout.h) */
            MTC_CHECK(
                pp_layout_message_counts(&counts, &ec.count, msg, &l->split, L, l->pp, l->vpp));
            ec.stage_count = counts;
            mtc_result_t rc = pp_executor_buffer_bytes(&out->comm_bytes, &ec, r);
            free(counts);
            MTC_CHECK(rc);
        } else { /* Megatron: one tensor each way to each neighbour */
            out->comm_bytes = 4 * msg * (bf16 ? 2 : 4);
        }
    }
    out->total_bytes =
        out->param_bytes + out->grad_bytes + out->optim_bytes + out->act_bytes + out->comm_bytes;
    return MTC_OK;
}

mtc_result_t mtc_plan_memory_peak(const mtc_plan_layout *l, mtc_plan_memory *out) {
    mtc_plan_layout lv = *l;
    MTC_CHECK(mtc_plan_layout_check(&lv));
    memset(out, 0, sizeof *out);
    for (int r = 0; r < lv.pp; r++) {
        mtc_plan_memory m;
        MTC_CHECK(mtc_plan_memory_rank(&lv, r, -1, &m));
        if (r == 0 || m.total_bytes >= out->total_bytes) *out = m;
    }
    return MTC_OK;
}
