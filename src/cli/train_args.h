/* cli/train_args.h - `mtc train`'s flags: every destination of its
 * argument table (train_flags, filled by train_args.c's table) and the
 * values the checks derive from them on the way to mtc_train_config, and
 * the phases of cmd_train.c that check them (train_check.c). */
#ifndef MTC_CLI_TRAIN_ARGS_H
#define MTC_CLI_TRAIN_ARGS_H

#include <stdint.h>

#include "ckpt/resume_info.h"
#include "ckpt/state.h"
#include "cli/layout_args.h"
#include "cli/train_compat.h"
#include "core/args.h"
#include "data/data.h"
#include "data/tok_cli.h"
#include "dp/fsdp_cli.h"
#include "model/model_cli.h"
#include "moe/moe_cli.h"
#include "pp/layout_cli.h"
#include "tp/fp8_cli.h"
#include "train/train.h"

typedef struct {
    layout_flags lay; /* the parallel layout (cli/layout_args.h) */
    int L;
    int C;
    int NH;
    int F;
    int T;
    int maxpos;
    int mbs;
    int gbs;
    int vocab;
    int64_t iters;
    int64_t warmup;
    int64_t decay;
    double lr;
    double min_lr;
    double wd;
    double clip;
    double b1;
    double b2;
    double eps;
    double decoupled_lr;
    double decoupled_min_lr;
    int per_token_loss;
    double hdrop;
    double adrop;
    int64_t seed;
    int eval_interval;
    int eval_iters;
    int log_interval;
    int world;
    int divisible;
    int threads;
    int mock;
    int sp;
    int overlap;
    int distopt;
    int overlap_pg;
    int pad_high;
    int print_layout;
    int64_t bucket;
    const char *data_path;
    const char *split;
    const char *tokenizer;
    const char *style;
    const char *metrics;
    const char *save;
    const char *load;
    int async_save;
    int save_interval;
    int no_load_optim;
    int no_load_rng;
    int finetune;
    int override_sched;
    int64_t ckpt_step;
    data_tok_opts tok_opts;
    mtc_arg_strings tok_special;
    mtc_arg_strings data_paths;
    mtc_arg_strings split_paths[3];
    int64_t sch_train_samples;
    int64_t sch_warmup_samples;
    int64_t sch_decay_samples;
    int64_t sch_wsd_iters;
    int64_t sch_wsd_samples;
    int64_t sch_exit_interval;
    double sch_warmup_fraction;
    double sch_init_lr;
    double sch_start_wd;
    double sch_end_wd;
    double sch_exit_mins;
    const char *sch_wsd_style;
    const char *sch_wd_style;
    int profile;
    int timing_level;
    int64_t prof_start;
    int64_t prof_end;
    const char *prof_dir;
    const char *trace;
    const char *timing_opt;
    double trace_mb;
    double peak_tflops;
    char trace_file[4096];
    double dist_timeout_min;
    const char *rc_gran;
    const char *rc_method;
    int rc_layers;
    mtc_arg_strings rc_modules; /* --recompute-modules (Megatron's nargs='*') */
    int check_nan;
    int bf16;
    int fp16;
    int grad_bf16;
    int acc_fp32;
    int ls_window;
    int hyst;
    const char *bf16_gemm;
    int head_chunk;
    double loss_scale;
    double init_ls;
    double min_ls;
    const char *noop_s[3];
    const char *noop_s2[6];
    int noop_f2[5];
    int ln1p;
    mtc_tb_flags tb_flags;
    mtc_fsdp_flags fsdp_flags; /* dp/fsdp_cli.h */
    tp_fp8_cli fp8_f;          /* fp8 recipes (tp/fp8_cli.h) */
    tp_fp8_config fp8_cfg;
    int fsdp_strategy;
    mtc_arg_strings ramp;
    const char *bs_text;
    mtc_batch_schedule bsched;
    int noop_f[11];
    model_cli_flags model_f;
    moe_cli_flags moe_f;
    pp_layout_args pp_split;
    train_compat compat;
    /* derived by the checks (train_check.c), read when the config is filled */
    int rc_full, rc_block, rc_mlp, rc_up, rc_shared;
    int rc_moe, rc_moe_act;            /* --recompute-modules moe, moe_act */
    int cp_types[MTC_ARG_STRINGS_MAX]; /* read by the rank-threads for the whole run */
    int cp_per_layer, cp_type;
    mtc_moe_config moe_cfg;
    mtc_launcher_env le;
    int lr_style;
    /* --load: what the checkpoint holds (train_check_load) */
    int load_file, have_ckpt;
    mtc_ckpt_resume_info saved;          /* the checkpoint's common state (ckpt/resume_info.h) */
    char tokstr[MTC_CKPT_TOKENIZER_MAX]; /* the data's tokenizer, stored with the model */
    data_source *src;
} train_flags;

/* The table writing into one train_flags (static: the rank-threads read
 * the batch schedule and the CP types for the whole run), reset to the
 * defaults; *args / *nargs the rows for cli_parse. */
train_flags *train_args_table(mtc_arg **args, int *nargs);

/* The checks before any work, in order; each returns -1 to go on, else the
 * exit status (2 after a one-line usage error). */
int train_check_basics(train_flags *f, const mtc_arg *args, int nargs);
int train_check_layout(train_flags *f, const mtc_arg *args, int nargs);
int train_check_launch(train_flags *f, const mtc_arg *args, int nargs);
int train_check_data(train_flags *f, const mtc_arg *args, int nargs);
int train_check_load(train_flags *f, const mtc_arg *args, int nargs);

#endif
