/* cli/cmd_bench_comm.c - `mtc bench-comm`: nccl-tests style table (or JSON
 * lines) of the collectives per operation, algorithm and size, with a
 * correctness column. Ranks are threads (--world-size, shm) or, under
 * mpirun, the MPI world. Rank 0 prints; exit status 1 when any row is
 * wrong, 2 on bad flags. Relies on comm/bench.h for the measuring. */
#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "comm/bench.h"

static const char about[] =
    "Measure the collectives like nccl-tests: size (bytes), count, median time of one call,\n"
    "algorithm bandwidth and bus bandwidth (all_reduce x 2(n-1)/n; reduce_scatter, all_gather,\n"
    "all_to_all, all_to_all_v x (n-1)/n; broadcast, reduce x 1), and whether the result is right.";

typedef struct {
    int json, printed_header;
} out_ctx;

static void print_row(const mtc_bench_row *r, void *p) {
    out_ctx *o = p;
    char algo[40];
    if (r->algo == MTC_ALGO_AUTO)
        snprintf(algo, sizeof algo, "auto(%s)", mtc_algo_name(r->resolved));
    else
        snprintf(algo, sizeof algo, "%s", mtc_algo_name(r->algo));
    if (o->json) {
        printf(
            "{\"op\": \"%s\", \"algo\": \"%s\", \"resolved\": \"%s\", \"backend\": \"%s\", "
            "\"ranks\": %d, \"dtype\": \"%s\", \"bytes\": %zu, \"count\": %zu, \"time_us\": %.3f, "
            "\"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, \"ok\": %s}\n",
            mtc_coll_name(r->op), mtc_algo_name(r->algo), mtc_algo_name(r->resolved), r->backend,
            r->ranks, mtc_dtype_name(r->dtype), r->bytes, r->count, r->time_us, r->algbw_gbps,
            r->busbw_gbps, r->ok ? "true" : "false");
    } else {
        if (!o->printed_header) {
            printf("# mtc bench-comm: backend %s, %d ranks, dtype %s\n", r->backend, r->ranks,
                   mtc_dtype_name(r->dtype));
            printf("# %-14s %-16s %12s %10s %11s %11s %11s  %s\n", "op", "algo", "size(B)", "count",
                   "time(us)", "algbw(GB/s)", "busbw(GB/s)", "ok");
            o->printed_header = 1;
        }
        printf("  %-14s %-16s %12zu %10zu %11.2f %11.3f %11.3f  %s\n", mtc_coll_name(r->op), algo,
               r->bytes, r->count, r->time_us, r->algbw_gbps, r->busbw_gbps, r->ok ? "yes" : "NO");
    }
    fflush(stdout);
}

/* "64", "4K", "1M", "2G" (powers of 1024) */
static int parse_size(const char *s, size_t *out) {
    char *end;
    if (!isdigit((unsigned char)*s)) return -1; /* strtoull would wrap "-8" */
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || v > (1ull << 34)) return -1;
    switch (toupper((unsigned char)*end)) {
    case 'K': v <<= 10, end++; break;
    case 'M': v <<= 20, end++; break;
    case 'G': v <<= 30, end++; break;
    default: break;
    }
    if (toupper((unsigned char)*end) == 'B') end++;
    if (*end || v == 0 || v > (16ull << 30)) return -1; /* at most 16 GiB */
    *out = (size_t)v;
    return 0;
}

typedef struct {
    mtc_bench_opts b;
    _Atomic int rc_ok; /* written by every rank (all agree) */
} job;

static mtc_result_t rank_fn(mtc_comm_t world, void *arg) {
    job *j = arg;
    int ok = 1;
    mtc_result_t rc = mtc_bench_comm(world, &j->b, &ok);
    if (!ok) j->rc_ok = 0;
    return rc;
}

int cli_cmd_bench_comm(int argc, char **argv) {
    const char *op = "all_reduce", *algo = "auto", *dtype = "f32", *backend = "auto";
    const char *comm_algo = NULL, *sizes = NULL, *min_s = "8", *max_s = "64M";
    int iters = 20, warmup = 5, step = 4, world = 2, json = 0, rpn = 0;
    double timeout = 0;
    mtc_arg args[] = {
        {"op", NULL, MTC_ARG_STRING, &op, "OP",
         "all_reduce, reduce_scatter, all_gather, all_to_all, all_to_all_v (uneven blocks: "
         "c +- c/4 by rank parity), broadcast, reduce or all (default all_reduce)",
         0},
        {"algo", NULL, MTC_ARG_STRING, &algo, "ALGO",
         "auto, an algorithm (ring tree recdbl rabenseifner direct hier native pairwise) or all "
         "(default auto)",
         0},
        {"min-bytes", NULL, MTC_ARG_STRING, &min_s, "SIZE", "smallest size, e.g. 8, 4K (default 8)",
         0},
        {"max-bytes", NULL, MTC_ARG_STRING, &max_s, "SIZE", "largest size (default 64M)", 0},
        {"step-factor", NULL, MTC_ARG_INT, &step, "F", "size multiplier between rows (default 4)",
         0},
        {"sizes", NULL, MTC_ARG_STRING, &sizes, "LIST", "explicit sizes instead, e.g. 8,4K,1M,64M",
         0},
        {"iters", NULL, MTC_ARG_INT, &iters, "N", "timed calls per row (default 20)", 0},
        {"warmup", NULL, MTC_ARG_INT, &warmup, "N", "untimed calls first (default 5)", 0},
        {"dtype", NULL, MTC_ARG_STRING, &dtype, "T", "f32, f64, bf16, i32 or i64 (default f32)", 0},
        {"world-size", NULL, MTC_ARG_INT, &world, "N", "number of thread-ranks on shm (default 2)",
         0},
        {"ranks-per-node", NULL, MTC_ARG_INT, &rpn, "N",
         "fake nodes of N ranks on shm (default: one node)", 0},
        {"backend", NULL, MTC_ARG_STRING, &backend, "B",
         "shm, mpi or auto (mpi under mpirun; default auto)", 0},
        {"comm-algo", NULL, MTC_ARG_STRING, &comm_algo, "SPEC",
         "force algorithms: ring or all_reduce=ring,all_gather=direct", 0},
        {"timeout", NULL, MTC_ARG_DOUBLE, &timeout, "S",
         "collective timeout in seconds (default MTC_COMM_TIMEOUT or 300)", 0},
        {"json", NULL, MTC_ARG_FLAG, &json, NULL, "one JSON object per row instead of the table",
         0},
    };
    int st = cli_parse("bench-comm", "[options]", about, args, (int)(sizeof args / sizeof *args),
                       argc, argv);
    if (st >= 0) return st;

    job j = {.rc_ok = 1};
    mtc_bench_opts *b = &j.b;
    static const mtc_coll_t all_ops[] = {
        MTC_COLL_ALL_REDUCE, MTC_COLL_REDUCE_SCATTER, MTC_COLL_ALL_GATHER,  MTC_COLL_ALL_TO_ALL,
        MTC_COLL_BROADCAST,  MTC_COLL_REDUCE,         MTC_COLL_ALL_TO_ALL_V};
    if (!strcmp(op, "all")) {
        for (int i = 0; i < 7; i++)
            b->ops[b->nops++] = all_ops[i];
    } else {
        int c = mtc_coll_parse(op), found = 0;
        for (int i = 0; i < 7; i++)
            found |= c == (int)all_ops[i];
        if (!found)
            return cli_usage_error("bench-comm",
                                   "--op %s is not one of all_reduce, reduce_scatter, "
                                   "all_gather, all_to_all, all_to_all_v, broadcast, reduce, all",
                                   op);
        b->ops[b->nops++] = (mtc_coll_t)c;
    }
    if (!strcmp(algo, "all")) {
        b->all_algos = 1;
    } else {
        int a = mtc_algo_parse(algo);
        if (a < 0)
            return cli_usage_error("bench-comm",
                                   "--algo %s is not auto, all, ring, tree, recdbl, "
                                   "rabenseifner, direct, hier, native or pairwise",
                                   algo);
        b->algo = (mtc_algo_t)a;
    }
    int dt = mtc_dtype_parse(dtype);
    if (dt < 0)
        return cli_usage_error("bench-comm", "--dtype %s is not f32, f64, bf16, i32 or i64", dtype);
    b->dtype = (mtc_dtype_t)dt;
    if (iters < 1 || iters > 100000 || warmup < 0 || warmup > 100000)
        return cli_usage_error("bench-comm",
                               "--iters %d / --warmup %d: need iters 1..100000, warmup 0..100000",
                               iters, warmup);
    b->iters = iters, b->warmup = warmup;
    if (sizes) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", sizes);
        for (char *save, *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
            if (b->nsizes == MTC_BENCH_MAX_SIZES)
                return cli_usage_error("bench-comm", "--sizes: at most %d sizes",
                                       MTC_BENCH_MAX_SIZES);
            if (parse_size(t, &b->sizes[b->nsizes++]))
                return cli_usage_error("bench-comm", "--sizes: '%s' is not a size like 8, 4K or 1M",
                                       t);
        }
    } else {
        size_t lo, hi;
        if (parse_size(min_s, &lo))
            return cli_usage_error("bench-comm", "--min-bytes %s is not a size like 8 or 4K",
                                   min_s);
        if (parse_size(max_s, &hi))
            return cli_usage_error("bench-comm", "--max-bytes %s is not a size like 64M", max_s);
        if (step < 2 || step > 1024)
            return cli_usage_error("bench-comm", "--step-factor %d must be in [2, 1024]", step);
        if (lo > hi)
            return cli_usage_error("bench-comm", "--min-bytes %zu is above --max-bytes %zu", lo,
                                   hi);
        for (size_t s = lo; s <= hi && b->nsizes < MTC_BENCH_MAX_SIZES; s *= (size_t)step)
            b->sizes[b->nsizes++] = s;
    }
    mtc_launch_opts lo = {.world_size = world,
                          .ranks_per_node = rpn,
                          .timeout_s = timeout,
                          .algo_spec = comm_algo,
                          .pin_threads = -1};
    cli_launch_defaults(&lo); /* the abort hook; MTC_COMM_TIMEOUT without --timeout */
    if (!strcmp(backend, "shm"))
        lo.backend = MTC_BACKEND_SHM;
    else if (!strcmp(backend, "mpi"))
        lo.backend = MTC_BACKEND_MPI;
    else if (strcmp(backend, "auto"))
        return cli_usage_error("bench-comm", "--backend %s is not shm, mpi or auto", backend);
    if (world < 1 || world > MTC_LAUNCH_MAX_THREAD_RANKS)
        return cli_usage_error("bench-comm", "--world-size %d must be 1..%d (thread-ranks)", world,
                               MTC_LAUNCH_MAX_THREAD_RANKS);
    const int nargs = (int)(sizeof args / sizeof *args);
    if (mtc_args_seen(args, nargs, "timeout") && !(timeout > 0))
        return cli_usage_error("bench-comm", "--timeout %g must be a positive number of seconds",
                               timeout);
    if (mtc_args_seen(args, nargs, "ranks-per-node") && (rpn < 1 || rpn > world))
        return cli_usage_error("bench-comm", "--ranks-per-node %d must be in [1, --world-size=%d]",
                               rpn, world);
    if (lo.backend == MTC_BACKEND_MPI && !mtc_launched_by_mpi())
        return cli_usage_error("bench-comm",
                               "--backend mpi needs mpirun (start it as mpirun -np N mtc "
                               "bench-comm ...), or use --backend shm");

    out_ctx oc = {.json = json};
    b->row = print_row;
    b->ctx = &oc;
    mtc_result_t rc = mtc_launch(&lo, rank_fn, &j);
    if (rc == MTC_ERR_INVALID_ARGUMENT)
        return cli_usage_error("bench-comm", "%s", mtc_error_detail());
    if (rc != MTC_OK) return cli_fail("bench-comm", rc);
    if (!j.rc_ok) {
        fprintf(stderr, "mtc bench-comm: error: some results were wrong (rows marked NO)\n");
        return 1;
    }
    return 0;
}
