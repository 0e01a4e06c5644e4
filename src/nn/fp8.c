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

float nn_fp8_amax(const float *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
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

size_t nn_fp8_qdq(nn_fp8_format f, float *out, const float *x, size_t n, float scale,
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
                for (int c = 0; c < w; c++) {
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
