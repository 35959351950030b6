/* norm.cu — placeholder until the CUDA norm kernels land: reports unsupported. */
#include "cuda_state.cuh"
f8_status f8i_cuda_norm_fwd(f8_ctx *ctx, const f8i_norm_fwd_args *a) { (void)a; return f8i_error(ctx, F8_ERR_UNSUPPORTED, "norm: not built yet"); }
f8_status f8i_cuda_norm_bwd(f8_ctx *ctx, const f8i_norm_bwd_args *a) { (void)a; return f8i_error(ctx, F8_ERR_UNSUPPORTED, "norm: not built yet"); }
