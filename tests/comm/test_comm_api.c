/* tests/comm/test_comm_api.c - the communicator API on shm rank-threads:
 * split/create, point-to-point, every collective through the direct
 * algorithm (and the selector's choice) for every dtype and op, counts
 * {0, 1, p-1, p, p+1, 13, ~1M}, in place and out of place, world sizes 1..8;
 * non-blocking calls overlapping computation and ordered with blocking
 * ones; bitwise determinism; communicators left unfreed are freed (and
 * their progress threads joined) when the rank function returns. Expected values are closed forms
 * of (rank, index): small integers, so every partial sum is exact in every dtype (bf16 included).
 */
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/algo.h"
#include "comm/comm.h"
#include "core/timer.h"
#include "test.h"

static int world_n;
/* Sanitizer builds (10-20x slower) run a reduced matrix: every dtype and
 * every op still, but not every pair, and fewer world sizes. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
static const int quick = 1;
#else
static const int quick = 0;
#endif

/* ---- closed-form data --------------------------------------------------------- */

static double xval(int rank, size_t i) {
    return (double)((int)(((size_t)rank + 1) * (i % 7 + 1) % 16) - 5);
}

/* op over ranks 0..n-1 of xval(r, i), as the dtype would compute it. */
static double expect_red(int n, size_t i, mtc_op_t op, mtc_dtype_t dt) {
    double acc = xval(0, i);
    for (int r = 1; r < n; r++) {
        double v = xval(r, i);
        acc = op == MTC_OP_MAX   ? (v > acc ? v : acc)
              : op == MTC_OP_MIN ? (v < acc ? v : acc)
                                 : acc + v;
    }
    if (op != MTC_OP_AVG || n == 1) return acc;
    switch (dt) {
    case MTC_DTYPE_F32: return (float)acc / (float)n;
    case MTC_DTYPE_BF16: return mtc_bf16_to_f32(mtc_f32_to_bf16((float)acc / (float)n));
    case MTC_DTYPE_I32:
    case MTC_DTYPE_I64: return (double)((int64_t)acc / n);
    default: return acc / n;
    }
}

/* ---- split / create / p2p ---------------------------------------------------------- */

static mtc_result_t t_groups(mtc_comm_t w) {
    int r = mtc_comm_rank(w), n = mtc_comm_size(w);
    mtc_comm_t c;
    /* colour by parity, keys reversed: members in decreasing world rank */
    T_CHECK(mtc_comm_split(w, r == 0 && n > 2 ? -1 : r % 2, -r, "PARITY", &c) == MTC_OK);
    if (r == 0 && n > 2) {
        T_CHECK(c == NULL);
    } else {
        int cnt = 0, pos = 0;
        for (int q = n - 1; q >= 0; q--) {
            if (q % 2 != r % 2 || (q == 0 && n > 2)) continue;
            if (q == r) pos = cnt;
            T_CHECK(mtc_comm_world_rank(c, cnt) == q);
            cnt++;
        }
        T_CHECK(mtc_comm_size(c) == cnt && mtc_comm_rank(c) == pos);
        T_CHECK(!strcmp(mtc_comm_name(c), "PARITY"));
        int64_t v = r, s = 0, want = 0;
        for (int q = 0; q < n; q++)
            want += (q % 2 == r % 2 && !(q == 0 && n > 2)) ? q : 0;
        T_CHECK(mtc_all_reduce(&v, &s, 1, MTC_DTYPE_I64, MTC_OP_SUM, c) == MTC_OK && s == want);
        /* nested: halves of the parity group */
        mtc_comm_t h;
        T_CHECK(mtc_comm_split(c, mtc_comm_rank(c) / 2, 0, "HALF", &h) == MTC_OK && h);
        if (h) {
            int expect = mtc_comm_size(c) - mtc_comm_rank(c) / 2 * 2;
            T_CHECK(mtc_comm_size(h) == (expect < 2 ? expect : 2));
            T_CHECK(mtc_comm_world_rank(h, 0) == mtc_comm_world_rank(c, mtc_comm_rank(c) / 2 * 2));
            T_CHECK(mtc_barrier(h) == MTC_OK);
        }
        mtc_comm_free(h);
    }
    mtc_comm_free(c);
    /* create: the even ranks in reverse order */
    int list[8], k = 0, want_pos = -1;
    for (int q = n - 1; q >= 0; q--)
        if (q % 2 == 0) {
            if (q == r) want_pos = k;
            list[k++] = q;
        }
    T_CHECK(mtc_comm_create(w, list, k, "EVENS", &c) == MTC_OK);
    T_CHECK((c != NULL) == (want_pos >= 0));
    if (c) {
        T_CHECK(mtc_comm_rank(c) == want_pos && mtc_comm_size(c) == k);
        int32_t one = 1, s = 0;
        T_CHECK(mtc_all_reduce(&one, &s, 1, MTC_DTYPE_I32, MTC_OP_SUM, c) == MTC_OK && s == k);
    }
    mtc_comm_free(c);
    return MTC_OK;
}

static mtc_result_t t_p2p(mtc_comm_t w) {
    int r = mtc_comm_rank(w), n = mtc_comm_size(w);
    if (n == 1) return MTC_OK;
    int32_t out[5], in[5];
    for (int i = 0; i < 5; i++)
        out[i] = r * 100 + i;
    int dst = (r + 1) % n, src = (r + n - 1) % n;
    T_CHECK(mtc_sendrecv(out, 5, dst, in, 5, src, MTC_DTYPE_I32, w) == MTC_OK);
    for (int i = 0; i < 5; i++)
        T_CHECK(in[i] == src * 100 + i);
    /* pairs: three messages arrive in order */
    int peer = r ^ 1;
    if (peer >= n) return MTC_OK;
    for (int m = 0; m < 3; m++) {
        int32_t v = r * 10 + m, got = -1;
        if (r % 2 == 0) {
            T_CHECK(mtc_send(&v, 1, MTC_DTYPE_I32, peer, w) == MTC_OK);
        } else {
            T_CHECK(mtc_recv(&got, 1, MTC_DTYPE_I32, peer, w) == MTC_OK);
            T_CHECK(got == peer * 10 + m);
        }
    }
    return MTC_OK;
}

/* ---- collectives ---------------------------------------------------------------- */

static void fill(void *buf, mtc_dtype_t dt, int rank, size_t off, size_t n) {
    for (size_t i = 0; i < n; i++)
        mtc_dtype_store(buf, dt, i, xval(rank, off + i));
}

#define CHECK_VALS(cond_each, what)                                                                \
    do {                                                                                           \
        size_t bad_ = 0;                                                                           \
        for (size_t i = 0; i < total; i++)                                                         \
            if (!(cond_each)) bad_++;                                                              \
        T_CHECKF(bad_ == 0, "%s n=%d count=%zu %s %s inplace=%d: %zu wrong", what, n, c,           \
                 mtc_dtype_name(dt), mtc_op_name(op), inplace, bad_);                              \
    } while (0)

static void t_one(mtc_comm_t w, size_t c, mtc_dtype_t dt, mtc_op_t op, int inplace, char *a,
                  char *b) {
    int r = mtc_comm_rank(w), n = mtc_comm_size(w);
    size_t es = mtc_dtype_size(dt), total;
    /* all_reduce */
    total = c;
    fill(a, dt, r, 0, c);
    char *out = inplace ? a : b;
    T_CHECK(mtc_all_reduce(a, out, c, dt, op, w) == MTC_OK);
    CHECK_VALS(mtc_dtype_load(out, dt, i) == expect_red(n, i, op, dt), "all_reduce");
    /* reduce_scatter: rank r gets block r */
    for (int p = 0; p < n; p++)
        fill(a + (size_t)p * c * es, dt, r, (size_t)p * c, c);
    out = inplace ? a + (size_t)r * c * es : b;
    T_CHECK(mtc_reduce_scatter(a, out, c, dt, op, w) == MTC_OK);
    CHECK_VALS(mtc_dtype_load(out, dt, i) == expect_red(n, (size_t)r * c + i, op, dt),
               "reduce_scatter");
    /* reduce to root */
    int root = (int)((c + 1) % (size_t)n);
    fill(a, dt, r, 0, c);
    out = inplace ? a : b;
    T_CHECK(mtc_reduce(a, r == root ? out : NULL, c, dt, op, root, w) == MTC_OK);
    if (r == root) CHECK_VALS(mtc_dtype_load(out, dt, i) == expect_red(n, i, op, dt), "reduce");
    if (op != MTC_OP_SUM) return; /* the rest does not reduce */
    /* all_gather: block p from rank p */
    total = c * (size_t)n;
    char *in = inplace ? b + (size_t)r * c * es : a;
    fill(in, dt, r, 0, c);
    T_CHECK(mtc_all_gather(in, b, c, dt, w) == MTC_OK);
    CHECK_VALS(mtc_dtype_load(b, dt, i) == xval((int)(i / (c ? c : 1)), i % (c ? c : 1)),
               "all_gather");
    /* all_to_all: block j of rank p's input is xval(p, j*c + i) */
    fill(a, dt, r, 0, total);
    T_CHECK(mtc_all_to_all(a, b, c, dt, w) == MTC_OK);
    CHECK_VALS(mtc_dtype_load(b, dt, i) ==
                   xval((int)(i / (c ? c : 1)), (size_t)r * c + i % (c ? c : 1)),
               "all_to_all");
    /* broadcast */
    total = c;
    root = (int)(c % (size_t)n);
    for (size_t i = 0; i < c; i++)
        mtc_dtype_store(a, dt, i, r == root ? xval(root, i) : -99);
    T_CHECK(mtc_broadcast(a, c, dt, root, w) == MTC_OK);
    CHECK_VALS(mtc_dtype_load(a, dt, i) == xval(root, i), "broadcast");
}

/* Uneven blocks: block p has c + p elements. */
static void t_v(mtc_comm_t w, size_t c, mtc_dtype_t dt, char *a, char *b) {
    int r = mtc_comm_rank(w), n = mtc_comm_size(w), inplace = 0;
    mtc_op_t op = MTC_OP_SUM;
    size_t es = mtc_dtype_size(dt), counts[8], displs[8], off = 0, total = 0;
    for (int p = 0; p < n; p++)
        counts[p] = c + (size_t)p, displs[p] = off + (size_t)p, off += counts[p] + (size_t)p;
    for (int p = 0; p < n; p++)
        total += counts[p];
    fill(a, dt, r, 0, total);
    T_CHECK(mtc_reduce_scatter_v(a, b, counts, dt, op, w) == MTC_OK);
    size_t mine = 0;
    for (int p = 0; p < r; p++)
        mine += counts[p];
    {
        size_t tot = total;
        total = counts[r];
        CHECK_VALS(mtc_dtype_load(b, dt, i) == expect_red(n, mine + i, op, dt), "reduce_scatter_v");
        total = tot;
    }
    /* all_gather_v into gapped displacements */
    fill(a, dt, r, 0, counts[r]);
    memset(b, 0, (off + 8) * es);
    T_CHECK(mtc_all_gather_v(a, counts[r], b, counts, displs, dt, w) == MTC_OK);
    size_t bad = 0;
    for (int p = 0; p < n; p++)
        for (size_t i = 0; i < counts[p]; i++)
            bad += mtc_dtype_load(b, dt, displs[p] + i) != xval(p, i);
    T_CHECKF(bad == 0, "all_gather_v n=%d c=%zu %s: %zu wrong", n, c, mtc_dtype_name(dt), bad);
    /* all_to_all_v: rank s sends f(s, d) = c + (s + 2d) % 3 elements to d, packed */
    size_t sc[8], rc[8], so = 0;
    for (int p = 0; p < n; p++)
        sc[p] = c + (size_t)((r + 2 * p) % 3), rc[p] = c + (size_t)((p + 2 * r) % 3);
    for (int p = 0; p < n; p++)
        fill(a + so * es, dt, r, 1000 * (size_t)p, sc[p]), so += sc[p];
    T_CHECK(mtc_all_to_all_v(a, sc, NULL, b, rc, NULL, dt, w) == MTC_OK);
    bad = 0, so = 0;
    for (int p = 0; p < n; p++) {
        for (size_t i = 0; i < rc[p]; i++)
            bad += mtc_dtype_load(b, dt, so + i) != xval(p, 1000 * (size_t)r + i);
        so += rc[p];
    }
    T_CHECKF(bad == 0, "all_to_all_v n=%d c=%zu %s: %zu wrong", n, c, mtc_dtype_name(dt), bad);
}

static mtc_result_t t_colls(mtc_comm_t w) {
    int n = mtc_comm_size(w);
    size_t counts[] = {0, 1, (size_t)n - 1, (size_t)n, (size_t)n + 1, 13, 3000};
    size_t cap = ((1u << 20) + 64) * sizeof(double);
    char *a = malloc(cap), *b = malloc(cap);
    if (!a || !b) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "test buffers");
    for (int pass = 0; pass < 2; pass++) {
        for (int cl = 0; cl < MTC_COLL_COUNT; cl++)
            mtc_comm_set_algo(w, (mtc_coll_t)cl, pass == 0 ? MTC_ALGO_DIRECT : MTC_ALGO_AUTO);
        for (int dt = 0; dt < MTC_DTYPE_COUNT; dt++)
            for (int op = 0; op < MTC_OP_COUNT; op++)
                for (size_t k = 0; k < sizeof counts / sizeof *counts; k++)
                    if (!quick || (dt + op + (int)k) % 3 == 0)
                        for (int inplace = 0; inplace < 2; inplace++)
                            t_one(w, counts[k], (mtc_dtype_t)dt, (mtc_op_t)op, inplace, a, b);
        for (int dt = 0; dt < MTC_DTYPE_COUNT; dt++) {
            t_v(w, 0, (mtc_dtype_t)dt, a, b);
            t_v(w, 5, (mtc_dtype_t)dt, a, b);
            t_v(w, quick ? 400 : 4000, (mtc_dtype_t)dt, a, b);
        }
        T_CHECK(mtc_barrier(w) == MTC_OK);
    }
    /* ~1M elements in total, f32 and bf16 sum */
    int r = mtc_comm_rank(w), inplace = 1;
    mtc_op_t op = MTC_OP_SUM;
    for (int d = 0; d < 3; d += 2) {
        mtc_dtype_t dt = (mtc_dtype_t)d;
        size_t big = quick ? 1u << 16 : 1u << 20;
        size_t es = mtc_dtype_size(dt), c = big + 3, total = c;
        fill(a, dt, r, 0, c);
        T_CHECK(mtc_all_reduce(a, a, c, dt, op, w) == MTC_OK);
        CHECK_VALS(mtc_dtype_load(a, dt, i) == expect_red(n, i, op, dt), "all_reduce 1M");
        c = big / (size_t)n, total = c;
        fill(a, dt, r, 0, c * (size_t)n);
        T_CHECK(mtc_reduce_scatter(a, b, c, dt, op, w) == MTC_OK);
        CHECK_VALS(mtc_dtype_load(b, dt, i) == expect_red(n, (size_t)r * c + i, op, dt),
                   "reduce_scatter 1M");
        total = c * (size_t)n;
        fill(b + (size_t)r * c * es, dt, r, 0, c);
        T_CHECK(mtc_all_gather(b + (size_t)r * c * es, b, c, dt, w) == MTC_OK);
        CHECK_VALS(mtc_dtype_load(b, dt, i) == xval((int)(i / c), i % c), "all_gather 1M");
    }
    if (!quick) { /* 8 MiB and more: outputs streamed (algo_direct.c), misaligned by 4 B */
        mtc_dtype_t dt = MTC_DTYPE_F32;
        size_t c = (2u << 20) + 3, total = c;
        float *x = (float *)a + 1;
        fill(x, dt, r, 0, c);
        T_CHECK(mtc_all_reduce(x, x, c, dt, op, w) == MTC_OK);
        CHECK_VALS(mtc_dtype_load(x, dt, i) == expect_red(n, i, op, dt), "all_reduce 8M");
        c = ((2u << 20) + 3 * (size_t)n) / (size_t)n, total = c * (size_t)n;
        fill(b, dt, r, 0, c);
        T_CHECK(mtc_all_gather(b, x, c, dt, w) == MTC_OK);
        CHECK_VALS(mtc_dtype_load(x, dt, i) == xval((int)(i / c), i % c), "all_gather 8M");
    }
    free(a), free(b);
    return MTC_OK;
}

/* Sub-communicators a rank leaves behind (one with a progress thread) are
 * freed with the world when the rank function returns. */
static mtc_result_t t_leftover(mtc_comm_t w, void *arg) {
    (void)arg;
    mtc_comm_t half = NULL, again = NULL;
    int r = mtc_comm_rank(w);
    MTC_CHECK(mtc_comm_split(w, r % 2, r, "LEFT_BEHIND", &half));
    int32_t one = 1, sum = 0;
    mtc_request_t req;
    MTC_CHECK(mtc_all_reduce_start(&one, &sum, 1, MTC_DTYPE_I32, MTC_OP_SUM, half, &req));
    MTC_CHECK(mtc_request_wait(&req));
    T_CHECK(sum == mtc_comm_size(half));
    MTC_CHECK(mtc_comm_split(half, 0, r, "LEFT_BEHIND_TOO", &again));
    return MTC_OK; /* neither freed */
}

/* comm_copy's vector path (dst - src mod 4096 in [1, 63]) and memcpy path
 * copy exactly the bytes asked for, whatever the sizes and offsets. */
static void t_copy(void) {
    size_t sizes[] = {0, 5, 2047, 2048, 4096 + 7, 70000};
    size_t deltas[] = {0, 1, 16, 63, 64, 4095};
    size_t cap = 70000 + 8192 + 64;
    unsigned char *src = malloc(cap), *dst = malloc(cap + 4096);
    for (size_t i = 0; i < cap; i++)
        src[i] = (unsigned char)(i * 7 + 3);
    for (size_t a = 0; a < sizeof sizes / sizeof *sizes; a++)
        for (size_t b = 0; b < sizeof deltas / sizeof *deltas; b++) {
            size_t n = sizes[a], so = 5;
            /* place dst so that (dst - src) mod 4096 == delta */
            uintptr_t want = ((uintptr_t)(src + so) + deltas[b]) & 4095;
            size_t doff = (want - ((uintptr_t)dst & 4095)) & 4095;
            memset(dst, 0xEE, cap + 4096);
            comm_copy(dst + doff, src + so, n);
            size_t bad = 0;
            for (size_t i = 0; i < n; i++)
                bad += dst[doff + i] != (unsigned char)((i + so) * 7 + 3);
            bad += doff > 0 && dst[doff - 1] != 0xEE;
            bad += dst[doff + n] != 0xEE;
            T_CHECKF(bad == 0, "comm_copy of %zu bytes, delta %zu: %zu bad bytes", n, deltas[b],
                     bad);
        }
    free(src), free(dst);
}

static int thread_count(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int n = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1) break;
    if (f) fclose(f);
    return n;
}

/* ---- non-blocking and determinism ----------------------------------------------------- */

static mtc_result_t t_nonblocking(mtc_comm_t w) {
    int r = mtc_comm_rank(w), n = mtc_comm_size(w);
    size_t c = quick ? 10000 : 100000;
    float *x = malloc(c * sizeof *x), *y = malloc(c * sizeof *y), *z = malloc(c * sizeof *z);
    float *g = malloc((size_t)n * 64 * sizeof *g);
    for (size_t i = 0; i < c; i++)
        x[i] = (float)xval(r, i), y[i] = (float)(r + 1);
    float mine[64];
    for (int i = 0; i < 64; i++)
        mine[i] = (float)(r * 64 + i);
    mtc_request_t q1, q2, q3;
    T_CHECK(mtc_all_reduce_start(x, x, c, MTC_DTYPE_F32, MTC_OP_SUM, w, &q1) == MTC_OK);
    T_CHECK(mtc_all_gather_start(mine, g, 64, MTC_DTYPE_F32, w, &q2) == MTC_OK);
    T_CHECK(mtc_reduce_scatter_start(y, z, c / (size_t)n, MTC_DTYPE_F32, MTC_OP_MAX, w, &q3) ==
            MTC_OK);
    volatile double acc = 0; /* compute meanwhile */
    for (int i = 0; i < 200000; i++)
        acc += i * 0.5;
    int done = 0;
    mtc_result_t trc = MTC_OK;
    while (!done && trc == MTC_OK)
        trc = mtc_request_test(q2, &done), sched_yield();
    T_CHECK(trc == MTC_OK && done);
    /* blocking call goes behind the pending ones: it sees x already reduced */
    float *s = malloc(c * sizeof *s);
    T_CHECK(mtc_all_reduce(x, s, c, MTC_DTYPE_F32, MTC_OP_SUM, w) == MTC_OK);
    T_CHECK(mtc_request_wait(&q3) == MTC_OK && q3 == NULL);
    T_CHECK(mtc_request_wait(&q1) == MTC_OK && mtc_request_wait(&q2) == MTC_OK);
    size_t bad = 0;
    for (size_t i = 0; i < c; i++) {
        bad += x[i] != (float)expect_red(n, i, MTC_OP_SUM, MTC_DTYPE_F32);
        bad += s[i] != (float)(n * expect_red(n, i, MTC_OP_SUM, MTC_DTYPE_F32));
    }
    for (size_t i = 0; i < c / (size_t)n; i++)
        bad += z[i] != (float)n;
    for (int i = 0; i < 64 * n; i++)
        bad += g[i] != (float)i;
    T_CHECKF(bad == 0, "non-blocking n=%d: %zu wrong", n, bad);
    /* all_to_all_v_start as a ring hop (the CP ring): 64 floats to r+1 from
     * r-1, twice in flight at once, rank r sending r*1000 + i */
    size_t hs[2][16] = {{0}}, hr[2][16] = {{0}};
    float hop_in[2][64], hop_out[2][64];
    mtc_request_t hq[2];
    for (int h = 0; h < 2 && n <= 16; h++) {
        for (int i = 0; i < 64; i++)
            hop_in[h][i] = (float)(r * 1000 + h * 100 + i), hop_out[h][i] = -1;
        hs[h][(r + 1) % n] = 64, hr[h][(r - 1 + n) % n] = 64;
        T_CHECK(mtc_all_to_all_v_start(hop_in[h], hs[h], NULL, hop_out[h], hr[h], NULL,
                                       MTC_DTYPE_F32, w, &hq[h]) == MTC_OK);
    }
    for (int h = 0; h < 2 && n <= 16; h++) {
        T_CHECK(mtc_request_wait(&hq[h]) == MTC_OK);
        int from = (r - 1 + n) % n;
        for (int i = 0; i < 64; i++)
            bad += hop_out[h][i] != (float)(from * 1000 + h * 100 + i);
    }
    T_CHECKF(bad == 0, "all_to_all_v_start ring hop n=%d: %zu wrong", n, bad);
    /* overlap across communicators: a queued all-reduce on one (progress
     * thread) while the rank runs blocking collectives on another */
    mtc_comm_t a, b2;
    T_CHECK(mtc_comm_split(w, 0, r, "DP", &a) == MTC_OK);
    T_CHECK(mtc_comm_split(w, r % 2, r, "TP", &b2) == MTC_OK);
    for (size_t i = 0; i < c; i++)
        x[i] = (float)xval(r, i);
    T_CHECK(mtc_all_reduce_start(x, x, c, MTC_DTYPE_F32, MTC_OP_SUM, a, &q1) == MTC_OK);
    int64_t one = 1, cnt = 0;
    for (int k = 0; k < 20; k++)
        T_CHECK(mtc_all_reduce(&one, &cnt, 1, MTC_DTYPE_I64, MTC_OP_SUM, b2) == MTC_OK);
    T_CHECK(cnt == mtc_comm_size(b2));
    T_CHECK(mtc_request_wait(&q1) == MTC_OK);
    bad = 0;
    for (size_t i = 0; i < c; i++)
        bad += x[i] != (float)expect_red(n, i, MTC_OP_SUM, MTC_DTYPE_F32);
    T_CHECKF(bad == 0, "overlap across communicators n=%d: %zu wrong", n, bad);
    mtc_comm_free(a);
    mtc_comm_free(b2);
    free(x), free(y), free(z), free(g), free(s);
    return MTC_OK;
}

static float *det_results[8][2];

static mtc_result_t t_determinism(mtc_comm_t w) {
    int r = mtc_comm_rank(w), n = mtc_comm_size(w);
    size_t c = quick ? 5001 : 50001;
    float *in = malloc(c * sizeof *in);
    for (size_t i = 0; i < c; i++)
        in[i] = sinf((float)(r * 7919 + (int)i)) * 1e3f + 1e-3f * (float)i;
    for (int k = 0; k < 2; k++) {
        det_results[r][k] = malloc(c * sizeof(float));
        T_CHECK(mtc_all_reduce(in, det_results[r][k], c, MTC_DTYPE_F32, MTC_OP_SUM, w) == MTC_OK);
    }
    T_CHECK(mtc_barrier(w) == MTC_OK);
    if (r == 0) {
        int same = 1;
        for (int p = 0; p < n; p++)
            for (int k = 0; k < 2; k++)
                same &= !memcmp(det_results[p][k], det_results[0][0], c * sizeof(float));
        T_CHECKF(same, "all_reduce not bitwise identical across ranks/runs (n=%d)", n);
    }
    T_CHECK(mtc_barrier(w) == MTC_OK);
    for (int k = 0; k < 2; k++)
        free(det_results[r][k]);
    free(in);
    return MTC_OK;
}

static mtc_result_t rank_main(mtc_comm_t w, void *arg) {
    (void)arg;
    MTC_CHECK(t_groups(w));
    MTC_CHECK(t_p2p(w));
    MTC_CHECK(t_colls(w));
    MTC_CHECK(t_nonblocking(w));
    MTC_CHECK(t_determinism(w));
    if (mtc_comm_size(w) > 1) {
        T_CHECK(mtc_comm_choose(w, MTC_COLL_ALL_REDUCE, 8, MTC_DTYPE_F32) == MTC_ALGO_DIRECT);
        /* on shm, direct moves each byte between cores once: 3.5-5x ring's
         * bandwidth measured for all-gather of 256 KiB-4 MiB on 2 ranks */
        for (size_t c = 1u << 16; c <= 1u << 20; c <<= 2)
            T_CHECKF(mtc_comm_choose(w, MTC_COLL_ALL_GATHER, c / (size_t)mtc_comm_size(w),
                                     MTC_DTYPE_F32) == MTC_ALGO_DIRECT,
                     "all_gather of %zu floats", c);
    }
    return MTC_OK;
}

int main(void) {
    for (world_n = 1; world_n <= 8; world_n += quick && world_n > 2 ? 2 : 1) {
        mtc_launch_opts o = {
            .backend = MTC_BACKEND_SHM, .world_size = world_n, .timeout_s = 120, .pin_threads = -1};
        double t0 = mtc_time_s();
        mtc_result_t rc = mtc_launch(&o, rank_main, NULL);
        printf("world size %d: %.2f s\n", world_n, mtc_time_s() - t0);
        T_CHECKF(rc == MTC_OK, "launch n=%d: %s %s", world_n, mtc_result_name(rc),
                 mtc_error_detail());
    }
    t_copy();
    int threads = thread_count();
    mtc_launch_opts o = {.backend = MTC_BACKEND_SHM, .world_size = 4, .timeout_s = 120};
    mtc_result_t rc = mtc_launch(&o, t_leftover, NULL);
    T_CHECKF(rc == MTC_OK, "leftover: %s %s", mtc_result_name(rc), mtc_error_detail());
    T_CHECKF(thread_count() == threads, "progress threads left behind: %d threads, %d before",
             thread_count(), threads);
    return T_DONE();
}
