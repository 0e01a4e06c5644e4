/* model/block.h - the two halves of a transformer layer, composed from the
 * tensor-parallel linears (tp/layers.h) and the single-device kernels (nn/):
 *
 *   attention:  in ─col(qkv)─> [q_r|k_r|v_r] ─RoPE(q,k)─> core attention ─row(proj)─> out
 *   MLP:        in ─col(fc1)─> h_r ─GELU or SwiGLU─> a_r ─row(fc2)─> out
 *
 * Between the two linears everything is local to the rank's heads (query
 * heads [r*NH_tp, (r+1)*NH_tp) and their key/value groups [r*NG_tp, ...),
 * so grouped-query attention splits by groups) or MLP columns: one
 * collective per linear each way (tp/layers.h says which), none inside.
 * The core attention and the MLP are the seams later strategies plug into
 * (context parallelism replaces the core attention, mixture of experts the
 * MLP). The caller owns the norms, residuals and hidden dropout.
 *
 * The core attention is the tiled (flash-style) kernel of nn/, which reads
 * the packed [q_r | k_r | v_r] rows in place, serves grouped-query
 * attention natively (query head h uses key/value head h / (NH/NG)) and
 * keeps only the per-row log-sum-exp for backward: no T x T buffer.
 * RoPE rotates q and k in place right after the QKV linear with the rows'
 * GLOBAL positions (pos, or t0 + t); backward applies the inverse rotation
 * to dq and dk before the linear's backward.
 * Relies on tp/ and nn/; allocates nothing (scratch is the caller's). */
#ifndef MTC_MODEL_BLOCK_H
#define MTC_MODEL_BLOCK_H

#include "cp/cp.h"
#include "nn/llama.h"
#include "nn/nn.h"
#include "tp/layers.h"

/* --qk-layernorm: a norm of each q and k head's HS values after the QKV
 * linear and before RoPE, as Megatron's q_layernorm / k_layernorm
 * (LayerNorm or RMSNorm following --normalization, its epsilon). The
 * weights (HS) are replicated over TP: backward adds this rank's heads'
 * share into the gradients, which the caller's gradient reduction sums
 * over TP. */
typedef struct {
    int rms; /* RMSNorm, else LayerNorm */
    float eps;
    const float *qw, *qb, *kw, *kb; /* (HS); the biases NULL with RMSNorm */
    float *dqw, *dqb, *dkw, *dkb;   /* (HS) gradients, += */
    /* the activations kept for backward: q | k before their norms
     * (B*T*QD_tp, then B*T*KD_tp floats) and the norms' mean | rstd
     * (2 x B*T*(NH_tp + NG_tp)) */
    float *in, *stat;
} model_qk_norm;

/* Shapes and options of one layer (global sizes; the block divides by tp). */
typedef struct {
    int C;                     /* hidden size */
    int NH, NG, HS;            /* query heads, key/value groups, head size */
    int F;                     /* MLP width (fc1 has 2F rows with swiglu) */
    int swiglu;                /* 0: GELU (tanh) */
    const nn_rope_table *rope; /* NULL: no rotary positions */
    const int *pos;            /* global positions of the attention rows (NULL: t0 + t) */
    int t0;
    const cp_ctx *cp;             /* context parallelism of the core attention (NULL: none) */
    const model_qk_norm *qk_norm; /* NULL: none */
    struct tp_fp8_gemm *fp8;      /* [4] the layer's fp8 qkv, proj, fc1, fc2 (tp/fp8_linear.h);
                                     NULL: not fp8 */
} model_block_dims;

/* Activations one attention block keeps from forward to backward. */
typedef struct {
    float *in_total;    /* (B, T, C) gathered input under SP (unused without SP) */
    int in_total_saved; /* 1: in_total survives until backward; 0: backward re-gathers */
    float *qkv;         /* (B, T, QD_tp + 2 KD_tp) [q_r | k_r | v_r], q and k rotated */
    float *lse;         /* (B, NH_tp, T) the attention's log-sum-exp per query row */
    float *atty;        /* (B, T, QD_tp) attention output of the local heads */
} model_attention_acts;

/* out (B, T_loc, C) = proj(attention(qkv(in))) including proj's bias (no
 * residual, no output dropout). in (B, T_loc, C) (the first norm's output);
 * qkvw (QD_tp + 2 KD_tp, C), qkvb or NULL; projw (C, QD_tp); projb (C) or
 * NULL. drop: attention dropout over all NH heads and the whole sequence
 * (NHg and h0 are set here from the TP rank; NULL = none).
 * comm: column-parallel then row-parallel linear. */
mtc_result_t model_attention_forward(const tp_ctx *tp, float *out, model_attention_acts *acts,
                                     const float *in, const float *qkvw, const float *qkvb,
                                     const float *projw, const float *projb,
                                     const nn_dropout_spec *drop, float *scratch, int B, int T,
                                     const model_block_dims *d);
/* din (B, T_loc, C) =; parameter gradients += (projb's partial under SP). */
mtc_result_t model_attention_backward(const tp_ctx *tp, float *din, float *dqkvw, float *dqkvb,
                                      float *dprojw, float *dprojb, const float *dout,
                                      const model_attention_acts *acts, const float *in,
                                      const float *qkvw, const float *projw,
                                      const nn_dropout_spec *drop, float *scratch, int B, int T,
                                      const model_block_dims *d);
size_t model_attention_scratch_floats(const tp_ctx *tp, int B, int T, const model_block_dims *d);

typedef struct {
    float *in_total;    /* (B, T, C) gathered input under SP (unused without SP) */
    int in_total_saved; /* as for attention */
    float *fch;         /* (B, T, F1_tp) fc1 output ([gate_r | up_r] with swiglu); the
                           activation's output is not kept: backward recomputes it, as
                           Megatron's fused bias-GeLU / SwiGLU do */
} model_mlp_acts;

/* out (B, T_loc, C) = fc2(act(fc1(in))) including fc2's bias.
 * fc1w (F1_tp, C), fc1b or NULL; fc2w (C, F_tp); fc2b (C) or NULL. */
mtc_result_t model_mlp_forward(const tp_ctx *tp, float *out, model_mlp_acts *acts, const float *in,
                               const float *fc1w, const float *fc1b, const float *fc2w,
                               const float *fc2b, float *scratch, int B, int T,
                               const model_block_dims *d);
mtc_result_t model_mlp_backward(const tp_ctx *tp, float *din, float *dfc1w, float *dfc1b,
                                float *dfc2w, float *dfc2b, const float *dout,
                                const model_mlp_acts *acts, const float *in, const float *fc1w,
                                const float *fc2w, float *scratch, int B, int T,
                                const model_block_dims *d);
size_t model_mlp_scratch_floats(const tp_ctx *tp, int B, int T, const model_block_dims *d);

#endif
