/* train/train_step.c - one rank's side of training: building the grid,
 * model chunk, DDP and optimizer; an iteration (microbatches directly, or
 * through the pipeline executor with pp > 1), the gradient reductions in
 * Megatron's order (DP buckets, TP all-reduce of sequence-parallel
 * gradients, EMBEDDING_GROUP all-reduce of the tied wte), the global norm
 * (TP duplicates and the last stage's wte copy counted once), AdamW;
 * evaluation, and gathering / loading / saving the global model. Relies on
 * model/, dp/, pp/, grid/, comm/, optim/, data/. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/timer.h"
#include "model/checkpoint.h"
#include "train/train_internal.h"

/* Fill tokens/targets of this DP rank's microbatch m of the global batch at
 * `consumed` (rows m*B .. m*B+B-1 of the buffers). */
static mtc_result_t train_load_batch(train_rank *x, data_split split, uint64_t consumed, int m) {
    int B = x->cfg->micro_batch, T = x->cfg->model.seq_length;
    for (int j = 0; j < B; j++) {
        uint64_t idx = data_sample_index(consumed, m, x->dp_rank, j, B, x->dp_size);
        MTC_CHECK(data_source_sample(x->src, split, idx, x->buf));
        size_t at = ((size_t)m * B + j) * T;
        memcpy(x->tokens + at, x->buf, (size_t)T * sizeof(int));
        memcpy(x->targets + at, x->buf + 1, (size_t)T * sizeof(int));
    }
    return MTC_OK;
}

static int train_b0(const train_rank *x, int m) {
    return (int)data_sample_index(0, m, x->dp_rank, 0, x->cfg->micro_batch, x->dp_size);
}

/* Sum a double over the DP group (every TP rank already holds the same). */
static mtc_result_t train_dp_sum(train_rank *x, double *v) {
    if (!x->dp) return MTC_OK;
    uint64_t t0 = mtc_time_ns();
    mtc_result_t rc = mtc_all_reduce(v, v, 1, MTC_DTYPE_F64, MTC_OP_SUM, x->dp);
    x->comm_ns += mtc_time_ns() - t0;
    return rc;
}

static int train_b0(const train_rank *x, int m);
static mtc_result_t train_grads_ready(void *ctx, int first, int last);

/* The pass of microbatch mb in the running step (or evaluation). */
static mtc_gpt_pass train_pass(const train_rank *x, int mb) {
    const mtc_train_config *c = x->cfg;
    float scale = 1.0f / ((float)c->global_batch * (float)c->model.seq_length);
    int last = mb == x->nmb - 1;
    mtc_gpt_pass pass = {.train = x->cur_train, .seed = c->seed, .iteration = (uint64_t)x->cur_it,
                         .b0 = train_b0(x, mb), .loss_scale = x->cur_train ? scale : 0.0f,
                         .first_microbatch = mb == 0,
                         .grads_ready = x->cur_train && last && c->overlap_grad_reduce && x->dp
                                            ? train_grads_ready : NULL,
                         .grads_ready_ctx = x->ddp};
    return pass;
}

/* Forward of microbatch mb on this rank's chunk (the pipeline executor's
 * callback; called directly without pipelining). input: the previous
 * stage's activation (NULL on the first stage); output: filled for the next
 * stage (NULL on the last, which adds its loss to mb_loss_sum). */
static mtc_result_t train_forward_cb(void *ctx, int mb, int chunk, const float *input,
                                     float *output) {
    (void)chunk;
    train_rank *x = ctx;
    int B = x->cfg->micro_batch, T = x->cfg->model.seq_length, slot = x->ex ? mb : 0;
    size_t at = (size_t)mb * B * T;
    if (input) memcpy(mtc_gpt_slot_input(x->model, slot), input, x->msg_count * sizeof(float));
    mtc_gpt_pass pass = train_pass(x, mb);
    x->mb_loss_sum += mtc_gpt_forward(x->model, slot, x->tokens + at, x->targets + at, B, T, &pass);
    MTC_CHECK(x->model->error);
    if (output)
        memcpy(output, mtc_gpt_slot_output(x->model, slot), x->msg_count * sizeof(float));
    return MTC_OK;
}

static mtc_result_t train_backward_cb(void *ctx, int mb, int chunk, const float *output_grad,
                                      float *input_grad) {
    (void)chunk;
    train_rank *x = ctx;
    const mtc_train_config *c = x->cfg;
    int B = c->micro_batch, T = c->model.seq_length, slot = x->ex ? mb : 0;
    size_t at = (size_t)mb * B * T;
    float scale = 1.0f / ((float)c->global_batch * (float)T);
    if (output_grad)
        memcpy(mtc_gpt_grad_buffer(x->model), output_grad, x->msg_count * sizeof(float));
    mtc_gpt_pass pass = train_pass(x, mb);
    MTC_CHECK(mtc_gpt_backward(x->model, slot, x->tokens + at, x->targets + at, B, T, scale,
                               &pass));
    if (input_grad)
        memcpy(input_grad, mtc_gpt_grad_buffer(x->model), x->msg_count * sizeof(float));
    return MTC_OK;
}

/* Every microbatch of one global batch: through the pipeline executor, or
 * forward then backward per microbatch. Returns this rank's loss sum. */
static mtc_result_t train_microbatches(train_rank *x, data_split split, uint64_t consumed,
                                       int train, int64_t it, double *loss_sum) {
    for (int m = 0; m < x->nmb; m++) MTC_CHECK(train_load_batch(x, split, consumed, m));
    MTC_CHECK(train_distopt_wait(x)); /* --overlap-param-gather: params arrive here */
    x->cur_it = it, x->cur_train = train, x->mb_loss_sum = 0;
    if (x->ex) {
        pp_callbacks cb = {train_forward_cb, train_backward_cb, x};
        /* comm: p2p over PIPELINE_MODEL_PARALLEL_GROUP */
        MTC_CHECK(pp_executor_run(x->ex, &cb, !train, NULL, NULL));
    } else {
        for (int m = 0; m < x->nmb; m++) {
            MTC_CHECK(train_forward_cb(x, m, 0, NULL, NULL));
            if (train) MTC_CHECK(train_backward_cb(x, m, 0, NULL, NULL));
        }
    }
    *loss_sum = x->mb_loss_sum;
    return MTC_OK;
}

/* Mean validation loss over eval_iters global batches (the validation
 * iterator continues from one evaluation to the next, as Megatron's). */
mtc_result_t train_evaluate(train_rank *x, double *loss) {
    const mtc_train_config *c = x->cfg;
    int T = c->model.seq_length;
    double sum = 0;
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

/* The DDP overlap hook: gradients of params [first, last) are final. */
static mtc_result_t train_grads_ready(void *ctx, int first, int last) {
    return mtc_ddp_grads_ready((mtc_ddp *)ctx, first, last);
}

/* Under SP, sum the layer-norm and row-parallel-bias gradients (partial
 * over the rank's tokens) over TP: one packed all-reduce. */
static mtc_result_t train_sp_reduce(train_rank *x) {
    if (!x->sp_n) return MTC_OK;
    const mtc_registry *r = &x->model->reg;
    float *g = x->model->grads;
    size_t k = 0;
    for (int i = 0; i < r->count; i++)
        if (r->params[i].reduce_groups & MTC_REDUCE_TP) {
            memcpy(x->sp_buf + k, g + r->params[i].offset, r->params[i].local_numel * sizeof(float));
            k += r->params[i].local_numel;
        }
    uint64_t t0 = mtc_time_ns();
    /* comm: all-reduce(tp) */
    MTC_CHECK(mtc_all_reduce(x->sp_buf, x->sp_buf, x->sp_n, MTC_DTYPE_F32, MTC_OP_SUM, x->tp));
    x->comm_ns += mtc_time_ns() - t0;
    k = 0;
    for (int i = 0; i < r->count; i++)
        if (r->params[i].reduce_groups & MTC_REDUCE_TP) {
            memcpy(g + r->params[i].offset, x->sp_buf + k, r->params[i].local_numel * sizeof(float));
            k += r->params[i].local_numel;
        }
    return MTC_OK;
}

/* Gather the TP shards and pipeline stages into `global` (serial layout)
 * on every rank. */
mtc_result_t train_gather(train_rank *x, float *global) {
    MTC_CHECK(train_distopt_wait(x));
    const mtc_registry *r = &x->model->reg;
    size_t big = 0;
    for (int i = 0; i < r->count; i++)
        if (r->params[i].local_numel > big) big = r->params[i].local_numel;
    float *scratch;
    MTC_CHECK(mtc_mem_alloc(big * (size_t)x->model->tp_size * sizeof(float), (void **)&scratch));
    memset(global, 0, r->global_total * sizeof(float));
    /* comm: all-gather(tp) per split parameter */
    mtc_result_t rc = mtc_gpt_gather(x->model, global, x->model->params, scratch);
    free(scratch);
    MTC_CHECK(rc);
    int wte = x->model->pidx_wte;
    if (wte >= 0 && !x->model->has_embedding) /* the first stage's copy counts */
        memset(global + r->params[wte].global_offset, 0, r->params[wte].numel * sizeof(float));
    /* comm: all-reduce(pp): each stage contributes its own parameters, zeros elsewhere */
    if (x->pipe)
        MTC_CHECK(mtc_all_reduce(global, global, r->global_total, MTC_DTYPE_F32, MTC_OP_SUM,
                                 x->pipe));
    return MTC_OK;
}

/* --load: every rank reads the file into a serial model and keeps its shards. */
static mtc_result_t train_load(train_rank *x) {
    mtc_gpt *full = NULL;
    mtc_ckpt_info info;
    MTC_CHECK(mtc_gpt_init(&x->cfg->model, 1, 1, NULL, &full));
    mtc_result_t rc = mtc_ckpt_load(full, x->cfg->load_path, &info);
    const mtc_registry *r = &x->model->reg;
    for (int i = 0; rc == MTC_OK && i < r->count; i++) {
        const mtc_param *p = &r->params[i];
        for (size_t l = 0; l < p->local_numel; l++)
            x->model->params[p->offset + l] =
                full->params[p->global_offset + mtc_registry_global_index(r, p, r->tp_rank, l)];
    }
    mtc_gpt_free(full);
    return rc;
}

/* --save: gather the shards; the last rank writes the serial-layout model. */
mtc_result_t train_save(train_rank *x, int is_last, FILE *out) {
    const mtc_train_config *c = x->cfg;
    mtc_gpt *full = NULL;
    MTC_CHECK(mtc_gpt_init(&c->model, 1, 1, NULL, &full));
    mtc_result_t rc = train_gather(x, full->params);
    if (rc == MTC_OK && is_last) {
        rc = mtc_ckpt_save(full, c->save_path, c->train_iters, c->tokenizer);
        if (rc == MTC_OK && !c->quiet && out) fprintf(out, "> saved model to %s\n", c->save_path);
    }
    mtc_gpt_free(full);
    return rc;
}

/* Build this rank's grid, model, DDP and optimizer state. */
mtc_result_t train_setup(train_rank *x, mtc_comm_t world, int threads) {
    const mtc_train_config *c = x->cfg;
    int B = c->micro_batch, T = c->model.seq_length;
    mtc_grid_config gc;
    mtc_grid_config_default(&gc);
    gc.world_size = mtc_comm_size(world);
    gc.tp = c->tp > 0 ? c->tp : 1;
    gc.pp = c->pp > 0 ? c->pp : 1;
    if (c->use_distributed_optimizer) gc.num_dist_opt_instances = c->num_distopt_instances;
    MTC_CHECK(mtc_grid_init(&x->grid, world, &gc));
    const mtc_grid_coord *co = mtc_grid_coords(x->grid);
    mtc_comm_t tp = mtc_grid_comm(x->grid, MTC_GROUP_TP, 0);
    mtc_comm_t dp = mtc_grid_comm(x->grid, MTC_GROUP_DP_CP, 0);
    mtc_comm_t mp = mtc_grid_comm(x->grid, MTC_GROUP_MP, 0);
    x->tp = tp && mtc_comm_size(tp) > 1 ? tp : NULL;
    x->dp = dp && mtc_comm_size(dp) > 1 ? dp : NULL;
    x->mp = mp && mtc_comm_size(mp) > 1 ? mp : NULL;
    mtc_comm_t pipe = mtc_grid_comm(x->grid, MTC_GROUP_PP, 0);
    mtc_comm_t embd = mtc_grid_comm(x->grid, MTC_GROUP_EMBD, 0);
    x->pipe = pipe && mtc_comm_size(pipe) > 1 ? pipe : NULL;
    x->embd = embd && mtc_comm_size(embd) > 1 ? embd : NULL;
    x->pp_size = gc.pp, x->pp_rank = co->pp;
    x->dp_size = mtc_grid_spec_get(x->grid)->dp;
    x->dp_rank = co->dp_cp;
    x->tp_rank = co->tp;
    x->nmb = c->global_batch / (B * x->dp_size);
    MTC_CHECK(nn_pool_create(threads, &x->pool));
    int L = c->model.num_layers, P = x->pp_size, s = x->pp_rank;
    MTC_CHECK(mtc_gpt_init_chunk(&c->model, B, P > 1 ? x->nmb : 1, x->pool, x->tp,
                                 c->sequence_parallel, s * L / P, (s + 1) * L / P, s == 0,
                                 s == P - 1, &x->model));
    x->msg_count = (size_t)B * x->model->T_loc * c->model.hidden_size;
    if (P > 1) {
        pp_executor_config ec = {.schedule = {.pp = P, .num_microbatches = x->nmb},
                                 .count = x->msg_count};
        MTC_CHECK(pp_executor_init(&x->ex, &ec, x->pipe, NULL));
    }
    if (c->use_distributed_optimizer) { /* train/optimizer_step.c */
        MTC_CHECK(train_distopt_setup(x));
    } else {
        mtc_ddp_config dc = {.overlap_grad_reduce = c->overlap_grad_reduce,
                             .bucket_size = c->ddp_bucket_size, .scale = MTC_DDP_GRAD_SUM};
        mtc_ddp_comms comms = {.dp = x->dp};
        MTC_CHECK(mtc_ddp_init(&x->model->reg, &dc, &comms, x->model->params, x->model->grads,
                               &x->ddp));
        MTC_CHECK(mtc_adamw_init(&x->opt, &x->model->reg));
    }
    MTC_CHECK(mtc_mem_alloc((size_t)(T + 1) * sizeof(int), (void **)&x->buf));
    MTC_CHECK(mtc_mem_alloc((size_t)x->nmb * B * T * sizeof(int), (void **)&x->tokens));
    MTC_CHECK(mtc_mem_alloc((size_t)x->nmb * B * T * sizeof(int), (void **)&x->targets));
    const mtc_registry *r = &x->model->reg;
    for (int i = 0; i < r->count; i++)
        if (r->params[i].reduce_groups & MTC_REDUCE_TP) x->sp_n += r->params[i].local_numel;
    if (x->sp_n) MTC_CHECK(mtc_mem_alloc(x->sp_n * sizeof(float), (void **)&x->sp_buf));
    if (c->load_path) MTC_CHECK(train_load(x));
    else mtc_gpt_init_params(x->model, c->seed);
    return MTC_OK;
}

void train_teardown(train_rank *x) {
    train_distopt_teardown(x);
    free(x->buf);
    free(x->tokens);
    free(x->targets);
    free(x->sp_buf);
    mtc_adamw_free(&x->opt);
    mtc_ddp_free(x->ddp);
    pp_executor_free(x->ex);
    mtc_gpt_free(x->model);
    nn_pool_free(x->pool);
    mtc_grid_free(x->grid);
}

/* Global gradient norm: each element once (TP duplicates on TP rank 0
 * only, the tied wte on the first stage only), summed over TP x PP. */
static mtc_result_t train_grad_norm(train_rank *x, double *norm) {
    const mtc_registry *r = &x->model->reg;
    double s = 0;
    for (int i = 0; i < r->count; i++) {
        const mtc_param *p = &r->params[i];
        if (p->tp_duplicate && x->tp_rank != 0) continue;
        if (i == x->model->pidx_wte && !x->model->has_embedding) continue;
        s += nn_sumsq(x->model->grads + p->offset, p->local_numel);
    }
    uint64_t t0 = mtc_time_ns();
    /* comm: all-reduce(MODEL_PARALLEL_GROUP) */
    if (x->mp) MTC_CHECK(mtc_all_reduce(&s, &s, 1, MTC_DTYPE_F64, MTC_OP_SUM, x->mp));
    x->comm_ns += mtc_time_ns() - t0;
    *norm = sqrt(s);
    return MTC_OK;
}

/* One training iteration: microbatches, reductions in Megatron's order
 * (finalize_model_grads: DP, SP layer norms over TP, tied embedding over
 * EMBEDDING_GROUP), norm, clip, AdamW. */
mtc_result_t train_step(train_rank *x, int64_t it, uint64_t consumed, double *loss,
                        double *norm, int *skipped) {
    const mtc_train_config *c = x->cfg;
    int T = c->model.seq_length;
    double loss_sum = 0;
    MTC_CHECK(train_microbatches(x, DATA_SPLIT_TRAIN, consumed, 1, it, &loss_sum));
    uint64_t t0 = mtc_time_ns();
    /* comm: all-reduce(dp) per bucket (what overlap has not finished yet) */
    if (x->dp) MTC_CHECK(mtc_ddp_finish(x->ddp));
    x->comm_ns += mtc_time_ns() - t0;
    MTC_CHECK(train_sp_reduce(x));
    int wte = x->model->pidx_wte;
    if (x->embd && wte >= 0) {
        const mtc_param *p = &x->model->reg.params[wte];
        t0 = mtc_time_ns();
        /* comm: all-reduce(EMBEDDING_GROUP) of the tied wte gradient */
        MTC_CHECK(mtc_all_reduce(x->model->grads + p->offset, x->model->grads + p->offset,
                                 p->local_numel, MTC_DTYPE_F32, MTC_OP_SUM, x->embd));
        x->comm_ns += mtc_time_ns() - t0;
    }
    MTC_CHECK(train_dp_sum(x, &loss_sum));
    *loss = loss_sum / ((double)c->global_batch * T);
    if (x->dopt) return train_distopt_step(x, norm, skipped);
    MTC_CHECK(train_grad_norm(x, norm));
    if (!isfinite(*norm)) {
        (*skipped)++;
        return MTC_OK;
    }
    float lr = (float)mtc_lr_at(&c->lr, x->opt.step);
    mtc_adamw_step(&x->opt, x->pool, x->model->params, x->model->grads, lr,
                   mtc_grad_clip_coeff(*norm, c->clip_grad), &c->adam);
    return MTC_OK;
}
