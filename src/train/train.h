/* train/train.h - the training loop on any layout of the grid (tp, cp, dp,
 * pp with vpp model chunks per rank, ep, etp; serial = world 1): ranks
 * started by mtc_launch (shm rank-threads, or MPI ranks under mpirun), the
 * grid built from cfg->grid (grid/), each model chunk given the grid and its
 * layers (model/, which derives the TP, CP and MoE contexts in tp/, cp/,
 * moe/), its gradient buffers from dp/; then per step: data -> microbatches
 * (Megatron's data_sample_index, this DP rank's share) -> forward/backward
 * (through pp/executor.h with pp > 1) -> the buffers reduced in buckets,
 * overlapped with the last microbatch's backward (dp/ddp.h) -> the
 * registry's other reductions over the grid's groups
 * (mtc_grid_reduce_comm) -> global norm -> clip -> AdamW (optim/, or the
 * distributed optimizer's shard, dp/distopt.h) -> log / eval / metrics from
 * the last rank (the loss owner, as Megatron); checkpoints every
 * --save-interval and at the end (train_ckpt.c: each rank writes its own
 * pieces, no gather).
 *
 * Loss is Megatron's: mean over every token of the global batch (each
 * token's loss scaled by 1/(global_batch*T)), gradients accumulated over
 * microbatches. Log lines go to `out` in Megatron's format (conventions.md
 * 2.8); FLOPs by mtc_model_flops (Megatron's formula).
 * Relies on model/, optim/, data/, comm/, grid/, dp/; the caller (cli/)
 * validates flags and opens the data source (shared read-only by the
 * rank-threads). */
#ifndef MTC_TRAIN_TRAIN_H
#define MTC_TRAIN_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "core/result.h"
#include "data/data.h"
#include "grid/grid.h"
#include "model/model.h"
#include "optim/optim.h"
#include "pp/layout.h"
#include "pp/schedule.h"
#include "train/batch_schedule.h"
#include "train/tensorboard.h"

typedef struct {
    mtc_model_config model;
    int micro_batch, global_batch;
    /* --step-batch-size-schedule (NULL: global_batch every iteration): the
     * batch of each iteration from the samples consumed before it (the
     * microbatch count follows); global_batch is then Megatron's
     * args.global_batch_size, the evaluation batch */
    const mtc_batch_schedule *batch_schedule;
    int64_t train_iters;
    mtc_lr_schedule lr;
    mtc_adamw_config adam;
    float clip_grad;
    uint64_t seed;
    int log_interval, eval_interval, eval_iters;
    int threads;
    const char *metrics_path; /* NULL = none */
    const char *save_path;    /* checkpoint directory (ckpt/dist.h); NULL = none */
    const char *load_path;    /* checkpoint directory or single-file model; NULL = fresh init */
    int save_interval;        /* --save-interval N: a checkpoint every N iterations (0: at the
                                 end only) */
    int64_t ckpt_step;        /* --ckpt-step N: load iteration N (-1: the tracker's) */
    int load_weights_file;    /* load_path is a single-file model (weights only, mtc_ckpt_load) */
    int no_load_optim;        /* --no-load-optim: fresh AdamW moments */
    int finetune;             /* --finetune: weights only, iteration 0 */
    int async_save;           /* --async-save: shards written by a thread per rank from a
                                 snapshot; committed once every rank's writer finished */
    const char *tokenizer;    /* serialized tokenizer stored with --save */
    int quiet;                /* no banner */
    /* ---- parallel layout ---- */
    int world_size; /* shm rank-threads (ignored under mpirun); 0/1 = serial */
    /* tp, pp, cp (with --hierarchical-context-parallel-sizes), ep, etp, vpp
     * and the distributed-optimizer instances: the grid's configuration as
     * the command line gave it (mtc_grid_config_default, then the flags;
     * its world_size is ignored: the run's world is world_size above, or
     * the MPI size) */
    mtc_grid_config grid;
    mtc_model_parallel parallel; /* the strategies' own options (--sequence-parallel,
                                    --cp-comm-type): handed to each chunk unread */
    int decoupled;               /* --decoupled-lr given */
    double decoupled_lr;         /* its max lr of the word embedding and output layer */
    double decoupled_min_lr;     /* --decoupled-min-lr (< 0: --min-lr) */
    int recompute_full;          /* --recompute-granularity full */
    int no_check_nan;            /* --no-check-for-nan-in-loss-and-grad: skip such steps instead */
    int log_params_norm;         /* --log-params-norm: "params norm" in the log line */
    int log_num_zeros;           /* --log-num-zeros-in-grad: "num zeros" in the log line */
    int recompute_block;         /* --recompute-method block (else uniform) */
    int recompute_num_layers;    /* --recompute-num-layers */
    int recompute_mlp;           /* --recompute-granularity selective --recompute-modules mlp */
    int recompute_mla_up;        /* ... mla_up_proj (model/mla.h) */
    int head_chunk;              /* --lm-head-chunk: tokens per LM-head chunk (0: 128) */
    int recompute_shared;        /* ... --recompute-modules shared_experts */
    int recompute_moe;           /* ... moe (each MoE layer again in backward) */
    int recompute_moe_act;       /* ... moe_act (the experts' activation again) */
    int microbatch_group_size;   /* --microbatch-group-size-per-virtual-pipeline-stage (0 = pp) */
    pp_layout_args pp_split;     /* uneven split / layout string (pp/layout.h; 0 = even) */
    int overlap_grad_reduce;     /* --overlap-grad-reduce */
    int64_t ddp_bucket_size;     /* --ddp-bucket-size in elements (0 = Megatron's default; used only
                                    with overlap) */
    int backend;                 /* mtc_backend_kind_t (0 = auto) */
    /* the launch's settings as the command line and its environment gave them
     * (--distributed-timeout-minutes x 60 as timeout_s, the watchdog's abort
     * hook, algo_spec, shm_tuning; comm/comm.h); mtc_train_run sets backend,
     * world_size and pin_threads */
    mtc_launch_opts launch;
    long ckpt_fault_after; /* tests: the checkpoint writer dies at its k-th write point (0: no) */
    int progress;          /* mtc_progress_mode of the set-up phases' reporter (core/progress.h;
                              the CLI's MTC_PROGRESS) */
    const nn_pool_opts *pool_opts; /* each rank's nn pool (MTC_NN_SPIN_US); NULL: nn's defaults */
    /* ---- distributed optimizer (dp/distopt.h; train/train_step.c) ---- */
    int use_distributed_optimizer; /* --use-distributed-optimizer: reduce-scatter grads into
                                      the owned shard, AdamW there, all-gather params */
    int overlap_param_gather;      /* --overlap-param-gather: the all-gathers run until the
                                      next step's forward needs the params */
    int pad_high_busbw;            /* --pad-buckets-for-high-nccl-busbw */
    int fsdp_strategy;             /* --use-megatron-fsdp: mtc_fsdp_strategy (dp/fsdp.h), 0 = off */
    int64_t fsdp_unit_size;        /* --suggested-communication-unit-size (0: one unit per layer) */
    int fsdp_double_buffer;        /* --fsdp-double-buffer: mtc_fsdp_set_double_buffer */
    int fsdp_outer_optim;          /* --outer-dp-sharding-strategy optim: HFSDP */
    int fsdp_meta_init;            /* --init-model-with-meta-device: a rank draws only its shards */
    int print_layout; /* --print-layout: the last rank's buffer layouts first (per chunk) */
    /* ---- mixed precision (docs/mixed-precision.md) ---- */
    int bf16;                  /* --bf16: bf16 compute copies, fp32 main params and grads */
    int fp16;                  /* --fp16: fp16-rounded compute copies, loss scaling */
    int grad_reduce_in_bf16;   /* --grad-reduce-in-bf16: DP reductions in bf16 */
    int bf16_gemm;             /* --bf16-gemm: nn_bf16_gemm (0 auto: measured at set-up) */
    double loss_scale;         /* --loss-scale S: constant scale (0: dynamic with --fp16) */
    double initial_loss_scale; /* --initial-loss-scale (0: 2^32) */
    double min_loss_scale;     /* --min-loss-scale (0: 1) */
    int loss_scale_window;     /* --loss-scale-window (0: 1000) */
    int hysteresis;            /* --hysteresis (0: 2) */
    float *loss_scales_out;    /* (train_iters) the loss scale each iteration ran with (tests) */

    /* --fp8-format (tp/fp8_linear.h, train/train_fp8.c); NULL: none */
    const struct tp_fp8_config *fp8;
    /* ---- observability (train/train_obs.c) ---- */
    const char *trace_path;     /* NULL = none: Chrome Trace Event JSON of every rank */
    int64_t profile_step_start; /* traced: iterations start < it <= end (Megatron's */
    int64_t profile_step_end;   /*   --profile-step-start/-end count completed steps) */
    double trace_buffer_mb;     /* --trace-buffer-mb: per-rank bound of trace text (0: 256) */
    int timing_log_level;       /* --timing-log-level 0 (none), 1, 2 (per microbatch, p2p) */
    int timing_log_option;      /* --timing-log-option 0 max, 1 minmax, 2 all */
    double peak_tflops;         /* > 0: MFU in the log line against this peak per rank;
                                   0: the cached machine peak (core/peak.h) / ranks on it */
    const char *peak_source;    /* what the banner says the peak is (NULL: --peak-tflops);
                                   with peak_tflops 0: why the cached one was not taken */
    mtc_tb_flags tensorboard;   /* --tensorboard-dir and its flags (train/train_tb.c) */
    /* ---- Megatron's exits ---- */
    int64_t exit_interval;     /* --exit-interval N: stop after an iteration divisible by N */
    double exit_duration_mins; /* --exit-duration-in-mins: stop once training has run this
                                  long (every rank decides alike: a MAX all-reduce) */
    /* ---- results for tests (written by the last rank; NULL = none) ---- */
    double *losses_out;            /* (train_iters) per-iteration lm loss */
    double *grad_norms_out;        /* (train_iters) */
    float *params_out;             /* (global parameter count) final weights, serial layout */
    size_t *optim_state_bytes_out; /* the last rank's AdamW state (m + v) bytes */
    pp_op *trace_out;              /* (world, 2*M*vpp) the last training iteration's executed
                                      compute order of every world rank (pp > 1), row = world rank */
    int *ntrace_out;               /* (world) its length per rank */
    double *comm_ms_out;           /* ms the last rank spent in collectives: all of them in builds
                                      that time every call (mtc_commtimed), else the step's
                                      explicit ones (DP, SP, loss, norm) */
} mtc_train_config;

/* Bounds on user numbers, checked before any product (64-bit) is formed:
 * samples per microbatch, and tokens per microbatch (micro-batch x seq). */
#define MTC_TRAIN_MAX_MICRO_BATCH (1 << 20)
#define MTC_TRAIN_MAX_MICRO_TOKENS (1 << 24)
/* Samples a run counts (train-iters x global batch, the schedule's
 * samples): what a double holds exactly, 2^53. */
#define MTC_TRAIN_MAX_SAMPLES (INT64_C(1) << 53)

/* Checks the parts the model does not (batch sizes, intervals, schedule,
 * the layout: grid rules and the model's divisibility by tp). `world` is
 * the world size the run will have (cfg->world_size, or the MPI size). */
mtc_result_t mtc_train_validate(const mtc_train_config *cfg);
mtc_result_t mtc_train_validate_layout(const mtc_train_config *cfg, int world);
/* Runs the whole training; prints to out. Returns the first error. */
mtc_result_t mtc_train_run(const mtc_train_config *cfg, const data_source *src, FILE *out);

#endif
