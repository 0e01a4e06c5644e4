/* cli/cmd_plot.c - `mtc plot METRICS.jsonl [MORE.jsonl ...] --svg FILE`:
 * the curves of `mtc train --metrics` files against iterations, in four
 * panels (lm loss with the validation loss dashed, learning rate, grad
 * norm, tokens per second), one colour per file and a legend naming the
 * files, so runs of different layouts can be compared in one picture.
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

static void plot_svg(FILE *f, const plot_run *runs, int nr) {
    const int W = 900, PH = 200, TOP = 30 + 18 * nr, L = 90, R = 20, GAP = 45;
    const int H = TOP + 4 * (PH + GAP);
    double xr[2], yr[4][2];
    plot_ranges(runs, nr, xr, yr);
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n"
            "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            W, H, W, H);
    for (int r = 0; r < nr; r++) { /* legend */
        int y = 20 + 18 * r;
        fprintf(f,
                "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"/>"
                "<text x=\"%d\" y=\"%d\">",
                L, y - 4, L + 30, y - 4, colours[r], L + 38, y);
        plot_escape(f, runs[r].path);
        fputs("</text>\n", f);
    }
    for (int p = 0; p < 4; p++) {
        int y0 = TOP + p * (PH + GAP) + 20, pw = W - L - R;
        fprintf(f,
                "<text x=\"%d\" y=\"%d\" font-weight=\"bold\">%s</text>\n"
                "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
                "stroke=\"#444\"/>\n"
                "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.4g</text>\n"
                "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.4g</text>\n"
                "<text x=\"%d\" y=\"%d\">%.0f</text>\n"
                "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.0f (iteration)</text>\n",
                L, y0 - 6, panel_title[p], L, y0, pw, PH, L - 6, y0 + 12, yr[p][1], L - 6, y0 + PH,
                yr[p][0], L, y0 + PH + 16, xr[0], L + pw, y0 + PH + 16, xr[1]);
        for (int r = 0; r < nr; r++)
            for (int k = 0; k < PLOT_SERIES; k++) {
                const plot_series *s = &runs[r].s[k];
                if (series_panel[k] != p || !s->n) continue;
                fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s points=\"",
                        colours[r], k == 1 ? " stroke-dasharray=\"6 3\"" : "");
                for (int i = 0; i < s->n; i++)
                    fprintf(f, "%s%.1f,%.1f", i ? " " : "",
                            L + pw * (s->x[i] - xr[0]) / (xr[1] - xr[0]),
                            y0 + PH - PH * (s->y[i] - yr[p][0]) / (yr[p][1] - yr[p][0]));
                fputs("\"/>\n", f);
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
