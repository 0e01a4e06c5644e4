/* cli/cmd_schedule.c - placeholder until its issue lands; replaced by the owner. */
#include "cli/cli.h"

int cli_cmd_schedule(int argc, char **argv) {
    (void)argc, (void)argv;
    return cli_usage_error("schedule", "not built yet");
}
