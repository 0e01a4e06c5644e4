/* model/block.c - the attention and MLP halves of a layer; see block.h.
 * Backward scratch layout: [block temporaries | linear scratch]. */
#include "model/block.h"

#include <string.h>

#include "tp/fp8_linear.h"
#include "tp/mappings.h"

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* Local widths of the rank's shard. */
typedef struct {
    int NH, NG, HS, QD, KD, QKV; /* per rank: heads, groups, head size, q / k widths, qkv row */
} att_shape;

static att_shape att_local(const tp_ctx *tp, const model_block_dims *d) {
    int p = tp_size(tp->comm);
    att_shape s = {d->NH / p, d->NG / p, d->HS, 0, 0, 0};
    s.QD = s.NH * s.HS, s.KD = s.NG * s.HS, s.QKV = s.QD + 2 * s.KD;
    return s;
}

/* The caller's attention-dropout spec seen from this rank's heads. */
static const nn_dropout_spec *local_heads(nn_dropout_spec *out, const nn_dropout_spec *drop, int NH,
                                          int r, int NH_tp) {
    if (!drop) return NULL;
    *out = *drop;
    out->NHg = drop->NHg ? drop->NHg : NH;
    out->h0 = drop->h0 + r * NH_tp;
    return out;
}

/* The tiled kernel's view of the packed rows: queries [0, QD), keys
 * [QD, QD + KD), values [QD + KD, QKV) of each row; positions 0..T-1. */
static nn_attention_shape att_geometry(const att_shape *s, int B, int T) {
    nn_attention_shape g = {.B = B,
                            .T = T,
                            .Tk = T,
                            .NH = s->NH,
                            .NKV = s->NG,
                            .HS = s->HS,
                            .ldq = s->QKV,
                            .ldk = s->QKV,
                            .ldv = s->QKV,
                            .ldo = s->QD};
    return g;
}

static mtc_result_t att_check(const tp_ctx *tp, const model_block_dims *d) {
    int p = tp_size(tp->comm);
    if (d->NH < 1 || d->NG < 1 || d->NH % d->NG || d->HS < 1)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "num-attention-heads=%d is not divisible by num-query-groups=%d", d->NH,
                         d->NG);
    if (d->NG % p)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "num-query-groups=%d is not divisible by tensor-model-parallel-size=%d",
                         d->NG, p);
    return MTC_OK;
}

/* ---- --qk-layernorm ------------------------------------------------------------------- */

/* Rows [q_r | k_r | v_r] of qkv: copy part (off, width) of each of the N
 * rows to / from a contiguous (N, width) array. */
static void qkn_gather(float *dst, const float *qkv, size_t N, int ld, int off, int width) {
    for (size_t n = 0; n < N; n++)
        memcpy(dst + n * width, qkv + n * ld + off, (size_t)width * sizeof(float));
}
static void qkn_scatter(float *qkv, const float *src, size_t N, int ld, int off, int width) {
    for (size_t n = 0; n < N; n++)
        memcpy(qkv + n * ld + off, src + n * width, (size_t)width * sizeof(float));
}

/* qkv's q and k parts normalised per head in place (saving their inputs
 * and statistics in q->in, q->stat); tmp (N * QD_tp). */
static void qkn_forward(const tp_ctx *tp, model_attention_acts *acts, float *tmp,
                        const att_shape *s, size_t N, const model_qk_norm *q) {
    size_t nq = N * s->NH, nk = N * s->NG;
    float *mean = q->stat, *rstd = q->stat + nq + nk;
    for (int part = 0; part < 2; part++) {
        int off = part ? s->QD : 0, width = part ? s->KD : s->QD;
        size_t rows = part ? nk : nq, o = part ? nq : 0;
        float *in = q->in + (part ? N * s->QD : 0);
        const float *w = part ? q->kw : q->qw, *b = part ? q->kb : q->qb;
        qkn_gather(in, acts->qkv, N, s->QKV, off, width);
        if (q->rms)
            nn_rmsnorm_forward(tp->pool, tmp, rstd + o, in, w, q->eps, (int)rows, s->HS);
        else
            nn_layernorm_forward_eps(tp->pool, tmp, mean + o, rstd + o, in, w, b, q->eps, (int)rows,
                                     s->HS);
        qkn_scatter(acts->qkv, tmp, N, s->QKV, off, width);
    }
}

/* dqkv's q and k parts through the norms' backward in place; tmp (2 N QD_tp). */
static void qkn_backward(const tp_ctx *tp, float *dqkv, float *tmp, const att_shape *s, size_t N,
                         const model_qk_norm *q) {
    size_t nq = N * s->NH, nk = N * s->NG;
    const float *mean = q->stat, *rstd = q->stat + nq + nk;
    float *dy = tmp, *dx = tmp + N * s->QD;
    for (int part = 0; part < 2; part++) {
        int off = part ? s->QD : 0, width = part ? s->KD : s->QD;
        size_t rows = part ? nk : nq, o = part ? nq : 0;
        const float *in = q->in + (part ? N * s->QD : 0);
        const float *w = part ? q->kw : q->qw;
        float *dw = part ? q->dkw : q->dqw, *db = part ? q->dkb : q->dqb;
        qkn_gather(dy, dqkv, N, s->QKV, off, width);
        if (q->rms)
            nn_rmsnorm_backward(tp->pool, dx, dw, dy, in, w, rstd + o, (int)rows, s->HS);
        else
            nn_layernorm_backward(tp->pool, dx, dw, db, dy, in, w, mean + o, rstd + o, (int)rows,
                                  s->HS);
        qkn_scatter(dqkv, dx, N, s->QKV, off, width);
    }
}

size_t model_attention_scratch_floats(const tp_ctx *tp, int B, int T, const model_block_dims *d) {
    att_shape s = att_local(tp, d);
    size_t N = (size_t)B * T;
    int QKV = (d->NH + 2 * d->NG) * d->HS, QD = d->NH * d->HS;
    size_t lin = max_sz(tp_column_linear_scratch_floats(tp, 0, B, T, d->C, QKV),
                        tp_row_linear_scratch_floats(tp, 1, B, T, QD, d->C));
    /* backward: [datty (N, QD_tp) | dqkv (N, QKV_tp) | linear scratch, which the
     * context-parallel attention borrows between the two linears]; the tiled
     * attention itself needs no scratch */
    nn_attention_shape g = att_geometry(&s, B, T);
    size_t cps = cp_attention_scratch_floats(d->cp, &g);
    size_t qkn = d->qk_norm ? 2 * N * s.QD : 0; /* the norms' backward temporaries */
    return N * s.QD + N * s.QKV + qkn + (lin > cps ? lin : cps);
}

mtc_result_t model_attention_forward(const tp_ctx *tp, float *out, model_attention_acts *acts,
                                     const float *in, const float *qkvw, const float *qkvb,
                                     const float *projw, const float *projb,
                                     const nn_dropout_spec *drop, float *scratch, int B, int T,
                                     const model_block_dims *d) {
    MTC_CHECK(att_check(tp, d));
    att_shape s = att_local(tp, d);
    int r = tp_rank(tp->comm), QKV = (d->NH + 2 * d->NG) * d->HS, QD = d->NH * d->HS;
    nn_dropout_spec dl;
    /* comm: column-parallel (SP: all-gather T) */
    tp_ctx t8;
    MTC_CHECK(tp_column_linear_forward(tp_fp8_ctx(&t8, tp, d->fp8, TP_FP8_QKV), acts->qkv,
                                       acts->in_total, in, qkvw, qkvb, scratch, 0, B, T, d->C,
                                       QKV));
    if (d->qk_norm) qkn_forward(tp, acts, scratch, &s, (size_t)B * T, d->qk_norm);
    if (d->rope) { /* q heads, then k heads, of every row */
        nn_rope_forward(tp->pool, acts->qkv, acts->qkv, d->rope, d->pos, d->t0, B, T, s.NH, s.HS,
                        s.QKV);
        nn_rope_forward(tp->pool, acts->qkv + s.QD, acts->qkv + s.QD, d->rope, d->pos, d->t0, B, T,
                        s.NG, s.HS, s.QKV);
    }
    nn_attention_shape g = att_geometry(&s, B, T);
    const float *qkv = acts->qkv;
    if (d->cp && d->cp->cp > 1) /* comm: the CP attention's ring / gather / all-to-all */
        MTC_CHECK(cp_attention_forward(d->cp, tp->pool, acts->atty, acts->lse, qkv, qkv + s.QD,
                                       qkv + s.QD + s.KD, &g,
                                       local_heads(&dl, drop, d->NH, r, s.NH), scratch));
    else
        nn_attention_forward(tp->pool, acts->atty, acts->lse, qkv, qkv + s.QD, qkv + s.QD + s.KD,
                             &g, local_heads(&dl, drop, d->NH, r, s.NH));
    /* comm: row-parallel (all-reduce; SP: reduce-scatter T) */
    return tp_row_linear_forward(tp_fp8_ctx(&t8, tp, d->fp8, TP_FP8_PROJ), out, acts->atty, projw,
                                 projb, scratch, 1, B, T, QD, d->C);
}

mtc_result_t model_attention_backward(const tp_ctx *tp, float *din, float *dqkvw, float *dqkvb,
                                      float *dprojw, float *dprojb, const float *dout,
                                      const model_attention_acts *acts, const float *in,
                                      const float *qkvw, const float *projw,
                                      const nn_dropout_spec *drop, float *scratch, int B, int T,
                                      const model_block_dims *d) {
    MTC_CHECK(att_check(tp, d));
    att_shape s = att_local(tp, d);
    int r = tp_rank(tp->comm), QKV = (d->NH + 2 * d->NG) * d->HS, QD = d->NH * d->HS;
    size_t N = (size_t)B * T;
    float *datty = scratch;         /* (N, QD_tp) */
    float *dqkv = datty + N * s.QD; /* (N, QKV_tp) */
    float *qkn = dqkv + N * s.QKV;  /* (2 N QD_tp) with qk_norm */
    float *lin = qkn + (d->qk_norm ? 2 * N * s.QD : 0);
    nn_dropout_spec dl;
    /* comm: row-parallel backward (SP: all-gather T) */
    tp_ctx t8;
    MTC_CHECK(tp_row_linear_backward(tp_fp8_ctx(&t8, tp, d->fp8, TP_FP8_PROJ), datty, dprojw,
                                     dprojb, dout, acts->atty, projw, lin, 1, B, T, QD, d->C));
    nn_attention_shape g = att_geometry(&s, B, T);
    const float *qkv = acts->qkv;
    if (d->cp && d->cp->cp > 1) /* comm: the CP attention's, with dK, dV travelling back */
        MTC_CHECK(cp_attention_backward(d->cp, tp->pool, dqkv, dqkv + s.QD, dqkv + s.QD + s.KD,
                                        datty, qkv, qkv + s.QD, qkv + s.QD + s.KD, acts->atty,
                                        acts->lse, &g, local_heads(&dl, drop, d->NH, r, s.NH),
                                        lin));
    else
        nn_attention_backward(tp->pool, dqkv, dqkv + s.QD, dqkv + s.QD + s.KD, datty, qkv,
                              qkv + s.QD, qkv + s.QD + s.KD, acts->atty, acts->lse, &g,
                              local_heads(&dl, drop, d->NH, r, s.NH));
    if (d->rope) {
        nn_rope_backward(tp->pool, dqkv, dqkv, d->rope, d->pos, d->t0, B, T, s.NH, s.HS, s.QKV);
        nn_rope_backward(tp->pool, dqkv + s.QD, dqkv + s.QD, d->rope, d->pos, d->t0, B, T, s.NG,
                         s.HS, s.QKV);
    }
    if (d->qk_norm) qkn_backward(tp, dqkv, qkn, &s, N, d->qk_norm);
    /* comm: column-parallel backward (all-reduce; SP: reduce-scatter T) */
    return tp_column_linear_backward(tp_fp8_ctx(&t8, tp, d->fp8, TP_FP8_QKV), din, dqkvw, dqkvb,
                                     dqkv, acts->in_total, acts->in_total_saved, in, qkvw, lin, 0,
                                     B, T, d->C, QKV);
}

/* ---- MLP --------------------------------------------------------------------------------- */

static mtc_result_t mlp_check(const tp_ctx *tp, const model_block_dims *d) {
    int p = tp_size(tp->comm);
    if (d->F < 1 || d->F % p)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "ffn-hidden-size=%d is not divisible by tensor-model-parallel-size=%d",
                         d->F, p);
    return MTC_OK;
}

static int fc1_rows(const model_block_dims *d) { return d->swiglu ? 2 * d->F : d->F; }

size_t model_mlp_scratch_floats(const tp_ctx *tp, int B, int T, const model_block_dims *d) {
    int p = tp_size(tp->comm);
    size_t N = (size_t)B * T, F_tp = (size_t)(d->F / p), F1_tp = (size_t)(fc1_rows(d) / p);
    size_t lin = max_sz(tp_column_linear_scratch_floats(tp, 0, B, T, d->C, fc1_rows(d)),
                        tp_row_linear_scratch_floats(tp, 1, B, T, d->F, d->C));
    /* forward: [act output | linear scratch]; backward: [the recomputed act
     * output, overwritten by its own gradient (fc2's weight gradient is taken
     * first) and, GELU, by dfch in place | SwiGLU: dfch (N, 2F) | linear
     * scratch] */
    return N * (d->swiglu ? F_tp + F1_tp : F_tp) + lin;
}

static void mlp_act(const tp_ctx *tp, float *act, const float *fch, size_t N, int F_tp,
                    const model_block_dims *d) {
    if (d->swiglu)
        nn_swiglu_forward(tp->pool, act, fch, (int)N, F_tp);
    else
        nn_gelu_forward(tp->pool, act, fch, N * (size_t)F_tp);
}

mtc_result_t model_mlp_forward(const tp_ctx *tp, float *out, model_mlp_acts *acts, const float *in,
                               const float *fc1w, const float *fc1b, const float *fc2w,
                               const float *fc2b, float *scratch, int B, int T,
                               const model_block_dims *d) {
    MTC_CHECK(mlp_check(tp, d));
    int F_tp = d->F / tp_size(tp->comm);
    size_t N = (size_t)B * T;
    float *act = scratch, *lin = scratch + N * (size_t)F_tp;
    /* comm: column-parallel (SP: all-gather T) */
    tp_ctx t8;
    MTC_CHECK(tp_column_linear_forward(tp_fp8_ctx(&t8, tp, d->fp8, TP_FP8_FC1), acts->fch,
                                       acts->in_total, in, fc1w, fc1b, scratch, 0, B, T, d->C,
                                       fc1_rows(d)));
    mlp_act(tp, act, acts->fch, N, F_tp, d);
    /* comm: row-parallel (all-reduce; SP: reduce-scatter T) */
    return tp_row_linear_forward(tp_fp8_ctx(&t8, tp, d->fp8, TP_FP8_FC2), out, act, fc2w, fc2b, lin,
                                 1, B, T, d->F, d->C);
}

mtc_result_t model_mlp_backward(const tp_ctx *tp, float *din, float *dfc1w, float *dfc1b,
                                float *dfc2w, float *dfc2b, const float *dout,
                                const model_mlp_acts *acts, const float *in, const float *fc1w,
                                const float *fc2w, float *scratch, int B, int T,
                                const model_block_dims *d) {
    MTC_CHECK(mlp_check(tp, d));
    int p = tp_size(tp->comm), F_tp = d->F / p;
    size_t N = (size_t)B * T, n = N * (size_t)F_tp;
    /* one (N, F_tp) buffer: fc2's input again (bit for bit), then its
     * gradient over it, then (GELU) fc1's output gradient in place */
    float *dfchg = scratch, *dfch = d->swiglu ? scratch + n : scratch;
    float *lin = dfch + N * (size_t)(fc1_rows(d) / p);
    mlp_act(tp, dfchg, acts->fch, N, F_tp, d);
    /* comm: row-parallel backward (SP: all-gather T) */
    tp_ctx t8;
    MTC_CHECK(tp_row_linear_backward(tp_fp8_ctx(&t8, tp, d->fp8, TP_FP8_FC2), dfchg, dfc2w, dfc2b,
                                     dout, dfchg, fc2w, lin, 1, B, T, d->F, d->C));
    if (d->swiglu)
        nn_swiglu_backward(tp->pool, dfch, dfchg, acts->fch, (int)N, F_tp);
    else
        nn_gelu_backward(tp->pool, dfch, acts->fch, dfchg, n);
    /* comm: column-parallel backward (all-reduce; SP: reduce-scatter T) */
    return tp_column_linear_backward(tp_fp8_ctx(&t8, tp, d->fp8, TP_FP8_FC1), din, dfc1w, dfc1b,
                                     dfch, acts->in_total, acts->in_total_saved, in, fc1w, lin, 0,
                                     B, T, d->C, fc1_rows(d));
}
