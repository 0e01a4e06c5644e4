/* data/data.h - tokenizers, token sources and Megatron's batch semantics.
 *
 * A token source is one long stream of token ids (a text file or a folder
 * of them tokenized in memory, a Megatron .bin/.idx indexed dataset, llm.c
 * token shards, or deterministic mock tokens). Samples are windows of
 * seq_length + 1 tokens (inputs and shifted targets) at non-overlapping
 * offsets; the windows are divided into train / validation / test by
 * --split weights (contiguous ranges of windows, Megatron's "949,50,1"
 * notation) and visited in a seeded permutation per epoch, so sample i of a
 * split is a pure function of (source, seed, seq_length, split, i).
 *
 * Batch semantics (Megatron's pretraining sampler): an iteration consumes
 * global_batch = micro_batch * num_microbatches * dp samples; microbatch m
 * of data-parallel rank r, row j is sample
 *     consumed + m * (micro_batch * dp) + r * micro_batch + j.
 * data_sample_index() computes it so that every layout reads the serial
 * run's global batch. This file does no communication. */
#ifndef MTC_DATA_DATA_H
#define MTC_DATA_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "core/result.h"
#include "data/tokenizer.h"

/* ---- tokenizers ------------------------------------------------------------------ */

typedef enum { DATA_TOKENIZER_BYTE = 0, DATA_TOKENIZER_CHAR } data_tokenizer_kind;

typedef struct {
    data_tokenizer_kind kind;
    int vocab_size;           /* byte: 256; char: number of distinct characters */
    unsigned char chars[256]; /* char: id -> byte (sorted ascending) */
    int id_of[256];           /* char: byte -> id, -1 when unknown */
} data_tokenizer;

/* "byte", "char" (also Megatron-style names "ByteLevelTokenizer",
 * "CharLevelTokenizer"); -1 when unknown. */
int data_tokenizer_parse(const char *name);
void data_tokenizer_init_byte(data_tokenizer *tok);
/* The char vocabulary of `text` (every distinct byte, sorted). */
void data_tokenizer_init_char(data_tokenizer *tok, const unsigned char *text, size_t n);
/* ids (n) from text; unknown chars map to id 0 (char) — returns how many were unknown. */
size_t data_tokenizer_encode(const data_tokenizer *tok, const unsigned char *text, size_t n,
                             int *ids);
/* Writes at most cap-1 bytes and a NUL; returns bytes written. */
size_t data_tokenizer_decode(const data_tokenizer *tok, const int *ids, size_t n, char *out,
                             size_t cap);
/* A compact text form ("char:<hex of chars>" / "byte") to store with a model. */
mtc_result_t data_tokenizer_serialize(const data_tokenizer *tok, char *out, size_t cap);
mtc_result_t data_tokenizer_deserialize(data_tokenizer *tok, const char *s);

/* ---- token sources ----------------------------------------------------------------- */

typedef struct data_source data_source;
#define MTC_DATA_BLEND_MAX 32 /* datasets in one --data-path blend */

typedef struct {
    const char *data_path;    /* text file or folder, Megatron prefix (PREFIX.bin + PREFIX.idx),
                                 llm.c shard or glob of shards; NULL with mock */
    int mock;                 /* --mock-data */
    int vocab_size;           /* mock: ids in [0, vocab_size); others: checked against the data */
    const char *tokenizer;    /* --tokenizer-type; NULL: char for text, the PREFIX.tokenizer
                                 beside a Megatron dataset, none for other id sources */
    const data_tok_opts *tok; /* the other tokenizer flags (files, NullTokenizer's size); may
                                 be NULL. A tokenizer given for an id source or mock data is
                                 its vocabulary (Megatron's), checked against the ids */
    const char *const *blend; /* Megatron's --data-path list "W1 P1 W2 P2 ..." of dataset
                                 prefixes (n_blend words; then data_path is unused) */
    int n_blend;
    uint64_t num_samples[3]; /* samples each split will be asked for (Megatron's
                                train/valid/test sizes; 0: one epoch). Megatron datasets are
                                indexed for exactly these, as GPTDataset does */
    int seq_length;          /* T: samples are T + 1 tokens */
    uint64_t seed;
    const char *split; /* "949,50,1" (default "969,30,1"); weights train,valid,test */
    /* Megatron's --train-data-path / --valid-data-path / --test-data-path
     * (blend_per_split): split s is read from its own path or "W1 P1 ..."
     * blend, every document of it (no --split), indexed for num_samples[s];
     * n_split_paths[s] 0: that split is empty. Any given: data_path, blend
     * and mock are unused. */
    const char *const *split_paths[3];
    int n_split_paths[3];
} data_source_opts;

/* Opens and validates (truncated, mis-sized or corrupted files are refused
 * with MTC_ERR_FORMAT and a one-line message naming the file and what is
 * wrong); too little data for one sample is MTC_ERR_INVALID_ARGUMENT. */
mtc_result_t data_source_open(const data_source_opts *opts, data_source **out);
void data_source_free(data_source *src);
/* Tokenizer of a text source, the one the flags gave, or of a Megatron
 * dataset with a PREFIX.tokenizer file beside it (tools/txt_to_indexed.py
 * writes one); NULL for other token-id sources. Owned by the source. */
const data_tok *data_source_tokenizer(const data_source *src);
/* The declared --vocab-size, else the tokenizer's vocabulary (as Megatron),
 * else the largest token id + 1 seen. */
int data_source_vocab_size(const data_source *src);
uint64_t data_source_num_tokens(const data_source *src);

typedef enum { DATA_SPLIT_TRAIN = 0, DATA_SPLIT_VALID = 1, DATA_SPLIT_TEST = 2 } data_split;
/* Number of distinct windows in a split (sample indices wrap around it,
 * with a new permutation per epoch). 0 when the split is empty. */
uint64_t data_source_split_size(const data_source *src, data_split split);
/* tokens (T+1) of sample `index` of `split`. */
mtc_result_t data_source_sample(const data_source *src, data_split split, uint64_t index,
                                int *tokens);

/* Megatron's sample index of (microbatch m, dp rank r, row j) in the global
 * batch starting at `consumed` samples. */
static inline uint64_t data_sample_index(uint64_t consumed, int m, int r, int j, int micro_batch,
                                         int dp) {
    return consumed + (uint64_t)m * (uint64_t)(micro_batch * dp) + (uint64_t)r * micro_batch + j;
}

/* ---- details of the above, exposed for tests, logs and tools ---------------------- */

/* One line for the start-up banner: kind, files, tokens, vocabulary. */
const char *data_source_describe(const data_source *src);

/* --split weights as Megatron parses them: up to three numbers taken out
 * with the regex [.0-9]+, whatever separates them ("949,50,1", "98/2",
 * "'99,1,0'"); missing ones are 0; normalized to sum to 1. */
mtc_result_t data_split_parse(const char *split, double weights[3]);
/* Megatron's _get_split_indices over n windows: each bound is the previous
 * plus round-half-even(weight * n), then all but bounds[0] are shifted so
 * that bounds[3] == n. Split s holds windows [bounds[s], bounds[s+1]). */
void data_split_bounds(const double weights[3], uint64_t n, uint64_t bounds[4]);

/* The seeded permutation of [0, n): position of element i for (seed, key).
 * A bijection computed per index (6-round Feistel network on the next even
 * power of two, Philox round function, cycle walking into [0, n)), so nothing
 * is materialized. Samples use key = epoch * 4 + split. */
uint64_t data_permute(uint64_t i, uint64_t n, uint64_t seed, uint64_t key);

/* Mock data (--mock-data): a learnable, deterministic stream. Position p
 * lies in segment s = p / 32; the segment plays pattern
 * q = u32(seed, "data.mock.segment", s) % 16, and token p is
 * u32(seed, "data.mock.pattern", q * 32 + p % 32) % vocab_size (u32 =
 * mtc_rng_u32, streams from mtc_rng_stream_of). So 16 random phrases of 32
 * tokens are repeated in random order: after a token or two of a phrase the
 * rest is predictable, and a model's loss falls well below ln(vocab_size).
 * A mock source holds DATA_MOCK_TOKENS tokens. */
#define DATA_MOCK_TOKENS (1ull << 30)
#define DATA_MOCK_PHRASE 32
#define DATA_MOCK_PHRASES 16
int data_mock_token(uint64_t seed, int vocab_size, uint64_t pos);

/* Writes PREFIX.bin and PREFIX.idx in Megatron's indexed format (version 1):
 * sequence s holds the next seq_lengths[s] tokens, one document per sequence.
 * dtype_code is Megatron's (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
 * 8 uint16), or 0 to pick as Megatron does (uint16 when every id < 65500,
 * else int32). Files are written under temporary names, then renamed. */
mtc_result_t data_indexed_write(const char *prefix, const int *tokens, const int *seq_lengths,
                                size_t n_seqs, int dtype_code);

/* Megatron's IndexedDatasetBuilder, streaming: documents are appended to
 * PREFIX.bin.tmp as they come; finish writes PREFIX.idx.tmp (sequence
 * lengths, pointers, document indices) and renames both into place. A
 * document of several sequences (sentences) adds one length per sequence
 * and one document index; an empty document (n_seqs 0) repeats the last
 * document index, as Megatron's add_document does. _free without _finish
 * removes the temporaries. */
typedef struct data_indexed_builder data_indexed_builder;
/* Megatron's DType.optimal_dtype(vocab_size): 8 (uint16) when vocab_size <
 * 65500, else 4 (int32). */
int data_indexed_dtype_for_vocab(int vocab_size);
mtc_result_t data_indexed_builder_init(const char *prefix, int dtype_code,
                                       data_indexed_builder **out);
/* ids (sum of lengths) of one document of n_seqs sequences. */
mtc_result_t data_indexed_builder_add_document(data_indexed_builder *b, const int *ids,
                                               const int *lengths, size_t n_seqs);
mtc_result_t data_indexed_builder_finish(data_indexed_builder *b);
void data_indexed_builder_free(data_indexed_builder *b);

#endif
