/* tests/dp/test_ddp_fake.h - the fake model the DDP and distributed-optimizer
 * tests share: seven params of uneven sizes (a tied embedding first, 1-D
 * TP-duplicated norms, 2-D weights that straddle bucket and shard
 * boundaries), gradients that are a closed-form function of (rank, param,
 * element, step, microbatch), and the communicators of dp / instances.
 *
 * Gradient values are multiples of 1/16 in [-1/2, 1/2], so every sum over
 * ranks and microbatches, every 1/dp scaling (dp a power of two) and every
 * sum of squares is exact in float/double: the reduced gradient and the
 * norm have exactly one right answer whatever order the collective adds in. */
#ifndef MTC_TESTS_DP_FAKE_H
#define MTC_TESTS_DP_FAKE_H

#include <stdint.h>

#include "comm/comm.h"
#include "model/registry.h"

#define FAKE_NPARAMS 7

static const struct {
    const char *name;
    int64_t s0, s1; /* s1 = 0: 1-D */
    int tp_dup;
} fake_params[FAKE_NPARAMS] = {
    {"wte.weight", 37, 9, 0},            /* 333, the tied embedding */
    {"wpe.weight", 17, 9, 0},            /* 153 */
    {"h.0.ln_1.weight", 9, 0, 1},        /* 9 */
    {"h.0.mlp.c_fc.weight", 25, 9, 0},   /* 225 */
    {"h.0.mlp.c_fc.bias", 25, 0, 0},     /* 25 */
    {"h.0.mlp.c_proj.weight", 9, 25, 0}, /* 225 */
    {"ln_f.bias", 9, 0, 1},              /* 9 */
};
#define FAKE_TOTAL 979

static const int fake_shared_embedding[FAKE_NPARAMS] = {1, 0, 0, 0, 0, 0, 0};

static inline mtc_result_t fake_registry(mtc_registry *reg) {
    MTC_CHECK(mtc_registry_init(reg, FAKE_NPARAMS));
    for (int p = 0; p < FAKE_NPARAMS; p++) {
        MTC_CHECK(mtc_registry_add(reg, fake_params[p].name, 0, fake_params[p].s0,
                                   fake_params[p].s1, MTC_INIT_ZEROS, 0.0f));
        reg->params[p].tp_duplicate = fake_params[p].tp_dup;
    }
    mtc_registry_layout(reg);
    return MTC_OK;
}

/* Rank r's gradient contribution of microbatch mb at step k. */
static inline float fake_grad(int r, int p, int64_t i, int k, int mb) {
    int64_t h = ((int64_t)r * 7 + p * 13 + i * 3 + (int64_t)k * 5 + mb * 11) % 17;
    return (float)(h - 8) / 16.0f;
}

/* Initial value of param p element i. */
static inline float fake_param0(int p, int64_t i) {
    return (float)((p * 31 + i * 7) % 23 - 11) / 64.0f;
}

/* Communicators of `instances` optimizer instances over the world (the
 * world is the dp group): Megatron's intra-partial slices
 * [j*s, (j+1)*s) with s = dp / instances, inter = position within a slice.
 * One instance: intra = world, inter = NULL. */
static inline mtc_result_t fake_instance_comms(mtc_comm_t world, int instances, mtc_comm_t *intra,
                                               mtc_comm_t *inter) {
    int r = mtc_comm_rank(world), s = mtc_comm_size(world) / instances;
    *intra = *inter = NULL;
    if (instances <= 1) return MTC_OK;
    MTC_CHECK(mtc_comm_split(world, r / s, r, "INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP", intra));
    MTC_CHECK(mtc_comm_split(world, r % s, r, "INTER_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP", inter));
    return MTC_OK;
}

#endif
