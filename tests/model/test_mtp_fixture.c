/* tests/model/test_mtp_fixture.c - multi-token prediction (model/mtp.c)
 * against PyTorch: tests/reference/mtp_tiny.fixture, written by
 * tests/reference/mtp_reference.py from Megatron-LM core_v0.18.0's MTP code
 * (roll_tensor, the enorm / hnorm / eh_proj / layer / final norm depth, the
 * shared head, process_mtp_loss's masked means scaled by factor / D) on a
 * tiny Llama-style model with D = 2 depths. The main loss, each depth's
 * loss and every gradient (the depths', the shared embedding's and head's,
 * the decoder's) to 1e-5 of each tensor's scale; the fused training path
 * (the heads' gradients made in the forward) gives the same bits as the
 * backward that runs the heads again. */
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

int main(void) {
    fixture fx;
    T_CHECK(fixture_load(&fx, "tests/reference/mtp_tiny.fixture") == 0);
    if (fx.count == 0) return T_DONE();
    const float *cf = fixture_get(&fx, "config")->data; /* L C NH NG HS F V B T D */
    mtc_model_config cfg = fixture_llama_config(&fx);
    cfg.mtp_num_layers = (int)cf[9];
    cfg.mtp_loss_scaling_factor = fixture_get(&fx, "mtp_factor")->data[0];
    int B = (int)cf[7], T = cfg.seq_length, N = B * T, Dp = cfg.mtp_num_layers;
    nn_pool *pool;
    T_CHECK(nn_pool_create(2, &pool) == MTC_OK);
    mtc_model *m;
    T_CHECK(mtc_model_init(&cfg, B, 1, pool, &m) == MTC_OK);
    T_CHECK(m->mtp_layers == Dp);
    const mtc_registry *r = &m->reg;
    /* the decoder's 6 per layer, each depth's 6 + enorm, hnorm, eh_proj, its norm */
    T_CHECK(r->count == 1 + 6 * cfg.num_layers + 2 + 10 * Dp);
    for (int i = 0; i < r->count; i++) {
        const mtc_param *p = &r->params[i];
        const fixture_tensor *t = fixture_get(&fx, p->name);
        T_CHECKF(t && t->n == p->numel, "fixture tensor of %s", p->name);
        if (t && t->n == p->numel) memcpy(m->params + p->offset, t->data, t->n * sizeof(float));
    }
    int tokens[256], targets[256];
    const fixture_tensor *tk = fixture_get(&fx, "tokens"), *tg = fixture_get(&fx, "targets");
    for (int i = 0; i < N; i++)
        tokens[i] = (int)tk->data[i], targets[i] = (int)tg->data[i];

    /* a forward without the loss scale, then a backward that runs the heads again */
    mtc_model_pass pass = {.first_microbatch = 1};
    double loss = mtc_model_forward(m, 0, tokens, targets, B, T, &pass) / N;
    T_CLOSE(loss, fixture_get(&fx, "loss")->data[0], 0, 1e-5);
    const float *ml = fixture_get(&fx, "mtp_loss")->data;
    for (int d = 0; d < Dp; d++) { /* each depth's mean over its B (T - k) labels */
        double got = m->mtp_loss_sum[d] / ((double)B * (T - d - 1));
        T_CHECKF(fabs(got - ml[d]) <= 1e-5 * fabs(ml[d]), "mtp_%d loss %.8g vs %.8g", d + 1, got,
                 ml[d]);
        m->mtp_loss_sum[d] = 0;
    }
    mtc_model_backward(m, 0, tokens, targets, B, T, 1.0f / (float)N, &pass);
    float *want = malloc(r->total * sizeof(float));
    for (int i = 0; i < r->count; i++) {
        const mtc_param *p = &r->params[i];
        char what[96];
        snprintf(what, sizeof what, "grad.%s", p->name);
        const fixture_tensor *t = fixture_get(&fx, what);
        if (t && t->n == p->numel)
            compare(what, m->grads + p->offset, t->data, p->numel, 1e-5);
        else
            T_CHECKF(0, "fixture gradient of %s", p->name);
    }
    /* the fused training path gives the same bits */
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
