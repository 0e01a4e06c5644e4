/* ckpt/state.c - registry shards as checkpoint pieces, the configuration
 * as JSON, and loading a serial model; see state.h. */
#include "ckpt/state.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mtc_ckpt_key(char *buf, size_t len, int which, const char *name) {
    static const char *prefix[] = {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq."};
    snprintf(buf, len, "%s%s", prefix[which], name);
}

mtc_result_t mtc_ckpt_param_pieces(mtc_ckpt_pieces *l, const mtc_registry *reg, const mtc_param *p,
                                   int tp_rank, const char *key, float *base, size_t a, size_t b) {
    int64_t rows = p->shape[0], cols = p->ndim == 2 ? p->shape[1] : 1;
    int tp = reg->tp > 1 && p->split_dim >= 0 ? reg->tp : 1;
    int nbox = p->split_dim == 0 && tp > 1 ? p->split_blocks : 1;
    int64_t local0 = 0, start = 0;
    for (int k = 0; k < nbox; k++) {
        mtc_ckpt_piece pc;
        memset(&pc, 0, sizeof pc);
        snprintf(pc.key, sizeof pc.key, "%s", key);
        pc.ndim = p->ndim;
        pc.gshape[0] = rows, pc.gshape[1] = cols;
        pc.rows_may_differ = p->split_rule == MTC_SPLIT_VOCAB;
        if (tp == 1) {
            pc.shape[0] = rows, pc.shape[1] = cols;
        } else if (p->split_dim == 1) {
            pc.shape[0] = rows, pc.shape[1] = cols / tp;
            pc.off[1] = (int64_t)tp_rank * pc.shape[1];
        } else {
            int64_t bl = p->block_rows[k] / tp;
            pc.shape[0] = bl, pc.shape[1] = cols;
            pc.off[0] = start + (int64_t)tp_rank * bl;
            start += p->block_rows[k];
        }
        int64_t n = pc.shape[0] * pc.shape[1];
        int64_t lo = (int64_t)a > local0 ? (int64_t)a : local0;
        int64_t hi = (int64_t)b < local0 + n ? (int64_t)b : local0 + n;
        if (lo < hi) {
            pc.flat0 = lo - local0, pc.flat1 = hi - local0;
            pc.data = base + (lo - (int64_t)a);
            MTC_CHECK(mtc_ckpt_pieces_push(l, &pc));
        }
        local0 += n;
    }
    return MTC_OK;
}

/* ---- configuration ------------------------------------------------------ */

#define CFG_INTS(X)                                                                                \
    X(num_layers, "num-layers")                                                                    \
    X(hidden_size, "hidden-size")                                                                  \
    X(num_heads, "num-attention-heads")                                                            \
    X(ffn_hidden_size, "ffn-hidden-size")                                                          \
    X(seq_length, "seq-length")                                                                    \
    X(max_position_embeddings, "max-position-embeddings")                                          \
    X(vocab_size, "vocab-size")                                                                    \
    X(padded_vocab_size, "padded vocabulary")                                                      \
    X(rotary_interleaved, "rotary-interleaved")                                                    \
    X(swiglu, "swiglu")                                                                            \
    X(num_query_groups, "num-query-groups")                                                        \
    X(kv_channels, "kv-channels")                                                                  \
    X(untie_embeddings, "untie-embeddings-and-output-weights")                                     \
    X(disable_bias_linear, "disable-bias-linear")                                                  \
    X(add_qkv_bias, "add-qkv-bias")
#define CFG_FLOATS(X)                                                                              \
    X(norm_epsilon, "norm-epsilon")                                                                \
    X(rotary_base, "rotary-base")                                                                  \
    X(rotary_percent, "rotary-percent")

cJSON *mtc_ckpt_config_json(const mtc_model_config *c) {
    cJSON *j = cJSON_CreateObject();
#define ADD(f, flag) cJSON_AddNumberToObject(j, #f, (double)c->f);
    CFG_INTS(ADD)
    CFG_FLOATS(ADD)
#undef ADD
    cJSON_AddStringToObject(j, "normalization",
                            c->normalization == MTC_NORM_RMSNORM ? "RMSNorm" : "LayerNorm");
    cJSON_AddStringToObject(j, "position_embedding_type",
                            c->position_embedding == MTC_POS_ROPE   ? "rope"
                            : c->position_embedding == MTC_POS_NONE ? "none"
                                                                    : "learned_absolute");
    return j;
}

/* A stored number converts to its field without undefined behaviour: an
 * integer in int range, or a finite float. */
static int cfg_number_fits(double v, int integer) {
    if (!isfinite(v)) return 0;
    if (integer) return v >= INT_MIN && v <= INT_MAX && v == floor(v);
    return fabs(v) <= FLT_MAX;
}

mtc_result_t mtc_ckpt_config_parse(const cJSON *j, const char *path, mtc_model_config *c) {
    memset(c, 0, sizeof *c);
    const cJSON *x;
#define GET(f, flag)                                                                               \
    x = cJSON_GetObjectItem(j, #f);                                                                \
    if (!cJSON_IsNumber(x))                                                                        \
        return mtc_error(MTC_ERR_FORMAT, "%s: the model configuration lacks %s", path, #f);        \
    if (!cfg_number_fits(x->valuedouble, (__typeof__(c->f))0.5 == 0))                              \
        return mtc_error(MTC_ERR_FORMAT,                                                           \
                         "%s: the model configuration holds %s=%g, which is not %s (a "            \
                         "corrupted checkpoint)",                                                  \
                         path, #f, x->valuedouble,                                                 \
                         (__typeof__(c->f))0.5 == 0 ? "an integer in int range"                    \
                                                    : "a finite float");                           \
    c->f = (__typeof__(c->f))x->valuedouble;
    CFG_INTS(GET)
    CFG_FLOATS(GET)
#undef GET
    const char *n = cJSON_GetStringValue(cJSON_GetObjectItem(j, "normalization"));
    const char *p = cJSON_GetStringValue(cJSON_GetObjectItem(j, "position_embedding_type"));
    if (!n || !p)
        return mtc_error(MTC_ERR_FORMAT, "%s: the model configuration is incomplete", path);
    c->normalization = !strcmp(n, "RMSNorm") ? MTC_NORM_RMSNORM : MTC_NORM_LAYERNORM;
    c->position_embedding = !strcmp(p, "rope")   ? MTC_POS_ROPE
                            : !strcmp(p, "none") ? MTC_POS_NONE
                                                 : MTC_POS_LEARNED;
    if (mtc_model_config_validate(c) != MTC_OK)
        return mtc_error(MTC_ERR_FORMAT, "%s: the model configuration is invalid: %s", path,
                         mtc_error_detail());
    return MTC_OK;
}

mtc_result_t mtc_ckpt_config_check(const mtc_model_config *s, const mtc_model_config *r,
                                   const char *path) {
#define CMP(f, flag)                                                                               \
    if (strcmp(flag, "padded vocabulary") && strcmp(flag, "seq-length") && s->f != r->f &&         \
        (strncmp(flag, "rotary", 6) || r->position_embedding == MTC_POS_ROPE))                     \
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,                                                 \
                         "%s was saved with %s=%g but this run has %g (use the saved model's "     \
                         "sizes)",                                                                 \
                         path, flag, (double)s->f, (double)r->f);
    CFG_INTS(CMP)
    CFG_FLOATS(CMP)
#undef CMP
    if (s->normalization != r->normalization || s->position_embedding != r->position_embedding)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "%s was saved with another --normalization or --position-embedding-type "
                         "(use the saved model's)",
                         path);
    return MTC_OK;
}

/* ---- a serial model ---------------------------------------------------- */

static mtc_result_t open_latest(const char *dir, mtc_ckpt_dist **c, int64_t *it) {
    int found = 0;
    MTC_CHECK(mtc_ckpt_dist_find(dir, -1, it, &found));
    if (!found)
        return mtc_error(MTC_ERR_FORMAT, "%s holds no checkpoint (no %s)", dir, MTC_CKPT_TRACKER);
    return mtc_ckpt_dist_open(dir, *it, c);
}

mtc_result_t mtc_ckpt_dist_read_info(const char *dir, mtc_ckpt_info *info) {
    memset(info, 0, sizeof *info);
    mtc_ckpt_dist *c = NULL;
    int64_t it;
    MTC_CHECK(open_latest(dir, &c, &it));
    const cJSON *common = mtc_ckpt_dist_common(c);
    mtc_result_t rc = mtc_ckpt_config_parse(cJSON_GetObjectItem(common, "model"),
                                            mtc_ckpt_dist_path(c), &info->cfg);
    const char *tok = cJSON_GetStringValue(cJSON_GetObjectItem(common, "tokenizer"));
    snprintf(info->tokenizer, sizeof info->tokenizer, "%s", tok ? tok : "none");
    info->iteration = it;
    mtc_ckpt_dist_close(c);
    return rc;
}

mtc_result_t mtc_ckpt_dist_load_model(mtc_model *m, const char *dir) {
    mtc_ckpt_dist *c = NULL;
    int64_t it;
    MTC_CHECK(open_latest(dir, &c, &it));
    mtc_ckpt_pieces l = {0};
    mtc_result_t rc = MTC_OK;
    const mtc_registry *r = &m->reg;
    for (int i = 0; rc == MTC_OK && i < r->count; i++) {
        const mtc_param *p = &r->params[i];
        rc = mtc_ckpt_param_pieces(&l, r, p, r->tp_rank, p->name, m->params + p->offset, 0,
                                   p->local_numel);
    }
    if (rc == MTC_OK) rc = mtc_ckpt_dist_read(c, l.v, l.n);
    mtc_ckpt_pieces_free(&l);
    mtc_ckpt_dist_close(c);
    return rc;
}

mtc_result_t mtc_ckpt_dist_save_model(const mtc_model *m, const char *dir, const char *tokenizer) {
    MTC_CHECK(mtc_ckpt_dist_check_save_dir(dir));
    MTC_CHECK(mtc_ckpt_dist_begin(dir, 0));
    mtc_ckpt_pieces l = {0};
    mtc_result_t rc = MTC_OK;
    const mtc_registry *r = &m->reg;
    for (int i = 0; rc == MTC_OK && i < r->count; i++) {
        const mtc_param *p = &r->params[i];
        rc = mtc_ckpt_param_pieces(&l, r, p, r->tp_rank, p->name, m->params + p->offset, 0,
                                   p->local_numel);
    }
    if (rc == MTC_OK) rc = mtc_ckpt_dist_write_shard(dir, 0, 0, l.v, l.n);
    mtc_ckpt_pieces_free(&l);
    MTC_CHECK(rc);
    cJSON *common = cJSON_CreateObject();
    cJSON_AddNumberToObject(common, "iteration", 0);
    cJSON_AddNumberToObject(common, "consumed_samples", 0);
    cJSON_AddNumberToObject(common, "optimizer_step", 0);
    cJSON_AddBoolToObject(common, "has_optimizer", 0);
    cJSON_AddStringToObject(common, "tokenizer", tokenizer && tokenizer[0] ? tokenizer : "none");
    cJSON_AddItemToObject(common, "model", mtc_ckpt_config_json(&m->cfg));
    rc = mtc_ckpt_dist_commit(dir, 0, 1, common);
    cJSON_Delete(common);
    return rc;
}
