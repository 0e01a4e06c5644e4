/* ckpt/hf.c - Hugging Face safetensors export and import; see hf.h.
 *
 *   registry param ──(rows [r0, r0+n), transposed or not)──> HF tensor
 *
 * One table of such entries per family, built from the model's registry,
 * drives both directions. Limitations: the whole model is in memory (a
 * serial model); tensors are written one by one with stdio. */
#include "ckpt/hf.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "ckpt/checkpoint.h"
#include "ckpt/dist_internal.h"
#include "ckpt/tok_files.h"
#include "ckpt/hf_check.h"
#include "core/outfile.h"
#include "ckpt/hf_internal.h"
#include "core/dtype.h"
#include "model/family.h"

mtc_result_t hf_table_add(hf_table *t, const mtc_registry *r, const char *name, int p, int64_t r0,
                          int64_t nrows, int transpose) {
    if (p < 0) return MTC_OK;
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        void *v = realloc(t->v, (size_t)cap * sizeof *t->v);
        if (!v) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "tensor table");
        t->v = v, t->cap = cap;
    }
    hf_entry *e = &t->v[t->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->param = p, e->r0 = r0, e->nrows = nrows < 0 ? r->params[p].shape[0] : nrows;
    e->transpose = transpose;
    return MTC_OK;
}

mtc_result_t hf_table_zeros(hf_table *t, const char *name, int64_t s0, int64_t s1) {
    static const mtc_registry none = {0};
    mtc_param one = {.shape = {1, 1}};
    mtc_registry r = none;
    r.params = &one;
    MTC_CHECK(hf_table_add(t, &r, name, 0, 0, 0, 0));
    hf_entry *e = &t->v[t->n - 1];
    e->param = -1, e->znd = s1 ? 2 : 1, e->zs[0] = s0, e->zs[1] = s1 ? s1 : 1;
    return MTC_OK;
}

#define add hf_table_add

/* The whole table of a serial model. */
static mtc_result_t hf_table_build(const mtc_model *m, hf_table *t, const char *arch) {
    const mtc_model_config *c = &m->cfg;
    const mtc_registry *r = &m->reg;
    const mtc_result_t U = MTC_ERR_UNSUPPORTED;
    int V = c->vocab_size;
    char n[160], q[128];
    if (c->mla.enabled) return hf_dsv3_table(m, t); /* DeepseekV3ForCausalLM (hf_dsv3.c) */
    if (c->mtp_num_layers > 0)
        return mtc_error(U, "--mtp-num-layers: only DeepseekV3ForCausalLM stores MTP layers "
                            "(train with --multi-latent-attention, or without MTP, to export)");
    if (c->qk_layernorm && !model_family_is_llama(c))
        return mtc_error(U, "--qk-layernorm: GPT2LMHeadModel has no q/k norms (Qwen3's q_norm / "
                            "k_norm are written for Llama-style models)");
    if (!model_family_is_llama(c)) {
        if (c->moe.num_experts > 0)
            return mtc_error(U, "no Hugging Face class holds a GPT-2-style (LayerNorm, GELU) "
                                "mixture of experts: train the MoE model with the Llama flags "
                                "(--normalization RMSNorm --position-embedding-type rope --swiglu "
                                "--disable-bias-linear) to export it as Mixtral or Qwen2-MoE");
        if (c->disable_bias_linear || c->add_qkv_bias || c->untie_embeddings ||
            mtc_model_groups(c) != c->num_heads || c->kv_channels ||
            c->position_embedding != MTC_POS_LEARNED)
            return mtc_error(U, "GPT2LMHeadModel has biases, a tied head, learned positions and "
                                "no grouped-query attention: this model differs (export a "
                                "Llama-style model instead)");
        MTC_CHECK(add(t, r, "transformer.wte.weight",
                      mtc_registry_find(r, "transformer.wte.weight"), 0, V, 0));
        MTC_CHECK(add(t, r, "transformer.wpe.weight",
                      mtc_registry_find(r, "transformer.wpe.weight"), 0, -1, 0));
        static const struct {
            const char *s;
            int tr;
        } L[] = {{"ln_1.weight", 0},      {"ln_1.bias", 0},          {"attn.c_attn.weight", 1},
                 {"attn.c_attn.bias", 0}, {"attn.c_proj.weight", 1}, {"attn.c_proj.bias", 0},
                 {"ln_2.weight", 0},      {"ln_2.bias", 0},          {"mlp.c_fc.weight", 1},
                 {"mlp.c_fc.bias", 0},    {"mlp.c_proj.weight", 1},  {"mlp.c_proj.bias", 0}};
        for (int l = 0; l < c->num_layers; l++)
            for (size_t k = 0; k < sizeof L / sizeof L[0]; k++) {
                snprintf(n, sizeof n, "transformer.h.%d.%s", l, L[k].s);
                int p = mtc_registry_find(r, n); /* mtc's names are Hugging Face's */
                if (p < 0) return mtc_error(MTC_ERR_INTERNAL, "no parameter %s", n);
                MTC_CHECK(add(t, r, n, p, 0, -1, L[k].tr));
            }
        MTC_CHECK(add(t, r, "transformer.ln_f.weight",
                      mtc_registry_find(r, "transformer.ln_f.weight"), 0, -1, 0));
        MTC_CHECK(add(t, r, "transformer.ln_f.bias", mtc_registry_find(r, "transformer.ln_f.bias"),
                      0, -1, 0));
        return MTC_OK;
    }
    const char *cls = "LlamaForCausalLM", *type = "llama";
    if (c->moe.num_experts > 0) MTC_CHECK(hf_moe_check(m, arch, &cls, &type));
    if (c->moe.num_experts == 0 && c->qk_layernorm) { /* Qwen3: Llama with q/k norms */
        if (c->add_qkv_bias)
            return mtc_error(U, "Qwen3ForCausalLM has no q/k/v biases alone (attention_bias adds "
                                "o_proj's too): train without --add-qkv-bias to export");
        cls = "Qwen3ForCausalLM", type = "qwen3";
    }
    int qkv_bias_ok = strcmp(cls, "Qwen2MoeForCausalLM") == 0; /* Qwen2 has q/k/v biases */
    if (c->normalization != MTC_NORM_RMSNORM || c->position_embedding != MTC_POS_ROPE ||
        !c->swiglu || !c->disable_bias_linear || (c->add_qkv_bias && !qkv_bias_ok) ||
        c->rotary_interleaved || (c->rotary_percent > 0 && c->rotary_percent != 1.0f))
        return mtc_error(U, "LlamaForCausalLM has RMSNorm, RoPE on whole heads rotating halves, "
                            "SwiGLU and no biases: this model differs (use --normalization RMSNorm "
                            "--position-embedding-type rope --swiglu --disable-bias-linear)");
    int64_t HS = mtc_model_head_size(c), QD = c->num_heads * HS, KD = mtc_model_groups(c) * HS;
    int64_t F = c->ffn_hidden_size;
    MTC_CHECK(add(t, r, "model.embed_tokens.weight",
                  mtc_registry_find(r, "model.embed_tokens.weight"), 0, V, 0));
    for (int l = 0; l < c->num_layers; l++) {
#define P(s) (snprintf(q, sizeof q, "model.layers.%d.%s", l, s), mtc_registry_find(r, q))
#define N(s) (snprintf(n, sizeof n, "model.layers.%d.%s", l, s), n)
        int qkv = P("self_attn.qkv_proj.weight"), gu = P("mlp.gate_up_proj.weight");
        MTC_CHECK(add(t, r, N("input_layernorm.weight"), P("input_layernorm.weight"), 0, -1, 0));
        MTC_CHECK(add(t, r, N("self_attn.q_proj.weight"), qkv, 0, QD, 0));
        MTC_CHECK(add(t, r, N("self_attn.k_proj.weight"), qkv, QD, KD, 0));
        MTC_CHECK(add(t, r, N("self_attn.v_proj.weight"), qkv, QD + KD, KD, 0));
        if (qkv_bias_ok) MTC_CHECK(hf_moe_qkv_bias(m, cls, l, t));
        MTC_CHECK(add(t, r, N("self_attn.o_proj.weight"), P("self_attn.o_proj.weight"), 0, -1, 0));
        if (c->qk_layernorm) { /* mtc's names are Qwen3's */
            MTC_CHECK(
                add(t, r, N("self_attn.q_norm.weight"), P("self_attn.q_norm.weight"), 0, -1, 0));
            MTC_CHECK(
                add(t, r, N("self_attn.k_norm.weight"), P("self_attn.k_norm.weight"), 0, -1, 0));
        }
        MTC_CHECK(add(t, r, N("post_attention_layernorm.weight"),
                      P("post_attention_layernorm.weight"), 0, -1, 0));
        if (mtc_moe_is_layer(&c->moe, l) && c->moe.num_experts > 0) {
            MTC_CHECK(hf_moe_layer(m, cls, l, t));
            continue;
        }
        MTC_CHECK(add(t, r, N("mlp.gate_proj.weight"), gu, 0, F, 0));
        MTC_CHECK(add(t, r, N("mlp.up_proj.weight"), gu, F, F, 0));
        MTC_CHECK(add(t, r, N("mlp.down_proj.weight"), P("mlp.down_proj.weight"), 0, -1, 0));
#undef P
#undef N
    }
    MTC_CHECK(add(t, r, "model.norm.weight", mtc_registry_find(r, "model.norm.weight"), 0, -1, 0));
    if (c->untie_embeddings)
        MTC_CHECK(add(t, r, "lm_head.weight", mtc_registry_find(r, "lm_head.weight"), 0, V, 0));
    return MTC_OK;
}

/* HF shape of an entry; returns ndim. */
static int entry_shape(const mtc_registry *r, const hf_entry *e, int64_t s[2]) {
    if (e->param < 0) {
        s[0] = e->zs[0], s[1] = e->zs[1];
        return e->znd;
    }
    const mtc_param *p = &r->params[e->param];
    if (p->ndim == 1) {
        s[0] = e->nrows, s[1] = 1;
        return 1;
    }
    s[0] = e->transpose ? p->shape[1] : e->nrows;
    s[1] = e->transpose ? e->nrows : p->shape[1];
    return 2;
}

/* ---- config.json (read; hf_config.c writes it) ------------------------ */

static double jnum(const cJSON *j, const char *key, double dflt) {
    const cJSON *x = cJSON_GetObjectItem(j, key);
    return cJSON_IsNumber(x) ? x->valuedouble : dflt;
}

/* config.json numbers for int and float fields: a value the field cannot
 * hold (3e13 layers, 1e400, 2.5 heads) names itself in *bad (the first one)
 * and reads as 0, instead of an undefined conversion. */
/* A field present with another type ("n_layer": "12", true, [..]) is bad
 * too, not read as its default; null stands for absent, as in HF. */
static int jtype_bad(const cJSON *j, const char **bad, const char *key) {
    const cJSON *x = cJSON_GetObjectItem(j, key);
    if (!x || cJSON_IsNumber(x) || cJSON_IsNull(x)) return 0;
    if (!*bad) *bad = key;
    return 1;
}

static int jint(const cJSON *j, const char **bad, const char *key, double dflt) {
    if (jtype_bad(j, bad, key)) return 0;
    double v = jnum(j, key, dflt);
    if (v >= INT_MIN && v <= INT_MAX && v == floor(v)) return (int)v;
    if (!*bad) *bad = key;
    return 0;
}

static float jflt(const cJSON *j, const char **bad, const char *key, double dflt) {
    if (jtype_bad(j, bad, key)) return 0;
    double v = jnum(j, key, dflt);
    if (isfinite(v) && fabs(v) <= FLT_MAX) return (float)v;
    if (!*bad) *bad = key;
    return 0;
}

static mtc_result_t hf_config_parse(const cJSON *j, const char *path, int seq, int divisible,
                                    mtc_model_config *c, const char **arch) {
    memset(c, 0, sizeof *c);
    const char *bad = NULL; /* the first number that does not fit its field */
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(j, "model_type"));
    const mtc_result_t F = MTC_ERR_FORMAT;
    if (!type) return mtc_error(F, "%s has no model_type", path);
    if (!strcmp(type, "gpt2")) {
        const char *act = cJSON_GetStringValue(cJSON_GetObjectItem(j, "activation_function"));
        if (act && strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh"))
            return mtc_error(MTC_ERR_UNSUPPORTED,
                             "%s: activation_function %s (mtc's GPT-2 uses the tanh GELU, "
                             "gelu_new)",
                             path, act);
        c->num_layers = jint(j, &bad, "n_layer", 0), c->hidden_size = jint(j, &bad, "n_embd", 0);
        c->num_heads = jint(j, &bad, "n_head", 0);
        c->ffn_hidden_size = jint(j, &bad, "n_inner", 4.0 * c->hidden_size);
        c->max_position_embeddings = jint(j, &bad, "n_positions", 1024);
        c->norm_epsilon = jflt(j, &bad, "layer_norm_epsilon", 1e-5);
        c->rotary_base = 10000, c->rotary_percent = 1.0f; /* unused: mtc train's defaults */
    } else if (!strcmp(type, "llama") || !strcmp(type, "mixtral") || !strcmp(type, "qwen2_moe") ||
               !strcmp(type, "qwen3_moe") || !strcmp(type, "qwen3") ||
               !strcmp(type, "deepseek_v3")) {
        int dsv3 = !strcmp(type, "deepseek_v3"); /* its rope_scaling is MLA's YaRN */
        if (cJSON_IsTrue(cJSON_GetObjectItem(j, "attention_bias")) ||
            cJSON_IsTrue(cJSON_GetObjectItem(j, "mlp_bias")) ||
            (!dsv3 && cJSON_IsObject(cJSON_GetObjectItem(j, "rope_scaling"))))
            return mtc_error(MTC_ERR_UNSUPPORTED,
                             "%s: attention_bias, mlp_bias or rope_scaling are not supported",
                             path);
        c->num_layers = jint(j, &bad, "num_hidden_layers", 0);
        c->hidden_size = jint(j, &bad, "hidden_size", 0);
        c->num_heads = jint(j, &bad, "num_attention_heads", 0);
        c->num_query_groups = jint(j, &bad, "num_key_value_heads", c->num_heads);
        if (c->num_query_groups == c->num_heads) c->num_query_groups = 0;
        int hd = jint(j, &bad, "head_dim", c->num_heads > 0 ? c->hidden_size / c->num_heads : 0);
        c->kv_channels = c->num_heads > 0 && hd != c->hidden_size / c->num_heads ? hd : 0;
        c->ffn_hidden_size = jint(j, &bad, "intermediate_size", 0);
        c->max_position_embeddings = jint(j, &bad, "max_position_embeddings", 2048);
        c->norm_epsilon = jflt(j, &bad, "rms_norm_eps", 1e-6);
        c->rotary_base = jflt(j, &bad, "rope_theta", 10000);
        c->rotary_percent = 1.0f;
        c->normalization = MTC_NORM_RMSNORM, c->position_embedding = MTC_POS_ROPE;
        c->swiglu = 1, c->disable_bias_linear = 1;
        c->untie_embeddings = !cJSON_IsTrue(cJSON_GetObjectItem(j, "tie_word_embeddings"));
        if (!strcmp(type, "qwen3")) { /* Llama with q_norm / k_norm */
            if (cJSON_IsTrue(cJSON_GetObjectItem(j, "use_sliding_window")))
                return mtc_error(MTC_ERR_UNSUPPORTED,
                                 "%s: use_sliding_window (mtc attends to the whole context)", path);
            c->qk_layernorm = 1;
        } else if (dsv3) { /* MLA, MoE, MTP (ckpt/hf_dsv3.c) */
            c->untie_embeddings = !cJSON_IsTrue(cJSON_GetObjectItem(j, "tie_word_embeddings"));
            MTC_CHECK(hf_dsv3_parse(j, path, c));
        } else if (strcmp(type, "llama")) { /* the MoE classes (ckpt/hf_moe.c) */
            *arch = !strcmp(type, "mixtral")     ? "MixtralForCausalLM"
                    : !strcmp(type, "qwen3_moe") ? "Qwen3MoeForCausalLM"
                                                 : "Qwen2MoeForCausalLM";
            MTC_CHECK(hf_moe_parse(j, path, type, c));
        }
    } else {
        return mtc_error(MTC_ERR_UNSUPPORTED,
                         "%s: model_type %s (mtc imports gpt2, llama, qwen3, mixtral, qwen2_moe, "
                         "qwen3_moe and deepseek_v3)",
                         path, type);
    }
    c->vocab_size = jint(j, &bad, "vocab_size", 0);
    c->init_std = jflt(j, &bad, "initializer_range", 0.02);
    static const char *const flags[] = {"tie_word_embeddings", "attention_bias", "mlp_bias"};
    for (size_t k = 0; !bad && k < sizeof flags / sizeof flags[0]; k++) {
        const cJSON *x = cJSON_GetObjectItem(j, flags[k]);
        if (x && !cJSON_IsBool(x) && !cJSON_IsNull(x)) bad = flags[k];
    }
    if (bad)
        return mtc_error(F,
                         "%s: %s is not a value its field can hold (a number in range, or "
                         "true/false for flags; a corrupted config.json?)",
                         path, bad);
    int T = seq > 0 ? seq : c->max_position_embeddings < 1024 ? c->max_position_embeddings : 1024;
    c->seq_length = T;
    /* the sizes a config.json must give (no default stands for them) */
    static const char *const need_gpt2[] = {"n_layer", "n_embd", "n_head", "vocab_size"};
    static const char *const need_llama[] = {"num_hidden_layers", "hidden_size",
                                             "num_attention_heads", "intermediate_size",
                                             "vocab_size"};
    int gpt2 = !strcmp(type, "gpt2");
    for (int k = 0; k < (gpt2 ? 4 : 5); k++) {
        const char *key = gpt2 ? need_gpt2[k] : need_llama[k];
        if (!cJSON_IsNumber(cJSON_GetObjectItem(j, key)))
            return mtc_error(F, "%s: %s is missing (model_type %s needs it)", path, key, type);
    }
    c->padded_vocab_size = mtc_model_pad_vocab(c->vocab_size, divisible > 0 ? divisible : 128, 1);
    if (mtc_model_config_validate(c) != MTC_OK) { /* worded in config.json's own field names */
        char msg[1024];
        ckpt_hf_field_names(mtc_error_detail(), type, msg, sizeof msg);
        return mtc_error(F, "%s: %s", path, msg);
    }
    return MTC_OK;
}

/* ---- writing ------------------------------------------------------------- */

static void write_json_file(const char *path, const cJSON *j, mtc_result_t *rc) {
    if (*rc != MTC_OK) return;
    char *text = cJSON_Print(j);
    FILE *f = text ? fopen(path, "w") : NULL;
    if (!f || fputs(text, f) < 0 || fputc('\n', f) < 0)
        *rc = mtc_error(MTC_ERR_IO, "cannot write %s", path);
    if (f && fclose(f) != 0) *rc = mtc_error(MTC_ERR_IO, "cannot write %s", path);
    free(text);
}

mtc_result_t mtc_hf_supported(const mtc_model *m, const char *arch) {
    hf_table t = {0};
    mtc_result_t rc = hf_table_build(m, &t, arch);
    free(t.v);
    return rc;
}

/* Writes entries [a, b) as one safetensors file. */
static mtc_result_t write_safetensors(const mtc_model *m, const hf_table *t, int a, int b,
                                      const char *path, int bf16) {
    const mtc_registry *r = &m->reg;
    cJSON *h = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    size_t at = 0, es = bf16 ? 2 : 4, maxn = 0;
    for (int i = a; i < b; i++) {
        int64_t s[2];
        int nd = entry_shape(r, &t->v[i], s);
        cJSON *e = cJSON_AddObjectToObject(h, t->v[i].name);
        cJSON_AddStringToObject(e, "dtype", bf16 ? "BF16" : "F32");
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < nd; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)s[d]));
        size_t n = (size_t)(s[0] * s[1]);
        cJSON *off = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)at));
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(at + n * es)));
        at += n * es;
        if (n > maxn) maxn = n;
    }
    char *text = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    if (!text) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "safetensors header");
    size_t hl = strlen(text), padded = (hl + 7) / 8 * 8;
    FILE *f = fopen(path, "wb");
    float *buf = malloc((maxn ? maxn : 1) * sizeof(float));
    mtc_result_t rc =
        f && buf ? MTC_OK : mtc_error(MTC_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    unsigned char len8[8];
    for (int k = 0; k < 8; k++)
        len8[k] = (unsigned char)((uint64_t)padded >> (8 * k));
    if (rc == MTC_OK && (fwrite(len8, 1, 8, f) != 8 || fwrite(text, 1, hl, f) != hl))
        rc = mtc_error(MTC_ERR_IO, "writing %s failed", path);
    for (size_t k = hl; rc == MTC_OK && k < padded; k++)
        fputc(' ', f);
    for (int i = a; rc == MTC_OK && i < b; i++) {
        const hf_entry *e = &t->v[i];
        int64_t s[2];
        entry_shape(r, e, s);
        int64_t n = s[0] * s[1];
        if (e->param < 0) {
            memset(buf, 0, (size_t)n * sizeof *buf);
        } else {
            const mtc_param *p = &r->params[e->param];
            int64_t cols = p->ndim == 2 ? p->shape[1] : 1;
            const float *src = m->params + p->offset + (size_t)(e->r0 * cols);
            float sc = e->scale != 0 ? e->scale : 1.0f;
            for (int64_t rr = 0; rr < e->nrows; rr++)
                for (int64_t cc = 0; cc < cols; cc++)
                    buf[e->transpose ? cc * e->nrows + rr : rr * cols + cc] =
                        sc * src[rr * cols + cc];
        }
        size_t ok;
        if (bf16) {
            mtc_bf16 *h16 = (mtc_bf16 *)buf; /* in place: element k only reads k >= k/2 */
            for (int64_t k = 0; k < n; k++)
                h16[k] = mtc_f32_to_bf16(buf[k]);
            ok = fwrite(h16, 2, (size_t)n, f) == (size_t)n;
        } else {
            ok = fwrite(buf, 4, (size_t)n, f) == (size_t)n;
        }
        if (!ok) rc = mtc_error(MTC_ERR_IO, "writing %s failed: %s", path, strerror(errno));
    }
    if (f && fclose(f) != 0 && rc == MTC_OK) rc = mtc_error(MTC_ERR_IO, "writing %s failed", path);
    free(text), free(buf);
    return rc;
}

mtc_result_t mtc_hf_export(const mtc_model *m, const char *tokenizer, const char *outdir,
                           const mtc_hf_export_opts *o) {
    hf_table t = {0};
    mtc_result_t rc = hf_table_build(m, &t, o ? o->config.arch : NULL);
    if (rc == MTC_OK && mkdir(outdir, 0755) != 0 && errno != EEXIST)
        rc = mtc_error(MTC_ERR_IO, "cannot create %s: %s", outdir, strerror(errno));
    int64_t limit = o && o->max_shard_bytes > 0 ? o->max_shard_bytes : (int64_t)5 << 30;
    int bf16 = o && o->bf16;
    /* shards: entries [cut[k], cut[k+1]) */
    int *cut = calloc((size_t)t.n + 2, sizeof(int)), ncut = 0;
    int64_t sz = 0, total = 0;
    if (!cut && rc == MTC_OK) rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "shards");
    for (int i = 0; rc == MTC_OK && i < t.n; i++) {
        int64_t s[2];
        entry_shape(&m->reg, &t.v[i], s);
        int64_t b = s[0] * s[1] * (bf16 ? 2 : 4);
        if (i > 0 && sz + b > limit) cut[++ncut] = i, sz = 0;
        sz += b, total += b;
    }
    if (cut) cut[++ncut] = t.n;
    char path[4200];
    if (rc == MTC_OK && ncut == 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", outdir);
        rc = write_safetensors(m, &t, 0, t.n, path, bf16);
    } else if (rc == MTC_OK) {
        cJSON *idx = cJSON_CreateObject();
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(idx, "metadata"), "total_size",
                                (double)total);
        cJSON *wm = cJSON_AddObjectToObject(idx, "weight_map");
        for (int k = 0; rc == MTC_OK && k < ncut; k++) {
            char name[64];
            snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k + 1, ncut);
            snprintf(path, sizeof path, "%s/%s", outdir, name);
            rc = write_safetensors(m, &t, cut[k], cut[k + 1], path, bf16);
            for (int i = cut[k]; i < cut[k + 1]; i++)
                cJSON_AddStringToObject(wm, t.v[i].name, name);
        }
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", outdir);
        write_json_file(path, idx, &rc);
        cJSON_Delete(idx);
    }
    if (rc == MTC_OK) {
        mtc_hf_config_opts co = {0};
        if (o) co = o->config;
        co.torch_dtype = bf16 ? "bfloat16" : "float32";
        rc = mtc_hf_write_config(m, outdir, &co);
    }
    if (rc == MTC_OK) {
        snprintf(path, sizeof path, "%s/mtc_tokenizer.txt", outdir);
        FILE *f = fopen(path, "w");
        if (!f || fprintf(f, "%s\n", tokenizer && tokenizer[0] ? tokenizer : "none") < 0 ||
            fclose(f) != 0)
            rc = mtc_error(MTC_ERR_IO, "cannot write %s", path);
    }
    free(cut), free(t.v);
    return rc;
}

/* ---- reading ------------------------------------------------------------- */

/* IEEE half to float (subnormals, infinities and NaN included). */
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
    if (e == 0x1f) {
        u = sign | 0x7f800000u | (m << 13);
    } else if (e) {
        u = sign | ((e + 112) << 23) | (m << 13);
    } else if (m) { /* subnormal: normalise */
        e = 113;
        while (!(m & 0x400))
            m <<= 1, e--;
        u = sign | (e << 23) | ((m & 0x3ff) << 13);
    } else {
        u = sign;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

typedef struct {
    char path[4200];
    unsigned char *data; /* the whole file */
    size_t size, data_at;
    cJSON *header;
} st_file;

static mtc_result_t st_open(const char *path, st_file *f) {
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    char *text = NULL;
    MTC_CHECK(ckpt_read_text(path, &text, &f->size));
    f->data = (unsigned char *)text;
    uint64_t n = 0;
    for (int k = 0; f->size >= 8 && k < 8; k++)
        n |= (uint64_t)f->data[k] << (8 * k);
    if (f->size < 8 || n > 100000000 || n > f->size - 8)
        return mtc_error(MTC_ERR_FORMAT, "%s is not a safetensors file (header length %llu)", path,
                         (unsigned long long)n);
    const char *end = NULL;
    f->header = cJSON_ParseWithLengthOpts((const char *)f->data + 8, (size_t)n, &end, 0);
    f->data_at = 8 + (size_t)n;
    while (end && end < (const char *)f->data + f->data_at && (*end == ' ' || *end == '\0'))
        end++; /* the header's padding */
    if (!cJSON_IsObject(f->header) || end != (const char *)f->data + f->data_at)
        return mtc_error(MTC_ERR_FORMAT,
                         "%s: the safetensors header is not one JSON object (padded with spaces)",
                         path);
    return ckpt_st_header_check(f->header, f->size - f->data_at, path);
}

static void st_close(st_file *f) {
    cJSON_Delete(f->header);
    free(f->data);
    memset(f, 0, sizeof *f);
}

/* Fills dst (n floats) from tensor `name` of shape s (ndim nd). */
static mtc_result_t st_read(const st_file *f, const char *name, int nd, const int64_t s[2],
                            float *dst) {
    const cJSON *e = cJSON_GetObjectItem(f->header, name);
    if (!e) return mtc_error(MTC_ERR_FORMAT, "%s has no tensor %s", f->path, name);
    const char *dt = cJSON_GetStringValue(cJSON_GetObjectItem(e, "dtype"));
    const cJSON *sh = cJSON_GetObjectItem(e, "shape"),
                *off = cJSON_GetObjectItem(e, "data_offsets");
    int es = !dt ? 0 : !strcmp(dt, "F32") ? 4 : !strcmp(dt, "BF16") || !strcmp(dt, "F16") ? 2 : 0;
    if (!es)
        return mtc_error(MTC_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s (F32, BF16 or F16)",
                         f->path, name, dt ? dt : "?");
    int ok = cJSON_GetArraySize(sh) == nd && cJSON_GetArraySize(off) == 2;
    for (int d = 0; ok && d < nd; d++) {
        const cJSON *x = cJSON_GetArrayItem(sh, d);
        ok = cJSON_IsNumber(x) && x->valuedouble == (double)s[d];
    }
    if (!ok) {
        char *got = cJSON_PrintUnformatted(sh);
        mtc_result_t rc = mtc_error(MTC_ERR_FORMAT,
                                    "%s: tensor %s has shape %s, the configuration gives (%lld, "
                                    "%lld)",
                                    f->path, name, got ? got : "?", (long long)s[0],
                                    (long long)(nd == 2 ? s[1] : 1));
        free(got);
        return rc;
    }
    double b0 = cJSON_GetArrayItem(off, 0)->valuedouble,
           b1 = cJSON_GetArrayItem(off, 1)->valuedouble;
    size_t n = (size_t)(s[0] * (nd == 2 ? s[1] : 1));
    if (!(b0 >= 0 && b1 == b0 + (double)(n * (size_t)es) && f->data_at + b1 <= f->size))
        return mtc_error(MTC_ERR_FORMAT, "%s: tensor %s has data_offsets outside the file", f->path,
                         name);
    const unsigned char *p = f->data + f->data_at + (size_t)b0;
    for (size_t k = 0; k < n; k++) {
        if (es == 4) {
            memcpy(&dst[k], p + 4 * k, 4);
        } else {
            uint16_t h;
            memcpy(&h, p + 2 * k, 2);
            dst[k] = !strcmp(dt, "BF16") ? mtc_bf16_to_f32(h) : f16_to_f32(h);
        }
    }
    return ckpt_st_finite(dst, n, f->path, name);
}

/* The fewest bytes a checkpoint of c can hold: every stored parameter at 2
 * bytes, the vocabulary unpadded. Counted from one layer's registry times
 * the layers, so a config.json asking for a million layers costs nothing. */
static mtc_result_t hf_min_bytes(const mtc_model_config *c, double *bytes) {
    mtc_registry reg;
    int pidx[MTC_NGLOBAL_ROLES], lf[2];
    MTC_CHECK(mtc_registry_init(&reg, 8 + model_family_params_per_layer(c)));
    reg.tp = 1, reg.tp_rank = 0;
    model_register_opts o = {0, 1, 1, 1, 0, 0, 0};
    mtc_result_t rc = model_family_register(&reg, c, &o, pidx, lf);
    double other = 0, layer = 0;
    for (int i = 0; rc == MTC_OK && i < reg.count; i++)
        *(reg.params[i].layer >= 0 ? &layer : &other) += (double)reg.params[i].numel;
    mtc_registry_free(&reg);
    double pad = (double)(c->padded_vocab_size - c->vocab_size) * c->hidden_size;
    *bytes = 2 * (other + layer * c->num_layers - pad * (c->untie_embeddings ? 2 : 1));
    if (rc == MTC_OK && c->moe.num_experts > 0 &&
        mtc_moe_num_layers(&c->moe, c->num_layers) < c->num_layers) {
        mtc_model_config dense = *c; /* layer 0 may be MoE and the rest dense: the smaller bound */
        double b = 0;
        dense.moe.num_experts = 0;
        rc = hf_min_bytes(&dense, &b);
        if (b < *bytes) *bytes = b;
    }
    return rc;
}

/* Bytes of the weight files: model.safetensors, or the distinct files of
 * the index's weight_map (at most 4096 of them). */
static double hf_file_bytes(const char *dir, const cJSON *wm) {
    char path[4200];
    struct stat st;
    if (!wm) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) return -1;
        return stat(path, &st) == 0 ? (double)st.st_size : 0;
    }
    double total = 0;
    const char *seen[4096];
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, wm) {
        const char *file = cJSON_GetStringValue(e);
        if (!file || strchr(file, '/')) continue; /* refused when read */
        int k = 0;
        while (k < n && strcmp(seen[k], file))
            k++;
        if (k < n || n == 4096) continue;
        seen[n++] = file;
        snprintf(path, sizeof path, "%s/%s", dir, file);
        if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) return -1;
        if (stat(path, &st) == 0) total += (double)st.st_size;
    }
    return total;
}

/* A tensor named in `names` (a header or a weight_map) that the model has
 * no place for. */
static mtc_result_t hf_unused(const cJSON *names, const hf_table *t, int untied, const char *where,
                              const mtc_model_config *c) {
    /* config.json's own name of the layer count: GPT-2's n_layer, num_hidden_layers elsewhere */
    const char *layers = c->position_embedding != MTC_POS_LEARNED ? "num_hidden_layers" : "n_layer";
    const cJSON *e;
    cJSON_ArrayForEach(e, names) {
        if (!strcmp(e->string, "__metadata__") || ckpt_st_ignorable(e->string, !untied)) continue;
        int k = 0;
        while (k < t->n && strcmp(t->v[k].name, e->string))
            k++;
        if (k == t->n)
            return mtc_error(MTC_ERR_FORMAT,
                             "%s holds tensor %s, which the model config.json describes has no "
                             "place for (config.json does not match the weights: check "
                             "%s and the architecture)",
                             where, e->string, layers);
    }
    return MTC_OK;
}

/* Does the folder hold tensor `name` (in the index's weight_map, or in
 * model.safetensors's header, read alone)? */
static int hf_has_tensor(const char *dir, const cJSON *wm, const char *name) {
    if (wm) return cJSON_GetObjectItem(wm, name) != NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "rb");
    unsigned char len8[8];
    uint64_t n = 0;
    int has = 0;
    if (f && fread(len8, 1, 8, f) == 8) {
        for (int k = 0; k < 8; k++)
            n |= (uint64_t)len8[k] << (8 * k);
        char *h = n <= 100000000 ? malloc((size_t)n + 1) : NULL;
        if (h && fread(h, 1, (size_t)n, f) == (size_t)n) {
            h[n] = 0;
            cJSON *j = cJSON_Parse(h);
            has = cJSON_GetObjectItem(j, name) != NULL;
            cJSON_Delete(j);
        }
        free(h);
    }
    if (f) fclose(f);
    return has;
}

mtc_result_t mtc_hf_import(const char *dir, int seq_length, int divisible_by, mtc_model **out,
                           char *tokenizer) {
    *out = NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = NULL;
    MTC_CHECK(ckpt_read_text(path, &text, NULL));
    cJSON *cj = cJSON_Parse(text);
    free(text);
    mtc_model_config cfg;
    const char *arch = NULL;
    mtc_result_t rc = cj ? hf_config_parse(cj, path, seq_length, divisible_by, &cfg, &arch)
                         : mtc_error(MTC_ERR_FORMAT, "%s is not JSON", path);
    cJSON_Delete(cj);
    MTC_CHECK(rc);
    /* the files: one, or the index's */
    cJSON *wm = NULL, *idx = NULL;
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    struct stat st;
    if (stat(path, &st) == 0) {
        rc = ckpt_read_text(path, &text, NULL);
        idx = rc == MTC_OK ? cJSON_Parse(text) : NULL;
        free(text);
        wm = cJSON_GetObjectItem(idx, "weight_map");
        if (rc == MTC_OK && !cJSON_IsObject(wm))
            rc = mtc_error(MTC_ERR_FORMAT, "%s has no weight_map", path);
    }
    /* DeepSeek-V3's MTP depths: a folder saved by transformers (which drops
     * them at load) keeps num_nextn_predict_layers without the tensors;
     * it is then the main model alone */
    if (rc == MTC_OK && cfg.mtp_num_layers > 0) {
        char name[96];
        snprintf(name, sizeof name, "model.layers.%d.eh_proj.weight", cfg.num_layers);
        if (!hf_has_tensor(dir, wm, name)) cfg.mtp_num_layers = 0;
    }
    /* a config.json describing more weights than the files hold is refused
     * before the model is allocated */
    double need = 0, have = 0;
    if (rc == MTC_OK) rc = hf_min_bytes(&cfg, &need);
    if (rc == MTC_OK && (have = hf_file_bytes(dir, wm)) < 0) /* never opened: a FIFO blocks */
        rc = mtc_error(MTC_ERR_FORMAT,
                       "%s: a safetensors file there is a FIFO, device or folder, not a regular "
                       "file (restore the export)",
                       dir);
    if (rc == MTC_OK && need > have)
        rc = mtc_error(MTC_ERR_FORMAT,
                       "%s/config.json describes %.0f parameters (%.0f bytes at least), but the "
                       "safetensors files hold %.0f bytes: config.json does not belong to these "
                       "weights",
                       dir, need / 2, need, have);
    mtc_model *m = NULL;
    if (rc == MTC_OK) rc = mtc_model_init(&cfg, 1, 1, NULL, &m);
    if (rc != MTC_OK) {
        cJSON_Delete(idx);
        return rc;
    }
    hf_table t = {0};
    rc = hf_table_build(m, &t, arch);
    st_file f = {0};
    float *buf = NULL;
    size_t cap = 0;
    for (int i = 0; rc == MTC_OK && i < t.n; i++) {
        const hf_entry *e = &t.v[i];
        const char *file =
            wm ? cJSON_GetStringValue(cJSON_GetObjectItem(wm, e->name)) : "model.safetensors";
        if (!file || strchr(file, '/')) {
            rc = mtc_error(MTC_ERR_FORMAT, "%s/model.safetensors.index.json maps no file to %s",
                           dir, e->name);
            break;
        }
        snprintf(path, sizeof path, "%s/%s", dir, file);
        if (strcmp(path, f.path)) {
            if (f.header) rc = hf_unused(f.header, &t, m->cfg.untie_embeddings, f.path, &m->cfg);
            st_close(&f);
            if (rc == MTC_OK) rc = mtc_infile_inside(path, dir); /* no link out of the folder */
            if (rc == MTC_OK) rc = st_open(path, &f);
            if (rc != MTC_OK) break;
        }
        int64_t s[2];
        int nd = entry_shape(&m->reg, e, s);
        size_t n = (size_t)(s[0] * s[1]);
        if (n > cap) {
            free(buf);
            buf = malloc(n * sizeof(float));
            cap = buf ? n : 0;
            if (!buf) rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "reading %s", e->name);
        }
        if (rc == MTC_OK) rc = st_read(&f, e->name, nd, s, buf);
        if (rc != MTC_OK) break;
        if (e->param < 0) { /* a tensor mtc's model does not have: only zeros map */
            for (size_t k = 0; k < n && rc == MTC_OK; k++)
                if (buf[k] != 0)
                    rc = mtc_error(MTC_ERR_UNSUPPORTED,
                                   "%s: tensor %s is not zero, and mtc's model has no such "
                                   "weight (docs/deployment.md lists what each class maps to)",
                                   dir, e->name);
            continue;
        }
        const mtc_param *p = &m->reg.params[e->param];
        int64_t cols = p->ndim == 2 ? p->shape[1] : 1;
        float *dst = m->params + p->offset + (size_t)(e->r0 * cols);
        float sc = e->scale != 0 ? 1.0f / e->scale : 1.0f; /* exact: scales are powers of 2 */
        for (int64_t rr = 0; rr < e->nrows; rr++)
            for (int64_t cc = 0; cc < cols; cc++)
                dst[rr * cols + cc] = sc * buf[e->transpose ? cc * e->nrows + rr : rr * cols + cc];
    }
    /* every stored tensor has its place in the model (a config.json with
     * fewer layers than the weights once dropped the rest silently) */
    if (rc == MTC_OK && f.header)
        rc = hf_unused(f.header, &t, m->cfg.untie_embeddings, f.path, &m->cfg);
    if (rc == MTC_OK && wm)
        rc = hf_unused(wm, &t, m->cfg.untie_embeddings, "model.safetensors.index.json", &m->cfg);
    st_close(&f);
    cJSON_Delete(idx);
    free(buf), free(t.v);
    /* mtc's own vocabularies, else tokenizer.json or vocab.json + merges.txt */
    snprintf(tokenizer, MTC_CKPT_TOKENIZER_MAX, "none");
    if (rc == MTC_OK) rc = mtc_ckpt_tok_import(dir, tokenizer, MTC_CKPT_TOKENIZER_MAX);
    if (rc != MTC_OK) {
        mtc_model_free(m);
        return rc;
    }
    *out = m;
    return MTC_OK;
}
