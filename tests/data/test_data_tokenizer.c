/* tests/data/test_data_tokenizer.c - the data_tok tokenizers without outside
 * files: Unicode classes against known code points, GPT-2's pre-tokenizer
 * splits against pieces worked out by hand from the regex, BPE on a small
 * hand-made vocabulary (merge order, added tokens, decode), the char
 * tokenizer on UTF-8 (code points, invalid bytes, text form, the older
 * byte-wise form), NullTokenizer, and the indexed builder's bytes for a
 * document layout written out in closed form. The GPT-2 vocabulary itself
 * is compared with npm packages in tokenizers.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/data.h"
#include "data/tokenizer.h"
#include "data/unicode.h"
#include "test.h"

#define CHECK(c) T_CHECK(c)
/* Files go to a private folder: other worktrees may run this test at once. */
static char dir_[64] = "/tmp/mtc_test_tok_XXXXXX";
static const char *P(const char *name) {
    static char bufs[8][160];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", dir_, name);
    return b;
}
#define CHECK_OK(x) T_CHECKF((x) == MTC_OK, "%s", mtc_error_detail())

static void test_unicode_classes(void) {
    static const struct {
        uint32_t cp;
        data_unicode_class c;
    } cases[] = {
        {'a', DATA_UNICODE_LETTER},     {'Z', DATA_UNICODE_LETTER},   {'7', DATA_UNICODE_NUMBER},
        {' ', DATA_UNICODE_SPACE},      {'\n', DATA_UNICODE_SPACE},   {'!', DATA_UNICODE_OTHER},
        {'\'', DATA_UNICODE_OTHER},     {0xe9, DATA_UNICODE_LETTER}, /* é */
        {0x65e5, DATA_UNICODE_LETTER},                               /* 日 (CJK range) */
        {0xac00, DATA_UNICODE_LETTER},                               /* 가 (Hangul range) */
        {0x0663, DATA_UNICODE_NUMBER},                               /* Arabic-Indic three */
        {0x00bd, DATA_UNICODE_NUMBER},                               /* ½ (No) */
        {0x2167, DATA_UNICODE_NUMBER},                               /* Ⅷ (Nl) */
        {0x0301, DATA_UNICODE_OTHER},                                /* combining acute (Mn) */
        {0x1f389, DATA_UNICODE_OTHER},                               /* 🎉 (So) */
        {0x00a0, DATA_UNICODE_SPACE},   {0x3000, DATA_UNICODE_SPACE}, {0x2028, DATA_UNICODE_SPACE},
        {0x0085, DATA_UNICODE_SPACE},   {0x200b, DATA_UNICODE_OTHER}, /* zero width space: Cf */
        {0x20000, DATA_UNICODE_LETTER},                               /* CJK extension B */
        {0x10ffff, DATA_UNICODE_OTHER},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (data_unicode_class_of(cases[i].cp) != cases[i].c)
            fprintf(stderr, "U+%04X: class %d, want %d\n", cases[i].cp,
                    data_unicode_class_of(cases[i].cp), cases[i].c);
        CHECK(data_unicode_class_of(cases[i].cp) == cases[i].c);
    }
    /* UTF-8: valid forms decode, malformed bytes are raw bytes of length 1 */
    uint32_t cp;
    CHECK(data_unicode_decode((const unsigned char *)"\xf0\x9f\x8e\x89", 4, &cp) == 4 &&
          cp == 0x1f389);
    CHECK(data_unicode_decode((const unsigned char *)"\xc0\xaf", 2, &cp) == 1 &&
          cp == DATA_UNICODE_RAW(0xc0)); /* overlong */
    CHECK(data_unicode_decode((const unsigned char *)"\xed\xa0\x80", 3, &cp) == 1 &&
          cp == DATA_UNICODE_RAW(0xed));                                        /* surrogate */
    CHECK(data_unicode_decode((const unsigned char *)"\xe6\x97", 2, &cp) == 1); /* truncated */
    unsigned char b[4];
    CHECK(data_unicode_encode(0x65e5, b) == 3 && !memcmp(b, "\xe6\x97\xa5", 3));
    CHECK(data_unicode_encode(DATA_UNICODE_RAW(0xff), b) == 1 && b[0] == 0xff);
}

/* Pieces of text joined by '|' (the expected split). */
static void check_split(const char *text, const char *want) {
    data_tok_ids lens = {0};
    CHECK_OK(data_tok_pretokenize(text, strlen(text), &lens));
    char got[512];
    size_t w = 0, off = 0;
    for (size_t i = 0; i < lens.n; i++) {
        if (i) got[w++] = '|';
        memcpy(got + w, text + off, (size_t)lens.ids[i]);
        w += (size_t)lens.ids[i], off += (size_t)lens.ids[i];
    }
    got[w] = 0;
    if (strcmp(got, want))
        fprintf(stderr, "split of \"%s\":\n  got  %s\n  want %s\n", text, got, want);
    CHECK(!strcmp(got, want));
    data_tok_ids_free(&lens);
}

static void test_pretokenize(void) {
    check_split("Hello world", "Hello| world");
    check_split("it's we're I'LL don't", "it|'s| we|'re| I|'|LL| don|'t");
    check_split("'sup", "'s|up");
    check_split("a  b", "a| | b"); /* \s+(?!\S) leaves one space for ' ?\p{L}+' */
    check_split("a   b", "a|  | b");
    check_split("a\n\nb", "a|\n|\n|b"); /* only ' ' is optional before a word */
    check_split("end  ", "end|  ");     /* trailing white space is one piece */
    check_split("x 123 4.5", "x| 123| 4|.|5");
    check_split("hi!!! ?!", "hi|!!!| ?!");
    check_split("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac", "caf\xc3\xa9| \xe6\x97\xa5\xe6\x9c\xac");
    check_split("e\xcc\x81t\xc3\xa9", "e|\xcc\x81|t\xc3\xa9"); /* combining mark is not \p{L} */
    check_split("\xf0\x9f\x8e\x89\xf0\x9f\x8e\x89 ok", "\xf0\x9f\x8e\x89\xf0\x9f\x8e\x89| ok");
    check_split("\xe2\x85\xa7x", "\xe2\x85\xa7|x"); /* Ⅷ is \p{N} */
    check_split(" \t x", " \t| x");
    check_split("", "");
}

/* A tiny byte-level BPE model in a tokenizer.json: bytes a b c, ' ' (Ġ),
 * merges "a b" (rank 0), "ab c" (1), "Ġ a" (2), and an added token. */
static const char *TINY_HF =
    "{\"version\":\"1.0\",\"normalizer\":null,"
    "\"added_tokens\":[{\"id\":9,\"content\":\"<|endoftext|>\",\"special\":true}],"
    "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
    "\"decoder\":{\"type\":\"ByteLevel\"},"
    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"\\u0120\":3,\"ab\":4,"
    "\"abc\":5,\"\\u0120a\":6,\"!\":7,\"bc\":8},"
    "\"merges\":[\"a b\",\"ab c\",[\"\\u0120\",\"a\"],\"b c\"]}}";

static data_tok *open_hf_text(const char *json, const char *path, mtc_result_t *rc) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    fputs(json, f);
    fclose(f);
    data_tok_opts o = {.type = "HuggingFaceTokenizer", .tokenizer_model = path};
    data_tok *t = NULL;
    *rc = data_tok_open(&o, &t);
    return t;
}

static void check_ids(data_tok *t, const char *text, const int *want, size_t n) {
    data_tok_ids ids = {0};
    data_tok_cache *cache = data_tok_cache_init();
    for (int pass = 0; pass < 2; pass++) { /* second pass: from the word cache */
        ids.n = 0;
        CHECK_OK(data_tok_encode(t, cache, text, strlen(text), &ids, NULL));
        if (ids.n != n || memcmp(ids.ids, want, n * sizeof(int))) {
            fprintf(stderr, "\"%s\": got", text);
            for (size_t i = 0; i < ids.n; i++)
                fprintf(stderr, " %d", ids.ids[i]);
            fprintf(stderr, "\n");
        }
        CHECK(ids.n == n && !memcmp(ids.ids, want, n * sizeof(int)));
    }
    data_tok_text back = {0};
    CHECK_OK(data_tok_decode(t, ids.ids, ids.n, &back, NULL));
    CHECK(back.n == strlen(text) && !memcmp(back.s, text, back.n));
    data_tok_text_free(&back);
    data_tok_ids_free(&ids);
    data_tok_cache_free(cache);
}

static void test_bpe_tiny(void) {
    mtc_result_t rc;
    data_tok *t = open_hf_text(TINY_HF, P("mtc_test_tok_tiny.json"), &rc);
    CHECK_OK(rc);
    CHECK(data_tok_vocab_size(t) == 10 && data_tok_eod(t) == 9);
    /* "abc": a b -> ab (rank 0) before b c (rank 3), then ab c -> abc */
    check_ids(t, "abc", (const int[]){5}, 1);
    /* "bca": no "c a" merge; b c -> bc */
    check_ids(t, "bca", (const int[]){8, 0}, 2);
    /* " ab": pieces " ab"; Ġ a (rank 2) loses to a b (rank 0): Ġ + ab */
    check_ids(t, " ab", (const int[]){3, 4}, 2);
    check_ids(t, " a!", (const int[]){6, 7}, 2);
    check_ids(t, "a<|endoftext|>b", (const int[]){0, 9, 1}, 3);
    /* decode skips ids outside the vocabulary and counts them */
    data_tok_text out = {0};
    size_t unknown = 0;
    CHECK_OK(data_tok_decode(t, (const int[]){5, 12, -1, 7}, 4, &out, &unknown));
    CHECK(unknown == 2 && !strcmp(out.s, "abc!"));
    data_tok_text_free(&out);
    /* a byte the vocabulary lacks cannot be encoded */
    data_tok_ids ids = {0};
    CHECK(data_tok_encode(t, NULL, "z", 1, &ids, NULL) == MTC_ERR_FORMAT);
    data_tok_ids_free(&ids);
    data_tok_text form = {0};
    CHECK_OK(data_tok_serialize(t, &form));
    char want_form[200];
    snprintf(want_form, sizeof want_form, "HuggingFaceTokenizer:%s", P("mtc_test_tok_tiny.json"));
    CHECK(!strcmp(form.s, want_form));
    data_tok *t2 = NULL;
    CHECK_OK(data_tok_deserialize(form.s, &t2));
    check_ids(t2, "abc", (const int[]){5}, 1);
    data_tok_free(t2);
    data_tok_text_free(&form);
    data_tok_free(t);

    /* refused: not BPE, normalizer, not ByteLevel; nothing is approximated */
    const char *bad[] = {
        "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}",
        "{\"normalizer\":{\"type\":\"NFC\"},\"pre_tokenizer\":{\"type\":\"ByteLevel\"},"
        "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
        "{\"pre_tokenizer\":{\"type\":\"Metaspace\"},"
        "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
        "not json",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        t = open_hf_text(bad[i], P("mtc_test_tok_bad.json"), &rc);
        CHECK(rc == MTC_ERR_FORMAT && t == NULL);
        CHECK(strstr(mtc_error_detail(), P("mtc_test_tok_bad.json")) != NULL);
    }
    remove(P("mtc_test_tok_tiny.json"));
    remove(P("mtc_test_tok_bad.json"));

    /* TemplateProcessing adds its special tokens around every encode (Megatron's
     * text_to_ids does); eod is tokenizer_config.json's eos_token */
    const char *templ =
        "{\"added_tokens\":[{\"id\":10,\"content\":\"<s>\"},{\"id\":11,\"content\":\"</s>\"}],"
        "\"pre_tokenizer\":{\"type\":\"ByteLevel\"},"
        "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":"
        "{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],"
        "\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[10],\"tokens\":[\"<s>\"]}}},"
        "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"ab\":4,\"abc\":5},"
        "\"merges\":[\"a b\",\"ab c\"]}}";
    FILE *cfg = fopen(P("tokenizer_config.json"), "wb");
    CHECK(cfg != NULL);
    fputs("{\"eos_token\": {\"content\": \"</s>\"}}", cfg);
    fclose(cfg);
    t = open_hf_text(templ, P("mtc_test_tok_templ.json"), &rc);
    CHECK_OK(rc);
    CHECK(data_tok_eod(t) == 11 && data_tok_vocab_size(t) == 12);
    data_tok_ids tids = {0};
    CHECK_OK(data_tok_encode(t, NULL, "abc", 3, &tids, NULL));
    CHECK(tids.n == 2 && tids.ids[0] == 10 && tids.ids[1] == 5);
    data_tok_ids_free(&tids);
    data_tok_free(t);
    remove(P("tokenizer_config.json"));
    remove(P("mtc_test_tok_templ.json"));
    t = open_hf_text("{\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"post_processor\":{\"type\":"
                     "\"RobertaProcessing\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},"
                     "\"merges\":[]}}",
                     P("mtc_test_tok_bad.json"), &rc);
    CHECK(rc == MTC_ERR_FORMAT && strstr(mtc_error_detail(), "RobertaProcessing") != NULL);
    remove(P("mtc_test_tok_bad.json"));
    /* an added token may repeat a vocabulary entry with its id, not take another's */
    const char *dup_ok = "{\"added_tokens\":[{\"id\":1,\"content\":\"b\"}],"
                         "\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
                         "\"vocab\":{\"a\":0,\"b\":1},\"merges\":[]}}";
    t = open_hf_text(dup_ok, P("mtc_test_tok_bad.json"), &rc);
    CHECK_OK(rc);
    data_tok_free(t);
    const char *collide[] = {
        "{\"added_tokens\":[{\"id\":1,\"content\":\"<pad>\"}],"
        "\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
        "\"vocab\":{\"a\":0,\"b\":1},\"merges\":[]}}",
        "{\"added_tokens\":[{\"id\":2,\"content\":\"<s>\"},{\"id\":2,\"content\":\"<pad>\"}],"
        "\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
        "\"vocab\":{\"a\":0,\"b\":1},\"merges\":[]}}"};
    for (int i = 0; i < 2; i++) {
        t = open_hf_text(collide[i], P("mtc_test_tok_bad.json"), &rc);
        CHECK(rc == MTC_ERR_FORMAT && t == NULL);
        CHECK(strstr(mtc_error_detail(), "<pad>\" has id") != NULL &&
              strstr(mtc_error_detail(), i ? "gives to \"<s>\"" : "gives to \"b\"") != NULL);
    }
    remove(P("mtc_test_tok_bad.json"));
    data_tok_opts o = {.type = "HuggingFaceTokenizer", .tokenizer_model = "/nonexistent.json"};
    CHECK(data_tok_open(&o, &t) == MTC_ERR_IO);
    o = (data_tok_opts){.type = "GPT2BPETokenizer", .vocab_file = "v.json"};
    CHECK(data_tok_open(&o, &t) == MTC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(mtc_error_detail(), "--merge-file") != NULL);
    o = (data_tok_opts){.type = "SentencePieceTokenizer"};
    CHECK(data_tok_open(&o, &t) == MTC_ERR_INVALID_ARGUMENT);
}

static void test_char_utf8(void) {
    /* accents, CJK, emoji, a combining mark, and one invalid byte (0xff) */
    const char *text = "h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x8e\x89 e\xcc\x81 \xff!";
    size_t n = strlen(text);
    data_tok *t = NULL;
    CHECK_OK(data_tok_init_char(text, n, &t));
    /* distinct: h é l o ' ' 日 本 🎉 e U+0301 0xff ! = 12 */
    CHECK(data_tok_vocab_size(t) == 12 && data_tok_eod(t) == -1);
    data_tok_ids ids = {0};
    size_t unknown = 0;
    CHECK_OK(data_tok_encode(t, NULL, text, n, &ids, &unknown));
    CHECK(unknown == 0 && ids.n == 16); /* code points, not bytes */
    CHECK(ids.ids[0] == 3);             /* sorted: ' ' ! e h l o U+0301 é ... */
    data_tok_text back = {0};
    CHECK_OK(data_tok_decode(t, ids.ids, ids.n, &back, NULL));
    CHECK(back.n == n && !memcmp(back.s, text, n));
    /* one id at a time gives whole characters (generate prints them) */
    data_tok_text one = {0};
    CHECK_OK(data_tok_decode(t, &ids.ids[6], 1, &one, NULL));
    CHECK(!strcmp(one.s, "\xe6\x97\xa5"));
    data_tok_text_free(&one);
    /* text form round-trips; an unseen character is id 0 and counted */
    data_tok_text form = {0};
    CHECK_OK(data_tok_serialize(t, &form));
    CHECK(!strncmp(form.s, "char-utf8:20,21,65,68,", 22));
    CHECK(strstr(form.s, ",1100ff") != NULL);
    data_tok *t2 = NULL;
    CHECK_OK(data_tok_deserialize(form.s, &t2));
    data_tok_ids ids2 = {0};
    CHECK_OK(data_tok_encode(t2, NULL, text, n, &ids2, NULL));
    CHECK(ids2.n == ids.n && !memcmp(ids2.ids, ids.ids, ids.n * sizeof(int)));
    ids2.n = 0, unknown = 0;
    CHECK_OK(data_tok_encode(t2, NULL, "hzh", 3, &ids2, &unknown));
    CHECK(unknown == 1 && ids2.n == 3 && ids2.ids[1] == 0);
    data_tok_ids_free(&ids2);
    data_tok_free(t2);
    data_tok_text_free(&form);
    data_tok_text_free(&back);
    data_tok_ids_free(&ids);
    data_tok_free(t);

    /* the older byte-wise form (checkpoints saved before) still reads, byte-wise */
    CHECK_OK(data_tok_deserialize("char:0a6162", &t));
    CHECK(data_tok_vocab_size(t) == 3);
    CHECK_OK(data_tok_encode(t, NULL, "ba\n", 3, &ids, NULL));
    CHECK(ids.n == 3 && ids.ids[0] == 2 && ids.ids[1] == 1 && ids.ids[2] == 0);
    data_tok_text f2 = {0};
    CHECK_OK(data_tok_serialize(t, &f2));
    CHECK(!strcmp(f2.s, "char:0a6162"));
    data_tok_text_free(&f2);
    data_tok_ids_free(&ids);
    data_tok_free(t);
    CHECK(data_tok_deserialize("char:6261", &t) == MTC_ERR_FORMAT); /* not ascending */
    CHECK(data_tok_deserialize("char-utf8:zz", &t) == MTC_ERR_FORMAT);
}

static void test_null(void) {
    data_tok_opts o = {.type = "NullTokenizer", .vocab_size = 100};
    data_tok *t = NULL;
    CHECK_OK(data_tok_open(&o, &t));
    CHECK(data_tok_vocab_size(t) == 100 && data_tok_eod(t) == 99); /* Megatron core 0.18 */
    data_tok_ids ids = {0};
    CHECK_OK(data_tok_encode(t, NULL, " 5 17\n99 0 ", 11, &ids, NULL));
    CHECK(ids.n == 4 && ids.ids[0] == 5 && ids.ids[1] == 17 && ids.ids[2] == 99 && ids.ids[3] == 0);
    data_tok_text out = {0};
    CHECK_OK(data_tok_decode(t, ids.ids, ids.n, &out, NULL));
    CHECK(!strcmp(out.s, "5 17 99 0"));
    data_tok_text_free(&out);
    CHECK(data_tok_encode(t, NULL, "5 100", 5, &ids, NULL) == MTC_ERR_INVALID_ARGUMENT);
    CHECK(data_tok_encode(t, NULL, "5 x", 3, &ids, NULL) == MTC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(mtc_error_detail(), "\"x\"") != NULL);
    data_tok_ids_free(&ids);
    data_tok_free(t);
    o.vocab_size = 0;
    CHECK(data_tok_open(&o, &t) == MTC_ERR_INVALID_ARGUMENT);
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    CHECK(fread(b, 1, *n, f) == *n);
    fclose(f);
    return b;
}

static uint64_t u64_at(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Documents: [2 sequences: 3 + 2 ids], [empty], [1 sequence: 1 id]. Megatron:
 * sequence_lengths 3 2 1, pointers 0 6 10 (uint16), document_indices 0 2 2 3. */
static void test_builder(void) {
    char prefix[160];
    snprintf(prefix, sizeof prefix, "%s", P("mtc_test_builder"));
    CHECK(data_indexed_dtype_for_vocab(50257) == 8 && data_indexed_dtype_for_vocab(65500) == 4);
    data_indexed_builder *b = NULL;
    CHECK_OK(data_indexed_builder_init(prefix, 8, &b));
    CHECK_OK(data_indexed_builder_add_document(b, (const int[]){1, 2, 3, 4, 65535},
                                               (const int[]){3, 2}, 2));
    CHECK_OK(data_indexed_builder_add_document(b, NULL, NULL, 0));
    CHECK_OK(data_indexed_builder_add_document(b, (const int[]){7}, (const int[]){1}, 1));
    CHECK(data_indexed_builder_add_document(b, (const int[]){65536}, (const int[]){1}, 1) ==
          MTC_ERR_INVALID_ARGUMENT);
    CHECK_OK(data_indexed_builder_finish(b));
    data_indexed_builder_free(b);
    size_t ni, nb;
    unsigned char *idx = slurp(P("mtc_test_builder.idx"), &ni);
    unsigned char *bin = slurp(P("mtc_test_builder.bin"), &nb);
    CHECK(nb == 12 && bin[0] == 1 && bin[1] == 0 && bin[8] == 0xff && bin[9] == 0xff &&
          bin[10] == 7);
    CHECK(ni == 34 + 3 * 4 + 3 * 8 + 4 * 8);
    CHECK(!memcmp(idx, "MMIDIDX\0\0", 9) && u64_at(idx + 9) == 1 && idx[17] == 8);
    CHECK(u64_at(idx + 18) == 3 && u64_at(idx + 26) == 4);
    CHECK(idx[34] == 3 && idx[38] == 2 && idx[42] == 1);
    CHECK(u64_at(idx + 46) == 0 && u64_at(idx + 54) == 6 && u64_at(idx + 62) == 10);
    CHECK(u64_at(idx + 70) == 0 && u64_at(idx + 78) == 2 && u64_at(idx + 86) == 2 &&
          u64_at(idx + 94) == 3);
    free(idx), free(bin);
    /* mtc's own reader accepts it */
    data_source_opts so = {.data_path = prefix, .seq_length = 2, .split = "1,0,0"};
    data_source *src = NULL;
    CHECK_OK(data_source_open(&so, &src));
    CHECK(data_source_num_tokens(src) == 6);
    data_source_free(src);
    /* without finish nothing is left behind */
    CHECK_OK(data_indexed_builder_init(P("mtc_test_builder2"), 4, &b));
    data_indexed_builder_free(b);
    FILE *f = fopen(P("mtc_test_builder2.bin.tmp"), "rb");
    CHECK(f == NULL);
    FILE *g = fopen(P("mtc_test_builder2.bin"), "rb");
    CHECK(g == NULL);
    remove(P("mtc_test_builder.idx"));
    remove(P("mtc_test_builder.bin"));
}

int main(void) {
    if (!mkdtemp(dir_)) {
        perror("mkdtemp");
        return 1;
    }
    test_unicode_classes();
    test_pretokenize();
    test_bpe_tiny();
    test_char_utf8();
    test_null();
    test_builder();
    rmdir(dir_);
    return T_DONE();
}
