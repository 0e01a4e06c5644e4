/* ckpt/gguf.h - GGUF v3 export for llama.cpp (`gpt2` and `llama`
 * architectures, F32 or F16 matrices; 1-D tensors always F32).
 *
 * File: "GGUF", version 3, tensor count, key/value count, typed key/values
 * (general.*, <arch>.*, tokenizer.ggml.*), tensor infos (name, dims listed
 * fastest first, type, offset), the data aligned to 32 bytes.
 * Tensors in nn.Linear (out, in) layout, the vocabulary cut to its real
 * size: GPT-2 token_embd, position_embd, blk.N.{attn_norm, attn_qkv
 * ([q | k | v] rows), attn_output, ffn_norm, ffn_up, ffn_down}, output_norm
 * (tied head: no output); Llama token_embd, blk.N.{attn_norm, attn_q,
 * attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down},
 * output_norm, output (untied). llama.cpp rotates adjacent pairs where mtc
 * and Hugging Face rotate halves, so the rows of Q and K are permuted per
 * head (new row 2j = old j, 2j+1 = old j + hd/2).
 * Tokenizer: mtc's byte or char vocabulary as a byte-level BPE vocabulary
 * without merges (tokenizer.ggml.model "gpt2": each byte is its GPT-2
 * byte-to-unicode character), token-id models as "<id>" tokens.
 * Relies on the registry and the configuration; refuses (UNSUPPORTED) what
 * the two architectures cannot express, as ckpt/hf.h does. */
#ifndef MTC_CKPT_GGUF_H
#define MTC_CKPT_GGUF_H

#include "core/result.h"
#include "model/model.h"

typedef struct {
    int f16; /* F16 matrices instead of F32 */
} mtc_gguf_export_opts;

mtc_result_t mtc_gguf_export(const mtc_model *m, const char *tokenizer, const char *path,
                             const mtc_gguf_export_opts *o);

#endif
