/* bench/kernels/bench_nn.c - microbenchmarks of the nn kernels.
 *
 * 1. sgemm throughput: one cblas_sgemm call (OpenBLAS with 1 and 2 threads)
 *    against nn_sgemm on pools of 1 and 2 threads, for the GEMM shapes of a
 *    GPT layer.
 * 2. time per call of every kernel of one transformer layer (forward and
 *    backward) at B, T, C, NH given on the command line, and of the LM head.
 *
 * Build (after building the library in build-nn or build):
 *   cc -O2 -march=native -D_GNU_SOURCE -Isrc bench/kernels/bench_nn.c \
 *      build/libmtc.a $(pkg-config --cflags --libs openblas) -lpthread -lm -o /tmp/bench_nn
 * Run: /tmp/bench_nn [B T C NH V threads]   (defaults 4 256 384 6 8192 2)
 *      MTC_BENCH_CPU=1 times by thread CPU time (use with threads = 1).
 * Keep runs short: the machine is shared. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/rng.h"
#include "nn/nn.h"

/* Wall time, or this thread's CPU time (MTC_BENCH_CPU=1: steadier on a
 * busy machine, meaningful for pools of one thread only). */
static clockid_t bench_clock = CLOCK_MONOTONIC;
static double now(void) {
    struct timespec ts;
    clock_gettime(bench_clock, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static float *randv(size_t n, uint64_t seed) {
    float *x = malloc(n * sizeof(float));
    mtc_rng_fill_normal(x, n, seed, 1, 0, 0.0f, 1.0f);
    return x;
}

/* best of `reps` timings of fn, in seconds */
#define BEST(reps, stmt)                                                                           \
    ({                                                                                             \
        double best_ = 1e30;                                                                       \
        for (int r_ = 0; r_ < (reps); r_++) {                                                      \
            double t0_ = now();                                                                    \
            stmt;                                                                                  \
            double t_ = now() - t0_;                                                               \
            if (t_ < best_) best_ = t_;                                                            \
        }                                                                                          \
        best_;                                                                                     \
    })

static void bench_sgemm(nn_pool *p1, nn_pool *p2, int M, int N, int K, int ta, int tb) {
    float *A = randv((size_t)M * K, 1), *B = randv((size_t)K * N, 2), *C = randv((size_t)M * N, 3);
    int lda = ta ? M : K, ldb = tb ? K : N;
    double fl = 2.0 * M * N * K;
    int reps = fl > 2e9 ? 3 : 6;
    CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
    openblas_set_num_threads(1);
    double c1 = BEST(reps, cblas_sgemm(CblasRowMajor, TA, TB, M, N, K, 1, A, lda, B, ldb, 0, C, N));
    openblas_set_num_threads(2);
    double c2 = BEST(reps, cblas_sgemm(CblasRowMajor, TA, TB, M, N, K, 1, A, lda, B, ldb, 0, C, N));
    openblas_set_num_threads(1);
    double n1 = BEST(reps, nn_sgemm(p1, ta, tb, M, N, K, 1, A, lda, B, ldb, 0, C, N));
    double n2 = BEST(reps, nn_sgemm(p2, ta, tb, M, N, K, 1, A, lda, B, ldb, 0, C, N));
    printf("sgemm %c%c M=%5d N=%5d K=%5d  GFLOP/s: cblas(1t) %6.1f  cblas(2t) %6.1f  "
           "nn_sgemm(1t) %6.1f  nn_sgemm(2t) %6.1f\n",
           ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, fl / c1 * 1e-9, fl / c2 * 1e-9, fl / n1 * 1e-9,
           fl / n2 * 1e-9);
    free(A), free(B), free(C);
}

int main(int argc, char **argv) {
    int B = 4, T = 256, C = 384, NH = 6, V = 8192, nth = 2;
    if (argc > 1) B = atoi(argv[1]);
    if (argc > 2) T = atoi(argv[2]);
    if (argc > 3) C = atoi(argv[3]);
    if (argc > 4) NH = atoi(argv[4]);
    if (argc > 5) V = atoi(argv[5]);
    if (argc > 6) nth = atoi(argv[6]);
    int N = B * T, HS = C / NH, F = 4 * C;
    if (getenv("MTC_BENCH_CPU") && atoi(getenv("MTC_BENCH_CPU")))
        bench_clock = CLOCK_THREAD_CPUTIME_ID;
    nn_pool *p1, *p2, *pn;
    if (nn_pool_create(1, &p1) || nn_pool_create(2, &p2) || nn_pool_create(nth, &pn)) return 1;

    bench_sgemm(p1, p2, N, 3 * C, C, 0, 1); /* qkv forward */
    bench_sgemm(p1, p2, N, F, C, 0, 1);     /* fc forward */
    bench_sgemm(p1, p2, N, C, F, 0, 0);     /* fcproj dinp */
    bench_sgemm(p1, p2, F, C, N, 1, 0);     /* fc dw */
    bench_sgemm(p1, p2, 1024, 1024, 1024, 0, 0);

    size_t nC = (size_t)N * C, nF = (size_t)N * F, na = (size_t)B * NH * T;
    float *x = randv(nC, 4), *y = malloc(nC * 4), *g = randv(nC, 5), *w = randv(C, 6);
    float *b = randv(C, 7), *mr = malloc(2 * N * 4), *dw = calloc(C, 4), *db = calloc(C, 4);
    float *qkv = randv(3 * nC, 8), *dqkv = malloc(3 * nC * 4), *att = malloc(na * 4);
    float *h = randv(nF, 9), *hg = malloc(nF * 4);
    float *Wfc = randv((size_t)F * C, 10), *dWfc = calloc((size_t)F * C, 4), *dbf = calloc(F, 4);
    float *logits = malloc((size_t)N * V * 4), *wte = randv((size_t)V * C, 11);
    float *dwte = calloc((size_t)V * C, 4), *losses = malloc(N * 4);
    int *tg = malloc(N * sizeof(int));
    for (int i = 0; i < N; i++)
        tg[i] = (i * 7919) % V;
    for (size_t i = 0; i < (size_t)F * C; i++)
        Wfc[i] *= 0.02f;
    for (size_t i = 0; i < (size_t)V * C; i++)
        wte[i] *= 0.02f;
    nn_dropout_spec d0 = {0}, d1 = {.p = 0.1f, .seed = 1, .stream = 2};
    printf("\nkernels, B=%d T=%d C=%d NH=%d V=%d, pool of %d threads (ms per call):\n", B, T, C, NH,
           V, nth);
#define K(name, stmt) printf("  %-28s %8.3f\n", name, 1e3 * BEST(5, stmt))
    K("layernorm fwd", nn_layernorm_forward(pn, y, mr, mr + N, x, w, b, N, C));
    K("layernorm bwd", nn_layernorm_backward(pn, y, dw, db, g, x, w, mr, mr + N, N, C));
    K("linear fc fwd", nn_linear_forward(pn, h, x, Wfc, dbf, N, C, F));
    K("linear fc bwd", nn_linear_backward(pn, y, dWfc, dbf, h, x, Wfc, N, C, F));
    K("gelu fwd (N x 4C)", nn_gelu_forward(pn, hg, h, nF));
    K("gelu bwd (N x 4C)", nn_gelu_backward(pn, hg, h, hg, nF));
    K("residual (N x C)", nn_residual_forward(y, x, g, nC));
    K("dropout fwd p=0.1 (N x C)", nn_dropout_forward(y, x, B, T, C, &d1));
    nn_attention_shape as = nn_attention_shape_qkv(B, T, NH, HS);
    const float *aq = qkv, *ak = qkv + C, *av = qkv + 2 * C; /* att holds lse (B,NH,T) */
    K("attention fwd", nn_attention_forward(pn, y, att, aq, ak, av, &as, &d0));
    K("attention bwd",
      nn_attention_backward(pn, dqkv, dqkv + C, dqkv + 2 * C, g, aq, ak, av, y, att, &as, &d0));
    K("attention fwd drop 0.1", nn_attention_forward(pn, y, att, aq, ak, av, &as, &d1));
    K("attention bwd drop 0.1",
      nn_attention_backward(pn, dqkv, dqkv + C, dqkv + 2 * C, g, aq, ak, av, y, att, &as, &d1));
    K("lm head fwd (N x V)", nn_linear_forward(pn, logits, x, wte, NULL, N, C, V));
    K("softmax xent fwd", nn_softmax_xent_forward(pn, losses, logits, tg, N, V, V));
    K("softmax xent bwd", nn_softmax_xent_backward(pn, logits, tg, 1.0f / N, N, V, V));
    K("lm head bwd", nn_linear_backward(pn, y, dwte, NULL, logits, x, wte, N, C, V));
    K("adamw (F x C)",
      nn_adamw_update(Wfc, dWfc, h, hg, (size_t)F * C, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 3));
    nn_pool_free(p1), nn_pool_free(p2), nn_pool_free(pn);
    return 0;
}
