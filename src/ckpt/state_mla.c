/* ckpt/state_mla.c - the "mla" object of a checkpoint's model configuration. */
#include "ckpt/state_mla.h"

#include <math.h>
#include <string.h>

#define MLA_FIELDS(X)                                                                              \
    X(q_lora_rank, "q-lora-rank")                                                                  \
    X(kv_lora_rank, "kv-lora-rank")                                                                \
    X(qk_head_dim, "qk-head-dim")                                                                  \
    X(qk_pos_emb_head_dim, "qk-pos-emb-head-dim")                                                  \
    X(v_head_dim, "v-head-dim")                                                                    \
    X(latent_norm, "qk-layernorm")                                                                 \
    X(rope_yarn, "rope-type yarn")                                                                 \
    X(original_max_position_embeddings, "original-max-position-embeddings")                        \
    X(rotary_scaling_factor, "rotary-scaling-factor")                                              \
    X(mscale, "mscale")                                                                            \
    X(mscale_all_dim, "mscale-all-dim")                                                            \
    X(beta_fast, "beta-fast")                                                                      \
    X(beta_slow, "beta-slow")

cJSON *mtc_ckpt_mla_json(const mtc_mla_config *c) {
    cJSON *j = cJSON_CreateObject();
#define ADD(f, flag) cJSON_AddNumberToObject(j, #f, (double)c->f);
    MLA_FIELDS(ADD)
#undef ADD
    return j;
}

mtc_result_t mtc_ckpt_mla_parse(const cJSON *j, const char *path, mtc_mla_config *c) {
    memset(c, 0, sizeof *c);
    if (!j) return MTC_OK;
    const cJSON *x;
#define GET(f, flag)                                                                               \
    x = cJSON_GetObjectItem(j, #f);                                                                \
    if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || fabs(x->valuedouble) > 1e9)             \
        return mtc_error(MTC_ERR_FORMAT, "%s: the mla configuration lacks a valid %s", path, #f);  \
    c->f = (__typeof__(c->f))x->valuedouble;
    MLA_FIELDS(GET)
#undef GET
    c->enabled = 1;
    return MTC_OK;
}

mtc_result_t mtc_ckpt_mla_check(const mtc_mla_config *s, const mtc_mla_config *r,
                                const char *path) {
    if (s->enabled != r->enabled)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "%s was saved %s --multi-latent-attention (use the saved model's "
                         "attention)",
                         path, s->enabled ? "with" : "without");
#define CMP(f, flag)                                                                               \
    if (s->f != r->f)                                                                              \
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,                                                 \
                         "%s was saved with multi-latent-attention %s=%g but this run has %g "     \
                         "(use the saved model's)",                                                \
                         path, flag, (double)s->f, (double)r->f);
    if (s->enabled) {
        MLA_FIELDS(CMP)
    }
#undef CMP
    return MTC_OK;
}
