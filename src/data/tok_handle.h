/* data/tok_handle.h - the data_tok handle's layout, internal to data/: tok.c
 * (byte, char, null, BPE kinds, the text forms) and tok_ext.c (SentencePiece,
 * TikTokenizer) share it. Nothing outside data/ includes this. */
#ifndef MTC_DATA_TOK_HANDLE_H
#define MTC_DATA_TOK_HANDLE_H

#include <stdint.h>

#include "data/tok_bpe.h"
#include "data/tok_ext.h"

struct data_tok {
    data_tok_kind kind;
    int vocab_size, eod;
    uint32_t *chars;       /* char: sorted code points (vocab_size) */
    int char_bytes;        /* char read from the older "char:<hex>" form: ids are bytes */
    tok_bpe bpe;           /* GPT2BPETokenizer, HuggingFaceTokenizer */
    char *file_a, *file_b; /* BPE: the files it came from, for serialize */
    tok_spm *spm;          /* SentencePiece kinds */
    tok_tt *tt;            /* TikTokenizer */
    const char *type_name; /* the --tokenizer-type it was opened as (a static string) */
    char **special;        /* --tokenizer-special-tokens, for serialize */
    int n_special;
    int tt_num_special; /* TikTokenizer's --tiktoken-num-special-tokens, for serialize */
};

mtc_result_t tok_new(data_tok_kind kind, data_tok **out);
char *tok_dup_str(const char *s);
/* the absolute path (a model stores it and is loaded from elsewhere) */
char *tok_dup_path(const char *s);
/* the canonical spelling of a --tokenizer-type name, NULL when unknown */
const char *tok_type_canonical(const char *name);

/* tok_ext.c: SentencePiece / TikTokenizer from the flags (t->kind set), and
 * their text forms */
mtc_result_t tok_open_ext(data_tok *t, const data_tok_opts *o);
mtc_result_t tok_serialize_ext(const data_tok *t, data_tok_text *out);
mtc_result_t tok_deserialize_ext(const char *name, const char *json, data_tok **out);

#endif
