/* comm/coll_mpi.h - internals shared by backend_mpi.c (groups, p2p, checks)
 * and coll_mpi.c (MPI's own collectives as the "native" algorithm).
 * Not a public header: only the *_mpi.c files of comm/ include it, and
 * tests/mpi/mpi_errors.c (its "gone" case sends the farewell itself). */
#ifndef MTC_COMM_COLL_MPI_H
#define MTC_COMM_COLL_MPI_H

#include <mpi.h>

#include "comm/backend.h"

/* The mpi backend's group: an MPI communicator mirroring one mtc
 * communicator, plus a shadow (a duplicate) for the entry checks. */
struct comm_group {
    MPI_Comm comm, shadow;
    int n, me;
    int *members;        /* world rank of each member */
    mtc_result_t err_rc; /* sticky error (MTC_OK when healthy) */
    char err_msg[1200];
    uint64_t *sig;     /* entry check: 4 words mine, then 4 per member */
    MPI_Request *reqs; /* 2 n */
    MPI_Status *stats; /* 2 n */
    int *peers;        /* 2 n */
    void *scratch;     /* native in-place reduce-scatter staging */
    size_t scratch_bytes;
    comm_wait_rec *wait; /* the rank's wait record (watchdog.h) */
};

/* Poll one request (a native collective's) to completion with back-off,
 * ending with MTC_ERR_TIMEOUT and a report at the call's deadline. The
 * request stays pending after a timeout (MPI cannot cancel collectives):
 * the group is failed and the job is expected to end. */
mtc_result_t coll_mpi_wait(comm_group *g, MPI_Request *req, const char *what, size_t bytes,
                           const comm_call *call);

/* watch_mpi.c: the watchdog thread (collective start: it duplicates
 * MPI_COMM_WORLD), and asking peers what they do for a timeout report:
 * appends "; rank 3 does not answer (...): it is the cause" or "; rank 0 is
 * itself blocked (...): the cause is reported on rank 0" per peer (member
 * indices of g) to buf. */
mtc_result_t comm_mpi_watch_start(comm_backend *be);
void comm_mpi_watch_stop(void);
/* Before MPI_Abort: tell the other ranks this one ends the job with rc, so
 * a peer that asks it after it is gone reads "has failed already" instead
 * of "does not answer". */
void comm_mpi_watch_farewell(mtc_result_t rc);
void comm_mpi_watch_diagnose(const comm_group *g, const comm_call *mine, const int *peers,
                             int npeers, char *buf, size_t len);

/* " on mtc-b": the host of world rank w for reports, when the job's ranks
 * run on more than one host; "" otherwise (backend_mpi.c; the process's one
 * mpi backend). Valid until the backend is finalized. */
const char *comm_mpi_host_note(int world_rank);

/* Record a sticky group error from an MPI error code and return it. */
mtc_result_t coll_mpi_error(comm_group *g, int err, const char *what, const comm_call *call);

/* bf16 reduction operators (MPI has no bf16); process-wide. */
mtc_result_t coll_mpi_init(void);
void coll_mpi_fini(void);

mtc_result_t coll_mpi_barrier(comm_backend *be, comm_group *g, const comm_call *call);
mtc_result_t coll_mpi_broadcast(comm_backend *be, comm_group *g, void *buf, size_t count,
                                mtc_dtype_t dtype, int root, const comm_call *call);
mtc_result_t coll_mpi_reduce(comm_backend *be, comm_group *g, const void *sendbuf, void *recvbuf,
                             size_t count, mtc_dtype_t dtype, mtc_op_t op, int root,
                             const comm_call *call);
mtc_result_t coll_mpi_all_reduce(comm_backend *be, comm_group *g, const void *sendbuf,
                                 void *recvbuf, size_t count, mtc_dtype_t dtype, mtc_op_t op,
                                 const comm_call *call);
mtc_result_t coll_mpi_reduce_scatter(comm_backend *be, comm_group *g, const void *sendbuf,
                                     void *recvbuf, size_t recvcount, mtc_dtype_t dtype,
                                     mtc_op_t op, const comm_call *call);
mtc_result_t coll_mpi_all_gather(comm_backend *be, comm_group *g, const void *sendbuf,
                                 void *recvbuf, size_t sendcount, mtc_dtype_t dtype,
                                 const comm_call *call);
mtc_result_t coll_mpi_all_to_all(comm_backend *be, comm_group *g, const void *sendbuf,
                                 void *recvbuf, size_t count, mtc_dtype_t dtype,
                                 const comm_call *call);

#endif
