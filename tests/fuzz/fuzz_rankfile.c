/* fuzz_rankfile.c - libFuzzer target for the rank-file reader of `parity
 * judge` (ref/judge/rankfile.c, RANKFILES.md): the input is one file.
 * Properties: a refusal has a message; an accepted file has a mesh of
 * 0..JUDGE_MAX_AXES axes whose sizes multiply to its rank count, its
 * coordinates inside them and its rank their row-major number; every
 * piece's range lies inside its block's shape, its placements are
 * Replicate, Partial or a Shard of an axis the block has (strips >= 1,
 * only on a Shard), its microbatch
 * is inside its count, its scale finite and non-zero, and its data lies
 * inside the file's buffer (read every byte: ASan would see one outside). */
#include <math.h>

#include "../../ref/judge/judge_internal.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    const int fd = fuzz_memfile(data, size, path);
    perr_t err = {{0}};
    judge_file_t jf;
    const int rc = judge_file_open(&jf, path, &err);
    close(fd);
    FUZZ_REQUIRE(rc == 0 || rc == -1);
    if (rc) {
        FUZZ_REQUIRE(err.msg[0] != 0);
        judge_file_close(&jf);
        return 0;
    }
    int64_t ranks = 1, rank = 0;
    FUZZ_REQUIRE(jf.mesh.n >= 0 && jf.mesh.n <= JUDGE_MAX_AXES);
    for (int a = 0; a < jf.mesh.n; a++) {
        FUZZ_REQUIRE(jf.mesh.size[a] >= 1 && jf.coord[a] >= 0 && jf.coord[a] < jf.mesh.size[a]);
        ranks *= jf.mesh.size[a];
        rank = rank * jf.mesh.size[a] + jf.coord[a];
    }
    FUZZ_REQUIRE(ranks == jf.mesh.ranks && ranks <= JUDGE_MAX_RANKS && rank == jf.rank);
    volatile unsigned sum = 0;
    for (int k = 0; k < jf.npc; k++) {
        const judge_piece_t *pc = &jf.pc[k];
        uint64_t n = 1;
        for (int d = 0; d < pc->ndim; d++) n *= (uint64_t)pc->shape[d];
        FUZZ_REQUIRE(pc->ndim >= 0 && pc->ndim <= ST_MAX_DIMS && pc->r0 <= pc->r1 && pc->r1 <= n);
        for (int a = 0; a < jf.mesh.n; a++) {
            FUZZ_REQUIRE(pc->p[a] == JP_REPLICATE || pc->p[a] == JP_PARTIAL ||
                         (pc->p[a] >= 0 && pc->p[a] < pc->ndim));
            FUZZ_REQUIRE(pc->strips[a] >= 1 && (pc->strips[a] == 1 || pc->p[a] >= 0));
        }
        FUZZ_REQUIRE(!pc->nmb || (pc->mb >= 0 && pc->mb < pc->nmb));
        FUZZ_REQUIRE(isfinite(pc->scale) && pc->scale != 0);
        const size_t bytes = (size_t)(pc->r1 - pc->r0) * st_dtype_size(pc->dtype);
        for (size_t b = 0; b < bytes; b++) sum += pc->data[b];
    }
    (void)sum;
    judge_file_close(&jf);
    return 0;
}
