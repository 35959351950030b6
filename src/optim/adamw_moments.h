/*
 * adamw_moments.h — how AdamW's moments are loaded from and stored into their
 * low-precision forms (the contract is f8_adamw_moments in f8.h), written once
 * for the CPU oracle (src/cpu/embed_xent_adamw.c) and the CUDA kernel
 * (src/cuda/adamw.cu), so both run the same arithmetic.
 *
 * Design note. FP8 moments are scaled per block of F8_ADAMW_FP8_BLOCK
 * consecutive elements by a power of two chosen from the block's amax: the
 * scaling and the unscaling are then exact, and the only rounding is the
 * encode (f8i_fp8_encode on the host, the hardware's cvt.rn.satfinite on the
 * device: the same bits, as the cast tests check). amax is a max, exact in
 * any order, so a warp's shuffle tree and the CPU's loop agree. v is stored
 * as sqrt(v) (f8.h says why); loading squares it in FP32.
 */
#ifndef F8_TRAIN_ADAMW_MOMENTS_H
#define F8_TRAIN_ADAMW_MOMENTS_H

#include "core/numerics.h"
#include "f8.h"

/* Largest E4M3 value: a block's amax maps to [224, 448]. */
#define F8I_ADAMW_FP8_MAX 448.0f

/* Blocks of a tensor of n elements. */
#define F8I_ADAMW_FP8_BLOCKS(n) (((n) + F8_ADAMW_FP8_BLOCK - 1) / F8_ADAMW_FP8_BLOCK)

/* The power-of-two scale of a block whose largest |value| is amax (1 for an
 * all-zero block; the shared current-scaling expression with pow2 on). */
F8I_HD float f8i_adamw_fp8_scale(float amax) { return f8i_current_scale(amax, 1.0f, F8I_ADAMW_FP8_MAX, 1); }

/* m from its E4M3 code and its block's scale_inv (exact). */
F8I_HD float f8i_adamw_m_from_fp8(uint8_t code, float scale_inv) { return f8i_fp8_decode(code, 0) * scale_inv; }

/* v from the E4M3 code of sqrt(v) and its block's scale_inv: s = code·scale_inv
 * (exact), v = s·s (one FP32 rounding, exact unless it underflows). */
F8I_HD float f8i_adamw_v_from_fp8(uint8_t code, float scale_inv)
{
    const float s = f8i_fp8_decode(code, 0) * scale_inv;
    return s * s;
}

#endif /* F8_TRAIN_ADAMW_MOMENTS_H */
