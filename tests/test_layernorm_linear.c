/*
 * test_layernorm_linear.c — f8_module on the CPU backend against
 * FP64 references: FP8 off to FP32 rounding (BF16 parameters within TE's BF16
 * tolerance) over an eps sweep, both norms and zero-centred gamma; central
 * finite differences of the FP64 forward against the module's backward; FP8
 * on against an oracle built from the FP8 operands (norm output cast with the
 * INPUT slot's scale, the dequantized weight workspace, dy cast with the
 * GRAD_OUTPUT scale) and within TE's FP8 tolerances of FP64;
 * return_layernorm_output with its gradient; the slots TE writes (§2.5); the
 * #820 workspace regression; main_grad; zero tokens; bad input.
 *
 * The FP8 oracle is interval-aware: the library computes the norm output in
 * FP32 and the host in FP64, so an element lying within FP32 rounding of an
 * FP8 rounding boundary may take either code. Such elements are found (the
 * cast of v ± its FP32 error bound differs) and the change they can cause is
 * carried through the GEMMs as an elementwise bound; everywhere else the
 * comparison is to FP32 accumulation error.
 */
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

static double model_loss(const model *m, const double *dy, const double *dln)
{
    int64_t T = m->T, K = m->K, N = m->N;
    double *ln = dnew((size_t)(T * K)), *y = dnew((size_t)(T * N)), s = 0;
    model_forward(m, ln, y);
    for (int64_t i = 0; i < T * N; i++) s += y[i] * dy[i];
    if (dln)
        for (int64_t i = 0; i < T * K; i++) s += ln[i] * dln[i];
    free(ln), free(y);
    return s;
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

/* ------------------------------------------------------------------------ */
/* Tests                                                                     */
/* ------------------------------------------------------------------------ */

/* Module gradient vs central difference of the FP64 loss at one coordinate. */
static void fd_check(const char *name, int64_t i, double *coord, const model *m, const double *dy, const double *dln,
                     float analytic, double scale)
{
    double h = 1e-4 * (1.0 + fabs(*coord)), keep = *coord;
    *coord = keep + h;
    double lp = model_loss(m, dy, dln);
    *coord = keep - h;
    double lm = model_loss(m, dy, dln);
    *coord = keep;
    double fd = (lp - lm) / (2 * h);
    CHECK(fabs(fd - analytic) <= 1e-4 * (fabs(fd) + scale), "FD %s[%lld]: finite difference %.8g vs module %.8g", name,
          (long long)i, fd, (double)analytic);
}

/* FP8 off: y, ln_out and every gradient against FP64. FP32 parameters to
 * FP32 rounding (and TE's fp32 atol 2.5e-4), plus finite differences; BF16
 * within TE's bf16 tolerance. */
static void test_hp(f8_ctx *ctx, f8_norm norm, int zc, float eps, int ret_ln, f8_dtype pdt, int64_t T, int64_t K,
                    int64_t N)
{
    f8_layernorm_linear_config c = config(K, N, norm, zc, eps, ret_ln, pdt, 0, T);
    char tag[160];
    snprintf(tag, sizeof tag, "hp %s zc=%d eps=%g ret_ln=%d %s T=%lld K=%lld N=%lld", norm ? "rms" : "ln", zc,
             (double)eps, ret_ln, f8_dtype_name(pdt), (long long)T, (long long)K, (long long)N);
    fixture f = make(ctx, &c, 100 + (uint64_t)(T * K + N) + (uint64_t)norm * 7 + (uint64_t)zc);
    size_t nx = (size_t)(T * K), ny = (size_t)(T * N), nw = (size_t)(N * K);
    float *x = fnew(nx), *dy = fnew(ny), *dln = ret_ln ? fnew(nx) : NULL;
    test_rng r = {(uint64_t)(T * 31 + K * 7 + N) + (uint64_t)(eps * 1e7f)};
    make_input(&r, x, T, K);
    fill_normal(&r, dy, ny, 0.0, 1.0);
    if (dln) fill_normal(&r, dln, nx, 0.0, 0.5);
    as_stored(x, nx, pdt), as_stored(dy, ny, pdt);
    if (dln) as_stored(dln, nx, pdt);
    outputs o;
    outputs_alloc(&o, &f, T);
    step(&f, T, x, dy, dln, pdt, F8_MICROBATCH_NONE, &o);

    model m = model_of(&f, x, T);
    double *ln = dnew(nx), *y = dnew(ny), *dx = dnew(nx), *dw = dnew(nw), *db = dnew((size_t)N), *dg = dnew((size_t)K),
           *dbe = dnew((size_t)K), *dyd = dnew(ny), *dld = dln ? dnew(nx) : NULL;
    widen(dy, dyd, ny);
    if (dln) widen(dln, dld, nx);
    model_forward(&m, ln, y);
    model_backward(&m, dyd, dld, dx, dw, db, dg, dbe);

    size_t bi;
    if (pdt == F8_DTYPE_FP32) {
        /* FP32 rounding of sums of ~K terms, relative to the result's norm. */
        double tol = 1e-6 * sqrt((double)(K + N + T));
        CHECK(rel_error(o.y, y, ny) < tol, "%s: y rel err %g", tag, rel_error(o.y, y, ny));
        CHECK(te_misses(o.y, y, ny, 0.0, 2.5e-4, &bi) == 0, "%s: y[%zu] %g vs %g beyond atol 2.5e-4", tag, bi,
              (double)o.y[bi], y[bi]);
        if (ret_ln) CHECK(rel_error(o.ln, ln, nx) < tol, "%s: ln_out rel err %g", tag, rel_error(o.ln, ln, nx));
        CHECK(rel_error(o.dx, dx, nx) < tol, "%s: dx rel err %g", tag, rel_error(o.dx, dx, nx));
        CHECK(rel_error(o.d.w, dw, nw) < tol, "%s: dW rel err %g", tag, rel_error(o.d.w, dw, nw));
        CHECK(rel_error(o.d.b, db, (size_t)N) < tol, "%s: db rel err %g", tag, rel_error(o.d.b, db, (size_t)N));
        CHECK(rel_error(o.d.g, dg, (size_t)K) < tol, "%s: dgamma rel err %g", tag, rel_error(o.d.g, dg, (size_t)K));
        if (norm == F8_NORM_LAYERNORM)
            CHECK(rel_error(o.d.be, dbe, (size_t)K) < tol, "%s: dbeta rel err %g", tag,
                  rel_error(o.d.be, dbe, (size_t)K));

        /* Finite differences of the FP64 loss against the module's gradients. */
        double sx = rms_of(o.dx, nx), sw = rms_of(o.d.w, nw), sb = rms_of(o.d.b, (size_t)N);
        double sg = rms_of(o.d.g, (size_t)K), sbe = rms_of(o.d.be, (size_t)K);
        for (int trial = 0; trial < 3; trial++) {
            int64_t i = (int64_t)(rng_u64(&r) % nx), j = (int64_t)(rng_u64(&r) % nw);
            int64_t n = (int64_t)(rng_u64(&r) % (uint64_t)N), k = (int64_t)(rng_u64(&r) % (uint64_t)K);
            fd_check("dx", i, &m.x[i], &m, dyd, dld, o.dx[i], sx);
            fd_check("dW", j, &m.w[j], &m, dyd, dld, o.d.w[j], sw);
            fd_check("db", n, &m.b[n], &m, dyd, dld, o.d.b[n], sb);
            fd_check("dgamma", k, &m.g[k], &m, dyd, dld, o.d.g[k], sg);
            if (norm == F8_NORM_LAYERNORM) fd_check("dbeta", k, &m.be[k], &m, dyd, dld, o.d.be[k], sbe);
        }
    } else {
        /* TE's bf16 tolerance for outputs (atol 2e-2, torch's bf16 rtol
         * 1.6e-2); gradients to BF16 rounding of each stage. */
        CHECK(te_misses(o.y, y, ny, 1.6e-2, 2e-2, &bi) == 0, "%s: y[%zu] %g vs %g", tag, bi, (double)o.y[bi], y[bi]);
        if (ret_ln)
            CHECK(te_misses(o.ln, ln, nx, 1.6e-2, 2e-2, &bi) == 0, "%s: ln_out[%zu] %g vs %g", tag, bi,
                  (double)o.ln[bi], ln[bi]);
        CHECK(rel_error(o.y, y, ny) < 1e-2, "%s: y rel err %g", tag, rel_error(o.y, y, ny));
        CHECK(rel_error(o.dx, dx, nx) < 2e-2, "%s: dx rel err %g", tag, rel_error(o.dx, dx, nx));
        CHECK(rel_error(o.d.w, dw, nw) < 2e-2, "%s: dW rel err %g", tag, rel_error(o.d.w, dw, nw));
        CHECK(rel_error(o.d.b, db, (size_t)N) < 2e-2, "%s: db rel err %g", tag, rel_error(o.d.b, db, (size_t)N));
        CHECK(rel_error(o.d.g, dg, (size_t)K) < 2e-2, "%s: dgamma rel err %g", tag, rel_error(o.d.g, dg, (size_t)K));
        if (norm == F8_NORM_LAYERNORM)
            CHECK(rel_error(o.d.be, dbe, (size_t)K) < 2e-2, "%s: dbeta rel err %g", tag,
                  rel_error(o.d.be, dbe, (size_t)K));
    }
    if (ret_ln) {
        /* dln_out really reached dx: without it the reference differs. */
        double *dx0 = dnew(nx), *dw0 = dnew(nw), *db0 = dnew((size_t)N), *dg0 = dnew((size_t)K), *dbe0 = dnew((size_t)K);
        model_backward(&m, dyd, NULL, dx0, dw0, db0, dg0, dbe0);
        CHECK(rel_error(o.dx, dx0, nx) > 0.05, "%s: dx ignores dln_out (rel %g from the dy-only gradient)", tag,
              rel_error(o.dx, dx0, nx));
        free(dx0), free(dw0), free(db0), free(dg0), free(dbe0);
    }
    model_free(&m);
    outputs_free(&o);
    unmake(&f);
    free(x), free(dy), free(dln);
    free(ln), free(y), free(dx), free(dw), free(db), free(dg), free(dbe), free(dyd), free(dld);
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

/* Widen a bound by BF16 storage rounding of the result. */
static void bound_bf16(double *bound, const double *want, size_t n)
{
    for (size_t i = 0; i < n; i++) bound[i] += (fabs(want[i]) + bound[i]) * (1.0 / 256.0);
}

/* FP8 on, two steps (the second on amax-derived scales): the output and
 * gradients equal the FP8-operand oracle, y is within TE's FP8 tolerance of
 * FP64, and the gradients are close to FP64. */
static void test_fp8(f8_ctx *ctx, f8_norm norm, int zc, float eps, int ret_ln, f8_dtype pdt, int64_t T, int64_t K,
                     int64_t N)
{
    f8_layernorm_linear_config c = config(K, N, norm, zc, eps, ret_ln, pdt, 1, T);
    char tag[160];
    snprintf(tag, sizeof tag, "fp8 %s zc=%d eps=%g ret_ln=%d %s T=%lld K=%lld N=%lld", norm ? "rms" : "ln", zc,
             (double)eps, ret_ln, f8_dtype_name(pdt), (long long)T, (long long)K, (long long)N);
    fixture f = make(ctx, &c, 500 + (uint64_t)(T + K + N) + (uint64_t)norm * 3 + (uint64_t)zc);
    size_t nx = (size_t)(T * K), ny = (size_t)(T * N), nw = (size_t)(N * K);
    float *x = fnew(nx), *dy = fnew(ny), *dln = ret_ln ? fnew(nx) : NULL;
    double *lnq = dnew(nx), *amb = dnew(nx), *err = dnew(nx), *wq = dnew(nw), *gq = dnew(ny), *dyd = dnew(ny);
    double *dld = ret_ln ? dnew(nx) : NULL, *ln = dnew(nx), *y = dnew(ny), *dx = dnew(nx), *dw = dnew(nw);
    double *db = dnew((size_t)N), *dg = dnew((size_t)K), *dbe = dnew((size_t)K);
    uint8_t *codes = (uint8_t *)xmalloc(nw);
    f8_slot s_in, s_w, s_go;
    CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, 0, &s_in));
    CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, 1, &s_w));
    CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_BACKWARD, 0, &s_go));
    f8_dtype e4 = f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD), e5 = f8_ctx_slot_dtype(ctx, F8_DIR_BACKWARD);
    test_rng r = {(uint64_t)(T * 5 + K * 3 + N) + (uint64_t)(eps * 1e7f)};
    int bf = pdt == F8_DTYPE_BF16;
    outputs o;
    outputs_alloc(&o, &f, T);
    for (int it = 0; it < 2; it++) {
        make_input(&r, x, T, K);
        fill_normal(&r, dy, ny, 0.0, 1e-2);
        if (dln) fill_normal(&r, dln, nx, 0.0, 1e-2);
        as_stored(x, nx, pdt), as_stored(dy, ny, pdt);
        if (dln) as_stored(dln, nx, pdt);
        float sc_in, sc_w, sc_go, sinv;
        CHECK_OK(ctx, f8_slot_read(ctx, s_in, &sc_in, NULL, NULL));
        CHECK_OK(ctx, f8_slot_read(ctx, s_w, &sc_w, NULL, NULL));
        CHECK_OK(ctx, f8_slot_read(ctx, s_go, &sc_go, NULL, NULL));
        if (it == 1) CHECK(sc_in != 1.0f && sc_w != 1.0f && sc_go != 1.0f, "%s: scales did not update", tag);
        /* Fresh gradients each step, so BF16 gradients carry one rounding. */
        CHECK_OK(ctx, f8_module_zero_grad(f.m));
        step(&f, T, x, dy, dln, pdt, F8_MICROBATCH_NONE, &o);

        /* The workspace is the cast of W with the weight slot's scale. */
        workspace_host(&f, wq, codes, &sinv);
        size_t bad = 0;
        for (size_t i = 0; i < nw; i++) bad += codes[i] != f8_fp8_from_float(f.p.w[i] * sc_w, e4);
        CHECK(bad == 0 && sinv == 1.0f / sc_w, "%s: workspace: %zu codes differ from the cast of W, scale_inv %g vs %g",
              tag, bad, (double)sinv, 1.0 / sc_w);

        model m = model_of(&f, x, T);
        widen(dy, dyd, ny);
        if (dln) widen(dln, dld, nx);
        model_forward(&m, ln, y);
        model_backward(&m, dyd, dld, dx, dw, db, dg, dbe);
        if (ret_ln) {
            /* The returned norm output is what is cast: exact codes, no ambiguity. */
            CHECK(rel_error(o.ln, ln, nx) < 1e-5, "%s: ln_out rel err %g", tag, rel_error(o.ln, ln, nx));
            for (size_t i = 0; i < nx; i++) lnq[i] = fq(o.ln[i], sc_in, e4), amb[i] = 0;
        } else {
            norm_error_bound(m.x, m.T, m.K, m.g, m.be, m.rms, m.zc, m.eps, ln, err);
            for (size_t i = 0; i < nx; i++) lnq[i] = fq_amb(ln[i], err[i], sc_in, e4, &amb[i]);
        }
        for (size_t i = 0; i < ny; i++) gq[i] = fq(dy[i], sc_go, e5);
        oracle q;
        oracle_build(&m, lnq, amb, wq, gq, dld, dyd, &q);
        if (bf) bound_bf16(q.ybound, q.y, ny), bound_bf16(q.dwbound, q.dw, nw);
        size_t wi, nb;
        nb = over_bound(o.y, q.y, q.ybound, ny, &wi);
        CHECK(nb == 0, "%s step %d: %zu y beyond the FP8-operand oracle, y[%zu] %.9g vs %.9g (bound %g); rel err %g", tag,
              it, nb, wi, (double)o.y[wi], q.y[wi], q.ybound[wi], rel_error(o.y, q.y, ny));
        nb = over_bound(o.d.w, q.dw, q.dwbound, nw, &wi);
        CHECK(nb == 0, "%s step %d: %zu dW beyond the oracle, dW[%zu] %.9g vs %.9g (bound %g)", tag, it, nb, wi,
              (double)o.d.w[wi], q.dw[wi], q.dwbound[wi]);
        double tg = bf ? 1e-2 : 1e-5;
        CHECK(rel_error(o.dx, q.dx, nx) < tg, "%s step %d: dx vs oracle rel err %g", tag, it, rel_error(o.dx, q.dx, nx));
        CHECK(rel_error(o.d.g, q.dg, (size_t)K) < tg, "%s step %d: dgamma vs oracle rel err %g", tag, it,
              rel_error(o.d.g, q.dg, (size_t)K));
        if (norm == F8_NORM_LAYERNORM)
            CHECK(rel_error(o.d.be, q.dbe, (size_t)K) < tg, "%s step %d: dbeta vs oracle rel err %g", tag, it,
                  rel_error(o.d.be, q.dbe, (size_t)K));
        CHECK(rel_error(o.d.b, q.db, (size_t)N) < (bf ? 1e-2 : 1e-5), "%s step %d: db (from unquantized dy) rel err %g",
              tag, it, rel_error(o.d.b, q.db, (size_t)N));
        /* Against FP64 of the unquantized model: TE's FP8 tolerance for y;
         * gradients through one E5M2 and one E4M3 operand, by norm. */
        size_t first;
        nb = te_misses(o.y, y, ny, 0.125, 0.0675, &first);
        CHECK(nb == 0, "%s step %d: %zu y outside TE's FP8 tolerance, y[%zu] %g vs fp64 %g", tag, it, nb, first,
              (double)o.y[first], y[first]);
        CHECK(rel_error(o.dx, dx, nx) < 0.15, "%s: dx vs fp64 rel err %g", tag, rel_error(o.dx, dx, nx));
        CHECK(rel_error(o.d.w, dw, nw) < 0.15, "%s: dW vs fp64 rel err %g", tag, rel_error(o.d.w, dw, nw));
        CHECK(rel_error(o.d.g, dg, (size_t)K) < 0.15, "%s: dgamma vs fp64 rel err %g", tag,
              rel_error(o.d.g, dg, (size_t)K));
        if (norm == F8_NORM_LAYERNORM)
            CHECK(rel_error(o.d.be, dbe, (size_t)K) < 0.15, "%s: dbeta vs fp64 rel err %g", tag,
                  rel_error(o.d.be, dbe, (size_t)K));
        if (getenv("F8_TEST_VERBOSE"))
            printf("%s step %d: y rel %.3g vs oracle, %.3g vs fp64 (TE ratio %.2f); dx %.3g/%.3g dW %.3g dg %.3g\n",
                   tag, it, rel_error(o.y, q.y, ny), rel_error(o.y, y, ny), te_ratio(o.y, y, ny, 0.125, 0.0675), rel_error(o.dx, q.dx, nx), rel_error(o.dx, dx, nx),
                   rel_error(o.d.w, dw, nw), rel_error(o.d.g, dg, (size_t)K));
        oracle_free(&q);
        model_free(&m);
        CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
        CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_BACKWARD));
    }
    outputs_free(&o);
    unmake(&f);
    free(x), free(dy), free(dln), free(codes);
    free(lnq), free(amb), free(err), free(wq), free(gq), free(dyd), free(dld), free(ln), free(y), free(dx), free(dw);
    free(db), free(dg), free(dbe);
}

/* TE §2.5: a FP8 forward + backward writes GEMM1_INPUT (amax of the norm
 * output), GEMM1_WEIGHT (amax of W) and GRAD_OUTPUT1 (amax of dy); the
 * GEMM1_OUTPUT and GRAD_INPUT1 slots keep amax 0 and, after the update, scale 1. */
static void test_slots(f8_ctx *ctx, f8_norm norm, int ret_ln)
{
    const int64_t T = 16, K = 32, N = 24;
    f8_layernorm_linear_config c = config(K, N, norm, 1, 1e-5f, ret_ln, F8_DTYPE_FP32, 1, T);
    fixture f = make(ctx, &c, 77 + (uint64_t)ret_ln);
    size_t nx = (size_t)(T * K), ny = (size_t)(T * N);
    float *x = fnew(nx), *dy = fnew(ny), *dln = ret_ln ? fnew(nx) : NULL;
    test_rng r = {3};
    make_input(&r, x, T, K);
    fill_normal(&r, dy, ny, 0.0, 0.1);
    if (dln) fill_normal(&r, dln, nx, 0.0, 0.1);
    f8_slot s[5];
    for (int i = 0; i < 3; i++) CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, i, &s[i]));
    for (int i = 0; i < 2; i++) CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_BACKWARD, i, &s[3 + i]));
    float a[5], sc[5];
    for (int i = 0; i < 5; i++) a[i] = slot_amax(ctx, s[i], &sc[i]);
    CHECK(a[0] == 0 && a[1] == 0 && a[2] == 0 && a[3] == 0 && a[4] == 0, "slots not empty at creation");
    outputs o;
    outputs_alloc(&o, &f, T);
    step(&f, T, x, dy, dln, F8_DTYPE_FP32, F8_MICROBATCH_NONE, &o);
    model m = model_of(&f, x, T);
    double *ln = dnew(nx), *y = dnew(ny);
    model_forward(&m, ln, y);
    for (int i = 0; i < 5; i++) a[i] = slot_amax(ctx, s[i], &sc[i]);
    double want_in = max_abs_d(ln, nx);
    CHECK(fabs(a[0] - want_in) <= 1e-5 * want_in, "ret_ln=%d: GEMM1_INPUT amax %g, max|norm(x)| %g", ret_ln,
          (double)a[0], want_in);
    CHECK(a[1] == max_abs_f(f.p.w, (size_t)(N * K)), "GEMM1_WEIGHT amax %g, max|W| %g", (double)a[1],
          (double)max_abs_f(f.p.w, (size_t)(N * K)));
    CHECK(a[2] == 0.0f, "GEMM1_OUTPUT written (amax %g)", (double)a[2]);
    CHECK(a[3] == max_abs_f(dy, ny), "GRAD_OUTPUT1 amax %g, max|dy| %g", (double)a[3], (double)max_abs_f(dy, ny));
    CHECK(a[4] == 0.0f, "GRAD_INPUT1 written (amax %g)", (double)a[4]);
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_BACKWARD));
    for (int i = 0; i < 5; i++) a[i] = slot_amax(ctx, s[i], &sc[i]);
    CHECK(sc[2] == 1.0f && sc[4] == 1.0f, "unused slots' scales moved: %g %g", (double)sc[2], (double)sc[4]);
    CHECK(sc[0] != 1.0f && sc[1] != 1.0f && sc[3] != 1.0f, "used slots' scales did not move");
    f8_slot extra;
    CHECK_STATUS(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, 3, &extra), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_slot(f.m, F8_DIR_BACKWARD, 2, &extra), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, -1, &extra), F8_ERR_INVALID_ARGUMENT);
    model_free(&m);
    outputs_free(&o);
    unmake(&f);
    free(x), free(dy), free(dln), free(ln), free(y);
}

/* TE #820: microbatch 1 (FIRST) casts W; the forward scale update changes
 * the weight slot's scale; microbatch 2 (NOT_FIRST, same x) must use the
 * workspace's microbatch-1 codes with ITS scale_inv, in y and in dgrad, and
 * must not write the weight slot's amax. */
static void test_workspace_regression(f8_ctx *ctx, f8_norm norm)
{
    const int64_t T = 16, K = 32, N = 16;
    f8_layernorm_linear_config c = config(K, N, norm, 0, 1e-5f, 0, F8_DTYPE_FP32, 1, T);
    fixture f = make(ctx, &c, 820);
    size_t nx = (size_t)(T * K), ny = (size_t)(T * N), nw = (size_t)(N * K);
    float *x = fnew(nx), *dy = fnew(ny);
    double *wq1 = dnew(nw), *wq2 = dnew(nw), *wbug = dnew(nw), *lnq = dnew(nx), *amb = dnew(nx), *err = dnew(nx);
    double *ln = dnew(nx), *y = dnew(ny), *gq = dnew(ny), *dyd = dnew(ny), *ybug = dnew(ny);
    uint8_t *c1 = (uint8_t *)xmalloc(nw), *c2 = (uint8_t *)xmalloc(nw);
    test_rng r = {820};
    make_input(&r, x, T, K);
    fill_normal(&r, dy, ny, 0.0, 1e-2);
    widen(dy, dyd, ny);
    f8_slot s_in, s_w, s_go;
    CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, 0, &s_in));
    CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, 1, &s_w));
    CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_BACKWARD, 0, &s_go));
    outputs o;
    outputs_alloc(&o, &f, T);

    float sw1, sw2, sin2, sgo, sinv1, sinv2;
    CHECK_OK(ctx, f8_slot_read(ctx, s_w, &sw1, NULL, NULL));
    step(&f, T, x, dy, NULL, F8_DTYPE_FP32, F8_MICROBATCH_FIRST, &o);
    workspace_host(&f, wq1, c1, &sinv1);
    CHECK(sinv1 == 1.0f / sw1, "workspace scale_inv %g after FIRST, expected %g", (double)sinv1, 1.0 / sw1);

    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
    CHECK_OK(ctx, f8_slot_read(ctx, s_w, &sw2, NULL, NULL));
    CHECK_OK(ctx, f8_slot_read(ctx, s_in, &sin2, NULL, NULL));
    CHECK_OK(ctx, f8_slot_read(ctx, s_go, &sgo, NULL, NULL));
    CHECK(sw2 != sw1, "the weight scale did not change (%g): the regression would prove nothing", (double)sw2);

    step(&f, T, x, dy, NULL, F8_DTYPE_FP32, F8_MICROBATCH_NOT_FIRST, &o);
    workspace_host(&f, wq2, c2, &sinv2);
    CHECK(memcmp(c1, c2, nw) == 0 && sinv2 == sinv1, "NOT_FIRST rewrote the workspace (scale_inv %g -> %g)",
          (double)sinv1, (double)sinv2);
    float w_amax = slot_amax(ctx, s_w, NULL), in_amax = slot_amax(ctx, s_in, NULL);
    CHECK(w_amax == 0.0f && in_amax > 0.0f, "NOT_FIRST: weight amax %g (want 0), input amax %g (want > 0)",
          (double)w_amax, (double)in_amax);

    model m = model_of(&f, x, T);
    model_forward(&m, ln, y);
    norm_error_bound(m.x, m.T, m.K, m.g, m.be, m.rms, m.zc, m.eps, ln, err);
    for (size_t i = 0; i < nx; i++) lnq[i] = fq_amb(ln[i], err[i], sin2, F8_DTYPE_E4M3, &amb[i]);
    for (size_t i = 0; i < ny; i++) gq[i] = fq(dy[i], sgo, f8_ctx_slot_dtype(ctx, F8_DIR_BACKWARD));
    oracle q;
    oracle_build(&m, lnq, amb, wq1, gq, NULL, dyd, &q);
    size_t wi, nb = over_bound(o.y, q.y, q.ybound, ny, &wi);
    CHECK(nb == 0, "microbatch 2: %zu y off the microbatch-1 weight oracle, y[%zu] %.9g vs %.9g (bound %g)", nb, wi,
          (double)o.y[wi], q.y[wi], q.ybound[wi]);
    CHECK(rel_error(o.dx, q.dx, nx) < 1e-4, "microbatch 2 dgrad rel err %g vs the microbatch-1 weight",
          rel_error(o.dx, q.dx, nx));
    /* The pre-#820 bug: microbatch-1 codes read with the new scale_inv. */
    for (size_t i = 0; i < nw; i++) wbug[i] = wq1[i] * sw1 / sw2;
    mm_nt(lnq, wbug, m.b, ybug, T, K, N, 0);
    CHECK(rel_error(o.y, ybug, ny) > 1e-2, "microbatch 2 matches the stale-scale bug (rel %g)",
          rel_error(o.y, ybug, ny));
    oracle_free(&q);
    model_free(&m);
    outputs_free(&o);
    unmake(&f);
    free(x), free(dy), free(wq1), free(wq2), free(wbug), free(lnq), free(amb), free(err), free(ln), free(y), free(gq);
    free(dyd), free(ybug), free(c1), free(c2);
}

/* main_grad per §4.3: FIRST overwrites, NOT_FIRST and NONE accumulate; the
 * module's own weight gradient stays 0 while b, gamma, beta accumulate. */
static void test_main_grad(f8_ctx *ctx, int fp8)
{
    const int64_t T = 16, K = 32, N = 16;
    f8_layernorm_linear_config c = config(K, N, F8_NORM_LAYERNORM, 0, 1e-5f, 0, F8_DTYPE_FP32, fp8, T);
    c.fuse_wgrad_accumulation = 1;
    fixture f = make(ctx, &c, 31);
    size_t nx = (size_t)(T * K), ny = (size_t)(T * N), nw = (size_t)(N * K);
    float *x = fnew(nx), *dy = fnew(ny), *mg = fnew(nw), *g[3];
    test_rng r = {31};
    make_input(&r, x, T, K);
    fill_normal(&r, dy, ny, 0.0, 0.1);
    for (size_t i = 0; i < nw; i++) mg[i] = 7.0f;
    void *mgb = put(ctx, mg, nw, F8_DTYPE_FP32);
    void *xb = put(ctx, x, nx, F8_DTYPE_FP32), *yb = put(ctx, NULL, ny, F8_DTYPE_FP32);
    void *dyb = put(ctx, dy, ny, F8_DTYPE_FP32);
    f8_tensor tx = f8_tensor_make(xb, F8_DTYPE_FP32, T, K), ty = f8_tensor_make(yb, F8_DTYPE_FP32, T, N);
    f8_tensor tdy = f8_tensor_make(dyb, F8_DTYPE_FP32, T, N);
    f8_saved *s = NULL;
    CHECK_OK(ctx, f8_module_saved_create(f.m, &s));
    CHECK_OK(ctx, f8_layernorm_linear_forward(f.m, &tx, &ty, NULL, F8_MICROBATCH_FIRST, s));
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(f.m, s, &tdy, NULL, NULL), F8_ERR_STATE); /* no main_grad */
    CHECK_OK(ctx, f8_module_set_main_grad(f.m, F8_PARAM_WEIGHT, (float *)mgb));
    const f8_microbatch mbs[3] = {F8_MICROBATCH_FIRST, F8_MICROBATCH_NOT_FIRST, F8_MICROBATCH_NONE};
    for (int i = 0; i < 3; i++) {
        g[i] = fnew(nw);
        if (i > 0) CHECK_OK(ctx, f8_layernorm_linear_forward(f.m, &tx, &ty, NULL, mbs[i], s));
        CHECK_OK(ctx, f8_layernorm_linear_backward(f.m, s, &tdy, NULL, NULL));
        load(ctx, mgb, F8_DTYPE_FP32, g[i], nw);
    }
    model m = model_of(&f, x, T);
    double *dyd = dnew(ny), *dx = dnew(nx), *dw = dnew(nw), *db = dnew((size_t)N), *dg = dnew((size_t)K);
    double *dbe = dnew((size_t)K);
    widen(dy, dyd, ny);
    model_backward(&m, dyd, NULL, dx, dw, db, dg, dbe);
    CHECK(rel_error(g[0], dw, nw) < (fp8 ? 0.12 : 1e-5), "fp8=%d: FIRST main_grad is not dW (rel %g): not overwritten?",
          fp8, rel_error(g[0], dw, nw));
    int acc = 1;
    for (size_t i = 0; i < nw; i++)
        acc &= fabsf(g[1][i] - 2 * g[0][i]) <= 1e-5f * (1 + fabsf(g[0][i])) &&
               fabsf(g[2][i] - 3 * g[0][i]) <= 1e-5f * (1 + fabsf(g[0][i]));
    CHECK(acc, "fp8=%d: NOT_FIRST / NONE did not accumulate into main_grad", fp8);
    params d;
    params_alloc(&d, &c);
    read_all(&f, 1, &d);
    int wzero = 1;
    for (size_t i = 0; i < nw; i++) wzero &= d.w[i] == 0.0f;
    CHECK(wzero, "fp8=%d: the fused path also wrote the module's weight gradient", fp8);
    for (int64_t n = 0; n < N; n++) db[n] *= 3;
    for (int64_t k = 0; k < K; k++) dg[k] *= 3, dbe[k] *= 3;
    CHECK(rel_error(d.b, db, (size_t)N) < 1e-5, "fp8=%d: bias gradient after 3 steps rel err %g", fp8,
          rel_error(d.b, db, (size_t)N));
    CHECK(rel_error(d.g, dg, (size_t)K) < (fp8 ? 0.12 : 1e-5), "fp8=%d: gamma gradient after 3 steps rel err %g", fp8,
          rel_error(d.g, dg, (size_t)K));
    CHECK(rel_error(d.be, dbe, (size_t)K) < (fp8 ? 0.12 : 1e-5), "fp8=%d: beta gradient after 3 steps rel err %g", fp8,
          rel_error(d.be, dbe, (size_t)K));
    params_free(&d);
    model_free(&m);
    f8_saved_destroy(s);
    f8_ctx_free(ctx, mgb), f8_ctx_free(ctx, xb), f8_ctx_free(ctx, yb), f8_ctx_free(ctx, dyb);
    unmake(&f);
    for (int i = 0; i < 3; i++) free(g[i]);
    free(x), free(dy), free(mg), free(dyd), free(dx), free(dw), free(db), free(dg), free(dbe);
}

/* T = 0: legal, writes nothing; gradients stay 0. */
static void test_zero_tokens(f8_ctx *ctx, int fp8, int ret_ln)
{
    const int64_t K = 32, N = 16;
    f8_layernorm_linear_config c = config(K, N, F8_NORM_LAYERNORM, 0, 1e-5f, ret_ln, F8_DTYPE_FP32, fp8, 8);
    fixture f = make(ctx, &c, 5);
    void *p = put(ctx, NULL, 16, F8_DTYPE_FP32);
    f8_tensor tx = f8_tensor_make(p, F8_DTYPE_FP32, 0, K), ty = f8_tensor_make(p, F8_DTYPE_FP32, 0, N);
    f8_tensor tl = f8_tensor_make(p, F8_DTYPE_FP32, 0, K), tdy = f8_tensor_make(p, F8_DTYPE_FP32, 0, N);
    f8_tensor tdl = tl, tdx = tl;
    f8_saved *s = NULL;
    CHECK_OK(ctx, f8_module_saved_create(f.m, &s));
    CHECK_OK(ctx, f8_layernorm_linear_forward(f.m, &tx, &ty, ret_ln ? &tl : NULL, F8_MICROBATCH_NONE, s));
    CHECK_OK(ctx, f8_layernorm_linear_backward(f.m, s, &tdy, ret_ln ? &tdl : NULL, &tdx));
    params d;
    params_alloc(&d, &c);
    read_all(&f, 1, &d);
    int zero = 1;
    for (int64_t i = 0; i < N * K; i++) zero &= d.w[i] == 0.0f;
    for (int64_t i = 0; i < N; i++) zero &= d.b[i] == 0.0f;
    for (int64_t i = 0; i < K; i++) zero &= d.g[i] == 0.0f && d.be[i] == 0.0f;
    CHECK(zero, "zero tokens changed the gradients (fp8=%d ret_ln=%d)", fp8, ret_ln);
    params_free(&d);
    f8_saved_destroy(s);
    f8_ctx_free(ctx, p);
    unmake(&f);
}

/* Everything a failed call must leave alone: the five slots, y, ln_out and
 * the gradients. */
typedef struct {
    float *slots; /* per slot: scale, scale_inv, history */
    float *y, *ln;
    params grads;
} snapshot;

static void snap(fixture *f, void *yb, void *lb, int64_t T, snapshot *s)
{
    int L = f8_ctx_recipe(f->ctx)->amax_history_len;
    int64_t K = f->c.in_features, N = f->c.out_features;
    s->slots = fnew((size_t)(5 * (L + 2)));
    for (int i = 0; i < 5; i++) {
        f8_slot sl;
        float *d = s->slots + i * (L + 2);
        CHECK_OK(f->ctx, f8_module_slot(f->m, i < 3 ? F8_DIR_FORWARD : F8_DIR_BACKWARD, i < 3 ? i : i - 3, &sl));
        CHECK_OK(f->ctx, f8_slot_read(f->ctx, sl, &d[0], &d[1], d + 2));
    }
    s->y = fnew((size_t)(T * N)), s->ln = fnew((size_t)(T * K));
    load(f->ctx, yb, F8_DTYPE_FP32, s->y, (size_t)(T * N));
    load(f->ctx, lb, F8_DTYPE_FP32, s->ln, (size_t)(T * K));
    params_alloc(&s->grads, &f->c);
    read_all(f, 1, &s->grads);
}

static int snap_equal(fixture *f, const snapshot *a, const snapshot *b, int64_t T)
{
    int L = f8_ctx_recipe(f->ctx)->amax_history_len;
    int64_t K = f->c.in_features, N = f->c.out_features;
    int same = memcmp(a->slots, b->slots, (size_t)(5 * (L + 2)) * 4) == 0;
    same &= memcmp(a->y, b->y, (size_t)(T * N) * 4) == 0 && memcmp(a->ln, b->ln, (size_t)(T * K) * 4) == 0;
    same &= memcmp(a->grads.w, b->grads.w, (size_t)(N * K) * 4) == 0 && memcmp(a->grads.b, b->grads.b, (size_t)N * 4) == 0;
    same &= memcmp(a->grads.g, b->grads.g, (size_t)K * 4) == 0 && memcmp(a->grads.be, b->grads.be, (size_t)K * 4) == 0;
    return same;
}

static void snap_free(snapshot *s)
{
    free(s->slots), free(s->y), free(s->ln);
    params_free(&s->grads);
}

/* Bad arguments return the documented status and change nothing. */
static void test_bad_input(f8_ctx *ctx)
{
    const int64_t T = 8, K = 16, N = 16;
    f8_layernorm_linear_config c = config(K, N, F8_NORM_LAYERNORM, 0, 1e-5f, 0, F8_DTYPE_FP32, 1, T);
    fixture f = make(ctx, &c, 1); /* FP8, no ln_out */
    c.return_layernorm_output = 1;
    fixture h = make(ctx, &c, 2); /* FP8 with ln_out */
    c = config(K, N, F8_NORM_RMSNORM, 0, 1e-5f, 0, F8_DTYPE_FP32, 0, T);
    c.bias = 0;
    fixture g = make(ctx, &c, 3); /* FP8 off, RMSNorm, no bias */
    float host[512];
    for (int i = 0; i < 512; i++) host[i] = 0.25f * (float)(i % 7) - 0.6f;
    void *xb = put(ctx, host, (size_t)(T * K), F8_DTYPE_FP32), *yb = put(ctx, host, (size_t)(T * N), F8_DTYPE_FP32);
    void *lb = put(ctx, host, (size_t)(T * K), F8_DTYPE_FP32), *x16 = put(ctx, host, (size_t)(T * K), F8_DTYPE_BF16);
    void *big = put(ctx, host, 512, F8_DTYPE_FP32);
    f8_tensor tx = f8_tensor_make(xb, F8_DTYPE_FP32, T, K), ty = f8_tensor_make(yb, F8_DTYPE_FP32, T, N);
    f8_tensor tl = f8_tensor_make(lb, F8_DTYPE_FP32, T, K), bad;
    f8_saved *sf = NULL, *sh = NULL, *sg = NULL;
    CHECK_OK(ctx, f8_module_saved_create(f.m, &sf));
    CHECK_OK(ctx, f8_module_saved_create(h.m, &sh));
    CHECK_OK(ctx, f8_module_saved_create(g.m, &sg));
    snapshot before, after;
    snap(&f, yb, lb, T, &before);

    const f8_microbatch none = F8_MICROBATCH_NONE;
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(NULL, &tx, &ty, NULL, none, sf), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, NULL, &ty, NULL, none, sf), F8_ERR_INVALID_ARGUMENT);
    CHECK(strlen(f8_ctx_last_error(ctx)) > 0, "no message for a NULL x");
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, &tx, NULL, NULL, none, sf), F8_ERR_INVALID_ARGUMENT);
    bad = tx, bad.data = NULL;
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, &bad, &ty, NULL, none, sf), F8_ERR_INVALID_ARGUMENT);
    bad = tx, bad.cols = K + 1;
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, &bad, &ty, NULL, none, sf), F8_ERR_SHAPE);
    bad = ty, bad.rows = T - 1;
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, &tx, &bad, NULL, none, sf), F8_ERR_SHAPE);
    bad = ty, bad.cols = N - 1;
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, &tx, &bad, NULL, none, sf), F8_ERR_SHAPE);
    {
        f8_tensor xbig = f8_tensor_make(big, F8_DTYPE_FP32, T + 1, K), ybig = f8_tensor_make(big, F8_DTYPE_FP32, T + 1, N);
        CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, &xbig, &ybig, NULL, none, sf), F8_ERR_SHAPE); /* > max_tokens */
    }
    bad = tx, bad.dtype = F8_DTYPE_E4M3, bad.scale_inv = (float *)big;
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, &bad, &ty, NULL, none, sf), F8_ERR_DTYPE);
    bad = ty, bad.dtype = F8_DTYPE_E5M2, bad.scale_inv = (float *)big;
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, &tx, &bad, NULL, none, sf), F8_ERR_DTYPE);
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, &tx, &ty, NULL, (f8_microbatch)7, sf), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, &tx, &ty, NULL, none, sh), F8_ERR_INVALID_ARGUMENT); /* h's saved */
    /* ln_out: given without return_layernorm_output, missing with it, misshapen, FP8. */
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, &tx, &ty, &tl, none, sf), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(h.m, &tx, &ty, NULL, none, sh), F8_ERR_INVALID_ARGUMENT);
    bad = tl, bad.cols = K - 1;
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(h.m, &tx, &ty, &bad, none, sh), F8_ERR_SHAPE);
    bad = tl, bad.dtype = F8_DTYPE_E4M3, bad.scale_inv = (float *)big;
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(h.m, &tx, &ty, &bad, none, sh), F8_ERR_DTYPE);
    /* FP8 off: x must be in param_dtype. */
    f8_tensor tx16 = f8_tensor_make(x16, F8_DTYPE_BF16, T, K);
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(g.m, &tx16, &ty, NULL, none, sg), F8_ERR_DTYPE);
    /* Backward before any forward, or without saved state. */
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(f.m, sf, &ty, NULL, NULL), F8_ERR_STATE);
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(h.m, sh, &ty, &tl, NULL), F8_ERR_STATE);
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(f.m, NULL, &ty, NULL, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(NULL, sf, &ty, NULL, NULL), F8_ERR_INVALID_ARGUMENT);

    /* Views, slots, main_grad. */
    f8_tensor v;
    CHECK_STATUS(ctx, f8_module_param(g.m, F8_PARAM_LN_BIAS, 0, &v), F8_ERR_STATE); /* RMSNorm: no beta */
    CHECK_STATUS(ctx, f8_module_param(g.m, F8_PARAM_BIAS, 1, &v), F8_ERR_STATE);    /* bias = 0 */
    CHECK_STATUS(ctx, f8_module_param(f.m, F8_PARAM_FC1_WEIGHT, 0, &v), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_param(f.m, (f8_param)42, 0, &v), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_param(f.m, F8_PARAM_WEIGHT, 0, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_set_main_grad(f.m, F8_PARAM_WEIGHT, (float *)big), F8_ERR_STATE); /* not fused */
    CHECK(f8_module_weight_workspace(NULL, F8_PARAM_WEIGHT) == NULL, "workspace of NULL");

    /* Create. */
    f8_module *l2 = NULL;
    f8_layernorm_linear_config cc = f8_layernorm_linear_config_default(0, 4);
    CHECK_STATUS(ctx, f8_layernorm_linear_create(ctx, &cc, &l2), F8_ERR_SHAPE);
    cc = f8_layernorm_linear_config_default(4, 0);
    CHECK_STATUS(ctx, f8_layernorm_linear_create(ctx, &cc, &l2), F8_ERR_SHAPE);
    cc = f8_layernorm_linear_config_default(4, 4);
    cc.param_dtype = F8_DTYPE_E4M3;
    CHECK_STATUS(ctx, f8_layernorm_linear_create(ctx, &cc, &l2), F8_ERR_DTYPE);
    cc = f8_layernorm_linear_config_default(4, 4);
    cc.normalization = (f8_norm)5;
    CHECK_STATUS(ctx, f8_layernorm_linear_create(ctx, &cc, &l2), F8_ERR_INVALID_ARGUMENT);
    CHECK(l2 == NULL, "a failed create left an object");
    CHECK_STATUS(ctx, f8_layernorm_linear_create(ctx, NULL, &l2), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_layernorm_linear_create(NULL, &cc, &l2), F8_ERR_INVALID_ARGUMENT);

    snap(&f, yb, lb, T, &after);
    CHECK(snap_equal(&f, &before, &after, T), "a failed call changed y, ln_out, a slot or a gradient");
    snap_free(&after);

    /* A valid forward, then bad backwards change nothing and keep the saved state. */
    CHECK_OK(ctx, f8_layernorm_linear_forward(f.m, &tx, &ty, NULL, none, sf));
    CHECK_OK(ctx, f8_layernorm_linear_forward(h.m, &tx, &ty, &tl, none, sh));
    snap_free(&before);
    snap(&f, yb, lb, T, &before);
    f8_tensor dy = f8_tensor_make(big, F8_DTYPE_FP32, T, N), dx = f8_tensor_make(lb, F8_DTYPE_FP32, T, K);
    bad = dy, bad.cols = N + 1;
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(f.m, sf, &bad, NULL, &dx), F8_ERR_SHAPE);
    bad = dx, bad.rows = T - 1;
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(f.m, sf, &dy, NULL, &bad), F8_ERR_SHAPE);
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(f.m, sf, NULL, NULL, &dx), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(f.m, sf, &dy, &tl, &dx), F8_ERR_INVALID_ARGUMENT); /* no ln_out */
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(f.m, sh, &dy, NULL, &dx), F8_ERR_INVALID_ARGUMENT); /* h's saved */
    bad = tl, bad.cols = K + 1;
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(h.m, sh, &dy, &bad, NULL), F8_ERR_SHAPE);
    bad = dy, bad.dtype = F8_DTYPE_E5M2, bad.scale_inv = (float *)big;
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(f.m, sf, &bad, NULL, NULL), F8_ERR_DTYPE);
    snap(&f, yb, lb, T, &after);
    CHECK(snap_equal(&f, &before, &after, T), "a failed backward changed dx, a slot or a gradient");
    CHECK_OK(ctx, f8_layernorm_linear_backward(f.m, sf, &dy, NULL, &dx)); /* the saved state survived */
    CHECK_OK(ctx, f8_layernorm_linear_backward(h.m, sh, &dy, &tl, NULL));
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(f.m, sf, &dy, NULL, &dx), F8_ERR_STATE); /* consumed */
    snap_free(&before), snap_free(&after);

    f8_saved_destroy(sf), f8_saved_destroy(sh), f8_saved_destroy(sg);
    f8_ctx_free(ctx, xb), f8_ctx_free(ctx, yb), f8_ctx_free(ctx, lb), f8_ctx_free(ctx, x16), f8_ctx_free(ctx, big);
    unmake(&f), unmake(&g), unmake(&h);
    f8_module_destroy(NULL);
    f8_saved_destroy(NULL);
}

int main(void)
{
    char why[256];
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, NULL, why);
    if (!ctx) {
        fprintf(stderr, "cannot create a CPU ctx: %s\n", why);
        return 1;
    }
    const float eps_sweep[4] = {1e-1f, 1e-3f, 1e-5f, 1e-7f};
    for (int norm = 0; norm < 2; norm++)
        for (int zc = 0; zc < 2; zc++) {
            for (int e = 0; e < 4; e++) test_hp(ctx, (f8_norm)norm, zc, eps_sweep[e], 0, F8_DTYPE_FP32, 16, 32, 24);
            test_hp(ctx, (f8_norm)norm, zc, 1e-5f, 1, F8_DTYPE_FP32, 13, 20, 7);
            test_hp(ctx, (f8_norm)norm, zc, 1e-5f, zc, F8_DTYPE_BF16, 32, 64, 48);
            test_fp8(ctx, (f8_norm)norm, zc, eps_sweep[(norm * 2 + zc) % 4], 0, F8_DTYPE_FP32, 32, 64, 48);
            test_fp8(ctx, (f8_norm)norm, zc, 1e-5f, 1, F8_DTYPE_FP32, 16, 32, 24);
        }
    test_hp(ctx, F8_NORM_LAYERNORM, 0, 1e-5f, 1, F8_DTYPE_FP32, 64, 128, 96);
    test_fp8(ctx, F8_NORM_LAYERNORM, 1, 1e-5f, 0, F8_DTYPE_BF16, 32, 64, 48);
    test_fp8(ctx, F8_NORM_RMSNORM, 0, 1e-3f, 0, F8_DTYPE_FP32, 13, 40, 24);
    test_slots(ctx, F8_NORM_LAYERNORM, 0);
    test_slots(ctx, F8_NORM_RMSNORM, 1);
    test_workspace_regression(ctx, F8_NORM_LAYERNORM);
    test_workspace_regression(ctx, F8_NORM_RMSNORM);
    test_main_grad(ctx, 0);
    test_main_grad(ctx, 1);
    for (int fp8 = 0; fp8 < 2; fp8++)
        for (int ret = 0; ret < 2; ret++) test_zero_tokens(ctx, fp8, ret);
    test_bad_input(ctx);
    f8_ctx_destroy(ctx);
    return test_finish("test_layernorm_linear");
}
