/* tp/blocks.c - the transformer's two TP blocks, Megatron style: attention
 * split by heads (fused c_attn column-parallel, local heads, c_proj
 * row-parallel) and the MLP (c_fc column-parallel, GELU, c_proj
 * row-parallel); plus the fused-QKV shard index mapping. See layers.h.
 *
 *   attention:  in ─col(c_attn)─> qkv_r ─attention(NH_tp heads)─> atty_r ─row(c_proj)─> out
 *   MLP:        in ─col(c_fc)──> fch_r ─gelu─> fchg_r ─row(c_proj)─> out
 * Between the two linears everything is local to the rank's heads / MLP
 * columns: one collective pair per block each way (two under SP:
 * all-gather + reduce-scatter), none inside.
 * Backward scratch layout: [block temporaries | linear scratch].
 * Relies on tp/linear.c and nn/ (attention, GELU). Does not do the layer
 * norms, residual adds or hidden dropout around the blocks. */
#include <string.h>

#include "tp/layers.h"
#include "tp/mappings.h"

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

void tp_qkv_shard(float *dst, const float *src, int C, int cols, int tp, int r) {
    int rows = 3 * (C / tp);
    for (int i = 0; i < rows; i++)
        memcpy(dst + (size_t)i * cols, src + (size_t)tp_qkv_row(i, C, tp, r) * cols,
               (size_t)cols * sizeof(float));
}

void tp_qkv_unshard(float *dst, const float *src, int C, int cols, int tp, int r) {
    int rows = 3 * (C / tp);
    for (int i = 0; i < rows; i++)
        memcpy(dst + (size_t)tp_qkv_row(i, C, tp, r) * cols, src + (size_t)i * cols,
               (size_t)cols * sizeof(float));
}

/* ---- attention ------------------------------------------------------------------------ */

static mtc_result_t attn_check(int p, int C, int NH) {
    if (NH < 1 || C % NH)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "hidden-size=%d is not divisible by num-attention-heads=%d", C, NH);
    if (NH % p)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "num-attention-heads=%d is not divisible by tensor-model-parallel-size=%d",
                         NH, p);
    return MTC_OK;
}

/* The caller's attention-dropout spec seen from this rank's heads. */
static const nn_dropout_spec *local_heads(nn_dropout_spec *d, const nn_dropout_spec *drop, int NH,
                                          int r, int NH_tp) {
    if (!drop) return NULL;
    *d = *drop;
    d->NHg = drop->NHg ? drop->NHg : NH;
    d->h0 = drop->h0 + r * NH_tp;
    return d;
}

size_t tp_attention_scratch_floats(const tp_ctx *tp, int B, int T, int C, int NH) {
    int p = tp_size(tp->comm);
    size_t N = (size_t)B * T, C_tp = (size_t)(C / p);
    size_t lin = max_sz(tp_column_linear_scratch_floats(tp, 0, B, T, C, 3 * C),
                        tp_row_linear_scratch_floats(tp, 1, B, T, C, C));
    /* backward: [datty (N, C_tp) | dqkv (N, 3C_tp) | linear scratch]; the tiled
     * attention needs no scratch of its own */
    return 4 * N * C_tp + lin;
}

mtc_result_t tp_attention_forward(const tp_ctx *tp, float *out, tp_attention_acts *acts,
                                  const float *in, const float *qkvw, const float *qkvb,
                                  const float *projw, const float *projb,
                                  const nn_dropout_spec *drop, float *scratch, int B, int T, int C,
                                  int NH) {
    int p = tp_size(tp->comm), r = tp_rank(tp->comm);
    MTC_CHECK(attn_check(p, C, NH));
    int NH_tp = NH / p, HS = C / NH, C_tp = C / p;
    nn_dropout_spec d;
    /* comm: column-parallel (SP: all-gather T) */
    MTC_CHECK(tp_column_linear_forward(tp, acts->qkv, acts->in_total, in, qkvw, qkvb, scratch, 0, B,
                                       T, C, 3 * C));
    nn_attention_shape as = nn_attention_shape_qkv(B, T, NH_tp, HS);
    const float *qkv = acts->qkv;
    nn_attention_forward(tp->pool, acts->atty, acts->lse, qkv, qkv + C_tp, qkv + 2 * C_tp, &as,
                         local_heads(&d, drop, NH, r, NH_tp));
    /* comm: row-parallel (all-reduce; SP: reduce-scatter T) */
    return tp_row_linear_forward(tp, out, acts->atty, projw, projb, scratch, 1, B, T, C, C);
}

mtc_result_t tp_attention_backward(const tp_ctx *tp, float *din, float *dqkvw, float *dqkvb,
                                   float *dprojw, float *dprojb, const float *dout,
                                   const tp_attention_acts *acts, const float *in,
                                   const float *qkvw, const float *projw,
                                   const nn_dropout_spec *drop, float *scratch, int B, int T, int C,
                                   int NH) {
    int p = tp_size(tp->comm), r = tp_rank(tp->comm);
    MTC_CHECK(attn_check(p, C, NH));
    int NH_tp = NH / p, HS = C / NH, C_tp = C / p;
    size_t N = (size_t)B * T;
    float *datty = scratch;         /* (B, T, C_tp) */
    float *dqkv = datty + N * C_tp; /* (B, T, 3*C_tp) */
    float *s = dqkv + 3 * N * C_tp; /* linear scratch */
    nn_dropout_spec d;
    /* comm: row-parallel backward (SP: all-gather T) */
    MTC_CHECK(tp_row_linear_backward(tp, datty, dprojw, dprojb, dout, acts->atty, projw, s, 1, B, T,
                                     C, C));
    nn_attention_shape as = nn_attention_shape_qkv(B, T, NH_tp, HS);
    const float *qkv = acts->qkv;
    nn_attention_backward(tp->pool, dqkv, dqkv + C_tp, dqkv + 2 * C_tp, datty, qkv, qkv + C_tp,
                          qkv + 2 * C_tp, acts->atty, acts->lse, &as,
                          local_heads(&d, drop, NH, r, NH_tp));
    /* comm: column-parallel backward (all-reduce; SP: reduce-scatter T) */
    return tp_column_linear_backward(tp, din, dqkvw, dqkvb, dqkv, acts->in_total,
                                     acts->in_total_saved, in, qkvw, s, 0, B, T, C, 3 * C);
}

/* ---- MLP --------------------------------------------------------------------------------- */

size_t tp_mlp_scratch_floats(const tp_ctx *tp, int B, int T, int C, int F) {
    int p = tp_size(tp->comm);
    size_t N = (size_t)B * T, F_tp = (size_t)(F / p);
    size_t lin = max_sz(tp_column_linear_scratch_floats(tp, 0, B, T, C, F),
                        tp_row_linear_scratch_floats(tp, 1, B, T, F, C));
    return 2 * N * F_tp + lin; /* backward: [dfchg | dfch | linear scratch] */
}

mtc_result_t tp_mlp_forward(const tp_ctx *tp, float *out, tp_mlp_acts *acts, const float *in,
                            const float *fcw, const float *fcb, const float *projw,
                            const float *projb, float *scratch, int B, int T, int C, int F) {
    int p = tp_size(tp->comm);
    if (F % p)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "ffn-hidden-size=%d is not divisible by tensor-model-parallel-size=%d", F,
                         p);
    /* comm: column-parallel (SP: all-gather T) */
    MTC_CHECK(tp_column_linear_forward(tp, acts->fch, acts->in_total, in, fcw, fcb, scratch, 0, B,
                                       T, C, F));
    nn_gelu_forward(tp->pool, acts->fchg, acts->fch, (size_t)B * T * (F / p));
    /* comm: row-parallel (all-reduce; SP: reduce-scatter T) */
    return tp_row_linear_forward(tp, out, acts->fchg, projw, projb, scratch, 1, B, T, F, C);
}

mtc_result_t tp_mlp_backward(const tp_ctx *tp, float *din, float *dfcw, float *dfcb, float *dprojw,
                             float *dprojb, const float *dout, const tp_mlp_acts *acts,
                             const float *in, const float *fcw, const float *projw, float *scratch,
                             int B, int T, int C, int F) {
    int p = tp_size(tp->comm);
    if (F % p)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "ffn-hidden-size=%d is not divisible by tensor-model-parallel-size=%d", F,
                         p);
    size_t n = (size_t)B * T * (F / p);
    float *dfchg = scratch, *dfch = scratch + n, *s = scratch + 2 * n;
    /* comm: row-parallel backward (SP: all-gather T) */
    MTC_CHECK(tp_row_linear_backward(tp, dfchg, dprojw, dprojb, dout, acts->fchg, projw, s, 1, B, T,
                                     F, C));
    nn_gelu_backward(tp->pool, dfch, acts->fch, dfchg, n);
    /* comm: column-parallel backward (all-reduce; SP: reduce-scatter T) */
    return tp_column_linear_backward(tp, din, dfcw, dfcb, dfch, acts->in_total,
                                     acts->in_total_saved, in, fcw, s, 0, B, T, C, F);
}
