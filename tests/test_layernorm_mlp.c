/*
 * test_layernorm_mlp.c — f8_module on the CPU backend against FP64
 * references: FP8 off to FP32 rounding (BF16 parameters within TE's 5e-2)
 * for all seven activations (the gated ones on fc1's [a | b] split) and both
 * norms, an eps sweep with zero-centred gamma, central finite differences of
 * the FP64 forward against the module's backward; FP8 on against an oracle
 * built from the FP8 operands (norm output cast with GEMM1_INPUT's scale, the
 * two dequantized weight workspaces, the activation output cast with
 * GEMM2_INPUT's scale, dy cast with GRAD_OUTPUT1's) and within TE's FP8
 * tolerances of FP64; the slots TE writes (§2.5); the #820 workspace
 * regression for fc1 and fc2; main_grad; zero tokens; bad input.
 *
 * The FP8 oracle is interval-aware as in test_layernorm_linear.c: where
 * FP32-vs-FP64 rounding could flip an FP8 code (of the norm output, or of the
 * activation output, whose input carries the fc1 GEMM's rounding and any
 * flipped norm codes), the possible change is carried to y as an elementwise
 * bound; elsewhere the comparison is to FP32 accumulation error.
 */
#include "norm_module_tests.h"

/* ------------------------------------------------------------------------ */
/* Activations and the module's maths in FP64                                */
/* ------------------------------------------------------------------------ */

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

/* The elementwise function of an activation (of a, for the gated ones). */
static double phi(f8_activation act, double x)
{
    switch (act) {
    case F8_ACT_GELU:
    case F8_ACT_GEGLU: return 0.5 * x * (1.0 + tanh(0.79788456 * (x + 0.044715 * x * x * x)));
    case F8_ACT_RELU:
    case F8_ACT_REGLU: return x > 0 ? x : 0.0;
    case F8_ACT_SWIGLU: return x * sigm(x);
    case F8_ACT_QGELU: return x * sigm(1.702 * x);
    case F8_ACT_SRELU: return x > 0 ? x * x : 0.0;
    }
    return NAN;
}

/* Its derivative, by the chain rule on the formulas above. */
static double dphi(f8_activation act, double x)
{
    switch (act) {
    case F8_ACT_GELU:
    case F8_ACT_GEGLU: {
        double u = 0.79788456 * (x + 0.044715 * x * x * x), th = tanh(u);
        double du = 0.79788456 * (1.0 + 3.0 * 0.044715 * x * x);
        return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du;
    }
    case F8_ACT_RELU:
    case F8_ACT_REGLU: return x > 0 ? 1.0 : 0.0;
    case F8_ACT_SWIGLU: return sigm(x) * (1.0 + x * (1.0 - sigm(x)));
    case F8_ACT_QGELU: return sigm(1.702 * x) * (1.0 + 1.702 * x * (1.0 - sigm(1.702 * x)));
    case F8_ACT_SRELU: return x > 0 ? 2.0 * x : 0.0;
    }
    return NAN;
}

static const char *act_name(f8_activation act)
{
    static const char *const names[7] = {"gelu", "relu", "geglu", "reglu", "swiglu", "qgelu", "srelu"};
    return (int)act >= 0 && (int)act < 7 ? names[act] : "?";
}

/* a[T,F] = act(h) with h [T,F1]: gated rows are [a | b], a·b elementwise. */
static void act_rows(f8_activation act, const double *h, double *a, int64_t T, int64_t F)
{
    int gated = f8_activation_gated(act);
    int64_t F1 = gated ? 2 * F : F;
    for (int64_t t = 0; t < T; t++)
        for (int64_t f = 0; f < F; f++)
            a[t * F + f] = phi(act, h[t * F1 + f]) * (gated ? h[t * F1 + F + f] : 1.0);
}

/* dh[T,F1] from da[T,F]: plain φ'(h)·da; gated d_a = φ'(a)·b·da, d_b = φ(a)·da. */
static void act_rows_bwd(f8_activation act, const double *h, const double *da, double *dh, int64_t T, int64_t F)
{
    int gated = f8_activation_gated(act);
    int64_t F1 = gated ? 2 * F : F;
    for (int64_t t = 0; t < T; t++)
        for (int64_t f = 0; f < F; f++) {
            double x = h[t * F1 + f], d = da[t * F + f];
            if (gated) {
                dh[t * F1 + f] = dphi(act, x) * h[t * F1 + F + f] * d;
                dh[t * F1 + F + f] = phi(act, x) * d;
            } else {
                dh[t * F1 + f] = dphi(act, x) * d;
            }
        }
}

typedef struct {
    int64_t T, H, F, F1;
    int rms, zc;
    f8_activation act;
    double eps;
    double *x, *g, *be, *w1, *b1, *w2, *b2; /* [T,H] [H] [H] [F1,H] [F1] [H,F] [H]; absent ones zero */
} model;

/* ln [T,H], h = fc1 output [T,F1], a = activation [T,F], y [T,H]; any but y may be NULL. */
static void model_forward(const model *m, double *ln, double *h, double *a, double *y)
{
    int64_t T = m->T, H = m->H, F = m->F, F1 = m->F1;
    double *l = ln ? ln : dnew((size_t)(T * H)), *hh = h ? h : dnew((size_t)(T * F1));
    double *aa = a ? a : dnew((size_t)(T * F));
    norm_fwd(m->x, T, H, m->g, m->be, m->rms, m->zc, m->eps, l, NULL, NULL);
    mm_nt(l, m->w1, m->b1, hh, T, H, F1, 0);
    act_rows(m->act, hh, aa, T, F);
    mm_nt(aa, m->w2, m->b2, y, T, F, H, 0);
    if (!ln) free(l);
    if (!h) free(hh);
    if (!a) free(aa);
}

typedef struct {
    double *dx, *g, *be, *w1, *b1, *w2, *b2;
} grads64;

static void grads64_alloc(grads64 *d, const model *m)
{
    d->dx = dnew((size_t)(m->T * m->H)), d->g = dnew((size_t)m->H), d->be = dnew((size_t)m->H);
    d->w1 = dnew((size_t)(m->F1 * m->H)), d->b1 = dnew((size_t)m->F1);
    d->w2 = dnew((size_t)(m->H * m->F)), d->b2 = dnew((size_t)m->H);
}

static void grads64_free(grads64 *d) { free(d->dx), free(d->g), free(d->be), free(d->w1), free(d->b1), free(d->w2), free(d->b2); }

static void col_sums(const double *v, double *s, int64_t T, int64_t C)
{
    for (int64_t c = 0; c < C; c++) {
        s[c] = 0;
        for (int64_t t = 0; t < T; t++) s[c] += v[t * C + c];
    }
}

/* Gradients of Σ y·dy. */
static void model_backward(const model *m, const double *dy, grads64 *d)
{
    int64_t T = m->T, H = m->H, F = m->F, F1 = m->F1;
    double *ln = dnew((size_t)(T * H)), *h = dnew((size_t)(T * F1)), *a = dnew((size_t)(T * F));
    double *y = dnew((size_t)(T * H)), *da = dnew((size_t)(T * F)), *dh = dnew((size_t)(T * F1));
    double *dln = dnew((size_t)(T * H));
    model_forward(m, ln, h, a, y);
    mm_nn(dy, m->w2, da, T, H, F, 0);
    mm_tn(dy, a, d->w2, H, T, F, 0);
    col_sums(dy, d->b2, T, H);
    act_rows_bwd(m->act, h, da, dh, T, F);
    mm_tn(dh, ln, d->w1, F1, T, H, 0);
    col_sums(dh, d->b1, T, F1);
    mm_nn(dh, m->w1, dln, T, F1, H, 0);
    norm_bwd(dln, m->x, T, H, m->g, m->rms, m->zc, m->eps, d->dx, d->g, d->be);
    free(ln), free(h), free(a), free(y), free(da), free(dh), free(dln);
}

static double model_loss(const model *m, const double *dy)
{
    double *y = dnew((size_t)(m->T * m->H)), s = 0;
    model_forward(m, NULL, NULL, NULL, y);
    for (int64_t i = 0; i < m->T * m->H; i++) s += y[i] * dy[i];
    free(y);
    return s;
}

/* ------------------------------------------------------------------------ */
/* The module under test                                                     */
/* ------------------------------------------------------------------------ */

/* Host values per f8_param (LN_WEIGHT .. FC2_BIAS); absent ones all zero. */
typedef struct {
    float *v[8];
} params;

static const f8_param mlp_params[6] = {F8_PARAM_LN_WEIGHT, F8_PARAM_LN_BIAS, F8_PARAM_FC1_WEIGHT,
                                       F8_PARAM_FC1_BIAS,  F8_PARAM_FC2_WEIGHT, F8_PARAM_FC2_BIAS};

typedef struct {
    f8_ctx *ctx;
    f8_layernorm_mlp_config c;
    f8_module *m;
    int64_t F1;
    params p; /* the parameter values as stored */
} fixture;

static int64_t fc1_rows(const f8_layernorm_mlp_config *c)
{
    return f8_activation_gated(c->activation) ? 2 * c->ffn_hidden_size : c->ffn_hidden_size;
}

static size_t param_count(const f8_layernorm_mlp_config *c, f8_param which)
{
    int64_t H = c->hidden_size, F = c->ffn_hidden_size, F1 = fc1_rows(c);
    switch (which) {
    case F8_PARAM_FC1_WEIGHT: return (size_t)(F1 * H);
    case F8_PARAM_FC1_BIAS: return (size_t)F1;
    case F8_PARAM_FC2_WEIGHT: return (size_t)(H * F);
    default: return (size_t)H;
    }
}

static int has_param(const f8_layernorm_mlp_config *c, f8_param which)
{
    if (which == F8_PARAM_FC1_BIAS || which == F8_PARAM_FC2_BIAS) return c->bias;
    if (which == F8_PARAM_LN_BIAS) return c->normalization == F8_NORM_LAYERNORM;
    return 1;
}

static void params_alloc(params *p, const f8_layernorm_mlp_config *c)
{
    memset(p, 0, sizeof *p);
    for (int i = 0; i < 6; i++) p->v[mlp_params[i]] = fnew(param_count(c, mlp_params[i]));
}

static void params_free(params *p)
{
    for (int i = 0; i < 8; i++) free(p->v[i]);
}

/* Host copies of the parameters (grad = 0) or of their gradients (grad = 1). */
static void read_all(fixture *f, int grad, params *out)
{
    for (int i = 0; i < 6; i++) {
        f8_param which = mlp_params[i];
        size_t n = param_count(&f->c, which);
        memset(out->v[which], 0, n * sizeof(float));
        if (!has_param(&f->c, which)) continue;
        f8_tensor v;
        CHECK_OK(f->ctx, f8_module_param(f->m, which, grad, &v));
        CHECK(v.rows * v.cols == (int64_t)n && v.dtype == f->c.param_dtype, "param %d view [%lld, %lld] %s", (int)which,
              (long long)v.rows, (long long)v.cols, f8_dtype_name(v.dtype));
        if (v.rows * v.cols == (int64_t)n) load(f->ctx, v.data, v.dtype, out->v[which], n);
    }
}

static f8_layernorm_mlp_config config(int64_t H, int64_t F, f8_norm norm, int zc, float eps, f8_activation act,
                                      f8_dtype pdt, int fp8, int64_t max_tokens)
{
    f8_layernorm_mlp_config c = f8_layernorm_mlp_config_default(H, F);
    c.normalization = norm;
    c.zero_centered_gamma = zc;
    c.eps = eps;
    c.activation = act;
    c.param_dtype = pdt;
    c.fp8 = fp8;
    c.max_tokens = max_tokens;
    return c;
}

/* Create, check the documented initial values (gamma 1, or 0 zero-centred;
 * beta and biases 0; weights sd 0.02), then random parameters: fc1 rows of
 * norm ~1 so the activation sees O(1) inputs, fc2 sd 0.15/sqrt(F) so y has
 * sd ~0.1-0.2. TE's FP8 atol 0.0675 is absolute and TE applies it between two
 * FP8 runs; against FP64, two FP8 GEMM stages err by a few percent of the
 * operands' norms, not of |y|, so larger outputs would need a looser atol.
 * SReLU's h² is heavy-tailed (its few largest products dominate the FP8
 * error), so its fc2 gets half that. */
static fixture make(f8_ctx *ctx, const f8_layernorm_mlp_config *c, uint64_t seed)
{
    fixture f;
    memset(&f, 0, sizeof f);
    f.ctx = ctx;
    f.c = *c;
    f.F1 = fc1_rows(c);
    if (f8_layernorm_mlp_create(ctx, c, &f.m) != F8_OK) die("f8_layernorm_mlp_create", ctx);
    params_alloc(&f.p, c);
    read_all(&f, 0, &f.p);
    int64_t H = c->hidden_size, F = c->ffn_hidden_size;
    int init_ok = 1;
    for (int64_t k = 0; k < H; k++)
        init_ok &= f.p.v[F8_PARAM_LN_WEIGHT][k] == (c->zero_centered_gamma ? 0.0f : 1.0f) &&
                   f.p.v[F8_PARAM_LN_BIAS][k] == 0.0f && f.p.v[F8_PARAM_FC2_BIAS][k] == 0.0f;
    for (int64_t k = 0; k < f.F1; k++) init_ok &= f.p.v[F8_PARAM_FC1_BIAS][k] == 0.0f;
    CHECK(init_ok, "initial gamma/beta/biases are not %s/0/0 (zc=%d)", c->zero_centered_gamma ? "0" : "1",
          c->zero_centered_gamma);
    for (int w = 0; w < 2; w++) {
        f8_param which = w ? F8_PARAM_FC2_WEIGHT : F8_PARAM_FC1_WEIGHT;
        size_t n = param_count(c, which);
        double ss = 0;
        for (size_t i = 0; i < n; i++) ss += (double)f.p.v[which][i] * f.p.v[which][i];
        double sd = sqrt(ss / (double)n);
        CHECK(n < 256 || (sd > 0.015 && sd < 0.025), "initial fc%d weight has sd %g, expected 0.02", w + 1, sd);
    }

    test_rng r = {seed};
    fill_normal(&r, f.p.v[F8_PARAM_LN_WEIGHT], (size_t)H, c->zero_centered_gamma ? 0.0 : 1.0, 0.3);
    fill_normal(&r, f.p.v[F8_PARAM_LN_BIAS], (size_t)H, 0.0, 0.2);
    fill_normal(&r, f.p.v[F8_PARAM_FC1_WEIGHT], (size_t)(f.F1 * H), 0.0, 1.0 / sqrt((double)H));
    fill_normal(&r, f.p.v[F8_PARAM_FC1_BIAS], (size_t)f.F1, 0.0, 0.2);
    fill_normal(&r, f.p.v[F8_PARAM_FC2_WEIGHT], (size_t)(H * F), 0.0, (c->activation == F8_ACT_SRELU ? 0.075 : 0.15) / sqrt((double)F));
    fill_normal(&r, f.p.v[F8_PARAM_FC2_BIAS], (size_t)H, 0.0, 0.1);
    for (int i = 0; i < 6; i++) {
        f8_param which = mlp_params[i];
        size_t n = param_count(c, which);
        if (!has_param(c, which)) {
            memset(f.p.v[which], 0, n * sizeof(float));
            continue;
        }
        f8_tensor view;
        CHECK_OK(ctx, f8_module_param(f.m, which, 0, &view));
        as_stored(f.p.v[which], n, c->param_dtype);
        store(ctx, view.data, f.p.v[which], n, c->param_dtype);
    }
    return f;
}

static void unmake(fixture *f)
{
    f8_module_destroy(f->m);
    params_free(&f->p);
}

static model model_of(const fixture *f, const float *x, int64_t T)
{
    model m;
    m.T = T, m.H = f->c.hidden_size, m.F = f->c.ffn_hidden_size, m.F1 = f->F1;
    m.rms = f->c.normalization == F8_NORM_RMSNORM, m.zc = f->c.zero_centered_gamma;
    m.act = f->c.activation, m.eps = (double)f->c.eps;
    double **dst[6] = {&m.g, &m.be, &m.w1, &m.b1, &m.w2, &m.b2};
    for (int i = 0; i < 6; i++) {
        size_t n = param_count(&f->c, mlp_params[i]);
        *dst[i] = dnew(n);
        widen(f->p.v[mlp_params[i]], *dst[i], n);
    }
    m.x = dnew((size_t)(T * m.H));
    widen(x, m.x, (size_t)(T * m.H));
    return m;
}

static void model_free(model *m) { free(m->x), free(m->g), free(m->be), free(m->w1), free(m->b1), free(m->w2), free(m->b2); }

typedef struct {
    float *y, *dx; /* [T,H] */
    params d;      /* what the step added to the module's gradients */
} outputs;

static void outputs_alloc(outputs *o, const fixture *f, int64_t T)
{
    o->y = fnew((size_t)(T * f->c.hidden_size));
    o->dx = fnew((size_t)(T * f->c.hidden_size));
    params_alloc(&o->d, &f->c);
}

static void outputs_free(outputs *o)
{
    free(o->y), free(o->dx);
    params_free(&o->d);
}

/* One forward (microbatch mb) and backward; x, y, dy, dx all dt. */
static void step(fixture *f, int64_t T, const float *x, const float *dy, f8_dtype dt, f8_microbatch mb, outputs *o)
{
    f8_ctx *ctx = f->ctx;
    int64_t H = f->c.hidden_size;
    size_t n = (size_t)(T * H);
    params before;
    params_alloc(&before, &f->c);
    read_all(f, 1, &before);
    void *xb = put(ctx, x, n, dt), *yb = put(ctx, NULL, n, dt), *dyb = put(ctx, dy, n, dt), *dxb = put(ctx, NULL, n, dt);
    f8_tensor tx = f8_tensor_make(xb, dt, T, H), ty = f8_tensor_make(yb, dt, T, H);
    f8_tensor tdy = f8_tensor_make(dyb, dt, T, H), tdx = f8_tensor_make(dxb, dt, T, H);
    f8_saved *s = NULL;
    CHECK_OK(ctx, f8_module_saved_create(f->m, &s));
    CHECK_OK(ctx, f8_module_forward(f->m, &tx, &ty, mb, s));
    CHECK_OK(ctx, f8_module_backward(f->m, s, &tdy, &tdx));
    f8_saved_destroy(s);
    load(ctx, yb, dt, o->y, n);
    load(ctx, dxb, dt, o->dx, n);
    read_all(f, 1, &o->d);
    for (int i = 0; i < 6; i++) {
        f8_param which = mlp_params[i];
        size_t c = param_count(&f->c, which);
        for (size_t j = 0; j < c; j++) o->d.v[which][j] -= before.v[which][j];
    }
    params_free(&before);
    f8_ctx_free(ctx, xb), f8_ctx_free(ctx, yb), f8_ctx_free(ctx, dyb), f8_ctx_free(ctx, dxb);
}

/* Module gradient vs central difference of the FP64 loss at one coordinate. */
static void fd_check(const char *tag, const char *name, int64_t i, double *coord, const model *m, const double *dy,
                     float analytic, double scale)
{
    double h = 1e-4 * (1.0 + fabs(*coord)), keep = *coord;
    *coord = keep + h;
    double lp = model_loss(m, dy);
    *coord = keep - h;
    double lm = model_loss(m, dy);
    *coord = keep;
    double fd = (lp - lm) / (2 * h);
    CHECK(fabs(fd - analytic) <= 1e-4 * (fabs(fd) + scale), "%s: FD %s[%lld]: finite difference %.8g vs module %.8g",
          tag, name, (long long)i, fd, (double)analytic);
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                     */
/* ------------------------------------------------------------------------ */

/* Compare one gradient by relative error. */
#define CHECK_REL(tag, name, got, want, n, tol)                                  \
    CHECK(rel_error((got), (want), (n)) < (tol), "%s: %s rel err %g (tol %g)", (tag), (name), \
          rel_error((got), (want), (n)), (double)(tol))

/* FP8 off: y and every gradient against FP64. FP32 parameters to FP32
 * rounding (and TE's fp32 atol 5e-3) plus finite differences where the
 * activation is smooth; BF16 within TE's 5e-2. */
static void test_hp(f8_ctx *ctx, f8_norm norm, int zc, float eps, f8_activation act, f8_dtype pdt, int64_t T,
                    int64_t H, int64_t F)
{
    f8_layernorm_mlp_config c = config(H, F, norm, zc, eps, act, pdt, 0, T);
    char tag[160];
    snprintf(tag, sizeof tag, "hp %s %s zc=%d eps=%g %s T=%lld H=%lld F=%lld", act_name(act), norm ? "rms" : "ln", zc,
             (double)eps, f8_dtype_name(pdt), (long long)T, (long long)H, (long long)F);
    fixture f = make(ctx, &c, 40 + (uint64_t)act * 11 + (uint64_t)norm * 3 + (uint64_t)zc);
    size_t n = (size_t)(T * H), n1 = (size_t)(f.F1 * H), n2 = (size_t)(H * F);
    float *x = fnew(n), *dy = fnew(n);
    test_rng r = {(uint64_t)(T * 17 + H + F) + (uint64_t)act + (uint64_t)(eps * 1e7f)};
    make_input(&r, x, T, H);
    fill_normal(&r, dy, n, 0.0, 1.0);
    as_stored(x, n, pdt), as_stored(dy, n, pdt);
    outputs o;
    outputs_alloc(&o, &f, T);
    step(&f, T, x, dy, pdt, F8_MICROBATCH_NONE, &o);
    model m = model_of(&f, x, T);
    double *y = dnew(n), *dyd = dnew(n);
    widen(dy, dyd, n);
    model_forward(&m, NULL, NULL, NULL, y);
    grads64 d;
    grads64_alloc(&d, &m);
    model_backward(&m, dyd, &d);
    int fp32 = pdt == F8_DTYPE_FP32;
    /* FP32: sums of ~H and ~F terms through two GEMMs, an activation and the norm backward. */
    double tol = fp32 ? 2e-6 * sqrt((double)(H + F + T)) : 3e-2;
    size_t bi;
    CHECK(te_misses(o.y, y, n, fp32 ? 0.0 : 1.6e-2, fp32 ? 5e-3 : 5e-2, &bi) == 0, "%s: y[%zu] %g vs %g", tag, bi,
          (double)o.y[bi], y[bi]);
    CHECK_REL(tag, "y", o.y, y, n, fp32 ? tol : 1e-2);
    CHECK_REL(tag, "dx", o.dx, d.dx, n, tol);
    CHECK_REL(tag, "dgamma", o.d.v[F8_PARAM_LN_WEIGHT], d.g, (size_t)H, tol);
    if (norm == F8_NORM_LAYERNORM) CHECK_REL(tag, "dbeta", o.d.v[F8_PARAM_LN_BIAS], d.be, (size_t)H, tol);
    CHECK_REL(tag, "dW1", o.d.v[F8_PARAM_FC1_WEIGHT], d.w1, n1, tol);
    CHECK_REL(tag, "db1", o.d.v[F8_PARAM_FC1_BIAS], d.b1, (size_t)f.F1, tol);
    CHECK_REL(tag, "dW2", o.d.v[F8_PARAM_FC2_WEIGHT], d.w2, n2, tol);
    CHECK_REL(tag, "db2", o.d.v[F8_PARAM_FC2_BIAS], d.b2, (size_t)H, tol);
    if (getenv("F8_TEST_VERBOSE"))
        printf("%s: y %.3g dx %.3g dW1 %.3g db1 %.3g dW2 %.3g dg %.3g\n", tag, rel_error(o.y, y, n),
               rel_error(o.dx, d.dx, n), rel_error(o.d.v[F8_PARAM_FC1_WEIGHT], d.w1, n1),
               rel_error(o.d.v[F8_PARAM_FC1_BIAS], d.b1, (size_t)f.F1), rel_error(o.d.v[F8_PARAM_FC2_WEIGHT], d.w2, n2),
               rel_error(o.d.v[F8_PARAM_LN_WEIGHT], d.g, (size_t)H));

    /* Finite differences (not across relu's kink, which a step can cross). */
    if (fp32 && act != F8_ACT_RELU && act != F8_ACT_REGLU) {
        double sx = rms_of(o.dx, n), sg = rms_of(o.d.v[F8_PARAM_LN_WEIGHT], (size_t)H);
        double sbe = rms_of(o.d.v[F8_PARAM_LN_BIAS], (size_t)H), sw1 = rms_of(o.d.v[F8_PARAM_FC1_WEIGHT], n1);
        double sb1 = rms_of(o.d.v[F8_PARAM_FC1_BIAS], (size_t)f.F1), sw2 = rms_of(o.d.v[F8_PARAM_FC2_WEIGHT], n2);
        double sb2 = rms_of(o.d.v[F8_PARAM_FC2_BIAS], (size_t)H);
        for (int trial = 0; trial < 2; trial++) {
            int64_t i = (int64_t)(rng_u64(&r) % n), k = (int64_t)(rng_u64(&r) % (uint64_t)H);
            int64_t j1 = (int64_t)(rng_u64(&r) % n1), j2 = (int64_t)(rng_u64(&r) % n2);
            int64_t f1 = (int64_t)(rng_u64(&r) % (uint64_t)f.F1);
            fd_check(tag, "dx", i, &m.x[i], &m, dyd, o.dx[i], sx);
            fd_check(tag, "dgamma", k, &m.g[k], &m, dyd, o.d.v[F8_PARAM_LN_WEIGHT][k], sg);
            if (norm == F8_NORM_LAYERNORM) fd_check(tag, "dbeta", k, &m.be[k], &m, dyd, o.d.v[F8_PARAM_LN_BIAS][k], sbe);
            fd_check(tag, "dW1", j1, &m.w1[j1], &m, dyd, o.d.v[F8_PARAM_FC1_WEIGHT][j1], sw1);
            fd_check(tag, "db1", f1, &m.b1[f1], &m, dyd, o.d.v[F8_PARAM_FC1_BIAS][f1], sb1);
            fd_check(tag, "dW2", j2, &m.w2[j2], &m, dyd, o.d.v[F8_PARAM_FC2_WEIGHT][j2], sw2);
            fd_check(tag, "db2", k, &m.b2[k], &m, dyd, o.d.v[F8_PARAM_FC2_BIAS][k], sb2);
        }
    }
    grads64_free(&d);
    model_free(&m);
    outputs_free(&o);
    unmake(&f);
    free(x), free(dy), free(y), free(dyd);
}

/* Dequantized weight workspace (0 fc1 [F1,H], 1 fc2 [H,F]) on the host, with
 * its codes and scale_inv. */
static void workspace_host(fixture *f, int which, double *wq, uint8_t *codes, float *sinv)
{
    int64_t rows = which ? f->c.hidden_size : f->F1, cols = which ? f->c.ffn_hidden_size : f->c.hidden_size;
    const f8_qtensor *q = f8_module_weight_workspace(f->m, (which) ? F8_PARAM_FC2_WEIGHT : F8_PARAM_FC1_WEIGHT);
    NEED(q != NULL, "no weight workspace");
    f8_tensor v = qtensor_host(f->ctx, q, rows, cols, wq, codes, sinv);
    CHECK(v.rows == rows && v.cols == cols, "workspace %d is [%lld, %lld]", which, (long long)v.rows, (long long)v.cols);
}

/* The forward through the FP8 operands: h = fc1 output (and hb, how far the
 * library's may be from it), aq = the activation output's FP8 value (amb: how
 * far a flipped code could move it), y with its elementwise bound. */
typedef struct {
    double *h, *hb, *aq, *amb, *y, *ybound;
} fwd_oracle;

static void fwd_oracle_build(const model *m, const double *lnq, const double *amb_ln, const double *w1q,
                             const double *w2q, float sc_act, f8_dtype e4, int bf16, fwd_oracle *o)
{
    int64_t T = m->T, H = m->H, F = m->F, F1 = m->F1;
    int gated = f8_activation_gated(m->act);
    double *tmp = dnew((size_t)(T * (F1 > H ? F1 : H)));
    o->h = dnew((size_t)(T * F1)), o->hb = dnew((size_t)(T * F1)), o->aq = dnew((size_t)(T * F));
    o->amb = dnew((size_t)(T * F)), o->y = dnew((size_t)(T * H)), o->ybound = dnew((size_t)(T * H));
    double cH = 2e-7 * (double)H + 1e-6, cF = 2e-7 * (double)F + 1e-6;
    mm_nt(lnq, w1q, m->b1, o->h, T, H, F1, 0);
    mm_nt(lnq, w1q, m->b1, o->hb, T, H, F1, 1);
    mm_nt(amb_ln, w1q, NULL, tmp, T, H, F1, 1);
    for (int64_t i = 0; i < T * F1; i++) {
        o->hb[i] = cH * o->hb[i] + tmp[i];
        if (bf16) o->hb[i] += (fabs(o->h[i]) + o->hb[i]) / 256.0; /* a BF16 fc1 output */
    }
    /* The activation over the box of h (gated: of a and b), sampled on a
     * 5-point grid per input; the FP8 cast is monotone, so the extremes bound
     * the codes. 2e-6 relative covers FP32 evaluation of the activation. */
    for (int64_t t = 0; t < T; t++)
        for (int64_t f = 0; f < F; f++) {
            int64_t ia = t * F1 + f, ib = t * F1 + F + f;
            double a0 = o->h[ia], b0 = gated ? o->h[ib] : 1.0, wa = o->hb[ia], wb = gated ? o->hb[ib] : 0.0;
            double v0 = phi(m->act, a0) * b0, lo = v0, hi = v0;
            for (int i = -2; i <= 2; i++)
                for (int j = -2; j <= 2; j++) {
                    double v = phi(m->act, a0 + 0.5 * i * wa) * (b0 + 0.5 * j * wb);
                    lo = fmin(lo, v), hi = fmax(hi, v);
                }
            lo -= 2e-6 * fabs(lo) + 1e-30, hi += 2e-6 * fabs(hi) + 1e-30;
            double q = fq(v0, sc_act, e4);
            o->aq[t * F + f] = q;
            o->amb[t * F + f] = fmax(fabs(fq(lo, sc_act, e4) - q), fabs(fq(hi, sc_act, e4) - q));
        }
    mm_nt(o->aq, w2q, m->b2, o->y, T, F, H, 0);
    mm_nt(o->aq, w2q, m->b2, o->ybound, T, F, H, 1);
    mm_nt(o->amb, w2q, NULL, tmp, T, F, H, 1);
    for (int64_t i = 0; i < T * H; i++) {
        o->ybound[i] = cF * o->ybound[i] + tmp[i] + 1e-30;
        if (bf16) o->ybound[i] += (fabs(o->y[i]) + o->ybound[i]) / 256.0; /* a BF16 y */
    }
    free(tmp);
}

static void fwd_oracle_free(fwd_oracle *o) { free(o->h), free(o->hb), free(o->aq), free(o->amb), free(o->y), free(o->ybound); }

static size_t count_nonzero(const double *v, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += v[i] != 0;
    return c;
}

/* FP8 on, two steps (the second on amax-derived scales): y equals the
 * FP8-operand oracle and is within TE's FP8 tolerance of FP64; dW2, db2 and
 * db1 equal their oracles; the other gradients are close to FP64. */
static void test_fp8(f8_ctx *ctx, f8_norm norm, int zc, float eps, f8_activation act, f8_dtype pdt, int64_t T,
                     int64_t H, int64_t F)
{
    f8_layernorm_mlp_config c = config(H, F, norm, zc, eps, act, pdt, 1, T);
    char tag[160];
    snprintf(tag, sizeof tag, "fp8 %s %s zc=%d eps=%g %s T=%lld H=%lld F=%lld", act_name(act), norm ? "rms" : "ln", zc,
             (double)eps, f8_dtype_name(pdt), (long long)T, (long long)H, (long long)F);
    fixture f = make(ctx, &c, 900 + (uint64_t)act * 5 + (uint64_t)norm * 2 + (uint64_t)zc);
    int64_t F1 = f.F1;
    size_t n = (size_t)(T * H), n1 = (size_t)(F1 * H), n2 = (size_t)(H * F), na = (size_t)(T * F);
    float *x = fnew(n), *dy = fnew(n);
    double *ln = dnew(n), *err = dnew(n), *lnq = dnew(n), *amb = dnew(n), *w1q = dnew(n1), *w2q = dnew(n2);
    double *y = dnew(n), *dyd = dnew(n), *gq = dnew(n), *dw2 = dnew(n2), *dw2b = dnew(n2), *tmp = dnew(n2);
    double *da = dnew(na), *dh = dnew((size_t)(T * F1)), *db1 = dnew((size_t)F1), *db2 = dnew((size_t)H);
    uint8_t *codes = (uint8_t *)xmalloc(n1 > n2 ? n1 : n2);
    f8_slot s_in, s_w1, s_act, s_w2, s_go;
    CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, 0, &s_in));
    CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, 1, &s_w1));
    CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, 3, &s_act));
    CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, 4, &s_w2));
    CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_BACKWARD, 0, &s_go));
    f8_dtype e4 = f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD), e5 = f8_ctx_slot_dtype(ctx, F8_DIR_BACKWARD);
    int bf = pdt == F8_DTYPE_BF16;
    test_rng r = {(uint64_t)(T * 3 + H * 5 + F) + (uint64_t)act * 101 + (uint64_t)(eps * 1e7f)};
    outputs o;
    outputs_alloc(&o, &f, T);
    for (int it = 0; it < 2; it++) {
        make_input(&r, x, T, H);
        fill_normal(&r, dy, n, 0.0, 1e-2);
        as_stored(x, n, pdt), as_stored(dy, n, pdt);
        float sc_in, sc_w1, sc_act, sc_w2, sc_go, sinv;
        CHECK_OK(ctx, f8_slot_read(ctx, s_in, &sc_in, NULL, NULL));
        CHECK_OK(ctx, f8_slot_read(ctx, s_w1, &sc_w1, NULL, NULL));
        CHECK_OK(ctx, f8_slot_read(ctx, s_act, &sc_act, NULL, NULL));
        CHECK_OK(ctx, f8_slot_read(ctx, s_w2, &sc_w2, NULL, NULL));
        CHECK_OK(ctx, f8_slot_read(ctx, s_go, &sc_go, NULL, NULL));
        if (it == 1)
            CHECK(sc_in != 1.0f && sc_w1 != 1.0f && sc_act != 1.0f && sc_w2 != 1.0f && sc_go != 1.0f,
                  "%s: scales did not update", tag);
        CHECK_OK(ctx, f8_module_zero_grad(f.m));
        step(&f, T, x, dy, pdt, F8_MICROBATCH_NONE, &o);

        /* Each workspace is the cast of its weight with its slot's scale. */
        for (int w = 0; w < 2; w++) {
            const float *wv = f.p.v[w ? F8_PARAM_FC2_WEIGHT : F8_PARAM_FC1_WEIGHT];
            float sc = w ? sc_w2 : sc_w1;
            size_t nw = w ? n2 : n1, bad = 0;
            workspace_host(&f, w, w ? w2q : w1q, codes, &sinv);
            for (size_t i = 0; i < nw; i++) bad += codes[i] != f8_fp8_from_float(wv[i] * sc, e4);
            CHECK(bad == 0 && sinv == 1.0f / sc, "%s: fc%d workspace: %zu codes differ from the cast, scale_inv %g vs %g",
                  tag, w + 1, bad, (double)sinv, 1.0 / sc);
        }

        model m = model_of(&f, x, T);
        widen(dy, dyd, n);
        model_forward(&m, ln, NULL, NULL, y);
        norm_error_bound(m.x, m.T, m.H, m.g, m.be, m.rms, m.zc, m.eps, ln, err);
        for (size_t i = 0; i < n; i++) lnq[i] = fq_amb(ln[i], err[i], sc_in, e4, &amb[i]);
        fwd_oracle q;
        fwd_oracle_build(&m, lnq, amb, w1q, w2q, sc_act, e4, bf, &q);
        size_t wi, nb = over_bound(o.y, q.y, q.ybound, n, &wi);
        CHECK(nb == 0, "%s step %d: %zu y beyond the FP8-operand oracle, y[%zu] %.9g vs %.9g (bound %g); rel err %g",
              tag, it, nb, wi, (double)o.y[wi], q.y[wi], q.ybound[wi], rel_error(o.y, q.y, n));
        size_t first;
        nb = te_misses(o.y, y, n, 0.125, 0.0675, &first);
        CHECK(nb == 0, "%s step %d: %zu y outside TE's FP8 tolerance, y[%zu] %g vs fp64 %g", tag, it, nb, first,
              (double)o.y[first], y[first]);

        /* Backward: fc2's gradients from dy's E5M2 codes and the FP8
         * activation output; db1 from the high-precision d-activation. */
        for (size_t i = 0; i < n; i++) gq[i] = fq(dy[i], sc_go, e5);
        mm_tn(gq, q.aq, dw2, H, T, F, 0);
        mm_tn(gq, q.aq, dw2b, H, T, F, 1);
        mm_tn(gq, q.amb, tmp, H, T, F, 1);
        for (size_t i = 0; i < n2; i++) {
            dw2b[i] = (2e-7 * (double)T + 1e-6) * dw2b[i] + tmp[i] + 1e-30;
            if (bf) dw2b[i] += (fabs(dw2[i]) + dw2b[i]) / 256.0;
        }
        nb = over_bound(o.d.v[F8_PARAM_FC2_WEIGHT], dw2, dw2b, n2, &wi);
        CHECK(nb == 0, "%s step %d: %zu dW2 beyond the oracle, dW2[%zu] %.9g vs %.9g (bound %g)", tag, it, nb, wi,
              (double)o.d.v[F8_PARAM_FC2_WEIGHT][wi], dw2[wi], dw2b[wi]);
        col_sums(dyd, db2, T, H);
        CHECK_REL(tag, "db2 (unquantized dy)", o.d.v[F8_PARAM_FC2_BIAS], db2, (size_t)H, bf ? 1e-2 : 1e-5);
        mm_nn(gq, w2q, da, T, H, F, 0);
        act_rows_bwd(act, q.h, da, dh, T, F);
        col_sums(dh, db1, T, F1);
        CHECK_REL(tag, "db1 vs oracle", o.d.v[F8_PARAM_FC1_BIAS], db1, (size_t)F1, bf ? 3e-2 : 1e-4);

        /* Through two E5M2 casts (dy, d-activation) and relu's gate moved by FP8 h. */
        grads64 d;
        grads64_alloc(&d, &m);
        model_backward(&m, dyd, &d);
        CHECK_REL(tag, "dx vs fp64", o.dx, d.dx, n, 0.3);
        CHECK_REL(tag, "dW1 vs fp64", o.d.v[F8_PARAM_FC1_WEIGHT], d.w1, n1, 0.3);
        CHECK_REL(tag, "dW2 vs fp64", o.d.v[F8_PARAM_FC2_WEIGHT], d.w2, n2, 0.3);
        CHECK_REL(tag, "dgamma vs fp64", o.d.v[F8_PARAM_LN_WEIGHT], d.g, (size_t)H, 0.3);
        if (norm == F8_NORM_LAYERNORM) CHECK_REL(tag, "dbeta vs fp64", o.d.v[F8_PARAM_LN_BIAS], d.be, (size_t)H, 0.3);
        if (getenv("F8_TEST_VERBOSE"))
            printf("%s step %d: y rel %.3g vs oracle (amb ln %zu act %zu), %.3g vs fp64 (TE ratio %.2f); db1 %.3g; "
                   "fp64: dx %.3g dW1 %.3g dW2 %.3g dg %.3g\n",
                   tag, it, rel_error(o.y, q.y, n), count_nonzero(amb, n), count_nonzero(q.amb, na),
                   rel_error(o.y, y, n), te_ratio(o.y, y, n, 0.125, 0.0675),
                   rel_error(o.d.v[F8_PARAM_FC1_BIAS], db1, (size_t)F1), rel_error(o.dx, d.dx, n),
                   rel_error(o.d.v[F8_PARAM_FC1_WEIGHT], d.w1, n1), rel_error(o.d.v[F8_PARAM_FC2_WEIGHT], d.w2, n2),
                   rel_error(o.d.v[F8_PARAM_LN_WEIGHT], d.g, (size_t)H));
        grads64_free(&d);
        fwd_oracle_free(&q);
        model_free(&m);
        CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
        CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_BACKWARD));
    }
    outputs_free(&o);
    unmake(&f);
    free(x), free(dy), free(ln), free(err), free(lnq), free(amb), free(w1q), free(w2q), free(y), free(dyd), free(gq);
    free(dw2), free(dw2b), free(tmp), free(da), free(dh), free(db1), free(db2), free(codes);
}

/* TE §2.5: a FP8 forward + backward writes forward slots 0 (norm output),
 * 1 (fc1 weight), 3 (activation output), 4 (fc2 weight) and backward slots
 * 0 (dy) and 2 (the d-activation, fc1's dY); slots 2 and 5 forward, 1 and 3
 * backward keep amax 0 and, after the update, scale 1. */
static void test_slots(f8_ctx *ctx, f8_norm norm, f8_activation act)
{
    const int64_t T = 16, H = 32, F = 48;
    f8_layernorm_mlp_config c = config(H, F, norm, 0, 1e-5f, act, F8_DTYPE_FP32, 1, T);
    fixture f = make(ctx, &c, 61 + (uint64_t)act);
    size_t n = (size_t)(T * H);
    float *x = fnew(n), *dy = fnew(n);
    test_rng r = {61};
    make_input(&r, x, T, H);
    fill_normal(&r, dy, n, 0.0, 0.1);
    f8_slot s[10];
    for (int i = 0; i < 6; i++) CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, i, &s[i]));
    for (int i = 0; i < 4; i++) CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_BACKWARD, i, &s[6 + i]));
    float a[10], sc[10];
    int empty = 1;
    for (int i = 0; i < 10; i++) empty &= slot_amax(ctx, s[i], &sc[i]) == 0.0f;
    CHECK(empty, "slots not empty at creation");
    outputs o;
    outputs_alloc(&o, &f, T);
    step(&f, T, x, dy, F8_DTYPE_FP32, F8_MICROBATCH_NONE, &o);
    for (int i = 0; i < 10; i++) a[i] = slot_amax(ctx, s[i], &sc[i]);
    model m = model_of(&f, x, T);
    double *ln = dnew(n), *h = dnew((size_t)(T * f.F1)), *av = dnew((size_t)(T * F)), *y = dnew(n);
    model_forward(&m, ln, h, av, y);
    /* The activation amax is of what the module computed: act of the fc1
     * output through the FP8 operands (slots at scale 1 in this first step). */
    double *err = dnew(n), *lnq = dnew(n), *amb = dnew(n), *w1q = dnew((size_t)(f.F1 * H)), *w2q = dnew((size_t)(H * F));
    norm_error_bound(m.x, m.T, m.H, m.g, m.be, m.rms, m.zc, m.eps, ln, err);
    for (size_t i = 0; i < n; i++) lnq[i] = fq_amb(ln[i], err[i], 1.0f, F8_DTYPE_E4M3, &amb[i]);
    workspace_host(&f, 0, w1q, NULL, NULL);
    workspace_host(&f, 1, w2q, NULL, NULL);
    fwd_oracle q;
    fwd_oracle_build(&m, lnq, amb, w1q, w2q, 1.0f, F8_DTYPE_E4M3, 0, &q);
    act_rows(act, q.h, av, T, F);
    double want_ln = max_abs_d(ln, n), want_act = max_abs_d(av, (size_t)(T * F));
    fwd_oracle_free(&q);
    free(err), free(lnq), free(amb), free(w1q), free(w2q);
    const float *w1 = f.p.v[F8_PARAM_FC1_WEIGHT], *w2 = f.p.v[F8_PARAM_FC2_WEIGHT];
    CHECK(fabs(a[0] - want_ln) <= 1e-5 * want_ln, "%s: GEMM1_INPUT amax %g, max|norm(x)| %g", act_name(act),
          (double)a[0], want_ln);
    CHECK(a[1] == max_abs_f(w1, (size_t)(f.F1 * H)), "GEMM1_WEIGHT amax %g, max|W1| %g", (double)a[1],
          (double)max_abs_f(w1, (size_t)(f.F1 * H)));
    CHECK(fabs(a[3] - want_act) <= 1e-4 * want_act, "%s: GEMM2_INPUT amax %g, max|act| %g", act_name(act),
          (double)a[3], want_act);
    CHECK(a[4] == max_abs_f(w2, (size_t)(H * F)), "GEMM2_WEIGHT amax %g, max|W2| %g", (double)a[4],
          (double)max_abs_f(w2, (size_t)(H * F)));
    CHECK(a[6] == max_abs_f(dy, n), "GRAD_OUTPUT1 amax %g, max|dy| %g", (double)a[6], (double)max_abs_f(dy, n));
    CHECK(a[8] > 0.0f, "%s: GRAD_OUTPUT2 (d-activation) not written", act_name(act));
    CHECK(a[2] == 0.0f && a[5] == 0.0f, "GEMM1_OUTPUT / GEMM2_OUTPUT written (amax %g, %g)", (double)a[2],
          (double)a[5]);
    CHECK(a[7] == 0.0f && a[9] == 0.0f, "GRAD_INPUT1 / GRAD_INPUT2 written (amax %g, %g)", (double)a[7], (double)a[9]);
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_BACKWARD));
    for (int i = 0; i < 10; i++) a[i] = slot_amax(ctx, s[i], &sc[i]);
    CHECK(sc[2] == 1.0f && sc[5] == 1.0f && sc[7] == 1.0f && sc[9] == 1.0f, "unused slots' scales moved");
    CHECK(sc[0] != 1.0f && sc[1] != 1.0f && sc[3] != 1.0f && sc[4] != 1.0f && sc[6] != 1.0f && sc[8] != 1.0f,
          "used slots' scales did not move");
    f8_slot extra;
    CHECK_STATUS(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, 6, &extra), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_slot(f.m, F8_DIR_BACKWARD, 4, &extra), F8_ERR_INVALID_ARGUMENT);
    model_free(&m);
    outputs_free(&o);
    unmake(&f);
    free(x), free(dy), free(ln), free(h), free(av), free(y);
}

/* TE #820 for both weights: microbatch 1 (FIRST) casts W1 and W2; the
 * forward scale update moves both weight scales; microbatch 2 (NOT_FIRST,
 * same x) must use both workspaces' microbatch-1 codes with their own
 * scale_inv, and write neither weight slot's amax. */
static void test_workspace_regression(f8_ctx *ctx, f8_activation act)
{
    const int64_t T = 16, H = 32, F = 48;
    f8_layernorm_mlp_config c = config(H, F, F8_NORM_LAYERNORM, 0, 1e-5f, act, F8_DTYPE_FP32, 1, T);
    fixture f = make(ctx, &c, 820);
    int64_t F1 = f.F1;
    size_t n = (size_t)(T * H), nw[2] = {(size_t)(F1 * H), (size_t)(H * F)};
    float *x = fnew(n), *dy = fnew(n);
    double *wq[2], *wq_after = dnew(nw[0] > nw[1] ? nw[0] : nw[1]), *wbug = dnew(nw[0] > nw[1] ? nw[0] : nw[1]);
    double *ln = dnew(n), *err = dnew(n), *lnq = dnew(n), *amb = dnew(n), *y = dnew(n);
    uint8_t *c1[2], *c2 = (uint8_t *)xmalloc(nw[0] > nw[1] ? nw[0] : nw[1]);
    float sinv1[2], sinv2, sw1[2], sw2[2], s_in2, s_act2;
    test_rng r = {820};
    make_input(&r, x, T, H);
    fill_normal(&r, dy, n, 0.0, 1e-2);
    f8_slot sl[5];
    for (int i = 0; i < 5; i++) CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, i, &sl[i]));
    outputs o;
    outputs_alloc(&o, &f, T);
    for (int w = 0; w < 2; w++) CHECK_OK(ctx, f8_slot_read(ctx, sl[w ? 4 : 1], &sw1[w], NULL, NULL));
    step(&f, T, x, dy, F8_DTYPE_FP32, F8_MICROBATCH_FIRST, &o);
    for (int w = 0; w < 2; w++) {
        wq[w] = dnew(nw[w]);
        c1[w] = (uint8_t *)xmalloc(nw[w]);
        workspace_host(&f, w, wq[w], c1[w], &sinv1[w]);
        CHECK(sinv1[w] == 1.0f / sw1[w], "fc%d workspace scale_inv %g after FIRST, expected %g", w + 1,
              (double)sinv1[w], 1.0 / sw1[w]);
    }
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
    for (int w = 0; w < 2; w++) {
        CHECK_OK(ctx, f8_slot_read(ctx, sl[w ? 4 : 1], &sw2[w], NULL, NULL));
        CHECK(sw2[w] != sw1[w], "fc%d weight scale did not change: the regression would prove nothing", w + 1);
    }
    CHECK_OK(ctx, f8_slot_read(ctx, sl[0], &s_in2, NULL, NULL));
    CHECK_OK(ctx, f8_slot_read(ctx, sl[3], &s_act2, NULL, NULL));

    step(&f, T, x, dy, F8_DTYPE_FP32, F8_MICROBATCH_NOT_FIRST, &o);
    for (int w = 0; w < 2; w++) {
        workspace_host(&f, w, wq_after, c2, &sinv2);
        CHECK(memcmp(c1[w], c2, nw[w]) == 0 && sinv2 == sinv1[w], "NOT_FIRST rewrote the fc%d workspace (scale_inv %g -> %g)",
              w + 1, (double)sinv1[w], (double)sinv2);
    }
    float am[5];
    for (int i = 0; i < 5; i++) am[i] = slot_amax(ctx, sl[i], NULL);
    CHECK(am[1] == 0.0f && am[4] == 0.0f && am[0] > 0.0f && am[3] > 0.0f,
          "NOT_FIRST: weight amaxes %g %g (want 0), input amaxes %g %g (want > 0)", (double)am[1], (double)am[4],
          (double)am[0], (double)am[3]);

    model m = model_of(&f, x, T);
    model_forward(&m, ln, NULL, NULL, y);
    norm_error_bound(m.x, m.T, m.H, m.g, m.be, m.rms, m.zc, m.eps, ln, err);
    for (size_t i = 0; i < n; i++) lnq[i] = fq_amb(ln[i], err[i], s_in2, F8_DTYPE_E4M3, &amb[i]);
    fwd_oracle q;
    fwd_oracle_build(&m, lnq, amb, wq[0], wq[1], s_act2, F8_DTYPE_E4M3, 0, &q);
    size_t wi, nb = over_bound(o.y, q.y, q.ybound, n, &wi);
    CHECK(nb == 0, "%s microbatch 2: %zu y off the microbatch-1 workspaces' oracle, y[%zu] %.9g vs %.9g (bound %g)",
          act_name(act), nb, wi, (double)o.y[wi], q.y[wi], q.ybound[wi]);
    /* The pre-#820 bug, one weight at a time: microbatch-1 codes with the new scale_inv. */
    for (int w = 0; w < 2; w++) {
        for (size_t i = 0; i < nw[w]; i++) wbug[i] = wq[w][i] * sw1[w] / sw2[w];
        fwd_oracle b;
        fwd_oracle_build(&m, lnq, amb, w ? wq[0] : wbug, w ? wbug : wq[1], s_act2, F8_DTYPE_E4M3, 0, &b);
        CHECK(rel_error(o.y, b.y, n) > 1e-2, "%s microbatch 2 matches the stale-scale bug of fc%d (rel %g)",
              act_name(act), w + 1, rel_error(o.y, b.y, n));
        fwd_oracle_free(&b);
    }
    fwd_oracle_free(&q);
    model_free(&m);
    outputs_free(&o);
    unmake(&f);
    for (int w = 0; w < 2; w++) free(wq[w]), free(c1[w]);
    free(x), free(dy), free(wq_after), free(wbug), free(ln), free(err), free(lnq), free(amb), free(y), free(c2);
}

/* main_grad per §4.3 for fc1 and fc2: FIRST overwrites, NOT_FIRST and NONE
 * accumulate; the module's weight gradients stay 0, the others accumulate. */
static void test_main_grad(f8_ctx *ctx, int fp8)
{
    const int64_t T = 16, H = 32, F = 48;
    f8_layernorm_mlp_config c = config(H, F, F8_NORM_LAYERNORM, 0, 1e-5f, F8_ACT_SWIGLU, F8_DTYPE_FP32, fp8, T);
    c.fuse_wgrad_accumulation = 1;
    fixture f = make(ctx, &c, 33);
    int64_t F1 = f.F1;
    size_t n = (size_t)(T * H), nw[2] = {(size_t)(F1 * H), (size_t)(H * F)};
    float *x = fnew(n), *dy = fnew(n), *g[2][3];
    test_rng r = {33};
    make_input(&r, x, T, H);
    fill_normal(&r, dy, n, 0.0, 0.1);
    void *mg[2];
    for (int w = 0; w < 2; w++) {
        float *seven = fnew(nw[w]);
        for (size_t i = 0; i < nw[w]; i++) seven[i] = 7.0f;
        mg[w] = put(ctx, seven, nw[w], F8_DTYPE_FP32);
        free(seven);
    }
    void *xb = put(ctx, x, n, F8_DTYPE_FP32), *yb = put(ctx, NULL, n, F8_DTYPE_FP32), *dyb = put(ctx, dy, n, F8_DTYPE_FP32);
    f8_tensor tx = f8_tensor_make(xb, F8_DTYPE_FP32, T, H), ty = f8_tensor_make(yb, F8_DTYPE_FP32, T, H);
    f8_tensor tdy = f8_tensor_make(dyb, F8_DTYPE_FP32, T, H);
    f8_saved *s = NULL;
    CHECK_OK(ctx, f8_module_saved_create(f.m, &s));
    CHECK_OK(ctx, f8_module_forward(f.m, &tx, &ty, F8_MICROBATCH_FIRST, s));
    CHECK_STATUS(ctx, f8_module_backward(f.m, s, &tdy, NULL), F8_ERR_STATE); /* no main_grad yet */
    CHECK_OK(ctx, f8_module_set_main_grad(f.m, F8_PARAM_FC1_WEIGHT, (float *)mg[0]));
    CHECK_OK(ctx, f8_module_set_main_grad(f.m, F8_PARAM_FC2_WEIGHT, (float *)mg[1]));
    const f8_microbatch mbs[3] = {F8_MICROBATCH_FIRST, F8_MICROBATCH_NOT_FIRST, F8_MICROBATCH_NONE};
    for (int i = 0; i < 3; i++) {
        if (i > 0) CHECK_OK(ctx, f8_module_forward(f.m, &tx, &ty, mbs[i], s));
        CHECK_OK(ctx, f8_module_backward(f.m, s, &tdy, NULL));
        for (int w = 0; w < 2; w++) {
            g[w][i] = fnew(nw[w]);
            load(ctx, mg[w], F8_DTYPE_FP32, g[w][i], nw[w]);
        }
    }
    model m = model_of(&f, x, T);
    double *dyd = dnew(n);
    widen(dy, dyd, n);
    grads64 d;
    grads64_alloc(&d, &m);
    model_backward(&m, dyd, &d);
    for (int w = 0; w < 2; w++) {
        double e = rel_error(g[w][0], w ? d.w2 : d.w1, nw[w]);
        CHECK(e < (fp8 ? 0.3 : 1e-5), "fp8=%d: FIRST fc%d main_grad is not dW (rel %g): not overwritten?", fp8, w + 1, e);
        int acc = 1;
        for (size_t i = 0; i < nw[w]; i++)
            acc &= fabsf(g[w][1][i] - 2 * g[w][0][i]) <= 1e-5f * (1 + fabsf(g[w][0][i])) &&
                   fabsf(g[w][2][i] - 3 * g[w][0][i]) <= 1e-5f * (1 + fabsf(g[w][0][i]));
        CHECK(acc, "fp8=%d: NOT_FIRST / NONE did not accumulate into fc%d's main_grad", fp8, w + 1);
    }
    params p;
    params_alloc(&p, &c);
    read_all(&f, 1, &p);
    int wzero = 1;
    for (size_t i = 0; i < nw[0]; i++) wzero &= p.v[F8_PARAM_FC1_WEIGHT][i] == 0.0f;
    for (size_t i = 0; i < nw[1]; i++) wzero &= p.v[F8_PARAM_FC2_WEIGHT][i] == 0.0f;
    CHECK(wzero, "fp8=%d: the fused path also wrote the module's weight gradients", fp8);
    for (int64_t i = 0; i < H; i++) d.b2[i] *= 3, d.g[i] *= 3, d.be[i] *= 3;
    for (int64_t i = 0; i < F1; i++) d.b1[i] *= 3;
    CHECK_REL("main_grad", "db2 after 3 steps", p.v[F8_PARAM_FC2_BIAS], d.b2, (size_t)H, 1e-5);
    CHECK_REL("main_grad", "db1 after 3 steps", p.v[F8_PARAM_FC1_BIAS], d.b1, (size_t)F1, fp8 ? 0.3 : 1e-5);
    CHECK_REL("main_grad", "dgamma after 3 steps", p.v[F8_PARAM_LN_WEIGHT], d.g, (size_t)H, fp8 ? 0.3 : 1e-5);
    CHECK_REL("main_grad", "dbeta after 3 steps", p.v[F8_PARAM_LN_BIAS], d.be, (size_t)H, fp8 ? 0.3 : 1e-5);
    params_free(&p);
    grads64_free(&d);
    model_free(&m);
    f8_saved_destroy(s);
    for (int w = 0; w < 2; w++) {
        f8_ctx_free(ctx, mg[w]);
        for (int i = 0; i < 3; i++) free(g[w][i]);
    }
    f8_ctx_free(ctx, xb), f8_ctx_free(ctx, yb), f8_ctx_free(ctx, dyb);
    unmake(&f);
    free(x), free(dy), free(dyd);
}

/* T = 0: legal, writes nothing; gradients stay 0. */
static void test_zero_tokens(f8_ctx *ctx, int fp8)
{
    const int64_t H = 32, F = 16;
    f8_layernorm_mlp_config c = config(H, F, F8_NORM_LAYERNORM, 0, 1e-5f, F8_ACT_GEGLU, F8_DTYPE_FP32, fp8, 8);
    fixture f = make(ctx, &c, 9);
    void *p = put(ctx, NULL, 16, F8_DTYPE_FP32);
    f8_tensor t0 = f8_tensor_make(p, F8_DTYPE_FP32, 0, H), y0 = t0, dy0 = t0, dx0 = t0;
    f8_saved *s = NULL;
    CHECK_OK(ctx, f8_module_saved_create(f.m, &s));
    CHECK_OK(ctx, f8_module_forward(f.m, &t0, &y0, F8_MICROBATCH_NONE, s));
    CHECK_OK(ctx, f8_module_backward(f.m, s, &dy0, &dx0));
    params d;
    params_alloc(&d, &c);
    read_all(&f, 1, &d);
    int zero = 1;
    for (int i = 0; i < 6; i++) {
        size_t cnt = param_count(&c, mlp_params[i]);
        for (size_t j = 0; j < cnt; j++) zero &= d.v[mlp_params[i]][j] == 0.0f;
    }
    CHECK(zero, "zero tokens changed the gradients (fp8=%d)", fp8);
    params_free(&d);
    f8_saved_destroy(s);
    f8_ctx_free(ctx, p);
    unmake(&f);
}

/* Everything a failed call must leave alone: all ten slots, y and the gradients. */
typedef struct {
    float *slots, *y;
    params grads;
} snapshot;

static void snap(fixture *f, void *yb, int64_t T, snapshot *s)
{
    int L = f8_ctx_recipe(f->ctx)->amax_history_len;
    s->slots = fnew((size_t)(10 * (L + 2)));
    for (int i = 0; i < 10; i++) {
        f8_slot sl;
        float *d = s->slots + i * (L + 2);
        CHECK_OK(f->ctx, f8_module_slot(f->m, i < 6 ? F8_DIR_FORWARD : F8_DIR_BACKWARD, i < 6 ? i : i - 6, &sl));
        CHECK_OK(f->ctx, f8_slot_read(f->ctx, sl, &d[0], &d[1], d + 2));
    }
    s->y = fnew((size_t)(T * f->c.hidden_size));
    load(f->ctx, yb, F8_DTYPE_FP32, s->y, (size_t)(T * f->c.hidden_size));
    params_alloc(&s->grads, &f->c);
    read_all(f, 1, &s->grads);
}

static int snap_equal(fixture *f, const snapshot *a, const snapshot *b, int64_t T)
{
    int L = f8_ctx_recipe(f->ctx)->amax_history_len;
    int same = memcmp(a->slots, b->slots, (size_t)(10 * (L + 2)) * 4) == 0;
    same &= memcmp(a->y, b->y, (size_t)(T * f->c.hidden_size) * 4) == 0;
    for (int i = 0; i < 6; i++)
        same &= memcmp(a->grads.v[mlp_params[i]], b->grads.v[mlp_params[i]], param_count(&f->c, mlp_params[i]) * 4) == 0;
    return same;
}

static void snap_free(snapshot *s)
{
    free(s->slots), free(s->y);
    params_free(&s->grads);
}

/* Bad arguments return the documented status and change nothing. */
static void test_bad_input(f8_ctx *ctx)
{
    const int64_t T = 8, H = 16, F = 24;
    f8_layernorm_mlp_config c = config(H, F, F8_NORM_LAYERNORM, 0, 1e-5f, F8_ACT_GELU, F8_DTYPE_FP32, 1, T);
    fixture f = make(ctx, &c, 1); /* FP8 */
    c = config(H, F, F8_NORM_RMSNORM, 0, 1e-5f, F8_ACT_REGLU, F8_DTYPE_FP32, 0, T);
    c.bias = 0;
    fixture g = make(ctx, &c, 2); /* FP8 off, RMSNorm, no biases */
    float host[512];
    for (int i = 0; i < 512; i++) host[i] = 0.25f * (float)(i % 7) - 0.6f;
    size_t n = (size_t)(T * H);
    void *xb = put(ctx, host, n, F8_DTYPE_FP32), *yb = put(ctx, host, n, F8_DTYPE_FP32);
    void *x16 = put(ctx, host, n, F8_DTYPE_BF16), *big = put(ctx, host, 512, F8_DTYPE_FP32);
    f8_tensor tx = f8_tensor_make(xb, F8_DTYPE_FP32, T, H), ty = f8_tensor_make(yb, F8_DTYPE_FP32, T, H), bad;
    f8_saved *sf = NULL, *sg = NULL;
    CHECK_OK(ctx, f8_module_saved_create(f.m, &sf));
    CHECK_OK(ctx, f8_module_saved_create(g.m, &sg));
    snapshot before, after;
    snap(&f, yb, T, &before);
    const f8_microbatch none = F8_MICROBATCH_NONE;
    CHECK_STATUS(ctx, f8_module_forward(NULL, &tx, &ty, none, sf), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_forward(f.m, NULL, &ty, none, sf), F8_ERR_INVALID_ARGUMENT);
    CHECK(strlen(f8_ctx_last_error(ctx)) > 0, "no message for a NULL x");
    CHECK_STATUS(ctx, f8_module_forward(f.m, &tx, NULL, none, sf), F8_ERR_INVALID_ARGUMENT);
    bad = tx, bad.data = NULL;
    CHECK_STATUS(ctx, f8_module_forward(f.m, &bad, &ty, none, sf), F8_ERR_INVALID_ARGUMENT);
    bad = tx, bad.cols = H + 1;
    CHECK_STATUS(ctx, f8_module_forward(f.m, &bad, &ty, none, sf), F8_ERR_SHAPE);
    bad = ty, bad.rows = T - 1;
    CHECK_STATUS(ctx, f8_module_forward(f.m, &tx, &bad, none, sf), F8_ERR_SHAPE);
    bad = ty, bad.cols = F;
    CHECK_STATUS(ctx, f8_module_forward(f.m, &tx, &bad, none, sf), F8_ERR_SHAPE);
    {
        f8_tensor xbig = f8_tensor_make(big, F8_DTYPE_FP32, T + 1, H), ybig = xbig;
        CHECK_STATUS(ctx, f8_module_forward(f.m, &xbig, &ybig, none, sf), F8_ERR_SHAPE); /* > max_tokens */
    }
    bad = tx, bad.dtype = F8_DTYPE_E4M3, bad.scale_inv = (float *)big;
    CHECK_STATUS(ctx, f8_module_forward(f.m, &bad, &ty, none, sf), F8_ERR_DTYPE);
    bad = ty, bad.dtype = F8_DTYPE_E4M3, bad.scale_inv = (float *)big;
    CHECK_STATUS(ctx, f8_module_forward(f.m, &tx, &bad, none, sf), F8_ERR_DTYPE);
    CHECK_STATUS(ctx, f8_module_forward(f.m, &tx, &ty, (f8_microbatch)3, sf), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_forward(f.m, &tx, &ty, none, sg), F8_ERR_INVALID_ARGUMENT); /* g's saved */
    f8_tensor tx16 = f8_tensor_make(x16, F8_DTYPE_BF16, T, H);
    CHECK_STATUS(ctx, f8_module_forward(g.m, &tx16, &ty, none, sg), F8_ERR_DTYPE); /* FP8 off: x in param dtype */
    CHECK_STATUS(ctx, f8_module_backward(f.m, sf, &ty, NULL), F8_ERR_STATE); /* no forward yet */
    CHECK_STATUS(ctx, f8_module_backward(f.m, NULL, &ty, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_backward(NULL, sf, &ty, NULL), F8_ERR_INVALID_ARGUMENT);

    f8_tensor v;
    CHECK_STATUS(ctx, f8_module_param(g.m, F8_PARAM_LN_BIAS, 0, &v), F8_ERR_STATE); /* RMSNorm */
    CHECK_STATUS(ctx, f8_module_param(g.m, F8_PARAM_FC1_BIAS, 0, &v), F8_ERR_STATE); /* bias = 0 */
    CHECK_STATUS(ctx, f8_module_param(g.m, F8_PARAM_FC2_BIAS, 1, &v), F8_ERR_STATE);
    CHECK_STATUS(ctx, f8_module_param(f.m, F8_PARAM_WEIGHT, 0, &v), F8_ERR_INVALID_ARGUMENT); /* LNLinear's */
    CHECK_STATUS(ctx, f8_module_param(f.m, (f8_param)42, 0, &v), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_param(f.m, F8_PARAM_FC1_WEIGHT, 0, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_set_main_grad(f.m, F8_PARAM_FC1_WEIGHT, (float *)big), F8_ERR_STATE); /* not fused */
    CHECK_STATUS(ctx, f8_module_set_main_grad(f.m, F8_PARAM_WEIGHT, (float *)big), F8_ERR_INVALID_ARGUMENT); /* not an MLP weight */
    CHECK(f8_module_weight_workspace(f.m, F8_PARAM_WEIGHT) == NULL, "an MLP has a WEIGHT workspace");
    CHECK(f8_module_weight_workspace(f.m, F8_PARAM_FC2_BIAS) == NULL, "a bias has a workspace");
    CHECK(f8_module_weight_workspace(NULL, F8_PARAM_FC1_WEIGHT) == NULL, "workspace of NULL");
    {
        /* fc1 is [2F, H] with a gated activation, fc2 [H, F] either way. */
        f8_tensor w1, w2;
        f8_layernorm_mlp_config cg = config(H, F, F8_NORM_LAYERNORM, 0, 1e-5f, F8_ACT_SWIGLU, F8_DTYPE_FP32, 1, T);
        f8_module *mg = NULL;
        CHECK_OK(ctx, f8_layernorm_mlp_create(ctx, &cg, &mg));
        CHECK_OK(ctx, f8_module_param(mg, F8_PARAM_FC1_WEIGHT, 0, &w1));
        CHECK_OK(ctx, f8_module_param(mg, F8_PARAM_FC2_WEIGHT, 0, &w2));
        CHECK(w1.rows == 2 * F && w1.cols == H && w2.rows == H && w2.cols == F, "gated shapes fc1 [%lld,%lld] fc2 [%lld,%lld]",
              (long long)w1.rows, (long long)w1.cols, (long long)w2.rows, (long long)w2.cols);
        f8_module_destroy(mg);
    }
    f8_module *m2 = NULL;
    f8_layernorm_mlp_config cc = f8_layernorm_mlp_config_default(0, 4);
    CHECK_STATUS(ctx, f8_layernorm_mlp_create(ctx, &cc, &m2), F8_ERR_SHAPE);
    cc = f8_layernorm_mlp_config_default(4, 0);
    CHECK_STATUS(ctx, f8_layernorm_mlp_create(ctx, &cc, &m2), F8_ERR_SHAPE);
    cc = f8_layernorm_mlp_config_default(4, 4);
    cc.param_dtype = F8_DTYPE_E5M2;
    CHECK_STATUS(ctx, f8_layernorm_mlp_create(ctx, &cc, &m2), F8_ERR_DTYPE);
    cc = f8_layernorm_mlp_config_default(4, 4);
    cc.activation = (f8_activation)9;
    CHECK_STATUS(ctx, f8_layernorm_mlp_create(ctx, &cc, &m2), F8_ERR_INVALID_ARGUMENT);
    cc = f8_layernorm_mlp_config_default(4, 4);
    cc.normalization = (f8_norm)2;
    CHECK_STATUS(ctx, f8_layernorm_mlp_create(ctx, &cc, &m2), F8_ERR_INVALID_ARGUMENT);
    CHECK(m2 == NULL, "a failed create left an object");
    CHECK_STATUS(ctx, f8_layernorm_mlp_create(ctx, NULL, &m2), F8_ERR_INVALID_ARGUMENT);
    snap(&f, yb, T, &after);
    CHECK(snap_equal(&f, &before, &after, T), "a failed call changed y, a slot or a gradient");
    snap_free(&after);

    /* A valid forward, then bad backwards change nothing and keep the saved state. */
    CHECK_OK(ctx, f8_module_forward(f.m, &tx, &ty, none, sf));
    snap_free(&before);
    snap(&f, yb, T, &before);
    f8_tensor dy = f8_tensor_make(big, F8_DTYPE_FP32, T, H), dx = f8_tensor_make(xb, F8_DTYPE_FP32, T, H);
    float *xkeep = fnew(n), *xnow = fnew(n);
    load(ctx, xb, F8_DTYPE_FP32, xkeep, n);
    bad = dy, bad.cols = H + 1;
    CHECK_STATUS(ctx, f8_module_backward(f.m, sf, &bad, NULL), F8_ERR_SHAPE);
    bad = dx, bad.rows = T - 1;
    CHECK_STATUS(ctx, f8_module_backward(f.m, sf, &dy, &bad), F8_ERR_SHAPE);
    bad = dy, bad.dtype = F8_DTYPE_E5M2, bad.scale_inv = (float *)big;
    CHECK_STATUS(ctx, f8_module_backward(f.m, sf, &bad, NULL), F8_ERR_DTYPE);
    CHECK_STATUS(ctx, f8_module_backward(f.m, sf, NULL, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_backward(g.m, sf, &dy, NULL), F8_ERR_INVALID_ARGUMENT); /* f's saved */
    snap(&f, yb, T, &after);
    load(ctx, xb, F8_DTYPE_FP32, xnow, n);
    CHECK(snap_equal(&f, &before, &after, T) && memcmp(xkeep, xnow, n * 4) == 0,
          "a failed backward changed dx, a slot or a gradient");
    CHECK_OK(ctx, f8_module_backward(f.m, sf, &dy, NULL)); /* the saved state survived */
    CHECK_STATUS(ctx, f8_module_backward(f.m, sf, &dy, NULL), F8_ERR_STATE); /* consumed */
    snap_free(&before), snap_free(&after);
    free(xkeep), free(xnow);
    f8_saved_destroy(sf), f8_saved_destroy(sg);
    f8_ctx_free(ctx, xb), f8_ctx_free(ctx, yb), f8_ctx_free(ctx, x16), f8_ctx_free(ctx, big);
    unmake(&f), unmake(&g);
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
    for (int norm = 0; norm < 2; norm++) {
        for (int act = 0; act < 7; act++) {
            test_hp(ctx, (f8_norm)norm, act & 1, 1e-5f, (f8_activation)act, F8_DTYPE_FP32, 16, 32, 48);
            test_fp8(ctx, (f8_norm)norm, act & 1, 1e-5f, (f8_activation)act, F8_DTYPE_FP32, 32, 64, 96);
        }
        for (int zc = 0; zc < 2; zc++)
            for (int e = 0; e < 4; e++) test_hp(ctx, (f8_norm)norm, zc, eps_sweep[e], F8_ACT_GELU, F8_DTYPE_FP32, 8, 24, 40);
        test_hp(ctx, (f8_norm)norm, 1, 1e-5f, F8_ACT_SWIGLU, F8_DTYPE_BF16, 32, 64, 96);
        test_fp8(ctx, (f8_norm)norm, 0, 1e-5f, F8_ACT_GEGLU, F8_DTYPE_BF16, 32, 64, 96);
    }
    test_slots(ctx, F8_NORM_LAYERNORM, F8_ACT_GELU);
    test_slots(ctx, F8_NORM_RMSNORM, F8_ACT_SWIGLU);
    test_workspace_regression(ctx, F8_ACT_GELU);
    test_workspace_regression(ctx, F8_ACT_REGLU);
    test_main_grad(ctx, 0);
    test_main_grad(ctx, 1);
    test_zero_tokens(ctx, 0);
    test_zero_tokens(ctx, 1);
    test_bad_input(ctx);
    f8_ctx_destroy(ctx);
    return test_finish("test_layernorm_mlp");
}
