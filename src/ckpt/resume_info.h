/* ckpt/resume_info.h - what `mtc train --load` checks before any work:
 * the common state of a directory checkpoint (metadata.json's "common"),
 * read once into plain values so the command line never parses its JSON. */
#ifndef MTC_CKPT_RESUME_INFO_H
#define MTC_CKPT_RESUME_INFO_H

#include <stdint.h>

#include "ckpt/checkpoint.h"
#include "model/model.h"

typedef struct {
    char path[4300];                        /* the iteration's directory, for messages */
    mtc_model_config cfg;                   /* "model" */
    char tokenizer[MTC_CKPT_TOKENIZER_MAX]; /* its text form, the files resolved in the directory */
    int have_sched;                         /* "opt_param_scheduler" present */
    double sched[4]; /* max_lr, min_lr, warm-up and decay steps (-1: absent) */
    int sched_style; /* mtc_lr_style of lr_decay_style, -1 unknown */
    int have_seed;   /* "rng"."seed" present */
    int64_t seed;
} mtc_ckpt_resume_info;

/* Read iteration `it` of the checkpoint directory `dir`. An unreadable
 * directory or tokenizer, or a model configuration missing a field, is an
 * error naming the file (the configuration's is reported last, after the
 * tokenizer has been resolved). */
mtc_result_t mtc_ckpt_resume_info_read(const char *dir, int64_t it, mtc_ckpt_resume_info *out);

#endif
