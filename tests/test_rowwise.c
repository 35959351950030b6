/*
 * test_rowwise.c — row-wise scaling's leaf ops (core/rowwise.h) on the CPU,
 * their oracle:
 *  - the row-wise cast bit for bit against the definition evaluated here in
 *    FP64 (amax, scale = fp8_max·2^-margin / amax rounded once to FP32,
 *    FLT_MAX on overflow, 1 for zero/inf rows; pow2 as exp2(floor(log2 s))
 *    in FP64, torchao's formula evaluated exactly), codes, both orientations
 *    (the column-wise copy with per-column scales), amax and telemetry, on
 *    odd shapes with zero, inf, NaN, denormal and huge rows; the round trip
 *    codes·scale_inv within the format's rounding bound; the noop flag;
 *  - the row-wise GEMM against FP64 of the dequantized operands (the block
 *    GEMM's bound), every FP8 pair, FP32/BF16 D, residual (a separate c or
 *    d itself), FP32/BF16 bias, k = 0;
 *  - a forward and a wgrad product of real casts (X·Wᵀ from two row-wise
 *    operands, dYᵀ·X from two column-wise copies) within the FP8
 *    quantization bound of the exact product;
 *  - bad arguments refused with a status, nothing written;
 *  - the casts fused into the norm and activation kernels: op by op
 *    against the plain kernels and the cast of their output, edge rows
 *    included, their column amaxes and the column-only cast given them
 *    (col_amax_in), whose misuse is refused (rowwise_fused_ops_tests.h),
 *    and module by module against the unfused path
 *    (rowwise_fusion_tests.h), bit for bit.
 */
#include "rowwise_fixture.h"
#include "rowwise_fused_ops_tests.h"
#include "rowwise_fusion_tests.h"

static const int64_t SHAPES[] = {1, 3, 17, 128, 129, 250};
enum { NSHAPES = sizeof SHAPES / sizeof SHAPES[0] };

/* The definition, apart from numerics.h: FP64 quotient rounded to FP32,
 * power of two by log2 in FP64. */
static float oracle_scale(const float *v, int64_t n, int64_t step, float fmax, int margin, int pow2)
{
    double a = 0;
    for (int64_t e = 0; e < n; e++)
        if (!isnan(v[e * step]) && fabs(v[e * step]) > a) a = fabs(v[e * step]);
    if (!(a > 0) || isinf(a)) return 1.0f;
    double s = ldexp((double)fmax, -margin) / a;
    float sf = s > FLT_MAX ? INFINITY : (float)s;
    if (isinf(sf)) sf = FLT_MAX;
    if (pow2) sf = (float)exp2(floor(log2((double)sf)));
    return sf;
}

typedef struct cast_case {
    int64_t R, C;
    f8_dtype src, out;
    int pow2, margin, mix; /* mix bit 0: out, bit 1: out_t */
} cast_case;

/* One cast against the oracle; returns 1 when it agrees in every output. */
static int check_cast(f8_ctx *ctx, const cast_case *cc, test_rng *rng, double *worst_rt)
{
    const int64_t R = cc->R, C = cc->C, n = R * C;
    float *h = (float *)xmalloc((size_t)n * 4);
    uint16_t *hb = (uint16_t *)xmalloc((size_t)n * 2);
    rowwise_fill(h, R, C, rng, 1);
    if (cc->src == F8_DTYPE_BF16) rowwise_to_bf16(h, hb, n);
    const float fmax = f8_fp8_max(cc->out);
    uint8_t *out = (uint8_t *)xmalloc((size_t)n), *out_t = (uint8_t *)xmalloc((size_t)n);
    float *si = (float *)xmalloc((size_t)R * 4), *si_t = (float *)xmalloc((size_t)C * 4);
    float amax = 0.5f; /* max(*amax, ...): a running record */
    uint64_t stats[3] = {7, 0, 0};
    f8i_rowwise_cast_args a = {0};
    a.src = cc->src == F8_DTYPE_BF16 ? (const void *)hb : (const void *)h;
    a.src_dtype = cc->src;
    a.rows = R;
    a.cols = C;
    a.out_dtype = cc->out;
    a.out = cc->mix & 1 ? out : NULL;
    a.scale_inv = cc->mix & 1 ? si : NULL;
    a.out_t = cc->mix & 2 ? out_t : NULL;
    a.scale_inv_t = cc->mix & 2 ? si_t : NULL;
    a.scaled_max = ldexpf(fmax, -cc->margin);
    a.pow2 = cc->pow2;
    a.amax = &amax;
    a.stats = stats;
    float *dbias = (float *)xmalloc((size_t)C * 4);
    for (int64_t c = 0; c < C; c++) dbias[c] = 0.25f;
    a.dbias = dbias; /* the bias gradient: FP64 column sums rounded once, onto the old value or not */
    a.dbias_dtype = F8_DTYPE_FP32;
    a.dbias_accumulate = cc->pow2;
    a.workspace_bytes = f8i_reduce_workspace_bytes(R, C); /* the CPU needs none, but checks it as CUDA does */
    a.workspace = xmalloc(a.workspace_bytes);
    int ok = f8i_rowwise_cast_check(ctx, &a) == F8_OK && f8i_cpu_cast_rowwise(ctx, &a) == F8_OK;
    for (int64_t c = 0; c < C && ok; c++) {
        double sum = 0.0;
        for (int64_t r = 0; r < R; r++) sum += h[r * C + c];
        const float want_db = (cc->pow2 ? 0.25f : 0.0f) + (float)sum;
        ok = isnan(want_db) ? isnan(dbias[c]) : dbias[c] == want_db;
        if (!ok) fprintf(stderr, "  rowwise cast [%lld, %lld]: dbias[%lld] %g, want %g\n", (long long)R, (long long)C,
                         (long long)c, (double)dbias[c], (double)want_db);
    }
    free(dbias);
    free(a.workspace);

    uint64_t want[3] = {7 + (uint64_t)n, 0, 0};
    double want_amax = 0.5;
    for (int64_t i = 0; i < n; i++)
        if (!isnan(h[i]) && fabs(h[i]) > want_amax) want_amax = fabs(h[i]);
    ok = ok && amax == (float)want_amax;
    /* both orientations: line l of out (step 1 over a row) or of out_t (step C over a column) */
    for (int t = 0; t < 2 && ok; t++) {
        if (!(cc->mix & (1 << t))) continue;
        const int64_t lines = t ? C : R, len = t ? R : C, step = t ? C : 1;
        for (int64_t l = 0; l < lines && ok; l++) {
            const float *v = t ? h + l : h + l * C;
            const float s = oracle_scale(v, len, step, fmax, cc->margin, cc->pow2);
            ok = (t ? si_t[l] : si[l]) == 1.0f / s;
            for (int64_t e = 0; e < len && ok; e++) {
                const float x = v[e * step] * s;
                const uint8_t q = (t ? out_t : out)[l * len + e];
                ok = q == f8_fp8_from_float(x, cc->out);
                const int counted = t == 0 || !(cc->mix & 1);
                if (counted) want[1] += fabsf(x) > fmax, want[2] += v[e * step] != 0.0f && (q & 0x7F) == 0;
                /* round trip: half a step of the code's binade, or of the subnormal step */
                const double back = (double)f8_fp8_to_float(q, cc->out) * (t ? si_t[l] : si[l]);
                const double d = fabs(back - v[e * step]), ax = fabs(v[e * step]);
                if (!isfinite(x) || fabsf(x) > fmax || s == FLT_MAX) continue;
                const double rel = cc->out == F8_DTYPE_E5M2 ? 0x1p-3 : 0x1p-4;
                const double sub = (cc->out == F8_DTYPE_E5M2 ? 0x1p-17 : 0x1p-10) / s;
                const double bound = rel * ax + sub;
                if (d / bound > *worst_rt) *worst_rt = d / bound;
                ok = ok && d <= bound;
            }
            if (!ok)
                fprintf(stderr, "  rowwise cast [%lld, %lld] %s->%s pow2 %d margin %d mix %d: %s %lld differs\n",
                        (long long)R, (long long)C, f8_dtype_name(cc->src), f8_dtype_name(cc->out), cc->pow2,
                        cc->margin, cc->mix, t ? "column" : "row", (long long)l);
        }
    }
    ok = ok && stats[0] == want[0] && stats[1] == want[1] && stats[2] == want[2];
    if (!ok)
        fprintf(stderr, "  rowwise cast [%lld, %lld] mix %d: amax %g (want %g), stats %llu %llu %llu (want %llu %llu %llu)\n",
                (long long)R, (long long)C, cc->mix, (double)amax, want_amax, (unsigned long long)stats[0],
                (unsigned long long)stats[1], (unsigned long long)stats[2], (unsigned long long)want[0],
                (unsigned long long)want[1], (unsigned long long)want[2]);
    free(h), free(hb), free(out), free(out_t), free(si), free(si_t);
    return ok;
}

static void test_cast(f8_ctx *ctx)
{
    test_rng rng = {30};
    int cases = 0, bad = 0;
    double worst_rt = 0;
    for (int i = 0; i < NSHAPES; i++)
        for (int j = 0; j < NSHAPES; j++)
            for (int v = 0; v < 6; v++) {
                cast_case cc = {SHAPES[i], SHAPES[j], v & 1 ? F8_DTYPE_BF16 : F8_DTYPE_FP32,
                                v & 2 ? F8_DTYPE_E5M2 : F8_DTYPE_E4M3, (i + j + v) % 2, (i * 3 + v) % 3 == 2, 1 + v % 3};
                cases++;
                bad += !check_cast(ctx, &cc, &rng, &worst_rt);
            }
    printf("  rowwise cast: %d of %d cases bit for bit with the FP64 definition (round trip worst %.3f of its bound)\n",
           cases - bad, cases, worst_rt);
    CHECK(bad == 0, "rowwise cast: %d of %d cases differ from the definition", bad, cases);
}

/* pow2 against torchao's exp2(floor(log2 s)) on the scales where FP32
 * log2 rounds (just below a power of two), and the edge rows' scale_inv. */
static void test_cast_edges(f8_ctx *ctx)
{
    /* rows: amax just above 448/256 (scale just below 256), zero, inf only, NaN with 2, denormal */
    const float below = nextafterf(448.0f / 256.0f, INFINITY);
    float h[5 * 2] = {below, 0.5f, 0.0f, -0.0f, INFINITY, 1.0f, NAN, 2.0f, 1e-40f, -3e-41f};
    uint8_t out[10];
    float si[5];
    f8i_rowwise_cast_args a = {0};
    a.src = h;
    a.src_dtype = F8_DTYPE_FP32;
    a.rows = 5;
    a.cols = 2;
    a.out_dtype = F8_DTYPE_E4M3;
    a.out = out;
    a.scale_inv = si;
    a.scaled_max = 448.0f;
    a.pow2 = 1;
    CHECK_OK(ctx, f8i_cpu_cast_rowwise(ctx, &a));
    CHECK(si[0] == 1.0f / 128.0f, "pow2 just below 256: scale_inv %a, want 2^-7 (exact round-down)", (double)si[0]);
    CHECK(si[1] == 1.0f && out[2] == 0 && out[3] == 0x80, "zero row: scale_inv %g, codes %02x %02x", (double)si[1],
          out[2], out[3]);
    CHECK(si[2] == 1.0f && out[4] == 0x7E && out[5] == f8_fp8_from_float(1.0f, F8_DTYPE_E4M3),
          "inf row keeps scale 1 and saturates: scale_inv %g code %02x", (double)si[2], out[4]);
    CHECK(si[3] == 1.0f / 128.0f && out[6] == 0x7F && out[7] == f8_fp8_from_float(256.0f, F8_DTYPE_E4M3),
          "NaN ignored by amax: scale_inv %g codes %02x %02x",
          (double)si[3], out[6], out[7]);
    CHECK(si[4] == ldexpf(1.0f, -127) && out[8] == f8_fp8_from_float(1e-40f * 0x1p127f, F8_DTYPE_E4M3),
          "denormal row: scale FLT_MAX rounded to 2^127, scale_inv %a", (double)si[4]);
    /* torchao's FP32 formula rounds this scale up to 256: f8 rounds down (rowwise.h) */
    const float s = 448.0f / below;
    CHECK(s < 256.0f && exp2f(floorf(log2f(s))) == 256.0f && si[0] == 1.0f / 128.0f,
          "the documented difference from torchao's FP32 log2: s %a", (double)s);
    a.pow2 = 0;
    CHECK_OK(ctx, f8i_cpu_cast_rowwise(ctx, &a));
    CHECK(si[4] == 1.0f / FLT_MAX && out[8] == f8_fp8_from_float(1e-40f * FLT_MAX, F8_DTYPE_E4M3),
          "denormal row without pow2: scale FLT_MAX, scale_inv %a", (double)si[4]);

    /* noop: nothing written */
    const float one = 1.0f;
    memset(out, 0xAB, sizeof out);
    for (int i = 0; i < 5; i++) si[i] = -1.0f;
    float amax = -2.0f;
    a.noop = &one;
    a.amax = &amax;
    CHECK_OK(ctx, f8i_cpu_cast_rowwise(ctx, &a));
    int untouched = amax == -2.0f;
    for (int i = 0; i < 10; i++) untouched &= out[i] == 0xAB;
    for (int i = 0; i < 5; i++) untouched &= si[i] == -1.0f;
    CHECK(untouched, "noop flag 1: the cast wrote");
}

/* Bad calls: refused with a status, the outputs untouched. */
static void test_refusals(f8_ctx *ctx)
{
    float h[4] = {1, 2, 3, 4}, si[2] = {-1, -1};
    uint8_t out[4] = {0xAB, 0xAB, 0xAB, 0xAB};
    f8i_rowwise_cast_args a = {h, F8_DTYPE_FP32, 2, 2, F8_DTYPE_E4M3, out, si, NULL, NULL, 448.0f, 0, NULL, NULL, NULL, NULL, F8_DTYPE_FP32, 0, NULL, 0, 0};
    CHECK_OK(ctx, f8i_rowwise_cast_check(ctx, &a));
    f8i_rowwise_cast_args b = a;
    b.src_dtype = F8_DTYPE_E4M3;
    CHECK_STATUS(ctx, f8i_rowwise_cast_check(ctx, &b), F8_ERR_DTYPE);
    b = a, b.out_dtype = F8_DTYPE_BF16;
    CHECK_STATUS(ctx, f8i_rowwise_cast_check(ctx, &b), F8_ERR_DTYPE);
    b = a, b.scale_inv = NULL;
    CHECK_STATUS(ctx, f8i_rowwise_cast_check(ctx, &b), F8_ERR_INVALID_ARGUMENT);
    b = a, b.out = NULL, b.scale_inv = NULL;
    CHECK_STATUS(ctx, f8i_rowwise_cast_check(ctx, &b), F8_ERR_INVALID_ARGUMENT);
    b = a, b.scaled_max = 0.0f;
    CHECK_STATUS(ctx, f8i_rowwise_cast_check(ctx, &b), F8_ERR_INVALID_ARGUMENT);
    b = a, b.rows = -1;
    CHECK_STATUS(ctx, f8i_rowwise_cast_check(ctx, &b), F8_ERR_SHAPE);
    /* dbias reduces over rows: without the workspace f8i_cast_args asks for, refused */
    float db[2] = {-3, -3};
    char ws[1024];
    b = a, b.dbias = db, b.dbias_dtype = F8_DTYPE_FP32;
    CHECK_STATUS(ctx, f8i_rowwise_cast_check(ctx, &b), F8_ERR_STATE);
    b.workspace = ws, b.workspace_bytes = f8i_reduce_workspace_bytes(2, 2) - 1;
    CHECK_STATUS(ctx, f8i_rowwise_cast_check(ctx, &b), F8_ERR_STATE);
    b.workspace_bytes = f8i_reduce_workspace_bytes(2, 2);
    CHECK(b.workspace_bytes <= sizeof ws, "the 2x2 workspace fits the test's buffer");
    CHECK_OK(ctx, f8i_rowwise_cast_check(ctx, &b));
    CHECK(out[0] == 0xAB && db[0] == -3.0f && si[0] == -1.0f, "a refused cast wrote");

    uint8_t q[4] = {0x38, 0x38, 0x38, 0x38};
    float d[4] = {-7, -7, -7, -7}, sc[2] = {1, 1};
    f8i_rowwise_gemm_args g = {2, 2, 2, q, F8_DTYPE_E4M3, sc, q, F8_DTYPE_E4M3, sc, d, F8_DTYPE_FP32, NULL, NULL,
                               F8_DTYPE_FP32, 0};
    CHECK_OK(ctx, f8i_rowwise_gemm_check(ctx, &g));
    f8i_rowwise_gemm_args e = g;
    e.a_dtype = F8_DTYPE_BF16;
    CHECK_STATUS(ctx, f8i_rowwise_gemm_check(ctx, &e), F8_ERR_DTYPE);
    e = g, e.d_dtype = F8_DTYPE_E4M3;
    CHECK_STATUS(ctx, f8i_rowwise_gemm_check(ctx, &e), F8_ERR_DTYPE);
    e = g, e.b_scale_inv = NULL;
    CHECK_STATUS(ctx, f8i_rowwise_gemm_check(ctx, &e), F8_ERR_INVALID_ARGUMENT);
    e = g, e.k = -2;
    CHECK_STATUS(ctx, f8i_rowwise_gemm_check(ctx, &e), F8_ERR_SHAPE);
    CHECK(d[0] == -7.0f, "a refused gemm wrote");
}

/* The bound of core/rowwise.h's GEMM contract for the CPU and the CUDA
 * fallback kernel: 1e-5·mag (FP32 D), 2^-8·mag (BF16). */
static double rowwise_bound(f8_dtype d, double mag) { return (d == F8_DTYPE_BF16 ? 0x1p-8 : 1e-5) * mag + 1e-30; }

/* Random codes of each row and a per-row scale_inv spread over 2^-8..2^8. */
static void random_operand(uint8_t *q, float *si, int64_t rows, int64_t k, f8_dtype dt, test_rng *rng)
{
    const float fmax = f8_fp8_max(dt);
    for (int64_t r = 0; r < rows; r++) {
        si[r] = ldexpf(1.0f + (float)rng_uniform(rng), (int)(rng_u64(rng) % 17) - 8);
        for (int64_t i = 0; i < k; i++) q[r * k + i] = f8_fp8_from_float((float)rng_normal(rng) * fmax / 4, dt);
    }
}

static void test_gemm(f8_ctx *ctx)
{
    static const int64_t M[] = {1, 17, 64}, N[] = {1, 16, 33}, K[] = {0, 1, 32, 129};
    const f8_dtype pairs[4][2] = {{F8_DTYPE_E4M3, F8_DTYPE_E4M3}, {F8_DTYPE_E5M2, F8_DTYPE_E4M3},
                                  {F8_DTYPE_E4M3, F8_DTYPE_E5M2}, {F8_DTYPE_E5M2, F8_DTYPE_E5M2}};
    test_rng rng = {31};
    int cases = 0, bad = 0;
    double worst = 0;
    for (int mi = 0; mi < 3; mi++)
        for (int ni = 0; ni < 3; ni++)
            for (int ki = 0; ki < 4; ki++)
                for (int v = 0; v < 8; v++) {
                    const int64_t m = M[mi], n = N[ni], k = K[ki];
                    const f8_dtype at = pairs[v % 4][0], bt = pairs[v % 4][1];
                    const f8_dtype dt = v & 4 ? F8_DTYPE_BF16 : F8_DTYPE_FP32;
                    const int cmode = (mi + ni + v) % 3; /* 0 none, 1 a separate c, 2 c = d */
                    const int bmode = (mi + ki + v) % 3; /* 0 none, 1 FP32, 2 BF16 */
                    uint8_t *qa = (uint8_t *)xmalloc((size_t)(m * k)), *qb = (uint8_t *)xmalloc((size_t)(n * k));
                    float *sa = (float *)xmalloc((size_t)m * 4), *sb = (float *)xmalloc((size_t)n * 4);
                    random_operand(qa, sa, m, k, at, &rng);
                    random_operand(qb, sb, n, k, bt, &rng);
                    const size_t es = dt == F8_DTYPE_BF16 ? 2 : 4;
                    unsigned char *d = (unsigned char *)xmalloc((size_t)(m * n) * es);
                    unsigned char *c = (unsigned char *)xmalloc((size_t)(m * n) * es);
                    float *cv = (float *)xmalloc((size_t)(m * n) * 4), bias[64], biasv[64];
                    uint16_t bias16[64];
                    for (int64_t i = 0; i < m * n; i++) {
                        cv[i] = (float)rng_normal(&rng) * 100.0f;
                        if (dt == F8_DTYPE_BF16) {
                            ((uint16_t *)c)[i] = f8_bf16_from_float(cv[i]);
                            cv[i] = f8_bf16_to_float(((uint16_t *)c)[i]);
                        } else {
                            ((float *)c)[i] = cv[i];
                        }
                    }
                    memcpy(d, c, (size_t)(m * n) * es);
                    for (int64_t j = 0; j < n; j++) {
                        bias[j] = (float)rng_normal(&rng) * 10.0f;
                        bias16[j] = f8_bf16_from_float(bias[j]);
                        biasv[j] = bmode == 2 ? f8_bf16_to_float(bias16[j]) : bias[j];
                    }
                    f8i_rowwise_gemm_args g = {m, n, k, qa, at, sa, qb, bt, sb, d, dt,
                                               cmode == 1 ? (const void *)c : cmode == 2 ? (const void *)d : NULL,
                                               bmode == 1 ? (const void *)bias : bmode == 2 ? (const void *)bias16 : NULL,
                                               bmode == 2 ? F8_DTYPE_BF16 : F8_DTYPE_FP32, v & 1};
                    int ok = f8i_rowwise_gemm_check(ctx, &g) == F8_OK && f8i_cpu_gemm_rowwise(ctx, &g) == F8_OK;
                    double *ref = (double *)xmalloc((size_t)(m * n) * sizeof(double));
                    double *mag = (double *)xmalloc((size_t)(m * n) * sizeof(double));
                    rowwise_ref(qa, at, sa, qb, bt, sb, m, n, k, cmode ? cv : NULL, bmode ? biasv : NULL, ref, mag);
                    for (int64_t e = 0; e < m * n && ok; e++) {
                        const double got = dt == F8_DTYPE_BF16 ? f8_bf16_to_float(((uint16_t *)d)[e]) : ((float *)d)[e];
                        const double lim = rowwise_bound(dt, mag[e]);
                        if (dt == F8_DTYPE_FP32 && fabs(got - ref[e]) / lim > worst) worst = fabs(got - ref[e]) / lim;
                        if (!(fabs(got - ref[e]) <= lim)) {
                            ok = 0;
                            fprintf(stderr, "  rowwise gemm %lldx%lldx%lld v %d c %d bias %d: D[%lld, %lld] %.9g, FP64 %.9g\n",
                                    (long long)m, (long long)n, (long long)k, v, cmode, bmode, (long long)(e / n),
                                    (long long)(e % n), got, ref[e]);
                        }
                    }
                    free(ref), free(mag);
                    cases++;
                    bad += !ok;
                    free(qa), free(qb), free(sa), free(sb), free(d), free(c), free(cv);
                }
    printf("  rowwise gemm: %d of %d cases within the bound of FP64 (FP32 D worst %.3g of it)\n", cases - bad, cases,
           worst);
    CHECK(bad == 0, "rowwise gemm: %d of %d cases off the FP64 reference", bad, cases);
}

/* Cast src [R, C] row-wise (orientation 0: out, one scale per row) or
 * column-wise (1: out_t [C, R], one per column). */
static void cast_one(f8_ctx *ctx, const float *src, int64_t R, int64_t C, f8_dtype dt, int t, uint8_t *q, float *si)
{
    f8i_rowwise_cast_args a = {src, F8_DTYPE_FP32, R, C, dt, t ? NULL : q, t ? NULL : si, t ? q : NULL, t ? si : NULL,
                               f8_fp8_max(dt), 1, NULL, NULL, NULL, NULL, F8_DTYPE_FP32, 0, NULL, 0, 0};
    CHECK_OK(ctx, f8i_cpu_cast_rowwise(ctx, &a));
}

/* |GEMM of quantized operands - exact product| within the quantization
 * bound: each operand's element off by at most rel·|x| + sub/s (half a
 * step of its binade or of the subnormal step, scaled back). */
static void check_product(f8_ctx *ctx, const char *what, const float *x, const float *y, int64_t m, int64_t n, int64_t k,
                          const uint8_t *qa, f8_dtype at, const float *sa, const uint8_t *qb, f8_dtype bt, const float *sb)
{
    float *d = (float *)xmalloc((size_t)(m * n) * 4);
    f8i_rowwise_gemm_args g = {m, n, k, qa, at, sa, qb, bt, sb, d, F8_DTYPE_FP32, NULL, NULL, F8_DTYPE_FP32, 1};
    CHECK_OK(ctx, f8i_cpu_gemm_rowwise(ctx, &g));
    const double ra = at == F8_DTYPE_E5M2 ? 0x1p-3 : 0x1p-4, rb = bt == F8_DTYPE_E5M2 ? 0x1p-3 : 0x1p-4;
    const double ua = at == F8_DTYPE_E5M2 ? 0x1p-17 : 0x1p-10, ub = bt == F8_DTYPE_E5M2 ? 0x1p-17 : 0x1p-10;
    int bad = 0;
    double worst = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double ref = 0, bound = 0;
            for (int64_t kk = 0; kk < k; kk++) {
                const double xa = x[i * k + kk], yb = y[j * k + kk];
                const double ea = ra * fabs(xa) + ua * sa[i], eb = rb * fabs(yb) + ub * sb[j];
                ref += xa * yb;
                bound += fabs(xa) * eb + fabs(yb) * ea + ea * eb + 1e-5 * fabs(xa * yb);
            }
            const double err = fabs(d[i * n + j] - ref);
            if (err / bound > worst) worst = err / bound;
            bad += !(err <= bound);
        }
    printf("  %s: [%lld, %lld] over k %lld within the quantization bound (worst %.3f of it)\n", what, (long long)m,
           (long long)n, (long long)k, worst);
    CHECK(bad == 0, "%s: %d elements beyond the quantization bound", what, bad);
    free(d);
}

/* Forward Y = X·Wᵀ (X [T, I] and W [O, I] row-wise) and wgrad dW = dYᵀ·X
 * (dY [T, O] and X both column-wise: [O, T] and [I, T] with scales per
 * channel, the contracted dimension being the T tokens). */
static void test_products(f8_ctx *ctx)
{
    enum { T = 67, I = 48, O = 20 };
    test_rng rng = {32};
    float *x = (float *)xmalloc(T * I * 4), *w = (float *)xmalloc(O * I * 4), *dy = (float *)xmalloc(T * O * 4);
    rowwise_fill(x, T, I, &rng, 0);
    rowwise_fill(w, O, I, &rng, 0);
    rowwise_fill(dy, T, O, &rng, 0);
    uint8_t *qx = (uint8_t *)xmalloc(T * I), *qw = (uint8_t *)xmalloc(O * I), *qdy = (uint8_t *)xmalloc(T * O);
    uint8_t *qxt = (uint8_t *)xmalloc(T * I);
    float sx[T], sw[O], sdy[O], sxt[I];
    cast_one(ctx, x, T, I, F8_DTYPE_E4M3, 0, qx, sx);
    cast_one(ctx, w, O, I, F8_DTYPE_E4M3, 0, qw, sw);
    check_product(ctx, "forward X·Wᵀ", x, w, T, O, I, qx, F8_DTYPE_E4M3, sx, qw, F8_DTYPE_E4M3, sw);
    cast_one(ctx, dy, T, O, F8_DTYPE_E5M2, 1, qdy, sdy);
    cast_one(ctx, x, T, I, F8_DTYPE_E4M3, 1, qxt, sxt);
    /* the exact operands of dW are dYᵀ [O, T] and Xᵀ [I, T] */
    float *dyt = (float *)xmalloc(T * O * 4), *xt = (float *)xmalloc(T * I * 4);
    for (int t = 0; t < T; t++) {
        for (int o = 0; o < O; o++) dyt[o * T + t] = dy[t * O + o];
        for (int i = 0; i < I; i++) xt[i * T + t] = x[t * I + i];
    }
    check_product(ctx, "wgrad dYᵀ·X", dyt, xt, O, I, T, qdy, F8_DTYPE_E5M2, sdy, qxt, F8_DTYPE_E4M3, sxt);
    free(x), free(w), free(dy), free(qx), free(qw), free(qdy), free(qxt), free(dyt), free(xt);
}

int main(void)
{
    char why[256] = "";
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, NULL, why);
    if (!ctx) {
        fprintf(stderr, "test_rowwise: no CPU ctx: %s\n", why);
        return 1;
    }
    test_cast(ctx);
    test_cast_edges(ctx);
    test_refusals(ctx);
    test_gemm(ctx);
    test_products(ctx);
    f8_ctx *pair[2] = {ctx, ctx};
    test_fused_ops(pair);
    f8_ctx_destroy(ctx);
    run_rowwise_fusion_tests(F8_BACKEND_CPU);
    return test_finish("test_rowwise");
}
