/*
 * qtensor.h — the inside of f8_qtensor, for the modules that own workspaces.
 */
#ifndef F8_QTENSOR_H
#define F8_QTENSOR_H

#include "f8i.h"

struct f8_qtensor {
    f8_ctx *ctx;
    f8_dtype dtype;   /* E4M3 or E5M2 */
    int64_t rows, cols;
    void *block;      /* one allocation: scale_inv (256 B) then data */
    float *scale_inv; /* (1) private: written only with the data */
    uint8_t *data;    /* (rows, cols) */
    uint8_t *t;       /* (cols, rows) lazily allocated transpose, or NULL */
    int t_valid;      /* t holds the transpose of the current data */
};

/* Allocate the transpose now (module creation), so no step allocates. */
f8_status f8i_qtensor_reserve_transpose(f8_qtensor *q);

#endif /* F8_QTENSOR_H */
