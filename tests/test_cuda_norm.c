/*
 * test_cuda_norm.c — the CUDA backend's norm ops against the CPU backend (the
 * oracle) on identical inputs, called through each ctx's backend table
 * (ctx->be) exactly as the fused modules call them: norm_fwd
 * (LayerNorm/RMSNorm, zero-centred gamma on/off, eps 1e-5 and 1e-1, x
 * FP32/BF16, y FP32/BF16/E4M3/E5M2; the shapes each CUDA kernel takes, every
 * GPU run repeated for the same bits) and norm_bwd (dx, dgamma, dbeta,
 * accumulate on/off, param FP32/BF16). Every FP32 result of both backends is
 * also checked against a float64 host reference built from the formulas in
 * backend.h, so a misreading both backends share still fails. Then the CUDA
 * norm kernels' fast paths against their general kernels, bit for bit.
 * The tolerances, and why, are in cuda_norm_act_tests.h; the activations in
 * test_cuda_act.c.
 * Without a GPU (or in a CUDA=0 build) the program reports itself skipped.
 */
#include "cuda_norm_act_tests.h"

/* ------------------------------------------------------------------------ */
/* Norm forward                                                              */
/* ------------------------------------------------------------------------ */

typedef struct norm_io {
    void *x, *gamma, *beta; /* host images */
    float *xv, *gv, *bv;    /* what the kernels read (g already 1 + gamma when zero-centred) */
} norm_io;

/* Rows of x: mean U[-1, 1] plus sd U[0.5, 2] times N(0, 1) (bounded
 * cancellation in x - mu); gamma around 1 (around 0 when zero-centred). */
static norm_io norm_inputs(env *e, int64_t rows, int64_t cols, f8_dtype xdt, f8_dtype pdt, int zc)
{
    norm_io io;
    size_t n = (size_t)(rows * cols);
    io.x = xmalloc(n * 4), io.xv = xmalloc(n * 4 + 4);
    io.gamma = xmalloc((size_t)cols * 4 + 4), io.beta = xmalloc((size_t)cols * 4 + 4);
    io.gv = xmalloc((size_t)cols * 4 + 4), io.bv = xmalloc((size_t)cols * 4 + 4);
    for (int64_t r = 0; r < rows; r++) {
        double mean = 2 * rng_uniform(&e->rng) - 1, sd = 0.5 + 1.5 * rng_uniform(&e->rng);
        for (int64_t c = 0; c < cols; c++)
            io.xv[r * cols + c] = store_elem(io.x, xdt, (size_t)(r * cols + c), (float)(mean + sd * rnd_normal(&e->rng)));
    }
    for (int64_t c = 0; c < cols; c++) {
        float g = store_elem(io.gamma, pdt, (size_t)c, (float)((zc ? 0.0 : 1.0) + 0.3 * rnd_normal(&e->rng)));
        io.gv[c] = zc ? 1.0f + g : g;
        io.bv[c] = store_elem(io.beta, pdt, (size_t)c, (float)(0.3 * rnd_normal(&e->rng)));
    }
    return io;
}

static void norm_io_free(norm_io *io)
{
    free(io->x), free(io->xv), free(io->gamma), free(io->beta), free(io->gv), free(io->bv);
}

/* float64 statistics of one row, from the values the kernels read. */
static void ref_stats(const float *xv, int64_t cols, int rms, float eps, double *mu, double *rs)
{
    double s = 0, q = 0;
    for (int64_t c = 0; c < cols; c++) s += xv[c];
    double m = rms ? 0.0 : s / (double)cols;
    for (int64_t c = 0; c < cols; c++) q += (xv[c] - m) * (xv[c] - m);
    *mu = m;
    *rs = 1.0 / sqrt(q / (double)cols + (double)eps);
}

typedef struct norm_case {
    shape s;
    int rms, zc;
    float eps;
    f8_dtype x, param, y;
    int stats; /* pass mu/rsigma */
} norm_case;
static void run_norm_fwd(env *e, const norm_case *nc)
{
    const int64_t R = nc->s.rows, C = nc->s.cols;
    const size_t n = (size_t)(R * C), ysz = f8_dtype_size(nc->y), psz = f8_dtype_size(nc->param);
    const int fp8 = is_fp8(nc->y);
    char desc[200];
    snprintf(desc, sizeof desc, "norm_fwd [%lld,%lld] %s zc %d eps %g x %s param %s y %s stats %d", (long long)R,
             (long long)C, nc->rms ? "rms" : "ln", nc->zc, nc->eps, f8_dtype_name(nc->x), f8_dtype_name(nc->param),
             f8_dtype_name(nc->y), nc->stats);
    norm_io io = norm_inputs(e, R, C, nc->x, nc->param, nc->zc);
    const float scale = fp8 ? (nc->y == F8_DTYPE_E4M3 ? 37.5f : 1200.0f) : 1.0f; /* some saturate */
    float a0 = AMAX0;
    dual x = dual_new(e, n * f8_dtype_size(nc->x), io.x), gamma = dual_new(e, (size_t)C * psz, io.gamma);
    dual beta = dual_new(e, (size_t)C * psz, io.beta), y = dual_new(e, n * ysz, NULL);
    dual mu = dual_new(e, (size_t)R * 4, NULL), rs = dual_new(e, (size_t)R * 4, NULL);
    dual sc = dual_new(e, 4, &scale), amax = dual_new(e, 4, &a0), sinv = dual_new(e, 4, NULL);
    /* telemetry on odd row counts (even ones keep the fit kernel, which does not count) */
    const int counting = fp8 && (R & 1);
    const uint64_t zero3[3] = {0, 0, 0};
    dual st = dual_new(e, sizeof zero3, zero3);
    void *y0 = xmalloc(n * ysz + 1);
    float *mu0 = xmalloc((size_t)R * 4 + 4), *rs0 = xmalloc((size_t)R * 4 + 4);
    for (int i = 0; i < 3; i++) { /* i = 2: the GPU again, for the determinism check below */
        const int k = i > 1 ? GPU : i;
        f8_ctx *ctx = e->ctx[k];
        f8i_norm_fwd_args a = {.x = x.p[k], .x_dtype = nc->x, .rows = R, .cols = C, .gamma = gamma.p[k],
                               .beta = beta.p[k], .param_dtype = nc->param, .rms = nc->rms, .zero_centered = nc->zc,
                               .eps = nc->eps, .y = y.p[k], .y_dtype = nc->y,
                               .scale = fp8 ? sc.p[k] : NULL, .amax = fp8 ? amax.p[k] : NULL,
                               .scale_inv = fp8 ? sinv.p[k] : NULL,
                               .mu = nc->stats && !nc->rms ? mu.p[k] : NULL, .rsigma = nc->stats ? rs.p[k] : NULL,
                               .stats = counting && i < 2 ? st.p[k] : NULL}; /* telemetry: once per backend */
        CHECK_OK(ctx, f8i_op_norm_fwd(ctx, &a));
        if (i == 1) { /* the first GPU run's bits, before the re-run overwrites them */
            dual_get(e, &y, GPU, y0);
            dual_get(e, &mu, GPU, mu0);
            dual_get(e, &rs, GPU, rs0);
        }
    }
    void *hy[2] = {xmalloc(n * ysz + 1), xmalloc(n * ysz + 1)};
    float *hmu[2] = {xmalloc((size_t)R * 4 + 4), xmalloc((size_t)R * 4 + 4)};
    float *hrs[2] = {xmalloc((size_t)R * 4 + 4), xmalloc((size_t)R * 4 + 4)};
    float ham[2], hsi[2];
    for (int i = 0; i < 2; i++) {
        dual_get(e, &y, i, hy[i]);
        dual_get(e, &mu, i, hmu[i]);
        dual_get(e, &rs, i, hrs[i]);
        dual_get(e, &amax, i, &ham[i]);
        dual_get(e, &sinv, i, &hsi[i]);
    }

    /* a re-run gives the same bits (amax: the max of the same values) */
    CHECK(memcmp(y0, hy[GPU], n * ysz) == 0, "%s: y differs between two GPU runs", desc);
    CHECK(memcmp(mu0, hmu[GPU], (size_t)R * 4) == 0, "%s: mu differs between two GPU runs", desc);
    CHECK(memcmp(rs0, hrs[GPU], (size_t)R * 4) == 0, "%s: rsigma differs between two GPU runs", desc);
    free(y0), free(mu0), free(rs0);
    /* float64 reference of v, mu, rsigma */
    double *rv = xmalloc(n * 8 + 8), *rmu = xmalloc((size_t)R * 8 + 8), *rrs = xmalloc((size_t)R * 8 + 8);
    double ramax = AMAX0;
    for (int64_t r = 0; r < R; r++) {
        ref_stats(io.xv + r * C, C, nc->rms, nc->eps, &rmu[r], &rrs[r]);
        for (int64_t c = 0; c < C; c++) {
            double v = (io.xv[r * C + c] - rmu[r]) * rrs[r] * io.gv[c] + (nc->rms ? 0.0 : io.bv[c]);
            rv[r * C + c] = v;
            ramax = fmax(ramax, fabs(v));
        }
    }
    if (counting) {
        uint64_t hs[2][3];
        for (int i = 0; i < 2; i++) dual_get(e, &st, i, hs[i]);
        cmp_stats(desc, hs[CPU], hs[GPU], n, 0);
    }
    if (fp8) {
        cmp_codes(e, desc, "y codes", hy[GPU], hy[CPU], nc->y, n, FLIP_FP8, TOL_F32 * rms_of(rv, n) * scale);
        cmp_amax(e, desc, ham[GPU], ham[CPU], 0, TOL_AMAX);
        double aerr = fabs(ham[CPU] - ramax) / ramax;
        CHECK(aerr <= TOL_AMAX * 10, "%s amax: cpu %.9g vs float64 %.9g", desc, ham[CPU], ramax);
        for (int i = 0; i < 2; i++)
            CHECK(hsi[i] == 1.0f / scale, "%s %s scale_inv %.9g, want 1/%g", desc, i ? "cuda" : "cpu", hsi[i], scale);
    } else {
        cmp_out(e, desc, "y", hy[GPU], hy[CPU], nc->y, n, rv, 0);
    }
    if (nc->stats) {
        if (!nc->rms) cmp_out(e, desc, "mu", hmu[GPU], hmu[CPU], F8_DTYPE_FP32, (size_t)R, rmu, 0);
        cmp_out(e, desc, "rsigma", hrs[GPU], hrs[CPU], F8_DTYPE_FP32, (size_t)R, rrs, 0);
    }
    if (R == 0 || C == 0) { /* nothing but scale_inv */
        for (int i = 0; i < 2; i++)
            CHECK(!fp8 || ham[i] == AMAX0, "%s: %s wrote amax %g on an empty input", desc, i ? "cuda" : "cpu", ham[i]);
    }
    dual *all[] = {&x, &gamma, &beta, &y, &mu, &rs, &sc, &amax, &sinv, &st};
    for (int k = 0; k < NELEM(all); k++) dual_free(e, all[k]);
    for (int i = 0; i < 2; i++) free(hy[i]), free(hmu[i]), free(hrs[i]);
    free(rv), free(rmu), free(rrs);
    norm_io_free(&io);
}
/* 8200 and 17001 columns take the CUDA backend's "wide" backward (> 8192)
 * and forward (> 16384) kernels. */
static const shape NORM_SHAPES[] = {{7, 11}, {1, 3221}, {2333, 1}, {1481, 677}, {33, 8200}, {5, 17001}, {0, 64},
                                    {2048, 4096}};
static void test_norm_fwd(env *e)
{
    static const f8_dtype ys[4] = {F8_DTYPE_FP32, F8_DTYPE_BF16, F8_DTYPE_E4M3, F8_DTYPE_E5M2};
    for (int s = 0; s < NELEM(NORM_SHAPES); s++) {
        if (e->quick && LARGE(NORM_SHAPES[s])) continue;
        /* all 128 combinations on the small shapes; the large one takes 8
         * spread over them (every y dtype, both norms) */
        for (int v = 0; v < 128; v++) {
            if (LARGE(NORM_SHAPES[s]) && v % 16 != s) continue;
            norm_case nc = {.s = NORM_SHAPES[s], .rms = v & 1, .zc = (v >> 1) & 1, .eps = (v >> 2) & 1 ? 1e-1f : 1e-5f,
                            .x = (v >> 3) & 1 ? F8_DTYPE_BF16 : F8_DTYPE_FP32,
                            .param = (v >> 4) & 1 ? F8_DTYPE_BF16 : F8_DTYPE_FP32, .y = ys[(v >> 5) & 3],
                            .stats = v % 7 != 3};
            run_norm_fwd(e, &nc);
        }
    }
}

/* The CUDA kernels' layouts, through the default path against the oracle
 * (and each re-run for the same bits), on 16-byte rows: many narrow rows, so
 * each row group wraps its ring several times; 64-thread groups (LayerNorm's
 * staged kernel takes them in 512-thread blocks); 4-warp groups; a row whose
 * last warp holds a partial span (2056 BF16 columns: 3 pieces a lane); the
 * fit kernel's layouts: 3 pieces a lane in two warps (1536), 4 in two
 * (2048), 4 in four (4096), 3 in eight (6144), 4 in eight (8192); and
 * one-warp rows it leaves to the row-group kernels (768, 1024). The cases:
 * the fit kernel's dtypes for both norms (BF16 x, E4M3 or BF16 y), and the
 * row-group kernels' others (FP32 x or y, E5M2). Below the F8_TEST_QUICK
 * cut, so compute-sanitizer sees them. */
static void test_norm_fwd_layouts(env *e)
{
    static const shape shapes[] = {{16000, 256}, {4000, 1024}, {900, 4096}, {129, 2056}, {1001, 768},
                                   {500, 1536},  {1000, 2048}, {130, 6144}, {67, 8192}};
    static const struct {
        int rms, zc;
        float eps;
        f8_dtype x, param, y;
    } cases[] = {
        {0, 0, 1e-5f, F8_DTYPE_BF16, F8_DTYPE_BF16, F8_DTYPE_E4M3},
        {1, 0, 1e-5f, F8_DTYPE_BF16, F8_DTYPE_BF16, F8_DTYPE_E4M3},
        {0, 1, 1e-1f, F8_DTYPE_BF16, F8_DTYPE_FP32, F8_DTYPE_BF16},
        {1, 1, 1e-5f, F8_DTYPE_FP32, F8_DTYPE_FP32, F8_DTYPE_FP32},
        {0, 0, 1e-5f, F8_DTYPE_FP32, F8_DTYPE_BF16, F8_DTYPE_E5M2},
    };
    for (int s = 0; s < NELEM(shapes); s++)
        for (int k = 0; k < NELEM(cases); k++) {
            norm_case nc = {.s = shapes[s], .rms = cases[k].rms, .zc = cases[k].zc, .eps = cases[k].eps,
                            .x = cases[k].x, .param = cases[k].param, .y = cases[k].y, .stats = 1};
            run_norm_fwd(e, &nc);
        }
}

/* ------------------------------------------------------------------------ */
/* Norm backward                                                             */
/* ------------------------------------------------------------------------ */

typedef struct normb_case {
    shape s;
    int rms, zc;
    f8_dtype x, dy, dx, param; /* dx FP32/BF16, or 0xFF for none */
    int accumulate, with_dbeta;
} normb_case;
static void run_norm_bwd(env *e, const normb_case *nc)
{
    const int64_t R = nc->s.rows, C = nc->s.cols;
    const size_t n = (size_t)(R * C), psz = f8_dtype_size(nc->param);
    const int want_dx = nc->dx != NO_DX;
    const f8_dtype dxt = want_dx ? nc->dx : F8_DTYPE_FP32;
    char desc[200];
    snprintf(desc, sizeof desc, "norm_bwd [%lld,%lld] %s zc %d x %s dy %s dx %s param %s acc %d dbeta %d",
             (long long)R, (long long)C, nc->rms ? "rms" : "ln", nc->zc, f8_dtype_name(nc->x), f8_dtype_name(nc->dy),
             want_dx ? f8_dtype_name(nc->dx) : "none", f8_dtype_name(nc->param), nc->accumulate, nc->with_dbeta);
    norm_io io = norm_inputs(e, R, C, nc->x, nc->param, nc->zc);
    const float eps = 1e-5f;
    /* mu and rsigma as the forward would save them: computed here, identical on both */
    float *hmu = xmalloc((size_t)R * 4 + 4), *hrs = xmalloc((size_t)R * 4 + 4);
    for (int64_t r = 0; r < R; r++) {
        double m, s;
        ref_stats(io.xv + r * C, C, nc->rms, eps, &m, &s);
        hmu[r] = (float)m, hrs[r] = (float)s;
    }
    void *hdy = xmalloc(n * 4 + 4);
    float *dyv = xmalloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++) dyv[i] = store_elem(hdy, nc->dy, i, (float)rnd_normal(&e->rng));
    void *g0 = xmalloc((size_t)C * psz + 4), *b0 = xmalloc((size_t)C * psz + 4);
    float *g0v = xmalloc((size_t)C * 4 + 4), *b0v = xmalloc((size_t)C * 4 + 4);
    for (int64_t c = 0; c < C; c++) {
        g0v[c] = nc->accumulate ? store_elem(g0, nc->param, (size_t)c, (float)rnd_normal(&e->rng)) : 0.0f;
        b0v[c] = nc->accumulate ? store_elem(b0, nc->param, (size_t)c, (float)rnd_normal(&e->rng)) : 0.0f;
    }
    dual x = dual_new(e, n * f8_dtype_size(nc->x), io.x), dy = dual_new(e, n * f8_dtype_size(nc->dy), hdy);
    dual gamma = dual_new(e, (size_t)C * psz, io.gamma), mu = dual_new(e, (size_t)R * 4, hmu);
    dual rs = dual_new(e, (size_t)R * 4, hrs), dx = dual_new(e, n * f8_dtype_size(dxt), NULL);
    dual dg = dual_new(e, (size_t)C * psz, nc->accumulate ? g0 : NULL);
    dual db = dual_new(e, (size_t)C * psz, nc->accumulate ? b0 : NULL);
    for (int i = 0; i < 2; i++) {
        f8_ctx *ctx = e->ctx[i];
        f8i_norm_bwd_args a = {.dy = dy.p[i], .dy_dtype = nc->dy, .x = x.p[i], .x_dtype = nc->x, .rows = R, .cols = C,
                               .mu = nc->rms ? NULL : mu.p[i], .rsigma = rs.p[i], .gamma = gamma.p[i],
                               .param_dtype = nc->param, .rms = nc->rms, .zero_centered = nc->zc,
                               .dx = want_dx ? dx.p[i] : NULL, .dx_dtype = dxt, .dgamma = dg.p[i],
                               .dbeta = nc->with_dbeta && !nc->rms ? db.p[i] : NULL, .accumulate = nc->accumulate,
                               .workspace = ctx->scratch, .workspace_bytes = ctx->scratch_bytes};
        CHECK_OK(ctx, f8i_op_norm_bwd(ctx, &a));
    }
    /* float64 reference from the float mu/rsigma both backends read */
    double *rdx = xmalloc(n * 8 + 8), *rdg = xmalloc((size_t)C * 8 + 8), *rdb = xmalloc((size_t)C * 8 + 8);
    double *sg = xmalloc((size_t)C * 8 + 8), *sb = xmalloc((size_t)C * 8 + 8);
    for (int64_t c = 0; c < C; c++) rdg[c] = g0v[c], rdb[c] = b0v[c], sg[c] = fabs(g0v[c]), sb[c] = fabs(b0v[c]);
    for (int64_t r = 0; r < R; r++) {
        const float *xr = io.xv + r * C, *dr = dyv + r * C;
        double m1 = 0, m2 = 0, m = nc->rms ? 0.0 : hmu[r], s = hrs[r];
        for (int64_t c = 0; c < C; c++) {
            double xh = (xr[c] - m) * s, gd = (double)io.gv[c] * dr[c];
            m1 += gd, m2 += gd * xh;
            rdg[c] += dr[c] * xh;
            rdb[c] += dr[c];
            sg[c] += fabs(dr[c] * xh);
            sb[c] += fabs(dr[c]);
        }
        m1 /= (double)C, m2 /= (double)C;
        for (int64_t c = 0; c < C; c++) {
            double xh = (xr[c] - m) * s, gd = (double)io.gv[c] * dr[c];
            rdx[r * C + c] = s * (gd - (nc->rms ? 0.0 : m1) - xh * m2);
        }
    }
    const size_t dxb = n * f8_dtype_size(dxt), cb = (size_t)C * psz;
    void *hdx[2] = {xmalloc(dxb + 4), xmalloc(dxb + 4)}, *hdg[2] = {xmalloc(cb + 4), xmalloc(cb + 4)};
    void *hdb[2] = {xmalloc(cb + 4), xmalloc(cb + 4)};
    for (int i = 0; i < 2; i++) dual_get(e, &dx, i, hdx[i]), dual_get(e, &dg, i, hdg[i]), dual_get(e, &db, i, hdb[i]);
    if (want_dx) cmp_out(e, desc, "dx", hdx[GPU], hdx[CPU], nc->dx, n, rdx, 0);
    double tg = 0, tb = 0; /* rms of the terms dy·xhat and dy */
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            double xh = (io.xv[r * C + c] - (nc->rms ? 0.0 : hmu[r])) * hrs[r], d = dyv[r * C + c];
            tg += d * xh * d * xh, tb += d * d;
        }
    tg = n ? sqrt(tg / (double)n) : 0.0, tb = n ? sqrt(tb / (double)n) : 0.0;
    if (R > 0 || nc->accumulate) { /* rows 0 without accumulation: "overwritten" with zero sums, or left */
        cmp_sums(e, desc, "dgamma", hdg[GPU], hdg[CPU], nc->param, (size_t)C, rdg, sg, R, tg);
        if (nc->with_dbeta && !nc->rms) cmp_sums(e, desc, "dbeta", hdb[GPU], hdb[CPU], nc->param, (size_t)C, rdb, sb, R, tb);
    }
    dual *all[] = {&x, &dy, &gamma, &mu, &rs, &dx, &dg, &db};
    for (int k = 0; k < NELEM(all); k++) dual_free(e, all[k]);
    for (int i = 0; i < 2; i++) free(hdx[i]), free(hdg[i]), free(hdb[i]);
    free(hmu), free(hrs), free(hdy), free(dyv), free(g0), free(b0), free(g0v), free(b0v), free(rdx), free(rdg), free(rdb), free(sg), free(sb);
    norm_io_free(&io);
}

static void test_norm_bwd(env *e)
{
    static const f8_dtype dxs[3] = {F8_DTYPE_FP32, F8_DTYPE_BF16, NO_DX};
    for (int s = 0; s < NELEM(NORM_SHAPES); s++) {
        if (e->quick && LARGE(NORM_SHAPES[s])) continue;
        for (int v = 0; v < 96; v++) {
            if (LARGE(NORM_SHAPES[s]) && v % 12 != s) continue;
            normb_case nc = {.s = NORM_SHAPES[s], .rms = v & 1, .zc = (v >> 1) & 1,
                             .x = (v >> 2) & 1 ? F8_DTYPE_BF16 : F8_DTYPE_FP32,
                             .param = (v >> 3) & 1 ? F8_DTYPE_BF16 : F8_DTYPE_FP32, .accumulate = (v >> 4) & 1,
                             .dx = dxs[(v >> 5) % 3], .with_dbeta = v % 5 != 2};
            nc.dy = v % 3 == 1 ? F8_DTYPE_BF16 : F8_DTYPE_FP32;
            run_norm_bwd(e, &nc);
        }
    }
}
/* ------------------------------------------------------------------------ */
/* CUDA fast paths against the general kernels, bit for bit                  */
/* ------------------------------------------------------------------------ */

/* norm_bwd_fast_kernel against norm_bwd_kernel: the same dx, dgamma and
 * dbeta bytes. The general run reads x and dy, and writes dx, one element
 * off 16-byte alignment. */
static void fast_norm_bwd(env *e, shape sh, int rms, f8_dtype dyt, f8_dtype dxt)
{
    const int64_t R = sh.rows, C = sh.cols;
    const size_t n = (size_t)(R * C), ys = f8_dtype_size(dyt), xs = f8_dtype_size(dxt);
    char desc[160];
    snprintf(desc, sizeof desc, "fast norm_bwd [%lld,%lld] %s dy %s dx %s", (long long)R, (long long)C,
             rms ? "rms" : "ln", f8_dtype_name(dyt), f8_dtype_name(dxt));
    norm_io io = norm_inputs(e, R, C, F8_DTYPE_BF16, F8_DTYPE_BF16, 0);
    float *hmu = xmalloc((size_t)R * 4 + 4), *hrs = xmalloc((size_t)R * 4 + 4);
    for (int64_t r = 0; r < R; r++) {
        double m, sd;
        ref_stats(io.xv + r * C, C, rms, 1e-5f, &m, &sd);
        hmu[r] = (float)m, hrs[r] = (float)sd;
    }
    void *hdy = xmalloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++) store_elem(hdy, dyt, i, (float)rnd_normal(&e->rng));
    void *out[2][3];
    for (int k = 0; k < 2; k++) { /* k = 0: aligned (fast), 1: one element off (general) */
        gbuf x = gbuf_new(e, n * 2, k * 2, io.x), dy = gbuf_new(e, n * ys, k * ys, hdy);
        gbuf dx = gbuf_new(e, n * xs, k * xs, NULL), g = gbuf_new(e, (size_t)C * 2, 0, io.gamma);
        gbuf mu = gbuf_new(e, (size_t)R * 4, 0, hmu), rs = gbuf_new(e, (size_t)R * 4, 0, hrs);
        gbuf dg = gbuf_new(e, (size_t)C * 2, 0, NULL), db = gbuf_new(e, (size_t)C * 2, 0, NULL);
        f8_ctx *ctx = e->ctx[GPU];
        f8i_norm_bwd_args a = {.dy = dy.p, .dy_dtype = dyt, .x = x.p, .x_dtype = F8_DTYPE_BF16, .rows = R, .cols = C,
                               .mu = rms ? NULL : mu.p, .rsigma = rs.p, .gamma = g.p,
                               .param_dtype = F8_DTYPE_BF16, .rms = rms, .dx = dx.p, .dx_dtype = dxt,
                               .dgamma = dg.p, .dbeta = rms ? NULL : db.p,
                               .workspace = ctx->scratch, .workspace_bytes = ctx->scratch_bytes};
        CHECK_OK(ctx, f8i_op_norm_bwd(ctx, &a));
        out[k][0] = gbuf_get(e, &dx, n * xs), out[k][1] = gbuf_get(e, &dg, (size_t)C * 2);
        out[k][2] = gbuf_get(e, &db, (size_t)C * 2);
        gbuf all[] = {x, dy, dx, g, mu, rs, dg, db};
        for (int j = 0; j < NELEM(all); j++) f8_ctx_free(ctx, all[j].base);
    }
    same_bytes(desc, "dx", out[0][0], out[1][0], n * xs);
    same_bytes(desc, "dgamma", out[0][1], out[1][1], (size_t)C * 2);
    if (!rms) same_bytes(desc, "dbeta", out[0][2], out[1][2], (size_t)C * 2);
    for (int k = 0; k < 2; k++) free(out[k][0]), free(out[k][1]), free(out[k][2]);
    free(hmu), free(hrs), free(hdy);
    norm_io_free(&io);
}
/* The norm forward's kernels against each other: the same y, mu, rsigma,
 * amax and scale_inv bytes with every buffer 16-byte aligned (the fit
 * kernel where its layout covers the shape, else LayerNorm's staged kernel
 * or RMSNorm's registers kernel), with x one element off (the registers
 * kernel, or past 8192 columns the same kernel with narrower loads) and with
 * y one element off (the staged or registers kernel with narrower stores). */
static void fast_norm_fwd(env *e, shape sh, int rms, int zc, f8_dtype xdt, f8_dtype ydt)
{
    static const char *where[3] = {"aligned", "x one element off", "y one element off"};
    const int64_t R = sh.rows, C = sh.cols;
    const size_t n = (size_t)(R * C), xs = f8_dtype_size(xdt), ys = f8_dtype_size(ydt);
    const int fp8 = is_fp8(ydt);
    char desc[160];
    snprintf(desc, sizeof desc, "fast norm_fwd [%lld,%lld] %s zc %d x %s y %s", (long long)R, (long long)C,
             rms ? "rms" : "ln", zc, f8_dtype_name(xdt), f8_dtype_name(ydt));
    norm_io io = norm_inputs(e, R, C, xdt, F8_DTYPE_BF16, zc);
    const float scale = ydt == F8_DTYPE_E4M3 ? 37.5f : 1200.0f, a0 = AMAX0;
    void *out[3][5];
    for (int k = 0; k < 3; k++) {
        gbuf x = gbuf_new(e, n * xs, k == 1 ? xs : 0, io.x), y = gbuf_new(e, n * ys, k == 2 ? ys : 0, NULL);
        gbuf g = gbuf_new(e, (size_t)C * 2, 0, io.gamma), b = gbuf_new(e, (size_t)C * 2, 0, io.beta);
        gbuf mu = gbuf_new(e, (size_t)R * 4, 0, NULL), rs = gbuf_new(e, (size_t)R * 4, 0, NULL);
        gbuf sc = gbuf_new(e, 4, 0, &scale), am = gbuf_new(e, 4, 0, &a0), si = gbuf_new(e, 4, 0, NULL);
        f8_ctx *ctx = e->ctx[GPU];
        f8i_norm_fwd_args a = {.x = x.p, .x_dtype = xdt, .rows = R, .cols = C, .gamma = g.p, .beta = b.p,
                               .param_dtype = F8_DTYPE_BF16, .rms = rms, .zero_centered = zc, .eps = 1e-5f,
                               .y = y.p, .y_dtype = ydt, .scale = fp8 ? sc.p : NULL, .amax = fp8 ? am.p : NULL,
                               .scale_inv = fp8 ? si.p : NULL, .mu = rms ? NULL : mu.p, .rsigma = rs.p};
        CHECK_OK(ctx, f8i_op_norm_fwd(ctx, &a));
        out[k][0] = gbuf_get(e, &y, n * ys), out[k][1] = gbuf_get(e, &mu, (size_t)R * 4);
        out[k][2] = gbuf_get(e, &rs, (size_t)R * 4), out[k][3] = gbuf_get(e, &am, 4), out[k][4] = gbuf_get(e, &si, 4);
        gbuf all[] = {x, y, g, b, mu, rs, sc, am, si};
        for (int j = 0; j < NELEM(all); j++) f8_ctx_free(ctx, all[j].base);
    }
    for (int k = 1; k < 3; k++) {
        char d[200];
        snprintf(d, sizeof d, "%s (aligned vs %s)", desc, where[k]);
        same_bytes(d, "y", out[0][0], out[k][0], n * ys);
        if (!rms) same_bytes(d, "mu", out[0][1], out[k][1], (size_t)R * 4);
        same_bytes(d, "rsigma", out[0][2], out[k][2], (size_t)R * 4);
        if (fp8) {
            same_bytes(d, "amax", out[0][3], out[k][3], 4);
            same_bytes(d, "scale_inv", out[0][4], out[k][4], 4);
        }
    }
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < 5; j++) free(out[k][j]);
    norm_io_free(&io);
}
/* Shapes the fast paths run: whole 128-row tiles; norm backward widths of
 * one and two pieces a thread (768: a partly idle block; 5120: two pieces);
 * norm forward widths of each kernel (fast_norm_fwd): one-warp row groups
 * whose ring wraps (9000 x 256) or not (768), 64-thread groups (FP32 1000),
 * a partial last piece span (2056, 5120), the fit kernel's layouts (1536,
 * 2048, 3072, 4096, 6144, 8192) and a row past the row-group kernels (8200),
 * every x and y dtype and both norms on each. Small enough for
 * F8_TEST_QUICK, so compute-sanitizer sees the fast kernels. */
static void test_fast_paths(env *e)
{
    static const f8_dtype ys[4] = {F8_DTYPE_E4M3, F8_DTYPE_BF16, F8_DTYPE_FP32, F8_DTYPE_E5M2};
    static const shape fsh[] = {{9000, 256}, {1001, 768}, {77, 1000}, {300, 1536}, {200, 2048}, {129, 2056},
                                {100, 3072}, {129, 4096}, {64, 5120}, {40, 6144}, {33, 8192}, {17, 8200}};
    for (int s = 0; s < NELEM(fsh); s++)
        for (int v = 0; v < 16; v++)
            fast_norm_fwd(e, fsh[s], v & 1, (v >> 3) & 1, (v >> 1) & 1 ? F8_DTYPE_FP32 : F8_DTYPE_BF16,
                          ys[((v >> 2) + s) & 3]);
    static const shape nsh[] = {{300, 768}, {129, 4096}, {64, 5120}};
    for (int s = 0; s < NELEM(nsh); s++)
        for (int v = 0; v < 8; v++)
            fast_norm_bwd(e, nsh[s], v & 1, (v >> 1) & 1 ? F8_DTYPE_BF16 : F8_DTYPE_FP32,
                          (v >> 2) & 1 ? F8_DTYPE_BF16 : F8_DTYPE_FP32);
}

int main(void)
{
    static void (*const tests[])(env *) = {test_norm_fwd, test_norm_fwd_layouts, test_norm_bwd, test_fast_paths};
    return norm_act_run("test_cuda_norm", tests, NELEM(tests));
}
