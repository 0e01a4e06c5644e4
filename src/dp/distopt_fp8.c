/* dp/distopt_fp8.c - the fp8 parameter all-gather of dp/distopt_fp8.h.
 *
 *   copy (bf16 values)  --amax of owned pieces--> all-reduce MAX --> scales
 *   owned shard         --encode: fp8 code | bf16 bits--> send (S_max bytes)
 *   all-gather(intra)   --> recv (dp x S_max) --decode--> copy, every rank
 *
 * Each element's width is known from the layout alone (1 for an fp8
 * weight's element, 2 otherwise), so every rank knows every shard's encoded
 * size and the decoder walks the same params the encoder walked. */
#include "dp/distopt_fp8.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/mem.h"
#include "dp/distopt.h"
#include "nn/fp8.h"

#define BLK 128

static int nblocks(int n) { return (n + BLK - 1) / BLK; }

void mtc_distopt_fp8_free(mtc_distopt_fp8 *f) {
    if (!f) return;
    free(f->w);
    free(f->amax_off);
    free(f->amax);
    free(f->wof);
    free(f->enc);
    free(f->bw_off);
    free(f->bw);
    free(f->send);
    free(f->recv);
    free(f);
}

/* Calls fn(ctx, w, e0, e1) for the runs of [a, b) of the buffer: w the
 * weight index of the run's param (-1 for any other element), [e0, e1) in
 * buffer coordinates. Params of a bucket are disjoint and sorted by start
 * in the layout; the gaps (padding, alignment) are non-fp8 runs. */
typedef void (*run_fn)(void *ctx, int w, int64_t e0, int64_t e1);
static void walk(const mtc_distopt_fp8 *f, int b, int64_t a, int64_t e, run_fn fn, void *ctx) {
    const dp_layout *l = &f->o->ddp->layout;
    int64_t cur = a;
    for (int j = f->bw_off[b]; j < f->bw_off[b + 1]; j++) { /* ascending start */
        int w = f->bw[j], p = f->w[w].param;
        int64_t s = l->param[p].start > cur ? l->param[p].start : cur;
        int64_t t = l->param[p].end < e ? l->param[p].end : e;
        if (s >= t) continue;
        if (s > cur) fn(ctx, -1, cur, s);
        fn(ctx, w, s, t);
        cur = t;
    }
    if (cur < e) fn(ctx, -1, cur, e);
}

typedef struct {
    size_t bytes;
} size_ctx;
static void size_run(void *ctx, int w, int64_t e0, int64_t e1) {
    ((size_ctx *)ctx)->bytes += (size_t)(e1 - e0) * (w < 0 ? 2 : 1);
}

mtc_result_t mtc_distopt_fp8_init(struct mtc_distopt *o, mtc_distopt_fp8_mode mode,
                                  const mtc_distopt_fp8_weight *w, int nw, mtc_comm_t amax_comm,
                                  mtc_distopt_fp8 **out) {
    *out = NULL;
    if (!o->copy)
        return mtc_error(MTC_ERR_INVALID_USAGE,
                         "the fp8 parameter all-gather needs the bf16 compute copy "
                         "(mtc_distopt_gather_into)");
    const dp_layout *l = &o->ddp->layout;
    mtc_distopt_fp8 *f;
    MTC_CHECK(mtc_mem_calloc(1, sizeof *f, (void **)&f));
    f->o = o, f->mode = mode, f->amax_comm = amax_comm, f->nw = nw;
    mtc_result_t rc = mtc_mem_calloc((size_t)nw + 1, sizeof *f->w, (void **)&f->w);
    if (rc == MTC_OK) rc = mtc_mem_calloc((size_t)nw + 1, sizeof(int), (void **)&f->amax_off);
    if (rc == MTC_OK) rc = mtc_mem_calloc((size_t)l->nparams + 1, sizeof(int), (void **)&f->wof);
    if (rc == MTC_OK)
        rc = mtc_mem_calloc((size_t)l->nbuckets + 1, sizeof(size_t), (void **)&f->enc);
    if (rc != MTC_OK) goto fail;
    for (int p = 0; p < l->nparams; p++)
        f->wof[p] = -1;
    memcpy(f->w, w, (size_t)nw * sizeof *w);
    for (int i = 0; i < nw; i++) {
        int p = w[i].param;
        if (p < 0 || p >= l->nparams || l->param_bucket[p] < 0 ||
            (int64_t)w[i].rows * w[i].cols != l->param[p].end - l->param[p].start) {
            rc = mtc_error(MTC_ERR_INVALID_ARGUMENT,
                           "fp8 weight %d: param %d of %d rows x %d cols is not in the buffer", i,
                           p, w[i].rows, w[i].cols);
            goto fail;
        }
        f->wof[p] = i;
        f->fp8_values += (int64_t)w[i].rows * w[i].cols;
        int n = mode == MTC_DISTOPT_FP8_BLOCKWISE ? nblocks(w[i].rows) * nblocks(w[i].cols) : 1;
        f->amax_off[i + 1] = f->amax_off[i] + n;
    }
    rc = mtc_mem_calloc((size_t)f->amax_off[nw] + 1, sizeof(float), (void **)&f->amax);
    if (rc == MTC_OK)
        rc = mtc_mem_calloc((size_t)l->nbuckets + 1, sizeof(int), (void **)&f->bw_off);
    if (rc == MTC_OK) rc = mtc_mem_calloc((size_t)nw + 1, sizeof(int), (void **)&f->bw);
    if (rc != MTC_OK) goto fail;
    for (int b = 0, n = 0; b < l->nbuckets; b++) { /* each bucket's weights by start */
        f->bw_off[b] = n;
        for (int i = 0; i < nw; i++)
            if (l->param_bucket[w[i].param] == b) {
                int j = n++;
                while (j > f->bw_off[b] &&
                       l->param[f->w[f->bw[j - 1]].param].start > l->param[w[i].param].start) {
                    f->bw[j] = f->bw[j - 1];
                    j--;
                }
                f->bw[j] = i;
            }
        f->bw_off[b + 1] = n;
    }
    size_t smax = 0;
    for (int b = 0; b < l->nbuckets; b++) {
        dp_range bk = l->bucket[b];
        int64_t shard = (bk.end - bk.start) / l->dp;
        for (int r = 0; r < l->dp; r++) {
            size_ctx sc = {0};
            walk(f, b, bk.start + r * shard, bk.start + (r + 1) * shard, size_run, &sc);
            if (sc.bytes > f->enc[b]) f->enc[b] = sc.bytes;
        }
        f->enc[b] = (f->enc[b] + 1) & ~(size_t)1; /* whole bf16 units */
        if (f->enc[b] > smax) smax = f->enc[b];
        f->gather_bytes += f->enc[b] * (size_t)l->dp;
        f->bf16_bytes += (size_t)(bk.end - bk.start) * 2;
    }
    f->amax_bytes = (size_t)f->amax_off[nw] * sizeof(float);
    f->cap = smax;
    rc = mtc_mem_calloc(smax + 2, 1, (void **)&f->send);
    if (rc == MTC_OK) rc = mtc_mem_calloc(smax * (size_t)l->dp + 2, 1, (void **)&f->recv);
    if (rc != MTC_OK) goto fail;
    f->sinv_min = INFINITY, f->sinv_max = 0.0f;
    *out = f;
    o->fp8 = f;
    return MTC_OK;
fail:
    mtc_distopt_fp8_free(f);
    return rc;
}

/* ---- amaxes of the owned pieces ---------------------------------------------------------- */

typedef struct {
    mtc_distopt_fp8 *f;
    const float *copy;
} amax_ctx;

static void amax_run(void *ctx, int w, int64_t e0, int64_t e1) {
    amax_ctx *c = ctx;
    if (w < 0) return;
    mtc_distopt_fp8 *f = c->f;
    const mtc_distopt_fp8_weight *wt = &f->w[w];
    int64_t base = f->o->ddp->layout.param[wt->param].start;
    float *a = f->amax + f->amax_off[w];
    if (f->mode != MTC_DISTOPT_FP8_BLOCKWISE) {
        float m = nn_fp8_amax(c->copy + e0, (size_t)(e1 - e0));
        if (m > a[0]) a[0] = m;
        return;
    }
    int nbc = nblocks(wt->cols);
    for (int64_t e = e0; e < e1;) { /* row by row: a row's run of one block column at a time */
        int64_t i = e - base;
        int r = (int)(i / wt->cols), c0 = (int)(i % wt->cols);
        int c1 = (c0 / BLK + 1) * BLK;
        if (c1 > wt->cols) c1 = wt->cols;
        int64_t n = c1 - c0 < e1 - e ? c1 - c0 : e1 - e;
        float m = nn_fp8_amax(c->copy + e, (size_t)n);
        float *s = &a[(r / BLK) * nbc + c0 / BLK];
        if (m > *s) *s = m;
        e += n;
    }
}

/* The scale and its inverse of element i (weight-relative) of weight w. */
static void scale_of(const mtc_distopt_fp8 *f, int w, int64_t i, float *scale, float *inv) {
    const mtc_distopt_fp8_weight *wt = &f->w[w];
    const float *a = f->amax + f->amax_off[w];
    switch (f->mode) {
    case MTC_DISTOPT_FP8_DELAYED: *scale = *wt->scale; break;
    case MTC_DISTOPT_FP8_TENSORWISE:
        *scale = nn_fp8_scale_from_amax(a[0], nn_fp8_max(NN_FP8_E4M3), 0, FLT_MAX);
        break;
    case MTC_DISTOPT_FP8_BLOCKWISE: {
        int r = (int)(i / wt->cols), c = (int)(i % wt->cols);
        nn_fp8_block_scale(NN_FP8_E4M3, NN_FP8_BLOCK_POW2,
                           a[(r / BLK) * nblocks(wt->cols) + c / BLK], scale, inv);
        return;
    }
    }
    *inv = 1.0f / *scale;
}

/* ---- encode / decode --------------------------------------------------------------------- */

typedef struct {
    mtc_distopt_fp8 *f;
    float *copy;
    uint8_t *p; /* the next byte */
} code_ctx;

static void encode_run(void *ctx, int w, int64_t e0, int64_t e1) {
    code_ctx *c = ctx;
    const float *x = c->copy;
    if (w < 0) {
        for (int64_t e = e0; e < e1; e++) {
            uint32_t u;
            memcpy(&u, &x[e], 4);
            uint16_t h = (uint16_t)(u >> 16); /* the copy holds bf16 values: exact */
            memcpy(c->p, &h, 2);
            c->p += 2;
        }
        return;
    }
    mtc_distopt_fp8 *f = c->f;
    int64_t base = f->o->ddp->layout.param[f->w[w].param].start;
    const float fmax = nn_fp8_max(NN_FP8_E4M3);
    float scale = 1, inv = 1;
    int per_tensor = f->mode != MTC_DISTOPT_FP8_BLOCKWISE;
    if (per_tensor) scale_of(f, w, 0, &scale, &inv);
    for (int64_t e = e0; e < e1; e++) {
        if (!per_tensor) scale_of(f, w, e - base, &scale, &inv);
        float v = x[e] * scale;
        f->clipped += fabsf(v) > fmax;
        *c->p++ = nn_fp8_encode(NN_FP8_E4M3, v);
    }
}

static void decode_run(void *ctx, int w, int64_t e0, int64_t e1) {
    code_ctx *c = ctx;
    float *x = c->copy;
    if (w < 0) {
        for (int64_t e = e0; e < e1; e++) {
            uint16_t h;
            memcpy(&h, c->p, 2);
            x[e] = mtc_bf16_to_f32(h);
            c->p += 2;
        }
        return;
    }
    mtc_distopt_fp8 *f = c->f;
    int64_t base = f->o->ddp->layout.param[f->w[w].param].start;
    float scale = 1, inv = 1;
    int per_tensor = f->mode != MTC_DISTOPT_FP8_BLOCKWISE;
    if (per_tensor) scale_of(f, w, 0, &scale, &inv);
    for (int64_t e = e0; e < e1; e++) {
        if (!per_tensor) scale_of(f, w, e - base, &scale, &inv);
        x[e] = nn_fp8_decode(NN_FP8_E4M3, *c->p++) * inv;
    }
}

mtc_result_t mtc_distopt_fp8_gather(mtc_distopt_fp8 *f) {
    mtc_distopt *o = f->o;
    mtc_ddp *d = o->ddp;
    const dp_layout *l = &d->layout;
    mtc_comm_t g = d->comms.intra;
    /* 1. amaxes of the owned pieces (delayed: for its history; the scale is the step's) */
    memset(f->amax, 0, (size_t)f->amax_off[f->nw] * sizeof(float));
    amax_ctx ac = {f, o->copy};
    for (int b = 0; b < l->nbuckets; b++) {
        int64_t shard = (l->bucket[b].end - l->bucket[b].start) / l->dp;
        int64_t a = l->bucket[b].start + (int64_t)d->shard_rank * shard;
        walk(f, b, a, a + shard, amax_run, &ac);
    }
    /* comm: all-reduce MAX(TP x DP x CP: a tensor's amax; blockwise: the gather
     * group, whose ranks hold the pieces of one TP-local block) */
    mtc_comm_t ag = f->mode == MTC_DISTOPT_FP8_BLOCKWISE || !f->amax_comm ? g : f->amax_comm;
    if (ag && mtc_comm_size(ag) > 1 && f->amax_off[f->nw] > 0)
        MTC_CHECK(mtc_all_reduce(f->amax, f->amax, (size_t)f->amax_off[f->nw], MTC_DTYPE_F32,
                                 MTC_OP_MAX, ag));
    for (int i = 0; i < f->nw; i++) {
        if (f->mode == MTC_DISTOPT_FP8_DELAYED && f->w[i].amax_slot &&
            f->amax[f->amax_off[i]] > *f->w[i].amax_slot)
            *f->w[i].amax_slot = f->amax[f->amax_off[i]];
        for (int k = f->amax_off[i]; k < f->amax_off[i + 1]; k++) { /* the scales' range */
            if (!(f->amax[k] > 0)) continue;
            float s, inv;
            if (f->mode == MTC_DISTOPT_FP8_BLOCKWISE)
                nn_fp8_block_scale(NN_FP8_E4M3, NN_FP8_BLOCK_POW2, f->amax[k], &s, &inv);
            else
                scale_of(f, i, 0, &s, &inv);
            if (inv < f->sinv_min) f->sinv_min = inv;
            if (inv > f->sinv_max) f->sinv_max = inv;
        }
    }
    f->casts++;
    /* 2. per bucket: encode the owned shard, all-gather, decode every shard */
    for (int b = l->nbuckets - 1; b >= 0; b--) {
        dp_range bk = l->bucket[b];
        int64_t shard = (bk.end - bk.start) / l->dp;
        int64_t a = bk.start + (int64_t)d->shard_rank * shard;
        size_t S = f->enc[b];
        code_ctx cc = {f, o->copy, f->send};
        walk(f, b, a, a + shard, encode_run, &cc);
        memset(cc.p, 0, S - (size_t)(cc.p - f->send)); /* the padding */
        if (g && l->dp > 1) {
            /* comm: all-gather(INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP) of S bytes
             * (S / 2 bf16 units: the bytes are copied, never added) */
            MTC_CHECK(mtc_all_gather(f->send, f->recv, S / 2, MTC_DTYPE_BF16, g));
        } else
            memcpy(f->recv, f->send, S);
        for (int r = 0; r < l->dp; r++) {
            code_ctx dc = {f, o->copy, f->recv + (size_t)r * S};
            walk(f, b, bk.start + r * shard, bk.start + (r + 1) * shard, decode_run, &dc);
        }
    }
    return MTC_OK;
}
