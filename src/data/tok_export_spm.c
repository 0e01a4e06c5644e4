/* data/tok_export_spm.c - a SentencePiece BPE model as a Hugging Face
 * tokenizer.json (tok_export.c calls it), built as transformers' Llama
 * converter does:
 *   normalizer     Prepend "▁" (when the model adds a dummy prefix), then
 *                  Replace " " -> "▁"
 *   model          BPE over the pieces (ids as in the model), merges from
 *                  every split of every piece into two pieces, ordered by
 *                  the piece's score (highest first), then the parts' ids;
 *                  byte_fallback as the model, fuse_unk
 *   decoder        Replace "▁" -> " ", ByteFallback, Fuse, Strip one leading
 *                  space (with the dummy prefix)
 *   added_tokens   the control and unknown pieces, and legacy special tokens
 *                  (so Hugging Face matches "<s>" written in a text, which
 *                  SentencePiece never does: its converter does the same)
 * Refused (MTC_ERR_UNSUPPORTED, one line saying why): unigram models (the
 * Hugging Face Unigram has no byte fallback in the clients that check it),
 * and models whose normalisation a Prepend/Replace pair cannot express (a
 * character map other than identity, extra white space removal, white space
 * as suffix) - Llama's own model is of the kind written. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include "data/tok_ext.h"
#include "data/unicode.h"

#define SEP "\xe2\x96\x81"

typedef struct {
    float score;
    int seq, left, right;
} spm_merge;

static int cmp_merge(const void *a, const void *b) {
    const spm_merge *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1; /* highest first */
    return (x->seq > y->seq) - (x->seq < y->seq);                  /* stable */
}

static mtc_result_t spm_merges(const tok_spm_proc *p, spm_merge **out, size_t *n_out) {
    int V = tok_spm_proc_size(p), unk = tok_spm_proc_unk(p);
    size_t cap = 1024, n = 0;
    spm_merge *m = malloc(cap * sizeof *m);
    if (!m) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory listing merges");
    for (int id = 0; id < V; id++) {
        size_t len;
        const char *s = tok_spm_proc_piece(p, id, &len);
        size_t first = n;
        for (size_t cut = 0; cut < len;) { /* cut at each code point boundary inside */
            uint32_t cp;
            cut += data_unicode_decode((const unsigned char *)s + cut, len - cut, &cp);
            if (cut >= len) break;
            int a = tok_spm_proc_piece_id(p, s, cut),
                b = tok_spm_proc_piece_id(p, s + cut, len - cut);
            /* piece_to_id answers unk for a missing piece: check it is the piece itself */
            size_t la, lb;
            const char *pa = tok_spm_proc_piece(p, a, &la), *pb = tok_spm_proc_piece(p, b, &lb);
            if ((a == unk && (la != cut || memcmp(pa, s, cut))) ||
                (b == unk && (lb != len - cut || memcmp(pb, s + cut, lb))))
                continue;
            if (n == cap) {
                spm_merge *q = realloc(m, 2 * cap * sizeof *q);
                if (!q) {
                    free(m);
                    return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory listing merges");
                }
                m = q, cap *= 2;
            }
            m[n++] = (spm_merge){tok_spm_proc_score(p, id), 0, a, b};
        }
        for (size_t i = first + 1; i < n; i++) /* by the parts' ids within one piece */
            for (size_t j = i;
                 j > first && (m[j - 1].left > m[j].left ||
                               (m[j - 1].left == m[j].left && m[j - 1].right > m[j].right));
                 j--) {
                spm_merge t = m[j];
                m[j] = m[j - 1], m[j - 1] = t;
            }
    }
    for (size_t i = 0; i < n; i++)
        m[i].seq = (int)i;
    qsort(m, n, sizeof *m, cmp_merge);
    *out = m, *n_out = n;
    return MTC_OK;
}

static cJSON *replace(const char *from, const char *to) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "type", "Replace");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(r, "pattern"), "String", from);
    cJSON_AddStringToObject(r, "content", to);
    return r;
}

static cJSON *typed(const char *type) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    return o;
}

static char *piece_str(const tok_spm_proc *p, int id) {
    size_t n;
    const char *s = tok_spm_proc_piece(p, id, &n);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n), d[n] = 0;
    return d;
}

mtc_result_t tok_spm_tokenizer_json(const tok_spm *s, const char *path, char **json) {
    *json = NULL;
    const tok_spm_proc *p = tok_spm_processor(s);
    int V = tok_spm_proc_size(p);
    const tok_spm_model md = *tok_spm_model_of(s);
    const char *why = md.model_type != 2 ? "it is not a BPE model (unigram, word and char models "
                                           "are not written)"
                      : md.has_charsmap || !md.identity ? "its normalisation is not identity"
                      : md.remove_extra_whitespaces     ? "it removes extra white space"
                      : md.whitespace_as_suffix || !md.escape_whitespaces
                          ? "it puts white space as a suffix or keeps it unescaped"
                          : NULL;
    if (why)
        return mtc_error(MTC_ERR_UNSUPPORTED,
                         "SentencePiece model %s: no tokenizer.json written because %s (Llama-"
                         "style models are: BPE, identity, --remove_extra_whitespaces=false)",
                         path, why);
    spm_merge *mg = NULL;
    size_t n_mg = 0;
    mtc_result_t rc = spm_merges(p, &mg, &n_mg);
    if (rc != MTC_OK) return rc;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    cJSON *norm = typed("Sequence");
    cJSON *ns = cJSON_AddArrayToObject(norm, "normalizers");
    if (md.add_dummy_prefix) {
        cJSON *pre = typed("Prepend");
        cJSON_AddStringToObject(pre, "prepend", SEP);
        cJSON_AddItemToArray(ns, pre);
    }
    cJSON_AddItemToArray(ns, replace(" ", SEP));
    cJSON_AddItemToObject(root, "normalizer", norm);
    cJSON_AddNullToObject(root, "pre_tokenizer");
    cJSON_AddNullToObject(root, "post_processor");
    cJSON *dec = typed("Sequence");
    cJSON *ds = cJSON_AddArrayToObject(dec, "decoders");
    cJSON_AddItemToArray(ds, replace(SEP, " "));
    cJSON_AddItemToArray(ds, typed("ByteFallback"));
    cJSON_AddItemToArray(ds, typed("Fuse"));
    if (md.add_dummy_prefix) {
        cJSON *st = typed("Strip");
        cJSON_AddStringToObject(st, "content", " ");
        cJSON_AddNumberToObject(st, "start", 1);
        cJSON_AddNumberToObject(st, "stop", 0);
        cJSON_AddItemToArray(ds, st);
    }
    cJSON_AddItemToObject(root, "decoder", dec);
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    char *unk = piece_str(p, tok_spm_proc_unk(p));
    cJSON_AddStringToObject(model, "unk_token", unk ? unk : "<unk>");
    free(unk);
    cJSON_AddNullToObject(model, "continuing_subword_prefix");
    cJSON_AddNullToObject(model, "end_of_word_suffix");
    cJSON_AddBoolToObject(model, "fuse_unk", 1);
    cJSON_AddBoolToObject(model, "byte_fallback", md.byte_fallback);
    cJSON_AddBoolToObject(model, "ignore_merges", 0);
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    for (int id = 0; id < V && rc == MTC_OK; id++) {
        char *t = piece_str(p, id);
        if (!t) {
            rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory writing tokenizer.json");
            break;
        }
        cJSON_AddNumberToObject(vocab, t, id);
        if (md.type[id] == 2 || md.type[id] == 3) { /* unknown, control */
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "id", id);
            cJSON_AddStringToObject(e, "content", t);
            cJSON_AddBoolToObject(e, "single_word", 0);
            cJSON_AddBoolToObject(e, "lstrip", 0);
            cJSON_AddBoolToObject(e, "rstrip", 0);
            cJSON_AddBoolToObject(e, "normalized", 0);
            cJSON_AddBoolToObject(e, "special", 1);
            cJSON_AddItemToArray(added, e);
        }
        free(t);
    }
    for (int i = 0; i < tok_spm_n_special(s) && rc == MTC_OK; i++) {
        int id = -1;
        for (int k = 0; k < tok_spm_vocab_size(s) && id < 0; k++)
            if (tok_spm_special_index(s, k) == i) id = k;
        if (id < V) continue; /* a piece already */
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "id", id);
        cJSON_AddStringToObject(e, "content", tok_spm_special(s, i));
        cJSON_AddBoolToObject(e, "normalized", 0);
        cJSON_AddBoolToObject(e, "special", 1);
        cJSON_AddItemToArray(added, e);
    }
    for (size_t k = 0; k < n_mg && rc == MTC_OK; k++) {
        char *a = piece_str(p, mg[k].left), *b = piece_str(p, mg[k].right);
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateString(a ? a : ""));
        cJSON_AddItemToArray(pair, cJSON_CreateString(b ? b : ""));
        cJSON_AddItemToArray(merges, pair);
        if (!a || !b) rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory writing tokenizer.json");
        free(a), free(b);
    }
    if (rc == MTC_OK) {
        *json = cJSON_PrintUnformatted(root);
        if (!*json) rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory writing tokenizer.json");
    }
    cJSON_Delete(root);
    free(mg);
    return rc;
}

/* ---- GGUF ("llama") --------------------------------------------------------------- */

int data_tok_spm_piece_info(const data_tok *tok, int id, float *score, int *type) {
    const tok_spm *s = data_tok_spm(tok);
    if (!s || id < 0) return -1;
    const tok_spm_proc *p = tok_spm_processor(s);
    if (id >= tok_spm_proc_size(p)) { /* a legacy special token beyond the pieces */
        if (tok_spm_special_index(s, id) < 0) return -1;
        *score = 0, *type = 3;
        return 0;
    }
    *score = tok_spm_proc_score(p, id), *type = tok_spm_model_of(s)->type[id];
    return 0;
}

int data_tok_spm_add_space_prefix(const data_tok *tok) {
    const tok_spm *s = data_tok_spm(tok);
    return s && tok_spm_model_of(s)->add_dummy_prefix;
}

int data_tok_spm_unk(const data_tok *tok) {
    const tok_spm *s = data_tok_spm(tok);
    return s ? tok_spm_proc_unk(tok_spm_processor(s)) : -1;
}
