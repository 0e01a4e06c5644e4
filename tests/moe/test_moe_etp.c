/* tests/moe/test_moe_etp.c - the MoE layer under expert-tensor parallelism
 * against its serial twin: etp 2 x ep 1 and etp 2 x ep 2 rank-threads
 * (rank = t + etp j: ETP rank t, EP rank j, as Megatron's expert rank
 * generator), both dispatchers, with balanced routing, with every token
 * routed to experts 0 and 1 (with ep 2 the EP rank 1 pair receives
 * nothing), and with capacity (padded). Rank (t, j) holds rows
 * [t F/2, (t+1) F/2) of each of its EP rank's experts' fc1 and those
 * columns of fc2. Each rank's tokens are a formula of its rank; the serial
 * layer on the same tokens gives the expected output, input gradient and
 * router gradient, and the world sum of the serial expert gradients,
 * sliced, gives each rank's expert gradients. No biases (Megatron refuses
 * them with etp > 1). Tolerance 1e-5 relative. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "moe/moe.h"
#include "test.h"

enum { HID = 16, NTOK = 10, NE = 4, FF = 8, ETP = 2, FT = FF / ETP };

typedef struct {
    moe_dispatcher disp;
    int routing; /* 0 balanced, 1 all to experts 0 and 1, 2 capacity 0.75 padded */
    int ep;
} etp_case;

static float val(int a, int b, int c) { /* deterministic, in (-0.5, 0.5) */
    unsigned h = (unsigned)(a * 7919 + b * 104729 + c * 1299709) * 2654435761u;
    return (float)((h >> 8) & 0xffff) / 65536.0f - 0.5f;
}

/* Whole experts (serial) or rank t's slices (F = FT). */
typedef struct {
    float router[NE * HID], fc1[NE][FF * HID], fc2[NE][HID * FF];
    float drouter[NE * HID], dfc1[NE][FF * HID], dfc2[NE][HID * FF];
    float *w1[NE], *w2[NE], *dw1[NE], *dw2[NE], *nob[NE];
    moe_weights w, dw;
} params;

static float fc1_at(int e, int f, int c) { return 0.5f * val(2, e, f * HID + c); }
static float fc2_at(int e, int c, int f) { return 0.5f * val(3, e, c * FF + f); }

/* t < 0: whole experts; else ETP rank t's rows of fc1 and columns of fc2 */
static void params_init(params *p, int routing, int t) {
    memset(p, 0, sizeof *p);
    for (int i = 0; i < NE * HID; i++)
        p->router[i] =
            routing == 1 ? (i / HID < 2 ? 0.05f * (float)(i / HID + 1) : 0.0f) : val(1, i, 0);
    int F = t < 0 ? FF : FT, f0 = t < 0 ? 0 : t * FT;
    for (int e = 0; e < NE; e++) {
        for (int f = 0; f < F; f++)
            for (int c = 0; c < HID; c++)
                p->fc1[e][f * HID + c] = fc1_at(e, f0 + f, c),
                                    p->fc2[e][c * F + f] = fc2_at(e, c, f0 + f);
        p->w1[e] = p->fc1[e], p->w2[e] = p->fc2[e], p->dw1[e] = p->dfc1[e], p->dw2[e] = p->dfc2[e];
    }
    p->w = (moe_weights){p->router, NULL, p->w1, p->nob, p->w2, p->nob};
    p->dw = (moe_weights){p->drouter, NULL, p->dw1, p->nob, p->dw2, p->nob};
}

typedef struct {
    mtc_comm_t ep, etp, tpep; /* NULL: serial */
} groups;

/* One layer forward + backward on rank `rank`'s tokens. */
static mtc_result_t run(const etp_case *c, const groups *g, int rank, params *p, float *out,
                        float *din) {
    mtc_moe_config m = {.num_experts = NE, .topk = 2, .aux_coeff = 0.01f, .z_coeff = 0.001f};
    if (c->routing == 2) m.capacity_factor = 0.75f, m.pad_to_capacity = 1;
    m.dispatcher = c->disp;
    int par = g->tpep != NULL;
    moe_dims d = {HID, NE, 2, par ? FT : FF, 0, 0, par ? c->ep : 1, par ? ETP : 1};
    float x[NTOK * HID], dout[NTOK * HID];
    for (int i = 0; i < NTOK * HID; i++) {
        x[i] = c->routing == 1 ? 1.0f + 0.1f * val(6, rank, i) : 2.0f * val(6, rank, i);
        dout[i] = val(7, rank, i);
    }
    float *acts = calloc(moe_acts_floats(&m, &d, NTOK), sizeof(float));
    float *scratch = calloc(moe_scratch_floats(&m, &d, NTOK), sizeof(float));
    moe_acts a;
    moe_acts_bind(&a, acts, &m, &d, NTOK);
    moe_pass pass = {.train = 1,
                     .record = 1,
                     .aux_scale = 0.5f,
                     .seq_B = 1,
                     .ep = g->ep,
                     .etp = g->etp,
                     .tpep = g->tpep};
    mtc_result_t rc = moe_layer_forward(out, &a, NULL, x, &p->w, &m, &d, NTOK, &pass, scratch);
    if (rc == MTC_OK)
        rc = moe_layer_backward(din, &p->dw, dout, &a, x, &p->w, &m, &d, &pass, scratch);
    free(acts);
    free(scratch);
    return rc;
}

static int close_to(float a, float b, double bmax) {
    return fabs((double)a - b) <= 1e-7 + 1e-5 * (fabs((double)b) + 0.01 * bmax);
}

static int close_all(const float *a, const float *b, size_t n) {
    double bmax = 0;
    for (size_t i = 0; i < n; i++)
        bmax = fmax(bmax, fabs((double)b[i]));
    for (size_t i = 0; i < n; i++)
        if (!close_to(a[i], b[i], bmax)) return 0;
    return 1;
}

static const etp_case *cur;
static atomic_int empty_ranks;

static mtc_result_t rank_main(mtc_comm_t world, void *arg) {
    (void)arg;
    int r = mtc_comm_rank(world), t = r % ETP, j = r / ETP, P = cur->ep;
    groups ser_g = {0}, g = {0};
    MTC_CHECK(mtc_comm_split(world, j, t, "etp", &g.etp));
    if (P > 1) MTC_CHECK(mtc_comm_split(world, t, j, "ep", &g.ep));
    g.tpep = world;
    params *ser = calloc(1, sizeof *ser), *par = calloc(1, sizeof *par);
    params_init(ser, cur->routing, -1), params_init(par, cur->routing, t);
    float out_s[NTOK * HID], din_s[NTOK * HID], out_p[NTOK * HID], din_p[NTOK * HID];
    MTC_CHECK(run(cur, &ser_g, r, ser, out_s, din_s));
    MTC_CHECK(run(cur, &g, r, par, out_p, din_p));
    T_CHECKF(close_all(out_p, out_s, NTOK * HID), "rank %d: output", r);
    T_CHECKF(close_all(din_p, din_s, NTOK * HID), "rank %d: d(input)", r);
    T_CHECKF(close_all(par->drouter, ser->drouter, NE * HID), "rank %d: router grad", r);
    /* comm: the serial expert gradients summed over every rank's tokens */
    MTC_CHECK(mtc_all_reduce(ser->dfc1, ser->dfc1, sizeof ser->dfc1 / 4, MTC_DTYPE_F32, MTC_OP_SUM,
                             world));
    MTC_CHECK(mtc_all_reduce(ser->dfc2, ser->dfc2, sizeof ser->dfc2 / 4, MTC_DTYPE_F32, MTC_OP_SUM,
                             world));
    int El = NE / P, nonzero = 0;
    for (int e = j * El; e < (j + 1) * El; e++) {
        double m1 = 0, m2 = 0;
        for (int i = 0; i < FF * HID; i++)
            m1 = fmax(m1, fabs(ser->dfc1[e][i])), m2 = fmax(m2, fabs(ser->dfc2[e][i]));
        int good = 1;
        for (int f = 0; f < FT; f++)
            for (int c = 0; c < HID; c++) {
                good &=
                    close_to(par->dfc1[e][f * HID + c], ser->dfc1[e][(t * FT + f) * HID + c], m1);
                good &= close_to(par->dfc2[e][c * FT + f], ser->dfc2[e][c * FF + t * FT + f], m2);
                nonzero += par->dfc1[e][f * HID + c] != 0;
            }
        T_CHECKF(good, "rank %d (etp %d, ep %d): expert %d's slice gradients", r, t, j, e);
    }
    if (!nonzero) atomic_fetch_add(&empty_ranks, 1);
    free(ser), free(par);
    mtc_comm_free(g.etp), mtc_comm_free(g.ep);
    return MTC_OK;
}

int main(void) {
    static const char *rname[] = {"balanced", "all to experts 0, 1", "capacity, padded"};
    for (int ep = 1; ep <= 2; ep++)
        for (int disp = 0; disp < 2; disp++)
            for (int routing = 0; routing < 3; routing++) {
                etp_case c = {(moe_dispatcher)disp, routing, ep};
                cur = &c;
                atomic_store(&empty_ranks, 0);
                mtc_launch_opts o = {
                    .backend = MTC_BACKEND_SHM, .world_size = ETP * ep, .timeout_s = 60};
                mtc_result_t rc = mtc_launch(&o, rank_main, NULL);
                T_CHECKF(rc == MTC_OK, "etp %d ep %d %s %s: %s %s", ETP, ep,
                         disp ? "alltoall" : "allgather", rname[routing], mtc_result_name(rc),
                         mtc_error_detail());
                if (routing == 1 && ep == 2) /* EP rank 1's two ETP ranks own experts 2, 3 */
                    T_CHECKF(atomic_load(&empty_ranks) == ETP, "ep 2: %d ranks got no tokens",
                             atomic_load(&empty_ranks));
                printf("  etp %d ep %d %-9s %-20s ok\n", ETP, ep, disp ? "alltoall" : "allgather",
                       rname[routing]);
            }
    return T_DONE();
}
