/* cli/cli_env.c - the MTC_* environment variables are checked like flags,
 * once, before any command runs: a value the code would silently ignore or
 * misread (MTC_PROGRESS=alway, MTC_SHM_SPIN=lots, MTC_COMM_TIMEOUT=-1) is
 * refused with one line naming the variable, its value and what it takes.
 * Only the variables mtc reads are checked; other MTC_* names (a test's
 * MTC=..., MTC_SOURCE_DIR) are not mtc's and pass. The ones that set a
 * library object's default are read here only (cli_launch_defaults:
 * MTC_COMM_TIMEOUT, MTC_COMM_ALGO, MTC_SHM_SPIN, MTC_SHM_YIELD,
 * MTC_COMM_CHECK; cli_ckpt_fault_after: MTC_CKPT_FAULT_AFTER; cli_env_apply:
 * MTC_LOG_LEVEL, MTC_GEMM, MTC_PROGRESS, MTC_NN_SPIN_US, MTC_PEAK_CACHE,
 * MTC_CACHE_DIR and the XDG_CACHE_HOME / HOME the caches default to): the
 * library reads no MTC_* variable. (What it still reads describes the
 * process's launcher or libraries, not mtc: the MPI launchers' rank and size
 * variables in comm/launch.c and comm/backend_mpi.c, OPENBLAS_CORETYPE that
 * nn/pool.c's banner names.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "comm/comm.h"
#include "core/log.h"
#include "core/peak.h"
#include "core/progress.h"
#include "plan/plan.h"

/* a decimal count in [0, 1e9] */
static int is_count(const char *v) {
    if (!v[0] || strlen(v) > 10) return 0;
    for (const char *p = v; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    return strtoull(v, NULL, 10) <= 1000000000ull;
}

static int one_of(const char *v, const char *const *list) {
    for (; *list; list++)
        if (!strcmp(v, *list)) return 1;
    return 0;
}

int cli_env_check(void) {
    static const char *const progress[] = {"0", "1", "always", NULL};
    static const char *const gemm[] = {"openblas", "dnnl", "auto", NULL};
    static const char *const check[] = {"0", "1", NULL};
    static const char *const counts[] = {"MTC_NN_SPIN_US", "MTC_SHM_SPIN", "MTC_SHM_YIELD",
                                         "MTC_CKPT_FAULT_AFTER"};
    const char *v, *bad = NULL, *want = NULL;
    if ((v = getenv("MTC_LOG_LEVEL")) && mtc_log_level_parse(v) < 0)
        bad = "MTC_LOG_LEVEL", want = "error, warn, info, debug or trace";
    else if ((v = getenv("MTC_PROGRESS")) && !one_of(v, progress))
        bad = "MTC_PROGRESS", want = "0 (off), 1 (default) or always";
    else if ((v = getenv("MTC_GEMM")) && !one_of(v, gemm))
        bad = "MTC_GEMM", want = "openblas, dnnl or auto";
    else if ((v = getenv("MTC_COMM_CHECK")) && !one_of(v, check))
        bad = "MTC_COMM_CHECK", want = "0 or 1";
    for (size_t k = 0; !bad && k < sizeof counts / sizeof counts[0]; k++)
        if ((v = getenv(counts[k])) && v[0] && !is_count(v))
            bad = counts[k], want = "a whole number from 0 to 1000000000";
    if (!bad && (v = getenv("MTC_COMM_TIMEOUT")) && v[0]) {
        char *end;
        double t = strtod(v, &end);
        if (*end || !(t > 0))
            bad = "MTC_COMM_TIMEOUT", want = "a positive number of seconds (inf: no limit)";
    }
    static const char *const paths[] = {"MTC_CACHE_DIR", "MTC_PEAK_CACHE"};
    for (size_t k = 0; !bad && k < 2; k++)
        if ((v = getenv(paths[k])) && !v[0]) bad = paths[k], want = "a path (or unset it)";
    if (!bad) return 0;
    fprintf(stderr, "mtc: error: %s='%s' is not a value mtc takes: use %s, or unset it\n", bad, v,
            want);
    return 2;
}

/* The comm watchdog's last word: it has printed which rank, group, call and
 * sequence number are stuck; end the process now instead of waiting for a
 * rank thread that will never return. */
static void cli_abort_hook(mtc_result_t rc, const char *report, void *arg) {
    (void)report, (void)arg;
    fflush(stdout);
    fflush(stderr);
    _exit(rc ? (int)rc : 1);
}

void cli_launch_defaults(mtc_launch_opts *o) {
    /* every value below was checked by cli_env_check */
    static mtc_shm_tuning shm; /* the one launch of a command reads it during the call */
    o->abort_hook = cli_abort_hook, o->abort_arg = NULL;
    const char *v = getenv("MTC_COMM_TIMEOUT");
    if (o->timeout_s <= 0 && v && v[0]) o->timeout_s = strtod(v, NULL);
    if (!o->algo_spec && (v = getenv("MTC_COMM_ALGO")) && v[0]) o->algo_spec = v;
    const char *spin = getenv("MTC_SHM_SPIN"), *yield = getenv("MTC_SHM_YIELD");
    if (!o->shm_tuning && ((spin && spin[0]) || (yield && yield[0]))) {
        shm.spin_iters = spin && spin[0] ? atoi(spin) : -1;
        shm.yield_iters = yield && yield[0] ? atoi(yield) : -1;
        o->shm_tuning = &shm;
    }
    v = getenv("MTC_COMM_CHECK");
    if (v && !strcmp(v, "0")) o->no_comm_check = 1;
}

long cli_ckpt_fault_after(void) {
    const char *v = getenv("MTC_CKPT_FAULT_AFTER"); /* checked by cli_env_check */
    return v && v[0] ? atol(v) : 0;
}

static struct {
    int progress;
    nn_pool_opts pool;
    int pool_set;
    nn_gemm_engine gemm;
} cli_env_settings;

/* A per-machine cache file: $<var>/<file> when var names a directory,
 * $<var> itself when it names the file; else $XDG_CACHE_HOME/mtc/<file>,
 * else $HOME/.cache/mtc/<file> (./.cache without a HOME). */
static void cli_cache_path(char *buf, size_t n, const char *set, int set_is_dir, const char *file) {
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (set && set[0])
        snprintf(buf, n, set_is_dir ? "%s/%s" : "%s", set, file);
    else if (x && x[0])
        snprintf(buf, n, "%s/mtc/%s", x, file);
    else
        snprintf(buf, n, "%s/.cache/mtc/%s", h && h[0] ? h : ".", file);
}

void cli_env_apply(void) {
    /* every value below was checked by cli_env_check */
    const char *v = getenv("MTC_LOG_LEVEL");
    if (v && mtc_log_level_parse(v) >= 0)
        mtc_log_set_level((mtc_log_level_t)mtc_log_level_parse(v));
    v = getenv("MTC_GEMM");
    cli_env_settings.gemm = v && !strcmp(v, "openblas") ? NN_GEMM_OPENBLAS
                            : v && !strcmp(v, "dnnl")   ? NN_GEMM_DNNL
                                                        : NN_GEMM_AUTO;
    nn_gemm_engine_request(cli_env_settings.gemm);
    v = getenv("MTC_PROGRESS");
    cli_env_settings.progress = v && !strcmp(v, "0")        ? MTC_PROGRESS_OFF
                                : v && !strcmp(v, "always") ? MTC_PROGRESS_ALWAYS
                                                            : MTC_PROGRESS_ON;
    v = getenv("MTC_NN_SPIN_US");
    cli_env_settings.pool_set = v && v[0];
    cli_env_settings.pool.spin_us = cli_env_settings.pool_set ? strtol(v, NULL, 10) : -1;
    char path[4096];
    cli_cache_path(path, sizeof path, getenv("MTC_PEAK_CACHE"), 0, "peak.json");
    mtc_peak_set_cache_path(path);
    cli_cache_path(path, sizeof path, getenv("MTC_CACHE_DIR"), 1, "machine.json");
    mtc_plan_machine_set_cache_path(path);
}

int cli_progress_mode(void) { return cli_env_settings.progress; }

const nn_pool_opts *cli_pool_opts(void) {
    return cli_env_settings.pool_set ? &cli_env_settings.pool : NULL;
}

nn_gemm_engine cli_gemm_engine(void) { return cli_env_settings.gemm; }
