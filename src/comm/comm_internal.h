/* comm/comm_internal.h - the communicator object and the plumbing shared by
 * comm.c (objects, split/create, algorithm services), coll.c (collective
 * entry points), request.c (non-blocking), select.c (choice and dispatch),
 * launch.c and algo_direct.c. Not a public header. */
#ifndef MTC_COMM_COMM_INTERNAL_H
#define MTC_COMM_COMM_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "comm/algo.h"
#include "comm/backend.h"

#define COMM_DEFAULT_TIMEOUT_S 300.0

typedef struct comm_queue comm_queue; /* request.c: the progress thread */

struct mtc_comm {
    comm_backend *be;
    comm_group *group;
    int rank, size;
    const int *members; /* world rank of each member (the group's own list or a copy) */
    int *members_copy;  /* the copy, when the backend does not share its list */
    char name[64];
    uint64_t seq; /* number of the last collective started */
    double timeout_s;
    mtc_algo_t algo[MTC_COLL_COUNT];      /* forced algorithm per operation (AUTO = selector) */
    unsigned char strict[MTC_COLL_COUNT]; /* 1: error when unusable; 0: fall back to AUTO */
    void *scratch;
    size_t scratch_bytes;
    int local_size, node_count;
    int node_split_done;
    mtc_comm_t intra, inter; /* cached node sub-communicators */
    const comm_call *cur;    /* collective being executed (for the p2p services) */
    uint32_t cur_tag;
    comm_queue *queue;
    int owns_group; /* 0 for the world communicator (the backend owns its group) */
    struct {
        size_t count;
        int dtype;
        mtc_algo_t algo;
    } last_choice[MTC_COLL_COUNT]; /* select.c */
    /* live communicators of this rank: the world (root == NULL) heads a list
     * of the ones split from it and not yet freed, freed with the world
     * (cached intra/inter are not listed: their parent frees them) */
    mtc_comm_t root, live_prev, live_next, live;
    /* set on the world only: every communicator of the rank uses it (the progress threads
     * read it, hence atomic; acquire/release are plain moves on x86) */
    struct mtc_trace *_Atomic trace;
    uint64_t *p2p_n; /* (2*size) sends / receives per peer, counted while traced */
    int trace_track; /* the trace track of its non-blocking calls (0: none yet) */
};

/* The rank's recorder (NULL when off: the one test a call pays). */
static inline struct mtc_trace *comm_trace_of(const struct mtc_comm *c) {
    return atomic_load_explicit(c->root ? &c->root->trace : &c->trace, memory_order_acquire);
}

/* One operation as issued by the user (blocking or queued). */
typedef struct {
    int kind; /* mtc_coll_t or COMM_CALL_* */
    const void *sendbuf;
    void *recvbuf;
    size_t count; /* elements: all_reduce count, reduce_scatter recvcount, all_gather sendcount */
    mtc_dtype_t dtype;
    mtc_op_t op;
    int root;
    size_t sendcount; /* all_gather_v: this rank's block */
    const size_t *sendcounts, *sdispls, *recvcounts, *rdispls;
    int queued; /* 1: issued non-blocking (runs on the progress thread) */
} comm_op;

/* comm.c */
mtc_result_t comm_new(comm_backend *be, comm_group *group, const int *members, int n, int rank,
                      const char *name, const mtc_comm_t settings_from, mtc_comm_t *out);
/* Fill the call of the next collective (seq++, deadline) and announce it. */
mtc_result_t comm_call_begin(mtc_comm_t comm, const comm_op *op, comm_call *call);
void comm_call_end(mtc_comm_t comm, comm_call *call);

/* coll.c: run one operation now on the calling thread (seq, checks, dispatch). */
mtc_result_t comm_op_run(mtc_comm_t comm, const comm_op *op);
/* Wait for queued operations, then run. */
mtc_result_t comm_op_blocking(mtc_comm_t comm, const comm_op *op);

/* comm_trace.c: record a finished call in the rank's recorder (tr != NULL). */
void comm_trace_coll(mtc_comm_t comm, struct mtc_trace *tr, const comm_op *op, mtc_algo_t algo,
                     uint64_t t0_ns);
/* kind: MTC_COLL_SEND / RECV / SENDRECV; dst/src: peers (-1 when absent). */
void comm_trace_p2p(mtc_comm_t comm, struct mtc_trace *tr, int kind, size_t bytes, int dst, int src,
                    uint64_t t0_ns);

/* request.c */
mtc_result_t comm_queue_push(mtc_comm_t comm, const comm_op *op, mtc_request_t *req);
void comm_queue_drain(mtc_comm_t comm);
void comm_queue_free(mtc_comm_t comm);

/* select.c */
/* Parse "ring" (every operation that has a ring; a preference, falling back
 * to the selector where it cannot run) or "all_reduce=ring,..." (strict). */
mtc_result_t comm_algo_spec_parse(const char *spec, mtc_algo_t out[MTC_COLL_COUNT],
                                  unsigned char strict[MTC_COLL_COUNT]);
/* The algorithm to run for op (forced or chosen); INVALID_ARGUMENT when the
 * forced one cannot run on this communicator (names the valid ones). */
mtc_result_t comm_algo_resolve(mtc_comm_t comm, const comm_op *op, mtc_algo_t *out);
/* Run op with algorithm algo (op->op is never AVG here). */
mtc_result_t comm_algo_run(mtc_comm_t comm, mtc_algo_t algo, const comm_op *op);
/* 1 when algo implements coll at all (any backend). */
int comm_algo_exists(mtc_coll_t coll, mtc_algo_t algo);
/* 1 when algo can run coll on this communicator now. */
int comm_algo_usable(mtc_comm_t comm, mtc_coll_t coll, mtc_algo_t algo);

/* algo_direct.c (shm only): ranks read each other's buffers. */
mtc_result_t algo_direct_barrier(mtc_comm_t comm);
mtc_result_t algo_direct_broadcast(void *buf, size_t count, mtc_dtype_t dtype, int root,
                                   mtc_comm_t comm);
mtc_result_t algo_direct_reduce(const void *sendbuf, void *recvbuf, size_t count, mtc_dtype_t dtype,
                                mtc_op_t op, int root, mtc_comm_t comm);
mtc_result_t algo_direct_all_reduce(ALGO_ALL_REDUCE_ARGS);
mtc_result_t algo_direct_reduce_scatter_v(const void *sendbuf, void *recvbuf,
                                          const size_t *recvcounts, mtc_dtype_t dtype, mtc_op_t op,
                                          mtc_comm_t comm);
mtc_result_t algo_direct_all_gather_v(const void *sendbuf, size_t sendcount, void *recvbuf,
                                      const size_t *recvcounts, const size_t *displs,
                                      mtc_dtype_t dtype, mtc_comm_t comm);
mtc_result_t algo_direct_all_to_all_v(const void *sendbuf, const size_t *sendcounts,
                                      const size_t *sdispls, void *recvbuf,
                                      const size_t *recvcounts, const size_t *rdispls,
                                      mtc_dtype_t dtype, mtc_comm_t comm);
mtc_result_t algo_direct_reduce_scatter(ALGO_REDUCE_SCATTER_ARGS);
mtc_result_t algo_direct_all_gather(ALGO_ALL_GATHER_ARGS);
mtc_result_t algo_direct_all_to_all(const void *sendbuf, void *recvbuf, size_t count,
                                    mtc_dtype_t dtype, mtc_comm_t comm);

#endif
