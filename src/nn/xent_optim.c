/* nn/xent_optim.c - fused softmax + cross-entropy over a padded vocabulary,
 * and the optimizer pieces (AdamW, sum of squares, scale).
 *
 * Cross-entropy works in place on the logits buffer (llm.c style): forward
 * turns logits into probabilities, backward turns them into dlogits, so
 * the (N, Vp) tensor exists once. Padding columns [V, Vp) are never read
 * as logits and are written as 0. Vocabulary-parallel cross-entropy (max
 * and sum across TP ranks) is tp/'s job, not this file's.
 * Rows are split by size only; every row is computed by one thread. */
#include <math.h>
#include <string.h>

#include "core/log.h"
#include "nn/nn.h"
#include "nn/nn_internal.h"

typedef struct {
    float *losses, *logits;
    const int *targets;
    float scale;
    int N, V, Vp, tiles;
} xent_job;

static void xent_fwd_tile(int i, void *vp) {
    const xent_job *j = vp;
    size_t lo, hi;
    nn_split_range((size_t)j->N, j->tiles, i, 1, &lo, &hi);
    int V = j->V;
    for (size_t r = lo; r < hi; r++) {
        float *x = j->logits + r * j->Vp;
        float mx = nn_vmax(x, V);
        int t = j->targets[r];
        MTC_ASSERT(t >= 0 && t < V);
        float xt = x[t];
        float s = nn_vexp_sum(x, x, V, mx);
        nn_vscale(x, 1.0f / s, V);
        for (int v = V; v < j->Vp; v++)
            x[v] = 0.0f;
        /* -log p[t] = log(sum) - (x_t - max): accurate even when p[t] underflows */
        if (j->losses) j->losses[r] = logf(s) - (xt - mx);
    }
}

void nn_softmax_xent_forward(nn_pool *pool, float *losses, float *logits, const int *targets, int N,
                             int V, int Vp) {
    xent_job j = {losses, logits, targets, 0.0f, N, V, Vp, 0};
    j.tiles = nn_split_count((size_t)N * Vp, 32768);
    if (j.tiles > N) j.tiles = N;
    if (N > 0) nn_pool_run(pool, j.tiles, xent_fwd_tile, &j);
}

static void xent_fwd_bwd_tile(int i, void *vp) {
    const xent_job *j = vp;
    size_t lo, hi;
    nn_split_range((size_t)j->N, j->tiles, i, 1, &lo, &hi);
    int V = j->V;
    float sc = j->scale;
    for (size_t r = lo; r < hi; r++) {
        float *x = j->logits + r * j->Vp;
        float mx = nn_vmax(x, V);
        int t = j->targets[r];
        MTC_ASSERT(t >= 0 && t < V);
        float xt = x[t];
        float s = nn_vexp_sum(x, x, V, mx);
        float inv = 1.0f / s;
        float pt = x[t] * inv; /* the same roundings as forward then backward */
        int v = 0;
        for (; v + 8 <= V; v += 8)
            NN_V8_ST(x + v, (NN_V8_LD(x + v) * inv) * sc);
        for (; v < V; v++)
            x[v] = (x[v] * inv) * sc;
        x[t] = (pt - 1.0f) * sc;
        for (int v = V; v < j->Vp; v++)
            x[v] = 0.0f;
        if (j->losses) j->losses[r] = logf(s) - (xt - mx);
    }
}

void nn_softmax_xent_forward_backward(nn_pool *pool, float *losses, float *logits,
                                      const int *targets, float scale, int N, int V, int Vp) {
    xent_job j = {losses, logits, targets, scale, N, V, Vp, 0};
    j.tiles = nn_split_count((size_t)N * Vp, 32768);
    if (j.tiles > N) j.tiles = N;
    if (N > 0) nn_pool_run(pool, j.tiles, xent_fwd_bwd_tile, &j);
}

static void xent_bwd_tile(int i, void *vp) {
    const xent_job *j = vp;
    size_t lo, hi;
    nn_split_range((size_t)j->N, j->tiles, i, 1, &lo, &hi);
    for (size_t r = lo; r < hi; r++) {
        float *x = j->logits + r * j->Vp;
        int t = j->targets[r];
        x[t] -= 1.0f;
        nn_vscale(x, j->scale, j->V);
        for (int v = j->V; v < j->Vp; v++)
            x[v] = 0.0f;
    }
}

void nn_softmax_xent_backward(nn_pool *pool, float *probs, const int *targets, float scale, int N,
                              int V, int Vp) {
    xent_job j = {NULL, probs, targets, scale, N, V, Vp, 0};
    j.tiles = nn_split_count((size_t)N * Vp, 32768);
    if (j.tiles > N) j.tiles = N;
    if (N > 0) nn_pool_run(pool, j.tiles, xent_bwd_tile, &j);
}

/* ---- optimizer pieces ------------------------------------------------------------- */

/* One AdamW element; the vector path below performs exactly these
 * operations lane by lane (no contraction differences: FMAs are written
 * out in both), so an element's result does not depend on its position
 * (a ZeRO shard computes the serial run's bits). */
#if defined(__AVX__) && defined(__FMA__)
#include <immintrin.h>
static inline void adamw8(float *param, const float *grad, float *m, float *v, __m256 gs, __m256 lr,
                          __m256 b1, __m256 b2, __m256 eps, __m256 wd, __m256 ib1, __m256 ib2) {
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 g = _mm256_mul_ps(_mm256_loadu_ps(grad), gs), p = _mm256_loadu_ps(param);
    __m256 mk = _mm256_fmadd_ps(b1, _mm256_loadu_ps(m), _mm256_mul_ps(_mm256_sub_ps(one, b1), g));
    __m256 vk = _mm256_fmadd_ps(b2, _mm256_loadu_ps(v),
                                _mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(one, b2), g), g));
    _mm256_storeu_ps(m, mk);
    _mm256_storeu_ps(v, vk);
    __m256 mh = _mm256_mul_ps(mk, ib1), vh = _mm256_mul_ps(vk, ib2);
    __m256 u = _mm256_div_ps(mh, _mm256_add_ps(_mm256_sqrt_ps(vh), eps));
    _mm256_storeu_ps(param, _mm256_fnmadd_ps(lr, _mm256_fmadd_ps(wd, p, u), p));
}
#if defined(__AVX512F__)
/* adamw8's operations on 16 lanes, the same bits lane for lane (half the
 * vector instructions; the update is mostly bound by memory) */
static inline void adamw16(float *param, const float *grad, float *m, float *v, __m512 gs,
                           __m512 lr, __m512 b1, __m512 b2, __m512 eps, __m512 wd, __m512 ib1,
                           __m512 ib2) {
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512 g = _mm512_mul_ps(_mm512_loadu_ps(grad), gs), p = _mm512_loadu_ps(param);
    __m512 mk = _mm512_fmadd_ps(b1, _mm512_loadu_ps(m), _mm512_mul_ps(_mm512_sub_ps(one, b1), g));
    __m512 vk = _mm512_fmadd_ps(b2, _mm512_loadu_ps(v),
                                _mm512_mul_ps(_mm512_mul_ps(_mm512_sub_ps(one, b2), g), g));
    _mm512_storeu_ps(m, mk);
    _mm512_storeu_ps(v, vk);
    __m512 mh = _mm512_mul_ps(mk, ib1), vh = _mm512_mul_ps(vk, ib2);
    __m512 u = _mm512_div_ps(mh, _mm512_add_ps(_mm512_sqrt_ps(vh), eps));
    _mm512_storeu_ps(param, _mm512_fnmadd_ps(lr, _mm512_fmadd_ps(wd, p, u), p));
}
#endif
#endif

void nn_adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                     float beta1, float beta2, float eps, float weight_decay, int t) {
    nn_adamw_update_scaled(param, grad, m, v, n, 1.0f, lr, beta1, beta2, eps, weight_decay, t);
}

void nn_adamw_update_scaled(float *param, const float *grad, float *m, float *v, size_t n,
                            float grad_scale, float lr, float beta1, float beta2, float eps,
                            float weight_decay, int t) {
    MTC_ASSERT(t >= 1); /* steps count from 1: bias correction divides by 1 - beta^t */
    /* bias corrections in double: 1 - beta^t loses digits in float for small t */
    float bc1 = (float)(1.0 - pow((double)beta1, t));
    float bc2 = (float)(1.0 - pow((double)beta2, t));
    float ib1 = 1.0f / bc1, ib2 = 1.0f / bc2;
#if defined(__AVX__) && defined(__FMA__)
    __m256 vlr = _mm256_set1_ps(lr), vb1 = _mm256_set1_ps(beta1), vb2 = _mm256_set1_ps(beta2);
    __m256 veps = _mm256_set1_ps(eps), vwd = _mm256_set1_ps(weight_decay);
    __m256 vib1 = _mm256_set1_ps(ib1), vib2 = _mm256_set1_ps(ib2);
    __m256 vgs = _mm256_set1_ps(grad_scale);
    size_t k = 0;
#if defined(__AVX512F__)
    {
        __m512 wlr = _mm512_set1_ps(lr), wb1 = _mm512_set1_ps(beta1), wb2 = _mm512_set1_ps(beta2);
        __m512 weps = _mm512_set1_ps(eps), wwd = _mm512_set1_ps(weight_decay);
        __m512 wib1 = _mm512_set1_ps(ib1), wib2 = _mm512_set1_ps(ib2);
        __m512 wgs = _mm512_set1_ps(grad_scale);
        for (; k + 16 <= n; k += 16)
            adamw16(param + k, grad + k, m + k, v + k, wgs, wlr, wb1, wb2, weps, wwd, wib1, wib2);
    }
#endif
    for (; k + 8 <= n; k += 8)
        adamw8(param + k, grad + k, m + k, v + k, vgs, vlr, vb1, vb2, veps, vwd, vib1, vib2);
    if (k < n) { /* the tail through the same vector code, on padded copies */
        float P[8] = {0}, G[8] = {0}, M[8] = {0}, V[8] = {0};
        size_t r = n - k;
        memcpy(P, param + k, r * 4), memcpy(G, grad + k, r * 4);
        memcpy(M, m + k, r * 4), memcpy(V, v + k, r * 4);
        adamw8(P, G, M, V, vgs, vlr, vb1, vb2, veps, vwd, vib1, vib2);
        memcpy(param + k, P, r * 4), memcpy(m + k, M, r * 4), memcpy(v + k, V, r * 4);
    }
#else
    for (size_t k = 0; k < n; k++) {
        float g = grad[k] * grad_scale;
        float mk = beta1 * m[k] + (1.0f - beta1) * g;
        float vk = beta2 * v[k] + (1.0f - beta2) * g * g;
        m[k] = mk;
        v[k] = vk;
        float mh = mk * ib1, vh = vk * ib2;
        param[k] -= lr * (mh / (sqrtf(vh) + eps) + weight_decay * param[k]);
    }
#endif
}

double nn_sumsq(const float *x, size_t n) {
    /* four fixed lanes so the compiler may vectorise without reordering */
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    size_t k = 0;
    for (; k + 4 <= n; k += 4) {
        a0 += (double)x[k] * x[k];
        a1 += (double)x[k + 1] * x[k + 1];
        a2 += (double)x[k + 2] * x[k + 2];
        a3 += (double)x[k + 3] * x[k + 3];
    }
    for (; k < n; k++)
        a0 += (double)x[k] * x[k];
    return (a0 + a1) + (a2 + a3);
}

void nn_scale(float *x, float s, size_t n) {
    for (size_t k = 0; k < n; k++)
        x[k] *= s;
}
