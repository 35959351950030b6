/*
 * qtensor.h — the inside of f8_qtensor, for the modules that own workspaces.
 */
#ifndef F8_QTENSOR_H
#define F8_QTENSOR_H

#include "core/f8i.h"

struct f8_qtensor {
    f8_ctx *ctx;
    f8_dtype dtype;   /* E4M3 or E5M2 */
    int64_t rows, cols;
    void *block;      /* one allocation: scale_inv (256 B) then data */
    float *scale_inv; /* (1) private: written only with the data */
    uint8_t *data;    /* (rows, cols) */
    uint8_t *t;       /* (cols, rows) lazily allocated transpose, or NULL */
    int t_valid;      /* t holds the transpose of the current data */
    float *bsinv;     /* block scaling's weights: scale_inv per 128x128 block
                         [ceil(rows/128), ceil(cols/128)], or NULL (then scale_inv) */
    float *bsinv_t;   /* the same grid transposed, t's: [ceil(cols/128), ceil(rows/128)] */
    f8_memory_report *acct; /* the owning module's report, or NULL */
    f8_mem_category cat_data, cat_t; /* where its memory is reported */
};

/* f8_qtensor_create with the memory reported under the given categories
 * (and in acct, a module's report, when not NULL). */
f8_status f8i_qtensor_create(f8_ctx *ctx, f8_dtype dtype, int64_t rows, int64_t cols, f8_memory_report *acct,
                             f8_mem_category cat_data, f8_mem_category cat_t, f8_qtensor **q);

/* Block scaling (a module weight's workspace under F8_RECIPE_BLOCK): allocate
 * the transpose and the two block scale grids (scale_inv 1), so the tensor's
 * dequantization factor is per 128x128 block from then on. */
f8_status f8i_qtensor_reserve_blocks(f8_qtensor *q);

/* Allocate the transpose now (module creation), so no step allocates. */
f8_status f8i_qtensor_reserve_transpose(f8_qtensor *q);

#endif /* F8_QTENSOR_H */
