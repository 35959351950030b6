/*
 * device_buffers.h — backend memory for the CUDA-against-CPU tests
 * (test_cuda_linear.c, cuda_modules_tests.h) and the attention tests
 * (test_attention.c, test_cuda_attention.c): allocate, upload, and read a
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

/* v as dt holds it: BF16 rounds, FP32 is v. */
static inline float round_dt(float v, f8_dtype dt)
{
    return dt == F8_DTYPE_BF16 ? f8_bf16_to_float(f8_bf16_from_float(v)) : v;
}

/* n random normals · amp, rounded to dt (caller frees). */
static inline float *rand_vec(test_rng *r, size_t n, double amp, f8_dtype dt)
{
    float *v = (float *)xmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = round_dt((float)(amp * rng_normal(r)), dt);
    return v;
}

/* Host floats as n elements of dt (FP32 or BF16) at h (bytes). */
static inline void to_bytes(uint8_t *h, const float *v, size_t n, f8_dtype dt)
{
    for (size_t i = 0; i < n; i++) {
        if (dt == F8_DTYPE_BF16) {
            uint16_t b = f8_bf16_from_float(v[i]);
            memcpy(h + 2 * i, &b, 2);
        } else {
            memcpy(h + 4 * i, &v[i], 4);
        }
    }
}

/* Backend buffer of n elements of dt from host floats (NULL: 0x5A bytes),
 * starting `skew` elements into its allocation (a misaligned view). */
static inline void *dev_put_at(f8_ctx *ctx, const float *v, size_t n, f8_dtype dt, size_t skew, void **alloc)
{
    const size_t es = f8_dtype_size(dt);
    uint8_t *h = (uint8_t *)xmalloc(n * es + 1);
    if (!v) memset(h, 0x5A, n * es);
    if (v) to_bytes(h, v, n, dt);
    void *p = NULL;
    if (f8_ctx_alloc(ctx, (n + skew) * es, &p) != F8_OK) die("f8_ctx_alloc", ctx);
    if (f8_ctx_upload(ctx, (uint8_t *)p + skew * es, h, n * es) != F8_OK) die("f8_ctx_upload", ctx);
    free(h);
    *alloc = p;
    return (uint8_t *)p + skew * es;
}

static inline void *dev_put(f8_ctx *ctx, const float *v, size_t n, f8_dtype dt)
{
    void *alloc;
    return dev_put_at(ctx, v, n, dt, 0, &alloc);
}

/* n elements of dt (FP32 or BF16) at backend p as host floats into out. */
static inline void dev_get(f8_ctx *ctx, const void *p, size_t n, f8_dtype dt, float *out)
{
    const size_t es = f8_dtype_size(dt);
    uint8_t *h = (uint8_t *)xmalloc(n * es);
    CHECK_OK(ctx, f8_ctx_download(ctx, h, p, n * es));
    for (size_t i = 0; i < n; i++) {
        if (dt == F8_DTYPE_BF16) {
            uint16_t b;
            memcpy(&b, h + 2 * i, 2);
            out[i] = f8_bf16_to_float(b);
        } else {
            memcpy(&out[i], h + 4 * i, 4);
        }
    }
    free(h);
}

#endif /* F8_TESTS_DEVICE_BUFFERS_H */
