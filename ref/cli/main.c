/* main.c - `parity <command> ...`: dispatch to one file per command. */
#include <stdio.h>
#include <string.h>

#include "commands.h"

static void usage(FILE *f) {
    fputs("usage: parity <command> [options]\n"
          "commands:\n"
          "  train   train a model on one device (the golden run) and dump tensors\n"
          "  check   run the golden run and a parallel layout, compare every tensor bit for bit\n"
          "  diff    compare two .safetensors files tensor by tensor\n"
          "run `parity <command> --help` for the options of one command\n",
          f);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "diff")) return cmd_diff(argc - 1, argv + 1);
    if (!strcmp(cmd, "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(cmd, "check")) return cmd_check(argc - 1, argv + 1);
    fprintf(stderr, "parity: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
