/*
 * ops.h — the typed entry points every caller above the backend uses to put
 * work on the stream: f8i_op_cast(ctx, &args), f8i_op_gemm(...), ...
 *
 * Callers never touch ctx->be for work ops; they call these. Each is one
 * (kind, args) pair of F8I_OP_LIST (core/backend.h) handed to
 * ctx->be->run: generated below where the args struct is the parameter,
 * written by hand (fill the struct, run it) where the fields are. Every op
 * that needs scratch memory gets it in its args (`workspace`,
 * `workspace_bytes`), sized by f8i_reduce_workspace_bytes or the family's
 * layout function (f8i_attn_workspace).
 */
#ifndef F8_CORE_OPS_H
#define F8_CORE_OPS_H

#include "core/f8i.h"
#include "nn/attention.h"
#include "nn/embed_xent_adamw.h"

/* Run one op of kind `kind`; args points at its args struct. */
static inline f8_status f8i_op_run(f8_ctx *ctx, f8i_op_kind kind, const void *args)
{
    return ctx->be->run(ctx, kind, args);
}

/* The size of kind's args struct (what the graph recorder copies); 0 for an
 * unknown kind. */
static inline size_t f8i_op_args_size(f8i_op_kind kind)
{
    switch (kind) {
#define F8I_OP_SIZE_(K, n, T, W) \
    case F8I_OP_##K: return sizeof(T);
        F8I_OP_LIST(F8I_OP_SIZE_)
#undef F8I_OP_SIZE_
    default: return 0;
    }
}

/* f8i_op_<name>(ctx, const args *) for every op listed with ARGS. */
#define F8I_OP_WRAP_ARGS(K, n, T) \
    static inline f8_status f8i_op_##n(f8_ctx *ctx, const T *a) { return f8i_op_run(ctx, F8I_OP_##K, a); }
#define F8I_OP_WRAP_FIELDS(K, n, T)
#define F8I_OP_WRAP_(K, n, T, W) F8I_OP_WRAP_##W(K, n, T)
F8I_OP_LIST(F8I_OP_WRAP_)
#undef F8I_OP_WRAP_
#undef F8I_OP_WRAP_FIELDS
#undef F8I_OP_WRAP_ARGS

/* The ops listed with FIELDS: the contract is their args struct's (backend.h). */
static inline f8_status f8i_op_copy(f8_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    const f8i_copy_args a = {dst, src, bytes};
    return f8i_op_run(ctx, F8I_OP_COPY, &a);
}
static inline f8_status f8i_op_memset_zero(f8_ctx *ctx, void *dst, size_t bytes)
{
    const f8i_memset_zero_args a = {dst, bytes};
    return f8i_op_run(ctx, F8I_OP_MEMSET_ZERO, &a);
}
static inline f8_status f8i_op_fill_f32(f8_ctx *ctx, float *dst, float value, int64_t count)
{
    const f8i_fill_f32_args a = {dst, value, count};
    return f8i_op_run(ctx, F8I_OP_FILL_F32, &a);
}
static inline f8_status f8i_op_convert(f8_ctx *ctx, const void *src, f8_dtype src_dtype, const float *scale_inv,
                                       void *dst, f8_dtype dst_dtype, int64_t count)
{
    const f8i_convert_args a = {src, src_dtype, scale_inv, dst, dst_dtype, count};
    return f8i_op_run(ctx, F8I_OP_CONVERT, &a);
}
static inline f8_status f8i_op_transpose_u8(f8_ctx *ctx, const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols,
                                            const float *noop)
{
    const f8i_transpose_u8_args a = {src, dst, rows, cols, noop};
    return f8i_op_run(ctx, F8I_OP_TRANSPOSE_U8, &a);
}
static inline f8_status f8i_op_reciprocal(f8_ctx *ctx, const float *src, float *dst, const float *noop)
{
    const f8i_reciprocal_args a = {src, dst, noop};
    return f8i_op_run(ctx, F8I_OP_RECIPROCAL, &a);
}
static inline f8_status f8i_op_add(f8_ctx *ctx, void *dst, const void *src, f8_dtype dtype, int64_t count)
{
    const f8i_add_args a = {dst, src, dtype, count};
    return f8i_op_run(ctx, F8I_OP_ADD, &a);
}

#endif /* F8_CORE_OPS_H */
