/* cli/layout_args.h - the parallel-layout flags (Megatron's names) for a
 * command's argument table (core/args.h), shared by the commands that take
 * a layout: train (LAYOUT_ARGS, the whole block), ranks, schedule and plan
 * (the rows they take, with the same meaning). The uneven pipeline split's
 * rows are pp/layout_cli.h's (PP_LAYOUT_CLI_ARGS on layout_flags.split).
 * The rules on these values live with their owners: grid/ (sizes, order),
 * cp/ (cp_options_resolve), moe/ (mtc_moe_validate_etp), pp/ (the split,
 * pp_vpp_from_args), dp/ (the distributed optimizer's instances). */
#ifndef MTC_CLI_LAYOUT_ARGS_H
#define MTC_CLI_LAYOUT_ARGS_H

#include "core/args.h"
#include "pp/layout_cli.h"

typedef struct {
    int tp, pp, cp, ep, etp; /* etp 0: the TP size */
    int vpp, lpvs, vstages;  /* vpp 0: not given; the two Megatron-training forms */
    int mb_group;            /* 0: pp */
    int nd;                  /* distributed-optimizer instances */
    mtc_arg_strings cp_comm; /* one type, or one per layer */
    mtc_arg_ints hcp;        /* hierarchical CP sizes */
    pp_layout_cli split;     /* the uneven pipeline flags */
} layout_flags;

#define LAYOUT_FLAGS_DEFAULTS                                                                      \
    { 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, {1, {"p2p"}}, {0}, PP_LAYOUT_CLI_DEFAULTS }

/* clang-format off */
#define LAYOUT_ARG_TP(f)                                                                           \
    {"tensor-model-parallel-size", "tp", MTC_ARG_INT, &(f).tp, "N",                                \
     "tensor-parallel ranks (default 1); data-parallel = world / (tp x pp)", 0}
#define LAYOUT_ARG_PP(f)                                                                           \
    {"pipeline-model-parallel-size", "pp", MTC_ARG_INT, &(f).pp, "N",                              \
     "pipeline stages of num-layers/pp layers, 1F1B schedule, interleaved with --vpp (default "    \
     "1)", 0}
#define LAYOUT_ARG_LPVS(f)                                                                         \
    {"num-layers-per-virtual-pipeline-stage", NULL, MTC_ARG_INT, &(f).lpvs, "N",                   \
     "interleaved 1F1B: virtual stages of N layers (vpp = num-layers/pp/N)", 0}
#define LAYOUT_ARG_VSTAGES(f)                                                                      \
    {"num-virtual-stages-per-pipeline-rank", NULL, MTC_ARG_INT, &(f).vstages, "V",                 \
     "interleaved 1F1B with V model chunks per pipeline rank", 0}
#define LAYOUT_ARG_VPP(f)                                                                          \
    {"virtual-pipeline-model-parallel-size", "vpp", MTC_ARG_INT, &(f).vpp, "V",                    \
     "the same as --num-virtual-stages-per-pipeline-rank", 0}
#define LAYOUT_ARG_MB_GROUP(f)                                                                     \
    {"microbatch-group-size-per-virtual-pipeline-stage", NULL, MTC_ARG_INT, &(f).mb_group, "N",    \
     "contiguous microbatches per virtual stage (default pp)", 0}
#define LAYOUT_ARG_CP(f)                                                                           \
    {"context-parallel-size", "cp", MTC_ARG_INT, &(f).cp, "N",                                     \
     "context-parallel ranks (default 1): each sequence in 2cp chunks, rank c keeps chunks c "     \
     "and 2cp-1-c; seq-length % (2cp) == 0", 0}
#define LAYOUT_ARG_CP_COMM(f)                                                                      \
    {"cp-comm-type", NULL, MTC_ARG_STRINGS, &(f).cp_comm, "S [S ...]",                             \
     "p2p (ring, default) | all_gather | a2a (Ulysses: local heads divisible by cp) | "            \
     "a2a+p2p (a2a inside groups of A ranks, ring across them); one value, or one per "            \
     "layer", 0},                                                                                  \
    {"hierarchical-context-parallel-sizes", NULL, MTC_ARG_INTS, &(f).hcp, "A P",                   \
     "for a2a+p2p: A ranks in each all-to-all, P in the ring (A*P = cp)", 0}
#define LAYOUT_ARG_EP(f)                                                                           \
    {"expert-model-parallel-size", "ep", MTC_ARG_INT, &(f).ep, "N",                                \
     "expert-parallel ranks (default 1): each owns num-experts/ep experts of every MoE "           \
     "layer", 0}
#define LAYOUT_ARG_ETP(f)                                                                          \
    {"expert-tensor-parallel-size", "etp", MTC_ARG_INT, &(f).etp, "N",                             \
     "expert-tensor-parallel ranks (default: the TP size): 1 (whole experts) or the TP size", 0}
#define LAYOUT_ARG_ND(f)                                                                           \
    {"num-distributed-optimizer-instances", NULL, MTC_ARG_INT, &(f).nd, "N",                       \
     "optimizer instances: shards over dp/N ranks, shard all-reduced over N (default 1)", 0}

/* mtc train's block: every size, the virtual pipeline, CP's options, EP */
#define LAYOUT_ARGS(f)                                                                             \
    LAYOUT_ARG_TP(f), LAYOUT_ARG_PP(f), LAYOUT_ARG_LPVS(f), LAYOUT_ARG_VSTAGES(f),                 \
        LAYOUT_ARG_VPP(f), LAYOUT_ARG_MB_GROUP(f), LAYOUT_ARG_CP(f), LAYOUT_ARG_CP_COMM(f),        \
        LAYOUT_ARG_EP(f), LAYOUT_ARG_ETP(f)
/* clang-format on */

#endif
