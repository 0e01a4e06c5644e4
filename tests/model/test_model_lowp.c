/* tests/model/test_model_lowp.c - the whole GPT under --bf16 and --fp16
 * against PyTorch's float64 reference (tests/reference/gpt2_tiny.fixture):
 * logits, loss and every gradient within the precision's bound (bf16 on
 * both GEMM engines: oneDNN bf16, and fp32 GEMMs on bf16 values), and an
 * fp32 model with the same params fails the bf16 model's exactness check
 * (the copies and roundings are really there).
 *
 * Bound, derived. A low-precision type with p significant bits rounds with
 * relative error at most u = 2^-p (bf16 p = 8: u = 3.9e-3; fp16 p = 11:
 * u = 4.9e-4). The model rounds each weight, each GEMM input, each GEMM
 * output and each norm / residual output once: along one path through the
 * network every value picks up a few such errors per layer, of random sign.
 * With 2 layers there are at most ~12 roundings on the way to a logit, so
 * the error is below 12u relative to each tensor's scale for the forward
 * and, the backward rounding its incoming gradient at each GEMM once more,
 * 16u for the gradients (max error over the tensor against its largest
 * element). The loss, a mean over tokens, is held to 4u.
 * Exactness checks: every compute weight and logit is a bf16 (fp16) value,
 * most weights moved when rounded, and the fp32 params (the main params)
 * are untouched by the forward. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "model/model.h"
#include "nn/lowp.h"
#include "test.h"

static double worst; /* of the last compare, error / (rtol * scale) */

static int compare(const char *what, const float *a, const float *b, size_t n, double rtol) {
    double maxerr = 0, maxref = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        if (e > maxerr || isnan(e)) maxerr = isnan(e) ? INFINITY : e;
        if (fabs(b[i]) > maxref) maxref = fabs(b[i]);
    }
    double r = maxerr / (rtol * maxref + 1e-12);
    if (r > worst) worst = r;
    T_CHECKF(maxerr <= rtol * maxref + 1e-12, "%s: max error %.3g vs scale %.3g (bound %.3g)", what,
             maxerr, maxref, rtol * maxref);
    return maxerr <= rtol * maxref + 1e-12;
}

static const char *fixture_name(const char *name) {
    return strncmp(name, "transformer.", 12) ? name : name + 12;
}

static int is_bf16_value(float f) { return mtc_bf16_to_f32(mtc_f32_to_bf16(f)) == f; }

static void run(const fixture *fx, tp_precision prec, int f32_gemm, double u, const char *tag) {
    const float *cf = fixture_get(fx, "config")->data;
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
    nn_pool *pool;
    T_CHECK(nn_pool_create(2, &pool) == MTC_OK);
    mtc_model_chunk_opts o = {.B = B,
                              .nslots = 1,
                              .pool = pool,
                              .first_layer = 0,
                              .last_layer = cfg.num_layers,
                              .has_embedding = 1,
                              .has_head = 1,
                              .precision = prec,
                              .bf16_gemm_f32 = f32_gemm,
                              .logits = 1};
    mtc_model *m;
    T_CHECK(mtc_model_init_chunk(&cfg, &o, &m) == MTC_OK);
    const mtc_registry *r = &m->reg;
    for (int i = 0; i < r->count; i++) {
        const mtc_param *p = &r->params[i];
        const fixture_tensor *t = fixture_get(fx, fixture_name(p->name));
        T_CHECKF(t && t->n == p->numel, "fixture tensor %s", p->name);
        if (t && t->n == p->numel) memcpy(m->params + p->offset, t->data, p->numel * sizeof(float));
    }
    float *main0 = malloc(r->total * sizeof(float));
    memcpy(main0, m->params, r->total * sizeof(float));
    mtc_model_params_changed(m);
    int tokens[256], targets[256];
    const fixture_tensor *tk = fixture_get(fx, "tokens"), *tg = fixture_get(fx, "targets");
    for (int i = 0; i < N; i++)
        tokens[i] = (int)tk->data[i], targets[i] = (int)tg->data[i];
    mtc_model_pass pass = {0};
    worst = 0;
    mtc_model_forward(m, 0, tokens, NULL, B, T, &pass);
    int ok = compare("logits", mtc_model_logits(m), fixture_get(fx, "logits")->data, (size_t)N * Vp,
                     12 * u);
    if (prec == TP_PREC_BF16) { /* exactness: bf16 compute weights and logits */
        size_t bad = 0;
        for (size_t i = 0; i < r->total; i++)
            bad += !is_bf16_value(m->params_c[i]) ||
                   (m->params16 && mtc_bf16_to_f32(m->params16[i]) != m->params_c[i]);
        /* the fp32 engine keeps no bf16 copy; oneDNN's needs one */
        T_CHECK(f32_gemm ? m->params16 == NULL && m->lowp.lp == NULL : m->params16 != NULL);
        for (size_t i = 0; i < (size_t)N * Vp; i++)
            bad += !is_bf16_value(mtc_model_logits(m)[i]);
        T_CHECKF(bad == 0, "%zu compute weights or logits are not bf16 values", bad);
        /* the copies differ from the fp32 params: rounding happened */
        size_t moved = 0;
        for (size_t i = 0; i < r->total; i++)
            moved += m->params_c[i] != m->params[i];
        T_CHECKF(moved > r->total / 2, "only %zu of %zu weights changed by bf16 rounding", moved,
                 r->total);
    }
    if (prec == TP_PREC_FP16) { /* exactness: fp16 compute weights and logits */
        size_t bad = 0;
        for (size_t i = 0; i < r->total; i++)
            bad += nn_f16_to_f32_1(nn_f32_to_f16_1(m->params_c[i])) != m->params_c[i];
        for (size_t i = 0; i < (size_t)N * Vp; i++)
            bad +=
                nn_f16_to_f32_1(nn_f32_to_f16_1(mtc_model_logits(m)[i])) != mtc_model_logits(m)[i];
        T_CHECKF(bad == 0, "%zu compute weights or logits are not fp16 values", bad);
    }
    T_CHECK(!memcmp(main0, m->params, r->total * sizeof(float))); /* main params untouched */
    mtc_model_zero_grad(m);
    double loss = mtc_model_forward(m, 0, tokens, targets, B, T, &pass) / N;
    double lref = fixture_get(fx, "loss")->data[0];
    T_CHECKF(fabs(loss - lref) <= 4 * u * fabs(lref), "%s loss %.7f vs %.7f", tag, loss, lref);
    mtc_model_backward(m, 0, tokens, targets, B, T, 1.0f / (float)N, &pass);
    for (int i = 0; i < r->count; i++) {
        const mtc_param *p = &r->params[i];
        char gname[96];
        snprintf(gname, sizeof gname, "grad.%s", fixture_name(p->name));
        const fixture_tensor *t = fixture_get(fx, gname);
        if (t && t->n == p->numel)
            ok &= compare(gname, m->grads + p->offset, t->data, p->numel, 16 * u);
    }
    printf("%s %s: logits and gradients within 12u / 16u (u = %.2g), worst %.2f of the bound, "
           "loss %.6f vs %.6f\n",
           ok ? "ok  " : "FAIL", tag, u, worst, loss, lref);
    free(main0);
    mtc_model_free(m);
    nn_pool_free(pool);
}

int main(void) {
    fixture fx;
    T_CHECK(fixture_load(&fx, "tests/reference/gpt2_tiny.fixture") == 0);
    if (fx.count == 0) return T_DONE();
    if (nn_lowp_available())
        run(&fx, TP_PREC_BF16, 0, 0x1p-8, "bf16 (oneDNN bf16 GEMMs)");
    else
        printf("skip bf16 on oneDNN: mtc was built without oneDNN\n");
    run(&fx, TP_PREC_BF16, 1, 0x1p-8, "bf16 (fp32 GEMMs on bf16 values)");
    run(&fx, TP_PREC_FP16, 0, 0x1p-11, "fp16");
    fixture_free(&fx);
    return T_DONE();
}
