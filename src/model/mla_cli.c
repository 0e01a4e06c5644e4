/* model/mla_cli.c - the MLA flags into mtc_mla_config (mla_cli.h). */
#include "model/mla_cli.h"

#include <string.h>

mtc_result_t mla_cli_resolve(const mla_cli_flags *f, int gqa, int qk_norm, mtc_mla_config *c) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    memset(c, 0, sizeof *c);
    if (f->rope_type && strcmp(f->rope_type, "rope") && strcmp(f->rope_type, "yarn"))
        return mtc_error(E, "rope-type=%s is unknown (use rope or yarn)", f->rope_type);
    if (!f->on) {
        /* argument_utils.py: common attention takes rope_type rope only */
        if (f->rope_type && strcmp(f->rope_type, "rope"))
            return mtc_error(E,
                             "Common attention only support rope_type=\"rope\", but got %s. "
                             "(add --multi-latent-attention or drop --rope-type)",
                             f->rope_type);
        return MTC_OK; /* Megatron ignores the other MLA flags without MLA */
    }
    if (gqa)
        return mtc_error(E, "Group query attention is mutually exclusive with multi latent "
                            "attention. (drop --group-query-attention)");
    c->enabled = 1;
    c->q_lora_rank = f->q_lora, c->kv_lora_rank = f->kv_lora;
    c->qk_head_dim = f->qk_dim, c->qk_pos_emb_head_dim = f->qk_pos, c->v_head_dim = f->v_dim;
    c->latent_norm = qk_norm;
    c->rope_yarn = !f->rope_type || !strcmp(f->rope_type, "yarn");
    c->rotary_scaling_factor = (float)f->scale, c->mscale = (float)f->mscale;
    c->mscale_all_dim = (float)f->mscale_all;
    c->beta_fast = (float)f->beta_fast, c->beta_slow = (float)f->beta_slow;
    c->original_max_position_embeddings = f->orig_max;
    return model_mla_validate(c);
}
