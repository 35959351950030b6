/*
 * replay.c — f8_fuzz_replay (fuzz.h): a fuzz target over files without
 * libFuzzer, with any C compiler. Linked by the replay program
 * (replay_main.c) and by the tests that replay the committed corpora.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

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

