/* tests/model/test_model_head_chunk.c - the fused, chunked LM head +
 * cross-entropy (tp/head.c through model/model_pass.c):
 *   - one chunk holding every token (the unchunked computation) and the
 *     default and a tiny chunk give the same losses and gradients within
 *     fp32 tolerance (only the head weight gradient's sum is cut
 *     differently);
 *   - a forward without the loss scale followed by the backward (the head
 *     runs again there) gives the fused forward's gradients bit for bit;
 *   - the gradients start from zero at the first microbatch's training
 *     forward: two microbatches in flight (forward, forward, backward,
 *     backward, the 1F1B order) over a dirty gradient buffer equal zero +
 *     one microbatch after the other;
 *   - on a model shaped like GPT-2 124M (vocabulary / hidden 64, 12 layers)
 *     full recomputation keeps at least 3x less activation memory than none,
 *     less than one (tokens x vocabulary) logits tensor, and gives none's
 *     loss and gradients bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "model/model.h"
#include "test.h"

static mtc_model *build(const mtc_model_config *c, int B, int nslots, nn_pool *pool, int chunk,
                        int recompute) {
    mtc_model_chunk_opts o = {.B = B,
                              .nslots = nslots,
                              .pool = pool,
                              .first_layer = 0,
                              .last_layer = c->num_layers,
                              .has_embedding = 1,
                              .has_head = 1,
                              .recompute_layers = recompute,
                              .head_chunk = chunk};
    mtc_model *m = NULL;
    T_CHECK(mtc_model_init_chunk(c, &o, &m) == MTC_OK);
    if (m) mtc_model_init_params(m, 11);
    return m;
}

/* max |a - b| relative to max |b| */
static double rel_diff(const float *a, const float *b, size_t n) {
    double d = 0, s = 1e-30;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        s = fmax(s, fabs((double)b[i]));
    }
    return d / s;
}

/* One training microbatch from a zero start: returns the loss sum. */
static double step(mtc_model *m, const int *tok, const int *tgt, int B, int T, int fused) {
    float scale = 1.0f / (float)(B * T);
    mtc_model_pass p = {.train = 1, .seed = 3, .iteration = 1, .first_microbatch = 1};
    if (fused) p.loss_scale = scale;
    double loss = mtc_model_forward(m, 0, tok, tgt, B, T, &p);
    T_CHECK(mtc_model_backward(m, 0, tok, tgt, B, T, scale, &p) == MTC_OK);
    T_CHECK(m->error == MTC_OK);
    return loss;
}

static void fill_tokens(int *tok, int *tgt, int N, int V) {
    for (int i = 0; i < N; i++)
        tok[i] = (int)(mtc_rng_u32(8, 1, (uint64_t)i) % (uint32_t)V),
        tgt[i] = (int)(mtc_rng_u32(8, 2, (uint64_t)i) % (uint32_t)V);
}

static void test_chunks(nn_pool *pool) {
    mtc_model_config c = {.num_layers = 2,
                          .hidden_size = 16,
                          .num_heads = 2,
                          .ffn_hidden_size = 64,
                          .seq_length = 50,
                          .max_position_embeddings = 50,
                          .vocab_size = 300,
                          .padded_vocab_size = 304,
                          .hidden_dropout = 0.1f,
                          .attention_dropout = 0.1f};
    int B = 3, T = 50, N = B * T; /* 150 tokens: the default chunk 128 leaves a tail of 22 */
    int *tok = malloc(sizeof(int) * N), *tgt = malloc(sizeof(int) * N);
    fill_tokens(tok, tgt, N, c.vocab_size);
    mtc_model *one = build(&c, B, 1, pool, 1 << 20, 0), *def = build(&c, B, 1, pool, 0, 0),
              *tiny = build(&c, B, 1, pool, 7, 0);
    if (!one || !def || !tiny) return;
    T_CHECK(def->head_chunk == MTC_MODEL_HEAD_CHUNK && N > MTC_MODEL_HEAD_CHUNK);
    double l1 = step(one, tok, tgt, B, T, 1), l2 = step(def, tok, tgt, B, T, 1),
           l3 = step(tiny, tok, tgt, B, T, 1);
    size_t n = one->reg.total;
    T_CHECKF(fabs(l1 - l2) <= 1e-6 * fabs(l1) && fabs(l1 - l3) <= 1e-6 * fabs(l1),
             "losses: one chunk %.9g, default %.9g, 7 tokens %.9g", l1, l2, l3);
    double d2 = rel_diff(def->grads, one->grads, n), d3 = rel_diff(tiny->grads, one->grads, n);
    T_CHECKF(d2 <= 1e-5 && d3 <= 1e-5, "gradients vs one chunk: default %.3g, 7 tokens %.3g", d2,
             d3);
    /* the cut is not a no-op: the head weight gradient's sum differs in its bits */
    T_CHECK(memcmp(tiny->grads, one->grads, n * sizeof(float)) != 0);

    /* forward without the scale, the head again in backward: the same bits */
    float *g = malloc(n * sizeof(float));
    memcpy(g, def->grads, n * sizeof(float));
    double l4 = step(def, tok, tgt, B, T, 0);
    T_CHECKF(l4 == l2, "loss unfused %.9g, fused %.9g", l4, l2);
    T_CHECK(memcmp(g, def->grads, n * sizeof(float)) == 0);

    /* two microbatches in flight over a dirty buffer = zero + one after the other */
    mtc_model *two = build(&c, B, 2, pool, 0, 0);
    if (!two) return;
    int *tok2 = malloc(sizeof(int) * N), *tgt2 = malloc(sizeof(int) * N);
    for (int i = 0; i < N; i++)
        tok2[i] = tgt[N - 1 - i], tgt2[i] = tok[N - 1 - i];
    float s = 1.0f / (float)(2 * N);
    mtc_model_pass p0 = {.train = 1,
                         .seed = 3,
                         .iteration = 1,
                         .first_microbatch = 1,
                         .loss_scale = s},
                   p1 = p0;
    p1.first_microbatch = 0, p1.b0 = B;
    for (size_t i = 0; i < n; i++)
        two->grads[i] = 1e3f * (float)(i % 7 + 1);
    double a0 = mtc_model_forward(two, 0, tok, tgt, B, T, &p0);
    double a1 = mtc_model_forward(two, 1, tok2, tgt2, B, T, &p1);
    T_CHECK(mtc_model_backward(two, 0, tok, tgt, B, T, s, &p0) == MTC_OK);
    T_CHECK(mtc_model_backward(two, 1, tok2, tgt2, B, T, s, &p1) == MTC_OK);
    memset(def->grads, 0x7f, n * sizeof(float)); /* overwritten by the first forward */
    double b0 = mtc_model_forward(def, 0, tok, tgt, B, T, &p0);
    T_CHECK(mtc_model_backward(def, 0, tok, tgt, B, T, s, &p0) == MTC_OK);
    double b1 = mtc_model_forward(def, 0, tok2, tgt2, B, T, &p1);
    T_CHECK(mtc_model_backward(def, 0, tok2, tgt2, B, T, s, &p1) == MTC_OK);
    T_CHECK(a0 == b0 && a1 == b1);
    double d = rel_diff(two->grads, def->grads, n);
    T_CHECKF(d <= 1e-6, "1F1B order vs sequential: gradients differ by %.3g", d);

    /* a training model has no logits for a forward without targets */
    T_CHECK(isnan(mtc_model_forward(def, 0, tok, NULL, B, T, NULL)));
    T_CHECK(def->error == MTC_ERR_INVALID_USAGE);
    mtc_model_free(one), mtc_model_free(def), mtc_model_free(tiny), mtc_model_free(two);
    free(tok), free(tgt), free(tok2), free(tgt2), free(g);
}

static void test_recompute_memory(nn_pool *pool) {
    /* GPT-2 124M's proportions at a test's size: V / C = 64, 12 layers */
    mtc_model_config c = {.num_layers = 12,
                          .hidden_size = 32,
                          .num_heads = 2,
                          .ffn_hidden_size = 128,
                          .seq_length = 512,
                          .max_position_embeddings = 512,
                          .vocab_size = 2000,
                          .padded_vocab_size = 2048,
                          .hidden_dropout = 0.1f,
                          .attention_dropout = 0.1f};
    int B = 1, T = 512, N = B * T;
    mtc_model *none = build(&c, B, 1, pool, 0, 0), *full = build(&c, B, 1, pool, 0, c.num_layers);
    if (!none || !full) return;
    size_t an = mtc_model_activation_bytes(none), af = mtc_model_activation_bytes(full);
    size_t logits = (size_t)N * c.padded_vocab_size * sizeof(float);
    printf("activations: none %zu B, full %zu B (%.2fx); one logits tensor %zu B\n", an, af,
           (double)an / (double)af, logits);
    T_CHECKF(an >= 3 * af, "activations: none %zu B, full %zu B (%.2fx, want >= 3x)", an, af,
             (double)an / (double)af);
    T_CHECKF(af < logits, "full recomputation keeps %zu B, one logits tensor is %zu B", af, logits);
    int *tok = malloc(sizeof(int) * N), *tgt = malloc(sizeof(int) * N);
    fill_tokens(tok, tgt, N, c.vocab_size);
    double ln = step(none, tok, tgt, B, T, 1), lf = step(full, tok, tgt, B, T, 1);
    T_CHECKF(ln == lf, "loss none %.9g, full %.9g", ln, lf);
    T_CHECK(memcmp(none->grads, full->grads, none->reg.total * sizeof(float)) == 0);
    mtc_model_free(none), mtc_model_free(full);
    free(tok), free(tgt);
}

int main(void) {
    nn_pool *pool;
    T_CHECK(nn_pool_create(2, &pool) == MTC_OK);
    test_chunks(pool);
    test_recompute_memory(pool);
    nn_pool_free(pool);
    return T_DONE();
}
