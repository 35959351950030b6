/*
 * act_gelu.cu — the GELU and GEGLU activation kernels (act_kernels.cuh), compiled
 * apart from the others so the activation files build in parallel.
 */
#include "act_kernels.cuh"

f8_status f8i_cuda_act_run_gelu(f8_ctx *ctx, f8_activation act, act_job *j)
{
    switch (act) {
    case F8_ACT_GELU: return act_run<F8_ACT_GELU>(ctx, j);
    case F8_ACT_GEGLU: return act_run<F8_ACT_GEGLU>(ctx, j);
    default: return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "activation: %d is not one of act_gelu.cu's", (int)act);
    }
}
