/* comm/shm.h - internals of the shm backend shared by backend_shm.c (world,
 * groups, p2p, waiting) and algo_direct.c (which reads peers' memory).
 *
 * All ranks are threads of one process, so a group is ONE object shared by
 * its members: per member it holds a p2p mailbox, a doorbell, the call board
 * (what the member is doing, for mismatch checks and timeout reports) and
 * the "direct" publication slots. Every field another thread reads is an
 * atomic; plain fields are written once before the object is shared.
 * Not a public header: only comm/ includes it. */
#ifndef MTC_COMM_SHM_H
#define MTC_COMM_SHM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "comm/backend.h"
#include "comm/watchdog.h"

/* A futex word that waiters sleep on after a short spin. */
typedef struct {
    _Atomic uint32_t seq;
    _Atomic uint32_t waiters;
} shm_event;

void shm_event_signal(shm_event *e);

typedef struct shm_world shm_world;

/* A posted send (lives on the sender's stack until it completes). */
typedef struct shm_msg {
    struct shm_msg *next;
    int src;
    uint32_t tag;
    const void *buf;
    size_t bytes;
    const comm_call *call;
    _Atomic int state; /* 0 posted, 1 taken (copy running), 2 done, 3 refused */
} shm_msg;

/* Board slot: the call a member entered, packed so readers use atomics. */
typedef struct {
    _Atomic uint64_t seq;
    _Atomic uint64_t sig; /* kind | dtype<<8 | op<<16 | (root+1)<<24 */
    _Atomic uint64_t count;
} shm_board_slot;
#define SHM_BOARD 4

/* What a member publishes for one direct collective (by epoch parity). */
typedef struct {
    _Atomic(const void *) sbuf;
    _Atomic(void *) rbuf;
    _Atomic(const size_t *) counts; /* v-variants: sendcounts / recvcounts */
    _Atomic(const size_t *) displs;
    _Atomic uint64_t sig;
    _Atomic uint64_t count;
} shm_pub;

/* The tiny-collective slot (algo_direct.c): the arrival tag, the call and
 * the data share one cache line, so a peer learns "arrived", checks the
 * call and reads the data with one line transfer (two when bytes > 40). */
typedef struct {
    _Atomic uint64_t tag; /* epoch of the last tiny collective in this slot */
    _Atomic uint64_t sig;
    _Atomic uint64_t count;
    unsigned char data[104]; /* written before tag (release), read after it (acquire) */
} __attribute__((aligned(64))) shm_line;
#define SHM_LINE_DATA 104u

typedef struct {
    /* p2p mailbox: sends posted to this member */
    pthread_mutex_t lock;
    shm_msg *head, *tail;
    _Atomic uint32_t posted;
    shm_event bell; /* rung when a message for me is posted or mine completes */
    /* call board */
    _Atomic uint64_t entered, left;
    shm_board_slot board[SHM_BOARD];
    /* direct algorithm and backend-internal syncs */
    _Atomic uint64_t arrive; /* epoch * 4 + phase */
    uint64_t epoch;          /* owner-only: direct collectives run so far */
    shm_pub pub[2];
    char *small;      /* owner-allocated, 2 x SHM_SMALL bytes, fixed */
    shm_line line[2]; /* tiny collectives, by epoch parity */
    /* split exchange: the new group this member leads, read by its members,
     * and the set-up syncs it has passed */
    _Atomic(struct comm_group *) xchg;
    uint64_t syncs; /* owner-only */
} __attribute__((aligned(64))) shm_member;

/* Bytes a member can stage in its `small` block per collective. */
#define SHM_SMALL (32u << 10)

struct comm_group {
    shm_world *w;
    int n;
    int *members; /* world ranks */
    uint32_t id;
    _Atomic int refs;
    shm_event ev;            /* rung when a phase completes (shm_arrive) and on direct lines */
    _Atomic uint64_t synced; /* shm_sync_all arrivals so far */
    /* per arrival target (mod SHM_DONE_SLOTS): target << SHM_DONE_BITS | how
     * many members from index 0 up are known to have arrived there */
    _Atomic uint64_t done[8];
    int *split_ck;         /* (color, key) of every member, 2n, dense: read whole by each */
    _Atomic int err_state; /* 0 none, 1 being written, 2 set */
    mtc_result_t err_rc;
    char err_msg[1024];
    shm_member *m;
};

/* ---- world ---------------------------------------------------------------- */

struct shm_world {
    int n, ranks_per_node;
    int spin_iters, yield_iters; /* how long a wait spins / yields before sleeping */
    _Atomic int fail_state;      /* 0 none, 1 being written, 2 set */
    int failed_rank;
    mtc_result_t failed_rc;
    char failed_msg[1024];
    _Atomic int *exited;  /* per world rank */
    comm_wait_rec *waits; /* per world rank (watchdog.h) */
    _Atomic uint32_t next_id;
    comm_backend *be; /* per world rank */
    comm_group *world;
};

mtc_result_t comm_shm_world_create(int n, int ranks_per_node, int oversubscribed,
                                   const mtc_shm_tuning *tuning, shm_world **out);
void comm_shm_world_free(shm_world *w);
/* The backend of rank r (valid until the world is freed). */
comm_backend *comm_shm_backend(shm_world *w, int r);
/* Mark rank r as returned from its rank function (for timeout reports). */
void comm_shm_rank_exited(shm_world *w, int r, mtc_result_t rc);
/* The first abort: 1 and its rank/code/message, or 0. */
int comm_shm_first_failure(shm_world *w, int *rank, mtc_result_t *rc, const char **msg);
/* What world rank r is doing, for the watchdog: "waits in X of G (seq s)
 * for ..." or "is outside the communication layer (last in WORLD: ...)". */
void shm_describe_rank(shm_world *w, int r, char *buf, size_t len);

/* ---- waiting (used by algo_direct.c too) --------------------------------- */

/* Conditions must be idempotent: shm_wait may evaluate one again after it
 * returned 1. */
typedef int (*shm_cond_fn)(void *arg);
/* Wait until cond(arg): spin briefly, then sleep on ev; fails on deadline,
 * abort, or a group error/mismatch. `who` names the member waited for
 * (-1: several; the report then lists everyone). */
mtc_result_t shm_wait(comm_group *g, int me, shm_event *ev, shm_cond_fn cond, void *arg,
                      const comm_call *call, int who);
/* Record a sticky group error (first one wins) and return the recorded one. */
mtc_result_t shm_group_fail(comm_group *g, mtc_result_t rc, const char *msg);
/* Arrive at (epoch, phase) and ring the group event. */
void shm_arrive(comm_group *g, int me, uint64_t epoch, int phase);
/* Wait until every member has arrived at (epoch, phase) or later. */
mtc_result_t shm_wait_all(comm_group *g, int me, uint64_t epoch, int phase, const comm_call *call);
/* A barrier over every member for group set-up (split, create): one shared
 * counter, and only the last arriver rings the group event, so its cost is
 * linear in the group size (shm_arrive wakes every sleeper on every
 * arrival, quadratic over a barrier of thousands of rank-threads). Every
 * member calls it the same number of times; after an error the group is not
 * used again. */
mtc_result_t shm_sync_all(comm_group *g, int me, const comm_call *call);
/* Wait until member `who` has arrived at (epoch, phase) or later. */
mtc_result_t shm_wait_one(comm_group *g, int me, int who, uint64_t epoch, int phase,
                          const comm_call *call);
uint64_t shm_pack_sig(const comm_call *call);
/* World abort or sticky group error, as a result (MTC_OK when healthy). */
mtc_result_t shm_check_health(comm_group *g, int me);
/* Record "collective mismatch in G (seq s): rank a called X but rank b called Y". */
mtc_result_t shm_mismatch(comm_group *g, int a, const comm_call *ca, int b, const comm_call *cb);
void shm_board_enter(comm_group *g, int me, const comm_call *call);
void shm_board_leave(comm_group *g, int me, const comm_call *call);
/* Check member `who`'s publication for this epoch against my call. */
mtc_result_t shm_check_pub(comm_group *g, int me, int who, uint64_t epoch, const comm_call *call);
/* Check a signature/count member `who` published against my call. */
mtc_result_t shm_check_sig(comm_group *g, int me, int who, uint64_t sig, uint64_t count,
                           const comm_call *call);
/* My staging block (2 x SHM_SMALL, allocated at first use, kept). */
mtc_result_t shm_member_small(comm_group *g, int me, char **out);

#endif
