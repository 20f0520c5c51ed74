/* names.h - the parameter names and layouts backends use (issue 45).
 *
 * parity's names are legacy Megatron-LM's ("layers.0.self_attention.
 * query_key_value.weight", [3C, C], rows per head: q, k, v). Backends
 * name and lay out the same parameters otherwise:
 *   megatron-lm    parity's own names and layouts;
 *   megatron-core  decoder.layers.<l>.self_attention.linear_qkv (its qkv
 *                  interleave per query group), linear_proj, mlp.linear_fc1,
 *                  linear_fc2, pre_mlp_layernorm, decoder.final_layernorm;
 *   hf-gpt2        transformer.wte/wpe, transformer.h.<l>.ln_1, attn.c_attn
 *                  (Conv1D: [in, out]; columns q of all heads, then k, then v),
 *                  attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj, transformer.ln_f;
 *   nanogpt        the same names, nn.Linear layouts ([out, in]).
 * A map turns a name of a scheme into parity's and moves a global
 * tensor's values between the layouts (both directions, exact: only
 * transposes and row permutations).
 */
#ifndef PARITY_NAMES_H
#define PARITY_NAMES_H

#include <stddef.h>
#include <stdint.h>

#include "parity/error.h"
#include "parity/model.h"

typedef enum {
    NAMES_MEGATRON_LM = 0,
    NAMES_MEGATRON_CORE,
    NAMES_HF_GPT2,
    NAMES_NANOGPT,
    NAMES_COUNT
} names_scheme_t;

/* "megatron-lm" ... ; names_scheme_parse refuses others, naming the choices. */
const char *names_scheme_name(names_scheme_t s);
int names_scheme_parse(const char *s, names_scheme_t *out, perr_t *err);

/* How one parameter's scheme layout maps to parity's. */
typedef struct {
    int param;                   /* index in the model's parameter table */
    int transpose;               /* the scheme holds it [in, out] (Conv1D) */
    int qkv;                     /* a fused qkv whose rows (or columns) the scheme orders
                                    otherwise */
    int ndim;
    int64_t shape[2];            /* the scheme's shape */
} names_map_t;

/* The parity parameter name of a scheme's name ("transformer.h.0.attn.
 * c_attn.weight" -> "layers.0.self_attention.query_key_value.weight")
 * and its map; -1 with a message naming the name when the scheme has no
 * such parameter for this model. */
int names_to_parity(const model_config_t *c, names_scheme_t s, const char *name,
                    char *parity, size_t cap, names_map_t *map, perr_t *err);
/* The scheme's name of parity parameter i; 0 or -1 (a parameter the scheme
 * cannot name, e.g. an untied head in nanogpt is "lm_head.weight"). */
int names_from_parity(const model_config_t *c, names_scheme_t s, int param, char *name,
                      size_t cap, names_map_t *map, perr_t *err);
/* Values of the global tensor from the scheme's layout to parity's, and back. */
void names_values_to_parity(const model_config_t *c, const names_map_t *m, const float *in,
                            float *out);
void names_values_from_parity(const model_config_t *c, const names_map_t *m, const float *in,
                              float *out);
/* The scheme that names all n names, or -1 with a message naming one no
 * scheme knows. */
int names_detect(const model_config_t *c, const char *const *names, int n, names_scheme_t *out,
                 perr_t *err);

#endif
