/* comm/algo_recdbl.c - recursive doubling all-reduce and all-gather, and
 * Rabenseifner's all-reduce (recursive-halving reduce-scatter, then
 * recursive-doubling all-gather), for any number of ranks.
 *
 * Relies on algo.h's services (comm_p2p_*, comm_scratch, comm_reduce_local,
 * comm_finish_avg). Does not check signatures, time out or choose itself.
 *
 * Non-power-of-two sizes are folded first, as MPICH does: with p2 the
 * largest power of two <= p and rem = p - p2, each even rank r < 2 rem hands
 * its data to r+1 and sits out; the remaining p2 ranks get new ranks
 * (r/2 for r < 2 rem, r - rem otherwise), run the power-of-two algorithm,
 * and the odd ranks hand the result back to their even partner.
 *
 * Recursive doubling all-reduce, p2 = 4 (whole vectors each step):
 *   step mask=1: 0<->1  2<->3   each pair now holds x0+x1 | x2+x3
 *   step mask=2: 0<->2  1<->3   everyone holds (x0+x1)+(x2+x3)
 * Both partners compute (lower new rank's value) op (higher's), so every
 * rank ends with the same bits; log2 p2 steps of the full vector.
 *
 * Rabenseifner all-reduce, p2 = 4, vector in blocks b0..b3:
 *   halving mask=2: 0<->2 1<->3; lower keeps b0b1, upper b2b3, sends the rest
 *   halving mask=1: 0<->1 2<->3; new rank n keeps block n, fully reduced
 *   doubling mask=1, then mask=2: exchange held blocks until all have all.
 * Each block is reduced by one rank at each level and then copied, so all
 * ranks have the same bits; 2 log2 p2 steps moving ~2 (p2-1)/p2 of the vector.
 *
 * All-gather by recursive doubling: after folding, new rank n holds the
 * contiguous original blocks of its (one or two) ranks; at mask m the
 * aligned groups of m new ranks exchange their contiguous ranges.
 *
 * Limitations: the fold costs two extra full-vector messages on the 2 rem
 * folded ranks (and leaves rem ranks idle), so non-power-of-two sizes pay
 * up to 2x in latency and bandwidth; recursive doubling moves the whole
 * vector log2 p times (small vectors only); Rabenseifner needs
 * count >= p2 to use every rank (smaller blocks are empty, still correct). */
#include <string.h>

#include "comm/algo.h"

/* Fold geometry: p2, rem, and this rank's new rank (-1 if folded away). */
typedef struct {
    int p2, rem, newrank;
} recdbl_fold;

static recdbl_fold recdbl_fold_of(int p, int r) {
    recdbl_fold f;
    f.p2 = 1;
    while (f.p2 * 2 <= p)
        f.p2 *= 2;
    f.rem = p - f.p2;
    if (r < 2 * f.rem)
        f.newrank = (r % 2) ? r / 2 : -1;
    else
        f.newrank = r - f.rem;
    return f;
}

/* The real rank of new rank n. */
static int recdbl_real(const recdbl_fold *f, int n) { return n < f->rem ? 2 * n + 1 : n + f->rem; }

/* First original rank folded into new ranks >= n (their blocks start here). */
static int recdbl_first_orig(const recdbl_fold *f, int n) {
    return n < f->rem ? 2 * n : n + f->rem;
}

static size_t recdbl_blk_off(size_t n, int p, int k) {
    size_t q = n / (size_t)p, rem = n % (size_t)p;
    return (size_t)k * q + ((size_t)k < rem ? (size_t)k : rem);
}

static mtc_result_t recdbl_xchg(mtc_comm_t comm, int peer, const void *sbuf, size_t sbytes,
                                void *rbuf, size_t rbytes) {
    if (sbytes && rbytes) return comm_p2p_sendrecv(comm, peer, sbuf, sbytes, peer, rbuf, rbytes);
    if (sbytes) return comm_p2p_send(comm, peer, sbuf, sbytes);
    if (rbytes) return comm_p2p_recv(comm, peer, rbuf, rbytes);
    return MTC_OK;
}

mtc_result_t algo_recdbl_all_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                    mtc_dtype_t dtype, mtc_op_t op, mtc_comm_t comm) {
    const int p = mtc_comm_size(comm), r = mtc_comm_rank(comm);
    const size_t es = mtc_dtype_size(dtype), bytes = count * es;
    if (count == 0) return MTC_OK;
    if (sendbuf != recvbuf) comm_copy(recvbuf, sendbuf, bytes);
    if (p == 1) return MTC_OK;

    const recdbl_fold f = recdbl_fold_of(p, r);
    if (f.newrank < 0) { /* folded away: give our vector to r+1, get the result */
        MTC_CHECK(comm_p2p_send(comm, r + 1, recvbuf, bytes));
        return comm_p2p_recv(comm, r + 1, recvbuf, bytes);
    }
    char *other;
    MTC_CHECK(comm_scratch(comm, bytes, (void **)&other));
    char *cur = recvbuf; /* holds our running value; swaps with `other` */
    if (r < 2 * f.rem) { /* odd: absorb the even partner, (x_r-1 op x_r) */
        MTC_CHECK(comm_p2p_recv(comm, r - 1, other, bytes));
        comm_reduce_local(other, cur, count, dtype, op);
        char *t = cur;
        cur = other;
        other = t;
    }
    for (int mask = 1; mask < f.p2; mask <<= 1) {
        int pn = f.newrank ^ mask, peer = recdbl_real(&f, pn);
        MTC_CHECK(comm_p2p_sendrecv(comm, peer, cur, bytes, peer, other, bytes));
        if (f.newrank < pn) {
            comm_reduce_local(cur, other, count, dtype, op);
        } else { /* keep the order (lower op higher) so both get the same bits */
            comm_reduce_local(other, cur, count, dtype, op);
            char *t = cur;
            cur = other;
            other = t;
        }
    }
    if (cur != (char *)recvbuf) comm_copy(recvbuf, cur, bytes);
    comm_finish_avg(recvbuf, count, dtype, op, p);
    if (r < 2 * f.rem) MTC_CHECK(comm_p2p_send(comm, r - 1, recvbuf, bytes));
    return MTC_OK;
}

mtc_result_t algo_recdbl_all_gather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                    mtc_dtype_t dtype, mtc_comm_t comm) {
    const int p = mtc_comm_size(comm), r = mtc_comm_rank(comm);
    const size_t es = mtc_dtype_size(dtype), blk = sendcount * es;
    char *out = recvbuf;
    if (sendcount == 0) return MTC_OK;
    if (sendbuf != (const void *)(out + (size_t)r * blk))
        comm_copy(out + (size_t)r * blk, sendbuf, blk);
    if (p == 1) return MTC_OK;

    const recdbl_fold f = recdbl_fold_of(p, r);
    if (f.newrank < 0) {
        MTC_CHECK(comm_p2p_send(comm, r + 1, out + (size_t)r * blk, blk));
        return comm_p2p_recv(comm, r + 1, out, (size_t)p * blk);
    }
    if (r < 2 * f.rem) MTC_CHECK(comm_p2p_recv(comm, r - 1, out + (size_t)(r - 1) * blk, blk));
    for (int mask = 1; mask < f.p2; mask <<= 1) {
        int pn = f.newrank ^ mask, peer = recdbl_real(&f, pn);
        int mine = f.newrank & ~(mask - 1), theirs = pn & ~(mask - 1);
        size_t mo = (size_t)recdbl_first_orig(&f, mine),
               me = (size_t)recdbl_first_orig(&f, mine + mask);
        size_t to = (size_t)recdbl_first_orig(&f, theirs),
               te = (size_t)recdbl_first_orig(&f, theirs + mask);
        MTC_CHECK(comm_p2p_sendrecv(comm, peer, out + mo * blk, (me - mo) * blk, peer,
                                    out + to * blk, (te - to) * blk));
    }
    if (r < 2 * f.rem) MTC_CHECK(comm_p2p_send(comm, r - 1, out, (size_t)p * blk));
    return MTC_OK;
}

mtc_result_t algo_rabenseifner_all_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                          mtc_dtype_t dtype, mtc_op_t op, mtc_comm_t comm) {
    const int p = mtc_comm_size(comm), r = mtc_comm_rank(comm);
    const size_t es = mtc_dtype_size(dtype), bytes = count * es;
    char *buf = recvbuf;
    if (count == 0) return MTC_OK;
    if (sendbuf != recvbuf) comm_copy(recvbuf, sendbuf, bytes);
    if (p == 1) return MTC_OK;

    const recdbl_fold f = recdbl_fold_of(p, r);
    if (f.newrank < 0) {
        MTC_CHECK(comm_p2p_send(comm, r + 1, buf, bytes));
        return comm_p2p_recv(comm, r + 1, buf, bytes);
    }
    char *tmp;
    MTC_CHECK(comm_scratch(comm, bytes, (void **)&tmp));
    if (r < 2 * f.rem) {
        MTC_CHECK(comm_p2p_recv(comm, r - 1, tmp, bytes));
        comm_reduce_local(buf, tmp, count, dtype, op);
    }
    const int n = f.newrank, P = f.p2;
    /* recursive halving: keep the half of [lo, hi) that contains block n */
    int lo = 0, hi = P;
    for (int mask = P / 2; mask >= 1; mask >>= 1) {
        int pn = n ^ mask, peer = recdbl_real(&f, pn), mid = lo + (hi - lo) / 2;
        int klo = (n & mask) ? mid : lo, khi = (n & mask) ? hi : mid; /* kept */
        int slo = (n & mask) ? lo : mid, shi = (n & mask) ? mid : hi; /* sent */
        size_t ko = recdbl_blk_off(count, P, klo), kn = recdbl_blk_off(count, P, khi) - ko;
        size_t so = recdbl_blk_off(count, P, slo), sn = recdbl_blk_off(count, P, shi) - so;
        MTC_CHECK(recdbl_xchg(comm, peer, buf + so * es, sn * es, tmp, kn * es));
        if (kn) comm_reduce_local(buf + ko * es, tmp, kn, dtype, op);
        lo = klo;
        hi = khi;
    }
    {
        size_t o = recdbl_blk_off(count, P, n), m = recdbl_blk_off(count, P, n + 1) - o;
        if (m) comm_finish_avg(buf + o * es, m, dtype, op, p);
    }
    /* recursive doubling all-gather of the finished blocks */
    for (int mask = 1; mask < P; mask <<= 1) {
        int pn = n ^ mask, peer = recdbl_real(&f, pn);
        int mine = n & ~(mask - 1), theirs = pn & ~(mask - 1);
        size_t mo = recdbl_blk_off(count, P, mine), me = recdbl_blk_off(count, P, mine + mask);
        size_t to = recdbl_blk_off(count, P, theirs), te = recdbl_blk_off(count, P, theirs + mask);
        MTC_CHECK(
            recdbl_xchg(comm, peer, buf + mo * es, (me - mo) * es, buf + to * es, (te - to) * es));
    }
    if (r < 2 * f.rem) MTC_CHECK(comm_p2p_send(comm, r - 1, buf, bytes));
    return MTC_OK;
}
