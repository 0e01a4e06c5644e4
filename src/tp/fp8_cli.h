/* tp/fp8_cli.h - Megatron core_v0.18.0's fp8 flags (transformer_config.py's
 * fp8 fields, arguments.py's --fp8-param-gather) for a command's argument
 * table (core/args.h): destinations, table rows (TP_FP8_CLI_ARGS) and the
 * resolution into tp_fp8_config (tp_fp8_cli_resolve), one-line errors.
 * Defaults are Megatron's: recipe delayed, amax history 1, most_recent,
 * margin 0, fp8 wgrad on, one layer at each end when --first-last-layers-bf16. */
#ifndef MTC_TP_FP8_CLI_H
#define MTC_TP_FP8_CLI_H

#include "core/args.h"
#include "core/result.h"
#include "tp/fp8_linear.h"

typedef struct {
    const char *format, *recipe, *algo;
    int margin, history, interval, param_gather, wgrad, tp_only, first_last, n_start, n_end;
} tp_fp8_cli;

#define TP_FP8_CLI_DEFAULTS                                                                        \
    { NULL, "delayed", "most_recent", 0, 1, 1, 0, 1, 0, 0, 1, 1 }

/* clang-format off */
#define TP_FP8_CLI_ARGS(f)                                                                         \
    {"fp8-format", NULL, MTC_ARG_STRING, &(f).format, "e4m3|hybrid",                              \
     "fp8 GEMMs in the transformer layers' linears, emulated exactly (docs/fp8.md): e4m3 for "    \
     "every operand, or hybrid (E5M2 gradients); needs --bf16 (default: none)", 0},               \
    {"fp8-recipe", NULL, MTC_ARG_STRING, &(f).recipe, "R",                                         \
     "delayed (amax history), tensorwise (current scaling), mxfp8 (1x32 blocks, E8M0 scales) "    \
     "or blockwise (1x128 / 128x128, DeepSeek-V3) (default delayed)", 0},                          \
    {"fp8-margin", NULL, MTC_ARG_INT, &(f).margin, "N",                                            \
     "delayed: scale = fp8 max / amax / 2^N (default 0)", 0},                                      \
    {"fp8-amax-history-len", NULL, MTC_ARG_INT, &(f).history, "N",                                 \
     "delayed: steps of amax history per tensor (default 1)", 0},                                  \
    {"fp8-amax-compute-algo", NULL, MTC_ARG_STRING, &(f).algo, "max|most_recent",                  \
     "delayed: the amax a scale is made from (default most_recent)", 0},                          \
    {"fp8-interval", NULL, MTC_ARG_INT, &(f).interval, "N",                                        \
     "Megatron's deprecated scale-update interval: 1 only (default 1)", 0},                        \
    {"fp8-param-gather", NULL, MTC_ARG_FLAG, &(f).param_gather, NULL,                             \
     "the distributed optimizer's param all-gather moves E4M3 bytes of the fp8 weights (1 byte "  \
     "a value, bf16 2), dequantized after (mxfp8: bf16; needs --use-distributed-optimizer)", 0},    \
    {"fp8-wgrad", NULL, MTC_ARG_FLAG, &(f).wgrad, NULL,                                            \
     "the weight-gradient GEMM in fp8 too (--no-fp8-wgrad: bf16) (default on)", 0},                \
    {"tp-only-amax-red", NULL, MTC_ARG_FLAG, &(f).tp_only, NULL,                                   \
     "delayed: reduce amaxes over TP only, not TP x DP x CP (layouts then differ)", 0},           \
    {"first-last-layers-bf16", NULL, MTC_ARG_FLAG, &(f).first_last, NULL,                         \
     "keep the first and last transformer layers in bf16", 0},                                     \
    {"num-layers-at-start-in-bf16", NULL, MTC_ARG_INT, &(f).n_start, "N",                          \
     "with --first-last-layers-bf16: layers at the start (default 1)", 0},                         \
    {"num-layers-at-end-in-bf16", NULL, MTC_ARG_INT, &(f).n_end, "N",                              \
     "with --first-last-layers-bf16: layers at the end (default 1)", 0}
/* clang-format on */

/* The configuration the flags ask for (out->enabled 0 without
 * --fp8-format). seen: mtc_args_seen of the table (any fp8 flag given
 * without --fp8-format is refused). MTC_ERR_INVALID_ARGUMENT with one line
 * naming the value and the fix. */
mtc_result_t tp_fp8_cli_resolve(const tp_fp8_cli *f, const mtc_arg *args, int nargs, int bf16,
                                int distributed_optimizer, int num_layers, int pp,
                                tp_fp8_config *out);

/* The layer dimensions the block recipes' shards follow. */
typedef struct {
    int q, kv; /* query and key/value rows of the fused qkv (0: the attention is not fp8) */
    int ffn;   /* fc1's rows per block (gate and up each with SwiGLU), fc2's IN */
    int seq;   /* --seq-length */
} tp_fp8_dims;

/* mxfp8 (blocks of 32) and blockwise (128): on tp > 1 the rows per rank of
 * qkv's q, k, v and of fc1, and the IN per rank of proj and fc2, and on
 * cp > 1 the tokens of a sequence chunk (seq / 2cp), must be multiples of
 * the block, or a block straddles two ranks and the layout stops being the
 * serial run (docs/fp8.md). MTC_ERR_INVALID_ARGUMENT naming the tensor, the
 * dimension and the fix; MTC_OK for the other recipes, or without splits. */
mtc_result_t tp_fp8_check_blocks(const tp_fp8_config *c, const tp_fp8_dims *d, int tp, int cp);

#endif
