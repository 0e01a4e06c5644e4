/* model/model_mla.c - the model's side of multi-latent attention
 * (model/mla.h): its options, weight views and scratch for a chunk.
 * model.c and model_pass.c call these; the layer itself is mla.c. */
#include "model/model_internal.h"

model_mla_opts mtc_model_mla_opts(const mtc_model *m) {
    const mtc_model_config *c = &m->cfg;
    model_mla_opts o = {.cfg = &c->mla,
                        .rms = c->normalization == MTC_NORM_RMSNORM,
                        .eps = mtc_model_norm_eps(c),
                        .rope = &m->yarn,
                        .recompute_up = m->rec_up};
    return o;
}

model_mla_params mtc_model_mla_params(float *const *w) {
    model_mla_params p = {.q = w[MTC_ROLE_MLA_Q_W],
                          .qd = w[MTC_ROLE_MLA_QD_W],
                          .qn_w = w[MTC_ROLE_MLA_QN_W],
                          .qn_b = w[MTC_ROLE_MLA_QN_B],
                          .qu = w[MTC_ROLE_MLA_QU_W],
                          .kvd = w[MTC_ROLE_MLA_KVD_W],
                          .kvn_w = w[MTC_ROLE_MLA_KVN_W],
                          .kvn_b = w[MTC_ROLE_MLA_KVN_B],
                          .kvu = w[MTC_ROLE_MLA_KVU_W],
                          .proj = w[MTC_ROLE_PROJ_W],
                          .proj_b = w[MTC_ROLE_PROJ_B]};
    return p;
}

size_t mtc_model_mla_scratch(const mtc_model *m) {
    if (!m->cfg.mla.enabled) return 0;
    model_mla_opts o = mtc_model_mla_opts(m);
    model_block_dims d = mtc_model_block_dims(m);
    size_t s = model_mla_scratch_floats(&m->tp, m->B, m->T, &d, &o);
    for (int l = m->first_layer; m->cp_layer && l < m->last_layer; l++) {
        model_block_dims dl = mtc_model_layer_dims(m, l);
        size_t x = model_mla_scratch_floats(&m->tp, m->B, m->T, &dl, &o);
        s = x > s ? x : s;
    }
    return s;
}

size_t mtc_model_mla_floats(const mtc_model *m) {
    if (!m->cfg.mla.enabled) return 0;
    model_mla_opts o = mtc_model_mla_opts(m);
    return model_mla_acts_floats(&o, m->tp_size, m->B, m->T, m->T_loc, m->cfg.num_heads);
}

mtc_result_t mtc_model_mla_init(mtc_model *m, const mtc_model_chunk_opts *o) {
    const mtc_model_config *c = &m->cfg;
    m->rec_up = c->mla.enabled && o->recompute_mla_up;
    if (!c->mla.enabled) return MTC_OK;
    nn_yarn_params yp = model_mla_yarn_params(&c->mla, c->rotary_base);
    return nn_yarn_table_init(&m->yarn, c->max_position_embeddings, c->mla.qk_pos_emb_head_dim,
                              &yp);
}

mtc_result_t mtc_model_mla_bf16_prepare(const mtc_model *m) {
    if (!m->cfg.mla.enabled || m->last_layer <= m->first_layer) return MTC_OK;
    model_mla_opts o = mtc_model_mla_opts(m);
    float *const *w = m->layers[m->first_layer].w;
    return model_mla_bf16_prepare(&m->tp, &o, m->B, m->T, m->T_loc, m->cfg.hidden_size,
                                  m->cfg.num_heads, w[MTC_ROLE_PROJ_B] != NULL);
}
