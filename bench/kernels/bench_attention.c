/* bench/kernels/bench_attention.c - the tiled attention kernel
 * (nn/flash_attention.c) against the untiled one it replaced
 * (tests/nn/attention_old.c, which saves the (B,NH,T,T) probabilities), on
 * the packed [q | k | v] layout of the TP attention block. Prints the best
 * of a few runs of each, forward and backward, and old / new (above 1 =
 * the tiled kernel is faster). Not a test: timings on a shared machine vary.
 *
 * Built by CMake as build/bench_attention.
 * Run: build/bench_attention [B NH HS threads T...]   (defaults 4 6 64 1 256 1024)
 *      MTC_BENCH_CPU=1 times by thread CPU time (use with threads = 1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/rng.h"
#include "nn/attention_old.h"
#include "nn/nn.h"

/* Wall time, or this thread's CPU time (MTC_BENCH_CPU=1: steadier on a
 * busy machine, meaningful for a pool of one thread only). */
static clockid_t bench_clock = CLOCK_MONOTONIC;
static double now(void) {
    struct timespec ts;
    clock_gettime(bench_clock, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

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

static void row(const char *what, double told, double tnew) {
    printf("  %-26s old %9.3f ms   tiled %9.3f ms   old/tiled %5.2f\n", what, 1e3 * told,
           1e3 * tnew, told / tnew);
}

static void bench(nn_pool *pool, int B, int T, int NH, int HS, float p) {
    int C = NH * HS, reps = T >= 1024 ? 3 : 5;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = malloc(nq * 4), *dqkv = malloc(nq * 4), *out = malloc(no * 4);
    float *g = malloc(no * 4), *att = malloc(na * 4), *scr = malloc(na * 4);
    float *lse = malloc((size_t)B * NH * T * 4);
    mtc_rng_fill_normal(qkv, nq, 1, 2, 0, 0.0f, 1.0f);
    mtc_rng_fill_normal(g, no, 3, 4, 0, 0.0f, 1.0f);
    nn_dropout_spec d = {.p = p, .seed = 5, .stream = 6};
    nn_attention_shape s = nn_attention_shape_qkv(B, T, NH, HS);
    double of = BEST(reps, old_attention_forward(pool, out, att, qkv, B, T, NH, HS, &d));
    double ob = BEST(reps, old_attention_backward(pool, dqkv, scr, g, qkv, att, B, T, NH, HS, &d));
    double nf = BEST(reps, nn_attention_forward(pool, out, lse, qkv, qkv + C, qkv + 2 * C, &s, &d));
    double nb = BEST(reps, nn_attention_backward(pool, dqkv, dqkv + C, dqkv + 2 * C, g, qkv,
                                                 qkv + C, qkv + 2 * C, out, lse, &s, &d));
    printf("B=%d T=%d NH=%d HS=%d dropout=%g, pool of %d, %s (saved: old %.1f MB, tiled %.2f MB)\n",
           B, T, NH, HS, p, nn_pool_size(pool),
           bench_clock == CLOCK_MONOTONIC ? "wall time" : "thread CPU time", na * 4 / 1e6,
           (double)B * NH * T * 4 / 1e6);
    row("forward", of, nf);
    row("backward", ob, nb);
    row("forward + backward", of + ob, nf + nb);
    free(qkv), free(dqkv), free(out), free(g), free(att), free(scr), free(lse);
}

int main(int argc, char **argv) {
    int B = 4, NH = 6, HS = 64, nth = 1;
    if (argc > 1) B = atoi(argv[1]);
    if (argc > 2) NH = atoi(argv[2]);
    if (argc > 3) HS = atoi(argv[3]);
    if (argc > 4) nth = atoi(argv[4]);
    if (B < 1 || NH < 1 || HS < 1 || nth < 1) {
        fprintf(stderr, "bench_attention: B, NH, HS and threads must be >= 1 "
                        "(usage: bench_attention [B NH HS threads T...])\n");
        return 2;
    }
    const char *cpu = getenv("MTC_BENCH_CPU");
    if (cpu && atoi(cpu)) bench_clock = CLOCK_THREAD_CPUTIME_ID;
    nn_pool *pool;
    if (nn_pool_create(nth, &pool)) return 1;
    int Ts[16] = {256, 1024}, nT = 2;
    if (argc > 5) {
        nT = 0;
        for (int a = 5; a < argc && nT < 16; a++)
            if ((Ts[nT++] = atoi(argv[a])) < 1) {
                fprintf(stderr, "bench_attention: T=%s must be >= 1\n", argv[a]);
                return 2;
            }
    }
    for (int t = 0; t < nT; t++) {
        bench(pool, B, Ts[t], NH, HS, 0.0f);
        bench(pool, B, Ts[t], NH, HS, 0.1f);
    }
    nn_pool_free(pool);
    return 0;
}
