/* tests/fuzz/fuzz_tok_bpe.h - opens a BPE tokenizer from fuzzed files and
 * runs it over fuzzed text: encode, decode, and decode of ids around the
 * vocabulary's ends. Included by fuzz_tok_gpt2.c and fuzz_tok_hf.c. */
#ifndef MTC_TESTS_FUZZ_TOK_BPE_H
#define MTC_TESTS_FUZZ_TOK_BPE_H

#include "data/tokenizer.h"

static void fuzz_run_tok(const data_tok_opts *o, const uint8_t *text, size_t n) {
    data_tok *tok = NULL;
    if (data_tok_open(o, &tok) != MTC_OK) return;
    data_tok_cache *cache = data_tok_cache_init();
    data_tok_ids ids = {0};
    data_tok_text back = {0};
    size_t unknown = 0;
    for (int pass = 0; pass < 2; pass++) /* the second pass hits the cache */
        (void)data_tok_encode(tok, pass ? cache : NULL, (const char *)text, n, &ids, &unknown);
    (void)data_tok_decode(tok, ids.ids, ids.n, &back, &unknown);
    int V = data_tok_vocab_size(tok);
    int edge[] = {-1, 0, V - 1, V, V + 1, data_tok_eod(tok), 2147483647};
    (void)data_tok_decode(tok, edge, sizeof edge / sizeof *edge, &back, &unknown);
    data_tok_text ser = {0};
    (void)data_tok_serialize(tok, &ser);
    data_tok_text_free(&ser);
    data_tok_text_free(&back);
    data_tok_ids_free(&ids);
    data_tok_cache_free(cache);
    data_tok_free(tok);
}

#endif
