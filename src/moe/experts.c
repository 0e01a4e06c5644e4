/* moe/experts.c - the local experts' GEMMs (see moe_internal.h), through the
 * same GEMM as the dense MLP: oneDNN's matmul where mtc has it (nn_lowp),
 * OpenBLAS (nn_sgemm) otherwise. oneDNN caches one primitive per shape and
 * the experts' row counts change every step, so with oneDNN an expert's
 * rows go in blocks of MOE_BLOCK rows and its last block is padded to a
 * multiple of MOE_PAD rows: a handful of shapes per projection, made once.
 * The padding rows are the next expert's where they fit (gx_rows), zero
 * rows in the caller's stage buffer otherwise and always for the weight
 * gradient, which sums its blocks in row order. Each GEMM is tiled over the pool by its shape only
 * (nn/), so the bits never depend on the number of threads. oneDNN 2.x has no grouped matmul, hence
 * a loop of these blocks rather than one call per projection. An expert with no rows costs nothing.
 * The router's probability multiplies after the activation and scales
 * fc2's bias: p * (fc2(act(fc1 x)) + b2), as Megatron's grouped MLP.
 * Does not communicate or allocate. */
#include <string.h>

#include "moe/moe_internal.h"
#include "nn/llama.h"
#include "nn/lowp.h"
#include "nn/nn_internal.h"

/* ---- blocked GEMMs ------------------------------------------------------------------ */

typedef struct {
    nn_pool *pool;
    nn_lowp *lp;    /* NULL: OpenBLAS, whole experts at once */
    float *sa, *sc; /* (MOE_BLOCK, max(C, F1)) each */
} gx;

/* C = op(A) op(B) (+ bias, a row vector) + beta C */
static mtc_result_t gx_gemm(const gx *g, int tA, int tB, int M, int N, int K, const float *A,
                            int lda, const float *B, int ldb, const float *bias, float beta,
                            float *C, int ldc) {
    if (g->lp)
        return nn_lowp_gemm(g->pool, g->lp, MTC_DTYPE_F32, MTC_DTYPE_F32, tA, tB, M, N, K, 1.0f, A,
                            lda, B, ldb, bias, beta, C, ldc);
    if (bias) { /* C starts as the bias rows, and BLAS adds the product */
        for (int r = 0; r < M; r++)
            memcpy(C + (size_t)r * ldc, bias, (size_t)N * sizeof(float));
        beta = 1.0f;
    }
    nn_sgemm(g->pool, tA, tB, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    return MTC_OK;
}

static int pad_rows(int t) { return (t + MOE_PAD - 1) / MOE_PAD * MOE_PAD; }

int moe_gemm_rows(int rows, int blocked, int *calls) {
    if (rows <= 0) return *calls = 0;
    if (!blocked) return *calls = 1, rows;
    int full = rows / MOE_BLOCK, t = rows - full * MOE_BLOCK;
    *calls = full + (t > 0);
    return full * MOE_BLOCK + pad_rows(t);
}

/* Y (c, N) = X (c, K) op(W) + beta Y; W (OUT, IN) row-major as nn.Linear,
 * op = transpose when tW (forward: K = IN) or not (data gradient: N = IN).
 * X and Y hold `avail` >= c rows from here; the rows past c belong to the
 * experts after this one, X's are only read and Y's are written after this
 * call. So a padded last block that fits in `avail` runs in place: its
 * padding rows read the next expert's X and write its Y, which that expert
 * overwrites (a matmul's row depends on its own row of X only). Only a
 * block that would run past `avail` is copied to the stage. */
static mtc_result_t gx_rows(const gx *g, int c, int avail, int K, int N, const float *X,
                            const float *W, int tW, const float *bias, float beta, float *Y) {
    int ldw = tW ? K : N, r = 0;
    if (c <= 0) return MTC_OK;
    if (!g->lp) return gx_gemm(g, 0, tW, c, N, K, X, K, W, ldw, bias, beta, Y, N);
    for (; r + MOE_BLOCK <= c; r += MOE_BLOCK)
        MTC_CHECK(gx_gemm(g, 0, tW, MOE_BLOCK, N, K, X + (size_t)r * K, K, W, ldw, bias, beta,
                          Y + (size_t)r * N, N));
    int t = c - r, tp = pad_rows(t);
    if (!t) return MTC_OK;
    if (r + tp <= avail)
        return gx_gemm(g, 0, tW, tp, N, K, X + (size_t)r * K, K, W, ldw, bias, beta,
                       Y + (size_t)r * N, N);
    memcpy(g->sa, X + (size_t)r * K, (size_t)t * K * sizeof(float));
    memset(g->sa + (size_t)t * K, 0, (size_t)(tp - t) * K * sizeof(float));
    if (beta != 0.0f) { /* the padding rows start at zero too: no stale values in the sums */
        memcpy(g->sc, Y + (size_t)r * N, (size_t)t * N * sizeof(float));
        memset(g->sc + (size_t)t * N, 0, (size_t)(tp - t) * N * sizeof(float));
    }
    MTC_CHECK(gx_gemm(g, 0, tW, tp, N, K, g->sa, K, W, ldw, bias, beta, g->sc, N));
    memcpy(Y + (size_t)r * N, g->sc, (size_t)t * N * sizeof(float));
    return MTC_OK;
}

/* dW (OUT, IN) += D (c, OUT)^T X (c, IN), the rows summed in blocks, in order. */
static mtc_result_t gx_weight(const gx *g, int c, int OUT, int IN, const float *D, const float *X,
                              float *dW) {
    int r = 0;
    if (c <= 0) return MTC_OK;
    if (!g->lp) return gx_gemm(g, 1, 0, OUT, IN, c, D, OUT, X, IN, NULL, 1.0f, dW, IN);
    for (; r + MOE_BLOCK <= c; r += MOE_BLOCK)
        MTC_CHECK(gx_gemm(g, 1, 0, OUT, IN, MOE_BLOCK, D + (size_t)r * OUT, OUT, X + (size_t)r * IN,
                          IN, NULL, 1.0f, dW, IN));
    int t = c - r, tp = pad_rows(t);
    if (!t) return MTC_OK;
    memcpy(g->sa, D + (size_t)r * OUT, (size_t)t * OUT * sizeof(float));
    memset(g->sa + (size_t)t * OUT, 0, (size_t)(tp - t) * OUT * sizeof(float));
    memcpy(g->sc, X + (size_t)r * IN, (size_t)t * IN * sizeof(float));
    memset(g->sc + (size_t)t * IN, 0, (size_t)(tp - t) * IN * sizeof(float));
    return gx_gemm(g, 1, 0, OUT, IN, tp, g->sa, OUT, g->sc, IN, NULL, 1.0f, dW, IN);
}

static gx gx_make(nn_pool *pool, float *stage, const moe_dims *d) {
    int F1 = d->swiglu ? 2 * d->F : d->F, mx = d->C > F1 ? d->C : F1;
    gx g = {pool, nn_pool_lowp(pool), stage, stage + (size_t)MOE_BLOCK * mx};
    return g;
}

size_t moe_stage_floats(const moe_dims *d) {
    int F1 = d->swiglu ? 2 * d->F : d->F, mx = d->C > F1 ? d->C : F1;
    return 2 * (size_t)MOE_BLOCK * mx;
}

/* ---- the per-row probability loops ------------------------------------------------
 * Rows go in blocks of 64 (by the row count only), so the bits never depend
 * on the pool size. The elementwise products keep the serial loops' bits;
 * the probability gradient's dot adds exact float x float products in
 * double on 8 lanes summed in a fixed order: it differs from the serial
 * double sum by a few double ulps, far below the float it is rounded to. */
typedef double moe_v8d __attribute__((vector_size(64)));

/* y (n) = x (n) * p */
static void moe_vscale(float *y, const float *x, float p, int n) {
    nn_v8 pv = NN_V8_SET1(p);
    int f = 0;
    for (; f + 8 <= n; f += 8)
        NN_V8_ST(y + f, NN_V8_LD(x + f) * pv);
    for (; f < n; f++)
        y[f] = x[f] * p;
}

/* sum of a[f] * b[f] in double */
static double moe_ddot(const float *a, const float *b, int n) {
    moe_v8d acc = {0};
    int f = 0;
    for (; f + 8 <= n; f += 8)
        acc += __builtin_convertvector(NN_V8_LD(a + f), moe_v8d) *
               __builtin_convertvector(NN_V8_LD(b + f), moe_v8d);
    double s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; f < n; f++)
        s += (double)a[f] * b[f];
    return s;
}

typedef struct {
    float *z, *dz, *dprow;
    const float *fchg, *prow, *dy;
    const int *counts;
    const moe_weights *w;
    int El, e0, M, F, C, bias, tiles, bwd;
} moe_rows_job;

/* forward: z = fchg * p; backward: dprow = dz . fchg (+ dy . b2), then dz *= p */
static void moe_rows_tile(int i, void *vp) {
    const moe_rows_job *j = vp;
    size_t lo, hi;
    lo = (size_t)i * 64, hi = lo + 64 < (size_t)j->M ? lo + 64 : (size_t)j->M;
    int e = 0, end = j->El > 0 ? j->counts[0] : 0;
    for (int q = (int)lo; q < (int)hi; q++) {
        size_t o = (size_t)q * j->F;
        if (!j->bwd) {
            moe_vscale(j->z + o, j->fchg + o, j->prow[q], j->F);
            continue;
        }
        while (e + 1 < j->El && q >= end)
            end += j->counts[++e];
        double dp = moe_ddot(j->dz + o, j->fchg + o, j->F);
        const float *b2 = j->bias ? j->w->fc2b[j->e0 + e] : NULL;
        if (b2) dp += moe_ddot(j->dy + (size_t)q * j->C, b2, j->C);
        j->dprow[q] = (float)dp;
        moe_vscale(j->dz + o, j->dz + o, j->prow[q], j->F);
    }
}

static void moe_rows_run(nn_pool *pool, moe_rows_job *j) {
    j->tiles = j->M > 0 ? (j->M + 63) / 64 : 0;
    nn_pool_run(pool, j->tiles, moe_rows_tile, j);
}

/* ---- row passes on the pool --------------------------------------------------------
 * Gathers and fills split the rows, sums split the columns: every element
 * sees the serial loop's operations in its order, so the bits are the
 * serial loop's whatever the split. */
enum { PASS_GATHER, PASS_SCATTER_ADD, PASS_COLSUM, PASS_FILL_SCALED };

typedef struct {
    float *dst;
    const float *src, *scale; /* scale: per row (COLSUM, FILL_SCALED), NULL = 1 */
    const int *tok;
    int base, M, W, lds, mode, tiles;
} row_pass;

static void row_pass_tile(int i, void *vp) {
    const row_pass *j = vp;
    size_t lo, hi;
    if (j->mode == PASS_GATHER || j->mode == PASS_FILL_SCALED) {
        nn_split_range((size_t)j->M, j->tiles, i, 1, &lo, &hi);
        for (size_t r = lo; r < hi; r++) {
            float *d = j->dst + r * (size_t)j->W;
            if (j->mode == PASS_GATHER) {
                memcpy(d, j->src + (size_t)(j->tok[r] - j->base) * j->W,
                       (size_t)j->W * sizeof(float));
                continue;
            }
            nn_v8 pv = NN_V8_SET1(j->scale[r]); /* o = b2 * p */
            int c = 0;
            for (; c + 8 <= j->W; c += 8)
                NN_V8_ST(d + c, NN_V8_LD(j->src + c) * pv);
            for (; c < j->W; c++)
                d[c] = j->src[c] * j->scale[r];
        }
        return;
    }
    nn_split_range((size_t)j->W, j->tiles, i, 16, &lo, &hi);
    for (int q = 0; q < j->M; q++) { /* lanes are columns: the serial loop's operations */
        const float *x = j->src + (size_t)q * j->lds;
        float *o =
            j->mode == PASS_SCATTER_ADD ? j->dst + (size_t)(j->tok[q] - j->base) * j->W : j->dst;
        size_t c = lo;
        if (j->mode == PASS_COLSUM && j->scale) {
            float p = j->scale[q];
            nn_v8 pv = NN_V8_SET1(p);
            for (; c + 8 <= hi; c += 8)
                NN_V8_ST(o + c, NN_V8_LD(o + c) + pv * NN_V8_LD(x + c));
            for (; c < hi; c++)
                o[c] += p * x[c];
            continue;
        }
        for (; c + 8 <= hi; c += 8)
            NN_V8_ST(o + c, NN_V8_LD(o + c) + NN_V8_LD(x + c));
        for (; c < hi; c++)
            o[c] += x[c];
    }
}

static void row_pass_run(nn_pool *pool, row_pass j) {
    if (j.M <= 0 || j.W <= 0) return;
    int by_rows = j.mode == PASS_GATHER || j.mode == PASS_FILL_SCALED;
    j.tiles = by_rows ? nn_split_count((size_t)j.M, 64) : nn_split_count((size_t)j.W, 128);
    nn_pool_run(pool, j.tiles, row_pass_tile, &j);
}

/* ---- the experts -------------------------------------------------------------------- */

void moe_experts_act(nn_pool *pool, float *fchg, const float *fch, int M, const moe_dims *d) {
    if (d->swiglu)
        nn_swiglu_forward(pool, fchg, fch, M, d->F);
    else
        nn_gelu_forward(pool, fchg, fch, (size_t)M * d->F);
}

mtc_result_t moe_experts_forward(nn_pool *pool, float *y, float *fch, float *fchg, float *z,
                                 float *stage, const float *xp, const float *prow,
                                 const int *counts, int El, int e0, const moe_weights *w,
                                 const moe_dims *d, int M) {
    int C = d->C, F = d->F, F1 = d->swiglu ? 2 * F : F;
    gx g = gx_make(pool, stage, d);
    for (int e = 0, off = 0; e < El; off += counts[e], e++) { /* fch = xp W1^T + b1 */
        const float *b = d->bias ? w->fc1b[e0 + e] : NULL;
        MTC_CHECK(gx_rows(&g, counts[e], M - off, C, F1, xp + (size_t)off * C, w->fc1w[e0 + e], 1,
                          b, 0.0f, fch + (size_t)off * F1));
    }
    moe_experts_act(pool, fchg, fch, M, d);
    moe_rows_job rj = {.z = z, .fchg = fchg, .prow = prow, .M = M, .F = F}; /* z = fchg * p */
    moe_rows_run(pool, &rj);
    for (int e = 0, off = 0; e < El; off += counts[e], e++) { /* y = z W2^T + p b2 */
        const float *b = d->bias ? w->fc2b[e0 + e] : NULL;
        float *o = y + (size_t)off * C;
        if (b)
            row_pass_run(pool, (row_pass){.dst = o,
                                          .src = b,
                                          .scale = prow + off,
                                          .M = counts[e],
                                          .W = C,
                                          .mode = PASS_FILL_SCALED});
        MTC_CHECK(gx_rows(&g, counts[e], M - off, F, C, z + (size_t)off * F, w->fc2w[e0 + e], 1,
                          NULL, b ? 1.0f : 0.0f, o));
    }
    return MTC_OK;
}

mtc_result_t moe_experts_backward(nn_pool *pool, float *dxp, float *dprow, const float *dy,
                                  const float *xp, const float *fch, const float *fchg,
                                  const float *prow, const int *counts, int El, int e0,
                                  const moe_weights *w, const moe_weights *dw, const moe_dims *d,
                                  int M, float *z, float *dz, float *dh, float *stage) {
    int C = d->C, F = d->F, F1 = d->swiglu ? 2 * F : F;
    gx g = gx_make(pool, stage, d);
    moe_rows_job zj = {.z = z, .fchg = fchg, .prow = prow, .M = M, .F = F};
    moe_rows_run(pool, &zj);
    /* fc2: dz = dy W2; dW2 += dy^T z; db2 += sum prob * dy */
    for (int e = 0, off = 0; e < El; off += counts[e], e++) {
        MTC_CHECK(gx_rows(&g, counts[e], M - off, C, F, dy + (size_t)off * C, w->fc2w[e0 + e], 0,
                          NULL, 0.0f, dz + (size_t)off * F));
        if (dw->fc2w[e0 + e])
            MTC_CHECK(gx_weight(&g, counts[e], C, F, dy + (size_t)off * C, z + (size_t)off * F,
                                dw->fc2w[e0 + e]));
    }
    /* db2 += sum prob * dy (rows in order) */
    for (int e = 0, r0 = 0; d->bias && e < El; r0 += counts[e], e++)
        if (dw->fc2b[e0 + e])
            row_pass_run(pool, (row_pass){.dst = dw->fc2b[e0 + e],
                                          .src = dy + (size_t)r0 * C,
                                          .scale = prow + r0,
                                          .M = counts[e],
                                          .W = C,
                                          .lds = C,
                                          .mode = PASS_COLSUM});
    /* dprow = dz . fchg (+ dy . b2); dz *= prob */
    moe_rows_job bj = {.z = z,
                       .dz = dz,
                       .dprow = dprow,
                       .fchg = fchg,
                       .prow = prow,
                       .dy = dy,
                       .counts = counts,
                       .w = w,
                       .El = El,
                       .e0 = e0,
                       .M = M,
                       .F = F,
                       .C = C,
                       .bias = d->bias,
                       .bwd = 1};
    moe_rows_run(pool, &bj);
    if (d->swiglu)
        nn_swiglu_backward(pool, dh, dz, fch, M, F);
    else
        nn_gelu_backward(pool, dh, fch, dz, (size_t)M * F);
    /* fc1: dxp = dh W1; dW1 += dh^T xp; db1 += sum dh */
    for (int e = 0, off = 0; e < El; off += counts[e], e++) {
        MTC_CHECK(gx_rows(&g, counts[e], M - off, F1, C, dh + (size_t)off * F1, w->fc1w[e0 + e], 0,
                          NULL, 0.0f, dxp + (size_t)off * C));
        if (dw->fc1w[e0 + e])
            MTC_CHECK(gx_weight(&g, counts[e], F1, C, dh + (size_t)off * F1, xp + (size_t)off * C,
                                dw->fc1w[e0 + e]));
    }
    for (int e = 0, r0 = 0; d->bias && e < El; r0 += counts[e], e++) /* rows in order */
        if (dw->fc1b[e0 + e])
            row_pass_run(pool, (row_pass){.dst = dw->fc1b[e0 + e],
                                          .src = dh + (size_t)r0 * F1,
                                          .M = counts[e],
                                          .W = F1,
                                          .lds = F1,
                                          .mode = PASS_COLSUM});
    return MTC_OK;
}

void moe_gather_rows(nn_pool *pool, float *dst, const float *src, const int *tok, int base, int M,
                     int W) {
    row_pass_run(
        pool,
        (row_pass){
            .dst = dst, .src = src, .tok = tok, .base = base, .M = M, .W = W, .mode = PASS_GATHER});
}

void moe_scatter_add(nn_pool *pool, float *dst, const float *src, int lds, const int *tok, int base,
                     int M, int W) {
    row_pass_run(pool, (row_pass){.dst = dst,
                                  .src = src,
                                  .tok = tok,
                                  .base = base,
                                  .M = M,
                                  .W = W,
                                  .lds = lds,
                                  .mode = PASS_SCATTER_ADD});
}
