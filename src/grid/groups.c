/* grid/groups.c - every process group initialize_model_parallel builds, in
 * its creation order, with its group_desc names and rank order:
 *   dp-cp, [intra-partial dp-cp], dp, cp, [hierarchical cp L0..], tp-pp, tp,
 *   pp, embedding, position embedding, tp-dp-cp, tp-dp, tp-cp (dense
 *   generator); ep, tp, tp-ep, tp-ep-pp, dp, [hierarchical expert-dp L0/L1],
 *   intra-distributed-optimizer-instance (expert generator).
 * Relies on gen.c for the masked-orthogonal enumeration. Pure: no
 * communicator. Gloo twins, *_AG groups and hybrid-CP groups are not built. */
#include <stdlib.h>
#include <string.h>

#include "grid/internal.h"

static mtc_grid_group_set *set_add(mtc_grid_groups *G, mtc_grid_kind_t kind, int level,
                                   const char *name, int count, int size) {
    mtc_grid_group_set *s = &G->sets[G->nsets++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->kind = kind, s->level = level, s->count = count, s->size = size;
    s->ranks = malloc((size_t)count * (size_t)size * sizeof(int) + sizeof(int));
    return s;
}

static mtc_grid_group_set *set_gen(mtc_grid_groups *G, mtc_grid_kind_t kind, const char *name,
                                   const mtc_grid_gen *g, int world, const char *token) {
    mtc_grid_group_set *s =
        set_add(G, kind, 0, name, 1, world); /* every generated set covers the world */
    if (s->ranks) s->size = mtc_grid_gen_ranks(s->ranks, &s->count, g, world, token);
    return s;
}

/* Megatron's create_hierarchical_groups: each list of sizes[0]*...*sizes[n-1]
 * ranks is viewed as "(l s u)" (u fastest) and regrouped "(l u) s", with
 * s = sizes[k], u = prod(sizes[<k]), l = prod(sizes[>k]). */
static void set_hier(mtc_grid_groups *G, mtc_grid_kind_t kind, const char *prefix,
                     const mtc_grid_group_set *base, const int *sizes, int n) {
    for (int k = 0; k < n; k++) {
        int s = sizes[k], u = 1, l = 1;
        for (int i = 0; i < k; i++)
            u *= sizes[i];
        for (int i = k + 1; i < n; i++)
            l *= sizes[i];
        char name[64];
        snprintf(name, sizeof name, "HIERARCHICAL_%s_L%d", prefix, k);
        mtc_grid_group_set *out = set_add(G, kind, k, name, base->count * l * u, s);
        if (!out->ranks) return;
        int *w = out->ranks;
        for (int b = 0; b < base->count; b++) {
            const int *list = base->ranks + (size_t)b * base->size;
            for (int li = 0; li < l; li++)
                for (int ui = 0; ui < u; ui++)
                    for (int si = 0; si < s; si++)
                        *w++ = list[li * s * u + si * u + ui];
        }
    }
}

mtc_result_t mtc_grid_groups_build(mtc_grid_groups *G, const mtc_grid_spec *sp) {
    const mtc_grid_config *c = &sp->cfg;
    const mtc_grid_gen *D = &sp->dense, *E = &sp->expert;
    const int W = c->world_size, nd = sp->nd;
    memset(G, 0, sizeof *G);
    G->sets = calloc(MTC_GROUP_KIND_COUNT + 2 * MTC_GRID_MAX_HCP, sizeof *G->sets);
    if (!G->sets) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "grid groups");

    const mtc_grid_group_set *dpcp =
        set_gen(G, MTC_GROUP_DP_CP, "DATA_PARALLEL_GROUP_WITH_CP", D, W, "dp-cp");
    if (nd > 1 && dpcp->ranks) {
        /* slices [i*s, (i+1)*s) of each dp-cp list, s = dp*cp/nd */
        int s = dpcp->size / nd;
        mtc_grid_group_set *ip =
            set_add(G, MTC_GROUP_INTRA_PARTIAL_DP_CP, 0,
                    "INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP", dpcp->count * nd, s);
        if (ip->ranks) memcpy(ip->ranks, dpcp->ranks, (size_t)W * sizeof(int));
    }
    set_gen(G, MTC_GROUP_DP, "DATA_PARALLEL_GROUP", D, W, "dp");
    const mtc_grid_group_set *cp = set_gen(G, MTC_GROUP_CP, "CONTEXT_PARALLEL_GROUP", D, W, "cp");
    if (c->n_hcp > 0 && cp->ranks)
        set_hier(G, MTC_GROUP_HIER_CP, "CONTEXT_PARALLEL_GROUP", cp, c->hcp, c->n_hcp);
    set_gen(G, MTC_GROUP_MP, "MODEL_PARALLEL_GROUP", D, W, "tp-pp");
    set_gen(G, MTC_GROUP_TP, "TENSOR_MODEL_PARALLEL_GROUP", D, W, "tp");
    const mtc_grid_group_set *pp =
        set_gen(G, MTC_GROUP_PP, "PIPELINE_MODEL_PARALLEL_GROUP", D, W, "pp");
    if (pp->ranks) {
        /* default_embedding_ranks: [first, last] ([first] when pp == 1);
         * default_position_embedding_ranks: [first] */
        /* a standalone MTP stage's rank mr joins (get_embedding_ranks) */
        int mr = c->pp > 1 && c->embd_mtp_rank > 0 && c->embd_mtp_rank <= c->pp
                     ? c->embd_mtp_rank - 1
                     : -1;
        int at[3], esz = 0;
        at[esz++] = 0;
        if (mr > 0 && mr < c->pp - 1) at[esz++] = mr;
        if (c->pp > 1 && (mr < 0 || !c->embd_untied || mr == c->pp - 1)) at[esz++] = c->pp - 1;
        mtc_grid_group_set *e = set_add(G, MTC_GROUP_EMBD, 0, "EMBEDDING_GROUP", pp->count, esz);
        mtc_grid_group_set *pe =
            set_add(G, MTC_GROUP_POS_EMBD, 0, "POSITION_EMBEDDING_GROUP", pp->count, 1);
        for (int i = 0; i < pp->count && e->ranks && pe->ranks; i++) {
            const int *l = pp->ranks + (size_t)i * pp->size;
            for (int j = 0; j < esz; j++)
                e->ranks[i * esz + j] = l[at[j]];
            pe->ranks[i] = l[0];
        }
    }
    set_gen(G, MTC_GROUP_TP_DP_CP, "TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP", D, W, "tp-dp-cp");
    set_gen(G, MTC_GROUP_TP_DP, "TENSOR_AND_DATA_PARALLEL_GROUP", D, W, "tp-dp");
    set_gen(G, MTC_GROUP_TP_CP, "TENSOR_AND_CONTEXT_PARALLEL_GROUP", D, W, "tp-cp");
    set_gen(G, MTC_GROUP_EP, "EXPERT_MODEL_PARALLEL_GROUP", E, W, "ep");
    set_gen(G, MTC_GROUP_EXPT_TP, "EXPERT_TENSOR_PARALLEL_GROUP", E, W, "tp");
    set_gen(G, MTC_GROUP_TP_EP, "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP", E, W, "tp-ep");
    const mtc_grid_group_set *tep = set_gen(
        G, MTC_GROUP_TP_EP_PP, "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP", E, W, "tp-ep-pp");
    const mtc_grid_group_set *edp =
        set_gen(G, MTC_GROUP_EXPT_DP, "EXPERT_DATA_PARALLEL_GROUP", E, W, "dp");
    if (nd > 1 && edp->ranks) {
        int sizes[2] = {sp->edp / nd, nd};
        set_hier(G, MTC_GROUP_HIER_EXPT_DP, "EXPERT_DATA_PARALLEL_GROUP", edp, sizes, 2);
    }
    if (tep->ranks) {
        /* edp/nd consecutive tp-ep-pp lists concatenated, order kept (unsorted) */
        mtc_grid_group_set *io = set_add(G, MTC_GROUP_INTRA_DIST_OPT, 0,
                                         "INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP", nd, W / nd);
        if (io->ranks) memcpy(io->ranks, tep->ranks, (size_t)W * sizeof(int));
    }

    int *seen = calloc((size_t)W, sizeof(int));
    if (!seen) goto oom;
    for (int i = 0; i < G->nsets; i++) {
        mtc_grid_group_set *s = &G->sets[i];
        if (!s->ranks) goto oom;
        memset(seen, 0, (size_t)W * sizeof(int));
        int n = s->count * s->size, ok = n == W;
        for (int k = 0; k < n; k++)
            ok &= seen[s->ranks[k]]++ == 0;
        s->partition = ok;
    }
    free(seen);
    return MTC_OK;
oom:
    free(seen);
    mtc_grid_groups_free(G);
    return mtc_error(MTC_ERR_OUT_OF_MEMORY, "process groups of %d ranks", W);
}

void mtc_grid_groups_free(mtc_grid_groups *G) {
    if (!G) return;
    for (int i = 0; i < G->nsets; i++)
        free(G->sets[i].ranks);
    free(G->sets);
    memset(G, 0, sizeof *G);
}

const mtc_grid_group_set *mtc_grid_groups_find(const mtc_grid_groups *G, mtc_grid_kind_t kind,
                                               int level) {
    for (int i = 0; i < G->nsets; i++)
        if (G->sets[i].kind == kind && G->sets[i].level == level) return &G->sets[i];
    return NULL;
}

int mtc_grid_group_of(const mtc_grid_group_set *s, int rank, int *pos) {
    for (int g = 0; g < s->count; g++)
        for (int k = 0; k < s->size; k++)
            if (s->ranks[(size_t)g * s->size + k] == rank) {
                if (pos) *pos = k;
                return g;
            }
    if (pos) *pos = -1;
    return -1;
}

int mtc_grid_groups_dist_opt_consistent(const mtc_grid_groups *G, int W) {
    const mtc_grid_group_set *dpcp = mtc_grid_groups_find(G, MTC_GROUP_DP_CP, 0),
                             *ip = mtc_grid_groups_find(G, MTC_GROUP_INTRA_PARTIAL_DP_CP, 0),
                             *l1 = mtc_grid_groups_find(G, MTC_GROUP_HIER_EXPT_DP, 1),
                             *io = mtc_grid_groups_find(G, MTC_GROUP_INTRA_DIST_OPT, 0);
    if (!ip || !l1) return 1; /* a single instance */
    if (!dpcp || !io || l1->size * ip->size != dpcp->size) return 0;
    const int nd = l1->size, sl = ip->size;
    int *inst = malloc((size_t)W * sizeof(int)), *mate = malloc((size_t)W * nd * sizeof(int));
    int ok = inst && mate;
    for (int g = 0; ok && g < io->count; g++)
        for (int k = 0; k < io->size; k++)
            inst[io->ranks[(size_t)g * io->size + k]] = g;
    for (int g = 0; ok && g < ip->count; g++)
        for (int k = 1; k < sl; k++)
            ok &= inst[ip->ranks[(size_t)g * sl + k]] == inst[ip->ranks[(size_t)g * sl]];
    /* the dense inter-instance partners of r: L[t*sl + j] for each slice t */
    for (int L = 0; ok && L < dpcp->count; L++)
        for (int j = 0; j < sl; j++)
            for (int i = 0; i < nd; i++) {
                const int *list = dpcp->ranks + (size_t)L * dpcp->size;
                for (int t = 0; t < nd; t++)
                    mate[(size_t)list[i * sl + j] * nd + t] = list[t * sl + j];
            }
    for (int g = 0; ok && g < l1->count; g++)
        for (int k = 0; k < nd; k++)
            for (int t = 0; t < nd; t++)
                ok &= mate[(size_t)l1->ranks[g * nd + k] * nd + t] == l1->ranks[g * nd + t];
    free(inst), free(mate);
    return ok;
}
