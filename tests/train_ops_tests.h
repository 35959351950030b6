/*
 * train_ops_tests.h — what test_train_ops.c and test_adamw.c share: backend
 * buffers and tensors from host images (allocation or transfer failures end
 * the program), and random host images in FP32 or BF16 with the values they
 * hold.
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

#endif /* F8_TESTS_TRAIN_OPS_TESTS_H */
