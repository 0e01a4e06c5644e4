/* data/unicode.h - the little Unicode the tokenizers need: UTF-8 decoding
 * and encoding, and the class of a code point (letter, number, white space
 * or other) from the generated table in unicode_table.c.
 *
 * Decoding never fails: a byte that does not start a well-formed UTF-8
 * sequence (stray continuation, overlong form, surrogate, > U+10FFFF,
 * truncated) decodes as one "raw byte" of length 1, which callers treat as
 * a character of class OTHER. */
#ifndef MTC_DATA_UNICODE_H
#define MTC_DATA_UNICODE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    DATA_UNICODE_OTHER = 0,
    DATA_UNICODE_LETTER = 1, /* \p{L}: Lu Ll Lt Lm Lo */
    DATA_UNICODE_NUMBER = 2, /* \p{N}: Nd Nl No */
    DATA_UNICODE_SPACE = 3,  /* \s: the White_Space property */
} data_unicode_class;

typedef struct {
    uint32_t lo, hi; /* inclusive */
    uint8_t cls;     /* data_unicode_class */
} data_unicode_range;

extern const data_unicode_range data_unicode_ranges[];
extern const int data_unicode_nranges;

/* Class of code point cp (binary search; ASCII is answered directly). */
data_unicode_class data_unicode_class_of(uint32_t cp);

/* Decodes one character at s[0..n) (n >= 1): returns its length in bytes
 * and sets *cp; *cp = DATA_UNICODE_RAW(byte) for a byte that is not valid
 * UTF-8 (length 1). */
#define DATA_UNICODE_RAW_BASE 0x110000u
#define DATA_UNICODE_RAW(b) (DATA_UNICODE_RAW_BASE + (uint32_t)(b))
size_t data_unicode_decode(const unsigned char *s, size_t n, uint32_t *cp);

/* Writes the UTF-8 form of cp (or the raw byte of DATA_UNICODE_RAW(b)) to
 * out (room for 4); returns its length. */
size_t data_unicode_encode(uint32_t cp, unsigned char out[4]);

#endif
