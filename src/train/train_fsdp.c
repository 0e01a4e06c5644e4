/* train/train_fsdp.c - Megatron-FSDP in the training loop (dp/fsdp.h): one
 * mtc_fsdp per chunk buffer (laid out a bucket per unit by dp/chunk_layout.c)
 * that shards gradients (optim_grads) or gradients and params
 * (optim_grads_params), and the pass hooks that reach it. The no_shard and
 * optim strategies need none of this: they are the plain data-parallel and
 * the distributed-optimizer paths (cli/ maps them). */
#include <stdio.h>
#include <stdlib.h>

#include "ckpt/state.h"
#include "core/mem.h"
#include "dp/fsdp.h"
#include "train/train_internal.h"

int train_fsdp_grads(const mtc_train_config *c) {
    return c->fsdp_strategy == MTC_FSDP_OPTIM_GRADS ||
           c->fsdp_strategy == MTC_FSDP_OPTIM_GRADS_PARAMS;
}

void train_fsdp_zero_grad(void *ctx) { /* every buffer of the chunk */
    train_chunk *ch = ctx;
    for (int b = 0; b < TRAIN_GBUF_MAX; b++)
        if (ch->buf[b].fsdp) mtc_fsdp_zero_grad(ch->buf[b].fsdp);
}

mtc_result_t train_fsdp_chunk_init(train_rank *x, train_chunk *ch) {
    if (!train_fsdp_grads(x->cfg)) return MTC_OK;
    for (int b = 0; b < x->nbuf; b++) {
        train_gbuf *g = &ch->buf[b];
        if (!g->ddp) continue; /* a chunk without local experts */
        MTC_CHECK(mtc_fsdp_init(g->ddp, x->cfg->fsdp_strategy, &g->fsdp));
        mtc_fsdp_attach_optimizer(g->fsdp, g->dopt);
        if (x->cfg->fsdp_outer_optim) MTC_CHECK(mtc_fsdp_set_outer_optim(g->fsdp));
        mtc_fsdp_set_overlap(g->fsdp, x->cfg->overlap_param_gather, x->cfg->overlap_grad_reduce);
        if (x->cfg->grad_reduce_in_bf16) MTC_CHECK(mtc_fsdp_set_grad_reduce_bf16(g->fsdp));
        if (x->cfg->fsdp_double_buffer) mtc_fsdp_set_double_buffer(g->fsdp);
        mtc_model *m = ch->model; /* --bf16 / --fp16: the units gathered into the copies */
        if (m->precision != TP_PREC_F32 && m->params_c && mtc_fsdp_shards_params(g->fsdp)) {
            size_t o = g->ddp->cfg.base;
            MTC_CHECK(mtc_fsdp_set_compute_copies(g->fsdp, m->params_c + o,
                                                  m->params16 ? m->params16 + o : NULL,
                                                  m->precision == TP_PREC_FP16));
            mtc_model_copies_gathered(m);
        }
    }
    return MTC_OK;
}

void train_fsdp_shard(train_rank *x) {
    for (int k = 0; k < x->vpp; k++)
        for (int b = 0; b < x->nbuf; b++)
            if (x->chunks[k].buf[b].fsdp) mtc_fsdp_shard(x->chunks[k].buf[b].fsdp);
}

int train_fsdp_meta(const mtc_train_config *c) {
    return c->fsdp_meta_init && c->fsdp_strategy == MTC_FSDP_OPTIM_GRADS_PARAMS;
}

mtc_result_t train_fsdp_init_params(train_rank *x, train_chunk *ch) {
    int n = 0, at = 0;
    for (int b = 0; b < x->nbuf; b++)
        if (ch->buf[b].ddp) n += ch->buf[b].ddp->layout.nbuckets;
    int64_t(*keep)[2];
    MTC_CHECK(mtc_mem_calloc((size_t)(n ? n : 1), sizeof *keep, (void **)&keep));
    /* each unit's shard, at the buffer's place in the model's buffers */
    for (int b = 0; b < x->nbuf; b++) {
        const mtc_ddp *d = ch->buf[b].ddp;
        for (int u = 0; d && u < d->layout.nbuckets; u++, at++) {
            dp_range s = dp_layout_shard_range(&d->layout, d->shard_rank, u);
            keep[at][0] = (int64_t)d->cfg.base + s.start;
            keep[at][1] = (int64_t)d->cfg.base + s.end;
        }
    }
    mtc_model_init_params_ranges(ch->model, x->cfg->seed, (const int64_t(*)[2])keep, at);
    free(keep);
    return MTC_OK;
}

size_t train_fsdp_setup_bytes(const train_rank *x) {
    size_t n = 0;
    for (int k = 0; k < x->vpp; k++)
        for (int b = 0; b < x->nbuf; b++)
            if (x->chunks[k].buf[b].fsdp) n += mtc_fsdp_setup_bytes(x->chunks[k].buf[b].fsdp);
    return n;
}

mtc_result_t train_fsdp_load_pieces(const train_chunk *ch, mtc_ckpt_pieces *l, int i,
                                    const char *key) {
    const mtc_model *m = ch->model;
    const mtc_param *p = &m->reg.params[i];
    for (int b = 0; b < TRAIN_GBUF_MAX; b++) {
        const mtc_ddp *d = ch->buf[b].ddp;
        int u = d && i < d->layout.nparams ? d->layout.param_bucket[i] : -1;
        if (u < 0) continue; /* not in this buffer */
        dp_range s = dp_layout_shard_range(&d->layout, d->shard_rank, u), r = d->layout.param[i];
        int64_t lo = r.start > s.start ? r.start : s.start, hi = r.end < s.end ? r.end : s.end;
        if (hi <= lo) continue;
        size_t a = d->cfg.base + (size_t)lo - p->offset; /* local elements [a, a + hi - lo) */
        MTC_CHECK(mtc_ckpt_param_pieces(l, &m->reg, p, m->tp_rank, key, m->params + p->offset + a,
                                        a, a + (size_t)(hi - lo)));
    }
    return MTC_OK;
}

mtc_comm_t train_fsdp_norm_group(const train_rank *x, int b) {
    const mtc_ddp_kind *kd = &x->gbuf[b];
    /* HFSDP: each rank's optimizer slices are disjoint over the whole DP x CP group */
    return x->cfg->fsdp_outer_optim && train_fsdp_grads(x->cfg) ? kd->dp : kd->shard;
}

mtc_result_t train_fsdp_params_needed(const train_chunk *ch, int first, int last) {
    for (int b = 0; b < TRAIN_GBUF_MAX; b++)
        if (ch->buf[b].fsdp) MTC_CHECK(mtc_fsdp_params_needed(ch->buf[b].fsdp, first, last));
    return MTC_OK;
}

void train_fsdp_begin_pass(const train_rank *x, const train_chunk *ch, int backward) {
    for (int b = 0; b < TRAIN_GBUF_MAX; b++)
        if (ch->buf[b].fsdp) {
            char label[32];
            snprintf(label, sizeof label, "chunk %d%s", (int)(ch - x->chunks),
                     b == TRAIN_GBUF_EXPERT ? " experts" : "");
            mtc_fsdp_set_trace(ch->buf[b].fsdp, x->obs.trace, label);
            mtc_fsdp_begin_pass(ch->buf[b].fsdp, backward);
        }
}

mtc_result_t train_fsdp_grads_ready(const train_chunk *ch, int first, int last) {
    for (int b = 0; b < TRAIN_GBUF_MAX; b++)
        if (ch->buf[b].fsdp) MTC_CHECK(mtc_fsdp_grads_ready(ch->buf[b].fsdp, first, last));
    return MTC_OK;
}

mtc_result_t train_fsdp_gather_all(train_rank *x) {
    for (int k = 0; k < x->vpp; k++)
        for (int b = 0; b < x->nbuf; b++)
            if (x->chunks[k].buf[b].fsdp) MTC_CHECK(mtc_fsdp_gather_all(x->chunks[k].buf[b].fsdp));
    return MTC_OK;
}

mtc_result_t train_fsdp_validate(const mtc_train_config *c) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    if (c->fsdp_unit_size < 0)
        return mtc_error(E, "suggested-communication-unit-size=%lld must be >= 1 elements",
                         (long long)c->fsdp_unit_size);
    if (c->fsdp_meta_init && c->fsdp_strategy == MTC_FSDP_NO_SHARD) /* Megatron's ValueError */
        return mtc_error(E, "Meta device initialization (init_model_with_meta_device=True) is not "
                            "supported or necessary for the 'no_shard' / 0 sharding strategy: "
                            "drop --init-model-with-meta-device or pick a sharded strategy");
    if (!train_fsdp_grads(c)) return MTC_OK;
    if (c->overlap_param_gather && !c->overlap_grad_reduce) /* Megatron's rule */
        return mtc_error(E, "Must use --overlap-param-gather with --overlap-grad-reduce");
    return MTC_OK;
}
