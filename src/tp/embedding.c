/* tp/embedding.c - VocabParallelEmbedding (Megatron tensor_parallel/layers.py
 * :197-325) with the learned position embedding GPT-2 adds; see layers.h.
 *
 *   no SP:            out = all-reduce(wte_r[tok]) + wpe[pos]
 *   SP, wpe (GPT-2):  full = all-reduce(wte_r[tok]) + wpe[pos]; out = split_T(full)
 *   SP, no wpe:       out = reduce-scatter_T(wte_r[tok])   (reduce_scatter_embeddings)
 *   backward:         g = dout (no SP) or all-gather_T(dout) (SP, both cases);
 *                     dwte_r += rows of g whose token is in the shard; dwpe += g by position
 *
 * Why the GPT-2 path all-reduces then splits although a reduce-scatter would
 * produce the same token sums: Megatron adds the position embedding to the
 * full sequence and only then scatters, so the position gradient is taken
 * from the full (all-gathered) gradient and is complete on every TP rank;
 * wpe then needs no TP gradient reduction. We keep that contract.
 * Relies on nn_token/position_embedding_* and tp/mappings.h. */
#include "tp/layers.h"
#include "tp/mappings.h"

size_t tp_vocab_embedding_scratch_floats(const tp_ctx *tp, int B, int T, int C) {
    int p = tp_size(tp->comm);
    if (p == 1 || !tp->sequence_parallel) return 0;
    return (size_t)B * T * C + tp_seq_scratch_floats(B, T, C, p); /* [full | permutation] */
}

static mtc_result_t emb_check(int p, int sp, int T, int V) {
    if (p > 1 && V % p)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "padded vocabulary %d is not divisible by tensor-model-parallel-size=%d "
                         "(pad it to a multiple of make-vocab-size-divisible-by*tp)",
                         V, p);
    if (sp && T % p)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "seq-length=%d is not divisible by tensor-model-parallel-size=%d "
                         "(needed by --sequence-parallel)",
                         T, p);
    return MTC_OK;
}

mtc_result_t tp_vocab_embedding_forward(const tp_ctx *tp, float *out, const int *tokens,
                                        const float *wte, const float *wpe, const int *pos,
                                        float *scratch, int B, int T, int C, int V) {
    mtc_comm_t comm = tp->comm;
    int p = tp_size(comm), sp = tp->sequence_parallel && p > 1;
    MTC_CHECK(emb_check(p, sp, T, V));
    int V_tp = V / p, v0 = tp_rank(comm) * V_tp, N = B * T;
    size_t n = (size_t)N * C;
    if (!sp) {
        nn_token_embedding_forward(out, tokens, wte, v0, V_tp, N, C);
        MTC_CHECK(tp_all_reduce(out, n, comm)); /* comm: all-reduce(tp) */
        if (wpe) nn_position_embedding_forward(out, wpe, pos, B, T, C);
        return MTC_OK;
    }
    float *full = scratch; /* (B, T, C) */
    nn_token_embedding_forward(full, tokens, wte, v0, V_tp, N, C);
    if (!wpe) /* comm: reduce-scatter(tp) along T */
        return tp_reduce_scatter_to_seq_forward(out, full, scratch + n, B, T, C, comm);
    MTC_CHECK(tp_all_reduce(full, n, comm)); /* comm: all-reduce(tp) */
    nn_position_embedding_forward(full, wpe, pos, B, T, C);
    return tp_scatter_to_seq_forward(out, full, B, T, C, comm); /* split: no comm */
}

mtc_result_t tp_vocab_embedding_backward(const tp_ctx *tp, float *dwte, float *dwpe,
                                         const float *dout, const int *tokens, const int *pos,
                                         float *scratch, int B, int T, int C, int V) {
    mtc_comm_t comm = tp->comm;
    int p = tp_size(comm), sp = tp->sequence_parallel && p > 1;
    MTC_CHECK(emb_check(p, sp, T, V));
    int V_tp = V / p, v0 = tp_rank(comm) * V_tp, N = B * T;
    const float *g = dout; /* (B, T, C) */
    if (sp) {
        /* comm: all-gather(tp) along T (backward of the split / reduce-scatter) */
        MTC_CHECK(tp_seq_all_gather(scratch, dout, scratch + (size_t)N * C, B, T, C, comm));
        g = scratch;
    }
    if (dwte) nn_token_embedding_backward(dwte, g, tokens, v0, V_tp, N, C);
    if (dwpe) nn_position_embedding_backward(dwpe, g, pos, B, T, C);
    return MTC_OK;
}
