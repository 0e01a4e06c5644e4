/* comm/reduce.c - element-wise reduction of two buffers for every dtype and
 * op (algo.h: comm_reduce_local, comm_finish_avg).
 *
 * bf16 is accumulated by converting both sides to f32, combining and
 * rounding back to bf16 at every step, so a chain of steps gives the same
 * bits whichever algorithm runs it in the same order. AVG reduces as SUM;
 * comm_finish_avg divides once at the end (integers: truncating division).
 * Loops are kept simple so the compiler vectorises them. comm_copy is
 * memcpy minus glibc's slow case on this CPU (algo.h). Does not choose
 * the order of reduction: algorithms do. */
#pragma GCC optimize("O3")
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "comm/algo.h"

#define REDUCE_LOOPS(T)                                                                            \
    static void reduce_##T(T *restrict a, const T *restrict b, size_t n, mtc_op_t op) {            \
        switch (op) {                                                                              \
        case MTC_OP_MAX:                                                                           \
            for (size_t i = 0; i < n; i++)                                                         \
                a[i] = b[i] > a[i] ? b[i] : a[i];                                                  \
            break;                                                                                 \
        case MTC_OP_MIN:                                                                           \
            for (size_t i = 0; i < n; i++)                                                         \
                a[i] = b[i] < a[i] ? b[i] : a[i];                                                  \
            break;                                                                                 \
        default:                                                                                   \
            for (size_t i = 0; i < n; i++)                                                         \
                a[i] += b[i];                                                                      \
            break;                                                                                 \
        }                                                                                          \
    }

REDUCE_LOOPS(float)
REDUCE_LOOPS(double)
REDUCE_LOOPS(int32_t)
REDUCE_LOOPS(int64_t)

static void reduce_bf16(mtc_bf16 *a, const mtc_bf16 *b, size_t n, mtc_op_t op) {
    for (size_t i = 0; i < n; i++) {
        float x = mtc_bf16_to_f32(a[i]), y = mtc_bf16_to_f32(b[i]);
        float r = op == MTC_OP_MAX ? (y > x ? y : x) : op == MTC_OP_MIN ? (y < x ? y : x) : x + y;
        a[i] = mtc_f32_to_bf16(r);
    }
}

void comm_reduce_local(void *inout, const void *in, size_t count, mtc_dtype_t dtype, mtc_op_t op) {
    /* Identical buffers cannot be handed to restrict-qualified loops. */
    if (inout == in && op != MTC_OP_MAX && op != MTC_OP_MIN) {
        switch (dtype) {
        case MTC_DTYPE_F32:
            for (size_t i = 0; i < count; i++)
                ((float *)inout)[i] *= 2;
            return;
        case MTC_DTYPE_F64:
            for (size_t i = 0; i < count; i++)
                ((double *)inout)[i] *= 2;
            return;
        case MTC_DTYPE_I32:
            for (size_t i = 0; i < count; i++)
                ((int32_t *)inout)[i] *= 2;
            return;
        case MTC_DTYPE_I64:
            for (size_t i = 0; i < count; i++)
                ((int64_t *)inout)[i] *= 2;
            return;
        default: break;
        }
    } else if (inout == in && dtype != MTC_DTYPE_BF16) {
        return; /* max/min of x with itself */
    }
    switch (dtype) {
    case MTC_DTYPE_F32: reduce_float(inout, in, count, op); break;
    case MTC_DTYPE_F64: reduce_double(inout, in, count, op); break;
    case MTC_DTYPE_I32: reduce_int32_t(inout, in, count, op); break;
    case MTC_DTYPE_I64: reduce_int64_t(inout, in, count, op); break;
    case MTC_DTYPE_BF16: reduce_bf16(inout, in, count, op); break;
    default: break;
    }
}

void comm_copy(void *dst, const void *src, size_t bytes) {
    size_t delta = ((uintptr_t)dst - (uintptr_t)src) & 4095;
    if (bytes < 2048 || delta == 0 || delta >= 64) {
        memcpy(dst, src, bytes);
        return;
    }
    char *d = dst;
    const char *s = src;
    size_t i = 0;
#if defined(__x86_64__)
    /* explicit vector moves (a plain loop may be turned back into memcpy) */
    for (; i + 64 <= bytes; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
        _mm_storeu_si128((__m128i *)(d + i), a);
        _mm_storeu_si128((__m128i *)(d + i + 16), b);
        _mm_storeu_si128((__m128i *)(d + i + 32), c);
        _mm_storeu_si128((__m128i *)(d + i + 48), e);
    }
#endif
    memcpy(d + i, s + i, bytes - i);
}

void comm_finish_avg(void *buf, size_t count, mtc_dtype_t dtype, mtc_op_t op, int size) {
    if (op != MTC_OP_AVG || size <= 1) return;
    switch (dtype) {
    case MTC_DTYPE_F32: {
        float *a = buf, d = (float)size;
        for (size_t i = 0; i < count; i++)
            a[i] /= d;
        break;
    }
    case MTC_DTYPE_F64: {
        double *a = buf, d = (double)size;
        for (size_t i = 0; i < count; i++)
            a[i] /= d;
        break;
    }
    case MTC_DTYPE_BF16: {
        mtc_bf16 *a = buf;
        for (size_t i = 0; i < count; i++)
            a[i] = mtc_f32_to_bf16(mtc_bf16_to_f32(a[i]) / (float)size);
        break;
    }
    case MTC_DTYPE_I32: {
        int32_t *a = buf;
        for (size_t i = 0; i < count; i++)
            a[i] /= size;
        break;
    }
    case MTC_DTYPE_I64: {
        int64_t *a = buf;
        for (size_t i = 0; i < count; i++)
            a[i] /= size;
        break;
    }
    default: break;
    }
}
