/*
 * qtensor.c — f8_qtensor, TE's Float8Tensor: FP8 data with a private
 * scale_inv and a lazily built, cached transpose.
 *
 * Design note: the scale_inv lives in the same allocation as the data and is
 * written only by the cast that writes the data (backend cast op, same
 * kernel), so a tensor's bytes and its dequantization factor can never come
 * from different scales: the bug TE's workspace refactor fixed is impossible
 * here by construction. The transpose cache is tracked on the host: any write
 * to the data invalidates it unless the same pass wrote the transpose too.
 */
#include <stdlib.h>
#include <string.h>

#include "core/qtensor.h"
#include "core/ops.h"
#include "core/quantizer.h"


/* The public per-tensor calls do not apply to a block- or row-scaled
 * weight workspace (its scales are per 128x128 block or per row;
 * module-internal so far). */
static f8_status block_refuse(const f8_qtensor *q, const char *fn)
{
    if (q->mode == F8I_SCALING_ROW)
        return f8i_error(q->ctx, F8_ERR_UNSUPPORTED, "%s: the tensor is row-wise scaled (a weight workspace under "
                                                     "F8_RECIPE_ROWWISE: one scale per row, used by the modules only "
                                                     "so far)", fn);
    return f8i_error(q->ctx, F8_ERR_UNSUPPORTED, "%s: the tensor is block scaled (a weight workspace under "
                                                 "F8_RECIPE_BLOCK: one scale per 128x128 block, used by the modules "
                                                 "only so far)", fn);
}

/* The cast of src into q's codes (and its transpose when with_t); the
 * scaling is the caller's. */
static f8i_cast_args cast_into(const f8_qtensor *q, const f8_tensor *src, int with_t, const float *noop)
{
    f8i_cast_args a;
    memset(&a, 0, sizeof a);
    a.src = src->data;
    a.src_dtype = src->dtype;
    a.rows = q->rows;
    a.cols = q->cols;
    a.out_dtype = q->dtype;
    a.out = q->data;
    a.out_t = with_t ? q->t : NULL;
    a.noop = noop;
    return a;
}

f8_status f8_qtensor_create(f8_ctx *ctx, f8_dtype dtype, int64_t rows, int64_t cols, f8_qtensor **out)
{
    return f8i_qtensor_create(ctx, dtype, rows, cols, NULL, F8_MEM_OTHER, F8_MEM_OTHER, out);
}

f8_status f8i_qtensor_create(f8_ctx *ctx, f8_dtype dtype, int64_t rows, int64_t cols, f8_memory_report *acct,
                             f8_mem_category cat_data, f8_mem_category cat_t, f8_qtensor **out)
{
    if (!ctx) return F8_ERR_INVALID_ARGUMENT;
    if (!out) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_qtensor_create: q (the output) is NULL");
    *out = NULL;
    if (!f8i_dtype_is_fp8(dtype))
        return f8i_error(ctx, F8_ERR_DTYPE, "f8_qtensor_create: dtype %s is not e4m3 or e5m2", f8_dtype_name(dtype));
    size_t bytes; /* one byte per element */
    if (!f8i_shape_bytes(rows, cols, 1, &bytes))
        return f8i_error(ctx, F8_ERR_SHAPE, "f8_qtensor_create: shape [%lld, %lld] is negative or over 2^62 elements",
                         (long long)rows, (long long)cols);
    f8_qtensor *q = (f8_qtensor *)calloc(1, sizeof *q);
    if (!q) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "f8_qtensor_create: out of host memory");
    q->ctx = ctx;
    q->dtype = dtype;
    q->rows = rows;
    q->cols = cols;
    q->acct = acct;
    q->cat_data = cat_data;
    q->cat_t = cat_t;
    f8_status st = f8i_alloc(ctx, cat_data, acct, 256 + f8i_align256(bytes), &q->block);
    if (st == F8_OK) {
        q->scale_inv = (float *)q->block;
        q->data = (uint8_t *)q->block + 256;
        st = f8i_op_fill_f32(ctx, q->scale_inv, 1.0f, 1);
    }
    if (st == F8_OK) st = f8i_op_memset_zero(ctx, q->data, bytes);
    if (st != F8_OK) {
        f8_qtensor_destroy(q);
        return st;
    }
    *out = q;
    return F8_OK;
}

void f8_qtensor_destroy(f8_qtensor *q)
{
    if (!q) return;
    f8i_free(q->ctx, q->block);
    f8i_free(q->ctx, q->t);
    f8i_free(q->ctx, q->bsinv);
    free(q);
}

f8_status f8i_qtensor_reserve_transpose(f8_qtensor *q)
{
    if (q->t) return F8_OK;
    /* at least 1 byte: an empty tensor's transpose still counts as allocated */
    size_t bytes = (size_t)(q->rows * q->cols);
    return f8i_alloc(q->ctx, q->cat_t, q->acct, bytes ? bytes : 1, (void **)&q->t);
}

f8_status f8i_qtensor_reserve_scales(f8_qtensor *q, f8i_scaling_mode mode)
{
    if (mode == F8I_SCALING_TENSOR) return F8_OK; /* the scalar is there; the transpose comes on first need */
    f8_status st = f8i_qtensor_reserve_transpose(q);
    if (st != F8_OK || q->mode != F8I_SCALING_TENSOR || mode == F8I_SCALING_TENSOR) return st;
    const int64_t g = f8i_mode_scales(mode, q->rows, q->cols), gt = f8i_mode_scales(mode, q->cols, q->rows);
    /* the row-wise vector of a 256-byte aligned allocation: gt starts 16-byte aligned (cuBLASLt's rule) */
    const int64_t off = (g + 3) / 4 * 4;
    F8I_TRY(f8i_alloc(q->ctx, q->cat_data, q->acct, (size_t)(off + gt + 1) * sizeof(float), (void **)&q->bsinv));
    q->bsinv_t = q->bsinv + off;
    q->mode = mode;
    return f8i_op_fill_f32(q->ctx, q->bsinv, 1.0f, off + gt);
}

/* t, the high-precision side of a quantize or dequantize of q: FP32 or BF16
 * and q's shape. what names it in errors ("f8_qtensor_quantize: src"). */
static f8_status check_hp_side(const f8_qtensor *q, const f8_tensor *t, const char *what)
{
    F8I_TRY(f8i_check_tensor(q->ctx, t, what));
    if (!f8i_dtype_is_hp(t->dtype))
        return f8i_error(q->ctx, F8_ERR_DTYPE, "%s must be fp32 or bf16, not %s", what, f8_dtype_name(t->dtype));
    if (t->rows != q->rows || t->cols != q->cols)
        return f8i_error(q->ctx, F8_ERR_SHAPE, "%s [%lld, %lld] does not match the tensor [%lld, %lld]", what,
                         (long long)t->rows, (long long)t->cols, (long long)q->rows, (long long)q->cols);
    return F8_OK;
}

f8_status f8_qtensor_quantize(f8_qtensor *q, const f8_tensor *src, f8_slot slot, int with_transpose,
                              const float *noop_flag)
{
    if (!q) return F8_ERR_INVALID_ARGUMENT;
    if (q->mode != F8I_SCALING_TENSOR) return block_refuse(q, "f8_qtensor_quantize");
    f8_ctx *ctx = q->ctx;
    F8I_TRY(check_hp_side(q, src, "f8_qtensor_quantize: src"));
    if (!f8i_slot_valid(ctx, slot))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_qtensor_quantize: slot (%d, %d) is not registered",
                         (int)slot.direction, (int)slot.index);
    if (with_transpose && !q->t) {
        F8I_TRY(f8i_qtensor_reserve_transpose(q));
        noop_flag = NULL; /* a fresh buffer is always filled */
    }
    f8i_cast_args a = cast_into(q, src, with_transpose, noop_flag);
    a.scale = f8i_slot_scale(ctx, slot);
    a.scale_inv = q->scale_inv;
    a.stats = f8i_slot_stats(ctx, slot);
    F8I_TRY(f8i_slot_prepare(ctx, slot, q->dtype, src->data, src->dtype, q->rows * q->cols, noop_flag, 1, &a.amax));
    F8I_TRY(f8i_op_cast(ctx, &a));
    q->t_valid = with_transpose ? 1 : 0;
    return F8_OK;
}

f8_status f8i_qtensor_cast(f8_qtensor *q, const f8_tensor *src, f8_slot slot, int with_transpose, const float *noop)
{
    if (q->mode == F8I_SCALING_TENSOR) return f8_qtensor_quantize(q, src, slot, with_transpose, noop);
    f8i_cast_args c = cast_into(q, src, 1, noop); /* both orientations, each from src */
    c.scale_inv = q->bsinv;
    c.scale_inv_t = q->bsinv_t;
    F8I_TRY(f8i_quantizer_cast_scaling(q->ctx, q->mode, slot, &c));
    F8I_TRY(f8i_op_cast(q->ctx, &c));
    q->t_valid = 1;
    return F8_OK;
}

f8_status f8i_qtensor_colwise(f8_qtensor *q)
{
    if (q->mode != F8I_SCALING_TENSOR) return F8_OK; /* the cast wrote it */
    return f8_qtensor_transpose(q, NULL);
}

f8_status f8_qtensor_transpose(f8_qtensor *q, const float *noop_flag)
{
    if (!q) return F8_ERR_INVALID_ARGUMENT;
    if (q->mode != F8I_SCALING_TENSOR) return block_refuse(q, "f8_qtensor_transpose");
    if (q->t_valid && !noop_flag) return F8_OK;
    if (!q->t) {
        F8I_TRY(f8i_qtensor_reserve_transpose(q));
        noop_flag = NULL;
    }
    f8_status st = f8i_op_transpose_u8(q->ctx, q->data, q->t, q->rows, q->cols, noop_flag);
    if (st == F8_OK) q->t_valid = 1;
    return st;
}

f8_status f8_qtensor_transpose_into(const f8_qtensor *q, f8_tensor *dst)
{
    if (!q) return F8_ERR_INVALID_ARGUMENT;
    if (q->mode != F8I_SCALING_TENSOR) return block_refuse(q, "f8_qtensor_transpose_into");
    f8_ctx *ctx = q->ctx;
    if (!dst) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_qtensor_transpose_into: dst is NULL");
    if (dst->dtype != q->dtype)
        return f8i_error(ctx, F8_ERR_DTYPE, "f8_qtensor_transpose_into: dst is %s, the tensor is %s",
                         f8_dtype_name(dst->dtype), f8_dtype_name(q->dtype));
    if (dst->rows != q->cols || dst->cols != q->rows)
        return f8i_error(ctx, F8_ERR_SHAPE, "f8_qtensor_transpose_into: dst [%lld, %lld] is not [%lld, %lld]",
                         (long long)dst->rows, (long long)dst->cols, (long long)q->cols, (long long)q->rows);
    if (q->rows * q->cols > 0 && !dst->data)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "f8_qtensor_transpose_into: dst->data is NULL");
    f8_status st = f8i_op_transpose_u8(ctx, q->data, (uint8_t *)dst->data, q->rows, q->cols, NULL);
    if (st == F8_OK && dst->scale_inv) st = f8i_op_copy(ctx, dst->scale_inv, q->scale_inv, sizeof(float));
    return st;
}

f8_status f8_qtensor_dequantize(const f8_qtensor *q, f8_tensor *dst)
{
    if (!q) return F8_ERR_INVALID_ARGUMENT;
    if (q->mode != F8I_SCALING_TENSOR) return block_refuse(q, "f8_qtensor_dequantize");
    f8_ctx *ctx = q->ctx;
    F8I_TRY(check_hp_side(q, dst, "f8_qtensor_dequantize: dst"));
    if (q->rows * q->cols == 0) return F8_OK;
    return f8i_op_convert(ctx, q->data, q->dtype, q->scale_inv, dst->data, dst->dtype, q->rows * q->cols);
}

f8_status f8_qtensor_data(const f8_qtensor *q, f8_tensor *view)
{
    if (!q) return F8_ERR_INVALID_ARGUMENT;
    if (q->mode != F8I_SCALING_TENSOR) return block_refuse(q, "f8_qtensor_data");
    if (!view) return f8i_error(q->ctx, F8_ERR_INVALID_ARGUMENT, "f8_qtensor_data: view is NULL");
    *view = f8_tensor_make(q->data, q->dtype, q->rows, q->cols);
    view->scale_inv = q->scale_inv;
    return F8_OK;
}

f8_status f8_qtensor_transpose_data(const f8_qtensor *q, f8_tensor *view)
{
    if (!q) return F8_ERR_INVALID_ARGUMENT;
    if (q->mode != F8I_SCALING_TENSOR) return block_refuse(q, "f8_qtensor_transpose_data");
    if (!view) return f8i_error(q->ctx, F8_ERR_INVALID_ARGUMENT, "f8_qtensor_transpose_data: view is NULL");
    if (!q->t_valid)
        return f8i_error(q->ctx, F8_ERR_STATE, "f8_qtensor_transpose_data: the cached transpose is not valid "
                                               "(call f8_qtensor_transpose first)");
    *view = f8_tensor_make(q->t, q->dtype, q->cols, q->rows);
    view->scale_inv = q->scale_inv;
    return F8_OK;
}

int f8_qtensor_transpose_valid(const f8_qtensor *q) { return q ? q->t_valid : 0; }

f8_status f8_qtensor_upload(f8_qtensor *q, const uint8_t *host_codes, float scale_inv)
{
    if (!q) return F8_ERR_INVALID_ARGUMENT;
    if (q->mode != F8I_SCALING_TENSOR) return block_refuse(q, "f8_qtensor_upload");
    size_t bytes = (size_t)(q->rows * q->cols);
    if (bytes && !host_codes) return f8i_error(q->ctx, F8_ERR_INVALID_ARGUMENT, "f8_qtensor_upload: host_codes is NULL");
    f8_status st = bytes ? q->ctx->be->upload(q->ctx, q->data, host_codes, bytes) : F8_OK;
    if (st == F8_OK) st = q->ctx->be->upload(q->ctx, q->scale_inv, &scale_inv, sizeof scale_inv);
    if (st == F8_OK) q->t_valid = 0;
    return st;
}
