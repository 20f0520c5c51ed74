/* main.c - `parity <command> ...`: dispatch to one file per command. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "parity/coll.h"
#include "parity/fileio.h"
#include "parity/runtime.h"

const char *cli_name = "parity";

static void usage(FILE *f) {
    fputs("usage: parity <command> [options]\n"
          "commands:\n"
          "  train   train a model on one device (the golden run) and dump tensors\n"
          "  check   run the golden run and a parallel layout, compare every tensor bit for bit\n"
          "  diff    compare two .safetensors files tensor by tensor\n"
          "  svg     draw a pipeline schedule, the rank grid or a collective as an SVG picture\n"
          "  plan    list the layouts that fit N devices of a given memory, cheapest first\n"
          "  judge   judge a backend's rank files against the golden run (ref/judge/RANKFILES.md)\n"
          "  modes   every parallel mode, and every pair of them: supported, or refused and why\n"
          "run `parity <command> --help` for the options of one command\n"
          "every layout gives the golden run's bits by invariants I1-I5: the contract is\n"
          "ref/DESIGN.md; how the code meets it, CONTRIBUTING.md\n",
          f);
}

/* What was printed must have reached stdout: a full disk or a closed
 * pipe is an error (exit 2), never a silent success. Then the run's
 * outputs, one transaction (fileio.h): renamed over their targets only
 * when everything succeeded, stdout included; `check` also keeps them
 * when it exits 1 (it ran, and the layout's dump is what one wants to
 * look at). Any other failure removes them all. */
static int finish(const char *cmd, int rc) {
    perr_t e;
    const int out_bad = pio_check_stdout(&e) != 0;
    if (out_bad) {
        fprintf(stderr, "parity %s: %s\n", cmd, e.msg);
        rc = rc ? rc : 2;
    }
    if (!out_bad && (rc == 0 || (rc == 1 && (!strcmp(cmd, "check") || !strcmp(cmd, "judge"))))) {
        if (pio_txn_commit(&e)) {
            fprintf(stderr, "parity %s: %s\n", cmd, e.msg);
            rc = 2;
        }
    } else {
        pio_txn_abort();
    }
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    /* A file-size limit (ulimit -f) must fail a write with EFBIG, which
     * the writers report and clean up after, not kill the process and
     * leave a temporary file behind. */
    signal(SIGXFSZ, SIG_IGN);
    /* INT, TERM, HUP: remove our temporary files, then die of the signal */
    pio_cleanup_on_signals();
    pio_txn_begin();
    const char *cmd = argv[1];
    /* under mpirun: this process runs one device of `parity check` */
    perr_t e;
    if (coll_mpi_init(&argc, &argv, &e)) {
        fprintf(stderr, "parity: %s\n", e.msg);
        return 2;
    }
    if (runtime_processes() > 1 && strcmp(cmd, "check")) {
        fprintf(stderr, "parity %s: under mpirun (%d processes) only `parity check` runs; start "
                        "other commands without mpirun\n", cmd, runtime_processes());
        return 2;
    }
    /* every process was given the same arguments and PARITY_* variables,
     * or none starts (each names the same difference, exit 2) */
    if (coll_processes_agree_args(argc, argv, &e)) {
        if (runtime_process_rank() == 0) fprintf(stderr, "parity %s: %s\n", cmd, e.msg);
        coll_mpi_finalize();
        return 2;
    }
    if (runtime_process_rank() > 0 && !freopen("/dev/null", "w", stdout)) return 2; /* process 0 reports */
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    int rc;
    if (!strcmp(cmd, "diff")) cli_name = "parity diff";
    else if (!strcmp(cmd, "train")) cli_name = "parity train";
    else if (!strcmp(cmd, "check")) cli_name = "parity check";
    else if (!strcmp(cmd, "plan")) cli_name = "parity plan";
    else if (!strcmp(cmd, "judge")) cli_name = "parity judge";
    if (!strcmp(cmd, "diff")) rc = cmd_diff(argc - 1, argv + 1);
    else if (!strcmp(cmd, "train")) rc = cmd_train(argc - 1, argv + 1);
    else if (!strcmp(cmd, "check")) rc = cmd_check(argc - 1, argv + 1);
    else if (!strcmp(cmd, "svg")) rc = cmd_svg(argc - 1, argv + 1);
    else if (!strcmp(cmd, "plan")) rc = cmd_plan(argc - 1, argv + 1);
    else if (!strcmp(cmd, "judge")) rc = cmd_judge(argc - 1, argv + 1);
    else if (!strcmp(cmd, "modes")) rc = cmd_modes(argc - 1, argv + 1);
    else {
        fprintf(stderr, "parity: unknown command '%s'\n", cmd);
        usage(stderr);
        return 2;
    }
    rc = finish(cmd, rc);
    /* across processes, a normal end (0, or a check's verdict 1) is every
     * process's, and so is a refusal they agreed on (coll.h); anything
     * else stops them all (coll_mpi_init's exit hook) */
    if (rc <= 1 || coll_processes_stopped_together()) coll_mpi_finalize();
    return rc;
}
