/*
 * replay_main.c — run the fuzz target over files without libFuzzer, with any
 * C compiler: each argument is a file or a directory (its regular files, not
 * recursive). Used to replay a corpus or a crash artifact under gcc, ASan or
 * a debugger, and (with F8_FUZZ_REPLAY_NO_MAIN) by tests/test_fuzz_replay.c.
 *
 *   cc ... fuzz/fuzz_checkpoint.c fuzz/replay_main.c libf8.a -o replay
 *   ./replay fuzz/corpus crash-1234
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int f8_fuzz_replay(const char *path, int *files);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 4096, n = 0, k;
    unsigned char *b = (unsigned char *)malloc(cap);
    while (b && (k = fread(b + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) {
            unsigned char *g = (unsigned char *)realloc(b, cap * 2);
            if (!g) free(b);
            b = g;
            cap *= 2;
        }
    }
    int err = ferror(f) || !b;
    fclose(f);
    if (!err) {
        /* An exact-size copy, so a sanitizer sees any read past the input. */
        unsigned char *exact = (unsigned char *)malloc(n ? n : 1);
        if (exact) {
            memcpy(exact, b, n);
            LLVMFuzzerTestOneInput(exact, n);
            free(exact);
        } else
            err = 1;
    }
    free(b);
    return err ? -1 : 0;
}

/* Replay path (a file, or every regular file of a directory); adds the
 * number of files run to *files. Returns 0, or -1 if something could not be
 * read. */
int f8_fuzz_replay(const char *path, int *files)
{
    struct stat sb;
    if (stat(path, &sb) != 0) return -1;
    if (!S_ISDIR(sb.st_mode)) {
        if (replay_file(path) != 0) return -1;
        (*files)++;
        return 0;
    }
    DIR *d = opendir(path);
    if (!d) return -1;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char full[4096];
        if (de->d_name[0] == '.') continue;
        snprintf(full, sizeof full, "%s/%s", path, de->d_name);
        if (stat(full, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (replay_file(full) != 0) rc = -1;
        else (*files)++;
    }
    closedir(d);
    return rc;
}

#ifndef F8_FUZZ_REPLAY_NO_MAIN
void f8_fuzz_teardown(void);

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
#endif
