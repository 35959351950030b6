/*
 * cpu/act.c — the reference activations of backend.h's act_fwd and act_bwd
 * contracts, forward and exact derivative side by side.
 *
 * Design note. Everything is FP32 with libm's tanhf and expf, each formula in
 * one fixed order (-ffp-contract=off keeps it); the CUDA backend's
 * transcendentals differ in the last bits, which is why the contract asks for
 * a tolerance here and not bits. The gated activations see a row of x as
 * [a | b] (cols each) and produce act(a)·b. The backward computes d, the
 * gradient with respect to x, into an FP32 temporary and hands it to the
 * cast (f8i_cpu_cast) for the fused FP8 outputs, so "the fused cast of d"
 * is literally the cast of FP32 d: bit for bit what the cast op gives on an
 * FP32 dx. The temporary is allocated per call (the oracle may). The
 * forward's transposed codes (y_t) are the same codes as y's. Row-wise
 * codes (F8I_ROW_FUSED) are the row-wise cast's of the values rounded to
 * the high-precision dtype (f8i_cpu_rowwise_fused_row, row by row, which
 * also takes the column amaxes col_amax asks for).
 */
#include <math.h>
#include <stdlib.h>

#include "core/f8i.h"
#include "core/numerics.h"
#include "core/rowwise.h"
#include "cpu/element.h"

f8_status f8i_cpu_cast_run(f8_ctx *ctx, const f8i_cast_args *args); /* cpu/backend.c: uncounted */

#define GELU_K 0.79788456f /* sqrt(2/pi), as f8.h writes it */
#define GELU_C 0.044715f
#define QGELU_K 1.702f

static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* The elementwise function of each activation (the gated ones: the function
 * applied to a). */
static float act_f(f8_activation act, float x)
{
    switch (act) {
    case F8_ACT_GELU:
    case F8_ACT_GEGLU: {
        float t = tanhf(GELU_K * (x + GELU_C * (x * x * x)));
        return 0.5f * x * (1.0f + t);
    }
    case F8_ACT_RELU:
    case F8_ACT_REGLU: return x > 0.0f ? x : 0.0f;
    case F8_ACT_SWIGLU: return x * sigmoid(x);
    case F8_ACT_QGELU: return x * sigmoid(QGELU_K * x);
    case F8_ACT_SRELU: {
        float p = x > 0.0f ? x : 0.0f;
        return p * p;
    }
    }
    return 0.0f;
}

/* Its exact derivative. With t = tanh(u), u = k(x + c·x³), s = sigmoid(·):
 *   gelu'  = 0.5(1 + t) + 0.5x(1 - t²)·k(1 + 3c·x²)
 *   relu'  = [x > 0]                      (0 at the kink)
 *   silu'  = s + x·s(1 - s),               s = sigmoid(x)
 *   qgelu' = s + 1.702x·s(1 - s),          s = sigmoid(1.702x)
 *   srelu' = 2·max(x, 0) */
static float act_df(f8_activation act, float x)
{
    switch (act) {
    case F8_ACT_GELU:
    case F8_ACT_GEGLU: {
        float x2 = x * x;
        float t = tanhf(GELU_K * (x + GELU_C * (x2 * x)));
        float du = GELU_K * (1.0f + 3.0f * GELU_C * x2);
        return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
    }
    case F8_ACT_RELU:
    case F8_ACT_REGLU: return x > 0.0f ? 1.0f : 0.0f;
    case F8_ACT_SWIGLU: {
        float s = sigmoid(x);
        return s + x * s * (1.0f - s);
    }
    case F8_ACT_QGELU: {
        float s = sigmoid(QGELU_K * x);
        return s + QGELU_K * x * s * (1.0f - s);
    }
    case F8_ACT_SRELU: return x > 0.0f ? 2.0f * x : 0.0f;
    }
    return 0.0f;
}

/* The row-wise cast of rows [rows, n] of already rounded values (F8I_ROW_FUSED):
 * codes, per-row scale_inv, amax and telemetry, as the row-wise cast, and
 * the column amaxes (col_amax [n], or NULL). */
static void row_codes(const float *u, int64_t rows, int64_t n, f8_dtype out_dtype, float scaled_max, int pow2,
                      uint8_t *out, float *scale_inv, float *amax, uint64_t *stats, float *col_amax)
{
    uint64_t tally[3] = {0, 0, 0};
    float m = 0.0f;
    for (int64_t c = 0; col_amax && c < n; c++) col_amax[c] = 0.0f;
    for (int64_t r = 0; r < rows; r++) {
        const float si = f8i_cpu_rowwise_fused_row(u + r * n, n, out_dtype, scaled_max, pow2, out + r * n, &m,
                                                   stats ? tally : NULL, col_amax);
        if (scale_inv) scale_inv[r] = si;
    }
    if (amax) *amax = fmaxf(*amax, m);
    if (stats) {
        stats[0] += (uint64_t)(rows * n);
        stats[1] += tally[1];
        stats[2] += tally[2];
    }
}

/* The forward under F8I_ROW_FUSED: v rounded to hp_dtype (u, stored in y_hp
 * if set), then each row's cast. */
static f8_status row_fwd(f8_ctx *ctx, const f8i_act_fwd_args *a)
{
    const int gated = f8_activation_gated(a->act);
    const int64_t rows = a->rows, cols = a->cols, cols_in = gated ? 2 * cols : cols;
    if (rows == 0 || cols == 0) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1);
    float *u = (float *)malloc((size_t)(rows * cols) * sizeof(float));
    if (!u) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "cpu activation forward: out of host memory");
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float v = act_f(a->act, f8i_hp_load(a->x, a->x_dtype, r * cols_in + c));
            if (gated) v = v * f8i_hp_load(a->x, a->x_dtype, r * cols_in + cols + c);
            u[r * cols + c] = f8i_round_to(a->hp_dtype, v);
            if (a->y_hp) f8i_hp_store(a->y_hp, a->hp_dtype, r * cols + c, v);
        }
    row_codes(u, rows, cols, a->y_dtype, a->scaled_max, a->pow2, (uint8_t *)a->y, a->scale_inv, a->amax, a->stats,
              a->col_amax);
    free(u);
    return F8_OK;
}

f8_status f8i_cpu_act_fwd(f8_ctx *ctx, const f8i_act_fwd_args *a)
{
    const int gated = f8_activation_gated(a->act);
    const int64_t cols = a->cols, cols_in = gated ? 2 * cols : cols;
    const int fp8 = f8i_dtype_is_fp8(a->y_dtype);
    const int row = fp8 && a->mode == F8I_SCALING_ROW; /* F8I_ROW_FUSED (backend.h) */
    if (row) return row_fwd(ctx, a);
    if ((a->rows == 0 || cols == 0) && !(fp8 && a->scale_inv)) return F8_OK; /* nothing to write */
    F8I_COUNT_LAUNCHES(ctx, 1);
    const int e5m2 = a->y_dtype == F8_DTYPE_E5M2;
    const float scale = fp8 ? *a->scale : 1.0f;
    const float fmax = e5m2 ? 57344.0f : 448.0f;
    float amax = 0.0f;
    uint64_t sat = 0, flushed = 0; /* telemetry, counted as the cast counts */
    for (int64_t r = 0; r < a->rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            float v = act_f(a->act, f8i_hp_load(a->x, a->x_dtype, r * cols_in + c));
            if (gated) v = v * f8i_hp_load(a->x, a->x_dtype, r * cols_in + cols + c);
            const int64_t i = r * cols + c;
            if (fp8) {
                const uint8_t code = f8i_fp8_encode(v * scale, e5m2);
                amax = fmaxf(amax, fabsf(v));
                sat += fabsf(v * scale) > fmax;
                flushed += v != 0.0f && (code & 0x7Fu) == 0;
                if (a->y) ((uint8_t *)a->y)[i] = code;
                if (a->y_t) a->y_t[c * a->rows + r] = code;
            } else {
                f8i_hp_store(a->y, a->y_dtype, i, v);
            }
        }
    }
    if (fp8 && a->amax) *a->amax = fmaxf(*a->amax, amax);
    if (fp8 && a->scale_inv) *a->scale_inv = 1.0f / scale;
    if (fp8 && a->stats) {
        a->stats[0] += (uint64_t)(a->rows * cols);
        a->stats[1] += sat;
        a->stats[2] += flushed;
    }
    return F8_OK;
}

f8_status f8i_cpu_act_bwd(f8_ctx *ctx, const f8i_act_bwd_args *a)
{
    const int gated = f8_activation_gated(a->act);
    const int64_t rows = a->rows, cols = a->cols, cols_in = gated ? 2 * cols : cols;
    const size_t count = (size_t)(rows * cols_in);
    if (count == 0 && (!a->scale_inv || a->mode == F8I_SCALING_ROW)) return F8_OK; /* nothing to write */
    if (a->dbias && count > 0) { /* the contract both backends check */
        F8I_TRY(f8i_check_reduce_workspace(ctx, a->workspace, a->workspace_bytes, rows, cols_in,
                                                  "activation backward"));
    }
    F8I_COUNT_LAUNCHES(ctx, 1); /* one op: the fused cast below is part of it */
    float *d = (float *)malloc((count ? count : 1) * sizeof(float)); /* [rows, cols_in] */
    if (!d) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "cpu activation backward: out of host memory");
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            const float x = f8i_hp_load(a->x, a->x_dtype, r * cols_in + c);
            const float dy = f8i_hp_load(a->dy, a->dy_dtype, r * cols + c);
            if (gated) {
                /* v = act(a)·b: d_a = act'(a)·b·dy, d_b = act(a)·dy. */
                const float b = f8i_hp_load(a->x, a->x_dtype, r * cols_in + cols + c);
                d[r * cols_in + c] = act_df(a->act, x) * b * dy;
                d[r * cols_in + cols + c] = act_f(a->act, x) * dy;
            } else {
                d[r * cols_in + c] = act_df(a->act, x) * dy;
            }
        }
    }
    if (a->dx)
        for (size_t i = 0; i < count; i++) f8i_hp_store(a->dx, a->dx_dtype, (int64_t)i, d[i]);
    if (a->mode == F8I_SCALING_ROW && a->out) { /* F8I_ROW_FUSED: the row-wise codes of d rounded to dx_dtype */
        for (size_t i = 0; i < count; i++) d[i] = f8i_round_to(a->dx_dtype, d[i]);
        row_codes(d, rows, cols_in, a->out_dtype, a->scaled_max, a->pow2, a->out, a->scale_inv, a->amax, a->stats,
                  a->col_amax);
        free(d);
        return F8_OK;
    }
    f8_status st = F8_OK;
    if (a->out || a->out_t || a->amax || a->scale_inv || a->dbias) {
        const float one = 1.0f; /* the cast reads *scale even when only dbias is asked for */
        f8i_cast_args c = {
            .src = d,
            .src_dtype = F8_DTYPE_FP32,
            .rows = rows,
            .cols = cols_in,
            .out_dtype = a->out_dtype,
            .out = a->out,
            .out_t = a->out_t,
            .scale = a->scale ? a->scale : &one,
            .amax = a->amax,
            .scale_inv = a->scale_inv,
            .dbias = a->dbias,
            .dbias_dtype = a->dbias_dtype,
            .dbias_accumulate = a->dbias_accumulate,
            .noop = NULL,
            .stats = a->out || a->out_t ? a->stats : NULL, /* counted only where codes are written */
        };
        st = f8i_cpu_cast_run(ctx, &c);
    }
    free(d);
    return st;
}
