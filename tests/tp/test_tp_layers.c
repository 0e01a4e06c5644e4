/* tests/tp/test_tp_layers.c - each tensor-parallel layer against its serial
 * twin (picotron's tests): for tp in {1, 2, 3, 4}, with and without
 * sequence parallelism, thread-ranks draw their weight shards from the
 * counter-based RNG by global index, run forward and backward, and check
 * their outputs and gradient shards against the serial nn kernels run on
 * the full tensors (tolerance in tp_test.h; tp = 1 must match bit for bit).
 *   column-parallel linear: gather_output on/off, SP input kept/re-gathered
 *     (the kept copy is clobbered when "re-gathered" to prove it is unused);
 *   row-parallel linear: input_is_parallel on/off, SP bias gradient partial
 *     (the sum of the ranks' partials must be the serial gradient);
 *   vocab-parallel embedding: ids outside [0, V), positions given or not,
 *     with and without wpe (SP takes the reduce-scatter path without);
 *   vocab-parallel cross-entropy vs nn_softmax_xent: padded vocabularies
 *     (including shards that are all padding), per-token scales, refusal of
 *     out-of-range targets; the fused forward_backward equal bit for bit to
 *     the two calls, and its kernels giving the same bits on 1 or 3 threads.
 * Gradients are accumulated onto non-zero starting values to check +=. */
#include <stdio.h>

#include "nn/nn.h"
#include "tp/layers.h"
#include "tp/mappings.h"
#include "tp_test.h"

enum { B = 2, T = 12, C = 24, H = 36, V = 24, MAXT = 16 };
enum { S_X = 1, S_W, S_B, S_DOUT, S_WTE, S_WPE, S_LOGITS };
#define DW0 0.5f  /* starting value of weight gradients */
#define DB0 0.25f /* starting value of bias gradients (non-SP) */

typedef struct {
    int which, sp, flag, flag2; /* layer; SP; per-layer options */
    /* serial reference */
    float *x, *out, *dout, *din, *dw, *db, *db_zero;
    int *tok, *pos;
    float *dwte, *dwpe;
    int Vreal;
    float *logits, *losses, *probs, *dlogits, *tscale;
} job;

enum { COLUMN, ROW, EMBED, XENT };

static void fill_const(float *p, size_t n, float v) {
    for (size_t k = 0; k < n; k++)
        p[k] = v;
}

/* ---- column-parallel: in (B,T,C) -> out (B,T,H), W (H, C) -------------------------- */

static void column_serial(job *j) {
    int N = B * T;
    j->x = tt_alloc((size_t)N * C), j->out = tt_alloc((size_t)N * H);
    j->dout = tt_alloc((size_t)N * H), j->din = tt_alloc((size_t)N * C);
    j->dw = tt_alloc((size_t)H * C), j->db = tt_alloc(H);
    float *w = tt_alloc((size_t)H * C), *b = tt_alloc(H);
    tt_fill(j->x, (size_t)N * C, S_X, 0, 1.0f);
    tt_fill(w, (size_t)H * C, S_W, 0, 0.3f);
    tt_fill(b, H, S_B, 0, 0.1f);
    tt_fill(j->dout, (size_t)N * H, S_DOUT, 0, 1.0f);
    fill_const(j->dw, (size_t)H * C, DW0);
    fill_const(j->db, H, DB0);
    nn_linear_forward(NULL, j->out, j->x, w, b, N, C, H);
    nn_linear_backward(NULL, j->din, j->dw, j->db, j->dout, j->x, w, N, C, H);
    free(w), free(b);
}

static void column_rank(const job *j, const tp_ctx *tp, int p, int r) {
    int N = B * T, H_p = H / p, T_loc = j->sp ? T / p : T, gather = j->flag, saved = j->flag2;
    size_t nin = (size_t)B * T_loc * C, nout = (size_t)N * (gather ? H : H_p);
    float *in = tt_alloc(nin), *in_total = tt_alloc((size_t)N * C), *out = tt_alloc(nout);
    float *w = tt_alloc((size_t)H_p * C), *b = tt_alloc(H_p), *want = tt_alloc((size_t)N * H);
    float *dout = tt_alloc(nout), *din = tt_alloc(nin);
    float *dw = tt_alloc((size_t)H_p * C), *db = tt_alloc(H_p);
    float *scratch = tt_alloc(tp_column_linear_scratch_floats(tp, gather, B, T, C, H));
    char what[96];
#define WHAT(s)                                                                                    \
    (snprintf(what, sizeof what, "column %s tp=%d sp=%d gather=%d saved=%d", s, p, j->sp, gather,  \
              saved),                                                                              \
     what)
    if (j->sp)
        tt_seq(in, j->x, B, T, C, p, r);
    else
        memcpy(in, j->x, nin * sizeof(float));
    tt_fill(w, (size_t)H_p * C, S_W, (uint64_t)r * H_p * C, 0.3f);
    tt_fill(b, H_p, S_B, (uint64_t)r * H_p, 0.1f);
    T_CHECKF(tp_column_linear_forward(tp, out, in_total, in, w, b, scratch, gather, B, T, C, H) ==
                 MTC_OK,
             "%s", mtc_error_detail());
    if (gather)
        tt_cmp(WHAT("out"), r, out, j->out, nout, p == 1);
    else {
        tt_cols(want, j->out, N, H, p, r);
        tt_cmp(WHAT("out"), r, out, want, nout, p == 1);
    }
    if (j->sp && p > 1) {
        tt_cmp(WHAT("in_total"), r, in_total, j->x, (size_t)N * C, 1);
        if (!saved) fill_const(in_total, (size_t)N * C, NAN);
    }
    if (gather)
        memcpy(dout, j->dout, nout * sizeof(float));
    else
        tt_cols(dout, j->dout, N, H, p, r);
    fill_const(dw, (size_t)H_p * C, DW0);
    fill_const(db, H_p, DB0);
    T_CHECKF(tp_column_linear_backward(tp, din, dw, db, dout, in_total, saved, in, w, scratch,
                                       gather, B, T, C, H) == MTC_OK,
             "%s", mtc_error_detail());
    if (j->sp)
        tt_seq(want, j->din, B, T, C, p, r);
    else
        memcpy(want, j->din, nin * sizeof(float));
    tt_cmp(WHAT("din"), r, din, want, nin, p == 1);
    tt_cmp(WHAT("dw"), r, dw, j->dw + (size_t)r * H_p * C, (size_t)H_p * C, p == 1);
    tt_cmp(WHAT("db"), r, db, j->db + (size_t)r * H_p, (size_t)H_p, p == 1);
#undef WHAT
    free(in), free(in_total), free(out), free(w), free(b), free(want), free(dout), free(din);
    free(dw), free(db), free(scratch);
}

/* ---- row-parallel: in (B,T,H) -> out (B,T,C), W (C, H) ------------------------------- */

static void row_serial(job *j) {
    int N = B * T;
    j->x = tt_alloc((size_t)N * H), j->out = tt_alloc((size_t)N * C);
    j->dout = tt_alloc((size_t)N * C), j->din = tt_alloc((size_t)N * H);
    j->dw = tt_alloc((size_t)C * H), j->db = tt_alloc(C), j->db_zero = tt_alloc(C);
    float *w = tt_alloc((size_t)C * H), *b = tt_alloc(C);
    tt_fill(j->x, (size_t)N * H, S_X, 0, 1.0f);
    tt_fill(w, (size_t)C * H, S_W, 0, 0.3f);
    tt_fill(b, C, S_B, 0, 0.1f);
    tt_fill(j->dout, (size_t)N * C, S_DOUT, 0, 1.0f);
    fill_const(j->dw, (size_t)C * H, DW0);
    fill_const(j->db, C, DB0);
    nn_linear_forward(NULL, j->out, j->x, w, b, N, H, C);
    nn_linear_backward(NULL, j->din, j->dw, j->db, j->dout, j->x, w, N, H, C);
    nn_linear_backward(NULL, NULL, NULL, j->db_zero, j->dout, NULL, NULL, N, H, C);
    free(w), free(b);
}

static void row_rank(const job *j, const tp_ctx *tp, mtc_comm_t comm, int p, int r) {
    int N = B * T, H_p = H / p, T_loc = j->sp ? T / p : T, iip = j->flag;
    size_t nin = (size_t)N * (iip ? H_p : H), nout = (size_t)B * T_loc * C;
    float *in = tt_alloc(nin), *out = tt_alloc(nout), *want = tt_alloc((size_t)N * H);
    float *w = tt_alloc((size_t)C * H_p), *b = tt_alloc(C);
    float *dout = tt_alloc(nout), *din = tt_alloc(nin), *dw = tt_alloc((size_t)C * H_p);
    float *db = tt_alloc(C);
    float *scratch = tt_alloc(tp_row_linear_scratch_floats(tp, iip, B, T, H, C));
    char what[96];
#define WHAT(s) (snprintf(what, sizeof what, "row %s tp=%d sp=%d iip=%d", s, p, j->sp, iip), what)
    if (iip)
        tt_cols(in, j->x, N, H, p, r);
    else
        memcpy(in, j->x, nin * sizeof(float));
    tt_fill_cols(w, C, H, p, r, S_W, 0.3f);
    tt_fill(b, C, S_B, 0, 0.1f);
    T_CHECKF(tp_row_linear_forward(tp, out, in, w, b, scratch, iip, B, T, H, C) == MTC_OK, "%s",
             mtc_error_detail());
    if (j->sp)
        tt_seq(want, j->out, B, T, C, p, r);
    else
        memcpy(want, j->out, nout * sizeof(float));
    tt_cmp(WHAT("out"), r, out, want, nout, p == 1);
    if (j->sp)
        tt_seq(dout, j->dout, B, T, C, p, r);
    else
        memcpy(dout, j->dout, nout * sizeof(float));
    fill_const(dw, (size_t)C * H_p, DW0);
    fill_const(db, C, j->sp ? 0.0f : DB0);
    T_CHECKF(tp_row_linear_backward(tp, din, dw, db, dout, in, w, scratch, iip, B, T, H, C) ==
                 MTC_OK,
             "%s", mtc_error_detail());
    if (iip)
        tt_cols(want, j->din, N, H, p, r);
    else
        memcpy(want, j->din, nin * sizeof(float));
    tt_cmp(WHAT("din"), r, din, want, nin, p == 1);
    tt_cols(want, j->dw, C, H, p, r);
    tt_cmp(WHAT("dw"), r, dw, want, (size_t)C * H_p, p == 1);
    if (j->sp) { /* partial per rank; gradient finalisation sums them over TP */
        T_CHECK(mtc_all_reduce(db, db, C, MTC_DTYPE_F32, MTC_OP_SUM, comm) == MTC_OK);
        tt_cmp(WHAT("db (sum of partials)"), r, db, j->db_zero, C, p == 1);
    } else
        tt_cmp(WHAT("db"), r, db, j->db, C, p == 1);
    if (j->sp && p > 1) /* SP without input_is_parallel is refused, as in Megatron */
        T_CHECK(tp_row_linear_forward(tp, out, in, w, b, scratch, 0, B, T, H, C) ==
                MTC_ERR_INVALID_ARGUMENT);
#undef WHAT
    free(in), free(out), free(want), free(w), free(b), free(dout), free(din), free(dw), free(db);
    free(scratch);
}

/* ---- vocab-parallel embedding: tokens (B,T), wte (V,C), wpe (MAXT,C) ---------------- */

static void embed_serial(job *j) {
    int N = B * T, haswpe = j->flag, haspos = j->flag2;
    j->tok = calloc(N, sizeof(int)), j->pos = calloc(T, sizeof(int));
    for (int n = 0; n < N; n++) /* every 7th id is outside [0, V) */
        j->tok[n] = n % 7 == 3 ? (n % 2 ? -1 : V + n) : (int)(mtc_rng_u32(TP_SEED, 9, n) % V);
    for (int t = 0; t < T; t++)
        j->pos[t] = (t + 3) % MAXT;
    float *wte = tt_alloc((size_t)V * C), *wpe = tt_alloc((size_t)MAXT * C);
    tt_fill(wte, (size_t)V * C, S_WTE, 0, 1.0f);
    tt_fill(wpe, (size_t)MAXT * C, S_WPE, 0, 1.0f);
    j->out = tt_alloc((size_t)N * C), j->dout = tt_alloc((size_t)N * C);
    j->dwte = tt_alloc((size_t)V * C), j->dwpe = tt_alloc((size_t)MAXT * C);
    tt_fill(j->dout, (size_t)N * C, S_DOUT, 0, 1.0f);
    fill_const(j->dwte, (size_t)V * C, DW0);
    fill_const(j->dwpe, (size_t)MAXT * C, DW0);
    nn_token_embedding_forward(j->out, j->tok, wte, 0, V, N, C);
    if (haswpe) nn_position_embedding_forward(j->out, wpe, haspos ? j->pos : NULL, B, T, C);
    nn_token_embedding_backward(j->dwte, j->dout, j->tok, 0, V, N, C);
    if (haswpe) nn_position_embedding_backward(j->dwpe, j->dout, haspos ? j->pos : NULL, B, T, C);
    free(wte), free(wpe);
}

static void embed_rank(const job *j, const tp_ctx *tp, int p, int r) {
    int N = B * T, V_p = V / p, T_loc = j->sp ? T / p : T, haswpe = j->flag;
    const int *pos = j->flag2 ? j->pos : NULL;
    size_t nout = (size_t)B * T_loc * C;
    float *wte = tt_alloc((size_t)V_p * C), *wpe = tt_alloc((size_t)MAXT * C);
    float *out = tt_alloc(nout), *want = tt_alloc((size_t)N * C), *dout = tt_alloc(nout);
    float *dwte = tt_alloc((size_t)V_p * C), *dwpe = tt_alloc((size_t)MAXT * C);
    float *scratch = tt_alloc(tp_vocab_embedding_scratch_floats(tp, B, T, C));
    char what[96];
#define WHAT(s)                                                                                    \
    (snprintf(what, sizeof what, "embedding %s tp=%d sp=%d wpe=%d pos=%d", s, p, j->sp, haswpe,    \
              j->flag2),                                                                           \
     what)
    tt_fill(wte, (size_t)V_p * C, S_WTE, (uint64_t)r * V_p * C, 1.0f);
    tt_fill(wpe, (size_t)MAXT * C, S_WPE, 0, 1.0f);
    T_CHECKF(tp_vocab_embedding_forward(tp, out, j->tok, wte, haswpe ? wpe : NULL, pos, scratch, B,
                                        T, C, V) == MTC_OK,
             "%s", mtc_error_detail());
    if (j->sp)
        tt_seq(want, j->out, B, T, C, p, r);
    else
        memcpy(want, j->out, nout * sizeof(float));
    tt_cmp(WHAT("out"), r, out, want, nout, p == 1);
    if (j->sp)
        tt_seq(dout, j->dout, B, T, C, p, r);
    else
        memcpy(dout, j->dout, nout * sizeof(float));
    fill_const(dwte, (size_t)V_p * C, DW0);
    fill_const(dwpe, (size_t)MAXT * C, DW0);
    T_CHECKF(tp_vocab_embedding_backward(tp, dwte, haswpe ? dwpe : NULL, dout, j->tok, pos, scratch,
                                         B, T, C, V) == MTC_OK,
             "%s", mtc_error_detail());
    tt_cmp(WHAT("dwte"), r, dwte, j->dwte + (size_t)r * V_p * C, (size_t)V_p * C, p == 1);
    tt_cmp(WHAT("dwpe (full on every rank)"), r, dwpe, j->dwpe, (size_t)MAXT * C, p == 1);
#undef WHAT
    free(wte), free(wpe), free(out), free(want), free(dout), free(dwte), free(dwpe), free(scratch);
}

/* ---- vocab-parallel cross-entropy: logits (N, V) with j->Vreal real columns -------- */

static void xent_serial(job *j) {
    int N = B * T;
    j->tok = calloc(N, sizeof(int));
    for (int n = 0; n < N; n++)
        j->tok[n] = (int)(mtc_rng_u32(TP_SEED, 10, n) % j->Vreal);
    j->tok[0] = j->Vreal - 1; /* the last real column */
    j->logits = tt_alloc((size_t)N * V), j->probs = tt_alloc((size_t)N * V);
    j->dlogits = tt_alloc((size_t)N * V), j->losses = tt_alloc(N), j->tscale = tt_alloc(N);
    tt_fill(j->logits, (size_t)N * V, S_LOGITS, 0, 3.0f);
    for (int n = 0; n < N; n++)
        j->tscale[n] = (float)(n % 3) * 0.5f; /* 0, 0.5, 1: a loss mask with weights */
    memcpy(j->probs, j->logits, (size_t)N * V * sizeof(float));
    nn_softmax_xent_forward(NULL, j->losses, j->probs, j->tok, N, j->Vreal, V);
    memcpy(j->dlogits, j->probs, (size_t)N * V * sizeof(float));
    float scale = 1.0f / N;
    for (int n = 0; n < N; n++) /* per-token scale: one row at a time */
        nn_softmax_xent_backward(NULL, j->dlogits + (size_t)n * V, j->tok + n,
                                 j->flag ? scale * j->tscale[n] : scale, 1, j->Vreal, V);
}

static void xent_rank(const job *j, const tp_ctx *tp, int p, int r) {
    int N = B * T, V_p = V / p;
    float *x = tt_alloc((size_t)N * V_p), *want = tt_alloc((size_t)N * V_p);
    float *losses = tt_alloc(N), *scratch = tt_alloc(3 * (size_t)N);
    char what[96];
#define WHAT(s)                                                                                    \
    (snprintf(what, sizeof what, "xent %s tp=%d V=%d tscale=%d", s, p, j->Vreal, j->flag), what)
    tt_cols(x, j->logits, N, V, p, r);
    T_CHECKF(tp_vocab_xent_forward(tp, losses, x, j->tok, scratch, N, j->Vreal, V) == MTC_OK, "%s",
             mtc_error_detail());
    tt_cmp(WHAT("losses"), r, losses, j->losses, N, 0);
    tt_cols(want, j->probs, N, V, p, r);
    tt_cmp(WHAT("probs"), r, x, want, (size_t)N * V_p, 0);
    T_CHECKF(tp_vocab_xent_backward(tp, x, j->tok, 1.0f / N, j->flag ? j->tscale : NULL, N,
                                    j->Vreal, V) == MTC_OK,
             "%s", mtc_error_detail());
    tt_cols(want, j->dlogits, N, V, p, r);
    tt_cmp(WHAT("dlogits"), r, x, want, (size_t)N * V_p, 0);
    /* forward_backward in one pass: the two calls' bits */
    float *y = tt_alloc((size_t)N * V_p), *losses2 = tt_alloc(N);
    tt_cols(y, j->logits, N, V, p, r);
    T_CHECKF(tp_vocab_xent_forward_backward(tp, losses2, y, j->tok, 1.0f / N,
                                            j->flag ? j->tscale : NULL, scratch, N, j->Vreal,
                                            V) == MTC_OK,
             "%s", mtc_error_detail());
    tt_cmp(WHAT("forward_backward losses"), r, losses2, losses, N, 1);
    tt_cmp(WHAT("forward_backward dlogits"), r, y, x, (size_t)N * V_p, 1);
    free(y), free(losses2);
    /* a target outside [0, V) is refused on every rank before communicating */
    int *bad = calloc(N, sizeof(int));
    memcpy(bad, j->tok, N * sizeof(int));
    bad[N - 1] = j->Vreal;
    T_CHECK(tp_vocab_xent_forward(tp, losses, x, bad, scratch, N, j->Vreal, V) ==
            MTC_ERR_INVALID_ARGUMENT);
    free(bad);
#undef WHAT
    free(x), free(want), free(losses), free(scratch);
}

static mtc_result_t rank_main(mtc_comm_t world, void *arg) {
    const job *j = arg;
    int p = mtc_comm_size(world), r = mtc_comm_rank(world);
    tp_ctx tp = {world, NULL, j->sp, NULL, NULL};
    switch (j->which) {
    case COLUMN: column_rank(j, &tp, p, r); break;
    case ROW: row_rank(j, &tp, world, p, r); break;
    case EMBED: embed_rank(j, &tp, p, r); break;
    case XENT: xent_rank(j, &tp, p, r); break;
    }
    return MTC_OK;
}

static void run(job *j, const char *name) {
    for (int p = 1; p <= 4; p++) {
        mtc_result_t rc = tt_launch(p, rank_main, j);
        T_CHECKF(rc == MTC_OK, "%s tp=%d sp=%d: %s", name, p, j->sp, mtc_error_detail());
    }
}

static void free_job(job *j) {
    free(j->x), free(j->out), free(j->dout), free(j->din), free(j->dw), free(j->db);
    free(j->db_zero), free(j->tok), free(j->pos), free(j->dwte), free(j->dwpe);
    free(j->logits), free(j->losses), free(j->probs), free(j->dlogits), free(j->tscale);
    memset(j, 0, sizeof *j);
}

/* The local CE kernels split rows over the pool: 1 or 3 threads, same bits,
 * and the serial kernel's result (tp 1, a NULL communicator). */
static void test_xent_pool(void) {
    enum { NP = 64, VP = 2048, VR = 2000 };
    nn_pool *pool = NULL;
    T_CHECK(nn_pool_create(3, &pool) == MTC_OK);
    int *tok = calloc(NP, sizeof(int));
    for (int n = 0; n < NP; n++)
        tok[n] = (int)(mtc_rng_u32(TP_SEED, 13, n) % VR);
    float *a = tt_alloc((size_t)NP * VP), *b = tt_alloc((size_t)NP * VP);
    float *c = tt_alloc((size_t)NP * VP), *la = tt_alloc(NP), *lb = tt_alloc(NP);
    float *lc = tt_alloc(NP), *scratch = tt_alloc(3 * NP);
    tt_fill(a, (size_t)NP * VP, S_LOGITS, 0, 3.0f);
    memcpy(b, a, (size_t)NP * VP * sizeof(float));
    memcpy(c, a, (size_t)NP * VP * sizeof(float));
    tp_ctx one = {NULL, NULL, 0, NULL, NULL}, three = {NULL, pool, 0, NULL, NULL};
    T_CHECK(tp_vocab_xent_forward_backward(&one, la, a, tok, 0.5f, NULL, scratch, NP, VR, VP) ==
            MTC_OK);
    T_CHECK(tp_vocab_xent_forward_backward(&three, lb, b, tok, 0.5f, NULL, scratch, NP, VR, VP) ==
            MTC_OK);
    tt_cmp("xent pool 3 vs 1 losses", 0, lb, la, NP, 1);
    tt_cmp("xent pool 3 vs 1 dlogits", 0, b, a, (size_t)NP * VP, 1);
    nn_softmax_xent_forward_backward(NULL, lc, c, tok, 0.5f, NP, VR, VP);
    tt_cmp("xent vs nn losses", 0, la, lc, NP, 0);
    tt_cmp("xent vs nn dlogits", 0, a, c, (size_t)NP * VP, 0);
    nn_pool_free(pool);
    free(tok), free(a), free(b), free(c), free(la), free(lb), free(lc), free(scratch);
}

int main(void) {
    test_xent_pool();
    job j;
    memset(&j, 0, sizeof j);
    for (int sp = 0; sp < 2; sp++)
        for (int gather = 0; gather < 2; gather++)
            for (int saved = 0; saved < 1 + sp; saved++) {
                j.which = COLUMN, j.sp = sp, j.flag = gather, j.flag2 = saved;
                column_serial(&j);
                run(&j, "column");
                free_job(&j);
            }
    for (int sp = 0; sp < 2; sp++)
        for (int iip = sp; iip < 2; iip++) {
            j.which = ROW, j.sp = sp, j.flag = iip;
            row_serial(&j);
            run(&j, "row");
            free_job(&j);
        }
    for (int sp = 0; sp < 2; sp++)
        for (int wpe = 0; wpe < 2; wpe++)
            for (int pos = 0; pos < 1 + wpe; pos++) {
                j.which = EMBED, j.sp = sp, j.flag = wpe, j.flag2 = pos;
                embed_serial(&j);
                run(&j, "embedding");
                free_job(&j);
            }
    int vreal[] = {V, 21, 10}; /* none, some, and (tp 4) whole shards of padding */
    for (int k = 0; k < 3; k++)
        for (int ts = 0; ts < 2; ts++) {
            j.which = XENT, j.flag = ts, j.Vreal = vreal[k];
            xent_serial(&j);
            run(&j, "xent");
            free_job(&j);
        }
    return T_DONE();
}
