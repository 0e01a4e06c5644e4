/* comm/algo_direct.c - collectives where shm ranks read each other's
 * buffers directly (the low-latency path; shm backend only).
 *
 * Every operation is an "epoch" of the group: each rank publishes pointers
 * (and its call signature) in its member slot for the epoch's parity and
 * arrives at phase 0; after everyone has arrived the signatures are compared
 * (a mismatch fails every rank with INVALID_USAGE) and data moves:
 *
 *   tiny (<= SHM_LINE_DATA bytes per rank: all-reduce, reduce, broadcast,
 *   all-gather, and barrier): data, call signature and arrival tag share
 *   one cache line per member (shm_line), so a peer's arrival, call check
 *   and data cost one line transfer; one sync.
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
 * the same bits, and every byte crosses between cores once. Small all-reduce: every rank reduces
 * all stages in the same order, which gives the same bits too. bf16 rounds back at every step.
 * Outputs of STREAM_MIN_BYTES and more are written with non-temporal stores.
 *
 * Limitations: shm only (pointers are meaningful in one process); memory
 * bandwidth bound with every rank touching every input once; all-to-all-v
 * always takes the two-sync path (ranks cannot agree on "small" locally). */
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "comm/comm_internal.h"
#include "comm/shm.h"

#define CHUNK_BYTES 16384

/* Outputs at least this large are written with non-temporal stores: four
 * such vectors (2 inputs, 2 outputs on 2 ranks) no longer share the 32 MiB
 * L3 with anything, and a single-thread reduce-then-copy of 16-64 MiB ran
 * 1.4x faster with streamed outputs (no read-for-ownership). Smaller
 * outputs stay cached for whoever reads them next. */
#define STREAM_MIN_BYTES ((size_t)8 << 20)

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

/* ---- tiny collectives: one cache line per member and epoch parity ---------------------
 * Store data, call and tag into my line, wait until every peer's line of this
 * parity carries the epoch, check their calls. Reuse is safe as for `small`:
 * epoch e+2 starts after every peer arrived at e+1, i.e. finished reading e. */
typedef struct {
    comm_group *g;
    uint64_t e;
    int n, next;
} line_arg;

static int lines_ready(void *arg) {
    line_arg *a = arg;
    for (; a->next < a->n; a->next++)
        if (atomic_load_explicit(&a->g->m[a->next].line[a->e & 1].tag, memory_order_acquire) < a->e)
            return 0;
    return 1;
}

static const unsigned char *line_data(const dctx *d, int p) {
    return d->g->m[p].line[d->e & 1].data;
}

static mtc_result_t line_sync(dctx *d, const void *src, size_t bytes) {
    shm_line *l = &d->g->m[d->me].line[d->e & 1];
    if (bytes) comm_copy(l->data, src, bytes);
    atomic_store_explicit(&l->sig, shm_pack_sig(d->call), memory_order_relaxed);
    atomic_store_explicit(&l->count, (uint64_t)d->call->count, memory_order_relaxed);
    atomic_store_explicit(&l->tag, d->e, memory_order_release);
    shm_event_signal(&d->g->ev);
    line_arg a = {d->g, d->e, d->n, 0};
    MTC_CHECK(shm_wait(d->g, d->me, &d->g->ev, lines_ready, &a, d->call, -1));
    for (int q = 0; q < d->n; q++) {
        if (q == d->me) continue;
        shm_line *pl = &d->g->m[q].line[d->e & 1];
        MTC_CHECK(shm_check_sig(d->g, d->me, q,
                                atomic_load_explicit(&pl->sig, memory_order_relaxed),
                                atomic_load_explicit(&pl->count, memory_order_relaxed), d->call));
    }
    return MTC_OK;
}

/* out = line 0 op line 1 op ... in rank order (the same bits on every rank). */
static void line_reduce(void *out, const dctx *d, size_t count, mtc_dtype_t dt, mtc_op_t op) {
    comm_copy(out, line_data(d, 0), count * mtc_dtype_size(dt));
    for (int p = 1; p < d->n; p++)
        comm_reduce_local(out, line_data(d, p), count, dt, op);
}

static mtc_result_t sync1(dctx *d) {
    shm_arrive(d->g, d->me, d->e, 1);
    return shm_wait_all(d->g, d->me, d->e, 1, d->call);
}

static char *stage(dctx *d, const void *src, size_t bytes) {
    char *s = d->g->m[d->me].small + (d->e & 1) * SHM_SMALL;
    if (bytes) comm_copy(s, src, bytes);
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
        comm_copy(tmp, src[0] + o, m * es);
        for (int p = 1; p < n; p++)
            comm_reduce_local(tmp, src[p] + o, m, dt, op);
        comm_copy(out + i * es, tmp, m * es);
    }
}

/* dst = src with non-temporal stores where dst is 16-byte aligned: the
 * written lines are not read first (no read-for-ownership) and do not evict
 * the inputs. Callers end a run of these with stream_fence() before they
 * publish (arrive), which orders the streamed stores. */
static void stream_copy(char *dst, const char *src, size_t bytes) {
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
    if (head > bytes) head = bytes;
    comm_copy(dst, src, head);
    dst += head, src += head, bytes -= head;
    size_t body = bytes & ~(size_t)63;
    for (size_t i = 0; i < body; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(src + i + 48));
        _mm_stream_si128((__m128i *)(dst + i), a);
        _mm_stream_si128((__m128i *)(dst + i + 16), b);
        _mm_stream_si128((__m128i *)(dst + i + 32), c);
        _mm_stream_si128((__m128i *)(dst + i + 48), e);
    }
    comm_copy(dst + body, src + body, bytes - body);
#else
    comm_copy(dst, src, bytes);
#endif
}

static void stream_fence(void) {
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
    _mm_sfence();
#endif
}

/* Like reduce_all, but the reduced chunk goes to dst[p] + off of every rank
 * p (one pass over the inputs, one write per output, no staging block);
 * `stream`: write the outputs with non-temporal stores (vectors far larger
 * than the caches, where nobody reads the output soon). */
static void reduce_push(char *const *dst, const char *const *src, int n, size_t off, size_t count,
                        mtc_dtype_t dt, mtc_op_t op, int stream) {
    size_t es = mtc_dtype_size(dt), per = CHUNK_BYTES / es;
    _Alignas(64) char tmp[CHUNK_BYTES];
    for (size_t i = 0; i < count; i += per) {
        size_t m = count - i < per ? count - i : per, o = (off + i) * es;
        comm_copy(tmp, src[0] + o, m * es);
        for (int p = 1; p < n; p++)
            comm_reduce_local(tmp, src[p] + o, m, dt, op);
        for (int p = 0; p < n; p++) {
            if (stream)
                stream_copy(dst[p] + o, tmp, m * es);
            else
                comm_copy(dst[p] + o, tmp, m * es);
        }
    }
    if (stream) stream_fence();
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
    return line_sync(&d, NULL, 0);
}

mtc_result_t algo_direct_all_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                    mtc_dtype_t dtype, mtc_op_t op, mtc_comm_t comm) {
    dctx d;
    size_t es = mtc_dtype_size(dtype), bytes = count * es;
    if (bytes <= SHM_LINE_DATA) {
        begin(comm, &d);
        MTC_CHECK(line_sync(&d, sendbuf, bytes));
        line_reduce(recvbuf, &d, count, dtype, op);
        return MTC_OK;
    }
    MTC_CHECK(ensure_small(comm));
    begin(comm, &d);
    const char *src[d.n];
    if (bytes <= SHM_SMALL) {
        MTC_CHECK(publish(&d, stage(&d, sendbuf, bytes), NULL, NULL, NULL));
        for (int p = 0; p < d.n; p++)
            src[p] = peer_sbuf(&d, p);
        reduce_all(recvbuf, src, d.n, 0, count, dtype, op);
        return MTC_OK;
    }
    MTC_CHECK(publish(&d, sendbuf, recvbuf, NULL, NULL));
    char *dst[d.n];
    for (int p = 0; p < d.n; p++)
        src[p] = peer_sbuf(&d, p), dst[p] = peer_rbuf(&d, p);
    size_t lo = slice_off(count, d.n, d.me), hi = slice_off(count, d.n, d.me + 1);
    reduce_push(dst, src, d.n, lo, hi - lo, dtype, op, bytes >= STREAM_MIN_BYTES);
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
    for (int p = 0; p < d.n; p++)
        src[p] = peer_sbuf(&d, p);
    reduce_all(recvbuf, src, d.n, off, mine, dtype, op);
    return small ? MTC_OK : sync1(&d);
}

mtc_result_t algo_direct_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                        mtc_dtype_t dtype, mtc_op_t op, mtc_comm_t comm) {
    return rs_blocks(sendbuf, recvbuf, NULL, recvcount, dtype, op, comm);
}

mtc_result_t algo_direct_reduce_scatter_v(const void *sendbuf, void *recvbuf,
                                          const size_t *recvcounts, mtc_dtype_t dtype, mtc_op_t op,
                                          mtc_comm_t comm) {
    return rs_blocks(sendbuf, recvbuf, recvcounts, 0, dtype, op, comm);
}

/* Block p of the output comes from rank p's input. */
static mtc_result_t ag_blocks(const void *sendbuf, size_t sendcount, void *recvbuf,
                              const size_t *counts, const size_t *displs, mtc_dtype_t dtype,
                              mtc_comm_t comm) {
    dctx d;
    size_t es = mtc_dtype_size(dtype), total = 0;
    for (int p = 0; p < comm->size; p++)
        total += counts ? counts[p] : sendcount;
    size_t maxc = sendcount;
    for (int p = 0; counts && p < comm->size; p++)
        maxc = counts[p] > maxc ? counts[p] : maxc;
    if (maxc * es <= SHM_LINE_DATA) { /* pull from the peers' lines */
        begin(comm, &d);
        MTC_CHECK(line_sync(&d, sendbuf, sendcount * es));
        size_t off = 0;
        for (int p = 0; p < d.n; p++) {
            size_t c = counts ? counts[p] : sendcount, at = displs ? displs[p] : off;
            if (c) comm_copy((char *)recvbuf + at * es, line_data(&d, p), c * es);
            off += c;
        }
        return MTC_OK;
    }
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
            if (c && dst != src) comm_copy(dst, src, c * es);
            off += c;
        }
        return MTC_OK;
    }
    /* push my block into every output (each rank may have its own displs) */
    MTC_CHECK(publish(&d, sendbuf, recvbuf, NULL, displs));
    size_t mine_off = 0;
    for (int p = 0; p < d.me; p++)
        mine_off += counts ? counts[p] : sendcount;
    int stream = total * es >= STREAM_MIN_BYTES;
    for (int p = 0; p < d.n; p++) {
        const size_t *pd = atomic_load_explicit(&pub(&d, p)->displs, memory_order_relaxed);
        char *dst = peer_rbuf(&d, p) + (pd ? pd[d.me] : mine_off) * es;
        if (!sendcount || dst == (const char *)sendbuf) continue;
        if (stream)
            stream_copy(dst, sendbuf, sendcount * es);
        else
            comm_copy(dst, sendbuf, sendcount * es);
    }
    if (stream) stream_fence();
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
            comm_copy((char *)recvbuf + (size_t)p * blk, peer_sbuf(&d, p) + (size_t)d.me * blk,
                      blk);
        return MTC_OK;
    }
    MTC_CHECK(publish(&d, sendbuf, recvbuf, NULL, NULL)); /* push block p to rank p */
    for (int p = 0; p < d.n; p++)
        comm_copy(peer_rbuf(&d, p) + (size_t)d.me * blk, (const char *)sendbuf + (size_t)p * blk,
                  blk);
    return sync1(&d);
}

static size_t packed_off(const size_t *counts, int j) {
    size_t off = 0;
    for (int i = 0; i < j; i++)
        off += counts[i];
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
                           "%d, which expects %zu",
                           d.call->group_name, p, pc[d.me], d.me, recvcounts[p]);
            break;
        }
        size_t soff = pd ? pd[d.me] : packed_off(pc, d.me);
        size_t roff = rdispls ? rdispls[p] : packed_off(recvcounts, p);
        if (recvcounts[p])
            comm_copy((char *)recvbuf + roff * es, peer_sbuf(&d, p) + soff * es,
                      recvcounts[p] * es);
    }
    mtc_result_t rc2 = sync1(&d); /* peers may still read my buffers */
    return rc != MTC_OK ? rc : rc2;
}

mtc_result_t algo_direct_broadcast(void *buf, size_t count, mtc_dtype_t dtype, int root,
                                   mtc_comm_t comm) {
    dctx d;
    size_t bytes = count * mtc_dtype_size(dtype);
    if (bytes <= SHM_LINE_DATA) {
        begin(comm, &d);
        MTC_CHECK(line_sync(&d, d.me == root ? buf : NULL, d.me == root ? bytes : 0));
        if (d.me != root) comm_copy(buf, line_data(&d, root), bytes);
        return MTC_OK;
    }
    MTC_CHECK(ensure_small(comm));
    begin(comm, &d);
    int small = bytes <= SHM_SMALL, is_root = d.me == root;
    const void *mine = is_root ? (small ? stage(&d, buf, bytes) : buf) : NULL;
    MTC_CHECK(publish(&d, mine, NULL, NULL, NULL));
    if (!is_root) comm_copy(buf, peer_sbuf(&d, root), bytes);
    if (small) return MTC_OK;
    shm_arrive(d.g, d.me, d.e, 1);
    return is_root ? shm_wait_all(d.g, d.me, d.e, 1, d.call) : MTC_OK;
}

mtc_result_t algo_direct_reduce(const void *sendbuf, void *recvbuf, size_t count, mtc_dtype_t dtype,
                                mtc_op_t op, int root, mtc_comm_t comm) {
    dctx d;
    size_t es = mtc_dtype_size(dtype), bytes = count * es;
    if (bytes <= SHM_LINE_DATA) {
        begin(comm, &d);
        MTC_CHECK(line_sync(&d, sendbuf, bytes));
        if (d.me == root) line_reduce(recvbuf, &d, count, dtype, op);
        return MTC_OK;
    }
    MTC_CHECK(ensure_small(comm));
    begin(comm, &d);
    const char *src[d.n];
    if (bytes <= SHM_SMALL) {
        MTC_CHECK(publish(&d, stage(&d, sendbuf, bytes), NULL, NULL, NULL));
        if (d.me != root) return MTC_OK;
        for (int p = 0; p < d.n; p++)
            src[p] = peer_sbuf(&d, p);
        reduce_all(recvbuf, src, d.n, 0, count, dtype, op);
        return MTC_OK;
    }
    MTC_CHECK(publish(&d, sendbuf, d.me == root ? recvbuf : NULL, NULL, NULL));
    for (int p = 0; p < d.n; p++)
        src[p] = peer_sbuf(&d, p);
    size_t lo = slice_off(count, d.n, d.me), hi = slice_off(count, d.n, d.me + 1);
    reduce_all(peer_rbuf(&d, root) + lo * es, src, d.n, lo, hi - lo, dtype, op);
    return sync1(&d);
}
