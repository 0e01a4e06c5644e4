/* ckpt/hf_check.h - validation of what a Hugging Face folder holds, for the
 * import side of hf.c: a safetensors header checked as a whole before any
 * tensor is read, weights checked finite, and every stored tensor accounted
 * for. Each refusal is MTC_ERR_FORMAT with one line naming the file, the
 * tensor and the field. Does not read tensor data itself. */
#ifndef MTC_CKPT_HF_CHECK_H
#define MTC_CKPT_HF_CHECK_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "core/result.h"

/* header: the parsed JSON of a safetensors file whose data section holds
 * data_bytes bytes. Every entry but __metadata__ must have a known dtype, a
 * shape of integers >= 0 and data_offsets [b0, b1] of integers with
 * b1 - b0 = prod(shape) x the dtype's size, b0 a multiple of that size; the
 * entries sorted by b0 tile [0, data_bytes) exactly (contiguous, no
 * overlap, no hole, nothing past the end); no name twice. */
mtc_result_t ckpt_st_header_check(const cJSON *header, size_t data_bytes, const char *path);

/* n floats read for tensor `name` must be finite. */
mtc_result_t ckpt_st_finite(const float *v, size_t n, const char *path, const char *name);

/* 1 when a stored tensor may be left unread: GPT-2's attention-mask
 * buffers (.attn.bias, .attn.masked_bias), rotary inv_freq buffers, and
 * lm_head.weight when the embeddings are tied. */
int ckpt_st_ignorable(const char *name, int tied);

/* An mtc message about a configuration read from config.json (the model
 * validator's "hidden-size=32 is not divisible by num-attention-heads=5")
 * rewritten in that file's own field names ("n_embd=32 is not divisible by
 * n_head=5"): every "FLAG=" of map's left column, as a whole word, becomes
 * its right column. model_type picks the map (gpt2, or the llama family). */
void ckpt_hf_field_names(const char *msg, const char *model_type, char *out, size_t cap);

#endif
