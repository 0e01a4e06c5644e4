/* ckpt/state.c - registry shards as checkpoint pieces, the configuration
 * as JSON, and loading a serial model; see state.h. */
#include "ckpt/state.h"
#include "ckpt/state_mla.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/tok_files.h"

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
    X(add_qkv_bias, "add-qkv-bias")                                                                \
    X(qk_layernorm, "qk-layernorm")
#define CFG_FLOATS(X)                                                                              \
    X(norm_epsilon, "norm-epsilon")                                                                \
    X(rotary_base, "rotary-base")                                                                  \
    X(rotary_percent, "rotary-percent")

/* ---- the MoE flags (a "moe" object, absent for a dense model) ---------- */

/* Integer fields, float fields: (field, Megatron flag, changes the model's
 * function: a --load with another value is refused). The training-only
 * ones (losses, capacity, dispatcher, bias rate) are recorded and may
 * change on --load, as Megatron allows. */
/* clang-format off */
#define MOE_INTS(X)                                                                                \
    X(num_experts, "num-experts", 1)                                                               \
    X(ffn_hidden_size, "moe-ffn-hidden-size", 1)                                                   \
    X(topk, "moe-router-topk", 1)                                                                  \
    X(pre_softmax, "moe-router-pre-softmax", 1)                                                    \
    X(num_groups, "moe-router-num-groups", 1)                                                      \
    X(group_topk, "moe-router-group-topk", 1)                                                      \
    X(expert_bias, "moe-router-enable-expert-bias", 1)                                             \
    X(shared_ffn, "moe-shared-expert-intermediate-size", 1)                                        \
    X(pad_to_capacity, "moe-pad-expert-input-to-capacity", 0)
#define MOE_FLOATS(X)                                                                              \
    X(topk_scaling, "moe-router-topk-scaling-factor", 1)                                           \
    X(bias_update_rate, "moe-router-bias-update-rate", 0)                                          \
    X(aux_coeff, "moe-aux-loss-coeff", 0)                                                          \
    X(z_coeff, "moe-z-loss-coeff", 0)                                                              \
    X(capacity_factor, "moe-expert-capacity-factor", 0)
/* clang-format on */
/* Enum fields as Megatron's strings: (field, key, flag, names, count, refused on change). */
static const char *const moe_score_names[] = {"softmax", "sigmoid"};
static const char *const moe_lb_names[] = {"aux_loss", "seq_aux_loss", "global_aux_loss", "none"};
static const char *const moe_drop_names[] = {"probs", "position"};
static const char *const moe_disp_names[] = {"allgather", "alltoall"};
/* clang-format off */
#define MOE_ENUMS(X)                                                                               \
    X(score, "moe_router_score_function", "moe-router-score-function", moe_score_names, 2, 1)      \
    X(lb, "moe_router_load_balancing_type", "moe-router-load-balancing-type", moe_lb_names, 4, 0)  \
    X(drop, "moe_token_drop_policy", "moe-token-drop-policy", moe_drop_names, 2, 0)                \
    X(dispatcher, "moe_token_dispatcher_type", "moe-token-dispatcher-type", moe_disp_names, 2, 0)
/* clang-format on */

/* The MoE layers as Megatron's list form "[1,0,1,0]" of num_layers entries. */
static void moe_pattern_string(char *buf, size_t len, const mtc_moe_config *m, int layers) {
    size_t k = 0;
    buf[k++] = '[';
    for (int l = 0; l < layers && k + 3 < len; l++)
        k += (size_t)snprintf(buf + k, len - k, "%s%d", l ? "," : "", mtc_moe_is_layer(m, l));
    snprintf(buf + k, len - k, "]");
}

static cJSON *moe_json(const mtc_model_config *c) {
    const mtc_moe_config *m = &c->moe;
    cJSON *j = cJSON_CreateObject();
#define ADD(f, flag, fixed) cJSON_AddNumberToObject(j, #f, (double)m->f);
    MOE_INTS(ADD)
    MOE_FLOATS(ADD)
#undef ADD
#define ADD(f, key, flag, names, n, fixed)                                                         \
    cJSON_AddStringToObject(j, key, (int)m->f >= 0 && (int)m->f < n ? names[m->f] : "?");
    MOE_ENUMS(ADD)
#undef ADD
    char pat[2 * MOE_PATTERN_MAX + 4];
    moe_pattern_string(pat, sizeof pat, m, c->num_layers);
    cJSON_AddStringToObject(j, "moe_layer_freq", pat);
    return j;
}

static int cfg_number_fits(double v, int integer);

static mtc_result_t moe_parse(const cJSON *j, const char *path, mtc_model_config *c) {
    mtc_moe_config *m = &c->moe;
    const cJSON *x;
#define GET(f, flag, fixed)                                                                        \
    x = cJSON_GetObjectItem(j, #f);                                                                \
    if (!cJSON_IsNumber(x) || !cfg_number_fits(x->valuedouble, (__typeof__(m->f))0.5 == 0))        \
        return mtc_error(MTC_ERR_FORMAT, "%s: the MoE configuration lacks a valid %s", path, #f);  \
    m->f = (__typeof__(m->f))x->valuedouble;
    MOE_INTS(GET)
    MOE_FLOATS(GET)
#undef GET
    const char *v;
#define GET(f, key, flag, names, n, fixed)                                                         \
    v = cJSON_GetStringValue(cJSON_GetObjectItem(j, key));                                         \
    for (int i = 0; v && i <= n; i++)                                                              \
        if (i == n)                                                                                \
            return mtc_error(MTC_ERR_FORMAT, "%s: the MoE configuration has %s=%s (unknown)",      \
                             path, key, v);                                                        \
        else if (!strcmp(v, names[i])) {                                                           \
            m->f = (__typeof__(m->f))i;                                                            \
            break;                                                                                 \
        }                                                                                          \
    if (!v) return mtc_error(MTC_ERR_FORMAT, "%s: the MoE configuration lacks %s", path, key);
    MOE_ENUMS(GET)
#undef GET
    v = cJSON_GetStringValue(cJSON_GetObjectItem(j, "moe_layer_freq"));
    if (!v || mtc_moe_parse_layer_freq(m, v) != MTC_OK)
        return mtc_error(MTC_ERR_FORMAT, "%s: the MoE configuration has no valid moe_layer_freq",
                         path);
    return MTC_OK;
}

/* A saved MoE flag that changes the model differs from this run's. */
static mtc_result_t moe_check(const mtc_model_config *s, const mtc_model_config *r,
                              const char *path) {
    /* the defaults as the values they stand for (top-k 0 = 2, ffn 0 = the model's) */
    mtc_moe_config ea = s->moe, eb = r->moe;
    ea.topk = mtc_moe_topk(&s->moe), eb.topk = mtc_moe_topk(&r->moe);
    ea.ffn_hidden_size = mtc_model_moe_ffn(s), eb.ffn_hidden_size = mtc_model_moe_ffn(r);
    const mtc_moe_config *a = &ea, *b = &eb;
    if (a->num_experts != b->num_experts)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "%s was saved with num-experts=%d but this run has %d (pass the saved "
                         "model's MoE flags)",
                         path, a->num_experts, b->num_experts);
    if (a->num_experts == 0) return MTC_OK;
#define CMP(f, flag, fixed)                                                                        \
    if (fixed && a->f != b->f)                                                                     \
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,                                                 \
                         "%s was saved with %s=%g but this run has %g (pass the saved model's "    \
                         "MoE flags)",                                                             \
                         path, flag, (double)a->f, (double)b->f);
    MOE_INTS(CMP)
    MOE_FLOATS(CMP)
#undef CMP
#define CMP(f, key, flag, names, n, fixed)                                                         \
    if (fixed && a->f != b->f)                                                                     \
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,                                                 \
                         "%s was saved with %s=%s but this run has %s (pass the saved model's "    \
                         "MoE flags)",                                                             \
                         path, flag, names[a->f], names[b->f]);
    MOE_ENUMS(CMP)
#undef CMP
    char pa[2 * MOE_PATTERN_MAX + 4], pb[2 * MOE_PATTERN_MAX + 4];
    moe_pattern_string(pa, sizeof pa, a, s->num_layers);
    moe_pattern_string(pb, sizeof pb, b, r->num_layers);
    if (strcmp(pa, pb))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "%s was saved with moe-layer-freq=%s but this run has %s (pass the saved "
                         "model's MoE flags)",
                         path, pa, pb);
    return MTC_OK;
}

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
    if (c->moe.num_experts > 0) cJSON_AddItemToObject(j, "moe", moe_json(c));
    if (c->mla.enabled) cJSON_AddItemToObject(j, "mla", mtc_ckpt_mla_json(&c->mla));
    if (c->mtp_num_layers > 0) { /* absent: no MTP (and every save before it) */
        cJSON_AddNumberToObject(j, "mtp_num_layers", c->mtp_num_layers);
        cJSON_AddNumberToObject(j, "mtp_loss_scaling_factor", c->mtp_loss_scaling_factor);
    }
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
        return mtc_error(MTC_ERR_FORMAT, "%s: the model configuration %s %s%s", path,              \
                         x ? "holds a non-number" : "lacks", #f,                                   \
                         x ? " (a corrupted checkpoint)" : "");                                    \
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
    if (strcmp(n, "RMSNorm") && strcmp(n, "LayerNorm"))
        return mtc_error(MTC_ERR_FORMAT,
                         "%s: the model configuration holds normalization=%s (known: LayerNorm, "
                         "RMSNorm; a corrupted checkpoint)",
                         path, n);
    if (strcmp(p, "rope") && strcmp(p, "none") && strcmp(p, "learned_absolute"))
        return mtc_error(MTC_ERR_FORMAT,
                         "%s: the model configuration holds position_embedding_type=%s (known: "
                         "learned_absolute, rope, none; a corrupted checkpoint)",
                         path, p);
    c->normalization = !strcmp(n, "RMSNorm") ? MTC_NORM_RMSNORM : MTC_NORM_LAYERNORM;
    c->position_embedding = !strcmp(p, "rope")   ? MTC_POS_ROPE
                            : !strcmp(p, "none") ? MTC_POS_NONE
                                                 : MTC_POS_LEARNED;
    const cJSON *moe = cJSON_GetObjectItem(j, "moe"); /* absent: a dense model (or an old save) */
    if (moe) MTC_CHECK(moe_parse(moe, path, c));
    MTC_CHECK(mtc_ckpt_mla_parse(cJSON_GetObjectItem(j, "mla"), path, &c->mla));
    const cJSON *mtp = cJSON_GetObjectItem(j, "mtp_num_layers");
    if (mtp) {
        const cJSON *fac = cJSON_GetObjectItem(j, "mtp_loss_scaling_factor");
        if (!cJSON_IsNumber(mtp) || !cJSON_IsNumber(fac) || !cfg_number_fits(mtp->valuedouble, 1))
            return mtc_error(MTC_ERR_FORMAT,
                             "%s: the model configuration's MTP entries are not "
                             "numbers (a corrupted checkpoint)",
                             path);
        c->mtp_num_layers = (int)mtp->valuedouble;
        c->mtp_loss_scaling_factor = (float)fac->valuedouble;
    }
    if (mtc_model_config_validate(c) != MTC_OK)
        return mtc_error(MTC_ERR_FORMAT, "%s: the model configuration is invalid: %s", path,
                         mtc_error_detail());
    return MTC_OK;
}

mtc_result_t mtc_ckpt_config_check(const mtc_model_config *s, const mtc_model_config *r,
                                   const char *path) {
    MTC_CHECK(mtc_ckpt_mla_check(&s->mla, &r->mla, path)); /* first: it decides the rest */
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
    if (s->mtp_num_layers != r->mtp_num_layers) /* the training-only factor may change */
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "%s was saved with mtp-num-layers=%d but this run has %d (pass the saved "
                         "value)",
                         path, s->mtp_num_layers, r->mtp_num_layers);
    if (s->normalization != r->normalization || s->position_embedding != r->position_embedding)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "%s was saved with another --normalization or --position-embedding-type "
                         "(use the saved model's)",
                         path);
    return moe_check(s, r, path);
}

/* ---- a serial model ---------------------------------------------------- */

static mtc_result_t open_latest(const char *dir, int64_t step, mtc_ckpt_dist **c, int64_t *it) {
    int found = 0;
    MTC_CHECK(mtc_ckpt_dist_find(dir, step, it, &found));
    if (!found)
        return mtc_error(MTC_ERR_FORMAT, "%s holds no checkpoint (no %s)", dir, MTC_CKPT_TRACKER);
    return mtc_ckpt_dist_open(dir, *it, c);
}

mtc_result_t mtc_ckpt_dist_read_info_at(const char *dir, int64_t step, mtc_ckpt_info *info) {
    memset(info, 0, sizeof *info);
    mtc_ckpt_dist *c = NULL;
    int64_t it;
    MTC_CHECK(open_latest(dir, step, &c, &it));
    const cJSON *common = mtc_ckpt_dist_common(c);
    mtc_result_t rc = mtc_ckpt_config_parse(cJSON_GetObjectItem(common, "model"),
                                            mtc_ckpt_dist_path(c), &info->cfg);
    const char *tok = cJSON_GetStringValue(cJSON_GetObjectItem(common, "tokenizer"));
    /* the tokenizer's files are the copies in the iteration folder */
    char iter_dir[4200];
    mtc_ckpt_dist_dirname(iter_dir, sizeof iter_dir, dir, it, 0);
    if (rc == MTC_OK)
        rc = mtc_ckpt_tok_resolve(tok ? tok : "none", iter_dir, info->tokenizer,
                                  sizeof info->tokenizer);
    info->iteration = it;
    mtc_ckpt_dist_close(c);
    return rc;
}

mtc_result_t mtc_ckpt_dist_read_info(const char *dir, mtc_ckpt_info *info) {
    return mtc_ckpt_dist_read_info_at(dir, -1, info);
}

mtc_result_t mtc_ckpt_dist_load_model_at(mtc_model *m, const char *dir, int64_t step) {
    mtc_ckpt_dist *c = NULL;
    int64_t it;
    MTC_CHECK(open_latest(dir, step, &c, &it));
    mtc_ckpt_pieces l = {0};
    mtc_result_t rc = MTC_OK;
    const mtc_registry *r = &m->reg;
    for (int i = 0; rc == MTC_OK && i < r->count; i++) {
        const mtc_param *p = &r->params[i];
        rc = mtc_ckpt_param_pieces(&l, r, p, r->tp_rank, p->name, m->params + p->offset, 0,
                                   p->local_numel);
    }
    if (rc == MTC_OK) rc = mtc_ckpt_dist_read(c, l.v, l.n);
    int32_t *used = rc == MTC_OK ? malloc(((size_t)mtc_ckpt_dist_count(c) + 1) * sizeof *used) : 0;
    if (rc == MTC_OK && !used) rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "checkpoint tensor list");
    if (rc == MTC_OK) { /* no stored tensor ignored */
        mtc_ckpt_dist_used(c, used);
        rc = mtc_ckpt_dist_check_used(c, used);
    }
    free(used);
    mtc_ckpt_pieces_free(&l);
    mtc_ckpt_dist_close(c);
    return rc;
}

mtc_result_t mtc_ckpt_dist_load_model(mtc_model *m, const char *dir) {
    return mtc_ckpt_dist_load_model_at(m, dir, -1);
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
    if (rc == MTC_OK) rc = mtc_ckpt_dist_write_shard(dir, 0, 0, l.v, l.n, NULL);
    mtc_ckpt_pieces_free(&l);
    MTC_CHECK(rc);
    cJSON *common = cJSON_CreateObject();
    cJSON_AddNumberToObject(common, "iteration", 0);
    cJSON_AddNumberToObject(common, "consumed_samples", 0);
    cJSON_AddNumberToObject(common, "optimizer_step", 0);
    cJSON_AddBoolToObject(common, "has_optimizer", 0);
    cJSON_AddStringToObject(common, "tokenizer", tokenizer && tokenizer[0] ? tokenizer : "none");
    cJSON_AddItemToObject(common, "model", mtc_ckpt_config_json(&m->cfg));
    rc = mtc_ckpt_dist_commit(dir, 0, 1, common, NULL);
    cJSON_Delete(common);
    return rc;
}
