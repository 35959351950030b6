/*
 * replay_main.c — the replay program: each argument (a file or a directory)
 * through the fuzz target it is linked with, under any C compiler, ASan or a
 * debugger:
 *
 *   cc ... fuzz/fuzz_checkpoint.c fuzz/replay.c fuzz/replay_main.c libf8.a -o replay
 *   ./replay fuzz/corpus crash-1234
 */
#include <stdio.h>

#include "fuzz.h"

int main(int argc, char **argv)
{
    int files = 0, rc = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++)
        if (f8_fuzz_replay(argv[i], &files) != 0) {
            fprintf(stderr, "%s: cannot read %s\n", argv[0], argv[i]);
            rc = 1;
        }
    f8_fuzz_teardown();
    printf("replayed %d inputs\n", files);
    return rc || files == 0;
}
