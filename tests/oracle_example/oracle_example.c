/* oracle_example.c - a program outside parity using it as an oracle,
 * built against an installed libparity (tests/cli/test_install.sh):
 *
 *   cc oracle_example.c $(pkg-config --cflags --libs parity) -o oracle_example
 *   ./oracle_example --model gpt-micro --steps 2
 *   ./oracle_example --from-dump run.safetensors
 *
 * It plays a backend on a 2 x 2 mesh: every golden tensor of step 0 is
 * fed back as the four ranks' blocks, Shard(0) over mesh dimension 0 and
 * Replicate over dimension 1 (so each element arrives twice), cut as
 * torch.chunk cuts. Then it perturbs one element of one rank's copy,
 * drops one rank's block, and feeds bad input, printing what the oracle
 * says each time; the test script checks the lines.
 */
#include <parity/oracle.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PERTURBED "step0.grad.layers.0.mlp.dense_h_to_4h.weight"

static oracle_placement_t mesh_of(int rank) {
    oracle_placement_t pl = {.ndim = 2, .mesh = {2, 2}, .coord = {rank / 2, rank % 2},
                             .shard = {0, ORACLE_REPLICATE}};
    return pl;
}

/* Rank `rank`'s block of golden tensor t: rows [lo, lo + n) of axis 0,
 * as torch.chunk(t, 2, dim=0)[coord 0] gives them. */
static void rows_of(const st_tensor_t *t, int rank, int64_t *lo, int64_t *n) {
    const int64_t rows = t->ndim ? t->shape[0] : 1, chunk = (rows + 1) / 2;
    *lo = rank / 2 ? chunk : 0;
    if (*lo > rows) *lo = rows;
    *n = rows - *lo < chunk ? rows - *lo : chunk;
}

/* Puts every step-0 tensor from all four ranks (the blocks of tensor
 * `skip` at mesh coordinate skip_row along dimension 0 left out, both
 * replicas; element `poke` of rank poke_rank's copy of
 * tensor PERTURBED moved one ulp). */
static int put_all(oracle_t *o, const char *skip, int skip_row, long poke, int poke_rank) {
    perr_t err;
    for (int i = 0; i < oracle_count(o); i++) {
        st_tensor_t t;
        const void *data;
        oracle_tensor_at(o, i, &t, &data);
        if (strncmp(t.name, "step0.", 6) || t.ndim == 0) continue;
        for (int rank = 0; rank < 4; rank++) {
            if (skip && !strcmp(t.name, skip) && rank / 2 == skip_row) continue;
            int64_t lo, n, shape[ST_MAX_DIMS];
            rows_of(&t, rank, &lo, &n);
            memcpy(shape, t.shape, sizeof shape);
            shape[0] = n;
            size_t row = st_dtype_size(t.dtype);
            for (int d = 1; d < t.ndim; d++) row *= (size_t)t.shape[d];
            unsigned char *block = malloc(row * (size_t)n + 1);
            if (!block) return -1;
            memcpy(block, (const unsigned char *)data + row * (size_t)lo, row * (size_t)n);
            long local = poke - (long)(lo * (int64_t)(row / 4));
            if (rank == poke_rank && !strcmp(t.name, PERTURBED) && local >= 0 &&
                local < (long)(n * (int64_t)(row / 4))) {
                unsigned u;
                memcpy(&u, block + 4 * local, 4);
                u += 1; /* one ulp */
                memcpy(block + 4 * local, &u, 4);
            }
            oracle_placement_t pl = mesh_of(rank);
            int rc = oracle_put(o, t.name, -1, t.dtype, t.ndim, shape, block, &pl, -1, &err);
            free(block);
            if (rc) {
                printf("put failed: %s\n", err.msg);
                return -1;
            }
        }
    }
    return 0;
}

static void show(const char *what, int rc, const oracle_divergence_t *d, const perr_t *err) {
    if (rc < 0) {
        printf("%s: error: %s\n", what, err->msg);
        return;
    }
    if (rc == 0) {
        printf("%s: no divergence (%d tensors compared)\n", what, d->compared);
        return;
    }
    char idx[64] = "[";
    for (int k = 0; k < d->ndim; k++)
        snprintf(idx + strlen(idx), sizeof idx - strlen(idx), "%s%lld", k ? "," : "",
                 (long long)d->index[k]);
    strcat(idx, "]");
    printf("%s: kind %d tensor %s step %lld index %s flat %llu rank %d ulp %llu copies %d bad %d\n",
           what, d->kind, d->tensor, (long long)d->step, idx, (unsigned long long)d->flat, d->rank,
           (unsigned long long)d->ulp, d->copies, d->bad_copies);
    printf("%s: report: %s\n", what, d->report);
}

int main(int argc, char **argv) {
    perr_t err;
    oracle_t *o = argc > 2 && !strcmp(argv[1], "--from-dump")
                      ? oracle_open_dump(argv[2], &err)
                      : oracle_open(argc - 1, (const char *const *)argv + 1, &err);
    if (!o || oracle_run_golden(o, 0, &err)) {
        printf("open: error: %s\n", err.msg);
        oracle_close(o);
        return 2;
    }
    printf("golden: %d tensors\n", oracle_count(o));
    oracle_divergence_t d;
    int rc = oracle_compare(o, NULL, &d, &err);
    show("empty", rc, &d, &err);

    const long poke = 37 * 16 + 5; /* [37,5]: row 37 is in mesh coordinate 1's half */
    if (put_all(o, NULL, -1, -1, -1)) return 1;
    show("clean", oracle_compare(o, NULL, &d, &err), &d, &err);
    oracle_clear(o);
    if (put_all(o, NULL, -1, poke, 3)) return 1;
    show("perturbed", oracle_compare(o, NULL, &d, &err), &d, &err);
    oracle_tolerance_t one = {1, ORACLE_ULP_ELEMENT};
    show("tolerance", oracle_compare(o, &one, &d, &err), &d, &err);
    const void *values;
    const int32_t *who;
    if (!oracle_assembled(o, PERTURBED, &values, &who, &err))
        printf("assembled: element %ld from rank %d, element 0 from rank %d\n", poke, who[poke],
               who[0]);
    oracle_clear(o);
    if (put_all(o, "step0.act.layers.1.output", 1, -1, -1)) return 1;
    show("missing", oracle_compare(o, NULL, &d, &err), &d, &err);

    int64_t shape[2] = {3, 16};
    float zeros[48] = {0};
    oracle_placement_t pl = mesh_of(1);
    rc = oracle_put(o, "grad.layers.0.no_such.weight", 0, ST_F32, 2, shape, zeros, &pl, -1, &err);
    printf("bad name: %d %s\n", rc, rc ? err.msg : "");
    rc = oracle_put(o, "grad.layers.0.mlp.dense_h_to_4h.weight", 0, ST_F32, 2, shape, zeros, &pl,
                    -1, &err);
    printf("bad shape: %d %s\n", rc, rc ? err.msg : "");
    pl.shard[1] = 5;
    rc = oracle_put(o, "grad.layers.0.mlp.dense_h_to_4h.weight", 0, ST_F32, 2, shape, zeros, &pl,
                    -1, &err);
    printf("bad placement: %d %s\n", rc, rc ? err.msg : "");
    oracle_close(o);
    return 0;
}
