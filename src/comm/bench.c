/* comm/bench.c - measuring collectives (see bench.h).
 *
 * For each (op, algorithm, size): buffers allocated once at the largest
 * size (fresh pages are expensive), inputs a closed form of (rank, index)
 * whose reductions are exact in every dtype, `warmup` untimed calls, then
 * `iters` timed ones; each rank times every call and the slowest rank's
 * time per iteration enters the median. The output of the last call is
 * checked against the closed form on every rank. The benchmark runs on a
 * duplicate of the world communicator so forcing algorithms does not leak.
 * Relies on comm_internal.h for which algorithms can run. Does not print. */
#include <stdlib.h>
#include <string.h>

#include "comm/bench.h"
#include "comm/comm_internal.h"
#include "core/mem.h"
#include "core/timer.h"

double mtc_bench_bus_factor(mtc_coll_t op, int n) {
    switch (op) {
    case MTC_COLL_ALL_REDUCE: return n > 1 ? 2.0 * (n - 1) / n : 0;
    case MTC_COLL_REDUCE_SCATTER:
    case MTC_COLL_ALL_GATHER:
    case MTC_COLL_ALL_TO_ALL:
    case MTC_COLL_ALL_TO_ALL_V: return (double)(n - 1) / n;
    default: return 1.0;
    }
}

/* small non-negative integers: sums over up to 32 ranks stay exact in bf16 */
static double val(int rank, size_t i) { return (double)(((size_t)rank + 1) * (i % 5 + 1) % 8); }

static double sum_val(int n, size_t i) {
    double s = 0;
    for (int r = 0; r < n; r++)
        s += val(r, i);
    return s;
}

static int per_block(mtc_coll_t op) {
    return op == MTC_COLL_REDUCE_SCATTER || op == MTC_COLL_ALL_GATHER ||
           op == MTC_COLL_ALL_TO_ALL || op == MTC_COLL_ALL_TO_ALL_V;
}

/* Elements per rank passed to the call, and the nccl-tests size in bytes. */
static size_t count_for(mtc_coll_t op, size_t bytes, size_t es, int n) {
    size_t c = bytes / es;
    if (per_block(op)) c /= (size_t)n;
    return c ? c : 1;
}

static size_t bytes_for(mtc_coll_t op, size_t count, size_t es, int n) {
    return per_block(op) ? count * es * (size_t)n : count * es;
}

/* all_to_all_v: rank s sends c + c/4 elements to rank d when s + d is even,
 * c - c/4 when odd (uneven blocks as a MoE dispatch has them; with an even
 * number of ranks every rank still sends and receives n*c in all); element
 * i of that block is val(s, 2c*d + i). v = [sendcounts | recvcounts] (2n). */
static size_t a2av_count(size_t c, int s, int d) { return (s + d) % 2 ? c - c / 4 : c + c / 4; }

static void a2av_counts(size_t *v, size_t c, int rank, int n) {
    for (int j = 0; j < n; j++)
        v[j] = a2av_count(c, rank, j), v[n + j] = a2av_count(c, j, rank);
}

static mtc_result_t call(mtc_comm_t c, mtc_coll_t op, const void *s, void *r, size_t n,
                         mtc_dtype_t dt, const size_t *v) {
    switch (op) {
    case MTC_COLL_ALL_REDUCE: return mtc_all_reduce(s, r, n, dt, MTC_OP_SUM, c);
    case MTC_COLL_REDUCE_SCATTER: return mtc_reduce_scatter(s, r, n, dt, MTC_OP_SUM, c);
    case MTC_COLL_ALL_GATHER: return mtc_all_gather(s, r, n, dt, c);
    case MTC_COLL_ALL_TO_ALL: return mtc_all_to_all(s, r, n, dt, c);
    case MTC_COLL_ALL_TO_ALL_V:
        return mtc_all_to_all_v(s, v, NULL, r, v + mtc_comm_size(c), NULL, dt, c);
    case MTC_COLL_BROADCAST: return mtc_broadcast(r, n, dt, 0, c);
    case MTC_COLL_REDUCE: return mtc_reduce(s, r, n, dt, MTC_OP_SUM, 0, c);
    default:
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "bench-comm cannot run %s", mtc_coll_name(op));
    }
}

static void fill_inputs(mtc_coll_t op, void *s, void *r, size_t n, mtc_dtype_t dt, int rank,
                        int size) {
    size_t total =
        op == MTC_COLL_REDUCE_SCATTER || op == MTC_COLL_ALL_TO_ALL ? n * (size_t)size : n;
    for (size_t i = 0; i < total && op != MTC_COLL_ALL_TO_ALL_V; i++)
        mtc_dtype_store(s, dt, i, val(rank, i));
    for (int d = 0, o = 0; op == MTC_COLL_ALL_TO_ALL_V && d < size; d++)
        for (size_t i = 0, k = a2av_count(n, rank, d); i < k; i++)
            mtc_dtype_store(s, dt, (size_t)o++, val(rank, 2 * n * (size_t)d + i));
    if (op == MTC_COLL_BROADCAST)
        for (size_t i = 0; i < n; i++)
            mtc_dtype_store(r, dt, i, rank == 0 ? val(0, i) : 99);
}

/* Result of the last call against the closed form. */
static int check(mtc_coll_t op, const void *r, size_t n, mtc_dtype_t dt, int rank, int size) {
    size_t bad = 0;
    switch (op) {
    case MTC_COLL_ALL_REDUCE:
        for (size_t i = 0; i < n; i++)
            bad += mtc_dtype_load(r, dt, i) != sum_val(size, i);
        break;
    case MTC_COLL_REDUCE:
        if (rank == 0)
            for (size_t i = 0; i < n; i++)
                bad += mtc_dtype_load(r, dt, i) != sum_val(size, i);
        break;
    case MTC_COLL_REDUCE_SCATTER:
        for (size_t i = 0; i < n; i++)
            bad += mtc_dtype_load(r, dt, i) != sum_val(size, (size_t)rank * n + i);
        break;
    case MTC_COLL_ALL_GATHER:
        for (size_t i = 0; i < n * (size_t)size; i++)
            bad += mtc_dtype_load(r, dt, i) != val((int)(i / n), i % n);
        break;
    case MTC_COLL_ALL_TO_ALL:
        for (size_t i = 0; i < n * (size_t)size; i++)
            bad += mtc_dtype_load(r, dt, i) != val((int)(i / n), (size_t)rank * n + i % n);
        break;
    case MTC_COLL_ALL_TO_ALL_V:
        for (int p = 0, o = 0; p < size; p++)
            for (size_t i = 0, k = a2av_count(n, p, rank); i < k; i++)
                bad += mtc_dtype_load(r, dt, (size_t)o++) != val(p, 2 * n * (size_t)rank + i);
        break;
    case MTC_COLL_BROADCAST:
        for (size_t i = 0; i < n; i++)
            bad += mtc_dtype_load(r, dt, i) != val(0, i);
        break;
    default: break;
    }
    return bad == 0;
}

/* warmup, then iters timed calls (per-rank times into t) */
static mtc_result_t timed_calls(mtc_comm_t c, const mtc_bench_opts *o, mtc_coll_t op, size_t cnt,
                                char *s, char *r, double *t) {
    int n = mtc_comm_size(c);
    size_t *v = NULL;
    if (op == MTC_COLL_ALL_TO_ALL_V) {
        MTC_CHECK(mtc_mem_alloc(2 * (size_t)n * sizeof *v, (void **)&v));
        a2av_counts(v, cnt, mtc_comm_rank(c), n);
    }
    fill_inputs(op, s, r, cnt, o->dtype, mtc_comm_rank(c), n);
    mtc_result_t rc = MTC_OK;
    for (int i = 0; i < o->warmup; i++)
        MTC_CHECK_GOTO(call(c, op, s, r, cnt, o->dtype, v), rc, out);
    MTC_CHECK_GOTO(mtc_barrier(c), rc, out);
    for (int i = 0; i < o->iters; i++) {
        uint64_t t0 = mtc_time_ns();
        MTC_CHECK_GOTO(call(c, op, s, r, cnt, o->dtype, v), rc, out);
        t[i] = (double)(mtc_time_ns() - t0) * 1e-3;
    }
out:
    free(v);
    return rc;
}

/* algo AUTO leaves the communicator's setting alone (the selector, or what
 * --comm-algo / MTC_COMM_ALGO forced); another algorithm is forced for the
 * row and the previous setting restored after. Timings and the verdict are
 * combined over `world`, so the benchmarked communicator sees only `op`. */
static mtc_result_t one_row(mtc_comm_t world, mtc_comm_t c, const mtc_bench_opts *o, mtc_coll_t op,
                            mtc_algo_t algo, size_t size_bytes, char *s, char *r, double *t,
                            int *all_ok) {
    int n = mtc_comm_size(c), rank = mtc_comm_rank(c);
    size_t es = mtc_dtype_size(o->dtype), cnt = count_for(op, size_bytes, es, n);
    mtc_algo_t before = mtc_comm_get_algo(c, op);
    if (algo != MTC_ALGO_AUTO) mtc_comm_set_algo(c, op, algo);
    mtc_result_t rc = timed_calls(c, o, op, cnt, s, r, t);
    if (algo != MTC_ALGO_AUTO) mtc_comm_set_algo(c, op, before);
    MTC_CHECK(rc);
    int ok = check(op, r, cnt, o->dtype, rank, n), all = 0;
    MTC_CHECK(mtc_all_reduce(t, t, (size_t)o->iters, MTC_DTYPE_F64, MTC_OP_MAX, world));
    MTC_CHECK(mtc_all_reduce(&ok, &all, 1, MTC_DTYPE_I32, MTC_OP_MIN, world));
    if (!all) *all_ok = 0;
    if (rank != 0 || !o->row) return MTC_OK;
    mtc_bench_row row = {.op = op,
                         .algo = algo,
                         .backend = mtc_comm_backend_name(c),
                         .ranks = n,
                         .count = cnt,
                         .dtype = o->dtype,
                         .ok = all};
    row.resolved = algo == MTC_ALGO_AUTO ? mtc_comm_choose(c, op, cnt, o->dtype) : algo;
    row.bytes = bytes_for(op, cnt, es, n);
    row.time_us = mtc_median(t, o->iters);
    row.algbw_gbps = row.time_us > 0 ? (double)row.bytes / (row.time_us * 1e3) : 0;
    row.busbw_gbps = row.algbw_gbps * mtc_bench_bus_factor(op, n);
    o->row(&row, o->ctx);
    return MTC_OK;
}

mtc_result_t mtc_bench_comm(mtc_comm_t world, const mtc_bench_opts *o, int *all_ok) {
    *all_ok = 1;
    if (o->iters < 1 || o->nsizes < 1 || o->nops < 1)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "bench-comm needs iters >= 1, a size and an op");
    size_t maxb = 0, es = mtc_dtype_size(o->dtype);
    int n = mtc_comm_size(world);
    for (int i = 0; i < o->nsizes; i++) {
        size_t b = bytes_for(MTC_COLL_ALL_TO_ALL,
                             count_for(MTC_COLL_ALL_TO_ALL, o->sizes[i], es, n), es, n);
        b += b / 4; /* all_to_all_v's larger blocks */
        b = b > o->sizes[i] ? b : o->sizes[i];
        maxb = b > maxb ? b : maxb;
    }
    mtc_comm_t c = NULL;
    char *s = NULL, *r = NULL;
    double *t = NULL;
    mtc_result_t rc;
    MTC_CHECK_GOTO(mtc_comm_split(world, 0, mtc_comm_rank(world), "BENCH", &c), rc, out);
    MTC_CHECK_GOTO(mtc_mem_alloc_big(maxb + 64, 1, (void **)&s), rc, out);
    MTC_CHECK_GOTO(mtc_mem_alloc_big(maxb + 64, 1, (void **)&r), rc, out);
    MTC_CHECK_GOTO(mtc_mem_alloc(sizeof *t * (size_t)o->iters, (void **)&t), rc, out);
    for (int k = 0; k < o->nops; k++) {
        mtc_coll_t op = o->ops[k];
        for (int a = 0; a < MTC_ALGO_COUNT; a++) {
            int want = o->all_algos ? (a == MTC_ALGO_AUTO || comm_algo_usable(c, op, (mtc_algo_t)a))
                                    : a == (int)o->algo;
            if (!want) continue;
            if (o->all_algos && a == MTC_ALGO_NATIVE && o->dtype == MTC_DTYPE_BF16) continue;
            for (int i = 0; i < o->nsizes; i++)
                MTC_CHECK_GOTO(
                    one_row(world, c, o, op, (mtc_algo_t)a, o->sizes[i], s, r, t, all_ok), rc, out);
        }
    }
    rc = MTC_OK;
out:
    free(t);
    mtc_mem_free_big(s, maxb + 64);
    mtc_mem_free_big(r, maxb + 64);
    mtc_comm_free(c);
    return rc;
}
