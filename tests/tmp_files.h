/*
 * tmp_files.h — a test program's temporary files: a fresh directory in /tmp,
 * paths in it (remembered, removed at the end with the directory), and
 * whole-file writes and reads that die on failure.
 */
#ifndef F8_TESTS_TMP_FILES_H
#define F8_TESTS_TMP_FILES_H

#include <unistd.h>

#include "check.h"

static char tmp_dir[64];
static char tmp_made[64][160]; /* files to remove at the end */
static int tmp_nmade;

/* Make /tmp/<prefix>_XXXXXX; dies when it cannot. */
static inline void tmp_dir_create(const char *prefix)
{
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/%s_XXXXXX", prefix);
    if (!mkdtemp(tmp_dir)) die("mkdtemp", NULL);
}

/* tmp_dir/name, remembered for tmp_dir_remove. */
static inline const char *tmp_path(const char *name)
{
    if (tmp_nmade == 64) die("too many temporary files", NULL);
    snprintf(tmp_made[tmp_nmade], sizeof tmp_made[0], "%s/%s", tmp_dir, name);
    return tmp_made[tmp_nmade++];
}

/* Remove every tmp_path file, then the directory. */
static inline void tmp_dir_remove(void)
{
    for (int i = 0; i < tmp_nmade; i++) unlink(tmp_made[i]);
    rmdir(tmp_dir);
}

static inline void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) die("cannot write a temporary file", NULL);
}

/* A whole file, NUL-terminated (malloc'd; *n its length when n is not NULL), or NULL when it cannot be opened. */
static inline char *read_text(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = (char *)xmalloc((size_t)len + 1);
    size_t got = fread(s, 1, (size_t)len, f);
    fclose(f);
    s[got] = 0;
    if (n) *n = got;
    return s;
}

#endif /* F8_TESTS_TMP_FILES_H */
