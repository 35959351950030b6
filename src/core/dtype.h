/*
 * dtype.h — the dtype classes every file asks about, defined once: FP8 (the
 * two 8-bit formats, which carry a scale_inv) and high precision (FP32 or
 * BF16, what casts read and GEMMs, norms and activations write). Included
 * from C and CUDA (callable from device code there); core/f8i.h includes it.
 */
#ifndef F8_CORE_DTYPE_H
#define F8_CORE_DTYPE_H

#include "f8.h"

#ifdef __CUDACC__
#define F8I_DTYPE_FN static __host__ __device__ inline
#else
#define F8I_DTYPE_FN static inline
#endif

/* E4M3 or E5M2. */
F8I_DTYPE_FN int f8i_dtype_is_fp8(f8_dtype dt) { return dt == F8_DTYPE_E4M3 || dt == F8_DTYPE_E5M2; }

/* FP32 or BF16. */
F8I_DTYPE_FN int f8i_dtype_is_hp(f8_dtype dt) { return dt == F8_DTYPE_FP32 || dt == F8_DTYPE_BF16; }

#undef F8I_DTYPE_FN

#endif /* F8_CORE_DTYPE_H */
