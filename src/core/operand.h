/*
 * operand.h — one GEMM operand as the layers hand it on: its values in both
 * orientations (either may be absent), dtype, scaling mode and the
 * scale_inv of each orientation. The weight-GEMM helpers
 * (modules/weight.h) take operands and read the GEMM's modes from them, so
 * a caller states how its tensor was quantized once, where it has it.
 *
 * By mode (core/backend.h's f8i_scaling_mode):
 *   high precision  dtype FP32 or BF16, mode TENSOR, no scale_inv
 *   TENSOR          FP8; scale_inv and scale_inv_t are the one scalar
 *   BLOCK_1X128,    FP8; scale_inv is data's grid, scale_inv_t data_t's
 *   BLOCK_128X128   (f8i_block_grid of each orientation)
 * (Row-wise scaling, next, gives each orientation its per-row FP32 vector.)
 */
#ifndef F8_CORE_OPERAND_H
#define F8_CORE_OPERAND_H

#include "core/f8i.h"

typedef struct f8i_operand {
    const void *data;         /* [rows, cols], or NULL when only data_t is kept */
    const void *data_t;       /* [cols, rows] (FP8 only), or NULL */
    f8_dtype dtype;
    f8i_scaling_mode mode;
    const float *scale_inv;   /* data's, by mode; NULL for high precision */
    const float *scale_inv_t; /* data_t's, by mode */
    int64_t rows, cols;
} f8i_operand;

/* A high-precision operand [rows, cols]. */
static inline f8i_operand f8i_operand_hp(const void *data, f8_dtype dtype, int64_t rows, int64_t cols)
{
    f8i_operand o = {data, NULL, dtype, F8I_SCALING_TENSOR, NULL, NULL, rows, cols};
    return o;
}

static inline int f8i_operand_fp8(const f8i_operand *o)
{
    return o->dtype == F8_DTYPE_E4M3 || o->dtype == F8_DTYPE_E5M2;
}

#endif /* F8_CORE_OPERAND_H */
