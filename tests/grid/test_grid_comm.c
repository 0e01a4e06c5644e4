/* tests/grid/test_grid_comm.c - the per-rank grid object on thread-ranks:
 * each rank's communicator of every group kind holds exactly the ranks of its
 * list, in list order (mtc_comm_world_rank), non-members get none, the
 * coordinates are the pure ones, and an all-reduce over each communicator
 * sums exactly its members' world ranks (closed form). Several layouts,
 * including a custom order, distributed-optimizer instances and hierarchical
 * context parallelism. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "grid/grid.h"
#include "test.h"

static mtc_result_t rank_main(mtc_comm_t world, void *arg) {
    const mtc_grid_config *cfg = arg;
    const int rank = mtc_comm_rank(world);
    mtc_grid_t grid;
    mtc_result_t rc = mtc_grid_init(&grid, world, cfg);
    T_CHECKF(rc == MTC_OK, "rank %d: grid init: %s", rank, mtc_error_detail());
    if (rc != MTC_OK) return rc;
    const mtc_grid_spec *s = mtc_grid_spec_get(grid);
    mtc_grid_coord want;
    mtc_grid_coord_of(&want, s, rank);
    T_CHECK(memcmp(&want, mtc_grid_coords(grid), sizeof want) == 0);
    mtc_grid_groups G;
    T_CHECK(mtc_grid_groups_build(&G, s) == MTC_OK);
    for (int i = 0; i < G.nsets; i++) {
        const mtc_grid_group_set *set = &G.sets[i];
        int pos, idx = mtc_grid_group_of(set, rank, &pos), n;
        mtc_comm_t comm = mtc_grid_comm(grid, set->kind, set->level);
        const int *members = mtc_grid_members(grid, set->kind, set->level, &n);
        if (idx < 0) {
            T_CHECKF(comm == NULL && members == NULL && n == 0,
                     "rank %d %s: not a member but has a group", rank, set->name);
            continue;
        }
        T_CHECKF(comm != NULL && members != NULL, "rank %d %s: no communicator", rank, set->name);
        if (!comm) continue;
        const int *list = set->ranks + (size_t)idx * set->size;
        T_CHECKF(mtc_comm_size(comm) == set->size && n == set->size, "rank %d %s: size %d vs %d",
                 rank, set->name, mtc_comm_size(comm), set->size);
        T_CHECKF(mtc_comm_rank(comm) == pos, "rank %d %s: comm rank %d, list position %d", rank,
                 set->name, mtc_comm_rank(comm), pos);
        int bad = 0;
        for (int k = 0; k < set->size && k < mtc_comm_size(comm); k++)
            bad |= mtc_comm_world_rank(comm, k) != list[k] || members[k] != list[k];
        T_CHECKF(!bad, "rank %d %s: members differ from the list", rank, set->name);
        /* comm: all-reduce(group) of world ranks = sum of the list */
        double v = rank, sum = 0, expect = 0;
        for (int k = 0; k < set->size; k++)
            expect += list[k];
        T_CHECK(mtc_all_reduce(&v, &sum, 1, MTC_DTYPE_F64, MTC_OP_SUM, comm) == MTC_OK);
        T_CHECKF(sum == expect, "rank %d %s: all-reduce %g, expected %g", rank, set->name, sum,
                 expect);
    }
    mtc_grid_groups_free(&G);
    mtc_grid_free(grid);
    return MTC_OK;
}

static void run(int W, int tp, int pp, int cp, int ep, int etp, const char *order, int nd,
                int n_hcp, const int *hcp) {
    mtc_grid_config c;
    mtc_grid_config_default(&c);
    c.world_size = 0; /* taken from the world communicator */
    c.tp = tp, c.pp = pp, c.cp = cp, c.ep = ep, c.etp = etp, c.order = order,
    c.num_dist_opt_instances = nd;
    c.n_hcp = n_hcp;
    for (int i = 0; i < n_hcp; i++)
        c.hcp[i] = hcp[i];
    mtc_launch_opts o = {.backend = MTC_BACKEND_SHM, .world_size = W, .timeout_s = 60};
    mtc_result_t rc = mtc_launch(&o, rank_main, &c);
    T_CHECKF(rc == MTC_OK, "W%d tp%d pp%d cp%d ep%d etp%d %s nd%d: %s", W, tp, pp, cp, ep, etp,
             order ? order : "default", nd, mtc_error_detail());
}

static mtc_result_t wrong_world(mtc_comm_t world, void *arg) {
    mtc_grid_t g;
    mtc_result_t rc = mtc_grid_init(&g, world, arg);
    T_CHECK(rc == MTC_ERR_INVALID_ARGUMENT && g == NULL);
    T_CHECKF(strstr(mtc_error_detail(), "--world-size 16 but 8 ranks were started"), "%s",
             mtc_error_detail());
    return MTC_OK;
}

int main(void) {
    run(8, 2, 2, 1, 1, 0, NULL, 1, 0, NULL);             /* tp2 pp2 dp2 */
    run(8, 1, 2, 2, 2, 0, NULL, 1, 0, NULL);             /* cp and ep together */
    run(8, 2, 2, 1, 2, 1, "tp-cp-ep-pp-dp", 1, 0, NULL); /* --use-tp-pp-dp-mapping order */
    run(8, 1, 4, 1, 1, 0, "pp-tp-cp-ep-dp", 1, 0, NULL); /* pp 4: middle stages outside EMBEDDING */
    run(8, 2, 1, 1, 2, 0, NULL, 2, 0, NULL);             /* two distributed-optimizer instances */
    run(8, 1, 1, 4, 1, 0, NULL, 1, 2, (const int[]){2, 2}); /* hierarchical cp */
    mtc_grid_config c;
    mtc_grid_config_default(&c);
    c.world_size = 16;
    mtc_launch_opts o = {.backend = MTC_BACKEND_SHM, .world_size = 8, .timeout_s = 60};
    T_CHECK(mtc_launch(&o, wrong_world, &c) == MTC_OK);
    return T_DONE();
}
