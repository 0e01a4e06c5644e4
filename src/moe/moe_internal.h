/* moe/moe_internal.h - what the files of moe/ share (not a public header):
 * layer.c (sizes, routing, statistics, the allgather dispatcher),
 * experts.c (the blocked-GEMM experts), dispatch_a2a.c (the alltoall
 * dispatcher). */
#ifndef MTC_MOE_MOE_INTERNAL_H
#define MTC_MOE_MOE_INTERNAL_H

#include "moe/moe.h"

/* The layer's scratch (moe_scratch_floats): rows are permuted rows (at
 * most rows_max), W = C + 1 packs a row's token with its probability. */
typedef struct {
    float *xp, *y, *dx, *z, *dz, *dh, *dlogits, *s, *dprobs, *prow, *dprow;
    float *g1, *g2; /* (ep N, C) gathered outputs / gradients; alltoall: (rows, C + 1) */
    float *stage;   /* moe_stage_floats: the experts' padded last blocks */
    void *tmp;      /* 2 N k ints (capacity), or the alltoall's split arrays and counts */
} moe_scratch;

/* Floats of the alltoall dispatcher's split arrays and gathered counts
 * in the scratch's tmp (G = etp x ep ranks, E experts). */
#define MOE_A2A_TMP(G, E) ((((size_t)(G)*24 + 16 + 15) & ~(size_t)15) + (size_t)(G) * (E) + 16)

moe_scratch moe_carve(float *base, const mtc_moe_config *m, const moe_dims *d, int N);
/* Rows of expert e from the N tokens starting at global token `base`
 * appended at perm[M...]; returns the new M. */
int moe_perm_segment(moe_acts *a, const mtc_moe_config *m, const moe_dims *d, int e, int base,
                     int N, int M, int *count);
/* dst (M, W) = rows tok[r] - base of src, on the pool. */
void moe_gather_rows(nn_pool *pool, float *dst, const float *src, const int *tok, int base, int M,
                     int W);
/* Rows tok[q] - base of dst (., W) += row q of src (M, stride lds), q in
 * order (a token's rows in expert order), on the pool by columns. */
void moe_scatter_add(nn_pool *pool, float *dst, const float *src, int lds, const int *tok, int base,
                     int M, int W);

/* The experts' GEMMs go in blocks of MOE_BLOCK rows of an expert, the last
 * one padded to a multiple of MOE_PAD rows (experts.c). */
#define MOE_BLOCK 256
#define MOE_PAD 64
/* Floats of the stage buffer the experts need (two MOE_BLOCK row blocks). */
size_t moe_stage_floats(const moe_dims *d);

/* y (M, C) = prow * (fc2(act(fc1 xp)) + b2) over the rows of local experts
 * [e0, e0 + El) (counts[e] rows each, expert-major); fch, fchg saved; z
 * scratch (M, F); stage (moe_stage_floats) scratch. */
/* The experts' activation: fchg (M, F) = act(fch (M, F1)), SwiGLU or GELU;
 * the forward's, and --recompute-modules moe_act's again in backward. */
void moe_experts_act(nn_pool *pool, float *fchg, const float *fch, int M, const moe_dims *d);
mtc_result_t moe_experts_forward(nn_pool *pool, float *y, float *fch, float *fchg, float *z,
                                 float *stage, const float *xp, const float *prow,
                                 const int *counts, int El, int e0, const moe_weights *w,
                                 const moe_dims *d, int M);
/* dxp (M, C) =, dprow (M) = d(row's prob); expert gradients +=; dy (M, C)
 * read only; z, dz (M, F), dh (M, F1), stage scratch. */
mtc_result_t moe_experts_backward(nn_pool *pool, float *dxp, float *dprow, const float *dy,
                                  const float *xp, const float *fch, const float *fchg,
                                  const float *prow, const int *counts, int El, int e0,
                                  const moe_weights *w, const moe_weights *dw, const moe_dims *d,
                                  int M, float *z, float *dz, float *dh, float *stage);

/* The alltoall dispatcher around the experts, after routing (this rank's
 * N tokens routed into a->sel/probs/kept at block r). out (N, C) =.
 * comm: all-gather(EP) of the counts, all-to-all-v(EP) there and back. */
mtc_result_t moe_a2a_forward(float *out, moe_acts *a, const float *in, const moe_weights *w,
                             const mtc_moe_config *m, const moe_dims *d, int N,
                             const moe_pass *pass, moe_scratch *s);
/* din (N, C) = the experts' part; dprobs (N, k) = d(this rank's probs).
 * comm: all-to-all-v(EP) there and back. */
mtc_result_t moe_a2a_backward(float *din, float *dprobs, const moe_weights *dw, const float *dout,
                              const moe_acts *a, const moe_weights *w, const mtc_moe_config *m,
                              const moe_dims *d, const moe_pass *pass, moe_scratch *s);

#endif
