/* test_mesh.c - grids of several meshes (mesh.h): every rank's place,
 * the groups inside each mesh, groups across meshes, the refusals, and
 * collectives over those groups in a real run.
 */
#include "parity/mesh.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "parity/coll.h"

#include "../harness.h"

/* Whether g holds exactly want[0..n) in that order, and its index table
 * agrees. */
static int group_is(const group_t *g, const int *want, int n) {
    if (!g || group_size(g) != n) return 0;
    for (int i = 0; i < n; i++)
        if (group_world_rank(g, i) != want[i] || group_index_of(g, want[i]) != i) return 0;
    return 1;
}
#define GROUP_IS(g, ...)                                                                  \
    group_is((g), (const int[]){__VA_ARGS__}, (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)))

static int contains(const char *msg, const char *part) { return strstr(msg, part) != NULL; }

/* ---- two meshes: A tp1 x dp2 at 0, B tp2 x dp2 at 2 ---- */

static mesh_grid_t two; /* ~130 KiB: static, not on a stack */

static const mesh_spec_t two_specs[2] = {
    {"A", "tp-cp-ep-dp-pp", {1, 1, 1, 1, 1, 2, 1}, 0},
    {"B", "tp-cp-ep-dp-pp", {2, 1, 1, 1, 1, 2, 1}, 2},
};

/* For each dp d: A's rank with tp 0 on the last stage, then all of B's
 * first stage. */
static const mesh_sel_t two_bridge[2] = {
    {0, {0, 0, 0, 0, 0, MESH_ANY, MESH_LAST}},
    {1, {MESH_ANY, 0, 0, 0, 0, MESH_ANY, 0}},
};

static void test_two_meshes(void) {
    perr_t e = {{0}};
    CHECK(mesh_grid_init(&two, two_specs, 2, 6, &e) == 0, "%s", e.msg);
    CHECK(two.world == 6 && two.nmesh == 2, "world %d meshes %d", two.world, two.nmesh);
    CHECK(mesh_find(&two, "B") == 1 && mesh_find(&two, "C") == -1, "mesh_find");
    /* rank -> mesh, local, tp, dp */
    static const int want[6][4] = {{0, 0, 0, 0}, {0, 1, 0, 1}, {1, 0, 0, 0},
                                   {1, 1, 1, 0}, {1, 2, 0, 1}, {1, 3, 1, 1}};
    for (int r = 0; r < 6; r++) {
        mesh_device_t d = mesh_device(&two, r);
        CHECK(d.rank == r && d.mesh == want[r][0] && d.local == want[r][1], "rank %d: mesh %d local %d",
              r, d.mesh, d.local);
        CHECK(d.coord[GRID_TP] == want[r][2] && d.coord[GRID_DP] == want[r][3] &&
                  d.coord[GRID_CP] == 0 && d.coord[GRID_EP] == 0 && d.coord[GRID_PP] == 0,
              "rank %d: tp %d dp %d", r, d.coord[GRID_TP], d.coord[GRID_DP]);
        CHECK(d.pp_prev == -1 && d.pp_next == -1, "rank %d: one stage", r);
        for (int a = 0; a < GRID_NAXES; a++)
            CHECK(d.group[a] && group_index_of(d.group[a], r) >= 0, "rank %d in its %s group", r,
                  grid_axis_name((grid_axis_t)a));
    }
    CHECK(mesh_device(&two, 6).mesh == -1 && mesh_device(&two, -1).mesh == -1, "outside the grid");
    /* groups inside each mesh, of world ranks */
    const mesh_t *A = &two.mesh[0], *B = &two.mesh[1];
    CHECK(A->ngroups[GRID_TP] == 2 && GROUP_IS(A->groups[GRID_TP][0], 0) &&
              GROUP_IS(A->groups[GRID_TP][1], 1), "A's tp groups");
    CHECK(A->ngroups[GRID_DP] == 1 && GROUP_IS(A->groups[GRID_DP][0], 0, 1), "A's dp group");
    CHECK(B->ngroups[GRID_TP] == 2 && GROUP_IS(B->groups[GRID_TP][0], 2, 3) &&
              GROUP_IS(B->groups[GRID_TP][1], 4, 5), "B's tp groups");
    CHECK(B->ngroups[GRID_DP] == 2 && GROUP_IS(B->groups[GRID_DP][0], 2, 4) &&
              GROUP_IS(B->groups[GRID_DP][1], 3, 5), "B's dp groups");
    CHECK(GROUP_IS(mesh_device(&two, 5).group[GRID_TP], 4, 5), "rank 5's tp group");
    CHECK(strcmp(group_name(B->groups[GRID_DP][1]), "B.dp1") == 0, "named %s",
          group_name(B->groups[GRID_DP][1]));
    CHECK(GROUP_IS(two.all, 0, 1, 2, 3, 4, 5), "world group");
    /* selections and the bridges */
    int sel[6];
    CHECK(mesh_select(&two, 1, (const int[GRID_NAXES]){MESH_LAST, 0, 0, 0, 0, MESH_ANY, 0}, sel, &e) == 2 &&
              sel[0] == 3 && sel[1] == 5, "B's last tp ranks: %d %d", sel[0], sel[1]);
    group_t *bridge[2] = {0};
    CHECK(mesh_bridge_create_all(&two, GRID_DP, two_bridge, 2, "bridge", bridge, &e) == 2, "%s", e.msg);
    CHECK(GROUP_IS(bridge[0], 0, 2, 3), "bridge 0");
    CHECK(GROUP_IS(bridge[1], 1, 4, 5), "bridge 1");
    CHECK(bridge[1] && strcmp(group_name(bridge[1]), "bridge1") == 0, "bridge name");
    CHECK(bridge[0] && group_index_of(bridge[0], 4) == -1, "4 is not in bridge 0");
    group_destroy_all(bridge, 2);
    /* any rank list of the grid, across meshes */
    group_t *g = mesh_group_create(&two, (const int[]){5, 0}, 2, "ends", &e);
    CHECK(GROUP_IS(g, 5, 0), "%s", e.msg);
    group_destroy(g);
}

/* ---- a real run: all-reduce over the bridges and the tp groups ---- */

typedef struct {
    const mesh_grid_t *G;
    group_t *bridge[2];
    int64_t bridge_sum[6], tp_sum[6];
} run_t;

static void run_main(device_t *dev, void *arg) {
    run_t *s = arg;
    mesh_device_t d = mesh_device(s->G, dev->rank);
    group_t *bridge = s->bridge[d.coord[GRID_DP]];
    int64_t mine = dev->rank + 1;
    coll_all_reduce(bridge, &mine, &s->bridge_sum[dev->rank], 1, COLL_I64, COLL_SUM);
    coll_all_reduce(d.group[GRID_TP], &mine, &s->tp_sum[dev->rank], 1, COLL_I64, COLL_SUM);
}

static void test_run_over_groups(void) {
    run_t *s = calloc(1, sizeof *s);
    perr_t e = {{0}};
    s->G = &two;
    CHECK(mesh_bridge_create_all(&two, GRID_DP, two_bridge, 2, "bridge", s->bridge, &e) == 2, "%s", e.msg);
    CHECK(devices_run(6, 0, run_main, s, &e) == 0, "%s", e.msg);
    /* values rank+1: bridges {0,2,3} {1,4,5}; tp {0} {1} {2,3} {4,5} */
    static const int64_t bridge_want[6] = {8, 13, 8, 8, 13, 13}, tp_want[6] = {1, 2, 7, 7, 11, 11};
    for (int r = 0; r < 6; r++) {
        CHECK(s->bridge_sum[r] == bridge_want[r], "rank %d bridge sum %lld, want %lld", r,
              (long long)s->bridge_sum[r], (long long)bridge_want[r]);
        CHECK(s->tp_sum[r] == tp_want[r], "rank %d tp sum %lld, want %lld", r,
              (long long)s->tp_sum[r], (long long)tp_want[r]);
    }
    group_destroy_all(s->bridge, 2);
    free(s);
    mesh_grid_free(&two);
}

/* ---- three meshes, order tp-pp-dp, given out of rank order ---- */

static void test_three_meshes(void) {
    static mesh_grid_t G;
    static const mesh_spec_t specs[3] = {
        {"enc", "tp-pp-dp", {2, 1, 1, 1, 1, 1, 2}, 6},  /* world ranks 6..9 */
        {"dec", "tp-pp-dp", {1, 1, 1, 1, 1, 2, 3}, 0},  /* 0..5 */
        {"head", "dp-tp", {1, 1, 1, 1, 1, 2, 1}, 10},   /* 10, 11 */
    };
    perr_t e = {{0}};
    CHECK(mesh_grid_init(&G, specs, 3, 0, &e) == 0, "%s", e.msg);
    CHECK(G.world == 12, "world %d", G.world);
    /* enc: local = tp + 2 pp */
    mesh_device_t d = mesh_device(&G, 8);
    CHECK(d.mesh == 0 && d.local == 2 && d.coord[GRID_TP] == 0 && d.coord[GRID_PP] == 1 &&
              d.pp_prev == 6 && d.pp_next == -1, "rank 8: mesh %d local %d tp %d pp %d prev %d next %d",
          d.mesh, d.local, d.coord[GRID_TP], d.coord[GRID_PP], d.pp_prev, d.pp_next);
    CHECK(GROUP_IS(d.group[GRID_TP], 8, 9) && GROUP_IS(d.group[GRID_PP], 6, 8), "rank 8's groups");
    /* dec: local = pp + 3 dp */
    for (int r = 0; r < 6; r++) {
        d = mesh_device(&G, r);
        CHECK(d.mesh == 1 && d.local == r && d.coord[GRID_PP] == r % 3 && d.coord[GRID_DP] == r / 3 &&
                  d.coord[GRID_TP] == 0, "rank %d: mesh %d pp %d dp %d", r, d.mesh, d.coord[GRID_PP],
              d.coord[GRID_DP]);
        CHECK(d.pp_prev == (r % 3 ? r - 1 : -1) && d.pp_next == (r % 3 < 2 ? r + 1 : -1),
              "rank %d: prev %d next %d", r, d.pp_prev, d.pp_next);
    }
    const mesh_t *dec = &G.mesh[1];
    CHECK(dec->ngroups[GRID_PP] == 2 && GROUP_IS(dec->groups[GRID_PP][0], 0, 1, 2) &&
              GROUP_IS(dec->groups[GRID_PP][1], 3, 4, 5), "dec's pp groups");
    CHECK(dec->ngroups[GRID_DP] == 3 && GROUP_IS(dec->groups[GRID_DP][0], 0, 3) &&
              GROUP_IS(dec->groups[GRID_DP][2], 2, 5), "dec's dp groups");
    d = mesh_device(&G, 11);
    CHECK(d.mesh == 2 && d.local == 1 && d.coord[GRID_DP] == 1, "rank 11: mesh %d dp %d", d.mesh,
          d.coord[GRID_DP]);
    /* Megatron's embedding group: each replica's first and last decoder stage */
    group_t *emb[2] = {0};
    const mesh_sel_t ends[2] = {{1, {0, 0, 0, 0, 0, MESH_ANY, 0}}, {1, {0, 0, 0, 0, 0, MESH_ANY, MESH_LAST}}};
    CHECK(mesh_bridge_create_all(&G, GRID_DP, ends, 2, "embd", emb, &e) == 2, "%s", e.msg);
    CHECK(GROUP_IS(emb[0], 0, 2) && GROUP_IS(emb[1], 3, 5), "embedding groups");
    group_destroy_all(emb, 2);
    /* the encoder's last stage to each decoder replica's head */
    const mesh_sel_t hand[2] = {{0, {MESH_ANY, 0, 0, 0, 0, 0, MESH_LAST}}, {2, {0, 0, 0, 0, 0, 1, 0}}};
    group_t *g = mesh_group_select(&G, hand, 2, "hand", &e);
    CHECK(GROUP_IS(g, 8, 9, 11), "%s", e.msg);
    group_destroy(g);
    /* dp sizes differ: enc 1, dec 2 */
    const mesh_sel_t mixed[2] = {{0, {0, 0, 0, 0, 0, MESH_ANY, MESH_LAST}}, {1, {0, 0, 0, 0, 0, MESH_ANY, 0}}};
    CHECK(mesh_bridge_create_all(&G, GRID_DP, mixed, 2, "mixed", emb, &e) == -1 &&
              contains(e.msg, "mesh \"enc\" has dp=1 but mesh \"dec\" has dp=2"), "%s", e.msg);
    mesh_grid_free(&G);
}

/* ---- refusals ---- */

static mesh_grid_t bad;

/* mesh_grid_init on specs must fail with a message containing part. */
static void refuses(const mesh_spec_t *specs, int n, int world, const char *part) {
    perr_t e = {{0}};
    int rc = mesh_grid_init(&bad, specs, n, world, &e);
    CHECK(rc == -1 && contains(e.msg, part), "want '%s', got rc %d '%s'", part, rc, e.msg);
    if (rc == 0) mesh_grid_free(&bad);
}

static void test_refusals(void) {
    const char *o = "tp-cp-ep-dp-pp";
    refuses((const mesh_spec_t[]){{"A", o, {2, 1, 1, 1, 1, 2, 1}, 0}, {"B", o, {2, 1, 1, 1, 1, 1, 1}, 3}}, 2, 0,
            "rank 3 is in both mesh \"A\" (ranks 0..3) and mesh \"B\" (ranks 3..4)");
    refuses((const mesh_spec_t[]){{"A", o, {2, 1, 1, 1, 1, 1, 1}, 0}, {"B", o, {2, 1, 1, 1, 1, 1, 1}, 3}}, 2, 0,
            "rank 2 is in no mesh");
    refuses((const mesh_spec_t[]){{"A", o, {2, 1, 1, 1, 1, 1, 1}, 0}}, 1, 3, "rank 2 is in no mesh");
    refuses((const mesh_spec_t[]){{"A", o, {2, 1, 1, 1, 1, 1, 1}, 0}, {"B", o, {1, 1, 1, 1, 1, 0, 1}, 2}}, 2, 0,
            "mesh \"B\": dp size 0, expected >= 1");
    refuses((const mesh_spec_t[]){{"A", o, {1, 1, 1, 1, 1, 1, 1}, 0}, {"B", "tp-zz-dp", {1, 1, 1, 1, 1, 1, 1}, 1}},
            2, 0, "mesh \"B\": layout order 'tp-zz-dp': unknown dimension 'zz'");
    refuses((const mesh_spec_t[]){{"A", "tp-pp", {1, 1, 1, 1, 1, 2, 1}, 0}}, 1, 0,
            "mesh \"A\": layout sizes 'tp=1,tp2=1,tp3=1,cp=1,ep=1,dp=2,pp=1': dimension 'dp' is not in the order");
    refuses((const mesh_spec_t[]){{"A", o, {1, 1, 1, 1, 1, 1, 1}, -1}}, 1, 0, "mesh \"A\": offset -1");
    refuses((const mesh_spec_t[]){{"A", o, {4, 1, 1, 1, 1, 1, 1}, 0}}, 1, 2,
            "mesh \"A\": ranks 0..3 go beyond the world of 2 devices");
    refuses((const mesh_spec_t[]){{"A", o, {1, 1, 1, 1, 1, 1, 1}, 0}, {"A", o, {1, 1, 1, 1, 1, 1, 1}, 1}}, 2, 0,
            "mesh 1: name \"A\" is already mesh 0's");
    refuses((const mesh_spec_t[]){{"", o, {1, 1, 1, 1, 1, 1, 1}, 0}}, 1, 0, "mesh 0: name is empty");
    refuses(two_specs, 0, 0, "meshes: 0 given");

    /* groups on a good grid: ranks out of range, twice, bad coordinates */
    perr_t e = {{0}};
    CHECK(mesh_grid_init(&bad, two_specs, 2, 6, &e) == 0, "%s", e.msg);
    group_t *g = mesh_group_create(&bad, (const int[]){0, 2, 6}, 3, "bridge0", &e);
    CHECK(!g && contains(e.msg, "group 'bridge0': entry 2 is rank 6, not in the grid's ranks 0..5"),
          "%s", e.msg);
    group_destroy(g);
    g = mesh_group_create(&bad, (const int[]){0, 2, 2}, 3, "bridge0", &e);
    CHECK(!g && contains(e.msg, "group 'bridge0': rank 2 appears twice (entries 1 and 2)"), "%s", e.msg);
    group_destroy(g);
    const mesh_sel_t meet[2] = {{1, {0, 0, 0, 0, 0, 0, 0}}, {1, {MESH_ANY, 0, 0, 0, 0, 0, 0}}};
    g = mesh_group_select(&bad, meet, 2, "meet", &e);
    CHECK(!g && contains(e.msg, "group 'meet': rank 2 appears twice"), "%s", e.msg);
    group_destroy(g);
    const mesh_sel_t far[1] = {{1, {0, 0, 0, 0, 0, 2, 0}}};
    g = mesh_group_select(&bad, far, 1, "far", &e);
    CHECK(!g && contains(e.msg, "group 'far': selection 0: mesh \"B\": dp coordinate 2, expected 0..1"),
          "%s", e.msg);
    group_destroy(g);
    int ranks[4];
    CHECK(mesh_select(&bad, 2, far[0].coord, ranks, &e) == -1 &&
              contains(e.msg, "mesh_select: mesh 2, expected 0..1"), "%s", e.msg);
    /* a bridge whose groups would repeat a rank */
    group_t *out[2] = {0};
    CHECK(mesh_bridge_create_all(&bad, GRID_DP, meet, 2, "twice", out, &e) == -1 &&
              contains(e.msg, "group 'twice0': rank 2 appears twice") && !out[0], "%s", e.msg);
    mesh_grid_free(&bad);
}

int main(void) {
    RUN(test_two_meshes);
    RUN(test_run_over_groups);
    RUN(test_three_meshes);
    RUN(test_refusals);
    return harness_done();
}
