/* optim/grad_scaler.c - Megatron's constant and dynamic loss scalers; see
 * grad_scaler.h for the rules. */
#include "optim/grad_scaler.h"

#include <string.h>

mtc_result_t mtc_grad_scaler_init_dynamic(mtc_grad_scaler *s, double initial_scale,
                                          double min_scale, int window, int hysteresis) {
    memset(s, 0, sizeof *s);
    if (!(initial_scale > 0) || (float)initial_scale > 3.4e38f)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "initial-loss-scale=%g must be a positive finite float (Megatron's "
                         "default is 4294967296)",
                         initial_scale);
    if (!(min_scale > 0) || min_scale > initial_scale)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "min-loss-scale=%g must be > 0 and <= initial-loss-scale=%g", min_scale,
                         initial_scale);
    if (window < 1)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "loss-scale-window=%d must be >= 1", window);
    if (hysteresis < 1)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "hysteresis=%d must be >= 1", hysteresis);
    s->dynamic = 1;
    s->scale = (float)initial_scale;
    s->min_scale = (float)min_scale;
    s->growth_factor = 2.0f;
    s->backoff_factor = 0.5f;
    s->growth_interval = window;
    s->hysteresis = hysteresis;
    s->hysteresis_tracker = hysteresis;
    return MTC_OK;
}

mtc_result_t mtc_grad_scaler_init_constant(mtc_grad_scaler *s, double scale) {
    memset(s, 0, sizeof *s);
    if (!(scale > 0) || (float)scale > 3.4e38f)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "loss-scale=%g must be a positive finite float (a power of 2 is usual)",
                         scale);
    if (scale < 0x1p-24)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "loss-scale=%g is below 2^-24, fp16's smallest value: every scaled "
                         "gradient would be zero (use a power of 2 >= 1, or drop --loss-scale "
                         "for the dynamic scaler)",
                         scale);
    s->scale = (float)scale;
    return MTC_OK;
}

mtc_result_t mtc_grad_scaler_watch(mtc_grad_scaler *s, int found_inf, double grad_norm) {
    int stuck = found_inf && (!s->dynamic || s->scale <= s->min_scale);
    s->stuck_skips = stuck ? s->stuck_skips + 1 : 0;
    s->zero_steps = !found_inf && grad_norm == 0 ? s->zero_steps + 1 : 0;
    if (s->stuck_skips >= MTC_LOSS_SCALE_BAD_STEPS)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "the last %d iterations were all skipped for inf/NaN gradients at loss "
                         "scale %g, which %s: lower --loss-scale%s",
                         s->stuck_skips, (double)s->scale,
                         s->dynamic ? "is --min-loss-scale" : "is constant",
                         s->dynamic ? " / --min-loss-scale, or the learning rate"
                                    : " or drop it for the dynamic scaler");
    if (s->zero_steps >= MTC_LOSS_SCALE_BAD_STEPS)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "the last %d iterations had a gradient norm of exactly 0 at loss scale "
                         "%g: the scaled gradients underflow fp16 (raise --loss-scale or use the "
                         "dynamic scaler)",
                         s->zero_steps, (double)s->scale);
    return MTC_OK;
}

void mtc_grad_scaler_update(mtc_grad_scaler *s, int found_inf) {
    if (!s->dynamic) return;
    if (found_inf) {
        s->growth_tracker = 0;
        s->hysteresis_tracker -= 1;
        if (s->hysteresis_tracker <= 0) {
            float down = s->scale * s->backoff_factor;
            s->scale = down > s->min_scale ? down : s->min_scale;
        }
    } else {
        s->growth_tracker += 1;
        if (s->growth_tracker == s->growth_interval) {
            s->growth_tracker = 0;
            s->hysteresis_tracker = s->hysteresis;
            s->scale = s->scale * s->growth_factor;
        }
    }
}

float mtc_grad_scaler_inv_scale(const mtc_grad_scaler *s) {
    return (float)(1.0 / (double)s->scale);
}
