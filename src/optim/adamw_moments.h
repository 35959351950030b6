/*
 * adamw_moments.h — how AdamW's moments are loaded from and stored into their
 * low-precision forms (the contract is f8_adamw_moments in f8.h), written once
 * for the CPU oracle (src/cpu/embed_xent_adamw.c) and the CUDA kernel
 * (src/cuda/adamw.cu), so both run the same arithmetic.
 *
 * Design note. FP8 moments are scaled per block of F8_ADAMW_FP8_BLOCK
 * consecutive elements by a power of two chosen from the block's amax: the
 * scaling and the unscaling are then exact, and the only rounding is the
 * encode (f8i_adamw_fp8_encode_sr below, on the host and the device alike:
 * integer and exact FP32 steps, the same bits). amax is a max, exact in
 * any order, so a warp's shuffle tree and the CPU's loop agree. v is stored
 * as sqrt(v) (f8.h says why); loading squares it in FP32.
 *
 * The codes are rounded stochastically (f8i_adamw_fp8_encode_sr), not to
 * nearest: with 3 mantissa bits a code is 6-12% from its neighbours, and a
 * moment that one step moves by less than half of that (sqrt(v) decays by
 * 1 - sqrt(0.95) = 2.5% a step when the gradient falls silent) would round
 * back to where it was, step after step: v never decays, the updates
 * shrink, and a 50M model ended 4-10% above FP32 moments' loss
 * (bench/RESULTS.md). Rounded up with the probability of the distance to
 * the code below, a moment moves in expectation as FP32's does. The random
 * bits are a hash of where the element is (its index in its parameter: a
 * data-parallel shard registers its slice's first index, so it rounds each
 * element as one rank does), the step and the moment; not of its value,
 * which differs in the last bits between a sharded and a one-rank sum, and
 * would redraw every bit. A run repeats bit for bit.
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

/* The step's part of the rounding bits, mix64(t) for step t (1-based): the
 * same for every element, so a step computes it once. */
F8I_HD uint64_t f8i_adamw_sr_step(int64_t t) { return f8i_mix64((uint64_t)t); }

/* The 32 random bits of one moment's rounding: a hash of the element's index
 * in its parameter, of which moment (0: m, 1: sqrt(v)) and of the step
 * (step = f8i_adamw_sr_step(t)). */
F8I_HD uint32_t f8i_adamw_sr_bits(int64_t index, uint64_t step, unsigned which)
{
    return (uint32_t)(f8i_mix64(((uint64_t)index * 2u + which) ^ step) >> 32);
}

/* The E4M3 code of y (a moment times its block's scale, |y| <= 448), rounded
 * stochastically: the code above |y| with probability (|y| - lo) / (hi - lo),
 * lo and hi the codes around it, decided by the top 24 bits of r; a |y| on a
 * code is that code. Each quantity is exact in FP32 (|y| - lo by Sterbenz's
 * lemma, or lo = 0; hi - lo a power of two; u·(hi - lo) 24 bits times a power
 * of two), so the host and the device decide alike, with or without FMA.
 * NaN, and |y| > 448 (not produced by the block scales), round to nearest. */
F8I_HD uint8_t f8i_adamw_fp8_encode_sr(float y, uint32_t r)
{
    const float a = fabsf(y);
    if (!(a < F8I_ADAMW_FP8_MAX)) return f8i_fp8_encode(y, 0);
    uint8_t c = f8i_fp8_encode(a, 0);
    const float near = f8i_fp8_decode(c, 0);
    if (near != a) {
        const uint8_t lo = near < a ? c : (uint8_t)(c - 1u);
        const float flo = f8i_fp8_decode(lo, 0), gap = f8i_fp8_decode((uint8_t)(lo + 1u), 0) - flo;
        const float u = (float)(r >> 8) * 0x1p-24f;
        c = a - flo > u * gap ? (uint8_t)(lo + 1u) : lo;
    }
    return c != 0 && y < 0.0f ? (uint8_t)(c | 0x80u) : c;
}

#endif /* F8_TRAIN_ADAMW_MOMENTS_H */
