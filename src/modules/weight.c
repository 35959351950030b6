/*
 * modules/weight.c — the weight, its FP8 workspace and its three GEMMs
 * (layouts in weight.h). Every GEMM reads each operand's own scale_inv: the
 * workspace's private one, or the one its cast wrote next to the data.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "numerics.h"
#include "weight.h"

/* W ~ N(0, 0.02²) from the seed (splitmix64 + Box-Muller), uploaded. */
static f8_status init_normal(f8_ctx *ctx, void *dst, f8_dtype dtype, int64_t n, uint64_t seed)
{
    const size_t es = f8_dtype_size(dtype);
    unsigned char *host = (unsigned char *)malloc((size_t)n * es + 1);
    if (!host) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "weight init: out of host memory");
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        double u[2];
        for (int j = 0; j < 2; j++) {
            uint64_t z = (s += 0x9E3779B97F4A7C15ull);
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            z ^= z >> 31;
            u[j] = ((double)(z >> 11) + 0.5) * (1.0 / 9007199254740992.0);
        }
        float v = (float)(0.02 * sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]));
        if (es == 2) ((uint16_t *)host)[i] = f8i_bf16_from_float(v);
        else ((float *)host)[i] = v;
    }
    f8_status st = ctx->be->upload(ctx, dst, host, (size_t)n * es);
    free(host);
    return st;
}

/* dst[0..n) = value in dtype (host round trip: creation time only). */
static f8_status fill_value(f8_ctx *ctx, void *dst, f8_dtype dtype, int64_t n, float value)
{
    const size_t es = f8_dtype_size(dtype);
    unsigned char *host = (unsigned char *)malloc((size_t)n * es + 1);
    if (!host) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "weight init: out of host memory");
    for (int64_t i = 0; i < n; i++) {
        if (es == 2) ((uint16_t *)host)[i] = f8i_bf16_from_float(value);
        else ((float *)host)[i] = value;
    }
    f8_status st = ctx->be->upload(ctx, dst, host, (size_t)n * es);
    free(host);
    return st;
}

f8_status f8i_weight_create(f8_ctx *ctx, f8i_weight *w, int64_t rows, int64_t cols, int bias, f8_dtype dtype,
                            int fp8, int fuse_wgrad, f8_slot slot, int64_t max_tokens, uint64_t seed)
{
    memset(w, 0, sizeof *w);
    w->dtype = dtype;
    w->rows = rows;
    w->cols = cols;
    w->fp8 = fp8;
    w->fuse_wgrad = fuse_wgrad;
    w->slot = slot;
    const size_t es = f8_dtype_size(dtype);
    const int64_t T = max_tokens > 0 ? max_tokens : 1;
    const size_t wb = f8i_align256((size_t)(rows * cols) * es), bb = bias ? f8i_align256((size_t)rows * es) : 0;
    const size_t ob = (!fp8 && bias) ? f8i_align256((size_t)T * es) : 0;
    f8_status st = ctx->be->alloc(ctx, 2 * wb + 2 * bb + ob, &w->block);
    if (st != F8_OK) return st;
    unsigned char *p = (unsigned char *)w->block;
    w->w = p;
    w->dw = p + wb;
    w->b = bb ? p + 2 * wb : NULL;
    w->db = bb ? p + 2 * wb + bb : NULL;
    w->ones = ob ? p + 2 * wb + 2 * bb : NULL;
    st = ctx->be->memset_zero(ctx, w->block, 2 * wb + 2 * bb);
    if (st == F8_OK && w->ones) st = fill_value(ctx, w->ones, dtype, T, 1.0f);
    if (st == F8_OK) st = init_normal(ctx, w->w, dtype, rows * cols, seed);
    if (st == F8_OK && fp8) {
        st = f8_qtensor_create(ctx, f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD), rows, cols, &w->w8);
        if (st == F8_OK) st = f8i_qtensor_reserve_transpose(w->w8);
    }
    return st;
}

void f8i_weight_destroy(f8_ctx *ctx, f8i_weight *w)
{
    f8_qtensor_destroy(w->w8);
    if (w->block) ctx->be->free(ctx, w->block);
    memset(w, 0, sizeof *w);
}

f8_status f8i_weight_cast(f8_ctx *ctx, f8i_weight *w, f8_microbatch mb, int with_transpose)
{
    const float *noop = NULL;
    if (w->w8_filled && ctx->weight_noop) {
        noop = ctx->noop;
        with_transpose = 1; /* keep the cached transpose in step with the data */
    } else if (mb == F8_MICROBATCH_NOT_FIRST && w->w8_filled) {
        return F8_OK;
    }
    f8_tensor src = f8i_weight_view(w, 0);
    f8_status st = f8_qtensor_quantize(w->w8, &src, w->slot, with_transpose, noop);
    if (st == F8_OK) w->w8_filled = 1;
    return st;
}

f8_status f8i_weight_zero_grad(f8_ctx *ctx, f8i_weight *w)
{
    const size_t es = f8_dtype_size(w->dtype);
    f8_status st = ctx->be->memset_zero(ctx, w->dw, (size_t)(w->rows * w->cols) * es);
    if (st == F8_OK && w->db) st = ctx->be->memset_zero(ctx, w->db, (size_t)w->rows * es);
    return st;
}

f8_tensor f8i_weight_view(const f8i_weight *w, int grad)
{
    return f8_tensor_make(grad ? w->dw : w->w, w->dtype, w->rows, w->cols);
}

f8_tensor f8i_bias_view(const f8i_weight *w, int grad) { return f8_tensor_make(grad ? w->db : w->b, w->dtype, 1, w->rows); }

static f8i_gemm_args gemm(int64_t m, int64_t n, int64_t k)
{
    f8i_gemm_args g;
    memset(&g, 0, sizeof g);
    g.m = m;
    g.n = n;
    g.k = k;
    return g;
}

f8_status f8i_weight_fprop(f8_ctx *ctx, const f8i_weight *w, const void *a, f8_dtype a_dtype, const float *a_sinv,
                           int64_t T, void *y, f8_dtype y_dtype)
{
    f8i_gemm_args g = gemm(T, w->rows, w->cols);
    g.a = a;
    g.a_dtype = a_dtype;
    g.a_scale_inv = a_sinv;
    g.b = w->fp8 ? (const void *)w->w8->data : w->w;
    g.b_dtype = w->fp8 ? w->w8->dtype : w->dtype;
    g.b_scale_inv = w->fp8 ? w->w8->scale_inv : NULL;
    g.d = y;
    g.d_dtype = y_dtype;
    g.bias = w->b;
    g.bias_dtype = w->dtype;
    return ctx->be->gemm(ctx, &g);
}

f8_status f8i_weight_dgrad(f8_ctx *ctx, f8i_weight *w, const void *g_in, f8_dtype g_dtype, const float *g_sinv,
                           int64_t T, void *dx, f8_dtype dx_dtype)
{
    f8i_gemm_args g = gemm(T, w->cols, w->rows);
    g.a = g_in;
    g.a_dtype = g_dtype;
    g.a_scale_inv = g_sinv;
    g.d = dx;
    g.d_dtype = dx_dtype;
    if (w->fp8) {
        f8_status st = f8_qtensor_transpose(w->w8, NULL); /* a no-op when the forward cast made it */
        if (st != F8_OK) return st;
        g.b = w->w8->t; /* W8ᵀ [cols, rows] */
        g.b_dtype = w->w8->dtype;
        g.b_scale_inv = w->w8->scale_inv;
        g.split_accum = 1;
    } else {
        g.b = w->w; /* B(k, n) = W stored [rows, cols] */
        g.b_dtype = w->dtype;
        g.b_trans = 1;
    }
    return ctx->be->gemm(ctx, &g);
}

f8_status f8i_weight_wgrad(f8_ctx *ctx, f8i_weight *w, const void *g_in, f8_dtype g_dtype, const float *g_sinv,
                           const void *a, f8_dtype a_dtype, const float *a_sinv, int64_t T, f8_microbatch mb)
{
    f8i_gemm_args g = gemm(w->rows, w->cols, T);
    g.a = g_in;
    g.a_dtype = g_dtype;
    g.a_scale_inv = g_sinv;
    g.b = a;
    g.b_dtype = a_dtype;
    g.b_scale_inv = a_sinv;
    if (w->fp8) {
        g.split_accum = 1; /* gᵀ [rows, T] and aᵀ [cols, T] are K-contiguous */
    } else {
        g.a_trans = 1; /* A(n, t) = g stored [T, rows] */
        g.b_trans = 1; /* B(k, t) = a stored [T, cols] */
    }
    if (w->fuse_wgrad) {
        g.d = w->main_grad;
        g.d_dtype = F8_DTYPE_FP32;
        g.accumulate = mb != F8_MICROBATCH_FIRST; /* spec §4.3 */
    } else {
        g.d = w->dw;
        g.d_dtype = w->dtype;
        g.accumulate = 1;
    }
    return ctx->be->gemm(ctx, &g);
}

f8_status f8i_weight_bgrad(f8_ctx *ctx, f8i_weight *w, const void *g_in, int64_t T)
{
    if (!w->db) return F8_OK;
    f8i_gemm_args g = gemm(1, w->rows, T); /* db[1, rows] += ones[1, T] · g: B(n, t) = g stored [T, rows] */
    g.a = w->ones;
    g.a_dtype = w->dtype;
    g.b = g_in;
    g.b_dtype = w->dtype;
    g.b_trans = 1;
    g.d = w->db;
    g.d_dtype = w->dtype;
    g.accumulate = 1;
    return ctx->be->gemm(ctx, &g);
}

f8_status f8i_check_act(f8_ctx *ctx, const f8_tensor *t, const char *name, int64_t rows, int64_t cols, int must)
{
    f8_status st = f8i_check_tensor(ctx, t, name);
    if (st != F8_OK) return st;
    if (t->dtype != F8_DTYPE_FP32 && t->dtype != F8_DTYPE_BF16)
        return f8i_error(ctx, F8_ERR_DTYPE, "%s must be fp32 or bf16, not %s", name, f8_dtype_name(t->dtype));
    if (must >= 0 && t->dtype != (f8_dtype)must)
        return f8i_error(ctx, F8_ERR_DTYPE, "%s is %s but FP8 is off and the parameters are %s", name,
                         f8_dtype_name(t->dtype), f8_dtype_name((f8_dtype)must));
    if ((rows >= 0 && t->rows != rows) || t->cols != cols)
        return f8i_error(ctx, F8_ERR_SHAPE, "%s is [%lld, %lld], expected [%s%lld, %lld]", name, (long long)t->rows,
                         (long long)t->cols, rows >= 0 ? "" : "T, ", (long long)(rows >= 0 ? rows : 0), (long long)cols);
    return F8_OK;
}
