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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/data.h"
#include "data/gpt_dataset.h"
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
    /* Megatron datasets (.bin/.idx): GPTDataset / BlendedDataset order */
    int n_ds;        /* prefixes, one stream segment each (0: windows, above) */
    data_gpt *gpt;   /* n_ds */
    int32_t **lens;  /* n_ds: sequence lengths */
    uint64_t **pos;  /* n_ds: first token of each sequence in the stream */
    double *weights; /* n_ds normalized weights; NULL: one dataset, no blend */
    int16_t *blend_ds[3];
    uint64_t *blend_sample[3], size[3];
    data_source *per_split[3]; /* --train/valid/test-data-path: each split's own source */
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
    if (stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode)) /* there, but no file to read */
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "--data-path %s is a %s, not a regular file (pass a file, folder or "
                         "Megatron prefix)",
                         path,
                         S_ISFIFO(sb.st_mode)   ? "FIFO"
                         : S_ISSOCK(sb.st_mode) ? "socket"
                                                : "device");
    return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                     "--data-path %s: no such file, folder, glob match or Megatron prefix "
                     "(%s.bin + %s.idx)",
                     path, path, path);
}

static void describe(data_source *src, const char *path) {
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
    case SRC_INDEXED: {
        int n = snprintf(src->desc, sizeof src->desc,
                         "Megatron indexed dataset%s: ", src->n_ds > 1 ? "s (BlendedDataset)" : "");
        for (int d = 0; d < src->n_ds && n < (int)sizeof src->desc - 80; d++) {
            n += snprintf(src->desc + n, sizeof src->desc - (size_t)n, "%s%s", d ? ", " : "",
                          src->st.seg[d].name);
            if (src->weights)
                n += snprintf(src->desc + n, sizeof src->desc - (size_t)n, " (weight %.3g)",
                              src->weights[d]);
        }
        snprintf(src->desc + n, sizeof src->desc - (size_t)n,
                 ", %llu tokens of %s, vocabulary %d; GPTDataset order, seed %llu",
                 (unsigned long long)src->n_tokens, data_ids_name(src->st.seg[0].type),
                 src->vocab_size, (unsigned long long)src->seed);
        break;
    }
    case SRC_LLMC:
        snprintf(src->desc, sizeof src->desc,
                 "llm.c shards: %s (%zu shard%s), %llu tokens, vocabulary %d", path, src->st.n_seg,
                 src->st.n_seg == 1 ? "" : "s", (unsigned long long)src->n_tokens, src->vocab_size);
        break;
    }
    if (src->kind == SRC_INDEXED || src->kind == SRC_LLMC) { /* ids: say what decodes them */
        size_t n = strlen(src->desc);
        if (src->tok)
            snprintf(src->desc + n, sizeof src->desc - n, "; tokenizer %s",
                     data_tok_name(src->tok));
        else
            snprintf(src->desc + n, sizeof src->desc - n,
                     "; no tokenizer, so the model will take --prompt-ids only (give "
                     "--tokenizer-type and its files, or write PREFIX.tokenizer with mtc "
                     "preprocess)");
    }
}

/* Megatron's get_blend_from_list: "W1 P1 W2 P2 ..." (every other word a
 * number) into weights and prefixes; a lone prefix has no weight. */
static mtc_result_t parse_blend(const data_source_opts *o, double *w, const char **paths, int *n) {
    int k = o->n_blend;
    *n = 0;
    if (k == 1) {
        paths[0] = o->blend[0];
        w[0] = 1, *n = 1;
        return MTC_OK;
    }
    for (int i = 0; i + 1 < k && k % 2 == 0; i += 2) {
        char *end;
        double v = strtod(o->blend[i], &end);
        if (end == o->blend[i] || *end || !(v >= 0 && v < 1e30)) break;
        w[*n] = v, paths[(*n)++] = o->blend[i + 1];
    }
    if (k % 2 || *n != k / 2)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "--data-path %s ...: give weights and prefixes in pairs (--data-path 0.3 "
                         "PREFIX_A 0.7 PREFIX_B); a blend without weights is not supported",
                         o->blend[0]);
    double sum = 0;
    for (int i = 0; i < *n; i++)
        sum += w[i];
    if (!(sum > 0))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "--data-path: the blend's weights sum to 0");
    for (int i = 0; i < *n; i++)
        w[i] /= sum; /* normalize() */
    return MTC_OK;
}

/* GPTDataset indices for every prefix (stream segment k = dataset k), and
 * the blend's (sizes per dataset as BlendedMegatronDatasetBuilder asks). */
static mtc_result_t megatron_setup(data_source *src, const char *const *paths,
                                   const double weights[3], const uint64_t want[3], int blend) {
    double b[3][2];
    int has[3];
    data_gpt_split_matrix(weights, b, has);
    src->gpt = calloc((size_t)src->n_ds, sizeof *src->gpt);
    src->lens = calloc((size_t)src->n_ds, sizeof *src->lens);
    src->pos = calloc((size_t)src->n_ds, sizeof *src->pos);
    if (!src->gpt || !src->lens || !src->pos)
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory indexing the data");
    for (int d = 0; d < src->n_ds; d++) {
        uint64_t n_seq = 0, at = src->st.seg[d].start;
        MTC_CHECK(data_indexed_lengths(paths[d], &src->lens[d], &n_seq));
        src->pos[d] = malloc((n_seq ? n_seq : 1) * sizeof *src->pos[d]);
        if (!src->pos[d]) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory indexing data");
        for (uint64_t q = 0; q < n_seq; q++)
            src->pos[d][q] = at, at += (uint64_t)src->lens[d][q];
        data_gpt *g = &src->gpt[d];
        g->len = src->lens[d], g->pos = src->pos[d], g->n_seq = n_seq;
        uint64_t ask[3];
        for (int s = 0; s < 3; s++) /* _get_size_per_split_per_dataset, surplus 0.005 */
            ask[s] = blend && want[s]
                         ? (uint64_t)ceil(ceil((double)want[s] * src->weights[d]) * 1.005)
                         : want[s];
        MTC_CHECK(data_gpt_build(g, b, has, ask, src->T, (uint32_t)src->seed));
    }
    static const char *names[] = {"train", "valid", "test"};
    for (int s = 0; s < 3; s++) {
        if (!blend) {
            src->size[s] = src->gpt[0].sp[s].n;
            continue;
        }
        uint64_t size = want[s];
        for (int d = 0; d < src->n_ds; d++) {
            if (!has[s]) break;
            if (src->gpt[d].sp[s].n == 0 && src->weights[d] > 0)
                return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                                 "--data-path %s: no %s sample of %d+1 tokens in its share of "
                                 "--split (give the split more weight or use more data)",
                                 paths[d], names[s], src->T);
            /* one epoch of each when no size was asked for: as far as every dataset lasts */
            uint64_t lasts = src->weights[d] > 0
                                 ? (uint64_t)((double)src->gpt[d].sp[s].n / src->weights[d])
                                 : UINT64_MAX;
            if (!want[s] && (d == 0 || lasts < size)) size = lasts;
        }
        src->size[s] = has[s] ? size : 0;
        if (src->size[s])
            MTC_CHECK(data_gpt_blend(src->weights, src->n_ds, src->size[s], &src->blend_ds[s],
                                     &src->blend_sample[s]));
    }
    return MTC_OK;
}

/* Megatron's blend_per_split: split s from its own source, opened with
 * only that split (split_spoof (0, 1): every document) and its size. */
static mtc_result_t open_per_split(const data_source_opts *opts, data_source **out) {
    static const char *const only[3] = {"1,0,0", "0,1,0", "0,0,1"};
    static const char *const names[3] = {"train", "valid", "test"};
    data_source *src = calloc(1, sizeof *src);
    if (!src) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory opening data");
    src->T = opts->seq_length, src->seed = opts->seed;
    mtc_result_t rc = MTC_OK;
    size_t n = 0;
    for (int s = 0; s < 3; s++) {
        if (opts->n_split_paths[s] <= 0) continue;
        data_source_opts o = *opts;
        memset(o.split_paths, 0, sizeof o.split_paths);
        memset(o.n_split_paths, 0, sizeof o.n_split_paths);
        o.mock = 0, o.split = only[s];
        o.data_path = opts->split_paths[s][0];
        o.blend = opts->n_split_paths[s] > 1 ? opts->split_paths[s] : NULL;
        o.n_blend = opts->n_split_paths[s] > 1 ? opts->n_split_paths[s] : 0;
        for (int k = 0; k < 3; k++)
            o.num_samples[k] = k == s ? opts->num_samples[s] : 0;
        rc = data_source_open(&o, &src->per_split[s]);
        if (rc != MTC_OK) {
            char why[400];
            snprintf(why, sizeof why, "%s", mtc_error_detail());
            rc = mtc_error(rc, "--%s-data-path: %s", names[s], why);
            goto fail;
        }
        const data_source *p = src->per_split[s];
        if (p->vocab_size > src->vocab_size) src->vocab_size = p->vocab_size;
        src->n_tokens += p->n_tokens;
        if (n < sizeof src->desc - 16)
            n += (size_t)snprintf(src->desc + n, sizeof src->desc - n, "%s%s: %s", n ? "; " : "",
                                  names[s], p->desc);
    }
    *out = src;
    return MTC_OK;
fail:
    data_source_free(src);
    return rc;
}

mtc_result_t data_source_open(const data_source_opts *opts, data_source **out) {
    *out = NULL;
    if (opts->n_split_paths[0] > 0 || opts->n_split_paths[1] > 0 || opts->n_split_paths[2] > 0)
        return open_per_split(opts, out);
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
    if (!opts->mock && opts->n_blend <= 0 && (!opts->data_path || !*opts->data_path))
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
    } else if (opts->n_blend > 0) { /* Megatron's --data-path list: prefixes */
        double w[MTC_DATA_BLEND_MAX];
        const char *paths[MTC_DATA_BLEND_MAX];
        if (opts->n_blend > 2 * MTC_DATA_BLEND_MAX) {
            rc = mtc_error(MTC_ERR_INVALID_ARGUMENT, "--data-path: at most %d datasets",
                           MTC_DATA_BLEND_MAX);
            goto fail;
        }
        int n = 0;
        MTC_CHECK_GOTO(parse_blend(opts, w, paths, &n), rc, fail);
        for (int d = 0; d < n; d++) {
            size_t before = src->st.n_seg;
            MTC_CHECK_GOTO(open_path(src, paths[d]), rc, fail);
            if (src->kind != SRC_INDEXED || src->st.n_seg != before + 1) {
                rc = mtc_error(MTC_ERR_INVALID_ARGUMENT,
                               "--data-path %s: a blend is of Megatron datasets (PREFIX of "
                               "PREFIX.bin + PREFIX.idx)",
                               paths[d]);
                goto fail;
            }
        }
        src->n_ds = n;
        if (n > 1) {
            src->weights = malloc((size_t)n * sizeof *src->weights);
            if (!src->weights) {
                rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory");
                goto fail;
            }
            memcpy(src->weights, w, (size_t)n * sizeof *w);
        }
        path = paths[0];
    }
    if (!opts->mock && opts->n_blend <= 0) {
        MTC_CHECK_GOTO(open_path(src, opts->data_path), rc, fail);
        if (src->kind == SRC_INDEXED) src->n_ds = 1;
    }
    if (!opts->mock) {
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
    if (src->n_ds > 0) {
        const char *paths[MTC_DATA_BLEND_MAX];
        char *prefixes[MTC_DATA_BLEND_MAX] = {0};
        for (int d = 0; d < src->n_ds; d++) { /* the stream segment's name is PREFIX.bin */
            const char *bin = src->st.seg[d].name;
            size_t len = strlen(bin);
            prefixes[d] = len > 4 ? strndup(bin, len - 4) : NULL;
            paths[d] = prefixes[d] ? prefixes[d] : bin;
        }
        rc = megatron_setup(src, paths, weights, opts->num_samples, src->weights != NULL);
        for (int d = 0; d < src->n_ds; d++)
            free(prefixes[d]);
        if (rc != MTC_OK) goto fail;
    }
    describe(src, path);
    *out = src;
    return MTC_OK;
fail:
    data_source_free(src);
    return rc;
}

void data_source_free(data_source *src) {
    if (!src) return;
    for (int s = 0; s < 3; s++)
        data_source_free(src->per_split[s]);
    data_stream_free(&src->st);
    data_tok_free(src->tok);
    for (int d = 0; src->gpt && d < src->n_ds; d++)
        data_gpt_free(&src->gpt[d]);
    for (int d = 0; src->lens && d < src->n_ds; d++)
        free(src->lens[d]), free(src->pos[d]);
    for (int s = 0; s < 3; s++)
        free(src->blend_ds[s]), free(src->blend_sample[s]);
    free(src->gpt), free(src->lens), free(src->pos), free(src->weights);
    free(src);
}

const data_tok *data_source_tokenizer(const data_source *src) {
    for (int s = 0; s < 3 && !src->tok; s++) /* per split: the first split's (train's) */
        if (src->per_split[s]) return data_source_tokenizer(src->per_split[s]);
    return src->tok;
}

int data_source_vocab_size(const data_source *src) { return src->vocab_size; }
uint64_t data_source_num_tokens(const data_source *src) { return src->n_tokens; }
const char *data_source_describe(const data_source *src) { return src->desc; }

static void read_stream(void *st, uint64_t pos, size_t n, int *out) {
    data_stream_read(st, pos, n, out);
}

uint64_t data_source_split_size(const data_source *src, data_split split) {
    if ((unsigned)split > DATA_SPLIT_TEST) return 0;
    if (src->per_split[0] || src->per_split[1] || src->per_split[2])
        return src->per_split[split] ? data_source_split_size(src->per_split[split], split) : 0;
    if (src->n_ds > 0) return src->size[split];
    return src->bounds[split + 1] - src->bounds[split];
}

mtc_result_t data_source_sample(const data_source *src, data_split split, uint64_t index,
                                int *tokens) {
    static const char *names[] = {"train", "valid", "test"};
    if ((unsigned)split > DATA_SPLIT_TEST)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "split %d is not train, valid or test",
                         (int)split);
    if (src->per_split[split])
        return data_source_sample(src->per_split[split], split, index, tokens);
    uint64_t n = data_source_split_size(src, split);
    if (n == 0)
        return mtc_error(MTC_ERR_INVALID_USAGE,
                         "the %s split is empty (%llu windows of %d+1 tokens in all); give it a "
                         "larger --split weight or use more data",
                         names[split], (unsigned long long)src->n_windows, src->T);
    if (src->n_ds > 0) { /* Megatron's sample (a request past the built size wraps) */
        uint64_t i = index % n, k = i;
        int d = 0;
        if (src->weights) d = src->blend_ds[split][i], k = src->blend_sample[split][i];
        const data_gpt *g = &src->gpt[d];
        k %= g->sp[split].n;
        size_t at = data_gpt_read(g, (int)split, k, src->T, read_stream, (void *)&src->st, tokens);
        for (; at < (size_t)src->T + 1;
             at++) /* only past the very end of the data (Megatron pads) */
            tokens[at] = 0;
        return MTC_OK;
    }
    uint64_t epoch = index / n, i = index % n;
    uint64_t w = src->bounds[split] + data_permute(i, n, src->seed, epoch * 4 + (uint64_t)split);
    uint64_t first = w * (uint64_t)src->T;
    if (src->kind == SRC_MOCK)
        data_mock_read(src->seed, src->vocab_size, first, (size_t)src->T + 1, tokens);
    else
        data_stream_read(&src->st, first, (size_t)src->T + 1, tokens);
    return MTC_OK;
}
