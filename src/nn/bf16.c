/* nn/bf16.c - fp32 <-> bf16 and fp32 <-> fp16 conversion of buffers.
 *
 * bf16 is the top half of an fp32, so bf16 -> fp32 is a shift, and fp32 ->
 * bf16 rounds the low half away to nearest even (add 0x7fff plus the lowest
 * kept bit, then truncate), NaNs excepted. With AVX512-BF16 32 values go
 * through one vcvtne2ps2bf16, which rounds the same way but flushes fp32
 * subnormals to zero; a block holding a subnormal is redone with the scalar
 * rule, so both paths give mtc_f32_to_bf16's bits for every input. fp16 uses
 * F16C's vcvtps2ph (AVX-512 form when present), which is IEEE round to
 * nearest even with subnormals, or the scalar rule below.
 *
 * Relies on: core/dtype.h's scalar bf16 rule (the one the collectives use).
 * Does not: use the thread pool (conversions run at memory speed on one
 * thread) or touch the floating-point environment. */
#include <string.h>

#include "nn/lowp.h"

#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

const char *nn_lowp_convert_isa(void) {
#if defined(__AVX512BF16__) && defined(__AVX512F__)
    return "bf16: avx512bf16, fp16: avx512f";
#elif defined(__AVX512F__)
    return "bf16: scalar rounding, avx512f widening, fp16: avx512f";
#elif defined(__F16C__)
    return "bf16: scalar, fp16: f16c";
#else
    return "scalar";
#endif
}

#if defined(__AVX512BF16__) && defined(__AVX512F__)
/* The 32 bf16 values of in[0..32) into *r, or 0 when a lane is subnormal
 * (exponent 0, mantissa not 0: the instruction would flush it, so the
 * caller converts that block in integer arithmetic instead). */
static inline int bf16_block32(const float *in, __m512i *r) {
    const __m512i expo = _mm512_set1_epi32(0x7f800000), mant = _mm512_set1_epi32(0x007fffff);
    __m512i lo = _mm512_loadu_si512(in), hi = _mm512_loadu_si512(in + 16);
    __mmask16 slo = _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(lo, expo), lo, mant);
    __mmask16 shi = _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(hi, expo), hi, mant);
    if (__builtin_expect((slo | shi) != 0, 0)) return 0;
    *r = (__m512i)_mm512_cvtne2ps_pbh(_mm512_castsi512_ps(hi), _mm512_castsi512_ps(lo));
    return 1;
}
#endif

void nn_f32_to_bf16(mtc_bf16 *out, const float *in, size_t n) {
    size_t i = 0;
#if defined(__AVX512BF16__) && defined(__AVX512F__)
    for (; i + 32 <= n; i += 32) {
        __m512i r;
        if (bf16_block32(in + i, &r)) {
            _mm512_storeu_si512(out + i, r);
            continue;
        }
        for (size_t k = i; k < i + 32; k++)
            out[k] = mtc_f32_to_bf16(in[k]);
    }
#endif
    for (; i < n; i++)
        out[i] = mtc_f32_to_bf16(in[i]);
}

void nn_f32_to_bf16_both(mtc_bf16 *out16, float *out32, const float *in, size_t n) {
    size_t i = 0;
#if defined(__AVX512BF16__) && defined(__AVX512F__)
    for (; i + 32 <= n; i += 32) {
        __m512i r;
        if (bf16_block32(in + i, &r)) {
            _mm512_storeu_si512(out16 + i, r);
            __m512i r0 = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(r));
            __m512i r1 = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(r, 1));
            _mm512_storeu_si512(out32 + i, _mm512_slli_epi32(r0, 16));
            _mm512_storeu_si512(out32 + i + 16, _mm512_slli_epi32(r1, 16));
            continue;
        }
        for (size_t k = i; k < i + 32; k++) {
            out16[k] = mtc_f32_to_bf16(in[k]);
            out32[k] = mtc_bf16_to_f32(out16[k]);
        }
    }
#endif
    for (; i < n; i++) {
        out16[i] = mtc_f32_to_bf16(in[i]);
        out32[i] = mtc_bf16_to_f32(out16[i]);
    }
}

void nn_bf16_to_f32(float *out, const mtc_bf16 *in, size_t n) {
    size_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
        __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(in + i)));
        _mm512_storeu_si512(out + i, _mm512_slli_epi32(h, 16));
    }
#endif
    for (; i < n; i++)
        out[i] = mtc_bf16_to_f32(in[i]);
}

/* fp16 has 5 exponent bits (bias 15) and 10 mantissa bits: normal values
 * from 2^-14, subnormals in units of 2^-24, largest finite 65504. */
nn_f16 nn_f32_to_f16_1(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: quiet, top payload bits kept (as vcvtps2ph) */
        return (nn_f16)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520 = halfway past 65504 (odd): rounds to inf; inf */
        return (nn_f16)(sign | 0x7c00u);
    if (a >= 0x38800000u) { /* normal: rebias the exponent (127 -> 15), round 13 bits away */
        uint32_t r = a - 0x38000000u;
        r += 0xfffu + ((r >> 13) & 1u);
        return (nn_f16)(sign | (r >> 13));
    }
    /* subnormal or zero: q = round(x / 2^-24); x < 2^-25 gives 0 (2^-25
     * itself is a tie, to the even 0) */
    int e = (int)(a >> 23);
    if (e < 102) return sign;
    uint32_t m = (a & 0x7fffffu) | 0x800000u; /* x = m * 2^(e-150) */
    int shift = 126 - e;                      /* 14..24 */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++; /* q = 0x400 is the smallest normal */
    return (nn_f16)(sign | q);
}

float nn_f16_to_f32_1(nn_f16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0) { /* zero or subnormal: m * 2^-24, exact in fp32 */
        float f = (float)m * 0x1p-24f;
        memcpy(&u, &f, sizeof u);
        u |= sign;
    } else if (e == 31) { /* inf, or NaN made quiet (as vcvtph2ps) */
        u = sign | 0x7f800000u | (m << 13) | (m ? 0x00400000u : 0u);
    } else {
        u = sign | ((e + 112u) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#define F16_ROUND (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

void nn_f32_to_f16(nn_f16 *out, const float *in, size_t n) {
    size_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(out + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(in + i), F16_ROUND));
#elif defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), F16_ROUND));
#endif
    for (; i < n; i++)
        out[i] = nn_f32_to_f16_1(in[i]);
}

void nn_f16_to_f32(float *out, const nn_f16 *in, size_t n) {
    size_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(in + i))));
#elif defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + i))));
#endif
    for (; i < n; i++)
        out[i] = nn_f16_to_f32_1(in[i]);
}

/* Round in place through a small stack block: the vector conversions above
 * do the work, so the bits are theirs. */
#define ROUND_BLOCK 512

void nn_round_bf16_to(float *out, const float *in, size_t n) {
    mtc_bf16 h[ROUND_BLOCK];
    for (size_t i = 0; i < n; i += ROUND_BLOCK) {
        size_t k = n - i < ROUND_BLOCK ? n - i : ROUND_BLOCK;
        nn_f32_to_bf16(h, in + i, k);
        nn_bf16_to_f32(out + i, h, k);
    }
}

void nn_round_f16_to(float *out, const float *in, size_t n) {
    nn_f16 h[ROUND_BLOCK];
    for (size_t i = 0; i < n; i += ROUND_BLOCK) {
        size_t k = n - i < ROUND_BLOCK ? n - i : ROUND_BLOCK;
        nn_f32_to_f16(h, in + i, k);
        nn_f16_to_f32(out + i, h, k);
    }
}

void nn_round_bf16(float *x, size_t n) { nn_round_bf16_to(x, x, n); }
void nn_round_f16(float *x, size_t n) { nn_round_f16_to(x, x, n); }
