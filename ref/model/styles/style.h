/* style.h - choosing a replica's styles (gpt.h's style_t, gpt_styles_t).
 *
 * Each family has one table (styles.c): its styles, most specific first,
 * ending with one that always applies (the golden arithmetic). A style is
 * one file under model/styles/ and one line in its family's table; a test
 * adds its own ahead of the built-in ones with style_register, as a test
 * model adds a unit kind with model_set_runs. */
#ifndef PARITY_MODEL_STYLE_H
#define PARITY_MODEL_STYLE_H

#include "model/gpt.h"

/* out->style[f] := the first style of family f that applies to (c, lc),
 * registered ones first; NULL for a family with no table yet. */
void styles_choose(gpt_styles_t *out, const model_config_t *c, const gpt_local_t *lc);
/* The first built-in style of family f that applies to (c, lc), ignoring
 * registered ones: what a registered style that wraps the table's choice
 * calls through (tests/styles/); NULL for a family with no table yet. */
const style_t *styles_builtin(style_family_t f, const model_config_t *c, const gpt_local_t *lc);
/* Every chosen style's private scratch for up to n token rows, carved in
 * family order (measures when cv->base is NULL). */
void styles_layout_scratch(gpt_styles_t *s, const model_config_t *c, const gpt_local_t *lc,
                           size_t n, carver_t *cv);
/* Puts s ahead of its family's built-in styles (at most 8 a family);
 * -1 when full. Before any model is built (a constructor). */
int  style_register(const style_t *s);
/* The chosen style's name for family f ("-" when none). */
const char *styles_name(const gpt_styles_t *s, style_family_t f);

#endif
