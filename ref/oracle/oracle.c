/* oracle.c - open an oracle, run its golden steps, read its golden
 * tensors (oracle.h).
 *
 * The golden run is `parity train`'s: the model from the same flags
 * (model_flags.h), the same step path (dump_golden_step) into the same
 * dump (dump.h), kept in memory. An oracle opened from a dump file reads
 * the same tensors from the file instead.
 */
#include "model/gpt.h"
#include "oracle_internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parity/memest.h"
#include "parity/model_flags.h"
#include "parity/names.h"
#include "parity/numparse.h"
#include "parity/tile.h"

enum { MAX_FLAGS = 256, MAX_STEPS = 1000000 /* parity train's --steps */ };

/* The training text: $PARITY_DATA, then the program's lookup (the
 * working directory, beside the executable), then the installed copy
 * beside this library (PREFIX/lib/libparity.so ->
 * PREFIX/share/parity/corpus.txt; a static copy is part of the program,
 * whose directory was tried already). */
static int data_path(char *path, size_t cap, perr_t *err) {
    const char *env = getenv("PARITY_DATA");
    if (env && *env) {
        snprintf(path, cap, "%s", env);
        return 0;
    }
    perr_t e;
    if (!corpus_default_path(path, cap, &e)) return 0;
    Dl_info info;
    if (dladdr((void *)data_path, &info) && info.dli_fname) {
        char lib[4096];
        snprintf(lib, sizeof lib, "%s", info.dli_fname);
        char *slash = strrchr(lib, '/');
        if (slash) {
            *slash = 0;
            snprintf(path, cap, "%s/../share/parity/corpus.txt", lib);
            if (!access(path, R_OK)) return 0;
        }
    }
    return perr_set(err, "%s; or set PARITY_DATA, or install parity (make install puts it in "
                         "PREFIX/share/parity)", e.msg);
}

/* --backend: process-wide, through PARITY_BACKEND as `parity train` does,
 * so that a portable run does not need OpenBLAS's start-up checks. */
static int set_backend(const char *backend, perr_t *err) {
    if (backend && strcmp(backend, "openblas") && strcmp(backend, "portable"))
        return perr_set(err, "--backend: expected openblas or portable, got '%s'", backend);
    if (backend) setenv("PARITY_BACKEND", backend, 1);
    if (tile_init(err)) return -1;
    return backend ? tile_select_backend_from_env(err) : 0;
}

typedef struct {
    const char *model, *backend, *data, *load, *weights, *names;
    long long steps;
    int n;
    const char *flag[MAX_FLAGS], *val[MAX_FLAGS];
} open_args_t;

/* A flag given twice is refused, as parity train refuses it (never "the
 * last one wins"); --config is --model's other name. */
static const char *canon(const char *f) { return !strcmp(f, "--config") ? "--model" : f; }

static int given_twice(const char *const *argv, int i) {
    for (int k = 0; k < i; k++)
        if (argv[k] && !strcmp(canon(argv[k]), canon(argv[i])) && !strncmp(argv[i], "--", 2))
            return 1;
    return 0;
}

static int parse_args(int argc, const char *const *argv, open_args_t *a, perr_t *err) {
    memset(a, 0, sizeof *a);
    a->model = "gpt-tiny";
    a->steps = 1;
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!f) return perr_set(err, "argument %d is NULL", i);
        if (given_twice(argv, i)) return perr_set(err, "%s given twice", f);
        const char **own = !strcmp(f, "--model") || !strcmp(f, "--config") ? &a->model
                           : !strcmp(f, "--backend")                       ? &a->backend
                           : !strcmp(f, "--data")                          ? &a->data
                           : !strcmp(f, "--load")                          ? &a->load
                           : !strcmp(f, "--weights")                       ? &a->weights
                           : !strcmp(f, "--names")                         ? &a->names
                                                                           : NULL;
        int takes = 0;
        if (own || !strcmp(f, "--steps")) {
            if (num_flag_value(f, v, err)) return -1;
            if (own) *own = v;
            else if (num_parse_int("--steps", v, 1, MAX_STEPS, &a->steps, err)) return -1;
            i++;
        } else if (model_flag_known(f, &takes)) {
            if (a->n == MAX_FLAGS) return perr_set(err, "more than %d model flags", MAX_FLAGS);
            a->flag[a->n] = f;
            a->val[a->n++] = takes ? v : NULL;
            i += takes;
        } else {
            return perr_set(err, "unknown option '%s' (the oracle takes parity train's model "
                                 "flags: --model, --steps, --backend, --data, --load, --weights, "
                                 "--names and the model overrides; a layout is the backend's "
                                 "own)", f);
        }
    }
    if (a->names && !a->weights)
        return perr_set(err, "--names: the scheme of --weights' file; give --weights FILE too");
    if (a->load && a->weights)
        return perr_set(err, "--load and --weights: the golden run starts from one of them");
    return 0;
}

/* --load DIR (a checkpoint, read as parity train --load reads it) or
 * --weights FILE (parameters alone, in any scheme: fresh AdamW state,
 * step 0): the state the golden run starts from (o->start). */
static int load_start(oracle_t *o, const open_args_t *a, perr_t *err) {
    if (a->load) {
        char *backend = NULL;
        if (ckpt_load(a->load, &o->cfg, &o->start, &backend, err)) return -1;
        free(backend);
        return o->have_start = 1, 0;
    }
    if (!a->weights) return 0;
    names_scheme_t s = NAMES_MEGATRON_LM;
    perr_t e;
    if (a->names && names_scheme_parse(a->names, &s, err)) return -1;
    if (ckpt_state_alloc(&o->start, &o->cfg, err)) return -1;
    o->have_start = 1;
    if (names_weights_read(&o->cfg, a->weights, a->names != NULL, &s, o->start.params, &e))
        return perr_set(err, "--weights: %s", e.msg);
    return 0;
}

oracle_t *oracle_open(int argc, const char *const *argv, perr_t *err) {
    open_args_t a;
    if (argc < 0 || (argc > 0 && !argv)) {
        perr_set(err, "oracle_open: no arguments (argc %d)", argc);
        return NULL;
    }
    if (parse_args(argc, argv, &a, err)) return NULL;
    oracle_t *o = calloc(1, sizeof *o);
    if (!o) {
        perr_set(err, "oracle: out of memory");
        return NULL;
    }
    o->golden_steps = -1;
    o->default_steps = (int)a.steps;
    char path[4200];
    if (model_config_from_flags(a.model, a.n, a.flag, a.val, &o->cfg, NULL, err) ||
        set_backend(a.backend, err))
        goto fail;
    if (a.data) snprintf(path, sizeof path, "%s", a.data);
    else if (data_path(path, sizeof path, err)) goto fail;
    if (corpus_load(&o->data, path, err)) goto fail;
    o->have_data = 1;
    if (corpus_check(&o->data, o->cfg.vocab, o->cfg.seq_length, err) || load_start(o, &a, err))
        goto fail;
    if (!(o->config_json = model_config_json(&o->cfg))) {
        perr_set(err, "oracle: out of memory");
        goto fail;
    }
    return o;
fail:
    oracle_close(o);
    return NULL;
}

/* The steps a dump holds: one more than the largest "step<s>." prefix. */
static int dump_steps(const st_file_t *f) {
    int steps = 0;
    for (size_t i = 0; i < st_count(f); i++) {
        const char *n = st_tensor(f, i)->name;
        char *end;
        if (strncmp(n, "step", 4)) continue;
        long s = strtol(n + 4, &end, 10);
        if (*end == '.' && s >= 0 && s < 1000000 && s + 1 > steps) steps = (int)s + 1;
    }
    return steps;
}

/* The parameter a dump tensor's name holds, or NULL when it holds none:
 * init.<param>, step<s>.{grad,param,exp_avg,exp_avg_sq}.<param> (dump.h). */
static const char *param_part(const char *n) {
    if (!strncmp(n, "init.", 5)) return n + 5;
    if (strncmp(n, "step", 4)) return NULL;
    char *end;
    strtoll(n + 4, &end, 10);
    if (end == n + 4 || *end != '.') return NULL;
    static const char *const kinds[] = {"grad.", "param.", "exp_avg.", "exp_avg_sq."};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        if (!strncmp(end + 1, kinds[k], strlen(kinds[k]))) return end + 1 + strlen(kinds[k]);
    return NULL;
}

/* A dump's config must describe its tensors: every parameter of the
 * config's table is there as init.<param>, and every tensor named for a
 * parameter is one of the table's, F32 of its shape. Otherwise the
 * config a backend reads (oracle_config_json) builds another model than
 * the golden tensors it is compared with. The first mismatch is named. */
static int check_dump_config(const st_file_t *f, const char *cfg_json, model_config_t *out,
                             perr_t *err) {
    model_config_t cfg;
    perr_t e;
    model_config_builtin("gpt-tiny", &cfg, NULL);
    if (model_config_parse(cfg_json, strlen(cfg_json), "config", &cfg, &e) ||
        model_config_validate(&cfg, &e))
        return perr_set(err, "%s: its \"config\" metadata: %s", st_path(f), e.msg);
    param_table_t t;
    if (param_table_build(&t, &cfg, &e))
        return perr_set(err, "%s: its \"config\" metadata: %s", st_path(f), e.msg);
    int rc = 0;
    char want[96], got[96], name[160];
    for (int i = 0; i < t.count && !rc; i++) {
        snprintf(name, sizeof name, "init.%s", t.info[i].name);
        if (!st_find(f, name))
            rc = perr_set(err, "%s: its config's parameter '%s' has no tensor '%s' (the config "
                               "does not describe the dump's tensors)", st_path(f),
                          t.info[i].name, name);
    }
    for (size_t k = 0; k < st_count(f) && !rc; k++) {
        const st_tensor_t *x = st_tensor(f, k);
        const char *pn = param_part(x->name);
        if (!pn) continue;
        const int i = param_find(&t, pn);
        if (i < 0) {
            rc = perr_set(err, "%s: tensor '%s': its config has no parameter '%s' (the config "
                               "does not describe the dump's tensors)", st_path(f), x->name, pn);
            break;
        }
        const param_info_t *p = &t.info[i];
        int same = x->dtype == ST_F32 && x->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = x->shape[d] == p->shape[d];
        if (!same) {
            oracle_fmt_shape(p->ndim, p->shape, want, sizeof want);
            oracle_fmt_shape(x->ndim, x->shape, got, sizeof got);
            rc = perr_set(err, "%s: tensor '%s' is %s %s, its config's parameter '%s' is F32 %s "
                               "(the config does not describe the dump's tensors)", st_path(f),
                          x->name, st_dtype_name(x->dtype), got, pn, want);
        }
    }
    param_table_free(&t);
    if (!rc) *out = cfg;
    return rc;
}

oracle_t *oracle_open_dump(const char *path, perr_t *err) {
    if (!path) {
        perr_set(err, "oracle_open_dump: no path");
        return NULL;
    }
    oracle_t *o = calloc(1, sizeof *o);
    if (!o) {
        perr_set(err, "oracle: out of memory");
        return NULL;
    }
    if (!(o->file = st_open(path, err))) goto fail;
    const char *cfg = st_metadata(o->file, "config"), *fmt = st_metadata(o->file, "format");
    if (!fmt || strcmp(fmt, "parity-dump-1") || !cfg) {
        perr_set(err, "%s: not a parity dump (its __metadata__ has no format \"parity-dump-1\" "
                      "and config; write one with parity train --dump)", path);
        goto fail;
    }
    if (check_dump_config(o->file, cfg, &o->cfg, err)) goto fail; /* the model, as from flags */
    if (!(o->config_json = strdup(cfg))) {
        perr_set(err, "oracle: out of memory");
        goto fail;
    }
    o->golden_steps = o->default_steps = dump_steps(o->file);
    return o;
fail:
    oracle_close(o);
    return NULL;
}

static void free_slots(oracle_t *o) {
    for (int i = 0; i < o->ns; i++) {
        for (int k = 0; k < o->s[i].np; k++) free(o->s[i].p[k].data);
        free(o->s[i].p);
        free(o->s[i].name);
    }
    o->ns = 0;
}

void oracle_clear(oracle_t *o) {
    if (!o) return;
    free_slots(o);
    free(o->asm_values), o->asm_values = NULL;
    free(o->asm_who), o->asm_who = NULL;
}

void oracle_close(oracle_t *o) {
    if (!o) return;
    oracle_clear(o);
    free(o->s);
    dump_free(o->dump);
    st_close(o->file);
    if (o->have_data) corpus_free(&o->data);
    if (o->have_start) ckpt_state_free(&o->start);
    free(o->config_json);
    free(o);
}

/* Whether the golden run of `steps` steps fits: at most --steps' bound,
 * and the dump it keeps in memory (every step's tensors) within the
 * memory available (memest.h, as parity train --dump estimates it). */
static int check_steps(const oracle_t *o, int steps, perr_t *err) {
    if (steps > MAX_STEPS)
        return perr_set(err, "oracle_run_golden: steps %d: expected 1 to %d (parity train's "
                             "--steps)", steps, MAX_STEPS);
    memest_t m;
    perr_t e;
    if (memest_layout(&o->cfg, NULL, &m, err)) return -1;
    memest_add_dump(&m, &o->cfg, DUMP_TENSORS, steps);
    if (memest_check(&m, 0, &e))
        return perr_set(err, "oracle_run_golden: steps %d: the golden tensors of every step are "
                             "kept in memory; %s", steps, e.msg);
    return 0;
}

int oracle_run_golden(oracle_t *o, int steps, perr_t *err) {
    if (!o) return perr_set(err, "oracle_run_golden: no oracle");
    if (steps < 0)
        return perr_set(err, "oracle_run_golden: steps %d (>= 1, or 0 for --steps)", steps);
    if (!steps) steps = o->default_steps;
    if (o->file) {
        if (steps > o->golden_steps)
            return perr_set(err, "%s holds steps 0..%d; %d step%s asked for (write a longer "
                                 "dump, or open the oracle from the model's flags)",
                            st_path(o->file), o->golden_steps - 1, steps, steps == 1 ? "" : "s");
        return 0;
    }
    if (o->golden_steps >= 0)
        return steps == o->golden_steps
                   ? 0
                   : perr_set(err, "the golden run holds %d step%s already; open another oracle "
                                   "for %d", o->golden_steps, o->golden_steps == 1 ? "" : "s",
                              steps);
    if (check_steps(o, steps, err)) return -1;
    gpt_t *g = NULL;
    if (gpt_new(&g, &o->cfg, err)) return -1;
    int rc = 0;
    if (o->have_start) ckpt_state_to_gpt(&o->start, g); /* the golden table is the state's */
    if (!(o->dump = dump_new(g, DUMP_TENSORS))) rc = perr_set(err, "oracle: out of memory");
    if (!rc) rc = dump_add_init(o->dump, g, err);
    for (int s = 0; s < steps && !rc; s++) {
        gpt_step_stats_t st;
        rc = dump_golden_step(g, &o->data, o->start.step + s, o->dump, &st, err);
    }
    gpt_free(g);
    if (rc) {
        dump_free(o->dump);
        o->dump = NULL;
        return -1;
    }
    o->golden_steps = steps;
    return 0;
}

const char *oracle_config_json(const oracle_t *o) { return o ? o->config_json : NULL; }

long oracle_golden_count(const oracle_t *o) {
    if (o->file) return (long)st_count(o->file);
    return o->dump ? (long)st_writer_count(dump_writer(o->dump)) : 0;
}

const void *oracle_golden_at(const oracle_t *o, long i, st_tensor_t *t) {
    if (i < 0 || i >= oracle_golden_count(o)) return NULL;
    if (!o->file) return st_writer_tensor(dump_writer(o->dump), (size_t)i, t);
    *t = *st_tensor(o->file, (size_t)i);
    return st_data(o->file, t);
}

long oracle_golden_find(const oracle_t *o, const char *name) {
    if (!o->file) return o->dump ? st_writer_find(dump_writer(o->dump), name) : -1;
    const st_tensor_t *t = st_find(o->file, name);
    for (long i = 0; t && i < (long)st_count(o->file); i++)
        if (st_tensor(o->file, (size_t)i) == t) return i;
    return -1;
}

int oracle_count(const oracle_t *o) { return o ? (int)oracle_golden_count(o) : 0; }

int oracle_tensor_at(const oracle_t *o, int i, st_tensor_t *t, const void **data) {
    st_tensor_t mine;
    const void *d = o ? oracle_golden_at(o, i, t ? t : &mine) : NULL;
    if (data) *data = d;
    return d || (o && i >= 0 && i < oracle_golden_count(o)) ? 0 : -1;
}

int oracle_golden(const oracle_t *o, const char *name, st_tensor_t *t, const void **data,
                  perr_t *err) {
    if (!o || !name) return perr_set(err, "oracle_golden: no oracle or name");
    if (o->golden_steps < 0)
        return perr_set(err, "'%s': no golden run yet (call oracle_run_golden first)", name);
    long i = oracle_golden_find(o, name);
    if (i < 0)
        return perr_set(err, "'%s' is not a golden tensor (names as in dump.h: step<s>.loss, "
                             "step<s>.grad.<param>, init.<param>, ...)", name);
    st_tensor_t mine;
    const void *d = oracle_golden_at(o, i, t ? t : &mine);
    if (data) *data = d;
    return 0;
}

int oracle_full_name(const char *name, int64_t step, char *buf, size_t cap, perr_t *err) {
    if (!name || !*name) return perr_set(err, "no tensor name");
    if (step < -1) return perr_set(err, "'%s': step %lld (a step is >= 0, or -1 for a full "
                                        "name)", name, (long long)step);
    int n = step < 0 ? snprintf(buf, cap, "%s", name)
                     : snprintf(buf, cap, "step%lld.%s", (long long)step, name);
    if (n < 0 || (size_t)n >= cap) return perr_set(err, "tensor name '%.80s...' is too long", name);
    return 0;
}
