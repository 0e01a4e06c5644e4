/* core/mem.c - huge-page blocks and the arena; see mem.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "core/mem.h"

#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

mtc_result_t mtc_mem_alloc_big(size_t bytes, int prefault, void **out) {
    *out = NULL;
    if (bytes == 0) bytes = 64;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "mmap of %zu bytes failed: %s", bytes,
                         strerror(errno));
#ifdef MADV_HUGEPAGE
    if (bytes >= (2u << 20)) madvise(p, bytes, MADV_HUGEPAGE);
#endif
    if (prefault) {
        long page = sysconf(_SC_PAGESIZE);
        for (size_t off = 0; off < bytes; off += (size_t)page)
            ((volatile char *)p)[off] = 0;
    }
    *out = p;
    return MTC_OK;
}

void mtc_mem_free_big(void *p, size_t bytes) {
    if (p) munmap(p, bytes ? bytes : 64);
}

mtc_result_t mtc_mem_alloc(size_t bytes, void **out) {
    *out = malloc(bytes ? bytes : 1);
    if (!*out) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "malloc of %zu bytes failed", bytes);
    return MTC_OK;
}

mtc_result_t mtc_mem_calloc(size_t n, size_t size, void **out) {
    *out = calloc(n ? n : 1, size ? size : 1);
    if (!*out) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "calloc of %zu x %zu bytes failed", n, size);
    return MTC_OK;
}

mtc_result_t mtc_arena_init(mtc_arena *a, size_t capacity) {
    memset(a, 0, sizeof *a);
    void *p;
    MTC_CHECK(mtc_mem_alloc_big(capacity, 0, &p));
    a->base = p;
    a->capacity = capacity;
    a->owns_base = 1;
    return MTC_OK;
}

void mtc_arena_free(mtc_arena *a) {
    if (!a) return;
    if (a->owns_base) mtc_mem_free_big(a->base, a->capacity);
    memset(a, 0, sizeof *a);
}

mtc_result_t mtc_arena_alloc(mtc_arena *a, size_t bytes, size_t align, void **out) {
    if (align == 0) align = 64;
    uintptr_t start = ((uintptr_t)a->base + a->used + align - 1) & ~(uintptr_t)(align - 1);
    size_t off = (size_t)(start - (uintptr_t)a->base);
    if (off + bytes > a->capacity) {
        *out = NULL;
        return mtc_error(MTC_ERR_OUT_OF_MEMORY,
                         "arena exhausted: %zu bytes requested, %zu of %zu in use", bytes, a->used,
                         a->capacity);
    }
    a->used = off + bytes;
    if (a->used > a->high_water) a->high_water = a->used;
    *out = a->base + off;
    return MTC_OK;
}

float *mtc_arena_floats(mtc_arena *a, size_t count) {
    void *p;
    if (mtc_arena_alloc(a, count * sizeof(float), 64, &p) != MTC_OK) return NULL;
    return p;
}

double mtc_mem_proc_status(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t n = strlen(field);
    double kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':') {
            kb = atof(line + n + 1);
            break;
        }
    if (f) fclose(f);
    return kb * 1024;
}
