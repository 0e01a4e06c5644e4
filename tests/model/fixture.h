/* tests/model/fixture.h - reader of the binary fixtures written by
 * tests/reference/gpt2_reference.py (format in that script). */
#ifndef MTC_TESTS_MODEL_FIXTURE_H
#define MTC_TESTS_MODEL_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char name[96];
    int ndim, dims[4];
    size_t n;
    float *data;
} fixture_tensor;

typedef struct {
    fixture_tensor *t;
    int count;
} fixture;

static int fixture_load(fixture *fx, const char *path) {
    memset(fx, 0, sizeof *fx);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char magic[8];
    int32_t count;
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "MTCFIX1\n", 8) || fread(&count, 4, 1, f) != 1)
        goto bad;
    fx->t = calloc((size_t)count, sizeof *fx->t);
    for (int i = 0; i < count; i++) {
        fixture_tensor *t = &fx->t[i];
        int32_t len, nd, d;
        if (fread(&len, 4, 1, f) != 1 || len <= 0 || len >= (int)sizeof t->name) goto bad;
        if (fread(t->name, 1, (size_t)len, f) != (size_t)len) goto bad;
        if (fread(&nd, 4, 1, f) != 1 || nd < 0 || nd > 4) goto bad;
        t->ndim = nd;
        t->n = 1;
        for (int k = 0; k < nd; k++) {
            if (fread(&d, 4, 1, f) != 1) goto bad;
            t->dims[k] = d;
            t->n *= (size_t)d;
        }
        t->data = malloc(t->n * sizeof(float) + 1);
        if (fread(t->data, sizeof(float), t->n, f) != t->n) goto bad;
        fx->count++;
    }
    fclose(f);
    return 0;
bad:
    fclose(f);
    return -1;
}

static const fixture_tensor *fixture_get(const fixture *fx, const char *name) {
    for (int i = 0; i < fx->count; i++)
        if (!strcmp(fx->t[i].name, name)) return &fx->t[i];
    return NULL;
}

static void fixture_free(fixture *fx) {
    for (int i = 0; i < fx->count; i++)
        free(fx->t[i].data);
    free(fx->t);
    memset(fx, 0, sizeof *fx);
}

#endif
