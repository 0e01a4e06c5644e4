/* grid/svg.c - a self-contained SVG picture of the rank grid, to replace the
 * hand-drawn figures people post when asking how Megatron maps ranks.
 *
 *   title: the layout; one box per node holding its ranks as cells;
 *   cell fill   = tensor-parallel group (one hue per group);
 *   left stripe = pipeline stage (legend); text = rank, dp replica and every
 *                 coordinate; hover title lists them too;
 *   red dashed outline = the cell's tensor-parallel group spans nodes;
 *   a table gives, per group kind, how many groups cross node boundaries;
 *   --highlight: a thick inner outline in one colour per group of the chosen
 *   kind (with the group's index, "g3"), or around the listed ranks with the
 *   other cells faded.
 * Relies on the spec (coordinates) and the built groups. Writes to a FILE*
 * the caller opened; does not choose file names or print errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "grid/grid.h"

#define CW 132 /* cell width */
#define CH 82  /* cell height: four text rows clear of the highlight outline */
/* DejaVu Sans Mono advances 0.602 em: pixels of n characters at `size` px */
#define TEXT_W(n, size) ((int)ceil((double)(n)*0.61 * (size)))
#define GAP 6
#define PAD 14 /* node box padding */
#define MARGIN 20

static const char *const stage_colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                            "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
#define NSTAGE_COLOURS (int)(sizeof stage_colours / sizeof stage_colours[0])

static int crosses(const int *l, int n, int gpn) {
    for (int k = 1; k < n; k++)
        if (l[k] / gpn != l[0] / gpn) return 1;
    return 0;
}

/* The outline colour of group g of the highlighted kind: golden-angle hues,
 * dark and saturated (the fills are light), two lightness levels. */
static void group_outline(char *buf, size_t n, int g) {
    snprintf(buf, n, "hsl(%.0f,85%%,%d%%)", fmod(g * 137.508 + 20.0, 360.0), g % 2 ? 28 : 40);
}

mtc_result_t mtc_grid_render_svg(FILE *f, const mtc_grid_spec *s, const mtc_grid_groups *G,
                                 int gpn) {
    return mtc_grid_render_svg_highlight(f, s, G, gpn, NULL);
}

mtc_result_t mtc_grid_render_svg_highlight(FILE *f, const mtc_grid_spec *s,
                                           const mtc_grid_groups *G, int gpn,
                                           const mtc_grid_highlight *h) {
    const mtc_grid_config *c = &s->cfg;
    const int W = c->world_size;
    if (gpn < 1)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "gpus per node is %d (valid: >= 1)", gpn);
    const mtc_grid_group_set *tpset = mtc_grid_groups_find(G, MTC_GROUP_TP, 0);
    if (!tpset) return mtc_error(MTC_ERR_INVALID_ARGUMENT, "no tensor-parallel groups to draw");
    int *tp_group = malloc((size_t)W * sizeof(int)), *tp_cross = malloc((size_t)W * sizeof(int));
    if (!tp_group || !tp_cross) {
        free(tp_group), free(tp_cross);
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "svg of %d ranks", W);
    }
    for (int g = 0; g < tpset->count; g++) {
        const int *l = tpset->ranks + (size_t)g * tpset->size;
        int x = crosses(l, tpset->size, gpn);
        for (int k = 0; k < tpset->size; k++)
            tp_group[l[k]] = g, tp_cross[l[k]] = x;
    }

    const int nodes = (W + gpn - 1) / gpn;
    const int cols = gpn < 8 ? gpn : 8, rows = (gpn + cols - 1) / cols;
    const int node_w = 2 * PAD + cols * CW + (cols - 1) * GAP;
    const int node_h = 2 * PAD + 18 + rows * CH + (rows - 1) * GAP;
    const int title_h = 64;
    const int legend_rows = G->nsets + 4 + (h && h->set ? 2 : 0) + (h && h->ranks ? 2 : 0);
    /* the legend is as wide as its longest line (11 px text; nothing clipped) */
    int legend_chars = 80; /* the fixed lines and five stage swatches a row */
    for (int i = 0; i < G->nsets; i++) {
        int n = snprintf(NULL, 0, "%s %dx%d: %d of %d cross nodes", G->sets[i].name,
                         G->sets[i].count, G->sets[i].size, G->sets[i].count, G->sets[i].count);
        if (n > legend_chars) legend_chars = n;
    }
    if (h && h->set) {
        int n = 6 + snprintf(NULL, 0,
                             "highlight: %s, one outline colour per group (gN = group N "
                             "of %d)",
                             h->set->name, h->set->count);
        if (n > legend_chars) legend_chars = n;
    }
    if (h && h->ranks && 6 + 30 + 6 * (h->nranks < 24 ? h->nranks : 24) > legend_chars)
        legend_chars = 6 + 30 + 6 * (h->nranks < 24 ? h->nranks : 24);
    const int legend_w = TEXT_W(legend_chars, 11) + MARGIN;
    int width = MARGIN * 3 + node_w + legend_w;
    if (width < 900) width = 900;
    int grid_h = nodes * (node_h + GAP);
    int legend_h = legend_rows * 18 + 120 + 18 * ((c->pp + 4) / 5);
    int height = MARGIN * 2 + title_h + (grid_h > legend_h ? grid_h : legend_h);

    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d "
            "%d\" "
            "font-family=\"DejaVu Sans Mono, Menlo, Consolas, monospace\" font-size=\"11\">\n",
            width, height, width, height);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", width,
            height);
    fprintf(f,
            "<text x=\"%d\" y=\"%d\" font-size=\"16\" font-weight=\"bold\">Megatron-LM "
            "core_v0.18.0 rank "
            "grid: world %d = tp %d &#215; cp %d &#215; dp %d &#215; pp %d</text>\n",
            MARGIN, MARGIN + 14, W, c->tp, c->cp, s->dp, c->pp);
    fprintf(
        f,
        "<text x=\"%d\" y=\"%d\" font-size=\"12\">order %s (first varies fastest); expert: etp %d "
        "&#215; ep %d &#215; edp %d &#215; pp %d; %d ranks per node, %d node%s",
        MARGIN, MARGIN + 34, s->order_full, c->etp, c->ep, s->edp, c->pp, gpn, nodes,
        nodes == 1 ? "" : "s");
    if (c->vpp) fprintf(f, "; vpp %d", c->vpp);
    if (s->nd > 1) fprintf(f, "; %d distributed-optimizer instances", s->nd);
    fprintf(f, "</text>\n");

    /* nodes and cells */
    for (int n = 0; n < nodes; n++) {
        int nx = MARGIN, ny = MARGIN + title_h + n * (node_h + GAP);
        fprintf(f,
                "<g>\n<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" rx=\"8\" fill=\"#f4f4f4\" "
                "stroke=\"#888888\"/>\n",
                nx, ny, node_w, node_h);
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-weight=\"bold\">node %d (ranks %d-%d)</text>\n",
                nx + PAD, ny + PAD + 8, n, n * gpn,
                (n + 1) * gpn - 1 < W ? (n + 1) * gpn - 1 : W - 1);
        for (int i = 0; i < gpn && n * gpn + i < W; i++) {
            int r = n * gpn + i;
            mtc_grid_coord x;
            mtc_grid_coord_of(&x, s, r);
            int cx = nx + PAD + (i % cols) * (CW + GAP),
                cy = ny + PAD + 18 + (i / cols) * (CH + GAP);
            /* golden-angle hues, and six saturation/lightness pairs so groups whose hues
             * come close (every 8th or 13th) still differ: distinct well beyond ten groups */
            int g = tp_group[r];
            double hue = fmod(g * 137.508, 360.0);
            int sat = (g / 3) % 2 ? 45 : 65,
                light = 86 - 8 * (g % 3); /* black text stays >= 4.5:1 */
            const char *stage = stage_colours[x.pp % NSTAGE_COLOURS];
            int listed = 0, hg = -1, hpos = 0;
            for (int k = 0; h && h->ranks && k < h->nranks; k++)
                listed |= h->ranks[k] == r;
            if (h && h->set) hg = mtc_grid_group_of(h->set, r, &hpos);
            fprintf(
                f,
                "<g%s><title>rank %d: tp %d cp %d dp %d pp %d | etp %d ep %d edp %d | dp_cp %d | "
                "TP group %d%s",
                h && h->ranks && !listed ? " opacity=\"0.3\"" : "", r, x.tp, x.cp, x.dp, x.pp,
                x.etp, x.ep, x.edp, x.dp_cp, tp_group[r], tp_cross[r] ? " (crosses nodes)" : "");
            if (hg >= 0) fprintf(f, " | %s %d, index %d", h->set->name, hg, hpos);
            fprintf(f, "</title>\n");
            fprintf(f,
                    "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" rx=\"4\" "
                    "fill=\"hsl(%.0f,%d%%,%d%%)\" "
                    "stroke=\"%s\" stroke-width=\"%s\"%s/>\n",
                    cx, cy, CW, CH, hue, sat, light, tp_cross[r] ? "#d00000" : "#555555",
                    tp_cross[r] ? "2.5" : "1", tp_cross[r] ? " stroke-dasharray=\"6 3\"" : "");
            fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"8\" height=\"%d\" fill=\"%s\"/>\n", cx + 1,
                    cy + 1, CH - 2, stage);
            fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"13\" font-weight=\"bold\">r%d</text>\n",
                    cx + 14, cy + 16, r);
            /* the stage as dark text on a white pill outlined in its colour:
             * readable on every fill */
            const char *end = c->pp > 1 && x.pp == 0           ? " first"
                              : c->pp > 1 && x.pp == c->pp - 1 ? " last"
                                                               : "";
            char ppl[32];
            int pn = snprintf(ppl, sizeof ppl, "pp%d%s", x.pp, end), pw = TEXT_W(pn, 11) + 8;
            fprintf(f,
                    "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"15\" rx=\"4\" "
                    "fill=\"#ffffff\" stroke=\"%s\" stroke-width=\"2\"/>\n"
                    "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" fill=\"#111111\" "
                    "font-weight=\"bold\">%s</text>\n",
                    cx + CW - 7 - pw, cy + 6, pw, stage, cx + CW - 11, cy + 17, ppl);
            fprintf(f, "<text x=\"%d\" y=\"%d\">tp%d cp%d dp%d</text>\n", cx + 14, cy + 35, x.tp,
                    x.cp, x.dp);
            fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"#111111\">e: tp%d ep%d dp%d</text>\n",
                    cx + 14, cy + 51, x.etp, x.ep, x.edp);
            fprintf(f,
                    "<text x=\"%d\" y=\"%d\" font-size=\"10\" fill=\"#111111\">replica %d</text>\n",
                    cx + 14, cy + 67, x.dp);
            if (hg >= 0 || listed) { /* inside the cell's border, clear of the dashed one */
                char col[32] = "#000000";
                if (hg >= 0) group_outline(col, sizeof col, hg);
                fprintf(f,
                        "<rect class=\"highlight\" x=\"%d\" y=\"%d\" width=\"%d\" "
                        "height=\"%d\" rx=\"3\" fill=\"none\" stroke=\"%s\" "
                        "stroke-width=\"4\"/>\n",
                        cx + 3, cy + 3, CW - 6, CH - 6, col);
                if (hg >= 0) { /* gN: dark text on a white pill in the group's colour */
                    int gw = TEXT_W(snprintf(NULL, 0, "g%d", hg), 12) + 8;
                    fprintf(f,
                            "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"16\" rx=\"4\" "
                            "fill=\"#ffffff\" stroke=\"%s\" stroke-width=\"2\"/>\n"
                            "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" font-size=\"12\" "
                            "font-weight=\"bold\" fill=\"#111111\">g%d</text>\n",
                            cx + CW - 10 - gw, cy + 56, gw, col, cx + CW - 14, cy + 68, hg);
                }
            }
            fprintf(f, "</g>\n");
        }
        fprintf(f, "</g>\n");
    }

    /* legend */
    int lx = MARGIN * 2 + node_w, ly = MARGIN + title_h;
    fprintf(f, "<g>\n<text x=\"%d\" y=\"%d\" font-size=\"13\" font-weight=\"bold\">Legend</text>\n",
            lx, ly + 10);
    ly += 28;
    fprintf(f,
            "<text x=\"%d\" y=\"%d\">fill: tensor-parallel group (same colour = same TP "
            "group)</text>\n",
            lx, ly);
    ly += 18;
    fprintf(f,
            "<text x=\"%d\" y=\"%d\">dp = data-parallel replica; e: = expert tp/ep/dp "
            "coordinates</text>\n",
            lx, ly);
    ly += 18;
    fprintf(f,
            "<rect x=\"%d\" y=\"%d\" width=\"28\" height=\"12\" fill=\"none\" stroke=\"#d00000\" "
            "stroke-width=\"2.5\" stroke-dasharray=\"6 3\"/>\n",
            lx, ly - 10);
    fprintf(f, "<text x=\"%d\" y=\"%d\">the cell's TP group spans more than one node</text>\n",
            lx + 36, ly);
    ly += 22;
    if (h && h->set) {
        char col[32];
        group_outline(col, sizeof col, 0);
        fprintf(f,
                "<rect x=\"%d\" y=\"%d\" width=\"28\" height=\"12\" fill=\"none\" stroke=\"%s\" "
                "stroke-width=\"4\"/>\n<text x=\"%d\" y=\"%d\">highlight: %s, one outline colour "
                "per group (gN = group N of %d)</text>\n",
                lx, ly - 10, col, lx + 36, ly, h->set->name, h->set->count);
        ly += 22;
    }
    if (h && h->ranks) {
        fprintf(f,
                "<rect x=\"%d\" y=\"%d\" width=\"28\" height=\"12\" fill=\"none\" "
                "stroke=\"#000000\" stroke-width=\"4\"/>\n<text x=\"%d\" y=\"%d\">highlight: "
                "ranks",
                lx, ly - 10, lx + 36, ly);
        for (int k = 0; k < h->nranks && k < 24; k++)
            fprintf(f, "%s%d", k ? "," : " ", h->ranks[k]);
        fprintf(f, "%s (the others faded)</text>\n", h->nranks > 24 ? ",..." : "");
        ly += 22;
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\">left stripe: pipeline stage</text>\n", lx, ly);
    ly += 6;
    for (int p = 0; p < c->pp; p++) {
        int px = lx + (p % 5) * 100, py = ly + (p / 5) * 18;
        fprintf(f,
                "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                "<text x=\"%d\" y=\"%d\">stage %d</text>\n",
                px, py + 4, stage_colours[p % NSTAGE_COLOURS], px + 16, py + 14, p);
    }
    ly += 18 * ((c->pp + 4) / 5) + 24;
    fprintf(f,
            "<text x=\"%d\" y=\"%d\" font-weight=\"bold\">group kind (count x size): crossing "
            "nodes</text>\n",
            lx, ly);
    ly += 18;
    for (int i = 0; i < G->nsets; i++) {
        const mtc_grid_group_set *set = &G->sets[i];
        int x = 0;
        for (int g = 0; g < set->count; g++)
            x += crosses(set->ranks + (size_t)g * set->size, set->size, gpn);
        fprintf(f, "<text x=\"%d\" y=\"%d\"%s>%s %dx%d: %s", lx, ly, x ? " fill=\"#d00000\"" : "",
                set->name, set->count, set->size, x ? "" : "intra-node");
        if (x) fprintf(f, "%d of %d cross nodes", x, set->count);
        fprintf(f, "</text>\n");
        ly += 18;
    }
    fprintf(f, "</g>\n</svg>\n");
    free(tp_group), free(tp_cross);
    return ferror(f) ? mtc_error(MTC_ERR_IO, "writing the SVG failed") : MTC_OK;
}
