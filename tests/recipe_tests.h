/*
 * recipe_tests.h — the recipes other than delayed scaling on the
 * Linear → LayerNormLinear → LayerNormMLP stack, run on one backend:
 *  - current scaling sets every used slot's scale from the amax of the tensor
 *    its cast saw (scale = f8_scale_from_amax(amax, 1, fp8_max, margin) bit
 *    for bit, recorded amax in history row 0), and casts with it: the same
 *    stack under delayed scaling, its slots preset to those scales, gives the
 *    same outputs and gradients (bitwise where `exact`: the fused norm and
 *    activation casts of delayed scaling compute the same values);
 *  - the stack tests of stack_tests.h and checkpoint_tests.h under current
 *    scaling: graphed against eager training, resume from a checkpoint;
 *  - a checkpoint written under current scaling is refused by a
 *    delayed-scaling ctx (and the other way), the module unchanged.
 * test_stack.c runs them on the CPU, test_cuda_stack.c on the GPU.
 */
#ifndef F8_TESTS_RECIPE_TESTS_H
#define F8_TESTS_RECIPE_TESTS_H

#include "checkpoint_tests.h"
#include "stack_tests.h"

enum { STACK_SLOTS = 20 }; /* 3 + 3 + 6 forward, 2 + 2 + 4 backward */

/* Every slot of the stack (stack_slots' order): scale, scale_inv, history
 * row 0, and the slot's FP8 max. */
static void stack_slot_values(stack *s, float *scale, float *sinv, float *h0, float *fmax)
{
    const int L = f8_ctx_recipe(s->ctx)->amax_history_len;
    float *hist = (float *)xmalloc((size_t)L * 4);
    int j = 0;
    for (int d = 0; d < 2; d++) {
        const int counts[3] = {d ? 2 : 3, d ? 2 : 3, d ? 4 : 6};
        f8_module *mods[3] = {s->lin, s->lnl, s->mlp};
        for (int m = 0; m < 3; m++)
            for (int i = 0; i < counts[m]; i++, j++) {
                f8_slot sl;
                f8_module_slot(mods[m], (f8_direction)d, i, &sl);
                if (f8_slot_read(s->ctx, sl, &scale[j], &sinv[j], hist) != F8_OK) die("slot read", s->ctx);
                h0[j] = hist[0];
                fmax[j] = f8_fp8_max(f8_ctx_slot_dtype(s->ctx, (f8_direction)d));
            }
    }
    free(hist);
}

/* cur: a CURRENT ctx, del: a DELAYED one of the same backend. */
static void test_current_scales(f8_ctx *cur, f8_ctx *del, int exact)
{
    stack_cfg c = small_cfg(1, 0);
    stack C, D;
    stack_create(&C, cur, &c);
    stack_data(&C, 0, 0);
    CHECK_OK(cur, stack_fwd_bwd(&C, F8_MICROBATCH_FIRST));
    float sc[STACK_SLOTS], si[STACK_SLOTS], h0[STACK_SLOTS], fm[STACK_SLOTS];
    stack_slot_values(&C, sc, si, h0, fm);
    const int margin = f8_ctx_recipe(cur)->margin;
    int used = 0, right = 0;
    for (int j = 0; j < STACK_SLOTS; j++) {
        /* one cast per used slot in this step: its amax is the record */
        const float want = f8_scale_from_amax(h0[j], 1.0f, fm[j], margin);
        used += h0[j] > 0.0f;
        right += memcmp(&want, &sc[j], 4) == 0 && si[j] == 1.0f / sc[j];
    }
    CHECK(used == 12, "current scaling: %d slots saw a cast, expected 12 (inputs, weights, grads)", used);
    CHECK(right == STACK_SLOTS, "current scaling: %d of %d slot scales are f8_scale_from_amax(amax)", right,
          STACK_SLOTS);

    /* Delayed scaling with the same scales preset must cast the same codes. */
    stack_create(&D, del, &c);
    const int L = f8_ctx_recipe(del)->amax_history_len;
    float *zero = (float *)calloc((size_t)L, 4);
    int j = 0;
    for (int d = 0; d < 2; d++) {
        const int counts[3] = {d ? 2 : 3, d ? 2 : 3, d ? 4 : 6};
        f8_module *mods[3] = {D.lin, D.lnl, D.mlp};
        for (int m = 0; m < 3; m++)
            for (int i = 0; i < counts[m]; i++, j++) {
                f8_slot sl;
                f8_module_slot(mods[m], (f8_direction)d, i, &sl);
                CHECK_OK(del, f8_slot_write(del, sl, sc[j], si[j], zero));
            }
    }
    free(zero);
    stack_data(&D, 0, 0);
    CHECK_OK(del, stack_fwd_bwd(&D, F8_MICROBATCH_FIRST));
    size_t nc, nd;
    unsigned char *pc = stack_snapshot(&C, &nc), *pd = stack_snapshot(&D, &nd);
    if (exact) {
        CHECK(nc == nd && memcmp(pc, pd, nc) == 0, "current scaling vs delayed with the same scales: differ");
    } else {
        double worst = 0;
        CHECK(nc == nd && allclose((const float *)pc, (const float *)pd, nc / 4, 1e-2, 1e-3, &worst),
              "current scaling vs delayed with the same scales: worst ratio %g", worst);
    }
    float dsc[STACK_SLOTS], dsi[STACK_SLOTS], dh0[STACK_SLOTS];
    stack_slot_values(&D, dsc, dsi, dh0, fm);
    CHECK(!exact || memcmp(h0, dh0, sizeof h0) == 0, "current scaling records the amaxes delayed scaling records");
    free(pc);
    free(pd);
    stack_destroy(&C);
    stack_destroy(&D);
}

/* A checkpoint of a CURRENT stack refused by a DELAYED stack and the other
 * way, with the module left as it was. */
static void test_recipe_refused(f8_ctx *cur, f8_ctx *del, const char *path)
{
    stack_cfg c = small_cfg(1, 0);
    stack C, D;
    stack_create(&C, cur, &c);
    stack_create(&D, del, &c);
    stack_train(&C, 0, 1);
    stack_train(&D, 0, 1);
    stack *pairs[2][2] = {{&C, &D}, {&D, &C}};
    for (int k = 0; k < 2; k++) {
        stack *from = pairs[k][0], *into = pairs[k][1];
        CHECK_OK(from->ctx, stack_save(from, path));
        size_t n0, n1;
        unsigned char *before = stack_snapshot(into, &n0);
        f8_checkpoint *ck = NULL;
        CHECK_OK(into->ctx, f8_checkpoint_load(into->ctx, path, &ck));
        CHECK_STATUS(into->ctx, f8_checkpoint_restore_module(ck, "blocks.0.proj", into->lin), F8_ERR_INVALID_ARGUMENT);
        CHECK(strstr(f8_ctx_last_error(into->ctx), "scaling") != NULL, "the refusal names the scaling recipe: %s",
              f8_ctx_last_error(into->ctx));
        f8_checkpoint_destroy(ck);
        unsigned char *after = stack_snapshot(into, &n1);
        CHECK(n0 == n1 && memcmp(before, after, n0) == 0, "a refused restore changed the module");
        free(before);
        free(after);
    }
    remove(path);
    stack_destroy(&C);
    stack_destroy(&D);
}

/* The recipe API: kinds, names, what f8_ctx_create refuses. */
static void test_recipe_api(f8_backend backend)
{
    f8_recipe r = f8_recipe_default();
    CHECK(r.kind == F8_RECIPE_DELAYED && r.power_2_scales == 0, "default recipe: delayed, no power-of-two scales");
    CHECK(strcmp(f8_recipe_kind_name(F8_RECIPE_CURRENT), "current") == 0 &&
              strcmp(f8_recipe_kind_name((f8_recipe_kind)9), "unknown") == 0,
          "f8_recipe_kind_name");
    const struct {
        int kind, pow2;
        f8_status want;
    } cases[] = {{F8_RECIPE_BLOCK, 0, F8_ERR_UNSUPPORTED},
                 {7, 0, F8_ERR_INVALID_ARGUMENT},
                 {-1, 0, F8_ERR_INVALID_ARGUMENT},
                 {F8_RECIPE_DELAYED, 1, F8_ERR_INVALID_ARGUMENT},
                 {F8_RECIPE_CURRENT, 2, F8_ERR_INVALID_ARGUMENT},
                 {F8_RECIPE_CURRENT, 1, F8_OK}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        f8_ctx_config cfg = f8_ctx_config_default();
        cfg.backend = backend;
        cfg.recipe.kind = (f8_recipe_kind)cases[i].kind;
        cfg.recipe.power_2_scales = cases[i].pow2;
        f8_ctx *ctx = NULL;
        char msg[256] = "";
        f8_status st = f8_ctx_create(&cfg, &ctx, msg, sizeof msg);
        CHECK(st == cases[i].want && (st == F8_OK) == (ctx != NULL), "recipe kind %d pow2 %d: %s (%s)",
              cases[i].kind, cases[i].pow2, f8_status_string(st), msg);
        CHECK(st == F8_OK || msg[0] != '\0', "a refused recipe says why");
        f8_ctx_destroy(ctx);
    }
}

/* Quantize through a slot under CURRENT, checked on the host against
 * f8.h's scalar functions: the amax pass over this tensor, its scale
 * (power-of-two variant too), the codes, scale_inv, the recorded amax, the
 * kept scale when the amax is 0, inf or NaN, and the noop flag. */
static void test_current_quantize(f8_backend backend, int pow2, int margin)
{
    char why[256] = "";
    f8_recipe r = f8_recipe_default();
    r.kind = F8_RECIPE_CURRENT;
    r.power_2_scales = pow2;
    r.margin = margin;
    r.amax_history_len = 4;
    f8_ctx *ctx = test_ctx(backend, &r, why);
    if (!ctx) die(why, NULL);
    const int64_t rows = 37, cols = 53, n = rows * cols;
    float *h = (float *)xmalloc((size_t)n * 4);
    uint8_t *codes = (uint8_t *)xmalloc((size_t)n);
    void *src = NULL, *flag = NULL;
    if (f8_ctx_alloc(ctx, (size_t)n * 4, &src) != F8_OK || f8_ctx_alloc(ctx, 4, &flag) != F8_OK) die("alloc", ctx);
    f8_slot slot[2];
    CHECK_OK(ctx, f8_ctx_slots_create(ctx, F8_DIR_FORWARD, 1, &slot[0]));
    CHECK_OK(ctx, f8_ctx_slots_create(ctx, F8_DIR_BACKWARD, 1, &slot[1]));
    test_rng rng = {77u + (uint64_t)pow2};
    /* cases: 0 normal, 1 with NaN and big values, 2 all zero, 3 an inf, 4 tiny */
    for (int cs = 0; cs < 5; cs++)
        for (int d = 0; d < 2; d++) {
            const f8_dtype dt = f8_ctx_slot_dtype(ctx, (f8_direction)d);
            float amax = 0;
            for (int64_t i = 0; i < n; i++) {
                float v = (float)rng_normal(&rng) * (cs == 4 ? 1e-30f : 3.0f);
                if (cs == 1 && i % 101 == 7) v = i % 2 ? NAN : 1e4f;
                if (cs == 2) v = 0.0f;
                if (cs == 3 && i == n / 2) v = -INFINITY;
                h[i] = v;
                if (!isnan(v)) amax = fmaxf(amax, fabsf(v));
            }
            const float old = 0.75f; /* a scale to keep */
            CHECK_OK(ctx, f8_slot_write(ctx, slot[d], old, 1.0f / old, NULL));
            float hist_before[4];
            CHECK_OK(ctx, f8_slot_read(ctx, slot[d], NULL, NULL, hist_before));
            f8_qtensor *q = NULL;
            CHECK_OK(ctx, f8_qtensor_create(ctx, dt, rows, cols, &q));
            CHECK_OK(ctx, f8_ctx_upload(ctx, src, h, (size_t)n * 4));
            f8_tensor t = f8_tensor_make(src, F8_DTYPE_FP32, rows, cols);
            CHECK_OK(ctx, f8_qtensor_quantize(q, &t, slot[d], 1, NULL));
            float want = f8_scale_from_amax(amax, old, f8_fp8_max(dt), margin);
            if (pow2) {
                uint32_t u;
                memcpy(&u, &want, 4);
                u &= 0xFF800000u;
                memcpy(&want, &u, 4);
            }
            float scale = 0, sinv = 0, hist[4], qsinv = 0;
            CHECK_OK(ctx, f8_slot_read(ctx, slot[d], &scale, &sinv, hist));
            CHECK(memcmp(&scale, &want, 4) == 0 && sinv == 1.0f / want,
                  "case %d dir %d pow2 %d margin %d: slot scale %g (want %g), scale_inv %g", cs, d, pow2, margin,
                  scale, want, sinv);
            CHECK(hist[0] == fmaxf(hist_before[0], amax) || (isinf(amax) && isinf(hist[0])),
                  "case %d: history row 0 %g records the amax %g", cs, hist[0], amax);
            if (cs == 2 || cs == 3) CHECK(want == (pow2 ? 0.5f : old), "case %d: an amax of 0 or inf keeps the scale", cs);
            f8_tensor v;
            f8_qtensor_data(q, &v);
            CHECK_OK(ctx, f8_ctx_download(ctx, codes, v.data, (size_t)n));
            CHECK_OK(ctx, f8_ctx_download(ctx, &qsinv, v.scale_inv, 4));
            int64_t bad = 0;
            for (int64_t i = 0; i < n; i++) bad += codes[i] != f8_fp8_from_float(h[i] * want, dt);
            CHECK(bad == 0 && qsinv == 1.0f / want, "case %d dir %d: %lld codes differ from fp8(x * scale)", cs, d,
                  (long long)bad);
            /* with the noop flag at 1 nothing is written, not even the slot */
            const float one = 1.0f, other = 0.5f;
            CHECK_OK(ctx, f8_slot_write(ctx, slot[d], other, 1.0f / other, NULL));
            CHECK_OK(ctx, f8_ctx_upload(ctx, flag, &one, 4));
            CHECK_OK(ctx, f8_qtensor_quantize(q, &t, slot[d], 1, (const float *)flag));
            CHECK_OK(ctx, f8_slot_read(ctx, slot[d], &scale, NULL, NULL));
            CHECK(scale == other, "noop flag: the amax pass left the slot scale alone (%g)", scale);
            f8_qtensor_destroy(q);
        }
    f8_ctx_free(ctx, src);
    f8_ctx_free(ctx, flag);
    free(h);
    free(codes);
    f8_ctx_destroy(ctx);
}

/* Everything above on one backend; a second CURRENT ctx for the graph tests. */
static void run_recipe_tests(f8_backend backend, const char *tag)
{
    char why[256] = "", path[256];
    snprintf(path, sizeof path, "/tmp/f8_test_recipe_%s_%d.safetensors", tag, (int)getpid());
    f8_recipe r = f8_recipe_default();
    r.kind = F8_RECIPE_CURRENT;
    f8_ctx *cur = test_ctx(backend, &r, why), *cur2 = test_ctx(backend, &r, why), *del = test_ctx(backend, NULL, why);
    if (!cur || !cur2 || !del) die(why, NULL);
    test_recipe_api(backend);
    for (int pow2 = 0; pow2 <= 1; pow2++) test_current_quantize(backend, pow2, pow2 ? 0 : 1);
    test_current_scales(cur, del, backend == F8_BACKEND_CPU);
    for (int fw = 0; fw <= 1; fw++) test_checkpoint_resume(cur, 1, fw, path);
    test_recipe_refused(cur, del, path);
    for (int fw = 0; fw <= 1; fw++)
        for (int inside = 0; inside <= 1; inside++) test_graph_vs_eager(cur, cur2, 1, fw, inside);
    remove(path);
    f8_ctx_destroy(cur);
    f8_ctx_destroy(cur2);
    f8_ctx_destroy(del);
}

#endif /* F8_TESTS_RECIPE_TESTS_H */
