/* test_pconfig.c - layout flags: values, inference, and errors that name
 * the field. */
#include <string.h>

#include "../harness.h"
#include "parity/pconfig.h"

/* Parses a space-separated flag string into pc; returns the parse or
 * validation status and leaves the message in err. */
static int parse(pconfig_t *pc, const char *flags, int model_batch, perr_t *err) {
    char buf[512], *argv[32];
    int argc = 0;
    snprintf(buf, sizeof buf, "%s", flags);
    for (char *t = strtok(buf, " "); t && argc < 32; t = strtok(NULL, " ")) argv[argc++] = t;
    pconfig_defaults(pc);
    for (int i = 0; i < argc;) {
        int r = pconfig_parse_flag(pc, argc, argv, &i, err);
        if (r < 0) return -1;
        if (r == 0) {
            perr_set(err, "not a layout flag: %s", argv[i]);
            return -2;
        }
    }
    return pconfig_validate(pc, model_batch, err);
}

static void test_megatron_arithmetic(void) {
    pconfig_t pc;
    perr_t err;
    CHECK(parse(&pc, "--data-parallel-size 4 --micro-batch-size 2", 24, &err) == 0, "%s", err.msg);
    CHECK(pc.accum_degree == 3 && pc.world_size == 4, "accum %d world %d", pc.accum_degree,
          pc.world_size);
    CHECK(parse(&pc, "--world-size 8", 24, &err) == 0, "%s", err.msg);
    CHECK(pc.dp == 8 && pc.micro_batch == 3 && pc.accum_degree == 1, "dp %d micro %d", pc.dp,
          pc.micro_batch);
    CHECK(parse(&pc, "--data-parallel-size 2 --accum-degree 3", 24, &err) == 0, "%s", err.msg);
    CHECK(pc.micro_batch == 4, "micro %d", pc.micro_batch);
    CHECK(parse(&pc, "--data-parallel-size 3 --accum-degree 3", 24, &err) == 0, "%s", err.msg);
    CHECK(pc.micro_batch == 3 && pc.accum_degree == 3, "uneven split: micro %d", pc.micro_batch);
    CHECK(parse(&pc, "--use-distributed-optimizer", 24, &err) == 0 && pc.zero_stage == 1,
          "distributed optimizer is ZeRO-1");
    CHECK(parse(&pc, "--zero-stage 3 --overlap-grad-reduce --bucket-cap-mb 0.5", 24, &err) == 0 &&
              pc.zero_stage == 3 && pc.overlap_grad_reduce && pc.bucket_cap_mb == 0.5,
          "%s", err.msg);
    CHECK(parse(&pc, "--world-size 8 --tensor-model-parallel-size 2", 24, &err) == 0 &&
              pc.dp == 4 && pc.tp == 2,
          "dp = world / tp, as Megatron infers it: %s", err.msg);
    CHECK(parse(&pc, "--tensor-model-parallel-size 4", 24, &err) == 0 && pc.dp == 1 &&
              pc.world_size == 4,
          "tp alone: dp 1, world tp: %s", err.msg);
    CHECK(parse(&pc, "--global-batch-size 12 --data-parallel-size 3", 24, &err) == 0 &&
              pc.global_batch == 12 && pc.micro_batch == 4,
          "global batch flag overrides the model's");
}

static void expect_error(const char *flags, const char *needle) {
    pconfig_t pc;
    perr_t err = {{0}};
    int r = parse(&pc, flags, 24, &err);
    CHECK(r == -1, "'%s' should be rejected (got %d)", flags, r);
    CHECK(strstr(err.msg, needle) != NULL, "'%s': message '%s' lacks '%s'", flags, err.msg, needle);
}

static void test_errors_name_the_field(void) {
    expect_error("--data-parallel-size 5", "data-parallel-size: 5 does not divide");
    expect_error("--data-parallel-size 0", "--data-parallel-size");
    expect_error("--bucket-cap-mb 0", "--bucket-cap-mb");
    expect_error("--bucket-cap-mb -3", "--bucket-cap-mb");
    expect_error("--zero-stage 4", "unknown ZeRO stage 4");
    expect_error("--zero-stage x", "--zero-stage");
    expect_error("--data-parallel-size 2 --micro-batch-size 5", "micro-batch-size: 5");
    expect_error("--data-parallel-size 8 --accum-degree 4", "accum-degree: 4");
    expect_error("--offload-optimizer cpu", "offload-optimizer: cpu needs the optimizer state sharded");
    expect_error("--grad-sync-dtype fp64", "grad-sync-dtype");
    expect_error("--dtype fp8", "--dtype");
    expect_error("--world-size 4 --data-parallel-size 2", "world-size");
    expect_error("--pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 "
                 "--accum-degree 3", "num-microbatches: 3 is not a multiple of pipeline-model-parallel-size 2");
    expect_error("--pipeline-model-parallel-size 3 --pipeline-layer-split 4,4",
                 "pipeline-layer-split: 2 entries");
    expect_error("--pipeline-model-parallel-size 2 --pipeline-schedule gpipe --virtual-pipeline-model-parallel-size 2",
                 "pipeline-schedule: gpipe has one model chunk per stage");
    expect_error("--world-size 6 --tensor-model-parallel-size 4", "world-size: 6 is not divisible by tp");
    expect_error("--world-size 8 --tensor-model-parallel-size 2 --data-parallel-size 2", "world-size");
    expect_error("--use-distributed-optimizer --zero-stage 0", "zero-stage");
    expect_error("--micro-batch-size", "--micro-batch-size");
    expect_error("--overlap-param-gather", "overlap-param-gather: needs the distributed optimizer");
    {   /* ZeRO-3: each unit's all-gather prefetched while the one before runs */
        pconfig_t pc;
        perr_t err = {{0}};
        CHECK(parse(&pc, "--data-parallel-size 2 --zero-stage 3 --overlap-param-gather", 24, &err) == 0 &&
                  pc.overlap_param_gather,
              "ZeRO-3 with --overlap-param-gather: %s", err.msg);
    }
    expect_error("--no-contiguous-grad-buffer", "contiguous-grad-buffer: not supported");
    /* a model without sequences was a division by zero (found by make fuzz) */
    pconfig_t pc;
    perr_t err = {{0}};
    CHECK(parse(&pc, "--data-parallel-size 2", 0, &err) == -1 &&
              strstr(err.msg, "global-batch-size: 0") != NULL,
          "model batch 0: '%s'", err.msg);
}

/* --rank-list: the world rank at each position of the rank order, a
 * permutation of the whole world; the identity is no list. */
static void test_rank_list(void) {
    pconfig_t pc;
    perr_t err;
    CHECK(parse(&pc, "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --rank-list 3,0,2,1",
                24, &err) == 0 && pc.n_rank_list == 4 && pc.rank_list[0] == 3 && pc.rank_list[3] == 1,
          "%s", err.msg);
    CHECK(parse(&pc, "--world-size 4 --rank-list 0,1,2,3", 24, &err) == 0 && pc.n_rank_list == 0,
          "the identity: %s", err.msg);
    expect_error("--world-size 4 --rank-list 3,0,2", "--rank-list: 3 ranks for a world of 4 devices "
                 "(expected a permutation of 0..3); an entry is the world rank at a position of the "
                 "rank order tp-cp-ep-dp-pp");
    expect_error("--world-size 4 --rank-list 3,0,2,0", "--rank-list: entries 1 and 3 both name rank 0");
    expect_error("--world-size 4 --rank-list 3,0,2,4", "--rank-list: entry 3 is rank 4, beyond the 4 devices");
    expect_error("--world-size 4 --rank-list 3,0,-2,1", "--rank-list: expected the world rank at each "
                 "position of the rank order, such as 3,0,2,1, got '3,0,-2,1'");
    expect_error("--world-size 2 --rank-list 1,,0", "--rank-list: expected");
    expect_error("--world-size 2 --rank-list 16384", "--rank-list: expected");
    expect_error("--rank-list", "--rank-list");
}

int main(void) {
    RUN(test_megatron_arithmetic);
    RUN(test_errors_name_the_field);
    RUN(test_rank_list);
    return harness_done();
}
