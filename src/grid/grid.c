/* grid/grid.c - the per-rank grid object: this rank's coordinates and one
 * communicator per process group it belongs to, in Megatron's creation
 * order. Built collectively at start-up: every rank computes all groups
 * (pure, grid/groups.c) and calls mtc_comm_split once per group kind with
 * color = index of its list and key = its position there, so each
 * communicator's rank order is the list's (sorted, except
 * INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP, kept in Megatron's order).
 * Ranks outside every list of a kind (embedding groups on middle stages)
 * pass color -1 and get no communicator.
 * The whole table is built once per process and shared, reference-counted,
 * by the grids of its thread-ranks (4096 thread-ranks would otherwise build
 * and hold 4096 copies: quadratic memory); each slot points at its list in
 * it. With several distributed-optimizer instances it also splits the
 * inter-instance groups (dense and expert), one per model chunk: each DDP
 * chains its inter-instance all-reduces when polling finds a reduce-scatter
 * done (timing-dependent), so two chunks' all-reduces on one communicator
 * could be issued in different orders on different ranks. Does not use the
 * communicators itself. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "grid/internal.h"

typedef struct {
    mtc_grid_kind_t kind;
    int level;
    mtc_comm_t comm;    /* NULL when not a member */
    int n;              /* members of this rank's list (0 when not a member) */
    const int *members; /* world ranks in list order (in the shared table) */
} grid_slot;

/* The groups of one configuration, shared by the grids built from it. */
typedef struct {
    mtc_grid_spec spec; /* the key: cfg (order pointer aside) and order_full */
    mtc_grid_groups G;
    int refs;
} grid_table;

struct mtc_grid {
    mtc_grid_spec spec;
    mtc_grid_coord coord;
    int nslots;
    grid_slot *slots;
    grid_table *table;
};

static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;
static grid_table *table_shared; /* the one the process's ranks share */

static int table_matches(const grid_table *t, const mtc_grid_spec *s) {
    const mtc_grid_config *a = &t->spec.cfg, *b = &s->cfg;
    int same = a->world_size == b->world_size && a->tp == b->tp && a->pp == b->pp &&
               a->cp == b->cp && a->ep == b->ep && a->etp == b->etp && a->vpp == b->vpp &&
               a->num_dist_opt_instances == b->num_dist_opt_instances && a->n_hcp == b->n_hcp &&
               !strcmp(t->spec.order_full, s->order_full);
    for (int i = 0; same && i < a->n_hcp && i < MTC_GRID_MAX_HCP; i++)
        same = a->hcp[i] == b->hcp[i];
    return same;
}

static mtc_result_t table_acquire(const mtc_grid_spec *s, grid_table **out) {
    pthread_mutex_lock(&table_mu);
    grid_table *t = table_shared;
    if (t && table_matches(t, s)) {
        t->refs++;
        pthread_mutex_unlock(&table_mu);
        *out = t;
        return MTC_OK;
    }
    /* built under the lock: the other ranks want the same table */
    mtc_result_t rc = MTC_OK;
    t = calloc(1, sizeof *t);
    if (!t) rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "grid table");
    if (rc == MTC_OK) {
        t->spec = *s;
        t->spec.cfg.order = t->spec.order;
        t->refs = 1;
        rc = mtc_grid_groups_build(&t->G, &t->spec);
        if (rc != MTC_OK) free(t), t = NULL;
    }
    if (rc == MTC_OK && !table_shared) table_shared = t; /* else: a second configuration, private */
    pthread_mutex_unlock(&table_mu);
    *out = t;
    return rc;
}

static void table_release(grid_table *t) {
    if (!t) return;
    pthread_mutex_lock(&table_mu);
    int last = --t->refs == 0;
    if (last && table_shared == t) table_shared = NULL;
    pthread_mutex_unlock(&table_mu);
    if (!last) return;
    mtc_grid_groups_free(&t->G);
    free(t);
}

static const grid_slot *slot_find(mtc_grid_t g, mtc_grid_kind_t kind, int level) {
    for (int i = 0; i < g->nslots; i++)
        if (g->slots[i].kind == kind && g->slots[i].level == level) return &g->slots[i];
    return NULL;
}

/* The members of `of` that share this rank's position in `slice` (a
 * subgroup of `of`), in `of`'s order: one communicator per chunk, as slots
 * (kind, level = chunk). Collective over `of`. */
static mtc_result_t grid_split_slices(mtc_grid_t g, mtc_comm_t of, mtc_comm_t slice,
                                      mtc_grid_kind_t kind, const char *name, int nchunks) {
    for (int k = 0; k < nchunks; k++) {
        grid_slot *sl = &g->slots[g->nslots++];
        sl->kind = kind, sl->level = k;
        /* comm: split(of) */
        MTC_CHECK(mtc_comm_split(of, mtc_comm_rank(slice), mtc_comm_rank(of), name, &sl->comm));
    }
    return MTC_OK;
}

/* nd > 1: the dense shard's inter-instance group splits
 * DATA_PARALLEL_GROUP_WITH_CP by the position in
 * INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP; with ep > 1 the expert
 * shard's splits EXPERT_DATA_PARALLEL_GROUP by the position in
 * HIERARCHICAL_EXPERT_DATA_PARALLEL_GROUP_L0 (when that is smaller). */
static mtc_result_t grid_split_inter(mtc_grid_t g, int nchunks) {
    if (g->spec.nd <= 1) return MTC_OK;
    const grid_slot *dp = slot_find(g, MTC_GROUP_DP_CP, 0),
                    *ip = slot_find(g, MTC_GROUP_INTRA_PARTIAL_DP_CP, 0);
    if (dp && ip && dp->comm && ip->comm && mtc_comm_size(ip->comm) < mtc_comm_size(dp->comm))
        MTC_CHECK(grid_split_slices(g, dp->comm, ip->comm, MTC_GROUP_INTER_DIST_OPT,
                                    "INTER_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP", nchunks));
    const grid_slot *edp = slot_find(g, MTC_GROUP_EXPT_DP, 0),
                    *x0 = slot_find(g, MTC_GROUP_HIER_EXPT_DP, 0);
    if (g->spec.cfg.ep > 1 && edp && x0 && edp->comm && x0->comm && mtc_comm_size(edp->comm) > 1 &&
        mtc_comm_size(x0->comm) < mtc_comm_size(edp->comm))
        MTC_CHECK(grid_split_slices(g, edp->comm, x0->comm, MTC_GROUP_EXPT_INTER_DIST_OPT,
                                    "EXPERT_INTER_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP", nchunks));
    return MTC_OK;
}

/* pp > 1: the pipeline executor's channels, split off this rank's
 * PIPELINE_MODEL_PARALLEL_GROUP in its order (collective over it). */
static mtc_result_t grid_split_pipeline(mtc_grid_t g) {
    const grid_slot *pp = slot_find(g, MTC_GROUP_PP, 0);
    if (g->spec.cfg.pp <= 1 || !pp || !pp->comm) return MTC_OK;
    static const struct {
        mtc_grid_kind_t kind;
        const char *name;
    } ch[2] = {{MTC_GROUP_PP_ACTIVATIONS, "PIPELINE_ACTIVATIONS"},
               {MTC_GROUP_PP_GRADIENTS, "PIPELINE_GRADIENTS"}};
    for (int i = 0; i < 2; i++) {
        grid_slot *sl = &g->slots[g->nslots++];
        sl->kind = ch[i].kind, sl->level = 0, sl->n = pp->n, sl->members = pp->members;
        /* comm: split(pp) */
        MTC_CHECK(mtc_comm_split(pp->comm, 0, mtc_comm_rank(pp->comm), ch[i].name, &sl->comm));
    }
    return MTC_OK;
}

void mtc_grid_free(mtc_grid_t g) {
    if (!g) return;
    for (int i = 0; i < g->nslots; i++)
        mtc_comm_free(g->slots[i].comm);
    free(g->slots);
    table_release(g->table);
    free(g);
}

mtc_result_t mtc_grid_init(mtc_grid_t *out, mtc_comm_t world, const mtc_grid_config *cfg) {
    *out = NULL;
    const int W = mtc_comm_size(world), rank = mtc_comm_rank(world);
    mtc_grid_config c = *cfg;
    if (c.world_size == 0) c.world_size = W;
    if (c.world_size != W)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "--world-size %d but %d ranks were started (valid: %d)", c.world_size, W,
                         W);
    mtc_grid_t g = calloc(1, sizeof *g);
    if (!g) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "grid");
    mtc_result_t rc = mtc_grid_spec_init(&g->spec, &c);
    if (rc != MTC_OK) goto fail;
    int nchunks = g->spec.cfg.vpp > 1 ? g->spec.cfg.vpp : 1;
    g->spec.cfg.order = g->spec.order; /* the copy must point into itself */
    mtc_grid_coord_of(&g->coord, &g->spec, rank);
    MTC_CHECK_GOTO(table_acquire(&g->spec, &g->table), rc, fail);
    const mtc_grid_groups *G = &g->table->G;
    g->slots = calloc((size_t)G->nsets + 2 * (size_t)nchunks + 2, sizeof *g->slots);
    if (!g->slots) {
        rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "grid slots");
        goto fail;
    }
    for (int i = 0; i < G->nsets; i++) {
        const mtc_grid_group_set *set = &G->sets[i];
        grid_slot *sl = &g->slots[g->nslots++];
        sl->kind = set->kind, sl->level = set->level;
        int pos, idx = mtc_grid_group_of(set, rank, &pos);
        if (idx >= 0) {
            sl->n = set->size;
            sl->members = set->ranks + (size_t)idx * set->size;
        }
        /* comm: split(world) - collective, every rank calls it for every kind */
        MTC_CHECK_GOTO(mtc_comm_split(world, idx, idx >= 0 ? pos : 0, set->name, &sl->comm), rc,
                       fail);
    }
    MTC_CHECK_GOTO(grid_split_inter(g, nchunks), rc, fail);
    MTC_CHECK_GOTO(grid_split_pipeline(g), rc, fail);
    char coords[96];
    snprintf(coords, sizeof coords, "tp%d cp%d dp%d pp%d ep%d etp%d edp%d", g->coord.tp,
             g->coord.cp, g->coord.dp, g->coord.pp, g->coord.ep, g->coord.etp, g->coord.edp);
    mtc_log_set_rank(rank, coords);
    *out = g;
    return MTC_OK;
fail:
    mtc_grid_free(g);
    return rc;
}

const mtc_grid_spec *mtc_grid_spec_get(mtc_grid_t g) { return &g->spec; }
const mtc_grid_coord *mtc_grid_coords(mtc_grid_t g) { return &g->coord; }

mtc_comm_t mtc_grid_comm(mtc_grid_t g, mtc_grid_kind_t kind, int level) {
    const grid_slot *s = slot_find(g, kind, level);
    return s ? s->comm : NULL;
}

mtc_comm_t mtc_grid_comm_nontrivial(mtc_grid_t g, mtc_grid_kind_t kind, int level) {
    mtc_comm_t c = mtc_grid_comm(g, kind, level);
    return c && mtc_comm_size(c) > 1 ? c : NULL;
}

mtc_comm_t mtc_grid_reduce_comm(mtc_grid_t g, unsigned bit) {
    switch (bit) {
    case MTC_REDUCE_DP_CP: return mtc_grid_comm_nontrivial(g, MTC_GROUP_DP_CP, 0);
    case MTC_REDUCE_TP: return mtc_grid_comm_nontrivial(g, MTC_GROUP_TP, 0);
    case MTC_REDUCE_EMBEDDING: return mtc_grid_comm_nontrivial(g, MTC_GROUP_EMBD, 0);
    default: return NULL;
    }
}

int mtc_grid_chunks(mtc_grid_t g) { return g->spec.cfg.vpp > 1 ? g->spec.cfg.vpp : 1; }

const int *mtc_grid_members(mtc_grid_t g, mtc_grid_kind_t kind, int level, int *n) {
    const grid_slot *s = slot_find(g, kind, level);
    if (n) *n = s ? s->n : 0;
    return s && s->n ? s->members : NULL;
}
