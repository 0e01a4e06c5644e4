/* tests/dp/test_ddp.c - bucketed data-parallel gradient reduction on dp =
 * 1, 2, 4 shm rank-threads: after mtc_ddp_finish every rank's gradient
 * (plain DDP: the whole buffer; distributed optimizer: its shards) equals
 * the closed-form sum over ranks and microbatches (or its 1/dp mean), for
 * overlap on and off, bucket sizes that cut params unevenly, one param per
 * bucket, a tied-embedding bucket, two steps in a row; buckets start during
 * "backward" exactly when they and their predecessors are complete, also
 * when params are marked out of order; misuse is reported; inexact sums
 * give the same bits on every rank, every run, with or without overlap. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dp/chunk_layout.h"
#include "dp/ddp.h"
#include "test.h"
#include "test_ddp_fake.h"

typedef struct {
    int distopt, overlap, shared, forward_marking;
    int64_t bucket;
    mtc_ddp_grad_scale scale;
} ddp_case;

/* Add microbatch mb of step k to the grads; on the last microbatch mark
 * each param after its contribution and check how many buckets started. */
static mtc_result_t run_backward(mtc_ddp *d, const ddp_case *c, int r, int k, int mb, int last) {
    const dp_layout *l = &d->layout;
    int order[FAKE_NPARAMS];
    for (int j = 0; j < FAKE_NPARAMS; j++)
        order[j] = c->forward_marking ? j : FAKE_NPARAMS - 1 - j;
    unsigned char marked[FAKE_NPARAMS] = {0};
    for (int j = 0; j < FAKE_NPARAMS; j++) {
        int p = order[j];
        float *g = d->grads + l->param[p].start;
        for (int64_t i = 0; i < l->param[p].end - l->param[p].start; i++)
            g[i] += fake_grad(r, p, i, k, mb);
        if (!last) continue;
        MTC_CHECK(mtc_ddp_param_grad_ready(d, p));
        marked[p] = 1;
        /* expected: the longest prefix of complete buckets (none without overlap) */
        int expect = 0;
        while (c->overlap && expect < l->nbuckets) {
            int complete = 1;
            for (int q = l->bucket_param_off[expect]; q < l->bucket_param_off[expect + 1]; q++)
                complete &= marked[l->bucket_params[q]];
            if (!complete) break;
            expect++;
        }
        T_CHECKF(mtc_ddp_buckets_launched(d) == expect, "launched %d, expected %d (param %d)",
                 mtc_ddp_buckets_launched(d), expect, p);
    }
    return MTC_OK;
}

/* Does rank r hold the reduced gradient of element i of param p? */
static int holds(const mtc_ddp *d, int r, int p, int64_t i) {
    if (!d->cfg.use_distopt) return 1;
    const dp_layout *l = &d->layout;
    int64_t at = l->param[p].start + i;
    dp_range s = dp_layout_shard_range(l, r, l->param_bucket[p]);
    return at >= s.start && at < s.end;
}

static mtc_result_t check_case(mtc_comm_t world, const ddp_case *c) {
    int r = mtc_comm_rank(world), dp = mtc_comm_size(world);
    const int M = 3, K = 2;
    mtc_registry reg;
    MTC_CHECK(fake_registry(&reg));
    mtc_ddp_config cfg = {.use_distopt = c->distopt,
                          .overlap_grad_reduce = c->overlap,
                          .bucket_size = c->bucket,
                          .scale = c->scale,
                          .shared_embedding = c->shared ? fake_shared_embedding : NULL};
    mtc_ddp_comms comms = {.dp = world};
    mtc_ddp *d;
    MTC_CHECK(mtc_ddp_init(&reg, &cfg, &comms, NULL, NULL, &d));
    int bad = 0, held = 0;
    for (int k = 0; k < K; k++) {
        mtc_ddp_zero_grad(d);
        for (int mb = 0; mb < M; mb++)
            MTC_CHECK(run_backward(d, c, r, k, mb, mb == M - 1));
        MTC_CHECK(mtc_ddp_finish(d));
        for (int p = 0; p < FAKE_NPARAMS; p++) {
            const float *g = d->grads + d->layout.param[p].start;
            for (int64_t i = 0; i < (int64_t)reg.params[p].numel; i++) {
                if (!holds(d, d->shard_rank, p, i)) continue;
                double want = 0;
                for (int q = 0; q < dp; q++)
                    for (int mb = 0; mb < M; mb++)
                        want += fake_grad(q, p, i, k, mb);
                if (c->scale == MTC_DDP_GRAD_AVG) want /= dp;
                held++;
                if (g[i] != (float)want && bad++ < 3)
                    fprintf(stderr, "dp %d rank %d step %d param %d [%lld]: %g, want %g\n", dp, r,
                            k, p, (long long)i, g[i], want);
            }
        }
    }
    T_CHECKF(bad == 0, "dp %d distopt %d overlap %d bucket %lld scale %d: %d wrong", dp, c->distopt,
             c->overlap, (long long)c->bucket, (int)c->scale, bad);
    /* the elements held are the whole model (plain) or its 1/dp shard */
    int64_t total = 0;
    for (int p = 0; p < FAKE_NPARAMS; p++)
        total += (int64_t)reg.params[p].numel;
    int64_t mine = held / K, all = mine;
    MTC_CHECK(mtc_all_reduce(&mine, &all, 1, MTC_DTYPE_I64, MTC_OP_SUM, world));
    T_CHECK(mine == mtc_ddp_held_numel(d));
    T_CHECK(all == (c->distopt ? total : total * dp));
    mtc_ddp_free(d);
    mtc_registry_free(&reg);
    return MTC_OK;
}

/* Misuse: a param marked twice, a param never marked; the next step works. */
static mtc_result_t check_misuse(mtc_comm_t world) {
    mtc_registry reg;
    MTC_CHECK(fake_registry(&reg));
    mtc_ddp_config cfg = {.overlap_grad_reduce = 1, .bucket_size = 200};
    mtc_ddp_comms comms = {.dp = world};
    mtc_ddp *d;
    MTC_CHECK(mtc_ddp_init(&reg, &cfg, &comms, NULL, NULL, &d));
    T_CHECK(mtc_ddp_param_grad_ready(d, FAKE_NPARAMS) == MTC_ERR_INVALID_ARGUMENT);
    MTC_CHECK(mtc_ddp_param_grad_ready(d, FAKE_NPARAMS - 1));
    T_CHECK(mtc_ddp_param_grad_ready(d, FAKE_NPARAMS - 1) == MTC_ERR_INVALID_USAGE);
    MTC_CHECK(mtc_ddp_grads_ready(d, 2, FAKE_NPARAMS - 1)); /* params 0, 1 never marked */
    T_CHECK(mtc_ddp_finish(d) == MTC_ERR_INVALID_USAGE);
    T_CHECK(strstr(mtc_error_detail(), "param 1") != NULL);
    MTC_CHECK(mtc_ddp_grads_ready(d, 0, FAKE_NPARAMS));
    T_CHECK(mtc_ddp_buckets_launched(d) == d->layout.nbuckets);
    T_CHECK(mtc_ddp_finish(d) == MTC_OK);
    mtc_ddp_free(d);
    /* buffers: both or neither; plain DDP offsets equal the registry's */
    float dummy;
    T_CHECK(mtc_ddp_init(&reg, &cfg, &comms, &dummy, NULL, &d) == MTC_ERR_INVALID_ARGUMENT);
    MTC_CHECK(mtc_ddp_init(&reg, &cfg, &comms, NULL, NULL, &d));
    for (int p = 0; p < FAKE_NPARAMS; p++)
        T_CHECK(d->layout.param[p].start == (int64_t)reg.params[p].offset);
    mtc_ddp_free(d);
    mtc_registry_free(&reg);
    return MTC_OK;
}

/* A layout built once (dp/chunk_layout.h, as train's layout hook does) is
 * the one the DDP runs on: mtc_ddp_init_layout takes it over, its places
 * are mtc_ddp_init's own, and a layout for another group size or a
 * placement-only one is refused (and still freed). */
static mtc_result_t check_layout_handoff(mtc_comm_t world) {
    int dp = mtc_comm_size(world);
    mtc_registry reg;
    MTC_CHECK(fake_registry(&reg));
    mtc_ddp_chunk_opts o = {.use_distopt = 1,
                            .overlap_grad_reduce = 1,
                            .bucket_size = 200,
                            .dp = dp,
                            .dp_cp = dp,
                            .pp_size = 2};
    mtc_ddp_params all = MTC_DDP_PARAMS_ALL;
    mtc_ddp_chunk_layout cl;
    MTC_CHECK(mtc_ddp_chunk_layout_init(&cl, &reg, &o, 1, &all, &dp));
    T_CHECK(cl.held[0] && cl.cfg[0].bucket_size == 200 && cl.cfg[0].shared_embedding);
    T_CHECK(cl.total == (size_t)cl.layout[0].numel);
    size_t off[FAKE_NPARAMS];
    mtc_ddp_chunk_layout_offsets(&cl, off);
    mtc_ddp_comms comms = {.dp = world};
    mtc_ddp *ref, *d;
    MTC_CHECK(mtc_ddp_init(&reg, &cl.cfg[0], &comms, NULL, NULL, &ref));
    MTC_CHECK(mtc_ddp_init_layout(&reg, &cl.cfg[0], &comms, &cl.layout[0], NULL, NULL, &d));
    T_CHECK(cl.layout[0].param == NULL); /* taken over */
    T_CHECK(d->layout.numel == ref->layout.numel && d->layout.nbuckets == ref->layout.nbuckets);
    for (int p = 0; p < FAKE_NPARAMS; p++)
        T_CHECK(off[p] == (size_t)d->layout.param[p].start &&
                d->layout.param[p].start == ref->layout.param[p].start);
    mtc_ddp_free(d), mtc_ddp_free(ref);
    dp_layout l;
    MTC_CHECK(mtc_ddp_layout(&reg, &cl.cfg[0], dp, 1, &l)); /* the planner's */
    T_CHECK(mtc_ddp_init_layout(&reg, &cl.cfg[0], &comms, &l, NULL, NULL, &d) ==
            MTC_ERR_INVALID_USAGE);
    T_CHECK(l.param == NULL && d == NULL);
    MTC_CHECK(mtc_ddp_layout(&reg, &cl.cfg[0], dp + 1, 0, &l));
    T_CHECK(mtc_ddp_init_layout(&reg, &cl.cfg[0], &comms, &l, NULL, NULL, &d) ==
            MTC_ERR_INVALID_USAGE);
    mtc_ddp_chunk_layout_free(&cl);
    mtc_registry_free(&reg);
    return MTC_OK;
}

/* Inexact values (rounding happens): the reduced bits are the same on every
 * rank, in every repetition, and with overlap on or off. */
static mtc_result_t check_determinism(mtc_comm_t world) {
    int r = mtc_comm_rank(world);
    mtc_registry reg;
    MTC_CHECK(fake_registry(&reg));
    uint64_t hash[4] = {0};
    for (int rep = 0; rep < 4; rep++) {
        mtc_ddp_config cfg = {.overlap_grad_reduce = rep & 1, .bucket_size = 200};
        mtc_ddp_comms comms = {.dp = world};
        mtc_ddp *d;
        MTC_CHECK(mtc_ddp_init(&reg, &cfg, &comms, NULL, NULL, &d));
        for (int p = FAKE_NPARAMS - 1; p >= 0; p--) {
            float *g = d->grads + d->layout.param[p].start;
            for (int64_t i = 0; i < (int64_t)reg.params[p].numel; i++)
                g[i] = sinf(0.37f * (float)(i + 1) + (float)(r * 11 + p)) * 1.1f;
            MTC_CHECK(mtc_ddp_param_grad_ready(d, p));
        }
        MTC_CHECK(mtc_ddp_finish(d));
        uint64_t h = 1469598103934665603ull; /* FNV-1a over the bits */
        const unsigned char *b = (const unsigned char *)d->grads;
        for (size_t k = 0; k < (size_t)d->layout.numel * 4; k++)
            h = (h ^ b[k]) * 1099511628211ull;
        hash[rep] = h;
        mtc_ddp_free(d);
    }
    int64_t h0 = (int64_t)(hash[0] >> 1), lo, hi;
    MTC_CHECK(mtc_all_reduce(&h0, &lo, 1, MTC_DTYPE_I64, MTC_OP_MIN, world));
    MTC_CHECK(mtc_all_reduce(&h0, &hi, 1, MTC_DTYPE_I64, MTC_OP_MAX, world));
    T_CHECKF(lo == hi, "ranks hold different reduced bits");
    for (int rep = 1; rep < 4; rep++)
        T_CHECKF(hash[rep] == hash[0], "repetition %d differs", rep);
    mtc_registry_free(&reg);
    return MTC_OK;
}

static mtc_result_t rank_main(mtc_comm_t world, void *arg) {
    (void)arg;
    static const int64_t buckets[] = {0, 200, 1};
    for (int distopt = 0; distopt < 2; distopt++)
        for (int overlap = 0; overlap < 2; overlap++)
            for (int b = 0; b < 3; b++) {
                ddp_case c = {.distopt = distopt,
                              .overlap = overlap,
                              .bucket = buckets[b],
                              .shared = distopt && b == 1,
                              .scale = b == 1 ? MTC_DDP_GRAD_AVG : MTC_DDP_GRAD_SUM};
                MTC_CHECK(check_case(world, &c));
            }
    ddp_case fwd = {.distopt = 1, .overlap = 1, .bucket = 1, .forward_marking = 1};
    MTC_CHECK(check_case(world, &fwd));
    MTC_CHECK(check_misuse(world));
    MTC_CHECK(check_determinism(world));
    MTC_CHECK(check_layout_handoff(world));
    return MTC_OK;
}

int main(void) {
    static const int dps[] = {1, 2, 4};
    for (int j = 0; j < 3; j++) {
        mtc_launch_opts o = {.backend = MTC_BACKEND_SHM, .world_size = dps[j], .timeout_s = 60};
        mtc_result_t rc = mtc_launch(&o, rank_main, NULL);
        T_CHECKF(rc == MTC_OK, "dp %d: %s %s", dps[j], mtc_result_name(rc), mtc_error_detail());
    }
    return T_DONE();
}
