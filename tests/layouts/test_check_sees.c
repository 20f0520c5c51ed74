/* test_check_sees.c - the checker sees everything and names the right
 * device (issue 21): mutants that a checker comparing only activations,
 * gradients and parameters let through, each caught at the first step it
 * happens, at the right tensor, naming the device by world rank and grid
 * coordinates.
 *
 *  - optimizer state: one bit of DDP rank 1's exp_avg replica flips after
 *    every update (the dumped copy, rank 0's, stays right); one element of
 *    ZeRO-1 rank 1's exp_avg_sq shard changes after the last update;
 *  - coverage: device 1 leaves one element of its gradient piece out of
 *    the reassembly (the buffer's stale or zero value must not pass);
 *  - activation gradients: tensor-parallel rank 1 corrupts the last
 *    layer's input gradient; the report must name that unit's grad_input,
 *    not a parameter gradient further down the backward pass;
 *  - the right device: --test-broken replica:R at tp 2, tp 4 x dp 2 and a
 *    16-device tp x cp x pp x dp layout names device R with coordinates.
 *
 * gpt-tiny on the portable backend (layout_run.h); PARITY_DP_MATRIX=small:
 * gpt-micro, and the 16-device layout left out.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "layout_run.h"

/* The report names `tensor` (a prefix of the name on its "tensor" line)
 * and contains each of the `want` strings. */
static void expect_report(const char *what, const char *flags, int broken, int broken_replica,
                          const char *tensor, const char *const *want, int nwant) {
    char *buf = mismatch_report(flags, COLL_ALGO_DIRECT, broken, broken_replica);
    char line[192];
    snprintf(line, sizeof line, "tensor      %s", tensor);
    int ok = strstr(buf, line) != NULL;
    for (int i = 0; i < nwant; i++) ok = ok && strstr(buf, want[i]);
    CHECK(ok, "%s: expected tensor %s and each of the device lines, got:\n%s", what, tensor, buf);
    printf("%s, as reported:\n%s", what, buf);
    free(buf);
}

static void test_adam_replica_ddp(void) {
    const char *want[] = {"replicas    device 1 (tp 0, cp 0, ep 0, dp 1, pp 0)'s copy differs from device 0 (tp 0, cp 0, ep 0, dp 0, pp 0)'s"};
    expect_report("DDP rank 1's exp_avg replica drifts", "--data-parallel-size 2 --zero-stage 0",
                  BROKEN_CHECK(ENGINE_BROKEN_ADAM_REPLICA), 0, "step0.exp_avg.", want, 1);
}

static void test_zero1_exp_avg_sq_shard(void) {
    char tensor[32];
    snprintf(tensor, sizeof tensor, "step%d.exp_avg_sq.", STEPS - 1);
    const char *want[] = {"produced by device 1 (tp 0, cp 0, ep 0, dp 1, pp 0", "ZeRO-1 shard"};
    expect_report("ZeRO-1 rank 1's exp_avg_sq shard after the last update",
                  "--data-parallel-size 2 --zero-stage 1", BROKEN_CHECK(ENGINE_BROKEN_ZERO_SHARD), 0,
                  tensor, want, 2);
}

static void test_unwritten_element(void) {
    const char *want[] = {"an element that no device wrote", "1 of ",
                          "owned by gradient-group rank 1 of 2, device 1 (tp 0, cp 0, ep 0, dp 1, pp 0)"};
    expect_report("device 1 leaves a gradient element unwritten", "--data-parallel-size 2 --zero-stage 2",
                  BROKEN_CHECK(ENGINE_BROKEN_UNWRITTEN), 0, "step0.grad.", want, 3);
}

static void test_tp_input_grad(void) {
    char tensor[64];
    snprintf(tensor, sizeof tensor, "step0.grad_input.layers.%d\n", cfg.layers - 1);
    const char *want[] = {"replicas    device 1 (tp 1, cp 0, ep 0, dp 0, pp 0)'s copy differs from device 0 (tp 0, cp 0, ep 0, dp 0, pp 0)'s"};
    expect_report("tp rank 1's input gradient of the last layer", "--tensor-model-parallel-size 2",
                  BROKEN_CHECK(ENGINE_BROKEN_TP_INPUT_GRAD), 0, tensor, want, 1);
}

typedef struct {
    const char *flags, *device;
    int rank;
} replica_case_t;

static void test_broken_replica_names_the_device(void) {
    /* gpt-micro (PARITY_DP_MATRIX=small) has 2 heads: tp 2 at most, and
     * the 16-device layout is left out under a sanitizer (too slow) */
    const replica_case_t tp4dp2 = {"--tensor-model-parallel-size 4 --data-parallel-size 2",
                                   "device 5 (tp 1, cp 0, ep 0, dp 1, pp 0)", 5},
                         tp2dp2 = {"--tensor-model-parallel-size 2 --data-parallel-size 2",
                                   "device 3 (tp 1, cp 0, ep 0, dp 1, pp 0)", 3};
    const replica_case_t cases[] = {
        {"--tensor-model-parallel-size 2", "device 1 (tp 1, cp 0, ep 0, dp 0, pp 0)", 1},
        small_matrix() ? tp2dp2 : tp4dp2,
        {"--tensor-model-parallel-size 2 --context-parallel-size 2 --pipeline-model-parallel-size 2 "
         "--data-parallel-size 2 --num-microbatches 2",
         "device 9 (tp 1, cp 0, ep 0, dp 0, pp 1)", 9},
    };
    for (int i = 0; i < (small_matrix() ? 2 : 3); i++) {
        const char *want[] = {cases[i].device};
        expect_report("--test-broken replica:R", cases[i].flags, 0, cases[i].rank + 1, "step0.param.",
                      want, 1);
    }
}

int main(void) {
    if (layout_test_setup()) return 1;
    RUN(test_adam_replica_ddp);
    RUN(test_zero1_exp_avg_sq_shard);
    RUN(test_unwritten_element);
    RUN(test_tp_input_grad);
    RUN(test_broken_replica_names_the_device);
    dump_free(golden);
    corpus_free(&corpus);
    return harness_done();
}
