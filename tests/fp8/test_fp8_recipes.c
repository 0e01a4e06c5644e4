/* tests/fp8/test_fp8_recipes.c - each recipe against a reference written
 * here from Transformer Engine's code:
 *   delayed: the update of transformer_engine/pytorch's python path
 *     (_default_get_amax_and_update_history: amax = max over the history or
 *     history[0]; torch.roll(-1) then history[0] = 0; _default_sf_compute:
 *     (fp8_max / amax) / 2^margin where amax > 0 and finite, else the old
 *     scale) over random amax sequences with zeros and infinities, and a
 *     state driven by real GEMM calls over 4 steps (the recorded amaxes, the
 *     scales of each step);
 *   tensorwise / mxfp8 / blockwise: the operands of the forward, dgrad and
 *   wgrad GEMMs quantized by the reference (scales from the block amaxes:
 *   448/amax; 2^ceil(log2(amax/448)) E8M0; 2^floor(log2(448/amax))), then
 *   the products in double, against tp_fp8_forward / tp_fp8_backward.
 * The reference rounds with nn_fp8_round1 (test_fp8_convert checks it
 * against the specification). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/fp8.h"
#include "test.h"
#include "tp/fp8_linear.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* ---- delayed: TE's python update ---------------------------------------------- */
static void ref_update(float *scale, float *hist, int len, int amax_max, float fmax, int margin) {
    float amax = hist[0];
    if (amax_max)
        for (int i = 0; i < len; i++)
            amax = hist[i] > amax || isnan(amax) ? hist[i] : amax;
    float first = hist[0]; /* torch.roll(h, -1): h[i] = h[i + 1], the first goes last */
    memmove(hist, hist + 1, (size_t)(len - 1) * sizeof(float));
    hist[len - 1] = first;
    hist[0] = 0.0f;
    float sf = (fmax / amax) / ldexpf(1.0f, margin);
    if (!(amax > 0.0f) || !isfinite(amax)) sf = *scale;
    if (isinf(sf)) sf = FLT_MAX;
    *scale = sf;
}

static void check_delayed_update(void) {
    int lens[3] = {1, 3, 6};
    for (int li = 0; li < 3; li++)
        for (int algo = 0; algo < 2; algo++)
            for (int margin = 0; margin < 2; margin++) {
                int L = lens[li];
                float h1[8] = {0}, h2[8] = {0}, s1 = 1, s2 = 1;
                int bad = 0;
                for (int step = 0; step < 12; step++) {
                    float a = (float)(urand() * 10);
                    if (step == 3) a = 0;        /* keeps the old scale */
                    if (step == 7) a = INFINITY; /* as does an overflow */
                    if (step == 9) a = 1e-42f;   /* the scale overflows: FLT_MAX */
                    h1[0] = h2[0] = a;
                    tp_fp8_delayed_update(&s1, h1, L, algo, ldexpf(448.0f, -margin));
                    ref_update(&s2, h2, L, algo, 448.0f, margin);
                    bad += memcmp(&s1, &s2, sizeof s1) != 0 || memcmp(h1, h2, sizeof h1) != 0;
                }
                T_CHECKF(bad == 0, "len %d algo %d margin %d: %d steps differ", L, algo, margin,
                         bad);
            }
}

/* ---- the reference quantizers --------------------------------------------------------- */
static double ref_scale(tp_fp8_recipe r, float amax, float fmax, double *inv) {
    double s;
    if (r == TP_FP8_MXFP8) { /* E8M0: the smallest power of two with amax / 2^e <= fmax */
        if (amax == 0) {
            *inv = ldexp(1, -127);
            return ldexp(1, 127);
        }
        int e = (int)ceil(log2((double)(amax * (1.0f / fmax))));
        *inv = ldexp(1, e);
        return ldexp(1, -e);
    }
    if (amax == 0) {
        *inv = 1;
        return 1;
    }
    s = (double)(fmax / amax);
    if (r == TP_FP8_BLOCKWISE) s = ldexp(1, (int)floor(log2(s)));
    *inv = (double)(1.0f / (float)s);
    return s;
}

/* q (R, Cc) = x quantized in blocks br x bc (per tensor: br = R, bc = Cc) */
static void ref_quant(tp_fp8_recipe r, nn_fp8_format f, double *q, const float *x, int R, int Cc,
                      int br, int bc) {
    for (int rb = 0; rb < R; rb += br)
        for (int cb = 0; cb < Cc; cb += bc) {
            float amax = 0;
            for (int i = rb; i < rb + br && i < R; i++)
                for (int j = cb; j < cb + bc && j < Cc; j++)
                    amax = fmaxf(amax, fabsf(x[(size_t)i * Cc + j]));
            double inv, s = ref_scale(r, amax, nn_fp8_max(f), &inv);
            for (int i = rb; i < rb + br && i < R; i++)
                for (int j = cb; j < cb + bc && j < Cc; j++)
                    q[(size_t)i * Cc + j] =
                        (double)nn_fp8_round1(f, (float)(x[(size_t)i * Cc + j] * (float)s)) *
                        (float)inv;
        }
}

/* the block shape TE gives operand op in a usage: row = blocks along the
 * last dimension, col = along the first */
static void shape(tp_fp8_recipe r, int op, int col, int R, int Cc, int *br, int *bc) {
    *br = R, *bc = Cc;
    if (r == TP_FP8_MXFP8) *br = col ? 32 : 1, *bc = col ? 1 : 32;
    if (r == TP_FP8_BLOCKWISE) {
        if (op == TP_FP8_W)
            *br = *bc = 128;
        else
            *br = col ? 128 : 1, *bc = col ? 1 : 128;
    }
}

static void fill(float *x, size_t n, double mag) {
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((urand() - 0.5) * mag * (urand() < 0.02 ? 40 : 1)); /* a few outliers */
}

/* max over elements of |got - want| / max|want| */
static double rel_err(const float *got, const double *want, size_t n) {
    double m = 0, e = 0;
    for (size_t i = 0; i < n; i++) {
        m = fmax(m, fabs(want[i]));
        e = fmax(e, fabs((double)got[i] - want[i]));
    }
    return m > 0 ? e / m : e;
}

/* The three GEMMs of one linear (N, IN) -> (N, OUT) under recipe r against
 * the reference; hybrid: E5M2 gradients. */
static void check_gemms(tp_fp8_recipe r, int hybrid, nn_pool *pool) {
    const int N = 160, IN = 96, OUT = 200; /* edge blocks in every direction */
    tp_fp8_config cfg = {
        .enabled = 1, .hybrid = hybrid, .recipe = r, .amax_history_len = 1, .wgrad = 1};
    tp_fp8_state *st;
    T_CHECK(tp_fp8_state_init(&st, &cfg, NULL, 1, 0, 1, (size_t)OUT * IN) == MTC_OK);
    tp_fp8_gemm *g = tp_fp8_layer(st, 0);
    float *x = malloc(sizeof(float) * N * IN), *w = malloc(sizeof(float) * OUT * IN);
    float *dy = malloc(sizeof(float) * N * OUT), *y = malloc(sizeof(float) * N * OUT);
    float *dx = malloc(sizeof(float) * N * IN), *dw = calloc((size_t)OUT * IN, sizeof(float));
    float *xq = malloc(sizeof(float) * N * IN), *gq = malloc(sizeof(float) * N * OUT);
    double *qa = malloc(sizeof(double) * N * OUT), *qb = malloc(sizeof(double) * OUT * IN);
    double *ref = malloc(sizeof(double) * N * OUT);
    fill(x, (size_t)N * IN, 2.0), fill(w, (size_t)OUT * IN, 0.1), fill(dy, (size_t)N * OUT, 1e-4);
    nn_fp8_format fg = hybrid ? NN_FP8_E5M2 : NN_FP8_E4M3;
    int br, bc;
    /* fprop */
    T_CHECK(tp_fp8_forward(g, pool, y, xq, x, w, NULL, N, IN, OUT) == MTC_OK);
    shape(r, TP_FP8_X, 0, N, IN, &br, &bc), ref_quant(r, NN_FP8_E4M3, qa, x, N, IN, br, bc);
    shape(r, TP_FP8_W, 0, OUT, IN, &br, &bc), ref_quant(r, NN_FP8_E4M3, qb, w, OUT, IN, br, bc);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OUT; o++) {
            double s = 0;
            for (int i = 0; i < IN; i++)
                s += qa[(size_t)n * IN + i] * qb[(size_t)o * IN + i];
            ref[(size_t)n * OUT + o] = s;
        }
    double e = rel_err(y, ref, (size_t)N * OUT);
    T_CHECKF(e < 1e-6, "%s fprop: %.2e", tp_fp8_recipe_name(r), e);
    /* dgrad and wgrad */
    T_CHECK(tp_fp8_backward(g, pool, dx, dw, gq, xq, dy, x, w, N, IN, OUT) == MTC_OK);
    shape(r, TP_FP8_G, 0, N, OUT, &br, &bc), ref_quant(r, fg, qa, dy, N, OUT, br, bc);
    shape(r, TP_FP8_W, 1, OUT, IN, &br, &bc), ref_quant(r, NN_FP8_E4M3, qb, w, OUT, IN, br, bc);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < IN; i++) {
            double s = 0;
            for (int o = 0; o < OUT; o++)
                s += qa[(size_t)n * OUT + o] * qb[(size_t)o * IN + i];
            ref[(size_t)n * IN + i] = s;
        }
    e = rel_err(dx, ref, (size_t)N * IN);
    T_CHECKF(e < 1e-6, "%s dgrad: %.2e", tp_fp8_recipe_name(r), e);
    shape(r, TP_FP8_G, 1, N, OUT, &br, &bc), ref_quant(r, fg, qa, dy, N, OUT, br, bc);
    shape(r, TP_FP8_X, 1, N, IN, &br, &bc), ref_quant(r, NN_FP8_E4M3, qb, x, N, IN, br, bc);
    for (int o = 0; o < OUT; o++)
        for (int i = 0; i < IN; i++) {
            double s = 0;
            for (int n = 0; n < N; n++)
                s += qa[(size_t)n * OUT + o] * qb[(size_t)n * IN + i];
            ref[(size_t)o * IN + i] = s;
        }
    e = rel_err(dw, ref, (size_t)OUT * IN);
    T_CHECKF(e < 1e-6, "%s wgrad: %.2e", tp_fp8_recipe_name(r), e);
    /* dinp over x's own buffer (model/block.c's fc2 does this): the same dw and dx */
    {
        float *xa = malloc(sizeof(float) * N * IN), *dw2 = calloc((size_t)OUT * IN, sizeof(float));
        memcpy(xa, x, sizeof(float) * N * IN);
        T_CHECK(tp_fp8_backward(g, pool, xa, dw2, gq, xq, dy, xa, w, N, IN, OUT) == MTC_OK);
        T_CHECKF(memcmp(dw2, dw, sizeof(float) * OUT * IN) == 0 &&
                     memcmp(xa, dx, sizeof(float) * N * IN) == 0,
                 "%s: dinp aliasing x changes the gradients", tp_fp8_recipe_name(r));
        free(xa), free(dw2);
    }
    /* the block recipes never clip (their scales come from the block's amax) */
    if (r != TP_FP8_DELAYED)
        T_CHECK(
            st->stats.sat[TP_FP8_X] + st->stats.sat[TP_FP8_W] + st->stats.sat[TP_FP8_G] <=
            (r == TP_FP8_TENSORWISE ? 3 : 0)); /* tensorwise: amax*(448/amax) may be 1 ulp over */
    tp_fp8_state_free(st);
    free(x), free(w), free(dy), free(y), free(dx), free(dw), free(xq), free(gq), free(qa), free(qb);
    free(ref);
}

/* A delayed state through real GEMMs: the scale each step quantizes with
 * follows the reference update of the amaxes the operands really had. */
static void check_delayed_steps(nn_pool *pool) {
    const int N = 64, IN = 32, OUT = 48, H = 3;
    tp_fp8_config cfg = {.enabled = 1,
                         .hybrid = 1,
                         .recipe = TP_FP8_DELAYED,
                         .amax_history_len = H,
                         .amax_max = 1,
                         .margin = 1,
                         .wgrad = 1};
    tp_fp8_state *st;
    T_CHECK(tp_fp8_state_init(&st, &cfg, NULL, 1, 0, 1, (size_t)OUT * IN) == MTC_OK);
    tp_fp8_gemm *g = tp_fp8_layer(st, 0);
    float x[64 * 32], w[48 * 32], dy[64 * 48], y[64 * 48], dx[64 * 32], dw[48 * 32] = {0};
    float xq[64 * 32], gq[64 * 48];
    float rs[3] = {1, 1, 1}, rh[3][3] = {{0}};
    float fmax[3] = {448, 448, 57344};
    st->recording = 1;
    int bad = 0;
    for (int step = 0; step < 5; step++) {
        double mag = step == 2 ? 1000.0 : 1.0 + step; /* step 2 saturates with the old scale */
        for (int mb = 0; mb < 2; mb++) {              /* two microbatches: amax = their max */
            fill(x, sizeof x / 4, mag), fill(w, sizeof w / 4, 0.05 * mag),
                fill(dy, sizeof dy / 4, 1e-3);
            const float *ops[3] = {x, w, dy};
            size_t n[3] = {sizeof x / 4, sizeof w / 4, sizeof dy / 4};
            for (int o = 0; o < 3; o++) {
                rh[o][0] = fmaxf(rh[o][0], nn_fp8_amax(ops[o], n[o]));
                bad += g->t[o].scale != rs[o];
            }
            T_CHECK(tp_fp8_forward(g, pool, y, xq, x, w, NULL, N, IN, OUT) == MTC_OK);
            T_CHECK(tp_fp8_backward(g, pool, dx, dw, gq, xq, dy, x, w, N, IN, OUT) == MTC_OK);
            /* the forward quantized x with the state's scale */
            for (int i = 0; i < N * IN; i++)
                bad += xq[i] != nn_fp8_round1(NN_FP8_E4M3, x[i] * rs[0]) * (1.0f / rs[0]);
        }
        if (step == 2) T_CHECK(st->stats.sat[TP_FP8_X] > 0);
        T_CHECK(tp_fp8_step_end(st) == MTC_OK);
        for (int o = 0; o < 3; o++)
            ref_update(&rs[o], rh[o], H, 1, fmax[o], 1);
        for (int o = 0; o < 3; o++)
            bad += memcmp(g->t[o].hist, rh[o], sizeof rh[o]) != 0 || g->t[o].scale != rs[o];
        tp_fp8_stats_reset(st);
    }
    T_CHECKF(bad == 0, "%d mismatches of the delayed state over 5 steps", bad);
    /* checkpoint form round trip */
    float *save = malloc(tp_fp8_layer_floats(&cfg) * sizeof(float));
    T_CHECK(tp_fp8_layer_get(st, 0, save) == 1 && save[0] == g->t[0].scale);
    g->t[0].scale = 5;
    T_CHECK(tp_fp8_layer_set(st, 0, save) == 1 && g->t[0].scale == rs[0]);
    T_CHECK(tp_fp8_layer_get(st, 1, save) == 0);
    free(save);
    tp_fp8_state_free(st);
}

int main(void) {
    nn_pool *pool = NULL;
    T_CHECK(nn_pool_create(2, &pool) == MTC_OK);
    check_delayed_update();
    check_delayed_steps(pool);
    for (int r = TP_FP8_TENSORWISE; r <= TP_FP8_BLOCKWISE; r++)
        for (int hybrid = 0; hybrid < 2; hybrid++)
            check_gemms((tp_fp8_recipe)r, hybrid, pool);
    /* --first-last-layers-bf16: layers 0 and L-1 without fp8 state */
    tp_fp8_config c = {.enabled = 1, .bf16_start = 1, .bf16_end = 2};
    T_CHECK(!tp_fp8_layer_is_fp8(&c, 6, 0) && tp_fp8_layer_is_fp8(&c, 6, 1) &&
            tp_fp8_layer_is_fp8(&c, 6, 3) && !tp_fp8_layer_is_fp8(&c, 6, 4));
    nn_pool_free(pool);
    return T_DONE();
}
