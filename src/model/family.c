/* model/family.c - the model families as tables: for every parameter role
 * its Hugging Face name, global shape, tensor-parallel split rule, whether
 * the configuration has it, its initialisation, and whether its gradient
 * is a partial sum under sequence parallelism. model/model.c registers a
 * chunk's parameters by walking these tables; nothing else in mtc knows a
 * parameter by its name.
 *
 * Families: GPT-2 (Hugging Face GPT2LMHeadModel names, fused c_attn
 * [q | k | v], weights stored (out, in) where HF's Conv1D has (in, out)) and Llama
 * (LlamaForCausalLM names, with q/k/v fused as qkv_proj = [q | k | v] and,
 * under SwiGLU, gate/up fused as gate_up_proj = [gate | up]: one parameter
 * each, as Megatron's linear_qkv and linear_fc1, so the gradient-buffer
 * layout is Megatron's; export splits them back into HF's tensors).
 * The family follows from the configuration: RMSNorm, SwiGLU or RoPE make
 * a Llama-style model, named as Llama. Does not allocate buffers. */
#include <math.h>
#include <stdio.h>

#include "model/family.h"

/* A role's presence in a configuration. */
typedef enum {
    HAS_ALWAYS = 0,
    HAS_NORM_BIAS,   /* LayerNorm has a bias, RMSNorm none */
    HAS_LINEAR_BIAS, /* not --disable-bias-linear */
    HAS_QKV_BIAS,    /* linear biases, or --add-qkv-bias */
    HAS_LEARNED_POS, /* --position-embedding-type learned_absolute */
    HAS_UNTIED,      /* --untie-embeddings-and-output-weights */
    HAS_EXPERT_BIAS, /* --moe-router-enable-expert-bias */
    HAS_SHARED,      /* --moe-shared-expert-intermediate-size */
    HAS_SHARED_BIAS, /* a shared expert with linear biases */
    HAS_QK_NORM,     /* --qk-layernorm */
    HAS_QK_NORM_B,   /* --qk-layernorm with LayerNorm */
    HAS_QKV,         /* standard attention (not --multi-latent-attention) */
    HAS_MLA,         /* --multi-latent-attention */
    HAS_MLA_Q,       /* MLA without --q-lora-rank: linear_q_proj */
    HAS_MLA_QL,      /* MLA with --q-lora-rank: q down and up projections */
    HAS_MLA_QN,      /* the q latent's norm (--q-lora-rank, --qk-layernorm) */
    HAS_MLA_QN_B,    /* its bias (LayerNorm) */
    HAS_MLA_KVN,     /* the kv latent's norm (--qk-layernorm) */
    HAS_MLA_KVN_B,   /* its bias (LayerNorm) */
} has_rule;

/* Global shape symbols. */
typedef enum {
    D_1 = 0,
    D_C,
    D_QKV,
    D_QD,
    D_F1,
    D_F,
    D_VP,
    D_POS,
    D_E,   /* experts */
    D_EF1, /* an expert's fc1 rows (2 x moe-ffn with SwiGLU) */
    D_EF,  /* moe-ffn-hidden-size */
    D_SF1, /* the shared expert's fc1 rows */
    D_SF,  /* moe-shared-expert-intermediate-size */
    D_HS,  /* head size (kv-channels) */
    D_MQ,  /* MLA: NH (qk-head-dim + qk-pos-emb-head-dim) */
    D_QL,  /* q-lora-rank */
    D_KVD, /* kv-lora-rank + qk-pos-emb-head-dim */
    D_KL,  /* kv-lora-rank */
    D_MKV, /* NH (qk-head-dim + v-head-dim) */
    D_2C,  /* an MTP depth's projection input [embedding | hidden state] */
} dim_sym;

typedef enum { INIT_ONES = 0, INIT_ZEROS, INIT_STD, INIT_STD_OUT } init_rule;

typedef struct {
    int role; /* mtc_layer_role or mtc_global_role */
    const char *name;
    dim_sym rows, cols; /* cols D_1 = 1-D */
    mtc_split_rule split;
    has_rule has;
    init_rule init;
    /* gradient partial over TP: 1 under SP (norms and row-parallel
     * biases), 2 always (the q/k norms see only the rank's heads) */
    int sp_partial;
} role_desc;

/* The q/k norms come last (registration order only decides buffer offsets);
 * named q_norm / k_norm as Hugging Face's Qwen3 (self_attn.q_norm). MLA's
 * roles after them, named as Hugging Face's DeepSeek-V3 (q_a_proj = q
 * down, q_b_proj = q up, kv_a_proj_with_mqa = kv down with the shared key
 * position head as its last rows, kv_b_proj = kv up): the up projections
 * (and q_proj) column-parallel by heads; the down projections and latent
 * norms replicated over TP (TE's 'duplicated'), their gradients partial
 * sums over TP under SP only (sp_partial 1; model/mla.h says why). */
#define MLA_ROLES(P, A)                                                                            \
    {MTC_ROLE_MLA_Q_W, P A "q_proj.weight", D_MQ, D_C, MTC_SPLIT_COLUMN, HAS_MLA_Q, INIT_STD, 0},  \
        {MTC_ROLE_MLA_QD_W,                                                                        \
         P A "q_a_proj.weight",                                                                    \
         D_QL,                                                                                     \
         D_C,                                                                                      \
         MTC_SPLIT_NONE,                                                                           \
         HAS_MLA_QL,                                                                               \
         INIT_STD,                                                                                 \
         1},                                                                                       \
        {MTC_ROLE_MLA_QN_W,                                                                        \
         P A "q_a_layernorm.weight",                                                               \
         D_QL,                                                                                     \
         D_1,                                                                                      \
         MTC_SPLIT_NONE,                                                                           \
         HAS_MLA_QN,                                                                               \
         INIT_ONES,                                                                                \
         1},                                                                                       \
        {MTC_ROLE_MLA_QN_B,                                                                        \
         P A "q_a_layernorm.bias",                                                                 \
         D_QL,                                                                                     \
         D_1,                                                                                      \
         MTC_SPLIT_NONE,                                                                           \
         HAS_MLA_QN_B,                                                                             \
         INIT_ZEROS,                                                                               \
         1},                                                                                       \
        {MTC_ROLE_MLA_QU_W,                                                                        \
         P A "q_b_proj.weight",                                                                    \
         D_MQ,                                                                                     \
         D_QL,                                                                                     \
         MTC_SPLIT_COLUMN,                                                                         \
         HAS_MLA_QL,                                                                               \
         INIT_STD,                                                                                 \
         0},                                                                                       \
        {MTC_ROLE_MLA_KVD_W,                                                                       \
         P A "kv_a_proj_with_mqa.weight",                                                          \
         D_KVD,                                                                                    \
         D_C,                                                                                      \
         MTC_SPLIT_NONE,                                                                           \
         HAS_MLA,                                                                                  \
         INIT_STD,                                                                                 \
         1},                                                                                       \
        {MTC_ROLE_MLA_KVN_W,                                                                       \
         P A "kv_a_layernorm.weight",                                                              \
         D_KL,                                                                                     \
         D_1,                                                                                      \
         MTC_SPLIT_NONE,                                                                           \
         HAS_MLA_KVN,                                                                              \
         INIT_ONES,                                                                                \
         1},                                                                                       \
        {MTC_ROLE_MLA_KVN_B,                                                                       \
         P A "kv_a_layernorm.bias",                                                                \
         D_KL,                                                                                     \
         D_1,                                                                                      \
         MTC_SPLIT_NONE,                                                                           \
         HAS_MLA_KVN_B,                                                                            \
         INIT_ZEROS,                                                                               \
         1},                                                                                       \
    {                                                                                              \
        MTC_ROLE_MLA_KVU_W, P A "kv_b_proj.weight", D_MKV, D_KL, MTC_SPLIT_COLUMN, HAS_MLA,        \
            INIT_STD, 0                                                                            \
    }
#define LAYER_ROLES(P, A, QKV, PROJ, N1, N2, FC1, FC2, QN, KN)                                       \
    {MTC_ROLE_NORM1_W, P N1 ".weight", D_C, D_1, MTC_SPLIT_NONE, HAS_ALWAYS, INIT_ONES, 1},          \
        {MTC_ROLE_NORM1_B, P N1 ".bias", D_C, D_1, MTC_SPLIT_NONE, HAS_NORM_BIAS, INIT_ZEROS, 1},    \
        {MTC_ROLE_QKV_W, P QKV ".weight", D_QKV, D_C, MTC_SPLIT_QKV, HAS_QKV, INIT_STD, 0},          \
        {MTC_ROLE_QKV_B, P QKV ".bias", D_QKV, D_1, MTC_SPLIT_QKV, HAS_QKV_BIAS, INIT_ZEROS, 0},     \
        {MTC_ROLE_PROJ_W, P PROJ ".weight", D_C, D_QD, MTC_SPLIT_ROW, HAS_ALWAYS, INIT_STD_OUT, 0},  \
        {MTC_ROLE_PROJ_B, P PROJ ".bias", D_C, D_1, MTC_SPLIT_NONE, HAS_LINEAR_BIAS, INIT_ZEROS, 1}, \
        {MTC_ROLE_NORM2_W, P N2 ".weight", D_C, D_1, MTC_SPLIT_NONE, HAS_ALWAYS, INIT_ONES, 1},      \
        {MTC_ROLE_NORM2_B, P N2 ".bias", D_C, D_1, MTC_SPLIT_NONE, HAS_NORM_BIAS, INIT_ZEROS, 1},    \
        {MTC_ROLE_FC1_W, P FC1 ".weight", D_F1, D_C, MTC_SPLIT_FC1, HAS_ALWAYS, INIT_STD, 0},        \
        {MTC_ROLE_FC1_B, P FC1 ".bias", D_F1, D_1, MTC_SPLIT_FC1, HAS_LINEAR_BIAS, INIT_ZEROS, 0},   \
        {MTC_ROLE_FC2_W, P FC2 ".weight", D_C, D_F, MTC_SPLIT_ROW, HAS_ALWAYS, INIT_STD_OUT, 0},     \
        {MTC_ROLE_FC2_B, P FC2 ".bias", D_C, D_1, MTC_SPLIT_NONE, HAS_LINEAR_BIAS, INIT_ZEROS, 1},   \
        {MTC_ROLE_QNORM_W, P QN ".weight", D_HS, D_1, MTC_SPLIT_NONE, HAS_QK_NORM, INIT_ONES, 2},    \
        {MTC_ROLE_QNORM_B, P QN ".bias", D_HS, D_1, MTC_SPLIT_NONE, HAS_QK_NORM_B, INIT_ZEROS, 2},   \
        {MTC_ROLE_KNORM_W, P KN ".weight", D_HS, D_1, MTC_SPLIT_NONE, HAS_QK_NORM, INIT_ONES, 2},    \
        {MTC_ROLE_KNORM_B, P KN ".bias", D_HS, D_1, MTC_SPLIT_NONE, HAS_QK_NORM_B, INIT_ZEROS, 2},   \
        MLA_ROLES(P, A)

static const role_desc GPT2_LAYER[] = {LAYER_ROLES("transformer.h.%d.", "attn.", "attn.c_attn",
                                                   "attn.c_proj", "ln_1", "ln_2", "mlp.c_fc",
                                                   "mlp.c_proj", "attn.q_norm", "attn.k_norm")};
static const role_desc LLAMA_LAYER[] = {
    LAYER_ROLES("model.layers.%d.", "self_attn.", "self_attn.qkv_proj", "self_attn.o_proj",
                "input_layernorm", "post_attention_layernorm", "mlp.gate_up_proj", "mlp.down_proj",
                "self_attn.q_norm", "self_attn.k_norm")};
/* An MoE layer's MLP (moe/moe.h): router, expert bias, shared expert, then
 * per expert (second %d) fc1 and fc2, in Megatron's forward order. Named as
 * Mixtral / Qwen-MoE lay them out, under mlp. (docs/model.md). */
#define MOE_ROLES(P, R, SH, EX, FC1, FC2)                                                          \
    {MTC_ROLE_ROUTER_W, P R ".weight", D_E, D_C, MTC_SPLIT_NONE, HAS_ALWAYS, INIT_STD, 1},         \
        {MTC_ROLE_EXPERT_BIAS, P R ".expert_bias", D_E,        D_1,                                \
         MTC_SPLIT_NONE,       HAS_EXPERT_BIAS,    INIT_ZEROS, 0},                                 \
        {MTC_ROLE_SHARED_FC1_W, P SH FC1 ".weight", D_SF1,    D_C,                                 \
         MTC_SPLIT_FC1,         HAS_SHARED,         INIT_STD, 0},                                  \
        {MTC_ROLE_SHARED_FC1_B, P SH FC1 ".bias", D_SF1,      D_1,                                 \
         MTC_SPLIT_FC1,         HAS_SHARED_BIAS,  INIT_ZEROS, 0},                                  \
        {MTC_ROLE_SHARED_FC2_W, P SH FC2 ".weight", D_C,          D_SF,                            \
         MTC_SPLIT_ROW,         HAS_SHARED,         INIT_STD_OUT, 0},                              \
        {MTC_ROLE_SHARED_FC2_B, P SH FC2 ".bias", D_C,        D_1,                                 \
         MTC_SPLIT_NONE,        HAS_SHARED_BIAS,  INIT_ZEROS, 1},                                  \
        {MTC_ROLE_EXP_FC1_W, P EX FC1 ".weight", D_EF1,    D_C,                                    \
         MTC_SPLIT_NONE,     HAS_ALWAYS,         INIT_STD, 0},                                     \
        {MTC_ROLE_EXP_FC1_B, P EX FC1 ".bias", D_EF1,      D_1,                                    \
         MTC_SPLIT_NONE,     HAS_LINEAR_BIAS,  INIT_ZEROS, 0},                                     \
        {MTC_ROLE_EXP_FC2_W, P EX FC2 ".weight", D_C,          D_EF,                               \
         MTC_SPLIT_NONE,     HAS_ALWAYS,         INIT_STD_OUT, 0},                                 \
    {                                                                                              \
        MTC_ROLE_EXP_FC2_B, P EX FC2 ".bias", D_C, D_1, MTC_SPLIT_NONE, HAS_LINEAR_BIAS,           \
            INIT_ZEROS, 0                                                                          \
    }
#define MOE_NROLES (MTC_ROLE_EXP_FC2_B + 1 - MTC_NROLES) /* the MTP roles come after */
#define MOE_NSHARED (MTC_ROLE_EXP_FC1_W - MTC_NROLES)    /* roles before the per-expert ones */

static const role_desc GPT2_MOE[] = {MOE_ROLES(
    "transformer.h.%d.", "mlp.router", "mlp.shared_expert.", "mlp.experts.%d.", "c_fc", "c_proj")};
static const role_desc LLAMA_MOE[] = {MOE_ROLES("model.layers.%d.", "mlp.router",
                                                "mlp.shared_expert.", "mlp.experts.%d.",
                                                "gate_up_proj", "down_proj")};
static const role_desc LLAMA_MOE_PLAIN[] = {MOE_ROLES("model.layers.%d.", "mlp.router",
                                                      "mlp.shared_expert.", "mlp.experts.%d.",
                                                      "up_proj", "down_proj")};

/* An MTP depth's own parameters (Hugging Face DeepSeek-V3 names the depth
 * model.layers.<num_layers + d> with enorm, hnorm, eh_proj and
 * shared_head.norm; Megatron: mtp.layers.d.enorm / hnorm / eh_proj /
 * final_layernorm). The first three come before the depth's transformer
 * layer, the norm after it (forward order). eh_proj is column-parallel
 * (Megatron's ColumnParallelLinear, no bias); the norms are replicated. */
#define MTP_ROLES(P)                                                                               \
    {MTC_ROLE_MTP_ENORM_W, P "enorm.weight", D_C, D_1, MTC_SPLIT_NONE, HAS_ALWAYS, INIT_ONES, 1},  \
        {MTC_ROLE_MTP_ENORM_B, P "enorm.bias", D_C,        D_1,                                    \
         MTC_SPLIT_NONE,       HAS_NORM_BIAS,  INIT_ZEROS, 1},                                     \
        {MTC_ROLE_MTP_HNORM_W, P "hnorm.weight", D_C,       D_1,                                   \
         MTC_SPLIT_NONE,       HAS_ALWAYS,       INIT_ONES, 1},                                    \
        {MTC_ROLE_MTP_HNORM_B, P "hnorm.bias", D_C,        D_1,                                    \
         MTC_SPLIT_NONE,       HAS_NORM_BIAS,  INIT_ZEROS, 1},                                     \
        {MTC_ROLE_MTP_EH_PROJ, P "eh_proj.weight", D_C,      D_2C,                                 \
         MTC_SPLIT_COLUMN,     HAS_ALWAYS,         INIT_STD, 0},                                   \
        {MTC_ROLE_MTP_NORM_W,                                                                      \
         P "shared_head.norm.weight",                                                              \
         D_C,                                                                                      \
         D_1,                                                                                      \
         MTC_SPLIT_NONE,                                                                           \
         HAS_ALWAYS,                                                                               \
         INIT_ONES,                                                                                \
         1},                                                                                       \
    {                                                                                              \
        MTC_ROLE_MTP_NORM_B, P "shared_head.norm.bias", D_C, D_1, MTC_SPLIT_NONE, HAS_NORM_BIAS,   \
            INIT_ZEROS, 1                                                                          \
    }
#define MTP_NROLES 7
#define MTP_NPRE 5 /* before the transformer layer */
static const role_desc GPT2_MTP[] = {MTP_ROLES("transformer.h.%d.")};
static const role_desc LLAMA_MTP[] = {MTP_ROLES("model.layers.%d.")};

/* Llama-named layers without SwiGLU: fc1 is a plain up projection */
static const char *LLAMA_FC1_PLAIN[2] = {"model.layers.%d.mlp.up_proj.weight",
                                         "model.layers.%d.mlp.up_proj.bias"};

/* In Megatron's forward order: embedding, (layers), final norm, head. */
#define GLOBAL_ROLES(WTE, WPE, NF, HEAD)                                                           \
    {MTC_ROLE_WTE, WTE, D_VP, D_C, MTC_SPLIT_VOCAB, HAS_ALWAYS, INIT_STD, 0},                      \
        {MTC_ROLE_WPE, WPE, D_POS, D_C, MTC_SPLIT_NONE, HAS_LEARNED_POS, INIT_STD, 0},             \
        {MTC_ROLE_NORMF_W, NF ".weight", D_C, D_1, MTC_SPLIT_NONE, HAS_ALWAYS, INIT_ONES, 1},      \
        {MTC_ROLE_NORMF_B, NF ".bias", D_C, D_1, MTC_SPLIT_NONE, HAS_NORM_BIAS, INIT_ZEROS, 1}, {  \
        MTC_ROLE_HEAD, HEAD, D_VP, D_C, MTC_SPLIT_VOCAB, HAS_UNTIED, INIT_STD, 0                   \
    }

static const role_desc GPT2_GLOBAL[] = {GLOBAL_ROLES(
    "transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f", "lm_head.weight")};
static const role_desc LLAMA_GLOBAL[] = {GLOBAL_ROLES(
    "model.embed_tokens.weight", "model.embed_positions.weight", "model.norm", "lm_head.weight")};

int model_family_is_llama(const mtc_model_config *c) {
    return c->normalization == MTC_NORM_RMSNORM || c->swiglu ||
           c->position_embedding == MTC_POS_ROPE;
}

static int role_present(const role_desc *d, const mtc_model_config *c) {
    int bias = !c->disable_bias_linear;
    switch (d->has) {
    case HAS_ALWAYS: return 1;
    case HAS_NORM_BIAS: return c->normalization == MTC_NORM_LAYERNORM;
    case HAS_LINEAR_BIAS: return bias;
    case HAS_QKV_BIAS: return !c->mla.enabled && (bias || c->add_qkv_bias);
    case HAS_LEARNED_POS: return c->position_embedding == MTC_POS_LEARNED;
    case HAS_UNTIED: return c->untie_embeddings;
    case HAS_EXPERT_BIAS: return c->moe.expert_bias;
    case HAS_SHARED: return c->moe.shared_ffn > 0;
    case HAS_SHARED_BIAS: return c->moe.shared_ffn > 0 && bias;
    case HAS_QK_NORM: return c->qk_layernorm && !c->mla.enabled;
    case HAS_QK_NORM_B:
        return c->qk_layernorm && !c->mla.enabled && c->normalization == MTC_NORM_LAYERNORM;
    case HAS_QKV: return !c->mla.enabled;
    case HAS_MLA: return c->mla.enabled;
    case HAS_MLA_Q: return c->mla.enabled && c->mla.q_lora_rank <= 0;
    case HAS_MLA_QL: return c->mla.enabled && c->mla.q_lora_rank > 0;
    case HAS_MLA_QN: return c->mla.enabled && c->mla.q_lora_rank > 0 && c->mla.latent_norm;
    case HAS_MLA_QN_B:
        return c->mla.enabled && c->mla.q_lora_rank > 0 && c->mla.latent_norm &&
               c->normalization == MTC_NORM_LAYERNORM;
    case HAS_MLA_KVN: return c->mla.enabled && c->mla.latent_norm;
    case HAS_MLA_KVN_B:
        return c->mla.enabled && c->mla.latent_norm && c->normalization == MTC_NORM_LAYERNORM;
    }
    return 0;
}

static int64_t dim_of(dim_sym s, const mtc_model_config *c) {
    int64_t HS = mtc_model_head_size(c), NH = c->num_heads, NG = mtc_model_groups(c);
    switch (s) {
    case D_1: return 0;
    case D_C: return c->hidden_size;
    case D_QKV: return (NH + 2 * NG) * HS;
    case D_QD: return c->mla.enabled ? NH * c->mla.v_head_dim : NH * HS;
    case D_F1: return (c->swiglu ? 2 : 1) * (int64_t)c->ffn_hidden_size;
    case D_F: return c->ffn_hidden_size;
    case D_VP: return c->padded_vocab_size;
    case D_POS: return c->max_position_embeddings;
    case D_E: return c->moe.num_experts;
    case D_EF1: return (c->swiglu ? 2 : 1) * (int64_t)mtc_model_moe_ffn(c);
    case D_EF: return mtc_model_moe_ffn(c);
    case D_SF1: return (c->swiglu ? 2 : 1) * (int64_t)c->moe.shared_ffn;
    case D_SF: return c->moe.shared_ffn;
    case D_HS: return HS;
    case D_MQ: return NH * (c->mla.qk_head_dim + c->mla.qk_pos_emb_head_dim);
    case D_QL: return c->mla.q_lora_rank;
    case D_KVD: return c->mla.kv_lora_rank + c->mla.qk_pos_emb_head_dim;
    case D_KL: return c->mla.kv_lora_rank;
    case D_MKV: return NH * (c->mla.qk_head_dim + c->mla.v_head_dim);
    case D_2C: return 2 * (int64_t)c->hidden_size;
    }
    return 0;
}

/* Register one described parameter (name formatted with the layer and,
 * for an expert's, the expert). */
static mtc_result_t add_desc_x(mtc_registry *r, const role_desc *d, const char *name, int layer,
                               int expert, const mtc_model_config *c,
                               const model_register_opts *o) {
    float std = c->init_std > 0 ? c->init_std : 0.02f;
    float std_out = std / sqrtf(2.0f * (float)c->num_layers);
    mtc_init_kind ik = d->init == INIT_ONES    ? MTC_INIT_ONES
                       : d->init == INIT_ZEROS ? MTC_INIT_ZEROS
                                               : MTC_INIT_NORMAL;
    char n[MTC_PARAM_NAME_MAX];
    snprintf(n, sizeof n, name, layer, expert);
    MTC_CHECK(mtc_registry_add(r, n, layer, dim_of(d->rows, c), dim_of(d->cols, c), ik,
                               d->init == INIT_STD_OUT ? std_out : std));
    int i = r->count - 1;
    mtc_param *p = &r->params[i];
    p->reduce_groups = MTC_REDUCE_DP_CP;
    int64_t HS = mtc_model_head_size(c), F = c->ffn_hidden_size;
    int64_t qkv[3] = {c->num_heads * HS, mtc_model_groups(c) * HS, mtc_model_groups(c) * HS};
    if (d->rows == D_SF1) F = c->moe.shared_ffn;
    if (d->rows == D_EF1) F = mtc_model_moe_ffn(c);
    int64_t fc1[2] = {F, F};
    mtc_split_rule split = d->split;
    if (expert >= 0 && r->etp > 1) /* the expert-TP split: the global tensor is the whole expert */
        split = d->role == MTC_ROLE_EXP_FC1_W || d->role == MTC_ROLE_EXP_FC1_B ? MTC_SPLIT_FC1
                : d->role == MTC_ROLE_EXP_FC2_W                                ? MTC_SPLIT_ROW
                                                                               : MTC_SPLIT_NONE;
    switch (split) {
    case MTC_SPLIT_NONE:
        p->tp_duplicate = r->tp > 1;
        if ((o->sequence_parallel && d->sp_partial) || (d->sp_partial == 2 && r->tp > 1))
            p->reduce_groups |= MTC_REDUCE_TP;
        /* a whole expert (etp 1) replicated over TP sees only its TP rank's
         * sequence shard: its gradient is a partial sum over TP. With ep 1 it
         * stays in the dense buffer and TP x DP x CP is its expert-DP group;
         * with ep > 1 mtc_registry_split_ep drops this TP sum again (the
         * expert buffer's expert-DP reduction holds the TP ranks) */
        if (expert >= 0 && o->sequence_parallel && r->tp > 1) p->reduce_groups |= MTC_REDUCE_TP;
        break;
    case MTC_SPLIT_QKV: mtc_registry_split(r, i, 0, 3, qkv); break;
    case MTC_SPLIT_FC1:
        mtc_registry_split(r, i, 0, c->swiglu ? 2 : 1, c->swiglu ? fc1 : NULL);
        break;
    case MTC_SPLIT_COLUMN:
    case MTC_SPLIT_VOCAB: mtc_registry_split(r, i, 0, 1, NULL); break;
    case MTC_SPLIT_ROW: mtc_registry_split(r, i, 1, 1, NULL); break;
    }
    p->split_rule = split;
    p->role = d->role;
    p->emb_or_out = d->role == MTC_ROLE_WTE || d->role == MTC_ROLE_HEAD;
    p->expert = expert;
    return MTC_OK;
}

static mtc_result_t add_desc(mtc_registry *r, const role_desc *d, const char *name, int layer,
                             const mtc_model_config *c, const model_register_opts *o) {
    return add_desc_x(r, d, name, layer, -1, c, o);
}

/* The MoE roles of layer l: router, bias and shared expert, then E
 * experts' four roles each. */
static mtc_result_t add_moe(mtc_registry *r, int l, const mtc_model_config *c,
                            const model_register_opts *o) {
    const role_desc *t = !model_family_is_llama(c) ? GPT2_MOE
                         : c->swiglu               ? LLAMA_MOE
                                                   : LLAMA_MOE_PLAIN;
    for (int k = 0; k < MOE_NSHARED; k++)
        if (role_present(&t[k], c)) MTC_CHECK(add_desc(r, &t[k], t[k].name, l, c, o));
    for (int e = 0; e < c->moe.num_experts; e++)
        for (int k = MOE_NSHARED; k < MOE_NROLES; k++)
            if (role_present(&t[k], c)) MTC_CHECK(add_desc_x(r, &t[k], t[k].name, l, e, c, o));
    return MTC_OK;
}

static int is_mlp_role(int role) { return role >= MTC_ROLE_FC1_W && role <= MTC_ROLE_FC2_B; }

/* Global roles of one end of the model: those at indices [from, to) of the table. */
static mtc_result_t add_globals(mtc_registry *r, const role_desc *t, int from, int to,
                                const mtc_model_config *c, const model_register_opts *o,
                                int *pidx) {
    for (int k = from; k < to; k++) {
        const role_desc *d = &t[k];
        if (!role_present(d, c)) continue;
        int tied_head_copy = d->role == MTC_ROLE_WTE && !o->has_embedding;
        /* a chunk without the embedding holds a wte copy for a tied head
         * or for its MTP depths' embedding */
        if (d->role == MTC_ROLE_WTE && !o->has_embedding &&
            !(o->has_head && !c->untie_embeddings) && !o->mtp)
            continue;
        if (d->role == MTC_ROLE_WPE && !o->has_embedding) continue;
        /* a standalone MTP stage norms h_0; the loss's stage after it has the head alone */
        int normf = d->role == MTC_ROLE_NORMF_W || d->role == MTC_ROLE_NORMF_B;
        if ((normf && o->mtp_split == 2) || (d->role == MTC_ROLE_HEAD && o->mtp_split == 1))
            continue;
        MTC_CHECK(add_desc(r, d, d->name, -1, c, o));
        mtc_param *p = &r->params[r->count - 1];
        if (d->role == MTC_ROLE_WTE && (!c->untie_embeddings || c->mtp_num_layers > 0)) {
            /* tied to the head, or shared with the MTP stage (Megatron's
             * embedding group holds the stages with MTP) */
            p->reduce_groups |= MTC_REDUCE_EMBEDDING;
            p->shared_copy = tied_head_copy;
        }
        pidx[d->role] = r->count - 1;
    }
    return MTC_OK;
}

int model_family_capacity(const mtc_model_config *c, int nlayers, int mtp) {
    return 8 + model_family_params_per_layer(c) * nlayers +
           (model_family_params_per_layer(c) + MTP_NROLES) * mtp;
}

/* Layer l's transformer roles (dense MLP or MoE). */
static mtc_result_t add_layer(mtc_registry *r, int l, const mtc_model_config *c,
                              const model_register_opts *o) {
    int llama = model_family_is_llama(c);
    const role_desc *lt = llama ? LLAMA_LAYER : GPT2_LAYER;
    for (int k = 0; k < MTC_NROLES; k++) {
        const role_desc *d = &lt[k];
        if (!role_present(d, c)) continue;
        if (is_mlp_role(d->role) && mtc_model_is_moe_layer(c, l)) continue;
        const char *name = d->name;
        if (llama && !c->swiglu && d->role == MTC_ROLE_FC1_W) name = LLAMA_FC1_PLAIN[0];
        if (llama && !c->swiglu && d->role == MTC_ROLE_FC1_B) name = LLAMA_FC1_PLAIN[1];
        MTC_CHECK(add_desc(r, d, name, l, c, o));
    }
    if (mtc_model_is_moe_layer(c, l)) MTC_CHECK(add_moe(r, l, c, o));
    return MTC_OK;
}

/* MTP depth d: layer num_layers + d, its own roles around a transformer layer. */
static mtc_result_t add_mtp(mtc_registry *r, int d, const mtc_model_config *c,
                            const model_register_opts *o) {
    const role_desc *t = model_family_is_llama(c) ? LLAMA_MTP : GPT2_MTP;
    int l = c->num_layers + d;
    for (int k = 0; k < MTP_NPRE; k++)
        if (role_present(&t[k], c)) MTC_CHECK(add_desc(r, &t[k], t[k].name, l, c, o));
    MTC_CHECK(add_layer(r, l, c, o));
    for (int k = MTP_NPRE; k < MTP_NROLES; k++)
        if (role_present(&t[k], c)) MTC_CHECK(add_desc(r, &t[k], t[k].name, l, c, o));
    return MTC_OK;
}

int model_family_params_per_layer(const mtc_model_config *c) {
    const role_desc *t = model_family_is_llama(c) ? LLAMA_LAYER : GPT2_LAYER;
    int n = 0;
    for (int k = 0; k < MTC_NROLES; k++)
        n += role_present(&t[k], c);
    if (c->moe.num_experts > 0) n += MOE_NROLES * (c->moe.num_experts + 1);
    return n;
}

mtc_result_t model_family_register(mtc_registry *r, const mtc_model_config *c,
                                   const model_register_opts *o, int *pidx, int *layer_first) {
    const role_desc *gt = model_family_is_llama(c) ? LLAMA_GLOBAL : GPT2_GLOBAL;
    for (int k = 0; k < MTC_NGLOBAL_ROLES; k++)
        pidx[k] = -1;
    /* embedding roles first (wte, wpe), the final norm and head last */
    MTC_CHECK(add_globals(r, gt, 0, 2, c, o, pidx));
    for (int l = o->first_layer; l < o->last_layer; l++) {
        layer_first[l] = r->count;
        MTC_CHECK(add_layer(r, l, c, o));
    }
    layer_first[o->last_layer] = r->count;
    for (int d = 0; d < o->mtp; d++) /* the MTP depths (Megatron: after the decoder) */
        MTC_CHECK(add_mtp(r, d, c, o));
    if (o->has_head || o->mtp_split == 1)
        MTC_CHECK(add_globals(r, gt, 2, MTC_NGLOBAL_ROLES, c, o, pidx));
    mtc_registry_layout(r);
    return MTC_OK;
}

mtc_result_t model_family_register_rank(mtc_registry *r, const mtc_model_config *c,
                                        const model_register_opts *o, const model_rank_split *s,
                                        int *pidx, int *layer_first) {
    /* the chunk's layers only: sized for the whole model, vpp chunks of an
     * L-layer model cost O(L^2) */
    MTC_CHECK(
        mtc_registry_init(r, model_family_capacity(c, o->last_layer - o->first_layer, o->mtp)));
    r->tp = s->tp, r->tp_rank = s->tp_rank, r->etp = s->etp;
    MTC_CHECK(model_family_register(r, c, o, pidx, layer_first));
    if (s->ep > 1) { /* EP rank r holds only its experts: the others take no storage */
        int e0, El;
        moe_local_expert_range(c->moe.num_experts, s->ep, s->ep_rank, &e0, &El);
        mtc_registry_split_ep(r, e0, e0 + El);
        mtc_registry_layout(r);
    }
    return MTC_OK;
}
