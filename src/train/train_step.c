/* train/train_step.c - one training iteration of one rank: the
 * microbatches (train_micro.c), Megatron's finalize_model_grads driven by
 * the registry's reduction groups (DP buckets, TP for sequence-parallel
 * partial sums, EMBEDDING_GROUP for the tied embedding), the global
 * gradient norm over what this rank holds (one function for plain DP and
 * the distributed optimizer), clipping folded into AdamW, and the AdamW
 * step on the whole buffer or on the owned shard (then the param
 * all-gather). Relies on model/ (the registry), dp/, optim/, comm/. */
#include <math.h>
#include <string.h>

#include "core/log.h"
#include "core/timer.h"
#include "dp/fsdp.h"
#include "nn/lowp.h"
#include "train/train_internal.h"

/* Param i's gradient as this rank holds it: the whole of it, or with
 * Megatron-FSDP's sharded gradients the part in this rank's shard. */
static float *train_held_grad(const train_chunk *ch, int i, size_t *n) {
    const mtc_param *p = &ch->model->reg.params[i];
    float *g;
    for (int b = 0; b < TRAIN_GBUF_MAX; b++)
        if (ch->buf[b].fsdp && mtc_fsdp_held_grad(ch->buf[b].fsdp, i, &g, n) == 0) return g;
    *n = p->local_numel;
    return ch->model->grads + p->offset;
}

/* Sum the gradients of every parameter whose registry entry has `bit` over
 * `comm`: one packed all-reduce per chunk (layer norms and row-parallel
 * biases over TP under SP; the tied embedding over EMBEDDING_GROUP). */
static mtc_result_t train_reduce_group(train_rank *x, const train_chunk *ch, unsigned bit,
                                       mtc_comm_t comm, train_timer id) {
    const mtc_registry *r = &ch->model->reg;
    uint64_t t_span = mtc_time_ns();
    size_t k = 0, n;
    for (int i = 0; i < r->count; i++)
        if (r->params[i].reduce_groups & bit) {
            float *g = train_held_grad(ch, i, &n);
            memcpy(x->red_buf + k, g, n * sizeof(float));
            k += n;
        }
    if (!k) return MTC_OK;
    uint64_t t0 = mtc_time_ns();
    /* comm: all-reduce(tp) or all-reduce(EMBEDDING_GROUP) */
    MTC_CHECK(mtc_all_reduce(x->red_buf, x->red_buf, k, MTC_DTYPE_F32, MTC_OP_SUM, comm));
    x->comm_ns += mtc_time_ns() - t0;
    k = 0;
    for (int i = 0; i < r->count; i++)
        if (r->params[i].reduce_groups & bit) {
            float *g = train_held_grad(ch, i, &n);
            memcpy(g, x->red_buf + k, n * sizeof(float));
            k += n;
        }
    train_obs_span(x, id, t_span, NULL, NULL);
    return MTC_OK;
}

/* The chunk holding this rank's wte gradient copy -1, or (a standalone MTP
 * stage on the first stage's pipeline rank: two chunks hold copies) the
 * first such chunk after the others' gradients were added into it, so the
 * rank all-reduces one copy over EMBEDDING_GROUP (train_embedding_copy_back
 * then writes the sum into the others). */
static int train_embedding_fold(train_rank *x, int copy_back) {
    int first = -1;
    for (int k = 0; k < x->vpp; k++) {
        const mtc_model *m = x->chunks[k].model;
        int i = m->pidx[MTC_ROLE_WTE];
        if (i < 0 || !(m->reg.params[i].reduce_groups & MTC_REDUCE_EMBEDDING)) continue;
        if (first < 0) {
            first = k;
            continue;
        }
        size_t n0, n;
        float *g0 =
            train_held_grad(&x->chunks[first], x->chunks[first].model->pidx[MTC_ROLE_WTE], &n0);
        float *g = train_held_grad(&x->chunks[k], i, &n);
        for (size_t j = 0; j < n && j < n0; j++)
            if (copy_back)
                g[j] = g0[j];
            else
                g0[j] += g[j];
    }
    return first;
}

/* Megatron's finalize_model_grads: the DP buckets of every chunk (what
 * overlap has not finished), then the sequence-parallel partial sums over
 * TP, then the shared embedding over EMBEDDING_GROUP. */
static mtc_result_t train_finalize_grads(train_rank *x) {
    uint64_t t0 = mtc_time_ns();
    /* comm: all-reduce(dp), or reduce-scatter(intra) with the distributed optimizer */
    /* comm: the expert buffers: all-reduce or reduce-scatter(EXPERT_DATA_PARALLEL_GROUP) */
    /* (expert-DP can exceed 1 with DP x CP 1: tp 4, etp 1, ep 2) */
    int any = train_reduces(x);
    for (int k = 0; k < x->vpp && any; k++)
        for (int b = 0; b < x->nbuf; b++)
            if (x->chunks[k].buf[b].fsdp) /* Megatron-FSDP reduced each unit already */
                MTC_CHECK(mtc_fsdp_finish(x->chunks[k].buf[b].fsdp));
            else if (x->chunks[k].buf[b].ddp)
                MTC_CHECK(mtc_ddp_finish(x->chunks[k].buf[b].ddp));
    x->comm_ns += mtc_time_ns() - t0;
    if (any) train_obs_span(x, TRAIN_T_ALL_GRADS_SYNC, t0, NULL, NULL);
    /* the registry's other bits, each over the group the grid maps it to */
    static const struct {
        unsigned bit;
        train_timer timer;
    } groups[] = {{MTC_REDUCE_TP, TRAIN_T_LAYERNORM_GRADS},
                  {MTC_REDUCE_EMBEDDING, TRAIN_T_EMBEDDING_GRADS}};
    int emb = x->pp_size > 1 ? train_embedding_fold(x, 0) : -1;
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        mtc_comm_t comm = mtc_grid_reduce_comm(x->grid, groups[g].bit);
        for (int k = 0; k < x->vpp && comm; k++)
            if (groups[g].bit != MTC_REDUCE_EMBEDDING || k == emb)
                MTC_CHECK(
                    train_reduce_group(x, &x->chunks[k], groups[g].bit, comm, groups[g].timer));
    }
    if (emb >= 0) train_embedding_fold(x, 1);
    return MTC_OK;
}

/* Global gradient norm: per kind of buffer, this rank's held elements (each
 * chunk's norm plan, each element of the model counted once), summed over
 * the kind's shard group with the distributed optimizer and over the
 * group whose members hold disjoint params (MODEL_PARALLEL_GROUP; for the
 * expert-parallel buffers, as Megatron's expert optimizer,
 * EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP), the kinds added up. */
static mtc_result_t train_grad_norm(train_rank *x, double *norm) {
    uint64_t t_span = mtc_time_ns();
    double s[TRAIN_GBUF_MAX] = {0}, total = 0;
    for (int b = 0; b < x->nbuf; b++)
        for (int k = 0; k < x->vpp; k++)
            mtc_grad_norm_sumsq_add(&x->chunks[k].buf[b].norm, x->pool, &s[b]);
    uint64_t t0 = mtc_time_ns();
    for (int b = 0; b < x->nbuf; b++) {
        /* comm: all-reduce(the kind's shard group) with the distributed optimizer,
         * all-reduce(MODEL_PARALLEL_GROUP or EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP) */
        const mtc_ddp_kind *kd = &x->gbuf[b];
        mtc_comm_t sh = train_fsdp_norm_group(x, b);
        if (sh) MTC_CHECK(mtc_all_reduce(&s[b], &s[b], 1, MTC_DTYPE_F64, MTC_OP_SUM, sh));
        if (kd->norm)
            MTC_CHECK(mtc_all_reduce(&s[b], &s[b], 1, MTC_DTYPE_F64, MTC_OP_SUM, kd->norm));
        total += s[b];
    }
    x->comm_ns += mtc_time_ns() - t0;
    *norm = sqrt(total);
    train_obs_span(x, TRAIN_T_OPTIMIZER_CLIP, t_span, NULL, NULL);
    return MTC_OK;
}

/* --log-num-zeros-in-grad: Megatron's count_zeros_fp32 after clipping (the
 * main grads times the fp16 unscale, then times the clipping factor, as its
 * optimizer scales them in place), over the pieces of the norm plan (each
 * element of the model once), summed as the norm is: over the kind's shard
 * group and its norm group, the kinds added up (the chained optimizer's
 * sum). Megatron's count is an int64 that its log path turns into fp32:
 * so is this one. comm: the norm's all-reduces, one double each. */
static mtc_result_t train_count_zeros(train_rank *x, float unscale, float coeff) {
    double total = 0;
    for (int b = 0; b < x->nbuf; b++) {
        double z = 0;
        for (int k = 0; k < x->vpp; k++) {
            const mtc_grad_norm_plan *p = &x->chunks[k].buf[b].norm;
            for (int i = 0; i < p->n; i++) {
                int64_t n = 0;
                for (size_t j = 0; j < p->len[i]; j++) {
                    float v = p->base[i][j] * unscale;
                    n += v * coeff == 0.0f;
                }
                z += (double)n;
            }
        }
        const mtc_ddp_kind *kd = &x->gbuf[b];
        mtc_comm_t sh = train_fsdp_norm_group(x, b);
        if (sh) MTC_CHECK(mtc_all_reduce(&z, &z, 1, MTC_DTYPE_F64, MTC_OP_SUM, sh));
        if (kd->norm) MTC_CHECK(mtc_all_reduce(&z, &z, 1, MTC_DTYPE_F64, MTC_OP_SUM, kd->norm));
        total += z;
    }
    x->num_zeros = (double)(float)total;
    return MTC_OK;
}

/* --log-params-norm: Megatron's calc_params_l2_norm after the step, the L2
 * norm of every parameter once (TP duplicates and the tied embedding's
 * second copy left out, as the gradient norm): the fp32 main params (with
 * the distributed optimizer the owned shards, summed over the shard group),
 * with --fp16 the fp16 model params Megatron reads (the main params rounded
 * to fp16). comm: the norm's all-reduces, one double each. */
mtc_result_t train_params_norm(train_rank *x) {
    double total = 0;
    int fp16 = x->cfg->fp16;
    for (int b = 0; b < x->nbuf; b++) {
        double s = 0;
        for (int k = 0; k < x->vpp; k++) {
            mtc_grad_norm_plan *p = &x->chunks[k].buf[b].pnorm;
            if (!fp16) {
                mtc_grad_norm_sumsq_add(p, x->pool, &s);
                continue;
            }
            for (int i = 0; i < p->n; i++) {
                double q = 0;
                for (size_t j = 0; j < p->len[i]; j++) {
                    double v = nn_f16_to_f32_1(nn_f32_to_f16_1(p->base[i][j]));
                    q += v * v;
                }
                s += q;
            }
        }
        const mtc_ddp_kind *kd = &x->gbuf[b];
        mtc_comm_t sh = train_fsdp_norm_group(x, b);
        if (sh) MTC_CHECK(mtc_all_reduce(&s, &s, 1, MTC_DTYPE_F64, MTC_OP_SUM, sh));
        if (kd->norm) MTC_CHECK(mtc_all_reduce(&s, &s, 1, MTC_DTYPE_F64, MTC_OP_SUM, kd->norm));
        total += s;
    }
    x->params_norm = sqrt(total);
    return MTC_OK;
}

/* AdamW with clipping folded in, on every chunk: the whole buffer, or the
 * owned shard followed by the param all-gather (left running with
 * --overlap-param-gather until the next forward needs the params). */
static mtc_result_t train_optimizer_step(train_rank *x, double norm, float unscale) {
    const mtc_train_config *c = x->cfg;
    double n = train_sched_steps(x); /* Megatron's num_steps */
    float lr = (float)mtc_lr_at_n(&c->lr, n);
    float clip = mtc_grad_clip_coeff(norm, c->clip_grad) * unscale;
    /* Megatron's weight-decay increment (constant: --weight-decay throughout) */
    mtc_adamw_config adam = c->adam;
    adam.weight_decay = (float)mtc_wd_at_n(&c->lr, n, c->adam.weight_decay);
    if (c->decoupled) { /* Megatron's param group with max_lr = --decoupled-lr */
        mtc_lr_schedule dl = c->lr;
        dl.lr = c->decoupled_lr;
        if (c->decoupled_min_lr >= 0) dl.min_lr = c->decoupled_min_lr;
        adam.decoupled = 1, adam.lr_decoupled = (float)mtc_lr_at_n(&dl, n);
    }
    mtc_distopt_hparams hp = {adam.beta1,        adam.beta2,     adam.eps,
                              adam.weight_decay, adam.decoupled, adam.lr_decoupled};
    uint64_t t0 = mtc_time_ns();
    for (int k = 0; k < x->vpp; k++) {
        train_chunk *ch = &x->chunks[k];
        if (c->use_distributed_optimizer) {
            /* comm: all-gather(the kind's shard group) per bucket (waited for here without
             * overlap) */
            for (int b = 0; b < x->nbuf; b++)
                if (ch->buf[b].dopt) MTC_CHECK(mtc_distopt_step(ch->buf[b].dopt, lr, clip, &hp));
        } else { /* --bf16: the compute copies made in the same pass */
            mtc_model_lowp_targets(ch->model, &ch->opt.copy16, &ch->opt.copy_c);
            mtc_adamw_step(&ch->opt, x->pool, ch->model->params, ch->model->grads, lr, clip, &adam);
            if (ch->opt.copy16) mtc_model_lowp_written(ch->model);
        }
    }
    x->comm_ns += mtc_time_ns() - t0;
    train_obs_span(x, TRAIN_T_OPTIMIZER_INNER, t0, NULL, NULL);
    x->step++;
    x->sched_n += (double)x->cur_batch; /* scheduler.step(increment = this global batch) */
    return MTC_OK;
}

/* Megatron's "mtp_k loss": depth k's labelled-token mean (each
 * microbatch's over its B (T - k) labels, averaged over the microbatches
 * and DP), on the ranks with the loss. comm: all-reduce(dp x cp) per depth */
static mtc_result_t train_mtp_losses(train_rank *x) {
    const mtc_model_config *mc = &x->cfg->model;
    for (int d = 0; d < mc->mtp_num_layers; d++) {
        double v = 0;
        for (int k = 0; k < x->vpp; k++)
            if (x->chunks[k].model->mtp_losses) v += x->chunks[k].model->mtp_loss_sum[d];
        MTC_CHECK(train_dp_sum(x, &v));
        x->mtp_loss[d] = v / ((double)x->cur_batch * (mc->seq_length - d - 1));
    }
    return MTC_OK;
}

mtc_result_t train_step(train_rank *x, int64_t it, uint64_t consumed, double *loss, double *norm,
                        int *skipped) {
    const mtc_train_config *c = x->cfg;
    double loss_sum = 0;
    uint64_t t_fb = mtc_time_ns();
    /* Megatron's update_num_microbatches(consumed_samples) */
    MTC_CHECK(train_set_batch(x, train_batch_at(c, consumed)));
    for (int k = 0; k < x->vpp; k++)
        mtc_model_step_begin(x->chunks[k].model);
    train_fp8_step_begin(x);
    MTC_CHECK(train_microbatches(x, DATA_SPLIT_TRAIN, consumed, 1, it, &loss_sum));
    MTC_CHECK(train_fp8_step_end(x)); /* comm: the delayed amaxes, the fp8 stats */
    train_obs_span(x, TRAIN_T_FORWARD_BACKWARD, t_fb, NULL, NULL);
    MTC_CHECK(train_finalize_grads(x));
    for (int k = 0; k < x->vpp; k++) /* comm: the model's (MoE: the expert-bias counts) */
        MTC_CHECK(mtc_model_finalize_grads(x->chunks[k].model));
    uint64_t t_loss = mtc_time_ns();
    MTC_CHECK(train_dp_sum(x, &loss_sum));
    train_obs_span(x, TRAIN_T_LOSS_REDUCE, t_loss, NULL, NULL);
    *loss = loss_sum / ((double)x->cur_batch * c->model.seq_length);
    MTC_CHECK(train_mtp_losses(x));
    uint64_t t_opt = mtc_time_ns();
    MTC_CHECK(train_grad_norm(x, norm));
    float unscale = 1.0f;
    x->scaler_skipped = 0;
    if (x->use_scaler) {
        /* Megatron's fp16 optimizer: unscale the main grads (folded into the
         * update, the norm scaled the same way), found_inf from the norm
         * summed over every group that holds gradients, the scaler updated,
         * then the step skipped when found_inf. */
        int found_inf = !isfinite(*norm);
        unscale = mtc_grad_scaler_inv_scale(&x->scaler);
        mtc_grad_scaler_update(&x->scaler, found_inf);
        MTC_CHECK(mtc_grad_scaler_watch(&x->scaler, found_inf, *norm)); /* stuck or underflowing */
        x->loss_scale = x->scaler.scale;
        if (found_inf) { /* Megatron: no num zeros for this step */
            x->num_zeros = -1;
            (*skipped)++;
            x->scaler_skipped = 1;
            train_obs_span(x, TRAIN_T_OPTIMIZER, t_opt, NULL, NULL);
            return MTC_OK;
        }
        *norm *= unscale;
    }
    if (c->log_num_zeros)
        MTC_CHECK(train_count_zeros(x, unscale, mtc_grad_clip_coeff(*norm, c->clip_grad)));
    if (!isfinite(*norm)) { /* Megatron skips the update of a non-finite gradient */
        (*skipped)++;
        train_obs_span(x, TRAIN_T_OPTIMIZER, t_opt, NULL, NULL);
        return MTC_OK;
    }
    MTC_CHECK(train_optimizer_step(x, *norm, unscale));
    train_obs_span(x, TRAIN_T_OPTIMIZER, t_opt, NULL, NULL);
    return MTC_OK;
}
