/* test_placement.c - the device grid (grid.h) and placements
 * (placement.h): blocks, runs, reassembly, replicas, errors. */
#include <stdint.h>
#include <string.h>

#include "../harness.h"
#include "parity/coll.h"
#include "parity/grid.h"
#include "model/gpt.h"
#include "parity/placement.h"

/* Every device of a tp=2 x dp=3 x pp=2 grid: its coordinates match the
 * order (tp fastest) or, with a rank list, the canonical position the
 * list gives its rank; an all-reduce of world ranks over each of its
 * groups gives the sum over exactly the ranks that share the other axes;
 * its index in each group is its coordinate; its pipeline neighbours are
 * the ranks of the positions 6 before and after. */
typedef struct {
    const grid_t *G;
    const int *rank_at; /* world rank at each canonical position */
    int bad;
} grid_run_t;

static void grid_device_main(device_t *dev, void *arg) {
    grid_run_t *r = arg;
    const int *at = r->rank_at;
    grid_device_t d = grid_device(r->G, dev->rank);
    int tp = d.coord[GRID_TP], dp = d.coord[GRID_DP], pp = d.coord[GRID_PP];
    int c = tp + 2 * dp + 6 * pp, bad = 0;
    bad += dev->rank != at[c];
    bad += group_rank(d.group[GRID_TP]) != tp || group_rank(d.group[GRID_DP]) != dp ||
           group_rank(d.group[GRID_PP]) != pp;
    int64_t mine = dev->rank, sum;
    coll_all_reduce(d.group[GRID_TP], &mine, &sum, 1, COLL_I64, COLL_SUM);
    bad += sum != at[2 * dp + 6 * pp] + at[1 + 2 * dp + 6 * pp];
    coll_all_reduce(d.group[GRID_DP], &mine, &sum, 1, COLL_I64, COLL_SUM);
    bad += sum != at[tp + 6 * pp] + at[tp + 2 + 6 * pp] + at[tp + 4 + 6 * pp];
    coll_all_reduce(d.group[GRID_CP], &mine, &sum, 1, COLL_I64, COLL_SUM);
    bad += sum != mine;
    coll_all_reduce(r->G->all, &mine, &sum, 1, COLL_I64, COLL_SUM);
    bad += sum != 66;
    bad += d.pp_prev != (pp ? at[c - 6] : -1) || d.pp_next != (pp ? -1 : at[c + 6]);
    __atomic_add_fetch(&r->bad, bad, __ATOMIC_RELAXED);
}

static void test_grid_groups(void) {
    grid_t G;
    perr_t e;
    int sizes[GRID_NAXES] = {2, 1, 1, 1, 1, 3, 2}, at[12];
    for (int c = 0; c < 12; c++) at[c] = c;
    CHECK(grid_init(&G, "tp-cp-ep-dp-pp", sizes, &e) == 0, "%s", e.msg);
    CHECK(G.world == 12, "world %d", G.world);
    grid_run_t r = {&G, at, 0};
    CHECK(devices_run(G.world, 0, grid_device_main, &r, &e) == 0, "%s", e.msg);
    CHECK(r.bad == 0, "%d wrong coordinates or group sums", r.bad);
    grid_free(&G);
}

/* A rank list places position c on world rank 5c + 7 mod 12: every
 * coordinate, group, group index and neighbour follows it (device d
 * stays world rank d); a list that is no permutation is refused. */
static void test_grid_rank_list(void) {
    grid_t G;
    perr_t e;
    int sizes[GRID_NAXES] = {2, 1, 1, 1, 1, 3, 2}, at[12];
    unsigned short list[12];
    for (int c = 0; c < 12; c++) list[c] = (unsigned short)(at[c] = (5 * c + 7) % 12);
    CHECK(grid_init_mapped(&G, "tp-cp-ep-dp-pp", sizes, list, 12, &e) == 0, "%s", e.msg);
    grid_device_t d0 = grid_device(&G, 0); /* 5c + 7 = 0 mod 12: c = 1, tp 1 of dp 0, stage 0 */
    CHECK(d0.coord[GRID_TP] == 1 && d0.coord[GRID_DP] == 0 && d0.coord[GRID_PP] == 0,
          "device 0 at tp %d dp %d pp %d", d0.coord[GRID_TP], d0.coord[GRID_DP], d0.coord[GRID_PP]);
    grid_run_t r = {&G, at, 0};
    CHECK(devices_run(G.world, 0, grid_device_main, &r, &e) == 0, "%s", e.msg);
    CHECK(r.bad == 0, "%d wrong coordinates or group sums with a rank list", r.bad);
    char buf[128];
    grid_describe(&G, buf, sizeof buf);
    CHECK(strstr(buf, "rank list") != NULL, "describe: '%s'", buf);
    grid_free(&G);
    list[11] = list[0];
    CHECK(grid_init_mapped(&G, "tp-cp-ep-dp-pp", sizes, list, 12, &e) != 0 &&
              strstr(e.msg, "rank list") && strstr(e.msg, "entries 0 and 11 both name rank 7"),
          "a rank twice: '%s'", e.msg);
    CHECK(grid_init_mapped(&G, "tp-cp-ep-dp-pp", sizes, list, 11, &e) != 0 &&
              strstr(e.msg, "11 ranks for a world of 12 devices"),
          "a short list: '%s'", e.msg);
}

/* Another order puts dp first: rank 1 is then dp coordinate 1. */
static void test_grid_order(void) {
    grid_t G;
    perr_t e;
    int sizes[GRID_NAXES] = {2, 1, 1, 1, 1, 2, 1};
    CHECK(grid_init(&G, "dp-tp", sizes, &e) == 0, "%s", e.msg);
    grid_device_t d = grid_device(&G, 1);
    CHECK(d.coord[GRID_DP] == 1 && d.coord[GRID_TP] == 0, "dp %d tp %d", d.coord[GRID_DP],
          d.coord[GRID_TP]);
    grid_free(&G);
    int bad[GRID_NAXES] = {2, 1, 1, 1, 1, 1, 1};
    CHECK(grid_init(&G, "dp-pp", bad, &e) != 0 && strstr(e.msg, "tp"),
          "an axis > 1 the order leaves out: '%s'", e.msg);
    bad[GRID_TP] = 0;
    CHECK(grid_init(&G, "tp-dp", bad, &e) != 0 && strstr(e.msg, "tp"), "size 0: '%s'", e.msg);
}

static void test_block_and_runs(void) {
    /* W [6, 8] cut along axis 1 over tp=2 (row-parallel), align 2 */
    int64_t shape[2] = {6, 8};
    placement_t p = placement_cut(placement_replicated(2, shape), 1, GRID_TP, 2);
    int sizes[GRID_NAXES] = {2, 1, 1, 1, 1, 1, 1}, coord[GRID_NAXES] = {1, 0, 0, 0, 0, 0, 0};
    perr_t e;
    CHECK(placement_check(&p, sizes, "w", &e) == 0, "%s", e.msg);
    int64_t lo[PL_MAX_DIMS], ext[PL_MAX_DIMS];
    placement_block(&p, sizes, coord, lo, ext);
    CHECK(lo[0] == 0 && lo[1] == 4 && ext[0] == 6 && ext[1] == 4, "block %lld,%lld +%lld,%lld",
          (long long)lo[0], (long long)lo[1], (long long)ext[0], (long long)ext[1]);
    CHECK(placement_local_numel(&p, sizes) == 24, "numel %zu", placement_local_numel(&p, sizes));
    float global[48], local[24], back[48];
    for (int i = 0; i < 48; i++) global[i] = (float)i;
    placement_take(&p, sizes, coord, global, local);
    CHECK(local[0] == 4.0f && local[3] == 7.0f && local[4] == 12.0f && local[23] == 47.0f,
          "take: %g %g %g %g", (double)local[0], (double)local[3], (double)local[4],
          (double)local[23]);
    memset(back, 0, sizeof back);
    for (int r = 0; r < 2; r++) {
        int c2[GRID_NAXES] = {r, 0, 0, 0, 0, 0, 0};
        float piece[24];
        placement_take(&p, sizes, c2, global, piece);
        placement_put(&p, sizes, c2, piece, back);
    }
    CHECK(!memcmp(back, global, sizeof back), "put of every block reassembles the tensor");
    CHECK(placement_compare(&p, sizes, coord, local, global, NULL) == -1, "equal block");
    local[5] = -1.0f; /* local (1,1) -> global (1,5) = 13 */
    size_t li = 0;
    CHECK(placement_compare(&p, sizes, coord, local, global, &li) == 13 && li == 5,
          "first difference at %lld (local %zu)",
          (long long)placement_compare(&p, sizes, coord, local, global, NULL), li);
}

/* Two nested cuts (2D tensor parallelism): rows over tp, columns over cp. */
static void test_nested_cuts(void) {
    int64_t shape[2] = {4, 6};
    placement_t p = placement_cut(placement_cut(placement_replicated(2, shape), 0, GRID_TP, 1), 1,
                                  GRID_CP, 1);
    int sizes[GRID_NAXES] = {2, 1, 1, 3, 1, 1, 1}, coord[GRID_NAXES] = {1, 0, 0, 2, 0, 0, 0};
    int64_t lo[PL_MAX_DIMS], ext[PL_MAX_DIMS];
    placement_block(&p, sizes, coord, lo, ext);
    CHECK(lo[0] == 2 && lo[1] == 4 && ext[0] == 2 && ext[1] == 2, "block %lld,%lld", (long long)lo[0],
          (long long)lo[1]);
}

static void test_replicas(void) {
    int64_t shape[1] = {8};
    placement_t rep = placement_replicated(1, shape);
    placement_t col = placement_cut(rep, 0, GRID_TP, 1);
    int sizes[GRID_NAXES] = {2, 1, 1, 1, 1, 2, 1};
    int c00[GRID_NAXES] = {0}, c10[GRID_NAXES] = {1, 0, 0, 0, 0, 0, 0}, c01[GRID_NAXES] = {0, 0, 0, 0, 0, 1, 0};
    CHECK(!placement_is_extra_replica(&rep, sizes, c00), "rank (0,0) holds the first copy");
    CHECK(placement_is_extra_replica(&rep, sizes, c10), "a tp replica is extra");
    CHECK(placement_is_extra_replica(&rep, sizes, c01), "a dp replica is extra");
    CHECK(!placement_is_extra_replica(&col, sizes, c10), "a tp shard is not a replica");
    CHECK(placement_is_extra_replica(&col, sizes, c01), "a tp shard replicated over dp");
    placement_t part = rep;
    part.partial = 1u << GRID_TP;
    CHECK(!placement_is_extra_replica(&part, sizes, c10), "partial sums all count");
}

/* A 3-D tensor (a stacked [2, F, C] weight, column-parallel: each
 * matrix's rows over tp) on a tp 2 x dp 2 x pp 2 grid, evaluated at the
 * real coordinates of every device: each block is the golden slice, the
 * pipeline coordinate never makes a copy extra, the blocks of the
 * non-extra copies reassemble the global tensor exactly once, every copy
 * compares equal, and the gradient group is the token axes it is
 * replicated over (dp-cp); cut over dp (an expert's own tokens), cp alone. */
static void test_whole_grid_3d(void) {
    const int64_t shape[3] = {2, 8, 6};
    const placement_t p = placement_cut(placement_replicated(3, shape), 1, GRID_TP, 2);
    const int sizes[GRID_NAXES] = {2, 1, 1, 1, 1, 2, 2};
    float global[96], back[96], local[48];
    for (int i = 0; i < 96; i++) global[i] = (float)i, back[i] = -1.0f;
    CHECK(placement_check(&p, sizes, "stack", NULL) == 0, "3-D cut fits");
    CHECK(placement_local_numel(&p, sizes) == 48, "block numel %zu", placement_local_numel(&p, sizes));
    int puts = 0;
    for (int k = 0; k < 8; k++) {
        const int coord[GRID_NAXES] = {k & 1, 0, 0, 0, 0, k >> 1 & 1, k >> 2};
        int64_t lo[PL_MAX_DIMS], ext[PL_MAX_DIMS];
        placement_block(&p, sizes, coord, lo, ext);
        CHECK(lo[0] == 0 && ext[0] == 2 && lo[1] == 4 * (k & 1) && ext[1] == 4 && ext[2] == 6,
              "block of device %d", k);
        placement_take(&p, sizes, coord, global, local);
        CHECK(local[6] == global[(lo[1] + 1) * 6], "take: row 1 of matrix 0");
        CHECK(local[24] == global[48 + lo[1] * 6], "take: row 0 of matrix 1");
        CHECK(placement_compare(&p, sizes, coord, local, global, NULL) == -1, "copy %d equal", k);
        const int extra = placement_is_extra_replica(&p, sizes, coord);
        CHECK(extra == ((k >> 1 & 1) != 0), "device %d extra %d (pp never makes a copy)", k, extra);
        if (!extra) placement_put(&p, sizes, coord, local, back), puts++;
    }
    CHECK(puts == 4 && !memcmp(back, global, sizeof global), "reassembled once per tp x pp");
    char name[32];
    placement_reduce_name(placement_reduce_axes(&p), name, sizeof name);
    CHECK(!strcmp(name, "dp-cp"), "replicated over the token axes: '%s'", name);
    const placement_t expert = placement_cut(p, 0, GRID_DP, 1);
    placement_reduce_name(placement_reduce_axes(&expert), name, sizeof name);
    CHECK(!strcmp(name, "cp"), "cut over dp: '%s'", name);
}

static void test_errors(void) {
    int64_t shape[2] = {48, 16}; /* e.g. qkv rows of 4 heads x 3 x D=4 */
    placement_t p = placement_cut(placement_replicated(2, shape), 0, GRID_TP, 12);
    int sizes[GRID_NAXES] = {8, 1, 1, 1, 1, 1, 1};
    perr_t e;
    CHECK(placement_check(&p, sizes, "layers.0.qkv", &e) != 0 && strstr(e.msg, "tp=8") &&
              strstr(e.msg, "layers.0.qkv") && strstr(e.msg, "4 blocks of 12"),
          "message: '%s'", e.msg);
    sizes[GRID_TP] = 4;
    CHECK(placement_check(&p, sizes, "layers.0.qkv", &e) == 0, "%s", e.msg);
}

/* Uneven whole tiles: 33 tiles of 8 rows over tp 4 are 9, 8, 8, 8 (the
 * first ranks one more, rank 0 the largest); the blocks tile the axis
 * without gap or overlap, and put/take round-trip every element once. 3
 * tiles over tp 4 leave a rank without one: refused naming the count. */
static void test_uneven(void) {
    const int64_t shape[2] = {33 * 8, 3};
    placement_t p = placement_cut_uneven(placement_replicated(2, shape), 0, GRID_TP, 8);
    int sizes[GRID_NAXES] = {4, 1, 1, 1, 1, 1, 1}, coord[GRID_NAXES] = {0};
    perr_t e;
    CHECK(placement_check(&p, sizes, "wte", &e) == 0, "%s", e.msg);
    float global[33 * 8 * 3], back[33 * 8 * 3], local[9 * 8 * 3];
    for (int i = 0; i < 33 * 8 * 3; i++) global[i] = (float)i, back[i] = -1.0f;
    int64_t next = 0;
    for (int r = 0; r < 4; r++) {
        int64_t lo[PL_MAX_DIMS], ext[PL_MAX_DIMS];
        coord[GRID_TP] = r;
        placement_block(&p, sizes, coord, lo, ext);
        CHECK(lo[0] == next && ext[0] == (r == 0 ? 9 : 8) * 8 && ext[1] == 3,
              "rank %d: rows %lld + %lld", r, (long long)lo[0], (long long)ext[0]);
        next = lo[0] + ext[0];
        placement_take(&p, sizes, coord, global, local);
        placement_put(&p, sizes, coord, local, back);
    }
    CHECK(next == 33 * 8, "the blocks end at row %lld", (long long)next);
    CHECK(!memcmp(global, back, sizeof global), "put(take) is the identity");
    CHECK(placement_local_numel(&p, sizes) == 9 * 8 * 3, "rank 0's block is the largest");
    const int64_t small[2] = {3 * 8, 3};
    p = placement_cut_uneven(placement_replicated(2, small), 0, GRID_TP, 8);
    CHECK(placement_check(&p, sizes, "wte", &e) != 0 && strstr(e.msg, "3 tiles of 8") &&
              strstr(e.msg, "tp=4"),
          "message: '%s'", e.msg);
}

int main(void) {
    RUN(test_grid_groups);
    RUN(test_grid_order);
    RUN(test_grid_rank_list);
    RUN(test_block_and_runs);
    RUN(test_nested_cuts);
    RUN(test_replicas);
    RUN(test_whole_grid_3d);
    RUN(test_errors);
    RUN(test_uneven);
    return harness_done();
}
