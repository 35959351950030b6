/*
 * cpu/element.h — one element of a buffer as float, for the CPU reference
 * ops. Written once so that every oracle reads and rounds an element the
 * same way: a BF16 store rounds to nearest even (f8i_bf16_from_float), an
 * FP8 code reads as its exact value, unscaled (the caller applies the
 * scale_inv).
 */
#ifndef F8_CPU_ELEMENT_H
#define F8_CPU_ELEMENT_H

#include <stdint.h>

#include "f8.h"
#include "core/numerics.h"

/* Element i of high-precision p: BF16, else FP32 (the callers have checked
 * dt is one of the two, so no other dtype reaches here). */
static inline float f8i_hp_load(const void *p, f8_dtype dt, int64_t i)
{
    if (dt == F8_DTYPE_BF16) return f8i_bf16_to_float(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* Element i of high-precision p set to v, rounded when p is BF16. */
static inline void f8i_hp_store(void *p, f8_dtype dt, int64_t i, float v)
{
    if (dt == F8_DTYPE_BF16) ((uint16_t *)p)[i] = f8i_bf16_from_float(v);
    else ((float *)p)[i] = v;
}

/* v as a high-precision dtype would store it (FP32: itself; BF16: RNE to
 * BF16 and back). */
static inline float f8i_round_to(f8_dtype hp, float v)
{
    return hp == F8_DTYPE_BF16 ? f8i_bf16_to_float(f8i_bf16_from_float(v)) : v;
}

/* Element i of p in any dtype: FP8 codes decoded, BF16 widened, else FP32. */
static inline float f8i_any_load(const void *p, f8_dtype dt, int64_t i)
{
    if (dt == F8_DTYPE_BF16) return f8i_bf16_to_float(((const uint16_t *)p)[i]);
    if (dt == F8_DTYPE_E4M3) return f8i_fp8_decode(((const uint8_t *)p)[i], 0);
    if (dt == F8_DTYPE_E5M2) return f8i_fp8_decode(((const uint8_t *)p)[i], 1);
    return ((const float *)p)[i];
}

#endif /* F8_CPU_ELEMENT_H */
