/* svg_grid.c - the rank grid (grid.h) as a picture: who is where, with whom.
 *
 * One panel per pipeline stage, left to right. Inside a stage, a column
 * per tensor-parallel rank and a row per (dp, ep, cp) coordinate, so
 *   - a tp group is a row (outlined when tp > 1);
 *   - a cp group is a column inside a dashed box (when cp > 1);
 *   - a dp group is one colour within a panel: the devices holding the
 *     same shard that reduce gradients together.
 * Every box names its world rank and coordinates; where the order string
 * or a rank list puts a rank is read from the grid, never recomputed, so
 * the picture shows what the run would do.
 */
#include "parity/svg.h"

#include <stdio.h>

enum { BW = 104, BH = 38, GAP = 8, ROW_LABEL = 70, PANEL_GAP = 26, TOP = 66 };

/* A box's row inside its stage's panel: dp major, then ep, then cp. */
static int row_in_stage(const grid_t *G, const int *c) {
    return (c[GRID_DP] * G->size[GRID_EP] + c[GRID_EP]) * G->size[GRID_CP] + c[GRID_CP];
}

static void coords(const grid_t *G, const int *c, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "tp%d cp%d dp%d pp%d", c[GRID_TP], c[GRID_CP], c[GRID_DP], c[GRID_PP]);
    if (G->size[GRID_EP] > 1 && n > 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, " ep%d", c[GRID_EP]);
}

void svg_grid(FILE *f, const grid_t *G, const char *const *stage_note, const char *title) {
    const int tp = G->size[GRID_TP], cp = G->size[GRID_CP], pp = G->size[GRID_PP];
    const int rows = G->size[GRID_DP] * G->size[GRID_EP] * cp;
    const int panel_w = ROW_LABEL + tp * (BW + GAP) + GAP, panel_h = rows * (BH + GAP) + GAP;
    const int w = 20 + pp * (panel_w + PANEL_GAP), h = TOP + panel_h + 70;
    char buf[160];
    svg_begin(f, w, h, title);
    svg_text(f, 10, 20, "font-size=\"14\" font-weight=\"bold\"", title);
    grid_describe(G, buf, sizeof buf);
    svg_text(f, 10, 36, "fill=\"#555\"", buf);
    for (int r = 0; r < pp; r++) {
        const int x0 = 10 + r * (panel_w + PANEL_GAP), y0 = TOP;
        snprintf(buf, sizeof buf, "stage %d", r);
        fprintf(f, "<g class=\"stage\" data-pp=\"%d\">\n", r);
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" rx=\"6\" fill=\"#f6f6f6\" "
                   "stroke=\"#999\"/>\n", x0, y0, panel_w, panel_h);
        svg_text(f, x0, y0 - 18, "font-weight=\"bold\"", buf);
        if (stage_note && stage_note[r]) svg_text(f, x0, y0 - 5, "fill=\"#555\"", stage_note[r]);
        for (int row = 0; row < rows; row++) {
            const int y = y0 + GAP + row * (BH + GAP), dp = row / (cp * G->size[GRID_EP]);
            const int ep = row / cp % G->size[GRID_EP], c = row % cp;
            int n = snprintf(buf, sizeof buf, "dp %d", dp);
            if (G->size[GRID_EP] > 1) n += snprintf(buf + n, sizeof buf - (size_t)n, " ep %d", ep);
            if (cp > 1) snprintf(buf + n, sizeof buf - (size_t)n, " cp %d", c);
            svg_text(f, x0 + 6, y + BH / 2.0 + 4, "fill=\"#555\"", buf);
            if (tp > 1) /* the row is one tp group */
                fprintf(f, "<rect class=\"tp-group\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" rx=\"4\" "
                           "fill=\"none\" stroke=\"#1f4e8c\" stroke-width=\"1.5\"/>\n",
                        x0 + ROW_LABEL - 3, y - 3, tp * (BW + GAP) - GAP + 6, BH + 6);
            if (cp > 1 && c == 0) /* the cp rows of one (dp, ep): each column is a cp group */
                fprintf(f, "<rect class=\"cp-block\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" rx=\"6\" "
                           "fill=\"none\" stroke=\"#b5651d\" stroke-dasharray=\"5,3\"/>\n",
                        x0 + 2, y - 5, panel_w - 4, cp * (BH + GAP) - GAP + 10);
        }
        fputs("</g>\n", f);
    }
    for (int d = 0; d < G->world; d++) {
        const grid_device_t gd = grid_device(G, d);
        const int *c = gd.coord;
        const int x = 10 + c[GRID_PP] * (panel_w + PANEL_GAP) + ROW_LABEL + c[GRID_TP] * (BW + GAP);
        const int y = TOP + GAP + row_in_stage(G, c) * (BH + GAP);
        const int dp_group = (c[GRID_EP] * cp + c[GRID_CP]) * tp + c[GRID_TP];
        fprintf(f, "<g class=\"device\" data-rank=\"%d\" data-tp=\"%d\" data-cp=\"%d\" data-dp=\"%d\" "
                   "data-pp=\"%d\" data-ep=\"%d\">\n", d, c[GRID_TP], c[GRID_CP], c[GRID_DP], c[GRID_PP],
                c[GRID_EP]);
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" rx=\"3\" fill=\"%s\" "
                   "fill-opacity=\"0.35\" stroke=\"#333\"/>\n", x, y, BW, BH, svg_colour(dp_group));
        snprintf(buf, sizeof buf, "rank %d", d);
        svg_text(f, x + BW / 2.0, y + 15, "class=\"rank\" text-anchor=\"middle\" font-weight=\"bold\"", buf);
        coords(G, c, buf, sizeof buf);
        svg_text(f, x + BW / 2.0, y + 30, "class=\"coords\" text-anchor=\"middle\" font-size=\"10\"", buf);
        fputs("</g>\n", f);
    }
    const int ly = TOP + panel_h + 22;
    svg_text(f, 10, ly, "", "a row is a tensor-parallel group (tp ranks side by side, outlined when tp > 1);");
    svg_text(f, 10, ly + 15, "", "one colour within a stage is a data-parallel group (same shard, gradients reduced "
                                 "together);");
    if (cp > 1) svg_text(f, 10, ly + 30, "", "a column inside a dashed box is a context-parallel group.");
    svg_end(f);
}
