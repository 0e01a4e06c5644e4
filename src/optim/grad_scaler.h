/* optim/grad_scaler.h - Megatron's loss scalers for --fp16
 * (megatron/core/optimizer/grad_scaler.py): a constant one (--loss-scale S)
 * and the dynamic one (--initial-loss-scale, --min-loss-scale,
 * --loss-scale-window, --hysteresis; growth factor 2, backoff 0.5).
 *
 * The loss is multiplied by `scale` before backward; the optimizer
 * multiplies the gradients by 1/scale (inv_scale, rounded as Megatron's
 * double reciprocal cast to float) and skips the step when any is inf or
 * NaN. Then mtc_grad_scaler_update(found_inf):
 *   found:     growth_tracker = 0; hysteresis_tracker -= 1;
 *              if hysteresis_tracker <= 0: scale = max(scale * 0.5, min_scale)
 *   not found: growth_tracker += 1; when it reaches the window:
 *              growth_tracker = 0, hysteresis_tracker = hysteresis, scale *= 2
 * All in fp32 as Megatron's tensors are. The constant scaler never moves.
 * Does not: look at gradients (train/ does) or communicate. */
#ifndef MTC_OPTIM_GRAD_SCALER_H
#define MTC_OPTIM_GRAD_SCALER_H

#include "core/result.h"

typedef struct {
    int dynamic;
    float scale, min_scale, growth_factor, backoff_factor;
    int growth_interval, hysteresis;
    int growth_tracker, hysteresis_tracker;
    int stuck_skips, zero_steps; /* mtc_grad_scaler_watch's runs */
} mtc_grad_scaler;

/* Megatron's defaults: initial 2^32, min 1, window 1000, hysteresis 2. */
#define MTC_LOSS_SCALE_INITIAL 4294967296.0
#define MTC_LOSS_SCALE_MIN 1.0
#define MTC_LOSS_SCALE_WINDOW 1000
#define MTC_LOSS_SCALE_HYSTERESIS 2

/* INVALID_ARGUMENT (naming the flag) for Megatron's asserts: scales > 0,
 * min <= initial, window > 0, hysteresis > 0. */
mtc_result_t mtc_grad_scaler_init_dynamic(mtc_grad_scaler *s, double initial_scale,
                                          double min_scale, int window, int hysteresis);
mtc_result_t mtc_grad_scaler_init_constant(mtc_grad_scaler *s, double scale);
void mtc_grad_scaler_update(mtc_grad_scaler *s, int found_inf);
/* Loss-scale sanity (mtc's own: Megatron warns about neither case). A
 * constant --loss-scale below 2^-24 is refused by init_constant: the
 * backward's seed, at most scale per token, is below fp16's smallest
 * subnormal, so every gradient is zero. At run time, call watch after
 * update with the step's found_inf and its unscaled gradient norm: when
 * MTC_LOSS_SCALE_BAD_STEPS steps in a row are skipped at a scale that cannot
 * fall (constant, or dynamic at --min-loss-scale), or have a gradient of
 * exactly zero (underflow), it returns INVALID_ARGUMENT with a message
 * naming the scale and the fix, and the run stops instead of training
 * nothing. The norm is the same on every rank, so every rank stops at once. */
#define MTC_LOSS_SCALE_BAD_STEPS 10
mtc_result_t mtc_grad_scaler_watch(mtc_grad_scaler *s, int found_inf, double grad_norm);
/* 1/scale as Megatron's inv_scale: the double reciprocal rounded to float. */
float mtc_grad_scaler_inv_scale(const mtc_grad_scaler *s);

#endif
