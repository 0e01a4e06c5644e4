/* cli/train_compat.h - the last flags of Megatron core 0.18's example
 * scripts (gpt3, llama3, mixtral, megatron_fsdp's DeepSeek-V3 and Llama-3)
 * that need no new training code: one table block (TRAIN_COMPAT_ARGS) for
 * cmd_train.c's flag table and one check after parsing
 * (train_compat_apply). What each does:
 *   --no-position-embedding        Megatron's deprecated spelling: accepted
 *                                  with --position-embedding-type rope (the
 *                                  only case Megatron accepts; it raises
 *                                  otherwise, and so does this)
 *   --moe-token-dispatcher-type flex   runs the alltoall dispatcher (the
 *                                  same tokens to the same experts); a note
 *                                  names the GPU backends it stands for
 *   --moe-flex-dispatcher-backend  deepep|hybridep, checked, in that note
 *   --moe-router-dtype fp32|fp64   mtc's router is fp32; fp64 sets
 *                                  mtc_moe_config.router_fp64 (train_check)
 *   --moe-grouped-gemm             accepted: mtc's experts always run as one
 *                                  GEMM loop over the experts (moe/experts.c),
 *                                  which is what the flag asks for
 *   TensorBoard / W&B / Megatron-internal / GPU-only flags: accepted, and
 *                                  named in cmd_train's one note ("no effect
 *                                  on CPU" in their help is that note's mark)
 * Flags that change the model or numerics (fp8, FSDP, MLA, MTP) are not
 * here: they are their own issues, and are refused until then. */
#ifndef MTC_CLI_TRAIN_COMPAT_H
#define MTC_CLI_TRAIN_COMPAT_H

#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "core/args.h"

typedef struct {
    int no_posemb;
    const char *flex_backend, *router_dtype;
    const char *s[4]; /* wandb-project, wandb-exp-name, dist-ckpt-strictness, cuda-graph-impl */
    int f[11];        /* f[0..2] unused: the TensorBoard flags are train/tensorboard.h's */
    int grouped_gemm;
    int i[2];           /* manual-gc-interval, logging-level */
    mtc_arg_ints ranks; /* profile-ranks */
    int flex;           /* set by train_compat_apply: flex was asked for */
} train_compat;

#define TC_NOTE "accepted for Megatron scripts; no effect on CPU"
#define TRAIN_COMPAT_ARGS(c)                                                                       \
    {"moe-grouped-gemm",                                                                           \
     NULL,                                                                                         \
     MTC_ARG_FLAG,                                                                                 \
     &(c).grouped_gemm,                                                                            \
     NULL,                                                                                         \
     "the local experts' GEMMs as one grouped pass over the experts: what mtc's expert path "      \
     "always runs (moe/experts.c: one GEMM loop over the experts' rows, oneDNN 2.x having no "     \
     "grouped matmul), the same numbers as Megatron's GroupedMLP",                                 \
     0},                                                                                           \
        {"no-position-embedding",                                                                  \
         NULL,                                                                                     \
         MTC_ARG_FLAG,                                                                             \
         &(c).no_posemb,                                                                           \
         NULL,                                                                                     \
         "Megatron's deprecated spelling, accepted with --position-embedding-type rope",           \
         0},                                                                                       \
        {"moe-flex-dispatcher-backend",                                                            \
         NULL,                                                                                     \
         MTC_ARG_STRING,                                                                           \
         &(c).flex_backend,                                                                        \
         "S",                                                                                      \
         "deepep|hybridep: the GPU kernels of --moe-token-dispatcher-type flex, which runs "       \
         "the alltoall dispatcher here",                                                           \
         0},                                                                                       \
        {"moe-router-dtype",                                                                       \
         NULL,                                                                                     \
         MTC_ARG_STRING,                                                                           \
         &(c).router_dtype,                                                                        \
         "S",                                                                                      \
         "fp32|fp64: the router's gating GEMMs (fp64: summed in double; routing stays fp32)",      \
         0},                                                                                       \
        {"wandb-project", NULL, MTC_ARG_STRING, &(c).s[0], "S", TC_NOTE " (W&B)", 0},              \
        {"wandb-exp-name", NULL, MTC_ARG_STRING, &(c).s[1], "S", TC_NOTE " (W&B)", 0},             \
        {"dist-ckpt-strictness",                                                                   \
         NULL,                                                                                     \
         MTC_ARG_STRING,                                                                           \
         &(c).s[2],                                                                                \
         "S",                                                                                      \
         TC_NOTE " (torch_dist loading; mtc checks every key itself)",                             \
         0},                                                                                       \
        {"cuda-graph-impl", NULL, MTC_ARG_STRING, &(c).s[3], "S", TC_NOTE " (CUDA graphs)", 0},    \
        {"log-num-zeros-in-grad",                                                                  \
         NULL,                                                                                     \
         MTC_ARG_FLAG,                                                                             \
         &(c).f[3],                                                                                \
         NULL,                                                                                     \
         "\"num zeros\" in the log line: zeros in the gradients after reduction and clipping "     \
         "(every element once, summed over the ranks)",                                            \
         0},                                                                                       \
        {"log-params-norm",                                                                        \
         NULL,                                                                                     \
         MTC_ARG_FLAG,                                                                             \
         &(c).f[4],                                                                                \
         NULL,                                                                                     \
         "\"params norm\" in the log line: the L2 norm of every parameter after the step "         \
         "(the fp32 main params; fp16 model params with --fp16), over all ranks",                  \
         0},                                                                                       \
        {"auto-detect-ckpt-format",                                                                \
         NULL,                                                                                     \
         MTC_ARG_FLAG,                                                                             \
         &(c).f[5],                                                                                \
         NULL,                                                                                     \
         TC_NOTE " (mtc --load reads its formats always)",                                         \
         0},                                                                                       \
        {"enable-experimental", NULL, MTC_ARG_FLAG, &(c).f[6], NULL, TC_NOTE, 0},                  \
        {"use-nccl-ub", NULL, MTC_ARG_FLAG, &(c).f[7], NULL, TC_NOTE " (NCCL user buffers)", 0},   \
        {"moe-permute-fusion", NULL, MTC_ARG_FLAG, &(c).f[8], NULL, TC_NOTE " (fused kernel)", 0}, \
        {"init-model-with-meta-device",                                                            \
         NULL,                                                                                     \
         MTC_ARG_FLAG,                                                                             \
         &(c).f[9],                                                                                \
         NULL,                                                                                     \
         "with --use-megatron-fsdp optim_grads_params: each rank allocates and draws only its "    \
         "shards of the params (the whole model is never resident; docs/fsdp.md)",                 \
         0},                                                                                       \
        {"fsdp-manual-registration",                                                               \
         NULL,                                                                                     \
         MTC_ARG_FLAG,                                                                             \
         &(c).f[10],                                                                               \
         NULL,                                                                                     \
         TC_NOTE " (NCCL user-buffer registration of Megatron-FSDP's buffers)",                    \
         0},                                                                                       \
        {"manual-gc-interval", NULL, MTC_ARG_INT, &(c).i[0], "N", TC_NOTE " (Python's GC)", 0},    \
        {"logging-level", NULL, MTC_ARG_INT, &(c).i[1], "N", TC_NOTE " (Python's logging)", 0}, {  \
        "profile-ranks", NULL, MTC_ARG_INTS, &(c).ranks, "R...",                                   \
            TC_NOTE " (--profile traces every rank here)", 0                                       \
    }

static inline int train_compat_one_of(const char *v, const char *const *ok, int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(v, ok[i])) return 1;
    return 0;
}

/* After parsing: the checks, and flex -> alltoall (*dispatcher may be
 * rewritten). posemb: the final --position-embedding-type. Returns -1 to go
 * on, else the exit status (usage error printed). */
static inline int train_compat_apply(train_compat *c, const char *posemb, const char **dispatcher) {
    static const char *const strict[] = {
        "assume_ok_unexpected", "log_unexpected", "log_all",   "raise_unexpected", "raise_all",
        "return_unexpected",    "return_all",     "ignore_all"};
    static const char *const graphs[] = {"none", "local", "transformer_engine", "full_iteration"};
    if (c->no_posemb && strcmp(posemb, "rope"))
        return cli_usage_error("train",
                               "--no-position-embedding is deprecated, use "
                               "--position-embedding-type (Megatron accepts it only with rope; "
                               "got %s)",
                               posemb);
    if (c->s[2] && !train_compat_one_of(c->s[2], strict, 8))
        return cli_usage_error("train",
                               "dist-ckpt-strictness=%s is unknown (use assume_ok_unexpected, "
                               "log_unexpected, log_all, raise_unexpected, raise_all, "
                               "return_unexpected, return_all or ignore_all)",
                               c->s[2]);
    if (c->s[3] && !train_compat_one_of(c->s[3], graphs, 4))
        return cli_usage_error("train",
                               "cuda-graph-impl=%s is unknown (use none, local, "
                               "transformer_engine or full_iteration)",
                               c->s[3]);
    if (c->router_dtype && strcmp(c->router_dtype, "fp32") && strcmp(c->router_dtype, "fp64"))
        return cli_usage_error("train", "moe-router-dtype=%s is unknown (use fp32 or fp64)",
                               c->router_dtype);
    if (c->flex_backend && strcmp(c->flex_backend, "deepep") && strcmp(c->flex_backend, "hybridep"))
        return cli_usage_error("train",
                               "moe-flex-dispatcher-backend=%s is unknown (use deepep or hybridep)",
                               c->flex_backend);
    if (*dispatcher && !strcmp(*dispatcher, "flex")) *dispatcher = "alltoall", c->flex = 1;
    return -1;
}

/* The one line for flex (once per job: rank 0). */
static inline void train_compat_note(const train_compat *c) {
    if (c->flex)
        fprintf(stderr,
                "note: --moe-token-dispatcher-type flex runs the alltoall dispatcher here (the "
                "same tokens reach the same experts); its %s backend is GPU kernels (%s)\n",
                c->flex_backend ? c->flex_backend : "deepep",
                c->flex_backend && !strcmp(c->flex_backend, "hybridep") ? "HybridEP" : "DeepEP");
}

#endif
