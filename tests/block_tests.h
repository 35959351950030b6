/*
 * block_tests.h — the modules under block scaling (F8_RECIPE_BLOCK) on one
 * backend (test_stack.c: the CPU; test_cuda_stack.c: CUDA, and there also
 * CUDA against the CPU):
 *  - the Linear → LayerNormLinear → LayerNormMLP stack (each activation; a
 *    shape of several partial tiles; power-of-two scales too) forward and
 *    backward against the same stack in high precision, within relative
 *    errors of 0.05 (forward) and 0.15 (gradients), see stack_vs_hp;
 *  - graphed against eager, checkpoint resume, a checkpoint refused across
 *    recipes (recipe_tests.h), fp8_weights refused.
 * The block cast and GEMM themselves: test_block.c.
 */
#ifndef F8_TESTS_BLOCK_TESTS_H
#define F8_TESTS_BLOCK_TESTS_H

#include "recipe_tests.h"

/* Relative Frobenius error of a backend tensor against another. */
static double tensor_rel(f8_ctx *ca, const void *a, f8_ctx *cb, const void *b, size_t n)
{
    float *x = (float *)xmalloc(n * 4), *y = (float *)xmalloc(n * 4);
    double *ref = (double *)xmalloc(n * 8);
    f8_ctx_download(ca, x, a, n * 4);
    f8_ctx_download(cb, y, b, n * 4);
    for (size_t i = 0; i < n; i++) ref[i] = y[i];
    const double e = rel_error(x, ref, n);
    free(x);
    free(y);
    free(ref);
    return e;
}

/* The stacks the comparisons below sweep: activation a (GELU..SRELU) on
 * small_cfg's shape, and with shape 1 (GELU's second case) T/H/F
 * 150/200/136, several tiles each way, the last partial. */
static stack_cfg block_sweep_cfg(int a, int shape)
{
    stack_cfg c = small_cfg(1, 0);
    c.act = (f8_activation)a;
    if (shape) {
        c.T = 150;
        c.H = 200;
        c.F = 136;
    }
    return c;
}

/* The stack under `fp8` (a BLOCK or CURRENT ctx) against the same stack in
 * high precision (FP8 off on `hp`), one forward and backward, per
 * activation and on a shape of several partial tiles: y within a relative
 * Frobenius error ||fp8 - hp|| / ||hp|| of 0.12, dx and every gradient of
 * 0.35. The bounds come from the formats over the stack's five GEMMs in a
 * row: E4M3 rounds each input by up to 2^-4 relative (~3.6% RMS on one GEMM
 * output, ~7-10% on y measured), E5M2 gradients by up to 2^-3 (measured up
 * to 0.25 on the ReLU-family MLPs, whose kinks pass a whole step on). Both
 * recipes are measured here and block scaling must not be worse than
 * per-tensor current scaling (run_block_tests). Elementwise bounds such as
 * TE's (0.125, 0.0675) are for FP8 against FP8. Returns the worst gradient
 * error. */
static double stack_vs_hp_w(f8_ctx *fp8, f8_ctx *hp, const char *tag, double *weights)
{
    double worst_y = 0, worst_g = 0, worst_w = 0;
    for (int a = F8_ACT_GELU; a <= F8_ACT_SRELU; a++)
        for (int shape = 0; shape < (a == F8_ACT_GELU ? 2 : 1); shape++) {
            stack_cfg c = block_sweep_cfg(a, shape), h = c;
            h.fp8 = 0;
            stack Bk, Hp;
            stack_create(&Bk, fp8, &c);
            stack_create(&Hp, hp, &h);
            stack_data(&Bk, 0, 0);
            stack_data(&Hp, 0, 0);
            CHECK_OK(fp8, stack_fwd_bwd(&Bk, F8_MICROBATCH_FIRST));
            CHECK_OK(hp, stack_fwd_bwd(&Hp, F8_MICROBATCH_FIRST));
            const size_t n = (size_t)(c.T * c.H);
            const double ey = tensor_rel(fp8, Bk.y, hp, Hp.y, n), edx = tensor_rel(fp8, Bk.dx, hp, Hp.dx, n);
            CHECK(ey <= 0.12 && edx <= 0.35, "%s vs hp, act %d shape %d: y %.4f, dx %.4f", tag, a, shape, ey, edx);
            if (ey > worst_y) worst_y = ey;
            if (edx > worst_g) worst_g = edx;
            for (int i = 0; i < STACK_NPARAM; i++) {
                f8_tensor gb, gh;
                stack_param(&Bk, i, 1, &gb);
                stack_param(&Hp, i, 1, &gh);
                const double e = tensor_rel(fp8, gb.data, hp, gh.data, (size_t)(gb.rows * gb.cols));
                CHECK(e <= 0.35, "%s vs hp, act %d shape %d: gradient of param %d %.4f", tag, a, shape, i, e);
                if (e > worst_g) worst_g = e;
                if (gb.rows > 1 && e > worst_w) worst_w = e; /* a weight (not a bias or norm vector) */
            }
            CHECK(ey > 0, "%s should differ a little from high precision", tag);
            stack_destroy(&Bk);
            stack_destroy(&Hp);
        }
    printf("  %s vs high precision (6 activations, T/H/F 64/64/128 and 150/200/136): worst relative error "
           "y %.4f, gradients %.4f (weights %.4f)\n", tag, worst_y, worst_g, worst_w);
    if (weights) *weights = worst_w;
    return worst_g;
}

static double stack_vs_hp(f8_ctx *fp8, f8_ctx *hp, const char *tag) { return stack_vs_hp_w(fp8, hp, tag, NULL); }

/* What the recipe refuses: fp8_weights on a BLOCK (ROWWISE) ctx, the
 * public per-tensor calls on a block- (row-) scaled weight workspace; `name`
 * is the recipe as the messages say it. */
static void test_block_refusals(f8_ctx *blk, const char *name)
{
    f8_linear_config c = f8_linear_config_default(32, 16);
    c.fp8_weights = 1;
    f8_module *m = NULL;
    CHECK_STATUS(blk, f8_linear_create(blk, &c, &m), F8_ERR_UNSUPPORTED);
    CHECK(m == NULL && strstr(f8_ctx_last_error(blk), name) != NULL, "fp8_weights refused: %s",
          f8_ctx_last_error(blk));
    c.fp8_weights = 0;
    CHECK_OK(blk, f8_linear_create(blk, &c, &m));
    const f8_qtensor *w8 = f8_module_weight_workspace(m, F8_PARAM_WEIGHT);
    f8_tensor view;
    CHECK_STATUS(blk, f8_qtensor_data(w8, &view), F8_ERR_UNSUPPORTED);
    f8_module_destroy(m);
}

static void run_block_tests(f8_backend be)
{
    char why[256] = "", path[256];
    snprintf(path, sizeof path, "/tmp/f8_test_block_%s_%d.safetensors", be == F8_BACKEND_CPU ? "cpu" : "cuda",
             (int)getpid());
    f8_recipe r = f8_recipe_default(), r2 = f8_recipe_default();
    r.kind = F8_RECIPE_BLOCK;
    r2.kind = F8_RECIPE_BLOCK;
    r2.power_2_scales = 1;
    f8_ctx *blk = test_ctx(be, &r, why), *blk2 = test_ctx(be, &r, why);
    f8_recipe rc = f8_recipe_default();
    rc.kind = F8_RECIPE_CURRENT;
    f8_ctx *p2 = test_ctx(be, &r2, why), *del = test_ctx(be, NULL, why);
    f8_ctx *cur = test_ctx(be, &rc, why);
    if (!blk || !blk2 || !p2 || !del || !cur) die(why, NULL);
    const double eb = stack_vs_hp(blk, del, "block scaling");
    stack_vs_hp(p2, del, "block scaling, power-of-two scales");
    const double ec = stack_vs_hp(cur, del, "current scaling");
    CHECK(eb <= ec * 1.05, "block scaling's worst gradient error %.4f is above current scaling's %.4f", eb, ec);
    f8_ctx_destroy(cur);
    test_block_refusals(blk, "block scaling");
    test_checkpoint_resume(blk, 1, 0, path);
    test_recipe_refused(blk, del, path);
    for (int inside = 0; inside <= 1; inside++) test_graph_vs_eager(blk, blk2, 1, 0, inside);
    remove(path);
    f8_ctx_destroy(blk);
    f8_ctx_destroy(blk2);
    f8_ctx_destroy(p2);
    f8_ctx_destroy(del);
}

/* One Linear [T 48, in 40, out 24], FP32, one forward and backward on ctx:
 * the relative Frobenius error of its dW against dyᵀ·x in FP64 from the
 * same FP32 x and dy (the wgrad operands: exact up to FP32 sums when the
 * wgrad GEMM runs in high precision, FP8 rounding otherwise). */
static double linear_wgrad_vs_fp64(f8_ctx *ctx)
{
    enum { T = 48, K = 40, N = 24 };
    f8_linear_config c = f8_linear_config_default(K, N);
    c.max_tokens = T;
    f8_module *m = NULL;
    f8_saved *sv = NULL;
    CHECK_OK(ctx, f8_linear_create(ctx, &c, &m));
    CHECK_OK(ctx, f8_module_saved_create(m, &sv));
    float hx[T * K], hdy[T * N], hdw[N * K];
    test_rng rng = {77};
    for (int i = 0; i < T * K; i++) hx[i] = (float)rng_normal(&rng) * (1.0f + (float)(i % 7));
    for (int i = 0; i < T * N; i++) hdy[i] = (float)rng_normal(&rng) * 0.01f;
    void *x = NULL, *dy = NULL, *y = NULL, *dx = NULL;
    CHECK_OK(ctx, f8_ctx_alloc(ctx, sizeof hx, &x));
    CHECK_OK(ctx, f8_ctx_alloc(ctx, sizeof hdy, &dy));
    CHECK_OK(ctx, f8_ctx_alloc(ctx, sizeof hdy, &y));
    CHECK_OK(ctx, f8_ctx_alloc(ctx, sizeof hx, &dx));
    CHECK_OK(ctx, f8_ctx_upload(ctx, x, hx, sizeof hx));
    CHECK_OK(ctx, f8_ctx_upload(ctx, dy, hdy, sizeof hdy));
    f8_tensor tx = f8_tensor_make(x, F8_DTYPE_FP32, T, K), ty = f8_tensor_make(y, F8_DTYPE_FP32, T, N);
    f8_tensor tdy = f8_tensor_make(dy, F8_DTYPE_FP32, T, N), tdx = f8_tensor_make(dx, F8_DTYPE_FP32, T, K), g;
    CHECK_OK(ctx, f8_module_forward(m, &tx, &ty, F8_MICROBATCH_FIRST, sv));
    CHECK_OK(ctx, f8_module_backward(m, sv, &tdy, &tdx));
    CHECK_OK(ctx, f8_module_param(m, F8_PARAM_WEIGHT, 1, &g));
    CHECK_OK(ctx, f8_ctx_download(ctx, hdw, g.data, sizeof hdw));
    double num = 0, den = 0;
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            double r = 0;
            for (int t = 0; t < T; t++) r += (double)hdy[t * N + n] * hx[t * K + k];
            num += (hdw[n * K + k] - r) * (hdw[n * K + k] - r);
            den += r * r;
        }
    void *all[4] = {x, dy, y, dx};
    for (int i = 0; i < 4; i++) f8_ctx_free(ctx, all[i]);
    f8_saved_destroy(sv);
    f8_module_destroy(m);
    return sqrt(num / den);
}

/* The modules under row-wise scaling (F8_RECIPE_ROWWISE, torchao's
 * "rowwise": E4M3 everywhere and power-of-two scales as torchao's recipe,
 * and HYBRID without pow2; ROWWISE_GW_HP, torchao's rowwise_with_gw_hp):
 * the stack against high precision within stack_vs_hp's bounds, no worse
 * than current scaling's gradients, the high-precision wgrad no worse than
 * row-wise's; fp8_weights refused, checkpoint resume and refusal across
 * recipes, graphed against eager (both variants). */
static void run_rowwise_tests(f8_backend be)
{
    char why[256] = "", path[256];
    snprintf(path, sizeof path, "/tmp/f8_test_rowwise_%s_%d.safetensors", be == F8_BACKEND_CPU ? "cpu" : "cuda",
             (int)getpid());
    f8_recipe r = f8_recipe_default(), rh = f8_recipe_default(), rc = f8_recipe_default();
    r.kind = F8_RECIPE_ROWWISE;
    r.format = F8_FORMAT_E4M3;
    r.power_2_scales = 1;
    rh.kind = F8_RECIPE_ROWWISE;
    rc.kind = F8_RECIPE_CURRENT;
    f8_ctx *row = test_ctx(be, &r, why), *row2 = test_ctx(be, &r, why), *hyb = test_ctx(be, &rh, why);
    f8_recipe rg = r;
    rg.kind = F8_RECIPE_ROWWISE_GW_HP;
    f8_ctx *del = test_ctx(be, NULL, why), *cur = test_ctx(be, &rc, why);
    f8_ctx *gw = test_ctx(be, &rg, why), *gw2 = test_ctx(be, &rg, why);
    if (!row || !row2 || !hyb || !del || !cur || !gw || !gw2) die(why, NULL);
    const double er = stack_vs_hp(row, del, "row-wise scaling (E4M3, power-of-two scales)");
    stack_vs_hp(hyb, del, "row-wise scaling (HYBRID)");
    const double eg = stack_vs_hp(gw, del, "row-wise scaling, wgrad in high precision");
    const double lr = linear_wgrad_vs_fp64(row), lg = linear_wgrad_vs_fp64(gw);
    printf("  a Linear's dW against FP64 dyᵀ·x: row-wise %.2e, wgrad in high precision %.2e\n", lr, lg);
    CHECK(lg <= 1e-6 && lr > 1e-3, "dW vs FP64: high-precision wgrad %.3g (want <= 1e-6), row-wise %.3g (FP8)", lg, lr);
    const double ec = stack_vs_hp(cur, del, "current scaling");
    CHECK(er <= ec * 1.05, "row-wise scaling's worst gradient error %.4f is above current scaling's %.4f", er, ec);
    CHECK(eg <= er * 1.05, "row-wise with a high-precision wgrad: worst gradient error %.4f above row-wise's %.4f", eg, er);
    f8_ctx_destroy(cur);
    test_block_refusals(row, "row-wise scaling");
    test_checkpoint_resume(row, 1, 0, path);
    test_recipe_refused(hyb, del, path); /* the same format: the kind is what differs */
    for (int inside = 0; inside <= 1; inside++) test_graph_vs_eager(row, row2, 1, 0, inside);
    for (int inside = 0; inside <= 1; inside++) test_graph_vs_eager(gw, gw2, 1, 0, inside);
    test_checkpoint_resume(gw, 1, 0, path);
    remove(path);
    f8_ctx_destroy(gw);
    f8_ctx_destroy(gw2);
    f8_ctx_destroy(row);
    f8_ctx_destroy(row2);
    f8_ctx_destroy(hyb);
    f8_ctx_destroy(del);
}

#endif /* F8_TESTS_BLOCK_TESTS_H */
