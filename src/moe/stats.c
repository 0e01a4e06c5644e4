/* moe/stats.c - what a training step does with the MoE layers' statistics
 * (moe_stats) beyond the forward and backward:
 *  - the expert-bias update once the gradients are final (Megatron does it
 *    in finalize_model_grads): counts all-reduced over TP x DP x CP,
 *    bias += rate * sign(mean - n);
 *  - Megatron's logged load_balancing_loss / z_loss (moe_logging.py: per
 *    layer, summed over the loss's group, averaged over DP and over the
 *    microbatches, then averaged over the MoE layers) and, for --metrics,
 *    per layer tokens-per-expert min / max / p50 / p90 and the dropped
 *    fraction, from one vector every rank adds its layers into and the
 *    caller sums over the world.
 * Relies on comm/ (the bias counts' all-reduce) and moe/router.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"

mtc_result_t moe_expert_bias_finalize(float *bias, moe_stats *s, const mtc_moe_config *m,
                                      mtc_comm_t tpdpcp) {
    float rate = m->bias_update_rate > 0 ? m->bias_update_rate : 1e-3f;
    /* comm: all-reduce(TP x DP x CP) of the tokens per expert */
    if (tpdpcp)
        MTC_CHECK(mtc_all_reduce(s->bias_counts, s->bias_counts, (size_t)m->num_experts,
                                 MTC_DTYPE_F32, MTC_OP_SUM, tpdpcp));
    moe_expert_bias_update(bias, s->bias_counts, rate, m->num_experts);
    return MTC_OK;
}

size_t moe_step_sums_len(const mtc_moe_config *m, int num_layers) {
    return 2 + (size_t)num_layers * ((size_t)m->num_experts + 2);
}

void moe_step_sums_add(double *v, const moe_stats *s, int layer, int E) {
    int nmb = s->nmb > 0 ? s->nmb : 1;
    v[0] += s->lb_loss / nmb;
    v[1] += s->z_loss / nmb;
    /* every rank routes its own tokens (its DP, CP and, under SP, TP shard) */
    double *row = v + 2 + (size_t)layer * (E + 2);
    for (int e = 0; e < E; e++)
        row[e] += s->tokens[e];
    row[E] += s->dropped, row[E + 1] += s->assigned;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void moe_step_summary_make(moe_step_summary *out, const double *v, const mtc_moe_config *m,
                           int num_layers, int dp, int tpcp) {
    memset(out, 0, sizeof *out);
    int E = m->num_experts, L = num_layers;
    int nl = mtc_moe_num_layers(m, L);
    /* aux: partial over TP x CP (summed), averaged over DP; z: averaged over TP x DP x CP */
    out->lb_loss = v[0] / ((double)dp * nl);
    out->z_loss = v[1] / ((double)dp * tpcp * nl);
    out->has_lb = m->lb != MOE_LB_NONE && m->aux_coeff > 0;
    out->has_z = m->z_coeff > 0;
    out->nlayers = 0;
    double *sorted = malloc((size_t)E * sizeof(double));
    for (int l = 0; l < L && sorted && out->nlayers < MOE_SUMMARY_MAX_LAYERS; l++) {
        if (!mtc_moe_is_layer(m, l)) continue;
        const double *row = v + 2 + (size_t)l * (E + 2);
        memcpy(sorted, row, (size_t)E * sizeof(double));
        qsort(sorted, (size_t)E, sizeof(double), cmp_double);
        moe_layer_summary *o = &out->layer[out->nlayers++];
        o->layer = l;
        o->min = sorted[0], o->max = sorted[E - 1];
        /* nearest-rank percentiles of the E counts */
        o->p50 = sorted[(int)ceil(0.5 * E) - 1];
        o->p90 = sorted[(int)ceil(0.9 * E) - 1];
        o->dropped_fraction = row[E + 1] > 0 ? row[E] / row[E + 1] : 0;
    }
    free(sorted);
}

void moe_step_summary_log(const moe_step_summary *s, const mtc_moe_config *m, char *buf, size_t n,
                          double lb, double z) {
    if (n) buf[0] = 0;
    if (s->has_lb) /* router.py's tracker names: seq_ and global_ for those types */
        snprintf(buf, n, " %sload_balancing_loss: %.6E |",
                 m->lb == MOE_LB_SEQ_AUX      ? "seq_"
                 : m->lb == MOE_LB_GLOBAL_AUX ? "global_"
                                              : "",
                 lb);
    if (s->has_z) snprintf(buf + strlen(buf), n - strlen(buf), " z_loss: %.6E |", z);
}

void moe_step_summary_metrics(const moe_step_summary *s, FILE *f, double lb, double z) {
    if (!s->nlayers) return;
    if (s->has_lb) fprintf(f, ", \"load_balancing_loss\": %.9g", lb);
    if (s->has_z) fprintf(f, ", \"z_loss\": %.9g", z);
    fprintf(f, ", \"moe_layers\": [");
    for (int i = 0; i < s->nlayers; i++) {
        const moe_layer_summary *l = &s->layer[i];
        fprintf(f,
                "%s{\"layer\": %d, \"tokens_per_expert\": {\"min\": %.0f, \"max\": %.0f, "
                "\"p50\": %.0f, \"p90\": %.0f}, \"dropped_fraction\": %.6g}",
                i ? ", " : "", l->layer, l->min, l->max, l->p50, l->p90, l->dropped_fraction);
    }
    fprintf(f, "]");
}
