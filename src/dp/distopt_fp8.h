/* dp/distopt_fp8.h - the distributed optimizer's fp8 parameter all-gather
 * (--fp8-param-gather; Megatron-LM core_v0.18.0 fp8_utils.py
 * quantize_param_shard, Transformer Engine's cast_master_weights_to_fp8):
 * after the update, each owner casts its pieces of the fp8 weights to E4M3
 * codes, the all-gather moves those bytes (one per value) and the other
 * params' bf16 bits (two per value), and every rank dequantizes what it
 * received into the compute copy. The scales never travel: as in TE, every
 * rank makes them from the same numbers.
 *
 *   delayed     the weight's delayed scale (identical on every rank after
 *               the step's update); the pieces' amax, all-reduced (MAX),
 *               maxed into the weight's amax-history slot 0 (TE records the
 *               weight amax at the cast, not in the forward)
 *   tensorwise  scale = 448 / amax of the whole tensor: the pieces' amaxes
 *               all-reduced (MAX) over amax_comm (TP x DP x CP: the serial
 *               tensor is every TP shard)
 *   blockwise   128x128 blocks of the rank's (TP-local) weight matrix, each
 *               block's amax all-reduced (MAX) over the gather group (a
 *               block may straddle two owners), power-of-two scales
 *
 * The dequantized value is exactly what tp/fp8_linear.c's quantization of
 * the bf16 weight gives (nn_fp8_qdq with the same scale), so the forward
 * uses the gathered copy as it is (tp_fp8_state.w_cast) and training is the
 * run without --fp8-param-gather, value for value.
 *
 * Wire format of one bucket: each rank's shard encoded in element order
 * (fp8 codes for fp8-weight elements, bf16 bits for the others), padded to
 * the bucket's largest encoded shard (even, carried as MTC_DTYPE_BF16
 * units); an all-gather of dp of those. Blocking (the decode needs the
 * bytes): --overlap-param-gather does not overlap it.
 *
 * Relies on dp/distopt.h (pieces, copy), dp/layout.h, nn/fp8.h.
 * Does not: choose which params are fp8 (the caller lists them), handle
 * mxfp8 (TE gathers its rowwise and columnwise copies: 2 bytes per value,
 * no saving; Megatron gathers bf16 for it), or run without a compute copy. */
#ifndef MTC_DP_DISTOPT_FP8_H
#define MTC_DP_DISTOPT_FP8_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "core/result.h"

struct mtc_distopt;

typedef enum {
    MTC_DISTOPT_FP8_DELAYED = 0,
    MTC_DISTOPT_FP8_TENSORWISE,
    MTC_DISTOPT_FP8_BLOCKWISE
} mtc_distopt_fp8_mode;

/* One fp8 weight of the buffer. */
typedef struct {
    int param;          /* forward index in the buffer's layout */
    int rows, cols;     /* the rank's (TP-local) matrix, row-major; rows * cols = its numel */
    const float *scale; /* delayed: the weight's current scale (read at each cast) */
    float *amax_slot;   /* delayed: the weight's amax-history slot 0 (maxed into) */
} mtc_distopt_fp8_weight;

typedef struct mtc_distopt_fp8 {
    struct mtc_distopt *o; /* not owned */
    mtc_distopt_fp8_mode mode;
    mtc_comm_t amax_comm; /* per-tensor modes: the amax group (NULL: the gather group) */
    int nw;
    mtc_distopt_fp8_weight *w;
    int *amax_off;    /* [nw + 1] offsets into amax (1 per tensor, or its blocks) */
    float *amax;      /* the last cast's reduced amaxes */
    int *wof;         /* [nparams] weight index of a param, -1 for the others */
    int *bw_off, *bw; /* bucket b's weights, by start: bw[bw_off[b] .. bw_off[b + 1]) */
    size_t *enc;      /* [nbuckets] bytes of the largest encoded shard (even) */
    uint8_t *send, *recv;
    size_t cap;
    /* what the last cast counted (added to by each cast; the caller resets) */
    double clipped;           /* |w * scale| > 448 (owners count their pieces) */
    float sinv_min, sinv_max; /* the dequantization scales of non-zero tensors / blocks */
    /* bytes this rank receives per cast: the all-gathers and the amax all-reduce */
    size_t gather_bytes, amax_bytes;
    size_t bf16_bytes;  /* the same gathers with 2-byte values */
    int64_t fp8_values; /* fp8-weight elements in the buffer */
    int64_t casts;      /* mtc_distopt_fp8_gather calls (the caller resets) */
} mtc_distopt_fp8;

/* The fp8 gather of o's buffer for the nw weights listed (copied). o must
 * gather into a compute copy (mtc_distopt_gather_into). From now on
 * mtc_distopt_step casts and gathers through it. */
mtc_result_t mtc_distopt_fp8_init(struct mtc_distopt *o, mtc_distopt_fp8_mode mode,
                                  const mtc_distopt_fp8_weight *w, int nw, mtc_comm_t amax_comm,
                                  mtc_distopt_fp8 **out);
void mtc_distopt_fp8_free(mtc_distopt_fp8 *f);
/* Cast this rank's pieces of the copy (bf16 values of the fp32 main
 * params), all-gather, dequantize into every rank's copy. Blocking.
 * comm: all-reduce MAX(amax group) of the amaxes, all-gather(the
 * optimizer's shard group) per bucket. */
mtc_result_t mtc_distopt_fp8_gather(mtc_distopt_fp8 *f);

#endif
