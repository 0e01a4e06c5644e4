/* tests/pp/test_schedule.c - pipeline schedules against Megatron's own
 * outputs (tests/data/megatron/schedules.json, every config and every invalid
 * case), against the schedule-table contract Megatron's code states, and
 * against properties that must hold for every valid layout with pp 1..8,
 * vpp 1..4, M 1..32 and every group size: each (microbatch, chunk) runs
 * forward once and backward once, backward after forward, phase counts add
 * up, and the orders never deadlock under the p2p dependencies. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "pp/schedule.h"
#include "example_json.h"
#include "test.h"

static int json_int(const cJSON *o, const char *key, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valueint : dflt;
}

static void format_ops(char *out, size_t n, const pp_op *ops, int nops) {
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < nops && len < n; i++)
        len += (size_t)snprintf(out + len, n - len, "%s%c%d.%d", i ? " " : "",
                                ops[i].kind == PP_OP_FORWARD ? 'F' : 'B', ops[i].microbatch,
                                ops[i].chunk);
}

static pp_schedule_config config_of(const cJSON *c) {
    return (pp_schedule_config){.pp = json_int(c, "pp", 1),
                                .vpp = json_int(c, "vpp", 0),
                                .num_microbatches = json_int(c, "num_microbatches", 0),
                                .group_size = json_int(c, "microbatch_group_size_per_vp_stage", 0)};
}

static void test_examples(void) {
    cJSON *root = load_example("schedules.json");
    T_CHECK(root != NULL);
    if (!root) return;
    int nconfigs = 0, ninvalid = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "configs")) {
        pp_schedule_config cfg = config_of(c);
        T_CHECK(strcmp(pp_schedule_kind_name(pp_schedule_kind(&cfg)),
                       cJSON_GetObjectItem(c, "schedule")->valuestring) == 0);
        T_CHECK(strcmp(pp_schedule_function_name(pp_schedule_kind(&cfg)),
                       cJSON_GetObjectItem(c, "function")->valuestring) == 0);
        int max_ops = pp_schedule_max_ops(&cfg);
        pp_op *ops = malloc(sizeof *ops * (size_t)max_ops);
        char *got = malloc((size_t)max_ops * 16 + 1);
        const cJSON *r;
        cJSON_ArrayForEach(r, cJSON_GetObjectItem(c, "ranks")) {
            int rank = json_int(r, "rank", -1);
            pp_schedule_counts counts;
            T_CHECK(pp_schedule_build(ops, &counts, &cfg, rank) == MTC_OK);
            T_CHECKF(counts.num_warmup == json_int(r, "num_warmup", -1), "pp=%d rank %d", cfg.pp,
                     rank);
            T_CHECK(counts.num_steady == json_int(r, "num_steady", -1));
            T_CHECK(counts.num_cooldown == json_int(r, "num_cooldown", -1));
            format_ops(got, (size_t)max_ops * 16 + 1, ops, counts.nops);
            const char *want = cJSON_GetObjectItem(r, "ops")->valuestring;
            T_CHECKF(strcmp(got, want) == 0, "pp=%d vpp=%d M=%d rank %d\n got  %s\n want %s",
                     cfg.pp, cfg.vpp, cfg.num_microbatches, rank, got, want);
        }
        free(ops), free(got);
        nconfigs++;
    }
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "invalid")) {
        pp_schedule_config cfg = config_of(c);
        mtc_error_clear();
        T_CHECK(pp_schedule_validate(&cfg) == MTC_ERR_INVALID_ARGUMENT);
        const char *want = cJSON_GetObjectItem(c, "message")->valuestring;
        T_CHECKF(strcmp(mtc_error_detail(), want) == 0, "\n got  %s\n want %s", mtc_error_detail(),
                 want);
        pp_op ops[256];
        pp_schedule_counts counts;
        T_CHECK(pp_schedule_build(ops, &counts, &cfg, 0) == MTC_ERR_INVALID_ARGUMENT);
        ninvalid++;
    }
    T_CHECK(nconfigs >= 4 && ninvalid >= 3);
    cJSON_Delete(root);
}

/* Megatron's stated contract for interleaving: forward k runs table[k],
 * backward k runs (table[k].mb, vpp-1-table[k].chunk), with the table built
 * literally as get_schedule_table does (pp_schedule_table). */
static int check_table_contract(const pp_schedule_config *cfg, const pp_op *ops, int nops) {
    int v = cfg->vpp, M = cfg->num_microbatches, T = M * v, ok = 1;
    int *mb = malloc(sizeof(int) * (size_t)T), *ch = malloc(sizeof(int) * (size_t)T);
    pp_schedule_table(mb, ch, M, v, pp_schedule_group_size(cfg));
    int f = 0, b = 0;
    for (int i = 0; i < nops; i++) {
        if (ops[i].kind == PP_OP_FORWARD)
            ok &= ops[i].microbatch == mb[f] && ops[i].chunk == ch[f], f++;
        else
            ok &= ops[i].microbatch == mb[b] && ops[i].chunk == v - 1 - ch[b], b++;
    }
    free(mb), free(ch);
    return ok;
}

/* Every property of one valid config, all ranks, plus the simulation. */
static void check_config(const pp_schedule_config *cfg, pp_op *ops, pp_schedule_counts *counts,
                         pp_sim_span *spans, int *seen) {
    int pp = cfg->pp, v = pp_schedule_vpp(cfg), M = cfg->num_microbatches, T = M * v;
    int max_ops = pp_schedule_max_ops(cfg), N = pp_schedule_group_size(cfg);
    int fo = cfg->forward_only, ok = 1;
    for (int r = 0; r < pp; r++) {
        pp_op *o = ops + (size_t)r * max_ops;
        pp_schedule_counts *c = &counts[r];
        if (pp_schedule_build(o, c, cfg, r) != MTC_OK) {
            T_CHECKF(0, "build failed pp=%d vpp=%d M=%d N=%d: %s", pp, v, M, N, mtc_error_detail());
            return;
        }
        /* warm-up: Megatron's formulas, clamped */
        int W = v == 1 ? pp - r - 1 : (fo ? T : 2 * (pp - r - 1) + (v - 1) * N);
        if (W > T) W = T;
        ok &= c->num_warmup == W;
        ok &= c->num_steady == T - W;
        ok &= c->num_cooldown == (fo ? 0 : W);
        ok &= c->nops == (fo ? T : 2 * T);
        ok &= c->num_warmup + (fo ? 1 : 2) * c->num_steady + c->num_cooldown == c->nops;
        /* phase shapes: F..F | F B F B .. | B..B */
        for (int i = 0; i < c->nops; i++) {
            pp_op_kind_t want;
            if (i < W)
                want = PP_OP_FORWARD;
            else if (fo)
                want = PP_OP_FORWARD;
            else if (i < W + 2 * c->num_steady)
                want = (i - W) % 2 ? PP_OP_BACKWARD : PP_OP_FORWARD;
            else
                want = PP_OP_BACKWARD;
            ok &= o[i].kind == want;
        }
        /* each (mb, chunk): F once, B once, B after F */
        memset(seen, 0, sizeof(int) * (size_t)T * 2);
        for (int i = 0; i < c->nops; i++) {
            int at = o[i].microbatch * v + o[i].chunk;
            if (o[i].microbatch < 0 || o[i].microbatch >= M || o[i].chunk < 0 || o[i].chunk >= v) {
                ok = 0;
                continue;
            }
            if (o[i].kind == PP_OP_FORWARD)
                seen[2 * at]++;
            else
                ok &= seen[2 * at] == 1, seen[2 * at + 1]++;
        }
        for (int k = 0; k < T; k++)
            ok &= seen[2 * k] == 1 && seen[2 * k + 1] == (fo ? 0 : 1);
        if (v > 1) ok &= check_table_contract(cfg, o, c->nops);
    }
    T_CHECKF(ok, "properties pp=%d vpp=%d M=%d N=%d fo=%d", pp, v, M, N, fo);
    double makespan = 0;
    mtc_result_t rc = pp_schedule_simulate(spans, &makespan, ops, counts, cfg, 1.0, 2.0);
    T_CHECKF(rc == MTC_OK, "deadlock pp=%d vpp=%d M=%d N=%d fo=%d: %s", pp, v, M, N, fo,
             mtc_error_detail());
    /* every rank is busy T*(1+2) (or T); the makespan can't beat that, and with
     * one stage there is no bubble at all */
    double busy = T * (fo ? 1.0 : 3.0);
    T_CHECK(makespan >= busy - 1e-9);
    if (pp == 1) T_CLOSE(makespan, busy, 1e-9, 0);
    /* the bubble in closed form (Narayanan et al. 2021): 1F1B idles (p-1)(t_f+t_b)
     * per rank, interleaving divides that by v, i.e. fraction (p-1)/(m*v) of the
     * busy time; a forward-only fill-and-drain idles (p-1)*t_f */
    if (rc == MTC_OK)
        T_CHECKF(fabs(pp_sim_bubble_fraction(makespan, cfg, 1.0, 2.0) - pp_bubble_formula(cfg)) <
                     1e-9,
                 "bubble pp=%d vpp=%d M=%d N=%d fo=%d: %.6f vs %.6f", pp, v, M, N, fo,
                 pp_sim_bubble_fraction(makespan, cfg, 1.0, 2.0), pp_bubble_formula(cfg));
    if (v == 1 && !fo && rc == MTC_OK) T_CLOSE(makespan, busy + (pp - 1) * 3.0, 1e-9, 0);
    if (v == 1 && fo && rc == MTC_OK) T_CLOSE(makespan, (double)(M + pp - 1), 1e-9, 0);
}

static void test_properties(void) {
    int nvalid = 0, ninvalid = 0;
    int max_ops = 2 * 32 * 4;
    pp_op *ops = malloc(sizeof *ops * 8 * (size_t)max_ops);
    pp_schedule_counts counts[8];
    pp_sim_span *spans = malloc(sizeof *spans * 8 * (size_t)max_ops);
    int *seen = malloc(sizeof(int) * 2 * 32 * 4);
    for (int pp = 1; pp <= 8; pp++)
        for (int v = 1; v <= 4; v++)
            for (int M = 1; M <= 32; M++)
                for (int N = 0; N <= (v > 1 ? M : 0); N++)
                    for (int fo = 0; fo <= 1; fo++) {
                        pp_schedule_config cfg = {.pp = pp,
                                                  .vpp = v,
                                                  .num_microbatches = M,
                                                  .group_size = N,
                                                  .forward_only = fo};
                        int Ne = N ? N : pp;
                        int valid = v == 1 || (pp > 1 && Ne <= M && Ne >= pp &&
                                               (M % Ne == 0 || M % Ne >= pp));
                        mtc_result_t rc = pp_schedule_validate(&cfg);
                        T_CHECKF((rc == MTC_OK) == valid, "validity pp=%d v=%d M=%d N=%d", pp, v, M,
                                 N);
                        if (rc != MTC_OK) {
                            ninvalid++;
                            continue;
                        }
                        check_config(&cfg, ops, counts, spans, seen);
                        nvalid++;
                    }
    printf("property configs: %d valid, %d refused\n", nvalid, ninvalid);
    T_CHECK(nvalid > 1000 && ninvalid > 1000);
    free(ops), free(spans), free(seen);
}

/* The simulator itself must catch a bad order: swap two ops so rank 0 waits
 * for a backward that the last rank only runs after rank 0's next op. */
static void test_simulator_detects_deadlock(void) {
    pp_schedule_config cfg = {.pp = 2, .num_microbatches = 2};
    int max_ops = pp_schedule_max_ops(&cfg);
    pp_op ops[2 * 4];
    pp_schedule_counts counts[2];
    pp_sim_span spans[2 * 4];
    double makespan;
    for (int r = 0; r < 2; r++)
        pp_schedule_build(ops + r * max_ops, &counts[r], &cfg, r);
    T_CHECK(pp_schedule_simulate(spans, &makespan, ops, counts, &cfg, 1, 2) == MTC_OK);
    /* rank 1 (last): F0 B0 F1 B1 -> B1 first can never run */
    pp_op t = ops[max_ops + 0];
    ops[max_ops + 0] = ops[max_ops + 3], ops[max_ops + 3] = t;
    T_CHECK(pp_schedule_simulate(spans, &makespan, ops, counts, &cfg, 1, 2) ==
            MTC_ERR_INVALID_USAGE);
    T_CHECK(strstr(mtc_error_detail(), "deadlock") != NULL);
}

static void test_vpp_args(void) {
    int v;
    pp_vpp_args a = {
        .pp = 2, .num_layers = 8, .layers_per_virtual_stage = 2, .overlap_p2p_comm = 1};
    T_CHECK(pp_vpp_from_args(&v, &a) == MTC_OK && v == 2);
    a.layers_per_virtual_stage = 3;
    T_CHECK(pp_vpp_from_args(&v, &a) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(strcmp(mtc_error_detail(),
                   "number of layers per pipeline stage must be divisible number "
                   "of layers per virtual pipeline stage") == 0);
    a = (pp_vpp_args){.pp = 4,
                      .num_layers = 6,
                      .layers_per_virtual_stage = 1,
                      .account_for_embedding = 1,
                      .account_for_loss = 1,
                      .overlap_p2p_comm = 1};
    T_CHECK(pp_vpp_from_args(&v, &a) == MTC_OK && v == 2); /* (6+1+1)/4/1 */
    a.account_for_loss = 0;                                /* 7 % 4 != 0 */
    T_CHECK(pp_vpp_from_args(&v, &a) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(
        strcmp(mtc_error_detail(),
               "number of layers of the model must be divisible pipeline model parallel size") ==
        0);
    a = (pp_vpp_args){
        .pp = 4, .num_layers = 8, .layers_per_virtual_stage = 2, .overlap_p2p_comm = 1};
    T_CHECK(pp_vpp_from_args(&v, &a) == MTC_OK && v == 1); /* vpp 1 -> None */
    a = (pp_vpp_args){.pp = 2, .virtual_stages_per_rank = 3, .overlap_p2p_comm = 0};
    T_CHECK(pp_vpp_from_args(&v, &a) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(strstr(mtc_error_detail(), "should be greater than 2") != NULL);
    a.overlap_p2p_comm = 1;
    T_CHECK(pp_vpp_from_args(&v, &a) == MTC_OK && v == 3);
    a.pp = 1;
    T_CHECK(pp_vpp_from_args(&v, &a) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(strcmp(mtc_error_detail(),
                   "When interleaved schedule is used, pipeline-model-parallel size "
                   "should be greater than 1") == 0);
    a = (pp_vpp_args){
        .pp = 2, .num_layers = 8, .layers_per_virtual_stage = 2, .virtual_stages_per_rank = 2};
    T_CHECK(pp_vpp_from_args(&v, &a) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(strstr(mtc_error_detail(), "No more than one of the following arguments") != NULL);
    /* the core rule: vpp needs pp > 1 */
    pp_schedule_config cfg = {.pp = 1, .vpp = 2, .num_microbatches = 4};
    T_CHECK(pp_schedule_validate(&cfg) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(
        strcmp(mtc_error_detail(),
               "pipeline-model-parallel size should be greater than 1 with interleaved schedule") ==
        0);
}

static void test_stage_helpers(void) {
    /* pp=4, vpp=2: rank 1 chunk 1 holds virtual stage 5 (offset rule c*pp + r) */
    T_CHECK(pp_virtual_stage(4, 1, 1) == 5);
    T_CHECK(pp_stage_rank(4, 5) == 1 && pp_stage_chunk(4, 5) == 1);
    T_CHECK(pp_is_first_stage(4, 0, 0) && !pp_is_first_stage(4, 0, 1));
    T_CHECK(pp_is_last_stage(4, 2, 3, 1) && !pp_is_last_stage(4, 2, 3, 0));
    T_CHECK(pp_is_last_stage(4, 1, 3, 0));
    /* no pipelining: F0 B0 F1 B1 */
    pp_schedule_config cfg = {.pp = 1, .num_microbatches = 2};
    pp_op ops[4];
    pp_schedule_counts c;
    T_CHECK(pp_schedule_build(ops, &c, &cfg, 0) == MTC_OK && c.nops == 4);
    T_CHECK(ops[0].kind == PP_OP_FORWARD && ops[1].kind == PP_OP_BACKWARD &&
            ops[1].microbatch == 0);
    T_CHECK(pp_schedule_kind(&cfg) == PP_SCHEDULE_NO_PIPELINING);
    T_CHECK(pp_schedule_build(ops, &c, &cfg, 1) == MTC_ERR_INVALID_ARGUMENT);
}

int main(void) {
    test_examples();
    test_properties();
    test_simulator_detects_deadlock();
    test_vpp_args();
    test_stage_helpers();
    return T_DONE();
}
