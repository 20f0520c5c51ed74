/* diff.c - placeholder until the diff command lands. */
#include <stdio.h>

#include "commands.h"

int cmd_diff(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fputs("parity diff: not built yet\n", stderr);
    return 2;
}
