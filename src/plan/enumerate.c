/* plan/enumerate.c - every valid layout of a model on a world, named,
 * parsed back, predicted and sorted. Validity is mtc_plan_layout_check's
 * (grid rules of `mtc ranks`, the TP split, batch divisibility, the
 * schedule's rules); the varied knobs are tp, pp, vpp (the divisors of the
 * layers per stage), sequence parallelism and, when asked, the distributed
 * optimizer, and when asked cp. Micro batch, precision, recomputation and
 * the activation model stay the caller's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

void mtc_plan_layout_name(const mtc_plan_layout *l, char *buf, size_t n) {
    int vpp = l->vpp > 1 ? l->vpp : 1;
    char cp[16] = "";
    if (l->cp > 1) snprintf(cp, sizeof cp, "-cp%d", l->cp);
    char ep[32] = ""; /* MoE: the expert generator's sizes */
    if (l->model.moe.num_experts > 0)
        snprintf(ep, sizeof ep, "-ep%d-etp%d", l->ep > 1 ? l->ep : 1, l->etp > 0 ? l->etp : l->tp);
    snprintf(buf, n, "tp%d%s-pp%d%s%.0d-dp%d%s%s%s", l->tp, cp, l->pp, vpp > 1 ? "-vpp" : "",
             vpp > 1 ? vpp : 0, l->dp, ep, l->sequence_parallel ? "-sp" : "",
             l->distopt ? "-do" : "");
}

mtc_result_t mtc_plan_layout_parse(mtc_plan_layout *l, const char *spec) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec);
    l->vpp = 1, l->sequence_parallel = 0, l->distopt = 0;
    for (char *save, *t = strtok_r(buf, ",- ", &save); t; t = strtok_r(NULL, ",- ", &save)) {
        int v = 0;
        if (!strcmp(t, "sp"))
            l->sequence_parallel = 1;
        else if (!strcmp(t, "do") || !strcmp(t, "distopt"))
            l->distopt = 1;
        else if (sscanf(t, "etp=%d", &v) == 1 || sscanf(t, "etp%d", &v) == 1)
            l->etp = v;
        else if (sscanf(t, "ep=%d", &v) == 1 || sscanf(t, "ep%d", &v) == 1)
            l->ep = v;
        else if (sscanf(t, "tp=%d", &v) == 1 || sscanf(t, "tp%d", &v) == 1)
            l->tp = v;
        else if (sscanf(t, "vpp=%d", &v) == 1 || sscanf(t, "vpp%d", &v) == 1)
            l->vpp = v;
        else if (sscanf(t, "pp=%d", &v) == 1 || sscanf(t, "pp%d", &v) == 1)
            l->pp = v;
        else if (sscanf(t, "cp=%d", &v) == 1 || sscanf(t, "cp%d", &v) == 1)
            l->cp = v;
        else if (sscanf(t, "dp=%d", &v) == 1 || sscanf(t, "dp%d", &v) == 1)
            ; /* derived from the world; accepted so a printed name parses back */
        else
            return mtc_error(
                MTC_ERR_INVALID_ARGUMENT,
                "layout '%s': '%s' is not tpN, cpN, ppN, vppN, dpN, epN, etpN, sp or do "
                "(e.g. tp2-pp2-vpp2-sp-do or tp=2,pp=2,ep=2)",
                spec, t);
        if ((t[0] == 't' || t[0] == 'p' || t[0] == 'v' || t[0] == 'c' || t[0] == 'e') && v < 1)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT, "layout '%s': '%s' must be >= 1", spec, t);
    }
    return MTC_OK;
}

static int row_cmp(const void *a, const void *b) {
    const mtc_plan_row *x = a, *y = b;
    if (x->fits != y->fits) return y->fits - x->fits;
    if (x->time.step_s != y->time.step_s) return x->time.step_s < y->time.step_s ? -1 : 1;
    return x->mem.total_bytes < y->mem.total_bytes ? -1 : x->mem.total_bytes > y->mem.total_bytes;
}

static mtc_result_t enumerate_cp(const mtc_plan_layout *base, const mtc_plan_machine *m,
                                 int threads_per_rank, const mtc_plan_search *s,
                                 mtc_plan_row **rows, int *nrows);

/* With vary_cp: the layouts of every cp dividing the world (the layout
 * check refuses the sizes the sequence or the grid does not take), merged. */
mtc_result_t mtc_plan_enumerate(const mtc_plan_layout *base, const mtc_plan_machine *m,
                                int threads_per_rank, const mtc_plan_search *s, mtc_plan_row **rows,
                                int *nrows) {
    if (!s->vary_cp) return enumerate_cp(base, m, threads_per_rank, s, rows, nrows);
    *rows = NULL, *nrows = 0;
    mtc_plan_row *all = NULL;
    int n = 0;
    for (int cp = 1; cp <= base->world; cp++) {
        if (base->world % cp) continue;
        mtc_plan_layout b = *base;
        b.cp = cp;
        mtc_plan_row *r = NULL;
        int k = 0;
        mtc_result_t rc = enumerate_cp(&b, m, threads_per_rank, s, &r, &k);
        mtc_plan_row *g = rc == MTC_OK && k ? realloc(all, (size_t)(n + k) * sizeof *all) : all;
        if (rc == MTC_OK && k && !g) rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "plan: layout table");
        if (rc != MTC_OK) {
            free(r), free(all);
            return rc;
        }
        all = g;
        if (k) memcpy(all + n, r, (size_t)k * sizeof *r);
        n += k;
        free(r);
    }
    if (n) qsort(all, (size_t)n, sizeof *all, row_cmp);
    *rows = all, *nrows = n;
    return MTC_OK;
}

static mtc_result_t enumerate_cp(const mtc_plan_layout *base, const mtc_plan_machine *m,
                                 int threads_per_rank, const mtc_plan_search *s,
                                 mtc_plan_row **rows, int *nrows) {
    int vary_distopt = s->vary_distopt;
    *rows = NULL, *nrows = 0;
    int W = base->world, L = base->model.num_layers, cap = 64, n = 0;
    if (!s->vary_vpp && base->vpp > 1)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "plan: fixing vpp=%d is not supported",
                         base->vpp);
    mtc_plan_row *r = malloc((size_t)cap * sizeof *r);
    if (!r) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "plan: layout table");
    double limit = m->mem_bytes / (m->is_cpu ? W : 1); /* a host's RAM is shared by its ranks */
    for (int tp = 1; tp <= W; tp++) {
        if (W % tp) continue;
        for (int pp = 1; pp <= W / tp; pp++) {
            /* an uneven split or a layout string: pp/layout.c decides (in the check) */
            int split = pp_layout_given(&base->split);
            if ((W / tp) % pp || (!split && L % pp)) continue;
            int vmax = pp > 1 && s->vary_vpp ? (L + pp - 1) / pp : 1;
            for (int vpp = 1; vpp <= vmax && vpp <= 64; vpp++) {
                if (!split && (L / pp) % vpp) continue;
                int sp0 = s->vary_sp ? 0 : base->sequence_parallel && tp > 1;
                int sp1 = s->vary_sp ? tp > 1 : sp0;
                /* MoE: ep over the divisors of the experts (the grid refuses those
                 * not dividing the world / (etp pp)), etp 1 and = tp */
                int moe = base->model.moe.num_experts > 0;
                int epmax = moe && s->vary_ep ? base->model.moe.num_experts : 1;
                for (int ep = 1; ep <= epmax; ep++)
                    for (int et = 0; et <= (moe && s->vary_etp && tp > 1 ? 1 : 0); et++)
                        for (int sp = sp0; sp <= sp1; sp++)
                            for (int d = 0; d <= (vary_distopt ? 1 : 0); d++) {
                                if (epmax > 1 && base->model.moe.num_experts % ep) continue;
                                mtc_plan_layout l = *base;
                                l.tp = tp, l.pp = pp, l.vpp = vpp, l.sequence_parallel = sp;
                                l.distopt = vary_distopt ? d : base->distopt;
                                if (epmax > 1) l.ep = ep;
                                if (moe && s->vary_etp)
                                    l.etp = et ? tp : 1;
                                else if (base->etp == 0)
                                    l.etp = 0; /* the TP size of this layout */
                                if (mtc_plan_layout_check(&l) != MTC_OK) continue;
                                if (vary_distopt && d && l.dp == 1 &&
                                    (!moe || l.ep == 1 || l.edp == 1))
                                    continue; /* same as plain */
                                if (n == cap) {
                                    mtc_plan_row *g = realloc(r, (size_t)(cap *= 2) * sizeof *r);
                                    if (!g) {
                                        free(r);
                                        return mtc_error(MTC_ERR_OUT_OF_MEMORY,
                                                         "plan: layout table");
                                    }
                                    r = g;
                                }
                                mtc_plan_row *x = &r[n];
                                x->layout = l;
                                mtc_result_t rc = mtc_plan_memory_peak(&l, &x->mem);
                                if (rc == MTC_OK)
                                    rc = mtc_plan_time_step(&l, m, threads_per_rank, &x->time);
                                if (rc != MTC_OK) {
                                    free(r);
                                    return rc;
                                }
                                x->fits = (double)x->mem.total_bytes <= limit;
                                n++;
                            }
            }
        }
    }
    qsort(r, (size_t)n, sizeof *r, row_cmp);
    *rows = r, *nrows = n;
    return MTC_OK;
}
