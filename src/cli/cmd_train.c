/* cli/cmd_train.c - placeholder until its issue lands; replaced by the owner. */
#include "cli/cli.h"

int cli_cmd_train(int argc, char **argv) {
    (void)argc, (void)argv;
    return cli_usage_error("train", "not built yet");
}
