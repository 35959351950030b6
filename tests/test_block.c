/*
 * test_block.c — block scaling's two ops (F8_RECIPE_BLOCK: 1x128 tiles,
 * 128x128 weight blocks) on the CPU backend, its oracle:
 *  - the block cast bit for bit against a host oracle written here (tile
 *    amax, scale with fallback 1, power-of-two option, margin, codes, both
 *    orientations, both grids) on odd shapes, and the dequantized round trip
 *    within the format's rounding bound;
 *  - the block GEMM against an FP64 reference of the dequantized operands;
 *  - a CUDA ctx refuses the recipe, saying it runs on the CPU so far.
 * The modules under block scaling are tested in test_stack (block_tests.h).
 */
#include <float.h>

#include "check.h"
#include "core/ops.h"

static float *dev_floats(f8_ctx *ctx, size_t n)
{
    void *p = NULL;
    if (f8_ctx_alloc(ctx, n * sizeof(float), &p) != F8_OK) die("alloc", ctx);
    return (float *)p;
}

static const int64_t SHAPES[] = {1, 17, 127, 128, 129, 250};
enum { NSHAPES = sizeof SHAPES / sizeof SHAPES[0], B = 128 };

/* The oracle's tile scale, written apart from numerics.h: a power of two by
 * ilogbf rather than by masking bits. */
static float oracle_scale(float amax, float fmax, int margin, int pow2)
{
    float s = 1.0f;
    if (amax > 0.0f && isfinite(amax)) s = ldexpf(fmax, -margin) / amax;
    if (isinf(s)) s = FLT_MAX;
    if (pow2) s = ldexpf(1.0f, ilogbf(s));
    return s;
}

/* Codes and grid of src [R, C] in tiles of tr x tc, as the oracle says. */
static void oracle_cast(const float *src, int64_t R, int64_t C, int64_t tr, int64_t tc, f8_dtype dt, int margin,
                        int pow2, uint8_t *codes, float *grid)
{
    const int64_t gc = (C + tc - 1) / tc;
    for (int64_t r0 = 0; r0 < R; r0 += tr)
        for (int64_t c0 = 0; c0 < C; c0 += tc) {
            float amax = 0.0f;
            for (int64_t r = r0; r < R && r < r0 + tr; r++)
                for (int64_t c = c0; c < C && c < c0 + tc; c++)
                    if (!isnan(src[r * C + c])) amax = fmaxf(amax, fabsf(src[r * C + c]));
            const float s = oracle_scale(amax, f8_fp8_max(dt), margin, pow2);
            for (int64_t r = r0; r < R && r < r0 + tr; r++)
                for (int64_t c = c0; c < C && c < c0 + tc; c++) codes[r * C + c] = f8_fp8_from_float(src[r * C + c] * s, dt);
            grid[(r0 / tr) * gc + c0 / tc] = 1.0f / s;
        }
}

static void fill_data(float *h, int64_t R, int64_t C, test_rng *rng, int specials)
{
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            /* magnitudes that differ by tile, so tile scales differ */
            const float mag = ldexpf(1.0f, (int)((r / 7 + c / 40) % 24) - 12);
            h[r * C + c] = (float)rng_normal(rng) * mag;
        }
    if (R > 3) memset(h + 3 * C, 0, (size_t)C * sizeof(float)); /* an all-zero row: scale 1 */
    if (specials && R * C > 200) {
        h[5] = INFINITY;  /* a tile with inf keeps scale 1 */
        h[R * C - 7] = NAN; /* ignored by its tile's amax */
    }
}

/* The block cast: every shape pair, both tilings, E4M3 and E5M2, margin, pow2. */
static void test_block_cast(f8_ctx *ctx)
{
    test_rng rng = {11};
    int cases = 0, bad = 0;
    double worst_rt = 0;
    for (int i = 0; i < NSHAPES; i++)
        for (int j = 0; j < NSHAPES; j++) {
            const int64_t R = SHAPES[i], C = SHAPES[j], n = R * C;
            float *h = (float *)xmalloc((size_t)n * 4);
            fill_data(h, R, C, &rng, 1);
            float *src = dev_floats(ctx, (size_t)n);
            CHECK_OK(ctx, f8_ctx_upload(ctx, src, h, (size_t)n * 4));
            const int64_t g1 = f8i_block_grid(R, C, 1), g1t = f8i_block_grid(C, R, 1), g2 = f8i_block_grid(R, C, B);
            const int64_t gmax = g1 > g1t ? g1 : g1t;
            uint8_t *out = (uint8_t *)xmalloc((size_t)n), *out_t = (uint8_t *)xmalloc((size_t)n);
            uint8_t *want = (uint8_t *)xmalloc((size_t)n), *want_t = (uint8_t *)xmalloc((size_t)n);
            float *sg = (float *)xmalloc((size_t)gmax * 4), *sgt = (float *)xmalloc((size_t)gmax * 4);
            float *wg = (float *)xmalloc((size_t)gmax * 4), *wgt = (float *)xmalloc((size_t)gmax * 4);
            float *hT = (float *)xmalloc((size_t)n * 4);
            for (int64_t r = 0; r < R; r++)
                for (int64_t c = 0; c < C; c++) hT[c * R + r] = h[r * C + c];
            for (int v = 0; v < 4; v++) {
                const int block_rows = v & 1 ? B : 1, pow2 = v >> 1, margin = v == 1 ? 1 : 0;
                const f8_dtype dt = v == 2 ? F8_DTYPE_E5M2 : F8_DTYPE_E4M3;
                f8i_cast_args a;
                memset(&a, 0, sizeof a);
                a.src = src;
                a.src_dtype = F8_DTYPE_FP32;
                a.rows = R;
                a.cols = C;
                a.mode = block_rows == 1 ? F8I_SCALING_BLOCK_1X128 : F8I_SCALING_BLOCK_128X128;
                a.out_dtype = dt;
                a.scaled_max = ldexpf(f8_fp8_max(dt), -margin);
                a.pow2 = pow2;
                a.out = out;
                a.scale_inv = sg;
                a.out_t = out_t;
                a.scale_inv_t = sgt;
                float amax = 0.0f;
                a.amax = &amax;
                CHECK_OK(ctx, f8i_op_cast(ctx, &a));
                int ok = 1;
                if (block_rows == 1) {
                    oracle_cast(h, R, C, 1, B, dt, margin, pow2, want, wg);
                    oracle_cast(hT, C, R, 1, B, dt, margin, pow2, want_t, wgt); /* the 128x1 tiles of src */
                    ok = memcmp(out, want, (size_t)n) == 0 && memcmp(sg, wg, (size_t)g1 * 4) == 0 &&
                         memcmp(out_t, want_t, (size_t)n) == 0 && memcmp(sgt, wgt, (size_t)g1t * 4) == 0;
                } else {
                    oracle_cast(h, R, C, B, B, dt, margin, pow2, want, wg);
                    ok = memcmp(out, want, (size_t)n) == 0 && memcmp(sg, wg, (size_t)g2 * 4) == 0;
                    const int64_t gr = (R + B - 1) / B, gc = (C + B - 1) / B;
                    for (int64_t r = 0; r < R; r++) /* the transpose: same codes, the grid transposed */
                        for (int64_t c = 0; c < C; c++) ok &= out_t[c * R + r] == want[r * C + c];
                    for (int64_t br = 0; br < gr; br++)
                        for (int64_t bc = 0; bc < gc; bc++) ok &= sgt[bc * gr + br] == wg[br * gc + bc];
                }
                float hmax = 0.0f;
                for (int64_t k = 0; k < n; k++)
                    if (!isnan(h[k])) hmax = fmaxf(hmax, fabsf(h[k]));
                ok &= amax == hmax;
                if (!ok) {
                    bad++;
                    fprintf(stderr, "  block cast [%lld, %lld] block_rows %d v %d differs from the oracle\n",
                            (long long)R, (long long)C, block_rows, v);
                }
                /* round trip: |code·scale_inv - v| within half a step of the
                 * format (relative 2^-4 E4M3, 2^-3 E5M2) or half the smallest
                 * subnormal (2^-10, 2^-17) times the tile's scale_inv */
                const double rel = dt == F8_DTYPE_E5M2 ? 0.125 : 0.0625, sub = dt == F8_DTYPE_E5M2 ? 0x1p-17 : 0x1p-10;
                const int64_t gc = (C + B - 1) / B;
                for (int64_t r = 0; r < R; r++)
                    for (int64_t c = 0; c < C; c++) {
                        const float x = h[r * C + c];
                        if (!isfinite(x)) continue;
                        const float si = block_rows == 1 ? sg[r * gc + c / B] : sg[(r / B) * gc + c / B];
                        if (si == 1.0f && fabsf(x) > f8_fp8_max(dt)) continue; /* the inf tile saturates (scale 1) */
                        const double back = (double)f8_fp8_to_float(out[r * C + c], dt) * si;
                        const double err = fabs(back - x), lim = rel * fabs(x) + sub * si;
                        if (margin == 0 && err / lim > worst_rt) worst_rt = err / lim;
                        if (margin == 0 && !(err <= lim)) ok = 0;
                    }
                if (!ok) bad++;
                cases++;
            }
            f8_ctx_free(ctx, src);
            free(h);
            free(hT);
            free(out);
            free(out_t);
            free(want);
            free(want_t);
            free(sg);
            free(sgt);
            free(wg);
            free(wgt);
        }
    printf("  block cast: %d cases (6x6 shapes x 4 variants) bit-exact with the oracle; round trip worst "
           "|err|/bound %.3f\n", cases - bad, worst_rt);
    CHECK(bad == 0, "block cast: %d of %d cases differ from the oracle or exceed the round-trip bound", bad, cases);
}

/* The block GEMM against FP64 of the dequantized operands:
 * |D - ref| <= 1e-5 · Σ_k |a_k·b_k| (FP32 sums over at most 250 terms) and
 * DeepGEMM's scale-free 1 - 2Σxy/(Σx² + Σy²) below 1e-9. */
static void test_block_gemm(f8_ctx *ctx)
{
    test_rng rng = {12};
    int cases = 0, bad = 0;
    double worst = 0, worst_diff = 0;
    const int64_t dims[][3] = {{1, 1, 1}, {17, 129, 250}, {127, 17, 128}, {129, 250, 17}, {250, 128, 129}, {64, 200, 300}};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (int v = 0; v < 3; v++) { /* B 128x128 (fprop, dgrad), B 1x128 (wgrad); BF16 D with bias and accumulate */
            const int64_t m = dims[di][0], n = dims[di][1], k = dims[di][2], nkb = (k + B - 1) / B;
            const int brows = v == 1 ? 1 : B;
            const f8_dtype adt = F8_DTYPE_E4M3, bdt = v == 2 ? F8_DTYPE_E5M2 : F8_DTYPE_E4M3;
            const f8_dtype ddt = v == 2 ? F8_DTYPE_BF16 : F8_DTYPE_FP32;
            const int64_t ga = m * nkb, gb = f8i_block_grid(n, k, brows);
            uint8_t *ha = (uint8_t *)xmalloc((size_t)(m * k)), *hb = (uint8_t *)xmalloc((size_t)(n * k));
            float *sa = (float *)xmalloc((size_t)ga * 4), *sb = (float *)xmalloc((size_t)gb * 4);
            float *bias = (float *)xmalloc((size_t)n * 4), *d0 = (float *)xmalloc((size_t)(m * n) * 4);
            for (int64_t i = 0; i < m * k; i++) ha[i] = (uint8_t)(rng_u64(&rng) & 0xF7); /* no NaN codes */
            for (int64_t i = 0; i < n * k; i++) hb[i] = (uint8_t)(rng_u64(&rng) & (bdt == F8_DTYPE_E5M2 ? 0xBB : 0xF7));
            for (int64_t i = 0; i < ga; i++) sa[i] = ldexpf((float)(0.5 + rng_uniform(&rng)), (int)(rng_u64(&rng) % 9) - 4);
            for (int64_t i = 0; i < gb; i++) sb[i] = ldexpf((float)(0.5 + rng_uniform(&rng)), (int)(rng_u64(&rng) % 9) - 4);
            for (int64_t i = 0; i < n; i++) bias[i] = (float)rng_normal(&rng);
            for (int64_t i = 0; i < m * n; i++) d0[i] = ddt == F8_DTYPE_BF16 ? f8_bf16_to_float(f8_bf16_from_float((float)rng_normal(&rng))) : (float)rng_normal(&rng);
            const size_t es = f8_dtype_size(ddt);
            void *da = NULL, *db = NULL, *dsa = NULL, *dsb = NULL, *dd = NULL, *dbias = NULL;
            CHECK_OK(ctx, f8_ctx_alloc(ctx, (size_t)(m * k), &da));
            CHECK_OK(ctx, f8_ctx_alloc(ctx, (size_t)(n * k), &db));
            CHECK_OK(ctx, f8_ctx_alloc(ctx, (size_t)ga * 4, &dsa));
            CHECK_OK(ctx, f8_ctx_alloc(ctx, (size_t)gb * 4, &dsb));
            CHECK_OK(ctx, f8_ctx_alloc(ctx, (size_t)(m * n) * es, &dd));
            CHECK_OK(ctx, f8_ctx_alloc(ctx, (size_t)n * 4, &dbias));
            f8_ctx_upload(ctx, da, ha, (size_t)(m * k));
            f8_ctx_upload(ctx, db, hb, (size_t)(n * k));
            f8_ctx_upload(ctx, dsa, sa, (size_t)ga * 4);
            f8_ctx_upload(ctx, dsb, sb, (size_t)gb * 4);
            f8_ctx_upload(ctx, dbias, bias, (size_t)n * 4);
            uint16_t *d0b = (uint16_t *)xmalloc((size_t)(m * n) * 2);
            for (int64_t i = 0; i < m * n; i++) d0b[i] = f8_bf16_from_float(d0[i]);
            f8_ctx_upload(ctx, dd, ddt == F8_DTYPE_BF16 ? (void *)d0b : (void *)d0, (size_t)(m * n) * es);
            f8i_gemm_args g;
            memset(&g, 0, sizeof g);
            g.m = m;
            g.n = n;
            g.k = k;
            g.a = (const uint8_t *)da;
            g.a_dtype = adt;
            g.a_scale_inv = (const float *)dsa;
            g.a_mode = F8I_SCALING_BLOCK_1X128;
            g.b = (const uint8_t *)db;
            g.b_dtype = bdt;
            g.b_scale_inv = (const float *)dsb;
            g.b_mode = brows == 1 ? F8I_SCALING_BLOCK_1X128 : F8I_SCALING_BLOCK_128X128;
            g.d = dd;
            g.d_dtype = ddt;
            g.accumulate = v == 2;
            g.bias = v == 2 ? dbias : NULL;
            g.bias_dtype = F8_DTYPE_FP32;
            CHECK_OK(ctx, f8i_op_gemm(ctx, &g));
            unsigned char *got = (unsigned char *)xmalloc((size_t)(m * n) * es);
            f8_ctx_download(ctx, got, dd, (size_t)(m * n) * es);
            int ok = 1;
            double sxy = 0, sxx = 0, syy = 0;
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    double ref = 0, mag = 0;
                    for (int64_t kk = 0; kk < k; kk++) {
                        const double x = (double)f8_fp8_to_float(ha[i * k + kk], adt) * sa[i * nkb + kk / B];
                        const double y = (double)f8_fp8_to_float(hb[j * k + kk], bdt) * sb[(j / brows) * nkb + kk / B];
                        ref += x * y;
                        mag += fabs(x * y);
                    }
                    if (v == 2) {
                        ref += d0[i * n + j] + bias[j];
                        mag += fabs(d0[i * n + j]) + fabs(bias[j]);
                    }
                    const double out = ddt == F8_DTYPE_BF16 ? f8_bf16_to_float(((uint16_t *)got)[i * n + j])
                                                            : ((float *)got)[i * n + j];
                    const double lim = (ddt == F8_DTYPE_BF16 ? 0x1p-8 : 1e-5) * mag + 1e-30;
                    if (fabs(out - ref) / lim > worst && ddt == F8_DTYPE_FP32) worst = fabs(out - ref) / lim;
                    if (!(fabs(out - ref) <= lim)) ok = 0;
                    sxy += out * ref;
                    sxx += out * out;
                    syy += ref * ref;
                }
            const double diff = sxx + syy > 0 ? 1.0 - 2.0 * sxy / (sxx + syy) : 0.0;
            if (diff > worst_diff && ddt == F8_DTYPE_FP32) worst_diff = diff;
            if (!(diff < (ddt == F8_DTYPE_BF16 ? 1e-4 : 1e-9))) ok = 0;
            if (!ok) {
                bad++;
                fprintf(stderr, "  block gemm %lldx%lldx%lld v %d off the FP64 reference (diff %g)\n", (long long)m,
                        (long long)n, (long long)k, v, diff);
            }
            cases++;
            f8_ctx_free(ctx, da);
            f8_ctx_free(ctx, db);
            f8_ctx_free(ctx, dsa);
            f8_ctx_free(ctx, dsb);
            f8_ctx_free(ctx, dd);
            f8_ctx_free(ctx, dbias);
            free(ha);
            free(hb);
            free(sa);
            free(sb);
            free(bias);
            free(d0);
            free(d0b);
            free(got);
        }
    printf("  block gemm: %d of %d cases within 1e-5·Σ|ab| of FP64 (FP32 D; worst %.3g of the bound, scale-free "
           "diff %.3g)\n", cases - bad, cases, worst, worst_diff);
    CHECK(bad == 0, "block gemm: %d of %d cases off the FP64 reference", bad, cases);
}

/* BLOCK on a CUDA ctx: created where there is a GPU (test_cuda_block.c and
 * test_cuda_stack.c test it), F8_ERR_NO_DEVICE without one or in a CUDA=0
 * build; never refused for the recipe. */
static void test_cuda_accepted(void)
{
    f8_ctx_config cfg = f8_ctx_config_default();
    cfg.backend = F8_BACKEND_CUDA;
    cfg.recipe.kind = F8_RECIPE_BLOCK;
    f8_ctx *cu = NULL;
    char msg[256] = "";
    const f8_status st = f8_ctx_create(&cfg, &cu, msg, sizeof msg);
    CHECK((st == F8_OK && cu != NULL) || (st == F8_ERR_NO_DEVICE && cu == NULL), "BLOCK on CUDA: %s (%s)",
          f8_status_string(st), msg);
    f8_ctx_destroy(cu);
}

/* The block GEMM's addend c (f8_module_forward_add's residual), the
 * per-tensor GEMM's contract: D = acc + c (+ bias), one FP32 sum, against
 * an FP64 reference of the two-level formula, and bitwise the same as the
 * old route (c copied into D, then accumulate); c == d is the accumulate. */
static void test_block_gemm_addend(f8_ctx *ctx)
{
    test_rng rng = {27};
    const int64_t dims[][3] = {{17, 129, 250}, {64, 200, 300}, {3, 16, 128}};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (int v = 0; v < 2; v++) { /* B 128x128 (fprop) with bias; B 1x128 without */
            const int64_t m = dims[di][0], n = dims[di][1], k = dims[di][2], nkb = (k + B - 1) / B;
            const int brows = v ? 1 : B;
            const int64_t ga = m * nkb, gb = f8i_block_grid(n, k, brows);
            uint8_t *ha = (uint8_t *)xmalloc((size_t)(m * k)), *hb = (uint8_t *)xmalloc((size_t)(n * k));
            float *sa = (float *)xmalloc((size_t)ga * 4), *sb = (float *)xmalloc((size_t)gb * 4);
            float *bias = (float *)xmalloc((size_t)n * 4), *c = (float *)xmalloc((size_t)(m * n) * 4);
            for (int64_t i = 0; i < m * k; i++) ha[i] = (uint8_t)(rng_u64(&rng) & 0xF7);
            for (int64_t i = 0; i < n * k; i++) hb[i] = (uint8_t)(rng_u64(&rng) & 0xF7);
            for (int64_t i = 0; i < ga; i++) sa[i] = ldexpf((float)(0.5 + rng_uniform(&rng)), (int)(rng_u64(&rng) % 9) - 4);
            for (int64_t i = 0; i < gb; i++) sb[i] = ldexpf((float)(0.5 + rng_uniform(&rng)), (int)(rng_u64(&rng) % 9) - 4);
            for (int64_t i = 0; i < n; i++) bias[i] = (float)rng_normal(&rng);
            for (int64_t i = 0; i < m * n; i++) c[i] = (float)rng_normal(&rng) * 100.0f;
            void *da = NULL, *db = NULL, *dsa = NULL, *dsb = NULL, *dc = NULL, *d1 = NULL, *d2 = NULL, *dbias = NULL;
            CHECK_OK(ctx, f8_ctx_alloc(ctx, (size_t)(m * k), &da));
            CHECK_OK(ctx, f8_ctx_alloc(ctx, (size_t)(n * k), &db));
            CHECK_OK(ctx, f8_ctx_alloc(ctx, (size_t)ga * 4, &dsa));
            CHECK_OK(ctx, f8_ctx_alloc(ctx, (size_t)gb * 4, &dsb));
            CHECK_OK(ctx, f8_ctx_alloc(ctx, (size_t)(m * n) * 4, &dc));
            CHECK_OK(ctx, f8_ctx_alloc(ctx, (size_t)(m * n) * 4, &d1));
            CHECK_OK(ctx, f8_ctx_alloc(ctx, (size_t)(m * n) * 4, &d2));
            CHECK_OK(ctx, f8_ctx_alloc(ctx, (size_t)n * 4, &dbias));
            f8_ctx_upload(ctx, da, ha, (size_t)(m * k));
            f8_ctx_upload(ctx, db, hb, (size_t)(n * k));
            f8_ctx_upload(ctx, dsa, sa, (size_t)ga * 4);
            f8_ctx_upload(ctx, dsb, sb, (size_t)gb * 4);
            f8_ctx_upload(ctx, dbias, bias, (size_t)n * 4);
            f8_ctx_upload(ctx, dc, c, (size_t)(m * n) * 4);
            f8_ctx_upload(ctx, d2, c, (size_t)(m * n) * 4);
            f8i_gemm_args g;
            memset(&g, 0, sizeof g);
            g.m = m, g.n = n, g.k = k;
            g.a = da, g.a_dtype = F8_DTYPE_E4M3, g.a_scale_inv = (const float *)dsa, g.a_mode = F8I_SCALING_BLOCK_1X128;
            g.b = db, g.b_dtype = F8_DTYPE_E4M3, g.b_scale_inv = (const float *)dsb;
            g.b_mode = brows == 1 ? F8I_SCALING_BLOCK_1X128 : F8I_SCALING_BLOCK_128X128;
            g.d_dtype = F8_DTYPE_FP32;
            g.bias = v ? NULL : dbias;
            g.bias_dtype = F8_DTYPE_FP32;
            f8i_gemm_args with_c = g, acc = g, self = g;
            with_c.d = d1, with_c.c = dc;
            acc.d = d2, acc.accumulate = 1;
            CHECK_OK(ctx, f8i_op_gemm(ctx, &with_c));
            CHECK_OK(ctx, f8i_op_gemm(ctx, &acc));
            float *got = (float *)xmalloc((size_t)(m * n) * 4), *old = (float *)xmalloc((size_t)(m * n) * 4);
            f8_ctx_download(ctx, got, d1, (size_t)(m * n) * 4);
            f8_ctx_download(ctx, old, d2, (size_t)(m * n) * 4);
            CHECK(memcmp(got, old, (size_t)(m * n) * 4) == 0, "block gemm %lldx%lldx%lld /%d: c differs from copy + accumulate",
                  (long long)m, (long long)n, (long long)k, brows);
            f8_ctx_upload(ctx, d2, c, (size_t)(m * n) * 4);
            self.d = d2, self.c = d2;
            CHECK_OK(ctx, f8i_op_gemm(ctx, &self));
            f8_ctx_download(ctx, old, d2, (size_t)(m * n) * 4);
            CHECK(memcmp(got, old, (size_t)(m * n) * 4) == 0, "block gemm %lldx%lldx%lld /%d: c == d differs",
                  (long long)m, (long long)n, (long long)k, brows);
            double worst = 0.0;
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    double ref = 0.0, mag = 0.0;
                    for (int64_t kb = 0; kb < nkb; kb++) {
                        double p = 0.0, pm = 0.0;
                        for (int64_t kk = kb * B; kk < k && kk < (kb + 1) * B; kk++) {
                            const double t = (double)f8_fp8_to_float(ha[i * k + kk], F8_DTYPE_E4M3) *
                                             (double)f8_fp8_to_float(hb[j * k + kk], F8_DTYPE_E4M3);
                            p += t, pm += fabs(t);
                        }
                        const double s = (double)sa[i * nkb + kb] * (double)sb[(j / brows) * nkb + kb];
                        ref += p * s, mag += pm * s;
                    }
                    ref += c[i * n + j] + (v ? 0.0 : bias[j]);
                    mag += fabs(c[i * n + j]) + (v ? 0.0 : fabs(bias[j]));
                    const double e = fabs((double)got[i * n + j] - ref) / (mag + 1e-30);
                    if (e > worst) worst = e;
                }
            CHECK(worst <= 1e-5, "block gemm %lldx%lldx%lld /%d with c: relative error %.3g", (long long)m, (long long)n,
                  (long long)k, brows, worst);
            free(ha), free(hb), free(sa), free(sb), free(bias), free(c), free(got), free(old);
            f8_ctx_free(ctx, da), f8_ctx_free(ctx, db), f8_ctx_free(ctx, dsa), f8_ctx_free(ctx, dsb);
            f8_ctx_free(ctx, dc), f8_ctx_free(ctx, d1), f8_ctx_free(ctx, d2), f8_ctx_free(ctx, dbias);
        }
}

int main(void)
{
    char why[256] = "";
    f8_recipe r = f8_recipe_default();
    r.kind = F8_RECIPE_BLOCK;
    f8_ctx *blk = test_ctx(F8_BACKEND_CPU, &r, why);
    if (!blk) die(why, NULL);
    test_block_cast(blk);
    test_block_gemm(blk);
    test_block_gemm_addend(blk);
    test_cuda_accepted();
    f8_ctx_destroy(blk);
    return test_finish("test_block");
}
