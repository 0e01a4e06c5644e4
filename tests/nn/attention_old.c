/* tests/nn/attention_old.c - the untiled attention kernel mtc used before
 * src/nn/flash_attention.c, kept only as a test oracle (and a benchmark
 * baseline): it saves the (B, NH, T, T) probabilities. One (batch, head)
 * pair per pool work item.
 *
 * Per (b, h), with Q, K, V (T, HS) read in place from qkv [q | k | v]:
 *   S = QKᵀ/sqrt(HS) -> P = softmax(causal S) -> A = dropout(P) -> out = A V
 * Backward (dO given):
 *   dV = Aᵀ dO;  dA = dO Vᵀ;  dP = dA * mask/(1-p);
 *   dS = P * (dP - rowsum(P * dP));  dQ = dS K/sqrt(HS);  dK = dSᵀ Q/sqrt(HS)
 *
 * Saved tensor: att holds P, the probabilities BEFORE dropout (zeros above
 * the diagonal). Backward needs P for the softmax gradient, and dropped
 * entries of P cannot be recovered from A, so A is rebuilt from P and the
 * regenerated mask (nn_dropout_spec, keyed by global position) in small
 * tiles on the stack; no mask is stored. Without dropout A = P.
 * All products are CBLAS sgemm calls on row blocks that skip the all-zero
 * upper triangle; block boundaries depend only on T. Scratch (B,NH,T,T)
 * holds dA then dS in backward.
 * Does not do cross-rank attention (context parallelism lives in cp/). */
#include <math.h>
#include <string.h>

#include "core/log.h"
#include "attention_old.h"
#include "nn/nn_internal.h"

#ifndef ATT_RB
#define ATT_RB 64 /* query rows per causal block */
#endif
#ifndef ATT_DR
#define ATT_DR 32 /* query rows per dropout tile (32 KB of stack) */
#endif
#define ATT_DK 256 /* keys per dropout tile */

typedef struct {
    float *out, *att, *dqkv, *scratch;
    const float *qkv, *dout, *catt;
    int B, T, NH, HS;
    const nn_dropout_spec *drop; /* NULL when p == 0 */
} att_job;

/* ---- row helpers (8-wide; sums in fixed lane order) ---- */

/* y = a * b */
static void att_mul(float *y, const float *a, const float *b, int n) {
    int k = 0;
    for (; k + 8 <= n; k += 8)
        NN_V8_ST(y + k, NN_V8_LD(a + k) * NN_V8_LD(b + k));
    for (; k < n; k++)
        y[k] = a[k] * b[k];
}

/* returns sum p * d */
static float att_dot(const float *p, const float *d, int n) {
    nn_v8 acc = NN_V8_SET1(0.0f);
    int k = 0;
    for (; k + 8 <= n; k += 8)
        acc += NN_V8_LD(p + k) * NN_V8_LD(d + k);
    float s = NN_V8_HSUM(acc);
    for (; k < n; k++)
        s += p[k] * d[k];
    return s;
}

/* d = p * (d - s): the softmax backward of one row */
static void att_softmax_bwd(float *d, const float *p, float s, int n) {
    int k = 0;
    for (; k + 8 <= n; k += 8)
        NN_V8_ST(d + k, NN_V8_LD(p + k) * (NN_V8_LD(d + k) - s));
    for (; k < n; k++)
        d[k] = p[k] * (d[k] - s);
}

/* mask scales (0 or 1/(1-p)) of row i, keys [k0, k0+n), for pair (b, h). */
static void att_mask_run(float *m, const att_job *j, int b, int h, int i, int k0, int n) {
    const nn_dropout_spec *s = j->drop;
    uint64_t Tg = s->Tg > 0 ? (uint64_t)s->Tg : (uint64_t)j->T;
    uint64_t NHg = s->NHg > 0 ? (uint64_t)s->NHg : (uint64_t)j->NH;
    uint64_t pos = s->tpos ? (uint64_t)s->tpos[i] : (uint64_t)(s->t0 + i);
    uint64_t row = (((uint64_t)(s->b0 + b) * NHg + (uint64_t)(s->h0 + h)) * Tg + pos) * Tg;
    if (!s->kpos) {
        nn_dropout_scale_run(m, (size_t)n, s, row + (uint64_t)k0);
        return;
    }
    for (int k = 0; k < n; k++)
        nn_dropout_scale_run(m + k, 1, s, row + (uint64_t)s->kpos[k0 + k]);
}

static void att_fwd_pair(int idx, void *vp) {
    const att_job *j = vp;
    int T = j->T, NH = j->NH, HS = j->HS, C = NH * HS, C3 = 3 * C;
    int b = idx / NH, h = idx % NH;
    const float *Q = j->qkv + (size_t)b * T * C3 + (size_t)h * HS, *K = Q + C, *V = Q + 2 * C;
    float *P = j->att + (size_t)idx * T * T;
    float *O = j->out + (size_t)b * T * C + (size_t)h * HS;
    float scale = 1.0f / sqrtf((float)HS);
    for (int i0 = 0; i0 < T; i0 += ATT_RB) { /* S = scale Q Kᵀ, keys < block end */
        int i1 = i0 + ATT_RB < T ? i0 + ATT_RB : T;
        nn_blas_sgemm(0, 1, i1 - i0, i1, HS, scale, Q + (size_t)i0 * C3, C3, K, C3, 0.0f,
                      P + (size_t)i0 * T, T);
    }
    for (int i = 0; i < T; i++) { /* causal softmax in place */
        float *p = P + (size_t)i * T;
        float s = nn_vexp_sum(p, p, i + 1, nn_vmax(p, i + 1));
        nn_vscale(p, 1.0f / s, i + 1);
        memset(p + i + 1, 0, (size_t)(T - 1 - i) * sizeof(float));
    }
    if (!j->drop) { /* out = P V, keys < block end */
        for (int i0 = 0; i0 < T; i0 += ATT_RB) {
            int i1 = i0 + ATT_RB < T ? i0 + ATT_RB : T;
            nn_blas_sgemm(0, 0, i1 - i0, HS, i1, 1.0f, P + (size_t)i0 * T, T, V, C3, 0.0f,
                          O + (size_t)i0 * C, C);
        }
        return;
    }
    float tile[ATT_DR * ATT_DK], m[ATT_DK];
    for (int i0 = 0; i0 < T; i0 += ATT_DR) { /* out = A V, A built tile by tile */
        int i1 = i0 + ATT_DR < T ? i0 + ATT_DR : T, rows = i1 - i0;
        for (int k0 = 0; k0 < i1; k0 += ATT_DK) {
            int kw = i1 - k0 < ATT_DK ? i1 - k0 : ATT_DK;
            for (int r = 0; r < rows; r++) {
                att_mask_run(m, j, b, h, i0 + r, k0, kw);
                const float *p = P + (size_t)(i0 + r) * T + k0;
                att_mul(tile + r * kw, p, m, kw);
            }
            nn_blas_sgemm(0, 0, rows, HS, kw, 1.0f, tile, kw, V + (size_t)k0 * C3, C3,
                          k0 == 0 ? 0.0f : 1.0f, O + (size_t)i0 * C, C);
        }
    }
}

void old_attention_forward(nn_pool *pool, float *out, float *att, const float *qkv, int B, int T,
                           int NH, int HS, const nn_dropout_spec *drop) {
    att_job j = {.out = out,
                 .att = att,
                 .qkv = qkv,
                 .B = B,
                 .T = T,
                 .NH = NH,
                 .HS = HS,
                 .drop = (drop && drop->p > 0.0f) ? drop : NULL};
    if (j.drop) MTC_ASSERT(j.drop->p < 1.0f);
    nn_pool_run(pool, B * NH, att_fwd_pair, &j);
}

static void att_bwd_pair(int idx, void *vp) {
    const att_job *j = vp;
    int T = j->T, NH = j->NH, HS = j->HS, C = NH * HS, C3 = 3 * C;
    int b = idx / NH, h = idx % NH;
    const float *Q = j->qkv + (size_t)b * T * C3 + (size_t)h * HS, *K = Q + C, *V = Q + 2 * C;
    const float *P = j->catt + (size_t)idx * T * T;
    const float *dO = j->dout + (size_t)b * T * C + (size_t)h * HS;
    float *dQ = j->dqkv + (size_t)b * T * C3 + (size_t)h * HS, *dK = dQ + C, *dV = dQ + 2 * C;
    float *D = j->scratch + (size_t)idx * T * T;
    float scale = 1.0f / sqrtf((float)HS);

    for (int i0 = 0; i0 < T; i0 += ATT_RB) { /* D = dA = dO Vᵀ, keys < block end */
        int i1 = i0 + ATT_RB < T ? i0 + ATT_RB : T;
        nn_blas_sgemm(0, 1, i1 - i0, i1, HS, 1.0f, dO + (size_t)i0 * C, C, V, C3, 0.0f,
                      D + (size_t)i0 * T, T);
    }
    if (!j->drop) {
        for (int k0 = 0; k0 < T; k0 += ATT_RB) { /* dV = Pᵀ dO, queries >= block start */
            int k1 = k0 + ATT_RB < T ? k0 + ATT_RB : T;
            nn_blas_sgemm(1, 0, k1 - k0, HS, T - k0, 1.0f, P + (size_t)k0 * T + k0, T,
                          dO + (size_t)k0 * C, C, 0.0f, dV + (size_t)k0 * C3, C3);
        }
        for (int i = 0; i < T; i++) { /* D = dS = P (dA - rowsum(P dA)) */
            const float *p = P + (size_t)i * T;
            float *d = D + (size_t)i * T;
            att_softmax_bwd(d, p, att_dot(p, d, i + 1), i + 1);
        }
    } else {
        float tile[ATT_DR * ATT_DK], m[ATT_DK], srow[ATT_DR];
        for (int r = 0; r < T; r++)
            memset(dV + (size_t)r * C3, 0, (size_t)HS * sizeof(float));
        for (int i0 = 0; i0 < T; i0 += ATT_DR) {
            int i1 = i0 + ATT_DR < T ? i0 + ATT_DR : T, rows = i1 - i0;
            memset(srow, 0, sizeof srow);
            for (int k0 = 0; k0 < i1; k0 += ATT_DK) {
                int kw = i1 - k0 < ATT_DK ? i1 - k0 : ATT_DK;
                for (int r = 0; r < rows; r++) {
                    att_mask_run(m, j, b, h, i0 + r, k0, kw);
                    const float *p = P + (size_t)(i0 + r) * T + k0;
                    float *d = D + (size_t)(i0 + r) * T + k0;
                    att_mul(tile + r * kw, p, m, kw); /* A */
                    att_mul(d, d, m, kw);             /* dP */
                    srow[r] += att_dot(p, d, kw);
                }
                /* dV[keys] += Aᵀ dO[rows] */
                nn_blas_sgemm(1, 0, kw, HS, rows, 1.0f, tile, kw, dO + (size_t)i0 * C, C, 1.0f,
                              dV + (size_t)k0 * C3, C3);
            }
            for (int r = 0; r < rows; r++) {
                int i = i0 + r;
                const float *p = P + (size_t)i * T;
                float *d = D + (size_t)i * T;
                att_softmax_bwd(d, p, srow[r], i + 1);
            }
        }
    }
    for (int i = 0; i < T; i++) { /* the gemms below read the diagonal blocks whole */
        int end = (i / ATT_RB + 1) * ATT_RB < T ? (i / ATT_RB + 1) * ATT_RB : T;
        memset(D + (size_t)i * T + i + 1, 0, (size_t)(end - 1 - i) * sizeof(float));
    }
    for (int i0 = 0; i0 < T; i0 += ATT_RB) { /* dQ = scale dS K, keys < block end */
        int i1 = i0 + ATT_RB < T ? i0 + ATT_RB : T;
        nn_blas_sgemm(0, 0, i1 - i0, HS, i1, scale, D + (size_t)i0 * T, T, K, C3, 0.0f,
                      dQ + (size_t)i0 * C3, C3);
    }
    for (int k0 = 0; k0 < T; k0 += ATT_RB) { /* dK = scale dSᵀ Q, queries >= block start */
        int k1 = k0 + ATT_RB < T ? k0 + ATT_RB : T;
        nn_blas_sgemm(1, 0, k1 - k0, HS, T - k0, scale, D + (size_t)k0 * T + k0, T,
                      Q + (size_t)k0 * C3, C3, 0.0f, dK + (size_t)k0 * C3, C3);
    }
}

void old_attention_backward(nn_pool *pool, float *dqkv, float *scratch, const float *dout,
                            const float *qkv, const float *att, int B, int T, int NH, int HS,
                            const nn_dropout_spec *drop) {
    att_job j = {.dqkv = dqkv,
                 .scratch = scratch,
                 .dout = dout,
                 .qkv = qkv,
                 .catt = att,
                 .B = B,
                 .T = T,
                 .NH = NH,
                 .HS = HS,
                 .drop = (drop && drop->p > 0.0f) ? drop : NULL};
    nn_pool_run(pool, B * NH, att_bwd_pair, &j);
}
