/* cli/cmd_bench_peak.c - `mtc bench-peak`: measure this machine (GEMM rate
 * per core, copy bandwidth, shm collective alpha/beta; plan/peak.c) and
 * cache it as the machine description `mtc plan --machine this` reads. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>

#include "cli/cli.h"
#include "core/outfile.h"
#include "comm/comm.h"
#include "core/mem.h"
#include "core/peak.h"
#include "core/timer.h"
#include "nn/nn.h"
#include "plan/plan.h"

/* What bench-peak measures by running itself under mpiexec: the resident
 * set an MPI process adds (`--mpi-rss-probe`, 2 processes) and the
 * oversubscription probe's fit on MPI processes (`--mpi-oversub-probe`,
 * twice as many as cores). */
typedef struct {
    int oversub;          /* 0: the resident set; 1: the oversubscription probe */
    double before, added; /* VmRSS before MPI, and the most a process added */
    double sync, frac;    /* mtc_plan_oversub_probe's fit */
    int rank;
} mpi_probe;

static mtc_result_t mpi_probe_rank(mtc_comm_t world, void *arg) {
    mpi_probe *p = arg;
    p->rank = mtc_comm_rank(world);
    if (p->oversub)
        return mtc_plan_oversub_probe(world, (int)sysconf(_SC_NPROCESSORS_ONLN), 3, &p->sync,
                                      &p->frac);
    /* a 1 MiB all-reduce (the transport's buffers touched), then the
     * resident set it added, max over processes */
    enum { N = 1 << 18 };
    static float buf[N];
    MTC_CHECK(mtc_all_reduce(buf, buf, N, MTC_DTYPE_F32, MTC_OP_SUM, world));
    MTC_CHECK(mtc_barrier(world));
    double added = mtc_mem_proc_status("VmRSS") - p->before;
    MTC_CHECK(mtc_all_reduce(&added, &p->added, 1, MTC_DTYPE_F64, MTC_OP_MAX, world));
    return mtc_barrier(world);
}

/* One of the probes, in a process mpiexec started: rank 0 prints its line
 * ("mpi_rss_bytes B" or "mpi_oversub SYNC FRAC") for mpi_run_probe. */
static int mpi_probe_main(int oversub) {
    mpi_probe p = {.oversub = oversub, .before = mtc_mem_proc_status("VmRSS")};
    mtc_launch_opts lo = {.backend = MTC_BACKEND_MPI};
    mtc_result_t rc = mtc_launch(&lo, mpi_probe_rank, &p);
    if (rc != MTC_OK) return cli_fail("bench-peak", rc);
    if (p.rank == 0 && oversub) printf("mpi_oversub %.9g %.9g\n", p.sync, p.frac);
    if (p.rank == 0 && !oversub) printf("mpi_rss_bytes %.0f\n", p.added);
    return 0;
}

/* Runs this program's `bench-peak FLAG` under mpiexec on np processes and
 * reads the line "KEY v..." it prints into v[0..nv); 0 when it did not
 * run (no MPI backend, no mpiexec, a failure, 150 s passed). */
static int mpi_run_probe(int np, const char *flag, const char *key, double *v, int nv) {
#if defined(MTC_HAVE_MPI) && defined(MTC_MPIEXEC)
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0 || !MTC_MPIEXEC[0] || strchr(exe, '\'')) return 0;
    exe[n] = 0;
    char cmd[8400];
    /* Open MPI refuses root and more processes than cores unless told (MPICH
     * ignores these variables); its runtime leaks by design, which a
     * sanitizer build would report at exit; timeout: a broken MPI cannot
     * stall bench-peak (150 s: the oversubscription probe takes 17 s on an
     * idle 2-core machine and went past 60 s beside another test's load) */
    snprintf(cmd, sizeof cmd,
             "ASAN_OPTIONS=\"$ASAN_OPTIONS:detect_leaks=0\" "
             "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
             "OMPI_MCA_rmaps_base_oversubscribe=1 timeout -k 5 150 '%s' -np %d '%s' bench-peak "
             "%s 2>/dev/null",
             MTC_MPIEXEC, np, exe, flag);
    FILE *p = popen(cmd, "r");
    char line[256];
    int got = 0;
    size_t kl = strlen(key);
    while (p && fgets(line, sizeof line, p))
        if (!strncmp(line, key, kl) && line[kl] == ' ') {
            char *q = line + kl;
            for (got = 0; got < nv; got++) {
                int used = 0;
                if (sscanf(q, "%lf%n", &v[got], &used) != 1) break;
                q += used;
            }
            break;
        }
    int st = p ? pclose(p) : -1;
    return st == 0 && got == nv;
#else
    (void)np, (void)flag, (void)key, (void)v, (void)nv;
    return 0;
#endif
}

/* The resident set an MPI process adds (the MPI library, its shared-memory
 * segments): the probe under mpiexec on 2 processes; 0 when it cannot run. */
static double mpi_rss(FILE *log) {
#if defined(MTC_HAVE_MPI) && defined(MTC_MPIEXEC)
    double v = 0;
    if (!mpi_run_probe(2, "--mpi-rss-probe", "mpi_rss_bytes", &v, 1) || !(v > 0)) v = 0;
    if (log)
        fprintf(log, "> an MPI process (%s -np 2) holds %.1f MB more than a plain one%s\n",
                MTC_MPIEXEC, v / 1048576.0, v > 0 ? "" : " (the probe did not run)");
    return v;
#else
    (void)log;
    return 0;
#endif
}

/* The oversubscription probe on MPI processes (twice as many as cores);
 * both 0 when it cannot run (the plan then prices processes as threads). */
static void mpi_oversub(FILE *log, double *sync, double *frac) {
    double v[2] = {0, 0};
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN), np = MTC_PLAN_OVERSUB_PER_CORE * cores;
    int ran = cores >= 1 && np <= 64 &&
              mpi_run_probe(np, "--mpi-oversub-probe", "mpi_oversub", v, 2) && v[0] >= 0 &&
              v[1] >= 0;
    if (!ran) v[0] = v[1] = 0;
    *sync = v[0], *frac = v[1];
#if defined(MTC_HAVE_MPI) && defined(MTC_MPIEXEC)
    if (log)
        fprintf(
            log,
            "> %d MPI processes on %d cores between GEMMs: +%.1f us per call and +%.1f%% of the "
            "compute%s\n",
            np, cores, v[0] * 1e6, v[1] * 100,
            ran ? "" : " (the probe did not run: priced as threads)");
#else
    (void)log;
#endif
}

/* ---- the fp32 GEMM engines (nn/gemm_engine.c) ----
 * OpenBLAS picks its kernels when it loads (OPENBLAS_CORETYPE, else the
 * CPU), so its other core type is measured by this program run again with
 * the variable unset (`bench-peak --gemm-probe`, printing "gemm_probe CORE
 * GFLOPS"); oneDNN and the environment's OpenBLAS are measured here. */
#define GEMM_ROUNDS 5

static int gemm_probe_main(void) {
    double gf = 0;
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    mtc_result_t rc = nn_gemm_engine_measure(cores > 0 ? cores : 1, GEMM_ROUNDS, NULL, &gf);
    if (rc != MTC_OK) return cli_fail("bench-peak", rc);
    printf("gemm_probe %s %.6g\n", openblas_get_corename(), gf);
    return 0;
}

/* Runs `<this program> bench-peak --gemm-probe` with OPENBLAS_CORETYPE
 * unset, its stdout and stderr into out (NUL-terminated, cut to size);
 * killed after timeout_s. Returns its exit status, 256 + the signal that
 * ended it, or -1 when it could not start. fork/exec, not a shell: nothing
 * of PATH, quoting or `timeout` between us and the child. */
static int gemm_probe_run(char *out, size_t size, int timeout_s) {
    out[0] = 0;
    /* the child's environment, built before fork (after it, only
     * async-signal-safe calls: other threads may hold libc's locks) */
    extern char **environ;
    size_t ne = 0;
    while (environ[ne])
        ne++;
    char **envp = malloc((ne + 1) * sizeof *envp);
    int fd[2];
    if (!envp) return -1;
    size_t k = 0;
    for (size_t i = 0; i < ne; i++)
        if (strncmp(environ[i], "OPENBLAS_CORETYPE=", 18)) envp[k++] = environ[i];
    envp[k] = NULL;
    if (pipe(fd)) {
        free(envp);
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]), close(fd[1]);
        free(envp);
        return -1;
    }
    if (pid == 0) {
        dup2(fd[1], 1), dup2(fd[1], 2);
        close(fd[0]), close(fd[1]);
        char *const argv[] = {"mtc", "bench-peak", "--gemm-probe", NULL};
        execve("/proc/self/exe", argv, envp);
        _exit(127);
    }
    close(fd[1]);
    free(envp);
    size_t used = 0;
    uint64_t deadline = mtc_time_ns() + (uint64_t)timeout_s * 1000000000ull;
    int killed = 0;
    for (;;) {
        int left = (int)(((int64_t)(deadline - mtc_time_ns())) / 1000000);
        if (left <= 0 && !killed) {
            kill(pid, SIGKILL);
            killed = 1;
        }
        struct pollfd q = {.fd = fd[0], .events = POLLIN};
        if (poll(&q, 1, left > 0 ? left : 1000) <= 0) {
            if (killed) break;
            continue;
        }
        char buf[512];
        ssize_t r = read(fd[0], buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        size_t c = (size_t)r < size - 1 - used ? (size_t)r : size - 1 - used;
        memcpy(out + used, buf, c);
        used += c;
        out[used] = 0;
    }
    close(fd[0]);
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(ws)) return 256 + WTERMSIG(ws);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

static void gemm_blas_add(mtc_peak *pk, const char *core, double gf) {
    for (int i = 0; i < pk->blas_count; i++)
        if (!strcasecmp(pk->blas[i].core, core)) return;
    if (pk->blas_count >= MTC_PEAK_BLAS_CORES || !(gf > 0)) return;
    mtc_peak_blas *b = &pk->blas[pk->blas_count++];
    snprintf(b->core, sizeof b->core, "%s", core);
    b->gflops = gf;
}

static mtc_result_t gemm_engines(mtc_peak *pk, FILE *log) {
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    double gd = 0, gb = 0;
    MTC_CHECK(nn_gemm_engine_measure(cores, GEMM_ROUNDS, &gd, &gb));
    pk->gemm_dnnl_gflops = gd;
    pk->gemm_threads = cores;
    time_t now = time(NULL);
    struct tm tmv;
    strftime(pk->gemm_measured_at, sizeof pk->gemm_measured_at, "%Y-%m-%d %H:%M:%S",
             gmtime_r(&now, &tmv));
    const char *forced = getenv("OPENBLAS_CORETYPE");
    const char *core = openblas_get_corename();
    gemm_blas_add(pk, core, gb);
    if (log)
        fprintf(log,
                "> fp32 GEMM engines on %d threads: oneDNN %.1f GFLOP/s, OpenBLAS %s%s%s%s %.1f\n",
                cores, gd, core, forced && *forced ? " (OPENBLAS_CORETYPE=" : "",
                forced && *forced ? forced : "", forced && *forced ? ")" : "", gb);
    if (!forced || !*forced) return MTC_OK;
    /* twice: a probe that died once (a loaded machine, a signal) is not
     * yet a machine where OpenBLAS's own kernels cannot run */
    char out[1024] = "";
    int got = 0, st = -1;
    double g = 0;
    char name[64];
    for (int attempt = 0; attempt < 2 && !got; attempt++) {
        st = gemm_probe_run(out, sizeof out, 120);
        const char *l = strstr(out, "gemm_probe ");
        got = l && sscanf(l, "gemm_probe %63s %lf", name, &g) == 2 && g > 0;
    }
    if (got) gemm_blas_add(pk, name, g);
    for (char *c = out; *c; c++) /* what the child said, on one line */
        if (*c == '\n') *c = ' ';
    if (log && got)
        fprintf(log, "> OpenBLAS with its own core type (OPENBLAS_CORETYPE unset): %s %.1f\n", name,
                g);
    else if (log)
        fprintf(log,
                "> OpenBLAS with its own core type (OPENBLAS_CORETYPE unset): the probe did not "
                "run (%s %d): %s\n",
                st < 0      ? "could not start it, status"
                : st >= 256 ? "signal"
                            : "exit status",
                st >= 256 ? st - 256 : st, out[0] ? out : "no output");
    return MTC_OK;
}

int cli_cmd_bench_peak(int argc, char **argv) {
    if (argc == 1 && !strcmp(argv[0], "--mpi-rss-probe")) return mpi_probe_main(0);
    if (argc == 1 && !strcmp(argv[0], "--mpi-oversub-probe")) return mpi_probe_main(1);
    if (argc == 1 && !strcmp(argv[0], "--gemm-probe")) return gemm_probe_main();
    int iters = 9, print = 0, engines_only = 0;
    const char *out = NULL;
    mtc_arg args[] = {
        {"iters", NULL, MTC_ARG_INT, &iters, "N", "repetitions per measurement (median; default 9)",
         0},
        {"output", "o", MTC_ARG_STRING, &out, "FILE",
         "where to write the description (default the cache, $MTC_CACHE_DIR/machine.json or "
         "~/.cache/mtc/machine.json)",
         0},
        {"print", NULL, MTC_ARG_FLAG, &print, NULL, "print the cached description and exit", 0},
        {"gemm-engines", NULL, MTC_ARG_FLAG, &engines_only, NULL,
         "measure only the fp32 GEMM engines (oneDNN, OpenBLAS) and update the peak cache", 0},
    };
    int nargs = (int)(sizeof args / sizeof args[0]);
    int st =
        cli_parse("bench-peak", "[--iters N] [--output FILE]",
                  "Measure this machine's fp32 GEMM rate, copy bandwidth, shared-memory\n"
                  "collective latency / bandwidth, the cost of mtc's kernels and the resident\n"
                  "set of a process, and cache them for `mtc plan`. Timings on a shared\n"
                  "machine vary: run again to refresh.",
                  args, nargs, argc, argv);
    if (st >= 0) return st;
    if (iters < 1 || iters > 1000)
        return cli_usage_error("bench-peak", "iters=%d must be in 1..1000", iters);
    char path[1024];
    if (out)
        snprintf(path, sizeof path, "%s", out);
    else
        mtc_plan_machine_cache_path(path, sizeof path);
    char out_real[MTC_PATH_MAX]; /* checked before the measurements (minutes), not after */
    if (out && !print && mtc_outfile_check(out, "--output", out_real, sizeof out_real) != MTC_OK)
        return cli_usage_error("bench-peak", "%s", mtc_error_detail());
    mtc_plan_machine m;
    if (engines_only) {
        mtc_peak pk;
        mtc_result_t rc = mtc_peak_load(&pk);
        /* no cache yet, or another kind of build's (none of its figures
         * kept, so the cache is all this build's): the FMA peak too */
        if (rc != MTC_OK || !mtc_peak_usable(&pk, NULL, 0)) rc = mtc_peak_measure(&pk, 0, 0.5);
        if (rc == MTC_OK) {
            pk.blas_count = 0;
            rc = gemm_engines(&pk, stdout);
        }
        if (rc == MTC_OK) rc = mtc_peak_save(&pk);
        if (rc != MTC_OK) return cli_fail("bench-peak", rc);
        char why[200], pp[1024];
        mtc_peak_cache_path(pp, sizeof pp);
        nn_gemm_engine e = nn_gemm_engine_choose(cli_gemm_engine(), why, sizeof why);
        printf("> wrote %s; fp32 GEMM engine of later runs here: %s (%s)\n", pp,
               nn_gemm_engine_name(e), why);
        return 0;
    }
    if (print) {
        mtc_result_t rc = mtc_plan_machine_load(out ? out : "this", &m);
        if (rc == MTC_ERR_INVALID_ARGUMENT)
            return cli_usage_error("bench-peak", "%s", mtc_error_detail());
        if (rc != MTC_OK) return cli_fail("bench-peak", rc);
        printf("%s: %s\n  %.2f GFLOP/s fp32 per core (512^3), %.2f at mtc's shapes, %.2f of a core "
               "under the load then, %d cores, copy %.2f GB/s, shm lat %.2f us, bw %.2f GB/s, "
               "oversubscription +%.2f us\n",
               path, m.description, m.peak_flops_fp32 * 1e-9, m.shape_flops_fp32 * 1e-9,
               m.cpu_share, m.devices_per_node, m.mem_bw * 1e-9, m.intra.lat * 1e6,
               m.intra.bw * 1e-9, m.oversub_lat * 1e6);
        if (m.kern.measured)
            printf("  kernels: a layer's linears %.2f GFLOP/s + %.2f us per call, attention "
                   "%.0f + %.1f HS / %.0f + %.1f HS ns per tile, GELU %.2f / %.2f ns, dropout "
                   "%.2f ns per element; collectives wait %.2f us for their peer; a process "
                   "without a model holds %.1f MB\n",
                   m.kern.gemm_rate * 1e-9, m.kern.gemm_call * 1e6, m.kern.attn_fwd_tile * 1e9,
                   m.kern.attn_fwd_hs * 1e9, m.kern.attn_bwd_tile * 1e9, m.kern.attn_bwd_hs * 1e9,
                   m.kern.gelu_fwd * 1e9, m.kern.gelu_bwd * 1e9, m.kern.dropout * 1e9,
                   m.intra.sync * 1e6, m.kern.base_rss / 1048576.0);
        return 0;
    }
    mtc_result_t rc = mtc_plan_measure_host(&m, iters, stdout);
    if (rc == MTC_OK) m.kern.mpi_rss = mpi_rss(stdout);
    if (rc == MTC_OK) mpi_oversub(stdout, &m.mpi_oversub_sync, &m.mpi_oversub_frac);
    /* the FMA peak of every core: plan's and train's MFU denominator (mtc_mfu) */
    mtc_peak pk;
    if (rc == MTC_OK) rc = mtc_peak_measure(&pk, 0, 0.5);
    if (rc == MTC_OK && pk.cores > 0) m.fma_flops_fp32 = pk.fma_fp32_tflops * 1e12 / pk.cores;
    if (rc == MTC_OK) rc = mtc_plan_machine_write(&m, path);
    if (rc != MTC_OK) return cli_fail("bench-peak", rc);
    printf("> wrote %s (figures taken now, on a machine that may be shared)\n", path);
    if (out) return 0; /* an explicit --output file: nothing else is cached */
    /* the same measurement feeds the log line's MFU (core/peak.h's cache):
     * the FMA peak of every core, and the GEMM rate just measured */
    if (rc == MTC_OK) rc = gemm_engines(&pk, stdout);
    if (rc == MTC_OK) {
        pk.gemm_tflops = m.peak_flops_fp32 * m.devices_per_node * 1e-12;
        rc = mtc_peak_save(&pk);
    }
    if (rc != MTC_OK) return cli_fail("bench-peak", rc);
    char pp[1024];
    mtc_peak_cache_path(pp, sizeof pp);
    printf("> wrote %s (fp32 FMA peak %.3f TFLOP/s over %d cores: what `mtc train` reports MFU "
           "against)\n",
           pp, pk.fma_fp32_tflops, pk.cores);
    char why[200];
    nn_gemm_engine e = nn_gemm_engine_choose(cli_gemm_engine(), why, sizeof why);
    printf("> fp32 GEMM engine of later runs here: %s (%s)\n", nn_gemm_engine_name(e), why);
    return 0;
}
