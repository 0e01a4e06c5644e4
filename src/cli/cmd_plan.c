/* cli/cmd_plan.c - `mtc plan`: the valid layouts of a model on a world and
 * a machine, each with memory per rank, predicted step time, TFLOP/s per
 * device and MFU, sorted (fitting ones first, fastest first); --json for
 * scripts; --explain LAYOUT prints every term of one prediction. The model
 * lives in plan/ (plan/plan.h); this file parses flags and prints. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/layout_args.h"
#include "cp/cp.h"
#include "dp/fsdp.h"
#include "dp/fsdp_cli.h"
#include "grid/grid.h"
#include "model/model_cli.h"
#include "moe/moe_cli.h"
#include "pp/layout_cli.h"
#include "plan/plan.h"
#include "train/train.h"

static const char *PLAN_USAGE = "--world-size N [model flags] [--machine NAME|FILE] [options]";
static const char *PLAN_ABOUT =
    "Memory per rank and step time of every valid layout (tp x pp x vpp x dp, sequence\n"
    "parallelism, distributed optimizer; with --num-experts ep and etp) of a model on N\n"
    "ranks of a machine, sorted;\n"
    "layouts that do not fit in the device memory are marked. Machines: 'this' (measured\n"
    "by `mtc bench-peak`, cached), the named GPU clusters, or a JSON file (docs/plan.md).\n"
    "On this machine the memory terms are mtc's own allocation (the train banner's\n"
    "figures); on GPU clusters activations follow Korthikanti et al. 2022 in bf16.";

/* Resident memory per rank on a CPU host: the allocation, what a
 * rank-thread adds (bench-peak's rank_rss: its stack, arena, oneDNN state)
 * and the measured resident set of a process without a model (base_rss),
 * shared by the ranks of a process (rank-threads: all of them; mpirun: 1).
 * 0 where nothing was measured. */
static double rss_per_rank(const mtc_plan_row *r, const mtc_plan_machine *m, int rpp) {
    if (!(m->kern.base_rss > 0)) return 0;
    int n = rpp > 0 ? rpp : r->layout.world;
    /* several processes (mpirun): each also holds what the MPI library adds */
    double mpi = n < r->layout.world ? m->kern.mpi_rss : 0;
    return (double)r->mem.total_bytes + (n > 1 ? m->kern.rank_rss : 0) +
           (m->kern.base_rss + mpi) / n;
}

static void json_row(FILE *f, const mtc_plan_row *r, double rss, int last) {
    const mtc_plan_layout *l = &r->layout;
    char name[96];
    mtc_plan_layout_name(l, name, sizeof name);
    fprintf(f,
            "  {\"layout\": \"%s\", \"tp\": %d, \"cp\": %d, \"pp\": %d, \"vpp\": %d, \"dp\": %d, "
            "\"ep\": %d, \"etp\": %d, \"edp\": %d, "
            "\"sequence_parallel\": %d, \"distributed_optimizer\": %d, \"fits\": %d,\n"
            "   \"memory\": {\"pp_rank\": %d, \"params\": %lld, \"param_bytes\": %zu, "
            "\"grad_bytes\": %zu, \"optim_state_bytes\": %zu, \"activation_bytes\": %zu, "
            "\"comm_bytes\": %zu, \"expert_params\": %lld, \"expert_buffer_numel\": %lld, "
            "\"expert_optim_numel\": %lld, \"moe_activation_bytes\": %zu, "
            "\"total_bytes\": %zu, \"rss_bytes\": %.0f},\n"
            "   \"time\": {\"step_ms\": %.6g, \"compute_ms\": %.6g, \"elementwise_ms\": %.6g, "
            "\"tp_comm_ms\": %.6g, \"cp_comm_ms\": %.6g, \"pp_comm_ms\": %.6g, \"bubble_ms\": "
            "%.6g, \"dp_comm_ms\": "
            "%.6g, \"moe_gemm_ms\": %.6g, \"moe_comm_ms\": %.6g, \"edp_comm_ms\": %.6g, "
            "\"bubble_fraction\": %.6g, \"gemm_tflops\": %.6g, \"cpu_share\": %.4g},\n"
            "   \"tflops_per_device\": %.6g, \"hw_tflops_per_device\": %.6g, \"mfu\": %.6g}%s\n",
            name, l->tp, l->cp, l->pp, l->vpp, l->dp, l->ep > 1 ? l->ep : 1, l->etp, l->edp,
            l->sequence_parallel, l->distopt, r->fits, r->mem.pp_rank, (long long)r->mem.params,
            r->mem.param_bytes, r->mem.grad_bytes, r->mem.optim_bytes, r->mem.act_bytes,
            r->mem.comm_bytes, (long long)r->mem.expert_params,
            (long long)r->mem.expert_buffer_numel, (long long)r->mem.expert_optim_numel,
            r->mem.moe_act_bytes, r->mem.total_bytes, rss, r->time.step_s * 1e3,
            r->time.compute_s * 1e3, r->time.elementwise_s * 1e3, r->time.tp_comm_s * 1e3,
            r->time.cp_comm_s * 1e3, r->time.pp_comm_s * 1e3, r->time.bubble_s * 1e3,
            r->time.dp_comm_s * 1e3, r->time.moe_gemm_s * 1e3, r->time.moe_comm_s * 1e3,
            r->time.edp_comm_total_s * 1e3, r->time.bubble_fraction, r->time.gemm_rate * 1e-12,
            r->time.cpu_share, r->time.tflops_per_device, r->time.hw_tflops_per_device, r->time.mfu,
            last ? "" : ",");
}

static void text_table(FILE *f, const mtc_plan_row *rows, int n, int top,
                       const mtc_plan_machine *m) {
    fprintf(f, "%4s  %-30s %10s %10s %10s %10s %10s %11s %9s %7s  %s\n", "rank", "layout",
            "params MB", "grads MB", "optim MB", "acts MB", "total MB", "step ms", "TFLOP/s", "MFU",
            "fits");
    for (int i = 0; i < n && i < top; i++) {
        const mtc_plan_row *r = &rows[i];
        char name[96];
        mtc_plan_layout_name(&r->layout, name, sizeof name);
        fprintf(f, "%4d  %-30s %10.1f %10.1f %10.1f %10.1f %10.1f %11.3f %9.4g %6.1f%%  %s\n",
                i + 1, name, r->mem.param_bytes / 1048576.0, r->mem.grad_bytes / 1048576.0,
                r->mem.optim_bytes / 1048576.0, r->mem.act_bytes / 1048576.0,
                r->mem.total_bytes / 1048576.0, r->time.step_s * 1e3, r->time.tflops_per_device,
                100 * r->time.mfu, r->fits ? "yes" : "NO (out of memory)");
    }
    if (n > top) fprintf(f, "... %d more (--top %d)\n", n - top, n);
    fprintf(f,
            "legend: tpN tensor-parallel ranks, cpN context-parallel, ppN pipeline stages, vppN\n"
            "  virtual stages per rank (interleaved 1F1B), dpN data-parallel replicas, epN\n"
            "  expert-parallel, etpN expert tensor-parallel, sp sequence parallelism, do the\n"
            "  distributed optimizer; MB per rank of the largest pipeline rank; step ms one\n"
            "  iteration; TFLOP/s model FLOPs per device; MFU model FLOPs over the machine's\n"
            "  peak, as mtc train logs it%s\n",
            rows[0].layout.act_model == MTC_PLAN_ACT_MEGATRON
                ? (rows[0].layout.flash_attention
                       ? "; activations with flash attention (--no-flash-attention: without)"
                       : "; activations without flash attention")
                : "");
    fprintf(f, "machine %s: %s; memory per %s %.1f GB\n", m->name, m->description,
            m->is_cpu ? "rank = host RAM / ranks" : "device",
            m->mem_bytes / 1e9 / (m->is_cpu ? rows[0].layout.world : 1));
}

/* Every flag of `mtc plan`, with its default; seen_* record the flags the
 * command line gave (their absence means "vary it" or "the default"). */
typedef struct {
    int L, C, NH, F, T, vocab, divisible, mbs, gbs;
    int world, json, top, threads, distopt, overlap, bf16;
    int fp32, pad_high;
    int head_chunk;          /* --lm-head-chunk */
    model_cli_flags model_f; /* the architecture (model/model_cli.h) */
    layout_flags lay;        /* the shared layout rows (cli/layout_args.h) */
    int pp_rank, dp_rank, no_sp, no_do, no_vpp, sp;
    int overlap_ag, tp_overlap;
    int cp, rpp, ep, etp;
    int no_flash, use_flash; /* flash attention's activations (GPU machines' default) */
    moe_cli_flags moe_f;     /* mixture of experts (moe/moe_cli.h) */
    pp_layout_cli split_f;   /* pipeline split (pp/layout_cli.h) */
    mtc_fsdp_flags fsdp_f;   /* Megatron-FSDP, as mtc train (dp/fsdp_cli.h) */
    int fsdp, fsdp_do;       /* its strategy, and whether it runs on the distributed optimizer */
    const char *cp_comm;
    double achieved, hdrop, adrop;
    const char *machine, *explain, *recompute, *acts;
    int seen_capacity, seen_ep, seen_etp, seen_achieved, seen_groups, seen_first, seen_last,
        seen_cp;
} plan_flags;

#define PLAN_FLAGS_DEFAULTS                                                                        \
    {                                                                                              \
        .L = 4, .C = 128, .NH = 4, .T = 128, .vocab = 50257, .divisible = 128, .mbs = 4,           \
        .world = 1, .top = 20, .model_f = MODEL_CLI_DEFAULTS, .lay = LAYOUT_FLAGS_DEFAULTS,        \
        .pp_rank = -1, .dp_rank = -1, .cp = 1, .ep = 1, .moe_f = MOE_CLI_DEFAULTS,                 \
        .split_f = PP_LAYOUT_CLI_DEFAULTS, .fsdp_f = MTC_FSDP_FLAGS_DEFAULTS, .cp_comm = "p2p",    \
        .head_chunk = MTC_TRAIN_HEAD_CHUNK, .hdrop = 0.1, .adrop = 0.1, .machine = "this",         \
        .recompute = "none"                                                                        \
    }

/* The flag table into f. Returns cli_parse's status (>= 0: exit with it) or -1. */
static int plan_parse(plan_flags *f, int argc, char **argv) {
    mtc_arg args[] = {
        MODEL_SHAPE_ARGS(f->L, f->C, f->NH, f->F, f->T), /* mtc train's (model/model_cli.h) */
        {"vocab-size", NULL, MTC_ARG_INT, &f->vocab, "N", "vocabulary (default 50257)", 0},
        {"make-vocab-size-divisible-by", NULL, MTC_ARG_INT, &f->divisible, "N",
         "pad the vocabulary to a multiple of N x tp (default 128)", 0},
        /* mtc train's (model/model_cli.h); --num-query-groups alone implies
         * --group-query-attention here */
        MODEL_CLI_ARGS(f->model_f),
        {"hidden-dropout", NULL, MTC_ARG_DOUBLE, &f->hdrop, "P",
         "as mtc train (default 0.1): on this machine its masks cost time", 0},
        {"attention-dropout", NULL, MTC_ARG_DOUBLE, &f->adrop, "P", "as mtc train (default 0.1)",
         0},
        {"micro-batch-size", NULL, MTC_ARG_INT, &f->mbs, "N", "samples per microbatch (default 4)",
         0},
        {"global-batch-size", NULL, MTC_ARG_INT, &f->gbs, "N",
         "samples per iteration (default micro batch x world)", 0},
        {"world-size", NULL, MTC_ARG_INT, &f->world, "N", "ranks (GPUs or rank-threads)", 0},
        {"context-parallel-size", "cp", MTC_ARG_INT, &f->cp, "N",
         "context-parallel ranks, kept in every layout (default: every valid cp on GPU "
         "machines, 1 on 'this')",
         0},
        {"no-flash-attention", NULL, MTC_ARG_FLAG, &f->no_flash, NULL,
         "GPU machines: price the attention's 5as/h activations (scores, probabilities, mask) "
         "as without flash or fused attention (default there: flash attention's log-sum-exp)",
         0},
        {"use-flash-attn", NULL, MTC_ARG_FLAG, &f->use_flash, NULL,
         "Megatron's flag: flash attention's activations on any machine", 0},
        {"cp-comm-type", NULL, MTC_ARG_STRING, &f->cp_comm, "S",
         "p2p|all_gather|a2a, as mtc train (default p2p)", 0},
        MOE_CLI_ARGS(f->moe_f),
        MTC_FSDP_CLI_ARGS(f->fsdp_f),
        PP_LAYOUT_CLI_ARGS(f->split_f),
        {"expert-model-parallel-size", "ep", MTC_ARG_INT, &f->ep, "N",
         "expert-parallel ranks, fixed in every layout (default: every valid ep)", 0},
        {"expert-tensor-parallel-size", "etp", MTC_ARG_INT, &f->etp, "N",
         "expert-tensor-parallel ranks: 1 or the TP size, fixed (default: both)", 0},
        {"use-distributed-optimizer", NULL, MTC_ARG_FLAG, &f->distopt, NULL,
         "only layouts with the distributed optimizer (default: both)", 0},
        LAYOUT_ARG_ND(f->lay),
        {"pad-buckets-for-high-nccl-busbw", NULL, MTC_ARG_FLAG, &f->pad_high, NULL,
         "pad buckets to lcm(dp, 128, 65536)", 0},
        {"sequence-parallel", NULL, MTC_ARG_FLAG, &f->sp, NULL,
         "only layouts with sequence parallelism where tp > 1 (default: both)", 0},
        {"no-sequence-parallel", NULL, MTC_ARG_FLAG, &f->no_sp, NULL,
         "only layouts without sequence parallelism", 0},
        {"no-distributed-optimizer", NULL, MTC_ARG_FLAG, &f->no_do, NULL,
         "only layouts without the distributed optimizer", 0},
        {"no-interleaved", NULL, MTC_ARG_FLAG, &f->no_vpp, NULL,
         "only the plain 1F1B schedule (no vpp > 1)", 0},
        {"overlap-grad-reduce", NULL, MTC_ARG_FLAG, &f->overlap, NULL,
         "gradient reduction overlapped with the last backward", 0},
        {"overlap-param-gather", NULL, MTC_ARG_FLAG, &f->overlap_ag, NULL,
         "the distributed optimizer's parameter all-gather overlapped with the forward", 0},
        {"tp-comm-overlap", NULL, MTC_ARG_FLAG, &f->tp_overlap, NULL,
         "GPU machines: a sequence-parallel layer's TP collectives overlapped with its GEMMs "
         "(Megatron's, TransformerEngine's userbuffers; mtc has none)",
         0},
        LAYOUT_ARG_MB_GROUP(f->lay),
        {"bf16", NULL, MTC_ARG_FLAG, &f->bf16, NULL,
         "bf16 weights with fp32 main grads and Adam state (default on GPU machines)", 0},
        {"fp32", NULL, MTC_ARG_FLAG, &f->fp32, NULL,
         "fp32 everything (mtc today; default on 'this')", 0},
        {"lm-head-chunk", NULL, MTC_ARG_INT, &f->head_chunk, "N",
         "tokens per chunk of the fused LM head and loss, as mtc train's flag (default 1024)", 0},
        {"recompute-granularity", NULL, MTC_ARG_STRING, &f->recompute, "S",
         "none|selective|full (default none)", 0},
        {"activations", NULL, MTC_ARG_STRING, &f->acts, "S",
         "mtc|megatron: mtc's arena or Korthikanti's table (default mtc on 'this', else "
         "megatron)",
         0},
        {"machine", NULL, MTC_ARG_STRING, &f->machine, "NAME|FILE",
         "this (default, from mtc bench-peak), a named cluster (an unknown name lists them) or a "
         "JSON file",
         0},
        {"achieved-fraction", NULL, MTC_ARG_DOUBLE, &f->achieved, "X",
         "override the machine's achieved fraction of GEMM peak", 0},
        {"threads", NULL, MTC_ARG_INT, &f->threads, "N",
         "threads per rank on this machine (default cores / ranks, as mtc train)", 0},
        {"ranks-per-process", NULL, MTC_ARG_INT, &f->rpp, "N",
         "ranks of one process on this machine (default world size: rank-threads; 1 under "
         "mpirun): they share its fixed resident memory, and MPI processes outnumbering the "
         "cores are priced with bench-peak's MPI probe",
         0},
        {"explain", NULL, MTC_ARG_STRING, &f->explain, "LAYOUT",
         "every term of one layout, e.g. tp2-pp2-vpp2-sp-do or tp=2,pp=2", 0},
        {"pp-rank", NULL, MTC_ARG_INT, &f->pp_rank, "R",
         "with --explain: the memory of pipeline rank R (default: the largest)", 0},
        {"dp-rank", NULL, MTC_ARG_INT, &f->dp_rank, "R",
         "with --explain and the distributed optimizer: the optimizer shard of rank R of the "
         "data x context-parallel group, and with ep > 1 the expert shard of its last TP rank "
         "(default: the largest)",
         0},
        {"json", NULL, MTC_ARG_FLAG, &f->json, NULL, "JSON instead of the table", 0},
        {"top", NULL, MTC_ARG_INT, &f->top, "N", "rows of the table (default 20)", 0},
    };
    int nargs = (int)(sizeof args / sizeof args[0]);
    int st = cli_parse("plan", PLAN_USAGE, PLAN_ABOUT, args, nargs, argc, argv);
    if (st >= 0) return st;
    f->seen_capacity = mtc_args_seen(args, nargs, "moe-expert-capacity-factor");
    f->seen_ep = mtc_args_seen(args, nargs, "expert-model-parallel-size");
    f->seen_etp = mtc_args_seen(args, nargs, "expert-tensor-parallel-size");
    f->seen_achieved = mtc_args_seen(args, nargs, "achieved-fraction");
    f->seen_groups = mtc_args_seen(args, nargs, "num-query-groups");
    f->seen_first = mtc_args_seen(args, nargs, "decoder-first-pipeline-num-layers");
    f->seen_last = mtc_args_seen(args, nargs, "decoder-last-pipeline-num-layers");
    f->seen_cp = mtc_args_seen(args, nargs, "context-parallel-size");
    if (mtc_fsdp_flags_apply(&f->fsdp_f, NULL, &f->fsdp, &f->fsdp_do) != MTC_OK)
        return cli_usage_error("plan", "%s", mtc_error_detail());
    if (f->fsdp_do && f->no_do)
        return cli_usage_error("plan",
                               "--use-megatron-fsdp %s runs on the distributed optimizer: "
                               "drop --no-distributed-optimizer",
                               mtc_fsdp_strategy_name(f->fsdp));
    if (f->fsdp_do) f->distopt = 1; /* Megatron's rule, as mtc train */
    return -1;
}

/* The flags' own rules, before any machine or model is read; the MoE
 * flags resolved into *moe. Returns a usage error's status or -1. */
static int plan_check(const plan_flags *f, mtc_moe_config *moe) {
    /* before enumerating a huge world's layouts */
    if (f->world < 1 || f->world > MTC_GRID_MAX_WORLD)
        return cli_usage_error("plan", "--world-size %d must be 1..%d (ranks of one job)", f->world,
                               MTC_GRID_MAX_WORLD);
    if (f->mbs < 1 || f->mbs > MTC_TRAIN_MAX_MICRO_BATCH || f->gbs < 0)
        return cli_usage_error("plan",
                               "--micro-batch-size %d must be 1..%d and --global-batch-size %d "
                               ">= 0 (0: micro-batch-size x world)",
                               f->mbs, MTC_TRAIN_MAX_MICRO_BATCH, f->gbs);
    /* every layout (and each of its virtual-stage splits) registers the
     * model's layers: the planner stops at 1024 layers (Megatron's largest
     * published models have 128) */
    if (f->L > 1024)
        return cli_usage_error(
            "plan", "num-layers=%d is more than mtc plan models (valid: at most 1024)", f->L);
    if (f->cp < 1) return cli_usage_error("plan", "context-parallel-size=%d must be >= 1", f->cp);
    if (f->divisible < 1 || f->divisible > MTC_MODEL_MAX_VOCAB_DIVISOR)
        return cli_usage_error("plan", "make-vocab-size-divisible-by=%d is outside [1, %d]",
                               f->divisible, MTC_MODEL_MAX_VOCAB_DIVISOR);
    int cp_type = cp_comm_type_parse(f->cp_comm);
    if (cp_type < 0 || cp_type == CP_COMM_A2A_P2P)
        return cli_usage_error(
            "plan",
            "cp-comm-type=%s: the planner models p2p, all_gather and a2a (for "
            "a2a+p2p plan its two parts: a2a at the inner size, p2p at the outer)",
            f->cp_comm);
    if (f->head_chunk < 1)
        return cli_usage_error("plan", "lm-head-chunk=%d must be >= 1 (tokens per chunk)",
                               f->head_chunk);
    if (f->bf16 && f->fp32) return cli_usage_error("plan", "give one of --bf16 and --fp32");
    if (f->top < 1) return cli_usage_error("plan", "top=%d must be >= 1", f->top);
    if (f->rpp < 0 || f->rpp > f->world)
        return cli_usage_error("plan", "ranks-per-process=%d must be in [1, world-size=%d]", f->rpp,
                               f->world);
    if (!(f->hdrop >= 0 && f->hdrop < 1) || !(f->adrop >= 0 && f->adrop < 1))
        return cli_usage_error("plan",
                               "hidden-dropout=%g and attention-dropout=%g must be in [0, 1)",
                               f->hdrop, f->adrop);
    if (f->lay.nd < 1)
        return cli_usage_error("plan", "num-distributed-optimizer-instances=%d must be >= 1",
                               f->lay.nd);
    if (f->seen_achieved && !(f->achieved > 0 && f->achieved <= 1))
        return cli_usage_error("plan", "achieved-fraction=%g must be in (0, 1]", f->achieved);
    /* MoE: mtc train's flags and rules (moe/moe_cli.h, mtc_moe_validate in
     * the layout check) */
    if (moe_cli_resolve(&f->moe_f, f->seen_capacity, moe) != MTC_OK)
        return cli_usage_error("plan", "%s", mtc_error_detail());
    if (f->ep < 1)
        return cli_usage_error("plan", "expert-model-parallel-size=%d must be >= 1", f->ep);
    if (f->seen_etp && f->etp < 1)
        return cli_usage_error("plan", "expert-tensor-parallel-size=%d must be >= 1", f->etp);
    if (moe->num_experts == 0 && f->ep > 1)
        return cli_usage_error("plan",
                               "expert-model-parallel-size=%d needs --num-experts (expert "
                               "parallelism splits experts; the model has none)",
                               f->ep);
    return -1;
}

/* The --machine, its overrides and the rules that depend on it. Returns an
 * exit status or -1. */
static int plan_machine(const plan_flags *f, mtc_plan_machine *m) {
    mtc_result_t rc = mtc_plan_machine_load(f->machine, m);
    /* a --machine file that is missing, unreadable or malformed is the user's input */
    if (rc == MTC_ERR_INVALID_ARGUMENT || rc == MTC_ERR_FORMAT || rc == MTC_ERR_IO)
        return cli_usage_error("plan", "%s", mtc_error_detail());
    if (rc != MTC_OK) return cli_fail("plan", rc);
    if (f->achieved > 0) m->achieved = f->achieved;
    if (f->tp_overlap && m->is_cpu)
        return cli_usage_error("plan",
                               "tp-comm-overlap: machine %s is a CPU host, where mtc's TP "
                               "collectives block; the overlap is Megatron's on GPU machines "
                               "(--machine dgx-h100, ...)",
                               m->name);
    if (f->tp_overlap && f->no_sp)
        return cli_usage_error("plan", "tp-comm-overlap needs sequence parallelism (Megatron's "
                                       "rule): drop --no-sequence-parallel");
    if (f->overlap_ag && f->no_do)
        return cli_usage_error("plan", "overlap-param-gather needs the distributed optimizer "
                                       "(Megatron's rule): drop --no-distributed-optimizer");
    return -1;
}

/* The planner's layout of the flags' model on the machine (tp = pp = vpp
 * = 1: the enumeration varies them). Returns a usage error's status or -1. */
static int plan_layout(const plan_flags *f, const mtc_moe_config *moe, const mtc_plan_machine *m,
                       mtc_plan_layout *lp) {
    mtc_plan_layout l;
    memset(&l, 0, sizeof l);
    mtc_model_config *mc = &l.model;
    mc->num_layers = f->L, mc->hidden_size = f->C, mc->num_heads = f->NH, mc->seq_length = f->T;
    mc->ffn_hidden_size = f->F ? f->F : model_cli_default_ffn(f->C, f->model_f.swiglu);
    mc->max_position_embeddings = f->T, mc->vocab_size = f->vocab, mc->padded_vocab_size = f->vocab;
    if (model_cli_resolve(&f->model_f, f->seen_groups, MODEL_CLI_GROUPS_IMPLY_GQA, mc) != MTC_OK)
        return cli_usage_error("plan", "%s", mtc_error_detail());
    mc->hidden_dropout = (float)f->hdrop, mc->attention_dropout = (float)f->adrop;
    mc->moe = *moe;
    if (moe->num_experts > 0) { /* the layout-free MoE rules, before any layout */
        mc->padded_vocab_size = f->vocab > 0 ? f->vocab : 1;
        if (mtc_moe_validate(moe, f->L, mc->ffn_hidden_size, 1, 0, 1, 1, !f->model_f.nobias) !=
            MTC_OK)
            return cli_usage_error("plan", "%s", mtc_error_detail());
        /* every layout registers each expert of its chunks: the planner stops at
         * 65536 expert MLPs (DeepSeek-V3 has 256 x 58) */
        long long xm = (long long)moe->num_experts * mtc_moe_num_layers(moe, f->L);
        if (xm > 65536)
            return cli_usage_error("plan",
                                   "num-experts=%d x %d MoE layers = %lld expert MLPs is more than "
                                   "mtc plan models (valid: at most 65536)",
                                   moe->num_experts, mtc_moe_num_layers(moe, f->L), xm);
    }
    l.ep = f->ep, l.etp = f->etp;
    if (pp_layout_cli_resolve(&f->split_f, f->seen_first, f->seen_last, &l.split) != MTC_OK)
        return cli_usage_error("plan", "%s", mtc_error_detail());
    l.split.mtp_num_layers = f->model_f.mtp_layers; /* a layout string's 'm' count */
    l.vocab_divisible = f->divisible;
    l.world = f->world, l.tp = l.pp = l.vpp = 1, l.cp = f->cp;
    l.cp_comm_type = cp_comm_type_parse(f->cp_comm); /* plan_check refused the others */
    l.micro_batch = f->mbs,
    l.global_batch =
        f->gbs ? f->gbs
               : (int)((int64_t)f->mbs * f->world > INT_MAX ? INT_MAX : (int64_t)f->mbs * f->world),
    l.mb_group = f->lay.mb_group;
    l.distopt = f->distopt, l.distopt_instances = f->lay.nd, l.pad_high_busbw = f->pad_high;
    l.fsdp_strategy = f->fsdp, l.fsdp_unit_size = f->fsdp_f.unit_size;
    l.fsdp_outer_optim = mtc_fsdp_flags_outer_optim(&f->fsdp_f);
    l.overlap_grad_reduce = f->overlap;
    l.head_chunk = f->head_chunk;
    l.overlap_param_gather = f->overlap_ag, l.tp_comm_overlap = f->tp_overlap;
    l.precision = f->bf16     ? MTC_PLAN_BF16
                  : f->fp32   ? MTC_PLAN_FP32
                  : m->is_cpu ? MTC_PLAN_FP32
                              : MTC_PLAN_BF16;
    if (!strcmp(f->recompute, "full"))
        l.recompute = MTC_PLAN_RECOMPUTE_FULL;
    else if (!strcmp(f->recompute, "selective"))
        l.recompute = MTC_PLAN_RECOMPUTE_SELECTIVE;
    else if (strcmp(f->recompute, "none"))
        return cli_usage_error("plan", "recompute-granularity=%s is not none, selective or full",
                               f->recompute);
    if (!f->acts)
        l.act_model = m->is_cpu ? MTC_PLAN_ACT_MTC : MTC_PLAN_ACT_MEGATRON;
    else if (!strcmp(f->acts, "mtc"))
        l.act_model = MTC_PLAN_ACT_MTC;
    else if (!strcmp(f->acts, "megatron"))
        l.act_model = MTC_PLAN_ACT_MEGATRON;
    else
        return cli_usage_error("plan", "activations=%s is not mtc or megatron", f->acts);
    l.ranks_per_process = f->rpp;
    if (f->use_flash && f->no_flash)
        return cli_usage_error("plan", "give one of --use-flash-attn and --no-flash-attention");
    l.flash_attention = f->use_flash || (!m->is_cpu && !f->no_flash);
    if (l.act_model == MTC_PLAN_ACT_MTC &&
        (l.precision != MTC_PLAN_FP32 || l.recompute != MTC_PLAN_RECOMPUTE_NONE))
        return cli_usage_error("plan", "--activations mtc describes mtc's fp32 arena without "
                                       "recomputation: use --activations megatron with --bf16 or "
                                       "--recompute-granularity");
    if (m->is_cpu && l.precision == MTC_PLAN_BF16 && !(m->peak_flops > 0))
        return cli_usage_error("plan", "machine %s has no bf16 GEMM rate (use --fp32)", m->name);

    *lp = l;
    return -1;
}

/* --explain LAYOUT: every term of one prediction (or its JSON row). */
static int plan_explain_one(const plan_flags *f, const mtc_plan_layout *lp,
                            const mtc_plan_machine *m) {
    mtc_plan_layout l = *lp;
    if (mtc_plan_layout_parse(&l, f->explain) != MTC_OK || mtc_plan_layout_check(&l) != MTC_OK)
        return cli_usage_error("plan", "%s", mtc_error_detail());
    if (f->pp_rank >= l.pp)
        return cli_usage_error("plan", "pp-rank=%d is outside [0, %d)", f->pp_rank, l.pp);
    if (f->dp_rank >= l.dp * l.cp)
        return cli_usage_error("plan", "dp-rank=%d is outside [0, %d) (data x context parallel)",
                               f->dp_rank, l.dp * l.cp);
    mtc_plan_row r;
    r.layout = l;
    mtc_result_t rc =
        f->pp_rank >= 0 || f->dp_rank >= 0
            ? mtc_plan_memory_rank(&l, f->pp_rank >= 0 ? f->pp_rank : l.pp - 1, f->dp_rank, &r.mem)
            : mtc_plan_memory_peak(&l, &r.mem);
    if (rc == MTC_OK) rc = mtc_plan_time_step(&l, m, f->threads, &r.time);
    if (rc != MTC_OK) return cli_fail("plan", rc);
    r.fits = (double)r.mem.total_bytes <= m->mem_bytes / (m->is_cpu ? l.world : 1);
    if (f->json) {
        fprintf(stdout, "[\n");
        json_row(stdout, &r, rss_per_rank(&r, m, f->rpp), 1);
        fprintf(stdout, "]\n");
    } else {
        mtc_plan_explain(stdout, &l, m, &r.mem, &r.time);
        int per = f->rpp > 0 ? f->rpp : l.world;
        char mpi[64] = "";
        if (per < l.world)
            snprintf(mpi, sizeof mpi, " + an MPI process's %.1f MB", m->kern.mpi_rss / 1048576.0);
        if (m->kern.base_rss > 0)
            printf("resident per rank (estimate): %.2f MB = total + (a process's %.1f MB "
                   "without a model%s, bench-peak) / %d ranks per process%s\n",
                   rss_per_rank(&r, m, f->rpp) / 1048576.0, m->kern.base_rss / 1048576.0, mpi, per,
                   per > 1 ? " + a rank-thread's own" : "");
        if (!r.fits) printf("does NOT fit in the device memory\n");
    }
    return 0;
}

/* Every valid layout, sorted: the table or the JSON list. */
static int plan_list(const plan_flags *f, const mtc_plan_layout *lp, const mtc_plan_machine *m) {
    mtc_plan_layout l = *lp;
    /* the whole world must split: refuse a model no layout can take */
    mtc_plan_row *rows = NULL;
    int n = 0;
    if (f->sp && f->no_sp)
        return cli_usage_error("plan",
                               "give one of --sequence-parallel and --no-sequence-parallel");
    if (f->distopt && f->no_do)
        return cli_usage_error(
            "plan", "give one of --use-distributed-optimizer and --no-distributed-optimizer");
    mtc_plan_search search = {.vary_sp = !f->sp && !f->no_sp,
                              .vary_distopt = !f->distopt && !f->no_do,
                              .vary_vpp = !f->no_vpp,
                              .vary_ep = !f->seen_ep,
                              .vary_etp = !f->seen_etp,
                              .vary_cp = !m->is_cpu && !f->seen_cp};
    l.sequence_parallel = f->sp;
    mtc_result_t rc = mtc_plan_enumerate(&l, m, f->threads, &search, &rows, &n);
    if (rc == MTC_ERR_INVALID_ARGUMENT) return cli_usage_error("plan", "%s", mtc_error_detail());
    if (rc != MTC_OK) return cli_fail("plan", rc);
    if (n == 0) {
        free(rows);
        mtc_plan_layout c1 = l; /* say why the simplest layout fails */
        if (mtc_plan_layout_check(&c1) != MTC_OK)
            return cli_usage_error("plan", "no valid layout on %d ranks: %s", f->world,
                                   mtc_error_detail());
        return cli_usage_error("plan", "no valid layout on %d ranks", f->world);
    }
    if (f->json) {
        fprintf(stdout, "[\n");
        for (int i = 0; i < n; i++)
            json_row(stdout, &rows[i], rss_per_rank(&rows[i], m, f->rpp), i == n - 1);
        fprintf(stdout, "]\n");
    } else {
        text_table(stdout, rows, n, f->top, m);
    }
    free(rows);
    return 0;
}

int cli_cmd_plan(int argc, char **argv) {
    plan_flags f = PLAN_FLAGS_DEFAULTS;
    mtc_moe_config moe;
    mtc_plan_machine m;
    mtc_plan_layout l;
    int st = plan_parse(&f, argc, argv);
    if (st < 0) st = plan_check(&f, &moe);
    if (st < 0) st = plan_machine(&f, &m);
    if (st < 0) st = plan_layout(&f, &moe, &m, &l);
    if (st >= 0) return st;
    return f.explain ? plan_explain_one(&f, &l, &m) : plan_list(&f, &l, &m);
}
