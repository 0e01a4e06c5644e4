/* cli/main.c - `mtc <command> [options]`: dispatch to the subcommands. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "comm/comm.h"

#define MTC_VERSION "0.1.0"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} cli_command;

static const cli_command commands[] = {
    {"train", cli_cmd_train,
     "train a GPT-2 or Llama-style model (serial, or parallel over thread or MPI ranks)"},
    {"generate", cli_cmd_generate, "sample text from a saved model"},
    {"export", cli_cmd_export, "a checkpoint to Hugging Face safetensors or GGUF (llama.cpp)"},
    {"import", cli_cmd_import, "a Hugging Face GPT-2 or Llama folder to an mtc checkpoint"},
    {"ranks", cli_cmd_ranks, "Megatron's process groups for a layout, as text, JSON or SVG"},
    {"schedule", cli_cmd_schedule, "Megatron's per-rank pipeline schedule, as text, JSON or SVG"},
    {"plot", cli_cmd_plot, "loss, learning rate, grad norm and tokens/s of metrics files, as SVG"},
    {"layout", cli_cmd_layout, "distributed-optimizer buffer, bucket and shard layout"},
    {"bench-comm", cli_cmd_bench_comm, "nccl-tests style benchmark of the collectives"},
    {"preprocess", cli_cmd_preprocess, "Megatron's preprocess_data.py: JSON lines to .bin/.idx"},
    {"tokenize", cli_cmd_tokenize, "encode text to token ids or decode them, any tokenizer"},
    {"plan", cli_cmd_plan, "memory and step time of every valid layout on a machine, sorted"},
    {"bench-peak", cli_cmd_bench_peak, "measure this machine's GEMM rate and links for mtc plan"},
};
#define NCOMMANDS (int)(sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
    fprintf(f,
            "mtc %s - Megatron-LM's parallelism system in C\n\n"
            "usage: mtc <command> [options]      (mtc <command> --help for its options)\n\n"
            "commands:\n",
            MTC_VERSION);
    for (int i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nRanks run as threads of this process (--world-size N) or as MPI processes\n"
               "(mpirun -np N mtc train ...).\n");
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "mtc %s: error: %s\n", cmd, msg);
    return 2;
}

int cli_fail(const char *cmd, mtc_result_t rc) {
    const char *detail = mtc_error_detail();
    fprintf(stderr, "mtc %s: error: %s%s(%s)\n", cmd, detail, detail[0] ? " " : "",
            mtc_result_str(rc));
    return 1;
}

int cli_parse(const char *cmd, const char *usage_line, const char *about, mtc_arg *args, int nargs,
              int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: mtc %s %s\n\n%s\n\noptions:\n", cmd, usage_line, about);
            mtc_args_help(stdout, args, nargs);
            return 0;
        }
    }
    char err[512];
    if (mtc_args_parse(args, nargs, argc, argv, NULL, 0, NULL, err, sizeof err) != MTC_OK)
        return cli_usage_error(cmd, "%s", err);
    return -1;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("mtc %s\n", MTC_VERSION);
        return 0;
    }
    for (int i = 0; i < NCOMMANDS; i++)
        if (!strcmp(argv[1], commands[i].name)) {
            if (cli_env_check()) return 2; /* MTC_* values checked like flags */
            cli_env_apply();               /* ... and read once, here */
            return commands[i].run(argc - 2, argv + 2);
        }
    const char *best = NULL;
    int best_d = 99;
    for (int i = 0; i < NCOMMANDS; i++) {
        int d = mtc_edit_distance(argv[1], commands[i].name);
        if (d < best_d) best_d = d, best = commands[i].name;
    }
    if (best && best_d <= 3)
        fprintf(stderr, "mtc: error: unknown command '%s' (did you mean '%s'?)\n", argv[1], best);
    else
        fprintf(stderr, "mtc: error: unknown command '%s' (run 'mtc --help' for the list)\n",
                argv[1]);
    return 2;
}
