/* cli/cmd_plot.c - `mtc plot METRICS.jsonl [MORE.jsonl ...] --svg FILE`:
 * the curves of `mtc train --metrics` files against iterations, in four
 * panels (lm loss with the validation loss dashed, learning rate, grad
 * norm, tokens per second), one colour per file and a legend naming the
 * files, so runs of different layouts can be compared in one picture; a
 * file resuming the one given before it (mtc train --load of its
 * checkpoint) continues that curve. Both axes carry 1-2-5 ticks.
 * Relies on cJSON for the lines. Bad input (a missing file, a line that is
 * not JSON, a file without a single iteration) is refused before anything is
 * written, with exit status 2. Does not smooth or resample: every logged
 * point is drawn. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/outfile.h"
#include "core/args.h"

enum { PLOT_MAX_RUNS = 8, PLOT_SERIES = 5 }; /* loss, val loss, lr, grad norm, tokens/s */

static const char *const series_key[PLOT_SERIES] = {"lm_loss", "val_loss", "lr", "grad_norm",
                                                    "tokens_per_s"};
static const char *const panel_title[4] = {"lm loss (validation dashed)", "learning rate",
                                           "grad norm", "tokens per second"};
static const int series_panel[PLOT_SERIES] = {0, 0, 1, 2, 3};
static const char *const colours[PLOT_MAX_RUNS] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                                   "#ff7f0e", "#17becf", "#8c564b", "#e377c2"};

typedef struct {
    double *x, *y;
    int n, cap;
} plot_series;

typedef struct {
    const char *path;
    plot_series s[PLOT_SERIES];
    double first, last, gap; /* logged iterations: the first, the last, the widest step */
    int parent;              /* the run this one resumed (joined to it), -1 for none */
} plot_run;

static int series_add(plot_series *s, double x, double y) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        double *nx = realloc(s->x, (size_t)cap * sizeof *nx);
        if (!nx) return -1;
        s->x = nx;
        double *ny = realloc(s->y, (size_t)cap * sizeof *ny);
        if (!ny) return -1;
        s->y = ny, s->cap = cap;
    }
    s->x[s->n] = x, s->y[s->n] = y, s->n++;
    return 0;
}

/* 0, or an exit status after the one-line error. */
static int plot_read(plot_run *r) {
    FILE *f;
    if (mtc_infile_open(r->path, &f) != MTC_OK)
        return cli_usage_error("plot", "cannot read %s: %s (give metrics files of mtc train)",
                               r->path, mtc_error_detail());
    char line[1 << 16];
    int lineno = 0, points = 0;
    double prev = NAN;
    r->first = INFINITY, r->last = -INFINITY, r->gap = 1, r->parent = -1;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (strspn(line, " \t\r\n") == strlen(line)) continue;
        cJSON *o = cJSON_Parse(line);
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, "iteration");
        if (!cJSON_IsNumber(it)) {
            cJSON_Delete(o);
            fclose(f);
            return cli_usage_error("plot", "%s:%d is not a metrics line (no \"iteration\")",
                                   r->path, lineno);
        }
        double x = it->valuedouble;
        r->first = fmin(r->first, x), r->last = fmax(r->last, x);
        if (x - prev > r->gap) r->gap = x - prev;
        prev = x;
        for (int k = 0; k < PLOT_SERIES; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, series_key[k]);
            if (cJSON_IsNumber(v) && isfinite(v->valuedouble)) {
                if (series_add(&r->s[k], it->valuedouble, v->valuedouble)) {
                    cJSON_Delete(o);
                    fclose(f);
                    return cli_fail("plot", MTC_ERR_OUT_OF_MEMORY);
                }
                points++;
            }
        }
        cJSON_Delete(o);
    }
    fclose(f);
    if (!points) return cli_usage_error("plot", "%s has no logged iteration to draw", r->path);
    return 0;
}

/* The panels' ranges over every run. */
static void plot_ranges(const plot_run *runs, int nr, double xr[2], double yr[4][2]) {
    xr[0] = INFINITY, xr[1] = -INFINITY;
    for (int p = 0; p < 4; p++)
        yr[p][0] = INFINITY, yr[p][1] = -INFINITY;
    for (int r = 0; r < nr; r++)
        for (int k = 0; k < PLOT_SERIES; k++)
            for (int i = 0; i < runs[r].s[k].n; i++) {
                double x = runs[r].s[k].x[i], y = runs[r].s[k].y[i];
                double *yy = yr[series_panel[k]];
                xr[0] = fmin(xr[0], x), xr[1] = fmax(xr[1], x);
                yy[0] = fmin(yy[0], y), yy[1] = fmax(yy[1], y);
            }
    if (!(xr[1] > xr[0])) xr[0] -= 1, xr[1] += 1;
    for (int p = 0; p < 4; p++) {
        if (!isfinite(yr[p][0])) yr[p][0] = 0, yr[p][1] = 1;
        if (!(yr[p][1] > yr[p][0])) yr[p][0] -= 0.5, yr[p][1] += 0.5;
    }
}

/* XML-safe text of a file name. */
static void plot_escape(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else if (*s == '"')
            fputs("&quot;", f);
        else
            fputc(*s, f);
    }
}

/* A run given right after another that starts later than it and no later
 * than one logging step after its end is its resumption (mtc train --load
 * of the other's checkpoint): drawn as one curve in the parent's colour, the
 * resumed file's points replacing the parent's from its first iteration on
 * (as TensorBoard purges what a restart repeats). */
static void plot_join(plot_run *runs, int nr) {
    for (int r = 1; r < nr; r++) {
        const plot_run *p = &runs[r - 1];
        if (runs[r].first > p->first && runs[r].first <= p->last + p->gap) runs[r].parent = r - 1;
    }
}

/* The first run of r's chain, and whether point i of run r's series k is
 * drawn (not repeated by a later run of its chain). */
static int plot_root(const plot_run *runs, int r) {
    while (runs[r].parent >= 0)
        r = runs[r].parent;
    return r;
}
static double plot_until(const plot_run *runs, int nr, int r) {
    return r + 1 < nr && runs[r + 1].parent == r ? runs[r + 1].first : INFINITY;
}

/* "Nice" ticks covering [lo, hi]: the smallest step of 1, 2 or 5 x 10^k
 * giving at most 10 ticks, so at least 4 (consecutive steps differ by at most
 * 2.5x); writes up to max values, returns the count. */
static int plot_ticks(double lo, double hi, int integer, double *t, int max) {
    static const double mant[] = {1, 2, 5};
    double span = hi - lo, decade = pow(10, floor(log10(span / 10))), step = decade;
    for (int i = 0; span / step > 10 * (1 + 1e-9); i++)
        step = mant[(i + 1) % 3] * decade * pow(10, (i + 1) / 3);
    if (integer && step < 1) step = 1;
    int n = 0;
    for (double v = ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9 && n < max; v += step)
        t[n++] = fabs(v) < step * 1e-9 ? 0 : v;
    return n;
}

static void plot_svg(FILE *f, const plot_run *runs, int nr) {
    const int W = 900, PH = 200, TOP = 30 + 18 * nr, L = 90, R = 20, GAP = 45;
    const int H = TOP + 4 * (PH + GAP) + 20; /* the last axis' name */
    double xr[2], yr[4][2];
    plot_ranges(runs, nr, xr, yr);
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n"
            "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            W, H, W, H);
    for (int r = 0; r < nr; r++) { /* legend: a resumed run beside its parent */
        int y = 20 + 18 * r;
        if (runs[r].parent < 0)
            fprintf(f,
                    "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" "
                    "stroke-width=\"3\"/>",
                    L, y - 4, L + 30, y - 4, colours[r]);
        fprintf(f, "<text x=\"%d\" y=\"%d\">%s", L + 38, y, runs[r].parent < 0 ? "" : "+ ");
        plot_escape(f, runs[r].path);
        if (runs[r].parent >= 0)
            fprintf(f, " (resumed: from iteration %.0f on, joined to the curve above)",
                    runs[r].first);
        fputs("</text>\n", f);
    }
    for (int p = 0; p < 4; p++) {
        int y0 = TOP + p * (PH + GAP) + 20, pw = W - L - R;
        fprintf(f,
                "<text x=\"%d\" y=\"%d\" font-weight=\"bold\">%s</text>\n"
                "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
                "stroke=\"#444\"/>\n",
                L, y0 - 6, panel_title[p], L, y0, pw, PH);
        double t[16];
        int nt = plot_ticks(yr[p][0], yr[p][1], 0, t, 16);
        for (int i = 0; i < nt; i++) { /* y ticks, labels and light grid lines */
            double y = y0 + PH - PH * (t[i] - yr[p][0]) / (yr[p][1] - yr[p][0]);
            fprintf(f,
                    "<line class=\"ytick\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
                    "stroke=\"#ddd\"/><line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
                    "stroke=\"#444\"/><text class=\"ylabel%d\" x=\"%d\" y=\"%.1f\" "
                    "text-anchor=\"end\">%.6g</text>\n",
                    L, y, L + pw, y, L - 4, y, L, y, p, L - 6, y + 4, t[i]);
        }
        nt = plot_ticks(xr[0], xr[1], 1, t, 16);
        for (int i = 0; i < nt; i++) { /* x ticks: iterations */
            double x = L + pw * (t[i] - xr[0]) / (xr[1] - xr[0]);
            fprintf(
                f,
                "<line class=\"xtick\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" "
                "stroke=\"#444\"/><text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.0f</text>\n",
                x, y0 + PH, x, y0 + PH + 4, x, y0 + PH + 16, t[i]);
        }
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">iteration</text>\n", L + pw,
                y0 + PH + 30);
        for (int r = 0; r < nr; r++) {
            if (runs[r].parent >= 0) continue; /* drawn with its parent's chain */
            for (int k = 0; k < PLOT_SERIES; k++) {
                if (series_panel[k] != p) continue;
                int any = 0;
                for (int c = r; c < nr && (c == r || plot_root(runs, c) == r); c++) {
                    const plot_series *s = &runs[c].s[k];
                    double until = plot_until(runs, nr, c);
                    for (int i = 0; i < s->n; i++) {
                        if (s->x[i] >= until) continue;
                        if (!any)
                            fprintf(f,
                                    "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s "
                                    "points=\"",
                                    colours[r], k == 1 ? " stroke-dasharray=\"6 3\"" : "");
                        fprintf(f, "%s%.1f,%.1f", any++ ? " " : "",
                                L + pw * (s->x[i] - xr[0]) / (xr[1] - xr[0]),
                                y0 + PH - PH * (s->y[i] - yr[p][0]) / (yr[p][1] - yr[p][0]));
                    }
                }
                if (any) fputs("\"/>\n", f);
            }
        }
    }
    fputs("</svg>\n", f);
}

int cli_cmd_plot(int argc, char **argv) {
    const char *svg = NULL;
    mtc_arg args[] = {
        {"svg", NULL, MTC_ARG_STRING, &svg, "FILE", "write the picture here (required)", 0},
    };
    int nargs = (int)(sizeof args / sizeof args[0]);
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: mtc plot METRICS.jsonl [MORE.jsonl ...] --svg FILE\n\nDraw lm loss "
                   "(validation dashed), learning rate, grad norm and tokens per second of\n`mtc "
                   "train --metrics` files against iterations, one colour per file (up to "
                   "%d).\n\noptions:\n",
                   PLOT_MAX_RUNS);
            mtc_args_help(stdout, args, nargs);
            return 0;
        }
    const char *files[PLOT_MAX_RUNS + 1];
    int nfiles = 0;
    char err[512];
    if (mtc_args_parse(args, nargs, argc, argv, files, PLOT_MAX_RUNS + 1, &nfiles, err,
                       sizeof err) != MTC_OK)
        return cli_usage_error("plot", "%s", err);
    if (!svg) return cli_usage_error("plot", "--svg FILE is required (where to draw)");
    char svg_real[MTC_PATH_MAX];
    if (mtc_outfile_check(svg, "--svg", svg_real, sizeof svg_real) != MTC_OK)
        return cli_usage_error("plot", "%s", mtc_error_detail());
    if (nfiles < 1)
        return cli_usage_error("plot", "give at least one metrics file (mtc train --metrics FILE)");
    if (nfiles > PLOT_MAX_RUNS)
        return cli_usage_error("plot", "%d files given; at most %d runs fit one picture", nfiles,
                               PLOT_MAX_RUNS);
    plot_run runs[PLOT_MAX_RUNS];
    memset(runs, 0, sizeof runs);
    int st = 0;
    for (int r = 0; r < nfiles && !st; r++) {
        runs[r].path = files[r];
        st = plot_read(&runs[r]);
    }
    if (!st) plot_join(runs, nfiles);
    if (!st) {
        mtc_outfile o;
        mtc_result_t rc = mtc_outfile_open(&o, svg, "--svg");
        if (rc == MTC_OK) {
            plot_svg(o.f, runs, nfiles);
            rc = mtc_outfile_commit(&o);
        }
        if (rc != MTC_OK) st = cli_fail("plot", rc);
    }
    for (int r = 0; r < nfiles; r++)
        for (int k = 0; k < PLOT_SERIES; k++)
            free(runs[r].s[k].x), free(runs[r].s[k].y);
    return st;
}
