/* data/source.c - opening a data source (format detection), and samples.
 *
 * --data-path is recognized by what it is, in this order:
 *   1. contains * ? or [: a glob; all matches (sorted) are llm.c shards when
 *      the first one is, text files otherwise;
 *   2. a folder: every text file inside (see text.c);
 *   3. a file starting with the .idx magic, or named *.idx: Megatron dataset
 *      with that prefix; named *.bin with a sibling *.idx: the same;
 *   4. a file starting with an llm.c shard magic: one shard;
 *   5. any other *.bin: refused (neither format); any other file: text;
 *   6. nothing there, but PREFIX.bin / PREFIX.idx exist: Megatron prefix.
 * Tokenizer: the one --tokenizer-type (and its files) names, for every kind
 * of source (text is encoded with it; for ids it is the vocabulary, as in
 * Megatron); by default char for text, and for a Megatron dataset the
 * PREFIX.tokenizer beside it when there is one (the tokenizer's text form,
 * written by tools/txt_to_indexed.py).
 * Samples: window w covers stream tokens [w*T, w*T + T] (T+1 tokens: inputs
 * and targets shifted by one); windows are split by --split and visited in
 * data_permute order with key epoch * 4 + split. Everything after open is
 * read-only, so rank-threads may share one source. */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/data.h"
#include "data/stream.h"

typedef enum { SRC_MOCK, SRC_TEXT, SRC_INDEXED, SRC_LLMC } source_kind;

struct data_source {
    source_kind kind;
    data_stream st;
    data_tok *tok; /* text sources, flags' tokenizer, or an indexed one's PREFIX.tokenizer */
    int vocab_size;
    uint64_t n_tokens, n_windows, bounds[4];
    int T;
    uint64_t seed;
    char desc[512];
};

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static int is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* path with its 4-character extension replaced by ext (".idx"/".bin"). */
static char *with_ext(const char *path, size_t strip, const char *ext) {
    size_t n = strlen(path) - strip;
    char *s = malloc(n + strlen(ext) + 1);
    if (s) {
        memcpy(s, path, n);
        strcpy(s + n, ext);
    }
    return s;
}

/* PREFIX.tokenizer, when present, holds the tokenizer's text form (written by
 * tools/txt_to_indexed.py) so an indexed source can be decoded. */
static mtc_result_t load_sidecar_tokenizer(data_source *src, const char *prefix) {
    char *path = with_ext(prefix, 0, ".tokenizer");
    if (!path) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory");
    mtc_result_t rc = MTC_OK;
    unsigned char *buf = NULL;
    size_t len = 0;
    if (!is_file(path)) goto out;
    MTC_CHECK_GOTO(data_file_read(path, &buf, &len), rc, out);
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' '))
        len--;
    char *text = malloc(len + 1);
    if (!text) {
        rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory");
        goto out;
    }
    if (len) memcpy(text, buf, len);
    text[len] = '\0';
    rc = data_tok_deserialize(text, &src->tok);
    free(text);
    if (rc != MTC_OK) {
        char detail[256];
        snprintf(detail, sizeof detail, "%s", mtc_error_detail());
        rc = mtc_error(rc, "%s: %s", path, detail);
        goto out;
    }
out:
    free(buf);
    free(path);
    return rc;
}

static mtc_result_t open_indexed_prefix(data_source *src, const char *path, size_t strip) {
    char *prefix = with_ext(path, strip, "");
    if (!prefix) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory");
    src->kind = SRC_INDEXED;
    mtc_result_t rc = data_indexed_open(&src->st, prefix);
    if (rc == MTC_OK && !src->tok) rc = load_sidecar_tokenizer(src, prefix);
    free(prefix);
    return rc;
}

static mtc_result_t open_glob(data_source *src, const char *pattern) {
    glob_t g;
    int r = glob(pattern, 0, NULL, &g);
    if (r == GLOB_NOMATCH || (r == 0 && g.gl_pathc == 0)) {
        if (r == 0) globfree(&g);
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "--data-path \"%s\": the pattern matches no file", pattern);
    }
    if (r != 0) return mtc_error(MTC_ERR_IO, "--data-path \"%s\": glob failed", pattern);
    /* glob sorts by the locale's collation; our order is strcmp (sorted by glob with
       LC_COLLATE=C in practice, but do not rely on it) */
    char **paths = g.gl_pathv;
    size_t n = g.gl_pathc;
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && strcmp(paths[j - 1], paths[j]) > 0; j--) {
            char *t = paths[j];
            paths[j] = paths[j - 1], paths[j - 1] = t;
        }
    mtc_result_t rc = MTC_OK;
    if (data_llmc_probe(paths[0])) {
        src->kind = SRC_LLMC;
        for (size_t i = 0; i < n && rc == MTC_OK; i++)
            rc = data_llmc_open(&src->st, paths[i]);
    } else {
        src->kind = SRC_TEXT;
        rc = data_text_open(&src->st, &src->tok, paths, n);
    }
    globfree(&g);
    return rc;
}

static mtc_result_t open_path(data_source *src, const char *path) {
    if (strpbrk(path, "*?[")) return open_glob(src, path);
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        char **paths;
        size_t n;
        MTC_CHECK(data_text_list_folder(path, &paths, &n));
        src->kind = SRC_TEXT;
        mtc_result_t rc = n ? data_text_open(&src->st, &src->tok, paths, n)
                            : mtc_error(MTC_ERR_INVALID_ARGUMENT,
                                        "--data-path %s: the folder holds no text files", path);
        data_paths_free(paths, n);
        return rc;
    }
    if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
        if (data_indexed_probe(path) || ends_with(path, ".idx")) {
            if (!ends_with(path, ".idx"))
                return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                                 "%s: a Megatron .idx file must be named PREFIX.idx", path);
            return open_indexed_prefix(src, path, 4);
        }
        if (data_llmc_probe(path)) {
            src->kind = SRC_LLMC;
            return data_llmc_open(&src->st, path);
        }
        if (ends_with(path, ".bin")) {
            char *idx = with_ext(path, 4, ".idx");
            if (!idx) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory");
            int has_idx = is_file(idx);
            free(idx);
            if (has_idx) return open_indexed_prefix(src, path, 4);
            return mtc_error(MTC_ERR_FORMAT,
                             "%s: bad magic: not an llm.c token shard (magic 20240520 or "
                             "20240801), and no .idx beside it for a Megatron dataset",
                             path);
        }
        src->kind = SRC_TEXT;
        char *one[1] = {(char *)path};
        return data_text_open(&src->st, &src->tok, one, 1);
    }
    char *idx = with_ext(path, 0, ".idx"), *bin = with_ext(path, 0, ".bin");
    int prefix = idx && bin && (is_file(idx) || is_file(bin));
    free(idx);
    free(bin);
    if (prefix) return open_indexed_prefix(src, path, 0);
    return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                     "--data-path %s: no such file, folder, glob match or Megatron prefix "
                     "(%s.bin + %s.idx)",
                     path, path, path);
}

static void describe(data_source *src, const char *path) {
    const char *first = src->st.n_seg ? src->st.seg[0].name : path;
    switch (src->kind) {
    case SRC_MOCK:
        snprintf(src->desc, sizeof src->desc,
                 "mock data: %llu tokens, vocabulary %d, %d phrases of %d tokens (seed %llu)",
                 (unsigned long long)src->n_tokens, src->vocab_size, DATA_MOCK_PHRASES,
                 DATA_MOCK_PHRASE, (unsigned long long)src->seed);
        break;
    case SRC_TEXT:
        snprintf(src->desc, sizeof src->desc,
                 "text: %s (%zu file%s), %llu tokens, %s with %d symbols", path, src->st.n_seg,
                 src->st.n_seg == 1 ? "" : "s", (unsigned long long)src->n_tokens,
                 data_tok_kind_of(src->tok) == DATA_TOK_CHAR   ? "char tokenizer"
                 : data_tok_kind_of(src->tok) == DATA_TOK_BYTE ? "byte tokenizer"
                                                               : data_tok_name(src->tok),
                 data_tok_vocab_size(src->tok));
        break;
    case SRC_INDEXED:
        snprintf(src->desc, sizeof src->desc,
                 "Megatron indexed dataset: %s, %llu tokens of %s, vocabulary %d", first,
                 (unsigned long long)src->n_tokens, data_ids_name(src->st.seg[0].type),
                 src->vocab_size);
        break;
    case SRC_LLMC:
        snprintf(src->desc, sizeof src->desc,
                 "llm.c shards: %s (%zu shard%s), %llu tokens, vocabulary %d", path, src->st.n_seg,
                 src->st.n_seg == 1 ? "" : "s", (unsigned long long)src->n_tokens, src->vocab_size);
        break;
    }
}

mtc_result_t data_source_open(const data_source_opts *opts, data_source **out) {
    *out = NULL;
    if (opts->seq_length <= 0)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "--seq-length %d must be positive",
                         opts->seq_length);
    if (opts->vocab_size < 0)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "--vocab-size %d must not be negative",
                         opts->vocab_size);
    double weights[3];
    MTC_CHECK(data_split_parse(opts->split ? opts->split : "969,30,1", weights));
    data_tok_opts topts = opts->tok ? *opts->tok : (data_tok_opts){0};
    topts.type = opts->tokenizer;
    int kind = opts->tokenizer ? data_tok_parse_type(opts->tokenizer) : DATA_TOK_CHAR;
    if (kind < 0)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "--tokenizer-type %s is unknown (use one of %s)",
                         opts->tokenizer, data_tok_type_names());
    if (opts->mock && opts->vocab_size <= 0 && kind == DATA_TOK_CHAR)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "--mock-data needs --vocab-size (the range of the mock token ids)");
    if (!opts->mock && (!opts->data_path || !*opts->data_path))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "no data: pass --data-path (text file or folder, Megatron prefix, llm.c "
                         "shards) or --mock-data");
    data_source *src = calloc(1, sizeof *src);
    if (!src) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory opening data");
    src->T = opts->seq_length;
    src->seed = opts->seed;
    mtc_result_t rc = MTC_OK;
    const char *path = opts->mock ? "mock" : opts->data_path;
    /* a tokenizer from flags (char is built from the text itself) */
    int flag_tok = kind != DATA_TOK_CHAR;
    if (flag_tok) MTC_CHECK_GOTO(data_tok_open(&topts, &src->tok), rc, fail);
    if (opts->mock) {
        src->kind = SRC_MOCK;
        src->vocab_size = opts->vocab_size > 0 ? opts->vocab_size : data_tok_vocab_size(src->tok);
        src->n_tokens = DATA_MOCK_TOKENS;
    } else {
        MTC_CHECK_GOTO(open_path(src, opts->data_path), rc, fail);
        src->n_tokens = src->st.n_tokens;
        int64_t max_id;
        MTC_CHECK_GOTO(data_stream_check_ids(&src->st, opts->vocab_size, &max_id), rc, fail);
        int tok_v = src->tok ? data_tok_vocab_size(src->tok) : 0;
        if (src->kind != SRC_TEXT && src->tok && max_id >= tok_v) {
            rc = mtc_error(MTC_ERR_FORMAT,
                           "%s: token id %lld is outside the %d ids of the tokenizer (%s%s)",
                           src->st.seg[0].name, (long long)max_id, tok_v,
                           flag_tok ? "--tokenizer-type " : "the .tokenizer beside it: ",
                           data_tok_name(src->tok));
            goto fail;
        }
        if (opts->vocab_size > 0)
            src->vocab_size = opts->vocab_size;
        else if (src->tok && tok_v > max_id)
            src->vocab_size = tok_v;
        else
            src->vocab_size = (int)(max_id + 1);
    }
    if (src->n_tokens < (uint64_t)src->T + 1) {
        rc = mtc_error(MTC_ERR_INVALID_ARGUMENT,
                       "%s: %llu tokens, fewer than one sample needs (--seq-length %d + 1); use "
                       "more data or a shorter --seq-length",
                       path, (unsigned long long)src->n_tokens, src->T);
        goto fail;
    }
    src->n_windows = (src->n_tokens - 1) / (uint64_t)src->T;
    data_split_bounds(weights, src->n_windows, src->bounds);
    describe(src, path);
    *out = src;
    return MTC_OK;
fail:
    data_source_free(src);
    return rc;
}

void data_source_free(data_source *src) {
    if (!src) return;
    data_stream_free(&src->st);
    data_tok_free(src->tok);
    free(src);
}

const data_tok *data_source_tokenizer(const data_source *src) { return src->tok; }

int data_source_vocab_size(const data_source *src) { return src->vocab_size; }
uint64_t data_source_num_tokens(const data_source *src) { return src->n_tokens; }
const char *data_source_describe(const data_source *src) { return src->desc; }

uint64_t data_source_split_size(const data_source *src, data_split split) {
    if ((unsigned)split > DATA_SPLIT_TEST) return 0;
    return src->bounds[split + 1] - src->bounds[split];
}

mtc_result_t data_source_sample(const data_source *src, data_split split, uint64_t index,
                                int *tokens) {
    static const char *names[] = {"train", "valid", "test"};
    if ((unsigned)split > DATA_SPLIT_TEST)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "split %d is not train, valid or test",
                         (int)split);
    uint64_t n = data_source_split_size(src, split);
    if (n == 0)
        return mtc_error(MTC_ERR_INVALID_USAGE,
                         "the %s split is empty (%llu windows of %d+1 tokens in all); give it a "
                         "larger --split weight or use more data",
                         names[split], (unsigned long long)src->n_windows, src->T);
    uint64_t epoch = index / n, i = index % n;
    uint64_t w = src->bounds[split] + data_permute(i, n, src->seed, epoch * 4 + (uint64_t)split);
    uint64_t first = w * (uint64_t)src->T;
    if (src->kind == SRC_MOCK)
        data_mock_read(src->seed, src->vocab_size, first, (size_t)src->T + 1, tokens);
    else
        data_stream_read(&src->st, first, (size_t)src->T + 1, tokens);
    return MTC_OK;
}
