/* train/optimizer_step.c - one rank's distributed optimizer in the train
 * loop (--use-distributed-optimizer, Megatron-LM core_v0.18.0
 * distrib_optimizer.py): the model's flat buffers re-laid out to the padded
 * layout (64-aligned param starts, buckets padded to lcm(dp, 128)), the DDP
 * reduce-scattering each bucket into the owned shard over the intra-instance
 * group (INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP with several instances,
 * else DATA_PARALLEL_GROUP_WITH_CP) plus an all-reduce of the shard over the
 * inter-instance group (position j of every intra-partial slice), the global
 * norm over the shards, clipping, AdamW on the shard only (dp/distopt.h),
 * and the per-bucket all-gather of the updated params (left running until
 * the forward reads each layer's params with --overlap-param-gather: the
 * model's params_needed hook waits per bucket).
 * Also the --print-layout printer (the same text as `mtc layout`, for any
 * DDP). Relies on dp/, model/, grid/, comm/; train_step.c calls it. Does
 * not: save or load optimizer state. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/timer.h"
#include "nn/nn.h"
#include "train/train_internal.h"

/* 1 for the params of chunk m that Megatron marks shared_embedding: those
 * the registry reduces over the embedding group, with pp > 1. */
static mtc_result_t train_shared_embedding(const train_rank *x, const mtc_gpt *m, int **out) {
    const mtc_registry *r = &m->reg;
    MTC_CHECK(mtc_mem_calloc((size_t)(r->count > 0 ? r->count : 1), sizeof(int), (void **)out));
    for (int i = 0; i < r->count && x->pp_size > 1; i++)
        (*out)[i] = (r->params[i].reduce_groups & MTC_REDUCE_EMBEDDING) != 0;
    return MTC_OK;
}

/* Chunk k's DDP over the padded layout, its model buffers re-laid out to
 * it, and its sharded AdamW state (Megatron: one DDP per model chunk, no
 * bucketing for chunks > 0). */
static mtc_result_t train_distopt_chunk(train_rank *x, int k, mtc_comm_t intra) {
    const mtc_train_config *c = x->cfg;
    mtc_gpt *m = x->chunks[k];
    int *shared = NULL;
    MTC_CHECK(train_shared_embedding(x, m, &shared));
    mtc_ddp_config dc = {.use_distopt = 1,
                         .overlap_grad_reduce = c->overlap_grad_reduce,
                         .bucket_size = dp_layout_bucket_size(
                             c->ddp_bucket_size, x->dp_size, c->overlap_grad_reduce, x->pp_rank, k),
                         .pad_high_busbw = c->pad_high_busbw,
                         .scale = MTC_DDP_GRAD_SUM,
                         .shared_embedding = shared};
    /* the inter-instance group: position j of every intra slice, one
     * communicator per chunk, because each DDP chains its inter all-reduces
     * when polling finds a reduce-scatter done (timing-dependent), so two
     * chunks' all-reduces on one communicator could be issued in different
     * orders on different ranks. Freed with the rank's world by mtc_launch
     * (after the DDPs that wait on it). */
    mtc_comm_t inter = NULL;
    if (intra && x->dp && mtc_comm_size(intra) < mtc_comm_size(x->dp))
        /* comm: split(DATA_PARALLEL_GROUP_WITH_CP) */
        MTC_CHECK(mtc_comm_split(x->dp, mtc_comm_rank(intra), mtc_comm_rank(x->dp),
                                 "INTER_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP", &inter));
    if (k == 0) x->inter = inter;
    /* the intra group as built (size 1 with as many instances as dp ranks) */
    mtc_ddp_comms comms = {.dp = x->dp, .intra = intra, .inter = inter};
    mtc_result_t rc = mtc_ddp_init(&m->reg, &dc, &comms, NULL, NULL, &x->ddps[k]);
    free(shared);
    MTC_CHECK(rc);
    const dp_layout *l = &x->ddps[k]->layout;
    size_t *off;
    MTC_CHECK(
        mtc_mem_alloc((size_t)(l->nparams > 0 ? l->nparams : 1) * sizeof(size_t), (void **)&off));
    for (int i = 0; i < l->nparams; i++)
        off[i] = (size_t)l->param[i].start;
    rc = mtc_gpt_relayout(m, off, (size_t)l->numel);
    free(off);
    MTC_CHECK(rc);
    mtc_ddp_use_buffers(x->ddps[k], m->params, m->grads);
    return mtc_distopt_init(x->ddps[k], c->overlap_param_gather, &x->dopts[k]);
}

mtc_result_t train_distopt_setup(train_rank *x) {
    const mtc_train_config *c = x->cfg;
    int nd = c->num_distopt_instances > 1 ? c->num_distopt_instances : 1;
    if (x->dp_size % nd)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "num-distributed-optimizer-instances=%d does not divide the "
                         "data-parallel size %d",
                         nd, x->dp_size);
    mtc_comm_t intra = x->dp;
    if (nd > 1) {
        intra = mtc_grid_comm(x->grid, MTC_GROUP_INTRA_PARTIAL_DP_CP, 0);
        if (!intra || !x->dp)
            return mtc_error(MTC_ERR_INTERNAL,
                             "no INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP "
                             "with %d optimizer instances",
                             nd);
    }
    x->intra = intra && mtc_comm_size(intra) > 1 ? intra : NULL;
    MTC_CHECK(mtc_mem_calloc((size_t)x->vpp, sizeof(mtc_distopt *), (void **)&x->dopts));
    for (int k = 0; k < x->vpp; k++)
        MTC_CHECK(train_distopt_chunk(x, k, intra));
    x->ddp = x->ddps[0], x->dopt = x->dopts[0];
    return MTC_OK;
}

void train_distopt_teardown(train_rank *x) {
    for (int k = 0; x->dopts && k < x->vpp; k++)
        mtc_distopt_free(x->dopts[k]);
    free(x->dopts);
    x->dopts = NULL, x->dopt = NULL;
    x->inter = NULL; /* freed by mtc_launch with the world, after the DDPs */
}

mtc_result_t train_distopt_wait(train_rank *x) {
    if (!x->dopts) return MTC_OK;
    uint64_t t0 = mtc_time_ns();
    mtc_result_t rc = MTC_OK;
    /* comm: wait for the all-gather(intra) of every bucket */
    for (int k = 0; k < x->vpp && rc == MTC_OK; k++)
        rc = mtc_distopt_param_gather_wait(x->dopts[k]);
    x->comm_ns += mtc_time_ns() - t0;
    return rc;
}

mtc_result_t train_params_needed(void *ctx, int first, int last) {
    for (int p = first; p < last; p++)
        if (p >= 0) MTC_CHECK(mtc_distopt_param_gather_wait_param((mtc_distopt *)ctx, p));
    return MTC_OK;
}

/* Sum of squares of the reduced gradient in this rank's shards: TP
 * duplicates on TP rank 0 only, the last stage's wte copy never. Summed
 * over the intra group (each instance holds the whole gradient) and the
 * model-parallel group. */
static mtc_result_t train_distopt_norm(train_rank *x, double *norm) {
    double s = 0;
    for (int c = 0; c < x->vpp; c++) {
        const mtc_gpt *m = x->chunks[c];
        mtc_ddp *d = x->ddps[c];
        const dp_layout *l = &d->layout;
        for (int b = 0; b < l->nbuckets; b++) {
            int n;
            const dp_shard_param *sp = dp_layout_shard_params(l, d->shard_rank, b, &n);
            for (int k = 0; k < n; k++) {
                int p = sp[k].param;
                if ((d->tp_duplicate[p] && x->tp_rank != 0) || m->reg.params[p].shared_copy)
                    continue;
                s += nn_sumsq(d->grads + sp[k].gbuf_world.start,
                              (size_t)(sp[k].gbuf_world.end - sp[k].gbuf_world.start));
            }
        }
    }
    uint64_t t0 = mtc_time_ns();
    /* comm: all-reduce(intra), all-reduce(MODEL_PARALLEL_GROUP) */
    if (x->intra) MTC_CHECK(mtc_all_reduce(&s, &s, 1, MTC_DTYPE_F64, MTC_OP_SUM, x->intra));
    if (x->mp) MTC_CHECK(mtc_all_reduce(&s, &s, 1, MTC_DTYPE_F64, MTC_OP_SUM, x->mp));
    x->comm_ns += mtc_time_ns() - t0;
    *norm = sqrt(s);
    return MTC_OK;
}

mtc_result_t train_distopt_step(train_rank *x, double *norm, int *skipped) {
    const mtc_train_config *c = x->cfg;
    MTC_CHECK(train_distopt_norm(x, norm));
    if (!isfinite(*norm)) {
        (*skipped)++;
        return MTC_OK;
    }
    float lr = (float)mtc_lr_at(&c->lr, x->opt.step);
    mtc_distopt_hparams hp = {c->adam.beta1, c->adam.beta2, c->adam.eps, c->adam.weight_decay};
    uint64_t t0 = mtc_time_ns();
    float clip = mtc_grad_clip_coeff(*norm, c->clip_grad);
    for (int k = 0; k < x->vpp; k++)
        /* comm: all-gather(intra) per bucket (waited for here without overlap) */
        MTC_CHECK(mtc_distopt_step(x->dopts[k], lr, clip, &hp));
    x->comm_ns += mtc_time_ns() - t0;
    x->opt.step++; /* the LR schedule and the log read it */
    return MTC_OK;
}

/* One DDP per model chunk, as Megatron builds them: each chunk's layout. */
void train_print_layout(const train_rank *x, FILE *out) {
    for (int k = 0; k < x->vpp; k++) {
        const mtc_ddp *d = x->ddps[k];
        const dp_layout *l = &d->layout;
        const mtc_registry *r = &x->chunks[k]->reg;
        int *shared = NULL;
        if (train_shared_embedding(x, x->chunks[k], &shared) != MTC_OK) return;
        dp_layout_config cfg = {.dp = l->dp,
                                .bucket_size = d->cfg.bucket_size,
                                .pad_high_busbw = d->cfg.pad_high_busbw,
                                .use_distopt = d->cfg.use_distopt,
                                .shared_embedding = shared};
        fprintf(out, "> gradient buffer layout of the last rank (pipeline stage %d, tensor rank %d",
                x->pp_rank, x->tp_rank);
        if (x->vpp > 1) fprintf(out, ", model chunk %d of %d", k, x->vpp);
        fprintf(out, "), as `mtc layout --param-numels ");
        for (int i = 0; i < r->count; i++)
            fprintf(out, "%s%zu", i ? "," : "", r->params[i].local_numel);
        fprintf(out, " --data-parallel-size %d", l->dp);
        if (cfg.bucket_size > 0)
            fprintf(out, " --ddp-bucket-size %lld", (long long)cfg.bucket_size);
        if (cfg.pad_high_busbw) fprintf(out, " --pad-buckets-for-high-nccl-busbw");
        for (int i = 0; i < r->count; i++)
            if (shared[i]) fprintf(out, " --shared-embedding-params %d", i);
        if (!cfg.use_distopt) fprintf(out, " --no-distributed-optimizer");
        fprintf(out, "` prints it:\n");
        dp_layout_print(out, l, &cfg, shared);
        fprintf(out, "> end of layout\n");
        free(shared);
    }
}
