/* tests/grid/test_grid_props.c - properties of the rank generators over every
 * valid configuration up to world size 64, and every validation rule.
 *
 * Oracle for membership: a rank's digits are recomputed here from the order
 * (first token fastest) independently of grid/gen.c; a group of token T is
 * then the set of ranks sharing every digit outside T, listed ascending, and
 * groups are ordered by their smallest rank (Megatron's enumeration is
 * monotonic in the unmasked digits). Plus: each kind partitions the world,
 * sizes match the layout, a rank's coordinates give back the rank and equal
 * its index in the sorted groups, dense and expert pipeline groups agree,
 * pp next/prev, and the distributed-optimizer identities of section (h). */
#include <stdlib.h>
#include <string.h>

#include "grid/grid.h"
#include "test.h"

static const char *const DIMS[5] = {"tp", "pp", "dp", "ep", "cp"}; /* mtc_grid_dim_t order */

/* digit[d] of rank r for sizes indexed by dim and an order of 5 dims */
static void digits_of(int dig[5], int r, const int size[5], const int order[5]) {
    for (int i = 0; i < 5; i++) {
        dig[order[i]] = r % size[order[i]];
        r /= size[order[i]];
    }
}

static int failures_before, dp_early_mismatch;

/* Compare a set with the oracle for the masked dims `mask` (by dim). */
static void check_oracle(const mtc_grid_group_set *set, int W, const int size[5],
                         const int order[5], const int mask[5], const char *what) {
    if (!set) {
        T_CHECKF(0, "%s missing", what);
        return;
    }
    int expect = 1;
    for (int d = 0; d < 5; d++)
        if (mask[d]) expect *= size[d];
    T_CHECKF(set->size == expect && set->count * set->size == W, "%s: %d x %d, expected size %d",
             what, set->count, set->size, expect);
    if (set->size != expect) return;
    int bad = 0, prev_first = -1;
    for (int g = 0; g < set->count && !bad; g++) {
        const int *l = set->ranks + (size_t)g * set->size;
        bad |= l[0] <= prev_first; /* groups ordered by smallest rank */
        prev_first = l[0];
        int d0[5];
        digits_of(d0, l[0], size, order);
        for (int k = 0; k < set->size; k++) {
            int dk[5];
            if (k) bad |= l[k] <= l[k - 1]; /* ascending */
            digits_of(dk, l[k], size, order);
            for (int d = 0; d < 5; d++)
                bad |= !mask[d] && dk[d] != d0[d];
        }
    }
    T_CHECKF(!bad, "%s does not match the oracle", what);
}

/* pos_of[r] = index of r in its list of `set` (sets here partition the world) */
static void positions(int *pos_of, int *grp_of, const mtc_grid_group_set *set) {
    for (int g = 0; g < set->count; g++)
        for (int k = 0; k < set->size; k++) {
            pos_of[set->ranks[g * set->size + k]] = k;
            if (grp_of) grp_of[set->ranks[g * set->size + k]] = g;
        }
}

static int partitions(const mtc_grid_group_set *s, int W) {
    if (!s || s->count * s->size != W) return 0;
    char seen[4096] = {0}; /* W <= 64 here */
    if (W > (int)sizeof seen) return 0;
    int ok = 1;
    for (int i = 0; i < W; i++)
        ok &= s->ranks[i] >= 0 && s->ranks[i] < W && !seen[s->ranks[i]]++;
    return ok;
}

static void check_config(const mtc_grid_config *c, const int perm[5]) {
    mtc_grid_spec s;
    mtc_result_t rc = mtc_grid_spec_init(&s, c);
    T_CHECKF(rc == MTC_OK, "valid config refused: %s", mtc_error_detail());
    if (rc) return;
    mtc_grid_groups G;
    T_CHECK(mtc_grid_groups_build(&G, &s) == MTC_OK);
    const int W = c->world_size, etp = c->etp ? c->etp : c->tp, nd = s.nd;
    int dsize[5] = {c->tp, c->pp, W / (c->tp * c->pp * c->cp), 1, c->cp};
    int esize[5] = {etp, c->pp, W / (etp * c->ep * c->pp), c->ep, 1};
    char what[160];
    snprintf(what, sizeof what, "W%d tp%d pp%d cp%d ep%d etp%d nd%d %s", W, c->tp, c->pp, c->cp,
             c->ep, etp, nd, s.order_full);
    T_CHECKF(s.dp == dsize[2] && s.edp == esize[2], "%s: dp %d edp %d", what, s.dp, s.edp);
    struct {
        mtc_grid_kind_t k;
        int dense;
        int m[5];
    } kinds[] = {
        {MTC_GROUP_DP_CP, 1, {0, 0, 1, 0, 1}},    {MTC_GROUP_DP, 1, {0, 0, 1, 0, 0}},
        {MTC_GROUP_CP, 1, {0, 0, 0, 0, 1}},       {MTC_GROUP_MP, 1, {1, 1, 0, 0, 0}},
        {MTC_GROUP_TP, 1, {1, 0, 0, 0, 0}},       {MTC_GROUP_PP, 1, {0, 1, 0, 0, 0}},
        {MTC_GROUP_TP_DP_CP, 1, {1, 0, 1, 0, 1}}, {MTC_GROUP_TP_DP, 1, {1, 0, 1, 0, 0}},
        {MTC_GROUP_TP_CP, 1, {1, 0, 0, 0, 1}},    {MTC_GROUP_EP, 0, {0, 0, 0, 1, 0}},
        {MTC_GROUP_EXPT_TP, 0, {1, 0, 0, 0, 0}},  {MTC_GROUP_TP_EP, 0, {1, 0, 0, 1, 0}},
        {MTC_GROUP_TP_EP_PP, 0, {1, 1, 0, 1, 0}}, {MTC_GROUP_EXPT_DP, 0, {0, 0, 1, 0, 0}},
        {MTC_GROUP_PP, 0, {0, 1, 0, 0, 0}}, /* the expert generator's pp groups are the dense ones
                                             */
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        const mtc_grid_group_set *set = mtc_grid_groups_find(&G, kinds[i].k, 0);
        char w2[240];
        snprintf(w2, sizeof w2, "%s %s", what, set ? set->name : "?");
        check_oracle(set, W, kinds[i].dense ? dsize : esize, perm, kinds[i].m, w2);
        T_CHECKF(partitions(set, W), "%s does not partition", w2);
    }
    /* every kind except embeddings (and hierarchical/partial ones, checked below) partitions */
    for (int i = 0; i < G.nsets; i++) {
        const mtc_grid_group_set *set = &G.sets[i];
        int expect = set->kind == MTC_GROUP_EMBD       ? c->pp <= 2
                     : set->kind == MTC_GROUP_POS_EMBD ? c->pp == 1
                                                       : 1;
        T_CHECKF(partitions(set, W) == expect && set->partition == expect, "%s %s partition %d",
                 what, set->name, expect);
    }
    /* embeddings: first and last of each pipeline group */
    const mtc_grid_group_set *pp = mtc_grid_groups_find(&G, MTC_GROUP_PP, 0);
    const mtc_grid_group_set *em = mtc_grid_groups_find(&G, MTC_GROUP_EMBD, 0);
    const mtc_grid_group_set *pe = mtc_grid_groups_find(&G, MTC_GROUP_POS_EMBD, 0);
    int bad = !pp || !em || !pe || em->count != pp->count || pe->count != pp->count;
    for (int g = 0; !bad && g < pp->count; g++) {
        const int *l = pp->ranks + (size_t)g * pp->size;
        bad |= em->ranks[g * em->size] != l[0] || pe->ranks[g] != l[0];
        bad |= c->pp > 1 ? em->size != 2 || em->ranks[g * 2 + 1] != l[c->pp - 1] : em->size != 1;
    }
    T_CHECKF(!bad, "%s embedding groups", what);

    /* coordinates: back to the rank, and equal to the index in sorted groups */
    const mtc_grid_group_set *tp = mtc_grid_groups_find(&G, MTC_GROUP_TP, 0),
                             *cp = mtc_grid_groups_find(&G, MTC_GROUP_CP, 0),
                             *dp = mtc_grid_groups_find(&G, MTC_GROUP_DP, 0),
                             *dpcp = mtc_grid_groups_find(&G, MTC_GROUP_DP_CP, 0),
                             *ep = mtc_grid_groups_find(&G, MTC_GROUP_EP, 0),
                             *etps = mtc_grid_groups_find(&G, MTC_GROUP_EXPT_TP, 0),
                             *edp = mtc_grid_groups_find(&G, MTC_GROUP_EXPT_DP, 0);
    bad = 0;
    int *P = malloc(8 * (size_t)W * sizeof(int)), *ppg = P + 7 * W;
    positions(P, NULL, tp), positions(P + W, NULL, cp), positions(P + 2 * W, NULL, dp);
    positions(P + 3 * W, ppg, pp), positions(P + 4 * W, NULL, dpcp), positions(P + 5 * W, NULL, ep);
    positions(P + 6 * W, NULL, etps);
    for (int r = 0; r < W; r++) {
        mtc_grid_coord x;
        mtc_grid_coord_of(&x, &s, r);
        bad |= mtc_grid_rank_dense(&s, x.tp, x.cp, x.dp, x.pp) != r;
        bad |= mtc_grid_rank_expert(&s, x.etp, x.ep, x.edp, x.pp) != r;
        bad |= x.tp >= c->tp || x.cp >= c->cp || x.dp >= s.dp || x.pp >= c->pp;
        bad |= P[r] != x.tp || P[W + r] != x.cp || P[2 * W + r] != x.dp || P[3 * W + r] != x.pp;
        bad |= P[4 * W + r] != x.dp_cp || P[5 * W + r] != x.ep || P[6 * W + r] != x.etp;
        const int *l = pp->ranks + (size_t)ppg[r] * pp->size;
        bad |= mtc_grid_pp_next(&s, r) != l[(x.pp + 1) % c->pp] ||
               mtc_grid_pp_prev(&s, r) != l[(x.pp + c->pp - 1) % c->pp];
        bad |= mtc_grid_is_first_stage(&s, r) != (x.pp == 0) ||
               mtc_grid_is_last_stage(&s, r) != (x.pp == c->pp - 1);
    }
    positions(P, NULL, edp);
    for (int r = 0; r < W; r++) {
        mtc_grid_coord x;
        mtc_grid_coord_of(&x, &s, r);
        bad |= P[r] != x.edp;
    }
    /* group_of agrees with the inverse index on a few ranks */
    for (int r = 0; r < W; r += 7) {
        int pos, g = mtc_grid_group_of(pp, r, &pos);
        bad |= g != ppg[r] || pos != P[3 * W + r];
    }
    free(P);
    T_CHECKF(!bad, "%s coordinates", what);

    /* the distributed-optimizer groups */
    const mtc_grid_group_set *io = mtc_grid_groups_find(&G, MTC_GROUP_INTRA_DIST_OPT, 0);
    T_CHECKF(io && io->count == nd && io->size == W / nd && partitions(io, W), "%s intra dist-opt",
             what);
    if (nd > 1) {
        const mtc_grid_group_set *ip = mtc_grid_groups_find(&G, MTC_GROUP_INTRA_PARTIAL_DP_CP, 0);
        const mtc_grid_group_set *h0 = mtc_grid_groups_find(&G, MTC_GROUP_HIER_EXPT_DP, 0);
        const mtc_grid_group_set *h1 = mtc_grid_groups_find(&G, MTC_GROUP_HIER_EXPT_DP, 1);
        T_CHECKF(ip && ip->size == s.dp * c->cp / nd && partitions(ip, W), "%s intra-partial",
                 what);
        T_CHECKF(h0 && h0->size == s.edp / nd && partitions(h0, W), "%s hier edp L0", what);
        T_CHECKF(h1 && h1->size == nd && partitions(h1, W), "%s hier edp L1", what);
        if (ip && h1 && io) {
            /* Section (h): the inter-instance group (expert L1) equals "position
             * j of every dense intra-partial slice", and each intra-partial
             * dp-cp group lies inside one INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE
             * group. Asserted for the two orders Megatron training uses;
             * Megatron core accepts other orders, where it can fail (counted
             * in dp_early_mismatch, reported). */
            int *inst = malloc((size_t)W * sizeof(int)),
                *mate = malloc((size_t)W * nd * sizeof(int));
            for (int g = 0; g < io->count; g++)
                for (int k = 0; k < io->size; k++)
                    inst[io->ranks[g * io->size + k]] = g;
            int bad_ip = 0, bad_h1 = 0, sl = ip->size;
            for (int g = 0; g < ip->count; g++)
                for (int k = 1; k < sl; k++)
                    bad_ip |= inst[ip->ranks[g * sl + k]] != inst[ip->ranks[g * sl]];
            /* dense inter groups: slice i of list L holds L[i*sl + j] */
            for (int L = 0; L < dpcp->count; L++)
                for (int j = 0; j < sl; j++)
                    for (int i = 0; i < nd; i++) {
                        int r = dpcp->ranks[L * dpcp->size + i * sl + j];
                        for (int t = 0; t < nd; t++)
                            mate[r * nd + t] = dpcp->ranks[L * dpcp->size + t * sl + j];
                    }
            for (int g = 0; g < h1->count; g++)
                for (int k = 0; k < nd; k++)
                    for (int t = 0; t < nd; t++) /* both lists ascending here */
                        bad_h1 |= mate[h1->ranks[g * nd + k] * nd + t] != h1->ranks[g * nd + t];
            T_CHECKF(mtc_grid_groups_dist_opt_consistent(&G, W) == !(bad_ip || bad_h1),
                     "%s: consistency %d", what, mtc_grid_groups_dist_opt_consistent(&G, W));
            int training_order =
                !strcmp(s.order_full, "tp-cp-ep-dp-pp") || !strcmp(s.order_full, "tp-cp-ep-pp-dp");
            if (training_order) {
                T_CHECKF(!bad_ip, "%s: an intra-partial dp-cp group spans instances", what);
                T_CHECKF(!bad_h1, "%s: expert L1 is not the dense inter-instance group", what);
            } else if (bad_ip || bad_h1) {
                dp_early_mismatch++;
            }
            free(inst), free(mate);
        }
    }
    if (c->n_hcp > 0) {
        int prod_below = 1;
        for (int k = 0; k < c->n_hcp; k++) {
            const mtc_grid_group_set *h = mtc_grid_groups_find(&G, MTC_GROUP_HIER_CP, k);
            T_CHECKF(h && h->size == c->hcp[k] && partitions(h, W), "%s hcp L%d", what, k);
            /* members of level k are prod(h[<k]) apart within a cp list */
            int badh = !h;
            for (int g = 0; h && g < h->count; g++)
                for (int j = 1; j < h->size; j++) {
                    mtc_grid_coord a, b;
                    mtc_grid_coord_of(&a, &s, h->ranks[g * h->size + j - 1]);
                    mtc_grid_coord_of(&b, &s, h->ranks[g * h->size + j]);
                    badh |=
                        b.cp - a.cp != prod_below || a.tp != b.tp || a.dp != b.dp || a.pp != b.pp;
                }
            T_CHECKF(!badh, "%s hcp L%d stride", what, k);
            prod_below *= c->hcp[k];
        }
    }
    mtc_grid_groups_free(&G);
}

static void perm_string(char *out, const int perm[5]) {
    out[0] = '\0';
    for (int i = 0; i < 5; i++)
        strcat(out, DIMS[perm[i]]), strcat(out, i < 4 ? "-" : "");
}

/* every configuration with W <= 64; all 120 orders up to W = 8, beyond that
 * the two orders Megatron training uses (tp-cp-ep-dp-pp always, tp-cp-ep-pp-dp up to W = 32;
 * nd = 2 with every order up to W = 8, then with the default order) */
static int sweep(void) {
    int perms[120][5], np = 0;
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 5; b++)
            for (int c = 0; c < 5; c++)
                for (int d = 0; d < 5; d++)
                    for (int e = 0; e < 5; e++) {
                        int used = (1 << a) | (1 << b) | (1 << c) | (1 << d) | (1 << e);
                        if (used == 31)
                            perms[np][0] = a, perms[np][1] = b, perms[np][2] = c, perms[np][3] = d,
                            perms[np][4] = e, np++;
                    }
    int n_valid = 0, n_refused = 0;
    for (int W = 1; W <= 64; W++)
        for (int tp = 1; tp <= W; tp++)
            for (int pp = 1; pp <= W / tp; pp++)
                for (int cp = 1; cp <= W / (tp * pp); cp++) {
                    if (W % (tp * pp * cp)) continue;
                    for (int etp = 1; etp <= W; etp++)
                        for (int ep = 1; ep <= W / etp; ep++) {
                            if (W % (etp * ep * pp)) continue;
                            int dp = W / (tp * pp * cp), edp = W / (etp * ep * pp);
                            for (int pi = 0; pi < (W <= 8 ? np : W <= 32 ? 2 : 1); pi++) {
                                int idx = W <= 8 ? pi : 0;
                                const int *perm = perms[idx];
                                int def[5] = {0, 4, 3, 2, 1},
                                    tpd[5] = {0, 4, 3, 1, 2}; /* tp-cp-ep-dp-pp, tp-cp-ep-pp-dp */
                                if (W > 8 && pi == 0) perm = def;
                                if (W > 8 && pi == 1) perm = tpd;
                                char order[32];
                                perm_string(order, perm);
                                /* expected acceptance from the rules, computed here */
                                int dense_pp = 1, exp_pp = 1;
                                int dsz[5] = {tp, pp, dp, 1, cp}, esz[5] = {etp, pp, edp, ep, 1};
                                for (int i = 0; perm[i] != 1; i++)
                                    dense_pp *= dsz[perm[i]], exp_pp *= esz[perm[i]];
                                int ok = (perm[4] == 1 || pp == 1 || edp == dp) &&
                                         (pp == 1 || dense_pp == exp_pp);
                                for (int nd = 1; nd <= 2; nd++) {
                                    if (nd == 2 && ((dp * cp) % 2 || edp % 2 || (W > 8 && pi != 0)))
                                        continue;
                                    mtc_grid_config c;
                                    mtc_grid_config_default(&c);
                                    c.world_size = W, c.tp = tp, c.pp = pp, c.cp = cp, c.ep = ep,
                                    c.etp = etp == tp ? 0 : etp;
                                    c.order = order, c.num_dist_opt_instances = nd;
                                    if (cp == 4 && nd == 1 && pi == 0)
                                        c.n_hcp = 2, c.hcp[0] = 2, c.hcp[1] = 2;
                                    if (ok) {
                                        check_config(&c, perm);
                                        n_valid++;
                                    } else {
                                        mtc_grid_spec s;
                                        T_CHECKF(mtc_grid_spec_init(&s, &c) ==
                                                     MTC_ERR_INVALID_ARGUMENT,
                                                 "accepted W%d tp%d pp%d cp%d ep%d etp%d %s", W, tp,
                                                 pp, cp, ep, etp, order);
                                        n_refused++;
                                    }
                                    if (atomic_load(&t_failed_) > failures_before + 20)
                                        return n_valid; /* stop flooding */
                                }
                            }
                        }
                }
    printf("property sweep: %d valid configurations checked, %d refused as expected\n", n_valid,
           n_refused);
    printf("other orders where Megatron's inter-instance group does not match the dense "
           "intra-partial slices: %d configurations\n",
           dp_early_mismatch);
    return n_valid;
}

int main(void) {
    failures_before = 0;
    int n = sweep();
    T_CHECK(n > 1000);
    return T_DONE();
}
