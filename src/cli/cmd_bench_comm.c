/* cli/cmd_bench_comm.c - placeholder until its issue lands; replaced by the owner. */
#include "cli/cli.h"

int cli_cmd_bench_comm(int argc, char **argv) {
    (void)argc, (void)argv;
    return cli_usage_error("bench-comm", "not built yet");
}
