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

/* 1 for the param that Megatron marks shared_embedding: the tied wte with pp > 1. */
static mtc_result_t train_shared_embedding(const train_rank *x, int **out) {
    const mtc_registry *r = &x->model->reg;
    MTC_CHECK(mtc_mem_calloc((size_t)(r->count > 0 ? r->count : 1), sizeof(int), (void **)out));
    if (x->pp_size > 1 && x->model->pidx_wte >= 0) (*out)[x->model->pidx_wte] = 1;
    return MTC_OK;
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
            return mtc_error(MTC_ERR_INTERNAL, "no INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP "
                                               "with %d optimizer instances", nd);
        /* comm: split(DATA_PARALLEL_GROUP_WITH_CP): position j of every intra slice */
        MTC_CHECK(mtc_comm_split(x->dp, mtc_comm_rank(intra), mtc_comm_rank(x->dp),
                                 "INTER_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP", &x->inter));
    }
    x->intra = intra && mtc_comm_size(intra) > 1 ? intra : NULL;
    int *shared = NULL;
    MTC_CHECK(train_shared_embedding(x, &shared));
    mtc_ddp_config dc = {
        .use_distopt = 1, .overlap_grad_reduce = c->overlap_grad_reduce,
        .bucket_size = dp_layout_bucket_size(c->ddp_bucket_size, x->dp_size,
                                             c->overlap_grad_reduce, x->pp_rank, 0),
        .pad_high_busbw = c->pad_high_busbw, .scale = MTC_DDP_GRAD_SUM,
        .shared_embedding = shared};
    /* the intra group as built (size 1 with as many instances as dp ranks) */
    mtc_ddp_comms comms = {.dp = x->dp, .intra = intra, .inter = x->inter};
    mtc_result_t rc = mtc_ddp_init(&x->model->reg, &dc, &comms, NULL, NULL, &x->ddp);
    free(shared);
    MTC_CHECK(rc);
    const dp_layout *l = &x->ddp->layout;
    size_t *off;
    MTC_CHECK(mtc_mem_alloc((size_t)(l->nparams > 0 ? l->nparams : 1) * sizeof(size_t),
                            (void **)&off));
    for (int i = 0; i < l->nparams; i++) off[i] = (size_t)l->param[i].start;
    rc = mtc_gpt_relayout(x->model, off, (size_t)l->numel);
    free(off);
    MTC_CHECK(rc);
    mtc_ddp_use_buffers(x->ddp, x->model->params, x->model->grads);
    return mtc_distopt_init(x->ddp, c->overlap_param_gather, &x->dopt);
}

void train_distopt_teardown(train_rank *x) {
    mtc_distopt_free(x->dopt);
    x->dopt = NULL;
    mtc_comm_free(x->inter);
    x->inter = NULL;
}

mtc_result_t train_distopt_wait(train_rank *x) {
    if (!x->dopt) return MTC_OK;
    uint64_t t0 = mtc_time_ns();
    /* comm: wait for the all-gather(intra) of every bucket */
    mtc_result_t rc = mtc_distopt_param_gather_wait(x->dopt);
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
    mtc_ddp *d = x->ddp;
    const dp_layout *l = &d->layout;
    int wte_copy = x->model->pidx_wte >= 0 && !x->model->has_embedding ? x->model->pidx_wte : -1;
    double s = 0;
    for (int b = 0; b < l->nbuckets; b++) {
        int n;
        const dp_shard_param *sp = dp_layout_shard_params(l, d->shard_rank, b, &n);
        for (int k = 0; k < n; k++) {
            int p = sp[k].param;
            if ((d->tp_duplicate[p] && x->tp_rank != 0) || p == wte_copy) continue;
            s += nn_sumsq(d->grads + sp[k].gbuf_world.start,
                          (size_t)(sp[k].gbuf_world.end - sp[k].gbuf_world.start));
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
    mtc_ddp_grad_clip(x->ddp, *norm, c->clip_grad);
    mtc_distopt_hparams hp = {c->adam.beta1, c->adam.beta2, c->adam.eps, c->adam.weight_decay};
    uint64_t t0 = mtc_time_ns();
    /* comm: all-gather(intra) per bucket (waited for here without overlap) */
    MTC_CHECK(mtc_distopt_step(x->dopt, lr, &hp));
    x->comm_ns += mtc_time_ns() - t0;
    x->opt.step++; /* the LR schedule and the log read it */
    return MTC_OK;
}

void train_print_layout(const train_rank *x, FILE *out) {
    const mtc_ddp *d = x->ddp;
    const dp_layout *l = &d->layout;
    const mtc_registry *r = &x->model->reg;
    int *shared = NULL;
    if (train_shared_embedding(x, &shared) != MTC_OK) return;
    dp_layout_config cfg = {.dp = l->dp, .bucket_size = d->cfg.bucket_size,
                            .pad_high_busbw = d->cfg.pad_high_busbw,
                            .use_distopt = d->cfg.use_distopt, .shared_embedding = shared};
    fprintf(out, "> gradient buffer layout of the last rank (pipeline stage %d, tensor rank %d), as "
                 "`mtc layout",
            x->pp_rank, x->tp_rank);
    fprintf(out, " --param-numels ");
    for (int i = 0; i < r->count; i++)
        fprintf(out, "%s%zu", i ? "," : "", r->params[i].local_numel);
    fprintf(out, " --data-parallel-size %d", l->dp);
    if (cfg.bucket_size > 0) fprintf(out, " --ddp-bucket-size %lld", (long long)cfg.bucket_size);
    if (cfg.pad_high_busbw) fprintf(out, " --pad-buckets-for-high-nccl-busbw");
    for (int i = 0; i < r->count; i++)
        if (shared[i]) fprintf(out, " --shared-embedding-params %d", i);
    if (!cfg.use_distopt) fprintf(out, " --no-distributed-optimizer");
    fprintf(out, "` prints it:\n");
    dp_layout_print(out, l, &cfg, shared);
    fprintf(out, "> end of layout\n");
    free(shared);
}
