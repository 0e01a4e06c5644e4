/* tests/nn/nn_ref.h - double-precision reference kernels for the nn tests,
 * written from the formulas (not from src/nn), plus small helpers.
 * Header-only (static) so each test program can include it. */
#ifndef MTC_TESTS_NN_REF_H
#define MTC_TESTS_NN_REF_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "nn/nn.h"

/* deterministic test data: x[k] = std * normal(seed, k) */
static inline void ref_fill(float *x, size_t n, uint64_t seed, float std) {
    mtc_rng_fill_normal(x, n, seed, 77, 0, 0.0f, std);
}
static inline double *ref_d(const float *x, size_t n) {
    double *d = malloc(n * sizeof(double));
    for (size_t k = 0; k < n; k++)
        d[k] = x[k];
    return d;
}

/* out (N,C) */
static inline void ref_layernorm(double *out, const double *x, const double *w, const double *b,
                                 int N, int C) {
    for (int n = 0; n < N; n++) {
        const double *r = x + (size_t)n * C;
        double m = 0, v = 0;
        for (int c = 0; c < C; c++)
            m += r[c];
        m /= C;
        for (int c = 0; c < C; c++)
            v += (r[c] - m) * (r[c] - m);
        v /= C;
        double rs = 1.0 / sqrt(v + 1e-5);
        for (int c = 0; c < C; c++)
            out[(size_t)n * C + c] = (r[c] - m) * rs * w[c] + b[c];
    }
}

/* out (N,OUT) = x (N,IN) wᵀ + b */
static inline void ref_linear(double *out, const double *x, const double *w, const double *b, int N,
                              int IN, int OUT) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OUT; o++) {
            double s = b ? b[o] : 0.0;
            for (int i = 0; i < IN; i++)
                s += x[(size_t)n * IN + i] * w[(size_t)o * IN + i];
            out[(size_t)n * OUT + o] = s;
        }
}

static inline double ref_gelu1(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* dropout keep-scale of a global index */
static inline double ref_keep(const nn_dropout_spec *s, uint64_t g) {
    return mtc_rng_uniform(s->seed, s->stream, g) >= s->p ? 1.0 / (1.0 - (double)s->p) : 0.0;
}

/* Attention from the formulas, in the geometry of nn_attention_shape (q, k,
 * v, out with its strides; GQA, causal by positions): out and lse (B,NH,T;
 * -inf and a zero row when no key is visible); drop may be NULL (dropout
 * element numbering as in nn.h). */
static inline void ref_attention(double *out, double *lse, const double *q, const double *k,
                                 const double *v, const nn_attention_shape *s,
                                 const nn_dropout_spec *drop) {
    int T = s->T, Tk = s->Tk, NH = s->NH, HS = s->HS, G = s->NH / s->NKV;
    double scale = s->scale != 0.0f ? s->scale : 1.0 / sqrt((double)HS);
    double *p = malloc(((size_t)Tk + 1) * sizeof(double));
    int Tg = drop && drop->Tg ? drop->Tg : T, NHg = drop && drop->NHg ? drop->NHg : NH;
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const double *qi = q + ((size_t)b * T + i) * s->ldq + (size_t)h * HS;
                int qp = s->qpos ? s->qpos[i] : s->q0 + i;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < Tk; j++) {
                    int kp = s->kpos ? s->kpos[j] : s->k0 + j;
                    p[j] = -INFINITY;
                    if (kp > qp) continue;
                    const double *kj = k + ((size_t)b * Tk + j) * s->ldk + (size_t)(h / G) * HS;
                    double d = 0;
                    for (int e = 0; e < HS; e++)
                        d += qi[e] * kj[e];
                    p[j] = d * scale;
                    if (p[j] > mx) mx = p[j];
                }
                double *o = out + ((size_t)b * T + i) * s->ldo + (size_t)h * HS;
                for (int e = 0; e < HS; e++)
                    o[e] = 0;
                if (lse) lse[((size_t)b * NH + h) * T + i] = -INFINITY;
                if (mx == -INFINITY) continue;
                for (int j = 0; j < Tk; j++)
                    sum += (p[j] = p[j] == -INFINITY ? 0.0 : exp(p[j] - mx));
                if (lse) lse[((size_t)b * NH + h) * T + i] = mx + log(sum);
                for (int j = 0; j < Tk; j++) {
                    double a = p[j] / sum;
                    if (a == 0) continue;
                    if (drop && drop->p > 0) {
                        uint64_t pos = drop->tpos ? drop->tpos[i] : drop->t0 + i;
                        uint64_t kp = drop->kpos ? drop->kpos[j] : j;
                        a *= ref_keep(
                            drop,
                            ((((uint64_t)drop->b0 + b) * NHg + drop->h0 + h) * Tg + pos) * Tg + kp);
                    }
                    const double *vj = v + ((size_t)b * Tk + j) * s->ldv + (size_t)(h / G) * HS;
                    for (int e = 0; e < HS; e++)
                        o[e] += a * vj[e];
                }
            }
    free(p);
}

#endif
