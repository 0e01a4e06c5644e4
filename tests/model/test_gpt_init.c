/* tests/model/test_gpt_init.c - initialisation reads only the registry:
 * element i of parameter p is normal(seed, stream_of(name), i) * std
 * (docs/model.md), with std 0.02 and 0.02/sqrt(2L) for the residual
 * projections, LayerNorm weights 1, biases 0; the parallel fill equals the
 * serial one bit for bit; names, shapes and weight-decay flags are GPT-2's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "model/model.h"
#include "test.h"

int main(void) {
    mtc_model_config cfg = {.num_layers = 3,
                            .hidden_size = 64,
                            .num_heads = 4,
                            .ffn_hidden_size = 256,
                            .seq_length = 16,
                            .max_position_embeddings = 32,
                            .vocab_size = 300,
                            .padded_vocab_size = mtc_model_pad_vocab(300, 128, 1),
                            .init_std = 0.02f};
    T_CHECK(cfg.padded_vocab_size == 384);
    T_CHECK(mtc_model_pad_vocab(384, 128, 1) == 384 && mtc_model_pad_vocab(50257, 128, 2) == 50432);
    nn_pool *pool;
    T_CHECK(nn_pool_create(2, &pool) == MTC_OK);
    mtc_model *m;
    T_CHECK(mtc_model_init(&cfg, 2, 1, pool, &m) == MTC_OK);
    mtc_model_init_params(m, 1234);
    const mtc_registry *r = &m->reg;
    float *serial = malloc(r->total * sizeof(float));
    mtc_registry_init_params(r, serial, 1234);
    T_CHECK(!memcmp(serial, m->params, r->total * sizeof(float)));
    free(serial);

    int i = mtc_registry_find(r, "transformer.h.1.attn.c_attn.weight");
    T_CHECK(i >= 0 && r->params[i].shape[0] == 192 && r->params[i].shape[1] == 64 &&
            r->params[i].is_2d);
    const float *w = m->params + r->params[i].offset;
    uint64_t st = mtc_rng_stream_of("h.1.attn.c_attn.weight");
    T_CHECK(w[0] == mtc_rng_normal(1234, st, 0) * 0.02f);
    T_CHECK(w[5000] == mtc_rng_normal(1234, st, 5000) * 0.02f);

    double out_std = 0.02 / sqrt(6.0);
    for (int k = 0; k < r->count; k++) {
        const mtc_param *p = &r->params[k];
        const float *x = m->params + p->offset;
        double s = 0, s2 = 0;
        for (size_t e = 0; e < p->numel; e++)
            s += x[e], s2 += (double)x[e] * x[e];
        double mean = s / p->numel, sd = sqrt(s2 / p->numel - mean * mean);
        const char *n = p->name;
        size_t len = strlen(n);
        if (strstr(n, "ln_") && !strcmp(n + len - 6, "weight")) {
            T_CHECKF(mean == 1.0 && sd == 0.0, "%s", n);
            T_CHECK(!p->is_2d);
        } else if (!strcmp(n + len - 4, "bias")) {
            T_CHECKF(s2 == 0.0, "%s", n);
            T_CHECK(!p->is_2d);
        } else {
            double expect = strstr(n, "c_proj.weight") ? out_std : 0.02;
            T_CHECKF(fabs(sd - expect) < 0.05 * expect && fabs(mean) < 0.1 * expect,
                     "%s: std %g (expected %g) mean %g", n, sd, expect, mean);
        }
    }
    T_CHECK(mtc_registry_find(r, "transformer.wte.weight") == 0 &&
            mtc_registry_find(r, "transformer.ln_f.bias") == r->count - 1);
    T_CHECK(r->params[0].shape[0] == 384 && r->params[1].shape[0] == 32);
    T_CHECK(r->params[0].reduce_groups & MTC_REDUCE_EMBEDDING);
    T_CHECK(mtc_registry_find(r, "transformer.h.2.mlp.c_proj.weight") >= 0 &&
            mtc_registry_find(r, "transformer.h.3.ln_1.weight") < 0);
    mtc_model_free(m);
    nn_pool_free(pool);
    return T_DONE();
}
