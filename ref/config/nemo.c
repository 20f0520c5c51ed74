/* nemo.c - NeMo's model.optim.* overrides onto a layout (nemo.h).
 *
 * NeMo's semantics and defaults, as read in the sources (nothing copied):
 * - NVIDIA/apex apex/contrib/optimizers/distributed_fused_adam.py: DistributedFusedAdam
 *   is ZeRO-2 (optimizer state and gradients sharded over the data-parallel
 *   ranks). Defaults: dtype torch.float32, grad_sync_dtype = dtype,
 *   overlap_grad_sync True, overlap_param_sync False, bucket_cap_mb 100 (MiB:
 *   1024*1024*bucket_cap_mb bytes), contiguous_param/grad_buffer False.
 * - NVIDIA/NeMo nemo/collections/nlp/models/language_modeling/megatron_base_model.py
 *   (setup_optimization): for it, contiguous_grad_buffer defaults to True and
 *   dtype to torch.float32; the other keys reach Apex as given.
 * - NVIDIA/NeMo nemo/core/optim/optimizers.py: distributed_fused_adam is
 *   nemo/core/optim/distributed_adam.py's subclass of Apex's; fused_adam is
 *   NVIDIA/apex apex/optimizers/fused_adam.py (adam_w_mode=True: AdamW), as is
 *   megatron_fused_adam; adamw torch.optim.AdamW; adam torch.optim.Adam (L2 decay).
 * - NVIDIA/NeMo nemo/core/classes/modelPT.py (setup_optimization): name defaults
 *   to 'adam'; every optim key but name, lr and sched goes to the optimizer's
 *   constructor, and FusedAdam/AdamW take none of ours.
 * - dtypes: NVIDIA/NeMo nemo/utils/dtype.py str_to_dtype (any case, "torch." and
 *   "fp" prefixes) and the earlier _str_to_dtype of distributed_adam.py (32, 16).
 * - booleans: facebookresearch/hydra hydra/grammar/OverrideLexer.g4 (true/false
 *   in any case; 1/0 are ints, which Python reads as booleans).
 */
#include "parity/nemo.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "parity/numparse.h"

#define PREFIX "model.optim."
#define ACCEPTED "name, dtype, grad_sync_dtype, overlap_grad_sync, overlap_param_sync, " \
                 "bucket_cap_mb, contiguous_param_buffer, contiguous_grad_buffer"
#define GIVEN(o, k) (((o)->given & NEMO_GIVEN(k)) != 0)

/* NeMo's defaults for distributed_fused_adam (Apex's; sources above). */
static const int def_overlap_grad_sync = 1;
static const double def_bucket_cap_mib = 100.0;
/* Apex's buckets are MiB, parity's dp_plan counts 10^6 bytes: same fp32 count. */
static const double mib_in_mb = 1.048576;

static const char *const keys[NEMO_NKEYS] = {
    "name", "dtype", "grad_sync_dtype", "overlap_grad_sync", "overlap_param_sync",
    "bucket_cap_mb", "contiguous_param_buffer", "contiguous_grad_buffer"};
/* For a non-distributed optimizer: parity's own flag for the same thing. */
static const char *const ddp_flag[NEMO_NKEYS] = {
    NULL, "--dtype", "--grad-sync-dtype", "--overlap-grad-reduce", NULL, "--bucket-cap-mb", NULL, NULL};
static const char *const dtype_names[] = {"fp32", "bf16", "fp16"};

/* The names parity maps, with the ZeRO stage each one is. */
static int name_stage(const char *name) {
    static const struct { const char *name; int zero; } names[] = {
        {"distributed_fused_adam", 2}, {"adamw", 0}, {"fused_adam", 0}, {"megatron_fused_adam", 0}};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (!strcmp(name, names[k].name)) return names[k].zero;
    return -1;
}

static int parse_bool(const char *key, const char *v, int *out, perr_t *err) {
    const int t = !strcasecmp(v, "true") || !strcmp(v, "1"), f = !strcasecmp(v, "false") || !strcmp(v, "0");
    if (!t && !f) return perr_set(err, PREFIX "%s: expected true or false (or 1/0), got '%s'", key, v);
    *out = t;
    return 0;
}

static int parse_dtype(const char *key, const char *v, pc_dtype_t *out, perr_t *err) {
    static const struct { const char *s; pc_dtype_t d; } sp[] = {
        {"fp32", PC_DTYPE_FP32}, {"float32", PC_DTYPE_FP32}, {"float", PC_DTYPE_FP32}, {"32", PC_DTYPE_FP32},
        {"bf16", PC_DTYPE_BF16}, {"bfloat16", PC_DTYPE_BF16}, {"fp16", PC_DTYPE_FP16},
        {"float16", PC_DTYPE_FP16}, {"half", PC_DTYPE_FP16}, {"16", PC_DTYPE_FP16}};
    const int torch = !strncasecmp(v, "torch.", 6);
    const char *s = torch ? v + 6 : v;
    for (size_t k = 0; k < sizeof sp / sizeof sp[0]; k++)
        if (!strcasecmp(s, sp[k].s) && !(torch && *s >= '0' && *s <= '9')) {
            *out = sp[k].d;
            return 0;
        }
    return perr_set(err, PREFIX "%s: expected a dtype such as fp32, float32 or torch.float32, got '%s'",
                    key, v);
}

static int parse_bucket(const char *v, double *out, perr_t *err) {
    double x = 0; /* numparse's rules: one decimal spelling, as Hydra's */
    perr_t why;
    if (num_parse_double(PREFIX "bucket_cap_mb", v, 0.0, 1e6, &x, &why) || !(x > 0.0))
        return perr_set(err, PREFIX "bucket_cap_mb: expected a size in MiB > 0 and <= 1e6, got '%s'", v);
    *out = x;
    return 0;
}

void nemo_optim_init(nemo_optim_t *o) { memset(o, 0, sizeof *o); }

int nemo_optim_set(nemo_optim_t *o, const char *kv, perr_t *err) {
    if (!kv) return perr_set(err, "--optim needs " PREFIX "KEY=VALUE");
    if (*kv == '~')
        return perr_set(err, "'%s': Hydra's ~ (delete a key) is not supported; give " PREFIX "KEY=VALUE", kv);
    const char *k = kv[0] == '+' ? kv + (kv[1] == '+' ? 2 : 1) : kv; /* Hydra's + and ++: add */
    const char *eq = strchr(k, '=');
    const size_t klen = eq ? (size_t)(eq - k) : strlen(k), plen = strlen(PREFIX);
    if (klen < plen || strncmp(k, PREFIX, plen))
        return perr_set(err, "'%.*s': not a NeMo optimizer key: expected " PREFIX "KEY=VALUE, KEY one of "
                             ACCEPTED, (int)klen, k);
    const char *sub = k + plen;
    const int slen = (int)(klen - plen);
    int key = -1;
    for (int i = 0; i < NEMO_NKEYS; i++)
        if (strlen(keys[i]) == (size_t)slen && !strncmp(sub, keys[i], (size_t)slen)) key = i;
    if (key < 0) {
        static const struct { const char *key, *flags; } hyper[] = {
            {"lr", "--lr"}, {"weight_decay", "--weight-decay"}, {"betas", "--adam-beta1 and --adam-beta2"},
            {"eps", "--adam-eps"}, {"sched", "--lr-warmup-iters, --lr-decay-iters and --min-lr"}};
        for (size_t h = 0; h < sizeof hyper / sizeof hyper[0]; h++) {
            const size_t n = strlen(hyper[h].key);
            if (!strncmp(sub, hyper[h].key, n) && ((size_t)slen == n || sub[n] == '.'))
                return perr_set(err, PREFIX "%.*s: a model hyper-parameter, not a layout option: give "
                                     "parity's %s", slen, sub, hyper[h].flags);
        }
        return perr_set(err, PREFIX "%.*s: unknown key (expected one of " ACCEPTED ")", slen, sub);
    }
    const char *kn = keys[key], *v = eq ? eq + 1 : NULL;
    if (!v) return perr_set(err, PREFIX "%s: expected " PREFIX "%s=VALUE, got '%s' (no '=')", kn, kn, kv);
    if (!*v) return perr_set(err, PREFIX "%s: empty value", kn);
    if (GIVEN(o, key)) return perr_set(err, PREFIX "%s: given twice (again as '%s')", kn, v);
    nemo_optim_t t = *o; /* o changes only when the value is good */
    int rc = 0;
    switch ((nemo_key_t)key) {
    case NEMO_KEY_NAME:
        if (strlen(v) >= sizeof t.name)
            return perr_set(err, PREFIX "name: longer than %zu characters", sizeof t.name - 1);
        strcpy(t.name, v);
        break;
    case NEMO_KEY_DTYPE: rc = parse_dtype(kn, v, &t.dtype, err); break;
    case NEMO_KEY_GRAD_SYNC_DTYPE: rc = parse_dtype(kn, v, &t.grad_sync_dtype, err); break;
    case NEMO_KEY_OVERLAP_GRAD_SYNC: rc = parse_bool(kn, v, &t.overlap_grad_sync, err); break;
    case NEMO_KEY_OVERLAP_PARAM_SYNC: rc = parse_bool(kn, v, &t.overlap_param_sync, err); break;
    case NEMO_KEY_BUCKET_CAP_MB: rc = parse_bucket(v, &t.bucket_cap_mb, err); break;
    case NEMO_KEY_CONTIGUOUS_PARAM_BUFFER: rc = parse_bool(kn, v, &t.contiguous_param_buffer, err); break;
    case NEMO_KEY_CONTIGUOUS_GRAD_BUFFER: rc = parse_bool(kn, v, &t.contiguous_grad_buffer, err); break;
    case NEMO_NKEYS: break;
    }
    if (rc) return -1;
    *o = t;
    o->given |= NEMO_GIVEN(key);
    return 0;
}

int nemo_optim_apply(const nemo_optim_t *o, pconfig_t *pc, perr_t *err) {
    const unsigned opts = o->given & ~NEMO_GIVEN(NEMO_KEY_NAME);
    const int named = GIVEN(o, NEMO_KEY_NAME), zero = named ? name_stage(o->name) : -1;
    if (named && !strcmp(o->name, "adam"))
        return perr_set(err, PREFIX "name: 'adam' is torch.optim.Adam, whose weight decay is an L2 "
                             "term in the gradient; parity trains with AdamW (decoupled decay): give "
                             "adamw, fused_adam or distributed_fused_adam");
    if (named && zero < 0)
        return perr_set(err, PREFIX "name: '%s' is not supported (parity trains with AdamW: "
                             "distributed_fused_adam, adamw, fused_adam or megatron_fused_adam)", o->name);
    /* NeMo gives these keys to the optimizer's constructor: only Apex's
     * DistributedFusedAdam has them (NeMo's default optimizer is adam) */
    for (int k = NEMO_KEY_NAME + 1; k < NEMO_NKEYS && zero != 2; k++)
        if (opts & NEMO_GIVEN(k))
            return perr_set(err, PREFIX "%s: only distributed_fused_adam takes it, not %s; give "
                                 PREFIX "name=distributed_fused_adam%s%s", keys[k],
                            named ? o->name : "NeMo's default optimizer (adam)",
                            ddp_flag[k] ? ", or parity's " : "", ddp_flag[k] ? ddp_flag[k] : "");
    if (!named) return 0;
    /* conflicts with what Megatron-style flags set; grad_sync_dtype
     * defaults to dtype (Apex) */
    const pc_dtype_t want[2] = {o->dtype, GIVEN(o, NEMO_KEY_GRAD_SYNC_DTYPE) ? o->grad_sync_dtype : o->dtype};
    for (int k = NEMO_KEY_DTYPE; k <= NEMO_KEY_GRAD_SYNC_DTYPE; k++) {
        const int g = k == NEMO_KEY_DTYPE;
        const pc_dtype_t d = want[!g], now = g ? pc->dtype : pc->grad_sync_dtype;
        if ((GIVEN(o, k) || GIVEN(o, NEMO_KEY_DTYPE)) && now != PC_DTYPE_FP32 && now != d)
            return perr_set(err, PREFIX "%s=%s contradicts %s %s", keys[k], dtype_names[d],
                            g ? "--dtype" : "--grad-sync-dtype", dtype_names[now]);
    }
    /* a flag moved a field off its default (pconfig_defaults): that is its value */
    const struct { int key, value, now, def; const char *flag; } bools[] = {
        {NEMO_KEY_CONTIGUOUS_PARAM_BUFFER, o->contiguous_param_buffer, pc->contiguous_param_buffer, 1,
         "--no-contiguous-param-buffer"},
        {NEMO_KEY_CONTIGUOUS_GRAD_BUFFER, o->contiguous_grad_buffer, pc->contiguous_grad_buffer, 1,
         "--no-contiguous-grad-buffer"},
        {NEMO_KEY_OVERLAP_GRAD_SYNC, o->overlap_grad_sync, pc->overlap_grad_reduce, 0,
         "--overlap-grad-reduce"},
        {NEMO_KEY_OVERLAP_PARAM_SYNC, o->overlap_param_sync, pc->overlap_param_gather, 0,
         "--overlap-param-gather"}};
    for (int b = 0; b < 2; b++)
        if (GIVEN(o, bools[b].key) && !bools[b].value)
            return perr_set(err, PREFIX "%s: false is not supported: parity always keeps one contiguous "
                                 "buffer (give true, or leave the key out)", keys[bools[b].key]);
    const char *what = zero == 2 ? "ZeRO-2" : "DDP, ZeRO-0";
    if ((pc->given & PC_GIVEN_ZERO) && pc->zero_stage != zero)
        return perr_set(err, PREFIX "name=%s (%s) contradicts --zero-stage %d", o->name, what,
                        pc->zero_stage);
    if (pc->use_distributed_optimizer && (zero == 0 || !(pc->given & PC_GIVEN_ZERO)))
        return perr_set(err, PREFIX "name=%s (%s) contradicts --use-distributed-optimizer (ZeRO-1 "
                             "without --zero-stage)", o->name, what);
    for (int b = 0; b < 4; b++)
        if (GIVEN(o, bools[b].key) && bools[b].value != bools[b].now && bools[b].now != bools[b].def)
            return perr_set(err, PREFIX "%s=%s contradicts %s", keys[bools[b].key],
                            bools[b].value ? "true" : "false", bools[b].flag);
    const int bucket_flag = (pc->given & PC_GIVEN_BUCKET) != 0;
    const double mb = o->bucket_cap_mb * mib_in_mb;
    if (GIVEN(o, NEMO_KEY_BUCKET_CAP_MB) && bucket_flag &&
        fabs(pc->bucket_cap_mb - mb) > 1e-9 * mb)
        return perr_set(err, PREFIX "bucket_cap_mb=%g (MiB, %.9g MB) contradicts --bucket-cap-mb %g",
                        o->bucket_cap_mb, mb, pc->bucket_cap_mb);
    /* all checked: write. Defaults fill only what no flag set; dtypes and
     * buffers already hold the only values that got here. */
    pc->zero_stage = zero;
    pc->given |= PC_GIVEN_ZERO; /* else pconfig_validate reads the distributed optimizer as ZeRO-1 */
    if (zero == 2) {
        pc->use_distributed_optimizer = 1;
        pc->dtype = want[0], pc->grad_sync_dtype = want[1];
        pc->overlap_grad_reduce = GIVEN(o, NEMO_KEY_OVERLAP_GRAD_SYNC) ? o->overlap_grad_sync
                                                                        : def_overlap_grad_sync;
        if (GIVEN(o, NEMO_KEY_OVERLAP_PARAM_SYNC)) pc->overlap_param_gather = o->overlap_param_sync;
        if (GIVEN(o, NEMO_KEY_BUCKET_CAP_MB)) pc->bucket_cap_mb = mb;
        else if (!bucket_flag) pc->bucket_cap_mb = def_bucket_cap_mib * mib_in_mb;
    }
    return 0;
}

static const char *mark(const nemo_optim_t *o, int k) { return GIVEN(o, k) ? "" : "*"; }

void nemo_optim_describe(const nemo_optim_t *o, char *buf, size_t cap) {
    const int named = GIVEN(o, NEMO_KEY_NAME), zero = named ? name_stage(o->name) : -1;
    if (zero != 2) {
        snprintf(buf, cap, "model.optim%s%s: %s", named ? ".name=" : "", o->name,
                 zero == 0 ? "DDP (ZeRO-0)" : named ? "not supported" : o->given ? "options without a name"
                                                                                 : "not given");
        return;
    }
    const int ogs = GIVEN(o, NEMO_KEY_OVERLAP_GRAD_SYNC) ? o->overlap_grad_sync : def_overlap_grad_sync;
    const double mib = GIVEN(o, NEMO_KEY_BUCKET_CAP_MB) ? o->bucket_cap_mb : def_bucket_cap_mib;
    snprintf(buf, cap,
             "model.optim.name=distributed_fused_adam: ZeRO-2 distributed optimizer, dtype=fp32%s "
             "grad_sync_dtype=fp32%s overlap_grad_sync=%s%s overlap_param_sync=%s%s "
             "bucket_cap_mb=%g%s (%.9g MB), contiguous buffers (* NeMo's default where no flag set it)",
             mark(o, NEMO_KEY_DTYPE), mark(o, NEMO_KEY_GRAD_SYNC_DTYPE), ogs ? "true" : "false",
             mark(o, NEMO_KEY_OVERLAP_GRAD_SYNC),
             GIVEN(o, NEMO_KEY_OVERLAP_PARAM_SYNC) && o->overlap_param_sync ? "true" : "false",
             mark(o, NEMO_KEY_OVERLAP_PARAM_SYNC), mib, mark(o, NEMO_KEY_BUCKET_CAP_MB), mib * mib_in_mb);
}
