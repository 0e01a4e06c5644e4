/* cp/context.c - context parallelism's own rules and a rank's CP context,
 * both from the grid: the comm types a layout can run (a2a and a2a+p2p
 * split the heads; a2a+p2p needs the hierarchical groups; sequence
 * parallelism on top needs T/cp divisible by tp), and for one model chunk
 * the CONTEXT_PARALLEL_GROUP, this rank's global positions (chunks r and
 * 2cp-1-r of every sequence), every rank's, and the per-layer comm types.
 * The sequence rule (seq-length % 2cp) is the grid's
 * (mtc_grid_validate_model). Relies on grid/; does not communicate. */
#include <stdlib.h>

#include "core/mem.h"
#include "cp/cp.h"

/* One layer's comm type against the heads of a TP rank and the
 * hierarchical sizes. */
static mtc_result_t cp_validate_type(const mtc_grid_config *g, int type, int NH, int NG) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    int cp = g->cp;
    if (type == CP_COMM_A2A && (NH % cp || NG % cp))
        return mtc_error(E,
                         "cp-comm-type a2a splits the heads over context-parallel-size=%d, but "
                         "a tensor-parallel rank has %d query heads and %d key/value heads "
                         "(use p2p or all_gather, or a cp dividing both)",
                         cp, NH, NG);
    int A = g->n_hcp == 2 ? g->hcp[0] : 0;
    if (type == CP_COMM_A2A_P2P && (A < 1 || A * g->hcp[1] != cp))
        return mtc_error(E,
                         "cp-comm-type a2a+p2p needs --hierarchical-context-parallel-sizes A P "
                         "with A*P = context-parallel-size=%d",
                         cp);
    if (type == CP_COMM_A2A_P2P && (NH % A || NG % A))
        return mtc_error(E,
                         "cp-comm-type a2a+p2p splits the heads over its all-to-all size "
                         "A=%d, but a tensor-parallel rank has %d query heads and %d "
                         "key/value heads (choose A dividing both)",
                         A, NH, NG);
    return MTC_OK;
}

mtc_result_t cp_validate(const mtc_grid_config *g, int type, const int *layer_types, int num_layers,
                         int seq_length, int heads, int groups, int sequence_parallel) {
    if (g->cp <= 1) return MTC_OK;
    int tp = g->tp > 0 ? g->tp : 1;
    int T_cp = seq_length / g->cp, NH = heads / tp, NG = groups / tp;
    if (sequence_parallel && tp > 1 && T_cp % tp)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "seq-length=%d / context-parallel-size=%d = %d positions per rank is "
                         "not divisible by tensor-model-parallel-size=%d, which sequence "
                         "parallelism needs",
                         seq_length, g->cp, T_cp, tp);
    int nt = layer_types ? num_layers : 1;
    for (int l = 0; l < nt; l++)
        MTC_CHECK(cp_validate_type(g, layer_types ? layer_types[l] : type, NH, NG));
    return MTC_OK;
}

mtc_result_t cp_options_resolve(const char *const *names, int nnames, int num_layers, int cp,
                                const int64_t *hcp, int nhcp, int *types, int *any_per_layer) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    int hier = 0;
    for (int i = 0; i < nnames; i++) {
        types[i] = cp_comm_type_parse(names[i]);
        if (types[i] < 0)
            return mtc_error(E, "cp-comm-type=%s is unknown (use p2p, all_gather, a2a or a2a+p2p)",
                             names[i]);
        hier |= types[i] == CP_COMM_A2A_P2P;
    }
    if (nnames != 1 && nnames != num_layers)
        return mtc_error(E,
                         "cp-comm-type has %d values: give one, or one per layer (num-layers=%d)",
                         nnames, num_layers);
    if (nhcp && (nhcp != 2 || hcp[0] < 1 || hcp[1] < 1 || hcp[0] * hcp[1] != cp))
        return mtc_error(E,
                         "hierarchical-context-parallel-sizes must be two sizes A P with A*P = "
                         "context-parallel-size=%d (e.g. --hierarchical-context-parallel-sizes 2 "
                         "%d)",
                         cp, cp % 2 ? cp : cp / 2);
    if (hier && !nhcp)
        return mtc_error(E,
                         "cp-comm-type a2a+p2p needs --hierarchical-context-parallel-sizes A P "
                         "(A*P = context-parallel-size=%d)",
                         cp);
    *any_per_layer = nnames > 1;
    return MTC_OK;
}

mtc_result_t cp_ctx_init(cp_ctx *cp, cp_ctx **layers, mtc_grid_t grid, int seq_length,
                         cp_comm_type type, const int *layer_types, int first_layer,
                         int last_layer) {
    *cp = (cp_ctx){.cp = 1, .Tg = seq_length};
    *layers = NULL;
    mtc_comm_t comm = grid ? mtc_grid_comm_nontrivial(grid, MTC_GROUP_CP, 0) : NULL;
    if (!comm) return MTC_OK;
    int cps = mtc_comm_size(comm);
    MTC_CHECK(mtc_grid_validate_model(mtc_grid_spec_get(grid), 0, seq_length, 0, 0, 0));
    mtc_comm_t inner = mtc_grid_comm(grid, MTC_GROUP_HIER_CP, 0);
    mtc_comm_t outer = mtc_grid_comm(grid, MTC_GROUP_HIER_CP, 1);
    int T = seq_length / cps;
    *cp = (cp_ctx){.comm = comm,
                   .cp = cps,
                   .rank = mtc_comm_rank(comm),
                   .type = type,
                   .inner = inner,
                   .outer = outer,
                   .inner_size = inner ? mtc_comm_size(inner) : 0,
                   .Tg = seq_length};
    mtc_result_t rc = mtc_mem_calloc((size_t)seq_length, sizeof(int), (void **)&cp->all_pos);
    for (int r = 0; rc == MTC_OK && r < cps; r++)
        cp_positions(cp->all_pos + (size_t)r * T, seq_length, cps, r);
    if (rc == MTC_OK) cp->pos = cp->all_pos + (size_t)cp->rank * T;
    if (rc == MTC_OK)
        rc = mtc_mem_calloc(4 * (size_t)cps, sizeof(size_t), (void **)&cp->hop_counts);
    /* per-layer comm types: copies sharing the positions (owned by cp) */
    int nl = last_layer - first_layer, hier = type == CP_COMM_A2A_P2P;
    if (rc == MTC_OK && layer_types) {
        rc = mtc_mem_calloc((size_t)(nl > 0 ? nl : 1), sizeof(cp_ctx), (void **)layers);
        for (int l = 0; rc == MTC_OK && l < nl; l++) {
            (*layers)[l] = *cp;
            (*layers)[l].type = (cp_comm_type)layer_types[first_layer + l];
            hier |= (*layers)[l].type == CP_COMM_A2A_P2P;
        }
    }
    if (rc == MTC_OK && hier && (!inner || !outer))
        rc = mtc_error(MTC_ERR_INVALID_ARGUMENT,
                       "cp-comm-type a2a+p2p without hierarchical context-parallel groups");
    if (rc != MTC_OK) cp_ctx_free(cp, layers);
    return rc;
}

void cp_ctx_free(cp_ctx *cp, cp_ctx **layers) {
    free(cp->all_pos), free(cp->hop_counts);
    cp->all_pos = NULL, cp->hop_counts = NULL, cp->pos = NULL;
    free(*layers);
    *layers = NULL;
}
