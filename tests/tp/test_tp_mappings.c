/* tests/tp/test_tp_mappings.c - tp/mappings.h on thread-ranks, with data
 * that is a formula of (batch row, position, channel) so every expected
 * value is exact:
 *   x(b, t, c) = g * ((b*100 + t)*100 + c + 1), g = 1 + TP-group index
 * and rank r contributes (r+1)*x to reductions (sum over ranks: p(p+1)/2 x).
 * Checks every primitive and every forward/backward pair for tp in
 * {1, 2, 3, 4} and B in {1, 3} (B = 1 takes the no-permutation path), the
 * non-blocking all-gather and reduce-scatter, two TP groups of 2 inside a world of 4 (no
 * cross-talk), and the refusals (T or C not divisible, missing scratch),
 * after which the communicator must still work. */
#include <stdio.h>

#include "tp/mappings.h"
#include "tp_test.h"

static float xval(int g, int b, int t, int c) {
    return (float)g * (float)((b * 100 + t) * 100 + c + 1);
}

/* full (B, T, C) = k * x */
static void fill_x(float *full, int B, int T, int C, int g, float k) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                full[((size_t)b * T + t) * C + c] = k * xval(g, b, t, c);
}

static void run_mappings(mtc_comm_t tp, int B, int T, int C, int g) {
    int p = tp_size(tp), r = tp_rank(tp);
    size_t n = (size_t)B * T * C, nl = n / p;
    float *x = tt_alloc(n), *xr = tt_alloc(n), *sumx = tt_alloc(n);
    float *out = tt_alloc(n), *loc = tt_alloc(nl), *want = tt_alloc(nl);
    size_t ns = tp_seq_scratch_floats(B, T, C, p), nls = tp_last_scratch_floats(B * T, C, p);
    float *scratch = tt_alloc(ns > nls ? ns : nls);
    char what[128];
    fill_x(x, B, T, C, g, 1.0f);
    fill_x(xr, B, T, C, g, (float)(r + 1));
    fill_x(sumx, B, T, C, g, (float)(p * (p + 1) / 2));
#define WHAT(s) (snprintf(what, sizeof what, "%s tp=%d B=%d g=%d", s, p, B, g), what)

    /* sequence: split, all-gather, reduce-scatter (blocking and started) */
    T_CHECK(tp_seq_split(loc, x, B, T, C, tp) == MTC_OK);
    tt_seq(want, x, B, T, C, p, r);
    tt_cmp(WHAT("seq_split"), r, loc, want, nl, 1);
    memset(out, 0, n * sizeof(float));
    T_CHECK(tp_seq_all_gather(out, loc, scratch, B, T, C, tp) == MTC_OK);
    tt_cmp(WHAT("seq_all_gather"), r, out, x, n, 1);
    tt_seq(loc, x, B, T, C, p, r);
    memset(out, 0, n * sizeof(float));
    mtc_request_t agreq = NULL;
    T_CHECK(tp_seq_all_gather_start(out, loc, scratch, B, T, C, tp, &agreq) == MTC_OK);
    T_CHECK(tp_seq_all_gather_finish(out, scratch, B, T, C, tp, &agreq) == MTC_OK && !agreq);
    tt_cmp(WHAT("seq_all_gather_start/finish"), r, out, x, n, 1);
    T_CHECK(tp_seq_reduce_scatter(loc, xr, scratch, B, T, C, tp) == MTC_OK);
    tt_seq(want, sumx, B, T, C, p, r);
    tt_cmp(WHAT("seq_reduce_scatter"), r, loc, want, nl, 1);
    memset(loc, 0, nl * sizeof(float));
    mtc_request_t req = NULL;
    T_CHECK(tp_seq_reduce_scatter_start(loc, xr, scratch, B, T, C, tp, &req) == MTC_OK);
    T_CHECK(mtc_request_wait(&req) == MTC_OK && req == NULL);
    tt_cmp(WHAT("seq_reduce_scatter_start"), r, loc, want, nl, 1);

    /* last dim over N = B*T rows */
    int N = B * T;
    T_CHECK(tp_last_split(loc, x, N, C, tp) == MTC_OK);
    tt_cols(want, x, N, C, p, r);
    tt_cmp(WHAT("last_split"), r, loc, want, nl, 1);
    memset(out, 0, n * sizeof(float));
    T_CHECK(tp_last_all_gather(out, loc, scratch, N, C, tp) == MTC_OK);
    tt_cmp(WHAT("last_all_gather"), r, out, x, n, 1);

    /* copy_to: identity forward (also in place), all-reduce backward */
    T_CHECK(tp_copy_to_region_forward(out, xr, n, tp) == MTC_OK);
    tt_cmp(WHAT("copy_to fwd"), r, out, xr, n, 1);
    T_CHECK(tp_copy_to_region_forward(out, out, n, tp) == MTC_OK);
    tt_cmp(WHAT("copy_to fwd in place"), r, out, xr, n, 1);
    T_CHECK(tp_copy_to_region_backward(out, xr, n, tp) == MTC_OK);
    tt_cmp(WHAT("copy_to bwd"), r, out, sumx, n, 1);
    /* reduce_from: all-reduce forward (in place), identity backward */
    memcpy(out, xr, n * sizeof(float));
    T_CHECK(tp_reduce_from_region_forward(out, out, n, tp) == MTC_OK);
    tt_cmp(WHAT("reduce_from fwd"), r, out, sumx, n, 1);
    T_CHECK(tp_reduce_from_region_backward(out, xr, n, tp) == MTC_OK);
    tt_cmp(WHAT("reduce_from bwd"), r, out, xr, n, 1);

    /* scatter_to / gather_from (last dim) */
    T_CHECK(tp_scatter_to_region_forward(loc, x, N, C, tp) == MTC_OK);
    tt_cols(want, x, N, C, p, r);
    tt_cmp(WHAT("scatter_to fwd"), r, loc, want, nl, 1);
    T_CHECK(tp_scatter_to_region_backward(out, loc, scratch, N, C, tp) == MTC_OK);
    tt_cmp(WHAT("scatter_to bwd"), r, out, x, n, 1);
    T_CHECK(tp_gather_from_region_forward(out, want, scratch, N, C, tp) == MTC_OK);
    tt_cmp(WHAT("gather_from fwd"), r, out, x, n, 1);
    T_CHECK(tp_gather_from_region_backward(loc, x, N, C, tp) == MTC_OK);
    tt_cmp(WHAT("gather_from bwd"), r, loc, want, nl, 1);

    /* sequence-parallel pairs */
    tt_seq(want, x, B, T, C, p, r);
    T_CHECK(tp_scatter_to_seq_forward(loc, x, B, T, C, tp) == MTC_OK);
    tt_cmp(WHAT("scatter_to_seq fwd"), r, loc, want, nl, 1);
    T_CHECK(tp_scatter_to_seq_backward(out, loc, scratch, B, T, C, tp) == MTC_OK);
    tt_cmp(WHAT("scatter_to_seq bwd"), r, out, x, n, 1);
    T_CHECK(tp_gather_from_seq_forward(out, want, scratch, B, T, C, tp) == MTC_OK);
    tt_cmp(WHAT("gather_from_seq fwd"), r, out, x, n, 1);
    T_CHECK(tp_gather_from_seq_backward(loc, xr, scratch, B, T, C, 0, tp) == MTC_OK);
    float *want_r = tt_alloc(nl);
    tt_seq(want_r, xr, B, T, C, p, r);
    tt_cmp(WHAT("gather_from_seq bwd split"), r, loc, want_r, nl, 1);
    T_CHECK(tp_gather_from_seq_backward(loc, xr, scratch, B, T, C, 1, tp) == MTC_OK);
    tt_seq(want_r, sumx, B, T, C, p, r);
    tt_cmp(WHAT("gather_from_seq bwd reduce-scatter"), r, loc, want_r, nl, 1);
    T_CHECK(tp_reduce_scatter_to_seq_forward(loc, xr, scratch, B, T, C, tp) == MTC_OK);
    tt_cmp(WHAT("reduce_scatter_to_seq fwd"), r, loc, want_r, nl, 1);
    T_CHECK(tp_reduce_scatter_to_seq_backward(out, want, scratch, B, T, C, tp) == MTC_OK);
    tt_cmp(WHAT("reduce_scatter_to_seq bwd"), r, out, x, n, 1);
    free(want_r);

    /* refusals: all ranks fail alike before communicating */
    if (p > 1) {
        T_CHECK(tp_seq_all_gather(out, loc, scratch, B, T + 1, C, tp) == MTC_ERR_INVALID_ARGUMENT);
        T_CHECK(tp_last_split(loc, x, N, C + 1, tp) == MTC_ERR_INVALID_ARGUMENT);
        T_CHECK(strstr(mtc_error_detail(), "tensor-model-parallel-size") != NULL);
        if (B > 1) {
            T_CHECK(tp_seq_reduce_scatter(loc, xr, NULL, B, T, C, tp) == MTC_ERR_INVALID_ARGUMENT);
            T_CHECK(tp_seq_all_gather(out, loc, NULL, B, T, C, tp) == MTC_ERR_INVALID_ARGUMENT);
        }
        /* the communicator is still in step */
        tt_seq(want, x, B, T, C, p, r);
        T_CHECK(tp_seq_all_gather(out, want, scratch, B, T, C, tp) == MTC_OK);
        tt_cmp(WHAT("all_gather after refusals"), r, out, x, n, 1);
    }
#undef WHAT
    free(x), free(xr), free(sumx), free(out), free(loc), free(want), free(scratch);
}

static mtc_result_t rank_main(mtc_comm_t world, void *arg) {
    (void)arg;
    for (int B = 1; B <= 3; B += 2)
        run_mappings(world, B, 12, 12, 1);
    return MTC_OK;
}

/* world of 4 = two TP groups {0,1}, {2,3}, each with its own data */
static mtc_result_t rank_groups(mtc_comm_t world, void *arg) {
    (void)arg;
    int w = mtc_comm_rank(world);
    mtc_comm_t tp = NULL;
    MTC_CHECK(mtc_comm_split(world, w / 2, w, "TENSOR_MODEL_PARALLEL_GROUP", &tp));
    run_mappings(tp, 3, 12, 12, 1 + w / 2);
    mtc_comm_free(tp);
    return MTC_OK;
}

int main(void) {
    run_mappings(NULL, 3, 12, 12, 1); /* NULL communicator = tp 1 */
    for (int p = 1; p <= 4; p++) {
        mtc_result_t rc = tt_launch(p, rank_main, NULL);
        T_CHECKF(rc == MTC_OK, "tp=%d: %s", p, mtc_error_detail());
    }
    mtc_result_t rc = tt_launch(4, rank_groups, NULL);
    T_CHECKF(rc == MTC_OK, "two groups: %s", mtc_error_detail());
    return T_DONE();
}
