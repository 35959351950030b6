/*
 * rowwise_fixture.h — inputs and the FP64 GEMM reference that test_rowwise.c
 * (the CPU oracle against the definition) and test_cuda_rowwise.c (CUDA
 * against the CPU) share: rows of very different magnitudes, so row and
 * column scales differ, with the edge cases of core/rowwise.h planted.
 */
#ifndef F8_TESTS_ROWWISE_FIXTURE_H
#define F8_TESTS_ROWWISE_FIXTURE_H

#include <float.h>

#include "check.h"
#include "core/rowwise.h"

/* src [R, C] as FP32: normal values whose magnitude varies by row and by
 * column (2^-12 .. 2^11). With specials, where the shape has room: row 1
 * all zero, row 2 holds +inf, row 3 a NaN, row 4 denormals only (amax ~1e-40:
 * the scale overflows to FLT_MAX), row 5 near FLT_MAX, column 2 all zero
 * below row 5, and exact powers of two in row 6 (pow2 scales exact). */
static void rowwise_fill(float *h, int64_t R, int64_t C, test_rng *rng, int specials)
{
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            const float mag = ldexpf(1.0f, (int)((r * 5 + c / 9) % 24) - 12);
            h[r * C + c] = (float)rng_normal(rng) * mag;
        }
    if (!specials) return;
    for (int64_t c = 0; c < C; c++) {
        if (R > 1) h[1 * C + c] = 0.0f;
        if (R > 4) h[4 * C + c] = (float)rng_normal(rng) * 1e-40f;
        if (R > 5) h[5 * C + c] = (float)(rng_uniform(rng) * 2.0 - 1.0) * 3.0e38f;
        if (R > 6) h[6 * C + c] = ldexpf(c % 2 ? -1.0f : 1.0f, (int)(c % 7) - 3);
    }
    if (R > 2) h[2 * C + C / 2] = INFINITY;
    if (R > 3) h[3 * C + C / 3] = NAN;
    for (int64_t r = 7; C > 2 && r < R; r++) h[r * C + 2] = 0.0f;
}

/* The values a BF16 source holds: h rounded to BF16 (h is overwritten with
 * what the cast reads) and the BF16 bits in b. */
static void rowwise_to_bf16(float *h, uint16_t *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        b[i] = f8_bf16_from_float(h[i]);
        h[i] = f8_bf16_to_float(b[i]);
    }
}

/* FP64 reference of D = Σ_k A·B·sa[i]·sb[j] (+ c) (+ bias) for all of
 * D [m, n] into ref, and the magnitude Σ|a·b| (+|c| + |bias|) each bound
 * scales with into mag. c and bias are FP32 here (the caller passes the
 * values D's dtype rounded them to), either may be NULL. */
static void rowwise_ref(const uint8_t *a, f8_dtype at, const float *sa, const uint8_t *b, f8_dtype bt, const float *sb,
                        int64_t m, int64_t n, int64_t k, const float *c, const float *bias, double *ref, double *mag)
{
    double *x = (double *)xmalloc((size_t)(m * k + 1) * sizeof(double));
    double *y = (double *)xmalloc((size_t)(n * k + 1) * sizeof(double));
    for (int64_t i = 0; i < m * k; i++) x[i] = (double)f8_fp8_to_float(a[i], at) * sa[i / k];
    for (int64_t i = 0; i < n * k; i++) y[i] = (double)f8_fp8_to_float(b[i], bt) * sb[i / k];
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double r = 0, g = 0;
            for (int64_t kk = 0; kk < k; kk++) {
                const double p = x[i * k + kk] * y[j * k + kk];
                r += p;
                g += fabs(p);
            }
            if (c) r += c[i * n + j], g += fabs(c[i * n + j]);
            if (bias) r += bias[j], g += fabs(bias[j]);
            ref[i * n + j] = r;
            mag[i * n + j] = g;
        }
    free(x);
    free(y);
}

#endif /* F8_TESTS_ROWWISE_FIXTURE_H */
