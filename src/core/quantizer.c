/*
 * quantizer.c — the quantizer factory (the ctx's recipe → each slot's
 * scaling) and its answers to the modules (core/quantizer.h): every test of
 * a scaling mode a module would otherwise make is made here, once.
 */
#include "core/quantizer.h"

f8i_quantizer f8i_quantizer_for(const f8_ctx *ctx)
{
    f8i_quantizer q;
    const int row = f8i_recipe_rowwise(ctx);
    q.act = f8i_recipe_block(ctx) ? F8I_SCALING_BLOCK_1X128 : row ? F8I_SCALING_ROW : F8I_SCALING_TENSOR;
    q.weight = f8i_recipe_block(ctx) ? F8I_SCALING_BLOCK_128X128 : row ? F8I_SCALING_ROW : F8I_SCALING_TENSOR;
    q.current = f8i_recipe_current(ctx);
    q.unfused = f8i_casts_unfused(ctx);
    q.fused_rows = row && !ctx->rows_unfused;
    q.wgrad_hp = ctx->recipe.kind == F8_RECIPE_ROWWISE_GW_HP;
    return q;
}

void f8i_quantizer_test_unfuse_rows(f8_ctx *ctx, int on) { ctx->rows_unfused = on != 0; }

void f8i_quantizer_row_fields(const f8_ctx *ctx, f8_dtype out_dtype, f8i_scaling_mode *mode, float *scaled_max,
                              int *pow2)
{
    *mode = F8I_SCALING_ROW;
    *scaled_max = f8i_scaled_max(ctx, out_dtype);
    *pow2 = ctx->recipe.power_2_scales;
}

size_t f8i_quantizer_sinv_bytes(const f8i_quantizer *q, int64_t rows, int64_t cols, size_t bytes)
{
    if (!f8i_quantizer_colwise_from_hp(q)) return bytes;
    const int64_t r = f8i_mode_scales(q->act, rows, cols), c = f8i_mode_scales(q->act, cols, rows);
    const size_t grid = (size_t)(r > c ? r : c) * sizeof(float);
    return grid > bytes ? grid : bytes;
}

void f8i_quantizer_take_sinv(const f8i_quantizer *q, f8i_layout *l, int64_t rows, int64_t cols, int t, float **sinv,
                             float **sinv_t)
{
    if (f8i_quantizer_colwise_from_hp(q)) {
        *sinv = (float *)f8i_take(l, (size_t)f8i_mode_scales(q->act, rows, cols) * sizeof(float));
        *sinv_t = t ? (float *)f8i_take(l, (size_t)f8i_mode_scales(q->act, cols, rows) * sizeof(float)) : NULL;
    } else {
        *sinv = (float *)f8i_take(l, sizeof(float));
        *sinv_t = *sinv; /* one scalar for both orientations */
    }
}

float *f8i_quantizer_take_own_sinv(const f8i_quantizer *q, f8i_layout *l, int64_t rows, int64_t cols)
{
    if (!f8i_quantizer_colwise_from_hp(q)) return NULL;
    return (float *)f8i_take(l, (size_t)f8i_mode_scales(q->act, rows, cols) * sizeof(float));
}

f8_status f8i_quantizer_cast_scaling(f8_ctx *ctx, f8i_scaling_mode mode, f8_slot sl, f8i_cast_args *c)
{
    c->stats = f8i_slot_stats(ctx, sl);
    c->mode = mode;
    if (mode == F8I_SCALING_TENSOR) {
        c->scale = f8i_slot_scale(ctx, sl);
        c->scale_inv_t = NULL; /* the one scalar is scale_inv */
        return f8i_slot_prepare(ctx, sl, c->out_dtype, c->src, c->src_dtype, c->rows * c->cols, NULL, 1, &c->amax);
    }
    c->scale = NULL; /* each tile or row measures its own */
    c->scaled_max = f8i_scaled_max(ctx, c->out_dtype);
    c->pow2 = ctx->recipe.power_2_scales;
    if (!c->out) c->scale_inv = NULL;
    if (!c->out_t) c->scale_inv_t = NULL;
    c->amax = f8i_slot_amax(ctx, sl); /* the step's record, as under current scaling */
    return F8_OK;
}

/* The recipe a quantizer came from, for messages. */
static const char *scaling_name(const f8i_quantizer *q)
{
    return q->act == F8I_SCALING_ROW ? "row-wise" : q->act == F8I_SCALING_TENSOR ? "per-tensor" : "block";
}

f8_status f8i_quantizer_check_recompute_norm(f8_ctx *ctx, const f8i_quantizer *q, const char *fn)
{
    /* the column-wise copy is quantized from the norm's high-precision
     * output; re-creating it is not implemented */
    if (!f8i_quantizer_colwise_from_hp(q)) return F8_OK;
    return f8i_error(ctx, F8_ERR_UNSUPPORTED, "%s: config.recompute_norm_output is not supported under %s scaling "
                                              "(F8_RECIPE_%s); use delayed or current scaling", fn, scaling_name(q),
                     q->act == F8I_SCALING_ROW ? "ROWWISE*" : "BLOCK");
}

f8_status f8i_quantizer_check_colwise_rebuild(f8_ctx *ctx, const f8i_quantizer *q, const char *fn, const char *field)
{
    if (!f8i_quantizer_colwise_from_hp(q)) return F8_OK;
    return f8i_error(ctx, F8_ERR_UNSUPPORTED, "%s: config.%s is not supported under %s scaling (F8_RECIPE_%s: the "
                                              "column-wise copy is quantized on its own, not a transpose of the "
                                              "codes); use delayed or current scaling", fn, field, scaling_name(q),
                     q->act == F8I_SCALING_ROW ? "ROWWISE*" : "BLOCK");
}

f8_status f8i_quantizer_check_fp8_weights(f8_ctx *ctx, const f8i_quantizer *q, const char *fn)
{
    if (q->weight == F8I_SCALING_ROW)
        return f8i_error(ctx, F8_ERR_UNSUPPORTED, "%s: fp8_weights = 1 is not supported under row-wise scaling (a "
                                                  "row-scaled primary weight would carry a scale per output channel "
                                                  "through checkpoints and the optimizer, and its column-wise copy "
                                                  "for dgrad needs the high-precision values); use fp8_weights = 0",
                         fn);
    if (q->weight != F8I_SCALING_TENSOR)
        return f8i_error(ctx, F8_ERR_UNSUPPORTED, "%s: fp8_weights = 1 is not supported under block scaling yet (a "
                                                  "block-scaled primary weight would carry a scale per 128x128 block "
                                                  "through checkpoints and the optimizer); use fp8_weights = 0", fn);
    return F8_OK;
}
