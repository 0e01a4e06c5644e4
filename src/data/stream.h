/* data/stream.h - the token stream behind a data source (internal to data/).
 *
 * A stream is a list of segments, each a contiguous array of token ids of
 * one integer type that came from one file (an mmap'ed .bin or llm.c shard,
 * or a text file tokenized in memory). Token k of the stream is token
 * k - seg.start of the segment holding it; readers (text.c, indexed.c,
 * llmc.c) append segments, source.c cuts the stream into samples.
 * Reading is const and touches no shared state, so rank-threads may read one
 * stream concurrently. Does not know about windows, splits or tokenizers. */
#ifndef MTC_DATA_STREAM_H
#define MTC_DATA_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "core/result.h"
#include "data/data.h"
#include "data/tokenizer.h"

typedef enum {
    DATA_IDS_U8 = 0,
    DATA_IDS_I8,
    DATA_IDS_I16,
    DATA_IDS_U16,
    DATA_IDS_I32,
    DATA_IDS_U32,
    DATA_IDS_I64,
} data_ids_type;

typedef struct {
    const unsigned char *ids; /* first token (may be unaligned) */
    data_ids_type type;
    uint64_t n;       /* tokens */
    uint64_t start;   /* stream index of the first token */
    char *name;       /* file it came from, for messages */
    void *owned;      /* malloc'ed or mmap'ed storage to release */
    size_t owned_len; /* > 0 and is_mmap: munmap length */
    int is_mmap;
} data_segment;

typedef struct {
    data_segment *seg;
    size_t n_seg, cap_seg;
    uint64_t n_tokens;
} data_stream;

size_t data_ids_size(data_ids_type t);
const char *data_ids_name(data_ids_type t);

/* Appends a segment; takes ownership of `owned` (freed by data_stream_free,
 * also when this call fails). ids points inside owned (or is owned). */
mtc_result_t data_stream_add(data_stream *st, const char *name, const void *ids, data_ids_type type,
                             uint64_t n, void *owned, size_t owned_len, int is_mmap);
void data_stream_free(data_stream *st);

/* tokens[k] = stream[first + k] for k < n; first + n <= n_tokens. */
void data_stream_read(const data_stream *st, uint64_t first, size_t n, int *tokens);

/* Checks every id is >= 0 and (when vocab_size > 0) < vocab_size; the error
 * names the file, the id and its position. *max_id_out = largest id (-1 when
 * empty). */
mtc_result_t data_stream_check_ids(const data_stream *st, int vocab_size, int64_t *max_id_out);

/* Maps `path` read-only. An empty file gives *map = NULL, *len = 0. */
mtc_result_t data_file_map(const char *path, void **map, size_t *len);
void data_file_unmap(void *map, size_t len);
/* Reads the whole file into a malloc'ed buffer (*buf NULL when empty). */
mtc_result_t data_file_read(const char *path, unsigned char **buf, size_t *len);

/* ---- readers (each appends to a stream) ---------------------------------------- */

/* Megatron .bin/.idx with this prefix (indexed.c). */
mtc_result_t data_indexed_open(data_stream *st, const char *prefix);
/* The sequence lengths of the Megatron dataset PREFIX (validated as
 * data_indexed_open does; malloc'ed). */
mtc_result_t data_indexed_lengths(const char *prefix, int32_t **lengths, uint64_t *n_seq);
/* llm.c token shard (llmc.c). */
mtc_result_t data_llmc_open(data_stream *st, const char *path);
/* 1 when the file starts with an llm.c token-shard magic, 0 otherwise. */
int data_llmc_probe(const char *path);
/* 1 when the file starts with the .idx magic, 0 otherwise. */
int data_indexed_probe(const char *path);

/* Text files (text.c): reads them all and appends one segment per file,
 * tokenized with *tok; when *tok is NULL, first builds the char tokenizer of
 * all files together (every distinct code point) into *tok (caller frees). */
mtc_result_t data_text_open(data_stream *st, data_tok **tok, char *const *paths, size_t n_paths);
/* Regular files under a folder, recursively, sorted by name; skips names
 * starting with '.', strfile indexes (*.dat) and files already seen through
 * another name (symlinks). *paths is a malloc'ed array of malloc'ed strings. */
mtc_result_t data_text_list_folder(const char *dir, char ***paths, size_t *n_paths);
void data_paths_free(char **paths, size_t n);

/* tokens[k] = data_mock_token(seed, vocab_size, first + k) for k < n (mock.c). */
void data_mock_read(uint64_t seed, int vocab_size, uint64_t first, size_t n, int *tokens);

#endif
