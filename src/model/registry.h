/* model/registry.h - the parameter registry: the one table that drives
 * initialisation, splits, reductions, the norm and checkpoints
 * (docs/architecture.md).
 *
 * Every model parameter is registered once, with its global name (Hugging
 * Face GPT-2 naming), global shape, initialisation rule and the fields the
 * parallel layers fill in later (split, reduction groups, TP duplicate).
 * Initialisation, weight decay, gradient norm, checkpoints and the parity
 * tests read this table instead of knowing layer details.
 *
 * Weights of linear layers are stored as nn.Linear: (out, in). Hugging
 * Face's GPT-2 Conv1D stores (in, out); converters must transpose.
 *
 * Flat buffers are laid out in BACKWARD order, as Megatron's grad buffer:
 * the last registered parameter (ln_f.bias) sits at offset 0 and wte.weight
 * at the end, so gradient buckets fill up while backward proceeds.
 *
 * Does not allocate the flat buffers (model/ does) and does not
 * communicate. */
#ifndef MTC_MODEL_REGISTRY_H
#define MTC_MODEL_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "core/result.h"
#include "grid/grid.h" /* MTC_REDUCE_*: which group sums a gradient */

#define MTC_PARAM_NAME_MAX 64
#define MTC_PARAM_MAX_BLOCKS 4

typedef enum {
    MTC_INIT_NORMAL = 0, /* normal(0, std) from the counter-based generator */
    MTC_INIT_ZEROS,
    MTC_INIT_ONES,
} mtc_init_kind;

/* How a parameter is split over tensor parallelism (Megatron's layers). */
typedef enum {
    MTC_SPLIT_NONE = 0, /* replicated on every TP rank */
    MTC_SPLIT_COLUMN,   /* ColumnParallelLinear: output rows split */
    MTC_SPLIT_QKV,      /* column, fused [q | k | v] blocks each split by heads / groups */
    MTC_SPLIT_FC1,      /* column, fused [gate | up] blocks with SwiGLU (one block without) */
    MTC_SPLIT_ROW,      /* RowParallelLinear: input columns split */
    MTC_SPLIT_VOCAB,    /* VocabParallelEmbedding / the output layer: vocabulary rows split */
} mtc_split_rule;

typedef struct {
    char name[MTC_PARAM_NAME_MAX]; /* "h.3.attn.c_attn.weight" */
    int role;                      /* the family table's role (model/model.h's enums) */
    mtc_split_rule split_rule;     /* the rule; split_dim / blocks below are its effect */
    int ndim;                      /* 1 or 2 */
    int64_t shape[2];              /* global shape; (out, in) for linear weights */
    size_t numel;                  /* global element count */
    int layer;                     /* transformer layer, -1 for embeddings and ln_f */
    mtc_init_kind init;
    float init_std; /* for MTC_INIT_NORMAL */
    int is_2d;      /* weight decay applies (Megatron: not bias, not 1-D) */
    int emb_or_out; /* word embedding or output layer: Megatron's is_embedding_or_output_parameter
                       (--decoupled-lr applies to it) */
    int expert;     /* -1, or the expert of an MoE expert's parameter (moe/moe.h) */
    /* ---- filled by the parallel issues (serial: none / 0 / 1) ---- */
    int split_dim;    /* -1 = not split; else the dim split over TP */
    int split_blocks; /* fused row blocks along dim 0 ([q|k|v] = 3, [gate|up] = 2) */
    int64_t block_rows[MTC_PARAM_MAX_BLOCKS]; /* global rows of each block (sum = shape[0]) */
    unsigned reduce_groups;                   /* MTC_REDUCE_* bits */
    int tp_duplicate;                         /* replicated over TP: counted once in grad norm */
    int shared_copy; /* a second copy of a parameter held elsewhere (the tied
                        embedding on the last pipeline stage): its gradient is
                        made equal by the embedding-group all-reduce and counted
                        in the norm and the gathered model from the first copy */
    /* ---- this rank's storage ---- */
    size_t local_numel;
    size_t offset;        /* in the flat param and grad buffers (floats) */
    size_t global_offset; /* in the serial (tp = 1) layout of the same model */
} mtc_param;

typedef struct {
    mtc_param *params; /* in registration (forward) order */
    int count;
    int capacity;
    size_t total; /* floats in the flat buffers */
    /* expert parallelism: this rank holds only experts [expert_first,
     * expert_end) (mtc_registry_split_ep); the others keep their global
     * entry (name, shape, global_offset) with local_numel 0 */
    int expert_first, expert_end; /* [0, INT_MAX) when not split */
    int ep_split;                 /* mtc_registry_split_ep was called (ep > 1) */
    size_t global_total;          /* floats of the serial layout (sum of numel) */
    int tp, tp_rank;              /* the TP split the local shards follow (1, 0 when serial) */
    int etp; /* experts' split (0 or 1: whole experts; else etp = tp: an expert's fc1 split
                as MTC_SPLIT_FC1 and fc2 as MTC_SPLIT_ROW over the TP ranks, the global
                tensor being the whole expert) */
} mtc_registry;

mtc_result_t mtc_registry_init(mtc_registry *reg, int capacity);
void mtc_registry_free(mtc_registry *reg);
/* Register a parameter; shape1 = 0 for 1-D. */
mtc_result_t mtc_registry_add(mtc_registry *reg, const char *name, int layer, int64_t shape0,
                              int64_t shape1, mtc_init_kind init, float init_std);
/* Split parameter p over TP (before mtc_registry_layout): split_dim 0
 * (output rows) or 1 (input columns); local_numel becomes numel / reg->tp.
 * Row splits take `nblocks` fused row blocks of rows[b] global rows each
 * (rows NULL: one block of all rows), every block split evenly, so the
 * local shard is [block0_r | block1_r | ...]: [q_r | k_r | v_r] for a fused
 * QKV with grouped-query attention, [gate_r | up_r] for SwiGLU's fc1.
 * Each rows[b] must be divisible by tp (the caller validated the shapes).
 * reduce_groups / tp_duplicate are set by the caller. */
void mtc_registry_split(mtc_registry *reg, int p, int split_dim, int nblocks, const int64_t *rows);
/* Expert-parallel split (before mtc_registry_layout): the parameters of
 * experts outside [first, end) are not held by this rank (local_numel 0,
 * mtc_param_absent), those inside are held whole (or as their ETP slice at
 * etp = tp, reg->etp). Expert e's tensors keep their global names, so a
 * checkpoint stores every expert once. Clears MTC_REDUCE_TP on every
 * expert param: their gradients are summed over expert-DP alone (which
 * holds the TP ranks' copies when etp < tp). */
void mtc_registry_split_ep(mtc_registry *reg, int first, int end);
/* p is registered globally but this rank holds none of it (an expert of
 * another EP rank). */
static inline int mtc_param_absent(const mtc_param *p) { return p->local_numel == 0; }
/* p belongs in the expert-parallel gradient buffer (an expert's parameter
 * with the experts split over EP, held here). */
static inline int mtc_param_expert_parallel(const mtc_registry *reg, const mtc_param *p) {
    return p->expert >= 0 && reg->ep_split && p->local_numel > 0;
}
/* Global element index (row-major in the global shape) of local element
 * `local` of p on TP rank r (of reg->tp). */
size_t mtc_registry_global_index(const mtc_registry *reg, const mtc_param *p, int r, size_t local);
/* Fill local elements [first, first + n) of p's shard with the serial
 * run's initial values of the global elements they hold. */
void mtc_registry_init_local(const mtc_registry *reg, const mtc_param *p, float *dst, size_t first,
                             size_t n, uint64_t seed);
/* Assign offsets in backward order (last registered first); sets total,
 * global_offset and global_total. */
void mtc_registry_layout(mtc_registry *reg);
/* Index of `name`, -1 when absent. */
int mtc_registry_find(const mtc_registry *reg, const char *name);
/* Fill the flat buffer `params` (reg->total floats) from the registry:
 * element i of parameter p = normal(seed, stream_of(name), i) * std, so a
 * shard of any layout draws the serial run's values. */
void mtc_registry_init_params(const mtc_registry *reg, float *params, uint64_t seed);
/* The name that keys a parameter's initial values: its name without
 * Hugging Face GPT-2's "transformer." body prefix, so GPT-2's initial
 * values stayed those of the names mtc used before it adopted the prefix. */
const char *mtc_param_stream_name(const char *name);
/* Fill one element range [first, first + n) of parameter p (any split of
 * the work gives the same values: the generator is counter-based). */
void mtc_registry_init_range(const mtc_param *p, float *dst, size_t first, size_t n, uint64_t seed);

#endif
