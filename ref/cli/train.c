/* train.c - placeholder until the train command lands. */
#include <stdio.h>

#include "commands.h"

int cmd_train(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fputs("parity train: not built yet\n", stderr);
    return 2;
}
