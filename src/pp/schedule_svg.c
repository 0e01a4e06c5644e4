/* pp/schedule_svg.c - draw a simulated pipeline timeline as one SVG file.
 *
 * Ranks are rows (rank 0 on top); each op is a box from its simulated start
 * to end, labelled F<m>.<c> or B<m>.<c>; forwards in cool hues, backwards in
 * warm ones, one hue per model chunk (pp_schedule_svg_fill); the row background is grey so idle
 * time (the bubble) shows as grey gaps. The title carries the configuration
 * and the bubble fraction of this timeline beside Megatron's (p-1)/(m*v);
 * a legend names the colours, and a thin band under each row marks its
 * warm-up (up to its first backward), steady 1F1B phase (up to the end of
 * its last forward) and cool-down.
 * Relies on pp_schedule_simulate for the spans. Does not compute anything
 * about the schedule itself. */
#include "pp/schedule.h"

/* One hue per model chunk, light enough for black labels: forwards in cool
 * hues (blue, violet, cyan, magenta), backwards in warm ones (green, amber,
 * yellow-green, rose), every pair at least 30 degrees of hue apart; chunks k and
 * k + 4 share a colour (their labels F<m>.<c> still differ). */
const char *pp_schedule_svg_fill(pp_op_kind_t kind, int chunk) {
    static const char *fwd[] = {"#8fbbe8", "#c4a4ec", "#7ed8d8", "#eea6dc"};
    static const char *bwd[] = {"#96d98c", "#f3c070", "#bbd369", "#ee8c99"};
    return kind == PP_OP_FORWARD ? fwd[chunk % 4] : bwd[chunk % 4];
}

mtc_result_t pp_schedule_svg(FILE *f, const pp_op *ops, const pp_schedule_counts *counts,
                             const pp_sim_span *spans, double makespan,
                             const pp_schedule_config *cfg, double t_fwd, double t_bwd) {
    int pp = cfg->pp, max_ops = pp_schedule_max_ops(cfg);
    double unit = makespan > 0 ? 1400.0 / makespan : 40.0; /* pixels per time unit */
    if (unit > 40.0) unit = 40.0;
    if (unit < 6.0) unit = 6.0;
    const double left = 70.0, top = 80.0, row = 30.0, box = 24.0;
    double width = left + makespan * unit + 20.0, height = top + pp * row + 30.0;
    pp_schedule_kind_t kind = pp_schedule_kind(cfg);

    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"monospace\">\n",
            width, height, width, height);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", width,
            height);
    fprintf(f, "<text x=\"10\" y=\"20\" font-size=\"14\">%s: pp=%d", pp_schedule_kind_name(kind),
            pp);
    if (kind == PP_SCHEDULE_INTERLEAVED)
        fprintf(f, " vpp=%d group=%d", cfg->vpp, pp_schedule_group_size(cfg));
    fprintf(f, " microbatches=%d%s (forward %g, backward %g)</text>\n", cfg->num_microbatches,
            cfg->forward_only ? " forward-only" : "", t_fwd, t_bwd);
    fprintf(f,
            "<text x=\"10\" y=\"40\" font-size=\"13\">bubble fraction: simulated %.4f, "
            "Megatron (p-1)/(m*v) = %.4f</text>\n",
            pp_sim_bubble_fraction(makespan, cfg, t_fwd, t_bwd), pp_bubble_formula(cfg));
    /* legend: the fills of each op kind and chunk, then the phase bands */
    int nchunks = cfg->vpp > 1 ? cfg->vpp : 1;
    double lx = 10;
    for (int k = 0; k < 2; k++)
        for (int c = 0; c < (nchunks < 4 ? nchunks : 4); c++) {
            char name[32];
            snprintf(name, sizeof name, nchunks > 1 ? "%s chunk %d" : "%s",
                     k ? "backward" : "forward", c);
            fprintf(f,
                    "<rect x=\"%.1f\" y=\"50\" width=\"12\" height=\"12\" fill=\"%s\" "
                    "stroke=\"#333\" stroke-width=\"0.5\"/><text x=\"%.1f\" y=\"60\" "
                    "font-size=\"11\">%s</text>\n",
                    lx, pp_schedule_svg_fill(k ? PP_OP_BACKWARD : PP_OP_FORWARD, c), lx + 15, name);
            lx += nchunks > 1 ? 130 : 85;
        }
    static const char *const phase_fill[3] = {"#f0a030", "#8060c0", "#30a0a0"};
    static const char *const phase_name[3] = {"warm-up", "steady 1F1B", "cool-down"};
    if (!cfg->forward_only)
        for (int p = 0; p < 3; p++, lx += 105)
            fprintf(f,
                    "<rect x=\"%.1f\" y=\"54\" width=\"12\" height=\"4\" fill=\"%s\"/><text "
                    "x=\"%.1f\" y=\"60\" font-size=\"11\">%s</text>\n",
                    lx, phase_fill[p], lx + 15, phase_name[p]);
    for (int r = 0; r < pp; r++) {
        double y = top + r * row;
        /* phase band: [0, first backward), [first backward, end of last forward), the rest */
        double first_b = -1, last_f = 0, last = 0;
        for (int i = 0; i < counts[r].nops; i++) {
            const pp_op *op = &ops[(size_t)r * max_ops + i];
            const pp_sim_span *sp = &spans[(size_t)r * max_ops + i];
            if (op->kind == PP_OP_BACKWARD && first_b < 0) first_b = sp->start;
            if (op->kind == PP_OP_FORWARD) last_f = sp->end;
            if (sp->end > last) last = sp->end;
        }
        if (first_b >= 0) {
            double edge[4] = {0, first_b, last_f > first_b ? last_f : first_b, last};
            for (int p = 0; p < 3; p++)
                if (edge[p + 1] > edge[p])
                    fprintf(f,
                            "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"3\" "
                            "fill=\"%s\"/>\n",
                            left + edge[p] * unit, y + box + 1, (edge[p + 1] - edge[p]) * unit,
                            phase_fill[p]);
        }
        fprintf(f, "<text x=\"10\" y=\"%.1f\" font-size=\"12\">rank %d</text>\n", y + box * 0.7, r);
        fprintf(f,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#e4e4e4\"/>\n",
                left, y, makespan * unit, box);
        for (int i = 0; i < counts[r].nops; i++) {
            const pp_op *op = &ops[(size_t)r * max_ops + i];
            const pp_sim_span *sp = &spans[(size_t)r * max_ops + i];
            double x = left + sp->start * unit, w = (sp->end - sp->start) * unit;
            char label[32];
            int len = snprintf(label, sizeof label, "%c%d.%d",
                               op->kind == PP_OP_FORWARD ? 'F' : 'B', op->microbatch, op->chunk);
            double fs = w / (0.62 * len);
            if (fs > 11.0) fs = 11.0;
            fprintf(f,
                    "<g><title>rank %d %s t=[%g,%g)</title><rect x=\"%.1f\" y=\"%.1f\" "
                    "width=\"%.1f\" height=\"%.1f\" fill=\"%s\" stroke=\"#333\" "
                    "stroke-width=\"0.5\"/>",
                    r, label, sp->start, sp->end, x, y, w, box,
                    pp_schedule_svg_fill(op->kind, op->chunk));
            if (fs >= 5.0)
                fprintf(f,
                        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%.1f\" "
                        "text-anchor=\"middle\">%s</text>",
                        x + w / 2, y + box / 2 + fs * 0.35, fs, label);
            fprintf(f, "</g>\n");
        }
    }
    /* time axis: a tick every forward-cost unit multiple that keeps labels apart */
    double y_axis = top + pp * row + 4;
    double step = t_fwd > 0 ? t_fwd : 1.0;
    while (step * unit < 30.0)
        step *= 2;
    for (double t = 0; t <= makespan + 1e-9; t += step)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" text-anchor=\"middle\">%g</text>\n",
                left + t * unit, y_axis + 10, t);
    fprintf(f, "</svg>\n");
    return ferror(f) ? mtc_error(MTC_ERR_IO, "writing the SVG failed") : MTC_OK;
}
