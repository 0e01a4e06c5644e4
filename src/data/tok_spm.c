/* data/tok_spm.c - Megatron core 0.18's SentencePieceTokenizer (also
 * reached as GPTSentencePieceTokenizer and Llama2Tokenizer: 0.18 builds all
 * three on megatron/core/tokenizers/text/libraries/sentencepiece_tokenizer.py)
 * over the library processor of tok_spm_shim.cc.
 *
 *   text_to_ids   non-legacy: the processor's encode (no BOS, no EOS);
 *                 legacy (--tokenizer-sentencepiece-legacy): the text is cut
 *                 at the earliest --tokenizer-special-tokens occurrence (ties:
 *                 the token given first), each piece between encoded by the
 *                 processor, a special token's own id put in, and the "▁"
 *                 piece right after a special token dropped (Megatron's
 *                 trim_spm_separator_after_special_token)
 *   vocab_size    the model's pieces, plus legacy special tokens that are
 *                 not pieces (ids from the piece count on, in order)
 *   eod           the model's eos id (Megatron: eod falls back to eos_id);
 *                 bos the model's bos id; -1 when the model disabled them
 *   ids_to_text   non-legacy: the processor's decode; legacy: decode of the
 *                 runs between special tokens joined with " TOKEN ", stripped
 *
 * Not done: --tokenizer-sentencepiece-ignore-extra-whitespaces off (0.18's
 * default is on, so the processor's own white space handling applies), and
 * sampling (sample_alpha). */
#include "data/tok_spm.h"

#include <stdlib.h>
#include <string.h>

#include "data/stream.h"
#include "data/tok_ext.h"

#define SPM_SEPARATOR "\xe2\x96\x81" /* U+2581, the processor's space */

struct tok_spm {
    tok_spm_proc *proc;
    int n_pieces, vocab_size, legacy, sep_id;
    int n_special;
    char **special; /* legacy: special token texts, in the order given */
    size_t *special_len;
    int *special_id;
    tok_spm_model md; /* the proto's fields exports need */
};

static mtc_result_t spm_oom(void) {
    return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory for a SentencePiece tokenizer");
}

mtc_result_t tok_spm_open(const char *path, int legacy, const char *const *special, int n_special,
                          tok_spm **out) {
    *out = NULL;
    if (n_special > 0 && !legacy)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "--tokenizer-special-tokens with a SentencePiece tokenizer needs "
                         "--tokenizer-sentencepiece-legacy (Megatron: special tokens are given "
                         "at train time otherwise)");
    char err[512] = "";
    tok_spm_proc *p = tok_spm_proc_load(path, err, sizeof err);
    if (!p)
        return mtc_error(MTC_ERR_FORMAT,
                         "--tokenizer-model %s is not a SentencePiece .model file libsentencepiece "
                         "can load: %s",
                         path, err);
    tok_spm *s = calloc(1, sizeof *s);
    if (!s) {
        tok_spm_proc_free(p);
        return spm_oom();
    }
    s->proc = p, s->legacy = legacy;
    s->n_pieces = s->vocab_size = tok_spm_proc_size(p);
    s->sep_id = tok_spm_proc_piece_id(p, SPM_SEPARATOR, strlen(SPM_SEPARATOR));
    mtc_result_t rc = tok_spm_read_model(path, s->n_pieces, &s->md);
    if (rc != MTC_OK) {
        tok_spm_free(s);
        return rc;
    }
    if (n_special > 0) {
        s->special = calloc((size_t)n_special, sizeof *s->special);
        s->special_len = calloc((size_t)n_special, sizeof *s->special_len);
        s->special_id = calloc((size_t)n_special, sizeof *s->special_id);
        if (!s->special || !s->special_len || !s->special_id) goto oom;
    }
    for (int i = 0; i < n_special; i++) {
        size_t n = strlen(special[i]);
        if (n == 0) {
            tok_spm_free(s);
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "--tokenizer-special-tokens: entry %d is empty (give non-empty texts)",
                             i + 1);
        }
        int dup = 0;
        for (int k = 0; k < s->n_special; k++)
            dup |= s->special_len[k] == n && !memcmp(s->special[k], special[i], n);
        if (dup) continue; /* Megatron's dict keeps the first */
        int id = tok_spm_proc_piece_id(p, special[i], n);
        if (id == tok_spm_proc_unk(p)) id = s->vocab_size++;
        s->special[s->n_special] = malloc(n + 1);
        if (!s->special[s->n_special]) goto oom;
        memcpy(s->special[s->n_special], special[i], n + 1);
        s->special_len[s->n_special] = n, s->special_id[s->n_special] = id;
        s->n_special++;
    }
    *out = s;
    return MTC_OK;
oom:
    tok_spm_free(s);
    return spm_oom();
}

void tok_spm_free(tok_spm *s) {
    if (!s) return;
    tok_spm_proc_free(s->proc);
    for (int i = 0; i < s->n_special; i++)
        free(s->special[i]);
    free(s->special), free(s->special_len), free(s->special_id);
    free(s->md.type);
    free(s);
}

int tok_spm_vocab_size(const tok_spm *s) { return s->vocab_size; }
int tok_spm_eod(const tok_spm *s) { return tok_spm_proc_eos(s->proc); }
int tok_spm_bos(const tok_spm *s) { return tok_spm_proc_bos(s->proc); }
int tok_spm_legacy(const tok_spm *s) { return s->legacy; }
int tok_spm_n_special(const tok_spm *s) { return s->n_special; }
const char *tok_spm_special(const tok_spm *s, int i) { return s->special[i]; }
const tok_spm_proc *tok_spm_processor(const tok_spm *s) { return s->proc; }
const tok_spm_model *tok_spm_model_of(const tok_spm *s) { return &s->md; }

/* the processor's ids of text[0..n), appended */
static mtc_result_t proc_encode(const tok_spm *s, const char *text, size_t n, data_tok_ids *out,
                                int trim_sep) {
    int *ids = NULL;
    size_t k = 0;
    char err[256] = "";
    if (tok_spm_proc_encode(s->proc, text, n, &ids, &k, err, sizeof err) != 0)
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "SentencePiece encode failed: %s", err);
    mtc_result_t rc = MTC_OK;
    for (size_t i = (trim_sep && k > 0 && ids[0] == s->sep_id) ? 1 : 0; i < k && rc == MTC_OK; i++)
        rc = data_tok_ids_push(out, ids[i]);
    free(ids);
    return rc;
}

int tok_spm_special_index(const tok_spm *s, int id) {
    for (int i = 0; i < s->n_special; i++)
        if (s->special_id[i] == id) return i;
    return -1;
}

mtc_result_t tok_spm_encode(const tok_spm *s, const char *text, size_t n, data_tok_ids *out) {
    if (!s->legacy || s->n_special == 0) return proc_encode(s, text, n, out, 0);
    size_t idx = 0, start = out->n;
    for (;;) {
        int best = -1;
        size_t best_at = 0;
        for (int i = 0; i < s->n_special; i++) {
            const char *hit = memmem(text + idx, n - idx, s->special[i], s->special_len[i]);
            if (hit && (best < 0 || (size_t)(hit - text) < best_at))
                best = i, best_at = (size_t)(hit - text);
        }
        if (best < 0) break;
        /* Megatron trims "▁" only when the ids so far end in a special token */
        int after_special = out->n > start && tok_spm_special_index(s, out->ids[out->n - 1]) >= 0;
        MTC_CHECK(proc_encode(s, text + idx, best_at - idx, out, after_special));
        MTC_CHECK(data_tok_ids_push(out, s->special_id[best]));
        idx = best_at + s->special_len[best];
    }
    return proc_encode(s, text + idx, n - idx, out, 0);
}

/* The processor's decode of ids (all in [0, n_pieces)) appended. */
static mtc_result_t proc_decode(const tok_spm *s, const int *ids, size_t n, data_tok_text *out) {
    char *txt = NULL, err[256] = "";
    size_t len = 0;
    if (tok_spm_proc_decode(s->proc, ids, n, &txt, &len, err, sizeof err) != 0)
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "SentencePiece decode failed: %s", err);
    mtc_result_t rc = data_tok_text_append(out, txt, len);
    free(txt);
    return rc;
}

/* A piece's own bytes, for decoding that continues a text: "▁" is a space
 * (never dropped), <0xNN> the byte, control pieces nothing, unknown " ⁇ "
 * (the processor's surface for it). */
static mtc_result_t piece_append(const tok_spm *s, int id, data_tok_text *out) {
    size_t n;
    const char *p = tok_spm_proc_piece(s->proc, id, &n);
    int kind = tok_spm_proc_kind(s->proc, id);
    if (kind == 2 || kind == 5) return MTC_OK;
    if (kind == 1) return data_tok_text_append(out, " \xe2\x81\x87 ", 5);
    if (kind == 4 && n == 6) {
        unsigned char b = (unsigned char)strtoul(p + 3, NULL, 16);
        return data_tok_text_append(out, &b, 1);
    }
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && !memcmp(p + i, SPM_SEPARATOR, 3)) {
            MTC_CHECK(data_tok_text_append(out, " ", 1));
            i += 3;
            continue;
        }
        size_t j = i + 1;
        while (j < n && !(j + 3 <= n && !memcmp(p + j, SPM_SEPARATOR, 3)))
            j++;
        MTC_CHECK(data_tok_text_append(out, p + i, j - i));
        i = j;
    }
    return MTC_OK;
}

static int py_space(unsigned char c) {
    return c == ' ' || (c >= 9 && c <= 13) || (c >= 28 && c <= 31);
}

mtc_result_t tok_spm_decode(const tok_spm *s, const int *ids, size_t n, int continuing,
                            data_tok_text *out, size_t *unknown) {
    MTC_CHECK(data_tok_text_append(out, "", 0));
    int *keep = malloc((n ? n : 1) * sizeof *keep);
    if (!keep) return spm_oom();
    size_t k = 0, base = out->n;
    mtc_result_t rc = MTC_OK;
    for (size_t i = 0; i <= n && rc == MTC_OK; i++) {
        int sp = i < n && s->legacy ? tok_spm_special_index(s, ids[i]) : -1;
        if (i < n && sp < 0) {
            if (ids[i] >= 0 && ids[i] < s->n_pieces)
                keep[k++] = ids[i];
            else if (unknown)
                (*unknown)++;
            continue;
        }
        /* a run ends: at a legacy special token or at the end */
        if (continuing)
            for (size_t r = 0; r < k && rc == MTC_OK; r++)
                rc = piece_append(s, keep[r], out);
        else if (k > 0 || s->legacy)
            rc = proc_decode(s, keep, k, out);
        k = 0;
        if (sp >= 0 && rc == MTC_OK) {
            rc = data_tok_text_append(out, " ", 1);
            if (rc == MTC_OK) rc = data_tok_text_append(out, s->special[sp], s->special_len[sp]);
            if (rc == MTC_OK) rc = data_tok_text_append(out, " ", 1);
        }
    }
    free(keep);
    if (rc == MTC_OK && s->legacy && !continuing) { /* Python's str.strip() (ASCII part) */
        size_t a = base, b = out->n;
        while (a < b && py_space((unsigned char)out->s[a]))
            a++;
        while (b > a && py_space((unsigned char)out->s[b - 1]))
            b--;
        memmove(out->s + base, out->s + a, b - a);
        out->n = base + (b - a), out->s[out->n] = 0;
    }
    return rc;
}

/* ---- the model proto's few fields exports need --------------------------------- */

/* protobuf varint at *p (< end); 0 when malformed */
static int pb_varint(const unsigned char **p, const unsigned char *end, uint64_t *v) {
    *v = 0;
    for (int shift = 0; *p < end && shift < 64; shift += 7) {
        unsigned char b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return 1;
    }
    return 0;
}

/* Calls fn(field, wire type, varint value, bytes, length) for each field of
 * the message [p, end); 0 when malformed. */
typedef void (*pb_fn)(void *ctx, int field, int wt, uint64_t v, const unsigned char *b, size_t n);
static int pb_walk(const unsigned char *p, const unsigned char *end, pb_fn fn, void *ctx) {
    while (p < end) {
        uint64_t key, v = 0;
        if (!pb_varint(&p, end, &key)) return 0;
        int wt = (int)(key & 7), field = (int)(key >> 3);
        const unsigned char *b = NULL;
        size_t n = 0;
        if (wt == 0) {
            if (!pb_varint(&p, end, &v)) return 0;
        } else if (wt == 2) {
            if (!pb_varint(&p, end, &v) || v > (uint64_t)(end - p)) return 0;
            b = p, n = (size_t)v, p += n;
        } else if (wt == 5) {
            if (end - p < 4) return 0;
            b = p, n = 4, p += 4;
        } else if (wt == 1) {
            if (end - p < 8) return 0;
            b = p, n = 8, p += 8;
        } else {
            return 0;
        }
        fn(ctx, field, wt, v, b, n);
    }
    return 1;
}

typedef struct {
    tok_spm_model *m;
    int piece_type, n_pieces, ok;
} proto_ctx;

static void on_piece(void *c, int field, int wt, uint64_t v, const unsigned char *b, size_t n) {
    (void)b, (void)n;
    if (field == 3 && wt == 0) ((proto_ctx *)c)->piece_type = (int)v;
}
static void on_trainer(void *c, int field, int wt, uint64_t v, const unsigned char *b, size_t n) {
    (void)b, (void)n;
    tok_spm_model *m = ((proto_ctx *)c)->m;
    if (field == 3 && wt == 0) m->model_type = (int)v;
    if (field == 35 && wt == 0) m->byte_fallback = v != 0;
    if (field == 24 && wt == 0) m->whitespace_as_suffix = v != 0;
}
static void on_normalizer(void *c, int field, int wt, uint64_t v, const unsigned char *b,
                          size_t n) {
    tok_spm_model *m = ((proto_ctx *)c)->m;
    if (field == 1 && wt == 2) m->identity = n == 8 && !memcmp(b, "identity", 8);
    if (field == 2 && wt == 2) m->has_charsmap = n > 0;
    if (field == 3 && wt == 0) m->add_dummy_prefix = v != 0;
    if (field == 4 && wt == 0) m->remove_extra_whitespaces = v != 0;
    if (field == 5 && wt == 0) m->escape_whitespaces = v != 0;
}
static void on_model(void *c, int field, int wt, uint64_t v, const unsigned char *b, size_t n) {
    (void)v;
    proto_ctx *x = c;
    if (wt != 2) return;
    if (field == 1) {
        x->piece_type = 1; /* NORMAL when absent */
        if (!pb_walk(b, b + n, on_piece, x)) x->ok = 0;
        if (x->n_pieces < x->m->n_pieces) x->m->type[x->n_pieces] = x->piece_type;
        x->n_pieces++;
    } else if (field == 2 && !pb_walk(b, b + n, on_trainer, x)) {
        x->ok = 0;
    } else if (field == 3 && !pb_walk(b, b + n, on_normalizer, x)) {
        x->ok = 0;
    }
}

mtc_result_t tok_spm_read_model(const char *path, int n_pieces, tok_spm_model *m) {
    unsigned char *buf = NULL;
    size_t n = 0;
    memset(m, 0, sizeof *m);
    m->model_type = 1, m->add_dummy_prefix = m->remove_extra_whitespaces = 1; /* proto defaults */
    m->escape_whitespaces = 1;
    MTC_CHECK(data_file_read(path, &buf, &n));
    m->type = calloc((size_t)(n_pieces > 0 ? n_pieces : 1), sizeof *m->type);
    m->n_pieces = n_pieces;
    if (!m->type) {
        free(buf);
        return spm_oom();
    }
    proto_ctx x = {.m = m, .ok = 1};
    int ok = pb_walk(buf, buf + n, on_model, &x) && x.ok && x.n_pieces == n_pieces;
    free(buf);
    if (!ok) {
        free(m->type), m->type = NULL;
        return mtc_error(MTC_ERR_FORMAT,
                         "%s: its model proto does not parse (%d pieces seen, the "
                         "library has %d)",
                         path, x.n_pieces, n_pieces);
    }
    return MTC_OK;
}
