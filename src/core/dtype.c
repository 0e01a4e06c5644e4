/* core/dtype.c - dtype sizes and names. */
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
