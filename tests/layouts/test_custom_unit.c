/* test_custom_unit.c - a unit kind the library does not know, added by a
 * test: tests/unit_scaled_residual.c (a scaled residual layer with a 3-D
 * parameter S [2, 1, C]) registered in place of the transformer layer
 * through model_set_runs, with no edit under ref/parallel, ref/cli or
 * ref/config. Its golden run, then layouts through the engine (tensor x
 * pipeline x data parallel with ZeRO-3 among them), each compared with
 * the golden run by the checker: memcmp of every tensor of every step
 * (activations, input gradients, parameter gradients, updated
 * parameters, AdamW state). tests/layouts/test_custom_check.sh runs `parity check`
 * itself on the kind (the program linked with it, tests/custom_unit.mk).
 */
#include <string.h>

#include "../harness.h"
#include "layout_run.h"
#include "../unit_scaled_residual.c"

static const model_run_t scaled_model[] = {{&unit_embedding, model_count_one, NULL, {NULL}},
                                           {&unit_scaled_residual, model_count_layers, NULL, {NULL}},
                                           {&unit_head, model_count_one, NULL, {NULL}}};

/* The description reaches the parameter table: the 3-D tensor, whole
 * on a tp rank (replicated), reducing over dp x cp. */
static void test_table_holds_the_kind(void) {
    param_table_t t;
    perr_t err;
    const gpt_layout_opts_t one_d = {0};
    const gpt_units_t all = {0, {0}, {0}};
    const param_grid_t g = param_grid_tp(2, 0, one_d);
    CHECK(param_table_build_at(&t, &cfg, g.sizes, g.coord, &all, one_d, &err) == 0, "%s", err.msg);
    CHECK(t.count == 4 + cfg.layers, "%d tensors", t.count);
    const int i = param_find(&t, "layers.1.scale.weight");
    CHECK(i >= 0, "the kind's tensor is in the table");
    if (i < 0) return;
    const param_info_t *p = &t.info[i];
    CHECK(p->ndim == 3 && p->shape[0] == 2 && p->shape[1] == 1 && p->shape[2] == cfg.hidden &&
              p->numel == 2 * (size_t)cfg.hidden,
          "shape [%lld, %lld, %lld]", (long long)p->shape[0], (long long)p->shape[1],
          (long long)p->shape[2]);
    char name[32];
    placement_reduce_name(p->reduce, name, sizeof name);
    CHECK(!strcmp(name, "dp-cp"), "reduces over '%s'", name);
    CHECK(param_find(&t, "layers.0.mlp.dense_h_to_4h.weight") < 0, "no GPT layer tensor");
    param_table_free(&t);
}

static void test_layouts_match_golden(void) {
    expect_golden(&cfg, golden, "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
                                "--data-parallel-size 2 --zero-stage 3");
    expect_golden(&cfg, golden, "--data-parallel-size 2 --zero-stage 1 --accum-degree 2");
    expect_golden(&cfg, golden, "--context-parallel-size 2 --data-parallel-size 2 --zero-stage 2");
    /* two chunks a stage need 4 layers: not gpt-micro's 2 (the sanitizers' small matrix) */
    if (cfg.layers >= 4)
        expect_golden(&cfg, golden, "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
                                    "--virtual-pipeline-model-parallel-size 2 --data-parallel-size 2 "
                                    "--accum-degree 2");
}

/* The comparison is live on this model: fp32 (not exact) gradient sums
 * over dp make the checker stop at a gradient. */
static void test_fp32_sums_are_caught(void) {
    char *buf = broken_report("--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
                              "--data-parallel-size 2 --zero-stage 3",
                              BROKEN_FP32_SUMS, 0);
    CHECK(buf && strstr(buf, ".grad."), "fp32 sums: the first divergence is a gradient:\n%s",
          buf ? buf : "");
    free(buf);
}

int main(void) {
    if (model_set_runs(scaled_model, 3)) return 1;
    if (layout_test_setup()) return 1;
    RUN(test_table_holds_the_kind);
    RUN(test_layouts_match_golden);
    RUN(test_fp32_sums_are_caught);
    dump_free(golden);
    corpus_free(&corpus);
    model_set_runs(NULL, 0);
    return harness_done();
}
