/* nn/layers.c - the elementwise and row-wise kernels: embeddings,
 * layernorm, GELU, residual, dropout (and its counter-based mask).
 *
 * Dropout masks come from nn_dropout_scale_run (rng_run.c), which equals
 * core/rng.h's mtc_rng_uniform element by element (tested).
 * Row and element ranges are split by size only, so results never depend on
 * the pool size. Column reductions (layernorm dw/db) run over rows in order
 * inside a column block. Does not allocate. */
#include <math.h>
#include <string.h>

#include "core/log.h"
#include "nn/nn.h"
#include "nn/nn_internal.h"

/* ---- embeddings --------------------------------------------------------------- */

void nn_token_embedding_forward(float *out, const int *tokens, const float *wte, int vocab_start,
                                int V_local, int N, int C) {
    for (int n = 0; n < N; n++) {
        int t = tokens[n] - vocab_start;
        float *o = out + (size_t)n * C;
        if (t >= 0 && t < V_local)
            memcpy(o, wte + (size_t)t * C, (size_t)C * sizeof(float));
        else
            memset(o, 0, (size_t)C * sizeof(float));
    }
}

void nn_token_embedding_backward(float *dwte, const float *dout, const int *tokens, int vocab_start,
                                 int V_local, int N, int C) {
    for (int n = 0; n < N; n++) {
        int t = tokens[n] - vocab_start;
        if (t < 0 || t >= V_local) continue;
        float *d = dwte + (size_t)t * C;
        const float *g = dout + (size_t)n * C;
        for (int c = 0; c < C; c++)
            d[c] += g[c];
    }
}

void nn_position_embedding_forward(float *out, const float *wpe, const int *pos, int B, int T,
                                   int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *w = wpe + (size_t)(pos ? pos[t] : t) * C;
            float *o = out + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++)
                o[c] += w[c];
        }
}

void nn_position_embedding_backward(float *dwpe, const float *dout, const int *pos, int B, int T,
                                    int C) {
    for (int t = 0; t < T; t++) {
        float *d = dwpe + (size_t)(pos ? pos[t] : t) * C;
        for (int b = 0; b < B; b++) {
            const float *g = dout + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++)
                d[c] += g[c];
        }
    }
}

/* ---- layernorm -------------------------------------------------------------------- */

typedef struct {
    float *out, *mean, *rstd, *dinp, *dw, *db;
    const float *inp, *w, *b, *dout;
    const float *cmean, *crstd;
    float eps;
    int N, C, tiles;
} ln_job;

static void ln_fwd_tile(int i, void *vp) {
    const ln_job *j = vp;
    size_t lo, hi;
    nn_split_range((size_t)j->N, j->tiles, i, 1, &lo, &hi);
    int C = j->C, C8 = C & ~7;
    for (size_t r = lo; r < hi; r++) {
        const float *x = j->inp + r * C;
        float *o = j->out + r * C;
        nn_v8 s8 = NN_V8_SET1(0.0f);
        for (int c = 0; c < C8; c += 8)
            s8 += NN_V8_LD(x + c);
        float s = NN_V8_HSUM(s8);
        for (int c = C8; c < C; c++)
            s += x[c];
        float m = s / C;
        nn_v8 v8 = NN_V8_SET1(0.0f);
        for (int c = 0; c < C8; c += 8) {
            nn_v8 d = NN_V8_LD(x + c) - m;
            v8 += d * d;
        }
        float v = NN_V8_HSUM(v8);
        for (int c = C8; c < C; c++)
            v += (x[c] - m) * (x[c] - m);
        float rs = 1.0f / sqrtf(v / C + j->eps);
        for (int c = 0; c < C8; c += 8)
            NN_V8_ST(o + c, (NN_V8_LD(x + c) - m) * rs * NN_V8_LD(j->w + c) + NN_V8_LD(j->b + c));
        for (int c = C8; c < C; c++)
            o[c] = (x[c] - m) * rs * j->w[c] + j->b[c];
        if (j->mean) j->mean[r] = m;
        if (j->rstd) j->rstd[r] = rs;
    }
}

void nn_layernorm_forward(nn_pool *pool, float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int N, int C) {
    nn_layernorm_forward_eps(pool, out, mean, rstd, inp, w, b, 1e-5f, N, C);
}

void nn_layernorm_forward_eps(nn_pool *pool, float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, float eps, int N, int C) {
    ln_job j = {.out = out,
                .mean = mean,
                .rstd = rstd,
                .inp = inp,
                .w = w,
                .b = b,
                .eps = eps,
                .N = N,
                .C = C};
    j.tiles = nn_split_count((size_t)N * C, 16384);
    if (j.tiles > N) j.tiles = N;
    nn_pool_run(pool, j.tiles, ln_fwd_tile, &j);
}

/* dinp rows: dinp = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)),
 * dnorm = w * dout, norm = (x - mean) * rstd. */
static void ln_bwd_rows(int i, void *vp) {
    const ln_job *j = vp;
    size_t lo, hi;
    nn_split_range((size_t)j->N, j->tiles, i, 1, &lo, &hi);
    int C = j->C, C8 = C & ~7;
    const float *w = j->w;
    for (size_t r = lo; r < hi; r++) {
        const float *x = j->inp + r * C, *g = j->dout + r * C;
        float m = j->cmean[r], rs = j->crstd[r];
        nn_v8 a1 = NN_V8_SET1(0.0f), a2 = NN_V8_SET1(0.0f);
        for (int c = 0; c < C8; c += 8) {
            nn_v8 dn = NN_V8_LD(w + c) * NN_V8_LD(g + c);
            a1 += dn;
            a2 += dn * ((NN_V8_LD(x + c) - m) * rs);
        }
        float s1 = NN_V8_HSUM(a1), s2 = NN_V8_HSUM(a2);
        for (int c = C8; c < C; c++) {
            float dn = w[c] * g[c];
            s1 += dn;
            s2 += dn * ((x[c] - m) * rs);
        }
        s1 /= C;
        s2 /= C;
        float *d = j->dinp + r * C;
        for (int c = 0; c < C8; c += 8) {
            nn_v8 dn = NN_V8_LD(w + c) * NN_V8_LD(g + c);
            NN_V8_ST(d + c, rs * (dn - s1 - ((NN_V8_LD(x + c) - m) * rs) * s2));
        }
        for (int c = C8; c < C; c++)
            d[c] = rs * (w[c] * g[c] - s1 - ((x[c] - m) * rs) * s2);
    }
}

/* dw[c] += sum_r dout * norm, db[c] += sum_r dout, rows in order. Lanes are
 * columns, so vectors do not reorder any sum. */
static void ln_bwd_cols(int i, void *vp) {
    const ln_job *j = vp;
    size_t lo, hi;
    nn_split_range((size_t)j->C, j->tiles, i, 16, &lo, &hi);
    nn_v8 aw[16], ab[16];
    float tw[8], tb[8];
    for (size_t c0 = lo; c0 < hi; c0 += 128) {
        size_t w = hi - c0 < 128 ? hi - c0 : 128, w8 = w / 8;
        for (size_t q = 0; q < 16; q++)
            aw[q] = ab[q] = NN_V8_SET1(0.0f);
        memset(tw, 0, sizeof tw);
        memset(tb, 0, sizeof tb);
        for (int r = 0; r < j->N; r++) {
            const float *x = j->inp + (size_t)r * j->C + c0, *g = j->dout + (size_t)r * j->C + c0;
            float m = j->cmean[r], rs = j->crstd[r];
            for (size_t q = 0; q < w8; q++) {
                nn_v8 gv = NN_V8_LD(g + 8 * q);
                aw[q] += gv * ((NN_V8_LD(x + 8 * q) - m) * rs);
                ab[q] += gv;
            }
            for (size_t c = 8 * w8; c < w; c++) {
                tw[c - 8 * w8] += g[c] * ((x[c] - m) * rs);
                tb[c - 8 * w8] += g[c];
            }
        }
        for (size_t c = 0; c < w; c++) {
            float sw = c < 8 * w8 ? aw[c / 8][c % 8] : tw[c - 8 * w8];
            float sb = c < 8 * w8 ? ab[c / 8][c % 8] : tb[c - 8 * w8];
            if (j->dw) j->dw[c0 + c] += sw;
            if (j->db) j->db[c0 + c] += sb;
        }
    }
}

void nn_layernorm_backward(nn_pool *pool, float *dinp, float *dw, float *db, const float *dout,
                           const float *inp, const float *w, const float *mean, const float *rstd,
                           int N, int C) {
    ln_job j = {.dinp = dinp,
                .dw = dw,
                .db = db,
                .dout = dout,
                .inp = inp,
                .w = w,
                .cmean = mean,
                .crstd = rstd,
                .N = N,
                .C = C};
    if (dinp && N > 0) {
        j.tiles = nn_split_count((size_t)N * C, 16384);
        if (j.tiles > N) j.tiles = N;
        nn_pool_run(pool, j.tiles, ln_bwd_rows, &j);
    }
    if ((dw || db) && N > 0) {
        j.tiles = nn_split_count((size_t)C, 64);
        nn_pool_run(pool, j.tiles, ln_bwd_cols, &j);
    }
}

/* ---- GELU ------------------------------------------------------------------------- */

#define EW_GRAIN 16384

typedef struct {
    float *out;
    const float *inp, *dout;
    size_t n;
    int tiles;
} ew_job;

static void gelu_fwd_tile(int i, void *vp) {
    const ew_job *j = vp;
    size_t lo, hi;
    nn_split_range(j->n, j->tiles, i, 16, &lo, &hi);
    nn_vgelu(j->out + lo, j->inp + lo, hi - lo);
}

static void gelu_bwd_tile(int i, void *vp) {
    const ew_job *j = vp;
    size_t lo, hi;
    nn_split_range(j->n, j->tiles, i, 16, &lo, &hi);
    nn_vgelu_backward(j->out + lo, j->inp + lo, j->dout + lo, hi - lo);
}

void nn_gelu_forward(nn_pool *pool, float *out, const float *inp, size_t n) {
    ew_job j = {out, inp, NULL, n, nn_split_count(n, EW_GRAIN)};
    nn_pool_run(pool, j.tiles, gelu_fwd_tile, &j);
}

void nn_gelu_backward(nn_pool *pool, float *dinp, const float *inp, const float *dout, size_t n) {
    ew_job j = {dinp, inp, dout, n, nn_split_count(n, EW_GRAIN)};
    nn_pool_run(pool, j.tiles, gelu_bwd_tile, &j);
}

/* ---- residual ----------------------------------------------------------------------- */

void nn_residual_forward(float *out, const float *a, const float *b, size_t n) {
    size_t k = 0;
    for (; k + 8 <= n; k += 8)
        NN_V8_ST(out + k, NN_V8_LD(a + k) + NN_V8_LD(b + k));
    for (; k < n; k++)
        out[k] = a[k] + b[k];
}

/* ---- dropout --------------------------------------------------------------------------- */

/* out = inp * mask/(1-p); the same code serves forward and backward. */
static void dropout_apply(float *out, const float *inp, int B, int T, int C,
                          const nn_dropout_spec *s) {
    if (!s || s->p <= 0.0f) {
        if (out != inp) memmove(out, inp, (size_t)B * T * C * sizeof(float));
        return;
    }
    MTC_ASSERT(s->p < 1.0f);
    int Tg = s->Tg > 0 ? s->Tg : T;
    int Cg = s->Cg > 0 ? s->Cg : C;
    float m[512];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int pos = s->tpos ? s->tpos[t] : s->t0 + t;
            uint64_t g0 = ((uint64_t)(s->b0 + b) * Tg + pos) * Cg + s->c0;
            size_t off = ((size_t)b * T + t) * C;
            for (int c0 = 0; c0 < C; c0 += 512) {
                int w = C - c0 < 512 ? C - c0 : 512;
                nn_dropout_scale_run(m, (size_t)w, s, g0 + c0);
                int c = 0;
                for (; c + 8 <= w; c += 8)
                    NN_V8_ST(out + off + c0 + c, NN_V8_LD(inp + off + c0 + c) * NN_V8_LD(m + c));
                for (; c < w; c++)
                    out[off + c0 + c] = inp[off + c0 + c] * m[c];
            }
        }
}

void nn_dropout_forward(float *out, const float *inp, int B, int T, int C,
                        const nn_dropout_spec *spec) {
    dropout_apply(out, inp, B, T, C, spec);
}

void nn_dropout_backward(float *dinp, const float *dout, int B, int T, int C,
                         const nn_dropout_spec *spec) {
    dropout_apply(dinp, dout, B, T, C, spec);
}
