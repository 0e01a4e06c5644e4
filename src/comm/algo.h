/* comm/algo.h - what a collective algorithm sees, and the algorithms.
 *
 * Algorithms are written once over the communicator's point-to-point
 * operations below (implemented by comm.c on top of the backend, shm or
 * mpi), so each works on both backends. They do not check signatures, time
 * out or pick themselves: comm.c does the bookkeeping (sequence number,
 * signature, timeout, error reports) before calling one, and select.c
 * chooses which. An algorithm:
 *   - is called by every rank of comm with the same arguments (but buffers);
 *   - handles count == 0, size == 1, counts not divisible by size, and the
 *     in-place forms documented in comm.h;
 *   - reduces in an order that depends only on (size, count, algorithm), and
 *     leaves the same bits on every rank (e.g. ring all-reduce reduces each
 *     chunk once, then circulates the result);
 *   - takes temporary memory only from comm_scratch (allocated once per
 *     communicator and reused; fresh pages are very expensive here).
 * Files: algo_ring.c, algo_tree.c, algo_recdbl.c (also Rabenseifner),
 * algo_hier.c, algo_direct.c (shm only). Each opens with a step diagram and
 * a Limitations note. */
#ifndef MTC_COMM_ALGO_H
#define MTC_COMM_ALGO_H

#include <stddef.h>

#include "comm/comm.h"

/* ---- services for algorithms (comm.c) ---------------------------------------- */

/* Blocking byte transfers between members of comm (comm ranks, not world
 * ranks). Messages between a pair are matched in order within the current
 * collective; they honour the communicator's timeout and the abort of a
 * failed peer. */
mtc_result_t comm_p2p_send(mtc_comm_t comm, int peer, const void *buf, size_t bytes);
mtc_result_t comm_p2p_recv(mtc_comm_t comm, int peer, void *buf, size_t bytes);
mtc_result_t comm_p2p_sendrecv(mtc_comm_t comm, int dst, const void *sendbuf, size_t sendbytes,
                               int src, void *recvbuf, size_t recvbytes);
/* A per-communicator scratch block of at least `bytes` (grown on demand,
 * never shrunk; contents undefined; valid until the next comm_scratch). */
mtc_result_t comm_scratch(mtc_comm_t comm, size_t bytes, void **out);
/* inout[i] = inout[i] op in[i] for i < count (AVG reduces as SUM; the
 * caller divides once at the end with comm_finish_avg). */
void comm_reduce_local(void *inout, const void *in, size_t count, mtc_dtype_t dtype, mtc_op_t op);
/* memcpy (non-overlapping) that avoids glibc's `rep movsb` where this CPU
 * (AMD EPYC VM) runs it 15-20x slower: 4 KiB-1 MiB copies with
 * (dst - src) mod 4096 in [1, 63] (64 KiB: 30 us instead of 1.6 us; this
 * made shm p2p and direct copies between unrelated user buffers slow). */
void comm_copy(void *dst, const void *src, size_t bytes);
/* buf[i] /= size for AVG (no-op for other ops). */
void comm_finish_avg(void *buf, size_t count, mtc_dtype_t dtype, mtc_op_t op, int size);
/* Sub-communicators for hierarchical algorithms: members on my node
 * (ordered by rank), and the members with my local rank on every node
 * that has one (ordered by rank; for local rank 0, the node leaders);
 * built lazily, cached in comm. */
mtc_result_t comm_node_split(mtc_comm_t comm, mtc_comm_t *intra, mtc_comm_t *inter);
/* 1 while comm_node_split is building them (its splits all-gather over comm:
 * a hierarchical all-gather must then run flat instead of recursing). */
int comm_node_split_pending(mtc_comm_t comm);

/* ---- the algorithms ---------------------------------------------------------- */

#define ALGO_ALL_REDUCE_ARGS                                                                       \
    const void *sendbuf, void *recvbuf, size_t count, mtc_dtype_t dtype, mtc_op_t op,              \
        mtc_comm_t comm
#define ALGO_REDUCE_SCATTER_ARGS                                                                   \
    const void *sendbuf, void *recvbuf, size_t recvcount, mtc_dtype_t dtype, mtc_op_t op,          \
        mtc_comm_t comm
#define ALGO_ALL_GATHER_ARGS                                                                       \
    const void *sendbuf, void *recvbuf, size_t sendcount, mtc_dtype_t dtype, mtc_comm_t comm

mtc_result_t algo_ring_all_reduce(ALGO_ALL_REDUCE_ARGS);
mtc_result_t algo_ring_reduce_scatter(ALGO_REDUCE_SCATTER_ARGS);
mtc_result_t algo_ring_all_gather(ALGO_ALL_GATHER_ARGS);
mtc_result_t algo_tree_all_reduce(ALGO_ALL_REDUCE_ARGS);
mtc_result_t algo_tree_broadcast(void *buf, size_t count, mtc_dtype_t dtype, int root,
                                 mtc_comm_t comm);
mtc_result_t algo_tree_reduce(const void *sendbuf, void *recvbuf, size_t count, mtc_dtype_t dtype,
                              mtc_op_t op, int root, mtc_comm_t comm);
mtc_result_t algo_recdbl_all_reduce(ALGO_ALL_REDUCE_ARGS);
mtc_result_t algo_recdbl_all_gather(ALGO_ALL_GATHER_ARGS);
mtc_result_t algo_rabenseifner_all_reduce(ALGO_ALL_REDUCE_ARGS);
mtc_result_t algo_hier_all_reduce(ALGO_ALL_REDUCE_ARGS);
mtc_result_t algo_hier_reduce_scatter(ALGO_REDUCE_SCATTER_ARGS);
mtc_result_t algo_hier_all_gather(ALGO_ALL_GATHER_ARGS);
/* pairwise exchange (linear in size) */
mtc_result_t algo_pairwise_all_to_all_v(const void *sendbuf, const size_t *sendcounts,
                                        const size_t *sdispls, void *recvbuf,
                                        const size_t *recvcounts, const size_t *rdispls,
                                        mtc_dtype_t dtype, mtc_comm_t comm);
/* ring versions for uneven blocks */
mtc_result_t algo_ring_reduce_scatter_v(const void *sendbuf, void *recvbuf,
                                        const size_t *recvcounts, mtc_dtype_t dtype, mtc_op_t op,
                                        mtc_comm_t comm);
mtc_result_t algo_ring_all_gather_v(const void *sendbuf, size_t sendcount, void *recvbuf,
                                    const size_t *recvcounts, const size_t *displs,
                                    mtc_dtype_t dtype, mtc_comm_t comm);
/* Linear (root-based) barrier / broadcast fallbacks may live in algo_tree.c. */

#endif
