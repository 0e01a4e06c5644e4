/* nn/nn.h - single-device kernels of the GPT model: forward/backward pairs
 * on plain float buffers (llm.c style). The parallel layers (tp/, cp/, ep/)
 * and the model (model/) compose these; nothing here communicates.
 *
 * Conventions:
 *  - outputs first, inputs const, dims last; shapes in comments.
 *  - backward WRITES input gradients (=) and ACCUMULATES (+=) parameter
 *    gradients; any gradient pointer may be NULL to skip it.
 *  - N = B*T rows; C channels; NH heads of HS; V vocabulary (Vp padded).
 *  - threads: kernels take an nn_pool (NULL = the calling thread only).
 *    GEMMs go through CBLAS sgemm; nn_pool_create sets OpenBLAS to one
 *    thread and the pool splits GEMMs itself, so one pool per rank owns all
 *    of the rank's threads (no fighting between OpenBLAS and our threads).
 *  - results do not depend on the number of threads (each output element
 *    is computed by exactly one thread in a fixed order), so the parity
 *    tests can compare layouts bit-for-bit where the maths allows. */
#ifndef MTC_NN_NN_H
#define MTC_NN_NN_H

#include <stddef.h>
#include <stdint.h>

#include "core/result.h"

/* ---- the per-rank thread pool ---------------------------------------------- */

typedef struct nn_pool nn_pool;
/* nthreads >= 1 (1 = no extra threads). */
mtc_result_t nn_pool_create(int nthreads, nn_pool **out);
/* How a pool hands work over (the CLI sets it from MTC_NN_SPIN_US). */
typedef struct {
    long spin_us; /* a worker spins this long for new work before it sleeps (0: it always
                     sleeps; < 0: the default, 20 us) */
} nn_pool_opts;
/* The same with o's settings (NULL: the defaults, as nn_pool_create). */
mtc_result_t nn_pool_create_opts(int nthreads, const nn_pool_opts *o, nn_pool **out);
void nn_pool_free(nn_pool *pool);
int nn_pool_size(const nn_pool *pool); /* 1 for NULL */
/* The BLAS mtc runs on, for the banner: OpenBLAS's build configuration and
 * the core its kernels were chosen for, naming OPENBLAS_CORETYPE when that
 * forces it (a Haswell core type halves sgemm on a Zen machine). */
void nn_blas_describe(char *buf, size_t size);

/* ---- the fp32 GEMM engine (gemm_engine.c) ---------------------------------- */

/* Which library runs nn_sgemm and the fp32 linear layers: oneDNN's matmul
 * (where mtc is built with it) or OpenBLAS. Both split a GEMM into the same
 * shape-only blocks on the pool (bits independent of the thread count);
 * their bits differ from each other. */
typedef enum { NN_GEMM_AUTO = 0, NN_GEMM_DNNL, NN_GEMM_OPENBLAS } nn_gemm_engine;
/* "auto", "dnnl", "openblas". */
const char *nn_gemm_engine_name(nn_gemm_engine e);
/* The process's engine: `requested` (dnnl or openblas; why names it as the
 * command line's MTC_GEMM=...); with NN_GEMM_AUTO the faster one in
 * bench-peak's cache (core/peak.h) for the OpenBLAS core this process
 * loaded; else oneDNN (OpenBLAS without it). why gets the reason, for the
 * banner. */
nn_gemm_engine nn_gemm_engine_choose(nn_gemm_engine requested, char *why, size_t size);
/* The engine the process's pools choose with (nn_gemm_engine_choose's
 * request; the CLI sets it from MTC_GEMM). Before the first pool or GEMM:
 * the choice is made once. */
void nn_gemm_engine_request(nn_gemm_engine e);
/* The engine pools use (the choice above unless forced). */
nn_gemm_engine nn_gemm_engine_current(void);
/* Pools created from now on use engine e (NN_GEMM_AUTO: the process's
 * choice again). For measurements; not thread-safe against pool creation. */
void nn_gemm_engine_force(nn_gemm_engine e);
/* Alternates the engines, `rounds` times, on a pool of `threads`, over the
 * three GEMMs (forward, input and weight gradient) of a transformer linear
 * layer (1024 tokens, 512 x 1536) and of an LM-head chunk (128 tokens, 384
 * x 50304), and gives each engine's rate in GFLOP/s: the FLOP-weighted
 * harmonic mean of its best round per shape. gf_dnnl NULL: OpenBLAS alone; without oneDNN *gf_dnnl
 * = 0. Ends with the engine unforced (NN_GEMM_AUTO). */
mtc_result_t nn_gemm_engine_measure(int threads, int rounds, double *gf_dnnl, double *gf_blas);
/* Run fn(i, arg) for i in [0, n) across the pool and wait. A call from
 * inside a job, or while another thread's job holds the pool, runs inline.
 * Idle workers spin MTC_NN_SPIN_US microseconds (default 20) then sleep. */
void nn_pool_run(nn_pool *pool, int n, void (*fn)(int i, void *arg), void *arg);
/* memset(dst, 0, bytes) in pieces across the pool (a gradient buffer's
 * zeroing is a pass over memory one thread cannot saturate). */
void nn_pool_zero(nn_pool *pool, void *dst, size_t bytes);

/* ---- GEMM ------------------------------------------------------------------ */

/* C (M,N) = alpha * op(A) op(B) + beta * C, row-major, as cblas_sgemm. */
void nn_sgemm(nn_pool *pool, int transA, int transB, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* ---- embeddings ------------------------------------------------------------ */

/* out (N,C) = wte[tok - vocab_start] for tokens in [vocab_start,
 * vocab_start + V_local), zero rows otherwise (vocab-parallel shards).
 * wte (V_local, C). */
void nn_token_embedding_forward(float *out, const int *tokens, const float *wte, int vocab_start,
                                int V_local, int N, int C);
void nn_token_embedding_backward(float *dwte, const float *dout, const int *tokens, int vocab_start,
                                 int V_local, int N, int C);
/* out (B,T,C) += wpe[pos[t]]; pos (T) global positions, NULL = 0..T-1. */
void nn_position_embedding_forward(float *out, const float *wpe, const int *pos, int B, int T,
                                   int C);
/* dwpe[pos[t]] += sum_b dout[b,t]. */
void nn_position_embedding_backward(float *dwpe, const float *dout, const int *pos, int B, int T,
                                    int C);

/* ---- layernorm ------------------------------------------------------------- */

/* out, inp (N,C); w, b (C); mean, rstd (N) saved for backward; eps 1e-5. */
void nn_layernorm_forward(nn_pool *pool, float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int N, int C);
/* The same with eps a parameter (--norm-epsilon; the backward needs only
 * the saved rstd, so it serves both). */
void nn_layernorm_forward_eps(nn_pool *pool, float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, float eps, int N, int C);
void nn_layernorm_backward(nn_pool *pool, float *dinp, float *dw, float *db, const float *dout,
                           const float *inp, const float *w, const float *mean, const float *rstd,
                           int N, int C);

/* ---- linear: out = inp · wᵀ + bias ----------------------------------------- */

/* out (N,OUT); inp (N,IN); w (OUT,IN) as nn.Linear; bias (OUT) or NULL. */
void nn_linear_forward(nn_pool *pool, float *out, const float *inp, const float *w,
                       const float *bias, int N, int IN, int OUT);
/* dinp (N,IN) =; dw (OUT,IN) +=; db (OUT) +=. dinp may alias inp (dw is taken
 * first). */
void nn_linear_backward(nn_pool *pool, float *dinp, float *dw, float *db, const float *dout,
                        const float *inp, const float *w, int N, int IN, int OUT);

/* ---- GELU (tanh form) ------------------------------------------------------- */

void nn_gelu_forward(nn_pool *pool, float *out, const float *inp, size_t n);
/* dinp may alias dout (elementwise). */
void nn_gelu_backward(nn_pool *pool, float *dinp, const float *inp, const float *dout, size_t n);

/* ---- residual ---------------------------------------------------------------- */

/* out = a + b (out may alias a or b). */
void nn_residual_forward(float *out, const float *a, const float *b, size_t n);

/* ---- dropout keyed by global position ----------------------------------------- */

/* Which global element a local element is, so that any sharding of the
 * batch, sequence, hidden or head dimensions draws the serial run's mask.
 * Element (b, t, c) of a local (B, T, C) tensor is global element
 *   ((b0 + b) * Tg + pos(t)) * Cg + (c0 + c),   pos(t) = tpos ? tpos[t] : t0 + t
 * and attention-probability element (b, h, i, j) of a local (B, NH, T, Tk)
 * tensor is global element
 *   (((b0 + b) * NHg + h0 + h) * Tg + pos(i)) * Tg + kpos(j),
 *   kpos(j) = kpos_arr ? kpos_arr[j] : j.
 * A unit is kept when uniform(seed, stream, global) >= p and scaled by 1/(1-p). */
typedef struct {
    float p; /* 0 = identity */
    uint64_t seed, stream;
    int b0, Tg;
    int t0;
    const int *tpos;
    int Cg, c0;  /* hidden dropout */
    int NHg, h0; /* attention dropout */
    const int *kpos;
} nn_dropout_spec;

/* out, inp (B,T,C); out may alias inp. */
void nn_dropout_forward(float *out, const float *inp, int B, int T, int C,
                        const nn_dropout_spec *spec);
/* dinp = dout * mask / (1-p), the mask regenerated from spec. */
void nn_dropout_backward(float *dinp, const float *dout, int B, int T, int C,
                         const nn_dropout_spec *spec);

/* ---- attention (tiled, flash style: nn/flash_attention.c) ------------------------ */

/* Geometry of one attention call; rows are row-major with explicit strides
 * (floats between consecutive positions), so the packed [q | k | v] rows
 * and separate tensors both work:
 *   query i, head h, batch b:     q + (b*T + i) * ldq + h*HS     (HS floats)
 *   key j, kv head g, batch b:    k + (b*Tk + j) * ldk + g*HS    (v: ldv)
 *   output / its gradient:        out + (b*T + i) * ldo + h*HS   (dout: ldo)
 *   dq, dk, dv use the strides of q, k, v.
 * Grouped-query attention: query head h reads kv head h / (NH/NKV).
 * Causal mask by positions: key j is visible to query i iff
 * kpos(j) <= qpos(i), qpos(i) = qpos ? qpos[i] : q0 + i, kpos likewise
 * (shared by all batch rows). A query that sees no key gets out = 0 and
 * lse = -inf. */
typedef struct {
    int B, T, Tk;           /* batch rows; query and key positions per batch row */
    int NH, NKV, HS;        /* query heads, key/value heads (NH % NKV == 0), head size */
    int ldq, ldk, ldv, ldo; /* row strides in floats */
    int q0, k0;             /* first positions when qpos / kpos are NULL */
    const int *qpos, *kpos; /* (T), (Tk) explicit positions, or NULL */
    float scale;            /* scores = scale q.k; 0 means 1/sqrt(HS) */
    int accumulate;         /* backward: 1 = dq, dk, dv +=; 0 = dq, dk, dv = */
} nn_attention_shape;

/* Causal self-attention of the packed rows qkv (B, T, 3*NH*HS) = [q | k | v]
 * (heads contiguous inside each): pass q = qkv, k = qkv + NH*HS,
 * v = qkv + 2*NH*HS, and likewise for dqkv. */
static inline nn_attention_shape nn_attention_shape_qkv(int B, int T, int NH, int HS) {
    int C = NH * HS;
    nn_attention_shape s = {B, T, T, NH, NH, HS, 3 * C, 3 * C, 3 * C, C, 0, 0, NULL, NULL, 0.0f, 0};
    return s;
}

/* out (rows of ldo) = softmax(scale q kᵀ, masked) with dropout, then v;
 * lse (B, NH, T) = natural log of the row sums of exp(scale q kᵀ) over the
 * visible keys (of the scaled scores, before dropout). Attention dropout
 * element (b, h, i, j) is global element
 *   (((b0 + b) * NHg + h0 + h) * Tg + pos(i)) * Tg + kpos(j)
 * of nn_dropout_spec (its own tpos / t0 / kpos; a zero Tg / NHg means the
 * local T / NH), so pass the same spec to both calls. drop may be NULL.
 * Memory: no T x Tk buffer; tiles of under 200 KB of stack per thread. */
void nn_attention_forward(nn_pool *pool, float *out, float *lse, const float *q, const float *k,
                          const float *v, const nn_attention_shape *s, const nn_dropout_spec *drop);
/* dq, dk, dv: the gradient of out only (= or += by s->accumulate; any may
 * be NULL), from dout and the forward's out and lse, which may be the
 * lse-merge of several calls over disjoint key sets (each part's backward
 * then gives that part's dk, dv and its share of dq). */
void nn_attention_backward(nn_pool *pool, float *dq, float *dk, float *dv, const float *dout,
                           const float *q, const float *k, const float *v, const float *out,
                           const float *lse, const nn_attention_shape *s,
                           const nn_dropout_spec *drop);
/* Merge a partial result over another key set into (out, lse) by
 * log-sum-exp: lse' = log(e^lse + e^lse_part), out' = out e^(lse - lse') +
 * out_part e^(lse_part - lse'). out, out_part rows of ldo (B, T, NH*HS
 * used); lse, lse_part (B, NH, T). Rows with both lse = -inf stay 0. */
void nn_attention_merge(nn_pool *pool, float *out, float *lse, const float *out_part,
                        const float *lse_part, int B, int T, int NH, int HS, int ldo);

/* ---- softmax + cross-entropy (fused, in place) ---------------------------------- */

/* logits (N,Vp) become probabilities; columns >= V (padding) are ignored
 * (probability 0). losses (N) = -log p[target]. */
void nn_softmax_xent_forward(nn_pool *pool, float *losses, float *logits, const int *targets, int N,
                             int V, int Vp);
/* probs (N,Vp) become dlogits = scale * (p - onehot(target)); padding 0.
 * scale = dloss per token (1 / tokens in the global batch for the mean). */
void nn_softmax_xent_backward(nn_pool *pool, float *probs, const int *targets, float scale, int N,
                              int V, int Vp);
/* Both in one pass (training): losses as the forward, logits become the
 * dlogits the backward would make, bit for bit, without a second sweep over
 * the (N, Vp) buffer. */
void nn_softmax_xent_forward_backward(nn_pool *pool, float *losses, float *logits,
                                      const int *targets, float scale, int N, int V, int Vp);

/* ---- optimizer pieces ------------------------------------------------------------- */

/* AdamW on n elements with bias correction at step t (1-based); weight
 * decay decoupled (p -= lr * wd * p); pass wd = 0 for 1-D parameters. */
void nn_adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                     float beta1, float beta2, float eps, float weight_decay, int t);
/* The same on grad * grad_scale (rounded to float, exactly as scaling the
 * gradient in place first would), without writing the gradient: clipping
 * folded into the update saves a pass over the gradient buffer. */
void nn_adamw_update_scaled(float *param, const float *grad, float *m, float *v, size_t n,
                            float grad_scale, float lr, float beta1, float beta2, float eps,
                            float weight_decay, int t);
/* Sum of squares in double, fixed order (deterministic). */
/* Row primitives (vmath.c, AVX2 when built for it), shared with tp/xent.c so
 * the vocabulary-parallel softmax uses the same exp as the serial one.
 * nn_vmax: max of x[0..n). nn_vexp_sum: y = exp(x - shift), returns the sum
 * of y in a fixed order (independent of threads); y may alias x. */
float nn_vmax(const float *x, int n);
/* x = (x * a) * b, rounded after each product (b = 1: x * a exactly). */
void nn_vmul2(float *x, int n, float a, float b);
float nn_vexp_sum(float *y, const float *x, int n, float shift);
double nn_sumsq(const float *x, size_t n);
void nn_scale(float *x, float s, size_t n);

#endif
