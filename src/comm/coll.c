/* comm/coll.c - the collective entry points of comm.h: argument checks, then
 * one path for every operation: number it, announce it (signature and
 * deadline), take the one-rank and zero-count shortcuts, run the chosen
 * algorithm (select.c) with AVG turned into SUM, and divide at the end.
 * Blocking calls first wait for the communicator's queued non-blocking ones
 * (request.c) so operations complete in issue order.
 * Relies on comm.c (calls), select.c (dispatch), reduce.c (AVG). Does not
 * move data itself except for the one-rank shortcut. */
#include <stdio.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "core/timer.h"

static int is_reducing(int kind) {
    return kind == MTC_COLL_REDUCE || kind == MTC_COLL_ALL_REDUCE ||
           kind == MTC_COLL_REDUCE_SCATTER || kind == MTC_COLL_REDUCE_SCATTER_V;
}

static void copy_if(void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) memmove(dst, src, bytes);
}

/* The result when the communicator has one rank. */
static void run_single(const comm_op *op) {
    size_t es = mtc_dtype_size(op->dtype);
    switch (op->kind) {
    case MTC_COLL_REDUCE:
    case MTC_COLL_ALL_REDUCE:
    case MTC_COLL_REDUCE_SCATTER:
    case MTC_COLL_ALL_GATHER:
    case MTC_COLL_ALL_TO_ALL: copy_if(op->recvbuf, op->sendbuf, op->count * es); break;
    case MTC_COLL_REDUCE_SCATTER_V:
        copy_if(op->recvbuf, op->sendbuf, op->recvcounts[0] * es);
        break;
    case MTC_COLL_ALL_GATHER_V:
        copy_if((char *)op->recvbuf + (op->rdispls ? op->rdispls[0] : 0) * es, op->sendbuf,
                op->sendcount * es);
        break;
    case MTC_COLL_ALL_TO_ALL_V:
        copy_if((char *)op->recvbuf + (op->rdispls ? op->rdispls[0] : 0) * es,
                (const char *)op->sendbuf + (op->sdispls ? op->sdispls[0] : 0) * es,
                op->sendcounts[0] * es);
        break;
    default: break;
    }
}

static mtc_result_t run_body(mtc_comm_t comm, const comm_op *op, mtc_algo_t *algo) {
    if (comm->size == 1) {
        run_single(op);
        return MTC_OK;
    }
    int has_count = op->kind != MTC_COLL_BARRIER && op->kind < MTC_COLL_REDUCE_SCATTER_V;
    if (has_count && op->count == 0) return MTC_OK;
    comm_op o = *op;
    if (o.op == MTC_OP_AVG) o.op = MTC_OP_SUM;
    MTC_CHECK(comm_algo_resolve(comm, &o, algo));
    MTC_CHECK(comm_algo_run(comm, *algo, &o));
    if (op->op == MTC_OP_AVG && is_reducing(op->kind)) {
        size_t n = op->kind == MTC_COLL_REDUCE_SCATTER_V ? op->recvcounts[comm->rank] : op->count;
        if (op->kind != MTC_COLL_REDUCE || comm->rank == op->root)
            comm_finish_avg(op->recvbuf, n, op->dtype, op->op, comm->size);
    }
    return MTC_OK;
}

mtc_result_t comm_op_run(mtc_comm_t comm, const comm_op *op) {
    comm_call call;
    const comm_call *prev = comm->cur;
    uint32_t prev_tag = comm->cur_tag;
    struct mtc_trace *tr = comm_trace_of(comm);
    uint64_t t0 = tr ? mtc_time_ns() : 0;
    mtc_algo_t algo = MTC_ALGO_AUTO;
    mtc_result_t rc = comm_call_begin(comm, op, &call);
    if (rc == MTC_OK) {
        comm->cur = &call;
        comm->cur_tag = 1 + (uint32_t)(call.seq % (1u << 30));
        rc = run_body(comm, op, &algo);
    }
    comm_call_end(comm, &call);
    comm->cur = prev;
    comm->cur_tag = prev_tag;
    if (tr && rc == MTC_OK) comm_trace_coll(comm, tr, op, algo, t0);
    return rc;
}

mtc_result_t comm_op_blocking(mtc_comm_t comm, const comm_op *op) {
    comm_queue_drain(comm);
    return comm_op_run(comm, op);
}

/* ---- argument checks (local: a bad argument fails on its own rank) ------------ */

static mtc_result_t check(mtc_comm_t comm, const comm_op *op) {
    const char *name = mtc_coll_name((mtc_coll_t)op->kind);
    if (!comm) return mtc_error(MTC_ERR_INVALID_ARGUMENT, "mtc_%s: comm is NULL", name);
    if ((unsigned)op->dtype >= MTC_DTYPE_COUNT)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "mtc_%s: dtype %d is not a mtc_dtype_t", name,
                         (int)op->dtype);
    if (is_reducing(op->kind) && (unsigned)op->op >= MTC_OP_COUNT)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "mtc_%s: op %d is not sum/max/min/avg", name,
                         (int)op->op);
    if ((op->kind == MTC_COLL_BROADCAST || op->kind == MTC_COLL_REDUCE) &&
        (op->root < 0 || op->root >= comm->size))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "mtc_%s: root %d is not a rank of %s (0..%d)",
                         name, op->root, comm->name, comm->size - 1);
    int need_recv = op->kind != MTC_COLL_REDUCE || comm->rank == op->root;
    if (op->count && (!op->sendbuf || (need_recv && !op->recvbuf)))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "mtc_%s: NULL buffer with count %zu on %s", name,
                         op->count, comm->name);
    if (op->kind == MTC_COLL_ALL_TO_ALL && op->count && op->sendbuf == op->recvbuf)
        return mtc_error(
            MTC_ERR_INVALID_ARGUMENT,
            "mtc_all_to_all: sendbuf == recvbuf; all-to-all is not in place, pass two buffers");
    return MTC_OK;
}

static mtc_result_t blocking(mtc_comm_t comm, const comm_op *op) {
    MTC_CHECK(check(comm, op));
    return comm_op_blocking(comm, op);
}

mtc_result_t mtc_barrier(mtc_comm_t comm) {
    comm_op op = {.kind = MTC_COLL_BARRIER, .dtype = MTC_DTYPE_I32};
    return blocking(comm, &op);
}

mtc_result_t mtc_broadcast(void *buf, size_t count, mtc_dtype_t dtype, int root, mtc_comm_t comm) {
    comm_op op = {.kind = MTC_COLL_BROADCAST,
                  .sendbuf = buf,
                  .recvbuf = buf,
                  .count = count,
                  .dtype = dtype,
                  .root = root};
    return blocking(comm, &op);
}

mtc_result_t mtc_reduce(const void *sendbuf, void *recvbuf, size_t count, mtc_dtype_t dtype,
                        mtc_op_t op, int root, mtc_comm_t comm) {
    comm_op o = {.kind = MTC_COLL_REDUCE,
                 .sendbuf = sendbuf,
                 .recvbuf = recvbuf,
                 .count = count,
                 .dtype = dtype,
                 .op = op,
                 .root = root};
    return blocking(comm, &o);
}

mtc_result_t mtc_all_reduce(const void *sendbuf, void *recvbuf, size_t count, mtc_dtype_t dtype,
                            mtc_op_t op, mtc_comm_t comm) {
    comm_op o = {.kind = MTC_COLL_ALL_REDUCE,
                 .sendbuf = sendbuf,
                 .recvbuf = recvbuf,
                 .count = count,
                 .dtype = dtype,
                 .op = op,
                 .root = -1};
    return blocking(comm, &o);
}

mtc_result_t mtc_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                mtc_dtype_t dtype, mtc_op_t op, mtc_comm_t comm) {
    comm_op o = {.kind = MTC_COLL_REDUCE_SCATTER,
                 .sendbuf = sendbuf,
                 .recvbuf = recvbuf,
                 .count = recvcount,
                 .dtype = dtype,
                 .op = op,
                 .root = -1};
    return blocking(comm, &o);
}

mtc_result_t mtc_all_gather(const void *sendbuf, void *recvbuf, size_t sendcount, mtc_dtype_t dtype,
                            mtc_comm_t comm) {
    comm_op o = {.kind = MTC_COLL_ALL_GATHER,
                 .sendbuf = sendbuf,
                 .recvbuf = recvbuf,
                 .count = sendcount,
                 .dtype = dtype,
                 .root = -1};
    return blocking(comm, &o);
}

mtc_result_t mtc_all_to_all(const void *sendbuf, void *recvbuf, size_t count, mtc_dtype_t dtype,
                            mtc_comm_t comm) {
    comm_op o = {.kind = MTC_COLL_ALL_TO_ALL,
                 .sendbuf = sendbuf,
                 .recvbuf = recvbuf,
                 .count = count,
                 .dtype = dtype,
                 .root = -1};
    return blocking(comm, &o);
}

static size_t sum(const size_t *v, int n) {
    size_t s = 0;
    for (int i = 0; i < n; i++)
        s += v[i];
    return s;
}

static mtc_result_t check_counts(mtc_comm_t comm, const void *a, const void *b, const char *what) {
    if (!comm) return mtc_error(MTC_ERR_INVALID_ARGUMENT, "mtc_%s: comm is NULL", what);
    if (!a || !b) return mtc_error(MTC_ERR_INVALID_ARGUMENT, "mtc_%s: counts are NULL", what);
    return MTC_OK;
}

mtc_result_t mtc_reduce_scatter_v(const void *sendbuf, void *recvbuf, const size_t *recvcounts,
                                  mtc_dtype_t dtype, mtc_op_t op, mtc_comm_t comm) {
    MTC_CHECK(check_counts(comm, recvcounts, recvcounts, "reduce_scatter_v"));
    comm_op o = {.kind = MTC_COLL_REDUCE_SCATTER_V,
                 .sendbuf = sendbuf,
                 .recvbuf = recvbuf,
                 .count = sum(recvcounts, comm->size),
                 .dtype = dtype,
                 .op = op,
                 .root = -1,
                 .recvcounts = recvcounts};
    return blocking(comm, &o);
}

mtc_result_t mtc_all_gather_v(const void *sendbuf, size_t sendcount, void *recvbuf,
                              const size_t *recvcounts, const size_t *displs, mtc_dtype_t dtype,
                              mtc_comm_t comm) {
    MTC_CHECK(check_counts(comm, recvcounts, recvcounts, "all_gather_v"));
    if (sendcount != recvcounts[comm->rank])
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "mtc_all_gather_v: sendcount %zu differs from recvcounts[%d]=%zu",
                         sendcount, comm->rank, recvcounts[comm->rank]);
    comm_op o = {.kind = MTC_COLL_ALL_GATHER_V,
                 .sendbuf = sendbuf,
                 .recvbuf = recvbuf,
                 .count = sum(recvcounts, comm->size),
                 .dtype = dtype,
                 .root = -1,
                 .sendcount = sendcount,
                 .recvcounts = recvcounts,
                 .rdispls = displs};
    return blocking(comm, &o);
}

static mtc_result_t a2av_op(comm_op *o, const void *sendbuf, const size_t *sendcounts,
                            const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                            const size_t *rdispls, mtc_dtype_t dtype, mtc_comm_t comm) {
    MTC_CHECK(check_counts(comm, sendcounts, recvcounts, "all_to_all_v"));
    if (sum(sendcounts, comm->size) && sendbuf == recvbuf)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "mtc_all_to_all_v: sendbuf == recvbuf; all-to-all is not in place");
    *o = (comm_op){.kind = MTC_COLL_ALL_TO_ALL_V,
                   .sendbuf = sendbuf,
                   .recvbuf = recvbuf,
                   .count = 0,
                   .dtype = dtype,
                   .root = -1,
                   .sendcounts = sendcounts,
                   .sdispls = sdispls,
                   .recvcounts = recvcounts,
                   .rdispls = rdispls};
    return MTC_OK;
}

mtc_result_t mtc_all_to_all_v(const void *sendbuf, const size_t *sendcounts, const size_t *sdispls,
                              void *recvbuf, const size_t *recvcounts, const size_t *rdispls,
                              mtc_dtype_t dtype, mtc_comm_t comm) {
    comm_op o;
    MTC_CHECK(a2av_op(&o, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dtype, comm));
    return blocking(comm, &o);
}

/* ---- non-blocking ------------------------------------------------------------------ */

mtc_result_t mtc_all_reduce_start(const void *sendbuf, void *recvbuf, size_t count,
                                  mtc_dtype_t dtype, mtc_op_t op, mtc_comm_t comm,
                                  mtc_request_t *req) {
    comm_op o = {.kind = MTC_COLL_ALL_REDUCE,
                 .sendbuf = sendbuf,
                 .recvbuf = recvbuf,
                 .count = count,
                 .dtype = dtype,
                 .op = op,
                 .root = -1};
    MTC_CHECK(check(comm, &o));
    return comm_queue_push(comm, &o, req);
}

mtc_result_t mtc_reduce_scatter_start(const void *sendbuf, void *recvbuf, size_t recvcount,
                                      mtc_dtype_t dtype, mtc_op_t op, mtc_comm_t comm,
                                      mtc_request_t *req) {
    comm_op o = {.kind = MTC_COLL_REDUCE_SCATTER,
                 .sendbuf = sendbuf,
                 .recvbuf = recvbuf,
                 .count = recvcount,
                 .dtype = dtype,
                 .op = op,
                 .root = -1};
    MTC_CHECK(check(comm, &o));
    return comm_queue_push(comm, &o, req);
}

mtc_result_t mtc_all_gather_start(const void *sendbuf, void *recvbuf, size_t sendcount,
                                  mtc_dtype_t dtype, mtc_comm_t comm, mtc_request_t *req) {
    comm_op o = {.kind = MTC_COLL_ALL_GATHER,
                 .sendbuf = sendbuf,
                 .recvbuf = recvbuf,
                 .count = sendcount,
                 .dtype = dtype,
                 .root = -1};
    MTC_CHECK(check(comm, &o));
    return comm_queue_push(comm, &o, req);
}

mtc_result_t mtc_all_to_all_v_start(const void *sendbuf, const size_t *sendcounts,
                                    const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                                    const size_t *rdispls, mtc_dtype_t dtype, mtc_comm_t comm,
                                    mtc_request_t *req) {
    comm_op o;
    MTC_CHECK(a2av_op(&o, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dtype, comm));
    MTC_CHECK(check(comm, &o));
    return comm_queue_push(comm, &o, req);
}
