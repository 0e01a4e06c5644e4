/* ckpt/hf_dsv3.c - multi-latent attention models as Hugging Face's
 * DeepseekV3ForCausalLM (export and import tables, config.json fields);
 * used by ckpt/hf.c through hf_internal.h.
 *
 *   mtc (registry, named as DeepSeek-V3 already)   DeepseekV3ForCausalLM
 *   self_attn.q_proj | q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa,
 *   kv_a_layernorm, kv_b_proj, o_proj              the same names and rows
 *   mlp.gate_up_proj, mlp.down_proj (dense)        mlp.gate_proj | up_proj, down_proj
 *   mlp.router (E, C)                              mlp.gate.weight
 *   mlp.router.expert_bias (E)                     mlp.gate.e_score_correction_bias (else 0)
 *   mlp.experts.e.gate_up_proj / down_proj         mlp.experts.e.gate_proj | up_proj, down_proj
 *   mlp.shared_expert.*                            mlp.shared_experts.* (n_shared_experts x F)
 *   MTP depth d = layer L + d: the layer's tensors, enorm, hnorm, eh_proj,
 *   shared_head.norm, and copies of embed_tokens / the head as DeepSeek
 *   stores them (model.layers.{L+d}.embed_tokens, shared_head.head).
 *
 * Rows need no permutation: mtc's MLA rotation (nn/yarn.h) de-interleaves
 * and rotates halves, which is DeepSeek's interleaved RoPE, HF's
 * rope_interleave true. The router is Megatron's sigmoid router: the
 * expert bias added for the choice only, group-limited routing ranking each
 * group by the sum of its top topk / group_topk scores (HF ranks by the top
 * 2: equal when that ratio is 2 or every group is kept), the top-k weights
 * renormalised when k > 1 (HF's norm_topk_prob), times
 * moe-router-topk-scaling-factor (routed_scaling_factor). What the class
 * cannot express (a softmax router, layers not "first k dense then MoE",
 * capacity dropping, identity latent norms, a shared expert not a multiple
 * of the routed width) is refused naming the setting. Import sets the
 * expert bias on (the class always has it; a zero bias routes as none). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ckpt/hf_internal.h"
#include "model/family.h"
#include "moe/moe.h"
#include "nn/yarn.h"

/* The k of first_k_dense_replace (num_layers without experts), or -1 when
 * the MoE layers are not "k dense then all MoE", at least one (the MTP
 * depths take the last layer's kind). */
static int first_k_dense(const mtc_model_config *c) {
    if (c->moe.num_experts == 0) return c->num_layers;
    int k = mtc_moe_dense_lead(&c->moe, c->num_layers);
    return k < c->num_layers ? k : -1;
}

mtc_result_t hf_dsv3_check(const mtc_model *m) {
    const mtc_model_config *c = &m->cfg;
    const mtc_mla_config *a = &c->mla;
    const mtc_moe_config *mc = &c->moe;
    const mtc_result_t U = MTC_ERR_UNSUPPORTED;
    if (c->normalization != MTC_NORM_RMSNORM || !c->swiglu || !c->disable_bias_linear ||
        c->add_qkv_bias || c->position_embedding != MTC_POS_ROPE)
        return mtc_error(U, "DeepseekV3ForCausalLM has RMSNorm, SwiGLU, RoPE and no biases: this "
                            "MLA model differs (use --normalization RMSNorm --swiglu "
                            "--disable-bias-linear --position-embedding-type rope)");
    if (!a->latent_norm)
        return mtc_error(U, "DeepseekV3ForCausalLM normalises both latents (q_a_layernorm, "
                            "kv_a_layernorm); this MLA model has none (train with --qk-layernorm)");
    double ms = nn_yarn_get_mscale(a->rotary_scaling_factor, a->mscale_all_dim);
    if (!a->rope_yarn && ms != 1.0)
        return mtc_error(U,
                         "--rope-type rope with rotary-scaling-factor=%g and mscale-all-dim=%g "
                         "scales the softmax, which DeepseekV3ForCausalLM does only with YaRN "
                         "(use --rope-type yarn, or mscale-all-dim 0)",
                         (double)a->rotary_scaling_factor, (double)a->mscale_all_dim);
    if (mc->num_experts == 0) return MTC_OK;
    int F = mtc_model_moe_ffn(c), k = mtc_moe_topk(mc);
    if (mc->score != MOE_SCORE_SIGMOID)
        return mtc_error(U, "moe-router-score-function=softmax: DeepseekV3ForCausalLM routes with "
                            "sigmoid scores (train with --moe-router-score-function sigmoid)");
    if (first_k_dense(c) < 0)
        return mtc_error(U, "--moe-layer-freq: DeepseekV3ForCausalLM has first_k_dense_replace "
                            "dense layers then MoE in every later layer; this model's pattern "
                            "differs");
    if (mc->shared_ffn % F)
        return mtc_error(U,
                         "moe-shared-expert-intermediate-size=%d is not a multiple of the "
                         "experts' %d (DeepseekV3ForCausalLM has n_shared_experts of that width)",
                         mc->shared_ffn, F);
    if (mc->num_groups > 0 && mc->group_topk > 0 && mc->group_topk < mc->num_groups &&
        k / mc->group_topk != 2)
        return mtc_error(U,
                         "moe-router-group-topk=%d with topk %d ranks groups by their top %d "
                         "scores; DeepseekV3ForCausalLM ranks them by the top 2 (use topk = 2 x "
                         "group-topk)",
                         mc->group_topk, k, k / mc->group_topk);
    if (mc->capacity_factor > 0)
        return mtc_error(U,
                         "moe-expert-capacity-factor=%g drops tokens; DeepseekV3ForCausalLM is "
                         "dropless (train dropless to export)",
                         (double)mc->capacity_factor);
    return MTC_OK;
}

#define add hf_table_add

/* Adds tensor name for registry parameter q (which must exist). */
static mtc_result_t need(hf_table *t, const mtc_registry *r, const char *name, const char *q) {
    int p = mtc_registry_find(r, q);
    if (p < 0) return mtc_error(MTC_ERR_INTERNAL, "no parameter %s", q);
    return add(t, r, name, p, 0, -1, 0);
}

/* Layer l's tensors (l >= L: an MTP depth). */
static mtc_result_t dsv3_layer(const mtc_model *m, int l, hf_table *t) {
    const mtc_model_config *c = &m->cfg;
    const mtc_registry *r = &m->reg;
    char n[160], q[160];
#define P(s) (snprintf(q, sizeof q, "model.layers.%d.%s", l, s), mtc_registry_find(r, q))
#define N(s) (snprintf(n, sizeof n, "model.layers.%d.%s", l, s), n)
#define SAME(s) MTC_CHECK((P(s), need(t, r, N(s), q)))
    SAME("input_layernorm.weight");
    if (c->mla.q_lora_rank > 0) {
        SAME("self_attn.q_a_proj.weight");
        SAME("self_attn.q_a_layernorm.weight");
        SAME("self_attn.q_b_proj.weight");
    } else {
        SAME("self_attn.q_proj.weight");
    }
    SAME("self_attn.kv_a_proj_with_mqa.weight");
    SAME("self_attn.kv_a_layernorm.weight");
    SAME("self_attn.kv_b_proj.weight");
    SAME("self_attn.o_proj.weight");
    SAME("post_attention_layernorm.weight");
    if (!mtc_model_is_moe_layer(c, l) || c->moe.num_experts == 0) {
        int64_t F = c->ffn_hidden_size;
        int gu = P("mlp.gate_up_proj.weight");
        MTC_CHECK(add(t, r, N("mlp.gate_proj.weight"), gu, 0, F, 0));
        MTC_CHECK(add(t, r, N("mlp.up_proj.weight"), gu, F, F, 0));
        SAME("mlp.down_proj.weight");
    } else {
        int E = c->moe.num_experts;
        int64_t F = mtc_model_moe_ffn(c), SF = c->moe.shared_ffn, C = c->hidden_size;
        MTC_CHECK(add(t, r, N("mlp.gate.weight"), P("mlp.router.weight"), 0, -1, 0));
        int eb = P("mlp.router.expert_bias");
        MTC_CHECK(eb >= 0 ? add(t, r, N("mlp.gate.e_score_correction_bias"), eb, 0, -1, 0)
                          : hf_table_zeros(t, N("mlp.gate.e_score_correction_bias"), E, 0));
        for (int e = 0; e < E; e++) {
            snprintf(q, sizeof q, "model.layers.%d.mlp.experts.%d.gate_up_proj.weight", l, e);
            int gu = mtc_registry_find(r, q);
            snprintf(q, sizeof q, "model.layers.%d.mlp.experts.%d.down_proj.weight", l, e);
            int dn = mtc_registry_find(r, q);
            if (gu < 0 || dn < 0)
                return mtc_error(MTC_ERR_INTERNAL, "no expert %d in layer %d", e, l);
            static const char *nm[3] = {"gate_proj", "up_proj", "down_proj"};
            for (int k = 0; k < 3; k++) {
                snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%d.%s.weight", l, e, nm[k]);
                MTC_CHECK(add(t, r, n, k < 2 ? gu : dn, k == 1 ? F : 0, k < 2 ? F : -1, 0));
            }
        }
        int sgu = P("mlp.shared_expert.gate_up_proj.weight");
        int sdn = P("mlp.shared_expert.down_proj.weight");
        static const char *sn[3] = {"gate_proj", "up_proj", "down_proj"};
        for (int k = 0; k < 3; k++) {
            snprintf(n, sizeof n, "model.layers.%d.mlp.shared_experts.%s.weight", l, sn[k]);
            if (sgu < 0) /* n_shared_experts 0: empty tensors, the block adds 0 */
                MTC_CHECK(hf_table_zeros(t, n, k < 2 ? 0 : C, k < 2 ? C : 0));
            else
                MTC_CHECK(add(t, r, n, k < 2 ? sgu : sdn, k == 1 ? SF : 0, k < 2 ? SF : -1, 0));
        }
    }
    if (l >= c->num_layers) { /* the MTP depth's own tensors, DeepSeek's names */
        int V = c->vocab_size;
        SAME("enorm.weight");
        SAME("hnorm.weight");
        SAME("eh_proj.weight");
        SAME("shared_head.norm.weight");
        int emb = mtc_registry_find(r, "model.embed_tokens.weight");
        int head = c->untie_embeddings ? mtc_registry_find(r, "lm_head.weight") : emb;
        MTC_CHECK(add(t, r, N("embed_tokens.weight"), emb, 0, V, 0));
        MTC_CHECK(add(t, r, N("shared_head.head.weight"), head, 0, V, 0));
    }
#undef SAME
#undef P
#undef N
    return MTC_OK;
}

mtc_result_t hf_dsv3_table(const mtc_model *m, hf_table *t) {
    const mtc_model_config *c = &m->cfg;
    const mtc_registry *r = &m->reg;
    MTC_CHECK(hf_dsv3_check(m));
    int V = c->vocab_size;
    MTC_CHECK(add(t, r, "model.embed_tokens.weight",
                  mtc_registry_find(r, "model.embed_tokens.weight"), 0, V, 0));
    for (int l = 0; l < c->num_layers + c->mtp_num_layers; l++)
        MTC_CHECK(dsv3_layer(m, l, t));
    MTC_CHECK(add(t, r, "model.norm.weight", mtc_registry_find(r, "model.norm.weight"), 0, -1, 0));
    if (c->untie_embeddings)
        MTC_CHECK(add(t, r, "lm_head.weight", mtc_registry_find(r, "lm_head.weight"), 0, V, 0));
    return MTC_OK;
}

void hf_dsv3_config(const mtc_model *m, cJSON *j) {
    const mtc_model_config *c = &m->cfg;
    const mtc_mla_config *a = &c->mla;
    const mtc_moe_config *mc = &c->moe;
    int moe = mc->num_experts > 0, F = moe ? mtc_model_moe_ffn(c) : c->ffn_hidden_size;
    cJSON_ReplaceItemInObject(j, "num_key_value_heads", cJSON_CreateNumber(c->num_heads));
    cJSON_ReplaceItemInObject(j, "head_dim", cJSON_CreateNumber(a->qk_pos_emb_head_dim));
    cJSON_AddNumberToObject(j, "moe_intermediate_size", F);
    cJSON_AddNumberToObject(j, "n_routed_experts", moe ? mc->num_experts : 1);
    cJSON_AddNumberToObject(j, "n_shared_experts", moe ? mc->shared_ffn / F : 0);
    cJSON_AddNumberToObject(j, "num_experts_per_tok", moe ? mtc_moe_topk(mc) : 1);
    hf_add_float(j, "routed_scaling_factor", mc->topk_scaling > 0 ? mc->topk_scaling : 1.0f);
    int grouped = moe && mc->num_groups > 0 && mc->group_topk > 0;
    cJSON_AddNumberToObject(j, "n_group", grouped ? mc->num_groups : 1);
    cJSON_AddNumberToObject(j, "topk_group", grouped ? mc->group_topk : 1);
    /* dense MLA: every layer (and the MTP depths) below first_k_dense_replace */
    cJSON_AddNumberToObject(j, "first_k_dense_replace",
                            moe ? first_k_dense(c) : c->num_layers + c->mtp_num_layers);
    cJSON_AddBoolToObject(j, "norm_topk_prob", mtc_moe_topk(mc) > 1);
    cJSON_AddStringToObject(j, "scoring_func", "sigmoid");
    cJSON_AddStringToObject(j, "topk_method", "noaux_tc");
    if (a->q_lora_rank > 0)
        cJSON_AddNumberToObject(j, "q_lora_rank", a->q_lora_rank);
    else
        cJSON_AddNullToObject(j, "q_lora_rank");
    cJSON_AddNumberToObject(j, "kv_lora_rank", a->kv_lora_rank);
    cJSON_AddNumberToObject(j, "qk_nope_head_dim", a->qk_head_dim);
    cJSON_AddNumberToObject(j, "qk_rope_head_dim", a->qk_pos_emb_head_dim);
    cJSON_AddNumberToObject(j, "v_head_dim", a->v_head_dim);
    cJSON_AddBoolToObject(j, "rope_interleave", 1);
    cJSON_AddNumberToObject(j, "num_nextn_predict_layers", c->mtp_num_layers);
    if (a->rope_yarn) {
        cJSON *y = cJSON_CreateObject();
        cJSON_AddStringToObject(y, "type", "yarn");
        cJSON_AddStringToObject(y, "rope_type", "yarn");
        hf_add_float(y, "factor", a->rotary_scaling_factor);
        cJSON_AddNumberToObject(y, "original_max_position_embeddings",
                                a->original_max_position_embeddings);
        hf_add_float(y, "beta_fast", a->beta_fast);
        hf_add_float(y, "beta_slow", a->beta_slow);
        hf_add_float(y, "mscale", a->mscale);
        hf_add_float(y, "mscale_all_dim", a->mscale_all_dim);
        /* Megatron's concentration factor, explicit: HF derives another one
         * when mscale_all_dim is 0 and mscale is not 1 */
        nn_yarn_params p = model_mla_yarn_params(a, c->rotary_base);
        hf_add_float(y, "attention_factor", (float)nn_yarn_concentration(&p));
        cJSON_ReplaceItemInObject(j, "rope_scaling", y);
    }
}

static int jget(const cJSON *j, const char *key, int dflt, int *bad) {
    const cJSON *x = cJSON_GetObjectItem(j, key);
    if (!x || cJSON_IsNull(x)) return dflt;
    if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 0 ||
        x->valuedouble > (1 << 20)) {
        *bad = 1;
        return dflt;
    }
    return (int)x->valuedouble;
}

static float jgetf(const cJSON *j, const char *key, float dflt, int *bad) {
    const cJSON *x = cJSON_GetObjectItem(j, key);
    if (!x || cJSON_IsNull(x)) return dflt;
    if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || fabs(x->valuedouble) > 1e6) {
        *bad = 1;
        return dflt;
    }
    return (float)x->valuedouble;
}

mtc_result_t hf_dsv3_parse(const cJSON *j, const char *path, mtc_model_config *c) {
    const mtc_result_t U = MTC_ERR_UNSUPPORTED, FM = MTC_ERR_FORMAT;
    mtc_mla_config *a = &c->mla;
    mtc_moe_config *mc = &c->moe;
    int bad = 0, L = c->num_layers;
    const char *sf = cJSON_GetStringValue(cJSON_GetObjectItem(j, "scoring_func"));
    if (sf && strcmp(sf, "sigmoid"))
        return mtc_error(U, "%s: scoring_func %s (mtc's DeepSeek-V3 router is sigmoid)", path, sf);
    if (cJSON_IsFalse(cJSON_GetObjectItem(j, "rope_interleave")))
        return mtc_error(U,
                         "%s: rope_interleave false (mtc's MLA rotation is DeepSeek's "
                         "interleaved one)",
                         path);
    a->enabled = 1, a->latent_norm = 1;
    a->q_lora_rank = jget(j, "q_lora_rank", 0, &bad);
    a->kv_lora_rank = jget(j, "kv_lora_rank", 512, &bad);
    a->qk_head_dim = jget(j, "qk_nope_head_dim", 128, &bad);
    a->qk_pos_emb_head_dim = jget(j, "qk_rope_head_dim", 64, &bad);
    a->v_head_dim = jget(j, "v_head_dim", 128, &bad);
    c->kv_channels = 0, c->num_query_groups = 0; /* MLA sizes its own heads */
    const cJSON *y = cJSON_GetObjectItem(j, "rope_scaling");
    if (!y || cJSON_IsNull(y)) y = cJSON_GetObjectItem(j, "rope_parameters");
    const char *yt = cJSON_GetStringValue(cJSON_GetObjectItem(y, "rope_type"));
    if (!yt) yt = cJSON_GetStringValue(cJSON_GetObjectItem(y, "type"));
    a->rotary_scaling_factor = 1, a->mscale = 1, a->mscale_all_dim = 0;
    a->beta_fast = 32, a->beta_slow = 1;
    a->original_max_position_embeddings = c->max_position_embeddings;
    if (yt && !strcmp(yt, "yarn")) {
        a->rope_yarn = 1;
        a->rotary_scaling_factor = jgetf(y, "factor", 1, &bad);
        a->original_max_position_embeddings =
            jget(y, "original_max_position_embeddings", c->max_position_embeddings, &bad);
        a->beta_fast = jgetf(y, "beta_fast", 32, &bad);
        a->beta_slow = jgetf(y, "beta_slow", 1, &bad);
        a->mscale = jgetf(y, "mscale", 1, &bad);
        a->mscale_all_dim = jgetf(y, "mscale_all_dim", 0, &bad);
        float af = jgetf(y, "attention_factor", 0, &bad);
        nn_yarn_params p = model_mla_yarn_params(a, c->rotary_base);
        if (!bad && af != 0 && fabs(af - nn_yarn_concentration(&p)) > 1e-6)
            return mtc_error(U,
                             "%s: rope_scaling attention_factor %g is not mscale / "
                             "mscale_all_dim's %g (mtc's YaRN derives it)",
                             path, (double)af, nn_yarn_concentration(&p));
    } else if (yt && strcmp(yt, "default")) {
        return mtc_error(U, "%s: rope_scaling type %s (mtc's MLA has yarn or plain RoPE)", path,
                         yt);
    }
    int k0 = jget(j, "first_k_dense_replace", 0, &bad);
    int E = jget(j, "n_routed_experts", 0, &bad);
    c->mtp_num_layers = jget(j, "num_nextn_predict_layers", 0, &bad);
    c->mtp_loss_scaling_factor = 0.1f; /* Megatron's default (training only) */
    if (bad)
        return mtc_error(FM,
                         "%s: a DeepSeek-V3 field (the MLA ranks and head sizes, rope_scaling, "
                         "first_k_dense_replace, n_routed_experts, num_nextn_predict_layers) "
                         "is not a value its field can hold",
                         path);
    if (k0 >= L || E == 0) return MTC_OK; /* dense: no MoE layer */
    if (L > MOE_PATTERN_MAX)
        return mtc_error(U, "%s: %d layers (mtc's MoE layer pattern holds %d)", path, L,
                         MOE_PATTERN_MAX);
    mc->num_experts = E;
    mc->ffn_hidden_size = jget(j, "moe_intermediate_size", 2048, &bad);
    mc->topk = jget(j, "num_experts_per_tok", 8, &bad);
    mc->shared_ffn = jget(j, "n_shared_experts", 0, &bad) * mc->ffn_hidden_size;
    mc->score = MOE_SCORE_SIGMOID;
    mc->expert_bias = 1;
    mc->topk_scaling = jgetf(j, "routed_scaling_factor", 1, &bad);
    int G = jget(j, "n_group", 1, &bad), TG = jget(j, "topk_group", 1, &bad);
    mc->pattern_len = L;
    for (int l = 0; l < L; l++)
        mc->pattern[l] = (uint8_t)(l >= k0);
    if (bad || mc->topk < 1 || mc->topk > E)
        return mtc_error(FM,
                         "%s: an MoE field (moe_intermediate_size, num_experts_per_tok, "
                         "n_shared_experts, routed_scaling_factor, n_group, topk_group) is "
                         "not a count its layers can hold",
                         path);
    int norm = !cJSON_IsFalse(cJSON_GetObjectItem(j, "norm_topk_prob"));
    if (norm != (mc->topk > 1))
        return mtc_error(U,
                         "%s: norm_topk_prob %s with %d experts per token (Megatron's sigmoid "
                         "router renormalises the top k exactly when k > 1)",
                         path, norm ? "true" : "false", mc->topk);
    if (G > 1 && TG < G) {
        if (TG < 1 || E % G || mc->topk != 2 * TG)
            return mtc_error(U,
                             "%s: n_group %d, topk_group %d with %d experts per token (mtc ranks "
                             "groups by their top num_experts_per_tok / topk_group scores, HF by "
                             "the top 2: they agree when num_experts_per_tok = 2 topk_group)",
                             path, G, TG, mc->topk);
        mc->num_groups = G, mc->group_topk = TG;
    }
    if (mtc_moe_validate(mc, L, c->ffn_hidden_size, 1, 0, 1, 1, 0) != MTC_OK)
        return mtc_error(FM, "%s: %s", path, mtc_error_detail());
    return MTC_OK;
}
