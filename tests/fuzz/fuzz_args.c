/* tests/fuzz/fuzz_args.c - command lines: the shared parser (core/args.c)
 * with one option of each type, then the commands that only validate and
 * compute (mtc ranks, schedule, layout, plan) through their real entry
 * points (src/cli, main() renamed). Input = the words of a command line,
 * one per line; the first picks the command ("args" = the parser alone).
 * Commands run in fuzz_dir() with stdout in a file there; an input holding
 * '/' is skipped (an output option must not reach outside the folder), and
 * plan is given a built-in machine (measuring this host is not fuzzing). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/args.h"
#include "core/log.h"
#include "fuzz.h"

#define MAX_WORDS 48

static void parse_alone(int argc, char **argv) {
    int flag = 0, i = 0;
    int64_t i64 = 0;
    double d = 0;
    const char *s = NULL;
    mtc_arg_ints ints = {0};
    mtc_arg args[] = {
        {"flag", "f", MTC_ARG_FLAG, &flag, NULL, "", 0},
        {"int-value", "i", MTC_ARG_INT, &i, "N", "", 0},
        {"long-value", NULL, MTC_ARG_I64, &i64, "N", "", 0},
        {"real", NULL, MTC_ARG_DOUBLE, &d, "X", "", 0},
        {"string", "s", MTC_ARG_STRING, &s, "S", "", 0},
        {"list", NULL, MTC_ARG_INTS, &ints, "N,..", "", 0},
    };
    const char *pos[4];
    int npos = 0;
    char err[256];
    (void)mtc_args_parse(args, 6, argc, argv, pos, 4, &npos, err, sizeof err);
    (void)mtc_args_parse(args, 6, argc, argv, NULL, 0, NULL, err, sizeof err);
    MTC_ASSERT(ints.n >= 0 && ints.n <= MTC_ARG_INTS_MAX && npos >= 0 && npos <= 4);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int out_fd = -1;
    if (out_fd < 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/stdout.txt", fuzz_dir());
        out_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (out_fd < 0) abort();
        fflush(stdout);
        dup2(out_fd, 1);
    }
    if (size > 4096 || memchr(data, '/', size)) return 0;
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    char *argv[MAX_WORDS + 3];
    int argc = 0;
    for (char *w = strtok(text, "\n"); w && argc < MAX_WORDS; w = strtok(NULL, "\n"))
        argv[argc++] = w;
    argv[argc] = NULL;
    /* relative output paths land in the private folder; libFuzzer reads its
     * corpus by relative paths, so the working folder is restored after */
    int cwd = open(".", O_RDONLY | O_DIRECTORY);
    if (cwd < 0 || chdir(fuzz_dir())) abort();
    if (argc > 0) {
        const char *cmd = argv[0];
        int n = argc - 1;
        char **rest = argv + 1;
        if (!strcmp(cmd, "ranks"))
            cli_cmd_ranks(n, rest);
        else if (!strcmp(cmd, "schedule"))
            cli_cmd_schedule(n, rest);
        else if (!strcmp(cmd, "layout"))
            cli_cmd_layout(n, rest);
        else if (!strcmp(cmd, "plan")) {
            rest[n++] = "--machine";
            rest[n++] = "dgx-h100";
            rest[n] = NULL;
            cli_cmd_plan(n, rest);
        } else
            parse_alone(argc, argv);
    }
    if (fchdir(cwd)) abort();
    close(cwd);
    fflush(stdout);
    if (ftruncate(1, 0) == 0) lseek(1, 0, SEEK_SET);
    free(text);
    return 0;
}
