/* dp/distopt.h - the distributed optimizer (--use-distributed-optimizer,
 * Megatron-LM core_v0.18.0 optimizer/distrib_optimizer.py): AdamW on the
 * rank's shard of every bucket only, with its m and v held only for that
 * shard, then the updated params all-gathered back into the full buffer.
 *
 * It works on an mtc_ddp built with use_distopt = 1, after mtc_ddp_finish
 * left the reduced gradient in the rank's shard (reduce-scatter over the
 * intra-instance group, plus the all-reduce over the inter-instance group
 * with --num-distributed-optimizer-instances > 1). Per step:
 *
 *   mtc_ddp_finish(d);                          reduced grads in the shard
 *   the global norm over the shard pieces       (optim/optim.h's norm plan)
 *   mtc_distopt_step(o, lr, clip, &hp);          AdamW on the shard with the
 *                                               clipping factor folded in,
 *                                               then the all-gather
 *   ... next forward: mtc_distopt_param_gather_wait_param(o, p) before
 *       reading param p (no-op without --overlap-param-gather).
 *
 * Params are fp32 already, so they are their own "main params": the shard
 * of the param buffer is updated in place. Weight decay applies per element
 * only to params flagged is_2d in the registry (the layout's per-param
 * pieces give the boundaries); padding is never touched.
 * comm: all-gather(INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP) per bucket,
 * non-blocking, issued in forward order (last bucket first) so the first
 * layers' params arrive first.
 * With a compute copy (mtc_distopt_gather_into, --bf16): each step rounds
 * the updated shard to bf16 into the copy and the all-gather fills the
 * copy, not the param buffer, which then holds fp32 main params only in
 * this rank's shard (Megatron's fp32 main params of the owned shard and
 * bf16 model params gathered from the owners; the gathered values are bf16
 * values in fp32 storage, the same values as a bf16 gather). With an fp8
 * gather (dp/distopt_fp8.h) the fp8 weights travel as E4M3 bytes instead.
 * Relies on dp/ddp.h, dp/layout.h, nn_adamw_update. Does not: save or load
 * optimizer state (m, v are exposed with the piece map for ckpt/), or
 * schedule the LR. */
#ifndef MTC_DP_DISTOPT_H
#define MTC_DP_DISTOPT_H

#include <stdint.h>

#include "core/result.h"
#include "dp/ddp.h"

typedef struct {
    float beta1, beta2, eps, weight_decay;
    int decoupled; /* --decoupled-lr given: emb_or_out params step at lr_decoupled */
    float lr_decoupled;
} mtc_distopt_hparams;

/* One param's piece of this rank's shard. */
typedef struct {
    int param;     /* forward index */
    int64_t start; /* in the flat param/grad buffers */
    int64_t n;     /* elements */
    int64_t state; /* offset in m and v */
    int decay;     /* weight decay applies (2-D param) */
    int decoupled; /* --decoupled-lr applies (embedding or output layer) */
} mtc_distopt_piece;

struct mtc_distopt_fp8;
typedef struct mtc_distopt {
    mtc_ddp *ddp;             /* not owned */
    int overlap_param_gather; /* --overlap-param-gather */
    int npieces;
    mtc_distopt_piece *pieces; /* bucket by bucket, ascending param within a bucket */
    float *m, *v;              /* (n) moments of the owned pieces */
    int64_t n;
    int64_t step;                /* optimizer steps taken */
    mtc_request_t *gather;       /* [nbuckets] pending all-gathers */
    float *copy;                 /* NULL, or the bf16 compute copy the all-gather fills */
    int no_gather;               /* Megatron-FSDP optim_grads_params (dp/fsdp.h): the step updates
                                    the shard only; each unit is gathered when a pass needs it */
    struct mtc_distopt_fp8 *fp8; /* --fp8-param-gather (dp/distopt_fp8.h): the step casts and
                                    gathers through it; owned */
    int parts;                   /* 1, or HFSDP (mtc_distopt_narrow): the pieces cover the part-th
                                    1/parts of each bucket's shard only */
} mtc_distopt;

/* Optimizer state for d's shard (zeroed). d must use the distributed
 * optimizer (INVALID_ARGUMENT otherwise) and outlive the optimizer. */
mtc_result_t mtc_distopt_init(mtc_ddp *d, int overlap_param_gather, mtc_distopt **out);
/* Megatron-FSDP's HFSDP (--outer-dp-sharding-strategy optim, dp/fsdp.h):
 * keep only the pieces inside the part-th of `parts` equal slices of each
 * bucket's shard (each slice whole: the layout pads for it), m and v
 * reallocated (zeroed) for them. Before the first step. INVALID_ARGUMENT
 * when a shard does not split evenly or parts < 1. */
mtc_result_t mtc_distopt_narrow(mtc_distopt *o, int part, int parts);
/* Waits for pending all-gathers. NULL is a no-op. */
void mtc_distopt_free(mtc_distopt *o);

/* One AdamW step (bias correction at step + 1) on the owned shard of the
 * param buffer from the reduced grads times grad_scale (the clipping
 * factor from mtc_grad_clip_coeff, 1 for none; the grads are not written),
 * then start the
 * all-gather of every bucket; without overlap_param_gather also wait for
 * them. Waits first for all-gathers still pending from the previous step.
 * INVALID_USAGE while gradient reductions are in flight (call
 * mtc_ddp_finish first). comm: all-gather(intra) per bucket. */
mtc_result_t mtc_distopt_step(mtc_distopt *o, float lr, float grad_scale,
                              const mtc_distopt_hparams *hp);

/* From now on gather into copy (the layout's numel floats, same offsets as
 * the param buffer): each step rounds this rank's updated pieces to bf16
 * into copy, then all-gathers copy per bucket. The param buffer outside
 * the shard is not read or written again (its owner may release it). */
void mtc_distopt_gather_into(mtc_distopt *o, float *copy);

/* The fp32 main params of every bucket, assembled from the shards into
 * full (the layout's numel floats): for checks and exports, not the step.
 * Blocking. comm: all-gather(intra) per bucket. */
mtc_result_t mtc_distopt_gather_main(mtc_distopt *o, float *full);

/* Wait until param p's bucket's params (or all) are gathered. No-op when
 * nothing is pending. */
mtc_result_t mtc_distopt_param_gather_wait_param(mtc_distopt *o, int p);
mtc_result_t mtc_distopt_param_gather_wait(mtc_distopt *o);

#endif
