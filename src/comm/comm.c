/* comm/comm.c - communicator objects: names, accessors, split/create, the
 * per-call bookkeeping (sequence number, signature, deadline) and the
 * services algorithms use (algo.h: p2p, scratch, node sub-communicators),
 * plus the user point-to-point calls.
 *
 * Relies on the backend (backend.h) for groups and transfers. The collective
 * entry points are in coll.c, non-blocking in request.c, choosing an
 * algorithm in select.c. Does not know which backend it runs on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_internal.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/timer.h"

/* ---- names ------------------------------------------------------------------ */

static const char *const op_names[MTC_OP_COUNT] = {"sum", "max", "min", "avg"};
static const char *const coll_names[COMM_CALL_KIND_COUNT] = {
    "send",         "recv",       "sendrecv",         "barrier",
    "broadcast",    "reduce",     "all_reduce",       "reduce_scatter",
    "all_gather",   "all_to_all", "reduce_scatter_v", "all_gather_v",
    "all_to_all_v", "comm_split", "comm_create"};
static const char *const algo_names[MTC_ALGO_COUNT] = {
    "auto", "ring", "tree", "recdbl", "rabenseifner", "direct", "hier", "native", "pairwise"};

const char *mtc_op_name(mtc_op_t op) { return (unsigned)op < MTC_OP_COUNT ? op_names[op] : "?"; }
const char *mtc_coll_name(mtc_coll_t coll) {
    return (unsigned)coll < COMM_CALL_KIND_COUNT ? coll_names[coll] : "?";
}
const char *mtc_algo_name(mtc_algo_t algo) {
    return (unsigned)algo < MTC_ALGO_COUNT ? algo_names[algo] : "?";
}
static int parse_name(const char *s, const char *const *names, int n) {
    if (!s) return -1;
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}
int mtc_op_parse(const char *s) { return parse_name(s, op_names, MTC_OP_COUNT); }
int mtc_coll_parse(const char *s) { return parse_name(s, coll_names, MTC_COLL_COUNT); }
int mtc_algo_parse(const char *s) { return parse_name(s, algo_names, MTC_ALGO_COUNT); }

void comm_call_describe(const comm_call *c, char *buf, size_t len) {
    const char *name = mtc_coll_name((mtc_coll_t)c->kind);
    const char *dt = c->dtype >= 0 ? mtc_dtype_name((mtc_dtype_t)c->dtype) : NULL;
    int reducing = c->kind == MTC_COLL_REDUCE || c->kind == MTC_COLL_ALL_REDUCE ||
                   c->kind == MTC_COLL_REDUCE_SCATTER || c->kind == MTC_COLL_REDUCE_SCATTER_V;
    int rooted = c->kind == MTC_COLL_BROADCAST || c->kind == MTC_COLL_REDUCE;
    switch (c->kind) {
    case MTC_COLL_BARRIER: snprintf(buf, len, "barrier()"); return;
    case COMM_CALL_SPLIT: snprintf(buf, len, "comm_split()"); return;
    case COMM_CALL_CREATE: snprintf(buf, len, "comm_create(n=%zu)", c->count); return;
    case MTC_COLL_SEND:
    case MTC_COLL_RECV:
    case MTC_COLL_SENDRECV:
        snprintf(buf, len, "%s(count=%zu, %s, peer=%d)", name, c->count, dt ? dt : "?", c->root);
        return;
    }
    int n = snprintf(buf, len, "%s(count=%zu, %s", name, c->count, dt ? dt : "?");
    if (n < 0 || (size_t)n >= len) return;
    if (reducing) n += snprintf(buf + n, len - (size_t)n, ", %s", mtc_op_name((mtc_op_t)c->op));
    if ((size_t)n >= len) return;
    if (rooted) n += snprintf(buf + n, len - (size_t)n, ", root=%d", c->root);
    if ((size_t)n >= len) return;
    snprintf(buf + n, len - (size_t)n, ")");
}

int comm_call_same(const comm_call *a, const comm_call *b) {
    return a->kind == b->kind && a->count == b->count && a->dtype == b->dtype && a->op == b->op &&
           a->root == b->root;
}

/* ---- accessors ---------------------------------------------------------------- */

int mtc_comm_rank(mtc_comm_t comm) { return comm->rank; }
int mtc_comm_size(mtc_comm_t comm) { return comm->size; }
int mtc_comm_world_rank(mtc_comm_t comm, int r) {
    return r >= 0 && r < comm->size ? comm->members[r] : -1;
}
const char *mtc_comm_name(mtc_comm_t comm) { return comm->name; }
const char *mtc_comm_backend_name(mtc_comm_t comm) { return comm->be->ops->name; }
int mtc_comm_local_size(mtc_comm_t comm) { return comm->local_size; }
int mtc_comm_node_count(mtc_comm_t comm) { return comm->node_count; }
int mtc_comm_node_of(mtc_comm_t comm, int r) {
    return r >= 0 && r < comm->size ? comm->be->node_of(comm->be, comm->members[r]) : -1;
}
const char *mtc_comm_host_of(mtc_comm_t comm, int r) {
    if (r < 0 || r >= comm->size || !comm->be->host_of) return NULL;
    return comm->be->host_of(comm->be, comm->members[r]);
}

void mtc_comm_set_algo(mtc_comm_t comm, mtc_coll_t coll, mtc_algo_t algo) {
    if ((unsigned)coll >= MTC_COLL_COUNT || (unsigned)algo >= MTC_ALGO_COUNT) return;
    comm->algo[coll] = algo;
    comm->strict[coll] = 1;
}
mtc_algo_t mtc_comm_get_algo(mtc_comm_t comm, mtc_coll_t coll) {
    return (unsigned)coll < MTC_COLL_COUNT ? comm->algo[coll] : MTC_ALGO_AUTO;
}
void mtc_comm_set_trace(mtc_comm_t comm, struct mtc_trace *trace) {
    atomic_store_explicit(&(comm->root ? comm->root : comm)->trace, trace, memory_order_release);
}
void mtc_comm_set_timeout(mtc_comm_t comm, double seconds) {
    comm->timeout_s = seconds > 0 ? seconds : COMM_DEFAULT_TIMEOUT_S;
}

/* ---- objects ------------------------------------------------------------------- */

mtc_result_t comm_new(comm_backend *be, comm_group *group, const int *members, int n, int rank,
                      const char *name, const mtc_comm_t from, mtc_comm_t *out) {
    *out = NULL;
    mtc_comm_t c = calloc(1, sizeof *c);
    const int *shared = be->ops->group_members && group ? be->ops->group_members(group) : NULL;
    if (shared && memcmp(shared, members, (size_t)n * sizeof *shared)) shared = NULL;
    int *mem = shared ? NULL : malloc((size_t)n * sizeof *mem);
    if (!c || (!shared && !mem)) {
        free(c), free(mem);
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "cannot allocate a communicator of %d ranks", n);
    }
    if (mem) memcpy(mem, members, (size_t)n * sizeof *mem);
    c->be = be;
    c->group = group;
    c->rank = rank;
    c->size = n;
    c->members = shared ? shared : mem;
    c->members_copy = mem;
    c->owns_group = 1;
    snprintf(c->name, sizeof c->name, "%s", name && name[0] ? name : "unnamed group");
    c->timeout_s = from ? from->timeout_s : COMM_DEFAULT_TIMEOUT_S;
    if (from) {
        memcpy(c->algo, from->algo, sizeof c->algo);
        memcpy(c->strict, from->strict, sizeof c->strict);
        c->root = from->root ? from->root : from;
        c->live_next = c->root->live;
        if (c->live_next) c->live_next->live_prev = c;
        c->root->live = c;
    }
    int my_node = be->node_of(be, members[rank]);
    for (int i = 0; i < n; i++) {
        int node = be->node_of(be, members[i]), seen = 0;
        if (node == my_node) c->local_size++;
        for (int j = 0; j < i && !seen; j++)
            seen = be->node_of(be, members[j]) == node;
        if (!seen) c->node_count++;
    }
    *out = c;
    return MTC_OK;
}

static void live_unlink(mtc_comm_t c) {
    if (!c || !c->root) return;
    if (c->live_prev)
        c->live_prev->live_next = c->live_next;
    else if (c->root->live == c)
        c->root->live = c->live_next;
    if (c->live_next) c->live_next->live_prev = c->live_prev;
    c->live_prev = c->live_next = NULL; /* unlinking again is a no-op */
}

void mtc_comm_free(mtc_comm_t comm) {
    if (!comm) return;
    /* the world goes last: first every communicator the rank left behind
     * (their progress threads and groups would leak otherwise) */
    while (!comm->root && comm->live)
        mtc_comm_free(comm->live);
    live_unlink(comm);
    comm_queue_free(comm);
    mtc_comm_free(comm->intra);
    mtc_comm_free(comm->inter);
    if (comm->owns_group) comm->be->ops->group_free(comm->be, comm->group);
    mtc_mem_free_big(comm->scratch, comm->scratch_bytes);
    free(comm->p2p_n);
    free(comm->members_copy);
    free(comm);
}

/* now + seconds on the CLOCK_MONOTONIC time line, read from the coarse
 * clock (12 ns here against 73 ns for mtc_time_ns, which the 8 B
 * all-reduce would pay on every call; the deadline may come one clock tick,
 * a few ms, early, against timeouts of seconds). */
static uint64_t deadline_after(double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec +
           (uint64_t)(comm_timeout_clamp(seconds) * 1e9);
}

mtc_result_t comm_call_begin(mtc_comm_t comm, const comm_op *op, comm_call *call) {
    memset(call, 0, sizeof *call);
    call->seq = ++comm->seq;
    call->kind = op->kind;
    call->count = op->count;
    call->dtype = op->kind == MTC_COLL_BARRIER || op->kind >= MTC_COLL_COUNT ? -1 : (int)op->dtype;
    int reducing = op->kind == MTC_COLL_REDUCE || op->kind == MTC_COLL_ALL_REDUCE ||
                   op->kind == MTC_COLL_REDUCE_SCATTER || op->kind == MTC_COLL_REDUCE_SCATTER_V;
    call->op = reducing ? (int)op->op : -1;
    call->root = op->kind == MTC_COLL_BROADCAST || op->kind == MTC_COLL_REDUCE ||
                         op->kind == COMM_CALL_CREATE
                     ? op->root
                     : -1;
    call->deadline_ns = deadline_after(comm->timeout_s);
    call->group_name = comm->name;
    call->rank = comm->rank;
    return comm->be->ops->enter(comm->be, comm->group, call);
}

void comm_call_end(mtc_comm_t comm, comm_call *call) {
    comm->be->ops->leave(comm->be, comm->group, call);
}

/* ---- split / create -------------------------------------------------------------- */

static mtc_result_t build(mtc_comm_t parent, int color, int key, const int *members, int n,
                          int my_index, const char *name, const comm_call *call, mtc_comm_t *out) {
    comm_group *g = NULL;
    MTC_CHECK(parent->be->ops->group_create(parent->be, parent->group, color, key, members, n,
                                            my_index, call, &g));
    if (my_index < 0) return MTC_OK;
    mtc_result_t rc = comm_new(parent->be, g, members, n, my_index, name, parent, out);
    if (rc != MTC_OK) parent->be->ops->group_free(parent->be, g);
    return rc;
}

/* Runs inside the split call: gather (color, key), order, create. */
static mtc_result_t split_body(mtc_comm_t parent, int color, int key, const char *name,
                               const comm_call *call, mtc_comm_t *out) {
    int p = parent->size, mine[2] = {color, key};
    int *all = malloc((size_t)p * 3 * sizeof *all);
    if (!all) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "comm_split: no memory for %d ranks", p);
    int *members = all + 2 * p;
    comm_op g = {.kind = MTC_COLL_ALL_GATHER,
                 .sendbuf = mine,
                 .recvbuf = all,
                 .count = 2,
                 .dtype = MTC_DTYPE_I32};
    mtc_result_t rc =
        parent->be->ops->split_exchange
            ? parent->be->ops->split_exchange(parent->be, parent->group, mine, all, call)
            : comm_op_run(parent, &g);
    int n = 0, my_index = -1;
    if (rc == MTC_OK && color >= 0) {
        /* members of my color ordered by (key, parent rank): insertion sort */
        for (int r = 0; r < p; r++) {
            if (all[2 * r] != color) continue;
            int j = n++;
            while (j > 0 && all[2 * members[j - 1] + 1] > all[2 * r + 1]) {
                members[j] = members[j - 1];
                j--;
            }
            members[j] = r;
        }
        for (int i = 0; i < n; i++) {
            if (members[i] == parent->rank) my_index = i;
            members[i] = parent->members[members[i]];
        }
    }
    if (rc == MTC_OK) rc = build(parent, color, key, members, n, my_index, name, call, out);
    free(all);
    return rc;
}

mtc_result_t mtc_comm_split(mtc_comm_t parent, int color, int key, const char *name,
                            mtc_comm_t *out) {
    if (!out) return mtc_error(MTC_ERR_INVALID_ARGUMENT, "mtc_comm_split: out is NULL");
    *out = NULL;
    if (!parent) return mtc_error(MTC_ERR_INVALID_ARGUMENT, "mtc_comm_split: parent is NULL");
    comm_queue_drain(parent);
    comm_op op = {.kind = COMM_CALL_SPLIT, .dtype = MTC_DTYPE_I32, .root = -1};
    comm_call call;
    const comm_call *prev = parent->cur;
    mtc_result_t rc = comm_call_begin(parent, &op, &call);
    if (rc == MTC_OK) rc = split_body(parent, color < 0 ? -1 : color, key, name, &call, out);
    comm_call_end(parent, &call);
    parent->cur = prev;
    return rc;
}

mtc_result_t mtc_comm_create(mtc_comm_t parent, const int *ranks, int n, const char *name,
                             mtc_comm_t *out) {
    if (!out) return mtc_error(MTC_ERR_INVALID_ARGUMENT, "mtc_comm_create: out is NULL");
    *out = NULL;
    if (!parent) return mtc_error(MTC_ERR_INVALID_ARGUMENT, "mtc_comm_create: parent is NULL");
    if (n < 1 || n > parent->size || !ranks)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "mtc_comm_create: n=%d ranks must be 1..%d (the parent's size)", n,
                         parent->size);
    int my_index = -1;
    uint32_t hash = 2166136261u;
    for (int i = 0; i < n; i++) {
        if (ranks[i] < 0 || ranks[i] >= parent->size)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "mtc_comm_create: ranks[%d]=%d is not a rank of %s (0..%d)", i,
                             ranks[i], parent->name, parent->size - 1);
        for (int j = 0; j < i; j++)
            if (ranks[j] == ranks[i])
                return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                                 "mtc_comm_create: rank %d is listed twice", ranks[i]);
        if (ranks[i] == parent->rank) my_index = i;
        hash = (hash ^ (uint32_t)ranks[i]) * 16777619u;
    }
    int *members = malloc((size_t)n * sizeof *members);
    if (!members) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "mtc_comm_create: no memory");
    for (int i = 0; i < n; i++)
        members[i] = parent->members[ranks[i]];
    comm_queue_drain(parent);
    /* the list's hash rides in the signature, so ranks passing different lists are told */
    comm_op op = {.kind = COMM_CALL_CREATE,
                  .count = (size_t)n,
                  .dtype = MTC_DTYPE_I32,
                  .root = (int)(hash & 0x3fffffff)};
    comm_call call;
    const comm_call *prev = parent->cur;
    mtc_result_t rc = comm_call_begin(parent, &op, &call);
    if (rc == MTC_OK)
        rc =
            build(parent, my_index >= 0 ? 0 : -1, my_index, members, n, my_index, name, &call, out);
    comm_call_end(parent, &call);
    parent->cur = prev;
    free(members);
    return rc;
}

/* ---- services for algorithms (algo.h) -------------------------------------------- */

mtc_result_t comm_p2p_send(mtc_comm_t comm, int peer, const void *buf, size_t bytes) {
    MTC_ASSERT(comm->cur && peer >= 0 && peer < comm->size);
    return comm->be->ops->send(comm->be, comm->group, peer, comm->cur_tag, buf, bytes, comm->cur);
}

mtc_result_t comm_p2p_recv(mtc_comm_t comm, int peer, void *buf, size_t bytes) {
    MTC_ASSERT(comm->cur && peer >= 0 && peer < comm->size);
    return comm->be->ops->recv(comm->be, comm->group, peer, comm->cur_tag, buf, bytes, comm->cur);
}

mtc_result_t comm_p2p_sendrecv(mtc_comm_t comm, int dst, const void *sendbuf, size_t sendbytes,
                               int src, void *recvbuf, size_t recvbytes) {
    MTC_ASSERT(comm->cur && dst >= 0 && dst < comm->size && src >= 0 && src < comm->size);
    return comm->be->ops->sendrecv(comm->be, comm->group, dst, comm->cur_tag, sendbuf, sendbytes,
                                   src, recvbuf, recvbytes, comm->cur);
}

mtc_result_t comm_scratch(mtc_comm_t comm, size_t bytes, void **out) {
    if (bytes > comm->scratch_bytes) {
        size_t want = bytes < 4096 ? 4096 : bytes + bytes / 4;
        void *p;
        MTC_CHECK(mtc_mem_alloc_big(want, 1, &p));
        mtc_mem_free_big(comm->scratch, comm->scratch_bytes);
        comm->scratch = p;
        comm->scratch_bytes = want;
    }
    *out = comm->scratch;
    return MTC_OK;
}

int comm_node_split_pending(mtc_comm_t comm) { return comm->node_split_done < 0; }

mtc_result_t comm_node_split(mtc_comm_t comm, mtc_comm_t *intra, mtc_comm_t *inter) {
    if (comm->node_split_done <= 0) {
        comm->node_split_done = -1; /* building: the splits' own all-gathers run flat */
        mtc_comm_free(comm->intra); /* left by a split that failed half-way */
        mtc_comm_free(comm->inter);
        comm->intra = comm->inter = NULL;
        char name[96];
        int node = comm->be->node_of(comm->be, comm->members[comm->rank]);
        snprintf(name, sizeof name, "%s/intra-node", comm->name);
        mtc_result_t rc = mtc_comm_split(comm, node, comm->rank, name, &comm->intra);
        if (rc == MTC_OK) {
            live_unlink(comm->intra); /* owned (and freed) by comm */
            snprintf(name, sizeof name, "%s/inter-node", comm->name);
            /* the members of local rank k of every node (k = 0: the leaders) */
            rc = mtc_comm_split(comm, comm->intra->rank, comm->rank, name, &comm->inter);
            live_unlink(comm->inter);
        }
        comm->node_split_done = rc == MTC_OK;
        MTC_CHECK(rc);
    }
    *intra = comm->intra;
    *inter = comm->inter;
    return MTC_OK;
}

/* ---- user point-to-point ----------------------------------------------------------- */

static mtc_result_t p2p_check(mtc_comm_t comm, const void *buf, size_t count, mtc_dtype_t dtype,
                              int peer, const char *what) {
    if (!comm) return mtc_error(MTC_ERR_INVALID_ARGUMENT, "%s: comm is NULL", what);
    if ((unsigned)dtype >= MTC_DTYPE_COUNT)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "%s: dtype %d is not a mtc_dtype_t", what,
                         (int)dtype);
    if (peer < 0 || peer >= comm->size || peer == comm->rank)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "%s: peer %d is not another rank of %s (size %d, me %d)", what, peer,
                         comm->name, comm->size, comm->rank);
    if (count && !buf) return mtc_error(MTC_ERR_INVALID_ARGUMENT, "%s: buffer is NULL", what);
    return MTC_OK;
}

static void p2p_call(mtc_comm_t comm, int kind, size_t count, mtc_dtype_t dtype, int peer,
                     comm_call *c) {
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->count = count;
    c->dtype = (int)dtype;
    c->op = -1;
    c->root = peer;
    c->deadline_ns = deadline_after(comm->timeout_s);
    c->group_name = comm->name;
    c->rank = comm->rank;
}

mtc_result_t mtc_send(const void *buf, size_t count, mtc_dtype_t dtype, int peer, mtc_comm_t comm) {
    MTC_CHECK(p2p_check(comm, buf, count, dtype, peer, "mtc_send"));
    comm_queue_drain(comm);
    comm_call c;
    p2p_call(comm, MTC_COLL_SEND, count, dtype, peer, &c);
    struct mtc_trace *tr = comm_trace_of(comm);
    uint64_t t0 = tr ? mtc_time_ns() : 0;
    size_t bytes = count * mtc_dtype_size(dtype);
    mtc_result_t rc = comm->be->ops->send(comm->be, comm->group, peer, 0, buf, bytes, &c);
    if (tr && rc == MTC_OK) comm_trace_p2p(comm, tr, MTC_COLL_SEND, bytes, peer, -1, t0);
    return rc;
}

mtc_result_t mtc_recv(void *buf, size_t count, mtc_dtype_t dtype, int peer, mtc_comm_t comm) {
    MTC_CHECK(p2p_check(comm, buf, count, dtype, peer, "mtc_recv"));
    comm_queue_drain(comm);
    comm_call c;
    p2p_call(comm, MTC_COLL_RECV, count, dtype, peer, &c);
    struct mtc_trace *tr = comm_trace_of(comm);
    uint64_t t0 = tr ? mtc_time_ns() : 0;
    size_t bytes = count * mtc_dtype_size(dtype);
    mtc_result_t rc = comm->be->ops->recv(comm->be, comm->group, peer, 0, buf, bytes, &c);
    if (tr && rc == MTC_OK) comm_trace_p2p(comm, tr, MTC_COLL_RECV, bytes, -1, peer, t0);
    return rc;
}

mtc_result_t mtc_sendrecv(const void *sendbuf, size_t sendcount, int dst, void *recvbuf,
                          size_t recvcount, int src, mtc_dtype_t dtype, mtc_comm_t comm) {
    MTC_CHECK(p2p_check(comm, sendbuf, sendcount, dtype, dst, "mtc_sendrecv"));
    MTC_CHECK(p2p_check(comm, recvbuf, recvcount, dtype, src, "mtc_sendrecv"));
    comm_queue_drain(comm);
    comm_call c;
    p2p_call(comm, MTC_COLL_SENDRECV, sendcount, dtype, dst, &c);
    size_t es = mtc_dtype_size(dtype);
    struct mtc_trace *tr = comm_trace_of(comm);
    uint64_t t0 = tr ? mtc_time_ns() : 0;
    mtc_result_t rc = comm->be->ops->sendrecv(comm->be, comm->group, dst, 0, sendbuf,
                                              sendcount * es, src, recvbuf, recvcount * es, &c);
    if (tr && rc == MTC_OK)
        comm_trace_p2p(comm, tr, MTC_COLL_SENDRECV, (sendcount + recvcount) * es, dst, src, t0);
    return rc;
}
