/*
 * onnx_recipe_cases.h — test_onnx's cases for the recipes other than delayed
 * scaling, included by test_onnx.c after its module_case (which they run).
 */
#ifndef F8_TESTS_ONNX_RECIPE_CASES_H
#define F8_TESTS_ONNX_RECIPE_CASES_H

/* The other recipes. Current scaling: the graph computes each input's scale
 * from the input (ReduceMax) and the weights' from the weights now, as f8's
 * casts do, so the export matches a forward on any input (here one the
 * scales were not taken from: the second forward's reference is its own);
 * with power-of-two scales too. Row-wise scaling: the graph computes one
 * scale per token (ReduceMax over the last axis) and the weights carry one
 * per output channel (per-axis DequantizeLinear), HYBRID and torchao's
 * E4M3 + power-of-two. Block scaling: one scale per 1x128 tile of each
 * input computed in the graph (padded, reshaped to tiles), one per 128x128
 * weight block (opset 21's blocked DequantizeLinear); widths of several
 * tiles, the last partial. */
static void recipe_cases(void)
{
    static const char *const names[3] = {"current", "rowwise", "block"};
    static const f8_recipe_kind kinds[3] = {F8_RECIPE_CURRENT, F8_RECIPE_ROWWISE, F8_RECIPE_BLOCK};
    for (int k = 0; k < 6; k++) {
        const int pow2 = k & 1, r = k / 2, wide = kinds[r] == F8_RECIPE_BLOCK;
        const int64_t in = wide ? 200 : 33, hid = wide ? 136 : 17;
        f8_ctx_config cc = f8_ctx_config_default();
        cc.backend = F8_BACKEND_CPU;
        cc.recipe.kind = kinds[r];
        cc.recipe.power_2_scales = pow2;
        if (kinds[r] == F8_RECIPE_ROWWISE && pow2) cc.recipe.format = F8_FORMAT_E4M3; /* torchao's rowwise */
        f8_ctx *ctx = NULL;
        CHECK(f8_ctx_create(&cc, &ctx, NULL, 0) == F8_OK, "%s-scaling ctx", names[r]);
        if (!ctx) return;
        mcase c;
        for (int v = 0; v < 4; v++) {
            char name[64];
            memset(&c, 0, sizeof c);
            c.T = 5, c.in = in, c.fp8 = 1, c.exact = v == 1;
            c.dtype = v == 3 ? F8_DTYPE_BF16 : F8_DTYPE_FP32;
            if (v < 2) {
                f8_layernorm_linear_config nc = f8_layernorm_linear_config_default(in, hid);
                nc.max_tokens = c.T;
                CHECK_OK(ctx, f8_layernorm_linear_create(ctx, &nc, &c.m));
                c.out = hid;
            } else {
                f8_layernorm_mlp_config mc = f8_layernorm_mlp_config_default(in, hid);
                mc.max_tokens = c.T;
                mc.activation = v == 2 ? F8_ACT_GELU : F8_ACT_SWIGLU;
                mc.param_dtype = c.dtype;
                CHECK_OK(ctx, f8_layernorm_mlp_create(ctx, &mc, &c.m));
                c.out = in;
            }
            snprintf(name, sizeof name, "%s%s_%d", names[r], pow2 ? "_pow2" : "", v);
            c.name = name;
            if (c.m) module_case(ctx, &c);
        }
        f8_ctx_destroy(ctx);
    }
}

#endif /* F8_TESTS_ONNX_RECIPE_CASES_H */
