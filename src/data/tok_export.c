/* data/tok_export.c - a tokenizer as Hugging Face files, for `mtc export
 * --format hf` (tokenizer.h: data_tok_write_hf).
 *
 *   GPT2BPETokenizer      vocab.json + merges.txt (copied as they are, for
 *                         GPT2Tokenizer), tokenizer.json (generated: BPE,
 *                         ByteLevel pre-tokenizer / decoder, <|endoftext|> as
 *                         an added special token), tokenizer_config.json
 *   HuggingFaceTokenizer  its tokenizer.json (and the tokenizer_config.json
 *                         beside it) copied as they are
 *   ByteLevelTokenizer    tokenizer.json: byte-level BPE of the 256 bytes,
 *                         no merges (encodes every byte to itself)
 *   CharLevelTokenizer    the same when every symbol is one byte; with
 *                         multi-byte characters a BPE over the characters
 *                         with no merges (write_char_json)
 *   NullTokenizer         MTC_ERR_UNSUPPORTED
 *   TikTokenizer          tokenizer.json: byte-level BPE, merges as Hugging
 *                         Face's tiktoken converter derives them, its split
 *                         pattern as a Split pre-tokenizer, the special tokens
 *                         as added tokens at their ids
 *   SentencePiece kinds   tok_export_spm.c (BPE Llama-style models; others
 *                         MTC_ERR_UNSUPPORTED)
 * Every file is written under a temporary name and renamed. Relies on cJSON;
 * knows nothing of models. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include "data/stream.h"
#include "data/tok_bpe.h"
#include "data/tok_ext.h"
#include "data/tokenizer.h"

static mtc_result_t write_file(const char *dir, const char *name, const void *data, size_t n) {
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return mtc_error(MTC_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    int ok = fwrite(data, 1, n, f) == n;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return mtc_error(MTC_ERR_IO, "writing %s failed: %s", path, strerror(errno));
    }
    return MTC_OK;
}

static mtc_result_t copy_file(const char *from, const char *dir, const char *name) {
    unsigned char *buf = NULL;
    size_t n = 0;
    MTC_CHECK(data_file_read(from, &buf, &n));
    mtc_result_t rc = write_file(dir, name, buf ? buf : (unsigned char *)"", n);
    free(buf);
    return rc;
}

static mtc_result_t write_json(const char *dir, const char *name, cJSON *j) {
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    if (!s) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory writing %s", name);
    mtc_result_t rc = write_file(dir, name, s, strlen(s));
    cJSON_free(s);
    return rc;
}

/* The GPT-2 spelling of token id's bytes into t (reset first); -1 without. */
static int spelled(const data_tok *tok, int id, data_tok_text *t) {
    unsigned char scratch[8];
    const unsigned char *b;
    int n = data_tok_piece(tok, id, scratch, &b);
    t->n = 0;
    if (n <= 0 || data_tok_gpt2_spell(b, (size_t)n, t) != MTC_OK) return -1;
    return 0;
}

/* A vocabulary object's keys: the first id of each spelling is the entry
 * (a JSON object holds a key once). cJSON finds a key by a linear walk, which
 * made GPT-2's 50257 entries quadratic (10 s an export); this set is an
 * open-addressing table of the object's items over their keys' hashes. */
typedef struct {
    cJSON *obj;
    const cJSON **slot;
    size_t mask;
} vocab_keys;

static mtc_result_t vocab_keys_init(vocab_keys *k, cJSON *obj, int n) {
    size_t cap = 16;
    while (cap < 2 * (size_t)(n > 0 ? n : 1))
        cap *= 2;
    k->obj = obj, k->mask = cap - 1;
    k->slot = calloc(cap, sizeof *k->slot);
    return k->slot ? MTC_OK
                   : mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory writing tokenizer.json");
}

/* key -> id unless the object has key already */
static mtc_result_t vocab_keys_add(vocab_keys *k, const char *key, int id) {
    size_t i = (size_t)tok_bpe_hash((const unsigned char *)key, strlen(key)) & k->mask;
    for (; k->slot[i]; i = (i + 1) & k->mask)
        if (strcmp(k->slot[i]->string, key) == 0) return MTC_OK;
    cJSON *e = cJSON_CreateNumber(id);
    if (!e || !cJSON_AddItemToObject(k->obj, key, e)) {
        cJSON_Delete(e);
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory writing tokenizer.json");
    }
    k->slot[i] = e;
    return MTC_OK;
}

static cJSON *byte_level(int prefix_space) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "ByteLevel");
    cJSON_AddBoolToObject(p, "add_prefix_space", prefix_space);
    cJSON_AddBoolToObject(p, "trim_offsets", 1);
    cJSON_AddBoolToObject(p, "use_regex", 1);
    return p;
}

/* TikTokenizer: its pattern as a Split, then bytes to GPT-2's alphabet */
static cJSON *tiktoken_pre(const data_tok *tok) {
    cJSON *seq = cJSON_CreateObject();
    cJSON_AddStringToObject(seq, "type", "Sequence");
    cJSON *l = cJSON_AddArrayToObject(seq, "pretokenizers");
    cJSON *split = cJSON_CreateObject();
    cJSON_AddStringToObject(split, "type", "Split");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(split, "pattern"), "Regex",
                            tok_tt_regex(data_tok_tiktoken(tok)));
    cJSON_AddStringToObject(split, "behavior", "Isolated");
    cJSON_AddBoolToObject(split, "invert", 0);
    cJSON_AddItemToArray(l, split);
    cJSON *bl = byte_level(0);
    cJSON_ReplaceItemInObject(bl, "use_regex", cJSON_CreateBool(0));
    cJSON_AddItemToArray(l, bl);
    return seq;
}

/* tokenizer.json of a byte-level BPE built from the handle's own tables
 * (TikTokenizer: its split pattern, its special tokens only as added tokens:
 * their text may also be a vocabulary entry of its own). */
static mtc_result_t write_tokenizer_json(const data_tok *tok, const char *dir) {
    int tiktoken = data_tok_kind_of(tok) == DATA_TOK_TIKTOKEN;
    int V = data_tok_vocab_size(tok);
    int *pairs = NULL;
    size_t n_merges = 0;
    data_tok_text a = {0}, b = {0};
    mtc_result_t rc = data_tok_merges(tok, &pairs, &n_merges);
    if (rc != MTC_OK) return rc;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    cJSON_AddNullToObject(root, "normalizer");
    cJSON_AddItemToObject(root, "pre_tokenizer", tiktoken ? tiktoken_pre(tok) : byte_level(0));
    cJSON_AddItemToObject(root, "post_processor", byte_level(1));
    cJSON_AddItemToObject(root, "decoder", byte_level(1));
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddNullToObject(model, "continuing_subword_prefix");
    cJSON_AddNullToObject(model, "end_of_word_suffix");
    cJSON_AddBoolToObject(model, "fuse_unk", 0);
    cJSON_AddBoolToObject(model, "byte_fallback", 0);
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    vocab_keys keys = {0};
    rc = vocab_keys_init(&keys, vocab, V);
    for (int id = 0; id < V && rc == MTC_OK; id++) {
        if (data_tok_is_added(tok, id)) {
            unsigned char scratch[8];
            const unsigned char *p;
            int n = data_tok_piece(tok, id, scratch, &p);
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "id", id);
            char *content = malloc((size_t)(n > 0 ? n : 0) + 1);
            if (!content) {
                cJSON_Delete(e);
                rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory writing tokenizer.json");
                break;
            }
            if (n > 0) memcpy(content, p, (size_t)n);
            content[n > 0 ? n : 0] = 0;
            cJSON_AddStringToObject(e, "content", content);
            free(content);
            cJSON_AddBoolToObject(e, "single_word", 0);
            cJSON_AddBoolToObject(e, "lstrip", 0);
            cJSON_AddBoolToObject(e, "rstrip", 0);
            cJSON_AddBoolToObject(e, "normalized", !tiktoken);
            cJSON_AddBoolToObject(e, "special", 1);
            cJSON_AddItemToArray(added, e);
            /* GPT-2's vocab.json also lists it (as "<|endoftext|>"): keep it there */
            if (tiktoken) continue;
        }
        if (spelled(tok, id, &a) == 0) rc = vocab_keys_add(&keys, a.s, id);
    }
    free(keys.slot);
    for (size_t k = 0; k < n_merges && rc == MTC_OK; k++) {
        if (spelled(tok, pairs[2 * k], &a) || spelled(tok, pairs[2 * k + 1], &b)) {
            rc = mtc_error(MTC_ERR_INTERNAL, "merge %zu names an id without bytes", k);
            break;
        }
        data_tok_text both = {0};
        rc = data_tok_text_append(&both, a.s, a.n);
        if (rc == MTC_OK) rc = data_tok_text_append(&both, " ", 1);
        if (rc == MTC_OK) rc = data_tok_text_append(&both, b.s, b.n);
        if (rc == MTC_OK) cJSON_AddItemToArray(merges, cJSON_CreateString(both.s));
        data_tok_text_free(&both);
    }
    if (rc == MTC_OK) rc = write_json(dir, "tokenizer.json", root);
    cJSON_Delete(root);
    free(pairs);
    data_tok_text_free(&a), data_tok_text_free(&b);
    return rc;
}

/* A CharLevelTokenizer with multi-byte characters: a BPE over its
 * characters with no merges and no pre-tokenizer (each code point of the
 * text is one symbol, as mtc's), the id-0 character as unk_token (mtc maps
 * an unknown character to id 0), the Fuse decoder (the pieces joined). Raw
 * bytes of invalid UTF-8 (mtc's 0x110000 + byte symbols) have no text form
 * and are left out. */
static mtc_result_t write_char_json(const data_tok *tok, const char *dir) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    cJSON_AddArrayToObject(root, "added_tokens");
    cJSON_AddNullToObject(root, "normalizer");
    cJSON_AddNullToObject(root, "pre_tokenizer");
    cJSON_AddNullToObject(root, "post_processor");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "decoder"), "type", "Fuse");
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddNullToObject(model, "continuing_subword_prefix");
    cJSON_AddNullToObject(model, "end_of_word_suffix");
    cJSON_AddBoolToObject(model, "fuse_unk", 0);
    cJSON_AddBoolToObject(model, "byte_fallback", 0);
    cJSON *vocab = cJSON_CreateObject();
    char unk[8] = "";
    vocab_keys keys = {0};
    mtc_result_t rc = vocab_keys_init(&keys, vocab, data_tok_vocab_size(tok));
    for (int id = 0; id < data_tok_vocab_size(tok) && rc == MTC_OK; id++) {
        unsigned char scratch[8];
        const unsigned char *p;
        int n = data_tok_piece(tok, id, scratch, &p);
        if (n <= 0 || n > 4 || (n == 1 && p[0] >= 0x80)) continue; /* a raw byte */
        char ch[8];
        memcpy(ch, p, (size_t)n);
        ch[n] = 0;
        if (id == 0) memcpy(unk, ch, (size_t)n + 1);
        rc = vocab_keys_add(&keys, ch, id);
    }
    free(keys.slot);
    if (unk[0])
        cJSON_AddStringToObject(model, "unk_token", unk);
    else
        cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddItemToObject(model, "vocab", vocab);
    cJSON_AddArrayToObject(model, "merges");
    if (rc == MTC_OK) rc = write_json(dir, "tokenizer.json", root);
    cJSON_Delete(root);
    return rc;
}

static mtc_result_t write_config(const data_tok *tok, const char *dir, int model_max_length) {
    cJSON *c = cJSON_CreateObject();
    int gpt2 = data_tok_kind_of(tok) == DATA_TOK_GPT2BPE;
    cJSON_AddStringToObject(c, "tokenizer_class",
                            gpt2 ? "GPT2Tokenizer" : "PreTrainedTokenizerFast");
    if (data_tok_kind_of(tok) == DATA_TOK_TIKTOKEN) { /* Megatron's fixed special ids */
        cJSON_AddStringToObject(c, "unk_token", "<unk>");
        cJSON_AddStringToObject(c, "bos_token", "<s>");
        cJSON_AddStringToObject(c, "eos_token", "</s>");
        cJSON_AddStringToObject(c, "pad_token", "<pad>");
    }
    if (data_tok_kind_of(tok) == DATA_TOK_SENTENCEPIECE) {
        const tok_spm_proc *p = tok_spm_processor(data_tok_spm(tok));
        const char *names[] = {"unk_token", "bos_token", "eos_token"};
        int ids[] = {tok_spm_proc_unk(p), tok_spm_proc_bos(p), tok_spm_proc_eos(p)};
        for (int i = 0; i < 3; i++) {
            if (ids[i] < 0) continue;
            size_t n;
            const char *piece = tok_spm_proc_piece(p, ids[i], &n);
            char buf[64];
            snprintf(buf, sizeof buf, "%.*s", (int)(n < 63 ? n : 63), piece);
            cJSON_AddStringToObject(c, names[i], buf);
        }
        cJSON_AddBoolToObject(c, "add_bos_token", 0); /* Megatron's text_to_ids adds none */
    }
    if (gpt2) {
        cJSON_AddBoolToObject(c, "add_prefix_space", 0);
        const char *eot = "<|endoftext|>";
        cJSON_AddStringToObject(c, "bos_token", eot);
        cJSON_AddStringToObject(c, "eos_token", eot);
        cJSON_AddStringToObject(c, "unk_token", eot);
    }
    if (model_max_length > 0) cJSON_AddNumberToObject(c, "model_max_length", model_max_length);
    mtc_result_t rc = write_json(dir, "tokenizer_config.json", c);
    cJSON_Delete(c);
    return rc;
}

mtc_result_t data_tok_write_hf(const data_tok *tok, const char *dir, int model_max_length) {
    switch (data_tok_kind_of(tok)) {
    case DATA_TOK_HUGGINGFACE: {
        const char *json = data_tok_file(tok, 0);
        MTC_CHECK(copy_file(json, dir, "tokenizer.json"));
        char cfg[4200];
        const char *slash = strrchr(json, '/');
        snprintf(cfg, sizeof cfg, "%.*stokenizer_config.json", slash ? (int)(slash - json + 1) : 0,
                 json);
        FILE *f = fopen(cfg, "rb");
        if (!f) return MTC_OK; /* none beside it */
        fclose(f);
        return copy_file(cfg, dir, "tokenizer_config.json");
    }
    case DATA_TOK_GPT2BPE:
        MTC_CHECK(copy_file(data_tok_file(tok, 0), dir, "vocab.json"));
        MTC_CHECK(copy_file(data_tok_file(tok, 1), dir, "merges.txt"));
        break;
    case DATA_TOK_CHAR:
        for (int id = 0; id < data_tok_vocab_size(tok); id++) {
            unsigned char scratch[8];
            const unsigned char *p;
            if (data_tok_piece(tok, id, scratch, &p) != 1) { /* multi-byte characters */
                MTC_CHECK(write_char_json(tok, dir));
                return write_config(tok, dir, model_max_length);
            }
        }
        break;
    case DATA_TOK_BYTE: break;
    case DATA_TOK_NULL:
        return mtc_error(MTC_ERR_UNSUPPORTED, "NullTokenizer has no Hugging Face equivalent");
    case DATA_TOK_TIKTOKEN: break;
    case DATA_TOK_SENTENCEPIECE: {
        char *json = NULL;
        MTC_CHECK(tok_spm_tokenizer_json(data_tok_spm(tok), data_tok_file(tok, 0), &json));
        mtc_result_t rc = write_file(dir, "tokenizer.json", json, strlen(json));
        cJSON_free(json);
        MTC_CHECK(rc);
        return write_config(tok, dir, model_max_length);
    }
    }
    MTC_CHECK(write_tokenizer_json(tok, dir));
    return write_config(tok, dir, model_max_length);
}
