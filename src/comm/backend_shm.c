/* comm/backend_shm.c - the "shm" backend: ranks are threads of one process.
 *
 * A group is one object shared by its members (shm.h). Point-to-point is a
 * zero-copy rendezvous: the sender posts a descriptor of its buffer in the
 * receiver's mailbox and waits; the receiver copies straight from the
 * sender's buffer (one copy) and marks it done. Group creation is collective
 * over the parent: the new group's first member allocates it and publishes
 * the pointer in its parent slot, the others pick it up between two phase
 * syncs of the parent. Waiting, the call board and the reports live in
 * shm_wait.c. Relies on: shm.h, core/mem.h. Does not implement native
 * collectives (algo_direct.c is the shm fast path, chosen by select.c).
 * Limitations: send is synchronous (returns once the receiver has copied). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/algo.h"
#include "comm/shm.h"
#include "core/mem.h"

static int shm_node_of(const comm_backend *be, int world_rank) {
    const shm_world *w = be->ctx;
    return world_rank / w->ranks_per_node;
}

/* ---- groups --------------------------------------------------------------- */

static mtc_result_t group_alloc(shm_world *w, const int *members, int n, comm_group **out) {
    *out = NULL;
    if (n >= 1 << 24) /* shm_wait.c counts arrivals in 24 bits */
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "a group of %d rank-threads is too large", n);
    comm_group *g = calloc(1, sizeof *g);
    int *mem = malloc((size_t)n * sizeof *mem), *ck = malloc(2 * (size_t)n * sizeof *ck);
    shm_member *m = aligned_alloc(64, ((size_t)n * sizeof *m + 63) & ~(size_t)63);
    if (!g || !mem || !m || !ck) {
        free(g), free(mem), free(m), free(ck);
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "cannot allocate a group of %d ranks", n);
    }
    memset(m, 0, (size_t)n * sizeof *m);
    memcpy(mem, members, (size_t)n * sizeof *mem);
    for (int i = 0; i < n; i++)
        pthread_mutex_init(&m[i].lock, NULL);
    g->w = w;
    g->n = n;
    g->members = mem;
    g->m = m;
    g->split_ck = ck;
    g->id = atomic_fetch_add(&w->next_id, 1);
    atomic_store(&g->refs, n);
    *out = g;
    return MTC_OK;
}

static void group_destroy(comm_group *g) {
    for (int i = 0; i < g->n; i++) {
        pthread_mutex_destroy(&g->m[i].lock);
        mtc_mem_free_big(g->m[i].small, 2 * SHM_SMALL);
    }
    free(g->m);
    free(g->split_ck);
    free(g->members);
    free(g);
}

static void shm_group_free(comm_backend *be, comm_group *g) {
    (void)be;
    if (g && atomic_fetch_sub(&g->refs, 1) == 1) group_destroy(g);
}

static int index_of(const comm_group *g, int world_rank) {
    for (int i = 0; i < g->n; i++)
        if (g->members[i] == world_rank) return i;
    return -1;
}

static mtc_result_t shm_group_create(comm_backend *be, comm_group *parent, int color, int key,
                                     const int *members, int n, int my_index, const comm_call *call,
                                     comm_group **out) {
    (void)color, (void)key;
    shm_world *w = be->ctx;
    int me = call->rank;
    mtc_result_t rc = MTC_OK;
    *out = NULL;
    if (my_index == 0) {
        comm_group *g;
        rc = group_alloc(w, members, n, &g);
        atomic_store(&parent->m[me].xchg, rc == MTC_OK ? g : NULL);
    }
    MTC_CHECK(shm_sync_all(parent, me, call));
    if (my_index >= 0) {
        int leader = index_of(parent, members[0]);
        *out = atomic_load(&parent->m[leader].xchg);
        if (!*out && rc == MTC_OK)
            rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "rank %d could not allocate the new group",
                           leader);
    }
    mtc_result_t rc2 = shm_sync_all(parent, me, call);
    return rc != MTC_OK ? rc : rc2;
}

/* Each member leaves (color, key) in the parent's dense array; after one
 * sync every member copies the whole array (sequential reads: one slot per
 * member 640 bytes apart made this a cache miss per member and rank). The
 * array is not rewritten before every member has read it: the next write
 * comes after group_create's syncs. */
static mtc_result_t shm_split_exchange(comm_backend *be, comm_group *g, const int mine[2], int *all,
                                       const comm_call *call) {
    (void)be;
    int me = call->rank;
    g->split_ck[2 * me] = mine[0], g->split_ck[2 * me + 1] = mine[1];
    MTC_CHECK(shm_sync_all(g, me, call));
    memcpy(all, g->split_ck, 2 * (size_t)g->n * sizeof *all);
    return MTC_OK;
}

mtc_result_t shm_member_small(comm_group *g, int me, char **out) {
    shm_member *m = &g->m[me];
    /* not prefaulted: a member of a large group touches only what it stages */
    if (!m->small) MTC_CHECK(mtc_mem_alloc_big(2 * SHM_SMALL, 0, (void **)&m->small));
    *out = m->small;
    return MTC_OK;
}

/* ---- diagnosis and failure ------------------------------------------------ */

static mtc_result_t shm_enter(comm_backend *be, comm_group *g, const comm_call *call) {
    (void)be;
    MTC_CHECK(shm_check_health(g, call->rank));
    shm_board_enter(g, call->rank, call);
    return MTC_OK;
}

static void shm_leave(comm_backend *be, comm_group *g, const comm_call *call) {
    (void)be;
    shm_board_leave(g, call->rank, call);
}

static void shm_abort(comm_backend *be, mtc_result_t rc, const char *msg) {
    shm_world *w = be->ctx;
    int expect = 0;
    if (!atomic_compare_exchange_strong(&w->fail_state, &expect, 1)) return;
    w->failed_rank = be->world_rank;
    w->failed_rc = rc;
    snprintf(w->failed_msg, sizeof w->failed_msg, "%s", msg && msg[0] ? msg : "(no detail)");
    atomic_store(&w->fail_state, 2);
}

/* ---- point-to-point ------------------------------------------------------- */

static void post(comm_group *g, int me, int dst, uint32_t tag, const void *buf, size_t bytes,
                 const comm_call *call, shm_msg *msg) {
    msg->next = NULL;
    msg->src = me;
    msg->tag = tag;
    msg->buf = buf;
    msg->bytes = bytes;
    msg->call = call;
    atomic_store_explicit(&msg->state, 0, memory_order_relaxed);
    shm_member *m = &g->m[dst];
    pthread_mutex_lock(&m->lock);
    if (m->tail)
        m->tail->next = msg;
    else
        m->head = msg;
    m->tail = msg;
    atomic_fetch_add(&m->posted, 1);
    pthread_mutex_unlock(&m->lock);
    shm_event_signal(&m->bell);
}

/* Remove msg from dst's mailbox if still there; 1 when removed. */
static int unpost(comm_group *g, int dst, shm_msg *msg) {
    shm_member *m = &g->m[dst];
    int found = 0;
    pthread_mutex_lock(&m->lock);
    for (shm_msg **pp = &m->head, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next) {
        if (*pp != msg) continue;
        *pp = msg->next;
        if (m->tail == msg) m->tail = prev;
        found = 1;
        break;
    }
    pthread_mutex_unlock(&m->lock);
    return found;
}

static int sent_cond(void *arg) {
    return atomic_load_explicit(&((shm_msg *)arg)->state, memory_order_acquire) >= 2;
}

static mtc_result_t wait_sent(comm_group *g, int me, int dst, shm_msg *msg, const comm_call *call) {
    mtc_result_t rc = shm_wait(g, me, &g->m[me].bell, sent_cond, msg, call, dst);
    if (rc != MTC_OK) {
        if (unpost(g, dst, msg)) return rc;
        /* the receiver took it: its copy finishes in bounded time */
        while (!sent_cond(msg))
            sched_yield();
        return rc;
    }
    if (atomic_load(&msg->state) == 3) return shm_check_health(g, me);
    return MTC_OK;
}

typedef struct {
    shm_member *m;
    int src;
    uint32_t tag;
    uint32_t seen;
    shm_msg *msg;
} take_arg;

static int take_cond(void *arg) {
    take_arg *t = arg;
    if (t->msg) return 1; /* conditions may be evaluated again after success */
    uint32_t posted = atomic_load_explicit(&t->m->posted, memory_order_acquire);
    if (posted == t->seen) return 0;
    pthread_mutex_lock(&t->m->lock);
    t->seen = atomic_load(&t->m->posted);
    shm_msg *prev = NULL;
    for (shm_msg *x = t->m->head; x; prev = x, x = x->next) {
        if (x->src != t->src || x->tag != t->tag) continue;
        if (prev)
            prev->next = x->next;
        else
            t->m->head = x->next;
        if (t->m->tail == x) t->m->tail = prev;
        t->msg = x;
        break;
    }
    pthread_mutex_unlock(&t->m->lock);
    return t->msg != NULL;
}

static mtc_result_t do_recv(comm_group *g, int me, int src, uint32_t tag, void *buf, size_t bytes,
                            const comm_call *call) {
    take_arg t = {&g->m[me], src, tag, (uint32_t)-1, NULL};
    MTC_CHECK(shm_wait(g, me, &g->m[me].bell, take_cond, &t, call, src));
    shm_msg *msg = t.msg;
    mtc_result_t rc = MTC_OK;
    if (tag != 0 && msg->call && call && !comm_call_same(msg->call, call)) {
        rc = shm_mismatch(g, me, call, src, msg->call);
    } else if (msg->bytes != bytes) {
        char d[160], text[400];
        comm_call_describe(call, d, sizeof d);
        snprintf(
            text, sizeof text,
            "message size mismatch in %s: rank %d sent %zu bytes but rank %d expected %zu in %s",
            call->group_name, src, msg->bytes, me, bytes, d);
        rc = shm_group_fail(g, MTC_ERR_INVALID_USAGE, text);
    } else {
        if (bytes) comm_copy(buf, msg->buf, bytes);
    }
    atomic_store_explicit(&msg->state, rc == MTC_OK ? 2 : 3, memory_order_release);
    shm_event_signal(&g->m[src].bell);
    return rc;
}

static mtc_result_t shm_send(comm_backend *be, comm_group *g, int peer, uint32_t tag,
                             const void *buf, size_t bytes, const comm_call *call) {
    (void)be;
    shm_msg msg;
    post(g, call->rank, peer, tag, buf, bytes, call, &msg);
    return wait_sent(g, call->rank, peer, &msg, call);
}

static mtc_result_t shm_recv(comm_backend *be, comm_group *g, int peer, uint32_t tag, void *buf,
                             size_t bytes, const comm_call *call) {
    (void)be;
    return do_recv(g, call->rank, peer, tag, buf, bytes, call);
}

static mtc_result_t shm_sendrecv(comm_backend *be, comm_group *g, int dst, uint32_t tag,
                                 const void *sendbuf, size_t sendbytes, int src, void *recvbuf,
                                 size_t recvbytes, const comm_call *call) {
    (void)be;
    shm_msg msg;
    post(g, call->rank, dst, tag, sendbuf, sendbytes, call, &msg);
    mtc_result_t rc = do_recv(g, call->rank, src, tag, recvbuf, recvbytes, call);
    mtc_result_t rc2 = wait_sent(g, call->rank, dst, &msg, call);
    return rc != MTC_OK ? rc : rc2;
}

static const int *shm_group_members(const comm_group *g) { return g->members; }

static const comm_backend_ops shm_ops = {
    .name = "shm",
    .group_create = shm_group_create,
    .group_free = shm_group_free,
    .group_members = shm_group_members,
    .split_exchange = shm_split_exchange,
    .send = shm_send,
    .recv = shm_recv,
    .sendrecv = shm_sendrecv,
    .enter = shm_enter,
    .leave = shm_leave,
    .abort = shm_abort,
};

/* ---- world ---------------------------------------------------------------- */

mtc_result_t comm_shm_world_create(int n, int ranks_per_node, int oversubscribed,
                                   const mtc_shm_tuning *tuning, shm_world **out) {
    *out = NULL;
    shm_world *w = calloc(1, sizeof *w);
    if (!w) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "cannot allocate the shm world");
    w->n = n;
    w->ranks_per_node = ranks_per_node > 0 && ranks_per_node <= n ? ranks_per_node : n;
    /* Measured on the 2-core VM (8 B direct all-reduce, mean of 20000):
     * spinning only pays when every rank has a core (2 pinned ranks: 0.4 us
     * per call); oversubscribed, 1000 spins cost 0.5-0.8 ms per call, while
     * yielding to the peers we wait for (then sleeping) gave 50-85 us on 4-8
     * ranks against 70-220 us for spin-then-sleep alone. */
    w->spin_iters = oversubscribed ? 16 : 4000;
    w->yield_iters = oversubscribed ? 50 : 0;
    /* Far more rank-threads than cores (1024 on 2: 0.4 s less set-up with
     * no yields), a yield mostly hands the core to another waiter. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores > 0 && n > 32 * cores) w->yield_iters = 0;
    /* tuning knobs for measurements (not a user interface) */
    if (tuning && tuning->spin_iters >= 0) w->spin_iters = tuning->spin_iters;
    if (tuning && tuning->yield_iters >= 0) w->yield_iters = tuning->yield_iters;
    w->exited = calloc((size_t)n, sizeof *w->exited);
    w->be = calloc((size_t)n, sizeof *w->be);
    w->waits = calloc((size_t)n, sizeof *w->waits);
    int *all = calloc((size_t)n, sizeof *all);
    mtc_result_t rc = MTC_ERR_OUT_OF_MEMORY;
    if (w->waits)
        for (int i = 0; i < n; i++)
            comm_wait_rec_init(&w->waits[i]);
    if (w->exited && w->be && w->waits && all) {
        for (int i = 0; i < n; i++)
            all[i] = i;
        rc = group_alloc(w, all, n, &w->world);
    }
    free(all);
    if (rc != MTC_OK) {
        comm_shm_world_free(w);
        return mtc_error(rc, "cannot allocate the shm world of %d ranks", n);
    }
    int nodes = (n + w->ranks_per_node - 1) / w->ranks_per_node;
    for (int i = 0; i < n; i++) {
        comm_backend *be = &w->be[i];
        be->ops = &shm_ops;
        be->ctx = w;
        be->world_rank = i;
        be->world_size = n;
        be->node_count = nodes;
        be->shared_memory = 1;
        be->world = w->world;
        be->node_of = shm_node_of;
        be->wait = &w->waits[i];
    }
    *out = w;
    return MTC_OK;
}

void comm_shm_world_free(shm_world *w) {
    if (!w) return;
    if (w->world) group_destroy(w->world);
    if (w->waits)
        for (int i = 0; i < w->n; i++)
            comm_wait_rec_destroy(&w->waits[i]);
    free(w->waits);
    free(w->exited);
    free(w->be);
    free(w);
}

comm_backend *comm_shm_backend(shm_world *w, int r) { return &w->be[r]; }

void comm_shm_rank_exited(shm_world *w, int r, mtc_result_t rc) {
    comm_wait_exited(&w->waits[r], rc);
    atomic_store(&w->exited[r], 1);
}

int comm_shm_first_failure(shm_world *w, int *rank, mtc_result_t *rc, const char **msg) {
    if (atomic_load(&w->fail_state) != 2) return 0;
    *rank = w->failed_rank;
    *rc = w->failed_rc;
    *msg = w->failed_msg;
    return 1;
}
