/*
 * test_fp8.c — the scalar numerics against oracles that share no code with
 * the library:
 *  - FP8 decode: all 256 codes of both formats against the OCP FP8 definition,
 *    evaluated in double from the bit fields (a NaN code gives the one quiet
 *    NaN 0x7FC00000, the bits the CPU and CUDA kernels share);
 *  - FP8 encode, bit for bit, against (a) the CUDA toolkit's host conversion
 *    __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...) when cuda_fp8.h is on the
 *    include path (it compiles as plain C, no GPU), and (b) a brute-force
 *    nearest-code search; inputs are every value and midpoint with their float
 *    neighbours, the subnormal range, specials, the overflow thresholds, FP32
 *    subnormals and 10^7 random floats;
 *  - BF16 round to nearest even against a double nearest-value search;
 *  - dtype sizes, names, maxima and status names.
 */
#include <float.h>

#include "check.h"

/* -DTEST_FP8_NO_CUDA_ORACLE builds the fallback where the header is found anyway
 * (some installs link CUDA's headers into /usr/local/include). */
#if defined(__has_include) && !defined(TEST_FP8_NO_CUDA_ORACLE)
#if __has_include(<cuda_fp8.h>)
#include <cuda_fp8.h>
#define HAVE_CUDA_FP8 1
#endif
#endif
#ifndef HAVE_CUDA_FP8
#define HAVE_CUDA_FP8 0
#endif

#define N_RANDOM_BITS 5000000   /* random bit patterns, each encoded in both formats */
#define N_RANDOM_RANGE 2500000  /* per format: random values around its range */

static float bits_float(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static uint32_t float_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* ------------------------------------------------------------------------ */
/* FP8 oracles                                                               */
/* ------------------------------------------------------------------------ */

typedef struct fmt {
    f8_dtype dtype;
    const char *name;
    int ebits, mbits, bias;
    int e5m2;
    int nfinite;       /* codes 0..nfinite-1 are the finite non-negative values, increasing */
    double value[128]; /* value of code i */
    double mid[128];   /* midpoint of codes i and i+1; the last one is max + ulp/2 */
} fmt;

/* The OCP FP8 definition: E5M2 is IEEE-like (exponent all ones: inf when the
 * mantissa is 0, NaN otherwise); E4M3 gives up inf and keeps one NaN per sign,
 * S.1111.111, so S.1111.110 = 448 is finite. */
static double ocp_value(unsigned code, const fmt *f)
{
    unsigned s = code >> 7;
    unsigned e = (code >> f->mbits) & ((1u << f->ebits) - 1u);
    unsigned m = code & ((1u << f->mbits) - 1u);
    unsigned emax = (1u << f->ebits) - 1u;
    double sign = s ? -1.0 : 1.0;
    if (f->e5m2 && e == emax) return m ? (double)NAN : sign * (double)INFINITY;
    if (!f->e5m2 && e == emax && m == (1u << f->mbits) - 1u) return (double)NAN;
    double frac = (double)m / (double)(1u << f->mbits);
    if (e == 0) return sign * ldexp(frac, 1 - f->bias);
    return sign * ldexp(1.0 + frac, (int)e - f->bias);
}

static void fmt_init(fmt *f, f8_dtype dtype)
{
    f->dtype = dtype;
    f->e5m2 = dtype == F8_DTYPE_E5M2;
    f->name = f->e5m2 ? "e5m2" : "e4m3";
    f->ebits = f->e5m2 ? 5 : 4;
    f->mbits = f->e5m2 ? 2 : 3;
    f->bias = f->e5m2 ? 15 : 7;
    f->nfinite = 0;
    for (unsigned c = 0; c < 128; c++) {
        double v = ocp_value(c, f);
        if (!isfinite(v)) break;
        f->value[f->nfinite++] = v;
    }
    for (int i = 0; i + 1 < f->nfinite; i++) f->mid[i] = 0.5 * (f->value[i] + f->value[i + 1]);
    int n = f->nfinite;
    f->mid[n - 1] = f->value[n - 1] + 0.5 * (f->value[n - 1] - f->value[n - 2]);
}

/* Nearest finite code by search over the value table; exact comparisons in
 * double against exact midpoints. A tie goes to the code whose mantissa LSB
 * (bit 0) is clear. Above max, "nearest" (up to max + ulp/2) and satfinite
 * saturation (beyond) both give max, and so does inf. NaN gives 0x7F. */
static uint8_t oracle_encode(const fmt *f, float x)
{
    if (isnan(x)) return 0x7F;
    unsigned sign = signbit(x) ? 0x80u : 0u;
    double a = fabs((double)x);
    int top = f->nfinite - 1;
    if (a >= f->value[top]) return (uint8_t)(sign | (unsigned)top);
    int lo = 0, hi = top; /* value[lo] <= a < value[hi] */
    while (hi - lo > 1) {
        int m = (lo + hi) / 2;
        if (f->value[m] <= a) lo = m;
        else hi = m;
    }
    int code = lo;
    if (a > f->mid[lo] || (a == f->mid[lo] && (lo & 1))) code = hi;
    return (uint8_t)(sign | (unsigned)code);
}

static void check_encode(const fmt *f, float x)
{
    uint8_t got = f8_fp8_from_float(x, f->dtype);
    uint8_t want = oracle_encode(f, x);
    CHECK(got == want, "%s encode %a (0x%08x): 0x%02x, brute force 0x%02x", f->name, (double)x,
          (unsigned)float_bits(x), got, want);
#if HAVE_CUDA_FP8
    uint8_t nv = (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, f->e5m2 ? __NV_E5M2 : __NV_E4M3);
    CHECK(got == nv, "%s encode %a (0x%08x): 0x%02x, __nv_cvt_float_to_fp8 0x%02x", f->name, (double)x,
          (unsigned)float_bits(x), got, nv);
#endif
}

/* x and -x, each with its two float neighbours. */
static void check_around(const fmt *f, float x)
{
    float xs[3] = {x, nextafterf(x, -INFINITY), nextafterf(x, INFINITY)};
    for (int i = 0; i < 3; i++) {
        check_encode(f, xs[i]);
        check_encode(f, -xs[i]);
    }
}

/* ------------------------------------------------------------------------ */
/* FP8 tests                                                                 */
/* ------------------------------------------------------------------------ */

static void test_decode(const fmt *f)
{
    int nan_codes = 0;
    for (unsigned c = 0; c < 256; c++) {
        double want = ocp_value(c, f);
        float got = f8_fp8_to_float((uint8_t)c, f->dtype);
        if (isnan(want)) {
            nan_codes++;
            CHECK(float_bits(got) == 0x7FC00000u, "%s decode 0x%02x: 0x%08x, want NaN 0x7fc00000", f->name, c,
                  (unsigned)float_bits(got));
        } else {
            CHECK((double)got == want && (signbit(got) != 0) == (signbit(want) != 0), "%s decode 0x%02x: %a, want %a",
                  f->name, c, (double)got, want);
        }
    }
    /* The oracle itself against the header's numbers. */
    CHECK(nan_codes == (f->e5m2 ? 6 : 2), "%s: %d NaN codes", f->name, nan_codes);
    CHECK(f->value[f->nfinite - 1] == (double)f8_fp8_max(f->dtype), "%s max %g", f->name, f->value[f->nfinite - 1]);
    CHECK(f->value[1] == ldexp(1.0, f->e5m2 ? -16 : -9), "%s min subnormal %a", f->name, f->value[1]);
    CHECK(f->value[1 << f->mbits] == ldexp(1.0, f->e5m2 ? -14 : -6), "%s min normal", f->name);
    if (f->e5m2) {
        CHECK(isinf(f8_fp8_to_float(0x7C, f->dtype)) && f8_fp8_to_float(0x7C, f->dtype) > 0, "e5m2 0x7C");
        CHECK(isinf(f8_fp8_to_float(0xFC, f->dtype)) && f8_fp8_to_float(0xFC, f->dtype) < 0, "e5m2 0xFC");
    }
}

/* Every code that has a finite value encodes back to itself (inf saturates). */
static void test_roundtrip(const fmt *f)
{
    for (unsigned c = 0; c < 256; c++) {
        float v = f8_fp8_to_float((uint8_t)c, f->dtype);
        if (isnan(v)) continue;
        unsigned want = isinf(v) ? (c & 0x80u) | (unsigned)(f->nfinite - 1) : c;
        CHECK(f8_fp8_from_float(v, f->dtype) == want, "%s roundtrip 0x%02x", f->name, c);
    }
}

/* Cases from the header and the spec, stated as numbers. */
static void test_encode_spec(const fmt *f)
{
    const uint8_t max = (uint8_t)(f->nfinite - 1);
    const float minsub = (float)f->value[1];
    const float threshold = (float)f->mid[f->nfinite - 1]; /* 464, 61440 */
    f8_dtype d = f->dtype;
    CHECK(threshold == (f->e5m2 ? 61440.0f : 464.0f), "%s threshold %g", f->name, (double)threshold);
    CHECK(f8_fp8_from_float(0.0f, d) == 0x00, "%s +0", f->name);
    CHECK(f8_fp8_from_float(-0.0f, d) == 0x80, "%s -0", f->name);
    CHECK(f8_fp8_from_float(INFINITY, d) == max, "%s +inf", f->name);
    CHECK(f8_fp8_from_float(-INFINITY, d) == (0x80 | max), "%s -inf", f->name);
    CHECK(f8_fp8_from_float(NAN, d) == 0x7F, "%s NaN", f->name);
    CHECK(f8_fp8_from_float(-NAN, d) == 0x7F, "%s -NaN", f->name);
    CHECK(f8_fp8_from_float(threshold, d) == max, "%s at threshold", f->name);
    CHECK(f8_fp8_from_float(nextafterf(threshold, 0), d) == max, "%s below threshold", f->name);
    CHECK(f8_fp8_from_float(-nextafterf(threshold, INFINITY), d) == (0x80 | max), "%s past -threshold", f->name);
    CHECK(f8_fp8_from_float(FLT_MAX, d) == max, "%s FLT_MAX", f->name);
    CHECK(f8_fp8_from_float(0.5f * minsub, d) == 0x00, "%s min_subnormal/2", f->name);
    CHECK(f8_fp8_from_float(-0.5f * minsub, d) == 0x80, "%s -min_subnormal/2", f->name);
    CHECK(f8_fp8_from_float(nextafterf(0.5f * minsub, 1), d) == 0x01, "%s just above min_subnormal/2", f->name);
    CHECK(f8_fp8_from_float(1.5f * minsub, d) == 0x02, "%s 1.5 min_subnormal ties to even", f->name);
    CHECK(f8_fp8_from_float(2.5f * minsub, d) == 0x02, "%s 2.5 min_subnormal ties to even", f->name);
    CHECK(f8_fp8_from_float(bits_float(1), d) == 0x00, "%s smallest FP32 subnormal", f->name);
    CHECK(f8_fp8_from_float(f->e5m2 ? 1.125f : 1.0625f, d) == (f->e5m2 ? 0x3C : 0x38), "%s tie at 1", f->name);
    CHECK(f8_fp8_from_float(f->e5m2 ? 1.375f : 1.1875f, d) == (f->e5m2 ? 0x3E : 0x3A), "%s tie up", f->name);
}

static void test_encode_structured(const fmt *f)
{
    int n = f->nfinite;
    /* every value and every midpoint, including 0, min_subnormal/2 and max + ulp/2 */
    for (int i = 0; i < n; i++) {
        check_around(f, (float)f->value[i]);
        check_around(f, (float)f->mid[i]);
    }
    /* the FP8 subnormal range and the first normal binade on a fine linear grid */
    const double minsub = f->value[1];
    const int grid = 4096 << (f->mbits + 1);
    for (int k = 0; k <= grid; k++) check_around(f, (float)(minsub / 4096.0 * k));
    /* every binade from FP32 subnormals up to 2 * min_normal, by bit pattern */
    uint32_t top = float_bits((float)(2.0 * f->value[1 << f->mbits]));
    for (uint32_t u = 0; u <= top; u += 997u) {
        check_encode(f, bits_float(u));
        check_encode(f, bits_float(u | 0x80000000u));
    }
    /* overflow: 2000 floats around max, the threshold, max + ulp and 2 max */
    float marks[4] = {(float)f->value[n - 1], (float)f->mid[n - 1],
                      (float)(2.0 * f->mid[n - 1] - f->value[n - 1]), (float)(2.0 * f->value[n - 1])};
    for (int j = 0; j < 4; j++) {
        float lo = marks[j], hi = marks[j];
        for (int k = 0; k < 1000; k++) {
            lo = nextafterf(lo, 0);
            hi = nextafterf(hi, INFINITY);
            check_around(f, lo);
            check_around(f, hi);
        }
    }
    /* specials: zeros, infinities, NaNs of both signs and several payloads, FP32 extremes */
    static const uint32_t specials[] = {
        0x00000000u, 0x7F800000u, 0x7FC00000u, 0x7F800001u, 0x7FA00000u, 0x7FFFFFFFu, 0x7FC00001u,
        0x00000001u, 0x00000002u, 0x00400000u, 0x007FFFFFu, 0x00800000u, 0x7F7FFFFFu, 0x3F800000u,
    };
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) {
        check_encode(f, bits_float(specials[i]));
        check_encode(f, bits_float(specials[i] | 0x80000000u));
    }
}

/* Random floats: exponents spread from below the FP8 minimum subnormal to
 * past the FP8 maximum, random mantissa bits and sign. */
static void test_encode_random_range(const fmt *f, test_rng *rng)
{
    const int emin = 1 - f->bias - f->mbits - 3;
    const int emax = (int)ilogb(f->value[f->nfinite - 1]) + 2;
    for (int i = 0; i < N_RANDOM_RANGE; i++) {
        uint64_t r = rng_u64(rng);
        int e = emin + (int)((r >> 32) % (uint64_t)(emax - emin + 1));
        uint32_t u = ((uint32_t)(e + 127) << 23) | ((uint32_t)r & 0x007FFFFFu) | ((uint32_t)(r << 8) & 0x80000000u);
        check_encode(f, bits_float(u));
    }
}

/* ------------------------------------------------------------------------ */
/* BF16                                                                      */
/* ------------------------------------------------------------------------ */

static double bf16_table[0x7F81]; /* non-negative finite patterns, then 2^128 */

/* A BF16 value from its fields (1/8/7, bias 127), in double. */
static double bf16_value(unsigned b)
{
    unsigned e = (b >> 7) & 0xFFu, m = b & 0x7Fu;
    double sign = (b & 0x8000u) ? -1.0 : 1.0;
    if (e == 0xFFu) return m ? (double)NAN : sign * (double)INFINITY;
    if (e == 0) return sign * ldexp((double)m, -133);
    return sign * ldexp((double)(128u + m), (int)e - 134);
}

static void bf16_table_init(void)
{
    for (unsigned b = 0; b < 0x7F80u; b++) bf16_table[b] = bf16_value(b);
    bf16_table[0x7F80] = ldexp(1.0, 128); /* rounding to it overflows to inf (IEEE) */
}

/* Nearest BF16 with ties to even, by search and an exact midpoint compare. */
static uint16_t oracle_bf16(float x)
{
    unsigned sign = signbit(x) ? 0x8000u : 0u;
    if (isnan(x)) return (uint16_t)(sign | 0x7FC0u);
    double a = fabs((double)x);
    if (a >= bf16_table[0x7F80]) return (uint16_t)(sign | 0x7F80u);
    unsigned lo = 0, hi = 0x7F80u; /* table[lo] <= a < table[hi] */
    while (hi - lo > 1) {
        unsigned m = (lo + hi) / 2;
        if (bf16_table[m] <= a) lo = m;
        else hi = m;
    }
    double mid = 0.5 * (bf16_table[lo] + bf16_table[hi]);
    unsigned b = lo;
    if (a > mid || (a == mid && (lo & 1u))) b = hi;
    return (uint16_t)(sign | b);
}

static void check_bf16(float x)
{
    uint16_t got = f8_bf16_from_float(x), want = oracle_bf16(x);
    CHECK(got == want, "bf16 %a (0x%08x): 0x%04x, want 0x%04x", (double)x, (unsigned)float_bits(x), got, want);
}

static void test_bf16(test_rng *rng)
{
    /* low halves just off, at and past the tie, for every upper half */
    static const uint32_t lows[] = {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu};
    bf16_table_init();
    for (unsigned b = 0; b < 0x10000u; b++) {
        float v = f8_bf16_to_float((uint16_t)b);
        double want = bf16_value(b);
        CHECK(float_bits(v) == (uint32_t)b << 16, "bf16 0x%04x decodes to 0x%08x", b, (unsigned)float_bits(v));
        if (!isnan(want)) CHECK((double)v == want, "bf16 0x%04x value %a, want %a", b, (double)v, want);
        for (size_t i = 0; i < sizeof lows / sizeof lows[0]; i++) check_bf16(bits_float((uint32_t)b << 16 | lows[i]));
    }
    for (int i = 0; i < 2000000; i++) check_bf16(bits_float((uint32_t)rng_u64(rng)));
    CHECK(f8_bf16_from_float(1.0f + 0x1p-8f) == 0x3F80, "tie down to even");
    CHECK(f8_bf16_from_float(1.0f + 0x3p-8f) == 0x3F82, "tie up to even");
    CHECK(f8_bf16_from_float(FLT_MAX) == 0x7F80, "FLT_MAX rounds to inf");
    CHECK(f8_bf16_from_float(-INFINITY) == 0xFF80, "-inf");
    CHECK(f8_bf16_from_float(bits_float(0x7F800001u)) == 0x7FC0, "signalling NaN quietened");
    CHECK(f8_bf16_from_float(bits_float(0xFF800001u)) == 0xFFC0, "NaN keeps its sign");
}

/* ------------------------------------------------------------------------ */
/* Small facts                                                               */
/* ------------------------------------------------------------------------ */

static void test_facts(void)
{
    const f8_dtype bad = (f8_dtype)99;
    CHECK(f8_dtype_size(F8_DTYPE_FP32) == 4 && f8_dtype_size(F8_DTYPE_BF16) == 2, "sizes");
    CHECK(f8_dtype_size(F8_DTYPE_E4M3) == 1 && f8_dtype_size(F8_DTYPE_E5M2) == 1, "fp8 sizes");
    CHECK(f8_dtype_size(bad) == 0, "bad dtype size");
    CHECK(!strcmp(f8_dtype_name(F8_DTYPE_FP32), "fp32") && !strcmp(f8_dtype_name(F8_DTYPE_BF16), "bf16"), "names");
    CHECK(!strcmp(f8_dtype_name(F8_DTYPE_E4M3), "e4m3") && !strcmp(f8_dtype_name(F8_DTYPE_E5M2), "e5m2"), "names");
    CHECK(!strcmp(f8_dtype_name(bad), "unknown"), "bad dtype name");
    CHECK(f8_fp8_max(F8_DTYPE_E4M3) == 448.0f && f8_fp8_max(F8_DTYPE_E5M2) == 57344.0f, "fp8 max");
    CHECK(f8_fp8_max(F8_DTYPE_FP32) == 0.0f && f8_fp8_max(F8_DTYPE_BF16) == 0.0f && f8_fp8_max(bad) == 0.0f,
          "fp8 max of a non-FP8 dtype");
    CHECK(f8_fp8_from_float(1.0f, F8_DTYPE_BF16) == 0x7F && f8_fp8_from_float(1.0f, bad) == 0x7F, "bad dtype encode");
    CHECK(isnan(f8_fp8_to_float(0x38, F8_DTYPE_FP32)) && isnan(f8_fp8_to_float(0x38, bad)), "bad dtype decode");

    static const char *const names[] = {
        "F8_OK", "F8_ERR_INVALID_ARGUMENT", "F8_ERR_SHAPE", "F8_ERR_DTYPE", "F8_ERR_STATE", "F8_ERR_OUT_OF_MEMORY",
        "F8_ERR_NO_DEVICE", "F8_ERR_CUDA", "F8_ERR_CUBLAS", "F8_ERR_UNSUPPORTED", "F8_ERR_IO", "F8_ERR_COMM",
    };
    CHECK(F8_ERR_COMM == 11, "the status list above is complete");
    for (int s = 0; s <= 11; s++)
        CHECK(!strcmp(f8_status_string((f8_status)s), names[s]), "status %d: %s", s, f8_status_string((f8_status)s));
    CHECK(!strcmp(f8_status_string((f8_status)12), "F8_ERR_UNKNOWN"), "status 12");
    CHECK(!strcmp(f8_status_string((f8_status)-1), "F8_ERR_UNKNOWN"), "status -1");
}

int main(void)
{
    static fmt e4m3, e5m2;
    fmt_init(&e4m3, F8_DTYPE_E4M3);
    fmt_init(&e5m2, F8_DTYPE_E5M2);
    if (!HAVE_CUDA_FP8) printf("test_fp8: cuda_fp8.h not on the include path; __nv_cvt_float_to_fp8 oracle skipped\n");

    test_rng rng = {0x5EED0F8ull};
    test_facts();
    const fmt *fmts[2] = {&e4m3, &e5m2};
    for (int i = 0; i < 2; i++) {
        test_decode(fmts[i]);
        test_roundtrip(fmts[i]);
        test_encode_spec(fmts[i]);
        test_encode_structured(fmts[i]);
        test_encode_random_range(fmts[i], &rng);
    }
    for (int i = 0; i < N_RANDOM_BITS; i++) {
        float x = bits_float((uint32_t)rng_u64(&rng));
        check_encode(&e4m3, x);
        check_encode(&e5m2, x);
    }
    test_bf16(&rng);
    return test_finish("test_fp8");
}
