/* comm/watchdog.h - what a waiting rank leaves for others to read, how a
 * wait backs off to sleeping, and the process-wide end of the line when a
 * job cannot end by returning (the watchdog's report and abort hook).
 *
 * Wait records: each rank (a thread-rank on shm, the process on mpi) owns
 * one comm_wait_rec (comm_backend.wait). A blocking wait fills it when it
 * leaves its fast path (after the first spin, so the common case costs
 * nothing) and clears it when the wait succeeds; a wait that timed out
 * keeps it, marked timed_out, so peers asking later still learn that this
 * rank was blocked waiting (and for whom) rather than taking it for the
 * rank that never arrived. Readers: timeout reports (shm reads a peer's
 * record directly; mpi asks the peer's watchdog thread, watch_mpi.c) and
 * the watchdogs (launch.c for shm, watch_mpi.c for mpi).
 *
 * Not a public header; the public settings are the launch's (comm.h
 * mtc_launch_opts: timeout_s, abort_hook). */
#ifndef MTC_COMM_WATCHDOG_H
#define MTC_COMM_WATCHDOG_H

#include <pthread.h>
#include <stdint.h>

#include "comm/backend.h"

/* How long after a deadline (or after the job failed) a rank may still be
 * busy before the watchdog declares it stuck and ends the job. */
#define COMM_WATCH_GRACE_S 3.0

struct comm_wait_rec {
    pthread_mutex_t mu;
    int depth;            /* waits in progress on this rank (a progress thread may wait too) */
    int timed_out;        /* the last wait ended in a timeout (kept until the next wait) */
    int exited;           /* the rank function returned ... */
    mtc_result_t exit_rc; /* ... with this result */
    comm_call call;       /* the call waited in; call.group_name points to name */
    char name[64];
    int peer_world; /* world rank waited for; -1 several / unknown */
    uint64_t since_ns;
};

void comm_wait_rec_init(comm_wait_rec *r);
void comm_wait_rec_destroy(comm_wait_rec *r);
/* The slow path of a wait starts / succeeds / ends with an error other
 * than a timeout (clear) / times out (kept, marked). NULL r: no-op. */
void comm_wait_begin(comm_wait_rec *r, const comm_call *call, int peer_world);
void comm_wait_end(comm_wait_rec *r);
void comm_wait_timed_out(comm_wait_rec *r);
void comm_wait_exited(comm_wait_rec *r, mtc_result_t rc);
/* A consistent copy (out->call.group_name points to out->name); returns
 * 1 when the rank is waiting or its last wait timed out. */
int comm_wait_read(comm_wait_rec *r, comm_wait_rec *out);
/* "waits in all_reduce(count=8, f32, sum) of WORLD (seq 3) for rank 2"
 * (or "... for its peers", "timed out in ...") from a copy. */
void comm_wait_describe(const comm_wait_rec *copy, char *buf, size_t len);

/* ---- backing off --------------------------------------------------------- */

/* A polling loop calls comm_backoff_pause after every poll that found
 * nothing: it returns at once for the first COMM_SPIN_NS (latency stays a
 * spin), then yields the core between polls for as long as the transfer
 * could legitimately take, then sleeps naps growing from 10 us to
 * COMM_NAP_MAX_NS, so a rank stuck waiting for seconds costs almost no CPU.
 * The busy phase is long (COMM_BUSY_NS + COMM_BUSY_NS_PER_BYTE per byte in
 * flight: 20 ms, 24 ms for 1 MB, 290 ms for 64 MB) because MPI moves data
 * only inside MPI calls: napping while a large collective runs stalls it
 * (1 MB MPI_Iallreduce on 2 ranks: 0.3 ms polled, 1.4-5 ms with naps from
 * 0.5 ms on). A blocking MPI call would spin all that time anyway. */
#define COMM_SPIN_NS 50000ull
#define COMM_BUSY_NS 20000000ull
#define COMM_BUSY_NS_PER_BYTE 4ull
#define COMM_NAP_MAX_NS 1000000ull
typedef struct {
    uint64_t t0;
    uint64_t nap_ns;
    uint64_t busy_ns;
    unsigned it;
} comm_backoff;
/* bytes: what the wait moves (0 for pure synchronisation). */
static inline void comm_backoff_init(comm_backoff *b, size_t bytes) {
    b->t0 = 0, b->nap_ns = 0, b->it = 0;
    b->busy_ns = COMM_BUSY_NS + (uint64_t)bytes * COMM_BUSY_NS_PER_BYTE;
}
void comm_backoff_pause(comm_backoff *b);
/* Process-wide: 1 when this process shares its cores with more ranks than
 * there are cores (mpi backend, oversubscription_check): the spin phase is
 * skipped and waits yield the core from the first poll, so the rank holding
 * the core can run the work being waited for. */
void comm_backoff_set_yield(int on);

/* ---- the end of the line --------------------------------------------------- */

/* Print the watchdog's report on stderr (once per process: later calls only
 * return), then call the launch's abort hook fn(rc, report, arg) if any. Returns if there
 * is no hook or the hook returns; the caller then ends the job its own way
 * (shm: launch returns without the stuck threads; mpi: MPI_Abort). */
void comm_watch_fire(mtc_result_t rc, const char *report, mtc_comm_abort_hook fn, void *arg);

#endif
