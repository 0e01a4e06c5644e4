/* nn/yarn.c - YaRN / RoPE tables and the de-interleaving rotation of
 * multi-latent attention (nn/yarn.h). Allocates only the table. */
#include "nn/yarn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_internal.h"

#define YARN_MAX_D 1024 /* rotary channels one row may have (stack temporaries) */

double nn_yarn_get_mscale(double scale, double mscale) {
    return scale <= 1 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

double nn_yarn_concentration(const nn_yarn_params *p) {
    if (!p->yarn) return 1.0;
    return nn_yarn_get_mscale(p->scaling_factor, p->mscale) /
           nn_yarn_get_mscale(p->scaling_factor, p->mscale_all_dim);
}

/* _yarn_find_correction_dim */
static double yarn_dim(double rotations, int D, double base, double max_pos) {
    return (D * log(max_pos / (rotations * 2 * 3.14159265358979323846))) / (2 * log(base));
}

mtc_result_t nn_yarn_table_init(nn_yarn_table *tab, int max_pos, int D, const nn_yarn_params *p) {
    memset(tab, 0, sizeof *tab);
    if (max_pos < 1 || D < 2 || D % 2 || D > YARN_MAX_D)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "rotary channels %d must be even, in [2, %d] (qk-pos-emb-head-dim)", D,
                         YARN_MAX_D);
    if (!(p->base > 1.0f))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "rotary-base=%g must be > 1", (double)p->base);
    if (p->yarn && !(p->scaling_factor > 0.0f))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "rotary-scaling-factor=%g must be > 0",
                         (double)p->scaling_factor);
    int h2 = D / 2;
    size_t n = (size_t)max_pos * h2;
    tab->cos = malloc(n * sizeof(float));
    tab->sin = malloc(n * sizeof(float));
    float *inv = malloc((size_t)h2 * sizeof(float));
    if (!tab->cos || !tab->sin || !inv) {
        free(inv);
        nn_yarn_table_free(tab);
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "yarn: no memory for a %d x %d table", max_pos, h2);
    }
    double low = 0, high = 0;
    if (p->yarn) { /* _yarn_find_correction_range, round_to_int */
        low = floor(yarn_dim(p->beta_fast, D, p->base, p->original_max_positions));
        high = ceil(yarn_dim(p->beta_slow, D, p->base, p->original_max_positions));
        if (low < 0) low = 0;
        if (high > D - 1) high = D - 1;
        if (low == high) high += 0.001; /* _yarn_linear_ramp_mask */
    }
    for (int i = 0; i < h2; i++) {
        float e = (float)(2 * i) / (float)D;
        float pw = (float)pow((double)p->base, (double)e);
        float extra = 1.0f / pw;
        if (!p->yarn) {
            inv[i] = extra;
            continue;
        }
        float inter = 1.0f / (p->scaling_factor * pw);
        float ramp = ((float)i - (float)low) / (float)(high - low);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        float mask = 1.0f - ramp;
        inv[i] = inter * (1.0f - mask) + extra * mask;
    }
    float m = (float)nn_yarn_concentration(p);
    for (int q = 0; q < max_pos; q++)
        for (int i = 0; i < h2; i++) {
            float a = (float)q * inv[i]; /* torch.outer(seq, inv_freq) in float32 */
            tab->cos[(size_t)q * h2 + i] = (float)cos((double)a) * m;
            tab->sin[(size_t)q * h2 + i] = (float)sin((double)a) * m;
        }
    free(inv);
    tab->max_pos = max_pos;
    tab->D = D;
    return MTC_OK;
}

void nn_yarn_table_free(nn_yarn_table *tab) {
    if (!tab) return;
    free(tab->cos);
    free(tab->sin);
    memset(tab, 0, sizeof *tab);
}

typedef struct {
    float *x;
    const nn_yarn_table *tab;
    const int *pos;
    int t0, B, T, NH, hstride, stride, backward, tiles;
} yarn_job;

static void yarn_tile(int i, void *vp) {
    const yarn_job *j = vp;
    size_t lo, hi;
    nn_split_range((size_t)j->B * j->T, j->tiles, i, 1, &lo, &hi);
    int D = j->tab->D, h2 = D / 2;
    float t[YARN_MAX_D];
    for (size_t r = lo; r < hi; r++) {
        int tt = (int)(r % (size_t)j->T);
        int p = j->pos ? j->pos[tt] : j->t0 + tt;
        const float *c = j->tab->cos + (size_t)p * h2, *s = j->tab->sin + (size_t)p * h2;
        for (int h = 0; h < j->NH; h++) {
            float *x = j->x + r * (size_t)j->stride + (size_t)h * j->hstride;
            if (!j->backward) {
                /* x1 = x[0::2], x2 = x[1::2]; out = [x1 c - x2 s | x2 c + x1 s] */
                for (int k = 0; k < h2; k++) {
                    float x1 = x[2 * k], x2 = x[2 * k + 1];
                    t[k] = x1 * c[k] - x2 * s[k];
                    t[h2 + k] = x2 * c[k] + x1 * s[k];
                }
                memcpy(x, t, (size_t)D * sizeof(float));
            } else {
                /* the transpose: dx[2k] = dy1 c + dy2 s, dx[2k+1] = dy2 c - dy1 s */
                for (int k = 0; k < h2; k++) {
                    float d1 = x[k], d2 = x[h2 + k];
                    t[2 * k] = d1 * c[k] + d2 * s[k];
                    t[2 * k + 1] = d2 * c[k] - d1 * s[k];
                }
                memcpy(x, t, (size_t)D * sizeof(float));
            }
        }
    }
}

static void yarn_run(nn_pool *pool, float *x, const nn_yarn_table *tab, const int *pos, int t0,
                     int B, int T, int NH, int hstride, int stride, int backward) {
    size_t rows = (size_t)B * T;
    if (!rows || NH < 1) return;
    int tiles = nn_split_count(rows * (size_t)NH * tab->D, 16384);
    if ((size_t)tiles > rows) tiles = (int)rows;
    yarn_job j = {x, tab, pos, t0, B, T, NH, hstride, stride, backward, tiles};
    nn_pool_run(pool, tiles, yarn_tile, &j);
}

void nn_yarn_forward(nn_pool *pool, float *x, const nn_yarn_table *tab, const int *pos, int t0,
                     int B, int T, int NH, int hstride, int stride) {
    yarn_run(pool, x, tab, pos, t0, B, T, NH, hstride, stride, 0);
}

void nn_yarn_backward(nn_pool *pool, float *dx, const nn_yarn_table *tab, const int *pos, int t0,
                      int B, int T, int NH, int hstride, int stride) {
    yarn_run(pool, dx, tab, pos, t0, B, T, NH, hstride, stride, 1);
}
