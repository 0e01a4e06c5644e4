/* grid/validate.c - the checks initialize_model_parallel makes that apply
 * outside PyTorch, in Megatron's order, plus the model-level rules of the
 * training arguments. Each refusal is one line holding Megatron's own
 * message, the values involved and the nearest valid choices.
 *
 * Order of checks (parallel_state.py): world % (tp*pp*cp); vpp needs pp > 1;
 * dense RankGenerator (order tokens); world % (etp*ep*pp); expert
 * RankGenerator; pp-last rule; equal pipeline groups; (dp*cp) % nd;
 * prod(hierarchical CP sizes) == cp; edp % nd.
 * Not checked (no meaning here): SHARP, gloo/UCC backends, "already
 * initialized", torch.distributed state. Hybrid context parallelism and
 * rank_offset are not supported. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grid/internal.h"

void mtc_grid_config_default(mtc_grid_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->world_size = 1;
    cfg->tp = cfg->pp = cfg->cp = cfg->ep = 1;
}

static int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }
static long lcm(long a, long b) { return a / gcd((int)a, (int)b) * b; }

/* "(valid: --tp 1 2, or --pp 1, or --world-size 16 32)": for each factor the
 * values that work with the others unchanged, then the nearest world sizes
 * that are multiples of `world_unit`. */
static void suggest_product(char *buf, size_t len, int W, const char *const flags[],
                            const int vals[], int n, long world_unit) {
    long prod = 1;
    for (int i = 0; i < n; i++)
        prod *= vals[i];
    size_t o = (size_t)snprintf(buf, len, "(valid:");
    int parts = 0;
    for (int i = 0; i < n && o < len; i++) {
        long others = prod / vals[i];
        if (W % others) continue;
        char divs[256];
        grid_divisors_near(divs, sizeof divs, (int)(W / others), vals[i], 4);
        o += (size_t)snprintf(buf + o, len - o, "%s --%s %s", parts++ ? "," : "", flags[i], divs);
    }
    long lo = (W / world_unit) * world_unit, hi = lo + world_unit;
    if (o < len) {
        if (lo > 0)
            o += (size_t)snprintf(buf + o, len - o, "%s --world-size %ld or %ld",
                                  parts ? ", or" : "", lo, hi);
        else
            o += (size_t)snprintf(buf + o, len - o, "%s --world-size %ld or %ld",
                                  parts ? ", or" : "", hi, 2 * hi);
    }
    if (o < len) snprintf(buf + o, len - o, ")");
}

/* Python repr of a list of lists, abbreviated past `max` lists. */
static size_t groups_repr(char *buf, size_t len, const int *ranks, int ng, int gs, int max) {
    size_t o = (size_t)snprintf(buf, len, "[");
    for (int g = 0; g < ng && o < len; g++) {
        if (g == max && ng > max + 1) {
            o += (size_t)snprintf(buf + o, len - o, ", ... (%d more)", ng - g);
            break;
        }
        o += (size_t)snprintf(buf + o, len - o, "%s[", g ? ", " : "");
        for (int k = 0; k < gs && o < len; k++)
            o += (size_t)snprintf(buf + o, len - o, "%s%d", k ? ", " : "", ranks[g * gs + k]);
        if (o < len) o += (size_t)snprintf(buf + o, len - o, "]");
    }
    if (o < len) o += (size_t)snprintf(buf + o, len - o, "]");
    return o;
}

/* The user's order with the pp token moved to the end (always valid for
 * rules 9 and 10: both generators then have pp stride world/pp). */
static void order_pp_last(char *out, size_t len, const char *full) {
    char tmp[MTC_GRID_ORDER_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s", full);
    size_t o = 0;
    out[0] = '\0';
    char *save = NULL; /* strtok_r: rank-threads validate concurrently */
    for (char *t = strtok_r(tmp, "-", &save); t; t = strtok_r(NULL, "-", &save))
        if (strcmp(t, "pp")) o += (size_t)snprintf(out + o, len - o, "%s%s", o ? "-" : "", t);
    snprintf(out + o, len - o, "%spp", o ? "-" : "");
}

static const char *const dense_names[MTC_DIM_COUNT] = {"tp", "pp", "dp", "ep", "cp"};
static const char *const expert_names[MTC_DIM_COUNT] = {"etp", "pp", "edp", "ep", "cp"};

/* "tp*cp = 2*1 = 2": the sizes before pp in a generator's order. */
static void before_pp(char *buf, size_t len, const mtc_grid_gen *g, const char *const names[]) {
    int p = g->pos[MTC_DIM_PP];
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < p && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? "*" : "", names[g->dim[i]]);
    if (o < len) o += (size_t)snprintf(buf + o, len - o, p ? " = " : "nothing = ");
    for (int i = 0; i < p && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%d", i ? "*" : "", g->size[i]);
    if (o < len && p > 1) o += (size_t)snprintf(buf + o, len - o, " = %d", g->stride[p]);
    if (o < len && p == 0) snprintf(buf + o, len - o, "1");
}

static mtc_result_t check_sizes(const mtc_grid_config *c) {
    struct {
        const char *flag;
        int v, min;
    } f[] = {
        {"world-size", c->world_size, 1},
        {"tensor-model-parallel-size", c->tp, 1},
        {"pipeline-model-parallel-size", c->pp, 1},
        {"context-parallel-size", c->cp, 1},
        {"expert-model-parallel-size", c->ep, 1},
        {"expert-tensor-parallel-size", c->etp, 0},
        {"virtual-pipeline-model-parallel-size", c->vpp, 0},
        {"num-distributed-optimizer-instances", c->num_dist_opt_instances, 0},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v < f[i].min)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT, "--%s is %d (valid: an integer >= %d)",
                             f[i].flag, f[i].v, f[i].min > 0 ? f[i].min : 1);
    if (c->world_size > MTC_GRID_MAX_WORLD)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "--world-size %d must be 1..%d (ranks of one job)", c->world_size,
                         MTC_GRID_MAX_WORLD);
    if (c->n_hcp < 0 || c->n_hcp > MTC_GRID_MAX_HCP)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "--hierarchical-context-parallel-sizes has %d levels (valid: at most %d)",
                         c->n_hcp, MTC_GRID_MAX_HCP);
    for (int i = 0; i < c->n_hcp; i++)
        if (c->hcp[i] < 1)
            return mtc_error(
                MTC_ERR_INVALID_ARGUMENT,
                "--hierarchical-context-parallel-sizes level %d is %d (valid: sizes >= 1)", i,
                c->hcp[i]);
    return MTC_OK;
}

mtc_result_t mtc_grid_spec_init(mtc_grid_spec *s, const mtc_grid_config *cfg) {
    memset(s, 0, sizeof *s);
    MTC_CHECK(check_sizes(cfg));
    s->cfg = *cfg;
    mtc_grid_config *c = &s->cfg;
    const char *order = cfg->order ? cfg->order : MTC_GRID_ORDER_DEFAULT;
    if (strlen(order) >= sizeof s->order)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "--order is %zu characters long (valid: at most %zu, e.g. %s)",
                         strlen(order), sizeof s->order - 1, MTC_GRID_ORDER_DEFAULT);
    snprintf(s->order, sizeof s->order, "%s", order);
    c->order = s->order;
    if (c->etp == 0) c->etp = c->tp;
    if (c->vpp == 1) c->vpp = 0; /* training turns vpp == 1 into None */
    s->nd = c->num_dist_opt_instances > 0 ? c->num_dist_opt_instances : 1;
    c->num_dist_opt_instances = s->nd;
    const int W = c->world_size;
    char sug[512];

    /* rule 4 */
    long model = (long)c->tp * c->pp * c->cp;
    if (W % model) {
        const char *fl[] = {"tp", "pp", "cp"};
        int v[] = {c->tp, c->pp, c->cp};
        suggest_product(sug, sizeof sug, W, fl, v, 3, model);
        return mtc_error(
            MTC_ERR_INVALID_ARGUMENT,
            "world_size (%d) is not divisible by %ld: tp*pp*cp = %d*%d*%d = %ld must divide "
            "the world size %d %s",
            W, model, c->tp, c->pp, c->cp, model, W, sug);
    }
    s->dp = (int)(W / model);
    /* rule 5 */
    if (c->vpp && c->pp <= 1) {
        char pps[128] = "";
        size_t o = 0;
        int room = W / (c->tp * c->cp), k = 0;
        for (int p = 2; p <= room && k < 5 && o < sizeof pps; p++)
            if (room % p == 0)
                o += (size_t)snprintf(pps + o, sizeof pps - o, "%s%d", k++ ? " " : ", or --pp ", p);
        return mtc_error(
            MTC_ERR_INVALID_ARGUMENT,
            "pipeline-model-parallel size should be greater than 1 with interleaved schedule: "
            "--virtual-pipeline-model-parallel-size %d needs pp > 1, got pp=%d "
            "(valid: drop --vpp%s)",
            c->vpp, c->pp, pps);
    }
    /* dense generator: rules 6, 7 */
    int dsize[MTC_DIM_COUNT] = {[MTC_DIM_TP] = c->tp,
                                [MTC_DIM_PP] = c->pp,
                                [MTC_DIM_DP] = s->dp,
                                [MTC_DIM_EP] = 1,
                                [MTC_DIM_CP] = c->cp};
    MTC_CHECK(
        grid_gen_init(&s->dense, dsize, s->order, s->order_full, sizeof s->order_full, "dense"));
    /* rule 8 */
    long emodel = (long)c->etp * c->ep * c->pp;
    if (W % emodel) {
        const char *fl[] = {"etp", "ep"};
        int v[] = {c->etp, c->ep};
        /* suggestions for etp/ep keep pp; world sizes must satisfy both rules */
        suggest_product(sug, sizeof sug, W / c->pp, fl, v, 2, lcm(model, emodel) / c->pp);
        /* the world-size part above is in units of W/pp: rescale it */
        char *ws = strstr(sug, "--world-size");
        if (ws) {
            long unit = lcm(model, emodel), lo = (W / unit) * unit;
            snprintf(ws, sizeof sug - (size_t)(ws - sug), "--world-size %ld or %ld)",
                     lo > 0 ? lo : unit, lo > 0 ? lo + unit : 2 * unit);
        }
        return mtc_error(
            MTC_ERR_INVALID_ARGUMENT,
            "world_size (%d) is not divisible by expert_tensor_model_pipeline_parallel size (%ld): "
            "etp*ep*pp = %d*%d*%d = %ld must divide the world size %d %s",
            W, emodel, c->etp, c->ep, c->pp, emodel, W, sug);
    }
    s->edp = (int)(W / emodel);
    int esize[MTC_DIM_COUNT] = {[MTC_DIM_TP] = c->etp,
                                [MTC_DIM_PP] = c->pp,
                                [MTC_DIM_DP] = s->edp,
                                [MTC_DIM_EP] = c->ep,
                                [MTC_DIM_CP] = 1};
    MTC_CHECK(grid_gen_init(&s->expert, esize, s->order, NULL, 0, "expert"));
    /* rule 9: Megatron tests the order string as given (case-sensitive) */
    size_t ol = strlen(s->order);
    int pp_last = ol >= 2 && !strcmp(s->order + ol - 2, "pp");
    char fix[MTC_GRID_ORDER_MAX + 16];
    order_pp_last(fix, sizeof fix, s->order_full);
    if (!(pp_last || c->pp == 1 || s->edp == s->dp))
        return mtc_error(
            MTC_ERR_INVALID_ARGUMENT,
            "When not using pp-last rank ordering, the data parallel size of the attention "
            "and moe layers must be the same: --order %s does not end in pp and pp=%d, so "
            "data_parallel_size %d (world/(tp*pp*cp)) must equal expert_data_parallel_size %d "
            "(world/(etp*ep*pp)) (valid: --order %s, or etp*ep = tp*cp = %d)",
            s->order, c->pp, s->dp, s->edp, fix, c->tp * c->cp);
    /* rule 10: compare the pp groups of both generators */
    if (s->dense.stride[s->dense.pos[MTC_DIM_PP]] != s->expert.stride[s->expert.pos[MTC_DIM_PP]]) {
        int *a = malloc(2 * (size_t)W * sizeof(int)), *b = a + W, na, nb;
        if (!a) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "pipeline groups of %d ranks", W);
        int gs = mtc_grid_gen_ranks(a, &na, &s->dense, W, "pp");
        mtc_grid_gen_ranks(b, &nb, &s->expert, W, "pp");
        int differ = memcmp(a, b, (size_t)W * sizeof(int)) != 0;
        char ra[320], rb[320];
        groups_repr(ra, sizeof ra, a, na, gs, 8);
        groups_repr(rb, sizeof rb, b, nb, gs, 8);
        free(a);
        if (differ) {
            char bd[128], be[128];
            before_pp(bd, sizeof bd, &s->dense, dense_names);
            before_pp(be, sizeof be, &s->expert, expert_names);
            return mtc_error(
                MTC_ERR_INVALID_ARGUMENT,
                "Pipeline parallel groups are expected to be the same for Non-Expert and "
                "Expert part, but got %s and %s: with --order %s the sizes before pp must "
                "multiply to the same pp stride, but dense %s while expert %s "
                "(valid: --order %s)",
                ra, rb, s->order, bd, be, fix);
        }
    }
    /* rule 11 */
    char divs[256];
    grid_divisors_near(divs, sizeof divs, gcd(s->dp * c->cp, s->edp), s->nd, 6);
    if ((s->dp * c->cp) % s->nd)
        return mtc_error(
            MTC_ERR_INVALID_ARGUMENT,
            "Data parallel size should be divisible by partial DistOpt shard factor: "
            "dp*cp = %d*%d = %d is not divisible by --num-distributed-optimizer-instances %d "
            "(valid: %s)",
            s->dp, c->cp, s->dp * c->cp, s->nd, divs);
    /* rule 13 */
    if (c->n_hcp > 0) {
        long prod = 1;
        for (int i = 0; i < c->n_hcp; i++)
            prod *= c->hcp[i];
        if (prod != c->cp) {
            char got[128];
            size_t o = 0;
            for (int i = 0; i < c->n_hcp && o < sizeof got; i++)
                o += (size_t)snprintf(got + o, sizeof got - o, "%s%d", i ? "," : "", c->hcp[i]);
            /* nearest: keep all levels but the last and fix the last, if it divides */
            long head = prod / c->hcp[c->n_hcp - 1];
            char near[160] = "";
            if (c->n_hcp > 1 && c->cp % head == 0) {
                o = 0;
                for (int i = 0; i + 1 < c->n_hcp; i++)
                    o += (size_t)snprintf(near + o, sizeof near - o, "%d,", c->hcp[i]);
                snprintf(near + o, sizeof near - o, "%ld or ", c->cp / head);
            }
            return mtc_error(
                MTC_ERR_INVALID_ARGUMENT,
                "AssertionError: np.prod(hierarchical_context_parallel_sizes) == "
                "context_parallel_size: --hierarchical-context-parallel-sizes %s multiply to "
                "%ld but context-parallel-size is %d (valid: sizes whose product is %d, e.g. "
                "%s%d)",
                got, prod, c->cp, c->cp, near, c->cp);
        }
    }
    /* rule 16 */
    if (s->edp % s->nd)
        return mtc_error(
            MTC_ERR_INVALID_ARGUMENT,
            "Expert data parallel size should be divisible by partial DistOpt shard factor: "
            "expert_data_parallel_size %d (world/(etp*ep*pp)) is not divisible by "
            "--num-distributed-optimizer-instances %d (valid: %s)",
            s->edp, s->nd, divs);
    return MTC_OK;
}

mtc_result_t mtc_grid_validate_model(const mtc_grid_spec *s, int heads, int seq_length,
                                     int num_experts, int num_layers, int vpp) {
    const mtc_grid_config *c = &s->cfg;
    char divs[256];
    if (heads > 0 && heads % c->tp) {
        grid_divisors_near(divs, sizeof divs, gcd(heads, s->cfg.world_size / (c->pp * c->cp)),
                           c->tp, 6);
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "num-attention-heads=%d is not divisible by tensor-model-parallel-size=%d "
                         "(valid tp: %s)",
                         heads, c->tp, divs);
    }
    if (seq_length > 0 && c->cp > 1 && seq_length % (2 * c->cp)) {
        long lo = seq_length / (2 * c->cp) * (2 * c->cp), hi = lo + 2 * c->cp;
        /* cp values dividing both seq_length/2 and world/(tp*pp) */
        int room = c->world_size / (c->tp * c->pp);
        grid_divisors_near(divs, sizeof divs, gcd(seq_length % 2 ? 1 : seq_length / 2, room), c->cp,
                           6);
        return mtc_error(
            MTC_ERR_INVALID_ARGUMENT,
            "seq-length=%d is not divisible by 2*context-parallel-size = %d (each CP rank "
            "holds 2 of the 2*cp chunks) (valid: --seq-length %ld or %ld, or cp: %s)",
            seq_length, 2 * c->cp, lo > 0 ? lo : hi, lo > 0 ? hi : 2 * hi, divs);
    }
    if (num_experts > 0 && num_experts % c->ep) {
        grid_divisors_near(divs, sizeof divs,
                           gcd(num_experts, s->cfg.world_size / (c->etp * c->pp)), c->ep, 6);
        return mtc_error(
            MTC_ERR_INVALID_ARGUMENT,
            "num-experts=%d is not divisible by expert-model-parallel-size=%d (valid ep: %s)",
            num_experts, c->ep, divs);
    }
    int v = vpp > 1 ? vpp : 1;
    if (num_layers > 0 && num_layers % (c->pp * v)) {
        long unit = (long)c->pp * v, lo = num_layers / unit * unit;
        char vs[128] = "", *o = vs;
        for (int k = 1; k <= num_layers / c->pp && o < vs + sizeof vs - 12; k++)
            if (num_layers % (c->pp * k) == 0) o += sprintf(o, "%s%d", o == vs ? "" : " ", k);
        return mtc_error(
            MTC_ERR_INVALID_ARGUMENT,
            "num-layers=%d is not divisible by pipeline-model-parallel-size*vpp = %d*%d = %ld "
            "(valid: --num-layers %ld or %ld%s%s)",
            num_layers, c->pp, v, unit, lo > 0 ? lo : unit, lo > 0 ? lo + unit : 2 * unit,
            vs[0] ? ", or vpp: " : "", vs);
    }
    return MTC_OK;
}

void mtc_grid_describe(char *buf, size_t len, const mtc_grid_spec *s) {
    const mtc_grid_config *c = &s->cfg;
    char h[128] = "None";
    size_t o = 0;
    for (int i = 0; i < c->n_hcp && o < sizeof h; i++)
        o += (size_t)snprintf(h + o, sizeof h - o, "%s%d%s", i ? ", " : "[", c->hcp[i],
                              i + 1 == c->n_hcp ? "]" : "");
    snprintf(
        buf, len,
        "using world size: %d, data-parallel size: %d, context-parallel size: %d, hierarchical "
        "context-parallel sizes: %s, tensor-model-parallel size: %d, pipeline-model-parallel size: "
        "%d",
        c->world_size, s->dp, c->cp, h, c->tp, c->pp);
}
