/* tests/fuzz/fuzz_source.h - the part of the data targets that reads a
 * source the way training does: open it (validation), then read a few
 * samples of each split. Included by fuzz_indexed.c, fuzz_llmc.c and
 * fuzz_text.c. */
#ifndef MTC_TESTS_FUZZ_SOURCE_H
#define MTC_TESTS_FUZZ_SOURCE_H

#include "data/data.h"

static void fuzz_read_source(const char *path, const char *tokenizer, int seq_length) {
    data_source_opts o = {.data_path = path,
                          .tokenizer = tokenizer,
                          .seq_length = seq_length,
                          .seed = 1234,
                          .split = "8,1,1"};
    data_source *src = NULL;
    if (data_source_open(&o, &src) != MTC_OK) return;
    int tokens[64 + 1];
    (void)data_source_describe(src);
    (void)data_source_vocab_size(src);
    for (int s = 0; s < 3; s++) {
        uint64_t n = data_source_split_size(src, (data_split)s);
        for (uint64_t i = 0; n && i < 3; i++)
            (void)data_source_sample(src, (data_split)s, i * 7919, tokens);
    }
    data_source_free(src);
}

#endif
