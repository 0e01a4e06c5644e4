/* train/train_agree.c - every rank trains the same model the same way.
 * Under MPI each process parsed its own flags; a flag that differs on one
 * rank changes what it computes, or which collectives it runs and when (a
 * --save-interval, an exit condition, an output that gathers), so the job
 * would compute garbage or block until the collective deadline blamed
 * whichever rank happened to be waited for. Before any set-up, the values
 * that must agree are compared across the world (one MIN and one MAX
 * all-reduce); the first that differs is reported with the rank that
 * holds the odd value (two more all-reduces find it). Paths are per rank
 * by design: only whether one was given is compared. Does not compare
 * flags that change nothing across ranks (--quiet, --threads). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "pp/layout.h"
#include "tp/fp8_linear.h"
#include "train/train_internal.h"

/* The --step-batch-size-schedule as one number, for the agreement check. */
static double schedule_key(const mtc_train_config *c) {
    double k = 0;
    for (int e = 0; c->batch_schedule && e < c->batch_schedule->n; e++)
        k = k * 1.000003 + (double)c->batch_schedule->threshold[e] * 7 +
            (double)c->batch_schedule->batch[e];
    return k;
}

/* The MoE layers (--moe-layer-freq) as one number. */
static double moe_layers_key(const mtc_train_config *c) {
    double k = 0;
    for (int l = 0; c->model.moe.num_experts > 0 && l < c->model.num_layers; l++)
        k = k * 2 + mtc_moe_is_layer(&c->model.moe, l);
    return k;
}

/* The rank that differs on flag i (lo/hi: its values' extremes, equal on
 * every rank), reported the same way on every rank.
 * comm: all-reduce(world) x 2. */
static mtc_result_t agreement_report(const char *flag, double v, double lo, double hi,
                                     mtc_comm_t world) {
    int me = mtc_comm_rank(world), n = mtc_comm_size(world);
    double cnt[2] = {v == lo, v == hi}, first[2] = {v == lo ? me : n, v == hi ? me : n};
    MTC_CHECK(mtc_all_reduce(cnt, cnt, 2, MTC_DTYPE_F64, MTC_OP_SUM, world));
    MTC_CHECK(mtc_all_reduce(first, first, 2, MTC_DTYPE_F64, MTC_OP_MIN, world));
    const mtc_result_t E = MTC_ERR_INVALID_USAGE;
    const char *fix = "start every rank with the same flags and data";
    int odd = cnt[0] == 1 && cnt[1] == n - 1 ? 0 : cnt[1] == 1 && cnt[0] == n - 1 ? 1 : -1;
    if (n == 2) { /* neither is odd: both named, rank 0 first */
        int a = first[0] < first[1] ? 0 : 1;
        return mtc_error(E, "ranks disagree on --%s: rank %d has %.9g, rank %d has %.9g (%s)", flag,
                         (int)first[a], a ? hi : lo, (int)first[1 - a], a ? lo : hi, fix);
    }
    if (odd >= 0)
        return mtc_error(E,
                         "rank %d differs on --%s: it has %.9g, the other %d ranks have %.9g (%s)",
                         (int)first[odd], flag, odd ? hi : lo, n - 1, odd ? lo : hi, fix);
    return mtc_error(E,
                     "ranks disagree on --%s: %d ranks (the first rank %d) have %.9g, %d (the "
                     "first rank %d) have %.9g%s (%s)",
                     flag, (int)cnt[0], (int)first[0], lo, (int)cnt[1], (int)first[1], hi,
                     cnt[0] + cnt[1] < n ? ", the others values between" : "", fix);
}

mtc_result_t train_check_agreement(const mtc_train_config *c, mtc_comm_t world,
                                   uint64_t data_tokens) {
    const mtc_model_config *m = &c->model;
    const mtc_moe_config *moe = &m->moe;
    const mtc_tb_flags *tb = &c->tensorboard;
    const tp_fp8_config no8 = {0}, *f8 = c->fp8 ? c->fp8 : &no8;
    struct {
        const char *flag;
        double v;
    } f[] = {
        {"num-layers", m->num_layers},
        {"hidden-size", m->hidden_size},
        {"num-attention-heads", m->num_heads},
        {"ffn-hidden-size", m->ffn_hidden_size},
        {"seq-length", m->seq_length},
        {"max-position-embeddings", m->max_position_embeddings},
        {"vocab-size", m->vocab_size},
        {"padded vocabulary (make-vocab-size-divisible-by)", m->padded_vocab_size},
        {"hidden-dropout", m->hidden_dropout},
        {"attention-dropout", m->attention_dropout},
        {"init-method-std", m->init_std},
        {"normalization", m->normalization},
        {"norm-epsilon", m->norm_epsilon},
        {"position-embedding-type", m->position_embedding},
        {"rotary-base", m->rotary_base},
        {"rotary-percent", m->rotary_percent},
        {"swiglu", m->swiglu},
        {"num-query-groups", m->num_query_groups},
        {"kv-channels", m->kv_channels},
        {"untie-embeddings-and-output-weights", m->untie_embeddings},
        {"disable-bias-linear", m->disable_bias_linear},
        {"qk-layernorm", m->qk_layernorm},
        {"mtp-num-layers", m->mtp_num_layers},
        {"mtp-loss-scaling-factor", m->mtp_loss_scaling_factor},
        {"micro-batch-size", c->micro_batch},
        {"global-batch-size", c->global_batch},
        {"step-batch-size-schedule", schedule_key(c)},
        {"train-iters", (double)c->train_iters},
        {"lr", c->lr.lr},
        {"min-lr", c->lr.min_lr},
        {"lr-warmup-iters", (double)c->lr.warmup_iters},
        {"lr-decay-iters", (double)c->lr.decay_iters},
        {"lr-decay-style", c->lr.style},
        {"adam-beta1", c->adam.beta1},
        {"adam-beta2", c->adam.beta2},
        {"adam-eps", c->adam.eps},
        {"weight-decay", c->adam.weight_decay},
        {"clip-grad", c->clip_grad},
        {"seed", (double)c->seed},
        {"tensor-model-parallel-size", c->grid.tp},
        {"pipeline-model-parallel-size", c->grid.pp},
        {"context-parallel-size", c->grid.cp},
        {"hierarchical-context-parallel-sizes", c->grid.hcp[0] * 1000.0 + c->grid.hcp[1]},
        {"virtual-pipeline-model-parallel-size", c->grid.vpp},
        {"decoder-first-pipeline-num-layers", c->pp_split.first_num_layers},
        {"decoder-last-pipeline-num-layers", c->pp_split.last_num_layers},
        {"account-for-embedding-in-pipeline-split", c->pp_split.account_for_embedding},
        {"account-for-loss-in-pipeline-split", c->pp_split.account_for_loss},
        {"pipeline-model-parallel-layout (hash)", pp_layout_fingerprint(c->pp_split.layout)},
        {"use-distributed-optimizer", c->use_distributed_optimizer},
        {"num-distributed-optimizer-instances", c->grid.num_dist_opt_instances},
        {"recompute-granularity full", c->recompute_full},
        {"recompute-num-layers", c->recompute_num_layers},
        {"recompute-modules mlp", c->recompute_mlp},
        {"recompute-modules shared_experts", c->recompute_shared},
        {"recompute-modules moe", c->recompute_moe},
        {"recompute-modules moe_act", c->recompute_moe_act},
        {"recompute-modules mla_up_proj", c->recompute_mla_up},
        {"bf16", c->bf16},
        {"fp16", c->fp16},
        {"grad-reduce-in-bf16", c->grad_reduce_in_bf16},
        /* fp8: the recipe decides which amax reductions and gathers run (tp/fp8_linear.h) */
        {"fp8-format (given or not)", f8->enabled},
        {"fp8-format hybrid", f8->hybrid},
        {"fp8-recipe", f8->recipe},
        {"fp8-margin", f8->margin},
        {"fp8-amax-history-len", f8->amax_history_len},
        {"fp8-amax-compute-algo max", f8->amax_max},
        {"fp8-wgrad", f8->wgrad},
        {"tp-only-amax-red", f8->tp_only_amax_red},
        {"num-layers-at-start-in-bf16", f8->bf16_start},
        {"num-layers-at-end-in-bf16", f8->bf16_end},
        {"fp8-param-gather", f8->param_gather},
        {"data (tokens in the data set)", (double)data_tokens},
        /* the logged and evaluated iterations run collectives on every rank */
        {"log-interval", c->log_interval},
        {"eval-interval", c->eval_interval},
        {"eval-iters", c->eval_iters},
        {"metrics (given or not)", c->metrics_path != NULL},
        {"timing-log-level", c->timing_log_level},
        {"timing-log-option", c->timing_log_option},
        /* the MoE model and its layout */
        {"num-experts", moe->num_experts},
        {"moe-layer-freq", moe_layers_key(c)},
        {"moe-ffn-hidden-size", moe->ffn_hidden_size},
        {"moe-router-topk", moe->topk},
        {"moe-router-score-function", moe->score},
        {"moe-router-pre-softmax", moe->pre_softmax},
        {"moe-router-topk-scaling-factor", moe->topk_scaling},
        {"moe-router-num-groups", moe->num_groups},
        {"moe-router-group-topk", moe->group_topk},
        {"moe-router-enable-expert-bias", moe->expert_bias},
        {"moe-router-bias-update-rate", moe->bias_update_rate},
        {"moe-router-load-balancing-type", moe->lb},
        {"moe-aux-loss-coeff", moe->aux_coeff},
        {"moe-z-loss-coeff", moe->z_coeff},
        {"moe-expert-capacity-factor", moe->capacity_factor},
        {"moe-token-drop-policy", moe->drop},
        {"moe-pad-expert-input-to-capacity", moe->pad_to_capacity},
        {"moe-shared-expert-intermediate-size", moe->shared_ffn},
        {"moe-token-dispatcher-type", moe->dispatcher},
        {"expert-model-parallel-size", c->grid.ep},
        {"expert-tensor-parallel-size", c->grid.etp},
        /* the schedule and its reductions */
        {"microbatch-group-size-per-virtual-pipeline-stage", c->microbatch_group_size},
        {"recompute-method block", c->recompute_block},
        {"overlap-grad-reduce", c->overlap_grad_reduce},
        {"ddp-bucket-size", (double)c->ddp_bucket_size},
        {"overlap-param-gather", c->overlap_param_gather},
        {"pad-buckets-for-high-nccl-busbw", c->pad_high_busbw},
        {"decoupled-lr", c->decoupled ? c->decoupled_lr : -1},
        {"decoupled-min-lr", c->decoupled_min_lr},
        {"no-check-for-nan-in-loss-and-grad", c->no_check_nan},
        {"log-params-norm", c->log_params_norm},
        {"log-num-zeros-in-grad", c->log_num_zeros},
        {"loss-scale", c->loss_scale},
        {"initial-loss-scale", c->initial_loss_scale},
        {"min-loss-scale", c->min_loss_scale},
        {"loss-scale-window", c->loss_scale_window},
        {"hysteresis", c->hysteresis},
        {"print-layout", c->print_layout},
        /* checkpoints: every rank writes its shard and meets at barriers */
        {"save (given or not)", c->save_path != NULL},
        {"save-interval", c->save_interval},
        {"async-save", c->async_save},
        {"load (given or not)", c->load_path != NULL},
        {"ckpt-step", (double)c->ckpt_step},
        {"no-load-optim", c->no_load_optim},
        {"finetune", c->finetune},
        /* exit conditions: every rank must stop after the same iteration */
        {"exit-interval", (double)c->exit_interval},
        {"exit-duration-in-mins", c->exit_duration_mins},
        /* outputs gathered from every rank */
        {"trace (given or not)", c->trace_path != NULL},
        {"profile-step-start", (double)c->profile_step_start},
        {"profile-step-end", (double)c->profile_step_end},
        {"trace-buffer-mb", c->trace_buffer_mb},
        {"tensorboard-dir (given or not)", tb->dir != NULL},
        {"tensorboard-log-interval", tb->log_interval},
        {"log-timers-to-tensorboard", tb->log_timers},
        {"log-memory-to-tensorboard", tb->log_memory},
        {"log-validation-ppl-to-tensorboard", tb->log_validation_ppl},
    };
    enum { NF = sizeof f / sizeof f[0], NA = NF + MTC_MODEL_PARALLEL_KEYS };
    const char *flag[NA];
    double v[NA], lo[NA], hi[NA];
    for (int i = 0; i < NF; i++)
        flag[i] = f[i].flag, v[i] = f[i].v;
    /* the strategies' own options, as the model lists them */
    int n = NF + mtc_model_parallel_keys(&c->parallel, m->num_layers, flag + NF, v + NF);
    for (int i = 0; i < n; i++)
        lo[i] = hi[i] = v[i];
    MTC_CHECK(mtc_all_reduce(lo, lo, (size_t)n, MTC_DTYPE_F64, MTC_OP_MIN, world));
    MTC_CHECK(mtc_all_reduce(hi, hi, (size_t)n, MTC_DTYPE_F64, MTC_OP_MAX, world));
    for (int i = 0; i < n; i++) /* lo and hi are alike on every rank: all take this branch */
        if (lo[i] != hi[i]) return agreement_report(flag[i], v[i], lo[i], hi[i], world);
    return MTC_OK;
}
