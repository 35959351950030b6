/*
 * layernorm_mlp_fixture.h — what test_layernorm_mlp.c and
 * test_layernorm_mlp_state.c share: the seven activations and the module's
 * maths in FP64 (forward, and the backward of Σ y·dy), the fixture that
 * creates an f8_layernorm_mlp with random parameters and runs one forward +
 * backward step, the host copy of a weight workspace and the FP8-operand
 * forward oracle (interval-aware, see test_layernorm_mlp.c).
 */
#ifndef F8_TESTS_LAYERNORM_MLP_FIXTURE_H
#define F8_TESTS_LAYERNORM_MLP_FIXTURE_H

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

/* Compare one gradient by relative error. */
#define CHECK_REL(tag, name, got, want, n, tol)                                  \
    CHECK(rel_error((got), (want), (n)) < (tol), "%s: %s rel err %g (tol %g)", (tag), (name), \
          rel_error((got), (want), (n)), (double)(tol))

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

#endif /* F8_TESTS_LAYERNORM_MLP_FIXTURE_H */
