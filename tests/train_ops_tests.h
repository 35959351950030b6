/*
 * train_ops_tests.h — what test_train_ops.c and the AdamW tests share: backend
 * buffers and tensors from host images (allocation or transfer failures end
 * the program), random host images in FP32 or BF16 with the values they
 * hold, and optimizer checkpoints through a file.
 */
#ifndef F8_TESTS_TRAIN_OPS_TESTS_H
#define F8_TESTS_TRAIN_OPS_TESTS_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "io/checkpoint.h"

/* ---- helpers ------------------------------------------------------------- */

static void *dev_new(f8_ctx *ctx, size_t bytes)
{
    void *p = NULL;
    if (f8_ctx_alloc(ctx, bytes ? bytes : 1, &p) != F8_OK) die("f8_ctx_alloc", ctx);
    return p;
}

static void put(f8_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    if (f8_ctx_upload(ctx, dst, src, bytes) != F8_OK) die("f8_ctx_upload", ctx);
}

static void get(f8_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    if (f8_ctx_download(ctx, dst, src, bytes) != F8_OK) die("f8_ctx_download", ctx);
}

/* Host image of n random values in dtype (N(0, sd)); vals receives the exact
 * values the image holds. */
static void *host_random(test_rng *r, f8_dtype dt, size_t n, double sd, double *vals)
{
    void *h = xmalloc(n * f8_dtype_size(dt));
    for (size_t i = 0; i < n; i++) {
        float v = (float)(sd * rng_normal(r));
        if (dt == F8_DTYPE_BF16) {
            uint16_t b = f8_bf16_from_float(v);
            ((uint16_t *)h)[i] = b;
            v = f8_bf16_to_float(b);
        } else {
            ((float *)h)[i] = v;
        }
        if (vals) vals[i] = v;
    }
    return h;
}

static double host_get(const void *h, f8_dtype dt, size_t i)
{
    return dt == F8_DTYPE_BF16 ? f8_bf16_to_float(((const uint16_t *)h)[i]) : ((const float *)h)[i];
}

/* A backend tensor holding a host image (zeros if host is NULL). */
static f8_tensor dev_tensor(f8_ctx *ctx, const void *host, f8_dtype dt, int64_t rows, int64_t cols)
{
    size_t bytes = (size_t)(rows * cols) * f8_dtype_size(dt);
    void *d = dev_new(ctx, bytes);
    if (bytes) {
        void *z = host ? NULL : calloc(1, bytes);
        put(ctx, d, host ? host : z, bytes);
        free(z);
    }
    return f8_tensor_make(d, dt, rows, cols);
}

/* Host copy of a tensor's bytes (malloc'd). */
static void *dev_read(f8_ctx *ctx, const f8_tensor *t)
{
    size_t bytes = (size_t)(t->rows * t->cols) * f8_dtype_size(t->dtype);
    void *h = xmalloc(bytes);
    if (bytes) get(ctx, h, t->data, bytes);
    return h;
}

/* ---- optimizer checkpoints (static inline: not every test uses them) ---- */

/* 1 when two checkpoints hold the same entries, byte for byte. */
static inline int same_entries(const f8_checkpoint *a, const f8_checkpoint *b)
{
    if (f8i_checkpoint_count(a) != f8i_checkpoint_count(b)) return 0;
    for (size_t i = 0; i < f8i_checkpoint_count(a); i++) {
        const f8i_ck_entry *x = f8i_checkpoint_entry(a, i), *y = f8i_checkpoint_entry(b, i);
        if (strcmp(x->name, y->name) || x->dtype != y->dtype || x->bytes != y->bytes || memcmp(x->data, y->data, x->bytes))
            return 0;
    }
    return 1;
}

/* Parameters p[0..n) as "p.<i>" and optimizer o under prefix, saved from
 * their ctx to a file (its name from tag) and loaded on ctx `to`; NULL after
 * a failure (counted). */
static inline f8_checkpoint *save_and_load(f8_ctx *from, const f8_tensor *p, int n, f8_adamw *o, const char *prefix,
                                           f8_ctx *to, const char *tag)
{
    f8_checkpoint *ck = NULL, *ld = NULL;
    char name[32], path[160];
    CHECK_OK(from, f8_checkpoint_create(from, &ck));
    for (int i = 0; i < n && ck; i++) {
        snprintf(name, sizeof name, "p.%d", i);
        CHECK_OK(from, f8_checkpoint_add_tensor(ck, name, &p[i]));
    }
    CHECK_OK(from, f8_checkpoint_add_adamw(ck, prefix, o));
    snprintf(path, sizeof path, "/tmp/f8_%s.%ld.safetensors", tag, (long)getpid());
    CHECK_OK(from, f8_checkpoint_save(ck, path));
    CHECK_OK(to, f8_checkpoint_load(to, path, &ld));
    remove(path);
    f8_checkpoint_destroy(ck);
    return ld;
}

/* The parameters "p.<i>" of ld into p[0..n). */
static inline void read_params(f8_ctx *ctx, const f8_checkpoint *ld, f8_tensor *p, int n)
{
    char name[32];
    for (int i = 0; i < n && ld; i++) {
        snprintf(name, sizeof name, "p.%d", i);
        CHECK_OK(ctx, f8_checkpoint_read_tensor(ld, name, &p[i]));
    }
}

#endif /* F8_TESTS_TRAIN_OPS_TESTS_H */
