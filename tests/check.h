/*
 * check.h — the small harness every test program uses: CHECK macros that count
 * failures without stopping, a deterministic RNG, and the exit convention the
 * runner (tests/run.sh) reads: 0 passed, 77 skipped, anything else failed.
 */
#ifndef F8_TESTS_CHECK_H
#define F8_TESTS_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "f8.h"

#define TEST_SKIP_CODE 77

static int test_failures = 0;
static int test_checks = 0;

#define CHECK(cond, ...)                                                         \
    do {                                                                         \
        test_checks++;                                                           \
        if (!(cond)) {                                                           \
            test_failures++;                                                     \
            if (test_failures <= 30) {                                           \
                fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
                fprintf(stderr, __VA_ARGS__);                                    \
                fprintf(stderr, "\n");                                           \
            }                                                                    \
        }                                                                        \
    } while (0)

/* A call that must return F8_OK; prints the ctx message otherwise. */
#define CHECK_OK(ctx, call)                                                      \
    do {                                                                         \
        f8_status st_ = (call);                                                  \
        CHECK(st_ == F8_OK, "%s -> %s: %s", #call, f8_status_string(st_),        \
              (ctx) ? f8_ctx_last_error(ctx) : "");                              \
    } while (0)

/* A call that must fail with `want`. */
#define CHECK_STATUS(ctx, call, want)                                            \
    do {                                                                         \
        f8_status st_ = (call);                                                  \
        CHECK(st_ == (want), "%s -> %s, wanted %s (%s)", #call,                  \
              f8_status_string(st_), f8_status_string(want),                     \
              (ctx) ? f8_ctx_last_error(ctx) : "");                              \
    } while (0)

/* Print the summary and return the process exit code. */
static inline int test_finish(const char *name)
{
    printf("%s: %d checks, %d failed\n", name, test_checks, test_failures);
    return test_failures ? 1 : 0;
}

static inline int test_skip(const char *name, const char *why)
{
    printf("%s: SKIPPED (%s)\n", name, why);
    return TEST_SKIP_CODE;
}

/* Stop the test program on a failure it cannot go on from (setup). */
static inline _Noreturn void die(const char *what, f8_ctx *ctx)
{
    fprintf(stderr, "fatal: %s: %s\n", what, ctx ? f8_ctx_last_error(ctx) : "");
    exit(1);
}

static inline void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) die("host malloc", NULL);
    return p;
}

/* A whole text file, NUL-terminated (malloc'd); dies when it cannot be read. */
static inline char *read_text_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) die(path, NULL);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = (char *)xmalloc((size_t)n + 1);
    if (n < 0 || fread(s, 1, (size_t)n, f) != (size_t)n) die(path, NULL);
    s[n] = '\0';
    fclose(f);
    return s;
}

/* splitmix64: deterministic, seedable, good enough for test data. */
typedef struct test_rng {
    uint64_t s;
} test_rng;

static inline uint64_t rng_u64(test_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double rng_uniform(test_rng *r) { return (double)(rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

/* Standard normal (Box-Muller). */
static inline double rng_normal(test_rng *r)
{
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Relative Frobenius error ||a - b|| / ||b|| of n floats (b the reference). */
static inline double rel_error(const float *a, const double *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* After a failed norm check of got against ref ([n / cols, cols] row-major):
 * print the first element off by more than 4·tol·rms(ref) (or NaN on one
 * side only), with its row, column and both values, and the worst one. */
static inline void report_mismatch(const char *desc, const char *what, const float *got, const double *ref, size_t n,
                                   size_t cols, double tol)
{
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += ref[i] * ref[i];
    const double bound = 4.0 * tol * (n ? sqrt(ss / (double)n) : 0.0);
    size_t first = n, worst = n, count = 0;
    double wd = -1;
    if (!cols) cols = 1;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - ref[i]);
        const int bad = isnan(got[i]) != isnan(ref[i]) || d > bound;
        if (!bad) continue;
        count++;
        if (first == n) first = i;
        if (isnan(d) || d > wd) wd = isnan(d) ? INFINITY : d, worst = i;
    }
    if (first == n) {
        printf("    %s %s: no single element off by more than %.3g\n", desc, what, bound);
        return;
    }
    printf("    %s %s: %zu of %zu elements off by more than %.3g; first [%zu, %zu] got %.9g want %.9g; "
           "worst [%zu, %zu] got %.9g want %.9g\n",
           desc, what, count, n, bound, first / cols, first % cols, (double)got[first], ref[first], worst / cols,
           worst % cols, (double)got[worst], ref[worst]);
}

/* Create a ctx of the given backend with the default recipe (or `recipe`). On
 * failure returns NULL and writes the reason into why[256]. */
static inline f8_ctx *test_ctx(f8_backend backend, const f8_recipe *recipe, char *why)
{
    f8_ctx_config cfg = f8_ctx_config_default();
    cfg.backend = backend;
    if (recipe) cfg.recipe = *recipe;
    f8_ctx *ctx = NULL;
    f8_status st = f8_ctx_create(&cfg, &ctx, why, 256);
    if (st != F8_OK) return NULL;
    return ctx;
}

/* The CPU + CUDA pair every GPU test compares. Returns 0 with both created;
 * TEST_SKIP_CODE (after printing the reason) where there is no usable GPU;
 * 1 on any other failure (a built CUDA backend that fails is a failure). */
static inline int test_ctx_pair(const char *name, const f8_recipe *recipe, f8_ctx *pair[2])
{
    char why[256] = "";
    pair[0] = pair[1] = NULL;
    pair[0] = test_ctx(F8_BACKEND_CPU, recipe, why);
    if (!pair[0]) {
        fprintf(stderr, "%s: cannot create the CPU ctx: %s\n", name, why);
        return 1;
    }
    f8_ctx_config cfg = f8_ctx_config_default();
    cfg.backend = F8_BACKEND_CUDA;
    if (recipe) cfg.recipe = *recipe;
    f8_status st = f8_ctx_create(&cfg, &pair[1], why, sizeof why);
    if (st == F8_OK) return 0;
    f8_ctx_destroy(pair[0]);
    pair[0] = NULL;
    if (st == F8_ERR_NO_DEVICE) return test_skip(name, why);
    fprintf(stderr, "%s: f8_ctx_create(CUDA) -> %s: %s\n", name, f8_status_string(st), why);
    return 1;
}

/* FP8 telemetry counted on the host from the FP32 values v a cast took (the
 * contract's FP32 product v·scale): elements, saturated (|v·scale| > the
 * format's max, before the clamp), flushed (v != 0 whose code is +-0). */
static inline void fp8_host_stats(const float *v, int64_t n, float scale, f8_dtype dt, uint64_t st[3])
{
    const float fmax = f8_fp8_max(dt);
    st[0] = (uint64_t)n, st[1] = st[2] = 0;
    for (int64_t i = 0; i < n; i++) {
        const float p = v[i] * scale;
        st[1] += fabsf(p) > fmax;
        st[2] += v[i] != 0.0f && (f8_fp8_from_float(p, dt) & 0x7Fu) == 0;
    }
}

#define CHECK_STATS(got, want, what, name)                                                                        \
    CHECK((got)[0] == (want)[0] && (got)[1] == (want)[1] && (got)[2] == (want)[2],                                \
          "%s %s telemetry: count %llu sat %llu flushed %llu, expected %llu %llu %llu", name, what,               \
          (unsigned long long)(got)[0], (unsigned long long)(got)[1], (unsigned long long)(got)[2],               \
          (unsigned long long)(want)[0], (unsigned long long)(want)[1], (unsigned long long)(want)[2])

#endif /* F8_TESTS_CHECK_H */
