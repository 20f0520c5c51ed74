/* test_params_init.c - the initial parameters do not depend on how the
 * work is split (I3).
 *
 * params_init spreads the normal tensors over the golden run's compute
 * threads (pool.h) in pieces of 2^20 elements of the concatenated runs;
 * every number is keyed by its global position, so 1, 2 or 3 threads, and
 * a tensor-parallel shard's per-row runs, must give the same bits as the
 * single-thread fill. gpt-small (3.26M parameters) makes several pieces,
 * cut inside tensors. */
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "model/gpt.h"
#include "parity/pool.h"
#include "parity/rng.h"

/* params_init_tp at tp_rank over `threads` pool threads, into a new buffer. */
static float *init_with(const param_table_t *t, int tp, int tp_rank, uint64_t seed, int threads) {
    perr_t err = {0};
    CHECK(!pool_set_threads(threads, &err), "pool_set_threads(%d): %s", threads, err.msg);
    float *x = malloc(t->total * sizeof *x);
    if (!x) return NULL;
    memset(x, 0xff, t->total * sizeof *x); /* NaN everywhere: a skipped element shows */
    params_init_tp(t, tp, tp_rank, seed, x);
    return x;
}

static void test_threads_give_the_same_bits(void) {
    model_config_t c;
    perr_t err = {0};
    CHECK(!model_config_builtin("gpt-small", &c, &err), "%s", err.msg);
    for (int tp = 1; tp <= 2; tp++) {
        param_table_t t;
        const gpt_layout_opts_t one_d = {0};
        const gpt_units_t all = {0, {0}, {0}};
        const param_grid_t g = param_grid_tp(tp, 0, one_d);
        CHECK(!param_table_build_at(&t, &c, g.sizes, g.coord, &all, one_d, &err), "tp %d: %s", tp,
              err.msg);
        CHECK(t.total > ((size_t)3 << 20) / (size_t)tp, "tp %d: only %zu parameters", tp, t.total);
        for (int rank = 0; rank < tp; rank++) {
            float *one = init_with(&t, tp, rank, c.seed, 1);
            for (int th = 2; th <= 3 && one; th++) {
                float *many = init_with(&t, tp, rank, c.seed, th);
                CHECK(many && !memcmp(one, many, t.total * sizeof *one),
                      "tp %d rank %d: %d threads differ from one", tp, rank, th);
                free(many);
            }
            /* and the single-thread fill is the definition, at every 97th
             * element of each normal tensor */
            int sizes[GRID_NAXES], coord[GRID_NAXES];
            for (int a = 0; a < GRID_NAXES; a++) sizes[a] = a == GRID_TP ? tp : 1, coord[a] = 0;
            coord[GRID_TP] = rank;
            long bad = 0;
            for (int i = 0; one && i < t.count; i++) {
                const param_info_t *p = &t.info[i];
                if (p->init != INIT_NORMAL) continue;
                const uint64_t stream = rng_stream_id(p->name, 0);
                for (size_t k = 0; k < p->numel; k += 97) {
                    const size_t g = placement_global_index(&p->pl, sizes, coord, k);
                    const float want = p->init_std * rng_normal(c.seed, stream, g);
                    bad += memcmp(&want, &one[p->offset + k], sizeof want) != 0;
                }
            }
            CHECK(bad == 0, "tp %d rank %d: %ld elements differ from std * rng_normal", tp, rank, bad);
            free(one);
        }
        param_table_free(&t);
    }
    perr_t e2 = {0};
    pool_set_threads(1, &e2);
}

int main(void) {
    RUN(test_threads_give_the_same_bits);
    return harness_done();
}
