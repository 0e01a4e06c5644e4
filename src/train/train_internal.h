/* train/train_internal.h - one rank's training state, shared by the files
 * of train/ (not a public header):
 *   train_setup.c  grid, model chunks (each with its DDP and optimizer),
 *                  buffers, load / save / gather, the layout printer;
 *   train_micro.c  batches, activation slots, the pipeline callbacks, the
 *                  microbatches of one global batch, evaluation;
 *   train_step.c   finalize_model_grads, the gradient norm, the optimizer.
 *   train_ckpt.c   directory checkpoints: save and load of the full state.
 *   train.c        the loop, logging and the launch. */
#ifndef MTC_TRAIN_INTERNAL_H
#define MTC_TRAIN_INTERNAL_H

#include "ckpt/dist.h"
#include "comm/comm.h"
#include "core/progress.h"
#include "dp/ddp.h"
#include "dp/distopt.h"
#include "grid/grid.h"
#include "optim/grad_scaler.h"
#include "optim/optim.h"
#include "pp/executor.h"
#include "train/train.h"

/* The gradient buffers of a chunk, as Megatron builds them: the dense one
 * (every parameter without expert parallelism) and, with EP > 1, the
 * expert-parallel one (the chunk's local experts, after the dense buffer in
 * the model's flat buffers). Finalize, the norm, clipping and the
 * optimizer step loop over them. */
enum { TRAIN_GBUF_DENSE = 0, TRAIN_GBUF_EXPERT, TRAIN_GBUF_MAX };

/* One chunk's buffer of one kind. */
typedef struct {
    mtc_ddp *ddp;            /* its reduction (NULL: the chunk has no such params) */
    mtc_distopt *dopt;       /* --use-distributed-optimizer: AdamW over the owned shard */
    mtc_grad_norm_plan norm; /* what this rank counts of it in the global norm */
    struct mtc_fsdp *fsdp;   /* Megatron-FSDP optim_grads / optim_grads_params (dp/fsdp.h) */

    mtc_grad_norm_plan pnorm; /* --log-params-norm: the norm's pieces of the (main) params */
} train_gbuf;

/* One model chunk (virtual pipeline stage c*pp + pp_rank) and everything
 * that is per chunk in Megatron: its gradient buffers (DDP, optimizer
 * shard) and its optimizer state. */
typedef struct {
    mtc_model *model;
    train_gbuf buf[TRAIN_GBUF_MAX]; /* by kind (train_rank's nbuf of them) */
    mtc_adamw opt;  /* plain data parallelism: AdamW over the model's whole buffer */
    int *slot_of;   /* (nmb) activation slot of each microbatch, -1: none */
    int *slot_busy; /* (model->nslots) */
} train_chunk;

/* Megatron's timers (train_obs.c has their names and log levels). */
typedef enum {
    TRAIN_T_FORWARD_BACKWARD = 0,
    TRAIN_T_FORWARD_COMPUTE,
    TRAIN_T_BACKWARD_COMPUTE,
    TRAIN_T_BATCH_GENERATOR,
    TRAIN_T_P2P_FIRST, /* PP_P2P_KIND_COUNT pipeline transfer timers (pp/executor.h) */
    TRAIN_T_ALL_GRADS_SYNC = TRAIN_T_P2P_FIRST + PP_P2P_KIND_COUNT,
    TRAIN_T_LAYERNORM_GRADS,
    TRAIN_T_EMBEDDING_GRADS,
    TRAIN_T_PARAMS_ALL_GATHER,
    TRAIN_T_OPTIMIZER_CLIP,
    TRAIN_T_OPTIMIZER_INNER,
    TRAIN_T_OPTIMIZER,
    TRAIN_T_LOSS_REDUCE, /* the logged loss summed over DP: in the trace, not in the block */
    TRAIN_T_COUNT
} train_timer;

/* What the rank saw of itself: timers (always), the trace recorder (NULL
 * without --trace/--profile/--metrics). */
typedef struct {
    mtc_comm_t world;
    struct mtc_trace *trace;
    uint64_t timer_ns[TRAIN_T_COUNT]; /* since the last log */
    struct mtc_tb *tb;                /* --tensorboard-dir: the last rank's writer, else NULL */
} train_obs;

/* One rank's state. */
typedef struct {
    const mtc_train_config *cfg;
    const data_source *src;
    mtc_grid_t grid;
    mtc_comm_t world;               /* every rank (checkpoint barriers) */
    mtc_ckpt_write_opts ckpt_write; /* the run's checkpoint writers' (the shared fault counter) */
    int dp_size, dp_rank, nmb;      /* nmb: microbatches of the running pass */
    int nmb_max;                    /* what the buffers hold (every batch the run can have) */
    int64_t cur_batch;              /* global batch of the running pass (nmb x B x dp) */
    double sched_n;                 /* Megatron's scheduler num_steps: samples of the steps taken */
    int T_rank;                     /* positions per sample on this rank (mtc_model_seq_per_rank) */
    const int *pos;                 /* (T_rank) their global positions (mtc_model_positions of chunk
                                       0; NULL: 0..T-1) */
    int pp_size, pp_rank;
    int world_rank;
    pp_executor_t ex; /* NULL when pp == 1; the one for nmb microbatches */
    pp_executor_t ex_of[MTC_BATCH_SCHEDULE_MAX + 1]; /* executors made so far, by count */
    int ex_nmb[MTC_BATCH_SCHEDULE_MAX + 1], nex;
    int vpp;                 /* model chunks on this rank (1 without interleaving) */
    train_chunk *chunks;     /* (vpp) */
    int64_t step;            /* optimizer steps taken: the LR schedule and the log read it */
    int64_t start_iteration; /* iterations done before this run (a loaded checkpoint's) */
    uint64_t start_consumed; /* samples consumed before this run */
    int64_t iteration;       /* iterations done so far (the loop's) */
    uint64_t consumed;       /* samples consumed so far */
    int64_t last_saved;      /* iteration of the last checkpoint saved by this run, -1 none */
    size_t msg_count;        /* floats of one stage-to-stage message */
    int nbuf;                /* kinds of gradient buffer: 1, 2 with EP > 1 */
    mtc_ddp_kind gbuf[TRAIN_GBUF_MAX]; /* their groups (dp/groups.c; every rank has every kind
                                          of its run, with or without params of it: the norm's
                                          sums are collective) */
    /* the running pass (read by the microbatch callbacks) */
    int64_t cur_it;
    int cur_train;
    double mb_loss_sum;
    double mtp_loss[MTC_MTP_MAX_DEPTHS];     /* the last step's "mtp_k loss" (model/mtp.h) */
    double mtp_loss_sum[MTC_MTP_MAX_DEPTHS]; /* summed over the advanced iterations since the log */
    nn_pool *pool;
    int *buf;              /* (T+1) one sample */
    int *tokens, *targets; /* (nmb, B, T_rank) this data rank's microbatches, its positions */
    float *red_buf;        /* packed gradients of one reduction group (finalize_grads) */
    uint64_t valid_consumed;
    uint64_t comm_ns;  /* time in the step's explicit collectives */
    uint64_t setup_ns; /* train_setup: buffers allocated, parameters initialised */
    struct train_ckpt_pending *ckpt_pending; /* --async-save: the save being written */
    mtc_progress progress; /* set-up, load and save phases on stderr (rank 0; off elsewhere) */
    train_obs obs;
    /* --fp16's loss scaler (grad_scaler.h); loss_scale = its scale, 1 without */
    int use_scaler;
    mtc_grad_scaler scaler;
    float loss_scale;
    int scaler_skipped; /* the last step found inf/NaN gradients and was skipped */
    /* --bf16: the GEMM engine (nn_bf16_gemm, never AUTO once set up) and, when
     * measured, each engine's rate in GFLOP/s on the model's widest shape */
    int bf16_gemm;
    double bf16_gf[2];      /* oneDNN bf16, fp32 (0: not measured) */
    int bf16_cached;        /* bf16_gf read from the machine's cache */
    int bf16_shape[3];      /* the measured GEMM's M, N, K */
    double fp8_log[5];      /* train_fp8.c, since the last log: clipped inputs, weights, gradients;
                               scale_inv min, max */
    double fp8_pg_log[2];   /* --fp8-param-gather since the last log: this rank's gather and
                               amax bytes, and what a bf16 gather would have moved */
    const char *fp8_pg_off; /* --fp8-param-gather given but the gather stays bf16: why */

    double params_norm; /* --log-params-norm: after the last step (train_params_norm) */
    double num_zeros;   /* --log-num-zeros-in-grad: the last step's count, -1: none (skipped) */
} train_rank;

/* The TP rank (of the grid) and chunk 0's model: what the banner reads. */
static inline int train_tp_rank(const train_rank *x) { return x->chunks[0].model->tp_rank; }

/* The group the dense gradients are reduced over (every rank holding the
 * same dense parameters; NULL when alone): the logged loss's sum and the
 * checkpoint's replicas. */
static inline mtc_comm_t train_replicas(const train_rank *x) {
    return x->gbuf[TRAIN_GBUF_DENSE].dp;
}

/* Some kind of gradient buffer is reduced over more than this rank. */
static inline int train_reduces(const train_rank *x) {
    for (int b = 0; b < x->nbuf; b++)
        if (x->gbuf[b].dp) return 1;
    return 0;
}

/* The global batch of the iteration after `consumed` samples. */
static inline int64_t train_batch_at(const mtc_train_config *c, uint64_t consumed) {
    return c->batch_schedule ? mtc_batch_schedule_at(c->batch_schedule, consumed) : c->global_batch;
}

/* Megatron's scheduler num_steps (samples when the schedule counts them,
 * else optimizer steps): what the learning rate and weight decay read. */
static inline double train_sched_steps(const train_rank *x) {
    return x->cfg->lr.step_samples > 0 ? x->sched_n : (double)x->step;
}

/* train_setup.c */
/* out: the last rank's log (NULL elsewhere). */
mtc_result_t train_setup(train_rank *x, mtc_comm_t world, int threads, FILE *out);
/* This rank's buffer bytes summed over its model chunks; returns the
 * activation arena bytes (all chunks' in-flight slots). */
size_t train_memory(const train_rank *x, mtc_dp_memory *mem);
void train_teardown(train_rank *x);
/* The running pass has `batch` samples (nmb = batch / (B x dp)): with pp > 1
 * the executor of that many microbatches (made on first use, collective over
 * PIPELINE_MODEL_PARALLEL_GROUP: set-up calls it for every batch the run
 * will have, so in the step loop it only picks one). */
mtc_result_t train_set_batch(train_rank *x, int64_t batch);
/* The --fp16 / --loss-scale scaler (use_scaler, loss_scale); the flags are
 * checked by mtc_train_validate, so this only fails on internal misuse. */
mtc_result_t train_scaler_init(train_rank *x);
/* Collective over the world: the whole model's parameters in the serial
 * layout, on every rank. */
mtc_result_t train_gather(train_rank *x, float *global);
/* --print-layout: this rank's buffer layout as `mtc layout` prints it,
 * preceded by the equivalent `mtc layout` command line. */
void train_print_layout(const train_rank *x, FILE *out);

/* train_micro.c */
/* Every microbatch of one global batch (through the pipeline executor with
 * pp > 1); *loss_sum = this rank's sum of token losses. */
mtc_result_t train_microbatches(train_rank *x, data_split split, uint64_t consumed, int train,
                                int64_t it, double *loss_sum);
/* Mean validation loss of eval_iters global batches. */
mtc_result_t train_evaluate(train_rank *x, double *loss);
/* Sum a double over the DP group (every TP rank already holds the same). */
mtc_result_t train_dp_sum(train_rank *x, double *v);
/* Wait for pending param all-gathers of the distributed optimizer (before
 * params are read outside a forward). */
mtc_result_t train_params_wait(train_rank *x);

/* train_ckpt.c */
/* Collective over the world: the checkpoint of iteration `it` into
 * cfg->save_path (out: the last rank's log, may be NULL). */
mtc_result_t train_ckpt_save(train_rank *x, int64_t it, uint64_t consumed, FILE *out);
/* --load DIR: this rank's state from the checkpoint (no-op when none is
 * found); sets start_iteration, start_consumed and step unless --finetune. */
mtc_result_t train_ckpt_load(train_rank *x, FILE *out);
/* --async-save, collective over the world: commits the pending save once
 * every rank's writer finished: blocking waits for them; otherwise one
 * all-reduce asks and nothing waits. No-op without a pending save. */
mtc_result_t train_ckpt_finalize(train_rank *x, int blocking, FILE *out);
/* Waits for this rank's writer without committing (an error path). */
void train_ckpt_abandon(train_rank *x);

/* train_tb.c: Megatron's TensorBoard scalars (nothing without a writer):
 * each iteration's, each log line's (then flushed), a timer's, an evaluation's. */
mtc_result_t train_tb_step(train_rank *x, int64_t it, uint64_t consumed, double loss, double norm,
                           int skipped, double lr, int world, size_t alloc_bytes);
mtc_result_t train_tb_log(train_rank *x, int64_t it, double iter_s, double tflops);
mtc_result_t train_tb_timer(train_rank *x, const char *name, double max_ms);
mtc_result_t train_tb_eval(train_rank *x, int64_t it, uint64_t consumed, double vloss);

/* train_obs.c: timers, the trace, the timer block and the trace file. */
mtc_result_t train_obs_setup(train_rank *x, mtc_comm_t world);
/* Every rank was started with the same flags and data (train_agree.c):
 * INVALID_USAGE naming the first flag that differs and the rank that holds
 * the odd value. comm: all-reduce(world) x 2 (x 4 on a difference). */
mtc_result_t train_check_agreement(const mtc_train_config *c, mtc_comm_t world,
                                   uint64_t data_tokens);
void train_obs_free(train_rank *x);
/* Open the trace window for iteration `it` when it is in the profiled range (closes otherwise). */
void train_obs_iteration(train_rank *x, int64_t it);
/* A span [t0, now] of timer `id` (timers count training passes only); name
 * NULL = the timer's name. Returns now. */
uint64_t train_obs_span(train_rank *x, train_timer id, uint64_t t0, const char *name,
                        const char *args);
/* The rank's pipeline transfer callback (pp_callbacks.exchanged). */
void train_obs_exchanged(void *ctx, int kind, uint64_t t0, uint64_t t1);
/* Collective over the world at each log: Megatron's timer block (per
 * iteration of the `n` since the last log) and the measured bubble, on out
 * (NULL on all but the logging rank); resets the timers. */
mtc_result_t train_obs_log(train_rank *x, FILE *out, int n);
/* ", \"comm_groups\": {...}" per iteration of the `n` since the last call; resets. */
void train_obs_metrics(train_rank *x, FILE *metrics, int n);
/* Collective over the world (every rank, at each --metrics record): the
 * peak resident set of each rank's process, as ", \"peak_rss_bytes\": [..],
 * \"rss_processes\": P" on metrics (NULL on all but the writing rank).
 * Thread-ranks share a process: each shows its process's peak. */
mtc_result_t train_obs_rss(train_rank *x, FILE *metrics);
/* Collective over the world: every rank's events into the trace file (written by `is_last`). */
mtc_result_t train_obs_write(train_rank *x, int is_last);

/* train_fp8.c (--fp8-format; no-ops without) */
struct cJSON;
void train_fp8_step_begin(train_rank *x);
/* After the microbatches: delayed scaling's update, the step's fp8 stats.
 * comm: all-reduce MAX(amax group) per chunk, SUM and MAX(world). */
mtc_result_t train_fp8_step_end(train_rank *x);
/* ", \"fp8_...\": ..." since the last log (then reset). */
void train_fp8_metrics(train_rank *x, FILE *metrics);
void train_fp8_banner(const train_rank *x, FILE *out);
/* --fp8-param-gather, after the main params are sharded: the fp8 gather of
 * each chunk's dense buffer (dp/distopt_fp8.h) and its first cast.
 * comm: that cast's all-reduce and all-gathers. */
mtc_result_t train_fp8_param_gather_init(train_rank *x);
/* Collective over the world: the amax histories and scales into rank 0's
 * common state (common NULL elsewhere); and back from a loaded one. */
mtc_result_t train_fp8_ckpt_save(train_rank *x, struct cJSON *common);
mtc_result_t train_fp8_ckpt_load(train_rank *x, const struct cJSON *common, const char *path);
/* train_fsdp.c: Megatron-FSDP's hooks (dp/fsdp.h) */
/* The strategy's buffers shard the gradients (optim_grads, optim_grads_params). */
int train_fsdp_grads(const mtc_train_config *c);
/* After the chunk's DDP and optimizer exist: its FSDP objects. */
mtc_result_t train_fsdp_chunk_init(train_rank *x, train_chunk *ch);
/* After init or load: every rank keeps only its shards. */
void train_fsdp_shard(train_rank *x);
/* The group buffer kind b's norm sums are added up over: its shard group,
 * or with HFSDP the whole DP x CP (expert-DP) group whose ranks hold
 * disjoint optimizer slices. */
mtc_comm_t train_fsdp_norm_group(const train_rank *x, int b);
/* The pass's zero_grad (ctx: the chunk): each FSDP buffer's shards only. */
void train_fsdp_zero_grad(void *ctx);
/* --init-model-with-meta-device with optim_grads_params: the chunks' model
 * buffers are not pre-faulted and train_fsdp_init_params draws only each
 * buffer's shards (every unit's, this rank's), so no rank holds the whole
 * model at any time. */
int train_fsdp_meta(const mtc_train_config *c);
mtc_result_t train_fsdp_init_params(train_rank *x, train_chunk *ch);
/* The same for a load: param i's pieces inside this rank's shards, under key. */
mtc_result_t train_fsdp_load_pieces(const train_chunk *ch, mtc_ckpt_pieces *l, int i,
                                    const char *key);
/* mtc_fsdp_setup_bytes over this rank's buffers (--metrics' fsdp_setup_bytes). */
size_t train_fsdp_setup_bytes(const train_rank *x);
mtc_result_t train_fsdp_params_needed(const train_chunk *ch, int first, int last);
mtc_result_t train_fsdp_grads_ready(const train_chunk *ch, int first, int last);
/* The pass about to run on chunk ch: forward (0) or backward (1). */
void train_fsdp_begin_pass(const train_rank *x, const train_chunk *ch, int backward);
mtc_result_t train_fsdp_gather_all(train_rank *x);
/* What mtc's FSDP does not combine with yet, refused with the fix. */
mtc_result_t train_fsdp_validate(const mtc_train_config *c);

/* train_step.c */
/* One iteration; *loss, *norm as logged (the loss on the last stage). */
mtc_result_t train_step(train_rank *x, int64_t it, uint64_t consumed, double *loss, double *norm,
                        int *skipped);
/* --log-params-norm: x->params_norm after the step (collective). */
mtc_result_t train_params_norm(train_rank *x);

#endif
