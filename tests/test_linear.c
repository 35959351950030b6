/*
 * test_linear.c — f8_module on the CPU backend against FP64 references:
 * FP8 off to FP32 rounding, FP8 on against a GEMM of the dequantized FP8
 * operands and within TE's FP8 tolerances of FP64, finite differences, the
 * weight-workspace regression of TE PR #820, main_grad accumulation, zero
 * tokens, several microbatches in flight, and bad input changing nothing.
 */
#include "check.h"

typedef struct {
    f8_ctx *ctx;
    f8_module *lin;
    int64_t T, K, N;
    f8_dtype pdt;
} fixture;

static float *fvec(size_t n) { return (float *)calloc(n ? n : 1, sizeof(float)); }
static double *dvec(size_t n) { return (double *)calloc(n ? n : 1, sizeof(double)); }

static void randn(test_rng *r, float *v, size_t n, double sd)
{
    for (size_t i = 0; i < n; i++) v[i] = (float)(sd * rng_normal(r));
}

/* Host copy of a tensor's values as FP32 (FP32 or BF16 data). */
static void download_f32(f8_ctx *ctx, const f8_tensor *t, float *out)
{
    size_t n = (size_t)(t->rows * t->cols);
    if (t->dtype == F8_DTYPE_FP32) {
        CHECK_OK(ctx, f8_ctx_download(ctx, out, t->data, n * 4));
        return;
    }
    uint16_t *h = (uint16_t *)calloc(n ? n : 1, 2);
    CHECK_OK(ctx, f8_ctx_download(ctx, h, t->data, n * 2));
    for (size_t i = 0; i < n; i++) out[i] = f8_bf16_to_float(h[i]);
    free(h);
}

/* Round values to BF16 in place (what a BF16 tensor holds). */
static void round_bf16(float *v, size_t n)
{
    for (size_t i = 0; i < n; i++) v[i] = f8_bf16_to_float(f8_bf16_from_float(v[i]));
}

/* Backend buffer holding host values in dtype. */
static void *upload_as(f8_ctx *ctx, const float *v, size_t n, f8_dtype dt)
{
    void *p = NULL;
    CHECK_OK(ctx, f8_ctx_alloc(ctx, n * 4 + 4, &p));
    if (dt == F8_DTYPE_FP32) {
        CHECK_OK(ctx, f8_ctx_upload(ctx, p, v, n * 4));
    } else {
        uint16_t *h = (uint16_t *)calloc(n ? n : 1, 2);
        for (size_t i = 0; i < n; i++) h[i] = f8_bf16_from_float(v[i]);
        CHECK_OK(ctx, f8_ctx_upload(ctx, p, h, n * 2));
        free(h);
    }
    return p;
}

/* y[T,N] = a[T,K] · b[N,K]ᵀ (+ bias) in double. */
static void ref_gemm_tn(const double *a, const double *b, const double *bias, double *y, int64_t T, int64_t K,
                        int64_t N)
{
    for (int64_t t = 0; t < T; t++)
        for (int64_t n = 0; n < N; n++) {
            double s = bias ? bias[n] : 0.0;
            for (int64_t k = 0; k < K; k++) s += a[t * K + k] * b[n * K + k];
            y[t * N + n] = s;
        }
}

/* Reference gradients of y = x·Wᵀ + b for upstream dy, in double. */
static void ref_backward(const double *x, const double *w, const double *dy, double *dx, double *dw, double *db,
                         int64_t T, int64_t K, int64_t N)
{
    for (int64_t t = 0; t < T; t++)
        for (int64_t k = 0; k < K; k++) {
            double s = 0;
            for (int64_t n = 0; n < N; n++) s += dy[t * N + n] * w[n * K + k];
            dx[t * K + k] = s;
        }
    for (int64_t n = 0; n < N; n++) {
        for (int64_t k = 0; k < K; k++) {
            double s = 0;
            for (int64_t t = 0; t < T; t++) s += dy[t * N + n] * x[t * K + k];
            dw[n * K + k] = s;
        }
        double s = 0;
        for (int64_t t = 0; t < T; t++) s += dy[t * N + n];
        db[n] = s;
    }
}

static void to_double(const float *f, double *d, size_t n)
{
    for (size_t i = 0; i < n; i++) d[i] = f[i];
}

/* TE's FP8 closeness: |a - b| <= atol + rtol·|b| for every element. */
static int te_close(const float *a, const double *b, size_t n, double rtol, double atol, size_t *bad_index)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)a[i] - b[i]) <= atol + rtol * fabs(b[i]))) {
            *bad_index = i;
            return 0;
        }
    return 1;
}

/* FP8 code of x·scale then its dequantized value with the tensor's own
 * 1/scale, as the host oracle of a cast. */
static void fake_quant(const float *x, double *out, size_t n, float scale, f8_dtype dt)
{
    float sinv = 1.0f / scale;
    for (size_t i = 0; i < n; i++) out[i] = (double)(f8_fp8_to_float(f8_fp8_from_float(x[i] * scale, dt), dt) * sinv);
}

static fixture make(f8_ctx *ctx, int64_t T, int64_t K, int64_t N, int fp8, f8_dtype pdt, int fuse)
{
    fixture f = {ctx, NULL, T, K, N, pdt};
    f8_linear_config c = f8_linear_config_default(K, N);
    c.fp8 = fp8;
    c.param_dtype = pdt;
    c.max_tokens = T > 0 ? T : 1;
    c.fuse_wgrad_accumulation = fuse;
    c.seed = 1234u + (uint64_t)(K * 31 + N);
    CHECK_OK(ctx, f8_linear_create(ctx, &c, &f.lin));
    /* A non-zero bias so its path is exercised. */
    f8_tensor b;
    CHECK_OK(ctx, f8_module_param(f.lin, F8_PARAM_BIAS, 0, &b));
    float *hb = fvec((size_t)N);
    test_rng r = {(uint64_t)N};
    randn(&r, hb, (size_t)N, 0.1);
    if (pdt == F8_DTYPE_BF16) round_bf16(hb, (size_t)N);
    void *tmp = upload_as(ctx, hb, (size_t)N, pdt);
    CHECK_OK(ctx, f8_ctx_copy(ctx, b.data, tmp, (size_t)N * f8_dtype_size(pdt)));
    f8_ctx_free(ctx, tmp);
    free(hb);
    return f;
}

static void params_host(fixture *f, float *w, float *b)
{
    f8_tensor tw, tb;
    CHECK_OK(f->ctx, f8_module_param(f->lin, F8_PARAM_WEIGHT, 0, &tw));
    CHECK_OK(f->ctx, f8_module_param(f->lin, F8_PARAM_BIAS, 0, &tb));
    download_f32(f->ctx, &tw, w);
    download_f32(f->ctx, &tb, b);
}

static void grads_host(fixture *f, float *dw, float *db)
{
    f8_tensor tw, tb;
    CHECK_OK(f->ctx, f8_module_param(f->lin, F8_PARAM_WEIGHT, 1, &tw));
    CHECK_OK(f->ctx, f8_module_param(f->lin, F8_PARAM_BIAS, 1, &tb));
    download_f32(f->ctx, &tw, dw);
    download_f32(f->ctx, &tb, db);
}

/* FP8 off, FP32 parameters: forward and all three gradients to FP32
 * rounding of the FP64 reference. */
static void test_fp32_exact(f8_ctx *ctx, int64_t T, int64_t K, int64_t N)
{
    fixture f = make(ctx, T, K, N, 0, F8_DTYPE_FP32, 0);
    size_t nx = (size_t)(T * K), ny = (size_t)(T * N), nw = (size_t)(N * K);
    float *x = fvec(nx), *dy = fvec(ny), *y = fvec(ny), *dx = fvec(nx), *w = fvec(nw), *b = fvec((size_t)N);
    float *dw = fvec(nw), *db = fvec((size_t)N);
    double *xd = dvec(nx), *wd = dvec(nw), *bd = dvec((size_t)N), *dyd = dvec(ny), *yr = dvec(ny), *dxr = dvec(nx),
           *dwr = dvec(nw), *dbr = dvec((size_t)N);
    test_rng r = {(uint64_t)(T * 7 + K)};
    randn(&r, x, nx, 1.0);
    randn(&r, dy, ny, 1.0);
    params_host(&f, w, b);
    void *xb = upload_as(ctx, x, nx, F8_DTYPE_FP32), *dyb = upload_as(ctx, dy, ny, F8_DTYPE_FP32);
    void *yb = upload_as(ctx, y, ny, F8_DTYPE_FP32), *dxb = upload_as(ctx, dx, nx, F8_DTYPE_FP32);
    f8_tensor tx = f8_tensor_make(xb, F8_DTYPE_FP32, T, K), ty = f8_tensor_make(yb, F8_DTYPE_FP32, T, N);
    f8_tensor tdy = f8_tensor_make(dyb, F8_DTYPE_FP32, T, N), tdx = f8_tensor_make(dxb, F8_DTYPE_FP32, T, K);
    f8_saved *s = NULL;
    CHECK_OK(ctx, f8_module_saved_create(f.lin, &s));
    CHECK_OK(ctx, f8_module_forward(f.lin, &tx, &ty, F8_MICROBATCH_NONE, s));
    CHECK_OK(ctx, f8_module_backward(f.lin, s, &tdy, &tdx));
    download_f32(ctx, &ty, y);
    download_f32(ctx, &tdx, dx);
    grads_host(&f, dw, db);
    to_double(x, xd, nx);
    to_double(w, wd, nw);
    to_double(b, bd, (size_t)N);
    to_double(dy, dyd, ny);
    ref_gemm_tn(xd, wd, bd, yr, T, K, N);
    ref_backward(xd, wd, dyd, dxr, dwr, dbr, T, K, N);
    /* FP32 sums of K (or T) terms: relative error a few eps·sqrt(terms). */
    double tol = 2e-6 * sqrt((double)(K > T ? (K > N ? K : N) : (T > N ? T : N)));
    CHECK(rel_error(y, yr, ny) < tol, "fp32 y rel err %g (T=%lld K=%lld N=%lld)", rel_error(y, yr, ny), (long long)T,
          (long long)K, (long long)N);
    CHECK(rel_error(dx, dxr, nx) < tol, "fp32 dx rel err %g", rel_error(dx, dxr, nx));
    CHECK(rel_error(dw, dwr, nw) < tol, "fp32 dW rel err %g", rel_error(dw, dwr, nw));
    CHECK(rel_error(db, dbr, (size_t)N) < tol, "fp32 db rel err %g", rel_error(db, dbr, (size_t)N));

    /* Finite differences of loss = Σ y ⊙ dy, on a few coordinates of x, W, b. */
    double eps = 1e-2;
    for (int trial = 0; trial < 6; trial++) {
        int64_t i = (int64_t)(rng_u64(&r) % (uint64_t)nx), j = (int64_t)(rng_u64(&r) % (uint64_t)nw);
        double gx = 0, gw = 0;
        for (int sgn = -1; sgn <= 1; sgn += 2) {
            double *xp = dvec(nx), *wp = dvec(nw), *yp = dvec(ny), loss = 0;
            memcpy(xp, xd, nx * sizeof(double));
            memcpy(wp, wd, nw * sizeof(double));
            xp[i] += sgn * eps;
            ref_gemm_tn(xp, wd, bd, yp, T, K, N);
            for (size_t q = 0; q < ny; q++) loss += yp[q] * dyd[q];
            gx += sgn * loss / (2 * eps);
            loss = 0;
            wp[j] += sgn * eps;
            ref_gemm_tn(xd, wp, bd, yp, T, K, N);
            for (size_t q = 0; q < ny; q++) loss += yp[q] * dyd[q];
            gw += sgn * loss / (2 * eps);
            free(xp);
            free(wp);
            free(yp);
        }
        CHECK(fabs(gx - dx[i]) < 1e-4 * (1 + fabs(gx)), "FD dx[%lld]: %g vs %g", (long long)i, gx, dx[i]);
        CHECK(fabs(gw - dw[j]) < 1e-4 * (1 + fabs(gw)), "FD dW[%lld]: %g vs %g", (long long)j, gw, dw[j]);
    }
    f8_saved_destroy(s);
    f8_ctx_free(ctx, xb);
    f8_ctx_free(ctx, dyb);
    f8_ctx_free(ctx, yb);
    f8_ctx_free(ctx, dxb);
    f8_module_destroy(f.lin);
    free(x), free(dy), free(y), free(dx), free(w), free(b), free(dw), free(db);
    free(xd), free(wd), free(bd), free(dyd), free(yr), free(dxr), free(dwr), free(dbr);
}

/* FP8 on: outputs equal GEMMs of the dequantized FP8 operands (host oracle
 * built from the slots' scales) and stay within TE's FP8 tolerances of the
 * FP64 reference; two steps so the second runs on amax-derived scales. */
static void test_fp8(f8_ctx *ctx, int64_t T, int64_t K, int64_t N, f8_dtype pdt, f8_dtype xdt)
{
    fixture f = make(ctx, T, K, N, 1, pdt, 0);
    size_t nx = (size_t)(T * K), ny = (size_t)(T * N), nw = (size_t)(N * K);
    float *x = fvec(nx), *dy = fvec(ny), *y = fvec(ny), *dx = fvec(nx), *w = fvec(nw), *b = fvec((size_t)N);
    float *dw = fvec(nw), *db = fvec((size_t)N), *dw_prev = fvec(nw), *db_prev = fvec((size_t)N), *wq = fvec(nw);
    double *xq = dvec(nx), *gq = dvec(ny), *wqd = dvec(nw), *bd = dvec((size_t)N), *yr = dvec(ny), *dxr = dvec(nx),
           *dwr = dvec(nw), *dbr = dvec((size_t)N), *xd = dvec(nx), *wd = dvec(nw), *dyd = dvec(ny);
    double *dyhp = dvec(ny);
    test_rng r = {(uint64_t)(T * 13 + K * 3 + N)};
    f8_slot s_in, s_w, s_go;
    CHECK_OK(ctx, f8_module_slot(f.lin, F8_DIR_FORWARD, 0, &s_in));
    CHECK_OK(ctx, f8_module_slot(f.lin, F8_DIR_FORWARD, 1, &s_w));
    CHECK_OK(ctx, f8_module_slot(f.lin, F8_DIR_BACKWARD, 0, &s_go));
    f8_saved *s = NULL;
    CHECK_OK(ctx, f8_module_saved_create(f.lin, &s));
    params_host(&f, w, b);
    for (int step = 0; step < 2; step++) {
        randn(&r, x, nx, 1.0);
        randn(&r, dy, ny, 1e-3);
        if (xdt == F8_DTYPE_BF16) round_bf16(x, nx);
        if (xdt == F8_DTYPE_BF16) round_bf16(dy, ny);
        float sc_in, sc_w, sc_go;
        CHECK_OK(ctx, f8_slot_read(ctx, s_in, &sc_in, NULL, NULL));
        CHECK_OK(ctx, f8_slot_read(ctx, s_w, &sc_w, NULL, NULL));
        CHECK_OK(ctx, f8_slot_read(ctx, s_go, &sc_go, NULL, NULL));
        if (step == 1) CHECK(sc_in != 1.0f && sc_go != 1.0f, "scales did not update: %g %g", sc_in, sc_go);
        void *xb = upload_as(ctx, x, nx, xdt), *dyb = upload_as(ctx, dy, ny, xdt);
        void *yb = upload_as(ctx, y, ny, F8_DTYPE_FP32), *dxb = upload_as(ctx, dx, nx, F8_DTYPE_FP32);
        f8_tensor tx = f8_tensor_make(xb, xdt, T, K), ty = f8_tensor_make(yb, F8_DTYPE_FP32, T, N);
        f8_tensor tdy = f8_tensor_make(dyb, xdt, T, N), tdx = f8_tensor_make(dxb, F8_DTYPE_FP32, T, K);
        grads_host(&f, dw_prev, db_prev);
        CHECK_OK(ctx, f8_module_forward(f.lin, &tx, &ty, F8_MICROBATCH_NONE, s));
        CHECK_OK(ctx, f8_module_backward(f.lin, s, &tdy, &tdx));
        download_f32(ctx, &ty, y);
        download_f32(ctx, &tdx, dx);
        grads_host(&f, dw, db);
        for (size_t i = 0; i < nw; i++) dw[i] -= dw_prev[i];
        for (int64_t i = 0; i < N; i++) db[i] -= db_prev[i];
        /* The workspace's own dequantized weight and scale_inv. */
        f8_tensor twq = f8_tensor_make(NULL, F8_DTYPE_FP32, N, K);
        void *wqb = NULL;
        CHECK_OK(ctx, f8_ctx_alloc(ctx, nw * 4, &wqb));
        twq.data = wqb;
        CHECK_OK(ctx, f8_qtensor_dequantize(f8_module_weight_workspace(f.lin, F8_PARAM_WEIGHT), &twq));
        download_f32(ctx, &twq, wq);
        f8_ctx_free(ctx, wqb);
        /* The weight workspace equals the host cast of W with the weight scale. */
        double *wq_oracle = dvec(nw);
        fake_quant(w, wq_oracle, nw, sc_w, F8_DTYPE_E4M3);
        size_t bad = 0;
        int same = 1;
        for (size_t i = 0; i < nw; i++)
            if ((double)wq[i] != wq_oracle[i]) same = 0, bad = i;
        CHECK(same, "weight workspace differs from its host cast at %zu: %g vs %g", bad, wq[bad], wq_oracle[bad]);
        free(wq_oracle);
        fake_quant(x, xq, nx, sc_in, F8_DTYPE_E4M3);
        fake_quant(dy, gq, ny, sc_go, F8_DTYPE_E5M2);
        to_double(wq, wqd, nw);
        to_double(b, bd, (size_t)N);
        /* Oracle 1: the same FP8 operands in FP64 (differs only by FP32 accumulation). */
        ref_gemm_tn(xq, wqd, bd, yr, T, K, N);
        ref_backward(xq, wqd, gq, dxr, dwr, dbr, T, K, N);
        double tol = 1e-5 * sqrt((double)(K + N + T));
        CHECK(rel_error(y, yr, ny) < tol, "fp8 y vs dequantized GEMM rel err %g", rel_error(y, yr, ny));
        CHECK(rel_error(dx, dxr, nx) < tol, "fp8 dx vs dequantized GEMM rel err %g", rel_error(dx, dxr, nx));
        /* BF16 parameters accumulate dW in BF16, so the step's share carries BF16 rounding. */
        CHECK(rel_error(dw, dwr, nw) < (pdt == F8_DTYPE_BF16 ? 2e-2 : tol), "fp8 dW vs dequantized GEMM rel err %g",
              rel_error(dw, dwr, nw));
        /* The bias gradient is taken from dy before quantization. */
        to_double(dy, dyhp, ny);
        to_double(x, xd, nx);
        to_double(w, wd, nw);
        ref_backward(xd, wd, dyhp, dxr, dwr, dbr, T, K, N);
        CHECK(rel_error(db, dbr, (size_t)N) < (pdt == F8_DTYPE_BF16 ? 1e-2 : 1e-5), "fp8 db rel err %g",
              rel_error(db, dbr, (size_t)N));
        /* Oracle 2: FP64 of the unquantized inputs, TE's FP8 tolerances
         * (rtol 0.125, atol 0.0675 for E4M3; gradients, E5M2-based, scaled to dy). */
        ref_gemm_tn(xd, wd, bd, yr, T, K, N);
        size_t bi = 0;
        CHECK(te_close(y, yr, ny, 0.125, 0.0675, &bi), "fp8 y[%zu] %g vs fp64 %g", bi, y[bi], yr[bi]);
        CHECK(rel_error(dx, dxr, nx) < 0.1, "fp8 dx vs fp64 rel err %g", rel_error(dx, dxr, nx));
        CHECK(rel_error(dw, dwr, nw) < 0.1, "fp8 dW vs fp64 rel err %g", rel_error(dw, dwr, nw));
        CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
        CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_BACKWARD));
        f8_ctx_free(ctx, xb);
        f8_ctx_free(ctx, dyb);
        f8_ctx_free(ctx, yb);
        f8_ctx_free(ctx, dxb);
    }
    (void)dyd;
    f8_saved_destroy(s);
    f8_module_destroy(f.lin);
    free(x), free(dy), free(y), free(dx), free(w), free(b), free(dw), free(db), free(dw_prev), free(db_prev), free(wq);
    free(xq), free(gq), free(wqd), free(bd), free(yr), free(dxr), free(dwr), free(dbr), free(xd), free(wd), free(dyd);
    free(dyhp);
}

/* TE #820 regression: microbatch 1 (FIRST) casts W; the forward scale update
 * changes the weight's recipe scale; microbatch 2 (NOT_FIRST) must compute
 * with the workspace's data AND its own scale_inv from microbatch 1, in the
 * output and in dgrad. */
static void test_workspace_regression(f8_ctx *ctx)
{
    const int64_t T = 16, K = 32, N = 16;
    fixture f = make(ctx, T, K, N, 1, F8_DTYPE_FP32, 0);
    size_t nx = (size_t)(T * K), ny = (size_t)(T * N), nw = (size_t)(N * K);
    float *x = fvec(nx), *dy = fvec(ny), *y = fvec(ny), *dx = fvec(nx), *w = fvec(nw), *b = fvec((size_t)N);
    double *xq = dvec(nx), *gq = dvec(ny), *wq1 = dvec(nw), *wq_bug = dvec(nw), *bd = dvec((size_t)N);
    double *yr = dvec(ny), *ybug = dvec(ny), *dxr = dvec(nx), *dwr = dvec(nw), *dbr = dvec((size_t)N);
    test_rng r = {99};
    randn(&r, x, nx, 1.0);
    randn(&r, dy, ny, 1e-2);
    params_host(&f, w, b);
    to_double(b, bd, (size_t)N);
    f8_slot s_in, s_w, s_go;
    CHECK_OK(ctx, f8_module_slot(f.lin, F8_DIR_FORWARD, 0, &s_in));
    CHECK_OK(ctx, f8_module_slot(f.lin, F8_DIR_FORWARD, 1, &s_w));
    CHECK_OK(ctx, f8_module_slot(f.lin, F8_DIR_BACKWARD, 0, &s_go));
    void *xb = upload_as(ctx, x, nx, F8_DTYPE_FP32), *dyb = upload_as(ctx, dy, ny, F8_DTYPE_FP32);
    void *yb = upload_as(ctx, y, ny, F8_DTYPE_FP32), *dxb = upload_as(ctx, dx, nx, F8_DTYPE_FP32);
    f8_tensor tx = f8_tensor_make(xb, F8_DTYPE_FP32, T, K), ty = f8_tensor_make(yb, F8_DTYPE_FP32, T, N);
    f8_tensor tdy = f8_tensor_make(dyb, F8_DTYPE_FP32, T, N), tdx = f8_tensor_make(dxb, F8_DTYPE_FP32, T, K);
    f8_saved *s1 = NULL, *s2 = NULL;
    CHECK_OK(ctx, f8_module_saved_create(f.lin, &s1));
    CHECK_OK(ctx, f8_module_saved_create(f.lin, &s2));

    /* Microbatch 1 with the initial scale 1 for W. */
    float sw1;
    CHECK_OK(ctx, f8_slot_read(ctx, s_w, &sw1, NULL, NULL));
    CHECK_OK(ctx, f8_module_forward(f.lin, &tx, &ty, F8_MICROBATCH_FIRST, s1));
    float ws_sinv1;
    f8_tensor wsv;
    CHECK_OK(ctx, f8_qtensor_data(f8_module_weight_workspace(f.lin, F8_PARAM_WEIGHT), &wsv));
    CHECK_OK(ctx, f8_ctx_download(ctx, &ws_sinv1, wsv.scale_inv, 4));
    CHECK(ws_sinv1 == 1.0f / sw1, "workspace scale_inv %g after FIRST, expected %g", ws_sinv1, 1.0f / sw1);
    fake_quant(w, wq1, nw, sw1, F8_DTYPE_E4M3);

    /* Autocast exit: the weight slot's scale moves from 1 to 448/amax(W). */
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
    float sw2, sin2, sgo;
    CHECK_OK(ctx, f8_slot_read(ctx, s_w, &sw2, NULL, NULL));
    CHECK_OK(ctx, f8_slot_read(ctx, s_in, &sin2, NULL, NULL));
    CHECK(sw2 != sw1, "the weight scale did not change (%g), the regression test would prove nothing", sw2);

    /* Microbatch 2 reuses the workspace. */
    CHECK_OK(ctx, f8_module_forward(f.lin, &tx, &ty, F8_MICROBATCH_NOT_FIRST, s2));
    float ws_sinv2;
    CHECK_OK(ctx, f8_ctx_download(ctx, &ws_sinv2, wsv.scale_inv, 4));
    CHECK(ws_sinv2 == ws_sinv1, "NOT_FIRST rewrote the workspace scale_inv: %g -> %g", ws_sinv1, ws_sinv2);
    download_f32(ctx, &ty, y);
    fake_quant(x, xq, nx, sin2, F8_DTYPE_E4M3);
    ref_gemm_tn(xq, wq1, bd, yr, T, K, N);
    /* What the pre-#820 bug computed: microbatch-1 bytes with the new scale_inv. */
    for (size_t i = 0; i < nw; i++) wq_bug[i] = wq1[i] * sw1 / sw2;
    ref_gemm_tn(xq, wq_bug, bd, ybug, T, K, N);
    CHECK(rel_error(y, yr, ny) < 1e-5, "microbatch 2 output rel err %g vs the microbatch-1 weight", rel_error(y, yr, ny));
    CHECK(rel_error(y, ybug, ny) > 1e-2, "microbatch 2 output matches the stale-scale bug (rel %g)",
          rel_error(y, ybug, ny));

    /* dgrad of microbatch 2 uses the same weight bytes and scale_inv. */
    CHECK_OK(ctx, f8_slot_read(ctx, s_go, &sgo, NULL, NULL));
    CHECK_OK(ctx, f8_module_backward(f.lin, s2, &tdy, &tdx));
    download_f32(ctx, &tdx, dx);
    fake_quant(dy, gq, ny, sgo, F8_DTYPE_E5M2);
    ref_backward(xq, wq1, gq, dxr, dwr, dbr, T, K, N);
    CHECK(rel_error(dx, dxr, nx) < 1e-5, "microbatch 2 dgrad rel err %g vs the microbatch-1 weight",
          rel_error(dx, dxr, nx));
    /* Microbatch 1's backward, after the update, is consistent too. */
    CHECK_OK(ctx, f8_module_backward(f.lin, s1, &tdy, &tdx));
    download_f32(ctx, &tdx, dx);
    CHECK(rel_error(dx, dxr, nx) < 1e-5, "microbatch 1 dgrad rel err %g", rel_error(dx, dxr, nx));

    f8_saved_destroy(s1);
    f8_saved_destroy(s2);
    f8_ctx_free(ctx, xb);
    f8_ctx_free(ctx, dyb);
    f8_ctx_free(ctx, yb);
    f8_ctx_free(ctx, dxb);
    f8_module_destroy(f.lin);
    free(x), free(dy), free(y), free(dx), free(w), free(b);
    free(xq), free(gq), free(wq1), free(wq_bug), free(bd), free(yr), free(ybug), free(dxr), free(dwr), free(dbr);
}

/* main_grad per §4.3: FIRST overwrites, NOT_FIRST and NONE accumulate. */
static void test_main_grad(f8_ctx *ctx, int fp8)
{
    const int64_t T = 16, K = 32, N = 16;
    fixture f = make(ctx, T, K, N, fp8, F8_DTYPE_FP32, 1);
    size_t nx = (size_t)(T * K), ny = (size_t)(T * N), nw = (size_t)(N * K);
    float *x = fvec(nx), *dy = fvec(ny), *mg = fvec(nw), *g1 = fvec(nw), *g2 = fvec(nw), *g3 = fvec(nw);
    test_rng r = {7};
    randn(&r, x, nx, 1.0);
    randn(&r, dy, ny, 0.1);
    for (size_t i = 0; i < nw; i++) mg[i] = 7.0f; /* garbage FIRST must overwrite */
    void *xb = upload_as(ctx, x, nx, F8_DTYPE_FP32), *dyb = upload_as(ctx, dy, ny, F8_DTYPE_FP32);
    void *yb = upload_as(ctx, dy, ny, F8_DTYPE_FP32), *mgb = upload_as(ctx, mg, nw, F8_DTYPE_FP32);
    f8_tensor tx = f8_tensor_make(xb, F8_DTYPE_FP32, T, K), ty = f8_tensor_make(yb, F8_DTYPE_FP32, T, N);
    f8_tensor tdy = f8_tensor_make(dyb, F8_DTYPE_FP32, T, N), tmg = f8_tensor_make(mgb, F8_DTYPE_FP32, N, K);
    f8_saved *s = NULL;
    CHECK_OK(ctx, f8_module_saved_create(f.lin, &s));
    CHECK_STATUS(ctx, f8_module_forward(f.lin, &tx, &ty, F8_MICROBATCH_FIRST, s), F8_OK);
    CHECK_STATUS(ctx, f8_module_backward(f.lin, s, &tdy, NULL), F8_ERR_STATE); /* no main_grad yet */
    f8_tensor none;
    CHECK_STATUS(ctx, f8_module_param(f.lin, F8_PARAM_WEIGHT, 1, &none), F8_ERR_STATE); /* no gradient yet */
    CHECK_OK(ctx, f8_module_set_main_grad(f.lin, F8_PARAM_WEIGHT, (float *)mgb));
    CHECK_OK(ctx, f8_module_backward(f.lin, s, &tdy, NULL));
    download_f32(ctx, &tmg, g1);
    int all_garbage_gone = 1;
    for (size_t i = 0; i < nw; i++)
        if (fabsf(g1[i] - 7.0f) < 1.0f) all_garbage_gone = 0;
    CHECK(all_garbage_gone, "FIRST did not overwrite main_grad (fp8=%d)", fp8);
    CHECK_OK(ctx, f8_module_forward(f.lin, &tx, &ty, F8_MICROBATCH_NOT_FIRST, s));
    CHECK_OK(ctx, f8_module_backward(f.lin, s, &tdy, NULL));
    download_f32(ctx, &tmg, g2);
    CHECK_OK(ctx, f8_module_forward(f.lin, &tx, &ty, F8_MICROBATCH_NONE, s));
    CHECK_OK(ctx, f8_module_backward(f.lin, s, &tdy, NULL));
    download_f32(ctx, &tmg, g3);
    /* Same inputs and (on the CPU, with unchanged scales) same wgrad each time. */
    int acc_ok = 1;
    for (size_t i = 0; i < nw; i++)
        if (fabsf(g2[i] - 2 * g1[i]) > 1e-5f * (1 + fabsf(g1[i])) || fabsf(g3[i] - 3 * g1[i]) > 1e-5f * (1 + fabsf(g1[i])))
            acc_ok = 0;
    CHECK(acc_ok, "NOT_FIRST / NONE did not accumulate into main_grad (fp8=%d)", fp8);
    /* The fused weight has no gradient of its own: its view is the main_grad. */
    float *dw = fvec(nw), *db = fvec((size_t)N);
    grads_host(&f, dw, db);
    int same = 1;
    for (size_t i = 0; i < nw; i++) same &= dw[i] == g3[i];
    CHECK(same, "the fused weight's gradient view is not its main_grad");
    free(dw), free(db);
    f8_saved_destroy(s);
    f8_ctx_free(ctx, xb), f8_ctx_free(ctx, dyb), f8_ctx_free(ctx, yb), f8_ctx_free(ctx, mgb);
    f8_module_destroy(f.lin);
    free(x), free(dy), free(mg), free(g1), free(g2), free(g3);
}

/* Two microbatches in flight: forward A, forward B, backward B, backward A
 * accumulates the same gradients as running them one after the other. */
static void test_in_flight(f8_ctx *ctx)
{
    const int64_t T = 16, K = 32, N = 16;
    size_t nx = (size_t)(T * K), ny = (size_t)(T * N), nw = (size_t)(N * K);
    float *xa = fvec(nx), *xbv = fvec(nx), *dy = fvec(ny), *g_seq = fvec(nw), *g_par = fvec(nw), *db = fvec((size_t)N);
    test_rng r = {5};
    randn(&r, xa, nx, 1.0);
    randn(&r, xbv, nx, 1.0);
    randn(&r, dy, ny, 0.1);
    for (int mode = 0; mode < 2; mode++) {
        fixture f = make(ctx, T, K, N, 1, F8_DTYPE_FP32, 0);
        void *a = upload_as(ctx, xa, nx, F8_DTYPE_FP32), *bb = upload_as(ctx, xbv, nx, F8_DTYPE_FP32);
        void *d = upload_as(ctx, dy, ny, F8_DTYPE_FP32), *yb = upload_as(ctx, dy, ny, F8_DTYPE_FP32);
        f8_tensor ta = f8_tensor_make(a, F8_DTYPE_FP32, T, K), tb = f8_tensor_make(bb, F8_DTYPE_FP32, T, K);
        f8_tensor td = f8_tensor_make(d, F8_DTYPE_FP32, T, N), ty = f8_tensor_make(yb, F8_DTYPE_FP32, T, N);
        f8_saved *sa = NULL, *sb = NULL;
        CHECK_OK(ctx, f8_module_saved_create(f.lin, &sa));
        CHECK_OK(ctx, f8_module_saved_create(f.lin, &sb));
        if (mode == 0) {
            CHECK_OK(ctx, f8_module_forward(f.lin, &ta, &ty, F8_MICROBATCH_FIRST, sa));
            CHECK_OK(ctx, f8_module_backward(f.lin, sa, &td, NULL));
            CHECK_OK(ctx, f8_module_forward(f.lin, &tb, &ty, F8_MICROBATCH_NOT_FIRST, sb));
            CHECK_OK(ctx, f8_module_backward(f.lin, sb, &td, NULL));
        } else {
            CHECK_OK(ctx, f8_module_forward(f.lin, &ta, &ty, F8_MICROBATCH_FIRST, sa));
            CHECK_OK(ctx, f8_module_forward(f.lin, &tb, &ty, F8_MICROBATCH_NOT_FIRST, sb));
            CHECK_OK(ctx, f8_module_backward(f.lin, sb, &td, NULL));
            CHECK_OK(ctx, f8_module_backward(f.lin, sa, &td, NULL));
            CHECK_STATUS(ctx, f8_module_backward(f.lin, sa, &td, NULL), F8_ERR_STATE); /* consumed */
        }
        grads_host(&f, mode == 0 ? g_seq : g_par, db);
        f8_saved_destroy(sa);
        f8_saved_destroy(sb);
        f8_ctx_free(ctx, a), f8_ctx_free(ctx, bb), f8_ctx_free(ctx, d), f8_ctx_free(ctx, yb);
        f8_module_destroy(f.lin);
    }
    double *gs = dvec(nw);
    to_double(g_seq, gs, nw);
    CHECK(rel_error(g_par, gs, nw) < 1e-6, "in-flight microbatches changed the gradient: rel %g", rel_error(g_par, gs, nw));
    double norm = 0;
    for (size_t i = 0; i < nw; i++) norm += gs[i] * gs[i];
    CHECK(norm > 0, "zero gradient proves nothing");
    free(gs);
    free(xa), free(xbv), free(dy), free(g_seq), free(g_par), free(db);
}

/* T = 0 works: nothing to compute, gradients unchanged (FIRST main_grad: 0). */
static void test_zero_tokens(f8_ctx *ctx, int fp8)
{
    const int64_t K = 32, N = 16;
    fixture f = make(ctx, 8, K, N, fp8, F8_DTYPE_FP32, 0);
    float dummy[4] = {0};
    void *p = upload_as(ctx, dummy, 4, F8_DTYPE_FP32);
    f8_tensor tx = f8_tensor_make(p, F8_DTYPE_FP32, 0, K), ty = f8_tensor_make(p, F8_DTYPE_FP32, 0, N);
    f8_tensor tdy = f8_tensor_make(p, F8_DTYPE_FP32, 0, N), tdx = f8_tensor_make(p, F8_DTYPE_FP32, 0, K);
    f8_saved *s = NULL;
    CHECK_OK(ctx, f8_module_saved_create(f.lin, &s));
    CHECK_OK(ctx, f8_module_forward(f.lin, &tx, &ty, F8_MICROBATCH_NONE, s));
    CHECK_OK(ctx, f8_module_backward(f.lin, s, &tdy, &tdx));
    float *dw = fvec((size_t)(N * K)), *db = fvec((size_t)N);
    grads_host(&f, dw, db);
    int zero = 1;
    for (int64_t i = 0; i < N * K; i++) zero &= dw[i] == 0.0f;
    for (int64_t i = 0; i < N; i++) zero &= db[i] == 0.0f;
    CHECK(zero, "zero tokens changed the gradients (fp8=%d)", fp8);
    free(dw), free(db);
    f8_saved_destroy(s);
    f8_ctx_free(ctx, p);
    f8_module_destroy(f.lin);
}

/* Bad input returns a clear status and changes nothing. */
static void test_bad_input(f8_ctx *ctx)
{
    const int64_t T = 8, K = 16, N = 16;
    fixture f = make(ctx, T, K, N, 1, F8_DTYPE_FP32, 0);
    fixture g = make(ctx, T, K, N, 0, F8_DTYPE_FP32, 0);
    float host[256];
    for (int i = 0; i < 256; i++) host[i] = 0.25f * (float)(i % 7) - 0.5f;
    void *xb = upload_as(ctx, host, 128, F8_DTYPE_FP32), *yb = upload_as(ctx, host, 128, F8_DTYPE_FP32);
    void *x16 = upload_as(ctx, host, 128, F8_DTYPE_BF16);
    f8_tensor tx = f8_tensor_make(xb, F8_DTYPE_FP32, T, K), ty = f8_tensor_make(yb, F8_DTYPE_FP32, T, N);
    f8_saved *s = NULL, *sg = NULL;
    CHECK_OK(ctx, f8_module_saved_create(f.lin, &s));
    CHECK_OK(ctx, f8_module_saved_create(g.lin, &sg));
    float y_before[128], y_after[128], h_before[16], h_after[16];
    f8_slot s_in;
    CHECK_OK(ctx, f8_module_slot(f.lin, F8_DIR_FORWARD, 0, &s_in));
    CHECK_OK(ctx, f8_ctx_download(ctx, y_before, yb, sizeof y_before));
    f8_recipe rc = *f8_ctx_recipe(ctx);
    float *hist_b = fvec((size_t)rc.amax_history_len), *hist_a = fvec((size_t)rc.amax_history_len);
    CHECK_OK(ctx, f8_slot_read(ctx, s_in, &h_before[0], &h_before[1], hist_b));

    f8_tensor bad = tx;
    CHECK_STATUS(ctx, f8_module_forward(NULL, &tx, &ty, F8_MICROBATCH_NONE, s), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_forward(f.lin, NULL, &ty, F8_MICROBATCH_NONE, s), F8_ERR_INVALID_ARGUMENT);
    CHECK(strlen(f8_ctx_last_error(ctx)) > 0, "no message for a NULL x");
    CHECK_STATUS(ctx, f8_module_forward(f.lin, &tx, NULL, F8_MICROBATCH_NONE, s), F8_ERR_INVALID_ARGUMENT);
    bad.cols = K + 1;
    CHECK_STATUS(ctx, f8_module_forward(f.lin, &bad, &ty, F8_MICROBATCH_NONE, s), F8_ERR_SHAPE);
    CHECK(strstr(f8_ctx_last_error(ctx), "x") != NULL, "shape message does not name x: %s", f8_ctx_last_error(ctx));
    bad = ty;
    bad.rows = T - 1;
    CHECK_STATUS(ctx, f8_module_forward(f.lin, &tx, &bad, F8_MICROBATCH_NONE, s), F8_ERR_SHAPE);
    bad = tx;
    bad.rows = T + 1; /* past max_tokens */
    f8_tensor ybig = f8_tensor_make(yb, F8_DTYPE_FP32, T + 1, N);
    CHECK_STATUS(ctx, f8_module_forward(f.lin, &bad, &ybig, F8_MICROBATCH_NONE, s), F8_ERR_SHAPE);
    bad = tx;
    bad.dtype = F8_DTYPE_E4M3;
    bad.scale_inv = (float *)yb;
    CHECK_STATUS(ctx, f8_module_forward(f.lin, &bad, &ty, F8_MICROBATCH_NONE, s), F8_ERR_DTYPE);
    f8_tensor tx16 = f8_tensor_make(x16, F8_DTYPE_BF16, T, K);
    CHECK_STATUS(ctx, f8_module_forward(g.lin, &tx16, &ty, F8_MICROBATCH_NONE, sg), F8_ERR_DTYPE); /* FP8 off: fp32 params */
    CHECK_STATUS(ctx, f8_module_forward(f.lin, &tx, &ty, (f8_microbatch)7, s), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_forward(f.lin, &tx, &ty, F8_MICROBATCH_NONE, sg), F8_ERR_INVALID_ARGUMENT);
    bad = tx;
    bad.data = NULL;
    CHECK_STATUS(ctx, f8_module_forward(f.lin, &bad, &ty, F8_MICROBATCH_NONE, s), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_backward(f.lin, s, &ty, NULL), F8_ERR_STATE); /* no forward yet */
    CHECK_STATUS(ctx, f8_module_backward(f.lin, NULL, &ty, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_set_main_grad(f.lin, F8_PARAM_WEIGHT, (float *)yb), F8_ERR_STATE);
    f8_linear_config c = f8_linear_config_default(0, 4);
    f8_module *l2 = NULL;
    CHECK_STATUS(ctx, f8_linear_create(ctx, &c, &l2), F8_ERR_SHAPE);
    c = f8_linear_config_default(4, 4);
    c.param_dtype = F8_DTYPE_E4M3;
    CHECK_STATUS(ctx, f8_linear_create(ctx, &c, &l2), F8_ERR_DTYPE);
    CHECK(l2 == NULL, "failed create left an object");
    CHECK_STATUS(ctx, f8_linear_create(ctx, NULL, &l2), F8_ERR_INVALID_ARGUMENT);

    /* Nothing changed: y, and the input slot (no cast ran). */
    CHECK_OK(ctx, f8_ctx_download(ctx, y_after, yb, sizeof y_after));
    CHECK(memcmp(y_before, y_after, sizeof y_after) == 0, "a failed forward wrote y");
    CHECK_OK(ctx, f8_slot_read(ctx, s_in, &h_after[0], &h_after[1], hist_a));
    CHECK(memcmp(hist_a, hist_b, (size_t)rc.amax_history_len * 4) == 0 && h_after[0] == h_before[0],
          "a failed forward touched the input slot");

    /* A valid call after all that, then a backward with a bad dy changes nothing. */
    CHECK_OK(ctx, f8_module_forward(f.lin, &tx, &ty, F8_MICROBATCH_NONE, s));
    f8_tensor dyb = f8_tensor_make(yb, F8_DTYPE_FP32, T, N + 1);
    CHECK_STATUS(ctx, f8_module_backward(f.lin, s, &dyb, NULL), F8_ERR_SHAPE);
    float *dw = fvec((size_t)(N * K)), *db = fvec((size_t)N);
    grads_host(&f, dw, db);
    int zero = 1;
    for (int64_t i = 0; i < N * K; i++) zero &= dw[i] == 0.0f;
    CHECK(zero, "a failed backward wrote the weight gradient");
    dyb.cols = N;
    CHECK_OK(ctx, f8_module_backward(f.lin, s, &dyb, NULL)); /* the saved state survived the failure */
    free(dw), free(db), free(hist_a), free(hist_b);
    f8_saved_destroy(s);
    f8_saved_destroy(sg);
    f8_ctx_free(ctx, xb), f8_ctx_free(ctx, yb), f8_ctx_free(ctx, x16);
    f8_module_destroy(f.lin);
    f8_module_destroy(g.lin);
    f8_module_destroy(NULL);
    f8_saved_destroy(NULL);
}

/* Graph mode (f8_ctx_set_weight_noop): once filled, the weight cast runs
 * under the ctx noop flag: 1 leaves the workspace, its scale_inv and the
 * weight amax untouched even though W and the recipe scale changed; 0 casts. */
static void test_weight_noop(f8_ctx *ctx)
{
    const int64_t T = 16, K = 32, N = 16;
    fixture f = make(ctx, T, K, N, 1, F8_DTYPE_FP32, 0);
    size_t nx = (size_t)(T * K), ny = (size_t)(T * N), nw = (size_t)(N * K);
    float *x = fvec(nx), *w = fvec(nw), *b = fvec((size_t)N);
    uint8_t *c0 = (uint8_t *)calloc(nw, 1), *c1 = (uint8_t *)calloc(nw, 1);
    test_rng r = {11};
    randn(&r, x, nx, 1.0);
    void *xb = upload_as(ctx, x, nx, F8_DTYPE_FP32), *yb = upload_as(ctx, x, ny, F8_DTYPE_FP32);
    f8_tensor tx = f8_tensor_make(xb, F8_DTYPE_FP32, T, K), ty = f8_tensor_make(yb, F8_DTYPE_FP32, T, N);
    f8_slot s_w;
    CHECK_OK(ctx, f8_module_slot(f.lin, F8_DIR_FORWARD, 1, &s_w));
    f8_tensor ws, tw;
    CHECK_OK(ctx, f8_qtensor_data(f8_module_weight_workspace(f.lin, F8_PARAM_WEIGHT), &ws));
    CHECK_OK(ctx, f8_module_param(f.lin, F8_PARAM_WEIGHT, 0, &tw));
    CHECK_OK(ctx, f8_ctx_set_weight_noop(ctx, 1));
    CHECK_OK(ctx, f8_ctx_set_noop_flag(ctx, 0.0f));
    CHECK_OK(ctx, f8_module_forward(f.lin, &tx, &ty, F8_MICROBATCH_FIRST, NULL)); /* fills the workspace */
    float sinv0, sinv1, amax0, amax1;
    CHECK_OK(ctx, f8_ctx_download(ctx, c0, ws.data, nw));
    CHECK_OK(ctx, f8_ctx_download(ctx, &sinv0, ws.scale_inv, 4));

    /* New weights and a new recipe scale; the replay says "reuse". */
    params_host(&f, w, b);
    for (size_t i = 0; i < nw; i++) w[i] *= 3.0f;
    CHECK_OK(ctx, f8_ctx_upload(ctx, tw.data, w, nw * 4));
    CHECK_OK(ctx, f8_slot_write(ctx, s_w, 0.5f, 2.0f, NULL));
    float *hist = fvec((size_t)f8_ctx_recipe(ctx)->amax_history_len);
    CHECK_OK(ctx, f8_slot_read(ctx, s_w, NULL, NULL, hist));
    amax0 = hist[0];
    CHECK_OK(ctx, f8_ctx_set_noop_flag(ctx, 1.0f));
    CHECK_OK(ctx, f8_module_forward(f.lin, &tx, &ty, F8_MICROBATCH_FIRST, NULL));
    CHECK_OK(ctx, f8_ctx_download(ctx, c1, ws.data, nw));
    CHECK_OK(ctx, f8_ctx_download(ctx, &sinv1, ws.scale_inv, 4));
    CHECK_OK(ctx, f8_slot_read(ctx, s_w, NULL, NULL, hist));
    amax1 = hist[0];
    CHECK(memcmp(c0, c1, nw) == 0 && sinv1 == sinv0, "noop flag 1: the workspace changed (scale_inv %g -> %g)", sinv0,
          sinv1);
    CHECK(amax1 == amax0, "noop flag 1: the weight amax changed %g -> %g", amax0, amax1);

    /* The replay says "cast": the workspace follows the new W and scale. */
    CHECK_OK(ctx, f8_ctx_set_noop_flag(ctx, 0.0f));
    CHECK_OK(ctx, f8_module_forward(f.lin, &tx, &ty, F8_MICROBATCH_NOT_FIRST, NULL));
    CHECK_OK(ctx, f8_ctx_download(ctx, c1, ws.data, nw));
    CHECK_OK(ctx, f8_ctx_download(ctx, &sinv1, ws.scale_inv, 4));
    int same = 1;
    for (size_t i = 0; i < nw; i++) same &= c1[i] == f8_fp8_from_float(w[i] * 0.5f, F8_DTYPE_E4M3);
    CHECK(same && sinv1 == 2.0f, "noop flag 0: the workspace is not the cast of the new W (scale_inv %g)", sinv1);
    CHECK_OK(ctx, f8_ctx_set_weight_noop(ctx, 0));
    free(hist);
    f8_ctx_free(ctx, xb), f8_ctx_free(ctx, yb);
    f8_module_destroy(f.lin);
    free(x), free(w), free(b), free(c0), free(c1);
}

int main(void)
{
    char why[256];
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, NULL, why);
    if (!ctx) {
        fprintf(stderr, "cannot create a CPU ctx: %s\n", why);
        return 1;
    }
    test_fp32_exact(ctx, 32, 64, 48);
    test_fp32_exact(ctx, 13, 20, 7);
    test_fp8(ctx, 32, 64, 48, F8_DTYPE_FP32, F8_DTYPE_FP32);
    test_fp8(ctx, 13, 20, 7, F8_DTYPE_FP32, F8_DTYPE_BF16);
    test_fp8(ctx, 64, 128, 32, F8_DTYPE_BF16, F8_DTYPE_BF16);
    test_workspace_regression(ctx);
    test_main_grad(ctx, 1);
    test_main_grad(ctx, 0);
    test_in_flight(ctx);
    test_zero_tokens(ctx, 1);
    test_zero_tokens(ctx, 0);
    test_bad_input(ctx);
    test_weight_noop(ctx);
    f8_ctx_destroy(ctx);
    /* The graph-mode workspace rule is exact on any backend: run it on a GPU too. */
    f8_ctx *gpu = test_ctx(F8_BACKEND_CUDA, NULL, why);
    if (gpu) {
        test_weight_noop(gpu);
        f8_ctx_destroy(gpu);
    } else {
        printf("test_linear: no CUDA ctx (%s): graph-mode check ran on the CPU only\n", why);
    }
    return test_finish("test_linear");
}
