/*
 * modules/norm.h — the norm in front of LayerNormLinear and LayerNormMLP:
 * gamma, beta and their gradients, and the forward/backward calls that fill
 * the backend's norm args from them.
 */
#ifndef F8_MODULES_NORM_H
#define F8_MODULES_NORM_H

#include "core/ops.h"

typedef struct f8i_norm {
    void *pblock, *gblock;  /* gamma, beta | dgamma, dbeta (each (cols) param dtype) */
    void *gamma, *beta, *dgamma, *dbeta; /* beta, dbeta NULL for RMSNorm */
    f8_dtype dtype;
    int64_t cols;
    int rms, zero_centered;
    float eps;
} f8i_norm;

/* What the norm's forward keeps for the backward, the same in LayerNormLinear
 * and LayerNormMLP (placed by f8i_norm_saved_place, module.h): the norm
 * output ln [T, K] (FP8 codes, or the param dtype without FP8) with its
 * scale_inv; under recompute_norm no ln, and the scale its cast used
 * instead; the statistics; under block scaling the column-wise copy lnt
 * [K, T] with its own 1x128 tiles (the wgrad operand: quantized, not
 * transposed). */
typedef struct f8i_norm_saved {
    void *ln;           /* (T, K) FP8 or param dtype; NULL with recompute_norm */
    float *ln_sinv;     /* NULL with recompute_norm */
    float *scale;       /* recompute_norm: the scale the input cast used (scalar), else NULL */
    float *mu, *rsigma; /* (T) */
    uint8_t *lnt;       /* block and row-wise scaling: ln8ᵀ (K, T), else NULL */
    float *lnt_sinv;
    void *ln_hp;        /* wgrad_hp: the norm output (T, K) in param dtype (the wgrad operand;
                           no lnt then), else NULL */
} f8i_norm_saved;

/* gamma = 1 (0 when zero-centred, so g = 1 either way), beta = 0, grads 0. */
f8_status f8i_norm_create(f8_ctx *ctx, f8i_norm *n, int64_t cols, f8_norm kind, float eps, int zero_centered,
                          f8_dtype dtype, f8_memory_report *acct);
void f8i_norm_destroy(f8_ctx *ctx, f8i_norm *n);
f8_status f8i_norm_zero_grad(f8_ctx *ctx, f8i_norm *n);

/* View of gamma/beta (grad 0) or their gradients (grad 1), [1, cols]; NULL
 * data for beta of an RMSNorm. */
f8_tensor f8i_norm_view(const f8i_norm *n, int beta, int grad);

/* y = norm(x) [T, cols] in y_dtype; FP8 y is cast through slot (its scale,
 * amax and telemetry counters; NULL for FP32/BF16 y) and writes scale_inv;
 * mu and rsigma (T) FP32. */
f8_status f8i_norm_forward(f8_ctx *ctx, const f8i_norm *n, const f8_tensor *x, void *y, f8_dtype y_dtype,
                           const f8_slot *slot, float *scale_inv, float *mu, float *rsigma);

/* y = norm(x) [T, cols] as FP8 row-wise codes, the row-wise cast fused
 * into the norm (backend.h's F8I_ROW_FUSED; the quantizer's fused_rows):
 * each row's scale_inv [T], the slot's amax and telemetry; the output
 * rounded to the param dtype first, which is also written to hp [T, cols]
 * (the column-wise copy's source) unless hp is NULL, and its column amaxes
 * to col_amax [cols] (the copy's cast then skips measuring them) unless
 * col_amax is NULL. */
f8_status f8i_norm_forward_rows(f8_ctx *ctx, const f8i_norm *n, const f8_tensor *x, void *y, f8_dtype y_dtype,
                                f8_slot slot, float *scale_inv, void *hp, float *col_amax, float *mu, float *rsigma);

/* The same norm into FP8 y cast with `scale` (device scalar), scale_inv
 * written, recording nothing (no amax, no telemetry, no statistics): the
 * backward's recompute of a forward's output (recompute_norm_output). */
f8_status f8i_norm_forward_scaled(f8_ctx *ctx, const f8i_norm *n, const f8_tensor *x, void *y, f8_dtype y_dtype,
                                  const float *scale, float *scale_inv);

/* dx (may be NULL; dx_add: dx += it, one rounding) from dy [T, cols]
 * (FP32/BF16), x and the saved statistics; dgamma, dbeta accumulate.
 * reduce: the backend's workspace, f8i_reduce_workspace_bytes(T, cols) bytes. */
f8_status f8i_norm_backward(f8_ctx *ctx, f8i_norm *n, const void *dy, f8_dtype dy_dtype, const f8_tensor *x,
                            const float *mu, const float *rsigma, void *dx, f8_dtype dx_dtype, int dx_add,
                            void *reduce);

/* Checks shared by the module configs. */
f8_status f8i_norm_config_check(f8_ctx *ctx, const char *fn, f8_norm kind, float eps);

#endif /* F8_MODULES_NORM_H */
