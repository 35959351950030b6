/*
 * quantizer.h — how a module's slots quantize, chosen once when the module
 * is created from the ctx's recipe (f8i_quantizer_for, recipe.c: the one
 * place outside the core that the recipe kind is read for). Modules ask
 * their quantizer, never the recipe: a new recipe is a new quantizer (a new
 * scaling mode and its backend cases), not a branch in every module.
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
    int wgrad_hp;            /* the weight gradient's GEMM in high precision from the
                                high-precision input (kept by the forward) and output
                                gradient; no column-wise FP8 copies (ROWWISE_GW_HP) */
} f8i_quantizer;

/* The quantizers of the ctx's recipe: DELAYED per-tensor, fused; CURRENT
 * per-tensor, measured, unfused; BLOCK 1x128 tiles and 128x128 weight
 * blocks, unfused; ROWWISE one scale per row everywhere, unfused
 * (ROWWISE_GW_HP: also wgrad_hp). Fixed for a module's life (the recipe is fixed before
 * any module exists). */
f8i_quantizer f8i_quantizer_for(const f8_ctx *ctx);

/* The column-wise copy of an operand is quantized from the high-precision
 * values on its own tiles (block modes) or columns (ROW), not the
 * transpose of its codes. */
static inline int f8i_quantizer_blocked(const f8i_quantizer *q) { return q->act != F8I_SCALING_TENSOR; }

#endif /* F8_CORE_QUANTIZER_H */
