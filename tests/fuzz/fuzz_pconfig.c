/* fuzz_pconfig.c - libFuzzer target for the layout flags (pconfig.h).
 *
 * The input is a command line, one argument per line (the first byte is
 * the model's global batch). Every flag is accepted, refused with a
 * message naming it, or left for another parser; a layout that validates
 * is consistent: positive degrees whose product is the world size,
 * dp x microbatch sizes covering the global batch, and a rank list that
 * is a permutation of the world. */
#include <string.h>

#include "fuzz_common.h"
#include "parity/pconfig.h"
#include "parity/runtime.h"

enum { MAX_ARGS = 32 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int model_batch = data[0];
    char *text = malloc(size);
    if (!text) abort();
    memcpy(text, data + 1, size - 1);
    text[size - 1] = 0;
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    for (char *tok = strtok(text, "\n"); tok && argc < MAX_ARGS; tok = strtok(NULL, "\n"))
        argv[argc++] = tok;
    argv[argc] = NULL;
    pconfig_t pc;
    pconfig_defaults(&pc);
    perr_t err;
    int ok = 1;
    for (int i = 0; i < argc && ok;) {
        err.msg[0] = 0;
        int at = i, rc = pconfig_parse_flag(&pc, argc, argv, &i, &err);
        if (rc == -1) {
            FUZZ_REQUIRE(err.msg[0] != 0);
            ok = 0;
        } else if (rc == 1) {
            FUZZ_REQUIRE(i > at && i <= argc);
        } else {
            FUZZ_REQUIRE(rc == 0 && i == at);
            i++; /* not a layout flag: another parser's */
        }
    }
    if (ok) {
        err.msg[0] = 0;
        if (pconfig_validate(&pc, model_batch, &err)) {
            FUZZ_REQUIRE(err.msg[0] != 0);
        } else {
            FUZZ_REQUIRE(pc.dp >= 1 && pc.tp >= 1 && pc.pp >= 1 && pc.cp >= 1);
            FUZZ_REQUIRE(pc.dp * pc.tp * pc.pp * pc.cp == pc.world_size);
            FUZZ_REQUIRE(pc.accum_degree >= 1 && pc.micro_batch >= 1);
            FUZZ_REQUIRE(pc.global_batch % pc.dp == 0);
            FUZZ_REQUIRE(pc.global_batch / pc.dp >= pc.accum_degree);
            FUZZ_REQUIRE(pc.micro_batch * pc.accum_degree >= pc.global_batch / pc.dp);
            /* a rank list that validated is a permutation of the world */
            FUZZ_REQUIRE(pc.n_rank_list == 0 ||
                         layout_check_ranks(pc.rank_list, pc.n_rank_list, pc.world_size, NULL) == 0);
            char line[256];
            pconfig_describe(&pc, line, sizeof line);
            FUZZ_REQUIRE(memchr(line, 0, sizeof line) != NULL);
        }
    }
    free(text);
    return 0;
}
