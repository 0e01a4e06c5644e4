/* model/model_moe.c - a chunk's MoE layers between steps: their statistics
 * reset before the microbatches, the expert-bias update after
 * finalize_model_grads (Megatron's _update_router_expert_bias), and the
 * step's logged MoE losses and token statistics over every rank's chunks.
 * The arithmetic is moe/stats.c's; this file walks the chunk's layers (MTP
 * depths' routers included where Megatron includes them) with the chunk's
 * MoE groups (moe/groups.c). Dense models make every function a no-op. */
#include <stdlib.h>

#include "core/log.h"
#include "core/mem.h"
#include "model/model.h"

void mtc_model_step_begin(mtc_model *m) {
    if (m->cfg.moe.num_experts <= 0) return;
    for (int l = m->first_layer; l < m->last_layer + m->mtp_layers; l++) /* with MTP's */
        if (mtc_model_is_moe_layer(&m->cfg, l))
            moe_stats_reset(&m->moe_stats[l], m->cfg.moe.num_experts);
}

mtc_result_t mtc_model_finalize_grads(mtc_model *m) {
    const mtc_moe_config *mc = &m->cfg.moe;
    if (mc->num_experts <= 0 || !mc->expert_bias) return MTC_OK;
    for (int l = m->first_layer; l < m->last_layer + m->mtp_layers; l++) {
        if (!mtc_model_is_moe_layer(&m->cfg, l)) continue; /* MTP's routers too */
        /* comm: all-reduce(TP x DP x CP) of the tokens per expert */
        MTC_CHECK(moe_expert_bias_finalize(m->layers[l].w[MTC_ROLE_EXPERT_BIAS], &m->moe_stats[l],
                                           mc, m->moe.tpdpcp));
    }
    return MTC_OK;
}

mtc_result_t mtc_model_moe_summary(const mtc_model *const *chunks, int n, mtc_comm_t world, int dp,
                                   moe_step_summary *out) {
    const mtc_model_config *c = &chunks[0]->cfg;
    memset(out, 0, sizeof *out);
    if (c->moe.num_experts <= 0) return MTC_OK;
    size_t len = moe_step_sums_len(&c->moe, c->num_layers);
    double *v;
    MTC_CHECK(mtc_mem_calloc(len, sizeof(double), (void **)&v));
    for (int k = 0; k < n; k++) {
        const mtc_model *m = chunks[k];
        for (int l = m->first_layer; l < m->last_layer; l++)
            if (mtc_moe_is_layer(&c->moe, l))
                moe_step_sums_add(v, &m->moe_stats[l], l, c->moe.num_experts);
    }
    /* comm: all-reduce(world) of the statistics */
    mtc_result_t rc = mtc_all_reduce(v, v, len, MTC_DTYPE_F64, MTC_OP_SUM, world);
    /* z is averaged over TP x DP x CP: the size of the MoE context's TP x CP group */
    mtc_comm_t g = chunks[0]->moe.tpcp;
    if (rc == MTC_OK)
        moe_step_summary_make(out, v, &c->moe, c->num_layers, dp, g ? mtc_comm_size(g) : 1);
    free(v);
    return rc;
}

void mtc_model_describe_moe(const mtc_model *m, const mtc_grid_spec *gs, FILE *out) {
    const mtc_model_config *c = &m->cfg;
    const mtc_moe_config *mc = &c->moe;
    if (mc->num_experts <= 0) return;
    double total = (double)m->reg.global_total, active = total;
    if (mtc_model_param_counts(c, &total, &active) != MTC_OK) /* out of memory */
        MTC_WARN("the banner's active parameter count: %s", mtc_error_detail());
    char cap[64] = "dropless";
    if (mc->capacity_factor > 0)
        snprintf(cap, sizeof cap, "capacity factor %g (%s%s)", mc->capacity_factor,
                 mc->drop == MOE_DROP_POSITION ? "position" : "probs",
                 mc->pad_to_capacity ? ", padded" : "");
    fprintf(out,
            "> mixture of experts: %d of %d layers, %d experts (ffn %d), top-%d %s, %s; "
            "parameters: %.0f total, %.0f active per token\n",
            mtc_moe_num_layers(mc, c->num_layers), c->num_layers, mc->num_experts,
            mtc_model_moe_ffn(c), mtc_moe_topk(mc),
            mc->score == MOE_SCORE_SIGMOID ? "sigmoid" : "softmax", cap, total, active);
    fprintf(out,
            "> expert parallel: ep %d x etp %d x expert-DP %d (x pp %d = world %d); %d local "
            "experts per rank, expert gradients reduced over the %d expert-DP ranks\n",
            gs->cfg.ep, gs->cfg.etp, gs->edp, gs->cfg.pp, gs->cfg.world_size,
            mc->num_experts / (gs->cfg.ep > 0 ? gs->cfg.ep : 1), gs->edp);
}
