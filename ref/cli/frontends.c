/* frontends.c - the configuration front ends of `parity train|check`:
 * a `--parallel-config FILE` in one of the dialects users arrive with
 * (the JSON "model parallel patterns" file, patterns.h; Colossal-AI's
 * `parallel = dict(...)`, colossal.h) and NeMo's `--optim
 * model.optim.KEY=VALUE` overrides (nemo.h), all resolved into the one
 * pconfig before it is validated, as the Megatron-style flags are. A
 * field that both a front end and a flag set is an error naming both. */
#include "layout_cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity/colossal.h"
#include "parity/fileio.h"
#include "parity/nemo.h"
#include "parity/patterns.h"

static int ends_with(const char *s, const char *tail) {
    const size_t n = strlen(s), t = strlen(tail);
    return n >= t && !strcmp(s + n - t, tail);
}

/* The dialect: by extension (.json, .py), else by the first character
 * that is not white space ('{': JSON). */
static int is_json(const char *path, const char *text) {
    if (ends_with(path, ".json")) return 1;
    if (ends_with(path, ".py")) return 0;
    while (*text == ' ' || *text == '\t' || *text == '\n' || *text == '\r') text++;
    return *text == '{';
}

const char *layout_opts_origin(const layout_opts_t *lo, char *buf, size_t cap) {
    buf[0] = 0;
    if (lo->parallel_config)
        snprintf(buf, cap, " (from --parallel-config %s: %s)", lo->parallel_config,
                 lo->config_json ? "sharding_size = tensor-model-parallel-size, stage_cnt = "
                                   "pipeline-model-parallel-size, accum_degree = num-microbatches"
                                 : "parallel.tensor.size = tensor-model-parallel-size, "
                                   "parallel.pipeline = pipeline-model-parallel-size");
    return buf;
}

int layout_opts_blame(const layout_opts_t *lo, perr_t *err) {
    char origin[512];
    if (!lo->parallel_config) return -1;
    perr_t why = *err;
    return perr_set(err, "the layout%s: %s", layout_opts_origin(lo, origin, sizeof origin), why.msg);
}

int layout_opts_resolve(layout_opts_t *lo, perr_t *err) {
    if (lo->parallel_config) {
        lo->config_json = ends_with(lo->parallel_config, ".json");
        size_t len;
        char *text = pio_read_text(lo->parallel_config, "--parallel-config", (size_t)1 << 20, &len, err);
        if (!text) return -1;
        const int json = lo->config_json = is_json(lo->parallel_config, text);
        int rc = json ? patterns_parse(text, len, lo->parallel_config, &lo->pc, err)
                      : colossal_parse(text, len, lo->parallel_config, &lo->pc, err);
        free(text);
        if (rc) return -1;
    }
    if (lo->n_optim) {
        nemo_optim_t o;
        nemo_optim_init(&o);
        for (int k = 0; k < lo->n_optim; k++)
            if (nemo_optim_set(&o, lo->optim[k], err)) return -1;
        if (nemo_optim_apply(&o, &lo->pc, err)) return -1;
    }
    return 0;
}
