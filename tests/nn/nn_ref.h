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

/* causal attention, unsharded global layout; att (B,NH,T,T) gets P (before
 * dropout); drop may be NULL. */
static inline void ref_attention(double *out, double *att, const double *qkv, int B, int T, int NH,
                                 int HS, const nn_dropout_spec *drop) {
    int C = NH * HS, C3 = 3 * C;
    double *p = malloc((size_t)T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const double *q = qkv + ((size_t)b * T + i) * C3 + h * HS;
                double mx = -INFINITY, s = 0;
                for (int j = 0; j <= i; j++) {
                    const double *k = qkv + ((size_t)b * T + j) * C3 + C + h * HS;
                    double d = 0;
                    for (int e = 0; e < HS; e++)
                        d += q[e] * k[e];
                    p[j] = d / sqrt((double)HS);
                    if (p[j] > mx) mx = p[j];
                }
                for (int j = 0; j <= i; j++)
                    s += (p[j] = exp(p[j] - mx));
                for (int j = 0; j <= i; j++)
                    p[j] /= s;
                if (att) {
                    double *a = att + (((size_t)b * NH + h) * T + i) * T;
                    for (int j = 0; j < T; j++)
                        a[j] = j <= i ? p[j] : 0.0;
                }
                double *o = out + ((size_t)b * T + i) * C + h * HS;
                for (int e = 0; e < HS; e++)
                    o[e] = 0;
                for (int j = 0; j <= i; j++) {
                    double a = p[j];
                    if (drop && drop->p > 0)
                        a *= ref_keep(drop, (((uint64_t)b * NH + h) * T + i) * T + j);
                    const double *v = qkv + ((size_t)b * T + j) * C3 + 2 * C + h * HS;
                    for (int e = 0; e < HS; e++)
                        o[e] += a * v[e];
                }
            }
    free(p);
}

#endif
