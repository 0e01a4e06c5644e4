/* comm/coll_mpi.c - the MPI library's own collectives as the mpi backend's
 * optional "native" entries (MTC_ALGO_NATIVE): MPI_Ibarrier, MPI_Ibcast,
 * MPI_Ireduce, MPI_Iallreduce, MPI_Ireduce_scatter_block, MPI_Iallgather and
 * MPI_Ialltoall on the group's MPI communicator, with bf16 reductions through
 * user-defined MPI operators (MPI has no bf16 type).
 *
 * Relies on backend_mpi.c for the group (coll_mpi.h), its entry check and
 * coll_mpi_wait: every collective is MPI's non-blocking form, polled with
 * back-off against the call's deadline, so a peer that stops (SIGSTOP, a
 * hung node) or vanishes in the middle of one gives MTC_ERR_TIMEOUT with a
 * report instead of blocking forever in MPI (the blocking forms hung 5 runs
 * in 8 with a stopped peer). After a timeout the request stays pending
 * inside MPI (collectives cannot be cancelled): the group is failed, and its
 * buffers may still be written if the peer resumes, so the job must end.
 *
 * Does not: do AVG (comm.c passes SUM and divides), or take counts above
 * INT_MAX (returns MTC_ERR_UNSUPPORTED without communicating, decided from
 * the arguments alone, and comm.c falls back to its own algorithm). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "comm/coll_mpi.h"

static MPI_Op bf16_ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}; /* sum, max, min */

static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    const mtc_bf16 *a = in;
    mtc_bf16 *b = inout;
    (void)dt;
    for (int i = 0; i < *len; i++)
        b[i] = mtc_f32_to_bf16(mtc_bf16_to_f32(b[i]) + mtc_bf16_to_f32(a[i]));
}
static void bf16_max(void *in, void *inout, int *len, MPI_Datatype *dt) {
    const mtc_bf16 *a = in;
    mtc_bf16 *b = inout;
    (void)dt;
    for (int i = 0; i < *len; i++)
        if (mtc_bf16_to_f32(a[i]) > mtc_bf16_to_f32(b[i])) b[i] = a[i];
}
static void bf16_min(void *in, void *inout, int *len, MPI_Datatype *dt) {
    const mtc_bf16 *a = in;
    mtc_bf16 *b = inout;
    (void)dt;
    for (int i = 0; i < *len; i++)
        if (mtc_bf16_to_f32(a[i]) < mtc_bf16_to_f32(b[i])) b[i] = a[i];
}

mtc_result_t coll_mpi_init(void) {
    MPI_User_function *fn[3] = {bf16_sum, bf16_max, bf16_min};
    for (int i = 0; i < 3; i++)
        if (bf16_ops[i] == MPI_OP_NULL && MPI_Op_create(fn[i], 1, &bf16_ops[i]) != MPI_SUCCESS)
            return mtc_error(MTC_ERR_SYSTEM, "mpi backend: MPI_Op_create for bf16 failed");
    return MTC_OK;
}

void coll_mpi_fini(void) {
    int fin = 0;
    MPI_Finalized(&fin);
    for (int i = 0; i < 3; i++)
        if (bf16_ops[i] != MPI_OP_NULL && !fin) MPI_Op_free(&bf16_ops[i]);
    for (int i = 0; i < 3; i++)
        bf16_ops[i] = MPI_OP_NULL;
}

static MPI_Datatype mpi_type(mtc_dtype_t dt) {
    switch (dt) {
    case MTC_DTYPE_F32: return MPI_FLOAT;
    case MTC_DTYPE_F64: return MPI_DOUBLE;
    case MTC_DTYPE_BF16: return MPI_UINT16_T;
    case MTC_DTYPE_I32: return MPI_INT32_T;
    case MTC_DTYPE_I64: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL;
    }
}

/* MPI_OP_NULL when MPI cannot do (dtype, op) here. */
static MPI_Op mpi_op(mtc_dtype_t dt, mtc_op_t op) {
    int i = op == MTC_OP_SUM ? 0 : op == MTC_OP_MAX ? 1 : op == MTC_OP_MIN ? 2 : -1;
    if (i < 0) return MPI_OP_NULL;
    if (dt == MTC_DTYPE_BF16) return bf16_ops[i];
    return i == 0 ? MPI_SUM : i == 1 ? MPI_MAX : MPI_MIN;
}

static mtc_result_t unsupported(const char *what, size_t count, mtc_dtype_t dt) {
    return mtc_error(MTC_ERR_UNSUPPORTED, "native %s: MPI cannot do count=%zu of %s here", what,
                     count, mtc_dtype_name(dt));
}

#define HEALTH(g)                                                                                  \
    do {                                                                                           \
        if ((g)->err_rc) return mtc_error((g)->err_rc, "%s", (g)->err_msg);                        \
    } while (0)
/* Start MPI's non-blocking form and poll it against the call's deadline. */
#define MPI_DO(g, call, what, bytes, c)                                                            \
    do {                                                                                           \
        MPI_Request req_ = MPI_REQUEST_NULL;                                                       \
        int e_ = (call);                                                                           \
        if (e_ != MPI_SUCCESS) return coll_mpi_error((g), e_, (what), (c));                        \
        MTC_CHECK(coll_mpi_wait((g), &req_, (what), (bytes), (c)));                                \
    } while (0)

mtc_result_t coll_mpi_barrier(comm_backend *be, comm_group *g, const comm_call *call) {
    (void)be;
    HEALTH(g);
    MPI_DO(g, MPI_Ibarrier(g->comm, &req_), "MPI_Ibarrier", 0, call);
    return MTC_OK;
}

mtc_result_t coll_mpi_broadcast(comm_backend *be, comm_group *g, void *buf, size_t count,
                                mtc_dtype_t dtype, int root, const comm_call *call) {
    (void)be;
    HEALTH(g);
    if (count > INT_MAX) return unsupported("broadcast", count, dtype);
    if (count == 0) return MTC_OK;
    MPI_DO(g, MPI_Ibcast(buf, (int)count, mpi_type(dtype), root, g->comm, &req_), "MPI_Ibcast",
           count * mtc_dtype_size(dtype), call);
    return MTC_OK;
}

mtc_result_t coll_mpi_reduce(comm_backend *be, comm_group *g, const void *sendbuf, void *recvbuf,
                             size_t count, mtc_dtype_t dtype, mtc_op_t op, int root,
                             const comm_call *call) {
    (void)be;
    HEALTH(g);
    MPI_Op o = mpi_op(dtype, op);
    if (count > INT_MAX || o == MPI_OP_NULL) return unsupported("reduce", count, dtype);
    if (count == 0) return MTC_OK;
    const void *sb = g->me == root && sendbuf == recvbuf ? MPI_IN_PLACE : sendbuf;
    MPI_DO(g,
           MPI_Ireduce(sb, g->me == root ? recvbuf : NULL, (int)count, mpi_type(dtype), o, root,
                       g->comm, &req_),
           "MPI_Ireduce", count * mtc_dtype_size(dtype), call);
    return MTC_OK;
}

mtc_result_t coll_mpi_all_reduce(comm_backend *be, comm_group *g, const void *sendbuf,
                                 void *recvbuf, size_t count, mtc_dtype_t dtype, mtc_op_t op,
                                 const comm_call *call) {
    (void)be;
    HEALTH(g);
    MPI_Op o = mpi_op(dtype, op);
    if (count > INT_MAX || o == MPI_OP_NULL) return unsupported("all_reduce", count, dtype);
    if (count == 0) return MTC_OK;
    const void *sb = sendbuf == recvbuf ? MPI_IN_PLACE : sendbuf;
    MPI_DO(g, MPI_Iallreduce(sb, recvbuf, (int)count, mpi_type(dtype), o, g->comm, &req_),
           "MPI_Iallreduce", count * mtc_dtype_size(dtype), call);
    return MTC_OK;
}

mtc_result_t coll_mpi_reduce_scatter(comm_backend *be, comm_group *g, const void *sendbuf,
                                     void *recvbuf, size_t recvcount, mtc_dtype_t dtype,
                                     mtc_op_t op, const comm_call *call) {
    (void)be;
    HEALTH(g);
    MPI_Op o = mpi_op(dtype, op);
    if (recvcount > INT_MAX || o == MPI_OP_NULL)
        return unsupported("reduce_scatter", recvcount, dtype);
    if (recvcount == 0) return MTC_OK;
    const size_t bytes = recvcount * mtc_dtype_size(dtype);
    void *out = recvbuf;
    /* In place (recvbuf is our block of sendbuf): MPI forbids aliasing, and
     * its MPI_IN_PLACE form would overwrite block 0, so stage the result. */
    const int inplace = (const char *)recvbuf == (const char *)sendbuf + (size_t)g->me * bytes;
    if (inplace) {
        if (g->scratch_bytes < bytes) {
            void *p = realloc(g->scratch, bytes);
            if (!p)
                return mtc_error(MTC_ERR_OUT_OF_MEMORY,
                                 "native reduce_scatter: no memory for "
                                 "%zu staging bytes",
                                 bytes);
            g->scratch = p;
            g->scratch_bytes = bytes;
        }
        out = g->scratch;
    }
    MPI_DO(
        g,
        MPI_Ireduce_scatter_block(sendbuf, out, (int)recvcount, mpi_type(dtype), o, g->comm, &req_),
        "MPI_Ireduce_scatter_block", bytes * (size_t)g->n, call);
    if (inplace) memcpy(recvbuf, out, bytes);
    return MTC_OK;
}

mtc_result_t coll_mpi_all_gather(comm_backend *be, comm_group *g, const void *sendbuf,
                                 void *recvbuf, size_t sendcount, mtc_dtype_t dtype,
                                 const comm_call *call) {
    (void)be;
    HEALTH(g);
    if (sendcount > INT_MAX) return unsupported("all_gather", sendcount, dtype);
    if (sendcount == 0) return MTC_OK;
    const size_t bytes = sendcount * mtc_dtype_size(dtype);
    /* MPI's in-place all-gather takes our block where NCCL's does */
    const void *sb = (const char *)sendbuf == (const char *)recvbuf + (size_t)g->me * bytes
                         ? MPI_IN_PLACE
                         : sendbuf;
    MPI_Datatype t = mpi_type(dtype);
    MPI_DO(g, MPI_Iallgather(sb, (int)sendcount, t, recvbuf, (int)sendcount, t, g->comm, &req_),
           "MPI_Iallgather", bytes * (size_t)g->n, call);
    return MTC_OK;
}

mtc_result_t coll_mpi_all_to_all(comm_backend *be, comm_group *g, const void *sendbuf,
                                 void *recvbuf, size_t count, mtc_dtype_t dtype,
                                 const comm_call *call) {
    (void)be;
    HEALTH(g);
    if (count > INT_MAX) return unsupported("all_to_all", count, dtype);
    if (count == 0) return MTC_OK;
    MPI_Datatype t = mpi_type(dtype);
    MPI_DO(g, MPI_Ialltoall(sendbuf, (int)count, t, recvbuf, (int)count, t, g->comm, &req_),
           "MPI_Ialltoall", count * mtc_dtype_size(dtype) * (size_t)g->n, call);
    return MTC_OK;
}
