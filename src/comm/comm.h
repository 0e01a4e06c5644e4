/* comm/comm.h - the communication library: communicators, point-to-point,
 * collectives (blocking and non-blocking), and starting a world of ranks.
 *
 * NCCL-shaped: an opaque mtc_comm_t; collectives take
 * (sendbuf, recvbuf, count, dtype, op, comm) and run in place when the two
 * buffers are equal (for reduce_scatter / all_gather: when the rank's own
 * block of the large buffer is the small one, as in NCCL).
 *
 * Backends: "shm" (ranks are threads of one process) and "mpi" (one process
 * per rank; built when MPI is found). Algorithms are written once over the
 * backend's point-to-point operations (comm/algo_*.c); comm/select.c picks
 * one per call from an alpha-beta model unless forced (mtc_comm_set_algo,
 * MTC_COMM_ALGO, --comm-algo).
 *
 * Ordering: operations on one communicator complete in the order each rank
 * issued them. A blocking call made while non-blocking ones are pending on
 * the same communicator runs after them. Different communicators are
 * independent. Every rank of a communicator must issue the same sequence of
 * collectives; each carries a sequence number and a signature (operation,
 * count, dtype, op, root) and a rank whose call differs from its peers' gets
 * MTC_ERR_INVALID_USAGE naming both ranks, the group and both calls.
 * A peer that does not arrive within the timeout (the launch's
 * mtc_launch_opts.timeout_s, else 300 s; per communicator
 * mtc_comm_set_timeout) gives MTC_ERR_TIMEOUT with a report of who waits in
 * which call, naming the rank that never arrived as the cause (or saying
 * that the peer waited for is itself blocked and reports the cause); a
 * watchdog ends jobs that cannot end by returning (see below). Details are
 * in mtc_error_detail().
 *
 * Determinism: the same inputs, group and algorithm give bitwise identical
 * results on every rank and every run (reductions happen in a fixed order
 * and every rank ends with the same bits).
 *
 * Counts are in elements. Thread-safety: a communicator is used by its one
 * rank (thread or process); different ranks' handles are independent. */
#ifndef MTC_COMM_COMM_H
#define MTC_COMM_COMM_H

#include <stddef.h>

#include "core/dtype.h"
#include "core/result.h"

typedef struct mtc_comm *mtc_comm_t;
typedef struct mtc_request *mtc_request_t;

typedef enum { MTC_OP_SUM = 0, MTC_OP_MAX, MTC_OP_MIN, MTC_OP_AVG, MTC_OP_COUNT } mtc_op_t;

typedef enum {
    MTC_COLL_SEND = 0,
    MTC_COLL_RECV,
    MTC_COLL_SENDRECV,
    MTC_COLL_BARRIER,
    MTC_COLL_BROADCAST,
    MTC_COLL_REDUCE,
    MTC_COLL_ALL_REDUCE,
    MTC_COLL_REDUCE_SCATTER,
    MTC_COLL_ALL_GATHER,
    MTC_COLL_ALL_TO_ALL,
    MTC_COLL_REDUCE_SCATTER_V,
    MTC_COLL_ALL_GATHER_V,
    MTC_COLL_ALL_TO_ALL_V,
    MTC_COLL_COUNT
} mtc_coll_t;

typedef enum {
    MTC_ALGO_AUTO = 0, /* the selector decides */
    MTC_ALGO_RING,
    MTC_ALGO_TREE,         /* binary / double binary tree */
    MTC_ALGO_RECDBL,       /* recursive doubling */
    MTC_ALGO_RABENSEIFNER, /* reduce-scatter then all-gather */
    MTC_ALGO_DIRECT,       /* ranks read each other's buffers (shm only) */
    MTC_ALGO_HIER,         /* intra-node then inter-node */
    MTC_ALGO_NATIVE,       /* the MPI library's own collective (mpi only) */
    MTC_ALGO_PAIRWISE,     /* pairwise exchange (all-to-all) */
    MTC_ALGO_COUNT
} mtc_algo_t;

const char *mtc_op_name(mtc_op_t op);       /* "sum" */
const char *mtc_coll_name(mtc_coll_t coll); /* "all_reduce" */
const char *mtc_algo_name(mtc_algo_t algo); /* "ring" */
int mtc_op_parse(const char *s);            /* -1 when unknown */
int mtc_coll_parse(const char *s);
int mtc_algo_parse(const char *s);

/* ---- starting ranks ---------------------------------------------------- */

typedef enum { MTC_BACKEND_AUTO = 0, MTC_BACKEND_SHM, MTC_BACKEND_MPI } mtc_backend_kind_t;

typedef void (*mtc_comm_abort_hook)(mtc_result_t rc, const char *report, void *arg);

/* How shm rank-threads wait for each other, for measurements (not a user
 * interface): spins, then yields, then sleeps; each < 0 keeps the measured
 * default. */
typedef struct {
    int spin_iters, yield_iters;
} mtc_shm_tuning;

/* Everything a launch is configured by: the library reads no environment
 * (cli/cli_env.c maps MTC_COMM_ALGO, MTC_COMM_TIMEOUT, MTC_SHM_SPIN,
 * MTC_SHM_YIELD and MTC_COMM_CHECK onto these fields). */
typedef struct {
    mtc_backend_kind_t backend; /* AUTO: mpi when started by an MPI launcher, else shm */
    int world_size;             /* shm: number of rank-threads (>= 1); mpi: ignored */
    int ranks_per_node;         /* 0: from the MPI library (mpi) or all ranks (shm) */
    double timeout_s;           /* every call's deadline in seconds (inf: none); 0: 300 s */
    const char *algo_spec; /* NULL: the selector's; "ring" or "all_reduce=ring,all_gather=direct" */
    int pin_threads;       /* shm: pin rank-threads to cores when ranks <= cores (-1 auto) */
    mtc_comm_abort_hook abort_hook; /* the watchdog's last call (below); NULL: none */
    void *abort_arg;
    const mtc_shm_tuning *shm_tuning; /* shm: NULL = the measured defaults */
    int no_comm_check; /* mpi: skip the per-call signature exchange (one all-reduce less) */
} mtc_launch_opts;

/* Each rank runs fn(world, arg) with its own world communicator; the return
 * value is the rank's result. Launch returns when every rank has returned:
 * MTC_OK if all succeeded, else the first failing rank's code (its detail is
 * copied to the caller's mtc_error_detail). When a rank fails, peers waiting
 * for it stop with MTC_ERR_REMOTE instead of waiting for the timeout. */
typedef mtc_result_t (*mtc_rank_fn)(mtc_comm_t world, void *arg);
mtc_result_t mtc_launch(const mtc_launch_opts *opts, mtc_rank_fn fn, void *arg);

/* Most ranks the shm backend runs as threads of one process (an MPI job's
 * world is bounded by the grid's MTC_GRID_MAX_WORLD instead). */
#define MTC_LAUNCH_MAX_THREAD_RANKS 4096

/* 1 when this process was started by mpirun/mpiexec/srun (rank variables set). */
int mtc_launched_by_mpi(void);

/* What the launcher's environment says about this process. */
typedef enum {
    MTC_LAUNCHER_NONE = 0, /* a plain process: ranks are its threads */
    MTC_LAUNCHER_MPI,      /* Open MPI / MPICH / PMIx rank variables */
    MTC_LAUNCHER_TORCHRUN, /* RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE */
    MTC_LAUNCHER_SLURM,    /* SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID (srun without MPI) */
} mtc_launcher_kind;

typedef struct {
    mtc_launcher_kind kind;
    const char *name; /* "mpirun", "torchrun", "srun" or "none" */
    int world, rank;  /* from the variables (1, 0 when none) */
    int local_world;  /* processes on this node (0 when unknown) */
} mtc_launcher_env;

/* Reads the environment (MPI variables win over torchrun's and Slurm's,
 * since mpirun under Slurm sets both). INVALID_ARGUMENT, with a line naming
 * the variable, when a rank variable is not a number in range. */
mtc_result_t mtc_launcher_detect(mtc_launcher_env *out);

/* ---- deadlines and the watchdog ------------------------------------------ */

/* Every wait of every collective and point-to-point call, on both backends
 * and for every algorithm (MPI's own collectives included: they run as
 * MPI_I* requests polled against the deadline), ends with MTC_ERR_TIMEOUT
 * and a report when the launch's timeout_s passes.
 *
 * The watchdog (one per launch: the launching thread on shm, a thread of
 * its own on mpi) ends a job that cannot end by returning: on shm, a rank
 * thread that has not returned COMM_WATCH_GRACE_S (3 s) after the job failed
 * (e.g. stuck outside the communication layer while its peers timed out
 * waiting for it); on mpi, a rank blocked past its deadline + 3 s. It prints
 * "mtc: watchdog: ..." naming the stuck rank, the group, call and sequence
 * number its peers waited in, then calls the launch's abort hook. The hook
 * must end the process (the CLI's calls exit()/_exit(); library code never
 * does). Without a hook, or if it returns: shm's mtc_launch returns the
 * failure without joining the stuck threads (they, the world and `arg` are
 * left alone, so the caller should end the process soon); mpi calls
 * MPI_Abort. The report text is valid during the call. */

/* ---- communicators ----------------------------------------------------- */

int mtc_comm_rank(mtc_comm_t comm);
int mtc_comm_size(mtc_comm_t comm);
/* Rank in the world communicator of member r of comm. */
int mtc_comm_world_rank(mtc_comm_t comm, int r);
const char *mtc_comm_name(mtc_comm_t comm);
const char *mtc_comm_backend_name(mtc_comm_t comm); /* "shm" or "mpi" */
/* Members on this rank's node / number of nodes spanned (for hierarchical). */
int mtc_comm_local_size(mtc_comm_t comm);
int mtc_comm_node_count(mtc_comm_t comm);
/* Node of member r of comm: its index among the world's nodes (numbered by
 * their lowest world rank; shm: fake nodes of ranks_per_node threads), and
 * its host's name (mpi: MPI_Get_processor_name; NULL on shm). */
int mtc_comm_node_of(mtc_comm_t comm, int r);
const char *mtc_comm_host_of(mtc_comm_t comm, int r);

/* Collective over parent: ranks with the same color form a communicator,
 * ordered by (key, parent rank). color < 0 gives *out = NULL. `name` labels
 * the group in errors ("TENSOR_MODEL_PARALLEL_GROUP"). */
mtc_result_t mtc_comm_split(mtc_comm_t parent, int color, int key, const char *name,
                            mtc_comm_t *out);
/* Collective over parent: the communicator of the listed parent ranks, in
 * list order; every parent rank passes the same list; non-members get NULL. */
mtc_result_t mtc_comm_create(mtc_comm_t parent, const int *ranks, int n, const char *name,
                             mtc_comm_t *out);
/* Not collective; NULL is a no-op. The world communicator is freed by launch,
 * together with every communicator of the rank still not freed when its
 * rank function returns (newest first). */
void mtc_comm_free(mtc_comm_t comm);

/* Per-communicator settings (local to the calling rank; all ranks of the
 * communicator must set the same algorithm). A forced algorithm that cannot
 * run on the communicator (direct on mpi, hier on one node, native without
 * MPI, or one that does not implement the operation) makes the call fail
 * with MTC_ERR_INVALID_ARGUMENT naming the valid choices; no silent
 * fallback. (The bare MTC_COMM_ALGO / algo_spec form "ring" is a preference:
 * it applies where it can run and leaves the selector elsewhere.)
 * Sub-communicators inherit their parent's settings. */
void mtc_comm_set_algo(mtc_comm_t comm, mtc_coll_t coll, mtc_algo_t algo);
mtc_algo_t mtc_comm_get_algo(mtc_comm_t comm, mtc_coll_t coll);
void mtc_comm_set_timeout(mtc_comm_t comm, double seconds);
/* Record every collective and point-to-point call of this rank (on any of
 * its communicators, blocking or not) in `trace` (core/trace.h): spans with
 * operation, group, bytes, algorithm and bus bandwidth while its window is
 * open, flow arrows from each send to the matching receive (the n-th send
 * from a to b on a communicator pairs with b's n-th receive from a, so every
 * rank of the job must attach a recorder for the same calls), and per-group
 * totals always. Local; comm may be any communicator of the rank (it is set
 * on its world). NULL detaches; off costs one pointer test per call. The
 * recorder must outlive the calls. */
struct mtc_trace;
void mtc_comm_set_trace(mtc_comm_t comm, struct mtc_trace *trace);
/* The algorithm AUTO resolves to for this call shape (for reports/benchmarks). */
mtc_algo_t mtc_comm_choose(mtc_comm_t comm, mtc_coll_t coll, size_t count, mtc_dtype_t dtype);

/* ---- point-to-point ---------------------------------------------------- */

/* Blocking; matched in order per (sender, receiver, communicator). On shm
 * mtc_send is synchronous (returns once the receiver has copied the data,
 * like MPI_Ssend), so two ranks that both send first deadlock: use
 * mtc_sendrecv for exchanges. Sizes of a matched pair must be equal. */
mtc_result_t mtc_send(const void *buf, size_t count, mtc_dtype_t dtype, int peer, mtc_comm_t comm);
mtc_result_t mtc_recv(void *buf, size_t count, mtc_dtype_t dtype, int peer, mtc_comm_t comm);
/* Send to dst and receive from src at once (deadlock-free for rings). */
mtc_result_t mtc_sendrecv(const void *sendbuf, size_t sendcount, int dst, void *recvbuf,
                          size_t recvcount, int src, mtc_dtype_t dtype, mtc_comm_t comm);

/* ---- collectives --------------------------------------------------------- */

mtc_result_t mtc_barrier(mtc_comm_t comm);
/* buf of count elements: root's values end on every rank. */
mtc_result_t mtc_broadcast(void *buf, size_t count, mtc_dtype_t dtype, int root, mtc_comm_t comm);
/* recvbuf significant on root only (may be NULL elsewhere). */
mtc_result_t mtc_reduce(const void *sendbuf, void *recvbuf, size_t count, mtc_dtype_t dtype,
                        mtc_op_t op, int root, mtc_comm_t comm);
mtc_result_t mtc_all_reduce(const void *sendbuf, void *recvbuf, size_t count, mtc_dtype_t dtype,
                            mtc_op_t op, mtc_comm_t comm);
/* sendbuf: size*recvcount elements; recvbuf: recvcount; rank r gets block r
 * of the reduction. In place when recvbuf == sendbuf + r*recvcount. */
mtc_result_t mtc_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                mtc_dtype_t dtype, mtc_op_t op, mtc_comm_t comm);
/* sendbuf: sendcount; recvbuf: size*sendcount, block r from rank r.
 * In place when sendbuf == recvbuf + r*sendcount. */
mtc_result_t mtc_all_gather(const void *sendbuf, void *recvbuf, size_t sendcount, mtc_dtype_t dtype,
                            mtc_comm_t comm);
/* sendbuf: size*count, block j goes to rank j; recvbuf: size*count, block j
 * came from rank j. Not in place. */
mtc_result_t mtc_all_to_all(const void *sendbuf, void *recvbuf, size_t count, mtc_dtype_t dtype,
                            mtc_comm_t comm);
/* Uneven counts. Blocks are packed (displacement of block j = sum of counts
 * before it) unless displs are given (NULL = packed). */
mtc_result_t mtc_reduce_scatter_v(const void *sendbuf, void *recvbuf, const size_t *recvcounts,
                                  mtc_dtype_t dtype, mtc_op_t op, mtc_comm_t comm);
mtc_result_t mtc_all_gather_v(const void *sendbuf, size_t sendcount, void *recvbuf,
                              const size_t *recvcounts, const size_t *displs, mtc_dtype_t dtype,
                              mtc_comm_t comm);
mtc_result_t mtc_all_to_all_v(const void *sendbuf, const size_t *sendcounts, const size_t *sdispls,
                              void *recvbuf, const size_t *recvcounts, const size_t *rdispls,
                              mtc_dtype_t dtype, mtc_comm_t comm);

/* ---- non-blocking ------------------------------------------------------ */

/* Start the collective and return at once; the buffers must stay untouched
 * until the request completes. The caller may compute meanwhile. */
mtc_result_t mtc_all_reduce_start(const void *sendbuf, void *recvbuf, size_t count,
                                  mtc_dtype_t dtype, mtc_op_t op, mtc_comm_t comm,
                                  mtc_request_t *req);
mtc_result_t mtc_reduce_scatter_start(const void *sendbuf, void *recvbuf, size_t recvcount,
                                      mtc_dtype_t dtype, mtc_op_t op, mtc_comm_t comm,
                                      mtc_request_t *req);
mtc_result_t mtc_all_gather_start(const void *sendbuf, void *recvbuf, size_t sendcount,
                                  mtc_dtype_t dtype, mtc_comm_t comm, mtc_request_t *req);
/* The count and displacement arrays, like the buffers, must stay untouched
 * until the request completes. With counts only to and from neighbours it is
 * a non-blocking exchange (the context-parallel ring uses it so). */
mtc_result_t mtc_all_to_all_v_start(const void *sendbuf, const size_t *sendcounts,
                                    const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                                    const size_t *rdispls, mtc_dtype_t dtype, mtc_comm_t comm,
                                    mtc_request_t *req);
/* Wait for completion and release the request (*req becomes NULL);
 * returns the collective's result. NULL request: MTC_OK. */
mtc_result_t mtc_request_wait(mtc_request_t *req);
/* *done = 1 when complete (then wait returns at once). */
mtc_result_t mtc_request_test(mtc_request_t req, int *done);

#endif
