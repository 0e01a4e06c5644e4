/* data/tok_bpe.h - byte-level BPE (GPT-2's algorithm), internal to data/:
 * the model shared by GPT2BPETokenizer and HuggingFaceTokenizer. tok.c owns
 * the handle; tok_bpe_load.c loads the model, tok_bpe.c runs it. */
#ifndef MTC_DATA_TOK_BPE_H
#define MTC_DATA_TOK_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "data/tokenizer.h"

typedef struct {
    int n_ids;             /* table size: largest id + 1 */
    unsigned char **bytes; /* id -> raw bytes (NULL for an unused id) */
    int *len;
    /* raw bytes -> id: open addressing, slots hold id + 1 (0 empty) */
    int *tok_slot;
    size_t tok_cap;
    /* merge (left id, right id) -> rank and merged id: open addressing */
    uint64_t *merge_key; /* (left << 32 | right) + 1, 0 empty */
    int *merge_rank, *merge_id;
    size_t merge_cap;
    int byte_id[256]; /* id of each single byte, -1 when missing */
    /* added tokens, matched in the text before pre-tokenization */
    int n_added;
    unsigned char **added;
    int *added_len, *added_id;
    int add_prefix_space; /* HF ByteLevel option */
    int ignore_merges;    /* HF BPE option: a word in the vocabulary is one id */
    int eod;              /* eos_token of tokenizer_config.json, else <|endoftext|>, else -1 */
    /* HF TemplateProcessing "single": ids added before and after each encode */
    int n_prefix, n_suffix;
    int prefix[8], suffix[8];
    int vocab_size;
} tok_bpe;

/* GPT-2's files: vocab.json (byte-level string -> id) and merges.txt ("a b"
 * per line after an optional "#version" line; rank = line order). */
mtc_result_t tok_bpe_load_gpt2(tok_bpe *m, const char *vocab_file, const char *merge_file);
/* A Hugging Face tokenizer.json whose model is byte-level BPE; eod is the
 * eos_token of a tokenizer_config.json in the same folder when there is one. */
mtc_result_t tok_bpe_load_hf(tok_bpe *m, const char *path);
void tok_bpe_free(tok_bpe *m);

/* id of the token with these raw bytes, -1 if none */
int tok_bpe_find(const tok_bpe *m, const unsigned char *s, size_t n);
/* slot of merge (left, right) in the merge table: holding it, or empty */
size_t tok_bpe_merge_slot(const tok_bpe *m, int left, int right);

static inline uint64_t tok_bpe_hash(const unsigned char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a, then a final mix */
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}
static inline uint64_t tok_bpe_hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

mtc_result_t tok_bpe_encode(const tok_bpe *m, data_tok_cache *cache, const char *text, size_t n,
                            data_tok_ids *out);
mtc_result_t tok_bpe_decode(const tok_bpe *m, const int *ids, size_t n, data_tok_text *out,
                            size_t *unknown);

#endif
