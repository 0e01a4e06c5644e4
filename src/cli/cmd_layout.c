/* cli/cmd_layout.c - placeholder until its issue lands; replaced by the owner. */
#include "cli/cli.h"

int cli_cmd_layout(int argc, char **argv) {
    (void)argc, (void)argv;
    return cli_usage_error("layout", "not built yet");
}
