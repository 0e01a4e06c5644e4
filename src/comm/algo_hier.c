/* comm/algo_hier.c - two-level (hierarchical) collectives: the intra-node
 * step over shared memory, the inter-node step among one leader per node
 * over the network, so the network carries each byte once per node instead
 * of once per rank step.
 *
 * Relies on comm_node_split (algo.h) for the two sub-communicators, whose
 * node membership comes from the backend (MPI's shared-memory split, or
 * --ranks-per-node for shm), and on the public collectives of comm.h on
 * those sub-communicators, so each level gets its own sequence numbers,
 * signature checks, timeouts and algorithm choice (the selector's, or the
 * one forced on the sub-communicator).
 *
 * all-reduce, nodes of equal size L (vectors of at least 16 KiB):
 *      node A: a0 a1        node B: b0 b1        vector = chunks [c0 | c1]
 *   1. reduce-scatter-v(intra): a0 holds c0 of a0+a1, a1 holds c1 (b alike)
 *   2. all-reduce(local rank k of every node): a0,b0 reduce c0; a1,b1 c1
 *      (L streams between the nodes at once; divided by p for AVG)
 *   3. all-gather-v(intra): every rank gets both chunks
 *   From 8 MiB up the vector is cut into 4 MiB segments, each run through
 *   1-3, with step 2 of segment s on the inter-node communicator's progress
 *   thread while this thread does steps 1 and 3 of its neighbours:
 *      intra: RS0 RS1 . AG0 RS2 . AG1 RS3 ...
 *      inter:     AR0 ...... AR1 ...... AR2 ...
 *   so the link is busy while the node reduces and gathers (and a
 *   rendezvous hand-shake of one segment waits behind the data of another
 *   instead of stalling the link).
 * all-reduce, nodes of different sizes (or small vectors): one leader each
 *   1. reduce(intra, root 0)   2. all-reduce(leaders)   3. broadcast(intra)
 * reduce-scatter (rank r wants block r of the sum of p blocks)
 *   0. each rank lays its p blocks out node by node (node-major order)
 *   1. reduce(intra, root 0) of all p blocks to the leader
 *   2. reduce-scatter-v(leaders): each leader gets its node's blocks summed
 *   3. broadcast(intra) of the node's blocks; each rank keeps its own
 * all-gather
 *   1. all-gather(intra) of the node's blocks
 *   2. all-gather-v(leaders) of every node's blocks (node-major order)
 *   3. broadcast(intra) of all p blocks; each rank puts them in rank order
 *
 * Levels reduce with SUM for AVG; the leaders divide once by the whole size
 * before the broadcast, so all ranks end with identical bits. Nodes are
 * ordered by their lowest rank (the leaders' order in the inter-node
 * communicator) and members of a node by rank (the intra-node order), so
 * any placement works, not only contiguous blocks of ranks. The order is
 * fixed by (node layout, count) and the algorithms the selector picks for
 * that shape, so it is deterministic run to run.
 *
 * Limitations: below 8 MiB latency is the sum of three collectives; with nodes of
 * different sizes the leaders carry all inter-node traffic; reduce-scatter
 * and all-gather move all p blocks inside each node (cheap over shared
 * memory, not over a network); when all ranks share one node, or every node
 * has one rank, the hierarchy is pointless and this falls back to the flat
 * ring (recursive doubling for small all-reduces). */
#include <stdio.h>

#include "comm/algo.h"

/* Below this many bytes the flat fallback uses recursive doubling. */
enum { HIER_SMALL_BYTES = 16 << 10 };
/* The pipelined all-reduce's segment (whole vector, all local chunks) and
 * the most segments a call is cut into. */
#define HIER_SEGMENT_BYTES ((size_t)4 << 20)
#define HIER_MAX_SEGMENTS 64

/* Block positions in node-major order: pos[r] = index of member r's block
 * when blocks are laid out node by node (nodes by lowest rank, members by
 * rank); node_size[j] = members of node j; *my_local = this rank's index in
 * its node. Returns the number of nodes. */
static int hier_layout(mtc_comm_t comm, int *pos, int *node_size, int *my_local) {
    const int p = mtc_comm_size(comm), me = mtc_comm_rank(comm);
    int raw[p], nj[p], local[p], nodes = 0;
    for (int r = 0; r < p; r++) {
        raw[r] = mtc_comm_node_of(comm, r);
        nj[r] = -1, local[r] = 0;
        for (int q = 0; q < r; q++)
            if (raw[q] == raw[r]) {
                nj[r] = nj[q];
                local[r]++;
            }
        if (nj[r] < 0) nj[r] = nodes, node_size[nodes++] = 0;
        node_size[nj[r]]++;
    }
    int off[p];
    for (int j = 0, o = 0; j < nodes; j++)
        off[j] = o, o += node_size[j];
    for (int r = 0; r < p; r++)
        pos[r] = off[nj[r]] + local[r];
    *my_local = local[me];
    return nodes;
}

/* The split, checked: the local-rank-0 communicator holds one rank per
 * node (the leaders). *leader = 1 on them. */
static mtc_result_t hier_split(mtc_comm_t comm, const char *what, mtc_comm_t *intra,
                               mtc_comm_t *inter, int *leader) {
    MTC_CHECK(comm_node_split(comm, intra, inter));
    *leader = mtc_comm_rank(*intra) == 0;
    if (!*inter || (*leader && mtc_comm_size(*inter) != mtc_comm_node_count(comm)))
        return mtc_error(MTC_ERR_INTERNAL,
                         "hier %s: rank %d of %s (local rank %d) has %s across nodes, want one "
                         "member per node for the leaders (%d nodes)",
                         what, mtc_comm_rank(comm), mtc_comm_name(comm), mtc_comm_rank(*intra),
                         *inter ? "a wrong communicator" : "no communicator",
                         mtc_comm_node_count(comm));
    return MTC_OK;
}

static int hier_flat(mtc_comm_t comm) {
    const int p = mtc_comm_size(comm), nodes = mtc_comm_node_count(comm);
    return p == 1 || nodes <= 1 || nodes >= p || comm_node_split_pending(comm);
}

mtc_result_t algo_hier_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                      mtc_dtype_t dtype, mtc_op_t op, mtc_comm_t comm) {
    const int p = mtc_comm_size(comm);
    if (recvcount == 0) return MTC_OK;
    if (hier_flat(comm))
        return algo_ring_reduce_scatter(sendbuf, recvbuf, recvcount, dtype, op, comm);
    mtc_comm_t intra = NULL, inter = NULL;
    int leader;
    MTC_CHECK(hier_split(comm, "reduce_scatter", &intra, &inter, &leader));
    int pos[p], node_size[p], my_local;
    const int nodes = hier_layout(comm, pos, node_size, &my_local);
    const int L = mtc_comm_size(intra);
    const size_t B = recvcount * mtc_dtype_size(dtype);
    char *S, *R, *T; /* node-major input, the node's reduction (leader), the node's blocks */
    MTC_CHECK(comm_scratch(comm, (2 * (size_t)p + (size_t)L) * B, (void **)&S));
    R = S + (size_t)p * B, T = R + (size_t)p * B;
    for (int r = 0; r < p; r++)
        comm_copy(S + (size_t)pos[r] * B, (const char *)sendbuf + (size_t)r * B, B);
    const mtc_op_t sub = op == MTC_OP_AVG ? MTC_OP_SUM : op;
    MTC_CHECK(mtc_reduce(S, R, (size_t)p * recvcount, dtype, sub, 0, intra));
    if (leader) {
        size_t counts[nodes];
        for (int j = 0; j < nodes; j++)
            counts[j] = (size_t)node_size[j] * recvcount;
        MTC_CHECK(mtc_reduce_scatter_v(R, T, counts, dtype, sub, inter));
        comm_finish_avg(T, (size_t)L * recvcount, dtype, op, p);
    }
    MTC_CHECK(mtc_broadcast(T, (size_t)L * recvcount, dtype, 0, intra));
    comm_copy(recvbuf, T + (size_t)my_local * B, B);
    return MTC_OK;
}

mtc_result_t algo_hier_all_gather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                  mtc_dtype_t dtype, mtc_comm_t comm) {
    const int p = mtc_comm_size(comm);
    if (sendcount == 0) return MTC_OK;
    if (hier_flat(comm)) return algo_ring_all_gather(sendbuf, recvbuf, sendcount, dtype, comm);
    mtc_comm_t intra = NULL, inter = NULL;
    int leader;
    MTC_CHECK(hier_split(comm, "all_gather", &intra, &inter, &leader));
    int pos[p], node_size[p], my_local;
    const int nodes = hier_layout(comm, pos, node_size, &my_local);
    const int L = mtc_comm_size(intra);
    const size_t B = sendcount * mtc_dtype_size(dtype);
    char *G, *H; /* the node's blocks, every block in node-major order */
    MTC_CHECK(comm_scratch(comm, ((size_t)L + (size_t)p) * B, (void **)&G));
    H = G + (size_t)L * B;
    MTC_CHECK(mtc_all_gather(sendbuf, G, sendcount, dtype, intra));
    if (leader) {
        size_t counts[nodes];
        for (int j = 0; j < nodes; j++)
            counts[j] = (size_t)node_size[j] * sendcount;
        MTC_CHECK(mtc_all_gather_v(G, (size_t)L * sendcount, H, counts, NULL, dtype, inter));
    }
    MTC_CHECK(mtc_broadcast(H, (size_t)p * sendcount, dtype, 0, intra));
    for (int r = 0; r < p; r++)
        comm_copy((char *)recvbuf + (size_t)r * B, H + (size_t)pos[r] * B, B);
    return MTC_OK;
}

/* Nodes alike, L local ranks: the vector is cut into segments of about
 * HIER_SEGMENT_BYTES (the same cut on every rank: it depends on count and
 * dtype only) and each segment into L chunks. For segment s, local rank k
 * reduces chunk k of its node (reduce-scatter-v inside), all-reduces it
 * with local rank k of every node (L streams between the nodes), and the
 * node gathers the chunks (all-gather-v inside). The inter-node all-reduce
 * of segment s runs on the inter-node communicator's progress thread
 * (mtc_all_reduce_start) while this thread reduces segment s+1 and gathers
 * segment s-1 inside the node, so the network and the node's memory work at
 * the same time. Intra-node calls keep one order on every rank: RS 0, RS 1,
 * AG 0, RS 2, AG 1, ..., AG K-1. Segments are disjoint, so in place
 * (sendbuf == recvbuf) is safe: gathering segment s-1 writes where
 * segment s+1 is no longer read. */
static mtc_result_t hier_all_reduce_streams(const void *sendbuf, void *recvbuf, size_t count,
                                            mtc_dtype_t dtype, mtc_op_t op, mtc_comm_t comm,
                                            mtc_comm_t intra, mtc_comm_t inter, int my_local) {
    const int p = mtc_comm_size(comm), L = mtc_comm_size(intra);
    const mtc_op_t sub = op == MTC_OP_AVG ? MTC_OP_SUM : op;
    const size_t esz = mtc_dtype_size(dtype);
    size_t nseg = count * esz / HIER_SEGMENT_BYTES;
    if (nseg > HIER_MAX_SEGMENTS) nseg = HIER_MAX_SEGMENTS;
    if (nseg > count / (size_t)L) nseg = count / (size_t)L;
    if (nseg < 1) nseg = 1;
    /* segment s: seg_len[s] elements from seg_off[s]; chunk k of it:
     * counts[s][k] elements; my chunks lie one after another in T */
    size_t seg_off[nseg], counts[nseg][L], mine[nseg], tpos[nseg], total = 0;
    for (size_t s = 0, off = 0; s < nseg; s++) {
        const size_t n = count / nseg + (s < count % nseg);
        seg_off[s] = off;
        off += n;
        for (int k = 0; k < L; k++)
            counts[s][k] = n / (size_t)L + ((size_t)k < n % (size_t)L);
        mine[s] = counts[s][my_local];
        tpos[s] = total;
        total += mine[s];
    }
    char *T;
    MTC_CHECK(comm_scratch(comm, total * esz, (void **)&T));
    const char *in = sendbuf;
    char *out = recvbuf;
    if (nseg == 1) { /* nothing to overlap: no hand-over to a progress thread */
        MTC_CHECK(mtc_reduce_scatter_v(in, T, counts[0], dtype, sub, intra));
        MTC_CHECK(mtc_all_reduce(T, T, mine[0], dtype, sub, inter));
        comm_finish_avg(T, mine[0], dtype, op, p);
        return mtc_all_gather_v(T, mine[0], out, counts[0], NULL, dtype, intra);
    }
    mtc_request_t req[nseg];
    for (size_t s = 0; s < nseg; s++)
        req[s] = NULL;
    mtc_result_t rc = MTC_OK;
    /* next segment to reduce (s) and to gather (g); at most two inter-node
     * all-reduces in flight */
    for (size_t s = 0, g = 0; rc == MTC_OK && g < nseg;) {
        if (s < nseg && s <= g + 1) {
            char *t = T + tpos[s] * esz;
            rc = mtc_reduce_scatter_v(in + seg_off[s] * esz, t, counts[s], dtype, sub, intra);
            if (rc == MTC_OK) rc = mtc_all_reduce_start(t, t, mine[s], dtype, sub, inter, &req[s]);
            s++;
            continue;
        }
        char *t = T + tpos[g] * esz;
        rc = mtc_request_wait(&req[g]);
        if (rc == MTC_OK) {
            comm_finish_avg(t, mine[g], dtype, op, p);
            rc =
                mtc_all_gather_v(t, mine[g], out + seg_off[g] * esz, counts[g], NULL, dtype, intra);
        }
        g++;
    }
    if (rc == MTC_OK) return MTC_OK;
    /* after an error: wait for what is still in flight (it writes T), and
     * report the first error, not the waits' */
    char why[1024];
    snprintf(why, sizeof why, "%s", mtc_error_detail());
    for (size_t s = 0; s < nseg; s++)
        if (req[s]) (void)mtc_request_wait(&req[s]);
    return mtc_error(rc, "%s", why);
}

mtc_result_t algo_hier_all_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                  mtc_dtype_t dtype, mtc_op_t op, mtc_comm_t comm) {
    const int p = mtc_comm_size(comm);
    if (count == 0) return MTC_OK;
    if (hier_flat(comm)) {
        if (count * mtc_dtype_size(dtype) < HIER_SMALL_BYTES)
            return algo_recdbl_all_reduce(sendbuf, recvbuf, count, dtype, op, comm);
        return algo_ring_all_reduce(sendbuf, recvbuf, count, dtype, op, comm);
    }
    mtc_comm_t intra = NULL, inter = NULL;
    int leader;
    MTC_CHECK(hier_split(comm, "all_reduce", &intra, &inter, &leader));
    const mtc_op_t sub = op == MTC_OP_AVG ? MTC_OP_SUM : op;
    int pos[p], node_size[p], my_local;
    const int nodes = hier_layout(comm, pos, node_size, &my_local);
    const int L = mtc_comm_size(intra);
    int uniform = 1;
    for (int j = 1; j < nodes; j++)
        uniform &= node_size[j] == node_size[0];
    if (!uniform || count < (size_t)L || count * mtc_dtype_size(dtype) < HIER_SMALL_BYTES) {
        /* one leader per node */
        MTC_CHECK(mtc_reduce(sendbuf, recvbuf, count, dtype, sub, 0, intra));
        if (leader) {
            MTC_CHECK(mtc_all_reduce(recvbuf, recvbuf, count, dtype, sub, inter));
            comm_finish_avg(recvbuf, count, dtype, op, p);
        }
        return mtc_broadcast(recvbuf, count, dtype, 0, intra);
    }
    return hier_all_reduce_streams(sendbuf, recvbuf, count, dtype, op, comm, intra, inter,
                                   my_local);
}
