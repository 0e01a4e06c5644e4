/* dp/fsdp.h - Megatron-FSDP (--use-megatron-fsdp, Megatron-LM core_v0.18.0
 * megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py)
 * on top of the distributed optimizer's buffers (dp/ddp.h, dp/distopt.h).
 *
 * The FSDP units: each transformer layer, the embedding (wte, wpe) and the
 * head (final norm, output layer). The buffer's layout (mtc_ddp_config's
 * unit_of, pad_divisor) makes every unit a bucket of its own, padded so that
 * each data-parallel rank's shard of it is whole pages. The strategies
 * (data_parallel_sharding_strategy):
 *   no_shard            plain DDP: all-reduce, every rank the whole optimizer
 *                       (train/ runs it as the plain data-parallel path);
 *   optim               the distributed optimizer (ZeRO-1): full gradient
 *                       buffer, reduce-scatter after the last microbatch,
 *                       AdamW on the shard, all-gather of the params;
 *   optim_grads         (ZeRO-2) also shards the gradients: after each
 *                       microbatch's backward of a unit its gradients are
 *                       reduce-scattered, this rank's shard keeps the sum,
 *                       the rest of the unit's gradient pages are given back
 *                       to the OS;
 *   optim_grads_params  (ZeRO-3) also shards the params: only this rank's
 *                       shard stays resident; the forward all-gathers each
 *                       unit before it reads it and the backward again, and
 *                       a unit is released once two later units were needed
 *                       (at most two gathered units at any time).
 * This object serves the last two; train/ calls its hooks from the model
 * pass (params_needed in forward and backward, grads_ready after each unit's
 * backward on every microbatch) and mtc_fsdp_finish instead of
 * mtc_ddp_finish.
 *
 * comm: all-gather(INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP) per unit
 * (params); reduce-scatter(same group) per unit and microbatch (grads).
 * Blocking, or left running with the overlap flags (mtc_fsdp_set_overlap).
 * With several optimizer instances (HSDP) each unit's shard is also
 * all-reduced over the inter-instance group after its reduce-scatter;
 * HFSDP (mtc_fsdp_set_outer_optim) reduce-scatters it over that group
 * once per step instead and the optimizer holds 1/instances of the shard.
 * With --bf16 / --fp16 (mtc_fsdp_set_compute_copies) the units are
 * gathered into the compute copies (as bf16 into oneDNN's bf16 copy),
 * sharded as the params are. Memory measured
 * with mincore(2) on the params and grads buffers (real resident pages). */
#ifndef MTC_DP_FSDP_H
#define MTC_DP_FSDP_H

#include <stdint.h>

#include "core/dtype.h"
#include "core/result.h"
#include "dp/ddp.h"
#include "dp/distopt.h"
#include "model/registry.h"

typedef enum {
    MTC_FSDP_OFF = 0,
    MTC_FSDP_NO_SHARD,
    MTC_FSDP_OPTIM,
    MTC_FSDP_OPTIM_GRADS,
    MTC_FSDP_OPTIM_GRADS_PARAMS,
} mtc_fsdp_strategy;

/* "no_shard" ... "optim_grads_params" -> the strategy, -1 when unknown. */
int mtc_fsdp_strategy_parse(const char *s);
const char *mtc_fsdp_strategy_name(int strategy);

/* Each param's FSDP unit (forward order): 0 the embedding, 1 + layer for a
 * transformer layer's, num_layers + 1 the final norm and output layer.
 * unit_of holds reg->count ints. */
void mtc_fsdp_units(const mtc_registry *reg, int num_layers, int *unit_of);
/* --suggested-communication-unit-size S > 0: runs of consecutive units
 * (forward order) merged into one, each run closed once it holds S
 * elements or more (local numels), so small units share one collective.
 * Renumbers unit_of in place. */
void mtc_fsdp_group_units(const mtc_registry *reg, int *unit_of, int64_t suggested);
/* Elements the layout pads each unit to with `dp` shard ranks: whole pages
 * of floats per shard. */
int64_t mtc_fsdp_pad_divisor(int dp);

typedef struct mtc_fsdp mtc_fsdp;

/* Take over d (built with use_distopt = 1 on the unit layout, overlap off)
 * for optim_grads or optim_grads_params: give back the pages of the
 * gradient buffer, and for optim_grads_params of the params, outside this
 * rank's shards. d must outlive the object. INVALID_ARGUMENT for another
 * strategy. */
mtc_result_t mtc_fsdp_init(mtc_ddp *d, int strategy, mtc_fsdp **out);
void mtc_fsdp_free(mtc_fsdp *f);               /* NULL is a no-op */
int mtc_fsdp_shards_params(const mtc_fsdp *f); /* optim_grads_params */
/* The optimizer of d's shards: with optim_grads_params its all-gather is
 * switched off (o->no_gather) and a new o->step drops the gathered units. */
void mtc_fsdp_attach_optimizer(mtc_fsdp *f, mtc_distopt *o);
/* HFSDP (--outer-dp-sharding-strategy optim with several optimizer
 * instances; Megatron-FSDP's outer_fsdp_group sharding): after the
 * attached optimizer, narrow it to this rank's slice of every unit's
 * shard, the outer_rank-th of |inter-instance group| (mtc_distopt_narrow).
 * Each step, mtc_fsdp_finish then reduce-scatters every unit's shard over
 * the inter-instance group into the slice (instead of HSDP's all-reduce
 * per microbatch) and the first need after the step all-gathers the
 * updated slices into the shard. The layout must pad each unit to
 * mtc_fsdp_pad_divisor(dp x instances). A no-op with one instance;
 * INVALID_ARGUMENT without optim_grads_params or an optimizer.
 * comm: reduce-scatter(inter) and all-gather(inter) per unit and step. */
mtc_result_t mtc_fsdp_set_outer_optim(mtc_fsdp *f);
/* --overlap-param-gather: after each need start the all-gather of the next
 * unit in the pass's direction (forward: the next layer, backward: the one
 * before), so up to three units are resident; --overlap-grad-reduce: each
 * unit's reduce-scatter runs on until the next unit's starts (or the unit
 * is needed again, or the step finishes). comm: all-gather_start,
 * reduce_scatter_start(intra). */
void mtc_fsdp_set_overlap(mtc_fsdp *f, int overlap_param_gather, int overlap_grad_reduce);
/* --grad-reduce-in-bf16: each unit's reduce-scatter carries bf16 (this
 * microbatch's gradients rounded; Megatron's megatron_fsdp_grad_comm_dtype
 * bf16), the result widened and accumulated in the fp32 shard. Allocates a
 * bf16 staging of the largest unit and an fp32 copy of the shards. */
mtc_result_t mtc_fsdp_set_grad_reduce_bf16(mtc_fsdp *f);
/* --bf16 with optim_grads_params: pc (bf16 values in fp32 storage) and p16
 * (bf16), the model's compute copies at this buffer's place (the params'
 * offsets), become what a unit's gather fills: this rank's fp32 shard
 * rounded to bf16, all-gathered as bf16 into p16 (half the bytes),
 * widened into pc; the bits are the rounding of the gathered fp32 params.
 * Released and pooled with the unit outside the shard as the fp32 params
 * were, which from then on stay the shard only (mtc_fsdp_gather_all still
 * gathers them whole, for saves; the next need gives them back). The
 * model must not refresh pc from its params (mtc_model_copies_gathered).
 * p16 NULL (no oneDNN bf16 copy; f16: --fp16's fp16 values): the shard
 * rounded into pc and gathered there as fp32 (the bytes of the fp32
 * gather). Before mtc_fsdp_shard; a no-op for another strategy.
 * comm: all-gather(intra) per unit, bf16 with p16, else fp32. */
mtc_result_t mtc_fsdp_set_compute_copies(mtc_fsdp *f, float *pc, mtc_bf16 *p16, int f16);
/* --fsdp-double-buffer (Megatron's FixedPoolAllocator): the page pool keeps
 * two units' pages of params and of gradients for the whole run (counted
 * in mtc_fsdp_memory) instead of giving back what no unit took at once. */
void mtc_fsdp_set_double_buffer(mtc_fsdp *f);
struct mtc_trace;
/* Record a span per unit all-gather and reduce-scatter (name "all-gather
 * unit 3", args unit, elements, prefetch, backward) on a track "FSDP units
 * <label>" of t, while t records. Once; later calls are no-ops. */
void mtc_fsdp_set_trace(mtc_fsdp *f, struct mtc_trace *t, const char *label);
/* The model pass about to run is a forward (0) or a backward (1) of a
 * microbatch: sets the prefetch direction, and in a backward each unit's
 * gradient ranges take the pages of the last released unit (the page
 * pool, dp/fsdp.c) when params_needed comes for it. */
void mtc_fsdp_begin_pass(mtc_fsdp *f, int backward);
/* After the params were initialised or loaded (whole on every rank): give
 * back every page outside this rank's shards (params with
 * optim_grads_params, grads always); restarts the peak measurement. */
void mtc_fsdp_shard(mtc_fsdp *f);

/* Params [first, last) are about to be read (forward or backward): their
 * units gathered, units not needed by this call or the one before released.
 * comm: all-gather(intra) per unit not resident. */
mtc_result_t mtc_fsdp_params_needed(mtc_fsdp *f, int first, int last);
/* Every unit gathered (before params are read outside a pass: saves,
 * exports); the next mtc_fsdp_params_needed releases them again. */
mtc_result_t mtc_fsdp_gather_all(mtc_fsdp *f);

/* Gradients of params [first, last) are complete for this microbatch; a
 * unit whose params all are: comm: reduce-scatter(intra) into this rank's
 * shard (which accumulates over microbatches), the rest released. */
mtc_result_t mtc_fsdp_grads_ready(mtc_fsdp *f, int first, int last);
/* A new step: the owned shards zeroed, every other gradient page released. */
void mtc_fsdp_zero_grad(mtc_fsdp *f);
/* After the last microbatch: INVALID_USAGE naming a unit never reduced. */
mtc_result_t mtc_fsdp_finish(mtc_fsdp *f);

/* The part of param p's gradient this rank keeps (its shard's
 * intersection with the param; *n may be 0); -1 when p is not in this
 * object's buffer. Reductions outside the buffer's own (the tied
 * embedding over EMBEDDING_GROUP, SP layer norms over TP) take only this
 * part: every member of those groups lays the param out alike. */
int mtc_fsdp_held_grad(const mtc_fsdp *f, int p, float **g, size_t *n);
/* Peak resident bytes of the params (with compute copies set: and of
 * theirs) and grads buffers since init (sampled after each gather and
 * before each reduce-scatter) and the AdamW state. */
void mtc_fsdp_memory(const mtc_fsdp *f, mtc_dp_memory *out);
/* Resident bytes of the params and grads buffers (and compute copies)
 * when mtc_fsdp_shard first ran: the most set-up held (nothing is released before it); with
 * --init-model-with-meta-device the pages of this rank's shards that
 * hold params, else the whole buffers. */
size_t mtc_fsdp_setup_bytes(const mtc_fsdp *f);
/* The largest unit (a bucket, padding included) in elements. */
int64_t mtc_fsdp_max_unit(const mtc_fsdp *f);

#endif
