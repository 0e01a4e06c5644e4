/* model/model_cli.h - the model-architecture flags (Megatron's names) for
 * a command's argument table (core/args.h), shared by every command that
 * builds or describes a model (train, plan): the destinations
 * (model_cli_flags), the table rows (MODEL_CLI_ARGS) and their resolution
 * into mtc_model_config with one-line errors (model_cli.c). The shape
 * flags whose defaults or ranges differ per command (num-layers,
 * hidden-size, heads, ffn, seq-length, vocabulary) stay in the command. */
#ifndef MTC_MODEL_MODEL_CLI_H
#define MTC_MODEL_MODEL_CLI_H

#include "core/args.h"
#include "model/mla_cli.h"
#include "model/model.h"

typedef struct {
    const char *norm, *posemb;
    double norm_eps, rot_base, rot_pct, init_std;
    int use_rope, rot_inter, swiglu, gqa, groups, kv_channels, untie, nobias, qkv_bias;
    int qk_norm;       /* --qk-layernorm */
    mla_cli_flags mla; /* --multi-latent-attention and YaRN (model/mla_cli.h) */
    int mtp_layers;    /* --mtp-num-layers (model/mtp.h) */
    double mtp_factor; /* --mtp-loss-scaling-factor */
} model_cli_flags;

#define MODEL_CLI_DEFAULTS                                                                         \
    {                                                                                              \
        "LayerNorm", "learned_absolute", 1e-5, 10000, 1.0, 0.02, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0,     \
            MLA_CLI_DEFAULTS, 0, 0.1                                                               \
    }

/* clang-format off */
/* The model's shape, one table row each, shared by train and plan (ints:
 * layers, hidden, heads, ffn (0: 4 x hidden), seq). */
#define MODEL_SHAPE_ARGS(L, C, NH, F, T)                                                           \
    {"num-layers", NULL, MTC_ARG_INT, &(L), "N", "transformer layers (default 4)", 0},             \
    {"hidden-size", NULL, MTC_ARG_INT, &(C), "N", "hidden size (default 128)", 0},                 \
    {"num-attention-heads", NULL, MTC_ARG_INT, &(NH), "N", "attention heads (default 4)", 0},      \
    {"ffn-hidden-size", NULL, MTC_ARG_INT, &(F), "N", "MLP hidden size (default 4*hidden)", 0},    \
    {"seq-length", NULL, MTC_ARG_INT, &(T), "N", "sequence length (default 128)", 0}
#define MODEL_CLI_ARGS(f)                                                                          \
    {"normalization", NULL, MTC_ARG_STRING, &(f).norm, "S",                                        \
     "LayerNorm|RMSNorm (default LayerNorm; RMSNorm for Llama)", 0},                               \
    {"norm-epsilon", NULL, MTC_ARG_DOUBLE, &(f).norm_eps, "X", "norm epsilon (default 1e-5)", 0},  \
    {"position-embedding-type", NULL, MTC_ARG_STRING, &(f).posemb, "S",                            \
     "learned_absolute|rope|none (default learned_absolute; rope for Llama)", 0},                  \
    {"use-rotary-position-embeddings", NULL, MTC_ARG_FLAG, &(f).use_rope, NULL,                    \
     "the same as --position-embedding-type rope", 0},                                             \
    {"rotary-base", NULL, MTC_ARG_DOUBLE, &(f).rot_base, "X", "RoPE base (default 10000)", 0},     \
    {"rotary-percent", NULL, MTC_ARG_DOUBLE, &(f).rot_pct, "X",                                    \
     "fraction of each head's channels rotated (default 1.0)", 0},                                 \
    {"rotary-interleaved", NULL, MTC_ARG_FLAG, &(f).rot_inter, NULL,                               \
     "rotate adjacent channel pairs instead of the two halves (default off, as HF Llama)", 0},     \
    {"swiglu", NULL, MTC_ARG_FLAG, &(f).swiglu, NULL,                                              \
     "SwiGLU MLP: fc1 = [gate | up], silu(gate) * up (ffn default int(8h/3/64)*64)", 0},           \
    {"group-query-attention", NULL, MTC_ARG_FLAG, &(f).gqa, NULL,                                  \
     "grouped-query attention with --num-query-groups key/value heads", 0},                        \
    {"num-query-groups", NULL, MTC_ARG_INT, &(f).groups, "G",                                      \
     "key/value groups with --group-query-attention (default 1)", 0},                              \
    {"kv-channels", NULL, MTC_ARG_INT, &(f).kv_channels, "N",                                      \
     "head size (default hidden-size / num-attention-heads)", 0},                                  \
    {"untie-embeddings-and-output-weights", NULL, MTC_ARG_FLAG, &(f).untie, NULL,                  \
     "a separate output layer instead of the input embedding (Llama)", 0},                         \
    {"disable-bias-linear", NULL, MTC_ARG_FLAG, &(f).nobias, NULL,                                 \
     "no biases in the linear layers (Llama)", 0},                                                 \
    {"add-qkv-bias", NULL, MTC_ARG_FLAG, &(f).qkv_bias, NULL,                                      \
     "a QKV bias even with --disable-bias-linear (Qwen)", 0},                                      \
    {"qk-layernorm", NULL, MTC_ARG_FLAG, &(f).qk_norm, NULL,                                       \
     "normalise each query and key head (--normalization's kind) before RoPE", 0},                 \
    {"init-method-std", NULL, MTC_ARG_DOUBLE, &(f).init_std, "X",                                  \
     "std of the normal initialisation (default 0.02; output projections / sqrt(2L))", 0},         \
    MLA_CLI_ARGS((f).mla),                                                                         \
    {"mtp-num-layers", NULL, MTC_ARG_INT, &(f).mtp_layers, "D",                                    \
     "multi-token prediction: D depths after the model, each predicting one token further "       \
     "(embedding + projection + one layer + the shared head; rope or no positions)", 0},           \
    {"mtp-loss-scaling-factor", NULL, MTC_ARG_DOUBLE, &(f).mtp_factor, "X",                        \
     "weight of the MTP losses' mean over the depths in the objective (default 0.1)", 0}
/* clang-format on */

/* How a command reads --num-query-groups without --group-query-attention. */
typedef enum {
    MODEL_CLI_GROUPS_NEED_GQA = 0, /* refused, as mtc train (Megatron ignores it there) */
    MODEL_CLI_GROUPS_IMPLY_GQA,    /* grouped-query attention with G groups (mtc plan's form) */
} model_cli_groups;

/* f into mc's architecture fields (normalization, positions, RoPE, SwiGLU,
 * groups, head size, untied head, biases, init std); groups_seen:
 * --num-query-groups was given. MTC_ERR_INVALID_ARGUMENT with one line
 * naming the value and the fix. */
mtc_result_t model_cli_resolve(const model_cli_flags *f, int groups_seen, model_cli_groups g,
                               mtc_model_config *mc);
/* Megatron's ffn-hidden-size default: 4h, or int(8h/3/64)*64 with SwiGLU
 * (the parameter count of 4h), clamped to INT_MAX. */
int model_cli_default_ffn(int hidden, int swiglu);

#endif
