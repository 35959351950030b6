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
 * lo and hi the codes around it, decided by the top 24 bits of r (u = (r >> 8)
 * / 2^24: up when |y| - lo > u·(hi - lo)); a |y| on a code is that code.
 * NaN, and |y| >= 448 (not produced by the block scales), round to nearest.
 *
 * Worked on |y|'s bits, in integers, so the host and the device decide alike
 * (and cheaply: no decode of the neighbours, no FP32 subtraction):
 *  - |y| >= 2^-6 (E4M3's normal codes): the code below |y| is |y|'s FP32
 *    exponent rebiased (127 -> 7) above its top 3 mantissa bits, and the 20
 *    mantissa bits under those are |y| - lo in units of 2^-20 of the gap
 *    (a power of two), so "up" is 16·those bits > r >> 8;
 *  - below (the subnormal codes, steps of 2^-9): |y| = M·2^-sh in units of
 *    2^-9 (M the 24-bit significand, sh >= 21), lo = M >> sh and the rest
 *    f = M mod 2^sh; "up" is f·2^24 > (r >> 8)·2^sh, exact in 64 bits while
 *    sh <= 40; past that f = M < 2^24, and (r >> 8)·2^(sh-24) decides,
 *    which is >= 2^24 > M once sh >= 48.
 * Exactly the definition (tests/adamw_moments_ref.h's FP64 e4m3_sr, which
 * test_adamw_moments compares it with over a sweep of FP32 values). */
F8I_HD uint8_t f8i_adamw_fp8_encode_sr(float y, uint32_t r)
{
    const uint32_t bits = f8i_float_bits(y), a = bits & 0x7FFFFFFFu, u = r >> 8;
    if (!(a < 0x43E00000u)) return f8i_fp8_encode(y, 0); /* 448, inf, NaN */
    uint32_t c;
    if (a >= 0x3C800000u) { /* 2^-6 */
        c = (a >> 20) - (120u << 3);
        c += (a & 0xFFFFFu) << 4 > u;
    } else {
        const uint32_t e = a >> 23, m = (a & 0x7FFFFFu) | (e ? 0x800000u : 0u);
        const uint32_t sh = 141u - (e ? e : 1u); /* |y| = m·2^-sh steps of 2^-9 */
        if (sh <= 40u) {
            const uint64_t f = sh < 32u ? m & ((1u << sh) - 1u) : m;
            c = sh < 32u ? m >> sh : 0u;
            c += f << 24 > (uint64_t)u << sh;
        } else {
            c = sh < 48u ? (uint64_t)m > (uint64_t)u << (sh - 24u) : u == 0u && m != 0u;
        }
    }
    return c != 0 && (bits >> 31) ? (uint8_t)(c | 0x80u) : (uint8_t)c;
}

#endif /* F8_TRAIN_ADAMW_MOMENTS_H */
