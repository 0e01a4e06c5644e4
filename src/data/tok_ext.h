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
mtc_result_t tok_tt_encode(const tok_tt *t, const char *text, size_t n, data_tok_ids *out);
mtc_result_t tok_tt_decode(const tok_tt *t, const int *ids, size_t n, data_tok_text *out,
                           size_t *unknown);
/* the pre-tokenizer alone: byte lengths of the pieces (for tests) */
mtc_result_t tok_tt_split(const tok_tt *t, const char *text, size_t n, data_tok_ids *lengths);

#endif
