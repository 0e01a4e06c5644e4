/* tests/data/test_tok_ext.c - the SentencePiece and tiktoken handles beyond
 * what the reference tools compare (tok_spm.sh, tok_tiktoken.sh):
 *   SentencePiece on tests/data/spm/fortunes_unigram400.model (spm_train,
 *   unigram, 400 pieces, identity normalisation, byte fallback, from
 *   Debian's fortunes): eod = eos, names, decoding one id at a time appended
 *   == decoding all (what mtc generate does), byte pieces kept raw, the
 *   text form, flag errors;
 *   TikTokenizer on a vocabulary of the 256 bytes plus a few merges written
 *   here: ids = rank + num_special, special ids, v1/v2 splits worked out by
 *   hand from the regexes (marks, title case, slashes, white space runs),
 *   the merge order, flag errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/tok_ext.h"
#include "data/tokenizer.h"
#include "test.h"

#define CHECK(c) T_CHECK(c)
#define CHECK_OK(x) T_CHECKF((x) == MTC_OK, "%s", mtc_error_detail())
#define SPM_MODEL "tests/data/spm/fortunes_unigram400.model"

static void test_spm(void) {
    data_tok *t = NULL;
    data_tok_opts o = {.type = "Llama2Tokenizer", .tokenizer_model = SPM_MODEL};
    CHECK_OK(data_tok_open(&o, &t));
    if (!t) return;
    CHECK(data_tok_kind_of(t) == DATA_TOK_SENTENCEPIECE);
    CHECK(!strcmp(data_tok_name(t), "Llama2Tokenizer"));
    CHECK(data_tok_vocab_size(t) == 400);
    CHECK(data_tok_eod(t) == 2); /* spm_train's default eos id; Megatron: eod = eos */
    const char *texts[] = {"Hello world, this is a test.",
                           "caf\xc3\xa9 \xf0\x9f\x8e\x89 \xe6\x97\xa5", "x",
                           "tabs\tand newlines\nhere"};
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        data_tok_ids ids = {0};
        data_tok_text all = {0}, one = {0};
        CHECK_OK(data_tok_encode(t, NULL, texts[k], strlen(texts[k]), &ids, NULL));
        CHECK(ids.n > 0);
        for (size_t i = 0; i < ids.n; i++)
            CHECK(ids.ids[i] >= 0 && ids.ids[i] < 400 && ids.ids[i] != 1); /* no BOS */
        CHECK_OK(data_tok_decode(t, ids.ids, ids.n, &all, NULL));
        /* one id at a time, after a prompt: the pieces' own bytes */
        CHECK_OK(data_tok_text_append(&one, "P", 1));
        for (size_t i = 0; i < ids.n; i++)
            CHECK_OK(data_tok_decode_continue(t, &ids.ids[i], 1, &one, NULL));
        T_CHECKF(one.n == all.n + 2 && !memcmp(one.s + 2, all.s, all.n) && one.s[1] == ' ',
                 "streamed \"%s\" vs whole \"%s\"", one.s, all.s);
        if (!strchr(texts[k], '\t')) /* identity normalisation: the text comes back */
            T_CHECKF(!strcmp(all.s, texts[k]), "decode \"%s\" != \"%s\"", all.s, texts[k]);
        /* the text form reads back to the same ids */
        data_tok_text form = {0};
        data_tok *back = NULL;
        data_tok_ids ids2 = {0};
        CHECK_OK(data_tok_serialize(t, &form));
        CHECK_OK(data_tok_deserialize(form.s, &back));
        if (back) {
            CHECK_OK(data_tok_encode(back, NULL, texts[k], strlen(texts[k]), &ids2, NULL));
            CHECK(ids2.n == ids.n && !memcmp(ids2.ids, ids.ids, ids.n * sizeof(int)));
            CHECK(!strcmp(data_tok_name(back), "Llama2Tokenizer"));
        }
        data_tok_free(back);
        data_tok_ids_free(&ids), data_tok_ids_free(&ids2);
        data_tok_text_free(&all), data_tok_text_free(&one), data_tok_text_free(&form);
    }
    /* out-of-range ids add nothing and are counted */
    int bad[] = {-1, 400, 100000};
    data_tok_text out = {0};
    size_t unknown = 0;
    CHECK_OK(data_tok_decode(t, bad, 3, &out, &unknown));
    CHECK(unknown == 3 && out.n == 0);
    data_tok_text_free(&out);
    data_tok_free(t);

    /* legacy: a new special token gets id 400, its text decodes as itself */
    const char *sp[] = {"<extra_id_0>"};
    data_tok_opts lo = {.type = "SentencePieceTokenizer",
                        .tokenizer_model = SPM_MODEL,
                        .spm_legacy = 1,
                        .special_tokens = sp,
                        .n_special_tokens = 1};
    CHECK_OK(data_tok_open(&lo, &t));
    if (t) {
        CHECK(data_tok_vocab_size(t) == 401);
        data_tok_ids ids = {0};
        const char *s = "ab<extra_id_0>cd";
        CHECK_OK(data_tok_encode(t, NULL, s, strlen(s), &ids, NULL));
        int found = 0;
        for (size_t i = 0; i < ids.n; i++)
            found += ids.ids[i] == 400;
        CHECK(found == 1);
        data_tok_text txt = {0};
        CHECK_OK(data_tok_decode(t, ids.ids, ids.n, &txt, NULL));
        CHECK(strstr(txt.s, "<extra_id_0>") != NULL);
        data_tok_text_free(&txt), data_tok_ids_free(&ids);
        data_tok_free(t);
    }
    /* errors, before anything is loaded */
    data_tok_opts e1 = {.type = "GPTSentencePieceTokenizer"};
    CHECK(data_tok_open(&e1, &t) == MTC_ERR_INVALID_ARGUMENT);
    data_tok_opts e2 = {.type = "GPTSentencePieceTokenizer",
                        .tokenizer_model = "/nonexistent.model"};
    CHECK(data_tok_open(&e2, &t) == MTC_ERR_IO);
    data_tok_opts e3 = lo;
    e3.spm_legacy = 0;
    CHECK(data_tok_open(&e3, &t) == MTC_ERR_INVALID_ARGUMENT); /* special tokens need legacy */
    data_tok_opts e4 = {
        .type = "Llama2Tokenizer", .tokenizer_model = SPM_MODEL, .tiktoken_pattern = "v1"};
    CHECK(data_tok_open(&e4, &t) == MTC_ERR_INVALID_ARGUMENT);
    data_tok_opts e5 = {.type = "Llama2Tokenizer", .tokenizer_model = "tests/data/test_tok_ext.c"};
    CHECK(data_tok_open(&e5, &t) == MTC_ERR_FORMAT);
}

/* a TikTokenizer vocabulary: the 256 bytes, then "ab", "abc", "cd", " x" */
static char tt_path[64] = "/tmp/mtc_test_tt_XXXXXX";
static void write_tt_vocab(void) {
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    int fd = mkstemp(tt_path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    CHECK(f != NULL);
    if (!f) return;
    fputc('[', f);
    for (int i = 0; i < 256; i++) /* base64 of one byte: 2 chars + "==" */
        fprintf(f, "{\"rank\": %d, \"token_bytes\": \"%c%c==\", \"token_str\": \"\"},", i,
                b64[i >> 2], b64[(i & 3) << 4]);
    fprintf(f, "{\"rank\": 256, \"token_bytes\": \"YWI=\", \"token_str\": \"ab\"},"
               "{\"rank\": 257, \"token_bytes\": \"YWJj\", \"token_str\": \"abc\"},"
               "{\"rank\": 258, \"token_bytes\": \"Y2Q=\", \"token_str\": \"cd\"},"
               "{\"rank\": 259, \"token_bytes\": \"IHg=\", \"token_str\": \" x\"}]");
    fclose(f);
}

/* the pieces text splits into, joined by '|' */
static void split_is(tok_tt *t, const char *text, const char *want) {
    data_tok_ids len = {0};
    CHECK_OK(tok_tt_split(t, text, strlen(text), &len));
    char got[256] = "";
    size_t off = 0, w = 0;
    for (size_t i = 0; i < len.n && w + (size_t)len.ids[i] + 2 < sizeof got; i++) {
        if (i) got[w++] = '|';
        memcpy(got + w, text + off, (size_t)len.ids[i]);
        w += (size_t)len.ids[i], off += (size_t)len.ids[i];
    }
    got[w] = 0;
    T_CHECKF(!strcmp(got, want), "%s split \"%s\": got \"%s\", want \"%s\"", tok_tt_pattern(t),
             text, got, want);
    data_tok_ids_free(&len);
}

static void test_tiktoken(void) {
    write_tt_vocab();
    data_tok *t = NULL;
    data_tok_opts o = {.type = "TikTokenizer", .tokenizer_model = tt_path, .vocab_size = 1260};
    CHECK_OK(data_tok_open(&o, &t));
    if (!t) return;
    CHECK(data_tok_vocab_size(t) == 1260 && data_tok_eod(t) == 2);
    data_tok_ids ids = {0};
    /* "abcd": ab (256) + c, or abc (257) + d? the lowest rank first: a+b -> ab, then
     * ab+c -> abc (rank 257) vs c+d -> cd (258): abc wins, d stays */
    const char *s = "abcd<s> x</s><SPECIAL_999>";
    CHECK_OK(data_tok_encode(t, NULL, s, strlen(s), &ids, NULL));
    int want[] = {1257, 1000 + 'd', 1, 1259, 2, 999};
    T_CHECKF(ids.n == 6 && !memcmp(ids.ids, want, sizeof want), "got %zu ids, first %d", ids.n,
             ids.n ? ids.ids[0] : -1);
    data_tok_text txt = {0};
    CHECK_OK(data_tok_decode(t, ids.ids, ids.n, &txt, NULL));
    CHECK(!strcmp(txt.s, s));
    data_tok_text_free(&txt), data_tok_ids_free(&ids);
    data_tok_free(t);

    tok_tt *v1 = NULL, *v2 = NULL;
    CHECK_OK(tok_tt_open(tt_path, "v1", 1000, 1260, NULL, 0, &v1));
    CHECK_OK(tok_tt_open(tt_path, "v2", 1000, 1260, NULL, 0, &v2));
    if (v1 && v2) {
        split_is(v1, "Hello World", "Hello| World");
        split_is(v2, "Hello World", "Hello| World");
        split_is(v1, "CamelCase", "CamelCase");
        split_is(v2, "CamelCase", "Camel|Case");
        split_is(v2, "XMLParser iPhone", "XMLParser| i|Phone");
        split_is(v2, "ABC", "ABC");
        split_is(v1, "123", "1|2|3");
        /* a combining mark (U+0301) is no letter: v1 starts a word at it, v2 counts it as
         * either case */
        split_is(v1, "e\xcc\x81t", "e|\xcc\x81t");
        split_is(v2, "e\xcc\x81t", "e\xcc\x81t");
        split_is(v1, "a/b//c\n", "a|/b|//|c|\n");
        split_is(v2, "a/b//c\n", "a|/b|//|c|\n");
        split_is(v2, "x ?!/\n/y", "x| ?!/\n/|y");
        split_is(v1, "x ?!/\n/y", "x| ?!/\n|/y");
        split_is(v1, "a  \n\n  b", "a|  \n\n| | b"); /* \s*[\r\n]: up to the last \n */
        split_is(v2, "a  \n\n  b", "a|  \n\n| | b");
        split_is(v1, "a   ", "a|   ");
    }
    tok_tt_free(v1), tok_tt_free(v2);
    data_tok_opts e1 = o;
    e1.vocab_size = 2000; /* more than the file has */
    CHECK(data_tok_open(&e1, &t) == MTC_ERR_INVALID_ARGUMENT);
    data_tok_opts e2 = o;
    e2.tiktoken_pattern = "v3";
    CHECK(data_tok_open(&e2, &t) == MTC_ERR_INVALID_ARGUMENT);
    const char *sp[] = {"<unk>", "<s>"};
    data_tok_opts e3 = o;
    e3.special_tokens = sp, e3.n_special_tokens = 2; /* lacks </s> ... */
    CHECK(data_tok_open(&e3, &t) == MTC_ERR_INVALID_ARGUMENT);
    unlink(tt_path);
}

int main(void) {
    test_spm();
    test_tiktoken();
    return T_DONE();
}
