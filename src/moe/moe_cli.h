/* moe/moe_cli.h - Megatron's MoE flags for a command's argument table
 * (core/args.h): the destinations (moe_cli_flags), the table rows
 * (MOE_CLI_ARGS) and their resolution into mtc_moe_config with one-line
 * errors. The layout rules that need tp / ep / etp are mtc_moe_validate's. */
#ifndef MTC_MOE_MOE_CLI_H
#define MTC_MOE_MOE_CLI_H

#include "core/args.h"
#include "moe/moe.h"

typedef struct {
    int num_experts;
    const char *layer_freq;
    int ffn, topk;
    const char *score;
    int pre_softmax;
    double scaling;
    int num_groups, group_topk, expert_bias;
    double bias_rate;
    const char *lb;
    double aux, z, capacity;
    const char *drop;
    int pad, shared;
    const char *dispatcher;
    int force_balance;
} moe_cli_flags;

#define MOE_CLI_DEFAULTS                                                                           \
    {                                                                                              \
        0, "1", 0, 2, "softmax", 0, 0, 0, 0, 0, 1e-3, "aux_loss", 0, 0, 0, "probs", 0, 0,          \
            "allgather", 0                                                                         \
    }

#define MOE_CLI_ARGS(f)                                                                             \
    {"num-experts",                                                                                 \
     NULL,                                                                                          \
     MTC_ARG_INT,                                                                                   \
     &(f).num_experts,                                                                              \
     "E",                                                                                           \
     "experts per MoE layer (default: none, a dense model)",                                        \
     0},                                                                                            \
        {"moe-layer-freq",                                                                          \
         NULL,                                                                                      \
         MTC_ARG_STRING,                                                                            \
         &(f).layer_freq,                                                                           \
         "K|LIST",                                                                                  \
         "every K-th layer is MoE, or a 0/1 list per layer such as [1,0,1,0] (default 1)",          \
         0},                                                                                        \
        {"moe-ffn-hidden-size",                                                                     \
         NULL,                                                                                      \
         MTC_ARG_INT,                                                                               \
         &(f).ffn,                                                                                  \
         "N",                                                                                       \
         "an expert's MLP width (default ffn-hidden-size)",                                         \
         0},                                                                                        \
        {"moe-router-topk", NULL, MTC_ARG_INT, &(f).topk, "K", "experts per token (default 2)", 0}, \
        {"moe-router-score-function",         NULL, MTC_ARG_STRING, &(f).score, "S",                \
         "softmax|sigmoid (default softmax)", 0},                                                   \
        {"moe-router-pre-softmax",                                                                  \
         NULL,                                                                                      \
         MTC_ARG_FLAG,                                                                              \
         &(f).pre_softmax,                                                                          \
         NULL,                                                                                      \
         "softmax over all experts before the top-k",                                               \
         0},                                                                                        \
        {"moe-router-topk-scaling-factor",                                                          \
         NULL,                                                                                      \
         MTC_ARG_DOUBLE,                                                                            \
         &(f).scaling,                                                                              \
         "X",                                                                                       \
         "multiply the routing probabilities (default none)",                                       \
         0},                                                                                        \
        {"moe-router-num-groups",                                                                   \
         NULL,                                                                                      \
         MTC_ARG_INT,                                                                               \
         &(f).num_groups,                                                                           \
         "G",                                                                                       \
         "expert groups for group-limited routing",                                                 \
         0},                                                                                        \
        {"moe-router-group-topk",                                                                   \
         NULL,                                                                                      \
         MTC_ARG_INT,                                                                               \
         &(f).group_topk,                                                                           \
         "K",                                                                                       \
         "groups each token may use (group-limited routing)",                                       \
         0},                                                                                        \
        {"moe-router-enable-expert-bias",                                                           \
         NULL,                                                                                      \
         MTC_ARG_FLAG,                                                                              \
         &(f).expert_bias,                                                                          \
         NULL,                                                                                      \
         "aux-loss-free balancing: a per-expert routing bias moved after each step (sigmoid)",      \
         0},                                                                                        \
        {"moe-router-bias-update-rate",           NULL, MTC_ARG_DOUBLE, &(f).bias_rate, "X",        \
         "the expert bias's step (default 1e-3)", 0},                                               \
        {"moe-router-load-balancing-type",                                                          \
         NULL,                                                                                      \
         MTC_ARG_STRING,                                                                            \
         &(f).lb,                                                                                   \
         "S",                                                                                       \
         "aux_loss|seq_aux_loss|global_aux_loss|none (default aux_loss)",                           \
         0},                                                                                        \
        {"moe-aux-loss-coeff",                                                                      \
         NULL,                                                                                      \
         MTC_ARG_DOUBLE,                                                                            \
         &(f).aux,                                                                                  \
         "X",                                                                                       \
         "load-balancing loss coefficient (default 0)",                                             \
         0},                                                                                        \
        {"moe-z-loss-coeff", NULL, MTC_ARG_DOUBLE, &(f).z, "X", "router z-loss (default off)", 0},  \
        {"moe-expert-capacity-factor",                                                              \
         NULL,                                                                                      \
         MTC_ARG_DOUBLE,                                                                            \
         &(f).capacity,                                                                             \
         "X",                                                                                       \
         "expert capacity = ceil(tokens x topk / experts x X) (default: dropless)",                 \
         0},                                                                                        \
        {"moe-token-drop-policy",                                                                   \
         NULL,                                                                                      \
         MTC_ARG_STRING,                                                                            \
         &(f).drop,                                                                                 \
         "S",                                                                                       \
         "probs|position: which tokens over capacity drop (default probs)",                         \
         0},                                                                                        \
        {"moe-pad-expert-input-to-capacity",         NULL, MTC_ARG_FLAG, &(f).pad, NULL,            \
         "pad every expert's input to the capacity", 0},                                            \
        {"moe-router-force-load-balancing",                                                         \
         NULL,                                                                                      \
         MTC_ARG_FLAG,                                                                              \
         &(f).force_balance,                                                                        \
         NULL,                                                                                      \
         "benchmarking: random normal router logits (gradients pass straight through)",             \
         0},                                                                                        \
        {"moe-shared-expert-intermediate-size",                                                     \
         NULL,                                                                                      \
         MTC_ARG_INT,                                                                               \
         &(f).shared,                                                                               \
         "N",                                                                                       \
         "a shared expert (dense MLP) of this width beside the routed ones",                        \
         0},                                                                                        \
    {                                                                                               \
        "moe-token-dispatcher-type", NULL, MTC_ARG_STRING, &(f).dispatcher, "S",                    \
            "allgather|alltoall (default allgather)", 0                                             \
    }

/* f into *out (capacity_seen: --moe-expert-capacity-factor was given).
 * MTC_ERR_INVALID_ARGUMENT with one line naming the value and the fix. */
mtc_result_t moe_cli_resolve(const moe_cli_flags *f, int capacity_seen, mtc_moe_config *out);

#endif
