/* tests/fuzz/fuzz_hf.c - Hugging Face import (ckpt/hf.c: config.json and
 * safetensors): input = config.json FUZZ_SEP model.safetensors [FUZZ_SEP
 * mtc_tokenizer.txt]. */
#include <stdio.h>

#include "ckpt/checkpoint.h"
#include "ckpt/hf.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_part p[3];
    int n = fuzz_split(data, size, p, 3);
    char path[4096], dir[4096];
    fuzz_write("hf/config.json", p[0].p, p[0].n, path, sizeof path);
    fuzz_write("hf/model.safetensors", p[1].p, p[1].n, path, sizeof path);
    if (n == 3) fuzz_write("hf/mtc_tokenizer.txt", p[2].p, p[2].n, path, sizeof path);
    snprintf(dir, sizeof dir, "%s/hf", fuzz_dir());
    mtc_model *m = NULL;
    char tok[MTC_CKPT_TOKENIZER_MAX];
    if (mtc_hf_import(dir, 0, 128, &m, tok) == MTC_OK) mtc_model_free(m);
    fuzz_clean();
    return 0;
}
