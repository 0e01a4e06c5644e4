/* model/model.c - a model chunk: its registry (model/family.c), flat
 * buffers laid out once (the caller's layout hook), views by role,
 * activation slots, initial values and the gather of TP shards back to
 * global shapes; see model.h. The forward / backward pass is in
 * model_pass.c. Relies on nn/, tp/ (scratch sizes) and core/mem.h; never
 * allocates after mtc_model_init. */
#include "model/model.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/log.h"
#include "model/family.h"
#include "model/model_internal.h"
#include "model/mtp.h"
#include "nn/lowp.h"
#include "tp/fp8_linear.h"
#include "tp/mappings.h"

int mtc_model_pad_vocab(int vocab_size, int divisible_by, int tp) {
    /* 64-bit: a huge --make-vocab-size-divisible-by times tp must not
       overflow; a result past INT_MAX saturates and validation names it */
    int64_t multiple = (int64_t)(divisible_by > 0 ? divisible_by : 1) * (tp > 0 ? tp : 1);
    int64_t padded = ((int64_t)vocab_size + multiple - 1) / multiple * multiple;
    return padded > INT_MAX ? INT_MAX : (int)padded;
}

mtc_result_t mtc_model_config_validate(const mtc_model_config *c) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    if (c->num_layers < 1) return mtc_error(E, "num-layers=%d must be >= 1", c->num_layers);
    MTC_CHECK(model_mla_validate(&c->mla));
    if (c->hidden_size < 1) return mtc_error(E, "hidden-size=%d must be >= 1", c->hidden_size);
    if (c->num_heads < 1) return mtc_error(E, "num-attention-heads=%d must be >= 1", c->num_heads);
        /* ranges first, so no product below can overflow (sizes as 64-bit) */
#define RANGE(v, lo, hi, name)                                                                     \
    if ((v) < (lo) || (v) > (hi))                                                                  \
        return mtc_error(E, name "=%d is outside [%d, %d]", (v), (lo), (hi));
    RANGE(c->num_layers, 1, 1 << 14, "num-layers");
    RANGE(c->hidden_size, 1, 1 << 18, "hidden-size");
    RANGE(c->num_heads, 1, 1 << 14, "num-attention-heads");
    RANGE(c->ffn_hidden_size, 1, 1 << 22, "ffn-hidden-size");
    RANGE(c->vocab_size, 1, 1 << 27, "vocab-size");
    RANGE(c->max_position_embeddings, 1, 1 << 24, "max-position-embeddings");
    RANGE(c->kv_channels, 0, 1 << 14, "kv-channels");
#undef RANGE
    {
        double per_layer = (double)c->hidden_size * c->hidden_size * 4.0 +
                           3.0 * c->hidden_size * (double)c->ffn_hidden_size;
        double total = per_layer * c->num_layers + 2.0 * c->padded_vocab_size * c->hidden_size;
        if (total > 1e14)
            return mtc_error(E,
                             "the model would have about %.3g parameters (above 1e14): lower "
                             "num-layers, hidden-size or ffn-hidden-size",
                             total);
    }
    if (!c->kv_channels && c->hidden_size % c->num_heads) {
        char valid[256] = "";
        size_t n = 0;
        for (int h = 1; h <= c->hidden_size && n + 12 < sizeof valid; h++)
            if (c->hidden_size % h == 0)
                n += (size_t)snprintf(valid + n, sizeof valid - n, " %d", h);
        return mtc_error(
            E, "hidden-size=%d is not divisible by num-attention-heads=%d (valid head counts:%s)",
            c->hidden_size, c->num_heads, valid);
    }
    int NG = mtc_model_groups(c);
    if (c->num_query_groups < 0 || NG > c->num_heads || c->num_heads % NG)
        return mtc_error(E,
                         "num-attention-heads=%d is not divisible by num-query-groups=%d (each "
                         "key/value group serves the same number of query heads)",
                         c->num_heads, c->num_query_groups);
    if (c->kv_channels < 0) return mtc_error(E, "kv-channels=%d must be >= 1", c->kv_channels);
    if (c->position_embedding == MTC_POS_ROPE) {
        float pct = c->rotary_percent > 0 ? c->rotary_percent : 1.0f;
        if (!(pct > 0 && pct <= 1)) /* before the product: inf or NaN is no int */
            return mtc_error(E, "rotary-percent=%g must be in (0, 1]", pct);
        int rot = (int)(mtc_model_head_size(c) * pct);
        if (rot < 2 || rot % 2)
            return mtc_error(E,
                             "rotary-percent=%g of head size %d gives %d rotary channels (need an "
                             "even number >= 2; adjust --rotary-percent or --kv-channels)",
                             pct, mtc_model_head_size(c), rot);
        if (c->rotary_base < 0 || (c->rotary_base > 0 && c->rotary_base <= 1))
            return mtc_error(E, "rotary-base=%g must be > 1", c->rotary_base);
    }
    if (c->norm_epsilon < 0 || !(c->norm_epsilon < 1))
        return mtc_error(E, "norm-epsilon=%g must be in (0, 1)", c->norm_epsilon);
    if (c->ffn_hidden_size < 1)
        return mtc_error(E, "ffn-hidden-size=%d must be >= 1", c->ffn_hidden_size);
    if (c->seq_length < 1) return mtc_error(E, "seq-length=%d must be >= 1", c->seq_length);
    if (c->max_position_embeddings < c->seq_length)
        return mtc_error(E,
                         "seq-length=%d is longer than max-position-embeddings=%d (raise "
                         "--max-position-embeddings or lower --seq-length)",
                         c->seq_length, c->max_position_embeddings);
    if (c->vocab_size < 1) return mtc_error(E, "vocab-size=%d must be >= 1", c->vocab_size);
    if (c->padded_vocab_size < c->vocab_size)
        return mtc_error(E, "padded vocabulary %d is smaller than vocab-size=%d",
                         c->padded_vocab_size, c->vocab_size);
    if (c->padded_vocab_size > (1 << 28))
        return mtc_error(E,
                         "padded vocabulary %d (vocab-size=%d rounded up to a multiple of "
                         "make-vocab-size-divisible-by x tensor-model-parallel-size) is above "
                         "2^28: lower --make-vocab-size-divisible-by",
                         c->padded_vocab_size, c->vocab_size);
    if (!(c->hidden_dropout >= 0 && c->hidden_dropout < 1))
        return mtc_error(E, "hidden-dropout=%g must be in [0, 1)", c->hidden_dropout);
    if (!(c->attention_dropout >= 0 && c->attention_dropout < 1))
        return mtc_error(E, "attention-dropout=%g must be in [0, 1)", c->attention_dropout);
    if (c->seq_length > (1 << 24))
        return mtc_error(E, "seq-length=%d is above the supported %d", c->seq_length, 1 << 24);
    MTC_CHECK(model_mtp_validate(c));
    if (c->moe.num_experts > 0) /* the layout-free MoE rules (train/ checks the layout's) */
        MTC_CHECK(mtc_moe_validate(&c->moe, c->num_layers, c->ffn_hidden_size, 1, 0, 1, 1,
                                   !c->disable_bias_linear));
    return MTC_OK;
}

double mtc_model_flops(const mtc_model_config *c, int64_t global_batch) {
    /* Megatron's num_floating_point_operations (training.py) without MoE or
     * recomputation: 3 (fwd + 2 bwd) x 2 FLOPs per multiply-add over the QKV,
     * attention scores and values, projection, MLP and LM head GEMMs; it
     * reduces to 72 B s L h^2 (1 + s/(12h) + V/(12hL)) for GPT-2 shapes. */
    double B = (double)global_batch, s = c->seq_length, L = c->num_layers, h = c->hidden_size,
           V = c->padded_vocab_size;
    double qd = (double)c->num_heads * mtc_model_head_size(c);
    double kd = (double)mtc_model_groups(c) * mtc_model_head_size(c);
    double ffn = (double)c->ffn_hidden_size * (c->swiglu ? 3.0 : 2.0);
    double per_token_layer = h * (qd + 2 * kd) + qd * s + qd * h + h * ffn;
    if (c->mla.enabled) /* training.py's MLA terms */
        per_token_layer =
            model_mla_token_macs(&c->mla, c->hidden_size, c->num_heads, (int)s) + h * ffn;
    double total = L * per_token_layer;
    if (c->moe.num_experts > 0) {
        /* an MoE layer: k routed experts and the shared expert; core_v0.18.0's
         * count has no router term (training.py: routed experts + shared
         * experts in the MLP sum) */
        double act = c->swiglu ? 3.0 : 2.0, nm = mtc_moe_num_layers(&c->moe, c->num_layers);
        double moe_mlp =
            h * act *
            ((double)mtc_moe_topk(&c->moe) * mtc_model_moe_ffn(c) + (double)c->moe.shared_ffn);
        total += nm * (moe_mlp - h * ffn);
    }
    return 6.0 * B * s * (total + h * V);
}

/* The chunk's registry (model/family.c), with global offsets taken from
 * the serial layout of the whole model (so gathers and checkpoints address
 * global shapes). */
static mtc_result_t gpt_register_chunk(mtc_model *m, int *layer_first) {
    const mtc_model_config *c = &m->cfg;
    model_register_opts o = {m->first_layer,          m->last_layer, m->has_embedding, m->has_head,
                             m->tp.sequence_parallel, m->mtp_layers, m->mtp_standalone};
    model_rank_split rs = {.tp = m->tp_size,
                           .tp_rank = m->tp_rank,
                           .etp = m->moe.etp ? mtc_comm_size(m->moe.etp) : 1,
                           .ep = m->moe.ep ? mtc_comm_size(m->moe.ep) : 1,
                           .ep_rank = m->moe.ep ? mtc_comm_rank(m->moe.ep) : 0};
    MTC_CHECK(model_family_register_rank(&m->reg, c, &o, &rs, m->pidx, layer_first));
    mtc_registry full;
    int fpidx[MTC_NGLOBAL_ROLES];
    int *ffirst = NULL;
    MTC_CHECK(mtc_mem_calloc((size_t)c->num_layers + 1, sizeof(int), (void **)&ffirst));
    model_register_opts fo = {0, c->num_layers, 1, 1, 0, c->mtp_num_layers, 0};
    mtc_result_t rc =
        mtc_registry_init(&full, model_family_capacity(c, c->num_layers, c->mtp_num_layers));
    if (rc == MTC_OK) rc = model_family_register(&full, c, &fo, fpidx, ffirst);
    for (int i = 0; rc == MTC_OK && i < m->reg.count; i++) {
        int k = mtc_registry_find(&full, m->reg.params[i].name);
        MTC_ASSERT(k >= 0);
        m->reg.params[i].global_offset = full.params[k].global_offset;
    }
    m->reg.global_total = full.global_total;
    mtc_registry_free(&full);
    free(ffirst);
    return rc;
}

mtc_result_t mtc_model_param_counts(const mtc_model_config *c, double *total, double *active) {
    mtc_registry full;
    int fpidx[MTC_NGLOBAL_ROLES];
    int *ffirst = NULL;
    MTC_CHECK(mtc_mem_calloc((size_t)c->num_layers + 1, sizeof(int), (void **)&ffirst));
    model_register_opts fo = {0, c->num_layers, 1, 1, 0, c->mtp_num_layers, 0};
    mtc_result_t rc =
        mtc_registry_init(&full, model_family_capacity(c, c->num_layers, c->mtp_num_layers));
    if (rc == MTC_OK) rc = model_family_register(&full, c, &fo, fpidx, ffirst);
    size_t experts = 0; /* every expert's parameters (integers: the sums below are exact) */
    for (int i = 0; rc == MTC_OK && i < full.count; i++)
        if (full.params[i].expert >= 0) experts += full.params[i].numel;
    if (rc == MTC_OK) {
        double E = c->moe.num_experts, k = E > 0 ? mtc_moe_topk(&c->moe) : 0;
        *total = (double)full.global_total;
        /* a token runs k of each MoE layer's E experts */
        *active = E > 0 ? *total - (E - k) * (double)(experts / (size_t)E) : *total;
    }
    mtc_registry_free(&full);
    free(ffirst);
    return rc;
}

/* Point views of one flat buffer at the registry's offsets (NULL outside
 * the chunk or for an absent role). */
static void gpt_bind(mtc_model *m, float *base, float **g, mtc_model_layer *layers) {
    const mtc_registry *r = &m->reg;
    for (int k = 0; k < MTC_NGLOBAL_ROLES; k++)
        g[k] = m->pidx[k] >= 0 ? base + r->params[m->pidx[k]].offset : NULL;
    for (int l = m->first_layer; l < m->last_layer + m->mtp_layers; l++) {
        if (l >= m->last_layer && l < m->cfg.num_layers) continue; /* MTP: layers L.. */
        mtc_model_layer *y = &layers[l];
        for (int k = 0; k < MTC_NROLES_ALL; k++)
            y->w[k] = NULL;
        int E = m->cfg.moe.num_experts;
        for (int i = y->first; i < y->last; i++) {
            const mtc_param *p = &r->params[i];
            if (p->expert >= 0) /* an expert's: (role, expert); NULL off its EP rank */
                y->xw[(p->role - MTC_ROLE_EXP_FC1_W) * E + p->expert] =
                    mtc_param_absent(p) ? NULL : base + p->offset;
            else
                y->w[p->role] = base + p->offset;
        }
    }
}

static void gpt_bind_all(mtc_model *m) {
    gpt_bind(m, m->params_c ? m->params_c : m->params, m->g, m->layers);
    gpt_bind(m, m->grads, m->dg, m->dlayers);
    int untied = m->pidx[MTC_ROLE_HEAD] >= 0;
    m->head_w = untied ? m->g[MTC_ROLE_HEAD] : m->g[MTC_ROLE_WTE];
    m->dhead_w = untied ? m->dg[MTC_ROLE_HEAD] : m->dg[MTC_ROLE_WTE];
}

/* The layer shapes the blocks need (positions: the attention region's
 * rows are the whole sequence, 0..T-1). */
model_block_dims mtc_model_block_dims(const mtc_model *m) {
    const mtc_model_config *c = &m->cfg;
    model_block_dims d = {.C = c->hidden_size,
                          .NH = c->num_heads,
                          .NG = mtc_model_groups(c),
                          .HS = mtc_model_head_size(c),
                          .F = c->ffn_hidden_size,
                          .swiglu = c->swiglu,
                          .rope = c->position_embedding == MTC_POS_ROPE ? &m->rope : NULL,
                          .pos = m->cp.cp > 1 ? m->cp.pos : NULL,
                          .cp = m->cp.cp > 1 ? &m->cp : NULL};
    return d;
}

model_block_dims mtc_model_layer_dims(const mtc_model *m, int l) {
    model_block_dims d = mtc_model_block_dims(m);
    if (m->cp_layer && l >= m->first_layer && l < m->last_layer)
        d.cp = &m->cp_layer[l - m->first_layer];
    d.fp8 = tp_fp8_layer(m->fp8, l);
    return d;
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

moe_dims mtc_model_moe_dims(const mtc_model *m) {
    const mtc_model_config *c = &m->cfg;
    moe_dims d = {.C = c->hidden_size,
                  .E = c->moe.num_experts,
                  .k = mtc_moe_topk(&c->moe),
                  .F = mtc_model_moe_ffn(c),
                  .swiglu = c->swiglu,
                  .bias = !c->disable_bias_linear,
                  .ep = m->moe.ep ? mtc_comm_size(m->moe.ep) : 1,
                  .etp = m->moe.etp ? mtc_comm_size(m->moe.etp) : 1};
    d.F /= d.etp; /* this ETP rank's columns of fc1, rows of fc2 */
    return d;
}

model_block_dims mtc_model_shared_dims(const mtc_model *m) {
    model_block_dims d = mtc_model_block_dims(m);
    d.F = m->cfg.moe.shared_ffn;
    return d;
}

size_t mtc_model_moe_floats(const mtc_model *m) {
    if (m->cfg.moe.num_experts <= 0) return 0;
    moe_dims d = mtc_model_moe_dims(m);
    return moe_acts_floats(&m->cfg.moe, &d, m->B * m->T_loc);
}

/* Rows of the fused head's chunk buffer: the chunk, or every token when
 * the microbatch has fewer. */
static size_t gpt_head_rows(const mtc_model *m) {
    size_t N = (size_t)m->B * m->T;
    return (size_t)m->head_chunk < N ? (size_t)m->head_chunk : N;
}

/* Floats of TP-layer scratch one pass needs (largest of every call). */
static size_t gpt_scratch_floats(const mtc_model *m) {
    const mtc_model_config *c = &m->cfg;
    int B = m->B, T = m->T, C = c->hidden_size;
    model_block_dims d = mtc_model_block_dims(m);
    model_qk_norm qn = {0}; /* --qk-layernorm: only its presence sizes the scratch */
    if (c->qk_layernorm) d.qk_norm = &qn;
    size_t s = model_attention_scratch_floats(&m->tp, B, T, &d);
    for (int l = m->first_layer; m->cp_layer && l < m->last_layer; l++) {
        model_block_dims dl = mtc_model_layer_dims(m, l);
        dl.qk_norm = d.qk_norm;
        s = max_sz(s, model_attention_scratch_floats(&m->tp, B, T, &dl));
    }
    s = max_sz(s, model_mlp_scratch_floats(&m->tp, B, T, &d));
    s = max_sz(s, mtc_model_mla_scratch(m));
    s = max_sz(s, tp_vocab_embedding_scratch_floats(&m->tp, B, T, C));
    /* the head: a generation forward's column-parallel linear, and the fused chunked loss */
    s = max_sz(s, tp_column_linear_scratch_floats(&m->tp, 0, B, T, C, c->padded_vocab_size));
    s = max_sz(s, tp_vocab_head_xent_scratch_floats(&m->tp, m->head_chunk, B, T, C));
    if (c->moe.num_experts > 0) {
        moe_dims md = mtc_model_moe_dims(m);
        s = max_sz(s, moe_scratch_floats(&c->moe, &md, B * m->T_loc));
        model_block_dims sd = mtc_model_shared_dims(m);
        if (sd.F > 0) s = max_sz(s, model_mlp_scratch_floats(&m->tp, B, T, &sd));
    }
    if (m->mtp_layers) /* the MTP projection, its output gathered (model/mtp.c) */
        s = max_sz(s, max_sz(tp_column_linear_scratch_floats(&m->tp, 1, B, T, 2 * C, C),
                             tp_seq_scratch_floats(B, T, C, m->tp_size)));
    return s;
}

/* Carve (or, with a NULL arena base, just count) the activation arena. */
static size_t gpt_carve(mtc_model *m, char *base) {
    const mtc_model_config *c = &m->cfg;
    size_t tp = (size_t)m->tp_size;
    size_t B = (size_t)m->B, T = (size_t)m->T, C = (size_t)c->hidden_size,
           F_tp = (size_t)c->ffn_hidden_size / tp, F1_tp = (c->swiglu ? 2 : 1) * F_tp,
           NH_tp = (size_t)c->num_heads / tp, HS = (size_t)mtc_model_head_size(c),
           QD_tp = NH_tp * HS, QKV_tp = QD_tp + 2 * ((size_t)mtc_model_groups(c) / tp) * HS,
           V_tp = (size_t)c->padded_vocab_size / tp,
           nl = (size_t)(m->last_layer - m->first_layer + m->mtp_layers); /* with MTP's layers */
    size_t N = B * T, Nl = B * (size_t)m->T_loc, off = 0;
    if (c->mla.enabled) QKV_tp = QD_tp = 0; /* MLA keeps its own (slot->mla) */
#define TAKE(ptr, count)                                                                           \
    do {                                                                                           \
        float *p_ = base ? (float *)(base + off) : NULL;                                           \
        (ptr) = p_;                                                                                \
        off += ((size_t)(count) * sizeof(float) + 63) & ~(size_t)63;                               \
    } while (0)
    size_t nr = (size_t)m->nrec, ns = nl - nr; /* recomputed and stored layers */
    for (int s = -1; s < m->nslots; s++) {
        /* s = -1: the recomputed layers' one shared set (when there are any) */
        mtc_model_slot *a = s < 0 ? m->rc : &m->slots[s];
        size_t k = s < 0 ? (nr ? 1 : 0) : ns;
        if (s < 0 && !a) continue;
        if (s >= 0) TAKE(a->encoded, (size_t)m->states_in * Nl * C);
        TAKE(a->ln1_mean, k * Nl);
        TAKE(a->ln1_rstd, k * Nl);
        TAKE(a->qkv, k * N * QKV_tp);
        TAKE(a->lse, c->mla.enabled ? 0 : k * B * NH_tp * T);
        TAKE(a->mla, k * mtc_model_mla_floats(m));
        TAKE(a->atty, k * N * QD_tp);
        if (c->qk_layernorm) { /* model/block.h model_qk_norm */
            size_t KD_tp = (QKV_tp - QD_tp) / 2, NG_tp = (size_t)mtc_model_groups(c) / tp;
            TAKE(a->qk_in, k * N * (QD_tp + KD_tp));
            TAKE(a->qk_stat, k * 2 * N * (NH_tp + NG_tp));
        }
        TAKE(a->res2, k * Nl * C);
        TAKE(a->ln2_mean, k * Nl);
        TAKE(a->ln2_rstd, k * Nl);
        TAKE(a->fch, m->rec_mlp ? 0 : k * N * F1_tp); /* rec_mlp: the shared set below */
        TAKE(a->moe, m->rec_moe ? 0 : k * mtc_model_moe_floats(m)); /* rec_moe: the set below */
        size_t SF_tp = (size_t)c->moe.shared_ffn / tp, SF1_tp = (c->swiglu ? 2 : 1) * SF_tp;
        TAKE(a->sfch, m->rec_shared || m->rec_moe ? 0 : k * N * SF1_tp); /* the set below */
        if (s < 0) continue;
        TAKE(a->res3, nl * Nl * C); /* every layer's output: the next layer's input */
        TAKE(a->lnf, Nl * C);
        TAKE(a->lnf_mean, Nl);
        TAKE(a->lnf_rstd, Nl);
        TAKE(a->losses, N);
        TAKE(a->dlnf, m->has_head || m->mtp_layers ? Nl * C : 1);
        TAKE(a->mtp, model_mtp_slot_floats(m));
        if (m->full_logits && m->has_head) TAKE(a->logits, N * V_tp);
    }
    /* the fused head's one chunk of logits, shared by every slot */
    TAKE(m->head_logits, m->has_head ? gpt_head_rows(m) * V_tp : 1);
    if (m->rec_mlp) {
        TAKE(m->mlp_fch, N * F1_tp);
    }
    if (m->rec_up) { /* --recompute-modules mla_up_proj: one layer's q, k, v */
        model_mla_opts mo = mtc_model_mla_opts(m);
        TAKE(m->mla_qkv, model_mla_qkv_floats(&mo, (int)tp, m->B, m->T, c->num_heads));
    }
    if (m->rec_shared || m->rec_moe) {
        size_t SF1_tp = (c->swiglu ? 2 : 1) * ((size_t)c->moe.shared_ffn / tp);
        TAKE(m->shared_fch, N * SF1_tp);
    }
    if (m->rec_moe) TAKE(m->moe_rc, mtc_model_moe_floats(m)); /* --recompute-modules moe */
    if (c->moe.recompute_act) {                               /* --recompute-modules moe_act */
        moe_dims md = mtc_model_moe_dims(m);
        TAKE(m->moe_fchg, moe_act_floats(&c->moe, &md, (int)Nl));
    }
    TAKE(m->fwd_tmp, Nl * C);
    TAKE(m->ln_tmp, Nl * C); /* a layer norm's output: forward's, then backward's rebuilt */
    /* the gradient buffer: d(output) or d(input) of 1 + D states next to a standalone MTP stage */
    TAKE(m->dres, (size_t)(m->states_in > m->states_out ? m->states_in : m->states_out) * Nl * C);
    TAKE(m->mtp_send, m->mtp_standalone == 1 ? (size_t)m->states_out * Nl * C : 0);
    TAKE(m->dtmp, Nl * C);
    TAKE(m->dtmp2, Nl * C);
    TAKE(m->in_total, m->tp.sequence_parallel ? N * C : 1);
    if (m->mtp_layers || m->mtp_losses) { /* model/mtp.c's shared buffers */
        float *tok, *tgt;
        TAKE(tok, N);
        TAKE(tgt, N);
        m->mtp_tok = (int *)tok, m->mtp_tgt = (int *)tgt;
        TAKE(m->mtp_mask, N);
    }
    if (m->mtp_layers) {
        TAKE(m->mtp_full, N * C);
        TAKE(m->mtp_cat_total, m->tp.sequence_parallel ? 2 * N * C : 1);
        TAKE(m->mtp_dcat, 2 * Nl * C);
        TAKE(m->mtp_carry, Nl * C);
    }
    TAKE(m->scratch, gpt_scratch_floats(m));
#undef TAKE
    return off;
}

/* The TP split's own rules, one line each naming the fix. */
mtc_result_t mtc_model_validate_tp(const mtc_model_config *c, int tp, int sp) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    if (tp <= 1) return MTC_OK;
    if (c->moe.num_experts > 0 && !sp)
        return mtc_error(E,
                         "tensor-model-parallel-size=%d with --num-experts needs "
                         "--sequence-parallel (Megatron's MoE layer refuses TP without SP in "
                         "training)",
                         tp);
    if (c->num_heads % tp)
        return mtc_error(E,
                         "num-attention-heads=%d is not divisible by tensor-model-parallel-size=%d "
                         "(use a tp that divides %d)",
                         c->num_heads, tp, c->num_heads);
    if (mtc_model_groups(c) % tp)
        return mtc_error(E,
                         "num-query-groups=%d is not divisible by tensor-model-parallel-size=%d "
                         "(tensor parallelism splits the key/value groups; use a tp that divides "
                         "%d)",
                         mtc_model_groups(c), tp, mtc_model_groups(c));
    if (c->ffn_hidden_size % tp)
        return mtc_error(E, "ffn-hidden-size=%d is not divisible by tensor-model-parallel-size=%d",
                         c->ffn_hidden_size, tp);
    if (c->padded_vocab_size % tp)
        return mtc_error(E,
                         "padded vocabulary %d is not divisible by tensor-model-parallel-size=%d "
                         "(pad with make-vocab-size-divisible-by x tp)",
                         c->padded_vocab_size, tp);
    if (sp && c->seq_length % tp)
        return mtc_error(E,
                         "seq-length=%d is not divisible by tensor-model-parallel-size=%d, which "
                         "sequence parallelism needs",
                         c->seq_length, tp);
    return MTC_OK;
}

/* --bf16 / --fp16: the rounded parameter copies (lazy: mapped, not
 * faulted in, as the buffers), the oneDNN context and the conversion
 * scratch of the TP layers (the widest GEMM operand: the whole sequence
 * times the widest row the chunk multiplies). */
static mtc_result_t gpt_lowp_init(mtc_model *m, tp_precision prec, int f32_gemm, int lazy) {
    const mtc_model_config *c = &m->cfg;
    size_t tp = (size_t)m->tp_size, N = (size_t)m->B * m->T, HS = (size_t)mtc_model_head_size(c);
    size_t F1_tp = (c->swiglu ? 2 : 1) * ((size_t)c->ffn_hidden_size / tp);
    size_t QKV_tp = ((size_t)c->num_heads / tp + 2 * ((size_t)mtc_model_groups(c) / tp)) * HS;
    size_t w = max_sz((size_t)c->hidden_size, max_sz(QKV_tp, F1_tp)), V_tp = 0;
    if (c->mla.enabled) {
        model_mla_opts mo = mtc_model_mla_opts(m);
        w = max_sz(w, model_mla_widest(&mo, (int)tp, c->hidden_size, c->num_heads));
    }
    if (m->mtp_layers) w = max_sz(w, 2 * (size_t)c->hidden_size); /* MTP's projection input */
    if (m->has_head) V_tp = (size_t)c->padded_vocab_size / tp;
    /* the head's widest operand: a chunk of logits, or all of them for a
     * generation forward */
    size_t n = max_sz(N * w, (m->full_logits ? N : gpt_head_rows(m)) * V_tp);
    int dnnl = prec == TP_PREC_BF16 && !f32_gemm; /* bf16 operands: half the scratch */
    m->precision = prec;
    m->lowp.prec = prec;
    m->lowp.f32_gemm = prec == TP_PREC_BF16 && f32_gemm;
    m->lowp.cap = dnnl ? (n + 1) / 2 : n;
    m->lowp.nw = m->reg.total;
    m->lp_version = 1;
    MTC_CHECK(mtc_mem_alloc_big(m->reg.total * sizeof(float), !lazy, (void **)&m->params_c));
    MTC_CHECK(mtc_mem_calloc((size_t)m->reg.count + 1, sizeof(uint64_t), (void **)&m->lp_seen));
    MTC_CHECK(mtc_mem_alloc_big(m->lowp.cap * sizeof(float), 1, &m->lowp.xa));
    MTC_CHECK(mtc_mem_alloc_big(m->lowp.cap * sizeof(float), 1, &m->lowp.xb));
    if (dnnl) {
        MTC_CHECK(mtc_mem_alloc_big(m->reg.total * sizeof(mtc_bf16), !lazy, (void **)&m->params16));
        MTC_CHECK(nn_lowp_create(&m->lowp.lp));
    }
    if (!lazy) memset(m->params_c, 0, m->reg.total * sizeof(float)); /* (mmap's zeros) */
    m->lowp.w32 = m->params_c;
    m->lowp.w16 = m->params16;
    m->tp.lowp = &m->lowp;
    return MTC_OK;
}

/* --fp8-format: the chunk's scale state, and room for its widest weight. */
static mtc_result_t gpt_fp8_init(mtc_model *m, const mtc_model_chunk_opts *o) {
    const mtc_model_config *c = &m->cfg;
    size_t tp = (size_t)m->tp_size, C = (size_t)c->hidden_size, HS = (size_t)mtc_model_head_size(c);
    size_t F1_tp = (c->swiglu ? 2 : 1) * ((size_t)c->ffn_hidden_size / tp);
    size_t QKV_tp = ((size_t)c->num_heads / tp + 2 * ((size_t)mtc_model_groups(c) / tp)) * HS;
    size_t wmax = max_sz(QKV_tp, F1_tp) * C; /* qkv, fc1; proj and fc2 are narrower */
    if (m->precision != TP_PREC_BF16)
        return mtc_error(MTC_ERR_INVALID_USAGE, "fp8 needs the --bf16 model");
    return tp_fp8_state_init(&m->fp8, o->fp8, o->grid, c->num_layers, m->first_layer, m->last_layer,
                             wmax);
}

/* --bf16: every GEMM shape of the chunk's linear layers prepared now. */
static mtc_result_t gpt_lowp_prepare(mtc_model *m) {
    const mtc_model_config *c = &m->cfg;
    int B = m->B, T = m->T, C = c->hidden_size, HS = mtc_model_head_size(c);
    int QD = c->num_heads * HS, QKV = (c->num_heads + 2 * mtc_model_groups(c)) * HS;
    int F = c->ffn_hidden_size, F1 = (c->swiglu ? 2 : 1) * F;
    const tp_ctx *tp = &m->tp;
    if (m->last_layer > m->first_layer) {
        float *const *w = m->layers[m->first_layer].w;
        if (c->mla.enabled) {
            MTC_CHECK(mtc_model_mla_bf16_prepare(m));
        } else {
            MTC_CHECK(tp_linear_bf16_prepare(tp, 1, B, T, C, QKV, w[MTC_ROLE_QKV_B] != NULL));
            MTC_CHECK(tp_linear_bf16_prepare(tp, 0, B, T, QD, C, w[MTC_ROLE_PROJ_B] != NULL));
        }
        MTC_CHECK(tp_linear_bf16_prepare(tp, 1, B, T, C, F1, w[MTC_ROLE_FC1_B] != NULL));
        MTC_CHECK(tp_linear_bf16_prepare(tp, 0, B, T, F, C, w[MTC_ROLE_FC2_B] != NULL));
    }
    if (m->mtp_layers) MTC_CHECK(tp_linear_bf16_prepare(tp, 1, B, T, 2 * C, C, 0)); /* eh_proj */
    if (!m->has_head) return MTC_OK;
    if (m->full_logits) MTC_CHECK(tp_linear_bf16_prepare(tp, 1, B, T, C, c->padded_vocab_size, 0));
    /* the fused head's chunks (tp/head.c: local GEMMs), and the last, shorter one */
    const tp_ctx local = {NULL, tp->pool, 0, tp->lowp, NULL};
    int V_tp = c->padded_vocab_size / m->tp_size, rows = (int)gpt_head_rows(m), tail = B * T % rows;
    MTC_CHECK(tp_linear_bf16_prepare(&local, 1, 1, rows, C, V_tp, 0));
    if (tail) MTC_CHECK(tp_linear_bf16_prepare(&local, 1, 1, tail, C, V_tp, 0));
    return MTC_OK;
}

/* The compute copies of elements [a, a + n) of the flat buffers, or the
 * rounding of an activation in place, on the pool in tasks of GPT_LP_TASK
 * elements (the bits do not depend on the cut). */
#define GPT_LP_TASK ((size_t)1 << 16)
typedef struct {
    const mtc_model *m; /* the buffers' pointees are written, not the model */
    float *x;           /* model_lowp_round: the activation; NULL: the params' copies */
    size_t a, n;
} gpt_lp_job;

static void gpt_lp_task(int i, void *arg) {
    gpt_lp_job *j = arg;
    size_t lo = (size_t)i * GPT_LP_TASK, n = j->n - lo < GPT_LP_TASK ? j->n - lo : GPT_LP_TASK;
    const mtc_model *m = j->m;
    if (j->x) {
        if (m->precision == TP_PREC_BF16)
            nn_round_bf16(j->x + lo, n);
        else
            nn_round_f16(j->x + lo, n);
        return;
    }
    size_t o = j->a + lo;
    if (m->copies_gathered) return; /* FSDP's gathers wrote both */
    if (m->main_sharded) {          /* params_c was gathered: only oneDNN's bf16 copy to make */
        if (m->params16) nn_f32_to_bf16(m->params16 + o, m->params_c + o, n);
    } else if (m->params16) { /* bf16 for oneDNN, and the same values in fp32 */
        nn_f32_to_bf16_both(m->params16 + o, m->params_c + o, m->params + o, n);
    } else {
        memcpy(m->params_c + o, m->params + o, n * sizeof(float));
        if (m->precision == TP_PREC_BF16)
            nn_round_bf16(m->params_c + o, n);
        else
            nn_round_f16(m->params_c + o, n);
    }
}

static void gpt_lp_run(const mtc_model *m, float *x, size_t a, size_t n) {
    gpt_lp_job j = {m, x, a, n};
    nn_pool_run(m->pool, (int)((n + GPT_LP_TASK - 1) / GPT_LP_TASK), gpt_lp_task, &j);
}

void model_lowp_refresh(mtc_model *m, int first, int last) {
    if (m->precision == TP_PREC_F32) return;
    for (int i = first; i < last; i++) {
        if (m->lp_seen[i] == m->lp_version) continue;
        const mtc_param *p = &m->reg.params[i];
        gpt_lp_run(m, NULL, p->offset, p->local_numel);
        m->lp_seen[i] = m->lp_version;
    }
}

/* Pages [a, b) bytes of params, aligned inward, released and protected. */
static mtc_result_t gpt_release(mtc_model *m, size_t a, size_t b, size_t page) {
    size_t lo = (a + page - 1) / page * page, hi = b / page * page;
    if (hi <= lo) return MTC_OK;
    char *base = (char *)m->params;
    if (madvise(base + lo, hi - lo, MADV_DONTNEED) != 0 ||
        mprotect(base + lo, hi - lo, PROT_NONE) != 0)
        return mtc_error(MTC_ERR_SYSTEM, "releasing %zu bytes of fp32 main params: %s", hi - lo,
                         strerror(errno));
    m->main_released += hi - lo;
    return MTC_OK;
}

mtc_result_t mtc_model_shard_main_params(mtc_model *m, const int64_t (*keep)[2], int nkeep) {
    if (m->precision != TP_PREC_BF16)
        return mtc_error(MTC_ERR_INVALID_USAGE, "fp32 main params are sharded only with --bf16");
    m->lp_version++;
    model_lowp_refresh(m, 0, m->reg.count);
    m->main_sharded = 1;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), cur = 0;
    size_t end = (m->reg.total * sizeof(float) + page - 1) / page * page; /* the mapping's */
    for (int i = 0; i < nkeep; i++) {
        size_t s = (size_t)keep[i][0] * sizeof(float), e = (size_t)keep[i][1] * sizeof(float);
        if (s > cur) MTC_CHECK(gpt_release(m, cur, s, page));
        if (e > cur) cur = e;
    }
    return gpt_release(m, cur, end, page);
}

void mtc_model_copies_gathered(mtc_model *m) { m->copies_gathered = 1; }

void model_lowp_round(const mtc_model *m, float *x, size_t n) {
    if (m->precision != TP_PREC_F32) gpt_lp_run(m, x, 0, n);
}

void mtc_model_params_changed(mtc_model *m) {
    if (m->lp_written)
        m->lp_written = 0;
    else
        m->lp_version++;
}

void mtc_model_lowp_targets(const mtc_model *m, mtc_bf16 **p16, float **pc) {
    int ok = m->precision == TP_PREC_BF16 && !m->main_sharded && m->params16 && m->params_c;
    *p16 = ok ? m->params16 : NULL;
    *pc = ok ? m->params_c : NULL;
}

void mtc_model_lowp_written(mtc_model *m) {
    m->lp_version++;
    for (int i = 0; i < m->reg.count; i++)
        m->lp_seen[i] = m->lp_version;
    m->lp_written = 1;
}

mtc_result_t mtc_model_init_chunk(const mtc_model_config *cfg, const mtc_model_chunk_opts *o,
                                  mtc_model **out) {
    *out = NULL;
    int B = o->B, nslots = o->nslots, sequence_parallel = o->parallel.tp.sequence_parallel;
    int first_layer = o->first_layer, last_layer = o->last_layer;
    nn_pool *pool = o->pool;
    if (first_layer < 0 || last_layer > cfg->num_layers || first_layer > last_layer)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "chunk layers [%d, %d) outside [0, %d)",
                         first_layer, last_layer, cfg->num_layers);
    MTC_CHECK(mtc_model_config_validate(cfg));
    tp_ctx tp = tp_ctx_from_grid(o->grid, pool, sequence_parallel);
    int tps = tp_size(tp.comm);
    sequence_parallel = tp.sequence_parallel;
    MTC_CHECK(mtc_model_validate_tp(cfg, tps, sequence_parallel));
    if (B < 1 || nslots < 1)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "micro batch %d and slots %d must be >= 1", B,
                         nslots);
    mtc_model *m;
    MTC_CHECK(mtc_mem_calloc(1, sizeof *m, (void **)&m));
    mtc_result_t rc = MTC_OK;
    m->cfg = *cfg;
    if (m->cfg.init_std <= 0) m->cfg.init_std = 0.02f;
    m->B = B;
    /* each strategy's context from the grid: positions and comm types (cp/),
     * TP (tp/), the MoE groups (moe/) */
    MTC_CHECK_GOTO(cp_ctx_init(&m->cp, &m->cp_layer, o->grid, cfg->seq_length, o->parallel.cp.type,
                               o->parallel.cp.layer_types, first_layer, last_layer),
                   rc, fail);
    m->T = cfg->seq_length / m->cp.cp;
    m->tp = tp;
    m->tp_size = tps;
    moe_groups_from_grid(&m->moe, o->grid);
    if (cfg->moe.num_experts > 0)
        MTC_CHECK_GOTO(mtc_moe_validate_etp(m->moe.etp ? mtc_comm_size(m->moe.etp) : 1, tps), rc,
                       fail);
    m->tp_rank = tp_rank(m->tp.comm);
    m->T_loc = sequence_parallel ? m->T / tps : m->T;
    m->first_layer = first_layer;
    m->last_layer = last_layer;
    m->has_embedding = o->has_embedding;
    m->has_head = o->has_head;
    m->nslots = nslots;
    m->pool = pool;
    m->full_logits = o->logits;
    m->head_chunk = o->head_chunk > 0 ? o->head_chunk : MTC_MODEL_HEAD_CHUNK;
    /* multi-token prediction runs on the chunk with the loss (model/mtp.h),
     * or on Megatron's standalone MTP stage, which sends [h_0 | h_1 .. h_D]
     * through the stages after it to the loss's, where the losses are */
    int D = cfg->mtp_num_layers, sa = D > 0 ? o->mtp_standalone : 0;
    if (sa < 0 || sa > 2 || (sa == 1 && (o->has_head || last_layer != cfg->num_layers)) ||
        (sa == 2 && first_layer != last_layer))
        MTC_CHECK_GOTO(mtc_error(MTC_ERR_INVALID_ARGUMENT,
                                 "mtp_standalone=%d on a chunk of layers [%d, %d)%s", sa,
                                 first_layer, last_layer, o->has_head ? " with the loss" : ""),
                       rc, fail);
    m->mtp_standalone = sa;
    m->mtp_layers = sa == 1 || (!sa && o->has_head && last_layer == cfg->num_layers) ? D : 0;
    m->mtp_losses = o->has_head && (sa == 2 || m->mtp_layers) ? D : 0;
    m->states_in = sa == 2 ? 1 + D : 1;
    m->states_out = sa && !o->has_head ? 1 + D : 1;
    if ((m->mtp_layers || m->mtp_losses) && m->cp.cp > 1) /* the shifted tokens' whole rows */
        MTC_CHECK_GOTO(mtc_mem_calloc(4 * (size_t)o->B * (size_t)m->cp.Tg, sizeof(int),
                                      (void **)&m->mtp_cp_rows),
                       rc, fail);
    size_t LX = (size_t)cfg->num_layers + (size_t)cfg->mtp_num_layers; /* with MTP's layers */
    MTC_CHECK_GOTO(mtc_mem_calloc(LX, sizeof(mtc_model_layer), (void **)&m->layers), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_calloc(LX, sizeof(mtc_model_layer), (void **)&m->dlayers), rc, fail);
    if (m->mtp_losses)
        MTC_CHECK_GOTO(
            mtc_mem_calloc((size_t)m->mtp_losses, sizeof(double), (void **)&m->mtp_loss_sum), rc,
            fail);
    int *first = NULL;
    MTC_CHECK_GOTO(mtc_mem_calloc((size_t)cfg->num_layers + 1, sizeof(int), (void **)&first), rc,
                   fail);
    rc = gpt_register_chunk(m, first);
    for (int l = first_layer; l < last_layer; l++) {
        m->layers[l].first = m->dlayers[l].first = first[l];
        m->layers[l].last = m->dlayers[l].last = first[l + 1];
    }
    free(first);
    if (rc != MTC_OK) goto fail;
    for (int d = 0; d < m->mtp_layers; d++) { /* an MTP depth's params: layer L + d */
        mtc_model_layer *y = &m->layers[cfg->num_layers + d];
        y->first = m->reg.count, y->last = 0;
        for (int i = 0; i < m->reg.count; i++)
            if (m->reg.params[i].layer == cfg->num_layers + d) {
                if (i < y->first) y->first = i;
                y->last = i + 1;
            }
        m->dlayers[cfg->num_layers + d].first = y->first;
        m->dlayers[cfg->num_layers + d].last = y->last;
    }
    if (cfg->moe.num_experts > 0) { /* expert views and per-layer statistics */
        size_t E = (size_t)cfg->moe.num_experts;
        MTC_CHECK_GOTO(mtc_mem_calloc(LX, sizeof(moe_stats), (void **)&m->moe_stats), rc, fail);
        for (int l = first_layer; l < last_layer + m->mtp_layers; l++) {
            if (!mtc_model_is_moe_layer(cfg, l)) continue;
            MTC_CHECK_GOTO(mtc_mem_calloc(4 * E, sizeof(float *), (void **)&m->layers[l].xw), rc,
                           fail);
            MTC_CHECK_GOTO(mtc_mem_calloc(4 * E, sizeof(float *), (void **)&m->dlayers[l].xw), rc,
                           fail);
            MTC_CHECK_GOTO(moe_stats_init(&m->moe_stats[l], (int)E), rc, fail);
        }
    }
    if (o->layout) { /* the caller's buffer layout (the distributed optimizer's padding) */
        size_t *off = NULL, total = 0;
        MTC_CHECK_GOTO(mtc_mem_calloc((size_t)m->reg.count + 1, sizeof(size_t), (void **)&off), rc,
                       fail);
        rc = o->layout(o->layout_ctx, &m->reg, off, &total);
        for (int i = 0; rc == MTC_OK && i < m->reg.count; i++) {
            if (off[i] + m->reg.params[i].local_numel > total)
                rc = mtc_error(MTC_ERR_INTERNAL,
                               "layout puts %s at %zu (+%zu) outside a buffer of %zu floats",
                               m->reg.params[i].name, off[i], m->reg.params[i].local_numel, total);
            m->reg.params[i].offset = off[i];
        }
        m->reg.total = total;
        free(off);
        if (rc != MTC_OK) goto fail;
    }
    if (cfg->position_embedding == MTC_POS_ROPE)
        MTC_CHECK_GOTO(nn_rope_table_init(&m->rope, cfg->max_position_embeddings,
                                          mtc_model_head_size(cfg),
                                          cfg->rotary_percent > 0 ? cfg->rotary_percent : 1.0f,
                                          cfg->rotary_base > 0 ? cfg->rotary_base : 10000.0f,
                                          cfg->rotary_interleaved),
                       rc, fail);
    size_t bytes = m->reg.total * sizeof(float);
    MTC_CHECK_GOTO(mtc_mem_alloc_big(bytes, !o->lazy_buffers, (void **)&m->params), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_alloc_big(bytes, !o->lazy_buffers, (void **)&m->grads), rc, fail);
    MTC_CHECK_GOTO(mtc_mem_calloc((size_t)nslots, sizeof(mtc_model_slot), (void **)&m->slots), rc,
                   fail);
    int fp8 = o->fp8 && o->fp8->enabled; /* fp8 GEMMs are fp32 GEMMs on fp8 values */
    if (o->precision != TP_PREC_F32)
        MTC_CHECK_GOTO(gpt_lowp_init(m, o->precision, o->bf16_gemm_f32 || fp8, o->lazy_buffers), rc,
                       fail);
    if (fp8) MTC_CHECK_GOTO(gpt_fp8_init(m, o), rc, fail);
    m->rec_mlp = o->recompute_mlp;
    MTC_CHECK_GOTO(mtc_model_mla_init(m, o), rc, fail);
    m->rec_shared = o->recompute_shared && cfg->moe.shared_ffn > 0;
    m->rec_moe = o->recompute_moe && cfg->moe.num_experts > 0;
    m->cfg.moe.recompute_act = o->recompute_moe_act && cfg->moe.num_experts > 0;
    m->nrec = o->recompute_layers < 0 ? 0 : o->recompute_layers;
    if (m->nrec > last_layer - first_layer) m->nrec = last_layer - first_layer;
    /* Megatron's uniform method checkpoints each MTP depth as well (its
     * _checkpointed_forward); the depths' layers follow the decoder's */
    if (o->recompute_mtp && m->nrec == last_layer - first_layer) m->nrec += m->mtp_layers;
    if (m->nrec > 0)
        MTC_CHECK_GOTO(mtc_mem_calloc(1, sizeof(mtc_model_slot), (void **)&m->rc), rc, fail);
    gpt_bind_all(m);
    if (m->precision == TP_PREC_BF16) MTC_CHECK_GOTO(gpt_lowp_prepare(m), rc, fail);
    size_t need = gpt_carve(m, NULL);
    MTC_CHECK_GOTO(mtc_arena_init(&m->arena, need + 4096), rc, fail);
    void *base;
    MTC_CHECK_GOTO(mtc_arena_alloc(&m->arena, need, 64, &base), rc, fail);
    gpt_carve(m, base);
    memset(base, 0, need); /* fault the pages in now, not in the first step */
    *out = m;
    return MTC_OK;
fail:
    mtc_model_free(m);
    return rc;
}

mtc_result_t mtc_model_init_tp(const mtc_model_config *cfg, int B, int nslots, nn_pool *pool,
                               mtc_grid_t grid, int sequence_parallel, mtc_model **out) {
    mtc_model_chunk_opts o = {.B = B,
                              .nslots = nslots,
                              .pool = pool,
                              .grid = grid,
                              .parallel.tp.sequence_parallel = sequence_parallel,
                              .first_layer = 0,
                              .last_layer = cfg->num_layers,
                              .has_embedding = 1,
                              .has_head = 1,
                              .logits = 1};
    return mtc_model_init_chunk(cfg, &o, out);
}

mtc_result_t mtc_model_init(const mtc_model_config *cfg, int B, int nslots, nn_pool *pool,
                            mtc_model **out) {
    return mtc_model_init_tp(cfg, B, nslots, pool, NULL, 0, out);
}

void mtc_model_free(mtc_model *m) {
    if (!m) return;
    size_t bytes = m->reg.total * sizeof(float);
    mtc_mem_free_big(m->params, bytes);
    mtc_mem_free_big(m->grads, bytes);
    mtc_mem_free_big(m->params_c, bytes);
    mtc_mem_free_big(m->params16, m->reg.total * sizeof(mtc_bf16));
    mtc_mem_free_big(m->lowp.xa, m->lowp.cap * sizeof(float));
    mtc_mem_free_big(m->lowp.xb, m->lowp.cap * sizeof(float));
    nn_lowp_free(m->lowp.lp);
    tp_fp8_state_free(m->fp8);
    free(m->lp_seen);
    mtc_arena_free(&m->arena);
    for (int l = 0; l < m->cfg.num_layers + m->cfg.mtp_num_layers && m->layers; l++) {
        free(m->layers[l].xw);
        if (m->dlayers) free(m->dlayers[l].xw);
        if (m->moe_stats) moe_stats_free(&m->moe_stats[l]);
    }
    free(m->moe_stats);
    free(m->mtp_loss_sum);
    free(m->mtp_cp_rows);
    free(m->layers);
    free(m->dlayers);
    free(m->slots);
    free(m->rc);
    nn_rope_table_free(&m->rope);
    nn_yarn_table_free(&m->yarn);
    cp_ctx_free(&m->cp, &m->cp_layer);
    mtc_registry_free(&m->reg);
    free(m);
}

typedef struct {
    mtc_model *m;
    uint64_t seed;
    int first; /* task index of this slice's first task */
} gpt_init_job;

#define GPT_INIT_CHUNK ((size_t)1 << 18)

/* Task i fills the i-th GPT_INIT_CHUNK elements of the flat buffer, split
 * along parameter boundaries (values do not depend on the split). */
static void gpt_init_task(int i, void *arg) {
    gpt_init_job *j = arg;
    const mtc_registry *r = &j->m->reg;
    i += j->first;
    size_t lo = (size_t)i * GPT_INIT_CHUNK, hi = lo + GPT_INIT_CHUNK;
    if (hi > r->total) hi = r->total;
    for (int k = 0; k < r->count; k++) {
        const mtc_param *p = &r->params[k];
        size_t a = p->offset > lo ? p->offset : lo;
        size_t b = p->offset + p->local_numel < hi ? p->offset + p->local_numel : hi;
        if (a < b) mtc_registry_init_local(r, p, j->m->params + a, a - p->offset, b - a, j->seed);
    }
}

void mtc_model_init_params(mtc_model *m, uint64_t seed) {
    mtc_model_init_params_progress(m, seed, NULL, NULL);
}

void mtc_model_init_params_progress(mtc_model *m, uint64_t seed,
                                    void (*progress)(void *ctx, size_t done, size_t total),
                                    void *ctx) {
    int n = (int)((m->reg.total + GPT_INIT_CHUNK - 1) / GPT_INIT_CHUNK);
    int slice = progress ? 32 : n; /* 8M elements between reports */
    for (int a = 0; a < n; a += slice) {
        gpt_init_job j = {m, seed, a};
        nn_pool_run(m->pool, n - a < slice ? n - a : slice, gpt_init_task, &j);
        if (progress) {
            size_t done = (size_t)(a + slice) * GPT_INIT_CHUNK;
            progress(ctx, done < m->reg.total ? done : m->reg.total, m->reg.total);
        }
    }
}

void mtc_model_init_params_ranges(mtc_model *m, uint64_t seed, const int64_t (*keep)[2],
                                  int nkeep) {
    const mtc_registry *r = &m->reg;
    for (int i = 0; i < nkeep; i++)
        for (int k = 0; k < r->count; k++) {
            const mtc_param *p = &r->params[k];
            size_t lo = (size_t)keep[i][0], hi = (size_t)keep[i][1];
            size_t a = p->offset > lo ? p->offset : lo;
            size_t b = p->offset + p->local_numel < hi ? p->offset + p->local_numel : hi;
            if (a < b) mtc_registry_init_local(r, p, m->params + a, a - p->offset, b - a, seed);
        }
}

void mtc_model_zero_grad(mtc_model *m) {
    nn_pool_zero(m->pool, m->grads, m->reg.total * sizeof(float));
}

size_t mtc_model_activation_bytes(const mtc_model *m) { return m->arena.high_water; }

mtc_result_t mtc_model_gather(const mtc_model *m, float *out, const float *from, float *scratch) {
    const mtc_registry *r = &m->reg;
    for (int i = 0; i < r->count; i++) {
        const mtc_param *p = &r->params[i];
        float *dst = out + p->global_offset;
        if (mtc_param_absent(p)) continue; /* another EP rank's expert: left as it is */
        if (p->split_dim < 0 || m->tp_size <= 1) {
            memcpy(dst, from + p->offset, p->numel * sizeof(float));
            continue;
        }
        /* comm: all-gather(tp) of the shard */
        MTC_CHECK(
            mtc_all_gather(from + p->offset, scratch, p->local_numel, MTC_DTYPE_F32, m->tp.comm));
        for (int k = 0; k < m->tp_size; k++)
            for (size_t l = 0; l < p->local_numel; l++)
                dst[mtc_registry_global_index(r, p, k, l)] =
                    scratch[(size_t)k * p->local_numel + l];
    }
    return MTC_OK;
}

float *mtc_model_slot_input(mtc_model *m, int slot) {
    MTC_ASSERT(slot >= 0 && slot < m->nslots);
    return m->slots[slot].encoded;
}

const float *mtc_model_slot_output(const mtc_model *m, int slot) {
    MTC_ASSERT(slot >= 0 && slot < m->nslots);
    const mtc_model_slot *a = &m->slots[slot];
    int nl = m->last_layer - m->first_layer;
    if (m->mtp_standalone == 1) return m->mtp_send;
    return nl ? a->res3 + (size_t)(nl - 1) * m->B * m->T_loc * m->cfg.hidden_size : a->encoded;
}

const float *mtc_model_logits(const mtc_model *m) { return m->slots[0].logits; }
