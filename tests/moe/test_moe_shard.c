/* tests/moe/test_moe_shard.c - the expert-parallel split of the parameter
 * registry and the buffers built on it:
 *  - moe_local_expert_range: EP rank r of ep holds [r E/ep, (r+1) E/ep),
 *    every expert on exactly one rank, for several E and ep;
 *  - mtc_registry_split_ep: another rank's expert keeps its name, shape
 *    and global offset but takes no local storage, its own experts are
 *    held whole, dense parameters are untouched, the layout packs only
 *    what is held; every expert param loses its TP sum (expert-DP sums
 *    the TP copies), dense ones keep theirs;
 *  - dp_layout with skip_empty: absent params get no bucket and no
 *    alignment, the others the distributed optimizer's 64-alignment;
 *  - mtc_ddp over MTC_DDP_PARAMS_DENSE / _EXPERT: the two buffers hold
 *    disjoint params whose sizes add up to the registry's, and the expert
 *    one accepts the model's buffers at its base offset; averaging scales
 *    it by 1/avg_size (Megatron's 1/|dp x cp| for expert buffers). */
#include <stdlib.h>
#include <string.h>

#include "dp/ddp.h"
#include "moe/moe.h"
#include "model/registry.h"
#include "test.h"

enum { NEXP = 4, W1 = 6, W2 = 3 };

/* dense "a" (10), experts 0..3 with fc1 (W1) and fc2 (W2), dense "b" (5) */
static void build(mtc_registry *r) {
    T_CHECK(mtc_registry_init(r, 16) == MTC_OK);
    T_CHECK(mtc_registry_add(r, "a", -1, 10, 0, MTC_INIT_ZEROS, 0) == MTC_OK);
    char name[32];
    for (int e = 0; e < NEXP; e++) {
        snprintf(name, sizeof name, "mlp.experts.%d.c_fc.weight", e);
        T_CHECK(mtc_registry_add(r, name, 0, W1, 0, MTC_INIT_ZEROS, 0) == MTC_OK);
        r->params[r->count - 1].expert = e;
        snprintf(name, sizeof name, "mlp.experts.%d.c_proj.weight", e);
        T_CHECK(mtc_registry_add(r, name, 0, W2, 0, MTC_INIT_ZEROS, 0) == MTC_OK);
        r->params[r->count - 1].expert = e;
    }
    T_CHECK(mtc_registry_add(r, "b", -1, 5, 0, MTC_INIT_ZEROS, 0) == MTC_OK);
}

static void test_ranges(void) {
    static const int Es[] = {4, 8, 16}, eps[] = {1, 2, 4};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            int E = Es[i], ep = eps[j], seen[16] = {0};
            for (int r = 0; r < ep; r++) {
                int first, count;
                moe_local_expert_range(E, ep, r, &first, &count);
                T_CHECKF(count == E / ep && first == r * (E / ep), "E %d ep %d rank %d: [%d, +%d)",
                         E, ep, r, first, count);
                for (int e = first; e < first + count && e < 16; e++)
                    seen[e]++;
            }
            for (int e = 0; e < E; e++)
                T_CHECKF(seen[e] == 1, "E %d ep %d: expert %d held %d times", E, ep, e, seen[e]);
        }
}

static void test_split(void) {
    mtc_registry r;
    build(&r);
    mtc_registry_layout(&r);
    size_t serial_total = r.total, goff[16];
    for (int i = 0; i < r.count; i++)
        goff[i] = r.params[i].global_offset;
    T_CHECK(serial_total == 10 + 5 + NEXP * (W1 + W2));
    for (int i = 0; i < r.count; i++)
        T_CHECK(!mtc_param_expert_parallel(&r, &r.params[i])); /* not split: all dense */
    /* as etp 1 under SP marks them (model/family.c): every param summed over TP */
    for (int i = 0; i < r.count; i++)
        r.params[i].reduce_groups |= MTC_REDUCE_TP;
    /* EP rank 1 of 2 holds experts 2 and 3 */
    int first, count;
    moe_local_expert_range(NEXP, 2, 1, &first, &count);
    mtc_registry_split_ep(&r, first, first + count);
    mtc_registry_layout(&r);
    T_CHECK(r.total == 10 + 5 + 2 * (W1 + W2));
    T_CHECK(r.global_total == serial_total);
    for (int i = 0; i < r.count; i++) {
        const mtc_param *p = &r.params[i];
        int held = p->expert < 0 || p->expert >= 2;
        T_CHECKF(mtc_param_absent(p) == !held, "%s absent %d", p->name, mtc_param_absent(p));
        T_CHECKF(p->local_numel == (held ? p->numel : 0), "%s local %zu", p->name, p->local_numel);
        T_CHECK(mtc_param_expert_parallel(&r, p) == (p->expert >= 2));
        T_CHECKF(p->global_offset == goff[i], "%s global offset moved", p->name);
        /* an expert's TP copies are expert-DP replicas: no TP sum left; dense ones keep it */
        T_CHECKF(!(p->reduce_groups & MTC_REDUCE_TP) == (p->expert >= 0), "%s reduce_groups %u",
                 p->name, p->reduce_groups);
        T_CHECK(p->numel == (size_t)(p->expert < 0 ? (i == 0 ? 10 : 5) : (i % 2 ? W1 : W2)));
    }

    /* the distributed optimizer's layout of each buffer */
    for (int which = 0; which < 2; which++) {
        mtc_ddp_params sel = which ? MTC_DDP_PARAMS_EXPERT : MTC_DDP_PARAMS_DENSE;
        int64_t numels[16];
        for (int i = 0; i < r.count; i++)
            numels[i] = mtc_ddp_holds(&r, &r.params[i], sel) ? (int64_t)r.params[i].local_numel : 0;
        dp_layout l;
        dp_layout_config lc = {.dp = 2, .use_distopt = 1, .skip_empty = 1};
        T_CHECK(dp_layout_build(&l, numels, r.count, &lc) == MTC_OK);
        int64_t held = 0;
        for (int i = 0; i < r.count; i++) {
            if (!numels[i]) {
                T_CHECKF(l.param_bucket[i] == -1, "param %d has bucket %d", i, l.param_bucket[i]);
                continue;
            }
            held += numels[i];
            T_CHECK(l.param_bucket[i] == 0 && l.param[i].start % 64 == 0);
        }
        T_CHECK(held == (which ? 2 * (W1 + W2) : 15));
        T_CHECK(dp_layout_shard_numel(&l, 0) + dp_layout_shard_numel(&l, 1) == l.numel);
        T_CHECK(dp_layout_held_numel(&l, 0) + dp_layout_held_numel(&l, 1) == held);
        dp_layout_free(&l);
        lc.skip_empty = 0; /* without skip_empty an empty param is still an error */
        T_CHECK(dp_layout_build(&l, numels, r.count, &lc) == MTC_ERR_INVALID_ARGUMENT);
        dp_layout_free(&l);
    }

    /* two DDPs (serial: no communicators): dense first, the expert buffer at its base */
    mtc_ddp_config dc = {.params = MTC_DDP_PARAMS_DENSE};
    mtc_ddp_comms none = {0};
    mtc_ddp *dense = NULL, *exp = NULL;
    T_CHECK(mtc_ddp_init(&r, &dc, &none, NULL, NULL, &dense) == MTC_OK);
    mtc_ddp_config xc = {.params = MTC_DDP_PARAMS_EXPERT, .base = (size_t)dense->layout.numel};
    float *params = calloc(64, sizeof(float)), *grads = calloc(64, sizeof(float));
    mtc_registry_layout(&r); /* backward order interleaves dense and expert params */
    mtc_result_t rc = mtc_ddp_init(&r, &xc, &none, params, grads, &exp);
    T_CHECKF(rc == MTC_ERR_INVALID_USAGE, "interleaved offsets accepted: %s", mtc_result_name(rc));
    mtc_ddp_assign_offsets(dense, &r); /* dense at [0, base), then the expert buffer */
    T_CHECK(mtc_ddp_init(&r, &xc, &none, NULL, NULL, &exp) == MTC_OK);
    mtc_ddp_assign_offsets(exp, &r);
    T_CHECK(r.total == 15 + 2 * (W1 + W2));
    mtc_ddp_free(exp), exp = NULL;
    T_CHECK(mtc_ddp_init(&r, &xc, &none, params, grads, &exp) == MTC_OK); /* offsets match */
    T_CHECK(exp->grads == grads + 15 && mtc_ddp_held_numel(exp) == 2 * (W1 + W2));
    T_CHECK(mtc_ddp_held_numel(dense) == 15);
    for (int i = 0; i < r.count; i++) { /* disjoint, each held param in one buffer */
        const mtc_param *p = &r.params[i];
        if (mtc_param_absent(p)) continue;
        int in_d = dense->layout.param_bucket[i] >= 0, in_x = exp->layout.param_bucket[i] >= 0;
        T_CHECKF(in_d + in_x == 1 && in_x == (p->expert >= 0), "%s in %d buffers", p->name,
                 in_d + in_x);
        T_CHECK(p->offset >= (in_x ? 15u : 0u) &&
                p->offset + p->local_numel <= (in_x ? r.total : 15));
    }
    mtc_ddp_free(exp), mtc_ddp_free(dense);
    /* Megatron's expert scaling when averaging: 1/|dp x cp| (avg_size), not 1/|expert-dp| */
    for (int avg = 0; avg <= 4; avg += 4) {
        mtc_ddp_config ac = {
            .params = MTC_DDP_PARAMS_EXPERT, .scale = MTC_DDP_GRAD_AVG, .avg_size = avg};
        T_CHECK(mtc_ddp_init(&r, &ac, &none, NULL, NULL, &exp) == MTC_OK);
        for (int64_t i = 0; i < exp->layout.numel; i++)
            exp->grads[i] = 1.0f;
        T_CHECK(mtc_ddp_finish(exp) == MTC_OK);
        float want = avg ? 1.0f / (float)avg : 1.0f; /* avg 0: |dp| = 1 here, no scaling */
        for (int64_t i = 0; i < exp->layout.numel; i++)
            T_CHECKF(exp->grads[i] == want, "avg_size %d: grad %lld = %g", avg, (long long)i,
                     exp->grads[i]);
        mtc_ddp_free(exp), exp = NULL;
    }
    free(params), free(grads);
    mtc_registry_free(&r);
}

int main(void) {
    test_ranges();
    test_split();
    return T_DONE();
}
