/* data/tokenizer.h - Megatron's tokenizers, behind one handle.
 *
 *   --tokenizer-type        what it is                       vocabulary          eod
 *   GPT2BPETokenizer        GPT-2 byte-level BPE from        50257 (max id + 1)  <|endoftext|>
 *                           --vocab-file / --merge-file                          (50256)
 *   HuggingFaceTokenizer    byte-level BPE from a tokenizer  max id + 1 over     <|endoftext|>,
 *                           .json (--tokenizer-model)        vocab and added     else none
 *   NullTokenizer           text is ids separated by white   --vocab-size N      N - 1
 *                           space (Megatron core 0.18)
 *   ByteLevelTokenizer      id = byte                        256                 none
 *   CharLevelTokenizer      id = rank of a Unicode code      distinct code       none
 *                           point in a corpus' sorted set    points
 *   SentencePieceTokenizer  a SentencePiece .model           its pieces (+ legacy its eos id
 *   (GPTSentencePiece-      (--tokenizer-model) through      special tokens)
 *   Tokenizer, Llama2-      libsentencepiece (tok_spm.c)
 *   Tokenizer: the same)
 *   TikTokenizer            Megatron's tiktoken JSON         --vocab-size        </s> (2)
 *                           vocabulary, v1/v2 split          (default 131072)
 *                           (tok_tiktoken.c)
 *
 * Encoding is thread-safe on a shared handle: each thread passes its own
 * data_tok_cache (or NULL, slower for BPE), which remembers the ids of words
 * seen before. Byte-level BPE follows GPT-2 exactly: the pre-tokenizer
 * regex 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * (hand-written, Unicode classes from unicode.h), the bytes-to-unicode map,
 * merges applied lowest rank first. Added tokens (GPT2BPETokenizer's
 * <|endoftext|>, a tokenizer.json's added_tokens) are matched in the text
 * first, as Hugging Face tokenizers do (Megatron 0.18 builds both types on
 * them), so "<|endoftext|>" in a document encodes as 50256.
 *
 * Data sources, mtc train, generate and export use this handle; the older
 * data_tokenizer (data.h: byte and byte-wise "char") is kept only for its
 * unit test and old checkpoints' "char:" form, which this handle also reads. */
#ifndef MTC_DATA_TOKENIZER_H
#define MTC_DATA_TOKENIZER_H

#include <stddef.h>

#include "core/result.h"

typedef enum {
    DATA_TOK_BYTE = 0,
    DATA_TOK_CHAR,
    DATA_TOK_GPT2BPE,
    DATA_TOK_HUGGINGFACE,
    DATA_TOK_NULL,
    DATA_TOK_SENTENCEPIECE, /* SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer */
    DATA_TOK_TIKTOKEN,      /* TikTokenizer */
} data_tok_kind;

typedef struct data_tok data_tok;
typedef struct data_tok_cache data_tok_cache;

/* Megatron's tokenizer flags. */
typedef struct {
    const char *type;             /* --tokenizer-type (names above; also "byte", "char",
                                     "gpt2", "hf", "null") */
    const char *vocab_file;       /* --vocab-file (GPT2BPETokenizer: vocab.json) */
    const char *merge_file;       /* --merge-file (GPT2BPETokenizer: merges.txt) */
    const char *tokenizer_model;  /* --tokenizer-model (HuggingFaceTokenizer: tokenizer.json) */
    int vocab_size;               /* --vocab-size (NullTokenizer; TikTokenizer: the whole
                                     vocabulary, 0 = Megatron's 131072) */
    int spm_legacy;               /* --tokenizer-sentencepiece-legacy */
    const char *tiktoken_pattern; /* --tiktoken-pattern v1|v2 (NULL = v2) */
    int tiktoken_num_special;     /* --tiktoken-num-special-tokens (0 = Megatron's 1000) */
    const char *const *special_tokens; /* --tokenizer-special-tokens (legacy SentencePiece,
                                          TikTokenizer) */
    int n_special_tokens;
} data_tok_opts;

/* Growable outputs; zero-initialize, free with data_tok_ids_free /
 * data_tok_text_free. Encode and decode append. */
typedef struct {
    int *ids;
    size_t n, cap;
} data_tok_ids;
typedef struct {
    char *s; /* NUL-terminated */
    size_t n, cap;
} data_tok_text;
mtc_result_t data_tok_ids_push(data_tok_ids *v, int id);
void data_tok_ids_free(data_tok_ids *v);
mtc_result_t data_tok_text_append(data_tok_text *t, const void *s, size_t n);
void data_tok_text_free(data_tok_text *t);

/* Kind of a --tokenizer-type name; -1 when unknown. */
int data_tok_parse_type(const char *name);
/* The valid --tokenizer-type names, for error messages. */
const char *data_tok_type_names(void);

/* Validates the flags for the type (missing or unreadable files, malformed
 * vocab/merges/JSON, non-BPE tokenizer.json, bad vocab size) and loads the
 * tokenizer. Errors are one line naming the value and the fix:
 * MTC_ERR_INVALID_ARGUMENT (flags), MTC_ERR_IO (files), MTC_ERR_FORMAT
 * (contents). CharLevelTokenizer cannot be opened from flags: use
 * data_tok_init_char on the corpus. */
mtc_result_t data_tok_open(const data_tok_opts *opts, data_tok **out);
/* The char tokenizer of a corpus (every distinct code point, sorted; a byte
 * that is not valid UTF-8 is a symbol of its own, so any bytes round-trip).
 * An empty text is MTC_ERR_INVALID_ARGUMENT. */
mtc_result_t data_tok_init_char(const char *text, size_t n, data_tok **out);
void data_tok_free(data_tok *tok);

data_tok_kind data_tok_kind_of(const data_tok *tok);
/* Megatron's tokenizer.vocab_size (unpadded; padding to
 * --make-vocab-size-divisible-by x tp is the model's business). */
int data_tok_vocab_size(const data_tok *tok);
/* Megatron's tokenizer.eod, or -1 when the tokenizer has none. */
int data_tok_eod(const data_tok *tok);
/* "GPT2BPETokenizer", ... */
const char *data_tok_name(const data_tok *tok);

/* Per-thread word cache for encode (bounded; NULL on out of memory). */
data_tok_cache *data_tok_cache_init(void);
void data_tok_cache_free(data_tok_cache *cache);

/* Appends the ids of text[0..n) to out. Char: a code point outside the
 * vocabulary becomes id 0 and is counted in *unknown (may be NULL).
 * NullTokenizer: a word that is not an integer in [0, vocab_size) is
 * MTC_ERR_INVALID_ARGUMENT. */
mtc_result_t data_tok_encode(const data_tok *tok, data_tok_cache *cache, const char *text, size_t n,
                             data_tok_ids *out, size_t *unknown);
/* Appends the text of ids to out (NullTokenizer: ids joined by ' '). Ids
 * outside the vocabulary (a model may emit padding ids) add nothing and are
 * counted in *unknown (may be NULL). Decoding ids one at a time and
 * concatenating gives the same bytes for every kind but NullTokenizer and
 * SentencePiece (use data_tok_decode_continue after the first). */
mtc_result_t data_tok_decode(const data_tok *tok, const int *ids, size_t n, data_tok_text *out,
                             size_t *unknown);
/* The same for ids that continue a text decoded before (mtc generate's
 * stream): SentencePiece keeps a leading "▁" as a space and byte pieces raw
 * (its whole-sequence decode drops the first and turns broken UTF-8 into
 * U+FFFD); every other kind decodes as data_tok_decode. */
mtc_result_t data_tok_decode_continue(const data_tok *tok, const int *ids, size_t n,
                                      data_tok_text *out, size_t *unknown);

/* A one-line text form to store with a model, and back:
 *   "byte", "char-utf8:<hex code point>,<hex code point>,..." (raw bytes are
 *   0x110000 + byte), "char:<hex bytes>" (the older byte-wise char tokenizer,
 *   still read), "null:<vocab size>", "GPT2BPETokenizer:<vocab file>|<merge
 *   file>", "HuggingFaceTokenizer:<tokenizer.json>" (BPE kinds name their
 *   files, which must exist when read back; a checkpoint keeps copies and
 *   names them relatively, ckpt/tok_files.h). */
mtc_result_t data_tok_serialize(const data_tok *tok, data_tok_text *out);
mtc_result_t data_tok_deserialize(const char *s, data_tok **out);

/* ---- the vocabulary, for exporters (GGUF, Hugging Face) ------------------------ */

/* The raw bytes of token id (BPE: its vocabulary entry, an added token its
 * text; byte: the byte; char: the code point's UTF-8, a raw-byte symbol its
 * byte), in *out (possibly scratch); returns the length, or -1 for an id
 * with no bytes (NullTokenizer, an unused BPE id, outside the vocabulary). */
int data_tok_piece(const data_tok *tok, int id, unsigned char scratch[8],
                   const unsigned char **out);
/* 1 when id is an added (special) token of a BPE tokenizer, e.g. <|endoftext|>. */
int data_tok_is_added(const data_tok *tok, int id);
/* The BPE merges in rank order: (*pairs)[2k], (*pairs)[2k+1] are the ids of
 * merge k's two parts (malloc'd; none for the other kinds). */
mtc_result_t data_tok_merges(const data_tok *tok, int **pairs, size_t *n);
/* SentencePiece kinds, for GGUF's "llama" vocabulary (the piece text is
 * data_tok_piece's): the piece's score and type (SentencePiece's numbering,
 * which GGUF shares: 1 normal 2 unknown 3 control 4 user defined 5 unused
 * 6 byte); -1 for an id that is no piece or another kind. */
int data_tok_spm_piece_info(const data_tok *tok, int id, float *score, int *type);
int data_tok_spm_add_space_prefix(const data_tok *tok); /* the model's add_dummy_prefix */
int data_tok_spm_unk(const data_tok *tok);              /* unk id, -1 for other kinds */
/* TikTokenizer's split pattern, "v1" or "v2" (NULL for other kinds) */
const char *data_tok_tiktoken_pattern(const data_tok *tok);
/* Appends bytes s[0..n) spelled in GPT-2's byte-to-unicode alphabet (each
 * byte one printable character; a space is U+0120), as vocab.json does. */
mtc_result_t data_tok_gpt2_spell(const unsigned char *s, size_t n, data_tok_text *out);
/* The absolute path of the file a BPE tokenizer was read from: which 0 is
 * vocab.json / tokenizer.json, 1 merges.txt; NULL otherwise. */
const char *data_tok_file(const data_tok *tok, int which);

/* Writes the tokenizer as Hugging Face files into the existing folder dir
 * (tok_export.c says which for each kind): tokenizer.json and
 * tokenizer_config.json (model_max_length when > 0), and for GPT-2 also
 * vocab.json and merges.txt. MTC_ERR_UNSUPPORTED for a kind with no Hugging
 * Face equivalent (NullTokenizer, a char vocabulary with multi-byte
 * characters); MTC_ERR_IO when a file cannot be read or written. */
mtc_result_t data_tok_write_hf(const data_tok *tok, const char *dir, int model_max_length);

/* ---- details, exposed for tests ------------------------------------------------- */

/* GPT-2's pre-tokenizer: the byte lengths of the pieces text[0..n) splits
 * into (appended to out). */
mtc_result_t data_tok_pretokenize(const char *text, size_t n, data_tok_ids *lengths);

#endif
