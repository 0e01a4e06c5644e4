/* data/tok_tiktoken.c - Megatron core 0.18's TikTokenizer
 * (megatron/core/tokenizers/text/libraries/tiktoken_tokenizer.py), without
 * the tiktoken library: the same vocabulary, split pattern and merge rule.
 *
 *   vocabulary   a JSON list [{"rank": i, "token_bytes": base64,
 *                "token_str": ...}], rank = position, entries < 256 the
 *                single bytes in order; the first vocab_size - num_special
 *                entries are used (--vocab-size, default 131072)
 *   ids          0 .. num_special-1: the special tokens (<unk> <s> </s>
 *                <mask> <pad> <cls> <sep>, or --tokenizer-special-tokens,
 *                then <SPECIAL_i> fillers); file entry r is id r + num_special
 *   eod = eos    the id of "</s>" (2 by default); bos the id of "<s>"
 *
 *   text ──special tokens (all allowed)──▶ segments ──v1/v2 pattern──▶ pieces
 *        ──a piece in the vocabulary: its id; else bytes, merge the adjacent
 *          pair whose concatenation has the lowest rank (leftmost on ties),
 *          repeat──▶ ids
 *
 * The patterns are matched by hand (split_v1 / split_v2 below), each
 * alternative as the backtracking regex would, over the categories of
 * tok_ucat.h; \s is White_Space as in Rust's regex. Bytes that are not
 * UTF-8 count as "other" characters (Python's tiktoken never sees them).
 * Limitations: no vocabulary in tiktoken's own base64-lines format (Megatron
 * reads only its JSON list). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include "data/stream.h"
#include "data/tok_bpe.h"
#include "data/tok_ext.h"
#include "data/tok_ucat.h"
#include "data/unicode.h"

static const char *const DEFAULT_SPECIAL[] = {"<unk>", "<s>",   "</s>", "<mask>",
                                              "<pad>", "<cls>", "<sep>"};
enum { N_DEFAULT_SPECIAL = 7 };

struct tok_tt {
    int v2, num_special, vocab_size, bos, eos;
    int n_ranks;           /* vocabulary entries used: ids num_special.. */
    unsigned char **bytes; /* rank -> bytes */
    int *len;
    int *slot; /* bytes -> rank + 1, open addressing */
    size_t cap;
    char **special; /* num_special texts */
    size_t *special_len;
    uint64_t first[4]; /* bit set: the first bytes of the special tokens */
};

static mtc_result_t tt_oom(void) {
    return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory for a TikTokenizer");
}

static int rank_of(const tok_tt *t, const unsigned char *s, size_t n) {
    size_t mask = t->cap - 1;
    for (size_t i = tok_bpe_hash(s, n) & mask;; i = (i + 1) & mask) {
        int r = t->slot[i] - 1;
        if (r < 0) return -1;
        if ((size_t)t->len[r] == n && !memcmp(t->bytes[r], s, n)) return r;
    }
}

static int b64val(int c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Standard base64 (with '=' padding) into out (room for 3/4 of the text). */
static int b64_decode(const char *s, unsigned char *out) {
    int n = 0, acc = 0, bits = 0;
    for (; *s && *s != '='; s++) {
        int v = b64val((unsigned char)*s);
        if (v < 0) return -1;
        acc = (acc << 6 | v) & 0xffffff, bits += 6;
        if (bits >= 8) bits -= 8, out[n++] = (unsigned char)(acc >> bits & 0xff);
    }
    return n;
}

static mtc_result_t load_vocab(tok_tt *t, const char *path, int want) {
    unsigned char *buf = NULL;
    size_t n = 0;
    MTC_CHECK(data_file_read(path, &buf, &n));
    cJSON *j = cJSON_ParseWithLength((const char *)buf, n);
    free(buf);
    mtc_result_t rc = MTC_OK;
    if (!cJSON_IsArray(j)) {
        cJSON_Delete(j);
        return mtc_error(MTC_ERR_FORMAT,
                         "--tokenizer-model %s is not a JSON list of {rank, token_bytes, "
                         "token_str} (Megatron's TikTokenizer vocabulary)",
                         path);
    }
    int have = cJSON_GetArraySize(j);
    if (have < want) {
        cJSON_Delete(j);
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "--tokenizer-model %s has %d entries but vocab-size %d - "
                         "tiktoken-num-special-tokens %d = %d are needed (pass --vocab-size %d)",
                         path, have, t->vocab_size, t->num_special, want, have + t->num_special);
    }
    t->bytes = calloc((size_t)want, sizeof *t->bytes);
    t->len = calloc((size_t)want, sizeof *t->len);
    for (t->cap = 16; t->cap < 2 * (size_t)want; t->cap *= 2) {
    }
    t->slot = calloc(t->cap, sizeof *t->slot);
    if (!t->bytes || !t->len || !t->slot) {
        cJSON_Delete(j);
        return tt_oom();
    }
    int i = 0;
    for (const cJSON *e = j->child; e && i < want && rc == MTC_OK; e = e->next, i++) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(e, "rank");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "token_bytes");
        if (!cJSON_IsNumber(r) || r->valuedouble != i || !cJSON_IsString(b)) {
            rc = mtc_error(MTC_ERR_FORMAT,
                           "--tokenizer-model %s: entry %d needs \"rank\": %d and a base64 "
                           "\"token_bytes\"",
                           path, i, i);
            break;
        }
        size_t bl = strlen(b->valuestring);
        t->bytes[i] = malloc(bl / 4 * 3 + 3);
        if (!t->bytes[i]) {
            rc = tt_oom();
            break;
        }
        t->n_ranks = i + 1; /* owned from here on, whatever follows (tok_tt_free) */
        int k = b64_decode(b->valuestring, t->bytes[i]);
        if (k <= 0 || (i < 256 && (k != 1 || t->bytes[i][0] != i))) {
            rc = mtc_error(MTC_ERR_FORMAT,
                           "--tokenizer-model %s: entry %d's token_bytes %.20s is %s", path, i,
                           b->valuestring,
                           k <= 0 ? "not base64 of at least one byte"
                                  : "not the single byte of its rank (entries 0..255 must be)");
            break;
        }
        t->len[i] = k;
        size_t mask = t->cap - 1, s = tok_bpe_hash(t->bytes[i], (size_t)k) & mask;
        int dup = 0;
        for (; t->slot[s]; s = (s + 1) & mask) {
            int o = t->slot[s] - 1;
            if (t->len[o] == k && !memcmp(t->bytes[o], t->bytes[i], (size_t)k)) dup = 1;
        }
        if (dup) {
            rc = mtc_error(MTC_ERR_FORMAT, "--tokenizer-model %s: entry %d repeats a token", path,
                           i);
            break;
        }
        t->slot[s] = i + 1;
    }
    cJSON_Delete(j);
    return rc;
}

mtc_result_t tok_tt_open(const char *path, const char *pattern, int num_special, int vocab_size,
                         const char *const *special, int n_special, tok_tt **out) {
    *out = NULL;
    int v2 = !strcmp(pattern, "v2");
    if (!v2 && strcmp(pattern, "v1"))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "--tiktoken-pattern %s is unknown (use v1 or v2)", pattern);
    if (n_special == 0) special = DEFAULT_SPECIAL, n_special = N_DEFAULT_SPECIAL;
    if (num_special < n_special || num_special >= vocab_size)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "tiktoken-num-special-tokens=%d must be >= the %d special tokens and < "
                         "vocab-size %d",
                         num_special, n_special, vocab_size);
    for (int k = 0; k < N_DEFAULT_SPECIAL; k++) {
        int found = 0;
        for (int i = 0; i < n_special; i++)
            found |= !strcmp(special[i], DEFAULT_SPECIAL[k]);
        if (!found)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "--tokenizer-special-tokens lacks %s (TikTokenizer needs <unk> <s> "
                             "</s> <mask> <pad> <cls> <sep> among them)",
                             DEFAULT_SPECIAL[k]);
    }
    tok_tt *t = calloc(1, sizeof *t);
    if (!t) return tt_oom();
    t->v2 = v2, t->num_special = num_special, t->vocab_size = vocab_size;
    t->special = calloc((size_t)num_special, sizeof *t->special);
    t->special_len = calloc((size_t)num_special, sizeof *t->special_len);
    mtc_result_t rc = MTC_OK;
    if (!t->special || !t->special_len) {
        rc = tt_oom();
        goto fail;
    }
    for (int i = 0; i < num_special; i++) {
        char filler[32];
        snprintf(filler, sizeof filler, "<SPECIAL_%d>", i);
        const char *s = i < n_special ? special[i] : filler;
        for (int k = 0; k < i; k++)
            if (!strcmp(t->special[k], s)) {
                rc = mtc_error(MTC_ERR_INVALID_ARGUMENT,
                               "special token %s appears twice (they must be unique)", s);
                goto fail;
            }
        if (!*s) {
            rc = mtc_error(MTC_ERR_INVALID_ARGUMENT, "special token %d is empty", i);
            goto fail;
        }
        t->special_len[i] = strlen(s);
        t->special[i] = malloc(t->special_len[i] + 1);
        if (!t->special[i]) {
            rc = tt_oom();
            goto fail;
        }
        memcpy(t->special[i], s, t->special_len[i] + 1);
        t->first[(unsigned char)s[0] >> 6] |= 1ull << ((unsigned char)s[0] & 63);
        if (!strcmp(s, "<s>")) t->bos = i;
        if (!strcmp(s, "</s>")) t->eos = i;
    }
    MTC_CHECK_GOTO(load_vocab(t, path, vocab_size - num_special), rc, fail);
    *out = t;
    return MTC_OK;
fail:
    tok_tt_free(t);
    return rc;
}

void tok_tt_free(tok_tt *t) {
    if (!t) return;
    for (int i = 0; t->bytes && i < t->n_ranks; i++)
        free(t->bytes[i]);
    for (int i = 0; t->special && i < t->num_special; i++)
        free(t->special[i]);
    free(t->bytes), free(t->len), free(t->slot), free(t->special), free(t->special_len);
    free(t);
}

int tok_tt_vocab_size(const tok_tt *t) { return t->vocab_size; }
int tok_tt_eod(const tok_tt *t) { return t->eos; }
int tok_tt_bos(const tok_tt *t) { return t->bos; }
int tok_tt_num_special(const tok_tt *t) { return t->num_special; }
const char *tok_tt_pattern(const tok_tt *t) { return t->v2 ? "v2" : "v1"; }

int tok_tt_piece(const tok_tt *t, int id, const unsigned char **out) {
    *out = NULL;
    if (id < 0 || id >= t->num_special + t->n_ranks) return -1;
    if (id < t->num_special) {
        *out = (const unsigned char *)t->special[id];
        return (int)t->special_len[id];
    }
    *out = t->bytes[id - t->num_special];
    return t->len[id - t->num_special];
}

/* ---- the split patterns ---------------------------------------------------------- */

typedef struct {
    const unsigned char *s;
    size_t n;
} text_t;

/* category of the character at i (and its length) */
static tok_ucat cat_at(text_t x, size_t i, size_t *len) {
    uint32_t cp;
    *len = data_unicode_decode(x.s + i, x.n - i, &cp);
    return cp >= DATA_UNICODE_RAW_BASE ? TOK_UCAT_OTHER : tok_ucat_of(cp);
}
/* the classes as bit sets over tok_ucat (one table test each) */
#define UC(c) (1u << TOK_UCAT_##c)
enum {
    SET_LETTER = UC(LU) | UC(LL) | UC(LT) | UC(LM) | UC(LO),
    SET_UPPER =
        UC(LU) | UC(LT) | UC(LM) | UC(LO) | UC(M), /* v2's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] */
    SET_LOWER = UC(LL) | UC(LM) | UC(LO) | UC(M),  /* v2's [\p{Ll}\p{Lm}\p{Lo}\p{M}] */
    SET_LN = SET_LETTER | UC(N),
    SET_SLN = SET_LN | UC(SPACE),
};
#undef UC
static int in_set(unsigned set, tok_ucat c) { return (int)(set >> (unsigned)c & 1u); }
static int is_letter(tok_ucat c) { return in_set(SET_LETTER, c); }
static int is_crlf(text_t x, size_t i) { return x.s[i] == '\r' || x.s[i] == '\n'; }
/* [^\r\n\p{L}\p{N}] */
static int is_p(text_t x, size_t i, tok_ucat c) { return !is_crlf(x, i) && !in_set(SET_LN, c); }
/* [^\s\p{L}\p{N}] */
static int is_q(tok_ucat c) { return !in_set(SET_SLN, c); }
static int is_upper(tok_ucat c) { return in_set(SET_UPPER, c); }
static int is_lower(tok_ucat c) { return in_set(SET_LOWER, c); }

/* end of the run from i of characters that pred accepts */
static size_t run(text_t x, size_t i, int (*pred)(tok_ucat)) {
    while (i < x.n) {
        size_t l;
        if (!pred(cat_at(x, i, &l))) break;
        i += l;
    }
    return i;
}
static int pred_letter(tok_ucat c) { return is_letter(c); }
static int pred_space(tok_ucat c) { return c == TOK_UCAT_SPACE; }

/* the white space alternatives both patterns end with:
 * \s*[\r\n]+ (v1: \s*[\r\n]) | \s+(?!\S) | \s+ ; 0 when none matches */
static size_t space_tail(text_t x, size_t i) {
    size_t e = run(x, i, pred_space);
    if (e == i) return 0;
    /* \s*[\r\n]: the greedy \s* gives back up to the last \r or \n of the run */
    size_t last = (size_t)-1;
    for (size_t k = i; k < e; k++)
        if (is_crlf(x, k)) last = k;
    if (last != (size_t)-1) return last + 1 - i;
    if (e == x.n) return e - i; /* \s+(?!\S) at the end */
    size_t prev = e - 1;        /* the last white space character starts here */
    while (prev > i && (x.s[prev] & 0xc0) == 0x80)
        prev--;
    if (prev > i) return prev - i; /* \s+(?!\S): all but the last */
    return e - i;                  /* \s+ */
}

/* ` ?[^\s\p{L}\p{N}]+` then [\r\n]* (v1) or [\r\n/]* (v2); 0 when none */
static size_t punct(text_t x, size_t i, int v2) {
    size_t j = i < x.n && x.s[i] == ' ' ? i + 1 : i, l;
    if (j >= x.n || !is_q(cat_at(x, j, &l))) return 0;
    size_t e = j;
    while (e < x.n && is_q(cat_at(x, e, &l)))
        e += l;
    while (e < x.n && (is_crlf(x, e) || (v2 && x.s[e] == '/')))
        e++;
    return e - i;
}

static size_t match_v1(text_t x, size_t i) {
    size_t l, l2;
    tok_ucat c = cat_at(x, i, &l);
    /* [^\r\n\p{L}\p{N}]?+\p{L}+ */
    size_t j = is_p(x, i, c) ? i + l : i;
    if (j < x.n && is_letter(cat_at(x, j, &l2))) return run(x, j, pred_letter) - i;
    if (c == TOK_UCAT_N) return l; /* \p{N} */
    size_t m = punct(x, i, 0);
    if (m) return m;
    m = space_tail(x, i);
    return m ? m : l;
}

/* [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+ from j: the
 * greedy first part gives back characters until the second can start */
static size_t upper_lower(text_t x, size_t j) {
    size_t k = j, l = 0, cand = (size_t)-1;
    while (k < x.n) { /* the last start of the second part within the first's run, or after it */
        tok_ucat c = cat_at(x, k, &l);
        if (is_lower(c)) cand = k;
        if (!is_upper(c)) break;
        k += l;
    }
    if (cand == (size_t)-1) return 0;
    while (cand < x.n && is_lower(cat_at(x, cand, &l)))
        cand += l;
    return cand;
}

static size_t match_v2(text_t x, size_t i) {
    size_t l, l2;
    tok_ucat c = cat_at(x, i, &l);
    size_t js[2] = {i + l, i};
    int first = is_p(x, i, c) ? 0 : 1;
    /* [^\r\n\p{L}\p{N}]?[Lu Lt Lm Lo M]*[Ll Lm Lo M]+ */
    for (int a = first; a < 2; a++) {
        size_t e = upper_lower(x, js[a]);
        if (e) return e - i;
    }
    /* [^\r\n\p{L}\p{N}]?[Lu Lt Lm Lo M]+[Ll Lm Lo M]* */
    for (int a = first; a < 2; a++) {
        size_t j = js[a];
        if (j >= x.n || !is_upper(cat_at(x, j, &l2))) continue;
        while (j < x.n && is_upper(cat_at(x, j, &l2)))
            j += l2;
        while (j < x.n && is_lower(cat_at(x, j, &l2)))
            j += l2;
        return j - i;
    }
    if (c == TOK_UCAT_N) return l; /* \p{N} */
    size_t m = punct(x, i, 1);
    if (m) return m;
    m = space_tail(x, i);
    return m ? m : l;
}

mtc_result_t tok_tt_split(const tok_tt *t, const char *text, size_t n, data_tok_ids *lengths) {
    text_t x = {(const unsigned char *)text, n};
    for (size_t i = 0; i < n;) {
        size_t m = t->v2 ? match_v2(x, i) : match_v1(x, i);
        MTC_CHECK(data_tok_ids_push(lengths, (int)m));
        i += m;
    }
    return MTC_OK;
}

/* ---- byte pair merging ------------------------------------------------------------ */

/* ids of one piece: its own id, or tiktoken's lowest-rank-pair merging */
static mtc_result_t encode_piece(const tok_tt *t, const unsigned char *p, size_t n,
                                 data_tok_ids *out) {
    int r = rank_of(t, p, n);
    if (r >= 0) return data_tok_ids_push(out, r + t->num_special);
    size_t *start = malloc((n + 1) * sizeof *start);
    if (!start) return tt_oom();
    size_t parts = n;
    for (size_t i = 0; i <= n; i++)
        start[i] = i; /* part k is [start[k], start[k+1]) */
    while (parts > 1) {
        int best = -1;
        size_t at = 0;
        for (size_t k = 0; k + 1 < parts; k++) {
            int rk = rank_of(t, p + start[k], start[k + 2] - start[k]);
            if (rk >= 0 && (best < 0 || rk < best)) best = rk, at = k;
        }
        if (best < 0) break;
        memmove(start + at + 1, start + at + 2, (parts - at - 1) * sizeof *start);
        parts--;
    }
    mtc_result_t rc = MTC_OK;
    for (size_t k = 0; k < parts && rc == MTC_OK; k++) {
        int rk = rank_of(t, p + start[k], start[k + 1] - start[k]);
        /* every single byte has a rank (entries 0..255), so rk >= 0 */
        rc = data_tok_ids_push(out, rk + t->num_special);
    }
    free(start);
    return rc;
}

static mtc_result_t encode_segment(const tok_tt *t, const char *s, size_t n, data_tok_ids *out) {
    text_t x = {(const unsigned char *)s, n};
    for (size_t i = 0; i < n;) {
        size_t m = t->v2 ? match_v2(x, i) : match_v1(x, i);
        MTC_CHECK(encode_piece(t, x.s + i, m, out));
        i += m;
    }
    return MTC_OK;
}

mtc_result_t tok_tt_encode(const tok_tt *t, const char *text, size_t n, data_tok_ids *out) {
    size_t idx = 0;
    for (;;) { /* Megatron: allowed_special="all", the leftmost special token first */
        int best = -1;
        size_t at = idx;
        for (; at < n && best < 0; at++) {
            if (!(t->first[(unsigned char)text[at] >> 6] >> ((unsigned char)text[at] & 63) & 1))
                continue;
            for (int k = 0; k < t->num_special; k++) /* the longest one starting here */
                if (t->special_len[k] <= n - at &&
                    !memcmp(text + at, t->special[k], t->special_len[k]) &&
                    (best < 0 || t->special_len[k] > t->special_len[best]))
                    best = k;
        }
        if (best < 0) break;
        at--;
        MTC_CHECK(encode_segment(t, text + idx, at - idx, out));
        MTC_CHECK(data_tok_ids_push(out, best));
        idx = at + t->special_len[best];
    }
    return encode_segment(t, text + idx, n - idx, out);
}

mtc_result_t tok_tt_decode(const tok_tt *t, const int *ids, size_t n, data_tok_text *out,
                           size_t *unknown) {
    MTC_CHECK(data_tok_text_append(out, "", 0));
    for (size_t i = 0; i < n; i++) {
        const unsigned char *b;
        int len = tok_tt_piece(t, ids[i], &b);
        if (len < 0) {
            if (unknown) (*unknown)++;
            continue;
        }
        MTC_CHECK(data_tok_text_append(out, b, (size_t)len));
    }
    return MTC_OK;
}

/* ---- merges for exporters -------------------------------------------------------- */

mtc_result_t tok_tt_merges(const tok_tt *t, int **pairs, size_t *n) {
    *pairs = NULL, *n = 0;
    size_t cap = 0, k = 0;
    int *p = NULL;
    for (int r = 256; r < t->n_ranks; r++) {
        size_t first = k;
        for (int cut = 1; cut < t->len[r]; cut++) {
            int a = rank_of(t, t->bytes[r], (size_t)cut);
            int b = rank_of(t, t->bytes[r] + cut, (size_t)(t->len[r] - cut));
            if (a < 0 || b < 0) continue;
            if (k == cap) {
                cap = cap ? 2 * cap : 1024;
                int *q = realloc(p, 2 * cap * sizeof *q);
                if (!q) {
                    free(p);
                    return tt_oom();
                }
                p = q;
            }
            p[2 * k] = a + t->num_special, p[2 * k + 1] = b + t->num_special, k++;
        }
        /* within one token: by the left part's rank, then the right's (insertion sort:
         * a token has few splits) */
        for (size_t i = first + 1; i < k; i++)
            for (size_t j = i;
                 j > first && (p[2 * j - 2] > p[2 * j] ||
                               (p[2 * j - 2] == p[2 * j] && p[2 * j - 1] > p[2 * j + 1]));
                 j--) {
                int a = p[2 * j], b = p[2 * j + 1];
                p[2 * j] = p[2 * j - 2], p[2 * j + 1] = p[2 * j - 1];
                p[2 * j - 2] = a, p[2 * j - 1] = b;
            }
    }
    *pairs = p, *n = k;
    return MTC_OK;
}

const char *tok_tt_regex(const tok_tt *t) {
    /* Megatron's patterns, v1's possessive ?+ and ++ written greedy (JavaScript has no
     * possessive quantifiers; these match the same, as tiktoken_ref.js explains) */
    return t->v2
               ? "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}"
                 "\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{"
                 "Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|"
                 "\\s+(?!\\S)|\\s+"
               : "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|"
                 "\\s+(?!\\S)|\\s+";
}
