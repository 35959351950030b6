/*
 * quantizer.h — how a module's slots quantize, chosen once when the module
 * is created from the ctx's recipe (f8i_quantizer_for, quantizer.c: the one
 * place outside the core that the recipe kind is read for). Modules ask
 * their quantizer, never the recipe, and never compare scaling modes: they
 * state what they need (the column-wise copy of a tensor, the scale_inv an
 * orientation reads, whether a tensor may be cast in shards) and the
 * functions below answer. A new recipe is a new quantizer (a new scaling
 * mode, its answers here and its backend cases), not a branch in every
 * module.
 */
#ifndef F8_CORE_QUANTIZER_H
#define F8_CORE_QUANTIZER_H

#include "core/f8i.h"

typedef struct f8i_quantizer {
    f8i_scaling_mode act;    /* inputs, activations, gradients: TENSOR, BLOCK_1X128 or ROW */
    f8i_scaling_mode weight; /* weights: TENSOR, BLOCK_128X128 or ROW */
    int current;             /* per-tensor scale measured from each tensor before its cast
                                (current scaling: f8i_slot_prepare's amax pass) */
    int unfused;             /* norm and activation outputs (and d of the activation
                                backward) written in high precision and cast after, not the
                                fused FP8 outputs: the scale needs the tensor's (or its
                                tiles') amax first. Telemetry does not: the fused kernels
                                count as the cast does. */
    int fused_rows;          /* with unfused: the norm and activation kernels also write the
                                row-wise codes of their output and each row's scale_inv
                                (backend.h's F8I_ROW_FUSED: a row's scale needs that row
                                alone), so the cast after makes only what needs whole
                                columns (the column-wise copy, dbias); ROW scaling */
    int wgrad_hp;            /* the weight gradient's GEMM in high precision from the
                                high-precision input (kept by the forward) and output
                                gradient; no column-wise FP8 copies (ROWWISE_GW_HP) */
} f8i_quantizer;

/* The quantizers of the ctx's recipe: DELAYED per-tensor, fused; CURRENT
 * per-tensor, measured, unfused; BLOCK 1x128 tiles and 128x128 weight
 * blocks, unfused; ROWWISE one scale per row everywhere, unfused with
 * the rows fused (ROWWISE_GW_HP: also wgrad_hp). Fixed for a module's life (the recipe is fixed before
 * any module exists). */
f8i_quantizer f8i_quantizer_for(const f8_ctx *ctx);

/* Test hook: quantizers made on ctx from now on (with on) have fused_rows
 * off, so that a test can hold the fused kernels to the unfused path, bit
 * for bit; on 0 restores the recipe's choice. Never on the step path. */
void f8i_quantizer_test_unfuse_rows(f8_ctx *ctx, int on);

/* The fields of a norm or activation kernel's args that fuse the row-wise
 * cast (q->fused_rows) of an output in out_dtype: mode ROW, the recipe's
 * scaled_max and pow2 (as f8i_quantizer_cast_scaling sets a cast's). */
void f8i_quantizer_row_fields(const f8_ctx *ctx, f8_dtype out_dtype, f8i_scaling_mode *mode, float *scaled_max,
                              int *pow2);

/* Does an activation's column-wise copy have to be quantized from the
 * high-precision values, on its own scales (block tiles, rows) with its own
 * scale_inv? Otherwise (per-tensor) it is the transpose of the row-wise
 * codes and shares their one scalar. Saved state that must hold that copy
 * from the forward asks this. */
static inline int f8i_quantizer_colwise_from_hp(const f8i_quantizer *q) { return q->act != F8I_SCALING_TENSOR; }

/* The scale_inv one orientation of an activation reads: `shared` when q
 * gives both orientations one scalar (per-tensor), else the orientation's
 * `own`. */
static inline float *f8i_quantizer_sinv(const f8i_quantizer *q, float *shared, float *own)
{
    return f8i_quantizer_colwise_from_hp(q) ? own : shared;
}

/* Bytes of one scale_inv buffer of an activation [rows, cols] that serves
 * either orientation: `bytes` (one scalar, as the caller's layout has it)
 * or, with scales per tile or row, at least the larger orientation's. */
size_t f8i_quantizer_sinv_bytes(const f8i_quantizer *q, int64_t rows, int64_t cols, size_t bytes);

/* Take from l the scale_inv of an activation [rows, cols] (*sinv) and,
 * when t, its column-wise copy's (*sinv_t; NULL without t). With one scalar
 * for both orientations, *sinv_t is *sinv, t or not. */
void f8i_quantizer_take_sinv(const f8i_quantizer *q, f8i_layout *l, int64_t rows, int64_t cols, int t, float **sinv,
                             float **sinv_t);

/* The row-wise scale_inv of an activation [rows, cols] whose column-wise
 * copy's scale_inv is kept elsewhere (saved): taken from l when it has its
 * own; NULL, nothing taken, when both share the saved scalar. */
float *f8i_quantizer_take_own_sinv(const f8i_quantizer *q, f8i_layout *l, int64_t rows, int64_t cols);

/* May a sequence-parallel rank cast only its own rows of a tensor with a
 * scale measured over the group (the codes gathered after)? Yes with one
 * scale per tensor; no when the scales follow tiles or columns of the
 * whole tensor (the column-wise copy needs every rank's rows). */
static inline int f8i_quantizer_casts_shards(const f8i_quantizer *q) { return q->act == F8I_SCALING_TENSOR; }

/* The scaling of a cast in `mode` (a quantizer's act or weight mode) into
 * slot sl, on args whose src, shape, out_dtype, outputs (out, out_t) and
 * their scale_invs the caller set: per-tensor, the slot's scale and its
 * amax (f8i_slot_prepare: current scaling's measuring pass runs here);
 * per tile or row, the mode with the recipe's scaled_max and pow2, the
 * amax into the slot's record. Telemetry into the slot's counters. */
f8_status f8i_quantizer_cast_scaling(f8_ctx *ctx, f8i_scaling_mode mode, f8_slot sl, f8i_cast_args *c);

/* Module creation's refusals, naming the recipe (the ctx error set):
 * recompute_norm_output needs the column-wise copy made again from the
 * codes; an FP8 primary weight (fp8_weights) needs per-tensor weights. */
f8_status f8i_quantizer_check_recompute_norm(f8_ctx *ctx, const f8i_quantizer *q, const char *fn);
/* The memory savings that make an activation's column-wise copy again by
 * transposing its codes (config field `field`: recompute_input_cast,
 * recompute_activation) need per-tensor activations: refused, naming the
 * recipe, when the copy is quantized on its own. */
f8_status f8i_quantizer_check_colwise_rebuild(f8_ctx *ctx, const f8i_quantizer *q, const char *fn, const char *field);
/* Is a weight quantized in `mode` given its dgrad operand as the transpose
 * of its codes (one scalar for both)? Only then may the transpose be made
 * per call (weight_transpose_per_call) instead of cached. */
static inline int f8i_scaling_colwise_is_transpose(f8i_scaling_mode mode) { return mode == F8I_SCALING_TENSOR; }
f8_status f8i_quantizer_check_fp8_weights(f8_ctx *ctx, const f8i_quantizer *q, const char *fn);

#endif /* F8_CORE_QUANTIZER_H */
