/* nn/nn_internal.h - helpers shared by the nn kernel files (not public).
 *
 * Work splitting: kernels cut their outputs into contiguous ranges whose
 * boundaries depend only on the problem size (never on the pool size), so
 * every output element is computed by the same code in the same order
 * whatever the number of threads. */
#ifndef MTC_NN_INTERNAL_H
#define MTC_NN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "nn/nn.h"

/* 8-float vectors (GCC vector extensions: AVX with -march=native, SSE pairs
 * otherwise). Loops over contiguous floats use them explicitly because -O2
 * does not vectorise loops of unknown length. Sums keep 8 lanes and add
 * them in a fixed order, so results are the same run to run. */
typedef float nn_v8 __attribute__((vector_size(32)));
typedef int nn_v8i __attribute__((vector_size(32)));
/* Macros, not functions: passing 32-byte vectors by value would change the
 * ABI (and warn, -Wpsabi) in builds without AVX (sanitizer builds). */
#define NN_V8_LD(p)                                                                                \
    ({                                                                                             \
        nn_v8 v8_;                                                                                 \
        __builtin_memcpy(&v8_, (p), sizeof v8_);                                                   \
        v8_;                                                                                       \
    })
#define NN_V8_ST(p, v)                                                                             \
    do {                                                                                           \
        nn_v8 v8s_ = (v);                                                                          \
        __builtin_memcpy((p), &v8s_, sizeof v8s_);                                                 \
    } while (0)
#define NN_V8_SET1(a) ((nn_v8){(a), (a), (a), (a), (a), (a), (a), (a)})
#define NN_V8_HSUM(v)                                                                              \
    ({                                                                                             \
        nn_v8 h8_ = (v);                                                                           \
        ((h8_[0] + h8_[4]) + (h8_[1] + h8_[5])) + ((h8_[2] + h8_[6]) + (h8_[3] + h8_[7]));         \
    })

/* How nn_sgemm and oneDNN's matmul cut C (M, N): returns 1 for row blocks,
 * 0 for column blocks, and sets *tiles; the shape alone decides (gemm.c). */
int nn_gemm_split(int M, int N, int K, int *tiles);
/* The block count of that rule for a cut by rows (by_rows) or columns. */
int nn_gemm_tiles(int M, int N, int K, int by_rows);

/* Number of ranges of about `grain` items that cover n items (>= 1). */
static inline int nn_split_count(size_t n, size_t grain) {
    size_t k = (n + grain - 1) / grain;
    if (k < 1) k = 1;
    if (k > 4096) k = 4096;
    return (int)k;
}
/* Range i of k equal ranges over n items, boundaries rounded to `align`. */
static inline void nn_split_range(size_t n, int k, int i, size_t align, size_t *lo, size_t *hi) {
    size_t a = (n * (size_t)i / (size_t)k) / align * align;
    size_t b = (i + 1 == k) ? n : (n * (size_t)(i + 1) / (size_t)k) / align * align;
    *lo = a;
    *hi = b;
}

/* vmath.c: row primitives (AVX2 when built for it). */
/* nn_vmax, nn_vexp_sum: declared in nn.h (tp/xent.c uses them too). */
/* One single-threaded row-major cblas_sgemm. For beta = 0 it zeroes C with
 * memset and adds (beta = 1): OpenBLAS's own zeroing pass (sgemm_beta) runs
 * at about a quarter of memset's speed here (2% of a small-GPT step, mostly
 * the logits), and 0 + x = x gives the same bits. */
void nn_blas_sgemm(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc);
void nn_vscale(float *y, float a, int n);
void nn_vgelu(float *out, const float *inp, size_t n);
void nn_vgelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

/* dst[k] = uniform(seed, stream, first + k), as mtc_rng_uniform, computing
 * each Philox block once for the four values it holds. */
void nn_rng_uniform_run(float *dst, size_t n, uint64_t seed, uint64_t stream, uint64_t first);

/* Dropout keep-scale for a run of n consecutive global indices:
 * dst[k] = (uniform(first+k) >= p) ? 1/(1-p) : 0. */
void nn_dropout_scale_run(float *dst, size_t n, const nn_dropout_spec *s, uint64_t first);

#endif
