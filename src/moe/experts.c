/* moe/experts.c - the local experts as grouped GEMMs (see moe_internal.h):
 * one nn_pool_run per projection covers every local expert; a task is
 * (expert, block of 32 output rows) and calls single-threaded cblas_sgemm
 * on it, so each element is computed by one call whose shape depends only
 * on the routing, never on the number of threads. An expert with no rows
 * has no task. The router's probability multiplies after the activation
 * and scales fc2's bias: p * (fc2(act(fc1 x)) + b2), as Megatron's
 * grouped MLP. Does not communicate or allocate. */
#include <cblas.h>
#include <string.h>

#include "moe/moe_internal.h"
#include "nn/llama.h"

#define MOE_BLOCK 32

/* ---- grouped GEMM ------------------------------------------------------------------- */

typedef enum { GG_FWD = 0, GG_DATA, GG_WEIGHT } gg_mode;

typedef struct {
    gg_mode mode;
    int E, IN, OUT;
    const int *counts; /* (E) rows per expert */
    const float *x;    /* FWD: in (M, IN); DATA: dout (M, OUT); WEIGHT: dout (M, OUT) */
    const float *x2;   /* WEIGHT: in (M, IN) */
    float *const *w;   /* [E] (OUT, IN): FWD/DATA read, WEIGHT accumulates */
    float *const *b;   /* FWD: [E] (OUT) bias or NULL */
    const float *rs;   /* FWD: (M) bias row scale or NULL (1) */
    float *y;          /* FWD: (M, OUT); DATA: (M, IN) */
} gg_job;

/* Task i -> (expert, first row of its block) */
static int gg_locate(const gg_job *j, int i, int *e_out, int *r0_out, int *row_off) {
    int off = 0;
    for (int e = 0; e < j->E; e++) {
        int c = j->counts[e];
        int span = j->mode == GG_WEIGHT ? (c ? j->OUT : 0) : c;
        int nb = (span + MOE_BLOCK - 1) / MOE_BLOCK;
        if (i < nb) {
            *e_out = e, *r0_out = i * MOE_BLOCK, *row_off = off;
            return span;
        }
        i -= nb;
        off += c;
    }
    return -1;
}

static void gg_task(int i, void *arg) {
    const gg_job *j = arg;
    int e, r0, off;
    int span = gg_locate(j, i, &e, &r0, &off);
    if (span < 0) return;
    int nr = span - r0 < MOE_BLOCK ? span - r0 : MOE_BLOCK, c = j->counts[e];
    const float *w = j->w[e];
    if (j->mode == GG_FWD) {
        float *y = j->y + (size_t)(off + r0) * j->OUT;
        const float *b = j->b ? j->b[e] : NULL;
        for (int r = 0; r < nr; r++) {
            float s = j->rs ? j->rs[off + r0 + r] : 1.0f;
            for (int o = 0; o < j->OUT; o++)
                y[(size_t)r * j->OUT + o] = b ? b[o] * s : 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, j->OUT, j->IN, 1.0f,
                    j->x + (size_t)(off + r0) * j->IN, j->IN, w, j->IN, 1.0f, y, j->OUT);
    } else if (j->mode == GG_DATA) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, j->IN, j->OUT, 1.0f,
                    j->x + (size_t)(off + r0) * j->OUT, j->OUT, w, j->IN, 0.0f,
                    j->y + (size_t)(off + r0) * j->IN, j->IN);
    } else { /* dW[r0 : r0 + nr] += dout_e[:, r0 : r0 + nr]^T in_e */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nr, j->IN, c, 1.0f,
                    j->x + (size_t)off * j->OUT + r0, j->OUT, j->x2 + (size_t)off * j->IN, j->IN,
                    1.0f, j->w[e] + (size_t)r0 * j->IN, j->IN);
    }
}

static void gg_run(nn_pool *pool, gg_job *j) {
    int n = 0;
    for (int e = 0; e < j->E; e++) {
        int c = j->counts[e];
        int span = j->mode == GG_WEIGHT ? (c ? j->OUT : 0) : c;
        n += (span + MOE_BLOCK - 1) / MOE_BLOCK;
    }
    if (n) nn_pool_run(pool, n, gg_task, j);
}

void moe_experts_forward(nn_pool *pool, float *y, float *fch, float *fchg, float *z,
                         const float *xp, const float *prow, const int *counts, int El, int e0,
                         const moe_weights *w, const moe_dims *d, int M) {
    int C = d->C, F = d->F, F1 = d->swiglu ? 2 * F : F;
    gg_job j1 = {GG_FWD, El, C, F1, counts, xp, NULL, w->fc1w + e0, d->bias ? w->fc1b + e0 : NULL,
                 NULL,   fch};
    gg_run(pool, &j1);
    if (d->swiglu)
        nn_swiglu_forward(pool, fchg, fch, M, F);
    else
        nn_gelu_forward(pool, fchg, fch, (size_t)M * F);
    for (int q = 0; q < M; q++)
        for (int f = 0; f < F; f++)
            z[(size_t)q * F + f] = fchg[(size_t)q * F + f] * prow[q];
    gg_job j2 = {GG_FWD, El, F, C, counts, z, NULL, w->fc2w + e0, d->bias ? w->fc2b + e0 : NULL,
                 prow,   y};
    gg_run(pool, &j2);
}

void moe_experts_backward(nn_pool *pool, float *dxp, float *dprow, const float *dy, const float *xp,
                          const float *fch, const float *fchg, const float *prow, const int *counts,
                          int El, int e0, const moe_weights *w, const moe_weights *dw,
                          const moe_dims *d, int M, float *z, float *dz, float *dh) {
    int C = d->C, F = d->F, F1 = d->swiglu ? 2 * F : F;
    for (int q = 0; q < M; q++)
        for (int f = 0; f < F; f++)
            z[(size_t)q * F + f] = fchg[(size_t)q * F + f] * prow[q];
    /* fc2: dz = dy W2; dW2 += dy^T z; db2 += sum prob * dy */
    gg_job jd = {GG_DATA, El, F, C, counts, dy, NULL, w->fc2w + e0, NULL, NULL, dz};
    gg_run(pool, &jd);
    gg_job jw = {GG_WEIGHT, El, F, C, counts, dy, z, dw->fc2w + e0, NULL, NULL, NULL};
    gg_run(pool, &jw);
    for (int e = 0, r0 = 0; e < El; r0 += counts[e], e++)
        for (int q = r0; q < r0 + counts[e]; q++) {
            const float *g = dy + (size_t)q * C;
            double dp = 0;
            for (int f = 0; f < F; f++)
                dp += (double)dz[(size_t)q * F + f] * fchg[(size_t)q * F + f];
            if (d->bias && w->fc2b[e0 + e]) {
                for (int c = 0; c < C; c++)
                    dp += (double)g[c] * w->fc2b[e0 + e][c];
                for (int c = 0; c < C; c++)
                    dw->fc2b[e0 + e][c] += prow[q] * g[c];
            }
            dprow[q] = (float)dp;
            for (int f = 0; f < F; f++)
                dz[(size_t)q * F + f] *= prow[q];
        }
    if (d->swiglu)
        nn_swiglu_backward(pool, dh, dz, fch, M, F);
    else
        nn_gelu_backward(pool, dh, fch, dz, (size_t)M * F);
    /* fc1: dxp = dh W1; dW1 += dh^T xp; db1 += sum dh */
    gg_job jd1 = {GG_DATA, El, C, F1, counts, dh, NULL, w->fc1w + e0, NULL, NULL, dxp};
    gg_run(pool, &jd1);
    gg_job jw1 = {GG_WEIGHT, El, C, F1, counts, dh, xp, dw->fc1w + e0, NULL, NULL, NULL};
    gg_run(pool, &jw1);
    if (d->bias)
        for (int e = 0, r0 = 0; e < El; r0 += counts[e], e++)
            if (dw->fc1b[e0 + e])
                for (int q = r0; q < r0 + counts[e]; q++)
                    for (int f = 0; f < F1; f++)
                        dw->fc1b[e0 + e][f] += dh[(size_t)q * F1 + f];
}

void moe_gather_rows(float *dst, const float *src, const int *tok, int base, int M, int W) {
    for (int r = 0; r < M; r++)
        memcpy(dst + (size_t)r * W, src + (size_t)(tok[r] - base) * W, (size_t)W * sizeof(float));
}
