/* names.h - the parameter names and layouts backends use (issue 45).
 *
 * parity's names are legacy Megatron-LM's ("layers.0.self_attention.
 * query_key_value.weight", [3C, C], rows per head: q, k, v; MODEL.md,
 * Parameters). Backends name and lay out the same parameters otherwise:
 *
 *   megatron-lm    parity's own names and layouts, on any model (the
 *                  identity); the other three name the dense GPT only
 *                  (an MoE, T5 or LLaVA model is refused, naming it).
 *   megatron-core  Megatron-core's GPTModel with the local layer spec:
 *                  embedding.word_embeddings / position_embeddings,
 *                  decoder.layers.<l>.{input_layernorm, self_attention.
 *                  linear_qkv, self_attention.linear_proj, pre_mlp_layernorm,
 *                  mlp.linear_fc1, mlp.linear_fc2}.{weight,bias},
 *                  decoder.final_layernorm, output_layer.weight (untied
 *                  only). linear_qkv's rows are per query group g: the
 *                  group's np/ng query heads, then its key head, then its
 *                  value head, head_dim rows each
 *                  (SelfAttention.get_query_key_value_tensors); parity's
 *                  GPT is multi-head (ng = np = H), so that is parity's own
 *                  row order (h·3D + w·D + d): no permutation.
 *   hf-gpt2        transformers' GPT2LMHeadModel: transformer.wte / wpe,
 *                  transformer.h.<l>.{ln_1, attn.c_attn, attn.c_proj, ln_2,
 *                  mlp.c_fc, mlp.c_proj}.{weight,bias}, transformer.ln_f,
 *                  lm_head.weight. The four linears are Conv1D: weight
 *                  [in, out] (y = x·W + b). c_attn's 3C output columns are
 *                  q of every head, then k, then v (x.split(C) then the
 *                  heads): column w·C + h·D + d is parity's row h·3D + w·D + d;
 *                  its bias likewise.
 *   nanogpt        nanoGPT's GPT: the same names, nn.Linear layouts
 *                  ([out, in]); c_attn's rows q | k | v as hf-gpt2's columns.
 *
 * The tied LM head: Megatron (both) has no output_layer.weight when the
 * head is the word embedding. hf-gpt2's files leave lm_head.weight out
 * (save_pretrained drops a tied copy); nanoGPT's state_dict holds it (one
 * tensor under two keys), so its export writes it too, and
 * load_state_dict(strict=True) takes the file. Either scheme's
 * lm_head.weight of a tied model is read as an alias of the word
 * embedding (names_to_parity: map.alias), whose values must then be the
 * word embedding's, bit for bit (names_weights_read).
 *
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
                                    q | k | v (which, head, d) instead of parity's
                                    (head, which, d) */
    int alias;                   /* 1: the tied head's name for the word embedding
                                    (lm_head.weight): the same values, not another tensor */
    int ndim;
    int64_t shape[PL_MAX_DIMS];  /* the scheme's shape (an expert weight has 3 axes) */
} names_map_t;

/* The parity parameter name of a scheme's name ("transformer.h.0.attn.
 * c_attn.weight" -> "layers.0.self_attention.query_key_value.weight")
 * and its map; -1 with a message naming the name when the scheme has no
 * such parameter for this model (or names no model of its kind). */
int names_to_parity(const model_config_t *c, names_scheme_t s, const char *name,
                    char *parity, size_t cap, names_map_t *map, perr_t *err);
/* The scheme's name of parity parameter i (of param_table_build's table)
 * and its map; 0, or -1 with a message (an index out of range, a model
 * the scheme cannot name). */
int names_from_parity(const model_config_t *c, names_scheme_t s, int param, char *name,
                      size_t cap, names_map_t *map, perr_t *err);
/* The tied head's key in scheme s when c ties it and the scheme can
 * carry it ("lm_head.weight" for hf-gpt2 and nanogpt), else NULL;
 * *exported (may be NULL): 1 when an export writes it (nanogpt). */
const char *names_tied_head(const model_config_t *c, names_scheme_t s, int *exported);
/* Values of the global tensor from the scheme's layout to parity's, and
 * back (numel of m's shape each; in and out do not overlap). */
void names_values_to_parity(const model_config_t *c, const names_map_t *m, const float *in,
                            float *out);
void names_values_from_parity(const model_config_t *c, const names_map_t *m, const float *in,
                              float *out);
/* The scheme that names all n names, or -1 with a message naming one no
 * scheme knows (or one the fitting scheme does not, when the names mix
 * schemes). hf-gpt2 and nanogpt share every name: names alone that fit
 * both (or megatron-lm and megatron-core, on a list of embeddings only)
 * are refused as ambiguous, naming both; names_detect_shapes decides by
 * the global shapes too (c_attn is [C, 3C] in one, [3C, C] in the other). */
int names_detect(const model_config_t *c, const char *const *names, int n, names_scheme_t *out,
                 perr_t *err);
/* The same, each name's global tensor of ndim[k] axes shape[k] (NULL:
 * names only) also the scheme's shape of it. */
int names_detect_shapes(const model_config_t *c, const char *const *names, const int *ndim,
                        const int64_t *const *shape, int n, names_scheme_t *out, perr_t *err);

/* ---- weights files (names_weights.c) ------------------------------------ */

/* `parity train --export-weights DIR --names S`: DIR/model.safetensors
 * (DIR created if missing) holding params (the golden table's contiguous
 * vector: param_table_build's offsets) in scheme s's names and layouts,
 * F32, in table order (nanogpt's tied lm_head.weight after the word
 * embedding), metadata "parity.names" (the scheme), "config" (the model
 * config JSON, as a dump stores it) and "format" "parity-weights-1".
 * Written all or nothing (fileio.h). */
#define NAMES_WEIGHTS_FORMAT "parity-weights-1"
int names_weights_export(const model_config_t *c, names_scheme_t s, const float *params,
                         const char *dir, perr_t *err);
/* The file path an export to dir writes (malloc'd; NULL out of memory). */
char *names_weights_path(const char *dir);
/* A weights file (safetensors: an export, a Hugging Face, nanoGPT or
 * Megatron-core state dict saved as safetensors) into params ([total] of
 * c's golden table), every parameter from it. The scheme: *s when
 * declared (declared = 1: --names), else the file's "parity.names"
 * metadata, else names_detect_shapes; *s gets the one used. Refused,
 * naming the file and the tensor: a dtype other than F32, a name the
 * scheme does not know, a shape other than the scheme's, a parameter
 * named twice or missing, a tied alias whose values differ from the word
 * embedding's, a declared scheme other than the file's parity.names.
 * The file's own "config" metadata is information: the model is c, and
 * the shapes must be c's. */
int names_weights_read(const model_config_t *c, const char *path, int declared,
                       names_scheme_t *s, float *params, perr_t *err);

#endif
