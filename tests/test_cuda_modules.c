/*
 * test_cuda_modules.c — f8_module and f8_module on the CUDA
 * backend against the same modules on the CPU backend: identical parameters
 * (every parameter view copied from the CPU module into the CUDA one, norm
 * and bias parameters set to non-trivial values), the same x, dy (and
 * dln_out), then y, the returned norm output, dx and every parameter
 * gradient, and the scaling slots after each f8_ctx_update_scales; zero
 * tokens; FP8 on odd shapes. The tolerances, and why, are in
 * cuda_modules_tests.h; the workspace regression of TE's PR #820 is
 * test_cuda_modules_workspace.c.
 * F8_TEST_QUICK leaves out the large cases. Without a GPU the program reports
 * itself skipped.
 */
#include "cuda_modules_tests.h"

static void fill_nan(f8_ctx *ctx, void *dst, size_t bytes)
{
    uint8_t *nan = xmalloc(bytes);
    memset(nan, 0xFF, bytes); /* NaN in FP32 and BF16 */
    upload(ctx, dst, nan, bytes);
    free(nan);
}
/* ‖gpu − cpu‖/‖cpu‖ <= tol; the CPU result must be finite (outputs start as
 * NaN, so an element nobody wrote shows). */
static void compare(env *e, int cls, const char *desc, const char *what, const float *gpu, const float *cpu, size_t n,
                    size_t cols, double tol)
{
    if (!n) return;
    double *ref = xmalloc(n * sizeof(double));
    int finite = 1;
    for (size_t i = 0; i < n; i++) {
        ref[i] = cpu[i];
        finite &= isfinite(cpu[i]) != 0;
    }
    double err = rel_error(gpu, ref, n);
    tol += e->flip;
    note(e, cls, err, tol);
    CHECK(err <= tol, "%s %s: ||cuda-cpu||/||cpu|| = %.3g > %.0e", desc, what, err, tol);
    if (!(err <= tol)) report_mismatch(desc, what, gpu, ref, n, cols, tol);
    CHECK(finite, "%s %s: cpu result not finite", desc, what);
    free(ref);
}
static const char *PARAM_NAME[] = {"weight", "bias", "ln_weight", "ln_bias", "fc1_weight", "fc1_bias",
                                   "fc2_weight", "fc2_bias"};
static void mod_create(env *e, mpair *p)
{
    const mcase *mc = &p->mc;
    for (int i = 0; i < 2; i++) {
        f8_ctx *ctx = e->ctx[i];
        if (mc->mlp) {
            f8_layernorm_mlp_config c = f8_layernorm_mlp_config_default(mc->H, mc->N);
            c.normalization = mc->norm, c.zero_centered_gamma = mc->zc, c.activation = mc->act;
            c.param_dtype = mc->param, c.fp8 = mc->fp8, c.max_tokens = mc->T;
            if (f8_layernorm_mlp_create(ctx, &c, &p->mlp[i]) != F8_OK ||
                f8_module_saved_create(p->mlp[i], &p->mlp_saved[i]) != F8_OK)
                die("f8_layernorm_mlp_create", ctx);
        } else {
            f8_layernorm_linear_config c = f8_layernorm_linear_config_default(mc->H, mc->N);
            c.normalization = mc->norm, c.zero_centered_gamma = mc->zc, c.return_layernorm_output = mc->ret_ln;
            c.param_dtype = mc->param, c.fp8 = mc->fp8, c.max_tokens = mc->T;
            if (f8_layernorm_linear_create(ctx, &c, &p->lnl[i]) != F8_OK ||
                f8_module_saved_create(p->lnl[i], &p->lnl_saved[i]) != F8_OK)
                die("f8_layernorm_linear_create", ctx);
        }
    }
}
/* Norm and bias parameters get non-trivial values (gamma around 1, or
 * around 0 when zero-centred; beta and biases small, non-zero: a parameter
 * that is not applied must show); weights keep the CPU module's init. Then
 * every parameter view goes CPU → host → CUDA, so the two are identical. */
static void mod_sync_params(env *e, mpair *p)
{
    f8_param ps[8];
    const int np = mod_params(p, ps);
    for (int k = 0; k < np; k++) {
        f8_tensor v[2];
        for (int i = 0; i < 2; i++) CHECK_OK(e->ctx[i], mod_param(p, i, ps[k], 0, &v[i]));
        const size_t bytes = tensor_bytes(&v[CPU]);
        CHECK(bytes == tensor_bytes(&v[GPU]) && v[CPU].dtype == v[GPU].dtype, "%s views differ", PARAM_NAME[ps[k]]);
        const int is_w = ps[k] == F8_PARAM_WEIGHT || ps[k] == F8_PARAM_FC1_WEIGHT || ps[k] == F8_PARAM_FC2_WEIGHT;
        if (!is_w) {
            const double mean = ps[k] == F8_PARAM_LN_WEIGHT && !p->mc.zc ? 1.0 : 0.0;
            const double sd = ps[k] == F8_PARAM_LN_WEIGHT || ps[k] == F8_PARAM_LN_BIAS ? 0.2 : 0.1;
            void *h = gen(&e->rng, v[CPU].dtype, (size_t)(v[CPU].rows * v[CPU].cols), mean, sd, NULL);
            upload(e->ctx[CPU], v[CPU].data, h, bytes);
            free(h);
        }
        void *host = xmalloc(bytes);
        CHECK_OK(e->ctx[CPU], f8_ctx_download(e->ctx[CPU], host, v[CPU].data, bytes));
        upload(e->ctx[GPU], v[GPU].data, host, bytes);
        free(host);
    }
}
/* Tolerance of a compared quantity (see cuda_modules_tests.h). */
static double mod_tol(const mcase *mc, int q, f8_dtype out, int *cls)
{
    double t;
    *cls = C_FP32;
    if (!mc->fp8) {
        t = TOL_FP32_CHAIN;
    } else if (q == Q_LN) {
        t = TOL_NORM;
    } else if (!mc->mlp) {
        *cls = C_LNL;
        t = q == Q_Y ? TOL_LNL_Y : q == Q_W ? TOL_LNL_WGRAD : q == Q_B ? TOL_DBIAS : TOL_FP8_SPLIT;
    } else {
        const int kink = mc->act == F8_ACT_RELU || mc->act == F8_ACT_REGLU;
        *cls = C_MLP;
        if (q == Q_B2) {
            t = TOL_DBIAS;
        } else if (q == Q_Y || q == Q_W2) {
            t = TOL_MLP_FP8;
        } else if (kink) {
            *cls = C_KINK;
            t = TOL_MLP_KINK;
        } else {
            t = q == Q_B ? TOL_MLP_DB1 : TOL_MLP_FP8;
        }
    }
    if (out == F8_DTYPE_BF16 && t < TOL_BF16) {
        *cls = C_BF16;
        t = TOL_BF16;
    }
    return t;
}
/* Slot tolerance (relative, on every history row, scale and scale_inv);
 * 0: bit-identical. */
static double slot_tol(const mcase *mc, int dir, int k)
{
    if (!mc->fp8) return 0.0;
    if (dir == 0 && k == 0) return mc->ret_ln && mc->x == F8_DTYPE_BF16 ? ldexp(1.0, -7) : TOL_SLOT_NORM;
    if (mc->mlp && ((dir == 0 && k == 3) || (dir == 1 && k == 2))) return TOL_SLOT_ACT;
    return 0.0;
}

static double rel_diff(float a, float b)
{
    if (a == b) return 0.0;
    return fabs((double)a - b) / fmax(fabs((double)a), fabs((double)b));
}

static void compare_slots(env *e, mpair *p, const char *desc)
{
    for (int dir = 0; dir < 2; dir++) {
        const int count = p->mc.mlp ? (dir ? 4 : 6) : (dir ? 2 : 3);
        for (int k = 0; k < count; k++) {
            float s[2], si[2], h[2][HISTORY_LEN];
            for (int i = 0; i < 2; i++) {
                f8_slot slot;
                CHECK_OK(e->ctx[i], mod_slot(p, i, dir, k, &slot));
                CHECK_OK(e->ctx[i], f8_slot_read(e->ctx[i], slot, &s[i], &si[i], h[i]));
            }
            const double tol = slot_tol(&p->mc, dir, k);
            double worst = fmax(rel_diff(s[0], s[1]), rel_diff(si[0], si[1]));
            for (int r = 0; r < HISTORY_LEN; r++) worst = fmax(worst, rel_diff(h[0][r], h[1][r]));
            if (tol > 0) note(e, C_SLOT, worst, tol);
            CHECK(worst <= tol, "%s: slot dir %d #%d differs (rel %.3g, allowed %.1g): scale %.9g/%.9g scale_inv "
                  "%.9g/%.9g amax[0] %.9g/%.9g", desc, dir, k, worst, tol, s[0], s[1], si[0], si[1], h[0][0], h[1][0]);
            for (int i = 0; i < 2; i++)
                CHECK(si[i] == 1.0f / s[i], "%s: slot dir %d #%d on %s: scale_inv %.9g is not 1/scale (%.9g)", desc,
                      dir, k, i ? "cuda" : "cpu", si[i], s[i]);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* CUDA against CPU                                                          */
/* ------------------------------------------------------------------------ */
static void pair_step(env *e, mpair *p, int64_t T, f8_microbatch mb, int with_dln, const char *desc)
{
    const mcase *mc = &p->mc;
    const int64_t H = mc->H, O = mc->mlp ? mc->H : mc->N; /* output features */
    const f8_dtype dyt = mc->fp8 ? mc->y : mc->param;      /* FP8 off: dy in param_dtype */
    const int ret_ln = !mc->mlp && mc->ret_ln;
    void *hx = gen(&e->rng, mc->x, (size_t)(T * H), 0.0, 1.0, NULL);
    void *hdy = gen(&e->rng, dyt, (size_t)(T * O), 0.0, 1.0, NULL);
    void *hdln = gen(&e->rng, mc->x, (size_t)(T * H), 0.0, 0.5, NULL);
    /* the fused residual calls: the residual (y's dtype), the old dx they add to */
    void *hr = gen(&e->rng, mc->y, (size_t)(T * O), 0.0, 1.0, NULL);
    void *hold = gen(&e->rng, mc->x, (size_t)(T * H), 0.0, 1.0, NULL);
    f8_tensor x[2], y[2], ln[2], dy[2], dx[2], dln[2], res[2];
    float *gy[2], *gln[2] = {NULL, NULL}, *gdx[2], *gg[2][8];
    f8_param ps[8];
    const int np = mod_params(p, ps);
    for (int i = 0; i < 2; i++) {
        f8_ctx *ctx = e->ctx[i];
        x[i] = f8_tensor_make(balloc(ctx, (size_t)(T * H) * f8_dtype_size(mc->x)), mc->x, T, H);
        y[i] = f8_tensor_make(balloc(ctx, (size_t)(T * O) * f8_dtype_size(mc->y)), mc->y, T, O);
        ln[i] = f8_tensor_make(balloc(ctx, (size_t)(T * H) * f8_dtype_size(mc->x)), mc->x, T, H);
        dy[i] = f8_tensor_make(balloc(ctx, (size_t)(T * O) * f8_dtype_size(dyt)), dyt, T, O);
        dx[i] = f8_tensor_make(balloc(ctx, (size_t)(T * H) * f8_dtype_size(mc->x)), mc->x, T, H);
        dln[i] = f8_tensor_make(balloc(ctx, (size_t)(T * H) * f8_dtype_size(mc->x)), mc->x, T, H);
        upload(ctx, x[i].data, hx, tensor_bytes(&x[i]));
        upload(ctx, dy[i].data, hdy, tensor_bytes(&dy[i]));
        upload(ctx, dln[i].data, hdln, tensor_bytes(&dln[i]));
        res[i] = f8_tensor_make(balloc(ctx, (size_t)(T * O) * f8_dtype_size(mc->y)), mc->y, T, O);
        upload(ctx, res[i].data, hr, tensor_bytes(&res[i]));
        fill_nan(ctx, y[i].data, tensor_bytes(&y[i]));
        fill_nan(ctx, ln[i].data, tensor_bytes(&ln[i]));
        fill_nan(ctx, dx[i].data, tensor_bytes(&dx[i]));
        if (mc->resid == 2) upload(ctx, y[i].data, hr, tensor_bytes(&y[i])); /* y += the output */
        if (mc->resid) upload(ctx, dx[i].data, hold, tensor_bytes(&dx[i]));  /* dx += the input gradient */
        f8_module *m = mc->mlp ? p->mlp[i] : p->lnl[i];
        f8_saved *sv = mc->mlp ? p->mlp_saved[i] : p->lnl_saved[i];
        if (mc->resid)
            CHECK_OK(ctx, f8_module_forward_add(m, &x[i], &y[i], mc->resid == 2 ? &y[i] : &res[i], mb, sv));
        else
            CHECK_OK(ctx, mod_forward(p, i, &x[i], &y[i], ret_ln ? &ln[i] : NULL, mb));
        if (mc->resid)
            CHECK_OK(ctx, f8_module_backward_add(m, sv, &dy[i], &dx[i]));
        else
            CHECK_OK(ctx, mod_backward(p, i, &dy[i], ret_ln && with_dln ? &dln[i] : NULL, &dx[i]));
        gy[i] = to_host(ctx, &y[i]);
        if (ret_ln) gln[i] = to_host(ctx, &ln[i]);
        gdx[i] = to_host(ctx, &dx[i]);
        grads_to_host(e, p, i, ps, np, gg[i]);
    }
    int cls;
    double tol = mod_tol(mc, Q_Y, mc->y, &cls);
    compare(e, cls, desc, "y", gy[GPU], gy[CPU], (size_t)(T * O), (size_t)O, tol);
    if (ret_ln) {
        tol = mod_tol(mc, Q_LN, mc->x, &cls);
        compare(e, cls, desc, "ln_out", gln[GPU], gln[CPU], (size_t)(T * H), (size_t)H, tol);
    }
    tol = mod_tol(mc, Q_DX, mc->x, &cls);
    compare(e, cls, desc, "dx", gdx[GPU], gdx[CPU], (size_t)(T * H), (size_t)H, tol);
    for (int k = 0; k < np; k++) {
        f8_tensor v;
        CHECK_OK(e->ctx[CPU], mod_param(p, CPU, ps[k], 1, &v));
        char what[48];
        snprintf(what, sizeof what, "%s grad", PARAM_NAME[ps[k]]);
        tol = mod_tol(mc, param_quantity(ps[k]), v.dtype, &cls);
        compare(e, cls, desc, what, gg[GPU][k], gg[CPU][k], (size_t)(v.rows * v.cols), (size_t)v.cols, tol);
    }
    for (int i = 0; i < 2; i++) {
        f8_tensor *all[] = {&x[i], &y[i], &ln[i], &dy[i], &dx[i], &dln[i], &res[i]};
        for (int k = 0; k < NELEM(all); k++) f8_ctx_free(e->ctx[i], all[k]->data);
        free(gy[i]), free(gln[i]), free(gdx[i]);
        for (int k = 0; k < np; k++) free(gg[i][k]);
    }
    free(hx), free(hdy), free(hdln), free(hr), free(hold);
}

/* T = 0: nothing is written but the weight casts, so no gradient moves and
 * the slots still agree after an update. */
static void pair_zero_tokens(env *e, mpair *p, const char *desc)
{
    const mcase *mc = &p->mc;
    f8_param ps[8];
    const int np = mod_params(p, ps);
    for (int i = 0; i < 2; i++) {
        f8_ctx *ctx = e->ctx[i];
        float *g0[8], *g1[8];
        grads_to_host(e, p, i, ps, np, g0);
        void *buf = balloc(ctx, 256);
        const int64_t O = mc->mlp ? mc->H : mc->N;
        f8_tensor x = f8_tensor_make(buf, mc->x, 0, mc->H), y = f8_tensor_make(buf, mc->y, 0, O);
        f8_tensor ln = f8_tensor_make(buf, mc->x, 0, mc->H), dx = f8_tensor_make(buf, mc->x, 0, mc->H);
        f8_tensor dy = f8_tensor_make(buf, mc->fp8 ? mc->y : mc->param, 0, O);
        CHECK_OK(ctx, mod_forward(p, i, &x, &y, !mc->mlp && mc->ret_ln ? &ln : NULL, F8_MICROBATCH_NONE));
        CHECK_OK(ctx, mod_backward(p, i, &dy, NULL, &dx));
        grads_to_host(e, p, i, ps, np, g1);
        for (int k = 0; k < np; k++) {
            f8_tensor v;
            CHECK_OK(ctx, mod_param(p, i, ps[k], 1, &v));
            CHECK(memcmp(g0[k], g1[k], (size_t)(v.rows * v.cols) * sizeof(float)) == 0,
                  "%s zero tokens: %s changed the %s gradient", desc, i == CPU ? "cpu" : "cuda", PARAM_NAME[ps[k]]);
            free(g0[k]), free(g1[k]);
        }
        f8_ctx_free(ctx, buf);
    }
    for (int i = 0; i < 2; i++) CHECK_OK(e->ctx[i], f8_ctx_update_scales(e->ctx[i], F8_DIR_FORWARD));
    compare_slots(e, p, desc);
}

static const char *ACT_NAME[7] = {"gelu", "relu", "geglu", "reglu", "swiglu", "qgelu", "srelu"};

static void run_case(env *e, const mcase *mc)
{
    /* NOT_FIRST on fresh workspaces (filled anyway), FIRST, NOT_FIRST, NONE */
    static const f8_microbatch seq[4] = {F8_MICROBATCH_NOT_FIRST, F8_MICROBATCH_FIRST, F8_MICROBATCH_NOT_FIRST,
                                         F8_MICROBATCH_NONE};
    char desc[200] = "";
    mpair p;
    memset(&p, 0, sizeof p);
    p.mc = *mc;
    mod_create(e, &p);
    mod_sync_params(e, &p);
    for (int s = 0; s < mc->steps; s++) {
        f8_microbatch mb = seq[s % 4];
        if (mc->mlp)
            snprintf(desc, sizeof desc,
                     "mlp T%lld H%lld F%lld %s fp8 %d param %s x %s y %s %s zc %d resid %d step %d mb %d",
                     (long long)mc->T, (long long)mc->H, (long long)mc->N, ACT_NAME[mc->act], mc->fp8,
                     f8_dtype_name(mc->param), f8_dtype_name(mc->x), f8_dtype_name(mc->y),
                     mc->norm == F8_NORM_RMSNORM ? "rms" : "ln", mc->zc, mc->resid, s, (int)mb);
        else
            snprintf(desc, sizeof desc,
                     "lnlinear T%lld K%lld N%lld fp8 %d param %s x %s y %s %s zc %d ret_ln %d resid %d step %d mb %d",
                     (long long)mc->T, (long long)mc->H, (long long)mc->N, mc->fp8, f8_dtype_name(mc->param),
                     f8_dtype_name(mc->x), f8_dtype_name(mc->y), mc->norm == F8_NORM_RMSNORM ? "rms" : "ln", mc->zc,
                     mc->ret_ln, mc->resid, s, (int)mb);
        pair_step(e, &p, mc->T, mb, s % 2 == 0, desc);
        for (int i = 0; i < 2; i++) {
            CHECK_OK(e->ctx[i], f8_ctx_update_scales(e->ctx[i], F8_DIR_FORWARD));
            CHECK_OK(e->ctx[i], f8_ctx_update_scales(e->ctx[i], F8_DIR_BACKWARD));
        }
        compare_slots(e, &p, desc);
    }
    if (mc->zero_tokens) pair_zero_tokens(e, &p, desc);
    mod_destroy(&p);
}

static void test_against_cpu(env *e)
{
    const f8_dtype F = F8_DTYPE_FP32, B = F8_DTYPE_BF16;
    const f8_norm LN = F8_NORM_LAYERNORM, RMS = F8_NORM_RMSNORM;
    const mcase cases[] = {
        /* mlp  T    H     N   fp8 param x  y  norm zc ret act            steps zero */
        {0, 32, 64, 48, 1, F, F, F, LN, 0, 0, F8_ACT_GELU, 4, 1, 0},
        {0, 13, 40, 24, 1, F, B, F, RMS, 1, 0, F8_ACT_GELU, 4, 0, 0},
        {0, 128, 256, 512, 1, B, B, B, LN, 1, 1, F8_ACT_GELU, 4, 1, 0},
        {0, 13, 677, 33, 1, F, F, B, RMS, 0, 1, F8_ACT_GELU, 4, 1, 0},
        {0, 64, 128, 96, 0, F, F, F, LN, 0, 1, F8_ACT_GELU, 3, 1, 0},
        {0, 13, 40, 24, 0, B, B, B, RMS, 1, 0, F8_ACT_GELU, 3, 1, 0},
        {1, 32, 64, 96, 1, F, F, F, LN, 0, 0, F8_ACT_GELU, 4, 1, 0},
        {1, 13, 40, 56, 1, F, B, F, RMS, 1, 0, F8_ACT_SWIGLU, 4, 0, 0},
        {1, 64, 128, 192, 1, B, B, B, LN, 1, 0, F8_ACT_RELU, 4, 1, 0},
        {1, 32, 64, 96, 0, F, F, F, LN, 0, 0, F8_ACT_GELU, 3, 1, 0},
        {1, 13, 40, 56, 0, B, B, B, RMS, 0, 0, F8_ACT_SWIGLU, 3, 0, 0},
        {1, 32, 64, 96, 0, F, F, F, RMS, 1, 0, F8_ACT_RELU, 3, 0, 0},
        /* the larger ones (left out under F8_TEST_QUICK) */
        {0, 512, 1024, 4096, 1, B, B, B, LN, 0, 0, F8_ACT_GELU, 1, 0, 0},
        {1, 512, 1024, 4096, 1, B, B, B, LN, 0, 0, F8_ACT_GELU, 2, 0, 0},
        /* the fused residual (f8_module_forward_add, _backward_add): cuBLASLt's
         * C apart from D and in place, the norm backward's dx accumulate in its
         * register, fast (x BF16, aligned rows) and wide (H > 8192) kernels,
         * odd shapes (C copied into D, the padded GEMM accumulating), FP8 off */
        {0, 128, 256, 512, 1, B, B, B, LN, 0, 0, F8_ACT_GELU, 3, 0, 1},
        {0, 64, 128, 96, 1, F, F, F, RMS, 1, 0, F8_ACT_GELU, 2, 0, 2},
        {0, 13, 40, 24, 1, F, B, B, LN, 0, 0, F8_ACT_GELU, 2, 0, 1},
        {0, 16, 9000, 32, 1, F, F, F, LN, 0, 0, F8_ACT_GELU, 2, 0, 1},
        {0, 32, 64, 48, 0, B, B, B, LN, 0, 0, F8_ACT_GELU, 2, 0, 2},
        {1, 64, 128, 192, 1, B, B, B, LN, 0, 0, F8_ACT_GELU, 3, 0, 1},
        {1, 64, 128, 192, 1, B, B, B, RMS, 1, 0, F8_ACT_SWIGLU, 2, 0, 2},
        {1, 13, 40, 56, 1, F, F, F, LN, 0, 0, F8_ACT_RELU, 2, 0, 1},
        {1, 32, 64, 96, 0, F, F, F, LN, 0, 0, F8_ACT_GELU, 2, 0, 2},
        {1, 13, 40, 56, 0, B, B, B, RMS, 0, 0, F8_ACT_SWIGLU, 2, 0, 1},
    };
    for (int c = 0; c < NELEM(cases); c++)
        if (!e->quick || cases[c].T * cases[c].H * cases[c].N < ((int64_t)1 << 26)) run_case(e, &cases[c]);
    /* every activation, FP8 and FP32, at a small shape */
    for (int act = 0; act < 7; act++)
        for (int fp8 = 0; fp8 < 2; fp8++) {
            mcase mc = {1, 16, 32, 48, fp8, F, F, F, act & 1 ? RMS : LN, act == 5, 0, (f8_activation)act, 2, 0, 0};
            run_case(e, &mc);
        }
}

/* FP8 on odd shapes (issues 13, 16): in / hidden and out / ffn features 1,
 * 17, 33 and 250 with 1, 5 and 7 tokens, as the CPU tests run odd shapes.
 * None is a multiple of 16, so every GEMM here runs on gemm.cu's zero-padded
 * copies in the module's workspace (cuBLASLt on the padded shape, the
 * operands' own scale_invs; padding adds exact zeros).
 * The FP8 inputs of the GEMMs come from the norm and the activation, whose
 * FP32 inputs differ between the backends by ~1e-6: a code may flip (p ~
 * 1e-5 per element), and in tensors this small one flip of a relative 2^-3
 * (E4M3) or 2^-2 (E5M2) moves a result by up to 2^-2/sqrt(T·min(H, N)) in
 * norm. That much is added to every bound here (e->flip): a wrong element
 * still shows, as it moves a result by ~1/sqrt(n), and a wrong row or
 * column by far more. */
static void test_odd_shapes(env *e)
{
    const f8_dtype F = F8_DTYPE_FP32, B = F8_DTYPE_BF16;
    static const int64_t feats[4] = {1, 17, 33, 250}, toks[3] = {1, 5, 7};
    int n = 0;
    for (int mlp = 0; mlp < 2; mlp++)
        for (int h = 0; h < 4; h++)
            for (int o = 0; o < 4; o++)
                for (int t = 0; t < 3; t++, n++) {
                    const f8_norm norm = n % 2 ? F8_NORM_RMSNORM : F8_NORM_LAYERNORM;
                    const f8_dtype param = n % 3 ? F : B, x = n % 4 ? F : B, y = n % 5 ? F : B;
                    mcase mc = {mlp, toks[t], feats[h], feats[o], 1, param, x, y, norm, n % 3 == 1,
                                !mlp && n % 4 == 1, (f8_activation)(n % 7), 2, 0, 0};
                    const int64_t small = feats[h] < feats[o] ? feats[h] : feats[o];
                    e->flip = 0.25 / sqrt((double)(toks[t] * small));
                    run_case(e, &mc);
                }
    /* Issue 16: shapes large enough for gemm.cu's padded path (operands
     * zero-padded to k % 16 == 0, D padded and sliced back), primes, and a
     * tied LM head (LayerNormLinear, N = 50257) scaled down by 8. */
    const mcase big[] = {
        {0, 37, 257, 520, 1, F, F, F, F8_NORM_LAYERNORM, 0, 0, F8_ACT_GELU, 2, 0, 0},
        {1, 37, 257, 520, 1, F, F, F, F8_NORM_RMSNORM, 0, 0, F8_ACT_SWIGLU, 2, 0, 0},
        {1, 64, 131, 1009, 1, B, B, B, F8_NORM_LAYERNORM, 1, 0, F8_ACT_GELU, 2, 0, 0},
        {0, 256, 96, 6283, 1, F, F, B, F8_NORM_LAYERNORM, 0, 1, F8_ACT_GELU, 2, 0, 0},
        {0, 4095, 48, 40, 1, F, F, F, F8_NORM_RMSNORM, 0, 0, F8_ACT_GELU, 2, 0, 0},
    };
    for (size_t c = 0; c < sizeof big / sizeof big[0]; c++) {
        const int64_t small = big[c].H < big[c].N ? big[c].H : big[c].N;
        e->flip = 0.25 / sqrt((double)(big[c].T * small));
        run_case(e, &big[c]);
    }
    e->flip = 0.0;
}

int main(void)
{
    static void (*const tests[])(env *) = {test_against_cpu, test_odd_shapes};
    return modules_run("test_cuda_modules", tests, NELEM(tests));
}
