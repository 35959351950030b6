/* cuda/train_ops.cu — the CUDA backend's train_op: dispatch by family. */
#include "train/train_ops.h"

f8_status f8i_cuda_train_op(f8_ctx *ctx, int kind, const void *args, size_t args_size)
{
    (void)args_size;
    if (kind >= F8I_TRAIN_ATTENTION_FIRST && kind < F8I_TRAIN_MISC_FIRST) return f8i_cuda_attention_op(ctx, kind, args);
    if (kind >= F8I_TRAIN_MISC_FIRST && kind < F8I_TRAIN_KIND_END) return f8i_cuda_misc_op(ctx, kind, args);
    return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "train op: unknown kind %d", kind);
}
