/* model/model_pass.c - the forward and backward pass of one microbatch on one
 * chunk, composed from tp/layers.h exactly as that header describes
 * (serial = tp 1: the TP layers are then the nn/ kernels, bit for bit).
 * Relies on nn/ (layer norms, residuals, dropout) and tp/ (everything with
 * a weight matrix, the embedding and the loss); see model.h. Allocates
 * nothing. Does not reduce parameter gradients over any group. */
#include <math.h>
#include <string.h>

#include "core/log.h"
#include "core/rng.h"
#include "model/model_internal.h"
#include "tp/fp8_linear.h"
#include "model/mtp.h"

/* Dropout sites inside a layer; the embedding uses layer -1. */
enum { SITE_EMBED = 0, SITE_ATTN_PROBS = 1, SITE_ATTN_OUT = 2, SITE_MLP_OUT = 3 };

/* Masks keyed by the global sample (b0), global position (t0 = the rank's
 * first position under SP) and, for attention, global head (the TP block
 * adds its first head): every layout draws the serial masks. */
static nn_dropout_spec gpt_drop(const mtc_model *m, const mtc_model_pass *pass, int layer, int site,
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
    s.Tg = m->cp.cp > 1 ? m->cp.Tg : T;
    s.Cg = m->cfg.hidden_size;
    s.NHg = m->cfg.num_heads;
    int sp_off =
        site != SITE_ATTN_PROBS && m->tp.sequence_parallel ? m->tp_rank * (T / m->tp_size) : 0;
    if (m->cp.cp > 1) /* rows are this CP rank's two chunks: their global positions */
        s.tpos = m->cp.pos + sp_off;
    else
        s.t0 = sp_off;
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

/* The configured normalisation: LayerNorm (mean, rstd saved) or RMSNorm
 * (rstd saved; b and mean unused). */
static void gpt_norm_forward(const mtc_model *m, float *out, float *mean, float *rstd,
                             const float *in, const float *w, const float *b, int N) {
    const mtc_model_config *c = &m->cfg;
    if (c->normalization == MTC_NORM_RMSNORM)
        nn_rmsnorm_forward(m->pool, out, rstd, in, w, mtc_model_norm_eps(c), N, c->hidden_size);
    else
        nn_layernorm_forward_eps(m->pool, out, mean, rstd, in, w, b, mtc_model_norm_eps(c), N,
                                 c->hidden_size);
    /* --bf16 / --fp16: computed in fp32, stored as the low-precision tensor */
    model_lowp_round(m, out, (size_t)N * c->hidden_size);
}

static void gpt_norm_backward(const mtc_model *m, float *din, float *dw, float *db,
                              const float *dout, const float *in, const float *w, const float *mean,
                              const float *rstd, int N) {
    const mtc_model_config *c = &m->cfg;
    if (c->normalization == MTC_NORM_RMSNORM)
        nn_rmsnorm_backward(m->pool, din, dw, dout, in, w, rstd, N, c->hidden_size);
    else
        nn_layernorm_backward(m->pool, din, dw, db, dout, in, w, mean, rstd, N, c->hidden_size);
}

/* Registry index range [first, last) of a global role (empty when absent). */
static void gpt_role_range(const mtc_model *m, int role, int *first, int *last) {
    *first = m->pidx[role], *last = m->pidx[role] + 1;
    if (*first < 0) *first = *last = 0;
}

/* Where layer k (chunk-relative) of slot a keeps its activations: its own
 * arrays in the slot, or, for a recomputed layer (k < m->nrec), the one
 * set the model shares for recomputation (only the layer output res3 stays
 * in the slot: it is the next layer's input, from which backward rebuilds
 * the rest). */
typedef struct {
    float *ln1, *ln1m, *ln1r, *res2, *ln2, *ln2m, *ln2r, *res3;
    model_attention_acts aa;
    model_mlp_acts ma;
    moe_acts moe;           /* an MoE layer's (unbound for a dense one) */
    model_mlp_acts sa;      /* its shared expert's */
    float *qk_in, *qk_stat; /* --qk-layernorm's (model_qk_norm.in, .stat) */
    model_mla_acts mla;     /* --multi-latent-attention's */
} layer_view;

/* --qk-layernorm: layer l's q/k norms for the block (bd->qk_norm = q). */
static void gpt_qk_norm(const mtc_model *m, int l, const layer_view *v, model_qk_norm *q,
                        model_block_dims *bd) {
    const mtc_model_config *c = &m->cfg;
    if (!c->qk_layernorm) return;
    float *const *w = m->layers[l].w, *const *g = m->dlayers[l].w;
    *q = (model_qk_norm){.rms = c->normalization == MTC_NORM_RMSNORM,
                         .eps = mtc_model_norm_eps(c),
                         .qw = w[MTC_ROLE_QNORM_W],
                         .qb = w[MTC_ROLE_QNORM_B],
                         .kw = w[MTC_ROLE_KNORM_W],
                         .kb = w[MTC_ROLE_KNORM_B],
                         .dqw = g[MTC_ROLE_QNORM_W],
                         .dqb = g[MTC_ROLE_QNORM_B],
                         .dkw = g[MTC_ROLE_KNORM_W],
                         .dkb = g[MTC_ROLE_KNORM_B],
                         .in = v->qk_in,
                         .stat = v->qk_stat};
    bd->qk_norm = q;
}

static layer_view gpt_layer_view(const mtc_model *m, mtc_model_slot *a, size_t k) {
    const mtc_model_config *c = &m->cfg;
    size_t p = (size_t)m->tp_size, sN = (size_t)m->B * m->T, HS = (size_t)mtc_model_head_size(c);
    size_t sNl = (size_t)m->B * m->T_loc, C = (size_t)c->hidden_size;
    size_t QD = (size_t)c->num_heads / p * HS, KD = (size_t)mtc_model_groups(c) / p * HS;
    size_t F = (size_t)c->ffn_hidden_size / p, F1 = (c->swiglu ? 2 : 1) * F;
    const mtc_model_slot *s = (int)k < m->nrec ? m->rc : a;
    size_t j = (int)k < m->nrec ? 0 : k - (size_t)m->nrec;
    layer_view v;
    /* the norms' outputs share one buffer: backward rebuilds each from the
     * layer input / res2 just before its use (gpt_norm_forward is
     * deterministic, so the rebuilt rows are the forward's bits) */
    v.ln1 = m->ln_tmp, v.ln1m = s->ln1_mean + j * sNl, v.ln1r = s->ln1_rstd + j * sNl;
    v.res2 = s->res2 + j * sNl * C, v.ln2 = m->ln_tmp;
    v.ln2m = s->ln2_mean + j * sNl, v.ln2r = s->ln2_rstd + j * sNl;
    v.res3 = a->res3 + k * sNl * C;
    v.aa = (model_attention_acts){m->in_total, 0, s->qkv + j * sN * (QD + 2 * KD),
                                  s->lse + j * (size_t)m->B * (c->num_heads / p) * m->T,
                                  s->atty + j * sN * QD};
    v.qk_in = v.qk_stat = NULL;
    if (c->qk_layernorm) {
        size_t NHG = (size_t)(c->num_heads + mtc_model_groups(c)) / p;
        v.qk_in = s->qk_in + j * sN * (QD + KD);
        v.qk_stat = s->qk_stat + j * 2 * sN * NHG;
    }
    if (c->mla.enabled) { /* mla_up_proj: q, k, v in the one shared buffer */
        model_mla_opts mo = mtc_model_mla_opts(m);
        model_mla_acts_bind(&v.mla, s->mla + j * mtc_model_mla_floats(m), &mo, (int)p, m->B, m->T,
                            m->T_loc, c->num_heads);
        if (m->rec_up) v.mla.qkv = m->mla_qkv;
    }
    v.ma = (model_mlp_acts){m->in_total, 0, s->fch + j * sN * F1};
    if (m->rec_mlp) /* --recompute-modules mlp: one set, refilled in backward */
        v.ma.fch = m->mlp_fch;
    if (c->moe.num_experts > 0) {
        moe_dims md = mtc_model_moe_dims(m);
        /* --recompute-modules moe: one set, refilled in backward */
        float *mb = m->rec_moe ? m->moe_rc : s->moe + j * mtc_model_moe_floats(m);
        moe_acts_bind(&v.moe, mb, &c->moe, &md, (int)sNl);
        if (c->moe.recompute_act) v.moe.fchg = m->moe_fchg; /* moe_act: one set for all */
        size_t SF = (size_t)c->moe.shared_ffn / p, SF1 = (c->swiglu ? 2 : 1) * SF;
        v.sa = (model_mlp_acts){m->in_total, 0, s->sfch + j * sN * SF1};
        /* --recompute-modules shared_experts (or moe): one set, refilled in backward */
        if (m->rec_shared || m->rec_moe) v.sa.fch = m->shared_fch;
    }
    return v;
}

/* One microbatch's share of the objective's MoE losses: loss_scale is
 * 1 / (global batch x seq-length) per token, so B x seq-length of it is
 * this microbatch's 1 / (microbatches in the global batch). */
static moe_pass gpt_moe_pass(const mtc_model *m, const mtc_model_pass *pass, int record, int B,
                             float loss_scale) {
    moe_pass mp = {.train = pass && pass->train,
                   .record = record,
                   .aux_scale = loss_scale * (float)B * (float)m->cfg.seq_length,
                   .seq_B = B,
                   .tpcp = m->moe.tpcp,
                   .tpdpcp = m->moe.tpdpcp,
                   .ep = m->moe.ep,
                   .etp = m->moe.etp,
                   .tpep = m->moe.tpep,
                   .pool = m->pool};
    /* global_aux_loss is over the whole data-parallel batch already: its
     * gradient is not averaged over DP again (Megatron's is, #3672) */
    if (m->cfg.moe.lb == MOE_LB_GLOBAL_AUX && m->moe.tpdpcp)
        mp.aux_scale *= (float)mtc_comm_size(m->moe.tpdpcp) /
                        (float)(m->moe.tpcp ? mtc_comm_size(m->moe.tpcp) : 1);
    return mp;
}

static moe_weights gpt_moe_weights(const mtc_model *m, const mtc_model_layer *y) {
    int E = m->cfg.moe.num_experts;
    moe_weights w = {y->w[MTC_ROLE_ROUTER_W],
                     y->w[MTC_ROLE_EXPERT_BIAS],
                     y->xw,
                     y->xw + E,
                     y->xw + 2 * E,
                     y->xw + 3 * E};
    return w;
}

/* --moe-router-force-load-balancing: Megatron's RandomSTE draws normal
 * logits on the expert-parallel RNG of each rank; here logit (token, e) is
 * normal(seed, stream (iteration, layer), global token x E + e), so every
 * layout routes as the serial run. Rows are (B, T_loc) of the rank's
 * positions (SP shard, CP chunks). */
typedef struct {
    const mtc_model *m;
    const mtc_model_pass *pass;
    int l, B, T;
} gpt_random_ctx;

static void gpt_random_logits(void *ctx, float *logits, int N, int E) {
    const gpt_random_ctx *r = ctx;
    const mtc_model *m = r->m;
    int Tl = N / r->B, Tg = m->cp.cp > 1 ? m->cp.Tg : r->T;
    int sp_off = m->tp.sequence_parallel ? m->tp_rank * Tl : 0;
    uint64_t seed = r->pass ? r->pass->seed : 0, it = r->pass ? r->pass->iteration : 0;
    uint64_t stream = 0x726f757465720000ull ^ (it << 22) ^ ((uint64_t)(r->l + 1) << 4);
    for (int b = 0; b < r->B; b++)
        for (int t = 0; t < Tl; t++) {
            int pos = m->cp.cp > 1 ? m->cp.pos[sp_off + t] : sp_off + t;
            uint64_t tok =
                (uint64_t)((r->pass ? r->pass->b0 : 0) + b) * (uint64_t)Tg + (uint64_t)pos;
            mtc_rng_fill_normal(logits + ((size_t)b * Tl + t) * E, (size_t)E, seed, stream,
                                tok * (uint64_t)E, 0.0f, 1.0f);
        }
}

/* An MoE layer's MLP: out (B, T_loc, C) = routed experts + shared expert,
 * from in = the second norm's output. out must not be m->scratch. */
static mtc_result_t gpt_moe_forward(mtc_model *m, const mtc_model_pass *pass, layer_view *v,
                                    float *out, const float *in, int l, int B, int T, int record) {
    const mtc_model_config *c = &m->cfg;
    float *const *w = m->layers[l].w;
    int Tl = m->tp.sequence_parallel ? T / m->tp_size : T, N = B * Tl;
    moe_dims md = mtc_model_moe_dims(m);
    moe_weights mw = gpt_moe_weights(m, &m->layers[l]);
    moe_pass mp = gpt_moe_pass(m, pass, record, B, 0.0f);
    gpt_random_ctx rc = {m, pass, l, B, T};
    mp.random_logits = gpt_random_logits, mp.random_ctx = &rc;
    MTC_CHECK(moe_layer_forward(out, &v->moe, &m->moe_stats[l], in, &mw, &c->moe, &md, N, &mp,
                                m->scratch));
    if (c->moe.shared_ffn > 0) { /* comm: the shared expert's TP linears */
        model_block_dims sd = mtc_model_shared_dims(m);
        MTC_CHECK(model_mlp_forward(&m->tp, m->dtmp, &v->sa, in, w[MTC_ROLE_SHARED_FC1_W],
                                    w[MTC_ROLE_SHARED_FC1_B], w[MTC_ROLE_SHARED_FC2_W],
                                    w[MTC_ROLE_SHARED_FC2_B], m->scratch, B, T, &sd));
        nn_residual_forward(out, out, m->dtmp, (size_t)N * c->hidden_size);
    }
    return MTC_OK;
}

/* din (B, T_loc, C) = d(in) of gpt_moe_forward; gradients +=. Uses
 * m->fwd_tmp for the shared expert's part. */
static mtc_result_t gpt_moe_backward(mtc_model *m, const mtc_model_pass *pass, layer_view *v,
                                     float *din, const float *dy, const float *in, int l, int B,
                                     int T, float loss_scale) {
    const mtc_model_config *c = &m->cfg;
    float *const *w = m->layers[l].w;
    float *const *g = m->dlayers[l].w;
    int Tl = m->tp.sequence_parallel ? T / m->tp_size : T, N = B * Tl;
    moe_dims md = mtc_model_moe_dims(m);
    moe_weights mw = gpt_moe_weights(m, &m->layers[l]);
    moe_weights dw = gpt_moe_weights(m, &m->dlayers[l]);
    dw.expert_bias = NULL;
    moe_pass mp = gpt_moe_pass(m, pass, 0, B, loss_scale);
    MTC_CHECK(moe_layer_backward(din, &dw, dy, &v->moe, in, &mw, &c->moe, &md, &mp, m->scratch));
    if (c->moe.shared_ffn > 0) {
        model_block_dims sd = mtc_model_shared_dims(m);
        MTC_CHECK(model_mlp_backward(
            &m->tp, m->fwd_tmp, g[MTC_ROLE_SHARED_FC1_W], g[MTC_ROLE_SHARED_FC1_B],
            g[MTC_ROLE_SHARED_FC2_W], g[MTC_ROLE_SHARED_FC2_B], dy, &v->sa, in,
            w[MTC_ROLE_SHARED_FC1_W], w[MTC_ROLE_SHARED_FC2_W], m->scratch, B, T, &sd));
        nn_residual_forward(din, din, m->fwd_tmp, (size_t)N * c->hidden_size);
    }
    return MTC_OK;
}

/* The forward of layer l from its input x (B, T_loc, C) into the view's
 * arrays (res3 = the layer output). Backward calls it again for a
 * recomputed layer: the dropout masks come from the same counters, so the
 * recomputed activations are the forward's bit for bit. */
static mtc_result_t gpt_layer_forward(mtc_model *m, const mtc_model_pass *pass, layer_view *v,
                                      const float *x, int l, int B, int T, int record) {
    const mtc_model_config *c = &m->cfg;
    const tp_ctx *tp = &m->tp;
    int C = c->hidden_size, Tl = m->tp.sequence_parallel ? T / m->tp_size : T, Nl = B * Tl;
    model_block_dims bd = mtc_model_layer_dims(m, l);
    model_qk_norm qn;
    gpt_qk_norm(m, l, v, &qn, &bd);
    float *const *w = m->layers[l].w;
    gpt_norm_forward(m, v->ln1, v->ln1m, v->ln1r, x, w[MTC_ROLE_NORM1_W], w[MTC_ROLE_NORM1_B], Nl);
    nn_dropout_spec da = gpt_drop(m, pass, l, SITE_ATTN_PROBS, c->attention_dropout, T);
    /* comm: column- then row-parallel (SP: all-gather, reduce-scatter) */
    if (c->mla.enabled) {
        model_mla_opts mo = mtc_model_mla_opts(m);
        model_mla_params mw = mtc_model_mla_params(w);
        MTC_CHECK(model_mla_forward(tp, m->fwd_tmp, &v->mla, v->ln1, &mw, da.p > 0 ? &da : NULL,
                                    m->scratch, B, T, &bd, &mo));
    } else {
        MTC_CHECK(model_attention_forward(tp, m->fwd_tmp, &v->aa, v->ln1, w[MTC_ROLE_QKV_W],
                                          w[MTC_ROLE_QKV_B], w[MTC_ROLE_PROJ_W], w[MTC_ROLE_PROJ_B],
                                          da.p > 0 ? &da : NULL, m->scratch, B, T, &bd));
    }
    nn_dropout_spec dh = gpt_drop(m, pass, l, SITE_ATTN_OUT, c->hidden_dropout, T);
    if (dh.p > 0) nn_dropout_forward(m->fwd_tmp, m->fwd_tmp, B, Tl, C, &dh);
    nn_residual_forward(v->res2, x, m->fwd_tmp, (size_t)Nl * C);
    model_lowp_round(m, v->res2, (size_t)Nl * C);
    gpt_norm_forward(m, v->ln2, v->ln2m, v->ln2r, v->res2, w[MTC_ROLE_NORM2_W], w[MTC_ROLE_NORM2_B],
                     Nl);
    if (mtc_model_is_moe_layer(c, l))
        MTC_CHECK(gpt_moe_forward(m, pass, v, m->fwd_tmp, v->ln2, l, B, T, record));
    else
        MTC_CHECK(model_mlp_forward(tp, m->fwd_tmp, &v->ma, v->ln2, w[MTC_ROLE_FC1_W],
                                    w[MTC_ROLE_FC1_B], w[MTC_ROLE_FC2_W], w[MTC_ROLE_FC2_B],
                                    m->scratch, B, T, &bd));
    nn_dropout_spec dm = gpt_drop(m, pass, l, SITE_MLP_OUT, c->hidden_dropout, T);
    if (dm.p > 0) nn_dropout_forward(m->fwd_tmp, m->fwd_tmp, B, Tl, C, &dm);
    nn_residual_forward(v->res3, v->res2, m->fwd_tmp, (size_t)Nl * C);
    model_lowp_round(m, v->res3, (size_t)Nl * C);
    return MTC_OK;
}

/* The step's first microbatch: the gradients from zero (the pass's own
 * zeroing when it brings one). */
static void gpt_zero_grad(mtc_model *m, const mtc_model_pass *pass) {
    if (pass->zero_grad)
        pass->zero_grad(pass->zero_grad_ctx);
    else
        mtc_model_zero_grad(m);
}

double mtc_model_forward(mtc_model *m, int slot, const int *tokens, const int *targets, int B,
                         int T, const mtc_model_pass *pass) {
    MTC_ASSERT(slot >= 0 && slot < m->nslots && B <= m->B && T <= m->T && B >= 1 && T >= 1);
    MTC_ASSERT(!m->tp.sequence_parallel || T == m->T);
    const mtc_model_config *c = &m->cfg;
    const tp_ctx *tp = &m->tp;
    int C = c->hidden_size, Vp = c->padded_vocab_size;
    int p = m->tp_size, Tl = m->tp.sequence_parallel ? T / p : T;
    int N = B * T, Nl = B * Tl;
    mtc_model_slot *a = &m->slots[slot];
    int f0, f1;
    a->dlnf_ready = a->zeroed = 0;
    if (m->fp8) m->fp8->recording = pass && pass->train; /* delayed amaxes: training only */
    /* a training pass's first microbatch: the gradients start from zero
     * before the fused head below accumulates its weight gradient (every
     * kernel after this accumulates; adding to +0 is exact) */
    if (pass && pass->first_microbatch && pass->loss_scale > 0 && targets) {
        gpt_zero_grad(m, pass);
        a->zeroed = 1;
    }

#define GPT_NEED(first, last)                                                                      \
    do {                                                                                           \
        if (pass && pass->params_needed && (first) < (last))                                       \
            GPT_TRY(m, pass->params_needed(pass->params_needed_ctx, (first), (last)));             \
        model_lowp_refresh(m, (first), (last));                                                    \
    } while (0)
    if (m->has_embedding) {
        int e0 = m->pidx[MTC_ROLE_WTE],
            e1 = m->pidx[MTC_ROLE_WPE] >= 0 ? m->pidx[MTC_ROLE_WPE] : e0;
        GPT_NEED(e0, e1 + 1);
        /* comm: all-reduce(tp) */
        GPT_TRY(m, tp_vocab_embedding_forward(tp, a->encoded, tokens, m->g[MTC_ROLE_WTE],
                                              m->g[MTC_ROLE_WPE], m->cp.cp > 1 ? m->cp.pos : NULL,
                                              m->scratch, B, T, C, Vp));
        nn_dropout_spec d = gpt_drop(m, pass, -1, SITE_EMBED, c->hidden_dropout, T);
        if (d.p > 0) nn_dropout_forward(a->encoded, a->encoded, B, Tl, C, &d);
        model_lowp_round(m, a->encoded, (size_t)Nl * C);
    }
    const float *x = a->encoded;
    for (int l = m->first_layer; l < m->last_layer; l++) {
        layer_view v = gpt_layer_view(m, a, (size_t)(l - m->first_layer));
        GPT_NEED(m->layers[l].first, m->layers[l].last);
        GPT_TRY(m, gpt_layer_forward(m, pass, &v, x, l, B, T, 1));
        x = v.res3;
    }
    int sa = m->mtp_standalone;
    if (!m->has_head && sa != 1) return 0.0;
    /* h_0: the final norm's output, or (after a standalone MTP stage) the
     * first of the 1 + D states received */
    const float *h0 = sa == 2 ? a->encoded : a->lnf;
    if (sa != 2) {
        gpt_role_range(m, MTC_ROLE_NORMF_W, &f0, &f1);
        if (m->pidx[MTC_ROLE_NORMF_B] >= 0) f1 = m->pidx[MTC_ROLE_NORMF_B] + 1;
        GPT_NEED(f0, f1);
    }
    if (m->has_head) {
        gpt_role_range(m, m->pidx[MTC_ROLE_HEAD] >= 0 ? MTC_ROLE_HEAD : MTC_ROLE_WTE, &f0, &f1);
        GPT_NEED(f0, f1);
    }
#undef GPT_NEED
    if (sa != 2)
        gpt_norm_forward(m, a->lnf, a->lnf_mean, a->lnf_rstd, x, m->g[MTC_ROLE_NORMF_W],
                         m->g[MTC_ROLE_NORMF_B], Nl);
    if (sa == 1) { /* Megatron's standalone MTP stage: the depths, no head */
        GPT_TRY(m, model_mtp_forward(m, slot, tokens, targets, B, T, pass));
        return 0.0;
    }
    if (!targets) {
        /* generation: the LM head on the rank's vocabulary shard (wte tied,
         * or the output layer): logits (B, T, Vp/tp). comm: SP all-gather */
        if (!m->full_logits) {
            GPT_TRY(m, mtc_error(MTC_ERR_INVALID_USAGE,
                                 "a forward without targets needs a model built with logits "
                                 "(mtc_model_chunk_opts.logits = 1)"));
        }
        GPT_TRY(m, tp_column_linear_forward(tp, a->logits, m->in_total, h0, m->head_w, NULL,
                                            m->scratch, 0, B, T, C, Vp));
        return 0.0;
    }
    /* The head and the loss fused, head_chunk tokens at a time: the
     * softmax covers the whole padded vocabulary, as Megatron's
     * vocab_parallel_cross_entropy over the output layer's padded logits
     * (targets are < vocab_size: the data readers check). Training also
     * makes d(lnf) for the backward and accumulates the head's weight
     * gradient here. comm: SP all-gather; per chunk all-reduce(tp) MAX and
     * SUM; training: all-reduce(tp) of d(lnf), SP reduce-scatter */
    float scale = pass && pass->loss_scale > 0 ? pass->loss_scale : 0.0f;
    GPT_TRY(m, tp_vocab_head_xent(tp, a->losses, scale > 0 ? a->dlnf : NULL,
                                  scale > 0 ? m->dhead_w : NULL, m->head_logits, m->in_total, h0,
                                  m->head_w, targets, scale, m->scratch, m->head_chunk, B, T, C, Vp,
                                  Vp));
    a->dlnf_ready = scale > 0;
    double sum = 0;
    for (int i = 0; i < N; i++)
        sum += a->losses[i];
    /* multi-token prediction on the main hidden state (model/mtp.c), or the
     * heads of the states a standalone MTP stage sent */
    if (m->mtp_layers) GPT_TRY(m, model_mtp_forward(m, slot, tokens, targets, B, T, pass));
    if (sa == 2) GPT_TRY(m, model_mtp_heads_forward(m, slot, tokens, targets, B, T, pass));
    return sum;
}

mtc_result_t model_params_needed(mtc_model *m, const mtc_model_pass *pass, int first, int last) {
    if (pass && pass->params_needed && first < last)
        MTC_CHECK(pass->params_needed(pass->params_needed_ctx, first, last));
    model_lowp_refresh(m, first, last);
    return MTC_OK;
}

mtc_result_t model_layer_forward(mtc_model *m, const mtc_model_pass *pass, mtc_model_slot *a, int k,
                                 int l, const float *x, int B, int T) {
    layer_view v = gpt_layer_view(m, a, (size_t)k);
    return gpt_layer_forward(m, pass, &v, x, l, B, T, 1);
}

const float *model_layer_output(const mtc_model *m, const mtc_model_slot *a, int k) {
    return a->res3 + (size_t)k * m->B * m->T_loc * m->cfg.hidden_size;
}

void model_norm_forward(const mtc_model *m, float *out, float *mean, float *rstd, const float *in,
                        const float *w, const float *b, int N) {
    gpt_norm_forward(m, out, mean, rstd, in, w, b, N);
}

void model_norm_backward(const mtc_model *m, float *din, float *dw, float *db, const float *dout,
                         const float *in, const float *w, const float *mean, const float *rstd,
                         int N) {
    gpt_norm_backward(m, din, dw, db, dout, in, w, mean, rstd, N);
}

nn_dropout_spec model_dropout(const mtc_model *m, const mtc_model_pass *pass, int layer, int site,
                              float p, int T) {
    return gpt_drop(m, pass, layer, site, p, T);
}

static mtc_result_t gpt_ready(const mtc_model_pass *pass, int first, int last) {
    return pass && pass->grads_ready && first < last
               ? pass->grads_ready(pass->grads_ready_ctx, first, last)
               : MTC_OK;
}

/* Layer l's backward (chunk slot index k, input x): m->dres holds
 * d(output) and leaves with d(x). */
mtc_result_t model_layer_backward(mtc_model *m, const mtc_model_pass *pass, mtc_model_slot *a,
                                  int k, int l, const float *x, int B, int T, float loss_scale,
                                  int ready) {
    const mtc_model_config *c = &m->cfg;
    const tp_ctx *tp = &m->tp;
    int C = c->hidden_size, Tl = m->tp.sequence_parallel ? T / m->tp_size : T, Nl = B * Tl;
    size_t nC = (size_t)Nl * C;
    float *const *w = m->layers[l].w;
    float *const *g = m->dlayers[l].w;
    model_block_dims bd = mtc_model_layer_dims(m, l);
    layer_view v = gpt_layer_view(m, a, (size_t)k);
    /* params_needed in the backward too: Megatron-FSDP gathers each unit
     * again before its backward (a no-op for the distributed optimizer) */
    if (pass && pass->params_needed && m->layers[l].first < m->layers[l].last)
        MTC_CHECK(
            pass->params_needed(pass->params_needed_ctx, m->layers[l].first, m->layers[l].last));
    model_qk_norm qn;
    gpt_qk_norm(m, l, &v, &qn, &bd);
    /* --recompute-granularity full: rebuild this layer's activations from
     * its input (comm: the layer's forward collectives again) */
    if (k < m->nrec) MTC_CHECK(gpt_layer_forward(m, pass, &v, x, l, B, T, 0));
    float *ln1 = v.ln1, *ln1m = v.ln1m, *ln1r = v.ln1r, *res2 = v.res2;
    float *ln2 = v.ln2, *ln2m = v.ln2m, *ln2r = v.ln2r;
    model_attention_acts aa = v.aa;
    model_mlp_acts ma = v.ma;

    gpt_norm_forward(m, ln2, ln2m, ln2r, res2, w[MTC_ROLE_NORM2_W], w[MTC_ROLE_NORM2_B], Nl);
    /* --recompute-modules mlp: the MLP forward again from its input
     * ln2 (comm: its collectives again), the output thrown away; the same
     * arithmetic, so the refilled activations are the forward's bits.
     * An MoE layer keeps its own (Megatron's "mlp" module skips MoELayer) */
    if (m->rec_mlp && k >= m->nrec && !mtc_model_is_moe_layer(c, l))
        MTC_CHECK(model_mlp_forward(tp, m->fwd_tmp, &ma, ln2, w[MTC_ROLE_FC1_W], w[MTC_ROLE_FC1_B],
                                    w[MTC_ROLE_FC2_W], w[MTC_ROLE_FC2_B], m->scratch, B, T, &bd));
    /* --recompute-modules shared_experts: the shared expert's forward again
     * (comm: its TP linears' collectives), the output thrown away */
    /* --recompute-modules moe: the whole MoE layer's forward again (router,
     * dispatch, experts, shared expert; comm: its collectives again), the
     * output thrown away, nothing recorded: Megatron's MoELayer checkpoint */
    if (m->rec_moe && k >= m->nrec && mtc_model_is_moe_layer(c, l))
        MTC_CHECK(gpt_moe_forward(m, pass, &v, m->fwd_tmp, ln2, l, B, T, 0));
    else if (m->rec_shared && k >= m->nrec && mtc_model_is_moe_layer(c, l)) {
        model_block_dims sd = mtc_model_shared_dims(m);
        MTC_CHECK(model_mlp_forward(tp, m->fwd_tmp, &v.sa, ln2, w[MTC_ROLE_SHARED_FC1_W],
                                    w[MTC_ROLE_SHARED_FC1_B], w[MTC_ROLE_SHARED_FC2_W],
                                    w[MTC_ROLE_SHARED_FC2_B], m->scratch, B, T, &sd));
    }
    /* MLP branch: dres holds d(res3) */
    const float *dy = m->dres;
    nn_dropout_spec dm = gpt_drop(m, pass, l, SITE_MLP_OUT, c->hidden_dropout, T);
    if (dm.p > 0) nn_dropout_backward(m->dtmp, m->dres, B, Tl, C, &dm), dy = m->dtmp;
    if (mtc_model_is_moe_layer(c, l))
        MTC_CHECK(gpt_moe_backward(m, pass, &v, m->dtmp2, dy, ln2, l, B, T, loss_scale));
    else
        MTC_CHECK(model_mlp_backward(tp, m->dtmp2, g[MTC_ROLE_FC1_W], g[MTC_ROLE_FC1_B],
                                     g[MTC_ROLE_FC2_W], g[MTC_ROLE_FC2_B], dy, &ma, ln2,
                                     w[MTC_ROLE_FC1_W], w[MTC_ROLE_FC2_W], m->scratch, B, T, &bd));
    gpt_norm_backward(m, m->dtmp, g[MTC_ROLE_NORM2_W], g[MTC_ROLE_NORM2_B], m->dtmp2, res2,
                      w[MTC_ROLE_NORM2_W], ln2m, ln2r, Nl);
    nn_residual_forward(m->dres, m->dres, m->dtmp, nC); /* now d(res2) */

    /* attention branch */
    dy = m->dres;
    nn_dropout_spec dh = gpt_drop(m, pass, l, SITE_ATTN_OUT, c->hidden_dropout, T);
    if (dh.p > 0) nn_dropout_backward(m->dtmp, m->dres, B, Tl, C, &dh), dy = m->dtmp;
    nn_dropout_spec da = gpt_drop(m, pass, l, SITE_ATTN_PROBS, c->attention_dropout, T);
    gpt_norm_forward(m, ln1, ln1m, ln1r, x, w[MTC_ROLE_NORM1_W], w[MTC_ROLE_NORM1_B], Nl);
    if (c->mla.enabled) { /* comm: MLA's (model/mla.h) */
        model_mla_opts mo = mtc_model_mla_opts(m);
        model_mla_params mw = mtc_model_mla_params(w), mg = mtc_model_mla_params(g);
        MTC_CHECK(model_mla_backward(tp, m->dtmp2, &mg, dy, &v.mla, ln1, &mw, da.p > 0 ? &da : NULL,
                                     m->scratch, B, T, &bd, &mo));
    } else {
        MTC_CHECK(model_attention_backward(tp, m->dtmp2, g[MTC_ROLE_QKV_W], g[MTC_ROLE_QKV_B],
                                           g[MTC_ROLE_PROJ_W], g[MTC_ROLE_PROJ_B], dy, &aa, ln1,
                                           w[MTC_ROLE_QKV_W], w[MTC_ROLE_PROJ_W],
                                           da.p > 0 ? &da : NULL, m->scratch, B, T, &bd));
    }
    gpt_norm_backward(m, m->dtmp, g[MTC_ROLE_NORM1_W], g[MTC_ROLE_NORM1_B], m->dtmp2, x,
                      w[MTC_ROLE_NORM1_W], ln1m, ln1r, Nl);
    nn_residual_forward(m->dres, m->dres, m->dtmp, nC); /* now d(layer input) */
    if (ready) MTC_CHECK(gpt_ready(pass, m->layers[l].first, m->layers[l].last));
    return MTC_OK;
}

mtc_result_t mtc_model_backward(mtc_model *m, int slot, const int *tokens, const int *targets,
                                int B, int T, float loss_scale, const mtc_model_pass *pass) {
    MTC_ASSERT(slot >= 0 && slot < m->nslots && B <= m->B && T <= m->T);
    const mtc_model_config *c = &m->cfg;
    const tp_ctx *tp = &m->tp;
    int C = c->hidden_size, Vp = c->padded_vocab_size;
    int p = m->tp_size, Tl = m->tp.sequence_parallel ? T / p : T;
    int Nl = B * Tl;
    size_t sNl = (size_t)m->B * m->T_loc;
    mtc_model_slot *a = &m->slots[slot];
    /* every backward kernel accumulates: the step's first microbatch starts
     * from zero (adding to +0 is exact, so this equals overwriting), zeroed
     * here unless its training forward did */
    if (pass && pass->first_microbatch && !a->zeroed) gpt_zero_grad(m, pass);
    a->zeroed = 0;

    /* params_needed in the backward too: Megatron-FSDP gathers each unit
     * again before its backward (a no-op for the distributed optimizer) */
#define GPT_NEED_BWD(first, last)                                                                  \
    do {                                                                                           \
        if (pass && pass->params_needed && (first) < (last))                                       \
            MTC_CHECK(pass->params_needed(pass->params_needed_ctx, (first), (last)));              \
    } while (0)
    /* dres = d(loss)/d(chunk output) */
    if (m->mtp_standalone == 2 && m->has_head) {
        /* the heads of the 1 + D states a standalone MTP stage sent: their
         * gradients are the chunk's input gradient */
        int h0, h1;
        gpt_role_range(m, m->pidx[MTC_ROLE_HEAD] >= 0 ? MTC_ROLE_HEAD : MTC_ROLE_WTE, &h0, &h1);
        GPT_NEED_BWD(h0, h1);
        if (!a->dlnf_ready)
            MTC_CHECK(tp_vocab_head_xent(tp, a->losses, a->dlnf, m->dhead_w, m->head_logits,
                                         m->in_total, a->encoded, m->head_w, targets, loss_scale,
                                         m->scratch, m->head_chunk, B, T, C, Vp, Vp));
        a->dlnf_ready = 0;
        MTC_CHECK(model_mtp_heads_backward(m, slot, tokens, targets, B, T, loss_scale));
        memcpy(m->dres, a->dlnf, (size_t)Nl * C * sizeof(float));
        MTC_CHECK(gpt_ready(pass, h0, h1));
    } else if (m->has_head || m->mtp_standalone == 1) {
        MTC_ASSERT(targets);
        int n0, n1, h0 = 0, h1 = 0, head = m->has_head;
        gpt_role_range(m, MTC_ROLE_NORMF_W, &n0, &n1);
        if (m->pidx[MTC_ROLE_NORMF_B] >= 0) n1 = m->pidx[MTC_ROLE_NORMF_B] + 1;
        if (head)
            gpt_role_range(m, m->pidx[MTC_ROLE_HEAD] >= 0 ? MTC_ROLE_HEAD : MTC_ROLE_WTE, &h0, &h1);
        GPT_NEED_BWD(n0, n1);
        GPT_NEED_BWD(h0, h1);
        const float *xlast = m->last_layer > m->first_layer
                                 ? a->res3 + (size_t)(m->last_layer - m->first_layer - 1) * sNl * C
                                 : a->encoded;
        /* after a forward without the loss scale, the fused head again, now
         * with its gradients (comm: as in the forward) */
        /* (a standalone MTP stage: d(h_0) is the received gradient's first
         * state, model_mtp_backward takes it) */
        if (!a->dlnf_ready && head)
            MTC_CHECK(tp_vocab_head_xent(tp, a->losses, a->dlnf, m->dhead_w, m->head_logits,
                                         m->in_total, a->lnf, m->head_w, targets, loss_scale,
                                         m->scratch, m->head_chunk, B, T, C, Vp, Vp));
        a->dlnf_ready = 0;
        /* the MTP depths' gradient into the main hidden state joins d(lnf) */
        if (m->mtp_layers) {
            MTC_CHECK(model_mtp_backward(m, slot, tokens, targets, B, T, loss_scale, pass));
            GPT_NEED_BWD(n0, n1); /* Megatron-FSDP: the final norm again after the depths' */
        }
        gpt_norm_backward(m, m->dres, m->dg[MTC_ROLE_NORMF_W], m->dg[MTC_ROLE_NORMF_B], a->dlnf,
                          xlast, m->g[MTC_ROLE_NORMF_W], a->lnf_mean, a->lnf_rstd, Nl);
        /* the final norm and the output layer (or, on a stage without the
         * embedding, its tied wte copy) are final now */
        int f0 = m->pidx[MTC_ROLE_NORMF_W], f1 = f0 + 1;
        if (m->pidx[MTC_ROLE_NORMF_B] >= 0) f1 = m->pidx[MTC_ROLE_NORMF_B] + 1;
        if (m->pidx[MTC_ROLE_HEAD] >= 0) f1 = m->pidx[MTC_ROLE_HEAD] + 1;
        MTC_CHECK(gpt_ready(pass, f0, f1));
        /* a non-embedding chunk's wte copy (tied head, or MTP's embedding) */
        if (!m->has_embedding && m->pidx[MTC_ROLE_WTE] >= 0)
            MTC_CHECK(gpt_ready(pass, m->pidx[MTC_ROLE_WTE], m->pidx[MTC_ROLE_WTE] + 1));
    }
    for (int l = m->last_layer - 1; l >= m->first_layer; l--) {
        int k = l - m->first_layer;
        const float *x = k ? a->res3 + (size_t)(k - 1) * sNl * C : a->encoded;
        MTC_CHECK(model_layer_backward(m, pass, a, k, l, x, B, T, loss_scale, 1));
    }
    if (m->has_embedding) {
        const float *dy = m->dres;
        nn_dropout_spec d = gpt_drop(m, pass, -1, SITE_EMBED, c->hidden_dropout, T);
        if (d.p > 0) nn_dropout_backward(m->dtmp, m->dres, B, Tl, C, &d), dy = m->dtmp;
        /* comm: SP all-gather(tp) of dy */
        MTC_CHECK(tp_vocab_embedding_backward(tp, m->dg[MTC_ROLE_WTE], m->dg[MTC_ROLE_WPE], dy,
                                              tokens, m->cp.cp > 1 ? m->cp.pos : NULL, m->scratch,
                                              B, T, C, Vp));
        int e0 = m->pidx[MTC_ROLE_WTE],
            e1 = m->pidx[MTC_ROLE_WPE] >= 0 ? m->pidx[MTC_ROLE_WPE] + 1 : e0 + 1;
        MTC_CHECK(gpt_ready(pass, e0, e1)); /* wte, wpe */
    }
#undef GPT_NEED_BWD
    return MTC_OK;
}
