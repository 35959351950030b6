/*
 * test_cuda_rowwise.c — row-wise scaling's leaf ops (core/rowwise.h) on the
 * CUDA backend against the CPU oracle (src/cpu/rowwise.c) on the same inputs:
 *  - the row-wise cast: FP32 and BF16 sources, E4M3 and E5M2, pow2 and a
 *    margin, out only, out_t only and both, amax, telemetry, a noop flag
 *    holding 0 or 1, odd, prime and wide shapes with zero, inf, NaN,
 *    denormal and huge rows (rowwise_fixture.h), with and without dbias (in
 *    the workspace), pointers off their alignment.
 *    Codes, both scale vectors, amax and stats must agree BIT FOR BIT, on
 *    both CUDA paths: the 2-D column path f8i_cuda_cast_rowwise takes and
 *    the former stripes kernel (f8i_cuda_cast_rowwise_stripes).
 *  - the row-wise GEMM: every FP8 pair, FP32/BF16 D, the residual (c, or d
 *    itself), FP32/BF16 bias, split accumulation on and off, shapes inside
 *    cuBLASLt's rule and odd ones, k = 0. Each D element against FP64 of the
 *    dequantized operands within the contract's bound (1e-5·Σ|a·b|; 5e-4 on
 *    cuBLASLt's tensor-core sums, as test_cuda_block.c measured; 2^-8 for
 *    BF16 D); every case that takes cuBLASLt's outer-vector matmul runs again
 *    on a plan forced onto the fallback kernel. The summary says which path
 *    each shape took, which answers whether cuBLASLt runs OUTER_VEC_32F
 *    scales on this GPU and toolkit.
 *  - the row-wise cast fused into the CUDA norm and activations: its
 *    high-precision output against the plain kernels', its codes, scales,
 *    amax and telemetry against the CPU cast of that output, its column
 *    amaxes (col_amax) against that output's and the column copy cast from
 *    them against the one that measures them and the CPU's, bit for bit
 *    (rowwise_fused_ops_tests.h); and the modules with the fused casts
 *    against the unfused path on CUDA, bit for bit (rowwise_fusion_tests.h).
 * Without a GPU (or in a CUDA=0 build) the program reports itself skipped.
 */
#include "rowwise_fixture.h"
#include "rowwise_fused_ops_tests.h"
#include "rowwise_fusion_tests.h"

enum { CPU = 0, GPU = 1 };

static void *dev(f8_ctx *ctx, size_t bytes, const void *host)
{
    void *p = NULL;
    if (f8_ctx_alloc(ctx, bytes ? bytes : 1, &p) != F8_OK) die("device alloc", ctx);
    if (host && bytes) CHECK_OK(ctx, f8_ctx_upload(ctx, p, host, bytes));
    return p;
}

static void *host_of(f8_ctx *ctx, const void *p, size_t bytes)
{
    void *h = xmalloc(bytes);
    if (bytes) CHECK_OK(ctx, f8_ctx_download(ctx, h, p, bytes));
    return h;
}

/* ------------------------------------------------------------------------ */
/* Cast                                                                      */
/* ------------------------------------------------------------------------ */

typedef struct cast_case {
    int64_t R, C;
    f8_dtype src, out;
    int pow2, margin, mix, noop; /* mix bit 0: out, bit 1: out_t; noop 0 none, 1 flag 0, 2 flag 1 */
    int dbias;                   /* the bias gradient too */
    int skew;                    /* bit 0: src one element past an aligned address, bit 1: out one byte, bit 2: out_t */
} cast_case;

/* One case on both backends, CUDA on its 2-D column path or (stripes) the
 * former one-launch kernel; 1 when every output agrees bit for bit. */
static int cast_case_run(f8_ctx *ctx[2], const cast_case *cc, int stripes, test_rng *rng)
{
    const int64_t R = cc->R, C = cc->C, n = R * C;
    float *h = (float *)xmalloc((size_t)n * 4);
    uint16_t *hb = (uint16_t *)xmalloc((size_t)n * 2);
    rowwise_fill(h, R, C, rng, 1);
    if (cc->src == F8_DTYPE_BF16) rowwise_to_bf16(h, hb, n);
    const size_t sbytes = (size_t)n * (cc->src == F8_DTYPE_BF16 ? 2 : 4);
    const void *src_host = cc->src == F8_DTYPE_BF16 ? (const void *)hb : (const void *)h;
    /* per backend: out, scale_inv, out_t, scale_inv_t, amax, stats; poisoned first */
    const size_t pbytes = (size_t)(n > 4 * R ? (n > 4 * C ? n : 4 * C) : (4 * R > 4 * C ? 4 * R : 4 * C)) + 1;
    uint8_t *poison = (uint8_t *)xmalloc(pbytes);
    memset(poison, 0xA5, pbytes);
    const float amax0 = 0.25f, flag = cc->noop == 2 ? 1.0f : 0.0f;
    const uint64_t stats0[3] = {3, 1, 2};
    void *out[2], *si[2], *out_t[2], *si_t[2], *amax[2], *stats[2], *noop[2], *src[2], *dbias[2], *ws[2];
    void *src0[2], *out0[2], *out_t0[2]; /* the allocations, skew bytes before src, out, out_t */
    f8i_rowwise_cast_args a_gpu;
    const size_t ws_bytes = f8i_reduce_workspace_bytes(R, C), es = cc->src == F8_DTYPE_BF16 ? 2 : 4;
    const size_t skew_src = cc->skew & 1 ? es : 0, skew_out = cc->skew & 2 ? 1 : 0, skew_t = cc->skew & 4 ? 1 : 0;
    for (int b = 0; b < 2; b++) {
        src0[b] = dev(ctx[b], sbytes + skew_src, NULL);
        out0[b] = dev(ctx[b], (size_t)n + skew_out, NULL);
        out_t0[b] = dev(ctx[b], (size_t)n + skew_t, NULL);
        src[b] = (char *)src0[b] + skew_src, out[b] = (char *)out0[b] + skew_out, out_t[b] = (char *)out_t0[b] + skew_t;
        if (sbytes) CHECK_OK(ctx[b], f8_ctx_upload(ctx[b], src[b], src_host, sbytes));
        CHECK_OK(ctx[b], f8_ctx_upload(ctx[b], out[b], poison, (size_t)n));
        CHECK_OK(ctx[b], f8_ctx_upload(ctx[b], out_t[b], poison, (size_t)n));
        si[b] = dev(ctx[b], (size_t)R * 4, poison);
        si_t[b] = dev(ctx[b], (size_t)C * 4, poison);
        amax[b] = dev(ctx[b], 4, &amax0);
        stats[b] = dev(ctx[b], 24, stats0);
        noop[b] = dev(ctx[b], 4, &flag);
        f8i_rowwise_cast_args a = {src[b], cc->src, R, C, cc->out, cc->mix & 1 ? (uint8_t *)out[b] : NULL,
                                   cc->mix & 1 ? (float *)si[b] : NULL, cc->mix & 2 ? (uint8_t *)out_t[b] : NULL,
                                   cc->mix & 2 ? (float *)si_t[b] : NULL, ldexpf(f8_fp8_max(cc->out), -cc->margin),
                                   cc->pow2, (float *)amax[b], (uint64_t *)stats[b],
                                   cc->noop ? (const float *)noop[b] : NULL, NULL, F8_DTYPE_FP32, 0, NULL, 0, 0};
        float *db0 = (float *)xmalloc((size_t)C * 4);
        for (int64_t c = 0; c < C; c++) db0[c] = 0.5f;
        dbias[b] = dev(ctx[b], (size_t)C * 4, db0);
        free(db0);
        if (cc->dbias) a.dbias = dbias[b]; /* the bias gradient rides the column blocks */
        a.dbias_accumulate = (int)(R & 1);
        ws[b] = dev(ctx[b], ws_bytes, NULL);
        a.workspace = ws[b], a.workspace_bytes = ws_bytes;
        CHECK_OK(ctx[b], f8i_rowwise_cast_check(ctx[b], &a));
        CHECK_OK(ctx[b], b == CPU ? f8i_cpu_cast_rowwise(ctx[b], &a)
                         : stripes ? f8i_cuda_cast_rowwise_stripes(ctx[b], &a) : f8i_cuda_cast_rowwise(ctx[b], &a));
        if (b == GPU) a_gpu = a;
    }
    CHECK_OK(ctx[GPU], f8_ctx_synchronize(ctx[GPU]));
    const void *bufs[6][2] = {{out[0], out[1]}, {out_t[0], out_t[1]}, {si[0], si[1]},
                              {si_t[0], si_t[1]}, {amax[0], amax[1]}, {stats[0], stats[1]}};
    const size_t sizes[6] = {(size_t)n, (size_t)n, (size_t)R * 4, (size_t)C * 4, 4, 24};
    static const char *names[6] = {"out", "out_t", "scale_inv", "scale_inv_t", "amax", "stats"};
    int ok = 1;
    for (int i = 0; i < 6; i++) {
        unsigned char *x = (unsigned char *)host_of(ctx[CPU], bufs[i][CPU], sizes[i]);
        unsigned char *y = (unsigned char *)host_of(ctx[GPU], bufs[i][GPU], sizes[i]);
        size_t at = 0;
        while (at < sizes[i] && x[at] == y[at]) at++;
        if (at < sizes[i]) {
            ok = 0;
            fprintf(stderr, "  rowwise cast%s [%lld, %lld] %s->%s pow2 %d margin %d mix %d noop %d dbias %d skew %d: %s "
                            "differs at byte %zu (cpu %02x cuda %02x)\n",
                    stripes ? " (stripes)" : "", (long long)R, (long long)C, f8_dtype_name(cc->src),
                    f8_dtype_name(cc->out), cc->pow2, cc->margin, cc->mix, cc->noop, cc->dbias, cc->skew, names[i], at,
                    x[at], y[at]);
        }
        free(x), free(y);
    }
    /* dbias: the sum's order is each backend's (FP64 on the CPU, FP32 partials on CUDA) */
    float *dx = (float *)host_of(ctx[CPU], dbias[CPU], (size_t)C * 4), *dy = (float *)host_of(ctx[GPU], dbias[GPU], (size_t)C * 4);
    for (int64_t c = 0; c < C; c++) {
        double mag = 0.5;
        for (int64_t r = 0; r < R; r++) mag += fabs((double)h[r * C + c]);
        /* equal bits first: a noop leaves dbias alone, also on a column whose sum is NaN */
        const int same = dx[c] == dy[c] || (isnan(dx[c]) ? isnan(dy[c]) != 0
                                           : !isinf(dx[c]) && fabs((double)dx[c] - dy[c]) <= 0x1p-22 * (double)R * mag);
        if (!same) {
            ok = 0;
            fprintf(stderr, "  rowwise cast%s [%lld, %lld] noop %d: dbias[%lld] cpu %g cuda %g\n",
                    stripes ? " (stripes)" : "", (long long)R, (long long)C, cc->noop, (long long)c, (double)dx[c],
                    (double)dy[c]);
            break;
        }
    }
    free(dx), free(dy);
    /* With out, out_t and dbias the row pass may take dbias's sums (rowwise_colmax_kernel); without out
     * kernel 1 does: the two must give the same bits (the same order of the sums). */
    if (!stripes && cc->mix == 3 && cc->dbias) {
        f8_ctx *g = ctx[GPU];
        float *db0 = (float *)xmalloc((size_t)C * 4);
        for (int64_t c = 0; c < C; c++) db0[c] = 0.5f;
        void *db = dev(g, (size_t)C * 4, db0), *ot = dev(g, (size_t)n, NULL), *st = dev(g, (size_t)C * 4, NULL);
        f8i_rowwise_cast_args k1 = a_gpu;
        k1.out = NULL, k1.scale_inv = NULL, k1.out_t = (uint8_t *)ot, k1.scale_inv_t = (float *)st;
        k1.amax = NULL, k1.stats = NULL, k1.dbias = db;
        CHECK_OK(g, f8i_cuda_cast_rowwise(g, &k1));
        CHECK_OK(g, f8_ctx_synchronize(g));
        unsigned char *x = (unsigned char *)host_of(g, db, (size_t)C * 4);
        unsigned char *y = (unsigned char *)host_of(g, dbias[GPU], (size_t)C * 4);
        if (memcmp(x, y, (size_t)C * 4) != 0) {
            ok = 0;
            fprintf(stderr, "  rowwise cast [%lld, %lld] %s->%s noop %d skew %d: dbias with out differs from kernel 1's\n",
                    (long long)R, (long long)C, f8_dtype_name(cc->src), f8_dtype_name(cc->out), cc->noop, cc->skew);
        }
        free(x), free(y), free(db0);
        f8_ctx_free(g, db), f8_ctx_free(g, ot), f8_ctx_free(g, st);
    }
    for (int b = 0; b < 2; b++) {
        void *all[10] = {src0[b], out0[b], out_t0[b], si[b], si_t[b], amax[b], stats[b], noop[b], dbias[b], ws[b]};
        for (int i = 0; i < 10; i++) f8_ctx_free(ctx[b], all[i]);
    }
    free(h), free(hb), free(poison);
    return ok;
}

/* Both CUDA paths on every case, each with and without dbias. The 2-D
 * column path's blocks are 256 rows x 128 columns (a warp per 32 rows):
 * 1031 ends in a part-filled warp, 2592 (16 | rows: out_t's 16-byte stores)
 * in a block whose warps 1-7 have no rows; 129 and 300 columns end in
 * part-filled stripes, 129 on scalar loads. With out and out_t and no dbias
 * the row pass takes the column amaxes (rowwise_colmax_kernel): 16 and 300
 * columns put 16 and 4 rows side by side in its block, 1 and 129 (scalar)
 * 16 and 2, 4096 one; a block's share of a round (up to 6 BF16, 3 FP32
 * rows a slot) leaves slots part-filled or empty, and 2592 x 4096 takes
 * its blocks through 2 (BF16) and 4 (FP32) rounds. Then shapes at its
 * edges, each element type once, some with a pointer off its alignment
 * (skew): 16,384 columns (64 KiB of shared memory, past the default 48) and
 * 16,400 (past it: the warp-per-row pass and kernel 1); src one element off
 * (scalar loads), out one byte off (scalar row stores beside kernel 2's
 * vector loads), out_t one byte off; 9000 rows (282 chunks of 32: some
 * blocks of an H100's 264 take two, with dbias); 8192 columns with dbias
 * (maxima and sums, 64 KiB: the opt-in); 6,144 columns with dbias and
 * 12,288 without (48 KiB of them: with the kernel's own static arrays past
 * the default limit, the 1.3B qkv gradient's shape). With out, out_t and dbias
 * the row pass takes dbias's sums where a row fills its block (8192, 4096
 * and 1028 columns, and scalar 768): the case then runs again without out,
 * on kernel 1, and dbias must agree bit for bit. The column amaxes live in
 * the ctx's scratch, which each cast must leave zero for the next (a case
 * after one with larger amaxes would otherwise code from those); 262,208
 * columns are past it (F8I_RWT_SCRATCH_COLS: the zeroing and finishing
 * kernels on scale_inv_t). BF16 rows of 1024 .. 8192 columns (8 | cols,
 * src and out aligned) take rowwise_reg_kernel instead, its 2 pieces a
 * thread on 64 (1024: 8 rows a block), 128 (2048: 4) and 256 threads (3000
 * and 4096: 2, the first with idle pieces), or 3 (6144) and 4 (7000, 8192)
 * pieces on 256: 1031 and 257 rows end in part-filled blocks, 2592 go
 * through 5 rounds; with dbias on whole tiles (2048, 8192, 1024, 6144
 * columns) the tile kernel then sums dbias's chunks. */
static void test_cast(f8_ctx *ctx[2])
{
    static const int64_t rows[] = {1, 7, 33, 250, 1031, 2592}, cols[] = {1, 16, 129, 300, 4096};
    /* rows, cols, skew, dbias on the BF16 -> E5M2 case */
    static const int64_t edge[][4] = {{33, 16384, 0, 0}, {7, 16400, 0, 1},  {250, 300, 1, 0}, {1031, 4096, 2, 1},
                                      {257, 2048, 4, 0}, {300, 768, 7, 1},  {33, 129, 2, 0},  {9000, 1028, 0, 1},
                                      {40, 8192, 0, 1},  {64, 6144, 0, 1},   {16, 12288, 0, 0}, {3, 262208, 0, 1},
                                      {1031, 1024, 0, 0}, {700, 3000, 4, 0}, {130, 7000, 0, 1}};
    enum { NR = sizeof rows / sizeof rows[0], NC = sizeof cols / sizeof cols[0], NE = sizeof edge / sizeof edge[0] };
    for (int stripes = 0; stripes < 2; stripes++) {
        test_rng rng = {40};
        int cases = 0, bad = 0;
        for (int i = 0; i < NR; i++)
            for (int j = 0; j < NC; j++)
                for (int v = 0; v < 8; v++) {
                    const cast_case cc = {rows[i], cols[j], v & 1 ? F8_DTYPE_BF16 : F8_DTYPE_FP32,
                                          v & 2 ? F8_DTYPE_E5M2 : F8_DTYPE_E4M3, (i + v) % 2, (j + v) % 3 == 1,
                                          1 + (i + j + v) % 3, (i * 5 + j + v) % 4 == 3 ? 1 + (v & 1) : 0, v < 4, 0};
                    cases++;
                    bad += !cast_case_run(ctx, &cc, stripes, &rng);
                }
        for (int e = 0; e < NE; e++)
            for (int v = 0; v < 4; v++) {
                const cast_case cc = {edge[e][0], edge[e][1], v & 1 ? F8_DTYPE_BF16 : F8_DTYPE_FP32,
                                      v & 2 ? F8_DTYPE_E5M2 : F8_DTYPE_E4M3, (e + v) % 2, v == 2, 3,
                                      v == 1 ? 1 : e == 2 && v == 3 ? 2 : 0, v == 3 && edge[e][3], (int)edge[e][2]};
                cases++;
                bad += !cast_case_run(ctx, &cc, stripes, &rng);
            }
        /* whole 128-row tiles of 128 (BF16) or 64 (FP32) columns: kernel 2's tile form (rwt_codes_tile_kernel),
         * out_t with out (after the row pass) and without (after kernel 1; it counts the telemetry), dbias */
        static const int64_t whole[][2] = {{128, 64}, {256, 2048}, {1024, 384}, {384, 8192}, {512, 1024}, {256, 6144}};
        for (int w = 0; w < (int)(sizeof whole / sizeof whole[0]); w++)
            for (int v = 0; v < 8; v++) {
                const cast_case cc = {whole[w][0], whole[w][1], v & 1 ? F8_DTYPE_BF16 : F8_DTYPE_FP32,
                                      v & 2 ? F8_DTYPE_E5M2 : F8_DTYPE_E4M3, (w + v) % 2, 1 + v % 3, v & 4 ? 2 : 3,
                                      0, (v & 3) == 3, 0};
                cases++;
                bad += !cast_case_run(ctx, &cc, stripes, &rng);
            }
        printf("  rowwise cast (%s): %d of %d cases bit for bit between CUDA and CPU\n",
               stripes ? "former stripes kernel" : "2-D column path", cases - bad, cases);
        CHECK(bad == 0, "rowwise cast (%s): %d of %d cases differ", stripes ? "stripes" : "2-D", bad, cases);
    }
}

/* ------------------------------------------------------------------------ */
/* GEMM                                                                      */
/* ------------------------------------------------------------------------ */

/* Bounds per element, as multiples of mag = Σ|a·b| (+|c| + |bias|): the
 * fallback kernel sums in FP32 as the CPU does (1e-5). cuBLASLt's FP8
 * tensor cores keep fewer bits inside their sums: on an H100 (cuBLASLt
 * 13.1, OUTER_VEC_32F, k = 512, random codes of every binade) the worst
 * element was 3.8e-4·mag with split accumulation and 1.0e-3·mag with fast
 * accumulation, so 1e-3 and 4e-3. A BF16 D adds 2^-8·mag, and 2^-9·|D| for
 * a second rounding where an FP32 bias is added after the matmul. */
#define TOL_FALLBACK 1e-5
#define TOL_LT_SPLIT 1e-3
#define TOL_LT_FAST 4e-3

typedef struct gemm_tally {
    int cases[3]; /* per path: [1] fallback kernel, [2] cuBLASLt */
    double worst[3];
} gemm_tally;

/* Check D (host copy, D's dtype) against ref within tol·mag (+ the BF16
 * terms); returns 1 when every element is inside. */
static int gemm_check_d(const char *desc, const void *d, f8_dtype dt, int64_t m, int64_t n, const double *ref,
                        const double *mag, double tol, int twice, double *worst)
{
    for (int64_t e = 0; e < m * n; e++) {
        const double got = dt == F8_DTYPE_BF16 ? f8_bf16_to_float(((const uint16_t *)d)[e]) : ((const float *)d)[e];
        double lim = tol * mag[e] + 1e-30;
        if (dt == F8_DTYPE_BF16) lim += 0x1p-8 * mag[e] + (twice ? 0x1p-9 * fabs(ref[e]) : 0.0);
        const double r = fabs(got - ref[e]) / lim;
        if (r > *worst || isnan(r)) *worst = isnan(r) ? INFINITY : r;
        if (!(fabs(got - ref[e]) <= lim)) {
            fprintf(stderr, "  %s: D[%lld, %lld] cuda %.9g FP64 %.9g (bound %.3g)\n", desc, (long long)(e / n),
                    (long long)(e % n), got, ref[e], lim);
            return 0;
        }
    }
    return 1;
}

static void gemm_case(f8_ctx *ctx[2], int64_t m, int64_t n, int64_t k, int v, test_rng *rng, gemm_tally *t)
{
    static const f8_dtype pairs[4][2] = {{F8_DTYPE_E4M3, F8_DTYPE_E4M3}, {F8_DTYPE_E5M2, F8_DTYPE_E4M3},
                                         {F8_DTYPE_E4M3, F8_DTYPE_E5M2}, {F8_DTYPE_E5M2, F8_DTYPE_E5M2}};
    const f8_dtype at = pairs[v % 4][0], bt = pairs[v % 4][1], dt = v & 4 ? F8_DTYPE_BF16 : F8_DTYPE_FP32;
    const int cmode = (v / 8) % 3, bmode = (v / 24) % 3, split = (v / 2) % 2;
    const size_t es = dt == F8_DTYPE_BF16 ? 2 : 4;
    uint8_t *qa = (uint8_t *)xmalloc((size_t)(m * k) + 1), *qb = (uint8_t *)xmalloc((size_t)(n * k) + 1);
    float *sa = (float *)xmalloc((size_t)m * 4), *sb = (float *)xmalloc((size_t)n * 4);
    for (int64_t i = 0; i < m * k; i++) qa[i] = f8_fp8_from_float((float)rng_normal(rng) * 8.0f, at);
    for (int64_t i = 0; i < n * k; i++) qb[i] = f8_fp8_from_float((float)rng_normal(rng) * 8.0f, bt);
    for (int64_t i = 0; i < m; i++) sa[i] = ldexpf(1.0f + (float)rng_uniform(rng), (int)(rng_u64(rng) % 9) - 4);
    for (int64_t i = 0; i < n; i++) sb[i] = ldexpf(1.0f + (float)rng_uniform(rng), (int)(rng_u64(rng) % 9) - 4);
    unsigned char *c = (unsigned char *)xmalloc((size_t)(m * n) * es);
    float *cv = (float *)xmalloc((size_t)(m * n) * 4), *bias = (float *)xmalloc((size_t)n * 4);
    float *biasv = (float *)xmalloc((size_t)n * 4);
    uint16_t *bias16 = (uint16_t *)xmalloc((size_t)n * 2);
    for (int64_t i = 0; i < m * n; i++) {
        cv[i] = (float)rng_normal(rng) * 50.0f;
        if (es == 2) ((uint16_t *)c)[i] = f8_bf16_from_float(cv[i]), cv[i] = f8_bf16_to_float(((uint16_t *)c)[i]);
        else ((float *)c)[i] = cv[i];
    }
    for (int64_t j = 0; j < n; j++) {
        bias[j] = (float)rng_normal(rng) * 5.0f;
        bias16[j] = f8_bf16_from_float(bias[j]);
        biasv[j] = bmode == 2 ? f8_bf16_to_float(bias16[j]) : bias[j];
    }
    char desc[160];
    snprintf(desc, sizeof desc, "rowwise gemm %lldx%lldx%lld %s x %s -> %s c %d bias %d split %d", (long long)m,
             (long long)n, (long long)k, f8_dtype_name(at), f8_dtype_name(bt), f8_dtype_name(dt), cmode, bmode, split);
    /* GPU operands; D starts as C (so c = d is the accumulate) */
    f8_ctx *g = ctx[GPU];
    void *da = dev(g, (size_t)(m * k), qa), *db = dev(g, (size_t)(n * k), qb), *dsa = dev(g, (size_t)m * 4, sa);
    void *dsb = dev(g, (size_t)n * 4, sb), *dc = dev(g, (size_t)(m * n) * es, c), *dd = dev(g, (size_t)(m * n) * es, c);
    void *dbias = dev(g, (size_t)n * 4, bmode == 2 ? (const void *)bias16 : (const void *)bias);
    f8i_rowwise_gemm_args ga = {m, n, k, (const uint8_t *)da, at, (const float *)dsa, (const uint8_t *)db, bt,
                                (const float *)dsb, dd, dt, cmode == 1 ? dc : cmode == 2 ? dd : NULL,
                                bmode ? dbias : NULL, bmode == 2 ? F8_DTYPE_BF16 : F8_DTYPE_FP32, split};
    CHECK_OK(g, f8i_rowwise_gemm_check(g, &ga));
    double *ref = (double *)xmalloc((size_t)(m * n) * sizeof(double));
    double *mag = (double *)xmalloc((size_t)(m * n) * sizeof(double));
    rowwise_ref(qa, at, sa, qb, bt, sb, m, n, k, cmode ? cv : NULL, bmode ? biasv : NULL, ref, mag);
    for (int forced = 0; forced < 2; forced++) {
        f8i_rowwise_plan *plan = NULL;
        CHECK_OK(g, f8i_cuda_rowwise_plan_create(g, &ga, forced, &plan));
        if (forced) CHECK_OK(g, f8_ctx_upload(g, dd, c, (size_t)(m * n) * es));
        int path = 0;
        CHECK_OK(g, f8i_cuda_gemm_rowwise(g, &ga, plan, &path));
        CHECK_OK(g, f8_ctx_synchronize(g));
        void *got = host_of(g, dd, (size_t)(m * n) * es);
        const int p = path == 2 ? 2 : 1;
        const double tol = p == 1 ? TOL_FALLBACK : split ? TOL_LT_SPLIT : TOL_LT_FAST;
        const int ok = gemm_check_d(desc, got, dt, m, n, ref, mag, tol, p == 2 && bmode == 1, &t->worst[p]);
        CHECK(ok && (path == 1 || path == 2), "%s [%s]: off the FP64 reference (path %d)", desc,
              forced ? "forced fallback" : "as chosen", path);
        t->cases[p]++;
        free(got);
        f8i_cuda_rowwise_plan_destroy(plan);
        if (path != 2) break; /* the fallback already ran as chosen */
    }
    void *all[7] = {da, db, dsa, dsb, dc, dd, dbias};
    for (int i = 0; i < 7; i++) f8_ctx_free(g, all[i]);
    free(qa), free(qb), free(sa), free(sb), free(c), free(cv), free(bias), free(biasv), free(bias16), free(ref), free(mag);
}

static void test_gemm(f8_ctx *ctx[2])
{
    static const int64_t shapes[][3] = {{16, 16, 16},  {1, 16, 32},    {17, 33, 129}, {64, 64, 64}, {128, 256, 512},
                                        {250, 48, 1024}, {64, 512, 2048}, {33, 16, 0},   {96, 160, 48}};
    test_rng rng = {41};
    gemm_tally t = {{0, 0, 0}, {0, 0, 0}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int v = 0; v < 72; v += (s % 2) ? 5 : 7) gemm_case(ctx, shapes[s][0], shapes[s][1], shapes[s][2], v, &rng, &t);
    /* the forward's shape on the fast path: E4M3 x E4M3, BF16 D, BF16 bias fused, fast accumulation */
    gemm_case(ctx, 256, 1024, 1024, 4 + 48, &rng, &t);
    printf("  rowwise gemm: %d runs on cuBLASLt OUTER_VEC_32F (worst err/tol %.3f), %d on the fallback kernel (worst "
           "err/tol %.3f)\n", t.cases[2], t.worst[2], t.cases[1], t.worst[1]);
}

/* The GEMM cases again with GEMM tuning on (f8_ctx_set_gemm_tune): what
 * the tuned plans compute is still the CPU's. How many plans tuning chose
 * for is printed, not required: on the H100 with CUDA 13.0 none was tuned
 * (a plan with fewer than two candidates keeps its one untimed; the
 * heuristic seems to offer one for an OUTER_VEC_32F matmul), and the 1.3B
 * row-wise step ran at the same speed with tuning and without. */
static void test_gemm_tuned(f8_ctx *ctx[2])
{
    const uint64_t before = ctx[GPU]->gemm_tuned;
    CHECK_OK(ctx[GPU], f8_ctx_set_gemm_tune(ctx[GPU], 1));
    test_gemm(ctx);
    CHECK_OK(ctx[GPU], f8_ctx_set_gemm_tune(ctx[GPU], 0));
    printf("  rowwise gemm tuning: %llu plans tuned\n", (unsigned long long)(ctx[GPU]->gemm_tuned - before));
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* a killed run still shows how far it got */
    f8_ctx *ctx[2];
    const int rc = test_ctx_pair("test_cuda_rowwise", NULL, ctx);
    if (rc) return rc;
    test_cast(ctx);
    test_gemm(ctx);
    test_gemm_tuned(ctx);
    test_fused_ops(ctx);
    f8_ctx_destroy(ctx[CPU]);
    f8_ctx_destroy(ctx[GPU]);
    run_rowwise_fusion_tests(F8_BACKEND_CUDA);
    return test_finish("test_cuda_rowwise");
}
