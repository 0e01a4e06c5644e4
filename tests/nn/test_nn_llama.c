/* tests/nn/test_nn_llama.c - the Llama kernels (nn/llama.h) against double
 * references written from the formulas, their backward against central
 * finite differences of those references (L = sum(out * g) for a fixed
 * random g), and the properties the parallel layers rely on:
 *  - RMSNorm: eps is used, = / += / NULL and in-place conventions;
 *  - RoPE: halves and pairs layouts, rotary_percent 0.5 (pass-through
 *    channels), heads inside wider rows (nothing outside them touched), a
 *    sequence shard with offset or explicit global positions rotates
 *    exactly as the serial run, in place = out of place, bad table
 *    arguments refused;
 *  - SwiGLU: large |gate|, rows longer than the kernel's chunk, a tensor-
 *    parallel shard [gate_r | up_r] gives the serial run's bits;
 *  - all three give identical bits with 1, 2 and 3 threads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/llama.h"
#include "nn_ref.h"
#include "test.h"

#include "nn_fd.h"

/* worst |a - b| / (atol + rtol |b|): <= 1 passes */
static double worst_err(const float *a, const double *b, size_t n, double atol, double rtol) {
    double worst = 0;
    for (size_t k = 0; k < n; k++) {
        double e = fabs(a[k] - b[k]) / (atol + rtol * fabs(b[k]));
        if (e > worst) worst = e;
    }
    return worst;
}

static int same(const float *a, const float *b, size_t n) { return memcmp(a, b, n * 4) == 0; }

/* ---- RMSNorm ------------------------------------------------------------------- */

typedef struct {
    double *x, *w, *out, eps;
    const float *g;
    int N, C;
} rms_ctx;

static void ref_rmsnorm(double *out, const double *x, const double *w, double eps, int N, int C) {
    for (int n = 0; n < N; n++) {
        const double *r = x + (size_t)n * C;
        double ss = 0;
        for (int c = 0; c < C; c++)
            ss += r[c] * r[c];
        double rs = 1.0 / sqrt(ss / C + eps);
        for (int c = 0; c < C; c++)
            out[(size_t)n * C + c] = r[c] * rs * w[c];
    }
}

static double rms_loss(void *vp) {
    rms_ctx *c = vp;
    ref_rmsnorm(c->out, c->x, c->w, c->eps, c->N, c->C);
    return dot(c->out, c->g, (size_t)c->N * c->C);
}

static void test_rmsnorm(nn_pool *pool) {
    enum { N = 5, C = 28 }; /* C: three 8-lane blocks and a tail of 4 */
    const size_t nx = (size_t)N * C;
    float x[N * C], out[N * C], g[N * C], dx[N * C], w[C], dw[C], rstd[N];
    ref_fill(x, nx, 1, 1.5f);
    for (int c = 0; c < C; c++)
        x[c] *= 0.01f; /* row 0 small: eps matters there */
    ref_fill(w, C, 2, 1.0f);
    ref_fill(g, nx, 3, 1.0f);
    const float epss[2] = {1e-5f, 1e-2f};
    for (int e = 0; e < 2; e++) {
        float eps = epss[e];
        nn_rmsnorm_forward(pool, out, rstd, x, w, eps, N, C);
        rms_ctx c = {ref_d(x, nx), ref_d(w, C), malloc(nx * 8), eps, g, N, C};
        rms_loss(&c);
        T_CHECKF(max_rel(out, c.out, nx) < 1e-5, "rmsnorm forward eps %g: %.3g", eps,
                 max_rel(out, c.out, nx));
        for (int k = 0; k < C; k++)
            dw[k] = 0.25f;           /* += check */
        memset(dx, 0x7f, sizeof dx); /* = check */
        nn_rmsnorm_backward(pool, dx, dw, g, x, w, rstd, N, C);
        for (int k = 0; k < C; k++)
            dw[k] -= 0.25f;
        check_fd("rmsnorm dx", rms_loss, &c, c.x, dx, nx, 1, 2e-3);
        check_fd("rmsnorm dw", rms_loss, &c, c.w, dw, C, 1, 2e-3);
        /* NULL gradients skipped; dinp aliasing dout; out aliasing inp */
        float dw0[C], dw2[C], buf[N * C];
        memset(dw0, 0, sizeof dw0);
        nn_rmsnorm_backward(pool, NULL, dw0, g, x, w, rstd, N, C);
        for (int k = 0; k < C; k++)
            T_CLOSE(dw0[k], dw[k], 1e-6, 1e-6);
        memcpy(buf, g, sizeof buf);
        memset(dw2, 0, sizeof dw2);
        nn_rmsnorm_backward(pool, buf, dw2, buf, x, w, rstd, N, C);
        T_CHECK(same(buf, dx, nx) && same(dw2, dw0, C));
        memcpy(buf, x, sizeof buf);
        nn_rmsnorm_forward(pool, buf, NULL, buf, w, eps, N, C);
        T_CHECK(same(buf, out, nx));
        free(c.x), free(c.w), free(c.out);
    }
}

/* ---- RoPE ------------------------------------------------------------------------ */

/* The rotation from its definition, in double: rot channels of each head,
 * frequencies base^(-2i/rot), pairs (i, i + rot/2) or (2i, 2i + 1). */
static void ref_rope(double *out, const double *x, const int *pos, int t0, int B, int T, int NH,
                     int HS, int stride, int rot, int interleaved, double base) {
    int h2 = rot / 2;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                size_t off = ((size_t)b * T + t) * stride + (size_t)h * HS;
                const double *xi = x + off;
                double *o = out + off;
                double p = pos ? pos[t] : t0 + t;
                for (int e = rot; e < HS; e++)
                    o[e] = xi[e];
                for (int i = 0; i < h2; i++) {
                    double a = p * pow(base, -2.0 * i / rot), c = cos(a), s = sin(a);
                    int i1 = interleaved ? 2 * i : i, i2 = interleaved ? 2 * i + 1 : i + h2;
                    o[i1] = xi[i1] * c - xi[i2] * s;
                    o[i2] = xi[i2] * c + xi[i1] * s;
                }
            }
}

typedef struct {
    double *x, *out;
    const float *g;
    int B, T, NH, HS, stride, rot, inter, t0, pre;
    size_t n;
} rope_ctx;

static double rope_loss(void *vp) {
    rope_ctx *c = vp;
    memcpy(c->out, c->x, c->n * sizeof(double)); /* channels outside the heads pass */
    ref_rope(c->out + c->pre, c->x + c->pre, NULL, c->t0, c->B, c->T, c->NH, c->HS, c->stride,
             c->rot, c->inter, 10000.0);
    return dot(c->out, c->g, c->n);
}

/* rows of `stride` floats holding 7 other floats, the NH heads, then others */
static void test_rope_case(nn_pool *pool, int interleaved, float percent) {
    enum { B = 2, T = 5, NH = 3, HS = 20, PRE = 7, STRIDE = PRE + NH * HS + 5 };
    const size_t n = (size_t)B * T * STRIDE;
    const int t0 = 3;
    char what[64];
    snprintf(what, sizeof what, "rope %s %.1f", interleaved ? "pairs" : "halves", percent);
    nn_rope_table tab;
    T_CHECK(nn_rope_table_init(&tab, 64, HS, percent, 10000.0f, interleaved) == MTC_OK);
    T_CHECKF(tab.rot == (int)(HS * percent), "%s: rot %d", what, tab.rot);
    float *x = malloc(n * 4), *out = malloc(n * 4), *g = malloc(n * 4), *dx = malloc(n * 4);
    float *buf = malloc(n * 4);
    ref_fill(x, n, 21, 1.0f);
    ref_fill(g, n, 22, 1.0f);
    memcpy(out, x, n * 4); /* the floats outside the heads must stay */
    nn_rope_forward(pool, out + PRE, x + PRE, &tab, NULL, t0, B, T, NH, HS, STRIDE);
    rope_ctx c = {ref_d(x, n), malloc(n * 8), g,           B,  T,   NH, HS,
                  STRIDE,      tab.rot,       interleaved, t0, PRE, n};
    rope_loss(&c);
    /* float32 rounding of x c - x' s, whose terms may cancel: absolute 1e-6 */
    T_CHECKF(worst_err(out, c.out, n, 1e-6, 1e-5) <= 1, "%s forward %.3g", what,
             worst_err(out, c.out, n, 1e-6, 1e-5));
    int outside = 1;
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int k = 0; k < STRIDE; k++)
            if (k < PRE || k >= PRE + NH * HS) outside &= out[r * STRIDE + k] == x[r * STRIDE + k];
    T_CHECKF(outside, "%s: a float outside the heads changed", what);
    /* backward: the gradient of every coordinate (outside ones pass through) */
    memcpy(dx, g, n * 4);
    nn_rope_backward(pool, dx + PRE, g + PRE, &tab, NULL, t0, B, T, NH, HS, STRIDE);
    check_fd(what, rope_loss, &c, c.x, dx, n, 1, 1e-4);
    /* in place = out of place, forward and backward; backward undoes forward */
    memcpy(buf, x, n * 4);
    nn_rope_forward(pool, buf + PRE, buf + PRE, &tab, NULL, t0, B, T, NH, HS, STRIDE);
    T_CHECKF(same(buf, out, n), "%s: in place differs", what);
    nn_rope_backward(pool, buf + PRE, buf + PRE, &tab, NULL, t0, B, T, NH, HS, STRIDE);
    double back = 0;
    for (size_t k = 0; k < n; k++)
        back = fmax(back, fabs(buf[k] - x[k]));
    T_CHECKF(back < 1e-6, "%s: backward(forward(x)) off by %.3g", what, back);
    /* shards: positions t0.. as an offset, as an array, and a context-
     * parallel style pair of chunks {0, 1} + {6, 7} of a length-8 sequence */
    enum { TS = 8 };
    const size_t ns = (size_t)B * TS * STRIDE;
    float *full = malloc(ns * 4), *part = malloc(ns * 4), *xs = malloc(ns * 4);
    ref_fill(xs, ns, 23, 1.0f);
    memcpy(full, xs, ns * 4);
    nn_rope_forward(pool, full, full, &tab, NULL, 0, B, TS, NH, HS, STRIDE);
    int pos[4] = {0, 1, 6, 7}, ok = 1;
    float *loc = malloc((size_t)B * 4 * STRIDE * 4);
    for (int b = 0; b < B; b++) /* gather the four rows of each sequence */
        for (int q = 0; q < 4; q++)
            memcpy(loc + ((size_t)b * 4 + q) * STRIDE, xs + ((size_t)b * TS + pos[q]) * STRIDE,
                   STRIDE * 4);
    nn_rope_forward(pool, loc, loc, &tab, pos, 0, B, 4, NH, HS, STRIDE);
    for (int b = 0; b < B; b++)
        for (int q = 0; q < 4; q++)
            ok &= same(loc + ((size_t)b * 4 + q) * STRIDE,
                       full + ((size_t)b * TS + pos[q]) * STRIDE, STRIDE);
    T_CHECKF(ok, "%s: explicit global positions differ from the serial run", what);
    /* the second half of the sequence as a shard with t0 = 4: one batch row at a time */
    ok = 1;
    for (int b = 0; b < B; b++) {
        memcpy(part, xs + ((size_t)b * TS + 4) * STRIDE, 4 * STRIDE * 4);
        nn_rope_forward(pool, part, part, &tab, NULL, 4, 1, 4, NH, HS, STRIDE);
        ok &= same(part, full + ((size_t)b * TS + 4) * STRIDE, 4 * STRIDE);
    }
    T_CHECKF(ok, "%s: a shard with position offset differs from the serial run", what);
    free(full), free(part), free(xs), free(loc);
    free(x), free(out), free(g), free(dx), free(buf), free(c.x), free(c.out);
    nn_rope_table_free(&tab);
}

static void test_rope_table(void) {
    nn_rope_table tab;
    T_CHECK(nn_rope_table_init(&tab, 8, 8, 0.0f, 1e4f, 0) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(tab.cos == NULL);
    T_CHECK(nn_rope_table_init(&tab, 8, 8, 1.5f, 1e4f, 0) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(nn_rope_table_init(&tab, 8, 6, 0.5f, 1e4f, 0) == MTC_ERR_INVALID_ARGUMENT); /* rot 3 */
    T_CHECK(nn_rope_table_init(&tab, 8, 8, 1.0f, 1.0f, 0) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(nn_rope_table_init(&tab, 0, 8, 1.0f, 1e4f, 0) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(nn_rope_table_init(&tab, 8, 1, 1.0f, 1e4f, 0) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(strstr(mtc_error_detail(), "head size 1") != NULL);
    nn_rope_table_free(&tab); /* zeroed: no-op */
    nn_rope_table_free(NULL);
    /* position 0 is the identity; position p of frequency 0 is angle p */
    T_CHECK(nn_rope_table_init(&tab, 100, 16, 1.0f, 500000.0f, 0) == MTC_OK);
    T_CHECK(tab.rot == 16 && tab.cos[0] == 1.0f && tab.sin[7] == 0.0f);
    T_CLOSE(tab.cos[99 * 8], cos(99.0), 1e-7, 0);
    T_CLOSE(tab.sin[99 * 8 + 7], sin(99.0 * pow(500000.0, -14.0 / 16)), 1e-7, 1e-6);
    nn_rope_table_free(&tab);
    T_CHECK(tab.cos == NULL);
}

/* ---- SwiGLU ------------------------------------------------------------------------ */

static double ref_silu(double g) { return g / (1.0 + exp(-g)); }

typedef struct {
    double *x, *out;
    const float *g;
    int N, F;
} sw_ctx;

static double sw_loss(void *vp) {
    sw_ctx *c = vp;
    for (int n = 0; n < c->N; n++)
        for (int f = 0; f < c->F; f++) {
            const double *r = c->x + (size_t)n * 2 * c->F;
            c->out[(size_t)n * c->F + f] = ref_silu(r[f]) * r[c->F + f];
        }
    return dot(c->out, c->g, (size_t)c->N * c->F);
}

static void test_swiglu(nn_pool *pool) {
    const int Fs[2] = {37, 300}; /* a tail of 5; more than one 256-float chunk */
    for (int fi = 0; fi < 2; fi++) {
        int N = 6, F = Fs[fi];
        size_t ni = (size_t)N * 2 * F, no = (size_t)N * F;
        float *x = malloc(ni * 4), *out = malloc(no * 4), *g = malloc(no * 4);
        float *dx = malloc(ni * 4);
        ref_fill(x, ni, 31, 2.0f);
        x[0] = 30.0f, x[1] = -30.0f, x[2] = 95.0f, x[3] = -95.0f; /* exp's clamp region */
        ref_fill(g, no, 32, 1.0f);
        nn_swiglu_forward(pool, out, x, N, F);
        sw_ctx c = {ref_d(x, ni), malloc(no * 8), g, N, F};
        sw_loss(&c);
        T_CHECKF(max_rel(out, c.out, no) < 1e-5, "swiglu forward F=%d %.3g", F,
                 max_rel(out, c.out, no));
        memset(dx, 0x7f, ni * 4);
        nn_swiglu_backward(pool, dx, g, x, N, F);
        if (F < 100)
            check_fd("swiglu dinp", sw_loss, &c, c.x, dx, ni, 1, 2e-3);
        else { /* sampled: the silu derivative at the clamp values is checked above */
            check_fd("swiglu dinp (first rows)", sw_loss, &c, c.x, dx, 2 * (size_t)F, 1, 2e-3);
        }
        free(x), free(out), free(g), free(dx), free(c.x), free(c.out);
    }
    /* a tensor-parallel shard [gate_r | up_r] of columns [lo, hi) computes the
     * serial run's bits (shard widths 13 and 27: vector blocks and tails fall
     * on different columns than in the full row) */
    int N = 4, F = 40, cut = 13;
    float x[4 * 80], out[4 * 40], loc[4 * 54], lout[4 * 27];
    ref_fill(x, sizeof x / 4, 33, 3.0f);
    nn_swiglu_forward(pool, out, x, N, F);
    int ok = 1;
    for (int s = 0; s < 2; s++) {
        int lo = s ? cut : 0, hi = s ? F : cut, Fl = hi - lo;
        for (int n = 0; n < N; n++) {
            memcpy(loc + (size_t)n * 2 * Fl, x + (size_t)n * 2 * F + lo, (size_t)Fl * 4);
            memcpy(loc + (size_t)n * 2 * Fl + Fl, x + (size_t)n * 2 * F + F + lo, (size_t)Fl * 4);
        }
        nn_swiglu_forward(pool, lout, loc, N, Fl);
        for (int n = 0; n < N; n++)
            ok &= same(lout + (size_t)n * Fl, out + (size_t)n * F + lo, (size_t)Fl);
    }
    T_CHECKF(ok, "swiglu: a column shard differs from the serial columns");
}

/* ---- thread-count independence ---------------------------------------------------------- */

static void test_threads(void) {
    int N = 1000, C = 64, F = 200, NH = 4, HS = 16, T = 250, B = N / T; /* several tiles each */
    size_t nx = (size_t)N * C, ng = (size_t)N * 2 * F, nf = (size_t)N * F;
    float *x = malloc(nx * 4), *g = malloc(nx * 4), *w = malloc(C * 4), *gu = malloc(ng * 4);
    float *gf = malloc(nf * 4);
    ref_fill(x, nx, 41, 1.0f);
    ref_fill(g, nx, 42, 1.0f);
    ref_fill(w, C, 43, 1.0f);
    ref_fill(gu, ng, 44, 2.0f);
    ref_fill(gf, nf, 45, 1.0f);
    nn_rope_table tab;
    T_CHECK(nn_rope_table_init(&tab, T, HS, 1.0f, 10000.0f, 0) == MTC_OK);
    float *res[3][8];
    for (int p = 0; p < 3; p++) {
        nn_pool *pool = NULL;
        T_CHECK(nn_pool_create(p + 1, &pool) == MTC_OK);
        float **r = res[p];
        r[0] = malloc(nx * 4), r[1] = malloc(N * 4), r[2] = malloc(nx * 4), r[3] = calloc(C, 4);
        r[4] = malloc(nx * 4), r[5] = malloc(nx * 4), r[6] = malloc(nf * 4), r[7] = malloc(ng * 4);
        nn_rmsnorm_forward(pool, r[0], r[1], x, w, 1e-5f, N, C);
        nn_rmsnorm_backward(pool, r[2], r[3], g, x, w, r[1], N, C);
        nn_rope_forward(pool, r[4], x, &tab, NULL, 0, B, T, NH, HS, C);
        nn_rope_backward(pool, r[5], g, &tab, NULL, 0, B, T, NH, HS, C);
        nn_swiglu_forward(pool, r[6], gu, N, F);
        nn_swiglu_backward(pool, r[7], gf, gu, N, F);
        nn_pool_free(pool);
    }
    const size_t sz[8] = {nx, (size_t)N, nx, (size_t)C, nx, nx, nf, ng};
    const char *names[8] = {"rmsnorm out",  "rmsnorm rstd",  "rmsnorm dinp", "rmsnorm dw",
                            "rope forward", "rope backward", "swiglu out",   "swiglu dinp"};
    for (int k = 0; k < 8; k++)
        for (int p = 1; p < 3; p++)
            T_CHECKF(same(res[0][k], res[p][k], sz[k]), "%s: %d threads differ from 1", names[k],
                     p + 1);
    for (int p = 0; p < 3; p++)
        for (int k = 0; k < 8; k++)
            free(res[p][k]);
    nn_rope_table_free(&tab);
    free(x), free(g), free(w), free(gu), free(gf);
}

int main(void) {
    nn_pool *pool = NULL;
    T_CHECK(nn_pool_create(2, &pool) == MTC_OK);
    test_rmsnorm(pool);
    test_rope_table();
    for (int inter = 0; inter < 2; inter++) {
        test_rope_case(pool, inter, 1.0f);
        test_rope_case(pool, inter, 0.5f);
    }
    test_swiglu(pool);
    test_threads();
    nn_pool_free(pool);
    return T_DONE();
}
