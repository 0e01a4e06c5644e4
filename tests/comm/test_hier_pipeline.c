/* tests/comm/test_hier_pipeline.c - the hierarchical all-reduce on vectors
 * large enough to be cut into segments (algo_hier.c: 4 MiB each, the
 * inter-node all-reduce of one segment overlapping the intra-node steps of
 * its neighbours), which the collective matrix (at most ~1M elements, one
 * segment) never reaches.
 *
 * For nodes of 2 and 3 ranks (2 and 3 nodes): f32 sum, f32 avg, bf16 sum,
 * f64 max, i32 min over counts of 2, 3 and 5 segments with remainders (the
 * cut and the chunks within a segment both uneven), in place and out of
 * place. Inputs are small integers, so every result is exact and checked in
 * closed form element by element; sentinels after the output catch writes
 * past it; out-of-place inputs must be unchanged. Then inexact data: every
 * rank holds the same bits, and a repeated call gives the same bits.
 *
 * Reduced (MTC_TEST_QUICK=1, or a sanitizer build): the two 2-segment cases
 * on 2 nodes x 2 and 2 x 3.
 *
 * shm: thread-ranks on fake nodes (--ranks-per-node). Under mpirun the MPI
 * world is used as it is: MTC_TEST_NODES=N (tests/multihost: real hosts)
 * takes the MPI library's nodes, otherwise fake nodes of 2 ranks. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/dtype.h"
#include "test.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

#define SEG_BYTES ((size_t)4 << 20) /* algo_hier.c's HIER_SEGMENT_BYTES */
#define NSENT 16
#define SENT 0x5a

typedef struct {
    mtc_dtype_t dt;
    mtc_op_t op;
    double segments; /* the count in segments of SEG_BYTES */
    size_t extra;    /* elements past that */
} case_t;

static const case_t CASES[] = {
    {MTC_DTYPE_F32, MTC_OP_SUM, 2, 3},  {MTC_DTYPE_F32, MTC_OP_AVG, 3, 7},
    {MTC_DTYPE_BF16, MTC_OP_SUM, 2, 5}, {MTC_DTYPE_F64, MTC_OP_MAX, 3, 1},
    {MTC_DTYPE_I32, MTC_OP_MIN, 5, 11},
};
#define NCASES (int)(sizeof CASES / sizeof CASES[0])

static double value(int r, size_t i, mtc_op_t op) {
    if (op == MTC_OP_MAX || op == MTC_OP_MIN) return (double)((r * 7 + (int)(i % 11)) % 11) - 5;
    return (double)(((size_t)r + i) % 5 + 1) * (double)((int)(i % 7) - 3);
}

static double expected(int p, size_t i, mtc_op_t op, mtc_dtype_t dt) {
    double acc = value(0, i, op);
    for (int r = 1; r < p; r++) {
        double v = value(r, i, op);
        if (op == MTC_OP_MAX)
            acc = v > acc ? v : acc;
        else if (op == MTC_OP_MIN)
            acc = v < acc ? v : acc;
        else
            acc += v;
    }
    /* AVG: as comm_finish_avg divides, in the dtype (f32 here) */
    if (op == MTC_OP_AVG) return dt == MTC_DTYPE_F32 ? (double)((float)acc / (float)p) : acc / p;
    return acc;
}

static uint64_t hash_bytes(const void *b, size_t n) {
    const unsigned char *c = b;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

static void one_case(mtc_comm_t comm, const case_t *c, int inplace, char *in, char *out) {
    const int p = mtc_comm_size(comm), r = mtc_comm_rank(comm);
    const size_t es = mtc_dtype_size(c->dt);
    const size_t n = (size_t)(c->segments * (double)SEG_BYTES) / es + c->extra;
    char *dst = inplace ? in : out;
    for (size_t i = 0; i < n; i++)
        mtc_dtype_store(in, c->dt, i, value(r, i, c->op));
    memset(dst + n * es, SENT, NSENT * es);
    if (!inplace) memset(out, 0, n * es);
    mtc_result_t rc = mtc_all_reduce(in, dst, n, c->dt, c->op, comm);
    T_CHECKF(rc == MTC_OK, "p=%d rank %d %s %s n=%zu: %s: %s", p, r, mtc_dtype_name(c->dt),
             mtc_op_name(c->op), n, mtc_result_name(rc), mtc_error_detail());
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        double got = mtc_dtype_load(dst, c->dt, i), want = expected(p, i, c->op, c->dt);
        if (got != want && bad++ == 0) first = i;
    }
    T_CHECKF(bad == 0, "p=%d rank %d %s %s n=%zu %s: %zu wrong, first [%zu] = %g want %g", p, r,
             mtc_dtype_name(c->dt), mtc_op_name(c->op), n, inplace ? "in place" : "out of place",
             bad, first, bad ? mtc_dtype_load(dst, c->dt, first) : 0.0,
             bad ? expected(p, first, c->op, c->dt) : 0.0);
    size_t sent = 0;
    for (size_t i = 0; i < NSENT * es; i++)
        sent += (unsigned char)dst[n * es + i] != SENT;
    T_CHECKF(sent == 0, "p=%d rank %d n=%zu: %zu sentinel bytes overwritten", p, r, n, sent);
    if (!inplace) {
        size_t changed = 0;
        for (size_t i = 0; i < n; i++)
            changed += mtc_dtype_load(in, c->dt, i) != value(r, i, c->op);
        T_CHECKF(changed == 0, "p=%d rank %d n=%zu: input changed (%zu elements)", p, r, n,
                 changed);
    }
}

/* Inexact floats: the same bits on every rank, and on a second call. */
static void determinism(mtc_comm_t comm, char *in, char *out) {
    const int p = mtc_comm_size(comm), r = mtc_comm_rank(comm);
    const size_t n = 3 * SEG_BYTES / sizeof(float) + 13;
    float *x = (float *)in;
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((double)((i * 2654435761u + (size_t)r * 40503u) % 100003) / 997.0 - 50.0);
    uint64_t h[2];
    for (int k = 0; k < 2; k++) {
        mtc_result_t rc = mtc_all_reduce(in, out, n, MTC_DTYPE_F32, MTC_OP_SUM, comm);
        T_CHECKF(rc == MTC_OK, "determinism: %s: %s", mtc_result_name(rc), mtc_error_detail());
        h[k] = hash_bytes(out, n * sizeof(float));
    }
    T_CHECKF(h[0] == h[1], "p=%d rank %d: two calls gave different bits", p, r);
    uint64_t all[64] = {0};
    mtc_comm_set_algo(comm, MTC_COLL_ALL_GATHER, MTC_ALGO_RING);
    mtc_result_t rc = mtc_all_gather(&h[0], all, 1, MTC_DTYPE_I64, comm);
    T_CHECKF(rc == MTC_OK, "all_gather of the hashes: %s", mtc_error_detail());
    for (int q = 0; q < p && q < 64; q++)
        T_CHECKF(all[q] == h[0], "p=%d: rank %d's bits differ from rank %d's", p, q, r);
}

static mtc_result_t rank_main(mtc_comm_t world, void *arg) {
    const int quick = *(const int *)arg;
    if (mtc_comm_node_count(world) < 2) {
        T_CHECKF(0, "the world has %d node(s): the hierarchical algorithm needs 2",
                 mtc_comm_node_count(world));
        return MTC_OK;
    }
    size_t cap = 0;
    for (int c = 0; c < NCASES; c++) {
        size_t b = (size_t)(CASES[c].segments * (double)SEG_BYTES) +
                   (CASES[c].extra + NSENT) * mtc_dtype_size(CASES[c].dt);
        cap = b > cap ? b : cap;
    }
    char *in = malloc(cap), *out = malloc(cap);
    if (!in || !out) {
        free(in);
        free(out);
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "test_hier_pipeline: no memory for 2 x %zu B", cap);
    }
    mtc_comm_set_algo(world, MTC_COLL_ALL_REDUCE, MTC_ALGO_HIER);
    for (int c = 0; c < NCASES; c++)
        for (int inplace = 0; inplace < 2; inplace++)
            if (!quick || CASES[c].segments == 2) one_case(world, &CASES[c], inplace, in, out);
    if (!quick) determinism(world, in, out);
    free(in);
    free(out);
    return MTC_OK;
}

int main(void) {
    const char *q = getenv("MTC_TEST_QUICK");
    int quick = SANITIZED || (q && q[0] == '1');
    mtc_launch_opts o = {.backend = MTC_BACKEND_SHM, .timeout_s = 120, .pin_threads = -1};
    if (mtc_launched_by_mpi()) {
        const char *nodes = getenv("MTC_TEST_NODES");
        o.backend = MTC_BACKEND_MPI;
        o.ranks_per_node = nodes && nodes[0] ? 0 : 2;
        mtc_result_t rc = mtc_launch(&o, rank_main, &quick);
        T_CHECKF(rc == MTC_OK, "mpi launch: %s: %s", mtc_result_name(rc), mtc_error_detail());
        return T_DONE();
    }
    /* 2 nodes x 2, 2 nodes x 3, 3 nodes x 2 */
    static const int world[] = {4, 6, 6}, per_node[] = {2, 3, 2};
    for (int i = 0; i < (quick ? 2 : 3); i++) {
        o.world_size = world[i];
        o.ranks_per_node = per_node[i];
        mtc_result_t rc = mtc_launch(&o, rank_main, &quick);
        T_CHECKF(rc == MTC_OK, "launch of %d ranks, %d per node: %s: %s", world[i], per_node[i],
                 mtc_result_name(rc), mtc_error_detail());
    }
    return T_DONE();
}
