/* train/train_moe.c - what a training step does for mixture-of-experts
 * layers beyond the model's forward and backward (moe/moe.h):
 *  - the per-step statistics reset, and the expert-bias update after the
 *    gradients are final (Megatron does it in finalize_model_grads):
 *    counts all-reduced over TP x DP x CP, bias += rate * sign(mean - n);
 *  - Megatron's logged load_balancing_loss / z_loss (moe_logging.py: per
 *    layer, summed over the loss's group, averaged over DP and over the
 *    microbatches, then averaged over the MoE layers) and, for --metrics,
 *    per layer tokens-per-expert min / max / p50 / p90 and the dropped
 *    fraction, all from one all-reduce over the world.
 * Dense models make every function here a no-op. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "train/train_internal.h"

static int has_moe(const train_rank *x) { return x->cfg->model.moe.num_experts > 0; }

void train_moe_step_begin(train_rank *x) {
    if (!has_moe(x)) return;
    for (int k = 0; k < x->vpp; k++) {
        mtc_model *m = x->chunks[k].model;
        for (int l = m->first_layer; l < m->last_layer + m->mtp_layers; l++) /* with MTP's */
            if (mtc_model_is_moe_layer(&m->cfg, l))
                moe_stats_reset(&m->moe_stats[l], m->cfg.moe.num_experts);
    }
}

mtc_result_t train_moe_finalize(train_rank *x) {
    const mtc_moe_config *mc = &x->cfg->model.moe;
    if (!has_moe(x) || !mc->expert_bias) return MTC_OK;
    float rate = mc->bias_update_rate > 0 ? mc->bias_update_rate : 1e-3f;
    for (int k = 0; k < x->vpp; k++) {
        mtc_model *m = x->chunks[k].model;
        mtc_comm_t g = m->moe.tpdpcp; /* the model's MoE groups (moe/groups.c) */
        for (int l = m->first_layer; l < m->last_layer + m->mtp_layers; l++) {
            if (!mtc_model_is_moe_layer(&m->cfg, l)) continue; /* MTP's routers too */
            moe_stats *s = &m->moe_stats[l];
            /* comm: all-reduce(TP x DP x CP) of the tokens per expert */
            if (g)
                MTC_CHECK(mtc_all_reduce(s->bias_counts, s->bias_counts, (size_t)mc->num_experts,
                                         MTC_DTYPE_F32, MTC_OP_SUM, g));
            moe_expert_bias_update(m->layers[l].w[MTC_ROLE_EXPERT_BIAS], s->bias_counts, rate,
                                   mc->num_experts);
        }
    }
    return MTC_OK;
}

/* The world-summed vector: [lb, z, then per layer (E tokens, dropped, assigned)]. */
static size_t stats_len(const mtc_model_config *c) {
    return 2 + (size_t)c->num_layers * ((size_t)c->moe.num_experts + 2);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

mtc_result_t train_moe_collect(train_rank *x, train_moe_summary *out) {
    memset(out, 0, sizeof *out);
    if (!has_moe(x)) return MTC_OK;
    const mtc_model_config *c = &x->cfg->model;
    int E = c->moe.num_experts, L = c->num_layers;
    size_t n = stats_len(c);
    double *v;
    MTC_CHECK(mtc_mem_calloc(n, sizeof(double), (void **)&v));
    for (int k = 0; k < x->vpp; k++) {
        mtc_model *m = x->chunks[k].model;
        for (int l = m->first_layer; l < m->last_layer; l++) {
            if (!mtc_moe_is_layer(&c->moe, l)) continue;
            const moe_stats *s = &m->moe_stats[l];
            int nmb = s->nmb > 0 ? s->nmb : 1;
            v[0] += s->lb_loss / nmb;
            v[1] += s->z_loss / nmb;
            /* every rank routes its own tokens (its DP, CP and, under SP, TP shard) */
            double *row = v + 2 + (size_t)l * (E + 2);
            for (int e = 0; e < E; e++)
                row[e] += s->tokens[e];
            row[E] += s->dropped, row[E + 1] += s->assigned;
        }
    }
    /* comm: all-reduce(world) of the statistics */
    mtc_result_t rc = mtc_all_reduce(v, v, n, MTC_DTYPE_F64, MTC_OP_SUM, x->world);
    if (rc != MTC_OK) {
        free(v);
        return rc;
    }
    int nl = mtc_moe_num_layers(&c->moe, L);
    /* aux: partial over TP x CP (summed), averaged over DP; z: averaged over TP x DP x CP
     * (the size of the MoE context's TP x CP group, moe/groups.c) */
    mtc_comm_t g = x->chunks[0].model->moe.tpcp;
    int tpcp = g ? mtc_comm_size(g) : 1;
    out->lb_loss = v[0] / ((double)x->dp_size * nl);
    out->z_loss = v[1] / ((double)x->dp_size * tpcp * nl);
    out->has_lb = c->moe.lb != MOE_LB_NONE && c->moe.aux_coeff > 0;
    out->has_z = c->moe.z_coeff > 0;
    out->nlayers = 0;
    double *sorted = malloc((size_t)E * sizeof(double));
    for (int l = 0; l < L && sorted && out->nlayers < TRAIN_MOE_MAX_LAYERS; l++) {
        if (!mtc_moe_is_layer(&c->moe, l)) continue;
        const double *row = v + 2 + (size_t)l * (E + 2);
        memcpy(sorted, row, (size_t)E * sizeof(double));
        qsort(sorted, (size_t)E, sizeof(double), cmp_double);
        train_moe_layer_stats *o = &out->layer[out->nlayers++];
        o->layer = l;
        o->min = sorted[0], o->max = sorted[E - 1];
        /* nearest-rank percentiles of the E counts */
        o->p50 = sorted[(int)ceil(0.5 * E) - 1];
        o->p90 = sorted[(int)ceil(0.9 * E) - 1];
        o->dropped_fraction = row[E + 1] > 0 ? row[E] / row[E + 1] : 0;
    }
    free(sorted);
    free(v);
    return MTC_OK;
}

void train_moe_metrics(const train_moe_summary *s, FILE *f, double lb, double z) {
    if (!s->nlayers) return;
    if (s->has_lb) fprintf(f, ", \"load_balancing_loss\": %.9g", lb);
    if (s->has_z) fprintf(f, ", \"z_loss\": %.9g", z);
    fprintf(f, ", \"moe_layers\": [");
    for (int i = 0; i < s->nlayers; i++) {
        const train_moe_layer_stats *l = &s->layer[i];
        fprintf(f,
                "%s{\"layer\": %d, \"tokens_per_expert\": {\"min\": %.0f, \"max\": %.0f, "
                "\"p50\": %.0f, \"p90\": %.0f}, \"dropped_fraction\": %.6g}",
                i ? ", " : "", l->layer, l->min, l->max, l->p50, l->p90, l->dropped_fraction);
    }
    fprintf(f, "]");
}
