/* dp/fsdp_cli.c - Megatron-FSDP's flags; see dp/fsdp_cli.h. */
#include "dp/fsdp_cli.h"

#include <string.h>

#include "dp/fsdp.h"

int mtc_fsdp_flags_outer_optim(const mtc_fsdp_flags *f) {
    return f->use && f->outer && strcmp(f->outer, "optim") == 0;
}

mtc_result_t mtc_fsdp_flags_apply(const mtc_fsdp_flags *f, const char *ckpt_format, int *strategy,
                                  int *distopt) {
    *strategy = MTC_FSDP_OFF;
    int s = mtc_fsdp_strategy_parse(f->strategy);
    if (s < 0)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "data-parallel-sharding-strategy=%s is not a strategy (no_shard, optim, "
                         "optim_grads, optim_grads_params)",
                         f->strategy ? f->strategy : "(none)");
    if (ckpt_format && strcmp(ckpt_format, "fsdp_dtensor") == 0 && !f->use)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "--ckpt-format fsdp_dtensor is only tested with Megatron FSDP: add "
                         "--use-megatron-fsdp or use torch_dist");
    if (!f->outer || (strcmp(f->outer, "no_shard") && strcmp(f->outer, "optim")))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "outer-dp-sharding-strategy=%s is not a strategy (no_shard, optim)",
                         f->outer ? f->outer : "(none)");
    if (f->use && strcmp(f->outer, "optim") == 0) {
        if (s != MTC_FSDP_OPTIM_GRADS_PARAMS) /* Megatron's NotImplementedError */
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "Optimizer fully-sharded HFSDP (--outer-dp-sharding-strategy optim) "
                             "is only supported with full-sharding on DP-Shard: use "
                             "--data-parallel-sharding-strategy optim_grads_params, not %s",
                             f->strategy);
    }
    if (!f->use) return MTC_OK;
    *strategy = s;
    /* Megatron-FSDP runs on the distributed optimizer; no_shard's numbers
     * (all-reduce, the whole optimizer on every rank) are plain DP's */
    *distopt = s != MTC_FSDP_NO_SHARD;
    return MTC_OK;
}
