/* Placeholder until the misc family lands: every kind is unsupported. */
#include "train_ops.h"

f8_status f8i_cuda_misc_op(f8_ctx *ctx, int kind, const void *args)
{
    (void)args;
    return f8i_error(ctx, F8_ERR_UNSUPPORTED, "train op %d: not implemented on the CUDA backend", kind);
}
