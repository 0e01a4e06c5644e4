/* bench/gemm_bf16.c - GFLOP/s of the three GEMM paths mtc can take for
 * the small GPT's products: OpenBLAS sgemm on the pool (nn_sgemm, what
 * training uses today), oneDNN fp32 matmul and oneDNN bf16 matmul (bf16
 * inputs, fp32 output; nn/lowp.h), each on an nn_pool of 1 and 2 threads.
 *
 * Shapes: N = B*T rows (default 1024 = mb 4 x T 256), C (384), 4C, vocab V
 * (50304): for qkv (C -> 3C), proj (C -> C), fc (C -> 4C), fc2 (4C -> C)
 * and the LM head (C -> V) the forward out = x wᵀ, the input gradient
 * dx = dout w and the weight gradient dw += doutᵀ x (beta 1).
 *
 * Timing: ROUNDS rounds; in each the three paths run one after another
 * (the first one rotating from round to round, so a slow phase of the
 * shared machine does not fall on one path only), each timed over enough
 * calls to take about MIN_S seconds; the table gives the median GFLOP/s
 * over rounds and the ratios of the medians; primitives are created
 * before timing starts. The last two columns run oneDNN with the other
 * rule for packing B (nn_lowp_set_pack): fp32 packed, bf16 not; training
 * packs the wide bf16 GEMMs' B and no fp32 one. The ALL lines sum over shapes (total flops over
 * total median time): the figure to choose a path by. A first line gives
 * one core's peak for fp32 FMAs and bf16 dot products, the ceiling of each
 * path.
 *
 * usage: bench_gemm_bf16 [ROUNDS [THREADS... ]]   (defaults 5, "1 2")
 *   env: GEMM_N (rows, 1024), GEMM_C (hidden, 384; GPT-2 124M: GEMM_N=256 GEMM_C=768),
 *        GEMM_V (50304), GEMM_MIN_S (0.2), GEMM_NO_HEAD=1 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/rng.h"
#include "nn/lowp.h"
#include "nn/nn.h"

typedef struct {
    const char *name;
    int tA, tB, M, N, K;
    float beta;
} bshape;

/* the last two: oneDNN with the other packing rule (lp_alt, nn_lowp_set_pack) */
enum { PATH_BLAS, PATH_DNNL_F32, PATH_DNNL_BF16, PATH_F32_PACKED, PATH_BF16_UNPACKED, NPATH };
static const char *path_name[NPATH] = {"openblas", "dnnl-f32", "dnnl-bf16", "f32-pack", "bf16-unp"};
static nn_lowp *lp_alt;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Peak issue rate of 512-bit fp32 FMAs and bf16 dot products (16
 * independent chains each, enough to cover their latency), medians of 21
 * alternating bursts: the hardware ceiling of each path in FLOP/s. */
#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>
/* 16 accumulators named one by one so they stay in registers */
#define PEAK_16(X)                                                                                 \
    X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define PEAK_DECL(k) __m512 c##k = _mm512_set1_ps(x * (k + 1)); /* distinct: no merging */
#define PEAK_SUM(k) s = _mm512_add_ps(s, c##k);
#define PEAK_FMA(k) c##k = _mm512_fmadd_ps(a, b, c##k);
#define PEAK_DP(k) c##k = _mm512_dpbf16_ps(c##k, ah, bh);
__attribute__((noinline)) static float peak_fma(long it, float x) {
    __m512 a = _mm512_set1_ps(x), b = _mm512_set1_ps(1.0f), s = _mm512_setzero_ps();
    PEAK_16(PEAK_DECL)
    for (long i = 0; i < it; i++) {
        PEAK_16(PEAK_FMA)
    }
    PEAK_16(PEAK_SUM)
    return _mm512_reduce_add_ps(s);
}
__attribute__((noinline)) static float peak_dpbf16(long it, float x) {
    __m512 a = _mm512_set1_ps(x), s = _mm512_setzero_ps();
    __m512bh ah = _mm512_cvtne2ps_pbh(a, a), bh = ah;
    PEAK_16(PEAK_DECL)
    for (long i = 0; i < it; i++) {
        PEAK_16(PEAK_DP)
    }
    PEAK_16(PEAK_SUM)
    return _mm512_reduce_add_ps(s);
}
static void peak_report(void) {
    enum { BURSTS = 21 };
    double fma[BURSTS], dp[BURSTS], ratio[BURSTS];
    long it = 1000000;
    float sink = 0;
    for (int r = 0; r < BURSTS; r++) {
        double t0 = now();
        sink += peak_fma(it, 1e-9f);
        double t1 = now();
        sink += peak_dpbf16(it, 1e-9f);
        double t2 = now();
        fma[r] = it * 16.0 * 32 / (t1 - t0) / 1e9; /* 16 lanes x (mul + add) */
        dp[r] = it * 16.0 * 64 / (t2 - t1) / 1e9;  /* 16 lanes x 2 pairs x (mul + add) */
        ratio[r] = dp[r] / fma[r];                 /* neighbours in time: the steadiest figure */
    }
    qsort(ratio, BURSTS, sizeof *ratio, cmp_double);
    qsort(fma, BURSTS, sizeof *fma, cmp_double);
    qsort(dp, BURSTS, sizeof *dp, cmp_double);
    printf("# one-core peak (median of %d bursts; best): vfmadd231ps zmm %.0f GFLOP/s (%.0f), "
           "vdpbf16ps zmm %.0f GFLOP/s (%.0f); bf16/fp32 FLOP/s %.2f%s\n",
           BURSTS, fma[BURSTS / 2], fma[BURSTS - 1], dp[BURSTS / 2], dp[BURSTS - 1],
           ratio[BURSTS / 2], sink == 12345.0f ? " " : "");
}
#else
static void peak_report(void) { printf("# one-core peak: not built with AVX512-BF16\n"); }
#endif

static float *fA, *fB, *fC;
static mtc_bf16 *hA, *hB;

static int run(int path, nn_pool *pool, nn_lowp *lp, const bshape *s) {
    int lda = s->tA ? s->M : s->K, ldb = s->tB ? s->K : s->N;
    switch (path) {
    case PATH_BLAS:
        nn_sgemm(pool, s->tA, s->tB, s->M, s->N, s->K, 1.0f, fA, lda, fB, ldb, s->beta, fC, s->N);
        return 0;
    case PATH_F32_PACKED:
        return nn_gemm_f32_dnnl(pool, lp_alt, s->tA, s->tB, s->M, s->N, s->K, 1.0f, fA, lda, fB,
                                ldb, s->beta, fC, s->N) != MTC_OK;
    case PATH_BF16_UNPACKED:
        return nn_gemm_bf16(pool, lp_alt, s->tA, s->tB, s->M, s->N, s->K, 1.0f, hA, lda, hB, ldb,
                            s->beta, fC, s->N) != MTC_OK;
    case PATH_DNNL_F32:
        return nn_gemm_f32_dnnl(pool, lp, s->tA, s->tB, s->M, s->N, s->K, 1.0f, fA, lda, fB, ldb,
                                s->beta, fC, s->N) != MTC_OK;
    default:
        return nn_gemm_bf16(pool, lp, s->tA, s->tB, s->M, s->N, s->K, 1.0f, hA, lda, hB, ldb,
                            s->beta, fC, s->N) != MTC_OK;
    }
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    int threads[8] = {1, 2}, nthreads = 2;
    if (argc > 2) {
        nthreads = 0;
        for (int i = 2; i < argc && nthreads < 8; i++)
            threads[nthreads++] = atoi(argv[i]);
    }
    for (int i = 0; i < nthreads; i++)
        if (threads[i] < 1 || threads[i] > 64) {
            fprintf(stderr, "bench_gemm_bf16: threads=%d must be 1..64\n", threads[i]);
            return 2;
        }
    if (rounds < 1) {
        fprintf(stderr, "bench_gemm_bf16: rounds=%d must be >= 1\n", rounds);
        return 2;
    }
    const char *e;
    int N = (e = getenv("GEMM_N")) ? atoi(e) : 1024, C = (e = getenv("GEMM_C")) ? atoi(e) : 384;
    int C4 = 4 * C;
    int V = (e = getenv("GEMM_V")) ? atoi(e) : 50304;
    double min_s = (e = getenv("GEMM_MIN_S")) ? atof(e) : 0.2;
    int head = !((e = getenv("GEMM_NO_HEAD")) && *e == '1');
    if (N < 1 || C < 1 || V < 1 || !(min_s > 0)) {
        fprintf(
            stderr,
            "bench_gemm_bf16: GEMM_N=%d, GEMM_C=%d, GEMM_V=%d, GEMM_MIN_S=%g must be positive\n", N,
            C, V, min_s);
        return 2;
    }
    bshape shapes[] = {
        {"qkv fwd", 0, 1, N, 3 * C, C, 0}, {"qkv dinp", 0, 0, N, C, 3 * C, 0},
        {"qkv dw", 1, 0, 3 * C, C, N, 1},  {"proj fwd", 0, 1, N, C, C, 0},
        {"proj dinp", 0, 0, N, C, C, 0},   {"proj dw", 1, 0, C, C, N, 1},
        {"fc fwd", 0, 1, N, C4, C, 0},     {"fc dinp", 0, 0, N, C, C4, 0},
        {"fc dw", 1, 0, C4, C, N, 1},      {"fc2 fwd", 0, 1, N, C, C4, 0},
        {"fc2 dinp", 0, 0, N, C4, C, 0},   {"fc2 dw", 1, 0, C, C4, N, 1},
        {"head fwd", 0, 1, N, V, C, 0},    {"head dinp", 0, 0, N, C, V, 0},
        {"head dw", 1, 0, V, C, N, 1},
    };
    int nshapes = (int)(sizeof shapes / sizeof shapes[0]) - (head ? 0 : 3);
    size_t maxA = 0, maxB = 0, maxC = 0;
    for (int s = 0; s < nshapes; s++) {
        size_t a = (size_t)shapes[s].M * shapes[s].K, b = (size_t)shapes[s].K * shapes[s].N;
        size_t c = (size_t)shapes[s].M * shapes[s].N;
        maxA = a > maxA ? a : maxA, maxB = b > maxB ? b : maxB, maxC = c > maxC ? c : maxC;
    }
    fA = malloc(maxA * 4), fB = malloc(maxB * 4), fC = calloc(maxC, 4);
    hA = malloc(maxA * 2), hB = malloc(maxB * 2);
    if (!fA || !fB || !fC || !hA || !hB) {
        fprintf(stderr, "bench_gemm_bf16: out of memory\n");
        return 1;
    }
    mtc_rng_fill_normal(fA, maxA, 1, 1, 0, 0.0f, 1.0f);
    mtc_rng_fill_normal(fB, maxB, 1, 2, 0, 0.0f, 0.02f);
    nn_f32_to_bf16(hA, fA, maxA);
    nn_f32_to_bf16(hB, fB, maxB);

    nn_lowp *lp = NULL;
    int have_dnnl = nn_lowp_create(&lp) == MTC_OK && nn_lowp_create(&lp_alt) == MTC_OK;
    if (have_dnnl) /* lp: training's rule, packed bf16 B; lp_alt the other way round */
        nn_lowp_set_pack(lp_alt, NN_LOWP_PACK_F32);
    char blas[256], dnnl[256];
    nn_blas_describe(blas, sizeof blas);
    nn_lowp_describe(lp, dnnl, sizeof dnnl);
    printf("# BLAS: %s\n# %s\n# N=%d C=%d V=%d, %d rounds, median GFLOP/s per path; ratio = "
           "path / openblas\n",
           blas, have_dnnl ? dnnl : mtc_error_detail(), N, C, V, rounds);
    peak_report();
    printf("%-10s %5s %5s %5s %2s %2s %4s | %9s %9s %9s | %8s %8s | %7s %7s\n", "gemm", "M", "N",
           "K", "tA", "tB", "thr", path_name[0], path_name[1], path_name[2], "f32/blas",
           "bf16/blas", path_name[3], path_name[4]);

    int npath = have_dnnl ? NPATH : 1;
    double *gf = malloc((size_t)rounds * sizeof *gf);
    for (int ti = 0; ti < nthreads; ti++) {
        nn_pool *pool;
        if (nn_pool_create(threads[ti], &pool) != MTC_OK) {
            fprintf(stderr, "bench_gemm_bf16: %s\n", mtc_error_detail());
            return 1;
        }
        double total_flops = 0, total_t[NPATH] = {0};
        for (int s = 0; s < nshapes; s++) {
            const bshape *sh = &shapes[s];
            double flops = 2.0 * sh->M * (double)sh->N * sh->K, med[NPATH] = {0};
            int reps[NPATH];
            for (int p = 0; p < npath; p++) { /* warm-up: primitives, pages; calls per timing */
                if (run(p, pool, lp, sh)) {
                    fprintf(stderr, "bench_gemm_bf16: %s: %s\n", sh->name, mtc_error_detail());
                    return 1;
                }
                double t1 = now();
                run(p, pool, lp, sh);
                double dt = now() - t1;
                reps[p] = dt > 0 ? (int)ceil(min_s / dt) : 1;
                if (reps[p] < 1) reps[p] = 1;
            }
            double *all = malloc((size_t)npath * rounds * sizeof *all);
            for (int r = 0; r < rounds; r++)
                for (int q = 0; q < npath; q++) {
                    int p = (q + r) % npath;
                    double t0 = now();
                    for (int k = 0; k < reps[p]; k++)
                        run(p, pool, lp, sh);
                    all[p * rounds + r] = flops * reps[p] / (now() - t0) / 1e9;
                }
            for (int p = 0; p < npath; p++) {
                memcpy(gf, all + p * rounds, (size_t)rounds * sizeof *gf);
                qsort(gf, (size_t)rounds, sizeof *gf, cmp_double);
                med[p] = rounds % 2 ? gf[rounds / 2] : 0.5 * (gf[rounds / 2 - 1] + gf[rounds / 2]);
                total_t[p] += flops / (med[p] * 1e9);
            }
            free(all);
            total_flops += flops;
            if (have_dnnl)
                printf("%-10s %5d %5d %5d %2d %2d %4d | %9.1f %9.1f %9.1f | %8.2f %8.2f | %7.1f "
                       "%7.1f\n",
                       sh->name, sh->M, sh->N, sh->K, sh->tA, sh->tB, threads[ti], med[0], med[1],
                       med[2], med[1] / med[0], med[2] / med[0], med[3], med[4]);
            else
                printf("%-10s %5d %5d %5d %2d %2d %4d | %9.1f %9s %9s |\n", sh->name, sh->M, sh->N,
                       sh->K, sh->tA, sh->tB, threads[ti], med[0], "n/a", "n/a");
            fflush(stdout);
        }
        if (have_dnnl)
            printf("%-10s %23s %4d | %9.1f %9.1f %9.1f | %8.2f %8.2f | %7.1f %7.1f\n", "ALL",
                   "(flops / time)", threads[ti], total_flops / total_t[0] / 1e9,
                   total_flops / total_t[1] / 1e9, total_flops / total_t[2] / 1e9,
                   total_t[0] / total_t[1], total_t[0] / total_t[2], total_flops / total_t[3] / 1e9,
                   total_flops / total_t[4] / 1e9);
        nn_pool_free(pool);
    }
    long created, hits;
    nn_lowp_stats(lp, &created, &hits);
    printf("# oneDNN primitives created: %ld (all before timing), cached calls: %ld\n", created,
           hits);
    nn_lowp_free(lp);
    nn_lowp_free(lp_alt);
    free(gf), free(fA), free(fB), free(fC), free(hA), free(hB);
    return 0;
}
