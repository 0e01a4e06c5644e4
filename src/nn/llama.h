/* nn/llama.h - the single-device kernels a Llama-style layer adds to GPT's:
 * RMSNorm, rotary position embedding (RoPE) and the SwiGLU activation, as
 * forward/backward pairs on plain float buffers.
 *
 * Conventions are nn.h's: outputs first, inputs const, dims last; backward
 * WRITES input gradients (=) and ACCUMULATES (+=) parameter gradients; any
 * gradient pointer may be NULL; kernels take an nn_pool (NULL = the calling
 * thread) and give the same bits whatever its size. Nothing here
 * communicates: under tensor parallelism each rank calls these on its local
 * heads / its local [gate_r | up_r] columns. */
#ifndef MTC_NN_LLAMA_H
#define MTC_NN_LLAMA_H

#include "nn/nn.h"

/* ---- RMSNorm ------------------------------------------------------------------- */

/* out = (x * rstd) * w, rstd = 1 / sqrt(mean(x²) + eps), per row, as
 * Megatron's RMSNorm and Hugging Face's LlamaRMSNorm (eps = --norm-epsilon,
 * rms_norm_eps; 1e-5 by default).
 * out, inp (N,C); w (C); rstd (N) saved for backward (may be NULL when no
 * backward follows). out may alias inp. */
void nn_rmsnorm_forward(nn_pool *pool, float *out, float *rstd, const float *inp, const float *w,
                        float eps, int N, int C);
/* dinp (N,C) =; dw (C) +=; rstd from the forward. dinp may alias dout. */
void nn_rmsnorm_backward(nn_pool *pool, float *dinp, float *dw, const float *dout, const float *inp,
                         const float *w, const float *rstd, int N, int C);

/* ---- rotary position embedding ------------------------------------------------------ */

/* cos/sin of every (position, frequency) pair, computed once.
 * rot = HS * rotary_percent rotary channels per head (the first rot of the
 * HS; the rest pass through), rot/2 frequencies
 *   inv_freq[i] = 1 / base^(2i / rot)                 (float32, as torch)
 *   angle(p, i) = (float)p * inv_freq[i]              (one float32 product)
 * and cos[p * rot/2 + i] = cos(angle), rounded once to float. This is the
 * float arithmetic of Megatron's RotaryEmbedding and Hugging Face's
 * LlamaRotaryEmbedding, so the tables agree with theirs to the last bit or
 * so at every position (tested up to 65535).
 * interleaved = 0 (Megatron's default, Hugging Face Llama): channel i pairs
 * with i + rot/2; interleaved = 1 (--rotary-interleaved): 2i with 2i + 1. */
typedef struct {
    int max_pos;     /* positions 0 .. max_pos-1 */
    int HS, rot;     /* head size, rotary channels (even, <= HS) */
    int interleaved; /* 0 halves, 1 adjacent pairs */
    float base;      /* --rotary-base, rope_theta */
    float *cos;      /* (max_pos, rot/2) */
    float *sin;      /* (max_pos, rot/2) */
} nn_rope_table;

/* Fills tab (freed with nn_rope_table_free). rot = (int)(HS * rotary_percent)
 * as Megatron computes it; refuses (MTC_ERR_INVALID_ARGUMENT, with a detail
 * naming the value) max_pos < 1, HS < 2, rotary_percent outside (0, 1], an
 * odd or zero rot, base <= 1. */
mtc_result_t nn_rope_table_init(nn_rope_table *tab, int max_pos, int HS, float rotary_percent,
                                float base, int interleaved);
void nn_rope_table_free(nn_rope_table *tab); /* NULL or a zeroed table: no-op */

/* Rotates a (B, T, NH, HS) block of heads that sits inside rows of `stride`
 * floats: head h of row (b, t) is inp[(b*T + t) * stride + h*HS + 0..HS).
 * Point inp/out at the first head of the block, e.g. a packed qkv row laid
 * out [q (NH*HS) | k (NG*HS) | v] is rotated by one call on qkv with NH heads
 * and one on qkv + NH*HS with NG heads, both with stride (NH + 2 NG) * HS.
 * (Megatron's fused linear_qkv interleaves groups, [q heads of g | k_g | v_g]:
 * rotate it with one call per group, or reorder it first.)
 * Row t has the GLOBAL position pos[t] (pos (T), NULL = t0 + t), so a
 * sequence shard rotates exactly as the serial run; every position must be
 * < tab->max_pos. out may alias inp (in place); otherwise the pass-through
 * channels rot..HS are copied and nothing outside the heads is touched.
 *   halves:  out[i] = x[i] c - x[i+rot/2] s,  out[i+rot/2] = x[i+rot/2] c + x[i] s
 *   pairs:   out[2i] = x[2i] c - x[2i+1] s,   out[2i+1] = x[2i+1] c + x[2i] s
 * with c, s = cos, sin(angle(pos[t], i)); each product rounded, then the
 * sum, as torch's t * cos + rotate_half(t) * sin. */
void nn_rope_forward(nn_pool *pool, float *out, const float *inp, const nn_rope_table *tab,
                     const int *pos, int t0, int B, int T, int NH, int HS, int stride);
/* dinp = the inverse rotation of dout (the rotation is orthogonal), same
 * layout and aliasing rules as the forward. */
void nn_rope_backward(nn_pool *pool, float *dinp, const float *dout, const nn_rope_table *tab,
                      const int *pos, int t0, int B, int T, int NH, int HS, int stride);

/* ---- SwiGLU ------------------------------------------------------------------------- */

/* out (N,F) = silu(gate) * up, silu(g) = g / (1 + exp(-g)); inp (N,2F) with
 * each row [gate (F) | up (F)], the layout of Megatron's fc1 output under
 * --swiglu (torch.chunk(x, 2, dim=-1)). Under tensor parallelism each rank's
 * fc1 shard is its own [gate_r | up_r], so F is the local F / tp. */
void nn_swiglu_forward(nn_pool *pool, float *out, const float *inp, int N, int F);
/* dinp (N,2F) = [dgate | dup]; dout (N,F); inp (N,2F) from the forward. */
void nn_swiglu_backward(nn_pool *pool, float *dinp, const float *dout, const float *inp, int N,
                        int F);

#endif
