/* train/train.c - the training loop of one rank on a tp x dp layout and its
 * launch; see train.h. Relies on model/, optim/, data/, comm/, grid/, dp/.
 * Allocates everything before the first iteration; the step loop only
 * computes and communicates. */
#include "train/train.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "core/log.h"
#include "core/outfile.h"
#include "core/peak.h"
#include "core/timer.h"
#include "core/trace.h"
#include "dp/ddp.h"
#include "grid/grid.h"
#include "nn/lowp.h"
#include "tp/mappings.h"
#include "train/train_internal.h"

mtc_result_t mtc_train_validate(const mtc_train_config *c) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    MTC_CHECK(mtc_model_config_validate(&c->model));
    if (c->micro_batch < 1 || c->micro_batch > MTC_TRAIN_MAX_MICRO_BATCH)
        return mtc_error(E, "micro-batch-size=%d must be 1..%d", c->micro_batch,
                         MTC_TRAIN_MAX_MICRO_BATCH);
    if ((int64_t)c->micro_batch * c->model.seq_length > MTC_TRAIN_MAX_MICRO_TOKENS)
        return mtc_error(E,
                         "micro-batch-size=%d x seq-length=%d is above %d tokens per microbatch "
                         "(lower either)",
                         c->micro_batch, c->model.seq_length, MTC_TRAIN_MAX_MICRO_TOKENS);
    if (c->global_batch < 1)
        return mtc_error(E, "global-batch-size=%d must be >= 1", c->global_batch);
    if (c->global_batch % c->micro_batch)
        return mtc_error(E,
                         "global-batch-size=%d is not divisible by micro-batch-size=%d x "
                         "data-parallel size 1 (use a multiple of %d)",
                         c->global_batch, c->micro_batch, c->micro_batch);
    if (c->bf16 && c->fp16)
        return mtc_error(E,
                         "--bf16 and --fp16 were both given: choose one (Megatron refuses both)");
    if (c->grad_reduce_in_bf16 && !c->bf16)
        return mtc_error(E, "--grad-reduce-in-bf16 needs --bf16");
    if (c->fp16 || c->bf16) { /* the scaler's own checks, before any work */
        mtc_grad_scaler gs;
        if (c->loss_scale != 0)
            MTC_CHECK(mtc_grad_scaler_init_constant(&gs, c->loss_scale));
        else if (c->fp16)
            MTC_CHECK(mtc_grad_scaler_init_dynamic(
                &gs, c->initial_loss_scale != 0 ? c->initial_loss_scale : MTC_LOSS_SCALE_INITIAL,
                c->min_loss_scale != 0 ? c->min_loss_scale : MTC_LOSS_SCALE_MIN,
                c->loss_scale_window != 0 ? c->loss_scale_window : MTC_LOSS_SCALE_WINDOW,
                c->hysteresis != 0 ? c->hysteresis : MTC_LOSS_SCALE_HYSTERESIS));
    }
    if (c->bf16 && c->bf16_gemm == NN_BF16_GEMM_DNNL && !nn_lowp_available())
        return mtc_error(MTC_ERR_UNSUPPORTED,
                         "--bf16-gemm dnnl-bf16 needs oneDNN and this mtc was built without it: "
                         "install libdnnl-dev (scripts/deps.sh does) and re-run cmake, or use "
                         "--bf16-gemm fp32");
    if (c->bf16_gemm < NN_BF16_GEMM_AUTO || c->bf16_gemm > NN_BF16_GEMM_F32)
        return mtc_error(E, "bf16-gemm=%d is not an engine (auto, dnnl-bf16, fp32)", c->bf16_gemm);
    if (c->ddp_bucket_size < 0)
        return mtc_error(E, "ddp-bucket-size=%lld must be >= 0", (long long)c->ddp_bucket_size);
    if (c->train_iters < 1)
        return mtc_error(E, "train-iters=%lld must be >= 1", (long long)c->train_iters);
    if (!(c->lr.lr >= 0 && c->lr.lr <= 1e3))
        return mtc_error(E, "lr=%g must be a finite number in [0, 1000]", c->lr.lr);
    if (!(c->clip_grad >= 0 && c->clip_grad <= 1e30))
        return mtc_error(E, "clip-grad=%g must be a finite number >= 0 (0 = off)", c->clip_grad);
    if (!(c->lr.min_lr >= 0) || c->lr.min_lr > c->lr.lr)
        return mtc_error(E, "min-lr=%g must be in [0, lr=%g]", c->lr.min_lr, c->lr.lr);
    if (c->lr.warmup_iters < 0) return mtc_error(E, "lr-warmup-iters must be >= 0");
    if (c->lr.decay_iters < 1) return mtc_error(E, "lr-decay-iters must be >= 1");
    if (c->lr.style != MTC_LR_CONSTANT && c->lr.warmup_iters >= c->lr.decay_iters &&
        c->lr.warmup_iters > 0)
        return mtc_error(E, "lr-warmup-iters=%lld must be smaller than lr-decay-iters=%lld",
                         (long long)c->lr.warmup_iters, (long long)c->lr.decay_iters);
    if (c->log_interval < 1) return mtc_error(E, "log-interval=%d must be >= 1", c->log_interval);
    if (c->eval_interval < 1)
        return mtc_error(E, "eval-interval=%d must be >= 1", c->eval_interval);
    if (c->eval_iters < 0) return mtc_error(E, "eval-iters=%d must be >= 0", c->eval_iters);
    if (!(c->adam.beta1 >= 0 && c->adam.beta1 < 1) || !(c->adam.beta2 >= 0 && c->adam.beta2 < 1))
        return mtc_error(E, "adam-beta1=%g and adam-beta2=%g must be in [0, 1)", c->adam.beta1,
                         c->adam.beta2);
    if (!(c->adam.eps > 0 && c->adam.eps < 1))
        return mtc_error(E, "adam-eps=%g must be in (0, 1)", c->adam.eps);
    if (!(c->adam.weight_decay >= 0 && c->adam.weight_decay <= 1e3))
        return mtc_error(E, "weight-decay=%g must be a finite number in [0, 1000]",
                         c->adam.weight_decay);
    if (c->threads < 0) return mtc_error(E, "threads=%d must be >= 1 (0 = all cores)", c->threads);
    return MTC_OK;
}

mtc_result_t mtc_train_validate_layout(const mtc_train_config *c, int world) {
    const mtc_result_t E = MTC_ERR_INVALID_ARGUMENT;
    /* train's own rules on the grid's sizes first (the grid's checks word them otherwise) */
    if (c->grid.vpp > 1 && c->grid.pp <= 1)
        return mtc_error(E, "When interleaved schedule is used, pipeline-model-parallel size "
                            "should be greater than 1");
    int nd = c->grid.num_dist_opt_instances > 1 ? c->grid.num_dist_opt_instances : 1;
    if (nd > 1 && !c->use_distributed_optimizer)
        return mtc_error(
            E, "num-distributed-optimizer-instances=%d needs --use-distributed-optimizer", nd);
    MTC_CHECK(train_fsdp_validate(c)); /* train_fsdp.c */
    mtc_grid_config gc = c->grid;
    gc.world_size = world > 0 ? world : 1;
    mtc_grid_spec spec;
    MTC_CHECK(mtc_grid_spec_init(&spec, &gc));
    int vpp = gc.pp > 1 && gc.vpp > 1 ? gc.vpp : 0;
    /* the layer split: the grid's even rule, or pp/layout.c's for the uneven flags */
    int split = pp_layout_given(&c->pp_split);
    MTC_CHECK(mtc_grid_validate_model(&spec, c->model.num_heads, c->model.seq_length,
                                      c->model.moe.num_experts, split ? 0 : c->model.num_layers,
                                      vpp));
    /* the split's rules up front; a stage without a layer, E or L (Megatron's
     * layouts allow them) runs as a chunk without parameters that passes
     * activations through */
    if (split) MTC_CHECK(pp_layout_validate(&c->pp_split, c->model.num_layers, gc.pp, vpp));
    int dp = spec.dp;
    /* each strategy's rules, asked through the model (model/model_parallel.c) */
    MTC_CHECK(mtc_model_validate_parallel(&c->model, &gc, &spec, &c->parallel));
    /* Megatron's MultiTokenPredictionLayer._checkpointed_forward asserts it */
    if (c->model.mtp_num_layers > 0 && c->recompute_full && !c->recompute_block &&
        c->recompute_num_layers != 1)
        return mtc_error(E,
                         "recompute_num_layers must be 1 for MTP recompute (got "
                         "recompute-num-layers=%d with --recompute-method uniform and "
                         "mtp-num-layers=%d; use --recompute-num-layers 1)",
                         c->recompute_num_layers, c->model.mtp_num_layers);
    if (c->global_batch % ((int64_t)c->micro_batch * dp))
        return mtc_error(E,
                         "global-batch-size=%d is not divisible by micro-batch-size=%d x "
                         "data-parallel size %d (use a multiple of %lld)",
                         c->global_batch, c->micro_batch, dp, (long long)c->micro_batch * dp);
    /* every --step-batch-size-schedule entry the run reaches (from 0
     * samples), where Megatron checks the one in force at each iteration */
    const mtc_batch_schedule *bs = c->batch_schedule;
    int reached[MTC_BATCH_SCHEDULE_MAX] = {0};
    if (bs) mtc_batch_schedule_walk(bs, 0, c->train_iters, reached);
    for (int e = 0; bs && e < bs->n; e++) {
        if (!reached[e]) continue;
        int64_t b = bs->batch[e], mbdp = (int64_t)c->micro_batch * dp;
        if (b % mbdp)
            return mtc_error(E,
                             "step-batch-size-schedule batch %lld (from %llu samples) is not "
                             "divisible by micro-batch-size=%d x data-parallel size %d (use a "
                             "multiple of %lld)",
                             (long long)b, (unsigned long long)bs->threshold[e], c->micro_batch, dp,
                             (long long)mbdp);
        if (gc.pp > 1) {
            pp_schedule_config sc = {.pp = gc.pp,
                                     .vpp = vpp,
                                     .group_size = c->microbatch_group_size,
                                     .num_microbatches = (int)(b / mbdp)};
            MTC_CHECK(pp_schedule_validate(&sc));
        }
    }
    if (nd > 1 && dp % nd)
        return mtc_error(E,
                         "num-distributed-optimizer-instances=%d does not divide the data-parallel "
                         "size %d (use a divisor of %d)",
                         nd, dp, dp);
    if (gc.pp > 1 && (!bs || c->eval_iters > 0)) {
        pp_schedule_config sc = {.pp = gc.pp,
                                 .vpp = vpp,
                                 .group_size = c->microbatch_group_size,
                                 .num_microbatches = c->global_batch / (c->micro_batch * dp)};
        char why[256] = "";
        if (bs && pp_schedule_validate(&sc) != MTC_OK) /* only evaluation runs this batch */
            snprintf(why, sizeof why, "%s", mtc_error_detail());
        if (why[0])
            return mtc_error(E,
                             "the evaluation batch (global-batch-size=%d, Megatron's eval batch) "
                             "does not fit the pipeline schedule: %s (pass --global-batch-size "
                             "equal to the step-batch-size-schedule's last batch, or "
                             "--eval-iters 0)",
                             c->global_batch, why);
        MTC_CHECK(pp_schedule_validate(&sc));
    }
    return MTC_OK;
}

/* Defined only in bench builds that time every collective per rank-thread
 * (tests/parity/comm_wrap.c); else the explicit step collectives are timed. */
uint64_t mtc_train_comm_wait_ns(void) __attribute__((weak));

/* What every rank shares (read-only but the fault counter) and what the
 * launcher hands back. */
typedef struct {
    const mtc_train_config *cfg;
    const data_source *src;
    FILE *out;
    int threads_per_rank;
    mtc_ckpt_fault ckpt_fault; /* every writer of the process counts on it (--async-save's too) */
} train_shared;

static void train_print_eval(FILE *out, int64_t iteration, double loss) {
    char line[256];
    int n =
        snprintf(line, sizeof line,
                 " validation loss at iteration %lld | lm loss value: %.6E | lm loss PPL: %.6E | ",
                 (long long)iteration, loss, exp(loss < 700 ? loss : 700));
    char dashes[300];
    int k = n + 1 < (int)sizeof dashes - 1 ? n + 1 : (int)sizeof dashes - 1;
    memset(dashes, '-', (size_t)k);
    dashes[k] = 0;
    fprintf(out, "%s\n%s\n%s\n", dashes, line, dashes);
}

static void train_banner(train_rank *x, FILE *out, int world, int do_eval) {
    const mtc_train_config *c = x->cfg;
    const mtc_model *model = x->chunks[0].model;
    const mtc_ddp *ddp = x->chunks[0].buf[TRAIN_GBUF_DENSE].ddp;
    int B = c->micro_batch, T = c->model.seq_length;
    char desc[512];
    mtc_grid_describe(desc, sizeof desc, mtc_grid_spec_get(x->grid));
    fprintf(out, "%s\n", desc);
    char bucket[64] = "one bucket";
    if (ddp->cfg.bucket_size > 0)
        snprintf(bucket, sizeof bucket, "%lld", (long long)ddp->cfg.bucket_size);
    fprintf(out,
            "> backend: %s; %d rank(s), %d thread(s) per rank; sequence parallel: %s; overlap grad "
            "reduce: %s; ddp bucket size: %s\n",
            mtc_comm_backend_name(x->world), world, nn_pool_size(x->pool),
            model->tp.sequence_parallel ? "on" : "off", c->overlap_grad_reduce ? "on" : "off",
            bucket);
    mtc_grid_print_nodes(x->grid, x->world, out);
    if (c->use_distributed_optimizer)
        fprintf(out,
                "> distributed optimizer: %d instance(s), state sharded over %d rank(s); overlap "
                "param gather: %s; pad buckets for high busbw: %s\n",
                ddp->instances, ddp->layout.dp, c->overlap_param_gather ? "on" : "off",
                c->pad_high_busbw ? "on" : "off");
    mtc_model_describe_parallel(model, &c->parallel, out); /* the CP line */
    char blas[512]; /* nn_blas_describe: the fp32 GEMM engine and why, the BLAS */
    nn_blas_describe(blas, sizeof blas);
    fprintf(out, "> BLAS: %s\n", blas);
    for (int k = 0; k < x->vpp; k++) { /* the chunk with the loss: its LM head's chunking */
        const mtc_model *hm = x->chunks[k].model;
        if (!hm->has_head) continue;
        long N = (long)hm->B * hm->T, rows = hm->head_chunk < N ? hm->head_chunk : N;
        int tps = tp_size(hm->tp.comm);
        fprintf(out,
                "> LM head: fused with the loss, %d tokens a chunk (%s; --lm-head-chunk): "
                "logits buffer %.1f MB\n",
                hm->head_chunk, rows < N ? "chunked" : "every token of a microbatch at once",
                (double)rows * (hm->cfg.padded_vocab_size / tps) * sizeof(float) / 1e6);
    }
    fprintf(out, "> data: %s\n", data_source_describe(x->src));
    /* every model chunk of this rank, as Megatron's get_model sums them
     * (reg.total would count the distributed optimizer's padding too) */
    size_t nparams = 0;
    for (int k = 0; k < x->vpp; k++)
        for (int i = 0; i < x->chunks[k].model->reg.count; i++)
            nparams += x->chunks[k].model->reg.params[i].local_numel;
    fprintf(out,
            " > number of parameters on (tensor, pipeline) model parallel rank (%d, %d): %zu\n",
            train_tp_rank(x), x->pp_rank, nparams);
    fprintf(out, "> model: %d layers, hidden %d, %d heads, ffn %d, seq %d, vocab %d (padded %d)\n",
            c->model.num_layers, c->model.hidden_size, c->model.num_heads, c->model.ffn_hidden_size,
            T, c->model.vocab_size, c->model.padded_vocab_size);
    if (x->pp_size > 1) { /* Megatron logs the parsed layout's table (pp/layout.c) */
        char name[256], table[4096];
        pp_layout_name(name, sizeof name, &c->pp_split);
        if (pp_layout_describe(table, sizeof table, &c->pp_split, c->model.num_layers, x->pp_size,
                               x->vpp) == MTC_OK)
            fprintf(out, "> pipeline split (%s):\n%s\n", name, table);
        pp_layout_describe_messages(table, sizeof table, &c->pp_split, c->model.num_layers,
                                    x->pp_size, x->vpp); /* a standalone MTP stage's */
        if (table[0]) fprintf(out, "> %s\n", table);
    }
    mtc_model_describe_moe(model, mtc_grid_spec_get(x->grid), out);
    mtc_dp_memory mem;
    size_t act = train_memory(x, &mem);
    fprintf(out,
            "> memory per rank (MB): parameters %.2f, gradients %.2f, optimizer state %.2f, "
            "activations %.2f\n",
            (double)mem.param_bytes / 1048576.0, (double)mem.grad_bytes / 1048576.0,
            (double)mem.optim_state_bytes / 1048576.0, (double)act / 1048576.0);
    if (c->bf16 || c->fp16) {
        /* what mixed precision adds on this rank, beside the lines above */
        size_t copies = 0, scratch = 0;
        long made = 0;
        for (int k = 0; k < x->vpp; k++) {
            const mtc_model *m = x->chunks[k].model;
            copies += m->reg.total * (sizeof(float) + (m->params16 ? sizeof(mtc_bf16) : 0));
            scratch += 2 * m->lowp.cap * sizeof(float);
            long cr = 0, hits = 0;
            if (m->lowp.lp) nn_lowp_stats(m->lowp.lp, &cr, &hits);
            made += cr;
        }
        char gemm[400] = "fp32 GEMMs on fp16-rounded inputs", why[200] = "set by --bf16-gemm";
        if (c->bf16 && x->bf16_gf[1] > 0)
            snprintf(why, sizeof why,
                     "%s on %dx%dx%d: oneDNN bf16 %.1f GFLOP/s, fp32 %.1f GFLOP/s, bf16/fp32 "
                     "%.2f; --bf16-gemm overrides",
                     x->bf16_cached ? "measured earlier on this machine" : "measured",
                     x->bf16_shape[0], x->bf16_shape[1], x->bf16_shape[2], x->bf16_gf[0],
                     x->bf16_gf[1], x->bf16_gf[0] / x->bf16_gf[1]);
        else if (c->bf16 && c->bf16_gemm == NN_BF16_GEMM_AUTO)
            snprintf(why, sizeof why, "mtc was built without oneDNN");
        if (c->bf16 && x->bf16_gemm == NN_BF16_GEMM_DNNL) {
            char impl[96] = "";
            if (x->chunks[0].model->lowp.lp)
                nn_lowp_describe(x->chunks[0].model->lowp.lp, impl, sizeof impl);
            snprintf(gemm, sizeof gemm,
                     "GEMM engine dnnl-bf16 (%s): bf16 GEMMs by %s, %ld primitives made at set-up",
                     why, impl, made);
        } else if (c->bf16) {
            snprintf(gemm, sizeof gemm,
                     "GEMM engine fp32 (%s): fp32 GEMMs on bf16-valued weights and inputs (exact "
                     "products, fp32 accumulation)",
                     why);
        }
        fprintf(out,
                "> mixed precision: %s; %s; parameters and gradients above are the fp32 main "
                "params and grads; compute copies %.2f MB, conversion scratch %.2f MB; "
                "activations above are %s values in fp32 storage (Megatron's tensors: half)\n",
                c->bf16 ? "bf16" : "fp16", gemm, (double)copies / 1048576.0,
                (double)scratch / 1048576.0, c->bf16 ? "bf16" : "fp16");
        if (x->chunks[0].model->main_sharded) {
            size_t released = 0;
            for (int k = 0; k < x->vpp; k++)
                released += x->chunks[k].model->main_released;
            fprintf(out,
                    "> fp32 main params: only this rank's distributed-optimizer shard (%.2f MB "
                    "above; %.2f MB of the full buffer given back); the param all-gather carries "
                    "the owners' bf16-rounded params into the compute copies\n",
                    (double)mem.param_bytes / 1048576.0, (double)released / 1048576.0);
        }
    }
    train_fp8_banner(x, out);
    fprintf(out, "> model, optimizer state and data set up in %.2f s\n",
            (double)x->setup_ns * 1e-9);
    if (c->batch_schedule)
        fprintf(out,
                "> micro batch %d x data-parallel %d; the global batch follows the step batch "
                "size schedule below (evaluation batch %d); %lld iterations\n",
                B, x->dp_size, c->global_batch, (long long)c->train_iters);
    else
        fprintf(out,
                "> micro batch %d x %d microbatches x data-parallel %d = global batch %d; %lld "
                "iterations\n",
                B, x->nmb, x->dp_size, c->global_batch, (long long)c->train_iters);
    for (int e = 0; c->batch_schedule && e < c->batch_schedule->n; e++)
        fprintf(out, "%s >= %llu samples (%llu tokens) -> global batch %lld, %lld microbatches\n",
                e ? "" : "> step batch size schedule:\n",
                (unsigned long long)c->batch_schedule->threshold[e],
                (unsigned long long)c->batch_schedule->threshold[e] * (unsigned long long)T,
                (long long)c->batch_schedule->batch[e],
                (long long)(c->batch_schedule->batch[e] / ((int64_t)B * x->dp_size)));
    if (c->peak_tflops > 0)
        fprintf(out, "> MFU against a peak of %.4g TFLOP/s per rank (%s)\n", c->peak_tflops,
                c->peak_source ? c->peak_source : "--peak-tflops");
    else if (c->peak_source) /* a cached peak not taken: why */
        fprintf(out, "> no MFU: %s\n", c->peak_source);
    if (c->eval_iters > 0 && !do_eval) fprintf(out, "> validation split is empty: no evaluation\n");
    fflush(out);
}

static uint64_t train_comm_ns(const void *xr) {
    const train_rank *x = xr;
    return mtc_train_comm_wait_ns ? mtc_train_comm_wait_ns() : x->comm_ns;
}

static mtc_result_t train_loop(train_rank *x, FILE *out, FILE *metrics, int world) {
    const mtc_train_config *c = x->cfg;
    int T = c->model.seq_length;
    int do_eval = c->eval_iters > 0 && data_source_split_size(x->src, DATA_SPLIT_VALID) > 0;
    if (out && !c->quiet) train_banner(x, out, world, do_eval);
    if (out && c->print_layout) train_print_layout(x, out);
    mtc_dp_memory mem;
    size_t act_bytes = train_memory(x, &mem);
    if (out && c->optim_state_bytes_out) *c->optim_state_bytes_out = mem.optim_state_bytes;
    uint64_t consumed = x->start_consumed; /* a loaded checkpoint's, else 0 */
    x->iteration = x->start_iteration, x->consumed = consumed;
    double sum_loss = 0, sum_ms = 0, sum_lb = 0, sum_z = 0, sum_flops = 0, sum_samples = 0;
    int64_t prev_batch = train_batch_at(c, consumed);
    moe_step_summary moe;
    const mtc_model *models[64]; /* this rank's chunks (at most 64: train_setup) */
    for (int k = 0; k < x->vpp; k++)
        models[k] = x->chunks[k].model;
    int n_logged = 0, skipped = 0, nan_iters = 0, n_advanced = 0;
    uint64_t comm_at_log = train_comm_ns(x), loop_t0 = mtc_time_ns();
    for (int64_t it = x->start_iteration + 1; it <= c->train_iters; it++) {
        /* Megatron saves a checkpoint before the microbatch count changes */
        int64_t batch = train_batch_at(c, consumed);
        if (batch != prev_batch && it > 1 && c->save_path && x->last_saved != it - 1)
            MTC_CHECK(train_ckpt_save(x, it - 1, consumed, out));
        prev_batch = batch;
        train_obs_iteration(x, it);
        uint64_t t0 = mtc_time_ns();
        double loss = 0, norm = 0;
        MTC_CHECK(train_step(x, it, consumed, &loss, &norm, &skipped));
        /* comm: all-reduce(world) with experts */
        MTC_CHECK(mtc_model_moe_summary(models, x->vpp, x->world, x->dp_size, &moe));
        if (c->log_params_norm) MTC_CHECK(train_params_norm(x)); /* comm: all-reduces */
        sum_lb += moe.lb_loss, sum_z += moe.z_loss;
        char step_name[48];
        snprintf(step_name, sizeof step_name, "iteration %lld", (long long)it);
        if (mtc_trace_recording(x->obs.trace))
            mtc_trace_span(x->obs.trace, MTC_TRACK_COMPUTE, step_name, "step", t0, mtc_time_ns(),
                           NULL);
        int skipped_now = x->scaler_skipped; /* --fp16: inf/NaN grads, step skipped */
        if (isnan(loss)) nan_iters++;
        if (out && c->loss_scales_out) c->loss_scales_out[it - 1] = x->loss_scale;
        /* Megatron's --check-for-nan-in-loss-and-grad (on by default): a
         * non-finite loss or gradient stops the run before anything is saved
         * (the loss scaler's overflows excepted: those steps are skipped) */
        if (!c->no_check_nan && (!isfinite(loss) || (!isfinite(norm) && !skipped_now)))
            return mtc_error(MTC_ERR_NUMERIC,
                             "found %s in the %s at iteration %lld (loss %g, grad norm %g): "
                             "stopping without saving (lower --lr, raise --clip-grad's effect, or "
                             "pass --no-check-for-nan-in-loss-and-grad to skip such steps)",
                             isnan(loss) || isnan(norm) ? "NaN" : "Inf",
                             !isfinite(loss) ? "loss" : "gradient norm", (long long)it, loss, norm);
        consumed += (uint64_t)x->cur_batch;
        sum_flops += mtc_model_flops(&c->model, x->cur_batch), sum_samples += (double)x->cur_batch;
        x->iteration = it, x->consumed = consumed;
        double ms = (double)(mtc_time_ns() - t0) * 1e-6;
        /* Megatron averages the loss over the advanced (not skipped) iterations */
        if (!skipped_now) sum_loss += loss, n_advanced++;
        for (int d = 0; d < c->model.mtp_num_layers && !skipped_now; d++)
            x->mtp_loss_sum[d] += x->mtp_loss[d];
        sum_ms += ms, n_logged++;
        if (out && c->losses_out) c->losses_out[it - 1] = loss;
        if (out && c->grad_norms_out) c->grad_norms_out[it - 1] = norm;

        int log_now = it % c->log_interval == 0 || it == c->train_iters;
        int eval_now = do_eval && it % c->eval_interval == 0;
        double avg_ms = sum_ms / n_logged, avg_loss = sum_loss / (n_advanced ? n_advanced : 1);
        double lr_now = mtc_lr_at_n(&c->lr, train_sched_steps(x));
        double tps = sum_samples * T / (sum_ms * 1e-3);
        double tflops = sum_flops / (sum_ms * 1e-3 * 1e12 * world);
        char mfu[64] = "";
        if (c->peak_tflops > 0)
            snprintf(mfu, sizeof mfu, " model FLOPs utilization: %.2f%% |",
                     100 * mtc_mfu(sum_flops, sum_ms * 1e-3, world, c->peak_tflops * 1e12));
        char moe_fields[96]; /* Megatron's, after the lm loss */
        moe_step_summary_log(&moe, &c->model.moe, moe_fields, sizeof moe_fields, sum_lb / n_logged,
                             sum_z / n_logged);
        if (log_now && out) {
            char stamp[32];
            time_t now = time(NULL);
            struct tm tmv;
            strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", localtime_r(&now, &tmv));
            /* Megatron prints the scaler's scale after this step's update (1.0
             * without one) and no grad norm for a step the scaler skipped */
            char gn[128] = "", lm[48] = "";
            if (!skipped_now) snprintf(gn, sizeof gn, " grad norm: %.3f |", norm);
            /* Megatron's "num zeros" (its fp32 count, Python's repr) and "params norm" */
            if (c->log_num_zeros && x->num_zeros >= 0)
                snprintf(gn + strlen(gn), sizeof gn - strlen(gn), " num zeros: %.1f |",
                         x->num_zeros);
            if (c->log_params_norm)
                snprintf(gn + strlen(gn), sizeof gn - strlen(gn), " params norm: %.3f |",
                         x->params_norm);
            /* and, as Megatron, no lm loss when every iteration since the
             * last line was skipped (its average would be 0) */
            if (n_advanced) snprintf(lm, sizeof lm, " lm loss: %.6E |", avg_loss);
            char mtp[24 * 8] = ""; /* Megatron's "mtp_k loss" entries, after the lm loss */
            for (int d = 0; d < c->model.mtp_num_layers && n_advanced && d < 8; d++)
                snprintf(mtp + strlen(mtp), sizeof mtp - strlen(mtp), " mtp_%d loss: %.6E |", d + 1,
                         x->mtp_loss_sum[d] / n_advanced);
            fprintf(
                out,
                " [%s] iteration %8lld/%8lld | consumed samples: %12llu | elapsed time per "
                "iteration (ms): %.1f | throughput per GPU (TFLOP/s/GPU): %.4g |%s tokens per "
                "second: %.1f | learning rate: %.6E | global batch size: %5d |%s%s%s loss scale: "
                "%.1f |%s number of skipped iterations: %3d | number of nan iterations: %3d |\n",
                stamp, (long long)it, (long long)c->train_iters, (unsigned long long)consumed,
                avg_ms, tflops, mfu, tps, lr_now, (int)x->cur_batch, lm, mtp, moe_fields,
                (double)x->loss_scale, gn, skipped, nan_iters);
            fflush(out);
        }
        MTC_CHECK(
            train_tb_step(x, it, consumed, loss, norm, skipped_now, lr_now, world,
                          mem.param_bytes + mem.grad_bytes + mem.optim_state_bytes + act_bytes));
        if (log_now) MTC_CHECK(train_obs_log(x, out, n_logged));
        if (log_now) MTC_CHECK(train_tb_log(x, it, avg_ms * 1e-3, tflops));
        double vloss = 0;
        if (eval_now) {
            MTC_CHECK(train_evaluate(x, &vloss));
            if (out) train_print_eval(out, it, vloss), fflush(out);
            MTC_CHECK(train_tb_eval(x, it, consumed, vloss));
        }
        if (metrics && (log_now || eval_now)) {
            fprintf(metrics, "{\"iteration\": %lld", (long long)it);
            /* a skipped step has no grad norm (Megatron's None): JSON null */
            char gnj[32] = "null";
            if (!skipped_now && isfinite(norm)) snprintf(gnj, sizeof gnj, "%.9g", norm);
            if (log_now)
                fprintf(metrics,
                        ", \"lm_loss\": %.9g, \"grad_norm\": %s, \"lr\": %.9g, \"elapsed_ms\": "
                        "%.3f, \"tokens_per_s\": %.1f, \"comm_ms\": %.3f",
                        avg_loss, gnj, lr_now, avg_ms, tps,
                        (double)(train_comm_ns(x) - comm_at_log) * 1e-6 / n_logged);
            if (log_now && x->use_scaler)
                fprintf(metrics, ", \"loss_scale\": %.9g, \"skipped_iterations\": %d",
                        (double)x->loss_scale, skipped);
            if (log_now && c->log_num_zeros && x->num_zeros >= 0)
                fprintf(metrics, ", \"num_zeros\": %.0f", x->num_zeros);
            if (log_now && c->log_params_norm)
                fprintf(metrics, ", \"params_norm\": %.9g", x->params_norm);
            for (int d = 0; log_now && d < c->model.mtp_num_layers; d++)
                fprintf(metrics, ", \"mtp_%d_loss\": %.9g", d + 1,
                        x->mtp_loss_sum[d] / (n_advanced ? n_advanced : 1));
            if (eval_now) fprintf(metrics, ", \"val_loss\": %.9g", vloss);
            if (log_now)
                moe_step_summary_metrics(&moe, metrics, sum_lb / n_logged, sum_z / n_logged);
            if (log_now) train_obs_metrics(x, metrics, n_logged);
            if (log_now) train_fp8_metrics(x, metrics);
            if (c->fsdp_strategy) /* Megatron-FSDP: the peak resident pages so far */
                act_bytes = train_memory(x, &mem);
            fprintf(metrics,
                    ", \"param_bytes\": %zu, \"grad_bytes\": %zu, \"optim_state_bytes\": %zu, "
                    "\"activation_bytes\": %zu",
                    mem.param_bytes, mem.grad_bytes, mem.optim_state_bytes, act_bytes);
            if (train_fsdp_grads(c)) /* what set-up held before sharding */
                fprintf(metrics, ", \"fsdp_setup_bytes\": %zu", train_fsdp_setup_bytes(x));
            MTC_CHECK(train_obs_rss(x, metrics));
            if (c->bf16) { /* oneDNN primitives made so far: constant after set-up */
                long made = 0;
                for (int k = 0; k < x->vpp; k++) {
                    long cr = 0, hits = 0;
                    nn_lowp_stats(x->chunks[k].model->lowp.lp, &cr, &hits);
                    made += cr;
                }
                fprintf(metrics, ", \"lowp_primitives\": %ld", made);
            }
            fprintf(metrics, "}\n");
            if (fflush(metrics) != 0 || ferror(metrics))
                return mtc_error(MTC_ERR_IO, "writing --metrics %s failed: %s", c->metrics_path,
                                 strerror(errno));
        }
        /* the other ranks' part of the peak-RSS all-gather of a metrics record */
        if (c->metrics_path && !metrics && (log_now || eval_now)) MTC_CHECK(train_obs_rss(x, NULL));
        if (log_now && !metrics) train_obs_metrics(x, NULL, n_logged); /* reset the totals */
        if (log_now && !metrics) train_fp8_metrics(x, NULL);
        if (log_now) {
            sum_loss = sum_ms = sum_lb = sum_z = sum_flops = sum_samples = 0;
            n_logged = 0, skipped = 0, nan_iters = 0, n_advanced = 0;
            memset(x->mtp_loss_sum, 0, sizeof x->mtp_loss_sum);
        }
        if (log_now) comm_at_log = train_comm_ns(x);
        /* an asynchronous save of an earlier iteration is committed once written */
        if (c->async_save) MTC_CHECK(train_ckpt_finalize(x, 0, out));
        if (c->save_path && c->save_interval > 0 && it % c->save_interval == 0)
            MTC_CHECK(train_ckpt_save(x, it, consumed, out));
        /* Megatron's exits; the caller then saves as Megatron does */
        char why[96] = "";
        if (c->exit_duration_mins > 0) { /* comm: all-reduce(world): every rank decides alike */
            double mins = (double)(mtc_time_ns() - loop_t0) / 6e10,
                   done = mins > c->exit_duration_mins;
            MTC_CHECK(mtc_all_reduce(&done, &done, 1, MTC_DTYPE_F64, MTC_OP_MAX, x->world));
            if (done) snprintf(why, sizeof why, "exiting program after %g minutes", mins);
        }
        if (!why[0] && c->exit_interval > 0 && it % c->exit_interval == 0)
            snprintf(why, sizeof why, "exiting program at iteration %lld", (long long)it);
        if (why[0]) {
            if (out) {
                char stamp[32];
                time_t now = time(NULL);
                struct tm tmv;
                strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", localtime_r(&now, &tmv));
                fprintf(out, "[%s] datetime: %s \n", why, stamp);
                fflush(out);
            }
            break;
        }
    }
    return MTC_OK;
}

/* What each rank runs: the last rank (the loss owner) logs and writes files. */
static mtc_result_t train_rank_main(mtc_comm_t world, void *arg) {
    train_shared *sh = arg;
    const mtc_train_config *c = sh->cfg;
    int wsize = mtc_comm_size(world), is_last = mtc_comm_rank(world) == wsize - 1;
    train_rank x;
    memset(&x, 0, sizeof x);
    x.cfg = c, x.src = sh->src;
    x.ckpt_write = (mtc_ckpt_write_opts){.fault = &sh->ckpt_fault};
    FILE *out = is_last ? sh->out : NULL, *metrics = NULL;
    if (out && !c->quiet) { /* setup can take seconds on a large model: say what is happening */
        fprintf(out, "building GPT model ...\n");
        fflush(out);
    }
    /* progress of the long phases on stderr, from rank 0 as Megatron prints */
    mtc_progress_init(&x.progress, mtc_comm_rank(world) == 0 && !c->quiet ? stderr : NULL,
                      (mtc_progress_mode)c->progress);
    uint64_t t0 = mtc_time_ns();
    MTC_CHECK(train_check_agreement(c, world, data_source_num_tokens(sh->src)));
    mtc_result_t rc = train_setup(&x, world, sh->threads_per_rank, out);
    x.setup_ns = mtc_time_ns() - t0;
    mtc_outfile mo = {0}; /* --metrics: a hidden temporary, renamed over the target at the end */
    if (rc == MTC_OK && is_last && c->metrics_path) {
        rc = mtc_outfile_open(&mo, c->metrics_path, "--metrics");
        metrics = rc == MTC_OK ? mo.f : NULL;
    }
    if (rc == MTC_OK) rc = train_obs_setup(&x, world);
    if (rc == MTC_OK && is_last && c->tensorboard.dir) { /* Megatron's writer: the last rank */
        rc = mtc_tb_open(c->tensorboard.dir, &x.obs.tb);
        if (rc == MTC_OK && out && !c->quiet)
            fprintf(out, "> TensorBoard events: %s\n", mtc_tb_path(x.obs.tb));
    }
    /* a rank that failed to set up fails the launch; peers stop with REMOTE */
    if (rc == MTC_OK) rc = train_loop(&x, out, metrics, wsize);
    if (rc == MTC_OK) rc = train_obs_write(&x, is_last);
    struct stat tst; /* where the trace went and how large it is */
    if (rc == MTC_OK && out && !c->quiet && c->trace_path && stat(c->trace_path, &tst) == 0)
        fprintf(out, "> trace: wrote %s (%.1f MB; chrome://tracing or ui.perfetto.dev)\n",
                c->trace_path, (double)tst.st_size / 1048576.0);
    if (rc == MTC_OK && c->save_path && x.last_saved != x.iteration)
        rc = train_ckpt_save(&x, x.iteration, x.consumed, out);
    if (rc == MTC_OK) rc = train_ckpt_finalize(&x, 1, out); /* exit waits for --async-save */
    train_ckpt_abandon(&x);                                 /* an error left one pending */
    if (rc == MTC_OK && c->params_out) {                    /* collective: every rank takes part */
        float *tmp = NULL;
        rc = is_last ? MTC_OK
                     : mtc_mem_alloc(x.chunks[0].model->reg.global_total * sizeof(float),
                                     (void **)&tmp);
        if (rc == MTC_OK) rc = train_gather(&x, is_last ? c->params_out : tmp);
        free(tmp);
    }
    if (is_last && c->comm_ms_out) *c->comm_ms_out = (double)train_comm_ns(&x) * 1e-6;
    /* the run's record, also of a run that failed (up to the failure);
     * a failed write of it leaves the previous file as it was */
    mtc_result_t mc = metrics ? mtc_outfile_commit(&mo) : MTC_OK;
    if (rc == MTC_OK) rc = mc;
    mtc_result_t tbc = mtc_tb_close(x.obs.tb);
    if (rc == MTC_OK) rc = tbc;
    train_teardown(&x); /* first: it ends the progress threads that may still record */
    train_obs_free(&x);
    return rc;
}

mtc_result_t mtc_train_run(const mtc_train_config *c, const data_source *src, FILE *out) {
    MTC_CHECK(mtc_train_validate(c));
    if (data_source_split_size(src, DATA_SPLIT_TRAIN) == 0)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "the training split is empty (check --split and that the data holds more "
                         "than seq-length+1 tokens)");
    int mpi =
        c->backend == MTC_BACKEND_MPI || (c->backend == MTC_BACKEND_AUTO && mtc_launched_by_mpi());
    int world = c->world_size > 0 ? c->world_size : 1;
    if (!mpi) MTC_CHECK(mtc_train_validate_layout(c, world));
    /* the cores this process may use, shared by the ranks on this node
     * (mpi: the launcher's local size; more threads than cores would only
     * take turns) */
    cpu_set_t mask;
    int cores = sched_getaffinity(0, sizeof mask, &mask) == 0 ? CPU_COUNT(&mask)
                                                              : (int)sysconf(_SC_NPROCESSORS_ONLN);
    mtc_launcher_env lenv = {0};
    int ranks_here =
        !mpi
            ? world
            : (mtc_launcher_detect(&lenv) == MTC_OK && lenv.local_world > 0 ? lenv.local_world : 1);
    int threads = c->threads > 0 ? c->threads : cores / ranks_here;
    if (threads < 1) threads = 1;
    /* MFU: the cached machine peak shared by the ranks on this machine */
    mtc_train_config cc = *c;
    char peak_desc[512], other[200];
    mtc_peak peak;
    int cached = !(c->peak_tflops > 0) && mtc_peak_load(&peak) == MTC_OK;
    if (cached && !mtc_peak_usable(&peak, other, sizeof other)) { /* another build's figure */
        snprintf(peak_desc, sizeof peak_desc, "the cached fp32 FMA peak was %s", other);
        cc.peak_source = peak_desc;
    } else if (cached) {
        mtc_launcher_env env = {0};
        int local =
            mpi ? (mtc_launcher_detect(&env) == MTC_OK && env.local_world > 0 ? env.local_world : 1)
                : world;
        cc.peak_tflops = peak.fma_fp32_tflops / local;
        char path[4096];
        mtc_peak_cache_path(path, sizeof path);
        snprintf(peak_desc, sizeof peak_desc,
                 "fp32 FMA peak %.4g TFLOP/s of %d cores, %s, measured %s, / %d rank(s); %.100s",
                 peak.fma_fp32_tflops, peak.cores, peak.isa, peak.measured_at, local, path);
        cc.peak_source = peak_desc;
    }
    mtc_error_clear();
    train_shared sh = {.cfg = &cc, .src = src, .out = out, .threads_per_rank = threads};
    sh.ckpt_fault.after = c->ckpt_fault_after;
    mtc_launch_opts lo = c->launch;
    lo.backend = mpi ? MTC_BACKEND_MPI : MTC_BACKEND_SHM;
    lo.world_size = world;
    lo.pin_threads = threads > 1 ? 0 : -1;
    return mtc_launch(&lo, train_rank_main, &sh);
}
