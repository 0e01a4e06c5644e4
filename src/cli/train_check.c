/* cli/train_check.c - `mtc train`'s checks of its flags before anything
 * is allocated or written: each names the value and the fix (exit 2). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/checkpoint.h"
#include "ckpt/resume_info.h"
#include "ckpt/tok_files.h"
#include "cli/cli.h"
#include "cli/train_args.h"
#include "comm/comm.h"
#include "core/limits.h"
#include "core/outfile.h"
#include "cp/cp.h"
#include "dp/layout.h"
#include "pp/schedule.h"

int train_check_basics(train_flags *f, const mtc_arg *args, int nargs) {

    (void)f->per_token_loss, (void)f->ln1p;
    /* Megatron seeds numpy with it, whose seeds are 0 .. 2^32 - 1 (a negative one raised) */
    if (f->seed < 0 || f->seed > 4294967295LL)
        return cli_usage_error("train", "seed=%lld must be in [0, 4294967295]", (long long)f->seed);
    if (mtc_args_seen(args, nargs, "decoupled-lr") && !(f->decoupled_lr >= 0))
        return cli_usage_error("train", "decoupled-lr=%g must be >= 0", f->decoupled_lr);
    if (mtc_args_seen(args, nargs, "decoupled-min-lr") &&
        (!(f->decoupled_min_lr >= 0) || !mtc_args_seen(args, nargs, "decoupled-lr")))
        return cli_usage_error("train",
                               "decoupled-min-lr=%g must be >= 0 and goes with --decoupled-lr",
                               f->decoupled_min_lr);
    if (f->world < 1 || f->world > MTC_LAUNCH_MAX_THREAD_RANKS)
        return cli_usage_error("train", "--world-size %d must be 1..%d (thread-ranks)", f->world,
                               MTC_LAUNCH_MAX_THREAD_RANKS);
    if (f->mbs < 1 || f->mbs > MTC_TRAIN_MAX_MICRO_BATCH)
        return cli_usage_error("train", "--micro-batch-size %d must be 1..%d", f->mbs,
                               MTC_TRAIN_MAX_MICRO_BATCH);
    if (f->lay.tp < 1)
        return cli_usage_error("train", "tensor-model-parallel-size=%d must be >= 1", f->lay.tp);
    if (f->lay.pp < 1)
        return cli_usage_error("train", "pipeline-model-parallel-size=%d must be >= 1", f->lay.pp);
    if (f->lay.cp < 1)
        return cli_usage_error("train", "context-parallel-size=%d must be >= 1", f->lay.cp);
    char metrics_real[MTC_PATH_MAX];
    if (f->metrics &&
        mtc_outfile_check(f->metrics, "--metrics", metrics_real, sizeof metrics_real) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    if (f->metrics && f->save && !strcmp(f->metrics, f->save))
        return cli_usage_error("train", "--metrics and --save are both %s (give each its own path)",
                               f->metrics);
    /* Megatron's recomputation rules (arguments.py) */
    f->rc_full = 0, f->rc_block = 0;
    if (f->rc_gran && strcmp(f->rc_gran, "full") && strcmp(f->rc_gran, "selective"))
        return cli_usage_error(
            "train", "recompute-granularity=%s is unknown (use full or selective)", f->rc_gran);
    if (f->rc_method && strcmp(f->rc_method, "uniform") && strcmp(f->rc_method, "block"))
        return cli_usage_error("train", "recompute-method=%s is unknown (use uniform or block)",
                               f->rc_method);
    if (f->rc_gran && !strcmp(f->rc_gran, "full")) {
        if (!f->rc_method)
            return cli_usage_error("train", "--recompute-granularity full needs --recompute-method "
                                            "uniform or block");
        if (f->rc_layers < 1)
            return cli_usage_error("train", "--recompute-granularity full needs "
                                            "--recompute-num-layers N >= 1");
        f->rc_full = 1, f->rc_block = !strcmp(f->rc_method, "block");
    } else if (f->rc_method || f->rc_layers) {
        return cli_usage_error("train", "--recompute-method and --recompute-num-layers apply only "
                                        "with --recompute-granularity full");
    }
    if (f->rc_modules.n && !(f->rc_gran && !strcmp(f->rc_gran, "selective")))
        return cli_usage_error("train", "--recompute-modules applies only with "
                                        "--recompute-granularity selective");
    /* --recompute-modules: a comma- or space-separated list (Megatron's
     * default core_attn, a no-op here: the tiled attention keeps no
     * probabilities; mlp recomputes each MLP in backward) */
    f->rc_mlp = f->rc_up = f->rc_shared = 0; /* rc_up: mla_up_proj (model/mla.h) */
    f->rc_moe = f->rc_moe_act = 0;
    if (f->rc_modules.n) {
        char mods[256] = "";
        for (int i = 0; i < f->rc_modules.n; i++) /* words and commas alike */
            snprintf(mods + strlen(mods), sizeof mods - strlen(mods), "%s%s", i ? "," : "",
                     f->rc_modules.v[i]);
        char all[256];
        snprintf(all, sizeof all, "%s", mods);
        for (char *sv = NULL, *t = strtok_r(mods, ", ", &sv); t; t = strtok_r(NULL, ", ", &sv)) {
            if (!strcmp(t, "mlp"))
                f->rc_mlp = 1;
            else if (!strcmp(t, "mla_up_proj"))
                f->rc_up = 1;
            else if (!strcmp(t, "shared_experts"))
                f->rc_shared = 1;
            else if (!strcmp(t, "moe"))
                f->rc_moe = 1;
            else if (!strcmp(t, "moe_act"))
                f->rc_moe_act = 1;
            /* core_attn and layernorm are what mtc always does: the tiled
             * attention keeps no probabilities, the norms' outputs are rebuilt */
            else if (strcmp(t, "core_attn") && strcmp(t, "layernorm"))
                return cli_usage_error("train",
                                       "recompute-modules=%s: %s is unknown (use core_attn, "
                                       "moe_act, layernorm, mla_up_proj, mlp, moe and/or "
                                       "shared_experts)",
                                       all, t);
        }
        /* TransformerConfig.__post_init__'s rule */
        if (f->rc_moe_act && !f->compat.grouped_gemm)
            return cli_usage_error("train", "moe_act in recompute_modules is only supported with "
                                            "moe_grouped_gemm (add --moe-grouped-gemm)");
    }
    return -1;
}

int train_check_layout(train_flags *f, const mtc_arg *args, int nargs) {
    int st;
    if (mtc_args_seen(args, nargs, "distributed-timeout-minutes") &&
        !(f->dist_timeout_min > 0 && f->dist_timeout_min <= 1e6))
        return cli_usage_error("train", "distributed-timeout-minutes=%g must be in (0, 1e6]",
                               f->dist_timeout_min);
    /* one comm type, or one per layer (Megatron's nargs='+') */
    f->cp_per_layer = 0;
    if (cp_options_resolve(f->lay.cp_comm.v, f->lay.cp_comm.n, f->L, f->lay.cp, f->lay.hcp.v,
                           f->lay.hcp.n, f->cp_types, &f->cp_per_layer) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    f->cp_type = f->cp_types[0];
    if ((st = train_compat_apply(&f->compat, f->model_f.use_rope ? "rope" : f->model_f.posemb,
                                 &f->moe_f.dispatcher)) >= 0)
        return st;
    if (moe_cli_resolve(&f->moe_f, mtc_args_seen(args, nargs, "moe-expert-capacity-factor"),
                        &f->moe_cfg) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    f->moe_cfg.router_fp64 = f->compat.router_dtype && !strcmp(f->compat.router_dtype, "fp64");
    if (mtc_moe_validate_etp(f->lay.etp, f->lay.tp) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    if (pp_vpp_given_once(f->lay.vpp, f->lay.lpvs, f->lay.vstages) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    if (mtc_args_seen(args, nargs, "virtual-pipeline-model-parallel-size") && f->lay.vpp < 1)
        return cli_usage_error("train", "virtual-pipeline-model-parallel-size=%d must be >= 1",
                               f->lay.vpp);
    if (f->lay.mb_group < 0)
        return cli_usage_error("train",
                               "microbatch-group-size-per-virtual-pipeline-stage=%d must be >= 1",
                               f->lay.mb_group);
    if (pp_layout_cli_resolve(
            &f->lay.split, mtc_args_seen(args, nargs, "decoder-first-pipeline-num-layers"),
            mtc_args_seen(args, nargs, "decoder-last-pipeline-num-layers"), &f->pp_split) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    f->pp_split.mtp_num_layers = f->model_f.mtp_layers; /* a layout string's 'm' count */
    { /* Megatron's training rules deriving vpp (arguments.py) */
        pp_vpp_args va = {.pp = f->lay.pp,
                          .split = &f->pp_split,
                          .num_layers = f->L,
                          .layers_per_virtual_stage = f->lay.lpvs,
                          .virtual_stages_per_rank = f->lay.vpp ? f->lay.vpp : f->lay.vstages,
                          .overlap_p2p_comm = 1};
        if (pp_vpp_from_args(&f->lay.vpp, &va) != MTC_OK)
            return cli_usage_error("train", "%s", mtc_error_detail());
    }
    return -1;
}

int train_check_launch(train_flags *f, const mtc_arg *args, int nargs) {
    if (mtc_launcher_detect(&f->le) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    if ((f->le.kind == MTC_LAUNCHER_TORCHRUN || f->le.kind == MTC_LAUNCHER_SLURM) &&
        f->le.world > 1) {
        /* several processes that no transport can join: refuse, never run
         * them as independent jobs (rank 0 alone speaks) */
        if (f->le.rank != 0) return 2;
        return cli_usage_error("train",
                               "started by %s as rank %d of %d, but mtc joins processes only "
                               "through MPI: run `mpirun -np %d mtc train ...` (or one process "
                               "with --world-size %d)",
                               f->le.name, f->le.rank, f->le.world, f->le.world, f->le.world);
    }
    if (f->le.kind == MTC_LAUNCHER_MPI && f->le.world > 1)
        f->world = f->le.world; /* the MPI size */
    {                           /* GPU-only or Megatron-internal flags: one note naming them all */
        char note[1024] = "";
        size_t n = 0;
        for (int i = 0; i < nargs; i++)
            if (args[i].seen && args[i].help && strstr(args[i].help, "no effect on CPU") &&
                n + strlen(args[i].name) + 4 < sizeof note)
                n += (size_t)snprintf(note + n, sizeof note - n, "%s--%s", n ? ", " : "",
                                      args[i].name);
        if (f->le.rank == 0) train_compat_note(&f->compat);
        if (n && f->le.rank == 0) /* once per job, not once per rank */
            fprintf(stderr, "note: %s concern GPUs or Megatron's internals and do not apply here\n",
                    note);
        for (int i = 0; i < nargs && f->le.rank == 0; i++) /* what the others would do */
            if (args[i].seen && args[i].help && !strncmp(args[i].help, "not here: ", 10))
                fprintf(stderr, "note: --%s is accepted, %s\n", args[i].name, args[i].help + 10);
    }

    if (f->le.kind == MTC_LAUNCHER_MPI && !f->threads && f->le.local_world > 0) {
        f->threads = (int)sysconf(_SC_NPROCESSORS_ONLN) / f->le.local_world;
        if (f->threads < 1) f->threads = 1;
    }
    {
        int here = f->le.kind == MTC_LAUNCHER_MPI ? f->le.local_world : f->world,
            tmax = mtc_threads_max(here);
        if (f->threads < 0 || f->threads > tmax ||
            (f->threads == 0 && mtc_args_seen(args, nargs, "threads"))) /* 0 is no count */
            return cli_usage_error("train",
                                   "--threads %d must be 1..%d (%d x this machine's cores over %d "
                                   "ranks on it)",
                                   f->threads, tmax, MTC_THREADS_PER_CORE_MAX, here < 1 ? 1 : here);
    }
    return -1;
}

int train_check_data(train_flags *f, const mtc_arg *args, int nargs) {
    if (dp_options_check(f->distopt, f->lay.nd, f->overlap_pg, f->bucket) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    if (f->sp && f->lay.tp == 1) {
        fprintf(stderr, "WARNING: --sequence-parallel is switched off because "
                        "tensor-model-parallel-size is 1\n");
        f->sp = 0;
    }
    f->lr_style = mtc_lr_style_parse(f->style);
    if (f->lr_style < 0)
        return cli_usage_error("train",
                               "lr-decay-style=%s is unknown (use constant, linear, cosine, "
                               "inverse-square-root or WSD)",
                               f->style);
    f->data_path = f->data_paths.n ? f->data_paths.v[0] : NULL;
    int per_split = f->split_paths[0].n || f->split_paths[1].n || f->split_paths[2].n;
    if (per_split &&
        (f->mock || f->data_path)) /* Megatron: "A single data source must be provided" */
        return cli_usage_error("train",
                               "--train-data-path/--valid-data-path/--test-data-path exclude %s "
                               "(give one data source)",
                               f->mock ? "--mock-data" : "--data-path");
    if (per_split && mtc_args_seen(args, nargs, "split"))
        return cli_usage_error("train", "--split does not apply to --train-data-path/"
                                        "--valid-data-path/--test-data-path (each split reads "
                                        "all of its data; Megatron refuses both): drop --split");
    if (per_split && !f->split_paths[0].n)
        return cli_usage_error("train", "--valid-data-path/--test-data-path need "
                                        "--train-data-path (the data to train on)");
    if (f->mock && f->data_path)
        return cli_usage_error(
            "train", "--mock-data and --data-path=%s exclude each other (pick one)", f->data_path);
    if (!f->mock && !f->data_path && !per_split)
        return cli_usage_error("train", "no data: pass --data-path FILE|DIR|PREFIX or --mock-data");
    if (f->divisible < 1 || f->divisible > MTC_MODEL_MAX_VOCAB_DIVISOR)
        return cli_usage_error("train", "make-vocab-size-divisible-by=%d is outside [1, %d]",
                               f->divisible, MTC_MODEL_MAX_VOCAB_DIVISOR);
    if (f->vocab < 0 || (f->vocab == 0 && mtc_args_seen(args, nargs, "vocab-size")))
        return cli_usage_error("train", "vocab-size=%d must be >= 1", f->vocab);
    if (f->T < 1) return cli_usage_error("train", "seq-length=%d must be >= 1", f->T);
    /* Megatron's GPT-3 example gives the files without --tokenizer-type */
    if (!f->tokenizer && f->tok_opts.vocab_file && f->tok_opts.merge_file)
        f->tokenizer = "GPT2BPETokenizer";
    if (!f->tokenizer && f->tok_opts.tokenizer_model) f->tokenizer = "HuggingFaceTokenizer";
    if (f->tokenizer && data_tok_parse_type(f->tokenizer) < 0)
        return cli_usage_error("train", "tokenizer-type=%s is unknown (use one of %s)",
                               f->tokenizer, data_tok_type_names());
    if (f->tokenizer && data_tok_parse_type(f->tokenizer) == DATA_TOK_NULL && f->vocab < 1)
        return cli_usage_error("train", "--tokenizer-type NullTokenizer needs --vocab-size N");
    f->tok_opts.vocab_size = f->vocab;
    data_tok_cli_special(&f->tok_opts, &f->tok_special);
    return -1;
}

int train_check_load(train_flags *f, const mtc_arg *args, int nargs) {
    if (f->save_interval < 0)
        return cli_usage_error("train", "save-interval=%d must be >= 1", f->save_interval);
    if (f->save_interval > 0 && !f->save)
        return cli_usage_error("train", "--save-interval needs --save DIR");
    if (f->async_save && !f->save) return cli_usage_error("train", "--async-save needs --save DIR");
    if (mtc_args_seen(args, nargs, "ckpt-step") && (f->ckpt_step < 0 || !f->load))
        return cli_usage_error("train", "ckpt-step=%lld needs --load DIR and must be >= 0",
                               (long long)f->ckpt_step);
    f->load_file = 0, f->have_ckpt = 0;
    if (f->load) {
        struct stat lst;
        f->load_file = stat(f->load, &lst) == 0 && S_ISREG(lst.st_mode);
        int64_t it = 0;
        if (!f->load_file &&
            mtc_ckpt_dist_find(f->load, f->ckpt_step, &it, &f->have_ckpt) != MTC_OK)
            return cli_usage_error("train", "%s", mtc_error_detail());
        if (!f->load_file && !f->have_ckpt) { /* as Megatron: warn and start from scratch */
            fprintf(stderr,
                    "WARNING: could not find the metadata file %s/%s\n    will not load any "
                    "checkpoints and will start from random\n",
                    f->load, MTC_CKPT_TRACKER);
            f->load = NULL;
        }
        if (f->have_ckpt) { /* read the common state now: a bad checkpoint stops here */
            mtc_ckpt_resume_info *sv = &f->saved;
            mtc_result_t prc = mtc_ckpt_resume_info_read(f->load, it, sv);
            if (prc == MTC_OK && !f->no_load_rng && !f->finetune && sv->have_seed) {
                if (mtc_args_seen(args, nargs, "seed") && sv->seed != f->seed)
                    fprintf(stderr,
                            "mtc train: note: seed=%lld from the checkpoint replaces --seed %lld "
                            "(dropout and data order continue the saved run; --no-load-rng keeps "
                            "--seed)\n",
                            (long long)sv->seed, (long long)f->seed);
                f->seed = sv->seed;
            }
            if (prc != MTC_OK) return cli_usage_error("train", "%s", mtc_error_detail());
            f->ckpt_step = it;
        }
    }
    return -1;
}
