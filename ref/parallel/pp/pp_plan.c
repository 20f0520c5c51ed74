/* pp_plan.c - which layers each pipeline stage and model chunk holds (pp.h). */
#include <string.h>

#include "model/gpt.h"
#include "parity/pp.h"

_Static_assert((int)PC_MAX_CHUNKS == (int)GPT_MAX_CHUNKS, "pconfig's chunk bound is the model's");

/* An encoder-decoder (Megatron-core's rules): a decoder pipeline needs
 * encoder stages of its own; with them, the encoder's layers split evenly
 * over its stages (the last also holding its final LayerNorm) and the
 * decoder's over the stages after. */
static int split_encoder(pp_plan_t *p, const model_config_t *cfg, const pconfig_t *pc,
                         perr_t *err) {
    const int epp = pc->encoder_pp, dpp = pc->pp - epp, Le = cfg->encoder_layers, L = cfg->layers;
    if (cfg->arch == MODEL_GPT)
        return perr_set(err, "encoder-pipeline-model-parallel-size: %d, but model %s (arch gpt) has "
                             "no encoder", epp, cfg->name);
    if (Le % epp)
        return perr_set(err, "encoder-pipeline-model-parallel-size: %d does not divide the %d "
                             "encoder layers", epp, Le);
    if (L % dpp)
        return perr_set(err, "pipeline-model-parallel-size: %d does not divide the %d decoder layers",
                        dpp, L);
    for (int r = 0; r < p->pp; r++)
        p->stage_layers[r] = r < epp ? Le / epp + (r == epp - 1) : L / dpp;
    return 0;
}

/* Layers per stage: the custom split, or uniform. */
static int split_layers(pp_plan_t *p, const model_config_t *cfg, const pconfig_t *pc,
                        perr_t *err) {
    const int pp = p->pp, L = p->layers;
    if (cfg->arch != MODEL_GPT && !pc->encoder_pp && pp > 1)
        return perr_set(err, "pipeline-model-parallel-size: %d with an encoder-decoder (arch %s) "
                             "needs --encoder-pipeline-model-parallel-size > 0 (Megatron's rule: the "
                             "encoder and the decoder cannot share a pipeline rank)",
                        pp, model_arch_name(cfg->arch));
    if (pc->encoder_pp) return split_encoder(p, cfg, pc, err);
    if (pp > L)
        return perr_set(err, "pipeline-model-parallel-size: %d stages for a model of %d layers "
                             "(each stage needs at least one layer)", pp, L);
    if (pc->n_layer_split) {
        int sum = 0;
        for (int r = 0; r < pp; r++) sum += p->stage_layers[r] = pc->layer_split[r];
        if (sum != L)
            return perr_set(err, "pipeline-layer-split: the stages' layers sum to %d, expected the "
                                 "model's %d layers", sum, L);
        return 0;
    }
    if (L % pp)
        return perr_set(err, "pipeline-model-parallel-size: %d does not divide the %d layers; "
                             "give --pipeline-layer-split (layers per stage, e.g. %d,...)",
                        pp, L, L / pp + 1);
    for (int r = 0; r < pp; r++) p->stage_layers[r] = L / pp;
    return 0;
}

/* Chunks per stage: given, or from the layers per virtual stage. */
static int chunks(pp_plan_t *p, const pconfig_t *pc, perr_t *err) {
    p->v = pc->vpp ? pc->vpp : 1;
    if (pc->pp_schedule == PC_PP_ZB_V || pc->pp_schedule == PC_PP_DUALPIPEV) {
        p->v = 2, p->vshape = 1; /* two chunks a stage, in a V (pp.h) */
        /* an encoder-decoder's extra unit (the encoder's final LayerNorm,
         * counted on its last stage) makes a stage odd: its chunks are
         * unequal, the last holding one unit more (chunk_layers); a V's
         * schedule is over passes, not layers */
        for (int r = 0; r < p->pp && !pc->encoder_pp; r++)
            if (p->stage_layers[r] % 2)
                return perr_set(err, "pipeline-schedule: %s puts two chunks on every stage, but "
                                     "stage %d holds %d layers (an odd number)",
                                pp_schedule_name(pc->pp_schedule), r, p->stage_layers[r]);
    }
    if (pc->layers_per_vstage) {
        /* the user's layers: not the encoder's final LayerNorm, a unit
         * of parity's that rides with its last stage's last chunk */
        int own[PC_MAX_SPLIT] = {0};
        for (int r = 0; r < p->pp; r++)
            own[r] = p->stage_layers[r] - (pc->encoder_pp && r == pc->encoder_pp - 1);
        const int n = pc->layers_per_vstage;
        for (int r = 0; r < p->pp; r++)
            if (own[r] % n || own[r] / n != own[0] / n)
                return perr_set(err, "num-layers-per-virtual-pipeline-stage: %d must cut every "
                                     "stage's layers into the same number of chunks; stage %d holds "
                                     "%d (stage 0: %d)", n, r, own[r], own[0]);
        p->v = own[0] / n;
        if (p->v < 2)
            return perr_set(err, "num-layers-per-virtual-pipeline-stage: %d leaves one chunk per "
                                 "stage (%d layers each); interleaving needs at least two",
                            n, own[0]);
        if (p->v > GPT_MAX_CHUNKS)
            return perr_set(err, "num-layers-per-virtual-pipeline-stage: %d gives %d chunks per "
                                 "stage, at most %d", n, p->v, GPT_MAX_CHUNKS);
    }
    /* an interleaved encoder-decoder (pp.h's rings): each mesh's chunks go
     * round its own stages, so each needs two of them (Megatron: virtual
     * stages need pp > 1); the encoder's last stage, holding its final
     * LayerNorm too, has unequal chunks */
    if (pc->encoder_pp && p->v > 1 && !p->vshape) {
        const int E = pc->encoder_pp, D = p->pp - E;
        if (E < 2 || D < 2)
            return perr_set(err, "virtual-pipeline-model-parallel-size: %d with an encoder-decoder: "
                                 "the encoder's chunks go round its %d stage(s) and the decoder's "
                                 "round its %d, and a ring needs 2 stages (one would send each chunk "
                                 "to itself)", p->v, E, D);
        p->rings = E;
    }
    for (int r = 0; r < p->pp && !p->vshape && !p->rings; r++)
        if (p->stage_layers[r] % p->v)
            return perr_set(err, "virtual-pipeline-model-parallel-size: %d chunks do not divide "
                                 "stage %d's %d layers", p->v, r, p->stage_layers[r]);
    return 0;
}

/* The layers of chunk c of stage r: an even share, the last chunks one
 * more where the stage's layers do not divide (an encoder-decoder's last
 * encoder stage: interleaved, its final LayerNorm rides with the encoder's
 * last layer in the encoder's last chunk). */
static int chunk_layers(const pp_plan_t *p, int r, int c) {
    return p->stage_layers[r] / p->v + (c >= p->v - p->stage_layers[r] % p->v);
}

int pp_plan_build(pp_plan_t *p, const model_config_t *cfg, const pconfig_t *pc, perr_t *err) {
    memset(p, 0, sizeof *p);
    p->pp = pc->pp > 0 ? pc->pp : 1;
    p->m = pc->accum_degree > 0 ? pc->accum_degree : 1;
    p->layers = model_num_units(cfg) - 2; /* the units between the first and the last */
    p->sched = pc->pp_schedule ? pc->pp_schedule : PC_PP_1F1B;
    if (p->pp > PC_MAX_SPLIT)
        return perr_set(err, "pipeline-model-parallel-size: %d, at most %d stages", p->pp, PC_MAX_SPLIT);
    if (split_layers(p, cfg, pc, err) || chunks(p, pc, err)) return -1;
    /* block: the first N layers of each run (a stage's chunk) alone; a run
     * of fewer layers recomputes them all, N or not (uniform cuts chunks
     * at a stage's end on purpose, CONTRIBUTING) */
    for (int r = 0; r < p->pp && pc->recompute == MODEL_RECOMPUTE_FULL && pc->recompute_block; r++)
        if (pc->recompute_layers > p->stage_layers[r] / p->v)
            return perr_set(err, "recompute-num-layers: %d, but --recompute-method block recomputes "
                                 "the first N layers of each stage's run, and stage %d's runs hold "
                                 "%d layer(s) each", pc->recompute_layers, r, p->stage_layers[r] / p->v);
    /* p2p tags name (direction, microbatch, boundary): 2 m pp v of them */
    if (2LL * p->m * p->pp * p->v > (1LL << 30))
        return perr_set(err, "num-microbatches: %d microbatches x %d stages x %d chunks are more "
                             "messages than a step's tags can name", p->m, p->pp, p->v);
    /* virtual stages in model order: chunk 0 of every stage, then chunk 1, ... */
    const int V = p->pp * p->v, L = p->layers;
    for (int vs = 1; vs < V - 1; vs++) /* the ends hold the embedding and the head */
        if (chunk_layers(p, pp_stage_of(p, vs), pp_chunk_of(p, vs)) == 0)
            return perr_set(err, "pipeline-schedule: %s puts %d chunks on every stage, but stage %d "
                                 "holds %d layer(s), so its chunk %d would hold no unit (%d chunks "
                                 "for %d layers between the embedding and the head: each chunk but "
                                 "the first and the last needs one)",
                            pp_schedule_name(p->sched), p->v, pp_stage_of(p, vs),
                            p->stage_layers[pp_stage_of(p, vs)], pp_chunk_of(p, vs), V, L);
    for (int vs = 0, layer = 0; vs < V; vs++) {
        const int r = pp_stage_of(p, vs), c = pp_chunk_of(p, vs), n = chunk_layers(p, r, c);
        gpt_units_t *u = &p->units[r];
        u->n = p->v;
        u->lo[c] = vs == 0 ? 0 : 1 + layer;
        u->hi[c] = vs == V - 1 ? L + 2 : 1 + layer + n;
        layer += n;
    }
    return 0;
}
