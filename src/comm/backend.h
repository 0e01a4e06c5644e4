/* comm/backend.h - the transport under the communicators: a small table of
 * function pointers plus a context, one instance per rank (thread or process).
 *
 * Relies on: comm.h types, core/result.h. Implemented by backend_shm.c
 * (ranks are threads of one process) and backend_mpi.c (ranks are MPI
 * processes; compiled only with MTC_HAVE_MPI). Used only by comm/ (comm.c,
 * launch.c, the algorithms through algo.h). Does not choose algorithms,
 * number calls or format reports: comm.c does that and hands the backend a
 * `comm_call` describing the call in progress.
 *
 * ---- Groups --------------------------------------------------------------
 * Every mtc communicator owns one backend group (comm_group, opaque here):
 * the backend's mirror of the member list (e.g. an MPI_Comm, or the shared
 * state the shm ranks of the group meet in). The world group exists from
 * the start (comm_backend.world; it belongs to the backend, which frees it
 * at finalize: comm.c never calls group_free on it). group_create is called by comm.c inside
 * mtc_comm_split / mtc_comm_create, collectively by EVERY member of the
 * parent group, after comm.c has computed the new membership itself, so the
 * backend may either use the membership (shm) or just call
 * MPI_Comm_split(parent, color, key) (mpi: gives the same order, ranks
 * sorted by (key, parent rank); create passes color 0 for members / -1 for
 * others and key = position in the list). group_free is local (not
 * collective) and may be called in any order by the members.
 *
 * ---- Point-to-point -------------------------------------------------------
 * Peers are member indices of the group (comm ranks), not world ranks; the
 * group maps them to world ranks. Messages are matched by (group, source,
 * tag) in the order they were sent; the sizes of a matched pair must be
 * equal (a difference is an error: MTC_ERR_INVALID_USAGE naming both). comm.c
 * uses tag 0 for user mtc_send/mtc_recv and 1 + (seq mod 2^30) for the
 * messages of collective number `seq`; a backend with a smaller tag space
 * may reduce tags modulo its bound (collectives on one group are strictly
 * sequential). All three calls are blocking:
 *   send      returns when the buffer may be reused (shm: the receiver has
 *             copied it, i.e. synchronous like MPI_Ssend; mpi: MPI_Send
 *             semantics are allowed, callers never rely on buffering);
 *   recv      returns when the data is in buf;
 *   sendrecv  both at once, deadlock-free when every rank of a ring calls it.
 * Two threads of one rank (the rank and its communicators' progress
 * threads) may use the backend at the same time on DIFFERENT groups; one
 * group is never used by two threads at once (comm.c serialises).
 *
 * ---- Deadlines, diagnosis, aborts ----------------------------------------
 * Every blocking function gets `call`: the collective in progress (sequence
 * number, signature, group name) and its absolute deadline (mtc_time_ns();
 * 0 = wait forever). A blocking wait must end with
 *   MTC_ERR_TIMEOUT  when the deadline passes: detail names the group, the
 *                    call and the peer(s) waited for; shm also reports what
 *                    every member is doing (from the board, see `enter`);
 *   MTC_ERR_REMOTE   when another rank aborted (see `abort`): detail names
 *                    the failed rank and its message;
 *   MTC_ERR_INVALID_USAGE  when the backend sees that a peer entered the
 *                    same sequence number with another signature (both
 *                    ranks and both calls named, see comm_call_describe).
 * This holds for every wait, native collectives included (mpi runs MPI's
 * non-blocking forms and polls them). A wait that leaves its fast path
 * fills the rank's wait record (`wait` below, watchdog.h) so peers' reports
 * and the watchdog can tell a rank blocked waiting from one that never
 * arrived; waits back off to sleeping (futex on shm, naps on mpi).
 * Errors are sticky per group for INVALID_USAGE (the group is unusable).
 * `enter` is called when a collective starts on this rank and `leave` when
 * it ends; shm publishes the call on a per-group board that peers read to
 * detect mismatches and write timeout reports. A backend that cannot see
 * peers (mpi) may check signatures in `enter` in any collective way it likes
 * (e.g. an MPI_Allreduce of a signature hash on a shadow communicator) or
 * do nothing; comm.c never relies on a check.
 * `abort` marks this rank as failed with (rc, message): every peer's pending
 * and future blocking waits then fail with MTC_ERR_REMOTE (shm: a world
 * flag checked while waiting; mpi: may print the message and MPI_Abort).
 *
 * ---- Native collectives (optional; NULL when absent) ---------------------
 * Whole collectives the transport does itself over the group (MPI's own
 * MPI_Allreduce...). Arguments as in comm.h, in place under the same rules.
 * op is never MTC_OP_AVG: comm.c passes MTC_OP_SUM and divides afterwards.
 * A native collective may return MTC_ERR_UNSUPPORTED, WITHOUT communicating,
 * for a (dtype, op) it cannot do (e.g. bf16 in MPI); it must decide from its
 * arguments alone, so every rank decides alike; comm.c then runs its own
 * ring algorithm instead. Counts are elements; root is a group member index.
 *
 * ---- Nodes ---------------------------------------------------------------
 * node_of(world rank) gives the node index (0..node_count-1) for the
 * hierarchical algorithms; shm fakes nodes of ranks_per_node threads so
 * those algorithms are testable on one machine. host_of(world rank) names
 * the rank's host in reports (mpi: MPI_Get_processor_name; NULL pointer on
 * shm, whose nodes are fake). */
#ifndef MTC_COMM_BACKEND_H
#define MTC_COMM_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"

/* Longest timeout a deadline is computed for (about 3 years): a larger or
 * infinite MTC_COMM_TIMEOUT / --timeout means "no practical limit" and is
 * cut to this, so now + timeout in ns stays far inside uint64_t (1e30 s
 * overflowed into a deadline in the past: a false timeout at once). */
#define COMM_TIMEOUT_MAX_S 1e8
static inline double comm_timeout_clamp(double s) {
    return s > COMM_TIMEOUT_MAX_S ? COMM_TIMEOUT_MAX_S : s;
}

typedef struct comm_backend comm_backend;
typedef struct comm_group comm_group;       /* defined by each backend */
typedef struct comm_wait_rec comm_wait_rec; /* watchdog.h */

/* Pseudo-collectives that take a sequence number too (beyond mtc_coll_t). */
enum { COMM_CALL_SPLIT = MTC_COLL_COUNT, COMM_CALL_CREATE, COMM_CALL_KIND_COUNT };

/* The call in progress on a group, as comm.c describes it to the backend. */
typedef struct comm_call {
    uint64_t seq;         /* per-communicator collective number, from 1; 0 for user p2p */
    int kind;             /* mtc_coll_t or COMM_CALL_* */
    int dtype;            /* mtc_dtype_t, -1 when not applicable */
    int op;               /* mtc_op_t, -1 when not applicable */
    int root;             /* -1 when not applicable; the peer for user p2p */
    size_t count;         /* elements (the per-rank count the caller passed) */
    uint64_t deadline_ns; /* absolute mtc_time_ns(); 0 = none */
    const char *group_name;
    int rank; /* caller's rank in the group */
} comm_call;

/* "all_reduce(count=1024, f32, sum)" - the text used in every report. */
void comm_call_describe(const comm_call *call, char *buf, size_t len);
/* 1 when two calls of the same seq agree (kind, count, dtype, op, root). */
int comm_call_same(const comm_call *a, const comm_call *b);

typedef struct comm_backend_ops {
    const char *name; /* "shm" / "mpi" */

    /* -- groups -- */
    mtc_result_t (*group_create)(comm_backend *be, comm_group *parent, int color, int key,
                                 const int *members, int n, int my_index, const comm_call *call,
                                 comm_group **out);
    void (*group_free)(comm_backend *be, comm_group *g);
    /* Optional: g's members' world ranks in member order, valid while g
     * lives; a communicator then keeps no copy of its own (thousands of
     * thread-ranks in world-sized groups would hold quadratic copies). */
    const int *(*group_members)(const comm_group *g);
    /* Optional: comm_split's exchange. Every member of g passes its (color,
     * key) and gets all members' pairs in member order (all: 2 * size ints),
     * in time linear in the group size. NULL: comm.c runs an all-gather. */
    mtc_result_t (*split_exchange)(comm_backend *be, comm_group *g, const int mine[2], int *all,
                                   const comm_call *call);

    /* -- point-to-point (blocking) -- */
    mtc_result_t (*send)(comm_backend *be, comm_group *g, int peer, uint32_t tag, const void *buf,
                         size_t bytes, const comm_call *call);
    mtc_result_t (*recv)(comm_backend *be, comm_group *g, int peer, uint32_t tag, void *buf,
                         size_t bytes, const comm_call *call);
    mtc_result_t (*sendrecv)(comm_backend *be, comm_group *g, int dst, uint32_t tag,
                             const void *sendbuf, size_t sendbytes, int src, void *recvbuf,
                             size_t recvbytes, const comm_call *call);

    /* -- diagnosis and failure -- */
    mtc_result_t (*enter)(comm_backend *be, comm_group *g, const comm_call *call);
    void (*leave)(comm_backend *be, comm_group *g, const comm_call *call);
    void (*abort)(comm_backend *be, mtc_result_t rc, const char *msg);

    /* -- native collectives (optional) -- */
    mtc_result_t (*barrier)(comm_backend *be, comm_group *g, const comm_call *call);
    mtc_result_t (*broadcast)(comm_backend *be, comm_group *g, void *buf, size_t count,
                              mtc_dtype_t dtype, int root, const comm_call *call);
    mtc_result_t (*reduce)(comm_backend *be, comm_group *g, const void *sendbuf, void *recvbuf,
                           size_t count, mtc_dtype_t dtype, mtc_op_t op, int root,
                           const comm_call *call);
    mtc_result_t (*all_reduce)(comm_backend *be, comm_group *g, const void *sendbuf, void *recvbuf,
                               size_t count, mtc_dtype_t dtype, mtc_op_t op, const comm_call *call);
    mtc_result_t (*reduce_scatter)(comm_backend *be, comm_group *g, const void *sendbuf,
                                   void *recvbuf, size_t recvcount, mtc_dtype_t dtype, mtc_op_t op,
                                   const comm_call *call);
    mtc_result_t (*all_gather)(comm_backend *be, comm_group *g, const void *sendbuf, void *recvbuf,
                               size_t sendcount, mtc_dtype_t dtype, const comm_call *call);
    mtc_result_t (*all_to_all)(comm_backend *be, comm_group *g, const void *sendbuf, void *recvbuf,
                               size_t count, mtc_dtype_t dtype, const comm_call *call);
} comm_backend_ops;

/* One per rank. Filled by the backend's constructor; read-only afterwards. */
struct comm_backend {
    const comm_backend_ops *ops;
    void *ctx; /* the backend's own state */
    int world_rank;
    int world_size;
    int node_count;    /* distinct node_of values */
    int shared_memory; /* 1: all ranks share one address space (shm: algo_direct works) */
    comm_group *world; /* the world group (members 0..world_size-1 in order) */
    int (*node_of)(const comm_backend *be, int world_rank);
    const char *(*host_of)(const comm_backend *be, int world_rank); /* NULL: no host names */
    comm_wait_rec *wait;            /* this rank's wait record (watchdog.h); owned by the backend */
    mtc_comm_abort_hook abort_hook; /* the launch's (mtc_launch_opts); NULL: none */
    void *abort_arg;
};

/* ---- constructors (called by launch.c) ---------------------------------- */

#ifdef MTC_HAVE_MPI
/* backend_mpi.c: MPI_Init_thread(MPI_THREAD_MULTIPLE) unless already
 * initialised, then this process's backend over MPI_COMM_WORLD.
 * ranks_per_node 0 = from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED).
 * finish waits, polling, for every rank to call it (a barrier on a private
 * communicator; aborts the job after 2 * timeout_s + 10 s). finalize frees
 * the backend and calls MPI_Finalize if init called MPI_Init. */
mtc_result_t comm_mpi_backend_init(const mtc_launch_opts *opts, comm_backend **out);
void comm_mpi_backend_finish(comm_backend *be, double timeout_s);
void comm_mpi_backend_finalize(comm_backend *be);
#endif

#endif
