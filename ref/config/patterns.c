/* patterns.c - the JSON "model parallel patterns" file into a layout
 * (patterns.h). Every key is checked for its type and range, every
 * mapping entry for presence and uniqueness, and every message names the
 * key ("device_mapping.stage_2.shard_1") and what was expected. */
#include "parity/patterns.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity/json.h"
#include "parity/runtime.h"

enum { MAX_MAPPED = PARITY_MAX_DEVICES };

/* obj[key] as an integer in [lo, hi]; absent: def. */
static int get_int(const json_t *obj, const char *key, long lo, long hi, long def, long *out,
                   const char *path, perr_t *err) {
    const json_t *v = json_get(obj, key);
    int64_t x;
    if (!v) {
        *out = def;
        return 0;
    }
    if (json_type(v) != JSON_NUMBER || json_int64(v, &x))
        return perr_set(err, "%s: %s: expected an integer, got %s", path, key,
                        json_type(v) == JSON_NUMBER ? "a fraction or a huge number"
                                                    : json_type_name(json_type(v)));
    if (x < lo || x > hi)
        return perr_set(err, "%s: %s: %lld is out of range [%ld, %ld]", path, key, (long long)x, lo, hi);
    *out = (long)x;
    return 0;
}

/* A JSON string with no NUL inside (a C string would silently cut it), or NULL. */
static const char *whole_string(const json_t *v) {
    const char *s = json_string(v);
    return s && strlen(s) == json_string_len(v) ? s : NULL;
}

/* "/device:TYPE:ID" -> TYPE (into type) and ID; -1 when malformed. */
static int device_id(const char *s, char *type, size_t cap, long *id) {
    static const char prefix[] = "/device:";
    if (strncmp(s, prefix, sizeof prefix - 1)) return -1;
    const char *t = s + sizeof prefix - 1, *colon = strrchr(t, ':');
    if (!colon || colon == t || (size_t)(colon - t) >= cap) return -1;
    for (const char *c = t; c < colon; c++)
        if (!(*c == '_' || (*c >= '0' && *c <= '9') || (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z')))
            return -1;
    const char *d = colon + 1;
    if (!*d || strlen(d) > 9 || (d[0] == '0' && d[1])) return -1; /* no sign, no leading zeros */
    for (const char *c = d; *c; c++)
        if (*c < '0' || *c > '9') return -1;
    memcpy(type, t, (size_t)(colon - t));
    type[colon - t] = 0;
    *id = strtol(d, NULL, 10);
    return 0;
}

/* An object whose keys are exactly <prefix>0 .. <prefix>n-1, in any order. */
static int check_keys(const json_t *obj, const char *prefix, int n, const char *where,
                      const char *count_key, const char *path, perr_t *err) {
    if (json_type(obj) != JSON_OBJECT)
        return perr_set(err, "%s: %s: expected an object of %s0 .. %s%d, got %s", path, where, prefix,
                        prefix, n - 1, json_type_name(json_type(obj)));
    const size_t plen = strlen(prefix);
    for (size_t i = 0; i < json_len(obj); i++) {
        const char *k = json_key_at(obj, i);
        long idx = -1;
        if (!strncmp(k, prefix, plen) && k[plen] >= '0' && k[plen] <= '9' &&
            !(k[plen] == '0' && k[plen + 1]) && strlen(k + plen) <= 6) {
            char *end;
            idx = strtol(k + plen, &end, 10);
            if (*end) idx = -1;
        }
        if (idx < 0 || idx >= n)
            return perr_set(err, "%s: %s.%s: unexpected key (%s %d: %s0 .. %s%d)", path, where, k,
                            count_key, n, prefix, prefix, n - 1);
    }
    for (int i = 0; i < n; i++) {
        char k[32];
        snprintf(k, sizeof k, "%s%d", prefix, i);
        if (!json_get(obj, k))
            return perr_set(err, "%s: %s.%s is missing (%s %d needs %s0 .. %s%d)", path, where, k,
                            count_key, n, prefix, prefix, n - 1);
    }
    return 0;
}

typedef struct {
    long id;
    int stage, shard;
} mapped_t;

static int by_id(const void *a, const void *b) {
    const long x = ((const mapped_t *)a)->id, y = ((const mapped_t *)b)->id;
    return (x > y) - (x < y);
}

/* device_mapping -> the rank order it describes (into order), and where it
 * is no plain order, the rank list of one replica (into pc). */
static int read_mapping(const json_t *map, int stages, int shards, char *order, size_t cap,
                        pconfig_t *pc, const char *path, perr_t *err) {
    if (check_keys(map, "stage_", stages, "device_mapping", "stage_cnt", path, err)) return -1;
    const int n = stages * shards;
    mapped_t *m = calloc((size_t)n, sizeof *m);
    if (!m) return perr_set(err, "%s: out of memory", path);
    char type0[64] = "", key[96];
    int rc = -1;
    for (int i = 0; i < stages; i++) {
        char sk[32];
        snprintf(sk, sizeof sk, "stage_%d", i);
        const json_t *st = json_get(map, sk);
        snprintf(key, sizeof key, "device_mapping.%s", sk);
        if (check_keys(st, "shard_", shards, key, "sharding_size", path, err)) goto out;
        for (int j = 0; j < shards; j++) {
            char hk[32], type[64];
            snprintf(hk, sizeof hk, "shard_%d", j);
            snprintf(key, sizeof key, "device_mapping.%s.%s", sk, hk);
            const char *s = whole_string(json_get(st, hk));
            long id;
            if (!s || device_id(s, type, sizeof type, &id)) {
                perr_set(err, "%s: %s: expected a device string such as \"/device:XLA_DTU:5\", got %s",
                         path, key, s ? s : json_type_name(json_type(json_get(st, hk))));
                goto out;
            }
            if (!type0[0]) snprintf(type0, sizeof type0, "%s", type);
            if (strcmp(type, type0)) {
                perr_set(err, "%s: %s: device type '%s', but stage_0.shard_0's is '%s' (one kind of "
                              "device)", path, key, type, type0);
                goto out;
            }
            if (id >= MAX_MAPPED) {
                perr_set(err, "%s: %s: device %ld is beyond the %d devices parity simulates", path,
                         key, id, MAX_MAPPED);
                goto out;
            }
            m[i * shards + j] = (mapped_t){id, i, j};
        }
    }
    qsort(m, (size_t)n, sizeof *m, by_id);
    for (int r = 1; r < n; r++)
        if (m[r].id == m[r - 1].id) {
            perr_set(err, "%s: device_mapping.stage_%d.shard_%d and stage_%d.shard_%d both name "
                          "device %ld", path, m[r - 1].stage, m[r - 1].shard, m[r].stage, m[r].shard, m[r].id);
            goto out;
        }
    /* device r (in id order) holds (stage, shard): shards fastest (a plain
     * order, tp-pp), or stages (pp-tp), or any other permutation: a rank
     * list over the positions of tp-pp */
    int tp_fast = 1, pp_fast = 1;
    for (int r = 0; r < n; r++) {
        tp_fast &= m[r].stage * shards + m[r].shard == r;
        pp_fast &= m[r].shard * stages + m[r].stage == r;
    }
    snprintf(order, cap, "%s", !tp_fast && pp_fast ? "pp-tp-dp" : "tp-pp-dp");
    if (!tp_fast && !pp_fast) {
        for (int r = 0; r < n; r++) pc->rank_list[m[r].stage * shards + m[r].shard] = (unsigned short)r;
        pc->n_rank_list = n;
    }
    rc = 0;
out:
    free(m);
    return rc;
}

int patterns_parse(const char *text, size_t len, const char *path, pconfig_t *pc, perr_t *err) {
    perr_t jerr;
    json_t *j = json_parse(text, len, &jerr);
    if (!j) return perr_set(err, "%s: malformed JSON: %s", path, jerr.msg);
    int rc = -1;
    static const char *const keys[] = {"mode", "sharding_size", "sharding_dim", "stage_cnt",
                                       "accum_degree", "device_mapping"};
    if (json_type(j) != JSON_OBJECT) {
        perr_set(err, "%s: expected a JSON object of mode, sharding_size, ..., got %s", path,
                 json_type_name(json_type(j)));
        goto out;
    }
    for (size_t i = 0; i < json_len(j); i++) {
        const char *k = json_key_at(j, i);
        size_t q = 0;
        while (q < 6 && strcmp(k, keys[q])) q++;
        if (q == 6) {
            perr_set(err, "%s: unknown key '%s' (expected mode, sharding_size, sharding_dim, "
                          "stage_cnt, accum_degree, device_mapping)", path, k);
            goto out;
        }
    }
    const char *mode = whole_string(json_get(j, "mode"));
    if (!mode || (strcmp(mode, "sharding") && strcmp(mode, "pipeline") && strcmp(mode, "hybrid"))) {
        perr_set(err, "%s: mode: expected \"sharding\", \"pipeline\" or \"hybrid\", got %s", path,
                 mode ? mode : json_get(j, "mode") ? json_type_name(json_type(json_get(j, "mode"))) : "nothing");
        goto out;
    }
    long tp, dim, pp, accum;
    if (get_int(j, "sharding_size", 1, PARITY_MAX_DEVICES, 1, &tp, path, err) ||
        get_int(j, "sharding_dim", -1, 0, -1, &dim, path, err) ||
        get_int(j, "stage_cnt", 1, PARITY_MAX_DEVICES, 1, &pp, path, err) ||
        get_int(j, "accum_degree", 1, 1 << 30, 1, &accum, path, err))
        goto out;
    if (dim == 0 && tp == 1 && json_get(j, "sharding_dim")) {
        perr_set(err, "%s: sharding_dim: 0 shards nothing with sharding_size 1", path);
        goto out;
    }
    if (!strcmp(mode, "pipeline") && tp > 1) {
        perr_set(err, "%s: sharding_size: %ld, but mode \"pipeline\" shards nothing (mode \"hybrid\" "
                      "shards and pipelines)", path, tp);
        goto out;
    }

    /* the file is the layout: the same fields from flags too would be two answers */
    const struct { int set; const char *key, *flag; } clash[] = {
        {pc->tp != 0, "sharding_size", "--tensor-model-parallel-size"},
        {pc->pp != 0, "stage_cnt", "--pipeline-model-parallel-size"},
        {(pc->given & PC_GIVEN_ACCUM) && json_get(j, "accum_degree"), "accum_degree",
         pc->given & PC_GIVEN_NUM_MB ? "--num-microbatches" : "--accum-degree"},
        {pc->tp_row_linears && json_get(j, "sharding_dim"), "sharding_dim",
         "--tensor-parallel-row-linears"},
        {pc->pp_schedule != PC_PP_DEFAULT && !strcmp(mode, "sharding") && pp > 1, "mode",
         "--pipeline-schedule"},
        {(strcmp(pc->order, "tp-cp-ep-dp-pp") || (pc->given & PC_GIVEN_ORDER)) && json_get(j, "device_mapping"),
         "device_mapping",
         "--rank-order"},
        {(pc->given & PC_GIVEN_RANK_LIST) && json_get(j, "device_mapping"), "device_mapping",
         "--rank-list"},
    };
    for (size_t k = 0; k < sizeof clash / sizeof clash[0]; k++)
        if (clash[k].set) {
            perr_set(err, "%s: %s: the layout also comes from %s; give one", path, clash[k].key,
                     clash[k].flag);
            goto out;
        }
    /* the world before anything is sized by it (pconfig_validate checks
     * it again with the other degrees) */
    if (tp * pp > PARITY_MAX_DEVICES) {
        perr_set(err, "%s: sharding_size %ld x stage_cnt %ld = %ld devices exceeds the %d "
                      "simulated devices parity runs",
                 path, tp, pp, tp * pp, PARITY_MAX_DEVICES);
        goto out;
    }
    const json_t *map = json_get(j, "device_mapping");
    char order[32] = "";
    if (map && read_mapping(map, (int)pp, (int)tp, order, sizeof order, pc, path, err)) goto out;
    pc->tp = (int)tp;
    pc->pp = (int)pp;
    if (dim == 0 && tp > 1) pc->tp_row_linears = 1;
    if (json_get(j, "accum_degree")) {
        pc->accum_degree = (int)accum;
        pc->given |= PC_GIVEN_ACCUM;
    }
    if (!strcmp(mode, "sharding") && pp > 1) pc->pp_schedule = PC_PP_NAIVE;
    if (order[0]) snprintf(pc->order, sizeof pc->order, "%s", order);
    rc = 0;
out:
    json_free(j);
    return rc;
}
