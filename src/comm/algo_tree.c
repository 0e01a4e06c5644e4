/* comm/algo_tree.c - binary-tree reduce (any root), broadcast (any root) and
 * all-reduce (reduce to rank 0, then broadcast), pipelined in segments.
 *
 * Relies on algo.h's services (comm_p2p_*, comm_scratch, comm_reduce_local,
 * comm_finish_avg). Does not check signatures, time out or choose itself.
 *
 * The tree is laid over ranks relative to the root, v = (rank - root) mod p:
 * the children of v are 2v+1 and 2v+2, its parent (v-1)/2.
 *
 *            v0 (root)             reduce: leaves send segment k up; an
 *           /        \             inner node adds its children's segment
 *         v1          v2           to its own (own op left op right) and
 *        /  \        /  \          sends the sum up, then goes on to
 *      v3    v4    v5    v6        segment k+1 while its parent works on k.
 *                                  broadcast: the same tree downwards.
 *
 * Segments are SEG_BYTES long, so for large vectors the levels of the tree
 * work on different segments at once (a pipeline of depth log2 p); small
 * vectors travel as one message per edge, ceil(log2 p) steps each way.
 *
 * Reduction order is fixed by (size, root, count): own, then the left
 * subtree's result, then the right's. All-reduce gets identical bits on
 * every rank because only the root's result is broadcast. AVG is summed and
 * divided once at the root.
 *
 * Limitations: a plain binary tree, not NCCL's double binary tree: the leaves
 * (half the ranks) only send in reduce and only receive in broadcast, so at
 * most half the links are busy and bandwidth is about half of the ring's for
 * large vectors. The all-reduce runs the reduce to the end before starting
 * the broadcast (no overlap of the two phases). */
#include <string.h>

#include "comm/algo.h"

enum { SEG_BYTES = 128 << 10 };

static int tree_mod(int a, int p) { return ((a % p) + p) % p; }

static size_t tree_seg_elems(size_t es) {
    size_t n = SEG_BYTES / es;
    return n ? n : 1;
}

/* Reduce to root. `work` is a count-element buffer that receives the
 * partial result on every rank (all-reduce) or NULL except on the root
 * (reduce: inner nodes then accumulate in a scratch segment). Leaves send
 * straight from sendbuf. Not divided for AVG. */
static mtc_result_t tree_reduce_impl(const void *sendbuf, void *work, size_t count,
                                     mtc_dtype_t dtype, mtc_op_t op, int root, mtc_comm_t comm) {
    const int p = mtc_comm_size(comm), r = mtc_comm_rank(comm);
    const int v = tree_mod(r - root, p);
    const size_t es = mtc_dtype_size(dtype), seg = tree_seg_elems(es);
    const char *in = sendbuf;
    int child[2], nchild = 0;
    for (int c = 2 * v + 1; c <= 2 * v + 2 && c < p; c++)
        child[nchild++] = tree_mod(c + root, p);
    const int parent = v ? tree_mod((v - 1) / 2 + root, p) : -1;

    char *tmp = NULL, *acc_seg = NULL;
    if (nchild) {
        size_t seg_n = count < seg ? count : seg, seg_b = (seg_n * es + 63) & ~(size_t)63;
        char *scr;
        MTC_CHECK(comm_scratch(comm, 2 * seg_b, (void **)&scr));
        tmp = scr;
        acc_seg = scr + seg_b;
    }
    for (size_t o = 0; o < count; o += seg) {
        size_t n = count - o < seg ? count - o : seg;
        const char *up = in + o * es; /* what goes to the parent */
        if (nchild) {
            char *acc = work ? (char *)work + o * es : acc_seg;
            if (acc != up) comm_copy(acc, up, n * es);
            for (int c = 0; c < nchild; c++) {
                MTC_CHECK(comm_p2p_recv(comm, child[c], tmp, n * es));
                comm_reduce_local(acc, tmp, n, dtype, op);
            }
            up = acc;
        } else if (!v && work && (const char *)work + o * es != up) {
            comm_copy((char *)work + o * es, up, n * es); /* p == 1 */
        }
        if (v) MTC_CHECK(comm_p2p_send(comm, parent, up, n * es));
    }
    return MTC_OK;
}

mtc_result_t algo_tree_broadcast(void *buf, size_t count, mtc_dtype_t dtype, int root,
                                 mtc_comm_t comm) {
    const int p = mtc_comm_size(comm), r = mtc_comm_rank(comm);
    const int v = tree_mod(r - root, p);
    const size_t es = mtc_dtype_size(dtype), seg = tree_seg_elems(es);
    if (p == 1 || count == 0) return MTC_OK;
    const int parent = v ? tree_mod((v - 1) / 2 + root, p) : -1;
    for (size_t o = 0; o < count; o += seg) {
        size_t n = count - o < seg ? count - o : seg;
        char *b = (char *)buf + o * es;
        if (v) MTC_CHECK(comm_p2p_recv(comm, parent, b, n * es));
        for (int c = 2 * v + 1; c <= 2 * v + 2 && c < p; c++)
            MTC_CHECK(comm_p2p_send(comm, tree_mod(c + root, p), b, n * es));
    }
    return MTC_OK;
}

mtc_result_t algo_tree_reduce(const void *sendbuf, void *recvbuf, size_t count, mtc_dtype_t dtype,
                              mtc_op_t op, int root, mtc_comm_t comm) {
    const int is_root = mtc_comm_rank(comm) == root;
    if (count == 0) return MTC_OK;
    MTC_CHECK(tree_reduce_impl(sendbuf, is_root ? recvbuf : NULL, count, dtype, op, root, comm));
    if (is_root) comm_finish_avg(recvbuf, count, dtype, op, mtc_comm_size(comm));
    return MTC_OK;
}

mtc_result_t algo_tree_all_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                  mtc_dtype_t dtype, mtc_op_t op, mtc_comm_t comm) {
    if (count == 0) return MTC_OK;
    MTC_CHECK(tree_reduce_impl(sendbuf, recvbuf, count, dtype, op, 0, comm));
    if (mtc_comm_rank(comm) == 0) comm_finish_avg(recvbuf, count, dtype, op, mtc_comm_size(comm));
    return algo_tree_broadcast(recvbuf, count, dtype, 0, comm);
}
