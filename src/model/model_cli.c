/* model/model_cli.c - the model-architecture flags of model_cli.h into an
 * mtc_model_config, with each flag's own range checked here once for every
 * command that takes them; the shape rules across flags are
 * mtc_model_config_validate's. */
#include <math.h>
#include <string.h>

#include "model/model_cli.h"

int model_cli_default_ffn(int hidden, int swiglu) {
    /* in double: a hidden size past INT_MAX / 4 must reach the range check,
     * not overflow (fuzz_args: --hidden-size 2000000000) */
    double F = swiglu ? floor((4.0 * hidden * 2.0 / 3.0) / 64) * 64 : 4.0 * hidden;
    return F > 2147483647.0 ? 2147483647 : (int)F;
}

mtc_result_t model_cli_resolve(const model_cli_flags *f, int groups_seen, model_cli_groups g,
                               mtc_model_config *mc) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    if (!strcmp(f->norm, "LayerNorm"))
        mc->normalization = MTC_NORM_LAYERNORM;
    else if (!strcmp(f->norm, "RMSNorm"))
        mc->normalization = MTC_NORM_RMSNORM;
    else
        return mtc_error(E, "normalization=%s is unknown (use LayerNorm or RMSNorm)", f->norm);
    const char *posemb = f->use_rope ? "rope" : f->posemb;
    if (!strcmp(posemb, "learned_absolute"))
        mc->position_embedding = MTC_POS_LEARNED;
    else if (!strcmp(posemb, "rope"))
        mc->position_embedding = MTC_POS_ROPE;
    else if (!strcmp(posemb, "none"))
        mc->position_embedding = MTC_POS_NONE;
    else
        return mtc_error(E,
                         "position-embedding-type=%s is unknown (use learned_absolute, rope or "
                         "none)",
                         posemb);
    if (!(f->init_std > 0 && f->init_std < 10))
        return mtc_error(E, "init-method-std=%g must be in (0, 10)", f->init_std);
    if (!(f->norm_eps > 0 && f->norm_eps < 1))
        return mtc_error(E, "norm-epsilon=%g must be in (0, 1)", f->norm_eps);
    if (!(f->rot_base > 1 && f->rot_base < 1e12))
        return mtc_error(E, "rotary-base=%g must be in (1, 1e12)", f->rot_base);
    if (!(f->rot_pct > 0 && f->rot_pct <= 1))
        return mtc_error(E, "rotary-percent=%g must be in (0, 1]", f->rot_pct);
    int gqa = f->gqa || (g == MODEL_CLI_GROUPS_IMPLY_GQA && groups_seen);
    if (gqa && f->groups < 1) return mtc_error(E, "num-query-groups=%d must be >= 1", f->groups);
    if (!gqa && groups_seen)
        return mtc_error(E, "--num-query-groups needs --group-query-attention");
    if (f->kv_channels < 0) return mtc_error(E, "kv-channels=%d must be >= 1", f->kv_channels);
    mc->init_std = (float)f->init_std;
    mc->norm_epsilon = (float)f->norm_eps;
    mc->rotary_base = (float)f->rot_base, mc->rotary_percent = (float)f->rot_pct;
    mc->rotary_interleaved = f->rot_inter;
    mc->swiglu = f->swiglu;
    mc->num_query_groups = gqa ? f->groups : 0;
    mc->kv_channels = f->kv_channels;
    mc->untie_embeddings = f->untie;
    mc->disable_bias_linear = f->nobias;
    mc->add_qkv_bias = f->qkv_bias, mc->qk_layernorm = f->qk_norm;
    MTC_CHECK(mla_cli_resolve(&f->mla, gqa, f->qk_norm, &mc->mla));
    if (mc->mla.enabled) { /* --qk-layernorm means the latent norms there */
        mc->qk_layernorm = 0;
        if (f->rot_inter)
            return mtc_error(E, "rotary_interleaved does not work with multi_latent_attention. "
                                "(drop --rotary-interleaved)");
    }
    if (f->mtp_layers < 0) return mtc_error(E, "mtp-num-layers=%d must be >= 0", f->mtp_layers);
    if (!(f->mtp_factor >= 0 && f->mtp_factor < 1e6))
        return mtc_error(E, "mtp-loss-scaling-factor=%g must be >= 0", f->mtp_factor);
    mc->mtp_num_layers = f->mtp_layers, mc->mtp_loss_scaling_factor = (float)f->mtp_factor;
    return MTC_OK;
}
