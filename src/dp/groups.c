/* dp/groups.c - the gradient buffers' part of a rank's parallel context,
 * from its grid: which kinds of buffer a chunk has (the dense one; with
 * experts split over EP, Megatron's expert-parallel one) and each kind's
 * groups: the reduction group, the distributed optimizer's shard group
 * (with several instances its intra-instance slice, and the grid's
 * inter-instance group of each chunk), and the group whose members hold
 * disjoint parameters of the kind (the gradient norm's). Relies on grid/;
 * does not communicate. */
#include "dp/ddp.h"

int mtc_ddp_kinds(mtc_grid_t grid, int use_distopt, int num_experts, mtc_ddp_kind *out) {
    /* experts split over EP: Megatron's expert-parallel buffers */
    int expert_split = num_experts > 0 && mtc_grid_comm_nontrivial(grid, MTC_GROUP_EP, 0);
    int nd = mtc_grid_spec_get(grid)->nd;
    mtc_comm_t dp = mtc_grid_reduce_comm(grid, MTC_REDUCE_DP_CP);
    /* dense: reduced over DATA_PARALLEL_GROUP_WITH_CP, sharded over it (or
     * INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP), held once over MODEL_PARALLEL_GROUP */
    out[0] = (mtc_ddp_kind){
        .params = expert_split ? MTC_DDP_PARAMS_DENSE : MTC_DDP_PARAMS_ALL,
        .dp = dp,
        .shard = !use_distopt ? NULL
                 : nd > 1     ? mtc_grid_comm_nontrivial(grid, MTC_GROUP_INTRA_PARTIAL_DP_CP, 0)
                              : dp,
        .norm = mtc_grid_comm_nontrivial(grid, MTC_GROUP_MP, 0)};
    if (!expert_split) return 1;
    /* experts: reduced and sharded over EXPERT_DATA_PARALLEL_GROUP (or
     * HIERARCHICAL_EXPERT_DATA_PARALLEL_GROUP_L0), each expert held once over
     * EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP (Megatron's expert optimizer) */
    mtc_comm_t edp = mtc_grid_comm_nontrivial(grid, MTC_GROUP_EXPT_DP, 0);
    out[1] =
        (mtc_ddp_kind){.params = MTC_DDP_PARAMS_EXPERT,
                       .expert = 1,
                       .dp = edp,
                       .shard = !use_distopt ? NULL
                                : nd > 1 ? mtc_grid_comm_nontrivial(grid, MTC_GROUP_HIER_EXPT_DP, 0)
                                         : edp,
                       .norm = mtc_grid_comm_nontrivial(grid, MTC_GROUP_TP_EP_PP, 0)};
    return 2;
}

mtc_ddp_comms mtc_ddp_kind_comms(mtc_grid_t grid, const mtc_ddp_kind *kind, int use_distopt,
                                 int chunk) {
    int nd = mtc_grid_spec_get(grid)->nd;
    mtc_ddp_comms comms = {.dp = kind->dp};
    if (!kind->expert && use_distopt) {
        /* the intra group as built, even of size 1 (as many instances as dp ranks) */
        comms.intra = nd > 1 ? mtc_grid_comm(grid, MTC_GROUP_INTRA_PARTIAL_DP_CP, 0) : kind->dp;
        comms.inter = mtc_grid_comm(grid, MTC_GROUP_INTER_DIST_OPT, chunk);
    } else if (kind->expert) {
        comms.intra = kind->dp;
        if (use_distopt && nd > 1 && kind->dp) {
            comms.intra = mtc_grid_comm(grid, MTC_GROUP_HIER_EXPT_DP, 0);
            comms.inter = mtc_grid_comm(grid, MTC_GROUP_EXPT_INTER_DIST_OPT, chunk);
        }
    }
    return comms;
}
