/* dp/layout.h - where every parameter's gradient lives in a rank's flat
 * buffer, how the buffer is cut into buckets, and which contiguous shard of
 * each bucket every data-parallel rank owns: Megatron-LM core_v0.18.0's
 * layout (optimizer/distrib_optimizer.py _compute_per_buffer_param_layout,
 * _build_model_gbuf_range; distributed/param_and_grad_buffer.py for the
 * plain DDP layout).
 *
 * With the distributed optimizer:
 *   - params are walked in REVERSE (backward) order; each start is rounded up
 *     to a multiple of 64 elements;
 *   - a bucket closes after the param that makes (end - bucket start) reach
 *     bucket_size (bucket_size <= 0: one bucket);
 *   - a shared (tied) embedding param gets a bucket of its own: the open
 *     bucket closes at the embedding's (aligned) start, and the embedding's
 *     bucket closes right after it;
 *   - a bucket end is padded to lcm(dp, 128), or lcm(dp, 128, 65536) with
 *     pad_buckets_for_high_nccl_busbw; the next param starts there;
 *   - DP rank r owns [bucket.start + r*n/dp, bucket.start + (r+1)*n/dp) of
 *     every bucket of n elements, regardless of param boundaries; per param
 *     the intersection gives gbuf_world (buffer coordinates), gbuf_local
 *     (offset in the rank's shard) and param (offset in the flat param).
 * Without it (plain DDP): same walk and bucket closing, no alignment, no
 * padding, no separate embedding bucket, and no shards (buckets are
 * all-reduced).
 * Pure computation: no communication, no tensors; the caller owns the
 * dp_layout and frees it with dp_layout_free. */
#ifndef MTC_DP_LAYOUT_H
#define MTC_DP_LAYOUT_H

#include <stdint.h>
#include <stdio.h>

#include "core/result.h"

typedef struct {
    int64_t start, end; /* [start, end) in elements */
} dp_range;

typedef struct {
    int dp;              /* data-parallel size of the buffer's group, >= 1 */
    int64_t bucket_size; /* elements; <= 0 = one bucket (Megatron's None) */
    int pad_high_busbw;  /* pad_buckets_for_high_nccl_busbw */
    int use_distopt;     /* use_distributed_optimizer */
    int placement_only;  /* skip the per-rank shard tables (O(dp x buckets)): the planner */
    int skip_empty;      /* a param of 0 elements is not in this buffer (the dense or the
                            expert-parallel one, or an expert another EP rank holds): it gets
                            an empty range, no bucket (param_bucket -1) and no alignment */
    const int
        *shared_embedding; /* per param (forward order), nonzero = tied embedding; may be NULL */
    /* Megatron-FSDP (dp/fsdp.h): per param (forward order) its FSDP unit; a
     * bucket closes wherever the unit changes, so every bucket is one unit
     * (or a run of small ones with the same id). NULL: no unit boundaries. */
    const int *unit_of;
    int64_t pad_divisor; /* > 0: buckets padded to lcm(dp, pad_divisor) instead of
                            lcm(dp, 128) (FSDP: whole pages per shard) */
} dp_layout_config;

/* One param's piece of one rank's shard. */
typedef struct {
    int param;           /* forward index */
    dp_range gbuf_world; /* in buffer coordinates */
    dp_range gbuf_local; /* relative to the start of the rank's shard of the bucket */
    dp_range param_sub;  /* relative to the start of the flattened param */
} dp_shard_param;

typedef struct {
    int nparams, nbuckets, dp, use_distopt;
    int64_t numel;                  /* buffer size, padding included */
    int64_t numel_unpadded;         /* sum of per-bucket unpadded sizes */
    dp_range *param;                /* [nparams] the param's place in the buffer */
    int *param_bucket;              /* [nparams] its bucket; -1 for a skip_empty param */
    dp_range *bucket;               /* [nbuckets] padded bucket extents */
    int64_t *bucket_numel_unpadded; /* [nbuckets] */
    /* params of bucket b, in buffer (backward) order:
     * bucket_params[bucket_param_off[b] .. bucket_param_off[b+1]) */
    int *bucket_param_off, *bucket_params;
    /* shard of (rank r, bucket b), distributed optimizer only: pieces
     * shard_params[shard_off[r*nbuckets+b] .. shard_off[r*nbuckets+b+1]), in
     * ascending param index */
    int *shard_off;
    dp_shard_param *shard_params;
} dp_layout;

/* Build the layout of params numels[0..nparams) (forward order, each > 0,
 * or >= 0 with skip_empty).
 * INVALID_ARGUMENT with a message naming the bad value otherwise. On failure
 * *out is left empty (safe to dp_layout_free). */
mtc_result_t dp_layout_build(dp_layout *out, const int64_t *numels, int nparams,
                             const dp_layout_config *cfg);
void dp_layout_free(dp_layout *layout); /* NULL and empty layouts are fine */

/* The bucket size Megatron's training hands to the layout (0 = None, one
 * bucket): `requested` (--ddp-bucket-size, <= 0 = unset) or by default
 * max(4e7, 1e6 * dp_cp); None unless overlap_grad_reduce; None on pipeline
 * ranks > 0 (distributed_data_parallel.py) and for model chunks > 0
 * (training.py disable_bucketing). */
int64_t dp_layout_bucket_size(int64_t requested, int dp_cp, int overlap_grad_reduce, int pp_rank,
                              int model_chunk);

/* Megatron's padding divisor: lcm(dp, 128) or lcm(dp, 128, 2^16). */
int64_t dp_layout_bucket_divisor(int dp, int pad_high_busbw);

/* The world range rank r owns in bucket b (distributed optimizer). */
dp_range dp_layout_shard_range(const dp_layout *layout, int rank, int bucket);
/* The pieces of params in that shard; *n set to their count. */
const dp_shard_param *dp_layout_shard_params(const dp_layout *layout, int rank, int bucket, int *n);
/* Elements rank r owns over all buckets (its optimizer-state size). */
int64_t dp_layout_shard_numel(const dp_layout *layout, int rank);
/* Elements of params (padding left out) in rank r's shards over all
 * buckets, from the gaps between params alone: no shard tables needed, so
 * it works on a placement_only layout. rank < 0: the largest over ranks.
 * 0 on a layout without the distributed optimizer, -1 out of memory. */
int64_t dp_layout_held_numel(const dp_layout *layout, int rank);

/* Print the layout as `mtc layout` does (text): buffer, buckets, params
 * (is_shared per param may be NULL), and with the distributed optimizer
 * every rank's shards. */
void dp_layout_print(FILE *f, const dp_layout *layout, const dp_layout_config *cfg,
                     const int *is_shared);

#endif
