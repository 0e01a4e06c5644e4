/* data/tok_ext.c - the SentencePiece and TikTokenizer parts of the data_tok
 * handle: opening them from the flags (tok.c's data_tok_open calls in), their
 * "<Type>:{JSON}" text form, decoding that continues a text, and the parts
 * exporters reach. The tokenizers themselves are tok_spm.c and
 * tok_tiktoken.c; this file only wires them to the handle. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/outfile.h"
#include "data/tok_ext.h"
#include "data/tok_handle.h"

/* SentencePiece / TikTokenizer: the files, the special tokens kept for the
 * text form. */
mtc_result_t tok_open_ext(data_tok *t, const data_tok_opts *o) {
    const char *name = tok_type_canonical(o->type);
    if (!o->tokenizer_model)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "%s needs --tokenizer-model %s", name,
                         t->kind == DATA_TOK_TIKTOKEN ? "VOCAB.json (Megatron's tiktoken list)"
                                                      : "tokenizer.model (SentencePiece)");
    FILE *f = NULL; /* a FIFO or device is refused here: its reader would wait forever */
    mtc_result_t orc = mtc_infile_open(o->tokenizer_model, &f);
    if (orc != MTC_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", mtc_error_detail());
        if (orc != MTC_ERR_IO) return mtc_error(orc, "--tokenizer-model: %s", why);
        return mtc_error(orc, "--tokenizer-model: %s (give the %s file)", why,
                         t->kind == DATA_TOK_TIKTOKEN ? "tiktoken vocabulary" : "SentencePiece");
    }
    fclose(f);
    if (o->n_special_tokens > 0) {
        t->special = calloc((size_t)o->n_special_tokens, sizeof *t->special);
        if (!t->special) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory for a tokenizer");
        for (int i = 0; i < o->n_special_tokens; i++) {
            t->special[i] = tok_dup_str(o->special_tokens[i]);
            if (!t->special[i]) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory");
            t->n_special = i + 1;
        }
    }
    t->file_a = tok_dup_path(o->tokenizer_model);
    if (!t->file_a) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory for a tokenizer");
    if (t->kind == DATA_TOK_SENTENCEPIECE) {
        if (o->tiktoken_pattern || o->tiktoken_num_special)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "--tiktoken-pattern / --tiktoken-num-special-tokens are for "
                             "TikTokenizer, not %s (drop them)",
                             name);
        MTC_CHECK(tok_spm_open(t->file_a, o->spm_legacy, o->special_tokens, o->n_special_tokens,
                               &t->spm));
        t->vocab_size = tok_spm_vocab_size(t->spm), t->eod = tok_spm_eod(t->spm);
        return MTC_OK;
    }
    if (o->spm_legacy)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "--tokenizer-sentencepiece-legacy is for the SentencePiece tokenizers, "
                         "not TikTokenizer (drop it)");
    t->tt_num_special = o->tiktoken_num_special ? o->tiktoken_num_special : 1000;
    MTC_CHECK(tok_tt_open(t->file_a, o->tiktoken_pattern ? o->tiktoken_pattern : "v2",
                          t->tt_num_special, o->vocab_size ? o->vocab_size : 131072,
                          o->special_tokens, o->n_special_tokens, &t->tt));
    t->vocab_size = tok_tt_vocab_size(t->tt), t->eod = tok_tt_eod(t->tt);
    return MTC_OK;
}

/* "<Type>:{JSON}": the file and every option that changes the ids. */
mtc_result_t tok_serialize_ext(const data_tok *t, data_tok_text *out) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "model", t->file_a);
    if (t->kind == DATA_TOK_SENTENCEPIECE) {
        cJSON_AddBoolToObject(j, "legacy", tok_spm_legacy(t->spm));
    } else {
        cJSON_AddStringToObject(j, "pattern", tok_tt_pattern(t->tt));
        cJSON_AddNumberToObject(j, "num_special_tokens", t->tt_num_special);
        cJSON_AddNumberToObject(j, "vocab_size", t->vocab_size);
    }
    cJSON *sp = cJSON_AddArrayToObject(j, "special_tokens");
    for (int i = 0; i < t->n_special; i++)
        cJSON_AddItemToArray(sp, cJSON_CreateString(t->special[i]));
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory writing a tokenizer");
    mtc_result_t rc = data_tok_text_append(out, t->type_name, strlen(t->type_name));
    if (rc == MTC_OK) rc = data_tok_text_append(out, ":", 1);
    if (rc == MTC_OK) rc = data_tok_text_append(out, s, strlen(s));
    cJSON_free(s);
    return rc;
}

mtc_result_t tok_deserialize_ext(const char *name, const char *json, data_tok **out) {
    cJSON *j = cJSON_Parse(json);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(j, "special_tokens");
    if (!cJSON_IsString(model) || (sp && !cJSON_IsArray(sp))) {
        cJSON_Delete(j);
        return mtc_error(MTC_ERR_FORMAT, "tokenizer \"%.60s\": expected %s:{\"model\": FILE, ...}",
                         json, name);
    }
    int n = cJSON_GetArraySize(sp);
    const char **special = calloc((size_t)(n > 0 ? n : 1), sizeof *special);
    if (!special) {
        cJSON_Delete(j);
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory reading a tokenizer");
    }
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(sp, i);
        special[i] = cJSON_IsString(e) ? e->valuestring : "";
    }
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "pattern");
    data_tok_opts o = {
        .type = name,
        .tokenizer_model = model->valuestring,
        .spm_legacy = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "legacy")),
        .tiktoken_pattern = cJSON_IsString(pat) ? pat->valuestring : NULL,
        .tiktoken_num_special =
            (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "num_special_tokens")),
        .vocab_size = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "vocab_size")),
        .special_tokens = special,
        .n_special_tokens = n,
    };
    if (o.tiktoken_num_special < 0) o.tiktoken_num_special = 0;
    mtc_result_t rc = data_tok_open(&o, out);
    free(special);
    cJSON_Delete(j);
    return rc;
}

mtc_result_t data_tok_decode_continue(const data_tok *t, const int *ids, size_t n,
                                      data_tok_text *out, size_t *unknown) {
    if (t->kind == DATA_TOK_SENTENCEPIECE) {
        MTC_CHECK(data_tok_text_append(out, "", 0));
        return tok_spm_decode(t->spm, ids, n, 1, out, unknown);
    }
    return data_tok_decode(t, ids, n, out, unknown);
}

const struct tok_spm *data_tok_spm(const data_tok *t) { return t->spm; }
const struct tok_tt *data_tok_tiktoken(const data_tok *t) { return t->tt; }
const char *data_tok_tiktoken_pattern(const data_tok *t) {
    return t->tt ? tok_tt_pattern(t->tt) : NULL;
}
