/* tests/model/test_llama_fixture.c - the whole Llama-style model against
 * PyTorch: tests/reference/llama_tiny.fixture (written by
 * tests/reference/llama_reference.py on Hugging Face LlamaForCausalLM
 * conventions: GQA with 2 key/value groups over 4 heads, RoPE, RMSNorm,
 * SwiGLU, untied head, no biases). HF's separate q/k/v and gate/up weights
 * are the row blocks of mtc's fused qkv_proj = [q | k | v] and
 * gate_up_proj = [gate | up]. Logits, loss and every gradient to 1e-5 of
 * each tensor's scale; the fused training path gives the same bits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama_fixture.h"
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

/* The HF tensors that make up mtc parameter p, concatenated (prefix "" for
 * the weights, "grad." for their gradients); 0 when one is missing. */
static int hf_concat(const fixture *fx, const mtc_param *p, const char *prefix, float *out) {
    char base[96], name[128];
    snprintf(base, sizeof base, "%s", p->name);
    const char *parts[3] = {NULL, NULL, NULL};
    char *fused = strstr(base, "qkv_proj");
    if (fused) parts[0] = "q_proj", parts[1] = "k_proj", parts[2] = "v_proj";
    if (!fused && (fused = strstr(base, "gate_up_proj")))
        parts[0] = "gate_proj", parts[1] = "up_proj";
    size_t at = 0;
    for (int k = 0; k < 3 && (k == 0 || parts[k]); k++) {
        if (fused)
            snprintf(name, sizeof name, "%s%.*s%s%s", prefix, (int)(fused - base), base, parts[k],
                     strchr(fused, '.'));
        else
            snprintf(name, sizeof name, "%s%s", prefix, base);
        const fixture_tensor *t = fixture_get(fx, name);
        if (!t || at + t->n > p->numel) return 0;
        memcpy(out + at, t->data, t->n * sizeof(float));
        at += t->n;
    }
    return at == p->numel;
}

int main(void) {
    fixture fx;
    T_CHECK(fixture_load(&fx, "tests/reference/llama_tiny.fixture") == 0);
    if (fx.count == 0) return T_DONE();
    const float *cf = fixture_get(&fx, "config")->data; /* L C NH NG HS F V B T */
    mtc_model_config cfg = fixture_llama_config(&fx);
    int B = (int)cf[7], T = cfg.seq_length, N = B * T, V = cfg.vocab_size;
    nn_pool *pool;
    T_CHECK(nn_pool_create(2, &pool) == MTC_OK);
    mtc_model *m;
    T_CHECK(mtc_model_init(&cfg, B, 1, pool, &m) == MTC_OK);
    const mtc_registry *r = &m->reg;
    T_CHECK(r->count == 1 + 6 * cfg.num_layers + 2);
    float *want = malloc(r->total * sizeof(float));
    for (int i = 0; i < r->count; i++) {
        const mtc_param *p = &r->params[i];
        T_CHECKF(hf_concat(&fx, p, "", m->params + p->offset), "fixture tensors of %s", p->name);
    }
    int tokens[256], targets[256];
    const fixture_tensor *tk = fixture_get(&fx, "tokens"), *tg = fixture_get(&fx, "targets");
    for (int i = 0; i < N; i++)
        tokens[i] = (int)tk->data[i], targets[i] = (int)tg->data[i];

    mtc_model_pass pass = {0};
    mtc_model_forward(m, 0, tokens, NULL, B, T, &pass);
    compare("logits", mtc_model_logits(m), fixture_get(&fx, "logits")->data, (size_t)N * V, 1e-5);
    double loss = mtc_model_forward(m, 0, tokens, targets, B, T, &pass) / N;
    T_CLOSE(loss, fixture_get(&fx, "loss")->data[0], 0, 1e-5);
    pass.first_microbatch = 1;
    mtc_model_backward(m, 0, tokens, targets, B, T, 1.0f / (float)N, &pass);
    for (int i = 0; i < r->count; i++) {
        const mtc_param *p = &r->params[i];
        char what[96];
        snprintf(what, sizeof what, "grad.%s", p->name);
        if (hf_concat(&fx, p, "grad.", want))
            compare(what, m->grads + p->offset, want, p->numel, 1e-5);
        else
            T_CHECKF(0, "fixture gradient of %s", p->name);
    }
    /* the fused training path (dlogits made in the forward) gives the same bits */
    memcpy(want, m->grads, r->total * sizeof(float));
    mtc_model_pass fused = {.loss_scale = 1.0f / (float)N, .first_microbatch = 1};
    double loss2 = mtc_model_forward(m, 0, tokens, targets, B, T, &fused) / N;
    mtc_model_backward(m, 0, tokens, targets, B, T, 1.0f / (float)N, &fused);
    T_CHECK(loss2 == loss);
    T_CHECK(!memcmp(want, m->grads, r->total * sizeof(float)));
    free(want);
    mtc_model_free(m);
    nn_pool_free(pool);
    fixture_free(&fx);
    return T_DONE();
}
