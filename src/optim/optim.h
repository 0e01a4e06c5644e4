/* optim/optim.h - learning-rate schedule, global-norm gradient clipping and
 * the AdamW step driver, with Megatron's semantics.
 *
 * LR and weight decay: Megatron's OptimizerParamScheduler
 * (megatron/core/optimizer_param_scheduler.py). It counts "steps" n: with
 * step_samples > 0 (what `mtc train` sets: the global batch, as Megatron's
 * scheduler.step(increment = global batch)) n = optimizer steps x
 * step_samples against the *_samples fields; with step_samples 0 n is the
 * optimizer step against the *_iters fields. With W warm-up, D decay steps:
 *   n <= W (W > 0):      init_lr + (lr - init_lr) * n / W
 *   constant:            lr
 *   n > D:               min_lr
 *   inverse-square-root: max(min_lr, lr * sqrt(max(W, 1)) / sqrt(max(n, 1)))
 *   else r = (n - W) / (D - W), lr_at = min_lr + coeff * (lr - min_lr) with
 *     linear 1 - r; cosine (1 + cos(pi r)) / 2; WSD: 1 until n <= D - S
 *     (S the WSD decay steps), then with q = (n - (D - S)) / S: linear 1 - q,
 *     cosine (1 + cos(pi q)) / 2, exponential 2 * 0.5^q - 1, minus_sqrt
 *     1 - sqrt(q).
 * Weight decay (get_wd): n > I (increment steps): end_wd; constant: end_wd;
 *   else q = n / I: start_wd + (end_wd - start_wd) * (linear q | cosine
 *   (1 + cos(pi (1 - q))) / 2).
 * `step` is the number of optimizer steps already taken, so iteration k
 * updates with lr_at(k - 1) and Megatron's log line shows lr_at(k).
 *
 * Clipping (clip_grad_norm_fp32): coeff = max / (norm + 1e-6), applied only
 * when < 1. Weight decay only on 2-D parameters (registry is_2d).
 * Work is split into fixed chunks run on the rank's nn_pool; sums are
 * combined in chunk order, so results do not depend on the thread count.
 * The gradient norm (mtc_grad_norm_plan) is one function for plain DP and
 * the distributed optimizer: the caller lists what the rank holds. */
#ifndef MTC_OPTIM_OPTIM_H
#define MTC_OPTIM_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/result.h"
#include "model/registry.h"
#include "nn/nn.h"

typedef enum {
    MTC_LR_CONSTANT = 0,
    MTC_LR_LINEAR,
    MTC_LR_COSINE,
    MTC_LR_INVERSE_SQRT,
    MTC_LR_WSD
} mtc_lr_style;
/* --lr-wsd-decay-style (Megatron's default: exponential) */
typedef enum {
    MTC_WSD_EXPONENTIAL = 0,
    MTC_WSD_LINEAR,
    MTC_WSD_COSINE,
    MTC_WSD_MINUS_SQRT
} mtc_wsd_style;
/* --weight-decay-incr-style */
typedef enum { MTC_WD_CONSTANT = 0, MTC_WD_LINEAR, MTC_WD_COSINE } mtc_wd_style;

typedef struct {
    double lr, min_lr;                 /* max_lr, min_lr */
    int64_t warmup_iters, decay_iters; /* steps when step_samples == 0 */
    mtc_lr_style style;
    /* the rest may stay zero */
    double init_lr;            /* --lr-warmup-init */
    int64_t wsd_decay_iters;   /* WSD annealing steps when step_samples == 0 */
    mtc_wsd_style wsd_style;   /* WSD's annealing shape */
    int64_t step_samples;      /* > 0: scheduler steps are samples, this many per optimizer step */
    double warmup_samples;     /* lr_warmup_steps (fractional with --lr-warmup-fraction) */
    int64_t decay_samples;     /* lr_decay_steps */
    int64_t wsd_decay_samples; /* wsd_decay_steps */
    mtc_wd_style wd_style;     /* weight decay increment; constant: the AdamW weight_decay */
    double start_wd, end_wd;
    int64_t wd_incr_iters, wd_incr_samples; /* wd_incr_steps (iterations / samples form) */
} mtc_lr_schedule;

/* "constant" | "linear" | "cosine" | "inverse-square-root" | "WSD"; -1 when unknown. */
int mtc_lr_style_parse(const char *s);
const char *mtc_lr_style_name(mtc_lr_style style);
/* "exponential" | "linear" | "cosine" | "minus_sqrt"; -1 when unknown. */
int mtc_wsd_style_parse(const char *s);
/* "constant" | "linear" | "cosine"; -1 when unknown. */
int mtc_wd_style_parse(const char *s);
/* Learning rate after `step` optimizer steps. */
double mtc_lr_at(const mtc_lr_schedule *s, int64_t step);
/* Weight decay after `step` optimizer steps; `wd` when wd_style is constant. */
double mtc_wd_at(const mtc_lr_schedule *s, int64_t step, double wd);
/* The same after n scheduler steps (Megatron's num_steps: samples when
 * step_samples > 0), for batch sizes that change between steps
 * (--step-batch-size-schedule: n = the sum of the batches of the steps
 * taken). */
double mtc_lr_at_n(const mtc_lr_schedule *s, double n);
double mtc_wd_at_n(const mtc_lr_schedule *s, double n, double wd);

typedef struct {
    float beta1, beta2, eps, weight_decay;
    int decoupled; /* --decoupled-lr given: the word embedding and output layer
                      (emb_or_out params) step at lr_decoupled (0: at the common lr) */
    float lr_decoupled;
} mtc_adamw_config;

typedef struct optim_chunk optim_chunk;

typedef struct {
    float *m, *v; /* moments, n floats each (huge-page blocks) */
    size_t n;
    int64_t step;        /* optimizer steps taken */
    optim_chunk *chunks; /* fixed work split over the flat buffer */
    int nchunks;
    /* --bf16 copies written in the same pass (NULL: none): after each
     * 16K-element chunk's update, while the chunk is in cache, copy16 =
     * bf16(params) and copy_c = the same values in fp32, the bits
     * model_lowp_refresh would make from params afterwards */
    mtc_bf16 *copy16;
    float *copy_c;
} mtc_adamw;

/* State for the flat buffer described by `reg` (reg->total floats). */
mtc_result_t mtc_adamw_init(mtc_adamw *opt, const mtc_registry *reg);
void mtc_adamw_free(mtc_adamw *opt);
/* One AdamW step at learning rate lr on grads * grad_scale (the clipping
 * factor, 1 for none; grads are read, not scaled in place); increments
 * step. */
void mtc_adamw_step(mtc_adamw *opt, nn_pool *pool, float *params, float *grads, float lr,
                    float grad_scale, const mtc_adamw_config *cfg);
/* ---- the global gradient norm -------------------------------------------------------- */

/* The gradient elements one rank counts in the global norm: the ranges it
 * holds (its whole buffers with plain DP, its shards with the distributed
 * optimizer), of one model chunk, minus what the registry says is
 * counted elsewhere (mtc_param_counted_here). Built once at set-up; the
 * sum runs over fixed 16K-element pieces in the order they were added, so
 * it does not depend on the pool size. The caller sums the result over the
 * groups that hold the rest (intra-instance DP with the distributed
 * optimizer, then MODEL_PARALLEL_GROUP). */
typedef struct {
    const float **base; /* (n) piece starts */
    size_t *len;        /* (n) */
    double *partial;    /* (n) */
    int n, cap;
} mtc_grad_norm_plan;

/* Counted by this rank: not a TP duplicate off TP rank 0, not a second copy
 * of a parameter (the last stage's tied embedding). */
static inline int mtc_param_counted_here(const mtc_param *p, int tp_rank) {
    return !(p->tp_duplicate && tp_rank != 0) && !p->shared_copy;
}
/* Add grads [0, n) (split into pieces); n = 0 adds nothing. */
mtc_result_t mtc_grad_norm_plan_add(mtc_grad_norm_plan *plan, const float *grads, size_t n);
/* Sum of squares of every piece (double, fixed order). */
double mtc_grad_norm_sumsq(mtc_grad_norm_plan *plan, nn_pool *pool);
/* The same added piece by piece to *sum: plans summed one after another
 * into one sum give the bits of one plan holding all their pieces. */
void mtc_grad_norm_sumsq_add(mtc_grad_norm_plan *plan, nn_pool *pool, double *sum);
void mtc_grad_norm_plan_free(mtc_grad_norm_plan *plan);
/* Megatron's clipping factor: max_norm / (norm + 1e-6) when that is < 1,
 * else 1; max_norm <= 0 disables clipping. */
float mtc_grad_clip_coeff(double norm, float max_norm);

#endif
