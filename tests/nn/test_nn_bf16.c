/* tests/nn/test_nn_bf16.c - nn/lowp.h: bf16 and fp16 conversions, GEMMs
 * through oneDNN, and the bf16 linear pair.
 *
 * 1. conversions: hand-derived edge values (RNE ties, subnormals, inf, NaN,
 *    the largest finite values), PyTorch's rounding of edge and random
 *    values (tests/reference/lowp_convert.txt), the vector paths against
 *    the scalar rule over every bf16 high half x 7 low halves, fp16 against
 *    GCC's _Float16 casts, every bf16 and fp16 value widened exactly.
 * 2. bf16 GEMM (oneDNN) against a double-precision product, within bounds
 *    derived below, for many shapes, all transposes, padded leading
 *    dimensions, alpha, beta = 0 and 1, fp32 and bf16 outputs, with B
 *    packed once per call and not; the same bits on pools of 1 and 3
 *    threads; no primitive created on a repeat.
 * 3. fp32 GEMM (oneDNN) against nn_sgemm (OpenBLAS).
 * 4. bf16 linear forward against double, backward against finite
 *    differences (the layer is linear in each input, so a secant through
 *    two bf16 values is the exact derivative up to fp32 accumulation).
 * 5. refusals: beta not 0/1, short leading dimension, bias with alpha != 1.
 * Without oneDNN only 1 runs, and nn_lowp_create must refuse. */
#include <dirent.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "nn/lowp.h"
#include "test.h"

#define CONVERT_FIXTURE "tests/reference/lowp_convert.txt"

static float f32_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ---- 1. conversions ------------------------------------------------------------ */

/* {fp32 bits, expected bf16 bits, expected fp16 bits}, worked out by hand */
static const uint32_t edge[][3] = {
    {0x3f800000, 0x3f80, 0x3c00}, /* 1 */
    {0x3f808000, 0x3f80, 0x3c04}, /* bf16 tie, even below: down */
    {0x3f818000, 0x3f82, 0x3c0c}, /* bf16 tie, odd below: up */
    {0x3f807fff, 0x3f80, 0x3c04}, /* just under a tie */
    {0x3f808001, 0x3f81, 0x3c04}, /* just over a tie */
    {0x3f801000, 0x3f80, 0x3c00}, /* fp16 tie, even below: down */
    {0x3f803000, 0x3f80, 0x3c02}, /* fp16 tie, odd below: up */
    {0x00000001, 0x0000, 0x0000}, /* smallest fp32 subnormal */
    {0x00008000, 0x0000, 0x0000}, /* subnormal bf16 tie: to even 0 */
    {0x00018000, 0x0002, 0x0000}, /* subnormal bf16 tie: up to 2 */
    {0x00010000, 0x0001, 0x0000}, /* smallest bf16 subnormal, exact */
    {0x007fffff, 0x0080, 0x0000}, /* largest fp32 subnormal rounds to FLT_MIN */
    {0x80008001, 0x8001, 0x8000}, /* negative subnormal */
    {0x7f7f7fff, 0x7f7f, 0x7c00}, /* largest finite bf16 */
    {0x7f7f8000, 0x7f80, 0x7c00}, /* tie past it: inf */
    {0x7f7fffff, 0x7f80, 0x7c00}, /* FLT_MAX: inf in both */
    {0x477fe000, 0x4780, 0x7bff}, /* 65504, largest fp16 */
    {0x477fefff, 0x4780, 0x7bff}, /* under 65520 */
    {0x477ff000, 0x4780, 0x7c00}, /* 65520: tie, odd below: inf */
    {0x38800000, 0x3880, 0x0400}, /* 2^-14, smallest normal fp16 */
    {0x387fc000, 0x3880, 0x03ff}, /* largest fp16 subnormal */
    {0x33800000, 0x3380, 0x0001}, /* 2^-24, smallest fp16 subnormal */
    {0x33000000, 0x3300, 0x0000}, /* 2^-25: tie to even 0 */
    {0x33400000, 0x3340, 0x0001}, /* 1.5 * 2^-25: up */
    {0x33c00000, 0x33c0, 0x0002}, /* 1.5 * 2^-24: tie, odd below: up */
    {0x7f800000, 0x7f80, 0x7c00}, /* inf */
    {0xff800000, 0xff80, 0xfc00}, /* -inf */
    {0x80000000, 0x8000, 0x8000}, /* -0 */
    {0x7fc00000, 0x7fc0, 0x7e00}, /* quiet NaN */
    {0x7f800001, 0x7fc0, 0x7e00}, /* signalling NaN, low payload: quieted */
    {0xffffffff, 0xffff, 0xffff}, /* negative NaN, full payload */
};
#define NEDGE (sizeof edge / sizeof edge[0])

/* Converts a buffer in which the edge values sit at every offset from a
 * vector-block start, among ordinary values, so vector, fix-up and tail
 * paths all see them. */
static void test_convert_edges(void) {
    enum { LEN = 97 };
    float in[LEN];
    mtc_bf16 bf[LEN];
    nn_f16 hf[LEN];
    int bad_bf = 0, bad_hf = 0, bad_scalar = 0;
    for (size_t e = 0; e < NEDGE; e++) {
        for (int pos = 0; pos < LEN; pos += 5) {
            for (int k = 0; k < LEN; k++)
                in[k] = 1.0f + (float)k / 64.0f; /* exact in bf16 and fp16 */
            in[pos] = f32_of(edge[e][0]);
            nn_f32_to_bf16(bf, in, LEN);
            nn_f32_to_f16(hf, in, LEN);
            for (int k = 0; k < LEN; k++) {
                uint32_t want_bf = k == pos ? edge[e][1] : bits_of(in[k]) >> 16;
                uint32_t want_hf = k == pos ? edge[e][2] : nn_f32_to_f16_1(in[k]);
                if (bf[k] != want_bf && bad_bf++ < 5)
                    fprintf(stderr, "bf16(%08x) at %d = %04x, want %04x\n", bits_of(in[k]), k,
                            bf[k], want_bf);
                if (hf[k] != want_hf && bad_hf++ < 5)
                    fprintf(stderr, "fp16(%08x) at %d = %04x, want %04x\n", bits_of(in[k]), k,
                            hf[k], want_hf);
            }
        }
        float x = f32_of(edge[e][0]);
        if (mtc_f32_to_bf16(x) != edge[e][1] || nn_f32_to_f16_1(x) != edge[e][2]) bad_scalar++;
    }
    T_CHECKF(bad_bf == 0, "%d bf16 edge conversions wrong", bad_bf);
    T_CHECKF(bad_hf == 0, "%d fp16 edge conversions wrong", bad_hf);
    T_CHECKF(bad_scalar == 0, "%d scalar edge conversions wrong", bad_scalar);
}

/* PyTorch's roundings; NaN only as NaN (torch writes its own NaN bits). */
static void test_convert_torch(void) {
    FILE *f = fopen(CONVERT_FIXTURE, "r");
    T_CHECKF(f != NULL, "cannot open %s (run ctest from the build, cwd = source)", CONVERT_FIXTURE);
    if (!f) return;
    char line[128];
    size_t n = 0, cap = 4096;
    float *x = malloc(cap * sizeof *x);
    uint16_t *tb = malloc(cap * 2), *th = malloc(cap * 2);
    while (fgets(line, sizeof line, f) && n < cap) {
        unsigned u, b, h;
        if (line[0] == '#' || sscanf(line, "%x %x %x", &u, &b, &h) != 3) continue;
        x[n] = f32_of(u), tb[n] = (uint16_t)b, th[n] = (uint16_t)h, n++;
    }
    fclose(f);
    T_CHECKF(n > 3000, "fixture has %zu values", n);
    mtc_bf16 *bf = malloc(n * 2);
    nn_f16 *hf = malloc(n * 2);
    nn_f32_to_bf16(bf, x, n);
    nn_f32_to_f16(hf, x, n);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        float gb = mtc_bf16_to_f32(bf[i]), wb = mtc_bf16_to_f32(tb[i]);
        float gh = nn_f16_to_f32_1(hf[i]), wh = nn_f16_to_f32_1(th[i]);
        int ok_b = isnan(wb) ? isnan(gb) : bf[i] == tb[i];
        int ok_h = isnan(wh) ? isnan(gh) : hf[i] == th[i];
        if ((!ok_b || !ok_h) && bad++ < 5)
            fprintf(stderr, "%08x: bf16 %04x (torch %04x), fp16 %04x (torch %04x)\n", bits_of(x[i]),
                    bf[i], tb[i], hf[i], th[i]);
    }
    T_CHECKF(bad == 0, "%d of %zu conversions differ from PyTorch", bad, n);
    free(x), free(tb), free(th), free(bf), free(hf);
}

/* Vector paths against the scalar rules on every high half with low halves
 * at and around the rounding points; widening of every 16-bit value. */
static void test_convert_sweep(void) {
    static const uint32_t lows[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001,
                                    0x7fff, 0x8000, 0x8001, 0xffff};
    enum { NL = sizeof lows / sizeof lows[0] };
    size_t n = 65536u * NL;
    float *x = malloc(n * sizeof *x), *w = malloc(65536 * sizeof *w);
    mtc_bf16 *bf = malloc(n * 2);
    nn_f16 *hf = malloc(n * 2);
    uint16_t *all = malloc(65536 * 2);
    for (uint32_t h = 0; h < 65536; h++)
        for (int l = 0; l < NL; l++)
            x[h * NL + l] = f32_of(h << 16 | lows[l]);
    nn_f32_to_bf16(bf, x, n);
    nn_f32_to_f16(hf, x, n);
    int bad_b = 0, bad_h = 0, bad_gcc = 0;
    for (size_t i = 0; i < n; i++) {
        if (bf[i] != mtc_f32_to_bf16(x[i]) && bad_b++ < 3)
            fprintf(stderr, "bf16(%08x) = %04x, scalar %04x\n", bits_of(x[i]), bf[i],
                    mtc_f32_to_bf16(x[i]));
        if (hf[i] != nn_f32_to_f16_1(x[i]) && bad_h++ < 3)
            fprintf(stderr, "fp16(%08x) = %04x, scalar %04x\n", bits_of(x[i]), hf[i],
                    nn_f32_to_f16_1(x[i]));
#ifdef __FLT16_MAX__ /* GCC's own conversion: an independent implementation */
        _Float16 g = (_Float16)x[i];
        uint16_t gb;
        memcpy(&gb, &g, 2);
        if (!isnan(x[i]) && gb != hf[i] && bad_gcc++ < 3)
            fprintf(stderr, "fp16(%08x) = %04x, _Float16 %04x\n", bits_of(x[i]), hf[i], gb);
#endif
    }
    T_CHECKF(bad_b == 0, "%d bf16 vector/scalar differences", bad_b);
    T_CHECKF(bad_h == 0, "%d fp16 vector/scalar differences", bad_h);
    T_CHECKF(bad_gcc == 0, "%d fp16 differences from _Float16", bad_gcc);
    /* both copies in one pass: the two calls' bits (n - 7: a scalar tail too) */
    mtc_bf16 *bf2 = malloc(n * 2);
    float *wide = malloc(n * sizeof *wide);
    nn_f32_to_bf16_both(bf2, wide, x, n - 7);
    int bad_both = 0;
    for (size_t i = 0; i < n - 7; i++)
        if ((bf2[i] != bf[i] || bits_of(wide[i]) != (uint32_t)bf[i] << 16) && bad_both++ < 3)
            fprintf(stderr, "both(%08x) = %04x, %08x; want %04x\n", bits_of(x[i]), bf2[i],
                    bits_of(wide[i]), bf[i]);
    T_CHECKF(bad_both == 0, "%d nn_f32_to_bf16_both differences from the two calls", bad_both);
    free(bf2), free(wide);

    for (uint32_t h = 0; h < 65536; h++)
        all[h] = (uint16_t)h;
    nn_bf16_to_f32(w, all, 65536);
    int bad_w = 0, bad_hw = 0, bad_rt = 0;
    for (uint32_t h = 0; h < 65536; h++)
        if (bits_of(w[h]) != h << 16) bad_w++;
    nn_f16_to_f32(w, all, 65536);
    for (uint32_t h = 0; h < 65536; h++) {
        float s = nn_f16_to_f32_1((nn_f16)h);
        int e = (h >> 10) & 31, m = h & 1023;
        /* the value the encoding means, from its fields */
        double v = e == 0    ? m * 0x1p-24
                   : e == 31 ? (m ? NAN : INFINITY)
                             : (1 + m / 1024.0) * ldexp(1, e - 15);
        if (h & 0x8000) v = -v;
        if (bits_of(w[h]) != bits_of(s) || (isnan(v) ? !isnan(s) : s != (float)v)) bad_hw++;
        if (!isnan(s) && nn_f32_to_f16_1(s) != h) bad_rt++;
    }
    T_CHECKF(bad_w == 0, "%d bf16 widenings wrong", bad_w);
    T_CHECKF(bad_hw == 0, "%d fp16 widenings wrong", bad_hw);
    T_CHECKF(bad_rt == 0, "%d fp16 round trips wrong", bad_rt);
    free(x), free(w), free(bf), free(hf), free(all);
}

#ifdef MTC_HAVE_DNNL
/* ---- 2-5. GEMMs and the linear layer (oneDNN) ------------------------------------ */

/* Error bounds. bf16 keeps 8 significant bits (7 stored), so rounding an
 * operand is a relative change |d| <= u16 = 2^-8 and a product of two
 * rounded operands is off by at most (1+u16)^2 - 1 = 2^-7 + 2^-16 of |a b|. Products of
 * bf16 values are exact in fp32, so what remains is fp32 accumulation: a
 * sum of K terms in any order is within gamma(K) = K u / (1 - K u),
 * u = 2^-24, of the exact sum, scaled by S = sum |a_ik b_kj| (Higham 3.1);
 * alpha and the beta = 1 sum add one rounding each (K + 2 below). Hence,
 * per element of C:
 *   against the product of the bf16 operands:  |C - Cx| <= gamma(K+2) (|alpha| S + |C0|)
 *   against the product of the fp32 operands:  |C - Cf| <= (2^-7 + 2^-16) |alpha| S + the above
 * with a bf16 C one more rounding, 2^-8 |C|. fp32 oneDNN against OpenBLAS:
 * both within gamma(K+2) of the exact fp32 product, so the brief's 1e-5
 * relative (to |alpha| S + |C0|) holds up to K ~ 80 worst case and far
 * beyond for random data (errors grow like sqrt(K)). */
static double gamma_k(int K) {
    double ku = (K + 2) * 0x1p-24;
    return ku / (1.0 - ku);
}

static nn_pool *pool1, *pool3;
static int threads_at_start;

static int count_threads(void) {
    DIR *dir = opendir("/proc/self/task");
    int n = 0;
    for (struct dirent *de; dir && (de = readdir(dir));)
        n += de->d_name[0] != '.';
    if (dir) closedir(dir);
    return n;
}

/* op(X)[r][c] of a row-major X with leading dimension ld */
static double at(const float *X, int trans, int ld, int r, int c) {
    return trans ? X[(size_t)c * ld + r] : X[(size_t)r * ld + c];
}

typedef struct {
    int M, N, K;
} shape;
static const shape shapes[] = {{1, 1, 1},      {1, 7, 3},      {5, 1, 9},      {3, 5, 7},
                               {17, 33, 65},   {64, 64, 64},   {100, 37, 129}, {257, 300, 31},
                               {513, 96, 200}, {40, 2100, 50}, {8, 8, 1000},   {520, 1100, 40}};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

/* Storage of op(X) (rows x cols) with leading dimension ld, padding NaN so a
 * read outside the matrix shows in the result. */
static float *make_operand(int rows, int cols, int trans, int ld, uint64_t seed, int bf16) {
    int sr = trans ? cols : rows, sc = trans ? rows : cols;
    size_t n = (size_t)sr * ld;
    float *x = malloc((n ? n : 1) * sizeof *x);
    mtc_rng_fill_normal(x, n, seed, 5, 0, 0.0f, 1.0f);
    for (int r = 0; r < sr; r++)
        for (int c = 0; c < ld; c++) {
            float *p = &x[(size_t)r * ld + c];
            if (c >= sc)
                *p = NAN;
            else if (bf16)
                *p = mtc_bf16_to_f32(mtc_f32_to_bf16(*p));
        }
    return x;
}
static mtc_bf16 *to_bf16(const float *x, size_t n) {
    mtc_bf16 *h = malloc((n ? n : 1) * 2);
    nn_f32_to_bf16(h, x, n);
    return h;
}

static int gemm_failures;

/* One bf16 GEMM case against both references; variant picks beta, alpha,
 * padding, output dtype and bias. */
static void gemm_bf16_case(nn_lowp *lp, shape s, int tA, int tB, int variant) {
    int M = s.M, N = s.N, K = s.K;
    int pad = variant ? 3 : 0;
    float alpha = variant == 2 ? -0.5f : 1.0f, beta = variant == 1 || variant == 3 ? 1.0f : 0.0f;
    mtc_dtype_t cdt = variant == 2 ? MTC_DTYPE_BF16 : MTC_DTYPE_F32;
    int use_bias = variant == 3;
    int lda = (tA ? M : K) + pad, ldb = (tB ? K : N) + pad, ldc = N + pad;
    uint64_t seed = 1000u * M + 10u * N + K;
    float *Af = make_operand(M, K, tA, lda, seed, 0),
          *Bf = make_operand(K, N, tB, ldb, seed + 1, 0);
    float *Ab = make_operand(M, K, tA, lda, seed, 1),
          *Bb = make_operand(K, N, tB, ldb, seed + 1, 1);
    size_t nA = (size_t)(tA ? K : M) * lda, nB = (size_t)(tB ? N : K) * ldb, nC = (size_t)M * ldc;
    mtc_bf16 *A = to_bf16(Af, nA), *B = to_bf16(Bf, nB); /* rounds as Ab, Bb */
    float bias_f[2200];
    mtc_bf16 bias[2200];
    mtc_rng_fill_normal(bias_f, (size_t)N, seed, 6, 0, 0.0f, 1.0f);
    nn_f32_to_bf16(bias, bias_f, (size_t)N);
    void *C = malloc(nC * mtc_dtype_size(cdt));
    double *C0 = malloc(nC * sizeof *C0);
    for (size_t i = 0; i < nC; i++) { /* C0 = closed-form values, padding = sentinel 7 */
        double v = (i % (size_t)ldc) < (size_t)N ? 0.25 * (double)((i * 7) % 13) - 1.5 : 7.0;
        mtc_dtype_store(C, cdt, i, v);
        C0[i] = mtc_dtype_load(C, cdt, i);
    }
    mtc_result_t rc = nn_lowp_gemm(pool1, lp, MTC_DTYPE_BF16, cdt, tA, tB, M, N, K, alpha, A, lda,
                                   B, ldb, use_bias ? bias : NULL, beta, C, ldc);
    T_CHECKF(rc == MTC_OK, "gemm %dx%dx%d: %s", M, N, K, mtc_error_detail());
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double sx = 0, sf = 0, S = 0;
            for (int k = 0; k < K; k++) {
                double ax = at(Ab, tA, lda, i, k), bx = at(Bb, tB, ldb, k, j);
                sx += ax * bx, S += fabs(ax * bx);
                sf += at(Af, tA, lda, i, k) * at(Bf, tB, ldb, k, j);
            }
            size_t c = (size_t)i * ldc + j;
            double b = use_bias ? mtc_bf16_to_f32(bias[j]) : 0.0;
            double cx = alpha * sx + b + beta * C0[c], cf = alpha * sf + b + beta * C0[c];
            double acc = gamma_k(K) * (fabs(alpha) * S + fabs(b) + fabs(beta * C0[c]));
            double got = mtc_dtype_load(C, cdt, c);
            double tol_x = cdt == MTC_DTYPE_BF16 ? 0x1p-8 * fabs(cx) + 2 * acc : acc;
            double tol_f = tol_x + (0x1p-7 + 0x1p-16) * fabs(alpha) * S;
            if (!(fabs(got - cx) <= tol_x + 1e-30) || !(fabs(got - cf) <= tol_f + 1e-30)) {
                if (bad++ < 3)
                    fprintf(stderr,
                            "bf16 gemm M%d N%d K%d tA%d tB%d v%d C[%d,%d] = %.9g, bf16-exact %.9g "
                            "(tol %.3g), fp32-exact %.9g (tol %.3g)\n",
                            M, N, K, tA, tB, variant, i, j, got, cx, tol_x, cf, tol_f);
            }
            if (S > 0) worst = fmax(worst, fabs(got - cx) / (fabs(alpha) * S));
        }
        for (int j = N; j < ldc; j++)
            if (mtc_dtype_load(C, cdt, (size_t)i * ldc + j) != 7.0 && bad++ < 3)
                fprintf(stderr, "bf16 gemm M%d N%d K%d wrote padding C[%d,%d]\n", M, N, K, i, j);
    }
    gemm_failures += bad != 0;
    T_CHECKF(bad == 0, "bf16 gemm M%d N%d K%d tA%d tB%d variant %d: %d elements out of bounds", M,
             N, K, tA, tB, variant, bad);
    free(Af), free(Bf), free(Ab), free(Bb), free(A), free(B), free(C), free(C0);
}

/* fp32 through oneDNN against nn_sgemm (OpenBLAS), beta 0 and 1. */
static void gemm_f32_case(nn_lowp *lp, shape s, int tA, int tB, float beta) {
    int M = s.M, N = s.N, K = s.K, lda = tA ? M : K, ldb = tB ? K : N, ldc = N;
    uint64_t seed = 7000u * M + 10u * N + K;
    float *A = make_operand(M, K, tA, lda, seed, 0), *B = make_operand(K, N, tB, ldb, seed + 1, 0);
    size_t nC = (size_t)M * N;
    float *C1 = malloc(nC * sizeof *C1), *C2 = malloc(nC * sizeof *C2);
    for (size_t i = 0; i < nC; i++)
        C1[i] = C2[i] = 0.125f * (float)(i % 17) - 1.0f;
    mtc_result_t rc =
        nn_gemm_f32_dnnl(pool1, lp, tA, tB, M, N, K, 1.0f, A, lda, B, ldb, beta, C1, ldc);
    T_CHECKF(rc == MTC_OK, "f32 gemm: %s", mtc_error_detail());
    nn_sgemm(pool1, tA, tB, M, N, K, 1.0f, A, lda, B, ldb, beta, C2, ldc);
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double S = 0;
            for (int k = 0; k < K; k++)
                S += fabs(at(A, tA, lda, i, k) * at(B, tB, ldb, k, j));
            size_t c = (size_t)i * ldc + j;
            double scale = S + fabs(beta) * fabs(0.125 * (double)(c % 17) - 1.0);
            if (!(fabs((double)C1[c] - C2[c]) <= 1e-5 * scale) && bad++ < 3)
                fprintf(stderr,
                        "f32 gemm M%d N%d K%d tA%d tB%d: %.9g (oneDNN) vs %.9g (OpenBLAS)\n", M, N,
                        K, tA, tB, C1[c], C2[c]);
        }
    T_CHECKF(bad == 0, "f32 gemm M%d N%d K%d tA%d tB%d beta %g: %d differ from OpenBLAS", M, N, K,
             tA, tB, (double)beta, bad);
    free(A), free(B), free(C1), free(C2);
}

/* The --bf16 fp32 engine (lowp.h, nn_bf16_gemm): nn_sgemm on bf16-valued
 * fp32 operands against oneDNN's bf16 GEMM on the same values. Products
 * of bf16 values are exact in fp32, so the two differ only by their fp32
 * summation errors, each below gamma_K times the sum of |products|: the
 * bound 2 gamma_K S, about 2^-16 relative for these K, is 2^8 times tighter
 * than one bf16 rounding of a product would allow. A case with an operand
 * that is not bf16-valued shows the bound has teeth: there the engines
 * differ (oneDNN rounds it, fp32 does not) by far more. */
static void test_f32_engine_case(nn_lowp *lp, shape s, int tA, int tB, int bf16_valued,
                                 int *beyond) {
    int M = s.M, N = s.N, K = s.K, lda = tA ? M : K, ldb = tB ? K : N, ldc = N;
    uint64_t seed = 9000u * M + 10u * N + K;
    float *A = make_operand(M, K, tA, lda, seed, bf16_valued),
          *B = make_operand(K, N, tB, ldb, seed + 1, 1);
    size_t nA = (size_t)(tA ? K : M) * lda, nB = (size_t)(tB ? N : K) * ldb, nC = (size_t)M * N;
    mtc_bf16 *A16 = to_bf16(A, nA), *B16 = to_bf16(B, nB);
    float *C1 = malloc(nC * sizeof *C1), *C2 = malloc(nC * sizeof *C2);
    T_CHECK(nn_gemm_bf16(pool3, lp, tA, tB, M, N, K, 1.0f, A16, lda, B16, ldb, 0.0f, C1, ldc) ==
            MTC_OK);
    nn_sgemm(pool3, tA, tB, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C2, ldc);
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double S = 0;
            for (int k = 0; k < K; k++)
                S += fabs(at(A, tA, lda, i, k) * at(B, tB, ldb, k, j));
            size_t c = (size_t)i * ldc + j;
            bad += !(fabs((double)C1[c] - C2[c]) <= 2 * gamma_k(K) * S + 1e-30);
        }
    if (bf16_valued)
        T_CHECKF(bad == 0, "fp32 engine M%d N%d K%d tA%d tB%d: %d elements beyond 2 gamma_K", M, N,
                 K, tA, tB, bad);
    else
        *beyond += bad;
    free(A), free(B), free(A16), free(B16), free(C1), free(C2);
}

static void test_f32_engine(nn_lowp *lp) {
    for (size_t i = 0; i < NSHAPES; i++)
        for (int t = 0; t < 4; t++)
            test_f32_engine_case(lp, shapes[i], t & 1, t >> 1, 1, NULL);
    int beyond = 0;
    test_f32_engine_case(lp, (shape){64, 64, 64}, 0, 1, 0, &beyond);
    T_CHECKF(beyond > 64 * 64 / 2, "an fp32 operand: only %d of %d beyond the bound", beyond,
             64 * 64);
    /* the out-of-place rounding the fp32 engine copies its operands with */
    float in[1000], a[1000], b[1000];
    mtc_rng_fill_normal(in, 1000, 77, 1, 0, 0.0f, 1.0f);
    in[3] = 1e-40f, in[4] = NAN, in[5] = INFINITY; /* a subnormal, NaN, inf */
    memcpy(a, in, sizeof a);
    nn_round_bf16(a, 1000);
    nn_round_bf16_to(b, in, 1000);
    T_CHECK(!memcmp(a, b, sizeof a));
    memcpy(a, in, sizeof a);
    nn_round_f16(a, 1000);
    nn_round_f16_to(b, in, 1000);
    T_CHECK(!memcmp(a, b, sizeof a));
    /* names, and the set-up probe gives both rates */
    T_CHECK(nn_bf16_gemm_parse("auto") == NN_BF16_GEMM_AUTO);
    T_CHECK(nn_bf16_gemm_parse("dnnl-bf16") == NN_BF16_GEMM_DNNL);
    T_CHECK(nn_bf16_gemm_parse("fp32") == NN_BF16_GEMM_F32);
    T_CHECK(nn_bf16_gemm_parse("bf16") == -1 && nn_bf16_gemm_parse(NULL) == -1);
    T_CHECK(!strcmp(nn_bf16_gemm_name(NN_BF16_GEMM_F32), "fp32"));
    double g16 = 0, g32 = 0;
    T_CHECK(nn_bf16_gemm_measure(pool1, 256, 256, 256, &g16, &g32) == MTC_OK);
    T_CHECKF(g16 > 0 && g32 > 0, "probe rates bf16 %g, fp32 %g GFLOP/s", g16, g32);
    printf("ok   fp32 engine within 2 gamma_K of oneDNN bf16 on %d cases; probe 256^3: bf16 %.1f, "
           "fp32 %.1f GFLOP/s (ratio %.2f, under whatever load the machine has)\n",
           (int)NSHAPES * 4, g16, g32, g16 / g32);
}

/* Pools of 1 and 3 threads give the same bits (tiles depend on the shape
 * only), including shapes cut into 2 and 4 tiles by rows and by columns. */
static void test_thread_invariance(nn_lowp *lp) {
    static const shape big[] = {
        {257, 300, 31}, {513, 96, 200}, {40, 2100, 50}, {2100, 64, 40}, {520, 1100, 40}};
    for (size_t s = 0; s < sizeof big / sizeof big[0]; s++) {
        int M = big[s].M, N = big[s].N, K = big[s].K;
        float *Af = make_operand(M, K, 0, K, 11 + s, 0), *Bf = make_operand(K, N, 1, K, 12 + s, 0);
        mtc_bf16 *A = to_bf16(Af, (size_t)M * K), *B = to_bf16(Bf, (size_t)N * K);
        float *C1 = calloc((size_t)M * N, sizeof *C1), *C3 = calloc((size_t)M * N, sizeof *C3);
        T_CHECK(nn_gemm_bf16(pool1, lp, 0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C1, N) == MTC_OK);
        T_CHECK(nn_gemm_bf16(pool3, lp, 0, 1, M, N, K, 1.0f, A, K, B, K, 0.0f, C3, N) == MTC_OK);
        T_CHECKF(memcmp(C1, C3, (size_t)M * N * sizeof *C1) == 0,
                 "M%d N%d K%d: 1 and 3 threads differ", M, N, K);
        float *F1 = calloc((size_t)M * N, sizeof *F1), *F3 = calloc((size_t)M * N, sizeof *F3);
        T_CHECK(nn_gemm_f32_dnnl(pool1, lp, 0, 1, M, N, K, 1.0f, Af, K, Bf, K, 0.0f, F1, N) ==
                MTC_OK);
        T_CHECK(nn_gemm_f32_dnnl(pool3, lp, 0, 1, M, N, K, 1.0f, Af, K, Bf, K, 0.0f, F3, N) ==
                MTC_OK);
        T_CHECKF(memcmp(F1, F3, (size_t)M * N * sizeof *F1) == 0,
                 "f32 M%d N%d K%d: 1 and 3 threads differ", M, N, K);
        free(Af), free(Bf), free(A), free(B), free(C1), free(C3), free(F1), free(F3);
    }
}

/* A repeated shape creates nothing; beta = 1 twice accumulates twice. */
static void test_cache_and_accumulate(nn_lowp *lp) {
    int M = 33, N = 20, K = 70;
    float *Af = make_operand(M, K, 1, M, 21, 1), *Bf = make_operand(K, N, 0, N, 22, 1);
    mtc_bf16 *A = to_bf16(Af, (size_t)K * M), *B = to_bf16(Bf, (size_t)K * N);
    float *C = calloc((size_t)M * N, sizeof *C), *P = calloc((size_t)M * N, sizeof *P);
    long c0, h0, c1, h1, c2, h2;
    nn_lowp_stats(lp, &c0, &h0);
    T_CHECK(nn_gemm_bf16(pool1, lp, 1, 0, M, N, K, 1.0f, A, M, B, N, 0.0f, P, N) == MTC_OK);
    nn_lowp_stats(lp, &c1, &h1);
    T_CHECK(nn_gemm_bf16(pool3, lp, 1, 0, M, N, K, 1.0f, A, M, B, N, 1.0f, C, N) == MTC_OK);
    T_CHECK(nn_gemm_bf16(pool3, lp, 1, 0, M, N, K, 1.0f, A, M, B, N, 1.0f, C, N) == MTC_OK);
    nn_lowp_stats(lp, &c2, &h2);
    T_CHECK(nn_gemm_bf16(pool1, lp, 1, 0, M, N, K, 1.0f, A, M, B, N, 1.0f, C, N) == MTC_OK);
    long c3, h3;
    nn_lowp_stats(lp, &c3, &h3);
    T_CHECKF(c1 > c0 && c2 == c1 + 1 && c3 == c2 && h3 == h2 + 1 && h2 == h1 + 1,
             "primitives created %ld %ld %ld %ld, hits %ld %ld %ld %ld", c0, c1, c2, c3, h0, h1, h2,
             h3);
    int bad = 0; /* 3 P in exact arithmetic; each step rounds once */
    for (int i = 0; i < M * N; i++)
        if (!(fabs(C[i] - 3.0 * P[i]) <= 4 * 0x1p-24 * 3 * fabs(P[i]) + 1e-6)) bad++;
    T_CHECKF(bad == 0, "beta = 1 thrice: %d elements are not 3x the product", bad);
    /* prepared at set-up: the first real call creates nothing */
    long c4, h4, c5, h5;
    T_CHECK(nn_lowp_gemm_prepare(lp, MTC_DTYPE_BF16, MTC_DTYPE_BF16, 0, 1, M, N, K, 1.0f, K, K, 1,
                                 0.0f, N) == MTC_OK);
    nn_lowp_stats(lp, &c4, &h4);
    mtc_bf16 *Cb = calloc((size_t)M * N, 2);
    T_CHECK(nn_lowp_gemm(pool3, lp, MTC_DTYPE_BF16, MTC_DTYPE_BF16, 0, 1, M, N, K, 1.0f, A, K, B, K,
                         B, 0.0f, Cb, N) == MTC_OK);
    nn_lowp_stats(lp, &c5, &h5);
    T_CHECKF(c4 == c3 + 1 && c5 == c4 && h5 == h4 + 1, "prepare: created %ld %ld %ld", c3, c4, c5);
    free(Cb);
    free(Af), free(Bf), free(A), free(B), free(C), free(P);
}

/* Bad arguments are refused with a message, not computed. */
static void test_refusals(nn_lowp *lp) {
    mtc_bf16 a[16] = {0}, b[16] = {0};
    float c[16] = {0};
    T_CHECK(nn_gemm_bf16(pool1, lp, 0, 0, 2, 2, 2, 1.0f, a, 2, b, 2, 0.5f, c, 2) ==
            MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(strstr(mtc_error_detail(), "beta=0.5") != NULL);
    T_CHECK(nn_gemm_bf16(pool1, lp, 0, 0, 2, 2, 3, 1.0f, a, 2, b, 2, 0.0f, c, 2) ==
            MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(strstr(mtc_error_detail(), "lda=2") != NULL);
    T_CHECK(nn_lowp_gemm(pool1, lp, MTC_DTYPE_BF16, MTC_DTYPE_F32, 0, 0, 2, 2, 2, 2.0f, a, 2, b, 2,
                         b, 0.0f, c, 2) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(nn_lowp_gemm(pool1, lp, MTC_DTYPE_F32, MTC_DTYPE_BF16, 0, 0, 2, 2, 2, 1.0f, c, 2, c, 2,
                         NULL, 0.0f, a, 2) == MTC_ERR_INVALID_ARGUMENT);
}

/* L = sum out * G over the forward's fp32 output, in double. */
static double linear_loss(nn_lowp *lp, float *out, const mtc_bf16 *inp, const mtc_bf16 *w,
                          const mtc_bf16 *bias, const float *G, int N, int IN, int OUT) {
    mtc_result_t rc =
        nn_linear_bf16_forward(pool1, lp, out, MTC_DTYPE_F32, inp, w, bias, N, IN, OUT);
    if (rc != MTC_OK) return NAN;
    double L = 0;
    for (int k = 0; k < N * OUT; k++)
        L += (double)out[k] * G[k];
    return L;
}

/* Forward against double; backward against secants through +-v (v = 0.5,
 * a bf16 value): the loss is linear in every input, so the secant is the
 * derivative, and the rounding of rows the perturbation does not touch is
 * the same in both evaluations. Bound per secant: the fp32 accumulation of
 * the touched outputs (gamma(IN+1) S over them, S from |x| maxed with v),
 * weighted by |G| and divided by 2v, plus the backward product's own
 * gamma bound; a bf16 dinp adds 2^-8 |dinp|. */
static void test_linear(nn_lowp *lp, int N, int IN, int OUT, mtc_dtype_t dinp_dt) {
    const float v = 0.5f;
    size_t nI = (size_t)N * IN, nW = (size_t)OUT * IN, nO = (size_t)N * OUT;
    float *fi = malloc(nI * 4), *fw = malloc(nW * 4), *fb = malloc(OUT * 4), *G = malloc(nO * 4);
    mtc_rng_fill_normal(fi, nI, 31, 1, 0, 0.0f, 1.0f);
    mtc_rng_fill_normal(fw, nW, 31, 2, 0, 0.0f, 0.3f);
    mtc_rng_fill_normal(fb, (size_t)OUT, 31, 3, 0, 0.0f, 0.5f);
    mtc_rng_fill_normal(G, nO, 31, 4, 0, 0.0f, 1.0f);
    mtc_bf16 *inp = to_bf16(fi, nI), *w = to_bf16(fw, nW), *b = to_bf16(fb, (size_t)OUT);
    mtc_bf16 *dout = to_bf16(G, nO);
    nn_bf16_to_f32(G, dout, nO); /* G = dout exactly */
    nn_bf16_to_f32(fi, inp, nI), nn_bf16_to_f32(fw, w, nW), nn_bf16_to_f32(fb, b, (size_t)OUT);

    /* forward, fp32 and bf16 outputs */
    float *out = malloc(nO * 4);
    mtc_bf16 *outb = malloc(nO * 2);
    T_CHECK(nn_linear_bf16_forward(pool1, lp, out, MTC_DTYPE_F32, inp, w, b, N, IN, OUT) == MTC_OK);
    T_CHECK(nn_linear_bf16_forward(pool3, lp, outb, MTC_DTYPE_BF16, inp, w, b, N, IN, OUT) ==
            MTC_OK);
    double *S = malloc(nO * sizeof *S); /* bound scale per output, perturbations included */
    int bad = 0;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OUT; o++) {
            double s = fb[o], a = fmax(fabs(fb[o]), v);
            for (int i = 0; i < IN; i++) {
                s += (double)fi[n * IN + i] * fw[o * IN + i];
                a += fmax(fabs(fi[n * IN + i]), v) * fmax(fabs(fw[o * IN + i]), v);
            }
            S[n * OUT + o] = a;
            double tol = gamma_k(IN + 1) * a;
            float gb = mtc_bf16_to_f32(outb[n * OUT + o]);
            if (!(fabs(out[n * OUT + o] - s) <= tol) ||
                !(fabs(gb - s) <= 0x1p-8 * fabs(s) + 2 * tol))
                bad++;
        }
    T_CHECKF(bad == 0, "linear forward N%d IN%d OUT%d: %d outputs off", N, IN, OUT, bad);

    /* backward: dw and db accumulate onto closed-form starting values */
    void *dinp = malloc(nI * 4);
    float *dw = malloc(nW * 4), *db = malloc(OUT * 4), *dw0 = malloc(nW * 4),
          *db0 = malloc(OUT * 4);
    for (size_t k = 0; k < nW; k++)
        dw[k] = dw0[k] = 0.01f * (float)(k % 7);
    for (int k = 0; k < OUT; k++)
        db[k] = db0[k] = -0.5f + 0.25f * (float)(k % 5);
    T_CHECK(nn_linear_bf16_backward(pool3, lp, dinp, dinp_dt, dw, db, dout, inp, w, N, IN, OUT) ==
            MTC_OK);

    mtc_bf16 *pi = to_bf16(fi, nI), *pw = to_bf16(fw, nW), *pb = to_bf16(fb, (size_t)OUT);
    mtc_bf16 plus = mtc_f32_to_bf16(v), minus = mtc_f32_to_bf16(-v);
    int bad_i = 0, bad_w = 0, bad_b = 0;
    for (int n = 0; n < N; n++) /* dinp */
        for (int i = 0; i < IN; i++) {
            mtc_bf16 keep = pi[n * IN + i];
            pi[n * IN + i] = plus;
            double Lp = linear_loss(lp, out, pi, w, b, G, N, IN, OUT);
            pi[n * IN + i] = minus;
            double Lm = linear_loss(lp, out, pi, w, b, G, N, IN, OUT);
            pi[n * IN + i] = keep;
            double fd = (Lp - Lm) / (2 * v), tol = 0, sb = 0;
            for (int o = 0; o < OUT; o++) {
                tol += fabs(G[n * OUT + o]) * 2 * gamma_k(IN + 1) * S[n * OUT + o];
                sb += fabs((double)G[n * OUT + o] * fw[o * IN + i]);
            }
            double got = mtc_dtype_load(dinp, dinp_dt, (size_t)n * IN + i);
            tol = tol / (2 * v) + gamma_k(OUT) * sb + 1e-12 * fabs(Lp);
            if (dinp_dt == MTC_DTYPE_BF16) tol += 0x1p-8 * fabs(fd) + 0x1p-8 * tol;
            if (!(fabs(got - fd) <= tol) && bad_i++ < 3)
                fprintf(stderr, "dinp[%d,%d] = %.9g, secant %.9g (tol %.3g)\n", n, i, got, fd, tol);
        }
    for (int o = 0; o < OUT; o++) /* dw */
        for (int i = 0; i < IN; i++) {
            mtc_bf16 keep = pw[o * IN + i];
            pw[o * IN + i] = plus;
            double Lp = linear_loss(lp, out, inp, pw, b, G, N, IN, OUT);
            pw[o * IN + i] = minus;
            double Lm = linear_loss(lp, out, inp, pw, b, G, N, IN, OUT);
            pw[o * IN + i] = keep;
            double fd = (Lp - Lm) / (2 * v), tol = 0, sb = 0;
            for (int n = 0; n < N; n++) {
                tol += fabs(G[n * OUT + o]) * 2 * gamma_k(IN + 1) * S[n * OUT + o];
                sb += fabs((double)G[n * OUT + o] * fi[n * IN + i]);
            }
            double got = (double)dw[o * IN + i] - dw0[o * IN + i];
            tol = tol / (2 * v) + gamma_k(N) * (sb + fabs(dw0[o * IN + i])) + 1e-12 * fabs(Lp);
            if (!(fabs(got - fd) <= tol) && bad_w++ < 3)
                fprintf(stderr, "dw[%d,%d] = %.9g, secant %.9g (tol %.3g)\n", o, i, got, fd, tol);
        }
    for (int o = 0; o < OUT; o++) { /* db */
        mtc_bf16 keep = pb[o];
        pb[o] = plus;
        double Lp = linear_loss(lp, out, inp, w, pb, G, N, IN, OUT);
        pb[o] = minus;
        double Lm = linear_loss(lp, out, inp, w, pb, G, N, IN, OUT);
        pb[o] = keep;
        double fd = (Lp - Lm) / (2 * v), tol = 0, sg = 0;
        for (int n = 0; n < N; n++) {
            tol += fabs(G[n * OUT + o]) * 2 * gamma_k(IN + 1) * S[n * OUT + o];
            sg += fabs(G[n * OUT + o]);
        }
        double got = (double)db[o] - db0[o];
        tol = tol / (2 * v) + gamma_k(N) * (sg + fabs(db0[o])) + 1e-12 * fabs(Lp);
        if (!(fabs(got - fd) <= tol) && bad_b++ < 3)
            fprintf(stderr, "db[%d] = %.9g, secant %.9g (tol %.3g)\n", o, got, fd, tol);
    }
    T_CHECKF(bad_i == 0, "linear N%d IN%d OUT%d: %d dinp (%s) off", N, IN, OUT, bad_i,
             mtc_dtype_name(dinp_dt));
    T_CHECKF(bad_w == 0, "linear N%d IN%d OUT%d: %d dw off", N, IN, OUT, bad_w);
    T_CHECKF(bad_b == 0, "linear N%d IN%d OUT%d: %d db off", N, IN, OUT, bad_b);
    free(fi), free(fw), free(fb), free(G), free(inp), free(w), free(b), free(dout), free(out);
    free(outb), free(S), free(dinp), free(dw), free(db), free(dw0), free(db0), free(pi), free(pw);
    free(pb);
}

static void test_gemms(nn_lowp *lp) {
    threads_at_start = count_threads(); /* main, and OpenBLAS's own idle thread */
    T_CHECK(nn_pool_create(1, &pool1) == MTC_OK && nn_pool_create(3, &pool3) == MTC_OK);
    for (size_t s = 0; s < NSHAPES; s++)
        for (int t = 0; t < 4; t++)
            for (int v = 0; v < 4; v++)
                gemm_bf16_case(lp, shapes[s], t & 1, t >> 1, v);
    for (size_t s = 0; s < NSHAPES; s++)
        for (int t = 0; t < 4; t++)
            for (int beta = 0; beta < 2; beta++)
                gemm_f32_case(lp, shapes[s], t & 1, t >> 1, (float)beta);
    /* B packed once per call (lowp.h): by default for the wide bf16 GEMMs
     * above; then for the fp32 ones too, and for none */
    T_CHECKF(nn_lowp_packed_calls(lp) > 0, "no bf16 GEMM ran with a packed B");
    const int modes[] = {NN_LOWP_PACK_BF16 | NN_LOWP_PACK_F32, 0};
    for (int m = 0; m < 2; m++) {
        nn_lowp_set_pack(lp, modes[m]);
        long packs = nn_lowp_packed_calls(lp);
        for (size_t s = 0; s < NSHAPES; s++)
            for (int t = 0; t < 4; t++) {
                gemm_bf16_case(lp, shapes[s], t & 1, t >> 1, t);
                gemm_f32_case(lp, shapes[s], t & 1, t >> 1, (float)(t & 1));
            }
        long more = nn_lowp_packed_calls(lp) - packs;
        T_CHECKF(m ? more == 0 : more > 0, "pack mode %d: %ld GEMMs ran with a packed B", modes[m],
                 more);
    }
    nn_lowp_set_pack(lp, NN_LOWP_PACK_DEFAULT);
    test_thread_invariance(lp);
    test_cache_and_accumulate(lp);
    test_refusals(lp);
    test_linear(lp, 7, 24, 10, MTC_DTYPE_F32);
    test_linear(lp, 9, 17, 33, MTC_DTYPE_BF16);
    test_f32_engine(lp);
    /* oneDNN ran inside the pools and started no OpenMP team: the process
     * has the threads it had before plus pool3's two workers */
    int nthr = count_threads();
    T_CHECKF(nthr == threads_at_start + 2,
             "%d threads in the process, expected %d + 2 pool workers", nthr, threads_at_start);
    char d[256];
    nn_lowp_describe(lp, d, sizeof d);
    long created, hits;
    nn_lowp_stats(lp, &created, &hits);
    printf("%s; %ld primitives created, %ld cached calls\n", d, created, hits);
    nn_pool_free(pool1);
    nn_pool_free(pool3);
}
#endif

int main(void) {
    printf("conversions: %s\n", nn_lowp_convert_isa());
    test_convert_edges();
    test_convert_torch();
    test_convert_sweep();
    nn_lowp *lp = NULL;
    mtc_result_t rc = nn_lowp_create(&lp);
#ifdef MTC_HAVE_DNNL
    T_CHECKF(rc == MTC_OK, "nn_lowp_create: %s", mtc_error_detail());
    if (lp) test_gemms(lp);
#else
    T_CHECK(rc == MTC_ERR_UNSUPPORTED && lp == NULL && strstr(mtc_error_detail(), "libdnnl-dev"));
    printf("built without oneDNN: GEMM tests not run (refusal checked)\n");
#endif
    nn_lowp_free(lp);
    return T_DONE();
}
