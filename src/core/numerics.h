/*
 * numerics.h — the scalar conversions, written once for the host and the
 * device (__host__ __device__ under nvcc), so that the CPU oracle and the CUDA
 * kernels run literally the same arithmetic where no hardware instruction is
 * used. Pure bit manipulation and exact power-of-two scaling: the results do
 * not depend on FMA contraction or on flush-to-zero.
 */
#ifndef F8_NUMERICS_H
#define F8_NUMERICS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define F8I_HD __host__ __device__ __forceinline__
#else
#define F8I_HD static inline
#endif

F8I_HD uint32_t f8i_float_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

F8I_HD float f8i_bits_float(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* FP32 -> BF16 bits, round to nearest even; NaN -> quiet NaN keeping the sign. */
F8I_HD uint16_t f8i_bf16_from_float(float x)
{
    uint32_t u = f8i_float_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7FC0u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

F8I_HD float f8i_bf16_to_float(uint16_t b) { return f8i_bits_float((uint32_t)b << 16); }

/* FP32 -> FP8 code with cvt.rn.satfinite semantics; e5m2 selects the format.
 * Normal range: round the FP32 mantissa to the target width (RNE on the bit
 * pattern), then rebias. Subnormal range: count subnormal steps, |x| scaled by
 * an exact power of two and rounded to the nearest even integer; a count of
 * 2^mbits is exactly the smallest normal code, so the code is the count. */
F8I_HD uint8_t f8i_fp8_encode(float x, int e5m2)
{
    const int mbits = e5m2 ? 2 : 3;
    const int bias = e5m2 ? 15 : 7;
    const uint32_t maxcode = e5m2 ? 0x7Bu : 0x7Eu;
    uint32_t u = f8i_float_bits(x);
    uint32_t sign = (u >> 24) & 0x80u;
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return 0x7Fu;                 /* NaN */
    if (a >= 0x7F800000u) return (uint8_t)(sign | maxcode); /* +-inf saturates */
    const uint32_t min_normal = (uint32_t)(127 + 1 - bias) << 23;
    uint32_t code;
    if (a >= min_normal) {
        const int shift = 23 - mbits;
        uint32_t r = a + ((1u << (shift - 1)) - 1u) + ((a >> shift) & 1u);
        r >>= shift;
        /* r holds FP32 exponent and the rounded mantissa; rebias the exponent. */
        uint32_t rebias = (uint32_t)(127 - bias) << mbits;
        code = r - rebias;
        if (code > maxcode) code = maxcode;
    } else {
        /* steps of the smallest subnormal 2^(1 - bias - mbits) */
        float steps = f8i_bits_float(a) * ldexpf(1.0f, bias - 1 + mbits);
        code = (uint32_t)rintf(steps);
    }
    return (uint8_t)(sign | code);
}

/* FP8 code -> its exact FP32 value, built from the code's bits: a normal
 * code's exponent rebiased into FP32's above its mantissa, a subnormal's
 * mantissa times the format's smallest subnormal (one exact multiply, its
 * result normal in FP32). A NaN code (E4M3 S.1111.111, E5M2 S.11111.mm with
 * mm != 0) gives the quiet NaN 0x7FC00000 whatever its sign; E5M2 S.11111.00
 * gives +-inf. No ldexpf: kernels decode one or two codes an element (GEMM
 * tiles, AdamW's FP8 moments), and on the GPU ldexpf was most of the FP8
 * moments update's time (bench/RESULTS.md). */
F8I_HD float f8i_fp8_decode(uint8_t b, int e5m2)
{
    const uint32_t mbits = e5m2 ? 2u : 3u;
    const uint32_t bias = e5m2 ? 15u : 7u;
    const uint32_t emax = e5m2 ? 0x1Fu : 0xFu;
    const uint32_t e = ((uint32_t)b >> mbits) & emax;
    const uint32_t m = (uint32_t)b & ((1u << mbits) - 1u);
    const uint32_t sign = ((uint32_t)b & 0x80u) << 24;
    if (e == emax && (e5m2 ? m != 0u : m == 7u)) return f8i_bits_float(0x7FC00000u);
    if (e == emax && e5m2) return f8i_bits_float(sign | 0x7F800000u);
    if (e == 0u) return f8i_bits_float(sign | f8i_float_bits((float)m * (e5m2 ? 0x1p-16f : 0x1p-9f)));
    return f8i_bits_float(sign | (e + 127u - bias) << 23 | m << (23u - mbits));
}

/* The scale of current scaling (backend.h's f8i_amax_scale_args), the same
 * expression on the host and the device: scaled_max / amax for a finite
 * amax > 0, else the old scale; an infinite result becomes FLT_MAX; pow2
 * clears the mantissa bits (rounds down to a power of two, as TE does). */
F8I_HD float f8i_current_scale(float amax, float old_scale, float scaled_max, int pow2)
{
    float s = old_scale;
    if (amax > 0.0f && (f8i_float_bits(amax) & 0x7FFFFFFFu) < 0x7F800000u) s = scaled_max / amax;
    if ((f8i_float_bits(s) & 0x7FFFFFFFu) == 0x7F800000u) s = 3.40282346638528859812e+38f; /* FLT_MAX */
    if (pow2) s = f8i_bits_float(f8i_float_bits(s) & 0xFF800000u);
    return s;
}

/* splitmix64's output function: a 64-bit mix in which every input bit moves
 * every output bit (integer arithmetic only, so the host and the device get
 * the same bits). normal_fill.c steps it through a counter; the AdamW FP8
 * moments take their stochastic rounding's bits from it. */
F8I_HD uint64_t f8i_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#endif /* F8_NUMERICS_H */
