/* model/model_ranks.c - what a rank's model chunks hold of the serial model
 * beyond its own shards: the sequence positions (the CP context's) and the
 * one complete copy of every parameter assembled over the ranks that split
 * the model in ways TP does not (expert and pipeline parallelism). */
#include <string.h>

#include "model/model.h"

int mtc_model_seq_per_rank(const mtc_model_config *cfg, mtc_grid_t grid) {
    int cp = grid ? mtc_grid_spec_get(grid)->cfg.cp : 1;
    return cfg->seq_length / (cp > 0 ? cp : 1);
}

const int *mtc_model_positions(const mtc_model *m) { return m->cp.cp > 1 ? m->cp.pos : NULL; }

mtc_result_t mtc_model_gather_ranks(const mtc_model *const *chunks, int n, mtc_grid_t grid,
                                    float *global) {
    const mtc_model *m0 = chunks[0];
    size_t total = m0->reg.global_total;
    mtc_comm_t ep = m0->cfg.moe.num_experts > 0 ? m0->moe.ep : NULL;
    if (ep) { /* experts from their EP rank, the rest from EP rank 0 */
        for (int k = 0; k < n && mtc_comm_rank(ep) != 0; k++) {
            const mtc_registry *r = &chunks[k]->reg;
            for (int i = 0; i < r->count; i++)
                if (r->params[i].expert < 0)
                    memset(global + r->params[i].global_offset, 0,
                           r->params[i].numel * sizeof(float));
        }
        /* comm: all-reduce(EXPERT_MODEL_PARALLEL_GROUP): one nonzero copy of each element */
        MTC_CHECK(mtc_all_reduce(global, global, total, MTC_DTYPE_F32, MTC_OP_SUM, ep));
    }
    /* comm: all-reduce(pp): each stage contributes its own parameters, zeros elsewhere */
    mtc_comm_t pipe = grid ? mtc_grid_comm_nontrivial(grid, MTC_GROUP_PP, 0) : NULL;
    if (pipe) MTC_CHECK(mtc_all_reduce(global, global, total, MTC_DTYPE_F32, MTC_OP_SUM, pipe));
    return MTC_OK;
}
