/* fuzz_patterns.c - libFuzzer target for the JSON "model parallel
 * patterns" reader (patterns.h). Any input is accepted into a layout or
 * refused with a message; an accepted one is consistent: degrees in
 * range, a rank order the runtime accepts, and a layout that validates
 * or is refused with a message too. */
#include <string.h>

#include "fuzz_common.h"
#include "parity/patterns.h"
#include "parity/runtime.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pconfig_t pc;
    pconfig_defaults(&pc);
    perr_t err;
    err.msg[0] = 0;
    if (patterns_parse((const char *)data, size, "fuzz.json", &pc, &err)) {
        FUZZ_REQUIRE(err.msg[0] != 0);
        return 0;
    }
    FUZZ_REQUIRE(pc.tp >= 1 && pc.tp <= 4096 && pc.pp >= 1 && pc.pp <= 4096);
    rank_layout_t L;
    FUZZ_REQUIRE(layout_init(&L, pc.order, NULL, NULL) == 0);
    err.msg[0] = 0;
    if (pconfig_validate(&pc, 24, &err)) FUZZ_REQUIRE(err.msg[0] != 0);
    return 0;
}
