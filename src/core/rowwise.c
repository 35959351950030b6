/*
 * core/rowwise.c — the argument checks of row-wise scaling's cast and GEMM
 * (core/rowwise.h), the part every backend's caller runs first, so a bad
 * call gets a status naming what is wrong and nothing is written.
 */
#include <math.h>

#include "core/rowwise.h"

static int is_hp(f8_dtype t) { return t == F8_DTYPE_FP32 || t == F8_DTYPE_BF16; }

f8_status f8i_rowwise_cast_check(f8_ctx *ctx, const f8i_rowwise_cast_args *a)
{
    if (!a) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "rowwise cast: args is NULL");
    if (a->rows < 0 || a->cols < 0)
        return f8i_error(ctx, F8_ERR_SHAPE, "rowwise cast: shape [%lld, %lld] is negative", (long long)a->rows,
                         (long long)a->cols);
    if (!is_hp(a->src_dtype))
        return f8i_error(ctx, F8_ERR_DTYPE, "rowwise cast: src is %s, expected fp32 or bf16", f8_dtype_name(a->src_dtype));
    if (!f8i_dtype_is_fp8(a->out_dtype))
        return f8i_error(ctx, F8_ERR_DTYPE, "rowwise cast: out is %s, expected e4m3 or e5m2", f8_dtype_name(a->out_dtype));
    if (!a->out && !a->out_t && !a->dbias)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "rowwise cast: neither out, out_t nor dbias given");
    if (a->dbias && !is_hp(a->dbias_dtype))
        return f8i_error(ctx, F8_ERR_DTYPE, "rowwise cast: dbias is %s, expected fp32 or bf16",
                         f8_dtype_name(a->dbias_dtype));
    if ((a->out && !a->scale_inv) || (a->out_t && !a->scale_inv_t))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "rowwise cast: %s without its scale vector",
                         a->out && !a->scale_inv ? "out" : "out_t");
    if (a->rows > 0 && a->cols > 0 && !a->src) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "rowwise cast: src is NULL");
    if (!(a->scaled_max > 0.0f) || isinf(a->scaled_max))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "rowwise cast: scaled_max %g, expected finite and > 0",
                         (double)a->scaled_max);
    if (a->col_amax_in && (a->out || !a->out_t || a->amax))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT,
                         "rowwise cast: col_amax_in (scale_inv_t holds the column amaxes) is the column-only cast: "
                         "it needs out NULL, out_t set and no amax (got out %s, out_t %s, amax %s)",
                         a->out ? "set" : "NULL", a->out_t ? "set" : "NULL", a->amax ? "set" : "NULL");
    if (a->dbias && a->rows > 0 && a->cols > 0)
        return f8i_check_reduce_workspace(ctx, a->workspace, a->workspace_bytes, a->rows, a->cols, "rowwise cast");
    return F8_OK;
}

f8_status f8i_rowwise_gemm_check(f8_ctx *ctx, const f8i_rowwise_gemm_args *g)
{
    if (!g) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "rowwise gemm: args is NULL");
    if (g->m < 0 || g->n < 0 || g->k < 0)
        return f8i_error(ctx, F8_ERR_SHAPE, "rowwise gemm: m, n, k = %lld, %lld, %lld: negative", (long long)g->m,
                         (long long)g->n, (long long)g->k);
    if (!f8i_dtype_is_fp8(g->a_dtype) || !f8i_dtype_is_fp8(g->b_dtype))
        return f8i_error(ctx, F8_ERR_DTYPE, "rowwise gemm: operands %s x %s, expected e4m3/e5m2",
                         f8_dtype_name(g->a_dtype), f8_dtype_name(g->b_dtype));
    if (!is_hp(g->d_dtype) || (g->bias && !is_hp(g->bias_dtype)))
        return f8i_error(ctx, F8_ERR_DTYPE, "rowwise gemm: D %s, bias %s: expected fp32 or bf16",
                         f8_dtype_name(g->d_dtype), g->bias ? f8_dtype_name(g->bias_dtype) : "none");
    if (g->m > 0 && g->n > 0 && !g->d) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "rowwise gemm: d is NULL");
    if (g->m > 0 && g->n > 0 && g->k > 0 && (!g->a || !g->b || !g->a_scale_inv || !g->b_scale_inv))
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "rowwise gemm: %s is NULL",
                         !g->a ? "a" : !g->b ? "b" : !g->a_scale_inv ? "a_scale_inv" : "b_scale_inv");
    return F8_OK;
}
