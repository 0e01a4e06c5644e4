/* tp/linear.c - ColumnParallelLinear and RowParallelLinear (Megatron's
 * tensor_parallel/layers.py) on nn_linear_*; see tp/layers.h.
 *
 *   column:  x ──[copy_to | SP: all-gather T]──> X ─ X·W_rᵀ+b_r ─> Y_r ──[gather_output]──> Y
 *            backward: [SP, input not kept: start all-gather T of x -> X]
 *                      dX = dY_r·W_r            (overlaps the all-gather)
 *                      [wait] start [all-reduce | SP: reduce-scatter T] of dX -> dx
 *                      dW_r += dY_rᵀ·X, db_r    (overlaps that collective) [wait]
 *            as Megatron's LinearWithGradAccumulationAndAsyncCommunication.
 *   row:     x_r ─ x_r·W_rᵀ ─> partial ──[all-reduce | SP: reduce-scatter T]──> + b ─> y
 *            backward: dy ──[identity | SP: all-gather T]──> dY; dx_r = dY·W_r; dW_r += dYᵀ·x_r
 *
 * Relies on nn/nn.h (GEMMs) and tp/mappings.h (collectives). Scratch use is
 * laid out from the start of the caller's buffer in the order the comments
 * say; *_scratch_floats returns the maximum over forward and backward.
 * Limitations: no expert (is_expert) shortcut, no skip_bias_add (the bias
 * is always added), no async all-gather overlap in forward. */
#include <string.h>

#include "tp/layers.h"
#include "tp/mappings.h"

static mtc_result_t check_split(int n, int p, const char *what) {
    if (p > 1 && n % p)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "%s=%d is not divisible by tensor-model-parallel-size=%d", what, n, p);
    return MTC_OK;
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* out (N, OUT) += b (OUT) for every row */
static void add_bias(float *out, const float *b, size_t N, int OUT) {
    if (!b) return;
    for (size_t n = 0; n < N; n++) {
        float *o = out + n * OUT;
        for (int j = 0; j < OUT; j++)
            o[j] += b[j];
    }
}

/* ---- column-parallel ------------------------------------------------------------------ */

size_t tp_column_linear_scratch_floats(const tp_ctx *tp, int gather_output, int B, int T, int IN,
                                       int OUT) {
    int p = tp_size(tp->comm);
    if (p == 1) return 0;
    size_t N = (size_t)B * T, OUT_tp = (size_t)(OUT / p);
    int sp = tp->sequence_parallel;
    size_t seq = tp_seq_scratch_floats(B, T, IN, p);
    /* forward: [SP gather permutation] then [local out | last-dim permutation] */
    size_t fwd = max_sz(sp ? seq : 0,
                        gather_output ? N * OUT_tp + tp_last_scratch_floats((int)N, OUT, p) : 0);
    /* backward: [split dout] [SP: full dgrad | reduce-scatter permutation] */
    size_t bwd = (gather_output ? N * OUT_tp : 0) + (sp ? N * IN + seq : 0);
    return max_sz(fwd, bwd);
}

mtc_result_t tp_column_linear_forward(const tp_ctx *tp, float *out, float *in_total,
                                      const float *in, const float *w, const float *b,
                                      float *scratch, int gather_output, int B, int T, int IN,
                                      int OUT) {
    mtc_comm_t comm = tp->comm;
    int p = tp_size(comm), sp = tp->sequence_parallel && p > 1;
    MTC_CHECK(check_split(OUT, p, "column-parallel output size"));
    if (sp) MTC_CHECK(check_split(T, p, "seq-length"));
    int OUT_tp = OUT / p;
    int N = B * T;
    const float *x = in; /* (B, T, IN), whole sequence */
    if (sp) {
        if (!in_total)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "column-parallel linear under sequence parallelism needs in_total");
        /* comm: all-gather(tp) along T */
        MTC_CHECK(tp_gather_from_seq_forward(in_total, in, scratch, B, T, IN, comm));
        x = in_total;
    } /* else copy_to_region: identity in forward */
    if (!gather_output || p == 1) {
        nn_linear_forward(tp->pool, out, x, w, b, N, IN, OUT_tp);
        return MTC_OK;
    }
    float *y = scratch; /* (N, OUT_tp) */
    nn_linear_forward(tp->pool, y, x, w, b, N, IN, OUT_tp);
    /* comm: all-gather(tp) of the output columns */
    return tp_gather_from_region_forward(out, y, scratch + (size_t)N * OUT_tp, N, OUT, comm);
}

mtc_result_t tp_column_linear_backward(const tp_ctx *tp, float *din, float *dw, float *db,
                                       const float *dout, float *in_total, int in_total_saved,
                                       const float *in, const float *w, float *scratch,
                                       int gather_output, int B, int T, int IN, int OUT) {
    mtc_comm_t comm = tp->comm;
    int p = tp_size(comm), sp = tp->sequence_parallel && p > 1;
    MTC_CHECK(check_split(OUT, p, "column-parallel output size"));
    if (sp) MTC_CHECK(check_split(T, p, "seq-length"));
    int OUT_tp = OUT / p;
    int N = B * T;
    float *s = scratch;
    const float *g = dout; /* (N, OUT_tp) */
    if (gather_output && p > 1) {
        MTC_CHECK(tp_gather_from_region_backward(s, dout, N, OUT, comm)); /* split: no comm */
        g = s;
        s += (size_t)N * OUT_tp;
    }
    const float *x = in;
    mtc_request_t req = NULL;
    int regather = sp && !in_total_saved;
    if (sp) {
        if (!in_total)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "column-parallel linear under sequence parallelism needs in_total");
        x = in_total;
    }
    /* scratch after the split dout: [dfull (N, IN) | permutation (seq scratch)] */
    float *dfull = sp ? s : NULL, *perm = sp ? s + (size_t)N * IN : NULL;
    if (regather) /* comm: all-gather(tp) of the input along T, overlapping the dgrad GEMM */
        MTC_CHECK(tp_seq_all_gather_start(in_total, in, perm, B, T, IN, comm, &req));
    if (din) {
        /* dgrad (reads no input: the all-gather may still be writing it): no SP
         * straight into din, SP into the full-sequence buffer */
        nn_linear_backward(tp->pool, sp ? dfull : din, NULL, NULL, g, NULL, w, N, IN, OUT_tp);
    }
    if (regather) MTC_CHECK(tp_seq_all_gather_finish(in_total, perm, B, T, IN, comm, &req));
    if (din) {
        if (sp) /* comm: reduce-scatter(tp) along T, overlapping the wgrad GEMMs */
            MTC_CHECK(tp_seq_reduce_scatter_start(din, dfull, perm, B, T, IN, comm, &req));
        else if (p > 1) /* comm: all-reduce(tp) (copy_to_region backward), overlapping wgrad */
            MTC_CHECK(mtc_all_reduce_start(din, din, (size_t)N * IN, MTC_DTYPE_F32, MTC_OP_SUM,
                                           comm, &req));
    }
    if (dw || db) nn_linear_backward(tp->pool, NULL, dw, db, g, x, w, N, IN, OUT_tp);
    return mtc_request_wait(&req);
}

/* ---- row-parallel ------------------------------------------------------------------------ */

size_t tp_row_linear_scratch_floats(const tp_ctx *tp, int input_is_parallel, int B, int T, int IN,
                                    int OUT) {
    int p = tp_size(tp->comm);
    if (p == 1) return 0;
    size_t N = (size_t)B * T, IN_tp = (size_t)(IN / p);
    if (tp->sequence_parallel) /* [partial or gathered dout (N, OUT) | permutation] */
        return N * OUT + tp_seq_scratch_floats(B, T, OUT, p);
    if (!input_is_parallel) /* [x_r | dx_r | last-dim permutation] */
        return 2 * N * IN_tp + tp_last_scratch_floats((int)N, IN, p);
    return 0;
}

static mtc_result_t row_check(const tp_ctx *tp, int input_is_parallel, int T, int IN) {
    int p = tp_size(tp->comm);
    MTC_CHECK(check_split(IN, p, "row-parallel input size"));
    if (tp->sequence_parallel && p > 1) {
        MTC_CHECK(check_split(T, p, "seq-length"));
        if (!input_is_parallel)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "row-parallel linear: sequence parallelism needs input_is_parallel "
                             "(as in Megatron)");
    }
    return MTC_OK;
}

mtc_result_t tp_row_linear_forward(const tp_ctx *tp, float *out, const float *in, const float *w,
                                   const float *b, float *scratch, int input_is_parallel, int B,
                                   int T, int IN, int OUT) {
    mtc_comm_t comm = tp->comm;
    int p = tp_size(comm), sp = tp->sequence_parallel && p > 1;
    MTC_CHECK(row_check(tp, input_is_parallel, T, IN));
    int IN_tp = IN / p, N = B * T;
    if (p == 1) { /* the serial layer: bias inside the GEMM, as nn does it */
        nn_linear_forward(tp->pool, out, in, w, b, N, IN, OUT);
        return MTC_OK;
    }
    float *s = scratch;
    const float *x = in; /* (N, IN_tp) */
    if (!input_is_parallel) {
        MTC_CHECK(tp_scatter_to_region_forward(s, in, N, IN, comm)); /* split: no comm */
        x = s;
        s += (size_t)N * IN_tp;
    }
    if (sp) {
        float *partial = s; /* (B, T, OUT) */
        nn_linear_forward(tp->pool, partial, x, w, NULL, N, IN_tp, OUT);
        /* comm: reduce-scatter(tp) along T */
        MTC_CHECK(
            tp_reduce_scatter_to_seq_forward(out, partial, s + (size_t)N * OUT, B, T, OUT, comm));
        add_bias(out, b, (size_t)B * (T / p), OUT);
        return MTC_OK;
    }
    nn_linear_forward(tp->pool, out, x, w, NULL, N, IN_tp, OUT);
    /* comm: all-reduce(tp) (reduce_from_region) */
    MTC_CHECK(tp_reduce_from_region_forward(out, out, (size_t)N * OUT, comm));
    add_bias(out, b, (size_t)N, OUT);
    return MTC_OK;
}

mtc_result_t tp_row_linear_backward(const tp_ctx *tp, float *din, float *dw, float *db,
                                    const float *dout, const float *in, const float *w,
                                    float *scratch, int input_is_parallel, int B, int T, int IN,
                                    int OUT) {
    mtc_comm_t comm = tp->comm;
    int p = tp_size(comm), sp = tp->sequence_parallel && p > 1;
    MTC_CHECK(row_check(tp, input_is_parallel, T, IN));
    int IN_tp = IN / p, N = B * T;
    int N_loc = sp ? B * (T / p) : N;
    /* bias: the sum over this rank's rows of dout (partial under SP, see layers.h) */
    if (db) nn_linear_backward(tp->pool, NULL, NULL, db, dout, NULL, NULL, N_loc, IN_tp, OUT);
    float *s = scratch;
    const float *g = dout; /* (N, OUT), whole sequence */
    if (sp) {
        /* comm: all-gather(tp) along T (reduce_scatter_to_seq backward) */
        MTC_CHECK(tp_reduce_scatter_to_seq_backward(s, dout, s + (size_t)N * OUT, B, T, OUT, comm));
        g = s;
        s += (size_t)N * OUT;
    }
    const float *x = in; /* (N, IN_tp) */
    float *dx = din;
    int scatter = !input_is_parallel && p > 1;
    if (scatter) {
        MTC_CHECK(tp_scatter_to_region_forward(s, in, N, IN, comm)); /* re-split: no comm */
        x = s;
        dx = din ? s + (size_t)N * IN_tp : NULL;
        s += 2 * (size_t)N * IN_tp;
    }
    nn_linear_backward(tp->pool, dx, dw, NULL, g, x, w, N, IN_tp, OUT);
    /* comm: all-gather(tp) of the input-gradient columns (scatter_to_region backward) */
    if (scatter && din) MTC_CHECK(tp_scatter_to_region_backward(din, dx, s, N, IN, comm));
    return MTC_OK;
}
