/* grid/nodes.c - mtc train's banner lines about nodes: which ranks share a node,
 * which process groups cross nodes, and a warning when tensor-parallel
 * groups do (every layer's TP all-reduce would then cross the network: the
 * reason Megatron orders TP innermost and PP outermost).
 *
 *   > nodes: 2 (mtc-a: ranks 0-1; mtc-b: ranks 2-3)
 *   > process groups across nodes: tp 0/2, dp 2/2
 *   > WARNING: tensor-parallel groups cross nodes (2 of 2; ranks 0,1 on mtc-a, mtc-b) ...
 *
 * Relies on the communicator's node map (comm.h: mtc_comm_node_of, the MPI
 * library's shared-memory split) and on Megatron's group lists
 * (grid/grid.h). Prints nothing for thread-ranks (one process is one node).
 * Does not communicate: the node map is known to every rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "grid/grid.h"

#define NODES_SHOWN 16

/* "0-3,8-11": the world ranks on node `node`, as ranges. */
static void ranks_of_node(mtc_comm_t world, int node, char *buf, size_t len) {
    int p = mtc_comm_size(world);
    size_t off = 0;
    buf[0] = 0;
    for (int r = 0; r < p && off + 24 < len; r++) {
        if (mtc_comm_node_of(world, r) != node) continue;
        int e = r;
        while (e + 1 < p && mtc_comm_node_of(world, e + 1) == node)
            e++;
        off += (size_t)snprintf(buf + off, len - off, "%s%d", off ? "," : "", r);
        if (e > r) off += (size_t)snprintf(buf + off, len - off, "-%d", e);
        r = e;
    }
}

static const char *host_name(mtc_comm_t world, int r) {
    const char *h = mtc_comm_host_of(world, r);
    return h && h[0] ? h : "?";
}

/* Groups of `set` whose members are on more than one node; *example = the
 * first such group (index), -1 when none. */
static int crossing(mtc_comm_t world, const mtc_grid_group_set *set, int *example) {
    int n = 0;
    *example = -1;
    for (int g = 0; g < set->count; g++) {
        const int *l = set->ranks + (size_t)g * set->size;
        int across = 0;
        for (int k = 1; k < set->size && !across; k++)
            across = mtc_comm_node_of(world, l[k]) != mtc_comm_node_of(world, l[0]);
        if (across && *example < 0) *example = g;
        n += across;
    }
    return n;
}

void mtc_grid_print_nodes(mtc_grid_t grid, mtc_comm_t world, FILE *out) {
    if (!world || !mtc_comm_host_of(world, 0)) return; /* thread-ranks: one node */
    int p = mtc_comm_size(world), nodes = mtc_comm_node_count(world);
    char line[1200], ranks[160];
    size_t off = (size_t)snprintf(line, sizeof line, "> nodes: %d (", nodes);
    for (int node = 0, shown = 0; node < nodes && off + 200 < sizeof line; node++) {
        int first = -1;
        for (int r = 0; r < p && first < 0; r++)
            if (mtc_comm_node_of(world, r) == node) first = r;
        if (first < 0) continue;
        if (shown++ == NODES_SHOWN) {
            off += (size_t)snprintf(line + off, sizeof line - off, "; ...");
            break;
        }
        ranks_of_node(world, node, ranks, sizeof ranks);
        off += (size_t)snprintf(line + off, sizeof line - off, "%s%s: rank%s %s",
                                shown > 1 ? "; " : "", host_name(world, first),
                                strpbrk(ranks, ",-") ? "s" : "", ranks);
    }
    fprintf(out, "%s)\n", line);
    if (nodes < 2) return;
    mtc_grid_groups groups;
    if (mtc_grid_groups_build(&groups, mtc_grid_spec_get(grid)) != MTC_OK) return;
    /* the expert groups only with experts (without, they repeat tp and dp) */
    const int experts = mtc_grid_spec_get(grid)->cfg.ep > 1;
    static const struct {
        mtc_grid_kind_t kind;
        const char *name;
        int expert;
    } kinds[] = {{MTC_GROUP_TP, "tp", 0}, {MTC_GROUP_CP, "cp", 0}, {MTC_GROUP_DP, "dp", 0},
                 {MTC_GROUP_PP, "pp", 0}, {MTC_GROUP_EP, "ep", 1}, {MTC_GROUP_EXPT_TP, "etp", 1}};
    off = (size_t)snprintf(line, sizeof line, "> process groups across nodes:");
    int any = 0, tp_cross = 0, tp_count = 0, tp_example = -1;
    const mtc_grid_group_set *tp = NULL;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        const mtc_grid_group_set *set = mtc_grid_groups_find(&groups, kinds[k].kind, 0);
        if (!set || set->size < 2 || (kinds[k].expert && !experts)) continue;
        int ex, n = crossing(world, set, &ex);
        off += (size_t)snprintf(line + off, sizeof line - off, "%s %s %d/%d", any++ ? "," : "",
                                kinds[k].name, n, set->count);
        if (kinds[k].kind == MTC_GROUP_TP)
            tp = set, tp_cross = n, tp_count = set->count, tp_example = ex;
    }
    if (any) fprintf(out, "%s\n", line);
    if (tp && tp_cross > 0) {
        const int *l = tp->ranks + (size_t)tp_example * tp->size;
        char who[400];
        size_t w = 0;
        for (int k = 0; k < tp->size && k < 8 && w + 80 < sizeof who; k++)
            w += (size_t)snprintf(who + w, sizeof who - w, "%s%d on %s", k ? ", " : "", l[k],
                                  host_name(world, l[k]));
        fprintf(out,
                "> WARNING: tensor-parallel groups cross nodes (%d of %d; e.g. ranks %s%s): every "
                "layer's TP all-reduce goes over the network; keep TP inside a node (consecutive "
                "ranks on one host, e.g. mpirun --map-by slot, and tp <= ranks per node)\n",
                tp_cross, tp_count, who, tp->size > 8 ? ", ..." : "");
    }
    mtc_grid_groups_free(&groups);
}
