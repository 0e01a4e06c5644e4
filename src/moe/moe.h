/* moe/moe.h - mixture of experts (Megatron-LM core_v0.18's MoELayer): the
 * configuration with Megatron's flags and validation, the router (top-k
 * with softmax / sigmoid scores, pre-softmax, scaling, group-limited
 * routing, expert bias), the load-balancing losses (aux_loss,
 * seq_aux_loss, global_aux_loss) and z-loss, expert capacity with the
 * probs / position drop policies and padding to capacity, the experts (the
 * model's MLP: GELU, or SwiGLU) run as one grouped GEMM per projection over
 * all local experts, and the shared expert.
 *
 *   in (N, C) ─router─> logits (N, E) ─top-k─> (expert, prob) x k per token
 *      ─capacity─> kept / dropped ─permute (expert-major, token order)─>
 *      grouped fc1 ─act─> * prob ─grouped fc2 (+ prob * b2)─> unpermute
 *      (sum of each token's k outputs) [+ shared expert MLP(in)] = out
 *
 * The losses reach the router's logits in backward with the gradient scale
 * of one microbatch's share of the global batch (moe_pass.aux_scale), as
 * Megatron's MoEAuxLossAutoScaler does with loss_scale / num_microbatches
 * followed by the data-parallel average.
 *
 * Relies on nn/ (GEMM, activations) and tp/layers.h (the shared expert is a
 * dense tensor-parallel MLP through model/block.h's caller). This header
 * does not know the model: model/ binds the weights, keeps the activations
 * and applies the step's statistics (moe/stats.c) to its layers.
 * Expert and expert-tensor parallelism: see moe_pass (the groups) and
 * docs/moe.md section 4. */
#ifndef MTC_MOE_MOE_H
#define MTC_MOE_MOE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "comm/comm.h"
#include "core/result.h"
#include "grid/grid.h"
#include "nn/nn.h"

typedef enum { MOE_SCORE_SOFTMAX = 0, MOE_SCORE_SIGMOID } moe_score_fn;
typedef enum { MOE_LB_AUX = 0, MOE_LB_SEQ_AUX, MOE_LB_GLOBAL_AUX, MOE_LB_NONE } moe_lb_type;
typedef enum { MOE_DROP_PROBS = 0, MOE_DROP_POSITION } moe_drop_policy;
typedef enum { MOE_DISPATCH_ALLGATHER = 0, MOE_DISPATCH_ALLTOALL } moe_dispatcher;

#define MOE_PATTERN_MAX 1024

/* Megatron's MoE flags (a zeroed struct = a dense model). */
typedef struct {
    int num_experts; /* --num-experts E (0: dense) */
    int layer_freq;  /* --moe-layer-freq k: layer l is MoE when l % k == 0 (0 = 1) */
    int pattern_len; /* --moe-layer-freq [1,0,...]: one entry per layer (0: use freq) */
    uint8_t pattern[MOE_PATTERN_MAX];
    int ffn_hidden_size;       /* --moe-ffn-hidden-size (0: the model's ffn-hidden-size) */
    int topk;                  /* --moe-router-topk (0 = 2) */
    moe_score_fn score;        /* --moe-router-score-function */
    int pre_softmax;           /* --moe-router-pre-softmax */
    float topk_scaling;        /* --moe-router-topk-scaling-factor (0: none) */
    int num_groups;            /* --moe-router-num-groups (0: no group-limited routing) */
    int group_topk;            /* --moe-router-group-topk */
    int expert_bias;           /* --moe-router-enable-expert-bias */
    float bias_update_rate;    /* --moe-router-bias-update-rate (0 = 1e-3) */
    moe_lb_type lb;            /* --moe-router-load-balancing-type */
    float aux_coeff;           /* --moe-aux-loss-coeff */
    float z_coeff;             /* --moe-z-loss-coeff (0: off) */
    float capacity_factor;     /* --moe-expert-capacity-factor (<= 0: dropless) */
    moe_drop_policy drop;      /* --moe-token-drop-policy */
    int pad_to_capacity;       /* --moe-pad-expert-input-to-capacity */
    int shared_ffn;            /* --moe-shared-expert-intermediate-size (0: none) */
    moe_dispatcher dispatcher; /* --moe-token-dispatcher-type */
    int router_fp64;           /* --moe-router-dtype fp64: the gating GEMMs accumulate in double */
    int force_balance;         /* --moe-router-force-load-balancing: random normal logits */
    int recompute_act;         /* --recompute-modules moe_act: moe_acts has no fchg of its own
                                  (the caller binds one shared buffer, moe_act_floats); the
                                  backward computes it again from fch */
} mtc_moe_config;

static inline int mtc_moe_topk(const mtc_moe_config *m) { return m->topk > 0 ? m->topk : 2; }
/* The experts EP rank r of ep holds (Megatron: [r E/ep, (r+1) E/ep)):
 * *first and *count; E % ep == 0 was validated. */
static inline void moe_local_expert_range(int E, int ep, int r, int *first, int *count) {
    int n = ep > 1 ? E / ep : E;
    *first = ep > 1 ? r * n : 0, *count = n;
}
/* Is transformer layer l (0-based) an MoE layer? */
int mtc_moe_is_layer(const mtc_moe_config *m, int l);
int mtc_moe_num_layers(const mtc_moe_config *m, int num_layers);
/* The dense layers before the first MoE one (DeepSeek's first_k_dense_replace,
 * llama.cpp's leading_dense_block_count): num_layers without experts, -1 when
 * a dense layer follows an MoE one. */
int mtc_moe_dense_lead(const mtc_moe_config *m, int num_layers);
/* Parse --moe-layer-freq: "2" or Megatron's list "[1,0,1,0]" (also
 * "([1]*3+[0]*1)*2" style repeats). One line in err on failure. */
mtc_result_t mtc_moe_parse_layer_freq(mtc_moe_config *m, const char *s);
/* Megatron's MoE rules (arguments.py, moe_layer.py, router.py), one line
 * each naming the value and the fix. ffn = the model's ffn-hidden-size. */
mtc_result_t mtc_moe_validate(const mtc_moe_config *m, int num_layers, int ffn, int tp, int sp,
                              int ep, int etp, int add_bias_linear);
/* The ETP rule (moe/groups.c): expert-tensor-parallel-size etp is 1 or the
 * TP size (0: the TP size); mtc splits experts over the TP ranks themselves. */
mtc_result_t mtc_moe_validate_etp(int etp, int tp);
/* Internal invariant behind etp = tp: on spec's order each
 * EXPERT_TENSOR_PARALLEL_GROUP is a TENSOR_MODEL_PARALLEL_GROUP, rank for
 * rank (an assert: train's orders always satisfy it). */
void moe_assert_etp_groups(const mtc_grid_spec *spec);

/* A rank's MoE groups (moe/groups.c), each NULL when of size 1. */
typedef struct {
    mtc_comm_t ep;     /* EXPERT_MODEL_PARALLEL_GROUP: the dispatchers' */
    mtc_comm_t etp;    /* EXPERT_TENSOR_PARALLEL_GROUP: splits each expert (1 or the TP group) */
    mtc_comm_t tpep;   /* EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP: the allgather dispatcher's */
    mtc_comm_t tpcp;   /* TENSOR_AND_CONTEXT_PARALLEL_GROUP: the aux and z losses' counts */
    mtc_comm_t tpdpcp; /* TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP: global_aux_loss's */
} moe_groups;
/* From the rank's grid (NULL: serial, every group NULL). */
void moe_groups_from_grid(moe_groups *g, mtc_grid_t grid);

/* ---- one MoE layer ----------------------------------------------------------------- */

/* Shapes of one layer (global sizes; serial experts: E_local = E). */
typedef struct {
    int C;      /* hidden */
    int E;      /* experts */
    int k;      /* top-k */
    int F;      /* expert ffn */
    int swiglu; /* fc1 has 2F rows [gate | up] */
    int bias;   /* experts have biases (GPT-2 with linear biases) */
    int ep;     /* expert-parallel ranks (0 = 1): each owns E / ep experts */
    int etp;    /* expert-tensor-parallel ranks (0 = 1): F is then this rank's F / etp
                   columns of fc1 ([gate_r | up_r] with SwiGLU) and rows of fc2 */
} moe_dims;

/* Views of one layer's parameters (or of their gradients). */
typedef struct {
    float *router;      /* (E, C) */
    float *expert_bias; /* (E) or NULL: not trained, moved after the step */
    float **fc1w;       /* [E] (F1, C) */
    float **fc1b;       /* [E] (F1) or NULL entries */
    float **fc2w;       /* [E] (C, F) */
    float **fc2b;       /* [E] (C) or NULL entries */
} moe_weights;

/* The scalars of one forward, kept in the activation memory itself (a
 * moe_acts is a view, rebuilt by whoever binds it again for backward). */
typedef struct {
    int M;            /* permuted rows */
    int N;            /* tokens */
    int aux_groups;   /* 0: no aux loss; else 1, or the sequences of seq_aux_loss */
    int Ml;           /* alltoall: this rank's permuted rows (sent) */
    double aux_total; /* the token total T of the aux loss */
} moe_acts_hdr;

/* What one layer keeps from forward to backward (one microbatch). The
 * arrays are carved by moe_acts_bind from moe_acts_floats floats. */
typedef struct {
    moe_acts_hdr *h; /* M, N, the aux loss's groups and total */
    float *logits;   /* (N, E) */
    int *sel;        /* (G N, k) chosen experts of the G = etp x ep ranks' tokens (rank-major) */
    float *probs;    /* (G N, k) their probabilities (0 when dropped) */
    int *kept;       /* (G N, k) 1 = processed, 0 = dropped by capacity */
    int *counts;     /* (E / ep) rows of each local expert in the permuted order */
    int *perm_tok;   /* (Mmax) token of each permuted row */
    int *perm_sel;   /* (Mmax) its top-k slot n*k + j, -1 for padding rows */
    float *fch;      /* (Mmax, F1) fc1 output */
    float *fchg;     /* (Mmax, F) activation output (before the prob) */
    float *aux_cnt;  /* (N, E) at most: the aux loss's counts as forward used them */
    float *xg;       /* allgather: (G N, C) the ETP x EP ranks' tokens; alltoall: (M, C)
                        the rows the local experts received, expert-major (NULL with ep 1) */
    int *cnt_all;    /* alltoall: (etp, ep, E) every rank's rows per expert */
    float *rprob;    /* alltoall: (M) the received rows' probabilities */
} moe_acts;

/* Per-layer statistics a step accumulates (the model resets them each step; moe/stats.c). */
typedef struct {
    double lb_loss;     /* sum over microbatches of the load-balancing loss / coeff */
    double z_loss;      /* sum over microbatches of the z-loss / coeff */
    int nmb;            /* microbatches recorded */
    double *tokens;     /* (E) kept tokens per expert (padding excluded) */
    double dropped;     /* dropped (token, expert) assignments */
    double assigned;    /* all (token, expert) assignments */
    float *bias_counts; /* (E) Megatron's local_tokens_per_expert for the expert bias */
    double *ga_counts;  /* (E) global_aux_loss's counts accumulated over the step */
    int ga_steps;
} moe_stats;

/* How one call runs. */
typedef struct {
    int train;         /* the losses' gradients and the statistics */
    int record;        /* 1: accumulate into stats (0 in a recomputation) */
    float aux_scale;   /* d(objective)/d(this microbatch's aux and z losses) */
    int seq_B;         /* sequences in the N tokens (seq_aux_loss; rows are (B, T)) */
    mtc_comm_t tpcp;   /* group of the aux / z losses' counts (NULL: none) */
    mtc_comm_t tpdpcp; /* global_aux_loss's group (NULL: none) */
    mtc_comm_t ep;     /* the dispatcher's EP group (NULL: all experts local); size d->ep */
    mtc_comm_t etp;    /* the experts' ETP group (NULL: whole experts); size d->etp */
    mtc_comm_t tpep;   /* allgather's ETP x EP group (NULL: ep when etp 1); size ep x etp */
    nn_pool *pool;
    /* --moe-router-force-load-balancing: fills logits (N, E) with the
     * random normal logits of these N tokens (a function of the global
     * token, not of the layout) */
    void (*random_logits)(void *ctx, float *logits, int N, int E);
    void *random_ctx;
} moe_pass;

/* Rows of the permuted order at most (dropless: N*k; with padding E*cap). */
int moe_max_rows(const mtc_moe_config *m, int N, int E);
/* Expert capacity of N local tokens (Megatron's get_capacity on N*k). */
int moe_capacity(const mtc_moe_config *m, int N, int E);
/* Rows one expert's GEMMs compute for its `rows` rows, and the calls of
 * each projection in *calls: with oneDNN (`blocked`) blocks of 256 rows,
 * the last padded to a multiple of 64; else one call on the rows. */
int moe_gemm_rows(int rows, int blocked, int *calls);
size_t moe_acts_floats(const mtc_moe_config *m, const moe_dims *d, int N);
/* The activation output fchg's floats (the shared buffer of recompute_act). */
size_t moe_act_floats(const mtc_moe_config *m, const moe_dims *d, int N);
/* Binding reads nothing and writes nothing: the scalars of a forward survive a
 * second binding of the same memory (backward binds again). */
void moe_acts_bind(moe_acts *a, float *base, const mtc_moe_config *m, const moe_dims *d, int N);
size_t moe_scratch_floats(const mtc_moe_config *m, const moe_dims *d, int N);
mtc_result_t moe_stats_init(moe_stats *s, int E);
void moe_stats_free(moe_stats *s);
void moe_stats_reset(moe_stats *s, int E);

/* out (N, C) = the routed experts' sum for each token of in (N, C) (no
 * shared expert: the caller adds it). comm: all-reduce(tpcp) of the aux
 * loss's counts when pass->tpcp. */
mtc_result_t moe_layer_forward(float *out, moe_acts *acts, moe_stats *stats, const float *in,
                               const moe_weights *w, const mtc_moe_config *m, const moe_dims *d,
                               int N, const moe_pass *pass, float *scratch);
/* din (N, C) =; gradients += (router, experts). */
mtc_result_t moe_layer_backward(float *din, const moe_weights *dw, const float *dout,
                                const moe_acts *acts, const float *in, const moe_weights *w,
                                const mtc_moe_config *m, const moe_dims *d, const moe_pass *pass,
                                float *scratch);

/* ---- router pieces (moe/router.c; exposed for the tests) --------------------------- */

/* The top-k choice of each token from logits (N, E): sel, probs (N, k). */
void moe_router_topk(int *sel, float *probs, const float *logits, const float *expert_bias,
                     const mtc_moe_config *m, int N, int E);
/* dlogits (N, E) += d(probs)/d(logits)^T dprobs (N, k). */
void moe_router_topk_backward(float *dlogits, const float *dprobs, const int *sel,
                              const float *logits, const mtc_moe_config *m, int N, int E);
/* Capacity: kept (N, k), probs of dropped slots zeroed; tmp 2 N k ints. */
void moe_router_capacity(int *kept, float *probs, const int *sel, const mtc_moe_config *m, int N,
                         int E, void *tmp);
/* Scores of the aux loss (softmax, or normalised sigmoid) into s (N, E),
 * and their own top-k counts per expert (E) over the N tokens (or per
 * sequence, (B, E), when seq_B != 0 with rows (B, N/B)); cnt NULL: scores only. */
void moe_aux_scores(float *s, float *cnt, const float *logits, const mtc_moe_config *m, int N,
                    int E, int seq_B);
/* Megatron's switch load-balancing loss and z-loss (values with their
 * coefficients), and their gradients scaled by g into dlogits. */
double moe_aux_loss(const float *s, const float *cnt, double total_tokens, int groups,
                    const mtc_moe_config *m, int N, int E);
void moe_aux_loss_backward(float *dlogits, const float *s, const float *cnt, double total_tokens,
                           int groups, const float *logits, const mtc_moe_config *m, int N, int E,
                           float g);
double moe_z_loss(const float *logits, float coeff, int N, int E);
void moe_z_loss_backward(float *dlogits, const float *logits, float coeff, int N, int E, float g);
/* The expert-bias step: bias += rate * sign(mean(counts) - counts). */
void moe_expert_bias_update(float *bias, const float *counts, float rate, int E);

/* ---- a training step's statistics (moe/stats.c) ------------------------------------ */

/* After the step's gradients are final: the layer's tokens per expert
 * summed over tpdpcp (TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP; NULL: one
 * rank), then the expert-bias step at m's rate. comm: all-reduce(tpdpcp). */
mtc_result_t moe_expert_bias_finalize(float *bias, moe_stats *s, const mtc_moe_config *m,
                                      mtc_comm_t tpdpcp);

/* The step's sums that every rank adds its MoE layers into and the caller
 * sums over the world: [lb, z, then per layer (E tokens, dropped, assigned)]. */
size_t moe_step_sums_len(const mtc_moe_config *m, int num_layers);
/* Layer `layer`'s statistics s (of E experts) added into v. */
void moe_step_sums_add(double *v, const moe_stats *s, int layer, int E);

#define MOE_SUMMARY_MAX_LAYERS 256
typedef struct {
    int layer;
    double min, max, p50, p90; /* tokens per expert over the step */
    double dropped_fraction;   /* dropped (token, expert) assignments / all */
} moe_layer_summary;
typedef struct {
    int has_lb, has_z;
    double lb_loss, z_loss; /* Megatron's logged load_balancing_loss, z_loss */
    int nlayers;
    moe_layer_summary layer[MOE_SUMMARY_MAX_LAYERS];
} moe_step_summary;
/* The step's summary from the world-summed v: the losses averaged over the
 * dp data-parallel ranks (z also over the tpcp ranks of the TP x CP group)
 * and the MoE layers, each layer's token statistics. */
void moe_step_summary_make(moe_step_summary *out, const double *v, const mtc_moe_config *m,
                           int num_layers, int dp, int tpcp);
/* The log line's MoE fields into buf (n bytes; "" without): Megatron's
 * " [seq_|global_]load_balancing_loss: X |" and " z_loss: X |" of the
 * losses given (averaged since the last log). */
void moe_step_summary_log(const moe_step_summary *s, const mtc_moe_config *m, char *buf, size_t n,
                          double lb, double z);
/* ", \"load_balancing_loss\": ..., \"moe_layers\": [...]" (nothing without
 * MoE layers): the losses given (averaged since the last log), the step's
 * per-layer token statistics. */
void moe_step_summary_metrics(const moe_step_summary *s, FILE *f, double lb, double z);

#endif
