/* comm/bench.h - the collective benchmark behind `mtc bench-comm`
 * (nccl-tests style): per operation, algorithm and size, the median time
 * of one call over the iterations, algorithm and bus bandwidth, and a
 * correctness check of the result against a closed form of (rank, index).
 * The library measures; cli/ prints (rows arrive through a callback on
 * rank 0). */
#ifndef MTC_COMM_BENCH_H
#define MTC_COMM_BENCH_H

#include <stddef.h>

#include "comm/comm.h"

#define MTC_BENCH_MAX_SIZES 64

typedef struct {
    mtc_coll_t op;
    mtc_algo_t algo;     /* as asked (AUTO = the selector) */
    mtc_algo_t resolved; /* what ran */
    const char *backend;
    int ranks;
    size_t bytes; /* nccl-tests "size": the larger of the send/recv buffers */
    size_t count; /* elements per rank as passed to the call */
    mtc_dtype_t dtype;
    double time_us; /* median over iterations of the slowest rank's time */
    double algbw_gbps, busbw_gbps;
    int ok; /* result equals the closed form on every rank */
} mtc_bench_row;

typedef void (*mtc_bench_row_fn)(const mtc_bench_row *row, void *ctx);

typedef struct {
    mtc_coll_t ops[8];
    int nops;
    mtc_algo_t algo; /* AUTO, one algorithm, or ... */
    int all_algos;   /* 1: every algorithm usable for the op */
    size_t sizes[MTC_BENCH_MAX_SIZES];
    int nsizes;
    int iters, warmup;
    mtc_dtype_t dtype;
    mtc_bench_row_fn row; /* called on rank 0 */
    void *ctx;
} mtc_bench_opts;

/* nccl-tests bus bandwidth factor: all_reduce 2(n-1)/n; reduce_scatter,
 * all_gather, all_to_all (n-1)/n; broadcast, reduce 1. */
double mtc_bench_bus_factor(mtc_coll_t op, int ranks);

/* Run on every rank of world (collective). Returns MTC_OK when it could
 * measure (wrong results are reported in the rows, not as an error). */
mtc_result_t mtc_bench_comm(mtc_comm_t world, const mtc_bench_opts *opts, int *all_ok);

#endif
