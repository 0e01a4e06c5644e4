/* optim/optim.h - learning-rate schedule, global-norm gradient clipping and
 * the AdamW step driver, with Megatron's semantics.
 *
 * LR (megatron/core/optimizer_param_scheduler.py, iteration-based):
 *   step <= warmup (warmup > 0):  lr * step / warmup
 *   constant:                     lr
 *   step > decay_iters:           min_lr
 *   else r = (step - warmup) / (decay_iters - warmup),
 *        linear: min + (lr - min)(1 - r);  cosine: min + (lr - min)(1 + cos(pi r))/2
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

#include "core/result.h"
#include "model/registry.h"
#include "nn/nn.h"

typedef enum { MTC_LR_CONSTANT = 0, MTC_LR_LINEAR, MTC_LR_COSINE } mtc_lr_style;

typedef struct {
    double lr, min_lr;
    int64_t warmup_iters, decay_iters;
    mtc_lr_style style;
} mtc_lr_schedule;

/* "constant" | "linear" | "cosine"; -1 when unknown. */
int mtc_lr_style_parse(const char *s);
double mtc_lr_at(const mtc_lr_schedule *s, int64_t step);

typedef struct {
    float beta1, beta2, eps, weight_decay;
} mtc_adamw_config;

typedef struct optim_chunk optim_chunk;

typedef struct {
    float *m, *v; /* moments, n floats each (huge-page blocks) */
    size_t n;
    int64_t step;        /* optimizer steps taken */
    optim_chunk *chunks; /* fixed work split over the flat buffer */
    int nchunks;
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
 * optimizer), over every model chunk, minus what the registry says is
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
void mtc_grad_norm_plan_free(mtc_grad_norm_plan *plan);
/* Megatron's clipping factor: max_norm / (norm + 1e-6) when that is < 1,
 * else 1; max_norm <= 0 disables clipping. */
float mtc_grad_clip_coeff(double norm, float max_norm);

#endif
