/* cli/train_args.c - `mtc train`'s argument table (Megatron's flag
 * names; the shared blocks come from the modules that own them). */
#include <string.h>

#include "cli/train_args.h"

static train_flags TF;

static void train_flags_defaults(train_flags *f) {
    memset(f, 0, sizeof *f);
    f->lay = (layout_flags)LAYOUT_FLAGS_DEFAULTS;
    f->L = 4;
    f->C = 128;
    f->NH = 4;
    f->T = 128;
    f->mbs = 4;
    f->iters = 100;
    f->lr = 1e-3;
    f->wd = 0.01;
    f->clip = 1.0;
    f->b1 = 0.9;
    f->b2 = 0.999;
    f->eps = 1e-8;
    f->decoupled_lr = -1;
    f->decoupled_min_lr = -1;
    f->hdrop = 0.1;
    f->head_chunk = MTC_TRAIN_HEAD_CHUNK;
    f->adrop = 0.1;
    f->seed = 1234;
    f->eval_interval = 1000;
    f->eval_iters = 100;
    f->log_interval = 100;
    f->world = 1;
    f->divisible = 128;
    f->split = "969,30,1";
    f->style = "linear";
    f->ckpt_step = -1;
    f->tok_opts = (data_tok_opts){0};
    f->tok_special = (mtc_arg_strings){0};
    f->data_paths = (mtc_arg_strings){0};
    f->sch_wsd_style = "exponential";
    f->sch_wd_style = "constant";
    f->prof_start = 10;
    f->prof_end = 12;
    f->timing_opt = "minmax";
    f->check_nan = 1;
    f->acc_fp32 = 1;
    f->ls_window = 1000;
    f->hyst = 2;
    f->init_ls = 4294967296.0;
    f->min_ls = 1.0;
    f->tb_flags = (mtc_tb_flags)MTC_TB_FLAGS_DEFAULTS;
    f->fsdp_flags = (mtc_fsdp_flags)MTC_FSDP_FLAGS_DEFAULTS;
    f->fp8_f = (tp_fp8_cli)TP_FP8_CLI_DEFAULTS;
    f->ramp = (mtc_arg_strings){0};
    f->model_f = (model_cli_flags)MODEL_CLI_DEFAULTS;
    f->moe_f = (moe_cli_flags)MOE_CLI_DEFAULTS;
    f->pp_split = (pp_layout_args){0};
    f->compat = (train_compat){0};
}

/* clang-format off */
static mtc_arg TRAIN_ARGS[] = {
        MODEL_SHAPE_ARGS(TF.L, TF.C, TF.NH, TF.F, TF.T), /* model/model_cli.h, as plan's */
        MODEL_CLI_ARGS(TF.model_f), /* the architecture (model/model_cli.h) */
        {"max-position-embeddings", NULL, MTC_ARG_INT, &TF.maxpos, "N",
         "positions (default seq-length)", 0},
        {"micro-batch-size", NULL, MTC_ARG_INT, &TF.mbs, "N", "samples per microbatch (default 4)", 0},
        {"global-batch-size", NULL, MTC_ARG_INT, &TF.gbs, "N",
         "samples per iteration (default micro batch x data-parallel size, as Megatron)", 0},
        {"train-iters", NULL, MTC_ARG_I64, &TF.iters, "N", "iterations (default 100)", 0},
        {"lr", NULL, MTC_ARG_DOUBLE, &TF.lr, "X", "peak learning rate (default 1e-3)", 0},
        {"min-lr", NULL, MTC_ARG_DOUBLE, &TF.min_lr, "X", "final learning rate (default 0)", 0},
        {"lr-warmup-iters", NULL, MTC_ARG_I64, &TF.warmup, "N",
         "linear warm-up iterations (default 0)", 0},
        {"lr-decay-iters", NULL, MTC_ARG_I64, &TF.decay, "N", "decay iterations (default train-iters)",
         0},
        {"lr-decay-style", NULL, MTC_ARG_STRING, &TF.style, "S",
         "constant|linear|cosine|inverse-square-root|WSD (default linear)", 0},
        {"weight-decay", NULL, MTC_ARG_DOUBLE, &TF.wd, "X",
         "AdamW weight decay on 2-D weights (default 0.01)", 0},
        {"clip-grad", NULL, MTC_ARG_DOUBLE, &TF.clip, "X",
         "global gradient-norm clip, 0 = off (default 1.0)", 0},
        {"adam-beta1", NULL, MTC_ARG_DOUBLE, &TF.b1, "X", "(default 0.9)", 0},
        {"adam-beta2", NULL, MTC_ARG_DOUBLE, &TF.b2, "X", "(default 0.999)", 0},
        {"adam-eps", NULL, MTC_ARG_DOUBLE, &TF.eps, "X", "(default 1e-8)", 0},
        {"seed", NULL, MTC_ARG_I64, &TF.seed, "N",
         "initialisation, dropout and data order (default 1234)", 0},
        {"data-path", NULL, MTC_ARG_STRINGS, &TF.data_paths, "PATH",
         "text file or folder, PREFIX of .bin/.idx, llm.c .bin, or Megatron's blend "
         "W1 PREFIX1 W2 PREFIX2 ... (GPTDataset / BlendedDataset sample order)",
         0},
        {"train-data-path", NULL, MTC_ARG_STRINGS, &TF.split_paths[0], "PATH",
         "the training split's own data: a PREFIX or a blend W1 PREFIX1 ... (all of its "
         "documents; excludes --data-path and --split, as Megatron)",
         0},
        {"valid-data-path", NULL, MTC_ARG_STRINGS, &TF.split_paths[1], "PATH",
         "the validation split's own data (as --train-data-path)", 0},
        {"test-data-path", NULL, MTC_ARG_STRINGS, &TF.split_paths[2], "PATH",
         "the test split's own data (as --train-data-path)", 0},
        {"split", NULL, MTC_ARG_STRING, &TF.split, "W,W,W",
         "train,valid,test weights (default 969,30,1)", 0},
        {"vocab-size", NULL, MTC_ARG_INT, &TF.vocab, "N",
         "vocabulary (default: from the data; 50257 with --mock-data)", 0},
        {"make-vocab-size-divisible-by", NULL, MTC_ARG_INT, &TF.divisible, "N",
         "pad the vocabulary to a multiple (default 128)", 0},
        {"mock-data", NULL, MTC_ARG_FLAG, &TF.mock, NULL, "deterministic synthetic tokens", 0},
        {"eval-interval", NULL, MTC_ARG_INT, &TF.eval_interval, "N",
         "iterations between evaluations (default 1000)", 0},
        {"eval-iters", NULL, MTC_ARG_INT, &TF.eval_iters, "N",
         "validation batches per evaluation (default 100)", 0},
        {"log-interval", NULL, MTC_ARG_INT, &TF.log_interval, "N",
         "iterations per log line (default 100)", 0},
        {"hidden-dropout", NULL, MTC_ARG_DOUBLE, &TF.hdrop, "P", "(default 0.1)", 0},
        {"attention-dropout", NULL, MTC_ARG_DOUBLE, &TF.adrop, "P", "(default 0.1)", 0},
        {"world-size", NULL, MTC_ARG_INT, &TF.world, "N",
         "rank-threads (shm backend; under mpirun the MPI size) (default 1)", 0},
        LAYOUT_ARGS(TF.lay), /* the parallel layout (cli/layout_args.h) */
        {"recompute-granularity", NULL, MTC_ARG_STRING, &TF.rc_gran, "S",
         "full: recompute layers from their inputs in backward (bit-identical results); "
         "selective: the core attention (already kept as out + lse only)",
         0},
        {"recompute-method", NULL, MTC_ARG_STRING, &TF.rc_method, "S",
         "uniform (every layer) | block (the first --recompute-num-layers of each chunk)", 0},
        {"recompute-num-layers", NULL, MTC_ARG_INT, &TF.rc_layers, "N",
         "layers per recompute unit (uniform) or recomputed per model chunk (block)", 0},
        {"recompute-modules", NULL, MTC_ARG_STRINGS, &TF.rc_modules, "M...",
         "with selective: core_attn (the default) and layernorm (what mtc always does: "
         "attention keeps no probabilities, norm outputs are rebuilt), mlp (each dense MLP's "
         "forward again in backward), shared_experts (each MoE layer's shared expert again), "
         "mla_up_proj (MLA's up projections and rotations again), moe (each MoE layer again), "
         "moe_act (the experts' activation again; needs --moe-grouped-gemm); comma- or "
         "space-separated",
         0},
        {"check-for-nan-in-loss-and-grad", NULL, MTC_ARG_FLAG, &TF.check_nan, NULL,
         "stop when the loss or gradient norm is NaN or Inf (default on; --no-... skips the step)",
         0},
        {"distributed-timeout-minutes", NULL, MTC_ARG_DOUBLE, &TF.dist_timeout_min, "M",
         "deadline of every collective and point-to-point call, in minutes (default "
         "MTC_COMM_TIMEOUT or 5); a rank that does not arrive ends the job with a report",
         0},
        MOE_CLI_ARGS(TF.moe_f),
        TRAIN_COMPAT_ARGS(TF.compat), /* the example scripts' last flags (cli/train_compat.h) */
        PP_LAYOUT_CLI_ARGS(TF.lay.split),
        {"sequence-parallel", NULL, MTC_ARG_FLAG, &TF.sp, NULL,
         "split layer norm / dropout / residual regions along the sequence over TP", 0},
        {"overlap-grad-reduce", NULL, MTC_ARG_FLAG, &TF.overlap, NULL,
         "launch each gradient bucket's all-reduce during the last backward", 0},
        {"ddp-bucket-size", NULL, MTC_ARG_I64, &TF.bucket, "N",
         "with --overlap-grad-reduce, elements per gradient bucket (default max(4e7, 1e6 x dp)); "
         "as Megatron, one bucket without overlap and on pipeline stages > 0",
         0},
        {"bf16", NULL, MTC_ARG_FLAG, &TF.bf16, NULL,
         "bf16 mixed precision: GEMMs on bf16 values of the fp32 main params with fp32 "
         "accumulation (--bf16-gemm), fp32 main grads, norms, softmax and loss; no loss scaler",
         0},
        {"bf16-gemm", NULL, MTC_ARG_STRING, &TF.bf16_gemm, "E",
         "with --bf16, the GEMM engine: dnnl-bf16 (oneDNN bf16 matmul), fp32 (fp32 GEMMs on "
         "bf16-valued operands: the same products, exact in fp32) or auto (default: the faster "
         "on this CPU, measured at set-up)",
         0},
        {"lm-head-chunk", NULL, MTC_ARG_INT, &TF.head_chunk, "N",
         "tokens per chunk of the fused LM head and loss (default 1024: full-rate GEMMs; "
         "smaller keeps fewer logits, chunk x vocabulary / tp floats)",
         0},
        {"fp16", NULL, MTC_ARG_FLAG, &TF.fp16, NULL,
         "fp16 mixed precision: fp16-rounded params and activations (fp32 arithmetic), fp32 "
         "main params, the dynamic loss scaler",
         0},
        {"accumulate-allreduce-grads-in-fp32", NULL, MTC_ARG_FLAG, &TF.acc_fp32, NULL,
         "main grads in fp32 (on: mtc always accumulates and reduces them in fp32)", 0},
        TP_FP8_CLI_ARGS(TF.fp8_f), /* --fp8-format, --fp8-recipe, ... (tp/fp8_cli.h) */
        {"grad-reduce-in-bf16", NULL, MTC_ARG_FLAG, &TF.grad_bf16, NULL,
         "with --bf16, reduce gradients over data parallelism in bf16 (accumulation stays fp32)",
         0},
        {"loss-scale", NULL, MTC_ARG_DOUBLE, &TF.loss_scale, "S",
         "a constant loss scale (default: dynamic with --fp16, none with --bf16)", 0},
        {"initial-loss-scale", NULL, MTC_ARG_DOUBLE, &TF.init_ls, "S",
         "the dynamic scaler's first scale (default 2^32)", 0},
        {"min-loss-scale", NULL, MTC_ARG_DOUBLE, &TF.min_ls, "S",
         "the dynamic scaler's floor (default 1)", 0},
        {"loss-scale-window", NULL, MTC_ARG_INT, &TF.ls_window, "N",
         "iterations without inf/NaN before the scale doubles (default 1000)", 0},
        {"hysteresis", NULL, MTC_ARG_INT, &TF.hyst, "N",
         "inf/NaN iterations before the scale halves (default 2)", 0},
        {"use-distributed-optimizer", NULL, MTC_ARG_FLAG, &TF.distopt, NULL,
         "shard AdamW state over data-parallel ranks: reduce-scatter gradients per bucket, update "
         "the owned shard, all-gather params",
         0},
        {"overlap-param-gather", NULL, MTC_ARG_FLAG, &TF.overlap_pg, NULL,
         "leave the param all-gathers running until the next pass needs the params (distributed "
         "optimizer)",
         0},
        LAYOUT_ARG_ND(TF.lay),
        {"pad-buckets-for-high-nccl-busbw", NULL, MTC_ARG_FLAG, &TF.pad_high, NULL,
         "pad buckets to lcm(dp, 128, 65536) (distributed optimizer)", 0},
        {"print-layout", NULL, MTC_ARG_FLAG, &TF.print_layout, NULL,
         "print the last rank's gradient buffer layout (as `mtc layout`; one per model chunk with "
         "--vpp) before training",
         0},
        /* Megatron's schedule flags (optim/optim.h has the formulas) */
        {"train-samples", NULL, MTC_ARG_I64, &TF.sch_train_samples, "N",
         "sample-based training: N samples (train-iters = N / global batch); excludes "
         "--train-iters",
         0},
        {"lr-warmup-fraction", NULL, MTC_ARG_DOUBLE, &TF.sch_warmup_fraction, "F",
         "warm-up over this fraction of the decay steps (instead of --lr-warmup-iters/-samples)",
         0},
        {"lr-warmup-samples", NULL, MTC_ARG_I64, &TF.sch_warmup_samples, "N",
         "sample-based: linear warm-up samples (default 0)", 0},
        {"lr-decay-samples", NULL, MTC_ARG_I64, &TF.sch_decay_samples, "N",
         "sample-based: decay samples (default train-samples)", 0},
        {"lr-warmup-init", NULL, MTC_ARG_DOUBLE, &TF.sch_init_lr, "X",
         "learning rate at the start of warm-up (default 0)", 0},
        {"lr-wsd-decay-style", NULL, MTC_ARG_STRING, &TF.sch_wsd_style, "S",
         "WSD's annealing: exponential|linear|cosine|minus_sqrt (default exponential)", 0},
        {"lr-wsd-decay-iters", NULL, MTC_ARG_I64, &TF.sch_wsd_iters, "N",
         "WSD: iterations of annealing at the end of the decay", 0},
        {"lr-wsd-decay-samples", NULL, MTC_ARG_I64, &TF.sch_wsd_samples, "N",
         "WSD, sample-based: samples of annealing at the end of the decay", 0},
        {"start-weight-decay", NULL, MTC_ARG_DOUBLE, &TF.sch_start_wd, "X",
         "weight decay at the start (with --weight-decay-incr-style linear|cosine)", 0},
        {"end-weight-decay", NULL, MTC_ARG_DOUBLE, &TF.sch_end_wd, "X",
         "weight decay at the end of training (with --weight-decay-incr-style linear|cosine)", 0},
        {"weight-decay-incr-style", NULL, MTC_ARG_STRING, &TF.sch_wd_style, "S",
         "constant|linear|cosine (default constant: --weight-decay throughout)", 0},
        {"exit-interval", NULL, MTC_ARG_I64, &TF.sch_exit_interval, "N",
         "stop (and save, with --save) after the first iteration divisible by N", 0},
        {"exit-duration-in-mins", NULL, MTC_ARG_DOUBLE, &TF.sch_exit_mins, "M",
         "stop (and save, with --save) once training has run M minutes", 0},
        /* Megatron's tokenizer flags */
        {"tokenizer-type", NULL, MTC_ARG_STRING, &TF.tokenizer, "S",
         "GPT2BPETokenizer|HuggingFaceTokenizer|NullTokenizer|ByteLevelTokenizer|"
         "CharLevelTokenizer|SentencePieceTokenizer|GPTSentencePieceTokenizer|Llama2Tokenizer|"
         "TikTokenizer (default CharLevelTokenizer for text; for a Megatron dataset the "
         "PREFIX.tokenizer beside it)",
         0},
        {"vocab-file", NULL, MTC_ARG_STRING, &TF.tok_opts.vocab_file, "FILE",
         "GPT2BPETokenizer: vocab.json (GPT-2's encoder.json)", 0},
        {"merge-file", NULL, MTC_ARG_STRING, &TF.tok_opts.merge_file, "FILE",
         "GPT2BPETokenizer: merges.txt (GPT-2's vocab.bpe)", 0},
        {"tokenizer-model", NULL, MTC_ARG_STRING, &TF.tok_opts.tokenizer_model, "FILE",
         "HuggingFaceTokenizer: tokenizer.json (byte-level BPE); SentencePiece kinds: "
         "tokenizer.model; TikTokenizer: its JSON vocabulary",
         0},
        DATA_TOK_CLI_ARGS(TF.tok_opts, TF.tok_special), /* SentencePiece, tiktoken (data/tok_cli.h) */
#define NOOP_STR(name, var)                                                                        \
    {name, NULL, MTC_ARG_STRING, &var, "S", "accepted for Megatron scripts; no effect on CPU", 0}
#define NOOP_FLAG(name, var)                                                                       \
    { name, NULL, MTC_ARG_FLAG, &var, NULL, "accepted for Megatron scripts; no effect on CPU", 0 }
        NOOP_STR("attention-backend", TF.noop_s[0]),
        NOOP_STR("transformer-impl", TF.noop_s[1]),
        NOOP_STR("distributed-backend", TF.noop_s[2]),
        NOOP_FLAG("use-mcore-models", TF.noop_f[0]),
        NOOP_FLAG("no-masked-softmax-fusion", TF.noop_f[1]),
        NOOP_FLAG("no-bias-gelu-fusion", TF.noop_f[2]),
        NOOP_FLAG("no-bias-swiglu-fusion", TF.noop_f[3]),
        NOOP_FLAG("no-bias-dropout-fusion", TF.noop_f[4]),
        NOOP_FLAG("no-rope-fusion", TF.noop_f[5]),
        NOOP_FLAG("use-flash-attn", TF.noop_f[6]),
        NOOP_FLAG("no-gradient-accumulation-fusion", TF.noop_f[7]),
        NOOP_FLAG("no-async-tensor-model-parallel-allreduce", TF.noop_f[8]),
        NOOP_FLAG("use-cpu-initialization", TF.noop_f[9]),
        NOOP_FLAG("tp-comm-overlap", TF.noop_f[10]),
        MTC_TB_CLI_ARGS(TF.tb_flags),
        MTC_FSDP_CLI_ARGS(TF.fsdp_flags),
        /* accepted with a note saying what each would do (the "not here:" help) */
        {"data-cache-path", NULL, MTC_ARG_STRING, &TF.noop_s2[1], "DIR",
         "not here: Megatron saves the GPTDataset's document, sample and shuffle indices there "
         "(.npy) to reuse; mtc builds them in memory at start and keeps no cache",
         0},
        {"ckpt-format", NULL, MTC_ARG_STRING, &TF.noop_s2[2], "S",
         "not here: Megatron's checkpoint format (torch_dist, torch, ...); mtc writes its own "
         "resharding directory format (iter_N/metadata.json + __R.distcp) whatever is given",
         0},
        {"num-workers", NULL, MTC_ARG_STRING, &TF.noop_s2[4], "N",
         "not here: Megatron's DataLoader worker processes; mtc reads each sample from the "
         "memory-mapped dataset on the training thread",
         0},
        NOOP_STR("empty-unused-memory-level", TF.noop_s2[5]),
        NOOP_FLAG("cross-entropy-loss-fusion", TF.noop_f2[0]),
        NOOP_FLAG("manual-gc", TF.noop_f2[1]),
        NOOP_FLAG("no-create-attention-mask-in-dataloader", TF.noop_f2[2]),
        NOOP_FLAG("no-mmap-bin-files", TF.noop_f2[3]),
        NOOP_FLAG("log-throughput", TF.noop_f2[4]),
        /* flags that would change results and are not implemented: refused after parsing */
        {"apply-layernorm-1p", NULL, MTC_ARG_FLAG, &TF.ln1p, NULL,
         "Megatron's zero-centred norm weight (1 + w): accepted, the same training here (norm "
         "weights take no weight decay and Adam is shift-invariant, so w trains as gamma - 1 "
         "would); mtc keeps gamma itself",
         0},
        {"calculate-per-token-loss", NULL, MTC_ARG_FLAG, &TF.per_token_loss, NULL,
         "the loss as the sum over tokens / the tokens of the global batch (what mtc computes "
         "always: every token counts, so Megatron's per-microbatch mean is the same number)",
         0},
        {"decoupled-lr", NULL, MTC_ARG_DOUBLE, &TF.decoupled_lr, "X",
         "max learning rate of the word embedding and output layer (same schedule)", 0},
        {"decoupled-min-lr", NULL, MTC_ARG_DOUBLE, &TF.decoupled_min_lr, "X",
         "their min learning rate (default --min-lr)", 0},
        {"step-batch-size-schedule", NULL, MTC_ARG_STRING, &TF.bs_text, "S",
         "Megatron's step-wise global batch \"THRESHOLD:BS ...\": thresholds in tokens (K M B T "
         "suffixes), the first 0; each iteration runs the batch of the last threshold <= the "
         "tokens consumed",
         0},
        {"rampup-batch-size", NULL, MTC_ARG_STRINGS, &TF.ramp, "START INCR SAMPLES",
         "deprecated and ignored, as in Megatron (a warning says so): use "
         "--step-batch-size-schedule",
         0},
#undef NOOP_STR
#undef NOOP_FLAG
        {"threads", NULL, MTC_ARG_INT, &TF.threads, "N", "threads per rank (default cores / ranks)",
         0},
        {"metrics", NULL, MTC_ARG_STRING, &TF.metrics, "FILE", "one JSON object per logged iteration",
         0},
        {"save", NULL, MTC_ARG_STRING, &TF.save, "DIR",
         "checkpoint directory: DIR/iter_NNNNNNN/ (full training state, every rank writes its "
         "pieces) at the end and every --save-interval iterations",
         0},
        {"save-interval", NULL, MTC_ARG_INT, &TF.save_interval, "N",
         "iterations between checkpoints (default: at the end only)", 0},
        {"async-save", NULL, MTC_ARG_FLAG, &TF.async_save, NULL,
         "write checkpoints in the background from a snapshot of the state while training "
         "goes on (the next save and the end of the run wait for it)",
         0},
        {"load", NULL, MTC_ARG_STRING, &TF.load, "DIR",
         "resume from DIR's latest checkpoint (any layout; a missing or empty DIR starts fresh); "
         "a single-file model gives the weights only",
         0},
        {"ckpt-step", NULL, MTC_ARG_I64, &TF.ckpt_step, "N", "load iteration N instead of the latest",
         0},
        {"no-load-optim", NULL, MTC_ARG_FLAG, &TF.no_load_optim, NULL,
         "do not load the optimizer state (fresh AdamW moments)", 0},
        {"no-load-rng", NULL, MTC_ARG_FLAG, &TF.no_load_rng, NULL,
         "do not take the random seed from the checkpoint (use --seed)", 0},
        {"override-opt-param-scheduler", NULL, MTC_ARG_FLAG, &TF.override_sched, NULL,
         "take the learning-rate schedule from these flags, not the checkpoint (which must "
         "otherwise match)",
         0},
        {"finetune", NULL, MTC_ARG_FLAG, &TF.finetune, NULL,
         "load the weights only: iteration 0, no optimizer state, --seed", 0},
        {"profile", NULL, MTC_ARG_FLAG, &TF.profile, NULL,
         "write a Chrome/Perfetto trace of every rank for iterations (start, end] to "
         "--profile-dir/trace.json",
         0},
        {"profile-step-start", NULL, MTC_ARG_I64, &TF.prof_start, "N",
         "traced iterations begin after N completed ones (default 10)", 0},
        {"profile-step-end", NULL, MTC_ARG_I64, &TF.prof_end, "N",
         "traced iterations end with iteration N (default 12)", 0},
        {"profile-dir", NULL, MTC_ARG_STRING, &TF.prof_dir, "DIR",
         "where --profile writes trace.json (default .; needs --profile)", 0},
        {"trace", NULL, MTC_ARG_STRING, &TF.trace, "FILE",
         "the trace to FILE (every iteration unless --profile-step-start/-end say)", 0},
        {"trace-buffer-mb", NULL, MTC_ARG_DOUBLE, &TF.trace_mb, "MB",
         "per-rank bound of the trace in memory (default 256): later events are dropped and "
         "counted, with a warning",
         0},
        {"timing-log-level", NULL, MTC_ARG_INT, &TF.timing_level, "N",
         "0: no timers; 1: forward-backward, grads sync, optimizer; 2: also per microbatch and "
         "pipeline p2p (default 0)",
         0},
        {"timing-log-option", NULL, MTC_ARG_STRING, &TF.timing_opt, "S",
         "max|minmax|all: what the timer block shows across ranks (default minmax)", 0},
        {"peak-tflops", NULL, MTC_ARG_DOUBLE, &TF.peak_tflops, "X",
         "this machine's peak TFLOP/s per rank: the log line adds model FLOPs utilization", 0},
};
/* clang-format on */

train_flags *train_args_table(mtc_arg **args, int *nargs) {
    train_flags_defaults(&TF);
    *nargs = (int)(sizeof TRAIN_ARGS / sizeof TRAIN_ARGS[0]);
    for (int i = 0; i < *nargs; i++)
        TRAIN_ARGS[i].seen = 0;
    *args = TRAIN_ARGS;
    return &TF;
}
