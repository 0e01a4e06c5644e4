/* tests/model/test_gpt_grad.c - the whole model's gradients against central
 * finite differences on a tiny configuration WITH dropout (masks are keyed
 * by position, so the perturbed forwards draw the same masks): for every
 * parameter, the derivative of the loss along a random unit direction in
 * that parameter equals g . d. Also: gradients do not depend on the number
 * of threads, and the padded vocabulary rows of wte get a gradient from
 * the head (the softmax covers them, as Megatron's; the finite differences
 * above check its value with the rest of wte). */
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

int main(void) {
    mtc_model_config cfg = {.num_layers = 2,
                            .hidden_size = 8,
                            .num_heads = 2,
                            .ffn_hidden_size = 16,
                            .seq_length = 5,
                            .max_position_embeddings = 6,
                            .vocab_size = 11,
                            .padded_vocab_size = 16,
                            .hidden_dropout = 0.1f,
                            .attention_dropout = 0.1f,
                            .init_std = 0.3f};
    int B = 2, T = 5, N = B * T;
    nn_pool *pool1, *pool2;
    T_CHECK(nn_pool_create(1, &pool1) == MTC_OK);
    T_CHECK(nn_pool_create(2, &pool2) == MTC_OK);
    mtc_model *m, *m2;
    T_CHECK(mtc_model_init(&cfg, B, 1, pool1, &m) == MTC_OK);
    T_CHECK(mtc_model_init(&cfg, B, 1, pool2, &m2) == MTC_OK);
    mtc_model_init_params(m, 7);
    /* make LayerNorm weights and biases non-trivial too */
    for (size_t i = 0; i < m->reg.total; i++)
        m->params[i] += 0.1f * mtc_rng_normal(99, 1, i);
    memcpy(m2->params, m->params, m->reg.total * sizeof(float));
    int tok[10], tgt[10];
    for (int i = 0; i < N; i++)
        tok[i] = (int)(mtc_rng_u32(5, 1, i) % 11), tgt[i] = (int)(mtc_rng_u32(5, 2, i) % 11);
    /* targets avoid token 10 so the wte row of 10 gets only embedding gradient */
    mtc_model_pass pass = {.train = 1, .seed = 42, .iteration = 3, .b0 = 4};

    mtc_model_zero_grad(m);
    loss_of(m, tok, tgt, B, T, &pass);
    mtc_model_backward(m, 0, tok, tgt, B, T, 1.0f / N, &pass);
    mtc_model_zero_grad(m2);
    loss_of(m2, tok, tgt, B, T, &pass);
    mtc_model_backward(m2, 0, tok, tgt, B, T, 1.0f / N, &pass);
    T_CHECK(!memcmp(m->grads, m2->grads, m->reg.total * sizeof(float)));

    /* first_microbatch overwrites whatever the buffer holds; later ones add */
    {
        mtc_model_pass first = pass, second = pass;
        first.first_microbatch = 1;
        second.b0 = 6;
        for (size_t i = 0; i < m2->reg.total; i++)
            m2->grads[i] = 1e3f * (float)(i % 5 + 1);
        loss_of(m2, tok, tgt, B, T, &first);
        mtc_model_backward(m2, 0, tok, tgt, B, T, 1.0f / N, &first);
        loss_of(m2, tok, tgt, B, T, &second);
        mtc_model_backward(m2, 0, tok, tgt, B, T, 1.0f / N, &second);
        mtc_model_zero_grad(m);
        loss_of(m, tok, tgt, B, T, &pass);
        mtc_model_backward(m, 0, tok, tgt, B, T, 1.0f / N, &pass);
        loss_of(m, tok, tgt, B, T, &second);
        mtc_model_backward(m, 0, tok, tgt, B, T, 1.0f / N, &second);
        int diff = 0;
        for (size_t i = 0; i < m->reg.total; i++)
            diff += m->grads[i] != m2->grads[i];
        T_CHECKF(diff == 0, "%d gradients differ between overwrite and zero+accumulate", diff);
        /* restore the single-microbatch gradients used below */
        mtc_model_zero_grad(m);
        loss_of(m, tok, tgt, B, T, &pass);
        mtc_model_backward(m, 0, tok, tgt, B, T, 1.0f / N, &pass);
    }

    /* two in-flight microbatches in two slots do not disturb each other */
    mtc_model *m3;
    T_CHECK(mtc_model_init(&cfg, B, 2, pool2, &m3) == MTC_OK);
    memcpy(m3->params, m->params, m->reg.total * sizeof(float));
    int tok_b[10];
    for (int i = 0; i < N; i++)
        tok_b[i] = (tok[i] + 3) % 11;
    mtc_model_pass pass_b = pass;
    pass_b.b0 = 0;
    mtc_model_forward(m3, 1, tok_b, NULL, B, T, &pass_b);
    float out_b[10 * 8];
    memcpy(out_b, mtc_model_slot_output(m3, 1), sizeof out_b);
    mtc_model_zero_grad(m3);
    mtc_model_forward(m3, 0, tok, tgt, B, T, &pass);
    mtc_model_backward(m3, 0, tok, tgt, B, T, 1.0f / N, &pass);
    T_CHECK(!memcmp(m->grads, m3->grads, m->reg.total * sizeof(float)));
    T_CHECK(!memcmp(out_b, mtc_model_slot_output(m3, 1), sizeof out_b));
    T_CHECK(memcmp(out_b, mtc_model_slot_output(m3, 0), sizeof out_b) != 0);
    mtc_model_free(m3);

    /* dropout is really on: a pass without it gives another loss */
    mtc_model_pass eval = {0};
    double l_train = loss_of(m, tok, tgt, B, T, &pass), l_eval = loss_of(m, tok, tgt, B, T, &eval);
    T_CHECKF(fabs(l_train - l_eval) > 1e-4, "train %g eval %g", l_train, l_eval);

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
            d[i] = (float)(d[i] / nrm);
        for (size_t i = 0; i < p->numel; i++)
            gd += (double)m->grads[p->offset + i] * d[i];
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
                 "%s: finite difference %.7g vs gradient %.7g", p->name, fd, gd);
    }
    free(d);
    /* padded rows 11..15 of wte: no token or target uses them, but each is a
     * softmax column, so every one of them has a gradient */
    const float *dwte = m->grads + m->reg.params[0].offset;
    for (int v = 11; v < 16; v++) {
        double pad = 0;
        for (int i = 0; i < cfg.hidden_size; i++)
            pad += fabs(dwte[v * cfg.hidden_size + i]);
        T_CHECKF(pad > 0, "padded wte row %d has no gradient", v);
    }
    mtc_model_free(m);
    mtc_model_free(m2);
    nn_pool_free(pool1);
    nn_pool_free(pool2);
    return T_DONE();
}
