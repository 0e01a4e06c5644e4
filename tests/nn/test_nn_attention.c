/* tests/nn/test_nn_attention.c - the tiled attention kernel
 * (nn/flash_attention.c):
 *  - forward (out, lse) against the double reference of nn_ref.h and
 *    backward against central finite differences of it, for the packed
 *    [q | k | v] layout, strided separate tensors, grouped-query attention,
 *    explicit positions (two chunks; rows that see no key) and dropout;
 *  - equality with the untiled kernel it replaced (attention_old.c), with
 *    and without dropout (relative to each tensor's largest element: single
 *    elements near zero differ by cancellation, ~1e-5 of themselves);
 *  - GQA against the same call on kv heads repeated NH/NKV times;
 *  - the lse merge: keys split in two parts, each part's forward merged,
 *    equals the call over all keys, and the parts' backwards (with the
 *    merged out and lse) give the full gradients;
 *  - pools of 1 and 2 threads give identical bits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_old.h"
#include "nn_ref.h"
#include "test.h"

/* ---- a case: buffers in the shape's layout ---- */

typedef struct {
    nn_attention_shape s;
    float *q, *k, *v, *o, *lse, *g, *dq, *dk, *dv;
    float *qkv, *dqkv; /* packed: q, k, v point into these */
    size_t nq, nk, nv, no, nl;
} acase;

/* Strides are padded unless packed; padding holds NaN, which must never be read. */
static void case_init(acase *c, int B, int T, int Tk, int NH, int NKV, int HS, int packed,
                      uint64_t seed) {
    memset(c, 0, sizeof *c);
    nn_attention_shape *s = &c->s;
    s->B = B, s->T = T, s->Tk = Tk, s->NH = NH, s->NKV = NKV, s->HS = HS;
    if (packed) {
        int ld = (NH + 2 * NKV) * HS;
        s->ldq = s->ldk = s->ldv = ld, s->ldo = NH * HS + 3;
        size_t n = (size_t)B * T * ld;
        c->qkv = malloc(n * 4), c->dqkv = calloc(n, 4);
        ref_fill(c->qkv, n, seed, 1.0f);
        c->q = c->qkv, c->k = c->qkv + NH * HS, c->v = c->qkv + (NH + NKV) * HS;
        c->dq = c->dqkv, c->dk = c->dqkv + NH * HS, c->dv = c->dqkv + (NH + NKV) * HS;
        c->nq = c->nk = c->nv = n;
    } else {
        s->ldq = NH * HS + 3, s->ldk = NKV * HS + 1, s->ldv = NKV * HS + 2, s->ldo = NH * HS + 5;
        c->nq = (size_t)B * T * s->ldq, c->nk = (size_t)B * Tk * s->ldk;
        c->nv = (size_t)B * Tk * s->ldv;
        c->q = malloc(c->nq * 4), c->k = malloc(c->nk * 4), c->v = malloc(c->nv * 4);
        c->dq = calloc(c->nq, 4), c->dk = calloc(c->nk, 4), c->dv = calloc(c->nv, 4);
        ref_fill(c->q, c->nq, seed, 1.0f), ref_fill(c->k, c->nk, seed + 1, 1.0f);
        ref_fill(c->v, c->nv, seed + 2, 1.0f);
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (int e = NH * HS; e < s->ldq; e++)
                c->q[r * s->ldq + e] = NAN;
        for (size_t r = 0; r < (size_t)B * Tk; r++) {
            for (int e = NKV * HS; e < s->ldk; e++)
                c->k[r * s->ldk + e] = NAN;
            for (int e = NKV * HS; e < s->ldv; e++)
                c->v[r * s->ldv + e] = NAN;
        }
    }
    c->no = (size_t)B * T * s->ldo, c->nl = (size_t)B * NH * T;
    c->o = malloc(c->no * 4), c->lse = malloc(c->nl * 4), c->g = malloc(c->no * 4);
    ref_fill(c->g, c->no, seed + 3, 1.0f);
    for (size_t k = 0; k < c->no; k++)
        c->o[k] = -7.0f; /* padding must survive */
}

static void case_free(acase *c) {
    if (c->qkv)
        free(c->qkv), free(c->dqkv);
    else
        free(c->q), free(c->k), free(c->v), free(c->dq), free(c->dk), free(c->dv);
    free(c->o), free(c->lse), free(c->g);
}

/* garbage in the gradients: "=" must overwrite it (padding stays NaN-free 0) */
static void case_garbage_grads(acase *c) {
    float *bufs[3] = {c->dq, c->dk, c->dv};
    int lds[3] = {c->s.ldq, c->s.ldk, c->s.ldv}, w[3] = {c->s.NH, c->s.NKV, c->s.NKV};
    size_t rows[3] = {(size_t)c->s.B * c->s.T, (size_t)c->s.B * c->s.Tk, (size_t)c->s.B * c->s.Tk};
    if (c->qkv) memset(c->dqkv, 0, c->nq * 4);
    for (int t = 0; t < 3; t++)
        for (size_t r = 0; r < rows[t]; r++)
            for (int e = 0; e < w[t] * c->s.HS; e++)
                bufs[t][r * lds[t] + e] = 1e30f;
}

static void case_run(nn_pool *pool, acase *c, const nn_dropout_spec *drop) {
    nn_attention_forward(pool, c->o, c->lse, c->q, c->k, c->v, &c->s, drop);
    nn_attention_backward(pool, c->dq, c->dk, c->dv, c->g, c->q, c->k, c->v, c->o, c->lse, &c->s,
                          drop);
}

static int same(const float *a, const float *b, size_t n) { return memcmp(a, b, n * 4) == 0; }

/* worst |a - b| / (atol + |b|) over the used elements of rows ld wide, w used */
static double worst_rel(const float *a, const float *b, size_t rows, int ld, int w, double atol) {
    double worst = 0;
    for (size_t r = 0; r < rows; r++)
        for (int e = 0; e < w; e++) {
            double x = a[r * ld + e], y = b[r * ld + e];
            double err = fabs(x - y) / (atol + fabs(y));
            if (!(err <= worst)) worst = err; /* NaN counts as the worst */
        }
    return worst;
}

/* max |a - b| / max |b| (relative to the tensor's scale) */
static double norm_rel(const float *a, const float *b, size_t rows, int ld, int w) {
    double d = 0, m = 0;
    for (size_t r = 0; r < rows; r++)
        for (int e = 0; e < w; e++) {
            double x = a[r * ld + e], y = b[r * ld + e];
            if (!(fabs(x - y) <= d)) d = fabs(x - y);
            m = fmax(m, fabs(y));
        }
    return d / m;
}

/* ---- reference and finite differences ---- */

typedef struct {
    double *q, *k, *v, *o;
    const acase *c;
    const nn_dropout_spec *drop;
} fd_ctx;

static double fd_loss(fd_ctx *f) {
    const nn_attention_shape *s = &f->c->s;
    ref_attention(f->o, NULL, f->q, f->k, f->v, s, f->drop);
    double L = 0;
    for (size_t r = 0; r < (size_t)s->B * s->T; r++)
        for (int e = 0; e < s->NH * s->HS; e++)
            L += f->o[r * s->ldo + e] * f->c->g[r * s->ldo + e];
    return L;
}

static double *as_double(const float *x, size_t n) {
    double *d = malloc(n * sizeof(double));
    for (size_t k = 0; k < n; k++)
        d[k] = x[k];
    return d;
}

/* grad (rows of ld, w used) against central differences of fd_loss w.r.t. x,
 * every stride-th used coordinate */
static void check_fd(const char *what, fd_ctx *f, double *x, const float *grad, size_t rows, int ld,
                     int w, size_t stride, double tol) {
    double worst = 0;
    size_t worst_k = 0, n = 0;
    for (size_t r = 0; r < rows; r++)
        for (int e = 0; e < w; e++, n++) {
            if (n % stride) continue;
            size_t k = r * ld + e;
            double x0 = x[k], h = 1e-5 * (fabs(x0) > 1 ? fabs(x0) : 1);
            x[k] = x0 + h;
            double lp = fd_loss(f);
            x[k] = x0 - h;
            double lm = fd_loss(f);
            x[k] = x0;
            double fd = (lp - lm) / (2 * h);
            double err = fabs(fd - grad[k]) / (1e-3 + fabs(fd));
            if (!(err <= worst)) worst = err, worst_k = k;
        }
    T_CHECKF(worst <= tol, "%s: worst relative error %.3g at %zu", what, worst, worst_k);
}

/* forward vs the reference, backward vs finite differences */
static void check_case(const char *name, nn_pool *pool, acase *c, const nn_dropout_spec *drop,
                       size_t stride) {
    const nn_attention_shape *s = &c->s;
    int HS = s->HS;
    size_t Nq = (size_t)s->B * s->T, Nk = (size_t)s->B * s->Tk;
    case_garbage_grads(c);
    case_run(pool, c, drop);
    fd_ctx f = {as_double(c->q, c->nq),
                c->qkv ? NULL : as_double(c->k, c->nk),
                c->qkv ? NULL : as_double(c->v, c->nv),
                malloc(c->no * sizeof(double)),
                c,
                drop};
    if (c->qkv) f.k = f.q + (c->k - c->q), f.v = f.q + (c->v - c->q);
    double *rl = malloc(c->nl * sizeof(double));
    ref_attention(f.o, rl, f.q, f.k, f.v, s, drop);
    float *ro = malloc(c->no * 4), *rlf = malloc(c->nl * 4);
    for (size_t k = 0; k < c->no; k++)
        ro[k] = (float)f.o[k];
    int empty_ok = 1, pad_ok = 1;
    for (size_t k = 0; k < c->nl; k++) {
        rlf[k] = (float)rl[k];
        if (rl[k] == -INFINITY) {
            empty_ok &= c->lse[k] == -INFINITY;
            size_t b = k / ((size_t)s->NH * s->T), h = (k / s->T) % s->NH, t = k % s->T;
            const float *o = c->o + (b * s->T + t) * s->ldo + h * HS;
            for (int e = 0; e < HS; e++)
                empty_ok &= o[e] == 0.0f;
        }
    }
    for (size_t r = 0; r < Nq; r++)
        for (int e = s->NH * HS; e < s->ldo; e++)
            pad_ok &= c->o[r * s->ldo + e] == -7.0f;
    double eo = worst_rel(c->o, ro, Nq, s->ldo, s->NH * HS, 1e-3);
    double el = worst_rel(c->lse, rlf, c->nl, 1, 1, 1e-3);
    T_CHECKF(eo < 1e-4, "%s: forward out rel err %.3g", name, eo);
    T_CHECKF(el < 1e-5, "%s: lse rel err %.3g", name, el);
    T_CHECKF(empty_ok, "%s: a row that sees no key must give out 0 and lse -inf", name);
    T_CHECKF(pad_ok, "%s: out padding (beyond NH*HS) was written", name);
    char what[128];
    snprintf(what, sizeof what, "%s dq", name);
    check_fd(what, &f, f.q, c->dq, Nq, s->ldq, s->NH * HS, stride, 3e-3);
    snprintf(what, sizeof what, "%s dk", name);
    check_fd(what, &f, f.k, c->dk, Nk, s->ldk, s->NKV * HS, stride, 3e-3);
    snprintf(what, sizeof what, "%s dv", name);
    check_fd(what, &f, f.v, c->dv, Nk, s->ldv, s->NKV * HS, stride, 3e-3);
    free(f.q), free(f.o), free(rl), free(ro), free(rlf);
    if (!c->qkv) free(f.k), free(f.v);
}

static void test_fd(nn_pool *pool) {
    acase c;
    nn_dropout_spec d0 = {0}, d3 = {.p = 0.3f, .seed = 5, .stream = 9};
    case_init(&c, 2, 5, 5, 2, 2, 3, 1, 31);
    check_case("packed T=5", NULL, &c, &d0, 1);
    check_case("packed T=5 p=0.3", pool, &c, &d3, 1);
    case_free(&c);
    case_init(&c, 1, 5, 5, 1, 1, 264, 1, 34); /* HS > FA_HS_MAX: the CBLAS score tiles */
    check_case("packed HS=264 p=0.3", pool, &c, &d3, 11);
    case_free(&c);
    case_init(&c, 1, 70, 70, 2, 2, 4, 1, 32); /* crosses a 64-row block */
    check_case("packed T=70", pool, &c, NULL, 7);
    case_free(&c);
    nn_dropout_spec d2 = {.p = 0.2f, .seed = 6, .stream = 1};
    case_init(&c, 1, 150, 150, 1, 1, 4, 1, 33); /* three query blocks and key tiles */
    check_case("packed T=150 p=0.2", pool, &c, &d2, 37);
    case_free(&c);
    /* GQA on strided separate tensors */
    for (int nkv = 1; nkv <= 2; nkv++) {
        char name[64];
        snprintf(name, sizeof name, "gqa NH=4 NKV=%d p=0.1", nkv);
        nn_dropout_spec d1 = {.p = 0.1f, .seed = 7, .stream = 2};
        case_init(&c, 2, 20, 20, 4, nkv, 4, 0, 40 + nkv);
        check_case(name, pool, &c, &d1, 3);
        case_free(&c);
    }
    /* two non-contiguous chunks of queries (CP: a rank's chunks 0 and 3 of 4)
     * against all keys, keys contiguous (prefix masks) and explicit (elementwise) */
    int qpos[80], kpos[160];
    for (int i = 0; i < 40; i++)
        qpos[i] = i, qpos[40 + i] = 120 + i;
    for (int j = 0; j < 160; j++)
        kpos[j] = j;
    for (int ex = 0; ex < 2; ex++) {
        case_init(&c, 1, 80, 160, 2, 1, 8, 0, 50 + ex);
        c.s.qpos = qpos, c.s.kpos = ex ? kpos : NULL;
        check_case(ex ? "two chunks, explicit kpos" : "two chunks", pool, &c, NULL, 29);
        case_free(&c);
    }
    /* a remote KV chunk: queries at 1..3 and 9..11 see keys 3..10 partly;
     * queries 1 and 2 see none (out 0, lse -inf, no NaN in backward) */
    int qp2[6] = {1, 2, 3, 9, 10, 11}, kp2[8] = {3, 4, 5, 6, 7, 8, 9, 10};
    nn_dropout_spec dk = {.p = 0.25f, .seed = 8, .stream = 3, .Tg = 12, .tpos = qp2, .kpos = kp2};
    case_init(&c, 2, 6, 8, 2, 2, 4, 0, 60);
    c.s.qpos = qp2, c.s.kpos = kp2;
    check_case("remote chunk, empty rows", pool, &c, &dk, 1);
    c.s.kpos = NULL, c.s.k0 = 3; /* the same positions, implicit */
    check_case("remote chunk k0=3", pool, &c, &dk, 1);
    case_free(&c);
}

/* ---- against the untiled kernel ---- */

static void test_old(nn_pool *pool) {
    int Ts[4] = {37, 64, 130, 200};
    float ps[4] = {0.0f, 0.1f, 0.0f, 0.2f};
    for (int t = 0; t < 4; t++) {
        int B = 2, T = Ts[t], NH = 3, HS = 16, C = NH * HS;
        acase c;
        case_init(&c, B, T, T, NH, NH, HS, 1, 70 + t);
        c.s.ldo = C; /* the old kernel's (B, T, C) output */
        free(c.o), free(c.g);
        c.no = (size_t)B * T * C;
        c.o = malloc(c.no * 4), c.g = malloc(c.no * 4);
        ref_fill(c.g, c.no, 80 + t, 1.0f);
        nn_dropout_spec d = {.p = ps[t], .seed = 11, .stream = 12};
        case_run(pool, &c, &d);
        size_t na = (size_t)B * NH * T * T;
        float *out = malloc(c.no * 4), *att = malloc(na * 4), *scr = malloc(na * 4);
        float *dqkv = malloc(c.nq * 4);
        old_attention_forward(pool, out, att, c.qkv, B, T, NH, HS, &d);
        old_attention_backward(pool, dqkv, scr, c.g, c.qkv, att, B, T, NH, HS, &d);
        double eo = norm_rel(c.o, out, (size_t)B * T, C, C);
        double ed = norm_rel(c.dqkv, dqkv, (size_t)B * T, 3 * C, 3 * C);
        T_CHECKF(eo < 1e-5, "old kernel T=%d p=%g: out rel err %.3g", T, ps[t], eo);
        T_CHECKF(ed < 1e-5, "old kernel T=%d p=%g: dqkv rel err %.3g", T, ps[t], ed);
        /* lse against the old probabilities: P_i0 = exp(s_i0 - lse_i) */
        double el = 0;
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int i = 0; i < T; i++) {
                    const float *q = c.qkv + ((size_t)b * T + i) * 3 * C + h * HS;
                    const float *k = c.qkv + (size_t)b * T * 3 * C + C + h * HS;
                    double s0 = 0;
                    for (int e = 0; e < HS; e++)
                        s0 += (double)q[e] * k[e];
                    s0 /= sqrt((double)HS);
                    double p0 = att[(((size_t)b * NH + h) * T + i) * T];
                    double lse = c.lse[((size_t)b * NH + h) * T + i];
                    el = fmax(el, fabs(exp(s0 - lse) - p0) / (1e-3 + p0));
                }
        T_CHECKF(el < 1e-4, "old kernel T=%d: probabilities from lse rel err %.3g", T, el);
        free(out), free(att), free(scr), free(dqkv);
        case_free(&c);
    }
}

/* ---- GQA against repeated kv heads ---- */

static void test_gqa_repeat(nn_pool *pool) {
    for (int nkv = 1; nkv <= 2; nkv++) {
        int B = 2, T = 90, NH = 4, HS = 8, G = NH / nkv;
        acase c, r;
        case_init(&c, B, T, T, NH, nkv, HS, 0, 90 + nkv);
        case_init(&r, B, T, T, NH, NH, HS, 0, 90 + nkv);
        memcpy(r.q, c.q, c.nq * 4), memcpy(r.g, c.g, c.no * 4);
        for (size_t row = 0; row < (size_t)B * T; row++)
            for (int h = 0; h < NH; h++) {
                memcpy(r.k + row * r.s.ldk + h * HS, c.k + row * c.s.ldk + (h / G) * HS, HS * 4);
                memcpy(r.v + row * r.s.ldv + h * HS, c.v + row * c.s.ldv + (h / G) * HS, HS * 4);
            }
        nn_dropout_spec d = {.p = 0.1f, .seed = 13, .stream = 14};
        case_run(pool, &c, &d);
        case_run(pool, &r, &d);
        size_t N = (size_t)B * T;
        double eo = norm_rel(c.o, r.o, N, c.s.ldo, NH * HS);
        double eq = norm_rel(c.dq, r.dq, N, c.s.ldq, NH * HS);
        T_CHECKF(eo < 1e-6 && same(c.lse, r.lse, c.nl), "gqa NKV=%d: forward differs (%.3g)", nkv,
                 eo);
        T_CHECKF(eq < 1e-6, "gqa NKV=%d: dq differs (%.3g)", nkv, eq);
        float *sk = calloc(c.nk, 4), *sv = calloc(c.nv, 4);
        for (size_t row = 0; row < N; row++)
            for (int h = 0; h < NH; h++)
                for (int e = 0; e < HS; e++) {
                    sk[row * c.s.ldk + (h / G) * HS + e] += r.dk[row * r.s.ldk + h * HS + e];
                    sv[row * c.s.ldv + (h / G) * HS + e] += r.dv[row * r.s.ldv + h * HS + e];
                }
        double ek = norm_rel(c.dk, sk, N, c.s.ldk, nkv * HS);
        double ev = norm_rel(c.dv, sv, N, c.s.ldv, nkv * HS);
        T_CHECKF(ek < 1e-5 && ev < 1e-5, "gqa NKV=%d: dk %.3g dv %.3g vs summed repeated heads",
                 nkv, ek, ev);
        free(sk), free(sv);
        case_free(&c), case_free(&r);
    }
}

/* ---- lse merge: keys in two parts ---- */

/* rows [j0, j0+n) of every batch row of x (B, Tk, ld) into (B, n, ld) */
static float *take_keys(const float *x, int B, int Tk, int ld, int j0, int n) {
    float *y = malloc((size_t)B * n * ld * 4);
    for (int b = 0; b < B; b++)
        memcpy(y + (size_t)b * n * ld, x + ((size_t)b * Tk + j0) * ld, (size_t)n * ld * 4);
    return y;
}

static void test_merge(nn_pool *pool) {
    int B = 2, T = 100, NH = 4, NKV = 2, HS = 8, split = 40;
    acase c;
    case_init(&c, B, T, T, NH, NKV, HS, 0, 100);
    nn_dropout_spec d = {.p = 0.1f, .seed = 15, .stream = 16};
    case_run(pool, &c, &d); /* the whole call */
    const nn_attention_shape *s = &c.s;
    int parts[2][2] = {{0, split}, {split, T - split}};
    float *o = malloc(c.no * 4), *lse = malloc(c.nl * 4), *op = malloc(c.no * 4);
    float *lp = malloc(c.nl * 4), *dq = malloc(c.nq * 4);
    float *kk[2], *vv[2], *dk[2], *dv[2];
    int kpos[100];
    for (int j = 0; j < T; j++)
        kpos[j] = j;
    nn_dropout_spec dp[2];
    nn_attention_shape sp[2];
    for (int p = 0; p < 2; p++) {
        int j0 = parts[p][0], n = parts[p][1];
        kk[p] = take_keys(c.k, B, T, s->ldk, j0, n), vv[p] = take_keys(c.v, B, T, s->ldv, j0, n);
        dk[p] = calloc((size_t)B * n * s->ldk, 4), dv[p] = calloc((size_t)B * n * s->ldv, 4);
        sp[p] = *s, sp[p].Tk = n, sp[p].k0 = j0;
        dp[p] = d, dp[p].kpos = kpos + j0, dp[p].Tg = T; /* the part's keys' global numbers */
        nn_attention_forward(pool, p ? op : o, p ? lp : lse, c.q, kk[p], vv[p], &sp[p], &dp[p]);
    }
    int empty = 0;
    for (size_t k = 0; k < c.nl; k++)
        empty += lp[k] == -INFINITY;
    T_CHECKF(empty == B * NH * split, "merge: part 2 should leave %d rows empty, got %d",
             B * NH * split, empty);
    nn_attention_merge(pool, o, lse, op, lp, B, T, NH, HS, s->ldo);
    size_t N = (size_t)B * T;
    double eo = norm_rel(o, c.o, N, s->ldo, NH * HS);
    double el = norm_rel(lse, c.lse, c.nl, 1, 1);
    T_CHECKF(eo < 1e-5 && el < 1e-6, "merge: out %.3g lse %.3g vs the whole call", eo, el);
    /* backward per part with the merged out and lse; dq accumulates over parts */
    for (int p = 0; p < 2; p++) {
        sp[p].accumulate = p;
        nn_attention_backward(pool, dq, dk[p], dv[p], c.g, c.q, kk[p], vv[p], o, lse, &sp[p],
                              &dp[p]);
    }
    double eq = norm_rel(dq, c.dq, N, s->ldq, NH * HS), ek = 0, ev = 0;
    for (int p = 0; p < 2; p++) {
        float *wk = take_keys(c.dk, B, T, s->ldk, parts[p][0], parts[p][1]);
        float *wv = take_keys(c.dv, B, T, s->ldv, parts[p][0], parts[p][1]);
        size_t n = (size_t)B * parts[p][1];
        ek = fmax(ek, norm_rel(dk[p], wk, n, s->ldk, NKV * HS));
        ev = fmax(ev, norm_rel(dv[p], wv, n, s->ldv, NKV * HS));
        free(wk), free(wv);
        free(kk[p]), free(vv[p]), free(dk[p]), free(dv[p]);
    }
    T_CHECKF(eq < 1e-5 && ek < 1e-5 && ev < 1e-5, "merge backward: dq %.3g dk %.3g dv %.3g", eq, ek,
             ev);
    /* merging an empty part changes nothing, bit for bit */
    float *o2 = malloc(c.no * 4), *l2 = malloc(c.nl * 4);
    memcpy(o2, c.o, c.no * 4), memcpy(l2, c.lse, c.nl * 4);
    for (size_t k = 0; k < c.nl; k++)
        lp[k] = -INFINITY;
    memset(op, 0, c.no * 4);
    nn_attention_merge(pool, o2, l2, op, lp, B, T, NH, HS, s->ldo);
    T_CHECK(same(o2, c.o, c.no) && same(l2, c.lse, c.nl));
    /* an empty (out, lse) merged with a part becomes that part, bit for bit */
    for (size_t k = 0; k < c.nl; k++)
        l2[k] = -INFINITY;
    for (size_t k = 0; k < c.no; k++)
        o2[k] = (k % (size_t)s->ldo) < (size_t)(NH * HS) ? 0.0f : c.o[k];
    nn_attention_merge(pool, o2, l2, c.o, c.lse, B, T, NH, HS, s->ldo);
    T_CHECKF(same(o2, c.o, c.no) && same(l2, c.lse, c.nl), "merge into an empty result");
    /* two empty parts stay empty: out 0, lse -inf (no NaN) */
    memset(o2, 0, c.no * 4);
    for (size_t k = 0; k < c.nl; k++)
        l2[k] = -INFINITY;
    nn_attention_merge(pool, o2, l2, op, lp, B, T, NH, HS, s->ldo);
    int empty_ok = 1;
    for (size_t k = 0; k < c.nl; k++)
        empty_ok &= l2[k] == -INFINITY;
    for (size_t k = 0; k < c.no; k++)
        empty_ok &= o2[k] == 0.0f;
    T_CHECKF(empty_ok, "merging two empty parts must leave out 0 and lse -inf");
    free(o2), free(l2);
    free(o), free(lse), free(op), free(lp), free(dq);
    case_free(&c);
}

/* ---- thread-count independence ---- */

static void test_threads(nn_pool *p1, nn_pool *p2) {
    acase c[3];
    nn_pool *pools[3] = {NULL, p1, p2};
    int qpos[150];
    for (int i = 0; i < 150; i++)
        qpos[i] = i < 75 ? i : 150 + i;
    nn_dropout_spec d = {.p = 0.1f, .seed = 17, .stream = 18, .tpos = qpos, .Tg = 300};
    for (int r = 0; r < 3; r++) {
        case_init(&c[r], 2, 150, 300, 4, 2, 16, 0, 110);
        c[r].s.qpos = qpos;
        case_run(pools[r], &c[r], &d);
    }
    for (int r = 1; r < 3; r++) {
        int ok = same(c[r].o, c[0].o, c[0].no) && same(c[r].lse, c[0].lse, c[0].nl);
        ok &= same(c[r].dq, c[0].dq, c[0].nq) && same(c[r].dk, c[0].dk, c[0].nk);
        ok &= same(c[r].dv, c[0].dv, c[0].nv);
        T_CHECKF(ok, "pool of %d threads differs from the calling thread", nn_pool_size(pools[r]));
    }
    for (int r = 0; r < 3; r++)
        case_free(&c[r]);
}

int main(void) {
    nn_pool *p1 = NULL, *p2 = NULL;
    T_CHECK(nn_pool_create(1, &p1) == MTC_OK);
    T_CHECK(nn_pool_create(2, &p2) == MTC_OK);
    test_fd(p2);
    test_old(p2);
    test_gqa_repeat(p2);
    test_merge(p2);
    test_threads(p1, p2);
    nn_pool_free(p1), nn_pool_free(p2);
    return T_DONE();
}
