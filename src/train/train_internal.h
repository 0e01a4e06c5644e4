/* train/train_internal.h - one rank's training state and the step
 * functions train.c (loop, logging, launch) calls from train_step.c (setup,
 * microbatches, pipeline, gradient reduction, norm, optimizer, gather /
 * load / save). Not a public header. */
#ifndef MTC_TRAIN_INTERNAL_H
#define MTC_TRAIN_INTERNAL_H

#include "comm/comm.h"
#include "dp/ddp.h"
#include "dp/distopt.h"
#include "grid/grid.h"
#include "pp/executor.h"
#include "train/train.h"

/* One rank's state. */
typedef struct {
    const mtc_train_config *cfg;
    const data_source *src;
    mtc_grid_t grid;
    mtc_comm_t tp, dp, mp; /* NULL when of size 1 */
    mtc_comm_t pipe, embd; /* PIPELINE_MODEL_PARALLEL_GROUP, EMBEDDING_GROUP (NULL: size 1) */
    int dp_size, dp_rank, tp_rank, nmb;
    int pp_size, pp_rank;
    pp_executor_t ex; /* NULL when pp == 1 */
    int vpp;          /* model chunks on this rank (1 without interleaving) */
    mtc_gpt **chunks; /* (vpp) chunk c = virtual stage c*pp + pp_rank; [0] == model */
    mtc_ddp **ddps;   /* (vpp) one DDP per chunk as Megatron; [0] == ddp */
    mtc_adamw *copts; /* (vpp) AdamW of chunks 1.. ([0] unused: opt) */
    int *slot_of;     /* (vpp, nmb) activation slot of (chunk, microbatch), -1: none */
    int *slot_busy;   /* (vpp, nslots_max) */
    int nslots_max;
    int world_rank;
    int head_mb;      /* microbatch of the last forward on the chunk with the head */
    size_t msg_count; /* floats of one stage-to-stage message */
    /* the running pass (read by the microbatch callbacks) */
    int64_t cur_it;
    int cur_train;
    double mb_loss_sum;
    nn_pool *pool;
    mtc_gpt *model;
    mtc_ddp *ddp;
    mtc_adamw opt;           /* plain path; with the distributed optimizer only .step counts */
    mtc_distopt *dopt;       /* --use-distributed-optimizer (train/optimizer_step.c): dopts[0] */
    mtc_distopt **dopts;     /* (vpp) one per model chunk, as the DDPs */
    mtc_comm_t intra, inter; /* intra-instance group (NULL: size 1); chunk 0's inter-instance
                                group (one per chunk, freed with the world) */
    int *buf;                /* (T+1) one sample */
    int *tokens, *targets;   /* (nmb, B, T) this DP rank's microbatches */
    float *red_buf;          /* packed gradients of one reduction group (finalize_grads) */
    uint64_t valid_consumed;
    uint64_t comm_ns;  /* time in the step's explicit collectives */
    uint64_t setup_ns; /* train_setup: buffers allocated, parameters initialised */
} train_rank;

mtc_result_t train_setup(train_rank *x, mtc_comm_t world, int threads);
/* This rank's buffer bytes summed over its model chunks; returns the
 * activation arena bytes (all chunks' in-flight slots). */
size_t train_memory(const train_rank *x, mtc_dp_memory *mem);
void train_teardown(train_rank *x);
/* One iteration; *loss, *norm as logged (the loss on the last stage). */
mtc_result_t train_step(train_rank *x, int64_t it, uint64_t consumed, double *loss, double *norm,
                        int *skipped);
/* Mean validation loss of eval_iters global batches. */
mtc_result_t train_evaluate(train_rank *x, double *loss);
/* Collective over the world: the whole model's parameters in the serial
 * layout, on every rank. */
mtc_result_t train_gather(train_rank *x, float *global);
mtc_result_t train_save(train_rank *x, int is_last, FILE *out);

/* train/optimizer_step.c: the distributed optimizer's side of a rank. */
/* After the model chunk exists: groups, the padded layout (the model's
 * buffers re-laid out to it), the DDP and the sharded AdamW state. */
mtc_result_t train_distopt_setup(train_rank *x);
void train_distopt_teardown(train_rank *x);
/* After the DP reduce-scatter and the SP / embedding all-reduces: norm over
 * the shards (TP duplicates and the last stage's wte copy once), clip,
 * AdamW on the shard, all-gather (waited for unless overlap_param_gather). */
mtc_result_t train_distopt_step(train_rank *x, double *norm, int *skipped);
/* Wait for pending param all-gathers (before params are read). */
mtc_result_t train_distopt_wait(train_rank *x);
/* The forward's params_needed hook (ctx: the mtc_distopt): wait for the
 * all-gather of the buckets holding params [first, last). */
mtc_result_t train_params_needed(void *ctx, int first, int last);
/* --print-layout: this rank's buffer layout as `mtc layout` prints it,
 * preceded by the equivalent `mtc layout` command line. */
void train_print_layout(const train_rank *x, FILE *out);

#endif
