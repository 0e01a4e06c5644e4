/* nn/fp8.h - the two 8-bit floating-point formats of the OCP specification
 * (E4M3: bias 7, max 448, no infinities; E5M2: bias 15, max 57344) and the
 * quantizers of Transformer Engine's fp8 recipes, as quantize-dequantize
 * passes on fp32 buffers: every output value is exactly code * scale_inv,
 * the number a GPU's fp8 GEMM multiplies.
 *
 *   per tensor:  out = fp8(x * scale) * scale_inv      (delayed, tensorwise)
 *   per block:   each br x bc block of a row-major (R, Cc) matrix gets its own
 *                scale from its amax:
 *                  mxfp8      E8M0 power of two, TE's float_to_e8m0(amax / max)
 *                             rounded up (so nothing saturates), 1x32 / 32x1;
 *                  blockwise  compute_scale_from_amax(amax, max) with the
 *                             power-of-two rounding Float8BlockScaling uses by
 *                             default (1x128, 128x1, 128x128).
 * Rounding is to nearest even; values beyond the format's maximum saturate to
 * it (TE's satfinite casts), infinities too; NaN stays NaN.
 *
 * Relies on libm; AVX-512F intrinsics when the compiler targets them
 * (-march=native on a CPU that has them), else the scalar loop: both do the
 * same fp32 operations per value (a branchless magic-number rounding), so
 * they give the same bits (nn_fp8_qdq_scalar is the reference).
 * Does not: choose scales across steps (tp/fp8_linear.c keeps that state),
 * reduce amaxes across ranks, or store fp8 codes (only the conversion
 * functions below make codes, for tests and formats). */
#ifndef MTC_NN_FP8_H
#define MTC_NN_FP8_H

#include <stddef.h>
#include <stdint.h>

typedef enum { NN_FP8_E4M3 = 0, NN_FP8_E5M2 } nn_fp8_format;

/* 448 or 57344. */
float nn_fp8_max(nn_fp8_format f);
/* The code of x (round to nearest even, saturating; NaN -> 0x7f / 0x7f|0x80
 * for E4M3, 0x7e for E5M2). */
uint8_t nn_fp8_encode(nn_fp8_format f, float x);
/* The value of a code (E4M3 0x7f/0xff NaN; E5M2 0x7c inf, 0x7d..0x7f NaN). */
float nn_fp8_decode(nn_fp8_format f, uint8_t code);
/* The value nn_fp8_encode would give, without the code. */
float nn_fp8_round1(nn_fp8_format f, float x);

/* max |x| over n values (0 for n = 0; NaN ignored). */
float nn_fp8_amax(const float *x, size_t n);
/* TE's compute_scale_from_amax: fmax / amax, 1 when amax is 0, inf or NaN,
 * value_for_inf when the quotient overflows, the mantissa cleared with pow2. */
float nn_fp8_scale_from_amax(float amax, float fmax, int pow2, float value_for_inf);
/* TE's float_to_e8m0 (rounds up, saturating): the biased exponent. */
uint8_t nn_fp8_e8m0(float v);

/* out[i] = round(x[i] * scale) * scale_inv, i < n (out == x allowed).
 * Returns how many |x[i] * scale| exceeded the format's maximum (clipped). */
size_t nn_fp8_qdq(nn_fp8_format f, float *out, const float *x, size_t n, float scale,
                  float scale_inv);

/* The same one value at a time: the reference the AVX-512 path must match
 * bit for bit (tests). */
size_t nn_fp8_qdq_scalar(nn_fp8_format f, float *out, const float *x, size_t n, float scale,
                         float scale_inv);
/* "avx512f" or "scalar": which code nn_fp8_qdq and the block passes use. */
const char *nn_fp8_isa(void);

typedef enum { NN_FP8_BLOCK_MX = 0, NN_FP8_BLOCK_POW2 } nn_fp8_block_kind;
/* The scale and dequantization scale nn_fp8_qdq_blocks gives a block of
 * amax (dp/distopt_fp8.c casts weight blocks with it). */
void nn_fp8_block_scale(nn_fp8_format f, nn_fp8_block_kind kind, float amax, float *scale,
                        float *inv);
/* Block quantize-dequantize of x (R, Cc) row-major (leading dimension Cc)
 * into out (same shape; out == x allowed) with blocks of br rows x bc
 * columns (edge blocks smaller), rows [r0, r1) only (r0 a multiple of br:
 * threads split the rows). Each block's dequantization scale (scale_inv)
 * is folded into *smin / *smax (min / max seen; all-zero blocks skipped). Returns the clipped
 * count. */
size_t nn_fp8_qdq_blocks(nn_fp8_format f, nn_fp8_block_kind kind, float *out, const float *x, int R,
                         int Cc, int br, int bc, int r0, int r1, float *smin, float *smax);

#endif
