/* core/mem.h - large allocations and the arena.
 *
 * Fresh pages cost 11-22 us per 4 KiB on the machines we measure on, so big
 * buffers come from mtc_mem_alloc_big (mmap + MADV_HUGEPAGE, pre-faulted when
 * asked) and are allocated once at start. The arena hands out aligned slices
 * of one such block; it never frees individual slices, only resets to a mark,
 * and remembers its high-water mark so the start-up banner can report it. */
#ifndef MTC_CORE_MEM_H
#define MTC_CORE_MEM_H

#include <stddef.h>

#include "core/result.h"

/* Huge-page-backed, zero-filled, 64-byte aligned block. prefault touches
 * every page now so the first use in a hot loop does not page-fault. */
mtc_result_t mtc_mem_alloc_big(size_t bytes, int prefault, void **out);
void mtc_mem_free_big(void *p, size_t bytes);

/* Checked malloc/calloc for small things (setup only). */
mtc_result_t mtc_mem_alloc(size_t bytes, void **out);
/* A memory line of /proc/self/status in bytes ("VmRSS": resident now,
 * "VmHWM": the peak); 0 where there is no /proc or no such line. */
double mtc_mem_proc_status(const char *field);
mtc_result_t mtc_mem_calloc(size_t n, size_t size, void **out);

typedef struct {
    char *base;
    size_t capacity;
    size_t used;
    size_t high_water;
    int owns_base;
} mtc_arena;

/* Arena over a new huge-page block of `capacity` bytes. */
mtc_result_t mtc_arena_init(mtc_arena *a, size_t capacity);
void mtc_arena_free(mtc_arena *a);
/* A slice of `bytes` aligned to `align` (a power of two, 0 = 64). Fails with
 * MTC_ERR_OUT_OF_MEMORY naming the sizes when the arena is exhausted. */
mtc_result_t mtc_arena_alloc(mtc_arena *a, size_t bytes, size_t align, void **out);
/* Typed convenience: count floats, 64-byte aligned; NULL when exhausted. */
float *mtc_arena_floats(mtc_arena *a, size_t count);
static inline size_t mtc_arena_mark(const mtc_arena *a) { return a->used; }
static inline void mtc_arena_reset(mtc_arena *a, size_t mark) { a->used = mark; }

#endif
