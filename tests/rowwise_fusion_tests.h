/*
 * rowwise_fusion_tests.h — row-wise scaling's casts fused into the norm and
 * activation kernels (backend.h's F8I_ROW_FUSED; the quantizer's fused_rows)
 * held to the unfused path they replace, on one backend (test_rowwise.c: the
 * CPU; test_cuda_rowwise.c: CUDA): the same module built twice, once on a
 * ctx whose quantizers keep the row-wise casts out of those kernels
 * (f8i_quantizer_test_unfuse_rows), the same weights and inputs. Bit for
 * bit: y, the whole saved state (the norm's and the activation's row-wise
 * codes and scale_invs, their column-wise copies, h1, the statistics, the
 * high-precision copies of rowwise_with_gw_hp), dx, every parameter
 * gradient (fc1's through d's fused codes and dbias), each slot's amax and
 * telemetry counts after the step, and y of an inference forward, which
 * must also take fewer launches (the fused kernels leave no cast behind).
 * LayerNormLinear and LayerNormMLP (GELU, SwiGLU, SReLU), LayerNorm and
 * RMSNorm, FP32 and BF16 parameters (BF16: the values rounded before their
 * scales), both row-wise recipes, power-of-two scales or not, an odd token
 * count and rows of very different magnitudes.
 */
#ifndef F8_TESTS_ROWWISE_FUSION_TESTS_H
#define F8_TESTS_ROWWISE_FUSION_TESTS_H

#include <string.h>

#include "check.h"
#include "core/quantizer.h"
#include "modules/module.h"

typedef struct fusion_case {
    f8_recipe_kind kind;
    int pow2;
    int mlp;            /* 0 LayerNormLinear, 1 LayerNormMLP */
    f8_activation act;
    f8_norm norm;
    f8_dtype pdt;
} fusion_case;

enum { FU_T = 37, FU_H = 80, FU_F = 48, FU_N = 56 };

/* Backend bytes of a module's saved block for T tokens (its own layout, measured). */
static size_t fusion_saved_bytes(f8_module *m, int64_t T)
{
    void *impl = xmalloc(m->cls->saved_impl_size + 1);
    f8i_layout l = f8i_layout_at(NULL);
    const size_t b = m->cls->place_saved(m, &l, T, impl);
    free(impl);
    return b;
}

static void *fusion_download(f8_ctx *ctx, const void *p, size_t bytes)
{
    void *h = xmalloc(bytes ? bytes : 1);
    if (bytes) CHECK_OK(ctx, f8_ctx_download(ctx, h, p, bytes));
    return h;
}

/* Backend buffers a and b (bytes each, on ctx a and b) equal bit for bit. */
static int fusion_same(f8_ctx *ca, const void *a, f8_ctx *cb, const void *b, size_t bytes)
{
    void *ha = fusion_download(ca, a, bytes), *hb = fusion_download(cb, b, bytes);
    const int same = memcmp(ha, hb, bytes) == 0;
    free(ha);
    free(hb);
    return same;
}

static f8_module *fusion_module(f8_ctx *ctx, const fusion_case *fc)
{
    f8_module *m = NULL;
    if (fc->mlp) {
        f8_layernorm_mlp_config c = f8_layernorm_mlp_config_default(FU_H, FU_F);
        c.normalization = fc->norm;
        c.activation = fc->act;
        c.param_dtype = fc->pdt;
        c.max_tokens = FU_T;
        c.seed = 11;
        CHECK_OK(ctx, f8_layernorm_mlp_create(ctx, &c, &m));
    } else {
        f8_layernorm_linear_config c = f8_layernorm_linear_config_default(FU_H, FU_N);
        c.normalization = fc->norm;
        c.param_dtype = fc->pdt;
        c.max_tokens = FU_T;
        c.seed = 11;
        CHECK_OK(ctx, f8_layernorm_linear_create(ctx, &c, &m));
    }
    return m;
}

/* The parameters whose gradients are compared (4 of a LayerNormLinear, 6 of a LayerNormMLP). */
static const int FUSION_NPARAMS[2] = {4, 6};
static const f8_param FUSION_PARAMS[2][6] = {
    {F8_PARAM_WEIGHT, F8_PARAM_BIAS, F8_PARAM_LN_WEIGHT, F8_PARAM_LN_BIAS},
    {F8_PARAM_FC1_WEIGHT, F8_PARAM_FC1_BIAS, F8_PARAM_FC2_WEIGHT, F8_PARAM_FC2_BIAS, F8_PARAM_LN_WEIGHT,
     F8_PARAM_LN_BIAS},
};

/* One case: fused (ctx[0]) against unfused (ctx[1]). */
static void fusion_case_run(f8_backend be, const fusion_case *fc)
{
    char why[256] = "", name[160];
    snprintf(name, sizeof name, "%s %s %s %s%s %s", fc->kind == F8_RECIPE_ROWWISE ? "rowwise" : "rowwise_gw_hp",
             fc->mlp ? "LayerNormMLP" : "LayerNormLinear", fc->norm == F8_NORM_RMSNORM ? "RMSNorm" : "LayerNorm",
             fc->mlp ? (fc->act == F8_ACT_GELU ? "GELU " : fc->act == F8_ACT_SWIGLU ? "SwiGLU " : "SReLU ") : "",
             f8_dtype_name(fc->pdt), fc->pow2 ? "pow2" : "fp32 scales");
    f8_recipe r = f8_recipe_default();
    r.kind = fc->kind;
    r.power_2_scales = fc->pow2;
    f8_ctx *ctx[2];
    f8_module *m[2];
    f8_saved *sv[2];
    const int64_t T = FU_T, K = FU_H, N = fc->mlp ? FU_H : FU_N;
    float hx[FU_T * FU_H], hdy[FU_T * FU_H];
    test_rng rng = {1234};
    for (int64_t i = 0; i < T * K; i++) /* rows of very different magnitudes, and an offset for LayerNorm */
        hx[i] = (float)rng_normal(&rng) * ldexpf(1.0f, (int)((i / K) % 9) - 4) + 0.25f;
    for (int64_t i = 0; i < T * N; i++) hdy[i] = (float)rng_normal(&rng) * ldexpf(1.0f, (int)((i / N) % 7) - 6);
    void *x[2], *y[2], *dy[2], *dx[2], *yi[2];
    for (int k = 0; k < 2; k++) {
        ctx[k] = test_ctx(be, &r, why);
        if (!ctx[k]) die(why, NULL);
        CHECK_OK(ctx[k], f8_ctx_enable_telemetry(ctx[k]));
        f8i_quantizer_test_unfuse_rows(ctx[k], k);
        m[k] = fusion_module(ctx[k], fc);
        CHECK(m[k]->q.fused_rows == !k, "%s: module %d has fused_rows %d", name, k, m[k]->q.fused_rows);
        CHECK_OK(ctx[k], f8_module_saved_create(m[k], &sv[k]));
        const size_t sb = fusion_saved_bytes(m[k], T);
        void *zero = calloc(1, sb + 1);
        CHECK_OK(ctx[k], f8_ctx_upload(ctx[k], sv[k]->block, zero, sb)); /* no stale bytes between the fields */
        free(zero);
        void **bufs[5] = {&x[k], &y[k], &dy[k], &dx[k], &yi[k]};
        for (int b = 0; b < 5; b++) CHECK_OK(ctx[k], f8_ctx_alloc(ctx[k], sizeof hx, bufs[b]));
        CHECK_OK(ctx[k], f8_ctx_upload(ctx[k], x[k], hx, (size_t)(T * K) * 4));
        CHECK_OK(ctx[k], f8_ctx_upload(ctx[k], dy[k], hdy, (size_t)(T * N) * 4));
        f8_tensor tx = f8_tensor_make(x[k], F8_DTYPE_FP32, T, K), ty = f8_tensor_make(y[k], F8_DTYPE_FP32, T, N);
        CHECK_OK(ctx[k], f8_module_forward(m[k], &tx, &ty, F8_MICROBATCH_FIRST, sv[k]));
        CHECK_OK(ctx[k], f8_ctx_update_scales(ctx[k], F8_DIR_FORWARD));
        CHECK_OK(ctx[k], f8_ctx_synchronize(ctx[k]));
    }
    const size_t sb = fusion_saved_bytes(m[0], T);
    CHECK(fusion_same(ctx[0], y[0], ctx[1], y[1], (size_t)(T * N) * 4), "%s: y differs", name);
    CHECK(fusion_same(ctx[0], sv[0]->block, ctx[1], sv[1]->block, sb), "%s: the saved state (%zu bytes) differs",
          name, sb);
    for (int k = 0; k < 2; k++) {
        f8_tensor tdy = f8_tensor_make(dy[k], F8_DTYPE_FP32, T, N), tdx = f8_tensor_make(dx[k], F8_DTYPE_FP32, T, K);
        CHECK_OK(ctx[k], f8_module_backward(m[k], sv[k], &tdy, &tdx));
        CHECK_OK(ctx[k], f8_ctx_update_scales(ctx[k], F8_DIR_BACKWARD));
    }
    CHECK(fusion_same(ctx[0], dx[0], ctx[1], dx[1], (size_t)(T * K) * 4), "%s: dx differs", name);
    for (int p = 0; p < FUSION_NPARAMS[fc->mlp]; p++) {
        f8_tensor g[2];
        if (f8_module_param(m[0], FUSION_PARAMS[fc->mlp][p], 1, &g[0]) != F8_OK) continue; /* RMSNorm: no beta */
        CHECK_OK(ctx[1], f8_module_param(m[1], FUSION_PARAMS[fc->mlp][p], 1, &g[1]));
        CHECK(fusion_same(ctx[0], g[0].data, ctx[1], g[1].data, (size_t)(g[0].rows * g[0].cols) * f8_dtype_size(g[0].dtype)), "%s: the gradient of %s differs",
              name, f8_param_name(FUSION_PARAMS[fc->mlp][p]));
    }
    for (int d = 0; d < 2; d++) { /* every slot's step amax, scale and counts */
        const int n = f8_ctx_slot_count(ctx[0], (f8_direction)d);
        f8_fp8_stats a[8], b[8];
        CHECK(n <= 8 && n == f8_ctx_slot_count(ctx[1], (f8_direction)d), "%s: slot counts", name);
        CHECK_OK(ctx[0], f8_ctx_telemetry_read(ctx[0], (f8_direction)d, 0, n, a));
        CHECK_OK(ctx[1], f8_ctx_telemetry_read(ctx[1], (f8_direction)d, 0, n, b));
        for (int i = 0; i < n; i++)
            CHECK(memcmp(&a[i].amax, &b[i].amax, 4) == 0 && a[i].count == b[i].count &&
                      a[i].saturated == b[i].saturated && a[i].flushed == b[i].flushed,
                  "%s: %s slot %d: amax %g/%g count %llu/%llu saturated %llu/%llu flushed %llu/%llu", name,
                  d ? "backward" : "forward", i, (double)a[i].amax, (double)b[i].amax, (unsigned long long)a[i].count,
                  (unsigned long long)b[i].count, (unsigned long long)a[i].saturated,
                  (unsigned long long)b[i].saturated, (unsigned long long)a[i].flushed,
                  (unsigned long long)b[i].flushed);
    }
    uint64_t launches[2];
    for (int k = 0; k < 2; k++) { /* inference: the fused kernels' codes are the whole input cast */
        f8_tensor tx = f8_tensor_make(x[k], F8_DTYPE_FP32, T, K), ty = f8_tensor_make(yi[k], F8_DTYPE_FP32, T, N);
        f8_ctx_counters c0, c1;
        CHECK_OK(ctx[k], f8_ctx_counters_read(ctx[k], &c0));
        CHECK_OK(ctx[k], f8_module_forward(m[k], &tx, &ty, F8_MICROBATCH_NONE, NULL));
        CHECK_OK(ctx[k], f8_ctx_counters_read(ctx[k], &c1));
        launches[k] = c1.launches - c0.launches;
    }
    CHECK(fusion_same(ctx[0], yi[0], ctx[1], yi[1], (size_t)(T * N) * 4), "%s: y of inference differs", name);
    CHECK(launches[0] + (fc->mlp ? 2 : 1) == launches[1], "%s: inference launches fused %llu, unfused %llu (want %d "
          "fewer)", name, (unsigned long long)launches[0], (unsigned long long)launches[1], fc->mlp ? 2 : 1);
    for (int k = 0; k < 2; k++) {
        void *bufs[5] = {x[k], y[k], dy[k], dx[k], yi[k]};
        for (int b = 0; b < 5; b++) f8_ctx_free(ctx[k], bufs[b]);
        f8_saved_destroy(sv[k]);
        f8_module_destroy(m[k]);
        f8_ctx_destroy(ctx[k]);
    }
}

static void run_rowwise_fusion_tests(f8_backend be)
{
    static const f8_activation ACTS[] = {F8_ACT_GELU, F8_ACT_SWIGLU, F8_ACT_SRELU};
    const int before = test_failures;
    int cases = 0;
    for (int kind = 0; kind < 2; kind++)
        for (int mlp = 0; mlp < 2; mlp++)
            for (int a = 0; a < (mlp ? 3 : 1); a++)
                for (int norm = 0; norm < 2; norm++)
                    for (int bf16 = 0; bf16 < 2; bf16++) {
                        const fusion_case fc = {kind ? F8_RECIPE_ROWWISE_GW_HP : F8_RECIPE_ROWWISE, (a + norm) % 2, mlp,
                                                ACTS[a], norm ? F8_NORM_RMSNORM : F8_NORM_LAYERNORM,
                                                bf16 ? F8_DTYPE_BF16 : F8_DTYPE_FP32};
                        fusion_case_run(be, &fc);
                        cases++;
                    }
    printf("  row-wise casts fused into the norm and activations: %d modules bit for bit against the unfused "
           "path%s\n", cases, test_failures == before ? "" : " (FAILED)");
}

#endif /* F8_TESTS_ROWWISE_FUSION_TESTS_H */
