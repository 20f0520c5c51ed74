/* modes.h - the modes `parity modes` composes, one table (modes_table.c),
 * and how two or more of them become one layout's flags (modes.c).
 *
 * A mode is the flags that turn it on over a base model. Modes of one
 * family are alternatives (two pipeline schedules, two ZeRO stages), not
 * compositions: `parity modes` pairs modes of different families only.
 * The verdict on a composition is never written down here: modes.c runs
 * the program's own `parity check ... --print-layout` on the merged
 * flags, so the matrix is what the runs accept, and cannot drift. */
#ifndef PARITY_CLI_MODES_H
#define PARITY_CLI_MODES_H

typedef struct {
    const char *name;   /* "zero3", "zb-v", "bf16", ... */
    const char *family; /* alternatives share one: "dp", "pp", "precision", ... */
    const char *model;  /* NULL: the GPT base (modes_base); else the model flags that replace it */
    const char *flags;  /* space-separated, over the base: "--data-parallel-size 2 --zero-stage 3" */
    const char *what;   /* one line for the listing */
} modes_entry_t;

/* The table, NULL-name terminated, and its length. */
extern const modes_entry_t modes_table[];
int modes_count(void);

/* The base model's flags: the GPT every GPT mode runs on, the smallest
 * most modes admit (gpt-micro with 4 heads: Ulysses over cp 2 beside tp
 * 2; its 4 token tiles: cp 2's zigzag). A mode that needs more says so
 * in its flags (a pipeline's 4 layers and 8 sequences, 3-D's 64), and
 * the merge keeps the larger. large: `make check-compose`'s size. */
const char *modes_base(int large);

/* Extra flags a mode needs only beside another: a pipeline schedule with
 * an encoder-decoder gives the encoder stages of its own (Megatron's
 * rule: the encoder and decoder never share a pipeline rank), two of
 * them over 4 layers (interleaving's rings need 2 stages, the V's chunks
 * a unit each). */
const char *modes_extra(const modes_entry_t *with, const modes_entry_t *const *all, int n);

#define MODES_MAX_ARGS 96
#define MODES_MAX_WAYS 4

/* The flags of modes all[0..n) merged over their base into argv (at most
 * MODES_MAX_ARGS words, pointers into buf, cap bytes). A flag two modes
 * both give appears once: the larger value for numbers (dp 2 and ep's dp
 * 2; a pipeline's 4 microbatches over accumulation's 2), the same value
 * otherwise. Returns argc, or -1 when two modes give a flag two different
 * words (then they are alternatives) or the space runs out. */
int modes_merge(const modes_entry_t *const *all, int n, int large, char *buf, int cap,
                char **argv);

#endif
