/* plan/kernels.c - the per-element cost of mtc's non-GEMM kernels and the
 * per-call cost of its small GEMMs on this host, for the CPU step-time
 * model (plan/time.c). A profile of a small GPT step (perf, 2 rank-threads
 * on 2 cores) puts about half the CPU time outside the big GEMMs: the
 * tiled attention's own tile products and softmax, dropout's random
 * numbers, GELU's tanh, layer norms, Adam. Those do not run at the GEMM
 * rate nor at memcpy's bandwidth, so they are timed here, each with the
 * real nn/ kernel:
 *
 *   every core at once (as training keeps them), each thread on its own
 *   buffers, each kernel called up to KCALLS times (~10 ms) with its data
 *   pushed out of the core's cache before each call (as a step meets a
 *   layer's activations and weights), each call timed on the thread's CPU
 *   clock (the load's preemption does not count); per kernel the median
 *   of `rounds` rounds, the mean over the threads
 *   -> seconds per element (norm, GELU, dropout, residual, cross-entropy,
 *      Adam), per 64 x 64 attention tile a + b HS (two head sizes), per
 *      visible score with attention dropout (with minus without), and the
 *      linear layers' GEMMs as t = calls c + FLOPs / R (a layer's four
 *      linears on their own buffers against four 256 x 128 x 128 ones,
 *      interleaved);
 *   then (mtc_plan_measure_moe_kernels) a real serial MoE layer (8
 *   experts of 128 -> 512, top-2, 256 tokens, routed unevenly by its
 *   router): its forward and backward less its GEMMs at that fit ->
 *   seconds per routed row and element of (C + F1 + F), forward and
 *   backward (the routing, permutation, staging copies of the padded
 *   blocks, activation, probability loops, weighted sum).
 *
 * Limitations: one shape per kernel (the elements of a 256 x 128 row
 * block; the MoE layer's other sizes scale by its rows' elements), serial kernels (a rank with
 * several threads is assumed to divide them evenly: pool fork/join not priced), LayerNorm stands
 * for RMSNorm. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "moe/moe.h"
#include "nn/lowp.h"
#include "nn/nn.h"
#include "plan/plan.h"

enum { KB = 2, KT = 128, KC = 128, KF = 512, KV = 256, KADAM = 1 << 20, KROUNDS = 9 };
enum { KEVICT = 1 << 20, KCALLS = 60 }; /* 4 MiB of floats: twice a core's L2 */
enum {
    K_NORM_F,
    K_NORM_B,
    K_GELU_F,
    K_GELU_B,
    K_DROP,
    K_RESID,
    K_XENT,
    K_ADAM,
    K_ATT32_F,
    K_ATT32_B,
    K_ATT64_F,
    K_ATT64_B,
    K_ATT64_DF,
    K_ATT64_DB,
    K_GEMM_S,
    K_LAYER,
    K_NORM2,
    K_MOE_F,
    K_MOE_B,
    K_N
};
enum { KE = 8, KK = 2 }; /* the MoE layer: 8 experts, top-2, (KC, KF) GELU MLPs with biases */

/* What an MoE layer's GEMMs are, from the routing its forward made: the
 * rows the experts ran (unpadded), the forward's FLOPs and calls (the
 * router's and the experts' padded blocks). */
typedef struct {
    double rows, flops_f, calls_f;
} moe_gemms;

/* One serial MoE layer (moe/moe.h) on its own weights, activations and
 * scratch. */
typedef struct {
    mtc_moe_config m;
    moe_dims d;
    float *mem; /* everything below, one allocation */
    float *fc1w[KE], *fc1b[KE], *fc2w[KE], *fc2b[KE], *dfc1w[KE], *dfc1b[KE], *dfc2w[KE],
        *dfc2b[KE];
    float *router, *drouter, *in, *out, *dout, *din, *acts, *scratch;
    moe_weights w, dw;
    moe_acts a;
    moe_gemms g;
} kern_moe;

typedef struct {
    float *x, *y, *z, *w, *b, *mean, *rstd, *dw, *db, *qkv, *dqkv, *out, *lse, *logits, *loss;
    float *p, *g, *m, *v, *big;
    float *lx, *lo, *lw, *ldw, *ldx; /* K_LAYER's own buffers */
    float *evict;                    /* KEVICT floats read between calls */
    double clock_s;                  /* the CPU clock's cost per call */
    int *tgt;
    kern_moe moe;
    int moe_phase;          /* 1: only the MoE layer (K_MOE_F, K_MOE_B); 0: every other kernel */
    double s[KROUNDS][K_N]; /* CPU seconds per repetition, per round */
    int round;
} kern_arg;

static nn_dropout_spec drop_spec(float p, int NH) {
    nn_dropout_spec d;
    memset(&d, 0, sizeof d);
    d.p = p, d.seed = 1234, d.stream = 7, d.Tg = KT, d.Cg = KC, d.NHg = NH;
    return d;
}

/* One kernel, `reps` times: CPU seconds per call. */
static double run_kernel(kern_arg *a, int k, int reps) {
    nn_dropout_spec d = drop_spec(0.1f, 4);
    const int N = KB * KT;
    double t0 = mtc_thread_cpu_s();
    for (int r = 0; r < reps; r++) {
        switch (k) {
        case K_NORM_F:
            nn_layernorm_forward(NULL, a->y, a->mean, a->rstd, a->x, a->w, a->b, N, KC);
            break;
        case K_NORM_B:
            nn_layernorm_backward(NULL, a->z, a->dw, a->db, a->y, a->x, a->w, a->mean, a->rstd, N,
                                  KC);
            break;
        case K_GELU_F:
            nn_gelu_forward(NULL, a->big + (size_t)N * KF, a->big, (size_t)N * KF);
            break;
        case K_GELU_B:
            nn_gelu_backward(NULL, a->big + (size_t)2 * N * KF, a->big, a->big + (size_t)N * KF,
                             (size_t)N * KF);
            break;
        case K_DROP: nn_dropout_forward(a->y, a->x, KB, KT, KC, &d); break;
        case K_RESID: nn_residual_forward(a->z, a->x, a->y, (size_t)N * KC); break;
        case K_XENT:
            memcpy(a->logits, a->big, (size_t)N * KV * sizeof(float));
            nn_softmax_xent_forward_backward(NULL, a->loss, a->logits, a->tgt, 1.0f / N, N, KV, KV);
            break;
        case K_ADAM:
            nn_adamw_update_scaled(a->p, a->g, a->m, a->v, KADAM, 0.5f, 1e-4f, 0.9f, 0.95f, 1e-8f,
                                   0.1f, 3);
            break;
        case K_ATT32_F:
        case K_ATT64_F:
        case K_ATT64_DF: {
            int HS = k == K_ATT32_F ? 32 : 64, NH = KC / HS;
            nn_attention_shape s = nn_attention_shape_qkv(KB, KT, NH, HS);
            nn_dropout_spec dd = drop_spec(k == K_ATT64_DF ? 0.1f : 0.0f, NH);
            nn_attention_forward(NULL, a->out, a->lse, a->qkv, a->qkv + KC, a->qkv + 2 * KC, &s,
                                 k == K_ATT64_DF ? &dd : NULL);
            break;
        }
        case K_ATT32_B:
        case K_ATT64_B:
        case K_ATT64_DB: {
            int HS = k == K_ATT32_B ? 32 : 64, NH = KC / HS;
            nn_attention_shape s = nn_attention_shape_qkv(KB, KT, NH, HS);
            nn_dropout_spec dd = drop_spec(k == K_ATT64_DB ? 0.1f : 0.0f, NH);
            nn_attention_backward(NULL, a->dqkv, a->dqkv + KC, a->dqkv + 2 * KC, a->y, a->qkv,
                                  a->qkv + KC, a->qkv + 2 * KC, a->out, a->lse, &s,
                                  k == K_ATT64_DB ? &dd : NULL);
            break;
        }
        case K_LAYER: { /* a layer's four linears (qkv, proj, fc1, fc2), forward and
                         * backward, each on its own weights and activations */
            const int in[4] = {KC, KC, KC, KF}, out[4] = {3 * KC, KC, KF, KC};
            for (int j = 0; j < 4; j++) {
                float *x = a->lx + (size_t)j * N * KF, *o = a->lo + (size_t)j * N * KF;
                float *w = a->lw + (size_t)j * KF * KC;
                nn_linear_forward(NULL, o, x, w, a->b, N, in[j], out[j]);
            }
            for (int j = 3; j >= 0; j--) {
                float *x = a->lx + (size_t)j * N * KF, *o = a->lo + (size_t)j * N * KF;
                float *w = a->lw + (size_t)j * KF * KC, *dw = a->ldw + (size_t)j * KF * KC;
                nn_linear_backward(NULL, a->ldx, dw, a->db, o, x, w, N, in[j], out[j]);
            }
            break;
        }
        case K_NORM2: { /* the gradient norm's sum of squares, then the zeroing */
            volatile double ss = nn_sumsq(a->g, KADAM);
            (void)ss;
            memset(a->m, 0, (size_t)KADAM * sizeof(float));
            break;
        }
        case K_MOE_F: { /* routing, permutation, the experts, the weighted sum */
            kern_moe *e = &a->moe;
            moe_pass p = {.train = 1};
            (void)moe_layer_forward(e->out, &e->a, NULL, e->in, &e->w, &e->m, &e->d, N, &p,
                                    e->scratch);
            break;
        }
        case K_MOE_B: {
            kern_moe *e = &a->moe;
            moe_pass p = {.train = 1};
            (void)moe_layer_backward(e->din, &e->dw, e->dout, &e->a, e->in, &e->w, &e->m, &e->d, &p,
                                     e->scratch);
            break;
        }
        case K_GEMM_S: { /* a linear layer, forward and backward: (N, C) -> (N, OUT) */
            int OUT = KC;
            float *o = a->big, *wt = a->big + (size_t)3 * N * KF,
                  *dwt = a->big + (size_t)2 * N * KF;
            nn_linear_forward(NULL, o, a->x, wt, a->b, N, KC, OUT);
            nn_linear_backward(NULL, a->z, dwt, a->db, o, a->x, wt, N, KC, OUT);
            break;
        }
        }
    }
    return (mtc_thread_cpu_s() - t0) / reps;
}

/* Push this thread's data out of its core's cache (a layer's activations
 * and weights come from memory in a step: each is touched once per
 * microbatch, and a microbatch's buffers outgrow the cache). */
static void evict(kern_arg *a) {
    volatile float sum = 0;
    for (size_t i = 0; i < KEVICT; i += 16)
        sum += a->evict[i];
}

/* One cold call of kernel k: CPU seconds, less the clock's own cost. */
static double cold_call(kern_arg *a, int k) {
    evict(a);
    double t = run_kernel(a, k, 1) - a->clock_s;
    return t > 0 ? t : 0;
}

static void *kern_thread(void *vp) {
    kern_arg *a = vp;
    double c0 = mtc_thread_cpu_s(), c1 = mtc_thread_cpu_s();
    for (int i = 0; i < 20; i++) /* the clock's cost: the fastest pair of reads */
        c0 = mtc_thread_cpu_s(), c1 = mtc_thread_cpu_s() - c0 < c1 ? mtc_thread_cpu_s() - c0 : c1;
    a->clock_s = c1 < 1e-5 ? c1 : 0;
    for (int k = 0; k < K_N; k++) {
        if (k == K_LAYER) continue; /* with K_GEMM_S below */
        if ((k == K_MOE_F || k == K_MOE_B) != a->moe_phase) continue;
        double one = run_kernel(a, k, 1); /* warm-up (oneDNN makes its kernels) and size */
        one = run_kernel(a, k, 1);
        int reps = one > 0 ? (int)(0.01 / one) + 1 : 50;
        if (reps > KCALLS) reps = KCALLS;
        if (k != K_GEMM_S) {
            double t = 0;
            for (int r = 0; r < reps; r++)
                t += cold_call(a, k);
            a->s[a->round][k] = t / reps;
            continue;
        }
        /* the GEMM fit compares the two: interleaved, so that both meet
         * the same load */
        run_kernel(a, K_LAYER, 1);
        double small = 0, layer = 0;
        int n = reps / 4 + 1;
        for (int r = 0; r < n; r++) {
            for (int q = 0; q < 4; q++)
                small += cold_call(a, K_GEMM_S);
            layer += cold_call(a, K_LAYER);
        }
        a->s[a->round][K_GEMM_S] = small / (4.0 * n), a->s[a->round][K_LAYER] = layer / n;
    }
    return NULL;
}

/* Small values of both signs, a different pattern per seed. */
static void fill_in(float *x, size_t n, int seed) {
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((i * 2654435761u + (unsigned)seed) % 1000) * 1e-3f - 0.5f;
}

static float *fill(size_t n, int seed) {
    float *x = malloc(n * sizeof(float));
    if (x) fill_in(x, n, seed);
    return x;
}

/* A serial MoE layer of KE experts over the N = KB x KT tokens: weights,
 * gradients, activations and scratch in one block; one forward routes the
 * tokens (router weights and inputs filled as the others: the experts get
 * uneven rows, as a step's routing gives them) and records the GEMMs the
 * layer then runs. */
static int moe_alloc(kern_moe *e, int seed) {
    const int N = KB * KT, C = KC, F = KF;
    memset(e, 0, sizeof *e);
    e->m.num_experts = KE, e->m.topk = KK, e->m.ffn_hidden_size = F, e->m.lb = MOE_LB_NONE;
    e->d = (moe_dims){.C = C, .E = KE, .k = KK, .F = F, .bias = 1, .ep = 1, .etp = 1};
    size_t acts = moe_acts_floats(&e->m, &e->d, N), scr = moe_scratch_floats(&e->m, &e->d, N);
    size_t per = 2 * ((size_t)F * C + F + (size_t)C * F + C); /* an expert and its gradient */
    size_t n = KE * per + 2 * (size_t)KE * C + 4 * (size_t)N * C + acts + scr;
    float *p = e->mem = malloc(n * sizeof(float));
    if (!p) return 0;
    fill_in(p, n, seed);
    for (int x = 0; x < KE; x++) {
        e->fc1w[x] = p, p += (size_t)F * C, e->fc1b[x] = p, p += F;
        e->fc2w[x] = p, p += (size_t)C * F, e->fc2b[x] = p, p += C;
        e->dfc1w[x] = p, p += (size_t)F * C, e->dfc1b[x] = p, p += F;
        e->dfc2w[x] = p, p += (size_t)C * F, e->dfc2b[x] = p, p += C;
    }
    e->router = p, p += (size_t)KE * C, e->drouter = p, p += (size_t)KE * C;
    e->in = p, p += (size_t)N * C, e->out = p, p += (size_t)N * C;
    e->dout = p, p += (size_t)N * C, e->din = p, p += (size_t)N * C;
    e->acts = p, p += acts, e->scratch = p;
    e->w = (moe_weights){e->router, NULL, e->fc1w, e->fc1b, e->fc2w, e->fc2b};
    e->dw = (moe_weights){e->drouter, NULL, e->dfc1w, e->dfc1b, e->dfc2w, e->dfc2b};
    moe_acts_bind(&e->a, e->acts, &e->m, &e->d, N);
    moe_pass pass = {.train = 1};
    if (moe_layer_forward(e->out, &e->a, NULL, e->in, &e->w, &e->m, &e->d, N, &pass, e->scratch) !=
        MTC_OK)
        return 0;
    int blocked = nn_pool_lowp(NULL) != NULL;
    moe_gemms *g = &e->g;
    g->flops_f = 2.0 * N * C * KE, g->calls_f = 1; /* the router's logits */
    for (int x = 0, calls; x < KE; x++) {
        double r = moe_gemm_rows(e->a.counts[x], blocked, &calls);
        g->rows += e->a.counts[x];
        g->flops_f += 2.0 * r * ((double)C * F + (double)F * C), g->calls_f += 2.0 * calls;
    }
    return g->rows > 0;
}

static void kern_free(kern_arg *a) {
    free(a->x), free(a->y), free(a->z), free(a->w), free(a->b), free(a->mean), free(a->rstd);
    free(a->dw), free(a->db), free(a->qkv), free(a->dqkv), free(a->out), free(a->lse);
    free(a->logits), free(a->loss), free(a->p), free(a->g), free(a->m), free(a->v), free(a->big);
    free(a->tgt), free(a->lx), free(a->lo), free(a->lw), free(a->ldw), free(a->ldx);
    free(a->evict), free(a->moe.mem);
}

static int kern_alloc(kern_arg *a, int seed, int moe_phase) {
    size_t N = (size_t)KB * KT;
    a->x = fill(N * KC, seed), a->y = fill(N * KC, seed + 1), a->z = fill(N * KC, seed + 2);
    a->w = fill(KC, seed + 3), a->b = fill(KF, seed + 4), a->mean = fill(N, 0);
    a->rstd = fill(N, 0), a->dw = fill(KC, 0), a->db = fill(KF, 0);
    a->qkv = fill(N * 3 * KC, seed + 5), a->dqkv = fill(N * 3 * KC, 0);
    a->out = fill(N * KC, 0), a->lse = fill((size_t)KB * KC * KT, 0);
    a->logits = fill(N * KV, 0), a->loss = fill(N, 0);
    a->p = fill(KADAM, seed + 6), a->g = fill(KADAM, seed + 7), a->m = fill(KADAM, 0);
    a->v = fill(KADAM, 0), a->big = fill(N * KF * 4, seed + 8);
    a->tgt = malloc(N * sizeof(int));
    a->lx = fill(4 * N * KF, seed + 9), a->lo = fill(4 * N * KF, 0);
    a->lw = fill((size_t)4 * KF * KC, seed + 10), a->ldw = fill((size_t)4 * KF * KC, 0);
    a->ldx = fill(N * KF, 0), a->evict = fill(KEVICT, seed + 11);
    a->moe_phase = moe_phase;
    if (moe_phase && !moe_alloc(&a->moe, seed + 12)) return 0;
    if (!a->x || !a->y || !a->z || !a->w || !a->b || !a->mean || !a->rstd || !a->dw || !a->db ||
        !a->qkv || !a->dqkv || !a->out || !a->lse || !a->logits || !a->loss || !a->p || !a->g ||
        !a->m || !a->v || !a->big || !a->tgt || !a->lx || !a->lo || !a->lw || !a->ldw || !a->ldx ||
        !a->evict)
        return 0;
    for (size_t i = 0; i < KADAM; i++)
        a->v[i] = 1e-4f, a->m[i] = 0;
    for (size_t i = 0; i < N; i++)
        a->tgt[i] = (int)(i * 7 % KV);
    /* a valid forward for the attention backward: out and lse of the inputs */
    nn_attention_shape s = nn_attention_shape_qkv(KB, KT, KC / 64, 64);
    nn_attention_forward(NULL, a->out, a->lse, a->qkv, a->qkv + KC, a->qkv + 2 * KC, &s, NULL);
    nn_layernorm_forward(NULL, a->y, a->mean, a->rstd, a->x, a->w, a->b, (int)N, KC);
    return 1;
}

static int cmp_d(const void *x, const void *y) {
    double u = *(const double *)x, v = *(const double *)y;
    return u < v ? -1 : u > v;
}

/* The median over the rounds of one kernel on one thread: a training step
 * meets the load's typical contention, not its quietest moment. */
static double median_round(const kern_arg *a, int k, int rounds) {
    double v[KROUNDS];
    for (int r = 0; r < rounds; r++)
        v[r] = a->s[r][k];
    qsort(v, (size_t)rounds, sizeof v[0], cmp_d);
    return rounds % 2 ? v[rounds / 2] : (v[rounds / 2 - 1] + v[rounds / 2]) / 2;
}

/* Causal tiles of one (b, head) the tiled kernel computes at T = KT. */
static double tiles_at(int T) {
    double nb = (T + 63) / 64;
    return nb * (nb + 1) / 2;
}

/* The kernels of one phase on every core, `rounds` rounds: s[k] the mean
 * over the threads of each kernel's median round; the MoE layer's GEMMs
 * (moe_phase) the mean over the threads. */
static mtc_result_t measure(int cores, int rounds, int moe_phase, double s[K_N], moe_gemms *moe) {
    kern_arg *a = calloc((size_t)cores, sizeof *a);
    pthread_t *th = calloc((size_t)cores, sizeof *th);
    mtc_result_t rc = a && th ? MTC_OK : mtc_error(MTC_ERR_OUT_OF_MEMORY, "bench-peak: kernels");
    for (int i = 0; rc == MTC_OK && i < cores; i++)
        if (!kern_alloc(&a[i], 17 * i + 1, moe_phase))
            rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "bench-peak: kernel buffers");
    for (int r = 0; rc == MTC_OK && r < rounds; r++) {
        int started = 0;
        for (int i = 0; i < cores; i++)
            a[i].round = r;
        for (int i = 0; i < cores; i++, started++)
            if (pthread_create(&th[i], NULL, kern_thread, &a[i]) != 0) break;
        for (int i = 0; i < started; i++)
            pthread_join(th[i], NULL);
        if (started < cores)
            rc = mtc_error(MTC_ERR_SYSTEM, "bench-peak: could not start %d threads", cores);
    }
    memset(s, 0, K_N * sizeof s[0]);
    memset(moe, 0, sizeof *moe);
    for (int i = 0; rc == MTC_OK && i < cores; i++) {
        for (int k = 0; k < K_N; k++)
            s[k] += median_round(&a[i], k, rounds) / cores;
        moe->rows += a[i].moe.g.rows / cores, moe->flops_f += a[i].moe.g.flops_f / cores;
        moe->calls_f += a[i].moe.g.calls_f / cores;
    }
    for (int i = 0; a && i < cores; i++)
        kern_free(&a[i]);
    free(a), free(th);
    return rc;
}

static void clamp_args(int *cores, int *rounds) {
    if (*cores < 1) *cores = 1;
    if (*rounds < 1) *rounds = 1;
    if (*rounds > KROUNDS) *rounds = KROUNDS;
}

mtc_result_t mtc_plan_measure_moe_kernels(mtc_plan_kernels *out, int cores, int rounds) {
    clamp_args(&cores, &rounds);
    if (!(out->gemm_rate > 0))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "bench-peak: the MoE layer needs the GEMM fit");
    double s[K_N];
    moe_gemms e;
    MTC_CHECK(measure(cores, rounds, 1, s, &e));
    /* what the layer's GEMMs leave at the rate and call cost fitted
     * (forward the router and one call per expert block and projection;
     * backward twice the FLOPs and the calls: dX and dW) is the routing,
     * permutation, row copies, activation, probability loops and the
     * weighted sum, per row and element of the row's (C + F1 + F) */
    double rel = e.rows * (KC + 2.0 * KF),
           g = e.flops_f / out->gemm_rate + e.calls_f * out->gemm_call;
    double mf = s[K_MOE_F] - g, mb = s[K_MOE_B] - 2 * g;
    out->moe_row_fwd = mf > 0 && rel > 0 ? mf / rel : 0;
    out->moe_row_bwd = mb > 0 && rel > 0 ? mb / rel : 0;
    return MTC_OK;
}

mtc_result_t mtc_plan_measure_kernels(mtc_plan_kernels *out, int cores, int rounds) {
    clamp_args(&cores, &rounds);
    double s[K_N];
    moe_gemms none;
    MTC_CHECK(measure(cores, rounds, 0, s, &none));
    memset(out, 0, sizeof *out);
    double N = (double)KB * KT;
    out->norm_fwd = s[K_NORM_F] / (N * KC), out->norm_bwd = s[K_NORM_B] / (N * KC);
    out->gelu_fwd = s[K_GELU_F] / (N * KF), out->gelu_bwd = s[K_GELU_B] / (N * KF);
    out->dropout = s[K_DROP] / (N * KC), out->resid = s[K_RESID] / (N * KC);
    out->xent = s[K_XENT] / (N * KV), out->adam = s[K_ADAM] / KADAM;
    out->gradnorm = s[K_NORM2] / KADAM;
    /* attention: per tile a + b HS, from HS 32 (4 heads) and 64 (2 heads) */
    double tiles32 = KB * 4 * tiles_at(KT), tiles64 = KB * 2 * tiles_at(KT);
    double f32 = s[K_ATT32_F] / tiles32, f64 = s[K_ATT64_F] / tiles64;
    double b32 = s[K_ATT32_B] / tiles32, b64 = s[K_ATT64_B] / tiles64;
    out->attn_fwd_hs = f64 > f32 ? (f64 - f32) / 32 : 0;
    out->attn_fwd_tile = f32 - 32 * out->attn_fwd_hs;
    out->attn_bwd_hs = b64 > b32 ? (b64 - b32) / 32 : 0;
    out->attn_bwd_tile = b32 - 32 * out->attn_bwd_hs;
    if (out->attn_fwd_tile < 0) out->attn_fwd_tile = 0;
    if (out->attn_bwd_tile < 0) out->attn_bwd_tile = 0;
    /* attention dropout: the extra time per visible score (forward draws
     * the mask, backward draws it again) */
    double vis = KB * 2 * (double)KT * (KT + 1) / 2;
    double df = s[K_ATT64_DF] - s[K_ATT64_F], db = s[K_ATT64_DB] - s[K_ATT64_B];
    out->attn_drop = (df > 0 ? df : 0) / vis + (db > 0 ? db : 0) / vis;
    /* GEMM: a linear layer's three calls cost 3 c + FLOPs / R, fitted on a
     * layer's four linears (qkv, proj, fc1, fc2 on their own buffers, as
     * the model's: 12 calls, 12 x the FLOPs of) the 256 x 128 x 128 one
     * (3 calls): the layer's extra 8 x FLOPs over four small ones cost
     * t_layer - 4 t_small, so R is measured with the calls' cost cancelled
     * (peak.c's shape rate, one GEMM whose operands stay in cache, is not
     * used). */
    double fs = 3 * 2.0 * N * KC * KC;
    double fl = 3 * 2.0 * N * ((double)KC * 3 * KC + KC * KC + KC * KF + KF * KC);
    double extra = s[K_LAYER] - 4 * s[K_GEMM_S];
    out->gemm_rate = extra > 0 ? (fl - 4 * fs) / extra : fl / s[K_LAYER];
    out->gemm_call = (s[K_GEMM_S] - fs / out->gemm_rate) / 3;
    if (out->gemm_call < 0) out->gemm_call = 0, out->gemm_rate = fl / s[K_LAYER];
    out->measured = 1;
    return MTC_OK;
}
