/* tp/fp8_linear.h - Transformer Engine's fp8 recipes on the linear layers of
 * the transformer blocks (qkv, proj, fc1, fc2), emulated: every GEMM operand
 * is quantized as TE quantizes it and dequantized (nn/fp8.h), and the GEMM
 * itself runs in fp32 on those values (tp/linear.c's engine):
 *
 *   fprop  y  = q(x, E4M3) · q(w, E4M3)ᵀ          blocks along IN
 *   dgrad  dx = q(dy, E5M2 hybrid | E4M3) · q(w)   blocks along OUT
 *   wgrad  dw += q(dy)ᵀ · q(x)                     blocks along the tokens N
 *
 * Recipes (--fp8-recipe): delayed (per-tensor scale from an amax history,
 * updated once per step: tp_fp8_step_end), tensorwise (per-tensor current
 * scaling: the amax of the operand now, reduced over TP x CP), mxfp8 (1x32
 * blocks, E8M0 scales, along each GEMM's reduction dimension, so rowwise and
 * columnwise copies differ), blockwise (1x128 activation / gradient tiles,
 * 128x128 weight blocks, power-of-two scales).
 *
 * State: one tp_fp8_state per model chunk, made when the chunk is built
 * (model/model.c, from the tp_fp8_config of its build options): for each of
 * the chunk's fp8 layers four tp_fp8_gemm (qkv, proj, fc1, fc2), each with
 * three tensors (input, weight, output gradient) holding a delayed-scaling
 * scale and amax history. Layers kept in bf16 (--first-last-layers-bf16)
 * have none. Why the amax reductions make every layout the serial run's:
 * docs/fp8.md.
 *
 * Relies on nn/fp8.h, nn/nn.h (GEMMs), comm/ (amax reductions).
 * Does not: quantize the embedding, the LM head, norms, attention or the
 * experts of MoE layers (bf16 as in Megatron's default), store fp8 bytes
 * (the values are exact fp8 values held in fp32), or model fp8 speed. */
#ifndef MTC_TP_FP8_LINEAR_H
#define MTC_TP_FP8_LINEAR_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "core/result.h"
#include "grid/grid.h"
#include "nn/fp8.h"
#include "nn/nn.h"
#include "tp/layers.h"

typedef enum {
    TP_FP8_DELAYED = 0,
    TP_FP8_TENSORWISE,
    TP_FP8_MXFP8,
    TP_FP8_BLOCKWISE
} tp_fp8_recipe;
#define TP_FP8_NRECIPES 4
/* "delayed", "tensorwise", "mxfp8", "blockwise"; parse gives -1 for others */
const char *tp_fp8_recipe_name(tp_fp8_recipe r);
int tp_fp8_recipe_parse(const char *s);

typedef struct tp_fp8_config {
    int enabled;          /* --fp8-format given */
    int hybrid;           /* --fp8-format hybrid: E5M2 gradients (else e4m3: all E4M3) */
    tp_fp8_recipe recipe; /* --fp8-recipe */
    int margin;           /* --fp8-margin */
    int amax_history_len; /* --fp8-amax-history-len (>= 1) */
    int amax_max;         /* --fp8-amax-compute-algo max (else most_recent) */
    int wgrad;            /* fp8 weight-gradient GEMM (--no-fp8-wgrad: 0, bf16) */
    int tp_only_amax_red; /* --tp-only-amax-red: delayed amaxes reduced over TP only */
    int bf16_start;       /* layers [0, bf16_start) stay bf16 (--first-last-layers-bf16) */
    int bf16_end;         /* and the last bf16_end layers */
    int param_gather;     /* --fp8-param-gather (docs/fp8.md) */
} tp_fp8_config;

/* The operands of one linear layer. */
enum { TP_FP8_X = 0, TP_FP8_W, TP_FP8_G, TP_FP8_NOPS };
/* The linear layers of one transformer layer, in block.c's order. */
enum { TP_FP8_QKV = 0, TP_FP8_PROJ, TP_FP8_FC1, TP_FP8_FC2, TP_FP8_NLIN };

typedef struct {
    float scale; /* delayed: the current quantization scale (starts at 1) */
    float *hist; /* delayed: amax history (amax_history_len), [0] = this step's amax */
} tp_fp8_tensor;

/* What --metrics reports (summed / min-maxed over the world at step end). */
typedef struct {
    double sat[TP_FP8_NOPS];  /* values clipped at the format's maximum, per operand */
    float sinv_min, sinv_max; /* dequantization scales (scale_inv) used this step */
} tp_fp8_stats;

struct tp_fp8_state;
typedef struct tp_fp8_gemm {
    struct tp_fp8_state *st;
    tp_fp8_tensor t[TP_FP8_NOPS];
    int column; /* column-parallel (qkv, fc1), else row-parallel */
} tp_fp8_gemm;

typedef struct tp_fp8_state {
    tp_fp8_config cfg;
    int first_layer, last_layer; /* the chunk's layers */
    tp_fp8_gemm *lin;            /* [(last - first) * TP_FP8_NLIN]; a bf16 layer's are unused */
    unsigned char *is_fp8;       /* [last - first] */
    float *hist;                 /* every tensor's history */
    float *wq;                   /* (wcap) the quantized weight */
    size_t wcap;
    mtc_comm_t cur_comm;    /* tensorwise amaxes: TP x CP (NULL: one rank) */
    mtc_comm_t amax_comm;   /* delayed amaxes: TP x DP x CP, or TP (NULL: one rank) */
    mtc_comm_t weight_comm; /* a weight's pieces (every TP shard's distributed-optimizer
                               shards): TP x DP x CP, --fp8-param-gather's per-tensor amaxes
                               (dp/distopt_fp8.h; NULL: one rank) */
    int tp_rank;
    int recording; /* a training pass: delayed amaxes are recorded */
    int w_cast;    /* --fp8-param-gather (dp/distopt_fp8.h): the weights given are fp8 values
                      already, cast with this state's scales; used as they are (no weight
                      amax, no weight quantization: TE's fp8 parameters) */
    tp_fp8_stats stats;
} tp_fp8_state;

/* The context of linear k (TP_FP8_QKV ...) of a layer whose fp8 linears
 * are fp8 (NULL: tp itself): a copy of tp in *tmp pointing at it. */
static inline const tp_ctx *tp_fp8_ctx(tp_ctx *tmp, const tp_ctx *tp, tp_fp8_gemm *fp8, int k) {
    if (!fp8) return tp;
    *tmp = *tp;
    tmp->fp8 = fp8 + k;
    return tmp;
}

/* Builds the chunk's state: layers [first, last) of num_layers, the widest
 * local weight wmax floats. grid NULL: serial. */
mtc_result_t tp_fp8_state_init(tp_fp8_state **out, const tp_fp8_config *cfg, mtc_grid_t grid,
                               int num_layers, int first, int last, size_t wmax);
void tp_fp8_state_free(tp_fp8_state *st);
/* Layer l's four linears, or NULL (no state, or a bf16 layer). */
tp_fp8_gemm *tp_fp8_layer(tp_fp8_state *st, int l);
/* 1 when global layer l of num_layers runs in fp8 under cfg. */
int tp_fp8_layer_is_fp8(const tp_fp8_config *cfg, int num_layers, int l);

/* Forward GEMM: out (N, OUT) = q(x) (N, IN) · q(w) (OUT, IN)ᵀ + b, fp32
 * (not rounded). xq (N*IN floats) and the state's wq are scratch.
 * comm: tensorwise: all-reduce MAX(TP x CP) of the two amaxes. */
mtc_result_t tp_fp8_forward(tp_fp8_gemm *g, nn_pool *pool, float *out, float *xq, const float *x,
                            const float *w, const float *b, int N, int IN, int OUT);
/* Backward GEMMs: dinp (N, IN) = q(dout) · q(w) (or NULL); dw (OUT, IN) +=
 * q(dout)ᵀ · q(x) (or NULL; with --no-fp8-wgrad on the plain values given);
 * db not touched (the caller's). gq (N*OUT), xq (N*IN) scratch. dinp may
 * be x itself (the weight gradient is taken first).
 * comm: tensorwise: all-reduce MAX(TP x CP) of the amaxes it needs. */
mtc_result_t tp_fp8_backward(tp_fp8_gemm *g, nn_pool *pool, float *dinp, float *dw, float *gq,
                             float *xq, const float *dout, const float *x, const float *w, int N,
                             int IN, int OUT);

/* After a training step's last backward, every rank of the chunk's amax
 * group: the delayed amaxes all-reduced (MAX over amax_comm), then TE's
 * update of each tensor (roll the history, amax = max or most recent,
 * scale = fmax / 2^margin / amax when finite and > 0). Other recipes: none.
 * comm: all-reduce MAX(amax group). */
mtc_result_t tp_fp8_step_end(tp_fp8_state *st);
/* TE's delayed-scaling update of one tensor, on its own (tests). */
void tp_fp8_delayed_update(float *scale, float *hist, int len, int amax_max, float scaled_max);
/* Zeroes the stats (a step's start). */
void tp_fp8_stats_reset(tp_fp8_state *st);

/* Checkpoint: the delayed state of layer l (global) as 4 x 3 x (1 + len)
 * floats [scale, hist...] per linear and tensor; tp_fp8_state_floats is
 * that size. get leaves dst untouched for a layer not held. */
size_t tp_fp8_layer_floats(const tp_fp8_config *cfg);
int tp_fp8_layer_get(const tp_fp8_state *st, int l, float *dst);
int tp_fp8_layer_set(tp_fp8_state *st, int l, const float *src);

#endif
