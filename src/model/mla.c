/* model/mla.c - multi-latent attention's forward and backward; see mla.h.
 * Forward scratch: [q | kv | qn | kvn | kpe | down | gather | linear];
 * backward scratch: [attc | datp | dqkv | dq | dkv | dkpe | qn | kvn | dlat |
 * dlat2 | ddown | din2 | gather | linear]. */
#include "model/mla.h"

#include <math.h>
#include <string.h>

#include "nn/llama.h"
#include "nn/lowp.h"
#include "tp/mappings.h"

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

mtc_result_t model_mla_validate(const mtc_mla_config *c) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    if (!c->enabled) return MTC_OK;
#define MLA_RANGE(v, lo, name)                                                                     \
    if ((v) < (lo) || (v) > (1 << 16))                                                             \
        return mtc_error(E, name "=%d is outside [%d, 65536]", (v), (lo));
    MLA_RANGE(c->q_lora_rank, 0, "q-lora-rank");
    MLA_RANGE(c->kv_lora_rank, 1, "kv-lora-rank");
    MLA_RANGE(c->qk_head_dim, 1, "qk-head-dim");
    MLA_RANGE(c->v_head_dim, 1, "v-head-dim");
    MLA_RANGE(c->original_max_position_embeddings, 1, "original-max-position-embeddings");
#undef MLA_RANGE
    if (c->qk_pos_emb_head_dim < 2 || c->qk_pos_emb_head_dim % 2 || c->qk_pos_emb_head_dim > 1024)
        return mtc_error(E, "qk-pos-emb-head-dim=%d must be even, in [2, 1024]",
                         c->qk_pos_emb_head_dim);
    if (!(c->rotary_scaling_factor > 0 && c->rotary_scaling_factor < 1e6))
        return mtc_error(E, "rotary-scaling-factor=%g must be in (0, 1e6)",
                         (double)c->rotary_scaling_factor);
    if (!(c->beta_fast > 0 && c->beta_slow > 0 && c->beta_fast < 1e6 && c->beta_slow < 1e6))
        return mtc_error(E, "beta-fast=%g and beta-slow=%g must be in (0, 1e6)",
                         (double)c->beta_fast, (double)c->beta_slow);
    if (!(c->mscale > -1e6 && c->mscale < 1e6 && c->mscale_all_dim > -1e6 &&
          c->mscale_all_dim < 1e6))
        return mtc_error(E, "mscale=%g and mscale-all-dim=%g must be in (-1e6, 1e6)",
                         (double)c->mscale, (double)c->mscale_all_dim);
    return MTC_OK;
}

nn_yarn_params model_mla_yarn_params(const mtc_mla_config *c, float rotary_base) {
    nn_yarn_params p = {.yarn = c->rope_yarn,
                        .base = rotary_base > 0 ? rotary_base : 10000.0f,
                        .scaling_factor = c->rotary_scaling_factor,
                        .original_max_positions = c->original_max_position_embeddings,
                        .beta_fast = c->beta_fast,
                        .beta_slow = c->beta_slow,
                        .mscale = c->mscale,
                        .mscale_all_dim = c->mscale_all_dim};
    return p;
}

float model_mla_softmax_scale(const mtc_mla_config *c) {
    /* computed whatever the rope type, as MultiLatentAttention.__init__ */
    double m = nn_yarn_get_mscale(c->rotary_scaling_factor, c->mscale_all_dim);
    return (float)(m * m / sqrt((double)(c->qk_head_dim + c->qk_pos_emb_head_dim)));
}

/* This rank's widths. */
typedef struct {
    int p, NH, QL, KL, P, dqk, dv, Dq, Dkv, HSa, W; /* W = 3 NH HSa, the qkv row */
} mla_shape;

static mla_shape mla_local(const mtc_mla_config *c, int tp, int NH) {
    mla_shape s = {.p = tp, .NH = NH / tp, .QL = c->q_lora_rank, .KL = c->kv_lora_rank};
    s.P = c->qk_pos_emb_head_dim, s.dqk = c->qk_head_dim, s.dv = c->v_head_dim;
    s.Dq = s.dqk + s.P, s.Dkv = s.dqk + s.dv;
    s.HSa = s.Dq > s.dv ? s.Dq : s.dv;
    s.W = 3 * s.NH * s.HSa;
    return s;
}

size_t model_mla_qkv_floats(const model_mla_opts *o, int tp, int B, int T, int NH) {
    mla_shape s = mla_local(o->cfg, tp, NH);
    return (size_t)B * T * s.W;
}

size_t model_mla_acts_floats(const model_mla_opts *o, int tp, int B, int T, int T_loc, int NH) {
    mla_shape s = mla_local(o->cfg, tp, NH);
    size_t N = (size_t)B * T, Nl = (size_t)B * T_loc;
    size_t n = Nl * ((size_t)s.QL + s.KL + s.P) + N * (size_t)s.NH * s.HSa + (size_t)B * s.NH * T;
    if (o->cfg->latent_norm) n += 4 * Nl;
    if (!o->recompute_up) n += N * s.W;
    return n;
}

void model_mla_acts_bind(model_mla_acts *a, float *base, const model_mla_opts *o, int tp, int B,
                         int T, int T_loc, int NH) {
    mla_shape s = mla_local(o->cfg, tp, NH);
    size_t N = (size_t)B * T, Nl = (size_t)B * T_loc;
    float *p = base;
    a->qc = p, p += Nl * s.QL;
    a->kvc = p, p += Nl * s.KL;
    a->kpe = p, p += Nl * s.P;
    a->qstat = a->kvstat = NULL;
    if (o->cfg->latent_norm) a->qstat = p, p += 2 * Nl, a->kvstat = p, p += 2 * Nl;
    a->lse = p, p += (size_t)B * s.NH * T;
    a->atty = p, p += N * s.NH * s.HSa;
    if (!o->recompute_up) a->qkv = p; /* else the caller's shared buffer */
}

static size_t lin_scratch(const tp_ctx *tp, int B, int T, int T_loc, int C, const mla_shape *s) {
    tp_ctx loc = *tp;
    loc.comm = NULL, loc.sequence_parallel = 0;
    int p = s->p, up_in = s->QL ? s->QL : C;
    size_t n = tp_column_linear_scratch_floats(tp, 0, B, T, up_in, p * s->NH * s->Dq);
    n = max_sz(n, tp_column_linear_scratch_floats(tp, 0, B, T, s->KL, p * s->NH * s->Dkv));
    n = max_sz(n, tp_row_linear_scratch_floats(tp, 1, B, T, p * s->NH * s->dv, C));
    n = max_sz(n, tp_column_linear_scratch_floats(&loc, 0, B, T_loc, C, s->KL + s->P));
    if (s->QL) n = max_sz(n, tp_column_linear_scratch_floats(&loc, 0, B, T_loc, C, s->QL));
    if (tp->sequence_parallel) n = max_sz(n, tp_seq_scratch_floats(B, T, s->P, p));
    return n;
}

size_t model_mla_scratch_body(int tp, int sp, int B, int T, int C, int NH,
                              const model_mla_opts *o) {
    mla_shape s = mla_local(o->cfg, tp, NH);
    int Tl = sp && s.p > 1 ? T / s.p : T;
    size_t N = (size_t)B * T, Nl = (size_t)B * Tl, L = max_sz(s.QL, s.KL), L2 = max_sz(L, s.P);
    size_t gat = sp ? N * max_sz((size_t)C, L) : 0;
    size_t fwd = N * s.NH * ((size_t)s.Dq + s.Dkv) + Nl * ((size_t)s.QL + s.KL) + N * s.P;
    fwd = max_sz(fwd, Nl * ((size_t)s.KL + s.P)); /* the down projections' output first */
    size_t bwd = N * (s.NH * ((size_t)s.dv + s.HSa + s.Dq + s.Dkv) + s.W) + N * s.P +
                 Nl * (2 * L + 2 * L2 + s.KL + s.P + C);
    /* a recomputing backward runs the forward's up part first: both layouts */
    return max_sz(fwd, o->recompute_up ? max_sz(bwd, fwd) : bwd) + gat;
}

size_t model_mla_scratch_floats(const tp_ctx *tp, int B, int T, const model_block_dims *d,
                                const model_mla_opts *o) {
    int p = tp_size(tp->comm), sp = tp->sequence_parallel && p > 1;
    mla_shape s = mla_local(o->cfg, p, d->NH);
    size_t lin = lin_scratch(tp, B, T, sp ? T / p : T, d->C, &s);
    nn_attention_shape g = {.B = B, .T = T, .Tk = T, .NH = s.NH, .NKV = s.NH, .HS = s.HSa};
    g.ldq = g.ldk = g.ldv = s.W, g.ldo = s.NH * s.HSa;
    lin = max_sz(lin, cp_attention_scratch_floats(d->cp, &g));
    return model_mla_scratch_body(p, tp->sequence_parallel, B, T, d->C, d->NH, o) + lin;
}

double model_mla_token_macs(const mtc_mla_config *a, int C, int NH, int T) {
    double h = C, n = NH, Dq = a->qk_head_dim + a->qk_pos_emb_head_dim;
    double q = a->q_lora_rank > 0 ? a->q_lora_rank * (h + n * Dq + 1) : h * n * Dq;
    double kv = a->kv_lora_rank * (h + n * (a->qk_head_dim + a->v_head_dim) + 1);
    return q + kv + h * a->qk_pos_emb_head_dim + n * a->v_head_dim * h +
           (n * Dq + n * a->v_head_dim) / 2 * T;
}

size_t model_mla_widest(const model_mla_opts *o, int tp, int C, int NH) {
    mla_shape s = mla_local(o->cfg, tp, NH);
    size_t w = max_sz((size_t)C, (size_t)s.KL + s.P);
    w = max_sz(w, max_sz((size_t)s.NH * s.Dq, (size_t)s.NH * s.Dkv));
    return max_sz(w, max_sz((size_t)s.QL, (size_t)s.NH * s.dv));
}

mtc_result_t model_mla_bf16_prepare(const tp_ctx *tp, const model_mla_opts *o, int B, int T,
                                    int T_loc, int C, int NH, int proj_bias) {
    mla_shape s = mla_local(o->cfg, tp_size(tp->comm), NH);
    tp_ctx loc = *tp;
    loc.comm = NULL, loc.sequence_parallel = 0;
    int p = s.p;
    if (s.QL) {
        MTC_CHECK(tp_linear_bf16_prepare(&loc, 1, B, T_loc, C, s.QL, 0));
        MTC_CHECK(tp_linear_bf16_prepare(tp, 1, B, T, s.QL, p * s.NH * s.Dq, 0));
    } else {
        MTC_CHECK(tp_linear_bf16_prepare(tp, 1, B, T, C, p * s.NH * s.Dq, 0));
    }
    MTC_CHECK(tp_linear_bf16_prepare(&loc, 1, B, T_loc, C, s.KL + s.P, 0));
    MTC_CHECK(tp_linear_bf16_prepare(tp, 1, B, T, s.KL, p * s.NH * s.Dkv, 0));
    return tp_linear_bf16_prepare(tp, 0, B, T, p * s.NH * s.dv, C, proj_bias);
}

/* ---- helpers ------------------------------------------------------------------------------ */

static void lowp_round(const tp_ctx *tp, float *x, size_t n) {
    if (!tp->lowp || tp->lowp->prec == TP_PREC_F32) return;
    if (tp->lowp->prec == TP_PREC_BF16)
        nn_round_bf16(x, n);
    else
        nn_round_f16(x, n);
}

/* out (N, width) = columns [off, off + width) of the rows of x (ld); back. */
static void cols_get(float *out, const float *x, size_t N, int ld, int off, int width) {
    for (size_t n = 0; n < N; n++)
        memcpy(out + n * width, x + n * ld + off, (size_t)width * sizeof(float));
}
static void cols_put(float *x, const float *in, size_t N, int ld, int off, int width) {
    for (size_t n = 0; n < N; n++)
        memcpy(x + n * ld + off, in + n * width, (size_t)width * sizeof(float));
}

/* A latent norm: out = norm(in) (rows of L), stat = mean | rstd. */
static void lat_norm(const tp_ctx *tp, float *out, float *stat, const float *in, const float *w,
                     const float *b, size_t N, int L, const model_mla_opts *o) {
    if (o->rms)
        nn_rmsnorm_forward(tp->pool, out, stat + N, in, w, o->eps, (int)N, L);
    else
        nn_layernorm_forward_eps(tp->pool, out, stat, stat + N, in, w, b, o->eps, (int)N, L);
    lowp_round(tp, out, N * (size_t)L);
}

static void lat_norm_backward(const tp_ctx *tp, float *din, float *dw, float *db, const float *dout,
                              const float *in, const float *w, const float *stat, size_t N, int L,
                              const model_mla_opts *o) {
    if (o->rms)
        nn_rmsnorm_backward(tp->pool, din, dw, dout, in, w, stat + N, (int)N, L);
    else
        nn_layernorm_backward(tp->pool, din, dw, db, dout, in, w, stat, stat + N, (int)N, L);
}

/* The up projections' inputs: the latents normalised (latent_norm) into
 * qn, kvn, or the stored latents themselves. */
static void mla_latents(const tp_ctx *tp, const float **qn, const float **kvn, float *qbuf,
                        float *kvbuf, const model_mla_acts *a, const model_mla_params *w, size_t Nl,
                        const mla_shape *s, const model_mla_opts *o) {
    *qn = a->qc, *kvn = a->kvc;
    if (!o->cfg->latent_norm) return;
    if (s->QL) lat_norm(tp, qbuf, a->qstat, a->qc, w->qn_w, w->qn_b, Nl, s->QL, o), *qn = qbuf;
    lat_norm(tp, kvbuf, a->kvstat, a->kvc, w->kvn_w, w->kvn_b, Nl, s->KL, o), *kvn = kvbuf;
}

static const nn_dropout_spec *heads_of(nn_dropout_spec *out, const nn_dropout_spec *drop, int NH,
                                       int r, int NH_tp) {
    if (!drop) return NULL;
    *out = *drop;
    out->NHg = drop->NHg ? drop->NHg : NH;
    out->h0 = drop->h0 + r * NH_tp;
    return out;
}

static nn_attention_shape mla_geometry(const mla_shape *s, int B, int T, const model_mla_opts *o) {
    nn_attention_shape g = {.B = B, .T = T, .Tk = T, .NH = s->NH, .NKV = s->NH, .HS = s->HSa};
    g.ldq = g.ldk = g.ldv = s->W, g.ldo = s->NH * s->HSa;
    g.scale = model_mla_softmax_scale(o->cfg);
    return g;
}

/* The up part: latents -> a->qkv (q and k rotated, heads padded).
 * Scratch: [q (N NH Dq) | kv (N NH Dkv) | qn | kvn | kpe (N P) | gather | lin].
 * comm: the up projections' SP all-gathers, k_pe's all-gather (SP). */
static mtc_result_t mla_up(const tp_ctx *tp, model_mla_acts *a, const float *in,
                           const model_mla_params *w, float *scratch, int B, int T,
                           const model_block_dims *d, const mla_shape *s, const model_mla_opts *o) {
    int p = s->p, Tl = tp->sequence_parallel && p > 1 ? T / p : T;
    size_t N = (size_t)B * T, Nl = (size_t)B * Tl, L = max_sz(s->QL, s->KL);
    float *q = scratch, *kv = q + N * s->NH * s->Dq, *qbuf = kv + N * s->NH * s->Dkv;
    float *kvbuf = qbuf + Nl * s->QL, *kpe = kvbuf + Nl * s->KL, *gat = kpe + N * s->P;
    float *lin = gat + (tp->sequence_parallel ? N * max_sz((size_t)d->C, L) : 0);
    const float *qn, *kvn;
    mla_latents(tp, &qn, &kvn, qbuf, kvbuf, a, w, Nl, s, o);
    if (s->QL) /* comm: column-parallel (SP: all-gather T) */
        MTC_CHECK(tp_column_linear_forward(tp, q, gat, qn, w->qu, NULL, lin, 0, B, T, s->QL,
                                           p * s->NH * s->Dq));
    else
        MTC_CHECK(tp_column_linear_forward(tp, q, gat, in, w->q, NULL, lin, 0, B, T, d->C,
                                           p * s->NH * s->Dq));
    MTC_CHECK(tp_column_linear_forward(tp, kv, gat, kvn, w->kvu, NULL, lin, 0, B, T, s->KL,
                                       p * s->NH * s->Dkv));
    if (tp->sequence_parallel && p > 1) /* comm: all-gather(tp) of k_pe along T */
        MTC_CHECK(tp_seq_all_gather(kpe, a->kpe, lin, B, T, s->P, tp->comm));
    else
        memcpy(kpe, a->kpe, N * s->P * sizeof(float));
    nn_yarn_forward(tp->pool, q + s->dqk, o->rope, d->pos, d->t0, B, T, s->NH, s->Dq,
                    s->NH * s->Dq);
    nn_yarn_forward(tp->pool, kpe, o->rope, d->pos, d->t0, B, T, 1, s->P, s->P);
    lowp_round(tp, q, N * s->NH * s->Dq);
    lowp_round(tp, kpe, N * s->P);
    for (size_t n = 0; n < N; n++) {
        float *row = a->qkv + n * s->W;
        memset(row, 0, (size_t)s->W * sizeof(float));
        for (int h = 0; h < s->NH; h++) {
            float *qh = row + (size_t)h * s->HSa, *kh = qh + (size_t)s->NH * s->HSa;
            float *vh = kh + (size_t)s->NH * s->HSa;
            const float *kvh = kv + (n * s->NH + h) * s->Dkv;
            memcpy(qh, q + (n * s->NH + h) * s->Dq, (size_t)s->Dq * sizeof(float));
            memcpy(kh, kvh, (size_t)s->dqk * sizeof(float));
            memcpy(kh + s->dqk, kpe + n * s->P, (size_t)s->P * sizeof(float));
            memcpy(vh, kvh + s->dqk, (size_t)s->dv * sizeof(float));
        }
    }
    return MTC_OK;
}

mtc_result_t model_mla_forward(const tp_ctx *tp, float *out, model_mla_acts *a, const float *in,
                               const model_mla_params *w, const nn_dropout_spec *drop,
                               float *scratch, int B, int T, const model_block_dims *d,
                               const model_mla_opts *o) {
    int p = tp_size(tp->comm);
    mla_shape s = mla_local(o->cfg, p, d->NH);
    int Tl = tp->sequence_parallel && p > 1 ? T / p : T, r = tp_rank(tp->comm);
    size_t N = (size_t)B * T, Nl = (size_t)B * Tl, L = max_sz(s.QL, s.KL);
    tp_ctx loc = *tp; /* the duplicated down projections: local GEMMs on the rank's rows */
    loc.comm = NULL, loc.sequence_parallel = 0;
    (void)L;
    float *down = scratch, *lin = down + Nl * ((size_t)s.KL + s.P); /* consumed before mla_up */
    if (s.QL)
        MTC_CHECK(tp_column_linear_forward(&loc, a->qc, NULL, in, w->qd, NULL, lin, 0, B, Tl, d->C,
                                           s.QL));
    MTC_CHECK(tp_column_linear_forward(&loc, down, NULL, in, w->kvd, NULL, lin, 0, B, Tl, d->C,
                                       s.KL + s.P));
    cols_get(a->kvc, down, Nl, s.KL + s.P, 0, s.KL);
    cols_get(a->kpe, down, Nl, s.KL + s.P, s.KL, s.P);
    MTC_CHECK(mla_up(tp, a, in, w, scratch, B, T, d, &s, o));
    nn_attention_shape g = mla_geometry(&s, B, T, o);
    nn_dropout_spec dl;
    const float *qkv = a->qkv;
    size_t hw = (size_t)s.NH * s.HSa;
    float *attc = scratch, *alin = scratch + N * s.NH * s.dv;
    if (d->cp && d->cp->cp > 1) /* comm: the CP attention's */
        MTC_CHECK(cp_attention_forward(d->cp, tp->pool, a->atty, a->lse, qkv, qkv + hw,
                                       qkv + 2 * hw, &g, heads_of(&dl, drop, d->NH, r, s.NH),
                                       alin));
    else
        nn_attention_forward(tp->pool, a->atty, a->lse, qkv, qkv + hw, qkv + 2 * hw, &g,
                             heads_of(&dl, drop, d->NH, r, s.NH));
    for (size_t n = 0; n < N * s.NH; n++) /* the first dv channels of each head */
        memcpy(attc + n * s.dv, a->atty + n * s.HSa, (size_t)s.dv * sizeof(float));
    /* comm: row-parallel (all-reduce; SP: reduce-scatter T) */
    return tp_row_linear_forward(tp, out, attc, w->proj, w->proj_b, alin, 1, B, T, p * s.NH * s.dv,
                                 d->C);
}

mtc_result_t model_mla_backward(const tp_ctx *tp, float *din, const model_mla_params *g,
                                const float *dout, model_mla_acts *a, const float *in,
                                const model_mla_params *w, const nn_dropout_spec *drop,
                                float *scratch, int B, int T, const model_block_dims *d,
                                const model_mla_opts *o) {
    int p = tp_size(tp->comm);
    mla_shape s = mla_local(o->cfg, p, d->NH);
    int Tl = tp->sequence_parallel && p > 1 ? T / p : T, r = tp_rank(tp->comm);
    size_t N = (size_t)B * T, Nl = (size_t)B * Tl, L = max_sz(s.QL, s.KL);
    size_t hw = (size_t)s.NH * s.HSa;
    tp_ctx loc = *tp;
    loc.comm = NULL, loc.sequence_parallel = 0;
    /* --recompute-modules mla_up_proj: q, k, v again from the kept latents */
    if (o->recompute_up) MTC_CHECK(mla_up(tp, a, in, w, scratch, B, T, d, &s, o));
    float *attc = scratch, *datp = attc + N * s.NH * s.dv, *dqkv = datp + N * hw;
    float *dq = dqkv + N * s.W, *dkv = dq + N * s.NH * s.Dq, *dkpe = dkv + N * s.NH * s.Dkv;
    size_t L2 = max_sz(L, s.P);
    float *qbuf = dkpe + N * s.P, *kvbuf = qbuf + Nl * L, *dlat = kvbuf + Nl * L;
    float *dlat2 = dlat + Nl * L2, *ddown = dlat2 + Nl * L2, *din2 = ddown + Nl * (s.KL + s.P);
    float *gat = din2 + Nl * d->C;
    float *lin = gat + (tp->sequence_parallel ? N * max_sz((size_t)d->C, L) : 0);
    for (size_t n = 0; n < N * s.NH; n++)
        memcpy(attc + n * s.dv, a->atty + n * s.HSa, (size_t)s.dv * sizeof(float));
    /* comm: row-parallel backward (SP: all-gather T) */
    MTC_CHECK(tp_row_linear_backward(tp, dq, g->proj, g->proj_b, dout, attc, w->proj, lin, 1, B, T,
                                     p * s.NH * s.dv, d->C));
    memset(datp, 0, N * hw * sizeof(float));
    for (size_t n = 0; n < N * s.NH; n++)
        memcpy(datp + n * s.HSa, dq + n * s.dv, (size_t)s.dv * sizeof(float));
    nn_attention_shape ga = mla_geometry(&s, B, T, o);
    nn_dropout_spec dl;
    const float *qkv = a->qkv;
    if (d->cp && d->cp->cp > 1) /* comm: the CP attention's */
        MTC_CHECK(cp_attention_backward(d->cp, tp->pool, dqkv, dqkv + hw, dqkv + 2 * hw, datp, qkv,
                                        qkv + hw, qkv + 2 * hw, a->atty, a->lse, &ga,
                                        heads_of(&dl, drop, d->NH, r, s.NH), lin));
    else
        nn_attention_backward(tp->pool, dqkv, dqkv + hw, dqkv + 2 * hw, datp, qkv, qkv + hw,
                              qkv + 2 * hw, a->atty, a->lse, &ga,
                              heads_of(&dl, drop, d->NH, r, s.NH));
    for (size_t n = 0; n < N; n++) {
        const float *row = dqkv + n * s.W;
        float *kp = dkpe + n * s.P;
        memset(kp, 0, (size_t)s.P * sizeof(float));
        for (int h = 0; h < s.NH; h++) {
            const float *qh = row + (size_t)h * s.HSa, *kh = qh + hw, *vh = kh + hw;
            float *kvh = dkv + (n * s.NH + h) * s.Dkv;
            memcpy(dq + (n * s.NH + h) * s.Dq, qh, (size_t)s.Dq * sizeof(float));
            memcpy(kvh, kh, (size_t)s.dqk * sizeof(float));
            memcpy(kvh + s.dqk, vh, (size_t)s.dv * sizeof(float));
            for (int c = 0; c < s.P; c++) /* the shared key head: its heads' sum */
                kp[c] += kh[s.dqk + c];
        }
    }
    nn_yarn_backward(tp->pool, dq + s.dqk, o->rope, d->pos, d->t0, B, T, s.NH, s.Dq, s.NH * s.Dq);
    nn_yarn_backward(tp->pool, dkpe, o->rope, d->pos, d->t0, B, T, 1, s.P, s.P);
    /* k_pe's gradient over every head: comm: reduce-scatter(tp) along T
     * under SP (gather_from_sequence_parallel_region's backward), else
     * all-reduce(tp) (copy_to_tensor_model_parallel_region's) */
    if (tp->sequence_parallel && p > 1) {
        MTC_CHECK(tp_seq_reduce_scatter(dlat, dkpe, lin, B, T, s.P, tp->comm));
        cols_put(ddown, dlat, Nl, s.KL + s.P, s.KL, s.P);
    } else {
        if (p > 1) MTC_CHECK(tp_all_reduce(dkpe, N * s.P, tp->comm));
        cols_put(ddown, dkpe, Nl, s.KL + s.P, s.KL, s.P);
    }
    const float *qn, *kvn;
    mla_latents(tp, &qn, &kvn, qbuf, kvbuf, a, w, Nl, &s, o);
    /* comm: column-parallel backward (all-reduce; SP: re-gather, reduce-scatter) */
    MTC_CHECK(tp_column_linear_backward(tp, dlat, g->kvu, NULL, dkv, gat, 0, kvn, w->kvu, lin, 0, B,
                                        T, s.KL, p * s.NH * s.Dkv));
    if (o->cfg->latent_norm) {
        lat_norm_backward(tp, dlat2, g->kvn_w, g->kvn_b, dlat, a->kvc, w->kvn_w, a->kvstat, Nl,
                          s.KL, o);
        cols_put(ddown, dlat2, Nl, s.KL + s.P, 0, s.KL);
    } else {
        cols_put(ddown, dlat, Nl, s.KL + s.P, 0, s.KL);
    }
    MTC_CHECK(tp_column_linear_backward(&loc, din, g->kvd, NULL, ddown, NULL, 0, in, w->kvd, lin, 0,
                                        B, Tl, d->C, s.KL + s.P));
    if (s.QL) {
        MTC_CHECK(tp_column_linear_backward(tp, dlat, g->qu, NULL, dq, gat, 0, qn, w->qu, lin, 0, B,
                                            T, s.QL, p * s.NH * s.Dq));
        const float *dqc = dlat;
        if (o->cfg->latent_norm) {
            lat_norm_backward(tp, dlat2, g->qn_w, g->qn_b, dlat, a->qc, w->qn_w, a->qstat, Nl, s.QL,
                              o);
            dqc = dlat2;
        }
        MTC_CHECK(tp_column_linear_backward(&loc, din2, g->qd, NULL, dqc, NULL, 0, in, w->qd, lin,
                                            0, B, Tl, d->C, s.QL));
    } else {
        MTC_CHECK(tp_column_linear_backward(tp, din2, g->q, NULL, dq, gat, 0, in, w->q, lin, 0, B,
                                            T, d->C, p * s.NH * s.Dq));
    }
    nn_residual_forward(din, din, din2, Nl * (size_t)d->C);
    return MTC_OK;
}
