/* nn/gemm.c - GEMM split across the pool, and the linear layer on top.
 *
 * nn_sgemm cuts C into row blocks (or column blocks when C is wide and
 * short) and each thread calls single-threaded cblas_sgemm on its block.
 * The K dimension is never split and block boundaries depend only on the
 * shape, so every element of C is computed by the same BLAS call whatever
 * the pool size; the test checks that 1 and 3 threads give identical bits.
 * Relies on OpenBLAS being set to one thread (pool.c).
 * Does not contain a hand-written GEMM. */
#include <cblas.h>
#include <string.h>

#include "nn/lowp.h"
#include "nn/nn.h"
#include "nn/nn_internal.h"

typedef struct {
    int transA, transB, M, N, K;
    float alpha, beta;
    const float *A, *B;
    int lda, ldb, ldc;
    float *C;
    const float *bias; /* (N) every row of C starts as bias (beta must be 0), or NULL */
    int tiles, by_rows;
} gemm_job;

void nn_blas_sgemm(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (beta == 0.0f) {
        if (ldc == N)
            memset(C, 0, (size_t)M * N * sizeof(float));
        else
            for (int r = 0; r < M; r++)
                memset(C + (size_t)r * ldc, 0, (size_t)N * sizeof(float));
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                transB ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static void gemm_tile(int i, void *vp) {
    const gemm_job *g = vp;
    size_t lo, hi;
    const float *A = g->A, *B = g->B;
    float *C = g->C;
    int M = g->M, N = g->N;
    if (g->by_rows) {
        nn_split_range((size_t)g->M, g->tiles, i, 8, &lo, &hi);
        M = (int)(hi - lo);
        A += g->transA ? lo : lo * (size_t)g->lda;
        C += lo * (size_t)g->ldc;
    } else {
        nn_split_range((size_t)g->N, g->tiles, i, 16, &lo, &hi);
        N = (int)(hi - lo);
        B += g->transB ? lo * (size_t)g->ldb : lo;
        C += lo;
    }
    if (M <= 0 || N <= 0) return;
    float beta = g->beta;
    if (g->bias) { /* C starts as the bias rows and BLAS adds the product: no extra pass */
        const float *bias = g->bias + (g->by_rows ? 0 : lo);
        for (int r = 0; r < M; r++)
            memcpy(C + (size_t)r * g->ldc, bias, (size_t)N * sizeof(float));
        beta = 1.0f;
    }
    nn_blas_sgemm(g->transA, g->transB, M, N, g->K, g->alpha, A, g->lda, B, g->ldb, beta, C,
                  g->ldc);
}

/* Tiles depend on the shape only, never on the pool size: OpenBLAS's
 * result for an element can change with the size of the block it sits in
 * (edge kernels), so splitting by thread count would make the bits depend
 * on the number of threads. The larger of M and N is split, because every
 * block repacks the whole of the other operand: with R rows per block each
 * repacked element serves 2R flops, so blocks cost about 15/R of the
 * throughput (3% at 512 rows, 6% at 256: measured with OpenBLAS 0.3.21).
 * Hence 2 blocks from 256 rows on, 4 from 2048 on, none for small products.
 * A product whose K is at least 8 times both M and N (the LM head's input
 * gradient, K = vocabulary) is split by columns whatever M and N: on the
 * Zen 5 host (bench/gemm_bf16.sh, 1024 x 384 x 50304, 2 threads) row blocks
 * ran 230 GFLOP/s on OpenBLAS and oneDNN, column blocks 350 (bf16 575 ->
 * 710). Used by gemm_run and oneDNN's tiling (gemm_dnnl.c) alike. */
int nn_gemm_tiles(int M, int N, int K, int by_rows) {
    int extent = by_rows ? M : N;
    if (2.0 * M * (double)N * K < 4.0e6) return 1;
    return extent >= 2048 ? 4 : extent >= 256 ? 2 : 1;
}

int nn_gemm_split(int M, int N, int K, int *tiles) {
    int by_rows = M >= N;
    if ((double)K >= 8.0 * M && (double)K >= 8.0 * N) by_rows = 0;
    *tiles = nn_gemm_tiles(M, N, K, by_rows);
    return by_rows;
}

static void gemm_run(nn_pool *pool, gemm_job *g) {
    nn_lowp *lp = nn_pool_lowp(pool);
    if (lp && (g->beta == 0.0f || g->beta == 1.0f) && (!g->bias || g->alpha == 1.0f) &&
        nn_lowp_gemm(pool, lp, MTC_DTYPE_F32, MTC_DTYPE_F32, g->transA, g->transB, g->M, g->N, g->K,
                     g->alpha, g->A, g->lda, g->B, g->ldb, g->bias, g->beta, g->C,
                     g->ldc) == MTC_OK)
        return; /* oneDNN's matmul (nn_lowp tiles it by shape, like below) */
    int tiles;
    g->by_rows = nn_gemm_split(g->M, g->N, g->K, &tiles);
    g->tiles = tiles;
    nn_pool_run(pool, tiles, gemm_tile, g);
}

void nn_sgemm(nn_pool *pool, int transA, int transB, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    gemm_job g = {transA, transB, M, N, K, alpha, beta, A, B, lda, ldb, ldc, C, NULL, 0, 0};
    gemm_run(pool, &g);
}

/* out (N,OUT) = inp (N,IN) · wᵀ (IN,OUT) + bias (OUT) */
void nn_linear_forward(nn_pool *pool, float *out, const float *inp, const float *w,
                       const float *bias, int N, int IN, int OUT) {
    if (N <= 0 || OUT <= 0) return;
    gemm_job g = {0, 1, N, OUT, IN, 1.0f, 0.0f, inp, w, IN, IN, OUT, out, bias, 0, 0};
    gemm_run(pool, &g);
}

typedef struct {
    float *db;         /* (OUT) */
    const float *dout; /* (N, OUT) */
    int N, OUT, tiles;
} colsum_job;

/* db[j] += sum over rows of dout[:, j], rows in order, for one column block. */
static void colsum_tile(int i, void *vp) {
    const colsum_job *c = vp;
    size_t lo, hi;
    nn_split_range((size_t)c->OUT, c->tiles, i, 16, &lo, &hi);
    float acc[256];
    for (size_t j0 = lo; j0 < hi; j0 += 256) {
        size_t w = hi - j0 < 256 ? hi - j0 : 256;
        memset(acc, 0, w * sizeof(float));
        for (int r = 0; r < c->N; r++) { /* lanes are columns: no sum is reordered */
            const float *d = c->dout + (size_t)r * c->OUT + j0;
            size_t j = 0;
            for (; j + 8 <= w; j += 8)
                NN_V8_ST(acc + j, NN_V8_LD(acc + j) + NN_V8_LD(d + j));
            for (; j < w; j++)
                acc[j] += d[j];
        }
        for (size_t j = 0; j < w; j++)
            c->db[j0 + j] += acc[j];
    }
}

void nn_linear_backward(nn_pool *pool, float *dinp, float *dw, float *db, const float *dout,
                        const float *inp, const float *w, int N, int IN, int OUT) {
    if (N <= 0) return;
    /* the weight gradient first: it is the last reader of inp, so dinp may alias inp */
    if (dw) /* dw (OUT,IN) += doutᵀ (OUT,N) · inp (N,IN) */
        nn_sgemm(pool, 1, 0, OUT, IN, N, 1.0f, dout, OUT, inp, IN, 1.0f, dw, IN);
    if (dinp) /* dinp (N,IN) = dout (N,OUT) · w (OUT,IN) */
        nn_sgemm(pool, 0, 0, N, IN, OUT, 1.0f, dout, OUT, w, IN, 0.0f, dinp, IN);
    if (db) {
        colsum_job c = {db, dout, N, OUT, 0};
        c.tiles = nn_split_count((size_t)OUT, 128);
        nn_pool_run(pool, c.tiles, colsum_tile, &c);
    }
}
