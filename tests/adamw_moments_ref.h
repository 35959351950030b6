/*
 * adamw_moments_ref.h — test_adamw_moments.c's reference rounding of the
 * low-precision AdamW moments, written from the formats' definitions and
 * f8.h's contract (not from the library's code): E4M3 values, the
 * stochastic rounding with given bits, BF16 round to nearest even, the
 * blocks' power-of-two scales, and the acceptance of a stored value whose
 * FP32 inputs straddle a tie or a threshold.
 */
#ifndef F8_TESTS_ADAMW_MOMENTS_REF_H
#define F8_TESTS_ADAMW_MOMENTS_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* E4M3 code (sign in bit 7) -> value, from the format's definition. */
static inline double e4m3_value(int code)
{
    const int e = (code >> 3) & 15, mt = code & 7;
    const double a = e == 0 ? ldexp(mt, -9) : ldexp(8 + mt, e - 10);
    return code & 0x80 ? -a : a;
}

/* x (|x| <= 448) rounded stochastically as f8.h specifies with the bits r:
 * the code above |x| when |x| > lo + u·(hi - lo), u = (r >> 8)·2^-24, lo and hi
 * the codes around |x| (*lo, *hi; both |x| when it is a code), *thr that
 * threshold (|x| on a code). */
static inline double e4m3_sr(double x, uint32_t r, double *thr, double *lo, double *hi)
{
    const double a = fabs(x);
    int c_lo = 0;
    for (int c = 1; c <= 126; c++)
        if (e4m3_value(c) <= a) c_lo = c;
    *lo = *hi = *thr = e4m3_value(c_lo);
    if (*lo == a || c_lo == 126) return x < 0 ? -*lo : *lo;
    *hi = e4m3_value(c_lo + 1);
    *thr = *lo + ldexp((double)(r >> 8), -24) * (*hi - *lo);
    const double q = a > *thr ? *hi : *lo;
    return x < 0 ? -q : q;
}

/* x rounded to BF16 (8 significant bits), ties to even. */
static inline double bf16_round(double x)
{
    if (x == 0) return 0;
    int e;
    frexp(fabs(x), &e);
    const double ulp = ldexp(1, e - 8);
    return (x < 0 ? -1 : 1) * rint(fabs(x) / ulp) * ulp;
}

static inline double bf16_value(uint16_t b)
{
    const uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* 2^floor(log2(448 / amax)); 1 for amax = 0. */
static inline double pow2_scale(double amax)
{
    if (amax == 0) return 1;
    int e;
    frexp(448.0 / amax, &e);
    return ldexp(1, e - 1);
}

/* A stored value b differs from the reference's rounding a of x only at a
 * tie the FP32 arithmetic (error <= err) may break either way. */
static inline int tie_ok(double x, double a, double b, double err) { return a == b || fabs(x - (a + b) / 2) <= err; }

/* A stored FP8 value b of x (scaled) against the reference's stochastic
 * rounding with bits r: equal, or the interval's other code where x's FP32
 * error err reaches the threshold, or a code within err of x. *off: 1 if b
 * is not the reference's value. */
static inline int sr_ok(double x, double b, uint32_t r, double err, int *off)
{
    double thr, lo, hi;
    const double q = e4m3_sr(x, r, &thr, &lo, &hi), a = fabs(x), bb = fabs(b);
    *off = q != b;
    return !*off || (fabs(a - thr) <= err && (bb == lo || bb == hi)) || fabs(bb - a) <= err;
}

#endif
