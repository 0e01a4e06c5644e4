/* pp/schedule_trace.c - the executed pipeline schedule of one iteration,
 * read back from a trace `mtc train --trace` wrote (docs/trace.md), and its
 * SVG timeline with measured durations and bubbles.
 *
 *   trace.json ── process names (rank, pp stage) ── "iteration N" spans
 *      └─ per rank: its forward-backward span of iteration N, and inside
 *         it the forward/backward spans (mb, chunk) and the rank's
 *         communication spans (collectives, sends, receives)
 *
 * Rows are ranks ordered by pipeline stage, then world rank; time is ms from
 * the earliest forward-backward start of the iteration. A rank's bubble is
 * the share of its forward-backward span with no forward or backward
 * running, as train_obs.c measures it for the timer block.
 * Relies on cJSON and the drawing colours of schedule_svg.c. Limitations:
 * the whole file is parsed in memory (a trace is written per run and read
 * once); an iteration whose spans were dropped at the trace's memory bound
 * is drawn with what is there. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/outfile.h"
#include "pp/schedule.h"

static void *grow(void *v, int *cap, int n, size_t size) {
    if (n < *cap) return v;
    int c = *cap ? 2 * *cap : 64;
    void *p = realloc(v, (size_t)c * size);
    if (p) *cap = c;
    return p;
}

static int coord(const char *name, const char *key) {
    const char *s = strstr(name, key);
    return s ? atoi(s + strlen(key)) : -1;
}

static mtc_result_t read_all(const char *path, char **out) {
    *out = NULL;
    FILE *f = NULL; /* a FIFO or device is refused at once (it blocked or never ended) */
    mtc_result_t orc = mtc_infile_open(path, &f);
    if (orc == MTC_ERR_INVALID_ARGUMENT) return orc;
    if (orc != MTC_OK)
        return mtc_error(MTC_ERR_IO, "cannot read trace %s (write one with mtc train --trace)",
                         path);
    size_t cap = 1 << 20, n = 0;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n - 1, f);
        if (n + 1 < cap) break;
        char *p = realloc(b, cap * 2);
        if (!p) free(b);
        b = p, cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!b) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "reading trace %s", path);
    if (err) {
        free(b);
        return mtc_error(MTC_ERR_IO, "cannot read trace %s", path);
    }
    b[n] = 0;
    *out = b;
    return MTC_OK;
}

static double num(const cJSON *o, const char *k, double dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static const char *str(const cJSON *o, const char *k) {
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
    return s ? s : "";
}

void pp_trace_timeline_free(pp_trace_timeline *t) {
    for (int r = 0; t->rows && r < t->nrows; r++)
        free(t->rows[r].ops), free(t->rows[r].comm);
    free(t->rows);
    memset(t, 0, sizeof *t);
}

static int row_cmp(const void *a, const void *b) {
    const pp_trace_row *x = a, *y = b;
    return x->pp_stage != y->pp_stage ? x->pp_stage - y->pp_stage : x->rank - y->rank;
}

static int op_cmp(const void *a, const void *b) {
    const pp_trace_op *x = a, *y = b;
    return x->t0 < y->t0 ? -1 : x->t0 > y->t0;
}

mtc_result_t pp_trace_timeline_load(pp_trace_timeline *t, const char *path, int64_t iteration) {
    memset(t, 0, sizeof *t);
    char *text = NULL;
    MTC_CHECK(read_all(path, &text));
    cJSON *doc = cJSON_Parse(text);
    free(text);
    const cJSON *evs = cJSON_GetObjectItemCaseSensitive(doc, "traceEvents");
    const cJSON *other = cJSON_GetObjectItemCaseSensitive(doc, "otherData");
    int W = (int)num(other, "world_size", 0);
    if (!cJSON_IsArray(evs) || strcmp(str(other, "producer"), "mtc") || W < 1 || W > (1 << 20)) {
        cJSON_Delete(doc);
        return mtc_error(MTC_ERR_FORMAT,
                         "%s is not a trace written by mtc train --trace (no traceEvents, or no "
                         "otherData.producer \"mtc\" with a world_size)",
                         path);
    }
    mtc_result_t rc = MTC_OK;
    int64_t dropped = (int64_t)num(other, "dropped_events", 0);
    t->rows = calloc((size_t)W, sizeof *t->rows);
    double *step0 = calloc((size_t)W, sizeof(double)), *step1 = calloc((size_t)W, sizeof(double));
    if (!t->rows || !step0 || !step1) rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "trace of %d ranks", W);
    t->nrows = rc == MTC_OK ? W : 0;
    int64_t lo = -1, hi = -1;
    for (int r = 0; r < t->nrows; r++) {
        t->rows[r].rank = r, t->rows[r].pp_stage = 0, t->rows[r].fb0 = -1;
        snprintf(t->rows[r].name, sizeof t->rows[r].name, "rank %d", r);
        step0[r] = -1;
    }
    /* pass 0: names and the traced iterations; 1: the chosen iteration's step
     * spans; 2: each rank's forward-backward span in it; 3: the spans inside */
    const cJSON *e;
    for (int pass = 0; pass < 4 && rc == MTC_OK; pass++) {
        cJSON_ArrayForEach(e, evs) {
            int pid = (int)num(e, "pid", -1);
            if (pid < 0 || pid >= W) continue;
            pp_trace_row *row = &t->rows[pid];
            const char *ph = str(e, "ph"), *name = str(e, "name"), *cat = str(e, "cat");
            if (pass == 0 && !strcmp(ph, "M") && !strcmp(name, "process_name")) {
                const char *n = str(cJSON_GetObjectItemCaseSensitive(e, "args"), "name");
                snprintf(row->name, sizeof row->name, "%s", n);
                row->pp_stage = coord(n, "pp ") > 0 ? coord(n, "pp ") : 0;
                continue;
            }
            if (strcmp(ph, "X")) continue;
            double ts = num(e, "ts", 0) * 1e-3, te = ts + num(e, "dur", 0) * 1e-3;
            int step = !strcmp(cat, "step") && !strncmp(name, "iteration ", 10);
            if (pass == 0 && step) {
                int64_t it = atoll(name + 10);
                lo = lo < 0 || it < lo ? it : lo, hi = it > hi ? it : hi;
            }
            if (pass == 1 && step && atoll(name + 10) == t->iteration)
                step0[pid] = ts, step1[pid] = te;
            if (pass == 2 && !strcmp(cat, "forward-backward") && step0[pid] >= 0 &&
                ts >= step0[pid] && te <= step1[pid] + 1e-6)
                row->fb0 = ts, row->fb1 = te;
            if (pass != 3 || row->fb0 < 0 || ts < row->fb0 || te > row->fb1 + 1e-6) continue;
            const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
            int fwd = !strcmp(cat, "forward-compute"), bwd = !strcmp(cat, "backward-compute");
            if ((fwd || bwd) && num(args, "train", 1) != 0) {
                pp_trace_op *v = grow(row->ops, &row->cap_ops, row->nops, sizeof *v);
                if (!v) {
                    rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "trace spans");
                    break;
                }
                row->ops = v;
                v[row->nops++] =
                    (pp_trace_op){fwd ? PP_OP_FORWARD : PP_OP_BACKWARD, (int)num(args, "mb", 0),
                                  (int)num(args, "chunk", 0), ts, te};
            } else if (!strcmp(cat, "comm") || !strcmp(cat, "p2p")) {
                pp_trace_comm *v = grow(row->comm, &row->cap_comm, row->ncomm, sizeof *v);
                if (!v) {
                    rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "trace spans");
                    break;
                }
                row->comm = v;
                pp_trace_comm *c = &v[row->ncomm++];
                c->t0 = ts, c->t1 = te;
                snprintf(c->op, sizeof c->op, "%s", name);
                snprintf(c->group, sizeof c->group, "%s", str(args, "group"));
            }
        }
        /* the iteration asked for must be in the trace */
        t->iteration = iteration < 0 ? hi : iteration;
        if (pass == 1 && rc == MTC_OK) {
            int any = 0;
            for (int r = 0; r < W; r++)
                any |= step0[r] >= 0;
            if (!any && hi < 0)
                rc = mtc_error(MTC_ERR_FORMAT,
                               "%s holds no iteration spans (was the profiled range empty? see "
                               "--profile-step-start/--profile-step-end)",
                               path);
            else if (!any)
                rc = mtc_error(MTC_ERR_INVALID_ARGUMENT,
                               "iteration %lld is not in %s (traced: %lld to %lld)",
                               (long long)iteration, path, (long long)lo, (long long)hi);
        }
    }
    free(step0), free(step1);
    cJSON_Delete(doc);
    if (rc != MTC_OK) {
        pp_trace_timeline_free(t);
        return rc;
    }
    /* origin, sizes and the order of rows */
    double origin = -1, end = 0;
    for (int r = 0; r < t->nrows; r++) {
        pp_trace_row *row = &t->rows[r];
        if (row->fb0 >= 0 && (origin < 0 || row->fb0 < origin)) origin = row->fb0;
        if (row->pp_stage + 1 > t->pp) t->pp = row->pp_stage + 1;
        if (row->nops > 1) qsort(row->ops, (size_t)row->nops, sizeof *row->ops, op_cmp);
        for (int i = 0; i < row->nops; i++) {
            if (row->ops[i].chunk + 1 > t->vpp) t->vpp = row->ops[i].chunk + 1;
            if (row->ops[i].microbatch + 1 > t->microbatches)
                t->microbatches = row->ops[i].microbatch + 1;
        }
    }
    if (origin < 0) origin = 0;
    for (int r = 0; r < t->nrows; r++) {
        pp_trace_row *row = &t->rows[r];
        if (row->fb0 < 0) row->fb0 = row->fb1 = origin; /* no forward-backward span */
        row->fb0 -= origin, row->fb1 -= origin;
        row->busy = 0;
        for (int i = 0; i < row->nops; i++) {
            row->ops[i].t0 -= origin, row->ops[i].t1 -= origin;
            row->busy += row->ops[i].t1 - row->ops[i].t0;
        }
        for (int i = 0; i < row->ncomm; i++)
            row->comm[i].t0 -= origin, row->comm[i].t1 -= origin;
        double fb = row->fb1 - row->fb0;
        row->bubble = fb > 0 ? 1 - row->busy / fb : 0;
        if (row->fb1 > end) end = row->fb1;
    }
    t->makespan = end;
    t->dropped = dropped;
    if (t->vpp < 1) t->vpp = 1;
    if (t->nrows > 1) qsort(t->rows, (size_t)t->nrows, sizeof *t->rows, row_cmp);
    return MTC_OK;
}

double pp_trace_bubble_formula(const pp_trace_timeline *t) {
    double p = t->pp, v = t->vpp, m = t->microbatches;
    return p > 1 && m > 0 ? (p - 1) / (v * m + p - 1) : 0;
}

/* Communication spans: one colour per group kind. */
static const char *comm_fill(const char *group, const char *op) {
    if (strstr(group, "TENSOR")) return "#e6862e";
    if (strstr(group, "PIPELINE") || !strcmp(op, "send") || !strcmp(op, "recv") ||
        !strcmp(op, "sendrecv"))
        return "#2a9d8f";
    if (strstr(group, "EMBEDDING")) return "#b5179e";
    if (strstr(group, "DATA")) return "#7b61c9";
    if (strstr(group, "CONTEXT")) return "#c44536";
    return "#8a8a8a";
}

mtc_result_t pp_trace_timeline_svg(FILE *f, const pp_trace_timeline *t, const char *source) {
    double span = t->makespan > 0 ? t->makespan : 1;
    double scale = 1400.0 / span; /* pixels per ms */
    const double left = 190.0, top = 96.0, row_h = 38.0, box = 24.0, lane = 7.0;
    double width = left + span * scale + 110.0, height = top + t->nrows * row_h + 40.0;
    double mean = 0, lo = 1, hi = 0;
    for (int r = 0; r < t->nrows; r++) {
        mean += t->rows[r].bubble / t->nrows;
        lo = t->rows[r].bubble < lo ? t->rows[r].bubble : lo;
        hi = t->rows[r].bubble > hi ? t->rows[r].bubble : hi;
    }
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"monospace\">\n",
            width, height, width, height);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", width,
            height);
    fprintf(f,
            "<text x=\"10\" y=\"20\" font-size=\"14\">executed schedule of iteration %lld "
            "(measured): pp=%d",
            (long long)t->iteration, t->pp);
    if (t->vpp > 1) fprintf(f, " vpp=%d", t->vpp);
    fprintf(f, " microbatches=%d, %d ranks; trace ", t->microbatches, t->nrows);
    for (const char *s = source; *s; s++) /* the path, escaped */
        if (*s == '&' || *s == '<' || *s == '>')
            fputs(*s == '&' ? "&amp;" : *s == '<' ? "&lt;" : "&gt;", f);
        else
            fputc(*s, f);
    fprintf(f, "</text>\n");
    fprintf(f,
            "<text x=\"10\" y=\"40\" font-size=\"13\">bubble (idle share of forward-backward): "
            "mean %.1f%% (min %.1f%%, max %.1f%%); schedule (p-1)/(%sm+p-1) = %.1f%%</text>\n",
            100 * mean, 100 * lo, 100 * hi, t->vpp > 1 ? "v*" : "",
            100 * pp_trace_bubble_formula(t));
    /* legend */
    double lx = 10;
    int nchunks = t->vpp < 4 ? t->vpp : 4;
    for (int k = 0; k < 2; k++)
        for (int c = 0; c<nchunks; c++, lx += t->vpp> 1 ? 130 : 85) {
            char name[32];
            snprintf(name, sizeof name, t->vpp > 1 ? "%s chunk %d" : "%s",
                     k ? "backward" : "forward", c);
            fprintf(f,
                    "<rect x=\"%.1f\" y=\"52\" width=\"12\" height=\"12\" fill=\"%s\" "
                    "stroke=\"#333\" stroke-width=\"0.5\"/><text x=\"%.1f\" y=\"62\" "
                    "font-size=\"11\">%s</text>\n",
                    lx, pp_schedule_svg_fill(k ? PP_OP_BACKWARD : PP_OP_FORWARD, c), lx + 15, name);
        }
    static const char *const kinds[][2] = {{"TENSOR", "tp comm"},  {"PIPELINE", "pp send/recv"},
                                           {"DATA", "dp comm"},    {"EMBEDDING", "embedding"},
                                           {"CONTEXT", "cp comm"}, {"OTHER", "other comm"}};
    for (int k = 0; k < 6; k++, lx += 110)
        fprintf(f,
                "<rect x=\"%.1f\" y=\"56\" width=\"12\" height=\"%.0f\" fill=\"%s\"/><text "
                "x=\"%.1f\" y=\"62\" font-size=\"11\">%s</text>\n",
                lx, lane, comm_fill(kinds[k][0], ""), lx + 15, kinds[k][1]);
    fprintf(f, "<text x=\"10\" y=\"80\" font-size=\"11\">grey = idle (bubble); the thin lane "
               "under each row: that rank's communication calls</text>\n");
    for (int r = 0; r < t->nrows; r++) {
        const pp_trace_row *row = &t->rows[r];
        double y = top + r * row_h;
        fprintf(
            f, "<text x=\"10\" y=\"%.1f\" font-size=\"11\"><title>%s</title>rank %d pp %d</text>\n",
            y + box * 0.7, row->name, row->rank, row->pp_stage);
        fprintf(f,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#e4e4e4\"/>\n",
                left + row->fb0 * scale, y, (row->fb1 - row->fb0) * scale, box);
        for (int i = 0; i < row->nops; i++) {
            const pp_trace_op *o = &row->ops[i];
            double x = left + o->t0 * scale, w = (o->t1 - o->t0) * scale;
            char label[32];
            int len = snprintf(label, sizeof label, "%c%d.%d", o->kind == PP_OP_FORWARD ? 'F' : 'B',
                               o->microbatch, o->chunk);
            double fs = w / (0.62 * len);
            if (fs > 11.0) fs = 11.0;
            fprintf(f,
                    "<g><title>rank %d %s %.3f ms at %.3f ms</title><rect x=\"%.2f\" y=\"%.1f\" "
                    "width=\"%.2f\" height=\"%.1f\" fill=\"%s\" stroke=\"#333\" "
                    "stroke-width=\"0.4\"/>",
                    row->rank, label, o->t1 - o->t0, o->t0, x, y, w, box,
                    pp_schedule_svg_fill(o->kind, o->chunk));
            if (fs >= 5.0)
                fprintf(f,
                        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%.1f\" "
                        "text-anchor=\"middle\">%s</text>",
                        x + w / 2, y + box / 2 + fs * 0.35, fs, label);
            fprintf(f, "</g>\n");
        }
        for (int i = 0; i < row->ncomm; i++) {
            const pp_trace_comm *c = &row->comm[i];
            double w = (c->t1 - c->t0) * scale;
            fprintf(f,
                    "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.0f\" fill=\"%s\"><title>"
                    "%s %s %.3f ms</title></rect>\n",
                    left + c->t0 * scale, y + box + 1, w > 0.3 ? w : 0.3, lane,
                    comm_fill(c->group, c->op), c->op, c->group, c->t1 - c->t0);
        }
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">bubble %.1f%%</text>\n",
                left + span * scale + 8, y + box * 0.7, 100 * row->bubble);
    }
    /* time axis in ms */
    double y_axis = top + t->nrows * row_h + 14, step = 1e-3;
    for (int k = 0; step * scale < 60 && k < 60; k++) /* 1, 2, 5 x 10^n ms apart */
        step *= k % 3 == 1 ? 2.5 : 2;
    for (double x = 0; x <= span + 1e-9; x += step)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" text-anchor=\"middle\">%g</text>\n",
                left + x * scale, y_axis, x);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\">ms</text>\n", left + span * scale + 8,
            y_axis);
    fprintf(f, "</svg>\n");
    return ferror(f) ? mtc_error(MTC_ERR_IO, "writing the SVG failed") : MTC_OK;
}
