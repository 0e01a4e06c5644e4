/* tests/nn/test_nn_llama_fixture.c - the Llama kernels against PyTorch on
 * layer 0 of the tiny Llama in tests/reference/llama_tiny.fixture (written
 * by tests/reference/llama_reference.py, Hugging Face LlamaForCausalLM
 * conventions; this test needs no PyTorch):
 *  - the RoPE cos/sin tables against torch's float32 ones, head dims 8 and
 *    128, positions up to 65535;
 *  - RMSNorm (input_layernorm, post_attention_layernorm) forward, dinp and
 *    the weight gradient (= the parameter's whole gradient in the model);
 *  - RoPE on q (4 heads) and k (2 GQA groups), alone and in place inside a
 *    packed [q | k | v] row, forward and backward;
 *  - SwiGLU on [gate | up], forward and backward.
 * Everything to 1e-5 relative (see close_all for values near 0); the
 * whole-model comparison belongs to tests/model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/fixture.h"
#include "nn/llama.h"
#include "test.h"

#define FIXTURE "tests/reference/llama_tiny.fixture"

static fixture fx;

static const float *get(const char *name, size_t n) {
    const fixture_tensor *t = fixture_get(&fx, name);
    if (!t) {
        fprintf(stderr, "fixture lacks %s\n", name);
        exit(1);
    }
    if (n && t->n != n) {
        fprintf(stderr, "%s: %zu values, expected %zu\n", name, t->n, n);
        exit(1);
    }
    return t->data;
}

/* every |a - b| <= atol + rtol (|b| + 0.01 max|b|): relative, with a floor
 * at 1% of the tensor's largest value for elements that happen to be near
 * 0 (gradients of the mean loss are ~1e-3, so the floor scales with them) */
static void close_all(const char *what, const float *a, const float *b, size_t n, double atol,
                      double rtol) {
    size_t bad = 0, first = 0;
    double worst = 0, bmax = 0;
    for (size_t k = 0; k < n; k++)
        bmax = fmax(bmax, fabs((double)b[k]));
    for (size_t k = 0; k < n; k++) {
        double e = fabs((double)a[k] - b[k]),
               lim = atol + rtol * (fabs((double)b[k]) + 0.01 * bmax);
        if (e / lim > worst) worst = e / lim;
        if (!(e <= lim) && bad++ == 0) first = k;
    }
    T_CHECKF(bad == 0, "%s: %zu of %zu differ, first [%zu] %.8g vs torch %.8g", what, bad, n, first,
             bad ? a[first] : 0.0, bad ? b[first] : 0.0);
    printf("  %-34s worst %.3f of the tolerance\n", what, worst);
}

#define ATOL 0.0
#define RTOL 1e-5

static void test_tables(void) {
    const fixture_tensor *pt = fixture_get(&fx, "rope.pos");
    T_CHECK(pt != NULL);
    if (!pt) return;
    int P = (int)pt->n;
    const int HSs[2] = {8, 128};
    for (int k = 0; k < 2; k++) {
        int HS = HSs[k], h2 = HS / 2;
        nn_rope_table tab;
        T_CHECK(nn_rope_table_init(&tab, 65536, HS, 1.0f, 10000.0f, 0) == MTC_OK);
        char nc[32], ns[32];
        snprintf(nc, sizeof nc, "rope.hs%d.cos", HS);
        snprintf(ns, sizeof ns, "rope.hs%d.sin", HS);
        const float *tc = get(nc, (size_t)P * h2), *ts = get(ns, (size_t)P * h2);
        float *c = malloc((size_t)P * h2 * 4), *s = malloc((size_t)P * h2 * 4);
        for (int q = 0; q < P; q++) {
            int p = (int)pt->data[q];
            memcpy(c + (size_t)q * h2, tab.cos + (size_t)p * h2, (size_t)h2 * 4);
            memcpy(s + (size_t)q * h2, tab.sin + (size_t)p * h2, (size_t)h2 * 4);
        }
        /* the same float32 angle gives cos/sin within an ulp or two; one ulp
         * of a wrong angle at position 65535 would be off by ~4e-3 */
        snprintf(nc, sizeof nc, "rope table cos, head dim %d", HS);
        close_all(nc, c, tc, (size_t)P * h2, 2e-7, 0);
        snprintf(ns, sizeof ns, "rope table sin, head dim %d", HS);
        close_all(ns, s, ts, (size_t)P * h2, 2e-7, 0);
        free(c), free(s);
        nn_rope_table_free(&tab);
    }
}

int main(void) {
    if (fixture_load(&fx, FIXTURE) != 0) {
        fprintf(stderr, "cannot read %s (run from the repository root)\n", FIXTURE);
        return 1;
    }
    const float *cfg = get("config", 9);
    int C = (int)cfg[1], NH = (int)cfg[2], NG = (int)cfg[3], HS = (int)cfg[4], F = (int)cfg[5];
    int B = (int)cfg[7], T = (int)cfg[8], N = B * T;
    float eps = get("norm_eps", 1)[0], base = get("rope_base", 1)[0];
    T_CHECK(NH * HS == C && NH % NG == 0);
    nn_pool *pool = NULL;
    T_CHECK(nn_pool_create(2, &pool) == MTC_OK);

    test_tables();

    /* RMSNorm: the two norms of layer 0 */
    const char *norms[2][3] = {{"l0.x", "l0.attn_norm", "input_layernorm.weight"},
                               {"l0.mlp_in", "l0.mlp_norm", "post_attention_layernorm.weight"}};
    float *y = malloc((size_t)N * C * 4), *dx = malloc((size_t)N * C * 4), *dw = calloc(C, 4);
    float *rstd = malloc((size_t)N * 4);
    for (int k = 0; k < 2; k++) {
        char nw[96], ng[96], dyn[64], dxn[64], what[64];
        snprintf(nw, sizeof nw, "model.layers.0.%s", norms[k][2]);
        snprintf(ng, sizeof ng, "grad.model.layers.0.%s", norms[k][2]);
        snprintf(dyn, sizeof dyn, "%s.dy", norms[k][1]);
        snprintf(dxn, sizeof dxn, "%s.dx", norms[k][1]);
        const float *x = get(norms[k][0], (size_t)N * C), *w = get(nw, C);
        nn_rmsnorm_forward(pool, y, rstd, x, w, eps, N, C);
        snprintf(what, sizeof what, "rmsnorm %s", norms[k][1]);
        close_all(what, y, get(norms[k][1], (size_t)N * C), (size_t)N * C, ATOL, RTOL);
        memset(dw, 0, (size_t)C * 4);
        nn_rmsnorm_backward(pool, dx, dw, get(dyn, (size_t)N * C), x, w, rstd, N, C);
        snprintf(what, sizeof what, "rmsnorm %s dinp", norms[k][1]);
        close_all(what, dx, get(dxn, (size_t)N * C), (size_t)N * C, ATOL, RTOL);
        snprintf(what, sizeof what, "rmsnorm %s dw", norms[k][1]);
        close_all(what, dw, get(ng, C), C, ATOL, RTOL);
    }
    free(y), free(dx), free(dw), free(rstd);

    /* RoPE on q and k, positions 0..T-1 */
    nn_rope_table tab;
    T_CHECK(nn_rope_table_init(&tab, T, HS, 1.0f, base, 0) == MTC_OK);
    const char *parts[2] = {"q", "k"};
    const int heads[2] = {NH, NG};
    int QKV = (NH + 2 * NG) * HS;
    float *packed = malloc((size_t)N * QKV * 4), *dpacked = malloc((size_t)N * QKV * 4);
    for (int k = 0; k < 2; k++) {
        int H = heads[k], W = H * HS, off = k ? NH * HS : 0;
        char nx[32], nr[32], ndy[32], ndx[32], what[64];
        snprintf(nx, sizeof nx, "l0.%s", parts[k]);
        snprintf(nr, sizeof nr, "l0.%s_rot", parts[k]);
        snprintf(ndy, sizeof ndy, "l0.%s_rot.dy", parts[k]);
        snprintf(ndx, sizeof ndx, "l0.%s.dx", parts[k]);
        size_t n = (size_t)N * W;
        const float *x = get(nx, n), *dy = get(ndy, n);
        float *o = malloc(n * 4), *d = malloc(n * 4);
        nn_rope_forward(pool, o, x, &tab, NULL, 0, B, T, H, HS, W);
        snprintf(what, sizeof what, "rope %s", parts[k]);
        close_all(what, o, get(nr, n), n, ATOL, RTOL);
        nn_rope_backward(pool, d, dy, &tab, NULL, 0, B, T, H, HS, W);
        snprintf(what, sizeof what, "rope %s backward", parts[k]);
        close_all(what, d, get(ndx, n), n, ATOL, RTOL);
        for (int r = 0; r < N; r++) { /* into the packed rows, v left as zeros */
            memcpy(packed + (size_t)r * QKV + off, x + (size_t)r * W, (size_t)W * 4);
            memcpy(dpacked + (size_t)r * QKV + off, dy + (size_t)r * W, (size_t)W * 4);
        }
        free(o), free(d);
    }
    /* in place inside packed [q | k | v] rows: one call per part */
    for (int r = 0; r < N; r++) {
        memset(packed + (size_t)r * QKV + (NH + NG) * HS, 0, (size_t)NG * HS * 4);
        memset(dpacked + (size_t)r * QKV + (NH + NG) * HS, 0, (size_t)NG * HS * 4);
    }
    nn_rope_forward(pool, packed, packed, &tab, NULL, 0, B, T, NH, HS, QKV);
    nn_rope_forward(pool, packed + NH * HS, packed + NH * HS, &tab, NULL, 0, B, T, NG, HS, QKV);
    nn_rope_backward(pool, dpacked, dpacked, &tab, NULL, 0, B, T, NH, HS, QKV);
    nn_rope_backward(pool, dpacked + NH * HS, dpacked + NH * HS, &tab, NULL, 0, B, T, NG, HS, QKV);
    int vzero = 1;
    for (int k = 0; k < 2; k++) {
        int W = heads[k] * HS, off = k ? NH * HS : 0;
        char nr[32], ndx[32], what[64];
        snprintf(nr, sizeof nr, "l0.%s_rot", parts[k]);
        snprintf(ndx, sizeof ndx, "l0.%s.dx", parts[k]);
        const float *ref = get(nr, (size_t)N * W), *dref = get(ndx, (size_t)N * W);
        float *o = malloc((size_t)N * W * 4), *d = malloc((size_t)N * W * 4);
        for (int r = 0; r < N; r++) {
            memcpy(o + (size_t)r * W, packed + (size_t)r * QKV + off, (size_t)W * 4);
            memcpy(d + (size_t)r * W, dpacked + (size_t)r * QKV + off, (size_t)W * 4);
        }
        snprintf(what, sizeof what, "rope %s in packed qkv", parts[k]);
        close_all(what, o, ref, (size_t)N * W, ATOL, RTOL);
        snprintf(what, sizeof what, "rope %s backward in packed qkv", parts[k]);
        close_all(what, d, dref, (size_t)N * W, ATOL, RTOL);
        free(o), free(d);
    }
    for (int r = 0; r < N; r++)
        for (int c = (NH + NG) * HS; c < QKV; c++)
            vzero &= packed[(size_t)r * QKV + c] == 0.0f && dpacked[(size_t)r * QKV + c] == 0.0f;
    T_CHECKF(vzero, "rope wrote into the v part of packed rows");
    free(packed), free(dpacked);
    nn_rope_table_free(&tab);

    /* SwiGLU on layer 0's [gate | up] */
    {
        size_t ni = (size_t)N * 2 * F, no = (size_t)N * F;
        float *o = malloc(no * 4), *d = malloc(ni * 4);
        const float *gu = get("l0.gate_up", ni);
        nn_swiglu_forward(pool, o, gu, N, F);
        close_all("swiglu", o, get("l0.mlp_act", no), no, ATOL, RTOL);
        nn_swiglu_backward(pool, d, get("l0.mlp_act.dy", no), gu, N, F);
        close_all("swiglu backward", d, get("l0.gate_up.dx", ni), ni, ATOL, RTOL);
        free(o), free(d);
    }
    nn_pool_free(pool);
    fixture_free(&fx);
    return T_DONE();
}
