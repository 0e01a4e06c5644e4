/* ckpt/gguf.h - GGUF v3 export for llama.cpp (`gpt2`, `llama`, for
 * --qk-layernorm models `qwen3` / `qwen3moe`, for shared-expert MoE models
 * `qwen2moe` / `deepseek`, for multi-latent attention `deepseek2`
 * (ckpt/gguf_mla.c) architectures, F32 or F16 matrices; 1-D tensors always
 * F32; MTP depths left out).
 *
 * File: "GGUF", version 3, tensor count, key/value count, typed key/values
 * (general.*, <arch>.*, tokenizer.ggml.*), tensor infos (name, dims listed
 * fastest first, type, offset), the data aligned to 32 bytes.
 * Tensors in nn.Linear (out, in) layout, the vocabulary cut to its real
 * size: GPT-2 token_embd, position_embd, blk.N.{attn_norm, attn_qkv
 * ([q | k | v] rows), attn_output, ffn_norm, ffn_up, ffn_down}, output_norm
 * (tied head: no output); Llama token_embd, blk.N.{attn_norm, attn_q,
 * attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down},
 * output_norm, output (untied); a Llama MoE model (Mixtral's form: experts
 * in every layer, softmax router renormalised over the top k, no shared
 * expert; anything else refused by name) has llama.expert_count,
 * llama.expert_used_count, feed_forward_length = the experts', and per layer
 * ffn_gate_inp (the router, (E, C)) and ffn_gate_exps / ffn_up_exps /
 * ffn_down_exps (the E experts stacked: dims C, F, E and F, C, E) instead of
 * the dense MLP. llama.cpp rotates adjacent pairs where mtc
 * and Hugging Face rotate halves, so the rows of Q and K are permuted per
 * head (new row 2j = old j, 2j+1 = old j + hd/2). qwen3 / qwen3moe are the
 * same tensors plus blk.N.attn_q_norm / attn_k_norm (head size), RoPE
 * rotating halves as mtc (no permutation); qwen3moe renormalises the top-k
 * weights (the default router; --moe-router-pre-softmax is refused) and
 * has <arch>.expert_feed_forward_length.
 * Tokenizer (tokenizer.ggml.model "gpt2", pre "gpt-2"): the caller's
 * mtc_gguf_vocab when given (a GPT-2 BPE vocabulary with its merges, or a
 * byte/char one without merges: tokens spelled in GPT-2's byte-to-unicode
 * alphabet); else from the tokenizer's text form: "byte" and the byte-wise
 * "char:" as single-byte tokens, anything else as "<id>" tokens.
 * Relies on the registry and the configuration; refuses (UNSUPPORTED) what
 * the two architectures cannot express, as ckpt/hf.h does. */
#ifndef MTC_CKPT_GGUF_H
#define MTC_CKPT_GGUF_H

#include <stdint.h>

#include "core/result.h"
#include "model/model.h"

/* tokenizer.ggml.* as llama.cpp reads them (ckpt/ does not know tokenizers:
 * the caller fills this from data/tokenizer.h). */
enum { MTC_GGUF_TOKEN_NORMAL = 1, MTC_GGUF_TOKEN_CONTROL = 3, MTC_GGUF_TOKEN_UNUSED = 5 };
/* (also 2 unknown, 4 user defined, 6 byte: SentencePiece's own piece types) */
typedef struct {
    int n_tokens;        /* must equal the model's vocab_size */
    char *const *tokens; /* n_tokens strings in GPT-2's byte-to-unicode spelling */
    const int *types;    /* n_tokens MTC_GGUF_TOKEN_* */
    char *const *merges; /* n_merges "a b" strings, rank order */
    size_t n_merges;
    int bos, eos; /* -1: none (then 0 is written, as before) */
    /* SentencePiece and tiktoken vocabularies (data/tok_ext.h); NULL/0 keep GPT-2's */
    const char *model;    /* tokenizer.ggml.model: NULL "gpt2", or "llama" (SentencePiece) */
    const char *pre;      /* tokenizer.ggml.pre: NULL "gpt-2" (ignored for "llama") */
    const float *scores;  /* n_tokens tokenizer.ggml.scores, or NULL */
    int has_unk, unk;     /* tokenizer.ggml.unknown_token_id, when has_unk */
    int add_space_prefix; /* "llama": tokenizer.ggml.add_space_prefix */
} mtc_gguf_vocab;

typedef struct {
    int f16;                     /* F16 matrices instead of F32 */
    const mtc_gguf_vocab *vocab; /* NULL: derived from the tokenizer's text form */
} mtc_gguf_export_opts;

/* IEEE half of x, rounded to nearest even (also used by ckpt/onnx.c). */
uint16_t mtc_gguf_f32_to_f16(float x);

mtc_result_t mtc_gguf_export(const mtc_model *m, const char *tokenizer, const char *path,
                             const mtc_gguf_export_opts *o);

#endif
