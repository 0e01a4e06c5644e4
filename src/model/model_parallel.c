/* model/model_parallel.c - the model asks each strategy about its own
 * options: their rules on a model and a layout (before anything is built),
 * the values every rank must agree on, and the banner line of a built
 * chunk's CP context. train/ calls these instead of naming TP's, CP's or
 * MoE's fields; the rules themselves stay in tp/ (via
 * mtc_model_validate_tp), moe/ and cp/. Does not build any context: that
 * is mtc_model_init_chunk's (model.c). */
#include <stdio.h>

#include "model/model.h"

mtc_result_t mtc_model_validate_parallel(const mtc_model_config *cfg, const mtc_grid_config *g,
                                         const mtc_grid_spec *spec, const mtc_model_parallel *o) {
    MTC_CHECK(mtc_model_validate_tp(cfg, g->tp, o->tp.sequence_parallel));
    if (cfg->moe.num_experts > 0) {
        MTC_CHECK(mtc_moe_validate_etp(g->etp, g->tp));
        moe_assert_etp_groups(spec);
    }
    /* context parallelism's own rules on top of the TP split (cp/) */
    return cp_validate(g, o->cp.type, o->cp.layer_types, cfg->num_layers, cfg->seq_length,
                       cfg->num_heads, mtc_model_groups(cfg), o->tp.sequence_parallel);
}

int mtc_model_parallel_keys(const mtc_model_parallel *o, int num_layers, const char **flags,
                            double *values) {
    double layers = 0; /* the per-layer CP comm types as one number */
    for (int l = 0; o->cp.layer_types && l < num_layers; l++)
        layers = layers * 5 + o->cp.layer_types[l] + 1;
    flags[0] = "cp-comm-type", values[0] = o->cp.type;
    flags[1] = "cp-comm-type (per layer)", values[1] = layers;
    flags[2] = "sequence-parallel", values[2] = o->tp.sequence_parallel;
    return MTC_MODEL_PARALLEL_KEYS;
}

void mtc_model_describe_parallel(const mtc_model *m, const mtc_model_parallel *o, FILE *out) {
    const cp_ctx *cp = &m->cp;
    if (cp->cp <= 1) return;
    const int *lt = o->cp.layer_types;
    char types[512] = "";
    size_t n = 0;
    for (int l = 0; lt && l < m->cfg.num_layers && n < sizeof types; l++)
        n += (size_t)snprintf(types + n, sizeof types - n, "%s%s", l ? " " : "",
                              cp_comm_type_name((cp_comm_type)lt[l]));
    fprintf(out,
            "> context parallel: %d ranks, %s%s attention; each rank holds %d of %d "
            "positions (chunks %d and %d of %d)\n",
            cp->cp, lt ? "per layer " : "", lt ? types : cp_comm_type_name(cp->type), m->T, cp->Tg,
            cp->rank, 2 * cp->cp - 1 - cp->rank, 2 * cp->cp);
}
