/* fuzz_config.c - libFuzzer target for model config files.
 *
 * Any file: model_config_load and model_config_validate must refuse it
 * with a message, or accept a config that survives a round trip through
 * its own JSON (model_config_json) unchanged. */
#include <string.h>

#include "fuzz_common.h"
#include "model/gpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    int fd = fuzz_memfile(data, size, path);
    model_config_t cfg;
    perr_t err;
    if (model_config_builtin("gpt-micro", &cfg, &err)) abort();
    err.msg[0] = 0;
    int rc = model_config_load(path, &cfg, &err);
    close(fd);
    if (rc == 0) rc = model_config_validate(&cfg, &err);
    if (rc) {
        FUZZ_REQUIRE(err.msg[0] != 0);
        return 0;
    }
    char *json = model_config_json(&cfg);
    FUZZ_REQUIRE(json != NULL);
    fd = fuzz_memfile((const uint8_t *)json, strlen(json), path);
    model_config_t again;
    if (model_config_builtin("gpt-tiny", &again, &err)) abort();
    FUZZ_REQUIRE(model_config_load(path, &again, &err) == 0);
    close(fd);
    char *json_again = model_config_json(&again);
    FUZZ_REQUIRE(json_again != NULL && strcmp(json, json_again) == 0);
    free(json);
    free(json_again);
    return 0;
}
