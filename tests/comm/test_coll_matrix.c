/* tests/comm/test_coll_matrix.c - every collective algorithm, forced on the
 * communicator, x every operation it implements x dtype (f32 f64 bf16 i32
 * i64) x op (sum max min, avg for floats) x count {0, 1, p-1, p, p+1, 1009,
 * ~1M (f32 sum only)} x in place / out of place x world sizes 1..8.
 *
 * Inputs are formulas of (rank, index) whose reductions are exact in every
 * dtype (integers below 256 in magnitude, so bf16 too); the expected result
 * is computed in closed form, e.g. sum over ranks of ((r+g) mod p + 1) * f(g)
 * = f(g) p (p+1) / 2 with f(g) = g mod 7 - 3. A second pass with inexact
 * floating-point data checks determinism: every rank holds the same bits,
 * and a repeated call gives the same bits, and the sum is close to the
 * double-precision one. Sentinels after (and between, for displacements)
 * the output blocks catch writes out of bounds; out-of-place inputs are
 * checked to be unchanged.
 *
 * shm: one mtc_launch per world size (1..8 rank-threads; fake nodes so the
 * hierarchical algorithm has two levels). Under mpirun (tests/mpi) the same
 * matrix runs on sub-communicators of sizes 1..N of the MPI world.
 * With MTC_TEST_NODES=N (tests/multihost: ranks on N real hosts) the nodes
 * are the MPI library's, and the world must span exactly N of them.
 * Reduced mode (MTC_TEST_QUICK=1, or a sanitizer build): fewer sizes and
 * dtype/op pairs, no ~1M case. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/timer.h"
#include "test.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

#define SENT 0x5a /* sentinel byte */
#define NSENT 8   /* sentinel elements checked after the output */

typedef struct {
    int quick;
    size_t large;          /* element count of the large case (0: none) */
    _Atomic long arrivals; /* barrier check (shm: shared by the rank-threads) */
} cfg_t;

typedef struct {
    mtc_comm_t comm; /* algorithms are forced here */
    mtc_comm_t chk;  /* same members, AUTO, for cross-rank checks */
    int p, r, mpi;
    const cfg_t *cfg;
    char *in, *out, *aux;
    size_t cap;                /* bytes of each buffer */
    size_t *c1, *d1, *c2, *d2; /* 4 arrays of p counts/displacements */
    long cases, barriers;
} ctx_t;

/* ---- values ---------------------------------------------------------------------- */

/* Reduction input of rank r at global index g: |value| <= 8 * 3. */
static double red_in(int p, int r, size_t g) {
    return (double)((r + (int)(g % (size_t)p)) % p + 1) * ((int)(g % 7) - 3);
}
/* Its reduction over p ranks, in closed form. */
static double red_want(int p, size_t g, mtc_op_t op) {
    double f = (int)(g % 7) - 3;
    switch (op) {
    case MTC_OP_SUM: return f * p * (p + 1) / 2;
    case MTC_OP_AVG: return f * (p + 1) / 2;
    case MTC_OP_MAX: return f > 0 ? p * f : f;
    default: return f > 0 ? f : p * f;
    }
}
/* Data moved unreduced: block of rank r (or pair src->dst), element i. */
static double mov(int a, int b, size_t i) {
    return (double)((a * 53 + b * 17 + (int)(i % 241) * 5) % 241) - 120;
}
/* Inexact floating-point data for the determinism pass. */
static double fuzz(int r, size_t i) {
    uint32_t h = (uint32_t)(r * 2654435761u) ^ (uint32_t)(i * 2246822519u);
    h ^= h >> 15, h *= 2654435761u, h ^= h >> 13;
    return ((double)(h % 100000) / 7919.0 - 6.0) * (1.0 + (double)(i % 5) / 3.0);
}

static uint64_t hash_bytes(const void *b, size_t n) {
    const unsigned char *s = b;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

/* ---- checking helpers ------------------------------------------------------------- */

typedef struct {
    const char *coll, *algo;
    mtc_dtype_t dt;
    int op; /* mtc_op_t, -1 for collectives that do not reduce */
    size_t count;
    int inplace, p, r;
} desc_t;

#define DESC_FMT "%s algo=%s p=%d rank=%d %s %s count=%zu %s"
#define DESC_ARGS(d)                                                                               \
    (d)->coll, (d)->algo, (d)->p, (d)->r, mtc_dtype_name((d)->dt),                                 \
        (d)->op >= 0 ? mtc_op_name((mtc_op_t)(d)->op) : "-", (d)->count,                           \
        (d)->inplace ? "in-place" : "out-of-place"

/* Every expected value depends on the index only through a short period
 * (mod 7, mod 7p or mod 241), so cases fill and check through a table of
 * one period walked incrementally: no division per element, which matters
 * for the ~1M-element cases on 8 rank-threads. */
#define TAB_MAX 256
typedef struct {
    double v[TAB_MAX];
    size_t len;
} tab_t;
static void tab_red_in(tab_t *t, int p, int r) { /* red_in depends on g mod 7p */
    t->len = 7 * (size_t)p;
    for (size_t k = 0; k < t->len; k++)
        t->v[k] = red_in(p, r, k);
}
static void tab_red_want(tab_t *t, int p, mtc_op_t op) { /* depends on g mod 7 */
    t->len = 7;
    for (size_t k = 0; k < 7; k++)
        t->v[k] = red_want(p, k, op);
}
static void tab_mov(tab_t *t, int a, int b) { /* depends on i mod 241 */
    t->len = 241;
    for (size_t k = 0; k < 241; k++)
        t->v[k] = mov(a, b, k);
}

/* b[off + i] = table value of index base + i, for i < n. */
static void fill(void *b, size_t off, size_t n, mtc_dtype_t dt, const tab_t *t, size_t base) {
    size_t k = base % t->len;
    for (size_t i = 0; i < n; i++) {
        mtc_dtype_store(b, dt, off + i, t->v[k]);
        if (++k == t->len) k = 0;
    }
}

/* Compare b[off + i] with the table value of index base + i, for i < n;
 * one check per call. */
static void expect(const desc_t *d, const char *what, const void *b, size_t off, size_t n,
                   const tab_t *t, size_t base) {
    size_t bad = 0, first = 0, k = base % t->len;
    double got0 = 0, want0 = 0;
    for (size_t i = 0; i < n; i++) {
        double g = mtc_dtype_load(b, d->dt, off + i);
        if (g != t->v[k] && !bad++) first = i, got0 = g, want0 = t->v[k];
        if (++k == t->len) k = 0;
    }
    T_CHECKF(bad == 0, DESC_FMT ": %s: %zu of %zu wrong, first [%zu] = %g, want %g", DESC_ARGS(d),
             what, bad, n, first, got0, want0);
}

static void expect_sentinel(const desc_t *d, const char *what, const char *b, size_t from,
                            size_t to) {
    size_t bad = 0;
    for (size_t i = from; i < to; i++)
        bad += (unsigned char)b[i] != SENT;
    T_CHECKF(bad == 0, DESC_FMT ": %s: %zu bytes written outside the output", DESC_ARGS(d), what,
             bad);
}

static void expect_rc(const desc_t *d, mtc_result_t rc) {
    T_CHECKF(rc == MTC_OK, DESC_FMT ": %s: %s", DESC_ARGS(d), mtc_result_name(rc),
             mtc_error_detail());
}

/* ---- one case per collective --------------------------------------------------------- */

static size_t vcount(size_t n, int p, int j) { return (n + (size_t)j) / (size_t)p; } /* sums to n */
static size_t a2a_count(size_t n, int p, int src, int dst) {
    return (n + (size_t)src + 2 * (size_t)dst) / (size_t)p;
}
static int root_of(const desc_t *d) { return (int)((d->count + (size_t)d->dt) % (size_t)d->p); }

static void case_all_reduce(ctx_t *x, const desc_t *d) {
    size_t n = d->count, es = mtc_dtype_size(d->dt);
    tab_t in, want;
    tab_red_in(&in, x->p, x->r);
    tab_red_want(&want, x->p, (mtc_op_t)d->op);
    memset(x->out, SENT, (n + NSENT) * es);
    void *src = d->inplace ? x->out : x->in;
    fill(src, 0, n, d->dt, &in, 0);
    expect_rc(d, mtc_all_reduce(src, x->out, n, d->dt, (mtc_op_t)d->op, x->comm));
    expect(d, "result", x->out, 0, n, &want, 0);
    expect_sentinel(d, "tail", x->out, n * es, (n + NSENT) * es);
    if (!d->inplace) expect(d, "input kept", x->in, 0, n, &in, 0);
}

static void case_reduce_scatter(ctx_t *x, const desc_t *d) {
    size_t n = d->count, es = mtc_dtype_size(d->dt), tot = n * (size_t)x->p;
    tab_t in, want;
    tab_red_in(&in, x->p, x->r);
    tab_red_want(&want, x->p, (mtc_op_t)d->op);
    char *src = d->inplace ? x->out : x->in;
    char *dst = d->inplace ? x->out + (size_t)x->r * n * es : x->out;
    memset(x->out, SENT, (tot + NSENT) * es);
    fill(src, 0, tot, d->dt, &in, 0);
    expect_rc(d, mtc_reduce_scatter(src, dst, n, d->dt, (mtc_op_t)d->op, x->comm));
    expect(d, "my block", dst, 0, n, &want, (size_t)x->r * n);
    if (!d->inplace) {
        expect_sentinel(d, "tail", x->out, n * es, (n + NSENT) * es);
        expect(d, "input kept", x->in, 0, tot, &in, 0);
    }
}

static void case_reduce_scatter_v(ctx_t *x, const desc_t *d) {
    size_t n = d->count, es = mtc_dtype_size(d->dt), off = 0;
    for (int j = 0; j < x->p; j++) {
        x->c1[j] = vcount(n, x->p, j);
        if (j < x->r) off += x->c1[j];
    }
    size_t mine = x->c1[x->r];
    tab_t in, want;
    tab_red_in(&in, x->p, x->r);
    tab_red_want(&want, x->p, (mtc_op_t)d->op);
    char *src = d->inplace ? x->out : x->in, *dst = d->inplace ? x->out + off * es : x->out;
    memset(x->out, SENT, (n + NSENT) * es);
    fill(src, 0, n, d->dt, &in, 0);
    expect_rc(d, mtc_reduce_scatter_v(src, dst, x->c1, d->dt, (mtc_op_t)d->op, x->comm));
    expect(d, "my block", dst, 0, mine, &want, off);
    if (!d->inplace) expect_sentinel(d, "tail", x->out, mine * es, (mine + NSENT) * es);
}

static void case_reduce(ctx_t *x, const desc_t *d) {
    size_t n = d->count, es = mtc_dtype_size(d->dt);
    int root = root_of(d), me_root = x->r == root;
    tab_t in, want;
    tab_red_in(&in, x->p, x->r);
    tab_red_want(&want, x->p, (mtc_op_t)d->op);
    memset(x->out, SENT, (n + NSENT) * es);
    void *src = d->inplace ? x->out : x->in;
    fill(src, 0, n, d->dt, &in, 0);
    void *dst = d->inplace ? x->out : me_root ? x->out : NULL;
    expect_rc(d, mtc_reduce(src, dst, n, d->dt, (mtc_op_t)d->op, root, x->comm));
    if (me_root) {
        expect(d, "root result", x->out, 0, n, &want, 0);
        expect_sentinel(d, "tail", x->out, n * es, (n + NSENT) * es);
    } else if (!d->inplace) {
        expect_sentinel(d, "non-root output", x->out, 0, (n + NSENT) * es);
    }
    if (!d->inplace) expect(d, "input kept", x->in, 0, n, &in, 0);
}

static void case_broadcast(ctx_t *x, const desc_t *d) {
    size_t n = d->count, es = mtc_dtype_size(d->dt);
    int root = root_of(d);
    tab_t v;
    tab_mov(&v, root, 1);
    memset(x->out, SENT, (n + NSENT) * es);
    if (x->r == root) fill(x->out, 0, n, d->dt, &v, 0);
    expect_rc(d, mtc_broadcast(x->out, n, d->dt, root, x->comm));
    expect(d, "root's values", x->out, 0, n, &v, 0);
    expect_sentinel(d, "tail", x->out, n * es, (n + NSENT) * es);
}

static void case_all_gather(ctx_t *x, const desc_t *d) {
    size_t n = d->count, es = mtc_dtype_size(d->dt), tot = n * (size_t)x->p;
    tab_t v;
    memset(x->out, SENT, (tot + NSENT) * es);
    char *src = d->inplace ? x->out + (size_t)x->r * n * es : x->in;
    tab_mov(&v, x->r, 0);
    fill(src, 0, n, d->dt, &v, 0);
    expect_rc(d, mtc_all_gather(src, x->out, n, d->dt, x->comm));
    for (int q = 0; q < x->p; q++) {
        tab_mov(&v, q, 0);
        expect(d, "block", x->out, (size_t)q * n, n, &v, 0);
    }
    expect_sentinel(d, "tail", x->out, tot * es, (tot + NSENT) * es);
}

/* Out of place: blocks at gapped displacements (2 elements apart); in
 * place: packed (displs NULL), my block already in the output. */
static void case_all_gather_v(ctx_t *x, const desc_t *d) {
    size_t n = d->count, es = mtc_dtype_size(d->dt), off = 0, span;
    for (int j = 0; j < x->p; j++) {
        x->c1[j] = vcount(n, x->p, j);
        x->d1[j] = off + (d->inplace ? 0 : 2 * (size_t)j);
        off += x->c1[j];
    }
    span = x->d1[x->p - 1] + x->c1[x->p - 1];
    memset(x->out, SENT, (span + NSENT) * es);
    size_t mine = x->c1[x->r];
    char *src = d->inplace ? x->out + x->d1[x->r] * es : x->in;
    tab_t v;
    tab_mov(&v, x->r, 0);
    fill(src, 0, mine, d->dt, &v, 0);
    expect_rc(
        d, mtc_all_gather_v(src, mine, x->out, x->c1, d->inplace ? NULL : x->d1, d->dt, x->comm));
    size_t prev_end = 0;
    for (int q = 0; q < x->p; q++) {
        tab_mov(&v, q, 0);
        expect(d, "block", x->out, x->d1[q], x->c1[q], &v, 0);
        expect_sentinel(d, "gap", x->out, prev_end * es, x->d1[q] * es);
        prev_end = x->d1[q] + x->c1[q];
    }
    expect_sentinel(d, "tail", x->out, span * es, (span + NSENT) * es);
}

static void case_all_to_all(ctx_t *x, const desc_t *d) {
    size_t n = d->count, es = mtc_dtype_size(d->dt), tot = n * (size_t)x->p;
    tab_t v;
    memset(x->out, SENT, (tot + NSENT) * es);
    for (int j = 0; j < x->p; j++) {
        tab_mov(&v, x->r, j);
        fill(x->in, (size_t)j * n, n, d->dt, &v, 0);
    }
    expect_rc(d, mtc_all_to_all(x->in, x->out, n, d->dt, x->comm));
    for (int q = 0; q < x->p; q++) {
        tab_mov(&v, q, x->r);
        expect(d, "block", x->out, (size_t)q * n, n, &v, 0);
    }
    expect_sentinel(d, "tail", x->out, tot * es, (tot + NSENT) * es);
}

/* Pair counts vary with (src, dst); packed sends, receives 1 element apart. */
static void case_all_to_all_v(ctx_t *x, const desc_t *d) {
    size_t n = d->count, es = mtc_dtype_size(d->dt), so = 0, ro = 0;
    tab_t v;
    for (int j = 0; j < x->p; j++) {
        x->c1[j] = a2a_count(n, x->p, x->r, j);
        x->c2[j] = a2a_count(n, x->p, j, x->r);
        x->d2[j] = ro + (size_t)j;
        tab_mov(&v, x->r, j);
        fill(x->in, so, x->c1[j], d->dt, &v, 0);
        so += x->c1[j];
        ro += x->c2[j];
    }
    size_t span = ro + (size_t)x->p - 1;
    memset(x->out, SENT, (span + NSENT) * es);
    expect_rc(d, mtc_all_to_all_v(x->in, x->c1, NULL, x->out, x->c2, x->d2, d->dt, x->comm));
    for (int q = 0; q < x->p; q++) {
        tab_mov(&v, q, x->r);
        expect(d, "block", x->out, x->d2[q], x->c2[q], &v, 0);
    }
    expect_sentinel(d, "tail", x->out, span * es, (span + NSENT) * es);
}

/* shm: every rank counts its arrival before the barrier; after the k-th
 * barrier all k * p arrivals must be visible (ranks share cfg). */
static void case_barrier(ctx_t *x, const desc_t *d) {
    if (d->count != 1) return; /* once per algorithm */
    cfg_t *cfg = (cfg_t *)x->cfg;
    for (int k = 0; k < 3; k++) {
        atomic_fetch_add(&cfg->arrivals, 1);
        expect_rc(d, mtc_barrier(x->comm));
        x->barriers++;
        long seen = atomic_load(&cfg->arrivals);
        if (!x->mpi)
            T_CHECKF(seen >= x->barriers * x->p,
                     DESC_FMT ": barrier %ld returned after %ld arrivals", DESC_ARGS(d),
                     x->barriers, seen);
    }
}

/* ---- the matrix -------------------------------------------------------------------- */

typedef void (*case_fn)(ctx_t *x, const desc_t *d);
static const struct {
    mtc_coll_t coll;
    case_fn fn;
    int reducing, has_inplace;
    mtc_algo_t algos[8]; /* AUTO-terminated after the first entry */
} COLLS[] = {
    {MTC_COLL_ALL_REDUCE,
     case_all_reduce,
     1,
     1,
     {MTC_ALGO_AUTO, MTC_ALGO_RING, MTC_ALGO_TREE, MTC_ALGO_RECDBL, MTC_ALGO_RABENSEIFNER,
      MTC_ALGO_HIER, MTC_ALGO_DIRECT, MTC_ALGO_NATIVE}},
    {MTC_COLL_REDUCE_SCATTER,
     case_reduce_scatter,
     1,
     1,
     {MTC_ALGO_AUTO, MTC_ALGO_RING, MTC_ALGO_HIER, MTC_ALGO_DIRECT, MTC_ALGO_NATIVE}},
    {MTC_COLL_ALL_GATHER,
     case_all_gather,
     0,
     1,
     {MTC_ALGO_AUTO, MTC_ALGO_RING, MTC_ALGO_RECDBL, MTC_ALGO_HIER, MTC_ALGO_DIRECT,
      MTC_ALGO_NATIVE}},
    {MTC_COLL_BROADCAST,
     case_broadcast,
     0,
     0,
     {MTC_ALGO_AUTO, MTC_ALGO_TREE, MTC_ALGO_DIRECT, MTC_ALGO_NATIVE}},
    {MTC_COLL_REDUCE,
     case_reduce,
     1,
     1,
     {MTC_ALGO_AUTO, MTC_ALGO_TREE, MTC_ALGO_DIRECT, MTC_ALGO_NATIVE}},
    {MTC_COLL_ALL_TO_ALL,
     case_all_to_all,
     0,
     0,
     {MTC_ALGO_AUTO, MTC_ALGO_PAIRWISE, MTC_ALGO_DIRECT, MTC_ALGO_NATIVE}},
    {MTC_COLL_REDUCE_SCATTER_V,
     case_reduce_scatter_v,
     1,
     1,
     {MTC_ALGO_AUTO, MTC_ALGO_RING, MTC_ALGO_DIRECT}},
    {MTC_COLL_ALL_GATHER_V,
     case_all_gather_v,
     0,
     1,
     {MTC_ALGO_AUTO, MTC_ALGO_RING, MTC_ALGO_DIRECT}},
    {MTC_COLL_ALL_TO_ALL_V,
     case_all_to_all_v,
     0,
     0,
     {MTC_ALGO_AUTO, MTC_ALGO_PAIRWISE, MTC_ALGO_DIRECT}},
    {MTC_COLL_BARRIER,
     case_barrier,
     0,
     0,
     {MTC_ALGO_AUTO, MTC_ALGO_RING, MTC_ALGO_TREE, MTC_ALGO_DIRECT, MTC_ALGO_NATIVE}},
};
#define NCOLLS (int)(sizeof COLLS / sizeof COLLS[0])

/* (dtype, op) pairs of the full and the reduced matrix. The edge counts
 * (0, 1, p-1, p) exercise block arithmetic, not arithmetic per dtype, so
 * they run every dtype with sum and f32 with every op; p+1 and 1009 run
 * every pair. */
static int pair_wanted(const ctx_t *x, mtc_dtype_t dt, mtc_op_t op, int edge) {
    if (op == MTC_OP_AVG && !mtc_dtype_is_float(dt)) return 0;
    if (edge && op != MTC_OP_SUM && dt != MTC_DTYPE_F32) return 0;
    if (!x->cfg->quick) return 1;
    switch (dt) {
    case MTC_DTYPE_F32: return 1;
    case MTC_DTYPE_BF16: return op == MTC_OP_SUM || op == MTC_OP_AVG;
    case MTC_DTYPE_I32: return op == MTC_OP_MAX;
    case MTC_DTYPE_I64: return op == MTC_OP_MIN;
    default: return op == MTC_OP_SUM;
    }
}

static int algo_wanted(const ctx_t *x, mtc_algo_t a) {
    if (a == MTC_ALGO_DIRECT) return !x->mpi;
    if (a == MTC_ALGO_NATIVE) return x->mpi;
    /* hier needs two nodes (one rank runs the one-rank shortcut anyway) */
    if (a == MTC_ALGO_HIER) return x->p == 1 || mtc_comm_node_count(x->comm) > 1;
    return 1;
}

static void run_case(ctx_t *x, int ci, mtc_algo_t algo, mtc_dtype_t dt, int op, size_t n,
                     int inplace) {
    desc_t d = {mtc_coll_name(COLLS[ci].coll), mtc_algo_name(algo), dt, op, n, inplace, x->p, x->r};
    COLLS[ci].fn(x, &d);
    x->cases++;
}

/* Inexact data: the same bits on every rank and on a repeated call, and
 * close to the sum in double precision. */
static void determinism(ctx_t *x, mtc_algo_t algo, mtc_dtype_t dt, mtc_op_t op, size_t n) {
    size_t es = mtc_dtype_size(dt);
    desc_t d = {"all_reduce(determinism)", mtc_algo_name(algo), dt, (int)op, n, 0, x->p, x->r};
    for (size_t i = 0; i < n; i++)
        mtc_dtype_store(x->in, dt, i, fuzz(x->r, i));
    expect_rc(&d, mtc_all_reduce(x->in, x->out, n, dt, op, x->comm));
    uint64_t h[2] = {hash_bytes(x->out, n * es), 0};
    expect_rc(&d, mtc_all_reduce(x->in, x->out, n, dt, op, x->comm));
    h[1] = hash_bytes(x->out, n * es);
    T_CHECKF(h[0] == h[1], DESC_FMT ": two runs gave different bits", DESC_ARGS(&d));
    uint64_t *all = (uint64_t *)x->aux;
    expect_rc(&d, mtc_all_gather(&h[0], all, 1, MTC_DTYPE_I64, x->chk));
    int differ = -1;
    for (int q = 0; q < x->p && differ < 0; q++)
        if (all[q] != all[0]) differ = q;
    T_CHECKF(differ < 0, DESC_FMT ": rank %d's bits differ from rank 0's", DESC_ARGS(&d), differ);
    double tol = dt == MTC_DTYPE_F64 ? 1e-13 : dt == MTC_DTYPE_F32 ? 1e-6 : 1e-2, worst = 0;
    char one[8];
    for (size_t i = 0; i < n; i++) {
        double want = 0, mag = 0;
        for (int q = 0; q < x->p; q++) {
            mtc_dtype_store(one, dt, 0, fuzz(q, i));
            want += mtc_dtype_load(one, dt, 0);
            mag += fabs(mtc_dtype_load(one, dt, 0));
        }
        if (op == MTC_OP_AVG) want /= x->p, mag /= x->p;
        double err = fabs(mtc_dtype_load(x->out, dt, i) - want) / (mag + 1e-30);
        if (err > worst) worst = err;
    }
    T_CHECKF(worst <= tol * x->p, DESC_FMT ": relative error %g", DESC_ARGS(&d), worst);
    x->cases += 2;
}

static void run_matrix(ctx_t *x) {
    const int p = x->p;
    const size_t counts[] = {0, 1, (size_t)p - 1, (size_t)p, (size_t)p + 1, 1009};
    for (int ci = 0; ci < NCOLLS; ci++) {
        for (int ai = 0; ai < 8; ai++) {
            mtc_algo_t algo = COLLS[ci].algos[ai];
            if ((ai > 0 && algo == MTC_ALGO_AUTO) || !algo_wanted(x, algo)) continue;
            mtc_comm_set_algo(x->comm, COLLS[ci].coll, algo);
            for (int dt = 0; dt < MTC_DTYPE_COUNT; dt++) {
                for (int op = 0; op < (COLLS[ci].reducing ? MTC_OP_COUNT : 1); op++) {
                    if (!COLLS[ci].reducing && x->cfg->quick && dt == MTC_DTYPE_I32) continue;
                    int o = COLLS[ci].reducing ? op : -1;
                    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
                        if (COLLS[ci].reducing &&
                            !pair_wanted(x, (mtc_dtype_t)dt, (mtc_op_t)op, k < 4))
                            continue;
                        for (int ip = 0; ip <= COLLS[ci].has_inplace; ip++)
                            run_case(x, ci, algo, (mtc_dtype_t)dt, o, counts[k], ip);
                    }
                }
            }
            if (x->cfg->large && COLLS[ci].coll != MTC_COLL_BARRIER) {
                /* f32 sum only; blocks of large/p for the per-rank counts */
                mtc_coll_t c = COLLS[ci].coll;
                int per_rank = c == MTC_COLL_REDUCE_SCATTER || c == MTC_COLL_ALL_GATHER ||
                               c == MTC_COLL_ALL_TO_ALL;
                size_t n = per_rank ? x->cfg->large / (size_t)p : x->cfg->large;
                int o = COLLS[ci].reducing ? MTC_OP_SUM : -1;
                run_case(x, ci, algo, MTC_DTYPE_F32, o, n, 0);
                if (c == MTC_COLL_ALL_REDUCE) run_case(x, ci, algo, MTC_DTYPE_F32, o, n, 1);
            }
            if (COLLS[ci].coll == MTC_COLL_ALL_REDUCE) {
                const mtc_dtype_t fl[3] = {MTC_DTYPE_F32, MTC_DTYPE_F64, MTC_DTYPE_BF16};
                for (int f = 0; f < 3; f++) {
                    determinism(x, algo, fl[f], MTC_OP_SUM, 1009);
                    if (!x->cfg->quick) determinism(x, algo, fl[f], MTC_OP_AVG, (size_t)p + 1);
                }
            }
            mtc_comm_set_algo(x->comm, COLLS[ci].coll, MTC_ALGO_AUTO);
        }
    }
}

/* ---- drivers ------------------------------------------------------------------------ */

static mtc_result_t ctx_run(mtc_comm_t comm, mtc_comm_t chk, const cfg_t *cfg, int mpi) {
    ctx_t x = {.comm = comm,
               .chk = chk,
               .p = mtc_comm_size(comm),
               .r = mtc_comm_rank(comm),
               .mpi = mpi,
               .cfg = cfg};
    size_t small = (size_t)x.p * (1009 + (size_t)x.p + 4) + 64;
    size_t big = cfg->large + 4 * (size_t)x.p + 64;
    x.cap = small * 8 > big * 4 ? small * 8 : big * 4;
    x.in = malloc(x.cap);
    x.out = malloc(x.cap);
    x.aux = malloc((size_t)x.p * 8 + 64);
    x.c1 = malloc(4 * (size_t)x.p * sizeof(size_t));
    if (!x.in || !x.out || !x.aux || !x.c1) {
        free(x.in), free(x.out), free(x.aux), free(x.c1);
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "test: no memory for %zu-byte buffers", x.cap);
    }
    x.d1 = x.c1 + x.p, x.c2 = x.d1 + x.p, x.d2 = x.c2 + x.p;
    double t0 = mtc_time_s();
    run_matrix(&x);
    if (x.r == 0)
        printf("p=%d (%s): %ld cases in %.2f s\n", x.p, mtc_comm_backend_name(comm), x.cases,
               mtc_time_s() - t0);
    fflush(stdout);
    free(x.in), free(x.out), free(x.aux), free(x.c1);
    return MTC_OK;
}

static mtc_result_t shm_rank(mtc_comm_t world, void *arg) {
    mtc_comm_t chk = NULL;
    MTC_CHECK(mtc_comm_split(world, 0, mtc_comm_rank(world), "CHECK", &chk));
    mtc_result_t rc = ctx_run(world, chk, arg, 0);
    mtc_comm_free(chk);
    return rc;
}

/* Under mpirun: the matrix on the first k ranks, for k = 1..N. */
static mtc_result_t mpi_rank(mtc_comm_t world, void *arg) {
    int n = mtc_comm_size(world), r = mtc_comm_rank(world);
    const char *nodes = getenv("MTC_TEST_NODES");
    if (nodes && nodes[0])
        T_CHECKF(mtc_comm_node_count(world) == atoi(nodes),
                 "rank %d (host %s): the world spans %d node(s), MTC_TEST_NODES says %s", r,
                 mtc_comm_host_of(world, r) ? mtc_comm_host_of(world, r) : "?",
                 mtc_comm_node_count(world), nodes);
    for (int k = 1; k <= n; k++) {
        mtc_comm_t c = NULL, chk = NULL;
        MTC_CHECK(mtc_comm_split(world, r < k ? 0 : -1, r, "MATRIX", &c));
        MTC_CHECK(mtc_comm_split(world, r < k ? 0 : -1, r, "CHECK", &chk));
        mtc_result_t rc = c ? ctx_run(c, chk, arg, 1) : MTC_OK;
        mtc_comm_free(c);
        mtc_comm_free(chk);
        MTC_CHECK(rc);
    }
    return MTC_OK;
}

int main(void) {
    const char *q = getenv("MTC_TEST_QUICK");
    cfg_t cfg = {.quick = SANITIZED || (q && q[0] == '1')};
    cfg.large = cfg.quick ? 0 : (size_t)1 << 20;
    mtc_launch_opts o = {.backend = MTC_BACKEND_SHM, .timeout_s = 120, .pin_threads = -1};
    mtc_result_t rc = MTC_OK;
    double t0 = mtc_time_s();
    if (mtc_launched_by_mpi()) {
        o.backend = MTC_BACKEND_MPI;
        /* fake nodes, so hier has two levels on one machine; real ones across hosts */
        const char *nodes = getenv("MTC_TEST_NODES");
        o.ranks_per_node = nodes && nodes[0] ? 0 : 2;
        rc = mtc_launch(&o, mpi_rank, &cfg);
        T_CHECKF(rc == MTC_OK, "mpi launch: %s: %s", mtc_result_name(rc), mtc_error_detail());
    } else {
        static const int full[] = {1, 2, 3, 4, 5, 6, 7, 8}, quick[] = {1, 2, 3, 4, 7};
        const int *sizes = cfg.quick ? quick : full;
        int ns = cfg.quick ? 5 : 8;
        for (int i = 0; i < ns; i++) {
            o.world_size = sizes[i];
            /* two uneven nodes where possible (p=5: 3+2, p=7: 4+3) */
            o.ranks_per_node = sizes[i] <= 2 ? 1 : (sizes[i] + 1) / 2;
            atomic_store(&cfg.arrivals, 0);
            rc = mtc_launch(&o, shm_rank, &cfg);
            T_CHECKF(rc == MTC_OK, "launch of %d ranks: %s: %s", sizes[i], mtc_result_name(rc),
                     mtc_error_detail());
        }
    }
    printf("total %.1f s%s\n", mtc_time_s() - t0, cfg.quick ? " (reduced matrix)" : "");
    return T_DONE();
}
