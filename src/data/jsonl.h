/* data/jsonl.h - one line of a JSON-lines file read exactly as Python's
 * json.loads reads it (Megatron's preprocess_data.py does), for preprocess
 * and tokenize --json-lines.
 *
 * data_jsonl_check accepts exactly one JSON value surrounded by optional
 * whitespace (space, tab, CR, LF): nothing after it (a second object,
 * trailing garbage are refused), strings without raw control characters,
 * escapes of json.loads (\" \\ \/ \b \f \n \r \t \uXXXX), NaN / Infinity /
 * -Infinity as json.loads takes them, and valid UTF-8 throughout. Two things
 * json.loads would let through but that cannot be stored as UTF-8 are
 * refused too: a lone surrogate escape (\ud800 without its pair; encoding it
 * fails in Python as well) and invalid UTF-8 bytes (Python's utf-8 decoding
 * of the file fails). A refusal is MTC_ERR_INVALID_ARGUMENT with a detail
 * "column C: what" (the caller adds the line number).
 *
 * After a successful check, the other functions walk the line without
 * re-validating: values are spans of the line's text. Strings decode to
 * bytes with every escape kept, \u0000 included (an embedded NUL is part of
 * the string, never its end). A key given twice takes its last value, as
 * Python's dict does. */
#ifndef MTC_DATA_JSONL_H
#define MTC_DATA_JSONL_H

#include <stddef.h>
#include <stdio.h>

#include "core/result.h"

typedef struct {
    const char *p; /* the value's first character in the line */
    size_t n;      /* its length */
} data_jspan;

mtc_result_t data_jsonl_check(const char *s, size_t n);
/* The top-level value of a checked line. */
data_jspan data_jsonl_value(const char *s, size_t n);
/* 'o' object, 'a' array, 's' string, 'n' number, 't' true, 'f' false, 'z' null */
char data_jsonl_kind(data_jspan v);
/* The last member `key` of object v: 1 found (*out), 0 none. */
int data_jsonl_member(data_jspan v, const char *key, data_jspan *out);
/* Elements of array v: *pos starts at 0; 1 while *out is the next one. */
int data_jsonl_next(data_jspan v, size_t *pos, data_jspan *out);
/* The bytes of string v (malloc'd, NUL-terminated after *len bytes, which
 * may hold NULs). MTC_ERR_OUT_OF_MEMORY only. */
mtc_result_t data_jsonl_string(data_jspan v, char **out, size_t *len);
/* Writes s[0..n) as one JSON string: quotes, \" \\ \n \r \t \b \f, other
 * control bytes and NUL as \u00XX, everything else as is (UTF-8 passes). */
void data_jsonl_print(FILE *f, const char *s, size_t n);

#endif
