/* tests/plan/test_plan_fsdp.c - `mtc plan`'s price of a Megatron-FSDP step
 * in closed form, on a 2-layer GPT (hidden 64, 4 heads, sequence 128,
 * vocabulary 256, tied) on dp 2 with 2 microbatches of 1:
 *   - units (padded to whole pages per shard: multiples of 2 x 1024 floats):
 *     embedding (256 + 128) x 64 = 24576, a layer 12 C^2 + 13 C = 49984 ->
 *     51200, the head's final norm 2 C = 128 -> 2048; T = 129024 floats;
 *   - optim_grads_params: forward all-gathers M (n + 1) - (M - 1) = 9 (the
 *     tied head reads the embedding again; the second microbatch finds the
 *     first layer resident), 2 (T + e) - l1 bytes; backward M (n - 2) = 4,
 *     2 (T - h - e); reduce-scatters M n = 8 of 2 T; optim_grads: the 4
 *     units all-gathered once after the step;
 *   - each priced by the alpha-beta form per call:
 *     (P - 1) / P bytes / bw + calls ((P - 1) lat + sync);
 *   - the page pool: 2 x (P - 1) / P of the gathered and reduced bytes in
 *     4 KiB pages at page_move_ns, plus the cleared gradient pages at mem_bw;
 *   - overlap on a host with a core per rank and collectives far cheaper
 *     than the compute: only each microbatch's first gather of each pass and
 *     last reduce-scatter stay exposed; on ranks sharing cores nothing hides;
 *   - HFSDP on 2 instances x 2 (dp 4, 2 microbatches): units padded to
 *     whole pages per slice of 4 (24576, 53248 x 2, 4096; T = 135168), Adam
 *     on the slice (dp rank 3: 6144 + 2 x 10048; the largest, rank 0:
 *     6144 + 2 x 13312 + 128), no all-reduce over the instances but 4
 *     reduce-scatters and 4 all-gathers of the shards (T / 2) over them,
 *     blocking.
 * Pricing only: no run is timed. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dp/fsdp.h"
#include "plan/plan.h"
#include "test.h"

static mtc_plan_layout small(int strategy, int overlap) {
    mtc_plan_layout l;
    memset(&l, 0, sizeof l);
    l.model.num_layers = 2, l.model.hidden_size = 64, l.model.num_heads = 4;
    l.model.ffn_hidden_size = 256, l.model.seq_length = 128;
    l.model.max_position_embeddings = 128, l.model.vocab_size = 256;
    l.model.padded_vocab_size = 256;
    l.world = 2, l.tp = l.pp = l.vpp = l.cp = 1;
    l.micro_batch = 1, l.global_batch = 4;
    l.distopt = 1, l.fsdp_strategy = strategy;
    l.overlap_grad_reduce = l.overlap_param_gather = overlap;
    return l;
}

/* A CPU host of `cores` cores, bw 1 GB/s, lat 2 us, sync 3 us, mem_bw
 * 4 GB/s, and a page move of 500 ns; everything else slow enough (GEMMs at
 * 1 GFLOP/s) that the collectives are far cheaper than the compute. */
static const char *host(int cores) {
    static char buf[512];
    snprintf(buf, sizeof buf,
             "{\"name\": \"f\", \"is_cpu\": true, \"devices_per_node\": %d, "
             "\"peak_tflops_fp32\": 0.001, \"hbm_gb\": 8, \"mem_bw_gbps\": 4, "
             "\"intra\": {\"bw_gbps\": 1, \"lat_us\": 2, \"sync_us\": 3}, "
             "\"inter\": {\"bw_gbps\": 1, \"lat_us\": 2, \"sync_us\": 3}}",
             cores);
    return buf;
}

static int near(double a, double b) { return fabs(a - b) <= 1e-12 * fmax(fabs(a), fabs(b)); }

/* calls collectives over 2 ranks of `bytes` in all */
static double coll(double bytes, double calls) { return bytes / 2 / 1e9 + calls * (2e-6 + 3e-6); }

static void test_counts_and_time(void) {
    const double T = 129024 * 4.0, e = 24576 * 4.0, l1 = 51200 * 4.0, h = 2048 * 4.0;
    mtc_plan_layout l = small(MTC_FSDP_OPTIM_GRADS_PARAMS, 0);
    mtc_plan_memory mem;
    T_CHECK(mtc_plan_memory_peak(&l, &mem) == MTC_OK);
    const mtc_plan_fsdp_comm *c = &mem.fsdp_comm;
    T_CHECK(mem.buffer_numel == 129024);
    T_CHECKF(c->units == 4 && c->ag_fwd_calls == 9 && c->ag_bwd_calls == 4 && c->rs_calls == 8,
             "units %g calls fwd %g bwd %g rs %g", c->units, c->ag_fwd_calls, c->ag_bwd_calls,
             c->rs_calls);
    T_CHECKF(c->ag_fwd_bytes == 2 * (T + e) - l1 && c->ag_bwd_bytes == 2 * (T - h - e) &&
                 c->rs_bytes == 2 * T && c->ag_step_calls == 0 && c->ar_calls == 0,
             "bytes fwd %g bwd %g rs %g", c->ag_fwd_bytes, c->ag_bwd_bytes, c->rs_bytes);
    mtc_plan_machine m;
    mtc_plan_time t;
    T_CHECK(mtc_plan_machine_parse(host(2), "t", &m) == MTC_OK);
    T_CHECK(mtc_plan_time_step(&l, &m, 0, &t) == MTC_OK);
    T_CHECKF(near(t.fsdp_ag_fwd_s, coll(2 * (T + e) - l1, 9)), "fwd %g", t.fsdp_ag_fwd_s);
    T_CHECKF(near(t.fsdp_ag_bwd_s, coll(2 * (T - h - e), 4)), "bwd %g", t.fsdp_ag_bwd_s);
    T_CHECKF(near(t.fsdp_rs_s, coll(2 * T, 8)), "rs %g", t.fsdp_rs_s);
    double all = t.fsdp_ag_fwd_s + t.fsdp_ag_bwd_s + t.fsdp_rs_s;
    T_CHECK(near(t.dp_comm_total_s, all) && near(t.dp_comm_s, all) && near(t.fsdp_exposed_s, all));
    T_CHECK(t.fsdp_page_s == 0); /* no page_move_ns: not priced */
    /* the distributed optimizer's step: one reduce-scatter and one gather */
    T_CHECK(near(t.step_s, t.bubble_s + t.compute_s + t.elementwise_s + t.dp_comm_s));

    /* optim_grads: the reduce-scatters as above, one gather of every unit */
    mtc_plan_layout g = small(MTC_FSDP_OPTIM_GRADS, 0);
    T_CHECK(mtc_plan_memory_peak(&g, &mem) == MTC_OK);
    T_CHECK(c->ag_step_calls == 4 && c->ag_step_bytes == T && c->ag_fwd_calls == 0 &&
            c->ag_bwd_calls == 0 && c->rs_calls == 8);
    T_CHECK(mtc_plan_time_step(&g, &m, 0, &t) == MTC_OK);
    T_CHECK(near(t.fsdp_ag_step_s, coll(T, 4)) && near(t.fsdp_rs_s, coll(2 * T, 8)));

    /* --bf16: the units gathered as bf16 (half the bytes, the calls as
     * fp32's), the fp32 main params the shard, the bf16 copy shard + 2
     * of the largest unit's other halves */
    mtc_plan_layout b = small(MTC_FSDP_OPTIM_GRADS_PARAMS, 0);
    b.precision = MTC_PLAN_BF16;
    T_CHECK(mtc_plan_memory_peak(&b, &mem) == MTC_OK);
    T_CHECKF(c->ag_width == 2 && c->ag_fwd_calls == 9 &&
                 c->ag_fwd_bytes == (2 * (T + e) - l1) / 2 && c->ag_bwd_bytes == (T - h - e) &&
                 c->rs_bytes == 2 * T,
             "bf16 fwd %g bwd %g", c->ag_fwd_bytes, c->ag_bwd_bytes);
    T_CHECKF(mem.fsdp_shard_numel == 129024 / 2 &&
                 mem.fsdp_param_numel == 129024 / 2 + 2 * 51200 / 2 &&
                 mem.param_bytes == (size_t)(129024 / 2) * 4 + (size_t)(129024 / 2 + 51200) * 2,
             "bf16 params %zu", mem.param_bytes);
}

static void test_pages_and_overlap(void) {
    const double T = 129024 * 4.0, e = 24576 * 4.0, l1 = 51200 * 4.0, h = 2048 * 4.0;
    char json[640];
    snprintf(json, sizeof json, "%s", host(2));
    /* a page move of 500 ns (kernels_ns needs its other keys; all 0) */
    char *end = strrchr(json, '}');
    snprintf(end, sizeof json - (size_t)(end - json),
             ", \"kernels_ns\": {\"norm_fwd\": 0, \"norm_bwd\": 0, \"gelu_fwd\": 0, \"gelu_bwd\": "
             "0, \"dropout\": 0, \"resid\": 0, \"xent\": 0, \"adam\": 0, \"attn_fwd_tile\": 0, "
             "\"attn_fwd_hs\": 0, \"attn_bwd_tile\": 0, \"attn_bwd_hs\": 0, \"attn_drop\": 0, "
             "\"gemm_call\": 0, \"gradnorm\": 0, \"moe_row_fwd\": 0, \"moe_row_bwd\": 0, "
             "\"gemm_gflops\": 0, \"page_move_ns\": 500}}");
    mtc_plan_machine m;
    T_CHECKF(mtc_plan_machine_parse(json, "t", &m) == MTC_OK, "%s", mtc_error_detail());
    T_CHECK(near(m.kern.page_move, 500e-9));
    mtc_plan_layout l = small(MTC_FSDP_OPTIM_GRADS_PARAMS, 0);
    mtc_plan_time t;
    T_CHECK(mtc_plan_time_step(&l, &m, 0, &t) == MTC_OK);
    /* a core per rank at share 1: the moves at their cost, in and out */
    double params = (2 * (T + e) - l1 + 2 * (T - h - e)) / 2, grads = 2 * T / 2;
    double page = 2 * (params + grads) / 4096 * 500e-9 + grads / 4e9;
    T_CHECKF(near(t.fsdp_page_s, page), "page %g vs %g", t.fsdp_page_s, page);
    T_CHECK(near(t.step_s, t.bubble_s + t.compute_s + t.elementwise_s + t.dp_comm_s + page));

    /* overlap, a core per rank (GEMMs at 1 GFLOP/s dwarf the collectives):
     * per microbatch the first gather of each pass and the last
     * reduce-scatter stay; the forward's and backward's gathers, per call */
    T_CHECK(mtc_plan_machine_parse(host(2), "t", &m) == MTC_OK);
    mtc_plan_layout o = small(MTC_FSDP_OPTIM_GRADS_PARAMS, 1);
    mtc_plan_memory mem;
    T_CHECK(mtc_plan_memory_peak(&o, &mem) == MTC_OK);
    const mtc_plan_fsdp_comm *c = &mem.fsdp_comm;
    /* the prefetch: the embedding once more after the step, a layer per
     * microbatch (the tied head's call turns the backward's prefetch) */
    T_CHECK(c->ag_bwd_calls == 4 + 1 + 2 && c->ag_bwd_bytes == 2 * (T - h - e) + e + 2 * l1);
    T_CHECK(mtc_plan_time_step(&o, &m, 0, &t) == MTC_OK);
    double exposed = 2 * (t.fsdp_ag_fwd_s / c->ag_fwd_calls + t.fsdp_ag_bwd_s / c->ag_bwd_calls +
                          t.fsdp_rs_s / c->rs_calls);
    T_CHECKF(near(t.fsdp_exposed_s, exposed), "exposed %g vs %g", t.fsdp_exposed_s, exposed);
    T_CHECK(near(t.dp_comm_s, exposed));
    /* two ranks on one core: the overlap hides nothing */
    T_CHECK(mtc_plan_machine_parse(host(1), "t", &m) == MTC_OK);
    T_CHECK(mtc_plan_time_step(&o, &m, 0, &t) == MTC_OK);
    T_CHECK(near(t.fsdp_exposed_s, t.fsdp_ag_fwd_s + t.fsdp_ag_bwd_s + t.fsdp_rs_s));
}

static void test_hfsdp(void) {
    const double T = 135168 * 4.0;
    mtc_plan_layout l = small(MTC_FSDP_OPTIM_GRADS_PARAMS, 0);
    l.world = 4, l.global_batch = 8, l.distopt_instances = 2, l.fsdp_outer_optim = 1;
    mtc_plan_memory mem;
    T_CHECK(mtc_plan_memory_rank(&l, 0, 3, &mem) == MTC_OK);
    T_CHECKF(mem.buffer_numel == 135168 && mem.optim_numel == 6144 + 2 * 10048,
             "buffer %lld optim %lld", (long long)mem.buffer_numel, (long long)mem.optim_numel);
    T_CHECK(mtc_plan_memory_peak(&l, &mem) == MTC_OK);
    const mtc_plan_fsdp_comm *c = &mem.fsdp_comm;
    T_CHECKF(mem.optim_numel == 6144 + 2 * 13312 + 128, "largest %lld", (long long)mem.optim_numel);
    T_CHECK(mem.optim_bytes == (size_t)mem.optim_numel * 8);
    T_CHECKF(c->ar_calls == 0 && c->rs_calls == 8 && c->rs_bytes == 2 * T &&
                 c->outer_rs_calls == 4 && c->outer_rs_bytes == T / 2 && c->outer_ag_calls == 4 &&
                 c->outer_ag_bytes == T / 2,
             "ar %g rs %g outer rs %g %g ag %g %g", c->ar_calls, c->rs_calls, c->outer_rs_calls,
             c->outer_rs_bytes, c->outer_ag_calls, c->outer_ag_bytes);
    mtc_plan_machine m;
    mtc_plan_time t;
    T_CHECK(mtc_plan_machine_parse(host(4), "t", &m) == MTC_OK);
    T_CHECK(mtc_plan_time_step(&l, &m, 0, &t) == MTC_OK);
    T_CHECKF(near(t.fsdp_outer_s, 2 * coll(T / 2, 4)), "outer %g vs %g", t.fsdp_outer_s,
             2 * coll(T / 2, 4));
    double all = t.fsdp_ag_fwd_s + t.fsdp_ag_bwd_s + t.fsdp_rs_s + t.fsdp_outer_s;
    T_CHECK(near(t.dp_comm_total_s, all) && near(t.dp_comm_s, all));
    /* one instance: the flag changes nothing */
    l.world = 2, l.global_batch = 4, l.distopt_instances = 1;
    T_CHECK(mtc_plan_memory_peak(&l, &mem) == MTC_OK);
    T_CHECK(mem.buffer_numel == 129024 && c->outer_rs_calls == 0 && c->outer_ag_calls == 0);
}

int main(void) {
    test_counts_and_time();
    test_hfsdp();
    test_pages_and_overlap();
    return T_DONE();
}
