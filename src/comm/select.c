/* comm/select.c - which algorithm runs a collective, and running it.
 *
 * An alpha-beta model per algorithm (alpha per message step or phase sync,
 * beta per byte moved, gamma per byte reduced) picks the cheapest usable
 * algorithm for (operation, bytes, group size, backend). A forced choice
 * (mtc_comm_set_algo, MTC_COMM_ALGO / launch algo_spec "op=algo,...")
 * wins; if it cannot run on a communicator (direct on mpi, hier on one
 * node, native without MPI) the call fails with MTC_ERR_INVALID_ARGUMENT
 * naming the valid choices. The bare form ("ring") is a preference for
 * every operation that has that algorithm and falls back to the model where
 * it cannot run. Native collectives that refuse a call (counts beyond
 * INT_MAX on MPI) fall back explicitly to ring/tree/pairwise; bf16 is native
 * on MPI too (user-defined reduction operators, coll_mpi.c).
 *
 * Constants (microseconds), calibrated on the 2-core VM (AMD EPYC, load
 * 10-15 from other jobs while measuring) with
 *   mtc bench-comm --world-size 2 --algo all --sizes 8,4K,64K,1M,8M --iters 30
 * (median) and a min-of-20000 loop of 8 B all-reduces:
 *   direct 8 B: 0.43 us min / 1.5 us median, one sync   -> DIRECT_SYNC 0.4
 *     (since the one-cache-line path for <= 104 B: 0.28-0.3 us median at
 *     load 5-6, so 0.4 stays an upper estimate; kept, the ranking holds)
 *   direct 1 MiB: 54 us min / 78 us median               -> DIRECT_BETA 7.5e-5 /B
 *   ring 8 B: 3.4 us median over 2 message steps         -> P2P_ALPHA 1.2
 *   ring 1 MiB: 470 us = N beta + N/2 gamma              -> P2P_BETA 4e-4 /B
 *   comm_reduce_local f32, 1 MiB in cache: 29 us (36 GB/s) -> GAMMA 3e-5 /B
 *   8 MiB and up are DRAM bound here (memcpy 2 GB/s): direct 16 ms, ring 30 ms
 *   at 8 MiB, so the model's ranking holds there too.
 * Oversubscribed (more ranks than cores) every sync becomes yields or a
 * futex sleep: 8 B direct all-reduce 50-85 us mean on 4-8 ranks, ring 8 B
 * ~240 us on 4 -> OVERSUB_SYNC 40 added to alpha and to each sync.
 * On shm the model picks direct at every size (it moves each byte across
 * cores once); ring/tree/recdbl matter on mpi. MPI constants are not
 * measured here (defaults from shared-memory Open MPI folklore); on mpi the
 * native collective is preferred anyway.
 * Across nodes (an mpi group whose members span nodes) every step of a flat
 * algorithm waits for the slowest link, the network: alpha and beta become
 * NET_ALPHA / NET_BETA, while the hierarchical algorithm pays them only on
 * its inter-node step (one leader per node) and MPI's intra-node constants
 * elsewhere, so it wins whenever a node holds more than one member.
 * NET_BETA is a 10 Gbit/s link (1.25 GB/s: 8e-4 us/B); NET_ALPHA a TCP
 * round trip between two network namespaces of this machine (veth) under
 * load, 30-50 us (bench/multihost.sh measures both).
 * Does not: time anything at run time (the model is static). */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_internal.h"
#include "comm/shm.h"

#define P2P_ALPHA 1.2
#define P2P_BETA 4e-4
#define GAMMA 3e-5
#define DIRECT_SYNC 0.4
#define DIRECT_BETA 7.5e-5
#define MPI_ALPHA 2.0
#define MPI_BETA 2.5e-4
#define OVERSUB_SYNC 40.0
/* Between nodes (Open MPI's TCP transport; see NET_* below the model). */
#define NET_ALPHA 40.0
#define NET_BETA 8e-4

/* Which algorithms implement which operation (on some backend). */
static const unsigned short algo_mask[MTC_COLL_COUNT] = {
#define A(x) (1u << MTC_ALGO_##x)
    [MTC_COLL_BARRIER] = A(DIRECT) | A(NATIVE) | A(TREE) | A(RING),
    [MTC_COLL_BROADCAST] = A(DIRECT) | A(NATIVE) | A(TREE),
    [MTC_COLL_REDUCE] = A(DIRECT) | A(NATIVE) | A(TREE),
    [MTC_COLL_ALL_REDUCE] =
        A(DIRECT) | A(NATIVE) | A(RING) | A(TREE) | A(RECDBL) | A(RABENSEIFNER) | A(HIER),
    [MTC_COLL_REDUCE_SCATTER] = A(DIRECT) | A(NATIVE) | A(RING) | A(HIER),
    [MTC_COLL_ALL_GATHER] = A(DIRECT) | A(NATIVE) | A(RING) | A(RECDBL) | A(HIER),
    [MTC_COLL_ALL_TO_ALL] = A(DIRECT) | A(NATIVE) | A(PAIRWISE),
    [MTC_COLL_REDUCE_SCATTER_V] = A(DIRECT) | A(RING),
    [MTC_COLL_ALL_GATHER_V] = A(DIRECT) | A(RING),
    [MTC_COLL_ALL_TO_ALL_V] = A(DIRECT) | A(PAIRWISE),
#undef A
};

int comm_algo_exists(mtc_coll_t coll, mtc_algo_t algo) {
    return (unsigned)coll < MTC_COLL_COUNT && (unsigned)algo < MTC_ALGO_COUNT &&
           (algo_mask[coll] >> algo & 1u);
}

static int has_native(const comm_backend *be, mtc_coll_t coll) {
    const comm_backend_ops *o = be->ops;
    switch (coll) {
    case MTC_COLL_BARRIER: return o->barrier != NULL;
    case MTC_COLL_BROADCAST: return o->broadcast != NULL;
    case MTC_COLL_REDUCE: return o->reduce != NULL;
    case MTC_COLL_ALL_REDUCE: return o->all_reduce != NULL;
    case MTC_COLL_REDUCE_SCATTER: return o->reduce_scatter != NULL;
    case MTC_COLL_ALL_GATHER: return o->all_gather != NULL;
    case MTC_COLL_ALL_TO_ALL: return o->all_to_all != NULL;
    default: return 0;
    }
}

int comm_algo_usable(mtc_comm_t comm, mtc_coll_t coll, mtc_algo_t algo) {
    if (!comm_algo_exists(coll, algo)) return 0;
    switch (algo) {
    case MTC_ALGO_DIRECT: return comm->be->shared_memory;
    case MTC_ALGO_NATIVE: return has_native(comm->be, coll);
    case MTC_ALGO_HIER: return comm->node_count > 1;
    default: return 1;
    }
}

/* ---- the cost model ------------------------------------------------------------- */

/* sysconf reads /sys on every call: ask once per process. */
static int online_cpus(void) {
    static _Atomic int cached;
    int n = atomic_load_explicit(&cached, memory_order_relaxed);
    if (n == 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
        atomic_store_explicit(&cached, n, memory_order_relaxed);
    }
    return n;
}

static double log2ceil(int n) {
    int l = 0;
    while ((1 << l) < n)
        l++;
    return l;
}

/* Modelled time in microseconds of algo for coll moving `bytes` (the
 * per-rank vector for all_reduce/broadcast/reduce, the total gathered or
 * scattered vector for the others). */
static double model_cost(mtc_comm_t comm, mtc_coll_t coll, mtc_algo_t algo, double N) {
    int n = comm->size;
    double L = log2ceil(n), f = (double)(n - 1) / n;
    int mpi = !comm->be->shared_memory;
    int oversub = comm->be->shared_memory && comm->be->world_size > online_cpus();
    int spans = mpi && comm->node_count > 1; /* flat algorithms cross the network */
    double a = mpi ? MPI_ALPHA : P2P_ALPHA, b = mpi ? MPI_BETA : P2P_BETA, g = GAMMA;
    double la = a, lb = b; /* inside a node (the hierarchical algorithm's intra steps) */
    if (spans) a = NET_ALPHA, b = NET_BETA;
    double S = DIRECT_SYNC * (1 + 0.25 * n);
    if (oversub) a += OVERSUB_SYNC, S += OVERSUB_SYNC;
    int small = N <= SHM_SMALL;
    switch (algo) {
    case MTC_ALGO_DIRECT:
        switch (coll) {
        case MTC_COLL_ALL_REDUCE:
            return small ? S + N * DIRECT_BETA + n * N * g : 2 * S + N * (DIRECT_BETA + g);
        case MTC_COLL_REDUCE_SCATTER: return 2 * S + N * g;
        case MTC_COLL_REDUCE: return 2 * S + N * g;
        default: return (small ? S : 2 * S) + N * DIRECT_BETA;
        }
    case MTC_ALGO_RING:
        if (coll == MTC_COLL_ALL_REDUCE) return 2 * (n - 1) * a + 2 * f * N * b + f * N * g;
        if (coll == MTC_COLL_REDUCE_SCATTER) return (n - 1) * a + f * N * (b + g);
        if (coll == MTC_COLL_BARRIER) return 2 * (n - 1) * a;
        return (n - 1) * a + f * N * b;
    case MTC_ALGO_TREE:
        if (coll == MTC_COLL_ALL_REDUCE || coll == MTC_COLL_BARRIER)
            return 2 * L * a + 2 * L * N * b + L * N * g;
        if (coll == MTC_COLL_REDUCE) return L * a + L * N * (b + g);
        return L * a + L * N * b;
    case MTC_ALGO_RECDBL:
        if (coll == MTC_COLL_ALL_GATHER) return L * a + f * N * b;
        return (L + (n & (n - 1) ? 2 : 0)) * a + L * N * (b + g);
    case MTC_ALGO_RABENSEIFNER:
        return (2 * L + (n & (n - 1) ? 2 : 0)) * a + 2 * f * N * b + f * N * g;
    case MTC_ALGO_HIER: {
        /* from (size, nodes) only: local_size differs between nodes, and
         * every rank must make the same choice */
        int nodes = comm->node_count, local = (n + nodes - 1) / nodes;
        double fl = (double)(local - 1) / local, fn = (double)(nodes - 1) / nodes;
        double na = mpi ? NET_ALPHA : MPI_ALPHA, nb = mpi ? NET_BETA : MPI_BETA;
        if (coll == MTC_COLL_ALL_REDUCE)
            return 2 * (local - 1) * la + 2 * fl * N * lb + 2 * (nodes - 1) * na + 2 * fn * N * nb +
                   N * g;
        /* reduce-scatter / all-gather: N is the whole vector; inside the
         * node it moves once whole (reduce / broadcast) and once as the
         * node's share (broadcast / all-gather), between the leaders each
         * sends what the other nodes own. Their extra intra-node volume
         * makes them lose to the flat ring above a few hundred KB while the
         * network is only ~3x slower than shared memory (the constants
         * here); they win on the latency of small vectors (fewer network
         * steps), e.g. the distributed optimizer's buckets. */
        return 2 * (local - 1) * la + N * (1 + (double)local / n) * lb + (nodes - 1) * na +
               fn * N * nb + (coll == MTC_COLL_REDUCE_SCATTER ? N * g : 0);
    }
    case MTC_ALGO_PAIRWISE: return (n - 1) * a + f * N * b;
    case MTC_ALGO_NATIVE: {
        /* MPI's own collectives run as MPI_I* so they honour deadlines
         * (coll_mpi.c); Open MPI 4.1's non-blocking forms stage through
         * temporary buffers: in place, 256 KB-4 MB MPI_Iallreduce took
         * 1.5-2x MPI_Allreduce (2 ranks, loaded VM) and mtc's ring beat it
         * from 4 KB up (1 MB: 0.23-0.5 ms against 1.6 ms); at 8 B on 2
         * ranks MPI_Iallreduce took 1.8-2.0 us against recdbl's 1.2 (the
         * blocking form had 1.3-1.4). Hence 1.2 x the latency and twice
         * the bytes of a ring: forced, it runs; chosen, rarely. */
        double vol = coll == MTC_COLL_ALL_REDUCE ? 2 * f * N : f * N;
        return 1.2 * (n - 1) * a + 2 * vol * b;
    }
    default: return 1e30;
    }
}

static mtc_algo_t choose_uncached(mtc_comm_t comm, mtc_coll_t coll, size_t count,
                                  mtc_dtype_t dtype) {
    double N = (double)count * (double)mtc_dtype_size(dtype);
    if (coll == MTC_COLL_REDUCE_SCATTER || coll == MTC_COLL_ALL_GATHER ||
        coll == MTC_COLL_ALL_TO_ALL)
        N *= comm->size;
    mtc_algo_t best = MTC_ALGO_AUTO;
    double best_cost = 1e300;
    for (int a = 1; a < MTC_ALGO_COUNT; a++) {
        if (!comm_algo_usable(comm, coll, (mtc_algo_t)a)) continue;
        double c = model_cost(comm, coll, (mtc_algo_t)a, N);
        if (c < best_cost) best_cost = c, best = (mtc_algo_t)a;
    }
    return best;
}

/* The last choice per operation is remembered: training repeats shapes. */
static mtc_algo_t choose(mtc_comm_t comm, mtc_coll_t coll, size_t count, mtc_dtype_t dtype) {
    if (comm->last_choice[coll].algo != MTC_ALGO_AUTO && comm->last_choice[coll].count == count &&
        comm->last_choice[coll].dtype == (int)dtype)
        return comm->last_choice[coll].algo;
    mtc_algo_t a = choose_uncached(comm, coll, count, dtype);
    comm->last_choice[coll].count = count;
    comm->last_choice[coll].dtype = (int)dtype;
    comm->last_choice[coll].algo = a;
    return a;
}

mtc_algo_t mtc_comm_choose(mtc_comm_t comm, mtc_coll_t coll, size_t count, mtc_dtype_t dtype) {
    if ((unsigned)coll >= MTC_COLL_COUNT) return MTC_ALGO_AUTO;
    mtc_algo_t forced = comm->algo[coll];
    if (forced != MTC_ALGO_AUTO && comm_algo_usable(comm, coll, forced)) return forced;
    return choose(comm, coll, count, dtype);
}

static void list_usable(mtc_comm_t comm, mtc_coll_t coll, char *buf, size_t len) {
    size_t off = (size_t)snprintf(buf, len, "auto");
    for (int a = 1; a < MTC_ALGO_COUNT && off < len; a++)
        if (comm_algo_usable(comm, coll, (mtc_algo_t)a))
            off += (size_t)snprintf(buf + off, len - off, ", %s", mtc_algo_name((mtc_algo_t)a));
}

mtc_result_t comm_algo_resolve(mtc_comm_t comm, const comm_op *op, mtc_algo_t *out) {
    mtc_coll_t coll = (mtc_coll_t)op->kind;
    mtc_algo_t forced = comm->algo[coll];
    if (forced != MTC_ALGO_AUTO) {
        if (comm_algo_usable(comm, coll, forced)) {
            *out = forced;
            return MTC_OK;
        }
        if (comm->strict[coll]) {
            char valid[160];
            list_usable(comm, coll, valid, sizeof valid);
            return mtc_error(
                MTC_ERR_INVALID_ARGUMENT,
                "%s cannot use algorithm '%s' on %s (backend %s, %d node%s); valid here: %s",
                mtc_coll_name(coll), mtc_algo_name(forced), comm->name, comm->be->ops->name,
                comm->node_count, comm->node_count == 1 ? "" : "s", valid);
        }
    }
    size_t count = op->count;
    if (op->kind >= MTC_COLL_REDUCE_SCATTER_V) count = op->count / (size_t)comm->size;
    *out = choose(comm, coll, count, op->dtype);
    return MTC_OK;
}

/* ---- parsing "ring" / "all_reduce=ring,all_gather=direct" ---------------------- */

static void list_algos(mtc_coll_t coll, char *buf, size_t len) {
    size_t off = 0;
    buf[0] = '\0';
    for (int a = 1; a < MTC_ALGO_COUNT && off < len; a++)
        if (comm_algo_exists(coll, (mtc_algo_t)a))
            off += (size_t)snprintf(buf + off, len - off, "%s%s", off ? ", " : "",
                                    mtc_algo_name((mtc_algo_t)a));
}

mtc_result_t comm_algo_spec_parse(const char *spec, mtc_algo_t out[MTC_COLL_COUNT],
                                  unsigned char strict[MTC_COLL_COUNT]) {
    for (int c = 0; c < MTC_COLL_COUNT; c++)
        out[c] = MTC_ALGO_AUTO, strict[c] = 0;
    if (!spec || !spec[0]) return MTC_OK;
    char buf[512];
    if (strlen(spec) >= sizeof buf)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "algorithm spec too long: '%.40s...'", spec);
    strcpy(buf, spec);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        char *eq = strchr(tok, '=');
        if (!eq) {
            int a = mtc_algo_parse(tok);
            if (a < 0)
                return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                                 "unknown algorithm '%s' in '%s' (valid: auto ring tree recdbl "
                                 "rabenseifner direct hier native pairwise)",
                                 tok, spec);
            for (int c = 0; c < MTC_COLL_COUNT; c++)
                if (a == MTC_ALGO_AUTO || comm_algo_exists((mtc_coll_t)c, (mtc_algo_t)a))
                    out[c] = (mtc_algo_t)a, strict[c] = 0;
            continue;
        }
        *eq = '\0';
        int c = mtc_coll_parse(tok), a = mtc_algo_parse(eq + 1);
        if (c < 0 || c < MTC_COLL_BARRIER)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "unknown operation '%s' in '%s' (valid: barrier broadcast reduce "
                             "all_reduce reduce_scatter all_gather all_to_all reduce_scatter_v "
                             "all_gather_v all_to_all_v)",
                             tok, spec);
        char valid[160];
        list_algos((mtc_coll_t)c, valid, sizeof valid);
        if (a < 0 || (a != MTC_ALGO_AUTO && !comm_algo_exists((mtc_coll_t)c, (mtc_algo_t)a)))
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "'%s' is not an algorithm for %s in '%s' (valid: auto, %s)", eq + 1,
                             tok, spec, valid);
        out[c] = (mtc_algo_t)a;
        strict[c] = 1;
    }
    return MTC_OK;
}
