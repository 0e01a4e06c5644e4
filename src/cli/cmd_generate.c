/* cli/cmd_generate.c - placeholder until its issue lands; replaced by the owner. */
#include "cli/cli.h"

int cli_cmd_generate(int argc, char **argv) {
    (void)argc, (void)argv;
    return cli_usage_error("generate", "not built yet");
}
