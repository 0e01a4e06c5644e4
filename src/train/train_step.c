/* train/train_step.c - one rank's side of training: building the grid,
 * model chunk, DDP and optimizer; an iteration (microbatches directly, or
 * through the pipeline executor with pp > 1), the gradient reductions in
 * Megatron's order (finalize_model_grads over the registry's reduction
 * groups: DP buckets, TP for sequence-parallel partial sums,
 * EMBEDDING_GROUP for the tied embedding), the global norm (TP duplicates
 * and second copies counted once), AdamW;
 * evaluation, and gathering / loading / saving the global model. Relies on
 * model/, dp/, pp/, grid/, comm/, optim/, data/. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/timer.h"
#include "ckpt/checkpoint.h"
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
    mtc_gpt_pass pass = {
        .train = x->cur_train,
        .seed = c->seed,
        .iteration = (uint64_t)x->cur_it,
        .b0 = train_b0(x, mb),
        .loss_scale = x->cur_train ? scale : 0.0f,
        .first_microbatch = mb == 0,
        .grads_ready =
            x->cur_train && last && c->overlap_grad_reduce && x->dp ? train_grads_ready : NULL,
        .grads_ready_ctx = x->ddp,
        /* --overlap-param-gather: wait per param group in the forward */
        .params_needed = x->dopt && c->overlap_param_gather ? train_params_needed : NULL,
        .params_needed_ctx = x->dopt};
    return pass;
}

/* Activation slots of chunk `chunk`: taken by a microbatch's forward and
 * released after its backward (after the forward when evaluating), so a
 * chunk holds only its in-flight microbatches (nslots = the schedule's peak,
 * train_setup). Without pipelining: always slot 0. */
static mtc_result_t train_slot_take(train_rank *x, int chunk, int mb, int *slot) {
    *slot = 0;
    if (!x->ex) return MTC_OK;
    int *busy = x->slot_busy + (size_t)chunk * x->nslots_max;
    for (int s = 0; s < x->chunks[chunk]->nslots; s++)
        if (!busy[s]) {
            busy[s] = 1, x->slot_of[(size_t)chunk * x->nmb + mb] = *slot = s;
            return MTC_OK;
        }
    return mtc_error(MTC_ERR_INTERNAL,
                     "chunk %d has no free activation slot for microbatch %d "
                     "(%d slots in flight)",
                     chunk, mb, x->chunks[chunk]->nslots);
}

static void train_slot_release(train_rank *x, int chunk, int mb) {
    if (!x->ex) return;
    int *at = x->slot_of + (size_t)chunk * x->nmb + mb;
    if (*at >= 0) x->slot_busy[(size_t)chunk * x->nslots_max + *at] = 0;
    *at = -1;
}

/* Forward of microbatch mb on this rank's chunk (the pipeline executor's
 * callback; called directly without pipelining). input: the previous
 * stage's activation (NULL on the first stage); output: filled for the next
 * stage (NULL on the last, which adds its loss to mb_loss_sum). */
static mtc_result_t train_forward_cb(void *ctx, int mb, int chunk, const float *input,
                                     float *output) {
    train_rank *x = ctx;
    mtc_gpt *m = x->chunks[chunk];
    int B = x->cfg->micro_batch, T = x->cfg->model.seq_length, slot = 0;
    MTC_CHECK(train_slot_take(x, chunk, mb, &slot));
    size_t at = (size_t)mb * B * T;
    if (input) memcpy(mtc_gpt_slot_input(m, slot), input, x->msg_count * sizeof(float));
    mtc_gpt_pass pass = train_pass(x, mb);
    pass.grads_ready_ctx = x->ddps[chunk];
    if (x->dopts) pass.params_needed_ctx = x->dopts[chunk];
    x->mb_loss_sum += mtc_gpt_forward(m, slot, x->tokens + at, x->targets + at, B, T, &pass);
    MTC_CHECK(m->error);
    if (m->has_head) x->head_mb = mb;
    if (output) memcpy(output, mtc_gpt_slot_output(m, slot), x->msg_count * sizeof(float));
    if (!x->cur_train) train_slot_release(x, chunk, mb);
    return MTC_OK;
}

static mtc_result_t train_backward_cb(void *ctx, int mb, int chunk, const float *output_grad,
                                      float *input_grad) {
    train_rank *x = ctx;
    const mtc_train_config *c = x->cfg;
    mtc_gpt *m = x->chunks[chunk];
    int B = c->micro_batch, T = c->model.seq_length;
    int slot = x->ex ? x->slot_of[(size_t)chunk * x->nmb + mb] : 0;
    if (slot < 0)
        return mtc_error(MTC_ERR_INTERNAL, "backward of microbatch %d chunk %d before its forward",
                         mb, chunk);
    size_t at = (size_t)mb * B * T;
    float scale = 1.0f / ((float)c->global_batch * (float)T);
    if (output_grad) memcpy(mtc_gpt_grad_buffer(m), output_grad, x->msg_count * sizeof(float));
    mtc_gpt_pass pass = train_pass(x, mb);
    pass.grads_ready_ctx = x->ddps[chunk];
    if (x->dopts) pass.params_needed_ctx = x->dopts[chunk];
    if (m->has_head && x->head_mb != mb) {
        /* the interleaved order ran another microbatch's forward on the last
         * virtual stage in between (group size != pp), overwriting the fused
         * d(logits): recompute this one's forward from its kept input (same
         * dropout keys, so the same values; its loss was counted already) */
        (void)mtc_gpt_forward(m, slot, x->tokens + at, x->targets + at, B, T, &pass);
        MTC_CHECK(m->error);
        x->head_mb = mb;
    }
    MTC_CHECK(mtc_gpt_backward(m, slot, x->tokens + at, x->targets + at, B, T, scale, &pass));
    if (input_grad) memcpy(input_grad, mtc_gpt_grad_buffer(m), x->msg_count * sizeof(float));
    train_slot_release(x, chunk, mb);
    return MTC_OK;
}

/* Every microbatch of one global batch: through the pipeline executor, or
 * forward then backward per microbatch. Returns this rank's loss sum. */
static mtc_result_t train_microbatches(train_rank *x, data_split split, uint64_t consumed,
                                       int train, int64_t it, double *loss_sum) {
    for (int m = 0; m < x->nmb; m++)
        MTC_CHECK(train_load_batch(x, split, consumed, m));
    x->cur_it = it, x->cur_train = train, x->mb_loss_sum = 0;
    if (x->ex) {
        pp_callbacks cb = {train_forward_cb, train_backward_cb, x};
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

/* Sum the gradients of every parameter whose registry entry has `bit` over
 * `comm`: one packed all-reduce per chunk (layer norms and row-parallel
 * biases over TP under SP; the tied embedding over EMBEDDING_GROUP). */
static mtc_result_t train_reduce_group(train_rank *x, const mtc_gpt *m, unsigned bit,
                                       mtc_comm_t comm) {
    const mtc_registry *r = &m->reg;
    float *g = m->grads;
    size_t k = 0;
    for (int i = 0; i < r->count; i++)
        if (r->params[i].reduce_groups & bit) {
            memcpy(x->red_buf + k, g + r->params[i].offset,
                   r->params[i].local_numel * sizeof(float));
            k += r->params[i].local_numel;
        }
    if (!k) return MTC_OK;
    uint64_t t0 = mtc_time_ns();
    /* comm: all-reduce(tp) or all-reduce(EMBEDDING_GROUP) */
    MTC_CHECK(mtc_all_reduce(x->red_buf, x->red_buf, k, MTC_DTYPE_F32, MTC_OP_SUM, comm));
    x->comm_ns += mtc_time_ns() - t0;
    k = 0;
    for (int i = 0; i < r->count; i++)
        if (r->params[i].reduce_groups & bit) {
            memcpy(g + r->params[i].offset, x->red_buf + k,
                   r->params[i].local_numel * sizeof(float));
            k += r->params[i].local_numel;
        }
    return MTC_OK;
}

/* Megatron's finalize_model_grads, driven by the registry's reduction
 * groups: the DP buckets (what overlap has not finished), then the
 * sequence-parallel partial sums over TP, then the shared embedding over
 * EMBEDDING_GROUP, for every model chunk. */
static mtc_result_t train_finalize_grads(train_rank *x) {
    uint64_t t0 = mtc_time_ns();
    /* comm: all-reduce(dp) or reduce-scatter per bucket */
    if (x->dp)
        for (int k = 0; k < x->vpp; k++)
            MTC_CHECK(mtc_ddp_finish(x->ddps[k]));
    x->comm_ns += mtc_time_ns() - t0;
    for (int k = 0; k < x->vpp && x->tp; k++)
        MTC_CHECK(train_reduce_group(x, x->chunks[k], MTC_REDUCE_TP, x->tp));
    for (int k = 0; k < x->vpp && x->embd; k++)
        MTC_CHECK(train_reduce_group(x, x->chunks[k], MTC_REDUCE_EMBEDDING, x->embd));
    return MTC_OK;
}

/* Gather the TP shards and pipeline stages into `global` (serial layout)
 * on every rank. */
mtc_result_t train_gather(train_rank *x, float *global) {
    MTC_CHECK(train_distopt_wait(x));
    const mtc_registry *r = &x->model->reg;
    size_t big = 0;
    for (int k = 0; k < x->vpp; k++)
        for (int i = 0; i < x->chunks[k]->reg.count; i++)
            if (x->chunks[k]->reg.params[i].local_numel > big)
                big = x->chunks[k]->reg.params[i].local_numel;
    float *scratch;
    MTC_CHECK(mtc_mem_alloc(big * (size_t)x->model->tp_size * sizeof(float), (void **)&scratch));
    memset(global, 0, r->global_total * sizeof(float));
    mtc_result_t rc = MTC_OK;
    for (int k = 0; k < x->vpp && rc == MTC_OK; k++) { /* chunks hold disjoint layers */
        const mtc_gpt *m = x->chunks[k];
        /* comm: all-gather(tp) per split parameter */
        rc = mtc_gpt_gather(m, global, m->params, scratch);
        for (int i = 0; rc == MTC_OK && i < m->reg.count; i++) /* the first copy counts */
            if (m->reg.params[i].shared_copy)
                memset(global + m->reg.params[i].global_offset, 0,
                       m->reg.params[i].numel * sizeof(float));
    }
    free(scratch);
    MTC_CHECK(rc);
    /* comm: all-reduce(pp): each stage contributes its own parameters, zeros elsewhere */
    if (x->pipe)
        MTC_CHECK(
            mtc_all_reduce(global, global, r->global_total, MTC_DTYPE_F32, MTC_OP_SUM, x->pipe));
    return MTC_OK;
}

/* --load: every rank reads the file into a serial model and keeps its shards. */
static mtc_result_t train_load(train_rank *x) {
    mtc_gpt *full = NULL;
    mtc_ckpt_info info;
    MTC_CHECK(mtc_gpt_init(&x->cfg->model, 1, 1, NULL, &full));
    mtc_result_t rc = mtc_ckpt_load(full, x->cfg->load_path, &info);
    for (int k = 0; k < x->vpp; k++) {
        const mtc_registry *r = &x->chunks[k]->reg;
        for (int i = 0; rc == MTC_OK && i < r->count; i++) {
            const mtc_param *p = &r->params[i];
            for (size_t l = 0; l < p->local_numel; l++)
                x->chunks[k]->params[p->offset + l] =
                    full->params[p->global_offset + mtc_registry_global_index(r, p, r->tp_rank, l)];
        }
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

static mtc_result_t train_chunks_alloc(train_rank *x) {
    size_t V = (size_t)x->vpp;
    x->chunks = calloc(V, sizeof *x->chunks);
    x->ddps = calloc(V, sizeof *x->ddps);
    x->copts = calloc(V, sizeof *x->copts);
    x->slot_of = malloc(V * (size_t)x->nmb * sizeof(int));
    if (!x->chunks || !x->ddps || !x->copts || !x->slot_of)
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "model chunk tables for vpp=%d", x->vpp);
    for (size_t i = 0; i < V * (size_t)x->nmb; i++)
        x->slot_of[i] = -1;
    return MTC_OK;
}

/* Peak number of microbatches between forward and backward per chunk in
 * this rank's training order (at least 1): written to slot_busy[k] for the
 * chunk inits, which then becomes the (vpp, nslots_max) busy table. */
static mtc_result_t train_slot_counts(train_rank *x, const pp_schedule_config *sc) {
    int V = x->vpp, peak_max = 1;
    int *peak = calloc((size_t)V, sizeof(int)), *live = calloc((size_t)V, sizeof(int));
    pp_op *ops = sc->pp > 1 ? calloc((size_t)pp_schedule_max_ops(sc), sizeof *ops) : NULL;
    mtc_result_t rc = peak && live && (ops || sc->pp == 1)
                          ? MTC_OK
                          : mtc_error(MTC_ERR_OUT_OF_MEMORY, "schedule of a rank");
    pp_schedule_counts n = {0};
    if (rc == MTC_OK && sc->pp > 1) rc = pp_schedule_build(ops, &n, sc, x->pp_rank);
    for (int i = 0; rc == MTC_OK && i < n.nops; i++) {
        int k = ops[i].chunk;
        live[k] += ops[i].kind == PP_OP_FORWARD ? 1 : -1;
        if (live[k] > peak[k]) peak[k] = live[k];
    }
    for (int k = 0; k < V && peak; k++) {
        if (peak[k] < 1) peak[k] = 1;
        if (peak[k] > peak_max) peak_max = peak[k];
    }
    x->nslots_max = peak_max;
    if (rc == MTC_OK) {
        x->slot_busy = calloc((size_t)V * peak_max, sizeof(int));
        if (!x->slot_busy)
            rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "slot table");
        else
            memcpy(x->slot_busy, peak, (size_t)V * sizeof(int));
    }
    free(peak), free(live), free(ops);
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
    x->world_rank = mtc_comm_rank(world);
    int L = c->model.num_layers, P = x->pp_size, s = x->pp_rank;
    int V = P > 1 && c->vpp > 1 ? c->vpp : 1, S = P * V;
    x->vpp = V;
    MTC_CHECK(train_chunks_alloc(x));
    pp_schedule_config sc = {.pp = P,
                             .vpp = V > 1 ? V : 0,
                             .num_microbatches = x->nmb,
                             .group_size = c->microbatch_group_size};
    /* activation slots: each chunk's peak of microbatches between forward and backward */
    MTC_CHECK(train_slot_counts(x, &sc));
    for (int k = 0; k < V; k++) { /* chunk k = virtual stage k*P + s, L/S layers */
        int st = pp_virtual_stage(P, s, k);
        MTC_CHECK(mtc_gpt_init_chunk(&c->model, B, P > 1 ? x->slot_busy[k] : 1, x->pool, x->tp,
                                     c->sequence_parallel, st * L / S, (st + 1) * L / S, st == 0,
                                     st == S - 1, &x->chunks[k]));
    }
    memset(x->slot_busy, 0, (size_t)V * x->nslots_max * sizeof(int));
    x->model = x->chunks[0];
    x->msg_count = (size_t)B * x->model->T_loc * c->model.hidden_size;
    if (P > 1) {
        pp_executor_config ec = {.schedule = sc, .count = x->msg_count};
        MTC_CHECK(pp_executor_init(&x->ex, &ec, x->pipe, NULL));
    }
    if (c->use_distributed_optimizer) { /* train/optimizer_step.c */
        MTC_CHECK(train_distopt_setup(x));
    } else {
        mtc_ddp_config dc = {.overlap_grad_reduce = c->overlap_grad_reduce,
                             .scale = MTC_DDP_GRAD_SUM};
        mtc_ddp_comms comms = {.dp = x->dp};
        for (int k = 0; k < V; k++) {
            mtc_gpt *m = x->chunks[k];
            /* Megatron's rule: buckets only with overlap, on the first
             * stage's first chunk (one bucket elsewhere) */
            dc.bucket_size = dp_layout_bucket_size(c->ddp_bucket_size, x->dp_size,
                                                   c->overlap_grad_reduce, x->pp_rank, k);
            MTC_CHECK(mtc_ddp_init(&m->reg, &dc, &comms, m->params, m->grads, &x->ddps[k]));
            MTC_CHECK(mtc_adamw_init(k ? &x->copts[k] : &x->opt, &m->reg));
        }
        x->ddp = x->ddps[0];
    }
    x->ddps[0] = x->ddp;
    MTC_CHECK(mtc_mem_alloc((size_t)(T + 1) * sizeof(int), (void **)&x->buf));
    MTC_CHECK(mtc_mem_alloc((size_t)x->nmb * B * T * sizeof(int), (void **)&x->tokens));
    MTC_CHECK(mtc_mem_alloc((size_t)x->nmb * B * T * sizeof(int), (void **)&x->targets));
    size_t red_n = 0; /* red_buf: the largest chunk's packed group reduction */
    for (int k = 0; k < V; k++)
        for (unsigned bit = MTC_REDUCE_TP; bit <= MTC_REDUCE_EMBEDDING; bit <<= 1) {
            const mtc_registry *r = &x->chunks[k]->reg;
            size_t n = 0;
            for (int i = 0; i < r->count; i++)
                if (r->params[i].reduce_groups & bit) n += r->params[i].local_numel;
            if (n > red_n) red_n = n;
        }
    if (red_n) MTC_CHECK(mtc_mem_alloc(red_n * sizeof(float), (void **)&x->red_buf));
    if (c->load_path)
        MTC_CHECK(train_load(x));
    else
        for (int k = 0; k < V; k++)
            mtc_gpt_init_params(x->chunks[k], c->seed);
    return MTC_OK;
}

size_t train_memory(const train_rank *x, mtc_dp_memory *mem) {
    size_t act = 0;
    memset(mem, 0, sizeof *mem);
    for (int k = 0; k < x->vpp; k++) {
        mtc_dp_memory m;
        mtc_ddp_memory(x->ddps[k], &m);
        mem->param_bytes += m.param_bytes, mem->grad_bytes += m.grad_bytes;
        mem->optim_state_bytes += m.optim_state_bytes;
        act += mtc_gpt_activation_bytes(x->chunks[k]);
    }
    return act;
}

void train_teardown(train_rank *x) {
    train_distopt_teardown(x);
    free(x->buf);
    free(x->tokens);
    free(x->targets);
    free(x->red_buf);
    mtc_adamw_free(&x->opt);
    mtc_ddp_free(x->ddp);
    pp_executor_free(x->ex);
    mtc_gpt_free(x->model);
    for (int k = 1; k < x->vpp && x->chunks; k++) { /* [0] are model, ddp, opt */
        mtc_adamw_free(&x->copts[k]);
        mtc_ddp_free(x->ddps[k]);
        mtc_gpt_free(x->chunks[k]);
    }
    free(x->chunks), free(x->ddps), free(x->copts), free(x->slot_of), free(x->slot_busy);
    nn_pool_free(x->pool);
    mtc_grid_free(x->grid);
}

typedef struct {
    const mtc_gpt *m;
    int tp_rank;
} norm_skip_ctx;

/* Counted elsewhere: TP duplicates off TP rank 0, second copies (the last
 * stage's tied embedding). */
static int norm_skip(int i, void *arg) {
    const norm_skip_ctx *c = arg;
    const mtc_param *p = &c->m->reg.params[i];
    return (p->tp_duplicate && c->tp_rank != 0) || p->shared_copy;
}

/* Global gradient norm: each element once (TP duplicates on TP rank 0
 * only, the tied wte on the first stage only), summed over TP x PP. */
static mtc_result_t train_grad_norm(train_rank *x, double *norm) {
    double s = 0;
    for (int k = 0; k < x->vpp; k++) {
        norm_skip_ctx sc = {x->chunks[k], x->tp_rank};
        s += mtc_grad_sumsq(k ? &x->copts[k] : &x->opt, x->pool, x->chunks[k]->grads, norm_skip,
                            &sc);
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
mtc_result_t train_step(train_rank *x, int64_t it, uint64_t consumed, double *loss, double *norm,
                        int *skipped) {
    const mtc_train_config *c = x->cfg;
    int T = c->model.seq_length;
    double loss_sum = 0;
    MTC_CHECK(train_microbatches(x, DATA_SPLIT_TRAIN, consumed, 1, it, &loss_sum));
    MTC_CHECK(train_finalize_grads(x));
    MTC_CHECK(train_dp_sum(x, &loss_sum));
    *loss = loss_sum / ((double)c->global_batch * T);
    if (x->dopt) return train_distopt_step(x, norm, skipped);
    MTC_CHECK(train_grad_norm(x, norm));
    if (!isfinite(*norm)) {
        (*skipped)++;
        return MTC_OK;
    }
    float lr = (float)mtc_lr_at(&c->lr, x->opt.step);
    float clip = mtc_grad_clip_coeff(*norm, c->clip_grad);
    for (int k = 0; k < x->vpp; k++)
        mtc_adamw_step(k ? &x->copts[k] : &x->opt, x->pool, x->chunks[k]->params,
                       x->chunks[k]->grads, lr, clip, &c->adam);
    return MTC_OK;
}
