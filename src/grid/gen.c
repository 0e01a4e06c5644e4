/* grid/gen.c - Megatron's RankGenerator: order parsing, the masked-orthogonal
 * group enumeration (generate_masked_orthogonal_rank_groups) and the
 * coordinate helpers (rank <-> digits, pipeline neighbours).
 *
 * Relies on: nothing but the spec's generators. Pure integer arithmetic,
 * no allocation, no communicator.
 * Does not: validate sizes against each other (validate.c) or name groups
 * (groups.c). */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "grid/internal.h"

const char *const grid_dim_names[MTC_DIM_COUNT] = {"tp", "pp", "dp", "ep", "cp"};

static const char *const default_tokens[MTC_DIM_COUNT] = {"tp", "cp", "ep", "dp", "pp"};

static int dim_of_token(const char *tok, size_t len) {
    for (int d = 0; d < MTC_DIM_COUNT; d++)
        if (strlen(grid_dim_names[d]) == len && strncmp(grid_dim_names[d], tok, len) == 0) return d;
    return -1;
}

/* The user's order with every missing token whose size is not 1 inserted
 * after the nearest token that precedes it in the default order (so cp lands
 * after tp and ep before dp, as in tp-cp-ep-dp-pp). */
static void suggest_order(char *out, size_t len, const char *lower, const int size[MTC_DIM_COUNT]) {
    char toks[16][MTC_GRID_ORDER_MAX];
    int n = 0;
    const char *p = lower;
    while (n < 10) {
        const char *dash = strchr(p, '-');
        size_t l = dash ? (size_t)(dash - p) : strlen(p);
        if (l >= MTC_GRID_ORDER_MAX) l = MTC_GRID_ORDER_MAX - 1;
        memcpy(toks[n], p, l), toks[n][l] = '\0', n++;
        if (!dash) break;
        p = dash + 1;
    }
    for (int k = 0; k < MTC_DIM_COUNT; k++) {
        int d = dim_of_token(default_tokens[k], 2);
        int present = 0;
        for (int i = 0; i < n; i++)
            present |= !strcmp(toks[i], default_tokens[k]);
        if (present || size[d] == 1 || n >= 15) continue;
        int at = 0; /* insert after the last-present predecessor in the default order */
        for (int j = k - 1; j >= 0 && !at; j--)
            for (int i = 0; i < n; i++)
                if (!strcmp(toks[i], default_tokens[j])) at = i + 1;
        memmove(toks[at + 1], toks[at], (size_t)(n - at) * sizeof toks[0]);
        snprintf(toks[at], sizeof toks[at], "%s", default_tokens[k]);
        n++;
    }
    size_t o = 0;
    out[0] = '\0';
    for (int i = 0; i < n && o < len; i++)
        o += (size_t)snprintf(out + o, len - o, "%s%s", i ? "-" : "", toks[i]);
}

mtc_result_t grid_gen_init(mtc_grid_gen *g, const int size[MTC_DIM_COUNT], const char *order,
                           char *order_full, size_t order_full_len, const char *what) {
    char lower[MTC_GRID_ORDER_MAX + 16];
    size_t n = strlen(order);
    if (n >= MTC_GRID_ORDER_MAX)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "--order is %zu characters long (valid: at most %d, e.g. %s)", n,
                         MTC_GRID_ORDER_MAX - 1, MTC_GRID_ORDER_DEFAULT);
    for (size_t i = 0; i <= n; i++)
        lower[i] = (char)tolower((unsigned char)order[i]);
    char given[MTC_GRID_ORDER_MAX];
    memcpy(given, lower, n + 1);
    /* Megatron tests `name not in order` as a substring, in dict order. */
    for (int d = 0; d < MTC_DIM_COUNT; d++) {
        if (strstr(lower, grid_dim_names[d])) continue;
        if (size[d] != 1) {
            char fix[2 * MTC_GRID_ORDER_MAX];
            suggest_order(fix, sizeof fix, given, size);
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "--order %s has no '%s' token but the %s generator's %s size is %d: "
                             "The size of (%s) is (%d), but you haven'tspecified the order (%s). "
                             "(valid: --order %s; tokens of size 1 may be left out)",
                             order, grid_dim_names[d], what, grid_dim_names[d], size[d],
                             grid_dim_names[d], size[d], order, fix);
        }
        strcat(lower, "-");
        strcat(lower, grid_dim_names[d]);
    }
    int ntok = 0, seen[MTC_DIM_COUNT] = {0};
    const char *p = lower;
    for (;;) {
        const char *dash = strchr(p, '-');
        size_t l = dash ? (size_t)(dash - p) : strlen(p);
        int d = dim_of_token(p, l);
        if (d < 0) {
            const char *best = grid_dim_names[0];
            char tok[MTC_GRID_ORDER_MAX + 16];
            memcpy(tok, p, l), tok[l] = '\0';
            int bd = 99;
            for (int k = 0; k < MTC_DIM_COUNT; k++) {
                int dd = (int)(strlen(tok) != 2) + (tok[0] != grid_dim_names[k][0]) +
                         (tok[0] && tok[1] != grid_dim_names[k][1]);
                if (dd < bd) bd = dd, best = grid_dim_names[k];
            }
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "--order %s has the unknown token '%s': KeyError: '%s' "
                             "(valid tokens: tp cp ep dp pp joined by '-', e.g. %s%s%s%s)",
                             order, tok, tok, MTC_GRID_ORDER_DEFAULT,
                             bd <= 1 ? "; did you mean '" : "", bd <= 1 ? best : "",
                             bd <= 1 ? "'?" : "");
        }
        if (seen[d] || ntok >= MTC_DIM_COUNT)
            return mtc_error(
                MTC_ERR_INVALID_ARGUMENT,
                "--order %s names '%s' twice (Megatron does not detect this and "
                "builds corrupt groups) (valid: each of tp cp ep dp pp at most once, e.g. %s)",
                order, grid_dim_names[d], MTC_GRID_ORDER_DEFAULT);
        seen[d] = 1;
        g->dim[ntok] = d;
        g->size[ntok] = size[d];
        g->pos[d] = ntok;
        ntok++;
        if (!dash) break;
        p = dash + 1;
    }
    /* every name is present as a substring and every token is a name, so
     * the five tokens are all there (names are two letters, no dash) */
    if (ntok != MTC_DIM_COUNT)
        return mtc_error(MTC_ERR_INTERNAL, "order '%s' resolved to %d tokens", lower, ntok);
    int st = 1;
    for (int i = 0; i < MTC_DIM_COUNT; i++)
        g->stride[i] = st, st *= g->size[i];
    if (order_full) snprintf(order_full, order_full_len, "%s", lower);
    return MTC_OK;
}

int mtc_grid_gen_ranks(int *out, int *ngroups, const mtc_grid_gen *g, int world,
                       const char *token) {
    int mask[MTC_DIM_COUNT] = {0};
    const char *p = token;
    for (;;) {
        const char *dash = strchr(p, '-');
        size_t l = dash ? (size_t)(dash - p) : strlen(p);
        int d = dim_of_token(p, l);
        if (d < 0) return -1;
        mask[g->pos[d]] = 1;
        if (!dash) break;
        p = dash + 1;
    }
    int M[MTC_DIM_COUNT], U[MTC_DIM_COUNT], nm = 0, nu = 0, gsize = 1;
    for (int i = 0; i < MTC_DIM_COUNT; i++) {
        if (mask[i])
            M[nm++] = i, gsize *= g->size[i];
        else
            U[nu++] = i;
    }
    int ng = world / gsize;
    for (int gi = 0; gi < ng; gi++) {
        int base = 0, rest = gi;
        for (int j = 0; j < nu; j++) {
            base += (rest % g->size[U[j]]) * g->stride[U[j]];
            rest /= g->size[U[j]];
        }
        for (int k = 0; k < gsize; k++) {
            int r = base, kr = k;
            for (int j = 0; j < nm; j++) {
                r += (kr % g->size[M[j]]) * g->stride[M[j]];
                kr /= g->size[M[j]];
            }
            out[gi * gsize + k] = r;
        }
    }
    if (ngroups) *ngroups = ng;
    return gsize;
}

void mtc_grid_coord_of(mtc_grid_coord *c, const mtc_grid_spec *s, int rank) {
    const mtc_grid_gen *d = &s->dense, *e = &s->expert;
    c->rank = rank;
    c->tp = grid_gen_digit(d, rank, MTC_DIM_TP);
    c->cp = grid_gen_digit(d, rank, MTC_DIM_CP);
    c->dp = grid_gen_digit(d, rank, MTC_DIM_DP);
    c->pp = grid_gen_digit(d, rank, MTC_DIM_PP);
    c->etp = grid_gen_digit(e, rank, MTC_DIM_TP);
    c->ep = grid_gen_digit(e, rank, MTC_DIM_EP);
    c->edp = grid_gen_digit(e, rank, MTC_DIM_DP);
    /* index in the sorted dp-cp list: mixed radix, earlier order position fastest */
    c->dp_cp =
        d->pos[MTC_DIM_CP] < d->pos[MTC_DIM_DP] ? c->cp + s->cfg.cp * c->dp : c->dp + s->dp * c->cp;
    c->vpp = s->cfg.vpp > 1 ? s->cfg.vpp : 1;
}

int mtc_grid_rank_dense(const mtc_grid_spec *s, int tp, int cp, int dp, int pp) {
    const mtc_grid_gen *g = &s->dense;
    return tp * g->stride[g->pos[MTC_DIM_TP]] + cp * g->stride[g->pos[MTC_DIM_CP]] +
           dp * g->stride[g->pos[MTC_DIM_DP]] + pp * g->stride[g->pos[MTC_DIM_PP]];
}

int mtc_grid_rank_expert(const mtc_grid_spec *s, int etp, int ep, int edp, int pp) {
    const mtc_grid_gen *g = &s->expert;
    return etp * g->stride[g->pos[MTC_DIM_TP]] + ep * g->stride[g->pos[MTC_DIM_EP]] +
           edp * g->stride[g->pos[MTC_DIM_DP]] + pp * g->stride[g->pos[MTC_DIM_PP]];
}

static int pp_shift(const mtc_grid_spec *s, int rank, int delta) {
    const mtc_grid_gen *g = &s->dense;
    int pp = s->cfg.pp, r = grid_gen_digit(g, rank, MTC_DIM_PP);
    int to = ((r + delta) % pp + pp) % pp;
    return rank + (to - r) * g->stride[g->pos[MTC_DIM_PP]];
}

int mtc_grid_pp_next(const mtc_grid_spec *s, int rank) { return pp_shift(s, rank, 1); }
int mtc_grid_pp_prev(const mtc_grid_spec *s, int rank) { return pp_shift(s, rank, -1); }
int mtc_grid_is_first_stage(const mtc_grid_spec *s, int rank) {
    return grid_gen_digit(&s->dense, rank, MTC_DIM_PP) == 0;
}
int mtc_grid_is_last_stage(const mtc_grid_spec *s, int rank) {
    return grid_gen_digit(&s->dense, rank, MTC_DIM_PP) == s->cfg.pp - 1;
}

int grid_divisors_near(char *buf, size_t len, int n, int near, int max) {
    /* the divisors up to sqrt(n) and their partners, ascending (an int has
     * at most 1600 divisors; the 256 smallest are kept) */
    int small[2048], big[2048], ns = 0, nb = 0, div[256], nd = 0;
    for (int d = 1; (long)d * d <= n; d++)
        if (n % d == 0) {
            small[ns++] = d;
            if (d != n / d) big[nb++] = n / d;
        }
    for (int i = 0; i < ns && nd < 256; i++)
        div[nd++] = small[i];
    for (int i = nb - 1; i >= 0 && nd < 256; i--)
        div[nd++] = big[i];
    /* keep the `max` closest to `near` (ties: the smaller) */
    int keep[256] = {0}, kept = 0;
    while (kept < max && kept < nd) {
        int best = -1;
        for (int i = 0; i < nd; i++) {
            if (keep[i]) continue;
            long di = (long)div[i] - near, db = best < 0 ? 0 : (long)div[best] - near;
            if (di < 0) di = -di;
            if (db < 0) db = -db;
            if (best < 0 || di < db) best = i;
        }
        keep[best] = 1, kept++;
    }
    size_t o = 0;
    int w = 0;
    if (len) buf[0] = '\0';
    for (int i = 0; i < nd && o < len; i++)
        if (keep[i]) o += (size_t)snprintf(buf + o, len - o, "%s%d", w++ ? " " : "", div[i]);
    return w;
}
