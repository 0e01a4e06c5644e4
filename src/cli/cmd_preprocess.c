/* cli/cmd_preprocess.c - `mtc preprocess` (Megatron's tools/preprocess_data.py)
 * and `mtc tokenize` (encode or decode text with any tokenizer).
 *
 * preprocess: JSON lines (or plain text with --text-documents,
 * cli/preprocess_text.h) in, PREFIX_<key>_document.bin/.idx out, one
 * builder per --json-keys key (data_indexed_builder: the bytes Megatron's
 * IndexedDatasetBuilder writes for the same ids), and beside them
 * PREFIX_<key>_document.tokenizer (mtc's, which Megatron ignores).
 *
 *   main: read up to workers x BATCH lines ─▶ workers: parse + tokenize a
 *   batch each (own word cache) ─▶ main: append the batches in line order,
 *   progress on stderr ─▶ repeat; at the end write the .idx and rename.
 *
 * A document is one JSON object per line; its key holds a string (one
 * sequence) or a list of strings (one sequence each, as after Megatron's
 * --split-sentences); empty sequences are dropped and --append-eod adds eod
 * to the last one. Blank lines are skipped. A bad line (not JSON, missing
 * key, not a string) stops the run with its line number, exit 2, and
 * nothing is left behind. Limitations: no --split-sentences (NLTK), no
 * --partitions > 1. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/preprocess_text.h"
#include "core/outfile.h"
#include "core/timer.h"
#include "data/data.h"
#include "data/tok_cli.h"
#include "data/jsonl.h"
#include "data/tokenizer.h"

enum { PRE_BATCH = 256, PRE_MAX_KEYS = 16 };

typedef struct {
    /* in: lines[0..n_lines), line_nos[i] counted from 1 in the file */
    char **lines;
    size_t *lens, *line_nos, n_lines;
    /* out, per key: ids, sequence lengths, sequences per document */
    data_tok_ids ids[PRE_MAX_KEYS], seq_lens[PRE_MAX_KEYS], doc_seqs[PRE_MAX_KEYS];
    size_t n_docs;
    /* first error: line number and one line of text */
    size_t err_line;
    mtc_result_t err_rc;
    char err[512];
} pre_batch;

typedef struct {
    const data_tok *tok;
    const char *const *keys;
    int n_keys, append_eod;
    int text; /* --text-documents: a batch's lines are documents of plain text */
    pre_batch *batch;
    data_tok_cache *cache;
} pre_job;

static void pre_batch_clear(pre_batch *b, int n_keys) {
    for (int k = 0; k < n_keys; k++)
        b->ids[k].n = b->seq_lens[k].n = b->doc_seqs[k].n = 0;
    b->n_docs = 0, b->err_line = 0, b->err_rc = MTC_OK, b->err[0] = 0;
}

static mtc_result_t pre_sentence(pre_job *j, int k, const char *s, size_t n, int *n_seqs) {
    pre_batch *b = j->batch;
    size_t before = b->ids[k].n;
    MTC_CHECK(data_tok_encode(j->tok, j->cache, s, n, &b->ids[k], NULL));
    size_t got = b->ids[k].n - before;
    if (got > 0x7fffffff)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "a sequence of %zu tokens is too long", got);
    if (got) { /* Megatron drops empty sentences */
        MTC_CHECK(data_tok_ids_push(&b->seq_lens[k], (int)got));
        (*n_seqs)++;
    }
    return MTC_OK;
}

/* A JSON string of the line, decoded whole (NULs kept), as one sentence. */
static mtc_result_t pre_string(pre_job *j, int k, data_jspan v, int *n_seqs) {
    char *str = NULL;
    size_t len = 0;
    MTC_CHECK(data_jsonl_string(v, &str, &len));
    mtc_result_t rc = pre_sentence(j, k, str, len, n_seqs);
    free(str);
    return rc;
}

/* One line -> one document per key. Sets b->err on bad input. */
static mtc_result_t pre_line(pre_job *j, size_t i) {
    pre_batch *b = j->batch;
    size_t line = b->line_nos[i];
    /* strict JSON (data/jsonl.h): one value, nothing after it, every escape kept */
    mtc_result_t rc = data_jsonl_check(b->lines[i], b->lens[i]);
    data_jspan doc = data_jsonl_value(b->lines[i], b->lens[i]);
    if (rc != MTC_OK || data_jsonl_kind(doc) != 'o') {
        if (rc != MTC_OK)
            snprintf(b->err, sizeof b->err, "is not a JSON object: %s", mtc_error_detail());
        else
            snprintf(b->err, sizeof b->err, "is not a JSON object (valid JSON, but not {...})");
        rc = MTC_ERR_INVALID_ARGUMENT;
        goto out;
    }
    for (int k = 0; k < j->n_keys && rc == MTC_OK; k++) {
        data_jspan v, e;
        int n_seqs = 0, found = data_jsonl_member(doc, j->keys[k], &v);
        char kind = found ? data_jsonl_kind(v) : 0;
        if (!found) {
            snprintf(b->err, sizeof b->err, "has no key \"%s\" (fix the line or --json-keys)",
                     j->keys[k]);
            rc = MTC_ERR_INVALID_ARGUMENT;
        } else if (kind == 's') {
            rc = pre_string(j, k, v, &n_seqs);
        } else if (kind == 'a') {
            for (size_t pos = 0; rc == MTC_OK && data_jsonl_next(v, &pos, &e);) {
                if (data_jsonl_kind(e) != 's') {
                    snprintf(b->err, sizeof b->err, "key \"%s\" is a list with a non-string entry",
                             j->keys[k]);
                    rc = MTC_ERR_INVALID_ARGUMENT;
                } else {
                    rc = pre_string(j, k, e, &n_seqs);
                }
            }
        } else {
            snprintf(b->err, sizeof b->err, "key \"%s\" is neither a string nor a list of strings",
                     j->keys[k]);
            rc = MTC_ERR_INVALID_ARGUMENT;
        }
        if (rc == MTC_OK && n_seqs > 0 && j->append_eod) {
            rc = data_tok_ids_push(&b->ids[k], data_tok_eod(j->tok));
            b->seq_lens[k].ids[b->seq_lens[k].n - 1]++;
        }
        if (rc == MTC_OK) rc = data_tok_ids_push(&b->doc_seqs[k], n_seqs);
        if (rc != MTC_OK && !b->err[0]) snprintf(b->err, sizeof b->err, "%s", mtc_error_detail());
    }
    if (rc == MTC_OK) b->n_docs++;
out:
    if (rc != MTC_OK) b->err_line = line, b->err_rc = rc;
    return rc;
}

/* --text-documents: document i is plain text, one sequence of key 0. */
static mtc_result_t pre_text_doc(pre_job *j, size_t i) {
    pre_batch *b = j->batch;
    int n_seqs = 0;
    mtc_result_t rc = pre_sentence(j, 0, b->lines[i], b->lens[i], &n_seqs);
    if (rc == MTC_OK && n_seqs > 0 && j->append_eod) {
        rc = data_tok_ids_push(&b->ids[0], data_tok_eod(j->tok));
        b->seq_lens[0].ids[b->seq_lens[0].n - 1]++;
    }
    if (rc == MTC_OK) rc = data_tok_ids_push(&b->doc_seqs[0], n_seqs);
    if (rc == MTC_OK) {
        b->n_docs++;
        return MTC_OK;
    }
    snprintf(b->err, sizeof b->err, "%s", mtc_error_detail());
    b->err_line = b->line_nos[i], b->err_rc = rc;
    return rc;
}

static void *pre_worker(void *arg) {
    pre_job *j = arg;
    for (size_t i = 0; i < j->batch->n_lines; i++)
        if ((j->text ? pre_text_doc(j, i) : pre_line(j, i)) != MTC_OK) break;
    return NULL;
}

/* --json-keys takes the words that follow it (Megatron's nargs='+'), or a
 * comma list; they are taken out of argv so the common parser sees the rest. */
static int take_json_keys(int *argc, char **argv, const char **keys, int *n_keys) {
    int w = 0;
    for (int i = 0; i < *argc; i++) {
        int inline_value = !strncmp(argv[i], "--json-keys=", 12);
        if (strcmp(argv[i], "--json-keys") != 0 && !inline_value) {
            argv[w++] = argv[i];
            continue;
        }
        *n_keys = 0;
        if (inline_value)
            for (char *tok = strtok(argv[i] + 12, ","); tok; tok = strtok(NULL, ",")) {
                if (*n_keys == PRE_MAX_KEYS) return -1;
                keys[(*n_keys)++] = tok;
            }
        while (i + 1 < *argc && strncmp(argv[i + 1], "--", 2) != 0) {
            char *s = argv[++i];
            for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
                if (*n_keys == PRE_MAX_KEYS) return -1;
                keys[(*n_keys)++] = tok;
            }
        }
        if (*n_keys == 0) return -2;
    }
    *argc = w;
    return 0;
}

/* PREFIX_<key>_document.tokenizer: the tokenizer's text form (BPE kinds name
 * their files by absolute path), which mtc train reads beside the dataset so
 * that the model it saves can take --prompt text. */
static mtc_result_t pre_write_tokenizer(const data_tok *tok, const char *prefix, const char *key) {
    char path[4200];
    snprintf(path, sizeof path, "%s_%s_document.tokenizer", prefix, key);
    data_tok_text form = {0};
    MTC_CHECK(data_tok_serialize(tok, &form));
    mtc_outfile o;
    mtc_result_t rc = mtc_outfile_open(&o, path, "the dataset's tokenizer");
    if (rc == MTC_OK) {
        fprintf(o.f, "%s\n", form.s);
        rc = mtc_outfile_commit(&o);
    }
    data_tok_text_free(&form);
    return rc;
}

/* Megatron's tokenizer flags, shared by both commands: fills TOK_NARGS entries. */
enum { TOK_NARGS = 5 + DATA_TOK_CLI_NARGS };
static void tok_args(mtc_arg *a, data_tok_opts *o, mtc_arg_strings *special, int char_too) {
    mtc_arg ext[] = {DATA_TOK_CLI_ARGS(*o, *special)};
    memcpy(a + 5, ext, sizeof ext);
    /* the names data/ accepts (its one table, data_tok_type_names); preprocess
     * cannot build CharLevelTokenizer, whose vocabulary comes from a corpus */
    static char names[2][256];
    snprintf(names[char_too], sizeof names[0], "%s", data_tok_type_names());
    char *c = char_too ? NULL : strstr(names[0], "CharLevelTokenizer");
    if (c) {
        size_t n = strlen("CharLevelTokenizer");
        while (c > names[0] && (c[-1] == ' ' || c[-1] == ','))
            c--, n++;
        memmove(c, c + n, strlen(c + n) + 1);
    }
    a[0] = (mtc_arg){"tokenizer-type", NULL, MTC_ARG_STRING, &o->type, "S", names[char_too], 0};
    a[1] = (mtc_arg){"vocab-file",
                     NULL,
                     MTC_ARG_STRING,
                     &o->vocab_file,
                     "FILE",
                     "GPT2BPETokenizer: vocab.json",
                     0};
    a[2] = (mtc_arg){"merge-file",
                     NULL,
                     MTC_ARG_STRING,
                     &o->merge_file,
                     "FILE",
                     "GPT2BPETokenizer: merges.txt",
                     0};
    a[3] = (mtc_arg){"tokenizer-model",
                     NULL,
                     MTC_ARG_STRING,
                     &o->tokenizer_model,
                     "FILE",
                     "HuggingFaceTokenizer: tokenizer.json (byte-level BPE); SentencePiece kinds: "
                     "tokenizer.model; TikTokenizer: its JSON vocabulary",
                     0};
    a[4] = (mtc_arg){"vocab-size",
                     NULL,
                     MTC_ARG_INT,
                     &o->vocab_size,
                     "N",
                     "NullTokenizer, TikTokenizer (default 131072): vocabulary size",
                     0};
}

/* Tokenizer errors are the user's (files, flags): exit 2, except memory. */
static int tok_open_or_fail(const char *cmd, const data_tok_opts *o, data_tok **tok) {
    mtc_result_t rc = data_tok_open(o, tok);
    if (rc == MTC_OK) return -1;
    if (rc == MTC_ERR_OUT_OF_MEMORY) return cli_fail(cmd, rc);
    return cli_usage_error(cmd, "%s", mtc_error_detail());
}

static void pre_progress(size_t docs, size_t bytes, double t0, int final) {
    double dt = mtc_time_s() - t0;
    if (dt <= 0) dt = 1e-9;
    fprintf(stderr, "mtc preprocess: %s %zu documents (%.0f docs/s, %.2f MB/s)\n",
            final ? "done:" : "processed", docs, docs / dt, bytes / dt / 1048576.0);
}

/* Every flag of `mtc preprocess`. */
typedef struct {
    data_tok_opts o;
    const char *input, *prefix, *keys[PRE_MAX_KEYS];
    int n_keys, append_eod, workers, log_interval, split_sentences, partitions;
    const char *text_docs;      /* --text-documents lines|paragraphs (preprocess_text.h) */
    const char *json_keys_help; /* --json-keys is taken out of argv before parsing */
} pre_flags;

/* The flags into f, checked before any file is opened. Returns an exit
 * status, or -1 to go on. */
static int pre_parse(pre_flags *f, int argc, char **argv) {
    char **args_copy = malloc(sizeof(char *) * (size_t)(argc + 1));
    if (!args_copy) return cli_fail("preprocess", MTC_ERR_OUT_OF_MEMORY);
    memcpy(args_copy, argv, sizeof(char *) * (size_t)argc);
    int k = take_json_keys(&argc, args_copy, f->keys, &f->n_keys);
    if (k < 0) {
        free(args_copy);
        if (k == -1)
            return cli_usage_error("preprocess", "--json-keys: at most %d keys", PRE_MAX_KEYS);
        return cli_usage_error("preprocess",
                               "--json-keys needs at least one key (e.g. --json-keys text)");
    }
    mtc_arg args[] = {
        [0 ... TOK_NARGS - 1] = {0}, /* the tokenizer flags, filled by tok_args */
        {"input", NULL, MTC_ARG_STRING, &f->input, "PATH",
         "JSON lines, one document per line (with --text-documents: a text file or folder)", 0},
        {"text-documents", NULL, MTC_ARG_STRING, &f->text_docs, "lines|paragraphs",
         "plain text in: a document per non-blank line, or per paragraph up to a blank line "
         "(default: JSON lines)",
         0},
        {"json-keys", NULL, MTC_ARG_STRING, &f->json_keys_help, "KEY...",
         "keys to tokenize (default text)", 0},
        {"output-prefix", NULL, MTC_ARG_STRING, &f->prefix, "PREFIX",
         "writes PREFIX_<key>_document.bin/.idx", 0},
        {"append-eod", NULL, MTC_ARG_FLAG, &f->append_eod, NULL, "end each document with eod", 0},
        {"workers", NULL, MTC_ARG_INT, &f->workers, "N", "tokenizing threads (default 1)", 0},
        {"log-interval", NULL, MTC_ARG_INT, &f->log_interval, "N",
         "progress every N documents (default 1000)", 0},
        {"split-sentences", NULL, MTC_ARG_FLAG, &f->split_sentences, NULL, "(not supported)", 0},
        {"partitions", NULL, MTC_ARG_INT, &f->partitions, "N", "(only 1)", 0},
    };
    int nargs = (int)(sizeof args / sizeof args[0]);
    mtc_arg_strings special = {0};
    tok_args(args, &f->o, &special, 0);
    int st = cli_parse("preprocess",
                       "--input FILE.jsonl [--text-documents lines|paragraphs] --output-prefix "
                       "PREFIX --tokenizer-type T",
                       "Megatron's tools/preprocess_data.py: tokenize JSON lines (or plain text "
                       "with --text-documents) into an indexed dataset "
                       "(PREFIX_text_document.bin/.idx) that mtc and Megatron read, and "
                       "PREFIX_text_document.tokenizer that mtc train stores with the model.",
                       args, nargs, argc, args_copy);
    free(args_copy);
    if (st >= 0) return st;
    data_tok_cli_special(&f->o, &special);
    if (!f->input) return cli_usage_error("preprocess", "--input FILE.jsonl is required");
    if (!f->prefix) return cli_usage_error("preprocess", "--output-prefix PREFIX is required");
    if (!*f->prefix) /* "" would write _text_document.bin into the working folder unasked */
        return cli_usage_error("preprocess",
                               "--output-prefix is empty; give a path prefix such "
                               "as data/corpus (writes data/corpus_text_document.bin)");
    if (!f->o.type)
        return cli_usage_error("preprocess", "--tokenizer-type is required (one of %s)",
                               data_tok_type_names());
    if (f->workers < 1 || f->workers > 256)
        return cli_usage_error("preprocess", "workers=%d must be in 1..256", f->workers);
    if (f->log_interval < 1)
        return cli_usage_error("preprocess", "log-interval=%d must be >= 1", f->log_interval);
    if (f->split_sentences)
        return cli_usage_error("preprocess", "--split-sentences (NLTK) is not supported; split "
                                             "documents into lists of strings beforehand");
    if (f->partitions != 1)
        return cli_usage_error("preprocess",
                               "partitions=%d: only 1 is supported (use --workers "
                               "for parallelism)",
                               f->partitions);
    struct stat sb;
    if (!f->text_docs && stat(f->input, &sb) == 0 && S_ISDIR(sb.st_mode))
        return cli_usage_error("preprocess",
                               "--input %s is a folder; give one JSON-lines file (or "
                               "--text-documents lines|paragraphs for a folder of text)",
                               f->input);
    if (f->text_docs && f->json_keys_help)
        return cli_usage_error("preprocess", "--json-keys is for JSON lines; --text-documents "
                                             "writes PREFIX_text_document");
    return -1;
}

/* One run: the input, the tokenizer, a builder per key and a batch, job
 * and thread per worker. Zeroed, then filled by pre_open and pre_alloc;
 * pre_run_free takes any state. */
typedef struct {
    const pre_flags *f;
    FILE *in;
    pre_text_reader rd;
    data_tok *tok;
    int code; /* the ids' dtype (data_indexed_dtype_for_vocab) */
    data_indexed_builder *builders[PRE_MAX_KEYS];
    pre_batch *batches;
    pre_job *jobs;
    pthread_t *threads;
    char *line;
    size_t line_cap, line_no, docs, bytes;
    double t0;
    int status; /* a usage error's exit status (0: none) */
} pre_run;

/* The input and the tokenizer. Returns an exit status, or -1. */
static int pre_open(pre_run *r) {
    const pre_flags *f = r->f;
    if (f->text_docs && pre_text_open(&r->rd, f->text_docs, f->input) != MTC_OK)
        return cli_usage_error("preprocess", "%s", mtc_error_detail());
    if (!f->text_docs && mtc_infile_open(f->input, &r->in) != MTC_OK)
        return cli_usage_error("preprocess", "--input: %s", mtc_error_detail());
    int st = tok_open_or_fail("preprocess", &f->o, &r->tok);
    if (st >= 0) return st;
    if (f->append_eod && data_tok_eod(r->tok) < 0)
        return cli_usage_error("preprocess", "--append-eod: %s has no eod token (drop the flag)",
                               data_tok_name(r->tok));
    return -1;
}

/* The builders (an --output-prefix that cannot be written is a usage
 * error: r->status) and the workers' batches. */
static mtc_result_t pre_alloc(pre_run *r) {
    const pre_flags *f = r->f;
    r->code = data_indexed_dtype_for_vocab(data_tok_vocab_size(r->tok));
    r->batches = calloc((size_t)f->workers, sizeof *r->batches);
    r->jobs = calloc((size_t)f->workers, sizeof *r->jobs);
    r->threads = calloc((size_t)f->workers, sizeof *r->threads);
    if (!r->batches || !r->jobs || !r->threads)
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; i < f->n_keys; i++) {
        char name[4096];
        snprintf(name, sizeof name, "%s_%s_document", f->prefix, f->keys[i]);
        mtc_result_t rc = data_indexed_builder_init(name, r->code, &r->builders[i]);
        if (rc == MTC_ERR_IO || rc == MTC_ERR_INVALID_ARGUMENT) {
            r->status = cli_usage_error("preprocess", "--output-prefix: %s", mtc_error_detail());
            return rc;
        }
        if (rc != MTC_OK) return rc;
    }
    for (int w = 0; w < f->workers; w++) {
        pre_batch *b = &r->batches[w];
        b->lines = calloc(PRE_BATCH, sizeof(char *));
        b->lens = calloc(PRE_BATCH, sizeof(size_t));
        b->line_nos = calloc(PRE_BATCH, sizeof(size_t));
        r->jobs[w] = (pre_job){
            r->tok, f->keys, f->n_keys, f->append_eod, !!f->text_docs, b, data_tok_cache_init()};
        if (!b->lines || !b->lens || !b->line_nos || !r->jobs[w].cache)
            return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory");
    }
    return MTC_OK;
}

/* Up to PRE_BATCH documents into each worker's batch; *used = the batches
 * filled, *eof at the end of the input. */
static mtc_result_t pre_fill(pre_run *r, int *used, int *eof) {
    const pre_flags *f = r->f;
    for (*used = 0; *used < f->workers && !*eof; (*used)++) {
        pre_batch *b = &r->batches[*used];
        pre_batch_clear(b, f->n_keys);
        b->n_lines = 0;
        while (b->n_lines < PRE_BATCH) {
            ssize_t got = f->text_docs ? pre_text_next(&r->rd, &r->line, &r->line_cap)
                                       : getline(&r->line, &r->line_cap, r->in);
            if (got == -2) return mtc_error(MTC_ERR_IO, "%s", mtc_error_detail());
            if (got < 0) {
                *eof = 1;
                break;
            }
            r->line_no = f->text_docs ? r->rd.doc_line : r->line_no + 1;
            const char *line = r->line;
            size_t n = (size_t)got;
            while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
                n--;
            size_t sp = strspn(line, " \t\r\n");
            if (sp >= n) continue; /* blank line */
            char *copy = malloc(n + 1);
            if (!copy)
                return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory reading %s", f->input);
            memcpy(copy, line, n), copy[n] = 0;
            free(b->lines[b->n_lines]);
            b->lines[b->n_lines] = copy, b->lens[b->n_lines] = n;
            b->line_nos[b->n_lines] = r->line_no;
            b->n_lines++;
        }
        if (!b->n_lines) break;
    }
    return MTC_OK;
}

/* The first `used` batches tokenized by a thread each, then appended to
 * the builders in line order (a bad document: a usage error, r->status). */
static mtc_result_t pre_tokenize_append(pre_run *r, int used) {
    const pre_flags *f = r->f;
    for (int w = 0; w < used; w++)
        if (pthread_create(&r->threads[w], NULL, pre_worker, &r->jobs[w]) != 0) {
            for (int v = 0; v < w; v++)
                pthread_join(r->threads[v], NULL);
            return mtc_error(MTC_ERR_SYSTEM, "cannot start worker threads");
        }
    for (int w = 0; w < used; w++)
        pthread_join(r->threads[w], NULL);
    for (int w = 0; w < used; w++) { /* in line order */
        pre_batch *b = &r->batches[w];
        if (b->err_rc == MTC_ERR_INVALID_ARGUMENT) {
            r->status = cli_usage_error(
                "preprocess", "%s:%zu: %s%s", f->text_docs ? r->rd.path : f->input, b->err_line,
                b->err,
                !f->text_docs && strstr(b->err, "not a JSON object")
                    ? " (for plain text add --text-documents lines|paragraphs; mtc train "
                      "--data-path also reads text files as they are)"
                    : "");
            return b->err_rc;
        }
        if (b->err_rc != MTC_OK)
            return mtc_error(b->err_rc, "%s:%zu: %s", f->input, b->err_line, b->err);
        size_t id_off[PRE_MAX_KEYS] = {0}, len_off[PRE_MAX_KEYS] = {0};
        for (size_t d = 0; d < b->n_docs; d++) {
            for (int key = 0; key < f->n_keys; key++) {
                int n_seqs = b->doc_seqs[key].ids[d];
                size_t n_ids = 0;
                for (int s = 0; s < n_seqs; s++)
                    n_ids += (size_t)b->seq_lens[key].ids[len_off[key] + (size_t)s];
                MTC_CHECK(data_indexed_builder_add_document(
                    r->builders[key], b->ids[key].ids + id_off[key],
                    b->seq_lens[key].ids + len_off[key], (size_t)n_seqs));
                id_off[key] += n_ids, len_off[key] += (size_t)n_seqs;
            }
            r->bytes += b->lens[d] + 1, r->docs++;
            if (r->docs % (size_t)f->log_interval == 0) pre_progress(r->docs, r->bytes, r->t0, 0);
        }
    }
    return MTC_OK;
}

/* The .idx files, the .tokenizer beside them, and the summary. */
static mtc_result_t pre_finish(pre_run *r) {
    const pre_flags *f = r->f;
    if (r->in && ferror(r->in)) return mtc_error(MTC_ERR_IO, "%s: read failed", f->input);
    for (int i = 0; i < f->n_keys; i++)
        MTC_CHECK(data_indexed_builder_finish(r->builders[i]));
    for (int i = 0; i < f->n_keys; i++) /* PREFIX.tokenizer: what mtc train decodes the ids with */
        MTC_CHECK(pre_write_tokenizer(r->tok, f->prefix, f->keys[i]));
    pre_progress(r->docs, r->bytes, r->t0, 1);
    fprintf(stderr, "mtc preprocess: %s (vocabulary %d, eod %d), %d worker%s, %s ids:\n",
            data_tok_name(r->tok), data_tok_vocab_size(r->tok), data_tok_eod(r->tok), f->workers,
            f->workers == 1 ? "" : "s", r->code == 8 ? "uint16" : "int32");
    for (int i = 0; i < f->n_keys; i++)
        printf("%s_%s_document.bin\n%s_%s_document.idx\n%s_%s_document.tokenizer\n", f->prefix,
               f->keys[i], f->prefix, f->keys[i], f->prefix, f->keys[i]);
    return MTC_OK;
}

static void pre_run_free(pre_run *r) {
    const pre_flags *f = r->f;
    for (int i = 0; i < f->n_keys; i++) /* an unfinished builder removes its files */
        data_indexed_builder_free(r->builders[i]);
    for (int w = 0; r->batches && r->jobs && w < f->workers; w++) {
        pre_batch *b = &r->batches[w];
        for (int i = 0; b->lines && i < PRE_BATCH; i++)
            free(b->lines[i]);
        free(b->lines), free(b->lens), free(b->line_nos);
        for (int key = 0; key < f->n_keys; key++) {
            data_tok_ids_free(&b->ids[key]);
            data_tok_ids_free(&b->seq_lens[key]);
            data_tok_ids_free(&b->doc_seqs[key]);
        }
        data_tok_cache_free(r->jobs[w].cache);
    }
    free(r->batches), free(r->jobs), free(r->threads), free(r->line);
    if (r->in) fclose(r->in);
    pre_text_close(&r->rd);
    data_tok_free(r->tok);
}

int cli_cmd_preprocess(int argc, char **argv) {
    pre_flags f = {
        .keys = {"text"}, .n_keys = 1, .workers = 1, .log_interval = 1000, .partitions = 1};
    int st = pre_parse(&f, argc, argv);
    if (st >= 0) return st;
    pre_run r = {.f = &f};
    if ((st = pre_open(&r)) < 0) {
        mtc_result_t rc = pre_alloc(&r);
        r.t0 = mtc_time_s();
        for (int eof = 0, used = 0; rc == MTC_OK && !eof;) {
            rc = pre_fill(&r, &used, &eof);
            if (rc == MTC_OK) rc = pre_tokenize_append(&r, used);
        }
        if (rc == MTC_OK) rc = pre_finish(&r);
        st = r.status ? r.status : rc != MTC_OK ? cli_fail("preprocess", rc) : 0;
    }
    pre_run_free(&r);
    return st;
}

/* ---- mtc tokenize ----------------------------------------------------------------- */

static mtc_result_t read_all(FILE *f, data_tok_text *t) {
    char buf[65536];
    size_t got;
    MTC_CHECK(data_tok_text_append(t, "", 0));
    while ((got = fread(buf, 1, sizeof buf, f)) > 0)
        MTC_CHECK(data_tok_text_append(t, buf, got));
    if (ferror(f)) return mtc_error(MTC_ERR_IO, "read failed: %s", strerror(errno));
    return MTC_OK;
}

static mtc_result_t print_ids(const data_tok_ids *ids) {
    for (size_t i = 0; i < ids->n; i++)
        printf(i ? " %d" : "%d", ids->ids[i]);
    putchar('\n');
    return MTC_OK;
}

/* One unit of input: encode text -> ids line, or decode ids -> text. */
static int tokenize_one(const data_tok *tok, data_tok_cache *cache, const char *s, size_t n,
                        int decode, int json, size_t line, data_tok_ids *ids, data_tok_text *text,
                        size_t *n_bytes, size_t *n_tokens) {
    ids->n = 0, text->n = 0;
    mtc_result_t rc = MTC_OK;
    char where[64] = "";
    if (line) snprintf(where, sizeof where, "line %zu: ", line);
    if (decode) {
        data_tok_opts no = {.type = "null", .vocab_size = data_tok_vocab_size(tok)};
        data_tok *ids_reader = NULL;
        rc = data_tok_open(&no, &ids_reader);
        if (rc == MTC_OK) rc = data_tok_encode(ids_reader, NULL, s, n, ids, NULL);
        data_tok_free(ids_reader);
        if (rc == MTC_ERR_INVALID_ARGUMENT) { /* the id reader is a NullTokenizer: not its name */
            const char *d = mtc_error_detail();
            if (!strncmp(d, "NullTokenizer: ", 15)) d += 15;
            return cli_usage_error("tokenize", "%s--decode reads token ids of this tokenizer: %s",
                                   where, d);
        }
        size_t unknown = 0;
        if (rc == MTC_OK) rc = data_tok_decode(tok, ids->ids, ids->n, text, &unknown);
        if (rc != MTC_OK) return cli_fail("tokenize", rc);
        if (unknown)
            return cli_usage_error("tokenize", "%s%zu ids are outside the vocabulary [0, %d)",
                                   where, unknown, data_tok_vocab_size(tok));
        if (json) {
            data_jsonl_print(stdout, text->s, text->n); /* NULs as \u0000, never the end */
            putchar('\n');
        } else {
            fwrite(text->s, 1, text->n, stdout);
        }
        *n_tokens += ids->n, *n_bytes += text->n;
        return -1;
    }
    char *str = NULL; /* --json-lines: the line's string, decoded whole (data/jsonl.h) */
    if (json) {
        rc = data_jsonl_check(s, n);
        data_jspan v = data_jsonl_value(s, n);
        if (rc != MTC_OK || data_jsonl_kind(v) != 's')
            return cli_usage_error(
                "tokenize", "%sexpected one JSON string per line (--json-lines)%s%s", where,
                rc != MTC_OK ? ": " : "", rc != MTC_OK ? mtc_error_detail() : "");
        if ((rc = data_jsonl_string(v, &str, &n)) != MTC_OK) return cli_fail("tokenize", rc);
        s = str;
    }
    rc = data_tok_encode(tok, cache, s, n, ids, NULL);
    *n_bytes += n, *n_tokens += ids->n;
    free(str);
    if (rc == MTC_ERR_INVALID_ARGUMENT)
        return cli_usage_error("tokenize", "%s%s", where, mtc_error_detail());
    if (rc != MTC_OK) return cli_fail("tokenize", rc);
    print_ids(ids);
    return -1;
}

int cli_cmd_tokenize(int argc, char **argv) {
    data_tok_opts o = {0};
    const char *input = NULL, *tok_string = NULL;
    int decode = 0, json = 0, stats = 0, print_tok = 0;
    mtc_arg args[] = {
        [0 ... TOK_NARGS - 1] = {0}, /* the tokenizer flags, filled by tok_args */
        {"tokenizer-string", NULL, MTC_ARG_STRING, &tok_string, "S",
         "a tokenizer's text form (as --print-tokenizer shows) instead of the flags above", 0},
        {"input", NULL, MTC_ARG_STRING, &input, "FILE", "read FILE instead of stdin", 0},
        {"decode", NULL, MTC_ARG_FLAG, &decode, NULL, "ids in, text out", 0},
        {"json-lines", NULL, MTC_ARG_FLAG, &json, NULL,
         "one JSON string per line in (or out with --decode), one line of ids each", 0},
        {"print-tokenizer", NULL, MTC_ARG_FLAG, &print_tok, NULL,
         "print the tokenizer's text form on stderr", 0},
        {"stats", NULL, MTC_ARG_FLAG, &stats, NULL, "bytes, tokens and MB/s on stderr", 0},
    };
    mtc_arg_strings special = {0};
    tok_args(args, &o, &special, 1);
    int st = cli_parse("tokenize", "--tokenizer-type T [...] [--decode] [--json-lines] < input",
                       "Encode text to token ids (one line of space-separated ids), or decode "
                       "ids to text, with any of mtc's tokenizers. CharLevelTokenizer takes its "
                       "vocabulary from the input.",
                       args, (int)(sizeof args / sizeof args[0]), argc, argv);
    if (st >= 0) return st;
    data_tok_cli_special(&o, &special);
    if (!o.type && !tok_string)
        return cli_usage_error("tokenize", "--tokenizer-type is required (one of %s)",
                               data_tok_type_names());
    FILE *in = stdin;
    if (input && mtc_infile_open(input, &in) != MTC_OK)
        return cli_usage_error("tokenize", "--input: %s", mtc_error_detail());
    data_tok_text all = {0}, text = {0}, form = {0};
    data_tok_ids ids = {0};
    data_tok *tok = NULL;
    data_tok_cache *cache = data_tok_cache_init();
    mtc_result_t rc = read_all(in, &all);
    if (input) fclose(in);
    st = -1;
    if (rc != MTC_OK || !cache) {
        st = cli_fail("tokenize", rc != MTC_OK ? rc : MTC_ERR_OUT_OF_MEMORY);
        goto out;
    }
    if (tok_string) {
        if ((rc = data_tok_deserialize(tok_string, &tok)) != MTC_OK) {
            st = cli_usage_error("tokenize", "--tokenizer-string: %s", mtc_error_detail());
            goto out;
        }
    } else if (data_tok_parse_type(o.type) == DATA_TOK_CHAR) {
        if (decode) {
            st = cli_usage_error("tokenize", "CharLevelTokenizer --decode needs the vocabulary: "
                                             "pass --tokenizer-string from --print-tokenizer");
            goto out;
        }
        if ((rc = data_tok_init_char(all.s, all.n, &tok)) != MTC_OK) {
            st = rc == MTC_ERR_INVALID_ARGUMENT
                     ? cli_usage_error("tokenize", "%s", mtc_error_detail())
                     : cli_fail("tokenize", rc);
            goto out;
        }
    } else if ((st = tok_open_or_fail("tokenize", &o, &tok)) >= 0) {
        goto out;
    }
    if (print_tok) {
        if ((rc = data_tok_serialize(tok, &form)) != MTC_OK) {
            st = cli_fail("tokenize", rc);
            goto out;
        }
        fprintf(stderr, "%s\n", form.s);
    }
    size_t n_bytes = 0, n_tokens = 0;
    double t0 = mtc_time_s();
    if (json) {
        size_t line = 0;
        for (char *p = all.s, *end = all.s + all.n; p < end && st < 0;) {
            char *nl = memchr(p, '\n', (size_t)(end - p));
            size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
            line++;
            st = tokenize_one(tok, cache, p, n, decode, 1, line, &ids, &text, &n_bytes, &n_tokens);
            p += n + 1;
        }
    } else {
        st = tokenize_one(tok, cache, all.s, all.n, decode, 0, 0, &ids, &text, &n_bytes, &n_tokens);
    }
    double dt = mtc_time_s() - t0;
    if (st < 0 && stats)
        fprintf(stderr, "mtc tokenize: %s: %zu bytes, %zu tokens, %.3f s, %.2f MB/s\n",
                data_tok_name(tok), n_bytes, n_tokens, dt, n_bytes / (dt > 0 ? dt : 1e-9) / 1e6);
out:
    fflush(stdout);
    data_tok_text_free(&all), data_tok_text_free(&text), data_tok_text_free(&form);
    data_tok_ids_free(&ids);
    data_tok_cache_free(cache);
    data_tok_free(tok);
    return st < 0 ? 0 : st;
}
