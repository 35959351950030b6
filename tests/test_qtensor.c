/*
 * test_qtensor.c — f8_qtensor, TE's Float8Tensor (spec §3, §8 "Float8Tensor"),
 * on the CPU backend, against host oracles written here:
 *  - quantize -> dequantize of x = 2·U[0,1)-1 over TE's dims (flattened to
 *    2-D), scales {0.375, 1, 3.5}, src FP32/BF16, E4M3/E5M2: within TE's
 *    tolerances of x and not of -x; bit for bit, every code is
 *    f8_fp8_from_float(x·scale), the dequantized value code·(1/scale), the
 *    tensor's scale_inv 1/scale and the slot's amax row 0 the running max|x|;
 *  - NaN and inf sources: codes, amax (NaN ignored, inf kept), inf keeps scale;
 *  - the private scale_inv (a slot's scale changes only what the next
 *    quantize writes);
 *  - the transpose cache: transpose_into, transpose, invalidation, re-fill;
 *  - the noop flag (including the fresh-buffer exception);
 *  - errors change nothing; upload round trip; destroy(NULL); zero sizes.
 */
#include <float.h>

#include "check.h"

static uint32_t fbits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static int same(float a, float b) { return fbits(a) == fbits(b); }

static f8_ctx *g_ctx;

/* Backend buffer helpers (CPU ctx: host memory, still moved through the API). */
static void *balloc(size_t bytes)
{
    void *p = NULL;
    CHECK_OK(g_ctx, f8_ctx_alloc(g_ctx, bytes, &p));
    return p;
}

static float slot_amax(f8_slot s)
{
    const int L = f8_ctx_recipe(g_ctx)->amax_history_len;
    float *h = (float *)malloc((size_t)L * sizeof(float));
    h[0] = -1.0f;
    CHECK_OK(g_ctx, f8_slot_read(g_ctx, s, NULL, NULL, h));
    float a = h[0];
    free(h);
    return a;
}

static void set_scale(f8_slot s, float scale, float scale_inv)
{
    CHECK_OK(g_ctx, f8_slot_write(g_ctx, s, scale, scale_inv, NULL));
}

static void zero_amax(f8_slot s)
{
    const int L = f8_ctx_recipe(g_ctx)->amax_history_len;
    float sc, si, *h = (float *)calloc((size_t)L, sizeof(float));
    CHECK_OK(g_ctx, f8_slot_read(g_ctx, s, &sc, &si, NULL));
    CHECK_OK(g_ctx, f8_slot_write(g_ctx, s, sc, si, h));
    free(h);
}

/* Host copies of a qtensor's codes, scale_inv and (valid) transpose. */
static void q_codes(const f8_qtensor *q, uint8_t *codes, float *scale_inv)
{
    f8_tensor v;
    CHECK_OK(g_ctx, f8_qtensor_data(q, &v));
    if (codes) CHECK_OK(g_ctx, f8_ctx_download(g_ctx, codes, v.data, (size_t)(v.rows * v.cols)));
    if (scale_inv) CHECK_OK(g_ctx, f8_ctx_download(g_ctx, scale_inv, v.scale_inv, sizeof(float)));
}

static int q_transpose(const f8_qtensor *q, uint8_t *t)
{
    f8_tensor v;
    f8_status st = f8_qtensor_transpose_data(q, &v);
    if (st != F8_OK) return 0;
    CHECK_OK(g_ctx, f8_ctx_download(g_ctx, t, v.data, (size_t)(v.rows * v.cols)));
    return 1;
}

/* t == transpose of the [rows, cols] codes. */
static int is_transpose(const uint8_t *codes, const uint8_t *t, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            if (t[c * rows + r] != codes[r * cols + c]) return 0;
    return 1;
}

static void fill_uniform(float *x, int64_t n, test_rng *rng, double lo, double hi)
{
    for (int64_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * rng_uniform(rng));
}

/* |a - b| <= atol + rtol·|b| for every element (TE's allclose). */
static int allclose(const float *a, const float *b, int64_t n, double rtol, double atol, int negate_b)
{
    for (int64_t i = 0; i < n; i++) {
        double bv = negate_b ? -(double)b[i] : (double)b[i];
        if (!(fabs((double)a[i] - bv) <= atol + rtol * fabs(bv))) return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------------ */
/* quantize -> dequantize                                                    */
/* ------------------------------------------------------------------------ */

static void test_roundtrip(void)
{
    /* TE's dims [], 1, 23, 311, [7,11], [7,5,3], [2,3,5,3], flattened. */
    const int64_t dims[6][2] = {{1, 1}, {1, 23}, {1, 311}, {7, 11}, {35, 3}, {30, 3}};
    const float scales[3] = {0.375f, 1.0f, 3.5f};
    const f8_dtype dts[2] = {F8_DTYPE_E4M3, F8_DTYPE_E5M2};
    const double rtol[2] = {0.125, 0.25}, atol[2] = {0.0675, 0.125};
    test_rng rng = {2024};
    f8_slot slot;
    CHECK_OK(g_ctx, f8_ctx_slots_create(g_ctx, F8_DIR_FORWARD, 1, &slot));
    for (int di = 0; di < 6; di++) {
        const int64_t R = dims[di][0], C = dims[di][1], n = R * C;
        float *x = (float *)malloc((size_t)n * sizeof(float)), *xs = (float *)malloc((size_t)n * sizeof(float));
        float *deq = (float *)malloc((size_t)n * sizeof(float));
        uint16_t *xh = (uint16_t *)malloc((size_t)n * 2), *deq16 = (uint16_t *)malloc((size_t)n * 2);
        uint8_t *codes = (uint8_t *)malloc((size_t)n);
        void *src = balloc((size_t)n * 4), *dst = balloc((size_t)n * 4), *dst16 = balloc((size_t)n * 2);
        for (int si = 0; si < 3; si++) {
            const float scale = scales[si];
            for (int fi = 0; fi < 2; fi++) {
                for (int bf = 0; bf < 2; bf++) {
                    char tag[96];
                    snprintf(tag, sizeof tag, "[%lld,%lld] scale %g %s src %s", (long long)R, (long long)C,
                             (double)scale, f8_dtype_name(dts[fi]), bf ? "bf16" : "fp32");
                    f8_qtensor *q = NULL;
                    CHECK_OK(g_ctx, f8_qtensor_create(g_ctx, dts[fi], R, C, &q));
                    if (!q) continue;
                    set_scale(slot, scale, 1.0f / scale);
                    zero_amax(slot);
                    /* x in the source dtype; xs its exact FP32 value. */
                    fill_uniform(x, n, &rng, -1.0, 1.0);
                    for (int64_t i = 0; i < n; i++) {
                        xh[i] = f8_bf16_from_float(x[i]);
                        xs[i] = bf ? f8_bf16_to_float(xh[i]) : x[i];
                    }
                    CHECK_OK(g_ctx, f8_ctx_upload(g_ctx, src, bf ? (void *)xh : (void *)x, (size_t)n * (bf ? 2 : 4)));
                    f8_tensor st = f8_tensor_make(src, bf ? F8_DTYPE_BF16 : F8_DTYPE_FP32, R, C);
                    CHECK_OK(g_ctx, f8_qtensor_quantize(q, &st, slot, 0, NULL));
                    f8_tensor dt = f8_tensor_make(dst, F8_DTYPE_FP32, R, C), dt16 = f8_tensor_make(dst16, F8_DTYPE_BF16, R, C);
                    CHECK_OK(g_ctx, f8_qtensor_dequantize(q, &dt));
                    CHECK_OK(g_ctx, f8_qtensor_dequantize(q, &dt16));
                    CHECK_OK(g_ctx, f8_ctx_download(g_ctx, deq, dst, (size_t)n * 4));
                    CHECK_OK(g_ctx, f8_ctx_download(g_ctx, deq16, dst16, (size_t)n * 2));
                    float sinv = 0.0f;
                    q_codes(q, codes, &sinv);

                    CHECK(allclose(deq, xs, n, rtol[fi], atol[fi], 0), "%s: dequantized not close to x", tag);
                    CHECK(!allclose(deq, xs, n, rtol[fi], atol[fi], 1), "%s: dequantized close to -x", tag);
                    int bad_code = -1, bad_deq = -1, bad16 = -1;
                    for (int64_t i = 0; i < n; i++) {
                        uint8_t want = f8_fp8_from_float(xs[i] * scale, dts[fi]);
                        float wd = f8_fp8_to_float(want, dts[fi]) * (1.0f / scale);
                        if (codes[i] != want && bad_code < 0) bad_code = (int)i;
                        if (!same(deq[i], wd) && bad_deq < 0) bad_deq = (int)i;
                        if (deq16[i] != f8_bf16_from_float(wd) && bad16 < 0) bad16 = (int)i;
                    }
                    CHECK(bad_code < 0, "%s: code %d differs from f8_fp8_from_float(x*scale)", tag, bad_code);
                    CHECK(bad_deq < 0, "%s: dequantized %d differs from code*(1/scale)", tag, bad_deq);
                    CHECK(bad16 < 0, "%s: bf16 dequantized %d differs", tag, bad16);
                    CHECK(same(sinv, 1.0f / scale), "%s: tensor scale_inv %a", tag, (double)sinv);

                    /* amax row 0 is the running max over casts until an update. */
                    float m1 = 0.0f;
                    for (int64_t i = 0; i < n; i++) m1 = fmaxf(m1, fabsf(xs[i]));
                    CHECK(same(slot_amax(slot), m1), "%s: amax %a, expected %a", tag, (double)slot_amax(slot), (double)m1);
                    const double range[2] = {0.5, 3.0}; /* a smaller then a larger cast */
                    float run = m1;
                    for (int k = 0; k < 2; k++) {
                        fill_uniform(x, n, &rng, -range[k], range[k]);
                        for (int64_t i = 0; i < n; i++) run = fmaxf(run, fabsf(x[i]));
                        f8_tensor s32 = f8_tensor_make(src, F8_DTYPE_FP32, R, C);
                        CHECK_OK(g_ctx, f8_ctx_upload(g_ctx, src, x, (size_t)n * 4));
                        CHECK_OK(g_ctx, f8_qtensor_quantize(q, &s32, slot, 0, NULL));
                        CHECK(same(slot_amax(slot), run), "%s: running amax after cast %d", tag, k + 2);
                    }
                    f8_qtensor_destroy(q);
                }
            }
        }
        f8_ctx_free(g_ctx, src);
        f8_ctx_free(g_ctx, dst);
        f8_ctx_free(g_ctx, dst16);
        free(x);
        free(xs);
        free(deq);
        free(xh);
        free(deq16);
        free(codes);
    }
    /* An update ends the accumulation: row 0 goes back to 0, then restarts. */
    CHECK(slot_amax(slot) > 0.0f, "amax accumulated");
    CHECK_OK(g_ctx, f8_ctx_update_scales(g_ctx, F8_DIR_FORWARD));
    CHECK(slot_amax(slot) == 0.0f, "row 0 is zero after the update");
    f8_qtensor *q = NULL;
    CHECK_OK(g_ctx, f8_qtensor_create(g_ctx, F8_DTYPE_E4M3, 1, 2, &q));
    float v[2] = {0.25f, -0.125f};
    float *src = (float *)balloc(sizeof v);
    CHECK_OK(g_ctx, f8_ctx_upload(g_ctx, src, v, sizeof v));
    f8_tensor s = f8_tensor_make(src, F8_DTYPE_FP32, 1, 2);
    CHECK_OK(g_ctx, f8_qtensor_quantize(q, &s, slot, 0, NULL));
    CHECK(slot_amax(slot) == 0.25f, "amax restarts after the update");
    f8_qtensor_destroy(q);
    f8_ctx_free(g_ctx, src);
}

/* NaN is ignored by the amax and encodes as 0x7F; inf saturates and is the amax. */
static void test_specials(void)
{
    enum { N = 6 };
    f8_slot slot;
    CHECK_OK(g_ctx, f8_ctx_slots_create(g_ctx, F8_DIR_BACKWARD, 1, &slot));
    set_scale(slot, 2.0f, 0.5f);
    const float xs[2][N] = {{NAN, 1.5f, -0.25f, -NAN, 0.0f, -3.0f}, {INFINITY, 1.0f, -INFINITY, 1e30f, -1e-30f, NAN}};
    const float amax_after[2] = {3.0f, INFINITY};
    const f8_dtype dts[2] = {F8_DTYPE_E4M3, F8_DTYPE_E5M2};
    float *src = (float *)balloc(N * sizeof(float));
    for (int fi = 0; fi < 2; fi++) {
        zero_amax(slot);
        f8_qtensor *q = NULL;
        CHECK_OK(g_ctx, f8_qtensor_create(g_ctx, dts[fi], 2, N / 2, &q));
        if (!q || !src) return;
        f8_tensor st = f8_tensor_make(src, F8_DTYPE_FP32, 2, N / 2);
        for (int k = 0; k < 2; k++) {
            uint8_t codes[N];
            CHECK_OK(g_ctx, f8_ctx_upload(g_ctx, src, xs[k], sizeof xs[k]));
            CHECK_OK(g_ctx, f8_qtensor_quantize(q, &st, slot, 1, NULL));
            q_codes(q, codes, NULL);
            for (int i = 0; i < N; i++)
                CHECK(codes[i] == f8_fp8_from_float(xs[k][i] * 2.0f, dts[fi]), "%s special %g: code 0x%02x",
                      f8_dtype_name(dts[fi]), (double)xs[k][i], codes[i]);
            CHECK(same(slot_amax(slot), amax_after[k]), "%s specials set %d: amax %g, expected %g",
                  f8_dtype_name(dts[fi]), k, (double)slot_amax(slot), (double)amax_after[k]);
        }
        f8_qtensor_destroy(q);
    }
    /* An infinite amax keeps the scale (spec §2.2). */
    CHECK_OK(g_ctx, f8_ctx_update_scales(g_ctx, F8_DIR_BACKWARD));
    float sc = 0.0f, si = 0.0f;
    CHECK_OK(g_ctx, f8_slot_read(g_ctx, slot, &sc, &si, NULL));
    CHECK(sc == 2.0f && si == 0.5f, "inf amax: scale %g scale_inv %g", (double)sc, (double)si);
    f8_ctx_free(g_ctx, src);
}

/* ------------------------------------------------------------------------ */
/* Private scale_inv (spec §3.3: scale belongs to the recipe, scale_inv to the data) */
/* ------------------------------------------------------------------------ */

static void test_private_scale_inv(void)
{
    enum { R = 8, C = 32, N = R * C };
    test_rng rng = {99};
    f8_slot slot;
    CHECK_OK(g_ctx, f8_ctx_slots_create(g_ctx, F8_DIR_FORWARD, 1, &slot));
    f8_qtensor *q = NULL;
    CHECK_OK(g_ctx, f8_qtensor_create(g_ctx, F8_DTYPE_E4M3, R, C, &q));
    float x[N], d1[N], d2[N];
    uint8_t c1[N], c2[N];
    fill_uniform(x, N, &rng, -1.0, 1.0);
    float *src = (float *)balloc(sizeof x), *dst = (float *)balloc(sizeof x);
    if (!q || !src || !dst) return;
    CHECK_OK(g_ctx, f8_ctx_upload(g_ctx, src, x, sizeof x));
    f8_tensor st = f8_tensor_make(src, F8_DTYPE_FP32, R, C), dt = f8_tensor_make(dst, F8_DTYPE_FP32, R, C);

    set_scale(slot, 1.0f, 1.0f);
    CHECK_OK(g_ctx, f8_qtensor_quantize(q, &st, slot, 0, NULL));
    CHECK_OK(g_ctx, f8_qtensor_dequantize(q, &dt));
    CHECK_OK(g_ctx, f8_ctx_download(g_ctx, d1, dst, sizeof d1));
    q_codes(q, c1, NULL);

    set_scale(slot, 2.0f, 123.0f);
    CHECK_OK(g_ctx, f8_qtensor_dequantize(q, &dt));
    CHECK_OK(g_ctx, f8_ctx_download(g_ctx, d2, dst, sizeof d2));
    CHECK(memcmp(d1, d2, sizeof d1) == 0, "a slot change altered the dequantized tensor");
    float sinv = 0.0f;
    q_codes(q, c2, &sinv);
    CHECK(sinv == 1.0f && memcmp(c1, c2, sizeof c1) == 0, "a slot change altered the tensor (scale_inv %g)", (double)sinv);

    const float next[2] = {2.0f, 4.0f};
    for (int k = 0; k < 2; k++) {
        if (k) set_scale(slot, 4.0f, 0.25f);
        CHECK_OK(g_ctx, f8_qtensor_quantize(q, &st, slot, 0, NULL));
        q_codes(q, c2, &sinv);
        CHECK(sinv == 1.0f / next[k], "requantize with scale %g: scale_inv %g", (double)next[k], (double)sinv);
        int bad = 0;
        for (int i = 0; i < N; i++) bad += c2[i] != f8_fp8_from_float(x[i] * next[k], F8_DTYPE_E4M3);
        CHECK(bad == 0, "requantize with scale %g: %d codes differ", (double)next[k], bad);
        CHECK_OK(g_ctx, f8_qtensor_dequantize(q, &dt));
        CHECK_OK(g_ctx, f8_ctx_download(g_ctx, d2, dst, sizeof d2));
        CHECK(allclose(d2, x, N, 0.125, 0.0675, 0), "requantized with scale %g: not close to x", (double)next[k]);
    }
    f8_qtensor_destroy(q);
    f8_ctx_free(g_ctx, src);
    f8_ctx_free(g_ctx, dst);
}

/* ------------------------------------------------------------------------ */
/* Transpose cache                                                           */
/* ------------------------------------------------------------------------ */

static void test_transpose(void)
{
    const int64_t dims[2][2] = {{33, 41}, {7, 11}};
    test_rng rng = {5};
    f8_slot slot;
    CHECK_OK(g_ctx, f8_ctx_slots_create(g_ctx, F8_DIR_FORWARD, 1, &slot));
    set_scale(slot, 0.5f, 2.0f);
    for (int di = 0; di < 2; di++) {
        const int64_t R = dims[di][0], C = dims[di][1], n = R * C;
        float *x = (float *)malloc((size_t)n * 4);
        uint8_t *codes = (uint8_t *)malloc((size_t)n), *t = (uint8_t *)malloc((size_t)n);
        uint8_t *sep = (uint8_t *)balloc((size_t)n);
        float *sep_inv = (float *)balloc(sizeof(float)), *src = (float *)balloc((size_t)n * 4);
        f8_qtensor *q = NULL;
        CHECK_OK(g_ctx, f8_qtensor_create(g_ctx, F8_DTYPE_E5M2, R, C, &q));
        if (!q || !sep || !src || !sep_inv) return;
        f8_tensor st = f8_tensor_make(src, F8_DTYPE_FP32, R, C);
        char tag[32];
        snprintf(tag, sizeof tag, "[%lld,%lld]", (long long)R, (long long)C);

        fill_uniform(x, n, &rng, -100.0, 100.0);
        CHECK_OK(g_ctx, f8_ctx_upload(g_ctx, src, x, (size_t)n * 4));
        CHECK_OK(g_ctx, f8_qtensor_quantize(q, &st, slot, 0, NULL));
        q_codes(q, codes, NULL);
        CHECK(!f8_qtensor_transpose_valid(q), "%s: fresh tensor has a valid transpose", tag);

        /* transpose_into a separate buffer: exact, and the cache stays invalid. */
        f8_tensor dt = f8_tensor_make(sep, F8_DTYPE_E5M2, C, R);
        dt.scale_inv = sep_inv;
        CHECK_OK(g_ctx, f8_qtensor_transpose_into(q, &dt));
        CHECK_OK(g_ctx, f8_ctx_download(g_ctx, t, sep, (size_t)n));
        CHECK(is_transpose(codes, t, R, C), "%s: transpose_into is not the transpose", tag);
        float si = 0.0f;
        CHECK_OK(g_ctx, f8_ctx_download(g_ctx, &si, sep_inv, sizeof si));
        CHECK(si == 2.0f, "%s: transpose_into scale_inv %g", tag, (double)si);
        CHECK(!f8_qtensor_transpose_valid(q), "%s: transpose_into made the cache valid", tag);
        f8_tensor v;
        CHECK_STATUS(g_ctx, f8_qtensor_transpose_data(q, &v), F8_ERR_STATE);

        /* f8_qtensor_transpose fills the cache. */
        CHECK_OK(g_ctx, f8_qtensor_transpose(q, NULL));
        CHECK(f8_qtensor_transpose_valid(q), "%s: transpose did not validate the cache", tag);
        memset(t, 0, (size_t)n);
        CHECK(q_transpose(q, t) && is_transpose(codes, t, R, C), "%s: cached transpose differs", tag);
        CHECK_OK(g_ctx, f8_qtensor_transpose_data(q, &v));
        CHECK(v.rows == C && v.cols == R && v.dtype == F8_DTYPE_E5M2, "%s: transpose view shape", tag);
        f8_tensor dv;
        CHECK_OK(g_ctx, f8_qtensor_data(q, &dv));
        CHECK(v.scale_inv == dv.scale_inv && v.scale_inv, "%s: the transpose view carries the tensor's scale_inv", tag);

        /* A quantize without transpose invalidates it; with transpose re-fills it. */
        fill_uniform(x, n, &rng, -100.0, 100.0);
        CHECK_OK(g_ctx, f8_ctx_upload(g_ctx, src, x, (size_t)n * 4));
        CHECK_OK(g_ctx, f8_qtensor_quantize(q, &st, slot, 0, NULL));
        CHECK(!f8_qtensor_transpose_valid(q), "%s: quantize left the cache valid", tag);
        CHECK_STATUS(g_ctx, f8_qtensor_transpose_data(q, &v), F8_ERR_STATE);
        CHECK(strstr(f8_ctx_last_error(g_ctx), "f8_qtensor_transpose_data") != NULL, "%s: message '%s'", tag,
              f8_ctx_last_error(g_ctx));
        fill_uniform(x, n, &rng, -100.0, 100.0);
        CHECK_OK(g_ctx, f8_ctx_upload(g_ctx, src, x, (size_t)n * 4));
        CHECK_OK(g_ctx, f8_qtensor_quantize(q, &st, slot, 1, NULL));
        CHECK(f8_qtensor_transpose_valid(q), "%s: quantize with transpose left the cache invalid", tag);
        q_codes(q, codes, NULL);
        int bad = 0;
        for (int64_t i = 0; i < n; i++) bad += codes[i] != f8_fp8_from_float(x[i] * 0.5f, F8_DTYPE_E5M2);
        CHECK(bad == 0, "%s: %d codes differ", tag, bad);
        CHECK(q_transpose(q, t) && is_transpose(codes, t, R, C), "%s: fused transpose differs", tag);

        /* transpose_into rejects a wrong dtype or shape and writes nothing. */
        memset(t, 0xAB, (size_t)n);
        CHECK_OK(g_ctx, f8_ctx_upload(g_ctx, sep, t, (size_t)n));
        f8_tensor bad_dt = f8_tensor_make(sep, F8_DTYPE_E4M3, C, R);
        bad_dt.scale_inv = sep_inv;
        CHECK_STATUS(g_ctx, f8_qtensor_transpose_into(q, &bad_dt), F8_ERR_DTYPE);
        f8_tensor bad_sh = f8_tensor_make(sep, F8_DTYPE_E5M2, R, C);
        if (R != C) CHECK_STATUS(g_ctx, f8_qtensor_transpose_into(q, &bad_sh), F8_ERR_SHAPE);
        CHECK_STATUS(g_ctx, f8_qtensor_transpose_into(q, NULL), F8_ERR_INVALID_ARGUMENT);
        uint8_t *after = (uint8_t *)malloc((size_t)n);
        CHECK_OK(g_ctx, f8_ctx_download(g_ctx, after, sep, (size_t)n));
        CHECK(memcmp(after, t, (size_t)n) == 0, "%s: a failed transpose_into wrote", tag);
        free(after);

        f8_qtensor_destroy(q);
        f8_ctx_free(g_ctx, sep);
        f8_ctx_free(g_ctx, sep_inv);
        f8_ctx_free(g_ctx, src);
        free(x);
        free(codes);
        free(t);
    }
}

/* ------------------------------------------------------------------------ */
/* Noop flag                                                                 */
/* ------------------------------------------------------------------------ */

static void test_noop(void)
{
    enum { R = 9, C = 13, N = R * C };
    test_rng rng = {77};
    float *flag = f8_ctx_noop_flag(g_ctx);
    CHECK(flag != NULL, "no noop flag");
    float fv = -1.0f;
    CHECK_OK(g_ctx, f8_ctx_download(g_ctx, &fv, flag, sizeof fv));
    CHECK(fv == 0.0f, "the noop flag starts at %g", (double)fv);
    f8_slot slot;
    CHECK_OK(g_ctx, f8_ctx_slots_create(g_ctx, F8_DIR_FORWARD, 1, &slot));
    float x1[N], x2[N];
    fill_uniform(x1, N, &rng, -1.0, 1.0);
    fill_uniform(x2, N, &rng, -3.0, 3.0); /* larger amax than x1 */
    float *s1 = (float *)balloc(sizeof x1), *s2 = (float *)balloc(sizeof x2);
    if (!flag || !s1 || !s2) return;
    CHECK_OK(g_ctx, f8_ctx_upload(g_ctx, s1, x1, sizeof x1));
    CHECK_OK(g_ctx, f8_ctx_upload(g_ctx, s2, x2, sizeof x2));
    f8_tensor t1 = f8_tensor_make(s1, F8_DTYPE_FP32, R, C), t2 = f8_tensor_make(s2, F8_DTYPE_FP32, R, C);
    uint8_t codes[N], before[N], tr[N], tr_before[N];
    float sinv, sinv_before;

    /* The first with_transpose quantize of a fresh tensor ignores the flag. */
    set_scale(slot, 2.0f, 0.5f);
    zero_amax(slot);
    f8_qtensor *q = NULL;
    CHECK_OK(g_ctx, f8_qtensor_create(g_ctx, F8_DTYPE_E4M3, R, C, &q));
    if (!q) return;
    CHECK_OK(g_ctx, f8_ctx_set_noop_flag(g_ctx, 1.0f));
    CHECK_OK(g_ctx, f8_ctx_download(g_ctx, &fv, flag, sizeof fv));
    CHECK(fv == 1.0f, "set_noop_flag(1) reads back %g", (double)fv);
    CHECK_OK(g_ctx, f8_qtensor_quantize(q, &t1, slot, 1, flag));
    q_codes(q, codes, &sinv);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += codes[i] != f8_fp8_from_float(x1[i] * 2.0f, F8_DTYPE_E4M3);
    CHECK(bad == 0, "fresh buffer under noop: %d codes not written", bad);
    CHECK(sinv == 0.5f, "fresh buffer under noop: scale_inv %g", (double)sinv);
    float m1 = 0.0f;
    for (int i = 0; i < N; i++) m1 = fmaxf(m1, fabsf(x1[i]));
    CHECK(same(slot_amax(slot), m1), "fresh buffer under noop: amax not written");
    CHECK(f8_qtensor_transpose_valid(q) && q_transpose(q, tr) && is_transpose(codes, tr, R, C),
          "fresh buffer under noop: transpose not written");

    /* With the flag at 1 on an existing buffer nothing at all is written. */
    set_scale(slot, 8.0f, 0.125f);
    for (int wt = 0; wt < 2; wt++) {
        q_codes(q, before, &sinv_before);
        CHECK_OK(g_ctx, f8_qtensor_quantize(q, &t2, slot, wt, flag));
        q_codes(q, codes, &sinv);
        CHECK(memcmp(codes, before, sizeof codes) == 0, "noop quantize (transpose %d) wrote data", wt);
        CHECK(same(sinv, sinv_before) && sinv == 0.5f, "noop quantize (transpose %d) wrote scale_inv %g", wt,
              (double)sinv);
        CHECK(same(slot_amax(slot), m1), "noop quantize (transpose %d) wrote the amax", wt);
    }
    CHECK(q_transpose(q, tr) && is_transpose(codes, tr, R, C), "noop quantize touched the transpose");

    /* Flag at 0: it writes. */
    CHECK_OK(g_ctx, f8_ctx_set_noop_flag(g_ctx, 0.0f));
    CHECK_OK(g_ctx, f8_qtensor_quantize(q, &t2, slot, 0, flag));
    q_codes(q, codes, &sinv);
    bad = 0;
    float m2 = m1;
    for (int i = 0; i < N; i++) {
        bad += codes[i] != f8_fp8_from_float(x2[i] * 8.0f, F8_DTYPE_E4M3);
        m2 = fmaxf(m2, fabsf(x2[i]));
    }
    CHECK(bad == 0 && sinv == 0.125f, "flag 0: quantize did not write (%d codes, scale_inv %g)", bad, (double)sinv);
    CHECK(same(slot_amax(slot), m2), "flag 0: amax not accumulated");

    /* The cached transpose buffer still holds x1's transpose (invalid now).
     * A transpose under flag 1 leaves the buffer untouched; under 0 it fills. */
    memcpy(tr_before, tr, sizeof tr);
    CHECK_OK(g_ctx, f8_ctx_set_noop_flag(g_ctx, 1.0f));
    CHECK_OK(g_ctx, f8_qtensor_transpose(q, flag));
    CHECK(q_transpose(q, tr) && memcmp(tr, tr_before, sizeof tr) == 0, "noop transpose wrote the buffer");
    CHECK_OK(g_ctx, f8_ctx_set_noop_flag(g_ctx, 0.0f));
    CHECK_OK(g_ctx, f8_qtensor_transpose(q, flag));
    CHECK(q_transpose(q, tr) && is_transpose(codes, tr, R, C), "transpose under flag 0 did not fill");

    /* A fresh tensor's first transpose ignores the flag too. */
    f8_qtensor *q2 = NULL;
    uint8_t up[N];
    for (int i = 0; i < N; i++) up[i] = (uint8_t)(i * 7 + 3);
    CHECK_OK(g_ctx, f8_qtensor_create(g_ctx, F8_DTYPE_E4M3, R, C, &q2));
    if (q2) {
        CHECK_OK(g_ctx, f8_qtensor_upload(q2, up, 1.0f));
        CHECK_OK(g_ctx, f8_ctx_set_noop_flag(g_ctx, 1.0f));
        CHECK_OK(g_ctx, f8_qtensor_transpose(q2, flag));
        CHECK(q_transpose(q2, tr) && is_transpose(up, tr, R, C), "fresh transpose buffer under noop not filled");
        /* and a fresh tensor quantized without transpose does honour the flag */
        f8_qtensor_destroy(q2);
        q2 = NULL;
        CHECK_OK(g_ctx, f8_qtensor_create(g_ctx, F8_DTYPE_E4M3, R, C, &q2));
        const float amax_before = slot_amax(slot);
        CHECK_OK(g_ctx, f8_qtensor_quantize(q2, &t2, slot, 0, flag));
        q_codes(q2, codes, &sinv);
        int nz = 0;
        for (int i = 0; i < N; i++) nz += codes[i] != 0;
        CHECK(nz == 0 && sinv == 1.0f && same(slot_amax(slot), amax_before),
              "noop quantize without transpose wrote a fresh tensor");
    }
    CHECK_OK(g_ctx, f8_ctx_set_noop_flag(g_ctx, 0.0f));
    f8_qtensor_destroy(q2);
    f8_qtensor_destroy(q);
    f8_ctx_free(g_ctx, s1);
    f8_ctx_free(g_ctx, s2);
}

/* ------------------------------------------------------------------------ */
/* Errors change nothing                                                     */
/* ------------------------------------------------------------------------ */

/* Put a known message in the error buffer, so the next failure must replace it. */
static void sentinel(void)
{
    CHECK_STATUS(g_ctx, f8_ctx_alloc(g_ctx, 8, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK(strstr(f8_ctx_last_error(g_ctx), "f8_ctx_alloc") != NULL, "sentinel message '%s'", f8_ctx_last_error(g_ctx));
}

static int fresh_message(const char *fn)
{
    const char *m = f8_ctx_last_error(g_ctx);
    return m[0] != '\0' && strstr(m, "f8_ctx_alloc") == NULL && strstr(m, fn) != NULL;
}

#define CHECK_FAILS(call, want, fn)                                                   \
    do {                                                                              \
        sentinel();                                                                   \
        CHECK_STATUS(g_ctx, call, want);                                              \
        CHECK(fresh_message(fn), "%s: message '%s'", #call, f8_ctx_last_error(g_ctx)); \
    } while (0)

static void test_errors(void)
{
    enum { R = 5, C = 6, N = R * C };
    test_rng rng = {3};
    f8_slot slot;
    CHECK_OK(g_ctx, f8_ctx_slots_create(g_ctx, F8_DIR_BACKWARD, 1, &slot));
    set_scale(slot, 4.0f, 0.25f);
    zero_amax(slot);
    float x[N];
    fill_uniform(x, N, &rng, -1.0, 1.0);
    float *src = (float *)balloc(sizeof x), *big = (float *)balloc(sizeof x * 2), *dst = (float *)balloc(sizeof x);
    uint8_t *f8buf = (uint8_t *)balloc(N);
    f8_qtensor *q = NULL;
    CHECK_OK(g_ctx, f8_qtensor_create(g_ctx, F8_DTYPE_E5M2, R, C, &q));
    if (!q || !src || !big || !dst || !f8buf) return;
    CHECK_OK(g_ctx, f8_ctx_upload(g_ctx, src, x, sizeof x));
    f8_tensor st = f8_tensor_make(src, F8_DTYPE_FP32, R, C);
    CHECK_OK(g_ctx, f8_qtensor_quantize(q, &st, slot, 0, NULL));
    uint8_t codes0[N], codes[N];
    float sinv0, sinv;
    q_codes(q, codes0, &sinv0);
    const float amax0 = slot_amax(slot);
    set_scale(slot, 16.0f, 1.0f / 16.0f); /* a successful cast now would change every code */

    f8_tensor wrong_shape = f8_tensor_make(big, F8_DTYPE_FP32, R + 1, C);
    f8_tensor wrong_shape2 = f8_tensor_make(big, F8_DTYPE_FP32, C, R);
    f8_tensor fp8_src = f8_tensor_make(f8buf, F8_DTYPE_E4M3, R, C);
    fp8_src.scale_inv = dst;
    f8_tensor fp8_noinv = f8_tensor_make(f8buf, F8_DTYPE_E4M3, R, C);
    f8_tensor bad_dtype = f8_tensor_make(src, (f8_dtype)9, R, C);
    f8_tensor null_data = f8_tensor_make(NULL, F8_DTYPE_FP32, R, C);
    f8_tensor neg = f8_tensor_make(src, F8_DTYPE_FP32, -1, C);
    const f8_slot unreg[3] = {{F8_DIR_BACKWARD, 1000}, {F8_DIR_FORWARD, -1}, {5, 0}};

    CHECK_STATUS(g_ctx, f8_qtensor_quantize(NULL, &st, slot, 0, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(f8_qtensor_quantize(q, NULL, slot, 0, NULL), F8_ERR_INVALID_ARGUMENT, "f8_qtensor_quantize");
    CHECK_FAILS(f8_qtensor_quantize(q, &wrong_shape, slot, 1, NULL), F8_ERR_SHAPE, "f8_qtensor_quantize");
    CHECK_FAILS(f8_qtensor_quantize(q, &wrong_shape2, slot, 0, NULL), F8_ERR_SHAPE, "f8_qtensor_quantize");
    CHECK_FAILS(f8_qtensor_quantize(q, &fp8_src, slot, 0, NULL), F8_ERR_DTYPE, "f8_qtensor_quantize");
    CHECK_FAILS(f8_qtensor_quantize(q, &fp8_noinv, slot, 0, NULL), F8_ERR_INVALID_ARGUMENT, "f8_qtensor_quantize");
    CHECK_FAILS(f8_qtensor_quantize(q, &bad_dtype, slot, 0, NULL), F8_ERR_DTYPE, "f8_qtensor_quantize");
    CHECK_FAILS(f8_qtensor_quantize(q, &null_data, slot, 0, NULL), F8_ERR_INVALID_ARGUMENT, "f8_qtensor_quantize");
    CHECK_FAILS(f8_qtensor_quantize(q, &neg, slot, 0, NULL), F8_ERR_SHAPE, "f8_qtensor_quantize");
    for (int i = 0; i < 3; i++)
        CHECK_FAILS(f8_qtensor_quantize(q, &st, unreg[i], 1, NULL), F8_ERR_INVALID_ARGUMENT, "f8_qtensor_quantize");
    q_codes(q, codes, &sinv);
    CHECK(memcmp(codes, codes0, sizeof codes) == 0, "a failed quantize changed the data");
    CHECK(same(sinv, sinv0), "a failed quantize changed scale_inv (%g, was %g)", (double)sinv, (double)sinv0);
    CHECK(same(slot_amax(slot), amax0), "a failed quantize changed the amax");
    CHECK(!f8_qtensor_transpose_valid(q), "a failed quantize validated the transpose");

    /* create */
    f8_qtensor *q2 = (f8_qtensor *)&rng; /* must be overwritten with NULL */
    const f8_dtype bad_create[3] = {F8_DTYPE_FP32, F8_DTYPE_BF16, (f8_dtype)7};
    for (int i = 0; i < 3; i++) {
        q2 = (f8_qtensor *)&rng;
        CHECK_FAILS(f8_qtensor_create(g_ctx, bad_create[i], 2, 2, &q2), F8_ERR_DTYPE, "f8_qtensor_create");
        CHECK(q2 == NULL, "failed create left *q set");
    }
    q2 = (f8_qtensor *)&rng;
    CHECK_FAILS(f8_qtensor_create(g_ctx, F8_DTYPE_E4M3, -2, 2, &q2), F8_ERR_SHAPE, "f8_qtensor_create");
    CHECK(q2 == NULL, "failed create left *q set");
    CHECK_FAILS(f8_qtensor_create(g_ctx, F8_DTYPE_E4M3, 2, 2, NULL), F8_ERR_INVALID_ARGUMENT, "f8_qtensor_create");
    CHECK_STATUS(NULL, f8_qtensor_create(NULL, F8_DTYPE_E4M3, 2, 2, &q2), F8_ERR_INVALID_ARGUMENT);

    /* dequantize / views */
    float fill[N];
    for (int i = 0; i < N; i++) fill[i] = -7.0f;
    CHECK_OK(g_ctx, f8_ctx_upload(g_ctx, dst, fill, sizeof fill));
    f8_tensor d_shape = f8_tensor_make(dst, F8_DTYPE_FP32, C, R);
    f8_tensor d_fp8 = f8_tensor_make(f8buf, F8_DTYPE_E5M2, R, C);
    d_fp8.scale_inv = dst;
    CHECK_FAILS(f8_qtensor_dequantize(q, NULL), F8_ERR_INVALID_ARGUMENT, "f8_qtensor_dequantize");
    CHECK_FAILS(f8_qtensor_dequantize(q, &d_shape), F8_ERR_SHAPE, "f8_qtensor_dequantize");
    CHECK_FAILS(f8_qtensor_dequantize(q, &d_fp8), F8_ERR_DTYPE, "f8_qtensor_dequantize");
    CHECK_STATUS(g_ctx, f8_qtensor_dequantize(NULL, &d_shape), F8_ERR_INVALID_ARGUMENT);
    float got[N];
    CHECK_OK(g_ctx, f8_ctx_download(g_ctx, got, dst, sizeof got));
    CHECK(memcmp(got, fill, sizeof got) == 0, "a failed dequantize wrote dst");
    CHECK_FAILS(f8_qtensor_data(q, NULL), F8_ERR_INVALID_ARGUMENT, "f8_qtensor_data");
    CHECK_FAILS(f8_qtensor_transpose_data(q, NULL), F8_ERR_INVALID_ARGUMENT, "f8_qtensor_transpose_data");
    f8_tensor v;
    CHECK_FAILS(f8_qtensor_transpose_data(q, &v), F8_ERR_STATE, "f8_qtensor_transpose_data");
    CHECK_STATUS(g_ctx, f8_qtensor_data(NULL, &v), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(g_ctx, f8_qtensor_transpose(NULL, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(g_ctx, f8_qtensor_transpose_into(NULL, &v), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(g_ctx, f8_qtensor_upload(NULL, codes, 1.0f), F8_ERR_INVALID_ARGUMENT);
    CHECK(f8_qtensor_transpose_valid(NULL) == 0, "transpose_valid(NULL)");
    CHECK_FAILS(f8_qtensor_upload(q, NULL, 3.0f), F8_ERR_INVALID_ARGUMENT, "f8_qtensor_upload");
    q_codes(q, codes, &sinv);
    CHECK(memcmp(codes, codes0, sizeof codes) == 0 && same(sinv, sinv0), "a failed call changed the tensor");

    f8_qtensor_destroy(q);
    f8_ctx_free(g_ctx, src);
    f8_ctx_free(g_ctx, big);
    f8_ctx_free(g_ctx, dst);
    f8_ctx_free(g_ctx, f8buf);
}

/* ------------------------------------------------------------------------ */
/* Upload, destroy(NULL), zero sizes                                         */
/* ------------------------------------------------------------------------ */

static void test_upload(void)
{
    enum { R = 16, C = 16, N = R * C };
    const f8_dtype dts[2] = {F8_DTYPE_E4M3, F8_DTYPE_E5M2};
    for (int fi = 0; fi < 2; fi++) {
        uint8_t up[N], codes[N], t[N];
        for (int i = 0; i < N; i++) up[i] = (uint8_t)((i * 37 + 11) & 0xFF); /* every code once */
        f8_qtensor *q = NULL;
        CHECK_OK(g_ctx, f8_qtensor_create(g_ctx, dts[fi], R, C, &q));
        if (!q) return;
        float sinv = -1.0f;
        q_codes(q, codes, &sinv);
        int nz = 0;
        for (int i = 0; i < N; i++) nz += codes[i] != 0;
        CHECK(nz == 0 && sinv == 1.0f, "%s: created tensor not zero with scale_inv 1", f8_dtype_name(dts[fi]));
        CHECK_OK(g_ctx, f8_qtensor_transpose(q, NULL));
        CHECK(f8_qtensor_transpose_valid(q), "transpose valid before upload");
        CHECK_OK(g_ctx, f8_qtensor_upload(q, up, 0.125f));
        CHECK(!f8_qtensor_transpose_valid(q), "upload must invalidate the transpose");
        q_codes(q, codes, &sinv);
        CHECK(memcmp(codes, up, N) == 0 && sinv == 0.125f, "%s: upload round trip", f8_dtype_name(dts[fi]));
        float *dst = (float *)balloc(N * 4), deq[N];
        f8_tensor dt = f8_tensor_make(dst, F8_DTYPE_FP32, R, C);
        CHECK_OK(g_ctx, f8_qtensor_dequantize(q, &dt));
        CHECK_OK(g_ctx, f8_ctx_download(g_ctx, deq, dst, sizeof deq));
        int bad = 0;
        for (int i = 0; i < N; i++) {
            float want = f8_fp8_to_float(up[i], dts[fi]) * 0.125f;
            bad += !(same(deq[i], want) || (want != want && deq[i] != deq[i]));
        }
        CHECK(bad == 0, "%s: %d dequantized codes differ", f8_dtype_name(dts[fi]), bad);
        CHECK_OK(g_ctx, f8_qtensor_transpose(q, NULL));
        CHECK(q_transpose(q, t) && is_transpose(up, t, R, C), "transpose of uploaded codes");
        f8_ctx_free(g_ctx, dst);
        f8_qtensor_destroy(q);
    }
    f8_qtensor_destroy(NULL);
}

static void test_zero_size(void)
{
    const int64_t dims[3][2] = {{0, 5}, {5, 0}, {0, 0}};
    f8_slot slot;
    CHECK_OK(g_ctx, f8_ctx_slots_create(g_ctx, F8_DIR_FORWARD, 1, &slot));
    set_scale(slot, 4.0f, 0.25f);
    zero_amax(slot);
    for (int i = 0; i < 3; i++) {
        const int64_t R = dims[i][0], C = dims[i][1];
        f8_qtensor *q = NULL;
        CHECK_OK(g_ctx, f8_qtensor_create(g_ctx, F8_DTYPE_E4M3, R, C, &q));
        if (!q) continue;
        f8_tensor src = f8_tensor_make(NULL, F8_DTYPE_BF16, R, C);
        CHECK_OK(g_ctx, f8_qtensor_quantize(q, &src, slot, 1, NULL));
        float sinv = 0.0f;
        q_codes(q, NULL, &sinv);
        CHECK(sinv == 0.25f, "[%lld,%lld]: scale_inv %g", (long long)R, (long long)C, (double)sinv);
        CHECK(slot_amax(slot) == 0.0f, "zero-size cast wrote an amax");
        CHECK(f8_qtensor_transpose_valid(q), "zero-size transpose valid");
        f8_tensor v;
        CHECK_OK(g_ctx, f8_qtensor_transpose_data(q, &v));
        CHECK(v.rows == C && v.cols == R, "zero-size transpose view shape");
        CHECK_OK(g_ctx, f8_qtensor_transpose(q, NULL));
        f8_tensor dst = f8_tensor_make(NULL, F8_DTYPE_FP32, R, C), tdst = f8_tensor_make(NULL, F8_DTYPE_E4M3, C, R);
        CHECK_OK(g_ctx, f8_qtensor_dequantize(q, &dst));
        CHECK_OK(g_ctx, f8_qtensor_transpose_into(q, &tdst));
        CHECK_OK(g_ctx, f8_qtensor_upload(q, NULL, 2.0f));
        q_codes(q, NULL, &sinv);
        CHECK(sinv == 2.0f, "zero-size upload scale_inv");
        f8_qtensor_destroy(q);
    }
}

int main(void)
{
    char why[256] = "";
    g_ctx = test_ctx(F8_BACKEND_CPU, NULL, why);
    if (!g_ctx) {
        fprintf(stderr, "CPU ctx: %s\n", why);
        return 1;
    }
    test_roundtrip();
    test_specials();
    test_private_scale_inv();
    test_transpose();
    test_noop();
    test_errors();
    test_upload();
    test_zero_size();
    f8_ctx_destroy(g_ctx);
    return test_finish("test_qtensor");
}
