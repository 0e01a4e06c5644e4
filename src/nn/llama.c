/* nn/llama.c - RMSNorm, rotary position embedding and SwiGLU (llama.h).
 *
 * Relies on nn_internal.h's 8-float vectors and size-only work splitting,
 * and on vmath.c's exp (nn_vexp_sum), so SwiGLU's exp is the softmax's and
 * an element's value never depends on where it sits in its row (a tensor-
 * parallel shard computes the serial run's bits).
 * Rows are split by size only; RMSNorm's dw runs over rows in order inside
 * a column block, so no result depends on the pool size.
 * Limitations: the RoPE tables are float32 like Megatron's and Hugging
 * Face's, and unscaled (no Llama-3.x rope scaling, no YaRN, no
 * seq_len_interpolation_factor). Allocates only in nn_rope_table_init. */
#include "nn/llama.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "nn/nn_internal.h"

#define ROW_GRAIN 16384 /* floats per tile */

static int row_tiles(int N, size_t per_row) {
    int k = nn_split_count((size_t)N * per_row, ROW_GRAIN);
    return k > N ? (N > 0 ? N : 1) : k;
}

/* ---- RMSNorm ---------------------------------------------------------------------- */

typedef struct {
    float *out, *rstd, *dinp, *dw;
    const float *inp, *w, *dout, *crstd;
    float eps;
    int N, C, tiles;
} rms_job;

static void rms_fwd_tile(int i, void *vp) {
    const rms_job *j = vp;
    size_t lo, hi;
    nn_split_range((size_t)j->N, j->tiles, i, 1, &lo, &hi);
    int C = j->C, C8 = C & ~7;
    for (size_t r = lo; r < hi; r++) {
        const float *x = j->inp + r * C;
        float *o = j->out + r * C;
        nn_v8 s8 = NN_V8_SET1(0.0f);
        for (int c = 0; c < C8; c += 8) {
            nn_v8 v = NN_V8_LD(x + c);
            s8 += v * v;
        }
        float s = NN_V8_HSUM(s8);
        for (int c = C8; c < C; c++)
            s += x[c] * x[c];
        float rs = 1.0f / sqrtf(s / C + j->eps);
        for (int c = 0; c < C8; c += 8)
            NN_V8_ST(o + c, (NN_V8_LD(x + c) * rs) * NN_V8_LD(j->w + c));
        for (int c = C8; c < C; c++)
            o[c] = (x[c] * rs) * j->w[c];
        if (j->rstd) j->rstd[r] = rs;
    }
}

void nn_rmsnorm_forward(nn_pool *pool, float *out, float *rstd, const float *inp, const float *w,
                        float eps, int N, int C) {
    if (N <= 0) return;
    rms_job j = {.out = out, .rstd = rstd, .inp = inp, .w = w, .eps = eps, .N = N, .C = C};
    j.tiles = row_tiles(N, (size_t)C);
    nn_pool_run(pool, j.tiles, rms_fwd_tile, &j);
}

/* dinp = rstd * (dn - norm * mean(dn * norm)), dn = w * dout, norm = x * rstd */
static void rms_bwd_rows(int i, void *vp) {
    const rms_job *j = vp;
    size_t lo, hi;
    nn_split_range((size_t)j->N, j->tiles, i, 1, &lo, &hi);
    int C = j->C, C8 = C & ~7;
    const float *w = j->w;
    for (size_t r = lo; r < hi; r++) {
        const float *x = j->inp + r * C, *g = j->dout + r * C;
        float rs = j->crstd[r];
        nn_v8 a8 = NN_V8_SET1(0.0f);
        for (int c = 0; c < C8; c += 8)
            a8 += (NN_V8_LD(w + c) * NN_V8_LD(g + c)) * (NN_V8_LD(x + c) * rs);
        float s = NN_V8_HSUM(a8);
        for (int c = C8; c < C; c++)
            s += (w[c] * g[c]) * (x[c] * rs);
        s /= C;
        float *d = j->dinp + r * C;
        for (int c = 0; c < C8; c += 8) {
            nn_v8 dn = NN_V8_LD(w + c) * NN_V8_LD(g + c);
            NN_V8_ST(d + c, rs * (dn - (NN_V8_LD(x + c) * rs) * s));
        }
        for (int c = C8; c < C; c++)
            d[c] = rs * (w[c] * g[c] - (x[c] * rs) * s);
    }
}

/* dw[c] += sum_r dout * norm, rows in order; lanes are columns. */
static void rms_bwd_cols(int i, void *vp) {
    const rms_job *j = vp;
    size_t lo, hi;
    nn_split_range((size_t)j->C, j->tiles, i, 16, &lo, &hi);
    nn_v8 aw[16];
    float tw[8];
    for (size_t c0 = lo; c0 < hi; c0 += 128) {
        size_t w = hi - c0 < 128 ? hi - c0 : 128, w8 = w / 8;
        for (size_t q = 0; q < 16; q++)
            aw[q] = NN_V8_SET1(0.0f);
        memset(tw, 0, sizeof tw);
        for (int r = 0; r < j->N; r++) {
            const float *x = j->inp + (size_t)r * j->C + c0, *g = j->dout + (size_t)r * j->C + c0;
            float rs = j->crstd[r];
            for (size_t q = 0; q < w8; q++)
                aw[q] += NN_V8_LD(g + 8 * q) * (NN_V8_LD(x + 8 * q) * rs);
            for (size_t c = 8 * w8; c < w; c++)
                tw[c - 8 * w8] += g[c] * (x[c] * rs);
        }
        for (size_t c = 0; c < w; c++)
            j->dw[c0 + c] += c < 8 * w8 ? aw[c / 8][c % 8] : tw[c - 8 * w8];
    }
}

void nn_rmsnorm_backward(nn_pool *pool, float *dinp, float *dw, const float *dout, const float *inp,
                         const float *w, const float *rstd, int N, int C) {
    if (N <= 0) return;
    rms_job j = {
        .dinp = dinp, .dw = dw, .dout = dout, .inp = inp, .w = w, .crstd = rstd, .N = N, .C = C};
    /* dw first: dinp may alias dout */
    if (dw) {
        j.tiles = nn_split_count((size_t)C, 64);
        nn_pool_run(pool, j.tiles, rms_bwd_cols, &j);
    }
    if (dinp) {
        j.tiles = row_tiles(N, (size_t)C);
        nn_pool_run(pool, j.tiles, rms_bwd_rows, &j);
    }
}

/* ---- rotary position embedding ------------------------------------------------------ */

mtc_result_t nn_rope_table_init(nn_rope_table *tab, int max_pos, int HS, float rotary_percent,
                                float base, int interleaved) {
    memset(tab, 0, sizeof *tab);
    if (max_pos < 1)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "rope: max positions %d must be >= 1 (use the sequence length)", max_pos);
    if (HS < 2) return mtc_error(MTC_ERR_INVALID_ARGUMENT, "rope: head size %d must be >= 2", HS);
    if (!(rotary_percent > 0.0f && rotary_percent <= 1.0f))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "rotary-percent=%g must be in (0, 1] (1.0 rotates every channel)",
                         (double)rotary_percent);
    /* Megatron: dim = int(kv_channels * rotary_percent) when rotary_percent < 1 */
    int rot = rotary_percent < 1.0f ? (int)((double)HS * (double)rotary_percent) : HS;
    if (rot < 2 || rot % 2)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "rotary-percent=%g of head size %d gives %d rotary channels; it must give "
                         "an even number >= 2",
                         (double)rotary_percent, HS, rot);
    if (!(base > 1.0f))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "rotary-base=%g must be > 1 (default 10000)",
                         (double)base);
    int h2 = rot / 2;
    size_t n = (size_t)max_pos * h2;
    tab->cos = malloc(n * sizeof(float));
    tab->sin = malloc(n * sizeof(float));
    float *inv = malloc((size_t)h2 * sizeof(float));
    if (!tab->cos || !tab->sin || !inv) {
        free(inv);
        nn_rope_table_free(tab);
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "rope: no memory for a %d x %d table", max_pos, h2);
    }
    /* torch: 1.0 / (base ** (arange(0, rot, 2, float32) / rot)), all in float32;
     * the power in double rounded once (correctly rounded where torch's is) */
    for (int i = 0; i < h2; i++) {
        float e = (float)(2 * i) / (float)rot;
        inv[i] = 1.0f / (float)pow((double)base, (double)e);
    }
    for (int p = 0; p < max_pos; p++)
        for (int i = 0; i < h2; i++) {
            float a = (float)p * inv[i]; /* torch.outer(seq, inv_freq) in float32 */
            tab->cos[(size_t)p * h2 + i] = (float)cos((double)a);
            tab->sin[(size_t)p * h2 + i] = (float)sin((double)a);
        }
    free(inv);
    tab->max_pos = max_pos;
    tab->HS = HS;
    tab->rot = rot;
    tab->interleaved = interleaved ? 1 : 0;
    tab->base = base;
    return MTC_OK;
}

void nn_rope_table_free(nn_rope_table *tab) {
    if (!tab) return;
    free(tab->cos);
    free(tab->sin);
    memset(tab, 0, sizeof *tab);
}

#if defined(__clang__)
#define NN_V8_SWAP_PAIRS(v) __builtin_shufflevector((v), (v), 1, 0, 3, 2, 5, 4, 7, 6)
#else
#define NN_V8_SWAP_PAIRS(v) __builtin_shuffle((v), (nn_v8i){1, 0, 3, 2, 5, 4, 7, 6})
#endif

typedef struct {
    float *out;
    const float *inp;
    const nn_rope_table *tab;
    const int *pos;
    int t0, B, T, NH, HS, stride, tiles;
    float sgn; /* +1 forward, -1 backward (the inverse rotation: sin negated) */
} rope_job;

/* One head: x, o (HS); c, s (rot/2) for its position. */
static void rope_head(float *o, const float *x, const float *c, const float *s, float sgn, int h2,
                      int interleaved) {
    if (!interleaved) {
        int i = 0;
        for (; i + 8 <= h2; i += 8) {
            nn_v8 x1 = NN_V8_LD(x + i), x2 = NN_V8_LD(x + h2 + i);
            nn_v8 cv = NN_V8_LD(c + i), sv = NN_V8_LD(s + i) * sgn;
            NN_V8_ST(o + i, x1 * cv - x2 * sv);
            NN_V8_ST(o + h2 + i, x2 * cv + x1 * sv);
        }
        for (; i < h2; i++) {
            float x1 = x[i], x2 = x[h2 + i], si = s[i] * sgn;
            o[i] = x1 * c[i] - x2 * si;
            o[h2 + i] = x2 * c[i] + x1 * si;
        }
    } else {
        int i = 0;
        /* 4 pairs per vector: o = x * (c0 c0 c1 c1 ..) + (x1 x0 x3 x2 ..) * (-s0 s0 -s1 s1 ..),
         * the scalar loop's products and sums exactly (a + (-b) is a - b) */
        const nn_v8 alt = {-1.0f, 1.0f, -1.0f, 1.0f, -1.0f, 1.0f, -1.0f, 1.0f};
        for (; i + 4 <= h2; i += 4) {
            const float *cq = c + i, *sq = s + i;
            nn_v8 xv = NN_V8_LD(x + 2 * i);
            nn_v8 cv = {cq[0], cq[0], cq[1], cq[1], cq[2], cq[2], cq[3], cq[3]};
            nn_v8 sv = {sq[0], sq[0], sq[1], sq[1], sq[2], sq[2], sq[3], sq[3]};
            sv *= sgn;
            NN_V8_ST(o + 2 * i, xv * cv + NN_V8_SWAP_PAIRS(xv) * (sv * alt));
        }
        for (; i < h2; i++) {
            float x1 = x[2 * i], x2 = x[2 * i + 1], si = s[i] * sgn;
            o[2 * i] = x1 * c[i] - x2 * si;
            o[2 * i + 1] = x2 * c[i] + x1 * si;
        }
    }
}

static void rope_tile(int i, void *vp) {
    const rope_job *j = vp;
    const nn_rope_table *tab = j->tab;
    size_t lo, hi;
    nn_split_range((size_t)j->B * j->T, j->tiles, i, 1, &lo, &hi);
    int h2 = tab->rot / 2, rot = tab->rot, HS = j->HS;
    for (size_t r = lo; r < hi; r++) {
        int t = (int)(r % (size_t)j->T);
        int p = j->pos ? j->pos[t] : j->t0 + t;
        MTC_ASSERT(p >= 0 && p < tab->max_pos);
        const float *c = tab->cos + (size_t)p * h2, *s = tab->sin + (size_t)p * h2;
        for (int h = 0; h < j->NH; h++) {
            size_t off = r * (size_t)j->stride + (size_t)h * HS;
            rope_head(j->out + off, j->inp + off, c, s, j->sgn, h2, tab->interleaved);
            if (j->out != j->inp && rot < HS)
                memcpy(j->out + off + rot, j->inp + off + rot, (size_t)(HS - rot) * sizeof(float));
        }
    }
}

static void rope_apply(nn_pool *pool, float *out, const float *inp, const nn_rope_table *tab,
                       const int *pos, int t0, int B, int T, int NH, int HS, int stride,
                       float sgn) {
    MTC_ASSERT(tab && tab->cos && tab->rot <= HS && stride >= NH * HS);
    if (B <= 0 || T <= 0 || NH <= 0) return;
    rope_job j = {.out = out,
                  .inp = inp,
                  .tab = tab,
                  .pos = pos,
                  .t0 = t0,
                  .B = B,
                  .T = T,
                  .NH = NH,
                  .HS = HS,
                  .stride = stride,
                  .sgn = sgn};
    j.tiles = row_tiles(B * T, (size_t)NH * HS);
    nn_pool_run(pool, j.tiles, rope_tile, &j);
}

void nn_rope_forward(nn_pool *pool, float *out, const float *inp, const nn_rope_table *tab,
                     const int *pos, int t0, int B, int T, int NH, int HS, int stride) {
    rope_apply(pool, out, inp, tab, pos, t0, B, T, NH, HS, stride, 1.0f);
}

void nn_rope_backward(nn_pool *pool, float *dinp, const float *dout, const nn_rope_table *tab,
                      const int *pos, int t0, int B, int T, int NH, int HS, int stride) {
    rope_apply(pool, dinp, dout, tab, pos, t0, B, T, NH, HS, stride, -1.0f);
}

/* ---- SwiGLU ------------------------------------------------------------------------- */

#define SWIGLU_CHUNK 256

typedef struct {
    float *out;
    const float *inp, *dout;
    int N, F, tiles;
} swiglu_job;

/* e[k] = exp(-g[k]) through vmath's exp (the sum it returns is not needed) */
static void neg_exp(float *e, const float *g, int n) {
    int k = 0;
    for (; k + 8 <= n; k += 8)
        NN_V8_ST(e + k, -NN_V8_LD(g + k));
    for (; k < n; k++)
        e[k] = -g[k];
    (void)nn_vexp_sum(e, e, n, 0.0f);
}

static void swiglu_fwd_tile(int i, void *vp) {
    const swiglu_job *j = vp;
    size_t lo, hi;
    nn_split_range((size_t)j->N, j->tiles, i, 1, &lo, &hi);
    int F = j->F;
    float e[SWIGLU_CHUNK];
    const nn_v8 one = NN_V8_SET1(1.0f);
    for (size_t r = lo; r < hi; r++) {
        const float *gate = j->inp + r * 2 * F, *up = gate + F;
        float *o = j->out + r * F;
        for (int f0 = 0; f0 < F; f0 += SWIGLU_CHUNK) {
            int w = F - f0 < SWIGLU_CHUNK ? F - f0 : SWIGLU_CHUNK;
            const float *g = gate + f0, *u = up + f0;
            neg_exp(e, g, w);
            int k = 0;
            for (; k + 8 <= w; k += 8) /* torch: silu(g) = g / (1 + exp(-g)), then * up */
                NN_V8_ST(o + f0 + k, (NN_V8_LD(g + k) / (one + NN_V8_LD(e + k))) * NN_V8_LD(u + k));
            for (; k < w; k++)
                o[f0 + k] = (g[k] / (1.0f + e[k])) * u[k];
        }
    }
}

/* dgate = (dout * up) * sig * (1 + g (1 - sig)) (torch's silu backward),
 * dup = dout * silu(g), sig = 1 / (1 + exp(-g)). */
static void swiglu_bwd_tile(int i, void *vp) {
    const swiglu_job *j = vp;
    size_t lo, hi;
    nn_split_range((size_t)j->N, j->tiles, i, 1, &lo, &hi);
    int F = j->F;
    float e[SWIGLU_CHUNK];
    const nn_v8 one = NN_V8_SET1(1.0f);
    for (size_t r = lo; r < hi; r++) {
        const float *gate = j->inp + r * 2 * F, *up = gate + F, *dy = j->dout + r * F;
        float *dg = j->out + r * 2 * F, *du = dg + F;
        for (int f0 = 0; f0 < F; f0 += SWIGLU_CHUNK) {
            int w = F - f0 < SWIGLU_CHUNK ? F - f0 : SWIGLU_CHUNK;
            const float *g = gate + f0, *u = up + f0, *d = dy + f0;
            neg_exp(e, g, w);
            int k = 0;
            for (; k + 8 <= w; k += 8) {
                nn_v8 gv = NN_V8_LD(g + k), uv = NN_V8_LD(u + k), dv = NN_V8_LD(d + k);
                nn_v8 den = one + NN_V8_LD(e + k), sig = one / den;
                NN_V8_ST(du + f0 + k, dv * (gv / den));
                NN_V8_ST(dg + f0 + k, ((dv * uv) * sig) * (one + gv * (one - sig)));
            }
            for (; k < w; k++) {
                float den = 1.0f + e[k], sig = 1.0f / den;
                du[f0 + k] = d[k] * (g[k] / den);
                dg[f0 + k] = ((d[k] * u[k]) * sig) * (1.0f + g[k] * (1.0f - sig));
            }
        }
    }
}

void nn_swiglu_forward(nn_pool *pool, float *out, const float *inp, int N, int F) {
    if (N <= 0 || F <= 0) return;
    swiglu_job j = {.out = out, .inp = inp, .N = N, .F = F, .tiles = row_tiles(N, (size_t)F)};
    nn_pool_run(pool, j.tiles, swiglu_fwd_tile, &j);
}

void nn_swiglu_backward(nn_pool *pool, float *dinp, const float *dout, const float *inp, int N,
                        int F) {
    if (!dinp || N <= 0 || F <= 0) return;
    swiglu_job j = {
        .out = dinp, .inp = inp, .dout = dout, .N = N, .F = F, .tiles = row_tiles(N, (size_t)F)};
    nn_pool_run(pool, j.tiles, swiglu_bwd_tile, &j);
}
