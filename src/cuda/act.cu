/* act.cu — placeholder until the CUDA activation kernels land: reports unsupported. */
#include "cuda_state.cuh"
f8_status f8i_cuda_act_fwd(f8_ctx *ctx, const f8i_act_fwd_args *a) { (void)a; return f8i_error(ctx, F8_ERR_UNSUPPORTED, "activation: not built yet"); }
f8_status f8i_cuda_act_bwd(f8_ctx *ctx, const f8i_act_bwd_args *a) { (void)a; return f8i_error(ctx, F8_ERR_UNSUPPORTED, "activation: not built yet"); }
