/*
 * test_cuda_modules_workspace.c — on each backend, the workspace regression
 * of TE's PR #820 for the LayerNormLinear weight and both LayerNormMLP
 * weights (FIRST, a scale update, NOT_FIRST: the workspaces' codes and
 * scale_inv stay, and y and the gradients match a float64 oracle built from
 * the downloaded dequantized workspaces). The module pair, the helpers and
 * the tolerances are in cuda_modules_tests.h; the CUDA-against-CPU module
 * tests in test_cuda_modules.c.
 * Without a GPU the program reports itself skipped.
 */
#include "cuda_modules_tests.h"

/* ------------------------------------------------------------------------ */
/* The workspace regression (#820) on one backend, against float64           */
/* ------------------------------------------------------------------------ */

static double qdq(double v, float scale, f8_dtype dt)
{
    return (double)(f8_fp8_to_float(f8_fp8_from_float((float)v * scale, dt), dt) * (1.0f / scale));
}

/* float64 act (base function on a) and its derivative. */
static double act_ref(f8_activation act, double x, double *deriv)
{
    const double k = 0.79788456, c = 0.044715;
    switch (act) {
    case F8_ACT_GELU:
    case F8_ACT_GEGLU: {
        double t = tanh(k * (x + c * x * x * x));
        *deriv = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x);
        return 0.5 * x * (1 + t);
    }
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
    case F8_ACT_SRELU:
        *deriv = x > 0 ? 2 * x : 0.0;
        return x > 0 ? x * x : 0.0;
    default:
        *deriv = x > 0 ? 1.0 : 0.0;
        return x > 0 ? x : 0.0;
    }
}

/* The float64 norm of x [T, K] (LayerNorm, gamma g, beta b): ln, and the
 * statistics the backward needs. */
static void ref_norm(const float *x, int64_t T, int64_t K, const float *g, const float *b, double eps, double *ln,
                     double *mu, double *rs)
{
    for (int64_t t = 0; t < T; t++) {
        double s = 0, q = 0;
        for (int64_t k = 0; k < K; k++) s += x[t * K + k];
        mu[t] = s / (double)K;
        for (int64_t k = 0; k < K; k++) q += (x[t * K + k] - mu[t]) * (x[t * K + k] - mu[t]);
        rs[t] = 1 / sqrt(q / (double)K + eps);
        for (int64_t k = 0; k < K; k++) ln[t * K + k] = (x[t * K + k] - mu[t]) * rs[t] * g[k] + b[k];
    }
}

/* dx of the LayerNorm from dln (float64). */
static void ref_norm_bwd(const float *x, int64_t T, int64_t K, const float *g, const double *mu, const double *rs,
                         const double *dln, double *dx)
{
    for (int64_t t = 0; t < T; t++) {
        double m1 = 0, m2 = 0;
        for (int64_t k = 0; k < K; k++) {
            double xh = (x[t * K + k] - mu[t]) * rs[t], gd = g[k] * dln[t * K + k];
            m1 += gd, m2 += gd * xh;
        }
        m1 /= (double)K, m2 /= (double)K;
        for (int64_t k = 0; k < K; k++) {
            double xh = (x[t * K + k] - mu[t]) * rs[t], gd = g[k] * dln[t * K + k];
            dx[t * K + k] = rs[t] * (gd - m1 - xh * m2);
        }
    }
}

/* D[m, n] = Σ_k A[m, k]·B[n, k] (+ bias[n]), float64. */
static void ref_gemm(const double *a, const double *b, const float *bias, int64_t M, int64_t N, int64_t K, double *d)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double acc = bias ? bias[n] : 0.0;
            for (int64_t k = 0; k < K; k++) acc += a[m * K + k] * b[n * K + k];
            d[m * N + n] = acc;
        }
}

static double *transposed(const double *a, int64_t R, int64_t C)
{
    double *t = xmalloc((size_t)(R * C) * sizeof(double) + 8);
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) t[c * R + r] = a[r * C + c];
    return t;
}

static float slot_state(f8_ctx *ctx, mpair *p, int i, int dir, int k, float *amax0)
{
    f8_slot slot;
    float s = 0, h[HISTORY_LEN] = {0};
    CHECK_OK(ctx, mod_slot(p, i, dir, k, &slot));
    CHECK_OK(ctx, f8_slot_read(ctx, slot, &s, NULL, h));
    if (amax0) *amax0 = h[0];
    return s;
}

static const f8_qtensor *mod_workspace(mpair *p, int i, int w)
{
    return p->mc.mlp ? f8_module_weight_workspace(p->mlp[i], (w) ? F8_PARAM_FC2_WEIGHT : F8_PARAM_FC1_WEIGHT) : f8_module_weight_workspace(p->lnl[i], F8_PARAM_WEIGHT);
}

/* A workspace's codes, its scale_inv and its dequantization (FP32, through
 * f8_qtensor_dequantize, checked to be code · own scale_inv). */
static float workspace_read(env *e, f8_ctx *ctx, const f8_qtensor *ws, uint8_t *codes, double *deq)
{
    f8_tensor v;
    float sinv = 0;
    CHECK_OK(ctx, f8_qtensor_data(ws, &v));
    const size_t n = (size_t)(v.rows * v.cols);
    CHECK_OK(ctx, f8_ctx_download(ctx, codes, v.data, n));
    CHECK_OK(ctx, f8_ctx_download(ctx, &sinv, v.scale_inv, sizeof sinv));
    if (deq) {
        f8_tensor d = f8_tensor_make(balloc(ctx, n * 4), F8_DTYPE_FP32, v.rows, v.cols);
        CHECK_OK(ctx, f8_qtensor_dequantize(ws, &d));
        float *h = to_host(ctx, &d);
        int exact = 1;
        for (size_t i = 0; i < n; i++) {
            exact &= h[i] == f8_fp8_to_float(codes[i], v.dtype) * sinv;
            deq[i] = h[i];
        }
        CHECK(exact, "dequantize is not code · own scale_inv");
        free(h);
        f8_ctx_free(ctx, d.data);
    }
    (void)e;
    return sinv;
}

static void check_ref(env *e, const char *who, const char *what, const float *got, const double *ref, size_t n,
                      double tol)
{
    double err = n ? rel_error(got, ref, n) : 0.0;
    note(e, C_ORACLE, err, tol);
    CHECK(err <= tol, "%s: regression %s vs float64 oracle: %.3g > %.0e", who, what, err, tol);
}

/* FIRST fills the workspaces with the weight slots' scales; the recipe then
 * moves on (updates, and every weight slot's scale set to a quarter); a
 * NOT_FIRST microbatch must reuse the workspaces untouched, with their own
 * scale_invs, in y and in the backward. */
static void workspace_regression(env *e, int which, int mlp)
{
    const char *who = mlp ? (which == CPU ? "cpu mlp" : "cuda mlp") : (which == CPU ? "cpu lnlinear" : "cuda lnlinear");
    f8_ctx *ctx = e->ctx[which];
    const int64_t T = 64, K = 128, N = 96; /* MLP: H = K, F = N */
    const f8_activation act = F8_ACT_GELU;
    mpair p;
    memset(&p, 0, sizeof p);
    p.mc = (mcase){mlp, T, K, N, 1, F8_DTYPE_FP32, F8_DTYPE_FP32, F8_DTYPE_FP32, F8_NORM_LAYERNORM, 0, 0, act, 0, 0, 0};
    f8_param ps[8];
    const int np = mod_params(&p, ps);
    float *pv[8];
    for (int k = 0; k < np; k++) pv[k] = NULL;
    if (mlp) {
        f8_layernorm_mlp_config c = f8_layernorm_mlp_config_default(K, N);
        c.activation = act, c.max_tokens = T;
        if (f8_layernorm_mlp_create(ctx, &c, &p.mlp[which]) != F8_OK ||
            f8_module_saved_create(p.mlp[which], &p.mlp_saved[which]) != F8_OK)
            die("f8_layernorm_mlp_create", ctx);
    } else {
        f8_layernorm_linear_config c = f8_layernorm_linear_config_default(K, N);
        c.max_tokens = T;
        if (f8_layernorm_linear_create(ctx, &c, &p.lnl[which]) != F8_OK ||
            f8_module_saved_create(p.lnl[which], &p.lnl_saved[which]) != F8_OK)
            die("f8_layernorm_linear_create", ctx);
    }
    /* non-trivial norm and bias parameters, kept on the host for the oracle */
    for (int k = 0; k < np; k++) {
        f8_tensor v;
        CHECK_OK(ctx, mod_param(&p, which, ps[k], 0, &v));
        const size_t n = (size_t)(v.rows * v.cols);
        pv[k] = xmalloc(n * 4 + 4);
        if (param_quantity(ps[k]) == Q_W || param_quantity(ps[k]) == Q_W2) continue; /* the oracle uses the workspace */
        const double mean = ps[k] == F8_PARAM_LN_WEIGHT ? 1.0 : 0.0;
        void *h = gen(&e->rng, F8_DTYPE_FP32, n, mean, ps[k] == F8_PARAM_LN_WEIGHT || ps[k] == F8_PARAM_LN_BIAS ? 0.2 : 0.1, pv[k]);
        upload(ctx, v.data, h, n * 4);
        free(h);
    }
    const float *gamma = NULL, *beta = NULL, *b1 = NULL, *b2 = NULL;
    for (int k = 0; k < np; k++) {
        if (ps[k] == F8_PARAM_LN_WEIGHT) gamma = pv[k];
        if (ps[k] == F8_PARAM_LN_BIAS) beta = pv[k];
        if (ps[k] == F8_PARAM_BIAS || ps[k] == F8_PARAM_FC1_BIAS) b1 = pv[k];
        if (ps[k] == F8_PARAM_FC2_BIAS) b2 = pv[k];
    }
    const int64_t O = mlp ? K : N, F1 = N; /* gelu: not gated */
    float *hx = xmalloc((size_t)(T * K) * 4), *hdy = xmalloc((size_t)(T * O) * 4);
    free(gen(&e->rng, F8_DTYPE_FP32, (size_t)(T * K), 0.0, 1.0, hx));
    free(gen(&e->rng, F8_DTYPE_FP32, (size_t)(T * O), 0.0, 1.0, hdy));
    f8_tensor x = f8_tensor_make(balloc(ctx, (size_t)(T * K) * 4), F8_DTYPE_FP32, T, K);
    f8_tensor y = f8_tensor_make(balloc(ctx, (size_t)(T * O) * 4), F8_DTYPE_FP32, T, O);
    f8_tensor dy = f8_tensor_make(balloc(ctx, (size_t)(T * O) * 4), F8_DTYPE_FP32, T, O);
    f8_tensor dx = f8_tensor_make(balloc(ctx, (size_t)(T * K) * 4), F8_DTYPE_FP32, T, K);
    upload(ctx, x.data, hx, (size_t)(T * K) * 4);
    upload(ctx, dy.data, hdy, (size_t)(T * O) * 4);

    const int nw = mlp ? 2 : 1, wslot[2] = {1, 4};
    /* An inference step and an update give the weight slots amax-based scales. */
    if (mlp) CHECK_OK(ctx, f8_module_forward(p.mlp[which], &x, &y, F8_MICROBATCH_NONE, NULL));
    else CHECK_OK(ctx, f8_layernorm_linear_forward(p.lnl[which], &x, &y, NULL, F8_MICROBATCH_NONE, NULL));
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));

    float s_cast[2], sinv1[2], sinv2[2];
    uint8_t *codes1[2] = {NULL, NULL}, *codes2[2] = {NULL, NULL};
    double *wdq[2] = {NULL, NULL};
    int64_t wn[2] = {mlp ? F1 * K : N * K, K * N};
    for (int w = 0; w < nw; w++) s_cast[w] = slot_state(ctx, &p, which, 0, wslot[w], NULL);
    CHECK_OK(ctx, mod_forward(&p, which, &x, &y, NULL, F8_MICROBATCH_FIRST));
    CHECK_OK(ctx, mod_backward(&p, which, &dy, NULL, &dx));
    for (int w = 0; w < nw; w++) {
        codes1[w] = xmalloc((size_t)wn[w]), codes2[w] = xmalloc((size_t)wn[w]);
        wdq[w] = xmalloc((size_t)wn[w] * sizeof(double));
        sinv1[w] = workspace_read(e, ctx, mod_workspace(&p, which, w), codes1[w], NULL);
        CHECK(sinv1[w] == 1.0f / s_cast[w], "%s: workspace %d scale_inv %.9g, want 1/%.9g", who, w, sinv1[w], s_cast[w]);
    }
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_BACKWARD));
    float s_new[2];
    for (int w = 0; w < nw; w++) {
        f8_slot ws;
        CHECK_OK(ctx, mod_slot(&p, which, 0, wslot[w], &ws));
        s_new[w] = s_cast[w] * 0.25f;
        CHECK_OK(ctx, f8_slot_write(ctx, ws, s_new[w], 1.0f / s_new[w], NULL));
    }
    CHECK_OK(ctx, mlp ? f8_module_zero_grad(p.mlp[which]) : f8_module_zero_grad(p.lnl[which]));

    /* mb2: NOT_FIRST on the same input; the scales each cast will use */
    const float s_in = slot_state(ctx, &p, which, 0, 0, NULL), s_in2 = mlp ? slot_state(ctx, &p, which, 0, 3, NULL) : 0;
    CHECK_OK(ctx, mod_forward(&p, which, &x, &y, NULL, F8_MICROBATCH_NOT_FIRST));
    const float s_g = slot_state(ctx, &p, which, 1, 0, NULL), s_g2 = mlp ? slot_state(ctx, &p, which, 1, 2, NULL) : 0;
    CHECK_OK(ctx, mod_backward(&p, which, &dy, NULL, &dx));
    for (int w = 0; w < nw; w++) {
        float amax_w;
        float s_now = slot_state(ctx, &p, which, 0, wslot[w], &amax_w);
        CHECK(s_now == s_new[w], "%s: weight %d slot scale %.9g, written %.9g", who, w, s_now, s_new[w]);
        CHECK(amax_w == 0.0f, "%s: NOT_FIRST wrote weight %d's amax (%g)", who, w, amax_w);
        sinv2[w] = workspace_read(e, ctx, mod_workspace(&p, which, w), codes2[w], wdq[w]);
        CHECK(sinv2[w] == sinv1[w] && memcmp(codes1[w], codes2[w], (size_t)wn[w]) == 0,
              "%s: NOT_FIRST changed workspace %d", who, w);
    }

    /* The float64 oracle from the workspaces' own dequantization. */
    const f8_dtype e4 = F8_DTYPE_E4M3, gdt = f8_ctx_slot_dtype(ctx, F8_DIR_BACKWARD);
    const size_t nx = (size_t)(T * K), ny = (size_t)(T * O), nh = (size_t)(T * F1);
    double *ln = xmalloc(nx * 8), *mu = xmalloc((size_t)T * 8), *rs = xmalloc((size_t)T * 8);
    ref_norm(hx, T, K, gamma, beta, 1e-5, ln, mu, rs);
    for (size_t i = 0; i < nx; i++) ln[i] = qdq(ln[i], s_in, e4);
    double *dyq = xmalloc(ny * 8), *ry = xmalloc(ny * 8), *rwrong = xmalloc(ny * 8), *rdln = xmalloc(nx * 8);
    double *rdx = xmalloc(nx * 8);
    for (size_t i = 0; i < ny; i++) dyq[i] = qdq(hdy[i], s_g, gdt);
    float *gy = to_host(ctx, &y), *gdx = to_host(ctx, &dx), *gg[8];
    grads_to_host(e, &p, which, ps, np, gg);
    double *stale_w[2];
    for (int w = 0; w < nw; w++) { /* what the #820 bug would multiply by: the slot's scale_inv */
        const double f = (double)(1.0f / s_new[w]) / (double)sinv1[w];
        stale_w[w] = xmalloc((size_t)wn[w] * 8);
        for (int64_t i = 0; i < wn[w]; i++) stale_w[w][i] = wdq[w][i] * f;
    }
    double ty, tdx, tw1, tw2, tb1;
    double *rdw1 = NULL, *rdw2 = NULL, *rdb1 = xmalloc((size_t)F1 * 8 + 8);
    if (!mlp) {
        ref_gemm(ln, wdq[0], b1, T, N, K, ry);
        ref_gemm(ln, stale_w[0], b1, T, N, K, rwrong);
        double *wt = transposed(wdq[0], N, K); /* [K, N] */
        ref_gemm(dyq, wt, NULL, T, K, N, rdln);
        free(wt);
        double *dyt = transposed(dyq, T, N), *lnt = transposed(ln, T, K);
        rdw1 = xmalloc((size_t)(N * K) * 8);
        ref_gemm(dyt, lnt, NULL, N, K, T, rdw1);
        free(dyt), free(lnt);
        for (int64_t n = 0; n < N; n++) {
            rdb1[n] = 0;
            for (int64_t t = 0; t < T; t++) rdb1[n] += hdy[t * N + n];
        }
        ty = TOL_LNL_Y, tdx = TOL_FP8_SPLIT, tw1 = TOL_LNL_WGRAD, tb1 = TOL_DBIAS, tw2 = 0;
    } else {
        /* forward: h1 = ln·W1ᵀ + b1; a = qdq(gelu(h1)); y = a·W2ᵀ + b2 */
        double *h1 = xmalloc(nh * 8), *a = xmalloc(nh * 8), *d = xmalloc(nh * 8), *da = xmalloc(nh * 8), dv;
        ref_gemm(ln, wdq[0], b1, T, F1, K, h1);
        for (size_t i = 0; i < nh; i++) a[i] = qdq(act_ref(act, h1[i], &dv), s_in2, e4);
        ref_gemm(a, wdq[1], b2, T, K, F1, ry);
        {   /* the stale-scale result, through the same chain */
            double *h1w = xmalloc(nh * 8), *aw = xmalloc(nh * 8);
            ref_gemm(ln, stale_w[0], b1, T, F1, K, h1w);
            for (size_t i = 0; i < nh; i++) aw[i] = qdq(act_ref(act, h1w[i], &dv), s_in2, e4);
            ref_gemm(aw, stale_w[1], b2, T, K, F1, rwrong);
            free(h1w), free(aw);
        }
        /* backward: da = dyq·W2; d = act'(h1)·da; dq = qdq(d); dln = dq·W1 */
        double *w2t = transposed(wdq[1], K, F1), *w1t = transposed(wdq[0], F1, K);
        ref_gemm(dyq, w2t, NULL, T, F1, K, da);
        for (size_t i = 0; i < nh; i++) {
            act_ref(act, h1[i], &dv);
            d[i] = dv * da[i];
        }
        for (int64_t f = 0; f < F1; f++) {
            rdb1[f] = 0;
            for (int64_t t = 0; t < T; t++) rdb1[f] += d[t * F1 + f];
        }
        for (size_t i = 0; i < nh; i++) d[i] = qdq(d[i], s_g2, gdt);
        ref_gemm(d, w1t, NULL, T, K, F1, rdln);
        double *dyt = transposed(dyq, T, K), *at = transposed(a, T, F1), *dt = transposed(d, T, F1);
        double *lnt = transposed(ln, T, K);
        rdw2 = xmalloc((size_t)(K * F1) * 8), rdw1 = xmalloc((size_t)(F1 * K) * 8);
        ref_gemm(dyt, at, NULL, K, F1, T, rdw2);
        ref_gemm(dt, lnt, NULL, F1, K, T, rdw1);
        free(h1), free(a), free(d), free(da), free(w2t), free(w1t), free(dyt), free(at), free(dt), free(lnt);
        ty = tdx = tw1 = tw2 = TOL_MLP_FP8, tb1 = TOL_MLP_DB1;
    }
    ref_norm_bwd(hx, T, K, gamma, mu, rs, rdln, rdx);
    check_ref(e, who, "y", gy, ry, ny, ty);
    double ewrong = rel_error(gy, rwrong, ny);
    CHECK(ewrong > 0.3, "%s: y is also near the stale-scale result (%.3g): the test lost its teeth", who, ewrong);
    check_ref(e, who, "dx", gdx, rdx, nx, tdx);
    for (int k = 0; k < np; k++) {
        const int q = param_quantity(ps[k]);
        if (q == Q_W) check_ref(e, who, mlp ? "fc1 wgrad" : "wgrad", gg[k], rdw1, (size_t)(mlp ? F1 * K : N * K), tw1);
        if (q == Q_W2) check_ref(e, who, "fc2 wgrad", gg[k], rdw2, (size_t)(K * F1), tw2);
        if (q == Q_B) check_ref(e, who, mlp ? "fc1 bias grad" : "bias grad", gg[k], rdb1, (size_t)F1, tb1);
    }

    f8_tensor *bufs[] = {&x, &y, &dy, &dx};
    for (int i = 0; i < NELEM(bufs); i++) f8_ctx_free(ctx, bufs[i]->data);
    for (int w = 0; w < nw; w++) free(codes1[w]), free(codes2[w]), free(wdq[w]), free(stale_w[w]);
    for (int k = 0; k < np; k++) free(pv[k]), free(gg[k]);
    free(hx), free(hdy), free(ln), free(mu), free(rs), free(dyq), free(ry), free(rwrong), free(rdln), free(rdx);
    free(rdw1), free(rdw2), free(rdb1), free(gy), free(gdx);
    mod_destroy(&p);
}

/* The LayerNormLinear, then the LayerNormMLP regression, on the CPU, then
 * the CUDA backend. */
static void test_workspace_regression(env *e)
{
    for (int i = 0; i < 2; i++)
        for (int mlp = 0; mlp < 2; mlp++) workspace_regression(e, i, mlp);
}

int main(void)
{
    static void (*const tests[])(env *) = {test_workspace_regression};
    return modules_run("test_cuda_modules_workspace", tests, NELEM(tests));
}
