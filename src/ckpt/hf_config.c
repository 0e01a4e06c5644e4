/* ckpt/hf_config.c - config.json and generation_config.json of a Hugging
 * Face export (ckpt/hf.h: mtc_hf_write_config): the class's fields from the
 * model configuration, the tokenizer's bos/eos/pad ids, floats as the
 * shortest decimal that reads back as the model's value, torch_dtype as
 * written, the MoE fields from ckpt/hf_moe.c. The reader of config.json is
 * hf.c's hf_config_parse. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ckpt/hf.h"
#include "ckpt/hf_internal.h"
#include "ckpt/onnx.h"
#include "model/family.h"

/* A float as the shortest decimal that reads back as the same float: the
 * number the user wrote (1e-05, 0.02), not its float32 value printed to 17
 * digits (9.99999974737875e-06). */
void hf_add_float(cJSON *j, const char *key, float v) {
    char s[40];
    if (v == floorf(v) && fabsf(v) < 1e9f) { /* 10000, not 1e+04 */
        snprintf(s, sizeof s, "%.0f", (double)v);
        cJSON_AddItemToObject(j, key, cJSON_CreateRaw(s));
        return;
    }
    for (int p = 1; p <= 9; p++) {
        snprintf(s, sizeof s, "%.*g", p, (double)v);
        if (strtof(s, NULL) == v) break;
    }
    cJSON_AddItemToObject(j, key, cJSON_CreateRaw(s));
}

static void add_id(cJSON *j, const char *key, int set, int id) {
    if (set && id >= 0)
        cJSON_AddNumberToObject(j, key, id);
    else
        cJSON_AddNullToObject(j, key);
}

static cJSON *hf_config(const mtc_model *m, const mtc_hf_config_opts *o) {
    const mtc_model_config *c = &m->cfg;
    cJSON *j = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
    float eps = mtc_model_norm_eps(c);
    if (!model_family_is_llama(c)) {
        cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
        cJSON_AddStringToObject(j, "model_type", "gpt2");
        cJSON_AddNumberToObject(j, "vocab_size", c->vocab_size);
        cJSON_AddNumberToObject(j, "n_positions", c->max_position_embeddings);
        cJSON_AddNumberToObject(j, "n_ctx", c->max_position_embeddings);
        cJSON_AddNumberToObject(j, "n_embd", c->hidden_size);
        cJSON_AddNumberToObject(j, "n_layer", c->num_layers);
        cJSON_AddNumberToObject(j, "n_head", c->num_heads);
        cJSON_AddNumberToObject(j, "n_inner", c->ffn_hidden_size);
        cJSON_AddStringToObject(j, "activation_function", "gelu_new");
        hf_add_float(j, "resid_pdrop", c->hidden_dropout);
        hf_add_float(j, "embd_pdrop", c->hidden_dropout);
        hf_add_float(j, "attn_pdrop", c->attention_dropout);
        hf_add_float(j, "layer_norm_epsilon", eps);
        cJSON_AddBoolToObject(j, "tie_word_embeddings", 1);
    } else {
        const char *cls = "LlamaForCausalLM", *type = "llama";
        int tjs_mla = c->mla.enabled && o && o->tjs_dtype; /* see below */
        if (c->mla.enabled)
            cls = "DeepseekV3ForCausalLM", type = "deepseek_v3";
        else if (c->moe.num_experts > 0) /* checked by the table already */
            (void)hf_moe_check(m, o ? o->arch : NULL, &cls, &type);
        else if (c->qk_layernorm)
            cls = "Qwen3ForCausalLM", type = "qwen3";
        const char *moe_cls = cls;
        if (c->moe.num_experts > 0 && !c->mla.enabled && o && o->tjs_dtype) { /* see hf.h */
            cJSON_AddStringToObject(j, "mtc_moe_architecture", cls);
            cls = "LlamaForCausalLM", type = "llama";
        }
        if (tjs_mla) { /* transformers.js 3.x has no DeepSeek-V3: the ONNX graph holds MLA, the
                          config sizes the cache (NH heads of mtc_onnx_head_dim) */
            cJSON_AddStringToObject(j, "mtc_architecture", cls);
            cls = "LlamaForCausalLM", type = "llama";
        }
        cJSON_AddItemToArray(arch, cJSON_CreateString(cls));
        cJSON_AddStringToObject(j, "model_type", type);
        cJSON_AddNumberToObject(j, "vocab_size", c->vocab_size);
        cJSON_AddNumberToObject(j, "hidden_size", c->hidden_size);
        cJSON_AddNumberToObject(j, "intermediate_size", c->ffn_hidden_size);
        cJSON_AddNumberToObject(j, "num_hidden_layers", c->num_layers);
        cJSON_AddNumberToObject(j, "num_attention_heads", c->num_heads);
        cJSON_AddNumberToObject(j, "num_key_value_heads", mtc_model_groups(c));
        cJSON_AddNumberToObject(j, "head_dim", mtc_model_head_size(c));
        cJSON_AddStringToObject(j, "hidden_act", "silu");
        cJSON_AddNumberToObject(j, "max_position_embeddings", c->max_position_embeddings);
        hf_add_float(j, "rms_norm_eps", eps);
        hf_add_float(j, "rope_theta", c->rotary_base > 0 ? c->rotary_base : 10000.0f);
        cJSON_AddBoolToObject(j, "tie_word_embeddings", !c->untie_embeddings);
        cJSON_AddBoolToObject(j, "attention_bias", 0);
        cJSON_AddBoolToObject(j, "mlp_bias", 0);
        cJSON_AddNullToObject(j, "rope_scaling");
        hf_add_float(j, "attention_dropout", c->attention_dropout);
        if (c->mla.enabled) hf_dsv3_config(m, j);
        if (tjs_mla)
            cJSON_ReplaceItemInObject(j, "head_dim", cJSON_CreateNumber(mtc_onnx_head_dim(c)));
        else if (c->moe.num_experts > 0)
            hf_moe_config(m, moe_cls, j);
        if (c->moe.num_experts == 0 && c->qk_layernorm) { /* Qwen3Config */
            cJSON_AddBoolToObject(j, "use_sliding_window", 0);
            cJSON_AddNullToObject(j, "sliding_window");
            cJSON_AddNumberToObject(j, "max_window_layers", c->num_layers);
        }
    }
    int set = o && o->ids_set;
    add_id(j, "bos_token_id", set, o ? o->bos : -1);
    add_id(j, "eos_token_id", set, o ? o->eos : -1);
    add_id(j, "pad_token_id", set, o ? o->eos : -1); /* no pad of its own: eos, as HF generate */
    hf_add_float(j, "initializer_range", c->init_std > 0 ? c->init_std : 0.02f);
    cJSON_AddBoolToObject(j, "use_cache", 1);
    cJSON_AddStringToObject(j, "torch_dtype", o && o->torch_dtype ? o->torch_dtype : "float32");
    if (o && o->tjs_dtype) { /* transformers.js: which onnx/model*.onnx to load */
        cJSON *tj = cJSON_AddObjectToObject(j, "transformers.js_config");
        cJSON_AddStringToObject(tj, "dtype", o->tjs_dtype);
        if (o->tjs_external) cJSON_AddBoolToObject(tj, "use_external_data_format", 1);
    }
    return j;
}

/* generation_config.json: the ids generate() stops and pads with. */
static cJSON *hf_generation_config(const mtc_hf_config_opts *o) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddBoolToObject(j, "_from_model_config", 1);
    int set = o && o->ids_set;
    add_id(j, "bos_token_id", set, o ? o->bos : -1);
    add_id(j, "eos_token_id", set, o ? o->eos : -1);
    add_id(j, "pad_token_id", set, o ? o->eos : -1);
    return j;
}

static mtc_result_t write_json(const char *path, const cJSON *j) {
    char *text = cJSON_Print(j);
    FILE *f = text ? fopen(path, "w") : NULL;
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) >= 0;
    if (f && fclose(f) != 0) ok = 0;
    free(text);
    return ok ? MTC_OK : mtc_error(MTC_ERR_IO, "cannot write %s", path);
}

mtc_result_t mtc_hf_write_config(const mtc_model *m, const char *dir, const mtc_hf_config_opts *o) {
    mtc_result_t rc = mtc_hf_supported(m, o ? o->arch : NULL); /* refuses what HF cannot hold */
    MTC_CHECK(rc);
    char path[4200];
    cJSON *cfg = hf_config(m, o), *gen = hf_generation_config(o);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (rc == MTC_OK) rc = write_json(path, cfg);
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if (rc == MTC_OK) rc = write_json(path, gen);
    cJSON_Delete(cfg), cJSON_Delete(gen);
    return rc;
}
