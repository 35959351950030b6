/*
 * cuda_ops_tests.h — what test_cuda_cast.c and test_cuda_ops.c share: the
 * CPU + CUDA ctx pair (env) and buffers of the same size in both (twin), bit
 * comparisons of FP32 and BF16 results, the generator of test values (normal,
 * special, ties, tiny), element access in FP32 or BF16.
 */
#ifndef F8_TESTS_CUDA_OPS_TESTS_H
#define F8_TESTS_CUDA_OPS_TESTS_H

#include <float.h>

#include "check.h"
#include "core/f8i.h"
#include "core/ops.h"

enum { CPU = 0, GPU = 1 };

typedef struct env {
    f8_ctx *ctx[2]; /* [CPU] oracle, [GPU] under test */
    test_rng rng;
    double worst[3]; /* worst GEMM err/tol per tolerance class, printed at the end */
    int quick;       /* F8_TEST_QUICK set: leave out the large shapes (memcheck runs) */
} env;

/* One buffer of the same size in both ctxs' backend memory. */
typedef struct twin {
    void *p[2];
    size_t bytes;
} twin;

static void twin_put(env *e, twin *t, const void *host)
{
    for (int i = 0; i < 2 && t->bytes; i++)
        CHECK_OK(e->ctx[i], f8_ctx_upload(e->ctx[i], t->p[i], host, t->bytes));
}

/* Allocate in both ctxs (at least 1 byte, so zero-size operands still get a
 * valid pointer) and upload `host` to both when given. */
static twin twin_new(env *e, size_t bytes, const void *host)
{
    twin t = {{NULL, NULL}, bytes};
    for (int i = 0; i < 2; i++)
        if (f8_ctx_alloc(e->ctx[i], bytes ? bytes : 1, &t.p[i]) != F8_OK) die("f8_ctx_alloc", e->ctx[i]);
    if (host) twin_put(e, &t, host);
    return t;
}

static void twin_get(env *e, const twin *t, int i, void *host)
{
    if (t->bytes) CHECK_OK(e->ctx[i], f8_ctx_download(e->ctx[i], host, t->p[i], t->bytes));
}

static void twin_free(env *e, twin *t)
{
    for (int i = 0; i < 2; i++) f8_ctx_free(e->ctx[i], t->p[i]);
}

static uint32_t fbits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float fval(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* FP32 words equal bit for bit, except that any NaN matches any NaN where the
 * contract leaves NaN payloads open (FP32 results of arithmetic on NaN). */
static size_t first_diff_f32(const float *a, const float *b, size_t n, int nan_any)
{
    for (size_t i = 0; i < n; i++) {
        if (nan_any && isnan(a[i]) && isnan(b[i])) continue;
        if (fbits(a[i]) != fbits(b[i])) return i;
    }
    return n;
}

static size_t first_diff_bf16(const uint16_t *a, const uint16_t *b, size_t n, int nan_any)
{
    for (size_t i = 0; i < n; i++) {
        if (nan_any && isnan(f8_bf16_to_float(a[i])) && isnan(f8_bf16_to_float(b[i]))) continue;
        if (a[i] != b[i]) return i;
    }
    return n;
}

/* ------------------------------------------------------------------------ */
/* Test values                                                               */
/* ------------------------------------------------------------------------ */

enum { K_NORMAL, K_SPECIAL, K_TIES, K_TINY, K_COUNT };

/* One value of a kind. NORMAL: N(0,1) times a magnitude from FP8-subnormal to
 * far past the FP8 range. SPECIAL: NORMAL with ~5% NaN, inf, signed zeros,
 * FP32 subnormals and values at the saturation thresholds (464 and 61440 are
 * max + ulp/2: they tie to max). TIES: FP8 values of `fp8` and midpoints
 * between neighbours, the round-to-nearest-even cases. TINY: FP32 subnormals
 * and values near FLT_MIN (flush-to-zero would change them). `bounded` leaves
 * out huge finite values, so that column sums cannot overflow in any order. */
static float gen_value(test_rng *r, int kind, f8_dtype fp8, int bounded)
{
    static const float mags[] = {1e-3f, 0.05f, 1.0f, 30.0f, 1e3f, 1e5f};
    static const float specials[] = {NAN,        -NAN,     INFINITY, -INFINITY, 0.0f,     -0.0f,
                                     FLT_MIN,    -1e-45f,  448.0f,   464.0f,    -464.01f, 57344.0f,
                                     -61440.0f,  61439.9f, FLT_MAX,  -3e38f};
    const int nspecial = bounded ? 14 : 16; /* FLT_MAX and -3e38 are last */
    switch (kind) {
    case K_SPECIAL:
        if (rng_uniform(r) < 0.05) return specials[rng_u64(r) % (uint64_t)nspecial];
        return (float)rng_normal(r) * mags[rng_u64(r) % 6];
    case K_TIES: {
        const int e5m2 = fp8 == F8_DTYPE_E5M2;
        const uint8_t maxcode = e5m2 ? 0x7B : 0x7E;
        uint8_t c = (uint8_t)(rng_u64(r) % (maxcode + 1u));
        float lo = f8_fp8_to_float(c, fp8);
        float hi = c < maxcode ? f8_fp8_to_float((uint8_t)(c + 1), fp8)
                               : 2 * lo - f8_fp8_to_float((uint8_t)(c - 1), fp8); /* next step past max */
        float v = (rng_u64(r) & 1) ? lo : lo + (hi - lo) * 0.5f; /* exact: few significant bits */
        return (rng_u64(r) & 1) ? -v : v;
    }
    case K_TINY: {
        uint32_t u = (rng_u64(r) & 1) ? (uint32_t)(1 + rng_u64(r) % 0x7FFFFF) : (uint32_t)(0x00800000u + rng_u64(r) % 0x01000000u);
        return fval(u | ((rng_u64(r) & 1) ? 0x80000000u : 0));
    }
    default:
        return (float)rng_normal(r) * mags[rng_u64(r) % 6];
    }
}

static float load_elem(const void *p, f8_dtype dtype, size_t i)
{
    return dtype == F8_DTYPE_BF16 ? f8_bf16_to_float(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static void store_elem(void *p, f8_dtype dtype, size_t i, float v)
{
    if (dtype == F8_DTYPE_BF16)
        ((uint16_t *)p)[i] = f8_bf16_from_float(v);
    else
        ((float *)p)[i] = v;
}

/* A NaN pattern put in scale_inv outputs before a call: what the call leaves shows. */
static const uint32_t SINV_POISON = 0x7FBADBADu;

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* body (a test of GEMM cases against the CPU) again with GEMM tuning on the
 * CUDA ctx (f8_ctx_set_gemm_tune): the plans it built are tuned at their
 * next call, the algorithms timing chose must still compute what the CPU
 * does, and some plan must have been tuned. */
static inline void env_run_tuned(env *e, void (*body)(env *), const char *what)
{
    f8_ctx *ctx = e->ctx[GPU];
    const uint64_t before = ctx->gemm_tuned;
    CHECK_OK(ctx, f8_ctx_set_gemm_tune(ctx, 1));
    body(e);
    CHECK_OK(ctx, f8_ctx_set_gemm_tune(ctx, 0));
    printf("%s tuning: %llu plans tuned\n", what, (unsigned long long)(ctx->gemm_tuned - before));
    CHECK(ctx->gemm_tuned > before, "%s tuning chose no plan's algorithm", what);
}

/* A program's main: create the pair (returns TEST_SKIP_CODE without a GPU,
 * after printing why), run each test on it, print the summary. A cast with
 * dbias works in its args' workspace (f8i_reduce_workspace_bytes, 8 MiB for
 * the largest shape here); these tests pass the ctx scratch, reserved with
 * room to spare. */
static int env_run(const char *name, void (*const tests[])(env *), int count)
{
    const char *quick = getenv("F8_TEST_QUICK");
    env e = {{NULL, NULL}, {0x5EEDC0DAull}, {0, 0, 0}, quick && *quick && strcmp(quick, "0") != 0};
    int rc = test_ctx_pair(name, NULL, e.ctx);
    if (rc) return rc;
    for (int i = 0; i < 2; i++) CHECK_OK(e.ctx[i], f8i_scratch_reserve(e.ctx[i], (size_t)16 << 20));
    if (e.quick) printf("%s: F8_TEST_QUICK: large shapes left out\n", name);
    for (int i = 0; i < count; i++) tests[i](&e);
    f8_ctx_destroy(e.ctx[GPU]);
    f8_ctx_destroy(e.ctx[CPU]);
    return test_finish(name);
}

#endif /* F8_TESTS_CUDA_OPS_TESTS_H */
