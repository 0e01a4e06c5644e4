/* ckpt/hf_internal.h - the tensor table shared by ckpt/hf.c (dense
 * families, the writer and reader) and ckpt/hf_moe.c (the MoE classes). */
#ifndef MTC_CKPT_HF_INTERNAL_H
#define MTC_CKPT_HF_INTERNAL_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/result.h"
#include "model/model.h"

/* One Hugging Face tensor: rows [r0, r0 + nrows) of registry param
 * `param` (transposed: stored (in, out)), times scale (0 = 1); or, with
 * param -1, a tensor of zeros of shape zs (a field the HF class has and
 * mtc's model does not: import requires it to be zero). */
typedef struct {
    char name[160];
    int param;         /* registry index, -1: zeros */
    int64_t r0, nrows; /* rows of the param */
    int transpose;     /* stored (in, out) */
    float scale;       /* HF = scale * mtc (0: 1) */
    int znd;           /* zeros: ndim of zs */
    int64_t zs[2];
} hf_entry;

typedef struct {
    hf_entry *v;
    int n, cap;
} hf_table;

/* Appends an entry for param p (p < 0: nothing); nrows < 0: all rows. */
mtc_result_t hf_table_add(hf_table *t, const mtc_registry *r, const char *name, int p, int64_t r0,
                          int64_t nrows, int transpose);
/* Appends a tensor of zeros of shape (s0) (s1 0) or (s0, s1). */
mtc_result_t hf_table_zeros(hf_table *t, const char *name, int64_t s0, int64_t s1);
void hf_add_float(cJSON *j, const char *key, float v);

/* ---- hf_moe.c ---- */
/* Which class holds Llama-family MoE model m: arch (NULL: Mixtral when it
 * can, else Qwen2-MoE) checked against the model's router and layers;
 * UNSUPPORTED naming the setting the class cannot express. */
mtc_result_t hf_moe_check(const mtc_model *m, const char *arch, const char **cls,
                          const char **model_type);
/* The MoE layers' tensors of layer l (after the attention's). */
mtc_result_t hf_moe_layer(const mtc_model *m, const char *cls, int l, hf_table *t);
/* Qwen2-MoE's attention biases (q/k/v_proj.bias, zeros without --add-qkv-bias). */
mtc_result_t hf_moe_qkv_bias(const mtc_model *m, const char *cls, int l, hf_table *t);
/* config.json's MoE fields for class cls. */
void hf_moe_config(const mtc_model *m, const char *cls, cJSON *j);
/* config.json of model_type mixtral / qwen2_moe into c's MoE fields (the
 * Llama ones are read by the caller); UNSUPPORTED for what mtc lacks. */
mtc_result_t hf_moe_parse(const cJSON *j, const char *path, const char *type, mtc_model_config *c);

/* ---- hf_dsv3.c ---- */
/* Can DeepseekV3ForCausalLM hold MLA model m? UNSUPPORTED naming the setting. */
mtc_result_t hf_dsv3_check(const mtc_model *m);
/* The whole table of MLA model m (the MTP depths as layers L..L+D-1). */
mtc_result_t hf_dsv3_table(const mtc_model *m, hf_table *t);
/* config.json's DeepSeek-V3 fields over the Llama ones already in j. */
void hf_dsv3_config(const mtc_model *m, cJSON *j);
/* config.json of model_type deepseek_v3 into c's MLA, MoE and MTP fields
 * (the Llama ones are read by the caller). */
mtc_result_t hf_dsv3_parse(const cJSON *j, const char *path, mtc_model_config *c);

#endif
