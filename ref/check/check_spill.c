/* check_spill.c - the golden run of a check on disk, one file a step
 * (check.h: check_spill_t).
 *
 * A check without --dump/--digest keeps neither run's tensors in memory:
 * the golden run saves each step's dump to its own file in $TMPDIR (and
 * its init.* to another), keeping only names and shapes for the report;
 * the layout run's dump hands each tensor to check_spill_sink as it is
 * made, which reads that step's golden file (one open at a time: steps
 * arrive in order) and compares. The files are removed by
 * check_spill_free, success or not. */
#include "parity/check.h"
#include "parity/fileio.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct check_spill {
    check_stream_t *cs;
    char dir[PATH_MAX - 64]; /* $TMPDIR/parity-check-XXXXXX */
    int64_t *steps;          /* the files written: a step, or CHECK_SPILL_INIT */
    int nsteps, cap;
    st_file_t *open;         /* the golden file being compared against */
    int64_t open_step;
    int signal_slot;         /* pio_scratch_dir_claim's: a signal removes dir */
};

check_spill_t *check_spill_new(unsigned classes, perr_t *err) {
    check_spill_t *sp = calloc(1, sizeof *sp);
    if (!sp || !(sp->cs = check_stream_new(classes))) {
        free(sp);
        perr_set(err, "out of memory");
        return NULL;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(sp->dir, sizeof sp->dir, "%s/parity-check-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(sp->dir)) {
        perr_set(err, "cannot create a directory for the golden run in %s: %s (set TMPDIR)",
                 tmp && *tmp ? tmp : "/tmp", strerror(errno));
        check_stream_free(sp->cs);
        free(sp);
        return NULL;
    }
    sp->open_step = CHECK_SPILL_NONE;
    sp->signal_slot = pio_scratch_dir_claim(sp->dir);
    return sp;
}

static void file_of(const check_spill_t *sp, int64_t step, char *buf, size_t cap) {
    if (step == CHECK_SPILL_INIT) snprintf(buf, cap, "%s/init.safetensors", sp->dir);
    else snprintf(buf, cap, "%s/step%lld.safetensors", sp->dir, (long long)step);
}

void check_spill_free(check_spill_t *sp) {
    if (!sp) return;
    st_close(sp->open);
    char path[PATH_MAX];
    for (int i = 0; i < sp->nsteps; i++) {
        file_of(sp, sp->steps[i], path, sizeof path);
        unlink(path);
    }
    rmdir(sp->dir);
    pio_scratch_dir_release(sp->signal_slot);
    check_stream_free(sp->cs);
    free(sp->steps);
    free(sp);
}

int check_spill_add(check_spill_t *sp, int64_t step, const st_writer_t *w, perr_t *err) {
    if (sp->nsteps == sp->cap) {
        int cap = sp->cap ? 2 * sp->cap : 16;
        int64_t *grown = realloc(sp->steps, (size_t)cap * sizeof *grown);
        if (!grown) return perr_set(err, "out of memory");
        sp->steps = grown, sp->cap = cap;
    }
    sp->steps[sp->nsteps++] = step; /* removed at the end even if half written */
    char path[PATH_MAX];
    file_of(sp, step, path, sizeof path);
    if (st_writer_save_scratch(w, path, err)) return -1;
    st_tensor_t t;
    for (size_t i = 0; i < st_writer_count(w); i++) {
        st_writer_tensor(w, i, &t);
        if (check_stream_golden(sp->cs, &t)) return perr_set(err, "out of memory");
    }
    return 0;
}

int check_spill_seal(check_spill_t *sp, perr_t *err) {
    return check_stream_seal(sp->cs) ? perr_set(err, "out of memory") : 0;
}

int check_spill_sink(void *ctx, const st_tensor_t *t, const void *data, const int32_t *who,
                     perr_t *err) {
    check_spill_t *sp = ctx;
    if (!check_stream_wants(sp->cs, t->name)) return 0; /* not golden, or a class left out */
    /* golden names: init.<param> or step<s>.<tensor> (dump.h) */
    const int64_t step = strncmp(t->name, "step", 4) ? CHECK_SPILL_INIT
                                                     : strtoll(t->name + 4, NULL, 10);
    if (step != sp->open_step) {
        char path[PATH_MAX];
        file_of(sp, step, path, sizeof path);
        st_close(sp->open);
        sp->open_step = CHECK_SPILL_NONE;
        if (!(sp->open = st_open_mapped(path, err))) return -1;
        sp->open_step = step;
    }
    const st_tensor_t *g = st_find(sp->open, t->name);
    if (!g) return perr_set(err, "%s: the golden run's tensor %s is not in its file",
                            st_path(sp->open), t->name);
    check_stream_tensor(sp->cs, st_data(sp->open, g), t, data, who);
    return 0;
}

int check_spill_finish(check_spill_t *sp, const check_owner_t *owner, FILE *report,
                       check_result_t *res) {
    st_close(sp->open); /* the last step's golden tensors are not needed for the report */
    sp->open = NULL;
    sp->open_step = CHECK_SPILL_NONE;
    return check_stream_finish(sp->cs, owner, report, res);
}
