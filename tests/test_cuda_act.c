/*
 * test_cuda_act.c — the CUDA backend's activation ops against the CPU
 * backend (the oracle) on identical inputs, called through each ctx's backend
 * table (ctx->be) exactly as the fused modules call them: act_fwd for all
 * seven activations (FP32/BF16/FP8 out, FP8 with and without the transposed
 * codes) and act_bwd for all seven, plain and with the fused FP8 cast (out,
 * out_t, amax, scale_inv, dbias). Every FP32 result of both backends is also
 * checked against a float64 host reference built from the formulas in
 * backend.h, so a misreading both backends share still fails. Then the
 * activation backward's fast path against its general kernel, bit for bit.
 * The tolerances, and why, are in cuda_norm_act_tests.h; the norms in
 * test_cuda_norm.c.
 * Without a GPU (or in a CUDA=0 build) the program reports itself skipped.
 */
#include "cuda_norm_act_tests.h"

/* ------------------------------------------------------------------------ */
/* Activations                                                               */
/* ------------------------------------------------------------------------ */

static const char *ACT_NAME[7] = {"gelu", "relu", "geglu", "reglu", "swiglu", "qgelu", "srelu"};

/* Base function and its derivative in float64 (backend.h / f8.h formulas). */
static double act_base(f8_activation act, double x, double *deriv)
{
    const double k = 0.79788456, c = 0.044715;
    switch (act) {
    case F8_ACT_GELU:
    case F8_ACT_GEGLU: {
        double t = tanh(k * (x + c * x * x * x));
        *deriv = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x);
        return 0.5 * x * (1 + t);
    }
    case F8_ACT_RELU:
    case F8_ACT_REGLU:
        *deriv = x > 0 ? 1.0 : 0.0;
        return x > 0 ? x : 0.0;
    case F8_ACT_SWIGLU: {
        double s = 1 / (1 + exp(-x));
        *deriv = s * (1 + x * (1 - s));
        return x * s;
    }
    case F8_ACT_QGELU: {
        double s = 1 / (1 + exp(-1.702 * x));
        *deriv = s + 1.702 * x * s * (1 - s);
        return x * s;
    }
    default: /* SRELU */
        *deriv = x > 0 ? 2 * x : 0.0;
        return x > 0 ? x * x : 0.0;
    }
}

/* No transcendental and no sum: both backends compute the same roundings. */
static int act_exact(f8_activation act) { return act == F8_ACT_RELU || act == F8_ACT_REGLU || act == F8_ACT_SRELU; }

typedef struct act_case {
    shape s; /* rows, cols of the output (dy) */
    f8_activation act;
    f8_dtype x, y; /* fwd: y dtype; bwd: dy dtype */
    int fwd_t;     /* fwd, FP8 y: the transposed codes too */
    /* bwd only: */
    f8_dtype dx;    /* FP32/BF16 or NO_DX */
    f8_dtype out;   /* E4M3/E5M2 fused cast, or NO_DX for none */
    int with_t, with_amax, with_sinv, dbias; /* dbias: 0 none, 1 FP32, 2 BF16 */
    int dbias_acc;
} act_case;

/* x of [rows, cols_in]: N(0, 2²), across the activations' curved region. */
static void *act_x(env *e, f8_dtype dt, size_t n, float *xv)
{
    void *h = xmalloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++) xv[i] = store_elem(h, dt, i, (float)(2.0 * rnd_normal(&e->rng)));
    return h;
}

static void run_act_fwd(env *e, const act_case *ac)
{
    const int64_t R = ac->s.rows, C = ac->s.cols, Ci = f8_activation_gated(ac->act) ? 2 * C : C;
    const size_t n = (size_t)(R * C), ni = (size_t)(R * Ci), ysz = f8_dtype_size(ac->y);
    const int fp8 = is_fp8(ac->y), exact = act_exact(ac->act);
    char desc[160];
    snprintf(desc, sizeof desc, "act_fwd %s [%lld,%lld] x %s y %s t %d", ACT_NAME[ac->act], (long long)R,
             (long long)C, f8_dtype_name(ac->x), f8_dtype_name(ac->y), ac->fwd_t);
    float *xv = xmalloc(ni * 4 + 4);
    void *hx = act_x(e, ac->x, ni, xv);
    const float scale = ac->y == F8_DTYPE_E4M3 ? 24.0f : 512.0f, a0 = AMAX0; /* a few saturate */
    dual x = dual_new(e, ni * f8_dtype_size(ac->x), hx), y = dual_new(e, n * ysz, NULL);
    dual sc = dual_new(e, 4, &scale), amax = dual_new(e, 4, &a0), sinv = dual_new(e, 4, NULL);
    dual yt = dual_new(e, ac->fwd_t ? n : 0, NULL);
    /* telemetry on the training path and on odd row counts (so the codes-only
     * kernel keeps its own cases) */
    const int counting = fp8 && (ac->fwd_t || (R & 1));
    const uint64_t zero3[3] = {0, 0, 0};
    dual st = dual_new(e, sizeof zero3, zero3);
    for (int i = 0; i < 2; i++) {
        f8_ctx *ctx = e->ctx[i];
        f8i_act_fwd_args a = {.act = ac->act, .x = x.p[i], .x_dtype = ac->x, .rows = R, .cols = C, .y = y.p[i],
                              .y_dtype = ac->y, .y_t = ac->fwd_t ? (uint8_t *)yt.p[i] : NULL,
                              .scale = fp8 ? sc.p[i] : NULL, .amax = fp8 ? amax.p[i] : NULL,
                              .scale_inv = fp8 ? sinv.p[i] : NULL, .stats = counting ? st.p[i] : NULL};
        CHECK_OK(ctx, f8i_op_act_fwd(ctx, &a));
    }
    if (counting) {
        uint64_t hs[2][3];
        for (int i = 0; i < 2; i++) dual_get(e, &st, i, hs[i]);
        cmp_stats(desc, hs[CPU], hs[GPU], n, exact);
    }
    dual_free(e, &st);
    if (ac->fwd_t) { /* each backend's transposed codes are its own codes, transposed */
        uint8_t *hc = xmalloc(n + 1), *ht = xmalloc(n + 1);
        for (int i = 0; i < 2; i++) {
            dual_get(e, &y, i, hc);
            dual_get(e, &yt, i, ht);
            size_t bad = 0;
            for (int64_t r = 0; r < R; r++)
                for (int64_t c = 0; c < C; c++) bad += ht[c * R + r] != hc[r * C + c];
            CHECK(bad == 0, "%s: %s y_t differs from y transposed in %zu elements", desc, i ? "cuda" : "cpu", bad);
        }
        free(hc), free(ht);
    }
    void *hy[2] = {xmalloc(n * ysz + 4), xmalloc(n * ysz + 4)};
    float ham[2], hsi[2];
    for (int i = 0; i < 2; i++) dual_get(e, &y, i, hy[i]), dual_get(e, &amax, i, &ham[i]), dual_get(e, &sinv, i, &hsi[i]);
    double *rv = xmalloc(n * 8 + 8), d;
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            double v = act_base(ac->act, xv[r * Ci + c], &d);
            rv[r * C + c] = Ci == C ? v : v * xv[r * Ci + C + c];
        }
    if (fp8) {
        cmp_codes(e, desc, "y codes", hy[GPU], hy[CPU], ac->y, n, exact ? 0.0 : FLIP_FP8, TOL_F32 * rms_of(rv, n) * scale);
        cmp_amax(e, desc, ham[GPU], ham[CPU], exact, TOL_F32);
        for (int i = 0; i < 2; i++)
            CHECK(hsi[i] == 1.0f / scale, "%s %s scale_inv %.9g, want 1/%g", desc, i ? "cuda" : "cpu", hsi[i], scale);
        if (n == 0)
            for (int i = 0; i < 2; i++) CHECK(ham[i] == AMAX0, "%s: %s wrote amax on an empty input", desc, i ? "cuda" : "cpu");
    } else {
        cmp_out(e, desc, "y", hy[GPU], hy[CPU], ac->y, n, rv, exact);
    }
    dual *all[] = {&x, &y, &sc, &amax, &sinv, &yt};
    for (int k = 0; k < NELEM(all); k++) dual_free(e, all[k]);
    free(hy[0]), free(hy[1]), free(xv), free(hx), free(rv);
}

static void run_act_bwd(env *e, const act_case *ac)
{
    const int64_t R = ac->s.rows, C = ac->s.cols, Ci = f8_activation_gated(ac->act) ? 2 * C : C;
    const size_t n = (size_t)(R * C), ni = (size_t)(R * Ci);
    const int want_dx = ac->dx != NO_DX, cast = ac->out != NO_DX, exact = act_exact(ac->act);
    const f8_dtype dxt = want_dx ? ac->dx : F8_DTYPE_FP32, odt = cast ? ac->out : F8_DTYPE_E4M3;
    const f8_dtype bdt = ac->dbias == 2 ? F8_DTYPE_BF16 : F8_DTYPE_FP32;
    char desc[220];
    snprintf(desc, sizeof desc, "act_bwd %s [%lld,%lld] x %s dy %s dx %s out %s t %d amax %d sinv %d dbias %d acc %d",
             ACT_NAME[ac->act], (long long)R, (long long)C, f8_dtype_name(ac->x), f8_dtype_name(ac->y),
             want_dx ? f8_dtype_name(ac->dx) : "none", cast ? f8_dtype_name(ac->out) : "none", ac->with_t,
             ac->with_amax, ac->with_sinv, ac->dbias, ac->dbias_acc);
    float *xv = xmalloc(ni * 4 + 4), *dyv = xmalloc(n * 4 + 4);
    void *hx = act_x(e, ac->x, ni, xv), *hdy = xmalloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++) dyv[i] = store_elem(hdy, ac->y, i, (float)rnd_normal(&e->rng));
    void *b0 = xmalloc((size_t)Ci * 4 + 4);
    for (int64_t c = 0; c < Ci; c++) store_elem(b0, bdt, (size_t)c, (float)rnd_normal(&e->rng));
    const float scale = odt == F8_DTYPE_E4M3 ? 40.0f : 2000.0f, a0 = AMAX0;
    const size_t dxb = ni * f8_dtype_size(dxt), bb = (size_t)Ci * f8_dtype_size(bdt);
    dual x = dual_new(e, ni * f8_dtype_size(ac->x), hx), dy = dual_new(e, n * f8_dtype_size(ac->y), hdy);
    dual dx = dual_new(e, dxb, NULL), out = dual_new(e, ni, NULL), out_t = dual_new(e, ni, NULL);
    dual sc = dual_new(e, 4, &scale), amax = dual_new(e, 4, &a0), sinv = dual_new(e, 4, NULL);
    dual db = dual_new(e, bb, ac->dbias_acc ? b0 : NULL);
    const int counting = cast && (ac->with_t || (R & 1)); /* as the forward: both kernels keep cases */
    const uint64_t zero3[3] = {0, 0, 0};
    dual st = dual_new(e, sizeof zero3, zero3);
    for (int i = 0; i < 2; i++) {
        f8_ctx *ctx = e->ctx[i];
        f8i_act_bwd_args a = {.act = ac->act, .x = x.p[i], .x_dtype = ac->x, .dy = dy.p[i], .dy_dtype = ac->y,
                              .rows = R, .cols = C, .dx = want_dx ? dx.p[i] : NULL, .dx_dtype = dxt,
                              .out = cast ? out.p[i] : NULL, .out_t = ac->with_t ? out_t.p[i] : NULL,
                              .out_dtype = odt, .scale = sc.p[i], .amax = ac->with_amax ? amax.p[i] : NULL,
                              .scale_inv = ac->with_sinv ? sinv.p[i] : NULL, .dbias = ac->dbias ? db.p[i] : NULL,
                              .dbias_dtype = bdt, .dbias_accumulate = ac->dbias_acc,
                              .workspace = ctx->scratch, .workspace_bytes = ctx->scratch_bytes,
                              .stats = counting ? st.p[i] : NULL};
        CHECK_OK(ctx, f8i_op_act_bwd(ctx, &a));
    }
    if (counting) {
        uint64_t hs[2][3];
        for (int i = 0; i < 2; i++) dual_get(e, &st, i, hs[i]);
        cmp_stats(desc, hs[CPU], hs[GPU], ni, exact);
    }
    dual_free(e, &st);
    void *hdx[2] = {xmalloc(dxb + 4), xmalloc(dxb + 4)}, *hdb[2] = {xmalloc(bb + 4), xmalloc(bb + 4)};
    uint8_t *ho[2] = {xmalloc(ni + 4), xmalloc(ni + 4)}, *hot[2] = {xmalloc(ni + 4), xmalloc(ni + 4)};
    float ham[2], hsi[2];
    for (int i = 0; i < 2; i++) {
        dual_get(e, &dx, i, hdx[i]), dual_get(e, &db, i, hdb[i]), dual_get(e, &out, i, ho[i]);
        dual_get(e, &out_t, i, hot[i]), dual_get(e, &amax, i, &ham[i]), dual_get(e, &sinv, i, &hsi[i]);
    }
    /* float64 reference of d [R, Ci] and its column sums */
    double *rd = xmalloc(ni * 8 + 8), *rb = xmalloc((size_t)Ci * 8 + 8), *sbias = xmalloc((size_t)Ci * 8 + 8), dv;
    for (int64_t c = 0; c < Ci; c++) rb[c] = ac->dbias_acc ? load_elem(b0, bdt, (size_t)c) : 0.0, sbias[c] = fabs(rb[c]);
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            const double g = dyv[r * C + c], v = act_base(ac->act, xv[r * Ci + c], &dv);
            if (Ci == C) {
                rd[r * Ci + c] = dv * g;
            } else {
                rd[r * Ci + c] = dv * xv[r * Ci + C + c] * g;
                rd[r * Ci + C + c] = v * g;
            }
        }
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < Ci; c++) rb[c] += rd[r * Ci + c], sbias[c] += fabs(rd[r * Ci + c]);

    if (want_dx) cmp_out(e, desc, "dx", hdx[GPU], hdx[CPU], dxt, ni, rd, exact);
    if (cast) {
        cmp_codes(e, desc, "out codes", ho[GPU], ho[CPU], odt, ni, exact ? 0.0 : FLIP_FP8, TOL_F32 * rms_of(rd, ni) * scale);
        if (ac->with_t) {
            /* the transpose is exact on each backend, whatever the codes */
            for (int i = 0; i < 2; i++) {
                size_t bad = 0;
                for (int64_t r = 0; r < R; r++)
                    for (int64_t c = 0; c < Ci; c++) bad += ho[i][r * Ci + c] != hot[i][c * R + r];
                CHECK(bad == 0, "%s: %s out_t is not the transpose of out (%zu elements)", desc, i ? "cuda" : "cpu", bad);
            }
        }
        if (ac->with_amax) cmp_amax(e, desc, ham[GPU], ham[CPU], exact, TOL_F32);
    }
    if (ac->with_sinv)
        for (int i = 0; i < 2; i++)
            CHECK(hsi[i] == 1.0f / scale, "%s %s scale_inv %.9g, want 1/%g", desc, i ? "cuda" : "cpu", hsi[i], scale);
    if (!ac->with_amax || ni == 0)
        for (int i = 0; i < 2; i++) CHECK(ham[i] == AMAX0, "%s: %s amax moved (%g)", desc, i ? "cuda" : "cpu", ham[i]);
    if (ac->dbias && (R > 0 || ac->dbias_acc)) cmp_sums(e, desc, "dbias", hdb[GPU], hdb[CPU], bdt, (size_t)Ci, rb, sbias, R, rms_of(rd, ni));

    dual *all[] = {&x, &dy, &dx, &out, &out_t, &sc, &amax, &sinv, &db};
    for (int k = 0; k < NELEM(all); k++) dual_free(e, all[k]);
    for (int i = 0; i < 2; i++) free(hdx[i]), free(hdb[i]), free(ho[i]), free(hot[i]);
    free(xv), free(dyv), free(hx), free(hdy), free(b0), free(rd), free(rb), free(sbias);
}

/* {256, 384}: whole tiles, so BF16 x takes cast_tile's FULL path. */
static const shape ACT_SHAPES[] = {{7, 11}, {1, 3221}, {2333, 1}, {1481, 677}, {0, 16}, {256, 384}, {2048, 4096}};

static void test_act(env *e)
{
    static const f8_dtype ys[4] = {F8_DTYPE_FP32, F8_DTYPE_BF16, F8_DTYPE_E4M3, F8_DTYPE_E5M2};
    for (int s = 0; s < NELEM(ACT_SHAPES); s++) {
        const int large = LARGE(ACT_SHAPES[s]);
        if (e->quick && large) continue;
        for (int act = 0; act < 7; act++) {
            /* forward: x dtype x y dtype (the large shape: one of the 8, rotating) */
            for (int v = 0; v < 8; v++) {
                if (large && v != act % 8) continue;
                act_case ac = {.s = ACT_SHAPES[s], .act = (f8_activation)act,
                               .x = v & 1 ? F8_DTYPE_BF16 : F8_DTYPE_FP32, .y = ys[v >> 1]};
                run_act_fwd(e, &ac);
                if (is_fp8(ac.y)) { /* and with the transposed codes (the module's training path) */
                    ac.fwd_t = 1;
                    run_act_fwd(e, &ac);
                }
            }
            /* backward: dx alone; everything fused; the cast alone (the FP8
             * module path: out + out_t + amax + scale_inv + dbias); out with
             * nothing else; each with both x dtypes */
            for (int v = 0; v < 8; v++) {
                if (large && v != (act + 1) % 8) continue;
                act_case ac = {.s = ACT_SHAPES[s], .act = (f8_activation)act,
                               .x = v & 1 ? F8_DTYPE_BF16 : F8_DTYPE_FP32,
                               .y = (v + act) % 3 == 0 ? F8_DTYPE_BF16 : F8_DTYPE_FP32};
                const int kind = v >> 1;
                ac.dx = kind == 0 ? F8_DTYPE_FP32 : (kind == 1 ? F8_DTYPE_BF16 : NO_DX);
                ac.out = kind == 0 ? NO_DX : (((v + act) & 2) ? F8_DTYPE_E5M2 : F8_DTYPE_E4M3);
                ac.with_t = ac.with_amax = ac.with_sinv = kind == 1 || kind == 2;
                ac.dbias = kind == 1 ? 1 + (act & 1) : (kind == 2 ? 1 : 0);
                ac.dbias_acc = kind == 2 ? (v & 1) : act & 1;
                run_act_bwd(e, &ac);
            }
        }
    }
}
/* ------------------------------------------------------------------------ */
/* CUDA fast paths against the general kernels, bit for bit                  */
/* ------------------------------------------------------------------------ */

/* cast_tile_kernel's FULL path (the activation backward of the FP8 module:
 * codes, transposed codes, amax, scale_inv, dbias) against the general one:
 * the same bytes. The general run reads x and dy one element off alignment. */
static void fast_act_bwd(env *e, shape sh, f8_activation act, f8_dtype dyt, f8_dtype odt)
{
    const int64_t R = sh.rows, C = sh.cols, Ci = f8_activation_gated(act) ? 2 * C : C;
    const size_t n = (size_t)(R * C), ni = (size_t)(R * Ci), ys = f8_dtype_size(dyt);
    char desc[160];
    snprintf(desc, sizeof desc, "fast act_bwd %s [%lld,%lld] dy %s out %s", ACT_NAME[act], (long long)R, (long long)C,
             f8_dtype_name(dyt), f8_dtype_name(odt));
    float *xv = xmalloc(ni * 4 + 4);
    void *hx = act_x(e, F8_DTYPE_BF16, ni, xv), *hdy = xmalloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++) store_elem(hdy, dyt, i, (float)rnd_normal(&e->rng));
    const float scale = odt == F8_DTYPE_E4M3 ? 40.0f : 2000.0f, a0 = AMAX0;
    void *out[2][4];
    for (int k = 0; k < 2; k++) {
        gbuf x = gbuf_new(e, ni * 2, k * 2, hx), dy = gbuf_new(e, n * ys, k * ys, hdy);
        gbuf o = gbuf_new(e, ni, 0, NULL), ot = gbuf_new(e, ni, 0, NULL), db = gbuf_new(e, (size_t)Ci * 4, 0, NULL);
        gbuf sc = gbuf_new(e, 4, 0, &scale), am = gbuf_new(e, 4, 0, &a0), si = gbuf_new(e, 4, 0, NULL);
        f8_ctx *ctx = e->ctx[GPU];
        f8i_act_bwd_args a = {.act = act, .x = x.p, .x_dtype = F8_DTYPE_BF16, .dy = dy.p, .dy_dtype = dyt,
                              .rows = R, .cols = C, .out = o.p, .out_t = ot.p, .out_dtype = odt, .scale = sc.p,
                              .amax = am.p, .scale_inv = si.p, .dbias = db.p, .dbias_dtype = F8_DTYPE_FP32,
                              .workspace = ctx->scratch, .workspace_bytes = ctx->scratch_bytes};
        CHECK_OK(ctx, f8i_op_act_bwd(ctx, &a));
        out[k][0] = gbuf_get(e, &o, ni), out[k][1] = gbuf_get(e, &ot, ni);
        out[k][2] = gbuf_get(e, &db, (size_t)Ci * 4), out[k][3] = gbuf_get(e, &am, 4);
        float sinv = 0.0f;
        CHECK_OK(ctx, f8_ctx_download(ctx, &sinv, si.p, 4));
        CHECK(sinv == 1.0f / scale, "%s: scale_inv %.9g, want 1/%g", desc, sinv, scale);
        gbuf all[] = {x, dy, o, ot, db, sc, am, si};
        for (int j = 0; j < NELEM(all); j++) f8_ctx_free(ctx, all[j].base);
    }
    same_bytes(desc, "codes", out[0][0], out[1][0], ni);
    same_bytes(desc, "transposed codes", out[0][1], out[1][1], ni);
    same_bytes(desc, "dbias", out[0][2], out[1][2], (size_t)Ci * 4);
    same_bytes(desc, "amax", out[0][3], out[1][3], 4);
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 4; j++) free(out[k][j]);
    free(xv), free(hx), free(hdy);
}
/* Shapes the fast path runs: whole 128-row tiles, every activation, FP32 and
 * BF16 dy. Small enough for F8_TEST_QUICK, so compute-sanitizer sees it. */
static void test_fast_paths(env *e)
{
    static const shape ash[] = {{256, 384}, {384, 512}};
    for (int s = 0; s < NELEM(ash); s++)
        for (int act = 0; act < 7; act++)
            for (int v = 0; v < 2; v++)
                fast_act_bwd(e, ash[s], (f8_activation)act, v ? F8_DTYPE_BF16 : F8_DTYPE_FP32,
                             (act + v) & 1 ? F8_DTYPE_E5M2 : F8_DTYPE_E4M3);
}

int main(void)
{
    static void (*const tests[])(env *) = {test_act, test_fast_paths};
    return norm_act_run("test_cuda_act", tests, NELEM(tests));
}
