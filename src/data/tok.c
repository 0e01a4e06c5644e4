/* data/tok.c - the data_tok handle (tokenizer.h): flag validation, the
 * byte, char (Unicode code points) and null tokenizers, and the text form
 * stored with a model. Byte-level BPE lives in tok_bpe_load.c / tok_bpe.c,
 * SentencePiece and TikTokenizer in tok_spm.c / tok_tiktoken.c, wired to
 * the handle by tok_ext.c (the layout: tok_handle.h).
 *
 * Char: the vocabulary is the sorted set of code points of a corpus (a byte
 * that is not valid UTF-8 is its own symbol, 0x110000 + byte, so every
 * corpus round-trips); id = rank, found by binary search. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "data/tok_bpe.h"
#include "data/tok_ext.h"
#include "data/tok_handle.h"
#include "data/unicode.h"

void data_tok_ids_free(data_tok_ids *v) {
    if (!v) return;
    free(v->ids);
    v->ids = NULL, v->n = v->cap = 0;
}
void data_tok_text_free(data_tok_text *t) {
    if (!t) return;
    free(t->s);
    t->s = NULL, t->n = t->cap = 0;
}

static const struct {
    const char *name;
    data_tok_kind kind;
} TYPE_NAMES[] = {
    {"GPT2BPETokenizer", DATA_TOK_GPT2BPE},
    {"gpt2", DATA_TOK_GPT2BPE},
    {"HuggingFaceTokenizer", DATA_TOK_HUGGINGFACE},
    {"hf", DATA_TOK_HUGGINGFACE},
    {"NullTokenizer", DATA_TOK_NULL},
    {"null", DATA_TOK_NULL},
    {"ByteLevelTokenizer", DATA_TOK_BYTE},
    {"byte", DATA_TOK_BYTE},
    {"CharLevelTokenizer", DATA_TOK_CHAR},
    {"char", DATA_TOK_CHAR},
    {"SentencePieceTokenizer", DATA_TOK_SENTENCEPIECE},
    {"GPTSentencePieceTokenizer", DATA_TOK_SENTENCEPIECE},
    {"Llama2Tokenizer", DATA_TOK_SENTENCEPIECE},
    {"TikTokenizer", DATA_TOK_TIKTOKEN},
};

/* The canonical spelling of a type name (NULL when unknown). */
const char *tok_type_canonical(const char *name) {
    for (size_t i = 0; name && i < sizeof TYPE_NAMES / sizeof TYPE_NAMES[0]; i++)
        if (!strcasecmp(name, TYPE_NAMES[i].name)) {
            /* the short aliases stand for the entry before them */
            if (islower((unsigned char)TYPE_NAMES[i].name[0])) return TYPE_NAMES[i - 1].name;
            return TYPE_NAMES[i].name;
        }
    return NULL;
}

int data_tok_parse_type(const char *name) {
    if (!name) return -1;
    for (size_t i = 0; i < sizeof TYPE_NAMES / sizeof TYPE_NAMES[0]; i++)
        if (!strcasecmp(name, TYPE_NAMES[i].name)) return (int)TYPE_NAMES[i].kind;
    return -1;
}

const char *data_tok_type_names(void) {
    return "GPT2BPETokenizer, HuggingFaceTokenizer, NullTokenizer, ByteLevelTokenizer, "
           "CharLevelTokenizer, SentencePieceTokenizer, GPTSentencePieceTokenizer, "
           "Llama2Tokenizer, TikTokenizer";
}

char *tok_dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* The absolute path of a file the tokenizer came from: a model stores it,
 * and is loaded again from other working directories. */
char *tok_dup_path(const char *s) {
    char *r = realpath(s, NULL);
    return r ? r : tok_dup_str(s);
}

mtc_result_t tok_new(data_tok_kind kind, data_tok **out) {
    data_tok *t = calloc(1, sizeof *t);
    if (!t) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory for a tokenizer");
    t->kind = kind, t->eod = -1;
    *out = t;
    return MTC_OK;
}

mtc_result_t data_tok_open(const data_tok_opts *o, data_tok **out) {
    *out = NULL;
    int kind = data_tok_parse_type(o->type);
    if (kind < 0)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "--tokenizer-type %s is unknown (use one of %s)",
                         o->type ? o->type : "(none)", data_tok_type_names());
    data_tok *t = NULL;
    mtc_result_t rc = MTC_OK;
    switch (kind) {
    case DATA_TOK_CHAR:
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "--tokenizer-type CharLevelTokenizer takes its vocabulary from the "
                         "text itself, so it cannot be built from flags (use ByteLevelTokenizer "
                         "or a BPE tokenizer here)");
    case DATA_TOK_BYTE:
        MTC_CHECK(tok_new(DATA_TOK_BYTE, &t));
        t->vocab_size = 256;
        break;
    case DATA_TOK_NULL:
        if (o->vocab_size < 1)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "NullTokenizer needs --vocab-size N >= 1 (got %d); ids are then "
                             "0..N-1 and eod is N-1",
                             o->vocab_size);
        MTC_CHECK(tok_new(DATA_TOK_NULL, &t));
        t->vocab_size = o->vocab_size, t->eod = o->vocab_size - 1;
        break;
    case DATA_TOK_GPT2BPE:
        if (!o->vocab_file || !o->merge_file)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "GPT2BPETokenizer needs --vocab-file vocab.json and --merge-file "
                             "merges.txt (missing: %s)",
                             !o->vocab_file ? "--vocab-file" : "--merge-file");
        MTC_CHECK(tok_new(DATA_TOK_GPT2BPE, &t));
        MTC_CHECK_GOTO(tok_bpe_load_gpt2(&t->bpe, o->vocab_file, o->merge_file), rc, fail);
        t->file_a = tok_dup_path(o->vocab_file), t->file_b = tok_dup_path(o->merge_file);
        break;
    case DATA_TOK_HUGGINGFACE:
        if (!o->tokenizer_model)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "HuggingFaceTokenizer needs --tokenizer-model tokenizer.json");
        MTC_CHECK(tok_new(DATA_TOK_HUGGINGFACE, &t));
        {
            /* a folder, as Megatron's AutoTokenizer.from_pretrained takes: its tokenizer.json */
            char dir_json[4096];
            const char *hf = o->tokenizer_model;
            struct stat st;
            if (stat(hf, &st) == 0 && S_ISDIR(st.st_mode)) {
                snprintf(dir_json, sizeof dir_json, "%s/tokenizer.json", hf);
                hf = dir_json;
            }
            MTC_CHECK_GOTO(tok_bpe_load_hf(&t->bpe, hf), rc, fail);
            t->file_a = tok_dup_path(hf);
        }
        break;
    case DATA_TOK_SENTENCEPIECE:
    case DATA_TOK_TIKTOKEN:
        MTC_CHECK(tok_new((data_tok_kind)kind, &t));
        MTC_CHECK_GOTO(tok_open_ext(t, o), rc, fail);
        break;
    }
    t->type_name = tok_type_canonical(o->type);
    if (t->kind == DATA_TOK_GPT2BPE || t->kind == DATA_TOK_HUGGINGFACE) {
        t->vocab_size = t->bpe.vocab_size, t->eod = t->bpe.eod;
        if (!t->file_a || (t->kind == DATA_TOK_GPT2BPE && !t->file_b)) {
            rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory for a tokenizer");
            goto fail;
        }
    }
    *out = t;
    return MTC_OK;
fail:
    data_tok_free(t);
    return rc;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorted distinct code points of text -> a char tokenizer. */
static mtc_result_t char_from_points(uint32_t *cps, size_t n, data_tok **out) {
    qsort(cps, n, sizeof *cps, cmp_u32);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (k == 0 || cps[i] != cps[k - 1]) cps[k++] = cps[i];
    if (k > INT_MAX) return mtc_error(MTC_ERR_INVALID_ARGUMENT, "too many distinct characters");
    data_tok *t = NULL;
    MTC_CHECK(tok_new(DATA_TOK_CHAR, &t));
    t->chars = cps, t->vocab_size = (int)k;
    *out = t;
    return MTC_OK;
}

mtc_result_t data_tok_init_char(const char *text, size_t n, data_tok **out) {
    *out = NULL;
    /* an empty vocabulary could be neither used nor stored (its text form
     * would not read back) */
    if (n == 0)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "the text is empty: CharLevelTokenizer takes its vocabulary from the "
                         "text (give a non-empty corpus)");
    /* a bitmap over code points and raw bytes, then the set bits in order */
    size_t nbits = DATA_UNICODE_RAW_BASE + 256;
    uint64_t *seen = calloc((nbits + 63) / 64, sizeof *seen);
    if (!seen) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory building a char vocabulary");
    size_t count = 0;
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += data_unicode_decode(s + i, n - i, &cp);
        if (!(seen[cp / 64] >> (cp % 64) & 1)) seen[cp / 64] |= 1ull << (cp % 64), count++;
    }
    uint32_t *cps = malloc((count ? count : 1) * sizeof *cps);
    if (!cps) {
        free(seen);
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory building a char vocabulary");
    }
    size_t k = 0;
    for (size_t w = 0; w < (nbits + 63) / 64; w++)
        for (uint64_t bits = seen[w]; bits; bits &= bits - 1)
            cps[k++] = (uint32_t)(w * 64 + (size_t)__builtin_ctzll(bits));
    free(seen);
    mtc_result_t rc = char_from_points(cps, k, out);
    if (rc != MTC_OK) free(cps);
    return rc;
}

void data_tok_free(data_tok *t) {
    if (!t) return;
    tok_bpe_free(&t->bpe);
    tok_spm_free(t->spm);
    tok_tt_free(t->tt);
    for (int i = 0; i < t->n_special; i++)
        free(t->special[i]);
    free(t->special);
    free(t->chars), free(t->file_a), free(t->file_b);
    free(t);
}

data_tok_kind data_tok_kind_of(const data_tok *t) { return t->kind; }
int data_tok_vocab_size(const data_tok *t) { return t->vocab_size; }
int data_tok_eod(const data_tok *t) { return t->eod; }

const char *data_tok_name(const data_tok *t) {
    switch (t->kind) {
    case DATA_TOK_BYTE: return "ByteLevelTokenizer";
    case DATA_TOK_CHAR: return "CharLevelTokenizer";
    case DATA_TOK_GPT2BPE: return "GPT2BPETokenizer";
    case DATA_TOK_HUGGINGFACE: return "HuggingFaceTokenizer";
    case DATA_TOK_NULL: return "NullTokenizer";
    case DATA_TOK_SENTENCEPIECE:
    case DATA_TOK_TIKTOKEN: return t->type_name;
    }
    return "?";
}

static int char_id(const data_tok *t, uint32_t cp) {
    int lo = 0, hi = t->vocab_size - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (t->chars[mid] < cp)
            lo = mid + 1;
        else if (t->chars[mid] > cp)
            hi = mid - 1;
        else
            return mid;
    }
    return -1;
}

static mtc_result_t null_encode(const data_tok *t, const char *text, size_t n, data_tok_ids *out) {
    size_t i = 0;
    while (i < n) {
        while (i < n && isspace((unsigned char)text[i]))
            i++;
        if (i == n) break;
        size_t j = i;
        while (j < n && !isspace((unsigned char)text[j]))
            j++;
        char word[32];
        long long v = -1;
        int ok = j - i < sizeof word;
        if (ok) {
            memcpy(word, text + i, j - i), word[j - i] = 0;
            char *end;
            errno = 0;
            v = strtoll(word, &end, 10);
            ok = *end == 0 && errno == 0;
        }
        if (!ok || v < 0 || v >= t->vocab_size)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "NullTokenizer: \"%.*s\" is not a token id in [0, %d) (its text is "
                             "ids separated by white space)",
                             (int)(j - i < 40 ? j - i : 40), text + i, t->vocab_size);
        MTC_CHECK(data_tok_ids_push(out, (int)v));
        i = j;
    }
    return MTC_OK;
}

mtc_result_t data_tok_encode(const data_tok *t, data_tok_cache *cache, const char *text, size_t n,
                             data_tok_ids *out, size_t *unknown) {
    const unsigned char *s = (const unsigned char *)text;
    switch (t->kind) {
    case DATA_TOK_BYTE:
        for (size_t i = 0; i < n; i++)
            MTC_CHECK(data_tok_ids_push(out, s[i]));
        return MTC_OK;
    case DATA_TOK_CHAR:
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            if (t->char_bytes)
                cp = s[i++];
            else
                i += data_unicode_decode(s + i, n - i, &cp);
            int id = char_id(t, cp);
            if (id < 0 && unknown) (*unknown)++;
            MTC_CHECK(data_tok_ids_push(out, id < 0 ? 0 : id));
        }
        return MTC_OK;
    case DATA_TOK_NULL: return null_encode(t, text, n, out);
    case DATA_TOK_GPT2BPE:
    case DATA_TOK_HUGGINGFACE: return tok_bpe_encode(&t->bpe, cache, text, n, out);
    case DATA_TOK_SENTENCEPIECE: return tok_spm_encode(t->spm, text, n, out);
    case DATA_TOK_TIKTOKEN: return tok_tt_encode(t->tt, text, n, out);
    }
    return mtc_error(MTC_ERR_INTERNAL, "unknown tokenizer kind %d", (int)t->kind);
}

mtc_result_t data_tok_decode(const data_tok *t, const int *ids, size_t n, data_tok_text *out,
                             size_t *unknown) {
    MTC_CHECK(data_tok_text_append(out, "", 0)); /* a NUL even for no ids */
    if (t->kind == DATA_TOK_SENTENCEPIECE) return tok_spm_decode(t->spm, ids, n, 0, out, unknown);
    if (t->kind == DATA_TOK_TIKTOKEN) return tok_tt_decode(t->tt, ids, n, out, unknown);
    for (size_t i = 0; i < n && t->kind != DATA_TOK_GPT2BPE && t->kind != DATA_TOK_HUGGINGFACE;
         i++) {
        int id = ids[i];
        if (id < 0 || id >= t->vocab_size) {
            if (unknown) (*unknown)++;
            continue;
        }
        unsigned char b[24];
        size_t len;
        if (t->kind == DATA_TOK_BYTE)
            b[0] = (unsigned char)id, len = 1;
        else if (t->kind == DATA_TOK_CHAR)
            len = t->char_bytes ? (b[0] = (unsigned char)t->chars[id], 1)
                                : data_unicode_encode(t->chars[id], b);
        else
            len = (size_t)snprintf((char *)b, sizeof b, "%s%d", out->n ? " " : "", id);
        MTC_CHECK(data_tok_text_append(out, b, len));
    }
    if (t->kind == DATA_TOK_GPT2BPE || t->kind == DATA_TOK_HUGGINGFACE)
        return tok_bpe_decode(&t->bpe, ids, n, out, unknown);
    return MTC_OK;
}

/* ---- text form ------------------------------------------------------------------- */

mtc_result_t data_tok_serialize(const data_tok *t, data_tok_text *out) {
    char buf[32];
    switch (t->kind) {
    case DATA_TOK_BYTE: return data_tok_text_append(out, "byte", 4);
    case DATA_TOK_NULL:
        snprintf(buf, sizeof buf, "null:%d", t->vocab_size);
        return data_tok_text_append(out, buf, strlen(buf));
    case DATA_TOK_CHAR:
        if (t->char_bytes) {
            MTC_CHECK(data_tok_text_append(out, "char:", 5));
            for (int i = 0; i < t->vocab_size; i++) {
                snprintf(buf, sizeof buf, "%02x", (unsigned)t->chars[i]);
                MTC_CHECK(data_tok_text_append(out, buf, 2));
            }
            return MTC_OK;
        }
        MTC_CHECK(data_tok_text_append(out, "char-utf8:", 10));
        for (int i = 0; i < t->vocab_size; i++) {
            snprintf(buf, sizeof buf, "%s%x", i ? "," : "", (unsigned)t->chars[i]);
            MTC_CHECK(data_tok_text_append(out, buf, strlen(buf)));
        }
        return MTC_OK;
    case DATA_TOK_GPT2BPE:
        MTC_CHECK(data_tok_text_append(out, "GPT2BPETokenizer:", 17));
        MTC_CHECK(data_tok_text_append(out, t->file_a, strlen(t->file_a)));
        MTC_CHECK(data_tok_text_append(out, "|", 1));
        return data_tok_text_append(out, t->file_b, strlen(t->file_b));
    case DATA_TOK_HUGGINGFACE:
        MTC_CHECK(data_tok_text_append(out, "HuggingFaceTokenizer:", 21));
        return data_tok_text_append(out, t->file_a, strlen(t->file_a));
    case DATA_TOK_SENTENCEPIECE:
    case DATA_TOK_TIKTOKEN: return tok_serialize_ext(t, out);
    }
    return mtc_error(MTC_ERR_INTERNAL, "unknown tokenizer kind %d", (int)t->kind);
}

static mtc_result_t parse_char_form(const char *s, int utf8, data_tok **out) {
    size_t n = strlen(s), cap = n / 2 + 1, k = 0;
    uint32_t *cps = malloc(cap * sizeof *cps);
    if (!cps) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory reading a tokenizer");
    mtc_result_t rc = MTC_OK;
    const char *p = s;
    while (rc == MTC_OK && *p) {
        char *end;
        errno = 0;
        unsigned long v;
        if (utf8) {
            v = strtoul(p, &end, 16);
            if (end == p || errno || v >= DATA_UNICODE_RAW_BASE + 256 || (*end && *end != ','))
                rc = MTC_ERR_FORMAT;
            p = *end ? end + 1 : end;
        } else {
            char two[3] = {p[0], p[0] ? p[1] : 0, 0};
            v = strtoul(two, &end, 16);
            if (!isxdigit((unsigned char)two[0]) || !isxdigit((unsigned char)two[1]))
                rc = MTC_ERR_FORMAT;
            p += p[1] ? 2 : 1; /* an odd digit count must not step over the NUL */
        }
        if (rc == MTC_OK && k > 0 && v <= cps[k - 1]) rc = MTC_ERR_FORMAT; /* strictly ascending */
        if (rc == MTC_OK) cps[k++] = (uint32_t)v;
    }
    if (rc != MTC_OK || k == 0) {
        free(cps);
        return mtc_error(MTC_ERR_FORMAT, "tokenizer \"%.40s...\": expected %s, strictly ascending",
                         s, utf8 ? "comma-separated hex code points" : "pairs of hex digits");
    }
    data_tok *t = NULL;
    rc = tok_new(DATA_TOK_CHAR, &t);
    if (rc != MTC_OK) {
        free(cps);
        return rc;
    }
    t->chars = cps, t->vocab_size = (int)k, t->char_bytes = !utf8;
    *out = t;
    return MTC_OK;
}

mtc_result_t data_tok_deserialize(const char *s, data_tok **out) {
    *out = NULL;
    data_tok_opts o = {0};
    if (!strcmp(s, "byte")) {
        o.type = "byte";
        return data_tok_open(&o, out);
    }
    if (!strncmp(s, "char-utf8:", 10)) return parse_char_form(s + 10, 1, out);
    if (!strncmp(s, "char:", 5)) return parse_char_form(s + 5, 0, out);
    if (!strncmp(s, "null:", 5)) {
        o.type = "null", o.vocab_size = atoi(s + 5);
        return data_tok_open(&o, out);
    }
    if (!strncmp(s, "HuggingFaceTokenizer:", 21)) {
        o.type = "HuggingFaceTokenizer", o.tokenizer_model = s + 21;
        return data_tok_open(&o, out);
    }
    const char *colon = strchr(s, ':');
    if (colon && colon - s < 40) {
        char name[40];
        memcpy(name, s, (size_t)(colon - s)), name[colon - s] = 0;
        int kind = data_tok_parse_type(name);
        if (kind == DATA_TOK_SENTENCEPIECE || kind == DATA_TOK_TIKTOKEN)
            return tok_deserialize_ext(name, colon + 1, out);
    }
    if (!strncmp(s, "GPT2BPETokenizer:", 17)) {
        const char *bar = strchr(s + 17, '|');
        if (!bar) return mtc_error(MTC_ERR_FORMAT, "tokenizer \"%.60s\": expected VOCAB|MERGES", s);
        char *vocab = malloc((size_t)(bar - s - 17) + 1);
        if (!vocab) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory reading a tokenizer");
        memcpy(vocab, s + 17, (size_t)(bar - s - 17));
        vocab[bar - s - 17] = 0;
        o.type = "GPT2BPETokenizer", o.vocab_file = vocab, o.merge_file = bar + 1;
        mtc_result_t rc = data_tok_open(&o, out);
        free(vocab);
        return rc;
    }
    return mtc_error(MTC_ERR_FORMAT,
                     "tokenizer \"%.40s\" is not a known text form (byte, char-utf8:, char:, "
                     "null:, GPT2BPETokenizer:, HuggingFaceTokenizer:, <SentencePiece type>:, "
                     "TikTokenizer:)",
                     s);
}

/* ---- the vocabulary, for exporters ------------------------------------------------ */

int data_tok_piece(const data_tok *t, int id, unsigned char scratch[8], const unsigned char **out) {
    *out = NULL;
    if (id < 0 || id >= t->vocab_size) return -1;
    switch (t->kind) {
    case DATA_TOK_BYTE: scratch[0] = (unsigned char)id, *out = scratch; return 1;
    case DATA_TOK_CHAR:
        *out = scratch;
        if (t->char_bytes || t->chars[id] >= DATA_UNICODE_RAW_BASE) {
            scratch[0] = (unsigned char)(t->chars[id] & 0xff);
            return 1;
        }
        return (int)data_unicode_encode(t->chars[id], scratch);
    case DATA_TOK_GPT2BPE:
    case DATA_TOK_HUGGINGFACE:
        if (id >= t->bpe.n_ids || !t->bpe.bytes[id]) return -1;
        *out = t->bpe.bytes[id];
        return t->bpe.len[id];
    case DATA_TOK_NULL: return -1;
    case DATA_TOK_SENTENCEPIECE: {
        const tok_spm_proc *p = tok_spm_processor(t->spm);
        if (id >= tok_spm_proc_size(p)) { /* a legacy special token beyond the pieces */
            int k = tok_spm_special_index(t->spm, id);
            if (k < 0) return -1;
            *out = (const unsigned char *)tok_spm_special(t->spm, k);
            return (int)strlen(tok_spm_special(t->spm, k));
        }
        size_t n;
        *out = (const unsigned char *)tok_spm_proc_piece(p, id, &n);
        return (int)n;
    }
    case DATA_TOK_TIKTOKEN: return tok_tt_piece(t->tt, id, out);
    }
    return -1;
}

int data_tok_is_added(const data_tok *t, int id) {
    if (t->kind == DATA_TOK_TIKTOKEN) return id >= 0 && id < tok_tt_num_special(t->tt);
    if (t->kind != DATA_TOK_GPT2BPE && t->kind != DATA_TOK_HUGGINGFACE) return 0;
    for (int i = 0; i < t->bpe.n_added; i++)
        if (t->bpe.added_id[i] == id) return 1;
    return 0;
}

typedef struct {
    int rank, left, right;
} merge_entry;

static int cmp_merge(const void *a, const void *b) {
    const merge_entry *x = a, *y = b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

mtc_result_t data_tok_merges(const data_tok *t, int **pairs, size_t *n) {
    *pairs = NULL, *n = 0;
    if (t->kind == DATA_TOK_TIKTOKEN) return tok_tt_merges(t->tt, pairs, n);
    if (t->kind != DATA_TOK_GPT2BPE && t->kind != DATA_TOK_HUGGINGFACE) return MTC_OK;
    const tok_bpe *m = &t->bpe;
    size_t k = 0;
    for (size_t i = 0; i < m->merge_cap; i++)
        k += m->merge_key[i] != 0;
    merge_entry *e = malloc((k ? k : 1) * sizeof *e);
    int *p = malloc((k ? 2 * k : 1) * sizeof *p);
    if (!e || !p) {
        free(e), free(p);
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory listing %zu merges", k);
    }
    k = 0;
    for (size_t i = 0; i < m->merge_cap; i++)
        if (m->merge_key[i]) {
            uint64_t key = m->merge_key[i] - 1;
            e[k++] = (merge_entry){m->merge_rank[i], (int)(key >> 32), (int)(key & 0xffffffffu)};
        }
    qsort(e, k, sizeof *e, cmp_merge);
    for (size_t i = 0; i < k; i++)
        p[2 * i] = e[i].left, p[2 * i + 1] = e[i].right;
    free(e);
    *pairs = p, *n = k;
    return MTC_OK;
}

mtc_result_t data_tok_gpt2_spell(const unsigned char *s, size_t n, data_tok_text *out) {
    MTC_CHECK(data_tok_text_append(out, "", 0));
    for (size_t i = 0; i < n; i++) {
        int b = s[i], cp = b;
        if (!((b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae)) {
            cp = 256; /* the non-printable bytes take 256, 257, ... in byte order */
            for (int x = 0; x < b; x++)
                cp += !((x >= '!' && x <= '~') || (x >= 0xa1 && x <= 0xac) || x >= 0xae);
        }
        unsigned char u[4];
        MTC_CHECK(data_tok_text_append(out, u, data_unicode_encode((uint32_t)cp, u)));
    }
    return MTC_OK;
}

const char *data_tok_file(const data_tok *t, int which) {
    return which == 0 ? t->file_a : which == 1 ? t->file_b : NULL;
}
