/* tests/fp8/test_fp8_convert.c - E4M3 and E5M2 against the OCP 8-bit
 * floating point specification's closed forms: every code's value (and
 * NaN / inf codes), every finite code round-trips, rounding of random
 * values equals the nearest code found by search (ties to the even code),
 * the ties, subnormals and saturation at the edges; TE's E8M0 rule. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "nn/fp8.h"
#include "test.h"

/* The spec's value of a code: bias 7 / 15, 3 / 2 mantissa bits. */
static double spec_value(nn_fp8_format f, int code, int *nan, int *inf) {
    int m = f == NN_FP8_E4M3 ? 3 : 2, bias = f == NN_FP8_E4M3 ? 7 : 15, eb = 7 - m;
    int s = code >> 7, E = (code >> m) & ((1 << eb) - 1), M = code & ((1 << m) - 1);
    *nan = *inf = 0;
    if (f == NN_FP8_E4M3 && E == 15 && M == 7) *nan = 1;
    if (f == NN_FP8_E5M2 && E == 31) *(M ? nan : inf) = 1;
    double v = E ? ldexp(1.0 + M / (double)(1 << m), E - bias) : ldexp((double)M, 1 - bias - m);
    return s ? -v : v;
}

static void check_codes(nn_fp8_format f, double max, double min_sub) {
    double top = 0, low = INFINITY;
    for (int c = 0; c < 256; c++) {
        int nan, inf;
        double v = spec_value(f, c, &nan, &inf);
        float d = nn_fp8_decode(f, (uint8_t)c);
        if (nan) {
            T_CHECKF(isnan(d), "code %#x", c);
            continue;
        }
        if (inf) {
            T_CHECKF(isinf(d) && (d < 0) == (c >> 7), "code %#x", c);
            continue;
        }
        T_CHECKF((double)d == v, "code %#x: %g vs %g", c, d, v);
        T_CHECKF(nn_fp8_encode(f, d) == c || (c == 0x80 && nn_fp8_encode(f, d) == 0x80),
                 "code %#x round trip gives %#x", c, nn_fp8_encode(f, d));
        T_CHECKF(nn_fp8_round1(f, d) == d, "code %#x value not kept", c);
        if (fabs(v) > top) top = fabs(v);
        if (v > 0 && v < low) low = v;
    }
    T_CHECK(top == max && nn_fp8_max(f) == (float)max);
    T_CHECK(low == min_sub);
}

/* The nearest finite code's value by search, ties to the even code,
 * beyond the maximum the maximum (saturation). */
static float nearest(nn_fp8_format f, float x) {
    double best = 0, bd = INFINITY;
    int bc = 0;
    for (int c = 0; c < 128; c++) {
        int nan, inf;
        double v = spec_value(f, c, &nan, &inf);
        if (nan || inf) continue;
        double d = fabs(fabs((double)x) - v);
        if (d < bd || (d == bd && !(c & 1))) bd = d, best = v, bc = c;
    }
    (void)bc;
    if (fabs((double)x) > nn_fp8_max(f)) best = nn_fp8_max(f);
    return (float)(x < 0 ? -best : best);
}

static uint64_t rng = 88172645463325252ull;
static double urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static void check_rounding(nn_fp8_format f) {
    int bad = 0;
    for (int i = 0; i < 40000; i++) { /* log-uniform over the whole range and beyond */
        float x =
            (float)(ldexp(1.0 + urand(), (int)(urand() * 44) - 24) * (urand() < 0.5 ? -1 : 1));
        if (nn_fp8_round1(f, x) != nearest(f, x)) bad++;
    }
    T_CHECKF(bad == 0, "%d of 40000 random values rounded off the nearest code", bad);
    /* every midpoint between neighbours goes to the even code */
    for (int c = 0; c < 126; c++) {
        int n1, i1, n2, i2;
        double a = spec_value(f, c, &n1, &i1), b = spec_value(f, c + 1, &n2, &i2);
        if (n1 || n2 || i1 || i2) continue;
        float m = (float)((a + b) / 2);
        float want = (float)(c & 1 ? b : a);
        T_CHECKF(nn_fp8_round1(f, m) == want && nn_fp8_round1(f, -m) == -want,
                 "midpoint of codes %#x, %#x", c, c + 1);
        T_CHECK(nn_fp8_round1(f, nextafterf(m, 0)) == (float)a);
        T_CHECK(nn_fp8_round1(f, nextafterf(m, INFINITY)) == (float)b);
    }
}

/* The vector path (AVX-512 where built) gives the scalar reference's bits,
 * the clipped count included, for every kind of value and every tail length. */
static void check_vector_bits(void) {
    enum { N = 4099 };
    static float x[N], a[N], b[N];
    for (int i = 0; i < N; i++) {
        double u = urand();
        x[i] = (float)(ldexp(1.0 + urand(), (int)(urand() * 80) - 60) * (u < 0.5 ? -1 : 1));
        if (i % 97 == 0) x[i] = NAN;
        if (i % 89 == 0) x[i] = (i & 1) ? INFINITY : -INFINITY;
        if (i % 83 == 0) x[i] = ldexpf(1.5f, -140); /* fp32 subnormal */
        if (i % 79 == 0) x[i] = -0.0f;
    }
    int bad = 0;
    for (int f = 0; f < 2; f++)
        for (int n = N - 20; n <= N; n++) {
            size_t sa = nn_fp8_qdq((nn_fp8_format)f, a, x, (size_t)n, 3.7f, 1 / 3.7f);
            size_t sb = nn_fp8_qdq_scalar((nn_fp8_format)f, b, x, (size_t)n, 3.7f, 1 / 3.7f);
            bad += sa != sb || memcmp(a, b, (size_t)n * sizeof(float)) != 0;
        }
    T_CHECKF(bad == 0, "%s path differs from the scalar one in %d cases", nn_fp8_isa(), bad);
    float m = 0;
    for (int i = 0; i < N; i++)
        if (fabsf(x[i]) > m) m = fabsf(x[i]);
    T_CHECK(nn_fp8_amax(x, N) == m);
}

int main(void) {
    check_vector_bits();
    check_codes(NN_FP8_E4M3, 448.0, ldexp(1, -9));
    check_codes(NN_FP8_E5M2, 57344.0, ldexp(1, -16));
    check_rounding(NN_FP8_E4M3);
    check_rounding(NN_FP8_E5M2);
    /* subnormals: half the smallest is a tie to 0, a bit more rounds up */
    T_CHECK(nn_fp8_round1(NN_FP8_E4M3, ldexpf(1, -10)) == 0.0f);
    T_CHECK(nn_fp8_round1(NN_FP8_E4M3, ldexpf(1.5f, -10)) == ldexpf(1, -9));
    T_CHECK(nn_fp8_round1(NN_FP8_E4M3, ldexpf(3, -10)) == ldexpf(1, -8)); /* 1.5 q: tie to 2 q */
    T_CHECK(nn_fp8_round1(NN_FP8_E5M2, ldexpf(1, -17)) == 0.0f);
    T_CHECK(nn_fp8_round1(NN_FP8_E5M2, 1e-30f) == 0.0f && nn_fp8_round1(NN_FP8_E5M2, 1e-40f) == 0);
    /* saturation (TE's satfinite casts), NaN kept */
    T_CHECK(nn_fp8_round1(NN_FP8_E4M3, 464.0f) == 448.0f); /* would round to 480 = NaN code */
    T_CHECK(nn_fp8_round1(NN_FP8_E4M3, 1e30f) == 448.0f);
    T_CHECK(nn_fp8_round1(NN_FP8_E4M3, -INFINITY) == -448.0f);
    T_CHECK(nn_fp8_round1(NN_FP8_E5M2, 61440.0f) == 57344.0f); /* IEEE would give inf */
    T_CHECK(nn_fp8_round1(NN_FP8_E5M2, INFINITY) == 57344.0f);
    T_CHECK(isnan(nn_fp8_round1(NN_FP8_E4M3, NAN)) && nn_fp8_encode(NN_FP8_E4M3, NAN) == 0x7f);
    float x[6] = {1, 500, -449, 448, NAN, -1e9f}, y[6];
    T_CHECK(nn_fp8_qdq(NN_FP8_E4M3, y, x, 6, 1.0f, 1.0f) == 3); /* 500, -449, -1e9 clipped */
    T_CHECK(y[1] == 448 && y[2] == -448 && y[3] == 448 && isnan(y[4]) && y[5] == -448);
    T_CHECK(nn_fp8_qdq(NN_FP8_E4M3, y, x, 1, 256.0f, 1.0f / 256) == 0 && y[0] == 1.0f);
    /* TE's float_to_e8m0: rounds the exponent up unless exact */
    T_CHECK(nn_fp8_e8m0(1.0f) == 127 && nn_fp8_e8m0(1.5f) == 128 && nn_fp8_e8m0(0.0f) == 0);
    T_CHECK(nn_fp8_e8m0(ldexpf(1, -127)) == 0 && nn_fp8_e8m0(ldexpf(1.5f, -127)) == 1);
    T_CHECK(nn_fp8_e8m0(INFINITY) == 0xFE && nn_fp8_e8m0(NAN) == 0xFF);
    T_CHECK(nn_fp8_e8m0(3e38f) == 0xFE); /* satfinite */
    /* compute_scale_from_amax */
    T_CHECK(nn_fp8_scale_from_amax(0.0f, 448, 0, 1) == 1.0f);
    T_CHECK(nn_fp8_scale_from_amax(INFINITY, 448, 0, 1) == 1.0f);
    T_CHECK(nn_fp8_scale_from_amax(3.0f, 448, 0, 1) == 448.0f / 3.0f);
    T_CHECK(nn_fp8_scale_from_amax(3.0f, 448, 1, 1) == 128.0f);
    T_CHECK(nn_fp8_scale_from_amax(1e-45f, 448, 0, 7.0f) == 7.0f);
    return T_DONE();
}
