/* ckpt/gguf.c - GGUF export; see gguf.h.
 *
 *   header | key/values | tensor infos | pad to 32 | tensor 0 | pad | tensor 1 ...
 *
 * Limitations: F32 / F16 only (no quantisation); the whole model in memory.
 * Without merges (byte and char vocabularies) llama.cpp tokenizes text byte
 * by byte, which is exactly mtc's byte tokenizer and a char one whose text
 * is single-byte characters. */
#include "ckpt/gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/gguf_internal.h"
#include "core/outfile.h"
#include "model/family.h"

uint16_t mtc_gguf_f32_to_f16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t sign = (u >> 16) & 0x8000, e = (u >> 23) & 0xff, m = u & 0x7fffff;
    if (e == 0xff) return (uint16_t)(sign | 0x7c00 | (m ? 0x200 : 0));
    int ne = (int)e - 127 + 15;
    if (ne >= 0x1f) return (uint16_t)(sign | 0x7c00);
    if (ne <= 0) { /* subnormal or zero */
        if (ne < -10) return (uint16_t)sign;
        m |= 0x800000;
        int shift = 14 - ne;
        uint32_t half = m >> shift, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)ne << 10) | (m >> 13), rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++; /* may carry into the exponent */
    return (uint16_t)half;
}

/* GPT-2's byte-to-unicode character of byte b, as UTF-8 into s (NUL-ended). */
static void byte_char(int b, char *s) {
    int cp;
    if ((b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)) {
        cp = b;
    } else { /* the others in order, from 256 */
        int n = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= '!' && x <= '~') || (x >= 0xa1 && x <= 0xac) || (x >= 0xae && x <= 0xff)))
                n++;
        cp = 256 + n;
    }
    if (cp < 0x80) {
        s[0] = (char)cp, s[1] = 0;
    } else {
        s[0] = (char)(0xc0 | (cp >> 6)), s[1] = (char)(0x80 | (cp & 0x3f)), s[2] = 0;
    }
}

/* The byte of each token (-1: an id-only token) from mtc's serialized tokenizer. */
static void token_bytes(const char *tok, int V, int *byte_of) {
    for (int i = 0; i < V; i++)
        byte_of[i] = -1;
    if (tok && !strcmp(tok, "byte")) {
        for (int i = 0; i < V && i < 256; i++)
            byte_of[i] = i;
    } else if (tok && !strncmp(tok, "char:", 5)) {
        const char *h = tok + 5;
        for (int i = 0; i < V && h[0] && h[1]; i++, h += 2) {
            unsigned v;
            if (sscanf(h, "%2x", &v) != 1) break;
            byte_of[i] = (int)v;
        }
    }
}

/* The llama.cpp architecture of a Llama-family model: "deepseek2" for
 * multi-latent attention; "qwen3" / "qwen3moe" with --qk-layernorm (q/k
 * norms, NeoX RoPE: no row permutation); for an MoE model with a shared
 * expert "qwen2moe" (experts in every layer; NeoX RoPE) or "deepseek"
 * (DeepSeekMoE: ungated shared experts, leading dense layers); else "llama"
 * (experts or not). */
static const char *gguf_arch(const mtc_model_config *c) {
    if (c->mla.enabled) return "deepseek2"; /* ckpt/gguf_mla.c */
    if (!model_family_is_llama(c)) return "gpt2";
    if (c->qk_layernorm) return c->moe.num_experts > 0 ? "qwen3moe" : "qwen3";
    if (c->moe.num_experts > 0 && c->moe.shared_ffn > 0)
        return mtc_moe_num_layers(&c->moe, c->num_layers) == c->num_layers ? "qwen2moe"
                                                                           : "deepseek";
    return "llama";
}

/* What llama.cpp's MoE architectures compute: llama (Mixtral's block) and
 * qwen3moe (the same with q/k norms) have experts in every layer, a softmax
 * router whose top-k weights are renormalised (the default Megatron router)
 * and no shared expert; deepseek (DeepSeekMoE) has leading dense layers, a
 * softmax router whose top-k weights are not renormalised
 * (--moe-router-pre-softmax) and shared experts of the routed experts' size,
 * added ungated; qwen2moe (Qwen2-MoE) has experts in every layer, a softmax
 * router without renormalisation (--moe-router-pre-softmax) and a shared
 * expert of any width scaled by sigmoid(gate . x), which llama.cpp computes
 * as silu(z) / z: a zero gate (mtc's ungated expert, as ckpt/hf_moe.c
 * writes it) would give 0 / 0, so the gate is 2^-64 in every channel (z is
 * then 2^-64 sum(x), never 0 for a normalised hidden state, and
 * sigmoid(z) = 1/2 in float) and ffn_down_shexp is stored doubled. */
static mtc_result_t gguf_moe_check(const mtc_model_config *c) {
    const mtc_moe_config *mc = &c->moe;
    const mtc_result_t U = MTC_ERR_UNSUPPORTED;
    if (mc->num_experts == 0) return MTC_OK;
    if (mc->score != MOE_SCORE_SOFTMAX || mc->expert_bias || mc->num_groups > 0 ||
        (mc->topk_scaling > 0 && mc->topk_scaling != 1.0f) || mc->capacity_factor > 0)
        return mtc_error(U, "llama.cpp's MoE architectures route with a softmax, dropless; this "
                            "router differs (--moe-router-score-function sigmoid, "
                            "--moe-router-enable-expert-bias, --moe-router-num-groups, "
                            "--moe-router-topk-scaling-factor or --moe-expert-capacity-factor)");
    if (mc->shared_ffn) {
        int64_t EF = mtc_model_moe_ffn(c);
        if (c->qk_layernorm)
            return mtc_error(U, "--qk-layernorm with a shared expert: llama.cpp's qwen3moe has no "
                                "shared expert and its deepseek no q/k norms (export as "
                                "safetensors or onnx)");
        if (!mc->pre_softmax)
            return mtc_error(U, "a shared expert goes to llama.cpp's qwen2moe or deepseek, whose "
                                "routers do not renormalise the top-k weights: train with "
                                "--moe-router-pre-softmax (or export as safetensors or onnx)");
        if (mtc_moe_num_layers(mc, c->num_layers) == c->num_layers) return MTC_OK; /* qwen2moe */
        if (mc->shared_ffn % EF)
            return mtc_error(U,
                             "moe-shared-expert-intermediate-size=%d: llama.cpp's deepseek "
                             "holds shared experts of the routed ones' size (a multiple of "
                             "--moe-ffn-hidden-size %lld)",
                             mc->shared_ffn, (long long)EF);
        if (mtc_moe_dense_lead(&c->moe, c->num_layers) < 0)
            return mtc_error(U, "llama.cpp's deepseek has dense layers only before the first MoE "
                                "layer; this model's --moe-layer-freq puts one after (export as "
                                "safetensors or onnx)");
        return MTC_OK;
    }
    if (mc->pre_softmax)
        return mtc_error(U, "llama.cpp's llama / qwen3moe renormalise the top-k router weights; "
                            "--moe-router-pre-softmax does not (export as safetensors or onnx)");
    if (mtc_moe_num_layers(mc, c->num_layers) != c->num_layers)
        return mtc_error(U, "llama.cpp's llama and qwen3moe have experts in every layer; this "
                            "model has dense layers (--moe-layer-freq) and no shared expert: "
                            "export it as safetensors or onnx");
    return MTC_OK;
}

static mtc_result_t table(const mtc_model *m, gg_tensor *t, int *n) {
    const mtc_model_config *c = &m->cfg;
    const mtc_registry *r = &m->reg;
    int V = c->vocab_size, k = 0, llama = model_family_is_llama(c);
    char q[128];
#define T(nm, p, a, b, h)                                                                          \
    do {                                                                                           \
        int p_ = (p);                                                                              \
        if (p_ < 0) return mtc_error(MTC_ERR_INTERNAL, "no parameter for %s", nm);                 \
        snprintf(t[k].name, sizeof t[k].name, "%s", nm);                                           \
        t[k].param = p_, t[k].r0 = (a), t[k].nrows = (b) < 0 ? r->params[p_].shape[0] : (b);       \
        t[k].heads = (h), k++;                                                                     \
    } while (0)
#define F(fmt, l) (snprintf(q, sizeof q, fmt, l), mtc_registry_find(r, q))
    char nm[64];
    /* MTP depths are training-only: llama.cpp runs the main model (its
     * converter drops DeepSeek-V3's too), so they are left out */
    if (c->mla.enabled) {
        MTC_CHECK(gguf_mla_table(m, t, &k));
        *n = k;
        return MTC_OK;
    }
    if (c->qk_layernorm && !llama)
        return mtc_error(MTC_ERR_UNSUPPORTED, "--qk-layernorm: llama.cpp's gpt2 has no q/k norms "
                                              "(its qwen3 takes Llama-style models)");
    if (!llama) {
        if (c->disable_bias_linear || c->add_qkv_bias || c->untie_embeddings ||
            mtc_model_groups(c) != c->num_heads || c->kv_channels)
            return mtc_error(MTC_ERR_UNSUPPORTED,
                             "llama.cpp's gpt2 has biases, a tied head and no grouped-query "
                             "attention: this model differs");
        T("token_embd.weight", mtc_registry_find(r, "transformer.wte.weight"), 0, V, 0);
        T("position_embd.weight", mtc_registry_find(r, "transformer.wpe.weight"), 0, -1, 0);
        static const char *G[][2] = {
            {"attn_norm.weight", "ln_1.weight"},          {"attn_norm.bias", "ln_1.bias"},
            {"attn_qkv.weight", "attn.c_attn.weight"},    {"attn_qkv.bias", "attn.c_attn.bias"},
            {"attn_output.weight", "attn.c_proj.weight"}, {"attn_output.bias", "attn.c_proj.bias"},
            {"ffn_norm.weight", "ln_2.weight"},           {"ffn_norm.bias", "ln_2.bias"},
            {"ffn_up.weight", "mlp.c_fc.weight"},         {"ffn_up.bias", "mlp.c_fc.bias"},
            {"ffn_down.weight", "mlp.c_proj.weight"},     {"ffn_down.bias", "mlp.c_proj.bias"}};
        for (int l = 0; l < c->num_layers; l++)
            for (size_t j = 0; j < sizeof G / sizeof G[0]; j++) {
                snprintf(nm, sizeof nm, "blk.%d.%s", l, G[j][0]);
                char src[96];
                snprintf(src, sizeof src, "transformer.h.%d.%s", l, G[j][1]);
                T(nm, mtc_registry_find(r, src), 0, -1, 0);
            }
        T("output_norm.weight", mtc_registry_find(r, "transformer.ln_f.weight"), 0, -1, 0);
        T("output_norm.bias", mtc_registry_find(r, "transformer.ln_f.bias"), 0, -1, 0);
        *n = k;
        return MTC_OK;
    }
    MTC_CHECK(gguf_moe_check(c));
    int qwen2 = !strcmp(gguf_arch(c), "qwen2moe");
    if (c->normalization != MTC_NORM_RMSNORM || c->position_embedding != MTC_POS_ROPE ||
        !c->swiglu || !c->disable_bias_linear || (c->add_qkv_bias && !qwen2) ||
        c->rotary_interleaved || (c->rotary_percent > 0 && c->rotary_percent != 1.0f))
        return mtc_error(MTC_ERR_UNSUPPORTED,
                         "llama.cpp's llama has RMSNorm, RoPE on whole heads, SwiGLU and no "
                         "biases: this model differs");
    int64_t HS = mtc_model_head_size(c), QD = c->num_heads * HS, KD = mtc_model_groups(c) * HS;
    int64_t FF = c->ffn_hidden_size;
    int neox = c->qk_layernorm || qwen2; /* qwen3 / qwen3moe / qwen2moe rotate halves, as mtc */
    T("token_embd.weight", mtc_registry_find(r, "model.embed_tokens.weight"), 0, V, 0);
    for (int l = 0; l < c->num_layers; l++) {
        int qkv = F("model.layers.%d.self_attn.qkv_proj.weight", l);
        int gu = F("model.layers.%d.mlp.gate_up_proj.weight", l);
#define B(s) (snprintf(nm, sizeof nm, "blk.%d.%s", l, s), nm)
        T(B("attn_norm.weight"), F("model.layers.%d.input_layernorm.weight", l), 0, -1, 0);
        T(B("attn_q.weight"), qkv, 0, QD, neox ? 0 : c->num_heads);
        T(B("attn_k.weight"), qkv, QD, KD, neox ? 0 : mtc_model_groups(c));
        T(B("attn_v.weight"), qkv, QD + KD, KD, 0);
        int qb = F("model.layers.%d.self_attn.qkv_proj.bias", l);
        if (qwen2 && qb >= 0) { /* --add-qkv-bias: Qwen2's q/k/v biases */
            T(B("attn_q.bias"), qb, 0, QD, 0);
            T(B("attn_k.bias"), qb, QD, KD, 0);
            T(B("attn_v.bias"), qb, QD + KD, KD, 0);
        }
        T(B("attn_output.weight"), F("model.layers.%d.self_attn.o_proj.weight", l), 0, -1, 0);
        if (c->qk_layernorm) {
            T(B("attn_q_norm.weight"), F("model.layers.%d.self_attn.q_norm.weight", l), 0, -1, 0);
            T(B("attn_k_norm.weight"), F("model.layers.%d.self_attn.k_norm.weight", l), 0, -1, 0);
        }
        T(B("ffn_norm.weight"), F("model.layers.%d.post_attention_layernorm.weight", l), 0, -1, 0);
        if (c->moe.num_experts > 0 && mtc_moe_is_layer(&c->moe, l)) { /* gguf_moe_check */
            static const char *EX[2] = {"model.layers.%d.mlp.experts.%d.gate_up_proj.weight",
                                        "model.layers.%d.mlp.experts.%d.down_proj.weight"};
            static const char *GN[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight",
                                        "ffn_down_exps.weight"};
            T(B("ffn_gate_inp.weight"), F("model.layers.%d.mlp.router.weight", l), 0, -1, 0);
            int64_t EF = mtc_model_moe_ffn(c);
            for (int j = 0; j < 3; j++) {
                char e0[128];
                snprintf(e0, sizeof e0, EX[j / 2], l, 0);
                T(B(GN[j]), mtc_registry_find(r, e0), j == 1 ? EF : 0, j < 2 ? EF : -1, 0);
                t[k - 1].nexp = c->moe.num_experts, t[k - 1].layer = l;
                snprintf(t[k - 1].efmt, sizeof t[k - 1].efmt, "%s", EX[j / 2]);
            }
            if (c->moe.shared_ffn) { /* deepseek: ungated, gate | up rows of gate_up_proj */
                int64_t SF = c->moe.shared_ffn;
                int sgu = F("model.layers.%d.mlp.shared_expert.gate_up_proj.weight", l);
                T(B("ffn_gate_shexp.weight"), sgu, 0, SF, 0);
                T(B("ffn_up_shexp.weight"), sgu, SF, SF, 0);
                T(B("ffn_down_shexp.weight"),
                  F("model.layers.%d.mlp.shared_expert.down_proj.weight", l), 0, -1, 0);
                if (qwen2) { /* the gate's 1/2 (gguf_moe_check says why) */
                    t[k - 1].scale = 2.0f;
                    T(B("ffn_gate_inp_shexp.weight"), sgu, 0, c->hidden_size, 0);
                    t[k - 1].kind = GG_FILL, t[k - 1].value = 0x1p-64f;
                }
            }
            continue;
        }
        T(B("ffn_gate.weight"), gu, 0, FF, 0);
        T(B("ffn_up.weight"), gu, FF, FF, 0);
        T(B("ffn_down.weight"), F("model.layers.%d.mlp.down_proj.weight", l), 0, -1, 0);
#undef B
    }
    T("output_norm.weight", mtc_registry_find(r, "model.norm.weight"), 0, -1, 0);
    if (c->untie_embeddings)
        T("output.weight", mtc_registry_find(r, "lm_head.weight"), 0, V, 0);
    else if (!strcmp(gguf_arch(c), "deepseek") || qwen2) /* output not optional: a tied copy */
        T("output.weight", mtc_registry_find(r, "model.embed_tokens.weight"), 0, V, 0);
#undef T
#undef F
    *n = k;
    return MTC_OK;
}

/* GGUF dims of entry e, fastest first (ne[nd..2] = 1); returns nd. */
static int gg_dims(const mtc_registry *r, const gg_tensor *e, int64_t ne[3]) {
    ne[0] = ne[1] = ne[2] = 1;
    const mtc_param *p = &r->params[e->param];
    int64_t cols = p->ndim == 2 ? p->shape[1] : 1;
    switch (e->kind) {
    case GG_FILL: ne[0] = e->nrows; return 1;
    case GG_KB: ne[0] = e->dn, ne[1] = cols, ne[2] = e->nh; return 3;
    case GG_VB: ne[0] = cols, ne[1] = e->dv, ne[2] = e->nh; return 3;
    default: break;
    }
    if (p->ndim != 2) {
        ne[0] = e->nrows;
        return 1;
    }
    ne[0] = cols, ne[1] = e->nrows, ne[2] = e->nexp > 0 ? e->nexp : 1;
    return e->nexp > 0 ? 3 : 2;
}

/* The data of a GG_KB / GG_VB / GG_FILL entry into buf (the dims' product). */
static void gg_special(const mtc_model *m, const gg_tensor *e, float *buf) {
    const mtc_param *p = &m->reg.params[e->param];
    const float *w = m->params + p->offset;
    int64_t KL = p->ndim == 2 ? p->shape[1] : 1, hs = e->dn + e->dv;
    if (e->kind == GG_FILL) {
        for (int64_t i = 0; i < e->nrows; i++)
            buf[i] = e->value;
    } else if (e->kind == GG_KB) { /* head h: (KL, dn) = its k_nope rows transposed */
        for (int h = 0; h < e->nh; h++)
            for (int64_t rr = 0; rr < KL; rr++)
                for (int c = 0; c < e->dn; c++)
                    buf[((int64_t)h * KL + rr) * e->dn + c] = w[(h * hs + c) * KL + rr];
    } else { /* GG_VB, head h: (dv, KL) = its v rows */
        for (int h = 0; h < e->nh; h++)
            memcpy(buf + (int64_t)h * e->dv * KL, w + (h * hs + e->dn) * KL,
                   (size_t)(e->dv * KL) * sizeof(float));
    }
}

mtc_result_t mtc_gguf_export(const mtc_model *m, const char *tokenizer, const char *path,
                             const mtc_gguf_export_opts *o) {
    const mtc_model_config *c = &m->cfg;
    const mtc_registry *r = &m->reg;
    int llama = model_family_is_llama(c), f16 = o && o->f16, V = c->vocab_size, nt = 0;
    const mtc_gguf_vocab *vo = o ? o->vocab : NULL;
    if (vo && vo->n_tokens != V)
        return mtc_error(MTC_ERR_INTERNAL, "GGUF vocabulary of %d tokens for a model of %d",
                         vo->n_tokens, V);
    gg_tensor *t = calloc((size_t)(24 * c->num_layers + 8), sizeof *t);
    int *byte_of = calloc((size_t)V, sizeof(int));
    if (!t || !byte_of) {
        free(t), free(byte_of);
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "GGUF tables");
    }
    mtc_result_t rc = table(m, t, &nt);
    mtc_outfile of; /* a temporary beside path, fsync, rename (core/outfile.h) */
    if (rc == MTC_OK) rc = mtc_outfile_open(&of, path, "--out");
    gg_out out = {rc == MTC_OK ? of.f : NULL, 1};
    if (rc != MTC_OK) {
        free(t), free(byte_of);
        return rc;
    }
    const char *arch = gguf_arch(c);
    char k[96];
    /* general: 3; the architecture's: 7 or 13 (file_type included), 3 more for
     * experts; tokenizer: 9 */
    int moe = c->moe.num_experts > 0, mla = c->mla.enabled;
    int deepseek = !strcmp(arch, "deepseek"), qwen2 = !strcmp(arch, "qwen2moe");
    int nkv =
        3 + (mla ? gguf_mla_nkv(c) + 1 : (llama ? 13 : 7) + 3 * moe + 3 * deepseek + qwen2) + 9;
    if (vo && vo->model && !strcmp(vo->model, "llama"))
        nkv--; /* no merges (pre: add_space_prefix) */
    nkv += (vo && vo->scores) + (vo && vo->has_unk);
    put(&out, "GGUF", 4);
    put_u32(&out, 3);
    put_u64(&out, (uint64_t)nt);
    put_u64(&out, (uint64_t)nkv);
    kv_str(&out, "general.architecture", arch);
    kv_str(&out, "general.name", "mtc");
    kv_u32(&out, "general.alignment", ALIGN);
#define KA(s) (snprintf(k, sizeof k, "%s.%s", arch, s), k)
    if (mla)
        gguf_mla_kv(&out, c);
    else {
        kv_u32(&out, KA("context_length"), (uint32_t)c->max_position_embeddings);
        kv_u32(&out, KA("embedding_length"), (uint32_t)c->hidden_size);
        kv_u32(&out, KA("feed_forward_length"), /* an MoE model's: the experts' (deepseek: dense) */
               (uint32_t)(moe && !deepseek ? mtc_model_moe_ffn(c) : c->ffn_hidden_size));
        if (moe) {
            kv_u32(&out, KA("expert_count"), (uint32_t)c->moe.num_experts);
            kv_u32(&out, KA("expert_used_count"), (uint32_t)mtc_moe_topk(&c->moe));
            kv_u32(&out, KA("expert_feed_forward_length"), (uint32_t)mtc_model_moe_ffn(c));
        }
        if (deepseek) {
            kv_u32(&out, KA("leading_dense_block_count"),
                   (uint32_t)mtc_moe_dense_lead(&c->moe, c->num_layers));
            kv_u32(&out, KA("expert_shared_count"),
                   (uint32_t)(c->moe.shared_ffn / mtc_model_moe_ffn(c)));
            kv_f32(&out, KA("expert_weights_scale"), 1.0f);
        }
        if (qwen2)
            kv_u32(&out, KA("expert_shared_feed_forward_length"), (uint32_t)c->moe.shared_ffn);
        kv_u32(&out, KA("block_count"), (uint32_t)c->num_layers);
        kv_u32(&out, KA("attention.head_count"), (uint32_t)c->num_heads);
        if (llama) {
            kv_u32(&out, KA("attention.head_count_kv"), (uint32_t)mtc_model_groups(c));
            kv_f32(&out, KA("attention.layer_norm_rms_epsilon"), mtc_model_norm_eps(c));
            kv_u32(&out, KA("rope.dimension_count"), (uint32_t)mtc_model_head_size(c));
            kv_f32(&out, KA("rope.freq_base"), c->rotary_base > 0 ? c->rotary_base : 10000.0f);
            kv_u32(&out, KA("vocab_size"), (uint32_t)V);
            kv_u32(&out, KA("attention.key_length"), (uint32_t)mtc_model_head_size(c));
            kv_u32(&out, KA("attention.value_length"), (uint32_t)mtc_model_head_size(c));
        } else {
            kv_f32(&out, KA("attention.layer_norm_epsilon"), mtc_model_norm_eps(c));
            kv_u32(&out, "general.file_type", f16 ? 1 : 0);
        }
    }
#undef KA
    if (llama || mla) kv_u32(&out, "general.file_type", f16 ? 1 : 0);
    /* the vocabulary: byte-level BPE without merges */
    int spm = vo && vo->model && !strcmp(vo->model, "llama");
    kv_str(&out, "tokenizer.ggml.model", vo && vo->model ? vo->model : "gpt2");
    if (!spm) kv_str(&out, "tokenizer.ggml.pre", vo && vo->pre ? vo->pre : "gpt-2");
    if (spm) kv_bool(&out, "tokenizer.ggml.add_space_prefix", vo->add_space_prefix);
    if (vo && vo->scores) {
        put_str(&out, "tokenizer.ggml.scores");
        put_u32(&out, G_ARR), put_u32(&out, G_F32), put_u64(&out, (uint64_t)V);
        for (int i = 0; i < V; i++)
            put(&out, &vo->scores[i], 4);
    }
    if (vo && vo->has_unk) kv_u32(&out, "tokenizer.ggml.unknown_token_id", (uint32_t)vo->unk);
    token_bytes(tokenizer, V, byte_of);
    put_str(&out, "tokenizer.ggml.tokens");
    put_u32(&out, G_ARR), put_u32(&out, G_STR), put_u64(&out, (uint64_t)V);
    for (int i = 0; i < V; i++) {
        char s[32];
        if (vo)
            put_str(&out, vo->tokens[i]);
        else if (byte_of[i] >= 0)
            byte_char(byte_of[i], s), put_str(&out, s);
        else
            snprintf(s, sizeof s, "<%d>", i), put_str(&out, s);
    }
    put_str(&out, "tokenizer.ggml.token_type");
    put_u32(&out, G_ARR), put_u32(&out, G_I32), put_u64(&out, (uint64_t)V);
    for (int i = 0; i < V; i++)
        put_u32(&out, vo ? (uint32_t)vo->types[i] : MTC_GGUF_TOKEN_NORMAL);
    size_t n_merges = vo ? vo->n_merges : 0;
    if (!spm) {
        put_str(&out, "tokenizer.ggml.merges");
        put_u32(&out, G_ARR), put_u32(&out, G_STR), put_u64(&out, (uint64_t)n_merges);
        for (size_t i = 0; i < n_merges; i++)
            put_str(&out, vo->merges[i]);
    }
    kv_u32(&out, "tokenizer.ggml.bos_token_id", vo && vo->bos >= 0 ? (uint32_t)vo->bos : 0);
    kv_u32(&out, "tokenizer.ggml.eos_token_id", vo && vo->eos >= 0 ? (uint32_t)vo->eos : 0);
    kv_bool(&out, "tokenizer.ggml.add_bos_token", 0);
    kv_bool(&out, "tokenizer.ggml.add_eos_token", 0);
    /* tensor infos */
    uint64_t off = 0;
    size_t maxn = 1;
    for (int i = 0; i < nt; i++) {
        int64_t ne[3];
        int nd = gg_dims(r, &t[i], ne), half = nd > 1 && f16;
        put_str(&out, t[i].name);
        put_u32(&out, (uint32_t)nd);
        for (int d = 0; d < nd; d++)
            put_u64(&out, (uint64_t)ne[d]);
        put_u32(&out, half ? 1 : 0);
        put_u64(&out, off);
        size_t n = (size_t)ne[0] * (size_t)ne[1] * (size_t)ne[2];
        off += ((uint64_t)n * (half ? 2 : 4) + ALIGN - 1) / ALIGN * ALIGN;
        if (n > maxn) maxn = n;
    }
    long at = ftell(out.f);
    static const char zeros[ALIGN];
    put(&out, zeros, (size_t)((ALIGN - at % ALIGN) % ALIGN));
    float *buf = malloc(maxn * sizeof(float));
    uint16_t *h = malloc(maxn * sizeof(uint16_t));
    if (!buf || !h) out.ok = 0;
    for (int i = 0; out.ok && i < nt; i++) {
        int64_t dims[3];
        int nd = gg_dims(r, &t[i], dims), half = nd > 1 && f16;
        if (t[i].kind != GG_PLAIN) { /* deepseek2's k_b / v_b, qwen2moe's gate */
            gg_special(m, &t[i], buf);
            size_t n = (size_t)dims[0] * (size_t)dims[1] * (size_t)dims[2];
            size_t bytes = n * (half ? 2 : 4);
            if (half) {
                for (size_t j = 0; j < n; j++)
                    h[j] = mtc_gguf_f32_to_f16(buf[j]);
                put(&out, h, bytes);
            } else {
                put(&out, buf, bytes);
            }
            put(&out, zeros, (ALIGN - bytes % ALIGN) % ALIGN);
            continue;
        }
        const mtc_param *p = &r->params[t[i].param];
        int two = p->ndim == 2, ne = t[i].nexp > 0 ? t[i].nexp : 1;
        int64_t cols = two ? p->shape[1] : 1, rows = t[i].nrows;
        int64_t hd = t[i].heads > 0 ? rows / t[i].heads : 0;
        for (int e = 0; e < ne; e++) {
            if (t[i].nexp > 0) { /* expert e's own parameter */
                char q[128];
                snprintf(q, sizeof q, t[i].efmt, t[i].layer, e);
                int pe = mtc_registry_find(r, q);
                if (pe < 0) {
                    out.ok = 0;
                    break;
                }
                p = &r->params[pe];
            }
            const float *src = m->params + p->offset + (size_t)(t[i].r0 * cols);
            float *dst = buf + (size_t)e * (size_t)(rows * cols);
            for (int64_t rr = 0; rr < rows; rr++) {
                int64_t from = rr;
                if (hd) { /* rows of a head: new 2j = old j, new 2j+1 = old j + hd/2 */
                    int64_t head = rr / hd, j = rr % hd;
                    from = head * hd + (j % 2 ? j / 2 + hd / 2 : j / 2);
                }
                memcpy(dst + rr * cols, src + from * cols, (size_t)cols * sizeof(float));
                for (int64_t cc = 0; t[i].scale != 0 && cc < cols; cc++)
                    dst[rr * cols + cc] *= t[i].scale;
            }
        }
        size_t n = (size_t)(rows * cols) * (size_t)ne, bytes = n * (half ? 2 : 4);
        if (half) {
            for (size_t j = 0; j < n; j++)
                h[j] = mtc_gguf_f32_to_f16(buf[j]);
            put(&out, h, bytes);
        } else {
            put(&out, buf, bytes);
        }
        put(&out, zeros, (ALIGN - bytes % ALIGN) % ALIGN);
    }
    free(buf), free(h), free(t), free(byte_of);
    if (!out.ok) {
        int e = errno;
        mtc_outfile_abort(&of);
        return mtc_error(MTC_ERR_IO, "writing %s failed: %s (nothing was replaced)", path,
                         strerror(e));
    }
    return mtc_outfile_commit(&of);
}
