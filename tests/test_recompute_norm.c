/*
 * test_recompute_norm.c — recompute_norm_output on the CPU backend: bitwise
 * the results of the saved norm output (recompute_tests.h), and the
 * combinations it refuses, which must create nothing.
 */
#include "recompute_tests.h"

static f8_ctx *ctx_of(f8_recipe_kind kind)
{
    char why[256] = "";
    f8_recipe r = f8_recipe_default();
    r.kind = kind;
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, &r, why);
    if (!ctx) die(why, NULL);
    return ctx;
}

/* A refused create returns `want`, leaves *out NULL and registers no slot. */
static void refused(f8_ctx *ctx, const void *config, int mlp, f8_status want, const char *what)
{
    const int nf = f8_ctx_slot_count(ctx, F8_DIR_FORWARD), nb = f8_ctx_slot_count(ctx, F8_DIR_BACKWARD);
    f8_module *m = (f8_module *)&m; /* not NULL: create must clear it */
    const f8_status st = mlp ? f8_layernorm_mlp_create(ctx, (const f8_layernorm_mlp_config *)config, &m)
                             : f8_layernorm_linear_create(ctx, (const f8_layernorm_linear_config *)config, &m);
    CHECK(st == want, "%s -> %s, wanted %s (%s)", what, f8_status_string(st), f8_status_string(want),
          f8_ctx_last_error(ctx));
    CHECK(m == NULL, "%s: *module not NULL after a refused create", what);
    CHECK(f8_ctx_slot_count(ctx, F8_DIR_FORWARD) == nf && f8_ctx_slot_count(ctx, F8_DIR_BACKWARD) == nb,
          "%s: slots registered by a refused create", what);
    if (st == F8_OK) f8_module_destroy(m);
}

static void test_refusals(void)
{
    f8_ctx *block = ctx_of(F8_RECIPE_BLOCK), *ctx = ctx_of(F8_RECIPE_DELAYED);
    f8_layernorm_linear_config lc = f8_layernorm_linear_config_default(64, 64);
    f8_layernorm_mlp_config mc = f8_layernorm_mlp_config_default(64, 128);
    CHECK(lc.recompute_norm_output == 0 && mc.recompute_norm_output == 0, "recompute_norm_output not 0 by default");
    lc.recompute_norm_output = mc.recompute_norm_output = 1;
    refused(block, &lc, 0, F8_ERR_UNSUPPORTED, "LayerNormLinear, block scaling");
    refused(block, &mc, 1, F8_ERR_UNSUPPORTED, "LayerNormMLP, block scaling");
    lc.return_layernorm_output = 1;
    refused(ctx, &lc, 0, F8_ERR_UNSUPPORTED, "LayerNormLinear, return_layernorm_output");
    lc.return_layernorm_output = 0;
    lc.recompute_norm_output = mc.recompute_norm_output = 2;
    refused(ctx, &lc, 0, F8_ERR_INVALID_ARGUMENT, "LayerNormLinear, flag 2");
    refused(ctx, &mc, 1, F8_ERR_INVALID_ARGUMENT, "LayerNormMLP, flag 2");
    /* FP8 off under block scaling has no column-wise copy: allowed */
    mc.recompute_norm_output = 1;
    mc.fp8 = 0;
    f8_module *m = NULL;
    CHECK_OK(block, f8_layernorm_mlp_create(block, &mc, &m));
    f8_module_destroy(m);

    /* Sequence parallelism: refused, nothing changed (a later forward works). */
    f8_comm_group *g = NULL;
    f8_comm *comm = NULL;
    CHECK_OK(NULL, f8_comm_group_create(1, &g, NULL, 0));
    CHECK_OK(ctx, f8_comm_create_cpu(ctx, g, 0, &comm));
    mc.fp8 = 1;
    m = NULL;
    CHECK_OK(ctx, f8_layernorm_mlp_create(ctx, &mc, &m));
    CHECK_STATUS(ctx, f8_module_set_sequence_parallel(m, comm), F8_ERR_UNSUPPORTED);
    CHECK_OK(ctx, f8_module_set_sequence_parallel(m, NULL)); /* off stays allowed */
    float x[4 * 64] = {0}, y[4 * 64];
    for (int i = 0; i < 4 * 64; i++) x[i] = (float)(i % 13) - 6.0f;
    f8_tensor tx = f8_tensor_make(x, F8_DTYPE_FP32, 4, 64), ty = f8_tensor_make(y, F8_DTYPE_FP32, 4, 64);
    f8_saved *s = NULL;
    CHECK_OK(ctx, f8_module_saved_create(m, &s));
    CHECK_OK(ctx, f8_module_forward(m, &tx, &ty, F8_MICROBATCH_NONE, s));
    CHECK_OK(ctx, f8_module_backward(m, s, &ty, NULL));
    f8_saved_destroy(s);
    f8_module_destroy(m);
    f8_comm_destroy(comm);
    f8_comm_group_destroy(g);
    f8_ctx_destroy(block);
    f8_ctx_destroy(ctx);
}

int main(void)
{
    test_refusals();
    rc_run_all(F8_BACKEND_CPU);
    return test_finish("test_recompute_norm");
}
