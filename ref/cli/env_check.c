/* env_check.c - every PARITY_* variable a run reads, checked at start-up
 * (cli_env_check), so that a malformed value is one clear message and
 * exit 2 before anything runs, not a value silently ignored, a check
 * switched off, or a fatal error deep inside a collective.
 *
 *   PARITY_BACKEND            openblas or portable (empty: the default)
 *   PARITY_MEM_AVAILABLE_MB   MB, 1 .. 1e9 (memest_env_check)
 *   PARITY_COLL_ALGO          direct or ring
 *   PARITY_COLL_TIMEOUT       seconds, > 0 .. 1e9
 *   PARITY_COLL_WHOLE_BYTES   an integer, 0 .. 1e12
 *   PARITY_COLL_SPIN_US, PARITY_COLL_YIELD_US   microseconds, 0 .. 1e9
 *   PARITY_PIN                0 (no pinning) or 1
 *   PARITY_STEP_THROUGH       0 or 1; PARITY_STEP_THROUGH_DEVICE a device number
 *   PARITY_OFFLOAD_KILL_AFTER a count >= 1 (tests: nvme offload killed mid-step)
 * (coll_env_check holds the collectives' rules.) The readers refuse the
 * same values where they read them; this only says so first.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "parity/coll.h"
#include "parity/engine.h"
#include "parity/memest.h"
#include "parity/runtime.h"

static int one_of(const char *name, const char *a, const char *b, perr_t *err) {
    const char *v = getenv(name);
    if (!v || !*v || !strcmp(v, a) || !strcmp(v, b)) return 0;
    return perr_set(err, "%s='%.100s' is not valid: expected %s or %s", name, v, a, b);
}

int cli_env_check(void) {
    perr_t err;
    if (one_of("PARITY_BACKEND", "openblas", "portable", &err) || memest_env_check(&err) ||
        coll_env_check(&err) || one_of("PARITY_PIN", "0", "1", &err) ||
        devices_step_env(&(int){0}, &(int){0}, &err) || engine_offload_env_check(&err)) {
        fprintf(stderr, "%s: %s\n", cli_name ? cli_name : "parity", err.msg);
        return 2;
    }
    return 0;
}
