/*
 * cpu/norm.c — the reference LayerNorm / RMSNorm of backend.h's norm_fwd and
 * norm_bwd contracts.
 *
 * Design note. The contract lets each backend pick its FP32 summation order
 * and asks only for agreement within a tolerance; the oracle picks the most
 * accurate order it can afford: every reduction (a row's sum, sum of squares,
 * the backward's two row means, the column sums of dgamma/dbeta) runs in
 * double over the FP32 operands and is rounded to float once. The variance is
 * two-pass (Σ(x - mean)² around the double mean), so a row with a large
 * offset and a small spread loses nothing. What the other side of the seam
 * sees is FP32, as the contract says: mu and the mean square are rounded to
 * float, rsigma = 1.0f / sqrtf(var_f + eps) in float, and every elementwise
 * step ((x - mu) · rsigma · g + beta, the backward's bracket) is FP32 in a
 * fixed order, so a GPU kernel can be compared element by element. FP8 y is
 * the cast's arithmetic: fp8(v · scale) with the FP32 product (the file is
 * built with -ffp-contract=off), amax over |v| with fmaxf (NaN ignored).
 * Row-wise codes (F8I_ROW_FUSED) round each row's v to the param dtype and
 * hand the row to f8i_cpu_rowwise_fused_row, the row-wise cast's arithmetic
 * (and the column amaxes' for col_amax).
 * The column sums allocate a temporary per call (this is the oracle, not a
 * fast path); the args' workspace is still checked, as the CUDA backend
 * does, so a caller that passes too little fails on both.
 */
#include <math.h>
#include <stdlib.h>

#include "core/f8i.h"
#include "core/numerics.h"
#include "core/rowwise.h"
#include "cpu/element.h"

/* g = gamma, or 1 + gamma with zero_centered (in float). */
static inline float gain(const void *gamma, f8_dtype dt, int zero_centered, int64_t c)
{
    float g = f8i_hp_load(gamma, dt, c);
    return zero_centered ? 1.0f + g : g;
}

f8_status f8i_cpu_norm_fwd(f8_ctx *ctx, const f8i_norm_fwd_args *a)
{
    const int64_t cols = a->cols;
    const double n = cols > 0 ? (double)cols : 1.0; /* cols = 0: empty means, no NaN */
    const int fp8 = f8i_dtype_is_fp8(a->y_dtype);
    const int row = fp8 && a->mode == F8I_SCALING_ROW; /* F8I_ROW_FUSED (backend.h) */
    if (row && (a->rows <= 0 || cols <= 0)) return F8_OK; /* F8I_ROW_FUSED: nothing is written */
    if (a->rows <= 0 && !(fp8 && a->scale_inv && !row)) return F8_OK; /* nothing to write */
    F8I_COUNT_LAUNCHES(ctx, 1);
    /* row-wise: the row's values rounded to hp_dtype, then the row's cast */
    float *u = row ? (float *)malloc((size_t)(cols > 0 ? cols : 1) * sizeof(float)) : NULL;
    if (row && !u) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "cpu norm forward: out of host memory");
    float *col_amax = row ? a->col_amax : NULL; /* the column amaxes of u, from 0 */
    for (int64_t c = 0; col_amax && c < cols; c++) col_amax[c] = 0.0f;
    const int e5m2 = a->y_dtype == F8_DTYPE_E5M2;
    const float scale = fp8 && !row ? *a->scale : 1.0f;
    const float fmax = e5m2 ? 57344.0f : 448.0f;
    float amax = 0.0f;
    uint64_t sat = 0, flushed = 0; /* telemetry, counted as the cast counts */
    for (int64_t r = 0; r < a->rows; r++) {
        const int64_t base = r * cols;
        float mu = 0.0f, ms; /* ms: the mean square around mu (LN) or around 0 (RMS) */
        if (a->rms) {
            double s2 = 0.0;
            for (int64_t c = 0; c < cols; c++) {
                double x = f8i_hp_load(a->x, a->x_dtype, base + c);
                s2 += x * x;
            }
            ms = (float)(s2 / n);
        } else {
            double s = 0.0, s2 = 0.0;
            for (int64_t c = 0; c < cols; c++) s += f8i_hp_load(a->x, a->x_dtype, base + c);
            const double mean = s / n;
            for (int64_t c = 0; c < cols; c++) {
                double d = f8i_hp_load(a->x, a->x_dtype, base + c) - mean;
                s2 += d * d;
            }
            mu = (float)mean;
            ms = (float)(s2 / n);
        }
        const float rsigma = 1.0f / sqrtf(ms + a->eps);
        if (a->mu && !a->rms) a->mu[r] = mu;
        if (a->rsigma) a->rsigma[r] = rsigma;
        for (int64_t c = 0; c < cols; c++) {
            const float x = f8i_hp_load(a->x, a->x_dtype, base + c);
            const float g = gain(a->gamma, a->param_dtype, a->zero_centered, c);
            float v;
            if (a->rms) v = (x * rsigma) * g;
            else v = ((x - mu) * rsigma) * g + f8i_hp_load(a->beta, a->param_dtype, c);
            if (row) {
                u[c] = f8i_round_to(a->hp_dtype, v);
                if (a->y_hp) f8i_hp_store(a->y_hp, a->hp_dtype, base + c, v);
            } else if (fp8) {
                const uint8_t q = f8i_fp8_encode(v * scale, e5m2);
                amax = fmaxf(amax, fabsf(v));
                sat += fabsf(v * scale) > fmax;
                flushed += v != 0.0f && (q & 0x7Fu) == 0;
                ((uint8_t *)a->y)[base + c] = q;
            } else {
                f8i_hp_store(a->y, a->y_dtype, base + c, v);
            }
        }
        if (row) {
            uint64_t tally[3] = {0, 0, 0};
            const float si = f8i_cpu_rowwise_fused_row(u, cols, a->y_dtype, a->scaled_max, a->pow2,
                                                       (uint8_t *)a->y + base, &amax, tally, col_amax);
            if (a->scale_inv) a->scale_inv[r] = si;
            sat += tally[1];
            flushed += tally[2];
        }
    }
    free(u);
    if (fp8 && a->amax) *a->amax = fmaxf(*a->amax, amax);
    if (fp8 && a->scale_inv && !row) *a->scale_inv = 1.0f / scale;
    if (fp8 && a->stats) {
        a->stats[0] += (uint64_t)(a->rows * cols);
        a->stats[1] += sat;
        a->stats[2] += flushed;
    }
    return F8_OK;
}

f8_status f8i_cpu_norm_bwd(f8_ctx *ctx, const f8i_norm_bwd_args *a)
{
    const int64_t rows = a->rows, cols = a->cols;
    const double n = cols > 0 ? (double)cols : 1.0;
    if (cols <= 0) return F8_OK; /* nothing to write */
    if ((a->dgamma || a->dbeta) && rows > 0) { /* the contract both backends check */
        F8I_TRY(f8i_check_reduce_workspace(ctx, a->workspace, a->workspace_bytes, rows, cols, "norm backward"));
    }
    F8I_COUNT_LAUNCHES(ctx, 1);
    /* colsum[0, cols): Σ dy·xhat (dgamma); colsum[cols, 2·cols): Σ dy (dbeta). */
    double *colsum = (double *)calloc((size_t)(cols > 0 ? 2 * cols : 1), sizeof(double));
    if (!colsum) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "cpu norm backward: out of host memory");
    for (int64_t r = 0; r < rows; r++) {
        const int64_t base = r * cols;
        const float rs = a->rsigma[r];
        const float mu = a->rms ? 0.0f : a->mu[r];
        /* The two row means of the bracket, over FP32 gdy and xhat, in double. */
        double m1 = 0.0, m2 = 0.0;
        for (int64_t c = 0; c < cols; c++) {
            const float x = f8i_hp_load(a->x, a->x_dtype, base + c);
            const float dy = f8i_hp_load(a->dy, a->dy_dtype, base + c);
            const float xhat = a->rms ? x * rs : (x - mu) * rs;
            const float gdy = gain(a->gamma, a->param_dtype, a->zero_centered, c) * dy;
            m1 += gdy;
            m2 += (double)gdy * xhat;
            colsum[c] += (double)dy * xhat;
            colsum[cols + c] += dy;
        }
        const float mean_gdy = a->rms ? 0.0f : (float)(m1 / n);
        const float mean_gdy_xhat = (float)(m2 / n);
        if (!a->dx) continue;
        for (int64_t c = 0; c < cols; c++) {
            const float x = f8i_hp_load(a->x, a->x_dtype, base + c);
            const float dy = f8i_hp_load(a->dy, a->dy_dtype, base + c);
            const float xhat = a->rms ? x * rs : (x - mu) * rs;
            const float gdy = gain(a->gamma, a->param_dtype, a->zero_centered, c) * dy;
            /* rsigma · (gdy - mean(gdy) - xhat · mean(gdy·xhat)); RMS has no mean(gdy) term (0 here). */
            const float d = ((gdy - mean_gdy) - xhat * mean_gdy_xhat) * rs;
            /* dx_accumulate: the old dx joins the FP32 value, one rounding */
            f8i_hp_store(a->dx, a->dx_dtype, base + c,
                         a->dx_accumulate ? d + f8i_hp_load(a->dx, a->dx_dtype, base + c) : d);
        }
    }
    /* Per the formula: with rows = 0 the sums are 0, so overwriting writes 0. */
    for (int64_t c = 0; c < cols; c++) {
        if (a->dgamma) {
            float prev = a->accumulate ? f8i_hp_load(a->dgamma, a->param_dtype, c) : 0.0f;
            f8i_hp_store(a->dgamma, a->param_dtype, c, prev + (float)colsum[c]);
        }
        if (a->dbeta && !a->rms) {
            float prev = a->accumulate ? f8i_hp_load(a->dbeta, a->param_dtype, c) : 0.0f;
            f8i_hp_store(a->dbeta, a->param_dtype, c, prev + (float)colsum[cols + c]);
        }
    }
    free(colsum);
    return F8_OK;
}
