/* dp/ddp.c - bucketed data-parallel gradient reduction; see dp/ddp.h.
 *
 *   backward (last microbatch) marks params ──► bucket complete?
 *        │                                        │ yes, and all earlier buckets started
 *        ▼                                        ▼
 *   [b0 ready][b1 ready][b2 ...]   launch b0, b1 in order:
 *                                    plain DDP:  all_reduce_start(dp)
 *                                    dist-opt:   reduce_scatter_start(intra) ──► when done:
 *                                                all_reduce_start(inter) of the shard
 *   mtc_ddp_finish: launch the rest, chain the inter all-reduces in bucket
 *   order, wait for everything.
 *
 * Each communicator runs its queue in issue order on its own progress
 * thread (comm/request.c), so the reduce-scatter of a bucket overlaps the
 * backward of the params before it. The inter-instance all-reduce of bucket
 * b can only start once b's reduce-scatter has finished (another
 * communicator); it is chained from later calls (polled) and from finish.
 * Limitations: no bucket groups (Megatron's coalescing of several buckets
 * into one NCCL call); fp32 only. */
#include "dp/ddp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "nn/lowp.h"
#include "nn/nn.h"

struct ddp_bucket {
    int nparams;             /* params in the bucket */
    int nready;              /* marked so far this step */
    mtc_request_t req;       /* all-reduce (plain) or reduce-scatter (dist-opt) */
    mtc_request_t req_inter; /* inter-instance all-reduce of the shard */
};

static int ddp_size(mtc_comm_t c) { return c ? mtc_comm_size(c) : 1; }
static int ddp_rank(mtc_comm_t c) { return c ? mtc_comm_rank(c) : 0; }

int mtc_ddp_holds(const mtc_registry *reg, const mtc_param *p, mtc_ddp_params which) {
    if (p->local_numel == 0) return 0;
    if (which == MTC_DDP_PARAMS_ALL) return 1;
    return mtc_param_expert_parallel(reg, p) == (which == MTC_DDP_PARAMS_EXPERT);
}

static mtc_result_t ddp_check_sizes(const mtc_ddp_config *cfg, const mtc_ddp_comms *c) {
    int dp = ddp_size(c->dp), intra = ddp_size(c->intra ? c->intra : c->dp);
    if (dp % intra != 0)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "intra-instance data-parallel group of %d ranks does not divide the "
                         "data-parallel group of %d ranks; build it as Megatron's intra-partial "
                         "slices of dp*cp/num-distributed-optimizer-instances ranks",
                         intra, dp);
    int instances = dp / intra;
    if (instances > 1 && !cfg->use_distopt)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "num-distributed-optimizer-instances=%d needs "
                         "--use-distributed-optimizer (or use 1 instance)",
                         instances);
    if (ddp_size(c->inter) != instances)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "inter-instance group has %d ranks but there are %d optimizer instances "
                         "(dp %d / intra %d); pass the group of position j of every intra slice",
                         ddp_size(c->inter), instances, dp, intra);
    return MTC_OK;
}

dp_layout_config mtc_ddp_layout_config(const mtc_ddp_config *cfg, int dp) {
    return (dp_layout_config){.skip_empty = 1,
                              .dp = dp,
                              .bucket_size = cfg->bucket_size,
                              .pad_high_busbw = cfg->pad_high_busbw,
                              .use_distopt = cfg->use_distopt,
                              .shared_embedding = cfg->shared_embedding,
                              .unit_of = cfg->unit_of,
                              .pad_divisor = cfg->pad_divisor};
}

mtc_result_t mtc_ddp_layout(const mtc_registry *reg, const mtc_ddp_config *cfg, int dp,
                            int placement_only, dp_layout *out) {
    int n = reg->count;
    int64_t *numels = NULL;
    memset(out, 0, sizeof *out);
    MTC_CHECK(mtc_mem_calloc((size_t)(n > 0 ? n : 1), sizeof(int64_t), (void **)&numels));
    for (int i = 0; i < n; i++)
        numels[i] = mtc_ddp_holds(reg, &reg->params[i], cfg->params)
                        ? (int64_t)reg->params[i].local_numel
                        : 0;
    dp_layout_config lc = mtc_ddp_layout_config(cfg, dp);
    lc.placement_only = placement_only;
    mtc_result_t rc = dp_layout_build(out, numels, n, &lc);
    free(numels);
    return rc;
}

/* The shard group's size a layout of cfg over comms has. */
static int ddp_layout_dp(const mtc_ddp_config *cfg, const mtc_ddp_comms *c) {
    return cfg->use_distopt ? ddp_size(c->intra ? c->intra : c->dp) : ddp_size(c->dp);
}

mtc_result_t mtc_ddp_init(const mtc_registry *reg, const mtc_ddp_config *cfg,
                          const mtc_ddp_comms *comms, float *params, float *grads, mtc_ddp **out) {
    *out = NULL;
    dp_layout layout;
    if ((params == NULL) != (grads == NULL))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "mtc_ddp_init takes both buffers or neither (got params %p, grads %p)",
                         (void *)params, (void *)grads);
    MTC_CHECK(ddp_check_sizes(cfg, comms));
    MTC_CHECK(mtc_ddp_layout(reg, cfg, ddp_layout_dp(cfg, comms), 0, &layout));
    return mtc_ddp_init_layout(reg, cfg, comms, &layout, params, grads, out);
}

mtc_result_t mtc_ddp_init_layout(const mtc_registry *reg, const mtc_ddp_config *cfg,
                                 const mtc_ddp_comms *comms, dp_layout *layout, float *params,
                                 float *grads, mtc_ddp **out) {
    *out = NULL;
    mtc_result_t rc;
    mtc_ddp *d = NULL;
    if ((params == NULL) != (grads == NULL)) {
        rc =
            mtc_error(MTC_ERR_INVALID_ARGUMENT,
                      "mtc_ddp_init_layout takes both buffers or neither (got params %p, grads %p)",
                      (void *)params, (void *)grads);
        goto fail;
    }
    MTC_CHECK_GOTO(ddp_check_sizes(cfg, comms), rc, fail);
    if (layout->nparams != reg->count || layout->dp != ddp_layout_dp(cfg, comms) ||
        layout->use_distopt != (cfg->use_distopt != 0) ||
        (cfg->use_distopt && !layout->shard_off)) {
        rc = mtc_error(MTC_ERR_INVALID_USAGE,
                       "a layout of %d params over %d shard ranks for a DDP of %d params over %d "
                       "(build it with mtc_ddp_layout from the same registry and configuration, "
                       "not placement-only)",
                       layout->nparams, layout->dp, reg->count, ddp_layout_dp(cfg, comms));
        goto fail;
    }
    MTC_CHECK_GOTO(mtc_mem_calloc(1, sizeof *d, (void **)&d), rc, fail);
    d->cfg = *cfg;
    d->cfg.shared_embedding = NULL;
    d->cfg.unit_of = NULL;
    d->comms = *comms;
    if (!d->comms.intra) d->comms.intra = d->comms.dp;
    d->dp_size = ddp_size(d->comms.dp);
    d->instances = d->dp_size / ddp_size(d->comms.intra);
    d->shard_rank = cfg->use_distopt ? ddp_rank(d->comms.intra) : 0;
    d->layout = *layout; /* taken over */
    memset(layout, 0, sizeof *layout);

    int n = reg->count;
    size_t np = (size_t)n;
    MTC_CHECK_GOTO(mtc_mem_calloc(np, 1, (void **)&d->is_2d), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_calloc(np, 1, (void **)&d->emb_or_out), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_calloc(np, 1, (void **)&d->tp_duplicate), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_calloc(np, 1, (void **)&d->ready), rc, fail);
    for (int i = 0; i < n; i++) {
        d->is_2d[i] = reg->params[i].is_2d != 0;
        d->emb_or_out[i] = reg->params[i].emb_or_out != 0;
        d->tp_duplicate[i] = reg->params[i].tp_duplicate != 0;
    }
    MTC_CHECK_GOTO(
        mtc_mem_calloc((size_t)d->layout.nbuckets, sizeof(ddp_bucket), (void **)&d->buckets), rc,
        fail);
    for (int b = 0; b < d->layout.nbuckets; b++)
        d->buckets[b].nparams = d->layout.bucket_param_off[b + 1] - d->layout.bucket_param_off[b];
    if (d->cfg.grad_reduce_bf16)
        MTC_CHECK_GOTO(mtc_mem_calloc((size_t)(d->layout.numel > 0 ? d->layout.numel : 1),
                                      sizeof(uint16_t), (void **)&d->g16),
                       rc, fail);

    if (params) { /* the caller laid its buffers out at this layout (model's layout hook) */
        for (int i = 0; i < n; i++)
            if (d->layout.param_bucket[i] >= 0 &&
                reg->params[i].offset != cfg->base + (size_t)d->layout.param[i].start) {
                rc = mtc_error(MTC_ERR_INVALID_USAGE,
                               "param %s sits at %zu in the given buffers but at %zu + %lld in "
                               "the DDP layout (lay the model out with the same configuration)",
                               reg->params[i].name, reg->params[i].offset, cfg->base,
                               (long long)d->layout.param[i].start);
                goto fail;
            }
        d->params = params + cfg->base, d->grads = grads + cfg->base;
    } else {
        size_t bytes = (size_t)d->layout.numel * sizeof(float);
        MTC_CHECK_GOTO(mtc_mem_alloc_big(bytes, 1, (void **)&d->params), rc, fail);
        MTC_CHECK_GOTO(mtc_mem_alloc_big(bytes, 1, (void **)&d->grads), rc, fail);
        d->owns_buffers = 1;
    }
    *out = d;
    return MTC_OK;
fail:
    dp_layout_free(layout);
    mtc_ddp_free(d);
    return rc;
}

/* Wait for every started request; returns the first failure. */
static mtc_result_t ddp_wait_all(mtc_ddp *d) {
    mtc_result_t first = MTC_OK;
    for (int b = 0; b < d->layout.nbuckets; b++) {
        mtc_result_t rc = mtc_request_wait(&d->buckets[b].req);
        if (first == MTC_OK) first = rc;
        rc = mtc_request_wait(&d->buckets[b].req_inter);
        if (first == MTC_OK) first = rc;
    }
    return first;
}

void mtc_ddp_free(mtc_ddp *d) {
    if (!d) return;
    if (d->buckets) (void)ddp_wait_all(d);
    if (d->owns_buffers) {
        size_t bytes = (size_t)d->layout.numel * sizeof(float);
        mtc_mem_free_big(d->params, bytes);
        mtc_mem_free_big(d->grads, bytes);
    }
    dp_layout_free(&d->layout);
    free(d->g16);
    free(d->is_2d), free(d->emb_or_out), free(d->tp_duplicate), free(d->ready), free(d->buckets);
    free(d);
}

void mtc_ddp_assign_offsets(const mtc_ddp *d, mtc_registry *reg) {
    for (int i = 0; i < reg->count && i < d->layout.nparams; i++)
        if (d->layout.param_bucket[i] >= 0)
            reg->params[i].offset = d->cfg.base + (size_t)d->layout.param[i].start;
    reg->total = d->cfg.base + (size_t)d->layout.numel;
}

void mtc_ddp_zero_grad(mtc_ddp *d) { memset(d->grads, 0, (size_t)d->layout.numel * sizeof(float)); }

/* Start bucket b's first collective (in place on the grad buffer). */
static mtc_result_t ddp_launch(mtc_ddp *d, int b) {
    dp_range r = d->layout.bucket[b];
    float *g = d->grads + r.start;
    size_t n = (size_t)(r.end - r.start);
    int avg = d->cfg.avg_size > 0 ? d->cfg.avg_size : d->dp_size;
    if (d->cfg.scale == MTC_DDP_GRAD_AVG && avg > 1) nn_scale(g, 1.0f / (float)avg, n);
    ddp_bucket *bk = &d->buckets[b];
    /* --grad-reduce-in-bf16: the collective runs on the bucket's bf16 copy */
    void *buf = g;
    mtc_dtype_t dt = MTC_DTYPE_F32;
    size_t esz = sizeof(float);
    if (d->g16) {
        nn_f32_to_bf16(d->g16 + r.start, g, n);
        buf = d->g16 + r.start, dt = MTC_DTYPE_BF16, esz = sizeof(uint16_t);
    }
    if (!d->cfg.use_distopt) {
        if (d->comms.dp)
            MTC_CHECK(mtc_all_reduce_start(buf, buf, n, dt, MTC_OP_SUM, d->comms.dp, &bk->req));
        return MTC_OK;
    }
    if (!d->comms.intra) return MTC_OK;
    size_t shard = n / (size_t)d->layout.dp;
    /* in place: recvbuf = sendbuf + rank * recvcount */
    return mtc_reduce_scatter_start(buf, (char *)buf + (size_t)d->shard_rank * shard * esz, shard,
                                    dt, MTC_OP_SUM, d->comms.intra, &bk->req);
}

/* Launch complete buckets in index order. */
static mtc_result_t ddp_launch_ready(mtc_ddp *d) {
    while (d->next_launch < d->layout.nbuckets) {
        ddp_bucket *bk = &d->buckets[d->next_launch];
        if (bk->nready < bk->nparams) break;
        MTC_CHECK(ddp_launch(d, d->next_launch));
        d->next_launch++;
    }
    return MTC_OK;
}

/* Chain inter-instance all-reduces after finished reduce-scatters, in
 * bucket order; `block` waits for each reduce-scatter instead of polling. */
static mtc_result_t ddp_chain_inter(mtc_ddp *d, int block) {
    if (d->instances <= 1) return MTC_OK;
    while (d->next_inter < d->next_launch) {
        int b = d->next_inter;
        ddp_bucket *bk = &d->buckets[b];
        if (!block && bk->req) {
            int done = 0;
            MTC_CHECK(mtc_request_test(bk->req, &done));
            if (!done) break;
        }
        MTC_CHECK(mtc_request_wait(&bk->req));
        dp_range s = dp_layout_shard_range(&d->layout, d->shard_rank, b);
        void *g = d->g16 ? (void *)(d->g16 + s.start) : (void *)(d->grads + s.start);
        MTC_CHECK(mtc_all_reduce_start(g, g, (size_t)(s.end - s.start),
                                       d->g16 ? MTC_DTYPE_BF16 : MTC_DTYPE_F32, MTC_OP_SUM,
                                       d->comms.inter, &bk->req_inter));
        d->next_inter++;
    }
    return MTC_OK;
}

mtc_result_t mtc_ddp_param_grad_ready(mtc_ddp *d, int p) {
    if (p < 0 || p >= d->layout.nparams)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "param index %d outside [0, %d)", p,
                         d->layout.nparams);
    if (!d->cfg.overlap_grad_reduce || d->layout.param_bucket[p] < 0) return MTC_OK;
    if (d->ready[p])
        return mtc_error(MTC_ERR_INVALID_USAGE,
                         "param %d marked grad-ready twice in one step; mark each param once, "
                         "after its last gradient contribution of the last microbatch",
                         p);
    d->ready[p] = 1;
    d->buckets[d->layout.param_bucket[p]].nready++;
    MTC_CHECK(ddp_launch_ready(d));
    return ddp_chain_inter(d, 0);
}

mtc_result_t mtc_ddp_grads_ready(mtc_ddp *d, int first, int last) {
    for (int p = last - 1; p >= first; p--)
        MTC_CHECK(mtc_ddp_param_grad_ready(d, p));
    return MTC_OK;
}

int mtc_ddp_buckets_launched(const mtc_ddp *d) { return d->next_launch; }

static void ddp_reset_step(mtc_ddp *d) {
    memset(d->ready, 0, (size_t)d->layout.nparams);
    for (int b = 0; b < d->layout.nbuckets; b++)
        d->buckets[b].nready = 0;
    d->next_launch = d->next_inter = 0;
}

mtc_result_t mtc_ddp_finish(mtc_ddp *d) {
    mtc_result_t rc = MTC_OK;
    int missing = -1;
    if (d->cfg.overlap_grad_reduce)
        for (int p = d->layout.nparams - 1; p >= 0 && missing < 0; p--)
            if (!d->ready[p] && d->layout.param_bucket[p] >= 0) missing = p;
    if (missing < 0) {
        /* launch the rest in order; then every reduce-scatter gets its inter all-reduce */
        for (; d->next_launch < d->layout.nbuckets && rc == MTC_OK; d->next_launch++)
            rc = ddp_launch(d, d->next_launch);
        if (rc == MTC_OK) rc = ddp_chain_inter(d, 1);
    }
    mtc_result_t wrc = ddp_wait_all(d);
    if (rc == MTC_OK) rc = wrc;
    if (rc == MTC_OK && d->g16 && (d->comms.dp || d->comms.intra)) /* widen what was reduced */
        for (int b = 0; b < d->layout.nbuckets; b++) {
            dp_range s = d->cfg.use_distopt ? dp_layout_shard_range(&d->layout, d->shard_rank, b)
                                            : d->layout.bucket[b];
            nn_bf16_to_f32(d->grads + s.start, d->g16 + s.start, (size_t)(s.end - s.start));
        }
    ddp_reset_step(d);
    if (rc == MTC_OK && missing >= 0)
        rc = mtc_error(MTC_ERR_INVALID_USAGE,
                       "param %d (bucket %d) was never marked grad-ready with "
                       "--overlap-grad-reduce; call mtc_ddp_param_grad_ready for every param "
                       "during the last microbatch's backward",
                       missing, d->layout.param_bucket[missing]);
    return rc;
}

/* Calls fn(d, start, n, p, arg) on every range of reduced gradient this rank
 * holds: the pieces of its shards (dist-opt) or whole params, in a fixed
 * order. Padding is never visited. */
typedef void (*ddp_range_fn)(mtc_ddp *d, int64_t start, int64_t n, int p, void *arg);

static void ddp_for_each_held(mtc_ddp *d, ddp_range_fn fn, void *arg) {
    const dp_layout *l = &d->layout;
    if (!d->cfg.use_distopt) {
        for (int p = l->nparams - 1; p >= 0; p--)
            fn(d, l->param[p].start, l->param[p].end - l->param[p].start, p, arg);
        return;
    }
    for (int b = 0; b < l->nbuckets; b++) {
        int cnt;
        const dp_shard_param *sp = dp_layout_shard_params(l, d->shard_rank, b, &cnt);
        for (int k = 0; k < cnt; k++)
            fn(d, sp[k].gbuf_world.start, sp[k].gbuf_world.end - sp[k].gbuf_world.start,
               sp[k].param, arg);
    }
}

static void ddp_count_range(mtc_ddp *d, int64_t start, int64_t n, int p, void *arg) {
    *(int64_t *)arg += n;
}

int64_t mtc_ddp_held_numel(const mtc_ddp *d) {
    int64_t n = 0;
    ddp_for_each_held((mtc_ddp *)d, ddp_count_range, &n);
    return n;
}

void mtc_ddp_memory(const mtc_ddp *d, mtc_dp_memory *out) {
    size_t buf = (size_t)d->layout.numel * sizeof(float);
    out->param_bytes = buf;
    out->grad_bytes = buf;
    out->optim_state_bytes = 2 * (size_t)mtc_ddp_held_numel(d) * sizeof(float);
}
