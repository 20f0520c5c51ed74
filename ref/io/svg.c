/* svg.c - the few SVG elements parity's pictures are made of (svg.h). */
#include "parity/svg.h"

void svg_escape(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

void svg_begin(FILE *f, int w, int h, const char *title) {
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n<title>",
            w, h, w, h);
    svg_escape(f, title);
    fputs("</title>\n", f);
    /* the arrowhead every arrow of the pictures ends with */
    fputs("<defs><marker id=\"arrow\" viewBox=\"0 0 8 8\" refX=\"7\" refY=\"4\" markerWidth=\"6\" "
          "markerHeight=\"6\" orient=\"auto\"><path d=\"M0,0 L8,4 L0,8 z\" fill=\"#333\"/></marker></defs>\n",
          f);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", w, h);
}

void svg_end(FILE *f) { fputs("</svg>\n", f); }

void svg_text(FILE *f, double x, double y, const char *attrs, const char *text) {
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\"%s%s>", x, y, attrs && *attrs ? " " : "", attrs ? attrs : "");
    svg_escape(f, text);
    fputs("</text>\n", f);
}

/* Colour-blind-safe and distinct enough for up to ten neighbours
 * (Tableau 10). */
const char *svg_colour(int i) {
    static const char *pal[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
                                "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
    const int n = (int)(sizeof pal / sizeof pal[0]);
    return pal[((i % n) + n) % n];
}
