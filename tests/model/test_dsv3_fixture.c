/* tests/model/test_dsv3_fixture.c - a tiny DeepSeek-V3-shaped model against
 * PyTorch: tests/reference/dsv3_tiny.fixture, written by
 * tests/reference/dsv3_reference.py from Megatron-LM core_v0.18.0's code:
 * multi-latent attention with q compression, latent norms and YaRN; a dense
 * first layer then MoE layers (--moe-layer-freq [0]*1+[1]*2) with sigmoid
 * scores, the expert bias in the top-k, group-limited routing, a top-k
 * scaling factor, SwiGLU experts, a shared expert and seq_aux_loss; one MTP
 * depth whose layer is MLA + MoE like the last decoder layer. The main
 * head's logits, the main loss, the MTP loss, each MoE layer's aux loss
 * (the MTP layer's included) and every gradient of main + aux + MTP to
 * 1e-5 of each tensor's scale; the fused head path and
 * --recompute-granularity full (uniform: the MTP layer too) give the same
 * bits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "model/model.h"
#include "model/model_internal.h"
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

typedef struct {
    double loss, mtp, aux[8];
} dsv3_out;

/* One training microbatch (forward with the loss scale, backward) on a model
 * from the fixture's weights; gradients into grads (the chunk's order). With
 * logits, a forward without targets first. */
static dsv3_out run(const mtc_model_config *cfg, const fixture *fx, int B, int recompute,
                    const int *tokens, const int *targets, float *grads, float *logits,
                    nn_pool *pool, size_t *total) {
    mtc_model_chunk_opts o = {.B = B,
                              .nslots = 1,
                              .pool = pool,
                              .first_layer = 0,
                              .last_layer = cfg->num_layers,
                              .has_embedding = 1,
                              .has_head = 1,
                              .logits = 1,
                              .recompute_layers = recompute ? cfg->num_layers : 0,
                              .recompute_mtp = recompute};
    mtc_model *m;
    dsv3_out r = {0};
    T_CHECK(mtc_model_init_chunk(cfg, &o, &m) == MTC_OK);
    T_CHECK(m->mtp_layers == cfg->mtp_num_layers);
    const mtc_registry *reg = &m->reg;
    for (int i = 0; i < reg->count; i++) {
        const mtc_param *p = &reg->params[i];
        const fixture_tensor *t = fixture_get(fx, p->name);
        T_CHECKF(t && t->n == p->numel, "fixture tensor of %s", p->name);
        if (t && t->n == p->numel) memcpy(m->params + p->offset, t->data, p->numel * 4);
    }
    int T = cfg->seq_length, N = B * T;
    if (logits) {
        mtc_model_pass eval = {0};
        mtc_model_forward(m, 0, tokens, NULL, B, T, &eval);
        memcpy(logits, mtc_model_logits(m), (size_t)N * cfg->vocab_size * sizeof(float));
    }
    /* train: the aux losses and their gradients (no dropout in this model) */
    mtc_model_pass pass = {.train = 1, .loss_scale = 1.0f / (float)N, .first_microbatch = 1};
    r.loss = mtc_model_forward(m, 0, tokens, targets, B, T, &pass) / N;
    mtc_model_backward(m, 0, tokens, targets, B, T, 1.0f / (float)N, &pass);
    T_CHECK(m->error == MTC_OK);
    r.mtp = m->mtp_loss_sum[0] / ((double)B * (T - 1));
    for (int l = 0, j = 0; l < cfg->num_layers + cfg->mtp_num_layers; l++)
        if (mtc_model_is_moe_layer(cfg, l))
            r.aux[j++] = m->moe_stats[l].lb_loss * cfg->moe.aux_coeff / m->moe_stats[l].nmb;
    *total = reg->total;
    memcpy(grads, m->grads, reg->total * sizeof(float));
    mtc_model_free(m);
    return r;
}

int main(void) {
    fixture fx;
    T_CHECK(fixture_load(&fx, "tests/reference/dsv3_tiny.fixture") == 0);
    if (fx.count == 0) return T_DONE();
    /* L C NH QL KL dqk dpe dv F V B T E MF SF G GK K D */
    const float *cf = fixture_get(&fx, "config")->data;
    const float *y = fixture_get(&fx, "yarn")->data; /* base s mscale all orig fast slow */
    const float *mo = fixture_get(&fx, "moe")->data; /* scaling aux_coeff */
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
                            .disable_bias_linear = 1,
                            .mtp_num_layers = (int)cf[18],
                            .mtp_loss_scaling_factor = fixture_get(&fx, "mtp_factor")->data[0]};
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
    mtc_moe_config *moe = &cfg.moe;
    moe->num_experts = (int)cf[12];
    T_CHECK(mtc_moe_parse_layer_freq(moe, "[0]*1+[1]*2") == MTC_OK);
    moe->ffn_hidden_size = (int)cf[13];
    moe->shared_ffn = (int)cf[14];
    moe->num_groups = (int)cf[15];
    moe->group_topk = (int)cf[16];
    moe->topk = (int)cf[17];
    moe->score = MOE_SCORE_SIGMOID;
    moe->expert_bias = 1;
    moe->topk_scaling = mo[0];
    moe->lb = MOE_LB_SEQ_AUX;
    moe->aux_coeff = mo[1];
    moe->dispatcher = MOE_DISPATCH_ALLGATHER;
    int B = (int)cf[10], T = cfg.seq_length, N = B * T, V = cfg.vocab_size;
    nn_pool *pool;
    T_CHECK(nn_pool_create(2, &pool) == MTC_OK);
    int tokens[256], targets[256];
    const fixture_tensor *tk = fixture_get(&fx, "tokens"), *tg = fixture_get(&fx, "targets");
    for (int i = 0; i < N; i++)
        tokens[i] = (int)tk->data[i], targets[i] = (int)tg->data[i];

    /* the model's registry once more, for the names of the gradients */
    mtc_model *m;
    T_CHECK(mtc_model_init(&cfg, B, 1, pool, &m) == MTC_OK);
    const mtc_registry *reg = &m->reg;
    float *g0 = calloc(reg->total, sizeof(float)), *g1 = calloc(reg->total, sizeof(float));
    float *logits = malloc((size_t)N * V * sizeof(float));
    size_t total = 0;
    dsv3_out r0 = run(&cfg, &fx, B, 0, tokens, targets, g0, logits, pool, &total);
    T_CHECK(total == reg->total);
    compare("logits", logits, fixture_get(&fx, "logits")->data, (size_t)N * V, 1e-5);
    T_CLOSE(r0.loss, fixture_get(&fx, "loss")->data[0], 0, 1e-5);
    const float *ml = fixture_get(&fx, "mtp_loss")->data, *aux = fixture_get(&fx, "aux")->data;
    T_CHECKF(fabs(r0.mtp - ml[0]) <= 1e-5 * fabs(ml[0]), "mtp_1 loss %.8g vs %.8g", r0.mtp, ml[0]);
    for (int j = 0; j < 3; j++) /* MoE layers 1, 2 and the MTP layer */
        T_CHECKF(fabs(r0.aux[j] - aux[j]) <= 1e-5 * fabs(aux[j]), "aux loss %d: %.8g vs %.8g", j,
                 r0.aux[j], aux[j]);
    int nbias = 0;
    for (int i = 0; i < reg->count; i++) {
        const mtc_param *p = &reg->params[i];
        char name[128];
        snprintf(name, sizeof name, "grad.%s", p->name);
        const fixture_tensor *t = fixture_get(&fx, name);
        T_CHECKF(t && t->n == p->numel, "fixture gradient of %s", p->name);
        if (t && t->n == p->numel) compare(name, g0 + p->offset, t->data, p->numel, 1e-5);
        nbias += strstr(p->name, "expert_bias") != NULL;
    }
    T_CHECK(nbias == 3);
    /* full recomputation, the MTP layer's included: the same bits */
    dsv3_out r1 = run(&cfg, &fx, B, 1, tokens, targets, g1, NULL, pool, &total);
    T_CHECK(r1.loss == r0.loss && r1.mtp == r0.mtp && r1.aux[2] == r0.aux[2]);
    T_CHECK(!memcmp(g0, g1, reg->total * sizeof(float)));
    mtc_model_free(m);
    free(g0);
    free(g1);
    free(logits);
    nn_pool_free(pool);
    fixture_free(&fx);
    return T_DONE();
}
