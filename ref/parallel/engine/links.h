/* links.h - a virtual stage's links to its neighbours (links.c).
 *
 * Each chunk c of a stage has two links, made once at setup: next[c] to
 * virtual stage vs + 1 (the forward's stream goes out on it, its gradient
 * comes back) and prev[c] to vs - 1 (the stream comes in, its gradient
 * goes back). A link's kind says how the floats move:
 *
 *   p2p       a non-blocking send to one peer (held by the slot until
 *             link_wait), a blocking receive; the decoder's end of the
 *             encoder-decoder bridge is one, over the world group
 *   buffered  a V's (zb-v, dualpipev) sends: copied out, the slot free at
 *             once, waited for at the schedule's end (engine_links_flush)
 *   loop      a V's bottom: the stage's own other chunk, a copy by tag
 *   bridge    the encoder's end of the bridge: the stream to k = tp/etp
 *             decoder ranks, their gradients back (meshes.c)
 *
 * so a pass's send or receive is one call, link_send(&r->next[c], ...),
 * with the messages, tags, order and waits the schedule had before links.
 */
#ifndef PARITY_ENGINE_LINKS_H
#define PARITY_ENGINE_LINKS_H

#include <stddef.h>

#include "parity/coll.h"

struct engine_rank;
struct device;

typedef enum { LINK_NONE, LINK_P2P, LINK_BUFFERED, LINK_LOOP, LINK_BRIDGE } engine_link_kind_t;

typedef struct {
    engine_link_kind_t kind;
    struct engine_rank *r; /* the rank it belongs to (its stores, its device) */
    group_t *group;        /* p2p, buffered: the group and the peer's rank in it */
    int peer;
    int width;             /* requests a slot holds: 1 (p2p), fanout (bridge), 0 */
    coll_request_t **req;  /* [slots * width] a send still reading slot s, or NULL */
} engine_link_t;

/* len floats of slot s (n_seq sequences) to the link's other end under
 * tag, and the same from it into buf. */
void link_send(engine_link_t *l, int s, const float *buf, int n_seq, size_t len, int tag);
void link_recv(engine_link_t *l, float *buf, int n_seq, size_t len, int tag);
/* Slot s's sends on the link, waited for (the slot may be written). */
void link_wait(engine_link_t *l, int s);
void link_free(engine_link_t *l);

/* Every chunk's next and prev links (after the loop, buffered and bridge
 * features: links point into them), and their teardown; the buffered
 * sends waited for, in the order they were posted. */
int  engine_links_setup(struct engine_rank *r, struct device *dev);
void engine_links_teardown(struct engine_rank *r);
void engine_links_flush(struct engine_rank *r);

#endif
