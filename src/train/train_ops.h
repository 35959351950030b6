/*
 * train_ops.h — the training ops behind f8i_backend.train_op: their kinds,
 * and the per-family dispatchers each backend implements. Kinds are grouped
 * by family so each family keeps its args structs in its own header
 * (attention.h, train_misc.h). Included from C and CUDA.
 */
#ifndef F8_TRAIN_OPS_H
#define F8_TRAIN_OPS_H

#include "core/f8i.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    F8I_TRAIN_ATTENTION_FIRST = 0,   /* attention.h: kinds 0..15 */
    F8I_TRAIN_MISC_FIRST = 16,       /* train_misc.h: embedding, cross-entropy, AdamW: kinds 16..63 */
    F8I_TRAIN_KIND_END = 64
};

/* Family dispatchers (cpu/ and cuda/): args points at the kind's args struct. */
f8_status f8i_cpu_attention_op(f8_ctx *ctx, int kind, const void *args);
f8_status f8i_cpu_misc_op(f8_ctx *ctx, int kind, const void *args);
f8_status f8i_cuda_attention_op(f8_ctx *ctx, int kind, const void *args);
f8_status f8i_cuda_misc_op(f8_ctx *ctx, int kind, const void *args);

/* The backends' train_op entries. */
f8_status f8i_cpu_train_op(f8_ctx *ctx, int kind, const void *args, size_t args_size);
f8_status f8i_cuda_train_op(f8_ctx *ctx, int kind, const void *args, size_t args_size);

#ifdef __cplusplus
}
#endif

#endif /* F8_TRAIN_OPS_H */
