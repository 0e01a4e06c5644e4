/* tests/tp/test_tp_blocks.c - the attention block (fused c_attn
 * column-parallel -> attention over the rank's heads -> c_proj
 * row-parallel) and the MLP block (c_fc column -> GELU -> c_proj row)
 * against the serial nn composition, for tp in {1, 2, 3, 4}, with and
 * without sequence parallelism, the SP input kept or re-gathered, and
 * attention dropout on (so the head offset of the dropout mask is checked).
 * Weight shards are drawn from the RNG by GLOBAL row index: for c_attn the
 * test's own arithmetic for "rows {q_r, k_r, v_r}" picks the rows, and
 * tp_qkv_row / tp_qkv_shard / tp_qkv_unshard must agree with it. The MLP
 * also runs as two TP groups of 2 inside a world of 4.
 * And the tied-embedding path of GPT-2 end to end: vocab-parallel embedding
 * (+ wpe) -> LM head as a column-parallel linear on the same wte shard ->
 * vocab-parallel cross-entropy -> backward through both uses of wte,
 * against the serial nn composition (losses, dwte shard, dwpe).
 * Tolerance: tp_test.h (tp = 1 compared bit for bit). */
#include <stdio.h>

#include "nn/nn.h"
#include "model/block.h"
#include "tp/layers.h"
#include "tp/mappings.h"
#include "tp_test.h"

enum { B = 2, T = 12, C = 24, NH = 12, HS = C / NH, F = 48 };
enum { S_X = 21, S_QKVW, S_QKVB, S_PW, S_PB, S_DOUT, S_FCW, S_FCB };
#define DW0 0.5f

static const nn_dropout_spec DROP = {.p = 0.2f, .seed = 77, .stream = 5};
/* GPT-2's blocks: one key/value group per head, GELU, no rotary positions */
static const model_block_dims BD = {.C = C, .NH = NH, .NG = NH, .HS = HS, .F = F};

typedef struct {
    int mlp, sp, saved, groups;
    float *x, *out, *dout, *din;
    float *w1, *b1, *w2, *b2;     /* full weights: c_attn/c_fc, c_proj */
    float *dw1, *db1, *dw2, *db2; /* serial gradients */
} job;

static void fill_const(float *p, size_t n, float v) {
    for (size_t k = 0; k < n; k++)
        p[k] = v;
}

/* the test's own statement of the fused-QKV shard: rows part*C + r*C_p + i */
static size_t qkv_global_row(int i, int p, int r) {
    int C_p = C / p;
    return (size_t)(i / C_p) * C + (size_t)r * C_p + i % C_p;
}

static void serial(job *j) {
    int N = B * T, W1 = j->mlp ? F : 3 * C, IN2 = j->mlp ? F : C;
    j->x = tt_alloc((size_t)N * C), j->out = tt_alloc((size_t)N * C);
    j->dout = tt_alloc((size_t)N * C), j->din = tt_alloc((size_t)N * C);
    j->w1 = tt_alloc((size_t)W1 * C), j->b1 = tt_alloc(W1);
    j->w2 = tt_alloc((size_t)C * IN2), j->b2 = tt_alloc(C);
    j->dw1 = tt_alloc((size_t)W1 * C), j->db1 = tt_alloc(W1);
    j->dw2 = tt_alloc((size_t)C * IN2), j->db2 = tt_alloc(C);
    tt_fill(j->x, (size_t)N * C, S_X, 0, 1.0f);
    tt_fill(j->w1, (size_t)W1 * C, j->mlp ? S_FCW : S_QKVW, 0, 0.3f);
    tt_fill(j->b1, W1, j->mlp ? S_FCB : S_QKVB, 0, 0.1f);
    tt_fill(j->w2, (size_t)C * IN2, S_PW, 0, 0.3f);
    tt_fill(j->b2, C, S_PB, 0, 0.1f);
    tt_fill(j->dout, (size_t)N * C, S_DOUT, 0, 1.0f);
    fill_const(j->dw1, (size_t)W1 * C, DW0), fill_const(j->db1, W1, DW0);
    fill_const(j->dw2, (size_t)C * IN2, DW0), fill_const(j->db2, C, DW0);
    float *h = tt_alloc((size_t)N * W1), *a = tt_alloc((size_t)N * IN2);
    float *dh = tt_alloc((size_t)N * W1), *da = tt_alloc((size_t)N * IN2);
    float *lse = tt_alloc((size_t)B * NH * T);
    nn_attention_shape as = nn_attention_shape_qkv(B, T, NH, HS);
    nn_linear_forward(NULL, h, j->x, j->w1, j->b1, N, C, W1);
    if (j->mlp)
        nn_gelu_forward(NULL, a, h, (size_t)N * F);
    else
        nn_attention_forward(NULL, a, lse, h, h + C, h + 2 * C, &as, &DROP);
    nn_linear_forward(NULL, j->out, a, j->w2, j->b2, N, IN2, C);
    nn_linear_backward(NULL, da, j->dw2, j->db2, j->dout, a, j->w2, N, IN2, C);
    if (j->mlp)
        nn_gelu_backward(NULL, dh, h, da, (size_t)N * F);
    else
        nn_attention_backward(NULL, dh, dh + C, dh + 2 * C, da, h, h + C, h + 2 * C, a, lse, &as,
                              &DROP);
    nn_linear_backward(NULL, j->din, j->dw1, j->db1, dh, j->x, j->w1, N, C, W1);
    free(h), free(a), free(dh), free(da), free(lse);
}

static void check_qkv_mapping(int p, int r) {
    int rows = 3 * (C / p), ok = 1;
    for (int i = 0; i < rows; i++)
        ok &= (size_t)tp_qkv_row(i, C, p, r) == qkv_global_row(i, p, r);
    T_CHECKF(ok, "tp_qkv_row disagrees with rows {q_r, k_r, v_r} (tp=%d rank %d)", p, r);
    float *full = tt_alloc((size_t)3 * C * C), *sh = tt_alloc((size_t)rows * C);
    float *want = tt_alloc((size_t)rows * C), *back = tt_alloc((size_t)3 * C * C);
    tt_fill(full, (size_t)3 * C * C, S_QKVW, 0, 1.0f);
    for (int i = 0; i < rows; i++)
        memcpy(want + (size_t)i * C, full + qkv_global_row(i, p, r) * C, C * sizeof(float));
    tp_qkv_shard(sh, full, C, C, p, r);
    tt_cmp("tp_qkv_shard", r, sh, want, (size_t)rows * C, 1);
    /* every rank's shard unsharded back fills the whole matrix */
    for (int q = 0; q < p; q++) {
        tp_qkv_shard(sh, full, C, C, p, q);
        tp_qkv_unshard(back, sh, C, C, p, q);
    }
    tt_cmp("tp_qkv_unshard", r, back, full, (size_t)3 * C * C, 1);
    free(full), free(sh), free(want), free(back);
}

static void block_rank(const job *j, mtc_comm_t comm) {
    int p = tp_size(comm), r = tp_rank(comm), N = B * T, T_loc = j->sp ? T / p : T;
    int W1 = j->mlp ? F : 3 * C, IN2 = j->mlp ? F : C, W1_p = W1 / p, IN2_p = IN2 / p;
    tp_ctx tp = {comm, NULL, j->sp, NULL, NULL};
    size_t nloc = (size_t)B * T_loc * C;
    float *in = tt_alloc(nloc), *out = tt_alloc(nloc), *dout = tt_alloc(nloc);
    float *din = tt_alloc(nloc), *want = tt_alloc((size_t)N * (W1 > C ? W1 : C) + C * IN2);
    float *w1 = tt_alloc((size_t)W1_p * C), *b1 = tt_alloc(W1_p);
    float *w2 = tt_alloc((size_t)C * IN2_p), *b2 = tt_alloc(C);
    float *dw1 = tt_alloc((size_t)W1_p * C), *db1 = tt_alloc(W1_p);
    float *dw2 = tt_alloc((size_t)C * IN2_p), *db2 = tt_alloc(C);
    float *in_total = tt_alloc((size_t)N * C);
    float *h = tt_alloc((size_t)N * W1_p), *a = tt_alloc((size_t)N * IN2_p);
    float *lse = tt_alloc((size_t)B * (NH / p) * T);
    size_t ns = j->mlp ? model_mlp_scratch_floats(&tp, B, T, &BD)
                       : model_attention_scratch_floats(&tp, B, T, &BD);
    float *scratch = tt_alloc(ns);
    char what[96];
#define WHAT(s)                                                                                    \
    (snprintf(what, sizeof what, "%s %s tp=%d sp=%d saved=%d groups=%d",                           \
              j->mlp ? "mlp" : "attention", s, p, j->sp, j->saved, j->groups),                     \
     what)
    if (!j->mlp) check_qkv_mapping(p, r);
    /* shards drawn by global index */
    for (int i = 0; i < W1_p; i++) {
        size_t g = j->mlp ? (size_t)r * W1_p + i : qkv_global_row(i, p, r);
        tt_fill(w1 + (size_t)i * C, C, j->mlp ? S_FCW : S_QKVW, g * C, 0.3f);
        tt_fill(b1 + i, 1, j->mlp ? S_FCB : S_QKVB, g, 0.1f);
    }
    tt_fill_cols(w2, C, IN2, p, r, S_PW, 0.3f);
    tt_fill(b2, C, S_PB, 0, 0.1f);
    if (j->sp)
        tt_seq(in, j->x, B, T, C, p, r), tt_seq(dout, j->dout, B, T, C, p, r);
    else
        memcpy(in, j->x, nloc * 4), memcpy(dout, j->dout, nloc * 4);
    mtc_result_t rc;
    model_attention_acts aa = {in_total, j->saved, h, lse, a};
    model_mlp_acts ma = {in_total, j->saved, h};
    if (j->mlp)
        rc = model_mlp_forward(&tp, out, &ma, in, w1, b1, w2, b2, scratch, B, T, &BD);
    else
        rc = model_attention_forward(&tp, out, &aa, in, w1, b1, w2, b2, &DROP, scratch, B, T, &BD);
    T_CHECKF(rc == MTC_OK, "%s", mtc_error_detail());
    if (j->sp)
        tt_seq(want, j->out, B, T, C, p, r);
    else
        memcpy(want, j->out, nloc * 4);
    tt_cmp(WHAT("out"), r, out, want, nloc, p == 1);
    if (j->sp && !j->saved) fill_const(in_total, (size_t)N * C, NAN);
    fill_const(dw1, (size_t)W1_p * C, DW0), fill_const(db1, W1_p, DW0);
    fill_const(dw2, (size_t)C * IN2_p, DW0), fill_const(db2, C, j->sp ? 0.0f : DW0);
    if (j->mlp)
        rc = model_mlp_backward(&tp, din, dw1, db1, dw2, db2, dout, &ma, in, w1, w2, scratch, B, T,
                                &BD);
    else
        rc = model_attention_backward(&tp, din, dw1, db1, dw2, db2, dout, &aa, in, w1, w2, &DROP,
                                      scratch, B, T, &BD);
    T_CHECKF(rc == MTC_OK, "%s", mtc_error_detail());
    if (j->sp)
        tt_seq(want, j->din, B, T, C, p, r);
    else
        memcpy(want, j->din, nloc * 4);
    tt_cmp(WHAT("din"), r, din, want, nloc, p == 1);
    for (int i = 0; i < W1_p; i++) {
        size_t g = j->mlp ? (size_t)r * W1_p + i : qkv_global_row(i, p, r);
        memcpy(want + (size_t)i * C, j->dw1 + g * C, C * 4);
        want[(size_t)W1_p * C + i] = j->db1[g];
    }
    tt_cmp(WHAT("dw c_attn/c_fc"), r, dw1, want, (size_t)W1_p * C, p == 1);
    tt_cmp(WHAT("db c_attn/c_fc"), r, db1, want + (size_t)W1_p * C, W1_p, p == 1);
    tt_cols(want, j->dw2, C, IN2, p, r);
    tt_cmp(WHAT("dw c_proj"), r, dw2, want, (size_t)C * IN2_p, p == 1);
    if (j->sp) { /* sequence-parallel bias: partial sums, finalised over TP */
        T_CHECK(mtc_all_reduce(db2, db2, C, MTC_DTYPE_F32, MTC_OP_SUM, comm) == MTC_OK);
        for (int c = 0; c < C; c++)
            db2[c] += DW0;
    }
    tt_cmp(WHAT("db c_proj"), r, db2, j->db2, C, p == 1 && !j->sp);
#undef WHAT
    free(in), free(out), free(dout), free(din), free(want), free(w1), free(b1), free(w2);
    free(b2), free(dw1), free(db1), free(dw2), free(db2), free(in_total), free(h), free(a);
    free(lse), free(scratch);
}

/* ---- tied LM head: embedding -> head (same wte) -> cross-entropy --------------------- */

enum { VP = 24, VR = 21, MAXT = 16, S_WTE = 40, S_WPE };

typedef struct {
    int sp;
    int *tok, *tgt;
    float *losses, *dwte, *dwpe;
} head_job;

static void head_serial(head_job *h) {
    int N = B * T;
    h->tok = calloc(N, sizeof(int)), h->tgt = calloc(N, sizeof(int));
    for (int n = 0; n < N; n++) {
        h->tok[n] = (int)(mtc_rng_u32(TP_SEED, 11, n) % VR);
        h->tgt[n] = (int)(mtc_rng_u32(TP_SEED, 12, n) % VR);
    }
    float *wte = tt_alloc((size_t)VP * C), *wpe = tt_alloc((size_t)MAXT * C);
    float *x = tt_alloc((size_t)N * C), *dx = tt_alloc((size_t)N * C);
    float *logits = tt_alloc((size_t)N * VP);
    h->losses = tt_alloc(N), h->dwte = tt_alloc((size_t)VP * C),
    h->dwpe = tt_alloc((size_t)MAXT * C);
    tt_fill(wte, (size_t)VP * C, S_WTE, 0, 0.5f);
    tt_fill(wpe, (size_t)MAXT * C, S_WPE, 0, 0.5f);
    nn_token_embedding_forward(x, h->tok, wte, 0, VP, N, C);
    nn_position_embedding_forward(x, wpe, NULL, B, T, C);
    nn_linear_forward(NULL, logits, x, wte, NULL, N, C, VP);
    nn_softmax_xent_forward(NULL, h->losses, logits, h->tgt, N, VR, VP);
    nn_softmax_xent_backward(NULL, logits, h->tgt, 1.0f / N, N, VR, VP);
    nn_linear_backward(NULL, dx, h->dwte, NULL, logits, x, wte, N, C, VP);
    nn_token_embedding_backward(h->dwte, dx, h->tok, 0, VP, N, C);
    nn_position_embedding_backward(h->dwpe, dx, NULL, B, T, C);
    free(wte), free(wpe), free(x), free(dx), free(logits);
}

static mtc_result_t head_rank(mtc_comm_t comm, void *arg) {
    const head_job *h = arg;
    int p = tp_size(comm), r = tp_rank(comm), N = B * T, V_p = VP / p;
    int T_loc = h->sp ? T / p : T;
    tp_ctx tp = {comm, NULL, h->sp, NULL, NULL};
    size_t nloc = (size_t)B * T_loc * C;
    float *wte = tt_alloc((size_t)V_p * C), *wpe = tt_alloc((size_t)MAXT * C);
    float *x = tt_alloc(nloc), *dx = tt_alloc(nloc), *x_total = tt_alloc((size_t)N * C);
    float *logits = tt_alloc((size_t)N * V_p), *losses = tt_alloc(N);
    float *dwte = tt_alloc((size_t)V_p * C), *dwpe = tt_alloc((size_t)MAXT * C);
    size_t ns = tp_vocab_embedding_scratch_floats(&tp, B, T, C);
    size_t nc = tp_column_linear_scratch_floats(&tp, 0, B, T, C, VP);
    float *scratch = tt_alloc((ns > nc ? ns : nc) + 3 * (size_t)N);
    char what[64];
    tt_fill(wte, (size_t)V_p * C, S_WTE, (uint64_t)r * V_p * C, 0.5f);
    tt_fill(wpe, (size_t)MAXT * C, S_WPE, 0, 0.5f);
    mtc_result_t rc =
        tp_vocab_embedding_forward(&tp, x, h->tok, wte, wpe, NULL, scratch, B, T, C, VP);
    if (rc == MTC_OK)
        rc = tp_column_linear_forward(&tp, logits, x_total, x, wte, NULL, scratch, 0, B, T, C, VP);
    if (rc == MTC_OK) rc = tp_vocab_xent_forward(&tp, losses, logits, h->tgt, scratch, N, VR, VP);
    if (rc == MTC_OK) rc = tp_vocab_xent_backward(&tp, logits, h->tgt, 1.0f / N, NULL, N, VR, VP);
    if (rc == MTC_OK)
        rc = tp_column_linear_backward(&tp, dx, dwte, NULL, logits, x_total, 1, x, wte, scratch, 0,
                                       B, T, C, VP);
    if (rc == MTC_OK)
        rc = tp_vocab_embedding_backward(&tp, dwte, dwpe, dx, h->tok, NULL, scratch, B, T, C, VP);
    T_CHECKF(rc == MTC_OK, "%s", mtc_error_detail());
    snprintf(what, sizeof what, "head losses tp=%d sp=%d", p, h->sp);
    tt_cmp(what, r, losses, h->losses, N, 0);
    snprintf(what, sizeof what, "head dwte (tied) tp=%d sp=%d", p, h->sp);
    tt_cmp(what, r, dwte, h->dwte + (size_t)r * V_p * C, (size_t)V_p * C, 0);
    snprintf(what, sizeof what, "head dwpe tp=%d sp=%d", p, h->sp);
    tt_cmp(what, r, dwpe, h->dwpe, (size_t)MAXT * C, 0);
    free(wte), free(wpe), free(x), free(dx), free(x_total), free(logits), free(losses);
    free(dwte), free(dwpe), free(scratch);
    return MTC_OK;
}

static mtc_result_t rank_main(mtc_comm_t world, void *arg) {
    const job *j = arg;
    if (!j->groups) {
        block_rank(j, world);
        return MTC_OK;
    }
    int w = mtc_comm_rank(world);
    mtc_comm_t tp = NULL;
    MTC_CHECK(mtc_comm_split(world, w / 2, w, "TENSOR_MODEL_PARALLEL_GROUP", &tp));
    block_rank(j, tp);
    mtc_comm_free(tp);
    return MTC_OK;
}

static void free_job(job *j) {
    free(j->x), free(j->out), free(j->dout), free(j->din), free(j->w1), free(j->b1);
    free(j->w2), free(j->b2), free(j->dw1), free(j->db1), free(j->dw2), free(j->db2);
}

int main(void) {
    for (int mlp = 0; mlp < 2; mlp++)
        for (int sp = 0; sp < 2; sp++)
            for (int saved = 0; saved < 1 + sp; saved++) {
                job j = {mlp,  sp,   saved, 0,    NULL, NULL, NULL, NULL,
                         NULL, NULL, NULL,  NULL, NULL, NULL, NULL, NULL};
                serial(&j);
                for (int p = 1; p <= 4; p++) {
                    mtc_result_t rc = tt_launch(p, rank_main, &j);
                    T_CHECKF(rc == MTC_OK, "tp=%d: %s", p, mtc_error_detail());
                }
                if (mlp) { /* two TP groups of 2 in a world of 4 */
                    j.groups = 1;
                    mtc_result_t rc = tt_launch(4, rank_main, &j);
                    T_CHECKF(rc == MTC_OK, "groups: %s", mtc_error_detail());
                }
                free_job(&j);
            }
    for (int sp = 0; sp < 2; sp++) {
        head_job h = {sp, NULL, NULL, NULL, NULL, NULL};
        head_serial(&h);
        for (int p = 1; p <= 4; p++) {
            mtc_result_t rc = tt_launch(p, head_rank, &h);
            T_CHECKF(rc == MTC_OK, "head tp=%d: %s", p, mtc_error_detail());
        }
        free(h.tok), free(h.tgt), free(h.losses), free(h.dwte), free(h.dwpe);
    }
    return T_DONE();
}
