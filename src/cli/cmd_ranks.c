/* cli/cmd_ranks.c - placeholder until its issue lands; replaced by the owner. */
#include "cli/cli.h"

int cli_cmd_ranks(int argc, char **argv) {
    (void)argc, (void)argv;
    return cli_usage_error("ranks", "not built yet");
}
