/*
 * cuda_norm_act_tests.h — what test_cuda_norm.c and test_cuda_act.c share:
 * the CPU + CUDA pair (env) and its main, buffers in both ctxs (dual) and in
 * the GPU's alone at an offset (gbuf), host element access, and the
 * comparisons with their tolerances:
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
 */
#ifndef F8_TESTS_CUDA_NORM_ACT_TESTS_H
#define F8_TESTS_CUDA_NORM_ACT_TESTS_H

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

/* FP8 telemetry of a fused cast, CUDA against the CPU: the same element
 * count; saturated and flushed counts differ only where the codes do (a
 * one-code flip at the saturation or flush edge), so by at most the codes'
 * flip allowance (none where the op is exact). */
static void cmp_stats(const char *desc, const uint64_t *cpu, const uint64_t *gpu, size_t n, int exact)
{
    const double allow = exact ? 0.0 : FLIP_FP8 * (double)n + 1.0;
    const double ds = fabs((double)gpu[1] - (double)cpu[1]), df = fabs((double)gpu[2] - (double)cpu[2]);
    CHECK(gpu[0] == cpu[0] && gpu[0] == (uint64_t)n && ds <= allow && df <= allow,
          "%s telemetry: cuda count %llu sat %llu flushed %llu, cpu %llu %llu %llu (n %zu)", desc,
          (unsigned long long)gpu[0], (unsigned long long)gpu[1], (unsigned long long)gpu[2],
          (unsigned long long)cpu[0], (unsigned long long)cpu[1], (unsigned long long)cpu[2], n);
}

/* Roughly N(0, 1): Irwin-Hall of four uniforms (tails cut at ±3.46), a few
 * times cheaper than Box-Muller on the millions of values drawn here. */
static double rnd_normal(test_rng *r)
{
    double s = 0;
    for (int i = 0; i < 4; i++) s += rng_uniform(r);
    return (s - 2.0) * 1.7320508075688772;
}

typedef struct shape {
    int64_t rows, cols;
} shape;

/* Shapes of more than 4 Mi elements, left out under F8_TEST_QUICK. */
#define LARGE(s) ((s).rows * (s).cols > (int64_t)4 << 20)

static const float AMAX0 = 0.25f; /* prior accumulator: the ops take max(prior, ...) */
/* An output dtype of "none": that output is not asked for. */
#define NO_DX ((f8_dtype)0xFF)

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
/* A program's main: create the pair (returns TEST_SKIP_CODE without a GPU,
 * after printing why), reserve the scratch, run each test on it (one random
 * stream, seeded here), print the summary. */
static int norm_act_run(const char *name, void (*const tests[])(env *), int count)
{
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
    for (int i = 0; i < count; i++) tests[i](&e);
    printf("%s: worst err/tol %.3f; largest one-code flip fraction %.2e (allowed %.0e fp8, %.0e bf16)\n", name, e.worst,
           e.max_flip, FLIP_FP8, FLIP_BF16);

    f8_ctx_destroy(e.ctx[GPU]);
    f8_ctx_destroy(e.ctx[CPU]);
    return test_finish(name);
}

#endif /* F8_TESTS_CUDA_NORM_ACT_TESTS_H */
