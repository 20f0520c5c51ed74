/* fuzz_patterns.c - libFuzzer target for the JSON "model parallel
 * patterns" reader (patterns.h). Any input is accepted into a layout or
 * refused with a message; an accepted one is consistent: degrees in
 * range, a rank order the runtime accepts, a rank list that is a
 * permutation of one replica's devices, and a layout that validates or
 * is refused with a message too; one that validates is a grid the
 * runtime builds with its list. */
#include <stdio.h>
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
    FUZZ_REQUIRE(pc.tp >= 1 && pc.tp <= PARITY_MAX_DEVICES && pc.pp >= 1 && pc.pp <= PARITY_MAX_DEVICES);
    FUZZ_REQUIRE(pc.n_rank_list == 0 || pc.n_rank_list == pc.tp * pc.pp);
    FUZZ_REQUIRE(pc.n_rank_list == 0 || layout_check_ranks(pc.rank_list, pc.n_rank_list,
                                                           pc.n_rank_list, NULL) == 0);
    static rank_layout_t L;
    FUZZ_REQUIRE(layout_init(&L, pc.order, NULL, NULL) == 0);
    err.msg[0] = 0;
    if (pconfig_validate(&pc, 24, &err)) {
        FUZZ_REQUIRE(err.msg[0] != 0);
        return 0;
    }
    /* the validated grid, placed by the list */
    char sizes[64];
    snprintf(sizes, sizeof sizes, "tp=%d,pp=%d,dp=%d", pc.tp, pc.pp, pc.dp);
    FUZZ_REQUIRE(layout_init_mapped(&L, pc.order, sizes, pc.rank_list, pc.n_rank_list, NULL) == 0);
    return 0;
}
