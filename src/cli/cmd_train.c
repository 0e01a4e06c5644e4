/* cli/cmd_train.c - `mtc train`: Megatron's flag names, validation of every
 * flag, shape and parallel layout before anything is allocated or written
 * (usage errors exit with status 2), then train/train.c does the work on
 * --world-size rank-threads, or on the MPI ranks when started by mpirun. */
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
#include "dp/fsdp_cli.h"
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
    "serial run's model on the serial run's global batches (tests/parity).";

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

int cli_cmd_train(int argc, char **argv) {
    int L = 4, C = 128, NH = 4, F = 0, T = 128, maxpos = 0, mbs = 4, gbs = 0, vocab = 0;
    int64_t iters = 100, warmup = 0, decay = 0;
    double lr = 1e-3, min_lr = 0, wd = 0.01, clip = 1.0, b1 = 0.9, b2 = 0.999, eps = 1e-8;
    double decoupled_lr = -1, decoupled_min_lr = -1;
    int per_token_loss = 0;
    double hdrop = 0.1, adrop = 0.1;
    int64_t seed = 1234;
    int eval_interval = 1000, eval_iters = 100, log_interval = 100, world = 1, divisible = 128;
    int threads = 0, mock = 0, tp = 1, pp = 1, sp = 0, overlap = 0, cp = 1, ep = 1, etp = 0;
    int vpp = 0, lpvs = 0, vstages = 0, mb_group = 0;
    int distopt = 0, overlap_pg = 0, nd = 1, pad_high = 0, print_layout = 0;
    mtc_fsdp_flags fsdp_flags = MTC_FSDP_FLAGS_DEFAULTS; /* dp/fsdp_cli.h */
    int fsdp_strategy = 0;
    int64_t bucket = 0;
    const char *data_path = NULL, *split = "969,30,1", *tokenizer = NULL, *style = "linear";
    const char *metrics = NULL, *save = NULL, *load = NULL;
    int async_save = 0;
    int save_interval = 0, no_load_optim = 0, no_load_rng = 0, finetune = 0, override_sched = 0;
    int64_t ckpt_step = -1;
    mtc_arg_strings cp_comm = {1, {"p2p"}};
    mtc_arg_ints hcp = {0};
    data_tok_opts tok_opts = {0};
    mtc_arg_strings tok_special = {0};
    mtc_arg_strings data_paths = {0}, split_paths[3] = {{0}};
    int64_t sch_train_samples = 0, sch_warmup_samples = 0, sch_decay_samples = 0;
    int64_t sch_wsd_iters = 0, sch_wsd_samples = 0, sch_exit_interval = 0;
    double sch_warmup_fraction = 0, sch_init_lr = 0, sch_start_wd = 0, sch_end_wd = 0;
    double sch_exit_mins = 0;
    const char *sch_wsd_style = "exponential", *sch_wd_style = "constant";
    /* observability */
    int profile = 0, timing_level = 0;
    int64_t prof_start = 10, prof_end = 12;
    const char *prof_dir = NULL, *trace = NULL, *timing_opt = "minmax";
    double trace_mb = 0;
    double peak_tflops = 0;
    char trace_file[4096];
    double dist_timeout_min = 0;
    const char *rc_gran = NULL, *rc_method = NULL;
    int rc_layers = 0;
    const char *rc_modules = NULL;
    int check_nan = 1;
    /* mixed precision */
    int bf16 = 0, fp16 = 0, grad_bf16 = 0, acc_fp32 = 1, ls_window = 1000, hyst = 2;
    const char *bf16_gemm = NULL;
    double loss_scale = 0, init_ls = 4294967296.0, min_ls = 1.0;
    const char *noop_s[3] = {NULL, NULL, NULL};
    /* Megatron flags without effect here */
    const char *noop_s2[6] = {NULL};
    int noop_f2[5] = {0}, ln1p = 0;
    mtc_tb_flags tb_flags = MTC_TB_FLAGS_DEFAULTS; /* --tensorboard-dir (train/tensorboard.h) */
    mtc_arg_strings ramp = {0};
    const char *bs_text = NULL;
    static mtc_batch_schedule bsched; /* read by the rank-threads for the whole run */
    int noop_f[11] = {0};
    model_cli_flags model_f = MODEL_CLI_DEFAULTS;   /* the architecture (model/model_cli.h) */
    moe_cli_flags moe_f = MOE_CLI_DEFAULTS;         /* mixture of experts (moe/moe_cli.h) */
    pp_layout_cli split_f = PP_LAYOUT_CLI_DEFAULTS; /* pipeline split (pp/layout_cli.h) */
    pp_layout_args pp_split = {0};
    train_compat compat = {0};
    mtc_arg args[] = {
        {"num-layers", NULL, MTC_ARG_INT, &L, "N", "transformer layers (default 4)", 0},
        {"hidden-size", NULL, MTC_ARG_INT, &C, "N", "hidden size (default 128)", 0},
        {"num-attention-heads", NULL, MTC_ARG_INT, &NH, "N", "attention heads (default 4)", 0},
        {"ffn-hidden-size", NULL, MTC_ARG_INT, &F, "N", "MLP hidden size (default 4*hidden)", 0},
        {"seq-length", NULL, MTC_ARG_INT, &T, "N", "sequence length (default 128)", 0},
        MODEL_CLI_ARGS(model_f), /* the architecture (model/model_cli.h) */
        {"max-position-embeddings", NULL, MTC_ARG_INT, &maxpos, "N",
         "positions (default seq-length)", 0},
        {"micro-batch-size", NULL, MTC_ARG_INT, &mbs, "N", "samples per microbatch (default 4)", 0},
        {"global-batch-size", NULL, MTC_ARG_INT, &gbs, "N",
         "samples per iteration (default micro batch x data-parallel size, as Megatron)", 0},
        {"train-iters", NULL, MTC_ARG_I64, &iters, "N", "iterations (default 100)", 0},
        {"lr", NULL, MTC_ARG_DOUBLE, &lr, "X", "peak learning rate (default 1e-3)", 0},
        {"min-lr", NULL, MTC_ARG_DOUBLE, &min_lr, "X", "final learning rate (default 0)", 0},
        {"lr-warmup-iters", NULL, MTC_ARG_I64, &warmup, "N",
         "linear warm-up iterations (default 0)", 0},
        {"lr-decay-iters", NULL, MTC_ARG_I64, &decay, "N", "decay iterations (default train-iters)",
         0},
        {"lr-decay-style", NULL, MTC_ARG_STRING, &style, "S",
         "constant|linear|cosine|inverse-square-root|WSD (default linear)", 0},
        {"weight-decay", NULL, MTC_ARG_DOUBLE, &wd, "X",
         "AdamW weight decay on 2-D weights (default 0.01)", 0},
        {"clip-grad", NULL, MTC_ARG_DOUBLE, &clip, "X",
         "global gradient-norm clip, 0 = off (default 1.0)", 0},
        {"adam-beta1", NULL, MTC_ARG_DOUBLE, &b1, "X", "(default 0.9)", 0},
        {"adam-beta2", NULL, MTC_ARG_DOUBLE, &b2, "X", "(default 0.999)", 0},
        {"adam-eps", NULL, MTC_ARG_DOUBLE, &eps, "X", "(default 1e-8)", 0},
        {"seed", NULL, MTC_ARG_I64, &seed, "N",
         "initialisation, dropout and data order (default 1234)", 0},
        {"data-path", NULL, MTC_ARG_STRINGS, &data_paths, "PATH",
         "text file or folder, PREFIX of .bin/.idx, llm.c .bin, or Megatron's blend "
         "W1 PREFIX1 W2 PREFIX2 ... (GPTDataset / BlendedDataset sample order)",
         0},
        {"train-data-path", NULL, MTC_ARG_STRINGS, &split_paths[0], "PATH",
         "the training split's own data: a PREFIX or a blend W1 PREFIX1 ... (all of its "
         "documents; excludes --data-path and --split, as Megatron)",
         0},
        {"valid-data-path", NULL, MTC_ARG_STRINGS, &split_paths[1], "PATH",
         "the validation split's own data (as --train-data-path)", 0},
        {"test-data-path", NULL, MTC_ARG_STRINGS, &split_paths[2], "PATH",
         "the test split's own data (as --train-data-path)", 0},
        {"split", NULL, MTC_ARG_STRING, &split, "W,W,W",
         "train,valid,test weights (default 969,30,1)", 0},
        {"vocab-size", NULL, MTC_ARG_INT, &vocab, "N",
         "vocabulary (default: from the data; 50257 with --mock-data)", 0},
        {"make-vocab-size-divisible-by", NULL, MTC_ARG_INT, &divisible, "N",
         "pad the vocabulary to a multiple (default 128)", 0},
        {"mock-data", NULL, MTC_ARG_FLAG, &mock, NULL, "deterministic synthetic tokens", 0},
        {"eval-interval", NULL, MTC_ARG_INT, &eval_interval, "N",
         "iterations between evaluations (default 1000)", 0},
        {"eval-iters", NULL, MTC_ARG_INT, &eval_iters, "N",
         "validation batches per evaluation (default 100)", 0},
        {"log-interval", NULL, MTC_ARG_INT, &log_interval, "N",
         "iterations per log line (default 100)", 0},
        {"hidden-dropout", NULL, MTC_ARG_DOUBLE, &hdrop, "P", "(default 0.1)", 0},
        {"attention-dropout", NULL, MTC_ARG_DOUBLE, &adrop, "P", "(default 0.1)", 0},
        {"world-size", NULL, MTC_ARG_INT, &world, "N",
         "rank-threads (shm backend; under mpirun the MPI size) (default 1)", 0},
        {"tensor-model-parallel-size", "tp", MTC_ARG_INT, &tp, "N",
         "tensor-parallel ranks (default 1); data-parallel = world / (tp x pp)", 0},
        {"pipeline-model-parallel-size", "pp", MTC_ARG_INT, &pp, "N",
         "pipeline stages of num-layers/pp layers, 1F1B schedule, interleaved with --vpp (default "
         "1)",
         0},
        {"num-layers-per-virtual-pipeline-stage", NULL, MTC_ARG_INT, &lpvs, "N",
         "interleaved 1F1B: virtual stages of N layers (vpp = num-layers/pp/N)", 0},
        {"num-virtual-stages-per-pipeline-rank", NULL, MTC_ARG_INT, &vstages, "V",
         "interleaved 1F1B with V model chunks per pipeline rank", 0},
        {"virtual-pipeline-model-parallel-size", "vpp", MTC_ARG_INT, &vpp, "V",
         "the same as --num-virtual-stages-per-pipeline-rank", 0},
        {"microbatch-group-size-per-virtual-pipeline-stage", NULL, MTC_ARG_INT, &mb_group, "N",
         "contiguous microbatches per virtual stage (default pp)", 0},
        {"context-parallel-size", "cp", MTC_ARG_INT, &cp, "N",
         "context-parallel ranks (default 1): each sequence in 2cp chunks, rank c keeps chunks c "
         "and 2cp-1-c; seq-length % (2cp) == 0",
         0},
        {"recompute-granularity", NULL, MTC_ARG_STRING, &rc_gran, "S",
         "full: recompute layers from their inputs in backward (bit-identical results); "
         "selective: the core attention (already kept as out + lse only)",
         0},
        {"recompute-method", NULL, MTC_ARG_STRING, &rc_method, "S",
         "uniform (every layer) | block (the first --recompute-num-layers of each chunk)", 0},
        {"recompute-num-layers", NULL, MTC_ARG_INT, &rc_layers, "N",
         "layers per recompute unit (uniform) or recomputed per model chunk (block)", 0},
        {"recompute-modules", NULL, MTC_ARG_STRING, &rc_modules, "M",
         "with selective: core_attn (the default) and layernorm (what mtc always does: "
         "attention keeps no probabilities, norm outputs are rebuilt), mlp (each dense MLP's "
         "forward again in backward), shared_experts (each MoE layer's shared expert again); "
         "comma- or space-separated",
         0},
        {"check-for-nan-in-loss-and-grad", NULL, MTC_ARG_FLAG, &check_nan, NULL,
         "stop when the loss or gradient norm is NaN or Inf (default on; --no-... skips the step)",
         0},
        {"distributed-timeout-minutes", NULL, MTC_ARG_DOUBLE, &dist_timeout_min, "M",
         "deadline of every collective and point-to-point call, in minutes (default "
         "MTC_COMM_TIMEOUT or 5); a rank that does not arrive ends the job with a report",
         0},
        {"cp-comm-type", NULL, MTC_ARG_STRINGS, &cp_comm, "S [S ...]",
         "p2p (ring, default) | all_gather | a2a (Ulysses: local heads divisible by cp) | "
         "a2a+p2p (a2a inside groups of A ranks, ring across them); one value, or one per "
         "layer",
         0},
        {"hierarchical-context-parallel-sizes", NULL, MTC_ARG_INTS, &hcp, "A P",
         "for a2a+p2p: A ranks in each all-to-all, P in the ring (A*P = cp)", 0},
        {"expert-model-parallel-size", "ep", MTC_ARG_INT, &ep, "N",
         "expert-parallel ranks (default 1): each owns num-experts/ep experts of every MoE "
         "layer",
         0},
        {"expert-tensor-parallel-size", "etp", MTC_ARG_INT, &etp, "N",
         "expert-tensor-parallel ranks (default: the TP size): 1 (whole experts) or the TP size",
         0},
        MOE_CLI_ARGS(moe_f),
        TRAIN_COMPAT_ARGS(compat), /* the example scripts' last flags (cli/train_compat.h) */
        PP_LAYOUT_CLI_ARGS(split_f),
        {"sequence-parallel", NULL, MTC_ARG_FLAG, &sp, NULL,
         "split layer norm / dropout / residual regions along the sequence over TP", 0},
        {"overlap-grad-reduce", NULL, MTC_ARG_FLAG, &overlap, NULL,
         "launch each gradient bucket's all-reduce during the last backward", 0},
        {"ddp-bucket-size", NULL, MTC_ARG_I64, &bucket, "N",
         "with --overlap-grad-reduce, elements per gradient bucket (default max(4e7, 1e6 x dp)); "
         "as Megatron, one bucket without overlap and on pipeline stages > 0",
         0},
        {"bf16", NULL, MTC_ARG_FLAG, &bf16, NULL,
         "bf16 mixed precision: GEMMs on bf16 values of the fp32 main params with fp32 "
         "accumulation (--bf16-gemm), fp32 main grads, norms, softmax and loss; no loss scaler",
         0},
        {"bf16-gemm", NULL, MTC_ARG_STRING, &bf16_gemm, "E",
         "with --bf16, the GEMM engine: dnnl-bf16 (oneDNN bf16 matmul), fp32 (fp32 GEMMs on "
         "bf16-valued operands: the same products, exact in fp32) or auto (default: the faster "
         "on this CPU, measured at set-up)",
         0},
        {"fp16", NULL, MTC_ARG_FLAG, &fp16, NULL,
         "fp16 mixed precision: fp16-rounded params and activations (fp32 arithmetic), fp32 "
         "main params, the dynamic loss scaler",
         0},
        {"accumulate-allreduce-grads-in-fp32", NULL, MTC_ARG_FLAG, &acc_fp32, NULL,
         "main grads in fp32 (on: mtc always accumulates and reduces them in fp32)", 0},
        {"grad-reduce-in-bf16", NULL, MTC_ARG_FLAG, &grad_bf16, NULL,
         "with --bf16, reduce gradients over data parallelism in bf16 (accumulation stays fp32)",
         0},
        {"loss-scale", NULL, MTC_ARG_DOUBLE, &loss_scale, "S",
         "a constant loss scale (default: dynamic with --fp16, none with --bf16)", 0},
        {"initial-loss-scale", NULL, MTC_ARG_DOUBLE, &init_ls, "S",
         "the dynamic scaler's first scale (default 2^32)", 0},
        {"min-loss-scale", NULL, MTC_ARG_DOUBLE, &min_ls, "S",
         "the dynamic scaler's floor (default 1)", 0},
        {"loss-scale-window", NULL, MTC_ARG_INT, &ls_window, "N",
         "iterations without inf/NaN before the scale doubles (default 1000)", 0},
        {"hysteresis", NULL, MTC_ARG_INT, &hyst, "N",
         "inf/NaN iterations before the scale halves (default 2)", 0},
        {"use-distributed-optimizer", NULL, MTC_ARG_FLAG, &distopt, NULL,
         "shard AdamW state over data-parallel ranks: reduce-scatter gradients per bucket, update "
         "the owned shard, all-gather params",
         0},
        {"overlap-param-gather", NULL, MTC_ARG_FLAG, &overlap_pg, NULL,
         "leave the param all-gathers running until the next pass needs the params (distributed "
         "optimizer)",
         0},
        {"num-distributed-optimizer-instances", NULL, MTC_ARG_INT, &nd, "N",
         "optimizer instances: shards over dp/N ranks, shard all-reduced over N (default 1)", 0},
        {"pad-buckets-for-high-nccl-busbw", NULL, MTC_ARG_FLAG, &pad_high, NULL,
         "pad buckets to lcm(dp, 128, 65536) (distributed optimizer)", 0},
        {"print-layout", NULL, MTC_ARG_FLAG, &print_layout, NULL,
         "print the last rank's gradient buffer layout (as `mtc layout`; one per model chunk with "
         "--vpp) before training",
         0},
        /* Megatron's schedule flags (optim/optim.h has the formulas) */
        {"train-samples", NULL, MTC_ARG_I64, &sch_train_samples, "N",
         "sample-based training: N samples (train-iters = N / global batch); excludes "
         "--train-iters",
         0},
        {"lr-warmup-fraction", NULL, MTC_ARG_DOUBLE, &sch_warmup_fraction, "F",
         "warm-up over this fraction of the decay steps (instead of --lr-warmup-iters/-samples)",
         0},
        {"lr-warmup-samples", NULL, MTC_ARG_I64, &sch_warmup_samples, "N",
         "sample-based: linear warm-up samples (default 0)", 0},
        {"lr-decay-samples", NULL, MTC_ARG_I64, &sch_decay_samples, "N",
         "sample-based: decay samples (default train-samples)", 0},
        {"lr-warmup-init", NULL, MTC_ARG_DOUBLE, &sch_init_lr, "X",
         "learning rate at the start of warm-up (default 0)", 0},
        {"lr-wsd-decay-style", NULL, MTC_ARG_STRING, &sch_wsd_style, "S",
         "WSD's annealing: exponential|linear|cosine|minus_sqrt (default exponential)", 0},
        {"lr-wsd-decay-iters", NULL, MTC_ARG_I64, &sch_wsd_iters, "N",
         "WSD: iterations of annealing at the end of the decay", 0},
        {"lr-wsd-decay-samples", NULL, MTC_ARG_I64, &sch_wsd_samples, "N",
         "WSD, sample-based: samples of annealing at the end of the decay", 0},
        {"start-weight-decay", NULL, MTC_ARG_DOUBLE, &sch_start_wd, "X",
         "weight decay at the start (with --weight-decay-incr-style linear|cosine)", 0},
        {"end-weight-decay", NULL, MTC_ARG_DOUBLE, &sch_end_wd, "X",
         "weight decay at the end of training (with --weight-decay-incr-style linear|cosine)", 0},
        {"weight-decay-incr-style", NULL, MTC_ARG_STRING, &sch_wd_style, "S",
         "constant|linear|cosine (default constant: --weight-decay throughout)", 0},
        {"exit-interval", NULL, MTC_ARG_I64, &sch_exit_interval, "N",
         "stop (and save, with --save) after the first iteration divisible by N", 0},
        {"exit-duration-in-mins", NULL, MTC_ARG_DOUBLE, &sch_exit_mins, "M",
         "stop (and save, with --save) once training has run M minutes", 0},
        /* Megatron's tokenizer flags */
        {"tokenizer-type", NULL, MTC_ARG_STRING, &tokenizer, "S",
         "GPT2BPETokenizer|HuggingFaceTokenizer|NullTokenizer|ByteLevelTokenizer|"
         "CharLevelTokenizer|SentencePieceTokenizer|GPTSentencePieceTokenizer|Llama2Tokenizer|"
         "TikTokenizer (default CharLevelTokenizer for text; for a Megatron dataset the "
         "PREFIX.tokenizer beside it)",
         0},
        {"vocab-file", NULL, MTC_ARG_STRING, &tok_opts.vocab_file, "FILE",
         "GPT2BPETokenizer: vocab.json (GPT-2's encoder.json)", 0},
        {"merge-file", NULL, MTC_ARG_STRING, &tok_opts.merge_file, "FILE",
         "GPT2BPETokenizer: merges.txt (GPT-2's vocab.bpe)", 0},
        {"tokenizer-model", NULL, MTC_ARG_STRING, &tok_opts.tokenizer_model, "FILE",
         "HuggingFaceTokenizer: tokenizer.json (byte-level BPE); SentencePiece kinds: "
         "tokenizer.model; TikTokenizer: its JSON vocabulary",
         0},
        DATA_TOK_CLI_ARGS(tok_opts, tok_special), /* SentencePiece, tiktoken (data/tok_cli.h) */
#define NOOP_STR(name, var)                                                                        \
    {name, NULL, MTC_ARG_STRING, &var, "S", "accepted for Megatron scripts; no effect on CPU", 0}
#define NOOP_FLAG(name, var)                                                                       \
    { name, NULL, MTC_ARG_FLAG, &var, NULL, "accepted for Megatron scripts; no effect on CPU", 0 }
        NOOP_STR("attention-backend", noop_s[0]),
        NOOP_STR("transformer-impl", noop_s[1]),
        NOOP_STR("distributed-backend", noop_s[2]),
        NOOP_FLAG("use-mcore-models", noop_f[0]),
        NOOP_FLAG("no-masked-softmax-fusion", noop_f[1]),
        NOOP_FLAG("no-bias-gelu-fusion", noop_f[2]),
        NOOP_FLAG("no-bias-swiglu-fusion", noop_f[3]),
        NOOP_FLAG("no-bias-dropout-fusion", noop_f[4]),
        NOOP_FLAG("no-rope-fusion", noop_f[5]),
        NOOP_FLAG("use-flash-attn", noop_f[6]),
        NOOP_FLAG("no-gradient-accumulation-fusion", noop_f[7]),
        NOOP_FLAG("no-async-tensor-model-parallel-allreduce", noop_f[8]),
        NOOP_FLAG("use-cpu-initialization", noop_f[9]),
        NOOP_FLAG("tp-comm-overlap", noop_f[10]),
        MTC_TB_CLI_ARGS(tb_flags),
        MTC_FSDP_CLI_ARGS(fsdp_flags),
        /* accepted with a note saying what each would do (the "not here:" help) */
        {"data-cache-path", NULL, MTC_ARG_STRING, &noop_s2[1], "DIR",
         "not here: Megatron saves the GPTDataset's document, sample and shuffle indices there "
         "(.npy) to reuse; mtc builds them in memory at start and keeps no cache",
         0},
        {"ckpt-format", NULL, MTC_ARG_STRING, &noop_s2[2], "S",
         "not here: Megatron's checkpoint format (torch_dist, torch, ...); mtc writes its own "
         "resharding directory format (iter_N/metadata.json + __R.distcp) whatever is given",
         0},
        {"num-workers", NULL, MTC_ARG_STRING, &noop_s2[4], "N",
         "not here: Megatron's DataLoader worker processes; mtc reads each sample from the "
         "memory-mapped dataset on the training thread",
         0},
        NOOP_STR("empty-unused-memory-level", noop_s2[5]),
        NOOP_FLAG("cross-entropy-loss-fusion", noop_f2[0]),
        NOOP_FLAG("manual-gc", noop_f2[1]),
        NOOP_FLAG("no-create-attention-mask-in-dataloader", noop_f2[2]),
        NOOP_FLAG("no-mmap-bin-files", noop_f2[3]),
        NOOP_FLAG("log-throughput", noop_f2[4]),
        /* flags that would change results and are not implemented: refused after parsing */
        {"apply-layernorm-1p", NULL, MTC_ARG_FLAG, &ln1p, NULL,
         "Megatron's zero-centred norm weight (1 + w): accepted, the same training here (norm "
         "weights take no weight decay and Adam is shift-invariant, so w trains as gamma - 1 "
         "would); mtc keeps gamma itself",
         0},
        {"calculate-per-token-loss", NULL, MTC_ARG_FLAG, &per_token_loss, NULL,
         "the loss as the sum over tokens / the tokens of the global batch (what mtc computes "
         "always: every token counts, so Megatron's per-microbatch mean is the same number)",
         0},
        {"decoupled-lr", NULL, MTC_ARG_DOUBLE, &decoupled_lr, "X",
         "max learning rate of the word embedding and output layer (same schedule)", 0},
        {"decoupled-min-lr", NULL, MTC_ARG_DOUBLE, &decoupled_min_lr, "X",
         "their min learning rate (default --min-lr)", 0},
        {"step-batch-size-schedule", NULL, MTC_ARG_STRING, &bs_text, "S",
         "Megatron's step-wise global batch \"THRESHOLD:BS ...\": thresholds in tokens (K M B T "
         "suffixes), the first 0; each iteration runs the batch of the last threshold <= the "
         "tokens consumed",
         0},
        {"rampup-batch-size", NULL, MTC_ARG_STRINGS, &ramp, "START INCR SAMPLES",
         "deprecated and ignored, as in Megatron (a warning says so): use "
         "--step-batch-size-schedule",
         0},
#undef NOOP_STR
#undef NOOP_FLAG
        {"threads", NULL, MTC_ARG_INT, &threads, "N", "threads per rank (default cores / ranks)",
         0},
        {"metrics", NULL, MTC_ARG_STRING, &metrics, "FILE", "one JSON object per logged iteration",
         0},
        {"save", NULL, MTC_ARG_STRING, &save, "DIR",
         "checkpoint directory: DIR/iter_NNNNNNN/ (full training state, every rank writes its "
         "pieces) at the end and every --save-interval iterations",
         0},
        {"save-interval", NULL, MTC_ARG_INT, &save_interval, "N",
         "iterations between checkpoints (default: at the end only)", 0},
        {"async-save", NULL, MTC_ARG_FLAG, &async_save, NULL,
         "write checkpoints in the background from a snapshot of the state while training "
         "goes on (the next save and the end of the run wait for it)",
         0},
        {"load", NULL, MTC_ARG_STRING, &load, "DIR",
         "resume from DIR's latest checkpoint (any layout; a missing or empty DIR starts fresh); "
         "a single-file model gives the weights only",
         0},
        {"ckpt-step", NULL, MTC_ARG_I64, &ckpt_step, "N", "load iteration N instead of the latest",
         0},
        {"no-load-optim", NULL, MTC_ARG_FLAG, &no_load_optim, NULL,
         "do not load the optimizer state (fresh AdamW moments)", 0},
        {"no-load-rng", NULL, MTC_ARG_FLAG, &no_load_rng, NULL,
         "do not take the random seed from the checkpoint (use --seed)", 0},
        {"override-opt-param-scheduler", NULL, MTC_ARG_FLAG, &override_sched, NULL,
         "take the learning-rate schedule from these flags, not the checkpoint (which must "
         "otherwise match)",
         0},
        {"finetune", NULL, MTC_ARG_FLAG, &finetune, NULL,
         "load the weights only: iteration 0, no optimizer state, --seed", 0},
        {"profile", NULL, MTC_ARG_FLAG, &profile, NULL,
         "write a Chrome/Perfetto trace of every rank for iterations (start, end] to "
         "--profile-dir/trace.json",
         0},
        {"profile-step-start", NULL, MTC_ARG_I64, &prof_start, "N",
         "traced iterations begin after N completed ones (default 10)", 0},
        {"profile-step-end", NULL, MTC_ARG_I64, &prof_end, "N",
         "traced iterations end with iteration N (default 12)", 0},
        {"profile-dir", NULL, MTC_ARG_STRING, &prof_dir, "DIR",
         "where --profile writes trace.json (default .)", 0},
        {"trace", NULL, MTC_ARG_STRING, &trace, "FILE",
         "the trace to FILE (every iteration unless --profile-step-start/-end say)", 0},
        {"trace-buffer-mb", NULL, MTC_ARG_DOUBLE, &trace_mb, "MB",
         "per-rank bound of the trace in memory (default 256): later events are dropped and "
         "counted, with a warning",
         0},
        {"timing-log-level", NULL, MTC_ARG_INT, &timing_level, "N",
         "0: no timers; 1: forward-backward, grads sync, optimizer; 2: also per microbatch and "
         "pipeline p2p (default 0)",
         0},
        {"timing-log-option", NULL, MTC_ARG_STRING, &timing_opt, "S",
         "max|minmax|all: what the timer block shows across ranks (default minmax)", 0},
        {"peak-tflops", NULL, MTC_ARG_DOUBLE, &peak_tflops, "X",
         "this machine's peak TFLOP/s per rank: the log line adds model FLOPs utilization", 0},
    };
    int nargs = (int)(sizeof args / sizeof args[0]);
    int st = cli_parse("train", TRAIN_USAGE, TRAIN_ABOUT, args, nargs, argc, argv);
    if (st >= 0) return st;
    if (mtc_fsdp_flags_apply(&fsdp_flags, noop_s2[2], &fsdp_strategy, &distopt) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());

    (void)per_token_loss, (void)ln1p;
    if (mtc_args_seen(args, nargs, "decoupled-lr") && !(decoupled_lr >= 0))
        return cli_usage_error("train", "decoupled-lr=%g must be >= 0", decoupled_lr);
    if (mtc_args_seen(args, nargs, "decoupled-min-lr") &&
        (!(decoupled_min_lr >= 0) || !mtc_args_seen(args, nargs, "decoupled-lr")))
        return cli_usage_error("train",
                               "decoupled-min-lr=%g must be >= 0 and goes with --decoupled-lr",
                               decoupled_min_lr);
    if (world < 1 || world > MTC_LAUNCH_MAX_THREAD_RANKS)
        return cli_usage_error("train", "--world-size %d must be 1..%d (thread-ranks)", world,
                               MTC_LAUNCH_MAX_THREAD_RANKS);
    if (mbs < 1 || mbs > MTC_TRAIN_MAX_MICRO_BATCH)
        return cli_usage_error("train", "--micro-batch-size %d must be 1..%d", mbs,
                               MTC_TRAIN_MAX_MICRO_BATCH);
    if (tp < 1) return cli_usage_error("train", "tensor-model-parallel-size=%d must be >= 1", tp);
    if (pp < 1) return cli_usage_error("train", "pipeline-model-parallel-size=%d must be >= 1", pp);
    if (cp < 1) return cli_usage_error("train", "context-parallel-size=%d must be >= 1", cp);
    char metrics_real[MTC_PATH_MAX];
    if (metrics &&
        mtc_outfile_check(metrics, "--metrics", metrics_real, sizeof metrics_real) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    if (metrics && save && !strcmp(metrics, save))
        return cli_usage_error("train", "--metrics and --save are both %s (give each its own path)",
                               metrics);
    /* Megatron's recomputation rules (arguments.py) */
    int rc_full = 0, rc_block = 0;
    if (rc_gran && strcmp(rc_gran, "full") && strcmp(rc_gran, "selective"))
        return cli_usage_error(
            "train", "recompute-granularity=%s is unknown (use full or selective)", rc_gran);
    if (rc_method && strcmp(rc_method, "uniform") && strcmp(rc_method, "block"))
        return cli_usage_error("train", "recompute-method=%s is unknown (use uniform or block)",
                               rc_method);
    if (rc_gran && !strcmp(rc_gran, "full")) {
        if (!rc_method)
            return cli_usage_error("train", "--recompute-granularity full needs --recompute-method "
                                            "uniform or block");
        if (rc_layers < 1)
            return cli_usage_error("train", "--recompute-granularity full needs "
                                            "--recompute-num-layers N >= 1");
        rc_full = 1, rc_block = !strcmp(rc_method, "block");
    } else if (rc_method || rc_layers) {
        return cli_usage_error("train", "--recompute-method and --recompute-num-layers apply only "
                                        "with --recompute-granularity full");
    }
    if (rc_modules && !(rc_gran && !strcmp(rc_gran, "selective")))
        return cli_usage_error("train", "--recompute-modules applies only with "
                                        "--recompute-granularity selective");
    /* --recompute-modules: a comma- or space-separated list (Megatron's
     * default core_attn, a no-op here: the tiled attention keeps no
     * probabilities; mlp recomputes each MLP in backward) */
    int rc_mlp = 0, rc_shared = 0;
    if (rc_modules) {
        char mods[256];
        snprintf(mods, sizeof mods, "%s", rc_modules);
        for (char *sv = NULL, *t = strtok_r(mods, ", ", &sv); t; t = strtok_r(NULL, ", ", &sv)) {
            if (!strcmp(t, "mlp"))
                rc_mlp = 1;
            else if (!strcmp(t, "shared_experts"))
                rc_shared = 1;
            /* core_attn and layernorm are what mtc always does: the tiled
             * attention keeps no probabilities, the norms' outputs are rebuilt */
            else if (strcmp(t, "core_attn") && strcmp(t, "layernorm"))
                return cli_usage_error("train",
                                       "recompute-modules=%s: %s is not implemented (use "
                                       "core_attn, layernorm, mlp and/or shared_experts; moe and "
                                       "moe_act are not yet)",
                                       rc_modules, t);
        }
    }
    if (mtc_args_seen(args, nargs, "distributed-timeout-minutes") &&
        !(dist_timeout_min > 0 && dist_timeout_min <= 1e6))
        return cli_usage_error("train", "distributed-timeout-minutes=%g must be in (0, 1e6]",
                               dist_timeout_min);
    /* one comm type, or one per layer (Megatron's nargs='+') */
    static int cp_types[MTC_ARG_STRINGS_MAX]; /* read by the rank-threads for the whole run */
    int cp_per_layer = 0;
    if (cp_options_resolve(cp_comm.v, cp_comm.n, L, cp, hcp.v, hcp.n, cp_types, &cp_per_layer) !=
        MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    int cp_type = cp_types[0];
    mtc_moe_config moe_cfg;
    if ((st = train_compat_apply(&compat, model_f.use_rope ? "rope" : model_f.posemb,
                                 &moe_f.dispatcher)) >= 0)
        return st;
    if (moe_cli_resolve(&moe_f, mtc_args_seen(args, nargs, "moe-expert-capacity-factor"),
                        &moe_cfg) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    if (mtc_moe_validate_etp(etp, tp) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    if (vpp && (lpvs || vstages))
        return cli_usage_error(
            "train",
            "give the virtual pipeline size once: --vpp or --num-virtual-stages-per-pipeline-rank "
            "or --num-layers-per-virtual-pipeline-stage");
    if (mtc_args_seen(args, nargs, "virtual-pipeline-model-parallel-size") && vpp < 1)
        return cli_usage_error("train", "virtual-pipeline-model-parallel-size=%d must be >= 1",
                               vpp);
    if (mb_group < 0)
        return cli_usage_error(
            "train", "microbatch-group-size-per-virtual-pipeline-stage=%d must be >= 1", mb_group);
    if (pp_layout_cli_resolve(
            &split_f, mtc_args_seen(args, nargs, "decoder-first-pipeline-num-layers"),
            mtc_args_seen(args, nargs, "decoder-last-pipeline-num-layers"), &pp_split) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    pp_split.mtp_num_layers = model_f.mtp_layers; /* a layout string's 'm' count */
    { /* Megatron's training rules deriving vpp (arguments.py) */
        pp_vpp_args va = {.pp = pp,
                          .split = &pp_split,
                          .num_layers = L,
                          .layers_per_virtual_stage = lpvs,
                          .virtual_stages_per_rank = vpp ? vpp : vstages,
                          .overlap_p2p_comm = 1};
        if (pp_vpp_from_args(&vpp, &va) != MTC_OK)
            return cli_usage_error("train", "%s", mtc_error_detail());
    }
    if (bucket < 0)
        return cli_usage_error("train", "ddp-bucket-size=%lld must be >= 0", (long long)bucket);
    mtc_launcher_env le;
    if (mtc_launcher_detect(&le) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    if ((le.kind == MTC_LAUNCHER_TORCHRUN || le.kind == MTC_LAUNCHER_SLURM) && le.world > 1) {
        /* several processes that no transport can join: refuse, never run
         * them as independent jobs (rank 0 alone speaks) */
        if (le.rank != 0) return 2;
        return cli_usage_error("train",
                               "started by %s as rank %d of %d, but mtc joins processes only "
                               "through MPI: run `mpirun -np %d mtc train ...` (or one process "
                               "with --world-size %d)",
                               le.name, le.rank, le.world, le.world, le.world);
    }
    if (le.kind == MTC_LAUNCHER_MPI && le.world > 1) world = le.world; /* the MPI size */
    { /* GPU-only or Megatron-internal flags: one note naming them all */
        char note[512] = "";
        size_t n = 0;
        for (int i = 0; i < nargs; i++)
            if (args[i].seen && args[i].help && strstr(args[i].help, "no effect on CPU") &&
                n + strlen(args[i].name) + 4 < sizeof note)
                n += (size_t)snprintf(note + n, sizeof note - n, "%s--%s", n ? ", " : "",
                                      args[i].name);
        if (le.rank == 0) train_compat_note(&compat);
        if (n && le.rank == 0) /* once per job, not once per rank */
            fprintf(stderr, "note: %s concern GPUs or Megatron's internals and do not apply here\n",
                    note);
        for (int i = 0; i < nargs && le.rank == 0; i++) /* what the others would do */
            if (args[i].seen && args[i].help && !strncmp(args[i].help, "not here: ", 10))
                fprintf(stderr, "note: --%s is accepted, %s\n", args[i].name, args[i].help + 10);
    }

    if (le.kind == MTC_LAUNCHER_MPI && !threads && le.local_world > 0) {
        threads = (int)sysconf(_SC_NPROCESSORS_ONLN) / le.local_world;
        if (threads < 1) threads = 1;
    }
    {
        int here = le.kind == MTC_LAUNCHER_MPI ? le.local_world : world,
            tmax = mtc_threads_max(here);
        if (threads < 0 || threads > tmax)
            return cli_usage_error("train",
                                   "--threads %d must be 1..%d (%d x this machine's cores over %d "
                                   "ranks on it)",
                                   threads, tmax, MTC_THREADS_PER_CORE_MAX, here < 1 ? 1 : here);
    }
    if (nd < 1)
        return cli_usage_error("train", "num-distributed-optimizer-instances=%d must be >= 1", nd);
    if (nd > 1 && !distopt)
        return cli_usage_error(
            "train", "num-distributed-optimizer-instances=%d needs --use-distributed-optimizer",
            nd);
    if (overlap_pg && !distopt)
        return cli_usage_error("train", "--overlap-param-gather needs --use-distributed-optimizer");
    if (sp && tp == 1) {
        fprintf(stderr, "WARNING: --sequence-parallel is switched off because "
                        "tensor-model-parallel-size is 1\n");
        sp = 0;
    }
    int lr_style = mtc_lr_style_parse(style);
    if (lr_style < 0)
        return cli_usage_error("train",
                               "lr-decay-style=%s is unknown (use constant, linear, cosine, "
                               "inverse-square-root or WSD)",
                               style);
    data_path = data_paths.n ? data_paths.v[0] : NULL;
    int per_split = split_paths[0].n || split_paths[1].n || split_paths[2].n;
    if (per_split && (mock || data_path)) /* Megatron: "A single data source must be provided" */
        return cli_usage_error("train",
                               "--train-data-path/--valid-data-path/--test-data-path exclude %s "
                               "(give one data source)",
                               mock ? "--mock-data" : "--data-path");
    if (per_split && mtc_args_seen(args, nargs, "split"))
        return cli_usage_error("train", "--split does not apply to --train-data-path/"
                                        "--valid-data-path/--test-data-path (each split reads "
                                        "all of its data; Megatron refuses both): drop --split");
    if (per_split && !split_paths[0].n)
        return cli_usage_error("train", "--valid-data-path/--test-data-path need "
                                        "--train-data-path (the data to train on)");
    if (mock && data_path)
        return cli_usage_error(
            "train", "--mock-data and --data-path=%s exclude each other (pick one)", data_path);
    if (!mock && !data_path && !per_split)
        return cli_usage_error("train", "no data: pass --data-path FILE|DIR|PREFIX or --mock-data");
    if (divisible < 1 || divisible > MTC_MODEL_MAX_VOCAB_DIVISOR)
        return cli_usage_error("train", "make-vocab-size-divisible-by=%d is outside [1, %d]",
                               divisible, MTC_MODEL_MAX_VOCAB_DIVISOR);
    if (vocab < 0) return cli_usage_error("train", "vocab-size=%d must be >= 1", vocab);
    if (T < 1) return cli_usage_error("train", "seq-length=%d must be >= 1", T);
    /* Megatron's GPT-3 example gives the files without --tokenizer-type */
    if (!tokenizer && tok_opts.vocab_file && tok_opts.merge_file) tokenizer = "GPT2BPETokenizer";
    if (!tokenizer && tok_opts.tokenizer_model) tokenizer = "HuggingFaceTokenizer";
    if (tokenizer && data_tok_parse_type(tokenizer) < 0)
        return cli_usage_error("train", "tokenizer-type=%s is unknown (use one of %s)", tokenizer,
                               data_tok_type_names());
    if (tokenizer && data_tok_parse_type(tokenizer) == DATA_TOK_NULL && vocab < 1)
        return cli_usage_error("train", "--tokenizer-type NullTokenizer needs --vocab-size N");
    tok_opts.vocab_size = vocab;
    data_tok_cli_special(&tok_opts, &tok_special);

    if (save_interval < 0)
        return cli_usage_error("train", "save-interval=%d must be >= 1", save_interval);
    if (save_interval > 0 && !save)
        return cli_usage_error("train", "--save-interval needs --save DIR");
    if (async_save && !save) return cli_usage_error("train", "--async-save needs --save DIR");
    if (mtc_args_seen(args, nargs, "ckpt-step") && (ckpt_step < 0 || !load))
        return cli_usage_error("train", "ckpt-step=%lld needs --load DIR and must be >= 0",
                               (long long)ckpt_step);
    int load_file = 0, have_ckpt = 0;
    mtc_model_config saved_cfg;
    char saved_tok[MTC_CKPT_TOKENIZER_MAX] = "";
    int have_sched = 0, sched_style = -1;
    double sched[4] = {0}; /* the checkpoint's max_lr, min_lr, warmup and decay steps */
    char saved_path[4300] = "";
    if (load) {
        struct stat lst;
        load_file = stat(load, &lst) == 0 && S_ISREG(lst.st_mode);
        int64_t it = 0;
        if (!load_file && mtc_ckpt_dist_find(load, ckpt_step, &it, &have_ckpt) != MTC_OK)
            return cli_usage_error("train", "%s", mtc_error_detail());
        if (!load_file && !have_ckpt) { /* as Megatron: warn and start from scratch */
            fprintf(stderr,
                    "WARNING: could not find the metadata file %s/%s\n    will not load any "
                    "checkpoints and will start from random\n",
                    load, MTC_CKPT_TRACKER);
            load = NULL;
        }
        if (have_ckpt) { /* read the common state now: a bad checkpoint stops here */
            mtc_ckpt_dist *ck = NULL;
            if (mtc_ckpt_dist_open(load, it, &ck) != MTC_OK)
                return cli_usage_error("train", "%s", mtc_error_detail());
            const cJSON *common = mtc_ckpt_dist_common(ck);
            snprintf(saved_path, sizeof saved_path, "%s", mtc_ckpt_dist_path(ck));
            mtc_result_t prc =
                mtc_ckpt_config_parse(cJSON_GetObjectItem(common, "model"), saved_path, &saved_cfg);
            const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(common, "tokenizer"));
            char iter_dir[MTC_PATH_MAX]; /* its tokenizer's files are copies in there */
            mtc_ckpt_dist_dirname(iter_dir, sizeof iter_dir, load, it, 0);
            if (mtc_ckpt_tok_resolve(t ? t : "none", iter_dir, saved_tok, sizeof saved_tok))
                return cli_usage_error("train", "%s", mtc_error_detail());
            const cJSON *sch = cJSON_GetObjectItem(common, "opt_param_scheduler");
            if (cJSON_IsObject(sch)) {
                have_sched = 1;
                static const char *keys[4] = {"max_lr", "min_lr", "lr_warmup_steps",
                                              "lr_decay_steps"};
                for (int k = 0; k < 4; k++) {
                    const cJSON *v = cJSON_GetObjectItem(sch, keys[k]);
                    sched[k] = cJSON_IsNumber(v) ? v->valuedouble : -1;
                }
                const char *st = cJSON_GetStringValue(cJSON_GetObjectItem(sch, "lr_decay_style"));
                sched_style = st ? mtc_lr_style_parse(st) : -1;
            }
            const char *sd = cJSON_GetStringValue(
                cJSON_GetObjectItem(cJSON_GetObjectItem(common, "rng"), "seed"));
            if (prc == MTC_OK && !no_load_rng && !finetune && sd) {
                int64_t saved_seed = (int64_t)strtoull(sd, NULL, 10);
                if (mtc_args_seen(args, nargs, "seed") && saved_seed != seed)
                    fprintf(stderr,
                            "mtc train: note: seed=%lld from the checkpoint replaces --seed %lld "
                            "(dropout and data order continue the saved run; --no-load-rng keeps "
                            "--seed)\n",
                            (long long)saved_seed, (long long)seed);
                seed = saved_seed;
            }
            mtc_ckpt_dist_close(ck);
            if (prc != MTC_OK) return cli_usage_error("train", "%s", mtc_error_detail());
            ckpt_step = it;
        }
    }

    mtc_train_config tc;
    memset(&tc, 0, sizeof tc);
    mtc_model_config *mc = &tc.model;
    mc->num_layers = L, mc->hidden_size = C, mc->num_heads = NH;
    if (C < 1 || C > (1 << 18))
        return cli_usage_error("train", "hidden-size=%d is outside [1, %d]", C, 1 << 18);
    /* Megatron's default for SwiGLU keeps the parameter count of 4h */
    mc->ffn_hidden_size = F ? F : model_cli_default_ffn(C, model_f.swiglu);
    mc->seq_length = T;
    mc->max_position_embeddings = maxpos ? maxpos : T;
    mc->hidden_dropout = (float)hdrop, mc->attention_dropout = (float)adrop;
    if (model_cli_resolve(&model_f, mtc_args_seen(args, nargs, "num-query-groups"),
                          MODEL_CLI_GROUPS_NEED_GQA, mc) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    if (timing_level < 0 || timing_level > 2)
        return cli_usage_error("train", "timing-log-level=%d must be 0, 1 or 2", timing_level);
    int timing_option = !strcmp(timing_opt, "max")      ? 0
                        : !strcmp(timing_opt, "minmax") ? 1
                        : !strcmp(timing_opt, "all")    ? 2
                                                        : -1;
    if (timing_option < 0)
        return cli_usage_error("train", "timing-log-option=%s must be max, minmax or all",
                               timing_opt);
    if (tb_flags.log_interval < 1)
        return cli_usage_error("train", "tensorboard-log-interval=%d must be >= 1",
                               tb_flags.log_interval);
    if (tb_flags.dir && mtc_tb_check_dir(tb_flags.dir) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    if (!(peak_tflops >= 0))
        return cli_usage_error("train", "peak-tflops=%g must be > 0", peak_tflops);
    int steps_given = mtc_args_seen(args, nargs, "profile-step-start") ||
                      mtc_args_seen(args, nargs, "profile-step-end");
    if (trace && !steps_given) prof_start = 0, prof_end = iters;
    if ((profile || trace) && (prof_start < 0 || prof_end <= prof_start))
        return cli_usage_error("train",
                               "profile-step-start=%lld and profile-step-end=%lld must satisfy 0 "
                               "<= start < end (iterations start+1..end are traced)",
                               (long long)prof_start, (long long)prof_end);
    if (profile && !trace) {
        snprintf(trace_file, sizeof trace_file, "%s/trace.json", prof_dir ? prof_dir : ".");
        if (prof_dir && mkdir(prof_dir, 0777) != 0 && errno != EEXIST)
            return cli_usage_error("train", "profile-dir=%s cannot be created (%s)", prof_dir,
                                   strerror(errno));
        trace = trace_file;
    }
    if (mtc_args_seen(args, nargs, "trace-buffer-mb") && !(trace_mb > 0 && trace_mb <= 1048576))
        return cli_usage_error(
            "train", "trace-buffer-mb=%g must be a size in MiB above 0 (e.g. 256)", trace_mb);
    char trace_real[MTC_PATH_MAX];
    if (trace && mtc_outfile_check(trace, profile ? "--profile-dir's trace.json" : "--trace",
                                   trace_real, sizeof trace_real) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    tc.trace_path = trace, tc.profile_step_start = prof_start, tc.profile_step_end = prof_end;
    tc.trace_buffer_mb = trace_mb;
    tc.timing_log_level = timing_level, tc.timing_log_option = timing_option;
    tc.peak_tflops = peak_tflops;
    tc.tensorboard = tb_flags;
    mc->moe = moe_cfg;
    if (mtc_moe_validate(&moe_cfg, L, mc->ffn_hidden_size, tp, sp, ep, etp ? etp : tp,
                         !model_f.nobias) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    /* shape checks that need no data, before opening anything */
    mc->vocab_size = mc->padded_vocab_size = 1;
    if (mtc_model_config_validate(mc) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    if (bs_text) { /* Megatron always passes seq_length: thresholds are tokens */
        if (mtc_batch_schedule_parse(&bsched, bs_text, T) != MTC_OK)
            return cli_usage_error("train", "%s", mtc_error_detail());
        int64_t last = bsched.batch[bsched.n - 1];
        /* Megatron refuses both flags, yet its GPT-3 example passes both with
         * the schedule's last batch: accepted when they agree */
        if (mtc_args_seen(args, nargs, "global-batch-size") && gbs != last)
            return cli_usage_error("train",
                                   "global-batch-size=%d differs from the last "
                                   "step-batch-size-schedule batch %lld: drop --global-batch-size "
                                   "(Megatron refuses both) or make it %lld",
                                   gbs, (long long)last, (long long)last);
        if (mtc_args_seen(args, nargs, "global-batch-size") && le.rank == 0)
            fprintf(stderr,
                    "note: --global-batch-size %d is the step-batch-size-schedule's last batch: "
                    "accepted (Megatron refuses both flags); it is the evaluation batch\n",
                    gbs);
        tc.batch_schedule = &bsched;
    }
    if (mtc_args_seen(args, nargs, "rampup-batch-size")) {
        if (ramp.n != 3)
            return cli_usage_error("train",
                                   "rampup-batch-size takes 3 values (start batch, increment, "
                                   "ramp-up samples), got %d",
                                   ramp.n);
        if (le.rank == 0) /* Megatron's init_num_microbatches_calculator ignores it */
            fprintf(stderr, "WARNING: rampup_batch_size is deprecated and will be removed in a "
                            "future release. Use step_batch_size_schedule instead. (mtc, as "
                            "Megatron, ignores --rampup-batch-size)\n");
    }
    tc.micro_batch = mbs;
    { /* Megatron's default: one microbatch per data-parallel rank */
        int64_t model_ranks = (int64_t)tp * pp * cp;
        int dp = model_ranks > 0 && world % model_ranks == 0 ? (int)(world / model_ranks) : 1;
        int64_t g = gbs ? gbs : (int64_t)mbs * dp;
        if (g > INT_MAX)
            return cli_usage_error("train", "--micro-batch-size %d x data-parallel %d is above %d",
                                   mbs, dp, INT_MAX);
        tc.global_batch = (int)g;
    }
    tc.train_iters = iters;
    tc.lr = (mtc_lr_schedule){.lr = lr,
                              .min_lr = min_lr,
                              .warmup_iters = warmup,
                              .decay_iters = decay ? decay : iters,
                              .style = (mtc_lr_style)lr_style};
    if (train_schedule(&tc, args, nargs, sch_train_samples, sch_warmup_fraction, sch_warmup_samples,
                       sch_decay_samples, sch_init_lr, sch_wsd_style, sch_wsd_iters,
                       sch_wsd_samples, sch_wd_style, sch_start_wd, sch_end_wd, wd) != 0)
        return 2;
    tc.exit_interval = sch_exit_interval, tc.exit_duration_mins = sch_exit_mins;
    if (sch_exit_interval < 0)
        return cli_usage_error("train", "exit-interval=%lld must be >= 1",
                               (long long)sch_exit_interval);
    if (!(sch_exit_mins >= 0 && sch_exit_mins < 1e9))
        return cli_usage_error("train", "exit-duration-in-mins=%g must be > 0", sch_exit_mins);
    tc.adam = (mtc_adamw_config){
        .beta1 = (float)b1, .beta2 = (float)b2, .eps = (float)eps, .weight_decay = (float)wd};
    tc.clip_grad = (float)clip;
    tc.seed = (uint64_t)seed;
    tc.log_interval = log_interval, tc.eval_interval = eval_interval, tc.eval_iters = eval_iters;
    tc.threads = threads;
    tc.metrics_path = metrics, tc.save_path = save, tc.load_path = load;
    tc.save_interval = save_interval, tc.ckpt_step = ckpt_step, tc.load_weights_file = load_file;
    tc.no_load_optim = no_load_optim, tc.finetune = finetune, tc.async_save = async_save;
    tc.world_size = world, tc.sequence_parallel = sp;
    tc.comm_timeout_s = dist_timeout_min > 0 ? dist_timeout_min * 60.0 : 0; /* the launch's */
    mtc_grid_config_default(&tc.grid);                                      /* the layout, once */
    tc.grid.tp = tp, tc.grid.pp = pp, tc.grid.cp = cp, tc.grid.ep = ep, tc.grid.etp = etp;
    tc.grid.vpp = vpp, tc.grid.num_dist_opt_instances = nd;
    if (hcp.n == 2)
        tc.grid.n_hcp = 2, tc.grid.hcp[0] = (int)hcp.v[0], tc.grid.hcp[1] = (int)hcp.v[1];
    tc.cp_comm_type = cp_type;
    tc.cp_layer_types = cp_per_layer ? cp_types : NULL;
    tc.decoupled = mtc_args_seen(args, nargs, "decoupled-lr");
    tc.decoupled_lr = decoupled_lr, tc.decoupled_min_lr = decoupled_min_lr;
    tc.no_check_nan = !check_nan;
    if (!acc_fp32 && !grad_bf16)
        return cli_usage_error("train", "--no-accumulate-allreduce-grads-in-fp32 is not supported: "
                                        "mtc keeps main grads in fp32 (drop the flag)");
    if (ls_window < 1)
        return cli_usage_error("train", "loss-scale-window=%d must be >= 1", ls_window);
    if (hyst < 1) return cli_usage_error("train", "hysteresis=%d must be >= 1", hyst);
    if (bf16_gemm && nn_bf16_gemm_parse(bf16_gemm) < 0)
        return cli_usage_error("train", "--bf16-gemm %s is not auto, dnnl-bf16 or fp32", bf16_gemm);
    if (bf16_gemm && !bf16)
        return cli_usage_error("train", "--bf16-gemm %s needs --bf16 (add it or drop the flag)",
                               bf16_gemm);
    tc.bf16_gemm = bf16_gemm ? nn_bf16_gemm_parse(bf16_gemm) : NN_BF16_GEMM_AUTO;
    tc.bf16 = bf16, tc.fp16 = fp16, tc.grad_reduce_in_bf16 = grad_bf16;
    tc.loss_scale = loss_scale, tc.initial_loss_scale = init_ls, tc.min_loss_scale = min_ls;
    tc.loss_scale_window = ls_window, tc.hysteresis = hyst;
    tc.recompute_full = rc_full, tc.recompute_block = rc_block, tc.recompute_num_layers = rc_layers;
    tc.recompute_mlp = rc_mlp, tc.recompute_shared = rc_shared;
    tc.microbatch_group_size = mb_group, tc.pp_split = pp_split;
    tc.overlap_grad_reduce = overlap, tc.ddp_bucket_size = bucket;
    tc.use_distributed_optimizer = distopt, tc.overlap_param_gather = overlap_pg;
    tc.fsdp_strategy = fsdp_strategy, tc.fsdp_unit_size = fsdp_flags.unit_size;
    tc.pad_high_busbw = pad_high, tc.print_layout = print_layout;
    if (mtc_train_validate(&tc) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    mc->padded_vocab_size = mtc_model_pad_vocab(1, divisible, tp);
    if (mtc_train_validate_layout(&tc, world) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());

    data_source_opts dopts = {
        .data_path = data_path,
        .blend = data_paths.n > 1 ? data_paths.v : NULL,
        .n_blend = data_paths.n > 1 ? data_paths.n : 0,
        /* Megatron's train / valid / test sizes
           (get_train_valid_test_num_samples) */
        .num_samples = {train_num_samples(&tc),
                        (uint64_t)(tc.train_iters / eval_interval + 1) * (uint64_t)eval_iters *
                            (uint64_t)tc.global_batch,
                        (uint64_t)eval_iters * (uint64_t)tc.global_batch},
        .mock = mock,
        .vocab_size = mock && !vocab && !tokenizer ? 50257 : vocab,
        .tokenizer = tokenizer,
        .tok = &tok_opts,
        .seq_length = T,
        .seed = (uint64_t)seed,
        .split = split,
        .split_paths = {split_paths[0].v, split_paths[1].v, split_paths[2].v},
        .n_split_paths = {split_paths[0].n, split_paths[1].n, split_paths[2].n}};
    data_source *src = NULL;
    if (data_source_open(&dopts, &src) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    int data_vocab = data_source_vocab_size(src);
    if (vocab && vocab < data_vocab) {
        data_source_free(src);
        return cli_usage_error("train",
                               "vocab-size=%d is smaller than the data's vocabulary %d (drop "
                               "--vocab-size or raise it)",
                               vocab, data_vocab);
    }
    mc->vocab_size = vocab ? vocab : data_vocab;
    mc->padded_vocab_size = mtc_model_pad_vocab(mc->vocab_size, divisible, tp);
    char tokstr[MTC_CKPT_TOKENIZER_MAX] = "none";
    const data_tok *tok = data_source_tokenizer(src);
    if (tok) { /* the tokenizer's text form, stored with the model */
        data_tok_text form = {0};
        mtc_result_t trc = data_tok_serialize(tok, &form);
        int fits = trc == MTC_OK && form.n < sizeof tokstr;
        if (fits) memcpy(tokstr, form.s, form.n + 1);
        data_tok_text_free(&form);
        if (!fits) {
            data_source_free(src);
            if (trc != MTC_OK) return cli_fail("train", trc);
            return cli_usage_error("train",
                                   "the %s of %d symbols is too large to store with the model "
                                   "(use ByteLevelTokenizer or a BPE tokenizer)",
                                   data_tok_name(tok), data_tok_vocab_size(tok));
        }
    }
    tc.tokenizer = tokstr;
    if (have_ckpt) { /* refuse a mismatching checkpoint before training starts */
        if (mtc_ckpt_config_check(&saved_cfg, mc, saved_path) != MTC_OK) {
            data_source_free(src);
            return cli_usage_error("train", "%s", mtc_error_detail());
        }
        if (!mtc_ckpt_tok_same(saved_tok, tokstr)) {
            data_source_free(src);
            return cli_usage_error(
                "train", "%s was saved with a different tokenizer than this data's", saved_path);
        }
    }
    if (have_sched && !finetune && !override_sched) { /* Megatron's _check_and_set */
        const mtc_lr_schedule *l = &tc.lr;
        /* Megatron's state is in samples; say it in the units the flags use */
        int by_samples = sch_train_samples > 0;
        double unit = by_samples ? 1.0 : (double)l->step_samples;
        const char *names[4] = {"lr", "min-lr",
                                by_samples ? "lr-warmup-samples" : "lr-warmup-iters",
                                by_samples ? "lr-decay-samples" : "lr-decay-iters"};
        double now[4] = {l->lr, l->min_lr, l->warmup_samples / unit,
                         (double)l->decay_samples / unit};
        sched[2] /= unit, sched[3] /= unit;
        for (int k = 0; k < 4; k++)
            if (fabs(sched[k] - now[k]) > 1e-6 * fabs(now[k]))
                return data_source_free(src),
                       cli_usage_error("train",
                                       "%s=%g but %s was saved with %g (pass the saved value, or "
                                       "--override-opt-param-scheduler to use these flags)",
                                       names[k], now[k], saved_path, sched[k]);
        if (sched_style != (int)l->style)
            return data_source_free(src),
                   cli_usage_error("train",
                                   "lr-decay-style=%s differs from %s's (pass the saved one, or "
                                   "--override-opt-param-scheduler)",
                                   style, saved_path);
    }
    if (load && load_file) { /* refuse a mismatching checkpoint before training starts */
        mtc_ckpt_info info;
        if (mtc_ckpt_read_info(load, &info) != MTC_OK) {
            data_source_free(src);
            return cli_usage_error("train", "%s", mtc_error_detail());
        }
        const mtc_model_config *fc = &info.cfg;
        if (fc->num_layers != mc->num_layers || fc->hidden_size != mc->hidden_size ||
            fc->num_heads != mc->num_heads || fc->ffn_hidden_size != mc->ffn_hidden_size ||
            fc->max_position_embeddings != mc->max_position_embeddings ||
            fc->padded_vocab_size != mc->padded_vocab_size || fc->vocab_size != mc->vocab_size) {
            data_source_free(src);
            return cli_usage_error(
                "train",
                "%s was saved with num-layers=%d hidden-size=%d num-attention-heads=%d "
                "ffn-hidden-size=%d max-position-embeddings=%d vocab=%d/%d, which differs from "
                "these flags (%d %d %d %d %d %d/%d)",
                load, fc->num_layers, fc->hidden_size, fc->num_heads, fc->ffn_hidden_size,
                fc->max_position_embeddings, fc->vocab_size, fc->padded_vocab_size, mc->num_layers,
                mc->hidden_size, mc->num_heads, mc->ffn_hidden_size, mc->max_position_embeddings,
                mc->vocab_size, mc->padded_vocab_size);
        }
        if (!mtc_ckpt_tok_same(info.tokenizer, tokstr)) {
            data_source_free(src);
            return cli_usage_error(
                "train", "%s was saved with a different tokenizer than this data's", load);
        }
    }
    /* the --save directory is checked (made, written) before any work, not
     * after training: the last check, so a refused run writes nothing */
    if (save && mtc_ckpt_dist_check_save_dir(save) != MTC_OK) {
        data_source_free(src);
        return cli_usage_error("train", "%s", mtc_error_detail());
    }
    mtc_result_t rc = mtc_train_run(&tc, src, stdout);
    data_source_free(src);
    if (rc == MTC_ERR_INVALID_ARGUMENT || rc == MTC_ERR_FORMAT)
        return cli_usage_error("train", "%s", mtc_error_detail());
    return rc == MTC_OK ? 0 : cli_fail("train", rc);
}
