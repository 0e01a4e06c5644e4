/* tests/fuzz/fuzz_tok_hf.c - HuggingFaceTokenizer's tokenizer.json and the
 * tokenizer_config.json beside it (data/tok_bpe_load.c): input =
 * tokenizer.json FUZZ_SEP tokenizer_config.json FUZZ_SEP text (no config
 * file when the second part is empty). */
#include "fuzz.h"
#include "fuzz_tok_bpe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_part p[3];
    fuzz_split(data, size, p, 3);
    char json[4096], cfg[4096];
    fuzz_write("tokenizer.json", p[0].p, p[0].n, json, sizeof json);
    if (p[1].n) fuzz_write("tokenizer_config.json", p[1].p, p[1].n, cfg, sizeof cfg);
    data_tok_opts o = {.type = "HuggingFaceTokenizer", .tokenizer_model = json};
    fuzz_run_tok(&o, p[2].p, p[2].n);
    fuzz_clean();
    return 0;
}
