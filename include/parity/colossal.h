/* colossal.h - Colossal-AI's `parallel = dict(...)` config file, read into a layout.
 *
 * Colossal-AI runs its config file as Python; parity never does. It reads
 * the literal subset Colossal-AI's docs use (ref/config/colossal.c says
 * exactly which) and refuses anything else with the line, so a file is
 * never read approximately:
 *
 *   from colossalai.amp import AMP_TYPE        # import lines are skipped
 *   BATCH_SIZE = 128                           # other names: parsed, ignored
 *   TP = 4
 *   parallel = dict(
 *       pipeline=2,                            # or dict(size=2)
 *       tensor=dict(size=TP, mode='1d'),       # a name assigned above may be used
 *   )
 *
 * pipeline gives pc->pp, tensor (mode '1d', Megatron 1-D) pc->tp; modes
 * '2d', '2.5d', '3d' are checked and then refused (not implemented yet).
 * A `data=N` key (Colossal-AI ignores it) becomes pc->dp, so that
 * pconfig_validate checks it against the world size. */
#ifndef PARITY_COLOSSAL_H
#define PARITY_COLOSSAL_H

#include <stddef.h>

#include "parity/error.h"
#include "parity/pconfig.h"

/* Reads `text` (len bytes; `path` only for messages) and sets pc->pp and pc->tp from the
 * file's `parallel` assignment. 0, or -1 with err naming the key (e.g. "parallel.tensor.mode")
 * and what was expected, and the line number. pc is unchanged on failure. */
int colossal_parse(const char *text, size_t len, const char *path, pconfig_t *pc, perr_t *err);

#endif
