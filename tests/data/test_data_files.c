/* tests/data/test_data_files.c - readers of every data format, and their
 * refusal of broken files.
 *
 * Fixtures are written at run time into a mkdtemp folder: Megatron .bin/.idx
 * (by data_indexed_write, and one laid out by hand from the format table in
 * conventions.md 2.3 to check the writer), llm.c shards (written here from
 * conventions.md 2.4), text folders. Stream tokens are a formula of their
 * position, so reading back is checked in closed form; each corruption is
 * one edit at an offset of the format table. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data.h"
#include "test.h"

static char dir[64];

static void put_file(const char *name, const void *b, size_t n) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(b, 1, n, f) != n) {
        perror(p);
        exit(2);
    }
    fclose(f);
}
static unsigned char *get_file(const char *name, size_t *n) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "rb");
    if (!f) {
        perror(p);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    if (fread(b, 1, *n, f) != *n) exit(2);
    fclose(f);
    return b;
}
static void le(unsigned char *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static data_source *open_src(const char *path, int T, int vocab, const char *split,
                             mtc_result_t *rc) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, path);
    data_source_opts o = {.data_path = p,
                          .seq_length = T,
                          .vocab_size = vocab,
                          .seed = 7,
                          .split = split ? split : "1,0,0"};
    data_source *s = NULL;
    *rc = data_source_open(&o, &s);
    return s;
}

/* The source must be refused with `want` and a message naming `file`. */
static void expect_refused(const char *what, const char *path, int vocab, mtc_result_t want,
                           const char *file, const char *word) {
    mtc_result_t rc;
    data_source *s = open_src(path, 4, vocab, NULL, &rc);
    const char *msg = mtc_error_detail();
    T_CHECKF(rc == want && s == NULL, "%s: rc %s, want %s (%s)", what, mtc_result_name(rc),
             mtc_result_name(want), msg);
    T_CHECKF(strstr(msg, file) != NULL, "%s: message does not name %s: %s", what, file, msg);
    if (word) T_CHECKF(strstr(msg, word) != NULL, "%s: message lacks \"%s\": %s", what, word, msg);
    if (getenv("MTC_TEST_VERBOSE")) printf("  %-26s -> %s\n", what, msg);
    data_source_free(s);
}

/* Reads every window of the train split (split "1,0,0") over one epoch and
 * checks it is stream[w*T .. w*T+T] of want(position) for a distinct w. */
static void check_all_windows(data_source *s, int T, int (*want)(uint64_t), const char *what) {
    uint64_t n = data_source_split_size(s, DATA_SPLIT_TRAIN);
    T_CHECKF(n == (data_source_num_tokens(s) - 1) / (uint64_t)T, "%s: %llu windows", what,
             (unsigned long long)n);
    char *seen = calloc(n + 1, 1);
    int *tok = malloc(sizeof(int) * (size_t)(T + 1));
    int bad = 0;
    for (uint64_t i = 0; i < n; i++) {
        T_CHECK(data_source_sample(s, DATA_SPLIT_TRAIN, i, tok) == MTC_OK);
        uint64_t w = n;
        for (uint64_t c = 0; c < n && w == n; c++) { /* which window is it? */
            int ok = 1;
            for (int k = 0; k <= T && ok; k++)
                ok = tok[k] == want(c * (uint64_t)T + (uint64_t)k);
            if (ok && !seen[c]) w = c;
        }
        if (w == n)
            bad++;
        else
            seen[w] = 1;
    }
    T_CHECKF(bad == 0, "%s: %d samples are not distinct windows of the written stream", what, bad);
    free(seen);
    free(tok);
}

static int f_idx(uint64_t p) { return (int)((p * 37 + 11) % 50000); }

/* A Megatron dataset's samples follow GPTDataset (split "1,0,0", one epoch):
 * (tokens - 1) / T samples, each T + 1 tokens that run on within one
 * sequence or jump from a sequence's last token to another's first (the
 * shuffled document order; the exact order is tests/data/test_gpt_order.c's
 * business). want(p) must be one-to-one over the stream. */
static void check_gpt_samples(data_source *s, int T, int (*want)(uint64_t), const int *lens,
                              int n_seq, const char *what) {
    uint64_t n = data_source_split_size(s, DATA_SPLIT_TRAIN), ntok = data_source_num_tokens(s);
    T_CHECKF(n == (ntok - 1) / (uint64_t)T, "%s: %llu samples", what, (unsigned long long)n);
    int *tok = malloc(sizeof(int) * (size_t)(T + 1)), bad = 0;
    char *first = calloc(ntok + 1, 1), *last = calloc(ntok + 1, 1);
    uint64_t at = 0;
    for (int q = 0; q < n_seq; q++) {
        if (lens[q]) first[at] = 1, last[at + (uint64_t)lens[q] - 1] = 1;
        at += (uint64_t)lens[q];
    }
    for (uint64_t i = 0; i < n; i++) {
        T_CHECK(data_source_sample(s, DATA_SPLIT_TRAIN, i, tok) == MTC_OK);
        uint64_t p = ntok;
        for (uint64_t c = 0; c < ntok && p == ntok; c++)
            if (want(c) == tok[0]) p = c;
        for (int k = 1; k <= T && p < ntok; k++) {
            uint64_t q = ntok;
            if (!last[p] && p + 1 < ntok && want(p + 1) == tok[k]) q = p + 1;
            for (uint64_t c = 0; c < ntok && q == ntok && last[p]; c++)
                if (first[c] && want(c) == tok[k]) q = c;
            p = q;
        }
        bad += p == ntok;
    }
    T_CHECKF(bad == 0, "%s: %d samples are not runs of the written sequences", what, bad);
    free(tok), free(first), free(last);
}
static int f_u8(uint64_t p) { return (int)((p * 13 + 5) % 256); }
static int f_big(uint64_t p) { return (int)(70000 + p * 3); }

static void test_indexed(void) {
    int lens[] = {5, 0, 17, 3, 40, 1}; /* 66 tokens: (66-1) % 5 == 0 */
    int tokens[66];
    for (int i = 0; i < 66; i++)
        tokens[i] = f_idx((uint64_t)i);
    char prefix[128];
    snprintf(prefix, sizeof prefix, "%s/ds", dir);
    T_CHECK(data_indexed_write(prefix, tokens, lens, 6, 0) == MTC_OK);

    /* the writer's .idx byte for byte against the layout table */
    size_t n_idx, n_bin;
    unsigned char *idx = get_file("ds.idx", &n_idx), *bin = get_file("ds.bin", &n_bin);
    unsigned char want[34 + 12 * 6 + 8 * 7] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
    le(want + 9, 1, 8);
    want[17] = 8; /* uint16: vocabulary < 65500 */
    le(want + 18, 6, 8);
    le(want + 26, 7, 8);
    uint64_t off = 0;
    for (int s = 0; s < 6; s++) {
        le(want + 34 + 4 * s, (uint64_t)lens[s], 4);
        le(want + 34 + 24 + 8 * s, off, 8);
        off += 2 * (uint64_t)lens[s];
    }
    for (int d = 0; d <= 6; d++)
        le(want + 34 + 72 + 8 * d, (uint64_t)d, 8);
    T_CHECK(n_idx == sizeof want && memcmp(idx, want, sizeof want) == 0);
    T_CHECK(n_bin == 132);
    int bin_ok = n_bin == 132;
    for (int i = 0; i < 66 && bin_ok; i++)
        bin_ok = bin[2 * i] + 256 * bin[2 * i + 1] == tokens[i];
    T_CHECK(bin_ok);

    /* read back through the prefix, the .bin and the .idx path */
    const char *names[] = {"ds", "ds.bin", "ds.idx"};
    for (int k = 0; k < 3; k++) {
        mtc_result_t rc;
        data_source *s = open_src(names[k], 5, 0, NULL, &rc);
        T_CHECKF(rc == MTC_OK, "%s: %s", names[k], mtc_error_detail());
        if (!s) continue;
        T_CHECK(data_source_num_tokens(s) == 66);
        int maxv = 0;
        for (int i = 0; i < 66; i++)
            maxv = tokens[i] > maxv ? tokens[i] : maxv;
        T_CHECK(data_source_vocab_size(s) == maxv + 1);
        T_CHECK(data_source_tokenizer(s) == NULL);
        check_gpt_samples(s, 5, f_idx, lens, 6, names[k]);
        data_source_free(s);
    }

    /* other dtypes: uint8 and int32 (ids above 65535) */
    int t8[41], tb[41], l1[] = {41};
    for (int i = 0; i < 41; i++)
        t8[i] = f_u8((uint64_t)i), tb[i] = f_big((uint64_t)i);
    snprintf(prefix, sizeof prefix, "%s/u8", dir);
    T_CHECK(data_indexed_write(prefix, t8, l1, 1, 1) == MTC_OK);
    snprintf(prefix, sizeof prefix, "%s/big", dir);
    T_CHECK(data_indexed_write(prefix, tb, l1, 1, 0) == MTC_OK); /* picks int32 */
    size_t nb;
    free(get_file("big.bin", &nb));
    T_CHECK(nb == 41 * 4);
    T_CHECK(data_indexed_write(prefix, tb, l1, 1, 8) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(data_indexed_write(prefix, tb, l1, 1, 6) == MTC_ERR_INVALID_ARGUMENT);
    mtc_result_t rc;
    data_source *s = open_src("u8", 4, 256, NULL, &rc);
    T_CHECK(rc == MTC_OK);
    if (s) check_all_windows(s, 4, f_u8, "uint8"), data_source_free(s);
    s = open_src("big", 8, 0, NULL, &rc);
    T_CHECK(rc == MTC_OK);
    if (s) check_all_windows(s, 8, f_big, "int32"), data_source_free(s);

    /* corruptions: each applied to a fresh copy */
    struct {
        const char *what;
        size_t at;
        int nbytes;
        uint64_t v;
        long cut;
        const char *file, *word;
    } cases[] = {
        {"truncated .idx", 0, 0, 0, -5, "bad.idx", "truncated"},
        {"idx shorter than header", 0, 0, 0, -(long)(sizeof want - 20), "bad.idx", "truncated"},
        {"bad magic", 0, 1, 'X', 0, "bad.idx", "magic"},
        {"bad version", 9, 8, 2, 0, "bad.idx", "version"},
        {"unknown dtype", 17, 1, 9, 0, "bad.idx", "dtype"},
        {"float dtype", 17, 1, 6, 0, "bad.idx", "dtype"},
        {"dtype size vs .bin", 17, 1, 4, 0, "bad.", NULL},
        {"huge sequence count", 18, 8, 1000, 0, "bad.idx", "truncated"},
        {"document count 0", 26, 8, 0, 0, "bad.idx", NULL},
        {"pointer inconsistent", 34 + 24 + 8 * 2, 8, 12, 0, "bad.idx", "pointer"},
        {"negative length", 34 + 4 * 3, 4, 0xffffffffu, 0, "bad.idx", "negative"},
        {"doc index not monotone", 34 + 72 + 8 * 3, 8, 1, 0, "bad.idx", "document_indices"},
        {"doc index end", 34 + 72 + 8 * 6, 8, 5, 0, "bad.idx", "document_indices"},
        {"doc index start", 34 + 72, 8, 1, 0, "bad.idx", "document_indices"},
        {"truncated .bin", 0, 0, 0, 0, "bad.bin", "truncated"},
        {"idx trailing bytes", 0, 0, 0, 3, "bad.idx", "size"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        unsigned char *ci = malloc(sizeof want + 8);
        memcpy(ci, want, sizeof want);
        memset(ci + sizeof want, 0, 8);
        size_t ni = sizeof want, nbn = n_bin;
        if (cases[c].nbytes) le(ci + cases[c].at, cases[c].v, cases[c].nbytes);
        ni = (size_t)((long)ni + cases[c].cut);
        if (!strcmp(cases[c].file, "bad.bin")) nbn -= 3;
        put_file("bad.idx", ci, ni);
        put_file("bad.bin", bin, nbn);
        expect_refused(cases[c].what, "bad", 0, MTC_ERR_FORMAT, cases[c].file, cases[c].word);
        free(ci);
    }
    /* ids beyond a declared vocabulary; the .bin of a prefix missing */
    expect_refused("id >= vocab", "ds", 1000, MTC_ERR_FORMAT, "ds.bin", "vocab");
    put_file("lonely.idx", want, sizeof want);
    expect_refused("missing .bin", "lonely", 0, MTC_ERR_IO, "lonely.bin", NULL);
    free(idx);
    free(bin);
}

/* llm.c shard written from the spec: 256 int32 header, then tokens. */
static void put_shard(const char *name, int magic, int version, int ntok_header, const int *tok,
                      int n, int item, int extra) {
    size_t sz = 1024 + (size_t)n * (size_t)item + (size_t)extra;
    unsigned char *b = calloc(1, sz + 1);
    le(b, (uint32_t)magic, 4);
    le(b + 4, (uint32_t)version, 4);
    le(b + 8, (uint32_t)ntok_header, 4);
    for (int i = 0; i < n; i++)
        le(b + 1024 + (size_t)i * (size_t)item, (uint64_t)tok[i], item);
    put_file(name, b, sz);
    free(b);
}

static int f_shards(uint64_t p) { return p < 30 ? (int)(p * 1000 % 50257) : (int)(100000 + p); }

static void test_llmc(void) {
    int a[30], b[31];
    for (int i = 0; i < 30; i++)
        a[i] = f_shards((uint64_t)i);
    for (int i = 0; i < 31; i++)
        b[i] = f_shards(30 + (uint64_t)i);
    mkdir(strcat(strcpy((char[128]){0}, dir), "/sh"), 0700);
    /* written in reverse order: the glob must sort them */
    put_shard("sh/train_001.bin", 20240801, 7, 31, b, 31, 4, 0);
    put_shard("sh/train_000.bin", 20240520, 1, 30, a, 30, 2, 0);
    mtc_result_t rc;
    data_source *s = open_src("sh/train_*.bin", 6, 0, NULL, &rc);
    T_CHECKF(rc == MTC_OK, "glob: %s", mtc_error_detail());
    if (s) {
        T_CHECK(data_source_num_tokens(s) == 61);
        check_all_windows(s, 6, f_shards, "llm.c glob");
        data_source_free(s);
    }
    s = open_src("sh/train_000.bin", 29, 50257, NULL, &rc);
    T_CHECKF(rc == MTC_OK, "one shard: %s", mtc_error_detail());
    if (s) check_all_windows(s, 29, f_shards, "llm.c one"), data_source_free(s);

    put_shard("bad.bin", 20240520, 1, 30, a, 30, 2, 2);
    expect_refused("llm.c too long", "bad.bin", 0, MTC_ERR_FORMAT, "bad.bin", "size");
    put_shard("bad.bin", 20240520, 1, 30, a, 29, 2, 0);
    expect_refused("llm.c truncated", "bad.bin", 0, MTC_ERR_FORMAT, "bad.bin", "truncated");
    put_shard("bad.bin", 20240520, 7, 30, a, 30, 2, 0);
    expect_refused("llm.c bad version", "bad.bin", 0, MTC_ERR_FORMAT, "bad.bin", "version");
    put_shard("bad.bin", 20240801, 7, 30, a, 30, 2, 0); /* uint32 header, uint16 payload */
    expect_refused("llm.c wrong itemsize", "bad.bin", 0, MTC_ERR_FORMAT, "bad.bin", NULL);
    put_shard("bad.bin", 20240521, 1, 30, a, 30, 2, 0);
    remove(strcat(strcpy((char[128]){0}, dir), "/bad.idx"));
    expect_refused("llm.c bad magic", "bad.bin", 0, MTC_ERR_FORMAT, "bad.bin", "magic");
    unsigned char magic[4];
    le(magic, 20240520, 4);
    put_file("bad.bin", magic, 4); /* the GPT-2 magic, then nothing */
    expect_refused("llm.c header cut", "bad.bin", 0, MTC_ERR_FORMAT, "bad.bin", "truncated");
    expect_refused("llm.c id >= vocab", "sh/train_*.bin", 50257, MTC_ERR_FORMAT, "train_001.bin",
                   "100060");
    expect_refused("glob matches nothing", "sh/none_*.bin", 0, MTC_ERR_INVALID_ARGUMENT, "none_",
                   NULL);
    expect_refused("no such path", "nothing/here", 0, MTC_ERR_INVALID_ARGUMENT, "nothing/here",
                   NULL);
    s = open_src("sh/train_000.bin", 30, 0, NULL, &rc); /* 30 tokens < T + 1 */
    T_CHECKF(rc == MTC_ERR_INVALID_ARGUMENT && !s, "too little data: %s", mtc_result_name(rc));
    data_source_free(s);
}

static const char *text_ab = "hello world";
static int f_text(uint64_t p) { /* char ids of "hello world": sorted " dehlorw" */
    return (int)(strchr(" dehlorw", text_ab[p]) - " dehlorw");
}

/* tools/txt_to_indexed.py on the text folder gives the same tokens and a
 * tokenizer sidecar with the same vocabulary. */
static void test_converter(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "python3 tools/txt_to_indexed.py --input %s/txt --output-prefix "
             "%s/conv >/dev/null",
             dir, dir);
    if (system("python3 -c pass 2>/dev/null") != 0 || access("tools/txt_to_indexed.py", R_OK)) {
        printf("skip: python3 or tools/txt_to_indexed.py not available\n");
        return;
    }
    T_CHECK(system(cmd) == 0);
    mtc_result_t rc1, rc2;
    data_source *a = open_src("txt", 2, 0, "1,1", &rc1), *b = open_src("conv", 2, 0, "1,1", &rc2);
    T_CHECKF(rc1 == MTC_OK && rc2 == MTC_OK, "converted: %s", mtc_error_detail());
    if (a && b) {
        const data_tok *ta = data_source_tokenizer(a), *tb = data_source_tokenizer(b);
        T_CHECK(tb && ta && data_tok_vocab_size(tb) == data_tok_vocab_size(ta));
        for (int id = 0; ta && tb && id < data_tok_vocab_size(ta); id++) {
            data_tok_text x = {0}, y = {0};
            T_CHECK(data_tok_decode(ta, &id, 1, &x, NULL) == MTC_OK &&
                    data_tok_decode(tb, &id, 1, &y, NULL) == MTC_OK && x.n == y.n &&
                    !memcmp(x.s, y.s, x.n));
            data_tok_text_free(&x), data_tok_text_free(&y);
        }
        T_CHECK(data_source_num_tokens(a) == data_source_num_tokens(b));
        T_CHECK(data_source_vocab_size(a) == data_source_vocab_size(b));
        /* (the samples differ: text is cut into windows, a Megatron dataset
           follows GPTDataset's shuffled documents) */
    }
    data_source_free(a);
    data_source_free(b);
    put_file("conv.tokenizer", "char:2064", 9); /* 2 symbols, ids up to 7 in the data */
    expect_refused("ids beyond .tokenizer", "conv", 0, MTC_ERR_FORMAT, "conv.bin", "tokenizer");
    put_file("conv.tokenizer", "char:zz", 7);
    expect_refused("bad .tokenizer", "conv", 0, MTC_ERR_FORMAT, "conv.tokenizer", NULL);
}

static void test_text(void) {
    char p[256], q[256];
    snprintf(p, sizeof p, "%s/txt", dir);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/txt/sub", dir);
    mkdir(p, 0700);
    put_file("txt/a.txt", "hello", 5);
    put_file("txt/sub/b.txt", " world", 6);
    put_file("txt/c.dat", "\0\0\0\2zzz", 7); /* strfile index: skipped */
    put_file("txt/.hidden", "QQ", 2);        /* hidden: skipped */
    snprintf(p, sizeof p, "%s/txt/d.txt", dir);
    T_CHECK(symlink("a.txt", p) == 0); /* the same file again: skipped */
    mtc_result_t rc;
    data_source *s = open_src("txt", 10, 0, NULL, &rc);
    T_CHECKF(rc == MTC_OK, "text folder: %s", mtc_error_detail());
    if (s) {
        const data_tok *tok = data_source_tokenizer(s);
        T_CHECK(tok && data_tok_kind_of(tok) == DATA_TOK_CHAR && data_tok_vocab_size(tok) == 8);
        T_CHECK(data_source_vocab_size(s) == 8 && data_source_num_tokens(s) == 11);
        check_all_windows(s, 10, f_text, "text");
        int ids[11];
        data_tok_text out = {0};
        T_CHECK(data_source_sample(s, DATA_SPLIT_TRAIN, 0, ids) == MTC_OK);
        T_CHECK(tok && data_tok_decode(tok, ids, 11, &out, NULL) == MTC_OK &&
                !strcmp(out.s, "hello world"));
        data_tok_text_free(&out);
        data_source_free(s);
    }
    data_source_opts o = {.data_path = q, .seq_length = 3, .tokenizer = "byte", .split = "1"};
    snprintf(q, sizeof q, "%s/txt/sub/b.txt", dir);
    rc = data_source_open(&o, &s);
    T_CHECKF(rc == MTC_OK, "byte file: %s", mtc_error_detail());
    if (s) {
        int ids[4];
        T_CHECK(data_source_vocab_size(s) == 256 && data_source_num_tokens(s) == 6);
        T_CHECK(data_source_sample(s, DATA_SPLIT_TRAIN, 0, ids) == MTC_OK);
        /* (6 - 1) / 3 = 1 window: " wor" */
        T_CHECK(ids[0] == ' ' && ids[1] == 'w' && ids[2] == 'o' && ids[3] == 'r');
        data_source_free(s);
    }
    test_converter();
    o.tokenizer = "sentencepiece";
    T_CHECK(data_source_open(&o, &s) == MTC_ERR_INVALID_ARGUMENT && !s);
    expect_refused("char id >= vocab", "txt", 5, MTC_ERR_FORMAT, "a.txt", "vocab");
    snprintf(p, sizeof p, "%s/empty", dir);
    mkdir(p, 0700);
    expect_refused("empty folder", "empty", 0, MTC_ERR_INVALID_ARGUMENT, "empty", NULL);
    put_file("junk.bin", "not tokens at all", 17);
    expect_refused(".bin of neither format", "junk.bin", 0, MTC_ERR_FORMAT, "junk.bin", NULL);
}

static void test_tokenizer(void) {
    T_CHECK(data_tokenizer_parse("byte") == DATA_TOKENIZER_BYTE);
    T_CHECK(data_tokenizer_parse("CharLevelTokenizer") == DATA_TOKENIZER_CHAR);
    T_CHECK(data_tokenizer_parse("ByteLevelTokenizer") == DATA_TOKENIZER_BYTE);
    T_CHECK(data_tokenizer_parse("GPT2BPETokenizer") == -1);
    const unsigned char text[] = "To be, or not to be: that is the question.\n\xc3\xa9";
    size_t n = sizeof text - 1;
    data_tokenizer t, u;
    int ids[64];
    char out[64], ser[600];
    data_tokenizer_init_char(&t, text, n);
    int distinct = 0;
    for (int c = 0; c < 256; c++)
        distinct += memchr(text, c, n) != NULL;
    T_CHECK(t.vocab_size == distinct);
    for (int i = 1; i < t.vocab_size; i++)
        T_CHECK(t.chars[i - 1] < t.chars[i]);
    T_CHECK(data_tokenizer_encode(&t, text, n, ids) == 0);
    for (size_t i = 0; i < n; i++)
        T_CHECK(ids[i] >= 0 && ids[i] < t.vocab_size);
    T_CHECK(data_tokenizer_decode(&t, ids, n, out, sizeof out) == n && !memcmp(out, text, n));
    T_CHECK(data_tokenizer_decode(&t, ids, n, out, 5) == 4 && out[4] == 0); /* cap-1 bytes */
    T_CHECK(data_tokenizer_encode(&t, (const unsigned char *)"Tz~", 3, ids) == 2 && ids[1] == 0);
    T_CHECK(data_tokenizer_serialize(&t, ser, sizeof ser) == MTC_OK);
    T_CHECK(data_tokenizer_deserialize(&u, ser) == MTC_OK && u.vocab_size == t.vocab_size &&
            !memcmp(u.chars, t.chars, (size_t)t.vocab_size) && u.kind == DATA_TOKENIZER_CHAR);
    T_CHECK(data_tokenizer_serialize(&t, ser, 10) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(data_tokenizer_deserialize(&u, "char:6261") == MTC_ERR_FORMAT); /* not ascending */
    T_CHECK(data_tokenizer_deserialize(&u, "char:6") == MTC_ERR_FORMAT);
    T_CHECK(data_tokenizer_deserialize(&u, "char:zz") == MTC_ERR_FORMAT);
    T_CHECK(data_tokenizer_deserialize(&u, "bpe") == MTC_ERR_FORMAT);
    data_tokenizer_init_byte(&t);
    T_CHECK(data_tokenizer_encode(&t, text, n, ids) == 0);
    for (size_t i = 0; i < n; i++)
        T_CHECK(ids[i] == text[i]);
    T_CHECK(data_tokenizer_serialize(&t, ser, sizeof ser) == MTC_OK && !strcmp(ser, "byte"));
    T_CHECK(data_tokenizer_deserialize(&u, ser) == MTC_OK && u.kind == DATA_TOKENIZER_BYTE &&
            u.vocab_size == 256);
}

/* Debian's fortunes: the text files (not the *.dat indexes, not the *.u8
 * symlinks) concatenated in name order; skipped when not installed. */
static int cmp_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_fortunes(void) {
    const char *fdir = "/usr/share/games/fortunes";
    DIR *d = opendir(fdir);
    if (!d) {
        printf("skip: %s not installed (apt-get install fortunes)\n", fdir);
        return;
    }
    char *names[512];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 512)
        names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_name);
    size_t total = 0, cap = 8u << 20;
    unsigned char *corpus = malloc(cap);
    for (int i = 0; i < n; i++) {
        char p[512];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", fdir, names[i]);
        size_t len = strlen(names[i]);
        int dat = len >= 4 && !strcmp(names[i] + len - 4, ".dat");
        if (names[i][0] != '.' && !dat && lstat(p, &sb) == 0 && S_ISREG(sb.st_mode)) {
            FILE *f = fopen(p, "rb");
            size_t got = f ? fread(corpus + total, 1, cap - total, f) : 0;
            if (f) fclose(f);
            total += got;
        }
        free(names[i]);
    }
    data_source_opts o = {.data_path = fdir, .seq_length = 64, .seed = 1};
    data_source *s = NULL;
    T_CHECKF(data_source_open(&o, &s) == MTC_OK, "fortunes: %s", mtc_error_detail());
    if (s) { /* the char tokenizer of the whole corpus, built here independently */
        data_tok *ref = NULL;
        data_tok_ids all = {0};
        T_CHECK(data_tok_init_char((const char *)corpus, total, &ref) == MTC_OK &&
                data_tok_encode(ref, NULL, (const char *)corpus, total, &all, NULL) == MTC_OK);
        T_CHECKF(data_source_num_tokens(s) == all.n && all.n < total,
                 "%llu tokens, corpus has %zu characters (%zu bytes)",
                 (unsigned long long)data_source_num_tokens(s), all.n, total);
        T_CHECK(ref && data_source_vocab_size(s) == data_tok_vocab_size(ref));
        printf("  %s\n", data_source_describe(s));
        const data_tok *tok = data_source_tokenizer(s);
        int ids[65];
        for (uint64_t i = 0; i < 5 && tok; i++) {
            data_tok_text text = {0};
            T_CHECK(data_source_sample(s, DATA_SPLIT_VALID, i * 7919, ids) == MTC_OK);
            T_CHECK(data_tok_decode(tok, ids, 65, &text, NULL) == MTC_OK && text.n >= 65 &&
                    memmem(corpus, total, text.s, text.n) != NULL);
            data_tok_text_free(&text);
        }
        data_tok_free(ref);
        data_tok_ids_free(&all);
        data_source_free(s);
    }
    free(corpus);
}

int main(void) {
    strcpy(dir, "/tmp/mtc-test-data-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_tokenizer();
    test_indexed();
    test_llmc();
    test_text();
    test_fortunes();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return T_DONE();
}
