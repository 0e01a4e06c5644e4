/* tests/fuzz/fuzz_llmc.c - an llm.c token shard (data/llmc.c): input = the
 * shard's bytes. */
#include "fuzz.h"
#include "fuzz_source.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[4096];
    fuzz_write("shard_000000.bin", data, size, path, sizeof path);
    fuzz_read_source(path, NULL, 8);
    fuzz_clean();
    return 0;
}
