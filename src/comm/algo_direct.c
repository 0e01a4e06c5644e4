/* comm/algo_direct.c - collectives where shm ranks read each other's
 * buffers directly (the low-latency path; shm backend only).
 *
 * Every operation is an "epoch" of the group: each rank publishes pointers
 * (and its call signature) in its member slot for the epoch's parity and
 * arrives at phase 0; after everyone has arrived the signatures are compared
 * (a mismatch fails every rank with INVALID_USAGE) and data moves:
 *
 *   small (<= SHM_SMALL bytes staged):      large:
 *     stage input in my `small` block        publish the user buffers
 *     arrive 0, wait all 0                   arrive 0, wait all 0
 *     read peers' stages -> my output        reduce / copy my part of the
 *     (1 sync; stages are reused two           work straight between user
 *      epochs later, when every peer is        buffers, arrive 1, wait all 1
 *      provably done with them)                (peers are done with mine)
 *
 * All-reduce (large): rank r reduces slice r of all inputs in rank order
 * 0..n-1 (in L1-sized chunks) and writes the result into slice r of EVERY
 * rank's output, so each element is reduced exactly once, all ranks end with
 * the same bits, and every byte crosses between cores once. Small all-reduce: every rank reduces all stages in the same
 * order, which gives the same bits too. bf16 rounds back at every step.
 *
 * Limitations: shm only (pointers are meaningful in one process); memory
 * bandwidth bound with every rank touching every input once; all-to-all-v
 * always takes the two-sync path (ranks cannot agree on "small" locally). */
#include <string.h>

#include "comm/comm_internal.h"
#include "comm/shm.h"

#define CHUNK_BYTES 16384

typedef struct {
    comm_group *g;
    const comm_call *call;
    int me, n;
    uint64_t e;
} dctx;

static void begin(mtc_comm_t comm, dctx *d) {
    d->g = comm->group;
    d->call = comm->cur;
    d->me = comm->rank;
    d->n = comm->size;
    d->e = ++d->g->m[d->me].epoch;
}

static shm_pub *pub(const dctx *d, int p) { return &d->g->m[p].pub[d->e & 1]; }

/* Publish my pointers, arrive at phase 0, wait for everyone, compare calls. */
static mtc_result_t publish(dctx *d, const void *sbuf, void *rbuf, const size_t *counts,
                            const size_t *displs) {
    shm_pub *p = pub(d, d->me);
    atomic_store_explicit(&p->sbuf, sbuf, memory_order_relaxed);
    atomic_store_explicit(&p->rbuf, rbuf, memory_order_relaxed);
    atomic_store_explicit(&p->counts, counts, memory_order_relaxed);
    atomic_store_explicit(&p->displs, displs, memory_order_relaxed);
    atomic_store_explicit(&p->sig, shm_pack_sig(d->call), memory_order_relaxed);
    atomic_store_explicit(&p->count, (uint64_t)d->call->count, memory_order_relaxed);
    shm_arrive(d->g, d->me, d->e, 0);
    MTC_CHECK(shm_wait_all(d->g, d->me, d->e, 0, d->call));
    for (int q = 0; q < d->n; q++)
        if (q != d->me) MTC_CHECK(shm_check_pub(d->g, d->me, q, d->e, d->call));
    return MTC_OK;
}

static mtc_result_t sync1(dctx *d) {
    shm_arrive(d->g, d->me, d->e, 1);
    return shm_wait_all(d->g, d->me, d->e, 1, d->call);
}

static char *stage(dctx *d, const void *src, size_t bytes) {
    char *s = d->g->m[d->me].small + (d->e & 1) * SHM_SMALL;
    if (bytes) memcpy(s, src, bytes);
    return s;
}

static const char *peer_sbuf(const dctx *d, int p) {
    return atomic_load_explicit(&pub(d, p)->sbuf, memory_order_relaxed);
}
static char *peer_rbuf(const dctx *d, int p) {
    return atomic_load_explicit(&pub(d, p)->rbuf, memory_order_relaxed);
}

/* out[0..count) = src[0][off..] op src[1][off..] op ... in rank order; out
 * may alias one of the inputs at the same position (chunks are staged). */
static void reduce_all(char *out, const char *const *src, int n, size_t off, size_t count,
                       mtc_dtype_t dt, mtc_op_t op) {
    size_t es = mtc_dtype_size(dt), per = CHUNK_BYTES / es;
    _Alignas(64) char tmp[CHUNK_BYTES];
    for (size_t i = 0; i < count; i += per) {
        size_t m = count - i < per ? count - i : per, o = (off + i) * es;
        memcpy(tmp, src[0] + o, m * es);
        for (int p = 1; p < n; p++) comm_reduce_local(tmp, src[p] + o, m, dt, op);
        memcpy(out + i * es, tmp, m * es);
    }
}

/* Like reduce_all, but the reduced chunk goes to dst[p] + off of every rank
 * p (one pass over the inputs, one write per output, no staging block). */
static void reduce_push(char *const *dst, const char *const *src, int n, size_t off, size_t count,
                        mtc_dtype_t dt, mtc_op_t op) {
    size_t es = mtc_dtype_size(dt), per = CHUNK_BYTES / es;
    _Alignas(64) char tmp[CHUNK_BYTES];
    for (size_t i = 0; i < count; i += per) {
        size_t m = count - i < per ? count - i : per, o = (off + i) * es;
        memcpy(tmp, src[0] + o, m * es);
        for (int p = 1; p < n; p++) comm_reduce_local(tmp, src[p] + o, m, dt, op);
        for (int p = 0; p < n; p++) memcpy(dst[p] + o, tmp, m * es);
    }
}

static size_t slice_off(size_t count, int n, int k) {
    size_t q = count / (size_t)n, rem = count % (size_t)n;
    return (size_t)k * q + ((size_t)k < rem ? (size_t)k : rem);
}

static mtc_result_t ensure_small(mtc_comm_t comm) {
    char *s;
    return shm_member_small(comm->group, comm->rank, &s);
}

/* ---- operations ------------------------------------------------------------------- */

mtc_result_t algo_direct_barrier(mtc_comm_t comm) {
    dctx d;
    begin(comm, &d);
    return publish(&d, NULL, NULL, NULL, NULL);
}

mtc_result_t algo_direct_all_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                    mtc_dtype_t dtype, mtc_op_t op, mtc_comm_t comm) {
    dctx d;
    size_t es = mtc_dtype_size(dtype), bytes = count * es;
    MTC_CHECK(ensure_small(comm));
    begin(comm, &d);
    const char *src[d.n];
    if (bytes <= SHM_SMALL) {
        MTC_CHECK(publish(&d, stage(&d, sendbuf, bytes), NULL, NULL, NULL));
        for (int p = 0; p < d.n; p++) src[p] = peer_sbuf(&d, p);
        reduce_all(recvbuf, src, d.n, 0, count, dtype, op);
        return MTC_OK;
    }
    MTC_CHECK(publish(&d, sendbuf, recvbuf, NULL, NULL));
    char *dst[d.n];
    for (int p = 0; p < d.n; p++) src[p] = peer_sbuf(&d, p), dst[p] = peer_rbuf(&d, p);
    size_t lo = slice_off(count, d.n, d.me), hi = slice_off(count, d.n, d.me + 1);
    reduce_push(dst, src, d.n, lo, hi - lo, dtype, op);
    return sync1(&d); /* every slice of my output has been written */
}

/* Rank r gets block r (recvcounts[r] elements at the packed offset). */
static mtc_result_t rs_blocks(const void *sendbuf, void *recvbuf, const size_t *counts,
                              size_t uniform, mtc_dtype_t dtype, mtc_op_t op, mtc_comm_t comm) {
    dctx d;
    size_t es = mtc_dtype_size(dtype), total = 0, off = 0;
    for (int p = 0; p < comm->size; p++) {
        size_t c = counts ? counts[p] : uniform;
        if (p < comm->rank) off += c;
        total += c;
    }
    size_t mine = counts ? counts[comm->rank] : uniform;
    MTC_CHECK(ensure_small(comm));
    begin(comm, &d);
    const char *src[d.n];
    int small = total * es <= SHM_SMALL;
    MTC_CHECK(publish(&d, small ? stage(&d, sendbuf, total * es) : sendbuf, NULL, NULL, NULL));
    for (int p = 0; p < d.n; p++) src[p] = peer_sbuf(&d, p);
    reduce_all(recvbuf, src, d.n, off, mine, dtype, op);
    return small ? MTC_OK : sync1(&d);
}

mtc_result_t algo_direct_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                        mtc_dtype_t dtype, mtc_op_t op, mtc_comm_t comm) {
    return rs_blocks(sendbuf, recvbuf, NULL, recvcount, dtype, op, comm);
}

mtc_result_t algo_direct_reduce_scatter_v(const void *sendbuf, void *recvbuf,
                                          const size_t *recvcounts, mtc_dtype_t dtype,
                                          mtc_op_t op, mtc_comm_t comm) {
    return rs_blocks(sendbuf, recvbuf, recvcounts, 0, dtype, op, comm);
}

/* Block p of the output comes from rank p's input. */
static mtc_result_t ag_blocks(const void *sendbuf, size_t sendcount, void *recvbuf,
                              const size_t *counts, const size_t *displs, mtc_dtype_t dtype,
                              mtc_comm_t comm) {
    dctx d;
    size_t es = mtc_dtype_size(dtype), total = 0;
    for (int p = 0; p < comm->size; p++) total += counts ? counts[p] : sendcount;
    MTC_CHECK(ensure_small(comm));
    begin(comm, &d);
    int small = total * es <= SHM_SMALL;
    if (small) { /* pull from the peers' stages */
        MTC_CHECK(publish(&d, stage(&d, sendbuf, sendcount * es), NULL, NULL, NULL));
        size_t off = 0;
        for (int p = 0; p < d.n; p++) {
            size_t c = counts ? counts[p] : sendcount, at = displs ? displs[p] : off;
            char *dst = (char *)recvbuf + at * es;
            const char *src = p == d.me ? sendbuf : peer_sbuf(&d, p);
            if (c && dst != src) memcpy(dst, src, c * es);
            off += c;
        }
        return MTC_OK;
    }
    /* push my block into every output (each rank may have its own displs) */
    MTC_CHECK(publish(&d, sendbuf, recvbuf, NULL, displs));
    size_t mine_off = 0;
    for (int p = 0; p < d.me; p++) mine_off += counts ? counts[p] : sendcount;
    for (int p = 0; p < d.n; p++) {
        const size_t *pd = atomic_load_explicit(&pub(&d, p)->displs, memory_order_relaxed);
        char *dst = peer_rbuf(&d, p) + (pd ? pd[d.me] : mine_off) * es;
        if (sendcount && dst != (const char *)sendbuf) memcpy(dst, sendbuf, sendcount * es);
    }
    return sync1(&d);
}

mtc_result_t algo_direct_all_gather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                    mtc_dtype_t dtype, mtc_comm_t comm) {
    return ag_blocks(sendbuf, sendcount, recvbuf, NULL, NULL, dtype, comm);
}

mtc_result_t algo_direct_all_gather_v(const void *sendbuf, size_t sendcount, void *recvbuf,
                                      const size_t *recvcounts, const size_t *displs,
                                      mtc_dtype_t dtype, mtc_comm_t comm) {
    return ag_blocks(sendbuf, sendcount, recvbuf, recvcounts, displs, dtype, comm);
}

mtc_result_t algo_direct_all_to_all(const void *sendbuf, void *recvbuf, size_t count,
                                    mtc_dtype_t dtype, mtc_comm_t comm) {
    dctx d;
    size_t es = mtc_dtype_size(dtype), blk = count * es;
    MTC_CHECK(ensure_small(comm));
    begin(comm, &d);
    int small = blk * (size_t)d.n <= SHM_SMALL;
    if (small) { /* pull block me from the peers' stages */
        MTC_CHECK(publish(&d, stage(&d, sendbuf, blk * (size_t)d.n), NULL, NULL, NULL));
        for (int p = 0; p < d.n; p++)
            memcpy((char *)recvbuf + (size_t)p * blk, peer_sbuf(&d, p) + (size_t)d.me * blk, blk);
        return MTC_OK;
    }
    MTC_CHECK(publish(&d, sendbuf, recvbuf, NULL, NULL)); /* push block p to rank p */
    for (int p = 0; p < d.n; p++)
        memcpy(peer_rbuf(&d, p) + (size_t)d.me * blk, (const char *)sendbuf + (size_t)p * blk, blk);
    return sync1(&d);
}

static size_t packed_off(const size_t *counts, int j) {
    size_t off = 0;
    for (int i = 0; i < j; i++) off += counts[i];
    return off;
}

mtc_result_t algo_direct_all_to_all_v(const void *sendbuf, const size_t *sendcounts,
                                      const size_t *sdispls, void *recvbuf,
                                      const size_t *recvcounts, const size_t *rdispls,
                                      mtc_dtype_t dtype, mtc_comm_t comm) {
    dctx d;
    size_t es = mtc_dtype_size(dtype);
    begin(comm, &d);
    MTC_CHECK(publish(&d, sendbuf, NULL, sendcounts, sdispls));
    mtc_result_t rc = MTC_OK;
    for (int p = 0; p < d.n && rc == MTC_OK; p++) {
        const size_t *pc = atomic_load_explicit(&pub(&d, p)->counts, memory_order_relaxed);
        const size_t *pd = atomic_load_explicit(&pub(&d, p)->displs, memory_order_relaxed);
        if (pc[d.me] != recvcounts[p]) {
            rc = mtc_error(MTC_ERR_INVALID_USAGE,
                           "all_to_all_v count mismatch in %s: rank %d sends %zu elements to rank "
                           "%d, which expects %zu", d.call->group_name, p, pc[d.me], d.me,
                           recvcounts[p]);
            break;
        }
        size_t soff = pd ? pd[d.me] : packed_off(pc, d.me);
        size_t roff = rdispls ? rdispls[p] : packed_off(recvcounts, p);
        if (recvcounts[p])
            memcpy((char *)recvbuf + roff * es, peer_sbuf(&d, p) + soff * es, recvcounts[p] * es);
    }
    mtc_result_t rc2 = sync1(&d); /* peers may still read my buffers */
    return rc != MTC_OK ? rc : rc2;
}

mtc_result_t algo_direct_broadcast(void *buf, size_t count, mtc_dtype_t dtype, int root,
                                   mtc_comm_t comm) {
    dctx d;
    size_t bytes = count * mtc_dtype_size(dtype);
    MTC_CHECK(ensure_small(comm));
    begin(comm, &d);
    int small = bytes <= SHM_SMALL, is_root = d.me == root;
    const void *mine = is_root ? (small ? stage(&d, buf, bytes) : buf) : NULL;
    MTC_CHECK(publish(&d, mine, NULL, NULL, NULL));
    if (!is_root) memcpy(buf, peer_sbuf(&d, root), bytes);
    if (small) return MTC_OK;
    shm_arrive(d.g, d.me, d.e, 1);
    return is_root ? shm_wait_all(d.g, d.me, d.e, 1, d.call) : MTC_OK;
}

mtc_result_t algo_direct_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                mtc_dtype_t dtype, mtc_op_t op, int root, mtc_comm_t comm) {
    dctx d;
    size_t es = mtc_dtype_size(dtype), bytes = count * es;
    MTC_CHECK(ensure_small(comm));
    begin(comm, &d);
    const char *src[d.n];
    if (bytes <= SHM_SMALL) {
        MTC_CHECK(publish(&d, stage(&d, sendbuf, bytes), NULL, NULL, NULL));
        if (d.me != root) return MTC_OK;
        for (int p = 0; p < d.n; p++) src[p] = peer_sbuf(&d, p);
        reduce_all(recvbuf, src, d.n, 0, count, dtype, op);
        return MTC_OK;
    }
    MTC_CHECK(publish(&d, sendbuf, d.me == root ? recvbuf : NULL, NULL, NULL));
    for (int p = 0; p < d.n; p++) src[p] = peer_sbuf(&d, p);
    size_t lo = slice_off(count, d.n, d.me), hi = slice_off(count, d.n, d.me + 1);
    reduce_all(peer_rbuf(&d, root) + lo * es, src, d.n, lo, hi - lo, dtype, op);
    return sync1(&d);
}
