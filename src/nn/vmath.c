/* nn/vmath.c - vectorised row primitives for the nn kernels: max, exp with
 * sum (softmax), scaling, GELU forward/backward.
 *
 * With AVX2+FMA (the default -march=native build on x86-64) exp is the
 * Cephes expf polynomial on 8 lanes (about 1 ulp; inputs below -87.3 give
 * ~1e-38 instead of 0, which no softmax notices); otherwise plain C with
 * libm. GELU uses 0.5 x (1 + tanh u) = x * sigmoid(2u), which is exact
 * algebra and avoids tanh's cancellation near 0.
 * Sums use 8 fixed lanes combined in a fixed order, so a given build gives
 * the same bits every time; the two code paths (AVX2 or not) may differ in
 * the last bits from each other. */
#include <math.h>
#include <string.h>

#include "nn/nn_internal.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define NN_AVX2 1

static inline __m256 exp8(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.0f), lo = _mm256_set1_ps(-87.3365447504f);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500E-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
    __m256 r2 = _mm256_mul_ps(r, r);
    p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* n + 127 in [1, 255]: the clamp above keeps it a normal exponent */
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

static inline float hsum8(__m256 v) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_movehdup_ps(a));
    return _mm_cvtss_f32(a);
}

static inline float exp1(float x) { /* the same polynomial on one lane */
    return _mm256_cvtss_f32(exp8(_mm256_set1_ps(x)));
}
#else
static inline float exp1(float x) { return expf(x); }
#endif

float nn_vmax(const float *x, int n) {
    float m = -INFINITY;
    int k = 0;
#ifdef NN_AVX2
    if (n >= 8) { /* four chains hide max's latency; max is exact in any order */
        __m256 v = _mm256_loadu_ps(x), v1 = v, v2 = v, v3 = v;
        for (k = 8; k + 32 <= n; k += 32) {
            v = _mm256_max_ps(v, _mm256_loadu_ps(x + k));
            v1 = _mm256_max_ps(v1, _mm256_loadu_ps(x + k + 8));
            v2 = _mm256_max_ps(v2, _mm256_loadu_ps(x + k + 16));
            v3 = _mm256_max_ps(v3, _mm256_loadu_ps(x + k + 24));
        }
        for (; k + 8 <= n; k += 8)
            v = _mm256_max_ps(v, _mm256_loadu_ps(x + k));
        v = _mm256_max_ps(_mm256_max_ps(v, v1), _mm256_max_ps(v2, v3));
        __m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        a = _mm_max_ps(a, _mm_movehl_ps(a, a));
        a = _mm_max_ss(a, _mm_movehdup_ps(a));
        m = _mm_cvtss_f32(a);
    }
#endif
    for (; k < n; k++)
        m = x[k] > m ? x[k] : m;
    return m;
}

void nn_vmul2(float *x, int n, float a, float b) {
    int k = 0;
#ifdef NN_AVX2
    __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    for (; k + 8 <= n; k += 8)
        _mm256_storeu_ps(x + k, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + k), va), vb));
#endif
    for (; k < n; k++)
        x[k] = (x[k] * a) * b;
}

float nn_vexp_sum(float *y, const float *x, int n, float shift) {
    float s = 0.0f;
    int k = 0;
#ifdef NN_AVX2
    __m256 acc = _mm256_setzero_ps(), sh = _mm256_set1_ps(shift);
    for (; k + 8 <= n; k += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + k), sh));
        _mm256_storeu_ps(y + k, e);
        acc = _mm256_add_ps(acc, e);
    }
    s = hsum8(acc);
#endif
    for (; k < n; k++) {
        y[k] = exp1(x[k] - shift);
        s += y[k];
    }
    return s;
}

void nn_vscale(float *y, float a, int n) {
    int k = 0;
    for (; k + 8 <= n; k += 8)
        NN_V8_ST(y + k, NN_V8_LD(y + k) * a);
    for (; k < n; k++)
        y[k] *= a;
}

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

/* gelu(x) = x * sigmoid(2u), u = K (x + A x^3). With AVX2 the tail goes
 * through the same vector code on a zero-padded copy, so an element's value
 * never depends on where it sits in the buffer (a tensor-parallel shard
 * computes the serial run's bits). */
#ifdef NN_AVX2
static inline __m256 gelu8(__m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f), m2k = _mm256_set1_ps(-2.0f * GELU_K);
    __m256 x2 = _mm256_mul_ps(x, x);
    __m256 t = _mm256_mul_ps(_mm256_mul_ps(m2k, x),
                             _mm256_fmadd_ps(_mm256_set1_ps(GELU_A), x2, one)); /* -2u */
    return _mm256_div_ps(x, _mm256_add_ps(one, exp8(t)));
}

/* d gelu/dx = s + 2 x s (1 - s) K (1 + 3 A x^2), s = sigmoid(2u) */
static inline __m256 gelu_grad8(__m256 x, __m256 dy) {
    const __m256 one = _mm256_set1_ps(1.0f), m2k = _mm256_set1_ps(-2.0f * GELU_K);
    __m256 x2 = _mm256_mul_ps(x, x);
    __m256 t =
        _mm256_mul_ps(_mm256_mul_ps(m2k, x), _mm256_fmadd_ps(_mm256_set1_ps(GELU_A), x2, one));
    __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, exp8(t)));
    __m256 ds = _mm256_mul_ps(s, _mm256_sub_ps(one, s));
    __m256 up = _mm256_mul_ps(_mm256_set1_ps(2.0f * GELU_K),
                              _mm256_fmadd_ps(_mm256_set1_ps(3.0f * GELU_A), x2, one));
    __m256 g = _mm256_fmadd_ps(_mm256_mul_ps(x, ds), up, s);
    return _mm256_mul_ps(g, dy);
}

void nn_vgelu(float *out, const float *inp, size_t n) {
    size_t k = 0;
    for (; k + 8 <= n; k += 8)
        _mm256_storeu_ps(out + k, gelu8(_mm256_loadu_ps(inp + k)));
    if (k < n) {
        float x[8] = {0}, y[8];
        memcpy(x, inp + k, (n - k) * sizeof(float));
        _mm256_storeu_ps(y, gelu8(_mm256_loadu_ps(x)));
        memcpy(out + k, y, (n - k) * sizeof(float));
    }
}

void nn_vgelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    size_t k = 0;
    for (; k + 8 <= n; k += 8)
        _mm256_storeu_ps(dinp + k, gelu_grad8(_mm256_loadu_ps(inp + k), _mm256_loadu_ps(dout + k)));
    if (k < n) {
        float x[8] = {0}, dy[8] = {0}, y[8];
        memcpy(x, inp + k, (n - k) * sizeof(float));
        memcpy(dy, dout + k, (n - k) * sizeof(float));
        _mm256_storeu_ps(y, gelu_grad8(_mm256_loadu_ps(x), _mm256_loadu_ps(dy)));
        memcpy(dinp + k, y, (n - k) * sizeof(float));
    }
}
#else
void nn_vgelu(float *out, const float *inp, size_t n) {
    for (size_t k = 0; k < n; k++) {
        float x = inp[k];
        float t = -2.0f * GELU_K * x * (1.0f + GELU_A * x * x);
        out[k] = x / (1.0f + exp1(t));
    }
}

void nn_vgelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    for (size_t k = 0; k < n; k++) {
        float x = inp[k];
        float t = -2.0f * GELU_K * x * (1.0f + GELU_A * x * x);
        float s = 1.0f / (1.0f + exp1(t));
        float g = s + x * (s * (1.0f - s)) * (2.0f * GELU_K * (1.0f + 3.0f * GELU_A * x * x));
        dinp[k] = g * dout[k];
    }
}
#endif
