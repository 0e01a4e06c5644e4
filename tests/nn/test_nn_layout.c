/* tests/nn/test_nn_layout.c - what the parallel layouts rely on:
 *  - the pool runs every item exactly once, many times in a row;
 *  - nn_sgemm and every kernel give identical bits with 1, 2 and 3 threads;
 *  - dropout draws p of the units, scales by 1/(1-p), and a shard (b0, t0,
 *    c0, tpos offsets) draws exactly the slice of the full tensor's mask;
 *  - attention over heads split in two halves (h0) and over a batch split
 *    (b0), with dropout, equals the slices of the full computation. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_internal.h"
#include "nn_ref.h"
#include "test.h"

static atomic_int counts[1000];
static void count_item(int i, void *arg) {
    (void)arg;
    atomic_fetch_add(&counts[i], 1);
}

/* nested: every outer item runs an inner job of 10 items on the same pool */
static atomic_int nested_counts[8][10];
typedef struct {
    nn_pool *pool;
    int outer;
} nest_arg;
static void inner_item(int i, void *arg) {
    atomic_fetch_add(&nested_counts[((nest_arg *)arg)->outer][i], 1);
}
static void outer_item(int i, void *arg) {
    nest_arg a = {((nest_arg *)arg)->pool, i};
    nn_pool_run(a.pool, 10, inner_item, &a);
}
/* two threads submitting to one pool at once */
static atomic_int shared_counts[2][500];
typedef struct {
    nn_pool *pool;
    int who;
} share_arg;
static void shared_item(int i, void *arg) {
    atomic_fetch_add(&shared_counts[((share_arg *)arg)->who][i], 1);
}
static void *share_thread(void *arg) {
    for (int rep = 0; rep < 200; rep++)
        nn_pool_run(((share_arg *)arg)->pool, 500, shared_item, arg);
    return NULL;
}

static void test_pool_misuse(void) {
    nn_pool *p = NULL;
    T_CHECK(nn_pool_create(2, &p) == MTC_OK);
    nest_arg na = {p, 0};
    nn_pool_run(p, 8, outer_item, &na);
    int ok = 1;
    for (int o = 0; o < 8; o++)
        for (int i = 0; i < 10; i++)
            ok &= atomic_load(&nested_counts[o][i]) == 1;
    T_CHECKF(ok, "nested nn_pool_run did not run every inner item once");
    pthread_t th;
    share_arg a0 = {p, 0}, a1 = {p, 1};
    T_CHECK(pthread_create(&th, NULL, share_thread, &a1) == 0);
    share_thread(&a0);
    pthread_join(th, NULL);
    ok = 1;
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < 500; i++)
            ok &= atomic_load(&shared_counts[w][i]) == 200;
    T_CHECKF(ok, "two submitters on one pool lost or repeated items");
    nn_pool_free(p);
}

static void test_pool(void) {
    nn_pool *p = NULL;
    T_CHECK(nn_pool_create(0, &p) == MTC_ERR_INVALID_ARGUMENT && p == NULL);
    /* default spin, then no spin at all (every hand-off goes through sleep/wake) */
    for (int mode = 0; mode < 2; mode++) {
        nn_pool_opts no_spin = {.spin_us = 0}; /* the CLI's MTC_NN_SPIN_US=0 */
        T_CHECK((mode ? nn_pool_create_opts(3, &no_spin, &p) : nn_pool_create(3, &p)) == MTC_OK);
        T_CHECK(nn_pool_size(p) == 3 && nn_pool_size(NULL) == 1);
        int ok = 1;
        for (int rep = 0; rep < 1000; rep++) {
            int n = rep % 7 == 0 ? 1000 : rep % 5;
            for (int i = 0; i < n; i++)
                atomic_store(&counts[i], 0);
            nn_pool_run(p, n, count_item, NULL);
            for (int i = 0; i < n; i++)
                ok &= atomic_load(&counts[i]) == 1;
        }
        T_CHECKF(ok, "pool items not run exactly once (spin mode %d)", mode);
        nn_pool_free(p);
    }
    nn_pool_free(NULL);
}

static int same(const float *a, const float *b, size_t n) { return memcmp(a, b, n * 4) == 0; }

static void test_sgemm_threads(nn_pool *p1, nn_pool *p3) {
    /* (ta, tb, M, N, K), chosen so that gemm.c splits them: 2 row blocks,
     * 2 column blocks (transposed A), 2 row blocks (both transposed), 2 odd
     * row blocks, 4 row blocks; 2 column blocks of a product with K >= 8 M
     * and 8 N (the LM head's input gradient: split by columns although M >
     * N); then unsplit small ones */
    int shapes[][5] = {{0, 1, 600, 96, 64},  {1, 0, 64, 700, 128}, {1, 1, 1100, 65, 31},
                       {0, 0, 1031, 33, 61}, {0, 1, 2100, 24, 41}, {0, 0, 300, 260, 2500},
                       {0, 0, 33, 47, 19},   {0, 1, 1, 500, 40},   {0, 0, 3, 2, 1}};
    int t = 0; /* the split rule: rows of the larger extent, columns for a K-dominated product */
    T_CHECK(nn_gemm_split(1024, 384, 1536, &t) == 1 && t == 2);
    T_CHECK(nn_gemm_split(1024, 384, 50304, &t) == 0 && t == 2);
    T_CHECK(nn_gemm_split(300, 260, 2500, &t) == 0 && t == 2);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int ta = shapes[s][0], tb = shapes[s][1], M = shapes[s][2], N = shapes[s][3];
        int K = shapes[s][4], lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 5;
        size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb;
        size_t nc = (size_t)M * ldc;
        float *A = malloc(na * 4), *B = malloc(nb * 4), *C1 = malloc(nc * 4), *C3 = malloc(nc * 4);
        ref_fill(A, na, 100 + s, 1.0f);
        ref_fill(B, nb, 200 + s, 1.0f);
        ref_fill(C1, nc, 300 + s, 1.0f);
        memcpy(C3, C1, nc * 4);
        nn_sgemm(p1, ta, tb, M, N, K, 0.7f, A, lda, B, ldb, 0.5f, C1, ldc);
        nn_sgemm(p3, ta, tb, M, N, K, 0.7f, A, lda, B, ldb, 0.5f, C3, ldc);
        T_CHECKF(same(C1, C3, nc), "sgemm shape %zu: 1 vs 3 threads differ", s);
        /* and it is the right product (double reference) */
        float *C0 = malloc(nc * 4);
        ref_fill(C0, nc, 300 + s, 1.0f);
        double worst = 0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double acc = 0;
                for (int k = 0; k < K; k++)
                    acc += (double)(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
                           (tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
                double e = 0.7 * acc + 0.5 * C0[(size_t)i * ldc + j];
                worst = fmax(worst, fabs(e - C1[(size_t)i * ldc + j]));
            }
        T_CHECKF(worst < 1e-4, "sgemm shape %zu: abs err %.3g", s, worst);
        int pad_ok = 1; /* columns between N and ldc untouched */
        for (int i = 0; i < M; i++)
            for (int j = N; j < ldc; j++)
                pad_ok &= C1[(size_t)i * ldc + j] == C0[(size_t)i * ldc + j];
        T_CHECK(pad_ok);
        free(A), free(B), free(C1), free(C3), free(C0);
    }
}

/* every kernel with a pool: results of pools a and b must be identical */
static void test_kernels_threads(nn_pool *pa, nn_pool *pb) {
    /* sizes that make every kernel split its work (gemm.c: >= 256 rows or columns) */
    int N = 640, C = 512, OUT = 96, B = 2, T = 96, NH = 3, HS = 16, V = 1000, Vp = 1024;
    size_t nx = (size_t)N * C;
    float *x = malloc(nx * 4), *w = malloc(C * 4), *bb = malloc(C * 4), *g = malloc(nx * 4);
    ref_fill(x, nx, 1, 1.0f), ref_fill(w, C, 2, 1.0f), ref_fill(bb, C, 3, 1.0f);
    ref_fill(g, nx, 4, 1.0f);
    float *r[2][8];
    nn_pool *pools[2] = {pa, pb};
    size_t nW = (size_t)OUT * C, nq = (size_t)B * T * 3 * NH * HS, na = (size_t)B * NH * T;
    size_t nl = (size_t)N * Vp;
    float *W = malloc(nW * 4), *qkv = malloc(nq * 4), *logits = malloc(nl * 4);
    int *tg = malloc(N * sizeof(int));
    ref_fill(W, nW, 5, 0.1f), ref_fill(qkv, nq, 6, 1.0f), ref_fill(logits, nl, 7, 2.0f);
    for (int n = 0; n < N; n++)
        tg[n] = (n * 37) % V;
    nn_dropout_spec drop = {.p = 0.1f, .seed = 3, .stream = 4};
    for (int s = 0; s < 2; s++) {
        nn_pool *p = pools[s];
        float *ln = r[s][0] = malloc(nx * 4), *mr = malloc(2 * N * 4);
        nn_layernorm_forward(p, ln, mr, mr + N, x, w, bb, N, C);
        float *dln = r[s][1] = malloc((nx + 2 * C) * 4);
        memset(dln + nx, 0, 2 * C * 4);
        nn_layernorm_backward(p, dln, dln + nx, dln + nx + C, g, x, w, mr, mr + N, N, C);
        float *lin = r[s][2] = malloc((size_t)N * OUT * 4);
        nn_linear_forward(p, lin, x, W, bb, N, C, OUT);
        float *dlin = r[s][3] = calloc(nx + nW + OUT, 4);
        nn_linear_backward(p, dlin, dlin + nx, dlin + nx + nW, lin, x, W, N, C, OUT);
        float *ge = r[s][4] = malloc(2 * nx * 4);
        nn_gelu_forward(p, ge, x, nx);
        nn_gelu_backward(p, ge + nx, x, g, nx);
        nn_attention_shape as = nn_attention_shape_qkv(B, T, NH, HS);
        int Ca = NH * HS;
        float *at = r[s][5] = malloc((nq / 3 + na) * 4); /* out | lse */
        nn_attention_forward(p, at, at + nq / 3, qkv, qkv + Ca, qkv + 2 * Ca, &as, &drop);
        float *dat = r[s][6] = malloc(nq * 4);
        nn_attention_backward(p, dat, dat + Ca, dat + 2 * Ca, at, qkv, qkv + Ca, qkv + 2 * Ca, at,
                              at + nq / 3, &as, &drop);
        float *xe = r[s][7] = malloc((nl + N) * 4);
        memcpy(xe, logits, nl * 4);
        nn_softmax_xent_forward(p, xe + nl, xe, tg, N, V, Vp);
        nn_softmax_xent_backward(p, xe, tg, 0.01f, N, V, Vp);
        float *fu = malloc((nl + N) * 4); /* fused: the same bits as the two calls */
        memcpy(fu, logits, nl * 4);
        nn_softmax_xent_forward_backward(p, fu + nl, fu, tg, 0.01f, N, V, Vp);
        T_CHECKF(same(fu, xe, nl + N), "fused softmax-xent differs from forward+backward");
        free(fu);
        free(mr);
    }
    size_t sizes[8] = {nx,          nx + 2 * C, (size_t)N * OUT, nx + nW + OUT, 2 * nx,
                       nq / 3 + na, nq,         nl + N};
    const char *names[8] = {"layernorm fwd", "layernorm bwd", "linear fwd",    "linear bwd",
                            "gelu",          "attention fwd", "attention bwd", "xent"};
    for (int k = 0; k < 8; k++) {
        T_CHECKF(same(r[0][k], r[1][k], sizes[k]), "%s: pool sizes %d and %d differ", names[k],
                 nn_pool_size(pa), nn_pool_size(pb));
        free(r[0][k]), free(r[1][k]);
    }
    free(x), free(w), free(bb), free(g), free(W), free(qkv), free(logits), free(tg);
}

/* elementwise kernels give an element the same bits wherever it sits in the
 * buffer (a TP or ZeRO shard starts at another offset and has another tail) */
static void test_elementwise_offsets(nn_pool *pool) {
    size_t n = 1003;
    float *x = malloc(n * 4), *g = malloc(n * 4), *y = malloc(n * 4), *dy = malloc(n * 4);
    float *ys = malloc(n * 4), *dys = malloc(n * 4);
    ref_fill(x, n, 81, 2.0f), ref_fill(g, n, 82, 1.0f);
    nn_gelu_forward(pool, y, x, n);
    nn_gelu_backward(pool, dy, x, g, n);
    int ok = 1;
    for (size_t a = 0; a < 200; a++) { /* 200 slices, each with a tail of 1..7 */
        size_t b = a + 1 + (a * 7) % 61;
        nn_gelu_forward(pool, ys, x + a, b - a);
        nn_gelu_backward(pool, dys, x + a, g + a, b - a);
        ok &= same(ys, y + a, b - a) && same(dys, dy + a, b - a);
    }
    T_CHECKF(ok, "gelu: a slice differs from the whole buffer's values");
    float *p = malloc(n * 4), *m = calloc(n, 4), *v = calloc(n, 4);
    float *ps = malloc(n * 4), *ms = calloc(n, 4), *vs = calloc(n, 4);
    ref_fill(p, n, 83, 1.0f);
    memcpy(ps, p, n * 4);
    for (int t = 1; t <= 2; t++) {
        nn_adamw_update(p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
        for (size_t a = 0; a < n; a += 5) /* chunks of 5: every element in a tail */
            nn_adamw_update(ps + a, g + a, ms + a, vs + a, a + 5 <= n ? 5 : n - a, 1e-3f, 0.9f,
                            0.95f, 1e-8f, 0.1f, t);
    }
    T_CHECKF(same(p, ps, n) && same(m, ms, n) && same(v, vs, n),
             "adamw: chunked update differs from the whole buffer's");
    free(x), free(g), free(y), free(dy), free(ys), free(dys);
    free(p), free(m), free(v), free(ps), free(ms), free(vs);
}

static void test_dropout(void) {
    /* the fast uniform run equals the core generator at any start */
    /* (also across the 2^32-block boundary, where the counter's high word changes) */
    static float u[1000];
    uint64_t starts[3] = {1001, 0, (4ull << 32) - 333};
    int ok = 1;
    for (int st = 0; st < 3; st++)
        for (size_t n = 0; n <= 1000; n += (n < 70 ? 1 : 233)) {
            nn_rng_uniform_run(u, n, 42, 0x123456789ull, starts[st]);
            for (size_t k = 0; k < n; k++)
                ok &= u[k] == mtc_rng_uniform(42, 0x123456789ull, starts[st] + k);
        }
    T_CHECK(ok);

    int B = 3, T = 40, C = 50;
    size_t n = (size_t)B * T * C;
    float *x = malloc(n * 4), *y = malloc(n * 4), *dx = malloc(n * 4), *ones = malloc(n * 4);
    for (size_t k = 0; k < n; k++)
        x[k] = 1.0f + (float)(k % 17), ones[k] = 1.0f;
    float p = 0.25f;
    nn_dropout_spec s = {.p = p, .seed = 11, .stream = 12, .Tg = T, .Cg = C};
    nn_dropout_forward(y, x, B, T, C, &s);
    size_t dropped = 0;
    ok = 1;
    for (size_t k = 0; k < n; k++) {
        if (y[k] == 0.0f)
            dropped++;
        else
            ok &= y[k] == x[k] * (1.0f / (1.0f - p));
    }
    T_CHECK(ok);
    double frac = (double)dropped / n; /* binomial sd ~0.0035 */
    T_CHECKF(fabs(frac - p) < 0.02, "dropped fraction %.4f vs p=%.2f", frac, p);
    nn_dropout_backward(dx, ones, B, T, C, &s); /* same mask */
    ok = 1;
    for (size_t k = 0; k < n; k++)
        ok &= (dx[k] == 0.0f) == (y[k] == 0.0f);
    T_CHECK(ok);
    /* Tg/Cg = 0 means unsharded; in place works */
    nn_dropout_spec s0 = {.p = p, .seed = 11, .stream = 12};
    memcpy(dx, x, n * 4);
    nn_dropout_forward(dx, dx, B, T, C, &s0);
    T_CHECK(same(dx, y, n));
    /* p = 0 (and NULL) is the identity */
    nn_dropout_spec sz = {.p = 0.0f};
    nn_dropout_forward(dx, x, B, T, C, &sz);
    T_CHECK(same(dx, x, n));
    nn_dropout_forward(dx, x, B, T, C, NULL);
    T_CHECK(same(dx, x, n));

    /* shard: batch 1..2, sequence 5..12 (then positions {3, 17, 30}), channels 20..44 */
    int bl = 2, tl = 8, cl = 25, b0 = 1, t0 = 5, c0 = 20, tpos[3] = {3, 17, 30};
    float *xs = malloc((size_t)bl * tl * cl * 4), *ys = malloc((size_t)bl * tl * cl * 4);
    for (int pass = 0; pass < 2; pass++) {
        int tn = pass ? 3 : tl;
        for (int b = 0; b < bl; b++)
            for (int t = 0; t < tn; t++)
                for (int c = 0; c < cl; c++) {
                    int tg = pass ? tpos[t] : t0 + t;
                    xs[((size_t)b * tn + t) * cl + c] = x[((size_t)(b0 + b) * T + tg) * C + c0 + c];
                }
        nn_dropout_spec ss = {.p = p,
                              .seed = 11,
                              .stream = 12,
                              .b0 = b0,
                              .Tg = T,
                              .t0 = t0,
                              .tpos = pass ? tpos : NULL,
                              .Cg = C,
                              .c0 = c0};
        nn_dropout_forward(ys, xs, bl, tn, cl, &ss);
        ok = 1;
        for (int b = 0; b < bl; b++)
            for (int t = 0; t < tn; t++)
                for (int c = 0; c < cl; c++) {
                    int tg = pass ? tpos[t] : t0 + t;
                    ok &= ys[((size_t)b * tn + t) * cl + c] ==
                          y[((size_t)(b0 + b) * T + tg) * C + c0 + c];
                }
        T_CHECKF(ok, "dropout shard (%s) differs from the full tensor's slice",
                 pass ? "tpos" : "t0");
    }
    free(x), free(y), free(dx), free(ones), free(xs), free(ys);
}

/* local qkv/out of heads [h0, h0+nh) and batches [b0, b0+bl) from the full tensors */
static void slice_heads(float *dst, const float *src, int B, int T, int NH, int HS, int parts,
                        int b0, int bl, int h0, int nh) {
    int C = NH * HS, Cl = nh * HS;
    for (int b = 0; b < bl; b++)
        for (int t = 0; t < T; t++)
            for (int q = 0; q < parts; q++)
                memcpy(dst + ((size_t)b * T + t) * parts * Cl + q * Cl,
                       src + ((size_t)(b0 + b) * T + t) * parts * C + q * C + h0 * HS,
                       (size_t)Cl * 4);
    (void)B;
}

/* forward and backward of the packed layout: out (B,T,C), lse (B,NH,T), dqkv (B,T,3C) */
static void attention_packed(nn_pool *pool, float *out, float *lse, float *dqkv, const float *g,
                             const float *qkv, int B, int T, int NH, int HS,
                             const nn_dropout_spec *d) {
    nn_attention_shape s = nn_attention_shape_qkv(B, T, NH, HS);
    int C = NH * HS;
    nn_attention_forward(pool, out, lse, qkv, qkv + C, qkv + 2 * C, &s, d);
    nn_attention_backward(pool, dqkv, dqkv + C, dqkv + 2 * C, g, qkv, qkv + C, qkv + 2 * C, out,
                          lse, &s, d);
}

static void test_attention_split(nn_pool *pool) {
    int B = 2, T = 37, NH = 4, HS = 8, C = NH * HS;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = malloc(nq * 4), *out = malloc(no * 4), *lse = malloc(nl * 4), *g = malloc(no * 4);
    float *dqkv = malloc(nq * 4);
    ref_fill(qkv, nq, 71, 1.0f), ref_fill(g, no, 72, 1.0f);
    nn_dropout_spec full = {.p = 0.2f, .seed = 8, .stream = 99};
    attention_packed(pool, out, lse, dqkv, g, qkv, B, T, NH, HS, &full);
    /* (b0, bl, h0, nh): two head halves of all batches, then one batch, heads 1..3 */
    int cases[][4] = {{0, 2, 0, 2}, {0, 2, 2, 2}, {1, 1, 1, 3}};
    for (int cs = 0; cs < 3; cs++) {
        int b0 = cases[cs][0], bl = cases[cs][1], h0 = cases[cs][2], nh = cases[cs][3];
        size_t lq = (size_t)bl * T * 3 * nh * HS, lo = (size_t)bl * T * nh * HS;
        size_t ll = (size_t)bl * nh * T;
        float *q = malloc(lq * 4), *o = malloc(lo * 4), *a = malloc(ll * 4), *gl = malloc(lo * 4);
        float *dq = malloc(lq * 4), *eo = malloc(lo * 4), *edq = malloc(lq * 4);
        slice_heads(q, qkv, B, T, NH, HS, 3, b0, bl, h0, nh);
        slice_heads(gl, g, B, T, NH, HS, 1, b0, bl, h0, nh);
        nn_dropout_spec loc = full;
        loc.b0 = b0, loc.h0 = h0, loc.NHg = NH, loc.Tg = T;
        attention_packed(pool, o, a, dq, gl, q, bl, T, nh, HS, &loc);
        slice_heads(eo, out, B, T, NH, HS, 1, b0, bl, h0, nh);
        slice_heads(edq, dqkv, B, T, NH, HS, 3, b0, bl, h0, nh);
        int ok_lse = 1;
        for (int b = 0; b < bl; b++)
            for (int h = 0; h < nh; h++)
                ok_lse &= same(a + ((size_t)b * nh + h) * T,
                               lse + ((size_t)(b0 + b) * NH + h0 + h) * T, (size_t)T);
        T_CHECKF(same(o, eo, lo) && ok_lse, "attention split %d: forward differs", cs);
        T_CHECKF(same(dq, edq, lq), "attention split %d: backward differs", cs);
        free(q), free(o), free(a), free(gl), free(dq), free(eo), free(edq);
    }
    /* position arrays: explicit positions equal the implicit ones (t0 / keys 0..),
     * and a shifted window (CP-style global positions) draws another mask */
    int *pos = malloc(2 * (T + 10) * sizeof(int));
    for (int i = 0; i < T + 10; i++)
        pos[i] = i, pos[T + 10 + i] = 10 + i;
    float *o2 = malloc(no * 4), *l2 = malloc(nl * 4), *d2 = malloc(nq * 4);
    nn_dropout_spec ex = full;
    ex.tpos = pos, ex.kpos = pos;
    attention_packed(pool, o2, l2, d2, g, qkv, B, T, NH, HS, &ex);
    T_CHECKF(same(o2, out, no) && same(d2, dqkv, nq), "explicit positions differ from implicit");
    nn_dropout_spec w1 = full, w2 = full;
    w1.Tg = w2.Tg = T + 10, w1.t0 = 10, w1.kpos = pos + T + 10;
    w2.tpos = w2.kpos = pos + T + 10;
    float *o3 = malloc(no * 4), *d3 = malloc(nq * 4);
    attention_packed(pool, o2, l2, d2, g, qkv, B, T, NH, HS, &w1);
    attention_packed(pool, o3, l2, d3, g, qkv, B, T, NH, HS, &w2);
    T_CHECKF(same(o2, o3, no) && same(d2, d3, nq), "t0 and tpos windows differ");
    T_CHECKF(!same(o2, out, no), "a shifted position window drew the same mask");
    free(pos), free(o2), free(l2), free(d2), free(o3), free(d3);
    free(qkv), free(out), free(lse), free(g), free(dqkv);
}

int main(void) {
    test_pool();
    test_pool_misuse();
    nn_pool *p1 = NULL, *p2 = NULL, *p3 = NULL;
    T_CHECK(nn_pool_create(1, &p1) == MTC_OK);
    T_CHECK(nn_pool_create(2, &p2) == MTC_OK);
    T_CHECK(nn_pool_create(3, &p3) == MTC_OK);
    test_sgemm_threads(p1, p3);
    test_kernels_threads(p1, p2);
    test_kernels_threads(NULL, p3);
    test_dropout();
    test_elementwise_offsets(p2);
    test_attention_split(p2);
    nn_pool_free(p1), nn_pool_free(p2), nn_pool_free(p3);
    return T_DONE();
}
