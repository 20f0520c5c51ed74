/* schemes.c - rank files in a backend's parameter names (RANKFILES.md,
 * parity.names; the schemes are names.h's). A parameter tensor's <what>
 * (init.<p>, step<s>.{param,grad,exp_avg,exp_avg_sq}.<p>) names <p> in
 * the file's scheme; every other name is parity's. Each such piece is
 * renamed to parity's full name here and keeps the scheme's name and map:
 * assemble.c reassembles it in the scheme's layout (its shape and
 * placement speak of the tensor as the backend holds it) and moves the
 * elements into parity's through the map's own permutation.
 *
 * `auto` detects a file's scheme from the parameter names it carries
 * (names_detect); where names alone cannot tell (hf-gpt2 and nanogpt share
 * every name), the shapes of the tensors a file holds whole decide
 * (names_detect_shapes: c_attn is [C, 3C] in one, [3C, C] in the other).
 * Every file must come out in one scheme.
 */
#include "judge_internal.h"

#include <stdlib.h>
#include <string.h>

#define FAIL(...) (perr_set(err, __VA_ARGS__), -1)

/* The parameter part of a full name ("step0.grad.transformer.wte.weight"
 * -> "transformer.wte.weight"), or NULL when the name is not of a
 * parameter; *pre: the length of what precedes it. */
static const char *param_part(const char *full, size_t *pre) {
    static const char *const kinds[] = {"param.", "grad.", "exp_avg_sq.", "exp_avg.", NULL};
    const char *w = full;
    if (!strncmp(full, "init.", 5)) w = full + 5;
    else {
        const char *dot = strchr(full, '.');
        if (!dot) return NULL;
        w = dot + 1;
        int k = 0;
        while (kinds[k] && strncmp(w, kinds[k], strlen(kinds[k]))) k++;
        if (!kinds[k]) return NULL;
        w += strlen(kinds[k]);
    }
    *pre = (size_t)(w - full);
    return *w ? w : NULL;
}

/* A piece holds its tensor whole: no cut along any mesh axis, no
 * microbatch, no flat buffer's part of it (its shape is then global). */
static int whole(const judge_file_t *f, const judge_piece_t *pc) {
    for (int a = 0; a < f->mesh.n; a++)
        if (pc->p[a] >= 0) return 0;
    uint64_t n = 1;
    for (int d = 0; d < pc->ndim; d++) n *= (uint64_t)pc->shape[d];
    return !pc->nmb && pc->r0 == 0 && pc->r1 == n;
}

/* The scheme an auto file's parameter names are in; *none 1 when it has
 * no parameter tensor (any scheme fits). */
static int detect(const judge_file_t *f, const model_config_t *c, names_scheme_t *out, int *none,
                  perr_t *err) {
    const char **names = malloc((size_t)(f->npc + 1) * sizeof *names);
    const char **wn = malloc((size_t)(f->npc + 1) * sizeof *wn);
    int *ndim = malloc((size_t)(f->npc + 1) * sizeof *ndim);
    const int64_t **shape = malloc((size_t)(f->npc + 1) * sizeof *shape);
    int n = 0, nw = 0, rc = 0;
    if (!names || !wn || !ndim || !shape) rc = FAIL("%s: out of memory", f->path);
    for (int k = 0; k < f->npc && !rc; k++) {
        size_t pre;
        const char *p = param_part(f->pc[k].name, &pre);
        if (!p) continue;
        names[n++] = p;
        if (whole(f, &f->pc[k]))
            wn[nw] = p, ndim[nw] = f->pc[k].ndim, shape[nw++] = f->pc[k].shape;
    }
    *none = !rc && !n;
    perr_t e, e2;
    if (!rc && n && names_detect(c, names, n, out, &e)) {
        /* names alone fit two schemes (or none): the whole tensors' shapes
         * decide, and the scheme found must then name every tensor */
        names_scheme_t s;
        char pn[160];
        int k = 0, found = 0;
        if (nw && !names_detect_shapes(c, wn, ndim, shape, nw, &s, &e2)) {
            while (k < n && !names_to_parity(c, s, names[k], pn, sizeof pn, NULL, &e2)) k++;
            found = k == n;
        }
        if (found) *out = s;
        else rc = FAIL("%s: parity.names auto: %s", f->path, e.msg);
    }
    free(names), free(wn), free(ndim), free(shape);
    return rc;
}

/* One piece renamed: parity's full name, the scheme's name and map kept. */
static int rename_piece(const judge_file_t *f, judge_piece_t *pc, const model_config_t *c,
                        names_scheme_t s, perr_t *err) {
    size_t pre;
    const char *p = param_part(pc->name, &pre);
    if (!p) return 0;
    char pn[160], full[256];
    perr_t e;
    if (names_to_parity(c, s, p, pn, sizeof pn, &pc->map, &e))
        return FAIL("%s: %s: %s", f->path, pc->where, e.msg);
    snprintf(full, sizeof full, "%.*s%s", (int)pre, pc->name, pn);
    char *name = strdup(full), *backend = strdup(p);
    if (!name || !backend) return free(name), free(backend), FAIL("%s: out of memory", f->path);
    free(pc->name);
    pc->name = name, pc->backend = backend;
    return 0;
}

int judge_names_resolve(judge_set_t *s, const model_config_t *c, perr_t *err) {
    names_scheme_t scheme = NAMES_MEGATRON_LM;
    int from = -1; /* the file that decided it */
    int any_auto = 0;
    for (int i = 0; i < s->nfiles; i++) {
        const judge_file_t *f = &s->files[i];
        names_scheme_t mine;
        int none = 0;
        perr_t e; /* not err: a message formatted from itself overlaps (vsnprintf) */
        if (!strcmp(f->names, "auto")) {
            any_auto = 1;
            if (detect(f, c, &mine, &none, err)) return -1;
        } else if (names_scheme_parse(f->names, &mine, &e)) {
            return FAIL("%s: parity.names: %s", f->path, e.msg);
        }
        if (none) continue;
        if (from >= 0 && mine != scheme) {
            const judge_file_t *a = &s->files[from];
            return FAIL("%s and %s: their tensors are in different naming schemes, %s and %s "
                        "(parity.names '%s' and '%s'): every rank file of a run uses one",
                        a->path, f->path, names_scheme_name(scheme), names_scheme_name(mine),
                        a->names, f->names);
        }
        scheme = mine, from = i;
    }
    snprintf(s->names, sizeof s->names, "%s%s", any_auto ? "auto: " : "",
             from < 0 && any_auto ? "no parameter tensors" : names_scheme_name(scheme));
    if (scheme == NAMES_MEGATRON_LM) return 0; /* parity's own names: nothing to map */
    for (int i = 0; i < s->nfiles; i++)
        for (int k = 0; k < s->files[i].npc; k++)
            if (rename_piece(&s->files[i], &s->files[i].pc[k], c, scheme, err)) return -1;
    return 0;
}
