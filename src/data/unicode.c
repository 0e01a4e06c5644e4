/* data/unicode.c - UTF-8 decoding/encoding and code point classes (see
 * unicode.h). The class table is generated (tools/gen_unicode_table.py). */
#include "data/unicode.h"

data_unicode_class data_unicode_class_of(uint32_t cp) {
    if (cp < 0x80) {
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return DATA_UNICODE_LETTER;
        if (cp >= '0' && cp <= '9') return DATA_UNICODE_NUMBER;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0d)) return DATA_UNICODE_SPACE;
        return DATA_UNICODE_OTHER;
    }
    int lo = 0, hi = data_unicode_nranges - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < data_unicode_ranges[mid].lo)
            hi = mid - 1;
        else if (cp > data_unicode_ranges[mid].hi)
            lo = mid + 1;
        else
            return (data_unicode_class)data_unicode_ranges[mid].cls;
    }
    return DATA_UNICODE_OTHER;
}

size_t data_unicode_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned b = s[0];
    size_t len;
    uint32_t v, min;
    if (b < 0x80) {
        *cp = b;
        return 1;
    } else if (b >= 0xc2 && b <= 0xdf) {
        len = 2, v = b & 0x1f, min = 0x80;
    } else if (b >= 0xe0 && b <= 0xef) {
        len = 3, v = b & 0x0f, min = 0x800;
    } else if (b >= 0xf0 && b <= 0xf4) {
        len = 4, v = b & 0x07, min = 0x10000;
    } else {
        *cp = DATA_UNICODE_RAW(b);
        return 1;
    }
    if (n < len) {
        *cp = DATA_UNICODE_RAW(b);
        return 1;
    }
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            *cp = DATA_UNICODE_RAW(b);
            return 1;
        }
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) {
        *cp = DATA_UNICODE_RAW(b);
        return 1;
    }
    *cp = v;
    return len;
}

size_t data_unicode_encode(uint32_t cp, unsigned char out[4]) {
    if (cp >= DATA_UNICODE_RAW_BASE) {
        out[0] = (unsigned char)(cp - DATA_UNICODE_RAW_BASE);
        return 1;
    }
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xc0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xe0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (unsigned char)(0xf0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}
