/* test_dump_views.c - the dump's side of the observer (dump.h): shards
 * placed by their global offsets, and blocks several replicas report
 * compared, naming the device whose copy differs. */
#include "harness.h"
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
    dump_t *d = dump_new(g, DUMP_TENSORS);
    gpt_observer_t obs = {0};
    dump_begin_step(d, 0, &obs);
    float left[4] = {1, 2, 5, 6}, right[4] = {3, 4, 7, 8}; /* [2 rows][2 columns] each */
    gpt_view_t v = {"act.x", ST_F32, left, 1, 1, 2, {2, 4}, {0, 0}, {2, 2}};
    dump_set_writer(d, 0);
    obs.batch_tensor(obs.ctx, &v);
    v.data = right, v.lo[1] = 2;
    dump_set_writer(d, 1);
    obs.batch_tensor(obs.ctx, &v);
    dump_replica_t r;
    CHECK(!dump_replica_diff(d, &r), "disjoint blocks are not replicas");
    /* a replica of the left block from device 3, element (row 1, column 1) off by one bit */
    float drift[4] = {1, 2, 5, 6};
    uint32_t u;
    memcpy(&u, &drift[3], 4);
    u ^= 1u;
    memcpy(&drift[3], &u, 4);
    v.data = drift, v.lo[1] = 0;
    dump_set_writer(d, 3);
    obs.batch_tensor(obs.ctx, &v);
    CHECK(dump_replica_diff(d, &r) && !strcmp(r.name, "step0.act.x") && r.device == 3 &&
              r.taken == 0 && r.flat == 8 + 1 * 4 + 1 && r.want == 6.0f && r.got != 6.0f,
          "replica diff: %s flat %lld device %d taken %d", r.name, (long long)r.flat, r.device,
          r.taken);
    dump_free(d);
    gpt_free(g);
}

int main(void) {
    RUN(test_blocks_and_replicas);
    return harness_done();
}
