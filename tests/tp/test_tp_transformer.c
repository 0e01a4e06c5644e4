/* tests/tp/test_tp_transformer.c - one whole pre-LN transformer layer built
 * from the TP blocks the way model/ composes them (tp/layers.h):
 *   r = x + attn(ln_1(x));  y = r + mlp(ln_2(r))
 * on (B, T_loc, C) rows, against the same layer run serially with nn/,
 * for tp in {1, 2, 3, 4}, with and without sequence parallelism. Checks the
 * output, the input gradient and every parameter gradient; under SP the
 * layer-norm and c_proj-bias gradients are partial sums over the rank's
 * tokens and must add up (all-reduce over TP, the gradient-finalisation
 * rule stated in layers.h) to the serial gradients, while without SP they
 * are complete on every rank. Attention dropout on.
 * Tolerance: tp_test.h. */
#include <stdio.h>

#include "nn/nn.h"
#include "model/block.h"
#include "tp/layers.h"
#include "tp/mappings.h"
#include "tp_test.h"

enum { B = 2, T = 12, C = 24, NH = 12, HS = C / NH, F = 4 * C };
enum { S_X = 61, S_DY };
static const nn_dropout_spec DROP = {.p = 0.1f, .seed = 99, .stream = 7};
/* GPT-2's blocks: one key/value group per head, GELU, no rotary positions */
static const model_block_dims BD = {.C = C, .NH = NH, .NG = NH, .HS = HS, .F = F};

/* parameter k: 0 ln1w 1 ln1b 2 qkvw 3 qkvb 4 attprojw 5 attprojb 6 ln2w 7 ln2b 8 fcw 9 fcb
 * 10 fcprojw 11 fcprojb; full sizes */
enum { NP = 12 };
static const size_t FULL[NP] = {C, C, 3 * C *C, 3 * C, C *C, C, C, C, F *C, F, C *F, C};

typedef struct {
    int sp;
    float *x, *y, *dy, *dx;
    float *g[NP]; /* serial gradients */
} job;

/* parameter k from its own stream: layer-norm weights 1 + 0.1 n, other
 * weights 0.3 n, biases (odd k) 0.1 n */
static void fill_param(float *p, int k, size_t n, uint64_t first) {
    tt_fill(p, n, 100 + (uint64_t)k, first, k % 2 ? 0.1f : (k == 0 || k == 6) ? 0.1f : 0.3f);
    if (k == 0 || k == 6)
        for (size_t i = 0; i < n; i++)
            p[i] += 1.0f;
}

/* ---- serial layer ------------------------------------------------------------------ */

typedef struct {
    float *ln1, *m1, *r1, *qkv, *lse, *atty, *ao, *res, *ln2, *m2, *r2, *fch, *fchg;
} acts;

static void serial(job *j) {
    int N = B * T;
    float *w[NP];
    for (int k = 0; k < NP; k++) {
        w[k] = tt_alloc(FULL[k]);
        j->g[k] = tt_alloc(FULL[k]);
        fill_param(w[k], k, FULL[k], 0);
    }
    j->x = tt_alloc((size_t)N * C), j->y = tt_alloc((size_t)N * C);
    j->dy = tt_alloc((size_t)N * C), j->dx = tt_alloc((size_t)N * C);
    tt_fill(j->x, (size_t)N * C, S_X, 0, 1.0f);
    tt_fill(j->dy, (size_t)N * C, S_DY, 0, 1.0f);
    size_t nc = (size_t)N * C;
    acts a = {tt_alloc(nc),
              tt_alloc(N),
              tt_alloc(N),
              tt_alloc(3 * nc),
              tt_alloc((size_t)B * NH * T),
              tt_alloc(nc),
              tt_alloc(nc),
              tt_alloc(nc),
              tt_alloc(nc),
              tt_alloc(N),
              tt_alloc(N),
              tt_alloc((size_t)N * F),
              tt_alloc((size_t)N * F)};
    nn_layernorm_forward(NULL, a.ln1, a.m1, a.r1, j->x, w[0], w[1], N, C);
    nn_linear_forward(NULL, a.qkv, a.ln1, w[2], w[3], N, C, 3 * C);
    nn_attention_shape as = nn_attention_shape_qkv(B, T, NH, HS);
    nn_attention_forward(NULL, a.atty, a.lse, a.qkv, a.qkv + C, a.qkv + 2 * C, &as, &DROP);
    nn_linear_forward(NULL, a.ao, a.atty, w[4], w[5], N, C, C);
    nn_residual_forward(a.res, j->x, a.ao, nc);
    nn_layernorm_forward(NULL, a.ln2, a.m2, a.r2, a.res, w[6], w[7], N, C);
    nn_linear_forward(NULL, a.fch, a.ln2, w[8], w[9], N, C, F);
    nn_gelu_forward(NULL, a.fchg, a.fch, (size_t)N * F);
    nn_linear_forward(NULL, j->y, a.fchg, w[10], w[11], N, F, C);
    nn_residual_forward(j->y, a.res, j->y, nc);
    /* backward */
    float *dres = tt_alloc(nc), *t1 = tt_alloc((size_t)N * F), *t2 = tt_alloc((size_t)N * F);
    float *t3 = tt_alloc(3 * nc), *dln = tt_alloc(nc);
    nn_linear_backward(NULL, t1, j->g[10], j->g[11], j->dy, a.fchg, w[10], N, F, C);
    nn_gelu_backward(NULL, t2, a.fch, t1, (size_t)N * F);
    nn_linear_backward(NULL, dln, j->g[8], j->g[9], t2, a.ln2, w[8], N, C, F);
    nn_layernorm_backward(NULL, dres, j->g[6], j->g[7], dln, a.res, w[6], a.m2, a.r2, N, C);
    nn_residual_forward(dres, dres, j->dy, nc);
    nn_linear_backward(NULL, t1, j->g[4], j->g[5], dres, a.atty, w[4], N, C, C);
    nn_attention_backward(NULL, t3, t3 + C, t3 + 2 * C, t1, a.qkv, a.qkv + C, a.qkv + 2 * C, a.atty,
                          a.lse, &as, &DROP);
    nn_linear_backward(NULL, dln, j->g[2], j->g[3], t3, a.ln1, w[2], N, C, 3 * C);
    nn_layernorm_backward(NULL, j->dx, j->g[0], j->g[1], dln, j->x, w[0], a.m1, a.r1, N, C);
    nn_residual_forward(j->dx, j->dx, dres, nc);
    for (int k = 0; k < NP; k++)
        free(w[k]);
    float **all = (float **)&a;
    for (size_t k = 0; k < sizeof a / sizeof(float *); k++)
        free(all[k]);
    free(dres), free(t1), free(t2), free(t3), free(dln);
}

/* ---- TP layer -------------------------------------------------------------------- */

/* rank r's shard of parameter k, drawn by global index; *n gets its size */
static float *shard(int k, int p, int r, size_t *n) {
    int C_p = C / p, F_p = F / p;
    float *s;
    switch (k) {
    case 2: /* c_attn weight rows {q_r, k_r, v_r} */
    case 3: {
        int cols = k == 2 ? C : 1;
        *n = (size_t)3 * C_p * cols;
        s = tt_alloc(*n);
        for (int i = 0; i < 3 * C_p; i++) {
            size_t g = (size_t)(i / C_p) * C + (size_t)r * C_p + i % C_p;
            fill_param(s + (size_t)i * cols, k, cols, g * cols);
        }
        return s;
    }
    case 8: /* c_fc rows */
    case 9: {
        int cols = k == 8 ? C : 1;
        *n = (size_t)F_p * cols;
        s = tt_alloc(*n);
        fill_param(s, k, *n, (size_t)r * F_p * cols);
        return s;
    }
    case 4: /* c_proj columns */
    case 10: {
        int IN = k == 4 ? C : F, IN_p = IN / p;
        *n = (size_t)C * IN_p;
        s = tt_alloc(*n);
        for (int o = 0; o < C; o++)
            fill_param(s + (size_t)o * IN_p, k, IN_p, (size_t)o * IN + (size_t)r * IN_p);
        return s;
    }
    default: /* replicated */
        *n = FULL[k];
        s = tt_alloc(*n);
        fill_param(s, k, *n, 0);
        return s;
    }
}

/* the serial gradient's rank-r shard, extracted the same way */
static void want_shard(float *dst, const float *full, int k, int p, int r) {
    int C_p = C / p, F_p = F / p;
    if (k == 2 || k == 3) {
        int cols = k == 2 ? C : 1;
        for (int i = 0; i < 3 * C_p; i++)
            memcpy(dst + (size_t)i * cols,
                   full + ((size_t)(i / C_p) * C + (size_t)r * C_p + i % C_p) * cols,
                   cols * sizeof(float));
    } else if (k == 8 || k == 9) {
        int cols = k == 8 ? C : 1;
        memcpy(dst, full + (size_t)r * F_p * cols, (size_t)F_p * cols * sizeof(float));
    } else if (k == 4 || k == 10) {
        tt_cols(dst, full, C, k == 4 ? C : F, p, r);
    } else
        memcpy(dst, full, FULL[k] * sizeof(float));
}

static mtc_result_t rank_main(mtc_comm_t comm, void *arg) {
    const job *j = arg;
    int p = tp_size(comm), r = tp_rank(comm), T_loc = j->sp ? T / p : T;
    int N = B * T, NL = B * T_loc, C_p = C / p, F_p = F / p;
    tp_ctx tp = {comm, NULL, j->sp, NULL, NULL};
    float *w[NP], *g[NP];
    size_t n[NP];
    for (int k = 0; k < NP; k++) {
        w[k] = shard(k, p, r, &n[k]);
        g[k] = tt_alloc(n[k]);
    }
    size_t nl = (size_t)NL * C;
    float *x = tt_alloc(nl), *y = tt_alloc(nl), *dy = tt_alloc(nl), *dx = tt_alloc(nl);
    float *ln1 = tt_alloc(nl), *m1 = tt_alloc(NL), *r1 = tt_alloc(NL), *res = tt_alloc(nl);
    float *ln2 = tt_alloc(nl), *m2 = tt_alloc(NL), *r2 = tt_alloc(NL), *ao = tt_alloc(nl);
    float *dres = tt_alloc(nl), *dln = tt_alloc(nl), *tmp = tt_alloc(nl);
    float *in_total = tt_alloc((size_t)N * C); /* shared by both blocks: re-gathered */
    model_attention_acts aa = {in_total, 0, tt_alloc((size_t)N * 3 * C_p),
                               tt_alloc((size_t)B * (NH / p) * T), tt_alloc((size_t)N * C_p)};
    model_mlp_acts ma = {in_total, 0, tt_alloc((size_t)N * F_p)};
    size_t s1 = model_attention_scratch_floats(&tp, B, T, &BD);
    size_t s2 = model_mlp_scratch_floats(&tp, B, T, &BD);
    float *scratch = tt_alloc(s1 > s2 ? s1 : s2);
    mtc_result_t rc;
    if (j->sp)
        tt_seq(x, j->x, B, T, C, p, r), tt_seq(dy, j->dy, B, T, C, p, r);
    else
        memcpy(x, j->x, nl * 4), memcpy(dy, j->dy, nl * 4);

    nn_layernorm_forward(NULL, ln1, m1, r1, x, w[0], w[1], NL, C);
    rc = model_attention_forward(&tp, ao, &aa, ln1, w[2], w[3], w[4], w[5], &DROP, scratch, B, T,
                                 &BD);
    nn_residual_forward(res, x, ao, nl);
    nn_layernorm_forward(NULL, ln2, m2, r2, res, w[6], w[7], NL, C);
    if (rc == MTC_OK)
        rc = model_mlp_forward(&tp, y, &ma, ln2, w[8], w[9], w[10], w[11], scratch, B, T, &BD);
    nn_residual_forward(y, res, y, nl);
    if (rc == MTC_OK)
        rc = model_mlp_backward(&tp, dln, g[8], g[9], g[10], g[11], dy, &ma, ln2, w[8], w[10],
                                scratch, B, T, &BD);
    nn_layernorm_backward(NULL, dres, g[6], g[7], dln, res, w[6], m2, r2, NL, C);
    nn_residual_forward(dres, dres, dy, nl);
    if (rc == MTC_OK)
        rc = model_attention_backward(&tp, dln, g[2], g[3], g[4], g[5], dres, &aa, ln1, w[2], w[4],
                                      &DROP, scratch, B, T, &BD);
    nn_layernorm_backward(NULL, dx, g[0], g[1], dln, x, w[0], m1, r1, NL, C);
    nn_residual_forward(dx, dx, dres, nl);
    T_CHECKF(rc == MTC_OK, "%s", mtc_error_detail());

    char what[64];
    float *want = tt_alloc((size_t)N * F * 3);
    if (j->sp)
        tt_seq(want, j->y, B, T, C, p, r);
    else
        memcpy(want, j->y, nl * 4);
    snprintf(what, sizeof what, "layer y tp=%d sp=%d", p, j->sp);
    tt_cmp(what, r, y, want, nl, p == 1);
    if (j->sp)
        tt_seq(want, j->dx, B, T, C, p, r);
    else
        memcpy(want, j->dx, nl * 4);
    snprintf(what, sizeof what, "layer dx tp=%d sp=%d", p, j->sp);
    tt_cmp(what, r, dx, want, nl, p == 1);
    for (int k = 0; k < NP; k++) {
        /* sequence-parallel parameters: partial over local tokens, finalised over TP */
        int sp_param = j->sp && (k == 0 || k == 1 || k == 6 || k == 7 || k == 5 || k == 11);
        if (sp_param)
            T_CHECK(mtc_all_reduce(g[k], g[k], n[k], MTC_DTYPE_F32, MTC_OP_SUM, comm) == MTC_OK);
        want_shard(want, j->g[k], k, p, r);
        snprintf(what, sizeof what, "layer grad %d tp=%d sp=%d", k, p, j->sp);
        tt_cmp(what, r, g[k], want, n[k], p == 1);
    }
    for (int k = 0; k < NP; k++)
        free(w[k]), free(g[k]);
    free(x), free(y), free(dy), free(dx), free(ln1), free(m1), free(r1), free(res), free(ln2);
    free(m2), free(r2), free(ao), free(dres), free(dln), free(tmp), free(in_total), free(aa.qkv);
    free(aa.lse), free(aa.atty), free(ma.fch), free(scratch), free(want);
    return MTC_OK;
}

int main(void) {
    for (int sp = 0; sp < 2; sp++) {
        job j;
        memset(&j, 0, sizeof j);
        j.sp = sp;
        serial(&j);
        for (int p = 1; p <= 4; p++) {
            mtc_result_t rc = tt_launch(p, rank_main, &j);
            T_CHECKF(rc == MTC_OK, "tp=%d sp=%d: %s", p, sp, mtc_error_detail());
        }
        free(j.x), free(j.y), free(j.dy), free(j.dx);
        for (int k = 0; k < NP; k++)
            free(j.g[k]);
    }
    return T_DONE();
}
