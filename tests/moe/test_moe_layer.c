/* tests/moe/test_moe_layer.c - one MoE layer (moe/moe.h) against PyTorch and
 * against finite differences:
 *  - every case of tests/reference/moe_tiny.fixture (written by
 *    tests/reference/moe_reference.py: top-2 softmax, pre-softmax with
 *    seq_aux_loss, sigmoid with expert bias and scaling, sigmoid with the
 *    aux loss at top-3, capacity with the probs and position policies,
 *    padding to capacity, group-limited routing, a shared expert, top-1):
 *    output, input gradient, router and expert gradients, aux and z losses,
 *    rows per expert, to 2e-5 relative;
 *  - the layer's backward against central differences of the objective
 *    sum(out * dout) + g (aux + z), computed from its forward;
 *  - 1 and 3 threads give the same bits; an expert with no tokens and all
 *    tokens to one expert work;
 *  - the experts' blocked GEMMs (experts.c) on experts of more than one
 *    block, an empty one and ragged last blocks, against double loops, and
 *    the same bits on 1 and 3 threads.
 * Needs no PyTorch (the fixture is committed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/block.h"
#include "model/fixture.h"
#include "moe/moe.h"
#include "moe/moe_internal.h"
#include "nn/lowp.h"
#include "test.h"

#define FIXTURE "tests/reference/moe_tiny.fixture"
#define HID 16
#define BAT 2
#define SEQ 6
#define NTOK (BAT * SEQ)

static fixture fx;

static const float *get(const char *c, const char *name, int required) {
    char full[96];
    snprintf(full, sizeof full, "%s/%s", c, name);
    const fixture_tensor *t = fixture_get(&fx, full);
    if (!t && required) {
        fprintf(stderr, "fixture lacks %s\n", full);
        exit(1);
    }
    return t ? t->data : NULL;
}

static void close_all(const char *c, const char *what, const float *a, const float *b, size_t n,
                      double rtol) {
    double bmax = 0, worst = 0;
    size_t bad = 0, first = 0;
    for (size_t k = 0; k < n; k++)
        bmax = fmax(bmax, fabs((double)b[k]));
    for (size_t k = 0; k < n; k++) {
        double e = fabs((double)a[k] - b[k]),
               lim = 1e-7 + rtol * (fabs((double)b[k]) + 0.01 * bmax);
        if (e / lim > worst) worst = e / lim;
        if (!(e <= lim) && bad++ == 0) first = k;
    }
    T_CHECKF(bad == 0, "%s %s: %zu of %zu differ, first [%zu] %.8g vs torch %.8g", c, what, bad, n,
             first, bad ? a[first] : 0.0, bad ? b[first] : 0.0);
}

/* One layer's configuration, weights and gradient buffers. */
typedef struct {
    mtc_moe_config m;
    moe_dims d;
    float g;
    int shared;
    float *router, *bias, *fc1w[8], *fc1b[8], *fc2w[8], *fc2b[8];
    float *drouter, *dfc1w[8], *dfc1b[8], *dfc2w[8], *dfc2b[8];
    moe_weights w, dw;
    float *acts_buf, *scratch;
    moe_acts acts;
} layer;

static float *dup(const float *src, size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    if (src) memcpy(p, src, n * sizeof(float));
    return p;
}

static void layer_setup(layer *L, const char *c) {
    memset(L, 0, sizeof *L);
    const float *cfg = get(c, "cfg", 1);
    mtc_moe_config *m = &L->m;
    m->num_experts = (int)cfg[0], m->topk = (int)cfg[1], m->ffn_hidden_size = (int)cfg[2];
    m->score = (moe_score_fn)cfg[5], m->pre_softmax = (int)cfg[6], m->topk_scaling = cfg[7];
    m->num_groups = (int)cfg[8], m->group_topk = (int)cfg[9], m->lb = (moe_lb_type)cfg[10];
    m->aux_coeff = cfg[11], m->z_coeff = cfg[12], m->capacity_factor = cfg[13];
    m->drop = (moe_drop_policy)cfg[14], m->pad_to_capacity = (int)cfg[15];
    m->shared_ffn = (int)cfg[16], m->expert_bias = (int)cfg[18];
    L->g = cfg[17];
    L->d = (moe_dims){HID,         m->num_experts, m->topk, m->ffn_hidden_size,
                      (int)cfg[3], (int)cfg[4],    1,       1};
    int E = L->d.E, F1 = (L->d.swiglu ? 2 : 1) * L->d.F, F = L->d.F;
    L->router = dup(get(c, "router", 1), (size_t)E * HID);
    L->drouter = dup(NULL, (size_t)E * HID);
    if (m->expert_bias) L->bias = dup(get(c, "bias", 1), (size_t)E);
    for (int e = 0; e < E; e++) {
        char nm[32];
        snprintf(nm, sizeof nm, "e%d.fc1w", e), L->fc1w[e] = dup(get(c, nm, 1), (size_t)F1 * HID);
        snprintf(nm, sizeof nm, "e%d.fc2w", e), L->fc2w[e] = dup(get(c, nm, 1), (size_t)HID * F);
        L->dfc1w[e] = dup(NULL, (size_t)F1 * HID), L->dfc2w[e] = dup(NULL, (size_t)HID * F);
        if (L->d.bias) {
            snprintf(nm, sizeof nm, "e%d.fc1b", e), L->fc1b[e] = dup(get(c, nm, 1), (size_t)F1);
            snprintf(nm, sizeof nm, "e%d.fc2b", e), L->fc2b[e] = dup(get(c, nm, 1), (size_t)HID);
            L->dfc1b[e] = dup(NULL, (size_t)F1), L->dfc2b[e] = dup(NULL, (size_t)HID);
        }
    }
    L->w = (moe_weights){L->router, L->bias, L->fc1w, L->fc1b, L->fc2w, L->fc2b};
    L->dw = (moe_weights){L->drouter, NULL, L->dfc1w, L->dfc1b, L->dfc2w, L->dfc2b};
    L->acts_buf = calloc(moe_acts_floats(m, &L->d, NTOK), sizeof(float));
    L->scratch = calloc(moe_scratch_floats(m, &L->d, NTOK), sizeof(float));
    moe_acts_bind(&L->acts, L->acts_buf, m, &L->d, NTOK);
}

static void layer_free(layer *L) {
    free(L->router), free(L->drouter), free(L->bias);
    for (int e = 0; e < L->d.E; e++) {
        free(L->fc1w[e]), free(L->fc2w[e]), free(L->dfc1w[e]), free(L->dfc2w[e]);
        free(L->fc1b[e]), free(L->fc2b[e]), free(L->dfc1b[e]), free(L->dfc2b[e]);
    }
    free(L->acts_buf), free(L->scratch);
}

static moe_pass pass_of(const layer *L, nn_pool *pool) {
    moe_pass p = {.train = 1, .record = 1, .aux_scale = L->g, .seq_B = BAT, .pool = pool};
    return p;
}

/* objective of one forward: sum(out * dout) + g (aux + z) */
static double objective(layer *L, const float *x, const float *dout, float *out, nn_pool *pool) {
    moe_stats st;
    moe_stats_init(&st, L->d.E);
    moe_pass p = pass_of(L, pool);
    T_CHECK(moe_layer_forward(out, &L->acts, &st, x, &L->w, &L->m, &L->d, NTOK, &p, L->scratch) ==
            MTC_OK);
    double s = 0;
    for (int i = 0; i < NTOK * HID; i++)
        s += (double)out[i] * dout[i];
    s += L->g * (st.lb_loss * L->m.aux_coeff + st.z_loss * L->m.z_coeff);
    moe_stats_free(&st);
    return s;
}

static void check_case(const char *c, nn_pool *pool) {
    layer L;
    layer_setup(&L, c);
    int E = L.d.E, F = L.d.F, F1 = (L.d.swiglu ? 2 : 1) * F;
    const float *x = get(c, "x", 1), *dout = get(c, "dout", 1);
    float out[NTOK * HID], din[NTOK * HID];
    moe_stats st;
    T_CHECK(moe_stats_init(&st, E) == MTC_OK);
    moe_pass p = pass_of(&L, pool);
    T_CHECK(moe_layer_forward(out, &L.acts, &st, x, &L.w, &L.m, &L.d, NTOK, &p, L.scratch) ==
            MTC_OK);
    T_CHECK(moe_layer_backward(din, &L.dw, dout, &L.acts, x, &L.w, &L.m, &L.d, &p, L.scratch) ==
            MTC_OK);
    if (L.m.shared_ffn > 0) { /* the shared expert is the dense MLP block */
        int SF = L.m.shared_ffn, SF1 = (L.d.swiglu ? 2 : 1) * SF;
        tp_ctx tp = {.pool = pool};
        model_block_dims bd = {0};
        bd.F = SF, bd.swiglu = L.d.swiglu;
        bd.C = HID;
        float *fch = calloc((size_t)NTOK * SF1, 4);
        float *sc = calloc(model_mlp_scratch_floats(&tp, BAT, SEQ, &bd), 4), sout[NTOK * HID],
              sdin[NTOK * HID];
        float *g1 = calloc((size_t)SF1 * HID, 4), *g2 = calloc((size_t)HID * SF, 4);
        model_mlp_acts sa = {NULL, 0, fch};
        const float *w1 = get(c, "s.fc1w", 1), *w2 = get(c, "s.fc2w", 1);
        T_CHECK(model_mlp_forward(&tp, sout, &sa, x, w1, NULL, w2, NULL, sc, BAT, SEQ, &bd) ==
                MTC_OK);
        T_CHECK(model_mlp_backward(&tp, sdin, g1, NULL, g2, NULL, dout, &sa, x, w1, w2, sc, BAT,
                                   SEQ, &bd) == MTC_OK);
        for (int i = 0; i < NTOK * HID; i++)
            out[i] += sout[i], din[i] += sdin[i];
        close_all(c, "shared fc1 grad", g1, get(c, "ds.fc1w", 1), (size_t)SF1 * HID, 2e-5);
        close_all(c, "shared fc2 grad", g2, get(c, "ds.fc2w", 1), (size_t)HID * SF, 2e-5);
        free(fch), free(sc), free(g1), free(g2);
    }
    close_all(c, "out", out, get(c, "out", 1), NTOK * HID, 2e-5);
    close_all(c, "din", din, get(c, "din", 1), NTOK * HID, 2e-5);
    close_all(c, "drouter", L.drouter, get(c, "drouter", 1), (size_t)E * HID, 2e-5);
    for (int e = 0; e < E; e++) {
        char nm[32];
        snprintf(nm, sizeof nm, "de%d.fc1w", e);
        close_all(c, nm, L.dfc1w[e], get(c, nm, 1), (size_t)F1 * HID, 2e-5);
        snprintf(nm, sizeof nm, "de%d.fc2w", e);
        close_all(c, nm, L.dfc2w[e], get(c, nm, 1), (size_t)HID * F, 2e-5);
        if (L.d.bias) {
            snprintf(nm, sizeof nm, "de%d.fc1b", e);
            close_all(c, nm, L.dfc1b[e], get(c, nm, 1), (size_t)F1, 2e-5);
            snprintf(nm, sizeof nm, "de%d.fc2b", e);
            close_all(c, nm, L.dfc2b[e], get(c, nm, 1), (size_t)HID, 2e-5);
        }
    }
    const float *aux = get(c, "aux", 1), *z = get(c, "z", 1), *counts = get(c, "counts", 1);
    float mine[2] = {(float)(st.lb_loss * L.m.aux_coeff), (float)(st.z_loss * L.m.z_coeff)};
    if (!(L.m.aux_coeff > 0) || L.m.lb == MOE_LB_NONE) mine[0] = 0;
    if (!(L.m.z_coeff > 0)) mine[1] = 0;
    close_all(c, "aux loss", &mine[0], aux, 1, 2e-5);
    close_all(c, "z loss", &mine[1], z, 1, 2e-5);
    for (int e = 0; e < E; e++)
        T_CHECKF(L.acts.counts[e] == (int)counts[e], "%s: expert %d has %d rows, torch %d", c, e,
                 L.acts.counts[e], (int)counts[e]);
    printf("  %-14s ok (aux %.6g z %.6g, rows", c, mine[0], mine[1]);
    for (int e = 0; e < E; e++)
        printf(" %d", L.acts.counts[e]);
    printf(")\n");
    moe_stats_free(&st);
    layer_free(&L);
}

/* Central differences of the objective w.r.t. some of x, the router and
 * expert 0's fc1 (float32 forward: h = 1e-3, 2% tolerance). */
static void check_fd(const char *c, nn_pool *pool) {
    layer L;
    layer_setup(&L, c);
    float *x = dup(get(c, "x", 1), NTOK * HID);
    const float *dout = get(c, "dout", 1);
    float out[NTOK * HID], din[NTOK * HID];
    objective(&L, x, dout, out, pool);
    moe_pass p = pass_of(&L, pool);
    T_CHECK(moe_layer_backward(din, &L.dw, dout, &L.acts, x, &L.w, &L.m, &L.d, &p, L.scratch) ==
            MTC_OK);
    struct {
        const char *what;
        float *v;
        const float *g;
        int n;
    } t[3] = {{"x", x, din, NTOK * HID},
              {"router", L.router, L.drouter, L.d.E * HID},
              {"expert0.fc1", L.fc1w[0], L.dfc1w[0], 2 * HID}};
    for (int q = 0; q < 3; q++) {
        double worst = 0;
        int skipped = 0;
        for (int i = 0; i < t[q].n; i += 3) {
            float v0 = t[q].v[i], h = 4e-3f;
            t[q].v[i] = v0 + h;
            double lp = objective(&L, x, dout, out, pool);
            t[q].v[i] = v0 - h;
            double lm = objective(&L, x, dout, out, pool);
            t[q].v[i] = v0;
            double fd = (lp - lm) / (2.0 * h);
            /* a perturbation that flips a top-k choice has no derivative */
            double lp2, lm2;
            t[q].v[i] = v0 + h / 2, lp2 = objective(&L, x, dout, out, pool);
            t[q].v[i] = v0 - h / 2, lm2 = objective(&L, x, dout, out, pool);
            t[q].v[i] = v0;
            if (fabs((lp2 - lm2) / h - fd) > 0.05 * fabs(fd) + 1e-3) {
                skipped++;
                continue;
            }
            double err = fabs(fd - t[q].g[i]) / (1e-2 + fabs(fd)); /* float32 noise ~1e-4 */
            if (err > worst) worst = err;
        }
        T_CHECKF(worst < 0.02 && skipped * 4 < t[q].n / 3, "%s fd %s: worst %.3g (%d skipped)", c,
                 t[q].what, worst, skipped);
        printf("  fd %-12s %-12s worst relative error %.2g\n", c, t[q].what, worst);
    }
    objective(&L, x, dout, out, pool); /* acts back to the unperturbed forward */
    free(x);
    layer_free(&L);
}

/* 1 and 3 threads: the same bits. */
static void check_threads(void) {
    layer L;
    layer_setup(&L, "top2");
    const float *x = get("top2", "x", 1), *dout = get("top2", "dout", 1);
    float out1[NTOK * HID], out3[NTOK * HID], din1[NTOK * HID], din3[NTOK * HID];
    nn_pool *p3;
    T_CHECK(nn_pool_create(3, &p3) == MTC_OK);
    moe_pass p = pass_of(&L, NULL);
    moe_layer_forward(out1, &L.acts, NULL, x, &L.w, &L.m, &L.d, NTOK, &p, L.scratch);
    moe_layer_backward(din1, &L.dw, dout, &L.acts, x, &L.w, &L.m, &L.d, &p, L.scratch);
    float *g1 = dup(L.dfc1w[1], (size_t)HID * L.d.F);
    p.pool = p3;
    moe_layer_forward(out3, &L.acts, NULL, x, &L.w, &L.m, &L.d, NTOK, &p, L.scratch);
    moe_layer_backward(din3, &L.dw, dout, &L.acts, x, &L.w, &L.m, &L.d, &p, L.scratch);
    T_CHECK(!memcmp(out1, out3, sizeof out1));
    T_CHECK(!memcmp(din1, din3, sizeof din1));
    for (int i = 0; i < HID * L.d.F; i++) /* accumulated twice: exactly 2x */
        T_CHECK(L.dfc1w[1][i] == 2 * g1[i] || (i = HID * L.d.F, 0));
    free(g1);
    nn_pool_free(p3);
    layer_free(&L);
}

/* Router biased so every token picks experts 0 and 1: experts 2 and 3 get
 * no rows (no GEMM, zero gradients); with capacity 1.0 the overflow drops. */
static void check_imbalanced(void) {
    layer L;
    layer_setup(&L, "top2");
    for (int e = 0; e < L.d.E; e++)
        for (int i = 0; i < HID; i++)
            L.router[e * HID + i] = e < 2 ? 0.01f * (float)(e + 1) : 0.0f;
    float x[NTOK * HID], out[NTOK * HID], din[NTOK * HID];
    for (int i = 0; i < NTOK * HID; i++)
        x[i] = 1.0f + 0.01f * (float)(i % 7);
    const float *dout = get("top2", "dout", 1);
    moe_pass p = pass_of(&L, NULL);
    T_CHECK(moe_layer_forward(out, &L.acts, NULL, x, &L.w, &L.m, &L.d, NTOK, &p, L.scratch) ==
            MTC_OK);
    T_CHECK(moe_layer_backward(din, &L.dw, dout, &L.acts, x, &L.w, &L.m, &L.d, &p, L.scratch) ==
            MTC_OK);
    T_CHECK(L.acts.counts[0] == NTOK && L.acts.counts[1] == NTOK && L.acts.counts[2] == 0 &&
            L.acts.counts[3] == 0);
    double s = 0;
    for (int i = 0; i < HID * L.d.F; i++)
        s += fabs(L.dfc1w[2][i]) + fabs(L.dfc2w[3][i]);
    T_CHECK(s == 0);
    L.m.capacity_factor = 1.0f; /* cap = 6 of the 12 tokens each expert got */
    moe_stats st;
    moe_stats_init(&st, L.d.E);
    T_CHECK(moe_layer_forward(out, &L.acts, &st, x, &L.w, &L.m, &L.d, NTOK, &p, L.scratch) ==
            MTC_OK);
    T_CHECK(L.acts.counts[0] == 6 && L.acts.counts[1] == 6 && st.dropped == 12);
    moe_stats_free(&st);
    layer_free(&L);
}

/* ---- the blocked expert GEMMs ----------------------------------------------------------- */

#define BC 24 /* hidden */
#define BF 20 /* expert ffn */
#define BE 3
static int bcounts[BE] = {MOE_BLOCK + 45, 0, MOE_PAD + 7};
#define BM (MOE_BLOCK + 45 + MOE_PAD + 7)

typedef struct {
    float w1[BE][BF * BC], b1[BE][BF], w2[BE][BC * BF], b2[BE][BC];
    float g1[BE][BF * BC], gb1[BE][BF], g2[BE][BC * BF], gb2[BE][BC];
    float xp[BM * BC], prow[BM], dy[BM * BC];
    float y[BM * BC], fch[BM * BF], fchg[BM * BF], z[BM * BF], dz[BM * BF], dh[BM * BF];
    float dxp[BM * BC], dprow[BM];
} blk_case;

static float blk_rand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void blk_run(blk_case *b, nn_pool *pool, float *stage) {
    float *p1[BE], *q1[BE], *p2[BE], *q2[BE], *g1[BE], *h1[BE], *g2[BE], *h2[BE];
    for (int e = 0; e < BE; e++) {
        p1[e] = b->w1[e], q1[e] = b->b1[e], p2[e] = b->w2[e], q2[e] = b->b2[e];
        g1[e] = b->g1[e], h1[e] = b->gb1[e], g2[e] = b->g2[e], h2[e] = b->gb2[e];
    }
    memset(b->g1, 0, sizeof b->g1), memset(b->gb1, 0, sizeof b->gb1);
    memset(b->g2, 0, sizeof b->g2), memset(b->gb2, 0, sizeof b->gb2);
    moe_weights w = {NULL, NULL, p1, q1, p2, q2}, dw = {NULL, NULL, g1, h1, g2, h2};
    moe_dims d = {BC, BE, 1, BF, 0, 1, 0, 1};
    T_CHECK(moe_experts_forward(pool, b->y, b->fch, b->fchg, b->z, stage, b->xp, b->prow, bcounts,
                                BE, 0, &w, &d, BM) == MTC_OK);
    T_CHECK(moe_experts_backward(pool, b->dxp, b->dprow, b->dy, b->xp, b->fch, b->fchg, b->prow,
                                 bcounts, BE, 0, &w, &dw, &d, BM, b->z, b->dz, b->dh,
                                 stage) == MTC_OK);
}

static void check_blocks(void) {
    static blk_case b, b3;
    unsigned sd = 7;
    float *fl[] = {&b.w1[0][0], &b.b1[0][0], &b.w2[0][0], &b.b2[0][0], b.xp, b.dy};
    size_t nf[] = {sizeof b.w1, sizeof b.b1, sizeof b.w2, sizeof b.b2, sizeof b.xp, sizeof b.dy};
    for (int i = 0; i < 6; i++)
        for (size_t j = 0; j < nf[i] / sizeof(float); j++)
            fl[i][j] = 0.5f * blk_rand(&sd);
    for (int q = 0; q < BM; q++)
        b.prow[q] = 0.25f + 0.5f * (blk_rand(&sd) + 1.0f) / 2;
    moe_dims d = {BC, BE, 1, BF, 0, 1, 0, 1};
    float *stage = calloc(moe_stage_floats(&d), sizeof(float));
    nn_pool *p1, *p3;
    T_CHECK(stage && nn_pool_create(1, &p1) == MTC_OK && nn_pool_create(3, &p3) == MTC_OK);
    b3 = b;
    blk_run(&b, p1, stage);
    blk_run(&b3, p3, stage);
    T_CHECK(memcmp(&b, &b3, sizeof b) == 0); /* 1 and 3 threads: the same bits */
    /* each GEMM against double loops on its own inputs (the activations are nn's) */
    double worst = 0;
#define BLK_CMP(got, ref) worst = fmax(worst, fabs((double)(got) - (ref)) / (1e-3 + fabs(ref)))
    for (int e = 0, off = 0; e < BE; off += bcounts[e], e++)
        for (int q = off; q < off + bcounts[e]; q++) {
            for (int f = 0; f < BF; f++) { /* fch = xp W1^T + b1; dxp = dh W1 */
                double h = b.b1[e][f];
                for (int c = 0; c < BC; c++)
                    h += (double)b.xp[q * BC + c] * b.w1[e][f * BC + c];
                BLK_CMP(b.fch[q * BF + f], h);
            }
            for (int c = 0; c < BC; c++) { /* y = (p act) W2^T + p b2 */
                double y = (double)b.b2[e][c] * b.prow[q], dx = 0;
                for (int f = 0; f < BF; f++)
                    y += (double)b.fchg[q * BF + f] * b.prow[q] * b.w2[e][c * BF + f];
                for (int f = 0; f < BF; f++)
                    dx += (double)b.dh[q * BF + f] * b.w1[e][f * BC + c];
                BLK_CMP(b.y[q * BC + c], y);
                BLK_CMP(b.dxp[q * BC + c], dx);
            }
        }
    for (int e = 0, off = 0; e < BE; off += bcounts[e], e++) /* dW2 = dy^T z, dW1 = dh^T xp */
        for (int f = 0; f < BF; f++)
            for (int c = 0; c < BC; c++) {
                double g2 = 0, g1 = 0;
                for (int q = off; q < off + bcounts[e]; q++) {
                    g2 += (double)b.dy[q * BC + c] * b.fchg[q * BF + f] * b.prow[q];
                    g1 += (double)b.dh[q * BF + f] * b.xp[q * BC + c];
                }
                BLK_CMP(b.g2[e][c * BF + f], g2);
                BLK_CMP(b.g1[e][f * BC + c], g1);
            }
#undef BLK_CMP
    T_CHECKF(worst < 1e-3, "blocked expert GEMMs: worst relative error %g", worst);
    double s = 0;
    for (int i = 0; i < BF * BC; i++)
        s += fabs(b.g1[1][i]) + fabs(b.g2[1][i]);
    T_CHECK(s == 0); /* the empty expert */
    printf("  blocked GEMMs ok (rows %d %d %d, worst rel %.2g)\n", bcounts[0], bcounts[1],
           bcounts[2], worst);
    /* with oneDNN, any row counts make a few shapes per projection (six of
     * them: fc1, fc2 forward, data and weight gradients; MOE_BLOCK / MOE_PAD
     * each), well inside the primitive cache that the dense layers share */
    nn_lowp *lp = nn_pool_lowp(p1);
    if (lp) {
        for (int t = 0; t < 16; t++) {
            bcounts[0] = (int)((blk_rand(&sd) + 1.0f) * 0.5f * (BM - 1));
            bcounts[1] = (int)((blk_rand(&sd) + 1.0f) * 0.5f * (BM - bcounts[0]));
            bcounts[2] = BM - bcounts[0] - bcounts[1];
            blk_run(&b3, p1, stage);
        }
        long made = 0, hits = 0;
        nn_lowp_stats(lp, &made, &hits);
        T_CHECKF(made <= NN_LOWP_CACHE / 2, "blocked expert GEMMs: %ld oneDNN shapes (cache %d)",
                 made, NN_LOWP_CACHE);
    }
    nn_pool_free(p1);
    nn_pool_free(p3);
    free(stage);
}

static void check_parse(void) {
    mtc_moe_config m = {.num_experts = 4};
    T_CHECK(mtc_moe_parse_layer_freq(&m, "2") == MTC_OK && m.layer_freq == 2);
    T_CHECK(mtc_moe_is_layer(&m, 0) && !mtc_moe_is_layer(&m, 1) && mtc_moe_is_layer(&m, 2));
    T_CHECK(mtc_moe_parse_layer_freq(&m, "([1]*3+[0]*1)*2") == MTC_OK && m.pattern_len == 8);
    T_CHECK(mtc_moe_is_layer(&m, 2) && !mtc_moe_is_layer(&m, 3) && mtc_moe_is_layer(&m, 4));
    T_CHECK(mtc_moe_parse_layer_freq(&m, "[0, 1]") == MTC_OK && m.pattern_len == 2 &&
            !mtc_moe_is_layer(&m, 0) && mtc_moe_is_layer(&m, 1));
    T_CHECK(mtc_moe_parse_layer_freq(&m, "[1,2]") != MTC_OK);
    T_CHECK(mtc_moe_parse_layer_freq(&m, "0") != MTC_OK);
    mtc_moe_config v = {.num_experts = 6};
    T_CHECK(mtc_moe_validate(&v, 2, 32, 1, 0, 4, 1, 0) != MTC_OK); /* 6 % 4 */
    T_CHECK(mtc_moe_validate(&v, 2, 32, 1, 0, 2, 1, 0) == MTC_OK);
    v.expert_bias = 1; /* needs sigmoid */
    T_CHECK(mtc_moe_validate(&v, 2, 32, 1, 0, 1, 1, 0) != MTC_OK);
    v.expert_bias = 0, v.topk = 1; /* plain softmax top-1 */
    T_CHECK(mtc_moe_validate(&v, 2, 32, 1, 0, 1, 1, 0) != MTC_OK);
    v.topk = 2, v.pad_to_capacity = 1;
    T_CHECK(mtc_moe_validate(&v, 2, 32, 1, 0, 1, 1, 0) != MTC_OK);
    v.pad_to_capacity = 0, v.num_groups = 4; /* 6 % 4 */
    T_CHECK(mtc_moe_validate(&v, 2, 32, 1, 0, 1, 1, 0) != MTC_OK);
    v.num_groups = 0;
    T_CHECK(mtc_moe_validate(&v, 2, 32, 2, 0, 1, 1, 0) != MTC_OK); /* TP without SP */
    T_CHECK(mtc_moe_validate(&v, 2, 32, 2, 1, 1, 2, 1) != MTC_OK); /* biases with etp 2 */
    mtc_moe_config dense = {0};
    T_CHECK(mtc_moe_validate(&dense, 2, 32, 1, 0, 2, 1, 0) != MTC_OK); /* EP without experts */
}

/* The rows an expert's GEMMs compute (the planner prices them): blocks of
 * 256, the last padded to a multiple of 64; one call without oneDNN. */
static void check_gemm_rows(void) {
    static const int in[][4] = {/* rows, blocked, padded rows, calls */
                                {0, 1, 0, 0},     {1, 1, 64, 1},    {64, 1, 64, 1},
                                {65, 1, 128, 1},  {256, 1, 256, 1}, {257, 1, 320, 2},
                                {600, 1, 640, 3}, {300, 0, 300, 1}, {0, 0, 0, 0}};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        int calls = -1, r = moe_gemm_rows(in[i][0], in[i][1], &calls);
        T_CHECKF(r == in[i][2] && calls == in[i][3], "moe_gemm_rows(%d, %d) = %d, %d calls",
                 in[i][0], in[i][1], r, calls);
    }
}

int main(void) {
    if (fixture_load(&fx, FIXTURE) != 0) {
        fprintf(stderr, "cannot read %s (run tests/reference/moe_reference.py)\n", FIXTURE);
        return 1;
    }
    static const char *cases[] = {"top2",      "presoftmax",   "sigmoid_bias", "sigmoid_aux",
                                  "cap_probs", "cap_position", "cap_pad",      "group",
                                  "shared",    "top1"};
    nn_pool *pool;
    T_CHECK(nn_pool_create(2, &pool) == MTC_OK);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(cases[i], pool);
    check_fd("top2", pool);
    check_fd("presoftmax", pool);
    check_fd("sigmoid_aux", pool);
    check_fd("cap_probs", pool);
    check_threads();
    check_imbalanced();
    check_blocks();
    check_gemm_rows();
    check_parse();
    nn_pool_free(pool);
    fixture_free(&fx);
    return T_DONE();
}
