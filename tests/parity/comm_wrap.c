/* tests/parity/comm_wrap.c - per-rank communication timer for
 * bench/scaling.sh: linked into `mtc_commtimed` (the mtc command built with
 * -Wl,--wrap=<each collective>), every blocking collective, p2p call and
 * request wait made by the library (TP layers, DDP, the train loop) is
 * timed on the calling rank-thread with core/timer.h. The train loop picks
 * the total up through the weak symbol mtc_train_comm_wait_ns and writes it
 * to --metrics as comm_ms. Nested calls count once. Not part of mtc_lib. */
#include <stdint.h>

#include "comm/comm.h"
#include "core/timer.h"

static __thread uint64_t wrap_ns;
static __thread int wrap_depth;

uint64_t mtc_train_comm_wait_ns(void);
uint64_t mtc_train_comm_wait_ns(void) { return wrap_ns; }

#define WRAP(name, params, args)                                                                   \
    mtc_result_t __real_##name params;                                                             \
    mtc_result_t __wrap_##name params;                                                             \
    mtc_result_t __wrap_##name params {                                                            \
        uint64_t t0 = wrap_depth++ ? 0 : mtc_time_ns();                                            \
        mtc_result_t rc = __real_##name args;                                                      \
        if (!--wrap_depth) wrap_ns += mtc_time_ns() - t0;                                          \
        return rc;                                                                                 \
    }

WRAP(mtc_all_reduce, (const void *s, void *r, size_t n, mtc_dtype_t t, mtc_op_t o, mtc_comm_t c),
     (s, r, n, t, o, c))
WRAP(mtc_reduce_scatter,
     (const void *s, void *r, size_t n, mtc_dtype_t t, mtc_op_t o, mtc_comm_t c),
     (s, r, n, t, o, c))
WRAP(mtc_all_gather, (const void *s, void *r, size_t n, mtc_dtype_t t, mtc_comm_t c),
     (s, r, n, t, c))
WRAP(mtc_broadcast, (void *b, size_t n, mtc_dtype_t t, int root, mtc_comm_t c), (b, n, t, root, c))
WRAP(mtc_barrier, (mtc_comm_t c), (c))
WRAP(mtc_sendrecv,
     (const void *s, size_t sn, int dst, void *r, size_t rn, int src, mtc_dtype_t t, mtc_comm_t c),
     (s, sn, dst, r, rn, src, t, c))
WRAP(mtc_send, (const void *b, size_t n, mtc_dtype_t t, int p, mtc_comm_t c), (b, n, t, p, c))
WRAP(mtc_recv, (void *b, size_t n, mtc_dtype_t t, int p, mtc_comm_t c), (b, n, t, p, c))
WRAP(mtc_all_reduce_start,
     (const void *s, void *r, size_t n, mtc_dtype_t t, mtc_op_t o, mtc_comm_t c, mtc_request_t *q),
     (s, r, n, t, o, c, q))
WRAP(mtc_reduce_scatter_start,
     (const void *s, void *r, size_t n, mtc_dtype_t t, mtc_op_t o, mtc_comm_t c, mtc_request_t *q),
     (s, r, n, t, o, c, q))
WRAP(mtc_all_gather_start,
     (const void *s, void *r, size_t n, mtc_dtype_t t, mtc_comm_t c, mtc_request_t *q),
     (s, r, n, t, c, q))
WRAP(mtc_request_wait, (mtc_request_t * q), (q))
