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
    } cases[] = {{F8_RECIPE_BLOCK, 0, F8_OK}, /* both backends */
                 {F8_RECIPE_BLOCK, 1, F8_OK},
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

/* FP8 telemetry of a cast through a slot against the host: elements,
 * saturated (|x·scale| > max before the clamp) and flushed (x != 0, code
 * ±0) counts, the amax and scale of the step, for the flat cast and the
 * tiled cast (with transpose), under both recipes; the snapshot is taken by
 * f8_ctx_update_scales and the counters start again from 0. */
static void test_telemetry_cast(f8_backend backend, f8_recipe_kind kind)
{
    char why[256] = "";
    f8_recipe r = f8_recipe_default();
    r.kind = kind;
    r.amax_history_len = 2;
    f8_ctx *ctx = test_ctx(backend, &r, why);
    if (!ctx) die(why, NULL);
    f8_fp8_stats st[2];
    CHECK_STATUS(ctx, f8_ctx_telemetry_read(ctx, F8_DIR_FORWARD, 0, 1, st), F8_ERR_STATE);
    CHECK_OK(ctx, f8_ctx_enable_telemetry(ctx));
    CHECK(f8_ctx_telemetry_enabled(ctx) == 1, "telemetry on");
    f8_slot slot[2];
    CHECK_OK(ctx, f8_ctx_slots_create(ctx, F8_DIR_FORWARD, 1, &slot[0]));
    CHECK_OK(ctx, f8_ctx_slots_create(ctx, F8_DIR_BACKWARD, 1, &slot[1]));
    CHECK_STATUS(ctx, f8_ctx_telemetry_read(ctx, F8_DIR_FORWARD, 0, 2, st), F8_ERR_INVALID_ARGUMENT);
    const int64_t rows = 131, cols = 67, n = rows * cols;
    float *h = (float *)xmalloc((size_t)n * 4);
    void *src = NULL;
    if (f8_ctx_alloc(ctx, (size_t)n * 4, &src) != F8_OK) die("alloc", ctx);
    test_rng rng = {991u + (uint64_t)kind};
    for (int d = 0; d < 2; d++)
        for (int t = 0; t <= 1; t++) {
            const f8_dtype dt = f8_ctx_slot_dtype(ctx, (f8_direction)d);
            const float sc = kind == F8_RECIPE_DELAYED ? 4.0f : 0.0f;
            float amax = 0;
            for (int64_t i = 0; i < n; i++) {
                float v = (float)rng_normal(&rng) * (i % 3 == 0 ? 1e-6f : i % 3 == 1 ? 1.0f : 300.0f);
                if (i % 97 == 5) v = i % 2 ? NAN : -INFINITY;
                if (i % 89 == 3) v = 0.0f;
                if (kind == F8_RECIPE_CURRENT && i % 97 == 5) v = NAN; /* keep a finite amax */
                h[i] = v;
                if (!isnan(v)) amax = fmaxf(amax, fabsf(v));
            }
            if (kind == F8_RECIPE_DELAYED) CHECK_OK(ctx, f8_slot_write(ctx, slot[d], sc, 1.0f / sc, NULL));
            CHECK_OK(ctx, f8_ctx_upload(ctx, src, h, (size_t)n * 4));
            f8_qtensor *q = NULL;
            CHECK_OK(ctx, f8_qtensor_create(ctx, dt, rows, cols, &q));
            f8_tensor x = f8_tensor_make(src, F8_DTYPE_FP32, rows, cols);
            CHECK_OK(ctx, f8_qtensor_quantize(q, &x, slot[d], t, NULL));
            float scale = 0;
            CHECK_OK(ctx, f8_slot_read(ctx, slot[d], &scale, NULL, NULL));
            uint64_t host[3];
            fp8_host_stats(h, n, scale, dt, host);
            const uint64_t sat = host[1], fl = host[2];
            CHECK_OK(ctx, f8_ctx_update_scales(ctx, (f8_direction)d));
            CHECK_OK(ctx, f8_ctx_telemetry_read(ctx, (f8_direction)d, 0, 1, st));
            CHECK(st[0].count == (uint64_t)n && st[0].saturated == sat && st[0].flushed == fl,
                  "telemetry %s dir %d transpose %d: count %llu sat %llu flushed %llu, host %lld %llu %llu",
                  f8_recipe_kind_name(kind), d, t, (unsigned long long)st[0].count,
                  (unsigned long long)st[0].saturated, (unsigned long long)st[0].flushed, (long long)n,
                  (unsigned long long)sat, (unsigned long long)fl);
            CHECK(st[0].amax == amax && st[0].scale == scale, "telemetry: amax %g (%g), scale %g (%g)", st[0].amax,
                  amax, st[0].scale, scale);
            CHECK((kind == F8_RECIPE_CURRENT || sat > 0) && fl > 0, "the test data saturates (%llu) and flushes (%llu)", (unsigned long long)sat,
                  (unsigned long long)fl);
            /* the next step starts from zero */
            CHECK_OK(ctx, f8_ctx_update_scales(ctx, (f8_direction)d));
            CHECK_OK(ctx, f8_ctx_telemetry_read(ctx, (f8_direction)d, 0, 1, st));
            CHECK(st[0].count == 0 && st[0].saturated == 0 && st[0].flushed == 0, "telemetry: counters cleared");
            f8_qtensor_destroy(q);
        }
    f8_ctx_free(ctx, src);
    free(h);
    f8_ctx_destroy(ctx);
}

/* The stack with telemetry: every used slot counts its tensor's elements,
 * the snapshot's amax and scale are the slot's before the update, and (CPU)
 * the training values are bitwise those of the stack without telemetry. */
static void test_telemetry_stack(f8_backend backend, f8_recipe_kind kind)
{
    char why[256] = "";
    f8_recipe r = f8_recipe_default();
    r.kind = kind;
    f8_ctx *on = test_ctx(backend, &r, why), *off = test_ctx(backend, &r, why);
    if (!on || !off) die(why, NULL);
    CHECK_OK(on, f8_ctx_enable_telemetry(on));
    stack_cfg c = small_cfg(1, 0);
    stack A, B;
    stack_create(&A, on, &c);
    stack_create(&B, off, &c);
    CHECK_STATUS(on, f8_ctx_enable_telemetry(off), F8_ERR_STATE);
    stack_data(&A, 0, 0);
    stack_data(&B, 0, 0);
    CHECK_OK(on, stack_fwd_bwd(&A, F8_MICROBATCH_FIRST));
    CHECK_OK(off, stack_fwd_bwd(&B, F8_MICROBATCH_FIRST));
    float sc[STACK_SLOTS], si[STACK_SLOTS], h0[STACK_SLOTS], fm[STACK_SLOTS];
    stack_slot_values(&A, sc, si, h0, fm);
    CHECK_OK(on, stack_update_scales(&A));
    CHECK_OK(off, stack_update_scales(&B));
    size_t na, nb;
    unsigned char *pa = stack_snapshot(&A, &na), *pb = stack_snapshot(&B, &nb);
    if (backend == F8_BACKEND_CPU) CHECK(na == nb && memcmp(pa, pb, na) == 0, "telemetry changed the training values");
    free(pa);
    free(pb);
    /* The stack's slots in registration order: lin 0-2, lnl 3-5, mlp 6-11 forward; lin 0-1, lnl 2-3, mlp 4-7. */
    const uint64_t T = (uint64_t)c.T, H = (uint64_t)c.H, F = (uint64_t)c.F;
    const uint64_t fwd[12] = {T * H, H * H, 0, T * H, H * H, 0, T * H, F * H, 0, T * F, H * F, 0};
    const uint64_t bwd[8] = {T * H, 0, T * H, 0, T * H, 0, T * F, 0};
    f8_fp8_stats st[12];
    CHECK_OK(on, f8_ctx_telemetry_read(on, F8_DIR_FORWARD, 0, 12, st));
    int ok = 1, j = 0;
    for (int i = 0; i < 12; i++, j++) ok &= st[i].count == fwd[i] && st[i].amax == h0[j] && st[i].scale == sc[j];
    CHECK_OK(on, f8_ctx_telemetry_read(on, F8_DIR_BACKWARD, 0, 8, st));
    for (int i = 0; i < 8; i++, j++) ok &= st[i].count == bwd[i] && st[i].amax == h0[j] && st[i].scale == sc[j];
    CHECK(ok, "telemetry of the stack (%s): counts, amaxes and scales of every slot", f8_recipe_kind_name(kind));
    stack_destroy(&A);
    stack_destroy(&B);
    f8_ctx_destroy(on);
    f8_ctx_destroy(off);
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
    for (int k = 0; k <= 1; k++) {
        test_telemetry_cast(backend, (f8_recipe_kind)k);
        test_telemetry_stack(backend, (f8_recipe_kind)k);
    }
    for (int fw = 0; fw <= 1; fw++)
        for (int inside = 0; inside <= 1; inside++) test_graph_vs_eager(cur, cur2, 1, fw, inside);
    remove(path);
    f8_ctx_destroy(cur);
    f8_ctx_destroy(cur2);
    f8_ctx_destroy(del);
}

#endif /* F8_TESTS_RECIPE_TESTS_H */
