/* dp/distopt.c - the distributed optimizer of dp/distopt.h.
 *
 *   grads:  | b0: r0 | r1 | ... | b1: r0 | r1 | ... |   reduced shards (ddp)
 *               │ AdamW on rank r's pieces only (m, v packed piece by piece)
 *   params: | b0: r0'| r1 | ... | b1: r0'| r1 | ... |
 *               │ all-gather(intra) per bucket, last bucket first
 *   params: | b0: r0'| r1'| ... | b1: r0'| r1'| ... |   every rank
 *
 * Relies on dp/ddp.h for the buffers, layout and communicators, and on
 * nn_adamw_update for the element-wise update. With a compute copy
 * (--bf16) the updated shard is rounded into the copy and the copy is
 * gathered instead (distopt.h). One buffer per instance: train/ gives the
 * expert-parallel buffer an instance of its own, sharded over expert-DP,
 * as Megatron. */
#include "dp/distopt.h"

#include "dp/distopt_fp8.h"

#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "nn/lowp.h"
#include "nn/nn.h"

mtc_result_t mtc_distopt_init(mtc_ddp *d, int overlap_param_gather, mtc_distopt **out) {
    *out = NULL;
    if (!d->cfg.use_distopt)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "the distributed optimizer needs an mtc_ddp built with use_distopt=1 "
                         "(--use-distributed-optimizer)");
    const dp_layout *l = &d->layout;
    mtc_result_t rc;
    mtc_distopt *o = NULL;
    MTC_CHECK_GOTO(mtc_mem_calloc(1, sizeof *o, (void **)&o), rc, fail);
    o->ddp = d, o->parts = 1;
    o->overlap_param_gather = overlap_param_gather != 0;
    int total = 0;
    for (int b = 0; b < l->nbuckets; b++) {
        int cnt;
        (void)dp_layout_shard_params(l, d->shard_rank, b, &cnt);
        total += cnt;
    }
    MTC_CHECK_GOTO(
        mtc_mem_calloc((size_t)(total ? total : 1), sizeof(mtc_distopt_piece), (void **)&o->pieces),
        rc, fail);
    for (int b = 0; b < l->nbuckets; b++) {
        int cnt;
        const dp_shard_param *sp = dp_layout_shard_params(l, d->shard_rank, b, &cnt);
        for (int k = 0; k < cnt; k++) {
            mtc_distopt_piece *pc = &o->pieces[o->npieces++];
            pc->param = sp[k].param;
            pc->start = sp[k].gbuf_world.start;
            pc->n = sp[k].gbuf_world.end - sp[k].gbuf_world.start;
            pc->state = o->n;
            pc->decay = d->is_2d[sp[k].param];
            pc->decoupled = d->emb_or_out[sp[k].param];
            o->n += pc->n;
        }
    }
    size_t bytes = (size_t)(o->n ? o->n : 1) * sizeof(float);
    MTC_CHECK_GOTO(mtc_mem_alloc_big(bytes, 1, (void **)&o->m), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_alloc_big(bytes, 1, (void **)&o->v), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_calloc((size_t)l->nbuckets, sizeof(mtc_request_t), (void **)&o->gather),
                   rc, fail);
    *out = o;
    return MTC_OK;
fail:
    mtc_distopt_free(o);
    return rc;
}

mtc_result_t mtc_distopt_narrow(mtc_distopt *o, int part, int parts) {
    const dp_layout *l = &o->ddp->layout;
    if (parts < 1 || part < 0 || part >= parts)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "optimizer slice %d of %d", part, parts);
    for (int b = 0; b < l->nbuckets; b++)
        if ((l->bucket[b].end - l->bucket[b].start) % ((int64_t)l->dp * parts))
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "bucket %d's shard does not split into %d optimizer slices", b, parts);
    int64_t n = 0;
    int np = 0;
    for (int k = 0; k < o->npieces; k++) { /* in place: a piece only shrinks or goes */
        mtc_distopt_piece pc = o->pieces[k];
        int b = l->param_bucket[pc.param];
        dp_range s = dp_layout_shard_range(l, o->ddp->shard_rank, b);
        int64_t w = (s.end - s.start) / parts, lo = s.start + part * w, hi = lo + w;
        int64_t a = pc.start > lo ? pc.start : lo, e = pc.start + pc.n < hi ? pc.start + pc.n : hi;
        if (e <= a) continue;
        pc.start = a, pc.n = e - a, pc.state = n;
        o->pieces[np++] = pc;
        n += pc.n;
    }
    size_t old = (size_t)(o->n ? o->n : 1) * sizeof(float),
           bytes = (size_t)(n ? n : 1) * sizeof(float);
    mtc_mem_free_big(o->m, old), mtc_mem_free_big(o->v, old);
    o->m = o->v = NULL, o->npieces = np, o->n = n, o->parts = parts;
    MTC_CHECK(mtc_mem_alloc_big(bytes, 1, (void **)&o->m));
    return mtc_mem_alloc_big(bytes, 1, (void **)&o->v);
}

void mtc_distopt_free(mtc_distopt *o) {
    if (!o) return;
    if (o->gather) (void)mtc_distopt_param_gather_wait(o);
    mtc_distopt_fp8_free(o->fp8);
    size_t bytes = (size_t)(o->n ? o->n : 1) * sizeof(float);
    mtc_mem_free_big(o->m, bytes);
    mtc_mem_free_big(o->v, bytes);
    free(o->pieces);
    free(o->gather);
    free(o);
}

mtc_result_t mtc_distopt_param_gather_wait_param(mtc_distopt *o, int p) {
    if (p < 0 || p >= o->ddp->layout.nparams)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "param index %d outside [0, %d)", p,
                         o->ddp->layout.nparams);
    int b = o->ddp->layout.param_bucket[p];
    return b < 0 ? MTC_OK : mtc_request_wait(&o->gather[b]); /* -1: not in this buffer */
}

mtc_result_t mtc_distopt_param_gather_wait(mtc_distopt *o) {
    mtc_result_t first = MTC_OK;
    /* the order they were issued in: last bucket first */
    for (int b = o->ddp->layout.nbuckets - 1; b >= 0; b--) {
        mtc_result_t rc = mtc_request_wait(&o->gather[b]);
        if (first == MTC_OK) first = rc;
    }
    return first;
}

void mtc_distopt_gather_into(mtc_distopt *o, float *copy) { o->copy = copy; }

/* comm: all-gather(intra) of every bucket's shards of buf, in forward order. */
static mtc_result_t distopt_gather_start(mtc_distopt *o, float *buf) {
    mtc_ddp *d = o->ddp;
    if (!d->comms.intra) return MTC_OK;
    for (int b = d->layout.nbuckets - 1; b >= 0; b--) {
        dp_range bk = d->layout.bucket[b];
        size_t shard = (size_t)(bk.end - bk.start) / (size_t)d->layout.dp;
        float *base = buf + bk.start;
        /* in place: sendbuf = recvbuf + rank * sendcount */
        MTC_CHECK(mtc_all_gather_start(base + (size_t)d->shard_rank * shard, base, shard,
                                       MTC_DTYPE_F32, d->comms.intra, &o->gather[b]));
    }
    return MTC_OK;
}

mtc_result_t mtc_distopt_step(mtc_distopt *o, float lr, float grad_scale,
                              const mtc_distopt_hparams *hp) {
    mtc_ddp *d = o->ddp;
    if (d->next_launch > 0)
        return mtc_error(MTC_ERR_INVALID_USAGE,
                         "optimizer step while %d gradient buckets are still being reduced; "
                         "call mtc_ddp_finish before mtc_distopt_step",
                         d->next_launch);
    MTC_CHECK(mtc_distopt_param_gather_wait(o));
    o->step++;
    for (int k = 0; k < o->npieces; k++) {
        const mtc_distopt_piece *pc = &o->pieces[k];
        nn_adamw_update_scaled(
            d->params + pc->start, d->grads + pc->start, o->m + pc->state, o->v + pc->state,
            (size_t)pc->n, grad_scale, pc->decoupled && hp->decoupled ? hp->lr_decoupled : lr,
            hp->beta1, hp->beta2, hp->eps, pc->decay ? hp->weight_decay : 0.0f, (int)o->step);
        if (o->copy) { /* the owner's bf16 params, rounded from its fp32 main shard */
            memcpy(o->copy + pc->start, d->params + pc->start, (size_t)pc->n * sizeof(float));
            nn_round_bf16(o->copy + pc->start, (size_t)pc->n);
        }
    }
    if (o->no_gather) return MTC_OK;
    if (o->fp8 && o->copy) return mtc_distopt_fp8_gather(o->fp8); /* blocking */
    MTC_CHECK(distopt_gather_start(o, o->copy ? o->copy : d->params));
    if (!o->overlap_param_gather) MTC_CHECK(mtc_distopt_param_gather_wait(o));
    return MTC_OK;
}

mtc_result_t mtc_distopt_gather_main(mtc_distopt *o, float *full) {
    mtc_ddp *d = o->ddp;
    MTC_CHECK(mtc_distopt_param_gather_wait(o));
    memset(full, 0, (size_t)d->layout.numel * sizeof(float));
    for (int k = 0; k < o->npieces; k++)
        memcpy(full + o->pieces[k].start, d->params + o->pieces[k].start,
               (size_t)o->pieces[k].n * sizeof(float));
    MTC_CHECK(distopt_gather_start(o, full));
    return mtc_distopt_param_gather_wait(o);
}
