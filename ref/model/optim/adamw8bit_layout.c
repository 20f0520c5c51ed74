/* adamw8bit_layout.c - which layouts adamw8bit can run (model.h's
 * adam8_check_blocks).
 *
 * A quantization block is optimizer_block consecutive elements of a
 * tensor's global flattened index (the last one shorter when the block
 * size does not divide the tensor). Its absmax is a max over the whole
 * block, so a device must hold every block it touches whole: then its
 * block of the tensor, read in its own row-major order, is a sequence of
 * whole global blocks, each tensor's local blocks start at its local
 * element 0, and the update is the golden one block for block. A cut
 * that splits a block would need the block's max from another device;
 * such a layout is refused, naming the block size, rather than run with
 * per-device blocks (the bug that --test-broken adamw8bit-shard-blocks
 * models). ZeRO's pieces are cut at block boundaries by the
 * data-parallel plan (dp.h).
 */
#include "model/gpt.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    size_t block, total; /* the block size, the tensor's elements */
    size_t start, len;   /* the run being merged: global [start, start + len) */
    size_t bad_lo, bad_hi, fits; /* the first run off the blocks; gcd of every run's ends */
    int bad;
} runs_t;

static size_t gcd(size_t a, size_t b) {
    while (b) {
        const size_t t = a % b;
        a = b, b = t;
    }
    return a;
}

static void flush(runs_t *r) {
    if (!r->len) return;
    const size_t end = r->start + r->len;
    r->fits = gcd(r->fits, r->start);
    if (end != r->total) r->fits = gcd(r->fits, end);
    if (!r->bad && (r->start % r->block || (end % r->block && end != r->total)))
        r->bad = 1, r->bad_lo = r->start, r->bad_hi = end;
    r->len = 0;
}

/* Runs along the last axis, merged where they continue each other in the
 * global flattened tensor (a block of whole rows is one run). */
static void on_run(void *ctx, size_t global_flat, size_t local_flat, size_t n) {
    (void)local_flat;
    runs_t *r = ctx;
    if (r->len && global_flat == r->start + r->len) {
        r->len += n;
        return;
    }
    flush(r);
    r->start = global_flat, r->len = n;
}

int adam8_check_blocks(const param_table_t *t, const model_config_t *cfg,
                       const int sizes[GRID_NAXES], const int coord[GRID_NAXES], perr_t *err) {
    if (cfg->optimizer != MODEL_OPT_ADAMW8BIT) return 0;
    for (int i = 0; i < t->count; i++) {
        const param_info_t *pi = &t->info[i];
        if (!pi->held || pi->numel == 0) continue;
        runs_t r = {.block = (size_t)cfg->optimizer_block, .total = placement_global_numel(&pi->pl)};
        placement_for_runs(&pi->pl, sizes, coord, on_run, &r);
        flush(&r);
        if (!r.bad) continue;
        char where[160] = "";
        for (int k = 0; k < pi->pl.ncuts; k++) {
            const grid_axis_t a = pi->pl.cut[k].over;
            const size_t at = strlen(where);
            snprintf(where + at, sizeof where - at, "%s%s rank %d of %d", k ? ", " : "",
                     grid_axis_name(a), coord[a], sizes[a]);
        }
        return perr_set(err,
                        "--optimizer adamw8bit: %s: the block of %s holds elements [%zu, %zu) of "
                        "its %zu (flattened), which cut its quantization blocks of optimizer_block "
                        "= %d (--optimizer-block); every device must hold whole blocks (a block "
                        "size dividing %zu fits this cut)",
                        pi->name, where[0] ? where : "this device", r.bad_lo, r.bad_hi, r.total,
                        cfg->optimizer_block, r.fits ? r.fits : r.total);
    }
    return 0;
}
