/* moe/groups.c - the MoE layers' part of a rank's parallel context, from
 * its grid: the dispatchers' EXPERT_MODEL_PARALLEL_GROUP, the experts'
 * EXPERT_TENSOR_PARALLEL_GROUP, the allgather dispatcher's
 * EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP, and the groups the router's
 * losses count over (TENSOR_AND_CONTEXT_PARALLEL_GROUP for aux_loss,
 * seq_aux_loss and the z-loss, TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP for
 * global_aux_loss); and the one home of the ETP rule. Relies on grid/;
 * does not communicate. */
#include "core/log.h"
#include "moe/moe.h"

void moe_groups_from_grid(moe_groups *g, mtc_grid_t grid) {
    *g = (moe_groups){0};
    if (!grid) return;
    g->ep = mtc_grid_comm_nontrivial(grid, MTC_GROUP_EP, 0);
    g->etp = mtc_grid_comm_nontrivial(grid, MTC_GROUP_EXPT_TP, 0);
    g->tpep = mtc_grid_comm_nontrivial(grid, MTC_GROUP_TP_EP, 0);
    g->tpcp = mtc_grid_comm_nontrivial(grid, MTC_GROUP_TP_CP, 0);
    g->tpdpcp = mtc_grid_comm_nontrivial(grid, MTC_GROUP_TP_DP_CP, 0);
}

void moe_assert_etp_groups(const mtc_grid_spec *spec) {
    int tp = spec->cfg.tp, etp = spec->cfg.etp > 0 ? spec->cfg.etp : tp;
    for (int r = 0; etp > 1 && etp == tp && r < spec->cfg.world_size; r++) {
        /* the experts' ETP slices follow the TP split (model/family.c): with
         * train's order (Megatron's default, tp first in both generators)
         * each ETP group is a TP group, rank for rank */
        mtc_grid_coord co;
        mtc_grid_coord_of(&co, spec, r);
        for (int t = 0; t < etp; t++)
            MTC_ASSERT(mtc_grid_rank_dense(spec, t, co.cp, co.dp, co.pp) ==
                       mtc_grid_rank_expert(spec, t, co.ep, co.edp, co.pp));
    }
}

mtc_result_t mtc_moe_validate_etp(int etp, int tp) {
    if (etp != 0 && etp != 1 && etp != tp)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "expert-tensor-parallel-size=%d must be 1 or the tensor-parallel size %d "
                         "so far",
                         etp, tp);
    return MTC_OK;
}
