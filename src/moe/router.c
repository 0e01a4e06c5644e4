/* moe/router.c - Megatron's router maths on one rank's tokens
 * (router.py, moe_utils.py): top-k with the score functions, capacity and
 * drop policies, the load-balancing losses and the z-loss, each with its
 * backward, and the expert-bias step. Ties in every top-k go to the lower
 * index (PyTorch leaves them unspecified). Does not communicate (the
 * caller all-reduces the counts) and allocates nothing. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "moe/moe.h"

/* The k largest of v[0..n) (masked entries skipped), largest first, ties
 * to the lower index. mask NULL = all. */
static void topk_plain(int *out, const float *v, const uint8_t *mask, int n, int k) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < n; e++) {
            if (mask && !mask[e]) continue;
            int taken = 0;
            for (int i = 0; i < j; i++)
                taken |= out[i] == e;
            if (taken) continue;
            if (best < 0 || v[e] > v[best]) best = e;
        }
        out[j] = best;
    }
}

/* Top-k of one row, group-limited when configured: groups ranked by the
 * sum of their top k/group_topk values, experts outside the chosen
 * group_topk groups masked. */
static void topk_row(int *out, const float *v, const mtc_moe_config *m, int E, int k) {
    if (!m->group_topk) {
        topk_plain(out, v, NULL, E, k);
        return;
    }
    int G = m->num_groups, per = E / G, kg = k / m->group_topk;
    float gs[4096];
    int tmp[4096];
    uint8_t gmask[4096], emask[4096];
    for (int g = 0; g < G; g++) {
        topk_plain(tmp, v + g * per, NULL, per, kg);
        float s = 0;
        for (int i = 0; i < kg; i++)
            s += v[g * per + tmp[i]];
        gs[g] = s;
    }
    topk_plain(tmp, gs, NULL, G, m->group_topk);
    memset(gmask, 0, (size_t)G);
    for (int i = 0; i < m->group_topk; i++)
        gmask[tmp[i]] = 1;
    for (int e = 0; e < E; e++)
        emask[e] = gmask[e / per];
    topk_plain(out, v, emask, E, k);
}

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* softmax of row x (n) into y. */
static void softmax_row(float *y, const float *x, int n) {
    float mx = x[0];
    for (int i = 1; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (y[i] = expf(x[i] - mx));
    for (int i = 0; i < n; i++)
        y[i] = (float)(y[i] / s);
}

void moe_router_topk(int *sel, float *probs, const float *logits, const float *expert_bias,
                     const mtc_moe_config *m, int N, int E) {
    int k = mtc_moe_topk(m);
    float row[4096];
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * E;
        int *s = sel + (size_t)n * k;
        float *p = probs + (size_t)n * k;
        if (m->score == MOE_SCORE_SOFTMAX && m->pre_softmax) {
            softmax_row(row, l, E);
            topk_row(s, row, m, E, k);
            for (int j = 0; j < k; j++)
                p[j] = row[s[j]];
        } else if (m->score == MOE_SCORE_SOFTMAX) {
            topk_row(s, l, m, E, k);
            float v[64];
            for (int j = 0; j < k; j++)
                v[j] = l[s[j]];
            softmax_row(p, v, k);
        } else {
            for (int e = 0; e < E; e++)
                row[e] = sigmoidf(l[e]) + (expert_bias ? expert_bias[e] : 0.0f);
            topk_row(s, row, m, E, k);
            float sum = 0;
            for (int j = 0; j < k; j++)
                sum += (p[j] = sigmoidf(l[s[j]]));
            if (k > 1)
                for (int j = 0; j < k; j++)
                    p[j] = p[j] / (sum + 1e-20f);
        }
        if (m->topk_scaling > 0)
            for (int j = 0; j < k; j++)
                p[j] *= m->topk_scaling;
    }
}

void moe_router_topk_backward(float *dlogits, const float *dprobs, const int *sel,
                              const float *logits, const mtc_moe_config *m, int N, int E) {
    int k = mtc_moe_topk(m);
    float sf = m->topk_scaling > 0 ? m->topk_scaling : 1.0f;
    float row[4096];
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * E;
        const int *s = sel + (size_t)n * k;
        const float *dp = dprobs + (size_t)n * k;
        float *dl = dlogits + (size_t)n * E;
        if (m->score == MOE_SCORE_SOFTMAX && m->pre_softmax) {
            softmax_row(row, l, E);
            double dot = 0;
            for (int j = 0; j < k; j++)
                dot += (double)row[s[j]] * sf * dp[j];
            for (int e = 0; e < E; e++)
                dl[e] -= (float)(row[e] * dot);
            for (int j = 0; j < k; j++)
                dl[s[j]] += row[s[j]] * sf * dp[j];
        } else if (m->score == MOE_SCORE_SOFTMAX) {
            float v[64], q[64];
            for (int j = 0; j < k; j++)
                v[j] = l[s[j]];
            softmax_row(q, v, k);
            double dot = 0;
            for (int j = 0; j < k; j++)
                dot += (double)q[j] * dp[j];
            for (int j = 0; j < k; j++)
                dl[s[j]] += sf * q[j] * (float)(dp[j] - dot);
        } else {
            float q[64], sum = 0;
            for (int j = 0; j < k; j++)
                sum += (q[j] = sigmoidf(l[s[j]]));
            double Q = (double)sum + 1e-20, dot = 0;
            for (int j = 0; j < k; j++)
                dot += (double)dp[j] * q[j];
            for (int j = 0; j < k; j++) {
                double dq = k > 1 ? sf * (dp[j] / Q - dot / (Q * Q)) : sf * dp[j];
                dl[s[j]] += (float)(dq * q[j] * (1.0 - q[j]));
            }
        }
    }
}

int moe_capacity(const mtc_moe_config *m, int N, int E) {
    if (!(m->capacity_factor > 0)) return 0;
    double cap = ceil(((double)N * mtc_moe_topk(m) / E) * m->capacity_factor);
    /* an expert gets each of the N tokens at most once: a capacity past
     * what an int holds drops nothing, as N does */
    return cap < (double)(INT_MAX / 8) ? (int)cap : N;
}

typedef struct {
    float p;
    int slot;
} cap_item;

static int cap_cmp(const void *a, const void *b) {
    const cap_item *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return x->slot - y->slot;
}

void moe_router_capacity(int *kept, float *probs, const int *sel, const mtc_moe_config *m, int N,
                         int E, void *tmp) {
    int k = mtc_moe_topk(m), NK = N * k;
    for (int i = 0; i < NK; i++)
        kept[i] = 1;
    int cap = moe_capacity(m, N, E);
    if (cap <= 0 || cap > N) return; /* dropless, or room for every token */
    cap_item *items = tmp;           /* one expert's (prob, slot) list */
    for (int e = 0; e < E; e++) {
        int c = 0;
        for (int i = 0; i < NK; i++)
            if (sel[i] == e) items[c++] = (cap_item){probs[i], i};
        if (c <= cap) continue;
        if (m->drop == MOE_DROP_PROBS) qsort(items, (size_t)c, sizeof *items, cap_cmp);
        for (int r = cap; r < c; r++) {
            kept[items[r].slot] = 0;
            probs[items[r].slot] = 0.0f;
        }
    }
}

void moe_aux_scores(float *s, float *cnt, const float *logits, const mtc_moe_config *m, int N,
                    int E, int seq_B) {
    int k = mtc_moe_topk(m), B = seq_B > 0 ? seq_B : 1, Tn = N / B;
    if (cnt) memset(cnt, 0, (size_t)B * E * sizeof(float));
    int top[64];
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * E;
        float *r = s + (size_t)n * E;
        if (m->score == MOE_SCORE_SOFTMAX) {
            softmax_row(r, l, E);
        } else {
            float sum = 0;
            for (int e = 0; e < E; e++)
                sum += (r[e] = sigmoidf(l[e]));
            for (int e = 0; e < E; e++)
                r[e] = r[e] / (sum + 1e-20f);
        }
        if (!cnt) continue;
        topk_plain(top, r, NULL, E, k);
        float *c = cnt + (size_t)(seq_B > 0 ? n / Tn : 0) * E;
        for (int j = 0; j < k; j++)
            c[top[j]] += 1.0f;
    }
}

double moe_aux_loss(const float *s, const float *cnt, double total_tokens, int groups,
                    const mtc_moe_config *m, int N, int E) {
    int k = mtc_moe_topk(m), G = groups > 0 ? groups : 1, Tn = N / G;
    double acc = 0;
    for (int g = 0; g < G; g++)
        for (int e = 0; e < E; e++) {
            double P = 0;
            for (int t = 0; t < Tn; t++)
                P += s[((size_t)g * Tn + t) * E + e];
            acc += P * cnt[(size_t)g * E + e];
        }
    return acc * (E * (double)m->aux_coeff / (k * total_tokens * total_tokens)) / G;
}

void moe_aux_loss_backward(float *dlogits, const float *s, const float *cnt, double total_tokens,
                           int groups, const float *logits, const mtc_moe_config *m, int N, int E,
                           float g) {
    int k = mtc_moe_topk(m), G = groups > 0 ? groups : 1, Tn = N / G;
    double f = g * (E * (double)m->aux_coeff / (k * total_tokens * total_tokens)) / G;
    for (int n = 0; n < N; n++) {
        const float *r = s + (size_t)n * E, *c = cnt + (size_t)(n / Tn) * E;
        const float *l = logits + (size_t)n * E;
        float *dl = dlogits + (size_t)n * E;
        if (m->score == MOE_SCORE_SOFTMAX) { /* ds_e = f c_e; dl = s (ds - s.ds) */
            double dot = 0;
            for (int e = 0; e < E; e++)
                dot += (double)r[e] * f * c[e];
            for (int e = 0; e < E; e++)
                dl[e] += (float)(r[e] * (f * c[e] - dot));
        } else { /* s = q / (sum q + eps) */
            double sum = 1e-20, dot = 0;
            for (int e = 0; e < E; e++)
                sum += sigmoidf(l[e]);
            for (int e = 0; e < E; e++)
                dot += f * c[e] * r[e];
            for (int e = 0; e < E; e++) {
                double q = sigmoidf(l[e]), dq = (f * c[e] - dot) / sum;
                dl[e] += (float)(dq * q * (1 - q));
            }
        }
    }
}

static double row_lse(const float *l, int E) {
    float mx = l[0];
    for (int e = 1; e < E; e++)
        mx = l[e] > mx ? l[e] : mx;
    double s = 0;
    for (int e = 0; e < E; e++)
        s += exp((double)l[e] - mx);
    return mx + log(s);
}

double moe_z_loss(const float *logits, float coeff, int N, int E) {
    double acc = 0;
    for (int n = 0; n < N; n++) {
        double z = row_lse(logits + (size_t)n * E, E);
        acc += z * z;
    }
    return N ? acc / N * coeff : 0.0;
}

void moe_z_loss_backward(float *dlogits, const float *logits, float coeff, int N, int E, float g) {
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * E;
        double z = row_lse(l, E), f = g * (double)coeff * 2.0 * z / N;
        for (int e = 0; e < E; e++)
            dlogits[(size_t)n * E + e] += (float)(f * exp((double)l[e] - z));
    }
}

void moe_expert_bias_update(float *bias, const float *counts, float rate, int E) {
    double mean = 0;
    for (int e = 0; e < E; e++)
        mean += counts[e];
    mean /= E;
    for (int e = 0; e < E; e++) {
        double off = mean - counts[e];
        bias[e] += off > 0 ? rate : off < 0 ? -rate : 0.0f;
    }
}
