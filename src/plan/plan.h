/* plan/plan.h - the memory and step-time model of a layout (`mtc plan`).
 *
 * Memory per rank (plan/memory.c): parameters, gradients and optimizer
 * state from the model's own parameter registry and the data-parallel
 * buffer layout (dp/layout.h: the distributed optimizer's padding), so an
 * mtc run's figures are the banner's to the byte; activations from a table
 * of the buffers one in-flight microbatch keeps (plan/activations.c) times
 * the schedule's in-flight peak per model chunk (pp/schedule.h).
 * Two activation tables: MTC (this build's arena, fp32, exact) and
 * MEGATRON (Korthikanti et al. 2022: sbh(34 + 5as/h) per layer and its
 * SP / selective / full-recompute variants, what a GPU run keeps).
 *
 * Step time per rank (plan/time.c): GEMM FLOPs (Megatron's formula with
 * recomputation) at the machine's achieved GEMM rate, element-wise passes
 * at its memory bandwidth, each collective's volume on an alpha-beta model
 * of the link its group crosses (intra- or inter-node, from where the
 * group's ranks sit in Megatron's tp-cp-ep-dp-pp order), the pipeline
 * bubble of the schedule mtc runs (pp_schedule_simulate) and the overlap
 * mtc does (gradient reduction under the last backward).
 *
 * Mixture of experts (model.moe): the registry split over EP and ETP as
 * model/model.c splits it, the expert-parallel buffer over expert-DP with
 * its own distributed-optimizer instance (train/train_setup.c), the MoE
 * rows of the arena (moe_acts_floats, moe_scratch_floats); in the step
 * time the router, the experts' rows (tokens x topk x etp, capacity-bounded),
 * the dispatcher's collectives and the expert-DP reduction.
 *
 * Machines (plan/machine.c): a small JSON description (docs/plan.md), the
 * named GPU clusters of src/plan/machines.json compiled in, and this
 * machine as measured by `mtc bench-peak` (cached).
 *
 * Pure computation: nothing here allocates model buffers or communicates. */
#ifndef MTC_PLAN_PLAN_H
#define MTC_PLAN_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "comm/comm.h"
#include "core/result.h"
#include "model/model.h"
#include "pp/layout.h"

typedef enum { MTC_PLAN_FP32 = 0, MTC_PLAN_BF16 } mtc_plan_precision;
typedef enum {
    MTC_PLAN_RECOMPUTE_NONE = 0,
    MTC_PLAN_RECOMPUTE_SELECTIVE, /* attention core (Korthikanti's selective) */
    MTC_PLAN_RECOMPUTE_FULL       /* every layer from its input */
} mtc_plan_recompute;
typedef enum {
    MTC_PLAN_ACT_MTC = 0, /* this build's activation arena (model/model.c gpt_carve) */
    MTC_PLAN_ACT_MEGATRON /* Korthikanti et al. 2022 / report_theoretical_memory */
} mtc_plan_act_model;

/* One layout of one model. The model's padded vocabulary is recomputed
 * per layout from vocab_size and vocab_divisible (Megatron pads to a
 * multiple of divisible x tp). */
typedef struct {
    mtc_model_config model;
    int vocab_divisible;        /* --make-vocab-size-divisible-by (0 = 128) */
    int world, tp, pp, vpp, cp; /* vpp 0/1 = not interleaved */
    pp_layout_args split;       /* uneven pipeline split / layout string (zero = even) */
    int cp_comm_type;           /* cp/cp.h: CP_COMM_P2P, CP_COMM_ALL_GATHER, CP_COMM_A2A */
    int dp;                     /* derived: world / (tp pp cp) (filled by mtc_plan_layout_check) */
    /* mixture of experts (model.moe.num_experts > 0): Megatron's expert
     * generator, world = etp x ep x edp x pp */
    int ep;  /* --expert-model-parallel-size (0 = 1) */
    int etp; /* --expert-tensor-parallel-size: 1 or tp (0 = tp; resolved by the check) */
    int edp; /* derived: expert-data-parallel size world / (etp ep pp) */
    int sequence_parallel;
    int distopt, distopt_instances, pad_high_busbw;
    /* Megatron-FSDP (dp/fsdp.h): the strategy (0 off; optim and the grads
     * strategies lay a bucket per unit out, the grads ones padded to whole
     * pages per shard) and --suggested-communication-unit-size */
    int fsdp_strategy;
    int64_t fsdp_unit_size;
    /* --outer-dp-sharding-strategy optim (HFSDP, with optim_grads_params and
     * distopt_instances > 1): the optimizer state sharded over the
     * instances too, units padded to whole pages per slice */
    int fsdp_outer_optim;
    int overlap_grad_reduce;
    /* Megatron's overlaps mtc does not have (GPU machines): the
     * distributed optimizer's parameter all-gather under the forward
     * (--overlap-param-gather), the TP collectives of a sequence-parallel
     * layer under its GEMMs (--tp-comm-overlap, TransformerEngine's
     * userbuffers) */
    int overlap_param_gather, tp_comm_overlap;
    int64_t ddp_bucket_size; /* 0 = Megatron's default */
    int micro_batch, global_batch, mb_group;
    mtc_plan_precision precision;
    mtc_plan_recompute recompute;
    mtc_plan_act_model act_model;
    /* MEGATRON table: flash (fused) attention keeps the softmax's
     * log-sum-exp, not the 5as/h term of scores, probabilities and mask */
    int flash_attention;
    int head_chunk; /* --lm-head-chunk: tokens per LM-head chunk (0 = MTC_TRAIN_HEAD_CHUNK) */
    int ranks_per_process; /* CPU: ranks of one process (0 = the world: rank-threads; 1: mpirun) */
} mtc_plan_layout;

/* Megatron's and mtc's rules for the layout (grid, TP split, batch,
 * schedule, distributed-optimizer instances): one line naming the value and
 * the fix (INVALID_ARGUMENT). Fills l->dp and the padded vocabulary. */
mtc_result_t mtc_plan_layout_check(mtc_plan_layout *l);
/* HFSDP: fsdp_outer_optim with optim_grads_params over several
 * distributed-optimizer instances (with one the flag changes nothing). */
int mtc_plan_hfsdp(const mtc_plan_layout *l);

/* ---- memory ---- */

/* Megatron-FSDP optim_grads*: the collectives of one step of the dense
 * buffer over its shard group, as dp/fsdp.c issues them (its release rule:
 * a unit stays while the call that needed it or the next one runs), bytes
 * of the whole fp32 units (what --metrics counts). Per chunk of n units
 * (total T elements; e the first unit's, the embedding's on the first
 * stage; l1 the first layer's; h the last, the head's on the last stage):
 *   forward, optim_grads_params: every unit (+ the embedding again for a
 *     tied head), except on microbatches after the first the first layer
 *     (still resident from the backward before);
 *   backward: every unit but the last two (resident from the forward: a
 *     call needing the units of the one before does not move the window;
 *     but the last only after a tied head, whose call for the embedding
 *     comes between) and the embedding (its backward reads no params);
 *   --overlap-param-gather: the backward's prefetch of the embedding is
 *     stale after the optimizer step (+e on the first microbatch), and with
 *     a tied head the head's call for the embedding turns the backward's
 *     prefetch once (+l1 on every microbatch);
 *   reduce-scatter: every unit on every microbatch; optim_grads: the
 *     params all-gathered unit by unit after the step;
 *   HSDP: each unit's shard all-reduced over the instances after its
 *     reduce-scatter;
 *   HFSDP: instead, once per step, each unit's shard reduce-scattered
 *     over the instances after the last microbatch and the slices
 *     all-gathered back at the first need after the step (one call each
 *     per unit, the shard's bytes);
 *   --bf16 with optim_grads_params: the unit all-gathers carry bf16 (half).
 * Exact for pp 1 (checked against --metrics by tests/plan/fsdp_traffic.sh);
 * with pp > 1 the schedule interleaves other microbatches' passes and the
 * resident units of the forward / backward turn are not modelled. */
typedef struct {
    double ag_fwd_calls, ag_fwd_bytes;     /* optim_grads_params: forward all-gathers */
    double ag_bwd_calls, ag_bwd_bytes;     /* optim_grads_params: backward all-gathers */
    double ag_step_calls, ag_step_bytes;   /* optim_grads: the all-gather after the step */
    double rs_calls, rs_bytes;             /* reduce-scatters of every unit, every microbatch */
    double ar_calls, ar_bytes;             /* HSDP: the shards' all-reduce over the instances */
    double outer_rs_calls, outer_rs_bytes; /* HFSDP: the shards' reduce-scatter over them */
    double outer_ag_calls, outer_ag_bytes; /* HFSDP: the slices' all-gather over them */
    double units;                          /* units of the chunks' dense buffers */
    double ag_width; /* bytes per element of the unit all-gathers: 4, or 2 with bf16
                        optim_grads_params (each unit gathered as bf16) */
} mtc_plan_fsdp_comm;

typedef struct {
    int pp_rank;
    int64_t params;       /* parameters held (all chunks, no padding): the banner's count */
    int64_t buffer_numel; /* flat buffer elements, distributed-optimizer padding included */
    int64_t optim_numel;  /* elements whose optimizer state this rank holds */
    /* Megatron-FSDP optim_grads*: the params' and grads' peak resident
     * elements (dp/fsdp.c: shards plus gathered units) */
    int64_t fsdp_param_numel, fsdp_grad_numel;
    int64_t fsdp_shard_numel;     /* ... of which the shards (bf16: the fp32 main params) */
    mtc_plan_fsdp_comm fsdp_comm; /* optim_grads*: one step's collectives of the dense buffer */
    size_t param_bytes;           /* the weights this rank computes with */
    size_t grad_bytes;            /* gradient buffer (fp32 main grads with bf16) */
    size_t optim_bytes;           /* Adam m and v (+ fp32 master weights with bf16) */
    size_t act_bytes;             /* activations of every in-flight microbatch + scratch */
    size_t act_slot_bytes;        /* one in-flight microbatch of chunk 0 */
    size_t comm_bytes;            /* communication buffers (pipeline messages, reduction staging) */
    /* mixture of experts, parts of the figures above: the expert-parallel
     * buffer (ep > 1: the local experts, reduced over expert-DP and sharded
     * by their own distributed-optimizer instance) and the MoE layers'
     * activations (routing, dispatched rows, expert fc1 / act, dispatch
     * buffers, shared expert) of every in-flight microbatch */
    int64_t expert_params;       /* expert parameters held (local experts only) */
    int64_t expert_buffer_numel; /* the expert-parallel buffer (0 with ep 1: experts are dense) */
    int64_t expert_optim_numel;  /* its optimizer-state elements on this rank */
    size_t moe_act_bytes;        /* MoE share of act_bytes */
    size_t total_bytes;          /* sum of the above */
    int inflight[64];            /* per chunk: the schedule's peak of live microbatches */
    int nchunks;
} mtc_plan_memory;

/* Memory of pipeline rank pp_rank (every TP rank of a stage holds the same
 * amounts; with the distributed optimizer the DP ranks' shards differ by
 * the bucket padding, which holds no optimizer state: dp_rank -1 = the
 * largest shard, else that rank of the dp x cp group, taken within its
 * optimizer instance). Layout checked
 * first. */
mtc_result_t mtc_plan_memory_rank(const mtc_plan_layout *l, int pp_rank, int dp_rank,
                                  mtc_plan_memory *out);
/* The pipeline rank with the largest total (ties: the last). */
mtc_result_t mtc_plan_memory_peak(const mtc_plan_layout *l, mtc_plan_memory *out);

/* ---- activation tables (plan/activations.c) ---- */

/* Bytes one in-flight microbatch keeps for nl layers of a chunk (with the
 * embedding output / final norm and logits when has_head), and the chunk's
 * shared scratch, under the layout's activation model. */
size_t mtc_plan_act_slot_bytes(const mtc_plan_layout *l, int nl, int has_embedding, int has_head);
size_t mtc_plan_act_shared_bytes(const mtc_plan_layout *l, int nl, int has_head);
/* The MoE layers' part of mtc_plan_act_slot_bytes: per in-flight
 * microbatch their routing, dispatched rows, expert fc1 / activation
 * outputs, gathered tokens (allgather) or received rows (alltoall) and the
 * shared expert's fc1 output; MTC: moe_acts_floats per layer as
 * model/model.c carves it (the arena sizes every layer of a chunk alike,
 * the MTP depths' layers of the chunk with the loss, has_head, included);
 * MEGATRON: the MoE layers' rows for balanced routing (docs/plan.md). */
size_t mtc_plan_act_moe_slot_bytes(const mtc_plan_layout *l, int nl, int has_head);
/* Korthikanti et al. 2022, bytes per layer per microbatch (16-bit
 * activations, 1-byte dropout masks): sbh(34 + 5as/h) without TP; with
 * tensor parallelism t sbh(10 + 24/t + 5as/(ht)); with SP sbh(34 + 5as/h)/t;
 * selective recompute drops the 5as/h term; full recompute keeps the
 * layer input 2sbh (/t with SP). */
double mtc_plan_korthikanti_layer_bytes(double s, double b, double h, double a, int t, int sp,
                                        mtc_plan_recompute rc);

/* ---- machines (plan/machine.c) ---- */

typedef struct {
    double bw;  /* bytes/s per rank (unidirectional bus bandwidth) */
    double lat; /* seconds per message step */
    /* CPU (bench-peak, collectives between compute phases on 2
     * rank-threads): seconds a call waits for its peer (skew, the
     * spin-then-sleep wake-up), once per call (0 on GPU machines) */
    double sync;
} mtc_plan_link;

/* CPU host: what mtc's kernels cost here (plan/kernels.c, `mtc bench-peak`),
 * per CPU second of one thread with every core busy. measured 0 = absent
 * (GPU machines, an older cache): the element-wise passes are then priced
 * at mem_bw. */
typedef struct {
    int measured;
    double norm_fwd, norm_bwd; /* s per element of (N, C) */
    double gelu_fwd, gelu_bwd; /* s per element of (N, F) */
    double dropout;            /* s per element (mask drawn and applied) */
    double resid;              /* s per element (out = a + b) */
    double xent;               /* s per logit (fused softmax cross-entropy) */
    double adam;               /* s per parameter (AdamW with the clip folded in) */
    double gradnorm;           /* s per gradient element: its sum of squares and the zeroing */
    double attn_fwd_tile, attn_fwd_hs; /* s per 64 x 64 causal tile computed: tile + hs x HS */
    double attn_bwd_tile, attn_bwd_hs; /* the same, backward */
    double attn_drop;                  /* s per visible score with attention dropout (fwd + bwd) */
    double gemm_call;                  /* s per GEMM call beyond its FLOPs at gemm_rate */
    double gemm_rate; /* FLOP/s of the linear layers' GEMMs fitted with gemm_call */
    /* an MoE layer's work beside its GEMMs (routing, permutation, row
     * copies, activation, probability loops, weighted sum), s per routed
     * row and element of (C + F1 + F): forward, backward */
    double moe_row_fwd, moe_row_bwd;
    double base_rss; /* bytes resident in a process before any model (code,
                        BLAS / oneDNN / OpenMP state, bench-peak's pool) */
    double rank_rss; /* bytes a rank-thread adds (stack, malloc arena, oneDNN state) */
    double mpi_rss;  /* bytes an MPI process adds (the library, its shared memory); 0 unknown */
    /* Megatron-FSDP's page pool (dp/fsdp.c): s per 4 KiB page moved between
     * a buffer and the pool (mremap(2) MREMAP_DONTUNMAP, the page-table
     * entries only); 0 unknown (an older cache: not priced) */
    double page_move;
} mtc_plan_kernels;

typedef struct {
    char name[64];
    char description[160];
    int is_cpu;           /* ranks are threads / processes on cores (this machine) */
    int devices_per_node; /* GPUs per node; for a CPU host, the cores */
    double peak_flops;    /* per device, the precision's dense GEMM peak (FLOP/s) */
    double peak_flops_fp32;
    /* CPU (bench-peak): per core, mtc-sized GEMMs with every core busy, per
     * second of CPU time (0 = use peak_flops_fp32) */
    double shape_flops_fp32;
    /* CPU: per core, the fp32 FMA peak (core/peak.h's cache, what `mtc
     * train` reports MFU against; 0 = unknown: the GEMM rates instead) */
    double fma_flops_fp32;
    /* CPU: the fraction of a core a compute-bound thread got over a
     * step-long window (the load; 0 = not measured: 1) */
    double cpu_share;
    double achieved;  /* calibration: achieved fraction of the GEMM peak */
    double mem_bytes; /* HBM (or host RAM) per device */
    double mem_bw;    /* bytes/s per device for element-wise passes */
    mtc_plan_link intra, inter;
    double oversub_lat; /* extra seconds per sync when ranks outnumber cores (CPU) */
    /* CPU, ranks outnumbering the cores between compute phases: the wall
     * seconds a collective adds (waits for a descheduled peer, wake-ups)
     * and the fraction the compute grows by (0: not measured) */
    double oversub_sync, oversub_frac;
    double mpi_oversub_sync, mpi_oversub_frac; /* the same for MPI processes (0: as threads) */
    mtc_plan_kernels kern;                     /* CPU: kernel costs (measured 0 on GPU machines) */
} mtc_plan_machine;

/* A named machine ("dgx-a100", "dgx-h100", ...) from the compiled-in
 * table, or a JSON file path. "this" reads the `mtc bench-peak` cache
 * (mtc_plan_machine_cache_path) and fails with a one-line hint when it is
 * absent. */
mtc_result_t mtc_plan_machine_load(const char *name_or_path, mtc_plan_machine *out);
/* Parse a description (docs/plan.md) from JSON text. */
mtc_result_t mtc_plan_machine_parse(const char *json, const char *origin, mtc_plan_machine *out);
/* Write a description as JSON (the bench-peak cache). */
mtc_result_t mtc_plan_machine_write(const mtc_plan_machine *m, const char *path);
/* Where machine 'this' is described: set once, before any thread reads it
 * (the CLI: $MTC_CACHE_DIR/machine.json, else
 * $XDG_CACHE_HOME/mtc/machine.json, else $HOME/.cache/mtc/machine.json).
 * NULL or "": none (the default: 'this' is not measured). */
void mtc_plan_machine_set_cache_path(const char *path);
/* buf gets it ("" without one). */
void mtc_plan_machine_cache_path(char *buf, size_t n);
/* The names of the compiled-in machines, space separated. */
const char *mtc_plan_machine_names(void);

/* ---- step time (plan/time.c) ---- */

typedef struct {
    double flops_rank;      /* hardware FLOPs one rank executes per step (recompute included) */
    double gemm_rate;       /* FLOP/s one rank's GEMMs run at (devices x rate x share) */
    double devices;         /* compute units a rank gets (CPU: cores / ranks, at most 1 each) */
    double cpu_share;       /* CPU: share of those a compute-bound rank gets under load (else 1) */
    double model_flops;     /* Megatron's model FLOPs of the step, all ranks (no recompute) */
    double compute_s;       /* GEMMs at the achieved rate, all microbatches */
    double elementwise_s;   /* memory-bound passes (activations, optimizer step); on a CPU
                               host with measured kernels every non-GEMM kernel */
    double attention_s;     /* CPU kernels: the tiled attention's share of elementwise_s */
    double optimizer_s;     /* the optimizer step's share of elementwise_s */
    int kernels;            /* 1: priced with the machine's measured kernels (mtc_plan_kernels) */
    double tp_comm_s;       /* TP / SP collectives on the critical path */
    double cp_comm_s;       /* context-parallel attention's KV / head exchanges */
    double pp_comm_s;       /* stage-to-stage messages */
    double dp_comm_s;       /* gradient reduction (and param all-gather) exposed */
    double dp_comm_total_s; /* the same before overlap */
    /* mixture of experts (parts of compute_s, elementwise_s, dp_comm_s) */
    double moe_gemm_s;       /* expert GEMMs, router, shared expert */
    double moe_elem_s;       /* routing, permutation, expert activations */
    double moe_comm_s;       /* the token dispatcher's collectives on the critical path */
    double edp_comm_total_s; /* expert-DP gradient reduction (and param all-gather) */
    /* Megatron-FSDP optim_grads* (parts of dp_comm_total_s / step_s): the
     * dense buffer's unit all-gathers before the forward and the backward
     * (optim_grads: after the step), its per-microbatch reduce-scatters
     * (HSDP: with the instances' all-reduce), the page pool's moves and the
     * zeroing of the gradient pages a backward takes, and what the overlap
     * leaves exposed of the collectives; HFSDP's collectives over the
     * instances (blocking, never hidden) */
    double fsdp_ag_fwd_s, fsdp_ag_bwd_s, fsdp_ag_step_s, fsdp_rs_s, fsdp_page_s, fsdp_exposed_s;
    double fsdp_outer_s;
    double moe_rows;       /* dispatched rows one rank's experts run per microbatch per layer */
    double moe_flops_rank; /* expert + router + shared expert FLOPs of one rank per step */
    double bubble_s;       /* pipeline idle time of the simulated schedule */
    double bubble_fraction;
    double step_s;
    double tflops_per_device;    /* Megatron's logged figure: model FLOPs / (step x world) */
    double hw_tflops_per_device; /* with recompute FLOPs (Narayanan et al. count these) */
    double mfu;                  /* mtc_mfu (core/peak.h): model FLOPs / (step x world x a
                                    rank's peak: the device's, or a host's over its ranks) */
} mtc_plan_time;

/* Predicted step time of the layout on the machine. threads_per_rank 0 =
 * cores / ranks (CPU), as mtc train does. */
mtc_result_t mtc_plan_time_step(const mtc_plan_layout *l, const mtc_plan_machine *m,
                                int threads_per_rank, mtc_plan_time *out);
/* Alpha-beta time of one collective on n ranks over a link:
 * all-reduce 2(n-1)/n bytes/bw + 2(n-1) lat, reduce-scatter and all-gather
 * (n-1)/n bytes/bw + (n-1) lat (bytes: the full buffer), all-to-all the same
 * (bytes: what one rank sends and receives in all, pairwise exchange), p2p bytes/bw + lat;
 * each plus the link's sync once per call (0 on GPU machines). */
typedef enum {
    MTC_PLAN_AR = 0,
    MTC_PLAN_RS,
    MTC_PLAN_AG,
    MTC_PLAN_P2P,
    MTC_PLAN_A2A
} mtc_plan_coll;
double mtc_plan_coll_time(mtc_plan_coll op, double bytes, int n, const mtc_plan_link *link);
/* The link a group crosses: ranks with the given stride and size in the
 * tp-cp-ep-dp-pp order sit on one node when stride x size <= devices per
 * node (a CPU host is one node). */
const mtc_plan_link *mtc_plan_group_link(const mtc_plan_machine *m, int stride, int size);
/* Megatron's num_floating_point_operations with recomputation: full
 * recompute runs each layer's forward twice (8 instead of 6 FLOPs per
 * multiply-add pair of the layers), selective the attention scores and
 * values. Global batch, all ranks. */
double mtc_plan_flops(const mtc_model_config *c, int64_t global_batch, mtc_plan_recompute rc);

/* ---- layouts (plan/enumerate.c) ---- */

typedef struct {
    mtc_plan_layout layout;
    mtc_plan_memory mem; /* the peak pipeline rank */
    mtc_plan_time time;
    int fits;
} mtc_plan_row;

/* Which knobs the search varies (0 = keep base's value). */
typedef struct {
    int vary_sp;      /* with and without sequence parallelism (tp > 1) */
    int vary_distopt; /* with and without the distributed optimizer (dp > 1) */
    int vary_vpp;     /* interleaved schedules (every vpp dividing the layers per stage) */
    int vary_ep;      /* MoE: every ep dividing num-experts and the world / (etp pp) */
    int vary_etp;     /* MoE: etp 1 and etp = tp */
    int vary_cp;      /* every context-parallel size the grid and sequence allow */
} mtc_plan_search;

/* Every valid layout of base (model, world, batch, precision, recompute and
 * activation model kept; tp, pp and what s asks varied within the rules of
 * `mtc ranks` and mtc train), with memory and step time on the machine,
 * sorted: fitting ones first, by step time. *rows is malloc'ed (free it). */
mtc_result_t mtc_plan_enumerate(const mtc_plan_layout *base, const mtc_plan_machine *m,
                                int threads_per_rank, const mtc_plan_search *s, mtc_plan_row **rows,
                                int *nrows);
/* "tp2-pp2-vpp1-dp2-sp-do" (short name of a layout, for tables and --explain;
 * MoE models add "-ep2-etp1"). */
void mtc_plan_layout_name(const mtc_plan_layout *l, char *buf, size_t n);
/* Parse "tp=2,pp=2,vpp=2,sp,distopt" (or the short name, epN and etpN
 * included) onto a layout. */
mtc_result_t mtc_plan_layout_parse(mtc_plan_layout *l, const char *spec);

/* ---- reports (plan/report.c) ---- */

/* Every term of one prediction, one per line. */
void mtc_plan_explain(FILE *f, const mtc_plan_layout *l, const mtc_plan_machine *m,
                      const mtc_plan_memory *mem, const mtc_plan_time *t);

/* ---- this machine (plan/peak.c) ---- */

/* Measure this host's fp32 GEMM rate (all cores and one core) and copy
 * bandwidth (fastest of iters), and the shm collectives' alpha/beta
 * (medians of comm/bench.c), into a CPU machine
 * description (name "this"). iters >= 1. */
mtc_result_t mtc_plan_measure_host(mtc_plan_machine *out, int iters, FILE *log);
/* bench-peak's oversubscription probe, collective over `world` (every
 * rank runs it): ranks sharing `cores` cores alternate a GEMM and an 8 B
 * all-reduce of the world (2000 x ~0.05 ms and 200 x ~1 ms GEMMs, `reps`
 * runs of each); the wall time per iteration beyond the cores' share of the
 * GEMMs' CPU time, fitted as *sync seconds per call + *frac of the compute
 * (medians over the runs; the same on every rank). bench-peak runs it on
 * MTC_PLAN_OVERSUB_PER_CORE x cores rank-threads, and under mpiexec on as
 * many MPI processes. */
#define MTC_PLAN_OVERSUB_PER_CORE 2
mtc_result_t mtc_plan_oversub_probe(mtc_comm_t world, int cores, int reps, double *sync,
                                    double *frac);

/* Time mtc's non-GEMM kernels and its linear layers' GEMMs on every core
 * at once, on each thread's CPU clock, the median of `rounds`
 * (plan/kernels.c). */
mtc_result_t mtc_plan_measure_kernels(mtc_plan_kernels *out, int cores, int rounds);
/* Then an MoE layer's cost beside its GEMMs (out's moe_row_fwd / _bwd; the
 * GEMM fit of mtc_plan_measure_kernels must be in out). Apart, so that
 * what it leaves resident (oneDNN's kernels for the experts' shapes) is
 * not counted in a process's base resident set. */
mtc_result_t mtc_plan_measure_moe_kernels(mtc_plan_kernels *out, int cores, int rounds);

#endif
