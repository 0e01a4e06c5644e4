/* tests/pp/test_executor.c - the pipeline executor on shm rank-threads with
 * a toy model whose answer is known serially.
 *
 * Virtual stage s (of pp*vpp) maps y = a_s * x + b_s elementwise (a_s, b_s
 * vectors of `count` values from the counter RNG); microbatch m enters stage
 * 0 as x0_m (RNG) and the last stage's loss is L_m = sum(y * t_m). The serial
 * twin runs every stage of every microbatch on one thread. Checked, for
 * pp in {1, 2, 4} x vpp in {1, 2} x several microbatch counts and group sizes:
 *   (a) each L_m and each rank's accumulated dL/da_s, dL/db_s equal the
 *       serial ones (a second training run doubles the gradients);
 *   (b) the order the callbacks ran in is pp_schedule_build's, per rank;
 *   (c) a forward-only run gives the same losses and leaves gradients alone;
 *   (d) invalid configurations are refused by init with Megatron's message
 *       before any communication;
 *   (e) the same with a message size per stage boundary (stage_count, as a
 *       standalone MTP stage's 1 + D states): stage s's output has w_s <=
 *       count values, y_i = b_i + sum over j = i (mod w_out) of a_j x_j
 *       (every input value is read), so a value sent short shows up.
 * Non-first stages keep the executor's input pointer for their backward
 * instead of a copy (the lifetime executor.h promises), and the caller's
 * buffer is filled with NaN first, so a slot reused too early or a transfer
 * that never arrived shows up as a wrong gradient. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/mem.h"
#include "core/rng.h"
#include "core/timer.h"
#include "pp/executor.h"
#include "test.h"

#define SEED 1234u
#define MAXR 4

typedef struct {
    pp_schedule_config sc;
    size_t count;
    const size_t *widths; /* (e): stage s's output values, s < S-1 (NULL: count) */
    int caller_buffer;
    /* results, written by the owning rank */
    float *loss;      /* (M) training run 1, last stage */
    float *loss_eval; /* (M) forward-only run */
    float *da, *db;   /* (S, count) after two training runs */
    float *da_eval;   /* (S, count) after run 1 + eval: must equal run 1 alone */
    pp_op *trace[MAXR], *trace_eval[MAXR];
    int ntrace[MAXR], ntrace_eval[MAXR];
} toy_world;

typedef struct {
    const toy_world *w;
    int rank, pp, v, S;
    const float *a[8], *b[8]; /* per chunk */
    float *da[8], *db[8];
    const float *saved[8][64]; /* input pointer kept from forward, (chunk, mb) */
    float *x0;                 /* scratch for the first stage's input */
    float *y;                  /* scratch for a stage's output */
    float *loss;
} toy_rank;

static float toy_param(int which, int stage, size_t i) {
    /* a in [0.5, 1.5), b in [-0.5, 0.5) */
    float u = mtc_rng_uniform(SEED, (uint64_t)(which * 1000 + stage), i);
    return which == 0 ? 0.5f + u : u - 0.5f;
}
static float toy_input(int mb, size_t i) {
    return mtc_rng_uniform(SEED + 1, (uint64_t)mb, i) - 0.5f;
}
static float toy_target(int mb, size_t i) { return mtc_rng_uniform(SEED + 2, (uint64_t)mb, i); }
static float affine(float a, float x, float b) { return a * x + b; }
/* values of stage s's output (the last stage's: the loss's count), input */
static size_t w_out(const toy_world *w, int S, int s) {
    return w->widths && s < S - 1 ? w->widths[s] : w->count;
}
static size_t w_in(const toy_world *w, int S, int s) { return s ? w_out(w, S, s - 1) : w->count; }

static mtc_result_t toy_forward(void *ctx, int mb, int chunk, const float *in, float *out) {
    toy_rank *t = ctx;
    size_t n = t->w->count;
    int s = pp_virtual_stage(t->pp, t->rank, chunk);
    size_t wi = w_in(t->w, t->S, s), wo = w_out(t->w, t->S, s);
    if (s == 0) {
        if (in) return mtc_error(MTC_ERR_INTERNAL, "first stage got an input");
        for (size_t i = 0; i < n; i++)
            t->x0[i] = toy_input(mb, i);
        in = t->x0;
    } else {
        if (!in) return mtc_error(MTC_ERR_INTERNAL, "stage %d got no input", s);
        t->saved[chunk][mb] = in;
    }
    if ((s == t->S - 1) != (out == NULL))
        return mtc_error(MTC_ERR_INTERNAL, "stage %d output pointer wrong", s);
    double L = 0;
    float *y = t->y;
    for (size_t i = 0; i < wo; i++)
        y[i] = t->b[chunk][i];
    for (size_t j = 0; j < wi; j++)
        y[j % wo] = affine(t->a[chunk][j], in[j], y[j % wo]);
    for (size_t i = 0; i < wo; i++) {
        if (out)
            out[i] = y[i];
        else
            L += (double)y[i] * toy_target(mb, i);
    }
    if (!out) t->loss[mb] = (float)L;
    return MTC_OK;
}

static mtc_result_t toy_backward(void *ctx, int mb, int chunk, const float *gout, float *gin) {
    toy_rank *t = ctx;
    size_t n = t->w->count;
    int s = pp_virtual_stage(t->pp, t->rank, chunk);
    if ((s == t->S - 1) != (gout == NULL) || (s == 0) != (gin == NULL))
        return mtc_error(MTC_ERR_INTERNAL, "stage %d gradient pointers wrong", s);
    const float *x = s == 0 ? NULL : t->saved[chunk][mb];
    size_t wi = w_in(t->w, t->S, s), wo = w_out(t->w, t->S, s);
    (void)n;
    for (size_t i = 0; i < wo; i++)
        t->db[chunk][i] += gout ? gout[i] : toy_target(mb, i);
    for (size_t j = 0; j < wi; j++) {
        float g = gout ? gout[j % wo] : toy_target(mb, j % wo);
        float xj = x ? x[j] : toy_input(mb, j);
        t->da[chunk][j] += g * xj;
        if (gin) gin[j] = t->a[chunk][j] * g;
    }
    return MTC_OK;
}

static mtc_result_t toy_rank_fn(mtc_comm_t world, void *arg) {
    toy_world *w = arg;
    toy_rank t = {.w = w, .rank = mtc_comm_rank(world), .pp = w->sc.pp};
    t.v = pp_schedule_vpp(&w->sc), t.S = t.pp * t.v;
    size_t n = w->count;
    float *params = malloc(2 * (size_t)t.v * n * sizeof(float));
    float *grads = calloc(2 * (size_t)t.v * n, sizeof(float));
    t.x0 = malloc(n * sizeof(float));
    t.y = malloc(n * sizeof(float));
    t.loss = calloc((size_t)w->sc.num_microbatches, sizeof(float));
    void *buf = NULL;
    size_t bytes = 0;
    pp_executor_t ex = NULL;
    pp_channels ch = {0};
    pp_executor_config ec = {w->sc, n, w->widths};
    mtc_result_t rc;
    for (int c = 0; c < t.v; c++) {
        int s = pp_virtual_stage(t.pp, t.rank, c);
        float *a = params + (size_t)(2 * c) * n, *b = a + n;
        for (size_t i = 0; i < n; i++)
            a[i] = toy_param(0, s, i), b[i] = toy_param(1, s, i);
        t.a[c] = a, t.b[c] = b;
        t.da[c] = grads + (size_t)(2 * c) * n, t.db[c] = t.da[c] + n;
    }
    MTC_CHECK_GOTO(pp_executor_buffer_bytes(&bytes, &ec, t.rank), rc, out);
    if (w->caller_buffer && bytes) {
        MTC_CHECK_GOTO(mtc_mem_alloc_big(bytes, 0, &buf), rc, out);
        for (size_t i = 0; i < bytes / sizeof(float); i++)
            ((float *)buf)[i] = NAN;
    }
    if (t.pp > 1) { /* the pipeline channels, as the grid splits them */
        MTC_CHECK_GOTO(mtc_comm_split(world, 0, t.rank, "PIPELINE_ACTIVATIONS", &ch.act), rc, out);
        MTC_CHECK_GOTO(mtc_comm_split(world, 0, t.rank, "PIPELINE_GRADIENTS", &ch.grad), rc, out);
    }
    MTC_CHECK_GOTO(pp_executor_init(&ex, &ec, &ch, buf), rc, out);
    pp_callbacks cb = {toy_forward, toy_backward, &t, NULL};
    /* run 1: training */
    MTC_CHECK_GOTO(pp_executor_run(ex, &cb, 0, w->trace[t.rank], &w->ntrace[t.rank]), rc, out);
    if (t.rank == t.pp - 1) memcpy(w->loss, t.loss, (size_t)w->sc.num_microbatches * sizeof(float));
    /* run 2: evaluation; no backward may run */
    memset(t.loss, 0, (size_t)w->sc.num_microbatches * sizeof(float));
    pp_callbacks cb_eval = {toy_forward, NULL, &t, NULL};
    MTC_CHECK_GOTO(pp_executor_run(ex, &cb_eval, 1, w->trace_eval[t.rank], &w->ntrace_eval[t.rank]),
                   rc, out);
    if (t.rank == t.pp - 1)
        memcpy(w->loss_eval, t.loss, (size_t)w->sc.num_microbatches * sizeof(float));
    for (int c = 0; c < t.v; c++) {
        int s = pp_virtual_stage(t.pp, t.rank, c);
        memcpy(w->da_eval + (size_t)s * n, t.da[c], n * sizeof(float));
    }
    /* run 3: training again: gradients accumulate */
    MTC_CHECK_GOTO(pp_executor_run(ex, &cb, 0, NULL, NULL), rc, out);
    for (int c = 0; c < t.v; c++) {
        int s = pp_virtual_stage(t.pp, t.rank, c);
        memcpy(w->da + (size_t)s * n, t.da[c], n * sizeof(float));
        memcpy(w->db + (size_t)s * n, t.db[c], n * sizeof(float));
    }
out:
    pp_executor_free(ex);
    mtc_comm_free(ch.act), mtc_comm_free(ch.grad);
    if (buf) mtc_mem_free_big(buf, bytes);
    free(params), free(grads), free(t.x0), free(t.y), free(t.loss);
    return rc;
}

/* Serial twin: all stages of each microbatch on this thread. */
static void serial(const toy_world *w, float *loss, float *da, float *db) {
    const pp_schedule_config *sc = &w->sc;
    size_t n = w->count;
    int S = sc->pp * pp_schedule_vpp(sc), M = sc->num_microbatches;
    float *x = malloc((size_t)(S + 1) * n * sizeof(float)), *g = malloc(2 * n * sizeof(float));
    memset(da, 0, (size_t)S * n * sizeof(float));
    memset(db, 0, (size_t)S * n * sizeof(float));
    for (int m = 0; m < M; m++) {
        for (size_t i = 0; i < n; i++)
            x[i] = toy_input(m, i);
        for (int s = 0; s < S; s++) {
            size_t wi = w_in(w, S, s), wo = w_out(w, S, s);
            float *y = x + (size_t)(s + 1) * n;
            for (size_t i = 0; i < wo; i++)
                y[i] = toy_param(1, s, i);
            for (size_t j = 0; j < wi; j++)
                y[j % wo] = affine(toy_param(0, s, j), x[(size_t)s * n + j], y[j % wo]);
        }
        double L = 0;
        for (size_t i = 0; i < n; i++)
            L += (double)x[(size_t)S * n + i] * toy_target(m, i);
        loss[m] = (float)L;
        for (size_t i = 0; i < n; i++)
            g[i] = toy_target(m, i);
        for (int s = S - 1; s >= 0; s--) {
            size_t wi = w_in(w, S, s);
            float *gn = g + n; /* d(input) of stage s */
            for (size_t j = 0; j < wi; j++)
                gn[j] = 0;
            size_t wo = w_out(w, S, s);
            for (size_t i = 0; i < wo; i++)
                db[(size_t)s * n + i] += g[i];
            for (size_t j = 0; j < wi; j++) {
                da[(size_t)s * n + j] += g[j % wo] * x[(size_t)s * n + j];
                gn[j] = toy_param(0, s, j) * g[j % wo];
            }
            memcpy(g, gn, wi * sizeof(float));
        }
    }
    free(x), free(g);
}

static int same_ops(const pp_op *a, int na, const pp_op *b, int nb) {
    if (na != nb) return 0;
    for (int i = 0; i < na; i++)
        if (a[i].kind != b[i].kind || a[i].microbatch != b[i].microbatch ||
            a[i].chunk != b[i].chunk)
            return 0;
    return 1;
}

static void world_alloc(toy_world *w) {
    int M = w->sc.num_microbatches, S = w->sc.pp * pp_schedule_vpp(&w->sc);
    int max_ops = pp_schedule_max_ops(&w->sc);
    w->loss = calloc((size_t)M, sizeof(float)), w->loss_eval = calloc((size_t)M, sizeof(float));
    w->da = calloc((size_t)S * w->count, sizeof(float));
    w->db = calloc((size_t)S * w->count, sizeof(float));
    w->da_eval = calloc((size_t)S * w->count, sizeof(float));
    for (int r = 0; r < w->sc.pp; r++) {
        w->trace[r] = calloc((size_t)max_ops, sizeof(pp_op));
        w->trace_eval[r] = calloc((size_t)max_ops, sizeof(pp_op));
    }
}

static void world_free(toy_world *w) {
    free(w->loss), free(w->loss_eval), free(w->da), free(w->db), free(w->da_eval);
    for (int r = 0; r < w->sc.pp; r++)
        free(w->trace[r]), free(w->trace_eval[r]);
}

/* Compare what the ranks wrote with the serial twin: every rank's part, or
 * only rank `only`'s (MPI: each process holds its own part). */
static void world_verify(const toy_world *w, int only) {
    const pp_schedule_config *sc = &w->sc;
    int pp = sc->pp, vpp = pp_schedule_vpp(sc), M = sc->num_microbatches, N = sc->group_size;
    int S = pp * vpp, max_ops = pp_schedule_max_ops(sc);
    size_t n = w->count;
    float *loss = malloc((size_t)M * sizeof(float));
    float *da = malloc((size_t)S * n * sizeof(float)), *db = malloc((size_t)S * n * sizeof(float));
    serial(w, loss, da, db);
    int bad_loss = 0, bad_eval = 0, bad_grad = 0, bad_eval_grad = 0;
    if (only < 0 || only == pp - 1)
        for (int m = 0; m < M; m++) {
            bad_loss += !(fabsf(w->loss[m] - loss[m]) <= 1e-5f * (1 + fabsf(loss[m])));
            bad_eval += !(fabsf(w->loss_eval[m] - loss[m]) <= 1e-5f * (1 + fabsf(loss[m])));
        }
    for (int s = 0; s < S; s++) {
        if (only >= 0 && pp_stage_rank(pp, s) != only) continue;
        for (size_t i = (size_t)s * n; i < (size_t)(s + 1) * n; i++) {
            bad_grad += !(fabsf(w->da[i] - 2 * da[i]) <= 1e-5f * (1 + fabsf(da[i])));
            bad_grad += !(fabsf(w->db[i] - 2 * db[i]) <= 1e-5f * (1 + fabsf(db[i])));
            bad_eval_grad += !(fabsf(w->da_eval[i] - da[i]) <= 1e-5f * (1 + fabsf(da[i])));
        }
    }
    T_CHECKF(!bad_loss, "pp=%d vpp=%d M=%d N=%d: %d losses differ (L0 %g vs %g)", pp, vpp, M, N,
             bad_loss, w->loss[0], loss[0]);
    T_CHECKF(!bad_eval, "pp=%d vpp=%d M=%d N=%d: %d forward-only losses differ", pp, vpp, M, N,
             bad_eval);
    T_CHECKF(!bad_grad, "pp=%d vpp=%d M=%d N=%d: %d gradients differ", pp, vpp, M, N, bad_grad);
    T_CHECKF(!bad_eval_grad, "pp=%d vpp=%d M=%d N=%d: forward-only run changed %d gradients", pp,
             vpp, M, N, bad_eval_grad);
    pp_op *ops = malloc((size_t)max_ops * sizeof(pp_op));
    for (int r = 0; r < pp; r++) {
        if (only >= 0 && r != only) continue;
        pp_schedule_counts c;
        T_CHECK(pp_schedule_build(ops, &c, sc, r) == MTC_OK);
        T_CHECKF(same_ops(w->trace[r], w->ntrace[r], ops, c.nops),
                 "pp=%d vpp=%d M=%d rank %d: executed order differs from the schedule", pp, vpp, M,
                 r);
        pp_schedule_config fo = *sc;
        fo.forward_only = 1;
        T_CHECK(pp_schedule_build(ops, &c, &fo, r) == MTC_OK);
        T_CHECKF(same_ops(w->trace_eval[r], w->ntrace_eval[r], ops, c.nops),
                 "pp=%d vpp=%d M=%d rank %d: forward-only order differs", pp, vpp, M, r);
    }
    free(ops), free(loss), free(da), free(db);
}

/* The configurations: {pp, vpp, M, N}. pp = 1 is no pipelining through the
 * same API; 1F1B with M below, at and above pp; interleaved with the default
 * group size (M % pp == 0) and explicit ones (N=3 for M=5: groups of 3 then
 * 2 >= pp; N=5 for M=9: 5 then 4). */
static const int CONFIGS[][4] = {
    {1, 1, 3, 0}, {2, 1, 1, 0}, {2, 1, 2, 0},  {2, 1, 3, 0}, {2, 1, 5, 0},
    {4, 1, 1, 0}, {4, 1, 3, 0}, {4, 1, 4, 0},  {4, 1, 6, 0}, {4, 1, 9, 0},
    {2, 2, 2, 0}, {2, 2, 4, 0}, {2, 2, 6, 0},  {2, 2, 5, 3}, {2, 2, 7, 5},
    {4, 2, 4, 0}, {4, 2, 8, 0}, {4, 2, 12, 0}, {4, 2, 9, 5}, {4, 2, 6, 6},
};
#define NCONFIGS ((int)(sizeof CONFIGS / sizeof *CONFIGS))

/* (e)'s sizes: stage s sends 37 - 7 (s mod 3) values (at least 23) */
static const size_t WIDTHS[] = {37, 30, 23, 37, 30, 23, 37, 30};

static void run_config(int i, int widths) {
    toy_world w = {.sc = {CONFIGS[i][0], CONFIGS[i][1], CONFIGS[i][2], CONFIGS[i][3], 0},
                   .count = i == 0 && !widths ? 33 : 37,
                   .widths = widths ? WIDTHS : NULL,
                   .caller_buffer = i & 1};
    world_alloc(&w);
    mtc_launch_opts lo = {.backend = MTC_BACKEND_SHM, .world_size = w.sc.pp, .timeout_s = 60};
    mtc_result_t rc = mtc_launch(&lo, toy_rank_fn, &w);
    T_CHECKF(rc == MTC_OK, "pp=%d vpp=%d M=%d N=%d: %s", w.sc.pp, w.sc.vpp, w.sc.num_microbatches,
             w.sc.group_size, mtc_error_detail());
    world_verify(&w, -1);
    world_free(&w);
}

/* (d): every rank refuses at init, before communicating. */
typedef struct {
    pp_schedule_config sc;
    const char *want;
} refuse_case;

static mtc_result_t refuse_fn(mtc_comm_t world, void *arg) {
    const refuse_case *rc = arg;
    pp_executor_config ec = {rc->sc, 8, NULL};
    pp_executor_t ex = (pp_executor_t)1;
    pp_channels ch = {world, world}; /* refused before any message */
    mtc_result_t r = pp_executor_init(&ex, &ec, &ch, NULL);
    if (r == MTC_OK) {
        pp_executor_free(ex);
        return mtc_error(MTC_ERR_INTERNAL, "accepted an invalid configuration");
    }
    if (ex != NULL) return mtc_error(MTC_ERR_INTERNAL, "*out not cleared");
    return r;
}

static void check_refusals(void) {
    refuse_case cases[] = {
        {{4, 2, 2, 0, 0},
         "The number of contiguous micro-batches in a virtual pipeline stageshould range in "
         "[PP=4 , M=2]"},
        {{2, 2, 5, 0, 0},
         "The remainder of M (the total micro-batches) divided by N (number of contiguous "
         "micro-batches in a virtual pipeline stage) should be 0, or larger than or equal to the "
         "pipeline-parallel size, but it is 1. Otherwise, it introduces dependency bubbles in "
         "the pipeline and reduces throughput."},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        mtc_launch_opts lo = {
            .backend = MTC_BACKEND_SHM, .world_size = cases[i].sc.pp, .timeout_s = 20};
        double t0 = mtc_time_s();
        mtc_result_t rc = mtc_launch(&lo, refuse_fn, &cases[i]);
        T_CHECK(rc == MTC_ERR_INVALID_ARGUMENT);
        /* launch prefixes the failing rank ("rank 0: ") */
        const char *d = mtc_error_detail();
        size_t nd = strlen(d), nw = strlen(cases[i].want);
        T_CHECKF(nd >= nw && strcmp(d + nd - nw, cases[i].want) == 0 && nd - nw <= 10, "got '%s'",
                 d);
        T_CHECK(mtc_time_s() - t0 < 10); /* nobody waited for a peer */
    }
    /* the communicator must be the pipeline group's size */
    pp_executor_config ec = {{2, 1, 4, 0, 0}, 8, NULL};
    pp_executor_t ex;
    T_CHECK(pp_executor_init(&ex, &ec, NULL, NULL) == MTC_ERR_INVALID_ARGUMENT);
    ec.count = 0;
    ec.schedule.pp = 1;
    T_CHECK(pp_executor_init(&ex, &ec, NULL, NULL) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(strstr(mtc_error_detail(), "message size 0") != NULL);
}

/* Under mpirun: one process per rank, the configurations whose pp is the
 * world size, each process checking its own part. */
static mtc_result_t mpi_rank_fn(mtc_comm_t world, void *arg) {
    (void)arg;
    int size = mtc_comm_size(world), rank = mtc_comm_rank(world), ran = 0;
    for (int i = 0; i < NCONFIGS; i++) {
        if (CONFIGS[i][0] != size) continue;
        toy_world w = {.sc = {CONFIGS[i][0], CONFIGS[i][1], CONFIGS[i][2], CONFIGS[i][3], 0},
                       .count = 37,
                       .caller_buffer = i & 1};
        world_alloc(&w);
        mtc_result_t rc = toy_rank_fn(world, &w);
        T_CHECKF(rc == MTC_OK, "rank %d pp=%d vpp=%d M=%d: %s", rank, w.sc.pp, w.sc.vpp,
                 w.sc.num_microbatches, mtc_error_detail());
        if (rc == MTC_OK) world_verify(&w, rank);
        world_free(&w);
        ran++;
        if (rc != MTC_OK) return rc;
    }
    T_CHECKF(ran > 0, "no configuration has pp = %d (run with -np 2 or 4)", size);
    return MTC_OK;
}

int main(void) {
    if (mtc_launched_by_mpi()) {
        mtc_launch_opts lo = {.backend = MTC_BACKEND_MPI, .timeout_s = 60};
        mtc_result_t rc = mtc_launch(&lo, mpi_rank_fn, NULL);
        T_CHECKF(rc == MTC_OK, "%s", mtc_error_detail());
        return T_DONE();
    }
    check_refusals();
    for (int i = 0; i < NCONFIGS; i++)
        run_config(i, 0), run_config(i, 1);
    return T_DONE();
}
