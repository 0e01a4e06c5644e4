/* cli/cmd_schedule.c - `mtc schedule`: Megatron's per-rank pipeline compute
 * order for a layout, as text, JSON (the shape of
 * tests/data/megatron/schedules.json) or an SVG timeline; with --from-trace,
 * the order and durations a training run executed (pp/schedule_trace.c).
 * Relies on pp/schedule.h for everything it prints; only formats. Invalid
 * layouts exit 2 with Megatron's message on stderr and nothing on stdout. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/layout_args.h"
#include "core/outfile.h"
#include "pp/layout_cli.h"
#include "pp/schedule.h"

#define T_FWD 1.0
#define T_BWD 2.0

static const char *schedule_op_str(char *buf, size_t n, const pp_op *op) {
    snprintf(buf, n, "%c%d.%d", op->kind == PP_OP_FORWARD ? 'F' : 'B', op->microbatch, op->chunk);
    return buf;
}

/* "F0.0 F1.0 ..." for ops[from..to) into a malloc'd string. */
static char *schedule_ops_join(const pp_op *ops, int from, int to) {
    size_t cap = (size_t)(to - from) * 24 + 1, len = 0;
    char *s = malloc(cap), buf[24];
    if (!s) return NULL;
    s[0] = '\0';
    for (int i = from; i < to; i++)
        len += (size_t)snprintf(s + len, cap - len, "%s%s", i > from ? " " : "",
                                schedule_op_str(buf, sizeof buf, &ops[i]));
    return s;
}

/* For an interleaved refusal: the microbatch counts that would be accepted. */
static void schedule_hint(char *out, size_t n, const pp_schedule_config *cfg) {
    out[0] = '\0';
    if (cfg->pp <= 1 || cfg->vpp <= 1) return;
    size_t len =
        (size_t)snprintf(out, n, " (valid --microbatches for pp=%d group size %d:", cfg->pp,
                         pp_schedule_group_size(cfg));
    int found = 0;
    for (int M = 1; M <= 4096 && found < 8 && len < n; M++) {
        pp_schedule_config c = *cfg;
        c.num_microbatches = M;
        if (pp_schedule_validate(&c) == MTC_OK)
            len += (size_t)snprintf(out + len, n - len, " %d", M), found++;
    }
    if (len < n) snprintf(out + len, n - len, found ? " ...)" : " none; raise the group size)");
}

static int schedule_json(const pp_schedule_config *cfg, const pp_op *ops,
                         const pp_schedule_counts *counts, int max_ops) {
    pp_schedule_kind_t kind = pp_schedule_kind(cfg);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "schedule", pp_schedule_kind_name(kind));
    cJSON_AddStringToObject(root, "function", pp_schedule_function_name(kind));
    cJSON_AddNumberToObject(root, "pp", cfg->pp);
    if (kind == PP_SCHEDULE_INTERLEAVED)
        cJSON_AddNumberToObject(root, "vpp", cfg->vpp);
    else
        cJSON_AddNullToObject(root, "vpp");
    cJSON_AddNumberToObject(root, "num_microbatches", cfg->num_microbatches);
    /* Megatron's examples name it microbatch_group_size_per_vp_stage; the
     * short name is printed too so either spelling parses. */
    static const char *const group_keys[] = {"microbatch_group_size",
                                             "microbatch_group_size_per_vp_stage"};
    for (int k = 0; k < 2; k++) {
        if (kind == PP_SCHEDULE_INTERLEAVED)
            cJSON_AddNumberToObject(root, group_keys[k], pp_schedule_group_size(cfg));
        else
            cJSON_AddNullToObject(root, group_keys[k]);
    }
    cJSON_AddBoolToObject(root, "forward_only", cfg->forward_only);
    cJSON *ranks = cJSON_AddArrayToObject(root, "ranks");
    int ok = 1;
    for (int r = 0; r < cfg->pp; r++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", r);
        cJSON_AddNumberToObject(o, "num_warmup", counts[r].num_warmup);
        cJSON_AddNumberToObject(o, "num_steady", counts[r].num_steady);
        cJSON_AddNumberToObject(o, "num_cooldown", counts[r].num_cooldown);
        char *s = schedule_ops_join(ops + (size_t)r * max_ops, 0, counts[r].nops);
        if (!s) ok = 0;
        cJSON_AddStringToObject(o, "ops", s ? s : "");
        free(s);
        cJSON_AddItemToArray(ranks, o);
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) return cli_fail("schedule", mtc_error(MTC_ERR_OUT_OF_MEMORY, "formatting JSON"));
    printf("%s\n", text);
    free(text);
    return 0;
}

static void schedule_text(const pp_schedule_config *cfg, const pp_op *ops,
                          const pp_schedule_counts *counts, int max_ops, double bubble) {
    pp_schedule_kind_t kind = pp_schedule_kind(cfg);
    printf("schedule: %s (%s)\n", pp_schedule_kind_name(kind), pp_schedule_function_name(kind));
    printf("pp=%d", cfg->pp);
    if (kind == PP_SCHEDULE_INTERLEAVED)
        printf(" vpp=%d microbatch-group-size=%d", cfg->vpp, pp_schedule_group_size(cfg));
    printf(" microbatches=%d%s\n", cfg->num_microbatches, cfg->forward_only ? " forward-only" : "");
    printf("notation: F<m>.<c> / B<m>.<c> = forward / backward of microbatch m on model chunk c\n");
    for (int r = 0; r < cfg->pp; r++) {
        const pp_op *o = ops + (size_t)r * max_ops;
        const pp_schedule_counts *c = &counts[r];
        int steady_ops = cfg->forward_only ? c->num_steady : 2 * c->num_steady;
        printf("\nrank %d: warmup %d, steady %d, cooldown %d\n", r, c->num_warmup, c->num_steady,
               c->num_cooldown);
        const char *names[3] = {"warmup:  ", "steady:  ", "cooldown:"};
        int bounds[4] = {0, c->num_warmup, c->num_warmup + steady_ops, c->nops};
        for (int p = 0; p < 3; p++) {
            if (bounds[p + 1] <= bounds[p]) continue;
            char *s = schedule_ops_join(o, bounds[p], bounds[p + 1]);
            printf("  %s %s\n", names[p], s ? s : "?");
            free(s);
        }
    }
    printf("\nbubble fraction: simulated %.4f (forward %g, backward %g, free transfers); "
           "Megatron (p-1)/(m*v) = %.4f\n",
           bubble, T_FWD, T_BWD, pp_bubble_formula(cfg));
}

static int schedule_write_svg(const char *path, const pp_op *ops, const pp_schedule_counts *counts,
                              const pp_sim_span *spans, double makespan,
                              const pp_schedule_config *cfg) {
    mtc_outfile o;
    mtc_result_t rc = mtc_outfile_open(&o, path, "--svg");
    if (rc != MTC_OK) return cli_fail("schedule", rc);
    rc = pp_schedule_svg(o.f, ops, counts, spans, makespan, cfg, T_FWD, T_BWD);
    if (rc == MTC_OK)
        rc = mtc_outfile_commit(&o);
    else
        mtc_outfile_abort(&o);
    return rc == MTC_OK ? 0 : cli_fail("schedule", rc);
}

/* --from-trace: what each rank executed in one iteration, its bubble, and
 * whether its order is the one Megatron's schedule prescribes. */
static int schedule_from_trace(const char *path, int64_t iteration, int group, const char *svg) {
    pp_trace_timeline t;
    mtc_result_t rc = pp_trace_timeline_load(&t, path, iteration);
    if (rc == MTC_ERR_IO || rc == MTC_ERR_FORMAT || rc == MTC_ERR_INVALID_ARGUMENT)
        return cli_usage_error("schedule", "%s", mtc_error_detail());
    if (rc != MTC_OK) return cli_fail("schedule", rc);
    int status = 0;
    if (svg) {
        mtc_outfile o;
        rc = mtc_outfile_open(&o, svg, "--svg");
        if (rc == MTC_OK) {
            rc = pp_trace_timeline_svg(o.f, &t, path);
            if (rc == MTC_OK)
                rc = mtc_outfile_commit(&o);
            else
                mtc_outfile_abort(&o);
        }
        if (rc != MTC_OK) status = cli_fail("schedule", rc);
    }
    pp_schedule_config cfg = {.pp = t.pp,
                              .vpp = t.vpp > 1 ? t.vpp : 0,
                              .num_microbatches = t.microbatches > 0 ? t.microbatches : 1,
                              .group_size = group};
    int planned = pp_schedule_validate(&cfg) == MTC_OK;
    int max_ops = planned ? pp_schedule_max_ops(&cfg) : 0;
    pp_op *plan = planned ? calloc((size_t)max_ops, sizeof *plan) : NULL;
    printf("executed schedule of iteration %lld (trace %s): pp=%d", (long long)t.iteration, path,
           t.pp);
    if (t.vpp > 1) printf(" vpp=%d", t.vpp);
    printf(" microbatches=%d, %d ranks\n", t.microbatches, t.nrows);
    printf("notation: F<m>.<c> / B<m>.<c> = forward / backward of microbatch m on model chunk c\n");
    if (t.dropped > 0)
        printf("note: the ranks dropped %lld events at the trace's memory bound "
               "(--trace-buffer-mb): later iterations are missing or partial\n",
               (long long)t.dropped);
    double mean = 0, lo = 1, hi = 0;
    int same = 0;
    for (int r = 0; status == 0 && r < t.nrows; r++) {
        const pp_trace_row *row = &t.rows[r];
        pp_schedule_counts n = {0};
        int match = plan && pp_schedule_build(plan, &n, &cfg, row->pp_stage) == MTC_OK &&
                    n.nops == row->nops;
        for (int i = 0; match && i < row->nops; i++)
            match = plan[i].kind == row->ops[i].kind &&
                    plan[i].microbatch == row->ops[i].microbatch &&
                    plan[i].chunk == row->ops[i].chunk;
        same += match;
        printf("\n%s: forward-backward %.3f ms, forward/backward %.3f ms, bubble %.1f%%; %s\n ",
               row->name, row->fb1 - row->fb0, row->busy, 100 * row->bubble,
               match ? "the order Megatron's schedule prescribes"
                     : "NOT the order Megatron's schedule prescribes");
        for (int i = 0; i < row->nops; i++) {
            const pp_trace_op *o = &row->ops[i];
            printf(" %c%d.%d", o->kind == PP_OP_FORWARD ? 'F' : 'B', o->microbatch, o->chunk);
        }
        printf("\n");
        mean += row->bubble / t.nrows;
        lo = row->bubble < lo ? row->bubble : lo, hi = row->bubble > hi ? row->bubble : hi;
    }
    if (status == 0)
        printf("\nbubble: measured mean %.1f%% (min %.1f%%, max %.1f%%); schedule "
               "(p-1)/(%sm+p-1) = %.1f%%; %d of %d ranks ran Megatron's order\n",
               100 * mean, 100 * lo, 100 * hi, t.vpp > 1 ? "v*" : "",
               100 * pp_trace_bubble_formula(&t), same, t.nrows);
    free(plan);
    pp_trace_timeline_free(&t);
    return status;
}

int cli_cmd_schedule(int argc, char **argv) {
    int M = 0, group = 0, forward_only = 0, json = 0;
    layout_flags lay = LAYOUT_FLAGS_DEFAULTS; /* the shared layout rows (cli/layout_args.h) */
    const char *from_trace = NULL;
    int64_t iteration = -1;
    int layers = 0, overlap = 1, mtp = 0;
    pp_layout_cli split_f = PP_LAYOUT_CLI_DEFAULTS; /* pipeline split (pp/layout_cli.h) */
    pp_layout_args split = {0};
    const char *svg = NULL;
    mtc_arg args[] = {
        LAYOUT_ARG_PP(lay),
        LAYOUT_ARG_VPP(lay),
        {"microbatches", "num-microbatches", MTC_ARG_INT, &M, "M",
         "microbatches per step (required)", 0},
        {"microbatch-group-size-per-virtual-pipeline-stage", "microbatch-group-size", MTC_ARG_INT,
         &group, "N", "contiguous microbatches per virtual stage (default P)", 0},
        {"forward-only", NULL, MTC_ARG_FLAG, &forward_only, NULL, "evaluation: forwards only", 0},
        {"num-layers", NULL, MTC_ARG_INT, &layers, "L", "transformer layers (for the vpp rules)",
         0},
        LAYOUT_ARG_LPVS(lay),
        LAYOUT_ARG_VSTAGES(lay),
        PP_LAYOUT_CLI_ARGS(split_f),
        {"mtp-num-layers", NULL, MTC_ARG_INT, &mtp, "D",
         "MTP depths, shown with the loss (a layout string's 'm' count must match)", 0},
        {"overlap-p2p-communication", NULL, MTC_ARG_FLAG, &overlap, NULL,
         "(default on) --no-overlap-p2p-communication requires P > 2 with vpp", 0},
        {"json", NULL, MTC_ARG_FLAG, &json, NULL, "print JSON (schedules.json shape)", 0},
        {"svg", NULL, MTC_ARG_STRING, &svg, "FILE", "draw the simulated timeline to FILE", 0},
        {"from-trace", NULL, MTC_ARG_STRING, &from_trace, "TRACE",
         "the executed schedule of one iteration of a trace `mtc train --trace` wrote: measured "
         "durations and bubbles per rank (with --svg: drawn)",
         0},
        {"iteration", NULL, MTC_ARG_I64, &iteration, "N",
         "with --from-trace: the iteration to show (default the last traced)", 0},
    };
    int nargs = (int)(sizeof args / sizeof args[0]);
    int st =
        cli_parse("schedule",
                  "--pp P [--vpp V] --microbatches M [--microbatch-group-size N] "
                  "[--forward-only] [--json] [--svg FILE] | --from-trace TRACE [--iteration N] "
                  "[--svg FILE]",
                  "Print each pipeline rank's compute order exactly as Megatron-LM core_v0.18.0\n"
                  "runs it (no pipelining, 1F1B, or interleaved 1F1B with virtual stages).",
                  args, nargs, argc, argv);
    if (st >= 0) return st;
    int pp = lay.pp, vpp = lay.vpp, layers_per_vstage = lay.lpvs, vstages = lay.vstages;
    char svg_real[MTC_PATH_MAX];
    if (svg && mtc_outfile_check(svg, "--svg", svg_real, sizeof svg_real) != MTC_OK)
        return cli_usage_error("schedule", "%s", mtc_error_detail());
    if (mtc_args_seen(args, nargs, "iteration") && (!from_trace || iteration < 0))
        return cli_usage_error("schedule",
                               "--iteration %lld needs --from-trace TRACE and must be "
                               ">= 1",
                               (long long)iteration);
    if (from_trace) {
        static const char *const planned_only[] = {"microbatches", "forward-only", "json",
                                                   "pipeline-model-parallel-size",
                                                   "virtual-pipeline-model-parallel-size"};
        for (size_t k = 0; k < sizeof planned_only / sizeof planned_only[0]; k++)
            if (mtc_args_seen(args, nargs, planned_only[k]))
                return cli_usage_error("schedule",
                                       "--%s is for the planned schedule; --from-trace reads the "
                                       "layout from the trace (drop one of them)",
                                       planned_only[k]);
        return schedule_from_trace(from_trace, iteration, group, svg);
    }
    if (!mtc_args_seen(args, nargs, "microbatches"))
        return cli_usage_error("schedule", "--microbatches M is required (e.g. --microbatches 8)");
    int vpp_seen = mtc_args_seen(args, nargs, "virtual-pipeline-model-parallel-size");
    if (pp_vpp_given_once(vpp_seen, layers_per_vstage, vstages) != MTC_OK)
        return cli_usage_error("schedule", "%s", mtc_error_detail());
    if (vpp_seen && vpp < 1) return cli_usage_error("schedule", "--vpp %d must be at least 1", vpp);
    /* sizes that keep every op count (2 * M * vpp per rank, pp ranks) in range and the
     * output printable */
    if (pp < 1 || pp > 4096) return cli_usage_error("schedule", "--pp %d is outside [1, 4096]", pp);
    if (vpp > 1024) return cli_usage_error("schedule", "--vpp %d is outside [1, 1024]", vpp);
    if (M < 1 || M > (1 << 20))
        return cli_usage_error("schedule", "--microbatches %d is outside [1, %d]", M, 1 << 20);
    if (pp_layout_cli_resolve(
            &split_f, mtc_args_seen(args, nargs, "decoder-first-pipeline-num-layers"),
            mtc_args_seen(args, nargs, "decoder-last-pipeline-num-layers"), &split) != MTC_OK)
        return cli_usage_error("schedule", "%s", mtc_error_detail());
    if (mtp < 0 || mtp > 64)
        return cli_usage_error("schedule", "--mtp-num-layers %d is outside [0, 64]", mtp);
    split.mtp_num_layers = mtp;
    if (split.layout && !layers && pp_layout_num_layers(&layers, split.layout) != MTC_OK)
        return cli_usage_error("schedule", "%s", mtc_error_detail());
    if (!vpp_seen || split.layout) {
        pp_vpp_args va = {.pp = pp,
                          .num_layers = layers,
                          .layers_per_virtual_stage = layers_per_vstage,
                          .virtual_stages_per_rank = vpp_seen ? vpp : vstages,
                          .overlap_p2p_comm = overlap,
                          .split = &split};
        if (pp_vpp_from_args(&vpp, &va) != MTC_OK)
            return cli_usage_error("schedule", "%s", mtc_error_detail());
    }
    /* the layers of each (rank, chunk), when the layer count is known */
    char table[8192] = "";
    if (layers > 0 &&
        pp_layout_describe(table, sizeof table, &split, layers, pp, vpp > 1 ? vpp : 1) != MTC_OK)
        return cli_usage_error("schedule", "%s", mtc_error_detail());
    pp_schedule_config cfg = {.pp = pp,
                              .vpp = vpp > 1 ? vpp : 0,
                              .num_microbatches = M,
                              .group_size = group,
                              .forward_only = forward_only};
    if (pp_schedule_validate(&cfg) != MTC_OK) {
        char hint[256];
        schedule_hint(hint, sizeof hint, &cfg);
        /* the hint's validations overwrote the detail: validate again */
        pp_schedule_validate(&cfg);
        return cli_usage_error("schedule", "%s%s", mtc_error_detail(), hint);
    }
    int max_ops = pp_schedule_max_ops(&cfg);
    pp_op *ops = calloc((size_t)pp * max_ops, sizeof *ops);
    pp_sim_span *spans = calloc((size_t)pp * max_ops, sizeof *spans);
    pp_schedule_counts *counts = calloc((size_t)pp, sizeof *counts);
    int status = 0;
    double makespan = 0;
    mtc_result_t rc = (ops && spans && counts)
                          ? MTC_OK
                          : mtc_error(MTC_ERR_OUT_OF_MEMORY, "schedule of %d ops", pp * max_ops);
    for (int r = 0; r < pp && rc == MTC_OK; r++)
        rc = pp_schedule_build(ops + (size_t)r * max_ops, &counts[r], &cfg, r);
    if (rc == MTC_OK) rc = pp_schedule_simulate(spans, &makespan, ops, counts, &cfg, T_FWD, T_BWD);
    if (rc != MTC_OK) {
        status = cli_fail("schedule", rc);
        goto out;
    }
    if (svg) status = schedule_write_svg(svg, ops, counts, spans, makespan, &cfg);
    if (status == 0) {
        if (json)
            status = schedule_json(&cfg, ops, counts, max_ops);
        else {
            schedule_text(&cfg, ops, counts, max_ops,
                          pp_sim_bubble_fraction(makespan, &cfg, T_FWD, T_BWD));
            if (table[0]) {
                char name[256];
                pp_layout_name(name, sizeof name, &split);
                printf("\nlayers of %d (pipeline split: %s):\n%s\n", layers, name, table);
                pp_layout_describe_messages(name, sizeof name, &split, layers, pp, vpp);
                if (name[0]) printf("%s\n", name);
            }
        }
    }
out:
    free(ops), free(spans), free(counts);
    return status;
}
