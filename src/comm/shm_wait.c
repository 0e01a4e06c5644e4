/* comm/shm_wait.c - how shm ranks wait for each other, and what they say
 * when waiting goes wrong.
 *
 * A wait spins briefly (a few microseconds; shorter and with yields when
 * there are more rank-threads than cores, where spinning starves the peer
 * we wait for), then sleeps on a futex in slices of SHM_SLICE_NS (longer in
 * groups of more than 64, see shm_wait). Between
 * slices it checks, in this order: the world abort flag (MTC_ERR_REMOTE),
 * the group's sticky error, the call board for a peer that entered the same
 * sequence number with another signature (MTC_ERR_INVALID_USAGE naming both
 * calls), and the deadline (MTC_ERR_TIMEOUT with a report of what every
 * member is doing). The fast path is only the condition check. The slow
 * path fills the rank's wait record (watchdog.h), which timeout reports read
 * to follow a chain of waits to the rank that is in no mtc call: that one is
 * named as the cause, a peer blocked itself is not blamed.
 * Relies on shm.h (world and group layout, defined in backend_shm.c).
 * Does not move data. */
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "comm/shm.h"
#include "core/timer.h"

#define SHM_SLICE_NS (20ull * 1000 * 1000)
#define SHM_SLICE_MAX_NS (1000ull * 1000 * 1000)

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t val, uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, &ts, NULL, 0);
}

/* The fence orders the caller's condition store before the load of
 * `waiters` (a store-load pair, like the waiter's increment-then-recheck in
 * shm_wait): either the waiter sees the condition or we see the waiter.
 * Without waiters nothing is written, so the shared event line is not
 * bounced between cores on every phase of every collective. */
void shm_event_signal(shm_event *e) {
#if defined(__SANITIZE_THREAD__)
    /* TSan has no fences: always bump seq (a waiter's futex_wait then
     * returns at once), the plain protocol TSan can follow */
    atomic_fetch_add(&e->seq, 1);
    if (atomic_load(&e->waiters))
        syscall(SYS_futex, (uint32_t *)&e->seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&e->waiters, memory_order_relaxed)) {
        atomic_fetch_add(&e->seq, 1);
        syscall(SYS_futex, (uint32_t *)&e->seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
    }
#endif
}

uint64_t shm_pack_sig(const comm_call *c) {
    return (uint64_t)(uint8_t)c->kind | (uint64_t)(uint8_t)(c->dtype + 1) << 8 |
           (uint64_t)(uint8_t)(c->op + 1) << 16 | (uint64_t)(uint32_t)(c->root + 1) << 24;
}

static void unpack_sig(uint64_t sig, uint64_t count, comm_call *c) {
    memset(c, 0, sizeof *c);
    c->kind = (int)(sig & 0xff);
    c->dtype = (int)((sig >> 8) & 0xff) - 1;
    c->op = (int)((sig >> 16) & 0xff) - 1;
    c->root = (int)(uint32_t)(sig >> 24) - 1;
    c->count = (size_t)count;
}

mtc_result_t shm_group_fail(comm_group *g, mtc_result_t rc, const char *msg) {
    int expect = 0;
    if (atomic_compare_exchange_strong(&g->err_state, &expect, 1)) {
        g->err_rc = rc;
        snprintf(g->err_msg, sizeof g->err_msg, "%s", msg);
        atomic_store(&g->err_state, 2);
        shm_event_signal(&g->ev);
        for (int i = 0; i < g->n; i++)
            shm_event_signal(&g->m[i].bell);
    } else {
        while (atomic_load(&g->err_state) != 2)
            sched_yield();
    }
    return mtc_error(g->err_rc, "%s", g->err_msg);
}

/* Member p's call number `seq` from the board; 0 when overwritten/absent. */
static int board_read(comm_group *g, int p, uint64_t seq, comm_call *out) {
    shm_board_slot *s = &g->m[p].board[seq % SHM_BOARD];
    if (atomic_load_explicit(&s->seq, memory_order_acquire) != seq) return 0;
    uint64_t sig = atomic_load_explicit(&s->sig, memory_order_relaxed);
    uint64_t count = atomic_load_explicit(&s->count, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&s->seq, memory_order_relaxed) != seq) return 0;
    unpack_sig(sig, count, out);
    out->seq = seq;
    return 1;
}

void shm_board_enter(comm_group *g, int me, const comm_call *call) {
    shm_member *m = &g->m[me];
    shm_board_slot *s = &m->board[call->seq % SHM_BOARD];
    /* seqlock-style: readers (slow path only) re-check seq around the fields */
    atomic_store_explicit(&s->seq, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&s->sig, shm_pack_sig(call), memory_order_relaxed);
    atomic_store_explicit(&s->count, (uint64_t)call->count, memory_order_relaxed);
    atomic_store_explicit(&s->seq, call->seq, memory_order_release);
    atomic_store_explicit(&m->entered, call->seq, memory_order_release);
}

void shm_board_leave(comm_group *g, int me, const comm_call *call) {
    atomic_store_explicit(&g->m[me].left, call->seq, memory_order_release);
}

mtc_result_t shm_mismatch(comm_group *g, int a, const comm_call *ca, int b, const comm_call *cb) {
    const char *name = ca->group_name ? ca->group_name : cb->group_name;
    if (a > b) {
        int t = a;
        a = b, b = t;
        const comm_call *tc = ca;
        ca = cb, cb = tc;
    }
    char da[160], db[160], msg[600];
    comm_call_describe(ca, da, sizeof da);
    comm_call_describe(cb, db, sizeof db);
    snprintf(msg, sizeof msg,
             "collective mismatch in %s (seq %llu): rank %d called %s but rank %d called %s",
             name ? name : "?", (unsigned long long)ca->seq, a, da, b, db);
    return shm_group_fail(g, MTC_ERR_INVALID_USAGE, msg);
}

/* Checks the next SHM_BOARD_SCAN members from *cursor on (wrapping), so a
 * wake-up costs O(1) whatever the group size: in a group of thousands of
 * rank-threads a full scan on every wake made set-up quadratic. A mismatch
 * is still found within n / SHM_BOARD_SCAN wake-ups or slices. */
#define SHM_BOARD_SCAN 64
static mtc_result_t board_check(comm_group *g, int me, const comm_call *call, int *cursor) {
    if (!call || call->seq == 0) return MTC_OK;
    comm_call peer;
    int n = g->n < SHM_BOARD_SCAN ? g->n : SHM_BOARD_SCAN;
    for (int i = 0; i < n; i++) {
        int p = *cursor;
        *cursor = p + 1 < g->n ? p + 1 : 0;
        if (p == me || atomic_load(&g->m[p].entered) < call->seq) continue;
        if (board_read(g, p, call->seq, &peer) && !comm_call_same(&peer, call))
            return shm_mismatch(g, me, call, p, &peer);
    }
    return MTC_OK;
}

mtc_result_t shm_check_health(comm_group *g, int me) {
    shm_world *w = g->w;
    if (atomic_load(&w->fail_state) == 2)
        return mtc_error(MTC_ERR_REMOTE, "rank %d failed with %s: %s", w->failed_rank,
                         mtc_result_name(w->failed_rc), w->failed_msg);
    if (atomic_load(&g->err_state) == 2) return mtc_error(g->err_rc, "%s", g->err_msg);
    return MTC_OK;
}

/* "rank 2 is in all_reduce(count=4, f32, sum) (seq 3)" for every member. */
static size_t describe_members(comm_group *g, int me, const comm_call *call, char *buf,
                               size_t len) {
    size_t off = 0;
    for (int p = 0; p < g->n && off + 1 < len; p++) {
        if (p == me) continue;
        uint64_t e = atomic_load(&g->m[p].entered), l = atomic_load(&g->m[p].left);
        comm_call c;
        char d[160] = "?";
        int wr = g->members[p];
        char who[48];
        if (g->members[p] == p)
            snprintf(who, sizeof who, "rank %d", p);
        else
            snprintf(who, sizeof who, "group rank %d (world rank %d)", p, wr);
        const char *gone =
            atomic_load(&g->w->exited[wr]) ? ", returned from its rank function" : "";
        int n;
        if (e >= call->seq && e > l && board_read(g, p, e, &c)) {
            comm_call_describe(&c, d, sizeof d);
            n = snprintf(buf + off, len - off, "; %s waits in %s (seq %llu)", who, d,
                         (unsigned long long)e);
        } else if (e >= call->seq) {
            n = snprintf(buf + off, len - off, "; %s is past seq %llu", who,
                         (unsigned long long)call->seq);
        } else if (e == 0) {
            n = snprintf(buf + off, len - off, "; %s has not arrived (no collective yet%s)", who,
                         gone);
        } else {
            if (board_read(g, p, e, &c)) comm_call_describe(&c, d, sizeof d);
            n = snprintf(buf + off, len - off, "; %s has not arrived (last %s %s (seq %llu)%s)",
                         who, e > l ? "in" : "finished", d, (unsigned long long)e, gone);
        }
        if (n < 0) break;
        off += (size_t)n;
        if (off >= len) off = len - 1;
    }
    return off;
}

static mtc_result_t report_timeout(comm_group *g, int me, const comm_call *call, int who) {
    char d[160], rest[700] = "";
    comm_call_describe(call, d, sizeof d);
    describe_members(g, me, call, rest, sizeof rest);
    char waitfor[520] = "its peers";
    if (who >= 0) {
        /* a peer that is itself blocked waiting is not the cause: say so,
         * and that its own report names the cause */
        comm_wait_rec peer;
        int wr = g->members[who];
        if (wr != g->members[me] && comm_wait_read(&g->w->waits[wr], &peer)) {
            char pd[220];
            comm_wait_describe(&peer, pd, sizeof pd);
            /* one process: follow the chain of waits to the rank that is not waiting */
            int end = wr, busy = 1;
            comm_wait_rec next = peer;
            for (int hop = 0; hop < g->w->n && busy && next.peer_world >= 0; hop++) {
                end = next.peer_world;
                busy = comm_wait_read(&g->w->waits[end], &next);
            }
            char root[120] = "";
            if (end != wr && !busy)
                snprintf(root, sizeof root,
                         " (the chain of waits ends at world rank %d, which is in no mtc call)",
                         end);
            snprintf(waitfor, sizeof waitfor,
                     "rank %d, which is itself blocked (it %s): the cause is reported on rank %d%s",
                     who, pd, who, root);
        } else {
            snprintf(waitfor, sizeof waitfor, "rank %d", who);
        }
    }
    if (call->seq == 0)
        return mtc_error(MTC_ERR_TIMEOUT, "timeout in %s: rank %d waited in %s for %s",
                         call->group_name, me, d, waitfor);
    return mtc_error(MTC_ERR_TIMEOUT, "timeout in %s (seq %llu): rank %d waited in %s for %s%s",
                     call->group_name, (unsigned long long)call->seq, me, d, waitfor, rest);
}

void shm_describe_rank(shm_world *w, int r, char *buf, size_t len) {
    comm_wait_rec rec;
    if (comm_wait_read(&w->waits[r], &rec) && rec.depth > 0) {
        char d[240];
        comm_wait_describe(&rec, d, sizeof d);
        snprintf(buf, len, "%s", d);
        return;
    }
    comm_group *g = w->world;
    uint64_t e = atomic_load(&g->m[r].entered), l = atomic_load(&g->m[r].left);
    comm_call c;
    char d[160] = "no collective yet";
    if (e && board_read(g, r, e, &c)) comm_call_describe(&c, d, sizeof d);
    snprintf(buf, len,
             "is outside the communication layer (not waiting in any mtc call; last %s WORLD: "
             "%s (seq %llu))",
             e > l ? "entered in" : "finished in", d, (unsigned long long)e);
}

mtc_result_t shm_wait(comm_group *g, int me, shm_event *ev, shm_cond_fn cond, void *arg,
                      const comm_call *call, int who) {
    if (cond(arg)) return MTC_OK;
    shm_world *w = g->w;
    for (int i = 0; i < w->spin_iters; i++) {
        cpu_relax();
        if (cond(arg)) return MTC_OK;
    }
    for (int i = 0; i < w->yield_iters; i++) {
        sched_yield();
        if (cond(arg)) return MTC_OK;
    }
    /* slow path: leave a wait record (peers' reports and the watchdog read it) */
    comm_wait_rec *rec = call ? &w->waits[g->members[me]] : NULL;
    comm_wait_begin(rec, call, who >= 0 ? g->members[who] : -1);
    mtc_result_t rc = MTC_OK;
    int cursor = 0;
    /* Sleepers wake every slice to look for aborts, mismatches and the
     * deadline. In a large group that polling is itself the load (thousands
     * of sleepers waking 50 times a second while the rank they wait for
     * needs the CPU), so there the slice backs off, doubling up to 20 ms per
     * 64 members (at most 1 s); groups of up to 64 keep 20 ms. */
    uint64_t cur = SHM_SLICE_NS, cap = SHM_SLICE_NS * (uint64_t)((g->n + 63) / 64);
    if (cap > SHM_SLICE_MAX_NS) cap = SHM_SLICE_MAX_NS;
    for (;;) {
        if ((rc = shm_check_health(g, me)) != MTC_OK) break;
        if ((rc = board_check(g, me, call, &cursor)) != MTC_OK) break;
        uint64_t now = mtc_time_ns(), slice = cur;
        cur = cur * 2 < cap ? cur * 2 : cap;
        if (call && call->deadline_ns) {
            if (now >= call->deadline_ns) {
                if (cond(arg)) break;
                rc = report_timeout(g, me, call, who);
                comm_wait_timed_out(rec);
                return rc;
            }
            if (call->deadline_ns - now < slice) slice = call->deadline_ns - now;
        }
        uint32_t s = atomic_load(&ev->seq);
        if (cond(arg)) break;
        atomic_fetch_add(&ev->waiters, 1);
#if !defined(__SANITIZE_THREAD__)
        atomic_thread_fence(memory_order_seq_cst); /* pairs with shm_event_signal */
#endif
        if (!cond(arg)) futex_wait(&ev->seq, s, slice);
        atomic_fetch_sub(&ev->waiters, 1);
        if (cond(arg)) break;
    }
    comm_wait_end(rec);
    return rc;
}

/* ---- phase syncs on the member arrival counters --------------------------- */

/* Ringing the group event on every arrival woke every sleeping member on
 * every arrival: p^2 wake-ups per phase, which made set-up of thousands of
 * rank-threads take minutes. Instead the members share, per target, a count
 * of the members from index 0 up known to have arrived there (or later);
 * each arrival advances it as far as it can, and only the arrival that
 * takes it to n rings the event, once. The count only moves forward, so a
 * phase costs O(n) in all. A slot serves target t until one of t + 8, t +
 * 16, ... claims it, and nobody can still arrive at t by then (direct
 * collectives keep members within one epoch, 4 targets, of each other).
 * Should the count ever stall, waiters still read every member's counter
 * on every 64th check (all_arrived), slow but correct. */
#define SHM_DONE_SLOTS 8u
#define SHM_DONE_BITS 24
#define SHM_DONE_MASK ((1ull << SHM_DONE_BITS) - 1)

static void done_advance(comm_group *g, _Atomic uint64_t *slot, uint64_t target) {
    uint64_t v = atomic_load_explicit(slot, memory_order_acquire);
    for (;;) {
        uint64_t t = v >> SHM_DONE_BITS, c = v & SHM_DONE_MASK;
        if (t > target) return; /* a later target owns the slot */
        if (t < target) {       /* claim it, counting from member 0 */
            atomic_compare_exchange_weak_explicit(slot, &v, target << SHM_DONE_BITS,
                                                  memory_order_acq_rel, memory_order_acquire);
            continue;
        }
        if (c >= (uint64_t)g->n) return;
        /* seq_cst, as the arrival's store: of two members arriving at once,
         * at least one sees the other (no store-buffer reordering) */
        if (atomic_load_explicit(&g->m[c].arrive, memory_order_seq_cst) < target) return;
        if (atomic_compare_exchange_weak_explicit(slot, &v, v + 1, memory_order_acq_rel,
                                                  memory_order_acquire) &&
            c + 1 == (uint64_t)g->n) {
            shm_event_signal(&g->ev);
            return;
        }
    }
}

void shm_arrive(comm_group *g, int me, uint64_t epoch, int phase) {
    uint64_t target = epoch * 4 + (uint64_t)phase;
    atomic_store(&g->m[me].arrive, target);
    shm_event_signal(&g->m[me].bell); /* shm_wait_one waits on it */
    /* my arrival counts for my target and for every earlier one still open */
    for (unsigned s = 0; s < SHM_DONE_SLOTS; s++) {
        _Atomic uint64_t *slot = &g->done[s];
        uint64_t t = atomic_load_explicit(slot, memory_order_acquire) >> SHM_DONE_BITS;
        if (target % SHM_DONE_SLOTS == s)
            done_advance(g, slot, target);
        else if (t && t < target)
            done_advance(g, slot, t);
    }
}

typedef struct {
    comm_group *g;
    uint64_t target;
    int next;       /* members below this index have arrived */
    unsigned polls; /* all_arrived calls */
} all_arg;

static int all_arrived(void *arg) {
    all_arg *a = arg;
    /* the target's slot answers in O(1): complete, or taken by a later
     * target (everyone is past this one). Reading every member's counter on
     * every check was a cache miss per member: quadratic over a phase. The
     * full scan stays as a rare fallback (see shm_arrive). */
    uint64_t v =
        atomic_load_explicit(&a->g->done[a->target % SHM_DONE_SLOTS], memory_order_acquire);
    if ((v >> SHM_DONE_BITS) > a->target ||
        ((v >> SHM_DONE_BITS) == a->target && (v & SHM_DONE_MASK) >= (uint64_t)a->g->n))
        return 1;
    if (++a->polls % 64) return 0;
    for (; a->next < a->g->n; a->next++)
        if (atomic_load_explicit(&a->g->m[a->next].arrive, memory_order_acquire) < a->target)
            return 0;
    return 1;
}

mtc_result_t shm_wait_all(comm_group *g, int me, uint64_t epoch, int phase, const comm_call *call) {
    all_arg a = {g, epoch * 4 + (uint64_t)phase, 0, 0};
    return shm_wait(g, me, &g->ev, all_arrived, &a, call, -1);
}

typedef struct {
    comm_group *g;
    uint64_t target;
} sync_arg;

static int synced(void *arg) {
    sync_arg *a = arg;
    return atomic_load_explicit(&a->g->synced, memory_order_acquire) >= a->target;
}

mtc_result_t shm_sync_all(comm_group *g, int me, const comm_call *call) {
    /* round k completes at k * n arrivals: nobody arrives for round k + 1
     * before every member has arrived for round k */
    sync_arg a = {g, ++g->m[me].syncs * (uint64_t)g->n};
    if (atomic_fetch_add_explicit(&g->synced, 1, memory_order_acq_rel) + 1 == a.target)
        shm_event_signal(&g->ev);
    return shm_wait(g, me, &g->ev, synced, &a, call, -1);
}

static int one_arrived(void *arg) {
    all_arg *a = arg;
    return atomic_load_explicit(&a->g->m[a->next].arrive, memory_order_acquire) >= a->target;
}

mtc_result_t shm_wait_one(comm_group *g, int me, int who, uint64_t epoch, int phase,
                          const comm_call *call) {
    all_arg a = {g, epoch * 4 + (uint64_t)phase, who, 0};
    return shm_wait(g, me, &g->m[who].bell, one_arrived, &a, call, who);
}

mtc_result_t shm_check_pub(comm_group *g, int me, int who, uint64_t epoch, const comm_call *call) {
    shm_pub *p = &g->m[who].pub[epoch & 1];
    return shm_check_sig(g, me, who, atomic_load_explicit(&p->sig, memory_order_relaxed),
                         atomic_load_explicit(&p->count, memory_order_relaxed), call);
}

mtc_result_t shm_check_sig(comm_group *g, int me, int who, uint64_t sig, uint64_t count,
                           const comm_call *call) {
    if (sig == shm_pack_sig(call) && count == call->count) return MTC_OK;
    comm_call peer;
    unpack_sig(sig, count, &peer);
    peer.seq = call->seq;
    return shm_mismatch(g, me, call, who, &peer);
}
