/* dp/fsdp_cli.h - Megatron-FSDP's flags in mtc train's table
 * (MTC_FSDP_CLI_ARGS) and their meaning for the run (mtc_fsdp_flags_apply):
 * --use-megatron-fsdp turns the distributed optimizer on as Megatron does
 * (no_shard runs as plain data parallelism, whose numbers it has);
 * --data-parallel-sharding-strategy picks dp/fsdp.h's strategy. */
#ifndef MTC_DP_FSDP_CLI_H
#define MTC_DP_FSDP_CLI_H

#include <stdint.h>

#include "core/result.h"

typedef struct {
    int use;              /* --use-megatron-fsdp */
    const char *strategy; /* --data-parallel-sharding-strategy (default optim_grads_params) */
    int64_t unit_size;    /* --suggested-communication-unit-size (0: unset) */
    const char *outer;    /* --outer-dp-sharding-strategy (default no_shard) */
    int double_buffer;    /* --fsdp-double-buffer */
} mtc_fsdp_flags;
/* clang-format off */
#define MTC_FSDP_FLAGS_DEFAULTS {0, "optim_grads_params", 0, "no_shard", 0}
#define MTC_FSDP_CLI_ARGS(f)                                                                       \
    {"use-megatron-fsdp", NULL, MTC_ARG_FLAG, &(f).use, NULL,                                      \
     "Megatron-FSDP: shard optimizer state, gradients and params per FSDP unit (a layer; the "     \
     "embedding and the head their own) over data-parallel ranks (docs/fsdp.md)", 0},              \
    {"data-parallel-sharding-strategy", NULL, MTC_ARG_STRING, &(f).strategy, "S",                  \
     "with --use-megatron-fsdp: no_shard|optim|optim_grads|optim_grads_params (default "           \
     "optim_grads_params)", 0},                                                                    \
    {"suggested-communication-unit-size", NULL, MTC_ARG_I64, &(f).unit_size, "N",                  \
     "with --use-megatron-fsdp: merge consecutive FSDP units until each holds N elements (one "    \
     "collective per merged unit)", 0},                                                            \
    {"outer-dp-sharding-strategy", NULL, MTC_ARG_STRING, &(f).outer, "S",                          \
     "with --num-distributed-optimizer-instances > 1: no_shard (replicate over the instances; "    \
     "default) or optim (HFSDP: the optimizer state sharded over the instances too)", 0},                                                     \
    {"fsdp-double-buffer", NULL, MTC_ARG_FLAG, &(f).double_buffer, NULL,                           \
     "with --use-megatron-fsdp optim_grads*: keep the pages of two units' gathers and gradients "  \
     "allocated for the whole run (Megatron's persistent double buffer) instead of giving them "   \
     "back between uses", 0}
/* clang-format on */

/* The run's strategy (dp/fsdp.h's mtc_fsdp_strategy, 0 without
 * --use-megatron-fsdp) and the distributed optimizer it implies (*distopt
 * set to 1 for the sharded strategies, 0 for no_shard). ckpt_format:
 * --ckpt-format's value or NULL (fsdp_dtensor needs --use-megatron-fsdp,
 * as Megatron). INVALID_ARGUMENT naming the value otherwise. */
mtc_result_t mtc_fsdp_flags_apply(const mtc_fsdp_flags *f, const char *ckpt_format, int *strategy,
                                  int *distopt);
/* --outer-dp-sharding-strategy optim with --use-megatron-fsdp (HFSDP). */
int mtc_fsdp_flags_outer_optim(const mtc_fsdp_flags *f);

#endif
