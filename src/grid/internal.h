/* grid/internal.h - helpers shared by the files of grid/ (not public API). */
#ifndef MTC_GRID_INTERNAL_H
#define MTC_GRID_INTERNAL_H

#include <stddef.h>

#include "grid/grid.h"

extern const char *const grid_dim_names[MTC_DIM_COUNT]; /* "tp" "pp" "dp" "ep" "cp" */

/* Megatron's RankGenerator.__init__ on sizes indexed by mtc_grid_dim_t:
 * lower-case the order, append missing size-1 tokens in dict order, refuse a
 * missing token of size > 1 (RuntimeError), an unknown token (KeyError) and a
 * repeated one (Megatron builds corrupt groups). `what` names the generator
 * in messages ("dense", "expert"). order_full receives the resolved order. */
mtc_result_t grid_gen_init(mtc_grid_gen *g, const int size[MTC_DIM_COUNT], const char *order,
                           char *order_full, size_t order_full_len, const char *what);

/* Digit of `rank` along dimension d of generator g. */
static inline int grid_gen_digit(const mtc_grid_gen *g, int rank, int d) {
    int p = g->pos[d];
    return (rank / g->stride[p]) % g->size[p];
}

/* "1 2 4 8": the divisors of n, at most `max` of them closest to `near`,
 * ascending. Returns the number written. */
int grid_divisors_near(char *buf, size_t len, int n, int near, int max);

#endif
