/* run_output.c - the one step path of `parity train` and `parity check`
 * (run_output.h): step lines, the non-finite stop, dump, digests, save. */
#include "model/gpt.h"
#include "run_output.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "parity/tile.h"

unsigned run_output_dump_what(const run_output_t *o) {
    return (o->dump_path ? DUMP_TENSORS : 0u) | (o->digest_path ? DUMP_DIGESTS : 0u);
}

void run_output_memest(const run_output_t *o, const model_config_t *cfg, int load, memest_t *m) {
    if (run_output_dump_what(o)) {
        int dumped = 0;
        for (int s = 0; s < o->steps; s++) dumped += o->want[s] != 0;
        memest_add_dump(m, cfg, run_output_dump_what(o), dumped);
    }
    if (load || o->save_dir) m->host_shared += ckpt_host_bytes(cfg, load, o->save_dir != NULL);
}

dump_t *run_output_new_dump(const model_config_t *cfg, unsigned what) {
    gpt_t shape = {.cfg = *cfg};
    if (param_table_build(&shape.table, cfg, NULL)) return NULL;
    dump_t *d = dump_new(&shape, what);
    param_table_free(&shape.table);
    return d;
}

const char *step_not_finite(const gpt_step_stats_t *st) {
    if (st->skipped) return NULL; /* fp16: an overflow the loss scaler handled */
    if (!isfinite(st->loss)) return "loss";
    if (!isfinite(st->grad_norm)) return "gradient norm";
    return NULL;
}

int ckpt_state_finite(const ckpt_state_t *s) {
    const float *v[3] = {s->params, s->adam_m, s->adam_v};
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; v[k] && i < s->total; i++)
            if (!isfinite(v[k][i])) return 0;
    return 1;
}

int run_output_step(const run_output_t *o, int s, const gpt_step_stats_t *st, double ms, int print) {
    const long long gs = (long long)(o->first + s); /* the global step */
    uint32_t u;
    memcpy(&u, &st->loss, sizeof u);
    if (print) {
        printf("step %5lld | loss %.6f (0x%08x) | lr %.4e | grad norm %.6f", gs, (double)st->loss, u,
               (double)st->lr, (double)st->grad_norm);
        if (st->loss_scale > 0)
            printf(" | loss scale %g%s", (double)st->loss_scale, st->skipped ? " (skipped)" : "");
        if (ms >= 0) printf(" | %8.1f ms", ms);
        putchar('\n');
    }
    fflush(stdout); /* the step lines before any message about them */
    const char *bad = step_not_finite(st);
    if (!bad) return 0;
    fprintf(stderr, "%s: step %lld: %s is not finite\n", cli_name, gs, bad);
    return 1;
}

static int save_checkpoint(const run_output_t *o, const ckpt_state_t *save) {
    perr_t err;
    if (!ckpt_state_finite(save)) {
        fprintf(stderr, "%s: --save: the parameters or AdamW's state after step %lld are not "
                        "finite; not saving\n", cli_name, (long long)save->step - 1);
        return 1;
    }
    if (ckpt_save(o->save_dir, save, tile_backend_name(tile_get_backend()), &err)) {
        fprintf(stderr, "%s: --save: %s\n", cli_name, err.msg);
        return 2;
    }
    if (!o->quiet) printf("checkpoint: step %lld -> %s\n", (long long)save->step, o->save_dir);
    return 0;
}

int run_output_finish(const run_output_t *o, const dump_t *dump, const char *label,
                      const ckpt_state_t *save) {
    perr_t err;
    if (o->dump_path && dump_save(dump, o->dump_path, &err)) {
        fprintf(stderr, "%s: --dump: %s\n", cli_name, err.msg);
        return 2;
    }
    if (o->digest_path && dump_write_digests(dump, o->digest_path, &err)) {
        fprintf(stderr, "%s: --digest: %s\n", cli_name, err.msg);
        return 2;
    }
    if (label && run_output_dump_what(o))
        printf("%s: %d tensors%s%s%s%s\n", label, dump_count(dump), o->dump_path ? " -> " : "",
               o->dump_path ? o->dump_path : "", o->digest_path ? ", digests -> " : "",
               o->digest_path ? o->digest_path : "");
    return o->save_dir ? save_checkpoint(o, save) : 0;
}
