/* model_flags.h - a model config from `parity train`'s model flags.
 *
 * `parity train`, `parity check` and the oracle (oracle.h) read a model
 * the same way: --model names a built-in or a JSON config file (the
 * "config" a dump stores), then Megatron-style overrides (--num-layers,
 * --hidden-size, --lr, ...) apply on top, whatever their order on the
 * command line, and --make-vocab-size-divisible-by after all of them.
 * One table, so a flag means the same thing in the program and in the
 * library. Errors go through perr_t and name the flag.
 */
#ifndef PARITY_MODEL_FLAGS_H
#define PARITY_MODEL_FLAGS_H

#include "parity/error.h"
#include "parity/model.h"

/* Whether flag is a model override: 1 (and *takes_value: whether a
 * value follows it), else 0. */
int model_flag_known(const char *flag, int *takes_value);

/* --model: a built-in name, else a JSON config file whose shape fields
 * start empty (the file must give them). Not validated. */
int model_config_base(const char *model, model_config_t *cfg, perr_t *err);

/* The model: model_config_base(model), then the n overrides
 * flag[k] val[k] (val[k] NULL for a flag without a value) in order,
 * --make-vocab-size-divisible-by last; a global batch the built-in's
 * micro batch does not divide gets one microbatch unless
 * --micro-batch-size was given (*micro_given, may be NULL); then
 * model_config_validate. A flag given twice is the caller's to refuse. */
int model_config_from_flags(const char *model, int n, const char *const *flag,
                            const char *const *val, model_config_t *cfg, int *micro_given,
                            perr_t *err);

#endif
