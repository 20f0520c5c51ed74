/* styles.c - the tables of styles, one a family (style.h). A new style is
 * its own file and one line here. */
#include <stddef.h>

#include "model/styles/experts.h"
#include "model/styles/style.h"
#include "model/styles/attention.h"
#include "model/styles/linear.h"
#include "model/styles/norm.h"
#include "model/styles/vocab.h"

enum { STYLE_MAX_REGISTERED = 8 };

/* The built-in tables, most specific first, NULL-terminated. */
static const style_t *const linear_table[] = {
    &linear_tp3d.base,    /* linear_tp3d.c: Colossal-AI's 3-D */
    &linear_summa2d.base, /* linear_summa2d.c: SUMMA, 2-D and 2.5-D */
    &linear_row.base,     /* linear_row.c: every linear row-parallel */
    &linear_1d.base,      /* linear_1d.c: Megatron's column/row, +-SP; the golden run's */
    NULL,
};
static const style_t *const norm_table[] = {
    &norm_tp2d.base,  /* norm_tp2d.c: row statistics over 2-D/2.5-D/3-D's row */
    &norm_local.base, /* norm_local.c: the golden LayerNorm (SP: sums completed over tp) */
    NULL,
};
static const style_t *const vocab_table[] = {
    &vocab_3d.base,    /* vocab_3d.c: Colossal-AI's 3-D */
    &vocab_2d.base,    /* vocab_2d.c: 2-D and 2.5-D */
    &vocab_1d.base,    /* vocab_1d.c: Megatron's vocabulary-parallel */
    &vocab_local.base, /* vocab_local.c: the golden run's */
    NULL,
};
static const style_t *const attention_table[] = {
    &attention_ulysses.base, /* attention_ulysses.c: context parallel, all-to-all */
    &attention_ring.base,    /* attention_ring.c: context parallel, ring */
    &attention_local.base,   /* attention_local.c: the golden core (heads held) */
    NULL,
};
static const style_t *const experts_table[] = {
    &experts_ep.base,     /* experts_ep.c: expert parallel, all-to-all */
    &experts_folded.base, /* experts_folded.c: experts folded onto tp */
    &experts_local.base,  /* experts_local.c: the golden run's */
    NULL,
};

static const style_t *const *const tables[STYLE_NFAMILIES] = {
    [STYLE_LINEAR] = linear_table,       [STYLE_NORM] = norm_table,
    [STYLE_VOCAB] = vocab_table,         [STYLE_ATTENTION] = attention_table,
    [STYLE_EXPERTS] = experts_table,
};

static const style_t *registered[STYLE_NFAMILIES][STYLE_MAX_REGISTERED];
static int n_registered[STYLE_NFAMILIES];

int style_register(const style_t *s) {
    const int f = (int)s->family;
    if (f < 0 || f >= STYLE_NFAMILIES || n_registered[f] == STYLE_MAX_REGISTERED) return -1;
    registered[f][n_registered[f]++] = s;
    return 0;
}

const style_t *styles_builtin(style_family_t f, const model_config_t *c, const gpt_local_t *lc) {
    for (const style_t *const *s = tables[f]; *s; s++)
        if ((*s)->applies(c, lc)) return *s;
    return NULL;
}

void styles_choose(gpt_styles_t *out, const model_config_t *c, const gpt_local_t *lc) {
    for (int f = 0; f < STYLE_NFAMILIES; f++) {
        out->style[f] = NULL;
        out->scratch[f] = NULL;
        for (int k = n_registered[f] - 1; k >= 0 && !out->style[f]; k--)
            if (registered[f][k]->applies(c, lc)) out->style[f] = registered[f][k];
        if (!out->style[f]) out->style[f] = styles_builtin((style_family_t)f, c, lc);
    }
}

void styles_layout_scratch(gpt_styles_t *s, const model_config_t *c, const gpt_local_t *lc,
                           size_t n, carver_t *cv) {
    for (int f = 0; f < STYLE_NFAMILIES; f++)
        if (s->style[f] && s->style[f]->layout_scratch)
            s->style[f]->layout_scratch(&s->scratch[f], c, lc, n, cv);
}

const char *styles_name(const gpt_styles_t *s, style_family_t f) {
    return s->style[f] ? s->style[f]->name : "-";
}
