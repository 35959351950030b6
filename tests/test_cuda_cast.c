/*
 * test_cuda_cast.c — the CUDA backend's casts and layout ops against the CPU
 * backend (the oracle) on identical inputs: casts (plain, +transpose, +dbias,
 * noop flag), transpose and convert. Ops are called through each ctx's
 * backend table (ctx->be), so the test sees exactly what the modules see.
 *
 * Casts, transposes, amax and converts must agree BIT FOR BIT (DESIGN.md,
 * numerics contract). Each is also checked against a host expectation built
 * from f8.h's scalar functions, so a bug the two backends share still fails.
 * The cast's dbias differs by summation order and is compared with the
 * tolerance stated next to it. Shapes include one row, one column, odd and
 * prime sizes, zero sizes, and large ones (left out when F8_TEST_QUICK is
 * set, for runs under compute-sanitizer). Without a GPU (or in a CUDA=0
 * build) the program reports itself skipped. The other ops are in
 * test_cuda_ops.c.
 */
#include "cuda_ops_tests.h"

/* Index of the first differing byte, n if none. */
static size_t first_diff(const void *a, const void *b, size_t n)
{
    const uint8_t *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i]) return i;
    return n;
}

/* Fill `host` (n elements of dtype FP32 or BF16) and `vals` with what a kernel
 * reads back from it ((float) of the stored element). */
static void gen_src(test_rng *r, int kind, f8_dtype fp8, int bounded, f8_dtype dtype, void *host, float *vals, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float v = gen_value(r, kind, fp8, bounded);
        if (dtype == F8_DTYPE_BF16) {
            uint16_t b = f8_bf16_from_float(v);
            ((uint16_t *)host)[i] = b;
            vals[i] = f8_bf16_to_float(b);
        } else {
            ((float *)host)[i] = v;
            vals[i] = v;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Casts                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct cast_case {
    int64_t rows, cols;
    f8_dtype src, out;
    float scale;
    int kind;
    int with_out, with_t, with_amax, with_scale_inv;
    int dbias;             /* 1: write dbias of dbias_dtype */
    f8_dtype dbias_dtype;
    int dbias_acc;
    int noop_ptr;          /* 1: pass a noop flag that holds 0 */
    int off_src, off_out;  /* bytes from the allocation's start to src, to out and out_t */
} cast_case;

/* Bytes after out and out_t that a cast must leave as poisoned. */
enum { GUARD = 16 };

/* The outputs of one cast, downloaded. */
typedef struct cast_out {
    uint8_t *out, *out_t;
    float amax, scale_inv;
    void *dbias;
} cast_out;

static const float AMAX0 = 0.5f;            /* prior accumulator: the cast takes max(prior, ...) */

/* Upload the poison images of every output (codes 0xA5/0x5A, amax AMAX0,
 * scale_inv a NaN pattern, dbias NaN bytes unless it is accumulated into). */
static void cast_poison(env *e, twin *out, twin *out_t, twin *amax, twin *sinv, twin *dbias, const void *dbias0)
{
    size_t n = out->bytes;
    uint8_t *p = xmalloc(n);
    memset(p, 0xA5, n);
    twin_put(e, out, p);
    memset(p, 0x5A, n);
    twin_put(e, out_t, p);
    free(p);
    float a = AMAX0, s = fval(SINV_POISON);
    twin_put(e, amax, &a);
    twin_put(e, sinv, &s);
    twin_put(e, dbias, dbias0);
}

static void cast_get(env *e, int i, twin *out, twin *out_t, twin *amax, twin *sinv, twin *dbias, cast_out *o)
{
    twin_get(e, out, i, o->out);
    twin_get(e, out_t, i, o->out_t);
    twin_get(e, amax, i, &o->amax);
    twin_get(e, sinv, i, &o->scale_inv);
    twin_get(e, dbias, i, o->dbias);
}

static void cast_out_init(cast_out *o, size_t n, size_t dbias_bytes)
{
    o->out = xmalloc(n);
    o->out_t = xmalloc(n);
    o->dbias = xmalloc(dbias_bytes);
}

static void cast_out_free(cast_out *o)
{
    free(o->out);
    free(o->out_t);
    free(o->dbias);
}

/* dbias is a sum over rows whose order each backend chooses. Any FP32
 * recursive, pairwise or blocked sum of m terms is within (m-1)·u·Σ|v| of the
 * exact sum (u = 2^-24); we allow (rows+2)·u·S, S = Σ|v| (+|old| when
 * accumulating), against a float64 reference, plus one BF16 rounding for a
 * BF16 dbias (2^-8 relative, or a BF16 subnormal step, 2^-133). Non-finite
 * sums must match the reference's class, which does not depend on order (the
 * inputs are `bounded`, so no partial sum overflows). */
static void check_dbias(const char *desc, const char *who, const cast_case *cc, const float *vals, const void *dbias0,
                        const void *got)
{
    int bad = 0;
    for (int64_t c = 0; c < cc->cols && !bad; c++) {
        double ref = cc->dbias_acc ? load_elem(dbias0, cc->dbias_dtype, (size_t)c) : 0.0;
        double s = fabs(ref);
        for (int64_t r = 0; r < cc->rows; r++) {
            ref += vals[r * cc->cols + c];
            s += fabs(vals[r * cc->cols + c]);
        }
        float g = load_elem(got, cc->dbias_dtype, (size_t)c);
        if (!isfinite(ref) || !isfinite(s)) {
            int same = isnan(ref) ? isnan(g) : (isinf(g) && (g > 0) == (ref > 0));
            if (!same) bad = 1;
            CHECK(same, "%s: %s dbias[%lld] = %g, reference %g", desc, who, (long long)c, g, ref);
            continue;
        }
        double tol = (double)(cc->rows + 2) * ldexp(1.0, -24) * s * 1.01;
        if (cc->dbias_dtype == F8_DTYPE_BF16) tol += ldexp(1.0, -8) * (fabs(ref) + tol) + ldexp(1.0, -133);
        if (!(fabs(g - ref) <= tol)) bad = 1;
        CHECK(fabs(g - ref) <= tol, "%s: %s dbias[%lld] = %.9g, reference %.9g, bound %.3g", desc, who, (long long)c,
              g, ref, tol);
    }
}

/* out and out_t are checked as whole images of their allocations: off_out
 * poisoned bytes, the n codes, GUARD poisoned bytes. */
static void run_cast(env *e, const cast_case *cc)
{
    const size_t n = (size_t)(cc->rows * cc->cols), esz = f8_dtype_size(cc->src);
    const size_t dsz = f8_dtype_size(cc->dbias_dtype), dbytes = (size_t)cc->cols * dsz;
    const size_t os = (size_t)cc->off_src, oo = (size_t)cc->off_out, nb = oo + n + GUARD;
    char desc[224];
    snprintf(desc, sizeof desc,
             "cast [%lld,%lld] %s->%s scale %g kind %d out %d t %d amax %d sinv %d dbias %d(%s acc %d) off %zu/%zu",
             (long long)cc->rows, (long long)cc->cols, f8_dtype_name(cc->src), f8_dtype_name(cc->out), cc->scale,
             cc->kind, cc->with_out, cc->with_t, cc->with_amax, cc->with_scale_inv, cc->dbias,
             f8_dtype_name(cc->dbias_dtype), cc->dbias_acc, os, oo);

    char *src_host = xmalloc(os + n * esz);
    memset(src_host, 0, os);
    float *vals = xmalloc(n * sizeof(float));
    gen_src(&e->rng, cc->kind, cc->out, cc->dbias, cc->src, src_host + os, vals, n);
    void *dbias0 = xmalloc(dbytes);
    if (cc->dbias_acc) {
        for (int64_t c = 0; c < cc->cols; c++) store_elem(dbias0, cc->dbias_dtype, (size_t)c, (float)rng_normal(&e->rng));
    } else {
        memset(dbias0, 0xFF, dbytes); /* NaN in both dtypes: must be overwritten */
    }

    float zero = 0.0f, one = 1.0f;
    twin src = twin_new(e, os + n * esz, src_host), out = twin_new(e, nb, NULL), out_t = twin_new(e, nb, NULL);
    twin scale = twin_new(e, 4, &cc->scale), amax = twin_new(e, 4, NULL), sinv = twin_new(e, 4, NULL);
    twin dbias = twin_new(e, dbytes, NULL), noop = twin_new(e, 4, &zero);

    f8i_cast_args a[2];
    for (int i = 0; i < 2; i++) {
        a[i] = (f8i_cast_args){.src = (char *)src.p[i] + os, .src_dtype = cc->src, .rows = cc->rows,
                               .cols = cc->cols, .out_dtype = cc->out,
                               .out = cc->with_out ? (uint8_t *)out.p[i] + oo : NULL,
                               .out_t = cc->with_t ? (uint8_t *)out_t.p[i] + oo : NULL, .scale = scale.p[i],
                               .amax = cc->with_amax ? amax.p[i] : NULL,
                               .scale_inv = cc->with_scale_inv ? sinv.p[i] : NULL,
                               .dbias = cc->dbias ? dbias.p[i] : NULL, .dbias_dtype = cc->dbias_dtype,
                               .dbias_accumulate = cc->dbias_acc, .noop = cc->noop_ptr ? noop.p[i] : NULL,
                               .workspace = e->ctx[i]->scratch, .workspace_bytes = e->ctx[i]->scratch_bytes};
    }

    cast_out o[2], poison;
    cast_out_init(&o[0], nb, dbytes);
    cast_out_init(&o[1], nb, dbytes);
    cast_out_init(&poison, nb, dbytes);
    memset(poison.out, 0xA5, nb);
    memset(poison.out_t, 0x5A, nb);
    poison.amax = AMAX0;
    poison.scale_inv = fval(SINV_POISON);
    memcpy(poison.dbias, dbias0, dbytes);

    cast_poison(e, &out, &out_t, &amax, &sinv, &dbias, dbias0);
    for (int i = 0; i < 2; i++) CHECK_OK(e->ctx[i], f8i_op_cast(e->ctx[i], &a[i]));
    for (int i = 0; i < 2; i++) cast_get(e, i, &out, &out_t, &amax, &sinv, &dbias, &o[i]);

    /* Host expectation: codes = fp8(v * scale) per element (FP32 multiply),
     * amax = max(prior, max |v|) ignoring NaN, scale_inv = 1/scale; outputs
     * not asked for stay as poisoned. rows or cols 0: only scale_inv. */
    uint8_t *want = xmalloc(nb), *want_t = xmalloc(nb);
    memset(want, 0xA5, nb);
    memset(want_t, 0x5A, nb);
    float want_amax = AMAX0;
    for (int64_t r = 0; r < cc->rows; r++) {
        for (int64_t c = 0; c < cc->cols; c++) {
            float v = vals[r * cc->cols + c];
            uint8_t code = f8_fp8_from_float(v * cc->scale, cc->out);
            if (cc->with_out) want[oo + r * cc->cols + c] = code;
            if (cc->with_t) want_t[oo + c * cc->rows + r] = code;
            if (!isnan(v)) want_amax = fmaxf(want_amax, fabsf(v));
        }
    }
    if (!cc->with_amax) want_amax = AMAX0;
    float want_sinv = cc->with_scale_inv ? 1.0f / cc->scale : fval(SINV_POISON);

    for (int i = 0; i < 2; i++) {
        const char *who = i == CPU ? "cpu" : "cuda";
        /* d is a byte of the image: out[d - oo] (before 0 or past n: a poisoned byte written) */
        size_t d = first_diff(o[i].out, want, nb);
        CHECK(d == nb, "%s: %s out[%lld] = 0x%02x, want 0x%02x (v = %g)", desc, who, (long long)d - (long long)oo,
              d < nb ? o[i].out[d] : 0, d < nb ? want[d] : 0, d >= oo && d < oo + n ? vals[d - oo] : 0.0f);
        d = first_diff(o[i].out_t, want_t, nb);
        CHECK(d == nb, "%s: %s out_t[%lld] = 0x%02x, want 0x%02x", desc, who, (long long)d - (long long)oo,
              d < nb ? o[i].out_t[d] : 0, d < nb ? want_t[d] : 0);
        CHECK(fbits(o[i].amax) == fbits(want_amax), "%s: %s amax %.9g, want %.9g", desc, who, o[i].amax, want_amax);
        CHECK(fbits(o[i].scale_inv) == fbits(want_sinv), "%s: %s scale_inv %.9g (0x%08x), want %.9g", desc, who,
              o[i].scale_inv, fbits(o[i].scale_inv), want_sinv);
        if (cc->dbias && n) check_dbias(desc, who, cc, vals, dbias0, o[i].dbias);
    }
    /* The GPU against the oracle directly: same bytes everywhere. */
    CHECK(first_diff(o[GPU].out, o[CPU].out, nb) == nb && first_diff(o[GPU].out_t, o[CPU].out_t, nb) == nb &&
              fbits(o[GPU].amax) == fbits(o[CPU].amax) && fbits(o[GPU].scale_inv) == fbits(o[CPU].scale_inv),
          "%s: cuda and cpu differ", desc);

    /* noop flag = 1: nothing at all is written, not even amax or scale_inv. */
    twin_put(e, &noop, &one);
    for (int i = 0; i < 2; i++) a[i].noop = noop.p[i];
    cast_poison(e, &out, &out_t, &amax, &sinv, &dbias, dbias0);
    for (int i = 0; i < 2; i++) CHECK_OK(e->ctx[i], f8i_op_cast(e->ctx[i], &a[i]));
    for (int i = 0; i < 2; i++) {
        cast_get(e, i, &out, &out_t, &amax, &sinv, &dbias, &o[i]);
        CHECK(first_diff(o[i].out, poison.out, nb) == nb && first_diff(o[i].out_t, poison.out_t, nb) == nb &&
                  fbits(o[i].amax) == fbits(poison.amax) && fbits(o[i].scale_inv) == fbits(poison.scale_inv) &&
                  first_diff(o[i].dbias, poison.dbias, dbytes) == dbytes,
              "%s: %s wrote something under noop = 1", desc, i == CPU ? "cpu" : "cuda");
    }

    free(want);
    free(want_t);
    cast_out_free(&o[0]);
    cast_out_free(&o[1]);
    cast_out_free(&poison);
    free(src_host);
    free(vals);
    free(dbias0);
    twin *all[] = {&src, &out, &out_t, &scale, &amax, &sinv, &dbias, &noop};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) twin_free(e, all[i]);
}

typedef struct shape {
    int64_t rows, cols;
} shape;

/* The shapes every layout op runs on: one row, one column (prime lengths),
 * odd/prime 2-D, TE's transpose shapes, an aligned one, zero sizes, and the
 * LM head's odd vocabulary scaled down (300 x 1001: rows at every byte
 * offset, partial tiles both ways). */
static const shape small_shapes[] = {{1, 3221}, {2333, 1}, {1481, 677}, {7, 11}, {33, 41},
                                     {64, 256}, {0, 17},   {19, 0},    {300, 1001}};
/* Large: an aligned one for the vectorized path and an odd one for the tails. */
static const shape large_shapes[] = {{4096, 4096}, {3001, 2053}};

static void test_casts(env *e)
{
    static const float scales[] = {0.375f, 1.0f, 3.5f, FLT_MAX};
    static const f8_dtype srcs[] = {F8_DTYPE_FP32, F8_DTYPE_BF16}, outs[] = {F8_DTYPE_E4M3, F8_DTYPE_E5M2};
    int idx = 0;
    for (int s = 0; s < NELEM(small_shapes); s++)
        for (int si = 0; si < 2; si++)
            for (int oi = 0; oi < 2; oi++)
                for (int sc = 0; sc < NELEM(scales); sc++)
                    for (int mode = 0; mode < 3; mode++, idx++) {
                        /* mode 0 quantize, 1 cast+transpose, 2 cast+transpose+dbias; the
                         * kind cycles with period 4 against a mode period of 3, so every
                         * (scale, kind) pair occurs; optional outputs rotate likewise. */
                        int v = idx / 3;
                        cast_case cc = {.rows = small_shapes[s].rows, .cols = small_shapes[s].cols,
                                        .src = srcs[si], .out = outs[oi], .scale = scales[sc], .kind = idx % K_COUNT,
                                        .with_out = !(mode == 1 && idx % 7 == 3), .with_t = mode >= 1,
                                        .with_amax = idx % 5 != 4, .with_scale_inv = idx % 6 != 5,
                                        .dbias = mode == 2, .dbias_dtype = (v & 1) ? F8_DTYPE_BF16 : F8_DTYPE_FP32,
                                        .dbias_acc = (v >> 1) & 1, .noop_ptr = idx & 1};
                        run_cast(e, &cc);
                    }
    /* Pointers off their allocation's alignment (src by whole elements, the
     * codes by any byte), on shapes whose rows are aligned (256 columns:
     * only the pointers are not) and unaligned: every cast mode. */
    static const shape off_shapes[] = {{300, 1001}, {129, 256}, {33, 41}, {1, 3221}, {2333, 1}};
    static const int off_outs[] = {3, 1, 8, 15};
    for (int s = 0; s < NELEM(off_shapes); s++)
        for (int si = 0; si < 2; si++)
            for (int mode = 0; mode < 3; mode++, idx++) {
                const int esz = si ? 2 : 4;
                cast_case cc = {.rows = off_shapes[s].rows, .cols = off_shapes[s].cols, .src = srcs[si],
                                .out = outs[idx & 1], .scale = scales[idx % 3], .kind = idx % K_COUNT,
                                .with_out = 1, .with_t = mode >= 1, .with_amax = 1, .with_scale_inv = 1,
                                .dbias = mode == 2, .dbias_dtype = F8_DTYPE_FP32, .dbias_acc = idx & 1,
                                .off_src = esz * (1 + idx % 3), .off_out = off_outs[idx % NELEM(off_outs)]};
                run_cast(e, &cc);
            }
    /* Large shapes: the three modes once each, on different settings. */
    for (int s = 0; s < NELEM(large_shapes) && !e->quick; s++) {
        cast_case base = {.rows = large_shapes[s].rows, .cols = large_shapes[s].cols, .with_out = 1, .with_amax = 1,
                          .with_scale_inv = 1, .dbias_dtype = F8_DTYPE_FP32};
        cast_case c1 = base, c2 = base, c3 = base;
        c1.src = F8_DTYPE_BF16, c1.out = F8_DTYPE_E4M3, c1.scale = 1.0f, c1.kind = K_TIES;
        c2.src = F8_DTYPE_BF16, c2.out = F8_DTYPE_E4M3, c2.scale = 3.5f, c2.kind = K_SPECIAL, c2.with_t = 1;
        c3.src = F8_DTYPE_FP32, c3.out = F8_DTYPE_E5M2, c3.scale = 0.375f, c3.kind = K_NORMAL, c3.with_t = 1;
        c3.dbias = 1, c3.dbias_acc = s & 1, c3.dbias_dtype = s ? F8_DTYPE_BF16 : F8_DTYPE_FP32, c3.noop_ptr = 1;
        run_cast(e, &c1);
        run_cast(e, &c2);
        run_cast(e, &c3);
    }
}

/* ------------------------------------------------------------------------ */
/* transpose_u8, convert                                                     */
/* ------------------------------------------------------------------------ */

/* src and dst lie off_src and off_dst bytes into their allocations; dst's
 * is checked whole (GUARD poisoned bytes after it too). */
static void run_transpose(env *e, int64_t rows, int64_t cols, size_t off_src, size_t off_dst)
{
    const size_t n = (size_t)(rows * cols), nb = off_dst + n + GUARD;
    uint8_t *src = xmalloc(off_src + n), *want = xmalloc(nb), *poison = xmalloc(nb), *got = xmalloc(nb);
    for (size_t i = 0; i < off_src + n; i++) src[i] = (uint8_t)rng_u64(&e->rng);
    memset(poison, 0xC3, nb);
    memcpy(want, poison, nb);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) want[off_dst + c * rows + r] = src[off_src + r * cols + c];
    float zero = 0.0f, one = 1.0f;
    twin s = twin_new(e, off_src + n, src), d = twin_new(e, nb, poison), flag = twin_new(e, 4, &zero);
    for (int pass = 0; pass < 3; pass++) {
        /* pass 0: no flag; 1: flag 0 (writes); 2: flag 1 (writes nothing) */
        if (pass == 2) twin_put(e, &flag, &one);
        twin_put(e, &d, poison);
        for (int i = 0; i < 2; i++) {
            f8_ctx *ctx = e->ctx[i];
            CHECK_OK(ctx, f8i_op_transpose_u8(ctx, (const uint8_t *)s.p[i] + off_src, (uint8_t *)d.p[i] + off_dst,
                                              rows, cols, pass ? flag.p[i] : NULL));
            twin_get(e, &d, i, got);
            size_t k = first_diff(got, pass == 2 ? poison : want, nb);
            CHECK(k == nb, "transpose_u8 [%lld,%lld] off %zu/%zu pass %d: %s byte %lld differs", (long long)rows,
                  (long long)cols, off_src, off_dst, pass, i == CPU ? "cpu" : "cuda", (long long)k - (long long)off_dst);
        }
    }
    twin_free(e, &s);
    twin_free(e, &d);
    twin_free(e, &flag);
    free(src), free(want), free(poison), free(got);
}

/* The value convert must produce for element i: convert((float)src * (src
 * FP8 ? scale_inv : 1)), FP32 multiply, BF16 round-to-nearest-even. */
static void convert_expect(const void *src, f8_dtype sd, float sinv, f8_dtype dd, size_t n, void *want)
{
    for (size_t i = 0; i < n; i++) {
        float v;
        if (f8i_dtype_is_fp8(sd))
            v = f8_fp8_to_float(((const uint8_t *)src)[i], sd) * sinv;
        else
            v = load_elem(src, sd, i);
        store_elem(want, dd, i, v);
    }
}

static void run_convert(env *e, f8_dtype sd, f8_dtype dd, float sinv, size_t n)
{
    const size_t ss = f8_dtype_size(sd), ds = f8_dtype_size(dd);
    void *src = xmalloc(n * ss), *want = xmalloc(n * ds), *got = xmalloc(n * ds), *poison = xmalloc(n * ds);
    int fp8 = f8i_dtype_is_fp8(sd);
    for (size_t i = 0; i < n; i++) {
        uint64_t u = rng_u64(&e->rng);
        if (fp8) {
            ((uint8_t *)src)[i] = (uint8_t)(i < 256 ? i : u); /* every code, NaN and inf included */
        } else if (sd == F8_DTYPE_FP32) {
            /* random bits: NaNs with low-only payloads, subnormals; every 3rd
             * value a BF16 tie (low half exactly 0x8000) */
            uint32_t b = (uint32_t)u;
            if (i % 3 == 0) b = (b & 0xFFFF0000u) | 0x8000u;
            ((float *)src)[i] = fval(b);
        } else {
            ((uint16_t *)src)[i] = (uint16_t)u;
        }
    }
    memset(poison, 0xEE, n * ds);
    convert_expect(src, sd, sinv, dd, n, want);
    /* NaN payloads of FP32 arithmetic are not part of the contract; a BF16
     * result of an FP32 NaN is (0x7FC0 | sign), unless the NaN came out of an
     * FP8 multiply whose sign is open too, or an equal-dtype copy. */
    int nan_any = dd == F8_DTYPE_FP32 || fp8 || sd == dd; /* equal dtypes may copy raw bits */
    twin s = twin_new(e, n * ss, src), d = twin_new(e, n * ds, poison), si = twin_new(e, 4, &sinv);
    for (int i = 0; i < 2; i++) {
        f8_ctx *ctx = e->ctx[i];
        CHECK_OK(ctx, f8i_op_convert(ctx, s.p[i], sd, fp8 ? si.p[i] : NULL, d.p[i], dd, (int64_t)n));
        twin_get(e, &d, i, got);
        size_t k = dd == F8_DTYPE_FP32 ? first_diff_f32(got, want, n, nan_any) : first_diff_bf16(got, want, n, nan_any);
        CHECK(k == n, "convert %s->%s n %zu scale_inv %g: %s element %zu = 0x%08x, want 0x%08x", f8_dtype_name(sd),
              f8_dtype_name(dd), n, sinv, i == CPU ? "cpu" : "cuda", k,
              k < n ? (dd == F8_DTYPE_FP32 ? fbits(((float *)got)[k]) : ((uint16_t *)got)[k]) : 0,
              k < n ? (dd == F8_DTYPE_FP32 ? fbits(((float *)want)[k]) : ((uint16_t *)want)[k]) : 0);
    }
    twin_free(e, &s), twin_free(e, &d), twin_free(e, &si);
    free(src), free(want), free(got), free(poison);
}

static void test_layout_ops(env *e)
{
    for (int s = 0; s < NELEM(small_shapes); s++) {
        run_transpose(e, small_shapes[s].rows, small_shapes[s].cols, 0, 0);
        run_transpose(e, small_shapes[s].rows, small_shapes[s].cols, 1 + s % 15, 15 - s % 15); /* any byte offset */
    }
    run_transpose(e, 256, 384, 8, 0); /* aligned rows, pointers not */
    run_transpose(e, 256, 384, 0, 3);
    for (int s = 0; s < NELEM(large_shapes) && !e->quick; s++)
        run_transpose(e, large_shapes[s].rows, large_shapes[s].cols, 0, 0);

    /* 2^-140 and 1/FLT_MAX make FP32 subnormal results (flush-to-zero fails). */
    static const float sinvs[] = {1.0f, 0.375f, 3.5f, 0x1p-140f, 1.0f / FLT_MAX};
    static const f8_dtype fp8s[] = {F8_DTYPE_E4M3, F8_DTYPE_E5M2}, hps[] = {F8_DTYPE_FP32, F8_DTYPE_BF16};
    static const size_t counts[] = {1, 3221, 1002637, 16777216 + 5};
    const int ncounts = e->quick ? 3 : 4;
    for (int c = 0; c < ncounts; c++)
        for (int f = 0; f < 2; f++)
            for (int d = 0; d < 2; d++)
                for (int k = 0; k < NELEM(sinvs); k++)
                    if (c < 3 || k == 2) run_convert(e, fp8s[f], hps[d], sinvs[k], counts[c]);
    for (int c = 0; c < ncounts; c++)
        for (int s = 0; s < 2; s++)
            for (int d = 0; d < 2; d++) run_convert(e, hps[s], hps[d], 1.0f, counts[c]);
}

/* ------------------------------------------------------------------------ */
/* Current scaling's amax pass                                               */
/* ------------------------------------------------------------------------ */

/* f8i_amax_scale_args on both backends over the same values: scale,
 * scale_inv and the recorded amax bit for bit, and against the host formula
 * (f8i_current_scale over max |x|). Sizes from empty to many blocks (the
 * last-block finish and its ticket), a misaligned start (the scalar path),
 * both source dtypes, NaN/inf/tiny values, the power-of-two option, the
 * kept scale, and the noop flag. Run twice per case: the ticket resets. */
static void test_amax_scale(env *e)
{
    const int64_t sizes[] = {0, 1, 7, 33, 4099, 65536 + 5, (int64_t)1 << 22};
    const int nsizes = e->quick ? 5 : NELEM(sizes);
    for (int si = 0; si < nsizes; si++)
        for (int bf = 0; bf <= 1; bf++)
            for (int kind = 0; kind < 4; kind++) {
                const int64_t n = sizes[si];
                const f8_dtype dt = bf ? F8_DTYPE_BF16 : F8_DTYPE_FP32;
                const size_t es = f8_dtype_size(dt), off = (si % 2) ? es : 0; /* odd cases start misaligned */
                unsigned char *host = (unsigned char *)xmalloc((size_t)n * es + off + 16);
                float amax = 0.0f;
                for (int64_t i = 0; i < n; i++) {
                    float v = gen_value(&e->rng, kind == 3 ? K_NORMAL : kind, F8_DTYPE_E4M3, 0);
                    store_elem(host + off, dt, (size_t)i, v);
                    const float back = load_elem(host + off, dt, (size_t)i);
                    if (!isnan(back)) amax = fmaxf(amax, fabsf(back));
                }
                twin src = twin_new(e, (size_t)n * es + off + 16, host);
                twin cell = twin_new(e, 16, NULL); /* scale, scale_inv, amax, noop */
                for (int rep = 0; rep < 2; rep++) {
                    const float init[4] = {0.625f, 1.6f, rep ? 2.0f : 0.0f, kind == 3 && rep ? 1.0f : 0.0f};
                    twin_put(e, &cell, init);
                    float got[2][4];
                    const int pow2 = kind == 2;
                    const float scaled_max = ldexpf(448.0f, -(kind % 2));
                    for (int b = 0; b < 2; b++) {
                        float *c = (float *)cell.p[b];
                        f8i_amax_scale_args a = {(unsigned char *)src.p[b] + off, dt, n, scaled_max, pow2,
                                                 c, c + 1, c + 2, kind == 3 ? c + 3 : NULL};
                        CHECK_OK(e->ctx[b], f8i_op_amax_scale(e->ctx[b], &a));
                        twin_get(e, &cell, b, got[b]);
                    }
                    float want_s = f8i_current_scale(amax, init[0], scaled_max, pow2);
                    float want[3] = {want_s, 1.0f / want_s, fmaxf(init[2], amax)};
                    if (init[3] == 1.0f) memcpy(want, init, sizeof want); /* noop: untouched */
                    CHECK(memcmp(got[GPU], got[CPU], 12) == 0,
                          "amax_scale n %lld %s kind %d rep %d: GPU (%a %a %a) vs CPU (%a %a %a)", (long long)n,
                          f8_dtype_name(dt), kind, rep, got[GPU][0], got[GPU][1], got[GPU][2], got[CPU][0],
                          got[CPU][1], got[CPU][2]);
                    CHECK(memcmp(got[CPU], want, 12) == 0 || (isinf(want[2]) && got[CPU][0] == want[0]),
                          "amax_scale n %lld kind %d: CPU (%a %a %a) vs host (%a %a %a)", (long long)n, kind,
                          got[CPU][0], got[CPU][1], got[CPU][2], want[0], want[1], want[2]);
                }
                twin_free(e, &src);
                twin_free(e, &cell);
                free(host);
            }
}

int main(void)
{
    static void (*const tests[])(env *) = {test_casts, test_layout_ops, test_amax_scale};
    return env_run("test_cuda_cast", tests, NELEM(tests));
}
