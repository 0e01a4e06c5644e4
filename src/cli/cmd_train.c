/* cli/cmd_train.c - `mtc train`: Megatron's flag names, validation of every
 * flag, shape and parallel layout before anything is allocated or written
 * (usage errors exit with status 2), then train/train.c does the work on
 * --world-size rank-threads, or on the MPI ranks when started by mpirun. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "comm/comm.h"
#include "cp/cp.h"
#include "data/data.h"
#include "ckpt/checkpoint.h"
#include "train/train.h"

static const char *TRAIN_USAGE = "[options]";
static const char *TRAIN_ABOUT =
    "Train a GPT-2 style model (pre-LN, tied embeddings) with AdamW on a text file or folder\n"
    "(char or byte tokens), a Megatron .bin/.idx dataset, llm.c shards or --mock-data.\n"
    "Flag names and the per-iteration log line are Megatron-LM's. Throughput uses Megatron\n"
    "core_v0.14's model FLOPs 72*B*s*L*h^2*(1 + s/(12h) + V/(12hL)), B = global batch.\n"
    "Parallel: --world-size N rank-threads (or mpirun -np N mtc train ...) split as\n"
    "tp x pp x dp (Megatron's order tp-cp-ep-dp-pp); --vpp V runs the interleaved 1F1B\n"
    "schedule with V model chunks per pipeline rank; every layout trains the serial run's\n"
    "model on the serial run's global batches (tests/parity).";

int cli_cmd_train(int argc, char **argv) {
    int L = 4, C = 128, NH = 4, F = 0, T = 128, maxpos = 0, mbs = 4, gbs = 0, vocab = 0;
    int64_t iters = 100, warmup = 0, decay = 0;
    double lr = 1e-3, min_lr = 0, wd = 0.01, clip = 1.0, b1 = 0.9, b2 = 0.999, eps = 1e-8;
    double hdrop = 0.1, adrop = 0.1;
    int64_t seed = 1234;
    int eval_interval = 1000, eval_iters = 100, log_interval = 100, world = 1, divisible = 128;
    int threads = 0, mock = 0, tp = 1, pp = 1, sp = 0, overlap = 0, cp = 1, ep = 1, etp = 0;
    int vpp = 0, lpvs = 0, vstages = 0, mb_group = 0;
    int distopt = 0, overlap_pg = 0, nd = 1, pad_high = 0, print_layout = 0;
    int64_t bucket = 0;
    const char *data_path = NULL, *split = "969,30,1", *tokenizer = "char", *style = "linear";
    const char *metrics = NULL, *save = NULL, *load = NULL;
    const char *norm = "LayerNorm", *posemb = "learned_absolute", *cp_comm = "p2p";
    mtc_arg_ints hcp = {0};
    /* observability (issue 18) */
    int profile = 0, timing_level = 0;
    int64_t prof_start = 10, prof_end = 12;
    const char *prof_dir = NULL, *trace = NULL, *timing_opt = "minmax";
    double peak_tflops = 0;
    char trace_file[4096];
    double dist_timeout_min = 0;
    double norm_eps = 1e-5, rot_base = 10000, rot_pct = 1.0, init_std = 0.02;
    int rot_inter = 0, use_rope = 0, swiglu = 0, gqa = 0, groups = 1, untie = 0, nobias = 0;
    int qkv_bias = 0, kv_channels = 0;
    mtc_arg args[] = {
        {"num-layers", NULL, MTC_ARG_INT, &L, "N", "transformer layers (default 4)", 0},
        {"hidden-size", NULL, MTC_ARG_INT, &C, "N", "hidden size (default 128)", 0},
        {"num-attention-heads", NULL, MTC_ARG_INT, &NH, "N", "attention heads (default 4)", 0},
        {"ffn-hidden-size", NULL, MTC_ARG_INT, &F, "N", "MLP hidden size (default 4*hidden)", 0},
        {"seq-length", NULL, MTC_ARG_INT, &T, "N", "sequence length (default 128)", 0},
        {"normalization", NULL, MTC_ARG_STRING, &norm, "S",
         "LayerNorm|RMSNorm (default LayerNorm; RMSNorm for Llama)", 0},
        {"norm-epsilon", NULL, MTC_ARG_DOUBLE, &norm_eps, "X", "norm epsilon (default 1e-5)", 0},
        {"position-embedding-type", NULL, MTC_ARG_STRING, &posemb, "S",
         "learned_absolute|rope|none (default learned_absolute; rope for Llama)", 0},
        {"use-rotary-position-embeddings", NULL, MTC_ARG_FLAG, &use_rope, NULL,
         "the same as --position-embedding-type rope", 0},
        {"rotary-base", NULL, MTC_ARG_DOUBLE, &rot_base, "X", "RoPE base (default 10000)", 0},
        {"rotary-percent", NULL, MTC_ARG_DOUBLE, &rot_pct, "X",
         "fraction of each head's channels rotated (default 1.0)", 0},
        {"rotary-interleaved", NULL, MTC_ARG_FLAG, &rot_inter, NULL,
         "rotate adjacent channel pairs instead of the two halves (default off, as HF Llama)", 0},
        {"swiglu", NULL, MTC_ARG_FLAG, &swiglu, NULL,
         "SwiGLU MLP: fc1 = [gate | up], silu(gate) * up (ffn default int(8h/3/64)*64)", 0},
        {"group-query-attention", NULL, MTC_ARG_FLAG, &gqa, NULL,
         "grouped-query attention with --num-query-groups key/value heads", 0},
        {"num-query-groups", NULL, MTC_ARG_INT, &groups, "G",
         "key/value groups with --group-query-attention (default 1)", 0},
        {"kv-channels", NULL, MTC_ARG_INT, &kv_channels, "N",
         "head size (default hidden-size / num-attention-heads)", 0},
        {"untie-embeddings-and-output-weights", NULL, MTC_ARG_FLAG, &untie, NULL,
         "a separate output layer instead of the input embedding (Llama)", 0},
        {"disable-bias-linear", NULL, MTC_ARG_FLAG, &nobias, NULL,
         "no biases in the linear layers (Llama)", 0},
        {"add-qkv-bias", NULL, MTC_ARG_FLAG, &qkv_bias, NULL,
         "a QKV bias even with --disable-bias-linear (Qwen)", 0},
        {"init-method-std", NULL, MTC_ARG_DOUBLE, &init_std, "X",
         "std of the normal initialisation (default 0.02; output projections / sqrt(2L))", 0},
        {"max-position-embeddings", NULL, MTC_ARG_INT, &maxpos, "N",
         "positions (default seq-length)", 0},
        {"micro-batch-size", NULL, MTC_ARG_INT, &mbs, "N", "samples per microbatch (default 4)", 0},
        {"global-batch-size", NULL, MTC_ARG_INT, &gbs, "N",
         "samples per iteration (default micro batch)", 0},
        {"train-iters", NULL, MTC_ARG_I64, &iters, "N", "iterations (default 100)", 0},
        {"lr", NULL, MTC_ARG_DOUBLE, &lr, "X", "peak learning rate (default 1e-3)", 0},
        {"min-lr", NULL, MTC_ARG_DOUBLE, &min_lr, "X", "final learning rate (default 0)", 0},
        {"lr-warmup-iters", NULL, MTC_ARG_I64, &warmup, "N",
         "linear warm-up iterations (default 0)", 0},
        {"lr-decay-iters", NULL, MTC_ARG_I64, &decay, "N", "decay iterations (default train-iters)",
         0},
        {"lr-decay-style", NULL, MTC_ARG_STRING, &style, "S",
         "constant|linear|cosine (default linear)", 0},
        {"weight-decay", NULL, MTC_ARG_DOUBLE, &wd, "X",
         "AdamW weight decay on 2-D weights (default 0.01)", 0},
        {"clip-grad", NULL, MTC_ARG_DOUBLE, &clip, "X",
         "global gradient-norm clip, 0 = off (default 1.0)", 0},
        {"adam-beta1", NULL, MTC_ARG_DOUBLE, &b1, "X", "(default 0.9)", 0},
        {"adam-beta2", NULL, MTC_ARG_DOUBLE, &b2, "X", "(default 0.999)", 0},
        {"adam-eps", NULL, MTC_ARG_DOUBLE, &eps, "X", "(default 1e-8)", 0},
        {"seed", NULL, MTC_ARG_I64, &seed, "N",
         "initialisation, dropout and data order (default 1234)", 0},
        {"data-path", NULL, MTC_ARG_STRING, &data_path, "PATH",
         "text file or folder, PREFIX of .bin/.idx, or llm.c .bin", 0},
        {"split", NULL, MTC_ARG_STRING, &split, "W,W,W",
         "train,valid,test weights (default 969,30,1)", 0},
        {"tokenizer-type", NULL, MTC_ARG_STRING, &tokenizer, "S",
         "char|byte for text data (default char)", 0},
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
        {"distributed-timeout-minutes", NULL, MTC_ARG_DOUBLE, &dist_timeout_min, "M",
         "deadline of every collective and point-to-point call, in minutes (default "
         "MTC_COMM_TIMEOUT or 5); a rank that does not arrive ends the job with a report",
         0},
        {"cp-comm-type", NULL, MTC_ARG_STRING, &cp_comm, "S",
         "p2p (ring, default) | all_gather | a2a (Ulysses: local heads divisible by cp)", 0},
        {"hierarchical-context-parallel-sizes", NULL, MTC_ARG_INTS, &hcp, "A P",
         "for a2a+p2p (not implemented: refused)", 0},
        {"expert-model-parallel-size", "ep", MTC_ARG_INT, &ep, "N",
         "accepted as 1 only: mtc trains dense models (no MoE yet; `mtc ranks` shows the expert "
         "groups)",
         0},
        {"expert-tensor-parallel-size", "etp", MTC_ARG_INT, &etp, "N",
         "accepted as 1 or the TP size only (no MoE yet)", 0},
        {"sequence-parallel", NULL, MTC_ARG_FLAG, &sp, NULL,
         "split layer norm / dropout / residual regions along the sequence over TP", 0},
        {"overlap-grad-reduce", NULL, MTC_ARG_FLAG, &overlap, NULL,
         "launch each gradient bucket's all-reduce during the last backward", 0},
        {"ddp-bucket-size", NULL, MTC_ARG_I64, &bucket, "N",
         "with --overlap-grad-reduce, elements per gradient bucket (default max(4e7, 1e6 x dp)); "
         "as Megatron, one bucket without overlap and on pipeline stages > 0",
         0},
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
        {"threads", NULL, MTC_ARG_INT, &threads, "N", "threads per rank (default cores / ranks)",
         0},
        {"metrics", NULL, MTC_ARG_STRING, &metrics, "FILE", "one JSON object per logged iteration",
         0},
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
        {"timing-log-level", NULL, MTC_ARG_INT, &timing_level, "N",
         "0: no timers; 1: forward-backward, grads sync, optimizer; 2: also per microbatch and "
         "pipeline p2p (default 0)",
         0},
        {"timing-log-option", NULL, MTC_ARG_STRING, &timing_opt, "S",
         "max|minmax|all: what the timer block shows across ranks (default minmax)", 0},
        {"peak-tflops", NULL, MTC_ARG_DOUBLE, &peak_tflops, "X",
         "this machine's peak TFLOP/s per rank: the log line adds model FLOPs utilization", 0},
        {"save", NULL, MTC_ARG_STRING, &save, "FILE", "write the trained weights here", 0},
        {"load", NULL, MTC_ARG_STRING, &load, "FILE",
         "start from these weights (fresh optimizer and iteration count, like --finetune)", 0},
    };
    int nargs = (int)(sizeof args / sizeof args[0]);
    int st = cli_parse("train", TRAIN_USAGE, TRAIN_ABOUT, args, nargs, argc, argv);
    if (st >= 0) return st;

    if (world < 1) return cli_usage_error("train", "world-size=%d must be >= 1", world);
    if (tp < 1) return cli_usage_error("train", "tensor-model-parallel-size=%d must be >= 1", tp);
    if (pp < 1) return cli_usage_error("train", "pipeline-model-parallel-size=%d must be >= 1", pp);
    if (cp < 1) return cli_usage_error("train", "context-parallel-size=%d must be >= 1", cp);
    if (mtc_args_seen(args, nargs, "distributed-timeout-minutes") &&
        !(dist_timeout_min > 0 && dist_timeout_min <= 1e6))
        return cli_usage_error("train", "distributed-timeout-minutes=%g must be in (0, 1e6]",
                               dist_timeout_min);
    if (dist_timeout_min > 0) mtc_comm_set_default_timeout(dist_timeout_min * 60.0);
    int cp_type = cp_comm_type_parse(cp_comm);
    if (!strcmp(cp_comm, "a2a+p2p") || hcp.n > 0)
        return cli_usage_error("train", "cp-comm-type a2a+p2p (hierarchical context parallelism) "
                                        "is not implemented yet: use p2p, all_gather or a2a");
    if (cp_type < 0)
        return cli_usage_error(
            "train", "cp-comm-type=%s is unknown (use p2p, all_gather, a2a or a2a+p2p)", cp_comm);
    if (ep != 1)
        return cli_usage_error(
            "train",
            "expert-model-parallel-size=%d: mtc train has no mixture-of-experts model yet (use "
            "--ep 1; `mtc ranks --ep %d` shows the expert groups)",
            ep, ep);
    if (etp != 0 && etp != 1 && etp != tp)
        return cli_usage_error("train",
                               "expert-tensor-parallel-size=%d: without experts it must be 1 or "
                               "the tensor-parallel size %d",
                               etp, tp);
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
    { /* Megatron's training rules deriving vpp (arguments.py) */
        pp_vpp_args va = {.pp = pp,
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
    if (le.kind == MTC_LAUNCHER_MPI && !threads && le.local_world > 0) {
        threads = (int)sysconf(_SC_NPROCESSORS_ONLN) / le.local_world;
        if (threads < 1) threads = 1;
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
        return cli_usage_error(
            "train", "lr-decay-style=%s is unknown (use constant, linear or cosine)", style);
    if (mock && data_path)
        return cli_usage_error(
            "train", "--mock-data and --data-path=%s exclude each other (pick one)", data_path);
    if (!mock && !data_path)
        return cli_usage_error("train", "no data: pass --data-path FILE|DIR|PREFIX or --mock-data");
    if (divisible < 1)
        return cli_usage_error("train", "make-vocab-size-divisible-by=%d must be >= 1", divisible);
    if (vocab < 0) return cli_usage_error("train", "vocab-size=%d must be >= 1", vocab);
    if (T < 1) return cli_usage_error("train", "seq-length=%d must be >= 1", T);
    if (data_path && data_tokenizer_parse(tokenizer) < 0)
        return cli_usage_error("train", "tokenizer-type=%s is unknown (use char or byte)",
                               tokenizer);

    mtc_train_config tc;
    memset(&tc, 0, sizeof tc);
    mtc_model_config *mc = &tc.model;
    mc->num_layers = L, mc->hidden_size = C, mc->num_heads = NH;
    /* Megatron's default for SwiGLU keeps the parameter count of 4h */
    mc->ffn_hidden_size = F ? F : swiglu ? (int)((4.0 * C * 2.0 / 3.0) / 64) * 64 : 4 * C;
    mc->seq_length = T;
    mc->max_position_embeddings = maxpos ? maxpos : T;
    mc->hidden_dropout = (float)hdrop, mc->attention_dropout = (float)adrop;
    mc->init_std = (float)init_std;
    if (!strcmp(norm, "LayerNorm"))
        mc->normalization = MTC_NORM_LAYERNORM;
    else if (!strcmp(norm, "RMSNorm"))
        mc->normalization = MTC_NORM_RMSNORM;
    else
        return cli_usage_error("train", "normalization=%s is unknown (use LayerNorm or RMSNorm)",
                               norm);
    if (use_rope) posemb = "rope";
    if (!strcmp(posemb, "learned_absolute"))
        mc->position_embedding = MTC_POS_LEARNED;
    else if (!strcmp(posemb, "rope"))
        mc->position_embedding = MTC_POS_ROPE;
    else if (!strcmp(posemb, "none"))
        mc->position_embedding = MTC_POS_NONE;
    else
        return cli_usage_error(
            "train", "position-embedding-type=%s is unknown (use learned_absolute, rope or none)",
            posemb);
    if (!(init_std > 0 && init_std < 10))
        return cli_usage_error("train", "init-method-std=%g must be in (0, 10)", init_std);
    if (!(norm_eps > 0 && norm_eps < 1))
        return cli_usage_error("train", "norm-epsilon=%g must be in (0, 1)", norm_eps);
    if (!(rot_base > 1 && rot_base < 1e12))
        return cli_usage_error("train", "rotary-base=%g must be in (1, 1e12)", rot_base);
    if (!(rot_pct > 0 && rot_pct <= 1))
        return cli_usage_error("train", "rotary-percent=%g must be in (0, 1]", rot_pct);
    if (gqa && groups < 1)
        return cli_usage_error("train", "num-query-groups=%d must be >= 1", groups);
    if (!gqa && mtc_args_seen(args, nargs, "num-query-groups"))
        return cli_usage_error("train", "--num-query-groups needs --group-query-attention");
    if (timing_level < 0 || timing_level > 2)
        return cli_usage_error("train", "timing-log-level=%d must be 0, 1 or 2", timing_level);
    int timing_option = !strcmp(timing_opt, "max")      ? 0
                        : !strcmp(timing_opt, "minmax") ? 1
                        : !strcmp(timing_opt, "all")    ? 2
                                                        : -1;
    if (timing_option < 0)
        return cli_usage_error("train", "timing-log-option=%s must be max, minmax or all",
                               timing_opt);
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
    tc.trace_path = trace, tc.profile_step_start = prof_start, tc.profile_step_end = prof_end;
    tc.timing_log_level = timing_level, tc.timing_log_option = timing_option;
    tc.peak_tflops = peak_tflops;
    if (kv_channels < 0)
        return cli_usage_error("train", "kv-channels=%d must be >= 1", kv_channels);
    mc->norm_epsilon = (float)norm_eps;
    mc->rotary_base = (float)rot_base, mc->rotary_percent = (float)rot_pct;
    mc->rotary_interleaved = rot_inter;
    mc->swiglu = swiglu;
    mc->num_query_groups = gqa ? groups : 0;
    mc->kv_channels = kv_channels;
    mc->untie_embeddings = untie;
    mc->disable_bias_linear = nobias;
    mc->add_qkv_bias = qkv_bias;
    /* shape checks that need no data, before opening anything */
    mc->vocab_size = mc->padded_vocab_size = 1;
    if (mtc_model_config_validate(mc) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    tc.micro_batch = mbs;
    tc.global_batch = gbs ? gbs : mbs;
    tc.train_iters = iters;
    tc.lr = (mtc_lr_schedule){.lr = lr,
                              .min_lr = min_lr,
                              .warmup_iters = warmup,
                              .decay_iters = decay ? decay : iters,
                              .style = (mtc_lr_style)lr_style};
    tc.adam = (mtc_adamw_config){(float)b1, (float)b2, (float)eps, (float)wd};
    tc.clip_grad = (float)clip;
    tc.seed = (uint64_t)seed;
    tc.log_interval = log_interval, tc.eval_interval = eval_interval, tc.eval_iters = eval_iters;
    tc.threads = threads;
    tc.metrics_path = metrics, tc.save_path = save, tc.load_path = load;
    tc.world_size = world, tc.tp = tp, tc.pp = pp, tc.sequence_parallel = sp;
    tc.cp = cp, tc.cp_comm_type = cp_type;
    tc.vpp = vpp, tc.microbatch_group_size = mb_group;
    tc.overlap_grad_reduce = overlap, tc.ddp_bucket_size = bucket;
    tc.use_distributed_optimizer = distopt, tc.overlap_param_gather = overlap_pg;
    tc.num_distopt_instances = nd, tc.pad_high_busbw = pad_high, tc.print_layout = print_layout;
    if (mtc_train_validate(&tc) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());
    mc->padded_vocab_size = mtc_model_pad_vocab(1, divisible, tp);
    if (mtc_train_validate_layout(&tc, world) != MTC_OK)
        return cli_usage_error("train", "%s", mtc_error_detail());

    data_source_opts dopts = {.data_path = data_path,
                              .mock = mock,
                              .vocab_size = mock ? (vocab ? vocab : 50257) : vocab,
                              .tokenizer = tokenizer,
                              .seq_length = T,
                              .seed = (uint64_t)seed,
                              .split = split};
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
    const data_tokenizer *tok = data_source_tokenizer(src);
    if (tok && data_tokenizer_serialize(tok, tokstr, sizeof tokstr) != MTC_OK) {
        data_source_free(src);
        return cli_fail("train", MTC_ERR_INTERNAL);
    }
    tc.tokenizer = tokstr;
    if (load) { /* refuse a mismatching checkpoint before training starts */
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
        if (strcmp(info.tokenizer, tokstr)) {
            data_source_free(src);
            return cli_usage_error(
                "train", "%s was saved with a different tokenizer than this data's", load);
        }
    }
    mtc_result_t rc = mtc_train_run(&tc, src, stdout);
    data_source_free(src);
    if (rc == MTC_ERR_INVALID_ARGUMENT) return cli_usage_error("train", "%s", mtc_error_detail());
    return rc == MTC_OK ? 0 : cli_fail("train", rc);
}
