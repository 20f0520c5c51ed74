/* test_unit_pure.c - a unit's forward is pure (issue 24, acceptance 4).
 *
 * gpt_unit_forward_pure reads the parameters and the slot's input and
 * writes only the slot's activations; gpt_unit_after_forward adds the
 * head's token losses to the loss sum and reports the checkpoints. So a
 * forward run again (recomputation) must leave the loss sum, the
 * observer's calls and contents and every counter as they were, and the
 * activations bit for bit the same; and a training step whose forwards
 * all run twice must give the golden bits. Every unit kind is run again:
 * the embedding, each layer and the head (tied and untied, dropout on).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "parity/corpus.h"
#include "model/gpt.h"
#include "parity/tile.h"

/* An observer that counts its calls and hashes what it is shown. */
typedef struct {
    long calls, units;
    uint64_t hash;
} rec_t;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static void rec_tensor(void *ctx, const gpt_view_t *v) {
    rec_t *r = ctx;
    r->calls++;
    r->hash = fnv(r->hash, v->name, strlen(v->name));
    r->hash = fnv(r->hash, &v->first_seq, sizeof v->first_seq);
    r->hash = fnv(r->hash, &v->n_seq, sizeof v->n_seq);
    size_t n = (size_t)v->n_seq * st_dtype_size(v->dtype);
    for (int d = 0; d < v->ndim; d++) {
        r->hash = fnv(r->hash, &v->shape[d], sizeof v->shape[d]);
        r->hash = fnv(r->hash, &v->lo[d], sizeof v->lo[d]);
        n *= (size_t)v->ext[d];
    }
    r->hash = fnv(r->hash, v->data, n);
}

static void rec_unit(void *ctx, gpt_t *g, int unit, int event) {
    (void)g;
    rec_t *r = ctx;
    r->units++;
    r->hash = fnv(r->hash, &unit, sizeof unit);
    r->hash = fnv(r->hash, &event, sizeof event);
}

static gpt_observer_t observer(rec_t *r) {
    memset(r, 0, sizeof *r);
    r->hash = 0xcbf29ce484222325ull;
    return (gpt_observer_t){r, rec_tensor, NULL, rec_unit};
}

static corpus_t synthetic_corpus(void) {
    corpus_t c;
    memset(&c, 0, sizeof c);
    c.n = 5000;
    c.bytes = malloc(c.n);
    for (size_t i = 0; i < c.n; i++) c.bytes[i] = (uint8_t)("the quick brown fox "[i % 20] + (i / 20) % 3);
    snprintf(c.path, sizeof c.path, "synthetic");
    return c;
}

static model_config_t cfg_of(int tied) {
    model_config_t c;
    perr_t err;
    model_config_builtin("gpt-micro", &c, &err);
    c.hidden_dropout = 0.1f, c.attention_dropout = 0.1f;
    c.tied = tied;
    c.micro_batch = c.global_batch / 2;
    return c;
}

/* The checkpoints of every unit as the observer sees them now. */
static uint64_t all_checkpoints(const gpt_t *g) {
    rec_t r;
    const gpt_observer_t o = observer(&r);
    for (int u = 0; u < gpt_num_units(g); u++) gpt_report_unit(g, u, 0, &o);
    return r.hash;
}

typedef struct {
    long calls, units;
    uint64_t hash, acts;
    sacc_t loss;
    float token_loss0;
    int wide, narrow, pair, folded;
} snap_t;

static snap_t snap(const gpt_t *g, const rec_t *r) {
    snap_t s;
    memset(&s, 0, sizeof s);
    s.calls = r->calls, s.units = r->units, s.hash = r->hash;
    s.acts = all_checkpoints(g);
    memcpy(&s.loss, &g->loss_acc, sizeof s.loss);
    tile_wide_counts(&s.wide, &s.narrow);
    tile_pair_counts(&s.pair, &s.folded);
    return s;
}

/* After a whole forward pass, each unit's forward again: nothing an
 * observer, the loss or a counter sees changes, nor any activation. */
static void rerun_each_unit(int tied) {
    const model_config_t c = cfg_of(tied);
    corpus_t data = synthetic_corpus();
    gpt_t *g;
    perr_t err;
    if (gpt_new(&g, &c, &err)) {
        CHECK(0, "gpt_new: %s", err.msg);
        return;
    }
    const int T = c.seq_length, mb = c.micro_batch;
    int32_t *in = malloc((size_t)mb * T * 4), *tg = malloc((size_t)mb * T * 4);
    for (int b = 0; b < mb; b++) corpus_sample(&data, (uint64_t)b, T, in + (size_t)b * T, tg + (size_t)b * T);
    rec_t r;
    const gpt_observer_t o = observer(&r);
    gpt_step_begin(g);
    gpt_slot_begin(g, 0, in, tg, mb, 0, 0, &o);
    for (int u = 0; u < gpt_num_units(g); u++) gpt_unit_forward(g, u, 0, &o);
    const float loss = gpt_step_loss(g);
    CHECK(r.calls > 0 && loss > 0.0f, "the forward reported %ld tensors, loss %g", r.calls,
          (double)loss);
    for (int u = 0; u < gpt_num_units(g); u++) {
        const snap_t before = snap(g, &r);
        gpt_unit_forward_pure(g, u, 0);
        const snap_t after = snap(g, &r);
        CHECK(after.calls == before.calls && after.units == before.units &&
                  after.hash == before.hash,
              "tied %d unit %d: the observer was called again (%ld -> %ld tensors)", tied, u,
              before.calls, after.calls);
        CHECK(!memcmp(&after.loss, &before.loss, sizeof before.loss),
              "tied %d unit %d: the loss sum changed", tied, u);
        CHECK(after.wide == before.wide && after.narrow == before.narrow &&
                  after.pair == before.pair && after.folded == before.folded,
              "tied %d unit %d: the tile counters changed", tied, u);
        CHECK(after.acts == before.acts, "tied %d unit %d: the activations changed", tied, u);
    }
    CHECK(gpt_step_loss(g) == loss, "tied %d: the step loss changed", tied);
    /* after_forward is what adds: once more, and the head's losses count twice */
    const int head = gpt_num_units(g) - 1;
    gpt_unit_after_forward(g, head, 0, NULL);
    CHECK(gpt_step_loss(g) != loss, "tied %d: after_forward added no loss", tied);
    free(in), free(tg);
    gpt_free(g);
    corpus_free(&data);
}

static void test_rerun_tied(void) { rerun_each_unit(1); }
static void test_rerun_untied(void) { rerun_each_unit(0); }

/* Steps as gpt_train_step, each unit's forward run twice before its
 * after_forward; the observer's record of everything. */
static void step_twice(gpt_t *g, const corpus_t *data, int64_t step, const gpt_observer_t *o,
                       int twice) {
    const model_config_t *c = &g->cfg;
    const int B = c->global_batch, mb = c->micro_batch, T = c->seq_length;
    gpt_step_begin(g);
    for (int first = 0; first < B; first += mb) {
        gpt_slot_t *A = &g->slot[0];
        for (int b = 0; b < mb; b++)
            corpus_sample(data, (uint64_t)step * (uint64_t)B + (uint64_t)(first + b), T,
                          A->inputs + (size_t)b * T, A->targets + (size_t)b * T);
        if (!twice) {
            gpt_microbatch(g, A->inputs, A->targets, mb, first, step, o);
            continue;
        }
        gpt_slot_begin(g, 0, A->inputs, A->targets, mb, first, step, o);
        const int U = gpt_num_units(g);
        for (int u = 0; u < U; u++) {
            o->unit(o->ctx, g, u, GPT_FWD_BEGIN);
            gpt_unit_forward_pure(g, u, 0);
            gpt_unit_forward_pure(g, u, 0);
            o->unit(o->ctx, g, u, GPT_FWD_END);
            gpt_unit_after_forward(g, u, 0, o);
        }
        for (int u = U - 1; u >= 0; u--) gpt_unit_backward(g, u, 0, o);
    }
    const float loss = gpt_step_loss(g), lr = lr_schedule(c, step);
    const float norm = gpt_step_round_grads(g);
    rec_tensor(o->ctx, &(gpt_view_t){"loss", ST_F32, &loss, 0, 1, 0, {0}, {0}, {0}});
    gpt_step_update(g, lr, norm);
}

static void test_training_bits(void) {
    for (int tied = 0; tied < 2; tied++) {
        const model_config_t c = cfg_of(tied);
        corpus_t data = synthetic_corpus();
        gpt_t *g[2];
        rec_t r[2];
        gpt_observer_t o[2];
        perr_t err;
        for (int k = 0; k < 2; k++) {
            o[k] = observer(&r[k]);
            if (gpt_new(&g[k], &c, &err)) {
                CHECK(0, "gpt_new: %s", err.msg);
                return;
            }
            for (int s = 0; s < 2; s++) step_twice(g[k], &data, s, &o[k], k);
        }
        const size_t P = g[0]->table.total;
        CHECK(r[0].calls == r[1].calls && r[0].units == r[1].units && r[0].hash == r[1].hash,
              "tied %d: the observer saw %ld / %ld calls, different contents", tied, r[0].calls,
              r[1].calls);
        CHECK(!memcmp(g[0]->params, g[1]->params, P * 4), "tied %d: parameters differ", tied);
        CHECK(!memcmp(g[0]->grads, g[1]->grads, P * 4), "tied %d: gradients differ", tied);
        CHECK(!memcmp(g[0]->adam_m, g[1]->adam_m, P * 4) &&
                  !memcmp(g[0]->adam_v, g[1]->adam_v, P * 4),
              "tied %d: AdamW state differs", tied);
        gpt_free(g[0]), gpt_free(g[1]);
        corpus_free(&data);
    }
}

int main(void) {
    perr_t err;
    if (tile_init(&err)) {
        fprintf(stderr, "tile_init: %s\n", err.msg);
        return 1;
    }
    RUN(test_rerun_tied);
    RUN(test_rerun_untied);
    RUN(test_training_bits);
    return harness_done();
}
