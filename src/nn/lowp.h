/* nn/lowp.h - low-precision building blocks: bf16 and fp16 conversions,
 * GEMMs through oneDNN's matmul (bf16 x bf16 -> fp32 or bf16, and fp32 for
 * comparison with OpenBLAS), and the bf16 linear layer pair.
 *
 * Relies on: oneDNN (libdnnl, MTC_HAVE_DNNL) for every GEMM; without it the
 * conversions still work and nn_lowp_create refuses with one line saying
 * what to install. AVX512-BF16 / F16C intrinsics when the compiler targets
 * them (-march=native on a CPU that has them), a scalar path otherwise:
 * both give the same bits.
 *
 * Does not: pick bf16 for the model (model/ and train/ decide), scale
 * losses (bf16 needs none), or reduce anything across ranks.
 *
 * Threads. nn_pool owns a rank's threads, as for nn_sgemm: a GEMM is cut
 * into row (or column) blocks whose boundaries depend on the shape only,
 * and each block runs as a single-threaded oneDNN primitive on one pool
 * thread. Debian's oneDNN is built with the OpenMP runtime; every thread
 * that creates or runs a primitive here has its OpenMP thread count set to
 * 1 (omp_set_num_threads is per thread), so oneDNN never starts an OpenMP
 * team of its own: no second set of spinning threads next to the pool, and
 * results do not depend on the number of threads (each element of C is
 * computed by the same primitive whatever the pool size). The calling
 * thread's OpenMP thread count stays 1 afterwards (mtc uses no OpenMP).
 *
 * Primitive cache. An nn_lowp (one per rank, used by one thread at a time)
 * keeps the primitives it has made, keyed by (dtypes, transposes, M, N, K,
 * lda, ldb, ldc, alpha, beta, bias): a GEMM's first call with a shape
 * creates its primitives (milliseconds; nn_lowp_gemm_prepare does it ahead,
 * at set-up), every later call only executes them. A training step has a
 * fixed set of shapes (about 20 for GPT), so after the first step nothing
 * is created; nn_lowp_stats says how many were made, for tests and for
 * callers that want to check that claim. The cache holds NN_LOWP_CACHE
 * entries and reuses the least recently used one when full. */
#ifndef MTC_NN_LOWP_H
#define MTC_NN_LOWP_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/result.h"
#include "nn/nn.h"

typedef uint16_t nn_f16; /* IEEE binary16 bits */

/* ---- conversions ------------------------------------------------------------ */

/* fp32 -> bf16, round to nearest even; NaN stays NaN (quiet, sign and top
 * payload kept), infinities stay, subnormals are rounded like any other
 * value (not flushed: the hardware instruction flushes them, so those lanes
 * are redone in integer arithmetic). Same bits as mtc_f32_to_bf16. */
void nn_f32_to_bf16(mtc_bf16 *out, const float *in, size_t n);
/* bf16 -> fp32, exact. */
void nn_bf16_to_f32(float *out, const mtc_bf16 *in, size_t n);
/* Both copies of a bf16 compute weight in one pass over in: out16 =
 * nn_f32_to_bf16(in) and out32 = nn_bf16_to_f32(out16), the same bits as
 * the two calls (the optimizer and the model refresh them every step). */
void nn_f32_to_bf16_both(mtc_bf16 *out16, float *out32, const float *in, size_t n);
/* fp32 -> fp16, round to nearest even; overflow to +-inf, subnormals kept,
 * NaN stays NaN (quiet). */
void nn_f32_to_f16(nn_f16 *out, const float *in, size_t n);
/* fp16 -> fp32, exact (a NaN comes back quiet). */
void nn_f16_to_f32(float *out, const nn_f16 *in, size_t n);
/* x = the nearest bf16 (fp16) value of x, in place, with the rules above:
 * what a tensor stored in that type holds, kept in fp32 storage. */
void nn_round_bf16(float *x, size_t n);
void nn_round_f16(float *x, size_t n);
/* The same out of place, in one pass over memory: out = the nearest bf16
 * (fp16) value of each in (out == in allowed, other overlaps not). */
void nn_round_bf16_to(float *out, const float *in, size_t n);
void nn_round_f16_to(float *out, const float *in, size_t n);
/* Scalar forms (the reference the vector paths must match). */
nn_f16 nn_f32_to_f16_1(float f);
float nn_f16_to_f32_1(nn_f16 h);
/* Which code the conversions use in this build, for banners and tests:
 * "avx512bf16", "f16c", ... or "scalar". */
const char *nn_lowp_convert_isa(void);

/* ---- the oneDNN context ------------------------------------------------------- */

typedef struct nn_lowp nn_lowp;
/* The pool's own context for fp32 GEMMs (nn_sgemm and the linear layers
 * route there when mtc has oneDNN and MTC_GEMM is not "openblas"), or NULL. */
nn_lowp *nn_pool_lowp(const nn_pool *pool);
#define NN_LOWP_CACHE 64

/* 1 when mtc was built with oneDNN. */
int nn_lowp_available(void);
/* MTC_ERR_UNSUPPORTED (with the fix in the detail) without oneDNN. */
mtc_result_t nn_lowp_create(nn_lowp **out);
void nn_lowp_free(nn_lowp *lp);
/* Which GEMMs get B packed once per call (NN_LOWP_PACK_* bits): the
 * caller's B is reordered into the blocked layout oneDNN's kernel reads,
 * once, and C is cut into row blocks that all read it. Without it each
 * block's primitive repacks its own part of B on every call and a wide,
 * short C is cut into column blocks, which oneDNN 2.6 serves with a slower
 * kernel (strided C; no AMX). Never for a transposed A (oneDNN 2.6 has no
 * such packed kernel) nor when K dominates (the LM head's input gradient:
 * its B is the whole embedding), nor below NN_LOWP_PACK_MIN_ROWS rows of C
 * (the one packing pass, on one thread, is paid back over the rows: GPT-2
 * 124M's 256-row products ran slower packed), nor when the packed B would take more
 * than NN_LOWP_PACK_MAX_BYTES (one buffer per nn_lowp holds it: a GPT-2
 * head's B is 77 MB). Changing it drops the cached primitives. */
#define NN_LOWP_PACK_BF16 1
#define NN_LOWP_PACK_F32 2
#define NN_LOWP_PACK_DEFAULT NN_LOWP_PACK_BF16
#define NN_LOWP_PACK_MAX_BYTES ((double)(128 << 20))
#define NN_LOWP_PACK_MIN_ROWS 512
void nn_lowp_set_pack(nn_lowp *lp, int pack);
/* GEMM calls that ran with a packed B so far. */
long nn_lowp_packed_calls(const nn_lowp *lp);
/* Primitives created and GEMM calls served from the cache so far. */
void nn_lowp_stats(const nn_lowp *lp, long *created, long *hits);
/* oneDNN's version and the implementation it chose for the last primitive
 * created (e.g. "brg:avx512_core_bf16"), for benchmarks and banners. */
void nn_lowp_describe(const nn_lowp *lp, char *buf, size_t size);

/* ---- GEMM ---------------------------------------------------------------------- */

/* C (M,N) = alpha * op(A) op(B) + beta * C, row-major, as nn_sgemm, with A
 * and B of type ab (MTC_DTYPE_BF16 or MTC_DTYPE_F32) and C of type c
 * (MTC_DTYPE_F32, or MTC_DTYPE_BF16 for bf16 inputs); products are
 * accumulated in fp32. beta must be 0 (C is written) or 1 (C += ..., oneDNN's
 * sum post-op: how weight gradients accumulate into fp32 main-grad
 * buffers). bias (N) of type ab, added to every row before the sum, or
 * NULL; a bias needs alpha = 1 (oneDNN would scale it too).
 * Returns MTC_ERR_INVALID_ARGUMENT for other betas, dtypes, a leading
 * dimension smaller than its row or a bias with alpha != 1; MTC_ERR_SYSTEM if oneDNN refuses. */
mtc_result_t nn_lowp_gemm(nn_pool *pool, nn_lowp *lp, mtc_dtype_t ab, mtc_dtype_t c, int transA,
                          int transB, int M, int N, int K, float alpha, const void *A, int lda,
                          const void *B, int ldb, const void *bias, float beta, void *C, int ldc);

/* Create (and cache) the primitives nn_lowp_gemm would use for this call,
 * without computing: for set-up code that wants every primitive made
 * before the first step. Validates like nn_lowp_gemm; has_bias 0 or 1. */
mtc_result_t nn_lowp_gemm_prepare(nn_lowp *lp, mtc_dtype_t ab, mtc_dtype_t c, int transA,
                                  int transB, int M, int N, int K, float alpha, int lda, int ldb,
                                  int has_bias, float beta, int ldc);

/* bf16 x bf16 -> fp32 (the common case). */
static inline mtc_result_t nn_gemm_bf16(nn_pool *pool, nn_lowp *lp, int transA, int transB, int M,
                                        int N, int K, float alpha, const mtc_bf16 *A, int lda,
                                        const mtc_bf16 *B, int ldb, float beta, float *C, int ldc) {
    return nn_lowp_gemm(pool, lp, MTC_DTYPE_BF16, MTC_DTYPE_F32, transA, transB, M, N, K, alpha, A,
                        lda, B, ldb, NULL, beta, C, ldc);
}
/* fp32 through oneDNN (to compare with nn_sgemm's OpenBLAS). */
static inline mtc_result_t nn_gemm_f32_dnnl(nn_pool *pool, nn_lowp *lp, int transA, int transB,
                                            int M, int N, int K, float alpha, const float *A,
                                            int lda, const float *B, int ldb, float beta, float *C,
                                            int ldc) {
    return nn_lowp_gemm(pool, lp, MTC_DTYPE_F32, MTC_DTYPE_F32, transA, transB, M, N, K, alpha, A,
                        lda, B, ldb, NULL, beta, C, ldc);
}

/* ---- which GEMMs a --bf16 model runs (--bf16-gemm) -------------------------------- */

/* A product of two bf16 values is exact in fp32, so an fp32 GEMM of
 * bf16-valued operands accumulated in fp32 computes what a bf16 GEMM with
 * fp32 accumulation computes (up to the order of the fp32 sums). A --bf16
 * model can therefore run its GEMMs either through oneDNN's bf16 matmul
 * (NN_BF16_GEMM_DNNL: bf16 operands, half the bytes) or as fp32 GEMMs
 * (NN_BF16_GEMM_F32: nn_sgemm, on the fp32-stored bf16 compute weights and
 * bf16-rounded activations), whichever this CPU runs faster: on a CPU whose
 * bf16 dot product (vdpbf16ps) has half the fp32 FMA rate, fp32 wins. */
typedef enum { NN_BF16_GEMM_AUTO = 0, NN_BF16_GEMM_DNNL, NN_BF16_GEMM_F32 } nn_bf16_gemm;
/* "auto", "dnnl-bf16", "fp32". */
const char *nn_bf16_gemm_name(nn_bf16_gemm e);
/* The engine named s (one of the names above); -1 when s names none. */
int nn_bf16_gemm_parse(const char *s);
/* Times C (M,N) = A (M,K) · Bᵀ once per engine as the linear forward runs
 * it (oneDNN bf16 with fp32 output; nn_sgemm), alternating, and gives each
 * engine's best rate in GFLOP/s (the operands are filled here; M is capped
 * at 1024 rows to keep this short: about 10 GEMMs of that shape). For
 * set-up code, never the step loop. Without oneDNN *gf_bf16 is 0.
 * MTC_ERR_OUT_OF_MEMORY, or oneDNN's error. */
mtc_result_t nn_bf16_gemm_measure(nn_pool *pool, int M, int N, int K, double *gf_bf16,
                                  double *gf_f32);
/* The same rates, measured once per machine and shape (on `threads` pool
 * threads) and cached beside the peak cache; *cached is 1 when they were
 * read from it. Without a writable cache, this run's measurement. */
mtc_result_t nn_bf16_gemm_rates(nn_pool *pool, int threads, int M, int N, int K, double *gf_bf16,
                                double *gf_f32, int *cached);

/* ---- bf16 linear: out = inp · wᵀ + bias -------------------------------------------- */

/* out (N,OUT) of type out_dt (MTC_DTYPE_F32 or MTC_DTYPE_BF16);
 * inp (N,IN) bf16; w (OUT,IN) bf16 as nn.Linear; bias (OUT) bf16 or NULL. */
mtc_result_t nn_linear_bf16_forward(nn_pool *pool, nn_lowp *lp, void *out, mtc_dtype_t out_dt,
                                    const mtc_bf16 *inp, const mtc_bf16 *w, const mtc_bf16 *bias,
                                    int N, int IN, int OUT);
/* dinp (N,IN) = dout · w, of type dinp_dt (F32 or BF16), or NULL;
 * dw (OUT,IN) fp32 += doutᵀ · inp, or NULL; db (OUT) fp32 += column sums of
 * dout (in fp32, rows in order), or NULL. dout (N,OUT) bf16. */
mtc_result_t nn_linear_bf16_backward(nn_pool *pool, nn_lowp *lp, void *dinp, mtc_dtype_t dinp_dt,
                                     float *dw, float *db, const mtc_bf16 *dout,
                                     const mtc_bf16 *inp, const mtc_bf16 *w, int N, int IN,
                                     int OUT);

#endif
