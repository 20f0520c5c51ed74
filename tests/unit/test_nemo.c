/* test_nemo.c - NeMo's model.optim.* overrides: the mapping onto pconfig_t,
 * NeMo's defaults, Megatron-style flags that win or conflict, and bad
 * overrides refused with a message naming the key. */
#include <math.h>
#include <string.h>

#include "../harness.h"
#include "parity/nemo.h"
#include "parity/pconfig.h"

#define DFA "model.optim.name=distributed_fused_adam "

/* Megatron-style flags (space-separated) into pc, then the overrides into
 * o and onto pc. Returns 0, -1 from the overrides (err set), or -2 when the
 * flags themselves were bad. A failed set must leave o as it was, a failed
 * apply pc as it was. */
static int run(pconfig_t *pc, nemo_optim_t *o, const char *flags, const char *overrides, perr_t *err) {
    char fbuf[256], obuf[512], *argv[16];
    int argc = 0;
    pconfig_defaults(pc);
    nemo_optim_init(o);
    snprintf(fbuf, sizeof fbuf, "%s", flags);
    for (char *t = strtok(fbuf, " "); t && argc < 16; t = strtok(NULL, " ")) argv[argc++] = t;
    for (int i = 0; i < argc;)
        if (pconfig_parse_flag(pc, argc, argv, &i, err) != 1) return -2;
    snprintf(obuf, sizeof obuf, "%s", overrides);
    for (char *t = strtok(obuf, " "); t; t = strtok(NULL, " ")) {
        nemo_optim_t before = *o;
        if (nemo_optim_set(o, t, err)) {
            CHECK(!memcmp(&before, o, sizeof before), "a failed set changed the options: %s", t);
            return -1;
        }
    }
    pconfig_t before = *pc;
    int rc = nemo_optim_apply(o, pc, err);
    CHECK(rc == 0 || !memcmp(&before, pc, sizeof before), "a failed apply changed the layout: %s",
          overrides);
    return rc;
}

static void test_full_set(void) {
    pconfig_t pc;
    nemo_optim_t o;
    perr_t err = {{0}};
    CHECK(run(&pc, &o, "--data-parallel-size 4",
              DFA "model.optim.dtype=fp32 model.optim.grad_sync_dtype=torch.float32 "
                  "model.optim.overlap_grad_sync=false model.optim.overlap_param_sync=True "
                  "model.optim.bucket_cap_mb=25 model.optim.contiguous_param_buffer=true "
                  "++model.optim.contiguous_grad_buffer=1", &err) == 0, "%s", err.msg);
    CHECK(o.given == (1u << NEMO_NKEYS) - 1, "every key given: %#x", o.given);
    CHECK(!strcmp(o.name, "distributed_fused_adam"), "name '%s'", o.name);
    CHECK(pc.zero_stage == 2 && pc.use_distributed_optimizer && (pc.given & PC_GIVEN_ZERO),
          "distributed_fused_adam is ZeRO-2: zero %d dist %d", pc.zero_stage, pc.use_distributed_optimizer);
    CHECK(!pc.overlap_grad_reduce && pc.overlap_param_gather, "overlap grad %d param %d",
          pc.overlap_grad_reduce, pc.overlap_param_gather);
    CHECK(fabs(pc.bucket_cap_mb - 26.2144) < 1e-9, "25 MiB = 26.2144 MB, got %.9g", pc.bucket_cap_mb);
    CHECK(pc.dtype == PC_DTYPE_FP32 && pc.grad_sync_dtype == PC_DTYPE_FP32, "dtypes");
    CHECK(pc.contiguous_grad_buffer && pc.contiguous_param_buffer, "contiguous buffers");
    CHECK(pconfig_validate(&pc, 24, &err) == 0, "%s", err.msg);
    CHECK(pc.zero_stage == 2 && pc.dp == 4, "validate keeps ZeRO-2: zero %d dp %d", pc.zero_stage, pc.dp);
    char line[512];
    nemo_optim_describe(&o, line, sizeof line);
    CHECK(strstr(line, "ZeRO-2") && strstr(line, "bucket_cap_mb=25 ") &&
              strstr(line, "overlap_grad_sync=false ") && strstr(line, "overlap_param_sync=true ") &&
              !strstr(line, "=fp32*"), "%s", line);
}

static void test_defaults(void) {
    pconfig_t pc, def;
    nemo_optim_t o;
    perr_t err = {{0}};
    CHECK(run(&pc, &o, "--data-parallel-size 2", DFA, &err) == 0, "%s", err.msg);
    CHECK(pc.zero_stage == 2 && pc.use_distributed_optimizer, "zero %d", pc.zero_stage);
    CHECK(pc.overlap_grad_reduce == 1 && pc.overlap_param_gather == 0,
          "NeMo/Apex: overlap_grad_sync true, overlap_param_sync false: %d %d",
          pc.overlap_grad_reduce, pc.overlap_param_gather);
    CHECK(fabs(pc.bucket_cap_mb - 104.8576) < 1e-9, "Apex's 100 MiB, got %.9g", pc.bucket_cap_mb);
    CHECK(pc.dtype == PC_DTYPE_FP32 && pc.grad_sync_dtype == PC_DTYPE_FP32, "fp32");
    CHECK(pc.contiguous_grad_buffer && pc.contiguous_param_buffer, "contiguous, silently");
    CHECK(pconfig_validate(&pc, 24, &err) == 0 && pc.zero_stage == 2, "%s zero %d", err.msg, pc.zero_stage);
    char line[512];
    nemo_optim_describe(&o, line, sizeof line);
    CHECK(strstr(line, "bucket_cap_mb=100*") && strstr(line, "overlap_grad_sync=true*"), "%s", line);
    /* the non-distributed AdamW names: DDP, nothing else touched */
    const char *ddp[] = {"adamw", "fused_adam", "megatron_fused_adam"};
    for (int k = 0; k < 3; k++) {
        char kv[64];
        snprintf(kv, sizeof kv, "model.optim.name=%s", ddp[k]);
        CHECK(run(&pc, &o, "", kv, &err) == 0, "%s: %s", kv, err.msg);
        pconfig_defaults(&def);
        def.given |= PC_GIVEN_ZERO;
        CHECK(!memcmp(&pc, &def, sizeof pc), "%s: only the ZeRO stage (0) is set", kv);
        nemo_optim_describe(&o, line, sizeof line);
        CHECK(strstr(line, "DDP"), "%s", line);
    }
    /* nothing given changes nothing */
    CHECK(run(&pc, &o, "", "", &err) == 0, "%s", err.msg);
    pconfig_defaults(&def);
    CHECK(!memcmp(&pc, &def, sizeof pc), "no options, no change");
    nemo_optim_describe(&o, line, sizeof line);
    CHECK(strstr(line, "not given"), "%s", line);
}

static void test_each_key(void) {
    pconfig_t pc;
    nemo_optim_t o;
    perr_t err = {{0}};
    CHECK(run(&pc, &o, "", DFA "model.optim.overlap_grad_sync=False", &err) == 0 &&
              !pc.overlap_grad_reduce, "overlap_grad_sync=False: %s", err.msg);
    CHECK(run(&pc, &o, "", DFA "model.optim.overlap_grad_sync=TRUE", &err) == 0 && pc.overlap_grad_reduce,
          "%s", err.msg);
    CHECK(run(&pc, &o, "", DFA "model.optim.overlap_param_sync=1", &err) == 0 && pc.overlap_param_gather,
          "%s", err.msg);
    CHECK(run(&pc, &o, "", DFA "model.optim.overlap_param_sync=0", &err) == 0 && !pc.overlap_param_gather,
          "%s", err.msg);
    CHECK(run(&pc, &o, "", DFA "+model.optim.bucket_cap_mb=0.5", &err) == 0 &&
              fabs(pc.bucket_cap_mb - 0.524288) < 1e-12, "%s %.9g", err.msg, pc.bucket_cap_mb);
    CHECK(run(&pc, &o, "", DFA "model.optim.bucket_cap_mb=1e2", &err) == 0 &&
              fabs(pc.bucket_cap_mb - 104.8576) < 1e-9, "%s", err.msg);
    CHECK(run(&pc, &o, "", DFA "model.optim.contiguous_grad_buffer=true", &err) == 0 &&
              pc.contiguous_grad_buffer, "%s", err.msg);
    CHECK(run(&pc, &o, "", DFA "model.optim.contiguous_param_buffer=True", &err) == 0 &&
              pc.contiguous_param_buffer, "%s", err.msg);
    const char *fp32[] = {"fp32", "FP32",          "float32",     "float",
                          "32",   "torch.float32", "torch.float", "torch.fp32"};
    for (int k = 0; k < 8; k++) {
        char kv[160];
        snprintf(kv, sizeof kv, DFA "model.optim.dtype=%s model.optim.grad_sync_dtype=%s", fp32[k], fp32[k]);
        CHECK(run(&pc, &o, "", kv, &err) == 0 && o.dtype == PC_DTYPE_FP32 &&
                  o.grad_sync_dtype == PC_DTYPE_FP32, "%s: %s", fp32[k], err.msg);
    }
    /* fp16, Apex's fp16 state and gradient sync: the layout's dtypes, the
     * gradient sync following dtype unless given */
    CHECK(run(&pc, &o, "", DFA "model.optim.dtype=torch.float16", &err) == 0 &&
              pc.dtype == PC_DTYPE_FP16 && pc.grad_sync_dtype == PC_DTYPE_FP16, "%s", err.msg);
    CHECK(run(&pc, &o, "", DFA "model.optim.grad_sync_dtype=fp16", &err) == 0 &&
              pc.dtype == PC_DTYPE_FP32 && pc.grad_sync_dtype == PC_DTYPE_FP16, "%s", err.msg);
    /* spellings of the dtypes are read as what they are */
    nemo_optim_init(&o);
    CHECK(nemo_optim_set(&o, "model.optim.dtype=torch.bfloat16", &err) == 0 && o.dtype == PC_DTYPE_BF16 &&
              nemo_optim_set(&o, "model.optim.grad_sync_dtype=half", &err) == 0 &&
              o.grad_sync_dtype == PC_DTYPE_FP16, "%s", err.msg);
}

/* Flags win over NeMo's defaults; flags that agree are fine. */
static void test_flags_kept(void) {
    pconfig_t pc;
    nemo_optim_t o;
    perr_t err = {{0}};
    CHECK(run(&pc, &o, "--overlap-param-gather --bucket-cap-mb 50", DFA, &err) == 0 &&
              pc.overlap_param_gather && pc.bucket_cap_mb == 50.0,
          "defaults must not replace flags: %s param %d bucket %g", err.msg, pc.overlap_param_gather,
          pc.bucket_cap_mb);
    CHECK(run(&pc, &o, "--zero-stage 2 --use-distributed-optimizer --overlap-grad-reduce",
              DFA "model.optim.overlap_grad_sync=true", &err) == 0 && pc.zero_stage == 2,
          "agreeing flags: %s", err.msg);
    CHECK(run(&pc, &o, "--zero-stage 0", "model.optim.name=adamw", &err) == 0 && pc.zero_stage == 0,
          "%s", err.msg);
    CHECK(run(&pc, &o, "--bucket-cap-mb 26.2144", DFA "model.optim.bucket_cap_mb=25", &err) == 0,
          "the same bucket in MB and MiB: %s", err.msg);
}

static void test_bad_overrides(void) {
    static const struct { const char *flags, *overrides, *needle; } bad[] = {
        {"", "model.optim.foo=1", "model.optim.foo: unknown key"},
        {"", "model.optim.bucket_cap_mb", "model.optim.bucket_cap_mb: expected model.optim.bucket_cap_mb="},
        {"", "model.optim.dtype=", "model.optim.dtype: empty value"},
        {"", "optim.name=adamw", "'optim.name': not a NeMo optimizer key"},
        {"", "name=adamw", "'name': not a NeMo optimizer key"},
        {"", "~model.optim.name", "'~model.optim.name': Hydra's ~ (delete a key) is not supported"},
        {"", "model.optim.name=adamw model.optim.name=fused_adam", "model.optim.name: given twice"},
        {"--dtype fp16", DFA "model.optim.dtype=bf16", "model.optim.dtype=bf16 contradicts --dtype fp16"},
        {"", DFA "model.optim.dtype=float64", "model.optim.dtype: expected a dtype"},
        {"", DFA "model.optim.dtype=torch.32", "model.optim.dtype: expected a dtype"},
        {"", DFA "model.optim.bucket_cap_mb=0", "model.optim.bucket_cap_mb"},
        {"", DFA "model.optim.bucket_cap_mb=-1", "model.optim.bucket_cap_mb"},
        {"", DFA "model.optim.bucket_cap_mb=nan", "model.optim.bucket_cap_mb"},
        {"", DFA "model.optim.bucket_cap_mb=inf", "model.optim.bucket_cap_mb"},
        {"", DFA "model.optim.bucket_cap_mb=1e999", "model.optim.bucket_cap_mb"},
        {"", DFA "model.optim.bucket_cap_mb=abc", "model.optim.bucket_cap_mb"},
        {"", DFA "model.optim.bucket_cap_mb=0x10", "model.optim.bucket_cap_mb"},
        {"", DFA "model.optim.bucket_cap_mb=2e6", "model.optim.bucket_cap_mb"},
        {"", DFA "model.optim.bucket_cap_mb=--5", "model.optim.bucket_cap_mb"},
        {"", DFA "model.optim.overlap_grad_sync=yes", "model.optim.overlap_grad_sync: expected true"},
        {"", DFA "model.optim.overlap_param_sync=2", "model.optim.overlap_param_sync: expected true"},
        {"", DFA "model.optim.overlap_grad_sync='true'", "model.optim.overlap_grad_sync: expected true"},
        {"", "model.optim.name=sgd", "model.optim.name: 'sgd' is not supported (parity trains with AdamW"},
        {"", "model.optim.name=novograd", "model.optim.name: 'novograd' is not supported"},
        {"", "model.optim.name=adam", "model.optim.name: 'adam' is torch.optim.Adam"},
        {"", "model.optim.name=" "distributed_fused_adam_distributed_fused_adam_distributed_fused_adam",
         "model.optim.name: longer than 63"},
        {"", DFA "model.optim.contiguous_grad_buffer=false", "model.optim.contiguous_grad_buffer: false"},
        {"", DFA "model.optim.contiguous_param_buffer=False", "model.optim.contiguous_param_buffer: false"},
        {"", "model.optim.lr=1e-4",
         "model.optim.lr: a model hyper-parameter, not a layout option: give parity's --lr"},
        {"", "model.optim.weight_decay=0.1", "model.optim.weight_decay: a model hyper-parameter"},
        {"", "model.optim.betas=[0.9,0.95]", "model.optim.betas: a model hyper-parameter, not a layout "
                                              "option: give parity's --adam-beta1 and --adam-beta2"},
        {"", "model.optim.sched.warmup_steps=10", "model.optim.sched.warmup_steps: a model hyper-parameter"},
        {"", "model.optim.lrx=1", "model.optim.lrx: unknown key"},
        {"", "model.optim.name=adamw model.optim.overlap_grad_sync=true",
         "model.optim.overlap_grad_sync: only distributed_fused_adam takes it, not adamw; give "
         "model.optim.name=distributed_fused_adam, or parity's --overlap-grad-reduce"},
        {"", "model.optim.name=fused_adam model.optim.overlap_param_sync=true",
         "model.optim.overlap_param_sync: only distributed_fused_adam"},
        {"", "model.optim.bucket_cap_mb=25", "model.optim.bucket_cap_mb: only distributed_fused_adam takes "
                                             "it, not NeMo's default optimizer (adam)"},
        {"--zero-stage 1", DFA, "name=distributed_fused_adam (ZeRO-2) contradicts --zero-stage 1"},
        {"--zero-stage 3", DFA, "name=distributed_fused_adam (ZeRO-2) contradicts --zero-stage 3"},
        {"--zero-stage 2", "model.optim.name=adamw", "name=adamw (DDP, ZeRO-0) contradicts --zero-stage 2"},
        {"--use-distributed-optimizer", DFA, "model.optim.name=distributed_fused_adam (ZeRO-2) contradicts "
                                             "--use-distributed-optimizer"},
        {"--use-distributed-optimizer --zero-stage 0", "model.optim.name=fused_adam",
         "model.optim.name=fused_adam (DDP, ZeRO-0) contradicts --use-distributed-optimizer"},
        {"--overlap-grad-reduce", DFA "model.optim.overlap_grad_sync=false",
         "model.optim.overlap_grad_sync=false contradicts --overlap-grad-reduce"},
        {"--overlap-param-gather", DFA "model.optim.overlap_param_sync=0",
         "model.optim.overlap_param_sync=false contradicts --overlap-param-gather"},
        {"--bucket-cap-mb 50", DFA "model.optim.bucket_cap_mb=25",
         "model.optim.bucket_cap_mb=25 (MiB, 26.2144 MB) contradicts --bucket-cap-mb 50"},
        {"--dtype bf16", DFA "model.optim.dtype=fp32", "model.optim.dtype=fp32 contradicts --dtype bf16"},
        {"--grad-sync-dtype fp16", DFA "model.optim.grad_sync_dtype=float32",
         "model.optim.grad_sync_dtype=fp32 contradicts --grad-sync-dtype fp16"},
        {"--no-contiguous-grad-buffer", DFA "model.optim.contiguous_grad_buffer=true",
         "model.optim.contiguous_grad_buffer=true contradicts --no-contiguous-grad-buffer"},
        {"--no-contiguous-param-buffer", DFA "model.optim.contiguous_param_buffer=1",
         "model.optim.contiguous_param_buffer=true contradicts --no-contiguous-param-buffer"},
    };
    const int n = (int)(sizeof bad / sizeof bad[0]);
    CHECK(n >= 40, "only %d bad cases", n);
    for (int k = 0; k < n; k++) {
        pconfig_t pc;
        nemo_optim_t o;
        perr_t err = {{0}};
        int rc = run(&pc, &o, bad[k].flags, bad[k].overrides, &err);
        CHECK(rc == -1, "[%s] %s: expected -1, got %d", bad[k].flags, bad[k].overrides, rc);
        CHECK(strstr(err.msg, bad[k].needle) != NULL, "%s: message '%s' lacks '%s'", bad[k].overrides,
              err.msg, bad[k].needle);
    }
    perr_t err = {{0}};
    nemo_optim_t o;
    nemo_optim_init(&o);
    CHECK(nemo_optim_set(&o, NULL, &err) == -1 && strstr(err.msg, "model.optim.KEY=VALUE"), "%s", err.msg);
}

int main(void) {
    RUN(test_full_set);
    RUN(test_defaults);
    RUN(test_each_key);
    RUN(test_flags_kept);
    RUN(test_bad_overrides);
    return harness_done();
}
