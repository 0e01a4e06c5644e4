/* cli/cmd_ranks.c - `mtc ranks`: every process group Megatron-LM
 * core_v0.18.0 builds for a layout, without starting any rank.
 * Output: a table of each rank's coordinates and the groups of each kind
 * (default), Megatron-shaped JSON (--json), and an SVG picture (--svg FILE).
 * Relies on grid/ for the generators, validation, groups and the SVG.
 * Invalid input: the one-line reason on stderr, nothing on stdout, exit 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/layout_args.h"
#include "pp/layout.h"
#include "core/outfile.h"
#include "grid/grid.h"

static const char about[] =
    "Print the process groups Megatron-LM core_v0.18.0's initialize_model_parallel builds for a\n"
    "layout (dense generator tp-cp-dp-pp and expert generator etp-ep-edp-pp sharing --order),\n"
    "or the reason Megatron refuses it. No rank is started: 1024 ranks answer at once.";

static long lcm_l(long a, long b) {
    long x = a, y = b;
    while (y) {
        long t = x % y;
        x = y;
        y = t;
    }
    return a / x * b;
}

static void print_list(FILE *f, const int *r, int n, const char *sep) {
    fputc('[', f);
    for (int k = 0; k < n; k++)
        fprintf(f, "%s%d", k ? sep : "", r[k]);
    fputc(']', f);
}

static void print_json(FILE *f, const mtc_grid_spec *s, const mtc_grid_groups *G) {
    fprintf(f,
            "{\"world_size\": %d, \"data_parallel_size\": %d, \"expert_data_parallel_size\": %d, "
            "\"groups\": {\n",
            s->cfg.world_size, s->dp, s->edp);
    for (int i = 0; i < G->nsets; i++) {
        const mtc_grid_group_set *set = &G->sets[i];
        fprintf(f, "  \"%s\": [", set->name);
        for (int g = 0; g < set->count; g++) {
            if (g) fputs(", ", f);
            print_list(f, set->ranks + (size_t)g * set->size, set->size, ", ");
        }
        fprintf(f, "]%s\n", i + 1 < G->nsets ? "," : "");
    }
    fputs("}}\n", f);
}

static void print_text(FILE *f, const mtc_grid_spec *s, const mtc_grid_groups *G, int gpn) {
    const mtc_grid_config *c = &s->cfg;
    char line[512];
    mtc_grid_describe(line, sizeof line, s);
    fprintf(f, "%s\n", line);
    fprintf(f, "world %d, order %s (first varies fastest)\n", c->world_size, s->order_full);
    fprintf(f, "dense:  tp %d x cp %d x dp %d x pp %d", c->tp, c->cp, s->dp, c->pp);
    if (c->vpp) fprintf(f, " (vpp %d: %d virtual stages)", c->vpp, c->pp * c->vpp);
    fprintf(f, "\nexpert: etp %d x ep %d x edp %d x pp %d\n", c->etp, c->ep, s->edp, c->pp);
    fprintf(
        f,
        "data_parallel_size %d, expert_data_parallel_size %d, distributed-optimizer instances %d",
        s->dp, s->edp, s->nd);
    if (c->n_hcp) {
        fputs(", hierarchical cp", f);
        for (int i = 0; i < c->n_hcp; i++)
            fprintf(f, "%s%d", i ? "x" : " ", c->hcp[i]);
    }
    fputc('\n', f);
    if (!mtc_grid_groups_dist_opt_consistent(G, c->world_size))
        fprintf(f,
                "warning: with order %s, Megatron's inter-instance group (HIERARCHICAL_EXPERT_DATA_"
                "PARALLEL_GROUP_L1) does not pair the dense intra-partial shards, so its partial "
                "distributed optimizer would combine the wrong dense gradient shards (Megatron "
                "training's orders tp-cp-ep-dp-pp and tp-cp-ep-pp-dp are safe)\n",
                s->order_full);
    fprintf(f, "\n%6s %5s | %3s %3s %3s %3s | %3s %3s %3s | %5s  %s\n", "rank", "node", "tp", "cp",
            "dp", "pp", "etp", "ep", "edp", "dp_cp", "pp prev/next");
    for (int r = 0; r < c->world_size; r++) {
        mtc_grid_coord x;
        mtc_grid_coord_of(&x, s, r);
        const char *role = c->pp == 1                      ? ""
                           : mtc_grid_is_first_stage(s, r) ? " first"
                           : mtc_grid_is_last_stage(s, r)  ? " last"
                                                           : "";
        fprintf(f, "%6d %5d | %3d %3d %3d %3d | %3d %3d %3d | %5d  %d/%d%s\n", r, r / gpn, x.tp,
                x.cp, x.dp, x.pp, x.etp, x.ep, x.edp, x.dp_cp, mtc_grid_pp_prev(s, r),
                mtc_grid_pp_next(s, r), role);
    }
    for (int i = 0; i < G->nsets; i++) {
        const mtc_grid_group_set *set = &G->sets[i];
        int cross = 0;
        for (int g = 0; g < set->count; g++) {
            const int *l = set->ranks + (size_t)g * set->size;
            for (int k = 1; k < set->size; k++)
                if (l[k] / gpn != l[0] / gpn) {
                    cross++;
                    break;
                }
        }
        fprintf(f, "\n%s: %d group%s of %d", set->name, set->count, set->count == 1 ? "" : "s",
                set->size);
        if (cross)
            fprintf(f, ", %d span%s nodes (%d ranks per node)", cross, cross == 1 ? "s" : "", gpn);
        fputs("\n ", f);
        int col = 1;
        for (int g = 0; g < set->count; g++) {
            char buf[256];
            const int *l = set->ranks + (size_t)g * set->size;
            int len = snprintf(buf, sizeof buf, "[");
            for (int k = 0; k < set->size && len < (int)sizeof buf - 16; k++)
                len += snprintf(buf + len, sizeof buf - (size_t)len, "%s%d", k ? " " : "", l[k]);
            if (len >= (int)sizeof buf - 16) {
                fputc(' ', f);
                print_list(f, l, set->size, " "); /* long list: on its own */
                col = 101;
                continue;
            }
            len += snprintf(buf + len, sizeof buf - (size_t)len, "]");
            if (col + len + 1 > 100 && col > 1) fputs("\n ", f), col = 1;
            fprintf(f, " %s", buf);
            col += len + 1;
        }
        fputc('\n', f);
    }
}

/* One rank's view: its coordinates and, per group kind, its list and index. */
static void print_rank(FILE *f, const mtc_grid_spec *s, const mtc_grid_groups *G, int r) {
    mtc_grid_coord x;
    mtc_grid_coord_of(&x, s, r);
    fprintf(f, "rank %d: tp %d cp %d dp %d pp %d | etp %d ep %d edp %d | pp prev %d next %d%s%s\n",
            r, x.tp, x.cp, x.dp, x.pp, x.etp, x.ep, x.edp, mtc_grid_pp_prev(s, r),
            mtc_grid_pp_next(s, r), mtc_grid_is_first_stage(s, r) ? ", first stage" : "",
            mtc_grid_is_last_stage(s, r) ? ", last stage" : "");
    for (int i = 0; i < G->nsets; i++) {
        const mtc_grid_group_set *set = &G->sets[i];
        int pos, g = mtc_grid_group_of(set, r, &pos);
        fprintf(f, "  %-46s ", set->name);
        if (g < 0) {
            fputs("(not a member)\n", f);
            continue;
        }
        fprintf(f, "index %d of ", pos);
        print_list(f, set->ranks + (size_t)g * set->size, set->size, " ");
        fputc('\n', f);
    }
}

static int write_svg(const char *path, const mtc_grid_spec *s, const mtc_grid_groups *G, int gpn,
                     const mtc_grid_highlight *h) {
    mtc_outfile o;
    mtc_result_t rc = mtc_outfile_open(&o, path, "--svg");
    if (rc != MTC_OK) return cli_fail("ranks", rc);
    rc = mtc_grid_render_svg_highlight(o.f, s, G, gpn, h);
    if (rc == MTC_OK)
        rc = mtc_outfile_commit(&o);
    else
        mtc_outfile_abort(&o);
    return rc == MTC_OK ? 0 : cli_fail("ranks", rc);
}

/* --highlight's group kinds: short names, and Megatron's names as printed. */
static const struct {
    const char *name;
    mtc_grid_kind_t kind;
} highlight_kinds[] = {
    {"tp", MTC_GROUP_TP},       {"pp", MTC_GROUP_PP},
    {"dp", MTC_GROUP_DP},       {"cp", MTC_GROUP_CP},
    {"dp-cp", MTC_GROUP_DP_CP}, {"mp", MTC_GROUP_MP},
    {"ep", MTC_GROUP_EP},       {"etp", MTC_GROUP_EXPT_TP},
    {"edp", MTC_GROUP_EXPT_DP}, {"tp-dp", MTC_GROUP_TP_DP},
    {"tp-cp", MTC_GROUP_TP_CP}, {"tp-dp-cp", MTC_GROUP_TP_DP_CP},
    {"tp-ep", MTC_GROUP_TP_EP}, {"tp-ep-pp", MTC_GROUP_TP_EP_PP},
    {"embd", MTC_GROUP_EMBD},   {"pos-embd", MTC_GROUP_POS_EMBD},
};

/* --highlight KIND (a short name or a group name) or R,R,...: fills h
 * (ranks into buf, of cap entries); 0, or 2 after the usage message. */
static int parse_highlight(const char *arg, const mtc_grid_groups *G, int world, int *buf, int cap,
                           mtc_grid_highlight *h) {
    memset(h, 0, sizeof *h);
    if (arg[0] >= '0' && arg[0] <= '9') {
        const char *s = arg;
        while (*s) {
            char *end;
            long r = strtol(s, &end, 10);
            if (end == s || (*end && *end != ',') || r < 0 || r >= world)
                return cli_usage_error("ranks",
                                       "--highlight %s: ranks are 0 to %d, separated by commas "
                                       "(e.g. --highlight 0,3,5)",
                                       arg, world - 1);
            if (h->nranks == cap)
                return cli_usage_error("ranks", "--highlight %s lists more than %d ranks", arg,
                                       cap);
            buf[h->nranks++] = (int)r;
            s = *end ? end + 1 : end;
        }
        h->ranks = buf;
        return 0;
    }
    for (size_t k = 0; k < sizeof highlight_kinds / sizeof highlight_kinds[0]; k++)
        if (!strcmp(arg, highlight_kinds[k].name))
            h->set = mtc_grid_groups_find(G, highlight_kinds[k].kind, 0);
    for (int i = 0; !h->set && i < G->nsets; i++)
        if (!strcasecmp(arg, G->sets[i].name)) h->set = &G->sets[i];
    if (h->set) return 0;
    char valid[512];
    size_t len = 0;
    for (size_t k = 0; k < sizeof highlight_kinds / sizeof highlight_kinds[0] && len < 400; k++)
        len += (size_t)snprintf(valid + len, sizeof valid - len, "%s%s", k ? " " : "",
                                highlight_kinds[k].name);
    return cli_usage_error("ranks",
                           "--highlight %s is neither a group kind of this layout nor a rank list "
                           "(valid: %s, a group name as printed, or ranks such as 0,3,5)",
                           arg, valid);
}

int cli_cmd_ranks(int argc, char **argv) {
    int world = 0, json = 0, gpn = 8;
    layout_flags lay = LAYOUT_FLAGS_DEFAULTS; /* the shared layout rows (cli/layout_args.h) */
    int tp_pp_dp = 0, one_rank = -1;
    const char *order = NULL, *svg = NULL, *highlight = NULL, *pp_layout = NULL;
    int mtp = 0, untied = 0; /* Megatron's standalone MTP stage (pp/layout.h) */
    mtc_arg_ints hcp = {0};
    mtc_arg args[] = {
        {"world-size", NULL, MTC_ARG_INT, &world, "N",
         "number of ranks (default: the smallest valid)", 0},
        LAYOUT_ARG_TP(lay),
        LAYOUT_ARG_PP(lay),
        LAYOUT_ARG_CP(lay),
        LAYOUT_ARG_EP(lay),
        LAYOUT_ARG_ETP(lay),
        LAYOUT_ARG_VPP(lay),
        {"order", NULL, MTC_ARG_STRING, &order, "ORDER",
         "rank order, first varies fastest (default tp-cp-ep-dp-pp)", 0},
        {"use-tp-pp-dp-mapping", NULL, MTC_ARG_FLAG, &tp_pp_dp, NULL,
         "Megatron training's tp-cp-ep-pp-dp order", 0},
        LAYOUT_ARG_ND(lay),
        {"hierarchical-context-parallel-sizes", NULL, MTC_ARG_INTS, &hcp, "A,B,..",
         "levels of hierarchical CP (product = cp), innermost first", 0},
        {"json", NULL, MTC_ARG_FLAG, &json, NULL, "print Megatron-shaped JSON instead of the table",
         0},
        {"svg", NULL, MTC_ARG_STRING, &svg, "FILE", "also draw the rank grid into FILE", 0},
        {"highlight", NULL, MTC_ARG_STRING, &highlight, "KIND|R,R..",
         "in the SVG, outline every group of one kind (tp, pp, dp, cp, dp-cp, mp, ep, etp, edp, "
         "... or a group name) in a colour per group, or emphasise a list of ranks",
         0},
        {"rank", NULL, MTC_ARG_INT, &one_rank, "R", "print only rank R's coordinates and groups",
         0},
        {"gpus-per-node", NULL, MTC_ARG_INT, &gpn, "N",
         "ranks per node in the table and picture (default 8)", 0},
        {"pipeline-model-parallel-layout", NULL, MTC_ARG_STRING, &pp_layout, "S",
         "with --mtp-num-layers: an 'm' stage before the loss's (Megatron's standalone MTP "
         "stage) puts its rank in EMBEDDING_GROUP",
         0},
        {"mtp-num-layers", NULL, MTC_ARG_INT, &mtp, "D", "MTP depths (the layout's 'm' count)", 0},
        {"untie-embeddings-and-output-weights", NULL, MTC_ARG_FLAG, &untied, NULL,
         "no wte copy on the last stage: EMBEDDING_GROUP without it beside an MTP stage", 0},
    };
    int nargs = (int)(sizeof args / sizeof args[0]);
    int st = cli_parse("ranks",
                       "[--world-size N] [--tp N] [--pp N] [--cp N] [--ep N] [--etp N] [--order O] "
                       "[--json] [--svg FILE]",
                       about, args, nargs, argc, argv);
    if (st >= 0) return st;
    int tp = lay.tp, pp = lay.pp, cp = lay.cp, ep = lay.ep, etp = lay.etp, vpp = lay.vpp,
        nd = lay.nd;
    char svg_real[MTC_PATH_MAX];
    if (svg && mtc_outfile_check(svg, "--svg", svg_real, sizeof svg_real) != MTC_OK)
        return cli_usage_error("ranks", "%s", mtc_error_detail());
    if (gpn < 1)
        return cli_usage_error("ranks", "--gpus-per-node is %d (valid: an integer >= 1, e.g. 8)",
                               gpn);
    if (tp_pp_dp && order)
        return cli_usage_error(
            "ranks",
            "--use-tp-pp-dp-mapping and --order %s both set the order (valid: one of them)", order);
    if (tp_pp_dp) order = "tp-cp-ep-pp-dp";

    mtc_grid_config cfg;
    mtc_grid_config_default(&cfg);
    cfg.tp = tp, cfg.pp = pp, cfg.cp = cp, cfg.ep = ep, cfg.etp = etp, cfg.vpp = vpp;
    cfg.order = order, cfg.num_dist_opt_instances = nd;
    if (hcp.n > MTC_GRID_MAX_HCP)
        return cli_usage_error(
            "ranks", "--hierarchical-context-parallel-sizes has %d levels (valid: at most %d)",
            hcp.n, MTC_GRID_MAX_HCP);
    cfg.n_hcp = hcp.n;
    for (int i = 0; i < hcp.n; i++) {
        if (hcp.v[i] < 1 || hcp.v[i] > (1 << 20))
            return cli_usage_error(
                "ranks", "--hierarchical-context-parallel-sizes level %d is %lld (valid: >= 1)", i,
                (long long)hcp.v[i]);
        cfg.hcp[i] = (int)hcp.v[i];
    }
    if (!mtc_args_seen(args, nargs, "world-size") && tp > 0 && pp > 0 && cp > 0 && ep > 0 &&
        etp >= 0) {
        long w = lcm_l((long)tp * pp * cp, (long)(etp ? etp : tp) * ep * pp);
        world = w > (1 << 20) ? 1 << 21 : (int)w;
    }
    cfg.world_size = world;
    if (pp_layout) { /* the MTP stage's rank joins EMBEDDING_GROUP (get_embedding_ranks) */
        pp_layout_args la = {.layout = pp_layout, .mtp_num_layers = mtp};
        int ns = 0, nl = 0;
        if (pp_layout_num_stages(&ns, pp_layout) != MTC_OK ||
            pp_layout_num_layers(&nl, pp_layout) != MTC_OK ||
            pp_layout_validate(&la, nl, pp > 0 ? pp : 1, pp > 0 && ns % pp == 0 ? ns / pp : 1) !=
                MTC_OK)
            return cli_usage_error("ranks", "%s", mtc_error_detail());
        cfg.embd_mtp_rank = 1 + pp_layout_mtp_standalone_rank(&la, nl, pp, ns / pp);
        cfg.embd_untied = untied;
    }
    mtc_grid_spec spec;
    if (mtc_grid_spec_init(&spec, &cfg) != MTC_OK)
        return cli_usage_error("ranks", "%s", mtc_error_detail());
    mtc_grid_groups G;
    mtc_result_t rc = mtc_grid_groups_build(&G, &spec);
    if (rc != MTC_OK) return cli_fail("ranks", rc);
    if (one_rank >= spec.cfg.world_size || (one_rank < 0 && mtc_args_seen(args, nargs, "rank"))) {
        mtc_grid_groups_free(&G);
        return cli_usage_error("ranks", "--rank %d is outside the world (valid: 0 to %d)", one_rank,
                               spec.cfg.world_size - 1);
    }
    int status = 0;
    mtc_grid_highlight hl = {0};
    int *hl_ranks = NULL;
    if (highlight && !svg) {
        mtc_grid_groups_free(&G);
        return cli_usage_error("ranks", "--highlight %s draws into the picture: add --svg FILE",
                               highlight);
    }
    if (highlight) {
        hl_ranks = malloc((size_t)spec.cfg.world_size * sizeof(int));
        status = hl_ranks ? parse_highlight(highlight, &G, spec.cfg.world_size, hl_ranks,
                                            spec.cfg.world_size, &hl)
                          : cli_fail("ranks", mtc_error(MTC_ERR_OUT_OF_MEMORY, "rank list"));
    }
    if (svg && status == 0) status = write_svg(svg, &spec, &G, gpn, highlight ? &hl : NULL);
    if (status == 0) {
        if (json)
            print_json(stdout, &spec, &G);
        else if (one_rank >= 0)
            print_rank(stdout, &spec, &G, one_rank);
        else
            print_text(stdout, &spec, &G, gpn);
    }
    free(hl_ranks);
    mtc_grid_groups_free(&G);
    return status;
}
