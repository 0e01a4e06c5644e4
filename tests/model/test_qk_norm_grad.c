/* tests/model/test_qk_norm_grad.c - --qk-layernorm (model/block.c): the
 * whole model's gradients against central finite differences, every
 * parameter (the q/k norm weights and biases included) along a random unit
 * direction, for LayerNorm with learned positions and for RMSNorm with RoPE
 * and grouped-query attention (the norms run before RoPE, k over the
 * groups), dropout on; the q/k norms are really applied (the loss moves
 * when their weights do, and it differs from the same model without them);
 * and the registry has them as Megatron has q_layernorm / k_layernorm:
 * (HS) per layer, not split over TP (their TP gradient sum is checked by
 * tests/parity/qk_norm_cli.sh against the serial run). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "model/model.h"
#include "test.h"

static double loss_of(mtc_model *m, const int *tok, const int *tgt, int B, int T,
                      const mtc_model_pass *pass) {
    return mtc_model_forward(m, 0, tok, tgt, B, T, pass) / (B * T);
}

static void check_config(mtc_model_config cfg, const char *what) {
    int B = 2, T = 5, N = B * T;
    nn_pool *pool;
    T_CHECK(nn_pool_create(1, &pool) == MTC_OK);
    mtc_model *m;
    T_CHECK(mtc_model_init(&cfg, B, 1, pool, &m) == MTC_OK);
    mtc_model_init_params(m, 7);
    for (size_t i = 0; i < m->reg.total; i++) /* non-trivial norm weights and biases */
        m->params[i] += 0.1f * mtc_rng_normal(99, 1, i);
    int tok[10], tgt[10];
    for (int i = 0; i < N; i++)
        tok[i] = (int)(mtc_rng_u32(5, 1, i) % 11), tgt[i] = (int)(mtc_rng_u32(5, 2, i) % 11);
    mtc_model_pass pass = {.train = 1, .seed = 42, .iteration = 3, .b0 = 4};
    mtc_model_zero_grad(m);
    double l0 = loss_of(m, tok, tgt, B, T, &pass);
    mtc_model_backward(m, 0, tok, tgt, B, T, 1.0f / N, &pass);

    /* the roles: (HS) per layer, q and k, with a bias only under LayerNorm */
    int HS = mtc_model_head_size(&cfg), nqk = 0;
    for (int pi = 0; pi < m->reg.count; pi++) {
        const mtc_param *p = &m->reg.params[pi];
        if (p->role < MTC_ROLE_QNORM_W || p->role > MTC_ROLE_KNORM_B || p->layer < 0) continue;
        nqk++;
        T_CHECKF(p->ndim == 1 && p->shape[0] == HS && p->split_rule == MTC_SPLIT_NONE, "%s",
                 p->name);
        T_CHECKF((p->role == MTC_ROLE_QNORM_B || p->role == MTC_ROLE_KNORM_B) ==
                     (strstr(p->name, ".bias") != NULL),
                 "%s", p->name);
    }
    int per_layer = cfg.normalization == MTC_NORM_RMSNORM ? 2 : 4;
    T_CHECKF(nqk == per_layer * cfg.num_layers, "%s: %d q/k norm params", what, nqk);

    /* the same model without the norms computes another loss */
    mtc_model_config plain = cfg;
    plain.qk_layernorm = 0;
    mtc_model *mp;
    T_CHECK(mtc_model_init(&plain, B, 1, pool, &mp) == MTC_OK);
    mtc_model_init_params(mp, 7);
    double lp0 = loss_of(mp, tok, tgt, B, T, &pass);
    T_CHECKF(fabs(lp0 - l0) > 1e-4, "%s: loss %g with the norms, %g without", what, l0, lp0);
    mtc_model_free(mp);

    const float eps = 1e-2f;
    float *d = malloc(m->reg.total * sizeof(float));
    for (int pi = 0; pi < m->reg.count; pi++) {
        const mtc_param *p = &m->reg.params[pi];
        float *w = m->params + p->offset;
        double nrm = 0, gd = 0;
        mtc_rng_fill_normal(d, p->numel, 11, (uint64_t)pi, 0, 0.0f, 1.0f);
        for (size_t i = 0; i < p->numel; i++)
            nrm += (double)d[i] * d[i];
        nrm = sqrt(nrm);
        for (size_t i = 0; i < p->numel; i++)
            d[i] = (float)(d[i] / nrm), gd += (double)m->grads[p->offset + i] * d[i];
        float *save = malloc(p->numel * sizeof(float));
        memcpy(save, w, p->numel * sizeof(float));
        for (size_t i = 0; i < p->numel; i++)
            w[i] = save[i] + eps * d[i];
        double lp = loss_of(m, tok, tgt, B, T, &pass);
        for (size_t i = 0; i < p->numel; i++)
            w[i] = save[i] - eps * d[i];
        double lm = loss_of(m, tok, tgt, B, T, &pass);
        memcpy(w, save, p->numel * sizeof(float));
        free(save);
        double fd = (lp - lm) / (2.0 * eps);
        T_CHECKF(fabs(fd - gd) <= 5e-5 + 2e-3 * fabs(gd),
                 "%s %s: finite difference %.7g vs gradient %.7g", what, p->name, fd, gd);
        /* (a key bias without RoPE adds q.b to every score of a query row:
         * softmax ignores it, so its gradient is 0 exactly) */
        int kb_free = p->role == MTC_ROLE_KNORM_B && cfg.position_embedding != MTC_POS_ROPE;
        if (p->role >= MTC_ROLE_QNORM_W && p->role <= MTC_ROLE_KNORM_B && p->layer >= 0 && !kb_free)
            T_CHECKF(fabs(gd) > 1e-6, "%s %s: no gradient", what, p->name);
    }
    free(d);
    mtc_model_free(m);
    nn_pool_free(pool);
}

int main(void) {
    mtc_model_config gpt = {.num_layers = 2,
                            .hidden_size = 8,
                            .num_heads = 2,
                            .ffn_hidden_size = 16,
                            .seq_length = 5,
                            .max_position_embeddings = 6,
                            .vocab_size = 11,
                            .padded_vocab_size = 16,
                            .hidden_dropout = 0.1f,
                            .attention_dropout = 0.1f,
                            .init_std = 0.3f,
                            .qk_layernorm = 1};
    check_config(gpt, "LayerNorm");
    mtc_model_config llama = gpt;
    llama.normalization = MTC_NORM_RMSNORM, llama.position_embedding = MTC_POS_ROPE;
    llama.swiglu = 1, llama.num_heads = 4, llama.num_query_groups = 2, llama.kv_channels = 4;
    llama.disable_bias_linear = 1, llama.untie_embeddings = 1;
    check_config(llama, "RMSNorm + RoPE + GQA");
    return T_DONE();
}
