/* tp/head.c - the LM head (a column-parallel linear over the vocabulary
 * shard, no bias) fused with the vocabulary-parallel cross-entropy, walked
 * in chunks of tokens so that no (tokens x vocabulary) tensor exists; see
 * tp/layers.h.
 *
 *   [SP: all-gather T of x -> X]
 *   for each chunk of `chunk` rows n0..n1 of X:
 *       L   = X[n0:n1] · W_rᵀ                     (chunk, V_tp) into one buffer
 *       L  := xent forward (+ backward)           comm: all-reduce MAX, SUM (tp)
 *       dX[n0:n1] = L · W_r ;  dW_r += Lᵀ · X[n0:n1]   (with a gradient only)
 *   dx = [all-reduce (tp) | SP: reduce-scatter T] of dX
 *
 * Each chunk's GEMMs run on a tensor-parallel-free context (the local
 * column-parallel linear with a NULL communicator: the context's
 * precision, no collective), so the only collectives are the ones above,
 * once per step of the diagram. The chunk is a number of tokens, not a
 * fraction of them, so every layout with the same tokens per rank cuts the
 * weight-gradient sum in the same places.
 * Limitations: the chunks run one after another (no overlap of a chunk's
 * all-reduces with the next chunk's GEMM); no label smoothing. */
#include "tp/layers.h"
#include "tp/mappings.h"

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

static int chunk_rows(int chunk, int N) { return chunk < 1 || chunk > N ? N : chunk; }

size_t tp_vocab_head_xent_scratch_floats(const tp_ctx *tp, int chunk, int B, int T, int C) {
    int p = tp_size(tp->comm), sp = tp->sequence_parallel && p > 1, N = B * T;
    size_t seq = sp ? tp_seq_scratch_floats(B, T, C, p) : 0;
    /* [SP: dX (N, C)] then [the sequence permutation | xent's 3 x chunk] */
    return (sp ? (size_t)N * C : 0) + max_sz(seq, 3 * (size_t)chunk_rows(chunk, N));
}

mtc_result_t tp_vocab_head_xent(const tp_ctx *tp, float *losses, float *din, float *dw,
                                float *logits, float *in_total, const float *in, const float *w,
                                const int *targets, float scale, float *scratch, int chunk, int B,
                                int T, int C, int V, int Vp) {
    return tp_vocab_head_xent_masked(tp, losses, din, dw, logits, in_total, in, w, targets, NULL,
                                     scale, scratch, chunk, B, T, C, V, Vp);
}

mtc_result_t tp_vocab_head_xent_masked(const tp_ctx *tp, float *losses, float *din, float *dw,
                                       float *logits, float *in_total, const float *in,
                                       const float *w, const int *targets, const float *token_scale,
                                       float scale, float *scratch, int chunk, int B, int T, int C,
                                       int V, int Vp) {
    mtc_comm_t comm = tp->comm;
    int p = tp_size(comm), sp = tp->sequence_parallel && p > 1;
    if (Vp % p)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "padded vocabulary %d is not divisible by tensor-model-parallel-size=%d",
                         Vp, p);
    if (sp && T % p)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "seq-length=%d is not divisible by tensor-model-parallel-size=%d", T, p);
    int N = B * T, V_tp = Vp / p, rows = chunk_rows(chunk, N), grad = scale > 0;
    const tp_ctx local = {NULL, tp->pool, 0, tp->lowp, NULL}; /* the chunk GEMMs: no collective */
    float *dfull = sp ? scratch : din;                        /* dX (N, C) */
    float *s = sp ? scratch + (size_t)N * C : scratch;
    const float *x = in; /* (N, C), the whole sequence */
    if (sp) {
        if (!in_total)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "the LM head under sequence parallelism needs in_total");
        /* comm: all-gather(tp) along T (bf16 on the wire with --bf16) */
        if (tp->lowp && tp->lowp->prec == TP_PREC_BF16)
            MTC_CHECK(
                tp_seq_all_gather_bf16(in_total, in, tp->lowp->xa, tp->lowp->xb, B, T, C, comm));
        else
            MTC_CHECK(tp_gather_from_seq_forward(in_total, in, s, B, T, C, comm));
        x = in_total;
    }
    for (int n0 = 0; n0 < N; n0 += rows) {
        int nc = N - n0 < rows ? N - n0 : rows;
        const float *xc = x + (size_t)n0 * C;
        MTC_CHECK(
            tp_column_linear_forward(&local, logits, NULL, xc, w, NULL, NULL, 0, 1, nc, C, V_tp));
        /* comm: all-reduce MAX(tp), all-reduce SUM(tp) */
        if (!grad) {
            MTC_CHECK(tp_vocab_xent_forward(tp, losses + n0, logits, targets + n0, s, nc, V, Vp));
            continue;
        }
        MTC_CHECK(tp_vocab_xent_forward_backward(tp, losses + n0, logits, targets + n0, scale,
                                                 token_scale ? token_scale + n0 : NULL, s, nc, V,
                                                 Vp));
        MTC_CHECK(tp_column_linear_backward(&local, dfull + (size_t)n0 * C, dw, NULL, logits, NULL,
                                            0, xc, w, NULL, 0, 1, nc, C, V_tp));
    }
    if (!grad || p == 1) return MTC_OK;
    if (sp) /* comm: reduce-scatter(tp) along T */
        return tp_seq_reduce_scatter(din, dfull, s, B, T, C, comm);
    return mtc_all_reduce(din, din, (size_t)N * C, MTC_DTYPE_F32, MTC_OP_SUM, comm);
}
