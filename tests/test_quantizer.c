/*
 * test_quantizer.c — the quantizer's answers to the modules
 * (core/quantizer.h) under every recipe, on the CPU, against the recipes'
 * definitions written out here (delayed and current: one scale per tensor;
 * block: 1x128 tiles for activations, 128x128 blocks for weights; the
 * row-wise recipes: one scale per row of each orientation):
 *  - the factory's modes and flags;
 *  - what a module keeps: whether an activation's column-wise copy comes
 *    from the high-precision values, which scale_inv each orientation reads,
 *    and the scale_inv buffers a layout takes (sizes counted here from the
 *    shape, one scalar placed once for both orientations);
 *  - whether a sequence-parallel rank may cast its own rows alone;
 *  - a cast's scaling fields, then the cast they make: its codes decode to
 *    the source within the format's rounding;
 *  - the creation refusals, which name the recipe;
 *  - a weight workspace: the per-tensor mode allocates nothing more, and its
 *    column-wise copy is the transpose of its codes.
 */
#include <float.h>

#include "check.h"
#include "core/ops.h"
#include "core/qtensor.h"
#include "core/quantizer.h"

typedef struct recipe_row {
    f8_recipe_kind kind;
    f8i_scaling_mode act, weight;
    int current, unfused, wgrad_hp;
} recipe_row;

static const recipe_row RECIPES[] = {
    {F8_RECIPE_DELAYED, F8I_SCALING_TENSOR, F8I_SCALING_TENSOR, 0, 0, 0},
    {F8_RECIPE_CURRENT, F8I_SCALING_TENSOR, F8I_SCALING_TENSOR, 1, 1, 0},
    {F8_RECIPE_BLOCK, F8I_SCALING_BLOCK_1X128, F8I_SCALING_BLOCK_128X128, 0, 1, 0},
    {F8_RECIPE_ROWWISE, F8I_SCALING_ROW, F8I_SCALING_ROW, 0, 1, 0},
    {F8_RECIPE_ROWWISE_GW_HP, F8I_SCALING_ROW, F8I_SCALING_ROW, 0, 1, 1},
};
enum { NRECIPES = sizeof RECIPES / sizeof RECIPES[0] };

/* A CPU ctx of the recipe, or NULL where the recipe refuses pow2. */
static f8_ctx *try_ctx(f8_recipe_kind kind, int margin, int pow2)
{
    f8_ctx_config cfg = f8_ctx_config_default();
    cfg.backend = F8_BACKEND_CPU;
    cfg.recipe.kind = kind;
    cfg.recipe.margin = margin;
    cfg.recipe.power_2_scales = pow2;
    f8_ctx *ctx = NULL;
    char msg[256] = "";
    if (f8_ctx_create(&cfg, &ctx, msg, sizeof msg) != F8_OK) {
        if (!pow2) die(msg, NULL);
        return NULL;
    }
    return ctx;
}

static f8_ctx *make_ctx(f8_recipe_kind kind) { return try_ctx(kind, 0, 0); }

/* The scale_inv floats of one orientation [rows, cols] by the definitions. */
static int64_t scales_of(f8i_scaling_mode mode, int64_t rows, int64_t cols)
{
    if (mode == F8I_SCALING_BLOCK_1X128) return rows * ((cols + 127) / 128);
    if (mode == F8I_SCALING_ROW) return rows;
    return 1;
}

static size_t round256(size_t b) { return (b + 255) / 256 * 256; }

static void test_answers(const recipe_row *r)
{
    f8_ctx *ctx = make_ctx(r->kind);
    const char *name = f8_recipe_kind_name(r->kind);
    const f8i_quantizer q = f8i_quantizer_for(ctx);
    CHECK(q.act == r->act && q.weight == r->weight, "%s: modes %d/%d", name, (int)q.act, (int)q.weight);
    CHECK(q.current == r->current && q.unfused == r->unfused && q.wgrad_hp == r->wgrad_hp,
          "%s: current %d unfused %d wgrad_hp %d", name, q.current, q.unfused, q.wgrad_hp);
    const int own = r->act != F8I_SCALING_TENSOR; /* each orientation its own scales */
    CHECK(f8i_quantizer_colwise_from_hp(&q) == own, "%s: column-wise copy from high precision", name);
    CHECK(f8i_quantizer_casts_shards(&q) == !own, "%s: a rank may cast its shard alone", name);
    float shared = 0, mine = 0;
    CHECK(f8i_quantizer_sinv(&q, &shared, &mine) == (own ? &mine : &shared), "%s: the scale_inv read", name);

    static const int64_t SHAPES[][2] = {{1, 1}, {300, 260}, {128, 128}, {129, 4095}, {4096, 17}};
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++) {
        const int64_t R = SHAPES[s][0], C = SHAPES[s][1];
        const size_t rb = (size_t)scales_of(r->act, R, C) * 4, cb = (size_t)scales_of(r->act, C, R) * 4;
        const size_t want_either = own ? (rb > cb ? rb : cb) : 4;
        CHECK(f8i_quantizer_sinv_bytes(&q, R, C, 4) == want_either, "%s [%lld, %lld]: one buffer for either: %zu",
              name, (long long)R, (long long)C, f8i_quantizer_sinv_bytes(&q, R, C, 4));
        CHECK(f8i_quantizer_sinv_bytes(&q, R, C, 1 << 20) == (size_t)1 << 20, "%s: the caller's larger bytes", name);
        for (int t = 0; t < 2; t++) {
            f8i_layout l = f8i_layout_at(NULL);
            float *a = NULL, *b = NULL;
            f8i_quantizer_take_sinv(&q, &l, R, C, t, &a, &b);
            const size_t want = own ? round256(rb) + (t ? round256(cb) : 0) : 256;
            CHECK(l.bytes == want, "%s [%lld, %lld] t %d: %zu bytes taken, %zu wanted", name, (long long)R,
                  (long long)C, t, l.bytes, want);
            static unsigned char base[1 << 16]; /* more than the largest pair above */
            l = f8i_layout_at(base);
            f8i_quantizer_take_sinv(&q, &l, R, C, t, &a, &b);
            CHECK((void *)a == (void *)base, "%s: data's scale_inv first", name);
            if (own) CHECK(t ? (unsigned char *)b == base + round256(rb) : b == NULL, "%s t %d: its own", name, t);
            else CHECK(b == a, "%s t %d: one scalar for both orientations", name, t);
        }
        f8i_layout l = f8i_layout_at(NULL);
        (void)f8i_quantizer_take_own_sinv(&q, &l, R, C);
        CHECK(l.bytes == (own ? round256(rb) : 0), "%s: the row-wise scale_inv apart: %zu bytes", name, l.bytes);
    }

    /* the refusals at creation */
    f8_status st = f8i_quantizer_check_recompute_norm(ctx, &q, "fn");
    CHECK(st == (own ? F8_ERR_UNSUPPORTED : F8_OK), "%s: recompute_norm_output: %s", name, f8_status_string(st));
    if (own)
        CHECK(strstr(f8_ctx_last_error(ctx), r->act == F8I_SCALING_ROW ? "F8_RECIPE_ROWWISE" : "F8_RECIPE_BLOCK") &&
                  strstr(f8_ctx_last_error(ctx), "fn: "),
              "%s: the refusal names the recipe and the call: %s", name, f8_ctx_last_error(ctx));
    st = f8i_quantizer_check_fp8_weights(ctx, &q, "fn");
    CHECK(st == (own ? F8_ERR_UNSUPPORTED : F8_OK), "%s: fp8_weights: %s", name, f8_status_string(st));
    if (own)
        CHECK(strstr(f8_ctx_last_error(ctx), r->act == F8I_SCALING_ROW ? "row-wise" : "block scaling") != NULL,
              "%s: the refusal names the scaling: %s", name, f8_ctx_last_error(ctx));
    f8_ctx_destroy(ctx);
}

/* A cast's scaling from the quantizer, then the cast itself: every code
 * decodes (times its scale_inv) to the source within half an FP8 step. */
static void test_cast_scaling(const recipe_row *r, int margin, int pow2)
{
    f8_ctx *ctx = try_ctx(r->kind, margin, pow2);
    if (!ctx) return; /* delayed scaling takes no power-of-two scales */
    const char *name = f8_recipe_kind_name(r->kind);
    const f8i_quantizer q = f8i_quantizer_for(ctx);
    f8_slot sl;
    if (f8_ctx_slots_create(ctx, F8_DIR_FORWARD, 1, &sl) != F8_OK) die("f8_ctx_slots_create", ctx);
    enum { R = 3, C = 200 };
    float src[R * C];
    for (int i = 0; i < R * C; i++) src[i] = (float)((i * 37 % 101) - 50) * (i % 7 == 0 ? 3.0f : 0.25f);
    uint8_t out[R * C], out_t[R * C];
    float sinv[R * C], sinv_t[R * C];
    f8i_cast_args c;
    memset(&c, 0, sizeof c);
    c.src = src;
    c.src_dtype = F8_DTYPE_FP32;
    c.rows = R;
    c.cols = C;
    c.out_dtype = F8_DTYPE_E4M3;
    c.out = out;
    c.scale_inv = sinv;
    c.out_t = r->act == F8I_SCALING_TENSOR ? NULL : out_t;
    c.scale_inv_t = sinv_t;
    CHECK_OK(ctx, f8i_quantizer_cast_scaling(ctx, q.act, sl, &c));
    /* the amax: the cast records it, except under current scaling, whose amax pass did */
    CHECK(c.mode == q.act && c.stats == f8i_slot_stats(ctx, sl) && (c.amax != NULL) == !q.current,
          "%s: mode, telemetry, amax", name);
    if (r->act == F8I_SCALING_TENSOR) {
        CHECK(c.scale == f8i_slot_scale(ctx, sl) && c.scale_inv_t == NULL, "%s: the slot's scale, one scalar", name);
    } else {
        CHECK(c.scale == NULL && c.scaled_max == ldexpf(448.0f, -margin) && c.pow2 == pow2 &&
                  c.amax == f8i_slot_amax(ctx, sl) && c.scale_inv == sinv && c.scale_inv_t == sinv_t,
              "%s margin %d pow2 %d: scaled_max %g, pow2 %d", name, margin, pow2, (double)c.scaled_max, c.pow2);
    }
    CHECK_OK(ctx, f8i_op_cast(ctx, &c));
    double worst = 0;
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            const float si = r->act == F8I_SCALING_TENSOR    ? sinv[0]
                             : r->act == F8I_SCALING_ROW     ? sinv[i]
                                                             : sinv[i * ((C + 127) / 128) + j / 128];
            const double v = f8_fp8_to_float(out[i * C + j], F8_DTYPE_E4M3) * (double)si, x = src[i * C + j];
            const double err = fabs(v - x) / (fabs(x) > 1 ? fabs(x) : 1);
            if (err > worst) worst = err;
        }
    /* delayed scaling's first scale is 1: values up to 150 sit well inside E4M3 */
    CHECK(worst <= 1.0 / 16, "%s margin %d pow2 %d: codes·scale_inv within E4M3's half step: %g", name, margin, pow2,
          worst);
    f8_ctx_destroy(ctx);
}

/* A weight workspace in the per-tensor mode: reserve_scales adds nothing;
 * the column-wise copy is the transpose of the codes. */
static void test_weight_workspace(void)
{
    f8_ctx *ctx = make_ctx(F8_RECIPE_DELAYED);
    enum { R = 5, C = 19 };
    f8_qtensor *w = NULL;
    if (f8_qtensor_create(ctx, F8_DTYPE_E4M3, R, C, &w) != F8_OK) die("f8_qtensor_create", ctx);
    f8_memory_report before, after;
    CHECK_OK(ctx, f8_ctx_memory(ctx, &before));
    CHECK_OK(ctx, f8i_qtensor_reserve_scales(w, F8I_SCALING_TENSOR));
    CHECK_OK(ctx, f8_ctx_memory(ctx, &after));
    CHECK(after.total == before.total && w->t == NULL && w->mode == F8I_SCALING_TENSOR,
          "per-tensor reserve_scales allocates nothing (%zu -> %zu bytes)", before.total, after.total);
    uint8_t codes[R * C];
    for (int i = 0; i < R * C; i++) codes[i] = (uint8_t)(i * 11 + 3);
    CHECK_OK(ctx, f8_qtensor_upload(w, codes, 0.5f));
    CHECK_OK(ctx, f8i_qtensor_colwise(w));
    int bad = 0;
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) bad += w->t[j * R + i] != codes[i * C + j];
    CHECK(w->t_valid && bad == 0, "the column-wise copy is the transpose of the codes (%d wrong)", bad);
    f8_qtensor_destroy(w);
    f8_ctx_destroy(ctx);
}

int main(void)
{
    for (int i = 0; i < NRECIPES; i++) test_answers(&RECIPES[i]);
    for (int i = 0; i < NRECIPES; i++)
        for (int margin = 0; margin < 2; margin++)
            for (int pow2 = 0; pow2 < 2; pow2++) test_cast_scaling(&RECIPES[i], margin, pow2);
    test_weight_workspace();
    return test_finish("test_quantizer");
}
