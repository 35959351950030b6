/*
 * layernorm_linear_fixture.h — what test_layernorm_linear.c and
 * test_layernorm_linear_state.c share: the module's maths in FP64 (forward,
 * and the backward of Σ y·dy + Σ ln·dln), the fixture that creates an
 * f8_layernorm_linear with random parameters and runs one forward + backward
 * step, the host copy of the weight workspace and the FP8-operand oracle
 * (interval-aware, see test_layernorm_linear.c).
 */
#ifndef F8_TESTS_LAYERNORM_LINEAR_FIXTURE_H
#define F8_TESTS_LAYERNORM_LINEAR_FIXTURE_H

#include "norm_module_tests.h"

/* The module's maths in FP64: inputs and parameters as stored. */
typedef struct {
    int64_t T, K, N;
    int rms, zc;
    double eps;
    double *x, *g, *be, *w, *b; /* [T,K] [K] [K] [N,K] [N]; be, b zero when absent */
} model;

static void model_forward(const model *m, double *ln, double *y)
{
    norm_fwd(m->x, m->T, m->K, m->g, m->be, m->rms, m->zc, m->eps, ln, NULL, NULL);
    mm_nt(ln, m->w, m->b, y, m->T, m->K, m->N, 0);
}

/* Gradients of Σ y·dy + Σ ln·dln (dln may be NULL). */
static void model_backward(const model *m, const double *dy, const double *dln, double *dx, double *dw, double *db,
                           double *dg, double *dbe)
{
    int64_t T = m->T, K = m->K, N = m->N;
    double *ln = dnew((size_t)(T * K)), *y = dnew((size_t)(T * N)), *dl = dnew((size_t)(T * K));
    model_forward(m, ln, y);
    mm_nn(dy, m->w, dl, T, N, K, 0);
    if (dln)
        for (int64_t i = 0; i < T * K; i++) dl[i] += dln[i];
    mm_tn(dy, ln, dw, N, T, K, 0);
    for (int64_t n = 0; n < N; n++) {
        db[n] = 0;
        for (int64_t t = 0; t < T; t++) db[n] += dy[t * N + n];
    }
    norm_bwd(dl, m->x, T, K, m->g, m->rms, m->zc, m->eps, dx, dg, dbe);
    free(ln), free(y), free(dl);
}

/* ------------------------------------------------------------------------ */
/* The module under test                                                     */
/* ------------------------------------------------------------------------ */

typedef struct {
    float *w, *b, *g, *be; /* [N,K] [N] [K] [K]; zero where the module has none */
} params;

typedef struct {
    f8_ctx *ctx;
    f8_layernorm_linear_config c;
    f8_module *m;
    params p; /* the parameter values as stored */
} fixture;

static size_t param_count(const f8_layernorm_linear_config *c, f8_param which)
{
    return (size_t)(which == F8_PARAM_WEIGHT ? c->out_features * c->in_features
                    : which == F8_PARAM_BIAS ? c->out_features
                                             : c->in_features);
}

static int has_param(const f8_layernorm_linear_config *c, f8_param which)
{
    if (which == F8_PARAM_BIAS) return c->bias;
    if (which == F8_PARAM_LN_BIAS) return c->normalization == F8_NORM_LAYERNORM;
    return 1;
}

static float *param_slot(params *p, f8_param which)
{
    return which == F8_PARAM_WEIGHT ? p->w : which == F8_PARAM_BIAS ? p->b : which == F8_PARAM_LN_WEIGHT ? p->g : p->be;
}

static const f8_param all_params[4] = {F8_PARAM_WEIGHT, F8_PARAM_BIAS, F8_PARAM_LN_WEIGHT, F8_PARAM_LN_BIAS};

/* Host copies of the parameters (grad = 0) or their gradients (grad = 1). */
static void read_all(fixture *f, int grad, params *out)
{
    for (int i = 0; i < 4; i++) {
        f8_param which = all_params[i];
        size_t n = param_count(&f->c, which);
        float *dst = param_slot(out, which);
        memset(dst, 0, n * sizeof(float));
        if (!has_param(&f->c, which)) continue;
        f8_tensor v;
        CHECK_OK(f->ctx, f8_module_param(f->m, which, grad, &v));
        CHECK(v.rows * v.cols == (int64_t)n && v.dtype == f->c.param_dtype, "param %d view [%lld, %lld] %s", (int)which,
              (long long)v.rows, (long long)v.cols, f8_dtype_name(v.dtype));
        if (v.rows * v.cols == (int64_t)n) load(f->ctx, v.data, v.dtype, dst, n);
    }
}

static void params_alloc(params *p, const f8_layernorm_linear_config *c)
{
    p->w = fnew(param_count(c, F8_PARAM_WEIGHT));
    p->b = fnew(param_count(c, F8_PARAM_BIAS));
    p->g = fnew(param_count(c, F8_PARAM_LN_WEIGHT));
    p->be = fnew(param_count(c, F8_PARAM_LN_BIAS));
}

static void params_free(params *p) { free(p->w), free(p->b), free(p->g), free(p->be); }

/* Create the module, check its documented initial values, then give every
 * parameter random values (gamma around 1 or 0 per zero_centered_gamma) so
 * each one's path shows in the results. W ~ N(0, 0.3²/K) puts y at the scale
 * of a TE layer (sd ~0.3, as hidden 768 with TE's init): TE's FP8 atol 0.0675
 * is absolute, and an FP8 GEMM's error grows with the operands' norms, not
 * with |y|, so O(1) outputs would need a looser atol than TE's. */
static fixture make(f8_ctx *ctx, const f8_layernorm_linear_config *c, uint64_t seed)
{
    fixture f;
    memset(&f, 0, sizeof f);
    f.ctx = ctx;
    f.c = *c;
    if (f8_layernorm_linear_create(ctx, c, &f.m) != F8_OK) die("f8_layernorm_linear_create", ctx);
    params_alloc(&f.p, c);
    read_all(&f, 0, &f.p);
    int64_t K = c->in_features, N = c->out_features;
    int init_ok = 1;
    double ss = 0;
    for (int64_t k = 0; k < K; k++) init_ok &= f.p.g[k] == (c->zero_centered_gamma ? 0.0f : 1.0f) && f.p.be[k] == 0.0f;
    for (int64_t n = 0; n < N; n++) init_ok &= f.p.b[n] == 0.0f;
    for (int64_t i = 0; i < N * K; i++) ss += (double)f.p.w[i] * f.p.w[i];
    double sd = sqrt(ss / (double)(N * K));
    CHECK(init_ok, "initial gamma/beta/bias are not %s/0/0 (zc=%d)", c->zero_centered_gamma ? "0" : "1",
          c->zero_centered_gamma);
    CHECK(N * K < 256 || (sd > 0.015 && sd < 0.025), "initial W has sd %g, expected 0.02", sd);

    test_rng r = {seed};
    fill_normal(&r, f.p.w, (size_t)(N * K), 0.0, 0.3 / sqrt((double)K));
    fill_normal(&r, f.p.b, (size_t)N, 0.0, 0.1);
    fill_normal(&r, f.p.g, (size_t)K, c->zero_centered_gamma ? 0.0 : 1.0, 0.3);
    fill_normal(&r, f.p.be, (size_t)K, 0.0, 0.2);
    for (int i = 0; i < 4; i++) {
        f8_param which = all_params[i];
        float *v = param_slot(&f.p, which);
        size_t n = param_count(c, which);
        if (!has_param(c, which)) {
            memset(v, 0, n * sizeof(float));
            continue;
        }
        f8_tensor view;
        CHECK_OK(ctx, f8_module_param(f.m, which, 0, &view));
        as_stored(v, n, c->param_dtype);
        store(ctx, view.data, v, n, c->param_dtype);
    }
    return f;
}

static void unmake(fixture *f)
{
    f8_module_destroy(f->m);
    params_free(&f->p);
}

static f8_layernorm_linear_config config(int64_t K, int64_t N, f8_norm norm, int zc, float eps, int ret_ln,
                                         f8_dtype pdt, int fp8, int64_t max_tokens)
{
    f8_layernorm_linear_config c = f8_layernorm_linear_config_default(K, N);
    c.normalization = norm;
    c.zero_centered_gamma = zc;
    c.eps = eps;
    c.return_layernorm_output = ret_ln;
    c.param_dtype = pdt;
    c.fp8 = fp8;
    c.max_tokens = max_tokens;
    return c;
}

/* The FP64 model of a fixture on input x (values as stored). */
static model model_of(const fixture *f, const float *x, int64_t T)
{
    model m;
    m.T = T, m.K = f->c.in_features, m.N = f->c.out_features;
    m.rms = f->c.normalization == F8_NORM_RMSNORM, m.zc = f->c.zero_centered_gamma;
    m.eps = (double)f->c.eps;
    m.x = dnew((size_t)(T * m.K)), m.g = dnew((size_t)m.K), m.be = dnew((size_t)m.K);
    m.w = dnew((size_t)(m.N * m.K)), m.b = dnew((size_t)m.N);
    widen(x, m.x, (size_t)(T * m.K));
    widen(f->p.g, m.g, (size_t)m.K);
    widen(f->p.be, m.be, (size_t)m.K);
    widen(f->p.w, m.w, (size_t)(m.N * m.K));
    widen(f->p.b, m.b, (size_t)m.N);
    return m;
}

static void model_free(model *m) { free(m->x), free(m->g), free(m->be), free(m->w), free(m->b); }

/* What one forward + backward produced (host). */
typedef struct {
    float *y, *ln, *dx; /* [T,N] [T,K] [T,K] */
    params d;           /* what the step added to the module's gradients */
} outputs;

static void outputs_alloc(outputs *o, const fixture *f, int64_t T)
{
    o->y = fnew((size_t)(T * f->c.out_features));
    o->ln = fnew((size_t)(T * f->c.in_features));
    o->dx = fnew((size_t)(T * f->c.in_features));
    params_alloc(&o->d, &f->c);
}

static void outputs_free(outputs *o)
{
    free(o->y), free(o->ln), free(o->dx);
    params_free(&o->d);
}

/* One forward (microbatch mb) and backward. x, dy, dln (NULL: none) are given
 * as values; every activation tensor (x, y, ln_out, dy, dln_out, dx) is dt. */
static void step(fixture *f, int64_t T, const float *x, const float *dy, const float *dln, f8_dtype dt,
                 f8_microbatch mb, outputs *o)
{
    f8_ctx *ctx = f->ctx;
    int64_t K = f->c.in_features, N = f->c.out_features;
    size_t nx = (size_t)(T * K), ny = (size_t)(T * N);
    params before;
    params_alloc(&before, &f->c);
    read_all(f, 1, &before);
    void *xb = put(ctx, x, nx, dt), *yb = put(ctx, NULL, ny, dt), *lb = put(ctx, NULL, nx, dt);
    void *dyb = put(ctx, dy, ny, dt), *dlb = dln ? put(ctx, dln, nx, dt) : NULL, *dxb = put(ctx, NULL, nx, dt);
    f8_tensor tx = f8_tensor_make(xb, dt, T, K), ty = f8_tensor_make(yb, dt, T, N), tl = f8_tensor_make(lb, dt, T, K);
    f8_tensor tdy = f8_tensor_make(dyb, dt, T, N), tdl = f8_tensor_make(dlb, dt, T, K), tdx = f8_tensor_make(dxb, dt, T, K);
    f8_saved *s = NULL;
    CHECK_OK(ctx, f8_module_saved_create(f->m, &s));
    CHECK_OK(ctx, f8_layernorm_linear_forward(f->m, &tx, &ty, f->c.return_layernorm_output ? &tl : NULL, mb, s));
    CHECK_OK(ctx, f8_layernorm_linear_backward(f->m, s, &tdy, dln ? &tdl : NULL, &tdx));
    f8_saved_destroy(s);
    load(ctx, yb, dt, o->y, ny);
    load(ctx, lb, dt, o->ln, nx);
    load(ctx, dxb, dt, o->dx, nx);
    read_all(f, 1, &o->d);
    for (int i = 0; i < 4; i++) {
        size_t n = param_count(&f->c, all_params[i]);
        float *a = param_slot(&o->d, all_params[i]), *b = param_slot(&before, all_params[i]);
        for (size_t j = 0; j < n; j++) a[j] -= b[j];
    }
    params_free(&before);
    f8_ctx_free(ctx, xb), f8_ctx_free(ctx, yb), f8_ctx_free(ctx, lb);
    f8_ctx_free(ctx, dyb), f8_ctx_free(ctx, dlb), f8_ctx_free(ctx, dxb);
}

/* Dequantized weight workspace [N,K] (host), its codes and scale_inv. */
static void workspace_host(fixture *f, double *wq, uint8_t *codes, float *sinv)
{
    const f8_qtensor *q = f8_module_weight_workspace(f->m, F8_PARAM_WEIGHT);
    NEED(q != NULL, "no weight workspace");
    qtensor_host(f->ctx, q, f->c.out_features, f->c.in_features, wq, codes, sinv);
}

/* The FP8 oracle of one step: y and the gradients from the FP8 operands the
 * module should have used, each with an elementwise bound (FP32
 * accumulation + codes that FP32 rounding could flip). lnq: the quantized
 * GEMM input, amb its ambiguity. */
typedef struct {
    double *y, *ybound, *dx, *dw, *dwbound, *db, *dg, *dbe;
} oracle;

static void oracle_build(const model *m, const double *lnq, const double *amb, const double *wq, const double *gq,
                         const double *dln_out, const double *dy, oracle *o)
{
    int64_t T = m->T, K = m->K, N = m->N;
    size_t nx = (size_t)(T * K), ny = (size_t)(T * N), nw = (size_t)(N * K);
    double *absd = dnew(ny > nw ? ny : nw), *dl = dnew(nx);
    o->y = dnew(ny), o->ybound = dnew(ny), o->dx = dnew(nx), o->dw = dnew(nw), o->dwbound = dnew(nw);
    o->db = dnew((size_t)N), o->dg = dnew((size_t)K), o->dbe = dnew((size_t)K);
    double cK = 2e-7 * (double)K + 1e-6, cT = 2e-7 * (double)T + 1e-6;
    mm_nt(lnq, wq, m->b, o->y, T, K, N, 0);
    mm_nt(lnq, wq, m->b, o->ybound, T, K, N, 1);
    mm_nt(amb, wq, NULL, absd, T, K, N, 1);
    for (size_t i = 0; i < ny; i++) o->ybound[i] = cK * o->ybound[i] + absd[i] + 1e-30;
    mm_nn(gq, wq, dl, T, N, K, 0);
    if (dln_out)
        for (size_t i = 0; i < nx; i++) dl[i] += dln_out[i];
    norm_bwd(dl, m->x, T, K, m->g, m->rms, m->zc, m->eps, o->dx, o->dg, o->dbe);
    mm_tn(gq, lnq, o->dw, N, T, K, 0);
    mm_tn(gq, lnq, o->dwbound, N, T, K, 1);
    mm_tn(gq, amb, absd, N, T, K, 1);
    for (size_t i = 0; i < nw; i++) o->dwbound[i] = cT * o->dwbound[i] + absd[i] + 1e-30;
    for (int64_t n = 0; n < N; n++) {
        o->db[n] = 0;
        for (int64_t t = 0; t < T; t++) o->db[n] += dy[t * N + n];
    }
    free(absd), free(dl);
}

static void oracle_free(oracle *o)
{
    free(o->y), free(o->ybound), free(o->dx), free(o->dw), free(o->dwbound), free(o->db), free(o->dg), free(o->dbe);
}

#endif /* F8_TESTS_LAYERNORM_LINEAR_FIXTURE_H */
