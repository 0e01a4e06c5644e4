/* nn/yarn.h - the rotary position embedding of multi-latent attention:
 * YaRN frequencies (Megatron's YarnRotaryEmbedding,
 * models/common/embeddings/yarn_rotary_pos_embedding.py) or plain RoPE
 * ones, applied as rope_utils._apply_rotary_pos_emb_bshd applies them with
 * multi_latent_attention=True: the D channels of a head are first
 * de-interleaved (x[0::2] then x[1::2]) and then rotated by halves, and
 * cos / sin carry YaRN's concentration factor. The output stays in the
 * de-interleaved order, as in Megatron (q and k are permuted alike, so the
 * scores are those of an interleaved rotation).
 *
 *   inv_freq_extra[i] = 1 / base^(2i/D)
 *   inv_freq_inter[i] = 1 / (s * base^(2i/D))            s = rotary-scaling-factor
 *   low, high = floor / ceil of D ln(P / (b 2 pi)) / (2 ln base) for b = beta_fast,
 *               beta_slow (P = original-max-position-embeddings), clamped to [0, D-1]
 *   mask[i]   = 1 - clamp((i - low) / (high - low), 0, 1)
 *   inv_freq  = inter (1 - mask) + extra mask
 *   cos(p, i) = cos(p inv_freq[i]) * m, sin likewise, m = mscale(s, mscale) /
 *               mscale(s, mscale_all_dim), mscale(s, x) = 0.1 x ln s + 1 (s > 1, else 1)
 * All in float32 as torch computes it. Plain RoPE: inv_freq_extra, m = 1.
 * Nothing here communicates or allocates after the table. */
#ifndef MTC_NN_YARN_H
#define MTC_NN_YARN_H

#include "nn/nn.h"

typedef struct {
    int yarn;                     /* 1: YaRN, 0: plain RoPE frequencies, factor 1 */
    float base;                   /* --rotary-base */
    float scaling_factor;         /* --rotary-scaling-factor */
    int original_max_positions;   /* --original-max-position-embeddings */
    float beta_fast, beta_slow;   /* --beta-fast, --beta-slow */
    float mscale, mscale_all_dim; /* --mscale, --mscale-all-dim */
} nn_yarn_params;

typedef struct {
    int max_pos, D;   /* positions 0 .. max_pos-1, rotary channels (even) */
    float *cos, *sin; /* (max_pos, D/2), the concentration factor included */
} nn_yarn_table;

/* Megatron's _yarn_get_mscale(scale, mscale): 0.1 mscale ln(scale) + 1 for
 * scale > 1, else 1 (double, as Python). */
double nn_yarn_get_mscale(double scale, double mscale);
/* The factor cos and sin carry (_yarn_get_concentration_factor; 1 for RoPE). */
double nn_yarn_concentration(const nn_yarn_params *p);
/* Fills tab (nn_yarn_table_free). MTC_ERR_INVALID_ARGUMENT for an odd D,
 * max_pos < 1, base <= 1, scaling factor <= 0. */
mtc_result_t nn_yarn_table_init(nn_yarn_table *tab, int max_pos, int D, const nn_yarn_params *p);
void nn_yarn_table_free(nn_yarn_table *tab);

/* Rotates NH heads of D channels in place: head h of row (b, t) is
 * x[(b*T + t) * stride + h*hstride + 0..D), position pos[t] (NULL: t0 + t;
 * each < tab->max_pos). out = rotate_halves(deinterleave(x)). */
void nn_yarn_forward(nn_pool *pool, float *x, const nn_yarn_table *tab, const int *pos, int t0,
                     int B, int T, int NH, int hstride, int stride);
/* dx = the transpose of the forward's map applied to dy, in place. */
void nn_yarn_backward(nn_pool *pool, float *dx, const nn_yarn_table *tab, const int *pos, int t0,
                      int B, int T, int NH, int hstride, int stride);

#endif
