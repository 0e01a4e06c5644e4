/* train/train_tb.c - Megatron's TensorBoard scalars from mtc train's loop
 * (training.py's training_log and evaluate_and_print_results of core
 * v0.18), written by the last rank (the one that logs) through
 * train/tensorboard.h:
 *   every --tensorboard-log-interval iterations: learning-rate, batch-size,
 *     lm loss, loss-scale (unless --no-log-loss-scale-to-tensorboard; 1.0
 *     without a scaler, as Megatron), grad-norm (not for a skipped step),
 *     world-size (--log-world-size-to-tensorboard), each also "... vs
 *     samples" against the consumed samples; num-zeros and params-norm with
 *     --log-num-zeros-in-grad / --log-params-norm; with --log-memory-to-tensorboard
 *     mem-reserved-bytes (the resident set), mem-allocated-bytes and
 *     mem-max-allocated-bytes (the rank's buffers: allocated once);
 *   at each log line with --log-timers-to-tensorboard: iteration-time (s),
 *     throughput (TFLOP/s per rank) and each timer "<name>-time" (the
 *     maximum over ranks in seconds per iteration, train_obs.c);
 *   at each evaluation: "lm loss validation" (and "... ppl" with
 *     --log-validation-ppl-to-tensorboard), each with "vs samples".
 * Megatron's mem-allocated-count (CUDA allocations) has no mtc equivalent
 * and is not written. */
#include <math.h>
#include <stdio.h>

#include "core/mem.h"
#include "train/tensorboard.h"
#include "train/train_internal.h"

static mtc_result_t pair(mtc_tb *w, const char *tag, double v, int64_t it, uint64_t consumed) {
    char vs[160];
    snprintf(vs, sizeof vs, "%s vs samples", tag);
    MTC_CHECK(mtc_tb_scalar(w, tag, v, it));
    return mtc_tb_scalar(w, vs, v, (int64_t)consumed);
}

mtc_result_t train_tb_step(train_rank *x, int64_t it, uint64_t consumed, double loss, double norm,
                           int skipped, double lr, int world, size_t alloc_bytes) {
    const mtc_tb_flags *f = &x->cfg->tensorboard;
    mtc_tb *w = x->obs.tb;
    if (!w || it % (f->log_interval > 0 ? f->log_interval : 1)) return MTC_OK;
    MTC_CHECK(pair(w, "learning-rate", lr, it, consumed));
    MTC_CHECK(pair(w, "batch-size", (double)x->cur_batch, it, consumed));
    MTC_CHECK(pair(w, "lm loss", loss, it, consumed));
    if (!f->no_log_loss_scale) MTC_CHECK(pair(w, "loss-scale", x->loss_scale, it, consumed));
    if (f->log_world_size) MTC_CHECK(pair(w, "world-size", world, it, consumed));
    if (!skipped && isfinite(norm)) MTC_CHECK(pair(w, "grad-norm", norm, it, consumed));
    if (x->cfg->log_num_zeros && x->num_zeros >= 0)
        MTC_CHECK(pair(w, "num-zeros", x->num_zeros, it, consumed));
    if (x->cfg->log_params_norm) MTC_CHECK(pair(w, "params-norm", x->params_norm, it, consumed));
    if (f->log_memory) {
        MTC_CHECK(mtc_tb_scalar(w, "mem-reserved-bytes", mtc_mem_proc_status("VmRSS"), it));
        MTC_CHECK(mtc_tb_scalar(w, "mem-allocated-bytes", (double)alloc_bytes, it));
        MTC_CHECK(mtc_tb_scalar(w, "mem-max-allocated-bytes", (double)alloc_bytes, it));
    }
    return MTC_OK;
}

mtc_result_t train_tb_log(train_rank *x, int64_t it, double iter_s, double tflops) {
    mtc_tb *w = x->obs.tb;
    if (!w) return MTC_OK;
    if (x->cfg->tensorboard.log_timers) {
        MTC_CHECK(mtc_tb_scalar(w, "iteration-time", iter_s, it));
        MTC_CHECK(mtc_tb_scalar(w, "throughput", tflops, it));
    }
    return mtc_tb_flush(w);
}

mtc_result_t train_tb_timer(train_rank *x, const char *name, double max_ms) {
    mtc_tb *w = x->obs.tb;
    if (!w || !x->cfg->tensorboard.log_timers) return MTC_OK;
    char tag[96];
    snprintf(tag, sizeof tag, "%s-time", name);
    return mtc_tb_scalar(w, tag, max_ms * 1e-3, x->iteration);
}

mtc_result_t train_tb_eval(train_rank *x, int64_t it, uint64_t consumed, double vloss) {
    mtc_tb *w = x->obs.tb;
    if (!w) return MTC_OK;
    MTC_CHECK(pair(w, "lm loss validation", vloss, it, consumed));
    if (x->cfg->tensorboard.log_validation_ppl)
        MTC_CHECK(pair(w, "lm loss validation ppl", exp(fmin(20, vloss)), it, consumed));
    return mtc_tb_flush(w);
}
