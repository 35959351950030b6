/*
 * test_cuda_block.c — block scaling's two ops on the CUDA backend against the
 * CPU backend (src/cpu/block.c, the oracle) on identical inputs:
 *  - CAST in block modes: 1x128 tiles (out, and the column-wise out_t quantized on its
 *    own) and 128x128 blocks (out_t = the codes transposed), each with out
 *    only, out_t only, both and neither; FP32 and BF16 sources, E4M3 and
 *    E5M2, power-of-two scales, a margin, amax, telemetry stats, dbias (FP32
 *    or BF16, accumulated or not), a noop flag holding 0 or 1, empty, odd,
 *    prime and partial-tile shapes. Codes, both scale grids, amax and stats
 *    must agree BIT FOR BIT; dbias within a summation-order tolerance.
 *  - GEMM in block modes: the three block-row mixes of the recipe (1x1, 1x128,
 *    128x1), every FP8 pair, FP32/BF16 D, accumulate, bias none/FP32/BF16,
 *    odd/prime/partial shapes and k = 0, by the scale-free error
 *    ||cuda - cpu|| / ||cpu||. Where the CUDA backend picks cuBLASLt's
 *    block-scaled matmul the case runs twice: as chosen, then forced onto the
 *    own fallback kernel (f8i_cuda_gemm_block_force_fallback), and both are
 *    compared with the CPU, so one run tells whether cuBLASLt's scale layout
 *    (gemm_block.cu's design note) is right. The summary prints which path
 *    each shape took and the worst error per path.
 * Every failure prints the first mismatch with its indices and values.
 * Without a GPU (or in a CUDA=0 build) the program reports itself skipped.
 */
#include "cuda_ops_tests.h"

/* ------------------------------------------------------------------------ */
/* CAST in block modes                                                       */
/* ------------------------------------------------------------------------ */

typedef struct bcast_case {
    int64_t rows, cols;
    f8_dtype src, out;
    int br;        /* 1 or 128 */
    int mix;       /* bit 0: out, bit 1: out_t */
    int pow2, margin;
    int dbias;     /* 0 none, 1 FP32, 2 BF16 */
    int dbias_acc;
    int stats, amax;
    int noop;      /* 0 none, 1 a flag holding 0, 2 a flag holding 1 */
    int kind;      /* gen_value kind, or K_COUNT: whole zero tiles among normal ones */
} bcast_case;

static void bcast_desc(const bcast_case *c, char *s, size_t n)
{
    snprintf(s, n, "block cast [%lld, %lld] %s->%s br %d %s%s pow2 %d margin %d dbias %d acc %d stats %d amax %d noop %d kind %d",
             (long long)c->rows, (long long)c->cols, f8_dtype_name(c->src), f8_dtype_name(c->out), c->br,
             c->mix & 1 ? "out" : "", c->mix & 2 ? "+out_t" : "", c->pow2, c->margin, c->dbias, c->dbias_acc,
             c->stats, c->amax, c->noop, c->kind);
}

/* Compare two code images; on a difference print where and what. */
static void cmp_codes(const char *desc, const char *what, const uint8_t *g, const uint8_t *c, int64_t R, int64_t C,
                      const float *src_vals, int transposed)
{
    const size_t n = (size_t)(R * C);
    for (size_t i = 0; i < n; i++) {
        if (g[i] == c[i]) continue;
        const int64_t r = (int64_t)i / C, col = (int64_t)i % C;
        /* the source element: out[r, col] = src[r, col]; out_t[r, col] = src[col, r] */
        const float v = transposed ? src_vals[col * R + r] : src_vals[r * C + col];
        CHECK(0, "%s: %s[%lld, %lld] cuda 0x%02x cpu 0x%02x (src %a)", desc, what, (long long)r, (long long)col, g[i],
              c[i], v);
        return;
    }
    CHECK(1, "%s: %s", desc, what);
}

static void cmp_grid(const char *desc, const char *what, const float *g, const float *c, int64_t gr, int64_t gc)
{
    const size_t n = (size_t)(gr * gc), k = first_diff_f32(g, c, n, 0);
    CHECK(k == n, "%s: %s[%lld, %lld] cuda %a cpu %a", desc, what, k < n ? (long long)(k / (size_t)gc) : 0LL,
          k < n ? (long long)(k % (size_t)gc) : 0LL, k < n ? g[k] : 0.0f, k < n ? c[k] : 0.0f);
}

static void run_bcast(env *e, const bcast_case *c)
{
    char desc[256];
    bcast_desc(c, desc, sizeof desc);
    const int64_t R = c->rows, C = c->cols;
    const size_t n = (size_t)(R * C), es = f8_dtype_size(c->src);
    const int64_t g_n = f8i_block_grid(R, C, c->br), gt_n = f8i_block_grid(C, R, c->br);
    const int64_t g_cols = (C + 127) / 128, gt_cols = c->br == 1 ? (R + 127) / 128 : (R + 127) / 128;

    /* source values, as the kernels read them back */
    void *hsrc = xmalloc(n * es + 1);
    float *vals = xmalloc(n * sizeof(float) + 4);
    for (int64_t r = 0; r < R; r++)
        for (int64_t col = 0; col < C; col++) {
            const size_t i = (size_t)(r * C + col);
            float v;
            if (c->kind == K_COUNT)
                v = ((r / 128 + col / 128) % 3 == 0) ? 0.0f : gen_value(&e->rng, K_NORMAL, c->out, 1);
            else
                v = gen_value(&e->rng, c->dbias ? K_NORMAL : c->kind, c->out, c->dbias != 0);
            store_elem(hsrc, c->src, i, v);
            vals[i] = load_elem(hsrc, c->src, i);
        }

    /* poison images of every output */
    uint8_t *p_out = xmalloc(n + 1), *p_out_t = xmalloc(n + 1);
    memset(p_out, 0xA5, n + 1);
    memset(p_out_t, 0x5A, n + 1);
    float *p_g = xmalloc((size_t)g_n * 4 + 4), *p_gt = xmalloc((size_t)gt_n * 4 + 4);
    for (int64_t i = 0; i < g_n; i++) p_g[i] = fval(SINV_POISON);
    for (int64_t i = 0; i < gt_n; i++) p_gt[i] = fval(SINV_POISON);
    const f8_dtype ddt = c->dbias == 2 ? F8_DTYPE_BF16 : F8_DTYPE_FP32;
    const size_t dbytes = (size_t)C * f8_dtype_size(ddt);
    void *p_db = xmalloc(dbytes + 4);
    if (c->dbias_acc)
        for (int64_t i = 0; i < C; i++) store_elem(p_db, ddt, (size_t)i, (float)rng_normal(&e->rng));
    else
        memset(p_db, 0xFF, dbytes + 4);
    const float cell0[2] = {0.5f, c->noop == 2 ? 1.0f : 0.0f}; /* amax prior, noop */
    const uint64_t st0[3] = {7, 3, 2};
    const size_t wsb = f8i_reduce_workspace_bytes(R, C);

    twin ts = twin_new(e, n * es, hsrc), to = twin_new(e, n, p_out), tt = twin_new(e, n, p_out_t);
    twin tg = twin_new(e, (size_t)g_n * 4, p_g), tgt = twin_new(e, (size_t)gt_n * 4, p_gt);
    twin tdb = twin_new(e, dbytes, p_db), tcell = twin_new(e, 8, cell0), tst = twin_new(e, 24, st0);
    twin tws = twin_new(e, wsb, NULL);

    uint8_t *out[2], *out_t[2];
    float *grid[2], *grid_t[2], cell[2][2];
    uint64_t stats[2][3];
    void *db[2];
    for (int i = 0; i < 2; i++) {
        f8_ctx *ctx = e->ctx[i];
        float *cl = (float *)tcell.p[i];
        f8i_cast_args a = {0};
        a.src = ts.p[i];
        a.src_dtype = c->src;
        a.rows = R;
        a.cols = C;
        a.mode = c->br == 1 ? F8I_SCALING_BLOCK_1X128 : F8I_SCALING_BLOCK_128X128;
        a.out_dtype = c->out;
        a.scaled_max = ldexpf(c->out == F8_DTYPE_E5M2 ? 57344.0f : 448.0f, -c->margin);
        a.pow2 = c->pow2;
        a.out = c->mix & 1 ? (uint8_t *)to.p[i] : NULL;
        a.scale_inv = c->mix & 1 || c->br == 128 ? (float *)tg.p[i] : NULL;
        a.out_t = c->mix & 2 ? (uint8_t *)tt.p[i] : NULL;
        a.scale_inv_t = c->mix & 2 || c->br == 128 ? (float *)tgt.p[i] : NULL;
        a.amax = c->amax ? cl : NULL;
        a.dbias = c->dbias ? tdb.p[i] : NULL;
        a.dbias_dtype = ddt;
        a.dbias_accumulate = c->dbias_acc;
        a.workspace = tws.p[i];
        a.workspace_bytes = wsb;
        a.stats = c->stats ? (uint64_t *)tst.p[i] : NULL;
        a.noop = c->noop ? cl + 1 : NULL;
        CHECK_OK(ctx, f8i_op_cast(ctx, &a));
        out[i] = xmalloc(n + 1);
        out_t[i] = xmalloc(n + 1);
        grid[i] = xmalloc((size_t)g_n * 4 + 4);
        grid_t[i] = xmalloc((size_t)gt_n * 4 + 4);
        db[i] = xmalloc(dbytes + 4);
        twin_get(e, &to, i, out[i]);
        twin_get(e, &tt, i, out_t[i]);
        twin_get(e, &tg, i, grid[i]);
        twin_get(e, &tgt, i, grid_t[i]);
        twin_get(e, &tdb, i, db[i]);
        twin_get(e, &tcell, i, cell[i]);
        twin_get(e, &tst, i, stats[i]);
    }

    cmp_codes(desc, "out", out[GPU], out[CPU], R, C, vals, 0);
    cmp_codes(desc, "out_t", out_t[GPU], out_t[CPU], C, R, vals, 1);
    cmp_grid(desc, "scale_inv", grid[GPU], grid[CPU], g_n / (g_cols ? g_cols : 1), g_cols);
    cmp_grid(desc, "scale_inv_t", grid_t[GPU], grid_t[CPU], gt_n / (gt_cols ? gt_cols : 1), gt_cols);
    CHECK(fbits(cell[GPU][0]) == fbits(cell[CPU][0]), "%s: amax cuda %a cpu %a", desc, cell[GPU][0], cell[CPU][0]);
    CHECK(memcmp(stats[GPU], stats[CPU], 24) == 0, "%s: stats cuda (%llu %llu %llu) cpu (%llu %llu %llu)", desc,
          (unsigned long long)stats[GPU][0], (unsigned long long)stats[GPU][1], (unsigned long long)stats[GPU][2],
          (unsigned long long)stats[CPU][0], (unsigned long long)stats[CPU][1], (unsigned long long)stats[CPU][2]);
    if (c->noop == 2 && n) /* nothing written at all */
        CHECK(memcmp(out[GPU], p_out, n) == 0 && memcmp(out_t[GPU], p_out_t, n) == 0 &&
                  memcmp(grid[GPU], p_g, (size_t)g_n * 4) == 0 && cell[GPU][0] == 0.5f &&
                  memcmp(stats[GPU], st0, 24) == 0 && memcmp(db[GPU], p_db, dbytes) == 0,
              "%s: the noop flag holds 1, yet the CUDA cast wrote", desc);
    if (c->dbias && c->noop != 2 && R == 0) /* an empty cast writes no dbias: both keep their bytes */
        CHECK(memcmp(db[GPU], p_db, dbytes) == 0 && memcmp(db[CPU], p_db, dbytes) == 0,
              "%s: an empty cast wrote dbias", desc);
    if (c->dbias && c->noop != 2 && R > 0) {
        /* summation order: FP32 sums, bound by the column's sum of |v| */
        int bad = 0;
        for (int64_t col = 0; col < C && !bad; col++) {
            double abs_sum = 0;
            for (int64_t r = 0; r < R; r++) abs_sum += fabs((double)vals[r * C + col]);
            const double g = load_elem(db[GPU], ddt, (size_t)col), w = load_elem(db[CPU], ddt, (size_t)col);
            double tol = 1e-6 * abs_sum * (1.0 + log2((double)R + 1.0)) + 1e-30;
            if (ddt == F8_DTYPE_BF16) tol += fabs(w) * 0x1p-7 + 0x1p-8 * 1e-6 * abs_sum;
            if (!(fabs(g - w) <= tol)) {
                CHECK(0, "%s: dbias[%lld] cuda %.9g cpu %.9g (tol %.3g)", desc, (long long)col, g, w, tol);
                bad = 1;
            }
        }
    }

    twin *all[] = {&ts, &to, &tt, &tg, &tgt, &tdb, &tcell, &tst, &tws};
    for (int i = 0; i < NELEM(all); i++) twin_free(e, all[i]);
    for (int i = 0; i < 2; i++) free(out[i]), free(out_t[i]), free(grid[i]), free(grid_t[i]), free(db[i]);
    free(hsrc), free(vals), free(p_out), free(p_out_t), free(p_g), free(p_gt), free(p_db);
}

static void test_block_casts(env *e)
{
    static const int64_t shapes[][2] = {{1, 1},    {1, 3221},  {2333, 1},  {7, 11},    {17, 250}, {127, 129},
                                        {128, 128}, {129, 127}, {250, 300}, {256, 384}, {1000, 777}, {0, 5},
                                        {5, 0},     {4096, 4096}, {8191, 1537}};
    const int nshapes = NELEM(shapes) - (e->quick ? 2 : 0);
    int cases = 0;
    for (int s = 0; s < nshapes; s++) {
        const int big = shapes[s][0] * shapes[s][1] > (1 << 22);
        for (int j = 0; j < 32; j++) {
            if (big && j % 8 != s % 8) continue; /* the large shapes run 4 configurations */
            bcast_case c;
            c.rows = shapes[s][0];
            c.cols = shapes[s][1];
            c.src = j & 1 ? F8_DTYPE_BF16 : F8_DTYPE_FP32;
            c.out = j & 2 ? F8_DTYPE_E5M2 : F8_DTYPE_E4M3;
            c.br = j & 4 ? 128 : 1;
            c.mix = (j >> 3) & 3; /* 0 neither, 1 out, 2 out_t, 3 both */
            const int v = j * 7 + s * 3;
            c.pow2 = v % 2;
            c.margin = (v / 2) % 3 == 2 ? 1 : 0;
            c.dbias = (v / 3) % 3;
            c.dbias_acc = (v / 5) % 2;
            c.stats = (v / 2) % 4 != 0;
            c.amax = (v / 7) % 4 != 0;
            c.noop = (v / 11) % 5 == 4 ? 2 : (v / 11) % 5 == 3 ? 1 : 0;
            c.kind = (v / 13) % (K_COUNT + 1);
            run_bcast(e, &c);
            cases++;
        }
    }
    printf("block cast: %d configurations compared with the CPU\n", cases);
}

/* ------------------------------------------------------------------------ */
/* GEMM in block modes                                                       */
/* ------------------------------------------------------------------------ */

/* Tolerances on ||cuda - cpu|| / ||cpu||: the own kernel accumulates in FP32
 * like the CPU (order differs: 1e-5); cuBLASLt's block-scaled kernels add
 * products inside each MMA with fewer than FP32's bits before promoting, as
 * split accumulation does (test_cuda_ops.c measured 1.3e-4 at k = 1024):
 * 5e-4; a BF16 D rounds each element (1e-2). */
#define TOL_FALLBACK 1e-5
#define TOL_LT 5e-4
#define TOL_BF16 1e-2

typedef struct bgemm_stats {
    int cases[3];     /* per path: [1] fallback, [2] cuBLASLt */
    double worst[3];  /* worst err/tol per path */
    int lt_fallback_checked;
} bgemm_stats;

/* One run on the GPU (force: the fallback kernel) and its error against the
 * CPU result ref; returns the path taken. */
static int bgemm_gpu(env *e, const f8i_gemm_args *tmpl, twin *td, const void *hd, f8_dtype ddt, size_t nd,
                     const double *ref, int force, double *err, int64_t *worst_i)
{
    f8_ctx *ctx = e->ctx[GPU];
    twin_put(e, td, hd);
    f8i_gemm_args a = *tmpl;
    a.d = td->p[GPU];
    f8i_cuda_gemm_block_force_fallback(ctx, force);
    CHECK_OK(ctx, f8i_op_gemm(ctx, &a));
    f8i_cuda_gemm_block_force_fallback(ctx, 0);
    const int path = f8i_cuda_gemm_block_last_path(ctx);
    void *raw = xmalloc(nd * 4 + 4);
    float *got = xmalloc(nd * 4 + 4);
    twin_get(e, td, GPU, raw);
    double wd = -1;
    for (size_t j = 0; j < nd; j++) {
        got[j] = load_elem(raw, ddt, j);
        const double dj = fabs((double)got[j] - ref[j]);
        if (!(dj <= wd)) wd = dj, *worst_i = (int64_t)j;
    }
    *err = nd ? rel_error(got, ref, nd) : 0;
    free(raw);
    free(got);
    return path;
}

static void run_bgemm(env *e, bgemm_stats *st, int64_t m, int64_t n, int64_t k, f8_dtype adt, f8_dtype bdt, int abr,
                      int bbr, f8_dtype ddt, int acc, int bias)
{
    char desc[200];
    const f8_dtype bdtype = bias == 2 ? F8_DTYPE_BF16 : F8_DTYPE_FP32;
    snprintf(desc, sizeof desc, "block gemm %lldx%lldx%lld %s(br %d) x %s(br %d) -> %s acc %d bias %s", (long long)m,
             (long long)n, (long long)k, f8_dtype_name(adt), abr, f8_dtype_name(bdt), bbr, f8_dtype_name(ddt), acc,
             bias ? f8_dtype_name(bdtype) : "none");
    const int64_t nkb = (k + 127) / 128;
    const size_t na = (size_t)(m * k), nb = (size_t)(n * k), nd = (size_t)(m * n), ds = f8_dtype_size(ddt);
    const size_t nsa = (size_t)(((m + abr - 1) / abr) * nkb), nsb = (size_t)(((n + bbr - 1) / bbr) * nkb);
    uint8_t *ha = xmalloc(na + 1), *hb = xmalloc(nb + 1);
    for (size_t i = 0; i < na; i++) ha[i] = f8_fp8_from_float((float)rng_normal(&e->rng) * 8.0f, adt);
    for (size_t i = 0; i < nb; i++) hb[i] = f8_fp8_from_float((float)rng_normal(&e->rng) * 8.0f, bdt);
    /* scale_inv grids over several binades, so a misplaced scale shows */
    float *hsa = xmalloc(nsa * 4 + 4), *hsb = xmalloc(nsb * 4 + 4);
    for (size_t i = 0; i < nsa; i++) hsa[i] = ldexpf(1.0f + (float)rng_uniform(&e->rng), (int)(rng_u64(&e->rng) % 9) - 6);
    for (size_t i = 0; i < nsb; i++) hsb[i] = ldexpf(1.0f + (float)rng_uniform(&e->rng), (int)(rng_u64(&e->rng) % 9) - 6);
    void *hbias = xmalloc((size_t)n * 4 + 4), *hd = xmalloc(nd * ds + 4);
    for (int64_t j = 0; j < n; j++) store_elem(hbias, bdtype, (size_t)j, (float)rng_normal(&e->rng) * 4.0f);
    if (acc == 1)
        for (size_t i = 0; i < nd; i++) store_elem(hd, ddt, i, (float)rng_normal(&e->rng) * 4.0f);
    else
        memset(hd, 0xFF, nd * ds + 4); /* NaN: must be neither read nor kept */
    twin ta = twin_new(e, na, ha), tb = twin_new(e, nb, hb), tsa = twin_new(e, nsa * 4, hsa), tsb = twin_new(e, nsb * 4, hsb);
    twin tbias = twin_new(e, (size_t)n * f8_dtype_size(bdtype), hbias), td = twin_new(e, nd * ds, hd);
    /* acc 2: the addend c (a distinct C, f8_module_forward_add's residual), D not read */
    void *hc = xmalloc(nd * ds + 4);
    for (size_t i = 0; i < nd; i++) store_elem(hc, ddt, i, (float)rng_normal(&e->rng) * 4.0f);
    twin tc = twin_new(e, nd * ds, hc);

    f8i_gemm_args a = {.m = m, .n = n, .k = k, .a_dtype = adt, .a_mode = abr == 1 ? F8I_SCALING_BLOCK_1X128 : F8I_SCALING_BLOCK_128X128, .b_dtype = bdt,
                             .b_mode = bbr == 1 ? F8I_SCALING_BLOCK_1X128 : F8I_SCALING_BLOCK_128X128, .d_dtype = ddt, .accumulate = acc == 1, .bias_dtype = bdtype};
    /* the oracle */
    a.a = ta.p[CPU], a.b = tb.p[CPU], a.a_scale_inv = tsa.p[CPU], a.b_scale_inv = tsb.p[CPU], a.d = td.p[CPU];
    a.bias = bias ? tbias.p[CPU] : NULL;
    a.c = acc == 2 ? tc.p[CPU] : NULL;
    CHECK_OK(e->ctx[CPU], f8i_op_gemm(e->ctx[CPU], &a));
    void *raw = xmalloc(nd * ds + 4);
    twin_get(e, &td, CPU, raw);
    double *ref = xmalloc(nd * sizeof(double) + 8);
    int finite = 1;
    for (size_t j = 0; j < nd; j++) {
        ref[j] = load_elem(raw, ddt, j);
        finite &= isfinite(ref[j]) != 0;
    }
    CHECK(finite, "%s: the cpu result has a non-finite element", desc);

    a.a = ta.p[GPU], a.b = tb.p[GPU], a.a_scale_inv = tsa.p[GPU], a.b_scale_inv = tsb.p[GPU];
    a.bias = bias ? tbias.p[GPU] : NULL;
    a.c = acc == 2 ? tc.p[GPU] : NULL;
    double err = 0;
    int64_t wi = 0;
    for (int force = 0; force <= 1; force++) {
        const int path = bgemm_gpu(e, &a, &td, hd, ddt, nd, ref, force, &err, &wi);
        if (force && path != 1) {
            CHECK(0, "%s: the forced fallback took path %d", desc, path);
            break;
        }
        const double tol = ddt == F8_DTYPE_BF16 ? TOL_BF16 : path == 2 ? TOL_LT : TOL_FALLBACK;
        if (nd) {
            float got_w = 0;
            void *r2 = xmalloc(nd * ds + 4);
            twin_get(e, &td, GPU, r2);
            got_w = load_elem(r2, ddt, (size_t)wi);
            free(r2);
            CHECK(err <= tol, "%s [%s]: ||cuda-cpu||/||cpu|| = %.3g > %.1g; worst element D[%lld, %lld] cuda %.9g cpu %.9g",
                  desc, path == 2 ? "cublasLt" : "fallback kernel", err, tol, (long long)(wi / n), (long long)(wi % n),
                  got_w, ref[wi]);
        }
        if (path >= 1 && path <= 2) {
            st->cases[path]++;
            if (err / tol > st->worst[path] || isnan(err)) st->worst[path] = isnan(err) ? INFINITY : err / tol;
        }
        if (path != 2) break; /* the fallback was the choice: nothing to force */
        st->lt_fallback_checked++;
    }

    twin *all[] = {&ta, &tb, &tsa, &tsb, &tbias, &td, &tc};
    for (int i = 0; i < NELEM(all); i++) twin_free(e, all[i]);
    free(hc), free(ha), free(hb), free(hsa), free(hsb), free(hbias), free(hd), free(raw), free(ref);
}

static void test_block_gemms(env *e)
{
    static const int64_t shapes[][3] = {{1, 1, 1},     {17, 5, 3},     {7, 130, 129},  {64, 48, 128},
                                        {4, 16, 128},  {33, 16, 256},  {129, 257, 300}, {131, 97, 383},
                                        {128, 128, 128}, {96, 200, 384}, {200, 96, 640}, {0, 5, 16},
                                        {5, 0, 16},    {16, 32, 0},
                                        {256, 512, 1024}, {1000, 768, 512}};
    static const f8_dtype pairs[4][2] = {{F8_DTYPE_E4M3, F8_DTYPE_E4M3},
                                         {F8_DTYPE_E4M3, F8_DTYPE_E5M2},
                                         {F8_DTYPE_E5M2, F8_DTYPE_E4M3},
                                         {F8_DTYPE_E5M2, F8_DTYPE_E5M2}};
    static const int brs[3][2] = {{1, 1}, {1, 128}, {128, 1}};
    bgemm_stats st = {{0, 0, 0}, {0, 0, 0}, 0};
    const int nshapes = NELEM(shapes) - (e->quick ? 1 : 0);
    for (int s = 0; s < nshapes; s++) {
        const int big = shapes[s][0] * shapes[s][1] * shapes[s][2] > (1 << 26);
        for (int j = 0; j < 12; j++) {
            if (big && j % 3 != 0) continue;
            const int v = (j + s) % 12;
            run_bgemm(e, &st, shapes[s][0], shapes[s][1], shapes[s][2], pairs[j % 4][0], pairs[j % 4][1],
                      brs[j / 4][0], brs[j / 4][1], v & 1 ? F8_DTYPE_BF16 : F8_DTYPE_FP32, (v >> 1) & 1, (v >> 2) % 3);
        }
        /* the same shape's first configuration once more: a cached plan */
        run_bgemm(e, &st, shapes[s][0], shapes[s][1], shapes[s][2], F8_DTYPE_E4M3, F8_DTYPE_E4M3, 1, 128,
                  F8_DTYPE_BF16, 0, 0);
    }
    /* the addend c: on cuBLASLt's path (whole K-blocks, aligned) and the fallback's */
    run_bgemm(e, &st, 64, 48, 128, F8_DTYPE_E4M3, F8_DTYPE_E4M3, 1, 128, F8_DTYPE_BF16, 2, 2);
    run_bgemm(e, &st, 256, 512, 1024, F8_DTYPE_E4M3, F8_DTYPE_E4M3, 1, 128, F8_DTYPE_BF16, 2, 1);
    run_bgemm(e, &st, 128, 128, 128, F8_DTYPE_E4M3, F8_DTYPE_E5M2, 1, 1, F8_DTYPE_FP32, 2, 0);
    run_bgemm(e, &st, 129, 257, 300, F8_DTYPE_E4M3, F8_DTYPE_E4M3, 128, 1, F8_DTYPE_FP32, 2, 2);
    run_bgemm(e, &st, 16, 32, 0, F8_DTYPE_E4M3, F8_DTYPE_E4M3, 1, 128, F8_DTYPE_BF16, 2, 1);
    printf("block gemm: %d cases on cuBLASLt (worst err/tol %.3f; each also forced onto the fallback: %d), "
           "%d on the fallback kernel (worst err/tol %.3f)\n",
           st.cases[2], st.worst[2], st.lt_fallback_checked, st.cases[1], st.worst[1]);
}

/* The block GEMM cases again with GEMM tuning on (f8_ctx_set_gemm_tune):
 * the algorithm timing chose computes what the CPU does, and tuning ran. */
static void test_block_gemms_tuned(env *e) { env_run_tuned(e, test_block_gemms, "block gemm"); }

int main(void)
{
    static void (*const tests[])(env *) = {test_block_casts, test_block_gemms, test_block_gemms_tuned};
    (void)first_diff_bf16; /* cuda_ops_tests.h's; dbias is compared with a tolerance here */
    return env_run("test_cuda_block", tests, NELEM(tests));
}
