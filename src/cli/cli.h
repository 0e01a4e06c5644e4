/* cli/cli.h - the subcommands of `mtc` and the helpers they share.
 * cli/ is the only layer that prints user-facing errors and sets the exit
 * status: 0 success, 1 runtime failure, 2 usage error (bad flag or layout). */
#ifndef MTC_CLI_CLI_H
#define MTC_CLI_CLI_H

#include "comm/comm.h"
#include "core/args.h"
#include "core/result.h"
#include "nn/nn.h"

/* Each returns the process exit status; argv[0] is the first option. */
int cli_cmd_train(int argc, char **argv);
int cli_cmd_generate(int argc, char **argv);
int cli_cmd_export(int argc, char **argv); /* cmd_export.c, with import */
int cli_cmd_import(int argc, char **argv);
int cli_cmd_ranks(int argc, char **argv);
int cli_cmd_schedule(int argc, char **argv);
int cli_cmd_plot(int argc, char **argv);
int cli_cmd_layout(int argc, char **argv);
int cli_cmd_bench_comm(int argc, char **argv);
int cli_cmd_preprocess(int argc, char **argv);
int cli_cmd_tokenize(int argc, char **argv);
int cli_cmd_plan(int argc, char **argv);
int cli_cmd_bench_peak(int argc, char **argv);

/* "mtc CMD: error: MESSAGE" on stderr; returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The MTC_* environment variables mtc reads, checked before a command runs
 * (cli_env.c): 0, or 2 after one line naming the bad one. */
int cli_env_check(void);
/* The environment's defaults of the objects a command configures, read at
 * this edge only (cli_env.c): the launch's abort hook (ends the process
 * when the comm watchdog fires), MTC_COMM_TIMEOUT seconds when
 * o->timeout_s is 0, MTC_COMM_ALGO when o->algo_spec is NULL, MTC_SHM_SPIN
 * / MTC_SHM_YIELD (o->shm_tuning) and MTC_COMM_CHECK=0 (o->no_comm_check);
 * MTC_CKPT_FAULT_AFTER (tests' fault injection: the checkpoint writer's,
 * 0 = none). */
void cli_launch_defaults(mtc_launch_opts *o);
long cli_ckpt_fault_after(void);
/* After cli_env_check, before a command runs: the environment's settings
 * of process-wide library state, applied once (MTC_LOG_LEVEL's log level,
 * MTC_GEMM's engine request, the peak and machine caches' paths from
 * MTC_PEAK_CACHE, MTC_CACHE_DIR, XDG_CACHE_HOME and HOME). */
void cli_env_apply(void);
/* The environment's settings of the objects commands build (read once by
 * cli_env_apply): MTC_PROGRESS's mode (mtc_progress_mode), MTC_NN_SPIN_US's
 * nn pool options (NULL when unset), MTC_GEMM's engine (NN_GEMM_AUTO). */
int cli_progress_mode(void);
const nn_pool_opts *cli_pool_opts(void);
nn_gemm_engine cli_gemm_engine(void);
/* "mtc CMD: error: <detail> (<advice for rc>)" on stderr; returns 1. */
int cli_fail(const char *cmd, mtc_result_t rc);

/* Parse options, handling --help/-h: returns -1 to go on, else an exit
 * status (0 after printing help, 2 after a usage error). */
int cli_parse(const char *cmd, const char *usage, const char *about, mtc_arg *args, int nargs,
              int argc, char **argv);

#endif
