/* features.h - the per-feature state of a rank (features.c): one struct
 * per feature a layout may switch on, each with its setup and teardown,
 * listed in one table (features.c's `features`) that setup_rank and
 * teardown_rank walk. A feature a layout leaves off keeps its struct
 * zeroed: teardowns take that. To add one: its struct here, a member of
 * engine_rank_t, a row in the table.
 */
#ifndef PARITY_ENGINE_FEATURES_H
#define PARITY_ENGINE_FEATURES_H

#include <stddef.h>
#include <stdint.h>

#include "model/gpt.h"
#include "parity/coll.h"

struct engine_rank;
struct device;

/* split schedules (zb-h1, zb-v, ...): [m * v] each (microbatch, chunk)'s
 * weight-gradient work between its B and its W (layers.h); the most bytes
 * the stashes held at once. With --overlap-grad-reduce a bucket is final
 * only after the last W of its units (Megatron-core's delayed wgrad): in_b
 * marks a B pass (its units' ends trigger nothing), w_runs[c] counts chunk
 * c's W passes this step; the chunk's last W runs unit by unit, marks[k *
 * units + u] being the stash's count after unit u's B (pass k), and
 * unit_final[u] says unit u's gradients are final. */
typedef struct {
    struct linear_wstash **stash;
    size_t n, peak;
    int in_b, pass, units;
    int w_runs[GPT_MAX_CHUNKS];
    int *marks;
    uint8_t *unit_final;
} engine_wstash_t;

/* a V's bottom (zb-v, dualpipev): [tags] the hand-offs between the last
 * stage's own chunks, by tag (links.c) */
typedef struct {
    float **copy;
    size_t n;
} engine_loop_t;

/* a V's sends in flight, with their copies (links.c) */
typedef struct {
    coll_request_t **req;
    float **data;
    int n, cap;
} engine_buffered_t;

/* the encoder's end of the encoder-decoder bridge (links.c, meshes.c):
 * the decoder peers it feeds, [fanout]; per slot the packed streams
 * [slots][fanout][micro_batch * T * C] and the peers' gradients being
 * received [micro_batch * T * C] */
typedef struct {
    int fanout;
    int *peer;
    float *send, *recv;
} engine_bridge_t;

/* optimizer offload (offload.c): cpu, the AdamW shards come from
 * host_arena, not the device's; nvme, they live in the file path
 * ([m: shard_len][v: shard_len] fp32, or adamw8bit's [m codes: shard_len
 * bytes][v codes][m absmax: shard_qlen fp32][v absmax]) and a bucket's
 * pieces pass through m, v ([max piece] each, the device's; adamw8bit: a
 * slot's codes, then its absmax entries from float qoff on) */
typedef struct {
    struct arena *host_arena;
    int fd;
    char path[512];        /* nvme: <claimed directory>/parity-optim-rank<R>.bin */
    float *m, *v;          /* nvme: two slots each of `slot` floats (double buffering) */
    size_t slot, qoff;
    struct offload_io *io; /* nvme: the slots' asynchronous reads and writes */
    long writes;           /* pieces written (PARITY_OFFLOAD_KILL_AFTER, tests) */
} engine_offload_t;

/* MoE models: [2][L][E] the step's routed and dropped counts, summed over
 * the world (engine_moe_stats), or NULL; the same with the auxiliary
 * losses' sums: the run's */
typedef struct {
    int64_t *counts;
    gpt_moe_stats_t sum;
} engine_moe_t;

/* A feature's setup (0, or -1 after engine_fail) and teardown. */
typedef struct {
    const char *name;
    int (*setup)(struct engine_rank *r, struct device *dev);
    void (*teardown)(struct engine_rank *r);
} engine_feature_t;

/* Every feature's setup in the table's order (the first failure stops);
 * every teardown in reverse (after a failed setup too). */
int  engine_features_setup(struct engine_rank *r, struct device *dev);
void engine_features_teardown(struct engine_rank *r);

#endif
