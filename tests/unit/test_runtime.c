/* test_runtime.c - arenas, device threads, rank layouts, process groups.
 *
 * Layout expectations come from an independent nested-loop enumeration
 * (the way one would write out Megatron's rank grid by hand), never from
 * the implementation's own output.
 */
#include "parity/pool.h"
#include "parity/runtime.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../harness.h"

#define KiB ((size_t)1024)

static int contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

/* ---- arenas ---- */

static void test_arena_alloc_align_zero(void) {
    arena_t *a = arena_create(0, 0);
    CHECK(a != NULL, "arena_create");
    unsigned char *p = arena_alloc(a, 1000, MEM_PARAMS, "w");
    CHECK(p && ((uintptr_t)p % 64) == 0, "64-byte alignment: %p", (void *)p);
    int zero = 1;
    for (int i = 0; i < 1000; i++) zero &= p[i] == 0;
    CHECK(zero, "allocation is zero-filled");
    memset(p, 0xab, 1000); /* the whole request is usable */
    void *z1 = arena_alloc(a, 0, MEM_WORKSPACE, "empty1"), *z2 = arena_alloc(a, 0, MEM_WORKSPACE, "empty2");
    CHECK(z1 && z2 && z1 != z2, "zero-byte allocations are distinct non-NULL pointers");
    CHECK(arena_in_use(a, MEM_PARAMS) == 1000, "in use %zu", arena_in_use(a, MEM_PARAMS));
    arena_free(a, p);
    arena_free(a, NULL);
    arena_free(a, z1);
    CHECK(arena_in_use(a, MEM_NCAT) == 0, "total in use after free %zu", arena_in_use(a, MEM_NCAT));
    /* re-allocating reuses nothing dirty: fresh memory is zero again */
    unsigned char *q = arena_alloc(a, 1000, MEM_PARAMS, "w2");
    int zero2 = 1;
    for (int i = 0; i < 1000; i++) zero2 &= q[i] == 0;
    CHECK(zero2, "second allocation zero-filled");
    arena_destroy(a); /* frees q and z2 */
}

static void test_arena_high_water(void) {
    arena_t *a = arena_create(1, 10 * 1024 * KiB);
    /* Expected figures tracked by hand alongside the calls. */
    size_t act = 0, act_peak = 0, tot = 0, tot_peak = 0;
#define TRACK(delta_act, delta_tot)                                   \
    do {                                                              \
        act += (delta_act), tot += (delta_tot);                       \
        if (act > act_peak) act_peak = act;                           \
        if (tot > tot_peak) tot_peak = tot;                           \
    } while (0)
    void *w = arena_alloc(a, 300 * KiB, MEM_PARAMS, "weights");
    TRACK(0, 300 * KiB);
    void *a1 = arena_alloc(a, 100 * KiB, MEM_ACTIVATIONS, "act1");
    TRACK(100 * KiB, 100 * KiB);
    void *a2 = arena_alloc(a, 200 * KiB, MEM_ACTIVATIONS, "act2");
    TRACK(200 * KiB, 200 * KiB);
    arena_free(a, a1);
    TRACK(-100 * KiB, -100 * KiB);
    void *a3 = arena_alloc(a, 50 * KiB, MEM_ACTIVATIONS, "act3");
    TRACK(50 * KiB, 50 * KiB);
    arena_free(a, a2);
    TRACK(-200 * KiB, -200 * KiB);
    void *g = arena_alloc(a, 400 * KiB, MEM_GRADS, "grads");
    TRACK(0, 400 * KiB);
    CHECK(arena_in_use(a, MEM_ACTIVATIONS) == act, "act in use %zu want %zu", arena_in_use(a, MEM_ACTIVATIONS), act);
    CHECK(arena_high_water(a, MEM_ACTIVATIONS) == act_peak, "act peak %zu want %zu",
          arena_high_water(a, MEM_ACTIVATIONS), act_peak);
    CHECK(arena_high_water(a, MEM_GRADS) == 400 * KiB, "grads peak");
    CHECK(arena_high_water(a, MEM_OPTIMIZER) == 0, "optimizer untouched");
    CHECK(arena_in_use(a, MEM_NCAT) == tot, "total %zu want %zu", arena_in_use(a, MEM_NCAT), tot);
    CHECK(arena_high_water(a, MEM_NCAT) == tot_peak, "total peak %zu want %zu", arena_high_water(a, MEM_NCAT),
          tot_peak);
    arena_stats_t s;
    arena_get_stats(a, &s);
    CHECK(s.live_allocations == 3 && s.capacity == 10 * 1024 * KiB && s.device == 1, "stats");
    arena_reset_high_water(a);
    CHECK(arena_high_water(a, MEM_ACTIVATIONS) == act, "reset peaks to current use");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    arena_print_report(a, f);
    fclose(f);
    CHECK(contains(buf, "device 1") && contains(buf, "activations") && contains(buf, "grads") &&
              contains(buf, "high water") && contains(buf, "optimizer"),
          "report:\n%s", buf);
    free(buf);
    arena_free(a, w), arena_free(a, a3), arena_free(a, g);
    arena_destroy(a);
#undef TRACK
}

static void test_arena_oom_report(void) {
    arena_t *a = arena_create(3, 1024 * KiB);
    void *w = arena_alloc(a, 600 * KiB, MEM_PARAMS, "embedding.weight");
    void *o = arena_alloc(a, 250 * KiB, MEM_OPTIMIZER, "adam.m");
    void *s = arena_alloc(a, 10 * KiB, MEM_WORKSPACE, "tiny");
    CHECK(w && o && s, "fits");
    void *big = arena_alloc(a, 500 * KiB, MEM_ACTIVATIONS, "attn.scores");
    CHECK(big == NULL, "over capacity must return NULL");
    const char *r = arena_last_error(a);
    CHECK(contains(r, "device 3"), "names the device: %s", r);
    CHECK(contains(r, "512000"), "names the request size: %s", r);
    CHECK(contains(r, "attn.scores") && contains(r, "activations"), "names request name and category: %s", r);
    CHECK(contains(r, "1048576"), "names the capacity: %s", r);
    CHECK(contains(r, "880640"), "names the current use (600+250+10 KiB): %s", r);
    const char *e = strstr(r, "embedding.weight"), *m = strstr(r, "adam.m"), *t = strstr(r, "tiny");
    CHECK(e && m && t && e < m && m < t, "largest live allocations listed, largest first: %s", r);
    CHECK(arena_in_use(a, MEM_ACTIVATIONS) == 0, "failed allocation is not counted");
    /* exactly filling the capacity still works */
    void *fill = arena_alloc(a, 1024 * KiB - 860 * KiB, MEM_ACTIVATIONS, "fill");
    CHECK(fill != NULL, "allocation up to the capacity succeeds");
    CHECK(arena_alloc(a, 1, MEM_COMM, "one") == NULL, "one byte over fails");
    arena_destroy(a);
}

/* ---- devices ---- */

typedef struct {
    int world;
    int rank_seen[16], world_seen[16], self_ok[16], arena_dev[16];
    _Atomic int ran;
    int nested_rc;
    char nested_msg[1024];
} run_probe_t;

static void probe_main(device_t *dev, void *arg) {
    run_probe_t *p = arg;
    p->rank_seen[dev->rank] = dev->rank;
    p->world_seen[dev->rank] = dev->world;
    p->self_ok[dev->rank] = device_self() == dev;
    void *x = arena_alloc(dev->arena, 128, MEM_ACTIVATIONS, "x");
    arena_stats_t s;
    arena_get_stats(dev->arena, &s);
    p->arena_dev[dev->rank] = x ? s.device : -1;
    atomic_fetch_add(&p->ran, 1);
    if (dev->rank == 0) {
        perr_t e;
        p->nested_rc = devices_run(2, 0, probe_main, p, &e);
        snprintf(p->nested_msg, sizeof p->nested_msg, "%s", e.msg);
    }
}

static void test_devices_run(void) {
    run_probe_t p;
    memset(&p, 0, sizeof p);
    perr_t e;
    CHECK(device_self() == NULL, "main thread is not a device");
    int rc = devices_run(5, 1 << 20, probe_main, &p, &e);
    CHECK(rc == 0, "devices_run: %s", e.msg);
    CHECK(atomic_load(&p.ran) == 5, "every device ran once: %d", atomic_load(&p.ran));
    for (int r = 0; r < 5; r++) {
        CHECK(p.rank_seen[r] == r && p.world_seen[r] == 5, "rank %d world %d", p.rank_seen[r], p.world_seen[r]);
        CHECK(p.self_ok[r], "device_self on rank %d", r);
        CHECK(p.arena_dev[r] == r, "rank %d has its own arena (device %d)", r, p.arena_dev[r]);
        CHECK(device_state(r) == DEVICE_FINISHED, "rank %d finished", r);
    }
    CHECK(p.nested_rc == -1 && contains(p.nested_msg, "nest"), "nested run refused: %s", p.nested_msg);
    CHECK(devices_world() == 0, "no run in progress afterwards");
    CHECK(devices_run(0, 0, probe_main, &p, &e) == -1 && contains(e.msg, "world"), "world 0: %s", e.msg);
    CHECK(devices_run(PARITY_MAX_DEVICES + 1, 0, probe_main, &p, &e) == -1 && contains(e.msg, "world"),
          "world too large: %s", e.msg);
    CHECK(devices_run(2, 0, NULL, &p, &e) == -1, "NULL function refused");
}

/* ---- kernel limits: refused up front, naming the limit ---- */

static void test_thread_limits(void) {
    /* this host's figures: the largest world must pass (the 16384-device
     * run, tests/layouts/test_scale_16k.sh) */
    host_limits_t h;
    host_limits_read(&h);
    perr_t e;
    printf("  host: %ld mappings of vm.max_map_count %ld, %ld threads of pid_max %ld\n", h.maps,
           h.max_maps, h.threads, h.pid_max);
    /* a typical quiet host (Linux's defaults) */
    const host_limits_t quiet = {.maps = 200, .max_maps = 65530, .threads = 500, .pid_max = 32768,
                                 .threads_max = 190000};
    CHECK(devices_check_limits(PARITY_MAX_DEVICES, &quiet, &e) == 0, "%d devices: %s",
          PARITY_MAX_DEVICES, e.msg);
    /* 2 mappings a thread: past max_map_count by one, and just inside */
    host_limits_t m = quiet;
    m.max_maps = m.maps + 2L * PARITY_MAX_DEVICES + DEVICES_MAP_HEADROOM - 1;
    CHECK(devices_check_limits(PARITY_MAX_DEVICES, &m, &e) == -1 &&
              contains(e.msg, "vm.max_map_count") && contains(e.msg, "/proc/sys/vm/max_map_count"),
          "one mapping short: %s", e.msg);
    m.max_maps++;
    CHECK(devices_check_limits(PARITY_MAX_DEVICES, &m, &e) == 0, "exactly enough: %s", e.msg);
    /* pids: other processes' threads count too */
    host_limits_t p = quiet;
    p.threads = p.pid_max - PARITY_MAX_DEVICES;
    CHECK(devices_check_limits(PARITY_MAX_DEVICES, &p, &e) == -1 && contains(e.msg, "kernel.pid_max"),
          "pids: %s", e.msg);
    p = quiet, p.threads_max = 1000;
    CHECK(devices_check_limits(1000, &p, &e) == -1 && contains(e.msg, "kernel.threads-max"),
          "threads-max: %s", e.msg);
    /* unreadable limits are not checked */
    const host_limits_t none = {-1, -1, -1, -1, -1};
    CHECK(devices_check_limits(PARITY_MAX_DEVICES, &none, &e) == 0, "unknown limits: %s", e.msg);
    /* and devices_run refuses before any thread starts */
    if (h.max_maps > 0 && h.maps >= 0) {
        CHECK(devices_check_limits(4, &h, &e) == 0, "4 devices on this host: %s", e.msg);
    }
}

/* ---- pinning: one CPU per device when the world fits ---- */

typedef struct {
    int cpus_seen[64], ncpu_in_mask[64], cpu_of[64];
} pin_probe_t;

static void pin_main(device_t *dev, void *arg) {
    pin_probe_t *p = arg;
    cpu_set_t set;
    sched_getaffinity(0, sizeof set, &set);
    p->ncpu_in_mask[dev->rank] = CPU_COUNT(&set);
    p->cpus_seen[dev->rank] = devices_cpus();
    p->cpu_of[dev->rank] = -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) p->cpu_of[dev->rank] = c;
}

static void test_pinning(void) {
    cpu_set_t mine;
    sched_getaffinity(0, sizeof mine, &mine);
    int ncpu = CPU_COUNT(&mine);
    perr_t e;
    pin_probe_t p;
    int world = ncpu < 64 ? ncpu : 64; /* fits: pinned, one CPU each, all different */
    if (world < 2) return;             /* a single device is never pinned */
    CHECK(devices_run(world, 0, pin_main, &p, &e) == 0, "%s", e.msg);
    for (int r = 0; r < world; r++) {
        CHECK(p.ncpu_in_mask[r] == 1, "device %d may run on %d CPUs, want 1", r, p.ncpu_in_mask[r]);
        CHECK(p.cpus_seen[r] == ncpu, "devices_cpus() %d want %d (the mask before pinning)", p.cpus_seen[r], ncpu);
        CHECK(CPU_ISSET(p.cpu_of[r], &mine), "device %d pinned to CPU %d outside the process mask", r, p.cpu_of[r]);
        for (int q = 0; q < r; q++) CHECK(p.cpu_of[q] != p.cpu_of[r], "devices %d and %d share CPU %d", q, r, p.cpu_of[r]);
    }
    if (ncpu < 63) { /* more devices than CPUs: nobody is pinned */
        CHECK(devices_run(ncpu + 1, 0, pin_main, &p, &e) == 0, "%s", e.msg);
        for (int r = 0; r <= ncpu; r++) CHECK(p.ncpu_in_mask[r] == ncpu, "device %d: %d CPUs", r, p.ncpu_in_mask[r]);
    }
    setenv("PARITY_PIN", "0", 1);
    CHECK(devices_run(world, 0, pin_main, &p, &e) == 0, "%s", e.msg);
    for (int r = 0; r < world; r++) CHECK(p.ncpu_in_mask[r] == ncpu, "PARITY_PIN=0: device %d has %d CPUs", r, p.ncpu_in_mask[r]);
    unsetenv("PARITY_PIN");
}

/* ---- layouts ---- */

static const char *const dims5[5] = {"tp", "cp", "ep", "dp", "pp"};

/* Expected coordinates by nested loops, outermost = last dimension. */
static void enumerate_coords(const int *size, int (*coords)[5]) {
    int r = 0;
    for (int pp = 0; pp < size[4]; pp++)
        for (int dp = 0; dp < size[3]; dp++)
            for (int ep = 0; ep < size[2]; ep++)
                for (int cp = 0; cp < size[1]; cp++)
                    for (int tp = 0; tp < size[0]; tp++, r++) {
                        coords[r][0] = tp, coords[r][1] = cp, coords[r][2] = ep;
                        coords[r][3] = dp, coords[r][4] = pp;
                    }
}

/* Brute force: the ranks sharing every coordinate outside `in`, sorted
 * by their combined index over `in` (first dimension fastest). */
static int brute_group(int world, int (*coords)[5], const int *size, int rank, const int *in, int *out) {
    int n = 0;
    for (int k = 0;; k++) { /* walk combined indices in order */
        int rest = k, target[5];
        for (int d = 0; d < 5; d++) {
            if (in[d]) {
                target[d] = rest % size[d];
                rest /= size[d];
            } else {
                target[d] = coords[rank][d];
            }
        }
        if (rest) break;
        for (int r = 0; r < world; r++)
            if (!memcmp(coords[r], target, sizeof target)) out[n++] = r;
    }
    return n;
}

static void check_layout_against_brute(const char *sizes_str, const int *size) {
    rank_layout_t L;
    perr_t e;
    CHECK(layout_init(&L, "tp-cp-ep-dp-pp", sizes_str, &e) == 0, "%s: %s", sizes_str, e.msg);
    int world = 1;
    for (int d = 0; d < 5; d++) world *= size[d];
    CHECK(L.world == world, "%s: world %d want %d", sizes_str, L.world, world);
    int(*coords)[5] = malloc(sizeof(int[5]) * (size_t)world);
    enumerate_coords(size, coords);
    int *want = malloc(sizeof(int) * (size_t)world), *got = malloc(sizeof(int) * (size_t)world);
    for (int r = 0; r < world; r++) {
        for (int d = 0; d < 5; d++)
            CHECK(layout_coord(&L, r, dims5[d]) == coords[r][d], "%s rank %d %s: %d want %d", sizes_str, r,
                  dims5[d], layout_coord(&L, r, dims5[d]), coords[r][d]);
        CHECK(layout_rank_of(&L, coords[r]) == r, "%s rank_of(rank %d)", sizes_str, r);
        /* every single dimension and a few combinations */
        const char *combos[] = {"tp", "cp", "ep", "dp", "pp", "dp-cp", "cp-dp", "tp-pp", "tp-dp-pp"};
        for (size_t ci = 0; ci < sizeof combos / sizeof combos[0]; ci++) {
            int in[5] = {0};
            for (int d = 0; d < 5; d++) in[d] = strstr(combos[ci], dims5[d]) != NULL;
            int nw = brute_group(world, coords, size, r, in, want);
            int ng = layout_group_ranks(&L, r, combos[ci], got);
            CHECK(ng == nw && !memcmp(got, want, sizeof(int) * (size_t)nw), "%s rank %d group %s differs",
                  sizes_str, r, combos[ci]);
            /* group ids: same group <=> same id */
            int id = layout_group_id(&L, r, combos[ci]);
            CHECK(id >= 0 && id < layout_num_groups(&L, combos[ci]), "group id range");
            CHECK(layout_num_groups(&L, combos[ci]) * nw == world, "groups tile the world");
            for (int k = 0; k < nw; k++)
                CHECK(layout_group_id(&L, want[k], combos[ci]) == id, "members share the id");
        }
    }
    free(coords), free(want), free(got);
}

static void test_layout_megatron(void) {
    const int s1[5] = {2, 1, 1, 2, 2};
    check_layout_against_brute("tp=2,pp=2,dp=2", s1);
    const int s2[5] = {3, 2, 1, 2, 2};
    check_layout_against_brute(" cp=2 , tp=3,dp=2,pp=2", s2);
    const int s3[5] = {1, 1, 2, 3, 1};
    check_layout_against_brute("ep=2,dp=3", s3);
    /* The groups Megatron prints for tp=2, dp=2, pp=2. */
    rank_layout_t L;
    perr_t e;
    layout_init(&L, "tp-cp-ep-dp-pp", "tp=2,dp=2,pp=2", &e);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    layout_print_map(&L, f);
    fclose(f);
    CHECK(contains(buf, "tp groups: [0,1] [2,3] [4,5] [6,7]"), "map:\n%s", buf);
    CHECK(contains(buf, "dp groups: [0,2] [1,3] [4,6] [5,7]"), "map:\n%s", buf);
    CHECK(contains(buf, "pp groups: [0,4] [1,5] [2,6] [3,7]"), "map:\n%s", buf);
    CHECK(contains(buf, "cp groups: [0] [1] [2] [3] [4] [5] [6] [7]"), "map:\n%s", buf);
    free(buf);
    /* a short order string: absent dims have size 1 and coordinate 0 */
    CHECK(layout_init(&L, "tp-dp-pp", "dp=4", &e) == 0, "%s", e.msg);
    CHECK(L.world == 4 && layout_coord(&L, 3, "dp") == 3 && layout_coord(&L, 3, "cp") == 0, "short order");
    CHECK(layout_size(&L, "ep") == 1 && layout_size(&L, "dp") == 4 && layout_size(&L, "zz") == -1, "sizes");
    int g[8];
    CHECK(layout_group_ranks(&L, 2, "cp", g) == 1 && g[0] == 2, "absent dim group is the rank itself");
    CHECK(layout_group_ranks(&L, 2, "xx", g) == -1, "unknown dim in a query");
    CHECK(layout_coord(&L, 4, "dp") == -1, "rank out of range");
    CHECK(layout_init(&L, "pp-dp-tp", "tp=2,pp=3", &e) == 0 && layout_coord(&L, 1, "pp") == 1 &&
              layout_coord(&L, 3, "tp") == 1,
          "a different order puts pp fastest");
}

/* A rank list (layout_init_mapped) moves every position's rank and
 * nothing else: against the same layout without it, world rank list[c]
 * has position c's coordinates, group id and group (each member mapped
 * the same way, in the same order), and rank_of gives list[c]. */
static void test_layout_rank_list(void) {
    rank_layout_t L0, L;
    perr_t e;
    enum { W = 12 };
    unsigned short list[W];
    for (int c = 0; c < W; c++) list[c] = (unsigned short)((7 * c + 3) % W);
    CHECK(layout_init(&L0, "tp-cp-ep-dp-pp", "tp=2,dp=3,pp=2", &e) == 0, "%s", e.msg);
    CHECK(layout_init_mapped(&L, "tp-cp-ep-dp-pp", "tp=2,dp=3,pp=2", list, W, &e) == 0 && L.mapped,
          "%s", e.msg);
    const char *combos[] = {"tp", "cp", "dp", "pp", "dp-cp", "tp-pp", "tp-dp-pp"};
    int g0[W], g[W];
    for (int c = 0; c < W; c++) {
        const int r = list[c];
        int coords[5];
        for (int d = 0; d < 5; d++) {
            coords[d] = layout_coord(&L0, c, dims5[d]);
            CHECK(layout_coord(&L, r, dims5[d]) == coords[d], "rank %d %s", r, dims5[d]);
        }
        CHECK(layout_rank_of(&L, coords) == r, "rank_of position %d: %d want %d", c,
              layout_rank_of(&L, coords), r);
        for (size_t k = 0; k < sizeof combos / sizeof combos[0]; k++) {
            const int n0 = layout_group_ranks(&L0, c, combos[k], g0);
            const int n = layout_group_ranks(&L, r, combos[k], g);
            int same = n == n0;
            for (int i = 0; same && i < n; i++) same = g[i] == list[g0[i]];
            CHECK(same, "rank %d's %s group", r, combos[k]);
            CHECK(layout_group_id(&L, r, combos[k]) == layout_group_id(&L0, c, combos[k]), "group id");
        }
    }
    /* list[c] = 7c + 3 mod 12: tp pairs (0,1) (2,3) .. land on (3,10) (5,0) .. */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    layout_print_map(&L, f);
    fclose(f);
    CHECK(contains(buf, "tp groups: [3,10] [5,0] [7,2] [9,4] [11,6] [1,8]") &&
              contains(buf, "from a rank list"),
          "map:\n%s", buf);
    free(buf);
    /* what is no permutation of the world */
    unsigned short bad[W];
    memcpy(bad, list, sizeof bad);
    bad[5] = bad[2];
    CHECK(layout_init_mapped(&L, "tp-cp-ep-dp-pp", "tp=2,dp=3,pp=2", bad, W, &e) == -1 &&
              contains(e.msg, "rank list: entries 2 and 5 both name rank 5") &&
              contains(e.msg, "permutation of 0..11"),
          "%s", e.msg);
    bad[5] = W;
    CHECK(layout_init_mapped(&L, "tp-cp-ep-dp-pp", "tp=2,dp=3,pp=2", bad, W, &e) == -1 &&
              contains(e.msg, "entry 5 is rank 12, beyond the 12 devices"),
          "%s", e.msg);
    CHECK(layout_init_mapped(&L, "tp-cp-ep-dp-pp", "tp=2,dp=3,pp=2", list, 4, &e) == -1 &&
              contains(e.msg, "4 ranks for a world of 12 devices (expected a permutation of 0..11)"),
          "%s", e.msg);
    CHECK(layout_init_mapped(&L, "tp-dp", "tp=2", list, 0, &e) == 0 && !L.mapped, "no list: %s", e.msg);
}

static void test_layout_errors(void) {
    rank_layout_t L;
    perr_t e;
    struct {
        const char *order, *sizes, *want1, *want2;
    } bad[] = {
        {"tp-xx-dp", "tp=2", "unknown dimension", "'xx'"},
        {"tp-dp-tp", NULL, "twice", "'tp'"},
        {"", NULL, "empty", "order"},
        {"tp-dp", "tp=0", "tp=0", "from 1"},
        {"tp-dp", "tp=-2", "tp=-2", "from 1"},
        {"tp-dp", "tp=abc", "tp=abc", "integer"},
        {"tp-dp", "pp=2", "'pp'", "not in the order"},
        {"tp-dp", "qq=2", "unknown dimension", "'qq'"},
        {"tp-dp", "tp2", "'tp2'", "name=N"},
        {"tp-dp", "tp=2,tp=4", "'tp'", "twice"},
        {"tp-dp", "tp=", "tp", "size"},
        {"tp-dp", "tp=128,dp=256", "exceed", "devices"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        e.msg[0] = 0;
        int rc = layout_init(&L, bad[i].order, bad[i].sizes, &e);
        CHECK(rc == -1 && contains(e.msg, bad[i].want1) && contains(e.msg, bad[i].want2),
              "order '%s' sizes '%s' -> rc %d msg '%s'", bad[i].order, bad[i].sizes ? bad[i].sizes : "(null)",
              rc, e.msg);
    }
    CHECK(layout_init(&L, "tp-dp", "tp=2,", &e) == 0 && L.world == 2, "a trailing comma is fine");
    CHECK(layout_init(&L, "tp-dp", "tp=2,cp=1,pp=1", &e) == 0 && L.world == 2,
          "a dimension the order leaves out may be given size 1: %s", e.msg);
    CHECK(layout_init(&L, "tp-dp", "cp= 2", &e) == -1 && contains(e.msg, "'cp' is not in the order"),
          "but no other size: %s", e.msg);
}

/* ---- groups ---- */

typedef struct {
    group_t *g;
    int idx[8];
} grank_probe_t;

static void grank_main(device_t *dev, void *arg) {
    grank_probe_t *p = arg;
    p->idx[dev->rank] = group_rank(p->g);
}

static void test_groups(void) {
    perr_t e;
    int ranks[] = {4, 1, 3};
    group_t *g = group_create(ranks, 3, "odd", &e);
    CHECK(g != NULL, "%s", e.msg);
    CHECK(group_size(g) == 3 && !strcmp(group_name(g), "odd"), "size and name");
    CHECK(group_world_rank(g, 0) == 4 && group_world_rank(g, 2) == 3 && group_world_rank(g, 3) == -1, "world ranks");
    CHECK(group_index_of(g, 1) == 1 && group_index_of(g, 0) == -1 && group_index_of(g, 99) == -1, "index_of");
    CHECK(group_rank(g) == -1, "main thread is not a member");
    grank_probe_t p = {.g = g};
    CHECK(devices_run(6, 0, grank_main, &p, &e) == 0, "%s", e.msg);
    int want[6] = {-1, 1, -1, 2, 0, -1};
    for (int r = 0; r < 6; r++) CHECK(p.idx[r] == want[r], "rank %d: group_rank %d want %d", r, p.idx[r], want[r]);
    /* a live group naming rank 4 cannot run on 4 devices */
    CHECK(devices_run(4, 0, grank_main, &p, &e) == -1 && contains(e.msg, "'odd'") && contains(e.msg, "rank 4"),
          "run too small for a group: %s", e.msg);
    group_destroy(g);
    int dup[] = {0, 2, 0};
    CHECK(group_create(dup, 3, "dup", &e) == NULL && contains(e.msg, "rank 0 appears twice"), "%s", e.msg);
    int neg[] = {0, -1};
    CHECK(group_create(neg, 2, "neg", &e) == NULL && contains(e.msg, "rank -1"), "%s", e.msg);
    CHECK(group_create(ranks, 0, "empty", &e) == NULL && contains(e.msg, "at least one"), "%s", e.msg);
    int big[] = {PARITY_MAX_DEVICES};
    CHECK(group_create(big, 1, "big", &e) == NULL && contains(e.msg, "out of range"), "%s", e.msg);
}

static void test_groups_from_layout(void) {
    rank_layout_t L;
    perr_t e;
    layout_init(&L, "tp-cp-ep-dp-pp", "tp=2,dp=2,pp=2", &e);
    group_t *dp[4];
    CHECK(layout_num_groups(&L, "dp") == 4, "4 dp groups");
    CHECK(group_create_all(&L, "dp", "dp", dp, &e) == 0, "%s", e.msg);
    int want[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};
    for (int i = 0; i < 4; i++) {
        char name[8];
        snprintf(name, sizeof name, "dp%d", i);
        CHECK(group_size(dp[i]) == 2 && group_world_rank(dp[i], 0) == want[i][0] &&
                  group_world_rank(dp[i], 1) == want[i][1] && !strcmp(group_name(dp[i]), name),
              "dp group %d: [%d,%d] %s", i, group_world_rank(dp[i], 0), group_world_rank(dp[i], 1),
              group_name(dp[i]));
    }
    group_destroy_all(dp, 4);
    CHECK(group_create_all(&L, "zz", "x", dp, &e) == -1 && contains(e.msg, "zz"), "%s", e.msg);
}

/* ---- compute threads (pool.h) ------------------------------------------ */

enum { POOL_PIECES = 5000 };
typedef struct {
    atomic_int runs[POOL_PIECES];
    atomic_int bad_worker, nested_ok;
    int threads;
} pool_job_t;

static void nested_piece(void *arg, int piece, int worker) {
    pool_job_t *j = arg;
    atomic_fetch_add(&j->runs[piece], 1);
    if (worker < 0 || worker >= POOL_MAX_THREADS) atomic_fetch_add(&j->bad_worker, 1);
}

static void count_piece(void *arg, int piece, int worker) {
    pool_job_t *j = arg;
    atomic_fetch_add(&j->runs[piece], 1);
    if (worker < 0 || worker >= j->threads) atomic_fetch_add(&j->bad_worker, 1);
    if (piece % 1000 == 7) { /* a piece that calls pool_run: no deadlock, every piece once */
        pool_job_t *inner = calloc(1, sizeof *inner);
        if (!inner) return;
        pool_run(nested_piece, inner, 3);
        int once = 1;
        for (int i = 0; i < 3; i++) once &= atomic_load(&inner->runs[i]) == 1;
        if (once && atomic_load(&inner->bad_worker) == 0) atomic_fetch_add(&j->nested_ok, 1);
        free(inner);
    }
}

static void check_pool_job(int threads) {
    pool_job_t *j = calloc(1, sizeof *j);
    CHECK(j != NULL, "alloc");
    j->threads = threads;
    pool_run(count_piece, j, POOL_PIECES);
    int wrong = 0;
    for (int i = 0; i < POOL_PIECES; i++) wrong += atomic_load(&j->runs[i]) != 1;
    CHECK(wrong == 0, "%d threads: %d pieces did not run exactly once", threads, wrong);
    CHECK(atomic_load(&j->bad_worker) == 0, "%d threads: a worker index out of range", threads);
    CHECK(atomic_load(&j->nested_ok) == POOL_PIECES / 1000, "%d threads: nested pool_run",
          threads);
    free(j);
}

static void *second_caller(void *p) {
    for (int k = 0; k < 20; k++) check_pool_job(*(int *)p);
    return NULL;
}

static void test_pool(void) {
    perr_t err;
    CHECK(pool_threads() == 1, "a pool starts with the caller alone");
    check_pool_job(1);
    for (int n = 2; n <= 4; n++) {
        CHECK(pool_set_threads(n, &err) == 0, "pool_set_threads(%d): %s", n, err.msg);
        CHECK(pool_threads() == n, "pool_threads() = %d, expected %d", pool_threads(), n);
        for (int k = 0; k < 50; k++) check_pool_job(n); /* many jobs: late helpers */
    }
    /* two callers at once: one gets the pool, the other runs its pieces */
    int n = 4;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, second_caller, &n) == 0, "pthread_create");
    for (int k = 0; k < 20; k++) check_pool_job(n);
    pthread_join(t, NULL);
    CHECK(pool_set_threads(0, &err) != 0 && strstr(err.msg, "1..64"), "0 threads: %s", err.msg);
    CHECK(pool_set_threads(65, &err) != 0, "65 threads accepted");
    CHECK(pool_set_threads(1, &err) == 0 && pool_threads() == 1, "back to one thread");
}

int main(void) {
    RUN(test_arena_alloc_align_zero);
    RUN(test_arena_high_water);
    RUN(test_arena_oom_report);
    RUN(test_devices_run);
    RUN(test_thread_limits);
    RUN(test_pinning);
    RUN(test_layout_megatron);
    RUN(test_layout_rank_list);
    RUN(test_layout_errors);
    RUN(test_groups);
    RUN(test_groups_from_layout);
    RUN(test_pool);
    return harness_done();
}
