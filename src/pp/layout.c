/* pp/layout.c - the pipeline split of num_layers over pp x vpp virtual
 * stages (see layout.h): the even split, uneven first/last pp ranks, the
 * embedding/loss counted as layers, and Megatron's layout strings.
 *
 *   flags / string --> per-stage counts (E t m L) --> validate (Megatron's
 *   rules, then every layer exactly once) --> prefix sums in virtual stage
 *   order = each stage's first layer
 *
 * A layout string is expanded as Megatron's parse_str_to_list does: commas
 * dropped, then "(...)*n" unrolled left to right (no nesting: the group
 * ends at the first ')'), then "x*n"; whatever is left must be E t m L or |.
 * Limitations: expansions longer than PP_LAYOUT_MAX_SYMBOLS are refused. */
#include "pp/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define E_ARG MTC_ERR_INVALID_ARGUMENT

int pp_layout_given(const pp_layout_args *a) {
    return a && (a->first_num_layers || a->last_num_layers || a->account_for_embedding ||
                 a->account_for_loss || a->layout);
}

/* a run of digits at s: its value (saturated) and length; 0 when none */
static int layout_digits(const char *s, long *v) {
    int n = 0;
    *v = 0;
    while (s[n] >= '0' && s[n] <= '9') {
        if (*v < 1000000000L) *v = *v * 10 + (s[n] - '0');
        n++;
    }
    return n;
}

static mtc_result_t layout_put(char *out, size_t *n, const char *s, size_t len, long times,
                               const char *layout) {
    if (times > 0 && len > 0 && (size_t)times > (PP_LAYOUT_MAX_SYMBOLS - *n) / len)
        return mtc_error(E_ARG,
                         "pipeline-model-parallel-layout '%s' expands to more than %d symbols",
                         layout, PP_LAYOUT_MAX_SYMBOLS);
    for (long t = 0; t < times; t++, *n += len)
        memcpy(out + *n, s, len);
    out[*n] = 0;
    return MTC_OK;
}

/* out: PP_LAYOUT_MAX_SYMBOLS + 1 chars, the expanded string */
static mtc_result_t layout_expand(char *out, const char *layout) {
    size_t len = strlen(layout), n = 0;
    char *a = malloc(len + 1), *b = malloc(PP_LAYOUT_MAX_SYMBOLS + 1);
    mtc_result_t rc = a && b ? MTC_OK : mtc_error(MTC_ERR_OUT_OF_MEMORY, "layout string");
    size_t m = 0;
    for (size_t i = 0; a && i < len; i++)
        if (layout[i] != ',') a[m++] = layout[i];
    if (a) a[m] = 0;
    /* pass 1: \(([^)]+)\)\*(\d+) */
    for (size_t i = 0; rc == MTC_OK && i < m;) {
        long times = 0;
        const char *close = a[i] == '(' ? strchr(a + i + 1, ')') : NULL;
        int nd =
            close && close > a + i + 1 && close[1] == '*' ? layout_digits(close + 2, &times) : 0;
        if (nd) {
            rc = layout_put(b, &n, a + i + 1, (size_t)(close - a - i - 1), times, layout);
            i = (size_t)(close + 2 + nd - a);
        } else
            rc = layout_put(b, &n, a + i++, 1, 1, layout);
    }
    /* pass 2: (.)\*(\d+) */
    size_t bn = n;
    n = 0;
    out[0] = 0;
    for (size_t i = 0; rc == MTC_OK && i < bn;) {
        long times = 0;
        int nd = i + 1 < bn && b[i + 1] == '*' ? layout_digits(b + i + 2, &times) : 0;
        rc = layout_put(out, &n, b + i, 1, nd ? times : 1, layout);
        i += nd ? (size_t)nd + 2 : 1;
    }
    free(a), free(b);
    return rc;
}

typedef struct {
    int nstages;
    int *t, *m, *e, *l; /* per stage */
    char first, last;   /* first and last symbol overall (0 = none) */
    int t_after_m;      /* the stage of a 't' after an 'm' + 1 (0: none) */
    int m_seen;
} layout_parsed;

static void layout_parsed_free(layout_parsed *p) {
    free(p->t), free(p->m), free(p->e), free(p->l);
    memset(p, 0, sizeof *p);
}

static mtc_result_t layout_parse(layout_parsed *p, const char *layout) {
    memset(p, 0, sizeof *p);
    char *s = malloc(PP_LAYOUT_MAX_SYMBOLS + 1);
    if (!s) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "layout string");
    mtc_result_t rc = layout_expand(s, layout);
    int ns = 1;
    for (const char *c = s; rc == MTC_OK && *c; c++)
        ns += *c == '|';
    if (rc == MTC_OK) {
        p->nstages = ns;
        p->t = calloc((size_t)ns, sizeof(int)), p->m = calloc((size_t)ns, sizeof(int));
        p->e = calloc((size_t)ns, sizeof(int)), p->l = calloc((size_t)ns, sizeof(int));
        if (!p->t || !p->m || !p->e || !p->l)
            rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "layout of %d stages", ns);
    }
    int st = 0;
    for (const char *c = s; rc == MTC_OK && *c; c++) {
        int *slot = *c == 't' ? p->t : *c == 'm' ? p->m : *c == 'E' ? p->e : *c == 'L' ? p->l : 0;
        if (*c == '|') {
            st++;
            continue;
        }
        if (!slot) {
            rc = mtc_error(E_ARG,
                           "pipeline-model-parallel-layout '%s': invalid layer character '%c' "
                           "(stage %d of the expanded layout), known layer characters: E "
                           "(embedding), t (transformer decoder layer), m (MTP layer), L (loss), "
                           "with | between stages, x*n and (...)*n repetition, optional commas",
                           layout, *c, st);
            break;
        }
        slot[st]++;
        if (*c == 't' && p->m_seen && !p->t_after_m) p->t_after_m = st + 1;
        p->m_seen |= *c == 'm';
        if (!p->first) p->first = *c;
        p->last = *c;
    }
    free(s);
    if (rc != MTC_OK) layout_parsed_free(p);
    return rc;
}

mtc_result_t pp_layout_num_stages(int *nstages, const char *layout) {
    layout_parsed p;
    MTC_CHECK(layout_parse(&p, layout));
    *nstages = p.nstages;
    layout_parsed_free(&p);
    return MTC_OK;
}

mtc_result_t pp_layout_num_layers(int *num_layers, const char *layout) {
    layout_parsed p;
    MTC_CHECK(layout_parse(&p, layout));
    *num_layers = 0;
    for (int s = 0; s < p.nstages; s++)
        *num_layers += p.t[s];
    layout_parsed_free(&p);
    return MTC_OK;
}

static const char *layer_name(char c) {
    return c == 'E' ? "embedding" : c == 'L' ? "loss" : c == 'm' ? "mtp" : c ? "decoder" : "none";
}

/* the layout string's counts (validated as validate_layer_layout does) */
static mtc_result_t layout_counts_string(int *cnt, int *mtp_stage, const pp_layout_args *a, int L,
                                         int pp, int vpp) {
    layout_parsed p;
    MTC_CHECK(layout_parse(&p, a->layout));
    mtc_result_t rc = MTC_OK;
    int ne = 0, nl = 0, nt = 0, nm = 0;
    for (int s = 0; s < p.nstages; s++)
        ne += p.e[s], nl += p.l[s], nt += p.t[s], nm += p.m[s];
    if (nm != a->mtp_num_layers)
        rc = mtc_error(E_ARG,
                       "pipeline-model-parallel-layout '%s': Number of mtp layers in layout must "
                       "match mtp_num_layers (%d 'm' for mtp-num-layers=%d)",
                       a->layout, nm, a->mtp_num_layers);
    else if (p.nstages % pp)
        rc = mtc_error(E_ARG,
                       "The length of pipeline_model_parallel_layout must be divisible by "
                       "pipeline_model_parallel_size (len(layout)=%d, "
                       "pipeline_model_parallel_size=%d): '%s' writes %d stages (give a "
                       "multiple of %d stages separated by |)",
                       p.nstages, pp, a->layout, p.nstages, pp);
    else if (p.nstages / pp != vpp)
        rc = mtc_error(E_ARG,
                       "virtual_pipeline_model_parallel_size conflicts with "
                       "pipeline_model_parallel_layout, (virtual_pipeline_model_parallel_size=%d, "
                       "detected_vpp_size=%d) (drop --vpp: the layout's %d stages / pp %d set it)",
                       vpp, p.nstages / pp, p.nstages, pp);
    else if (p.first != 'E')
        rc = mtc_error(E_ARG,
                       "pipeline-model-parallel-layout '%s': The first layer must be embedding, "
                       "but got %s (start the layout with E)",
                       a->layout, layer_name(p.first));
    else if (p.last != 'L')
        rc = mtc_error(E_ARG,
                       "pipeline-model-parallel-layout '%s': The last layer must be loss, but "
                       "got %s (end the layout with L)",
                       a->layout, layer_name(p.last));
    else if (ne != 1)
        rc = mtc_error(E_ARG,
                       "pipeline-model-parallel-layout '%s': Embedding must be specified exactly "
                       "once (got %d E)",
                       a->layout, ne);
    else if (nl != 1)
        rc = mtc_error(E_ARG,
                       "pipeline-model-parallel-layout '%s': Loss must be specified exactly once "
                       "(got %d L)",
                       a->layout, nl);
    else if (nt != L)
        rc = mtc_error(E_ARG,
                       "pipeline-model-parallel-layout '%s': Number of decoder layers %d must "
                       "match num_layers %d (%s %d 't')",
                       a->layout, nt, L, nt < L ? "add" : "remove", nt < L ? L - nt : nt - L);
    if (rc == MTC_OK && p.t_after_m)
        rc = mtc_error(E_ARG,
                       "pipeline-model-parallel-layout '%s': decoder layers must be placed before "
                       "MTP layers (stage %d has a 't' after an 'm')",
                       a->layout, p.t_after_m - 1);
    for (int s = 0; rc == MTC_OK && nm && s < p.nstages; s++) {
        if (p.m[s] && p.m[s] != nm)
            rc = mtc_error(E_ARG,
                           "pipeline-model-parallel-layout '%s': All of the MTP layers must be in "
                           "the same one virtual pipeline stage (stage %d has %d of %d)",
                           a->layout, s, p.m[s], nm);
        else if (p.m[s] && s / pp != vpp - 1)
            rc = mtc_error(E_ARG,
                           "pipeline-model-parallel-layout '%s': Currently we restrict that the "
                           "MTP should be always in the last virtual pipeline stage of that rank "
                           "(stage %d is pp rank %d's virtual stage %d of %d; move the 'm' to a "
                           "stage >= %d)",
                           a->layout, s, s % pp, s / pp, vpp, (vpp - 1) * pp);
        else if (p.m[s])
            *mtp_stage = s;
    }
    for (int s = 0; rc == MTC_OK && s < p.nstages; s++)
        cnt[s] = p.t[s];
    layout_parsed_free(&p);
    return rc;
}

/* --decoder-first/last-pipeline-num-layers (TransformerConfig.__post_init__) */
static mtc_result_t layout_counts_uneven(int *cnt, const pp_layout_args *a, int L, int pp,
                                         int vpp) {
    int f = a->first_num_layers, l = a->last_num_layers, mid = L, nmid = pp;
    if (pp < 2)
        return mtc_error(E_ARG,
                         "--decoder-%s-pipeline-num-layers needs --pipeline-model-parallel-size "
                         "> 1 (got %d)",
                         f ? "first" : "last", pp);
    if (f < 0) return mtc_error(E_ARG, "num_layers_in_first_pipeline_stage must be larger than 0");
    if (l < 0) return mtc_error(E_ARG, "num_layers_in_last_pipeline_stage must be larger than 0");
    if (f && vpp > 1 && f % vpp)
        return mtc_error(E_ARG,
                         "number of layers at first stage: %d must be divisible by virtual "
                         "pipeline parallel degree %d",
                         f, vpp);
    if (l && vpp > 1 && l % vpp)
        return mtc_error(E_ARG,
                         "number of layers at last stage: %d must be divisible by virtual "
                         "pipeline parallel degree %d",
                         l, vpp);
    if (f) mid -= f, nmid--;
    if (l) mid -= l, nmid--;
    if (mid < 0)
        return mtc_error(E_ARG,
                         "--decoder-first-pipeline-num-layers %d + --decoder-last-pipeline-num-"
                         "layers %d exceed num-layers=%d",
                         f, l, L);
    if (!mid != !nmid)
        return mtc_error(E_ARG,
                         "Mismatch: %d middle layers remaining but %d middle PP stages available.",
                         mid, nmid);
    if (nmid && mid % nmid)
        return mtc_error(E_ARG,
                         "number of layers at middle stage: %d must be divisible by the middle "
                         "pipeline model parallel size %d",
                         mid, nmid);
    if (nmid && vpp > 1 && (mid / nmid) % vpp)
        return mtc_error(E_ARG,
                         "number of layers on each middle pipeline rank: %d must be divisible by "
                         "virtual pipeline parallel degree %d",
                         mid / nmid, vpp);
    for (int r = 0; r < pp; r++) {
        int n = nmid ? mid / nmid : 0;
        if (r == 0 && f) n = f;
        if (r == pp - 1 && l) n = l;
        for (int v = 0; v < vpp; v++)
            cnt[v * pp + r] = n / vpp;
    }
    return MTC_OK;
}

/* the even split, with the embedding / loss counted as layers when asked */
static mtc_result_t layout_counts_even(int *cnt, const pp_layout_args *a, int L, int pp, int vpp) {
    int e = a->account_for_embedding != 0, lo = a->account_for_loss != 0, total = L + e + lo;
    int S = pp * vpp;
    if (total % pp) {
        if (e || lo)
            return mtc_error(E_ARG,
                             "num_layers: %d after enable account_for_embedding_in_pipeline_split "
                             "or account_for_loss_in_pipeline_split must be divisible by "
                             "pipeline_model_parallel_size %d",
                             total, pp);
        return mtc_error(E_ARG,
                         "Number of layers should be divisible by the pipeline-model-parallel "
                         "size (num-layers=%d, pipeline-model-parallel-size=%d)",
                         L, pp);
    }
    if ((total / pp) % vpp)
        return mtc_error(E_ARG,
                         "number of layers on each pipeline rank: %d must be divisible by virtual "
                         "pipeline parallel degree %d",
                         total / pp, vpp);
    for (int s = 0; s < S; s++)
        cnt[s] = total / S;
    cnt[0] -= e, cnt[S - 1] -= lo;
    if (cnt[0] < 0)
        return mtc_error(E_ARG,
                         "Not enough layers in the first virtual pipeline stage "
                         "(--account-for-embedding-in-pipeline-split leaves it %d)",
                         cnt[0]);
    if (cnt[S - 1] < 0)
        return mtc_error(E_ARG,
                         "Not enough layers in the last virtual pipeline stage "
                         "(--account-for-loss-in-pipeline-split leaves it %d)",
                         cnt[S - 1]);
    return MTC_OK;
}

/* cnt: each stage's decoder layers; *mtp_stage: the stage with the 'm's
 * (the last stage without a layout string) */
static mtc_result_t layout_counts(int *cnt, int *mtp_stage, const pp_layout_args *a, int L, int pp,
                                  int vpp) {
    static const pp_layout_args none = {0};
    if (!a) a = &none;
    *mtp_stage = pp * vpp - 1;
    if (pp < 1 || vpp < 1 || L < 0)
        return mtc_error(E_ARG, "pipeline split of %d layers over pp=%d x vpp=%d", L, pp, vpp);
    int uneven = a->first_num_layers || a->last_num_layers;
    int account = a->account_for_embedding || a->account_for_loss;
    if (a->layout && (uneven || account))
        return mtc_error(E_ARG,
                         "pipeline_model_parallel_layout cannot be set with other pipeline layout "
                         "arguments. num_layers_in_first_pipeline_stage=%d, "
                         "num_layers_in_last_pipeline_stage=%d, "
                         "account_for_embedding_in_pipeline_split=%d, "
                         "account_for_loss_in_pipeline_split=%d (drop them or the layout)",
                         a->first_num_layers, a->last_num_layers, a->account_for_embedding,
                         a->account_for_loss);
    if (uneven && account)
        return mtc_error(E_ARG,
                         "num_layers_in_first_pipeline_stage and num_layers_in_last_pipeline_stage "
                         "cannot be set at the same time with "
                         "account_for_embedding_in_pipeline_split and "
                         "account_for_loss_in_pipeline_split");
    mtc_result_t rc = a->layout ? layout_counts_string(cnt, mtp_stage, a, L, pp, vpp)
                      : uneven  ? layout_counts_uneven(cnt, a, L, pp, vpp)
                                : layout_counts_even(cnt, a, L, pp, vpp);
    MTC_CHECK(rc);
    /* every layer exactly once */
    long sum = 0;
    for (int s = 0; s < pp * vpp; s++) {
        if (cnt[s] < 0)
            return mtc_error(E_ARG,
                             "the pipeline split gives stage %d (pp rank %d, virtual %d) %d "
                             "layers",
                             s, s % pp, s / pp, cnt[s]);
        sum += cnt[s];
    }
    if (sum != L)
        return mtc_error(E_ARG,
                         "the pipeline split over pp=%d x vpp=%d stages builds %ld layers, not "
                         "num-layers=%d (it would %s layers)",
                         pp, vpp, sum, L, sum < L ? "drop" : "duplicate");
    return MTC_OK;
}

mtc_result_t pp_layout_build(pp_layout_stage *stages, const pp_layout_args *a, int num_layers,
                             int pp, int vpp) {
    if (vpp < 1) vpp = 1;
    int S = pp > 0 ? pp * vpp : 1;
    int *cnt = calloc((size_t)S, sizeof(int));
    if (!cnt) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "pipeline split of %d stages", S);
    int ms = S - 1, D = a ? a->mtp_num_layers : 0;
    mtc_result_t rc = layout_counts(cnt, &ms, a, num_layers, pp, vpp);
    /* a standalone MTP stage sends [h_0 | h_1 .. h_D] on to the loss */
    for (int s = 0, first = 0; rc == MTC_OK && s < S; first += cnt[s++])
        stages[s] = (pp_layout_stage){.first_layer = first,
                                      .num_layers = cnt[s],
                                      .has_embedding = s == 0,
                                      .has_loss = s == S - 1,
                                      .num_mtp = s == ms ? D : 0,
                                      .in_states = D && s > ms ? 1 + D : 1,
                                      .out_states = D && s >= ms && s < S - 1 ? 1 + D : 1};
    free(cnt);
    return rc;
}

mtc_result_t pp_layout_validate(const pp_layout_args *a, int num_layers, int pp, int vpp) {
    if (vpp < 1) vpp = 1;
    pp_layout_stage *st = calloc((size_t)(pp > 0 ? pp * vpp : 1), sizeof *st);
    if (!st) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "pipeline split");
    mtc_result_t rc = pp_layout_build(st, a, num_layers, pp, vpp);
    free(st);
    return rc;
}

mtc_result_t pp_layout_stage_get(pp_layout_stage *out, const pp_layout_args *a, int num_layers,
                                 int pp, int vpp, int stage) {
    if (vpp < 1) vpp = 1;
    if (stage < 0 || stage >= pp * vpp)
        return mtc_error(E_ARG, "stage %d is outside 0..%d", stage, pp * vpp - 1);
    pp_layout_stage *st = calloc((size_t)(pp * vpp), sizeof *st);
    if (!st) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "pipeline split");
    mtc_result_t rc = pp_layout_build(st, a, num_layers, pp, vpp);
    if (rc == MTC_OK) *out = st[stage];
    free(st);
    return rc;
}

/* "embedding,decoder*3" / "(empty stage)" */
static void stage_repr(char *buf, size_t len, const pp_layout_stage *s) {
    size_t o = 0;
    buf[0] = 0;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        if (o < len) o += (size_t)snprintf(buf + o, len - o, __VA_ARGS__);                         \
    } while (0)
    if (s->has_embedding) PUT("embedding");
    if (s->num_layers == 1) PUT("%sdecoder", o ? "," : "");
    if (s->num_layers > 1) PUT("%sdecoder*%d", o ? "," : "", s->num_layers);
    if (s->num_mtp == 1) PUT("%smtp", o ? "," : "");
    if (s->num_mtp > 1) PUT("%smtp*%d", o ? "," : "", s->num_mtp);
    if (s->has_loss) PUT("%sloss", o ? "," : "");
    if (!o) PUT("(empty stage)");
#undef PUT
}

#define CELL 64
mtc_result_t pp_layout_describe(char *buf, size_t len, const pp_layout_args *a, int num_layers,
                                int pp, int vpp) {
    if (vpp < 1) vpp = 1;
    int S = pp * vpp, ncol = vpp + 1;
    if ((long)(pp + 1) * ncol > 65536) { /* no table of millions of cells */
        MTC_CHECK(pp_layout_validate(a, num_layers, pp, vpp));
        snprintf(buf, len, "(%d stages: too many for a table)", S);
        return MTC_OK;
    }
    pp_layout_stage *st = calloc((size_t)S, sizeof *st);
    /* rows: an optional header and at most pp rank rows */
    char(*cells)[CELL] = calloc((size_t)(pp + 1) * ncol, CELL);
    mtc_result_t rc = st && cells ? MTC_OK : mtc_error(MTC_ERR_OUT_OF_MEMORY, "layout table");
    if (rc == MTC_OK) rc = pp_layout_build(st, a, num_layers, pp, vpp);
    int nrow = 0;
    if (rc == MTC_OK && vpp > 1) {
        for (int v = 0; v < vpp; v++)
            snprintf(cells[v + 1], CELL, "VPP rank %d", v);
        nrow = 1;
    }
    for (int r = 0; rc == MTC_OK && r < pp;) {
        char *row = cells[(size_t)nrow * ncol];
        for (int v = 0; v < vpp; v++)
            stage_repr(row + (size_t)(v + 1) * CELL, CELL, &st[v * pp + r]);
        int r1 = r + 1; /* ranks r..r1-1 share the row */
        for (; r1 < pp; r1++) {
            int same = 1;
            char tmp[CELL];
            for (int v = 0; v < vpp && same; v++) {
                stage_repr(tmp, CELL, &st[v * pp + r1]);
                same = !strcmp(tmp, row + (size_t)(v + 1) * CELL);
            }
            if (!same) break;
        }
        if (r1 - r > 1)
            snprintf(row, CELL, "PP rank %d-%d", r, r1 - 1);
        else
            snprintf(row, CELL, "PP rank %d", r);
        nrow++, r = r1;
    }
    int *w = rc == MTC_OK ? calloc((size_t)ncol, sizeof(int)) : NULL;
    if (rc == MTC_OK && !w) rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "layout table");
    for (int c = 0; rc == MTC_OK && c < ncol; c++)
        for (int i = 0; i < nrow; i++) {
            int n = (int)strlen(cells[(size_t)i * ncol + c]);
            if (n > w[c]) w[c] = n;
        }
    int indent = vpp <= 4 ? 8 : 4;
    size_t o = 0;
    if (len) buf[0] = 0;
    for (int i = 0; rc == MTC_OK && len && i < nrow; i++) {
        size_t line = o;
        for (int c = 0; c < ncol; c++) {
            snprintf(buf + o, len - o, "%*s%-*s", c ? indent : 0, "", w[c],
                     cells[(size_t)i * ncol + c]);
            o += strlen(buf + o);
        }
        while (o > line && buf[o - 1] == ' ') /* no trailing spaces */
            buf[--o] = 0;
        if (i + 1 < nrow) {
            snprintf(buf + o, len - o, "\n");
            o += strlen(buf + o);
        }
    }
    free(st), free(cells), free(w);
    return rc;
}

void pp_layout_name(char *buf, size_t len, const pp_layout_args *a) {
    if (!pp_layout_given(a)) {
        snprintf(buf, len, "even");
    } else if (a->layout) {
        snprintf(buf, len, "layout %s", a->layout);
    } else if (a->first_num_layers || a->last_num_layers) {
        char f[32] = "", l[32] = "";
        if (a->first_num_layers) snprintf(f, sizeof f, "first %d", a->first_num_layers);
        if (a->last_num_layers) snprintf(l, sizeof l, "last %d", a->last_num_layers);
        snprintf(buf, len, "uneven: %s%s%s", f, f[0] && l[0] ? ", " : "", l);
    } else {
        snprintf(buf, len, "account for %s%s%s", a->account_for_embedding ? "embedding" : "",
                 a->account_for_embedding && a->account_for_loss ? "+" : "",
                 a->account_for_loss ? "loss" : "");
    }
}

void pp_layout_suggest(char *buf, size_t len, int num_layers, int pp, int vpp) {
    if (vpp < 1) vpp = 1;
    if (len) buf[0] = 0;
    if (pp < 2 || num_layers < 1 || pp > 4096) return;
    /* the most balanced of: k layers on every rank but the first (last),
     * or on every middle rank with the rest split over the first and last */
    int best = 0, bf = 0, bl = 0;
    for (int k = vpp; k <= num_layers; k += vpp) {
        for (int both = 0; both < 2; both++) {
            int rest = num_layers - (pp - 1 - both) * k, f = rest, l = 0;
            if (both) f = rest / 2 / vpp * vpp, l = rest - f;
            pp_layout_args a = {.first_num_layers = f, .last_num_layers = l};
            if (f <= 0 || (both && l <= 0) || (both && pp < 3)) continue;
            int worst = f > k ? f : k;
            worst = l > worst ? l : worst;
            if (pp_layout_validate(&a, num_layers, pp, vpp) == MTC_OK && (!best || worst < best))
                best = worst, bf = f, bl = l;
        }
    }
    if (!best) return;
    if (bl)
        snprintf(buf, len,
                 " (for an uneven split: e.g. --decoder-first-pipeline-num-layers %d "
                 "--decoder-last-pipeline-num-layers %d)",
                 bf, bl);
    else
        snprintf(buf, len, " (for an uneven split: e.g. --decoder-first-pipeline-num-layers %d)",
                 bf);
}

unsigned pp_layout_fingerprint(const char *layout) {
    unsigned h = 2166136261u;
    for (const char *c = layout; c && *c; c++)
        h = (h ^ (unsigned char)*c) * 16777619u;
    return layout ? h : 0;
}
