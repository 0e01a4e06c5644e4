/* data/tok_cli.h - the flags of the SentencePiece and tiktoken tokenizers,
 * as one table block every command that opens a tokenizer adds
 * (DATA_TOK_CLI_ARGS into its mtc_arg table, then data_tok_cli_special
 * after parsing). Megatron core 0.18's spellings and defaults. */
#ifndef MTC_DATA_TOK_CLI_H
#define MTC_DATA_TOK_CLI_H

#include "core/args.h"
#include "data/tokenizer.h"

#define DATA_TOK_CLI_NARGS 4
/* opts: a data_tok_opts; special: an mtc_arg_strings for the special tokens */
#define DATA_TOK_CLI_ARGS(opts, special)                                                           \
    {"tokenizer-sentencepiece-legacy",                                                             \
     NULL,                                                                                         \
     MTC_ARG_FLAG,                                                                                 \
     &(opts).spm_legacy,                                                                           \
     NULL,                                                                                         \
     "SentencePiece: Megatron's legacy wrapper (--tokenizer-special-tokens matched in the text)",  \
     0},                                                                                           \
        {"tiktoken-pattern",                                                                       \
         NULL,                                                                                     \
         MTC_ARG_STRING,                                                                           \
         &(opts).tiktoken_pattern,                                                                 \
         "v1|v2",                                                                                  \
         "TikTokenizer: the split pattern (default v2)",                                           \
         0},                                                                                       \
        {"tiktoken-num-special-tokens",                                                            \
         NULL,                                                                                     \
         MTC_ARG_INT,                                                                              \
         &(opts).tiktoken_num_special,                                                             \
         "N",                                                                                      \
         "TikTokenizer: ids 0..N-1 are special tokens (default 1000)",                             \
         0},                                                                                       \
    {                                                                                              \
        "tokenizer-special-tokens", NULL, MTC_ARG_STRINGS, &(special), "TOKEN...",                 \
            "TikTokenizer (must include <unk> <s> </s> <mask> <pad> <cls> <sep>) or legacy "       \
            "SentencePiece: the special tokens",                                                   \
            0                                                                                      \
    }

static inline void data_tok_cli_special(data_tok_opts *o, const mtc_arg_strings *special) {
    o->special_tokens = special->v, o->n_special_tokens = special->n;
}

#endif
