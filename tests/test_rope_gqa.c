/*
 * test_rope_gqa.c — rotary position embeddings (f8_rope) and grouped-query
 * attention (f8_attention_config.n_kv_head) on the CPU backend:
 *  - the frequencies: plain theta^(-2d/hd), and Llama 3's "llama3" scaling
 *    against this file's own FP64 transcription of transformers'
 *    _compute_llama3_parameters (high frequencies kept, low ones divided by
 *    factor, the band between interpolated), at Llama 3.2's parameters;
 *  - RoPE forward against an FP64 rotation (FP32 and BF16), positions
 *    restarting every seq rows, the backward as the exact transpose
 *    (<R x, y> = <x, Rᵀ y>, Rᵀ R x = x), v columns untouched, bitwise;
 *  - GQA forward and backward against an FP64 reference (softmax attention
 *    with query head h reading k/v head h / (nh / G); dk, dv summed over the
 *    group), MQA (G = 1) and GQA at odd shapes, FP32 and BF16, with RoPE in
 *    front (the composite a Llama layer runs);
 *  - the FP64 reference's backward by central differences of its forward,
 *    and the library's FP32 backward by central differences of the
 *    library's forward (a random projection of y);
 *  - GQA equals multi-head attention on k/v heads copied out to every query
 *    head: y bitwise, dk and dv the group sums of the multi-head gradients;
 *  - bad configs and calls: a clear status, the data unchanged.
 */
#include <math.h>

#include "rope_gqa_rig.h"

/* ---- FP64 references ------------------------------------------------------ */

/* transformers' llama3 frequencies, transcribed here in FP64. */
static void ref_inv_freq(const f8_rope_config *c, double *w)
{
    const double pi = 3.14159265358979323846;
    for (int64_t d = 0; d < c->head_dim / 2; d++) {
        const double base = pow(c->theta, -(double)(2 * d) / (double)c->head_dim);
        w[d] = base;
        if (c->scaling != F8_ROPE_SCALING_LLAMA3) continue;
        const double wl = 2 * pi / base, lo_wl = (double)c->original_max_position / c->low_freq_factor;
        const double hi_wl = (double)c->original_max_position / c->high_freq_factor;
        const double smooth = ((double)c->original_max_position / wl - c->low_freq_factor) /
                              (c->high_freq_factor - c->low_freq_factor);
        if (wl < hi_wl)
            w[d] = base;
        else if (wl > lo_wl)
            w[d] = base / c->factor;
        else
            w[d] = (1 - smooth) * base / c->factor + smooth * base;
    }
}

/* rope (inverse: its transpose) of the q and k heads of x [T, W] in FP64, angles FP32(p·FP32(ω)). */
static void ref_rope(lshape sh, const f8_rope_config *c, const double *x, double *out, int inverse)
{
    const int64_t T = ls_T(sh), W = ls_W(sh), half = sh.hd / 2;
    double *w = (double *)xmalloc((size_t)half * sizeof *w);
    ref_inv_freq(c, w);
    memcpy(out, x, (size_t)(T * W) * sizeof *out);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < sh.nh + sh.G; h++)
            for (int64_t d = 0; d < half; d++) {
                const float ang = (float)(t % sh.S) * (float)w[d];
                const double cs = cos((double)ang), sn = inverse ? -sin((double)ang) : sin((double)ang);
                const int64_t o = t * W + h * sh.hd + d;
                out[o] = x[o] * cs - x[o + half] * sn;
                out[o + half] = x[o + half] * cs + x[o] * sn;
            }
    free(w);
}

/* Softmax row i of (b, h) into p[0..i]. */
static void ref_probs(lshape sh, const double *qkv, int64_t b, int64_t h, int64_t i, double *p)
{
    const int64_t W = ls_W(sh), C = ls_C(sh), g = h / (sh.nh / sh.G);
    double m = -INFINITY, l = 0;
    for (int64_t j = 0; j <= i; j++) {
        double s = 0;
        for (int64_t d = 0; d < sh.hd; d++) s += qkv[(b * sh.S + i) * W + h * sh.hd + d] * qkv[(b * sh.S + j) * W + C + g * sh.hd + d];
        p[j] = s / sqrt((double)sh.hd);
        if (p[j] > m) m = p[j];
    }
    for (int64_t j = 0; j <= i; j++) l += (p[j] = exp(p[j] - m));
    for (int64_t j = 0; j <= i; j++) p[j] /= l;
}

static void ref_attention(lshape sh, const double *qkv, const double *dy, double *y, double *dqkv)
{
    const int64_t W = ls_W(sh), C = ls_C(sh), S = sh.S, hd = sh.hd;
    double *p = (double *)xmalloc((size_t)S * sizeof *p), *dp = (double *)xmalloc((size_t)S * sizeof *dp);
    if (dqkv) memset(dqkv, 0, (size_t)(ls_T(sh) * W) * sizeof *dqkv);
    for (int64_t b = 0; b < sh.B; b++)
        for (int64_t h = 0; h < sh.nh; h++) {
            const int64_t ko = C + (h / (sh.nh / sh.G)) * hd, vo = ko + sh.G * hd;
            for (int64_t i = 0; i < S; i++) {
                ref_probs(sh, qkv, b, h, i, p);
                const int64_t yi = (b * S + i) * C + h * hd;
                for (int64_t d = 0; d < hd; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j <= i; j++) acc += p[j] * qkv[(b * S + j) * W + vo + d];
                    if (y) y[yi + d] = acc;
                }
                if (!dqkv) continue;
                double dsum = 0;
                for (int64_t j = 0; j <= i; j++) {
                    dp[j] = 0;
                    for (int64_t d = 0; d < hd; d++) dp[j] += dy[yi + d] * qkv[(b * S + j) * W + vo + d];
                    dsum += p[j] * dp[j];
                }
                for (int64_t j = 0; j <= i; j++) {
                    const double ds = p[j] * (dp[j] - dsum) / sqrt((double)hd);
                    for (int64_t d = 0; d < hd; d++) {
                        dqkv[(b * S + i) * W + h * hd + d] += ds * qkv[(b * S + j) * W + ko + d];
                        dqkv[(b * S + j) * W + ko + d] += ds * qkv[(b * S + i) * W + h * hd + d];
                        dqkv[(b * S + j) * W + vo + d] += p[j] * dy[yi + d];
                    }
                }
            }
        }
    free(p);
    free(dp);
}

/* The composite in FP64: y = attention(rope(qkv)); dqkv = ropeᵀ(attention'(dy)). */
static void ref_composite(lshape sh, const f8_rope_config *c, const double *qkv, const double *dy, double *y, double *dqkv)
{
    const size_t n = (size_t)(ls_T(sh) * ls_W(sh));
    double *r = (double *)xmalloc(n * sizeof *r), *g = dqkv ? (double *)xmalloc(n * sizeof *g) : NULL;
    ref_rope(sh, c, qkv, r, 0);
    ref_attention(sh, r, dy, y, g);
    if (dqkv) ref_rope(sh, c, g, dqkv, 1);
    free(r);
    free(g);
}

static double *dup_d(const float *v, size_t n)
{
    double *d = (double *)xmalloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) d[i] = v[i];
    return d;
}

/* ---- tests ----------------------------------------------------------------- */

static f8_rope_config llama3_cfg(lshape sh)
{
    f8_rope_config c = f8_rope_config_default(sh.nh, sh.G, sh.hd, sh.S);
    c.theta = 500000.0;
    c.scaling = F8_ROPE_SCALING_LLAMA3;
    c.factor = 32.0;
    c.low_freq_factor = 1.0;
    c.high_freq_factor = 4.0;
    c.original_max_position = 8192;
    return c;
}

static void test_frequencies(void)
{
    f8_rope_config c = f8_rope_config_default(32, 8, 64, 16);
    double w[64], r[64];
    CHECK(f8_rope_inv_freq(&c, w) == F8_OK, "inv_freq plain");
    for (int d = 0; d < 32; d++)
        CHECK(fabs(w[d] - pow(10000.0, -d / 32.0)) <= 1e-15 * pow(10000.0, -d / 32.0), "plain ω_%d = %.17g", d, w[d]);
    lshape sh = {1, 16, 32, 8, 64};
    c = llama3_cfg(sh);
    CHECK(f8_rope_inv_freq(&c, w) == F8_OK, "inv_freq llama3");
    ref_inv_freq(&c, r);
    /* bands by index: kept (0), interpolated (1), divided by factor (2), in that order */
    int count[3] = {0, 0, 0}, prev = 0, ordered = 1;
    for (int d = 0; d < 32; d++) {
        CHECK(fabs(w[d] - r[d]) <= 1e-14 * r[d], "llama3 ω_%d %.17g, reference %.17g", d, w[d], r[d]);
        const double base = pow(500000.0, -d / 32.0);
        const int band = fabs(w[d] - base) <= 1e-14 * base ? 0 : fabs(w[d] - base / 32.0) <= 1e-14 * base ? 2 : 1;
        if (band == 1) CHECK(w[d] < base && w[d] > base / 32.0, "ω_%d %.17g between base/32 and base", d, w[d]);
        ordered &= band >= prev;
        prev = band;
        count[band]++;
    }
    /* at theta 5e5, hd 64 the wavelengths 2π·5e5^(d/32) cross 2048 and 8192: all three bands are populated */
    CHECK(count[0] > 0 && count[1] > 0 && count[2] > 0 && ordered, "llama3 bands %d kept, %d between, %d divided (ordered %d)",
          count[0], count[1], count[2], ordered);
    CHECK(w[0] == 1.0, "ω_0 = 1 (the highest frequency is kept): %.17g", w[0]);
}

static void test_rope_values(f8_ctx *ctx, f8_dtype dt)
{
    const lshape sh = {3, 7, 4, 2, 16}; /* 3 sequences of 7: positions restart */
    const int64_t T = ls_T(sh), W = ls_W(sh);
    const size_t n = (size_t)(T * W);
    test_rng r = {77 + (uint64_t)dt};
    float *x = rig_rand(&r, n, 1.0, dt), *got = (float *)xmalloc(n * sizeof *got), *back = (float *)xmalloc(n * sizeof *back);
    const f8_rope_config c = llama3_cfg(sh);
    /* forward on the library, then its transpose */
    f8_rope *rope = NULL;
    CHECK_OK(ctx, f8_rope_create(ctx, &c, &rope));
    f8_tensor t = rig_put(ctx, x, T, W, dt);
    CHECK_OK(ctx, f8_rope_forward(rope, &t, sh.S));
    rig_get(ctx, &t, got);
    CHECK_OK(ctx, f8_rope_backward(rope, &t, sh.S));
    rig_get(ctx, &t, back);
    double *xd = dup_d(x, n), *ref = (double *)xmalloc(n * sizeof *ref);
    ref_rope(sh, &c, xd, ref, 0);
    const double tol = dt == F8_DTYPE_FP32 ? 5e-7 : 5e-3; /* FP32: cos, sin and the result rounded once each */
    const double worst = rel_error(got, ref, n);
    int v_same = 1, seq_same = 1;
    for (int64_t t_ = 0; t_ < T; t_++)
        for (int64_t col = (sh.nh + sh.G) * sh.hd; col < W; col++) v_same &= got[t_ * W + col] == x[t_ * W + col];
    CHECK(worst <= tol, "%s rope forward vs FP64: worst relative %.3g > %.3g", f8_dtype_name(dt), worst, tol);
    CHECK(v_same, "%s rope leaves v bitwise", f8_dtype_name(dt));
    /* rows of equal position in different sequences take the same rotation:
     * copy sequence 0 into 1 and compare the rotated rows bit for bit */
    float *x2 = (float *)xmalloc(n * sizeof *x2), *got2 = (float *)xmalloc(n * sizeof *got2);
    memcpy(x2, x, n * sizeof *x2);
    memcpy(x2 + sh.S * W, x, (size_t)(sh.S * W) * sizeof *x2);
    f8_tensor t2 = rig_put(ctx, x2, T, W, dt);
    CHECK_OK(ctx, f8_rope_forward(rope, &t2, sh.S));
    rig_get(ctx, &t2, got2);
    for (int64_t i = 0; i < sh.S * W; i++) seq_same &= got2[sh.S * W + i] == got[i];
    CHECK(seq_same, "%s rope: position = row mod seq (sequence 1 as sequence 0)", f8_dtype_name(dt));
    if (dt == F8_DTYPE_FP32) {
        /* transpose: <R x, y> = <x, Rᵀ y> in FP64 on the library's outputs; Rᵀ R x = x */
        float *yv = rig_rand(&r, n, 1.0, dt), *rty = (float *)xmalloc(n * sizeof *rty);
        f8_tensor ty = rig_put(ctx, yv, T, W, dt);
        CHECK_OK(ctx, f8_rope_backward(rope, &ty, sh.S));
        rig_get(ctx, &ty, rty);
        double lhs = 0, rhs = 0, scale = 0, rt = 0;
        for (size_t i = 0; i < n; i++) {
            lhs += (double)got[i] * yv[i], rhs += (double)x[i] * rty[i], scale += fabs((double)got[i] * yv[i]);
            rt = fmax(rt, fabs((double)back[i] - x[i]));
        }
        CHECK(fabs(lhs - rhs) <= 1e-6 * scale, "rope backward is the transpose: %.9g vs %.9g", lhs, rhs);
        CHECK(rt <= 1e-6, "rope backward(forward(x)) = x within %.3g", rt);
        f8_ctx_free(ctx, ty.data);
        free(yv), free(rty);
    }
    f8_ctx_free(ctx, t.data), f8_ctx_free(ctx, t2.data);
    f8_rope_destroy(rope);
    free(x), free(got), free(back), free(xd), free(ref), free(x2), free(got2);
}

/* The composite (RoPE + GQA attention) against FP64, over shapes with G = 1, 2 < nh and G = nh. */
static void test_composite_reference(f8_ctx *ctx, f8_dtype dt)
{
    static const lshape shapes[] = {{1, 1, 2, 1, 2}, {2, 7, 4, 1, 6}, {1, 13, 6, 2, 8}, {2, 9, 4, 4, 4}, {1, 33, 8, 2, 16}};
    const double tol_y = dt == F8_DTYPE_FP32 ? 1e-5 : 2e-2, tol_g = dt == F8_DTYPE_FP32 ? 1e-5 : 4e-2;
    test_rng r = {4242 + (uint64_t)dt};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const lshape sh = shapes[k];
        const size_t nq = (size_t)(ls_T(sh) * ls_W(sh)), ny = (size_t)(ls_T(sh) * ls_C(sh));
        const f8_rope_config c = llama3_cfg(sh);
        float *qkv = rig_rand(&r, nq, 1.0, dt), *dy = rig_rand(&r, ny, 1.0, dt);
        float *y = (float *)xmalloc(ny * sizeof *y), *g = (float *)xmalloc(nq * sizeof *g);
        double *qd = dup_d(qkv, nq), *dyd = dup_d(dy, ny);
        double *yr = (double *)xmalloc(ny * sizeof *yr), *gr = (double *)xmalloc(nq * sizeof *gr);
        rig_run(ctx, sh, dt, &c, qkv, dy, NULL, y, g);
        ref_composite(sh, &c, qd, dyd, yr, gr);
        const double ey = rel_error(y, yr, ny), eg = rel_error(g, gr, nq);
        CHECK(ey <= tol_y, "%s B%lld S%lld nh%lld G%lld hd%lld: y rel error %.3g > %.3g", f8_dtype_name(dt), (long long)sh.B,
              (long long)sh.S, (long long)sh.nh, (long long)sh.G, (long long)sh.hd, ey, tol_y);
        CHECK(eg <= tol_g, "%s B%lld S%lld nh%lld G%lld hd%lld: dqkv rel error %.3g > %.3g", f8_dtype_name(dt), (long long)sh.B,
              (long long)sh.S, (long long)sh.nh, (long long)sh.G, (long long)sh.hd, eg, tol_g);
        free(qkv), free(dy), free(y), free(g), free(qd), free(dyd), free(yr), free(gr);
    }
}

/* L = Σ w·y. The FP64 reference's gradient by central differences of its
 * forward (tight), and the library's FP32 gradient by central differences of
 * the library's FP32 forward (loose: FP32 steps). */
static void test_finite_differences(f8_ctx *ctx)
{
    const lshape sh = {1, 6, 4, 2, 4};
    const size_t nq = (size_t)(ls_T(sh) * ls_W(sh)), ny = (size_t)(ls_T(sh) * ls_C(sh));
    const f8_rope_config c = llama3_cfg(sh);
    test_rng r = {99};
    float *qkv = rig_rand(&r, nq, 1.0, F8_DTYPE_FP32), *w = rig_rand(&r, ny, 1.0, F8_DTYPE_FP32);
    double *qd = dup_d(qkv, nq), *wd = dup_d(w, ny), *gr = (double *)xmalloc(nq * sizeof *gr);
    double *yp = (double *)xmalloc(ny * sizeof *yp), *ym = (double *)xmalloc(ny * sizeof *ym);
    float *g = (float *)xmalloc(nq * sizeof *g), *yf = (float *)xmalloc(ny * sizeof *yf), *qf = (float *)xmalloc(nq * sizeof *qf);
    ref_composite(sh, &c, qd, wd, NULL, gr);
    rig_run(ctx, sh, F8_DTYPE_FP32, &c, qkv, w, NULL, NULL, g);
    double worst_ref = 0, worst_lib = 0;
    for (size_t i = 0; i < nq; i++) {
        const double h = 1e-5, x0 = qd[i];
        qd[i] = x0 + h, ref_composite(sh, &c, qd, NULL, yp, NULL);
        qd[i] = x0 - h, ref_composite(sh, &c, qd, NULL, ym, NULL);
        qd[i] = x0;
        double fd = 0;
        for (size_t j = 0; j < ny; j++) fd += wd[j] * (yp[j] - ym[j]) / (2 * h);
        worst_ref = fmax(worst_ref, fabs(fd - gr[i]) / (fabs(gr[i]) + 1e-3));
        /* the library: FP32 forward at x ± h (h = 1e-2), the sum in FP64 */
        const float hf = 1e-2f;
        double lp = 0, lm = 0;
        memcpy(qf, qkv, nq * sizeof *qf);
        qf[i] = qkv[i] + hf;
        rig_run(ctx, sh, F8_DTYPE_FP32, &c, qf, NULL, NULL, yf, NULL);
        for (size_t j = 0; j < ny; j++) lp += wd[j] * yf[j];
        qf[i] = qkv[i] - hf;
        rig_run(ctx, sh, F8_DTYPE_FP32, &c, qf, NULL, NULL, yf, NULL);
        for (size_t j = 0; j < ny; j++) lm += wd[j] * yf[j];
        const double fdl = (lp - lm) / (double)((qkv[i] + hf) - (qkv[i] - hf));
        worst_lib = fmax(worst_lib, fabs(fdl - g[i]) / (fabs(g[i]) + 5e-2));
    }
    CHECK(worst_ref <= 1e-6, "FP64 reference backward vs its central differences: worst %.3g", worst_ref);
    CHECK(worst_lib <= 2e-2, "library FP32 backward vs its central differences: worst %.3g", worst_lib);
    free(qkv), free(w), free(qd), free(wd), free(gr), free(yp), free(ym), free(g), free(yf), free(qf);
}

/* GQA against multi-head attention on k/v copied to every query head. */
static void test_gqa_equals_expanded(f8_ctx *ctx, f8_dtype dt)
{
    const lshape sh = {2, 11, 6, 2, 8}, mh = {2, 11, 6, 6, 8};
    const int64_t T = ls_T(sh), W = ls_W(sh), We = ls_W(mh), hd = sh.hd, C = ls_C(sh), grp = sh.nh / sh.G;
    test_rng r = {5 + (uint64_t)dt};
    float *qkv = rig_rand(&r, (size_t)(T * W), 1.0, dt), *dy = rig_rand(&r, (size_t)(T * C), 1.0, dt);
    float *ex = (float *)xmalloc((size_t)(T * We) * sizeof *ex);
    for (int64_t t = 0; t < T; t++) {
        memcpy(ex + t * We, qkv + t * W, (size_t)C * sizeof *ex);
        for (int64_t h = 0; h < sh.nh; h++) {
            memcpy(ex + t * We + C + h * hd, qkv + t * W + C + (h / grp) * hd, (size_t)hd * sizeof *ex);
            memcpy(ex + t * We + 2 * C + h * hd, qkv + t * W + C + sh.G * hd + (h / grp) * hd, (size_t)hd * sizeof *ex);
        }
    }
    float *y = (float *)xmalloc((size_t)(T * C) * sizeof *y), *ye = (float *)xmalloc((size_t)(T * C) * sizeof *ye);
    float *g = (float *)xmalloc((size_t)(T * W) * sizeof *g), *ge = (float *)xmalloc((size_t)(T * We) * sizeof *ge);
    rig_run(ctx, sh, dt, NULL, qkv, dy, NULL, y, g);
    rig_run(ctx, mh, dt, NULL, ex, dy, NULL, ye, ge);
    CHECK(memcmp(y, ye, (size_t)(T * C) * sizeof *y) == 0, "%s GQA y bitwise the expanded multi-head y", f8_dtype_name(dt));
    int dq_same = 1;
    double worst = 0;
    for (int64_t t = 0; t < T; t++) {
        for (int64_t i = 0; i < C; i++) dq_same &= g[t * W + i] == ge[t * We + i];
        for (int64_t gk = 0; gk < sh.G; gk++)
            for (int64_t part = 0; part < 2; part++)
                for (int64_t d = 0; d < hd; d++) {
                    double sum = 0, mag = 0;
                    for (int64_t h = gk * grp; h < (gk + 1) * grp; h++) {
                        const float v = ge[t * We + (1 + part) * C + h * hd + d];
                        sum += v, mag += fabs(v);
                    }
                    const double got = g[t * W + C + part * sh.G * hd + gk * hd + d];
                    worst = fmax(worst, fabs(got - sum) / (mag + 1e-2));
                }
    }
    CHECK(dq_same, "%s GQA dq bitwise the expanded multi-head dq", f8_dtype_name(dt));
    const double tol = dt == F8_DTYPE_FP32 ? 1e-6 : 1e-2; /* BF16: one rounding of the sum against three */
    CHECK(worst <= tol, "%s GQA dk, dv vs the group sums of multi-head dk, dv: worst %.3g > %.3g", f8_dtype_name(dt), worst, tol);
    free(qkv), free(dy), free(ex), free(y), free(ye), free(g), free(ge);
}

static void test_errors(f8_ctx *ctx)
{
    f8_attention_config a = f8_attention_config_default(6, 8, 1, 4);
    f8_attention *att = NULL;
    a.n_kv_head = 4;
    CHECK_STATUS(ctx, f8_attention_create(ctx, &a, &att), F8_ERR_SHAPE);
    CHECK(att == NULL, "a refused attention is NULL");
    a.n_kv_head = -1;
    CHECK_STATUS(ctx, f8_attention_create(ctx, &a, &att), F8_ERR_SHAPE);
    a.n_kv_head = 2;
    a.fp8 = 1; /* FP8 attention takes GQA (issue 31; its numerics: test_attention_fp8's GQA cases) */
    CHECK_OK(ctx, f8_attention_create(ctx, &a, &att));
    f8_attention_destroy(att);
    att = NULL;
    a.fp8 = 0;
    CHECK_OK(ctx, f8_attention_create(ctx, &a, &att));
    /* a multi-head-wide qkv for a GQA attention is refused */
    f8_tensor q3 = rig_put(ctx, NULL, 4, 3 * 48, F8_DTYPE_BF16), y = rig_put(ctx, NULL, 4, 48, F8_DTYPE_BF16);
    CHECK_STATUS(ctx, f8_attention_forward(att, &q3, 1, 4, &y, NULL), F8_ERR_SHAPE);
    f8_attention_destroy(att);

    f8_rope *rope = NULL;
    f8_rope_config c = f8_rope_config_default(6, 2, 8, 4);
    const f8_rope_config good = c;
    c.head_dim = 7;
    CHECK_STATUS(ctx, f8_rope_create(ctx, &c, &rope), F8_ERR_SHAPE);
    c = good, c.n_kv_head = 4;
    CHECK_STATUS(ctx, f8_rope_create(ctx, &c, &rope), F8_ERR_SHAPE);
    c = good, c.theta = NAN;
    CHECK_STATUS(ctx, f8_rope_create(ctx, &c, &rope), F8_ERR_INVALID_ARGUMENT);
    c = good, c.scaling = F8_ROPE_SCALING_LLAMA3, c.high_freq_factor = 1.0;
    CHECK_STATUS(ctx, f8_rope_create(ctx, &c, &rope), F8_ERR_INVALID_ARGUMENT);
    c = good, c.scaling = (f8_rope_scaling)7;
    CHECK_STATUS(ctx, f8_rope_create(ctx, &c, &rope), F8_ERR_INVALID_ARGUMENT);
    CHECK(rope == NULL, "a refused rope is NULL");
    double w[4];
    c = good, c.max_seq = 0;
    CHECK(f8_rope_inv_freq(&c, w) == F8_ERR_SHAPE, "inv_freq refuses max_seq 0");
    CHECK_OK(ctx, f8_rope_create(ctx, &good, &rope));
    test_rng r = {3};
    float *x = rig_rand(&r, 4 * 80, 1.0, F8_DTYPE_FP32), *after = (float *)xmalloc(4 * 80 * sizeof *after);
    f8_tensor t = rig_put(ctx, x, 4, 80, F8_DTYPE_FP32), bad = rig_put(ctx, NULL, 4, 3 * 48, F8_DTYPE_FP32);
    CHECK_STATUS(ctx, f8_rope_forward(rope, &t, 5), F8_ERR_SHAPE);  /* seq > max_seq */
    CHECK_STATUS(ctx, f8_rope_forward(rope, &t, 0), F8_ERR_SHAPE);
    CHECK_STATUS(ctx, f8_rope_backward(rope, &bad, 4), F8_ERR_SHAPE); /* multi-head width */
    f8_tensor e = t;
    e.dtype = F8_DTYPE_E4M3;
    e.scale_inv = (float *)t.data; /* a well-formed FP8 view: refused for its dtype */
    CHECK_STATUS(ctx, f8_rope_forward(rope, &e, 4), F8_ERR_DTYPE);
    CHECK_STATUS(ctx, f8_rope_forward(rope, NULL, 4), F8_ERR_INVALID_ARGUMENT);
    rig_get(ctx, &t, after);
    CHECK(memcmp(x, after, 4 * 80 * sizeof *x) == 0, "refused rope calls change nothing");
    f8_ctx_free(ctx, t.data), f8_ctx_free(ctx, bad.data), f8_ctx_free(ctx, q3.data), f8_ctx_free(ctx, y.data);
    f8_rope_destroy(rope);
    free(x), free(after);
}

int main(void)
{
    char why[256] = "";
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, NULL, why);
    if (!ctx) {
        fprintf(stderr, "test_rope_gqa: no CPU ctx: %s\n", why);
        return 1;
    }
    test_frequencies();
    test_rope_values(ctx, F8_DTYPE_FP32);
    test_rope_values(ctx, F8_DTYPE_BF16);
    test_composite_reference(ctx, F8_DTYPE_FP32);
    test_composite_reference(ctx, F8_DTYPE_BF16);
    test_finite_differences(ctx);
    test_gqa_equals_expanded(ctx, F8_DTYPE_FP32);
    test_gqa_equals_expanded(ctx, F8_DTYPE_BF16);
    test_errors(ctx);
    f8_ctx_destroy(ctx);
    return test_finish("test_rope_gqa");
}
