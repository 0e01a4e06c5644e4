/* ckpt/checkpoint.c - single-file weight checkpoints; see checkpoint.h.
 * Relies on the registry for names, shapes and offsets; plain stdio. */
#include "ckpt/checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/state.h"
#include "core/outfile.h"

static int ckpt_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static const char CKPT_MAGIC[8] = {'M', 'T', 'C', 'G', 'P', 'T', '1', '\n'};

mtc_result_t mtc_ckpt_save(const mtc_model *m, const char *path, int64_t iteration,
                           const char *tokenizer) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return mtc_error(MTC_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    const mtc_model_config *c = &m->cfg;
    const mtc_registry *r = &m->reg;
    fwrite(CKPT_MAGIC, 1, sizeof CKPT_MAGIC, f);
    fprintf(f,
            "num_layers %d\nhidden_size %d\nnum_heads %d\nffn_hidden_size %d\nseq_length %d\n"
            "max_position_embeddings %d\nvocab_size %d\npadded_vocab_size %d\niteration %lld\n"
            "tokenizer %s\n",
            c->num_layers, c->hidden_size, c->num_heads, c->ffn_hidden_size, c->seq_length,
            c->max_position_embeddings, c->vocab_size, c->padded_vocab_size, (long long)iteration,
            tokenizer && tokenizer[0] ? tokenizer : "none");
    /* the family knobs (absent in files of the GPT-2-only format: zeros) */
    fprintf(f,
            "normalization %d\nnorm_epsilon %.9g\nposition_embedding %d\nrotary_base %.9g\n"
            "rotary_percent %.9g\nrotary_interleaved %d\nswiglu %d\nnum_query_groups %d\n"
            "kv_channels %d\nuntie_embeddings %d\ndisable_bias_linear %d\nadd_qkv_bias %d\n",
            (int)c->normalization, c->norm_epsilon, (int)c->position_embedding, c->rotary_base,
            c->rotary_percent, c->rotary_interleaved, c->swiglu, c->num_query_groups,
            c->kv_channels, c->untie_embeddings, c->disable_bias_linear, c->add_qkv_bias);
    fprintf(f, "params %d %zu\n", r->count, r->total);
    for (int i = 0; i < r->count; i++)
        fprintf(f, "param %s %lld %lld\n", r->params[i].name, (long long)r->params[i].shape[0],
                (long long)(r->params[i].ndim == 2 ? r->params[i].shape[1] : 0));
    fprintf(f, "end\n");
    int ok = 1;
    for (int i = 0; i < r->count && ok; i++)
        ok = fwrite(m->params + r->params[i].offset, sizeof(float), r->params[i].numel, f) ==
             r->params[i].numel;
    if (fflush(f) != 0) ok = 0;
    if (fclose(f) != 0) ok = 0;
    if (!ok) {
        unlink(tmp);
        return mtc_error(MTC_ERR_IO, "writing %s failed: %s", tmp, strerror(errno));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return mtc_error(MTC_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(e));
    }
    return MTC_OK;
}

/* Parses the header; leaves f positioned at the float data. */
static mtc_result_t ckpt_header(FILE *f, const char *path, mtc_ckpt_info *info, int *count,
                                size_t *total) {
    memset(info, 0, sizeof *info);
    char magic[8];
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, CKPT_MAGIC, 8))
        return mtc_error(
            MTC_ERR_FORMAT,
            "%s is not an mtc model (bad magic; expected a file written by mtc train --save)",
            path);
    mtc_model_config *c = &info->cfg;
    char line[MTC_CKPT_TOKENIZER_MAX + 64];
    struct {
        const char *key;
        int *dst;
    } ints[] = {
        {"num_layers", &c->num_layers}, {"hidden_size", &c->hidden_size},
        {"num_heads", &c->num_heads},   {"ffn_hidden_size", &c->ffn_hidden_size},
        {"seq_length", &c->seq_length}, {"max_position_embeddings", &c->max_position_embeddings},
        {"vocab_size", &c->vocab_size}, {"padded_vocab_size", &c->padded_vocab_size},
    };
    int norm = 0, pos = 0;
    struct {
        const char *key;
        int *dst;
    } opt_ints[] = {
        {"normalization", &norm},
        {"position_embedding", &pos},
        {"rotary_interleaved", &c->rotary_interleaved},
        {"swiglu", &c->swiglu},
        {"num_query_groups", &c->num_query_groups},
        {"kv_channels", &c->kv_channels},
        {"untie_embeddings", &c->untie_embeddings},
        {"disable_bias_linear", &c->disable_bias_linear},
        {"add_qkv_bias", &c->add_qkv_bias},
    };
    struct {
        const char *key;
        float *dst;
    } opt_floats[] = {{"norm_epsilon", &c->norm_epsilon},
                      {"rotary_base", &c->rotary_base},
                      {"rotary_percent", &c->rotary_percent}};
    int seen = 0;
    *count = -1;
    for (;;) {
        if (!fgets(line, sizeof line, f))
            return mtc_error(MTC_ERR_FORMAT, "%s: header ends early (truncated file?)", path);
        line[strcspn(line, "\n")] = 0;
        if (!strcmp(line, "params") || !strncmp(line, "params ", 7)) {
            if (sscanf(line + 6, "%d %zu", count, total) != 2 || *count < 0)
                return mtc_error(MTC_ERR_FORMAT, "%s: bad header line '%s'", path, line);
            if (seen != 8) return mtc_error(MTC_ERR_FORMAT, "%s: header lacks model sizes", path);
            if (norm < 0 || norm > MTC_NORM_RMSNORM || pos < 0 || pos > MTC_POS_NONE)
                return mtc_error(MTC_ERR_FORMAT, "%s: unknown normalization %d or position %d",
                                 path, norm, pos);
            c->normalization = (mtc_norm_kind)norm, c->position_embedding = (mtc_pos_kind)pos;
            return MTC_OK;
        }
        if (!strncmp(line, "tokenizer ", 10)) {
            size_t n = strlen(line + 10);
            if (n >= sizeof info->tokenizer)
                return mtc_error(MTC_ERR_FORMAT, "%s: tokenizer entry too long", path);
            memcpy(info->tokenizer, line + 10, n + 1);
            continue;
        }
        if (!strncmp(line, "iteration ", 10)) {
            info->iteration = atoll(line + 10);
            continue;
        }
        int matched = 0;
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
            size_t n = strlen(ints[k].key);
            if (!strncmp(line, ints[k].key, n) && line[n] == ' ') {
                *ints[k].dst = atoi(line + n + 1);
                seen++, matched = 1;
                break;
            }
        }
        for (size_t k = 0; !matched && k < sizeof opt_ints / sizeof opt_ints[0]; k++) {
            size_t n = strlen(opt_ints[k].key);
            if (!strncmp(line, opt_ints[k].key, n) && line[n] == ' ')
                *opt_ints[k].dst = atoi(line + n + 1), matched = 1;
        }
        for (size_t k = 0; !matched && k < sizeof opt_floats / sizeof opt_floats[0]; k++) {
            size_t n = strlen(opt_floats[k].key);
            if (!strncmp(line, opt_floats[k].key, n) && line[n] == ' ')
                *opt_floats[k].dst = strtof(line + n + 1, NULL), matched = 1;
        }
        if (!matched) return mtc_error(MTC_ERR_FORMAT, "%s: unknown header line '%s'", path, line);
    }
}

mtc_result_t mtc_ckpt_read_info(const char *path, mtc_ckpt_info *info) {
    if (ckpt_is_dir(path)) return mtc_ckpt_dist_read_info(path, info);
    FILE *f;
    MTC_CHECK(mtc_infile_open(path, &f));
    int count;
    size_t total;
    mtc_result_t rc = ckpt_header(f, path, info, &count, &total);
    fclose(f);
    return rc;
}

static mtc_result_t ckpt_mismatch(const char *path, const char *what, long long file,
                                  long long model) {
    return mtc_error(
        MTC_ERR_FORMAT,
        "%s was saved with %s=%lld but this model has %lld (use the saved model's sizes)", path,
        what, file, model);
}

mtc_result_t mtc_ckpt_load(mtc_model *m, const char *path, mtc_ckpt_info *info) {
    if (ckpt_is_dir(path)) {
        MTC_CHECK(mtc_ckpt_dist_read_info(path, info));
        return mtc_ckpt_dist_load_model(m, path);
    }
    FILE *f;
    MTC_CHECK(mtc_infile_open(path, &f));
    mtc_result_t rc;
    int count;
    size_t total;
    const mtc_registry *r = &m->reg;
    const mtc_model_config *mc = &m->cfg, *fc = &info->cfg;
    char line[512];
    MTC_CHECK_GOTO(ckpt_header(f, path, info, &count, &total), rc, out);
#define SAME(field, name)                                                                          \
    if (fc->field != mc->field) {                                                                  \
        rc = ckpt_mismatch(path, name, fc->field, mc->field);                                      \
        goto out;                                                                                  \
    }
    SAME(num_layers, "num-layers");
    SAME(hidden_size, "hidden-size");
    SAME(num_heads, "num-attention-heads");
    SAME(ffn_hidden_size, "ffn-hidden-size");
    SAME(max_position_embeddings, "max-position-embeddings");
    SAME(vocab_size, "vocab-size");
    SAME(padded_vocab_size, "padded vocabulary");
#undef SAME
    if (count != r->count || total != r->total) {
        rc = mtc_error(MTC_ERR_FORMAT, "%s holds %d parameters (%zu values), the model %d (%zu)",
                       path, count, total, r->count, r->total);
        goto out;
    }
    for (int i = 0; i < count; i++) {
        char name[MTC_PARAM_NAME_MAX + 1];
        long long d0, d1;
        const mtc_param *p = &r->params[i];
        if (!fgets(line, sizeof line, f) ||
            sscanf(line, "param %64s %lld %lld", name, &d0, &d1) != 3) {
            rc = mtc_error(MTC_ERR_FORMAT, "%s: parameter line %d is malformed", path, i + 1);
            goto out;
        }
        long long e1 = p->ndim == 2 ? p->shape[1] : 0;
        if (strcmp(name, p->name) || d0 != p->shape[0] || d1 != e1) {
            rc = mtc_error(
                MTC_ERR_FORMAT,
                "%s: parameter %d is %s (%lld, %lld) but the model expects %s (%lld, %lld)", path,
                i + 1, name, d0, d1, p->name, (long long)p->shape[0], e1);
            goto out;
        }
    }
    if (!fgets(line, sizeof line, f) || strcmp(line, "end\n")) {
        rc = mtc_error(MTC_ERR_FORMAT, "%s: header does not end with 'end'", path);
        goto out;
    }
    long data_at = ftell(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    if (data_at < 0 || size < 0 || (size_t)(size - data_at) != total * sizeof(float)) {
        rc = mtc_error(MTC_ERR_FORMAT,
                       "%s has %ld bytes of weights, expected %zu (truncated or corrupted file)",
                       path, size - data_at, total * sizeof(float));
        goto out;
    }
    fseek(f, data_at, SEEK_SET);
    for (int i = 0; i < count; i++) {
        const mtc_param *p = &r->params[i];
        if (fread(m->params + p->offset, sizeof(float), p->numel, f) != p->numel) {
            rc = mtc_error(MTC_ERR_IO, "%s: read failed in %s", path, p->name);
            goto out;
        }
    }
    rc = MTC_OK;
out:
    fclose(f);
    return rc;
}
