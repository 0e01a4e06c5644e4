/* ckpt/onnx.h - ONNX export of a decoder (GPT-2, Llama, their MoE forms,
 * multi-latent attention with KVH = NH and HS = mtc_onnx_head_dim)
 * as the graph Hugging Face's Optimum exports and transformers.js runs:
 *
 *   inputs   input_ids (batch, seq) int64, attention_mask (batch, total)
 *            int64, position_ids (batch, seq) int64,
 *            past_key_values.N.key / .value (batch, KVH, past, HS) float
 *   outputs  logits (batch, seq, V) float,
 *            present.N.key / .value (batch, KVH, total, HS) float
 *
 * total = past + seq; the cache is kept per key/value head (grouped-query
 * attention repeats it over the query heads inside the graph). The first
 * call passes past tensors with past = 0. Standard operators only (default
 * domain, opset 17): LayerNormalization for LayerNorm, RMSNorm and the tanh
 * GELU composed of elementwise operators, RoPE from the model's own cos/sin
 * tables (gathered at position_ids), MoE as every expert run on every token
 * and weighted by the router's top-k probabilities (zero elsewhere).
 * Weights fp32, or fp16 (f16: stored as FLOAT16 and cast to float by the
 * graph, the arithmetic stays fp32); the LM head cut to the real vocabulary;
 * in the .onnx file, or in PATH_data as ONNX external data.
 * Relies on the registry and ckpt/onnx_pb.h. Does not write the folder
 * around the graph (cli/cmd_export.c does). */
#ifndef MTC_CKPT_ONNX_H
#define MTC_CKPT_ONNX_H

#include "core/result.h"
#include "model/model.h"

typedef struct {
    int f16;      /* FLOAT16 weights */
    int external; /* weights in PATH_data beside the graph (ONNX external data; needed above
                     protobuf's 2 GB, mtc_onnx_needs_external) */
} mtc_onnx_export_opts;

/* 1 when the weights of m (at f16 or fp32) exceed limit bytes (0: 1.9 GB, under
 * protobuf's 2 GB cap on one file). */
int mtc_onnx_needs_external(const mtc_model *m, int f16, int64_t limit);

/* MTC_OK when the graph can hold model m, else UNSUPPORTED naming why. */
mtc_result_t mtc_onnx_supported(const mtc_model *m);
/* The head size of the graph's key/value cache: the model's, or for MLA
 * max(qk-head-dim + qk-pos-emb-head-dim, v-head-dim) (heads padded). */
int mtc_onnx_head_dim(const mtc_model_config *c);
/* Writes the graph of serial model m to path (one .onnx file). */
mtc_result_t mtc_onnx_export(const mtc_model *m, const char *path, const mtc_onnx_export_opts *o);

#endif
