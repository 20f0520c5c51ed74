/* memest.c - the memory estimate of a run, before allocation (memest.h).
 *
 * Each parallel mode estimates its own device (engine_memest); the golden run
 * is one replica with nothing left out (gpt_mem_bytes). The host check
 * adds the run-wide buffers: the reassembly of global tensors, dumps, and
 * in `parity check` the golden model kept beside the layout. */
#include "model/gpt.h"
#include "parity/memest.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "parity/engine.h"
#include "parity/dump.h"
#include "parity/numparse.h"

void memest_sum(memest_dev_t *d) {
    d->total = d->params + d->grads + d->open_sums + d->optimizer + d->activations + d->comm +
               d->workspace;
}

int memest_layout(const model_config_t *cfg, const pconfig_t *pc, memest_t *out, perr_t *err) {
    memset(out, 0, sizeof *out);
    memest_dev_t d;
    size_t host = 0, all = 0;
    if (!pc) { /* the golden run: one replica, nothing sharded */
        gpt_mem_t g;
        if (model_config_validate(cfg, err) || gpt_mem_bytes(cfg, gpt_golden_flags(cfg), &g, err)) return -1;
        d = (memest_dev_t){.params = g.params, .grads = g.grads, .open_sums = g.open_sums,
                           .optimizer = g.optimizer, .activations = g.activations};
        out->devices = 1;
    } else {
        if (engine_memest(cfg, pc, &d, &all, &host, err)) return -1;
        out->devices = (int)((pc->dp > 0 ? pc->dp : 1) * pconfig_replica_devices(pc));
    }
    memest_sum(&d);
    out->max_dev = d;
    out->all_devices = pc ? all : d.total;
    out->host_shared = host;
    return 0;
}

/* Bytes per step of the batch-shaped tensors a dump collects (dump.h):
 * inputs, labels and every unit's checkpoints (its kind's list: logits,
 * activations, masks) and input gradient, as gpt_microbatch reports
 * them. tests/unit/test_memest.c holds this equal to a real dump's bytes, so
 * a new checkpoint cannot make it drift unseen. */
static size_t batch_bytes(const model_config_t *c) {
    /* each unit kind's checkpoints and input gradient (gpt_batch_bytes_per_seq) */
    return (size_t)c->global_batch * gpt_batch_bytes_per_seq(c);
}

static size_t param_bytes(const model_config_t *cfg) {
    param_table_t t;
    if (param_table_build(&t, cfg, NULL)) return 0;
    size_t bytes = t.total * sizeof(float);
    param_table_free(&t);
    return bytes;
}

size_t memest_dump_tensor_bytes(const model_config_t *cfg, int steps) {
    const size_t P4 = param_bytes(cfg);
    /* init.<param>, then per step: the batch tensors, loss, lr and
     * grad_norm (fp16: the loss scale and whether the step was skipped),
     * every gradient, every updated parameter, AdamW's m and v and its
     * step count */
    const size_t scalars = cfg->precision == MODEL_FP16 ? 5 : 3;
    return P4 + (size_t)steps * (batch_bytes(cfg) + scalars * sizeof(float) + 4 * P4 + sizeof(int32_t));
}

void memest_add_dump(memest_t *m, const model_config_t *cfg, unsigned what, int steps) {
    /* while a step is collected: its batch tensors and a gradient copy */
    m->host_shared += batch_bytes(cfg) + param_bytes(cfg);
    if (what & DUMP_TENSORS) m->host_shared += memest_dump_tensor_bytes(cfg, steps);
    /* the writer of every element: an int32 for each element of at least
     * one byte (the batch entries' while collecting, and the kept copies) */
    if ((what & DUMP_TENSORS) && (what & DUMP_SOURCES))
        m->host_shared += 4 * (batch_bytes(cfg) + memest_dump_tensor_bytes(cfg, steps));
}

void memest_add_check_stream(memest_t *m, const memest_t *golden, const model_config_t *cfg) {
    /* the collection's staging (batch tensors, a gradient copy) and the
     * int32 writer of each staged element (4 bytes a byte: masks are U8) */
    const size_t staging = 5 * batch_bytes(cfg) + param_bytes(cfg);
    /* the layout run: its devices (m) and staging; the golden step it
     * reads is mapped (page cache the kernel can drop), not counted */
    const size_t layout = m->all_devices + m->host_shared + staging;
    /* the golden run before it: its model, one step's dump and staging */
    const size_t gold = golden->all_devices + golden->host_shared + batch_bytes(cfg) +
                        param_bytes(cfg) + memest_dump_tensor_bytes(cfg, 1);
    m->host_shared += staging + (gold > layout ? gold - layout : 0);
}

/* PARITY_MEM_AVAILABLE_MB as MB; -1 when unset or empty, -2 when not valid. */
static double env_mb(const char **raw) {
    const char *env = getenv("PARITY_MEM_AVAILABLE_MB");
    *raw = env;
    if (!env || !*env) return -1;
    char *end;
    errno = 0;
    double mb = strtod(env, &end);
    if (!num_is_decimal(env, 1) || end == env || *end || errno || !isfinite(mb) || !(mb >= MEMEST_ENV_MIN_MB) || mb > MEMEST_ENV_MAX_MB)
        return -2;
    return mb;
}

int memest_env_check(perr_t *err) {
    const char *raw;
    if (env_mb(&raw) == -2)
        return perr_set(err, "PARITY_MEM_AVAILABLE_MB='%.100s' is not valid: expected a number of MB from %g "
                             "to %g (unset it to use /proc/meminfo)",
                        raw, MEMEST_ENV_MIN_MB, MEMEST_ENV_MAX_MB);
    return 0;
}

size_t memest_available(void) {
    const char *raw;
    double mb = env_mb(&raw);
    if (mb >= 0) return (size_t)(mb * 1e6);
    if (mb == -2) return 0; /* memest_check refuses it (memest_env_check) */
    return memest_meminfo_available("/proc/meminfo");
}

size_t memest_meminfo_available(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    size_t kb, avail = 0, free_kb = 0, cached = 0;
    int have_avail = 0, have_free = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemAvailable: %zu kB", &kb) == 1) avail = kb, have_avail = 1;
        else if (sscanf(line, "MemFree: %zu kB", &kb) == 1) free_kb = kb, have_free = 1;
        else if (sscanf(line, "Cached: %zu kB", &kb) == 1) cached = kb;
    }
    fclose(f);
    if (have_avail) return avail * 1024;
    /* older kernels: MemFree + Cached, said once on stderr */
    static atomic_int noted;
    if (!atomic_exchange(&noted, 1))
        fprintf(stderr, "parity: note: %s has no MemAvailable; %s\n", path,
                have_free ? "the host memory check uses MemFree + Cached"
                          : "nor MemFree: the host memory check is off (set PARITY_MEM_AVAILABLE_MB)");
    return have_free ? (free_kb + cached) * 1024 : 0;
}

/* "12.35 MB" below 1 GB, else "52.60 GB" (decimal, as --arena-mb). */
static const char *fmt(char *buf, size_t cap, size_t bytes) {
    if (bytes < (size_t)1e9)
        snprintf(buf, cap, "%.2f MB", (double)bytes / 1e6);
    else
        snprintf(buf, cap, "%.2f GB", (double)bytes / 1e9);
    return buf;
}

static void categories(const memest_dev_t *d, char *buf, size_t cap) {
    char a[7][32];
    snprintf(buf, cap,
             "params %s, grads %s, open exact sums %s, optimizer %s, activations %s, comm %s, "
             "workspace %s",
             fmt(a[0], 32, d->params), fmt(a[1], 32, d->grads), fmt(a[2], 32, d->open_sums),
             fmt(a[3], 32, d->optimizer), fmt(a[4], 32, d->activations), fmt(a[5], 32, d->comm),
             fmt(a[6], 32, d->workspace));
}

int memest_check(const memest_t *m, size_t arena_bytes, perr_t *err) {
    char cats[512], a[32], b[32], c[32], d[32];
    if (memest_env_check(err)) return -1;
    categories(&m->max_dev, cats, sizeof cats);
    if (arena_bytes && m->max_dev.total > arena_bytes)
    {
        char who[64]; /* max_dev is each category's largest over the devices */
        if (m->devices <= 1) snprintf(who, sizeof who, "device 0 (the only one)");
        else snprintf(who, sizeof who, "the largest of the %d devices", m->devices);
        return perr_set(err, "device memory: %s needs an estimated %s (%s), more than its "
                             "capacity --arena-mb %g",
                        who, fmt(a, sizeof a, m->max_dev.total), cats, (double)arena_bytes / 1e6);
    }
    const size_t need = m->all_devices + m->host_shared, avail = memest_available();
    if (avail && need > avail)
        return perr_set(err, "host memory: the run needs an estimated %s (%d device%s x %s, plus "
                             "%s of host buffers), but %s is available (%s); per device: %s",
                        fmt(a, sizeof a, need), m->devices, m->devices == 1 ? "" : "s",
                        fmt(b, sizeof b, m->max_dev.total), fmt(c, sizeof c, m->host_shared),
                        fmt(d, sizeof d, avail),
                        getenv("PARITY_MEM_AVAILABLE_MB") && *getenv("PARITY_MEM_AVAILABLE_MB")
                            ? "PARITY_MEM_AVAILABLE_MB"
                            : "MemAvailable in /proc/meminfo",
                        cats);
    return 0;
}

void memest_print(const memest_t *m, FILE *f) {
    char cats[512], a[32], b[32], c[32];
    categories(&m->max_dev, cats, sizeof cats);
    fprintf(f, "memory estimate per device: %s = %s\n", cats, fmt(a, sizeof a, m->max_dev.total));
    fprintf(f, "memory estimate of the run: %d device%s %s + host buffers %s = %s\n", m->devices,
            m->devices == 1 ? "" : "s", fmt(a, sizeof a, m->all_devices),
            fmt(b, sizeof b, m->host_shared), fmt(c, sizeof c, m->all_devices + m->host_shared));
}
