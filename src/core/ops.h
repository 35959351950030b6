/*
 * ops.h — the typed entry points every caller above the backend uses to put
 * work on the stream: f8i_op_cast(ctx, &args), f8i_op_gemm(...), ...
 *
 * Callers never touch ctx->be for work ops; they call these. What stands
 * behind them (today: the backend table's per-op entries; the target: one
 * (kind, args) dispatch that graph capture records without per-op code) may
 * change without touching a caller. Every op that needs scratch memory gets
 * it in its args (`workspace`, `workspace_bytes`), sized by
 * f8i_reduce_workspace_bytes.
 */
#ifndef F8_CORE_OPS_H
#define F8_CORE_OPS_H

#include "core/f8i.h"

static inline f8_status f8i_op_cast(f8_ctx *ctx, const f8i_cast_args *a) { return ctx->be->cast(ctx, a); }
static inline f8_status f8i_op_gemm(f8_ctx *ctx, const f8i_gemm_args *a) { return ctx->be->gemm(ctx, a); }
static inline f8_status f8i_op_scale_update(f8_ctx *ctx, const f8i_scale_update_args *a)
{
    return ctx->be->scale_update(ctx, a);
}
static inline f8_status f8i_op_norm_fwd(f8_ctx *ctx, const f8i_norm_fwd_args *a) { return ctx->be->norm_fwd(ctx, a); }
static inline f8_status f8i_op_norm_bwd(f8_ctx *ctx, const f8i_norm_bwd_args *a) { return ctx->be->norm_bwd(ctx, a); }
static inline f8_status f8i_op_act_fwd(f8_ctx *ctx, const f8i_act_fwd_args *a) { return ctx->be->act_fwd(ctx, a); }
static inline f8_status f8i_op_act_bwd(f8_ctx *ctx, const f8i_act_bwd_args *a) { return ctx->be->act_bwd(ctx, a); }

static inline f8_status f8i_op_copy(f8_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    return ctx->be->copy(ctx, dst, src, bytes);
}
static inline f8_status f8i_op_memset_zero(f8_ctx *ctx, void *dst, size_t bytes)
{
    return ctx->be->memset_zero(ctx, dst, bytes);
}
static inline f8_status f8i_op_fill_f32(f8_ctx *ctx, float *dst, float value, int64_t count)
{
    return ctx->be->fill_f32(ctx, dst, value, count);
}
static inline f8_status f8i_op_convert(f8_ctx *ctx, const void *src, f8_dtype src_dtype, const float *scale_inv,
                                       void *dst, f8_dtype dst_dtype, int64_t count)
{
    return ctx->be->convert(ctx, src, src_dtype, scale_inv, dst, dst_dtype, count);
}
static inline f8_status f8i_op_transpose_u8(f8_ctx *ctx, const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols,
                                            const float *noop)
{
    return ctx->be->transpose_u8(ctx, src, dst, rows, cols, noop);
}
static inline f8_status f8i_op_reciprocal(f8_ctx *ctx, const float *src, float *dst, const float *noop)
{
    return ctx->be->reciprocal(ctx, src, dst, noop);
}
static inline f8_status f8i_op_add(f8_ctx *ctx, void *dst, const void *src, f8_dtype dtype, int64_t count)
{
    return ctx->be->add(ctx, dst, src, dtype, count);
}

#endif /* F8_CORE_OPS_H */
