/* tests/model/test_mla_fixture.c - multi-latent attention (model/mla.c)
 * with YaRN and the latent norms against PyTorch: tests/reference/
 * mla_tiny.fixture, written by tests/reference/mla_reference.py from
 * Megatron core_v0.18.0's MLASelfAttention and YarnRotaryEmbedding with
 * plain torch. The fixture's tensors carry mtc's parameter names. Logits,
 * loss and every gradient to 1e-5 of each tensor's scale; the fused
 * training path and --recompute-modules mla_up_proj give the same bits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "model/family.h"
#include "model/model.h"
#include "test.h"

static void compare(const char *what, const float *a, const float *b, size_t n, double rtol) {
    double maxerr = 0, maxref = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (e > maxerr || isnan(e)) maxerr = isnan(e) ? INFINITY : e;
        if (fabs(b[i]) > maxref) maxref = fabs(b[i]);
    }
    T_CHECKF(maxerr <= rtol * maxref + 1e-9, "%s: max error %.3g vs scale %.3g", what, maxerr,
             maxref);
}

/* One microbatch's loss and gradients (into grads) on a model built with
 * or without mla_up_proj recomputation from the fixture's weights. */
static double run(const mtc_model_config *cfg, const fixture *fx, int B, int rec_up,
                  const int *tokens, const int *targets, float *grads, float *logits,
                  nn_pool *pool) {
    mtc_model_chunk_opts o = {.B = B,
                              .nslots = 1,
                              .pool = pool,
                              .first_layer = 0,
                              .last_layer = cfg->num_layers,
                              .has_embedding = 1,
                              .has_head = 1,
                              .logits = 1,
                              .recompute_mla_up = rec_up};
    mtc_model *m;
    T_CHECK(mtc_model_init_chunk(cfg, &o, &m) == MTC_OK);
    const mtc_registry *r = &m->reg;
    for (int i = 0; i < r->count; i++) {
        const mtc_param *p = &r->params[i];
        const fixture_tensor *t = fixture_get(fx, p->name);
        T_CHECKF(t && t->n == p->numel, "fixture tensor of %s", p->name);
        if (t && t->n == p->numel) memcpy(m->params + p->offset, t->data, p->numel * 4);
    }
    int T = cfg->seq_length, N = B * T;
    mtc_model_pass pass = {0};
    if (logits) {
        mtc_model_forward(m, 0, tokens, NULL, B, T, &pass);
        memcpy(logits, mtc_model_logits(m), (size_t)N * cfg->vocab_size * sizeof(float));
    }
    mtc_model_pass fused = {.loss_scale = 1.0f / (float)N, .first_microbatch = 1};
    double loss = mtc_model_forward(m, 0, tokens, targets, B, T, &fused) / N;
    mtc_model_backward(m, 0, tokens, targets, B, T, 1.0f / (float)N, &fused);
    T_CHECK(m->error == MTC_OK);
    /* gradients by name into the serial order of the fixture check */
    for (int i = 0; i < r->count; i++)
        memcpy(grads + r->params[i].global_offset, m->grads + r->params[i].offset,
               r->params[i].numel * sizeof(float));
    mtc_model_free(m);
    return loss;
}

int main(void) {
    fixture fx;
    T_CHECK(fixture_load(&fx, "tests/reference/mla_tiny.fixture") == 0);
    if (fx.count == 0) return T_DONE();
    const float *cf = fixture_get(&fx, "config")->data; /* L C NH QL KL dqk dpe dv F V B T */
    const float *y = fixture_get(&fx, "yarn")->data;    /* base s mscale all orig fast slow */
    mtc_model_config cfg = {.num_layers = (int)cf[0],
                            .hidden_size = (int)cf[1],
                            .num_heads = (int)cf[2],
                            .ffn_hidden_size = (int)cf[8],
                            .vocab_size = (int)cf[9],
                            .padded_vocab_size = (int)cf[9],
                            .seq_length = (int)cf[11],
                            .max_position_embeddings = (int)cf[11],
                            .init_std = 0.02f,
                            .normalization = MTC_NORM_RMSNORM,
                            .norm_epsilon = fixture_get(&fx, "norm_eps")->data[0],
                            .position_embedding = MTC_POS_ROPE,
                            .rotary_base = y[0],
                            .swiglu = 1,
                            .untie_embeddings = 1,
                            .disable_bias_linear = 1};
    cfg.mla = (mtc_mla_config){.enabled = 1,
                               .q_lora_rank = (int)cf[3],
                               .kv_lora_rank = (int)cf[4],
                               .qk_head_dim = (int)cf[5],
                               .qk_pos_emb_head_dim = (int)cf[6],
                               .v_head_dim = (int)cf[7],
                               .latent_norm = 1,
                               .rope_yarn = 1,
                               .rotary_scaling_factor = y[1],
                               .mscale = y[2],
                               .mscale_all_dim = y[3],
                               .original_max_position_embeddings = (int)y[4],
                               .beta_fast = y[5],
                               .beta_slow = y[6]};
    int B = (int)cf[10], T = cfg.seq_length, N = B * T, V = cfg.vocab_size;
    nn_pool *pool;
    T_CHECK(nn_pool_create(2, &pool) == MTC_OK);
    int tokens[256], targets[256];
    const fixture_tensor *tk = fixture_get(&fx, "tokens"), *tg = fixture_get(&fx, "targets");
    for (int i = 0; i < N; i++)
        tokens[i] = (int)tk->data[i], targets[i] = (int)tg->data[i];

    /* the serial registry: names, shapes and global offsets */
    mtc_registry reg;
    model_register_opts ro = {0, cfg.num_layers, 1, 1, 0, 0, 0};
    model_rank_split rs = {1, 0, 1, 1, 0};
    int pidx[MTC_NGLOBAL_ROLES], lf[64];
    T_CHECK(model_family_register_rank(&reg, &cfg, &ro, &rs, pidx, lf) == MTC_OK);
    T_CHECK(reg.count == 1 + 11 * cfg.num_layers + 2); /* 2 norms, 7 MLA, proj, 2 MLP */
    float *g0 = calloc(reg.global_total, sizeof(float)), *g1 = calloc(reg.global_total, 4);
    float *logits = malloc((size_t)N * V * sizeof(float));
    double loss = run(&cfg, &fx, B, 0, tokens, targets, g0, logits, pool);
    compare("logits", logits, fixture_get(&fx, "logits")->data, (size_t)N * V, 1e-5);
    T_CLOSE(loss, fixture_get(&fx, "loss")->data[0], 0, 1e-5);
    for (int i = 0; i < reg.count; i++) {
        const mtc_param *p = &reg.params[i];
        char name[96];
        snprintf(name, sizeof name, "grad.%s", p->name);
        const fixture_tensor *t = fixture_get(&fx, name);
        T_CHECKF(t && t->n == p->numel, "fixture gradient of %s", p->name);
        if (t && t->n == p->numel) compare(name, g0 + p->global_offset, t->data, p->numel, 1e-5);
    }
    /* --recompute-modules mla_up_proj: the same bits */
    double loss1 = run(&cfg, &fx, B, 1, tokens, targets, g1, NULL, pool);
    T_CHECK(loss1 == loss);
    T_CHECK(!memcmp(g0, g1, reg.global_total * sizeof(float)));
    free(g0);
    free(g1);
    free(logits);
    mtc_registry_free(&reg);
    nn_pool_free(pool);
    fixture_free(&fx);
    return T_DONE();
}
