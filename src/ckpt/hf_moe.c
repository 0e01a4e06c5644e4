/* ckpt/hf_moe.c - Llama-family mixture-of-experts models as Hugging Face's
 * MixtralForCausalLM, Qwen2MoeForCausalLM and Qwen3MoeForCausalLM (export
 * and import tables, config.json fields); used by ckpt/hf.c through
 * hf_internal.h.
 *
 *   mtc (registry)            Mixtral                 Qwen2-MoE / Qwen3-MoE
 *   mlp.router (E, C)         block_sparse_moe.gate   mlp.gate
 *   experts.e.gate_up_proj    ..experts.e.w1 | w3     mlp.experts.e.gate_proj | up_proj
 *   experts.e.down_proj       ..experts.e.w2          mlp.experts.e.down_proj
 *   shared_expert.gate_up     -                       Qwen2: mlp.shared_expert.gate | up_proj
 *   shared_expert.down_proj   -                       Qwen2: 2 x mlp.shared_expert.down_proj
 *   -                         -                       Qwen2: mlp.shared_expert_gate = 0
 *   qkv bias (--add-qkv-bias) -                       Qwen2: self_attn.q/k/v_proj.bias (else 0)
 *   self_attn.q/k_norm        -                       Qwen3: self_attn.q_norm / k_norm
 *
 * Qwen2-MoE scales its shared expert by sigmoid(shared_expert_gate(x)),
 * which mtc's model does not have: a zero gate gives exactly 1/2, so the
 * down projection is stored doubled (exact in binary) and import requires a
 * zero gate. Qwen3-MoE has no shared expert and no q/k/v-only biases, and
 * needs --qk-layernorm (Megatron's per-head norm of q and k before RoPE is
 * its q_norm / k_norm); the other two refuse a model with q/k norms.
 * Routing: Megatron's softmax router with top-k after the softmax
 * (--moe-router-pre-softmax) is the Qwens' norm_topk_prob false, the default
 * (softmax over the top-k logits) is Mixtral's and norm_topk_prob true.
 * Anything else a router does at inference (sigmoid scores, the expert bias,
 * group-limited routing, a top-k scaling factor, capacity dropping) has no
 * field in these classes and is refused by name. Training-only settings
 * (the load-balancing loss coefficient, z-loss) do not change the forward. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/hf_internal.h"
#include "moe/moe.h"

static const char MIXTRAL[] = "MixtralForCausalLM", QWEN2[] = "Qwen2MoeForCausalLM",
                  QWEN3[] = "Qwen3MoeForCausalLM";

static int all_moe(const mtc_model_config *c) {
    return mtc_moe_num_layers(&c->moe, c->num_layers) == c->num_layers;
}

mtc_result_t hf_moe_check(const mtc_model *m, const char *arch, const char **cls,
                          const char **model_type) {
    const mtc_model_config *c = &m->cfg;
    const mtc_moe_config *mc = &c->moe;
    const mtc_result_t U = MTC_ERR_UNSUPPORTED;
    if (mc->score != MOE_SCORE_SOFTMAX)
        return mtc_error(U, "moe-router-score-function=sigmoid: Mixtral and Qwen2-MoE route with "
                            "a softmax (DeepSeek-V3's sigmoid router is not exported yet)");
    if (mc->expert_bias)
        return mtc_error(U, "--moe-router-enable-expert-bias has no field in Mixtral or Qwen2-MoE "
                            "(train without it to export)");
    if (mc->num_groups > 0)
        return mtc_error(U,
                         "moe-router-num-groups=%d (group-limited routing) has no field in "
                         "Mixtral or Qwen2-MoE",
                         mc->num_groups);
    if (mc->topk_scaling > 0 && mc->topk_scaling != 1.0f)
        return mtc_error(U,
                         "moe-router-topk-scaling-factor=%g has no field in Mixtral or "
                         "Qwen2-MoE",
                         (double)mc->topk_scaling);
    if (mc->capacity_factor > 0)
        return mtc_error(U,
                         "moe-expert-capacity-factor=%g drops tokens; Mixtral and Qwen2-MoE "
                         "are dropless (train dropless to export)",
                         (double)mc->capacity_factor);
    int qk = c->qk_layernorm;
    int mixtral_ok = all_moe(c) && mc->shared_ffn == 0 && !mc->pre_softmax && !c->add_qkv_bias;
    if (!arch || !arch[0]) arch = qk ? QWEN3 : mixtral_ok ? MIXTRAL : QWEN2;
    if (!strcmp(arch, QWEN3)) {
        if (!qk)
            return mtc_error(U,
                             "Qwen3MoeForCausalLM normalises q and k per head (q_norm, k_norm), "
                             "which this model's attention does not (train with --qk-layernorm, "
                             "or use --hf-architecture %s or %s)",
                             MIXTRAL, QWEN2);
        if (mc->shared_ffn)
            return mtc_error(U,
                             "Qwen3MoeForCausalLM has no shared expert "
                             "(moe-shared-expert-intermediate-size=%d): train without it to "
                             "export",
                             mc->shared_ffn);
        if (c->add_qkv_bias)
            return mtc_error(U, "Qwen3MoeForCausalLM has no q/k/v biases alone (attention_bias "
                                "adds o_proj's too): train without --add-qkv-bias to export");
        *cls = QWEN3, *model_type = "qwen3_moe";
        return MTC_OK;
    }
    if (qk)
        return mtc_error(U, "--qk-layernorm: %s has no q_norm / k_norm (use --hf-architecture %s)",
                         arch, QWEN3);
    if (!strcmp(arch, MIXTRAL)) {
        if (!all_moe(c))
            return mtc_error(U,
                             "MixtralForCausalLM has experts in every layer; this model has "
                             "dense layers (--moe-layer-freq): use --hf-architecture %s",
                             QWEN2);
        if (mc->shared_ffn)
            return mtc_error(U,
                             "MixtralForCausalLM has no shared expert "
                             "(moe-shared-expert-intermediate-size=%d): use "
                             "--hf-architecture %s",
                             mc->shared_ffn, QWEN2);
        if (mc->pre_softmax)
            return mtc_error(U,
                             "MixtralForCausalLM renormalises the top-k probabilities; "
                             "--moe-router-pre-softmax does not (use --hf-architecture %s, "
                             "norm_topk_prob false)",
                             QWEN2);
        *cls = MIXTRAL, *model_type = "mixtral";
    } else if (!strcmp(arch, QWEN2)) {
        *cls = QWEN2, *model_type = "qwen2_moe";
    } else {
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "hf-architecture=%s is not an MoE class mtc writes (use %s, %s or %s)",
                         arch, MIXTRAL, QWEN2, QWEN3);
    }
    return MTC_OK;
}

mtc_result_t hf_moe_qkv_bias(const mtc_model *m, const char *cls, int l, hf_table *t) {
    (void)cls;
    const mtc_model_config *c = &m->cfg;
    const mtc_registry *r = &m->reg;
    int64_t HS = mtc_model_head_size(c), QD = c->num_heads * HS, KD = mtc_model_groups(c) * HS;
    char n[160], q[160];
    snprintf(q, sizeof q, "model.layers.%d.self_attn.qkv_proj.bias", l);
    int p = mtc_registry_find(r, q);
    static const char *part[3] = {"q", "k", "v"};
    int64_t r0[3] = {0, QD, QD + KD}, nr[3] = {QD, KD, KD};
    for (int k = 0; k < 3; k++) {
        snprintf(n, sizeof n, "model.layers.%d.self_attn.%s_proj.bias", l, part[k]);
        MTC_CHECK(p >= 0 ? hf_table_add(t, r, n, p, r0[k], nr[k], 0)
                         : hf_table_zeros(t, n, nr[k], 0));
    }
    return MTC_OK;
}

mtc_result_t hf_moe_layer(const mtc_model *m, const char *cls, int l, hf_table *t) {
    const mtc_model_config *c = &m->cfg;
    const mtc_registry *r = &m->reg;
    int mix = !strcmp(cls, MIXTRAL), E = c->moe.num_experts;
    int64_t F = mtc_model_moe_ffn(c), C = c->hidden_size, SF = c->moe.shared_ffn;
    char n[160], q[160];
    const char *pre = mix ? "block_sparse_moe" : "mlp";
    snprintf(q, sizeof q, "model.layers.%d.mlp.router.weight", l);
    snprintf(n, sizeof n, "model.layers.%d.%s.gate.weight", l, pre);
    int p = mtc_registry_find(r, q);
    if (p < 0) return mtc_error(MTC_ERR_INTERNAL, "no parameter %s", q);
    MTC_CHECK(hf_table_add(t, r, n, p, 0, -1, 0));
    for (int e = 0; e < E; e++) {
        snprintf(q, sizeof q, "model.layers.%d.mlp.experts.%d.gate_up_proj.weight", l, e);
        int gu = mtc_registry_find(r, q);
        snprintf(q, sizeof q, "model.layers.%d.mlp.experts.%d.down_proj.weight", l, e);
        int dn = mtc_registry_find(r, q);
        if (gu < 0 || dn < 0) return mtc_error(MTC_ERR_INTERNAL, "no expert %d in layer %d", e, l);
        const char *nm[3] = {mix ? "w1" : "gate_proj", mix ? "w3" : "up_proj",
                             mix ? "w2" : "down_proj"};
        for (int k = 0; k < 3; k++) {
            snprintf(n, sizeof n, "model.layers.%d.%s.experts.%d.%s.weight", l, pre, e, nm[k]);
            MTC_CHECK(hf_table_add(t, r, n, k < 2 ? gu : dn, k == 1 ? F : 0, k < 2 ? F : -1, 0));
        }
    }
    if (mix || !strcmp(cls, QWEN3)) return MTC_OK;
    /* Qwen2-MoE always has a shared expert and its gate */
    snprintf(q, sizeof q, "model.layers.%d.mlp.shared_expert.gate_up_proj.weight", l);
    int sgu = mtc_registry_find(r, q);
    snprintf(q, sizeof q, "model.layers.%d.mlp.shared_expert.down_proj.weight", l);
    int sdn = mtc_registry_find(r, q);
    static const char *sn[3] = {"gate_proj", "up_proj", "down_proj"};
    for (int k = 0; k < 3; k++) {
        snprintf(n, sizeof n, "model.layers.%d.mlp.shared_expert.%s.weight", l, sn[k]);
        if (sgu < 0) { /* none: empty tensors, the block adds 0 */
            MTC_CHECK(hf_table_zeros(t, n, k < 2 ? 0 : C, k < 2 ? C : 0));
            continue;
        }
        MTC_CHECK(hf_table_add(t, r, n, k < 2 ? sgu : sdn, k == 1 ? SF : 0, k < 2 ? SF : -1, 0));
        if (k == 2) t->v[t->n - 1].scale = 2.0f; /* sigmoid(0) = 1/2 */
    }
    snprintf(n, sizeof n, "model.layers.%d.mlp.shared_expert_gate.weight", l);
    return hf_table_zeros(t, n, 1, C);
}

void hf_moe_config(const mtc_model *m, const char *cls, cJSON *j) {
    const mtc_model_config *c = &m->cfg;
    const mtc_moe_config *mc = &c->moe;
    int F = mtc_model_moe_ffn(c);
    if (!strcmp(cls, MIXTRAL)) {
        cJSON_ReplaceItemInObject(j, "intermediate_size", cJSON_CreateNumber(F));
        cJSON_AddNumberToObject(j, "num_local_experts", mc->num_experts);
        cJSON_AddNumberToObject(j, "num_experts_per_tok", mtc_moe_topk(mc));
        cJSON_AddNullToObject(j, "sliding_window");
    } else {
        cJSON_AddNumberToObject(j, "num_experts", mc->num_experts);
        cJSON_AddNumberToObject(j, "num_experts_per_tok", mtc_moe_topk(mc));
        cJSON_AddNumberToObject(j, "moe_intermediate_size", F);
        if (!strcmp(cls, QWEN2))
            cJSON_AddNumberToObject(j, "shared_expert_intermediate_size", mc->shared_ffn);
        cJSON_AddBoolToObject(j, "norm_topk_prob", !mc->pre_softmax);
        cJSON_AddNumberToObject(j, "decoder_sparse_step", 1);
        cJSON *dense = cJSON_AddArrayToObject(j, "mlp_only_layers");
        for (int l = 0; l < c->num_layers; l++)
            if (!mtc_moe_is_layer(mc, l)) cJSON_AddItemToArray(dense, cJSON_CreateNumber(l));
        cJSON_AddBoolToObject(j, "use_sliding_window", 0);
        cJSON_AddNullToObject(j, "sliding_window");
        cJSON_AddNumberToObject(j, "max_window_layers", c->num_layers);
    }
    hf_add_float(j, "router_aux_loss_coef", mc->aux_coeff);
    cJSON_AddBoolToObject(j, "output_router_logits", 0);
}

static int jget_int(const cJSON *j, const char *key, int dflt, int *bad) {
    const cJSON *x = cJSON_GetObjectItem(j, key);
    if (!x) return dflt;
    if (!cJSON_IsNumber(x) || x->valuedouble != (double)(int)x->valuedouble || x->valuedouble < 0)
        *bad = 1;
    return cJSON_IsNumber(x) ? (int)x->valuedouble : dflt;
}

mtc_result_t hf_moe_parse(const cJSON *j, const char *path, const char *type, mtc_model_config *c) {
    const mtc_result_t U = MTC_ERR_UNSUPPORTED, F = MTC_ERR_FORMAT;
    mtc_moe_config *mc = &c->moe;
    int bad = 0, L = c->num_layers;
    const cJSON *slide = cJSON_GetObjectItem(j, "use_sliding_window");
    if (cJSON_IsTrue(slide))
        return mtc_error(U, "%s: use_sliding_window (mtc attends to the whole context)", path);
    if (!strcmp(type, "mixtral")) {
        const cJSON *sw = cJSON_GetObjectItem(j, "sliding_window");
        if (cJSON_IsNumber(sw) && sw->valuedouble < c->max_position_embeddings)
            return mtc_error(U, "%s: sliding_window %g (mtc attends to the whole context)", path,
                             sw->valuedouble);
        mc->num_experts = jget_int(j, "num_local_experts", 8, &bad);
        mc->ffn_hidden_size = c->ffn_hidden_size; /* intermediate_size is the experts' */
    } else {
        mc->num_experts = jget_int(j, "num_experts", 60, &bad);
        mc->ffn_hidden_size = jget_int(j, "moe_intermediate_size", 1408, &bad);
        if (strcmp(type, "qwen3_moe")) /* Qwen3-MoE has none */
            mc->shared_ffn = jget_int(j, "shared_expert_intermediate_size", 0, &bad);
        mc->pre_softmax = !cJSON_IsTrue(cJSON_GetObjectItem(j, "norm_topk_prob"));
        int step = jget_int(j, "decoder_sparse_step", 1, &bad);
        if (step < 1) bad = 1;
        if (L > MOE_PATTERN_MAX)
            return mtc_error(U, "%s: %d layers (mtc's MoE layer pattern holds %d)", path, L,
                             MOE_PATTERN_MAX);
        mc->pattern_len = L;
        for (int l = 0; l < L && !bad; l++)
            mc->pattern[l] = (uint8_t)((l + 1) % step == 0);
        const cJSON *only = cJSON_GetObjectItem(j, "mlp_only_layers"), *e;
        cJSON_ArrayForEach(e, only) {
            if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= L) {
                bad = 1;
                break;
            }
            mc->pattern[(int)e->valuedouble] = 0;
        }
        if (!strcmp(type, "qwen3_moe"))
            c->qk_layernorm = 1; /* Qwen3: q_norm / k_norm, no biases */
        else
            c->add_qkv_bias = 1; /* Qwen2's attention has q/k/v biases */
    }
    mc->topk = jget_int(j, "num_experts_per_tok", 2, &bad);
    const cJSON *aux = cJSON_GetObjectItem(j, "router_aux_loss_coef");
    mc->aux_coeff = cJSON_IsNumber(aux) ? (float)aux->valuedouble : 0.0f;
    if (bad)
        return mtc_error(F,
                         "%s: an MoE field (num_experts, num_experts_per_tok, "
                         "moe_intermediate_size, decoder_sparse_step, mlp_only_layers) is not "
                         "a count its layers can hold",
                         path);
    if (mc->num_experts < 1 || mc->topk < 1 || mc->topk > mc->num_experts)
        return mtc_error(F, "%s: %d experts with %d per token", path, mc->num_experts, mc->topk);
    if (mtc_moe_validate(mc, L, c->ffn_hidden_size, 1, 0, 1, 1, 0) != MTC_OK)
        return mtc_error(F, "%s: %s", path, mtc_error_detail());
    return MTC_OK;
}
