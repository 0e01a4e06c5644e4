/* train/train.h - the serial training loop: data -> microbatches (Megatron's
 * data_sample_index) -> forward/backward -> (later: gradient reduction) ->
 * clip -> AdamW -> log / eval / metrics, then save.
 *
 * Loss is Megatron's: mean over every token of the global batch (each
 * token's loss scaled by 1/(global_batch*T)), gradients accumulated over
 * microbatches. Log lines go to `out` in Megatron's format (conventions.md
 * 2.8); FLOPs by mtc_gpt_flops (core_v0.14 formula).
 * Relies on model/, optim/, data/; the caller (cli/) validates flags and
 * opens the data source. No communication yet: world size 1. */
#ifndef MTC_TRAIN_TRAIN_H
#define MTC_TRAIN_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "core/result.h"
#include "data/data.h"
#include "model/gpt.h"
#include "optim/optim.h"

typedef struct {
    mtc_gpt_config model;
    int micro_batch, global_batch;
    int64_t train_iters;
    mtc_lr_schedule lr;
    mtc_adamw_config adam;
    float clip_grad;
    uint64_t seed;
    int log_interval, eval_interval, eval_iters;
    int threads;
    const char *metrics_path; /* NULL = none */
    const char *save_path;    /* NULL = none */
    const char *load_path;    /* NULL = fresh init */
    const char *tokenizer;    /* serialized tokenizer stored with --save */
    int quiet;                /* no banner */
} mtc_train_config;

/* Checks the parts the model does not (batch sizes, intervals, schedule). */
mtc_result_t mtc_train_validate(const mtc_train_config *cfg);
/* Runs the whole training; prints to out. Returns the first error. */
mtc_result_t mtc_train_run(const mtc_train_config *cfg, const data_source *src, FILE *out);

#endif
