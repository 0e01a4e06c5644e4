/* data/tok_ucat.h - general categories of code points for the tiktoken
 * split patterns (tok_tiktoken.c), from the generated tok_ucat_table.c.
 * unicode.h's classes (letter / number / space) are too coarse for the v2
 * pattern, which tells upper from lower case letters and marks apart. */
#ifndef MTC_DATA_TOK_UCAT_H
#define MTC_DATA_TOK_UCAT_H

#include <stdint.h>

typedef enum {
    TOK_UCAT_OTHER = 0,
    TOK_UCAT_LU,
    TOK_UCAT_LL,
    TOK_UCAT_LT,
    TOK_UCAT_LM,
    TOK_UCAT_LO,
    TOK_UCAT_M,     /* Mn Mc Me */
    TOK_UCAT_N,     /* Nd Nl No */
    TOK_UCAT_SPACE, /* White_Space */
} tok_ucat;

typedef struct {
    uint32_t lo, hi; /* inclusive */
    uint8_t cat;     /* tok_ucat */
} tok_ucat_range;

extern const tok_ucat_range tok_ucat_ranges[];
extern const int tok_ucat_nranges;

/* Category of cp (binary search); raw bytes (>= 0x110000) are OTHER. */
static inline tok_ucat tok_ucat_of(uint32_t cp) {
    int lo = 0, hi = tok_ucat_nranges - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < tok_ucat_ranges[mid].lo)
            hi = mid - 1;
        else if (cp > tok_ucat_ranges[mid].hi)
            lo = mid + 1;
        else
            return (tok_ucat)tok_ucat_ranges[mid].cat;
    }
    return TOK_UCAT_OTHER;
}

#endif
