/*
 * modules/weight.h — one weight of a module with everything that hangs off
 * it: master parameter and gradient, optional bias and its gradient, the FP8
 * workspace with its microbatch rule, the caller's main_grad, and the three
 * GEMMs that use it. Linear, LayerNormLinear and LayerNormMLP (twice) are
 * built from it, so the workspace rule and the GEMM layouts exist once.
 *
 * Layouts (row-major, D[m, n] = Σ_k A(m, k)·B(n, k)), W [rows, cols]:
 *   fprop  y[T, rows]  = a · Wᵀ (+ b)   FP8: A = a8 [T, cols], B = W8          (fast accumulation)
 *   dgrad  dx[T, cols] = g · W          FP8: A = g8 [T, rows], B = W8ᵀ [cols, rows] (split)
 *   wgrad  dW[rows, cols] (+)= gᵀ · a   FP8: A = g8ᵀ [rows, T], B = a8ᵀ [cols, T]   (split)
 * FP8 off the same products run in the parameter dtype with trans flags.
 */
#ifndef F8_MODULES_WEIGHT_H
#define F8_MODULES_WEIGHT_H

#include "core/operand.h"
#include "core/ops.h"
#include "core/qtensor.h"
#include "core/quantizer.h"

typedef struct f8i_weight {
    void *pblock;      /* parameters: w (unless FP8 primary), b, ones */
    void *gblock;      /* gradients: dw, db (NULL when there are neither) */
    void *w, *dw;      /* (rows, cols) param dtype; w NULL for an FP8 primary weight, dw NULL when fused */
    void *b, *db;      /* (rows) or NULL */
    void *ones;        /* (max_tokens) param dtype: FP8-off bias gradient = ones · g */
    f8_dtype dtype;
    int64_t rows, cols;
    int fp8;
    int fp8_primary;   /* w8 IS the parameter (TE's fp8_model_init) */
    f8_qtensor *w8;    /* FP8 workspace (rows, cols); its transpose is allocated on first need */
    int w8_filled;     /* the workspace holds a cast of the current weight (always 1 for primary) */
    f8_slot slot;      /* forward WEIGHT slot */
    float *main_grad;  /* caller's FP32 (rows, cols) with fuse_wgrad_accumulation */
    int fuse_wgrad;
    int transpose_per_call; /* FP8: W8ᵀ made by each dgrad in the pass's workspace, never cached in w8 */
} f8i_weight;

/* What f8i_weight_create needs; acct is the owning module's memory report. */
typedef struct f8i_weight_spec {
    int64_t rows, cols;
    int bias;
    f8_dtype dtype;
    int fp8, fp8_primary, fuse_wgrad;
    f8_slot slot;
    int64_t max_tokens;
    uint64_t seed;
    f8_memory_report *acct;
    f8i_scaling_mode mode; /* the weight quantizer's: TENSOR, BLOCK_128X128 or ROW (its workspace holds their scales) */
    int transpose_per_call; /* FP8 per-tensor: no cached W8ᵀ (config.weight_transpose_per_call) */
} f8i_weight_spec;

/* Allocate and initialise (W ~ N(0, 0.02²) from seed, b = 0, grads 0). An
 * FP8 primary weight is that init quantized with the slot's scale (no amax
 * recorded, as TE's fp8_model_init). transpose_per_call with FP8 needs the
 * TENSOR mode (block and row-wise workspaces quantize both orientations):
 * F8_ERR_UNSUPPORTED otherwise. */
f8_status f8i_weight_create(f8_ctx *ctx, f8i_weight *w, const f8i_weight_spec *spec);
void f8i_weight_destroy(f8_ctx *ctx, f8i_weight *w);

/* Make the workspace ready for a forward: cast when the microbatch rule asks
 * for it (or it was never filled); in the ctx's graph mode a filled workspace
 * is cast under the noop flag. FP8 primary: nothing is cast; the transpose is
 * made now when training with FIRST or in graph mode (under the flag),
 * otherwise lazily by dgrad. */
f8_status f8i_weight_cast(f8_ctx *ctx, f8i_weight *w, f8_microbatch mb, int with_transpose);

/* f8_*_write_weight: src checked here (name for messages). */
f8_status f8i_weight_write(f8_ctx *ctx, f8i_weight *w, const f8_tensor *src, const char *fn);

/* FP8 primary weight, written in parts (data-parallel ranks that each hold
 * the master values of a shard; train/dp.c). quantize_part: n values of the
 * weight's row-major elements, src (FP32/BF16, backend), cast into codes (n
 * bytes, backend) with the weight slot's scale, its amax MAX-recorded into
 * the slot: the same codes and amax as f8i_weight_write's cast of those
 * elements; the weight is not touched. Delayed scaling only (a current
 * scale would come from the part's amax, not the weight's). write_codes:
 * the whole weight's codes (rows·cols bytes, backend) copied in, its private
 * scale_inv = 1/slot scale (the bits the cast writes), the transpose
 * invalidated: f8i_weight_write's effect without the cast. */
f8_status f8i_weight_quantize_part(f8_ctx *ctx, f8i_weight *w, const void *src, f8_dtype src_dtype, int64_t n,
                                   void *codes);
f8_status f8i_weight_write_codes(f8_ctx *ctx, f8i_weight *w, const void *codes);

f8_status f8i_weight_zero_grad(f8_ctx *ctx, f8i_weight *w);

/* Views: param (grad 0) or gradient (grad 1); bias ones are [1, rows]. The
 * param view of an FP8 primary weight is FP8 with its private scale_inv. */
f8_tensor f8i_weight_view(const f8i_weight *w, int grad);
f8_tensor f8i_bias_view(const f8i_weight *w, int grad);

/* The GEMM workspace (f8i_gemm_args.workspace) the weight's FP8 GEMMs at T
 * tokens need: the forward's (fprop) or the backward's (dgrad, wgrad; with
 * transpose_per_call also the room dgrad transposes W8's codes into), the
 * largest f8i_gemm_workspace_bytes of them for either output dtype (FP32 or
 * BF16, the caller's choice at call time), with or without the residual or
 * the accumulate of the *_add calls (f8_module_forward_add, _backward_add). 0 when every shape is inside the
 * tensor-core rule or FP8 is off. A module takes this (its largest over its
 * weights) in each pass's layout and hands it to the calls below as gws;
 * one region serves every GEMM of a pass, since they run one after another. */
size_t f8i_weight_gemm_workspace(const f8i_weight *w, int64_t T, int backward);

/* The GEMMs take their activation operands whole (core/operand.h): the
 * mode (and so the GEMM's scaling modes) comes with them, the weight's own
 * from its workspace. T is the operands' token count (rows). */

/* y[T, rows] = x[T, cols] · Wᵀ (+ residual) + b, the sum in FP32 and y
 * rounded once. x: FP8 (its data and scale_inv) or the param dtype.
 * residual: NULL, or [T, rows] in y_dtype, y itself or not overlapping it.
 * gws: f8i_weight_gemm_workspace(w, T, 0) bytes, or NULL (the slow path for odd shapes). */
f8_status f8i_weight_fprop(f8_ctx *ctx, const f8i_weight *w, const f8i_operand *x, void *y, f8_dtype y_dtype,
                           const void *residual, void *gws);

/* dx[T, cols] (+)= dy[T, rows] · W (accumulate: dx + the product in FP32,
 * rounded once). dy: FP8 (its data and scale_inv; the transpose of the
 * workspace is made valid here) or the param dtype. gws as for wgrad. */
f8_status f8i_weight_dgrad(f8_ctx *ctx, f8i_weight *w, const f8i_operand *dy, void *dx, f8_dtype dx_dtype,
                           int accumulate, void *gws);

/* dW (+)= dyᵀ · x into the gradient (accumulate) or main_grad (beta 0 after
 * a FIRST forward). FP8: dy's and x's data_t ([rows, T], [cols, T]) with
 * their scale_inv_t; high precision (FP8 off, or an FP8 weight's wgrad_hp):
 * their data [T, rows], [T, cols]. gws: f8i_weight_gemm_workspace(w, T, 1)
 * bytes, or NULL. */
f8_status f8i_weight_wgrad(f8_ctx *ctx, f8i_weight *w, const f8i_operand *dy, const f8i_operand *x,
                           f8_microbatch mb, void *gws);

/* The quantizer's wgrad_hp: dW (+)= dyᵀ · x in high precision from dy [T,
 * rows] and x [T, cols] (FP32 or BF16 each); dy is first converted into
 * conv (T·rows elements of x's dtype) when the dtypes differ. */
f8_status f8i_weight_wgrad_hp(f8_ctx *ctx, f8i_weight *w, const void *dy, f8_dtype dy_dtype, const void *x,
                              f8_dtype x_dtype, int64_t T, f8_microbatch mb, void *conv);

/* FP8 off: db[rows] += Σ_t g[t, :] (g [T, rows] in param dtype). */
f8_status f8i_weight_bgrad(f8_ctx *ctx, f8i_weight *w, const void *g, int64_t T);

/* Module creation: fp8_weights needs fp8. Sets the ctx error. */
f8_status f8i_check_fp8_weights(f8_ctx *ctx, const char *fn, int fp8, int fp8_weights);

/* A module's report: its own allocations (mem) plus its n_slots' share of
 * the scaling buffer. */
void f8i_module_memory(const f8_ctx *ctx, const f8_memory_report *mem, int n_slots, f8_memory_report *out);

/* Check an activation tensor [rows, cols] (rows < 0: any), FP32 or BF16,
 * and in dtype `must` unless must is -1. Sets the ctx error. */
f8_status f8i_check_act(f8_ctx *ctx, const f8_tensor *t, const char *name, int64_t rows, int64_t cols, int must);

#endif /* F8_MODULES_WEIGHT_H */
