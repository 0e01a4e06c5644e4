/* model/model.h - the transformer of both families (GPT-2 and Llama-style,
 * model/family.c) on the parameter registry, with the forward and backward
 * pass of ONE microbatch on ONE model chunk.
 *
 * A chunk is a range of transformer layers [first_layer, last_layer), with
 * or without the embedding (first stage) and the final norm + loss (last
 * stage); serial runs use one chunk holding everything. Activations of
 * several in-flight microbatches live in arena "slots" sized at start;
 * nothing is allocated in the step loop.
 *
 * Layer (pre-norm, dropout as Megatron places it; model/block.h):
 *   x = drop_h(wte[tok] (+ wpe[pos] with learned positions))       (embedding)
 *   x = x + drop_h(proj(core_attention(drop_a; RoPE(qkv(norm1(x))))))
 *   x = x + drop_h(fc2(act(fc1(norm2(x)))))        act = GELU, or SwiGLU
 *   logits = norm_f(x) · Wᵀ    W = wte (tied) or the output layer (untied)
 * norm = LayerNorm or RMSNorm; grouped-query attention when NG < NH.
 * Dropout masks are keyed by (seed, layer, site, iteration) and the global
 * sample index (pass->b0), so any sharded layout draws the serial masks.
 *
 * Tensor and sequence parallelism: the same code path runs on a TP
 * communicator through tp/layers.h (attention split by heads and key/value
 * groups, MLP column then row parallel, vocabulary-parallel embedding,
 * head and cross-entropy); with a NULL communicator (tp = 1) those layers
 * are bitwise the nn/ kernels, so the serial model is the tp = 1 case.
 * Under SP the (B, T, C) tensors between TP regions hold T/tp positions;
 * dropout is keyed by global sample, position and head.
 *
 * Relies on nn/ kernels, tp/ layers, model/block.h and the registry;
 * communicates only inside the TP layers; does not reduce gradients over
 * any group (train/ does, reading the registry), load data or step the
 * optimizer. */
#ifndef MTC_MODEL_MODEL_H
#define MTC_MODEL_MODEL_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "comm/comm.h"
#include "core/mem.h"
#include "core/result.h"
#include "cp/cp.h"
#include "model/block.h"
#include "model/mla.h"
#include "model/registry.h"
#include "moe/moe.h"
#include "nn/llama.h"
#include "nn/nn.h"
#include "tp/layers.h"

typedef enum { MTC_NORM_LAYERNORM = 0, MTC_NORM_RMSNORM } mtc_norm_kind;

#define MTC_MTP_MAX_DEPTHS 64
typedef enum { MTC_POS_LEARNED = 0, MTC_POS_ROPE, MTC_POS_NONE } mtc_pos_kind;

/* A zeroed config plus the shape fields is GPT-2 (LayerNorm, learned
 * positions, GELU, biases, tied head, NG = NH, HS = C/NH). The Llama family
 * sets normalization RMSNorm, position RoPE, swiglu, untie, no biases and
 * usually num_query_groups < num_heads (grouped-query attention). */
typedef struct {
    int num_layers;              /* L */
    int hidden_size;             /* C */
    int num_heads;               /* NH */
    int ffn_hidden_size;         /* F (GPT-2: 4C); fc1 has 2F rows with swiglu */
    int seq_length;              /* T */
    int max_position_embeddings; /* rows of wpe, and the RoPE table's positions */
    int vocab_size;              /* V */
    int padded_vocab_size;       /* Vp >= V, rows of wte */
    float hidden_dropout;
    float attention_dropout;
    float init_std; /* 0.02 */
    /* ---- the family knobs (Megatron's flags) ---- */
    mtc_norm_kind normalization;     /* --normalization LayerNorm|RMSNorm */
    float norm_epsilon;              /* --norm-epsilon (0 = 1e-5) */
    mtc_pos_kind position_embedding; /* --position-embedding-type learned_absolute|rope|none */
    float rotary_base;               /* --rotary-base (0 = 10000) */
    float rotary_percent;            /* --rotary-percent (0 = 1.0) */
    int rotary_interleaved;          /* --rotary-interleaved */
    int swiglu;                      /* --swiglu: fc1 = [gate | up], silu(gate) * up */
    int num_query_groups;            /* --num-query-groups NG (0 = NH: no GQA) */
    int kv_channels;                 /* --kv-channels HS (0 = C / NH) */
    int untie_embeddings;            /* --untie-embeddings-and-output-weights */
    int disable_bias_linear;         /* --disable-bias-linear */
    int add_qkv_bias;                /* --add-qkv-bias (QKV bias even without linear biases) */
    int qk_layernorm;                /* --qk-layernorm: per-head norm of q and k (model/block.c) */
    mtc_moe_config moe;              /* mixture of experts (num_experts 0: dense MLPs) */
    mtc_mla_config mla; /* --multi-latent-attention (model/mla.h; enabled 0: standard) */
    int mtp_num_layers; /* --mtp-num-layers D <= MTC_MTP_MAX_DEPTHS: multi-token prediction
                           depths (model/mtp.h) */
    float mtp_loss_scaling_factor; /* --mtp-loss-scaling-factor (Megatron's default 0.1) */
} mtc_model_config;

/* Derived shapes every layer uses (the config's zeros resolved). */
static inline int mtc_model_groups(const mtc_model_config *c) {
    return c->num_query_groups > 0 ? c->num_query_groups : c->num_heads;
}
static inline int mtc_model_head_size(const mtc_model_config *c) {
    return c->kv_channels > 0 ? c->kv_channels : c->hidden_size / c->num_heads;
}
/* An expert's MLP width: --moe-ffn-hidden-size, else ffn-hidden-size. */
static inline int mtc_model_moe_ffn(const mtc_model_config *c) {
    return c->moe.ffn_hidden_size > 0 ? c->moe.ffn_hidden_size : c->ffn_hidden_size;
}
/* Is layer l an MoE layer? MTP depth d is layer num_layers + d and takes
 * the last decoder layer's kind (Megatron builds it from the decoder
 * block's last layer spec). */
static inline int mtc_model_is_moe_layer(const mtc_model_config *c, int l) {
    return mtc_moe_is_layer(&c->moe, l < c->num_layers ? l : c->num_layers - 1);
}
static inline float mtc_model_norm_eps(const mtc_model_config *c) {
    return c->norm_epsilon > 0 ? c->norm_epsilon : 1e-5f;
}

/* Megatron's padding: the smallest multiple of divisible_by (times tp) >= V. */
/* --make-vocab-size-divisible-by is at most this (padded vocab <= 2^28) */
#define MTC_MODEL_MAX_VOCAB_DIVISOR (1 << 20)
int mtc_model_pad_vocab(int vocab_size, int divisible_by, int tp);
/* Refuses impossible shapes with one line naming the value and the fix
 * (MTC_ERR_INVALID_ARGUMENT). */
mtc_result_t mtc_model_config_validate(const mtc_model_config *cfg);
/* Model FLOPs of one iteration (Megatron's formula, no recompute; GPT-2
 * shapes give 72 B s L h^2 (1 + s/(12h) + V/(12hL)) with B the global
 * batch, V padded; GQA and SwiGLU counted as their GEMMs are). */
double mtc_model_flops(const mtc_model_config *cfg, int64_t global_batch);
/* The tensor-parallel split's rules for this model, one line each naming
 * the fix (heads, key/value groups, ffn, padded vocabulary by tp;
 * seq-length by tp under SP): the one check train/, cli/ and the model
 * use. */
mtc_result_t mtc_model_validate_tp(const mtc_model_config *cfg, int tp, int sequence_parallel);

/* The parameters of one transformer layer, by role (model/family.c):
 * every family's layer is these roles, some absent (NULL) in a family or
 * configuration (RMSNorm has no bias; --disable-bias-linear drops the
 * linear biases). Shapes are this TP rank's shards, (out, in) as nn.Linear:
 *   norm1 (C)            qkv (QD_tp + 2 KD_tp, C) = [q_r | k_r | v_r]
 *   proj (C, QD_tp)      norm2 (C)
 *   fc1 (F1_tp, C): [gate_r | up_r] with swiglu   fc2 (C, F_tp)
 * with QD = NH*HS, KD = NG*HS, F1 = 2F with swiglu, else F. */
typedef enum {
    MTC_ROLE_NORM1_W = 0,
    MTC_ROLE_NORM1_B,
    MTC_ROLE_QKV_W,
    MTC_ROLE_QKV_B,
    MTC_ROLE_PROJ_W,
    MTC_ROLE_PROJ_B,
    MTC_ROLE_NORM2_W,
    MTC_ROLE_NORM2_B,
    MTC_ROLE_FC1_W,
    MTC_ROLE_FC1_B,
    MTC_ROLE_FC2_W,
    MTC_ROLE_FC2_B,
    MTC_ROLE_QNORM_W, /* --qk-layernorm: (HS) per-head norms of q and k, after the */
    MTC_ROLE_QNORM_B, /* QKV linear and before RoPE; replicated over TP, */
    MTC_ROLE_KNORM_W, /* gradients summed over TP (Megatron's finalize_model_grads) */
    MTC_ROLE_KNORM_B,
    /* --multi-latent-attention (model/mla.h) has these instead of qkv and
     * the q/k norms: q_proj (no --q-lora-rank) or q_down, its norm, q_up;
     * kv_down, its norm, kv_up (proj is row-parallel over NH x v-head-dim) */
    MTC_ROLE_MLA_Q_W,
    MTC_ROLE_MLA_QD_W,
    MTC_ROLE_MLA_QN_W,
    MTC_ROLE_MLA_QN_B,
    MTC_ROLE_MLA_QU_W,
    MTC_ROLE_MLA_KVD_W,
    MTC_ROLE_MLA_KVN_W,
    MTC_ROLE_MLA_KVN_B,
    MTC_ROLE_MLA_KVU_W,
    MTC_NROLES,
    /* an MoE layer (moe/moe.h) has these instead of fc1 / fc2: the router,
     * the expert bias (not trained: moved after each step), the shared
     * expert (a dense MLP), then E experts of four roles each */
    MTC_ROLE_ROUTER_W = MTC_NROLES,
    MTC_ROLE_EXPERT_BIAS,
    MTC_ROLE_SHARED_FC1_W,
    MTC_ROLE_SHARED_FC1_B,
    MTC_ROLE_SHARED_FC2_W,
    MTC_ROLE_SHARED_FC2_B,
    MTC_ROLE_EXP_FC1_W, /* per expert (mtc_param.expert) */
    MTC_ROLE_EXP_FC1_B,
    MTC_ROLE_EXP_FC2_W,
    MTC_ROLE_EXP_FC2_B,
    /* an MTP depth (layer num_layers + d, model/mtp.h) also has these: the
     * norms of the embedding and of the hidden state, the projection of
     * their concatenation (C, 2C) and its own final norm */
    MTC_ROLE_MTP_ENORM_W,
    MTC_ROLE_MTP_ENORM_B,
    MTC_ROLE_MTP_HNORM_W,
    MTC_ROLE_MTP_HNORM_B,
    MTC_ROLE_MTP_EH_PROJ,
    MTC_ROLE_MTP_NORM_W,
    MTC_ROLE_MTP_NORM_B,
    MTC_NROLES_ALL
} mtc_layer_role;

typedef struct {
    float *w[MTC_NROLES_ALL]; /* views into the flat buffer; NULL when the role is absent */
    float **xw;               /* MoE layer: (4, E) expert views, role EXP_FC1_W + r, expert e at
                                 xw[r * E + e]; NULL for a dense layer */
    int first, last;          /* registry indices [first, last) of this layer's params */
} mtc_model_layer;

/* Parameters outside the layers. */
typedef enum {
    MTC_ROLE_WTE = 0, /* input embedding (Vp, C), vocabulary-parallel */
    MTC_ROLE_WPE,     /* learned positions (max positions, C) */
    MTC_ROLE_NORMF_W, /* final norm */
    MTC_ROLE_NORMF_B,
    MTC_ROLE_HEAD, /* untied output layer (Vp, C), vocabulary-parallel */
    MTC_NGLOBAL_ROLES
} mtc_global_role;

/* How one pass is keyed (dropout) and whether it trains. */
typedef struct {
    int train;            /* 0: no dropout (eval, generate) */
    uint64_t seed;        /* dropout seed */
    uint64_t iteration;   /* 1-based training iteration: new masks each step */
    int b0;               /* position of row 0 in the global batch */
    int first_microbatch; /* the step's first microbatch: the gradients start
                             from zero (its training forward zeroes them, as
                             the fused head accumulates the head's weight
                             gradient there; otherwise its backward does) */
    float loss_scale;     /* > 0 (training): the forward with targets also makes
                             the head's gradients, chunk by chunk (the input
                             gradient kept in the slot, the weight gradient
                             accumulated); backward must then be given the same
                             scale */
    /* Backward calls grads_ready(ctx, first, last) as soon as the gradients
     * of params [first, last) (forward indices) are complete for this
     * microbatch (gradient-reduction overlap); NULL = no calls. */
    mtc_result_t (*grads_ready)(void *ctx, int first, int last);
    void *grads_ready_ctx;
    /* Forward calls params_needed(ctx, first, last) before it first reads
     * params [first, last) (forward indices): the embedding, each layer, the
     * head (--overlap-param-gather waits there); NULL = no calls. An error
     * becomes m->error. */
    mtc_result_t (*params_needed)(void *ctx, int first, int last);
    void *params_needed_ctx;
    /* The first microbatch's gradients start from zero through
     * zero_grad(ctx) instead of mtc_model_zero_grad (Megatron-FSDP: only
     * the shards, dp/fsdp.h; zeroing the whole buffer would make every
     * page resident); NULL = mtc_model_zero_grad. */
    void (*zero_grad)(void *ctx);
    void *zero_grad_ctx;
} mtc_model_pass;

typedef struct mtc_model_slot mtc_model_slot;

typedef struct {
    mtc_model_config cfg;
    int B, T;                    /* largest microbatch this model runs */
    int first_layer, last_layer; /* this chunk's layers */
    int has_embedding, has_head;
    int pidx[MTC_NGLOBAL_ROLES]; /* registry index of each global role, -1 outside the chunk */
    tp_ctx tp;                   /* TP communicator (NULL: tp 1), pool, sequence parallel
                                    (tp/context.c) */
    int tp_size, tp_rank;
    int T_loc;          /* T / tp under sequence parallelism, else T (T = seq / cp) */
    mtc_result_t error; /* first communication error of a forward (sticky) */
    mtc_registry reg;
    float *params, *grads; /* flat, reg.total floats each, backward order */
    float *g[MTC_NGLOBAL_ROLES],
        *dg[MTC_NGLOBAL_ROLES]; /* views of the global roles (NULL: none) */
    const float *head_w;        /* the LM head's weight: wte (tied) or the output layer */
    float *dhead_w;
    mtc_model_layer *layers, *dlayers; /* [L + D], entries outside the chunk are all NULL */
    int mtp_layers;         /* D on the chunk with the loss (layers L .. L+D-1), else 0 */
    int mtp_standalone;     /* mtc_model_chunk_opts.mtp_standalone (1: mtp_layers = D here) */
    int mtp_losses;         /* D on the chunk computing the MTP losses (the loss's), else 0 */
    int states_in;          /* (B, T_loc, C) hidden states in the pipeline input: 1, or
                               1 + D after a standalone MTP stage ([h_0 | h_1 .. h_D]) */
    int states_out;         /* the same in the output */
    float *mtp_send;        /* standalone MTP stage: the last forward's [h_0 | h_1 .. h_D] */
    double *mtp_loss_sum;   /* (D) each depth's summed token losses since the caller zeroed it */
    int *mtp_tok, *mtp_tgt; /* (B, T) a depth's shifted tokens and labels */
    float *mtp_mask;        /* (B, T) 1 where the shifted label exists, else 0 */
    float *mtp_full;        /* (B, T, C) the projection's gathered output (SP) */
    float *mtp_cat_total;   /* (B, T, 2C) the projection's gathered input (SP) */
    float *mtp_dcat;        /* (B, T_loc, 2C) the projection's input gradient */
    float *mtp_carry;       /* (B, T_loc, C) d(hidden state) from the next depth */
    int *mtp_cp_rows;       /* --cp: 2 cp (B, T_cp) gathered tokens | labels, then their
                               whole rows 2 (B, Tg) (model/mtp.c; heap, not the arena) */
    nn_rope_table rope;     /* RoPE cos/sin (zeroed without rotary positions) */
    nn_yarn_table yarn;     /* MLA's rotation (zeroed without MLA) */
    int rec_up;             /* --recompute-modules mla_up_proj */
    float *mla_qkv;         /* rec_up: one layer's MLA q, k, v for all */
    cp_ctx cp;        /* context parallelism: cp.cp ranks, this rank's global positions (cp.pos)
                         (cp/context.c) */
    cp_ctx *cp_layer; /* [last_layer - first_layer] with per-layer comm types, else NULL */
    int nslots;
    mtc_model_slot *slots;
    int head_chunk;     /* tokens per LM-head chunk (tp_vocab_head_xent) */
    int full_logits;    /* the slots keep (B, T, Vp/tp) logits for forwards without targets */
    float *head_logits; /* (head_chunk, Vp/tp) the one chunk buffer all slots share */
    int nrec;           /* the chunk's first nrec layers are recomputed in backward */
    mtc_model_slot *rc; /* one layer's activations shared by the recomputed layers */
    int rec_mlp;        /* --recompute-modules mlp: the MLP's inner activations are not kept */
    float *mlp_fch;     /* rec_mlp: one layer's (B,T,F1_tp) for all */
    int rec_shared;     /* --recompute-modules shared_experts: the shared expert's inner
                           activations are not kept */
    float *shared_fch;  /* rec_shared (or rec_moe): one layer's (B,T,SF1_tp) for all */
    int rec_moe;        /* --recompute-modules moe: an MoE layer's activations are not kept;
                           its forward runs again in backward */
    float *moe_rc;      /* rec_moe: one layer's moe_acts for all */
    float *moe_fchg;    /* --recompute-modules moe_act (cfg.moe.recompute_act): one layer's
                           expert activation output for all */
    /* shared scratch */
    float *fwd_tmp;             /* (B, T_loc, C) */
    float *ln_tmp;              /* (B, T_loc, C) a layer norm output (not kept per layer) */
    float *dres, *dtmp, *dtmp2; /* (B, T_loc, C) */
    float *in_total;            /* (B, T, C) SP gather buffer shared by all layers */
    float *scratch;             /* TP layer scratch (max over the layers' needs) */
    mtc_arena arena;
    nn_pool *pool;        /* not owned */
    moe_stats *moe_stats; /* [L] per MoE layer of the chunk (NULL: dense model) */
    moe_groups moe;       /* the MoE layers' groups (moe/groups.c; all NULL for a dense model) */
    /* ---- mixed precision (--bf16 / --fp16): params and grads above stay
     * fp32 (the optimizer's main params and main grads); the layers read
     * params_c, the main params rounded to bf16 / fp16 (kept in fp32
     * storage for the fp32 kernels: norms, embeddings, biases), and with
     * bf16 on oneDNN the GEMMs read params16, the same values as bf16
     * (not allocated with bf16_gemm_f32: its GEMMs read params_c). Both are
     * refreshed from params lazily, per parameter, the first time a
     * forward needs it after mtc_model_params_changed. */
    tp_precision precision;
    float *params_c;     /* (reg.total) NULL in fp32 */
    mtc_bf16 *params16;  /* (reg.total) bf16 on oneDNN only */
    tp_lowp lowp;        /* the TP layers' view of the above and their conversion scratch */
    uint64_t lp_version; /* bumped by mtc_model_params_changed */
    uint64_t *lp_seen;   /* (reg.count) version each parameter's copies were made from */
    int lp_written;      /* mtc_model_lowp_written: the next params_changed is a no-op */
    /* --bf16 with the distributed optimizer (mtc_model_shard_main_params):
     * params is valid only in this rank's shard, the optimizer's all-gather
     * writes params_c, and a refresh only makes params16 from params_c */
    int main_sharded;
    int copies_gathered;      /* mtc_model_copies_gathered: FSDP writes params_c and params16 */
    size_t main_released;     /* bytes of params given back to the OS */
    struct tp_fp8_state *fp8; /* the fp8 layers' scales and amax histories (NULL: none) */
} mtc_model;

/* --bf16 with the distributed optimizer: keep fp32 main params only for
 * the element ranges keep[i] = [start, end) (this rank's shard, sorted),
 * as Megatron. Makes every compute copy current from params first; then
 * the pages of params outside the ranges are given back to the OS and made
 * inaccessible (a stray read faults instead of reading stale values), and
 * from then on the compute copy params_c is written by whoever gathers the
 * owners' bf16 params (mtc_distopt_gather_into). MTC_ERR_INVALID_USAGE
 * outside --bf16; MTC_ERR_SYSTEM if the kernel refuses. */
mtc_result_t mtc_model_shard_main_params(mtc_model *m, const int64_t (*keep)[2], int nkeep);
/* Megatron-FSDP with --bf16 (dp/fsdp.h mtc_fsdp_set_compute_copies): the
 * compute copies are written by each unit's gather, never refreshed from
 * params (which hold only the shard). */
void mtc_model_copies_gathered(mtc_model *m);

/* The whole model's parameter count and the parameters one token uses
 * (k of each MoE layer's E experts), from the serial model's registry. */
mtc_result_t mtc_model_param_counts(const mtc_model_config *cfg, double *total, double *active);

/* Builds the registry and flat buffers (zeroed) and sizes the activation
 * arena for `nslots` in-flight microbatches of (B, T = cfg->seq_length).
 * The whole model is one chunk. pool may be NULL. */
mtc_result_t mtc_model_init(const mtc_model_config *cfg, int B, int nslots, nn_pool *pool,
                            mtc_model **out);
/* The same holding this rank's shards of the grid's TP split (grid NULL:
 * serial). Refuses shapes the split cannot take (heads, ffn, padded
 * vocabulary not divisible by tp; seq-length by tp under SP) with
 * INVALID_ARGUMENT. sequence_parallel with tp 1 is ignored. */
mtc_result_t mtc_model_init_tp(const mtc_model_config *cfg, int B, int nslots, nn_pool *pool,
                               mtc_grid_t grid, int sequence_parallel, mtc_model **out);
/* Where the flat buffers put each parameter: given the chunk's registry
 * (shapes in forward order), offsets[i] for param i and *total floats (the
 * distributed optimizer's padded layout). NULL = the registry's packing. */
typedef mtc_result_t (*mtc_model_layout_fn)(void *ctx, const mtc_registry *reg, size_t *offsets,
                                            size_t *total);

/* The strategies' own options beside the grid's sizes, one struct per
 * strategy (tp/layers.h, cp/cp.h): set by the command line, carried by
 * train/ to each chunk without being read on the way. */
typedef struct {
    tp_options tp;
    cp_options cp;
} mtc_model_parallel;

/* Every strategy's rule on the model and the layout, before anything is
 * built (model/model_parallel.c): TP's split of the model, the ETP rule
 * (moe/), CP's comm types and sequence rule (cp/). g: the grid's
 * configuration as given, spec: its validated form. INVALID_ARGUMENT
 * naming the value and the fix. */
mtc_result_t mtc_model_validate_parallel(const mtc_model_config *cfg, const mtc_grid_config *g,
                                         const mtc_grid_spec *spec, const mtc_model_parallel *o);
/* The strategy options every rank must agree on, as (flag, value) pairs
 * for train/'s agreement check: returns how many (<= MTC_MODEL_PARALLEL_KEYS). */
#define MTC_MODEL_PARALLEL_KEYS 3
int mtc_model_parallel_keys(const mtc_model_parallel *o, int num_layers, const char **flags,
                            double *values);

/* One pipeline chunk. */
typedef struct {
    int B, nslots;               /* largest microbatch, in-flight activation slots */
    nn_pool *pool;               /* may be NULL */
    mtc_grid_t grid;             /* the rank's grid (NULL: serial): the TP (tp/), CP (cp/)
                                    and MoE (moe/) contexts are derived from it; the chunk
                                    holds seq/cp positions, chunks r and 2cp-1-r */
    mtc_model_parallel parallel; /* the strategies' own options (TP's, CP's) */
    int first_layer, last_layer; /* the chunk's layers [first, last) */
    int has_embedding, has_head; /* first / last virtual pipeline stage */
    mtc_model_layout_fn layout;  /* NULL: packed backward order */
    int recompute_layers;        /* --recompute-granularity full: recompute the chunk's first
                                    N layers from their inputs in backward (0: none) */
    int recompute_mtp;           /* with recompute_layers covering the chunk's decoder layers
                                    (--recompute-method uniform): the MTP depths' layers too */
    int mtp_standalone;          /* Megatron's standalone MTP stage (pp/layout.h): 1 on it
                                    (its layers, the final norm, the MTP depths; no head;
                                    output [h_0 | h_1 .. h_D]), 2 after it (input the 1 + D
                                    states: the loss's chunk runs the shared head on each, an
                                    empty chunk passes them on); 0: MTP with the loss */
    tp_precision precision;      /* TP_PREC_BF16 (--bf16), TP_PREC_FP16 (--fp16); 0: fp32 */
    int recompute_mlp;           /* --recompute-granularity selective --recompute-modules mlp:
                                    each layer's MLP forward runs again in its backward */
    int recompute_mla_up;        /* --recompute-modules mla_up_proj: MLA's up projections and
                                    rotations run again in backward */
    int recompute_moe;           /* --recompute-modules moe: each MoE layer again in backward */
    int recompute_moe_act;       /* --recompute-modules moe_act: the experts' activation again */
    int recompute_shared;        /* --recompute-modules shared_experts: each MoE layer's shared
                                    expert forward runs again in its backward */
    int bf16_gemm_f32;           /* --bf16: fp32 GEMMs on bf16 values, no bf16 copy and no
                                    oneDNN bf16 (nn_bf16_gemm; 0: oneDNN bf16) */
    void *layout_ctx;
    int logits;     /* 1: keep each slot's (B, T, Vp/tp) logits for forwards without targets
                       (mtc_model_logits: generation, tests); 0: training and evaluation only,
                       the head runs in chunks and no (tokens x vocabulary) buffer exists */
    int head_chunk; /* tokens per LM-head chunk (0: MTC_MODEL_HEAD_CHUNK) */
    const struct tp_fp8_config *fp8; /* --fp8-format (tp/fp8_linear.h; needs --bf16, forces
                                       its fp32 GEMMs); NULL: none */
    /* --init-model-with-meta-device: params and grads are not pre-faulted
     * (a page is resident only once written: mtc_model_init_params_ranges) */
    int lazy_buffers;
} mtc_model_chunk_opts;

/* Tokens per chunk of the fused LM head + cross-entropy: a constant, not a
 * fraction of the microbatch, so every layout with the same tokens per rank
 * sums the head's weight gradient in the same order. 128 tokens of GPT-2's
 * 50304-column vocabulary are 25 MB of logits instead of 206 MB for 1024. */
#define MTC_MODEL_HEAD_CHUNK 128
/* mtc train's and mtc plan's chunk (--lm-head-chunk, default): 1024 tokens
 * keep the head's GEMMs at full rate (at 128 tokens its forward and
 * weight-gradient products ran 220 GFLOP/s against 390 and 310 on the Zen 5
 * host's 2 cores, the small GPT's step 10-15% slower) for 206 MB of logits
 * at GPT-2's vocabulary; a smaller chunk trades that speed for memory. */
#define MTC_TRAIN_HEAD_CHUNK 1024

/* One pipeline chunk: layers [first_layer, last_layer), the embedding
 * when has_embedding, the final norm and the LM head when has_head (a tied
 * head keeps its own wte copy when the chunk does not embed). Registry
 * offsets are the chunk's (laid out once, by o->layout when given, before
 * the buffers are allocated); global_offset / global_total are the whole
 * serial model's. */
mtc_result_t mtc_model_init_chunk(const mtc_model_config *cfg, const mtc_model_chunk_opts *o,
                                  mtc_model **out);
/* Collective over the TP group: global (B-independent) parameters in the
 * serial layout: out (reg.global_total) gets every parameter's full value
 * at its global_offset (fused rows unshuffled). scratch: tp * (largest
 * local_numel) floats. from = m->params or m->grads. Parameters outside
 * the chunk are left untouched. */
mtc_result_t mtc_model_gather(const mtc_model *m, float *out, const float *from, float *scratch);
/* model_ranks.c: positions per sample on this rank (seq-length / cp);
 * this rank's global positions of them (the CP context's, NULL: 0..T-1);
 * after mtc_model_gather of each of this rank's n chunks into global
 * (zeros elsewhere), one complete copy on every rank: collective over
 * EXPERT_MODEL_PARALLEL_GROUP (experts split over EP) and
 * PIPELINE_MODEL_PARALLEL_GROUP of grid. */
int mtc_model_seq_per_rank(const mtc_model_config *cfg, mtc_grid_t grid);
const int *mtc_model_positions(const mtc_model *m);
/* The banner line of a built chunk's CP context (nothing at cp 1): its
 * ranks, each layer's comm type and this rank's positions. */
void mtc_model_describe_parallel(const mtc_model *m, const mtc_model_parallel *o, FILE *out);
mtc_result_t mtc_model_gather_ranks(const mtc_model *const *chunks, int n, mtc_grid_t grid,
                                    float *global);
/* model_moe.c: a chunk's per-step work beyond its passes (no-ops for a
 * dense model). Before the step's microbatches: zero its statistics. */
void mtc_model_step_begin(mtc_model *m);
/* After finalize_model_grads: the MoE layers' expert-bias update (Megatron's
 * _update_router_expert_bias). comm: all-reduce(TP x DP x CP) per MoE layer
 * with --moe-router-enable-expert-bias. */
mtc_result_t mtc_model_finalize_grads(mtc_model *m);
/* Collective over world: the step's logged MoE losses and per-layer token
 * statistics (moe/stats.c) over this rank's n chunks and every other
 * rank's; dp: the data-parallel size. Zeroed for a dense model (no comm). */
mtc_result_t mtc_model_moe_summary(const mtc_model *const *chunks, int n, mtc_comm_t world, int dp,
                                   moe_step_summary *out);
/* The banner's MoE lines of a built chunk (nothing for a dense model):
 * layers, experts, routing, the whole model's total and active parameters
 * (mtc_model_param_counts), and the expert-parallel layout of gs. */
void mtc_model_describe_moe(const mtc_model *m, const mtc_grid_spec *gs, FILE *out);
void mtc_model_free(mtc_model *m);
/* Initial weights from the registry (normal(0, std) keyed by name and
 * element; residual projections std/sqrt(2L); LN ones/zeros; biases 0). */
void mtc_model_init_params(mtc_model *m, uint64_t seed);
/* The same, calling progress(ctx, done, total) (elements of this chunk's
 * buffer) on the calling thread after each slice, for a progress bar. */
void mtc_model_init_params_progress(mtc_model *m, uint64_t seed,
                                    void (*progress)(void *ctx, size_t done, size_t total),
                                    void *ctx);
/* Only the elements of the flat buffer inside keep[0..nkeep) ([start,
 * end) pairs, any order) get their initial values (each its serial value,
 * as mtc_model_init_params draws it); the rest is not written, so with
 * lazy_buffers its pages never become resident (Megatron-FSDP's
 * --init-model-with-meta-device: a rank draws only its shards). */
void mtc_model_init_params_ranges(mtc_model *m, uint64_t seed, const int64_t (*keep)[2], int nkeep);
void mtc_model_zero_grad(mtc_model *m);
/* The fp32 params changed (an optimizer step, a load): with --bf16 /
 * --fp16 the rounded copies are made again as the next forward reaches
 * each parameter. A no-op in fp32. */
void mtc_model_params_changed(mtc_model *m);
/* --bf16 on oneDNN with whole fp32 main params: the copies an optimizer
 * pass over all of params may write as it goes (*p16, *pc; both NULL
 * otherwise); after that pass mtc_model_lowp_written marks every copy
 * current, so the next forward does not remake them. */
void mtc_model_lowp_targets(const mtc_model *m, mtc_bf16 **p16, float **pc);
void mtc_model_lowp_written(mtc_model *m);
/* Bytes of the activation arena actually used. */
size_t mtc_model_activation_bytes(const mtc_model *m);

/* Forward of one microbatch, tokens/targets (B, T), B <= m->B, T <= m->T
 * (the whole microbatch on every TP rank; under SP T must be m->T).
 * A communication error sets m->error and returns NaN.
 * With targets: returns the sum of per-token losses, computed chunk by
 * chunk (MTC_MODEL_HEAD_CHUNK tokens) through one shared buffer; with
 * pass->loss_scale > 0 the same sweep makes the head's gradients: the final
 * norm's output gradient kept in the slot until its backward, and the head
 * weight gradient accumulated into m->grads (zeroed first when
 * pass->first_microbatch). Without targets (a model built with
 * opts.logits, as mtc_model_init's are; otherwise MTC_ERR_INVALID_USAGE in
 * m->error and NaN): returns 0 and the slot's logits are (B, T, Vp/tp)
 * logits (mtc_model_logits: slot 0). */
double mtc_model_forward(mtc_model *m, int slot, const int *tokens, const int *targets, int B,
                         int T, const mtc_model_pass *pass);
/* Backward of the microbatch in `slot` (forward with targets first);
 * loss_scale = d(loss)/d(token loss), 1/(global_batch*T) for Megatron's
 * mean. Accumulates (+=) into m->grads, which start from zero when
 * pass->first_microbatch (zeroed here unless the training forward did;
 * after a forward without loss_scale the head's chunks run again here). Returns the first
 * communication error. Under SP the layer-norm and row-parallel-bias gradients are partial (TP sums
 * are the caller's, see registry reduce_groups MTC_REDUCE_TP). */
mtc_result_t mtc_model_backward(mtc_model *m, int slot, const int *tokens, const int *targets,
                                int B, int T, float loss_scale, const mtc_model_pass *pass);
/* The logits of slot 0's last forward without targets (B, T, Vp/tp). */
const float *mtc_model_logits(const mtc_model *m);

/* Pipeline hooks (a chunk without embedding or head). The chunk input of a
 * slot (B, T_loc, C): write it before the forward when the chunk has no
 * embedding. The chunk output (B, T, C) after the forward. The gradient
 * buffer (B, T, C): write d(output) into it before the backward when the
 * chunk has no head; after the backward it holds d(input). Around a
 * standalone MTP stage the messages hold states_in / states_out such
 * tensors (mtc_model_input_floats / mtc_model_output_floats). */
static inline size_t mtc_model_input_floats(const mtc_model *m) {
    return (size_t)m->states_in * m->B * m->T_loc * m->cfg.hidden_size;
}
static inline size_t mtc_model_output_floats(const mtc_model *m) {
    return (size_t)m->states_out * m->B * m->T_loc * m->cfg.hidden_size;
}
float *mtc_model_slot_input(mtc_model *m, int slot);
const float *mtc_model_slot_output(const mtc_model *m, int slot);
static inline float *mtc_model_grad_buffer(mtc_model *m) { return m->dres; }
/* The block shapes of this model's layers; layer l (global index) differs
 * only in its CP comm type (--cp-comm-type one per layer). */
model_block_dims mtc_model_block_dims(const mtc_model *m);
model_block_dims mtc_model_layer_dims(const mtc_model *m, int l);

#endif
