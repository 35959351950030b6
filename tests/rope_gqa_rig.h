/*
 * rope_gqa_rig.h — what test_rope_gqa.c (CPU against FP64) and
 * test_cuda_rope_gqa.c (CUDA against the CPU) share: a Llama attention
 * shape, host <-> backend buffers of FP32/BF16 values, and one call of the
 * composite the trainer runs (RoPE on qkv in place, GQA attention forward;
 * attention backward, RoPE backward on dqkv in place).
 */
#ifndef F8_TESTS_ROPE_GQA_RIG_H
#define F8_TESTS_ROPE_GQA_RIG_H

#include "check.h"

typedef struct lshape {
    int64_t B, S, nh, G, hd;
} lshape;

static inline int64_t ls_T(lshape s) { return s.B * s.S; }
static inline int64_t ls_C(lshape s) { return s.nh * s.hd; }
static inline int64_t ls_W(lshape s) { return (s.nh + 2 * s.G) * s.hd; } /* qkv row width */

/* v as dt stores it. */
static inline float rig_round(float v, f8_dtype dt) { return dt == F8_DTYPE_BF16 ? f8_bf16_to_float(f8_bf16_from_float(v)) : v; }

/* n normals · amp, rounded to dt. */
static inline float *rig_rand(test_rng *r, size_t n, double amp, f8_dtype dt)
{
    float *v = (float *)xmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = rig_round((float)(amp * rng_normal(r)), dt);
    return v;
}

/* A backend tensor [rows, cols] of dt holding v (NULL: zeros). */
static inline f8_tensor rig_put(f8_ctx *ctx, const float *v, int64_t rows, int64_t cols, f8_dtype dt)
{
    const size_t n = (size_t)(rows * cols), es = f8_dtype_size(dt);
    unsigned char *h = (unsigned char *)calloc(n ? n : 1, es);
    if (!h) die("calloc", ctx);
    for (size_t i = 0; v && i < n; i++) {
        if (dt == F8_DTYPE_BF16) {
            const uint16_t b = f8_bf16_from_float(v[i]);
            memcpy(h + 2 * i, &b, 2);
        } else {
            memcpy(h + 4 * i, &v[i], 4);
        }
    }
    void *p = NULL;
    if (f8_ctx_alloc(ctx, n * es + 16, &p) != F8_OK || f8_ctx_upload(ctx, p, h, n * es) != F8_OK) die("rig_put", ctx);
    free(h);
    return f8_tensor_make(p, dt, rows, cols);
}

/* The values of t as host floats (out: rows·cols). */
static inline void rig_get(f8_ctx *ctx, const f8_tensor *t, float *out)
{
    const size_t n = (size_t)(t->rows * t->cols), es = f8_dtype_size(t->dtype);
    unsigned char *h = (unsigned char *)xmalloc(n * es + 1);
    if (f8_ctx_download(ctx, h, t->data, n * es) != F8_OK) die("rig_get", ctx);
    for (size_t i = 0; i < n; i++) {
        uint16_t b;
        if (t->dtype == F8_DTYPE_BF16)
            memcpy(&b, h + 2 * i, 2), out[i] = f8_bf16_to_float(b);
        else
            memcpy(&out[i], h + 4 * i, 4);
    }
    free(h);
}

/* The composite on a fresh attention (and rope, unless rope_cfg is NULL):
 * y [T, C] = attention(rope(qkv)); with dy, dqkv [T, W] = ropeᵀ(attention
 * backward(dy)). rot (may be NULL) gets rope(qkv). Host floats in and out. */
static inline void rig_run(f8_ctx *ctx, lshape sh, f8_dtype dt, const f8_rope_config *rope_cfg, const float *qkv,
                           const float *dy, float *rot, float *y, float *dqkv)
{
    const int64_t T = ls_T(sh), C = ls_C(sh), W = ls_W(sh);
    f8_attention_config cfg = f8_attention_config_default(sh.nh, sh.hd, sh.B, sh.S);
    cfg.dtype = dt;
    cfg.n_kv_head = sh.G;
    f8_attention *a = NULL;
    f8_attention_saved *sv = NULL;
    f8_rope *rope = NULL;
    CHECK_OK(ctx, f8_attention_create(ctx, &cfg, &a));
    CHECK_OK(ctx, f8_attention_saved_create(a, &sv));
    if (rope_cfg) CHECK_OK(ctx, f8_rope_create(ctx, rope_cfg, &rope));
    f8_tensor tq = rig_put(ctx, qkv, T, W, dt), ty = rig_put(ctx, NULL, T, C, dt);
    f8_tensor tdy = rig_put(ctx, dy, T, C, dt), tg = rig_put(ctx, NULL, T, W, dt);
    if (rope) CHECK_OK(ctx, f8_rope_forward(rope, &tq, sh.S));
    if (rot) rig_get(ctx, &tq, rot);
    CHECK_OK(ctx, f8_attention_forward(a, &tq, sh.B, sh.S, &ty, sv));
    if (y) rig_get(ctx, &ty, y);
    if (dy && dqkv) {
        CHECK_OK(ctx, f8_attention_backward(a, sv, &tdy, &tg));
        if (rope) CHECK_OK(ctx, f8_rope_backward(rope, &tg, sh.S));
        rig_get(ctx, &tg, dqkv);
    }
    f8_ctx_free(ctx, tq.data), f8_ctx_free(ctx, ty.data), f8_ctx_free(ctx, tdy.data), f8_ctx_free(ctx, tg.data);
    f8_rope_destroy(rope);
    f8_attention_saved_destroy(sv);
    f8_attention_destroy(a);
}

#endif /* F8_TESTS_ROPE_GQA_RIG_H */
