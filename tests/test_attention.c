/*
 * test_attention.c — f8_attention (causal multi-head self-attention) on the
 * CPU backend:
 *  - forward and backward against an FP64 reference written here, FP32 and
 *    BF16 (inputs rounded to the dtype first, so the reference sees the same
 *    values), over odd and prime shapes (S = 1, 7, 13, head_dim 1..);
 *  - the reference's backward by central differences of its own forward, and
 *    the library's FP32 backward by central differences of the library's
 *    forward;
 *  - the causal mask (future tokens change no earlier output, nor dq of
 *    earlier rows), sequence independence within a batch and prefix
 *    independence across sequence lengths, all bit for bit;
 *  - S = 1 exactly (y = v, dq = dk = 0, dv = dy); inference (saved NULL)
 *    bitwise the training forward; saved states in flight and reused;
 *    determinism; launch, allocation and memory counters (the saved state
 *    is L and a copy of y: O(T·C));
 *  - bad arguments: a clear status, the outputs and counters untouched;
 *  - a graph: forward + backward captured after a warm-up and replayed over
 *    new inputs, bitwise the eager result.
 */
#include "device_buffers.h"

typedef struct shape {
    int64_t B, S, nh, hd;
} shape;

static int64_t sh_T(shape s) { return s.B * s.S; }
static int64_t sh_C(shape s) { return s.nh * s.hd; }

/* ---- FP64 reference --------------------------------------------------------- */

/* Probabilities of sequence b, head h, row i into p[0..i] (double softmax). */
static void ref_probs(shape sh, const double *qkv, int64_t b, int64_t h, int64_t i, double *p)
{
    const int64_t C = sh_C(sh), W = 3 * C;
    const double c = 1.0 / sqrt((double)sh.hd);
    double m = -INFINITY;
    for (int64_t j = 0; j <= i; j++) {
        double s = 0;
        for (int64_t d = 0; d < sh.hd; d++) s += qkv[(b * sh.S + i) * W + h * sh.hd + d] * qkv[(b * sh.S + j) * W + C + h * sh.hd + d];
        p[j] = s * c;
        if (p[j] > m) m = p[j];
    }
    double l = 0;
    for (int64_t j = 0; j <= i; j++) l += (p[j] = exp(p[j] - m));
    for (int64_t j = 0; j <= i; j++) p[j] /= l;
}

static void ref_forward(shape sh, const double *qkv, double *y)
{
    const int64_t C = sh_C(sh), W = 3 * C;
    double *p = (double *)xmalloc((size_t)sh.S * sizeof *p);
    for (int64_t b = 0; b < sh.B; b++)
        for (int64_t h = 0; h < sh.nh; h++)
            for (int64_t i = 0; i < sh.S; i++) {
                ref_probs(sh, qkv, b, h, i, p);
                for (int64_t d = 0; d < sh.hd; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j <= i; j++) acc += p[j] * qkv[(b * sh.S + j) * W + 2 * C + h * sh.hd + d];
                    y[(b * sh.S + i) * C + h * sh.hd + d] = acc;
                }
            }
    free(p);
}

static void ref_backward(shape sh, const double *qkv, const double *dy, double *dqkv)
{
    const int64_t C = sh_C(sh), W = 3 * C, S = sh.S, hd = sh.hd;
    const double c = 1.0 / sqrt((double)hd);
    double *p = (double *)xmalloc((size_t)S * sizeof *p), *dp = (double *)xmalloc((size_t)S * sizeof *dp);
    memset(dqkv, 0, (size_t)(sh_T(sh) * W) * sizeof *dqkv);
    for (int64_t b = 0; b < sh.B; b++)
        for (int64_t h = 0; h < sh.nh; h++)
            for (int64_t i = 0; i < S; i++) {
                ref_probs(sh, qkv, b, h, i, p);
                const double *dyi = dy + (b * S + i) * C + h * hd;
                double dot = 0;
                for (int64_t j = 0; j <= i; j++) {
                    const double *vj = qkv + (b * S + j) * W + 2 * C + h * hd;
                    dp[j] = 0;
                    for (int64_t d = 0; d < hd; d++) dp[j] += dyi[d] * vj[d];
                    dot += p[j] * dp[j];
                    for (int64_t d = 0; d < hd; d++) dqkv[(b * S + j) * W + 2 * C + h * hd + d] += p[j] * dyi[d];
                }
                for (int64_t j = 0; j <= i; j++) {
                    const double ds = p[j] * (dp[j] - dot) * c;
                    for (int64_t d = 0; d < hd; d++) {
                        dqkv[(b * S + i) * W + h * hd + d] += ds * qkv[(b * S + j) * W + C + h * hd + d];
                        dqkv[(b * S + j) * W + C + h * hd + d] += ds * qkv[(b * S + i) * W + h * hd + d];
                    }
                }
            }
    free(p);
    free(dp);
}

/* ---- library runs ----------------------------------------------------------- */

static double *to_double(const float *v, size_t n)
{
    double *d = (double *)xmalloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) d[i] = v[i];
    return d;
}

static int g_kept; /* f8_attention_config.output_kept of the objects att_new makes */

static f8_attention *att_new(f8_ctx *ctx, shape sh, f8_dtype dt)
{
    f8_attention_config cfg = f8_attention_config_default(sh.nh, sh.hd, sh.B, sh.S);
    cfg.dtype = dt;
    cfg.output_kept = g_kept;
    f8_attention *a = NULL;
    if (f8_attention_create(ctx, &cfg, &a) != F8_OK) die("f8_attention_create", ctx);
    return a;
}

/* Forward (and backward when dy and dqkv are given) of one shape on a fresh
 * attention object; host floats in and out. saved = 0 runs the forward
 * without a saved state (inference; no backward). */
static void run(f8_ctx *ctx, shape sh, f8_dtype dt, const float *qkv, const float *dy, float *y, float *dqkv, int saved)
{
    const size_t T = (size_t)sh_T(sh), C = (size_t)sh_C(sh);
    f8_attention *a = att_new(ctx, sh, dt);
    f8_attention_saved *sv = NULL;
    if (saved) CHECK_OK(ctx, f8_attention_saved_create(a, &sv));
    void *dq = dev_put(ctx, qkv, T * 3 * C, dt), *dy_ = dy ? dev_put(ctx, dy, T * C, dt) : NULL;
    void *dyo = dev_put(ctx, NULL, T * C, dt), *dgo = dev_put(ctx, NULL, T * 3 * C, dt);
    f8_tensor tq = f8_tensor_make(dq, dt, (int64_t)T, (int64_t)(3 * C)), ty = f8_tensor_make(dyo, dt, (int64_t)T, (int64_t)C);
    f8_tensor tdy = f8_tensor_make(dy_, dt, (int64_t)T, (int64_t)C), tg = f8_tensor_make(dgo, dt, (int64_t)T, (int64_t)(3 * C));
    CHECK_OK(ctx, f8_attention_forward(a, &tq, sh.B, sh.S, &ty, sv));
    if (y) dev_get(ctx, dyo, T * C, dt, y);
    if (dy && dqkv && sv) {
        CHECK_OK(ctx, f8_attention_backward(a, sv, &tdy, &tg));
        dev_get(ctx, dgo, T * 3 * C, dt, dqkv);
    }
    f8_ctx_free(ctx, dq);
    f8_ctx_free(ctx, dy_);
    f8_ctx_free(ctx, dyo);
    f8_ctx_free(ctx, dgo);
    f8_attention_saved_destroy(sv);
    f8_attention_destroy(a);
}

/* Relative error of the q, k or v third (part 0..2) of dqkv [T, 3C]. */
static double part_error(shape sh, const float *g, const double *ref, int part)
{
    const int64_t T = sh_T(sh), C = sh_C(sh);
    double num = 0, den = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < C; c++) {
            const int64_t i = t * 3 * C + part * C + c;
            num += ((double)g[i] - ref[i]) * ((double)g[i] - ref[i]);
            den += ref[i] * ref[i];
        }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static const char *dt_name(f8_dtype dt) { return f8_dtype_name(dt); }

/* ---- tests -------------------------------------------------------------------- */

/* Library vs FP64 reference. Tolerances (relative Frobenius): FP32 5e-6 —
 * the only rounding is FP32's (scores, p, l, L, dP, D, dS, outputs, exp2f);
 * BF16 1.5e-2 for y and 3e-2 for dqkv — p, y, dS and the gradients are
 * rounded to BF16 (2^-9 relative each), dS after the cancellation dP - D
 * with D made from the rounded y. */
static void test_reference(f8_ctx *ctx, f8_dtype dt)
{
    static const shape shapes[] = {{1, 1, 1, 1}, {2, 1, 3, 4}, {1, 7, 1, 1}, {2, 7, 3, 5},  {3, 13, 2, 8},
                                   {1, 16, 4, 16}, {2, 33, 2, 7}, {1, 64, 2, 32}, {4, 5, 1, 64}};
    const double tol_y = dt == F8_DTYPE_FP32 ? 5e-6 : 1.5e-2, tol_g = dt == F8_DTYPE_FP32 ? 5e-6 : 3e-2;
    test_rng r = {(uint64_t)dt * 1000 + 1};
    double worst_y = 0, worst_g = 0;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const shape sh = shapes[k];
        const size_t T = (size_t)sh_T(sh), C = (size_t)sh_C(sh);
        for (int peaky = 0; peaky < 2; peaky++) {
            /* amp 1: moderate scores; amp 2.5: peaked softmax rows (large logits) */
            float *qkv = rand_vec(&r, T * 3 * C, peaky ? 2.5 : 1.0, dt), *dy = rand_vec(&r, T * C, 1.0, dt);
            float *y = (float *)xmalloc(T * C * sizeof *y), *g = (float *)xmalloc(T * 3 * C * sizeof *g);
            double *qd = to_double(qkv, T * 3 * C), *dyd = to_double(dy, T * C);
            double *yr = (double *)xmalloc(T * C * sizeof *yr), *gr = (double *)xmalloc(T * 3 * C * sizeof *gr);
            run(ctx, sh, dt, qkv, dy, y, g, 1);
            ref_forward(sh, qd, yr);
            ref_backward(sh, qd, dyd, gr);
            const double ey = rel_error(y, yr, T * C);
            CHECK(ey <= tol_y, "%s B%lld S%lld nh%lld hd%lld amp%d: y rel error %.3g > %.3g", dt_name(dt), (long long)sh.B,
                  (long long)sh.S, (long long)sh.nh, (long long)sh.hd, peaky, ey, tol_y);
            if (ey > worst_y) worst_y = ey;
            for (int part = 0; part < 3; part++) {
                const double eg = part_error(sh, g, gr, part);
                /* S = 1: dq = dk = 0 exactly in both; rel_error is then the absolute norm */
                CHECK(eg <= tol_g, "%s B%lld S%lld nh%lld hd%lld amp%d: d%c rel error %.3g > %.3g", dt_name(dt),
                      (long long)sh.B, (long long)sh.S, (long long)sh.nh, (long long)sh.hd, peaky, "qkv"[part], eg, tol_g);
                if (eg > worst_g) worst_g = eg;
            }
            free(qkv), free(dy), free(y), free(g), free(qd), free(dyd), free(yr), free(gr);
        }
    }
    printf("  %s vs FP64: worst y %.3g (tol %.3g), worst dq/dk/dv %.3g (tol %.3g)\n", dt_name(dt), worst_y, tol_y, worst_g,
           tol_g);
}

/* Σ y·w over [T, C] in double (the loss whose gradient is dqkv for dy = w). */
static double dotw(const double *y, const double *w, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += y[i] * w[i];
    return s;
}

/* The reference's backward is the gradient of its forward (central
 * differences, h = 1e-5: error ~h² · f''' ~ 1e-10, tolerance 1e-7 abs). */
static void test_reference_fd(void)
{
    const shape sh = {2, 5, 2, 3};
    const size_t T = (size_t)sh_T(sh), C = (size_t)sh_C(sh), n = T * 3 * C;
    test_rng r = {77};
    double *qkv = (double *)xmalloc(n * sizeof *qkv), *w = (double *)xmalloc(T * C * sizeof *w);
    double *y = (double *)xmalloc(T * C * sizeof *y), *g = (double *)xmalloc(n * sizeof *g);
    for (size_t i = 0; i < n; i++) qkv[i] = 1.5 * rng_normal(&r);
    for (size_t i = 0; i < T * C; i++) w[i] = rng_normal(&r);
    ref_backward(sh, qkv, w, g);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double x = qkv[i], h = 1e-5;
        qkv[i] = x + h;
        ref_forward(sh, qkv, y);
        const double lp = dotw(y, w, T * C);
        qkv[i] = x - h;
        ref_forward(sh, qkv, y);
        const double lm = dotw(y, w, T * C);
        qkv[i] = x;
        const double fd = (lp - lm) / (2 * h), e = fabs(fd - g[i]);
        CHECK(e <= 1e-7, "reference fd: element %zu: analytic %.9g, differences %.9g", i, g[i], fd);
        if (e > worst) worst = e;
    }
    printf("  FP64 reference backward vs central differences: worst abs error %.3g\n", worst);
    free(qkv), free(w), free(y), free(g);
}

/* The library's FP32 backward against central differences of the library's
 * FP32 forward (h = 1e-2 on inputs ~1; FP32 noise in the loss ~1e-6 / 2h, the
 * h² term ~1e-4): |fd - g| <= 2e-3 + 1e-2·|g|. */
static void test_library_fd(f8_ctx *ctx)
{
    const shape sh = {2, 6, 2, 3};
    const f8_dtype dt = F8_DTYPE_FP32;
    const size_t T = (size_t)sh_T(sh), C = (size_t)sh_C(sh), n = T * 3 * C;
    test_rng r = {91};
    float *qkv = rand_vec(&r, n, 1.0, dt), *w = rand_vec(&r, T * C, 1.0, dt);
    float *y = (float *)xmalloc(T * C * sizeof *y), *g = (float *)xmalloc(n * sizeof *g);
    double *wd = to_double(w, T * C), *yd = (double *)xmalloc(T * C * sizeof *yd);
    run(ctx, sh, dt, qkv, w, y, g, 1);

    f8_attention *a = att_new(ctx, sh, dt);
    void *dq = dev_put(ctx, qkv, n, dt), *dyo = dev_put(ctx, NULL, T * C, dt);
    f8_tensor tq = f8_tensor_make(dq, dt, (int64_t)T, (int64_t)(3 * C)), ty = f8_tensor_make(dyo, dt, (int64_t)T, (int64_t)C);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        const float x = qkv[i], h = 1e-2f;
        double l[2];
        for (int sgn = 0; sgn < 2; sgn++) {
            const float xv = sgn ? x - h : x + h;
            CHECK_OK(ctx, f8_ctx_upload(ctx, (float *)dq + i, &xv, sizeof xv));
            CHECK_OK(ctx, f8_attention_forward(a, &tq, sh.B, sh.S, &ty, NULL));
            dev_get(ctx, dyo, T * C, dt, y);
            for (size_t k = 0; k < T * C; k++) yd[k] = y[k];
            l[sgn] = dotw(yd, wd, T * C);
        }
        CHECK_OK(ctx, f8_ctx_upload(ctx, (float *)dq + i, &x, sizeof x));
        const double fd = (l[0] - l[1]) / (2.0 * h), e = fabs(fd - g[i]);
        CHECK(e <= 2e-3 + 1e-2 * fabs(g[i]), "library fd: element %zu: backward %.6g, differences %.6g", i, g[i], fd);
        if (e > worst) worst = e;
    }
    printf("  FP32 library backward vs central differences: worst abs error %.3g\n", worst);
    f8_ctx_free(ctx, dq);
    f8_ctx_free(ctx, dyo);
    f8_attention_destroy(a);
    free(qkv), free(w), free(y), free(g), free(wd), free(yd);
}

static int same_bits(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof *a) == 0; }

/* Causality, sequence and prefix independence, all bitwise on the CPU. */
static void test_structure(f8_ctx *ctx, f8_dtype dt)
{
    const shape sh = {3, 9, 2, 4};
    const size_t T = (size_t)sh_T(sh), C = (size_t)sh_C(sh), S = (size_t)sh.S;
    test_rng r = {5 + (uint64_t)dt};
    float *qkv = rand_vec(&r, T * 3 * C, 1.5, dt), *dy = rand_vec(&r, T * C, 1.0, dt);
    float *y0 = (float *)xmalloc(T * C * 4), *g0 = (float *)xmalloc(T * 3 * C * 4);
    float *y1 = (float *)xmalloc(T * C * 4), *g1 = (float *)xmalloc(T * 3 * C * 4);
    run(ctx, sh, dt, qkv, dy, y0, g0, 1);

    /* Future tokens of sequence 1 (rows > i0) replaced: rows <= i0 of y unchanged,
     * so is every row of sequences 0 and 2; changed dy rows > i0 leave dq rows <= i0. */
    const size_t b = 1, i0 = 4;
    float *qkv2 = (float *)xmalloc(T * 3 * C * 4), *dy2 = (float *)xmalloc(T * C * 4);
    memcpy(qkv2, qkv, T * 3 * C * 4);
    memcpy(dy2, dy, T * C * 4);
    for (size_t i = i0 + 1; i < S; i++) {
        for (size_t c = 0; c < 3 * C; c++) qkv2[(b * S + i) * 3 * C + c] = round_dt((float)rng_normal(&r), dt);
        for (size_t c = 0; c < C; c++) dy2[(b * S + i) * C + c] = round_dt((float)rng_normal(&r), dt);
    }
    run(ctx, sh, dt, qkv2, dy2, y1, g1, 1);
    CHECK(same_bits(y0, y1, b * S * C) && same_bits(y0 + (b + 1) * S * C, y1 + (b + 1) * S * C, (T - (b + 1) * S) * C),
          "%s causal: other sequences' y changed", dt_name(dt));
    CHECK(same_bits(y0 + b * S * C, y1 + b * S * C, (i0 + 1) * C), "%s causal: y rows <= %zu changed by later tokens",
          dt_name(dt), i0);
    CHECK(!same_bits(y0 + (b * S + i0 + 1) * C, y1 + (b * S + i0 + 1) * C, C), "%s causal: the changed row's y did not change",
          dt_name(dt));
    int dq_same = 1;
    for (size_t i = 0; i <= i0; i++) dq_same &= same_bits(g0 + (b * S + i) * 3 * C, g1 + (b * S + i) * 3 * C, C);
    CHECK(dq_same, "%s causal: dq of rows <= %zu changed by later tokens", dt_name(dt), i0);

    /* Each sequence alone (B = 1) gives its rows of the batched run. */
    const shape one = {1, sh.S, sh.nh, sh.hd};
    for (size_t bb = 0; bb < (size_t)sh.B; bb++) {
        run(ctx, one, dt, qkv + bb * S * 3 * C, dy + bb * S * C, y1, g1, 1);
        CHECK(same_bits(y1, y0 + bb * S * C, S * C), "%s: sequence %zu alone: y differs from the batched run", dt_name(dt), bb);
        CHECK(same_bits(g1, g0 + bb * S * 3 * C, S * 3 * C), "%s: sequence %zu alone: dqkv differs from the batched run",
              dt_name(dt), bb);
    }
    /* The first 4 tokens as sequences of 4 give the first 4 rows of y. */
    const shape pre = {1, 4, sh.nh, sh.hd};
    run(ctx, pre, dt, qkv, NULL, y1, NULL, 1);
    CHECK(same_bits(y1, y0, 4 * C), "%s: a 4-token prefix's y differs from the 9-token run's first rows", dt_name(dt));
    free(qkv), free(dy), free(y0), free(g0), free(y1), free(g1), free(qkv2), free(dy2);
}

/* S = 1: P = 1, so y = v, dq = dk = 0 and dv = dy, exactly. */
static void test_single_token(f8_ctx *ctx, f8_dtype dt)
{
    const shape sh = {4, 1, 3, 5};
    const size_t T = 4, C = 15;
    test_rng r = {11};
    float *qkv = rand_vec(&r, T * 3 * C, 3.0, dt), *dy = rand_vec(&r, T * C, 1.0, dt);
    float *y = (float *)xmalloc(T * C * 4), *g = (float *)xmalloc(T * 3 * C * 4);
    run(ctx, sh, dt, qkv, dy, y, g, 1);
    int ok_y = 1, ok_g = 1;
    for (size_t t = 0; t < T; t++)
        for (size_t c = 0; c < C; c++) {
            ok_y &= y[t * C + c] == qkv[t * 3 * C + 2 * C + c];
            ok_g &= g[t * 3 * C + c] == 0.0f && g[t * 3 * C + C + c] == 0.0f && g[t * 3 * C + 2 * C + c] == dy[t * C + c];
        }
    CHECK(ok_y, "%s S=1: y is not v exactly", dt_name(dt));
    CHECK(ok_g, "%s S=1: dq, dk are not 0 or dv is not dy exactly", dt_name(dt));
    free(qkv), free(dy), free(y), free(g);
}

static uint64_t counter(f8_ctx *ctx, int which)
{
    f8_ctx_counters c;
    memset(&c, 0, sizeof c);
    f8_ctx_counters_read(ctx, &c);
    return which == 0 ? c.launches : which == 1 ? c.allocations : c.frees;
}

/* Inference = training forward; two saved states in flight; a saved state
 * reused; the same run twice; counters and the memory report. */
static void test_saved_and_counters(f8_ctx *ctx, f8_dtype dt)
{
    const shape sh = {2, 6, 2, 4};
    const size_t T = 12, C = 8, es = f8_dtype_size(dt);
    test_rng r = {23};
    float *qa = rand_vec(&r, T * 3 * C, 1.0, dt), *qb = rand_vec(&r, T * 3 * C, 1.0, dt), *dy = rand_vec(&r, T * C, 1.0, dt);
    float *ya = (float *)xmalloc(T * C * 4), *ga = (float *)xmalloc(T * 3 * C * 4);
    float *yb = (float *)xmalloc(T * C * 4), *gb = (float *)xmalloc(T * 3 * C * 4);
    float *y = (float *)xmalloc(T * C * 4), *g = (float *)xmalloc(T * 3 * C * 4);
    run(ctx, sh, dt, qa, dy, ya, ga, 1);
    run(ctx, sh, dt, qb, dy, yb, gb, 1);
    run(ctx, sh, dt, qa, dy, y, g, 1);
    CHECK(same_bits(y, ya, T * C) && same_bits(g, ga, T * 3 * C), "%s: a second identical run differs", dt_name(dt));
    run(ctx, sh, dt, qa, NULL, y, NULL, 0);
    CHECK(same_bits(y, ya, T * C), "%s: the forward without saved state differs from the one with it", dt_name(dt));

    f8_memory_report m0, m1;
    CHECK_OK(ctx, f8_ctx_memory(ctx, &m0));
    f8_attention *a = att_new(ctx, sh, dt);
    f8_attention_saved *s1 = NULL, *s2 = NULL;
    CHECK_OK(ctx, f8_attention_saved_create(a, &s1));
    CHECK_OK(ctx, f8_attention_saved_create(a, &s2));
    CHECK_OK(ctx, f8_ctx_memory(ctx, &m1));
    /* L (FP32 per row and head, 256-aligned) and the copy of y: O(T·C), no S² */
    const size_t lse_bytes = ((size_t)(sh.B * sh.S * sh.nh) * 4 + 255) / 256 * 256;
    const size_t p_bytes = lse_bytes + (size_t)(sh.B * sh.S * sh.nh * sh.hd) * es;
    CHECK(m1.bytes[F8_MEM_SAVED_ACTIVATIONS] - m0.bytes[F8_MEM_SAVED_ACTIVATIONS] == 2 * p_bytes,
          "%s: two saved states added %zu saved-activation bytes, expected 2 x %zu", dt_name(dt),
          m1.bytes[F8_MEM_SAVED_ACTIVATIONS] - m0.bytes[F8_MEM_SAVED_ACTIVATIONS], p_bytes);

    void *da = dev_put(ctx, qa, T * 3 * C, dt), *db = dev_put(ctx, qb, T * 3 * C, dt), *ddy = dev_put(ctx, dy, T * C, dt);
    void *dyo = dev_put(ctx, NULL, T * C, dt), *dgo = dev_put(ctx, NULL, T * 3 * C, dt);
    f8_tensor ta = f8_tensor_make(da, dt, 12, 24), tb = f8_tensor_make(db, dt, 12, 24), tdy = f8_tensor_make(ddy, dt, 12, 8);
    f8_tensor ty = f8_tensor_make(dyo, dt, 12, 8), tg = f8_tensor_make(dgo, dt, 12, 24);
    const uint64_t l0 = counter(ctx, 0), a0 = counter(ctx, 1), f0 = counter(ctx, 2);
    CHECK_OK(ctx, f8_attention_forward(a, &ta, 2, 6, &ty, s1));
    CHECK_OK(ctx, f8_attention_forward(a, &tb, 2, 6, &ty, s2));
    dev_get(ctx, dyo, T * C, dt, y);
    CHECK(same_bits(y, yb, T * C), "%s: y of the second forward differs", dt_name(dt));
    CHECK_OK(ctx, f8_attention_backward(a, s2, &tdy, &tg));
    dev_get(ctx, dgo, T * 3 * C, dt, g);
    CHECK(same_bits(g, gb, T * 3 * C), "%s: backward of the later saved state (in flight) differs", dt_name(dt));
    CHECK_OK(ctx, f8_attention_backward(a, s1, &tdy, &tg));
    dev_get(ctx, dgo, T * 3 * C, dt, g);
    CHECK(same_bits(g, ga, T * 3 * C), "%s: backward of the earlier saved state (in flight) differs", dt_name(dt));
    CHECK_OK(ctx, f8_attention_backward(a, s1, &tdy, &tg));
    dev_get(ctx, dgo, T * 3 * C, dt, g);
    CHECK(same_bits(g, ga, T * 3 * C), "%s: a saved state used for a second backward differs", dt_name(dt));
    CHECK(counter(ctx, 0) - l0 == 5, "%s: 2 forwards + 3 backwards counted %llu launches, expected 5 (one per op)",
          dt_name(dt), (unsigned long long)(counter(ctx, 0) - l0));
    CHECK(counter(ctx, 1) == a0 && counter(ctx, 2) == f0, "%s: forward/backward allocated or freed backend memory",
          dt_name(dt));
    /* Zero tokens: valid, nothing issued, and the backward of it too. */
    const uint64_t l1 = counter(ctx, 0);
    f8_tensor e3 = f8_tensor_make(NULL, dt, 0, 24), e1 = f8_tensor_make(NULL, dt, 0, 8);
    CHECK_OK(ctx, f8_attention_forward(a, &e3, 0, 6, &e1, s1));
    CHECK_OK(ctx, f8_attention_backward(a, s1, &e1, &e3));
    CHECK_OK(ctx, f8_attention_forward(a, &e3, 2, 0, &e1, NULL));
    CHECK(counter(ctx, 0) == l1, "%s: zero-token calls issued work", dt_name(dt));

    f8_attention_saved_destroy(s1);
    f8_attention_saved_destroy(s2);
    f8_attention_destroy(a);
    CHECK_OK(ctx, f8_ctx_memory(ctx, &m1));
    CHECK(m1.bytes[F8_MEM_SAVED_ACTIVATIONS] == m0.bytes[F8_MEM_SAVED_ACTIVATIONS], "%s: saved bytes not returned",
          dt_name(dt));
    f8_ctx_free(ctx, da), f8_ctx_free(ctx, db), f8_ctx_free(ctx, ddy), f8_ctx_free(ctx, dyo), f8_ctx_free(ctx, dgo);
    free(qa), free(qb), free(dy), free(ya), free(ga), free(yb), free(gb), free(y), free(g);
}

/* Bad arguments: the status, a message, and nothing written or counted. */
static void test_bad_arguments(f8_ctx *ctx)
{
    const f8_dtype dt = F8_DTYPE_FP32;
    f8_attention *a = NULL;
    f8_attention_config cfg = f8_attention_config_default(2, 4, 2, 8);
    CHECK(cfg.dtype == F8_DTYPE_BF16 && cfg.n_head == 2 && cfg.head_dim == 4 && cfg.max_batch == 2 && cfg.max_seq == 8,
          "config default: BF16 and the given sizes");
    cfg.dtype = dt;
    f8_attention_config bad = cfg;
    bad.n_head = 0;
    CHECK_STATUS(ctx, f8_attention_create(ctx, &bad, &a), F8_ERR_SHAPE);
    CHECK(a == NULL, "failed create left an object");
    bad = cfg;
    bad.head_dim = -1;
    CHECK_STATUS(ctx, f8_attention_create(ctx, &bad, &a), F8_ERR_SHAPE);
    bad = cfg;
    bad.max_seq = 0;
    CHECK_STATUS(ctx, f8_attention_create(ctx, &bad, &a), F8_ERR_SHAPE);
    bad = cfg;
    bad.max_batch = 1 << 20;
    bad.max_seq = 1 << 20; /* 2^40 tokens: a saved state of ~2^45 bytes, over the 2^40 limit */
    CHECK_STATUS(ctx, f8_attention_create(ctx, &bad, &a), F8_ERR_SHAPE);
    bad = cfg;
    bad.dtype = F8_DTYPE_E4M3;
    CHECK_STATUS(ctx, f8_attention_create(ctx, &bad, &a), F8_ERR_DTYPE);
    CHECK(strstr(f8_ctx_last_error(ctx), "dtype") != NULL, "dtype message: %s", f8_ctx_last_error(ctx));
    CHECK_STATUS(ctx, f8_attention_create(ctx, NULL, &a), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_attention_create(ctx, &cfg, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(NULL, f8_attention_create(NULL, &cfg, &a), F8_ERR_INVALID_ARGUMENT);
    CHECK_OK(ctx, f8_attention_create(ctx, &cfg, &a));
    f8_attention *other = NULL;
    CHECK_OK(ctx, f8_attention_create(ctx, &cfg, &other));
    f8_attention_saved *s = NULL, *so = NULL;
    CHECK_STATUS(ctx, f8_attention_saved_create(a, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(NULL, f8_attention_saved_create(NULL, &s), F8_ERR_INVALID_ARGUMENT);
    CHECK_OK(ctx, f8_attention_saved_create(a, &s));
    CHECK_OK(ctx, f8_attention_saved_create(other, &so));

    const size_t T = 2 * 5, C = 8;
    test_rng r = {3};
    float *qkv = rand_vec(&r, T * 3 * C, 1.0, dt);
    void *dq = dev_put(ctx, qkv, T * 3 * C, dt), *dyo = dev_put(ctx, NULL, T * C, dt), *dgo = dev_put(ctx, NULL, T * 3 * C, dt);
    void *ddy = dev_put(ctx, qkv, T * C, dt);
    f8_tensor tq = f8_tensor_make(dq, dt, 10, 24), ty = f8_tensor_make(dyo, dt, 10, 8), tg = f8_tensor_make(dgo, dt, 10, 24);
    f8_tensor tdy = f8_tensor_make(ddy, dt, 10, 8);
    const uint64_t l0 = counter(ctx, 0);

    CHECK_STATUS(NULL, f8_attention_forward(NULL, &tq, 2, 5, &ty, s), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_attention_forward(a, NULL, 2, 5, &ty, s), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_attention_forward(a, &tq, 2, 5, NULL, s), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_attention_forward(a, &tq, 3, 5, &ty, s), F8_ERR_SHAPE); /* batch > max_batch */
    CHECK(strstr(f8_ctx_last_error(ctx), "max_batch") != NULL, "batch message: %s", f8_ctx_last_error(ctx));
    CHECK_STATUS(ctx, f8_attention_forward(a, &tq, 1, 10, &ty, s), F8_ERR_SHAPE); /* seq > max_seq */
    CHECK_STATUS(ctx, f8_attention_forward(a, &tq, -1, 5, &ty, s), F8_ERR_SHAPE);
    CHECK_STATUS(ctx, f8_attention_forward(a, &tq, 1, 5, &ty, s), F8_ERR_SHAPE); /* qkv rows != B·S */
    CHECK(strstr(f8_ctx_last_error(ctx), "qkv") != NULL, "qkv message: %s", f8_ctx_last_error(ctx));
    f8_tensor w = tq;
    w.cols = 16;
    CHECK_STATUS(ctx, f8_attention_forward(a, &w, 2, 5, &ty, s), F8_ERR_SHAPE);
    w = ty;
    w.cols = 24;
    CHECK_STATUS(ctx, f8_attention_forward(a, &tq, 2, 5, &w, s), F8_ERR_SHAPE);
    w = tq;
    w.dtype = F8_DTYPE_BF16;
    CHECK_STATUS(ctx, f8_attention_forward(a, &w, 2, 5, &ty, s), F8_ERR_DTYPE);
    w = tq;
    w.data = NULL;
    CHECK_STATUS(ctx, f8_attention_forward(a, &w, 2, 5, &ty, s), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_attention_forward(a, &tq, 2, 5, &ty, so), F8_ERR_INVALID_ARGUMENT); /* another's saved */
    f8_tensor alias = f8_tensor_make((float *)dq + 8, dt, 10, 8); /* y inside qkv */
    CHECK_STATUS(ctx, f8_attention_forward(a, &tq, 2, 5, &alias, s), F8_ERR_INVALID_ARGUMENT);
    CHECK(strstr(f8_ctx_last_error(ctx), "overlaps") != NULL, "overlap message: %s", f8_ctx_last_error(ctx));

    /* backward before any forward into s, then with bad tensors */
    CHECK_STATUS(ctx, f8_attention_backward(a, s, &tdy, &tg), F8_ERR_STATE);
    CHECK_STATUS(ctx, f8_attention_backward(a, NULL, &tdy, &tg), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_attention_backward(a, so, &tdy, &tg), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(NULL, f8_attention_backward(NULL, s, &tdy, &tg), F8_ERR_INVALID_ARGUMENT);
    CHECK(counter(ctx, 0) == l0, "failed calls issued work");
    float *yh = (float *)xmalloc(T * 3 * C * 4), *sent = (float *)xmalloc(T * 3 * C * 4);
    memset(sent, 0x5A, T * 3 * C * 4);
    dev_get(ctx, dyo, T * C, dt, yh);
    CHECK(memcmp(yh, sent, T * C * 4) == 0, "a failed forward wrote y");

    CHECK_OK(ctx, f8_attention_forward(a, &tq, 2, 5, &ty, s));
    const uint64_t l1 = counter(ctx, 0);
    w = tdy;
    w.rows = 9;
    CHECK_STATUS(ctx, f8_attention_backward(a, s, &w, &tg), F8_ERR_SHAPE);
    w = tg;
    w.cols = 8;
    CHECK_STATUS(ctx, f8_attention_backward(a, s, &tdy, &w), F8_ERR_SHAPE);
    w = tg;
    w.dtype = F8_DTYPE_BF16;
    CHECK_STATUS(ctx, f8_attention_backward(a, s, &tdy, &w), F8_ERR_DTYPE);
    CHECK_STATUS(ctx, f8_attention_backward(a, s, &tdy, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_attention_backward(a, s, &tdy, &tq), F8_ERR_INVALID_ARGUMENT); /* dqkv = qkv */
    f8_tensor gal = f8_tensor_make(ddy, dt, 10, 24);
    CHECK_STATUS(ctx, f8_attention_backward(a, s, &tdy, &gal), F8_ERR_INVALID_ARGUMENT); /* dqkv over dy */
    CHECK(counter(ctx, 0) == l1, "failed backward calls issued work");
    dev_get(ctx, dgo, T * 3 * C, dt, yh);
    CHECK(memcmp(yh, sent, T * 3 * C * 4) == 0, "a failed backward wrote dqkv");
    CHECK_OK(ctx, f8_attention_backward(a, s, &tdy, &tg));

    f8_attention_destroy(NULL);
    f8_attention_saved_destroy(NULL);
    f8_attention_saved_destroy(s);
    f8_attention_destroy(a);
    f8_attention_destroy(other); /* before its saved state: allowed */
    f8_attention_saved_destroy(so);
    f8_ctx_free(ctx, dq), f8_ctx_free(ctx, dyo), f8_ctx_free(ctx, dgo), f8_ctx_free(ctx, ddy);
    free(qkv), free(yh), free(sent);
}

/* Forward + backward captured after a warm-up, replayed over new inputs:
 * bitwise the eager result; the capture itself issues no work; creating an
 * object during the capture is refused and spoils it, destroying one spoils it. */
static void test_graph(f8_ctx *ctx, f8_dtype dt)
{
    const shape sh = {2, 7, 3, 4};
    const size_t T = 14, C = 12;
    test_rng r = {99};
    f8_attention *a = att_new(ctx, sh, dt);
    f8_attention_saved *s = NULL;
    CHECK_OK(ctx, f8_attention_saved_create(a, &s));
    float *q0 = rand_vec(&r, T * 3 * C, 1.0, dt), *q1 = rand_vec(&r, T * 3 * C, 1.0, dt), *dy = rand_vec(&r, T * C, 1.0, dt);
    void *dq = dev_put(ctx, q0, T * 3 * C, dt), *ddy = dev_put(ctx, dy, T * C, dt);
    void *dyo = dev_put(ctx, NULL, T * C, dt), *dgo = dev_put(ctx, NULL, T * 3 * C, dt);
    f8_tensor tq = f8_tensor_make(dq, dt, 14, 36), ty = f8_tensor_make(dyo, dt, 14, 12);
    f8_tensor tdy = f8_tensor_make(ddy, dt, 14, 12), tg = f8_tensor_make(dgo, dt, 14, 36);
    CHECK_OK(ctx, f8_attention_forward(a, &tq, 2, 7, &ty, s)); /* warm-up */
    CHECK_OK(ctx, f8_attention_backward(a, s, &tdy, &tg));

    f8_graph *g = NULL;
    const uint64_t l0 = counter(ctx, 0);
    CHECK_OK(ctx, f8_graph_begin(ctx));
    CHECK_OK(ctx, f8_attention_forward(a, &tq, 2, 7, &ty, s));
    CHECK_OK(ctx, f8_attention_backward(a, s, &tdy, &tg));
    f8_status st = f8_graph_end(ctx, &g);
    CHECK(st == F8_OK, "%s graph: f8_graph_end -> %s: %s", dt_name(dt), f8_status_string(st), f8_ctx_last_error(ctx));
    CHECK(counter(ctx, 0) == l0, "%s graph: the capture issued work", dt_name(dt));

    /* Poison the outputs, put new inputs in the captured buffers, replay. */
    float *y = (float *)xmalloc(T * C * 4), *gr = (float *)xmalloc(T * 3 * C * 4);
    float *ye = (float *)xmalloc(T * C * 4), *ge = (float *)xmalloc(T * 3 * C * 4);
    run(ctx, sh, dt, q1, dy, ye, ge, 1);
    if (g) {
        void *p1 = dev_put(ctx, q1, T * 3 * C, dt);
        CHECK_OK(ctx, f8_ctx_copy(ctx, dq, p1, T * 3 * C * f8_dtype_size(dt)));
        void *poison = dev_put(ctx, NULL, T * 3 * C, dt);
        CHECK_OK(ctx, f8_ctx_copy(ctx, dyo, poison, T * C * f8_dtype_size(dt)));
        CHECK_OK(ctx, f8_ctx_copy(ctx, dgo, poison, T * 3 * C * f8_dtype_size(dt)));
        CHECK_OK(ctx, f8_graph_replay(g));
        dev_get(ctx, dyo, T * C, dt, y);
        dev_get(ctx, dgo, T * 3 * C, dt, gr);
        CHECK(same_bits(y, ye, T * C), "%s graph: replayed y differs from the eager forward", dt_name(dt));
        CHECK(same_bits(gr, ge, T * 3 * C), "%s graph: replayed dqkv differs from the eager backward", dt_name(dt));
        f8_ctx_free(ctx, p1);
        f8_ctx_free(ctx, poison);
        f8_graph_destroy(g);
    }

    /* Creating objects while capturing is refused and spoils the capture. */
    CHECK_OK(ctx, f8_graph_begin(ctx));
    f8_attention *late = NULL;
    f8_attention_saved *late_s = NULL;
    f8_attention_config cfg = f8_attention_config_default(3, 4, 2, 7);
    cfg.dtype = dt;
    CHECK_STATUS(ctx, f8_attention_create(ctx, &cfg, &late), F8_ERR_STATE);
    CHECK_STATUS(ctx, f8_attention_saved_create(a, &late_s), F8_ERR_STATE);
    g = NULL;
    CHECK_STATUS(ctx, f8_graph_end(ctx, &g), F8_ERR_STATE);
    CHECK(g == NULL && late == NULL && late_s == NULL, "%s graph: a spoiled capture left objects", dt_name(dt));
    /* So is destroying one. */
    f8_attention *doomed = att_new(ctx, sh, dt);
    CHECK_OK(ctx, f8_graph_begin(ctx));
    f8_attention_destroy(doomed);
    CHECK_STATUS(ctx, f8_graph_end(ctx, &g), F8_ERR_STATE);
    CHECK(g == NULL, "%s graph: a capture spoiled by a destroy gave a graph", dt_name(dt));

    f8_ctx_free(ctx, dq), f8_ctx_free(ctx, ddy), f8_ctx_free(ctx, dyo), f8_ctx_free(ctx, dgo);
    f8_attention_saved_destroy(s);
    f8_attention_destroy(a);
    free(q0), free(q1), free(dy), free(y), free(gr), free(ye), free(ge);
}

/* output_kept: the backward reads the caller's y instead of a saved copy.
 * Same y and dqkv bit for bit as with the copy; the saved state is L alone;
 * the backward really reads y (a changed y changes dqkv: the caller's promise
 * matters); dqkv over y is refused; output_kept outside {0, 1} is refused. */
static void test_output_kept(f8_ctx *ctx, f8_dtype dt)
{
    const shape sh = {2, 37, 3, 16};
    const size_t T = (size_t)sh_T(sh), C = (size_t)sh_C(sh);
    test_rng r = {77};
    float *qkv = rand_vec(&r, T * 3 * C, 1.0, dt), *dy = rand_vec(&r, T * C, 1.0, dt);
    float *y[2], *g[2];
    for (int k = 0; k < 2; k++) {
        y[k] = (float *)xmalloc(T * C * sizeof(float));
        g[k] = (float *)xmalloc(T * 3 * C * sizeof(float));
        g_kept = k;
        run(ctx, sh, dt, qkv, dy, y[k], g[k], 1);
    }
    g_kept = 0;
    CHECK(memcmp(y[0], y[1], T * C * sizeof(float)) == 0, "%s: output_kept changed y", dt_name(dt));
    CHECK(memcmp(g[0], g[1], T * 3 * C * sizeof(float)) == 0, "%s: output_kept changed dqkv", dt_name(dt));

    /* the saved state's bytes: L and y's copy, then L alone */
    f8_attention *a[2];
    f8_attention_saved *s[2];
    size_t used[2];
    for (int k = 0; k < 2; k++) {
        f8_memory_report m0, m1;
        g_kept = k;
        a[k] = att_new(ctx, sh, dt);
        CHECK_OK(ctx, f8_ctx_memory(ctx, &m0));
        CHECK_OK(ctx, f8_attention_saved_create(a[k], &s[k]));
        CHECK_OK(ctx, f8_ctx_memory(ctx, &m1));
        used[k] = m1.total - m0.total;
    }
    g_kept = 0;
    CHECK(used[0] >= used[1] + T * C * f8_dtype_size(dt) && used[1] >= T * (size_t)sh.nh * 4,
          "%s: saved state %zu bytes with the copy, %zu without (y is %zu bytes)", dt_name(dt), used[0], used[1],
          T * C * f8_dtype_size(dt));

    /* the kept backward reads y: another y after the forward changes dqkv; dqkv over y is refused */
    void *dq = dev_put(ctx, qkv, T * 3 * C, dt), *ddy = dev_put(ctx, dy, T * C, dt);
    void *dyo = dev_put(ctx, NULL, 4 * T * C, dt), *dg = dev_put(ctx, NULL, T * 3 * C, dt);
    f8_tensor tq = f8_tensor_make(dq, dt, (int64_t)T, (int64_t)(3 * C)), ty = f8_tensor_make(dyo, dt, (int64_t)T, (int64_t)C);
    f8_tensor tdy = f8_tensor_make(ddy, dt, (int64_t)T, (int64_t)C), tg = f8_tensor_make(dg, dt, (int64_t)T, (int64_t)(3 * C));
    CHECK_OK(ctx, f8_attention_forward(a[1], &tq, sh.B, sh.S, &ty, s[1]));
    void *junk = dev_put(ctx, NULL, T * C, dt); /* 0x5A bytes: another y */
    CHECK_OK(ctx, f8_ctx_copy(ctx, dyo, junk, T * C * f8_dtype_size(dt)));
    f8_ctx_free(ctx, junk);
    CHECK_OK(ctx, f8_attention_backward(a[1], s[1], &tdy, &tg));
    float *gz = (float *)xmalloc(T * 3 * C * sizeof(float));
    dev_get(ctx, dg, T * 3 * C, dt, gz);
    CHECK(memcmp(gz, g[1], T * 3 * C * sizeof(float)) != 0, "%s: the kept backward did not read y", dt_name(dt));
    f8_tensor over = f8_tensor_make(dyo, dt, (int64_t)T, (int64_t)(3 * C)); /* starts at y */
    CHECK(f8_attention_backward(a[1], s[1], &tdy, &over) == F8_ERR_INVALID_ARGUMENT, "%s: dqkv over the kept y",
          dt_name(dt));
    f8_attention_config bad = f8_attention_config_default(sh.nh, sh.hd, sh.B, sh.S);
    bad.output_kept = 2;
    f8_attention *b = NULL;
    CHECK(f8_attention_create(ctx, &bad, &b) == F8_ERR_INVALID_ARGUMENT && b == NULL, "output_kept 2 accepted");
    void *bufs[] = {dq, ddy, dyo, dg};
    for (int k = 0; k < 4; k++) f8_ctx_free(ctx, bufs[k]);
    for (int k = 0; k < 2; k++) {
        f8_attention_saved_destroy(s[k]);
        f8_attention_destroy(a[k]);
        free(y[k]);
        free(g[k]);
    }
    free(gz);
    free(qkv);
    free(dy);
}

int main(void)
{
    char why[256] = "";
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, NULL, why);
    if (!ctx) {
        fprintf(stderr, "test_attention: cannot create the CPU ctx: %s\n", why);
        return 1;
    }
    test_reference_fd();
    for (int k = 0; k < 2; k++) {
        const f8_dtype dt = k ? F8_DTYPE_BF16 : F8_DTYPE_FP32;
        test_reference(ctx, dt);
        test_structure(ctx, dt);
        test_single_token(ctx, dt);
        test_saved_and_counters(ctx, dt);
        test_graph(ctx, dt);
    }
    test_library_fd(ctx);
    test_bad_arguments(ctx);
    for (int k = 0; k < 2; k++) test_output_kept(ctx, k ? F8_DTYPE_BF16 : F8_DTYPE_FP32);
    f8_ctx_destroy(ctx);
    return test_finish("test_attention");
}
