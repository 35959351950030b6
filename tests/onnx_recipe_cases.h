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
 * per output channel (per-axis DequantizeLinear), both as f8's row-wise
 * casts take them, HYBRID and torchao's E4M3 + power-of-two. Block scaling:
 * an FP8 export is refused (per-tile scales), a high-precision one works. */
static void recipe_cases(void)
{
    for (int k = 0; k < 4; k++) {
        const int pow2 = k & 1, row = k >= 2;
        f8_ctx_config cc = f8_ctx_config_default();
        cc.backend = F8_BACKEND_CPU;
        cc.recipe.kind = row ? F8_RECIPE_ROWWISE : F8_RECIPE_CURRENT;
        cc.recipe.power_2_scales = pow2;
        if (row && pow2) cc.recipe.format = F8_FORMAT_E4M3; /* torchao's rowwise */
        f8_ctx *ctx = NULL;
        CHECK(f8_ctx_create(&cc, &ctx, NULL, 0) == F8_OK, "current- or row-wise-scaling ctx");
        if (!ctx) return;
        mcase c;
        for (int v = 0; v < 4; v++) {
            char name[64];
            memset(&c, 0, sizeof c);
            c.T = 5, c.in = 33, c.fp8 = 1, c.exact = v == 1;
            c.dtype = v == 3 ? F8_DTYPE_BF16 : F8_DTYPE_FP32;
            if (v < 2) {
                f8_layernorm_linear_config nc = f8_layernorm_linear_config_default(33, 17);
                nc.max_tokens = c.T;
                CHECK_OK(ctx, f8_layernorm_linear_create(ctx, &nc, &c.m));
                c.out = 17;
            } else {
                f8_layernorm_mlp_config mc = f8_layernorm_mlp_config_default(33, 17);
                mc.max_tokens = c.T;
                mc.activation = v == 2 ? F8_ACT_GELU : F8_ACT_SWIGLU;
                mc.param_dtype = c.dtype;
                CHECK_OK(ctx, f8_layernorm_mlp_create(ctx, &mc, &c.m));
                c.out = 33;
            }
            snprintf(name, sizeof name, "%s%s_%d", row ? "rowwise" : "current", pow2 ? "_pow2" : "", v);
            c.name = name;
            if (c.m) module_case(ctx, &c);
        }
        f8_ctx_destroy(ctx);
    }
    f8_ctx_config cc = f8_ctx_config_default();
    cc.backend = F8_BACKEND_CPU;
    cc.recipe.kind = F8_RECIPE_BLOCK;
    f8_ctx *ctx = NULL;
    CHECK(f8_ctx_create(&cc, &ctx, NULL, 0) == F8_OK, "block-scaling ctx");
    if (!ctx) return;
    f8_module *m = NULL;
    f8_layernorm_linear_config nc = f8_layernorm_linear_config_default(33, 17);
    nc.max_tokens = 5;
    CHECK_OK(ctx, f8_layernorm_linear_create(ctx, &nc, &m));
    for (int fp8 = 1; fp8 >= 0 && m; fp8--) {
        f8_onnx_config cfg = f8_onnx_config_default();
        cfg.fp8 = fp8;
        f8_onnx *g = NULL;
        CHECK_OK(ctx, f8_onnx_create(ctx, &cfg, &g));
        CHECK_OK(ctx, f8_onnx_add_input(g, "x", F8_ONNX_FLOAT, "tokens,33"));
        if (fp8) {
            CHECK_STATUS(ctx, f8_onnx_add_module(g, m, "x", "y"), F8_ERR_UNSUPPORTED);
            CHECK(strstr(f8_ctx_last_error(ctx), "block scaling") != NULL, "the refusal says why: %s",
                  f8_ctx_last_error(ctx));
        } else {
            CHECK_OK(ctx, f8_onnx_add_module(g, m, "x", "y"));
        }
        f8_onnx_destroy(g);
    }
    f8_module_destroy(m);
    f8_ctx_destroy(ctx);
}

#endif /* F8_TESTS_ONNX_RECIPE_CASES_H */
