/*
 * checkpoint_fixture.h — what test_checkpoint.c, test_checkpoint_faults.c and
 * test_checkpoint_attention.c share: the CPU ctx (g_ctx) and scratch
 * directory (g_dir) with their harness, files as bytes (read, built from
 * JSON, loaded; inline: not every test uses them).
 */
#ifndef F8_TESTS_CHECKPOINT_FIXTURE_H
#define F8_TESTS_CHECKPOINT_FIXTURE_H

#include <unistd.h>

#include "check.h"
#include "io/checkpoint.h"

static f8_ctx *g_ctx;
static char g_dir[64];

static void path_in_dir(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", g_dir, name); }

static inline unsigned char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = (unsigned char *)xmalloc((size_t)n);
    *size = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

/* A file made of an 8-byte length, the given JSON (unpadded) and data. */
static inline unsigned char *file_of(const char *json, const void *data, size_t data_len, size_t *size)
{
    size_t n = strlen(json);
    unsigned char *b = (unsigned char *)xmalloc(8 + n + data_len);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(b + 8, json, n);
    if (data_len) memcpy(b + 8 + n, data, data_len);
    *size = 8 + n + data_len;
    return b;
}

static inline f8_checkpoint *load_json(const char *json, const void *data, size_t data_len)
{
    size_t n;
    unsigned char *b = file_of(json, data, data_len, &n);
    f8_checkpoint *ck = NULL;
    CHECK_OK(g_ctx, f8_checkpoint_load_memory(g_ctx, b, n, &ck));
    free(b);
    return ck;
}

/* Remove the files the tests made (names they know). */
static void cleanup_dir(void)
{
    const char *names[] = {"roundtrip.safetensors", "empty.safetensors", "layout.safetensors", "trunc.safetensors",
                           "old.safetensors"};
    char path[128];
    for (int i = 0; i < 5; i++) {
        path_in_dir(path, sizeof path, names[i]);
        unlink(path);
    }
    if (rmdir(g_dir) != 0) fprintf(stderr, "note: %s not removed\n", g_dir);
}

/* Run the tests on a CPU ctx with a scratch directory ("/tmp/f8_<name>.XXXXXX",
 * removed afterwards); test_finish's exit code. */
static int checkpoint_test_run(const char *name, void (*const tests[])(void), int count)
{
    char why[256] = "";
    g_ctx = test_ctx(F8_BACKEND_CPU, NULL, why);
    if (!g_ctx) {
        fprintf(stderr, "CPU ctx: %s\n", why);
        return 1;
    }
    snprintf(g_dir, sizeof g_dir, "/tmp/f8_%s.XXXXXX", name);
    if (!mkdtemp(g_dir)) die("mkdtemp", NULL);
    for (int i = 0; i < count; i++) tests[i]();
    cleanup_dir();
    f8_ctx_destroy(g_ctx);
    return test_finish(name);
}

#endif /* F8_TESTS_CHECKPOINT_FIXTURE_H */
