/*
 * test_recipe.c — delayed scaling (spec §2) against host oracles written here:
 *  - f8_recipe_default() is TE's DelayedScaling() default;
 *  - f8_scale_from_amax on TE's numeric scenarios (amax 0, tiny, normal, inf,
 *    NaN) for E4M3 and E5M2 and margins 0 and 2, plus a log-uniform sweep,
 *    against the formula evaluated in double;
 *  - the fused update (f8_ctx_update_scales) against a plain roll of a host
 *    copy of every slot's column: the numeric scenarios through slots, history
 *    lengths 1, 2, 3, 5, columns with row 0 = 0 (no roll), NaN, and a window
 *    whose maximum is the value the roll drops;
 *  - TE's test_amax_and_scale_update through f8_module on a CPU ctx: history
 *    {31, 1024} x algo {MAX, MOST_RECENT} x microbatch {NONE, FIRST, NOT_FIRST};
 *  - an E4M3-only recipe: backward slots are E4M3 and scale with 448.
 * Every history, scale and scale_inv is compared bit for bit.
 */
#include <float.h>

#include "check.h"

#define N_SWEEP 20000

static uint32_t fbits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static int same(float a, float b) { return fbits(a) == fbits(b); }

/* ------------------------------------------------------------------------ */
/* Oracles                                                                   */
/* ------------------------------------------------------------------------ */

/* Spec §2.2 evaluated in double. fp8_max * 2^-margin is exact; the double
 * quotient of two floats rounded to float is the correctly rounded float
 * quotient (53 >= 2*24 + 2), so this equals the float formula bit for bit
 * without sharing its code. A quotient past FLT_MAX becomes FLT_MAX. */
static float oracle_scale(float amax, float old_scale, float fp8_max, int margin)
{
    if (amax != amax || amax == INFINITY || amax <= 0.0f) return old_scale;
    double q = (double)fp8_max * pow(2.0, -(double)margin) / (double)amax;
    if (q > (double)FLT_MAX) return FLT_MAX;
    return (float)q;
}

/* One column of the fused update, written the way TE's kernel reads it:
 * element i of the new column is 0 for i = 0, old[i + 1] for 1 <= i < L-1 and
 * `last` for i = L-1; the window is {old[1..L-1], last} (the old row 1, which
 * the roll drops, is still in it). Nothing happens when last == 0. */
static void oracle_update(float *h, int L, float *scale, float *scale_inv, f8_amax_algo algo, float fp8_max,
                          int margin)
{
    const float last = h[0];
    float amax = 0.0f;
    if (last != 0.0f) {
        float *old = (float *)malloc((size_t)L * sizeof(float));
        memcpy(old, h, (size_t)L * sizeof(float));
        for (int i = 1; i < L; i++) /* NaN compares false: ignored */
            if (old[i] > amax) amax = old[i];
        if (last > amax) amax = last;
        if (algo == F8_AMAX_MOST_RECENT) amax = last;
        h[0] = 0.0f;
        for (int i = 1; i < L; i++) h[i] = i < L - 1 ? old[i + 1] : last;
        free(old);
    }
    *scale = oracle_scale(amax, *scale, fp8_max, margin);
    *scale_inv = 1.0f / *scale;
}

/* A slot's expected state on the host. */
typedef struct col {
    float *h;
    float scale, scale_inv;
} col;

static col col_new(int L)
{
    col c;
    c.h = (float *)calloc((size_t)L, sizeof(float));
    c.scale = 1.0f;
    c.scale_inv = 1.0f;
    return c;
}

/* Read a slot and compare it with `want`, bit for bit. */
static void check_slot(f8_ctx *ctx, f8_slot s, const col *want, int L, const char *what)
{
    float *h = (float *)malloc((size_t)L * sizeof(float));
    float sc = -1.0f, si = -1.0f;
    CHECK_OK(ctx, f8_slot_read(ctx, s, &sc, &si, h));
    int bad = -1;
    for (int r = 0; r < L && bad < 0; r++)
        if (!same(h[r], want->h[r])) bad = r;
    CHECK(bad < 0, "%s: history row %d is %a, expected %a (L %d)", what, bad, bad < 0 ? 0.0 : (double)h[bad],
          bad < 0 ? 0.0 : (double)want->h[bad], L);
    CHECK(same(sc, want->scale), "%s: scale %a, expected %a", what, (double)sc, (double)want->scale);
    CHECK(same(si, want->scale_inv), "%s: scale_inv %a, expected %a", what, (double)si, (double)want->scale_inv);
    free(h);
}

static void write_slot(f8_ctx *ctx, f8_slot s, const col *c) { CHECK_OK(ctx, f8_slot_write(ctx, s, c->scale, c->scale_inv, c->h)); }

static f8_ctx *make_ctx(f8_format format, int margin, int L, f8_amax_algo algo)
{
    f8_recipe r = f8_recipe_default();
    r.format = format;
    r.margin = margin;
    r.amax_history_len = L;
    r.amax_compute_algo = algo;
    char why[256] = "";
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, &r, why);
    CHECK(ctx != NULL, "CPU ctx creation failed: %s", why);
    return ctx;
}

/* ------------------------------------------------------------------------ */
/* Defaults and the scalar formula                                           */
/* ------------------------------------------------------------------------ */

static void test_defaults(void)
{
    f8_recipe r = f8_recipe_default();
    CHECK(r.format == F8_FORMAT_HYBRID, "default format %d", (int)r.format);
    CHECK(r.margin == 0, "default margin %d", r.margin);
    CHECK(r.amax_history_len == 1024, "default history %d", r.amax_history_len);
    CHECK(r.amax_compute_algo == F8_AMAX_MAX, "default algo %d", (int)r.amax_compute_algo);
    CHECK(r.reduce_amax == 1, "default reduce_amax %d", r.reduce_amax);

    f8_ctx_config c = f8_ctx_config_default();
    CHECK(c.backend == F8_BACKEND_CPU && c.device == 0, "ctx config default backend %d device %d", (int)c.backend,
          c.device);
    CHECK(memcmp(&c.recipe, &r, sizeof r) == 0, "ctx config default recipe differs from f8_recipe_default()");

    char why[256] = "";
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, NULL, why);
    CHECK(ctx != NULL, "default CPU ctx: %s", why);
    if (!ctx) return;
    const f8_recipe *cr = f8_ctx_recipe(ctx);
    CHECK(cr && memcmp(cr, &r, sizeof r) == 0, "the ctx does not hold the default recipe");
    CHECK(f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD) == F8_DTYPE_E4M3, "HYBRID forward dtype");
    CHECK(f8_ctx_slot_dtype(ctx, F8_DIR_BACKWARD) == F8_DTYPE_E5M2, "HYBRID backward dtype");
    f8_ctx_destroy(ctx);
}

/* TE's test_scale_update_numeric_scenarios on the scalar formula, and a sweep. */
static void test_scale_formula(void)
{
    const f8_dtype dts[2] = {F8_DTYPE_E4M3, F8_DTYPE_E5M2};
    const float maxes[2] = {448.0f, 57344.0f};
    for (int f = 0; f < 2; f++) {
        const float fm = maxes[f];
        CHECK(f8_fp8_max(dts[f]) == fm, "fp8_max(%s)", f8_dtype_name(dts[f]));
        const float tiny = fm / FLT_MAX / 2.0f;
        CHECK(tiny > 0.0f, "tiny amax underflowed");
        for (int margin = 0; margin <= 2; margin += 2) {
            const float p = (float)(1 << margin);
            /* The scenarios, each stated on its own. */
            CHECK(f8_scale_from_amax(0.0f, 1.0f, fm, margin) == 1.0f, "amax 0 keeps scale 1");
            CHECK(f8_scale_from_amax(0.0f, 3.25f, fm, margin) == 3.25f, "amax 0 keeps scale 3.25");
            CHECK(f8_scale_from_amax(tiny, 1.0f, fm, margin) == (margin ? oracle_scale(tiny, 1, fm, margin) : FLT_MAX),
                  "tiny amax, margin %d: %a", margin, (double)f8_scale_from_amax(tiny, 1.0f, fm, margin));
            CHECK(f8_scale_from_amax(tiny, 1.0f, fm, 0) == FLT_MAX, "tiny amax gives FLT_MAX");
            CHECK(f8_scale_from_amax(1e-45f, 1.0f, fm, margin) == FLT_MAX, "subnormal amax gives FLT_MAX");
            CHECK(f8_scale_from_amax(INFINITY, 1.0f, fm, margin) == 1.0f, "inf keeps the scale");
            CHECK(f8_scale_from_amax(-INFINITY, 2.0f, fm, margin) == 2.0f, "-inf keeps the scale");
            CHECK(f8_scale_from_amax(NAN, 1.0f, fm, margin) == 1.0f, "NaN keeps the scale");
            CHECK(f8_scale_from_amax(-1.5f, 5.0f, fm, margin) == 5.0f, "negative amax keeps the scale");
            CHECK(f8_scale_from_amax(2.0f, 1.0f, fm, margin) == fm / 2.0f / p, "amax 2: fp8_max / 2 / 2^margin");
            CHECK(f8_scale_from_amax(fm, 9.0f, fm, margin) == 1.0f / p, "amax fp8_max: 2^-margin");
            const float normals[5] = {0.001f, 0.3f, 1.0f, 3.5f, 1e5f};
            for (int i = 0; i < 5; i++) {
                float s = f8_scale_from_amax(normals[i], 1.0f, fm, margin);
                float want = oracle_scale(normals[i], 1.0f, fm, margin);
                CHECK(same(s, want), "%s amax %g margin %d: %a, expected %a", f8_dtype_name(dts[f]), (double)normals[i],
                      margin, (double)s, (double)want);
                CHECK(same(s, ldexpf(fm, -margin) / normals[i]), "the float formula ldexpf(fp8_max,-margin)/amax");
            }
        }
    }
    /* Log-uniform sweep over the whole float range, random margins. */
    test_rng rng = {42};
    int bad = 0;
    for (int i = 0; i < N_SWEEP; i++) {
        float amax = (float)exp(rng_uniform(&rng) * 190.0 - 103.0); /* 1e-45 .. 1e37 */
        int margin = (int)(rng_u64(&rng) % 9) - 4;
        float fm = (rng_u64(&rng) & 1) ? 448.0f : 57344.0f;
        float old = (float)rng_uniform(&rng) + 0.5f;
        float s = f8_scale_from_amax(amax, old, fm, margin);
        if (!same(s, oracle_scale(amax, old, fm, margin))) {
            if (bad++ < 5)
                fprintf(stderr, "sweep: amax %a margin %d max %g: %a, expected %a\n", (double)amax, margin, (double)fm,
                        (double)s, (double)oracle_scale(amax, old, fm, margin));
        }
    }
    CHECK(bad == 0, "%d of %d sweep values differ from the oracle", bad, N_SWEEP);
}

/* ------------------------------------------------------------------------ */
/* The fused update on slots                                                 */
/* ------------------------------------------------------------------------ */

/* The numeric scenarios again, through f8_slot_write / f8_ctx_update_scales /
 * f8_slot_read, both directions, with scale 1 (TE) and with an inconsistent
 * pair (scale 3, scale_inv 123) that the update must rewrite as 1/scale. */
static void test_update_scenarios(void)
{
    enum { NCASE = 12, L = 4 };
    for (int margin = 0; margin <= 2; margin += 2) {
        for (int algo = 0; algo < 2; algo++) {
            f8_ctx *ctx = make_ctx(F8_FORMAT_HYBRID, margin, L, (f8_amax_algo)algo);
            if (!ctx) return;
            f8_slot slots[2][2][NCASE];
            col want[2][2][NCASE];
            for (int d = 0; d < 2; d++) {
                const float fm = d ? 57344.0f : 448.0f;
                const float amaxes[NCASE] = {0.0f, fm / FLT_MAX / 2.0f, 1e-40f, 1e-3f, 0.75f, 1.0f, 3.5f, fm, 1e30f,
                                             INFINITY, NAN, -2.0f};
                for (int pass = 0; pass < 2; pass++) {
                    CHECK_OK(ctx, f8_ctx_slots_create(ctx, (f8_direction)d, NCASE, slots[d][pass]));
                    for (int i = 0; i < NCASE; i++) {
                        col *c = &want[d][pass][i];
                        *c = col_new(L);
                        c->h[0] = amaxes[i];
                        c->scale = pass ? 3.0f : 1.0f;
                        c->scale_inv = pass ? 123.0f : 1.0f;
                        write_slot(ctx, slots[d][pass][i], c);
                    }
                }
            }
            CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
            CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_BACKWARD));
            for (int d = 0; d < 2; d++) {
                const float fm = d ? 57344.0f : 448.0f;
                for (int pass = 0; pass < 2; pass++) {
                    for (int i = 0; i < NCASE; i++) {
                        col *c = &want[d][pass][i];
                        const float amax = c->h[0], old = c->scale;
                        oracle_update(c->h, L, &c->scale, &c->scale_inv, (f8_amax_algo)algo, fm, margin);
                        char what[128];
                        snprintf(what, sizeof what, "scenario dir %d margin %d algo %d pass %d amax %g", d, margin, algo,
                                 pass, (double)amax);
                        check_slot(ctx, slots[d][pass][i], c, L, what);
                        /* TE's stated expectations, independent of the oracle. */
                        if (i == 0 || i >= 9) CHECK(same(c->scale, old), "%s: scale must be kept", what);
                        if (i == 1 && margin == 0) CHECK(c->scale == FLT_MAX, "%s: tiny amax must give FLT_MAX", what);
                        if (i == 5) CHECK(c->scale == ldexpf(fm, -margin), "%s: amax 1 gives fp8_max 2^-margin", what);
                        CHECK(c->scale_inv == 1.0f / c->scale, "%s: scale_inv is 1/scale", what);
                        free(c->h);
                    }
                }
            }
            f8_ctx_destroy(ctx);
        }
    }
}

/* History lengths 1, 2, 3, 5: random columns, columns with row 0 = 0, NaN,
 * and a column whose largest value sits in row 1 (dropped by the roll but in
 * the window); three successive updates, each compared with the oracle. */
static void test_roll_edges(void)
{
    enum { NCOL = 6 };
    const int lens[4] = {1, 2, 3, 5};
    test_rng rng = {7};
    for (int li = 0; li < 4; li++) {
        const int L = lens[li];
        for (int algo = 0; algo < 2; algo++) {
            const int margin = algo; /* margin 0 and 1 */
            f8_ctx *ctx = make_ctx(F8_FORMAT_HYBRID, margin, L, (f8_amax_algo)algo);
            if (!ctx) return;
            f8_slot slots[2][NCOL];
            col want[2][NCOL];
            for (int d = 0; d < 2; d++) {
                CHECK_OK(ctx, f8_ctx_slots_create(ctx, (f8_direction)d, NCOL, slots[d]));
                for (int i = 0; i < NCOL; i++) {
                    col *c = &want[d][i];
                    *c = col_new(L);
                    for (int r = 1; r < L; r++) c->h[r] = (float)(2.0 * rng_uniform(&rng) + 0.5);
                    c->scale = (float)(2.0 * rng_uniform(&rng) + 0.5);
                    c->scale_inv = 1.0f / c->scale;
                }
            }
            for (int step = 0; step < 3; step++) {
                for (int d = 0; d < 2; d++) {
                    for (int i = 0; i < NCOL; i++) {
                        col *c = &want[d][i];
                        switch (i) {
                        case 0: c->h[0] = 0.0f; break;                     /* not cast: no roll */
                        case 1: c->h[0] = (float)(2.0 * rng_uniform(&rng) + 0.5); break;
                        case 2: /* the dropped row 1 holds the window's maximum */
                            if (L >= 2) c->h[1] = 100.0f + (float)step;
                            c->h[0] = 1.0f;
                            break;
                        case 3: c->h[0] = step == 1 ? NAN : 0.25f; break;
                        case 4: c->h[0] = step == 2 ? 0.0f : (float)(rng_uniform(&rng) * 1e-3); break;
                        default: c->h[0] = (float)(rng_uniform(&rng) * 5000.0); break;
                        }
                        write_slot(ctx, slots[d][i], c);
                    }
                }
                CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
                CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_BACKWARD));
                for (int d = 0; d < 2; d++) {
                    for (int i = 0; i < NCOL; i++) {
                        col *c = &want[d][i];
                        float before[5], old_scale = c->scale, last = c->h[0];
                        memcpy(before, c->h, (size_t)L * sizeof(float));
                        oracle_update(c->h, L, &c->scale, &c->scale_inv, (f8_amax_algo)algo, d ? 57344.0f : 448.0f,
                                      margin);
                        char what[128];
                        snprintf(what, sizeof what, "roll L %d algo %d dir %d col %d step %d", L, algo, d, i, step);
                        check_slot(ctx, slots[d][i], c, L, what);
                        /* Stated directly: a zero row 0 changes nothing. */
                        if (last == 0.0f) {
                            CHECK(memcmp(before, c->h, (size_t)L * sizeof(float)) == 0 && same(old_scale, c->scale),
                                  "%s: a column with row 0 == 0 must not roll", what);
                        }
                        if (i == 2 && algo == F8_AMAX_MAX && L >= 2)
                            CHECK(c->scale == oracle_scale(100.0f + (float)step, 0, d ? 57344.0f : 448.0f, margin),
                                  "%s: the window includes the row the roll drops", what);
                    }
                }
            }
            /* L = 1 and 2 by hand: [0] and [0, last]. */
            if (L <= 2) {
                float h[2] = {-1.0f, -1.0f};
                CHECK_OK(ctx, f8_slot_read(ctx, slots[0][1], NULL, NULL, h));
                CHECK(h[0] == 0.0f, "L %d: row 0 is zero after the update", L);
                if (L == 2) CHECK(h[1] == want[0][1].h[1] && h[1] > 0.0f, "L 2: row 1 holds the newest amax");
            }
            for (int d = 0; d < 2; d++)
                for (int i = 0; i < NCOL; i++) free(want[d][i].h);
            f8_ctx_destroy(ctx);
        }
    }
}

/* E4M3-only recipe: every slot is E4M3, so backward slots scale with 448. */
static void test_e4m3_format(void)
{
    enum { L = 3 };
    f8_ctx *ctx = make_ctx(F8_FORMAT_E4M3, 0, L, F8_AMAX_MAX);
    if (!ctx) return;
    CHECK(f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD) == F8_DTYPE_E4M3, "E4M3 recipe: forward dtype");
    CHECK(f8_ctx_slot_dtype(ctx, F8_DIR_BACKWARD) == F8_DTYPE_E4M3, "E4M3 recipe: backward dtype");
    f8_slot s[2];
    CHECK_OK(ctx, f8_ctx_slots_create(ctx, F8_DIR_BACKWARD, 1, &s[0]));
    CHECK_OK(ctx, f8_ctx_slots_create(ctx, F8_DIR_FORWARD, 1, &s[1]));
    for (int i = 0; i < 2; i++) {
        col c = col_new(L);
        c.h[0] = 3.0f;
        write_slot(ctx, s[i], &c);
        CHECK_OK(ctx, f8_ctx_update_scales(ctx, i ? F8_DIR_FORWARD : F8_DIR_BACKWARD));
        oracle_update(c.h, L, &c.scale, &c.scale_inv, F8_AMAX_MAX, 448.0f, 0);
        check_slot(ctx, s[i], &c, L, i ? "E4M3 recipe forward" : "E4M3 recipe backward");
        CHECK(c.scale == 448.0f / 3.0f, "oracle scale 448/3");
        free(c.h);
    }
    f8_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------ */
/* TE's test_amax_and_scale_update through f8_module                          */
/* ------------------------------------------------------------------------ */

static float max_abs(const float *v, int n)
{
    float m = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(v[i]) > m) m = fabsf(v[i]);
    return m;
}

/* Workspace scale_inv (the weight's own, spec §3.3). */
static float workspace_scale_inv(f8_ctx *ctx, const f8_module *lin)
{
    f8_tensor v;
    float si = -1.0f;
    CHECK_OK(ctx, f8_qtensor_data(f8_module_weight_workspace(lin, F8_PARAM_WEIGHT), &v));
    CHECK_OK(ctx, f8_ctx_download(ctx, &si, v.scale_inv, sizeof si));
    return si;
}

static void linear_scenario(int L, f8_amax_algo algo, f8_microbatch mb, uint64_t seed)
{
    enum { D = 16, N = D * D, MARGIN = 2 };
    const f8_direction dirs[2] = {F8_DIR_FORWARD, F8_DIR_BACKWARD};
    const float fmax[2] = {448.0f, 57344.0f};
    const int nslots[2] = {3, 2};
    char tag[96];
    snprintf(tag, sizeof tag, "linear L %d algo %d microbatch %d", L, (int)algo, (int)mb);

    f8_ctx *ctx = make_ctx(F8_FORMAT_HYBRID, MARGIN, L, algo);
    if (!ctx) return;
    f8_linear_config cfg = f8_linear_config_default(D, D);
    cfg.fp8 = 1;
    cfg.max_tokens = D;
    f8_module *lin = NULL;
    f8_saved *sv = NULL;
    float *xb = NULL, *yb = NULL, *dyb = NULL, *dxb = NULL;
    col want[2][3];
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < nslots[d]; i++) want[d][i] = col_new(L);
    CHECK_OK(ctx, f8_linear_create(ctx, &cfg, &lin));
    if (lin) CHECK_OK(ctx, f8_module_saved_create(lin, &sv));
    CHECK_OK(ctx, f8_ctx_alloc(ctx, N * sizeof(float), (void **)&xb));
    CHECK_OK(ctx, f8_ctx_alloc(ctx, N * sizeof(float), (void **)&yb));
    CHECK_OK(ctx, f8_ctx_alloc(ctx, N * sizeof(float), (void **)&dyb));
    CHECK_OK(ctx, f8_ctx_alloc(ctx, N * sizeof(float), (void **)&dxb));
    if (!lin || !sv || !xb || !yb || !dyb || !dxb) goto done;

    f8_slot slots[2][3];
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < nslots[d]; i++) CHECK_OK(ctx, f8_module_slot(lin, dirs[d], i, &slots[d][i]));
    f8_tensor xt = f8_tensor_make(xb, F8_DTYPE_FP32, D, D), yt = f8_tensor_make(yb, F8_DTYPE_FP32, D, D);
    f8_tensor dyt = f8_tensor_make(dyb, F8_DTYPE_FP32, D, D), dxt = f8_tensor_make(dxb, F8_DTYPE_FP32, D, D);

    /* The master weight, through the public view. */
    float w[N], x[N], dy[N];
    f8_tensor wv;
    CHECK_OK(ctx, f8_module_param(lin, F8_PARAM_WEIGHT, 0, &wv));
    CHECK(wv.dtype == F8_DTYPE_FP32 && wv.rows == D && wv.cols == D, "%s: weight view", tag);
    CHECK_OK(ctx, f8_ctx_download(ctx, w, wv.data, sizeof w));
    const float w_amax = max_abs(w, N);
    CHECK(w_amax > 0.0f, "%s: weight is zero", tag);

    test_rng rng = {seed};

    /* (1) one FIRST step with dy = 0 (GRAD_OUTPUT amax 0), then both updates. */
    for (int i = 0; i < N; i++) x[i] = (float)rng_normal(&rng);
    memset(dy, 0, sizeof dy);
    CHECK_OK(ctx, f8_ctx_upload(ctx, xb, x, sizeof x));
    CHECK_OK(ctx, f8_ctx_upload(ctx, dyb, dy, sizeof dy));
    CHECK_OK(ctx, f8_module_forward(lin, &xt, &yt, F8_MICROBATCH_FIRST, sv));
    CHECK_OK(ctx, f8_module_backward(lin, sv, &dyt, &dxt));
    want[0][0].h[0] = max_abs(x, N);
    want[0][1].h[0] = w_amax;
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < nslots[d]; i++) check_slot(ctx, slots[d][i], &want[d][i], L, tag);
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_BACKWARD));
    for (int d = 0; d < 2; d++) {
        for (int i = 0; i < nslots[d]; i++) {
            oracle_update(want[d][i].h, L, &want[d][i].scale, &want[d][i].scale_inv, algo, fmax[d], MARGIN);
            check_slot(ctx, slots[d][i], &want[d][i], L, tag);
        }
    }
    CHECK(same(workspace_scale_inv(ctx, lin), 1.0f), "%s: step 1 workspace cast with scale 1", tag);

    /* (2) forward history 2·rand+0.5 with row 0 = 0, scales 2·rand+0.5 and
     * scale_inv = 1/scale; backward row 0 zeroed. */
    for (int i = 0; i < 3; i++) {
        col *c = &want[0][i];
        c->h[0] = 0.0f;
        for (int r = 1; r < L; r++) c->h[r] = (float)(2.0 * rng_uniform(&rng) + 0.5);
        c->scale = (float)(2.0 * rng_uniform(&rng) + 0.5);
        c->scale_inv = 1.0f / c->scale;
        write_slot(ctx, slots[0][i], c);
    }
    for (int i = 0; i < 2; i++) {
        CHECK_OK(ctx, f8_slot_read(ctx, slots[1][i], &want[1][i].scale, &want[1][i].scale_inv, want[1][i].h));
        want[1][i].h[0] = 0.0f;
        write_slot(ctx, slots[1][i], &want[1][i]);
    }
    const float w_scale = want[0][1].scale;

    /* (3) one step with the microbatch under test and a random dy. */
    for (int i = 0; i < N; i++) x[i] = (float)rng_normal(&rng);
    for (int i = 0; i < N; i++) dy[i] = (float)rng_normal(&rng);
    CHECK_OK(ctx, f8_ctx_upload(ctx, xb, x, sizeof x));
    CHECK_OK(ctx, f8_ctx_upload(ctx, dyb, dy, sizeof dy));
    CHECK_OK(ctx, f8_module_forward(lin, &xt, &yt, mb, sv));
    CHECK_OK(ctx, f8_module_backward(lin, sv, &dyt, &dxt));
    const int weight_cast = mb != F8_MICROBATCH_NOT_FIRST;
    want[0][0].h[0] = max_abs(x, N);
    want[0][1].h[0] = weight_cast ? w_amax : 0.0f;
    want[1][0].h[0] = max_abs(dy, N);
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < nslots[d]; i++) check_slot(ctx, slots[d][i], &want[d][i], L, tag); /* amaxes recorded */
    /* #820's rule: the workspace's scale_inv changes only with its bytes. */
    const float ws_inv = workspace_scale_inv(ctx, lin);
    CHECK(same(ws_inv, weight_cast ? 1.0f / w_scale : 1.0f), "%s: workspace scale_inv %a", tag, (double)ws_inv);

    /* (4)-(5) both updates against the oracle. */
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_BACKWARD));
    for (int d = 0; d < 2; d++) {
        for (int i = 0; i < nslots[d]; i++) {
            col *c = &want[d][i];
            float prev[1024];
            const float prev_scale = c->scale, last = c->h[0];
            memcpy(prev, c->h, (size_t)L * sizeof(float));
            oracle_update(c->h, L, &c->scale, &c->scale_inv, algo, fmax[d], MARGIN);
            char what[128];
            snprintf(what, sizeof what, "%s dir %d slot %d", tag, d, i);
            check_slot(ctx, slots[d][i], c, L, what);
            /* The spec's expectations, stated directly. */
            const int rolled = (d == 0 && i == 0) || (d == 0 && i == 1 && weight_cast) || (d == 1 && i == 0);
            if (rolled) {
                int ok = c->h[0] == 0.0f && c->h[L - 1] == last;
                for (int r = 1; r < L - 1; r++) ok = ok && same(c->h[r], prev[r + 1]);
                CHECK(ok, "%s: not rolled by one with the new amax at the end", what);
                float amax = last;
                if (algo == F8_AMAX_MAX)
                    for (int r = 1; r < L; r++) amax = fmaxf(amax, prev[r]);
                CHECK(same(c->scale, ldexpf(fmax[d], -MARGIN) / amax), "%s: scale %a", what, (double)c->scale);
            } else {
                CHECK(memcmp(prev, c->h, (size_t)L * sizeof(float)) == 0 && same(c->scale, prev_scale),
                      "%s: a slot that was not written must not roll or rescale", what);
            }
        }
    }

done:
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < nslots[d]; i++) free(want[d][i].h);
    f8_ctx_free(ctx, xb);
    f8_ctx_free(ctx, yb);
    f8_ctx_free(ctx, dyb);
    f8_ctx_free(ctx, dxb);
    f8_saved_destroy(sv);
    f8_module_destroy(lin);
    f8_ctx_destroy(ctx);
}

static void test_linear_scenarios(void)
{
    const int lens[2] = {31, 1024};
    const f8_microbatch mbs[3] = {F8_MICROBATCH_NONE, F8_MICROBATCH_FIRST, F8_MICROBATCH_NOT_FIRST};
    uint64_t seed = 1000;
    for (int li = 0; li < 2; li++)
        for (int algo = 0; algo < 2; algo++)
            for (int m = 0; m < 3; m++) linear_scenario(lens[li], (f8_amax_algo)algo, mbs[m], seed++);
}

int main(void)
{
    test_defaults();
    test_scale_formula();
    test_update_scenarios();
    test_roll_edges();
    test_e4m3_format();
    test_linear_scenarios();
    return test_finish("test_recipe");
}
