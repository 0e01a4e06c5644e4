/* tp/mappings.h - the tensor- and sequence-parallel communication of
 * Megatron's tensor_parallel/mappings.py, as explicit forward/backward
 * function pairs on plain float buffers over a TP communicator.
 *
 * Layout. Megatron's activations are [s, b, h]; ours are (B, T, C)
 * row-major (llm.c). "Split along the sequence" keeps the same TOKENS on
 * each rank as Megatron does: TP rank r owns positions
 * [r*T_tp, (r+1)*T_tp) of EVERY batch row, T_tp = T/tp, and holds them as a
 * (B, T_tp, C) buffer. Because (B, T, C) puts the batch outside the
 * sequence, rank r's tokens are not one contiguous block of the full
 * buffer: an all-gather along T receives [tp][B][T_tp][C] (rank-major) and
 * interleaves it into [B][tp*T_tp][C]; a reduce-scatter along T first
 * de-interleaves (B, T, C) into rank-major blocks. Those permutations go
 * through caller scratch of B*T*C floats (none needed when B == 1 or
 * tp == 1, where the two orders coincide: pass NULL).
 * "Last dim" operations split the channels: rank r owns columns
 * [r*C_tp, (r+1)*C_tp) of an (N, C) buffer; the gather permutes through
 * N*C floats of scratch (none when N == 1 or tp == 1).
 *
 * Dimensions: T and C are always the FULL sizes; every function states
 * which shapes its buffers have. A NULL communicator means tp = 1 (every
 * function degenerates to a copy, or nothing when the buffers are equal).
 * T % tp and C % tp must be 0 (MTC_ERR_INVALID_ARGUMENT otherwise, before
 * any communication, so all ranks fail alike).
 *
 * Conventions: outputs first; forward functions write `out`, backward
 * functions write `din` (=, never +=). Output and input must not overlap
 * unless a function says so. No allocation: scratch is the caller's.
 *
 * Relies on comm/comm.h. Does no arithmetic except the permutations and
 * does not know about layers (tp/layers.h composes these). */
#ifndef MTC_TP_MAPPINGS_H
#define MTC_TP_MAPPINGS_H

#include <stddef.h>

#include "comm/comm.h"
#include "core/dtype.h"
#include "core/result.h"

/* Size of a TP communicator (1 for NULL) and this rank's index in it. */
static inline int tp_size(mtc_comm_t tp) { return tp ? mtc_comm_size(tp) : 1; }
static inline int tp_rank(mtc_comm_t tp) { return tp ? mtc_comm_rank(tp) : 0; }

/* Scratch (floats) the sequence collectives need for (B, T, C): B*T*C when
 * they must permute, else 0. The last-dim gather needs tp_last_scratch. */
static inline size_t tp_seq_scratch_floats(int B, int T, int C, int tp) {
    return (tp > 1 && B > 1) ? (size_t)B * T * C : 0;
}
static inline size_t tp_last_scratch_floats(int N, int C, int tp) {
    return (tp > 1 && N > 1) ? (size_t)N * C : 0;
}

/* ---- primitives (Megatron's _reduce, _split_*, _gather_*, _reduce_scatter_*) ---- */

/* buf (n) summed over the group, in place.
 * comm: all-reduce(tp) */
mtc_result_t tp_all_reduce(float *buf, size_t n, mtc_comm_t tp);
/* out (B, T_tp, C) = this rank's sequence block of in (B, T, C). Local. */
mtc_result_t tp_seq_split(float *out, const float *in, int B, int T, int C, mtc_comm_t tp);
/* out (B, T, C) = the ranks' in (B, T_tp, C) blocks along T.
 * scratch: tp_seq_scratch_floats(B, T, C, tp).  comm: all-gather(tp) */
mtc_result_t tp_seq_all_gather(float *out, const float *in, float *scratch, int B, int T, int C,
                               mtc_comm_t tp);
/* The same in two halves, so computation can run in between (Megatron
 * overlaps the backward re-gather of the input with the dgrad GEMM):
 * _start issues the all-gather into scratch (or `out` when no permutation
 * is needed); _finish waits and interleaves into `out`. `in`, `out` and
 * `scratch` stay untouched in between; pass the same arguments to both.
 * *req is NULL when nothing was started (tp = 1: _start copies). */
mtc_result_t tp_seq_all_gather_start(float *out, const float *in, float *scratch, int B, int T,
                                     int C, mtc_comm_t tp, mtc_request_t *req);
mtc_result_t tp_seq_all_gather_finish(float *out, float *scratch, int B, int T, int C,
                                      mtc_comm_t tp, mtc_request_t *req);
/* out (B, T_tp, C) = this rank's sequence block of the sum over ranks of
 * in (B, T, C). scratch: tp_seq_scratch_floats.  comm: reduce-scatter(tp) */
mtc_result_t tp_seq_reduce_scatter(float *out, const float *in, float *scratch, int B, int T, int C,
                                   mtc_comm_t tp);
/* The same, started and left running: *req completes it (mtc_request_wait);
 * `out` and `scratch` (or `in` when no scratch is needed) must stay
 * untouched until then. *req is NULL when nothing was started (tp = 1). */
mtc_result_t tp_seq_reduce_scatter_start(float *out, const float *in, float *scratch, int B, int T,
                                         int C, mtc_comm_t tp, mtc_request_t *req);
/* out (N, C_tp) = this rank's columns of in (N, C). Local. */
mtc_result_t tp_last_split(float *out, const float *in, int N, int C, mtc_comm_t tp);
/* out (N, C) = the ranks' in (N, C_tp) column blocks side by side.
 * scratch: tp_last_scratch_floats(N, C, tp).  comm: all-gather(tp) */
mtc_result_t tp_last_all_gather(float *out, const float *in, float *scratch, int N, int C,
                                mtc_comm_t tp);

/* ---- the autograd pairs of mappings.py ----------------------------------------- */

/* copy_to_tensor_model_parallel_region: forward identity, backward sum.
 * out, in (n) (may be equal).  comm: none in forward */
mtc_result_t tp_copy_to_region_forward(float *out, const float *in, size_t n, mtc_comm_t tp);
/* din, dout (n) (may be equal).  comm: all-reduce(tp) in backward */
mtc_result_t tp_copy_to_region_backward(float *din, const float *dout, size_t n, mtc_comm_t tp);

/* reduce_from_tensor_model_parallel_region: forward sum, backward identity.
 * out, in (n) (may be equal).  comm: all-reduce(tp) in forward */
mtc_result_t tp_reduce_from_region_forward(float *out, const float *in, size_t n, mtc_comm_t tp);
/* comm: none in backward */
mtc_result_t tp_reduce_from_region_backward(float *din, const float *dout, size_t n, mtc_comm_t tp);

/* scatter_to_tensor_model_parallel_region: forward split last dim,
 * backward all-gather last dim. out (N, C_tp), in (N, C).  comm: none */
mtc_result_t tp_scatter_to_region_forward(float *out, const float *in, int N, int C, mtc_comm_t tp);
/* din (N, C), dout (N, C_tp); scratch tp_last_scratch_floats(N, C, tp).
 * comm: all-gather(tp) in backward */
mtc_result_t tp_scatter_to_region_backward(float *din, const float *dout, float *scratch, int N,
                                           int C, mtc_comm_t tp);

/* gather_from_tensor_model_parallel_region: forward all-gather last dim,
 * backward split. out (N, C), in (N, C_tp); scratch tp_last_scratch_floats.
 * comm: all-gather(tp) in forward */
mtc_result_t tp_gather_from_region_forward(float *out, const float *in, float *scratch, int N,
                                           int C, mtc_comm_t tp);
/* din (N, C_tp), dout (N, C).  comm: none in backward */
mtc_result_t tp_gather_from_region_backward(float *din, const float *dout, int N, int C,
                                            mtc_comm_t tp);

/* scatter_to_sequence_parallel_region: forward split T, backward
 * all-gather T. out (B, T_tp, C), in (B, T, C).  comm: none in forward */
mtc_result_t tp_scatter_to_seq_forward(float *out, const float *in, int B, int T, int C,
                                       mtc_comm_t tp);
/* din (B, T, C), dout (B, T_tp, C); scratch tp_seq_scratch_floats.
 * comm: all-gather(tp) in backward */
mtc_result_t tp_scatter_to_seq_backward(float *din, const float *dout, float *scratch, int B, int T,
                                        int C, mtc_comm_t tp);

/* gather_from_sequence_parallel_region: forward all-gather T. out (B, T, C),
 * in (B, T_tp, C); scratch tp_seq_scratch_floats.  comm: all-gather(tp) in forward */
mtc_result_t tp_gather_from_seq_forward(float *out, const float *in, float *scratch, int B, int T,
                                        int C, mtc_comm_t tp);
/* din (B, T_tp, C), dout (B, T, C). tensor_parallel_output_grad = 1 (the
 * default in Megatron: the gathered tensor fed TP-sharded maths whose
 * gradients are partial sums) reduce-scatters T; 0 just splits T.
 * comm: reduce-scatter(tp) in backward (none when the flag is 0) */
mtc_result_t tp_gather_from_seq_backward(float *din, const float *dout, float *scratch, int B,
                                         int T, int C, int tensor_parallel_output_grad,
                                         mtc_comm_t tp);

/* reduce_scatter_to_sequence_parallel_region: forward reduce-scatter T,
 * backward all-gather T. out (B, T_tp, C), in (B, T, C); scratch
 * tp_seq_scratch_floats.  comm: reduce-scatter(tp) in forward */
mtc_result_t tp_reduce_scatter_to_seq_forward(float *out, const float *in, float *scratch, int B,
                                              int T, int C, mtc_comm_t tp);
/* din (B, T, C), dout (B, T_tp, C).  comm: all-gather(tp) in backward */
mtc_result_t tp_reduce_scatter_to_seq_backward(float *din, const float *dout, float *scratch, int B,
                                               int T, int C, mtc_comm_t tp);

/* ---- the sequence all-gather with bf16 on the wire (--bf16) ----------------------------
 * in holds bf16 values in fp32 storage: they travel as bf16 (half the
 * bytes) and come back widened, exactly. Scratch s1 (B*T_tp*C) and s2
 * (B*T*C) of mtc_bf16. out (B, T, C) <- in (B, T_tp, C).
 * comm: all-gather(tp), bf16 */
mtc_result_t tp_seq_all_gather_bf16(float *out, const float *in, mtc_bf16 *s1, mtc_bf16 *s2, int B,
                                    int T, int C, mtc_comm_t tp);

#endif
