/* run_report.c - the helpers every report shares (run_report.h): a
 * layout's grid as a rank layout and a device's label on it. Neither the
 * engine nor a mode: both call these.
 */
#include "parity/run_report.h"

#include <stdio.h>

void report_device_label(const rank_layout_t *L, int rank, int full, const char *sub, char *buf,
                         size_t cap) {
    if (!L) {
        snprintf(buf, cap, "%d", rank);
        return;
    }
    if (full) {
        snprintf(buf, cap, "%d (tp %d, cp %d, ep %d, dp %d, pp %d%s%s)", rank,
                 layout_coord(L, rank, "tp"), layout_coord(L, rank, "cp"),
                 layout_coord(L, rank, "ep"), layout_coord(L, rank, "dp"),
                 layout_coord(L, rank, "pp"), sub && sub[0] ? "; " : "", sub ? sub : "");
        return;
    }
    int at = snprintf(buf, cap, "%d (tp %d", rank, layout_coord(L, rank, "tp"));
    if (layout_size(L, "cp") > 1 && at < (int)cap)
        at += snprintf(buf + at, cap - (size_t)at, ", cp %d", layout_coord(L, rank, "cp"));
    if (at < (int)cap) at += snprintf(buf + at, cap - (size_t)at, ", dp %d", layout_coord(L, rank, "dp"));
    if (layout_size(L, "pp") > 1 && at < (int)cap)
        at += snprintf(buf + at, cap - (size_t)at, ", pp %d", layout_coord(L, rank, "pp"));
    if (at < (int)cap) snprintf(buf + at, cap - (size_t)at, ")");
}

/* The grid's sizes as layout_init reads them. */
static void grid_sizes(const pconfig_t *pc, char *buf, size_t cap) {
    snprintf(buf, cap, "tp=%d,cp=%d,dp=%d,pp=%d", pc->tp > 1 ? pc->tp : 1, pc->cp > 1 ? pc->cp : 1,
             pc->dp, pc->pp > 1 ? pc->pp : 1);
}
int report_grid_layout(const pconfig_t *pc, rank_layout_t *L) {
    if (pconfig_hetero(pc)) return -1; /* two meshes, no one rectangle */
    char sizes[64];
    grid_sizes(pc, sizes, sizeof sizes);
    return layout_init_mapped(L, pc->order, sizes, pc->rank_list, pc->n_rank_list, NULL);
}
