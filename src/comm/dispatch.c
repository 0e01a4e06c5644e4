/* comm/dispatch.c - run one operation with a given algorithm: the table from
 * (operation, algorithm) to the functions of algo_*.c, algo_direct.c and the
 * backend's native collectives. A native collective that refuses a dtype
 * (MTC_ERR_UNSUPPORTED, decided alike on every rank) is replaced by the
 * p2p algorithm noted below. Relies on select.c having checked usability.
 * Does not choose (select.c) or do bookkeeping (coll.c). */
#include "comm/comm_internal.h"

static mtc_result_t run_native(mtc_comm_t comm, const comm_op *o, int *unsupported) {
    comm_backend *be = comm->be;
    const comm_backend_ops *n = be->ops;
    comm_group *g = comm->group;
    const comm_call *c = comm->cur;
    mtc_result_t rc = MTC_ERR_UNSUPPORTED;
    switch (o->kind) {
    case MTC_COLL_BARRIER: rc = n->barrier(be, g, c); break;
    case MTC_COLL_BROADCAST:
        rc = n->broadcast(be, g, o->recvbuf, o->count, o->dtype, o->root, c);
        break;
    case MTC_COLL_REDUCE:
        rc = n->reduce(be, g, o->sendbuf, o->recvbuf, o->count, o->dtype, o->op, o->root, c);
        break;
    case MTC_COLL_ALL_REDUCE:
        rc = n->all_reduce(be, g, o->sendbuf, o->recvbuf, o->count, o->dtype, o->op, c);
        break;
    case MTC_COLL_REDUCE_SCATTER:
        rc = n->reduce_scatter(be, g, o->sendbuf, o->recvbuf, o->count, o->dtype, o->op, c);
        break;
    case MTC_COLL_ALL_GATHER:
        rc = n->all_gather(be, g, o->sendbuf, o->recvbuf, o->count, o->dtype, c);
        break;
    case MTC_COLL_ALL_TO_ALL:
        rc = n->all_to_all(be, g, o->sendbuf, o->recvbuf, o->count, o->dtype, c);
        break;
    default: break;
    }
    *unsupported = rc == MTC_ERR_UNSUPPORTED;
    return rc;
}

/* Barrier over p2p algorithms: an all-reduce of one integer. */
static mtc_result_t barrier_by(mtc_comm_t comm, mtc_algo_t algo) {
    int32_t one = 1, sum = 0;
    if (algo == MTC_ALGO_RING)
        return algo_ring_all_reduce(&one, &sum, 1, MTC_DTYPE_I32, MTC_OP_SUM, comm);
    return algo_tree_all_reduce(&one, &sum, 1, MTC_DTYPE_I32, MTC_OP_SUM, comm);
}

mtc_result_t comm_algo_run(mtc_comm_t comm, mtc_algo_t algo, const comm_op *o) {
    const void *s = o->sendbuf;
    void *r = o->recvbuf;
    size_t n = o->count;
    mtc_dtype_t dt = o->dtype;
    if (algo == MTC_ALGO_NATIVE) {
        int unsupported;
        mtc_result_t rc = run_native(comm, o, &unsupported);
        if (!unsupported) return rc;
        algo = o->kind == MTC_COLL_BROADCAST || o->kind == MTC_COLL_REDUCE ||
                       o->kind == MTC_COLL_BARRIER
                   ? MTC_ALGO_TREE
               : o->kind == MTC_COLL_ALL_TO_ALL ? MTC_ALGO_PAIRWISE
                                                : MTC_ALGO_RING;
    }
    switch (o->kind) {
    case MTC_COLL_BARRIER:
        return algo == MTC_ALGO_DIRECT ? algo_direct_barrier(comm) : barrier_by(comm, algo);
    case MTC_COLL_BROADCAST:
        return algo == MTC_ALGO_DIRECT ? algo_direct_broadcast(r, n, dt, o->root, comm)
                                       : algo_tree_broadcast(r, n, dt, o->root, comm);
    case MTC_COLL_REDUCE:
        return algo == MTC_ALGO_DIRECT ? algo_direct_reduce(s, r, n, dt, o->op, o->root, comm)
                                       : algo_tree_reduce(s, r, n, dt, o->op, o->root, comm);
    case MTC_COLL_ALL_REDUCE:
        switch (algo) {
        case MTC_ALGO_DIRECT: return algo_direct_all_reduce(s, r, n, dt, o->op, comm);
        case MTC_ALGO_TREE: return algo_tree_all_reduce(s, r, n, dt, o->op, comm);
        case MTC_ALGO_RECDBL: return algo_recdbl_all_reduce(s, r, n, dt, o->op, comm);
        case MTC_ALGO_RABENSEIFNER: return algo_rabenseifner_all_reduce(s, r, n, dt, o->op, comm);
        case MTC_ALGO_HIER: return algo_hier_all_reduce(s, r, n, dt, o->op, comm);
        default: return algo_ring_all_reduce(s, r, n, dt, o->op, comm);
        }
    case MTC_COLL_REDUCE_SCATTER:
        switch (algo) {
        case MTC_ALGO_DIRECT: return algo_direct_reduce_scatter(s, r, n, dt, o->op, comm);
        case MTC_ALGO_HIER: return algo_hier_reduce_scatter(s, r, n, dt, o->op, comm);
        default: return algo_ring_reduce_scatter(s, r, n, dt, o->op, comm);
        }
    case MTC_COLL_ALL_GATHER:
        switch (algo) {
        case MTC_ALGO_DIRECT: return algo_direct_all_gather(s, r, n, dt, comm);
        case MTC_ALGO_RECDBL: return algo_recdbl_all_gather(s, r, n, dt, comm);
        case MTC_ALGO_HIER: return algo_hier_all_gather(s, r, n, dt, comm);
        default: return algo_ring_all_gather(s, r, n, dt, comm);
        }
    case MTC_COLL_ALL_TO_ALL:
        if (algo == MTC_ALGO_DIRECT) return algo_direct_all_to_all(s, r, n, dt, comm);
        {
            size_t counts[comm->size];
            for (int i = 0; i < comm->size; i++)
                counts[i] = n;
            return algo_pairwise_all_to_all_v(s, counts, NULL, r, counts, NULL, dt, comm);
        }
    case MTC_COLL_REDUCE_SCATTER_V:
        return algo == MTC_ALGO_DIRECT
                   ? algo_direct_reduce_scatter_v(s, r, o->recvcounts, dt, o->op, comm)
                   : algo_ring_reduce_scatter_v(s, r, o->recvcounts, dt, o->op, comm);
    case MTC_COLL_ALL_GATHER_V:
        return algo == MTC_ALGO_DIRECT ? algo_direct_all_gather_v(s, o->sendcount, r, o->recvcounts,
                                                                  o->rdispls, dt, comm)
                                       : algo_ring_all_gather_v(s, o->sendcount, r, o->recvcounts,
                                                                o->rdispls, dt, comm);
    case MTC_COLL_ALL_TO_ALL_V:
        return algo == MTC_ALGO_DIRECT
                   ? algo_direct_all_to_all_v(s, o->sendcounts, o->sdispls, r, o->recvcounts,
                                              o->rdispls, dt, comm)
                   : algo_pairwise_all_to_all_v(s, o->sendcounts, o->sdispls, r, o->recvcounts,
                                                o->rdispls, dt, comm);
    default: return mtc_error(MTC_ERR_INTERNAL, "no algorithm for operation %d", o->kind);
    }
}
