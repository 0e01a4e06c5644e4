/* model/gpt_pass.c - the forward and backward pass of one microbatch on one
 * chunk, composed from tp/layers.h exactly as that header describes
 * (serial = tp 1: the TP layers are then the nn/ kernels, bit for bit).
 * Relies on nn/ (layer norms, residuals, dropout) and tp/ (everything with
 * a weight matrix, the embedding and the loss); see gpt.h. Allocates
 * nothing. Does not reduce parameter gradients over any group. */
#include <math.h>
#include <string.h>

#include "core/log.h"
#include "model/gpt_internal.h"

/* Dropout sites inside a layer; the embedding uses layer -1. */
enum { SITE_EMBED = 0, SITE_ATTN_PROBS = 1, SITE_ATTN_OUT = 2, SITE_MLP_OUT = 3 };

/* Masks keyed by the global sample (b0), global position (t0 = the rank's
 * first position under SP) and, for attention, global head (the TP block
 * adds its first head): every layout draws the serial masks. */
static nn_dropout_spec gpt_drop(const mtc_gpt *m, const mtc_gpt_pass *pass, int layer, int site,
                                float p, int T) {
    nn_dropout_spec s;
    memset(&s, 0, sizeof s);
    s.p = pass && pass->train ? p : 0.0f;
    if (s.p > 0) {
        s.seed = pass->seed;
        /* stream = (iteration, layer, site): fresh masks every step and site */
        s.stream = 0x6d74630000000000ull ^ (pass->iteration << 22) ^ ((uint64_t)(layer + 1) << 4) ^
                   (uint64_t)site;
        s.b0 = pass->b0;
    }
    s.Tg = T;
    s.Cg = m->cfg.hidden_size;
    s.NHg = m->cfg.num_heads;
    if (site != SITE_ATTN_PROBS && m->tp.sequence_parallel) s.t0 = m->tp_rank * (T / m->tp_size);
    return s;
}

#define GPT_TRY(m, call)                                                                           \
    do {                                                                                           \
        mtc_result_t rc_ = (call);                                                                 \
        if (rc_ != MTC_OK) {                                                                       \
            if ((m)->error == MTC_OK) (m)->error = rc_;                                            \
            return NAN;                                                                            \
        }                                                                                          \
    } while (0)

double mtc_gpt_forward(mtc_gpt *m, int slot, const int *tokens, const int *targets, int B, int T,
                       const mtc_gpt_pass *pass) {
    MTC_ASSERT(slot >= 0 && slot < m->nslots && B <= m->B && T <= m->T && B >= 1 && T >= 1);
    MTC_ASSERT(!m->tp.sequence_parallel || T == m->T);
    const mtc_gpt_config *c = &m->cfg;
    const tp_ctx *tp = &m->tp;
    int C = c->hidden_size, NH = c->num_heads, F = c->ffn_hidden_size, Vp = c->padded_vocab_size;
    int p = m->tp_size, Tl = m->tp.sequence_parallel ? T / p : T;
    int N = B * T, Nl = B * Tl;
    /* per-layer strides use the largest shape */
    size_t sNl = (size_t)m->B * m->T_loc, sN = (size_t)m->B * m->T;
    mtc_gpt_slot *a = &m->slots[slot];
    nn_pool *pool = m->pool;

#define GPT_NEED(first, last)                                                                      \
    do {                                                                                           \
        if (pass && pass->params_needed)                                                           \
            GPT_TRY(m, pass->params_needed(pass->params_needed_ctx, (first), (last)));             \
    } while (0)
    if (m->has_embedding) {
        GPT_NEED(m->pidx_wte, m->pidx_wpe + 1);
        /* comm: all-reduce(tp) */
        GPT_TRY(m, tp_vocab_embedding_forward(tp, a->encoded, tokens, m->wte, m->wpe, NULL,
                                              m->scratch, B, T, C, Vp));
        nn_dropout_spec d = gpt_drop(m, pass, -1, SITE_EMBED, c->hidden_dropout, T);
        if (d.p > 0) nn_dropout_forward(a->encoded, a->encoded, B, Tl, C, &d);
    }
    const float *x = a->encoded;
    for (int l = m->first_layer; l < m->last_layer; l++) {
        size_t k = (size_t)(l - m->first_layer);
        const mtc_gpt_layer *w = &m->layers[l];
        float *ln1 = a->ln1 + k * sNl * C, *ln1m = a->ln1_mean + k * sNl,
              *ln1r = a->ln1_rstd + k * sNl;
        float *res2 = a->res2 + k * sNl * C, *res3 = a->res3 + k * sNl * C;
        float *ln2 = a->ln2 + k * sNl * C, *ln2m = a->ln2_mean + k * sNl,
              *ln2r = a->ln2_rstd + k * sNl;
        tp_attention_acts aa = {m->in_total, 0, a->qkv + k * sN * 3 * (C / p),
                                a->lse + k * (size_t)m->B * (NH / p) * m->T,
                                a->atty + k * sN * (C / p)};
        tp_mlp_acts ma = {m->in_total, 0, a->fch + k * sN * (F / p), a->fchg + k * sN * (F / p)};

        GPT_NEED(m->pidx_layer0 + 12 * (int)k, m->pidx_layer0 + 12 * (int)k + 12);
        nn_layernorm_forward(pool, ln1, ln1m, ln1r, x, w->ln1w, w->ln1b, Nl, C);
        nn_dropout_spec da = gpt_drop(m, pass, l, SITE_ATTN_PROBS, c->attention_dropout, T);
        /* comm: column- then row-parallel (SP: all-gather, reduce-scatter) */
        GPT_TRY(m,
                tp_attention_forward(tp, m->fwd_tmp, &aa, ln1, w->qkvw, w->qkvb, w->attprojw,
                                     w->attprojb, da.p > 0 ? &da : NULL, m->scratch, B, T, C, NH));
        nn_dropout_spec dh = gpt_drop(m, pass, l, SITE_ATTN_OUT, c->hidden_dropout, T);
        if (dh.p > 0) nn_dropout_forward(m->fwd_tmp, m->fwd_tmp, B, Tl, C, &dh);
        nn_residual_forward(res2, x, m->fwd_tmp, (size_t)Nl * C);
        nn_layernorm_forward(pool, ln2, ln2m, ln2r, res2, w->ln2w, w->ln2b, Nl, C);
        GPT_TRY(m, tp_mlp_forward(tp, m->fwd_tmp, &ma, ln2, w->fcw, w->fcb, w->fcprojw, w->fcprojb,
                                  m->scratch, B, T, C, F));
        nn_dropout_spec dm = gpt_drop(m, pass, l, SITE_MLP_OUT, c->hidden_dropout, T);
        if (dm.p > 0) nn_dropout_forward(m->fwd_tmp, m->fwd_tmp, B, Tl, C, &dm);
        nn_residual_forward(res3, res2, m->fwd_tmp, (size_t)Nl * C);
        x = res3;
    }
    if (!m->has_head) return 0.0;
    GPT_NEED(m->pidx_lnf, m->pidx_lnf + 2);
    GPT_NEED(m->pidx_wte, m->pidx_wte + 1);
#undef GPT_NEED
    nn_layernorm_forward(pool, a->lnf, a->lnf_mean, a->lnf_rstd, x, m->lnfw, m->lnfb, Nl, C);
    /* LM head on the rank's wte shard: logits (B, T, Vp/tp). comm: SP all-gather */
    GPT_TRY(m, tp_column_linear_forward(tp, m->logits, m->in_total, a->lnf, m->wte, NULL,
                                        m->scratch, 0, B, T, C, Vp));
    m->dlogits_ready = 0;
    if (!targets) return 0.0;
    /* The softmax covers the whole padded vocabulary, as Megatron's
     * vocab_parallel_cross_entropy over the output layer's padded logits
     * (targets are < vocab_size: the data readers check).
     * comm: all-reduce(tp) MAX and SUM */
    if (pass && pass->loss_scale > 0) {
        GPT_TRY(m, tp_vocab_xent_forward_backward(tp, a->losses, m->logits, targets,
                                                  pass->loss_scale, NULL, m->scratch, N, Vp, Vp));
        m->dlogits_ready = 1;
    } else {
        GPT_TRY(m, tp_vocab_xent_forward(tp, a->losses, m->logits, targets, m->scratch, N, Vp, Vp));
    }
    double sum = 0;
    for (int i = 0; i < N; i++)
        sum += a->losses[i];
    return sum;
}

static mtc_result_t gpt_ready(const mtc_gpt_pass *pass, int first, int last) {
    return pass && pass->grads_ready ? pass->grads_ready(pass->grads_ready_ctx, first, last)
                                     : MTC_OK;
}

mtc_result_t mtc_gpt_backward(mtc_gpt *m, int slot, const int *tokens, const int *targets, int B,
                              int T, float loss_scale, const mtc_gpt_pass *pass) {
    MTC_ASSERT(slot >= 0 && slot < m->nslots && B <= m->B && T <= m->T);
    const mtc_gpt_config *c = &m->cfg;
    const tp_ctx *tp = &m->tp;
    int C = c->hidden_size, NH = c->num_heads, F = c->ffn_hidden_size, Vp = c->padded_vocab_size;
    int p = m->tp_size, Tl = m->tp.sequence_parallel ? T / p : T;
    int N = B * T, Nl = B * Tl;
    size_t sNl = (size_t)m->B * m->T_loc, sN = (size_t)m->B * m->T, nC = (size_t)Nl * C;
    mtc_gpt_slot *a = &m->slots[slot];
    nn_pool *pool = m->pool;
    /* every backward kernel accumulates: the step's first microbatch starts
     * from zero (adding to +0 is exact, so this equals overwriting) */
    if (pass && pass->first_microbatch) mtc_gpt_zero_grad(m);

    /* dres = d(loss)/d(chunk output) */
    if (m->has_head) {
        MTC_ASSERT(targets);
        const float *xlast = m->last_layer > m->first_layer
                                 ? a->res3 + (size_t)(m->last_layer - m->first_layer - 1) * sNl * C
                                 : a->encoded;
        if (!m->dlogits_ready)
            MTC_CHECK(tp_vocab_xent_backward(tp, m->logits, targets, loss_scale, NULL, N, Vp, Vp));
        m->dlogits_ready = 0;
        /* comm: all-reduce(tp) of d(ln_f out); SP: all-gather + reduce-scatter */
        MTC_CHECK(tp_column_linear_backward(tp, m->dtmp, m->dwte, NULL, m->logits, m->in_total, 0,
                                            a->lnf, m->wte, m->scratch, 0, B, T, C, Vp));
        nn_layernorm_backward(pool, m->dres, m->dlnfw, m->dlnfb, m->dtmp, xlast, m->lnfw,
                              a->lnf_mean, a->lnf_rstd, Nl, C);
        MTC_CHECK(gpt_ready(pass, m->pidx_lnf, m->pidx_lnf + 2));
        /* a head without the embedding (last pipeline stage): its wte copy is final */
        if (!m->has_embedding) MTC_CHECK(gpt_ready(pass, m->pidx_wte, m->pidx_wte + 1));
    }
    for (int l = m->last_layer - 1; l >= m->first_layer; l--) {
        size_t k = (size_t)(l - m->first_layer);
        const mtc_gpt_layer *w = &m->layers[l];
        const mtc_gpt_layer *g = &m->dlayers[l];
        const float *x = k ? a->res3 + (k - 1) * sNl * C : a->encoded;
        float *ln1 = a->ln1 + k * sNl * C, *ln1m = a->ln1_mean + k * sNl,
              *ln1r = a->ln1_rstd + k * sNl;
        float *res2 = a->res2 + k * sNl * C;
        float *ln2 = a->ln2 + k * sNl * C, *ln2m = a->ln2_mean + k * sNl,
              *ln2r = a->ln2_rstd + k * sNl;
        tp_attention_acts aa = {m->in_total, 0, a->qkv + k * sN * 3 * (C / p),
                                a->lse + k * (size_t)m->B * (NH / p) * m->T,
                                a->atty + k * sN * (C / p)};
        tp_mlp_acts ma = {m->in_total, 0, a->fch + k * sN * (F / p), a->fchg + k * sN * (F / p)};

        /* MLP branch: dres holds d(res3) */
        const float *dy = m->dres;
        nn_dropout_spec dm = gpt_drop(m, pass, l, SITE_MLP_OUT, c->hidden_dropout, T);
        if (dm.p > 0) nn_dropout_backward(m->dtmp, m->dres, B, Tl, C, &dm), dy = m->dtmp;
        MTC_CHECK(tp_mlp_backward(tp, m->dtmp2, g->fcw, g->fcb, g->fcprojw, g->fcprojb, dy, &ma,
                                  ln2, w->fcw, w->fcprojw, m->scratch, B, T, C, F));
        nn_layernorm_backward(pool, m->dtmp, g->ln2w, g->ln2b, m->dtmp2, res2, w->ln2w, ln2m, ln2r,
                              Nl, C);
        nn_residual_forward(m->dres, m->dres, m->dtmp, nC); /* now d(res2) */

        /* attention branch */
        dy = m->dres;
        nn_dropout_spec dh = gpt_drop(m, pass, l, SITE_ATTN_OUT, c->hidden_dropout, T);
        if (dh.p > 0) nn_dropout_backward(m->dtmp, m->dres, B, Tl, C, &dh), dy = m->dtmp;
        nn_dropout_spec da = gpt_drop(m, pass, l, SITE_ATTN_PROBS, c->attention_dropout, T);
        MTC_CHECK(tp_attention_backward(tp, m->dtmp2, g->qkvw, g->qkvb, g->attprojw, g->attprojb,
                                        dy, &aa, ln1, w->qkvw, w->attprojw, da.p > 0 ? &da : NULL,
                                        m->scratch, B, T, C, NH));
        nn_layernorm_backward(pool, m->dtmp, g->ln1w, g->ln1b, m->dtmp2, x, w->ln1w, ln1m, ln1r, Nl,
                              C);
        nn_residual_forward(m->dres, m->dres, m->dtmp, nC); /* now d(layer input) */
        int p0 = m->pidx_layer0 + 12 * (int)k;
        MTC_CHECK(gpt_ready(pass, p0, p0 + 12));
    }
    if (m->has_embedding) {
        const float *dy = m->dres;
        nn_dropout_spec d = gpt_drop(m, pass, -1, SITE_EMBED, c->hidden_dropout, T);
        if (d.p > 0) nn_dropout_backward(m->dtmp, m->dres, B, Tl, C, &d), dy = m->dtmp;
        /* comm: SP all-gather(tp) of dy */
        MTC_CHECK(tp_vocab_embedding_backward(tp, m->dwte, m->dwpe, dy, tokens, NULL, m->scratch, B,
                                              T, C, Vp));
        MTC_CHECK(gpt_ready(pass, m->pidx_wte, m->pidx_wpe + 1)); /* wte, wpe */
    }
    return MTC_OK;
}
