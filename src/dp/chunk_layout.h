/* dp/chunk_layout.h - a model chunk's gradient buffers laid out once: each
 * kind's DDP configuration (Megatron's bucket rule, the distributed
 * optimizer's padding and tied-embedding bucket, Megatron-FSDP's unit
 * buckets) and its dp_layout over the chunk's registry. train/ builds it in
 * the model's layout hook and hands each layout to its DDP
 * (mtc_ddp_init_layout), whose distributed optimizer reads it; plan/ builds
 * the same from the registry it prices. Pure computation: no communicators
 * (each kind comes with its group's size), no tensors. */
#ifndef MTC_DP_CHUNK_LAYOUT_H
#define MTC_DP_CHUNK_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "core/result.h"
#include "dp/ddp.h"
#include "dp/layout.h"
#include "model/registry.h"

/* The dense buffer and, with experts split over EP, the expert-parallel one. */
#define MTC_DDP_KINDS_MAX 2

/* What lays a chunk's buffers out besides its registry: the data-parallel
 * flags and where the chunk sits. */
typedef struct {
    int use_distopt;         /* --use-distributed-optimizer */
    int overlap_grad_reduce; /* --overlap-grad-reduce */
    int64_t bucket_size;     /* --ddp-bucket-size in elements (<= 0: Megatron's default) */
    int pad_high_busbw;      /* --pad-buckets-for-high-nccl-busbw (distributed optimizer only) */
    int grad_reduce_bf16;    /* --grad-reduce-in-bf16 */
    int fsdp_strategy;       /* --use-megatron-fsdp: mtc_fsdp_strategy (dp/fsdp.h), 0 = off */
    int64_t fsdp_unit_size;  /* --suggested-communication-unit-size (0: a unit per layer) */
    int num_layers;          /* the model's (FSDP's units) */
    int dp;                  /* the data-parallel size (Megatron's default bucket size) */
    int dp_cp;               /* |dp x cp|: what the expert buffer averages over (as the dense) */
    int pp_size, pp_rank;    /* the tied embedding is bucketed alone with pp > 1 */
    int chunk;               /* the model chunk on the pipeline rank (buckets: first one only) */
    int placement_only;      /* no per-rank shard tables (the planner: O(params)) */
    /* HFSDP (--outer-dp-sharding-strategy optim): kind b's whole DP group
     * (instances x inner), over which the optimizer slices are whole pages
     * too; 0: ranks[b] of mtc_ddp_chunk_layout_init */
    int fsdp_pad_ranks[MTC_DDP_KINDS_MAX];
} mtc_ddp_chunk_opts;

/* The chunk's buffers, one per kind, one after the other in the model's
 * flat buffers. */
typedef struct {
    int n;                                 /* kinds */
    int held[MTC_DDP_KINDS_MAX];           /* the chunk has the buffer: the dense one always,
                                              another when it holds some of its params */
    mtc_ddp_config cfg[MTC_DDP_KINDS_MAX]; /* each buffer's DDP configuration (base: its start) */
    dp_layout layout[MTC_DDP_KINDS_MAX];   /* its layout (empty when not held); mtc_ddp_init_layout
                                              takes it over */
    size_t total;                          /* elements of all the buffers */
    int *shared, *units; /* owned: what cfg's shared_embedding and unit_of point at */
} mtc_ddp_chunk_layout;

/* Megatron's `shared_embedding`: p is the tied word embedding (reduced over
 * the embedding group) and there is more than one pipeline stage. */
int mtc_ddp_shared_embedding(const mtc_param *p, int pp_size);

/* The buffers of reg's params, kind b holding params[b] (mtc_ddp_holds)
 * laid out over ranks[b] ranks: its shard group's with the distributed
 * optimizer (the DDP's intra group), its reduction group's without. On
 * failure *out is left empty (safe to free). INVALID_ARGUMENT from
 * dp_layout_build for sizes it cannot lay out. */
mtc_result_t mtc_ddp_chunk_layout_init(mtc_ddp_chunk_layout *out, const mtc_registry *reg,
                                       const mtc_ddp_chunk_opts *o, int n,
                                       const mtc_ddp_params *params, const int *ranks);
/* Where the model's flat buffers put param i (reg->count of them): its
 * place in the dense buffer, or base + its place in the buffer that holds it. */
void mtc_ddp_chunk_layout_offsets(const mtc_ddp_chunk_layout *cl, size_t *offsets);
/* NULL and empty are fine. */
void mtc_ddp_chunk_layout_free(mtc_ddp_chunk_layout *cl);

#endif
