/* comm/launch.c - starting a world of ranks (mtc_launch): N rank-threads on
 * the shm backend, or this process as one rank of an MPI job.
 *
 * Settings resolved once here, from opts only (the environment is the
 * CLI's: cli/cli_env.c): timeout (else 300 s), algorithm spec, thread
 * pinning (rank r on the r-th allowed CPU when ranks <= CPUs; pin_threads -1
 * = auto, 0 = never, 1 = always). A rank whose function fails aborts the
 * world so peers stop with MTC_ERR_REMOTE; launch then returns the first
 * failure with its detail. On shm the launching thread is the watchdog
 * (watch_shm): a rank thread still running 3 s after the job failed is
 * reported and abandoned (or the abort hook ends the process), so a frozen
 * rank cannot keep the process up. Relies on backend_shm.c /
 * backend_mpi.c (whose watchdog is watch_mpi.c). Does not parse command
 * lines (cli/ does) or exit. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_internal.h"
#include "comm/shm.h"
#include "core/log.h"
#include "core/timer.h"

#define LAUNCH_MAX_RANKS MTC_LAUNCH_MAX_THREAD_RANKS

/* The environment read here is the launcher's (mpirun's / srun's rank and
 * size variables: what started this process), not mtc configuration, which
 * reaches comm/ only through mtc_launch_opts (cli/cli_env.c). */
int mtc_launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

typedef struct {
    double timeout_s;
    mtc_algo_t algo[MTC_COLL_COUNT];
    unsigned char strict[MTC_COLL_COUNT];
} launch_settings;

static mtc_result_t resolve_settings(const mtc_launch_opts *opts, launch_settings *s) {
    s->timeout_s = opts->timeout_s > 0 ? opts->timeout_s : COMM_DEFAULT_TIMEOUT_S;
    return comm_algo_spec_parse(opts->algo_spec, s->algo, s->strict);
}

static mtc_result_t make_world(comm_backend *be, const launch_settings *s, mtc_comm_t *out) {
    int n = be->world_size, *all = malloc((size_t)n * sizeof *all);
    if (!all) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "no memory for %d ranks", n);
    for (int i = 0; i < n; i++)
        all[i] = i;
    mtc_result_t rc = comm_new(be, be->world, all, n, be->world_rank, "WORLD", NULL, out);
    free(all);
    if (rc != MTC_OK) return rc;
    (*out)->owns_group = 0;
    (*out)->timeout_s = s->timeout_s;
    memcpy((*out)->algo, s->algo, sizeof s->algo);
    memcpy((*out)->strict, s->strict, sizeof s->strict);
    return MTC_OK;
}

/* ---- shm: one thread per rank ------------------------------------------------------ */

typedef struct {
    shm_world *w;
    const launch_settings *s;
    mtc_rank_fn fn;
    void *arg;
    int rank, cpu;
} rank_job;

static void *rank_main(void *p) {
    rank_job *job = p;
    if (job->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(job->cpu, &set);
        pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    }
    mtc_log_set_rank(job->rank, NULL);
    comm_backend *be = comm_shm_backend(job->w, job->rank);
    mtc_comm_t world = NULL;
    mtc_error_clear();
    mtc_result_t rc = make_world(be, job->s, &world);
    if (rc == MTC_OK) rc = job->fn(world, job->arg);
    if (rc != MTC_OK) be->ops->abort(be, rc, mtc_error_detail());
    comm_shm_rank_exited(job->w, job->rank, rc);
    mtc_comm_free(world);
    return NULL;
}

/* The shm watchdog is the launching thread: it joins the rank threads as
 * they end and, while any runs, checks every 20 ms whether the job is stuck:
 * the world failed (a rank returned an error, e.g. its peers timed out
 * waiting for a rank that never arrived) and some rank has not returned
 * COMM_WATCH_GRACE_S later, or a rank is still waiting COMM_WATCH_GRACE_S
 * past its call's deadline. Then it reports which rank is stuck and what it
 * and the job were doing (comm_watch_fire: stderr, then the abort hook) and,
 * if the hook returns, gives up on the stuck threads: detached, returns 1
 * (*rc holds the failure). Returns 0 when every thread was joined. */
static int watch_shm(const mtc_launch_opts *opts, shm_world *w, pthread_t *th, int n,
                     mtc_result_t *rc) {
    unsigned char *joined = calloc((size_t)n ? (size_t)n : 1, 1);
    if (!joined) { /* no memory for the bookkeeping: plain joins */
        for (int r = 0; r < n; r++)
            pthread_join(th[r], NULL);
        return 0;
    }
    const uint64_t grace = (uint64_t)(COMM_WATCH_GRACE_S * 1e9);
    uint64_t failed_at = 0;
    int left = n, abandoned = 0;
    while (left > 0) {
        /* wait for the first running thread, waking every 20 ms to check */
        int first = 0;
        while (joined[first])
            first++;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 20 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        if (pthread_timedjoin_np(th[first], NULL, &until) == 0) {
            joined[first] = 1, left--;
            continue;
        }
        for (int r = 0; r < n; r++)
            if (!joined[r] && atomic_load(&w->exited[r]) && pthread_tryjoin_np(th[r], NULL) == 0)
                joined[r] = 1, left--;
        uint64_t now = mtc_time_ns();
        if (!failed_at && atomic_load(&w->fail_state) == 2) failed_at = now;
        int stuck = -1, past_deadline = 0;
        for (int r = 0; r < n && stuck < 0; r++) {
            if (joined[r] || atomic_load(&w->exited[r])) continue;
            comm_wait_rec rec;
            if (comm_wait_read(&w->waits[r], &rec) && rec.depth > 0 && rec.call.deadline_ns &&
                now > rec.call.deadline_ns + grace)
                stuck = r, past_deadline = 1;
            else if (failed_at && now > failed_at + grace)
                stuck = r;
        }
        if (stuck < 0) continue;
        char what[400], report[1800];
        int frank;
        mtc_result_t frc = MTC_ERR_TIMEOUT;
        const char *fmsg = NULL;
        int failed = comm_shm_first_failure(w, &frank, &frc, &fmsg);
        shm_describe_rank(w, stuck, what, sizeof what);
        if (past_deadline || !failed)
            snprintf(report, sizeof report,
                     "rank %d is stuck: it %s, %.0f s past the deadline; ending the job without "
                     "waiting for it",
                     stuck, what, COMM_WATCH_GRACE_S);
        else
            snprintf(report, sizeof report,
                     "rank %d is stuck: it has not returned %.0f s after the job failed and %s; "
                     "the job failed on rank %d: %s; ending the job without waiting for rank %d",
                     stuck, COMM_WATCH_GRACE_S, what, frank, fmsg, stuck);
        comm_watch_fire(failed ? frc : MTC_ERR_TIMEOUT, report, opts->abort_hook, opts->abort_arg);
        /* no hook, or it returned: give the caller its result now */
        for (int r = 0; r < n; r++)
            if (!joined[r]) pthread_detach(th[r]);
        *rc = mtc_error(failed ? frc : MTC_ERR_TIMEOUT, "%s", report);
        abandoned = 1;
        break;
    }
    free(joined);
    return abandoned;
}

static mtc_result_t launch_shm(const mtc_launch_opts *opts, const launch_settings *s,
                               mtc_rank_fn fn, void *arg) {
    int n = opts->world_size;
    if (n < 1 || n > LAUNCH_MAX_RANKS)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "--world-size %d must be 1..%d (thread-ranks)",
                         n, LAUNCH_MAX_RANKS);
    cpu_set_t allowed;
    int cpus[CPU_SETSIZE], ncpu = 0;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0)
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &allowed)) cpus[ncpu++] = c;
    if (ncpu == 0) ncpu = 1, cpus[0] = -1;
    int pin = opts->pin_threads < 0 ? n <= ncpu : opts->pin_threads > 0;
    shm_world *w;
    MTC_CHECK(comm_shm_world_create(n, opts->ranks_per_node, n > ncpu, opts->shm_tuning, &w));
    rank_job *jobs = calloc((size_t)n, sizeof *jobs);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    mtc_result_t rc = MTC_OK;
    int started = 0;
    if (!jobs || !th) rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "no memory for %d rank threads", n);
    for (int r = 0; r < n && rc == MTC_OK; r++, started++) {
        jobs[r] = (rank_job){w, s, fn, arg, r, pin ? cpus[r % ncpu] : -1};
        int err = pthread_create(&th[r], NULL, rank_main, &jobs[r]);
        if (err) {
            rc = mtc_error(MTC_ERR_SYSTEM, "cannot start rank thread %d of %d: %s", r, n,
                           strerror(err));
            comm_backend *be = comm_shm_backend(w, r);
            be->ops->abort(be, rc, mtc_error_detail());
        }
    }
    int abandoned = watch_shm(opts, w, th, started, &rc);
    int frank;
    mtc_result_t frc;
    const char *fmsg;
    if (rc == MTC_OK && comm_shm_first_failure(w, &frank, &frc, &fmsg))
        rc = mtc_error(frc, "rank %d: %s", frank, fmsg);
    if (abandoned) { /* the stuck threads still use w and jobs (and arg): left alone */
        free(th);
        return rc;
    }
    comm_shm_world_free(w);
    free(jobs);
    free(th);
    return rc;
}

/* ---- mpi: this process is one rank ---------------------------------------------------- */

#if defined(MTC_HAVE_MPI) && __has_include("backend_mpi.c")
static mtc_result_t launch_mpi(const mtc_launch_opts *opts, const launch_settings *s,
                               mtc_rank_fn fn, void *arg) {
    comm_backend *be;
    MTC_CHECK(comm_mpi_backend_init(opts, &be));
    mtc_log_set_rank(be->world_rank, NULL);
    mtc_comm_t world = NULL;
    mtc_result_t rc = make_world(be, s, &world);
    if (rc == MTC_OK) rc = fn(world, arg);
    comm_wait_exited(be->wait, rc);
    if (rc != MTC_OK && be->world_size > 1) be->ops->abort(be, rc, mtc_error_detail());
    mtc_comm_free(world);
    comm_mpi_backend_finish(be, s->timeout_s);
    comm_mpi_backend_finalize(be);
    return rc;
}
#else
static mtc_result_t launch_mpi(const mtc_launch_opts *opts, const launch_settings *s,
                               mtc_rank_fn fn, void *arg) {
    (void)opts, (void)s, (void)fn, (void)arg;
    return mtc_error(MTC_ERR_UNSUPPORTED,
                     "the mpi backend is not built in (install libopenmpi-dev and rebuild), use "
                     "--backend shm");
}
#endif

mtc_result_t mtc_launch(const mtc_launch_opts *opts, mtc_rank_fn fn, void *arg) {
    if (!opts || !fn)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "mtc_launch: opts and fn are required");
    launch_settings s;
    MTC_CHECK(resolve_settings(opts, &s));
    mtc_backend_kind_t kind = opts->backend;
    if (kind == MTC_BACKEND_AUTO) kind = mtc_launched_by_mpi() ? MTC_BACKEND_MPI : MTC_BACKEND_SHM;
    if (kind == MTC_BACKEND_MPI) return launch_mpi(opts, &s, fn, arg);
    if (kind != MTC_BACKEND_SHM)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "mtc_launch: backend %d is not shm or mpi",
                         (int)kind);
    return launch_shm(opts, &s, fn, arg);
}

/* A positive integer variable, or `dflt` when unset. */
static mtc_result_t env_int(const char *name, int dflt, int min, int *out) {
    const char *v = getenv(name);
    *out = dflt;
    if (!v || !v[0]) return MTC_OK;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < min || x > 1 << 24)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "environment variable %s='%s' is not an integer in [%d, %d] (fix the "
                         "launcher's setting)",
                         name, v, min, 1 << 24);
    *out = (int)x;
    return MTC_OK;
}

mtc_result_t mtc_launcher_detect(mtc_launcher_env *e) {
    *e = (mtc_launcher_env){MTC_LAUNCHER_NONE, "none", 1, 0, 0};
    static const struct {
        mtc_launcher_kind kind;
        const char *name, *world, *rank, *local;
    } vars[] = {
        {MTC_LAUNCHER_MPI, "mpirun", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
         "OMPI_COMM_WORLD_LOCAL_SIZE"},
        {MTC_LAUNCHER_MPI, "mpirun", "PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS"},
        {MTC_LAUNCHER_MPI, "mpirun", "PMIX_SIZE", "PMIX_RANK", "PMIX_LOCAL_SIZE"},
        {MTC_LAUNCHER_TORCHRUN, "torchrun", "WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE"},
        {MTC_LAUNCHER_SLURM, "srun", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_NTASKS_PER_NODE"},
    };
    for (size_t k = 0; k < sizeof vars / sizeof vars[0]; k++) {
        if (!getenv(vars[k].world) && !getenv(vars[k].rank)) continue;
        /* PMIx sets only the rank for some launchers: the size comes from MPI */
        if (vars[k].kind == MTC_LAUNCHER_MPI && !getenv(vars[k].world)) {
            e->kind = MTC_LAUNCHER_MPI, e->name = vars[k].name;
            return MTC_OK;
        }
        MTC_CHECK(env_int(vars[k].world, 1, 1, &e->world));
        MTC_CHECK(env_int(vars[k].rank, 0, 0, &e->rank));
        MTC_CHECK(env_int(vars[k].local, 0, 0, &e->local_world));
        if (e->rank >= e->world)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "environment variable %s=%d is not below %s=%d (fix the launcher's "
                             "setting)",
                             vars[k].rank, e->rank, vars[k].world, e->world);
        e->kind = vars[k].kind, e->name = vars[k].name;
        return MTC_OK;
    }
    return MTC_OK;
}
