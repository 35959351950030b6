/*
 * test_norm_act.c — the CPU backend's norms and activations (backend.h's
 * norm_fwd, norm_bwd, act_fwd, act_bwd) against references written here in
 * FP64 that share no code with the library:
 *  - LayerNorm and RMSNorm forward (y, mu, rsigma) over eps in {1e-1, 1e-3,
 *    1e-5, 1e-7}, zero-centred gamma on and off, FP32 and BF16 x and
 *    parameters, shapes 1x1, 3x7, 13x677, 64x1024 and rows of four kinds
 *    (unit normal, a large offset with a small spread, a spread far below
 *    eps, a constant row); BF16 and FP8 y bit for bit against the FP32 y of
 *    the same call rounded by the public conversions, FP8 y also dequantised
 *    against the FP64 value, amax and scale_inv exact;
 *  - norm backward (dx, dgamma, dbeta) against the FP64 formulas and against
 *    central finite differences of the FP64 forward, accumulate semantics;
 *  - all seven activations forward and backward against FP64 formulas and
 *    finite differences of the FP64 forward, gated [a | b] splitting, and the
 *    fused FP8 outputs of act_bwd bit for bit against the cast op on its dx;
 *  - FP8 telemetry counted inside the fused casts (norm and activation
 *    forward against counts taken here from their FP32 outputs, the
 *    activation backward against the cast op's).
 * Tolerances (err <= tol element by element) are stated where they are used;
 * the worst err/tol seen per family is printed.
 */
#include <float.h>

#include "check.h"
#include "core/f8i.h"
#include "core/ops.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

/* Worst err/tol per family, printed at the end. */
enum { W_NORM_FWD, W_NORM_STATS, W_NORM_BWD, W_NORM_FD, W_ACT_FWD, W_ACT_BWD, W_ACT_FD, W_COUNT };
static const char *worst_name[W_COUNT] = {"norm fwd y", "norm mu/rsigma", "norm bwd", "norm bwd vs FD",
                                          "act fwd", "act bwd", "act bwd vs FD"};
static double worst[W_COUNT];

/* Element-wise comparison state of one quantity: one CHECK per quantity. */
typedef struct cmp {
    int64_t n, bad, at;
    double ratio, got, want;
} cmp;

static void cmp_add(cmp *c, int family, int64_t i, double got, double want, double tol)
{
    double err = fabs(got - want);
    double ratio = tol > 0 ? err / tol : (err > 0 ? INFINITY : 0.0);
    c->n++;
    if (!(err <= tol)) {
        c->bad++;
        if (isnan(ratio)) ratio = INFINITY;
    }
    if (ratio > c->ratio || (c->bad == 1 && !(err <= tol))) {
        c->ratio = ratio;
        c->at = i;
        c->got = got;
        c->want = want;
    }
    if (ratio > worst[family]) worst[family] = ratio;
}

#define CHECK_CMP(c, what, name)                                                                         \
    CHECK((c).bad == 0, "%s %s: %lld of %lld out of tolerance; worst at %lld: got %.9g want %.9g (err/tol %.3g)", \
          name, what, (long long)(c).bad, (long long)(c).n, (long long)(c).at, (c).got, (c).want, (c).ratio)

static void *zalloc(size_t bytes)
{
    void *p = xmalloc(bytes);
    memset(p, 0, bytes ? bytes : 1);
    return p;
}

/* Store n values as dtype (FP32 or BF16); v is replaced by what the library reads. */
static void *typed(double *v, int64_t n, f8_dtype dt)
{
    void *p = xmalloc((size_t)n * f8_dtype_size(dt));
    for (int64_t i = 0; i < n; i++) {
        if (dt == F8_DTYPE_BF16) {
            ((uint16_t *)p)[i] = f8_bf16_from_float((float)v[i]);
            v[i] = f8_bf16_to_float(((uint16_t *)p)[i]);
        } else {
            ((float *)p)[i] = (float)v[i];
            v[i] = ((float *)p)[i];
        }
    }
    return p;
}

static double get(const void *p, f8_dtype dt, int64_t i)
{
    if (dt == F8_DTYPE_BF16) return f8_bf16_to_float(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

static uint32_t fbits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* Half the spacing of FP8 values around w (>= 0), the worst round-to-nearest error. */
static double fp8_half_ulp(double w, f8_dtype dt)
{
    int mbits = dt == F8_DTYPE_E5M2 ? 2 : 3;
    int emin = dt == F8_DTYPE_E5M2 ? -14 : -6;
    int e = w > 0 ? (int)floor(log2(w)) : emin;
    if (e < emin) e = emin;
    return ldexp(1.0, e - mbits - 1);
}

/* FP8 y / out codes of one call against the FP32 values of another: codes bit
 * for bit equal to fp8(v32 · scale); where the FP64 value is in range,
 * dequantised within half an FP8 step (+ the FP32 tolerance) of it. */
static void check_fp8(const char *name, const uint8_t *q, const float *v32, const double *ref, const double *tol,
                      int64_t n, f8_dtype dt, float scale, float scale_inv)
{
    int64_t bit_bad = 0, deq_bad = 0, at = -1;
    for (int64_t i = 0; i < n; i++) {
        if (q[i] != f8_fp8_from_float(v32[i] * scale, dt)) {
            if (!bit_bad) at = i;
            bit_bad++;
        }
        double w = fabs(ref[i] * scale);
        if (w < f8_fp8_max(dt)) {
            double deq = (double)f8_fp8_to_float(q[i], dt) * scale_inv;
            double bound = fp8_half_ulp(fmax(w, fabs(deq) * scale), dt) / scale + 2.0 * tol[i];
            if (!(fabs(deq - ref[i]) <= bound)) deq_bad++;
        }
    }
    CHECK(bit_bad == 0, "%s %s: %lld codes differ from fp8(v32 * scale), first at %lld", name, f8_dtype_name(dt),
          (long long)bit_bad, (long long)at);
    CHECK(deq_bad == 0, "%s %s: %lld dequantised values off by more than half a step", name, f8_dtype_name(dt),
          (long long)deq_bad);
}

/* After a forward with FP8 output (norm or activation) at `scale`: the
 * codes (check_fp8), the telemetry the op counted (st), and, where the call
 * asked for them (amax non-NULL), the amax grown from its start of 0.125 to
 * max |y| and scale_inv = 1/scale, bit for bit. */
static void check_fp8_out(const char *name, const char *what, const uint8_t *y8, const float *y32, const double *ref,
                          const double *tol, int64_t n, f8_dtype dt, float scale, const uint64_t st[3],
                          const float *amax, const float *sinv, float ymax)
{
    uint64_t want[3];
    check_fp8(name, y8, y32, ref, tol, n, dt, scale, 1.0f / scale);
    fp8_host_stats(y32, n, scale, dt, want);
    CHECK_STATS(st, want, what, name);
    if (!amax) return;
    CHECK(fbits(*amax) == fbits(fmaxf(0.125f, ymax)), "%s amax %.9g, want %.9g", name, *amax, fmaxf(0.125f, ymax));
    CHECK(fbits(*sinv) == fbits(1.0f / scale), "%s scale_inv %.9g", name, *sinv);
}

/* A BF16 output (norm or activation, y or dx) is its FP32 twin v32
 * rounded, bit for bit. */
static void check_bf16_out(const char *name, const char *what, const uint16_t *vbf, const float *v32, int64_t n)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += vbf[i] != f8_bf16_from_float(v32[i]);
    CHECK(bad == 0, "%s %s: %lld values differ from bf16 of the fp32 output", name, what, (long long)bad);
}

/* ------------------------------------------------------------------------ */
/* Norms: FP64 reference                                                     */
/* ------------------------------------------------------------------------ */

/* One row of the FP64 forward; g is the effective gain (1 + gamma when zero-centred). */
static void norm_ref_row(const double *x, int64_t cols, const double *g, const double *beta, int rms, double eps,
                         double *v, double *mu, double *rs)
{
    double m = 0.0, s2 = 0.0;
    if (!rms) {
        for (int64_t c = 0; c < cols; c++) m += x[c];
        m /= (double)cols;
    }
    for (int64_t c = 0; c < cols; c++) s2 += (x[c] - m) * (x[c] - m);
    *mu = m;
    *rs = 1.0 / sqrt(s2 / (double)cols + eps);
    if (v)
        for (int64_t c = 0; c < cols; c++) v[c] = rms ? x[c] * *rs * g[c] : (x[c] - m) * *rs * g[c] + beta[c];
}

/* Σ_c dy·v of one row: the loss whose gradient the backward computes. */
static double norm_loss_row(const double *x, const double *dy, int64_t cols, const double *g, const double *beta,
                            int rms, double eps, double *tmp)
{
    double mu, rs, l = 0.0;
    norm_ref_row(x, cols, g, beta, rms, eps, tmp, &mu, &rs);
    for (int64_t c = 0; c < cols; c++) l += dy[c] * tmp[c];
    return l;
}

/* The contract's backward of one row with the given statistics; also the
 * per-element magnitude the tolerances scale by, the condition of the bracket:
 * S = rs·(|gdy| + mean|gdy| + |xhat|·mean|gdy·xhat|) (the means of absolute
 * values, since the row means themselves may cancel). */
static void norm_bwd_ref_row(const double *x, const double *dy, const double *g, int64_t cols, int rms, double mu,
                             double rs, double *dx, double *mag)
{
    double m1 = 0.0, m2 = 0.0, a1 = 0.0, a2 = 0.0;
    for (int64_t c = 0; c < cols; c++) {
        double xhat = (x[c] - (rms ? 0.0 : mu)) * rs;
        m1 += g[c] * dy[c];
        m2 += g[c] * dy[c] * xhat;
        a1 += fabs(g[c] * dy[c]);
        a2 += fabs(g[c] * dy[c] * xhat);
    }
    m1 = rms ? 0.0 : m1 / (double)cols;
    a1 = rms ? 0.0 : a1 / (double)cols;
    m2 /= (double)cols;
    a2 /= (double)cols;
    for (int64_t c = 0; c < cols; c++) {
        double xhat = (x[c] - (rms ? 0.0 : mu)) * rs;
        double gdy = g[c] * dy[c];
        dx[c] = rs * (gdy - m1 - xhat * m2);
        mag[c] = rs * (fabs(gdy) + a1 + fabs(xhat) * a2);
    }
}

/* ------------------------------------------------------------------------ */
/* Norms: the tests                                                          */
/* ------------------------------------------------------------------------ */

typedef struct norm_case {
    int rms, zc;
    float eps;
    f8_dtype xdt, pdt;
    int64_t rows, cols;
} norm_case;

static void test_norm_case(f8_ctx *ctx, test_rng *rng, const norm_case *nc)
{
    const int64_t rows = nc->rows, cols = nc->cols, n = rows * cols;
    const double eps = nc->eps;
    char name[160];
    snprintf(name, sizeof name, "%s zc=%d eps=%g x=%s p=%s %lldx%lld", nc->rms ? "rmsnorm" : "layernorm", nc->zc,
             eps, f8_dtype_name(nc->xdt), f8_dtype_name(nc->pdt), (long long)rows, (long long)cols);

    /* Inputs: row kind r % 4 (unit normal; offset 50, spread 0.01; spread 1e-3; constant). */
    double *xd = xmalloc((size_t)n * sizeof(double)), *dyd = xmalloc((size_t)n * sizeof(double));
    double *gam = xmalloc((size_t)cols * sizeof(double)), *bet = xmalloc((size_t)cols * sizeof(double));
    double *g = xmalloc((size_t)cols * sizeof(double));
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            double z = rng_normal(rng);
            double v = 0;
            switch (r % 4) {
            case 0: v = z; break;
            case 1: v = 50.0 + 0.01 * z; break;
            case 2: v = 1e-3 * z; break;
            case 3: v = 0.7; break;
            }
            xd[r * cols + c] = v;
            dyd[r * cols + c] = rng_normal(rng);
        }
    }
    for (int64_t c = 0; c < cols; c++) {
        gam[c] = nc->zc ? 0.3 * rng_normal(rng) : 1.0 + 0.5 * rng_normal(rng);
        bet[c] = 0.5 * rng_normal(rng);
    }
    void *x = typed(xd, n, nc->xdt), *dy = typed(dyd, n, nc->xdt);
    void *gamma = typed(gam, cols, nc->pdt), *beta = typed(bet, cols, nc->pdt);
    for (int64_t c = 0; c < cols; c++) g[c] = nc->zc ? 1.0 + gam[c] : gam[c];

    /* FP64 forward with exact statistics. */
    double *vref = xmalloc((size_t)n * sizeof(double)), *vtol = xmalloc((size_t)n * sizeof(double));
    double *muref = xmalloc((size_t)rows * sizeof(double)), *rsref = xmalloc((size_t)rows * sizeof(double));
    for (int64_t r = 0; r < rows; r++)
        norm_ref_row(xd + r * cols, cols, g, bet, nc->rms, eps, vref + r * cols, &muref[r], &rsref[r]);

    /* FP32 y. */
    float *y32 = zalloc((size_t)n * sizeof(float));
    float *mu = zalloc((size_t)rows * sizeof(float)), *rs = zalloc((size_t)rows * sizeof(float));
    f8i_norm_fwd_args fa = {
        .x = x, .x_dtype = nc->xdt, .rows = rows, .cols = cols, .gamma = gamma, .beta = beta,
        .param_dtype = nc->pdt, .rms = nc->rms, .zero_centered = nc->zc, .eps = nc->eps,
        .y = y32, .y_dtype = F8_DTYPE_FP32, .mu = mu, .rsigma = rs,
    };
    CHECK_OK(ctx, f8i_op_norm_fwd(ctx, &fa));

    /* mu within half an FP32 ulp of the exact mean (+ a hair); rsigma rel 1e-6 (the
     * float add of eps, sqrtf and the division are a few ulps). */
    cmp cmu = {0}, crs = {0};
    for (int64_t r = 0; r < rows; r++) {
        if (!nc->rms) cmp_add(&cmu, W_NORM_STATS, r, mu[r], muref[r], 1.2e-7 * fabs(muref[r]) + 1e-30);
        cmp_add(&crs, W_NORM_STATS, r, rs[r], rsref[r], 1e-6 * rsref[r]);
    }
    if (!nc->rms) CHECK_CMP(cmu, "mu", name);
    CHECK_CMP(crs, "rsigma", name);

    /* y: 1e-6 of the magnitudes the FP32 steps round (x and mu before their
     * difference, the product, beta), a few FP32 ulps of each. */
    cmp cy = {0};
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            int64_t i = r * cols + c;
            vtol[i] = 1e-6 * (fabs(g[c]) * rsref[r] * (fabs(xd[i]) + fabs(muref[r])) + fabs(nc->rms ? 0 : bet[c]) +
                              fabs(vref[i])) + 1e-30;
            cmp_add(&cy, W_NORM_FWD, i, y32[i], vref[i], vtol[i]);
        }
    CHECK_CMP(cy, "y fp32", name);

    /* BF16 y: the FP32 y rounded, bit for bit. */
    uint16_t *ybf = zalloc((size_t)n * 2);
    fa.y = ybf;
    fa.y_dtype = F8_DTYPE_BF16;
    fa.mu = fa.rsigma = NULL; /* optional */
    CHECK_OK(ctx, f8i_op_norm_fwd(ctx, &fa));
    check_bf16_out(name, "y bf16", ybf, y32, n);

    /* FP8 y, both formats; E5M2 without amax and scale_inv. */
    float ymax = 0.0f;
    for (int64_t i = 0; i < n; i++) ymax = fmaxf(ymax, fabsf(y32[i]));
    for (int f = 0; f < 2; f++) {
        f8_dtype dt = f ? F8_DTYPE_E5M2 : F8_DTYPE_E4M3;
        uint8_t *y8 = zalloc((size_t)n);
        float scale = f ? 1000.0f : 150.0f, amax = 0.125f, sinv = -1.0f; /* E4M3: |v| > 3 saturates */
        uint64_t st[3] = {0, 0, 0};
        fa.y = y8;
        fa.y_dtype = dt;
        fa.scale = &scale;
        fa.amax = f ? NULL : &amax;
        fa.scale_inv = f ? NULL : &sinv;
        fa.stats = st;
        CHECK_OK(ctx, f8i_op_norm_fwd(ctx, &fa));
        fa.stats = NULL;
        check_fp8_out(name, "norm fwd fp8", y8, y32, vref, vtol, n, dt, scale, st, f ? NULL : &amax, &sinv, ymax);
        free(y8);
    }

    /* ---- backward ---- */
    double *dxref = xmalloc((size_t)n * sizeof(double)), *mag = xmalloc((size_t)n * sizeof(double));
    double *dxex = xmalloc((size_t)n * sizeof(double)), *magex = xmalloc((size_t)n * sizeof(double));
    double *dgref = zalloc((size_t)cols * sizeof(double)), *dbref = zalloc((size_t)cols * sizeof(double));
    double *dgmag = zalloc((size_t)cols * sizeof(double));
    for (int64_t r = 0; r < rows; r++) {
        const int64_t o = r * cols;
        /* The contract with the library's FP32 statistics, and the exact gradient. */
        norm_bwd_ref_row(xd + o, dyd + o, g, cols, nc->rms, mu[r], rs[r], dxref + o, mag + o);
        norm_bwd_ref_row(xd + o, dyd + o, g, cols, nc->rms, muref[r], rsref[r], dxex + o, magex + o);
        for (int64_t c = 0; c < cols; c++) {
            double xhat = (xd[o + c] - (nc->rms ? 0.0 : (double)mu[r])) * rs[r];
            dgref[c] += dyd[o + c] * xhat;
            dgmag[c] += fabs(dyd[o + c] * xhat);
            dbref[c] += dyd[o + c];
        }
    }
    const f8_dtype dxdt = nc->xdt;
    void *dx = zalloc((size_t)n * f8_dtype_size(dxdt));
    void *dgamma = zalloc((size_t)cols * f8_dtype_size(nc->pdt)), *dbeta = zalloc((size_t)cols * f8_dtype_size(nc->pdt));
    const size_t wsb = f8i_reduce_workspace_bytes(rows, cols);
    void *ws = zalloc(wsb);
    f8i_norm_bwd_args ba = {
        .dy = dy, .dy_dtype = nc->xdt, .x = x, .x_dtype = nc->xdt, .rows = rows, .cols = cols, .mu = mu,
        .rsigma = rs, .gamma = gamma, .param_dtype = nc->pdt, .rms = nc->rms, .zero_centered = nc->zc,
        .dx = dx, .dx_dtype = dxdt, .dgamma = dgamma, .dbeta = nc->rms ? NULL : dbeta, .accumulate = 0,
        .workspace = ws, .workspace_bytes = wsb,
    };
    /* Garbage first: accumulate = 0 must overwrite it. */
    for (int64_t c = 0; c < cols; c++) {
        if (nc->pdt == F8_DTYPE_BF16) ((uint16_t *)dgamma)[c] = ((uint16_t *)dbeta)[c] = 0x4120;
        else ((float *)dgamma)[c] = ((float *)dbeta)[c] = 10.0f;
    }
    CHECK_OK(ctx, f8i_op_norm_bwd(ctx, &ba));

    /* dx against the contract: 1e-6 of S (FP32 steps of a few ulps each); BF16 adds
     * the final rounding (2^-8 relative at most; 2^-7 allowed). dgamma/dbeta likewise with Σ|dy·xhat|, Σ|dy|. */
    const double bf_dx = dxdt == F8_DTYPE_BF16 ? 1.0 / 128 : 0.0, bf_p = nc->pdt == F8_DTYPE_BF16 ? 1.0 / 128 : 0.0;
    cmp cdx = {0}, cdg = {0}, cdb = {0};
    for (int64_t i = 0; i < n; i++)
        cmp_add(&cdx, W_NORM_BWD, i, get(dx, dxdt, i), dxref[i], 1e-6 * mag[i] + bf_dx * fabs(dxref[i]) + 1e-30);
    double dbmag_scale = 0;
    for (int64_t c = 0; c < cols; c++) {
        double dbmag = 0;
        for (int64_t r = 0; r < rows; r++) dbmag += fabs(dyd[r * cols + c]);
        dbmag_scale = fmax(dbmag_scale, dbmag);
        cmp_add(&cdg, W_NORM_BWD, c, get(dgamma, nc->pdt, c), dgref[c],
                1e-6 * dgmag[c] + bf_p * fabs(dgref[c]) + 1e-30);
        if (!nc->rms)
            cmp_add(&cdb, W_NORM_BWD, c, get(dbeta, nc->pdt, c), dbref[c],
                    1e-6 * dbmag + bf_p * fabs(dbref[c]) + 1e-30);
    }
    CHECK_CMP(cdx, "dx", name);
    CHECK_CMP(cdg, "dgamma", name);
    if (!nc->rms) CHECK_CMP(cdb, "dbeta", name);

    /* The exact gradient vs central differences of the FP64 forward (the reference
     * validates itself), then the library vs the same differences. The library uses
     * FP32 statistics: mu is off by up to half an ulp, which moves xhat by |mu|·rs·2^-24;
     * the tolerance grows with |mu|·rs. */
    {
        double *xp = xmalloc((size_t)cols * sizeof(double)), *tmp = xmalloc((size_t)cols * sizeof(double));
        const int64_t rsel[5] = {0, 1, 2, 3, rows - 1}, csel[3] = {0, cols / 2, cols - 1};
        cmp cfd_ref = {0}, cfd_lib = {0};
        for (int ri = 0; ri < 5; ri++) {
            int64_t r = rsel[ri];
            if (r >= rows) continue;
            const int64_t o = r * cols;
            const double h = 1e-4 / rsref[r]; /* a ten-thousandth of the row's normalising scale */
            /* Rounding of the FP64 loss: an FP64 ulp of each |dy·g|·(|x| + |mu|)·rs term. */
            double lround = 0;
            for (int64_t c = 0; c < cols; c++)
                lround += fabs(dyd[o + c] * g[c]) * (fabs(xd[o + c]) + fabs(muref[r])) * rsref[r] +
                          fabs(dyd[o + c] * bet[c]);
            lround *= 4 * DBL_EPSILON;
            for (int ci = 0; ci < 3; ci++) {
                int64_t c = csel[ci];
                memcpy(xp, xd + o, (size_t)cols * sizeof(double));
                xp[c] = xd[o + c] + h;
                double lp = norm_loss_row(xp, dyd + o, cols, g, bet, nc->rms, eps, tmp);
                xp[c] = xd[o + c] - h;
                double lm = norm_loss_row(xp, dyd + o, cols, g, bet, nc->rms, eps, tmp);
                double fd = (lp - lm) / (2 * h);
                /* FD error: (h·rs)² relative, plus the loss's rounding over h. */
                double fderr = 1e-7 * magex[o + c] + lround / h;
                cmp_add(&cfd_ref, W_NORM_FD, o + c, dxex[o + c], fd, fderr);
                double stats = 1e-5 + 1e-6 * fabs(muref[r]) * rsref[r];
                cmp_add(&cfd_lib, W_NORM_FD, o + c, get(dx, dxdt, o + c), fd,
                        stats * magex[o + c] + bf_dx * fabs(fd) + fderr);
            }
        }
        /* dgamma / dbeta: the loss summed over rows is linear in each, so FD over all rows. */
        cmp cfd_p = {0};
        double *gp = xmalloc((size_t)cols * sizeof(double)), *bp = xmalloc((size_t)cols * sizeof(double));
        double max_murs = 0;
        for (int64_t r = 0; r < rows; r++) max_murs = fmax(max_murs, fabs(muref[r]) * rsref[r]);
        for (int ci = 0; ci < 3; ci++) {
            int64_t c = csel[ci];
            for (int which = 0; which < (nc->rms ? 1 : 2); which++) {
                const double h = 1e-3;
                double l[2];
                for (int s = 0; s < 2; s++) {
                    memcpy(gp, g, (size_t)cols * sizeof(double));
                    memcpy(bp, bet, (size_t)cols * sizeof(double));
                    if (which == 0) gp[c] += s ? -h : h;
                    else bp[c] += s ? -h : h;
                    l[s] = 0;
                    for (int64_t r = 0; r < rows; r++)
                        l[s] += norm_loss_row(xd + r * cols, dyd + r * cols, cols, gp, bp, nc->rms, eps, tmp);
                }
                double fd = (l[0] - l[1]) / (2 * h);
                double m = which == 0 ? dgmag[c] : dbmag_scale;
                double got = get(which == 0 ? dgamma : dbeta, nc->pdt, c);
                double tol = (1e-5 + 1e-6 * max_murs) * m + bf_p * fabs(fd) + 1e-9 * (double)(rows * cols) + 1e-30;
                cmp_add(&cfd_p, W_NORM_FD, c, got, fd, tol);
            }
        }
        CHECK_CMP(cfd_ref, "dx (FP64 reference) vs finite differences", name);
        CHECK_CMP(cfd_lib, "dx vs finite differences", name);
        CHECK_CMP(cfd_p, "dgamma/dbeta vs finite differences", name);
        free(xp);
        free(tmp);
        free(gp);
        free(bp);
    }

    /* accumulate = 1: prev + the sum. FP32 parameters: bit for bit prev + the
     * overwritten result (the same float sum); BF16: within the two roundings. No dx
     * and no dbeta this time: optional outputs. */
    {
        const size_t pb = (size_t)cols * f8_dtype_size(nc->pdt);
        double *prevd = xmalloc((size_t)cols * sizeof(double));
        for (int64_t c = 0; c < cols; c++) prevd[c] = rng_normal(rng);
        void *acc_g = typed(prevd, cols, nc->pdt);
        void *acc_b = xmalloc(pb);
        memcpy(acc_b, acc_g, pb);
        ba.dgamma = acc_g;
        ba.dbeta = nc->rms ? NULL : acc_b;
        ba.accumulate = 1;
        CHECK_OK(ctx, f8i_op_norm_bwd(ctx, &ba));
        ba.dx = NULL;
        ba.dbeta = NULL;
        void *acc_g2 = typed(prevd, cols, nc->pdt);
        ba.dgamma = acc_g2;
        CHECK_OK(ctx, f8i_op_norm_bwd(ctx, &ba));
        CHECK(memcmp(acc_g, acc_g2, pb) == 0, "%s dgamma differs with dx and dbeta NULL", name);
        int64_t bad = 0;
        for (int64_t c = 0; c < cols; c++) {
            for (int which = 0; which < (nc->rms ? 1 : 2); which++) {
                double got = get(which ? acc_b : acc_g, nc->pdt, c);
                double sum = get(which ? dbeta : dgamma, nc->pdt, c);
                if (nc->pdt == F8_DTYPE_FP32) {
                    bad += fbits((float)got) != fbits((float)prevd[c] + (float)sum);
                } else {
                    double want = prevd[c] + (which ? dbref[c] : dgref[c]);
                    double tol = (fabs(prevd[c]) + fabs(want) + fabs(sum)) / 128 + 1e-5 * (which ? dbmag_scale : dgmag[c]);
                    bad += !(fabs(got - want) <= tol);
                }
            }
        }
        CHECK(bad == 0, "%s accumulate: %lld parameter gradients are not prev + sum", name, (long long)bad);
        free(prevd);
        free(acc_g);
        free(acc_b);
        free(acc_g2);
    }

    free(xd), free(dyd), free(gam), free(bet), free(g), free(x), free(dy), free(gamma), free(beta);
    free(vref), free(vtol), free(muref), free(rsref), free(y32), free(mu), free(rs), free(ybf);
    free(dxref), free(mag), free(dxex), free(magex), free(dgref), free(dbref), free(dgmag);
    free(dx), free(dgamma), free(dbeta), free(ws);
}

/* rows = 0: FP8 y writes only scale_inv; the backward overwrites dgamma/dbeta with 0
 * (the empty sum) unless accumulating, then leaves them. */
static void test_norm_empty(f8_ctx *ctx)
{
    float x = 1, gamma[3] = {1, 2, 3}, beta[3] = {0}, scale = 4, amax = 0.5f, sinv = -1, mu = 7, rs = 7;
    uint8_t y = 0xAB;
    f8i_norm_fwd_args fa = {
        .x = &x, .x_dtype = F8_DTYPE_FP32, .rows = 0, .cols = 3, .gamma = gamma, .beta = beta,
        .param_dtype = F8_DTYPE_FP32, .eps = 1e-5f, .y = &y, .y_dtype = F8_DTYPE_E4M3, .scale = &scale,
        .amax = &amax, .scale_inv = &sinv, .mu = &mu, .rsigma = &rs,
    };
    CHECK_OK(ctx, f8i_op_norm_fwd(ctx, &fa));
    CHECK(y == 0xAB && amax == 0.5f && mu == 7 && rs == 7, "norm rows=0 wrote more than scale_inv");
    CHECK(sinv == 0.25f, "norm rows=0: scale_inv %g", sinv);

    float dg[3] = {5, 5, 5}, db[3] = {5, 5, 5};
    f8i_norm_bwd_args ba = {
        .dy = &x, .dy_dtype = F8_DTYPE_FP32, .x = &x, .x_dtype = F8_DTYPE_FP32, .rows = 0, .cols = 3,
        .mu = &mu, .rsigma = &rs, .gamma = gamma, .param_dtype = F8_DTYPE_FP32, .dx = NULL,
        .dx_dtype = F8_DTYPE_FP32, .dgamma = dg, .dbeta = db, .accumulate = 1,
    };
    CHECK_OK(ctx, f8i_op_norm_bwd(ctx, &ba));
    CHECK(dg[0] == 5 && dg[2] == 5 && db[1] == 5, "norm bwd rows=0 accumulate changed the gradients");
    ba.accumulate = 0;
    CHECK_OK(ctx, f8i_op_norm_bwd(ctx, &ba));
    CHECK(dg[0] == 0 && dg[2] == 0 && db[1] == 0, "norm bwd rows=0 overwrite: %g %g %g", dg[0], dg[2], db[1]);
}

#include "act_tests.h" /* the activations: FP64 reference and tests */

int main(void)
{
    char why[256] = "";
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, NULL, why);
    if (!ctx) {
        fprintf(stderr, "test_norm_act: cannot create the CPU ctx: %s\n", why);
        return 1;
    }
    test_rng rng = {12345};
    static const int64_t shapes[4][2] = {{1, 1}, {3, 7}, {13, 677}, {64, 1024}};
    static const float eps[4] = {1e-1f, 1e-3f, 1e-5f, 1e-7f};

    for (int rms = 0; rms < 2; rms++)
        for (int zc = 0; zc < 2; zc++)
            for (int e = 0; e < 4; e++)
                for (int xb = 0; xb < 2; xb++)
                    for (int s = 0; s < 4; s++) {
                        norm_case nc = {
                            .rms = rms, .zc = zc, .eps = eps[e],
                            .xdt = xb ? F8_DTYPE_BF16 : F8_DTYPE_FP32,
                            .pdt = (e + s) & 1 ? F8_DTYPE_BF16 : F8_DTYPE_FP32,
                            .rows = shapes[s][0], .cols = shapes[s][1],
                        };
                        test_norm_case(ctx, &rng, &nc);
                    }
    test_norm_empty(ctx);

    for (int act = 0; act < 7; act++)
        for (int xb = 0; xb < 2; xb++)
            for (int s = 0; s < 4; s++)
                test_act_case(ctx, &rng, (f8_activation)act, xb ? F8_DTYPE_BF16 : F8_DTYPE_FP32, shapes[s][0],
                              shapes[s][1]);
    test_act_empty(ctx);

    for (int w = 0; w < W_COUNT; w++) printf("  worst err/tol, %-16s %.3g\n", worst_name[w], worst[w]);
    f8_ctx_destroy(ctx);
    return test_finish("test_norm_act");
}
