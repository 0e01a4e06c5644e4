/* core/dtype.c - dtype sizes, names, and element access by dtype. */
#include "core/dtype.h"

#include <strings.h>

static const char *const dtype_names[MTC_DTYPE_COUNT] = {"f32", "f64", "bf16", "i32", "i64"};

size_t mtc_dtype_size(mtc_dtype_t dt) {
    switch (dt) {
    case MTC_DTYPE_F32: return 4;
    case MTC_DTYPE_F64: return 8;
    case MTC_DTYPE_BF16: return 2;
    case MTC_DTYPE_I32: return 4;
    case MTC_DTYPE_I64: return 8;
    default: return 0;
    }
}

const char *mtc_dtype_name(mtc_dtype_t dt) {
    return (dt >= 0 && dt < MTC_DTYPE_COUNT) ? dtype_names[dt] : "?";
}

int mtc_dtype_parse(const char *s) {
    for (int i = 0; i < MTC_DTYPE_COUNT; i++)
        if (strcasecmp(s, dtype_names[i]) == 0) return i;
    if (strcasecmp(s, "float") == 0 || strcasecmp(s, "float32") == 0) return MTC_DTYPE_F32;
    if (strcasecmp(s, "double") == 0 || strcasecmp(s, "float64") == 0) return MTC_DTYPE_F64;
    if (strcasecmp(s, "bfloat16") == 0) return MTC_DTYPE_BF16;
    if (strcasecmp(s, "int32") == 0) return MTC_DTYPE_I32;
    if (strcasecmp(s, "int64") == 0) return MTC_DTYPE_I64;
    return -1;
}

double mtc_dtype_load(const void *buf, mtc_dtype_t dt, size_t i) {
    switch (dt) {
    case MTC_DTYPE_F32: return ((const float *)buf)[i];
    case MTC_DTYPE_F64: return ((const double *)buf)[i];
    case MTC_DTYPE_BF16: return mtc_bf16_to_f32(((const mtc_bf16 *)buf)[i]);
    case MTC_DTYPE_I32: return ((const int32_t *)buf)[i];
    case MTC_DTYPE_I64: return (double)((const int64_t *)buf)[i];
    default: return 0;
    }
}

void mtc_dtype_store(void *buf, mtc_dtype_t dt, size_t i, double v) {
    switch (dt) {
    case MTC_DTYPE_F32: ((float *)buf)[i] = (float)v; break;
    case MTC_DTYPE_F64: ((double *)buf)[i] = v; break;
    case MTC_DTYPE_BF16: ((mtc_bf16 *)buf)[i] = mtc_f32_to_bf16((float)v); break;
    case MTC_DTYPE_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case MTC_DTYPE_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    default: break;
    }
}
