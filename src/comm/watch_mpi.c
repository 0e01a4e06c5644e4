/* comm/watch_mpi.c - the mpi backend's watchdog: one thread per process
 * that (1) answers peers asking what this rank is doing, and (2) ends the
 * job when this rank stays blocked past its deadline + COMM_WATCH_GRACE_S
 * (a wait that did not end by itself, e.g. inside an MPI call that has no
 * deadline): report on stderr, the abort hook, then MPI_Abort.
 *
 * Why ask: a rank whose wait times out knows whom it waited for, not why.
 * Asking that peer tells a rank blocked waiting itself (not the cause: its
 * own report names the cause) from one that is not in any mtc call (the
 * cause: it never arrived) and from one that does not answer at all
 * (stopped, gone, or hung hard: the cause too). When every peer asked is
 * blocked, the one it waits for is asked in turn (up to 4 hops), so even a
 * rank whose neighbours are all blocked names the rank at the end of the
 * chain. A rank that returned with an error is ending the job for its own
 * reason and is not blamed.
 *
 *   asker (timed out)                 peer's watchdog thread
 *   Isend(query, tag Q) ------------> Irecv(ANY_SOURCE, tag Q) polled every 5 ms
 *   Irecv(answer, tag A) <----------- Isend(its wait record, tag A)
 *   poll <= WATCH_ASK_NS; no answer = "does not answer"
 *
 * Relies on MPI_THREAD_MULTIPLE and a private duplicate of MPI_COMM_WORLD
 * (so nothing here matches a collective's messages), and on the wait
 * record (watchdog.h) the backend's waits keep.
 *
 * A rank that ends the job (its rank function failed, or it is stuck)
 * first sends every other rank a farewell (tag F: its result) and waits
 * briefly for the sends to complete: MPI_Abort kills the processes a while
 * later, and a peer that times out meanwhile and asks a rank already gone
 * would otherwise get no answer and blame it. An asker takes a farewell as
 * the answer "has failed already"; it is kept (W.gone), so a later ask of
 * the same rank sees it too. Limitations: a peer whose
 * answer takes longer than WATCH_ASK_NS (a heavily loaded node) is called
 * unresponsive; one process has one mpi backend, so the state is static. */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/coll_mpi.h"
#include "comm/watchdog.h"
#include "core/timer.h"

#define TAG_Q 11
#define TAG_A 12
#define TAG_F 13
#define WATCH_POLL_NS (5ull * 1000 * 1000)
#define WATCH_ASK_NS (700ull * 1000 * 1000)
#define WATCH_FAREWELL_NS (300ull * 1000 * 1000)
#define WATCH_MAGIC 0x6d7463

enum { ANS_RUNNING = 0, ANS_WAITING, ANS_TIMED_OUT, ANS_RETURNED };

typedef struct {
    int64_t state, seq, kind, dtype, op, root, count, peer_world, age_ms;
    char name[64];
} watch_answer;

static struct {
    MPI_Comm comm;
    comm_backend *be;
    pthread_t thread;
    atomic_int stop, running;
    int n;
    watch_answer *ans; /* one outgoing answer per asking rank */
    MPI_Request *areq; /* its send */
    int query[2];      /* what this rank sends when it asks */
    int *gone;         /* per world rank: its farewell's result, 0 while none came */
} W = {.comm = MPI_COMM_NULL};

static void fill_answer(watch_answer *a) {
    comm_wait_rec rec;
    int busy = comm_wait_read(W.be->wait, &rec);
    memset(a, 0, sizeof *a);
    a->state = rec.exited      ? ANS_RETURNED
               : !busy         ? ANS_RUNNING
               : rec.depth > 0 ? ANS_WAITING
                               : ANS_TIMED_OUT;
    a->seq = (int64_t)rec.call.seq;
    a->kind = rec.call.kind, a->dtype = rec.call.dtype, a->op = rec.call.op;
    a->root = rec.exited ? (int64_t)rec.exit_rc : rec.call.root; /* the result once returned */
    a->count = (int64_t)rec.call.count;
    a->peer_world = rec.peer_world;
    a->age_ms = rec.since_ns ? (int64_t)((mtc_time_ns() - rec.since_ns) / 1000000) : 0;
    memcpy(a->name, rec.name, sizeof a->name);
    a->name[sizeof a->name - 1] = 0;
}

/* This rank blocked in one wait past its deadline + grace: end the job. */
static void check_self(void) {
    comm_wait_rec rec;
    if (!comm_wait_read(W.be->wait, &rec) || rec.depth == 0 || !rec.call.deadline_ns) return;
    uint64_t now = mtc_time_ns();
    if (now < rec.call.deadline_ns + (uint64_t)(COMM_WATCH_GRACE_S * 1e9)) return;
    char d[240], report[600];
    comm_wait_describe(&rec, d, sizeof d);
    snprintf(report, sizeof report,
             "rank %d%s is stuck: it %s, %.0f s past the deadline, in a wait that did not end by "
             "itself; aborting the MPI job",
             W.be->world_rank, comm_mpi_host_note(W.be->world_rank), d, COMM_WATCH_GRACE_S);
    comm_mpi_watch_farewell(MTC_ERR_TIMEOUT);
    comm_watch_fire(MTC_ERR_TIMEOUT, report, W.be->abort_hook, W.be->abort_arg);
    MPI_Abort(MPI_COMM_WORLD, (int)MTC_ERR_TIMEOUT);
}

static void *watch_main(void *arg) {
    (void)arg;
    int q[2];
    MPI_Request qreq = MPI_REQUEST_NULL;
    if (MPI_Irecv(q, 2, MPI_INT, MPI_ANY_SOURCE, TAG_Q, W.comm, &qreq) != MPI_SUCCESS) return NULL;
    while (!atomic_load(&W.stop)) {
        int done = 0;
        MPI_Status st;
        if (MPI_Test(&qreq, &done, &st) != MPI_SUCCESS) break;
        if (done) {
            int src = st.MPI_SOURCE;
            if (q[0] == WATCH_MAGIC && src >= 0 && src < W.n) {
                if (W.areq[src] != MPI_REQUEST_NULL) MPI_Wait(&W.areq[src], MPI_STATUS_IGNORE);
                fill_answer(&W.ans[src]);
                MPI_Isend(&W.ans[src], (int)sizeof W.ans[src], MPI_BYTE, src, TAG_A, W.comm,
                          &W.areq[src]);
            }
            if (MPI_Irecv(q, 2, MPI_INT, MPI_ANY_SOURCE, TAG_Q, W.comm, &qreq) != MPI_SUCCESS)
                break;
            continue; /* several askers at once: answer them all before napping */
        }
        check_self();
        struct timespec nap = {0, (long)WATCH_POLL_NS};
        nanosleep(&nap, NULL);
    }
    if (qreq != MPI_REQUEST_NULL) {
        MPI_Cancel(&qreq);
        MPI_Wait(&qreq, MPI_STATUS_IGNORE);
    }
    return NULL;
}

mtc_result_t comm_mpi_watch_start(comm_backend *be) {
    if (W.comm != MPI_COMM_NULL) return MTC_OK;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &W.comm) != MPI_SUCCESS)
        return mtc_error(MTC_ERR_SYSTEM, "mpi backend: MPI_Comm_dup for the watchdog failed");
    MPI_Comm_set_errhandler(W.comm, MPI_ERRORS_RETURN);
    W.be = be;
    W.n = be->world_size;
    W.query[0] = WATCH_MAGIC, W.query[1] = be->world_rank;
    W.ans = calloc((size_t)W.n, sizeof *W.ans);
    W.areq = malloc((size_t)W.n * sizeof *W.areq);
    W.gone = calloc((size_t)W.n, sizeof *W.gone);
    if (!W.ans || !W.areq || !W.gone) {
        comm_mpi_watch_stop();
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "mpi backend: no memory for the watchdog");
    }
    for (int i = 0; i < W.n; i++)
        W.areq[i] = MPI_REQUEST_NULL;
    atomic_store(&W.stop, 0);
    if (pthread_create(&W.thread, NULL, watch_main, NULL) != 0) {
        comm_mpi_watch_stop();
        return mtc_error(MTC_ERR_SYSTEM, "mpi backend: cannot start the watchdog thread");
    }
    atomic_store(&W.running, 1);
    return MTC_OK;
}

void comm_mpi_watch_stop(void) {
    if (atomic_exchange(&W.running, 0)) {
        atomic_store(&W.stop, 1);
        pthread_join(W.thread, NULL);
    }
    if (W.areq)
        for (int i = 0; i < W.n; i++)
            if (W.areq[i] != MPI_REQUEST_NULL) MPI_Request_free(&W.areq[i]);
    free(W.ans);
    free(W.areq);
    free(W.gone);
    W.ans = NULL;
    W.areq = NULL;
    W.gone = NULL;
    if (W.comm != MPI_COMM_NULL) MPI_Comm_free(&W.comm);
    W.comm = MPI_COMM_NULL;
}

/* Tell every other rank this one is ending the job with rc; wait up to
 * WATCH_FAREWELL_NS for the sends to leave (small messages: eager). */
void comm_mpi_watch_farewell(mtc_result_t rc) {
    static int note[3]; /* outlives a send we stop waiting for */
    if (W.comm == MPI_COMM_NULL || rc == MTC_OK) return;
    MPI_Request *req = malloc((size_t)W.n * sizeof *req);
    if (!req) return;
    note[0] = WATCH_MAGIC, note[1] = (int)rc, note[2] = W.be->world_rank;
    for (int i = 0; i < W.n; i++) {
        req[i] = MPI_REQUEST_NULL;
        if (i != W.be->world_rank) MPI_Isend(note, 3, MPI_INT, i, TAG_F, W.comm, &req[i]);
    }
    uint64_t t0 = mtc_time_ns();
    int done = 0;
    while (!done && mtc_time_ns() - t0 < WATCH_FAREWELL_NS) {
        if (MPI_Testall(W.n, req, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) break;
        if (!done) {
            struct timespec nap = {0, 1000000L};
            nanosleep(&nap, NULL);
        }
    }
    for (int i = 0; i < W.n; i++)
        if (req[i] != MPI_REQUEST_NULL) MPI_Request_free(&req[i]);
    free(req);
}

/* World rank w's farewell, if one came: its result (nonzero), else 0. */
static int farewell_of(int w) {
    if (W.gone[w]) return W.gone[w];
    int flag = 0, note[3];
    if (MPI_Iprobe(w, TAG_F, W.comm, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag &&
        MPI_Recv(note, 3, MPI_INT, w, TAG_F, W.comm, MPI_STATUS_IGNORE) == MPI_SUCCESS &&
        note[0] == WATCH_MAGIC && note[1] != MTC_OK)
        W.gone[w] = note[1];
    return W.gone[w];
}

/* ---- asking ------------------------------------------------------------------ */

/* Ask world ranks world[0..n) at once; got[i] = 1 when rank i answered
 * within WATCH_ASK_NS. */
static void ask(const int *world, int n, watch_answer *ans, int *got) {
    MPI_Request *req = malloc(2 * (size_t)n * sizeof *req);
    if (!req) {
        memset(got, 0, (size_t)n * sizeof *got);
        return;
    }
    for (int i = 0; i < n; i++) {
        req[i] = req[n + i] = MPI_REQUEST_NULL;
        MPI_Irecv(&ans[i], (int)sizeof ans[i], MPI_BYTE, world[i], TAG_A, W.comm, &req[i]);
        /* W.query outlives a send we stop waiting for */
        MPI_Isend(W.query, 2, MPI_INT, world[i], TAG_Q, W.comm, &req[n + i]);
    }
    uint64_t t0 = mtc_time_ns();
    comm_backoff bo;
    comm_backoff_init(&bo, 0);
    for (int left = n; left > 0 && mtc_time_ns() - t0 < WATCH_ASK_NS;) {
        for (int i = 0; i < n; i++) {
            int done = 0;
            if (req[i] == MPI_REQUEST_NULL) continue;
            if (MPI_Test(&req[i], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done)
                left--;
            else if (farewell_of(world[i])) { /* it ends the job: answered below */
                MPI_Cancel(&req[i]);
                MPI_Wait(&req[i], MPI_STATUS_IGNORE);
                left--;
            }
        }
        if (left) comm_backoff_pause(&bo);
    }
    for (int i = 0; i < n; i++) {
        got[i] = req[i] == MPI_REQUEST_NULL;
        if (!got[i]) {
            MPI_Cancel(&req[i]);
            MPI_Wait(&req[i], MPI_STATUS_IGNORE);
        }
        int rc = farewell_of(world[i]); /* it ends the job: that is its answer */
        if (rc) {
            memset(&ans[i], 0, sizeof ans[i]);
            ans[i].state = ANS_RETURNED, ans[i].root = rc, got[i] = 1;
        }
        if (req[n + i] != MPI_REQUEST_NULL) MPI_Request_free(&req[n + i]);
    }
    free(req);
}

static void append(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t len, const char *fmt, ...) {
    size_t off = strlen(buf);
    if (off + 1 >= len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + off, len - off, fmt, ap);
    va_end(ap);
}

static int is_blocked(const watch_answer *a) {
    return a->state == ANS_WAITING || a->state == ANS_TIMED_OUT;
}

/* "waits in all_reduce(count=8, f32, sum) of WORLD (seq 3) for world rank 2" */
static void describe_answer(const watch_answer *a, char *buf, size_t len) {
    comm_call c = {.seq = (uint64_t)a->seq,
                   .kind = (int)a->kind,
                   .dtype = (int)a->dtype,
                   .op = (int)a->op,
                   .root = (int)a->root,
                   .count = (size_t)a->count};
    char d[160], pw[40 + 72] = "its peers";
    comm_call_describe(&c, d, sizeof d);
    if (a->peer_world >= 0)
        snprintf(pw, sizeof pw, "world rank %d%s", (int)a->peer_world,
                 comm_mpi_host_note((int)a->peer_world));
    snprintf(buf, len, "%s in %s of %.63s (seq %lld) for %s",
             a->state == ANS_WAITING ? "waits" : "timed out", d, a->name, (long long)a->seq, pw);
}

/* Why a rank that is not blocked is the cause; NULL when it is not (it
 * failed already, so it is ending the job for a reason of its own). */
static const char *cause_of(const watch_answer *a, int answered) {
    if (!answered)
        return "does not answer (stopped, gone, or hung where its watchdog thread cannot run)";
    if (a->state == ANS_RETURNED)
        return a->root == MTC_OK ? "has returned from its rank function (it skipped the call)"
                                 : NULL;
    return "has not entered the call: it is in no mtc call (it runs outside the communication "
           "layer)";
}

void comm_mpi_watch_diagnose(const comm_group *g, const comm_call *mine, const int *peers,
                             int npeers, char *buf, size_t len) {
    if (W.comm == MPI_COMM_NULL || npeers <= 0) return;
    watch_answer *ans = calloc((size_t)npeers, sizeof *ans);
    int *world = malloc(2 * (size_t)npeers * sizeof *world);
    if (!ans || !world) {
        free(ans), free(world);
        return;
    }
    int *got = world + npeers;
    for (int i = 0; i < npeers; i++)
        world[i] = g->members[peers[i]];
    ask(world, npeers, ans, got);
    int next = -1; /* a blocked peer's peer: where the chain of waits goes on */
    for (int i = 0; i < npeers; i++) {
        char d[320];
        char who[48 + 72];
        if (world[i] == peers[i])
            snprintf(who, sizeof who, "rank %d%s", peers[i], comm_mpi_host_note(world[i]));
        else
            snprintf(who, sizeof who, "group rank %d (world rank %d)%s", peers[i], world[i],
                     comm_mpi_host_note(world[i]));
        const watch_answer *a = &ans[i];
        if (got[i] && is_blocked(a)) {
            int same = mine && mine->group_name && (uint64_t)a->seq == mine->seq &&
                       !strcmp(a->name, mine->group_name);
            if (same) {
                append(buf, len, "; %s %s in the same call", who,
                       a->state == ANS_WAITING ? "waits" : "timed out");
            } else {
                describe_answer(a, d, sizeof d);
                append(buf, len, "; %s is itself blocked (it %s): the cause is reported on %s", who,
                       d, who);
            }
            if (next < 0 && a->peer_world >= 0 && a->peer_world != W.be->world_rank)
                next = (int)a->peer_world;
            continue;
        }
        const char *why = cause_of(a, got[i]);
        if (why)
            append(buf, len, "; %s %s: it is the cause", who, why);
        else
            append(buf, len, "; %s has failed already (%s)", who,
                   mtc_result_name((mtc_result_t)a->root));
    }
    /* every peer asked is blocked: follow the chain (a few hops) to its end */
    int named = strstr(buf, "it is the cause") != NULL;
    for (int hop = 0; hop < 4 && !named && next >= 0; hop++) {
        watch_answer a;
        int ok = 0;
        ask(&next, 1, &a, &ok);
        if (ok && is_blocked(&a)) {
            next = a.peer_world >= 0 && a.peer_world != W.be->world_rank ? (int)a.peer_world : -1;
            continue;
        }
        const char *why = cause_of(&a, ok);
        const char *on = comm_mpi_host_note(next);
        if (why)
            append(buf, len,
                   "; the chain of waits ends at world rank %d, which%s%s%s %s: it is the cause",
                   next, on[0] ? " is" : "", on, on[0] ? " and" : "", why);
        break;
    }
    free(ans);
    free(world);
}
