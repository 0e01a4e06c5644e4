/* ckpt/gguf_mla.c - multi-latent attention models as llama.cpp's deepseek2
 * architecture (DeepSeek-V2 / V3), in the split form llama.cpp's own
 * converter writes (convert_hf_to_gguf.py, DeepseekV2Model):
 *
 *   blk.N.attn_q_a (QL, C), attn_q_a_norm, attn_q_b (NH Dq, QL)  (or attn_q)
 *   blk.N.attn_kv_a_mqa (KL + dpe, C), attn_kv_a_norm (KL)
 *   blk.N.attn_k_b  dims {dqk, KL, NH}: head h's k_nope rows of kv_b, transposed
 *   blk.N.attn_v_b  dims {KL, dv, NH}:  head h's v rows of kv_b
 *   blk.N.attn_output, ffn_norm; dense layers ffn_gate / up / down; MoE layers
 *   ffn_gate_inp, exp_probs_b.bias (the expert bias), the stacked experts
 *   and ffn_{gate,up,down}_shexp
 *
 * with attention.key_length = KL + dpe and value_length = KL (the absorbed
 * MQA form llama.cpp runs), key_length_mla = dqk + dpe, value_length_mla =
 * dv, head_count_kv 1. No row permutation: mtc's MLA rotation
 * de-interleaves and rotates halves, which pairs channels (2j, 2j+1) as
 * llama.cpp's normal RoPE does (the scores are the same). YaRN as
 * rope.scaling.{type, factor, original_context_length, yarn_beta_fast,
 * yarn_beta_slow, yarn_log_multiplier = 0.1 mscale_all_dim}: llama.cpp puts
 * no factor on cos / sin and scales the scores by (1 + 0.1 mscale_all_dim ln
 * s)^2, which is Megatron's YaRN when the concentration factor
 * mscale(s, mscale) / mscale(s, mscale_all_dim) is 1 (DeepSeek-V3's mscale =
 * mscale_all_dim = 1); otherwise refused. The MTP depths are left out, as
 * llama.cpp's converter leaves DeepSeek-V3's out: inference runs the main
 * model. */
#include <math.h>

#include "ckpt/gguf_internal.h"
#include "model/family.h"
#include "moe/moe.h"
#include "nn/yarn.h"

mtc_result_t gguf_mla_check(const mtc_model_config *c) {
    const mtc_mla_config *a = &c->mla;
    const mtc_moe_config *mc = &c->moe;
    const mtc_result_t U = MTC_ERR_UNSUPPORTED;
    if (c->normalization != MTC_NORM_RMSNORM || !c->swiglu || !c->disable_bias_linear ||
        c->add_qkv_bias || c->position_embedding != MTC_POS_ROPE)
        return mtc_error(U, "llama.cpp's deepseek2 has RMSNorm, SwiGLU, RoPE and no biases: this "
                            "MLA model differs");
    if (!a->latent_norm)
        return mtc_error(U, "llama.cpp's deepseek2 normalises both latents; this MLA model has "
                            "no latent norms (train with --qk-layernorm)");
    nn_yarn_params p = model_mla_yarn_params(a, c->rotary_base);
    if (a->rope_yarn && fabs(nn_yarn_concentration(&p) - 1.0) > 1e-7)
        return mtc_error(U,
                         "mscale=%g with mscale-all-dim=%g puts a factor %g on YaRN's cos / sin, "
                         "which llama.cpp's deepseek2 does not (use --mscale equal to "
                         "--mscale-all-dim, as DeepSeek-V3)",
                         (double)a->mscale, (double)a->mscale_all_dim, nn_yarn_concentration(&p));
    if (!a->rope_yarn && nn_yarn_get_mscale(a->rotary_scaling_factor, a->mscale_all_dim) != 1.0)
        return mtc_error(U, "--rope-type rope with rotary-scaling-factor > 1 and mscale-all-dim "
                            "scales the softmax, which llama.cpp does only with YaRN");
    if (mc->num_experts == 0) return MTC_OK;
    int F = mtc_model_moe_ffn(c), k = mtc_moe_topk(mc);
    if (mtc_moe_dense_lead(&c->moe, c->num_layers) < 0)
        return mtc_error(U, "--moe-layer-freq: llama.cpp's deepseek2 has dense layers only "
                            "before the first MoE layer (leading_dense_block_count)");
    if (mc->shared_ffn % F)
        return mtc_error(U,
                         "moe-shared-expert-intermediate-size=%d is not a multiple of the "
                         "experts' %d (llama.cpp's expert_shared_count)",
                         mc->shared_ffn, F);
    if (mc->num_groups > 0 && mc->group_topk > 0 && mc->group_topk < mc->num_groups &&
        k / mc->group_topk != 2)
        return mtc_error(U,
                         "moe-router-group-topk=%d with topk %d: llama.cpp ranks expert groups "
                         "by their top 2 scores (use topk = 2 x group-topk)",
                         mc->group_topk, k);
    if (mc->capacity_factor > 0)
        return mtc_error(U, "moe-expert-capacity-factor=%g drops tokens; llama.cpp is dropless",
                         (double)mc->capacity_factor);
    return MTC_OK;
}

mtc_result_t gguf_mla_table(const mtc_model *m, gg_tensor *t, int *kk) {
    const mtc_model_config *c = &m->cfg;
    const mtc_registry *r = &m->reg;
    MTC_CHECK(gguf_mla_check(c));
    int k = *kk, V = c->vocab_size, NH = c->num_heads;
    char q[128], nm[64];
#define T(nm_, p, a, b)                                                                            \
    do {                                                                                           \
        int p_ = (p);                                                                              \
        if (p_ < 0) return mtc_error(MTC_ERR_INTERNAL, "no parameter for %s", nm_);                \
        memset(&t[k], 0, sizeof t[k]);                                                             \
        snprintf(t[k].name, sizeof t[k].name, "%s", nm_);                                          \
        t[k].param = p_, t[k].r0 = (a), t[k].nrows = (b) < 0 ? r->params[p_].shape[0] : (b), k++;  \
    } while (0)
#define F(s) (snprintf(q, sizeof q, "model.layers.%d.%s", l, s), mtc_registry_find(r, q))
#define B(s) (snprintf(nm, sizeof nm, "blk.%d.%s", l, s), nm)
    T("token_embd.weight", mtc_registry_find(r, "model.embed_tokens.weight"), 0, V);
    for (int l = 0; l < c->num_layers; l++) {
        T(B("attn_norm.weight"), F("input_layernorm.weight"), 0, -1);
        if (c->mla.q_lora_rank > 0) {
            T(B("attn_q_a.weight"), F("self_attn.q_a_proj.weight"), 0, -1);
            T(B("attn_q_a_norm.weight"), F("self_attn.q_a_layernorm.weight"), 0, -1);
            T(B("attn_q_b.weight"), F("self_attn.q_b_proj.weight"), 0, -1);
        } else {
            T(B("attn_q.weight"), F("self_attn.q_proj.weight"), 0, -1);
        }
        T(B("attn_kv_a_mqa.weight"), F("self_attn.kv_a_proj_with_mqa.weight"), 0, -1);
        T(B("attn_kv_a_norm.weight"), F("self_attn.kv_a_layernorm.weight"), 0, -1);
        int kvb = F("self_attn.kv_b_proj.weight");
        for (int j = 0; j < 2; j++) {
            T(B(j ? "attn_v_b.weight" : "attn_k_b.weight"), kvb, 0, -1);
            t[k - 1].kind = j ? GG_VB : GG_KB, t[k - 1].heads = 0;
            t[k - 1].dn = c->mla.qk_head_dim, t[k - 1].dv = c->mla.v_head_dim;
            t[k - 1].nh = NH;
        }
        T(B("attn_output.weight"), F("self_attn.o_proj.weight"), 0, -1);
        T(B("ffn_norm.weight"), F("post_attention_layernorm.weight"), 0, -1);
        if (c->moe.num_experts == 0 || !mtc_moe_is_layer(&c->moe, l)) {
            int64_t FF = c->ffn_hidden_size;
            int gu = F("mlp.gate_up_proj.weight");
            T(B("ffn_gate.weight"), gu, 0, FF);
            T(B("ffn_up.weight"), gu, FF, FF);
            T(B("ffn_down.weight"), F("mlp.down_proj.weight"), 0, -1);
            continue;
        }
        T(B("ffn_gate_inp.weight"), F("mlp.router.weight"), 0, -1);
        if (F("mlp.router.expert_bias") >= 0)
            T(B("exp_probs_b.bias"), F("mlp.router.expert_bias"), 0, -1);
        static const char *EX[2] = {"model.layers.%d.mlp.experts.%d.gate_up_proj.weight",
                                    "model.layers.%d.mlp.experts.%d.down_proj.weight"};
        static const char *GN[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight",
                                    "ffn_down_exps.weight"};
        int64_t EF = mtc_model_moe_ffn(c);
        for (int j = 0; j < 3; j++) {
            snprintf(q, sizeof q, EX[j / 2], l, 0);
            T(B(GN[j]), mtc_registry_find(r, q), j == 1 ? EF : 0, j < 2 ? EF : -1);
            t[k - 1].nexp = c->moe.num_experts, t[k - 1].layer = l;
            snprintf(t[k - 1].efmt, sizeof t[k - 1].efmt, "%s", EX[j / 2]);
        }
        if (c->moe.shared_ffn > 0) {
            int64_t SF = c->moe.shared_ffn;
            int sgu = F("mlp.shared_expert.gate_up_proj.weight");
            T(B("ffn_gate_shexp.weight"), sgu, 0, SF);
            T(B("ffn_up_shexp.weight"), sgu, SF, SF);
            T(B("ffn_down_shexp.weight"), F("mlp.shared_expert.down_proj.weight"), 0, -1);
        }
    }
    T("output_norm.weight", mtc_registry_find(r, "model.norm.weight"), 0, -1);
    T("output.weight",
      mtc_registry_find(r, c->untie_embeddings ? "lm_head.weight" : "model.embed_tokens.weight"), 0,
      V);
#undef T
#undef F
#undef B
    *kk = k;
    return MTC_OK;
}

int gguf_mla_nkv(const mtc_model_config *c) {
    int moe = c->moe.num_experts > 0;
    return 10 + 10 + 6 * moe + 6 * c->mla.rope_yarn;
}

void gguf_mla_kv(gg_out *out, const mtc_model_config *c) {
    const mtc_mla_config *a = &c->mla;
    const mtc_moe_config *mc = &c->moe;
    int moe = mc->num_experts > 0, F = moe ? mtc_model_moe_ffn(c) : c->ffn_hidden_size;
    /* 10: the shape */
    kv_u32(out, "deepseek2.context_length", (uint32_t)c->max_position_embeddings);
    kv_u32(out, "deepseek2.embedding_length", (uint32_t)c->hidden_size);
    kv_u32(out, "deepseek2.feed_forward_length", (uint32_t)c->ffn_hidden_size);
    kv_u32(out, "deepseek2.block_count", (uint32_t)c->num_layers);
    kv_u32(out, "deepseek2.attention.head_count", (uint32_t)c->num_heads);
    kv_u32(out, "deepseek2.attention.head_count_kv", 1);
    kv_f32(out, "deepseek2.attention.layer_norm_rms_epsilon", mtc_model_norm_eps(c));
    kv_u32(out, "deepseek2.rope.dimension_count", (uint32_t)a->qk_pos_emb_head_dim);
    kv_f32(out, "deepseek2.rope.freq_base", c->rotary_base > 0 ? c->rotary_base : 10000.0f);
    kv_u32(out, "deepseek2.vocab_size", (uint32_t)c->vocab_size);
    /* 10: MLA and the MoE fields llama.cpp requires even for dense models */
    kv_u32(out, "deepseek2.attention.key_length",
           (uint32_t)(a->kv_lora_rank + a->qk_pos_emb_head_dim));
    kv_u32(out, "deepseek2.attention.value_length", (uint32_t)a->kv_lora_rank);
    kv_u32(out, "deepseek2.attention.key_length_mla",
           (uint32_t)(a->qk_head_dim + a->qk_pos_emb_head_dim));
    kv_u32(out, "deepseek2.attention.value_length_mla", (uint32_t)a->v_head_dim);
    kv_u32(out, "deepseek2.attention.q_lora_rank", (uint32_t)a->q_lora_rank);
    kv_u32(out, "deepseek2.attention.kv_lora_rank", (uint32_t)a->kv_lora_rank);
    kv_u32(out, "deepseek2.leading_dense_block_count",
           (uint32_t)mtc_moe_dense_lead(&c->moe, c->num_layers));
    kv_u32(out, "deepseek2.expert_feed_forward_length", (uint32_t)F);
    kv_u32(out, "deepseek2.expert_shared_count", (uint32_t)(moe ? mc->shared_ffn / F : 0));
    kv_f32(out, "deepseek2.expert_weights_scale", mc->topk_scaling > 0 ? mc->topk_scaling : 1.0f);
    if (moe) { /* 6 */
        int sig = mc->score == MOE_SCORE_SIGMOID, k = mtc_moe_topk(mc);
        int grouped = mc->num_groups > 0 && mc->group_topk > 0;
        kv_u32(out, "deepseek2.expert_count", (uint32_t)mc->num_experts);
        kv_u32(out, "deepseek2.expert_used_count", (uint32_t)k);
        kv_u32(out, "deepseek2.expert_gating_func", sig ? 2 : 1); /* llama.cpp's enum */
        /* renormalised as Megatron does: sigmoid with k > 1, softmax unless
         * --moe-router-pre-softmax (softmax over the top-k logits) */
        kv_bool(out, "deepseek2.expert_weights_norm", sig ? k > 1 : !mc->pre_softmax);
        kv_u32(out, "deepseek2.expert_group_count", (uint32_t)(grouped ? mc->num_groups : 1));
        kv_u32(out, "deepseek2.expert_group_used_count", (uint32_t)(grouped ? mc->group_topk : 1));
    }
    if (a->rope_yarn) { /* 6 */
        kv_str(out, "deepseek2.rope.scaling.type", "yarn");
        kv_f32(out, "deepseek2.rope.scaling.factor", a->rotary_scaling_factor);
        kv_u32(out, "deepseek2.rope.scaling.original_context_length",
               (uint32_t)a->original_max_position_embeddings);
        kv_f32(out, "deepseek2.rope.scaling.yarn_log_multiplier", 0.1f * a->mscale_all_dim);
        kv_f32(out, "deepseek2.rope.scaling.yarn_beta_fast", a->beta_fast);
        kv_f32(out, "deepseek2.rope.scaling.yarn_beta_slow", a->beta_slow);
    }
}
