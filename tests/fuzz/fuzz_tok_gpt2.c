/* tests/fuzz/fuzz_tok_gpt2.c - GPT2BPETokenizer's files (data/
 * tok_bpe_load.c): input = vocab.json FUZZ_SEP merges.txt FUZZ_SEP text. */
#include "fuzz.h"
#include "fuzz_tok_bpe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_part p[3];
    fuzz_split(data, size, p, 3);
    char vocab[4096], merges[4096];
    fuzz_write("vocab.json", p[0].p, p[0].n, vocab, sizeof vocab);
    fuzz_write("merges.txt", p[1].p, p[1].n, merges, sizeof merges);
    data_tok_opts o = {.type = "GPT2BPETokenizer", .vocab_file = vocab, .merge_file = merges};
    fuzz_run_tok(&o, p[2].p, p[2].n);
    fuzz_clean();
    return 0;
}
