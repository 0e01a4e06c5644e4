/* tests/fuzz/fuzz_ckpt_dist.c - directory checkpoints (ckpt/dist_read.c,
 * ckpt/state.c): input = metadata.json FUZZ_SEP __0.distcp [FUZZ_SEP
 * tracker]. The harness writes metadata.json's checksum file itself
 * (a mutation would otherwise never get past it; the checksum check has
 * its own tests in tests/ckpt) and a tracker naming iteration 0 unless the
 * third part gives one. Pieces keep their stored checksums, so fuzzed
 * piece bytes are mostly refused by checksum - as they should be. */
#include <stdio.h>
#include <string.h>

#include "ckpt/dist.h"
#include "fuzz.h"
#include "fuzz_ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_part p[3];
    int n = fuzz_split(data, size, p, 3);
    char path[4096], crc[16];
    fuzz_write("ckpt/iter_0000000/metadata.json", p[0].p, p[0].n, path, sizeof path);
    int len = snprintf(crc, sizeof crc, "%08x\n", (unsigned)mtc_crc32c(0, p[0].p, p[0].n));
    fuzz_write("ckpt/iter_0000000/metadata.json.crc32c", crc, (size_t)len, path, sizeof path);
    fuzz_write("ckpt/iter_0000000/__0.distcp", p[1].p, p[1].n, path, sizeof path);
    if (n == 3)
        fuzz_write("ckpt/" MTC_CKPT_TRACKER, p[2].p, p[2].n, path, sizeof path);
    else
        fuzz_write("ckpt/" MTC_CKPT_TRACKER, "0\n", 2, path, sizeof path);
    snprintf(path, sizeof path, "%s/ckpt", fuzz_dir());
    fuzz_load_ckpt(path);
    fuzz_clean();
    return 0;
}
