/* core/dtype.h - element types carried by the communication library, and
 * bf16 conversion (round to nearest even, NaN kept quiet). */
#ifndef MTC_CORE_DTYPE_H
#define MTC_CORE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum {
    MTC_DTYPE_F32 = 0,
    MTC_DTYPE_F64,
    MTC_DTYPE_BF16,
    MTC_DTYPE_I32,
    MTC_DTYPE_I64,
    MTC_DTYPE_COUNT
} mtc_dtype_t;

size_t mtc_dtype_size(mtc_dtype_t dt);
const char *mtc_dtype_name(mtc_dtype_t dt); /* "f32", "bf16", ... */
/* Parse a dtype name; returns -1 when unknown. */
int mtc_dtype_parse(const char *s);
/* Element i of a buffer of dt, as a double (load) or set from one (store,
 * rounded as a cast would, bf16 to nearest even); for filling and checking
 * buffers of any dtype with values computed in closed form. */
double mtc_dtype_load(const void *buf, mtc_dtype_t dt, size_t i);
void mtc_dtype_store(void *buf, mtc_dtype_t dt, size_t i, double v);
static inline int mtc_dtype_is_float(mtc_dtype_t dt) {
    return dt == MTC_DTYPE_F32 || dt == MTC_DTYPE_F64 || dt == MTC_DTYPE_BF16;
}

typedef uint16_t mtc_bf16;

static inline float mtc_bf16_to_f32(mtc_bf16 h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline mtc_bf16 mtc_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (mtc_bf16)((u >> 16) | 0x40); /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (mtc_bf16)(u >> 16);
}

#endif
