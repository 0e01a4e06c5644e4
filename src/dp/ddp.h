/* dp/ddp.h - data-parallel gradient reduction over a flat gradient buffer
 * laid out by dp/layout.h, cut into buckets, each bucket's collective started
 * as soon as all its params' gradients are final (Megatron-LM core_v0.18.0
 * distributed/distributed_data_parallel.py + param_and_grad_buffer.py).
 *
 * One mtc_ddp per flat buffer (one dtype, dense params). Per step:
 *
 *   mtc_ddp_zero_grad(d)                     before the first microbatch
 *   microbatches 1..M-1: backward accumulates (+=) into d->grads
 *   microbatch M: backward; after a param's LAST gradient contribution
 *       mtc_ddp_param_grad_ready(d, p)       (or mtc_ddp_grads_ready)
 *   mtc_ddp_finish(d)                        every bucket reduced
 *
 * Buckets are launched in bucket-index order (bucket 0 holds the LAST
 * params, so it fills first in backward): a ready bucket waits for the
 * buckets before it, so every rank issues the same collective sequence
 * whatever order params are marked in. Without --overlap-grad-reduce,
 * marking is a no-op and mtc_ddp_finish reduces every bucket.
 *
 * Collectives (group names as in Megatron):
 *   plain DDP:  comm: all-reduce(DATA_PARALLEL_GROUP_WITH_CP) per bucket;
 *               afterwards every rank holds the whole reduced gradient.
 *   --use-distributed-optimizer:
 *               comm: reduce-scatter(INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP)
 *               per bucket into the rank's shard (dp_layout_shard_range);
 *               with several optimizer instances then
 *               comm: all-reduce(inter-instance group) of that shard.
 *               Afterwards ONLY the rank's shard of each bucket holds the
 *               reduced gradient; the rest of the buffer holds partial sums
 *               and must not be read (zero it before the next step).
 *
 * Scaling. Our model's backward computes dL/dθ of the loss averaged over the
 * GLOBAL batch's tokens, for the rank's local samples (loss_scale = 1 /
 * global tokens), so the SUM over data-parallel ranks is already the serial
 * global-batch gradient: MTC_DDP_GRAD_SUM (default) applies no scaling.
 * MTC_DDP_GRAD_AVG multiplies each bucket by 1/|dp| (the whole dp x cp group,
 * also with several instances) before the sum, as Megatron's
 * gradient_scaling_factor does for per-rank-mean losses.
 *
 * Offsets. The buffer is dp_layout's: params in backward order, with the
 * distributed optimizer each param 64-aligned and each bucket padded to
 * lcm(dp, 128). The model must address its params and grads at these
 * offsets: mtc_ddp_assign_offsets(d, reg) rewrites reg->params[i].offset and
 * reg->total = d->layout.numel, after which the model's views into
 * d->params / d->grads (or into its own buffers of reg->total floats, passed
 * to mtc_ddp_init) are right. For plain DDP the layout has no padding and
 * the offsets equal mtc_registry_layout's, so the model's buffers can be
 * passed as they are. Padding elements stay zero.
 *
 * Deterministic: each collective runs a fixed algorithm per communicator
 * (comm/comm.h), the launch order is fixed, local sums run in fixed order.
 * Relies on dp/layout.h, comm/comm.h, nn/nn.h (nn_sumsq, nn_scale) and the
 * registry. Does not: run the optimizer (dp/distopt.h or optim/), handle
 * expert buffers or the embedding/SP all-reduces of finalize_model_grads
 * (a second mtc_ddp over the expert-dp group, MTC_DDP_PARAMS_EXPERT, serves
 * the expert-parallel params; each takes the registry's param indices),
 * or reduce in bf16. */
#ifndef MTC_DP_DDP_H
#define MTC_DP_DDP_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "core/result.h"
#include "dp/layout.h"
#include "grid/grid.h"
#include "model/registry.h"

typedef enum {
    MTC_DDP_GRAD_SUM = 0, /* local grads are shares of the global mean: just sum */
    MTC_DDP_GRAD_AVG,     /* local grads are per-rank means: scale by 1/|dp| then sum */
} mtc_ddp_grad_scale;

/* Which of the registry's params a buffer holds (Megatron keeps expert
 * params in buffers of their own when EP > 1). */
typedef enum {
    MTC_DDP_PARAMS_ALL = 0, /* every param this rank holds */
    MTC_DDP_PARAMS_DENSE,   /* all but the expert-parallel ones (mtc_param_expert_parallel) */
    MTC_DDP_PARAMS_EXPERT,  /* only the expert-parallel ones: reduced over expert-DP */
} mtc_ddp_params;

typedef struct {
    int use_distopt;         /* --use-distributed-optimizer: reduce-scatter into shards */
    int overlap_grad_reduce; /* --overlap-grad-reduce: launch buckets during backward */
    int64_t bucket_size;     /* elements, <= 0: one bucket (see dp_layout_bucket_size) */
    int pad_high_busbw;      /* pad buckets to lcm(dp, 128, 65536) */
    mtc_ddp_grad_scale scale;
    int avg_size;          /* MTC_DDP_GRAD_AVG divides by this (0: |dp|); Megatron's expert
                              buffers use 1/|dp x cp| too, not 1/|expert-dp| */
    mtc_ddp_params params; /* which params: the others (and held-nowhere experts) get no room */
    size_t base;           /* where this buffer starts in the model's flat buffers: the params'
                              registry offsets are base + their place in this buffer */
    int grad_reduce_bf16;  /* --grad-reduce-in-bf16: each bucket (and shard) is rounded to bf16,
                              reduced as bf16 and widened back into the fp32 grads */
    /* per param (forward order), nonzero = Megatron's `shared_embedding`
     * (tied word embedding on the first/last stage with pp > 1; NOT set when
     * pp == 1); may be NULL. Read during init only. */
    const int *shared_embedding;
    /* Megatron-FSDP (dp/fsdp.h): per param its unit (a bucket per unit) and
     * the padding divisor; NULL / 0 otherwise. Read during init only. */
    const int *unit_of;
    int64_t pad_divisor;
} mtc_ddp_config;

/* Communicators of this rank; not owned, must outlive the mtc_ddp. */
typedef struct {
    mtc_comm_t dp;    /* DATA_PARALLEL_GROUP_WITH_CP; NULL = serial (dp 1) */
    mtc_comm_t intra; /* INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP; NULL = dp */
    mtc_comm_t inter; /* inter-instance group (size = instances); NULL with one instance */
} mtc_ddp_comms;

/* One kind of gradient buffer of a rank (dp/groups.c): which params, and
 * its groups (NULL: size 1). */
typedef struct {
    mtc_ddp_params params;
    int expert;       /* the expert-parallel buffers (after the dense one in a chunk) */
    mtc_comm_t dp;    /* reduction: DATA_PARALLEL_GROUP_WITH_CP / EXPERT_DATA_PARALLEL_GROUP */
    mtc_comm_t shard; /* the distributed optimizer's shard group (its members hold disjoint
                         pieces; NULL without the distributed optimizer) */
    mtc_comm_t norm;  /* members hold disjoint params of the kind: MODEL_PARALLEL_GROUP /
                         EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP */
} mtc_ddp_kind;

/* The kinds of buffer of a rank from its grid into out[0..1]: the dense
 * one (every param, or all but the expert-parallel ones when the model's
 * num_experts experts are split over EP), and then the expert-parallel
 * one. Returns how many. */
int mtc_ddp_kinds(mtc_grid_t grid, int use_distopt, int num_experts, mtc_ddp_kind *out);
/* The DDP's communicators of model chunk `chunk`'s buffer of that kind:
 * the intra group as built (even of size 1), the grid's inter-instance
 * group of the chunk with several optimizer instances. */
mtc_ddp_comms mtc_ddp_kind_comms(mtc_grid_t grid, const mtc_ddp_kind *kind, int use_distopt,
                                 int chunk);
/* The layout a buffer of cfg->params params of reg has over shard groups
 * of `dp` ranks (the intra group's size with the distributed optimizer;
 * without it the layout has no padding): what mtc_ddp_init builds. A
 * chunk's buffers are laid out once by mtc_ddp_chunk_layout_init
 * (dp/chunk_layout.h), which calls this. placement_only: no per-rank shard
 * tables (the planner's; a DDP refuses such a layout). */
mtc_result_t mtc_ddp_layout(const mtc_registry *reg, const mtc_ddp_config *cfg, int dp,
                            int placement_only, dp_layout *out);
/* The dp_layout configuration of a DDP configuration over `dp` shard ranks. */
dp_layout_config mtc_ddp_layout_config(const mtc_ddp_config *cfg, int dp);

/* Bytes this rank holds for the buffer's params. */
typedef struct {
    size_t param_bytes;       /* flat param buffer, padding included */
    size_t grad_bytes;        /* flat grad buffer (kept full size, as Megatron) */
    size_t optim_state_bytes; /* AdamW m + v: the owned shard's param pieces with the
                                 distributed optimizer, every param without */
} mtc_dp_memory;

typedef struct ddp_bucket ddp_bucket;

typedef struct {
    mtc_ddp_config cfg; /* shared_embedding reset to NULL after init */
    mtc_ddp_comms comms;
    dp_layout layout;      /* dp = size of the intra group with the distributed optimizer */
    int dp_size;           /* |dp x cp| */
    int shard_rank;        /* rank in the intra group (owned shard), 0 for plain DDP */
    int instances;         /* --num-distributed-optimizer-instances */
    float *params, *grads; /* layout.numel floats each */
    int owns_buffers;
    /* per param (forward order), copied from the registry */
    unsigned char *is_2d, *emb_or_out, *tp_duplicate, *ready;
    ddp_bucket *buckets; /* [layout.nbuckets] */
    uint16_t *g16;       /* grad_reduce_bf16: the bf16 staging of the grads (layout.numel) */
    int next_launch;     /* buckets [0, next_launch) have been launched this step */
    int next_inter;      /* ... and [0, next_inter) have their inter-instance all-reduce */
} mtc_ddp;

/* Build the layout of reg's params (local_numel each) for cfg and comms and
 * take the buffers: params/grads of at least layout.numel floats (caller
 * keeps them, padding must be zero), or NULL/NULL to allocate them zeroed.
 * Collective: no (builds no communicators). INVALID_ARGUMENT for sizes that
 * do not fit (|dp| not a multiple of |intra|, |inter| != |dp| / |intra|,
 * several instances without the distributed optimizer). */
mtc_result_t mtc_ddp_init(const mtc_registry *reg, const mtc_ddp_config *cfg,
                          const mtc_ddp_comms *comms, float *params, float *grads, mtc_ddp **out);
/* The same on a layout already built for cfg and comms (mtc_ddp_layout;
 * a model's layout hook placed its params by it): the DDP takes *layout
 * over and leaves it empty, also on failure. INVALID_USAGE for a layout of
 * another registry, shard size or optimizer, or a placement-only one. */
mtc_result_t mtc_ddp_init_layout(const mtc_registry *reg, const mtc_ddp_config *cfg,
                                 const mtc_ddp_comms *comms, dp_layout *layout, float *params,
                                 float *grads, mtc_ddp **out);
/* Waits for any collective still running. NULL is a no-op. */
void mtc_ddp_free(mtc_ddp *d);
/* 1 when a buffer of `which` params holds p (p held by this rank). */
int mtc_ddp_holds(const mtc_registry *reg, const mtc_param *p, mtc_ddp_params which);

/* Rewrite reg->params[i].offset = base + d->layout.param[i].start (this
 * buffer's params) and reg->total = base + d->layout.numel, so the model's
 * views follow the padded layout. */
void mtc_ddp_assign_offsets(const mtc_ddp *d, mtc_registry *reg);

/* Zero the whole grad buffer (padding included) for a new step. */
void mtc_ddp_zero_grad(mtc_ddp *d);

/* Param p's gradient is final for this step (call during backward of the
 * last microbatch). Starts the collective of every bucket that is complete
 * and whose predecessors have started. No-op without overlap.
 * comm: reduce-scatter(intra) or all-reduce(dp), non-blocking.
 * INVALID_USAGE when p was already marked this step. */
mtc_result_t mtc_ddp_param_grad_ready(mtc_ddp *d, int p);
/* The same for params [first, last) (forward indices), marked last to first. */
mtc_result_t mtc_ddp_grads_ready(mtc_ddp *d, int first, int last);
/* Buckets whose collective has started this step (for tests and traces). */
int mtc_ddp_buckets_launched(const mtc_ddp *d);

/* Start what has not started, wait for every bucket (and the inter-instance
 * all-reduces) and reset the step state. With overlap, a param never marked
 * is a caller bug: INVALID_USAGE naming it (after waiting for the rest).
 * comm: all-reduce(dp) or reduce-scatter(intra) [+ all-reduce(inter)]. */
mtc_result_t mtc_ddp_finish(mtc_ddp *d);

/* Param elements whose reduced gradient (and optimizer state) this rank
 * holds: its shards' param pieces (padding excluded) with the distributed
 * optimizer, every param without. Summed over the intra group it is the
 * params' total: the optimizer state shrinks as 1/dp. */
int64_t mtc_ddp_held_numel(const mtc_ddp *d);
/* Bytes of params, grads and AdamW state (m, v of mtc_ddp_held_numel). */
void mtc_ddp_memory(const mtc_ddp *d, mtc_dp_memory *out);

#endif
