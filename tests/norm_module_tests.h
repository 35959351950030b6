/*
 * norm_module_tests.h — what test_layernorm_linear.c and test_layernorm_mlp.c
 * share: host buffers and transfers in FP32 or BF16, the FP64 references
 * (GEMMs, the norm forward and backward, the bound on the library's FP32 norm
 * output error), the pieces of the interval-aware FP8 oracle, TE's
 * assert_close, and reads of slots and weight workspaces. Each test keeps its
 * own module's FP64 model, fixture and tests.
 */
#ifndef F8_TESTS_NORM_MODULE_TESTS_H
#define F8_TESTS_NORM_MODULE_TESTS_H

#include "check.h"

#define NEED(cond, what)                                                         \
    do {                                                                         \
        if (!(cond)) die(what, NULL);                                            \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Host buffers and transfers                                                */
/* ------------------------------------------------------------------------ */

static inline float *fnew(size_t n) { return (float *)calloc(n ? n : 1, sizeof(float)); }
static inline double *dnew(size_t n) { return (double *)calloc(n ? n : 1, sizeof(double)); }

static inline void widen(const float *f, double *d, size_t n)
{
    for (size_t i = 0; i < n; i++) d[i] = f[i];
}

static inline void fill_normal(test_rng *r, float *v, size_t n, double mean, double sd)
{
    for (size_t i = 0; i < n; i++) v[i] = (float)(mean + sd * rng_normal(r));
}

/* What a tensor of dtype dt holds for v (BF16 rounds in place). */
static inline void as_stored(float *v, size_t n, f8_dtype dt)
{
    if (dt == F8_DTYPE_BF16)
        for (size_t i = 0; i < n; i++) v[i] = f8_bf16_to_float(f8_bf16_from_float(v[i]));
}

static inline void store(f8_ctx *ctx, void *dst, const float *v, size_t n, f8_dtype dt)
{
    if (dt == F8_DTYPE_FP32) {
        CHECK_OK(ctx, f8_ctx_upload(ctx, dst, v, n * 4));
        return;
    }
    uint16_t *h = (uint16_t *)xmalloc(n * 2);
    for (size_t i = 0; i < n; i++) h[i] = f8_bf16_from_float(v[i]);
    CHECK_OK(ctx, f8_ctx_upload(ctx, dst, h, n * 2));
    free(h);
}

static inline void load(f8_ctx *ctx, const void *src, f8_dtype dt, float *out, size_t n)
{
    if (dt == F8_DTYPE_FP32) {
        CHECK_OK(ctx, f8_ctx_download(ctx, out, src, n * 4));
        return;
    }
    uint16_t *h = (uint16_t *)xmalloc(n * 2);
    CHECK_OK(ctx, f8_ctx_download(ctx, h, src, n * 2));
    for (size_t i = 0; i < n; i++) out[i] = f8_bf16_to_float(h[i]);
    free(h);
}

/* A backend buffer holding v[n] as dt (v NULL: zeros). */
static inline void *put(f8_ctx *ctx, const float *v, size_t n, f8_dtype dt)
{
    void *p = NULL;
    if (f8_ctx_alloc(ctx, n * 4 + 64, &p) != F8_OK) die("f8_ctx_alloc", ctx);
    float *z = v ? NULL : fnew(n);
    store(ctx, p, v ? v : z, n, dt);
    free(z);
    return p;
}

/* ------------------------------------------------------------------------ */
/* FP64 references                                                           */
/* ------------------------------------------------------------------------ */

/* c[M,N] = a[M,K]·b[N,K]ᵀ (+ bias); absval: the same of |a|, |b|, |bias|. */
static inline void mm_nt(const double *a, const double *b, const double *bias, double *c, int64_t M, int64_t K, int64_t N,
                  int absval)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = bias ? (absval ? fabs(bias[n]) : bias[n]) : 0.0;
            for (int64_t k = 0; k < K; k++)
                s += absval ? fabs(a[m * K + k] * b[n * K + k]) : a[m * K + k] * b[n * K + k];
            c[m * N + n] = s;
        }
}

/* c[M,N] = a[M,K]·b[K,N]. */
static inline void mm_nn(const double *a, const double *b, double *c, int64_t M, int64_t K, int64_t N, int absval)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++) s += absval ? fabs(a[m * K + k] * b[k * N + n]) : a[m * K + k] * b[k * N + n];
            c[m * N + n] = s;
        }
}

/* c[M,N] = a[K,M]ᵀ·b[K,N] (weight gradients: dyᵀ·x). */
static inline void mm_tn(const double *a, const double *b, double *c, int64_t M, int64_t K, int64_t N, int absval)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++) s += absval ? fabs(a[k * M + m] * b[k * N + n]) : a[k * M + m] * b[k * N + n];
            c[m * N + n] = s;
        }
}

/* Norm forward with the biased variance; mu/rs [T] may be NULL. */
static inline void norm_fwd(const double *x, int64_t T, int64_t K, const double *gamma, const double *beta, int rms, int zc,
                     double eps, double *y, double *mu, double *rs)
{
    for (int64_t t = 0; t < T; t++) {
        const double *xr = x + t * K;
        double m = 0, v = 0;
        if (!rms) {
            for (int64_t k = 0; k < K; k++) m += xr[k];
            m /= (double)K;
        }
        for (int64_t k = 0; k < K; k++) v += (xr[k] - m) * (xr[k] - m);
        v /= (double)K;
        double r = 1.0 / sqrt(v + eps);
        for (int64_t k = 0; k < K; k++) {
            double g = zc ? 1.0 + gamma[k] : gamma[k];
            y[t * K + k] = (xr[k] - m) * r * g + (rms ? 0.0 : beta[k]);
        }
        if (mu) mu[t] = m;
        if (rs) rs[t] = r;
    }
}

/* Norm backward: dx, and dgamma/dbeta (overwritten; dbeta ignored for RMS). */
static inline void norm_bwd(const double *dy, const double *x, int64_t T, int64_t K, const double *gamma, int rms, int zc,
                     double eps, double *dx, double *dgamma, double *dbeta)
{
    double *mu = dnew((size_t)T), *rs = dnew((size_t)T), *y = dnew((size_t)(T * K));
    norm_fwd(x, T, K, gamma, gamma, rms, zc, eps, y, mu, rs); /* only the statistics are used */
    free(y);
    for (int64_t k = 0; k < K; k++) {
        dgamma[k] = 0;
        if (dbeta) dbeta[k] = 0;
    }
    for (int64_t t = 0; t < T; t++) {
        double s1 = 0, s2 = 0;
        for (int64_t k = 0; k < K; k++) {
            double xh = (x[t * K + k] - mu[t]) * rs[t], g = zc ? 1.0 + gamma[k] : gamma[k];
            s1 += g * dy[t * K + k];
            s2 += g * dy[t * K + k] * xh;
            dgamma[k] += dy[t * K + k] * xh;
            if (dbeta && !rms) dbeta[k] += dy[t * K + k];
        }
        s1 = rms ? 0.0 : s1 / (double)K;
        s2 /= (double)K;
        for (int64_t k = 0; k < K; k++) {
            double xh = (x[t * K + k] - mu[t]) * rs[t], g = zc ? 1.0 + gamma[k] : gamma[k];
            dx[t * K + k] = rs[t] * (g * dy[t * K + k] - s1 - xh * s2);
        }
    }
    free(mu), free(rs);
}

/* Per-element bound on the library's FP32 norm output ln [T,K] of x: FP32
 * sums of K terms for the statistics, a few roundings elementwise. */
static inline void norm_error_bound(const double *x, int64_t T, int64_t K, const double *gamma, const double *beta, int rms,
                             int zc, double eps, const double *ln, double *err)
{
    double *mu = dnew((size_t)T), *rs = dnew((size_t)T), *tmp = dnew((size_t)(T * K));
    norm_fwd(x, T, K, gamma, beta, rms, zc, eps, tmp, mu, rs);
    double c = 2e-7 * (double)K + 2e-6;
    for (int64_t t = 0; t < T; t++)
        for (int64_t k = 0; k < K; k++) {
            double g = fabs(zc ? 1.0 + gamma[k] : gamma[k]);
            err[t * K + k] = c * (fabs(ln[t * K + k]) + g * (1.0 + fabs(mu[t]) * rs[t]) + fabs(beta[k]));
        }
    free(mu), free(rs), free(tmp);
}

/* ------------------------------------------------------------------------ */
/* FP8 oracle pieces                                                         */
/* ------------------------------------------------------------------------ */

/* The value an FP8 cast of v with `scale` dequantizes to (FP32 product,
 * satfinite RNE, times the tensor's own 1/scale). */
static inline double fq(double v, float scale, f8_dtype dt)
{
    float code_value = f8_fp8_to_float(f8_fp8_from_float((float)v * scale, dt), dt);
    return (double)(code_value * (1.0f / scale));
}

/* fq(v), and in *amb how far the result moves when v moves by up to ±w. */
static inline double fq_amb(double v, double w, float scale, f8_dtype dt, double *amb)
{
    double q = fq(v, scale, dt);
    *amb = fmax(fabs(fq(v - w, scale, dt) - q), fabs(fq(v + w, scale, dt) - q));
    return q;
}

/* Elementwise |got - want| <= bound: the number of violations, and the index
 * with the largest |got - want| / bound. */
static inline size_t over_bound(const float *got, const double *want, const double *bound, size_t n, size_t *worst)
{
    size_t bad = 0;
    double wr = -1;
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        double r = fabs((double)got[i] - want[i]) / (bound[i] > 0 ? bound[i] : 1e-300);
        if (!(r <= 1.0)) bad++;
        if (!(r <= wr)) wr = r, *worst = i;
    }
    return bad;
}

/* TE's assert_close: |a - b| <= atol + rtol·|b| everywhere; the number of misses. */
static inline size_t te_misses(const float *a, const double *b, size_t n, double rtol, double atol, size_t *first)
{
    size_t bad = 0;
    *first = 0;
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)a[i] - b[i]) <= atol + rtol * fabs(b[i])))
            if (bad++ == 0) *first = i;
    return bad;
}

/* max over elements of |a - b| / (atol + rtol·|b|): 1 is the tolerance's edge. */
static inline double te_ratio(const float *a, const double *b, size_t n, double rtol, double atol)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]) / (atol + rtol * fabs(b[i])));
    return m;
}

/* ------------------------------------------------------------------------ */
/* Inputs, slots and workspaces                                              */
/* ------------------------------------------------------------------------ */


/* x with a row mean away from 0, so LayerNorm and RMSNorm differ. */
static inline void make_input(test_rng *r, float *x, int64_t T, int64_t K)
{
    for (int64_t t = 0; t < T; t++) {
        double mean = 1.5 * rng_normal(r), sd = 0.5 + rng_uniform(r);
        fill_normal(r, x + t * K, (size_t)K, mean, sd);
    }
}

static inline double rms_of(const float *v, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)v[i] * v[i];
    return sqrt(s / (double)(n ? n : 1));
}


/* Row 0 of a slot's amax history, and its scale. */
static inline float slot_amax(f8_ctx *ctx, f8_slot s, float *scale)
{
    int L = f8_ctx_recipe(ctx)->amax_history_len;
    float *h = fnew((size_t)L), a;
    CHECK_OK(ctx, f8_slot_read(ctx, s, scale, NULL, h));
    a = h[0];
    free(h);
    return a;
}

static inline double max_abs_d(const double *v, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(v[i]));
    return m;
}

static inline float max_abs_f(const float *v, size_t n)
{
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(v[i]));
    return m;
}


/* A weight workspace q [rows, cols] on the host: dequantized into wq, its
 * codes and scale_inv (each NULL: not read); returns its data view. */
static inline f8_tensor qtensor_host(f8_ctx *ctx, const f8_qtensor *q, int64_t rows, int64_t cols, double *wq, uint8_t *codes,
                              float *sinv)
{
    size_t n = (size_t)(rows * cols);
    void *buf = put(ctx, NULL, n, F8_DTYPE_FP32);
    f8_tensor t = f8_tensor_make(buf, F8_DTYPE_FP32, rows, cols), v;
    float *h = fnew(n);
    CHECK_OK(ctx, f8_qtensor_dequantize(q, &t));
    load(ctx, buf, F8_DTYPE_FP32, h, n);
    widen(h, wq, n);
    CHECK_OK(ctx, f8_qtensor_data(q, &v));
    if (codes) CHECK_OK(ctx, f8_ctx_download(ctx, codes, v.data, n));
    if (sinv) CHECK_OK(ctx, f8_ctx_download(ctx, sinv, v.scale_inv, 4));
    f8_ctx_free(ctx, buf);
    free(h);
    return v;
}

#endif
