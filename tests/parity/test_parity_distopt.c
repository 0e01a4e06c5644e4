/* tests/parity/test_parity_distopt.c - `mtc train --use-distributed-optimizer`
 * against the serial run (the same harness as test_parity.c: K steps
 * in-process on shm rank-threads, per-step loss and grad norm and every
 * parameter gathered back to the serial layout, same tolerances and the
 * same excluded key-bias elements; dp = 8 runs micro batch 1 for the same
 * global batch of 8): dp in {2, 4, 8} with tp, pp and SP,
 * overlapped gradient reduce-scatter (uneven buckets) and overlapped param
 * all-gather on and off, 1, 2 and 4 optimizer instances
 * (INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP + inter-instance all-reduce),
 * buckets padded for high bus bandwidth, dropout on and off. The forward
 * announces every param (params_needed hook) before reading it: from NaN
 * params, delivering only announced ranges gives the normal forward.
 * Interleaved pipeline (pp 2 x vpp 2 on 4 layers): one DDP and one sharded
 * AdamW per model chunk, against a 4-layer serial run.
 * Memory: AdamW state bytes of a rank (m and v of its shard) times the
 * shard group size equals 8 bytes x the parameter count (the plain run's
 * state) within the layout's alignment padding (5% on this model): the
 * state shrinks as 1/dp, and as 1/(dp/instances) with instances. */
#include "parity_harness.h"

typedef struct {
    int tp, dp, pp, sp, overlap, opg, nd;
    long bucket;
    int drop, pad;
    int vpp; /* model chunks per pipeline rank (0/1: none) */
} layout;

static size_t g_state_bytes;

/* One distributed-optimizer run (distopt 0: plain DDP, for the state-bytes check). */
static mtc_result_t run(result *r, const layout *y, int distopt) {
    mtc_train_config c;
    base_config(&c, y->drop ? 0.1f : 0.0f, r->loss, r->norm, r->params);
    c.world_size = y->tp * y->dp * y->pp, c.grid.tp = y->tp, c.grid.pp = y->pp;
    c.parallel.tp.sequence_parallel = y->sp;
    c.overlap_grad_reduce = y->overlap, c.ddp_bucket_size = y->bucket;
    c.use_distributed_optimizer = distopt, c.overlap_param_gather = y->opg;
    c.grid.num_dist_opt_instances = y->nd, c.pad_high_busbw = y->pad, c.grid.vpp = y->vpp;
    c.optim_state_bytes_out = &g_state_bytes;
    if (y->dp * MBS > GBS) c.micro_batch = 1; /* dp 8: one sample per rank, same global batch */
    return parity_train(&c);
}

/* --overlap-param-gather relies on the forward announcing params before it
 * reads them: start from NaN params, let the params_needed hook "deliver"
 * each requested range (as the all-gather would); the loss must equal the
 * normal forward's, and every param must be requested (the tied wte twice: embedding, head). */
typedef struct {
    mtc_model *m;
    const float *real;
    int *seen;
} need_ctx;

static mtc_result_t need_hook(void *ctx, int first, int last) {
    need_ctx *n = ctx;
    for (int p = first; p < last; p++) {
        if (p < 0 || p >= n->m->reg.count) return MTC_ERR_INTERNAL;
        const mtc_param *q = &n->m->reg.params[p];
        memcpy(n->m->params + q->offset, n->real + q->offset, q->local_numel * sizeof(float));
        n->seen[p]++;
    }
    return MTC_OK;
}

static void check_params_needed(int first_layer, int last_layer, int emb, int head) {
    mtc_train_config c;
    base_config(&c, 0, NULL, NULL, NULL);
    mtc_model *m;
    mtc_model_chunk_opts o = {.B = 1,
                              .nslots = 1,
                              .first_layer = first_layer,
                              .last_layer = last_layer,
                              .has_embedding = emb,
                              .has_head = head};
    T_CHECK(mtc_model_init_chunk(&c.model, &o, &m) == MTC_OK);
    mtc_model_init_params(m, 5);
    int tokens[SEQ], targets[SEQ];
    for (int t = 0; t < SEQ; t++)
        tokens[t] = (3 * t + 1) % 60, targets[t] = (5 * t + 2) % 60;
    size_t in = (size_t)SEQ * c.model.hidden_size;
    if (!emb)
        for (size_t i = 0; i < in; i++)
            mtc_model_slot_input(m, 0)[i] = 0.01f * (float)(i % 17);
    mtc_model_pass pass = {.seed = 1};
    double want = mtc_model_forward(m, 0, tokens, head ? targets : NULL, 1, SEQ, &pass);
    float *out0 = NULL;
    if (!head) {
        out0 = malloc(in * sizeof(float));
        memcpy(out0, mtc_model_slot_output(m, 0), in * sizeof(float));
    }
    float *real = malloc(m->reg.total * sizeof(float));
    memcpy(real, m->params, m->reg.total * sizeof(float));
    for (size_t i = 0; i < m->reg.total; i++)
        m->params[i] = NAN;
    need_ctx n = {m, real, calloc((size_t)m->reg.count, sizeof(int))};
    pass.params_needed = need_hook, pass.params_needed_ctx = &n;
    double got = mtc_model_forward(m, 0, tokens, head ? targets : NULL, 1, SEQ, &pass);
    int once = 1;
    for (int p = 0; p < m->reg.count; p++)
        once &= n.seen[p] >= 1; /* the tied wte twice */
    T_CHECKF(once, "layers [%d, %d) emb %d head %d: every param announced", first_layer, last_layer,
             emb, head);
    if (head)
        T_CHECKF(got == want, "loss %g with announced params, %g without", got, want);
    else
        T_CHECK(!memcmp(out0, mtc_model_slot_output(m, 0), in * sizeof(float)));
    printf("params_needed: layers [%d, %d)%s%s: %d params announced before use\n", first_layer,
           last_layer, emb ? " embedding" : "", head ? " head" : "", m->reg.count);
    free(n.seen), free(real), free(out0);
    mtc_model_free(m);
}

int main(void) {
    parity_open_data();
    mtc_train_config c;
    parity_set_layers(2);
    check_params_needed(0, 2, 1, 1);
    check_params_needed(0, 1, 1, 0);
    check_params_needed(1, 2, 0, 1);

    /* the serial oracle (plain AdamW), without and with dropout */
    result serial[2], got;
    size_t plain_state = 0;
    for (int d = 0; d < 2; d++) {
        serial[d].params = calloc(g_nparams, sizeof(float));
        layout s = {.tp = 1, .dp = 1, .pp = 1, .drop = d};
        T_CHECK(run(&serial[d], &s, 0) == MTC_OK);
        plain_state = g_state_bytes;
    }
    T_CHECKF(plain_state == 2 * g_nparams * sizeof(float),
             "plain AdamW state %zu bytes for %zu params", plain_state, g_nparams);
    got.params = calloc(g_nparams, sizeof(float));

    static const layout L_[] = {
        /* tp dp pp sp ovl opg nd bucket drop pad vpp */
        {1, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0},
        {1, 2, 1, 0, 0, 0, 1, 0, 0, 0, 0},
        {1, 2, 1, 0, 1, 1, 1, 513, 1, 0, 0},
        {1, 2, 1, 0, 0, 1, 1, 0, 0, 1, 0},
        {1, 4, 1, 0, 1, 0, 1, 1000, 0, 0, 0},
        {1, 4, 1, 0, 1, 1, 2, 777, 1, 0, 0},
        {1, 8, 1, 0, 0, 0, 1, 0, 0, 0, 0},
        {1, 8, 1, 0, 1, 1, 2, 1500, 1, 0, 0},
        {1, 8, 1, 0, 1, 0, 4, 900, 0, 0, 0},
        {2, 2, 1, 1, 1, 1, 1, 700, 0, 0, 0},
        {2, 2, 1, 0, 0, 0, 2, 0, 1, 0, 0},
        {2, 4, 1, 1, 1, 1, 2, 2500, 1, 0, 0},
        {4, 2, 1, 1, 1, 0, 1, 999, 0, 0, 0},
        /* pipeline: tied wte in its own bucket on both stages, all-reduced over EMBEDDING_GROUP */
        {1, 2, 2, 0, 1, 1, 1, 600, 1, 0, 0},
        {2, 2, 2, 1, 1, 1, 2, 1500, 0, 0, 0},
        {1, 4, 2, 0, 0, 0, 1, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof L_ / sizeof L_[0]; i++) {
        const layout *y = &L_[i];
        char name[128];
        snprintf(name, sizeof name, "distopt tp=%d dp=%d pp=%d%s%s%s nd=%d%s%s", y->tp, y->dp,
                 y->pp, y->sp ? " sp" : "", y->overlap ? " overlap" : "", y->opg ? " opg" : "",
                 y->nd, y->drop ? " dropout" : "", y->pad ? " pad-busbw" : "");
        if (y->bucket)
            snprintf(name + strlen(name), sizeof name - strlen(name), " bucket=%ld", y->bucket);
        memset(got.params, 0, g_nparams * sizeof(float));
        mtc_result_t rc = run(&got, y, 1);
        T_CHECKF(rc == MTC_OK, "%s: %s", name, mtc_error_detail());
        if (rc == MTC_OK) T_CHECKF(compare(name, &got, &serial[y->drop]), "%s", name);
    }

    /* interleaved pipeline (4 layers, pp 2 x vpp 2): one DDP and sharded AdamW per model chunk */
    parity_set_layers(4);
    result serial4 = {.params = calloc(g_nparams, sizeof(float))};
    float *got4 = calloc(g_nparams, sizeof(float));
    layout s4 = {.tp = 1, .dp = 1, .pp = 1};
    T_CHECK(run(&serial4, &s4, 0) == MTC_OK);
    static const layout I_[] = {
        {1, 2, 2, 0, 1, 1, 1, 600, 0, 0, 2},
        {2, 2, 2, 1, 1, 1, 2, 900, 0, 0, 2},
        {1, 1, 2, 0, 0, 1, 1, 0, 0, 0, 2},
    };
    for (size_t i = 0; i < sizeof I_ / sizeof I_[0]; i++) {
        const layout *y = &I_[i];
        char name[128];
        snprintf(name, sizeof name, "distopt L=4 tp=%d dp=%d pp=%d vpp=%d%s%s%s nd=%d", y->tp,
                 y->dp, y->pp, y->vpp, y->sp ? " sp" : "", y->overlap ? " overlap" : "",
                 y->opg ? " opg" : "", y->nd);
        result r4 = {.params = got4};
        mtc_result_t rc = run(&r4, y, 1);
        T_CHECKF(rc == MTC_OK, "%s: %s", name, mtc_error_detail());
        if (rc == MTC_OK) T_CHECKF(compare(name, &r4, &serial4), "%s", name);
    }
    free(serial4.params), free(got4);
    parity_set_layers(2);

    /* optimizer state of the last rank: 1/(dp/instances) of the plain state */
    static const struct { int dp, nd; } M_[] = {{1, 1}, {2, 1}, {4, 1}, {8, 1}, {4, 2}, {8, 4}};
    for (size_t i = 0; i < sizeof M_ / sizeof M_[0]; i++) {
        layout y = {.tp = 1, .dp = M_[i].dp, .pp = 1, .nd = M_[i].nd};
        T_CHECK(run(&got, &y, 1) == MTC_OK);
        int shards = M_[i].dp / M_[i].nd;
        double ratio = (double)g_state_bytes * shards / (double)plain_state;
        printf("dp=%d instances=%d: optimizer state %zu bytes, x %d / plain %zu = %.4f\n", M_[i].dp,
               M_[i].nd, g_state_bytes, shards, plain_state, ratio);
        T_CHECKF(ratio > 0.95 && ratio < 1.05, "dp=%d nd=%d state ratio %.4f", M_[i].dp, M_[i].nd,
                 ratio);
    }

    /* refused: instances that do not divide dp, instances without the distributed optimizer */
    base_config(&c, 0, NULL, NULL, NULL);
    c.use_distributed_optimizer = 1, c.grid.num_dist_opt_instances = 3;
    T_CHECK(mtc_train_validate_layout(&c, 4) == MTC_ERR_INVALID_ARGUMENT);
    printf("refused: %s\n", mtc_error_detail());
    c.use_distributed_optimizer = 0, c.grid.num_dist_opt_instances = 2;
    T_CHECK(mtc_train_validate_layout(&c, 4) == MTC_ERR_INVALID_ARGUMENT);
    printf("refused: %s\n", mtc_error_detail());

    for (int d = 0; d < 2; d++)
        free(serial[d].params);
    free(got.params);
    free(g_skip);
    data_source_free(g_src);
    return T_DONE();
}
