/* data/tok_bpe.c - running byte-level BPE as GPT-2 does (tok_bpe_load.c
 * loads the model).
 *
 *   text ──added tokens──▶ segments ──pre-tokenizer──▶ words (raw bytes)
 *        ──bytes──▶ one symbol per byte ──merge lowest rank pair, repeat──▶ ids
 *
 * The pre-tokenizer is GPT-2's regex written out by hand over code point
 * classes (unicode.h). Merges are looked up in the model's hash table keyed
 * by the two symbols' ids; a word's ids are remembered in the caller's
 * data_tok_cache, so threads share the model and never each other's cache. */
#include <stdlib.h>
#include <string.h>

#include "data/tok_bpe.h"
#include "data/unicode.h"

/* ---- growable buffers ----------------------------------------------------------- */

mtc_result_t data_tok_ids_push(data_tok_ids *v, int id) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 256;
        int *p = realloc(v->ids, cap * sizeof *p);
        if (!p) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory for %zu token ids", cap);
        v->ids = p, v->cap = cap;
    }
    v->ids[v->n++] = id;
    return MTC_OK;
}

mtc_result_t data_tok_text_append(data_tok_text *t, const void *s, size_t n) {
    if (t->n + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->n + n + 1)
            cap *= 2;
        char *p = realloc(t->s, cap);
        if (!p) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory for %zu bytes of text", cap);
        t->s = p, t->cap = cap;
    }
    if (n) memcpy(t->s + t->n, s, n);
    t->n += n;
    t->s[t->n] = '\0';
    return MTC_OK;
}

/* ---- tables (shared with tok_bpe_load.c) ---------------------------------------- */

int tok_bpe_find(const tok_bpe *m, const unsigned char *s, size_t n) {
    if (!m->tok_cap) return -1;
    size_t mask = m->tok_cap - 1;
    for (size_t i = tok_bpe_hash(s, n) & mask;; i = (i + 1) & mask) {
        int slot = m->tok_slot[i];
        if (!slot) return -1;
        int id = slot - 1;
        if ((size_t)m->len[id] == n && !memcmp(m->bytes[id], s, n)) return id;
    }
}

/* Index of the (left, right) slot: either holding that key or empty. */
size_t tok_bpe_merge_slot(const tok_bpe *m, int left, int right) {
    uint64_t key = ((uint64_t)(uint32_t)left << 32 | (uint32_t)right) + 1;
    size_t mask = m->merge_cap - 1;
    size_t i = tok_bpe_hash_u64(key) & mask;
    while (m->merge_key[i] && m->merge_key[i] != key)
        i = (i + 1) & mask;
    return i;
}

/* ---- pre-tokenizer --------------------------------------------------------------- */

static data_unicode_class class_at(const unsigned char *s, size_t n, size_t i, size_t *len) {
    uint32_t cp;
    *len = data_unicode_decode(s + i, n - i, &cp);
    return cp >= DATA_UNICODE_RAW_BASE ? DATA_UNICODE_OTHER : data_unicode_class_of(cp);
}

/* End of the run of class c starting at i. */
static size_t run_end(const unsigned char *s, size_t n, size_t i, data_unicode_class c) {
    while (i < n) {
        size_t len;
        if (class_at(s, n, i, &len) != c) break;
        i += len;
    }
    return i;
}

/* Length of the piece starting at s[i] (i < n): the regex's leftmost
 * alternative that matches, each greedy. */
static size_t piece_len(const unsigned char *s, size_t n, size_t i) {
    if (s[i] == '\'' && i + 1 < n) { /* 's|'t|'re|'ve|'m|'ll|'d */
        unsigned char a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
    size_t len, start = i;
    data_unicode_class c = class_at(s, n, i, &len);
    if (s[i] == ' ' && i + 1 < n) { /* ' ?' before \p{L}+, \p{N}+ or [^\s\p{L}\p{N}]+ */
        size_t len2;
        data_unicode_class c2 = class_at(s, n, i + 1, &len2);
        if (c2 != DATA_UNICODE_SPACE) return run_end(s, n, i + 1, c2) - start;
    }
    if (c != DATA_UNICODE_SPACE) return run_end(s, n, i, c) - start;
    /* \s+(?!\S) then \s+: a run of white space, less its last character when
     * something other than white space follows and the run is longer than one */
    size_t end = i, last = i;
    while (end < n) {
        if (class_at(s, n, end, &len) != DATA_UNICODE_SPACE) break;
        last = end;
        end += len;
    }
    if (end < n && last > start) return last - start;
    return end - start;
}

mtc_result_t data_tok_pretokenize(const char *text, size_t n, data_tok_ids *lengths) {
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < n;) {
        size_t len = piece_len(s, n, i);
        MTC_CHECK(data_tok_ids_push(lengths, (int)len));
        i += len;
    }
    return MTC_OK;
}

/* ---- word cache ------------------------------------------------------------------ */

struct data_tok_cache {
    /* open addressing over entries; arena holds key bytes then ids */
    struct cache_entry {
        uint64_t hash;
        size_t off; /* into arena */
        int key_len, n_ids;
    } * slots;
    size_t cap, used;
    unsigned char *arena;
    size_t arena_n, arena_cap;
};

enum { CACHE_SLOTS = 1 << 16, CACHE_ARENA = 8 << 20, CACHE_MAX_WORD = 256 };

data_tok_cache *data_tok_cache_init(void) {
    data_tok_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->cap = CACHE_SLOTS;
    c->slots = calloc(c->cap, sizeof *c->slots);
    c->arena_cap = CACHE_ARENA;
    c->arena = malloc(c->arena_cap);
    if (!c->slots || !c->arena) {
        data_tok_cache_free(c);
        return NULL;
    }
    return c;
}

void data_tok_cache_free(data_tok_cache *c) {
    if (!c) return;
    free(c->slots), free(c->arena), free(c);
}

static const int *cache_get(const data_tok_cache *c, const unsigned char *w, size_t n, uint64_t h,
                            int *n_ids) {
    size_t mask = c->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        const struct cache_entry *e = &c->slots[i];
        if (!e->key_len) return NULL;
        if (e->hash == h && (size_t)e->key_len == n && !memcmp(c->arena + e->off, w, n)) {
            *n_ids = e->n_ids;
            return (const int *)(c->arena + e->off + ((n + 7) & ~(size_t)7));
        }
    }
}

static void cache_put(data_tok_cache *c, const unsigned char *w, size_t n, uint64_t h,
                      const int *ids, int n_ids) {
    size_t key_room = (n + 7) & ~(size_t)7, need = key_room + (size_t)n_ids * sizeof(int);
    need = (need + 7) & ~(size_t)7;
    if (c->used * 2 >= c->cap || c->arena_n + need > c->arena_cap) { /* full: start over */
        memset(c->slots, 0, c->cap * sizeof *c->slots);
        c->used = 0, c->arena_n = 0;
    }
    size_t mask = c->cap - 1, i = h & mask;
    while (c->slots[i].key_len)
        i = (i + 1) & mask;
    memcpy(c->arena + c->arena_n, w, n);
    memcpy(c->arena + c->arena_n + key_room, ids, (size_t)n_ids * sizeof(int));
    c->slots[i] = (struct cache_entry){h, c->arena_n, (int)n, n_ids};
    c->arena_n += need;
    c->used++;
}

/* ---- BPE ------------------------------------------------------------------------- */

/* ids of one word (raw bytes) appended to out. */
static mtc_result_t bpe_word(const tok_bpe *m, data_tok_cache *cache, const unsigned char *w,
                             size_t n, data_tok_ids *out) {
    uint64_t h = 0;
    if (cache && n <= CACHE_MAX_WORD) {
        h = tok_bpe_hash(w, n);
        int k;
        const int *hit = cache_get(cache, w, n, h, &k);
        if (hit) {
            for (int i = 0; i < k; i++)
                MTC_CHECK(data_tok_ids_push(out, hit[i]));
            return MTC_OK;
        }
    }
    if (m->ignore_merges) {
        int id = tok_bpe_find(m, w, n);
        if (id >= 0) return data_tok_ids_push(out, id);
    }
    int local[CACHE_MAX_WORD], *sym = n <= CACHE_MAX_WORD ? local : malloc(n * sizeof(int));
    if (!sym) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory for a %zu-byte word", n);
    size_t k = n;
    for (size_t i = 0; i < n; i++) {
        sym[i] = m->byte_id[w[i]];
        if (sym[i] < 0) {
            if (sym != local) free(sym);
            return mtc_error(MTC_ERR_FORMAT,
                             "the vocabulary has no token for byte 0x%02x, so this text cannot "
                             "be encoded (a byte-level vocabulary has all 256)",
                             w[i]);
        }
    }
    while (k > 1) {
        int best_rank = -1, best_left = 0, best_right = 0, best_id = 0;
        for (size_t i = 0; i + 1 < k; i++) {
            size_t s = tok_bpe_merge_slot(m, sym[i], sym[i + 1]);
            if (m->merge_key[s] && (best_rank < 0 || m->merge_rank[s] < best_rank))
                best_rank = m->merge_rank[s], best_left = sym[i], best_right = sym[i + 1],
                best_id = m->merge_id[s];
        }
        if (best_rank < 0) break;
        size_t w2 = 0; /* merge every occurrence, left to right, as GPT-2 */
        for (size_t i = 0; i < k; i++) {
            if (i + 1 < k && sym[i] == best_left && sym[i + 1] == best_right)
                sym[w2++] = best_id, i++;
            else
                sym[w2++] = sym[i];
        }
        k = w2;
    }
    mtc_result_t rc = MTC_OK;
    for (size_t i = 0; i < k && rc == MTC_OK; i++)
        rc = data_tok_ids_push(out, sym[i]);
    if (rc == MTC_OK && cache && n <= CACHE_MAX_WORD) cache_put(cache, w, n, h, sym, (int)k);
    if (sym != local) free(sym);
    return rc;
}

/* A segment without added tokens: pre-tokenize, then BPE each word. */
static mtc_result_t bpe_segment(const tok_bpe *m, data_tok_cache *cache, const unsigned char *s,
                                size_t n, data_tok_ids *out) {
    if (n == 0) return MTC_OK;
    if (m->add_prefix_space && s[0] != ' ') {
        unsigned char *p = malloc(n + 1);
        if (!p) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory encoding %zu bytes", n);
        p[0] = ' ';
        memcpy(p + 1, s, n);
        mtc_result_t rc = MTC_OK;
        for (size_t i = 0; i < n + 1 && rc == MTC_OK;) {
            size_t len = piece_len(p, n + 1, i);
            rc = bpe_word(m, cache, p + i, len, out);
            i += len;
        }
        free(p);
        return rc;
    }
    for (size_t i = 0; i < n;) {
        size_t len = piece_len(s, n, i);
        MTC_CHECK(bpe_word(m, cache, s + i, len, out));
        i += len;
    }
    return MTC_OK;
}

mtc_result_t tok_bpe_encode(const tok_bpe *m, data_tok_cache *cache, const char *text, size_t n,
                            data_tok_ids *out) {
    const unsigned char *s = (const unsigned char *)text;
    for (int i = 0; i < m->n_prefix; i++)
        MTC_CHECK(data_tok_ids_push(out, m->prefix[i]));
    size_t seg = 0;
    for (size_t i = 0; i < n && m->n_added;) {
        int best = -1;
        for (int a = 0; a < m->n_added; a++) /* longest added token starting here */
            if (s[i] == m->added[a][0] && (size_t)m->added_len[a] <= n - i &&
                !memcmp(s + i, m->added[a], (size_t)m->added_len[a]) &&
                (best < 0 || m->added_len[a] > m->added_len[best]))
                best = a;
        if (best < 0) {
            i++;
            continue;
        }
        MTC_CHECK(bpe_segment(m, cache, s + seg, i - seg, out));
        MTC_CHECK(data_tok_ids_push(out, m->added_id[best]));
        i += (size_t)m->added_len[best];
        seg = i;
    }
    MTC_CHECK(bpe_segment(m, cache, s + seg, n - seg, out));
    for (int i = 0; i < m->n_suffix; i++)
        MTC_CHECK(data_tok_ids_push(out, m->suffix[i]));
    return MTC_OK;
}

mtc_result_t tok_bpe_decode(const tok_bpe *m, const int *ids, size_t n, data_tok_text *out,
                            size_t *unknown) {
    for (size_t i = 0; i < n; i++) {
        int id = ids[i];
        if (id < 0 || id >= m->n_ids || !m->bytes[id]) {
            if (unknown) (*unknown)++;
            continue;
        }
        MTC_CHECK(data_tok_text_append(out, m->bytes[id], (size_t)m->len[id]));
    }
    return MTC_OK;
}
