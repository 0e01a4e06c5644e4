/* tests/nn/test_nn_grad.c - every nn kernel's forward against a double
 * reference (nn_ref.h), and its backward against central finite
 * differences of that reference: L = sum(out * g) for a fixed random g, so
 * dL/dx is what backward returns for dout = g. Also the += / = / NULL
 * conventions of the backward functions. Attention has its own test,
 * test_nn_attention.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_ref.h"
#include "test.h"

/* one scalar loss of a double reference as a function of one input array */
#include "nn_fd.h"

/* ---- layernorm --------------------------------------------------------------- */
typedef struct {
    double *x, *w, *b, *out;
    const float *g;
    int N, C;
} ln_ctx;
static double ln_loss(void *vp) {
    ln_ctx *c = vp;
    ref_layernorm(c->out, c->x, c->w, c->b, c->N, c->C);
    return dot(c->out, c->g, (size_t)c->N * c->C);
}

static void test_layernorm(void) {
    int N = 5, C = 24;
    size_t nx = (size_t)N * C;
    float *x = malloc(nx * 4), *out = malloc(nx * 4), *g = malloc(nx * 4), *dx = malloc(nx * 4);
    float w[24], b[24], dw[24], db[24], mean[5], rstd[5];
    ref_fill(x, nx, 1, 2.0f);
    for (size_t k = 0; k < nx; k++)
        x[k] += 0.5f; /* nonzero mean */
    ref_fill(w, 24, 2, 1.0f);
    ref_fill(b, 24, 3, 1.0f);
    ref_fill(g, nx, 4, 1.0f);
    nn_layernorm_forward(NULL, out, mean, rstd, x, w, b, N, C);
    ln_ctx c = {ref_d(x, nx), ref_d(w, 24), ref_d(b, 24), malloc(nx * 8), g, N, C};
    ln_loss(&c);
    T_CHECKF(max_rel(out, c.out, nx) < 1e-4, "layernorm forward %.3g", max_rel(out, c.out, nx));
    for (int k = 0; k < C; k++)
        dw[k] = 0.25f, db[k] = -0.5f; /* += check */
    memset(dx, 0x7f, nx * 4);         /* = check */
    nn_layernorm_backward(NULL, dx, dw, db, g, x, w, mean, rstd, N, C);
    for (int k = 0; k < C; k++)
        dw[k] -= 0.25f, db[k] += 0.5f;
    check_fd("layernorm dx", ln_loss, &c, c.x, dx, nx, 1, 2e-3);
    check_fd("layernorm dw", ln_loss, &c, c.w, dw, 24, 1, 2e-3);
    check_fd("layernorm db", ln_loss, &c, c.b, db, 24, 1, 2e-3);
    /* NULL gradients are skipped */
    float dw2[24] = {0};
    nn_layernorm_backward(NULL, NULL, dw2, NULL, g, x, w, mean, rstd, N, C);
    for (int k = 0; k < C; k++)
        T_CLOSE(dw2[k], dw[k], 1e-5, 1e-5);
    free(x), free(out), free(g), free(dx), free(c.x), free(c.w), free(c.b), free(c.out);
}

/* ---- linear ----------------------------------------------------------------- */
typedef struct {
    double *x, *w, *b, *out;
    const float *g;
    int N, IN, OUT;
} lin_ctx;
static double lin_loss(void *vp) {
    lin_ctx *c = vp;
    ref_linear(c->out, c->x, c->w, c->b, c->N, c->IN, c->OUT);
    return dot(c->out, c->g, (size_t)c->N * c->OUT);
}

static void test_linear(nn_pool *pool) {
    int N = 7, IN = 13, OUT = 10;
    size_t nx = (size_t)N * IN, nw = (size_t)OUT * IN, no = (size_t)N * OUT;
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc(OUT * 4), *out = malloc(no * 4);
    float *g = malloc(no * 4), *dx = malloc(nx * 4), *dw = malloc(nw * 4), *db = malloc(OUT * 4);
    ref_fill(x, nx, 11, 1.0f);
    ref_fill(w, nw, 12, 0.5f);
    ref_fill(b, OUT, 13, 1.0f);
    ref_fill(g, no, 14, 1.0f);
    nn_linear_forward(pool, out, x, w, b, N, IN, OUT);
    lin_ctx c = {ref_d(x, nx), ref_d(w, nw), ref_d(b, OUT), malloc(no * 8), g, N, IN, OUT};
    lin_loss(&c);
    T_CHECKF(max_rel(out, c.out, no) < 1e-5, "linear forward %.3g", max_rel(out, c.out, no));
    for (size_t k = 0; k < nw; k++)
        dw[k] = 1.0f;
    for (int k = 0; k < OUT; k++)
        db[k] = 2.0f;
    memset(dx, 0x7f, nx * 4);
    nn_linear_backward(pool, dx, dw, db, g, x, w, N, IN, OUT);
    for (size_t k = 0; k < nw; k++)
        dw[k] -= 1.0f;
    for (int k = 0; k < OUT; k++)
        db[k] -= 2.0f;
    check_fd("linear dx", lin_loss, &c, c.x, dx, nx, 1, 1e-3);
    check_fd("linear dw", lin_loss, &c, c.w, dw, nw, 1, 1e-3);
    check_fd("linear db", lin_loss, &c, c.b, db, OUT, 1, 1e-3);
    /* no bias */
    nn_linear_forward(pool, out, x, w, NULL, N, IN, OUT);
    ref_linear(c.out, c.x, c.w, NULL, N, IN, OUT);
    T_CHECK(max_rel(out, c.out, no) < 1e-5);
    /* NULL dinp/dw skip: db alone still accumulates */
    float *db2 = calloc(OUT, 4);
    nn_linear_backward(pool, NULL, NULL, db2, g, x, w, N, IN, OUT);
    for (int k = 0; k < OUT; k++)
        T_CLOSE(db2[k], db[k], 1e-5, 1e-5);
    free(db2);
    free(x), free(w), free(b), free(out), free(g), free(dx), free(dw), free(db);
    free(c.x), free(c.w), free(c.b), free(c.out);
}

/* ---- gelu ---------------------------------------------------------------------- */
typedef struct {
    double *x;
    const float *g;
    size_t n;
} gelu_ctx;
static double gelu_loss(void *vp) {
    gelu_ctx *c = vp;
    double s = 0;
    for (size_t k = 0; k < c->n; k++)
        s += ref_gelu1(c->x[k]) * c->g[k];
    return s;
}

static void test_gelu(nn_pool *pool) {
    size_t n = 301;
    float *x = malloc(n * 4), *out = malloc(n * 4), *g = malloc(n * 4), *dx = malloc(n * 4);
    ref_fill(x, n, 21, 3.0f);
    x[0] = 0.0f, x[1] = 12.0f, x[2] = -12.0f; /* saturation */
    ref_fill(g, n, 22, 1.0f);
    nn_gelu_forward(pool, out, x, n);
    gelu_ctx c = {ref_d(x, n), g, n};
    double worst = 0;
    for (size_t k = 0; k < n; k++) {
        double e = fabs(out[k] - ref_gelu1(c.x[k]));
        if (e > worst) worst = e;
    }
    T_CHECKF(worst < 2e-6 * 12, "gelu forward abs err %.3g", worst);
    nn_gelu_backward(pool, dx, x, g, n);
    check_fd("gelu dx", gelu_loss, &c, c.x, dx, n, 1, 1e-3);
    free(x), free(out), free(g), free(dx), free(c.x);
}

/* ---- softmax + cross-entropy -------------------------------------------------------- */
typedef struct {
    double *x;
    const int *tg;
    int N, V, Vp;
    double scale;
} xent_ctx;
static double xent_loss(void *vp) {
    xent_ctx *c = vp;
    double L = 0;
    for (int n = 0; n < c->N; n++) {
        const double *r = c->x + (size_t)n * c->Vp;
        double mx = -INFINITY, s = 0;
        for (int v = 0; v < c->V; v++)
            mx = fmax(mx, r[v]);
        for (int v = 0; v < c->V; v++)
            s += exp(r[v] - mx);
        L += c->scale * (log(s) + mx - r[c->tg[n]]);
    }
    return L;
}

static void test_xent(nn_pool *pool) {
    int N = 6, V = 11, Vp = 16;
    size_t nl = (size_t)N * Vp;
    float *x = malloc(nl * 4), losses[6];
    int tg[6] = {0, 10, 3, 3, 7, 1};
    ref_fill(x, nl, 41, 3.0f);
    x[2] = 80.0f; /* large logit: must not overflow */
    for (int n = 0; n < N; n++)
        for (int v = V; v < Vp; v++)
            x[(size_t)n * Vp + v] = (v & 1) ? 1e30f : NAN; /* padding */
    xent_ctx c = {ref_d(x, nl), tg, N, V, Vp, 1.0};
    nn_softmax_xent_forward(pool, losses, x, tg, N, V, Vp);
    int pad_ok = 1;
    for (int n = 0; n < N; n++) {
        xent_ctx one = {c.x + (size_t)n * Vp, tg + n, 1, V, Vp, 1.0};
        T_CLOSE(losses[n], xent_loss(&one), 1e-5, 1e-5);
        double ps = 0;
        for (int v = 0; v < Vp; v++) {
            if (v < V)
                ps += x[(size_t)n * Vp + v];
            else
                pad_ok &= x[(size_t)n * Vp + v] == 0.0f;
        }
        T_CLOSE(ps, 1.0, 1e-5, 0);
    }
    T_CHECK(pad_ok);
    float scale = 1.0f / 24;
    c.scale = scale;
    nn_softmax_xent_backward(pool, x, tg, scale, N, V, Vp);
    pad_ok = 1;
    for (int n = 0; n < N; n++)
        for (int v = V; v < Vp; v++)
            pad_ok &= x[(size_t)n * Vp + v] == 0.0f;
    T_CHECK(pad_ok);
    /* FD over the real columns only (padding is not an input) */
    for (int n = 0; n < N; n++)
        for (int v = V; v < Vp; v++)
            c.x[(size_t)n * Vp + v] = 0;
    for (int n = 0; n < N; n++) {
        xent_ctx one = {c.x + (size_t)n * Vp, tg + n, 1, V, Vp, scale};
        check_fd("xent dlogits", xent_loss, &one, one.x, x + (size_t)n * Vp, (size_t)V, 1, 1e-3);
    }
    free(x), free(c.x);
}

/* ---- embeddings (linear maps: closed forms) ------------------------------------------ */
static void test_embeddings(void) {
    int V = 10, C = 4, B = 2, T = 3, N = B * T, vs = 4, VL = 3; /* shard holds tokens 4..6 */
    float wte[12], out[24], dout[24], dwte[12], wpe[5 * 4], dwpe[20];
    int tok[6] = {4, 9, 6, 5, 0, 4}, pos[3] = {2, 3, 4};
    (void)V;
    for (int k = 0; k < 12; k++)
        wte[k] = (float)(k + 1);
    for (int k = 0; k < 20; k++)
        wpe[k] = 100.0f * (k + 1);
    for (int k = 0; k < 24; k++)
        dout[k] = (float)k;
    nn_token_embedding_forward(out, tok, wte, vs, VL, N, C);
    int ok = 1;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            int t = tok[n] - vs;
            float e = (t >= 0 && t < VL) ? (float)(t * C + c + 1) : 0.0f;
            ok &= out[n * C + c] == e;
        }
    T_CHECK(ok);
    for (int k = 0; k < 12; k++)
        dwte[k] = 1.0f;
    nn_token_embedding_backward(dwte, dout, tok, vs, VL, N, C);
    /* row 0 (token 4) gets n=0 and n=5; row 1 (token 5) n=3; row 2 (token 6) n=2 */
    for (int c = 0; c < C; c++) {
        T_CLOSE(dwte[0 * C + c], 1 + dout[0 * C + c] + dout[5 * C + c], 0, 0);
        T_CLOSE(dwte[1 * C + c], 1 + dout[3 * C + c], 0, 0);
        T_CLOSE(dwte[2 * C + c], 1 + dout[2 * C + c], 0, 0);
    }
    nn_position_embedding_forward(out, wpe, pos, B, T, C);
    ok = 1;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                int n = b * T + t, tk = tok[n] - vs;
                float e = (tk >= 0 && tk < VL) ? (float)(tk * C + c + 1) : 0.0f;
                ok &= out[n * C + c] == e + 100.0f * (pos[t] * C + c + 1);
            }
    T_CHECK(ok);
    memset(dwpe, 0, sizeof dwpe);
    nn_position_embedding_backward(dwpe, dout, pos, B, T, C);
    ok = 1;
    for (int p = 0; p < 5; p++)
        for (int c = 0; c < C; c++) {
            float e = p >= 2 ? dout[(p - 2) * C + c] + dout[(T + p - 2) * C + c] : 0.0f;
            ok &= dwpe[p * C + c] == e;
        }
    T_CHECK(ok);
    /* NULL pos = 0..T-1 */
    memset(out, 0, sizeof out);
    nn_position_embedding_forward(out, wpe, NULL, B, T, C);
    T_CHECK(out[(T + 1) * C + 2] == wpe[1 * C + 2]);
}

/* ---- optimizer pieces --------------------------------------------------------------- */
static void test_optim(void) {
    enum { n = 37 };
    float p[n], g[n], m[n], v[n];
    double pd[n], md[n], vd[n];
    ref_fill(p, n, 51, 1.0f);
    memset(m, 0, sizeof m), memset(v, 0, sizeof v);
    for (int k = 0; k < n; k++)
        pd[k] = p[k], md[k] = 0, vd[k] = 0;
    double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
    for (int t = 1; t <= 3; t++) {
        ref_fill(g, n, 52 + t, 1.0f);
        nn_adamw_update(p, g, m, v, n, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, t);
        for (int k = 0; k < n; k++) { /* PyTorch AdamW, closed form in double */
            pd[k] *= 1 - lr * wd;
            md[k] = b1 * md[k] + (1 - b1) * g[k];
            vd[k] = b2 * vd[k] + (1 - b2) * (double)g[k] * g[k];
            double mh = md[k] / (1 - pow(b1, t)), vh = vd[k] / (1 - pow(b2, t));
            pd[k] -= lr * mh / (sqrt(vh) + eps);
        }
    }
    double worst = 0;
    for (int k = 0; k < n; k++)
        worst = fmax(worst, fabs(p[k] - pd[k]));
    T_CHECKF(worst < 1e-6, "adamw 3 steps: abs err %.3g", worst);
    /* first step moves every weight by about lr (sign of the gradient) */
    float q = 0.5f, gq = -3.0f, mq = 0, vq = 0;
    nn_adamw_update(&q, &gq, &mq, &vq, 1, 0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, 1);
    T_CLOSE(q, 0.51, 1e-6, 0);

    size_t ns = 100003;
    float *x = malloc(ns * 4);
    ref_fill(x, ns, 61, 1.0f);
    double s1 = nn_sumsq(x, ns), s2 = nn_sumsq(x, ns), e = 0;
    for (size_t k = 0; k < ns; k++)
        e += (double)x[k] * x[k];
    T_CHECK(s1 == s2);
    T_CLOSE(s1, e, 0, 1e-12);
    nn_scale(x, 0.5f, ns);
    T_CLOSE(nn_sumsq(x, ns), e / 4, 0, 1e-12);
    free(x);
}

int main(void) {
    nn_pool *pool = NULL;
    T_CHECK(nn_pool_create(2, &pool) == MTC_OK);
    test_layernorm();
    test_linear(NULL);
    test_linear(pool);
    test_gelu(pool);
    test_xent(pool);
    test_embeddings();
    test_optim();
    nn_pool_free(pool);
    return T_DONE();
}
