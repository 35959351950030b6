/*
 * device_buffers.h — backend memory for the CUDA-against-CPU tests
 * (test_cuda_linear.c, cuda_modules_tests.h): allocate, upload, and read a
 * tensor back as host floats. Failures end the test (die) or count (CHECK).
 */
#ifndef F8_TESTS_DEVICE_BUFFERS_H
#define F8_TESTS_DEVICE_BUFFERS_H

#include "check.h"

static inline void *balloc(f8_ctx *ctx, size_t bytes)
{
    void *p = NULL;
    if (f8_ctx_alloc(ctx, bytes ? bytes : 1, &p) != F8_OK) die("f8_ctx_alloc", ctx);
    return p;
}

static inline void upload(f8_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    if (bytes) CHECK_OK(ctx, f8_ctx_upload(ctx, dst, src, bytes));
}

static inline size_t tensor_bytes(const f8_tensor *t)
{
    return (size_t)(t->rows * t->cols) * f8_dtype_size(t->dtype);
}

/* A backend tensor's elements as host floats (caller frees). */
static inline float *to_host(f8_ctx *ctx, const f8_tensor *t)
{
    size_t n = (size_t)(t->rows * t->cols), bytes = tensor_bytes(t);
    void *raw = xmalloc(bytes);
    float *out = xmalloc(n * sizeof(float));
    if (bytes) CHECK_OK(ctx, f8_ctx_download(ctx, raw, t->data, bytes));
    for (size_t i = 0; i < n; i++)
        out[i] = t->dtype == F8_DTYPE_BF16 ? f8_bf16_to_float(((uint16_t *)raw)[i]) : ((float *)raw)[i];
    free(raw);
    return out;
}

#endif /* F8_TESTS_DEVICE_BUFFERS_H */
