/* tests/moe/test_moe_ep.c - the MoE layer under expert parallelism against
 * its serial twin: ep 2 and 4 rank-threads, both dispatchers (allgather,
 * alltoall), with balanced routing, with every token routed to experts 0
 * and 1 (the other EP ranks receive nothing and must neither hang nor
 * fail), and with capacity (probs policy, padded to capacity). Each rank's
 * tokens are a formula of (rank, index); the serial layer on the same
 * tokens gives the expected output, input gradient and router gradient on
 * every rank, and the world sum of the serial expert gradients gives each
 * owner's expert gradients (experts a rank does not own stay zero).
 * Tolerance 1e-5 relative: the EP sum runs over ranks in another order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "moe/moe.h"
#include "test.h"

enum { HID = 16, NTOK = 10, NE = 4, FF = 8 };

typedef struct {
    moe_dispatcher disp;
    int routing; /* 0 balanced, 1 all to experts 0 and 1, 2 capacity 0.75 padded */
} ep_case;

static float val(int a, int b, int c) { /* deterministic, in (-0.5, 0.5) */
    unsigned h = (unsigned)(a * 7919 + b * 104729 + c * 1299709) * 2654435761u;
    return (float)((h >> 8) & 0xffff) / 65536.0f - 0.5f;
}

typedef struct {
    float router[NE * HID], fc1[NE][FF * HID], fc1b[NE][FF], fc2[NE][HID * FF], fc2b[NE][HID];
    float drouter[NE * HID], dfc1[NE][FF * HID], dfc1b[NE][FF], dfc2[NE][HID * FF], dfc2b[NE][HID];
    float *w1[NE], *b1[NE], *w2[NE], *b2[NE], *dw1[NE], *db1[NE], *dw2[NE], *db2[NE];
    moe_weights w, dw;
} params;

static void params_init(params *p, int routing) {
    memset(p, 0, sizeof *p);
    for (int i = 0; i < NE * HID; i++)
        p->router[i] =
            routing == 1 ? (i / HID < 2 ? 0.05f * (float)(i / HID + 1) : 0.0f) : val(1, i, 0);
    for (int e = 0; e < NE; e++) {
        for (int i = 0; i < FF * HID; i++)
            p->fc1[e][i] = 0.5f * val(2, e, i), p->fc2[e][i] = 0.5f * val(3, e, i);
        for (int i = 0; i < FF; i++)
            p->fc1b[e][i] = 0.1f * val(4, e, i);
        for (int i = 0; i < HID; i++)
            p->fc2b[e][i] = 0.1f * val(5, e, i);
        p->w1[e] = p->fc1[e], p->b1[e] = p->fc1b[e], p->w2[e] = p->fc2[e], p->b2[e] = p->fc2b[e];
        p->dw1[e] = p->dfc1[e], p->db1[e] = p->dfc1b[e], p->dw2[e] = p->dfc2[e];
        p->db2[e] = p->dfc2b[e];
    }
    p->w = (moe_weights){p->router, NULL, p->w1, p->b1, p->w2, p->b2};
    p->dw = (moe_weights){p->drouter, NULL, p->dw1, p->db1, p->dw2, p->db2};
}

/* One layer forward + backward with ep = size of `ep` (NULL: serial). */
static mtc_result_t run(const ep_case *c, mtc_comm_t ep, int rank, params *p, float *out,
                        float *din) {
    mtc_moe_config m = {.num_experts = NE, .topk = 2, .aux_coeff = 0.01f, .z_coeff = 0.001f};
    if (c->routing == 2) m.capacity_factor = 0.75f, m.pad_to_capacity = 1;
    m.dispatcher = c->disp;
    int P = ep ? mtc_comm_size(ep) : 1;
    moe_dims d = {HID, NE, 2, FF, 0, 1, P, 1};
    float x[NTOK * HID], dout[NTOK * HID];
    for (int i = 0; i < NTOK * HID; i++) {
        x[i] = c->routing == 1 ? 1.0f + 0.1f * val(6, rank, i) : 2.0f * val(6, rank, i);
        dout[i] = val(7, rank, i);
    }
    float *acts = calloc(moe_acts_floats(&m, &d, NTOK), sizeof(float));
    float *scratch = calloc(moe_scratch_floats(&m, &d, NTOK), sizeof(float));
    moe_acts a;
    moe_acts_bind(&a, acts, &m, &d, NTOK);
    moe_pass pass = {.train = 1, .record = 1, .aux_scale = 0.5f, .seq_B = 1, .ep = ep};
    mtc_result_t rc = moe_layer_forward(out, &a, NULL, x, &p->w, &m, &d, NTOK, &pass, scratch);
    if (rc == MTC_OK)
        rc = moe_layer_backward(din, &p->dw, dout, &a, x, &p->w, &m, &d, &pass, scratch);
    free(acts);
    free(scratch);
    return rc;
}

static int close_all(const float *a, const float *b, size_t n) {
    double bmax = 0;
    for (size_t i = 0; i < n; i++)
        bmax = fmax(bmax, fabs((double)b[i]));
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)a[i] - b[i]) <= 1e-7 + 1e-5 * (fabs((double)b[i]) + 0.01 * bmax)))
            return 0;
    return 1;
}

static const ep_case *cur;
static atomic_int empty_ranks;

static mtc_result_t rank_main(mtc_comm_t world, void *arg) {
    (void)arg;
    int r = mtc_comm_rank(world), P = mtc_comm_size(world);
    params *ser = calloc(1, sizeof *ser), *par = calloc(1, sizeof *par);
    params_init(ser, cur->routing), params_init(par, cur->routing);
    float out_s[NTOK * HID], din_s[NTOK * HID], out_p[NTOK * HID], din_p[NTOK * HID];
    MTC_CHECK(run(cur, NULL, r, ser, out_s, din_s));
    MTC_CHECK(run(cur, world, r, par, out_p, din_p));
    T_CHECKF(close_all(out_p, out_s, NTOK * HID), "rank %d of %d: output", r, P);
    T_CHECKF(close_all(din_p, din_s, NTOK * HID), "rank %d of %d: d(input)", r, P);
    T_CHECKF(close_all(par->drouter, ser->drouter, NE * HID), "rank %d of %d: router grad", r, P);
    /* comm: the serial expert gradients summed over the ranks' tokens */
    MTC_CHECK(mtc_all_reduce(ser->dfc1, ser->dfc1, sizeof ser->dfc1 / 4, MTC_DTYPE_F32, MTC_OP_SUM,
                             world));
    MTC_CHECK(mtc_all_reduce(ser->dfc2b, ser->dfc2b, sizeof ser->dfc2b / 4, MTC_DTYPE_F32,
                             MTC_OP_SUM, world));
    int El = NE / P, nonzero = 0;
    for (int e = 0; e < NE; e++) {
        int mine = e / El == r;
        if (mine) {
            T_CHECKF(close_all(par->dfc1[e], ser->dfc1[e], FF * HID), "rank %d expert %d fc1", r,
                     e);
            T_CHECKF(close_all(par->dfc2b[e], ser->dfc2b[e], HID), "rank %d expert %d fc2 bias", r,
                     e);
        }
        for (int i = 0; i < FF * HID; i++) {
            if (!mine) T_CHECK(par->dfc1[e][i] == 0 || (i = FF * HID, 0));
            nonzero += mine && par->dfc1[e][i] != 0;
        }
    }
    if (!nonzero) atomic_fetch_add(&empty_ranks, 1);
    free(ser), free(par);
    return MTC_OK;
}

int main(void) {
    static const char *rname[] = {"balanced", "all to experts 0, 1", "capacity, padded"};
    for (int P = 2; P <= 4; P += 2)
        for (int disp = 0; disp < 2; disp++)
            for (int routing = 0; routing < 3; routing++) {
                ep_case c = {(moe_dispatcher)disp, routing};
                cur = &c;
                atomic_store(&empty_ranks, 0);
                mtc_launch_opts o = {.backend = MTC_BACKEND_SHM, .world_size = P, .timeout_s = 60};
                mtc_result_t rc = mtc_launch(&o, rank_main, NULL);
                T_CHECKF(rc == MTC_OK, "ep %d %s %s: %s %s", P, disp ? "alltoall" : "allgather",
                         rname[routing], mtc_result_name(rc), mtc_error_detail());
                int owners = P == 2 ? 1 : 2; /* ranks owning expert 0 or 1 */
                if (routing == 1)
                    T_CHECKF(atomic_load(&empty_ranks) == P - owners,
                             "ep %d: %d ranks got no tokens, expected %d", P,
                             atomic_load(&empty_ranks), P - owners);
                printf("  ep %d %-9s %-20s ok\n", P, disp ? "alltoall" : "allgather",
                       rname[routing]);
            }
    return T_DONE();
}
