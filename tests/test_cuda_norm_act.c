/*
 * test_cuda_norm_act.c — the CUDA backend's norm and activation ops against
 * the CPU backend (the oracle) on identical inputs, called through each ctx's
 * backend table (ctx->be) exactly as the fused modules call them: norm_fwd
 * (LayerNorm/RMSNorm, zero-centred gamma on/off, eps 1e-5 and 1e-1, x
 * FP32/BF16, y FP32/BF16/E4M3/E5M2; the shapes each CUDA kernel takes, every
 * GPU run repeated for the same bits), norm_bwd (dx, dgamma, dbeta, accumulate on/off, param
 * FP32/BF16), act_fwd for all seven activations (FP32/BF16/FP8 out, FP8 with
 * and without the transposed codes) and act_bwd for all seven, plain and
 * with the fused FP8 cast (out,
 * out_t, amax, scale_inv, dbias). Every FP32 result of both backends is also
 * checked against a float64 host reference built from the formulas in
 * backend.h, so a misreading both backends share still fails.
 *
 * Unlike casts, these ops are not bit-identical across backends: row sums run
 * in an order each backend picks and libm's transcendentals differ from
 * CUDA's. The tolerances, and why (all ‖cuda − cpu‖/‖cpu‖ unless said):
 *  - TOL_F32 1e-5 for FP32 results. Row statistics and the sums inside the
 *    norm backward are FP32 sums of <= 4096 terms whose rounding errors walk
 *    as ~√n·2^-24 relative (~4e-6 at worst here; x rows are drawn with
 *    |mean| <= 1 and sd >= 0.5, so cancellation in x - mu is bounded);
 *    CUDA's tanhf/expf are within 2 ulp of libm's.
 *  - Column sums (dgamma, dbeta, dbias) may cancel in a column, so each
 *    element is held to the worst-case FP32 summation bound against float64
 *    instead (cmp_sums says how).
 *  - Elements rounded to BF16 or FP8 from such FP32 values: where the two
 *    FP32 values fall either side of a rounding point the codes differ by
 *    one (adjacent codes; the sign may flip only between zeros and the
 *    smallest subnormal). The chance of that is about |Δv|/spacing per
 *    element: ~1e-6/2^-4 for E4M3, so FLIP_FP8 allows 0.1% of elements (at
 *    least one) to be one code apart and none further; BF16's spacing is 32x
 *    finer, so FLIP_BF16 allows 1%. The GELU family's negative tail, where
 *    1 + tanh cancels, has the largest relative differences and sets these.
 *  - Where a result cancels to near zero (norm y = xhat·g + beta, norm dx, a
 *    derivative crossing zero) its relative accuracy is gone and
 *    BF16 spacing there is finer than the FP32 difference: a pair of codes
 *    whose values are within TOL_F32 of the result's rms also counts as a
 *    flip (not as a failure).
 *  - amax is max|v|: at the largest element only the statistics and final
 *    roundings differ, TOL_AMAX 1e-6 relative for the norms. The
 *    activations' amax carries the transcendental's own error at that
 *    element (the special-function unit's exponential and reciprocal, a few
 *    ulps, more where GELU's 1 + tanh partly cancels: 13 ulps, 1.04e-6, was
 *    seen for GEGLU's backward): TOL_F32, as their values. scale_inv =
 *    1/scale: exact.
 *  - RELU, REGLU and SRELU involve one rounded multiply at most (no
 *    transcendental, no sum): their values, codes and amax must be EQUAL.
 * Shapes: one row, one column (legal for norms), odd/prime sizes, rows wider
 * than the CUDA norm kernels keep in registers, zero rows, and 2048 x 4096
 * (left out when F8_TEST_QUICK is set, for compute-sanitizer).
 * Without a GPU (or in a CUDA=0 build) the program reports itself skipped.
 */
#include <float.h>

#include "check.h"
#include "core/f8i.h"
#include "core/ops.h"

enum { CPU = 0, GPU = 1 };

#define TOL_F32 1e-5
#define TOL_AMAX 1e-6
#define FLIP_FP8 1e-3
#define FLIP_BF16 1e-2
#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct env {
    f8_ctx *ctx[2]; /* [CPU] oracle, [GPU] under test */
    test_rng rng;
    int quick;       /* F8_TEST_QUICK: leave out the large shapes */
    double worst;    /* worst err/tol over all tolerance checks */
    double max_flip; /* largest fraction of one-code flips seen */
} env;

/* ------------------------------------------------------------------------ */
/* Buffers in both ctxs, host element access                                 */
/* ------------------------------------------------------------------------ */

typedef struct dual {
    void *p[2];
    size_t bytes;
} dual;

static void dual_put(env *e, dual *d, const void *host)
{
    for (int i = 0; i < 2 && d->bytes; i++) CHECK_OK(e->ctx[i], f8_ctx_upload(e->ctx[i], d->p[i], host, d->bytes));
}

/* Both ctxs get `bytes` (at least one, so empty operands have a valid pointer),
 * uploaded from host when given, otherwise filled with 0xFF bytes (NaN in
 * FP32/BF16, a NaN code in E4M3): outputs nobody writes show. */
static dual dual_new(env *e, size_t bytes, const void *host)
{
    dual d = {{NULL, NULL}, bytes};
    for (int i = 0; i < 2; i++)
        if (f8_ctx_alloc(e->ctx[i], bytes ? bytes : 1, &d.p[i]) != F8_OK) die("f8_ctx_alloc", e->ctx[i]);
    if (host) {
        dual_put(e, &d, host);
    } else if (bytes) {
        uint8_t *poison = xmalloc(bytes);
        memset(poison, 0xFF, bytes);
        dual_put(e, &d, poison);
        free(poison);
    }
    return d;
}

static void dual_get(env *e, const dual *d, int i, void *host)
{
    if (d->bytes) CHECK_OK(e->ctx[i], f8_ctx_download(e->ctx[i], host, d->p[i], d->bytes));
}

static void dual_free(env *e, dual *d)
{
    for (int i = 0; i < 2; i++) f8_ctx_free(e->ctx[i], d->p[i]);
}

static int is_fp8(f8_dtype t) { return t == F8_DTYPE_E4M3 || t == F8_DTYPE_E5M2; }

static float load_elem(const void *p, f8_dtype dt, size_t i)
{
    return dt == F8_DTYPE_BF16 ? f8_bf16_to_float(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* Store v in dt and return what a kernel will read back. */
static float store_elem(void *p, f8_dtype dt, size_t i, float v)
{
    if (dt == F8_DTYPE_BF16) {
        ((uint16_t *)p)[i] = f8_bf16_from_float(v);
        return f8_bf16_to_float(((uint16_t *)p)[i]);
    }
    ((float *)p)[i] = v;
    return v;
}

static float *to_floats(const void *raw, f8_dtype dt, size_t n)
{
    float *f = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) f[i] = load_elem(raw, dt, i);
    return f;
}

/* ------------------------------------------------------------------------ */
/* Comparisons                                                               */
/* ------------------------------------------------------------------------ */

static void note(env *e, double err, double tol)
{
    double r = isnan(err) ? INFINITY : err / tol;
    if (r > e->worst) e->worst = r;
}

/* ‖got − ref‖/‖ref‖ <= tol; every ref element must be finite. */
static void cmp_rel(env *e, const char *desc, const char *what, const float *got, const double *ref, size_t n,
                    double tol)
{
    if (!n) return;
    int finite = 1;
    for (size_t i = 0; i < n; i++) finite &= isfinite(ref[i]) != 0;
    double err = rel_error(got, ref, n);
    note(e, err, tol);
    CHECK(finite, "%s %s: reference not finite (an element was not written)", desc, what);
    CHECK(err <= tol, "%s %s: rel err %.3g > %.0e", desc, what, err, tol);
}

static void cmp_f32(env *e, const char *desc, const char *what, const float *gpu, const float *cpu, size_t n,
                    double tol)
{
    double *ref = xmalloc((n ? n : 1) * sizeof(double));
    for (size_t i = 0; i < n; i++) ref[i] = cpu[i];
    cmp_rel(e, desc, what, gpu, ref, n, tol);
    free(ref);
}

/* Code of element i as a sign-magnitude integer of `width` bytes. */
static unsigned code_at(const void *p, int width, size_t i)
{
    return width == 1 ? ((const uint8_t *)p)[i] : ((const uint16_t *)p)[i];
}

static int code_nan(unsigned c, f8_dtype dt)
{
    return dt == F8_DTYPE_BF16 ? isnan(f8_bf16_to_float((uint16_t)c)) : isnan(f8_fp8_to_float((uint8_t)c, dt));
}

/* rms of n values, float64. */
static double rms_of(const double *v, size_t n)
{
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += v[i] * v[i];
    return n ? sqrt(ss / (double)n) : 0.0;
}

/* Codes of dtype dt (BF16 or FP8) compared: equal, or (at most `frac` of the
 * elements, at least one when frac > 0) adjacent or with decoded values
 * within `floor` (where a result cancels to near zero its relative accuracy
 * is gone and BF16/FP8 subnormal-free spacing there is finer than the FP32
 * difference: floor = TOL_F32·rms of the result, in decoded units). NaN
 * codes never pass. */
static void cmp_codes(env *e, const char *desc, const char *what, const void *gpu, const void *cpu, f8_dtype dt,
                      size_t n, double frac, double floor)
{
    const int width = dt == F8_DTYPE_BF16 ? 2 : 1;
    const unsigned sign = width == 1 ? 0x80u : 0x8000u, mag = sign - 1;
    size_t flips = 0, far = 0, first_far = n;
    for (size_t i = 0; i < n; i++) {
        unsigned a = code_at(gpu, width, i), b = code_at(cpu, width, i);
        if (a == b && !code_nan(a, dt)) continue;
        int ok = 0;
        if (!code_nan(a, dt) && !code_nan(b, dt) && frac > 0) {
            unsigned ma = a & mag, mb = b & mag;
            ok = (a & sign) == (b & sign) ? (ma > mb ? ma - mb : mb - ma) == 1 : ma + mb <= 1;
            double va = width == 2 ? f8_bf16_to_float((uint16_t)a) : f8_fp8_to_float((uint8_t)a, dt);
            double vb = width == 2 ? f8_bf16_to_float((uint16_t)b) : f8_fp8_to_float((uint8_t)b, dt);
            ok |= fabs(va - vb) <= floor;
        }
        if (ok) {
            flips++;
        } else {
            far++;
            if (first_far == n) first_far = i;
        }
    }
    size_t allowed = frac > 0 ? (size_t)(frac * (double)n) + 1 : 0;
    if (n && (double)flips / (double)n > e->max_flip) e->max_flip = (double)flips / (double)n;
    CHECK(far == 0, "%s %s: %zu element(s) more than one code apart, first [%zu]: cuda 0x%x cpu 0x%x", desc, what,
          far, first_far, first_far < n ? code_at(gpu, width, first_far) : 0,
          first_far < n ? code_at(cpu, width, first_far) : 0);
    CHECK(flips <= allowed, "%s %s: %zu of %zu elements one code apart (allowed %zu)", desc, what, flips, n, allowed);
}

/* Values equal (+0 == -0), NaN never. */
static void cmp_equal(const char *desc, const char *what, const float *gpu, const float *cpu, size_t n)
{
    size_t i = 0;
    while (i < n && gpu[i] == cpu[i]) i++;
    CHECK(i == n, "%s %s: [%zu] cuda %.9g != cpu %.9g", desc, what, i, i < n ? gpu[i] : 0.0f, i < n ? cpu[i] : 0.0f);
}

/* A non-FP8 output (FP32 or BF16) of both backends, against each other (FP32
 * by TOL_F32, BF16 by codes) and, FP32 ones, against the float64 reference. */
static void cmp_out(env *e, const char *desc, const char *what, const void *raw_gpu, const void *raw_cpu,
                    f8_dtype dt, size_t n, const double *ref, int exact)
{
    float *g = to_floats(raw_gpu, dt, n), *c = to_floats(raw_cpu, dt, n);
    char w[96];
    if (exact) {
        cmp_equal(desc, what, g, c, n);
    } else if (dt == F8_DTYPE_FP32) {
        cmp_f32(e, desc, what, g, c, n, TOL_F32);
    } else {
        cmp_codes(e, desc, what, raw_gpu, raw_cpu, dt, n, FLIP_BF16, TOL_F32 * rms_of(ref, n));
    }
    if (dt == F8_DTYPE_FP32) {
        snprintf(w, sizeof w, "%s (cpu vs float64)", what);
        cmp_rel(e, desc, w, c, ref, n, TOL_F32);
        snprintf(w, sizeof w, "%s (cuda vs float64)", what);
        cmp_rel(e, desc, w, g, ref, n, TOL_F32);
    }
    free(g), free(c);
}

/* Column sums (dgamma, dbeta, dbias) per element against float64: any FP32
 * summation order of m terms is within (m-1)·2^-24·S of the exact sum, S =
 * Σ|term| (+|old| when accumulating): (rows + 8)·2^-24·S. Each term carries
 * its own error, which for a derivative with cancelling parts (GELU' =
 * 0.5(1 + t) + ...) is relative to the parts, not to the term: each term is
 * allowed TOL_F32 of the terms' rms (as the elementwise outputs are), so
 * rows·TOL_F32·term_rms more. A BF16 result adds one rounding (2^-8). Few
 * columns can cancel to near zero, so no norm-wise tolerance applies here;
 * the bound holds for both backends, so they agree within twice it. */
static void cmp_sums(env *e, const char *desc, const char *what, const void *raw_gpu, const void *raw_cpu,
                     f8_dtype dt, size_t n, const double *ref, const double *S, int64_t rows, double term_rms)
{
    for (int i = 0; i < 2; i++) {
        const void *raw = i == GPU ? raw_gpu : raw_cpu;
        size_t bad = 0, first = n;
        double worst = 0;
        for (size_t c = 0; c < n; c++) {
            double tol = (double)(rows + 8) * ldexp(1.0, -24) * S[c] + (double)rows * TOL_F32 * term_rms;
            if (dt == F8_DTYPE_BF16) tol += ldexp(1.0, -8) * (fabs(ref[c]) + tol) + ldexp(1.0, -133);
            double err = fabs((double)load_elem(raw, dt, c) - ref[c]);
            if (tol > 0 && err / tol > worst) worst = err / tol;
            if (!(err <= tol)) {
                bad++;
                if (first == n) first = c;
            }
        }
        if (dt == F8_DTYPE_FP32 && worst > e->worst) e->worst = worst; /* BF16: rounding fills the bound */
        CHECK(bad == 0, "%s %s: %s has %zu column(s) beyond the summation bound, first [%zu] %.9g vs float64 %.9g",
              desc, what, i == GPU ? "cuda" : "cpu", bad, first, first < n ? load_elem(raw, dt, first) : 0.0f,
              first < n ? ref[first] : 0.0);
    }
}

static void cmp_amax(env *e, const char *desc, float gpu, float cpu, int exact, double tol)
{
    double err = fabs((double)gpu - cpu) / fmax(fabs(cpu), 1e-30);
    if (exact) {
        CHECK(gpu == cpu, "%s amax: cuda %.9g cpu %.9g", desc, gpu, cpu);
    } else {
        note(e, err, tol);
        CHECK(err <= tol, "%s amax: cuda %.9g cpu %.9g (rel %.3g)", desc, gpu, cpu, err);
    }
}

/* Roughly N(0, 1): Irwin-Hall of four uniforms (tails cut at ±3.46), a few
 * times cheaper than Box-Muller on the millions of values drawn here. */
static double rnd_normal(test_rng *r)
{
    double s = 0;
    for (int i = 0; i < 4; i++) s += rng_uniform(r);
    return (s - 2.0) * 1.7320508075688772;
}

/* ------------------------------------------------------------------------ */
/* Norm forward                                                              */
/* ------------------------------------------------------------------------ */

typedef struct shape {
    int64_t rows, cols;
} shape;

typedef struct norm_io {
    void *x, *gamma, *beta; /* host images */
    float *xv, *gv, *bv;    /* what the kernels read (g already 1 + gamma when zero-centred) */
} norm_io;

/* Rows of x: mean U[-1, 1] plus sd U[0.5, 2] times N(0, 1) (bounded
 * cancellation in x - mu); gamma around 1 (around 0 when zero-centred). */
static norm_io norm_inputs(env *e, int64_t rows, int64_t cols, f8_dtype xdt, f8_dtype pdt, int zc)
{
    norm_io io;
    size_t n = (size_t)(rows * cols);
    io.x = xmalloc(n * 4), io.xv = xmalloc(n * 4 + 4);
    io.gamma = xmalloc((size_t)cols * 4 + 4), io.beta = xmalloc((size_t)cols * 4 + 4);
    io.gv = xmalloc((size_t)cols * 4 + 4), io.bv = xmalloc((size_t)cols * 4 + 4);
    for (int64_t r = 0; r < rows; r++) {
        double mean = 2 * rng_uniform(&e->rng) - 1, sd = 0.5 + 1.5 * rng_uniform(&e->rng);
        for (int64_t c = 0; c < cols; c++)
            io.xv[r * cols + c] = store_elem(io.x, xdt, (size_t)(r * cols + c), (float)(mean + sd * rnd_normal(&e->rng)));
    }
    for (int64_t c = 0; c < cols; c++) {
        float g = store_elem(io.gamma, pdt, (size_t)c, (float)((zc ? 0.0 : 1.0) + 0.3 * rnd_normal(&e->rng)));
        io.gv[c] = zc ? 1.0f + g : g;
        io.bv[c] = store_elem(io.beta, pdt, (size_t)c, (float)(0.3 * rnd_normal(&e->rng)));
    }
    return io;
}

static void norm_io_free(norm_io *io)
{
    free(io->x), free(io->xv), free(io->gamma), free(io->beta), free(io->gv), free(io->bv);
}

/* float64 statistics of one row, from the values the kernels read. */
static void ref_stats(const float *xv, int64_t cols, int rms, float eps, double *mu, double *rs)
{
    double s = 0, q = 0;
    for (int64_t c = 0; c < cols; c++) s += xv[c];
    double m = rms ? 0.0 : s / (double)cols;
    for (int64_t c = 0; c < cols; c++) q += (xv[c] - m) * (xv[c] - m);
    *mu = m;
    *rs = 1.0 / sqrt(q / (double)cols + (double)eps);
}

typedef struct norm_case {
    shape s;
    int rms, zc;
    float eps;
    f8_dtype x, param, y;
    int stats; /* pass mu/rsigma */
} norm_case;

static const float AMAX0 = 0.25f; /* prior accumulator: the ops take max(prior, ...) */

static void run_norm_fwd(env *e, const norm_case *nc)
{
    const int64_t R = nc->s.rows, C = nc->s.cols;
    const size_t n = (size_t)(R * C), ysz = f8_dtype_size(nc->y), psz = f8_dtype_size(nc->param);
    const int fp8 = is_fp8(nc->y);
    char desc[200];
    snprintf(desc, sizeof desc, "norm_fwd [%lld,%lld] %s zc %d eps %g x %s param %s y %s stats %d", (long long)R,
             (long long)C, nc->rms ? "rms" : "ln", nc->zc, nc->eps, f8_dtype_name(nc->x), f8_dtype_name(nc->param),
             f8_dtype_name(nc->y), nc->stats);
    norm_io io = norm_inputs(e, R, C, nc->x, nc->param, nc->zc);
    const float scale = fp8 ? (nc->y == F8_DTYPE_E4M3 ? 37.5f : 1200.0f) : 1.0f; /* some saturate */
    float a0 = AMAX0;
    dual x = dual_new(e, n * f8_dtype_size(nc->x), io.x), gamma = dual_new(e, (size_t)C * psz, io.gamma);
    dual beta = dual_new(e, (size_t)C * psz, io.beta), y = dual_new(e, n * ysz, NULL);
    dual mu = dual_new(e, (size_t)R * 4, NULL), rs = dual_new(e, (size_t)R * 4, NULL);
    dual sc = dual_new(e, 4, &scale), amax = dual_new(e, 4, &a0), sinv = dual_new(e, 4, NULL);
    void *y0 = xmalloc(n * ysz + 1);
    float *mu0 = xmalloc((size_t)R * 4 + 4), *rs0 = xmalloc((size_t)R * 4 + 4);
    for (int i = 0; i < 3; i++) { /* i = 2: the GPU again, for the determinism check below */
        const int k = i > 1 ? GPU : i;
        f8_ctx *ctx = e->ctx[k];
        f8i_norm_fwd_args a = {.x = x.p[k], .x_dtype = nc->x, .rows = R, .cols = C, .gamma = gamma.p[k],
                               .beta = beta.p[k], .param_dtype = nc->param, .rms = nc->rms, .zero_centered = nc->zc,
                               .eps = nc->eps, .y = y.p[k], .y_dtype = nc->y,
                               .scale = fp8 ? sc.p[k] : NULL, .amax = fp8 ? amax.p[k] : NULL,
                               .scale_inv = fp8 ? sinv.p[k] : NULL,
                               .mu = nc->stats && !nc->rms ? mu.p[k] : NULL, .rsigma = nc->stats ? rs.p[k] : NULL};
        CHECK_OK(ctx, f8i_op_norm_fwd(ctx, &a));
        if (i == 1) { /* the first GPU run's bits, before the re-run overwrites them */
            dual_get(e, &y, GPU, y0);
            dual_get(e, &mu, GPU, mu0);
            dual_get(e, &rs, GPU, rs0);
        }
    }
    void *hy[2] = {xmalloc(n * ysz + 1), xmalloc(n * ysz + 1)};
    float *hmu[2] = {xmalloc((size_t)R * 4 + 4), xmalloc((size_t)R * 4 + 4)};
    float *hrs[2] = {xmalloc((size_t)R * 4 + 4), xmalloc((size_t)R * 4 + 4)};
    float ham[2], hsi[2];
    for (int i = 0; i < 2; i++) {
        dual_get(e, &y, i, hy[i]);
        dual_get(e, &mu, i, hmu[i]);
        dual_get(e, &rs, i, hrs[i]);
        dual_get(e, &amax, i, &ham[i]);
        dual_get(e, &sinv, i, &hsi[i]);
    }

    /* a re-run gives the same bits (amax: the max of the same values) */
    CHECK(memcmp(y0, hy[GPU], n * ysz) == 0, "%s: y differs between two GPU runs", desc);
    CHECK(memcmp(mu0, hmu[GPU], (size_t)R * 4) == 0, "%s: mu differs between two GPU runs", desc);
    CHECK(memcmp(rs0, hrs[GPU], (size_t)R * 4) == 0, "%s: rsigma differs between two GPU runs", desc);
    free(y0), free(mu0), free(rs0);
    /* float64 reference of v, mu, rsigma */
    double *rv = xmalloc(n * 8 + 8), *rmu = xmalloc((size_t)R * 8 + 8), *rrs = xmalloc((size_t)R * 8 + 8);
    double ramax = AMAX0;
    for (int64_t r = 0; r < R; r++) {
        ref_stats(io.xv + r * C, C, nc->rms, nc->eps, &rmu[r], &rrs[r]);
        for (int64_t c = 0; c < C; c++) {
            double v = (io.xv[r * C + c] - rmu[r]) * rrs[r] * io.gv[c] + (nc->rms ? 0.0 : io.bv[c]);
            rv[r * C + c] = v;
            ramax = fmax(ramax, fabs(v));
        }
    }
    if (fp8) {
        cmp_codes(e, desc, "y codes", hy[GPU], hy[CPU], nc->y, n, FLIP_FP8, TOL_F32 * rms_of(rv, n) * scale);
        cmp_amax(e, desc, ham[GPU], ham[CPU], 0, TOL_AMAX);
        double aerr = fabs(ham[CPU] - ramax) / ramax;
        CHECK(aerr <= TOL_AMAX * 10, "%s amax: cpu %.9g vs float64 %.9g", desc, ham[CPU], ramax);
        for (int i = 0; i < 2; i++)
            CHECK(hsi[i] == 1.0f / scale, "%s %s scale_inv %.9g, want 1/%g", desc, i ? "cuda" : "cpu", hsi[i], scale);
    } else {
        cmp_out(e, desc, "y", hy[GPU], hy[CPU], nc->y, n, rv, 0);
    }
    if (nc->stats) {
        if (!nc->rms) cmp_out(e, desc, "mu", hmu[GPU], hmu[CPU], F8_DTYPE_FP32, (size_t)R, rmu, 0);
        cmp_out(e, desc, "rsigma", hrs[GPU], hrs[CPU], F8_DTYPE_FP32, (size_t)R, rrs, 0);
    }
    if (R == 0 || C == 0) { /* nothing but scale_inv */
        for (int i = 0; i < 2; i++)
            CHECK(!fp8 || ham[i] == AMAX0, "%s: %s wrote amax %g on an empty input", desc, i ? "cuda" : "cpu", ham[i]);
    }
    dual *all[] = {&x, &gamma, &beta, &y, &mu, &rs, &sc, &amax, &sinv};
    for (int k = 0; k < NELEM(all); k++) dual_free(e, all[k]);
    for (int i = 0; i < 2; i++) free(hy[i]), free(hmu[i]), free(hrs[i]);
    free(rv), free(rmu), free(rrs);
    norm_io_free(&io);
}

/* 8200 and 17001 columns take the CUDA backend's "wide" backward (> 8192)
 * and forward (> 16384) kernels. */
static const shape NORM_SHAPES[] = {{7, 11}, {1, 3221}, {2333, 1}, {1481, 677}, {33, 8200}, {5, 17001}, {0, 64},
                                    {2048, 4096}};
#define LARGE(s) ((s).rows * (s).cols > (int64_t)4 << 20)

static void test_norm_fwd(env *e)
{
    static const f8_dtype ys[4] = {F8_DTYPE_FP32, F8_DTYPE_BF16, F8_DTYPE_E4M3, F8_DTYPE_E5M2};
    for (int s = 0; s < NELEM(NORM_SHAPES); s++) {
        if (e->quick && LARGE(NORM_SHAPES[s])) continue;
        /* all 128 combinations on the small shapes; the large one takes 8
         * spread over them (every y dtype, both norms) */
        for (int v = 0; v < 128; v++) {
            if (LARGE(NORM_SHAPES[s]) && v % 16 != s) continue;
            norm_case nc = {.s = NORM_SHAPES[s], .rms = v & 1, .zc = (v >> 1) & 1, .eps = (v >> 2) & 1 ? 1e-1f : 1e-5f,
                            .x = (v >> 3) & 1 ? F8_DTYPE_BF16 : F8_DTYPE_FP32,
                            .param = (v >> 4) & 1 ? F8_DTYPE_BF16 : F8_DTYPE_FP32, .y = ys[(v >> 5) & 3],
                            .stats = v % 7 != 3};
            run_norm_fwd(e, &nc);
        }
    }
}

/* The CUDA kernels' layouts, through the default path against the oracle
 * (and each re-run for the same bits), on 16-byte rows: many narrow rows, so
 * each row group wraps its ring several times; 64-thread groups (LayerNorm's
 * staged kernel takes them in 512-thread blocks); 4-warp groups; a row whose
 * last warp holds a partial span (2056 BF16 columns: 3 pieces a lane); the
 * fit kernel's layouts: 3 pieces a lane in two warps (1536), 4 in two
 * (2048), 4 in four (4096), 3 in eight (6144), 4 in eight (8192); and
 * one-warp rows it leaves to the row-group kernels (768, 1024). The cases:
 * the fit kernel's dtypes for both norms (BF16 x, E4M3 or BF16 y), and the
 * row-group kernels' others (FP32 x or y, E5M2). Below the F8_TEST_QUICK
 * cut, so compute-sanitizer sees them. */
static void test_norm_fwd_layouts(env *e)
{
    static const shape shapes[] = {{16000, 256}, {4000, 1024}, {900, 4096}, {129, 2056}, {1001, 768},
                                   {500, 1536},  {1000, 2048}, {130, 6144}, {67, 8192}};
    static const struct {
        int rms, zc;
        float eps;
        f8_dtype x, param, y;
    } cases[] = {
        {0, 0, 1e-5f, F8_DTYPE_BF16, F8_DTYPE_BF16, F8_DTYPE_E4M3},
        {1, 0, 1e-5f, F8_DTYPE_BF16, F8_DTYPE_BF16, F8_DTYPE_E4M3},
        {0, 1, 1e-1f, F8_DTYPE_BF16, F8_DTYPE_FP32, F8_DTYPE_BF16},
        {1, 1, 1e-5f, F8_DTYPE_FP32, F8_DTYPE_FP32, F8_DTYPE_FP32},
        {0, 0, 1e-5f, F8_DTYPE_FP32, F8_DTYPE_BF16, F8_DTYPE_E5M2},
    };
    for (int s = 0; s < NELEM(shapes); s++)
        for (int k = 0; k < NELEM(cases); k++) {
            norm_case nc = {.s = shapes[s], .rms = cases[k].rms, .zc = cases[k].zc, .eps = cases[k].eps,
                            .x = cases[k].x, .param = cases[k].param, .y = cases[k].y, .stats = 1};
            run_norm_fwd(e, &nc);
        }
}

/* ------------------------------------------------------------------------ */
/* Norm backward                                                             */
/* ------------------------------------------------------------------------ */

typedef struct normb_case {
    shape s;
    int rms, zc;
    f8_dtype x, dy, dx, param; /* dx FP32/BF16, or 0xFF for none */
    int accumulate, with_dbeta;
} normb_case;

#define NO_DX ((f8_dtype)0xFF)

static void run_norm_bwd(env *e, const normb_case *nc)
{
    const int64_t R = nc->s.rows, C = nc->s.cols;
    const size_t n = (size_t)(R * C), psz = f8_dtype_size(nc->param);
    const int want_dx = nc->dx != NO_DX;
    const f8_dtype dxt = want_dx ? nc->dx : F8_DTYPE_FP32;
    char desc[200];
    snprintf(desc, sizeof desc, "norm_bwd [%lld,%lld] %s zc %d x %s dy %s dx %s param %s acc %d dbeta %d",
             (long long)R, (long long)C, nc->rms ? "rms" : "ln", nc->zc, f8_dtype_name(nc->x), f8_dtype_name(nc->dy),
             want_dx ? f8_dtype_name(nc->dx) : "none", f8_dtype_name(nc->param), nc->accumulate, nc->with_dbeta);
    norm_io io = norm_inputs(e, R, C, nc->x, nc->param, nc->zc);
    const float eps = 1e-5f;
    /* mu and rsigma as the forward would save them: computed here, identical on both */
    float *hmu = xmalloc((size_t)R * 4 + 4), *hrs = xmalloc((size_t)R * 4 + 4);
    for (int64_t r = 0; r < R; r++) {
        double m, s;
        ref_stats(io.xv + r * C, C, nc->rms, eps, &m, &s);
        hmu[r] = (float)m, hrs[r] = (float)s;
    }
    void *hdy = xmalloc(n * 4 + 4);
    float *dyv = xmalloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++) dyv[i] = store_elem(hdy, nc->dy, i, (float)rnd_normal(&e->rng));
    void *g0 = xmalloc((size_t)C * psz + 4), *b0 = xmalloc((size_t)C * psz + 4);
    float *g0v = xmalloc((size_t)C * 4 + 4), *b0v = xmalloc((size_t)C * 4 + 4);
    for (int64_t c = 0; c < C; c++) {
        g0v[c] = nc->accumulate ? store_elem(g0, nc->param, (size_t)c, (float)rnd_normal(&e->rng)) : 0.0f;
        b0v[c] = nc->accumulate ? store_elem(b0, nc->param, (size_t)c, (float)rnd_normal(&e->rng)) : 0.0f;
    }
    dual x = dual_new(e, n * f8_dtype_size(nc->x), io.x), dy = dual_new(e, n * f8_dtype_size(nc->dy), hdy);
    dual gamma = dual_new(e, (size_t)C * psz, io.gamma), mu = dual_new(e, (size_t)R * 4, hmu);
    dual rs = dual_new(e, (size_t)R * 4, hrs), dx = dual_new(e, n * f8_dtype_size(dxt), NULL);
    dual dg = dual_new(e, (size_t)C * psz, nc->accumulate ? g0 : NULL);
    dual db = dual_new(e, (size_t)C * psz, nc->accumulate ? b0 : NULL);
    for (int i = 0; i < 2; i++) {
        f8_ctx *ctx = e->ctx[i];
        f8i_norm_bwd_args a = {.dy = dy.p[i], .dy_dtype = nc->dy, .x = x.p[i], .x_dtype = nc->x, .rows = R, .cols = C,
                               .mu = nc->rms ? NULL : mu.p[i], .rsigma = rs.p[i], .gamma = gamma.p[i],
                               .param_dtype = nc->param, .rms = nc->rms, .zero_centered = nc->zc,
                               .dx = want_dx ? dx.p[i] : NULL, .dx_dtype = dxt, .dgamma = dg.p[i],
                               .dbeta = nc->with_dbeta && !nc->rms ? db.p[i] : NULL, .accumulate = nc->accumulate,
                               .workspace = ctx->scratch, .workspace_bytes = ctx->scratch_bytes};
        CHECK_OK(ctx, f8i_op_norm_bwd(ctx, &a));
    }
    /* float64 reference from the float mu/rsigma both backends read */
    double *rdx = xmalloc(n * 8 + 8), *rdg = xmalloc((size_t)C * 8 + 8), *rdb = xmalloc((size_t)C * 8 + 8);
    double *sg = xmalloc((size_t)C * 8 + 8), *sb = xmalloc((size_t)C * 8 + 8);
    for (int64_t c = 0; c < C; c++) rdg[c] = g0v[c], rdb[c] = b0v[c], sg[c] = fabs(g0v[c]), sb[c] = fabs(b0v[c]);
    for (int64_t r = 0; r < R; r++) {
        const float *xr = io.xv + r * C, *dr = dyv + r * C;
        double m1 = 0, m2 = 0, m = nc->rms ? 0.0 : hmu[r], s = hrs[r];
        for (int64_t c = 0; c < C; c++) {
            double xh = (xr[c] - m) * s, gd = (double)io.gv[c] * dr[c];
            m1 += gd, m2 += gd * xh;
            rdg[c] += dr[c] * xh;
            rdb[c] += dr[c];
            sg[c] += fabs(dr[c] * xh);
            sb[c] += fabs(dr[c]);
        }
        m1 /= (double)C, m2 /= (double)C;
        for (int64_t c = 0; c < C; c++) {
            double xh = (xr[c] - m) * s, gd = (double)io.gv[c] * dr[c];
            rdx[r * C + c] = s * (gd - (nc->rms ? 0.0 : m1) - xh * m2);
        }
    }
    const size_t dxb = n * f8_dtype_size(dxt), cb = (size_t)C * psz;
    void *hdx[2] = {xmalloc(dxb + 4), xmalloc(dxb + 4)}, *hdg[2] = {xmalloc(cb + 4), xmalloc(cb + 4)};
    void *hdb[2] = {xmalloc(cb + 4), xmalloc(cb + 4)};
    for (int i = 0; i < 2; i++) dual_get(e, &dx, i, hdx[i]), dual_get(e, &dg, i, hdg[i]), dual_get(e, &db, i, hdb[i]);
    if (want_dx) cmp_out(e, desc, "dx", hdx[GPU], hdx[CPU], nc->dx, n, rdx, 0);
    double tg = 0, tb = 0; /* rms of the terms dy·xhat and dy */
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            double xh = (io.xv[r * C + c] - (nc->rms ? 0.0 : hmu[r])) * hrs[r], d = dyv[r * C + c];
            tg += d * xh * d * xh, tb += d * d;
        }
    tg = n ? sqrt(tg / (double)n) : 0.0, tb = n ? sqrt(tb / (double)n) : 0.0;
    if (R > 0 || nc->accumulate) { /* rows 0 without accumulation: "overwritten" with zero sums, or left */
        cmp_sums(e, desc, "dgamma", hdg[GPU], hdg[CPU], nc->param, (size_t)C, rdg, sg, R, tg);
        if (nc->with_dbeta && !nc->rms) cmp_sums(e, desc, "dbeta", hdb[GPU], hdb[CPU], nc->param, (size_t)C, rdb, sb, R, tb);
    }
    dual *all[] = {&x, &dy, &gamma, &mu, &rs, &dx, &dg, &db};
    for (int k = 0; k < NELEM(all); k++) dual_free(e, all[k]);
    for (int i = 0; i < 2; i++) free(hdx[i]), free(hdg[i]), free(hdb[i]);
    free(hmu), free(hrs), free(hdy), free(dyv), free(g0), free(b0), free(g0v), free(b0v), free(rdx), free(rdg), free(rdb), free(sg), free(sb);
    norm_io_free(&io);
}

static void test_norm_bwd(env *e)
{
    static const f8_dtype dxs[3] = {F8_DTYPE_FP32, F8_DTYPE_BF16, NO_DX};
    for (int s = 0; s < NELEM(NORM_SHAPES); s++) {
        if (e->quick && LARGE(NORM_SHAPES[s])) continue;
        for (int v = 0; v < 96; v++) {
            if (LARGE(NORM_SHAPES[s]) && v % 12 != s) continue;
            normb_case nc = {.s = NORM_SHAPES[s], .rms = v & 1, .zc = (v >> 1) & 1,
                             .x = (v >> 2) & 1 ? F8_DTYPE_BF16 : F8_DTYPE_FP32,
                             .param = (v >> 3) & 1 ? F8_DTYPE_BF16 : F8_DTYPE_FP32, .accumulate = (v >> 4) & 1,
                             .dx = dxs[(v >> 5) % 3], .with_dbeta = v % 5 != 2};
            nc.dy = v % 3 == 1 ? F8_DTYPE_BF16 : F8_DTYPE_FP32;
            run_norm_bwd(e, &nc);
        }
    }
}

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
    for (int i = 0; i < 2; i++) {
        f8_ctx *ctx = e->ctx[i];
        f8i_act_fwd_args a = {.act = ac->act, .x = x.p[i], .x_dtype = ac->x, .rows = R, .cols = C, .y = y.p[i],
                              .y_dtype = ac->y, .y_t = ac->fwd_t ? (uint8_t *)yt.p[i] : NULL,
                              .scale = fp8 ? sc.p[i] : NULL, .amax = fp8 ? amax.p[i] : NULL,
                              .scale_inv = fp8 ? sinv.p[i] : NULL};
        CHECK_OK(ctx, f8i_op_act_fwd(ctx, &a));
    }
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
    for (int i = 0; i < 2; i++) {
        f8_ctx *ctx = e->ctx[i];
        f8i_act_bwd_args a = {.act = ac->act, .x = x.p[i], .x_dtype = ac->x, .dy = dy.p[i], .dy_dtype = ac->y,
                              .rows = R, .cols = C, .dx = want_dx ? dx.p[i] : NULL, .dx_dtype = dxt,
                              .out = cast ? out.p[i] : NULL, .out_t = ac->with_t ? out_t.p[i] : NULL,
                              .out_dtype = odt, .scale = sc.p[i], .amax = ac->with_amax ? amax.p[i] : NULL,
                              .scale_inv = ac->with_sinv ? sinv.p[i] : NULL, .dbias = ac->dbias ? db.p[i] : NULL,
                              .dbias_dtype = bdt, .dbias_accumulate = ac->dbias_acc,
                              .workspace = ctx->scratch, .workspace_bytes = ctx->scratch_bytes};
        CHECK_OK(ctx, f8i_op_act_bwd(ctx, &a));
    }
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

/* A GPU buffer holding `bytes` of host at byte `off` past a 256-byte aligned
 * allocation: off 0 lets the CUDA backend take its fast paths (16-byte
 * accesses), one element off sends it to the general kernels. */
typedef struct gbuf {
    void *base, *p;
} gbuf;

static gbuf gbuf_new(env *e, size_t bytes, size_t off, const void *host)
{
    f8_ctx *g = e->ctx[GPU];
    gbuf b = {NULL, NULL};
    if (f8_ctx_alloc(g, bytes + off + 16, &b.base) != F8_OK) die("f8_ctx_alloc", g);
    b.p = (char *)b.base + off;
    uint8_t *img = xmalloc(bytes + 1);
    if (host)
        memcpy(img, host, bytes);
    else
        memset(img, 0xFF, bytes);
    CHECK_OK(g, f8_ctx_upload(g, b.p, img, bytes));
    free(img);
    return b;
}

static void *gbuf_get(env *e, const gbuf *b, size_t bytes)
{
    void *h = xmalloc(bytes + 1);
    CHECK_OK(e->ctx[GPU], f8_ctx_download(e->ctx[GPU], h, b->p, bytes));
    return h;
}

static void same_bytes(const char *desc, const char *what, const void *a, const void *b, size_t bytes)
{
    size_t bad = 0, first = bytes;
    for (size_t i = 0; i < bytes; i++)
        if (((const uint8_t *)a)[i] != ((const uint8_t *)b)[i]) bad++, first = first < i ? first : i;
    CHECK(bad == 0, "%s: %s: %zu bytes differ between the fast and the general kernel (first at byte %zu)", desc, what,
          bad, first);
}

/* norm_bwd_fast_kernel against norm_bwd_kernel: the same dx, dgamma and
 * dbeta bytes. The general run reads x and dy, and writes dx, one element
 * off 16-byte alignment. */
static void fast_norm_bwd(env *e, shape sh, int rms, f8_dtype dyt, f8_dtype dxt)
{
    const int64_t R = sh.rows, C = sh.cols;
    const size_t n = (size_t)(R * C), ys = f8_dtype_size(dyt), xs = f8_dtype_size(dxt);
    char desc[160];
    snprintf(desc, sizeof desc, "fast norm_bwd [%lld,%lld] %s dy %s dx %s", (long long)R, (long long)C,
             rms ? "rms" : "ln", f8_dtype_name(dyt), f8_dtype_name(dxt));
    norm_io io = norm_inputs(e, R, C, F8_DTYPE_BF16, F8_DTYPE_BF16, 0);
    float *hmu = xmalloc((size_t)R * 4 + 4), *hrs = xmalloc((size_t)R * 4 + 4);
    for (int64_t r = 0; r < R; r++) {
        double m, sd;
        ref_stats(io.xv + r * C, C, rms, 1e-5f, &m, &sd);
        hmu[r] = (float)m, hrs[r] = (float)sd;
    }
    void *hdy = xmalloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++) store_elem(hdy, dyt, i, (float)rnd_normal(&e->rng));
    void *out[2][3];
    for (int k = 0; k < 2; k++) { /* k = 0: aligned (fast), 1: one element off (general) */
        gbuf x = gbuf_new(e, n * 2, k * 2, io.x), dy = gbuf_new(e, n * ys, k * ys, hdy);
        gbuf dx = gbuf_new(e, n * xs, k * xs, NULL), g = gbuf_new(e, (size_t)C * 2, 0, io.gamma);
        gbuf mu = gbuf_new(e, (size_t)R * 4, 0, hmu), rs = gbuf_new(e, (size_t)R * 4, 0, hrs);
        gbuf dg = gbuf_new(e, (size_t)C * 2, 0, NULL), db = gbuf_new(e, (size_t)C * 2, 0, NULL);
        f8_ctx *ctx = e->ctx[GPU];
        f8i_norm_bwd_args a = {.dy = dy.p, .dy_dtype = dyt, .x = x.p, .x_dtype = F8_DTYPE_BF16, .rows = R, .cols = C,
                               .mu = rms ? NULL : mu.p, .rsigma = rs.p, .gamma = g.p,
                               .param_dtype = F8_DTYPE_BF16, .rms = rms, .dx = dx.p, .dx_dtype = dxt,
                               .dgamma = dg.p, .dbeta = rms ? NULL : db.p,
                               .workspace = ctx->scratch, .workspace_bytes = ctx->scratch_bytes};
        CHECK_OK(ctx, f8i_op_norm_bwd(ctx, &a));
        out[k][0] = gbuf_get(e, &dx, n * xs), out[k][1] = gbuf_get(e, &dg, (size_t)C * 2);
        out[k][2] = gbuf_get(e, &db, (size_t)C * 2);
        gbuf all[] = {x, dy, dx, g, mu, rs, dg, db};
        for (int j = 0; j < NELEM(all); j++) f8_ctx_free(ctx, all[j].base);
    }
    same_bytes(desc, "dx", out[0][0], out[1][0], n * xs);
    same_bytes(desc, "dgamma", out[0][1], out[1][1], (size_t)C * 2);
    if (!rms) same_bytes(desc, "dbeta", out[0][2], out[1][2], (size_t)C * 2);
    for (int k = 0; k < 2; k++) free(out[k][0]), free(out[k][1]), free(out[k][2]);
    free(hmu), free(hrs), free(hdy);
    norm_io_free(&io);
}

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

/* The norm forward's kernels against each other: the same y, mu, rsigma,
 * amax and scale_inv bytes with every buffer 16-byte aligned (the fit
 * kernel where its layout covers the shape, else LayerNorm's staged kernel
 * or RMSNorm's registers kernel), with x one element off (the registers
 * kernel, or past 8192 columns the same kernel with narrower loads) and with
 * y one element off (the staged or registers kernel with narrower stores). */
static void fast_norm_fwd(env *e, shape sh, int rms, int zc, f8_dtype xdt, f8_dtype ydt)
{
    static const char *where[3] = {"aligned", "x one element off", "y one element off"};
    const int64_t R = sh.rows, C = sh.cols;
    const size_t n = (size_t)(R * C), xs = f8_dtype_size(xdt), ys = f8_dtype_size(ydt);
    const int fp8 = is_fp8(ydt);
    char desc[160];
    snprintf(desc, sizeof desc, "fast norm_fwd [%lld,%lld] %s zc %d x %s y %s", (long long)R, (long long)C,
             rms ? "rms" : "ln", zc, f8_dtype_name(xdt), f8_dtype_name(ydt));
    norm_io io = norm_inputs(e, R, C, xdt, F8_DTYPE_BF16, zc);
    const float scale = ydt == F8_DTYPE_E4M3 ? 37.5f : 1200.0f, a0 = AMAX0;
    void *out[3][5];
    for (int k = 0; k < 3; k++) {
        gbuf x = gbuf_new(e, n * xs, k == 1 ? xs : 0, io.x), y = gbuf_new(e, n * ys, k == 2 ? ys : 0, NULL);
        gbuf g = gbuf_new(e, (size_t)C * 2, 0, io.gamma), b = gbuf_new(e, (size_t)C * 2, 0, io.beta);
        gbuf mu = gbuf_new(e, (size_t)R * 4, 0, NULL), rs = gbuf_new(e, (size_t)R * 4, 0, NULL);
        gbuf sc = gbuf_new(e, 4, 0, &scale), am = gbuf_new(e, 4, 0, &a0), si = gbuf_new(e, 4, 0, NULL);
        f8_ctx *ctx = e->ctx[GPU];
        f8i_norm_fwd_args a = {.x = x.p, .x_dtype = xdt, .rows = R, .cols = C, .gamma = g.p, .beta = b.p,
                               .param_dtype = F8_DTYPE_BF16, .rms = rms, .zero_centered = zc, .eps = 1e-5f,
                               .y = y.p, .y_dtype = ydt, .scale = fp8 ? sc.p : NULL, .amax = fp8 ? am.p : NULL,
                               .scale_inv = fp8 ? si.p : NULL, .mu = rms ? NULL : mu.p, .rsigma = rs.p};
        CHECK_OK(ctx, f8i_op_norm_fwd(ctx, &a));
        out[k][0] = gbuf_get(e, &y, n * ys), out[k][1] = gbuf_get(e, &mu, (size_t)R * 4);
        out[k][2] = gbuf_get(e, &rs, (size_t)R * 4), out[k][3] = gbuf_get(e, &am, 4), out[k][4] = gbuf_get(e, &si, 4);
        gbuf all[] = {x, y, g, b, mu, rs, sc, am, si};
        for (int j = 0; j < NELEM(all); j++) f8_ctx_free(ctx, all[j].base);
    }
    for (int k = 1; k < 3; k++) {
        char d[200];
        snprintf(d, sizeof d, "%s (aligned vs %s)", desc, where[k]);
        same_bytes(d, "y", out[0][0], out[k][0], n * ys);
        if (!rms) same_bytes(d, "mu", out[0][1], out[k][1], (size_t)R * 4);
        same_bytes(d, "rsigma", out[0][2], out[k][2], (size_t)R * 4);
        if (fp8) {
            same_bytes(d, "amax", out[0][3], out[k][3], 4);
            same_bytes(d, "scale_inv", out[0][4], out[k][4], 4);
        }
    }
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < 5; j++) free(out[k][j]);
    norm_io_free(&io);
}

/* Shapes the fast paths run: whole 128-row tiles; norm backward widths of
 * one and two pieces a thread (768: a partly idle block; 5120: two pieces);
 * norm forward widths of each kernel (fast_norm_fwd): one-warp row groups
 * whose ring wraps (9000 x 256) or not (768), 64-thread groups (FP32 1000),
 * a partial last piece span (2056, 5120), the fit kernel's layouts (1536,
 * 2048, 3072, 4096, 6144, 8192) and a row past the row-group kernels (8200),
 * every x and y dtype and both norms on each. Small enough for
 * F8_TEST_QUICK, so compute-sanitizer sees the fast kernels. */
static void test_fast_paths(env *e)
{
    static const f8_dtype ys[4] = {F8_DTYPE_E4M3, F8_DTYPE_BF16, F8_DTYPE_FP32, F8_DTYPE_E5M2};
    static const shape fsh[] = {{9000, 256}, {1001, 768}, {77, 1000}, {300, 1536}, {200, 2048}, {129, 2056},
                                {100, 3072}, {129, 4096}, {64, 5120}, {40, 6144}, {33, 8192}, {17, 8200}};
    for (int s = 0; s < NELEM(fsh); s++)
        for (int v = 0; v < 16; v++)
            fast_norm_fwd(e, fsh[s], v & 1, (v >> 3) & 1, (v >> 1) & 1 ? F8_DTYPE_FP32 : F8_DTYPE_BF16,
                          ys[((v >> 2) + s) & 3]);
    static const shape nsh[] = {{300, 768}, {129, 4096}, {64, 5120}};
    for (int s = 0; s < NELEM(nsh); s++)
        for (int v = 0; v < 8; v++)
            fast_norm_bwd(e, nsh[s], v & 1, (v >> 1) & 1 ? F8_DTYPE_BF16 : F8_DTYPE_FP32,
                          (v >> 2) & 1 ? F8_DTYPE_BF16 : F8_DTYPE_FP32);
    static const shape ash[] = {{256, 384}, {384, 512}};
    for (int s = 0; s < NELEM(ash); s++)
        for (int act = 0; act < 7; act++)
            for (int v = 0; v < 2; v++)
                fast_act_bwd(e, ash[s], (f8_activation)act, v ? F8_DTYPE_BF16 : F8_DTYPE_FP32,
                             (act + v) & 1 ? F8_DTYPE_E5M2 : F8_DTYPE_E4M3);
}

int main(void)
{
    const char *name = "test_cuda_norm_act";
    const char *quick = getenv("F8_TEST_QUICK");
    env e = {{NULL, NULL}, {0x0A0C7A11ull}, quick && *quick && strcmp(quick, "0") != 0, 0.0, 0.0};
    int rc = test_ctx_pair(name, NULL, e.ctx);
    if (rc) return rc;

    /* The ops reduce over rows (dgamma/dbeta, dbias) in their args'
     * workspace; this test passes the ctx scratch, reserved for its largest
     * case (2048 rows, 8192 gated columns). */
    for (int i = 0; i < 2; i++)
        CHECK_OK(e.ctx[i], f8i_scratch_reserve(e.ctx[i], f8i_reduce_workspace_bytes(2333, 8192)));

    if (e.quick) printf("%s: F8_TEST_QUICK: large shapes left out\n", name);
    test_norm_fwd(&e);
    test_norm_fwd_layouts(&e);
    test_norm_bwd(&e);
    test_act(&e);
    test_fast_paths(&e);
    printf("%s: worst err/tol %.3f; largest one-code flip fraction %.2e (allowed %.0e fp8, %.0e bf16)\n", name, e.worst,
           e.max_flip, FLIP_FP8, FLIP_BF16);

    f8_ctx_destroy(e.ctx[GPU]);
    f8_ctx_destroy(e.ctx[CPU]);
    return test_finish(name);
}
