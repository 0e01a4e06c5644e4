/* model/mtp.c - the multi-token prediction depths of model/mtp.h on the
 * chunk with the loss:
 *
 *   forward, depth d = 0..D-1 (k = d + 1), h = h_0 = the slot's lnf:
 *     tokens, labels shifted by k (0 past the end, labels masked there;
 *       CP: from the whole rows, comm: all-gather(cp) of the ints)
 *     e   = embedding(tokens_k) + dropout         comm: all-reduce(tp) | SP reduce-scatter
 *     cat = [enorm(e) | hnorm(h)]                 (B, T_loc, 2C)
 *     x   = eh_proj(cat), gathered                comm: SP all-gather, all-gather(tp) of columns
 *           (SP: this rank's positions of it)
 *     y   = layer L + d (x); h_k = final_norm(y)
 *     loss: the shared head on h_k, masked        comm: as the main head
 *   backward, depth D-1 first: the head's d(h_k) (made in the forward) plus
 *   the next depth's d(h_k) through its hnorm, back through the final norm,
 *   the layer, eh_proj, the two norms, into wte (the embedding's backward)
 *   and d(h_{k-1}).
 *
 * Relies on model_pass.c for the layer, the norms and dropout, tp/ for the
 * rest. Allocates nothing (model.c carves the slots and buffers). */
#include "model/mtp.h"

#include <string.h>

#include "tp/mappings.h"

mtc_result_t model_mtp_validate(const mtc_model_config *c) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    if (c->mtp_num_layers < 0 || c->mtp_num_layers > MTC_MTP_MAX_DEPTHS)
        return mtc_error(E, "mtp-num-layers=%d is outside [0, %d]", c->mtp_num_layers,
                         MTC_MTP_MAX_DEPTHS);
    if (!c->mtp_num_layers) return MTC_OK;
    if (!(c->mtp_loss_scaling_factor >= 0 && c->mtp_loss_scaling_factor < 1e6))
        return mtc_error(E, "mtp-loss-scaling-factor=%g must be >= 0 (Megatron's default: 0.1)",
                         c->mtp_loss_scaling_factor);
    if (c->position_embedding == MTC_POS_LEARNED)
        return mtc_error(E, "Multi-Token Prediction (MTP) is not supported with learned_absolute "
                            "position embedding type (use --position-embedding-type rope or none)");
    if (c->mtp_num_layers >= c->seq_length)
        return mtc_error(E,
                         "mtp-num-layers=%d leaves no labelled position in seq-length=%d (use "
                         "fewer depths than positions)",
                         c->mtp_num_layers, c->seq_length);
    return MTC_OK;
}

/* One depth's arrays in a slot. */
typedef struct {
    float *emb;       /* (B, T_loc, C) the shifted tokens' embedding after dropout */
    float *cat;       /* (B, T_loc, 2C) [enorm(emb) | hnorm(h)], eh_proj's input */
    float *est, *hst; /* 2 x (B, T_loc) enorm's and hnorm's mean | rstd */
    float *xin;       /* (B, T_loc, C) eh_proj's output, the layer's input */
    float *h;         /* (B, T_loc, C) final_norm(layer output) */
    float *fst;       /* 2 x (B, T_loc) its mean | rstd */
    float *dh;        /* (B, T_loc, C) the head's d(loss)/d(h) from the forward */
} mtp_view;

static size_t mtp_depth_floats(const mtc_model *m) {
    size_t Nl = (size_t)m->B * m->T_loc, C = (size_t)m->cfg.hidden_size;
    return Nl * (6 * C + 6);
}

size_t model_mtp_slot_floats(const mtc_model *m) {
    if (m->mtp_layers) return (size_t)m->mtp_layers * mtp_depth_floats(m);
    /* the loss's chunk after a standalone MTP stage: each depth's d(h_k) */
    if (m->mtp_losses) return (size_t)m->mtp_losses * m->B * m->T_loc * m->cfg.hidden_size;
    return 1;
}

static mtp_view mtp_at(const mtc_model *m, const mtc_model_slot *a, int d) {
    size_t Nl = (size_t)m->B * m->T_loc, C = (size_t)m->cfg.hidden_size;
    float *p = a->mtp + (size_t)d * mtp_depth_floats(m);
    mtp_view v;
    v.emb = p, p += Nl * C;
    v.cat = p, p += 2 * Nl * C;
    v.est = p, p += 2 * Nl;
    v.hst = p, p += 2 * Nl;
    v.xin = p, p += Nl * C;
    v.h = p, p += Nl * C;
    v.fst = p, p += 2 * Nl;
    v.dh = p;
    return v;
}

/* --cp: every CP rank's (B, T_cp) tokens and labels gathered, then laid out
 * as whole (B, Tg) rows by their global positions (cp->all_pos), the rows
 * Megatron's CP roll_tensor exchanges boundaries of.
 * comm: all-gather(cp) of the tokens and of the labels */
static mtc_result_t mtp_cp_rows(mtc_model *m, const int *tokens, const int *targets, int B, int T) {
    const cp_ctx *cp = &m->cp;
    size_t n = (size_t)B * T, Tg = (size_t)cp->Tg;
    int *gt = m->mtp_cp_rows, *gl = gt + n * cp->cp, *ft = gl + n * cp->cp, *fl = ft + B * Tg;
    MTC_CHECK(mtc_all_gather(tokens, gt, n, MTC_DTYPE_I32, cp->comm));
    MTC_CHECK(mtc_all_gather(targets, gl, n, MTC_DTYPE_I32, cp->comm));
    for (int r = 0; r < cp->cp; r++)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                size_t src = (size_t)r * n + (size_t)b * T + t;
                size_t dst = (size_t)b * Tg + (size_t)cp->all_pos[(size_t)r * T + t];
                ft[dst] = gt[src], fl[dst] = gl[src];
            }
    return MTC_OK;
}

/* Megatron's roll_tensor(shifts=-1) applied k times to the tokens, the
 * labels and the loss mask: position t takes t + k, the last k positions of
 * each row get token 0 and no label. Under CP (mtp_cp_rows done) the rank's
 * rows take theirs from the whole rows at global position + k. */
static void mtp_shift(mtc_model *m, const int *tokens, const int *targets, int B, int T, int k) {
    if (m->cp.cp > 1) {
        size_t Tg = (size_t)m->cp.Tg, n2 = 2 * (size_t)B * T * m->cp.cp;
        const int *ft = m->mtp_cp_rows + n2, *fl = ft + B * Tg;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                size_t i = (size_t)b * T + t, p = (size_t)m->cp.pos[t] + k;
                int in = p < Tg;
                m->mtp_tok[i] = in ? ft[b * Tg + p] : 0;
                m->mtp_tgt[i] = in ? fl[b * Tg + p] : 0;
                m->mtp_mask[i] = in ? 1.0f : 0.0f;
            }
        return;
    }
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)b * T + t;
            int in = t + k < T;
            m->mtp_tok[i] = in ? tokens[i + k] : 0;
            m->mtp_tgt[i] = in ? targets[i + k] : 0;
            m->mtp_mask[i] = in ? 1.0f : 0.0f;
        }
}

/* d(objective)/d(token loss) at depth k: the main scale (1 / (global
 * batch x seq)) re-normalised to the B (T - k) labelled tokens per
 * microbatch, times factor / D (T: the whole sequence, Tg under CP). */
static float mtp_scale(const mtc_model *m, float loss_scale, int T, int k) {
    const mtc_model_config *c = &m->cfg;
    if (m->cp.cp > 1) T = m->cp.Tg;
    return loss_scale * ((float)T / (float)(T - k)) * c->mtp_loss_scaling_factor /
           (float)c->mtp_num_layers;
}

/* [a | b] row by row into cat (N, 2C), or back out. */
static void mtp_join(float *cat, const float *a, const float *b, size_t N, size_t C) {
    for (size_t n = 0; n < N; n++) {
        memcpy(cat + n * 2 * C, a + n * C, C * sizeof(float));
        memcpy(cat + n * 2 * C + C, b + n * C, C * sizeof(float));
    }
}
static void mtp_split(float *a, float *b, const float *cat, size_t N, size_t C) {
    for (size_t n = 0; n < N; n++) {
        memcpy(a + n * C, cat + n * 2 * C, C * sizeof(float));
        memcpy(b + n * C, cat + n * 2 * C + C, C * sizeof(float));
    }
}

/* The shared head on depth d's h with the shifted labels (mtp_shift done):
 * losses into the slot, with scale > 0 d(h) into dh and the head weight
 * gradient accumulated. comm: as the main head. */
static mtc_result_t mtp_head(mtc_model *m, mtc_model_slot *a, const mtp_view *v, float scale, int B,
                             int T) {
    const mtc_model_config *c = &m->cfg;
    return tp_vocab_head_xent_masked(
        &m->tp, a->losses, scale > 0 ? v->dh : NULL, scale > 0 ? m->dhead_w : NULL, m->head_logits,
        m->in_total, v->h, m->head_w, m->mtp_tgt, m->mtp_mask, scale, m->scratch, m->head_chunk, B,
        T, c->hidden_size, c->padded_vocab_size, c->padded_vocab_size);
}

mtc_result_t model_mtp_forward(mtc_model *m, int slot, const int *tokens, const int *targets, int B,
                               int T, const mtc_model_pass *pass) {
    const mtc_model_config *c = &m->cfg;
    const tp_ctx *tp = &m->tp;
    int C = c->hidden_size, sp = tp->sequence_parallel, Tl = sp ? T / m->tp_size : T;
    int Nl = B * Tl, N = B * T, ndec = m->last_layer - m->first_layer;
    mtc_model_slot *a = &m->slots[slot];
    float scale = pass && pass->loss_scale > 0 ? pass->loss_scale : 0.0f;
    const float *h = a->lnf; /* h_0: the main model's final-norm output */
    if (m->cp.cp > 1 && targets) MTC_CHECK(mtp_cp_rows(m, tokens, targets, B, T));
    for (int d = 0; d < m->mtp_layers; d++) {
        int l = c->num_layers + d;
        mtp_view v = mtp_at(m, a, d);
        float *const *w = m->layers[l].w;
        /* Megatron-FSDP keeps the units of the last two calls: the shared
         * embedding, then the depth with everything after it (the later
         * depths, the final norm and the shared head it uses) */
        MTC_CHECK(model_params_needed(m, pass, m->pidx[MTC_ROLE_WTE], m->pidx[MTC_ROLE_WTE] + 1));
        MTC_CHECK(model_params_needed(m, pass, m->layers[l].first, m->reg.count));
        mtp_shift(m, tokens, targets, B, T, d + 1);
        /* comm: all-reduce(tp), SP reduce-scatter */
        MTC_CHECK(tp_vocab_embedding_forward(tp, v.emb, m->mtp_tok, m->g[MTC_ROLE_WTE], NULL, NULL,
                                             m->scratch, B, T, C, c->padded_vocab_size));
        nn_dropout_spec dr = model_dropout(m, pass, l, MODEL_SITE_EMBED, c->hidden_dropout, T);
        if (dr.p > 0) nn_dropout_forward(v.emb, v.emb, B, Tl, C, &dr);
        model_lowp_round(m, v.emb, (size_t)Nl * C);
        /* Megatron's torch.cat((enorm(decoder_input), hnorm(hidden_states)), -1) */
        model_norm_forward(m, m->fwd_tmp, v.est, v.est + Nl, v.emb, w[MTC_ROLE_MTP_ENORM_W],
                           w[MTC_ROLE_MTP_ENORM_B], Nl);
        model_norm_forward(m, m->ln_tmp, v.hst, v.hst + Nl, h, w[MTC_ROLE_MTP_HNORM_W],
                           w[MTC_ROLE_MTP_HNORM_B], Nl);
        mtp_join(v.cat, m->fwd_tmp, m->ln_tmp, (size_t)Nl, (size_t)C);
        /* comm: SP all-gather(tp) of cat, all-gather(tp) of the output columns */
        float *full = sp ? m->mtp_full : v.xin;
        MTC_CHECK(tp_column_linear_forward(tp, full, m->mtp_cat_total, v.cat,
                                           w[MTC_ROLE_MTP_EH_PROJ], NULL, m->scratch, 1, B, T,
                                           2 * C, C));
        if (sp) MTC_CHECK(tp_scatter_to_seq_forward(v.xin, full, B, T, C, tp->comm));
        model_lowp_round(m, v.xin, (size_t)Nl * C);
        MTC_CHECK(model_layer_forward(m, pass, a, ndec + d, l, v.xin, B, T));
        model_norm_forward(m, v.h, v.fst, v.fst + Nl, model_layer_output(m, a, ndec + d),
                           w[MTC_ROLE_MTP_NORM_W], w[MTC_ROLE_MTP_NORM_B], Nl);
        h = v.h;
        if (m->mtp_standalone) continue; /* the heads run on the loss's stage */
        if (!targets) break;
        MTC_CHECK(mtp_head(m, a, &v, scale > 0 ? mtp_scale(m, scale, T, d + 1) : 0.0f, B, T));
        double sum = 0;
        for (int i = 0; i < N; i++)
            sum += m->mtp_mask[i] > 0 ? a->losses[i] : 0.0;
        m->mtp_loss_sum[d] += sum;
    }
    a->mtp_ready = scale > 0;
    if (m->mtp_standalone) { /* the message on: [h_0 | h_1 .. h_D] */
        size_t nC = (size_t)Nl * C, st = (size_t)m->B * m->T_loc * C; /* a state's room */
        memcpy(m->mtp_send, a->lnf, nC * sizeof(float));
        for (int d = 0; d < m->mtp_layers; d++)
            memcpy(m->mtp_send + (size_t)(d + 1) * st, mtp_at(m, a, d).h, nC * sizeof(float));
    }
    return MTC_OK;
}

/* The loss's chunk after a standalone MTP stage: depth d's state is
 * message state d + 1, its d(h) kept in the slot until the backward. */
static mtp_view mtp_heads_at(const mtc_model *m, const mtc_model_slot *a, int d) {
    size_t nC = (size_t)m->B * m->T_loc * m->cfg.hidden_size;
    mtp_view v;
    memset(&v, 0, sizeof v);
    v.h = a->encoded + (size_t)(d + 1) * nC;
    v.dh = a->mtp + (size_t)d * nC;
    return v;
}

/* Each depth's shifted labels and head, in the order the chunk with the
 * depths runs them (so the head weight gradient sums the same way). */
static mtc_result_t mtp_heads_run(mtc_model *m, int slot, const int *tokens, const int *targets,
                                  int B, int T, float scale, int record) {
    mtc_model_slot *a = &m->slots[slot];
    int N = B * T;
    if (m->cp.cp > 1) MTC_CHECK(mtp_cp_rows(m, tokens, targets, B, T));
    for (int d = 0; d < m->mtp_losses; d++) {
        mtp_view v = mtp_heads_at(m, a, d);
        mtp_shift(m, tokens, targets, B, T, d + 1);
        MTC_CHECK(mtp_head(m, a, &v, scale > 0 ? mtp_scale(m, scale, T, d + 1) : 0.0f, B, T));
        if (!record) continue;
        double sum = 0;
        for (int i = 0; i < N; i++)
            sum += m->mtp_mask[i] > 0 ? a->losses[i] : 0.0;
        m->mtp_loss_sum[d] += sum;
    }
    return MTC_OK;
}

mtc_result_t model_mtp_heads_forward(mtc_model *m, int slot, const int *tokens, const int *targets,
                                     int B, int T, const mtc_model_pass *pass) {
    float scale = pass && pass->loss_scale > 0 ? pass->loss_scale : 0.0f;
    if (!targets) return MTC_OK;
    MTC_CHECK(mtp_heads_run(m, slot, tokens, targets, B, T, scale, 1));
    m->slots[slot].mtp_ready = scale > 0;
    return MTC_OK;
}

mtc_result_t model_mtp_heads_backward(mtc_model *m, int slot, const int *tokens, const int *targets,
                                      int B, int T, float loss_scale) {
    mtc_model_slot *a = &m->slots[slot];
    size_t nC = (size_t)m->B * m->T_loc * m->cfg.hidden_size;
    if (!a->mtp_ready) MTC_CHECK(mtp_heads_run(m, slot, tokens, targets, B, T, loss_scale, 0));
    a->mtp_ready = 0;
    for (int d = 0; d < m->mtp_losses; d++) /* d(h_k) into the input gradient's state k */
        memcpy(m->dres + (size_t)(d + 1) * nC, mtp_heads_at(m, a, d).dh, nC * sizeof(float));
    return MTC_OK;
}

mtc_result_t model_mtp_backward(mtc_model *m, int slot, const int *tokens, const int *targets,
                                int B, int T, float loss_scale, const mtc_model_pass *pass) {
    const mtc_model_config *c = &m->cfg;
    const tp_ctx *tp = &m->tp;
    int C = c->hidden_size, sp = tp->sequence_parallel, Tl = sp ? T / m->tp_size : T;
    int Nl = B * Tl, ndec = m->last_layer - m->first_layer;
    size_t nC = (size_t)Nl * C;
    mtc_model_slot *a = &m->slots[slot];
    if (m->cp.cp > 1) MTC_CHECK(mtp_cp_rows(m, tokens, targets, B, T));
    if (m->mtp_standalone) { /* the received [d(h_0) | d(h_1) .. d(h_D)] */
        size_t st = (size_t)m->B * m->T_loc * C;
        memcpy(a->dlnf, m->dres, nC * sizeof(float));
        for (int d = 0; d < m->mtp_layers; d++)
            memcpy(mtp_at(m, a, d).dh, m->dres + (size_t)(d + 1) * st, nC * sizeof(float));
        a->mtp_ready = 1;
    }
    /* after a forward without the loss scale, the heads again with their
     * gradients, in the forward's order (the head weight gradient sums the
     * same way as the training forward's) */
    for (int d = 0; !a->mtp_ready && d < m->mtp_layers; d++) {
        mtp_view v = mtp_at(m, a, d);
        mtp_shift(m, tokens, targets, B, T, d + 1);
        MTC_CHECK(mtp_head(m, a, &v, mtp_scale(m, loss_scale, T, d + 1), B, T));
    }
    for (int d = m->mtp_layers - 1; d >= 0; d--) {
        int l = c->num_layers + d, k = ndec + d;
        mtp_view v = mtp_at(m, a, d);
        float *const *w = m->layers[l].w;
        float *const *g = m->dlayers[l].w;
        /* Megatron-FSDP gathers the depth's unit again for its backward */
        if (pass && pass->params_needed)
            MTC_CHECK(pass->params_needed(pass->params_needed_ctx, m->layers[l].first,
                                          m->layers[l].last));
        mtp_shift(m, tokens, targets, B, T, d + 1);
        const float *dh = v.dh;
        if (d < m->mtp_layers - 1) /* plus the next depth's, through its hnorm */
            nn_residual_forward(m->dtmp, v.dh, m->mtp_carry, nC), dh = m->dtmp;
        model_norm_backward(m, m->dres, g[MTC_ROLE_MTP_NORM_W], g[MTC_ROLE_MTP_NORM_B], dh,
                            model_layer_output(m, a, k), w[MTC_ROLE_MTP_NORM_W], v.fst, v.fst + Nl,
                            Nl);
        MTC_CHECK(model_layer_backward(m, pass, a, k, l, v.xin, B, T, loss_scale, 0));
        /* eh_proj: m->dres = d(x). comm: SP all-gather(tp) (the scatter's
         * backward); the column-parallel backward's all-reduce | SP
         * reduce-scatter */
        const float *dx = m->dres;
        if (sp) {
            MTC_CHECK(
                tp_scatter_to_seq_backward(m->mtp_full, m->dres, m->scratch, B, T, C, tp->comm));
            dx = m->mtp_full;
        }
        MTC_CHECK(tp_column_linear_backward(tp, m->mtp_dcat, g[MTC_ROLE_MTP_EH_PROJ], NULL, dx,
                                            m->mtp_cat_total, 0, v.cat, w[MTC_ROLE_MTP_EH_PROJ],
                                            m->scratch, 1, B, T, 2 * C, C));
        mtp_split(m->dtmp, m->dtmp2, m->mtp_dcat, (size_t)Nl, (size_t)C);
        /* the embedding half: enorm, dropout, then wte (comm: SP all-gather(tp)) */
        model_norm_backward(m, m->fwd_tmp, g[MTC_ROLE_MTP_ENORM_W], g[MTC_ROLE_MTP_ENORM_B],
                            m->dtmp, v.emb, w[MTC_ROLE_MTP_ENORM_W], v.est, v.est + Nl, Nl);
        const float *de = m->fwd_tmp;
        nn_dropout_spec dr = model_dropout(m, pass, l, MODEL_SITE_EMBED, c->hidden_dropout, T);
        if (dr.p > 0) nn_dropout_backward(m->dtmp, m->fwd_tmp, B, Tl, C, &dr), de = m->dtmp;
        MTC_CHECK(tp_vocab_embedding_backward(tp, m->dg[MTC_ROLE_WTE], NULL, de, m->mtp_tok, NULL,
                                              m->scratch, B, T, C, c->padded_vocab_size));
        /* the hidden-state half: hnorm into d(h_{k-1}), the previous depth's carry */
        const float *hin = d ? mtp_at(m, a, d - 1).h : a->lnf;
        model_norm_backward(m, m->mtp_carry, g[MTC_ROLE_MTP_HNORM_W], g[MTC_ROLE_MTP_HNORM_B],
                            m->dtmp2, hin, w[MTC_ROLE_MTP_HNORM_W], v.hst, v.hst + Nl, Nl);
        if (pass && pass->grads_ready)
            MTC_CHECK(
                pass->grads_ready(pass->grads_ready_ctx, m->layers[l].first, m->layers[l].last));
    }
    a->mtp_ready = 0;
    nn_residual_forward(a->dlnf, a->dlnf, m->mtp_carry, nC); /* into d(h_0) */
    return MTC_OK;
}
