/* test_dump_views.c - the dump's side of the observer (dump.h): shards
 * placed by their global offsets, and blocks several replicas report
 * compared, naming the device whose copy differs. */
#include "model/gpt.h"
#include "../harness.h"
#include "parity/dump.h"

static gpt_t *model(void) {
    model_config_t c;
    perr_t err;
    gpt_t *g = NULL;
    if (model_config_builtin("gpt-micro", &c, &err) || gpt_new(&g, &c, &err))
        fprintf(stderr, "%s\n", err.msg);
    return g;
}

/* Two column blocks of a [T=2, 4] tensor for sequence 1 reassemble it;
 * the same block reported twice with one bit changed is a disagreement. */
static void test_blocks_and_replicas(void) {
    gpt_t *g = model();
    if (!g) return;
    dump_t *d = dump_new(g, DUMP_TENSORS | DUMP_SOURCES);
    gpt_observer_t obs = {0};
    dump_begin_step(d, 0, &obs);
    float left[4] = {1, 2, 5, 6}, right[4] = {3, 4, 7, 8}; /* [2 rows][2 columns] each */
    gpt_view_t v = {"act.x", ST_F32, left, 1, 1, 2, {2, 4}, {0, 0}, {2, 2}};
    dump_set_writer(d, 0);
    obs.batch_tensor(obs.ctx, &v);
    v.data = right, v.lo[1] = 2;
    dump_set_writer(d, 1);
    obs.batch_tensor(obs.ctx, &v);
    int n = -1;
    dump_replica_diffs(d, &n);
    CHECK(n == 0, "disjoint blocks are not replicas");
    /* a replica of the left block from device 3, element (row 1, column 1) off by one bit */
    float drift[4] = {1, 2, 5, 6};
    uint32_t u;
    memcpy(&u, &drift[3], 4);
    u ^= 1u;
    memcpy(&drift[3], &u, 4);
    v.data = drift, v.lo[1] = 0;
    dump_set_writer(d, 3);
    obs.batch_tensor(obs.ctx, &v);
    const dump_replica_t *r = dump_replica_diffs(d, &n);
    CHECK(n == 1 && !strcmp(r->name, "step0.act.x") && r->device == 3 && r->taken == 0 &&
              r->flat == 8 + 1 * 4 + 1 && r->want == 6.0f && r->got != 6.0f,
          "replica diff: %d records; %s flat %lld device %d taken %d", n, r->name,
          (long long)r->flat, r->device, r->taken);
    /* the sources: sequence 0 written by nobody, sequence 1's columns by 0 and 1 */
    obs.grads_ready(obs.ctx, g);
    gpt_step_stats_t st = {0};
    perr_t err;
    CHECK(dump_end_step(d, g, &st, &err) == 0, "dump_end_step: %s", err.msg);
    long at = st_writer_find(dump_writer(d), "step0.act.x");
    const int32_t *src = at >= 0 ? dump_sources_at(d, (size_t)at) : NULL;
    const int32_t want[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 1, 1, 0, 0, 1, 1};
    CHECK(src && !memcmp(src, want, sizeof want), "sources of step0.act.x");
    at = st_writer_find(dump_writer(d), "step0.loss");
    CHECK(at >= 0 && dump_sources_at(d, (size_t)at) && dump_sources_at(d, (size_t)at)[0] == 0,
          "the scalars are device 0's");
    dump_free(d);
    gpt_free(g);
}

int main(void) {
    RUN(test_blocks_and_replicas);
    return harness_done();
}
