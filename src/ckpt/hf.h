/* ckpt/hf.h - Hugging Face export and import: model.safetensors (sharded
 * with model.safetensors.index.json above a size limit), config.json and
 * generation_config.json (hf_config.c), for GPT2LMHeadModel,
 * LlamaForCausalLM, Qwen3ForCausalLM (Llama with --qk-layernorm: q_norm /
 * k_norm), and Llama-style MoE models as MixtralForCausalLM,
 * Qwen2MoeForCausalLM or Qwen3MoeForCausalLM (hf_moe.c), and
 * multi-latent attention models (MTP depths included) as
 * DeepseekV3ForCausalLM (hf_dsv3.c).
 *
 * safetensors: 8-byte little-endian header length N, N bytes of JSON
 * (padded with spaces to a multiple of 8) mapping each name to
 * {"dtype", "shape", "data_offsets": [begin, end)} relative to the data that
 * follows, contiguous from 0; "__metadata__": {"format": "pt"}.
 *
 * From mtc's registry (weights (out, in) as nn.Linear, fused [q|k|v] and
 * [gate|up] rows, the vocabulary padded for Megatron):
 *   GPT-2   transformer.{wte,wpe,h.N.*,ln_f}; the four Conv1D weights
 *           (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) transposed to
 *           (in, out); wte cut to the real vocabulary; the head tied (no
 *           lm_head.weight).
 *   Llama   model.embed_tokens, model.layers.N.{input_layernorm,
 *           self_attn.{q,k,v,o}_proj, post_attention_layernorm,
 *           mlp.{gate,up,down}_proj}, model.norm, lm_head (untied only):
 *           qkv_proj's row blocks become q/k/v_proj, gate_up_proj's
 *           gate/up_proj; no RoPE permutation (both rotate halves).
 * Import is the inverse (F32, BF16 or F16 tensors; padded vocabulary rows
 * zero). Models outside these two shapes (e.g. GPT-2 without biases, Llama
 * with biases or interleaved RoPE) are refused with UNSUPPORTED naming why.
 * Relies on the registry, cJSON, core/dtype.h. Does not write the Hugging
 * Face tokenizer files (cli/cmd_export.c adds them from data/tokenizer.h);
 * mtc_tokenizer.txt keeps mtc's own text form, which import reads back. */
#ifndef MTC_CKPT_HF_H
#define MTC_CKPT_HF_H

#include <stdint.h>

#include "core/result.h"
#include "model/model.h"

/* What config.json and generation_config.json say beyond the model. */
typedef struct {
    int ids_set;             /* bos / eos below are the tokenizer's (else null) */
    int bos, eos;            /* -1: the tokenizer has none (null); pad_token_id = eos */
    const char *torch_dtype; /* "float32" (NULL), "bfloat16", "float16" */
    const char *tjs_dtype;   /* transformers.js_config.dtype ("fp32", "fp16") or NULL; with it
                                an MoE model's model_type is "llama" (transformers.js 3.x has
                                no Mixtral / Qwen2-MoE class; the ONNX graph holds the MoE,
                                the config only sizes the cache), the class kept in
                                "mtc_moe_architecture" */
    int tjs_external;        /* transformers.js_config.use_external_data_format (ONNX weights
                                in onnx/model*.onnx_data) */
    const char *arch;        /* MoE: MixtralForCausalLM, Qwen2MoeForCausalLM, ... (NULL: the
                                first that holds the model, ckpt/hf_moe.c) */
} mtc_hf_config_opts;

typedef struct {
    int bf16;                  /* BF16 tensors instead of F32 */
    int64_t max_shard_bytes;   /* split above this (0: 5 GB, Hugging Face's default) */
    mtc_hf_config_opts config; /* torch_dtype is set from bf16 */
} mtc_hf_export_opts;

/* MTC_OK when a Hugging Face class (arch for an MoE model, NULL: the
 * default) holds serial model m; else UNSUPPORTED naming why. */
mtc_result_t mtc_hf_supported(const mtc_model *m, const char *arch);
/* Writes dir/config.json and dir/generation_config.json for serial model m
 * (UNSUPPORTED, naming why, for a model no Hugging Face class holds). Floats
 * are the shortest decimals that read back as the model's values. */
mtc_result_t mtc_hf_write_config(const mtc_model *m, const char *dir, const mtc_hf_config_opts *o);

/* Writes outdir/{model.safetensors | model-0000k-of-0000n.safetensors +
 * index}, config.json and mtc_tokenizer.txt for a serial model m. */
mtc_result_t mtc_hf_export(const mtc_model *m, const char *tokenizer, const char *outdir,
                           const mtc_hf_export_opts *o);
/* Reads such a folder into a new serial model (seq_length: the model's
 * context for training, 0 = min(max positions, 1024); the vocabulary padded
 * to a multiple of divisible_by). tokenizer (MTC_CKPT_TOKENIZER_MAX) gets
 * mtc_tokenizer.txt or "none". */
mtc_result_t mtc_hf_import(const char *dir, int seq_length, int divisible_by, mtc_model **out,
                           char *tokenizer);

#endif
