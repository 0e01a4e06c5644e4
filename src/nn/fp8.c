/* nn/fp8.c - E4M3 / E5M2 conversion and the fp8 quantizers; see fp8.h.
 *
 * Rounding a magnitude a to the format: with e = max(floor(log2 a), emin)
 * the representable neighbours are multiples of q = 2^(e - mbits), and
 * (a + 2^23 q) - 2^23 q rounds a to such a multiple, to nearest even, in
 * fp32 arithmetic exactly (a < 2^(e+1) keeps the sum's ulp at q). Values
 * above the maximum are clipped to it (the saturating casts TE uses),
 * which also catches infinities; NaN passes the arithmetic unchanged.
 * Limitations: no stochastic rounding, no E8M0 / fp4 element formats. */
#include "nn/fp8.h"

#include <math.h>
#include <string.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

typedef struct {
    int mbits, bias, emin;
    float max;
} fp8_fmt;

static const fp8_fmt FMT[2] = {{3, 7, -6, 448.0f}, {2, 15, -14, 57344.0f}};

float nn_fp8_max(nn_fp8_format f) { return FMT[f].max; }

static inline float f_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}
static inline uint32_t bits_f(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

/* |v| rounded to the format (v finite or not), sign restored. */
static inline float fp8_round(float v, int mbits, int emin, float fmax) {
    float a = fabsf(v);
    int e = (int)(bits_f(a) >> 23) - 127;
    e = e < emin ? emin : e;
    e = e > 20 ? 20 : e; /* beyond 2^20 the value clips anyway */
    float big = f_bits((uint32_t)(e - mbits + 23 + 127) << 23);
    float r = (a + big) - big;
    r = a > fmax ? fmax : r;
    return copysignf(r, v);
}

float nn_fp8_round1(nn_fp8_format f, float x) {
    return fp8_round(x, FMT[f].mbits, FMT[f].emin, FMT[f].max);
}

float nn_fp8_decode(nn_fp8_format f, uint8_t code) {
    const fp8_fmt *t = &FMT[f];
    int ebits = 7 - t->mbits, s = code >> 7, E = (code >> t->mbits) & ((1 << ebits) - 1);
    int M = code & ((1 << t->mbits) - 1);
    float v;
    if (f == NN_FP8_E4M3 && E == 15 && M == 7) return NAN;
    if (f == NN_FP8_E5M2 && E == 31) {
        if (M) return NAN;
        v = INFINITY;
    } else if (E == 0) {
        v = ldexpf((float)M, t->emin - t->mbits);
    } else {
        v = ldexpf(1.0f + (float)M / (float)(1 << t->mbits), E - t->bias);
    }
    return s ? -v : v;
}

uint8_t nn_fp8_encode(nn_fp8_format f, float x) {
    const fp8_fmt *t = &FMT[f];
    if (isnan(x)) return 0x7f;
    float v = nn_fp8_round1(f, x), a = fabsf(v);
    uint8_t s = signbit(v) ? 0x80 : 0;
    if (a == 0) return s;
    int e;
    frexpf(a, &e); /* a = m 2^e, m in [0.5, 1) */
    e -= 1;
    if (e < t->emin) /* subnormal: a = M 2^(emin - mbits) */
        return s | (uint8_t)ldexpf(a, t->mbits - t->emin);
    int M = (int)ldexpf(a, t->mbits - e) - (1 << t->mbits);
    return s | (uint8_t)((e + t->bias) << t->mbits) | (uint8_t)M;
}

#if defined(__AVX512F__)
/* 16 lanes of fp8_round (the same operations in the same order: the same
 * bits); *over = the lanes above the maximum. */
static inline __m512 fp8_round16(__m512 v, int mbits, int emin, __m512 fmax, __mmask16 *over) {
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    __m512 a = _mm512_abs_ps(v);
    __m512i e =
        _mm512_sub_epi32(_mm512_srli_epi32(_mm512_castps_si512(a), 23), _mm512_set1_epi32(127));
    e = _mm512_min_epi32(_mm512_max_epi32(e, _mm512_set1_epi32(emin)), _mm512_set1_epi32(20));
    __m512 big = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(23 + 127 - mbits)), 23));
    __m512 r = _mm512_sub_ps(_mm512_add_ps(a, big), big);
    *over = _mm512_cmp_ps_mask(a, fmax, _CMP_GT_OQ);
    r = _mm512_mask_blend_ps(*over, r, fmax);
    return _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_castps_si512(r), _mm512_and_si512(_mm512_castps_si512(v), sign)));
}
#endif

const char *nn_fp8_isa(void) {
#if defined(__AVX512F__)
    return "avx512f";
#else
    return "scalar";
#endif
}

float nn_fp8_amax(const float *x, size_t n) {
    float m = 0.0f;
    size_t i = 0;
#if defined(__AVX512F__)
    __m512 vm = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16) /* max_ps keeps vm where a lane is NaN, as below */
        vm = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + i)), vm);
    m = _mm512_reduce_max_ps(vm);
#endif
    for (; i < n; i++) {
        float a = fabsf(x[i]);
        m = a > m ? a : m;
    }
    return m;
}

float nn_fp8_scale_from_amax(float amax, float fmax, int pow2, float value_for_inf) {
    if (isinf(amax) || amax == 0.0f || isnan(amax)) return 1.0f;
    float scale = fmax / amax;
    if (isinf(scale)) scale = value_for_inf;
    if (pow2) scale = f_bits(bits_f(scale) & 0xFF800000u);
    return scale;
}

uint8_t nn_fp8_e8m0(float v) {
    if (isnan(v)) return 0xFF;
    if (isinf(v)) return 0xFE;
    if (v == 0.0f) return 0x00;
    uint32_t u = bits_f(v);
    uint8_t exponent = (uint8_t)(u >> 23);
    uint32_t mantissa = u & 0x7FFFFF;
    if ((mantissa > 0 && exponent != 0xFE) && !(exponent == 0 && mantissa <= 0x400000)) ++exponent;
    return exponent;
}

size_t nn_fp8_qdq_scalar(nn_fp8_format f, float *out, const float *x, size_t n, float scale,
                         float scale_inv) {
    const int mb = FMT[f].mbits, emin = FMT[f].emin;
    const float fmax = FMT[f].max;
    size_t sat = 0;
    for (size_t i = 0; i < n; i++) {
        float v = x[i] * scale;
        sat += fabsf(v) > fmax;
        out[i] = fp8_round(v, mb, emin, fmax) * scale_inv;
    }
    return sat;
}

size_t nn_fp8_qdq(nn_fp8_format f, float *out, const float *x, size_t n, float scale,
                  float scale_inv) {
    const int mb = FMT[f].mbits, emin = FMT[f].emin;
    const float fmax = FMT[f].max;
    size_t sat = 0, i = 0;
#if defined(__AVX512F__)
    const __m512 vs = _mm512_set1_ps(scale), vi = _mm512_set1_ps(scale_inv),
                 vf = _mm512_set1_ps(fmax);
    for (; i < n; i += 16) { /* the tail through a mask: every value takes this path */
        __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __mmask16 over;
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), vs);
        __m512 r = _mm512_mul_ps(fp8_round16(v, mb, emin, vf, &over), vi);
        _mm512_mask_storeu_ps(out + i, k, r);
        sat += (size_t)__builtin_popcount((unsigned)(over & k));
    }
#endif
    for (; i < n; i++) {
        float v = x[i] * scale;
        sat += fabsf(v) > fmax;
        out[i] = fp8_round(v, mb, emin, fmax) * scale_inv;
    }
    return sat;
}

/* A block's quantization scale and its inverse. */
static void block_scale(nn_fp8_format f, nn_fp8_block_kind kind, float amax, float *scale,
                        float *inv) {
    if (kind == NN_FP8_BLOCK_MX) {
        uint8_t e = nn_fp8_e8m0(amax * (1.0f / FMT[f].max));
        /* TE's exp2f_rcp: 2^(127 - e); and the dequantization 2^(e - 127) */
        *scale = e == 255   ? NAN
                 : e == 254 ? f_bits(0x00400000u)
                            : f_bits((uint32_t)(254 - e) << 23);
        *inv = e == 0 ? f_bits(0x00400000u) : f_bits((uint32_t)e << 23);
        return;
    }
    /* Float8BlockScaling: power-of-two scales, the bf16 maximum for an overflow */
    *scale = nn_fp8_scale_from_amax(amax, FMT[f].max, 1, f_bits(0x7f7f0000u));
    *inv = 1.0f / *scale;
}

void nn_fp8_block_scale(nn_fp8_format f, nn_fp8_block_kind kind, float amax, float *scale,
                        float *inv) {
    block_scale(f, kind, amax, scale, inv);
}

/* Blocks of br rows x 1 column (the columnwise 32x1 / 128x1 usages): the
 * column amaxes of a row block, COLS columns at a time, then each row with
 * its columns' scales. */
#define COLS 256
static size_t qdq_columns(nn_fp8_format f, nn_fp8_block_kind kind, float *out, const float *x,
                          int R, int Cc, int br, int r0, int r1, float *smin, float *smax) {
    const int mb = FMT[f].mbits, emin = FMT[f].emin;
    const float fmax = FMT[f].max;
    float amax[COLS], scale[COLS], inv[COLS];
    size_t sat = 0;
    for (int rb = r0; rb < r1; rb += br) {
        int re = rb + br < R ? rb + br : R;
        for (int c0 = 0; c0 < Cc; c0 += COLS) {
            int w = Cc - c0 < COLS ? Cc - c0 : COLS;
            for (int c = 0; c < w; c++)
                amax[c] = 0.0f;
            for (int r = rb; r < re; r++) {
                const float *xr = x + (size_t)r * Cc + c0;
                for (int c = 0; c < w; c++) {
                    float a = fabsf(xr[c]);
                    amax[c] = a > amax[c] ? a : amax[c];
                }
            }
            for (int c = 0; c < w; c++) {
                block_scale(f, kind, amax[c], &scale[c], &inv[c]);
                if (amax[c] > 0 && inv[c] < *smin) *smin = inv[c]; /* zero blocks: no scale */
                if (amax[c] > 0 && inv[c] > *smax) *smax = inv[c];
            }
            for (int r = rb; r < re; r++) {
                const float *xr = x + (size_t)r * Cc + c0;
                float *o = out + (size_t)r * Cc + c0;
                int c = 0;
#if defined(__AVX512F__)
                const __m512 vf = _mm512_set1_ps(fmax);
                for (; c + 16 <= w; c += 16) {
                    __mmask16 over;
                    __m512 v = _mm512_mul_ps(_mm512_loadu_ps(xr + c), _mm512_loadu_ps(scale + c));
                    _mm512_storeu_ps(o + c, _mm512_mul_ps(fp8_round16(v, mb, emin, vf, &over),
                                                          _mm512_loadu_ps(inv + c)));
                    sat += (size_t)__builtin_popcount((unsigned)over);
                }
#endif
                for (; c < w; c++) {
                    float v = xr[c] * scale[c];
                    sat += fabsf(v) > fmax;
                    o[c] = fp8_round(v, mb, emin, fmax) * inv[c];
                }
            }
        }
    }
    return sat;
}

size_t nn_fp8_qdq_blocks(nn_fp8_format f, nn_fp8_block_kind kind, float *out, const float *x, int R,
                         int Cc, int br, int bc, int r0, int r1, float *smin, float *smax) {
    size_t sat = 0;
    if (r1 > R) r1 = R;
    if (bc == 1) return qdq_columns(f, kind, out, x, R, Cc, br, r0, r1, smin, smax);
    for (int rb = r0; rb < r1; rb += br) {
        int re = rb + br < R ? rb + br : R;
        for (int cb = 0; cb < Cc; cb += bc) {
            int ce = cb + bc < Cc ? cb + bc : Cc;
            float amax = 0.0f;
            for (int r = rb; r < re; r++) {
                float a = nn_fp8_amax(x + (size_t)r * Cc + cb, (size_t)(ce - cb));
                amax = a > amax ? a : amax;
            }
            float scale, inv;
            block_scale(f, kind, amax, &scale, &inv);
            if (amax > 0 && inv < *smin) *smin = inv;
            if (amax > 0 && inv > *smax) *smax = inv;
            for (int r = rb; r < re; r++)
                sat += nn_fp8_qdq(f, out + (size_t)r * Cc + cb, x + (size_t)r * Cc + cb,
                                  (size_t)(ce - cb), scale, inv);
        }
    }
    return sat;
}
