/* cp/cp.h - context parallelism (Megatron-LM core_v0.18 with Transformer
 * Engine's CP attention): each sequence is cut into 2*cp chunks of
 * Tc = T / (2 cp) positions and CP rank c keeps chunks c and 2cp-1-c, in
 * that order (the load-balanced split of get_batch_on_this_cp_rank), so
 * every rank holds T_cp = T / cp rows whose positions stay global. Only the
 * core attention communicates: every other layer is per token.
 *
 * The core attention over the CONTEXT_PARALLEL_GROUP (cp/attention.c), one
 * of --cp-comm-type:
 *   p2p         ring: K, V travel to rank r+1 each step; each step's
 *               partial output is merged by log-sum-exp; backward sends
 *               dK, dV around the ring with K, V and returns them home;
 *   all_gather  K, V all-gathered, each local query attends to its causal
 *               prefix; backward reduce-scatters dK, dV;
 *   a2a         Ulysses: all-to-all turns (local rows, all local heads) into
 *               (all rows, heads / cp), full attention, all-to-all back
 *               (local query heads and key/value heads divisible by cp);
 *   a2a+p2p     hierarchical: a2a inside the inner groups of A consecutive CP
 *               ranks (HIERARCHICAL_CONTEXT_PARALLEL_GROUP_L0), then the p2p
 *               ring across the outer ones (L1, P = cp / A) over the a2a'ed
 *               rows (--hierarchical-context-parallel-sizes A P).
 * Causality is by global positions (the tiled kernel's explicit-position
 * mask), so every variant computes exactly the serial attention; tiles
 * that no query of a block can see are skipped by the kernel, which is
 * TE's step rule (steps 1..r use only the first KV chunk, steps > r only
 * the second query chunk) at tile granularity. Attention dropout is keyed
 * by global (query, key) positions: the serial masks.
 *
 * The ring's hops are non-blocking (an all-to-all-v with counts only for the
 * two neighbours, carried by the communicator's progress thread): the K, V
 * of step i+1 travel while step i computes, and in backward the running
 * dK, dV of a block travel while the next step computes. */
#ifndef MTC_CP_CP_H
#define MTC_CP_CP_H

#include "comm/comm.h"
#include "grid/grid.h"
#include "nn/nn.h"

typedef enum { CP_COMM_P2P = 0, CP_COMM_ALL_GATHER, CP_COMM_A2A, CP_COMM_A2A_P2P } cp_comm_type;

/* "p2p", "all_gather", "a2a", "a2a+p2p"; -1 when unknown. */
int cp_comm_type_parse(const char *s);
const char *cp_comm_type_name(cp_comm_type t);

/* CP's own options beside the grid's sizes (--cp-comm-type, one value or
 * one per layer; handed through train/ and the model to cp_ctx_init). */
typedef struct {
    cp_comm_type type;      /* p2p (default), all_gather, a2a, a2a+p2p */
    const int *layer_types; /* one cp_comm_type per layer (num_layers); NULL: type for all */
} cp_options;

/* What the CP attention needs; cp = 1 (comm NULL) means no context
 * parallelism. */
typedef struct {
    mtc_comm_t comm; /* CONTEXT_PARALLEL_GROUP, NULL when cp = 1 */
    int cp, rank;
    cp_comm_type type;
    mtc_comm_t inner, outer; /* a2a+p2p: HIERARCHICAL_CONTEXT_PARALLEL_GROUP_L0 / _L1 */
    int inner_size;          /* a2a+p2p: A, the all-to-all's ranks */
    int Tg;                  /* the whole sequence */
    const int *pos;          /* (Tg / cp) global positions of this rank's rows */
    int *all_pos;            /* (Tg) every rank's positions, rank-major (owned by the caller) */
    size_t *hop_counts;      /* (4 cp) the ring hops' count arrays (owned by the caller) */
} cp_ctx;

/* CP's rules on a layout (cp/context.c), before anything is built: each
 * layer's comm type (type, or layer_types[num_layers]) against the heads
 * and groups of a TP rank (heads / tp, groups / tp) and the hierarchical
 * sizes, and T/cp divisible by tp under sequence parallelism. g's sizes as
 * the command line gave them; nothing to check at cp 1. */
mtc_result_t cp_validate(const mtc_grid_config *g, int type, const int *layer_types, int num_layers,
                         int seq_length, int heads, int groups, int sequence_parallel);
/* The command line's CP options, checked (cp/context.c): --cp-comm-type's
 * nnames values (one, or one per layer of num_layers) into types[nnames],
 * and --hierarchical-context-parallel-sizes (nhcp values, A*P = cp, needed
 * by a2a+p2p); *any_per_layer = one type per layer. One-line
 * INVALID_ARGUMENT naming the value and the fix. */
mtc_result_t cp_options_resolve(const char *const *names, int nnames, int num_layers, int cp,
                                const int64_t *hcp, int nhcp, int *types, int *any_per_layer);
/* This rank's CP context for the layers [first_layer, last_layer) of a
 * model of seq_length positions, from its grid (NULL, or cp 1: no context
 * parallelism): the group, the positions and, with layer_types (one per
 * global layer), *layers = one context per chunk layer (else NULL). Freed
 * by cp_ctx_free. INVALID_ARGUMENT for a sequence 2cp does not divide or
 * a2a+p2p without hierarchical groups. */
mtc_result_t cp_ctx_init(cp_ctx *cp, cp_ctx **layers, mtc_grid_t grid, int seq_length,
                         cp_comm_type type, const int *layer_types, int first_layer,
                         int last_layer);
void cp_ctx_free(cp_ctx *cp, cp_ctx **layers);

/* pos (T / cp) = the global positions of CP rank `rank`'s rows:
 * [rank*Tc, (rank+1)*Tc) then [(2cp-1-rank)*Tc, (2cp-rank)*Tc). T % (2 cp) == 0. */
void cp_positions(int *pos, int T, int cp, int rank);

/* Causal attention of this rank's queries over the whole sequence's keys.
 * q, k, v and out are the local rows (s->T = s->Tk = T_cp, strides as in
 * nn_attention_shape; positions come from cp->pos); lse (B, NH, T_cp).
 * drop: as for nn_attention_forward with Tg = cp->Tg (tpos / kpos are set
 * here). scratch: cp_attention_scratch_floats.
 * comm: sendrecv ring / all-gather / all-to-all over cp->comm. */
mtc_result_t cp_attention_forward(const cp_ctx *cp, nn_pool *pool, float *out, float *lse,
                                  const float *q, const float *k, const float *v,
                                  const nn_attention_shape *s, const nn_dropout_spec *drop,
                                  float *scratch);
/* dq, dk, dv (=) of the local rows from dout and the forward's merged out
 * and lse. comm: the forward's, plus dK / dV travelling back. */
mtc_result_t cp_attention_backward(const cp_ctx *cp, nn_pool *pool, float *dq, float *dk, float *dv,
                                   const float *dout, const float *q, const float *k,
                                   const float *v, const float *out, const float *lse,
                                   const nn_attention_shape *s, const nn_dropout_spec *drop,
                                   float *scratch);
size_t cp_attention_scratch_floats(const cp_ctx *cp, const nn_attention_shape *s);

#endif
