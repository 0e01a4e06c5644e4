/* tests/example_json.h - load one of Megatron's example files from
 * tests/data/megatron/ (tests run from the repository root; see the
 * README there for how Megatron produced them). */
#ifndef MTC_TESTS_EXAMPLE_JSON_H
#define MTC_TESTS_EXAMPLE_JSON_H

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

static inline char *example_read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) free(s), s = NULL;
    if (s) s[n] = '\0';
    fclose(f);
    return s;
}

/* Parsed example `name` (e.g. "schedules.json"), NULL with a message when missing. */
static inline cJSON *load_example(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "tests/data/megatron/%s", name);
    char *text = example_read_file(path);
    if (!text) {
        fprintf(stderr, "cannot read %s (tests run from the repository root)\n", path);
        return NULL;
    }
    cJSON *j = cJSON_Parse(text);
    free(text);
    return j;
}

#endif
