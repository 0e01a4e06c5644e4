/* comm/algo_pairwise.c - all-to-all with uneven blocks by pairwise exchange.
 *
 * Relies on algo.h's services (comm_p2p_sendrecv). Does not check
 * signatures or that the counts of the two sides of a pair agree (a
 * mismatch is a caller error the point-to-point layer reports).
 *
 *   step k (k = 0 .. p-1):  send block for (r+k) mod p to that rank,
 *                           receive block from (r-k) mod p
 *   p = 3:     k=0         k=1              k=2
 *     r0:   own copy    ->1  <-2         ->2  <-1
 *     r1:   own copy    ->2  <-0         ->0  <-2
 *     r2:   own copy    ->0  <-1         ->1  <-0
 * Each step pairs every rank with one sender and one receiver, so the
 * exchanges of a step proceed in parallel without deadlock. Blocks are
 * packed (displacement = sum of the counts before) when displs are NULL.
 * Nothing is reduced, so results are exact copies.
 *
 * Limitations: p-1 message steps, so latency grows linearly with size (a
 * Bruck-style log-step algorithm would suit tiny blocks on many ranks
 * better); every message is sent even when empty, so a count mismatch
 * between the two sides is caught instead of skipped. Not in place. */
#include <string.h>

#include "comm/algo.h"

static size_t pairwise_off(const size_t *counts, const size_t *displs, int j) {
    if (displs) return displs[j];
    size_t off = 0;
    for (int k = 0; k < j; k++)
        off += counts[k];
    return off;
}

mtc_result_t algo_pairwise_all_to_all_v(const void *sendbuf, const size_t *sendcounts,
                                        const size_t *sdispls, void *recvbuf,
                                        const size_t *recvcounts, const size_t *rdispls,
                                        mtc_dtype_t dtype, mtc_comm_t comm) {
    const int p = mtc_comm_size(comm), r = mtc_comm_rank(comm);
    const size_t es = mtc_dtype_size(dtype);
    const char *in = sendbuf;
    char *out = recvbuf;

    if (sendcounts[r] != recvcounts[r])
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "all_to_all_v: rank %d sends itself %zu elements but expects %zu; "
                         "sendcounts[%d] must equal recvcounts[%d]",
                         r, sendcounts[r], recvcounts[r], r, r);
    if (sendcounts[r])
        memmove(out + pairwise_off(recvcounts, rdispls, r) * es,
                in + pairwise_off(sendcounts, sdispls, r) * es, sendcounts[r] * es);
    for (int k = 1; k < p; k++) {
        int dst = (r + k) % p, src = (r - k + p) % p;
        MTC_CHECK(comm_p2p_sendrecv(
            comm, dst, in + pairwise_off(sendcounts, sdispls, dst) * es, sendcounts[dst] * es, src,
            out + pairwise_off(recvcounts, rdispls, src) * es, recvcounts[src] * es));
    }
    return MTC_OK;
}
