/* tests/fuzz/fuzz_indexed.c - Megatron's indexed dataset (data/indexed.c,
 * data/source.c): input = PREFIX.idx FUZZ_SEP PREFIX.bin [FUZZ_SEP
 * PREFIX.tokenizer]. */
#include <stdio.h>

#include "fuzz.h"
#include "fuzz_source.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_part p[3];
    int n = fuzz_split(data, size, p, 3);
    char path[4096], prefix[4096];
    fuzz_write("d.idx", p[0].p, p[0].n, path, sizeof path);
    fuzz_write("d.bin", p[1].p, p[1].n, path, sizeof path);
    if (n == 3) fuzz_write("d.tokenizer", p[2].p, p[2].n, path, sizeof path);
    snprintf(prefix, sizeof prefix, "%s/d", fuzz_dir());
    fuzz_read_source(prefix, NULL, 8);
    fuzz_clean();
    return 0;
}
