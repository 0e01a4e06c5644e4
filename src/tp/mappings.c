/* tp/mappings.c - Megatron's tensor/sequence-parallel mappings on (B, T, C)
 * buffers; see mappings.h for the layout and the contracts.
 *
 * Every collective is one call into comm/ on the TP communicator; the only
 * local work is the block permutation between rank-major order
 * ([tp][outer][inner], what all-gather produces and reduce-scatter wants)
 * and the tensor's own order ([outer][tp][inner]):
 *   sequence ops: outer = B, inner = T_tp*C   (rank r's tokens per batch row)
 *   last-dim ops: outer = N, inner = C_tp     (rank r's columns per row)
 * With outer == 1 the two orders coincide and no scratch is used.
 * Does not allocate, does no maths beyond copying. */
#include "tp/mappings.h"

#include <string.h>

#include "nn/lowp.h"

static mtc_result_t check_div(int n, int tp, const char *what) {
    if (tp > 1 && n % tp != 0)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "%s=%d is not divisible by tensor-model-parallel-size=%d (choose a "
                         "multiple of %d)",
                         what, n, tp, tp);
    return MTC_OK;
}

static mtc_result_t check_scratch(const float *scratch, size_t need, const char *fn) {
    if (need && !scratch)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "%s needs %zu floats of scratch, got NULL", fn,
                         need);
    return MTC_OK;
}

/* dst [outer][tp][inner] <- src [tp][outer][inner] */
static void blocks_to_tensor(float *dst, const float *src, int tp, size_t outer, size_t inner) {
    for (int r = 0; r < tp; r++)
        for (size_t o = 0; o < outer; o++)
            memcpy(dst + (o * tp + r) * inner, src + (r * outer + o) * inner,
                   inner * sizeof(float));
}

/* dst [tp][outer][inner] <- src [outer][tp][inner] */
static void tensor_to_blocks(float *dst, const float *src, int tp, size_t outer, size_t inner) {
    for (int r = 0; r < tp; r++)
        for (size_t o = 0; o < outer; o++)
            memcpy(dst + (r * outer + o) * inner, src + (o * tp + r) * inner,
                   inner * sizeof(float));
}

/* dst [outer][inner] <- block r of src [outer][tp][inner] */
static void take_block(float *dst, const float *src, int tp, int r, size_t outer, size_t inner) {
    for (size_t o = 0; o < outer; o++)
        memcpy(dst + o * inner, src + (o * tp + r) * inner, inner * sizeof(float));
}

static void copy_if(float *out, const float *in, size_t n) {
    if (out != in && n) memmove(out, in, n * sizeof(float));
}

/* ---- primitives ------------------------------------------------------------------ */

mtc_result_t tp_all_reduce(float *buf, size_t n, mtc_comm_t tp) {
    if (tp_size(tp) == 1 || n == 0) return MTC_OK;
    return mtc_all_reduce(buf, buf, n, MTC_DTYPE_F32, MTC_OP_SUM, tp);
}

mtc_result_t tp_seq_split(float *out, const float *in, int B, int T, int C, mtc_comm_t tp) {
    int p = tp_size(tp);
    MTC_CHECK(check_div(T, p, "seq-length"));
    if (p == 1)
        copy_if(out, in, (size_t)B * T * C);
    else
        take_block(out, in, p, tp_rank(tp), (size_t)B, (size_t)(T / p) * C);
    return MTC_OK;
}

mtc_result_t tp_seq_all_gather(float *out, const float *in, float *scratch, int B, int T, int C,
                               mtc_comm_t tp) {
    int p = tp_size(tp);
    MTC_CHECK(check_div(T, p, "seq-length"));
    size_t inner = (size_t)(T / p) * C, local = (size_t)B * inner;
    if (p == 1) {
        copy_if(out, in, local);
        return MTC_OK;
    }
    size_t need = tp_seq_scratch_floats(B, T, C, p);
    MTC_CHECK(check_scratch(scratch, need, "tp_seq_all_gather"));
    if (!need) return mtc_all_gather(in, out, local, MTC_DTYPE_F32, tp);
    MTC_CHECK(mtc_all_gather(in, scratch, local, MTC_DTYPE_F32, tp));
    blocks_to_tensor(out, scratch, p, (size_t)B, inner);
    return MTC_OK;
}

mtc_result_t tp_seq_all_gather_start(float *out, const float *in, float *scratch, int B, int T,
                                     int C, mtc_comm_t tp, mtc_request_t *req) {
    *req = NULL;
    int p = tp_size(tp);
    MTC_CHECK(check_div(T, p, "seq-length"));
    size_t local = (size_t)B * (T / p) * C;
    if (p == 1) {
        copy_if(out, in, local);
        return MTC_OK;
    }
    size_t need = tp_seq_scratch_floats(B, T, C, p);
    MTC_CHECK(check_scratch(scratch, need, "tp_seq_all_gather_start"));
    return mtc_all_gather_start(in, need ? scratch : out, local, MTC_DTYPE_F32, tp, req);
}

mtc_result_t tp_seq_all_gather_finish(float *out, float *scratch, int B, int T, int C,
                                      mtc_comm_t tp, mtc_request_t *req) {
    int p = tp_size(tp);
    MTC_CHECK(mtc_request_wait(req));
    if (p > 1 && tp_seq_scratch_floats(B, T, C, p))
        blocks_to_tensor(out, scratch, p, (size_t)B, (size_t)(T / p) * C);
    return MTC_OK;
}

/* Permutes `in` into rank-major blocks when needed; *send is what the
 * reduce-scatter reads. Returns 1 in *done when tp = 1 (plain copy). */
static mtc_result_t seq_rs_prepare(float *out, const float *in, float *scratch, int B, int T, int C,
                                   mtc_comm_t tp, const float **send, size_t *local, int *done) {
    int p = tp_size(tp);
    MTC_CHECK(check_div(T, p, "seq-length"));
    size_t inner = (size_t)(T / p) * C;
    *local = (size_t)B * inner;
    *send = in;
    *done = p == 1;
    if (p == 1) {
        copy_if(out, in, *local);
        return MTC_OK;
    }
    size_t need = tp_seq_scratch_floats(B, T, C, p);
    MTC_CHECK(check_scratch(scratch, need, "tp_seq_reduce_scatter"));
    if (need) {
        tensor_to_blocks(scratch, in, p, (size_t)B, inner);
        *send = scratch;
    }
    return MTC_OK;
}

mtc_result_t tp_seq_reduce_scatter_start(float *out, const float *in, float *scratch, int B, int T,
                                         int C, mtc_comm_t tp, mtc_request_t *req) {
    const float *send;
    size_t local;
    int done;
    *req = NULL;
    MTC_CHECK(seq_rs_prepare(out, in, scratch, B, T, C, tp, &send, &local, &done));
    if (done) return MTC_OK;
    return mtc_reduce_scatter_start(send, out, local, MTC_DTYPE_F32, MTC_OP_SUM, tp, req);
}

mtc_result_t tp_seq_reduce_scatter(float *out, const float *in, float *scratch, int B, int T, int C,
                                   mtc_comm_t tp) {
    const float *send;
    size_t local;
    int done;
    MTC_CHECK(seq_rs_prepare(out, in, scratch, B, T, C, tp, &send, &local, &done));
    if (done) return MTC_OK;
    return mtc_reduce_scatter(send, out, local, MTC_DTYPE_F32, MTC_OP_SUM, tp);
}

mtc_result_t tp_last_split(float *out, const float *in, int N, int C, mtc_comm_t tp) {
    int p = tp_size(tp);
    MTC_CHECK(check_div(C, p, "last dimension"));
    if (p == 1)
        copy_if(out, in, (size_t)N * C);
    else
        take_block(out, in, p, tp_rank(tp), (size_t)N, (size_t)(C / p));
    return MTC_OK;
}

mtc_result_t tp_last_all_gather(float *out, const float *in, float *scratch, int N, int C,
                                mtc_comm_t tp) {
    int p = tp_size(tp);
    MTC_CHECK(check_div(C, p, "last dimension"));
    size_t inner = (size_t)(C / p), local = (size_t)N * inner;
    if (p == 1) {
        copy_if(out, in, local);
        return MTC_OK;
    }
    size_t need = tp_last_scratch_floats(N, C, p);
    MTC_CHECK(check_scratch(scratch, need, "tp_last_all_gather"));
    if (!need) return mtc_all_gather(in, out, local, MTC_DTYPE_F32, tp);
    MTC_CHECK(mtc_all_gather(in, scratch, local, MTC_DTYPE_F32, tp));
    blocks_to_tensor(out, scratch, p, (size_t)N, inner);
    return MTC_OK;
}

/* ---- the autograd pairs ----------------------------------------------------------- */

mtc_result_t tp_copy_to_region_forward(float *out, const float *in, size_t n, mtc_comm_t tp) {
    (void)tp;
    copy_if(out, in, n);
    return MTC_OK;
}

mtc_result_t tp_copy_to_region_backward(float *din, const float *dout, size_t n, mtc_comm_t tp) {
    copy_if(din, dout, n);
    return tp_all_reduce(din, n, tp);
}

mtc_result_t tp_reduce_from_region_forward(float *out, const float *in, size_t n, mtc_comm_t tp) {
    copy_if(out, in, n);
    return tp_all_reduce(out, n, tp);
}

mtc_result_t tp_reduce_from_region_backward(float *din, const float *dout, size_t n,
                                            mtc_comm_t tp) {
    (void)tp;
    copy_if(din, dout, n);
    return MTC_OK;
}

mtc_result_t tp_scatter_to_region_forward(float *out, const float *in, int N, int C,
                                          mtc_comm_t tp) {
    return tp_last_split(out, in, N, C, tp);
}

mtc_result_t tp_scatter_to_region_backward(float *din, const float *dout, float *scratch, int N,
                                           int C, mtc_comm_t tp) {
    return tp_last_all_gather(din, dout, scratch, N, C, tp);
}

mtc_result_t tp_gather_from_region_forward(float *out, const float *in, float *scratch, int N,
                                           int C, mtc_comm_t tp) {
    return tp_last_all_gather(out, in, scratch, N, C, tp);
}

mtc_result_t tp_gather_from_region_backward(float *din, const float *dout, int N, int C,
                                            mtc_comm_t tp) {
    return tp_last_split(din, dout, N, C, tp);
}

mtc_result_t tp_scatter_to_seq_forward(float *out, const float *in, int B, int T, int C,
                                       mtc_comm_t tp) {
    return tp_seq_split(out, in, B, T, C, tp);
}

mtc_result_t tp_scatter_to_seq_backward(float *din, const float *dout, float *scratch, int B, int T,
                                        int C, mtc_comm_t tp) {
    return tp_seq_all_gather(din, dout, scratch, B, T, C, tp);
}

mtc_result_t tp_gather_from_seq_forward(float *out, const float *in, float *scratch, int B, int T,
                                        int C, mtc_comm_t tp) {
    return tp_seq_all_gather(out, in, scratch, B, T, C, tp);
}

mtc_result_t tp_gather_from_seq_backward(float *din, const float *dout, float *scratch, int B,
                                         int T, int C, int tensor_parallel_output_grad,
                                         mtc_comm_t tp) {
    if (!tensor_parallel_output_grad) return tp_seq_split(din, dout, B, T, C, tp);
    return tp_seq_reduce_scatter(din, dout, scratch, B, T, C, tp);
}

mtc_result_t tp_reduce_scatter_to_seq_forward(float *out, const float *in, float *scratch, int B,
                                              int T, int C, mtc_comm_t tp) {
    return tp_seq_reduce_scatter(out, in, scratch, B, T, C, tp);
}

mtc_result_t tp_reduce_scatter_to_seq_backward(float *din, const float *dout, float *scratch, int B,
                                               int T, int C, mtc_comm_t tp) {
    return tp_seq_all_gather(din, dout, scratch, B, T, C, tp);
}

/* ---- bf16 on the wire ------------------------------------------------------------------ */

mtc_result_t tp_seq_all_gather_bf16(float *out, const float *in, mtc_bf16 *s1, mtc_bf16 *s2, int B,
                                    int T, int C, mtc_comm_t tp) {
    int p = tp_size(tp);
    MTC_CHECK(check_div(T, p, "seq-length"));
    size_t inner = (size_t)(T / p) * C, local = (size_t)B * inner;
    if (p == 1) {
        copy_if(out, in, local);
        return MTC_OK;
    }
    nn_f32_to_bf16(s1, in, local);
    MTC_CHECK(mtc_all_gather(s1, s2, local, MTC_DTYPE_BF16, tp));
    /* s2 [tp][B][inner] -> out [B][tp][inner], widened on the way */
    for (int r = 0; r < p; r++)
        for (int b = 0; b < B; b++)
            nn_bf16_to_f32(out + ((size_t)b * p + r) * inner, s2 + ((size_t)r * B + b) * inner,
                           inner);
    return MTC_OK;
}
