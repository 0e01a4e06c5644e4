/* tests/fuzz/fuzz_ckpt.c - the one-file checkpoint (ckpt/checkpoint.c):
 * input = the file. */
#include "fuzz.h"
#include "fuzz_ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[4096];
    fuzz_write("model.bin", data, size, path, sizeof path);
    fuzz_load_ckpt(path);
    fuzz_clean();
    return 0;
}
