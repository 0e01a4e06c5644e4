/* nn/flash_attention.c - tiled (flash-style) attention of one device,
 * forward and backward, that never holds a T x Tk matrix: scratch is a few
 * FA_BR x FA_BC tiles on each thread's stack, memory O(T * HS) per head.
 *
 * Forward, one pool item per (b, query head h, block of FA_BR query rows),
 * m = running row max, l = running row sum, O accumulated in `out`:
 *
 *   for each key tile j (FA_BC keys of kv head h / (NH/NKV)) with a visible key:
 *     S = scale Q_i K_jᵀ                    (FA_BR x FA_BC x HS)
 *     mask: key visible iff kpos <= qpos     (tiles wholly visible skip it)
 *     m' = max(m, rowmax S);  P = exp(S - m');  l = l e^(m - m') + rowsum P
 *     O = O e^(m - m') + (P * dropmask) V_j  (FA_BR x HS x FA_BC)
 *   O /= l;  lse = m + log l   (a row that sees no key: O = 0, lse = -inf)
 *
 * Backward (flash-attention-2), one pool item per (b, kv head), so that the
 * item owns dK, dV of its kv head and dQ of the NH/NKV query heads that
 * read it; every sum runs in one fixed order whatever the thread count:
 *
 *   for each key tile j:  for each query block i:  for each head of the group:
 *     D = rowsum(dO_i * O_i);  P = exp(scale Q_i K_jᵀ - lse_i) (masked)
 *     dA = dO_i V_jᵀ;  A = P * M;  dP = dA * M   (M = dropout keep-scale)
 *     dV_j += Aᵀ dO_i;  dS = P * (dP - D)
 *     dK_j += scale dSᵀ Q_i;  dQ_i += scale dS K_j     (five products a tile)
 *
 * rowsum(P * dP) = dO_i . O_i holds with dropout too (O = A V), and with
 * the out and lse of an lse-merge of several calls (context parallelism:
 * pass the merged out and lse to every part's backward).
 * Dropout masks are regenerated per tile from nn_dropout_spec with the
 * global element numbering of nn.h, so they equal the untiled kernel's.
 *
 * The tile products are the register-blocked fa_gemm below (AVX-512, AVX2
 * or plain vectors, whichever the build targets), not CBLAS: a 64 x 64 x 64
 * product is too small to pay for a BLAS call's packing. Measured with
 * bench/kernels/bench_attention.c on a loaded machine: 1.3-2.8x the untiled
 * kernel with the generic x86 core OpenBLAS 0.3.21 picks on our Sapphire
 * Rapids CPUs, 0.7-0.9x of it when OPENBLAS_CORETYPE=SkylakeX gives the
 * untiled kernel's large GEMMs AVX-512; on the Zen 5 host (OpenBLAS's
 * Cooperlake kernels) 1.5x it at B=4 T=256 NH=6 HS=64, 1 thread, once each
 * row of B stays in a register (fa_block16: 0.77x before). Every path multiplies and adds
 * separately (no FMA), in the same order, so all vector widths give the
 * same bits; with FMA one parity case (test_parity_distopt, L=4 tp=2 pp=2
 * vpp=2) moved from 0.54 to 1.11 of its tolerance through rounding alone.
 *
 * Limitations: the gradient is that of out only (lse is a saved statistic,
 * not differentiated); backward parallelism is B * NKV items, so a single
 * kv head of one sequence runs on one thread; heads larger than FA_HS_MAX
 * fall back to CBLAS for the score tiles; tiles are fixed at FA_BR x FA_BC
 * whatever HS; positions are ints shared by all batch rows; no bf16. */
#include <math.h>
#include <string.h>

#include "core/log.h"
#include "nn/nn.h"
#include "nn/nn_internal.h"

#ifndef FA_BR
#define FA_BR 64 /* query rows per block */
#endif
#ifndef FA_BC
#define FA_BC 64 /* keys per tile */
#endif
#define FA_HS_MAX 256 /* larger heads take the CBLAS path */

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

typedef struct {
    const nn_attention_shape *s;
    float *out, *lse, *dq, *dk, *dv;
    const float *q, *k, *v, *o, *dout, *clse;
    const nn_dropout_spec *drop; /* NULL when p == 0 */
    float scale;
    int nqb, nkb, G; /* query blocks, key tiles, query heads per kv head */
} fa_job;

static inline int fa_qpos(const nn_attention_shape *s, int i) {
    return s->qpos ? s->qpos[i] : s->q0 + i;
}

/* smallest and largest position of n rows from i (query when kp == 0) */
static void fa_span(const nn_attention_shape *s, int kp, int i, int n, int *lo, int *hi) {
    const int *pos = kp ? s->kpos : s->qpos;
    if (!pos) {
        *lo = (kp ? s->k0 : s->q0) + i, *hi = *lo + n - 1;
        return;
    }
    int a = pos[i], b = pos[i];
    for (int r = 1; r < n; r++) {
        a = pos[i + r] < a ? pos[i + r] : a;
        b = pos[i + r] > b ? pos[i + r] : b;
    }
    *lo = a, *hi = b;
}

/* ---- tile GEMM ----
 * C (M, N) (+)= alpha sum_p a(r, p) B[p, :], a(r, p) = A[r * ars + p * aps]:
 * ars = lda, aps = 1 reads A (M, K); ars = 1, aps = lda reads Aᵀ. Register
 * blocks of 4 rows x 32 columns (x 64 with AVX-512); every element sums p in
 * order, so results do not depend on the caller or the thread count. */
static inline __attribute__((always_inline)) void fa_block(const int MR, const int NV, int K,
                                                           float alpha, const float *A, int ars,
                                                           int aps, const float *B, int ldb,
                                                           float *C, int ldc, int acc) {
    nn_v8 c[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            c[r][v] = NN_V8_SET1(0.0f);
    for (int p = 0; p < K; p++) {
        const float *b = B + (size_t)p * ldb;
        nn_v8 bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            bv[v] = NN_V8_LD(b + 8 * v);
#if defined(__AVX__)
            __asm__("" : "+x"(bv[v])); /* in a register (GCC folds the load into each row's mul) */
#endif
        }
#pragma GCC unroll 4
        for (int r = 0; r < MR; r++) {
            nn_v8 a = NN_V8_SET1(A[(size_t)r * ars + (size_t)p * aps]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                c[r][v] = c[r][v] + a * bv[v];
        }
    }
    nn_v8 al = NN_V8_SET1(alpha);
#pragma GCC unroll 4
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            float *o = C + (size_t)r * ldc + 8 * v;
            nn_v8 x = c[r][v] * al;
            NN_V8_ST(o, acc ? NN_V8_LD(o) + x : x);
        }
}

#if defined(__AVX512F__)
/* the same on 16-float vectors: blocks of MR rows x NV*16 columns */
static inline __attribute__((always_inline)) void fa_block16(const int MR, const int NV, int K,
                                                             float alpha, const float *A, int ars,
                                                             int aps, const float *B, int ldb,
                                                             float *C, int ldc, int acc) {
    __m512 c[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            c[r][v] = _mm512_setzero_ps();
    for (int p = 0; p < K; p++) {
        const float *b = B + (size_t)p * ldb;
        __m512 bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            bv[v] = _mm512_loadu_ps(b + 16 * v);
            /* an empty asm pins the row in a register: GCC otherwise folds the load into
             * every row's multiply (MR loads for one; 2.1x slower tiles on Zen 5) */
            __asm__("" : "+v"(bv[v]));
        }
#pragma GCC unroll 4
        for (int r = 0; r < MR; r++) {
            __m512 a = _mm512_set1_ps(A[(size_t)r * ars + (size_t)p * aps]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                c[r][v] = _mm512_add_ps(c[r][v], _mm512_mul_ps(a, bv[v]));
        }
    }
    __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 4
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            float *o = C + (size_t)r * ldc + 16 * v;
            __m512 x = _mm512_mul_ps(c[r][v], al);
            _mm512_storeu_ps(o, acc ? _mm512_add_ps(_mm512_loadu_ps(o), x) : x);
        }
}
#endif

static inline __attribute__((always_inline)) void fa_rows(const int MR, int N, int K, float alpha,
                                                          const float *A, int ars, int aps,
                                                          const float *B, int ldb, float *C,
                                                          int ldc, int acc) {
    int c = 0;
#if defined(__AVX512F__)
    for (; c + 64 <= N; c += 64)
        fa_block16(MR, 4, K, alpha, A, ars, aps, B + c, ldb, C + c, ldc, acc);
    for (; c + 16 <= N; c += 16)
        fa_block16(MR, 1, K, alpha, A, ars, aps, B + c, ldb, C + c, ldc, acc);
#endif
    for (; c + 32 <= N; c += 32)
        fa_block(MR, 4, K, alpha, A, ars, aps, B + c, ldb, C + c, ldc, acc);
    for (; c + 8 <= N; c += 8)
        fa_block(MR, 1, K, alpha, A, ars, aps, B + c, ldb, C + c, ldc, acc);
    for (int r = 0; r < MR; r++)
        for (int cc = c; cc < N; cc++) {
            float x = 0.0f;
            for (int p = 0; p < K; p++)
                x += A[(size_t)r * ars + (size_t)p * aps] * B[(size_t)p * ldb + cc];
            float *o = C + (size_t)r * ldc + cc;
            *o = acc ? *o + x * alpha : x * alpha;
        }
}

static void fa_gemm(int M, int N, int K, float alpha, const float *A, int ars, int aps,
                    const float *B, int ldb, float *C, int ldc, int acc) {
    int r = 0;
    for (; r + 4 <= M; r += 4)
        fa_rows(4, N, K, alpha, A + (size_t)r * ars, ars, aps, B, ldb, C + (size_t)r * ldc, ldc,
                acc);
    for (; r < M; r++)
        fa_rows(1, N, K, alpha, A + (size_t)r * ars, ars, aps, B, ldb, C + (size_t)r * ldc, ldc,
                acc);
}

/* t (HS, FA_BC) = the kw rows of x (stride ld) transposed */
static void fa_pack_t(float *t, const float *x, int ld, int kw, int HS) {
    for (int c = 0; c < kw; c++)
        for (int e = 0; e < HS; e++)
            t[e * FA_BC + c] = x[(size_t)c * ld + e];
}

/* ---- row helpers (8-wide; sums in fixed lane order) ---- */

static void fa_mul(float *y, const float *a, const float *b, int n) {
    int k = 0;
    for (; k + 8 <= n; k += 8)
        NN_V8_ST(y + k, NN_V8_LD(a + k) * NN_V8_LD(b + k));
    for (; k < n; k++)
        y[k] = a[k] * b[k];
}

static float fa_dot(const float *a, const float *b, int n) {
    nn_v8 acc = NN_V8_SET1(0.0f);
    int k = 0;
    for (; k + 8 <= n; k += 8)
        acc += NN_V8_LD(a + k) * NN_V8_LD(b + k);
    float s = NN_V8_HSUM(acc);
    for (; k < n; k++)
        s += a[k] * b[k];
    return s;
}

static float fa_sum(const float *a, int n) {
    nn_v8 acc = NN_V8_SET1(0.0f);
    int k = 0;
    for (; k + 8 <= n; k += 8)
        acc += NN_V8_LD(a + k);
    float s = NN_V8_HSUM(acc);
    for (; k < n; k++)
        s += a[k];
    return s;
}

/* d = p * (d - D): the softmax backward of one row */
static void fa_softmax_bwd(float *d, const float *p, float D, int n) {
    int k = 0;
    for (; k + 8 <= n; k += 8)
        NN_V8_ST(d + k, NN_V8_LD(p + k) * (NN_V8_LD(d + k) - NN_V8_SET1(D)));
    for (; k < n; k++)
        d[k] = p[k] * (d[k] - D);
}

/* Keep-scales (0 or 1/(1-p)) of query row i, keys [j0, j0+n), head h of
 * batch row b: global element (((b0+b) NHg + h0+h) Tg + pos(i)) Tg + kpos(j). */
static void fa_mask_run(float *m, const fa_job *j, int b, int h, int i, int j0, int n) {
    const nn_dropout_spec *d = j->drop;
    uint64_t Tg = d->Tg > 0 ? (uint64_t)d->Tg : (uint64_t)j->s->T;
    uint64_t NHg = d->NHg > 0 ? (uint64_t)d->NHg : (uint64_t)j->s->NH;
    uint64_t pos = d->tpos ? (uint64_t)d->tpos[i] : (uint64_t)(d->t0 + i);
    uint64_t row = (((uint64_t)(d->b0 + b) * NHg + (uint64_t)(d->h0 + h)) * Tg + pos) * Tg;
    if (!d->kpos) {
        nn_dropout_scale_run(m, (size_t)n, d, row + (uint64_t)j0);
        return;
    }
    for (int k = 0; k < n; k++)
        nn_dropout_scale_run(m + k, 1, d, row + (uint64_t)d->kpos[j0 + k]);
}

/* Visible keys of query position qp in a tile of kw keys from j0, for a
 * tile that is not wholly visible. Contiguous keys: returns the visible
 * prefix length. Explicit key positions: sets invisible scores to -inf and
 * returns -1 (elementwise). */
static int fa_visible(const nn_attention_shape *s, float *srow, int qp, int j0, int kw) {
    if (!s->kpos) {
        int n = qp - (s->k0 + j0) + 1;
        return n < 0 ? 0 : n > kw ? kw : n;
    }
    for (int c = 0; c < kw; c++)
        if (s->kpos[j0 + c] > qp) srow[c] = -INFINITY;
    return -1;
}

static void fa_zero_invisible(const nn_attention_shape *s, float *srow, int qp, int j0, int kw) {
    for (int c = 0; c < kw; c++)
        if (s->kpos[j0 + c] > qp) srow[c] = 0.0f;
}

/* ---- forward ---- */

static void fa_fwd_item(int idx, void *vp) {
    const fa_job *j = vp;
    const nn_attention_shape *s = j->s;
    int NH = s->NH, HS = s->HS, T = s->T, Tk = s->Tk;
    int bh = idx % (s->B * NH), qb = j->nqb - 1 - idx / (s->B * NH); /* long blocks first */
    int b = bh / NH, h = bh % NH, kvh = h / j->G;
    int i0 = qb * FA_BR, rows = T - i0 < FA_BR ? T - i0 : FA_BR;
    const float *Q = j->q + ((size_t)b * T + i0) * s->ldq + (size_t)h * HS;
    const float *K = j->k + (size_t)b * Tk * s->ldk + (size_t)kvh * HS;
    const float *V = j->v + (size_t)b * Tk * s->ldv + (size_t)kvh * HS;
    float *O = j->out + ((size_t)b * T + i0) * s->ldo + (size_t)h * HS;
    float S[FA_BR * FA_BC], mask[FA_BC], m[FA_BR], l[FA_BR], Kt[FA_HS_MAX * FA_BC];
    int qp[FA_BR];
    for (int r = 0; r < rows; r++) {
        memset(O + (size_t)r * s->ldo, 0, (size_t)HS * sizeof(float));
        m[r] = -INFINITY, l[r] = 0.0f, qp[r] = fa_qpos(s, i0 + r);
    }
    int qlo, qhi;
    fa_span(s, 0, i0, rows, &qlo, &qhi);
    for (int kb = 0; kb < j->nkb; kb++) {
        int j0 = kb * FA_BC, kw = Tk - j0 < FA_BC ? Tk - j0 : FA_BC, klo, khi;
        fa_span(s, 1, j0, kw, &klo, &khi);
        if (klo > qhi) continue; /* no key of the tile is visible to any row */
        int full = khi <= qlo;
        if (HS <= FA_HS_MAX) {
            fa_pack_t(Kt, K + (size_t)j0 * s->ldk, s->ldk, kw, HS);
            fa_gemm(rows, kw, HS, j->scale, Q, s->ldq, 1, Kt, FA_BC, S, FA_BC, 0);
        } else {
            nn_blas_sgemm(0, 1, rows, kw, HS, j->scale, Q, s->ldq, K + (size_t)j0 * s->ldk, s->ldk,
                          0.0f, S, FA_BC);
        }
        for (int r = 0; r < rows; r++) {
            float *srow = S + r * FA_BC;
            int n = full ? kw : fa_visible(s, srow, qp[r], j0, kw);
            int nv = n < 0 ? kw : n; /* entries that go through exp */
            float mt = nv > 0 ? nn_vmax(srow, nv) : -INFINITY;
            if (mt == -INFINITY) { /* nothing visible in this tile */
                memset(srow, 0, (size_t)kw * sizeof(float));
                continue;
            }
            float mn = mt > m[r] ? mt : m[r];
            float alpha = expf(m[r] - mn); /* 0 for the first visible tile */
            float sum = nn_vexp_sum(srow, srow, nv, mn);
            if (n < 0) { /* exp(-inf) is tiny, not 0, in the vector exp: zero and re-sum */
                fa_zero_invisible(s, srow, qp[r], j0, kw);
                sum = fa_sum(srow, kw);
            } else if (n < kw) {
                memset(srow + n, 0, (size_t)(kw - n) * sizeof(float));
            }
            l[r] = l[r] * alpha + sum;
            if (alpha != 1.0f) nn_vscale(O + (size_t)r * s->ldo, alpha, HS);
            m[r] = mn;
            if (j->drop) {
                fa_mask_run(mask, j, b, h, i0 + r, j0, kw);
                fa_mul(srow, srow, mask, kw);
            }
        }
        fa_gemm(rows, HS, kw, 1.0f, S, FA_BC, 1, V + (size_t)j0 * s->ldv, s->ldv, O, s->ldo, 1);
    }
    float *L = j->lse + ((size_t)b * NH + h) * T + i0;
    for (int r = 0; r < rows; r++) {
        if (l[r] > 0.0f) {
            nn_vscale(O + (size_t)r * s->ldo, 1.0f / l[r], HS);
            L[r] = m[r] + logf(l[r]);
        } else {
            L[r] = -INFINITY; /* O row stayed 0 */
        }
    }
}

static void fa_job_init(fa_job *j, const nn_attention_shape *s, const nn_dropout_spec *drop) {
    MTC_ASSERT(s->B >= 0 && s->T >= 0 && s->Tk >= 0 && s->HS > 0);
    MTC_ASSERT(s->NH > 0 && s->NKV > 0 && s->NH % s->NKV == 0);
    j->s = s;
    j->drop = (drop && drop->p > 0.0f) ? drop : NULL;
    if (j->drop) MTC_ASSERT(j->drop->p < 1.0f);
    j->scale = s->scale != 0.0f ? s->scale : 1.0f / sqrtf((float)s->HS);
    j->nqb = (s->T + FA_BR - 1) / FA_BR;
    j->nkb = (s->Tk + FA_BC - 1) / FA_BC;
    j->G = s->NH / s->NKV;
}

void nn_attention_forward(nn_pool *pool, float *out, float *lse, const float *q, const float *k,
                          const float *v, const nn_attention_shape *s,
                          const nn_dropout_spec *drop) {
    fa_job j = {.out = out, .lse = lse, .q = q, .k = k, .v = v};
    fa_job_init(&j, s, drop);
    nn_pool_run(pool, s->B * s->NH * j.nqb, fa_fwd_item, &j);
}

/* ---- backward ---- */

static void fa_zero_rows(float *x, int rows, int ld, int HS) {
    for (int r = 0; r < rows; r++)
        memset(x + (size_t)r * ld, 0, (size_t)HS * sizeof(float));
}

static void fa_bwd_item(int idx, void *vp) {
    const fa_job *j = vp;
    const nn_attention_shape *s = j->s;
    int NH = s->NH, HS = s->HS, T = s->T, Tk = s->Tk, G = j->G;
    int b = idx / s->NKV, kvh = idx % s->NKV;
    size_t kofs = (size_t)kvh * HS;
    const float *K = j->k + (size_t)b * Tk * s->ldk + kofs;
    const float *V = j->v + (size_t)b * Tk * s->ldv + kofs;
    float *dK = j->dk ? j->dk + (size_t)b * Tk * s->ldk + kofs : NULL;
    float *dV = j->dv ? j->dv + (size_t)b * Tk * s->ldv + kofs : NULL;
    if (!s->accumulate) {
        if (dK) fa_zero_rows(dK, Tk, s->ldk, HS);
        if (dV) fa_zero_rows(dV, Tk, s->ldv, HS);
        if (j->dq)
            for (int g = 0; g < G; g++)
                fa_zero_rows(j->dq + (size_t)b * T * s->ldq + (size_t)(kvh * G + g) * HS, T, s->ldq,
                             HS);
    }
    float P[FA_BR * FA_BC], dP[FA_BR * FA_BC], A[FA_BR * FA_BC], mask[FA_BC], D[FA_BR];
    float Kt[FA_HS_MAX * FA_BC], Vt[FA_HS_MAX * FA_BC];
    int packed = HS <= FA_HS_MAX;
    int qp[FA_BR];
    for (int kb = 0; kb < j->nkb; kb++) {
        int j0 = kb * FA_BC, kw = Tk - j0 < FA_BC ? Tk - j0 : FA_BC, klo, khi;
        fa_span(s, 1, j0, kw, &klo, &khi);
        const float *Kj = K + (size_t)j0 * s->ldk, *Vj = V + (size_t)j0 * s->ldv;
        if (packed) fa_pack_t(Kt, Kj, s->ldk, kw, HS), fa_pack_t(Vt, Vj, s->ldv, kw, HS);
        for (int qb = 0; qb < j->nqb; qb++) {
            int i0 = qb * FA_BR, rows = T - i0 < FA_BR ? T - i0 : FA_BR, qlo, qhi;
            fa_span(s, 0, i0, rows, &qlo, &qhi);
            if (klo > qhi) continue;
            int full = khi <= qlo;
            for (int r = 0; r < rows; r++)
                qp[r] = fa_qpos(s, i0 + r);
            for (int g = 0; g < G; g++) {
                int h = kvh * G + g;
                size_t qrow = ((size_t)b * T + i0), hofs = (size_t)h * HS;
                const float *Qi = j->q + qrow * s->ldq + hofs;
                const float *Oi = j->o + qrow * s->ldo + hofs;
                const float *dOi = j->dout + qrow * s->ldo + hofs;
                const float *L = j->clse + ((size_t)b * NH + h) * T + i0;
                if (packed) {
                    fa_gemm(rows, kw, HS, j->scale, Qi, s->ldq, 1, Kt, FA_BC, P, FA_BC, 0);
                    fa_gemm(rows, kw, HS, 1.0f, dOi, s->ldo, 1, Vt, FA_BC, dP, FA_BC, 0);
                } else {
                    nn_blas_sgemm(0, 1, rows, kw, HS, j->scale, Qi, s->ldq, Kj, s->ldk, 0.0f, P,
                                  FA_BC);
                    nn_blas_sgemm(0, 1, rows, kw, HS, 1.0f, dOi, s->ldo, Vj, s->ldv, 0.0f, dP,
                                  FA_BC);
                }
                for (int r = 0; r < rows; r++) {
                    float *prow = P + r * FA_BC, *drow = dP + r * FA_BC;
                    if (L[r] == -INFINITY) { /* the row sees no key: P = 0, no NaN */
                        memset(prow, 0, (size_t)kw * sizeof(float));
                        memset(drow, 0, (size_t)kw * sizeof(float));
                        if (j->drop) memset(A + r * FA_BC, 0, (size_t)kw * sizeof(float));
                        continue;
                    }
                    int n = full ? kw : fa_visible(s, prow, qp[r], j0, kw);
                    int nv = n < 0 ? kw : n;
                    nn_vexp_sum(prow, prow, nv, L[r]);
                    if (n < 0)
                        fa_zero_invisible(s, prow, qp[r], j0, kw);
                    else if (n < kw)
                        memset(prow + n, 0, (size_t)(kw - n) * sizeof(float));
                    if (j->drop) {
                        fa_mask_run(mask, j, b, h, i0 + r, j0, kw);
                        fa_mul(A + r * FA_BC, prow, mask, kw);
                        fa_mul(drow, drow, mask, kw);
                    }
                    D[r] = fa_dot(dOi + (size_t)r * s->ldo, Oi + (size_t)r * s->ldo, HS);
                    fa_softmax_bwd(drow, prow, D[r], kw);
                }
                if (dV) /* dV_j += Aᵀ dO_i */
                    fa_gemm(kw, HS, rows, 1.0f, j->drop ? A : P, 1, FA_BC, dOi, s->ldo,
                            dV + (size_t)j0 * s->ldv, s->ldv, 1);
                if (dK) /* dK_j += scale dSᵀ Q_i */
                    fa_gemm(kw, HS, rows, j->scale, dP, 1, FA_BC, Qi, s->ldq,
                            dK + (size_t)j0 * s->ldk, s->ldk, 1);
                if (j->dq) /* dQ_i += scale dS K_j */
                    fa_gemm(rows, HS, kw, j->scale, dP, FA_BC, 1, Kj, s->ldk,
                            j->dq + qrow * s->ldq + hofs, s->ldq, 1);
            }
        }
    }
}

void nn_attention_backward(nn_pool *pool, float *dq, float *dk, float *dv, const float *dout,
                           const float *q, const float *k, const float *v, const float *out,
                           const float *lse, const nn_attention_shape *s,
                           const nn_dropout_spec *drop) {
    fa_job j = {
        .dq = dq, .dk = dk, .dv = dv, .dout = dout, .q = q, .k = k, .v = v, .o = out, .clse = lse};
    fa_job_init(&j, s, drop);
    nn_pool_run(pool, s->B * s->NKV, fa_bwd_item, &j);
}

/* ---- merging partial results ---- */

typedef struct {
    float *out, *lse;
    const float *op, *lp;
    int B, T, NH, HS, ldo, tiles;
} fa_merge_job;

static void fa_merge_range(int i, void *vp) {
    const fa_merge_job *mj = vp;
    size_t lo, hi, N = (size_t)mj->B * mj->T;
    nn_split_range(N, mj->tiles, i, 1, &lo, &hi);
    for (size_t row = lo; row < hi; row++) {
        size_t b = row / (size_t)mj->T, t = row % (size_t)mj->T;
        for (int h = 0; h < mj->NH; h++) {
            size_t li = (b * mj->NH + h) * mj->T + t;
            float a = mj->lse[li], c = mj->lp[li], mx = a > c ? a : c;
            if (mx == -INFINITY) continue; /* neither part saw a key: out stays 0 */
            float wa = expf(a - mx), wc = expf(c - mx), sum = wa + wc;
            float *o = mj->out + row * mj->ldo + (size_t)h * mj->HS;
            const float *p = mj->op + row * mj->ldo + (size_t)h * mj->HS;
            mj->lse[li] = mx + logf(sum);
            if (c == -INFINITY) continue; /* nothing to add (and out_part may be anything) */
            if (a == -INFINITY) {         /* out had no key: take the part as it is */
                memcpy(o, p, (size_t)mj->HS * sizeof(float));
                continue;
            }
            float fa = wa / sum, fc = wc / sum;
            for (int e = 0; e < mj->HS; e++)
                o[e] = o[e] * fa + p[e] * fc;
        }
    }
}

void nn_attention_merge(nn_pool *pool, float *out, float *lse, const float *out_part,
                        const float *lse_part, int B, int T, int NH, int HS, int ldo) {
    fa_merge_job mj = {out, lse, out_part, lse_part, B, T, NH, HS, ldo, 0};
    mj.tiles = nn_split_count((size_t)B * T, 256);
    nn_pool_run(pool, mj.tiles, fa_merge_range, &mj);
}
