/* tests/model/test_gpt_fixture.c - the whole GPT against PyTorch: loads the
 * weights of tests/reference/gpt2_tiny.fixture into the registry by name,
 * runs forward and backward and compares logits, loss and every gradient
 * with the float64 PyTorch reference (relative 1e-5 of each tensor's scale).
 * Also checks the registry's backward-order layout. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "model/model.h"
#include "test.h"

/* max |a-b| <= rtol * max|b| (+ a tiny floor), reported per tensor. */
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

/* The fixture (tests/reference/gpt2_reference.py) names tensors without
 * Hugging Face's "transformer." prefix of the body. */
static const char *fixture_name(const char *name) {
    return strncmp(name, "transformer.", 12) ? name : name + 12;
}

int main(void) {
    fixture fx;
    T_CHECK(fixture_load(&fx, "tests/reference/gpt2_tiny.fixture") == 0);
    if (fx.count == 0) return T_DONE();
    const float *cf = fixture_get(&fx, "config")->data;
    mtc_model_config cfg = {.num_layers = (int)cf[0],
                            .hidden_size = (int)cf[1],
                            .num_heads = (int)cf[2],
                            .ffn_hidden_size = (int)cf[3],
                            .seq_length = (int)cf[4],
                            .max_position_embeddings = (int)cf[5],
                            .vocab_size = (int)cf[6],
                            .padded_vocab_size = (int)cf[7],
                            .init_std = 0.02f};
    int B = (int)cf[8], T = cfg.seq_length, N = B * T, Vp = cfg.padded_vocab_size;
    T_CHECK(mtc_model_pad_vocab(cfg.vocab_size, 16, 1) == Vp);
    nn_pool *pool;
    T_CHECK(nn_pool_create(2, &pool) == MTC_OK);
    mtc_model *m;
    T_CHECK(mtc_model_init(&cfg, B, 1, pool, &m) == MTC_OK);

    /* registry: backward order, last parameter at offset 0, contiguous */
    const mtc_registry *r = &m->reg;
    T_CHECK(r->count == 4 + 12 * cfg.num_layers);
    T_CHECK(!strcmp(r->params[r->count - 1].name, "transformer.ln_f.bias") &&
            r->params[r->count - 1].offset == 0);
    T_CHECK(!strcmp(r->params[0].name, "transformer.wte.weight") &&
            r->params[0].offset + r->params[0].numel == r->total);
    for (int i = 0; i + 1 < r->count; i++)
        T_CHECK(r->params[i + 1].offset + r->params[i + 1].numel == r->params[i].offset);

    for (int i = 0; i < r->count; i++) {
        const mtc_param *p = &r->params[i];
        const fixture_tensor *t = fixture_get(&fx, fixture_name(p->name));
        T_CHECKF(t && t->n == p->numel, "fixture tensor %s", p->name);
        if (t && t->n == p->numel) memcpy(m->params + p->offset, t->data, p->numel * sizeof(float));
    }
    int tokens[256], targets[256];
    const fixture_tensor *tk = fixture_get(&fx, "tokens"), *tg = fixture_get(&fx, "targets");
    for (int i = 0; i < N; i++)
        tokens[i] = (int)tk->data[i], targets[i] = (int)tg->data[i];

    mtc_model_pass pass = {0};
    mtc_model_forward(m, 0, tokens, NULL, B, T, &pass);
    compare("logits", mtc_model_logits(m), fixture_get(&fx, "logits")->data, (size_t)N * Vp, 1e-5);

    mtc_model_zero_grad(m);
    double loss = mtc_model_forward(m, 0, tokens, targets, B, T, &pass) / N;
    T_CLOSE(loss, fixture_get(&fx, "loss")->data[0], 0, 1e-5);
    mtc_model_backward(m, 0, tokens, targets, B, T, 1.0f / (float)N, &pass);
    for (int i = 0; i < r->count; i++) {
        const mtc_param *p = &r->params[i];
        char gname[96];
        snprintf(gname, sizeof gname, "grad.%s", fixture_name(p->name));
        const fixture_tensor *t = fixture_get(&fx, gname);
        T_CHECKF(t && t->n == p->numel, "fixture gradient %s", gname);
        if (t && t->n == p->numel) compare(gname, m->grads + p->offset, t->data, p->numel, 1e-5);
    }
    /* the fused training path (dlogits made in the forward) gives the same bits */
    float *g_plain = malloc(r->total * sizeof(float));
    memcpy(g_plain, m->grads, r->total * sizeof(float));
    mtc_model_zero_grad(m);
    mtc_model_pass fused = {.loss_scale = 1.0f / (float)N};
    double loss2 = mtc_model_forward(m, 0, tokens, targets, B, T, &fused) / N;
    mtc_model_backward(m, 0, tokens, targets, B, T, 1.0f / (float)N, &fused);
    T_CHECK(loss2 == loss);
    T_CHECK(!memcmp(g_plain, m->grads, r->total * sizeof(float)));
    free(g_plain);
    /* backward accumulates: a second pass doubles every gradient */
    float g0 = m->grads[r->params[2].offset];
    mtc_model_forward(m, 0, tokens, targets, B, T, &pass);
    mtc_model_backward(m, 0, tokens, targets, B, T, 1.0f / (float)N, &pass);
    T_CLOSE(m->grads[r->params[2].offset], 2 * g0, 1e-9, 1e-5);

    mtc_model_free(m);
    nn_pool_free(pool);
    fixture_free(&fx);
    return T_DONE();
}
