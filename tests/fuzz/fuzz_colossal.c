/* fuzz_colossal.c - libFuzzer target for Colossal-AI config files (colossal.h).
 *
 * Any bytes are a config file. It is accepted with pipeline and tensor
 * degrees in [1, 4096] (and data, when given, too), or refused with a
 * printable message naming the file, leaving the layout untouched. The
 * same file is read again with degrees a Megatron flag already set (the
 * first byte picks which): a refused file is refused with the same
 * message, an accepted one only for a degree the file sets as well. */
#include <string.h>

#include "fuzz_common.h"
#include "parity/colossal.h"

static int parse(const uint8_t *data, size_t size, pconfig_t *pc, perr_t *err) {
    const pconfig_t before = *pc;
    err->msg[0] = 0;
    int rc = colossal_parse((const char *)data, size, "cfg.py", pc, err);
    FUZZ_REQUIRE(rc == 0 || rc == -1);
    if (rc) {
        FUZZ_REQUIRE(err->msg[0] != 0 && strstr(err->msg, "cfg.py") != NULL);
        for (const char *c = err->msg; *c; c++) FUZZ_REQUIRE(*c >= 0x20 && *c < 0x7f);
        FUZZ_REQUIRE(!memcmp(pc, &before, sizeof before));
    }
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pconfig_t pc, flags;
    perr_t err, err2;
    pconfig_defaults(&pc);
    int rc = parse(data, size, &pc, &err);
    const int file_dp = pc.dp; /* before pconfig_validate infers one */
    if (rc == 0) {
        FUZZ_REQUIRE(pc.pp >= 1 && pc.pp <= 4096 && pc.tp >= 1 && pc.tp <= 4096);
        FUZZ_REQUIRE(pc.dp == 0 || (pc.dp >= 1 && pc.dp <= 4096 && (pc.given & PC_GIVEN_DP)));
        if (pconfig_validate(&pc, 64, &err)) FUZZ_REQUIRE(err.msg[0] != 0);
    }
    const int pick = size ? data[0] % 8 : 7; /* which degrees came from flags */
    pconfig_defaults(&flags);
    flags.pp = pick & 1, flags.tp = pick & 2, flags.dp = pick & 4 ? 3 : 0;
    int rc2 = parse(data, size, &flags, &err2);
    if (rc) FUZZ_REQUIRE(rc2 == -1 && !strcmp(err.msg, err2.msg));
    else FUZZ_REQUIRE(rc2 == ((pick & 3) || ((pick & 4) && file_dp) ? -1 : 0));
    return 0;
}
