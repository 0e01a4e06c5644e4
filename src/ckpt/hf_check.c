/* ckpt/hf_check.c - see hf_check.h. The rules are the safetensors format's
 * (huggingface/safetensors: "the byte buffer needs to be entirely indexed,
 * and cannot contain holes"), plus element alignment. */
#include "ckpt/hf_check.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int dtype_size(const char *dt) {
    static const struct {
        const char *name;
        int size;
    } k[] = {{"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
             {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
             {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
    for (size_t i = 0; dt && i < sizeof k / sizeof k[0]; i++)
        if (!strcmp(dt, k[i].name)) return k[i].size;
    return 0;
}

/* x is an integer in [0, 2^53] */
static int count_of(const cJSON *x, uint64_t *v) {
    if (!cJSON_IsNumber(x)) return 0;
    double d = x->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != floor(d)) return 0;
    *v = (uint64_t)d;
    return 1;
}

typedef struct {
    const char *name;
    uint64_t b0, b1;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->b0 < y->b0 ? -1 : x->b0 > y->b0 ? 1 : x->b1 < y->b1 ? -1 : x->b1 > y->b1;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(((const span *)a)->name, ((const span *)b)->name);
}

mtc_result_t ckpt_st_header_check(const cJSON *header, size_t data_bytes, const char *path) {
    const mtc_result_t F = MTC_ERR_FORMAT;
    if (!cJSON_IsObject(header))
        return mtc_error(F, "%s: the safetensors header is not a JSON object", path);
    int n = cJSON_GetArraySize(header);
    span *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    if (!v) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "safetensors header of %s", path);
    int k = 0;
    mtc_result_t rc = MTC_OK;
    const cJSON *e;
    cJSON_ArrayForEach(e, header) {
        if (!strcmp(e->string, "__metadata__")) {
            if (!cJSON_IsObject(e)) rc = mtc_error(F, "%s: __metadata__ is not an object", path);
            const cJSON *m;
            cJSON_ArrayForEach(m, e) if (rc == MTC_OK && !cJSON_IsString(m)) rc =
                mtc_error(F, "%s: __metadata__.%s is not a string", path, m->string);
            if (rc != MTC_OK) break;
            continue;
        }
        const char *dt = cJSON_GetStringValue(cJSON_GetObjectItem(e, "dtype"));
        const cJSON *sh = cJSON_GetObjectItem(e, "shape"),
                    *off = cJSON_GetObjectItem(e, "data_offsets");
        int es = dtype_size(dt);
        if (!cJSON_IsObject(e) || !es) {
            rc = mtc_error(F, "%s: tensor %s has no known dtype (got %s)", path, e->string,
                           dt ? dt : "none");
            break;
        }
        if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > 8) {
            rc = mtc_error(F, "%s: tensor %s has no valid shape (an array of at most 8 sizes)",
                           path, e->string);
            break;
        }
        uint64_t numel = 1, d;
        const cJSON *x;
        cJSON_ArrayForEach(x, sh) {
            if (!count_of(x, &d) || (d && numel > UINT64_MAX / 16 / d)) {
                rc = mtc_error(F, "%s: tensor %s has a shape entry that is not a size", path,
                               e->string);
                break;
            }
            numel *= d;
        }
        if (rc != MTC_OK) break;
        uint64_t b0, b1;
        if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 ||
            !count_of(cJSON_GetArrayItem(off, 0), &b0) ||
            !count_of(cJSON_GetArrayItem(off, 1), &b1)) {
            rc = mtc_error(F, "%s: tensor %s has data_offsets that are not two byte offsets", path,
                           e->string);
            break;
        }
        if (b1 < b0 || b1 - b0 != numel * (uint64_t)es) {
            rc = mtc_error(F,
                           "%s: tensor %s has data_offsets [%llu, %llu] (%llu bytes) but shape x "
                           "dtype is %llu bytes",
                           path, e->string, (unsigned long long)b0, (unsigned long long)b1,
                           (unsigned long long)(b1 >= b0 ? b1 - b0 : 0),
                           (unsigned long long)(numel * (uint64_t)es));
            break;
        }
        if (b0 % (uint64_t)es) {
            rc = mtc_error(F,
                           "%s: tensor %s starts at byte %llu, not a multiple of its %d-byte "
                           "elements (misaligned)",
                           path, e->string, (unsigned long long)b0, es);
            break;
        }
        v[k++] = (span){e->string, b0, b1};
    }
    if (rc == MTC_OK) {
        qsort(v, (size_t)k, sizeof *v, name_cmp);
        for (int i = 1; rc == MTC_OK && i < k; i++)
            if (!strcmp(v[i].name, v[i - 1].name))
                rc = mtc_error(F, "%s: tensor %s appears twice in the header", path, v[i].name);
    }
    if (rc == MTC_OK) {
        qsort(v, (size_t)k, sizeof *v, span_cmp);
        uint64_t at = 0;
        for (int i = 0; rc == MTC_OK && i < k; i++) {
            if (v[i].b0 < at)
                rc = mtc_error(F, "%s: tensors %s and %s overlap (data_offsets)", path,
                               v[i - 1].name, v[i].name);
            else if (v[i].b0 > at)
                rc = mtc_error(F, "%s: %llu bytes before tensor %s belong to no tensor (a hole)",
                               path, (unsigned long long)(v[i].b0 - at), v[i].name);
            at = v[i].b1;
        }
        if (rc == MTC_OK && at != data_bytes)
            rc = mtc_error(F, "%s: the tensors end at byte %llu of a %llu-byte data section (%s)",
                           path, (unsigned long long)at, (unsigned long long)data_bytes,
                           at > data_bytes ? "past the end: a truncated file" : "bytes left over");
    }
    free(v);
    return rc;
}

mtc_result_t ckpt_st_finite(const float *v, size_t n, const char *path, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return mtc_error(MTC_ERR_FORMAT,
                             "%s: tensor %s holds %s at element %zu (weights must "
                             "be finite)",
                             path, name, isnan(v[i]) ? "NaN" : "Inf", i);
    return MTC_OK;
}

static int ends_with(const char *s, const char *t) {
    size_t a = strlen(s), b = strlen(t);
    return a >= b && !strcmp(s + a - b, t);
}

int ckpt_st_ignorable(const char *name, int tied) {
    return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") ||
           ends_with(name, "rotary_emb.inv_freq") || (tied && !strcmp(name, "lm_head.weight"));
}

/* mtc's flags -> config.json's fields, per model_type */
static const char *const gpt2_fields[][2] = {
    {"num-layers", "n_layer"},
    {"hidden-size", "n_embd"},
    {"num-attention-heads", "n_head"},
    {"ffn-hidden-size", "n_inner"},
    {"max-position-embeddings", "n_positions"},
    {"norm-epsilon", "layer_norm_epsilon"},
    {"vocab-size", "vocab_size"},
    {"init-method-std", "initializer_range"},
};
static const char *const llama_fields[][2] = {
    {"num-layers", "num_hidden_layers"},
    {"hidden-size", "hidden_size"},
    {"num-attention-heads", "num_attention_heads"},
    {"num-query-groups", "num_key_value_heads"},
    {"kv-channels", "head_dim"},
    {"ffn-hidden-size", "intermediate_size"},
    {"max-position-embeddings", "max_position_embeddings"},
    {"norm-epsilon", "rms_norm_eps"},
    {"rotary-base", "rope_theta"},
    {"vocab-size", "vocab_size"},
    {"init-method-std", "initializer_range"},
    {"num-experts", "num_local_experts"},
    {"moe-router-topk", "num_experts_per_tok"},
    {"moe-ffn-hidden-size", "moe_intermediate_size"},
};

void ckpt_hf_field_names(const char *msg, const char *model_type, char *out, size_t cap) {
    int gpt2 = model_type && !strcmp(model_type, "gpt2");
    const char *const(*map)[2] = gpt2 ? gpt2_fields : llama_fields;
    size_t n = gpt2 ? sizeof gpt2_fields / sizeof *gpt2_fields
                    : sizeof llama_fields / sizeof *llama_fields;
    size_t o = 0;
    if (cap == 0) return;
    for (const char *p = msg; *p && o + 1 < cap;) {
        int word = p == msg || !(isalnum((unsigned char)p[-1]) || p[-1] == '-' || p[-1] == '_');
        size_t k = 0;
        for (; word && k < n; k++) {
            size_t len = strlen(map[k][0]);
            if (!strncmp(p, map[k][0], len) && p[len] == '=') break;
        }
        if (word && k < n) {
            o += (size_t)snprintf(out + o, cap - o, "%s", map[k][1]);
            if (o >= cap) o = cap - 1;
            p += strlen(map[k][0]);
        } else
            out[o++] = *p++;
    }
    out[o] = 0;
}
