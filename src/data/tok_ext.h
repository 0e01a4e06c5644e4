/* data/tok_ext.h - the SentencePiece and tiktoken tokenizers, internal to
 * data/: tok.c's handle dispatches to them. tok_spm.c (Megatron's
 * SentencePieceTokenizer over libsentencepiece), tok_tiktoken.c (Megatron's
 * TikTokenizer: its JSON vocabulary, the v1/v2 split patterns, special
 * tokens first). */
#ifndef MTC_DATA_TOK_EXT_H
#define MTC_DATA_TOK_EXT_H

#include "data/tok_spm.h"
#include "data/tokenizer.h"

typedef struct tok_spm tok_spm;
/* Loads a .model; legacy and special as --tokenizer-sentencepiece-legacy and
 * --tokenizer-special-tokens. MTC_ERR_FORMAT when the library refuses it. */
mtc_result_t tok_spm_open(const char *path, int legacy, const char *const *special, int n_special,
                          tok_spm **out);
void tok_spm_free(tok_spm *s);
int tok_spm_vocab_size(const tok_spm *s);
int tok_spm_eod(const tok_spm *s);
int tok_spm_bos(const tok_spm *s);
int tok_spm_legacy(const tok_spm *s);
int tok_spm_n_special(const tok_spm *s);
const char *tok_spm_special(const tok_spm *s, int i);
/* index of id among the legacy special tokens, -1 when it is none */
int tok_spm_special_index(const tok_spm *s, int id);
const tok_spm_proc *tok_spm_processor(const tok_spm *s);
/* What exporters need of a .model beyond the library's queries (read from
 * its ModelProto): piece types 1 normal 2 unknown 3 control 4 user defined
 * 5 unused 6 byte; trainer model_type 1 unigram 2 BPE 3 word 4 char. */
typedef struct {
    int n_pieces, *type; /* malloc'd */
    int model_type, byte_fallback, whitespace_as_suffix;
    int identity, has_charsmap, add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces;
} tok_spm_model;
mtc_result_t tok_spm_read_model(const char *path, int n_pieces, tok_spm_model *m);
/* the fields read when the tokenizer was opened */
const tok_spm_model *tok_spm_model_of(const tok_spm *s);

/* tokenizer.json of a Llama-style model (BPE, identity, no white space
 * removal): *json malloc'd (cJSON_free it); MTC_ERR_UNSUPPORTED otherwise.
 * path: the .model file (its proto is read again). tok_export_spm.c. */
mtc_result_t tok_spm_tokenizer_json(const tok_spm *s, const char *path, char **json);
mtc_result_t tok_spm_encode(const tok_spm *s, const char *text, size_t n, data_tok_ids *out);
/* Appends to out. Not continuing: the processor's decode of the sequence
 * (legacy: Megatron's joining around special tokens). continuing: ids that
 * go on a text already decoded: each piece's own bytes ("▁" a space even
 * first, byte pieces raw), so decoding one id at a time concatenates to the
 * text of the whole (valid UTF-8 assumed). */
mtc_result_t tok_spm_decode(const tok_spm *s, const int *ids, size_t n, int continuing,
                            data_tok_text *out, size_t *unknown);

typedef struct tok_tt tok_tt;
/* Megatron's TikTokenizer: path a JSON list of {rank, token_bytes,
 * token_str}; pattern "v1" or "v2"; num_special the special ids 0..N-1
 * (special tokens, then <SPECIAL_i> fillers); vocab_size the whole
 * vocabulary (Megatron: --vocab-size, default 131072), so the file's first
 * vocab_size - num_special entries are used and must exist. */
mtc_result_t tok_tt_open(const char *path, const char *pattern, int num_special, int vocab_size,
                         const char *const *special, int n_special, tok_tt **out);
void tok_tt_free(tok_tt *t);
int tok_tt_vocab_size(const tok_tt *t);
int tok_tt_eod(const tok_tt *t);
int tok_tt_bos(const tok_tt *t);
int tok_tt_num_special(const tok_tt *t);
const char *tok_tt_pattern(const tok_tt *t);
/* raw bytes of id (special: its text); -1 for none */
int tok_tt_piece(const tok_tt *t, int id, const unsigned char **out);
/* Merges as Hugging Face's tiktoken converter derives them: every split of
 * every multi-byte token into two tokens, ordered by the token's rank, then
 * the left and right parts' ranks; ids (malloc'd pairs). */
mtc_result_t tok_tt_merges(const tok_tt *t, int **pairs, size_t *n);
/* the split pattern as a regex for tokenizer.json (greedy quantifiers) */
const char *tok_tt_regex(const tok_tt *t);
mtc_result_t tok_tt_encode(const tok_tt *t, const char *text, size_t n, data_tok_ids *out);
mtc_result_t tok_tt_decode(const tok_tt *t, const int *ids, size_t n, data_tok_text *out,
                           size_t *unknown);
/* the pre-tokenizer alone: byte lengths of the pieces (for tests) */
mtc_result_t tok_tt_split(const tok_tt *t, const char *text, size_t n, data_tok_ids *lengths);

/* the handle's parts (NULL for other kinds), for tok_export.c */
const struct tok_spm *data_tok_spm(const data_tok *t);
const struct tok_tt *data_tok_tiktoken(const data_tok *t);

#endif
