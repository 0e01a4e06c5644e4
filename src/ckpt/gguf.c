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

#include "core/outfile.h"
#include "model/family.h"

enum { G_U32 = 4, G_I32 = 5, G_F32 = 6, G_BOOL = 7, G_STR = 8, G_ARR = 9 };
#define ALIGN 32

typedef struct {
    char name[64];
    int param;
    int64_t r0, nrows;
    int heads; /* > 0: permute rows per head of nrows/heads (RoPE pairs) */
    int nexp;  /* > 0: the experts' tensors stacked, (nexp, nrows, cols); param is
                  expert 0's, expert e's is efmt with (layer, e) */
    int layer;
    char efmt[96];
} gg_tensor;

typedef struct {
    FILE *f;
    int ok;
} gg_out;

static void put(gg_out *o, const void *p, size_t n) {
    if (o->ok && fwrite(p, 1, n, o->f) != n) o->ok = 0;
}
static void put_u32(gg_out *o, uint32_t v) { put(o, &v, 4); }
static void put_u64(gg_out *o, uint64_t v) { put(o, &v, 8); }
static void put_str(gg_out *o, const char *s) {
    put_u64(o, strlen(s));
    put(o, s, strlen(s));
}
static void kv_u32(gg_out *o, const char *k, uint32_t v) {
    put_str(o, k), put_u32(o, G_U32), put_u32(o, v);
}
static void kv_f32(gg_out *o, const char *k, float v) {
    put_str(o, k), put_u32(o, G_F32), put(o, &v, 4);
}
static void kv_str(gg_out *o, const char *k, const char *v) {
    put_str(o, k), put_u32(o, G_STR), put_str(o, v);
}
static void kv_bool(gg_out *o, const char *k, int v) {
    unsigned char b = (unsigned char)(v != 0);
    put_str(o, k), put_u32(o, G_BOOL), put(o, &b, 1);
}

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

/* The llama.cpp architecture of a Llama-family model: "qwen3" / "qwen3moe"
 * with --qk-layernorm (q/k norms, NeoX RoPE: no row permutation),
 * "deepseek" (DeepSeekMoE: ungated shared experts, leading dense layers)
 * for an MoE model with a shared expert, else "llama" (experts or not). */
static const char *gguf_arch(const mtc_model_config *c) {
    if (!model_family_is_llama(c)) return "gpt2";
    if (c->qk_layernorm) return c->moe.num_experts > 0 ? "qwen3moe" : "qwen3";
    if (c->moe.num_experts > 0 && c->moe.shared_ffn > 0) return "deepseek";
    return "llama";
}

/* Dense layers before the first MoE one, -1 when a dense layer follows an
 * MoE one. */
static int dense_lead(const mtc_model_config *c) {
    int k = 0;
    while (k < c->num_layers && !mtc_moe_is_layer(&c->moe, k))
        k++;
    for (int l = k; l < c->num_layers; l++)
        if (!mtc_moe_is_layer(&c->moe, l)) return -1;
    return k;
}

/* What llama.cpp's MoE architectures compute: llama (Mixtral's block) and
 * qwen3moe (the same with q/k norms) have experts in every layer, a softmax
 * router whose top-k weights are renormalised (the default Megatron router)
 * and no shared expert; deepseek (DeepSeekMoE) has leading dense layers, a
 * softmax router whose top-k weights are not renormalised
 * (--moe-router-pre-softmax) and shared experts of the routed experts' size,
 * added ungated. llama.cpp's qwen2moe is not written: it multiplies its
 * shared expert by sigmoid(gate . x) computed as silu(z) / z, so the zero
 * gate that stands for mtc's ungated expert (ckpt/hf_moe.c) gives 0 / 0. */
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
            return mtc_error(U, "a shared expert goes to llama.cpp's deepseek, whose router does "
                                "not renormalise the top-k weights: train with "
                                "--moe-router-pre-softmax (or export as safetensors or onnx)");
        if (mc->shared_ffn % EF)
            return mtc_error(U,
                             "moe-shared-expert-intermediate-size=%d: llama.cpp's deepseek "
                             "holds shared experts of the routed ones' size (a multiple of "
                             "--moe-ffn-hidden-size %lld)",
                             mc->shared_ffn, (long long)EF);
        if (dense_lead(c) < 0)
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
    if (c->mla.enabled)
        return mtc_error(MTC_ERR_UNSUPPORTED, "--multi-latent-attention: mtc does not export "
                                              "llama.cpp's deepseek2 yet");
    if (c->mtp_num_layers > 0)
        return mtc_error(MTC_ERR_UNSUPPORTED, "--mtp-num-layers: mtc does not export MTP layers "
                                              "to GGUF (train without MTP to export)");
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
    if (c->normalization != MTC_NORM_RMSNORM || c->position_embedding != MTC_POS_ROPE ||
        !c->swiglu || !c->disable_bias_linear || c->add_qkv_bias || c->rotary_interleaved ||
        (c->rotary_percent > 0 && c->rotary_percent != 1.0f))
        return mtc_error(MTC_ERR_UNSUPPORTED,
                         "llama.cpp's llama has RMSNorm, RoPE on whole heads, SwiGLU and no "
                         "biases: this model differs");
    int64_t HS = mtc_model_head_size(c), QD = c->num_heads * HS, KD = mtc_model_groups(c) * HS;
    int64_t FF = c->ffn_hidden_size;
    int neox = c->qk_layernorm; /* qwen3 / qwen3moe rotate halves, as mtc: rows as they are */
    T("token_embd.weight", mtc_registry_find(r, "model.embed_tokens.weight"), 0, V, 0);
    for (int l = 0; l < c->num_layers; l++) {
        int qkv = F("model.layers.%d.self_attn.qkv_proj.weight", l);
        int gu = F("model.layers.%d.mlp.gate_up_proj.weight", l);
#define B(s) (snprintf(nm, sizeof nm, "blk.%d.%s", l, s), nm)
        T(B("attn_norm.weight"), F("model.layers.%d.input_layernorm.weight", l), 0, -1, 0);
        T(B("attn_q.weight"), qkv, 0, QD, neox ? 0 : c->num_heads);
        T(B("attn_k.weight"), qkv, QD, KD, neox ? 0 : mtc_model_groups(c));
        T(B("attn_v.weight"), qkv, QD + KD, KD, 0);
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
    else if (!strcmp(gguf_arch(c), "deepseek")) /* its output is not optional: the tied copy */
        T("output.weight", mtc_registry_find(r, "model.embed_tokens.weight"), 0, V, 0);
#undef T
#undef F
    *n = k;
    return MTC_OK;
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
    gg_tensor *t = calloc((size_t)(16 * c->num_layers + 8), sizeof *t);
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
    int moe = c->moe.num_experts > 0;
    int deepseek = !strcmp(arch, "deepseek");
    int nkv = 3 + (llama ? 13 : 7) + 3 * moe + 3 * deepseek + 9;
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
        kv_u32(&out, KA("leading_dense_block_count"), (uint32_t)dense_lead(c));
        kv_u32(&out, KA("expert_shared_count"),
               (uint32_t)(c->moe.shared_ffn / mtc_model_moe_ffn(c)));
        kv_f32(&out, KA("expert_weights_scale"), 1.0f);
    }
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
#undef KA
    if (llama) kv_u32(&out, "general.file_type", f16 ? 1 : 0);
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
        const mtc_param *p = &r->params[t[i].param];
        int two = p->ndim == 2;
        int64_t cols = two ? p->shape[1] : 1;
        int ne = t[i].nexp > 0 ? t[i].nexp : 1;
        put_str(&out, t[i].name);
        put_u32(&out, t[i].nexp > 0 ? 3 : two ? 2 : 1);
        if (two) put_u64(&out, (uint64_t)cols);
        put_u64(&out, (uint64_t)t[i].nrows);
        if (t[i].nexp > 0) put_u64(&out, (uint64_t)t[i].nexp);
        int half = two && f16;
        put_u32(&out, half ? 1 : 0);
        put_u64(&out, off);
        size_t n = (size_t)(t[i].nrows * cols) * (size_t)ne;
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
        const mtc_param *p = &r->params[t[i].param];
        int two = p->ndim == 2, half = two && f16, ne = t[i].nexp > 0 ? t[i].nexp : 1;
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
