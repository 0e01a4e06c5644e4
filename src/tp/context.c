/* tp/context.c - the TP layers' context of a rank, derived from its grid:
 * TENSOR_MODEL_PARALLEL_GROUP (NULL at tp 1), the kernel pool, and
 * sequence parallelism (off at tp 1, as Megatron ignores it there).
 * Relies on grid/; does not communicate. */
#include "tp/layers.h"

tp_ctx tp_ctx_from_grid(mtc_grid_t grid, nn_pool *pool, int sequence_parallel) {
    mtc_comm_t c = grid ? mtc_grid_comm_nontrivial(grid, MTC_GROUP_TP, 0) : NULL;
    return (tp_ctx){.comm = c, .pool = pool, .sequence_parallel = c ? sequence_parallel : 0};
}
