/*
 * recipe.c — the delayed-scaling recipe's defaults and its scale formula.
 * The formula lives here once, for the host; the backends' fused updates
 * compute the same expression (scaled_max / amax with scaled_max precomputed
 * by ldexpf), so the result is bit-identical everywhere.
 */
#include <float.h>
#include <math.h>

#include "core/f8i.h"

f8_recipe f8_recipe_default(void)
{
    f8_recipe r;
    r.format = F8_FORMAT_HYBRID;
    r.margin = 0;
    r.amax_history_len = 1024;
    r.amax_compute_algo = F8_AMAX_MAX;
    r.reduce_amax = 1;
    r.kind = F8_RECIPE_DELAYED;
    r.power_2_scales = 0;
    return r;
}

float f8_scale_from_amax(float amax, float old_scale, float fp8_max, int margin)
{
    /* Multiplying by a power of two is exact, so the margin costs no rounding. */
    float scaled_max = ldexpf(fp8_max, -margin);
    float scale = old_scale;
    if (isfinite(amax) && amax > 0.0f) scale = scaled_max / amax;
    if (isinf(scale)) scale = FLT_MAX; /* a tiny amax must not give an infinite scale */
    return scale;
}

const char *f8_recipe_kind_name(f8_recipe_kind kind)
{
    switch (kind) {
    case F8_RECIPE_DELAYED: return "delayed";
    case F8_RECIPE_CURRENT: return "current";
    case F8_RECIPE_BLOCK: return "block";
    case F8_RECIPE_ROWWISE: return "rowwise";
    case F8_RECIPE_ROWWISE_GW_HP: return "rowwise_with_gw_hp";
    }
    return "unknown";
}
