/* tests/fuzz/fuzz_jsonl.c - one JSON line as preprocess and tokenize
 * --json-lines read it (data/jsonl.c): the strict check, then a walk of
 * every value the check accepted (members, elements, string decoding) with
 * the invariants the walkers promise: spans stay inside the line, a
 * decoded string is never longer than its quoted form, and a line the
 * check accepts is refused once a second value follows it. Input = the
 * line (no newline). */
#include <stdlib.h>
#include <string.h>

#include "data/jsonl.h"
#include "fuzz.h"

static void walk(const char *line, size_t n, data_jspan v, int depth) {
    if (v.p < line || v.p + v.n > line + n || depth > 600) abort();
    char k = data_jsonl_kind(v);
    data_jspan e;
    if (k == 'a' || k == 'o') {
        size_t pos = 0, count = 0;
        while (data_jsonl_next(v, &pos, &e) && count++ < 100000)
            if (k == 'a') walk(line, n, e, depth + 1);
        if (k == 'o' && data_jsonl_member(v, "text", &e)) walk(line, n, e, depth + 1);
    } else if (k == 's') {
        char *s = NULL;
        size_t len = 0;
        if (data_jsonl_string(v, &s, &len) != MTC_OK) return;
        if (len + 2 > v.n) abort();
        free(s);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *line = (const char *)data;
    if (data_jsonl_check(line, size) != MTC_OK) return 0;
    walk(line, size, data_jsonl_value(line, size), 0);
    char *two = malloc(2 * size + 1);
    memcpy(two, data, size), two[size] = ' ', memcpy(two + size + 1, data, size);
    if (data_jsonl_check(two, 2 * size + 1) == MTC_OK) abort(); /* two values on one line */
    free(two);
    return 0;
}
