/* bench/mpi_coll.c - the MPI library's own collectives (MPI_Allreduce,
 * MPI_Reduce_scatter_block, MPI_Allgather, MPI_Alltoall, MPI_Alltoallv with
 * comm/bench.c's uneven blocks: c + c/4 elements from rank s to d when s + d
 * is even, c - c/4 when odd), measured exactly as
 * `mtc bench-comm` measures mtc's, so bench/comm_vs_mpi.sh can put the two
 * side by side.
 *
 * Same conventions as comm/bench.c: nccl-tests "size" (the larger buffer;
 * per-rank counts are size/ranks for reduce_scatter, all_gather and
 * all_to_all), buffers allocated once at the largest size and touched
 * before timing, `warmup` untimed calls, then `iters` timed back-to-back
 * calls; the slowest rank's time per iteration enters the median; algbw =
 * size / time, busbw = algbw x 2(n-1)/n for all_reduce and x (n-1)/n for
 * the others. The last result is checked against a closed form (f32
 * integers, exact). Output: a table, or with --json one object per row
 * with the keys of `mtc bench-comm --json` (algo "mpi", backend "openmpi"
 * or "mpich").
 *
 * Standalone on purpose: links only MPI, so what is timed is MPI alone.
 * Usage: mpirun -np N bench_mpi_coll [--op all|all_reduce|reduce_scatter|
 *        all_gather|all_to_all] [--sizes 8,1K,1M] [--min-bytes 8]
 *        [--max-bytes 64M] [--step-factor 4] [--iters 20] [--warmup 5] [--json] */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#if defined(OMPI_MAJOR_VERSION)
#define LIB_NAME "openmpi"
#elif defined(MPICH_VERSION)
#define LIB_NAME "mpich"
#else
#define LIB_NAME "mpi"
#endif

enum { OP_ALL_REDUCE, OP_REDUCE_SCATTER, OP_ALL_GATHER, OP_ALL_TO_ALL, OP_ALL_TO_ALL_V, NOPS };
static const char *const op_names[NOPS] = {"all_reduce", "reduce_scatter", "all_gather",
                                           "all_to_all", "all_to_all_v"};
#define MAX_SIZES 64

typedef struct {
    int ops[NOPS], nops;
    size_t sizes[MAX_SIZES];
    int nsizes, iters, warmup, json;
} opts_t;

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Exact in f32: |value| < 2^24 after summing over ranks. */
static float val(int rank, size_t i) { return (float)((rank + 1) * (int)(i % 13 + 1)); }
static float sum_val(int n, size_t i) { return (float)((int)(i % 13 + 1) * n * (n + 1) / 2); }

static size_t count_for(int op, size_t bytes, int n) {
    size_t c = bytes / sizeof(float);
    if (op != OP_ALL_REDUCE) c /= (size_t)n;
    return c ? c : 1;
}

/* all_to_all_v: see the header; counts and displacements (4n ints) */
static int a2av_count(size_t c, int s, int d) { return (int)((s + d) % 2 ? c - c / 4 : c + c / 4); }
static int *a2av;

static void a2av_set(size_t c, int rank, int n) {
    for (int j = 0, so = 0, ro = 0; j < n; j++) {
        a2av[j] = a2av_count(c, rank, j), a2av[n + j] = so, so += a2av[j];
        a2av[2 * n + j] = a2av_count(c, j, rank), a2av[3 * n + j] = ro, ro += a2av[2 * n + j];
    }
}

static size_t bytes_for(int op, size_t count, int n) {
    return count * sizeof(float) * (op == OP_ALL_REDUCE ? 1 : (size_t)n);
}

static double bus_factor(int op, int n) {
    return op == OP_ALL_REDUCE ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
}

static int call(int op, const float *s, float *r, size_t cnt) {
    int c = (int)cnt;
    switch (op) {
    case OP_ALL_REDUCE: return MPI_Allreduce(s, r, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    case OP_REDUCE_SCATTER:
        return MPI_Reduce_scatter_block(s, r, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    case OP_ALL_GATHER: return MPI_Allgather(s, c, MPI_FLOAT, r, c, MPI_FLOAT, MPI_COMM_WORLD);
    case OP_ALL_TO_ALL_V: {
        int n;
        MPI_Comm_size(MPI_COMM_WORLD, &n);
        return MPI_Alltoallv(s, a2av, a2av + n, MPI_FLOAT, r, a2av + 2 * n, a2av + 3 * n, MPI_FLOAT,
                             MPI_COMM_WORLD);
    }
    default: return MPI_Alltoall(s, c, MPI_FLOAT, r, c, MPI_FLOAT, MPI_COMM_WORLD);
    }
}

static void fill(int op, float *s, size_t cnt, int rank, int n) {
    if (op == OP_ALL_TO_ALL_V) {
        a2av_set(cnt, rank, n);
        for (int d = 0; d < n; d++)
            for (int i = 0; i < a2av[d]; i++)
                s[a2av[n + d] + i] = val(rank, 2 * cnt * (size_t)d + (size_t)i);
        return;
    }
    size_t total = op == OP_REDUCE_SCATTER || op == OP_ALL_TO_ALL ? cnt * (size_t)n : cnt;
    for (size_t i = 0; i < total; i++)
        s[i] = val(rank, i);
}

static int check(int op, const float *r, size_t cnt, int rank, int n) {
    size_t bad = 0;
    switch (op) {
    case OP_ALL_REDUCE:
        for (size_t i = 0; i < cnt; i++)
            bad += r[i] != sum_val(n, i);
        break;
    case OP_REDUCE_SCATTER:
        for (size_t i = 0; i < cnt; i++)
            bad += r[i] != sum_val(n, (size_t)rank * cnt + i);
        break;
    case OP_ALL_GATHER:
        for (size_t i = 0; i < cnt * (size_t)n; i++)
            bad += r[i] != val((int)(i / cnt), i % cnt);
        break;
    case OP_ALL_TO_ALL_V:
        for (int p = 0; p < n; p++)
            for (int i = 0; i < a2av[2 * n + p]; i++)
                bad += r[a2av[3 * n + p] + i] != val(p, 2 * cnt * (size_t)rank + (size_t)i);
        break;
    default: /* block j came from rank j: its block `rank` */
        for (size_t i = 0; i < cnt * (size_t)n; i++)
            bad += r[i] != val((int)(i / cnt), (size_t)rank * cnt + i % cnt);
        break;
    }
    return bad == 0;
}

static void row(const opts_t *o, int op, size_t cnt, int n, double t_us, int ok, int *header) {
    size_t bytes = bytes_for(op, cnt, n);
    double algbw = t_us > 0 ? (double)bytes / (t_us * 1e3) : 0, busbw = algbw * bus_factor(op, n);
    if (o->json) {
        printf("{\"op\": \"%s\", \"algo\": \"mpi\", \"resolved\": \"mpi\", \"backend\": \"%s\", "
               "\"ranks\": %d, \"dtype\": \"f32\", \"bytes\": %zu, \"count\": %zu, "
               "\"time_us\": %.3f, \"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, \"ok\": %s}\n",
               op_names[op], LIB_NAME, n, bytes, cnt, t_us, algbw, busbw, ok ? "true" : "false");
    } else {
        if (!*header) {
            printf("# bench_mpi_coll: %s, %d ranks, dtype f32\n", LIB_NAME, n);
            printf("# %-14s %12s %10s %11s %11s %11s  %s\n", "op", "size(B)", "count", "time(us)",
                   "algbw(GB/s)", "busbw(GB/s)", "ok");
            *header = 1;
        }
        printf("  %-14s %12zu %10zu %11.2f %11.3f %11.3f  %s\n", op_names[op], bytes, cnt, t_us,
               algbw, busbw, ok ? "yes" : "NO");
    }
    fflush(stdout);
}

/* "64", "4K", "1M", "2G" (powers of 1024); 0 when not a size */
static size_t parse_size(const char *s) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s) return 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': v <<= 10, end++; break;
    case 'M': v <<= 20, end++; break;
    case 'G': v <<= 30, end++; break;
    default: break;
    }
    if (toupper((unsigned char)*end) == 'B') end++;
    return *end ? 0 : (size_t)v;
}

static int usage(int rank, const char *msg, const char *arg) {
    if (rank == 0)
        fprintf(stderr, "bench_mpi_coll: error: %s '%s' (see the usage in bench/mpi_coll.c)\n", msg,
                arg ? arg : "");
    return 2;
}

static int parse(int argc, char **argv, int rank, opts_t *o) {
    size_t lo = 8, hi = (size_t)64 << 20, step = 4;
    const char *sizes = NULL;
    o->iters = 20, o->warmup = 5;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            o->json = 1;
            continue;
        }
        if (!v) return usage(rank, "missing value after", a);
        i++;
        if (!strcmp(a, "--op")) {
            int before = o->nops;
            o->nops = 0; /* the last --op wins */
            for (int k = 0; k < NOPS; k++)
                if (!strcmp(v, "all") || !strcmp(v, op_names[k])) o->ops[o->nops++] = k;
            if (!o->nops)
                return (void)before, usage(rank,
                                           "unknown --op (all_reduce, reduce_scatter, all_gather, "
                                           "all_to_all, all_to_all_v or all)",
                                           v);
        } else if (!strcmp(a, "--sizes"))
            sizes = v;
        else if (!strcmp(a, "--min-bytes")) {
            if (!(lo = parse_size(v))) return usage(rank, "bad size", v);
        } else if (!strcmp(a, "--max-bytes")) {
            if (!(hi = parse_size(v))) return usage(rank, "bad size", v);
        } else if (!strcmp(a, "--step-factor")) {
            if ((step = (size_t)atoi(v)) < 2)
                return usage(rank, "--step-factor must be >= 2, got", v);
        } else if (!strcmp(a, "--iters")) {
            if ((o->iters = atoi(v)) < 1) return usage(rank, "--iters must be >= 1, got", v);
        } else if (!strcmp(a, "--warmup")) {
            if ((o->warmup = atoi(v)) < 0) return usage(rank, "--warmup must be >= 0, got", v);
        } else
            return usage(rank, "unknown option", a);
    }
    if (!o->nops) o->ops[o->nops++] = OP_ALL_REDUCE;
    if (sizes) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", sizes);
        for (char *save, *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
            if (o->nsizes == MAX_SIZES) return usage(rank, "too many sizes in", sizes);
            if (!(o->sizes[o->nsizes++] = parse_size(t))) return usage(rank, "bad size", t);
        }
    } else {
        for (size_t s = lo; s <= hi && o->nsizes < MAX_SIZES; s *= step)
            o->sizes[o->nsizes++] = s;
    }
    if (!o->nsizes) return usage(rank, "no sizes between --min-bytes and --max-bytes", NULL);
    return -1;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n, st;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    opts_t o = {0};
    if ((st = parse(argc, argv, rank, &o)) >= 0) {
        MPI_Finalize();
        return st;
    }
    size_t maxb = 0;
    for (int i = 0; i < o.nsizes; i++)
        for (int k = 0; k < o.nops; k++) {
            size_t b = bytes_for(o.ops[k], count_for(o.ops[k], o.sizes[i], n), n);
            b += b / 4; /* all_to_all_v's larger blocks */
            if (b > maxb) maxb = b;
        }
    float *s = malloc(maxb), *r = malloc(maxb);
    double *t = malloc((size_t)o.iters * sizeof *t);
    a2av = malloc(4 * (size_t)n * sizeof *a2av);
    if (!s || !r || !t || !a2av) {
        fprintf(stderr, "bench_mpi_coll: no memory for 2 x %zu bytes\n", maxb);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(s, 0, maxb), memset(r, 0, maxb); /* fault the pages in before timing */
    int header = 0, all_ok = 1;
    for (int k = 0; k < o.nops; k++) {
        for (int i = 0; i < o.nsizes; i++) {
            int op = o.ops[k];
            size_t cnt = count_for(op, o.sizes[i], n);
            fill(op, s, cnt, rank, n);
            for (int w = 0; w < o.warmup; w++)
                call(op, s, r, cnt);
            MPI_Barrier(MPI_COMM_WORLD);
            for (int it = 0; it < o.iters; it++) {
                double t0 = now_us();
                call(op, s, r, cnt);
                t[it] = now_us() - t0;
            }
            int ok = check(op, r, cnt, rank, n), all = 0;
            MPI_Allreduce(MPI_IN_PLACE, t, o.iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
            all_ok &= all;
            if (rank == 0) row(&o, op, cnt, n, median(t, o.iters), all, &header);
        }
    }
    free(s), free(r), free(t), free(a2av);
    MPI_Finalize();
    return all_ok ? 0 : 1;
}
