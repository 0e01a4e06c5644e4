/* bench/a2av.c - all-to-all-v timed the same way for mtc (bench_a2av:
 * mtc_all_to_all_v on shm rank-threads) and for the MPI library
 * (bench_mpi_a2av, built with A2AV_MPI: MPI_Alltoallv under mpirun), for
 * bench/comm_vs_mpi.sh's all_to_all_v row.
 *
 * Each rank sends `size` bytes in all (f32), split unevenly: to peer j it
 * sends a share proportional to 1 + (r + j) mod n (an MoE dispatch is never
 * even), and receives what each peer sends it. `warmup` untimed calls,
 * then 5 repetitions of `iters` back-to-back calls; each repetition's time
 * is the slowest rank's; the median enters algbw = size / time and busbw =
 * algbw x (n-1)/n (nccl-tests' all-to-all factor). The last result is
 * checked against its closed form (value = 1000 x source + destination).
 * Output: one JSON object. Usage: [mpirun -np N] bench_[mpi_]a2av
 * [--ranks N (mtc)] [--bytes B] [--iters I] [--warmup W]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef A2AV_MPI
#include <mpi.h>
#else
#include "comm/comm.h"
#endif

typedef struct {
    int n;
    size_t bytes;
    int iters, warmup;
} a2av_opts;

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* floats rank s sends rank d */
static size_t share(size_t total, int s, int d, int n) {
    size_t w = 0;
    for (int k = 0; k < n; k++)
        w += (size_t)(1 + k);
    return total * (size_t)(1 + (s + d) % n) / w;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    size_t *sc, *sd, *rc, *rd;
    float *send, *recv;
    size_t nsend, nrecv;
} bufs;

static int setup(bufs *b, int r, int n, size_t total) {
    b->sc = calloc((size_t)n * 4, sizeof(size_t));
    if (!b->sc) return -1;
    b->sd = b->sc + n, b->rc = b->sc + 2 * n, b->rd = b->sc + 3 * n;
    b->nsend = b->nrecv = 0;
    for (int j = 0; j < n; j++) {
        b->sc[j] = share(total, r, j, n), b->sd[j] = b->nsend, b->nsend += b->sc[j];
        b->rc[j] = share(total, j, r, n), b->rd[j] = b->nrecv, b->nrecv += b->rc[j];
    }
    b->send = malloc((b->nsend + 1) * sizeof(float));
    b->recv = calloc(b->nrecv + 1, sizeof(float));
    if (!b->send || !b->recv) return -1;
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < b->sc[j]; i++)
            b->send[b->sd[j] + i] = (float)(1000 * r + j);
    return 0;
}

static int check(const bufs *b, int r, int n) {
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < b->rc[j]; i++)
            if (b->recv[b->rd[j] + i] != (float)(1000 * j + r)) return 0;
    return 1;
}

static void report(const char *who, int n, size_t bytes, double t_us, int ok) {
    double algbw = t_us > 0 ? (double)bytes / (t_us * 1e3) : 0;
    printf("{\"op\": \"all_to_all_v\", \"src\": \"%s\", \"ranks\": %d, \"bytes\": %zu, "
           "\"time_us\": %.3f, \"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, \"ok\": %s}\n",
           who, n, bytes, t_us, algbw, algbw * (n - 1) / n, ok ? "true" : "false");
}

#ifdef A2AV_MPI
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    a2av_opts o = {0, 1 << 20, 20, 5};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--bytes")) o.bytes = strtoull(argv[i + 1], NULL, 10);
        if (!strcmp(argv[i], "--iters")) o.iters = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--warmup")) o.warmup = atoi(argv[i + 1]);
    }
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    bufs b = {0};
    if (setup(&b, r, n, o.bytes / sizeof(float))) MPI_Abort(MPI_COMM_WORLD, 1);
    int *sc = malloc(4 * (size_t)n * sizeof(int)), *sd = sc + n, *rc = sc + 2 * n, *rd = sc + 3 * n;
    for (int j = 0; j < n; j++)
        sc[j] = (int)b.sc[j], sd[j] = (int)b.sd[j], rc[j] = (int)b.rc[j], rd[j] = (int)b.rd[j];
    for (int i = 0; i < o.warmup; i++)
        MPI_Alltoallv(b.send, sc, sd, MPI_FLOAT, b.recv, rc, rd, MPI_FLOAT, MPI_COMM_WORLD);
    double rep[5];
    for (int k = 0; k < 5; k++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now_us();
        for (int i = 0; i < o.iters; i++)
            MPI_Alltoallv(b.send, sc, sd, MPI_FLOAT, b.recv, rc, rd, MPI_FLOAT, MPI_COMM_WORLD);
        double t = (now_us() - t0) / o.iters;
        MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        rep[k] = t;
    }
    int ok = check(&b, r, n), all_ok;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    qsort(rep, 5, sizeof(double), cmp_double);
    if (r == 0) report("mpi", n, o.bytes, rep[2], all_ok);
    MPI_Finalize();
    return all_ok ? 0 : 1;
}
#else
static a2av_opts g_o;
static double g_t;
static int g_ok;

static mtc_result_t rank_main(mtc_comm_t world, void *arg) {
    (void)arg;
    int r = mtc_comm_rank(world), n = mtc_comm_size(world);
    bufs b = {0};
    if (setup(&b, r, n, g_o.bytes / sizeof(float))) return MTC_ERR_OUT_OF_MEMORY;
    for (int i = 0; i < g_o.warmup; i++)
        MTC_CHECK(mtc_all_to_all_v(b.send, b.sc, b.sd, b.recv, b.rc, b.rd, MTC_DTYPE_F32, world));
    double rep[5];
    for (int k = 0; k < 5; k++) {
        MTC_CHECK(mtc_barrier(world));
        double t0 = now_us();
        for (int i = 0; i < g_o.iters; i++)
            MTC_CHECK(
                mtc_all_to_all_v(b.send, b.sc, b.sd, b.recv, b.rc, b.rd, MTC_DTYPE_F32, world));
        double t = (now_us() - t0) / g_o.iters;
        MTC_CHECK(mtc_all_reduce(&t, &t, 1, MTC_DTYPE_F64, MTC_OP_MAX, world));
        rep[k] = t;
    }
    int ok = check(&b, r, n);
    MTC_CHECK(mtc_all_reduce(&ok, &ok, 1, MTC_DTYPE_I32, MTC_OP_MIN, world));
    qsort(rep, 5, sizeof(double), cmp_double);
    if (r == 0) g_t = rep[2], g_ok = ok;
    free(b.sc), free(b.send), free(b.recv);
    return MTC_OK;
}

int main(int argc, char **argv) {
    g_o = (a2av_opts){2, 1 << 20, 20, 5};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--ranks")) g_o.n = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--bytes")) g_o.bytes = strtoull(argv[i + 1], NULL, 10);
        if (!strcmp(argv[i], "--iters")) g_o.iters = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--warmup")) g_o.warmup = atoi(argv[i + 1]);
    }
    mtc_launch_opts lo = {.backend = MTC_BACKEND_SHM, .world_size = g_o.n, .timeout_s = 120};
    mtc_result_t rc = mtc_launch(&lo, rank_main, NULL);
    if (rc != MTC_OK) {
        fprintf(stderr, "bench_a2av: %s %s\n", mtc_result_name(rc), mtc_error_detail());
        return 1;
    }
    report("mtc", g_o.n, g_o.bytes, g_t, g_ok);
    return g_ok ? 0 : 1;
}
#endif
