/* comm/algo_hier.c - two-level (hierarchical) all-reduce: reduce inside each
 * node, all-reduce among the node leaders, broadcast inside each node.
 *
 * Relies on comm_node_split (algo.h) for the two sub-communicators, whose
 * node membership comes from the backend (MPI's shared-memory split, or
 * --ranks-per-node for shm), and on the public collectives of comm.h on
 * those sub-communicators, so each level gets its own sequence numbers,
 * signature checks, timeouts and algorithm choice (the selector's, or the
 * one forced on the sub-communicator).
 *
 *   node A: a0 a1 a2      node B: b0 b1 b2       (leaders a0, b0)
 *   1. reduce(intra, root 0):   a0 = a0+a1+a2     b0 = b0+b1+b2
 *   2. all-reduce(leaders):     a0 = b0 = A+B     (divided by p for AVG)
 *   3. broadcast(intra, root 0): every rank gets the leaders' bits
 *
 * Levels 1 and 2 reduce with SUM for AVG; the leaders divide once by the
 * whole size before the broadcast, so all ranks end with identical bits.
 * The order is fixed by (node layout, count) and the algorithms the
 * selector picks for that shape, so it is deterministic run to run.
 *
 * Limitations: latency is the sum of three collectives; leaders carry all
 * inter-node traffic (no multi-leader split of the vector); when all ranks
 * share one node, or every node has one rank, the hierarchy is pointless and
 * this falls back to the ring (large) or recursive doubling (small) on comm. */
#include "comm/algo.h"

/* Below this many bytes the flat fallback uses recursive doubling. */
enum { HIER_SMALL_BYTES = 16 << 10 };

mtc_result_t algo_hier_all_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                  mtc_dtype_t dtype, mtc_op_t op, mtc_comm_t comm) {
    const int p = mtc_comm_size(comm);
    if (count == 0) return MTC_OK;
    if (p == 1 || mtc_comm_node_count(comm) <= 1 || mtc_comm_node_count(comm) >= p) {
        if (count * mtc_dtype_size(dtype) < HIER_SMALL_BYTES)
            return algo_recdbl_all_reduce(sendbuf, recvbuf, count, dtype, op, comm);
        return algo_ring_all_reduce(sendbuf, recvbuf, count, dtype, op, comm);
    }
    mtc_comm_t intra = NULL, inter = NULL;
    MTC_CHECK(comm_node_split(comm, &intra, &inter));
    const int leader = mtc_comm_rank(intra) == 0;
    if (leader != (inter != NULL))
        return mtc_error(MTC_ERR_INTERNAL,
                         "hier all_reduce: rank %d of %s is %s of its node but %s a leader "
                         "communicator (comm_node_split must make local rank 0 the leader)",
                         mtc_comm_rank(comm), mtc_comm_name(comm), leader ? "rank 0" : "not rank 0",
                         inter ? "has" : "has no");
    const mtc_op_t sub = op == MTC_OP_AVG ? MTC_OP_SUM : op;

    MTC_CHECK(mtc_reduce(sendbuf, recvbuf, count, dtype, sub, 0, intra));
    if (leader) {
        MTC_CHECK(mtc_all_reduce(recvbuf, recvbuf, count, dtype, sub, inter));
        comm_finish_avg(recvbuf, count, dtype, op, p);
    }
    return mtc_broadcast(recvbuf, count, dtype, 0, intra);
}
