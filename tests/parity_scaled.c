/* parity_scaled.c - registers the test-only unit kind of
 * tests/unit_scaled_residual.c as the model's layer, for the `parity`
 * program linked with it (tests/custom_unit.mk). A constructor runs
 * before main: the CLI, the engine and the checker are the library's,
 * unchanged, and build whatever model description is set. */
#include <stdlib.h>

#include "unit_scaled_residual.c"

static const model_run_t scaled_model[] = {{&unit_embedding, model_count_one, NULL, {NULL}},
                                           {&unit_scaled_residual, model_count_layers, NULL, {NULL}},
                                           {&unit_head, model_count_one, NULL, {NULL}}};

__attribute__((constructor)) static void use_scaled_model(void) {
    if (model_set_runs(scaled_model, 3)) abort();
}
