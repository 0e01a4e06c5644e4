/* model/mla_cli.h - the multi-latent attention flags (Megatron's
 * _add_mla_args, --rope-type, and the YaRN fields MLATransformerConfig
 * has without a flag) for model_cli.h's table, and their resolution into
 * mtc_mla_config with Megatron's refusals (mla_cli.c). */
#ifndef MTC_MODEL_MLA_CLI_H
#define MTC_MODEL_MLA_CLI_H

#include "core/args.h"
#include "model/mla.h"

typedef struct {
    int on, q_lora, kv_lora, qk_dim, qk_pos, v_dim, orig_max;
    double scale, mscale, mscale_all, beta_fast, beta_slow;
    const char *rope_type; /* NULL: yarn with MLA, rope otherwise (Megatron's default) */
} mla_cli_flags;

/* Megatron's argparse defaults; original-max-position-embeddings and the
 * betas are MLATransformerConfig's */
#define MLA_CLI_DEFAULTS                                                                           \
    { 0, 0, 32, 128, 64, 128, 4096, 1.0, 1.0, 0.0, 32, 1, NULL }

/* clang-format off */
#define MLA_CLI_ARGS(f)                                                                            \
    {"multi-latent-attention", NULL, MTC_ARG_FLAG, &(f).on, NULL,                                  \
     "multi-latent attention (DeepSeek-V2/V3; docs/deepseek.md)", 0},                              \
    {"q-lora-rank", NULL, MTC_ARG_INT, &(f).q_lora, "N",                                           \
     "MLA: rank of the query latent (default none: no query compression)", 0},                     \
    {"kv-lora-rank", NULL, MTC_ARG_INT, &(f).kv_lora, "N",                                         \
     "MLA: rank of the key/value latent (default 32)", 0},                                         \
    {"qk-head-dim", NULL, MTC_ARG_INT, &(f).qk_dim, "N",                                           \
     "MLA: query/key channels per head without position (default 128)", 0},                       \
    {"qk-pos-emb-head-dim", NULL, MTC_ARG_INT, &(f).qk_pos, "N",                                   \
     "MLA: rotated channels per head, one key head shared (default 64)", 0},                       \
    {"v-head-dim", NULL, MTC_ARG_INT, &(f).v_dim, "N", "MLA: value channels per head (default 128)", \
     0},                                                                                           \
    {"rope-type", NULL, MTC_ARG_STRING, &(f).rope_type, "S",                                       \
     "rope|yarn: MLA's rotary frequencies (default yarn with MLA)", 0},                            \
    {"rotary-scaling-factor", NULL, MTC_ARG_DOUBLE, &(f).scale, "X",                               \
     "YaRN scaling factor s (default 1.0)", 0},                                                    \
    {"mscale", NULL, MTC_ARG_DOUBLE, &(f).mscale, "X", "YaRN mscale (default 1.0)", 0},            \
    {"mscale-all-dim", NULL, MTC_ARG_DOUBLE, &(f).mscale_all, "X",                                 \
     "YaRN mscale_all_dim, also in the softmax scale (default 0.0)", 0},                           \
    {"original-max-position-embeddings", NULL, MTC_ARG_INT, &(f).orig_max, "N",                    \
     "YaRN's original context length (default 4096)", 0},                                         \
    {"beta-fast", NULL, MTC_ARG_DOUBLE, &(f).beta_fast, "X", "YaRN beta_fast (default 32)", 0},    \
    {"beta-slow", NULL, MTC_ARG_DOUBLE, &(f).beta_slow, "X", "YaRN beta_slow (default 1)", 0}
/* clang-format on */

/* f into c; gqa: --group-query-attention was given; qk_norm:
 * --qk-layernorm (MLA's latent norms). MTC_ERR_INVALID_ARGUMENT with
 * Megatron's message where it has one. */
mtc_result_t mla_cli_resolve(const mla_cli_flags *f, int gqa, int qk_norm, mtc_mla_config *c);

#endif
