/* tp/layers.h - the tensor- and sequence-parallel layers of Megatron core
 * (tensor_parallel/layers.py, cross_entropy.py) as forward/backward pairs
 * on plain float buffers: column- and row-parallel linear, the
 * vocabulary-parallel embedding and cross-entropy, the fused QKV shard
 * mapping, and the TP context a rank derives from its grid (context.c).
 * The attention and MLP blocks are composed from the linears in
 * model/block.c (model_attention_*, model_mlp_*); the model owns the layer
 * norms, residuals and hidden dropout.
 *
 * Shapes use the llm.c letters with shards spelled out: B batch, T the
 * FULL sequence length, T_tp = T/tp, C hidden, NH heads, F the MLP width,
 * V the padded vocabulary (rows of the embedding table), V_tp = V/tp.
 * Activations are (B, T, ·) row-major. Under sequence parallelism (SP)
 * the tensors between the TP regions are (B, T_tp, C): rank r holds
 * positions [r*T_tp, (r+1)*T_tp) of every batch row (see tp/mappings.h).
 * "T_loc" below means T_tp under SP and T otherwise.
 *
 * Conventions (nn.h's): outputs first, inputs const, dims last; backward
 * writes input gradients (=) and accumulates (+=) parameter gradients; a
 * NULL gradient pointer skips that gradient (a NULL din also skips the
 * communication that belongs to it; every rank must pass NULL alike).
 * Every function returns the first communication error. Scratch is the
 * caller's (size from the matching *_scratch_floats function); nothing
 * here allocates or keeps a pointer past the call.
 *
 * GPT-2 under TP, as model/ composes these (r = TP rank):
 *   x (B, T_loc, C) = tp_vocab_embedding_forward(tokens), then hidden
 *       dropout keyed by global position (t0 = r*T_tp under SP);
 *   per layer: ln_1 (nn, local rows) -> model_attention_forward (column-
 *              parallel QKV, attention, row-parallel c_proj) -> dropout +
 *              residual; ln_2 -> model_mlp_forward -> dropout + residual,
 *              all on (B, T_loc, C).
 *       Without SP these tensors are replicated on every TP rank and the
 *       dropout masks, keyed globally, are identical there, as they must be.
 *   ln_f -> tp_vocab_head_xent: tp_column_linear_forward (w = the rank's
 *       wte shard, no bias, gather_output 0) -> logits -> tp_vocab_xent_*,
 *       a chunk of tokens at a time (generation: tp_column_linear_forward ->
 *       (B, T, V_tp)).
 *   Gradient finalisation: under SP all-reduce(tp) the gradients of the
 *   layer norms (ln_1, ln_2, ln_f) and of the c_proj biases (partial sums
 *   of local tokens); every other TP gradient is complete as left here.
 *
 * Relies on nn/nn.h for all arithmetic and tp/mappings.h for all
 * communication. Does not do layer norms, residuals, hidden dropout, the
 * TP all-reduce of sequence-parallel parameter gradients (gradient
 * finalisation's job, see the row-parallel bias), or expert layers. */
#ifndef MTC_TP_LAYERS_H
#define MTC_TP_LAYERS_H

#include <stddef.h>

#include "comm/comm.h"
#include "core/dtype.h"
#include "core/result.h"
#include "grid/grid.h"
#include "nn/nn.h"

/* Mixed precision of the linear layers (--bf16, --fp16; model/ sets it up).
 * bf16: each GEMM takes bf16 inputs (the activation converted on the way
 * in, the weight from the bf16 copy w16 at the same offset as in w32) and
 * accumulates in fp32 through oneDNN; weight and bias gradients accumulate
 * into the fp32 main-grad buffer; the output is rounded to bf16 (a bf16
 * tensor kept in fp32 storage). fp16: the same roundings to fp16 with the
 * GEMM in fp32 (this CPU has no fp16 arithmetic); the backward also rounds
 * the incoming gradient to fp16, so a loss scale too large overflows to inf
 * there as on a GPU. bf16 with f32_gemm (--bf16-gemm fp32, or auto where
 * it measured faster): the fp16 scheme with bf16 roundings, the GEMMs in
 * fp32 on bf16-valued operands (exact products, fp32 accumulation: the
 * bf16 GEMM's semantics), no w16, no oneDNN context. */
typedef enum { TP_PREC_F32 = 0, TP_PREC_BF16, TP_PREC_FP16 } tp_precision;
struct nn_lowp;
typedef struct {
    tp_precision prec;
    struct nn_lowp *lp;  /* bf16: the rank's oneDNN context (NULL with f32_gemm) */
    int f32_gemm;        /* bf16: fp32 GEMMs on bf16-valued operands instead of oneDNN bf16 */
    const float *w32;    /* the compute parameters every weight pointer points into */
    const mtc_bf16 *w16; /* bf16 without f32_gemm: their copy, same offsets */
    size_t nw;           /* floats of w32 */
    void *xa, *xb;       /* conversion scratch, cap floats each (the input, the gradient) */
    size_t cap;
} tp_lowp;

/* TP's own options beside the grid's size (from the command line, handed
 * through train/ and the model to tp_ctx_from_grid untouched). */
typedef struct {
    int sequence_parallel; /* --sequence-parallel (ignored with tp 1) */
} tp_options;

/* What every TP layer call needs. */
typedef struct {
    mtc_comm_t comm;         /* the TP group (TENSOR_MODEL_PARALLEL_GROUP); NULL = tp 1 */
    nn_pool *pool;           /* this rank's kernel threads; NULL = the calling thread */
    int sequence_parallel;   /* --sequence-parallel */
    tp_lowp *lowp;           /* NULL: fp32 */
    struct tp_fp8_gemm *fp8; /* this linear's fp8 recipe (tp/fp8_linear.h; needs --bf16's
                                fp32 GEMMs); NULL: none */
} tp_ctx;

/* The context from the rank's grid (tp/context.c); grid NULL: serial. */
tp_ctx tp_ctx_from_grid(mtc_grid_t grid, nn_pool *pool, int sequence_parallel);

/* --bf16: create the oneDNN primitives of one linear layer's three GEMMs
 * (forward, input gradient, weight gradient) ahead, at set-up, so that no
 * step creates any (nn_lowp_stats counts them). column: 1 column-parallel,
 * 0 row-parallel (input parallel); IN, OUT the full sizes; B, T as the
 * layer is called (T the whole sequence). A no-op without --bf16 and with
 * f32_gemm (nn_sgemm makes its own as the fp32 model does). */
mtc_result_t tp_linear_bf16_prepare(const tp_ctx *tp, int column, int B, int T, int IN, int OUT,
                                    int has_bias);

/* ---- ColumnParallelLinear: W split along its output dim ------------------------------ */

/* out (B, T, OUT_tp), or (B, T, OUT) with gather_output, = in · wᵀ + b.
 * in (B, T_loc, IN); w (OUT_tp, IN) = rows [r*OUT_tp, (r+1)*OUT_tp) of the
 * full weight; b (OUT_tp) or NULL. in_total (B, T, IN): under SP receives the
 * gathered input (may be kept for backward, see below); unused without SP.
 * comm: none without SP (copy_to_region); all-gather(tp) of `in` along T
 * under SP; all-gather(tp) of the output columns with gather_output.
 * (Megatron asserts gather_output is off under SP; here the combination
 * works, giving the full-sequence, full-width output, and is tested.) */
mtc_result_t tp_column_linear_forward(const tp_ctx *tp, float *out, float *in_total,
                                      const float *in, const float *w, const float *b,
                                      float *scratch, int gather_output, int B, int T, int IN,
                                      int OUT);
/* din (B, T_loc, IN) =; dw (OUT_tp, IN) +=; db (OUT_tp) +=.
 * dout as forward's out. Under SP the weight gradient needs the gathered
 * input: with in_total_saved = 1 in_total still holds forward's copy (costs
 * B*T*IN floats per layer until backward); with 0 it is re-gathered from
 * `in` into in_total here, Megatron's choice (in_total can then be one
 * buffer shared by all layers), while the input-gradient GEMM runs; the
 * input-gradient collective then runs while the weight gradient is
 * computed (Megatron's async dgrad communication).
 * comm: all-reduce(tp) of din without SP; under SP all-gather(tp) of `in`
 * (when not saved) then reduce-scatter(tp) of din along T. */
mtc_result_t tp_column_linear_backward(const tp_ctx *tp, float *din, float *dw, float *db,
                                       const float *dout, float *in_total, int in_total_saved,
                                       const float *in, const float *w, float *scratch,
                                       int gather_output, int B, int T, int IN, int OUT);
size_t tp_column_linear_scratch_floats(const tp_ctx *tp, int gather_output, int B, int T, int IN,
                                       int OUT);

/* ---- RowParallelLinear: W split along its input dim ---------------------------------- */

/* out (B, T_loc, OUT) = Σ_ranks in · wᵀ, then + b (bias added once, after
 * the reduction). in (B, T, IN_tp) with input_is_parallel, else (B, T, IN)
 * split here (refused under SP, as Megatron does). w (OUT, IN_tp) = columns
 * [r*IN_tp, (r+1)*IN_tp) of the full weight; b (OUT) replicated, or NULL.
 * comm: all-reduce(tp) of out without SP (reduce_from_region); reduce-scatter(tp)
 * along T under SP (reduce_scatter_to_sequence_parallel_region). */
mtc_result_t tp_row_linear_forward(const tp_ctx *tp, float *out, const float *in, const float *w,
                                   const float *b, float *scratch, int input_is_parallel, int B,
                                   int T, int IN, int OUT);
/* din as forward's in (=); dw (OUT, IN_tp) +=; dout (B, T_loc, OUT).
 * db (OUT) +=: without SP the full bias gradient (the sum over all B*T rows,
 * identical on every TP rank). Under SP only the sum over this rank's
 * B*T_tp rows: the bias is a "sequence_parallel" parameter and its gradient
 * must be all-reduced (sum) over TP afterwards, as Megatron's
 * finalize_model_grads does; the same holds for the layer-norm parameters.
 * comm: none without SP; all-gather(tp) of dout along T under SP; all-gather
 * of din's columns when !input_is_parallel. */
mtc_result_t tp_row_linear_backward(const tp_ctx *tp, float *din, float *dw, float *db,
                                    const float *dout, const float *in, const float *w,
                                    float *scratch, int input_is_parallel, int B, int T, int IN,
                                    int OUT);
size_t tp_row_linear_scratch_floats(const tp_ctx *tp, int input_is_parallel, int B, int T, int IN,
                                    int OUT);

/* ---- VocabParallelEmbedding ------------------------------------------------------------ */

/* out (B, T_loc, C) = wte[tokens] (+ wpe[pos] when wpe is given).
 * tokens (B, T), the whole microbatch on every TP rank; wte (V_tp, C) = rows
 * [r*V_tp, (r+1)*V_tp) of the padded table (V % tp == 0); ids outside the
 * shard give zero rows before the reduction, ids outside [0, V) zero rows
 * overall. wpe (max positions, C) replicated or NULL; pos (T) global
 * positions or NULL = 0..T-1.
 * Under SP with wpe (GPT-2): all-reduce, add wpe, keep this rank's sequence
 * block (Megatron's LanguageModelEmbedding with learned positions). Under SP
 * without wpe: reduce-scatter along T (Megatron's reduce_scatter_embeddings).
 * The caller applies the embedding dropout to the (B, T_loc, C) result.
 * comm: all-reduce(tp), or reduce-scatter(tp) under SP without wpe. */
mtc_result_t tp_vocab_embedding_forward(const tp_ctx *tp, float *out, const int *tokens,
                                        const float *wte, const float *wpe, const int *pos,
                                        float *scratch, int B, int T, int C, int V);
/* dwte (V_tp, C) +=: this shard's rows only; dwpe (max positions, C) += the
 * FULL position gradient, identical on every TP rank (not a partial sum, so
 * no TP reduction is needed); either may be NULL. dout (B, T_loc, C).
 * comm: none without SP; all-gather(tp) of dout along T under SP. */
mtc_result_t tp_vocab_embedding_backward(const tp_ctx *tp, float *dwte, float *dwpe,
                                         const float *dout, const int *tokens, const int *pos,
                                         float *scratch, int B, int T, int C, int V);
size_t tp_vocab_embedding_scratch_floats(const tp_ctx *tp, int B, int T, int C);

/* ---- vocabulary-parallel cross-entropy ------------------------------------------------- */

/* logits (N, V_tp): this rank's columns [r*V_tp, (r+1)*V_tp) of the padded
 * vocabulary Vp = V_tp*tp; global columns >= V are padding and ignored.
 * They become this rank's softmax probabilities in place (padding 0) for the
 * backward. losses (N) = log Σ_v exp(x_v) − x_target, identical on all
 * ranks. targets (N) in [0, V) (else MTC_ERR_INVALID_ARGUMENT before any
 * communication). scratch: 3*N floats.
 * comm: all-reduce MAX(tp) of the row maxima, then one all-reduce SUM(tp) of
 * 2N floats holding the target logits (0 where not owned) and Σexp together
 * (Megatron makes these two calls; one message carries both here). */
mtc_result_t tp_vocab_xent_forward(const tp_ctx *tp, float *losses, float *logits,
                                   const int *targets, float *scratch, int N, int V, int Vp);
/* probs (N, V_tp) become dlogits = s_n * (p − onehot(target)), the one-hot
 * subtracted only on the rank owning the target column; s_n = scale *
 * (token_scale ? token_scale[n] : 1) (loss mask / mean); padding 0.
 * comm: none. */
mtc_result_t tp_vocab_xent_backward(const tp_ctx *tp, float *probs, const int *targets, float scale,
                                    const float *token_scale, int N, int V, int Vp);

/* Both in one pass over the logits (training): losses as the forward,
 * logits become the dlogits the backward would make, bit for bit.
 * scratch: 3*N floats.  comm: as the forward. */
mtc_result_t tp_vocab_xent_forward_backward(const tp_ctx *tp, float *losses, float *logits,
                                            const int *targets, float scale,
                                            const float *token_scale, float *scratch, int N, int V,
                                            int Vp);

/* ---- the LM head fused with the cross-entropy (tp/head.c) ---------------------------- */

/* The head logits = in · wᵀ (no bias) and the vocabulary-parallel
 * cross-entropy, `chunk` tokens at a time through one (chunk, V_tp) buffer,
 * so no (B*T, V_tp) tensor is made. in (B, T_loc, C); w (V_tp, C) this
 * rank's vocabulary rows; in_total (B, T, C) receives the gathered input
 * under SP (unused without). losses (B*T) as tp_vocab_xent_forward.
 * scale > 0 (training): din (B, T_loc, C) = d(Σ scale*loss)/d(in), as the
 * column-parallel backward would give it from the unchunked dlogits, and
 * dw (V_tp, C) += the weight gradient; scale = 0: din, dw untouched (may be
 * NULL). logits (chunk, V_tp) scratch; chunk < 1 or > B*T: one chunk.
 * scratch: tp_vocab_head_xent_scratch_floats.
 * comm: SP all-gather(tp) of in; per chunk the cross-entropy's all-reduce
 * MAX and SUM (tp); with a gradient, at the end all-reduce(tp) of din, or
 * under SP reduce-scatter(tp) along T. */
mtc_result_t tp_vocab_head_xent(const tp_ctx *tp, float *losses, float *din, float *dw,
                                float *logits, float *in_total, const float *in, const float *w,
                                const int *targets, float scale, float *scratch, int chunk, int B,
                                int T, int C, int V, int Vp);
/* The same with a per-token gradient factor token_scale (B*T, NULL = 1):
 * the loss mask of multi-token prediction's shifted labels (model/mtp.c).
 * losses are not masked (the caller weighs them). */
mtc_result_t tp_vocab_head_xent_masked(const tp_ctx *tp, float *losses, float *din, float *dw,
                                       float *logits, float *in_total, const float *in,
                                       const float *w, const int *targets, const float *token_scale,
                                       float scale, float *scratch, int chunk, int B, int T, int C,
                                       int V, int Vp);
size_t tp_vocab_head_xent_scratch_floats(const tp_ctx *tp, int chunk, int B, int T, int C);

/* Local kernel pieces of the vocabulary-parallel cross-entropy (no
 * communication), over x (N, V_tp) whose column j is global column v0 + j;
 * only global columns < V count.
 * rowmax (N) = max over valid columns (-inf when the shard has none). */
void tp_xent_local_max(nn_pool *pool, float *rowmax, const float *x, int v0, int N, int V_tp,
                       int V);
/* pred (N) = x[target - v0] − rowmax when this shard owns the target, else 0. */
void tp_xent_predicted(float *pred, const float *x, const int *targets, const float *rowmax, int v0,
                       int N, int V_tp, int V);
/* x = exp(x − rowmax) on valid columns, 0 on padding; sumexp (N) = Σ (fixed order). */
void tp_xent_exp_sum(nn_pool *pool, float *sumexp, float *x, const float *rowmax, int v0, int N,
                     int V_tp, int V);

/* ---- GPT-2's fused c_attn split by heads
 * ----------------------------------------------------------- */

/* The fused c_attn weight (3C, C) / bias (3C) is [q | k | v] with heads
 * contiguous in each part (Hugging Face layout, as nn_attention_forward
 * wants). TP rank r owns heads [r*NH_tp, (r+1)*NH_tp), i.e. rows
 * {q_r, k_r, v_r} with q_r = [r*C_tp, (r+1)*C_tp) and k, v offset by C and
 * 2C; its shard (3*C_tp, ·) is [q_r | k_r | v_r], again the layout
 * nn_attention_forward wants for NH_tp heads. Global row of local row i: */
static inline int tp_qkv_row(int i, int C, int tp, int r) {
    int C_tp = C / tp;
    return (i / C_tp) * C + r * C_tp + i % C_tp;
}
/* dst (3*C_tp, cols) = rank r's rows of src (3C, cols); cols = C for the
 * weight, 1 for the bias. */
void tp_qkv_shard(float *dst, const float *src, int C, int cols, int tp, int r);
/* The inverse: rank r's rows of dst (3C, cols) = src (3*C_tp, cols). */
void tp_qkv_unshard(float *dst, const float *src, int C, int cols, int tp, int r);

#endif
