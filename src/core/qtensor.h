/*
 * qtensor.h — the inside of f8_qtensor, for the modules that own workspaces.
 */
#ifndef F8_QTENSOR_H
#define F8_QTENSOR_H

#include "core/f8i.h"
#include "core/operand.h"

struct f8_qtensor {
    f8_ctx *ctx;
    f8_dtype dtype;   /* E4M3 or E5M2 */
    f8i_scaling_mode mode; /* TENSOR (scale_inv), or BLOCK_128X128 / ROW (bsinv, bsinv_t: a module
                              weight's workspace under block or row-wise scaling,
                              f8i_qtensor_reserve_scales) */
    int64_t rows, cols;
    void *block;      /* one allocation: scale_inv (256 B) then data */
    float *scale_inv; /* (1) private: written only with the data */
    uint8_t *data;    /* (rows, cols) */
    uint8_t *t;       /* (cols, rows) lazily allocated transpose, or NULL */
    int t_valid;      /* t holds the transpose of the current data */
    float *bsinv;     /* BLOCK_128X128: scale_inv per 128x128 block [ceil(rows/128), ceil(cols/128)];
                         ROW: one per row [rows] */
    float *bsinv_t;   /* BLOCK_128X128: the same grid transposed, t's: [ceil(cols/128), ceil(rows/128)];
                         ROW: t's own, one per column of data [cols] */
    f8_memory_report *acct; /* the owning module's report, or NULL */
    f8_mem_category cat_data, cat_t; /* where its memory is reported */
};

/* f8_qtensor_create with the memory reported under the given categories
 * (and in acct, a module's report, when not NULL). */
f8_status f8i_qtensor_create(f8_ctx *ctx, f8_dtype dtype, int64_t rows, int64_t cols, f8_memory_report *acct,
                             f8_mem_category cat_data, f8_mem_category cat_t, f8_qtensor **q);

/* A module weight's workspace in its weight quantizer's mode. Block or
 * row-wise scaling (F8_RECIPE_BLOCK or ROWWISE): allocate the transpose and
 * the scales of both orientations in mode (BLOCK_128X128: the two grids;
 * ROW: [rows] for the codes, [cols] for the transpose's own column-wise
 * codes), all 1; the mode is `mode` from then on. TENSOR: nothing (the
 * private scalar is there, the transpose comes on first need). */
f8_status f8i_qtensor_reserve_scales(f8_qtensor *q, f8i_scaling_mode mode);

/* Cast src (q's shape, FP32 or BF16) into q with slot's scaling, by q's
 * mode: TENSOR is f8_qtensor_quantize (the transpose when with_transpose);
 * per block or row, both orientations from src on their own scales (the
 * transpose always), the amax into the slot's record. noop: the device
 * flag that skips the cast, or NULL. */
f8_status f8i_qtensor_cast(f8_qtensor *q, const f8_tensor *src, f8_slot slot, int with_transpose, const float *noop);

/* Make q's column-wise copy (t) valid for a GEMM: per-tensor, the
 * transpose of the codes (nothing when valid); per block or row the cast
 * wrote it already, from the high-precision values. */
f8_status f8i_qtensor_colwise(f8_qtensor *q);

/* q as a GEMM operand: data and t with the scale_inv of each by q's mode. */
static inline f8i_operand f8i_qtensor_operand(const f8_qtensor *q)
{
    const int block = q->mode != F8I_SCALING_TENSOR;
    f8i_operand o = {q->data, q->t, q->dtype, q->mode, block ? q->bsinv : q->scale_inv,
                     block ? q->bsinv_t : q->scale_inv, q->rows, q->cols};
    return o;
}

/* Allocate the transpose now (module creation), so no step allocates. */
f8_status f8i_qtensor_reserve_transpose(f8_qtensor *q);

#endif /* F8_QTENSOR_H */
