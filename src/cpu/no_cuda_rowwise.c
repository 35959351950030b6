/* cpu/no_cuda_rowwise.c — linked instead of src/cuda/rowwise_cast.cu and
 * gemm_rowwise.cu in a build without CUDA (CUDA=0; the Makefile leaves it
 * out of a CUDA=1 build): row-wise scaling's CUDA entry points answer
 * F8_ERR_NO_DEVICE, so the tests that name them link and skip. */
#include "core/rowwise.h"

#define NO_CUDA "this build of f8 has no CUDA backend (built with CUDA=0)"

f8_status f8i_cuda_cast_rowwise(f8_ctx *ctx, const f8i_rowwise_cast_args *a)
{
    (void)a;
    return f8i_error(ctx, F8_ERR_NO_DEVICE, NO_CUDA);
}

f8_status f8i_cuda_cast_rowwise_stripes(f8_ctx *ctx, const f8i_rowwise_cast_args *a)
{
    (void)a;
    return f8i_error(ctx, F8_ERR_NO_DEVICE, NO_CUDA);
}

f8_status f8i_cuda_rowwise_col_amax(f8_ctx *ctx, const void *src, f8_dtype src_dtype, int64_t rows, int64_t cols,
                                    float *col_amax)
{
    (void)src, (void)src_dtype, (void)rows, (void)cols, (void)col_amax;
    return f8i_error(ctx, F8_ERR_NO_DEVICE, NO_CUDA);
}

f8_status f8i_cuda_rowwise_plan_create(f8_ctx *ctx, const f8i_rowwise_gemm_args *g, int fallback_only,
                                       f8i_rowwise_plan **plan)
{
    (void)g, (void)fallback_only;
    *plan = NULL;
    return f8i_error(ctx, F8_ERR_NO_DEVICE, NO_CUDA);
}

void f8i_cuda_rowwise_plan_destroy(f8i_rowwise_plan *plan) { (void)plan; }

f8_status f8i_cuda_gemm_rowwise(f8_ctx *ctx, const f8i_rowwise_gemm_args *g, f8i_rowwise_plan *plan, int *last_path)
{
    (void)g, (void)plan;
    if (last_path) *last_path = 0;
    return f8i_error(ctx, F8_ERR_NO_DEVICE, NO_CUDA);
}
