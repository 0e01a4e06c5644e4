/* tests/plan/test_plan_mfu.c - the planner speaks train's language:
 *   - MFU is mtc_mfu (core/peak.h), the definition mtc train logs: model
 *     FLOPs per second per rank over a rank's peak, a GPU's data-sheet peak
 *     or a host's FMA peak over its ranks; never above 100%, also on a host
 *     whose mtc-sized GEMM rate exceeds its 512^3 figure (103% before);
 *   - flash attention (the GPU machines' default) replaces Korthikanti's
 *     5as/h term by the fp32 log-sum-exp, in closed form;
 *   - vary_cp enumerates every cp the layout check takes: the union of the
 *     fixed-cp searches, each row valid. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/peak.h"
#include "plan/plan.h"
#include "test.h"

static mtc_plan_layout gpt(int L, int h, int a, int s, int V, int world, int mb, int gb) {
    mtc_plan_layout l;
    memset(&l, 0, sizeof l);
    l.model.num_layers = L, l.model.hidden_size = h, l.model.num_heads = a;
    l.model.ffn_hidden_size = 4 * h, l.model.seq_length = s;
    l.model.max_position_embeddings = s, l.model.vocab_size = V, l.model.padded_vocab_size = V;
    l.world = world, l.tp = l.pp = l.vpp = l.cp = 1;
    l.micro_batch = mb, l.global_batch = gb;
    return l;
}

/* A 4-core host whose mtc-sized GEMMs run faster than its 512^3 figure. */
static const char *host(double fma) {
    static char buf[640];
    snprintf(buf, sizeof buf,
             "{\"name\": \"h\", \"is_cpu\": true, \"devices_per_node\": 4, "
             "\"peak_tflops_fp32\": 0.05, \"shape_tflops_fp32\": 0.08, \"cpu_share\": 1, "
             "\"fma_tflops_fp32\": %g, \"hbm_gb\": 8, \"mem_bw_gbps\": 400, "
             "\"intra\": {\"bw_gbps\": 100, \"lat_us\": 0.1}, "
             "\"inter\": {\"bw_gbps\": 100, \"lat_us\": 0.1}}",
             fma);
    return buf;
}

static void test_mfu_cpu(void) {
    mtc_plan_machine m;
    for (int with_fma = 0; with_fma <= 1; with_fma++) {
        T_CHECK(mtc_plan_machine_parse(host(with_fma ? 0.1 : 0), "t", &m) == MTC_OK);
        for (int world = 1; world <= 4; world *= 2) {
            mtc_plan_layout l = gpt(24, 2048, 16, 256, 1024, world, 1, 2 * world);
            T_CHECK(mtc_plan_layout_check(&l) == MTC_OK);
            mtc_plan_time t;
            T_CHECK(mtc_plan_time_step(&l, &m, 0, &t) == MTC_OK);
            /* a rank's peak: the host's 4 cores over the ranks, at the FMA
             * peak when known, else the fastest GEMM rate */
            double core = with_fma ? 0.1e12 : 0.08e12, rank_peak = core * 4 / world;
            double want = t.model_flops / (t.step_s * world) / rank_peak;
            T_CHECKF(fabs(t.mfu / want - 1) < 1e-12, "world %d: mfu %g, want %g", world, t.mfu,
                     want);
            T_CHECKF(t.mfu > 0 && t.mfu <= 1, "world %d fma %d: mfu %g", world, with_fma, t.mfu);
            T_CHECK(fabs(t.mfu - mtc_mfu(t.model_flops, t.step_s, world, rank_peak)) < 1e-15);
        }
    }
}

static void test_mfu_gpu(void) {
    mtc_plan_machine m;
    T_CHECK(mtc_plan_machine_load("dgx-h100", &m) == MTC_OK);
    mtc_plan_layout l = gpt(32, 4096, 32, 4096, 128256, 64, 1, 256);
    l.precision = MTC_PLAN_BF16, l.act_model = MTC_PLAN_ACT_MEGATRON, l.tp = 2;
    l.sequence_parallel = 1, l.distopt = 1;
    T_CHECK(mtc_plan_layout_check(&l) == MTC_OK);
    mtc_plan_time t;
    T_CHECK(mtc_plan_time_step(&l, &m, 0, &t) == MTC_OK);
    /* TFLOP/s per device over the bf16 data-sheet peak */
    T_CHECKF(fabs(t.mfu - t.tflops_per_device * 1e12 / m.peak_flops) < 1e-12, "mfu %g", t.mfu);
    T_CHECK(t.mfu > 0 && t.mfu <= m.achieved);
}

static void test_flash(void) {
    mtc_plan_layout l = gpt(8, 1024, 16, 2048, 32000, 8, 2, 16);
    l.precision = MTC_PLAN_BF16, l.act_model = MTC_PLAN_ACT_MEGATRON;
    for (int tp = 1; tp <= 4; tp *= 2)
        for (int cp = 1; cp <= 2; cp++) {
            l.tp = tp, l.cp = cp, l.sequence_parallel = tp > 1;
            T_CHECK(mtc_plan_layout_check(&l) == MTC_OK);
            l.flash_attention = 0;
            size_t plain = mtc_plan_act_slot_bytes(&l, 4, 0, 0);
            l.flash_attention = 1;
            size_t flash = mtc_plan_act_slot_bytes(&l, 4, 0, 0);
            /* per layer: 5as/h x sbh / t (the whole sequence's keys per cp
             * rank: a x cp heads of s/cp queries) out, 4 a s b / t in */
            double s = 2048.0 / cp, b = 2, h = 1024, a = 16;
            double d = 4 * (5.0 * a * cp * s / h * s * b * h / tp - 4.0 * a * s * b / tp);
            T_CHECKF(fabs(((double)plain - (double)flash) - d) <= 2, "tp %d cp %d: %zu - %zu vs %g",
                     tp, cp, plain, flash, d);
            l.recompute = MTC_PLAN_RECOMPUTE_FULL; /* the layer input only: flash changes nothing */
            size_t full = mtc_plan_act_slot_bytes(&l, 4, 0, 0);
            l.flash_attention = 0;
            T_CHECK(full == mtc_plan_act_slot_bytes(&l, 4, 0, 0));
            l.recompute = MTC_PLAN_RECOMPUTE_NONE;
        }
}

static int same_layout(const mtc_plan_layout *x, const mtc_plan_layout *y) {
    return x->tp == y->tp && x->cp == y->cp && x->pp == y->pp && x->vpp == y->vpp &&
           x->sequence_parallel == y->sequence_parallel && x->distopt == y->distopt;
}

static void test_vary_cp(void) {
    mtc_plan_machine m;
    T_CHECK(mtc_plan_machine_load("dgx-h100", &m) == MTC_OK);
    mtc_plan_layout l = gpt(8, 1024, 16, 4096, 32000, 16, 1, 32);
    l.precision = MTC_PLAN_BF16, l.act_model = MTC_PLAN_ACT_MEGATRON, l.flash_attention = 1;
    mtc_plan_search s = {.vary_sp = 1, .vary_distopt = 1, .vary_vpp = 1, .vary_cp = 1};
    mtc_plan_row *all = NULL;
    int n = 0, total = 0, cps = 0;
    T_CHECK(mtc_plan_enumerate(&l, &m, 0, &s, &all, &n) == MTC_OK);
    s.vary_cp = 0;
    for (int cp = 1; cp <= 16; cp *= 2) {
        mtc_plan_layout b = l;
        b.cp = cp;
        mtc_plan_row *r = NULL;
        int k = 0;
        T_CHECK(mtc_plan_enumerate(&b, &m, 0, &s, &r, &k) == MTC_OK);
        for (int i = 0; i < k; i++) { /* each one is in the merged search */
            int found = 0;
            for (int j = 0; j < n && !found; j++)
                found = same_layout(&r[i].layout, &all[j].layout) &&
                        r[i].time.step_s == all[j].time.step_s;
            T_CHECKF(found, "cp %d: layout %d missing", cp, i);
        }
        total += k, cps += k > 0;
        free(r);
    }
    T_CHECKF(n == total, "%d merged rows, %d from the fixed-cp searches", n, total);
    T_CHECKF(cps >= 3, "only %d cp sizes gave layouts", cps);
    for (int j = 0; j + 1 < n; j++) /* sorted: fitting first, then fastest */
        T_CHECK(all[j].fits > all[j + 1].fits ||
                (all[j].fits == all[j + 1].fits && all[j].time.step_s <= all[j + 1].time.step_s));
    free(all);
}

int main(void) {
    test_mfu_cpu();
    test_mfu_gpu();
    test_flash();
    test_vary_cp();
    return T_DONE();
}
