/* train/train_micro.c - the microbatches of one global batch on one rank:
 * this DP rank's share of the batch (Megatron's sampler), the pass of each
 * microbatch (dropout keys, loss scale, the DDP's and the distributed
 * optimizer's hooks), activation slots per model chunk, and the forward /
 * backward callbacks the pipeline executor calls (called directly without
 * pipelining). Also evaluation. Relies on model/, pp/, dp/, data/. Does not
 * reduce gradients or step the optimizer (train_step.c). */
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/timer.h"
#include "core/trace.h"
#include "dp/fsdp.h"
#include "train/train_internal.h"

/* Fill tokens/targets of this DP rank's microbatch m of the global batch at
 * `consumed` (rows m*B .. m*B+B-1 of the buffers); with context
 * parallelism only this CP rank's positions (its two chunks, Megatron's
 * get_batch_on_this_cp_rank), tokens and shifted labels alike. */
static mtc_result_t train_load_batch(train_rank *x, data_split split, uint64_t consumed, int m) {
    int B = x->cfg->micro_batch, T = x->T_rank;
    for (int j = 0; j < B; j++) {
        uint64_t idx = data_sample_index(consumed, m, x->dp_rank, j, B, x->dp_size);
        MTC_CHECK(data_source_sample(x->src, split, idx, x->buf));
        size_t at = ((size_t)m * B + j) * T;
        for (int t = 0; t < T; t++) {
            int p = x->pos ? x->pos[t] : t;
            x->tokens[at + t] = x->buf[p], x->targets[at + t] = x->buf[p + 1];
        }
    }
    return MTC_OK;
}

mtc_result_t train_dp_sum(train_rank *x, double *v) {
    mtc_comm_t rep = train_replicas(x);
    if (!rep) return MTC_OK;
    uint64_t t0 = mtc_time_ns();
    mtc_result_t rc = mtc_all_reduce(v, v, 1, MTC_DTYPE_F64, MTC_OP_SUM, rep);
    x->comm_ns += mtc_time_ns() - t0;
    return rc;
}

/* The DDP overlap hook: gradients of params [first, last) are final. */
static mtc_result_t train_grads_ready(void *ctx, int first, int last) {
    const train_chunk *ch = ctx; /* each buffer takes its own params of the range */
    for (int b = 0; b < TRAIN_GBUF_MAX; b++)
        if (ch->buf[b].ddp) MTC_CHECK(mtc_ddp_grads_ready(ch->buf[b].ddp, first, last));
    return train_fsdp_grads_ready(ch, first, last); /* Megatron-FSDP: every microbatch */
}

/* The forward's params_needed hook (ctx: the chunk): wait for the
 * all-gather of the buckets holding params [first, last), dense or expert. */
static mtc_result_t train_params_needed(void *ctx, int first, int last) {
    const train_chunk *ch = ctx;
    for (int p = first; p < last; p++) {
        if (p < 0) continue;
        for (int b = 0; b < TRAIN_GBUF_MAX; b++)
            if (ch->buf[b].dopt) MTC_CHECK(mtc_distopt_param_gather_wait_param(ch->buf[b].dopt, p));
    }
    return train_fsdp_params_needed(ch, first, last); /* optim_grads_params: gather the unit */
}

mtc_result_t train_params_wait(train_rank *x) {
    uint64_t t0 = mtc_time_ns();
    int any = 0;
    mtc_result_t rc = MTC_OK;
    /* comm: wait for the all-gather(intra) of every bucket */
    for (int k = 0; k < x->vpp && rc == MTC_OK; k++)
        for (int b = 0; b < x->nbuf && rc == MTC_OK; b++)
            if (x->chunks[k].buf[b].dopt)
                rc = mtc_distopt_param_gather_wait(x->chunks[k].buf[b].dopt), any = 1;
    if (rc == MTC_OK) rc = train_fsdp_gather_all(x);
    x->comm_ns += mtc_time_ns() - t0;
    if (any) train_obs_span(x, TRAIN_T_PARAMS_ALL_GATHER, t0, NULL, NULL);
    return rc;
}

/* The span of one microbatch's forward or backward on chunk k. */
static void train_obs_mb_span(train_rank *x, train_timer id, uint64_t t0, const char *what, int mb,
                              int k) {
    char name[64], args[64];
    if (!mtc_trace_recording(x->obs.trace)) {
        train_obs_span(x, id, t0, NULL, NULL);
        return;
    }
    snprintf(name, sizeof name, "%s mb %d chunk %d", what, mb, k);
    snprintf(args, sizeof args, "\"mb\": %d, \"chunk\": %d, \"train\": %d", mb, k, x->cur_train);
    train_obs_span(x, id, t0, name, args);
}

/* The pass of microbatch mb on chunk k in the running step (or evaluation). */
static mtc_model_pass train_pass(const train_rank *x, int k, int mb) {
    const mtc_train_config *c = x->cfg;
    const train_chunk *ch = &x->chunks[k];
    /* --fp16: the loss is multiplied by the loss scale (a power of 2 with the
     * dynamic scaler, so the product is exact) */
    float scale = 1.0f / ((float)x->cur_batch * (float)c->model.seq_length) * x->loss_scale;
    int last = mb == x->nmb - 1;
    mtc_model_pass pass = {
        .train = x->cur_train,
        .seed = c->seed,
        .iteration = (uint64_t)x->cur_it,
        .b0 = (int)data_sample_index(0, mb, x->dp_rank, 0, c->micro_batch, x->dp_size),
        .loss_scale = x->cur_train ? scale : 0.0f,
        .first_microbatch = mb == 0,
        .grads_ready = x->cur_train && ((last && c->overlap_grad_reduce && train_reduces(x)) ||
                                        train_fsdp_grads(c))
                           ? train_grads_ready
                           : NULL,
        .grads_ready_ctx = (void *)ch,
        /* --overlap-param-gather: wait per param group in the forward */
        .params_needed =
            (c->use_distributed_optimizer && c->overlap_param_gather) || train_fsdp_grads(c)
                ? train_params_needed
                : NULL,
        .params_needed_ctx = (void *)ch,
        .zero_grad = train_fsdp_grads(c) ? train_fsdp_zero_grad : NULL, /* the shards only */
        .zero_grad_ctx = (void *)ch};
    return pass;
}

/* Activation slots of a chunk: taken by a microbatch's forward and released
 * after its backward (after the forward when evaluating), so a chunk holds
 * only its in-flight microbatches (nslots = the schedule's peak, set up in
 * train_setup.c). Without pipelining: always slot 0. */
static mtc_result_t train_slot_take(train_rank *x, int k, int mb, int *slot) {
    train_chunk *ch = &x->chunks[k];
    *slot = 0;
    if (!x->ex) return MTC_OK;
    for (int s = 0; s < ch->model->nslots; s++)
        if (!ch->slot_busy[s]) {
            ch->slot_busy[s] = 1, ch->slot_of[mb] = *slot = s;
            return MTC_OK;
        }
    return mtc_error(MTC_ERR_INTERNAL,
                     "chunk %d has no free activation slot for microbatch %d (%d slots in flight)",
                     k, mb, ch->model->nslots);
}

static void train_slot_release(train_rank *x, int k, int mb) {
    train_chunk *ch = &x->chunks[k];
    if (!x->ex) return;
    if (ch->slot_of[mb] >= 0) ch->slot_busy[ch->slot_of[mb]] = 0;
    ch->slot_of[mb] = -1;
}

/* Forward of microbatch mb on chunk k (the pipeline executor's callback).
 * input: the previous stage's activation (NULL on the first stage);
 * output: filled for the next stage (NULL on the last, which adds its loss
 * to mb_loss_sum). */
static mtc_result_t train_forward_cb(void *ctx, int mb, int k, const float *input, float *output) {
    train_rank *x = ctx;
    mtc_model *m = x->chunks[k].model;
    int B = x->cfg->micro_batch, T = x->T_rank, slot = 0;
    uint64_t t0 = mtc_time_ns();
    MTC_CHECK(train_slot_take(x, k, mb, &slot));
    size_t at = (size_t)mb * B * T;
    if (input)
        memcpy(mtc_model_slot_input(m, slot), input, mtc_model_input_floats(m) * sizeof(float));
    mtc_model_pass pass = train_pass(x, k, mb);
    train_fsdp_begin_pass(x, &x->chunks[k], 0);
    x->mb_loss_sum += mtc_model_forward(m, slot, x->tokens + at, x->targets + at, B, T, &pass);
    MTC_CHECK(m->error);
    if (output)
        memcpy(output, mtc_model_slot_output(m, slot), mtc_model_output_floats(m) * sizeof(float));
    if (!x->cur_train) train_slot_release(x, k, mb);
    train_obs_mb_span(x, TRAIN_T_FORWARD_COMPUTE, t0, "forward", mb, k);
    return MTC_OK;
}

static mtc_result_t train_backward_cb(void *ctx, int mb, int k, const float *output_grad,
                                      float *input_grad) {
    train_rank *x = ctx;
    const mtc_train_config *c = x->cfg;
    mtc_model *m = x->chunks[k].model;
    int B = c->micro_batch, T = x->T_rank;
    int slot = x->ex ? x->chunks[k].slot_of[mb] : 0;
    uint64_t t0 = mtc_time_ns();
    if (slot < 0)
        return mtc_error(MTC_ERR_INTERNAL, "backward of microbatch %d chunk %d before its forward",
                         mb, k);
    size_t at = (size_t)mb * B * T;
    /* the mean over every token of the global batch (all CP ranks' rows),
     * times the --fp16 loss scale */
    float scale = 1.0f / ((float)x->cur_batch * (float)c->model.seq_length) * x->loss_scale;
    if (output_grad)
        memcpy(mtc_model_grad_buffer(m), output_grad, mtc_model_output_floats(m) * sizeof(float));
    mtc_model_pass pass = train_pass(x, k, mb);
    train_fsdp_begin_pass(x, &x->chunks[k], 1);
    MTC_CHECK(mtc_model_backward(m, slot, x->tokens + at, x->targets + at, B, T, scale, &pass));
    if (input_grad)
        memcpy(input_grad, mtc_model_grad_buffer(m), mtc_model_input_floats(m) * sizeof(float));
    train_slot_release(x, k, mb);
    train_obs_mb_span(x, TRAIN_T_BACKWARD_COMPUTE, t0, "backward", mb, k);
    return MTC_OK;
}

mtc_result_t train_microbatches(train_rank *x, data_split split, uint64_t consumed, int train,
                                int64_t it, double *loss_sum) {
    x->cur_it = it, x->cur_train = train, x->mb_loss_sum = 0;
    for (int k = 0; k < x->vpp; k++) { /* --bf16 / --fp16: copies from the params as they are now */
        mtc_model *m = x->chunks[k].model;
        mtc_model_params_changed(m);
        for (int d = 0; d < m->mtp_losses; d++) /* the MTP depths' losses of this pass */
            m->mtp_loss_sum[d] = 0;
    }
    uint64_t t_fb = mtc_time_ns();
    for (int m = 0; m < x->nmb; m++)
        MTC_CHECK(train_load_batch(x, split, consumed, m));
    train_obs_span(x, TRAIN_T_BATCH_GENERATOR, t_fb, NULL, NULL);
    if (x->ex) {
        pp_callbacks cb = {train_forward_cb, train_backward_cb, x, train_obs_exchanged};
        const mtc_train_config *c = x->cfg;
        int tr = train && c->trace_out && c->ntrace_out; /* each training step overwrites it */
        size_t max_ops = (size_t)2 * x->nmb * x->vpp;
        /* comm: p2p over PIPELINE_MODEL_PARALLEL_GROUP */
        MTC_CHECK(pp_executor_run(x->ex, &cb, !train,
                                  tr ? c->trace_out + (size_t)x->world_rank * max_ops : NULL,
                                  tr ? c->ntrace_out + x->world_rank : NULL));
    } else {
        for (int m = 0; m < x->nmb; m++) {
            MTC_CHECK(train_forward_cb(x, m, 0, NULL, NULL));
            if (train) MTC_CHECK(train_backward_cb(x, m, 0, NULL, NULL));
        }
    }
    *loss_sum = x->mb_loss_sum;
    if (!train) train_obs_span(x, TRAIN_T_FORWARD_BACKWARD, t_fb, "evaluation forward", NULL);
    return MTC_OK;
}

/* Mean validation loss over eval_iters global batches (the validation
 * iterator continues from one evaluation to the next, as Megatron's). */
mtc_result_t train_evaluate(train_rank *x, double *loss) {
    const mtc_train_config *c = x->cfg;
    int T = c->model.seq_length;
    double sum = 0;
    /* Megatron's eval_global_batch_size: --global-batch-size (by default
     * micro batch x dp), also under a --step-batch-size-schedule */
    MTC_CHECK(train_set_batch(x, c->global_batch));
    for (int it = 0; it < c->eval_iters; it++) {
        double s = 0;
        MTC_CHECK(train_microbatches(x, DATA_SPLIT_VALID, x->valid_consumed, 0, 0, &s));
        sum += s;
        x->valid_consumed += (uint64_t)c->global_batch;
    }
    MTC_CHECK(train_dp_sum(x, &sum));
    *loss = sum / ((double)c->eval_iters * c->global_batch * T);
    return MTC_OK;
}
