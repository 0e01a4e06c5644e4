/* data/tok_bpe_load.c - loading byte-level BPE from GPT-2's vocab.json +
 * merges.txt or from a Hugging Face tokenizer.json (tok_bpe.c runs it).
 *
 * Vocabulary strings are stored in GPT-2's bytes-to-unicode spelling (each
 * byte is a printable code point: '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF
 * stand for themselves, the other 68 bytes are U+0100.. in byte order); they
 * are turned back into raw bytes at load, so the model works on bytes.
 * Merges are stored by the two symbols' token ids with their rank and result.
 * Limitations: a tokenizer.json with a normalizer, a non-ByteLevel
 * pre-tokenizer, byte fallback, subword prefixes/suffixes or a post-processor
 * other than ByteLevel/TemplateProcessing is refused, not approximated; added
 * tokens' lstrip/rstrip/single_word flags are ignored. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/stream.h"
#include "core/outfile.h"
#include "data/tok_bpe.h"
#include "data/unicode.h"

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n)
        c *= 2;
    return c;
}

/* ---- GPT-2's bytes-to-unicode map ------------------------------------------------ */

/* byte_of_cp[cp] for cp < 324: the byte that code point spells, -1 if none. */
static void byte_unicode_tables(int byte_of_cp[324]) {
    for (int c = 0; c < 324; c++)
        byte_of_cp[c] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
        byte_of_cp[printable ? b : 256 + extra++] = b;
    }
}

/* A vocabulary string in byte-level spelling -> raw bytes (malloc'd). */
static mtc_result_t unspell(const char *s, const int byte_of_cp[324], unsigned char **out,
                            int *out_len) {
    size_t n = strlen(s), w = 0;
    unsigned char *b = malloc(n + 1);
    if (!b) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory loading a vocabulary");
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += data_unicode_decode((const unsigned char *)s + i, n - i, &cp);
        if (cp >= 324 || byte_of_cp[cp] < 0) {
            free(b);
            return MTC_ERR_FORMAT; /* caller names the file and token */
        }
        b[w++] = (unsigned char)byte_of_cp[cp];
    }
    *out = b, *out_len = (int)w;
    return MTC_OK;
}

/* ---- tables --------------------------------------------------------------------- */

static void tok_insert(tok_bpe *m, int id) {
    size_t mask = m->tok_cap - 1;
    size_t i = tok_bpe_hash(m->bytes[id], (size_t)m->len[id]) & mask;
    while (m->tok_slot[i])
        i = (i + 1) & mask;
    m->tok_slot[i] = id + 1;
}

/* Sets an id's bytes (takes ownership). Duplicate strings are a format error. */
static mtc_result_t set_token(tok_bpe *m, int id, unsigned char *b, int len) {
    if (m->bytes[id]) {
        free(b);
        return MTC_ERR_FORMAT;
    }
    m->bytes[id] = b, m->len[id] = len;
    return MTC_OK;
}

static mtc_result_t alloc_ids(tok_bpe *m, int n_ids) {
    m->n_ids = n_ids;
    m->bytes = calloc((size_t)n_ids, sizeof *m->bytes);
    m->len = calloc((size_t)n_ids, sizeof *m->len);
    if (!m->bytes || !m->len)
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory for %d tokens", n_ids);
    return MTC_OK;
}

/* vocab: a JSON object string -> id. Fills bytes/len and the lookup table. */
static mtc_result_t load_vocab(tok_bpe *m, const cJSON *vocab, const cJSON *added,
                               const char *name) {
    int byte_of_cp[324];
    byte_unicode_tables(byte_of_cp);
    int max_id = -1, count = 0;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 1e8 ||
            e->valuedouble != (int)e->valuedouble)
            return mtc_error(MTC_ERR_FORMAT,
                             "%s: vocabulary entry \"%.40s\" is not a non-negative integer id",
                             name, e->string);
        if (e->valueint > max_id) max_id = e->valueint;
        count++;
    }
    for (const cJSON *a = added ? added->child : NULL; a; a = a->next) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(a, "content");
        if (!cJSON_IsNumber(id) || id->valueint < 0 || id->valueint > 100000000 ||
            !cJSON_IsString(content) || !content->valuestring[0])
            return mtc_error(MTC_ERR_FORMAT,
                             "%s: added_tokens entries need an integer \"id\" and a non-empty "
                             "\"content\"",
                             name);
        if (id->valueint > max_id) max_id = id->valueint;
    }
    if (count == 0) return mtc_error(MTC_ERR_FORMAT, "%s: the vocabulary is empty", name);
    /* ids are dense in every real vocabulary (GPT-2's 0..50256, added tokens
     * right after): tables are sized by the largest id, so a 31-byte file
     * naming id 28730000 cost seconds (a table of 28.7M ids) (fuzz_tok_gpt2) */
    int extra = added ? cJSON_GetArraySize(added) : 0;
    if ((double)max_id >= 4.0 * ((double)count + extra) + 1024)
        return mtc_error(MTC_ERR_FORMAT,
                         "%s: token ids reach %d but there are only %d tokens: the ids of a "
                         "vocabulary must be (nearly) dense from 0 (a corrupted file?)",
                         name, max_id, count + extra);
    MTC_CHECK(alloc_ids(m, max_id + 1));
    for (const cJSON *e = vocab->child; e; e = e->next) {
        unsigned char *b;
        int len;
        mtc_result_t rc = unspell(e->string, byte_of_cp, &b, &len);
        if (rc == MTC_ERR_FORMAT)
            return mtc_error(MTC_ERR_FORMAT,
                             "%s: token \"%.40s\" is not in GPT-2's byte-level spelling (is this "
                             "a byte-level BPE vocabulary?)",
                             name, e->string);
        MTC_CHECK(rc);
        if (len == 0) {
            free(b);
            return mtc_error(MTC_ERR_FORMAT, "%s: empty token for id %d", name, e->valueint);
        }
        if (set_token(m, e->valueint, b, len) != MTC_OK)
            return mtc_error(MTC_ERR_FORMAT, "%s: id %d is given to two tokens (one is \"%.40s\")",
                             name, e->valueint, e->string);
    }
    int n_added = 0;
    for (const cJSON *a = added ? added->child : NULL; a; a = a->next)
        n_added++;
    if (n_added) {
        m->added = calloc((size_t)n_added, sizeof *m->added);
        m->added_len = calloc((size_t)n_added, sizeof *m->added_len);
        m->added_id = calloc((size_t)n_added, sizeof *m->added_id);
        if (!m->added || !m->added_len || !m->added_id)
            return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory for added tokens");
    }
    for (const cJSON *a = added ? added->child : NULL; a; a = a->next) {
        int id = cJSON_GetObjectItemCaseSensitive(a, "id")->valueint;
        const char *content = cJSON_GetObjectItemCaseSensitive(a, "content")->valuestring;
        size_t len = strlen(content);
        /* an added token may repeat a vocabulary entry (GPT-2's <|endoftext|> is
         * both, id 50256) but not take another token's id: encode and decode
         * would disagree on what the id means */
        if (m->bytes[id] &&
            ((size_t)m->len[id] != len || memcmp(m->bytes[id], content, len) != 0)) {
            return mtc_error(MTC_ERR_FORMAT,
                             "%s: added token \"%.40s\" has id %d, which the vocabulary (or an "
                             "earlier added token) gives to \"%.*s\" (the ids collide: give the "
                             "added token an id of its own)",
                             name, content, id, m->len[id] > 40 ? 40 : m->len[id],
                             (const char *)m->bytes[id]);
        }
        unsigned char *b = malloc(len + 1);
        if (!b) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory for added tokens");
        memcpy(b, content, len + 1);
        m->added[m->n_added] = b, m->added_len[m->n_added] = (int)len;
        m->added_id[m->n_added++] = id;
        if (!m->bytes[id]) { /* decode needs it */
            unsigned char *c = malloc(len + 1);
            if (!c) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory for added tokens");
            memcpy(c, content, len + 1);
            m->bytes[id] = c, m->len[id] = (int)len;
        }
        if (!strcmp(content, "<|endoftext|>")) m->eod = id;
    }
    m->tok_cap = pow2_at_least(2 * (size_t)m->n_ids);
    m->tok_slot = calloc(m->tok_cap, sizeof *m->tok_slot);
    if (!m->tok_slot) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory for the vocabulary");
    for (int id = 0; id < m->n_ids; id++)
        if (m->bytes[id] && tok_bpe_find(m, m->bytes[id], (size_t)m->len[id]) < 0)
            tok_insert(m, id);
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        m->byte_id[b] = tok_bpe_find(m, &c, 1);
    }
    m->vocab_size = m->n_ids;
    return MTC_OK;
}

/* One merge "a b" (rank r), given as its two byte-level strings. */
static mtc_result_t add_merge(tok_bpe *m, const char *a, size_t na, const char *b, size_t nb,
                              int rank, const char *name, int line) {
    int byte_of_cp[324];
    byte_unicode_tables(byte_of_cp);
    if (na == 0 || nb == 0)
        return mtc_error(MTC_ERR_FORMAT, "%s: merge %d is not two tokens \"a b\"", name, line);
    char *sa = malloc(na + 1), *sb = malloc(nb + 1);
    unsigned char *ra = NULL, *rb = NULL, *both = NULL;
    int la = 0, lb = 0, left = -1, right = -1, merged = -1;
    mtc_result_t rc = MTC_OK;
    if (!sa || !sb) {
        rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory reading merges");
        goto out;
    }
    memcpy(sa, a, na), sa[na] = 0;
    memcpy(sb, b, nb), sb[nb] = 0;
    if (unspell(sa, byte_of_cp, &ra, &la) != MTC_OK || unspell(sb, byte_of_cp, &rb, &lb)) {
        rc = mtc_error(MTC_ERR_FORMAT,
                       "%s: merge %d (\"%.40s %.40s\") is not in GPT-2's byte-level spelling", name,
                       line, sa, sb);
        goto out;
    }
    both = malloc((size_t)(la + lb));
    if (!both) {
        rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory reading merges");
        goto out;
    }
    memcpy(both, ra, (size_t)la);
    memcpy(both + la, rb, (size_t)lb);
    left = tok_bpe_find(m, ra, (size_t)la), right = tok_bpe_find(m, rb, (size_t)lb);
    merged = tok_bpe_find(m, both, (size_t)(la + lb));
out:
    free(sa), free(sb), free(ra), free(rb), free(both);
    if (rc != MTC_OK) return rc;
    if (left < 0 || right < 0 || merged < 0) return MTC_OK; /* unreachable merge: as GPT-2 */
    size_t i = tok_bpe_merge_slot(m, left, right);
    if (m->merge_key[i]) return MTC_OK; /* a repeated merge keeps its first rank */
    m->merge_key[i] = ((uint64_t)(uint32_t)left << 32 | (uint32_t)right) + 1;
    m->merge_rank[i] = rank, m->merge_id[i] = merged;
    return MTC_OK;
}

static mtc_result_t alloc_merges(tok_bpe *m, size_t n) {
    m->merge_cap = pow2_at_least(2 * n + 16);
    m->merge_key = calloc(m->merge_cap, sizeof *m->merge_key);
    m->merge_rank = calloc(m->merge_cap, sizeof *m->merge_rank);
    m->merge_id = calloc(m->merge_cap, sizeof *m->merge_id);
    if (!m->merge_key || !m->merge_rank || !m->merge_id)
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory for %zu merges", n);
    return MTC_OK;
}

static mtc_result_t parse_json_file(const char *path, const char *what, cJSON **out) {
    unsigned char *buf = NULL;
    size_t len = 0;
    mtc_result_t rc = data_file_read(path, &buf, &len);
    if (rc != MTC_OK) return mtc_error(rc, "%s %s: cannot read it (check the path)", what, path);
    *out = cJSON_ParseWithLength((const char *)buf, len);
    free(buf);
    if (!*out) return mtc_error(MTC_ERR_FORMAT, "%s %s: not valid JSON", what, path);
    return MTC_OK;
}

mtc_result_t tok_bpe_load_gpt2(tok_bpe *m, const char *vocab_file, const char *merge_file) {
    memset(m, 0, sizeof *m);
    m->eod = -1;
    cJSON *vocab = NULL;
    unsigned char *mb = NULL;
    size_t mlen = 0;
    mtc_result_t rc;
    MTC_CHECK_GOTO(parse_json_file(vocab_file, "--vocab-file", &vocab), rc, out);
    if (!cJSON_IsObject(vocab)) {
        rc = mtc_error(MTC_ERR_FORMAT,
                       "--vocab-file %s: expected a JSON object of token -> id (GPT-2's "
                       "vocab.json / encoder.json)",
                       vocab_file);
        goto out;
    }
    MTC_CHECK_GOTO(load_vocab(m, vocab, NULL, vocab_file), rc, out);
    rc = data_file_read(merge_file, &mb, &mlen);
    if (rc != MTC_OK) {
        rc = mtc_error(rc, "--merge-file %s: cannot read it (check the path)", merge_file);
        goto out;
    }
    size_t lines = 1;
    for (size_t i = 0; i < mlen; i++)
        lines += mb[i] == '\n';
    MTC_CHECK_GOTO(alloc_merges(m, lines), rc, out);
    int rank = 0, line = 0;
    for (size_t i = 0; i < mlen;) {
        size_t e = i;
        while (e < mlen && mb[e] != '\n')
            e++;
        size_t end = e;
        if (end > i && mb[end - 1] == '\r') end--;
        line++;
        const char *s = (const char *)mb + i;
        size_t n = end - i;
        if (n > 0 && !(line == 1 && n >= 8 && !memcmp(s, "#version", 8))) {
            const char *sp = memchr(s, ' ', n);
            if (!sp) {
                rc = mtc_error(MTC_ERR_FORMAT,
                               "--merge-file %s: line %d is not two tokens \"a b\" (GPT-2's "
                               "merges.txt / vocab.bpe)",
                               merge_file, line);
                goto out;
            }
            MTC_CHECK_GOTO(add_merge(m, s, (size_t)(sp - s), sp + 1, (size_t)(s + n - sp - 1),
                                     rank++, merge_file, line),
                           rc, out);
        }
        i = e + 1;
    }
    /* GPT-2's tokenizer (as Hugging Face loads it) adds <|endoftext|> */
    int eod = tok_bpe_find(m, (const unsigned char *)"<|endoftext|>", 13);
    if (eod >= 0) {
        m->added = malloc(sizeof *m->added);
        m->added_len = malloc(sizeof *m->added_len);
        m->added_id = malloc(sizeof *m->added_id);
        unsigned char *b = malloc(14);
        if (!m->added || !m->added_len || !m->added_id || !b) {
            free(b);
            rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory for added tokens");
            goto out;
        }
        memcpy(b, "<|endoftext|>", 14);
        m->added[0] = b, m->added_len[0] = 13, m->added_id[0] = eod, m->n_added = 1;
        m->eod = eod;
    }
out:
    cJSON_Delete(vocab);
    free(mb);
    if (rc != MTC_OK) tok_bpe_free(m);
    return rc;
}

static const char *json_type_name(const cJSON *o) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* The pre-tokenizer must be GPT-2's: ByteLevel (use_regex true), alone or
 * as the only member of a Sequence. */
static mtc_result_t check_pre_tokenizer(tok_bpe *m, const cJSON *pre, const char *path) {
    const char *t = pre ? json_type_name(pre) : NULL;
    if (t && !strcmp(t, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
        if (cJSON_GetArraySize(list) == 1) {
            pre = cJSON_GetArrayItem(list, 0);
            t = json_type_name(pre);
        }
    }
    if (!t || strcmp(t, "ByteLevel") != 0)
        return mtc_error(MTC_ERR_FORMAT,
                         "--tokenizer-model %s: pre_tokenizer is %s, mtc reads only GPT-2 style "
                         "byte-level BPE (pre_tokenizer ByteLevel)",
                         path, t ? t : "missing");
    const cJSON *regex = cJSON_GetObjectItemCaseSensitive(pre, "use_regex");
    if (cJSON_IsFalse(regex))
        return mtc_error(MTC_ERR_FORMAT,
                         "--tokenizer-model %s: ByteLevel with use_regex false is not supported "
                         "(mtc splits words with GPT-2's pattern only)",
                         path);
    m->add_prefix_space = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pre, "add_prefix_space"));
    return MTC_OK;
}

/* post_processor: none, ByteLevel (adds nothing), TemplateProcessing (its
 * "single" template: special tokens around the sequence), or a Sequence of
 * those. Others (BertProcessing, RobertaProcessing) are refused. */
static mtc_result_t read_post_processor(tok_bpe *m, const cJSON *pp, const char *path) {
    const char *t = pp && !cJSON_IsNull(pp) ? json_type_name(pp) : NULL;
    if (!t || !strcmp(t, "ByteLevel")) return MTC_OK;
    if (!strcmp(t, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pp, "processors");
        for (const cJSON *e = list ? list->child : NULL; e; e = e->next)
            MTC_CHECK(read_post_processor(m, e, path));
        return MTC_OK;
    }
    if (strcmp(t, "TemplateProcessing") != 0)
        return mtc_error(MTC_ERR_FORMAT,
                         "--tokenizer-model %s: post_processor %s is not supported (ByteLevel or "
                         "TemplateProcessing only)",
                         path, t);
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(pp, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(pp, "special_tokens");
    int after = 0;
    for (const cJSON *e = single ? single->child : NULL; e; e = e->next) {
        if (cJSON_GetObjectItemCaseSensitive(e, "Sequence")) {
            after = 1;
            continue;
        }
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
        const cJSON *name = sp ? cJSON_GetObjectItemCaseSensitive(sp, "id") : NULL;
        const cJSON *tok = cJSON_IsString(name)
                               ? cJSON_GetObjectItemCaseSensitive(specials, name->valuestring)
                               : NULL;
        const cJSON *ids = tok ? cJSON_GetObjectItemCaseSensitive(tok, "ids") : NULL;
        if (!cJSON_IsArray(ids))
            return mtc_error(MTC_ERR_FORMAT,
                             "--tokenizer-model %s: post_processor template names a special "
                             "token without ids",
                             path);
        for (const cJSON *id = ids->child; id; id = id->next) {
            int *n = after ? &m->n_suffix : &m->n_prefix;
            if (*n == 8 || !cJSON_IsNumber(id))
                return mtc_error(MTC_ERR_FORMAT,
                                 "--tokenizer-model %s: post_processor template too long", path);
            (after ? m->suffix : m->prefix)[(*n)++] = id->valueint;
        }
    }
    return MTC_OK;
}

/* eos_token of PATH's folder's tokenizer_config.json (Megatron's eod), or
 * -1 when there is no such file or entry. */
static int config_eos(const tok_bpe *m, const char *path) {
    const char *slash = strrchr(path, '/');
    size_t dir = slash ? (size_t)(slash - path + 1) : 0;
    char *cfg_path = malloc(dir + 32);
    if (!cfg_path) return -1;
    memcpy(cfg_path, path, dir);
    strcpy(cfg_path + dir, "tokenizer_config.json");
    unsigned char *buf = NULL;
    size_t len = 0;
    int id = -1;
    FILE *probe = NULL;
    if (mtc_infile_open(cfg_path, &probe) == MTC_OK) {
        fclose(probe);
        if (data_file_read(cfg_path, &buf, &len) == MTC_OK) {
            cJSON *cfg = cJSON_ParseWithLength((const char *)buf, len);
            const cJSON *eos = cJSON_GetObjectItemCaseSensitive(cfg, "eos_token");
            if (cJSON_IsObject(eos)) eos = cJSON_GetObjectItemCaseSensitive(eos, "content");
            if (cJSON_IsString(eos)) {
                const char *s = eos->valuestring;
                for (int a = 0; a < m->n_added && id < 0; a++)
                    if ((size_t)m->added_len[a] == strlen(s) && !memcmp(m->added[a], s, strlen(s)))
                        id = m->added_id[a];
            }
            cJSON_Delete(cfg);
        }
    }
    free(buf);
    free(cfg_path);
    return id;
}

mtc_result_t tok_bpe_load_hf(tok_bpe *m, const char *path) {
    memset(m, 0, sizeof *m);
    m->eod = -1;
    cJSON *root = NULL;
    mtc_result_t rc;
    MTC_CHECK_GOTO(parse_json_file(path, "--tokenizer-model", &root), rc, out);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const char *type = model ? json_type_name(model) : NULL;
    if (!model || !type || strcmp(type, "BPE") != 0) {
        rc = mtc_error(MTC_ERR_FORMAT,
                       "--tokenizer-model %s: model type is %s, mtc reads only byte-level BPE "
                       "tokenizers (model.type \"BPE\")",
                       path, type ? type : "missing");
        goto out;
    }
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (norm && !cJSON_IsNull(norm)) {
        rc = mtc_error(MTC_ERR_FORMAT,
                       "--tokenizer-model %s: has a normalizer (%s), which mtc does not "
                       "implement; only GPT-2 style byte-level BPE is read",
                       path, json_type_name(norm) ? json_type_name(norm) : "?");
        goto out;
    }
    MTC_CHECK_GOTO(
        check_pre_tokenizer(m, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), path), rc,
        out);
    static const char *const unsupported[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, unsupported[i]);
        if (cJSON_IsString(v) && v->valuestring[0]) {
            rc = mtc_error(MTC_ERR_FORMAT, "--tokenizer-model %s: model.%s is not supported", path,
                           unsupported[i]);
            goto out;
        }
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"))) {
        rc = mtc_error(MTC_ERR_FORMAT,
                       "--tokenizer-model %s: model.byte_fallback is a SentencePiece-style BPE, "
                       "not byte-level; not supported",
                       path);
        goto out;
    }
    m->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) {
        rc = mtc_error(MTC_ERR_FORMAT,
                       "--tokenizer-model %s: model.vocab must be an object and model.merges an "
                       "array",
                       path);
        goto out;
    }
    if (added && !cJSON_IsArray(added)) added = NULL;
    MTC_CHECK_GOTO(load_vocab(m, vocab, added, path), rc, out);
    MTC_CHECK_GOTO(
        read_post_processor(m, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), path), rc,
        out);
    int eos = config_eos(m, path);
    if (eos >= 0) m->eod = eos;
    MTC_CHECK_GOTO(alloc_merges(m, (size_t)cJSON_GetArraySize(merges)), rc, out);
    int rank = 0;
    for (const cJSON *e = merges->child; e; e = e->next, rank++) {
        if (cJSON_IsString(e)) { /* "a b" */
            const char *s = e->valuestring, *sp = strchr(s, ' ');
            if (!sp) {
                rc = mtc_error(MTC_ERR_FORMAT,
                               "--tokenizer-model %s: merge %d \"%.40s\" is not "
                               "\"a b\"",
                               path, rank, s);
                goto out;
            }
            MTC_CHECK_GOTO(
                add_merge(m, s, (size_t)(sp - s), sp + 1, strlen(sp + 1), rank, path, rank), rc,
                out);
        } else if (cJSON_GetArraySize(e) == 2 && cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 1))) { /* ["a", "b"] */
            const char *a = cJSON_GetArrayItem(e, 0)->valuestring;
            const char *b = cJSON_GetArrayItem(e, 1)->valuestring;
            MTC_CHECK_GOTO(add_merge(m, a, strlen(a), b, strlen(b), rank, path, rank), rc, out);
        } else {
            rc = mtc_error(MTC_ERR_FORMAT,
                           "--tokenizer-model %s: merge %d is neither \"a b\" nor [\"a\", \"b\"]",
                           path, rank);
            goto out;
        }
    }
out:
    cJSON_Delete(root);
    if (rc != MTC_OK) tok_bpe_free(m);
    return rc;
}

void tok_bpe_free(tok_bpe *m) {
    if (!m) return;
    for (int i = 0; m->bytes && i < m->n_ids; i++)
        free(m->bytes[i]);
    for (int i = 0; i < m->n_added; i++)
        free(m->added[i]);
    free(m->bytes), free(m->len), free(m->tok_slot);
    free(m->merge_key), free(m->merge_rank), free(m->merge_id);
    free(m->added), free(m->added_len), free(m->added_id);
    memset(m, 0, sizeof *m);
}
