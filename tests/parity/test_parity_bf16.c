/* tests/parity/test_parity_bf16.c - --bf16 on every parallel layout against
 * the serial --bf16 run (the parity harness: K steps in-process on shm
 * rank-threads, per-step loss and grad norm, and the fp32 main params
 * gathered to the serial layout), dropout on.
 *
 * Tolerance, derived. With --bf16 every activation and compute weight is a
 * bf16 value; a layout changes only the fp32 summation order in front of a
 * rounding (TP partial sums, split GEMMs, CP's attention merge, DP's
 * reduction order), about 1e-7 relative. That shifts a rounded value by one
 * bf16 step (2^-8 relative) with probability ~1e-7 / 2^-8 per element, so a
 * few elements of each tensor differ by one bf16 step, in both directions.
 * Loss and grad norm average very many elements: they stay well inside
 * half a bf16 step, 2^-9 = 2e-3 relative, which is the bound for the grad
 * norm; the loss (an average of log-probabilities over every token) is held
 * to 2e-4. The main params are fp32 and move by Adam steps of at most about
 * lr each; a gradient element perturbed by a flip moves its update by a
 * fraction of lr, so a param may differ by up to K * lr * 0.05 plus a bf16
 * step of itself (4e-3 relative), checked per element. (A flipped
 * activation reaches the gradient of every weight downstream, so the share
 * of params outside the fp32 parity bound is not small: measured 25% under
 * TP, 0.4% under DP; it is printed, not bounded.)
 * Pipeline parallelism moves bf16-exact activations between stages and
 * changes no forward summation order: pp 2's losses must equal the serial
 * run's exactly (its grad norm sums the stages' squares in another order).
 * The serial fp32 run is also compared: its params must fall outside the
 * per-element bound (measured: 17x it), so the bound separates bf16 from
 * fp32 and the test fails if a layout silently ran in fp32.
 * Both GEMM engines (--bf16-gemm dnnl-bf16, fp32) run every layout against
 * their own serial run, and the two serial runs are held to the same bound
 * against each other: the engines compute the same products (exact in
 * fp32) and differ only in the order of the fp32 sums, as layouts do. */
#include "nn/lowp.h"
#include "parity_harness.h"

typedef struct {
    const char *name;
    int tp, sp, pp, dp, cp, distopt, overlap, opg;
} layout;

static mtc_result_t run(result *r, const layout *y, int bf16, nn_bf16_gemm engine) {
    mtc_train_config c;
    base_config(&c, 0.1f, r->loss, r->norm, r->params);
    c.bf16 = bf16;
    c.bf16_gemm = bf16 ? (int)engine : 0;
    c.grid.tp = y->tp ? y->tp : 1, c.grid.pp = y->pp ? y->pp : 1, c.grid.cp = y->cp ? y->cp : 1;
    c.parallel.tp.sequence_parallel = y->sp;
    c.world_size =
        (y->tp ? y->tp : 1) * (y->pp ? y->pp : 1) * (y->dp ? y->dp : 1) * (y->cp ? y->cp : 1);
    c.use_distributed_optimizer = y->distopt, c.overlap_grad_reduce = y->overlap;
    c.overlap_param_gather = y->opg;
    return parity_train(&c);
}

/* 1 when a is within the bf16 tolerance of s; prints one line. */
static int compare_bf16(const char *name, const result *a, const result *s, int same_loss) {
    double wl = 0, wn = 0, wp = 0;
    size_t tight = 0, n = 0, wi = 0;
    int exact = 1;
    for (int k = 0; k < K; k++) {
        double el = fabs(a->loss[k] - s->loss[k]) / fabs(s->loss[k]);
        double en = fabs(a->norm[k] - s->norm[k]) / fabs(s->norm[k]);
        if (el > wl) wl = el;
        if (en > wn) wn = en;
        exact &= a->loss[k] == s->loss[k];
    }
    for (size_t i = 0; i < g_nparams; i++) {
        if (g_skip[i]) continue;
        double d = fabs((double)a->params[i] - s->params[i]);
        double lim = 4e-3 * fabs(s->params[i]) + K * 1e-2 * 0.05;
        if (d / lim > wp) wp = d / lim, wi = i;
        tight += d <= 1e-5 * fabs(s->params[i]) + K * 1e-2 * 5e-4;
        n++;
    }
    double frac = (double)tight / (double)n;
    int ok = wl <= 2e-4 && wn <= 2e-3 && wp <= 1.0 && (!same_loss || exact);
    printf("%s %-28s loss rel %.1e, norm rel %.1e, params worst %.2f of tolerance (elem %zu), "
           "%.4f within the fp32 bound%s\n",
           ok ? "ok  " : "FAIL", name, wl, wn, wp, wi, frac, exact ? ", losses exact" : "");
    return ok;
}

int main(void) {
    parity_open_data();
    parity_set_layers(2);
    if (!nn_lowp_available()) {
        printf("skip: mtc was built without oneDNN (--bf16 needs libdnnl-dev)\n");
        return 0;
    }
    result serial, serial32, fp32, r;
    serial.params = calloc(g_nparams, sizeof(float));
    serial32.params = calloc(g_nparams, sizeof(float));
    fp32.params = calloc(g_nparams, sizeof(float));
    r.params = calloc(g_nparams, sizeof(float));
    layout none = {"serial", 0, 0, 0, 0, 0, 0, 0, 0};
    T_CHECK(run(&serial, &none, 1, NN_BF16_GEMM_DNNL) == MTC_OK);
    T_CHECK(run(&serial32, &none, 1, NN_BF16_GEMM_F32) == MTC_OK);
    T_CHECK(run(&fp32, &none, 0, NN_BF16_GEMM_AUTO) == MTC_OK);
    int fails = 0;
    /* the two engines: the same products, fp32 sums in another order */
    fails += !compare_bf16("serial fp32-GEMM engine", &serial32, &serial, 0);
    /* the bounds separate bf16 from fp32: the fp32 run must fail them */
    double fl = 0;
    for (int k = 0; k < K; k++)
        fl = fmax(fl, fabs(fp32.loss[k] - serial.loss[k]) / fabs(serial.loss[k]));
    size_t tight = 0;
    for (size_t i = 0; i < g_nparams; i++)
        tight += fabs((double)fp32.params[i] - serial.params[i]) <=
                 1e-5 * fabs(serial.params[i]) + K * 1e-2 * 5e-4;
    double fw = 0;
    for (size_t i = 0; i < g_nparams; i++)
        fw = fmax(fw, fabs((double)fp32.params[i] - serial.params[i]) /
                          (4e-3 * fabs(serial.params[i]) + K * 1e-2 * 0.05));
    int separated = fw > 1.0;
    printf("%s fp32 vs bf16 serial: loss rel %.1e, params worst %.2f of the bf16 tolerance (must "
           "be > 1), %.4f within the fp32 bound\n",
           separated ? "ok  " : "FAIL", fl, fw, (double)tight / (double)g_nparams);
    fails += !separated;
    const layout L[] = {
        {"tp2", 2, 0, 0, 0, 0, 0, 0, 0},
        {"tp2 sp", 2, 1, 0, 0, 0, 0, 0, 0},
        {"pp2", 0, 0, 2, 0, 0, 0, 0, 0},
        {"dp2", 0, 0, 0, 2, 0, 0, 0, 0},
        {"dp2 distopt overlap", 0, 0, 0, 2, 0, 1, 1, 1},
        {"dp2 x tp2 distopt", 2, 0, 0, 2, 0, 1, 0, 0},
        {"cp2", 0, 0, 0, 0, 2, 0, 0, 0},
    };
    for (int e = 0; e < 2; e++)
        for (size_t i = 0; i < sizeof L / sizeof L[0]; i++) {
            char name[64];
            snprintf(name, sizeof name, "%s %s", e ? "fp32-GEMM" : "dnnl-bf16", L[i].name);
            T_CHECK(run(&r, &L[i], 1, e ? NN_BF16_GEMM_F32 : NN_BF16_GEMM_DNNL) == MTC_OK);
            fails += !compare_bf16(name, &r, e ? &serial32 : &serial, L[i].pp > 1);
        }
    free(serial.params), free(serial32.params), free(fp32.params), free(r.params);
    free(g_skip);
    data_source_free(g_src);
    (void)compare; /* the harness's fp32 comparison; this test has its own bounds */
    printf("%d failed\n", fails);
    return fails ? 1 : 0;
}
