/* agree.c - under mpirun, every process resolved the same run (coll.h:
 * coll_processes_agree_items): main compared the arguments and PARITY_*
 * variables already, so what is left to differ is what the files they
 * name hold on each host: the model file, the layout file, the text, a
 * checkpoint. Compared before any device starts. */
#include "commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity/coll.h"
#include "parity/fileio.h"

int cli_agree_inputs(const model_config_t *cfg, const pconfig_t *pc, const char *parallel_config,
                     const corpus_t *data, const ckpt_state_t *resume, int failed_here) {
    if (runtime_processes() < 2) {
        /* mpirun -np 1: a run of its own, every device a thread of it */
        if (coll_mpi_launched() && pc->world_size > 1)
            fprintf(stderr, "%s: note: mpirun started 1 process, so the layout's %d devices run as "
                            "its threads (the same bits); for one device a process, mpirun -np %d\n",
                    cli_name, pc->world_size, pc->world_size);
        return failed_here ? -1 : 0;
    }
    perr_t e;
    char layout[1024];
    pconfig_describe(pc, layout, sizeof layout);
    size_t file_len = 0;
    char *model = model_config_json(cfg);
    char *file = parallel_config ? pio_read_text(parallel_config, "--parallel-config", (size_t)1 << 26,
                                                 &file_len, &e)
                                 : NULL;
    const int full = resume && resume->params && resume->adam_m && resume->adam_v;
    const size_t n = full ? resume->total * sizeof(float) : 0;
    const char *read = failed_here ? "could not be read" : "read";
    const coll_agree_item_t items[] = {
        /* first: a process that could not read its inputs (it said why)
         * still takes part, so that the others stop with it, not wait */
        {"whether its inputs could be read (the one that could not said why)",
         "the files the arguments name", read, strlen(read)},
        {"the model config", "--model and its file", model ? model : "", model ? strlen(model) : 0},
        {"the layout", "the layout flags", layout, strlen(layout)},
        {"the layout file", "--parallel-config", file ? file : "", file_len},
        {"the training text", "--data or the default corpus", data->bytes ? (const void *)data->bytes : "", data->bytes ? data->n : 0},
        {"the checkpoint's parameters", "--load", full ? (const void *)resume->params : "", n},
        {"the checkpoint's AdamW state", "--load", full ? (const void *)resume->adam_m : "", n},
        {"the checkpoint's AdamW state", "--load", full ? (const void *)resume->adam_v : "", n},
    };
    int rc = failed_here ? -1 : 0;
    if (!rc && (!model || (parallel_config && !file)))
        rc = perr_set(&e, "out of host memory, or --parallel-config unreadable, comparing the "
                          "processes' inputs");
    /* every process takes part, even one that failed above, so that none waits */
    if (coll_processes_agree_items((int)(sizeof items / sizeof *items), items, &e)) {
        if (runtime_process_rank() == 0) fprintf(stderr, "%s: %s\n", cli_name, e.msg);
        rc = -1;
    } else if (rc) {
        if (!failed_here) fprintf(stderr, "%s: %s\n", cli_name, e.msg);
        if (failed_here) coll_processes_stop_together(); /* each failed alike and said why */
    }
    free(model);
    free(file);
    return rc;
}
