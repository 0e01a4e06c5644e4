/* cli/cmd_train.c - `mtc train`: Megatron's flag names, validation of every
 * flag, shape and parallel layout before anything is allocated or written
 * (usage errors exit with status 2), then train/train.c does the work on
 * --world-size rank-threads, or on the MPI ranks when started by mpirun.
 * The flag table is cli/train_args.c, the checks that need no config
 * cli/train_check.c; here the config is filled from them, the data opened
 * and a checkpoint to load compared with the flags. */
#include <math.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/state.h"
#include "cli/cli.h"
#include "core/limits.h"
#include "core/outfile.h"
#include "comm/comm.h"
#include "cp/cp.h"
#include "data/data.h"
#include "cli/train_compat.h"
#include "data/tok_cli.h"
#include "model/model_cli.h"
#include "moe/moe_cli.h"
#include "pp/layout_cli.h"
#include "nn/lowp.h"
#include "ckpt/checkpoint.h"
#include "ckpt/tok_files.h"
#include "train/train.h"
#include "cli/train_args.h"

static const char *TRAIN_USAGE = "[options]";
static const char *TRAIN_ABOUT =
    "Train a GPT-2 style model (LayerNorm, learned positions, GELU, tied embeddings) or a\n"
    "Llama-style one (--normalization RMSNorm --position-embedding-type rope --swiglu\n"
    "--group-query-attention --untie-embeddings-and-output-weights --disable-bias-linear) with\n"
    "AdamW on a text file or folder (char or byte tokens), a Megatron .bin/.idx dataset, llm.c\n"
    "shards or --mock-data. Flag names and the per-iteration log line are Megatron-LM's.\n"
    "Throughput uses Megatron's model FLOPs (72*B*s*L*h^2*(1 + s/(12h) + V/(12hL)) for GPT-2\n"
    "shapes; grouped-query attention and SwiGLU counted as their GEMMs), B = global batch.\n"
    "Parallel: --world-size N rank-threads (or mpirun -np N mtc train ...) split as\n"
    "tp x cp x dp x pp (Megatron's order tp-cp-ep-dp-pp); --vpp V runs the interleaved 1F1B\n"
    "schedule with V model chunks per pipeline rank; --cp N splits each sequence over N ranks\n"
    "(load-balanced chunks, ring / all-gather / all-to-all attention); every layout trains the\n"
    "serial run's model on the serial run's global batches (tests/parity).\n"
    "fp8: --bf16 --fp8-format hybrid --fp8-recipe delayed|tensorwise|mxfp8|blockwise runs the\n"
    "layers' GEMMs on fp8 values quantized as Transformer Engine does (emulated: docs/fp8.md).";

/* Megatron's schedule in its units (training.py get_optimizer_param_scheduler
 * and the argument rules of arguments.py): scheduler steps are samples, one
 * global batch per iteration. Fills tc->lr (and train_iters for
 * --train-samples); a bad combination is a usage error (returns 2). */
static int train_schedule(mtc_train_config *tc, const mtc_arg *args, int nargs,
                          int64_t train_samples, double fraction, int64_t warmup_samples,
                          int64_t decay_samples, double init_lr, const char *wsd_style,
                          int64_t wsd_iters, int64_t wsd_samples, const char *wd_style,
                          double start_wd, double end_wd, double wd) {
    mtc_lr_schedule *l = &tc->lr;
    int64_t gbs = tc->global_batch;
    int seen_fraction = mtc_args_seen(args, nargs, "lr-warmup-fraction");
    int by_samples = mtc_args_seen(args, nargs, "train-samples");
    if (gbs < 1) return 0; /* mtc_train_validate reports it */
    /* every count below becomes samples (x gbs): bounded before any product */
    const struct {
        const char *flag;
        int64_t v, per; /* per: samples per unit (gbs for iterations) */
    } counts[] = {
        {"train-iters", tc->train_iters, gbs},     {"lr-decay-iters", l->decay_iters, gbs},
        {"lr-warmup-iters", l->warmup_iters, gbs}, {"lr-wsd-decay-iters", wsd_iters, gbs},
        {"train-samples", train_samples, 1},       {"lr-decay-samples", decay_samples, 1},
        {"lr-warmup-samples", warmup_samples, 1},  {"lr-wsd-decay-samples", wsd_samples, 1}};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
        if (counts[k].v > MTC_TRAIN_MAX_SAMPLES / counts[k].per)
            return cli_usage_error("train",
                                   "--%s %lld x %lld samples each is above %lld samples (2^53, "
                                   "the most mtc counts exactly)",
                                   counts[k].flag, (long long)counts[k].v, (long long)counts[k].per,
                                   (long long)MTC_TRAIN_MAX_SAMPLES);
    if (by_samples) {
        if (mtc_args_seen(args, nargs, "train-iters"))
            return cli_usage_error("train", "--train-samples and --train-iters exclude each other "
                                            "(Megatron: expected sample-based training)");
        if (mtc_args_seen(args, nargs, "lr-decay-iters") ||
            mtc_args_seen(args, nargs, "lr-warmup-iters") ||
            mtc_args_seen(args, nargs, "lr-wsd-decay-iters"))
            return cli_usage_error("train", "with --train-samples give the schedule in samples "
                                            "(--lr-decay-samples, --lr-warmup-samples or "
                                            "--lr-warmup-fraction, --lr-wsd-decay-samples)");
        if (!tc->batch_schedule && train_samples < gbs)
            return cli_usage_error("train",
                                   "train-samples=%lld is less than one global batch of %lld",
                                   (long long)train_samples, (long long)gbs);
        if (seen_fraction && warmup_samples)
            return cli_usage_error("train", "give one of --lr-warmup-fraction and "
                                            "--lr-warmup-samples");
        /* update_train_iters: under a schedule, iterations while consumed < N */
        tc->train_iters = tc->batch_schedule ? mtc_batch_schedule_iters(tc->batch_schedule,
                                                                        (uint64_t)train_samples)
                                             : train_samples / gbs;
        l->decay_samples = decay_samples > 0 ? decay_samples : train_samples;
        l->warmup_samples =
            seen_fraction ? fraction * (double)l->decay_samples : (double)warmup_samples;
        l->wsd_decay_samples = wsd_samples;
        l->wd_incr_samples = train_samples;
        l->warmup_iters = 0;
        l->decay_iters = l->decay_samples / gbs > 0 ? l->decay_samples / gbs : 1;
    } else {
        if (mtc_args_seen(args, nargs, "lr-decay-samples") ||
            mtc_args_seen(args, nargs, "lr-warmup-samples") ||
            mtc_args_seen(args, nargs, "lr-wsd-decay-samples"))
            return cli_usage_error("train", "--lr-*-samples need sample-based training "
                                            "(--train-samples); with --train-iters use the "
                                            "-iters forms");
        if (seen_fraction && l->warmup_iters)
            return cli_usage_error("train",
                                   "give one of --lr-warmup-fraction and --lr-warmup-iters");
        l->decay_samples = l->decay_iters * gbs;
        l->warmup_samples =
            seen_fraction ? fraction * (double)l->decay_samples : (double)(l->warmup_iters * gbs);
        l->wsd_decay_samples = wsd_iters * gbs;
        l->wd_incr_samples = tc->train_iters * gbs;
        l->wsd_decay_iters = wsd_iters, l->wd_incr_iters = tc->train_iters;
    }
    l->step_samples = gbs;
    l->init_lr = init_lr;
    if (seen_fraction && !(fraction >= 0 && fraction < 1))
        return cli_usage_error("train", "lr-warmup-fraction=%g must be in [0, 1)", fraction);
    if (warmup_samples < 0 || decay_samples < 0 || wsd_iters < 0 || wsd_samples < 0)
        return cli_usage_error("train", "the --lr-*-samples and --lr-wsd-decay-* values must be "
                                        ">= 0");
    if (!(l->lr >= 0 && l->lr <= 1000)) /* named before the values compared with it */
        return cli_usage_error("train", "lr=%g must be a finite number in [0, 1000]", l->lr);
    if (!(init_lr >= 0 && init_lr <= l->lr))
        return cli_usage_error("train", "lr-warmup-init=%g must be in [0, lr=%g]", init_lr, l->lr);
    if (l->style != MTC_LR_CONSTANT && l->warmup_samples >= (double)l->decay_samples)
        return cli_usage_error("train",
                               "the warm-up (%g samples) must end before the decay does (%lld "
                               "samples): lower --lr-warmup-* or raise the decay",
                               l->warmup_samples, (long long)l->decay_samples);
    int ws = mtc_wsd_style_parse(wsd_style);
    if (ws < 0)
        return cli_usage_error(
            "train",
            "lr-wsd-decay-style=%s is unknown (use exponential, linear, cosine or "
            "minus_sqrt)",
            wsd_style);
    l->wsd_style = (mtc_wsd_style)ws;
    if (l->style == MTC_LR_WSD &&
        !(l->wsd_decay_samples > 0 && l->wsd_decay_samples <= l->decay_samples))
        return cli_usage_error("train",
                               "--lr-decay-style WSD needs --lr-wsd-decay-%s N: the annealing at "
                               "the end of the decay (at most the decay itself)",
                               by_samples ? "samples" : "iters");
    int wds = mtc_wd_style_parse(wd_style);
    if (wds < 0)
        return cli_usage_error(
            "train", "weight-decay-incr-style=%s is unknown (use constant, linear or cosine)",
            wd_style);
    int seen_start = mtc_args_seen(args, nargs, "start-weight-decay");
    int seen_end = mtc_args_seen(args, nargs, "end-weight-decay");
    if (wds == MTC_WD_CONSTANT && (seen_start || seen_end))
        return cli_usage_error("train", "--start-weight-decay/--end-weight-decay need "
                                        "--weight-decay-incr-style linear or cosine");
    if (wds != MTC_WD_CONSTANT && !(seen_start && seen_end))
        return cli_usage_error("train",
                               "--weight-decay-incr-style %s needs --start-weight-decay "
                               "and --end-weight-decay",
                               wd_style);
    if (wds != MTC_WD_CONSTANT && !(start_wd >= 0 && end_wd >= start_wd && end_wd <= 1e3))
        return cli_usage_error("train",
                               "start-weight-decay=%g and end-weight-decay=%g must satisfy 0 <= "
                               "start <= end",
                               start_wd, end_wd);
    l->wd_style = (mtc_wd_style)wds;
    l->start_wd = wds == MTC_WD_CONSTANT ? wd : start_wd;
    l->end_wd = wds == MTC_WD_CONSTANT ? wd : end_wd;
    return 0;
}

/* Megatron's train split size: train-iters x --global-batch-size; under a
 * --step-batch-size-schedule at least the samples the schedule consumes
 * (Megatron's default global batch there is micro batch x dp, which would
 * leave the later iterations without data). */
static uint64_t train_num_samples(const mtc_train_config *tc) {
    uint64_t n = (uint64_t)tc->train_iters * (uint64_t)tc->global_batch;
    if (tc->batch_schedule) {
        uint64_t used = mtc_batch_schedule_walk(tc->batch_schedule, 0, tc->train_iters, NULL);
        if (used > n) n = used;
    }
    return n;
}

/* The model config, observability and the batch schedule into tc. */
static int train_fill_model(train_flags *f, const mtc_arg *args, int nargs, mtc_train_config *tc) {
    mtc_model_config *mc = &tc->model;
    mc->num_layers = f->L, mc->hidden_size = f->C, mc->num_heads = f->NH;
    if (f->C < 1 || f->C > (1 << 18))
        return cli_usage_error("train", "hidden-size=%d is outside [1, %d]", f->C, 1 << 18);
    /* Megatron's default for SwiGLU keeps the parameter count of 4h */
    mc->ffn_hidden_size = f->F ? f->F : model_cli_default_ffn(f->C, f->model_f.swiglu);
    mc->seq_length = f->T;
    mc->max_position_embeddings = f->maxpos ? f->maxpos : f->T;
    mc->hidden_dropout = (float)f->hdrop, mc->attention_dropout = (float)f->adrop;
    if (model_cli_resolve(&f->model_f, mtc_args_seen(args, nargs, "num-query-groups"),
                          MODEL_CLI_GROUPS_NEED_GQA, mc) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    if (f->rc_up && !mc->mla.enabled) /* TransformerConfig.__post_init__ */
        return cli_usage_error("train", "mla_up_proj in recompute_modules is only supported with "
                                        "multi_latent_attention. (add --multi-latent-attention)");
    if (f->timing_level < 0 || f->timing_level > 2)
        return cli_usage_error("train", "timing-log-level=%d must be 0, 1 or 2", f->timing_level);
    int timing_option = !strcmp(f->timing_opt, "max")      ? 0
                        : !strcmp(f->timing_opt, "minmax") ? 1
                        : !strcmp(f->timing_opt, "all")    ? 2
                                                           : -1;
    if (timing_option < 0)
        return cli_usage_error("train", "timing-log-option=%s must be max, minmax or all",
                               f->timing_opt);
    if (f->tb_flags.log_interval < 1)
        return cli_usage_error("train", "tensorboard-log-interval=%d must be >= 1",
                               f->tb_flags.log_interval);
    if (f->tb_flags.dir && mtc_tb_check_dir(f->tb_flags.dir) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    if (!(f->peak_tflops >= 0))
        return cli_usage_error("train", "peak-tflops=%g must be > 0", f->peak_tflops);
    /* --profile-dir is mtc's (Megatron 0.18 has none; its --use-pytorch-profiler is ignored
     * without --profile): a directory that would be ignored is refused */
    if (f->prof_dir && !f->profile)
        return cli_usage_error("train",
                               "--profile-dir %s needs --profile (the trace goes to "
                               "DIR/trace.json only then): add --profile or drop the flag",
                               f->prof_dir);
    if (f->prof_dir && f->trace)
        return cli_usage_error("train",
                               "--profile-dir %s and --trace %s both say where the trace "
                               "goes: give one of them",
                               f->prof_dir, f->trace);
    int steps_given = mtc_args_seen(args, nargs, "profile-step-start") ||
                      mtc_args_seen(args, nargs, "profile-step-end");
    if (f->trace && !steps_given) f->prof_start = 0, f->prof_end = f->iters;
    if ((f->profile || f->trace) && (f->prof_start < 0 || f->prof_end <= f->prof_start))
        return cli_usage_error("train",
                               "profile-step-start=%lld and profile-step-end=%lld must satisfy 0 "
                               "<= start < end (iterations start+1..end are traced)",
                               (long long)f->prof_start, (long long)f->prof_end);
    if (f->profile && !f->trace) {
        snprintf(f->trace_file, sizeof f->trace_file, "%s/trace.json",
                 f->prof_dir ? f->prof_dir : ".");
        if (f->prof_dir && mkdir(f->prof_dir, 0777) != 0 && errno != EEXIST)
            return cli_usage_error("train", "profile-dir=%s cannot be created (%s)", f->prof_dir,
                                   strerror(errno));
        f->trace = f->trace_file;
    }
    if (mtc_args_seen(args, nargs, "trace-buffer-mb") &&
        !(f->trace_mb > 0 && f->trace_mb <= 1048576))
        return cli_usage_error(
            "train", "trace-buffer-mb=%g must be a size in MiB above 0 (e.g. 256)", f->trace_mb);
    char trace_real[MTC_PATH_MAX];
    if (f->trace &&
        mtc_outfile_check(f->trace, f->profile ? "--profile-dir's trace.json" : "--trace",
                          trace_real, sizeof trace_real) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    tc->trace_path = f->trace, tc->profile_step_start = f->prof_start,
    tc->profile_step_end = f->prof_end;
    tc->trace_buffer_mb = f->trace_mb;
    tc->timing_log_level = f->timing_level, tc->timing_log_option = timing_option;
    tc->peak_tflops = f->peak_tflops;
    tc->tensorboard = f->tb_flags;
    mc->moe = f->moe_cfg;
    if (mtc_moe_validate(&f->moe_cfg, f->L, mc->ffn_hidden_size, f->lay.tp, f->sp, f->lay.ep,
                         f->lay.etp ? f->lay.etp : f->lay.tp, !f->model_f.nobias) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    /* shape checks that need no data, before opening anything */
    mc->vocab_size = mc->padded_vocab_size = 1;
    if (mtc_model_config_validate(mc) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    if (f->bs_text) { /* Megatron always passes seq_length: thresholds are tokens */
        if (mtc_batch_schedule_parse(&f->bsched, f->bs_text, f->T) != MTC_OK)
            return cli_usage_error("train", "%s", mtc_error_detail());
        int64_t last = f->bsched.batch[f->bsched.n - 1];
        /* Megatron refuses both flags, yet its GPT-3 example passes both with
         * the schedule's last batch: accepted when they agree */
        if (mtc_args_seen(args, nargs, "global-batch-size") && f->gbs != last)
            return cli_usage_error("train",
                                   "global-batch-size=%d differs from the last "
                                   "step-batch-size-schedule batch %lld: drop --global-batch-size "
                                   "(Megatron refuses both) or make it %lld",
                                   f->gbs, (long long)last, (long long)last);
        if (mtc_args_seen(args, nargs, "global-batch-size") && f->le.rank == 0)
            fprintf(stderr,
                    "note: --global-batch-size %d is the step-batch-size-schedule's last batch: "
                    "accepted (Megatron refuses both flags); it is the evaluation batch\n",
                    f->gbs);
        tc->batch_schedule = &f->bsched;
    }
    if (mtc_args_seen(args, nargs, "rampup-batch-size")) {
        if (f->ramp.n != 3)
            return cli_usage_error("train",
                                   "rampup-batch-size takes 3 values (start batch, increment, "
                                   "ramp-up samples), got %d",
                                   f->ramp.n);
        if (f->le.rank == 0) /* Megatron's init_num_microbatches_calculator ignores it */
            fprintf(stderr, "WARNING: rampup_batch_size is deprecated and will be removed in a "
                            "future release. Use step_batch_size_schedule instead. (mtc, as "
                            "Megatron, ignores --rampup-batch-size)\n");
    }
    return -1;
}

/* The run: batches, schedule, optimizer, checkpoints, layout, precision;
 * then mtc_train_validate and the layout against the world. */
static int train_fill_run(train_flags *f, const mtc_arg *args, int nargs, mtc_train_config *tc) {
    mtc_model_config *mc = &tc->model;
    tc->micro_batch = f->mbs;
    { /* Megatron's default: one microbatch per data-parallel rank */
        int64_t model_ranks = (int64_t)f->lay.tp * f->lay.pp * f->lay.cp;
        int dp = model_ranks > 0 && f->world % model_ranks == 0 ? (int)(f->world / model_ranks) : 1;
        int64_t g = f->gbs ? f->gbs : (int64_t)f->mbs * dp;
        if (g > INT_MAX)
            return cli_usage_error("train", "--micro-batch-size %d x data-parallel %d is above %d",
                                   f->mbs, dp, INT_MAX);
        tc->global_batch = (int)g;
    }
    tc->train_iters = f->iters;
    tc->lr = (mtc_lr_schedule){.lr = f->lr,
                               .min_lr = f->min_lr,
                               .warmup_iters = f->warmup,
                               .decay_iters = f->decay ? f->decay : f->iters,
                               .style = (mtc_lr_style)f->lr_style};
    if (train_schedule(tc, args, nargs, f->sch_train_samples, f->sch_warmup_fraction,
                       f->sch_warmup_samples, f->sch_decay_samples, f->sch_init_lr,
                       f->sch_wsd_style, f->sch_wsd_iters, f->sch_wsd_samples, f->sch_wd_style,
                       f->sch_start_wd, f->sch_end_wd, f->wd) != 0)
        return 2;
    tc->exit_interval = f->sch_exit_interval, tc->exit_duration_mins = f->sch_exit_mins;
    if (f->sch_exit_interval < 0)
        return cli_usage_error("train", "exit-interval=%lld must be >= 1",
                               (long long)f->sch_exit_interval);
    if (!(f->sch_exit_mins >= 0 && f->sch_exit_mins < 1e9))
        return cli_usage_error("train", "exit-duration-in-mins=%g must be > 0", f->sch_exit_mins);
    tc->adam = (mtc_adamw_config){.beta1 = (float)f->b1,
                                  .beta2 = (float)f->b2,
                                  .eps = (float)f->eps,
                                  .weight_decay = (float)f->wd};
    tc->clip_grad = (float)f->clip;
    tc->seed = (uint64_t)f->seed;
    tc->log_interval = f->log_interval, tc->eval_interval = f->eval_interval,
    tc->eval_iters = f->eval_iters;
    tc->threads = f->threads;
    tc->metrics_path = f->metrics, tc->save_path = f->save, tc->load_path = f->load;
    tc->save_interval = f->save_interval, tc->ckpt_step = f->ckpt_step,
    tc->load_weights_file = f->load_file;
    tc->no_load_optim = f->no_load_optim, tc->finetune = f->finetune,
    tc->async_save = f->async_save;
    tc->world_size = f->world, tc->parallel.tp.sequence_parallel = f->sp;
    tc->launch.timeout_s = f->dist_timeout_min > 0 ? f->dist_timeout_min * 60.0 : 0;
    cli_launch_defaults(&tc->launch); /* the environment's, and the abort hook */
    tc->ckpt_fault_after = cli_ckpt_fault_after();
    tc->progress = cli_progress_mode(), tc->pool_opts = cli_pool_opts();
    mtc_grid_config_default(&tc->grid); /* the layout, once */
    tc->grid.tp = f->lay.tp, tc->grid.pp = f->lay.pp, tc->grid.cp = f->lay.cp,
    tc->grid.ep = f->lay.ep, tc->grid.etp = f->lay.etp;
    tc->grid.vpp = f->lay.vpp, tc->grid.num_dist_opt_instances = f->lay.nd;
    if (f->lay.hcp.n == 2)
        tc->grid.n_hcp = 2, tc->grid.hcp[0] = (int)f->lay.hcp.v[0],
        tc->grid.hcp[1] = (int)f->lay.hcp.v[1];
    tc->parallel.cp.type = (cp_comm_type)f->cp_type;
    tc->parallel.cp.layer_types = f->cp_per_layer ? f->cp_types : NULL;
    tc->decoupled = mtc_args_seen(args, nargs, "decoupled-lr");
    tc->decoupled_lr = f->decoupled_lr, tc->decoupled_min_lr = f->decoupled_min_lr;
    tc->no_check_nan = !f->check_nan;
    tc->log_params_norm = f->compat.f[4], tc->log_num_zeros = f->compat.f[3];
    if (!f->acc_fp32 && !f->grad_bf16)
        return cli_usage_error("train", "--no-accumulate-allreduce-grads-in-fp32 is not supported: "
                                        "mtc keeps main grads in fp32 (drop the flag)");
    if (f->ls_window < 1)
        return cli_usage_error("train", "loss-scale-window=%d must be >= 1", f->ls_window);
    if (f->hyst < 1) return cli_usage_error("train", "hysteresis=%d must be >= 1", f->hyst);
    if (f->bf16_gemm && nn_bf16_gemm_parse(f->bf16_gemm) < 0)
        return cli_usage_error("train", "--bf16-gemm %s is not auto, dnnl-bf16 or fp32",
                               f->bf16_gemm);
    if (f->bf16_gemm && !f->bf16)
        return cli_usage_error("train", "--bf16-gemm %s needs --bf16 (add it or drop the flag)",
                               f->bf16_gemm);
    if (f->head_chunk < 1)
        return cli_usage_error("train", "lm-head-chunk=%d must be >= 1 (tokens per chunk)",
                               f->head_chunk);
    tc->head_chunk = f->head_chunk;
    tc->bf16_gemm = f->bf16_gemm ? nn_bf16_gemm_parse(f->bf16_gemm) : NN_BF16_GEMM_AUTO;
    tc->bf16 = f->bf16, tc->fp16 = f->fp16, tc->grad_reduce_in_bf16 = f->grad_bf16;
    if (tp_fp8_cli_resolve(&f->fp8_f, args, nargs, f->bf16, f->distopt, f->L, f->lay.pp,
                           &f->fp8_cfg) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    tc->fp8 = f->fp8_cfg.enabled ? &f->fp8_cfg : NULL; /* f outlives the run */
    tp_fp8_dims fd = {.q = mc->mla.enabled ? 0 : mc->num_heads * mtc_model_head_size(mc),
                      .kv = mc->mla.enabled ? 0 : mtc_model_groups(mc) * mtc_model_head_size(mc),
                      .ffn = mc->ffn_hidden_size,
                      .seq = mc->seq_length};
    if (tp_fp8_check_blocks(tc->fp8, &fd, f->lay.tp, f->lay.cp) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    tc->loss_scale = f->loss_scale, tc->initial_loss_scale = f->init_ls,
    tc->min_loss_scale = f->min_ls;
    tc->loss_scale_window = f->ls_window, tc->hysteresis = f->hyst;
    tc->recompute_full = f->rc_full, tc->recompute_block = f->rc_block,
    tc->recompute_num_layers = f->rc_layers;
    tc->recompute_mlp = f->rc_mlp, tc->recompute_mla_up = f->rc_up;
    tc->recompute_shared = f->rc_shared;
    tc->recompute_moe = f->rc_moe, tc->recompute_moe_act = f->rc_moe_act;
    tc->microbatch_group_size = f->lay.mb_group, tc->pp_split = f->pp_split;
    tc->overlap_grad_reduce = f->overlap, tc->ddp_bucket_size = f->bucket;
    tc->use_distributed_optimizer = f->distopt, tc->overlap_param_gather = f->overlap_pg;
    tc->fsdp_strategy = f->fsdp_strategy, tc->fsdp_unit_size = f->fsdp_flags.unit_size;
    tc->fsdp_double_buffer = f->fsdp_flags.double_buffer;
    tc->fsdp_outer_optim = mtc_fsdp_flags_outer_optim(&f->fsdp_flags);
    tc->fsdp_meta_init = f->compat.f[9]; /* --init-model-with-meta-device */
    tc->pad_high_busbw = f->pad_high, tc->print_layout = f->print_layout;
    if (mtc_train_validate(tc) != MTC_OK) return cli_usage_error("train", "%s", mtc_error_detail());
    mc->padded_vocab_size = mtc_model_pad_vocab(1, f->divisible, f->lay.tp);
    if (mtc_train_validate_layout(tc, f->world) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    return -1;
}

/* Opens the data into f->src (the vocabulary and tokenizer follow it) and
 * refuses a checkpoint or weights file that differs from these flags. */
static int train_data_check(train_flags *f, const mtc_arg *args, int nargs, mtc_train_config *tc) {
    mtc_model_config *mc = &tc->model;
    data_source_opts dopts = {
        .data_path = f->data_path,
        .blend = f->data_paths.n > 1 ? f->data_paths.v : NULL,
        .n_blend = f->data_paths.n > 1 ? f->data_paths.n : 0,
        /* Megatron's train / valid / test sizes
           (get_train_valid_test_num_samples) */
        .num_samples = {train_num_samples(tc),
                        (uint64_t)(tc->train_iters / f->eval_interval + 1) *
                            (uint64_t)f->eval_iters * (uint64_t)tc->global_batch,
                        (uint64_t)f->eval_iters * (uint64_t)tc->global_batch},
        .mock = f->mock,
        .vocab_size = f->mock && !f->vocab && !f->tokenizer ? 50257 : f->vocab,
        .tokenizer = f->tokenizer,
        .tok = &f->tok_opts,
        .seq_length = f->T,
        .seed = (uint64_t)f->seed,
        .split = f->split,
        .split_paths = {f->split_paths[0].v, f->split_paths[1].v, f->split_paths[2].v},
        .n_split_paths = {f->split_paths[0].n, f->split_paths[1].n, f->split_paths[2].n}};
    f->src = NULL;
    if (data_source_open(&dopts, &f->src) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    int data_vocab = data_source_vocab_size(f->src);
    if (f->vocab && f->vocab < data_vocab) {
        data_source_free(f->src);
        return cli_usage_error("train",
                               "vocab-size=%d is smaller than the data's vocabulary %d (drop "
                               "--vocab-size or raise it)",
                               f->vocab, data_vocab);
    }
    mc->vocab_size = f->vocab ? f->vocab : data_vocab;
    mc->padded_vocab_size = mtc_model_pad_vocab(mc->vocab_size, f->divisible, f->lay.tp);
    strcpy(f->tokstr, "none");
    const data_tok *tok = data_source_tokenizer(f->src);
    if (tok) { /* the tokenizer's text form, stored with the model */
        data_tok_text form = {0};
        mtc_result_t trc = data_tok_serialize(tok, &form);
        int fits = trc == MTC_OK && form.n < sizeof f->tokstr;
        if (fits) memcpy(f->tokstr, form.s, form.n + 1);
        data_tok_text_free(&form);
        if (!fits) {
            data_source_free(f->src);
            if (trc != MTC_OK) return cli_fail("train", trc);
            return cli_usage_error("train",
                                   "the %s of %d symbols is too large to store with the model "
                                   "(use ByteLevelTokenizer or a BPE tokenizer)",
                                   data_tok_name(tok), data_tok_vocab_size(tok));
        }
    }
    tc->tokenizer = f->tokstr;
    if (f->have_ckpt) { /* refuse a mismatching checkpoint before training starts */
        if (mtc_ckpt_config_check(&f->saved.cfg, mc, f->saved.path) != MTC_OK) {
            data_source_free(f->src);
            return cli_usage_error("train", "%s", mtc_error_detail());
        }
        if (!mtc_ckpt_tok_same(f->saved.tokenizer, f->tokstr)) {
            data_source_free(f->src);
            return cli_usage_error(
                "train", "%s was saved with a different tokenizer than this data's", f->saved.path);
        }
    }
    if (f->saved.have_sched && !f->finetune && !f->override_sched) { /* Megatron's _check_and_set */
        const mtc_lr_schedule *l = &tc->lr;
        /* Megatron's state is in samples; say it in the units the flags use */
        int by_samples = f->sch_train_samples > 0;
        double unit = by_samples ? 1.0 : (double)l->step_samples;
        const char *names[4] = {"lr", "min-lr",
                                by_samples ? "lr-warmup-samples" : "lr-warmup-iters",
                                by_samples ? "lr-decay-samples" : "lr-decay-iters"};
        double now[4] = {l->lr, l->min_lr, l->warmup_samples / unit,
                         (double)l->decay_samples / unit};
        f->saved.sched[2] /= unit, f->saved.sched[3] /= unit;
        for (int k = 0; k < 4; k++)
            if (fabs(f->saved.sched[k] - now[k]) > 1e-6 * fabs(now[k]))
                return data_source_free(f->src),
                       cli_usage_error("train",
                                       "%s=%g but %s was saved with %g (pass the saved value, or "
                                       "--override-opt-param-scheduler to use these flags)",
                                       names[k], now[k], f->saved.path, f->saved.sched[k]);
        if (f->saved.sched_style != (int)l->style)
            return data_source_free(f->src),
                   cli_usage_error("train",
                                   "lr-decay-style=%s differs from %s's (pass the saved one, or "
                                   "--override-opt-param-scheduler)",
                                   f->style, f->saved.path);
    }
    if (f->load && f->load_file) { /* refuse a mismatching checkpoint before training starts */
        mtc_ckpt_info info;
        if (mtc_ckpt_read_info(f->load, &info) != MTC_OK) {
            data_source_free(f->src);
            return cli_usage_error("train", "%s", mtc_error_detail());
        }
        const mtc_model_config *fc = &info.cfg;
        if (fc->num_layers != mc->num_layers || fc->hidden_size != mc->hidden_size ||
            fc->num_heads != mc->num_heads || fc->ffn_hidden_size != mc->ffn_hidden_size ||
            fc->max_position_embeddings != mc->max_position_embeddings ||
            fc->padded_vocab_size != mc->padded_vocab_size || fc->vocab_size != mc->vocab_size) {
            data_source_free(f->src);
            return cli_usage_error(
                "train",
                "%s was saved with num-layers=%d hidden-size=%d num-attention-heads=%d "
                "ffn-hidden-size=%d max-position-embeddings=%d vocab=%d/%d, which differs from "
                "these flags (%d %d %d %d %d %d/%d)",
                f->load, fc->num_layers, fc->hidden_size, fc->num_heads, fc->ffn_hidden_size,
                fc->max_position_embeddings, fc->vocab_size, fc->padded_vocab_size, mc->num_layers,
                mc->hidden_size, mc->num_heads, mc->ffn_hidden_size, mc->max_position_embeddings,
                mc->vocab_size, mc->padded_vocab_size);
        }
        if (!mtc_ckpt_tok_same(info.tokenizer, f->tokstr)) {
            data_source_free(f->src);
            return cli_usage_error(
                "train", "%s was saved with a different tokenizer than this data's", f->load);
        }
    }
    /* the --save directory is checked (made, written) before any work, not
     * after training: the last check, so a refused run writes nothing */
    if (f->save && mtc_ckpt_dist_check_save_dir(f->save) != MTC_OK) {
        data_source_free(f->src);
        return cli_usage_error("train", "%s", mtc_error_detail());
    }
    return -1;
}

int cli_cmd_train(int argc, char **argv) {
    mtc_arg *args;
    int nargs;
    train_flags *f = train_args_table(&args, &nargs);
    int st = cli_parse("train", TRAIN_USAGE, TRAIN_ABOUT, args, nargs, argc, argv);
    if (st >= 0) return st;
    if (mtc_fsdp_flags_apply(&f->fsdp_flags, f->noop_s2[2], &f->fsdp_strategy, &f->distopt) !=
        MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    if ((st = train_check_basics(f, args, nargs)) >= 0) return st;
    if ((st = train_check_layout(f, args, nargs)) >= 0) return st;
    if ((st = train_check_launch(f, args, nargs)) >= 0) return st;
    if ((st = train_check_data(f, args, nargs)) >= 0) return st;
    if ((st = train_check_load(f, args, nargs)) >= 0) return st;
    mtc_train_config tc;
    memset(&tc, 0, sizeof tc);
    if ((st = train_fill_model(f, args, nargs, &tc)) >= 0) return st;
    if ((st = train_fill_run(f, args, nargs, &tc)) >= 0) return st;
    if ((st = train_data_check(f, args, nargs, &tc)) >= 0) return st;
    mtc_result_t rc = mtc_train_run(&tc, f->src, stdout);
    data_source_free(f->src);
    if (rc == MTC_ERR_INVALID_ARGUMENT || rc == MTC_ERR_FORMAT)
        return cli_usage_error("train", "%s", mtc_error_detail());
    return rc == MTC_OK ? 0 : cli_fail("train", rc);
}
