/* comm/watchdog.c - wait records, back-off, and the watchdogs' report
 * (calling the launch's abort hook). See watchdog.h for the contracts.
 * Relies on pthreads and core/timer. Does not watch anything itself: the
 * shm watchdog is the launching thread (launch.c), the mpi one a thread of
 * its own (watch_mpi.c). Never exits: without a hook it returns. */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "comm/watchdog.h"
#include "core/timer.h"

/* ---- the report ------------------------------------------------------------------ */

static atomic_int fired;

void comm_watch_fire(mtc_result_t rc, const char *report, mtc_comm_abort_hook fn, void *arg) {
    if (atomic_exchange(&fired, 1)) return;
    fprintf(stderr, "mtc: watchdog: %s\n", report);
    fflush(stderr);
    if (fn) fn(rc, report, arg);
    atomic_store(&fired, 0); /* no hook (or it returned): a later launch may report again */
}

/* ---- wait records ---------------------------------------------------------------- */

void comm_wait_rec_init(comm_wait_rec *r) {
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    r->peer_world = -1;
}

void comm_wait_rec_destroy(comm_wait_rec *r) {
    if (r) pthread_mutex_destroy(&r->mu);
}

void comm_wait_begin(comm_wait_rec *r, const comm_call *call, int peer_world) {
    if (!r || !call) return;
    pthread_mutex_lock(&r->mu);
    r->depth++;
    r->timed_out = 0;
    r->call = *call;
    const char *name = call->group_name ? call->group_name : "?";
    size_t n = strnlen(name, sizeof r->name - 1);
    memcpy(r->name, name, n);
    r->name[n] = 0;
    r->call.group_name = r->name;
    r->peer_world = peer_world;
    r->since_ns = mtc_time_ns();
    pthread_mutex_unlock(&r->mu);
}

void comm_wait_end(comm_wait_rec *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    if (r->depth > 0) r->depth--;
    pthread_mutex_unlock(&r->mu);
}

void comm_wait_timed_out(comm_wait_rec *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    if (r->depth > 0) r->depth--;
    r->timed_out = 1;
    pthread_mutex_unlock(&r->mu);
}

void comm_wait_exited(comm_wait_rec *r, mtc_result_t rc) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->exited = 1;
    r->exit_rc = rc;
    pthread_mutex_unlock(&r->mu);
}

int comm_wait_read(comm_wait_rec *r, comm_wait_rec *out) {
    pthread_mutex_lock(&r->mu);
    out->depth = r->depth;
    out->timed_out = r->timed_out;
    out->exited = r->exited;
    out->exit_rc = r->exit_rc;
    out->call = r->call;
    memcpy(out->name, r->name, sizeof out->name);
    out->call.group_name = out->name;
    out->peer_world = r->peer_world;
    out->since_ns = r->since_ns;
    pthread_mutex_unlock(&r->mu);
    return out->depth > 0 || out->timed_out;
}

void comm_wait_describe(const comm_wait_rec *w, char *buf, size_t len) {
    char d[160], peer[40] = "its peers";
    comm_call_describe(&w->call, d, sizeof d);
    if (w->peer_world >= 0) snprintf(peer, sizeof peer, "world rank %d", w->peer_world);
    snprintf(buf, len, "%s in %s of %s (seq %llu) for %s", w->depth > 0 ? "waits" : "timed out", d,
             w->name, (unsigned long long)w->call.seq, peer);
}

/* ---- back-off ------------------------------------------------------------------------ */

static atomic_int yield_at_once;

void comm_backoff_set_yield(int on) {
    atomic_store_explicit(&yield_at_once, on != 0, memory_order_relaxed);
}

void comm_backoff_pause(comm_backoff *b) {
    if (b->nap_ns == 0) {
        /* oversubscribed: every poll that found nothing gives the core away */
        int give = atomic_load_explicit(&yield_at_once, memory_order_relaxed);
        /* read the clock every 16 polls: the spin stays a spin */
        if ((++b->it & 15) != 0) {
            if (give) sched_yield();
            return;
        }
        uint64_t now = mtc_time_ns();
        if (!b->t0) b->t0 = now;
        if (now - b->t0 < COMM_SPIN_NS && !give) return;
        if (now - b->t0 < b->busy_ns) {
            sched_yield();
            return;
        }
        b->nap_ns = 10000;
    }
    struct timespec ts = {0, (long)b->nap_ns};
    nanosleep(&ts, NULL);
    b->nap_ns = b->nap_ns * 2 > COMM_NAP_MAX_NS ? COMM_NAP_MAX_NS : b->nap_ns * 2;
}
