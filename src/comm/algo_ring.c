/* comm/algo_ring.c - ring all-reduce, reduce-scatter and all-gather (even
 * and uneven blocks), over the communicator's blocking point-to-point.
 *
 * Relies on algo.h's services (comm_p2p_*, comm_scratch, comm_reduce_local,
 * comm_finish_avg). Does not check signatures, time out or choose itself
 * (comm.c and select.c do). Bandwidth-optimal: every rank sends and receives
 * 2 (p-1)/p of the vector for all-reduce, (p-1)/p for the other two.
 *
 * All-reduce, p = 3, vector split into chunks c0 c1 c2 (uneven sizes fine:
 * chunk k has count/p elements, plus one for k < count % p):
 *
 *   reduce-scatter (p-1 steps): at step s rank r sends chunk (r-s) to r+1
 *   and adds the chunk (r-s-1) it receives from r-1 into its own copy.
 *        step 0                step 1               result
 *   r0: c0 ->  r1          c2 -> r1 (c2=x2+x0)     r0 owns c1 = x1+x2+x0
 *   r1: c1 ->  r2          c0 -> r2 (c0=x0+x1)     r1 owns c2 = x2+x0+x1
 *   r2: c2 ->  r0          c1 -> r0 (c1=x1+x2)     r2 owns c0 = x0+x1+x2
 *   all-gather (p-1 steps): at step s rank r sends chunk (r+1-s) to r+1 and
 *   stores chunk (r-s) received from r-1; the reduced chunks circulate as
 *   they are, so every rank ends with the same bits.
 *
 * Reduction order: chunk c is accumulated along the ring from rank c to rank
 * c-1, each rank combining (own op incoming), fixed by (size, count) alone.
 * AVG is summed and divided once, by the rank that finishes the chunk.
 *
 * Reduce-scatter uses the same accumulation pass without the all-gather, on
 * two scratch blocks (the input is const); all-gather is the second phase.
 *
 * Limitations: latency is 2 (p-1) message steps, poor for small vectors on
 * many ranks (prefer recursive doubling or the tree there); no pipelining
 * inside a chunk, so a step moves one whole chunk; zero-sized chunks are
 * skipped (by both sides, computed from the same formula). */
#include <string.h>

#include "comm/algo.h"

/* Offset (elements) of block k when n elements are cut into p near-equal
 * blocks, the first n % p one element longer. */
static size_t ring_chunk_off(size_t n, int p, int k) {
    size_t q = n / (size_t)p, rem = n % (size_t)p;
    return (size_t)k * q + ((size_t)k < rem ? (size_t)k : rem);
}

static int ring_mod(int a, int p) { return ((a % p) + p) % p; }

/* Send and receive at once, skipping empty directions (both sides of a
 * message compute the same size, so they skip the same messages). */
static mtc_result_t ring_xchg(mtc_comm_t comm, int dst, const void *sbuf, size_t sbytes, int src,
                              void *rbuf, size_t rbytes) {
    if (sbytes && rbytes) return comm_p2p_sendrecv(comm, dst, sbuf, sbytes, src, rbuf, rbytes);
    if (sbytes) return comm_p2p_send(comm, dst, sbuf, sbytes);
    if (rbytes) return comm_p2p_recv(comm, src, rbuf, rbytes);
    return MTC_OK;
}

mtc_result_t algo_ring_all_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                  mtc_dtype_t dtype, mtc_op_t op, mtc_comm_t comm) {
    const int p = mtc_comm_size(comm), r = mtc_comm_rank(comm);
    const size_t es = mtc_dtype_size(dtype);
    char *buf = recvbuf;
    if (count == 0) return MTC_OK;
    if (sendbuf != recvbuf) comm_copy(recvbuf, sendbuf, count * es);
    if (p == 1) return MTC_OK; /* AVG over one rank is the value itself */

    void *tmp;
    MTC_CHECK(comm_scratch(comm, (count / (size_t)p + 1) * es, &tmp));
    const int right = ring_mod(r + 1, p), left = ring_mod(r - 1, p);

    /* reduce-scatter: after step s, chunk (r-s-1) holds s+2 contributions */
    for (int s = 0; s < p - 1; s++) {
        int cs = ring_mod(r - s, p), cr = ring_mod(r - s - 1, p);
        size_t so = ring_chunk_off(count, p, cs), sn = ring_chunk_off(count, p, cs + 1) - so;
        size_t ro = ring_chunk_off(count, p, cr), rn = ring_chunk_off(count, p, cr + 1) - ro;
        MTC_CHECK(ring_xchg(comm, right, buf + so * es, sn * es, left, tmp, rn * es));
        if (rn) comm_reduce_local(buf + ro * es, tmp, rn, dtype, op);
    }
    /* rank r now owns the finished chunk (r+1) */
    {
        int c = ring_mod(r + 1, p);
        size_t o = ring_chunk_off(count, p, c), n = ring_chunk_off(count, p, c + 1) - o;
        if (n) comm_finish_avg(buf + o * es, n, dtype, op, p);
    }
    /* all-gather of the finished chunks */
    for (int s = 0; s < p - 1; s++) {
        int cs = ring_mod(r + 1 - s, p), cr = ring_mod(r - s, p);
        size_t so = ring_chunk_off(count, p, cs), sn = ring_chunk_off(count, p, cs + 1) - so;
        size_t ro = ring_chunk_off(count, p, cr), rn = ring_chunk_off(count, p, cr + 1) - ro;
        MTC_CHECK(ring_xchg(comm, right, buf + so * es, sn * es, left, buf + ro * es, rn * es));
    }
    return MTC_OK;
}

/* Block j of the reduce-scatter input: counts[j] elements at the packed
 * offset, or `uniform` elements each when counts is NULL. */
static size_t ring_blk_n(const size_t *counts, size_t uniform, int j) {
    return counts ? counts[j] : uniform;
}
static size_t ring_blk_off(const size_t *counts, size_t uniform, int j) {
    if (!counts) return (size_t)j * uniform;
    size_t off = 0;
    for (int k = 0; k < j; k++)
        off += counts[k];
    return off;
}

/* Reduce-scatter over blocks given by (counts, uniform); see the diagram
 * above: at step s rank r passes its partial of block (r-s-1) to r+1 and
 * receives the partial of block (r-s-2) from r-1, adding its own input. */
static mtc_result_t ring_reduce_scatter_blocks(const void *sendbuf, void *recvbuf,
                                               const size_t *counts, size_t uniform,
                                               mtc_dtype_t dtype, mtc_op_t op, mtc_comm_t comm) {
    const int p = mtc_comm_size(comm), r = mtc_comm_rank(comm);
    const size_t es = mtc_dtype_size(dtype);
    const char *in = sendbuf;
    const size_t my_n = ring_blk_n(counts, uniform, r);
    const char *my_in = in + ring_blk_off(counts, uniform, r) * es;

    if (p == 1) {
        if (my_n && (const void *)my_in != recvbuf) comm_copy(recvbuf, my_in, my_n * es);
        return MTC_OK;
    }
    size_t maxn = 0, total = 0;
    for (int j = 0; j < p; j++) {
        size_t n = ring_blk_n(counts, uniform, j);
        if (n > maxn) maxn = n;
        total += n;
    }
    if (total == 0) return MTC_OK;

    char *scr;
    MTC_CHECK(comm_scratch(comm, 2 * maxn * es + 64, (void **)&scr));
    char *part[2] = {scr, scr + ((maxn * es + 63) & ~(size_t)63)};
    const int right = ring_mod(r + 1, p), left = ring_mod(r - 1, p);
    const char *send_from = NULL; /* the partial going out at this step */

    for (int s = 0; s < p - 1; s++) {
        int bs = ring_mod(r - s - 1, p), br = ring_mod(r - s - 2, p);
        size_t sn = ring_blk_n(counts, uniform, bs), rn = ring_blk_n(counts, uniform, br);
        /* step 0 sends the raw input block; later steps the partial received
         * at the previous step (already combined with our input) */
        const char *sb = s == 0 ? in + ring_blk_off(counts, uniform, bs) * es : send_from;
        char *rb = part[s & 1];
        MTC_CHECK(ring_xchg(comm, right, sb, sn * es, left, rb, rn * es));
        if (s < p - 2) {
            if (rn)
                comm_reduce_local(rb, in + ring_blk_off(counts, uniform, br) * es, rn, dtype, op);
            send_from = rb;
        } else if (rn) { /* br == r: the last contribution is ours */
            if ((const void *)my_in != recvbuf) comm_copy(recvbuf, my_in, my_n * es);
            comm_reduce_local(recvbuf, rb, my_n, dtype, op);
        }
    }
    if (my_n) comm_finish_avg(recvbuf, my_n, dtype, op, p);
    return MTC_OK;
}

mtc_result_t algo_ring_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                      mtc_dtype_t dtype, mtc_op_t op, mtc_comm_t comm) {
    if (recvcount == 0) return MTC_OK;
    return ring_reduce_scatter_blocks(sendbuf, recvbuf, NULL, recvcount, dtype, op, comm);
}

mtc_result_t algo_ring_reduce_scatter_v(const void *sendbuf, void *recvbuf,
                                        const size_t *recvcounts, mtc_dtype_t dtype, mtc_op_t op,
                                        mtc_comm_t comm) {
    return ring_reduce_scatter_blocks(sendbuf, recvbuf, recvcounts, 0, dtype, op, comm);
}

/* All-gather into blocks at displs (or packed offsets) of sizes counts (or
 * uniform): at step s rank r forwards block (r-s) to r+1 and receives block
 * (r-s-1) from r-1, straight into its place. */
static mtc_result_t ring_all_gather_blocks(const void *sendbuf, void *recvbuf, const size_t *counts,
                                           const size_t *displs, size_t uniform, mtc_dtype_t dtype,
                                           mtc_comm_t comm) {
    const int p = mtc_comm_size(comm), r = mtc_comm_rank(comm);
    const size_t es = mtc_dtype_size(dtype);
    char *out = recvbuf;
#define BLK_OFF(j) (displs ? displs[j] : ring_blk_off(counts, uniform, (j)))
    size_t my_n = ring_blk_n(counts, uniform, r);
    char *mine = out + BLK_OFF(r) * es;
    if (my_n && sendbuf != (const void *)mine) comm_copy(mine, sendbuf, my_n * es);
    const int right = ring_mod(r + 1, p), left = ring_mod(r - 1, p);
    for (int s = 0; s < p - 1; s++) {
        int bs = ring_mod(r - s, p), br = ring_mod(r - s - 1, p);
        size_t sn = ring_blk_n(counts, uniform, bs), rn = ring_blk_n(counts, uniform, br);
        MTC_CHECK(ring_xchg(comm, right, out + BLK_OFF(bs) * es, sn * es, left,
                            out + BLK_OFF(br) * es, rn * es));
    }
#undef BLK_OFF
    return MTC_OK;
}

mtc_result_t algo_ring_all_gather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                  mtc_dtype_t dtype, mtc_comm_t comm) {
    if (sendcount == 0) return MTC_OK;
    return ring_all_gather_blocks(sendbuf, recvbuf, NULL, NULL, sendcount, dtype, comm);
}

mtc_result_t algo_ring_all_gather_v(const void *sendbuf, size_t sendcount, void *recvbuf,
                                    const size_t *recvcounts, const size_t *displs,
                                    mtc_dtype_t dtype, mtc_comm_t comm) {
    int r = mtc_comm_rank(comm);
    if (sendcount != recvcounts[r])
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "all_gather_v: rank %d sends %zu elements but recvcounts[%d]=%zu; "
                         "they must be equal",
                         r, sendcount, r, recvcounts[r]);
    return ring_all_gather_blocks(sendbuf, recvbuf, recvcounts, displs, 0, dtype, comm);
}
