/* comm/backend_mpi.c - the "mpi" backend: ranks are MPI processes (Open MPI
 * or MPICH). Implements comm/backend.h: groups as MPI communicators,
 * point-to-point as MPI_Isend/MPI_Irecv polled against the call's deadline,
 * node membership from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) (or fake
 * nodes of --ranks-per-node), a signature check on entering each collective,
 * and abort as MPI_Abort after printing the report.
 *
 * Relies on MPI-3 and MPI_THREAD_MULTIPLE (a communicator's progress thread
 * and the rank's own thread use different groups at once), on comm.c for
 * sequence numbers and call descriptions, and on coll_mpi.c for the native
 * collectives (the optional part of the ops table).
 *
 * Failure model: MPI_ERRORS_RETURN on every communicator, so an MPI error is
 * a result code, never a silent exit. A peer that does not answer by the
 * deadline gives MTC_ERR_TIMEOUT naming it; a peer that entered the same
 * collective number with another signature gives MTC_ERR_INVALID_USAGE
 * naming both calls (checked by exchanging signatures on a shadow
 * communicator in `enter`; opts->no_comm_check turns the check off to save one
 * small message exchange per collective). Both errors are sticky for the
 * group. A process that dies is handled by the launcher: mpirun ends the job.
 *
 * Waiting: every wait polls MPI_Test (the native collectives are MPI's
 * non-blocking forms, coll_mpi.c) for about 64 polls, then leaves a wait
 * record and backs off to naps of up to 1 ms (watchdog.h), so a rank stuck
 * waiting for seconds costs little CPU. At the deadline it asks the peers
 * it waited for what they are doing (watch_mpi.c) and the report names the
 * cause: a peer that does not answer or is in no mtc call, versus a peer
 * blocked itself (whose own report names the cause).
 *
 * Nodes and hosts: node membership comes from the shared-memory split; host
 * names (MPI_Get_processor_name) are gathered once so reports say where a
 * rank runs ("rank 3 on mtc-b") when the job spans hosts. Oversubscription
 * (a node's ranks outnumber the cores of their affinity mask) is checked
 * twice: before MPI_Init from the launcher's local-size variable, to set
 * Open MPI's mpi_yield_when_idle (OMPI_MCA_mpi_yield_when_idle=1, when the
 * user has not set it) so MPI's own polling yields the core; after it from
 * the split, to make mtc's waits yield from the first poll
 * (comm_backoff_set_yield) and to report it in one line from world rank 0.
 *
 * Does not: choose algorithms or number calls; time out inside
 * MPI_Comm_split (blocking; the watchdog thread ends the job if it stays
 * there past the deadline + 3 s). */
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "comm/backend.h"
#include "comm/coll_mpi.h"
#include "comm/watchdog.h"
#include "core/log.h"
#include "core/timer.h"

/* Largest message MPI moves in one call here (counts are int). */
#define MPI_CHUNK ((size_t)1 << 30)
/* Polls before a wait leaves its record (then it backs off, watchdog.h). */
#define MPI_SPINS 64

typedef struct {
    int own_init; /* we called MPI_Init_thread, so finalize calls MPI_Finalize */
    int check;    /* signature check in enter */
    int tag_ub;
    int *node;        /* node index of each world rank (fake nodes with --ranks-per-node) */
    int *node_real;   /* node index from the shared-memory split */
    char (*host)[64]; /* MPI_Get_processor_name of each world rank */
    char (*note)[72]; /* " on HOST" per world rank ("" when the job runs on one host) */
    MPI_Comm finish;  /* a private dup of MPI_COMM_WORLD for the end-of-job barrier */
    comm_wait_rec wait;
    comm_backend be;
} mpi_ctx;

/* The process's one mpi backend, for comm_mpi_host_note. */
static const mpi_ctx *the_ctx;

const char *comm_mpi_host_note(int world_rank) {
    const mpi_ctx *c = the_ctx;
    if (!c || !c->note || world_rank < 0 || world_rank >= c->be.world_size) return "";
    return c->note[world_rank];
}

/* ---- errors ----------------------------------------------------------------- */

static mtc_result_t group_fail(comm_group *g, mtc_result_t rc, const char *msg) {
    if (!g->err_rc) {
        g->err_rc = rc;
        snprintf(g->err_msg, sizeof g->err_msg, "%s", msg);
    }
    return mtc_error(g->err_rc, "%s", g->err_msg);
}

static mtc_result_t group_health(comm_group *g) {
    return g->err_rc ? mtc_error(g->err_rc, "%s", g->err_msg) : MTC_OK;
}

mtc_result_t coll_mpi_error(comm_group *g, int err, const char *what, const comm_call *call) {
    char s[MPI_MAX_ERROR_STRING] = "", d[160] = "?", msg[700];
    int len = 0;
    MPI_Error_string(err, s, &len);
    if (call) comm_call_describe(call, d, sizeof d);
    snprintf(msg, sizeof msg, "MPI error in %s of %s (rank %d%s, %s): %s", what,
             call && call->group_name ? call->group_name : "?", g->me,
             comm_mpi_host_note(g->members[g->me]), d, s);
    int cls = 0;
    MPI_Error_class(err, &cls);
    return group_fail(g, cls == MPI_ERR_TRUNCATE ? MTC_ERR_INVALID_USAGE : MTC_ERR_REMOTE, msg);
}

static void describe_peer(const comm_group *g, int peer, char *buf, size_t len) {
    const char *on = comm_mpi_host_note(g->members[peer]);
    if (g->members[peer] == peer)
        snprintf(buf, len, "rank %d%s", peer, on);
    else
        snprintf(buf, len, "group rank %d (world rank %d)%s", peer, g->members[peer], on);
}

static mtc_result_t report_timeout(comm_group *g, const comm_call *call, const char *waiting_for) {
    char d[160] = "?", msg[1200];
    if (call) comm_call_describe(call, d, sizeof d);
    const char *name = call && call->group_name ? call->group_name : "?";
    const char *on = comm_mpi_host_note(g->members[g->me]);
    if (!call || call->seq == 0)
        snprintf(msg, sizeof msg, "timeout in %s: rank %d%s waited in %s for %s", name, g->me, on,
                 d, waiting_for);
    else
        snprintf(msg, sizeof msg, "timeout in %s (seq %llu): rank %d%s waited in %s for %s", name,
                 (unsigned long long)call->seq, g->me, on, d, waiting_for);
    return group_fail(g, MTC_ERR_TIMEOUT, msg);
}

/* ---- waiting ------------------------------------------------------------------ */

/* Poll reqs[0..n) to completion or the call's deadline. On timeout, the
 * peers of the first nname pending requests are named, followed by
 * `pending` ("which has not entered this call"). `what` names the MPI step
 * in error reports. */
static mtc_result_t mpi_wait(comm_group *g, MPI_Request *reqs, MPI_Status *st, int n,
                             const int *peers, int nname, const char *what, const char *pending,
                             size_t bytes, const comm_call *call) {
    uint64_t deadline = call ? call->deadline_ns : 0;
    int left = 0, marked = 0;
    for (int i = 0; i < n; i++)
        left += reqs[i] != MPI_REQUEST_NULL;
    comm_backoff bo;
    comm_backoff_init(&bo, bytes);
    mtc_result_t rc = MTC_OK;
    for (long it = 0; left; it++) {
        for (int i = 0; i < n; i++) {
            if (reqs[i] == MPI_REQUEST_NULL) continue;
            int done = 0, err = MPI_Test(&reqs[i], &done, &st[i]);
            if (err != MPI_SUCCESS) {
                rc = coll_mpi_error(g, err, what, call);
                goto out;
            }
            if (done) left--;
        }
        if (!left) break;
        if (!marked && it == MPI_SPINS && call) { /* slow path: leave a wait record */
            int who = -1;
            for (int i = 0; i < nname && who < 0; i++)
                if (reqs[i] != MPI_REQUEST_NULL) who = g->members[peers[i]];
            comm_wait_begin(g->wait, call, who);
            marked = 1;
        }
        comm_backoff_pause(&bo);
        if (deadline && (it & 15) == 0 && mtc_time_ns() >= deadline) {
            char who[400] = "";
            int ask[64], nask = 0;
            size_t off = 0;
            for (int i = 0; i < nname && off + 48 < sizeof who; i++) {
                if (reqs[i] == MPI_REQUEST_NULL) continue;
                char p[48];
                describe_peer(g, peers[i], p, sizeof p);
                off += (size_t)snprintf(who + off, sizeof who - off, "%s%s", off ? ", " : "", p);
                if (nask < 64) ask[nask++] = peers[i];
            }
            /* nobody named (MPI's own collective): ask every member */
            for (int q = 0; !off && q < g->n && nask < 64; q++)
                if (q != g->me) ask[nask++] = q;
            char w[1000];
            snprintf(w, sizeof w, "%s%s", off ? who : "its peers", pending);
            if (!marked) comm_wait_begin(g->wait, call, -1);
            comm_wait_timed_out(g->wait); /* askers now learn that this rank is blocked */
            marked = 0;
            comm_mpi_watch_diagnose(g, call, ask, nask, w, sizeof w);
            rc = report_timeout(g, call, w);
            goto out;
        }
    }
out:
    if (marked) comm_wait_end(g->wait);
    return rc;
}

mtc_result_t coll_mpi_wait(comm_group *g, MPI_Request *req, const char *what, size_t bytes,
                           const comm_call *call) {
    MPI_Status st;
    return mpi_wait(g, req, &st, 1, NULL, 0, what, " (in MPI's own collective)", bytes, call);
}

static int mpi_tag(const comm_backend *be, uint32_t tag) {
    const mpi_ctx *c = be->ctx;
    return tag == 0 ? 0 : 1 + (int)((tag - 1) % (uint32_t)c->tag_ub);
}

/* ---- point-to-point ------------------------------------------------------------ */

/* Check a completed receive got exactly `bytes`. */
static mtc_result_t recv_size_ok(comm_group *g, int peer, const MPI_Status *st, size_t bytes,
                                 const comm_call *call) {
    int got = 0;
    MPI_Get_count(st, MPI_BYTE, &got);
    if ((size_t)got == bytes) return MTC_OK;
    char d[160] = "?", p[48], msg[500];
    if (call) comm_call_describe(call, d, sizeof d);
    describe_peer(g, peer, p, sizeof p);
    snprintf(msg, sizeof msg,
             "message size mismatch in %s: rank %d expected %zu bytes from %s "
             "in %s but got %d (the two ranks called different collectives or counts)",
             call && call->group_name ? call->group_name : "?", g->me, bytes, p, d, got);
    return group_fail(g, MTC_ERR_INVALID_USAGE, msg);
}

/* One round of at most one chunk each way; dst/src < 0 means no message. */
static mtc_result_t p2p_round(comm_group *g, int dst, const char *sb, size_t sn, int src, char *rb,
                              size_t rn, int tag, const comm_call *call) {
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    MPI_Status st[2];
    int peers[2] = {src, dst}, err;
    if (src >= 0) {
        err = MPI_Irecv(rb, (int)rn, MPI_BYTE, src, tag, g->comm, &req[0]);
        if (err != MPI_SUCCESS) return coll_mpi_error(g, err, "MPI_Irecv", call);
    }
    if (dst >= 0) {
        err = MPI_Isend(sb, (int)sn, MPI_BYTE, dst, tag, g->comm, &req[1]);
        if (err != MPI_SUCCESS) return coll_mpi_error(g, err, "MPI_Isend", call);
    }
    const char *what = src >= 0 && dst >= 0 ? "sendrecv" : src >= 0 ? "recv" : "send";
    MTC_CHECK(mpi_wait(g, req, st, 2, peers, 2, what, " (message not completed)", sn + rn, call));
    if (src >= 0) MTC_CHECK(recv_size_ok(g, src, &st[0], rn, call));
    return MTC_OK;
}

static size_t chunks_of(size_t bytes) { return bytes ? (bytes + MPI_CHUNK - 1) / MPI_CHUNK : 1; }

/* Messages above MPI_CHUNK travel as several (both sides cut alike); an
 * empty message is still one message, so sizes are always checked. */
static mtc_result_t mpi_sendrecv(comm_backend *be, comm_group *g, int dst, uint32_t tag,
                                 const void *sendbuf, size_t sendbytes, int src, void *recvbuf,
                                 size_t recvbytes, const comm_call *call) {
    MTC_CHECK(group_health(g));
    const int t = mpi_tag(be, tag);
    size_t ns = dst >= 0 ? chunks_of(sendbytes) : 0, nr = src >= 0 ? chunks_of(recvbytes) : 0;
    for (size_t i = 0; i < ns || i < nr; i++) {
        size_t so = i * MPI_CHUNK, ro = i * MPI_CHUNK;
        size_t sn = i < ns ? (sendbytes - so < MPI_CHUNK ? sendbytes - so : MPI_CHUNK) : 0;
        size_t rn = i < nr ? (recvbytes - ro < MPI_CHUNK ? recvbytes - ro : MPI_CHUNK) : 0;
        MTC_CHECK(p2p_round(g, i < ns ? dst : -1, (const char *)sendbuf + (i < ns ? so : 0), sn,
                            i < nr ? src : -1, (char *)recvbuf + (i < nr ? ro : 0), rn, t, call));
    }
    return MTC_OK;
}

static mtc_result_t mpi_send(comm_backend *be, comm_group *g, int peer, uint32_t tag,
                             const void *buf, size_t bytes, const comm_call *call) {
    return mpi_sendrecv(be, g, peer, tag, buf, bytes, -1, NULL, 0, call);
}

static mtc_result_t mpi_recv(comm_backend *be, comm_group *g, int peer, uint32_t tag, void *buf,
                             size_t bytes, const comm_call *call) {
    return mpi_sendrecv(be, g, -1, tag, NULL, 0, peer, buf, bytes, call);
}

/* ---- entry check ------------------------------------------------------------- */

/* Every member sends (seq, signature, count) to every other on the shadow
 * communicator and compares what it receives with its own call. */
static mtc_result_t mpi_enter(comm_backend *be, comm_group *g, const comm_call *call) {
    const mpi_ctx *c = be->ctx;
    MTC_CHECK(group_health(g));
    if (!c->check || !call || call->seq == 0 || g->n == 1) return MTC_OK;
    uint64_t *mine = g->sig, *theirs = g->sig + 4;
    mine[0] = call->seq;
    mine[1] = (uint64_t)(uint8_t)call->kind | (uint64_t)(uint8_t)(call->dtype + 1) << 8 |
              (uint64_t)(uint8_t)(call->op + 1) << 16 | (uint64_t)(uint32_t)(call->root + 1) << 24;
    mine[2] = (uint64_t)call->count;
    mine[3] = 0;
    int k = 0;
    for (int q = 0; q < g->n; q++) {
        if (q == g->me) continue;
        int err = MPI_Irecv(theirs + 4 * q, 4, MPI_UINT64_T, q, 0, g->shadow, &g->reqs[k]);
        if (err == MPI_SUCCESS)
            err = MPI_Isend(mine, 4, MPI_UINT64_T, q, 0, g->shadow, &g->reqs[g->n - 1 + k]);
        if (err != MPI_SUCCESS) return coll_mpi_error(g, err, "the entry check", call);
        g->peers[k] = g->peers[g->n - 1 + k] = q;
        k++;
    }
    MTC_CHECK(mpi_wait(g, g->reqs, g->stats, 2 * (g->n - 1), g->peers, g->n - 1, "the entry check",
                       ", which has not entered this call", 0, call));
    for (int q = 0; q < g->n; q++) {
        const uint64_t *t = theirs + 4 * q;
        if (q == g->me || (t[0] == mine[0] && t[1] == mine[1] && t[2] == mine[2])) continue;
        comm_call other = *call;
        other.seq = t[0];
        other.kind = (int)(t[1] & 0xff);
        other.dtype = (int)((t[1] >> 8) & 0xff) - 1;
        other.op = (int)((t[1] >> 16) & 0xff) - 1;
        other.root = (int)(uint32_t)(t[1] >> 24) - 1;
        other.count = (size_t)t[2];
        const comm_call *ca = call, *cb = &other;
        int a = g->me, b = q;
        if (a > b) { /* lower rank first, so both ranks print the same line */
            ca = &other, cb = call, a = q, b = g->me;
        }
        char da[160], db[160], msg[700];
        comm_call_describe(ca, da, sizeof da);
        comm_call_describe(cb, db, sizeof db);
        snprintf(
            msg, sizeof msg,
            "collective mismatch in %s (seq %llu): rank %d%s called %s but rank %d%s called %s",
            call->group_name ? call->group_name : "?", (unsigned long long)call->seq, a,
            comm_mpi_host_note(g->members[a]), da, b, comm_mpi_host_note(g->members[b]), db);
        return group_fail(g, MTC_ERR_INVALID_USAGE, msg);
    }
    return MTC_OK;
}

static void mpi_leave(comm_backend *be, comm_group *g, const comm_call *call) {
    (void)be, (void)g, (void)call;
}

static void mpi_abort(comm_backend *be, mtc_result_t rc, const char *msg) {
    comm_mpi_watch_farewell(rc ? rc : MTC_ERR_REMOTE);
    fprintf(stderr, "mtc: rank %d%s failed with %s: %s\nmtc: aborting the MPI job\n",
            be->world_rank, comm_mpi_host_note(be->world_rank), mtc_result_name(rc),
            msg ? msg : "");
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, rc ? (int)rc : 1);
}

/* ---- groups -------------------------------------------------------------------- */

static void group_free(comm_backend *be, comm_group *g) {
    (void)be;
    if (!g) return;
    if (g->comm != MPI_COMM_NULL) MPI_Comm_free(&g->comm);
    if (g->shadow != MPI_COMM_NULL) MPI_Comm_free(&g->shadow);
    free(g->members);
    free(g->sig);
    free(g->reqs);
    free(g->stats);
    free(g->peers);
    free(g->scratch);
    free(g);
}

/* Wrap an MPI communicator we own (freed with the group). */
static mtc_result_t group_wrap(comm_backend *be, MPI_Comm comm, const int *members,
                               comm_group **out) {
    comm_group *g = calloc(1, sizeof *g);
    if (!g) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "mpi backend: no memory for a group");
    g->wait = be->wait;
    g->comm = comm;
    g->shadow = MPI_COMM_NULL;
    MPI_Comm_rank(comm, &g->me);
    MPI_Comm_size(comm, &g->n);
    int err = MPI_Comm_dup(comm, &g->shadow);
    size_t n = (size_t)g->n;
    g->members = malloc(n * sizeof *g->members);
    g->sig = calloc(4 * (n + 1), sizeof *g->sig);
    g->reqs = malloc(2 * n * sizeof *g->reqs);
    g->stats = malloc(2 * n * sizeof *g->stats);
    g->peers = malloc(2 * n * sizeof *g->peers);
    if (err != MPI_SUCCESS || !g->members || !g->sig || !g->reqs || !g->stats || !g->peers) {
        group_free(NULL, g);
        return mtc_error(MTC_ERR_SYSTEM,
                         "mpi backend: could not set up a communicator of %zu ranks", n);
    }
    for (size_t i = 0; i < n; i++)
        g->members[i] = members ? members[i] : (int)i;
    *out = g;
    return MTC_OK;
}

static mtc_result_t group_create(comm_backend *be, comm_group *parent, int color, int key,
                                 const int *members, int n, int my_index, const comm_call *call,
                                 comm_group **out) {
    MPI_Comm c = MPI_COMM_NULL;
    *out = NULL;
    MTC_CHECK(group_health(parent));
    /* MPI_Comm_split and the MPI_Comm_dup in group_wrap block without a
     * deadline: the wait record lets the watchdog (watch_mpi.c) end the job
     * if they never return */
    comm_wait_begin(be->wait, call, -1);
    int err = MPI_Comm_split(parent->comm, color < 0 ? MPI_UNDEFINED : color, key, &c);
    mtc_result_t rc = MTC_OK;
    if (err != MPI_SUCCESS)
        rc = coll_mpi_error(parent, err, "MPI_Comm_split", call);
    else if (c != MPI_COMM_NULL)
        rc = group_wrap(be, c, members, out);
    comm_wait_end(be->wait);
    if (rc != MTC_OK || c == MPI_COMM_NULL) return rc;
    comm_group *g = *out;
    if (g->n != n || g->me != my_index) {
        group_free(be, g);
        *out = NULL;
        return mtc_error(
            MTC_ERR_INTERNAL,
            "mpi backend: MPI_Comm_split gave rank %d of %d but comm.c expected %d of %d", g->me,
            g->n, my_index, n);
    }
    return MTC_OK;
}

/* ---- world ------------------------------------------------------------------- */

static int node_of(const comm_backend *be, int world_rank) {
    const mpi_ctx *c = be->ctx;
    return c->node[world_rank];
}

static const int *mpi_group_members(const comm_group *g) { return g->members; }

static const comm_backend_ops mpi_ops = {
    .name = "mpi",
    .group_create = group_create,
    .group_free = group_free,
    .group_members = mpi_group_members,
    .send = mpi_send,
    .recv = mpi_recv,
    .sendrecv = mpi_sendrecv,
    .enter = mpi_enter,
    .leave = mpi_leave,
    .abort = mpi_abort,
    .barrier = coll_mpi_barrier,
    .broadcast = coll_mpi_broadcast,
    .reduce = coll_mpi_reduce,
    .all_reduce = coll_mpi_all_reduce,
    .reduce_scatter = coll_mpi_reduce_scatter,
    .all_gather = coll_mpi_all_gather,
    .all_to_all = coll_mpi_all_to_all,
};

/* Cores in an affinity mask. */
static int mask_cores(const cpu_set_t *set) { return CPU_COUNT(set); }

/* Before MPI_Init, from the launcher's variables: when this node's ranks
 * outnumber the cores they share (no binding by the launcher, so they all
 * inherited this mask), ask Open MPI to yield the core when it polls idle
 * (its blocking waits and progress spin otherwise: two ranks on one core
 * took 1208 ms an iteration against 7.7 ms with yielding). A value the
 * user set is kept. Returns 1 when this process set it. */
static int yield_setting_before_init(void) {
    /* the launcher's and Open MPI's own variables (not mtc configuration) */
    const char *v = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!v) v = getenv("MPI_LOCALNRANKS");
    if (!v) v = getenv("PMIX_LOCAL_SIZE");
    const char *bound = getenv("OMPI_MCA_orte_bound_at_launch");
    cpu_set_t set;
    int local = v ? atoi(v) : 0;
    if (local < 2 || (bound && !strcmp(bound, "1")) || getenv("OMPI_MCA_mpi_yield_when_idle") ||
        sched_getaffinity(0, sizeof set, &set) != 0 || local <= mask_cores(&set))
        return 0;
    return setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0) == 0;
}

/* After MPI_Init: on each node (the shared-memory split), how many ranks
 * and how many distinct cores their masks allow; a node with more ranks
 * than cores makes its ranks' waits yield at once, and world rank 0 says
 * so in one line for every such node. comm: all-reduce(node), all-gather(world). */
static void oversubscription_check(mpi_ctx *c, MPI_Comm local, int set_yield) {
    int p = c->be.world_size, r = c->be.world_rank, nlocal = 0;
    cpu_set_t mine, all;
    CPU_ZERO(&mine);
    if (sched_getaffinity(0, sizeof mine, &mine) != 0) return;
    MPI_Comm_size(local, &nlocal);
    if (MPI_Allreduce(&mine, &all, (int)sizeof mine, MPI_BYTE, MPI_BOR, local) != MPI_SUCCESS)
        return;
    int me[2] = {nlocal, mask_cores(&all)}, *each = malloc(2 * (size_t)p * sizeof *each);
    if (!each) return;
    if (MPI_Allgather(me, 2, MPI_INT, each, 2, MPI_INT, MPI_COMM_WORLD) != MPI_SUCCESS) {
        free(each);
        return;
    }
    if (me[0] > me[1]) comm_backoff_set_yield(1);
    char line[900] = "";
    size_t off = 0;
    int shown = 0;
    for (int w = 0; w < p && r == 0; w++) {
        int first = 1; /* the lowest world rank of its node speaks for the node */
        for (int v = 0; v < w && first; v++)
            first = c->node_real[v] != c->node_real[w];
        if (!first || each[2 * w] <= each[2 * w + 1]) continue;
        if (shown++ < 8 && off + 100 < sizeof line)
            off += (size_t)snprintf(line + off, sizeof line - off, "%s%d ranks on %d core%s on %s",
                                    shown > 1 ? ", " : "", each[2 * w], each[2 * w + 1],
                                    each[2 * w + 1] == 1 ? "" : "s", c->host[w]);
    }
    free(each);
    if (!shown) return;
    const char *y = getenv("OMPI_MCA_mpi_yield_when_idle");
    fprintf(stderr,
            "mtc: oversubscribed: %s%s; waiting ranks yield the core (mtc's waits%s); give "
            "each rank a core for speed\n",
            line, shown > 8 ? ", ..." : "",
            set_yield                  ? ", and Open MPI's: mpi_yield_when_idle=1 was set"
            : y && strcmp(y, "0") != 0 ? ", and Open MPI's: mpi_yield_when_idle is set"
                                       : "; Open MPI's spin: pass --mca mpi_yield_when_idle 1");
    fflush(stderr);
}

/* node[w] = index of world rank w's node, nodes numbered by their lowest
 * rank (lead[w] = the lowest rank on w's node); *count = the number. */
static void number_nodes(const int *lead, int p, int *node, int *count) {
    for (int w = 0; w < p; w++) {
        int idx = 0;
        for (int v = 0; v < w; v++)
            idx += lead[v] == v && v < lead[w];
        node[w] = lead[w] == w ? idx : -1;
    }
    *count = 0;
    for (int w = 0; w < p; w++) {
        if (node[w] < 0) node[w] = node[lead[w]];
        if (node[w] + 1 > *count) *count = node[w] + 1;
    }
}

/* Node index of every world rank: from the shared-memory split, or fake
 * nodes of ranks_per_node; host names of every rank; then the
 * oversubscription check. comm: split + all-gathers over the world. */
static mtc_result_t nodes_init(mpi_ctx *c, int ranks_per_node, int set_yield) {
    int p = c->be.world_size, r = c->be.world_rank;
    int *lead = malloc((size_t)p * sizeof *lead);
    c->node = malloc((size_t)p * sizeof *c->node);
    c->node_real = malloc((size_t)p * sizeof *c->node_real);
    c->host = calloc((size_t)p, sizeof *c->host);
    c->note = calloc((size_t)p, sizeof *c->note);
    if (!lead || !c->node || !c->node_real || !c->host || !c->note) {
        free(lead);
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "mpi backend: no memory for the node map");
    }
    MPI_Comm local = MPI_COMM_NULL;
    int err = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, r, MPI_INFO_NULL, &local);
    int first = r;
    if (err == MPI_SUCCESS) err = MPI_Allreduce(&r, &first, 1, MPI_INT, MPI_MIN, local);
    if (err == MPI_SUCCESS)
        err = MPI_Allgather(&first, 1, MPI_INT, lead, 1, MPI_INT, MPI_COMM_WORLD);
    char name[MPI_MAX_PROCESSOR_NAME + 1] = "", mine[sizeof c->host[0]] = "";
    int len = 0;
    if (err == MPI_SUCCESS) err = MPI_Get_processor_name(name, &len);
    snprintf(mine, sizeof mine, "%.*s", (int)sizeof mine - 1, name);
    if (err == MPI_SUCCESS)
        err = MPI_Allgather(mine, (int)sizeof mine, MPI_CHAR, c->host, (int)sizeof mine, MPI_CHAR,
                            MPI_COMM_WORLD);
    if (err != MPI_SUCCESS) {
        if (local != MPI_COMM_NULL) MPI_Comm_free(&local);
        free(lead);
        return mtc_error(MTC_ERR_SYSTEM, "mpi backend: could not find the ranks of each node "
                                         "(MPI_Comm_split_type failed); pass --ranks-per-node");
    }
    int real_nodes = 0;
    number_nodes(lead, p, c->node_real, &real_nodes);
    int hosts = 0;
    for (int w = 0; w < p; w++) {
        c->host[w][sizeof c->host[w] - 1] = 0;
        int seen = 0;
        for (int v = 0; v < w && !seen; v++)
            seen = !strcmp(c->host[v], c->host[w]);
        hosts += !seen;
    }
    for (int w = 0; w < p && hosts > 1; w++)
        snprintf(c->note[w], sizeof c->note[w], " on %s", c->host[w]);
    oversubscription_check(c, local, set_yield);
    MPI_Comm_free(&local);
    if (ranks_per_node > 0) {
        for (int w = 0; w < p; w++)
            lead[w] = w / ranks_per_node * ranks_per_node;
        number_nodes(lead, p, c->node, &c->be.node_count);
    } else {
        memcpy(c->node, c->node_real, (size_t)p * sizeof *c->node);
        c->be.node_count = real_nodes;
    }
    free(lead);
    return MTC_OK;
}

static const char *host_of(const comm_backend *be, int world_rank) {
    const mpi_ctx *c = be->ctx;
    return c->host[world_rank];
}

mtc_result_t comm_mpi_backend_init(const mtc_launch_opts *opts, comm_backend **out) {
    int inited = 0, provided = 0;
    *out = NULL;
    MPI_Initialized(&inited);
    mpi_ctx *c = calloc(1, sizeof *c);
    if (!c) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "mpi backend: no memory");
    int set_yield = 0;
    if (!inited) {
        set_yield = yield_setting_before_init();
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
            free(c);
            return mtc_error(MTC_ERR_SYSTEM, "MPI_Init_thread failed; is this an MPI launch?");
        }
        c->own_init = 1;
    } else {
        MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_MULTIPLE)
        MTC_WARN("the MPI library gives thread level %d, not MPI_THREAD_MULTIPLE: non-blocking "
                 "collectives may misbehave (rebuild MPI with thread support)",
                 provided);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &c->be.world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->be.world_size);
    int *ub = NULL, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    c->tag_ub = flag && ub && *ub > 1 ? *ub : 32767;
    c->check = !(opts && opts->no_comm_check);
    c->be.ops = &mpi_ops;
    c->be.ctx = c;
    comm_wait_rec_init(&c->wait);
    c->be.wait = &c->wait;
    c->be.shared_memory = 0;
    c->be.node_of = node_of;
    c->be.host_of = host_of;
    c->be.abort_hook = opts ? opts->abort_hook : NULL;
    c->be.abort_arg = opts ? opts->abort_arg : NULL;
    the_ctx = c;

    mtc_result_t rc = nodes_init(c, opts ? opts->ranks_per_node : 0, set_yield);
    MPI_Comm w = MPI_COMM_NULL;
    c->finish = MPI_COMM_NULL;
    if (rc == MTC_OK && MPI_Comm_dup(MPI_COMM_WORLD, &c->finish) != MPI_SUCCESS)
        rc = mtc_error(MTC_ERR_SYSTEM, "mpi backend: MPI_Comm_dup(MPI_COMM_WORLD) failed");
    if (rc == MTC_OK && MPI_Comm_dup(MPI_COMM_WORLD, &w) != MPI_SUCCESS)
        rc = mtc_error(MTC_ERR_SYSTEM, "mpi backend: MPI_Comm_dup(MPI_COMM_WORLD) failed");
    if (rc == MTC_OK) rc = group_wrap(&c->be, w, NULL, &c->be.world);
    if (rc == MTC_OK) rc = coll_mpi_init();
    /* the watchdog thread calls MPI beside the rank: only with THREAD_MULTIPLE */
    if (rc == MTC_OK && provided >= MPI_THREAD_MULTIPLE) rc = comm_mpi_watch_start(&c->be);
    if (rc != MTC_OK) {
        comm_mpi_backend_finalize(&c->be);
        return rc;
    }
    *out = &c->be;
    return MTC_OK;
}

/* Wait (polling, so this process stays responsive) until every rank has
 * finished its work. MPI_Finalize alone would block in the runtime's own
 * fence, and a job whose other ranks then call MPI_Abort was seen to hang
 * there about once in seven runs with Open MPI 4.1. A rank that waits more
 * than twice the collective timeout plus 10 s ends the job itself, so a
 * peer that never finishes cannot keep it alive. The barrier runs on a
 * private communicator: it numbers no collective of WORLD. */
void comm_mpi_backend_finish(comm_backend *be, double timeout_s) {
    mpi_ctx *c = be->ctx;
    if (c->finish == MPI_COMM_NULL || be->world_size < 2) return;
    MPI_Request req;
    if (MPI_Ibarrier(c->finish, &req) != MPI_SUCCESS) return;
    uint64_t limit = (uint64_t)((2 * comm_timeout_clamp(timeout_s) + 10) * 1e9);
    uint64_t t0 = mtc_time_ns();
    comm_backoff bo;
    comm_backoff_init(&bo, 0);
    for (long it = 0;; it++) {
        int done = 0;
        if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done) return;
        comm_backoff_pause(&bo);
        if ((it & 15) == 0 && mtc_time_ns() - t0 > limit) {
            char msg[200];
            snprintf(msg, sizeof msg,
                     "this rank finished but the others did not reach the end of the job "
                     "within %.0f s",
                     (double)limit * 1e-9);
            mpi_abort(be, MTC_ERR_TIMEOUT, msg);
        }
    }
}

void comm_mpi_backend_finalize(comm_backend *be) {
    if (!be) return;
    mpi_ctx *c = be->ctx;
    comm_mpi_watch_stop();
    if (c->finish != MPI_COMM_NULL) MPI_Comm_free(&c->finish);
    group_free(be, be->world);
    be->world = NULL;
    coll_mpi_fini();
    free(c->node);
    free(c->node_real);
    free(c->host);
    free(c->note);
    if (the_ctx == c) the_ctx = NULL;
    comm_backoff_set_yield(0);
    comm_wait_rec_destroy(&c->wait);
    int own = c->own_init, fin = 0;
    free(c);
    MPI_Finalized(&fin);
    if (own && !fin) MPI_Finalize();
}
