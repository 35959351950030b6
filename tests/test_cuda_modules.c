/*
 * test_cuda_modules.c — f8_module and f8_module on the CUDA
 * backend against the same modules on the CPU backend: identical parameters
 * (every parameter view copied from the CPU module into the CUDA one, norm
 * and bias parameters set to non-trivial values), the same x, dy (and
 * dln_out), then y, the returned norm output, dx and every parameter
 * gradient, and the scaling slots after each f8_ctx_update_scales. Then, on
 * each backend, the workspace regression of TE's PR #820 for the
 * LayerNormLinear weight and both LayerNormMLP weights (FIRST, a scale
 * update, NOT_FIRST: the workspaces' codes and scale_inv stay, and y and the
 * gradients match a float64 oracle built from the downloaded dequantized
 * workspaces), and zero tokens.
 *
 * Why the tolerances (‖cuda − cpu‖/‖cpu‖) are what they are. Bounds inherited
 * from test_cuda_linear: FP8 fprop with fast accumulation 2e-3, FP8
 * dgrad/wgrad (split accumulation, identical operands) 5e-4, FP32 GEMMs 1e-5,
 * any BF16 result 1e-2 (one BF16 rounding each side). What is new here is
 * that an FP8 operand can now come out of a kernel whose FP32 input already
 * differs between the backends, so its codes are not identical:
 *  - A code flips where |Δv| crosses a rounding point: per element with
 *    probability |Δv|/spacing, moving the value by one spacing, so the
 *    quantized tensor differs by ≈ sqrt(relΔ·spacing) in norm (E4M3's
 *    relative spacing is at most 2^-3, E5M2's 2^-2).
 *  - LayerNormLinear: the norm output differs by ~1e-6 (test_cuda_norm_act),
 *    so its E4M3 codes differ by sqrt(1e-6·2^-3) ≈ 3.5e-4: y 2e-3 + that → 3e-3
 *    (TOL_LNL_Y); wgrad (which reads the saved FP8 norm output) 5e-4 + that →
 *    1e-3 (TOL_LNL_WGRAD). dgrad reads dy's codes (identical) and the
 *    workspace (identical): dx and the norm parameter grads keep 5e-4.
 *  - LayerNormMLP: fc1's output h1 differs by up to the fast-accumulation
 *    bound 2e-3, so the activation's E4M3 codes differ by sqrt(2e-3·2^-3) ≈
 *    1.6e-2 and the d-activation's E5M2 codes by sqrt(2e-3·2^-2) ≈ 2.2e-2;
 *    everything downstream (y, dW2 through the saved activation, dW1, dx,
 *    the norm grads) is held to 3e-2 (TOL_MLP_FP8). db1 is the sum of the
 *    unquantized d-activation: act'(h1) moves with h1, 5e-3 (TOL_MLP_DB1).
 *  - ReLU and ReGLU have a kink at 0: where h1's sign differs between the
 *    backends (probability ~0.8·relΔ per element, so ~1.6e-3) an element of
 *    the d-activation is dy on one side and 0 on the other: sqrt(1.6e-3)
 *    = 4e-2 on top, so their backward quantities get 6e-2 (TOL_MLP_KINK).
 *  - FP32 modules chain up to four ops (norm, GEMM, activation, GEMM), each
 *    within ~5e-6: 2e-5 (TOL_FP32_CHAIN).
 *  - Bias gradients from dy's fused cast: column sums in each backend's
 *    order, 1e-4 as in test_cuda_linear.
 *  - Slots: amax (and the scales derived from it) bit-identical where the
 *    amax comes from identical inputs (weights, dy); norm-output amax within
 *    1e-5 relative (2^-7 when it is taken from a BF16 norm output); amaxes of
 *    the activation and the d-activation within 1e-2 (h1's fast-accumulation
 *    difference at their largest element, doubled by SReLU's square).
 * The bounds built on the 2e-3 fast-accumulation bound were checked without
 * a GPU by emulation: multiplying every element of the CPU's fprop FP8 GEMM
 * outputs by (1 + 2e-3·N(0,1)) on one side of a CPU-CPU pair gave at most
 * 0.91 of TOL_MLP_FP8, 0.38 of TOL_MLP_KINK, 0.70 of the LayerNormLinear
 * bounds, 0.86 of the slot bounds, 0.67 against the regression oracle
 * (small tensors, where one flipped code weighs most, set the worst). They
 * are loose if the measured fast-accumulation error is smaller; the program
 * prints the worst err/tol of each class so they can be tightened from a GPU
 * run.
 * F8_TEST_QUICK leaves out the large cases. Without a GPU the program reports
 * itself skipped.
 */
#include <float.h>

#include "check.h"

enum { CPU = 0, GPU = 1 };
#define HISTORY_LEN 16
#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

#define TOL_FP32_CHAIN 2e-5
#define TOL_NORM 1e-5
#define TOL_FAST 2e-3
#define TOL_FP8_SPLIT 5e-4
#define TOL_BF16 1e-2
#define TOL_DBIAS 1e-4
#define TOL_LNL_Y 3e-3
#define TOL_LNL_WGRAD 1e-3
#define TOL_MLP_FP8 3e-2
#define TOL_MLP_DB1 5e-3
#define TOL_MLP_KINK 6e-2
#define TOL_SLOT_NORM 1e-5
#define TOL_SLOT_ACT 1e-2

/* Tolerance classes, for the worst err/tol report. */
enum { C_FP32, C_BF16, C_LNL, C_MLP, C_KINK, C_SLOT, C_ORACLE, C_COUNT };
static const char *CLASS_NAME[C_COUNT] = {"fp32", "bf16", "lnlinear-fp8", "mlp-fp8", "mlp-kink", "slots", "oracle"};

typedef struct env {
    f8_ctx *ctx[2];
    test_rng rng;
    int quick;
    double worst[C_COUNT];
    double flip; /* extra tolerance of the odd-shape sweep: one flipped FP8 code (test_odd_shapes) */
} env;

static void *balloc(f8_ctx *ctx, size_t bytes)
{
    void *p = NULL;
    if (f8_ctx_alloc(ctx, bytes ? bytes : 1, &p) != F8_OK) die("f8_ctx_alloc", ctx);
    return p;
}

static void upload(f8_ctx *ctx, void *dst, const void *src, size_t bytes)
{
    if (bytes) CHECK_OK(ctx, f8_ctx_upload(ctx, dst, src, bytes));
}

static size_t tensor_bytes(const f8_tensor *t) { return (size_t)(t->rows * t->cols) * f8_dtype_size(t->dtype); }

static float *to_host(f8_ctx *ctx, const f8_tensor *t)
{
    size_t n = (size_t)(t->rows * t->cols), bytes = tensor_bytes(t);
    void *raw = xmalloc(bytes);
    float *out = xmalloc(n * sizeof(float));
    if (bytes) CHECK_OK(ctx, f8_ctx_download(ctx, raw, t->data, bytes));
    for (size_t i = 0; i < n; i++)
        out[i] = t->dtype == F8_DTYPE_BF16 ? f8_bf16_to_float(((uint16_t *)raw)[i]) : ((float *)raw)[i];
    free(raw);
    return out;
}

/* Host data of n values mean + N(0,1)·sd in dtype (FP32 or BF16); `vals`
 * (may be NULL) receives what a kernel reads back. */
static void *gen(test_rng *r, f8_dtype dt, size_t n, double mean, double sd, float *vals)
{
    void *p = xmalloc(n * f8_dtype_size(dt) + 4);
    for (size_t i = 0; i < n; i++) {
        float v = (float)(mean + rng_normal(r) * sd);
        if (dt == F8_DTYPE_BF16) {
            ((uint16_t *)p)[i] = f8_bf16_from_float(v);
            v = f8_bf16_to_float(((uint16_t *)p)[i]);
        } else {
            ((float *)p)[i] = v;
        }
        if (vals) vals[i] = v;
    }
    return p;
}

static void fill_nan(f8_ctx *ctx, void *dst, size_t bytes)
{
    uint8_t *nan = xmalloc(bytes);
    memset(nan, 0xFF, bytes); /* NaN in FP32 and BF16 */
    upload(ctx, dst, nan, bytes);
    free(nan);
}

static void note(env *e, int cls, double err, double tol)
{
    double r = isnan(err) ? INFINITY : err / tol;
    if (r > e->worst[cls]) e->worst[cls] = r;
}

/* ‖gpu − cpu‖/‖cpu‖ <= tol; the CPU result must be finite (outputs start as
 * NaN, so an element nobody wrote shows). */
static void compare(env *e, int cls, const char *desc, const char *what, const float *gpu, const float *cpu, size_t n,
                    double tol)
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
    CHECK(finite, "%s %s: cpu result not finite", desc, what);
    free(ref);
}

/* ------------------------------------------------------------------------ */
/* One description for both modules                                          */
/* ------------------------------------------------------------------------ */

typedef struct mcase {
    int mlp;                 /* 0 LayerNormLinear, 1 LayerNormMLP */
    int64_t T, H, N;         /* tokens, in (hidden), out (LNLinear) or ffn (MLP) */
    int fp8;
    f8_dtype param, x, y;
    f8_norm norm;
    int zc;
    int ret_ln;              /* LNLinear: return_layernorm_output */
    f8_activation act;       /* MLP */
    int steps, zero_tokens;
} mcase;

typedef struct mpair {
    mcase mc;
    f8_module *lnl[2];
    f8_saved *lnl_saved[2];
    f8_module *mlp[2];
    f8_saved *mlp_saved[2];
} mpair;

static const f8_param LNL_PARAMS[] = {F8_PARAM_WEIGHT, F8_PARAM_BIAS, F8_PARAM_LN_WEIGHT, F8_PARAM_LN_BIAS};
static const f8_param MLP_PARAMS[] = {F8_PARAM_LN_WEIGHT,  F8_PARAM_LN_BIAS,  F8_PARAM_FC1_WEIGHT,
                                      F8_PARAM_FC1_BIAS,   F8_PARAM_FC2_WEIGHT, F8_PARAM_FC2_BIAS};
static const char *PARAM_NAME[] = {"weight", "bias", "ln_weight", "ln_bias", "fc1_weight", "fc1_bias",
                                   "fc2_weight", "fc2_bias"};

static f8_status mod_param(mpair *p, int i, f8_param which, int grad, f8_tensor *v)
{
    return p->mc.mlp ? f8_module_param(p->mlp[i], which, grad, v)
                     : f8_module_param(p->lnl[i], which, grad, v);
}

/* The parameters this module has (no LN_BIAS with RMSNorm). */
static int mod_params(const mpair *p, f8_param *out)
{
    int n = 0;
    const f8_param *all = p->mc.mlp ? MLP_PARAMS : LNL_PARAMS;
    const int count = p->mc.mlp ? NELEM(MLP_PARAMS) : NELEM(LNL_PARAMS);
    for (int k = 0; k < count; k++)
        if (!(all[k] == F8_PARAM_LN_BIAS && p->mc.norm == F8_NORM_RMSNORM)) out[n++] = all[k];
    return n;
}

static f8_status mod_slot(mpair *p, int i, int dir, int k, f8_slot *s)
{
    return p->mc.mlp ? f8_module_slot(p->mlp[i], (f8_direction)dir, k, s)
                     : f8_module_slot(p->lnl[i], (f8_direction)dir, k, s);
}

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

static void mod_destroy(mpair *p)
{
    for (int i = 0; i < 2; i++) {
        f8_saved_destroy(p->lnl_saved[i]);
        f8_module_destroy(p->lnl[i]);
        f8_saved_destroy(p->mlp_saved[i]);
        f8_module_destroy(p->mlp[i]);
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

/* Tolerance of a compared quantity (see the file comment). */
enum { Q_Y, Q_LN, Q_DX, Q_W, Q_B, Q_W2, Q_B2, Q_LN_GRAD };

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

static int param_quantity(f8_param w)
{
    switch (w) {
    case F8_PARAM_WEIGHT:
    case F8_PARAM_FC1_WEIGHT: return Q_W;
    case F8_PARAM_BIAS:
    case F8_PARAM_FC1_BIAS: return Q_B;
    case F8_PARAM_FC2_WEIGHT: return Q_W2;
    case F8_PARAM_FC2_BIAS: return Q_B2;
    default: return Q_LN_GRAD;
    }
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

static f8_status mod_forward(mpair *p, int i, const f8_tensor *x, f8_tensor *y, f8_tensor *ln, f8_microbatch mb)
{
    return p->mc.mlp ? f8_module_forward(p->mlp[i], x, y, mb, p->mlp_saved[i])
                     : f8_layernorm_linear_forward(p->lnl[i], x, y, ln, mb, p->lnl_saved[i]);
}

static f8_status mod_backward(mpair *p, int i, const f8_tensor *dy, const f8_tensor *dln, f8_tensor *dx)
{
    return p->mc.mlp ? f8_module_backward(p->mlp[i], p->mlp_saved[i], dy, dx)
                     : f8_layernorm_linear_backward(p->lnl[i], p->lnl_saved[i], dy, dln, dx);
}

/* Every parameter gradient, downloaded: g[k] for params ps[k]. */
static void grads_to_host(env *e, mpair *p, int i, const f8_param *ps, int np, float **g)
{
    for (int k = 0; k < np; k++) {
        f8_tensor v;
        CHECK_OK(e->ctx[i], mod_param(p, i, ps[k], 1, &v));
        g[k] = to_host(e->ctx[i], &v);
    }
}

static void pair_step(env *e, mpair *p, int64_t T, f8_microbatch mb, int with_dln, const char *desc)
{
    const mcase *mc = &p->mc;
    const int64_t H = mc->H, O = mc->mlp ? mc->H : mc->N; /* output features */
    const f8_dtype dyt = mc->fp8 ? mc->y : mc->param;      /* FP8 off: dy in param_dtype */
    const int ret_ln = !mc->mlp && mc->ret_ln;
    void *hx = gen(&e->rng, mc->x, (size_t)(T * H), 0.0, 1.0, NULL);
    void *hdy = gen(&e->rng, dyt, (size_t)(T * O), 0.0, 1.0, NULL);
    void *hdln = gen(&e->rng, mc->x, (size_t)(T * H), 0.0, 0.5, NULL);
    f8_tensor x[2], y[2], ln[2], dy[2], dx[2], dln[2];
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
        fill_nan(ctx, y[i].data, tensor_bytes(&y[i]));
        fill_nan(ctx, ln[i].data, tensor_bytes(&ln[i]));
        fill_nan(ctx, dx[i].data, tensor_bytes(&dx[i]));
        CHECK_OK(ctx, mod_forward(p, i, &x[i], &y[i], ret_ln ? &ln[i] : NULL, mb));
        CHECK_OK(ctx, mod_backward(p, i, &dy[i], ret_ln && with_dln ? &dln[i] : NULL, &dx[i]));
        gy[i] = to_host(ctx, &y[i]);
        if (ret_ln) gln[i] = to_host(ctx, &ln[i]);
        gdx[i] = to_host(ctx, &dx[i]);
        grads_to_host(e, p, i, ps, np, gg[i]);
    }
    int cls;
    double tol = mod_tol(mc, Q_Y, mc->y, &cls);
    compare(e, cls, desc, "y", gy[GPU], gy[CPU], (size_t)(T * O), tol);
    if (ret_ln) {
        tol = mod_tol(mc, Q_LN, mc->x, &cls);
        compare(e, cls, desc, "ln_out", gln[GPU], gln[CPU], (size_t)(T * H), tol);
    }
    tol = mod_tol(mc, Q_DX, mc->x, &cls);
    compare(e, cls, desc, "dx", gdx[GPU], gdx[CPU], (size_t)(T * H), tol);
    for (int k = 0; k < np; k++) {
        f8_tensor v;
        CHECK_OK(e->ctx[CPU], mod_param(p, CPU, ps[k], 1, &v));
        char what[48];
        snprintf(what, sizeof what, "%s grad", PARAM_NAME[ps[k]]);
        tol = mod_tol(mc, param_quantity(ps[k]), v.dtype, &cls);
        compare(e, cls, desc, what, gg[GPU][k], gg[CPU][k], (size_t)(v.rows * v.cols), tol);
    }
    for (int i = 0; i < 2; i++) {
        f8_tensor *all[] = {&x[i], &y[i], &ln[i], &dy[i], &dx[i], &dln[i]};
        for (int k = 0; k < NELEM(all); k++) f8_ctx_free(e->ctx[i], all[k]->data);
        free(gy[i]), free(gln[i]), free(gdx[i]);
        for (int k = 0; k < np; k++) free(gg[i][k]);
    }
    free(hx), free(hdy), free(hdln);
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
            snprintf(desc, sizeof desc, "mlp T%lld H%lld F%lld %s fp8 %d param %s x %s y %s %s zc %d step %d mb %d",
                     (long long)mc->T, (long long)mc->H, (long long)mc->N, ACT_NAME[mc->act], mc->fp8,
                     f8_dtype_name(mc->param), f8_dtype_name(mc->x), f8_dtype_name(mc->y),
                     mc->norm == F8_NORM_RMSNORM ? "rms" : "ln", mc->zc, s, (int)mb);
        else
            snprintf(desc, sizeof desc, "lnlinear T%lld K%lld N%lld fp8 %d param %s x %s y %s %s zc %d ret_ln %d step %d mb %d",
                     (long long)mc->T, (long long)mc->H, (long long)mc->N, mc->fp8, f8_dtype_name(mc->param),
                     f8_dtype_name(mc->x), f8_dtype_name(mc->y), mc->norm == F8_NORM_RMSNORM ? "rms" : "ln", mc->zc,
                     mc->ret_ln, s, (int)mb);
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
        {0, 32, 64, 48, 1, F, F, F, LN, 0, 0, F8_ACT_GELU, 4, 1},
        {0, 13, 40, 24, 1, F, B, F, RMS, 1, 0, F8_ACT_GELU, 4, 0},
        {0, 128, 256, 512, 1, B, B, B, LN, 1, 1, F8_ACT_GELU, 4, 1},
        {0, 13, 677, 33, 1, F, F, B, RMS, 0, 1, F8_ACT_GELU, 4, 1},
        {0, 64, 128, 96, 0, F, F, F, LN, 0, 1, F8_ACT_GELU, 3, 1},
        {0, 13, 40, 24, 0, B, B, B, RMS, 1, 0, F8_ACT_GELU, 3, 1},
        {1, 32, 64, 96, 1, F, F, F, LN, 0, 0, F8_ACT_GELU, 4, 1},
        {1, 13, 40, 56, 1, F, B, F, RMS, 1, 0, F8_ACT_SWIGLU, 4, 0},
        {1, 64, 128, 192, 1, B, B, B, LN, 1, 0, F8_ACT_RELU, 4, 1},
        {1, 32, 64, 96, 0, F, F, F, LN, 0, 0, F8_ACT_GELU, 3, 1},
        {1, 13, 40, 56, 0, B, B, B, RMS, 0, 0, F8_ACT_SWIGLU, 3, 0},
        {1, 32, 64, 96, 0, F, F, F, RMS, 1, 0, F8_ACT_RELU, 3, 0},
        /* the larger ones (left out under F8_TEST_QUICK) */
        {0, 512, 1024, 4096, 1, B, B, B, LN, 0, 0, F8_ACT_GELU, 1, 0},
        {1, 512, 1024, 4096, 1, B, B, B, LN, 0, 0, F8_ACT_GELU, 2, 0},
    };
    for (int c = 0; c < NELEM(cases); c++)
        if (!e->quick || cases[c].T * cases[c].H * cases[c].N < ((int64_t)1 << 26)) run_case(e, &cases[c]);
    /* every activation, FP8 and FP32, at a small shape */
    for (int act = 0; act < 7; act++)
        for (int fp8 = 0; fp8 < 2; fp8++) {
            mcase mc = {1, 16, 32, 48, fp8, F, F, F, act & 1 ? RMS : LN, act == 5, 0, (f8_activation)act, 2, 0};
            run_case(e, &mc);
        }
}

/* FP8 on odd shapes (issue 13): in / hidden and out / ffn features 1, 17, 33
 * and 250 with 1, 5 and 7 tokens, as the CPU tests run odd shapes. None is a
 * multiple of 16, so every GEMM here takes gemm.cu's fallback kernel (FP32
 * accumulation of the exactly decoded codes, the operands' own scale_invs).
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
                                !mlp && n % 4 == 1, (f8_activation)(n % 7), 2, 0};
                    const int64_t small = feats[h] < feats[o] ? feats[h] : feats[o];
                    e->flip = 0.25 / sqrt((double)(toks[t] * small));
                    run_case(e, &mc);
                }
    e->flip = 0.0;
}

/* ------------------------------------------------------------------------ */
/* The workspace regression (#820) on one backend, against float64           */
/* ------------------------------------------------------------------------ */

static double qdq(double v, float scale, f8_dtype dt)
{
    return (double)(f8_fp8_to_float(f8_fp8_from_float((float)v * scale, dt), dt) * (1.0f / scale));
}

/* float64 act (base function on a) and its derivative. */
static double act_ref(f8_activation act, double x, double *deriv)
{
    const double k = 0.79788456, c = 0.044715;
    switch (act) {
    case F8_ACT_GELU:
    case F8_ACT_GEGLU: {
        double t = tanh(k * (x + c * x * x * x));
        *deriv = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x);
        return 0.5 * x * (1 + t);
    }
    case F8_ACT_SWIGLU: {
        double s = 1 / (1 + exp(-x));
        *deriv = s * (1 + x * (1 - s));
        return x * s;
    }
    case F8_ACT_QGELU: {
        double s = 1 / (1 + exp(-1.702 * x));
        *deriv = s + 1.702 * x * s * (1 - s);
        return x * s;
    }
    case F8_ACT_SRELU:
        *deriv = x > 0 ? 2 * x : 0.0;
        return x > 0 ? x * x : 0.0;
    default:
        *deriv = x > 0 ? 1.0 : 0.0;
        return x > 0 ? x : 0.0;
    }
}

/* The float64 norm of x [T, K] (LayerNorm, gamma g, beta b): ln, and the
 * statistics the backward needs. */
static void ref_norm(const float *x, int64_t T, int64_t K, const float *g, const float *b, double eps, double *ln,
                     double *mu, double *rs)
{
    for (int64_t t = 0; t < T; t++) {
        double s = 0, q = 0;
        for (int64_t k = 0; k < K; k++) s += x[t * K + k];
        mu[t] = s / (double)K;
        for (int64_t k = 0; k < K; k++) q += (x[t * K + k] - mu[t]) * (x[t * K + k] - mu[t]);
        rs[t] = 1 / sqrt(q / (double)K + eps);
        for (int64_t k = 0; k < K; k++) ln[t * K + k] = (x[t * K + k] - mu[t]) * rs[t] * g[k] + b[k];
    }
}

/* dx of the LayerNorm from dln (float64). */
static void ref_norm_bwd(const float *x, int64_t T, int64_t K, const float *g, const double *mu, const double *rs,
                         const double *dln, double *dx)
{
    for (int64_t t = 0; t < T; t++) {
        double m1 = 0, m2 = 0;
        for (int64_t k = 0; k < K; k++) {
            double xh = (x[t * K + k] - mu[t]) * rs[t], gd = g[k] * dln[t * K + k];
            m1 += gd, m2 += gd * xh;
        }
        m1 /= (double)K, m2 /= (double)K;
        for (int64_t k = 0; k < K; k++) {
            double xh = (x[t * K + k] - mu[t]) * rs[t], gd = g[k] * dln[t * K + k];
            dx[t * K + k] = rs[t] * (gd - m1 - xh * m2);
        }
    }
}

/* D[m, n] = Σ_k A[m, k]·B[n, k] (+ bias[n]), float64. */
static void ref_gemm(const double *a, const double *b, const float *bias, int64_t M, int64_t N, int64_t K, double *d)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double acc = bias ? bias[n] : 0.0;
            for (int64_t k = 0; k < K; k++) acc += a[m * K + k] * b[n * K + k];
            d[m * N + n] = acc;
        }
}

static double *transposed(const double *a, int64_t R, int64_t C)
{
    double *t = xmalloc((size_t)(R * C) * sizeof(double) + 8);
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) t[c * R + r] = a[r * C + c];
    return t;
}

static float slot_state(f8_ctx *ctx, mpair *p, int i, int dir, int k, float *amax0)
{
    f8_slot slot;
    float s = 0, h[HISTORY_LEN] = {0};
    CHECK_OK(ctx, mod_slot(p, i, dir, k, &slot));
    CHECK_OK(ctx, f8_slot_read(ctx, slot, &s, NULL, h));
    if (amax0) *amax0 = h[0];
    return s;
}

static const f8_qtensor *mod_workspace(mpair *p, int i, int w)
{
    return p->mc.mlp ? f8_module_weight_workspace(p->mlp[i], (w) ? F8_PARAM_FC2_WEIGHT : F8_PARAM_FC1_WEIGHT) : f8_module_weight_workspace(p->lnl[i], F8_PARAM_WEIGHT);
}

/* A workspace's codes, its scale_inv and its dequantization (FP32, through
 * f8_qtensor_dequantize, checked to be code · own scale_inv). */
static float workspace_read(env *e, f8_ctx *ctx, const f8_qtensor *ws, uint8_t *codes, double *deq)
{
    f8_tensor v;
    float sinv = 0;
    CHECK_OK(ctx, f8_qtensor_data(ws, &v));
    const size_t n = (size_t)(v.rows * v.cols);
    CHECK_OK(ctx, f8_ctx_download(ctx, codes, v.data, n));
    CHECK_OK(ctx, f8_ctx_download(ctx, &sinv, v.scale_inv, sizeof sinv));
    if (deq) {
        f8_tensor d = f8_tensor_make(balloc(ctx, n * 4), F8_DTYPE_FP32, v.rows, v.cols);
        CHECK_OK(ctx, f8_qtensor_dequantize(ws, &d));
        float *h = to_host(ctx, &d);
        int exact = 1;
        for (size_t i = 0; i < n; i++) {
            exact &= h[i] == f8_fp8_to_float(codes[i], v.dtype) * sinv;
            deq[i] = h[i];
        }
        CHECK(exact, "dequantize is not code · own scale_inv");
        free(h);
        f8_ctx_free(ctx, d.data);
    }
    (void)e;
    return sinv;
}

static void check_ref(env *e, const char *who, const char *what, const float *got, const double *ref, size_t n,
                      double tol)
{
    double err = n ? rel_error(got, ref, n) : 0.0;
    note(e, C_ORACLE, err, tol);
    CHECK(err <= tol, "%s: regression %s vs float64 oracle: %.3g > %.0e", who, what, err, tol);
}

/* FIRST fills the workspaces with the weight slots' scales; the recipe then
 * moves on (updates, and every weight slot's scale set to a quarter); a
 * NOT_FIRST microbatch must reuse the workspaces untouched, with their own
 * scale_invs, in y and in the backward. */
static void workspace_regression(env *e, int which, int mlp)
{
    const char *who = mlp ? (which == CPU ? "cpu mlp" : "cuda mlp") : (which == CPU ? "cpu lnlinear" : "cuda lnlinear");
    f8_ctx *ctx = e->ctx[which];
    const int64_t T = 64, K = 128, N = 96; /* MLP: H = K, F = N */
    const f8_activation act = F8_ACT_GELU;
    mpair p;
    memset(&p, 0, sizeof p);
    p.mc = (mcase){mlp, T, K, N, 1, F8_DTYPE_FP32, F8_DTYPE_FP32, F8_DTYPE_FP32, F8_NORM_LAYERNORM, 0, 0, act, 0, 0};
    f8_param ps[8];
    const int np = mod_params(&p, ps);
    float *pv[8];
    for (int k = 0; k < np; k++) pv[k] = NULL;
    if (mlp) {
        f8_layernorm_mlp_config c = f8_layernorm_mlp_config_default(K, N);
        c.activation = act, c.max_tokens = T;
        if (f8_layernorm_mlp_create(ctx, &c, &p.mlp[which]) != F8_OK ||
            f8_module_saved_create(p.mlp[which], &p.mlp_saved[which]) != F8_OK)
            die("f8_layernorm_mlp_create", ctx);
    } else {
        f8_layernorm_linear_config c = f8_layernorm_linear_config_default(K, N);
        c.max_tokens = T;
        if (f8_layernorm_linear_create(ctx, &c, &p.lnl[which]) != F8_OK ||
            f8_module_saved_create(p.lnl[which], &p.lnl_saved[which]) != F8_OK)
            die("f8_layernorm_linear_create", ctx);
    }
    /* non-trivial norm and bias parameters, kept on the host for the oracle */
    for (int k = 0; k < np; k++) {
        f8_tensor v;
        CHECK_OK(ctx, mod_param(&p, which, ps[k], 0, &v));
        const size_t n = (size_t)(v.rows * v.cols);
        pv[k] = xmalloc(n * 4 + 4);
        if (param_quantity(ps[k]) == Q_W || param_quantity(ps[k]) == Q_W2) continue; /* the oracle uses the workspace */
        const double mean = ps[k] == F8_PARAM_LN_WEIGHT ? 1.0 : 0.0;
        void *h = gen(&e->rng, F8_DTYPE_FP32, n, mean, ps[k] == F8_PARAM_LN_WEIGHT || ps[k] == F8_PARAM_LN_BIAS ? 0.2 : 0.1, pv[k]);
        upload(ctx, v.data, h, n * 4);
        free(h);
    }
    const float *gamma = NULL, *beta = NULL, *b1 = NULL, *b2 = NULL;
    for (int k = 0; k < np; k++) {
        if (ps[k] == F8_PARAM_LN_WEIGHT) gamma = pv[k];
        if (ps[k] == F8_PARAM_LN_BIAS) beta = pv[k];
        if (ps[k] == F8_PARAM_BIAS || ps[k] == F8_PARAM_FC1_BIAS) b1 = pv[k];
        if (ps[k] == F8_PARAM_FC2_BIAS) b2 = pv[k];
    }
    const int64_t O = mlp ? K : N, F1 = N; /* gelu: not gated */
    float *hx = xmalloc((size_t)(T * K) * 4), *hdy = xmalloc((size_t)(T * O) * 4);
    free(gen(&e->rng, F8_DTYPE_FP32, (size_t)(T * K), 0.0, 1.0, hx));
    free(gen(&e->rng, F8_DTYPE_FP32, (size_t)(T * O), 0.0, 1.0, hdy));
    f8_tensor x = f8_tensor_make(balloc(ctx, (size_t)(T * K) * 4), F8_DTYPE_FP32, T, K);
    f8_tensor y = f8_tensor_make(balloc(ctx, (size_t)(T * O) * 4), F8_DTYPE_FP32, T, O);
    f8_tensor dy = f8_tensor_make(balloc(ctx, (size_t)(T * O) * 4), F8_DTYPE_FP32, T, O);
    f8_tensor dx = f8_tensor_make(balloc(ctx, (size_t)(T * K) * 4), F8_DTYPE_FP32, T, K);
    upload(ctx, x.data, hx, (size_t)(T * K) * 4);
    upload(ctx, dy.data, hdy, (size_t)(T * O) * 4);

    const int nw = mlp ? 2 : 1, wslot[2] = {1, 4};
    /* An inference step and an update give the weight slots amax-based scales. */
    if (mlp) CHECK_OK(ctx, f8_module_forward(p.mlp[which], &x, &y, F8_MICROBATCH_NONE, NULL));
    else CHECK_OK(ctx, f8_layernorm_linear_forward(p.lnl[which], &x, &y, NULL, F8_MICROBATCH_NONE, NULL));
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));

    float s_cast[2], sinv1[2], sinv2[2];
    uint8_t *codes1[2] = {NULL, NULL}, *codes2[2] = {NULL, NULL};
    double *wdq[2] = {NULL, NULL};
    int64_t wn[2] = {mlp ? F1 * K : N * K, K * N};
    for (int w = 0; w < nw; w++) s_cast[w] = slot_state(ctx, &p, which, 0, wslot[w], NULL);
    CHECK_OK(ctx, mod_forward(&p, which, &x, &y, NULL, F8_MICROBATCH_FIRST));
    CHECK_OK(ctx, mod_backward(&p, which, &dy, NULL, &dx));
    for (int w = 0; w < nw; w++) {
        codes1[w] = xmalloc((size_t)wn[w]), codes2[w] = xmalloc((size_t)wn[w]);
        wdq[w] = xmalloc((size_t)wn[w] * sizeof(double));
        sinv1[w] = workspace_read(e, ctx, mod_workspace(&p, which, w), codes1[w], NULL);
        CHECK(sinv1[w] == 1.0f / s_cast[w], "%s: workspace %d scale_inv %.9g, want 1/%.9g", who, w, sinv1[w], s_cast[w]);
    }
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_BACKWARD));
    float s_new[2];
    for (int w = 0; w < nw; w++) {
        f8_slot ws;
        CHECK_OK(ctx, mod_slot(&p, which, 0, wslot[w], &ws));
        s_new[w] = s_cast[w] * 0.25f;
        CHECK_OK(ctx, f8_slot_write(ctx, ws, s_new[w], 1.0f / s_new[w], NULL));
    }
    CHECK_OK(ctx, mlp ? f8_module_zero_grad(p.mlp[which]) : f8_module_zero_grad(p.lnl[which]));

    /* mb2: NOT_FIRST on the same input; the scales each cast will use */
    const float s_in = slot_state(ctx, &p, which, 0, 0, NULL), s_in2 = mlp ? slot_state(ctx, &p, which, 0, 3, NULL) : 0;
    CHECK_OK(ctx, mod_forward(&p, which, &x, &y, NULL, F8_MICROBATCH_NOT_FIRST));
    const float s_g = slot_state(ctx, &p, which, 1, 0, NULL), s_g2 = mlp ? slot_state(ctx, &p, which, 1, 2, NULL) : 0;
    CHECK_OK(ctx, mod_backward(&p, which, &dy, NULL, &dx));
    for (int w = 0; w < nw; w++) {
        float amax_w;
        float s_now = slot_state(ctx, &p, which, 0, wslot[w], &amax_w);
        CHECK(s_now == s_new[w], "%s: weight %d slot scale %.9g, written %.9g", who, w, s_now, s_new[w]);
        CHECK(amax_w == 0.0f, "%s: NOT_FIRST wrote weight %d's amax (%g)", who, w, amax_w);
        sinv2[w] = workspace_read(e, ctx, mod_workspace(&p, which, w), codes2[w], wdq[w]);
        CHECK(sinv2[w] == sinv1[w] && memcmp(codes1[w], codes2[w], (size_t)wn[w]) == 0,
              "%s: NOT_FIRST changed workspace %d", who, w);
    }

    /* The float64 oracle from the workspaces' own dequantization. */
    const f8_dtype e4 = F8_DTYPE_E4M3, gdt = f8_ctx_slot_dtype(ctx, F8_DIR_BACKWARD);
    const size_t nx = (size_t)(T * K), ny = (size_t)(T * O), nh = (size_t)(T * F1);
    double *ln = xmalloc(nx * 8), *mu = xmalloc((size_t)T * 8), *rs = xmalloc((size_t)T * 8);
    ref_norm(hx, T, K, gamma, beta, 1e-5, ln, mu, rs);
    for (size_t i = 0; i < nx; i++) ln[i] = qdq(ln[i], s_in, e4);
    double *dyq = xmalloc(ny * 8), *ry = xmalloc(ny * 8), *rwrong = xmalloc(ny * 8), *rdln = xmalloc(nx * 8);
    double *rdx = xmalloc(nx * 8);
    for (size_t i = 0; i < ny; i++) dyq[i] = qdq(hdy[i], s_g, gdt);
    float *gy = to_host(ctx, &y), *gdx = to_host(ctx, &dx), *gg[8];
    grads_to_host(e, &p, which, ps, np, gg);
    double *stale_w[2];
    for (int w = 0; w < nw; w++) { /* what the #820 bug would multiply by: the slot's scale_inv */
        const double f = (double)(1.0f / s_new[w]) / (double)sinv1[w];
        stale_w[w] = xmalloc((size_t)wn[w] * 8);
        for (int64_t i = 0; i < wn[w]; i++) stale_w[w][i] = wdq[w][i] * f;
    }
    double ty, tdx, tw1, tw2, tb1;
    double *rdw1 = NULL, *rdw2 = NULL, *rdb1 = xmalloc((size_t)F1 * 8 + 8);
    if (!mlp) {
        ref_gemm(ln, wdq[0], b1, T, N, K, ry);
        ref_gemm(ln, stale_w[0], b1, T, N, K, rwrong);
        double *wt = transposed(wdq[0], N, K); /* [K, N] */
        ref_gemm(dyq, wt, NULL, T, K, N, rdln);
        free(wt);
        double *dyt = transposed(dyq, T, N), *lnt = transposed(ln, T, K);
        rdw1 = xmalloc((size_t)(N * K) * 8);
        ref_gemm(dyt, lnt, NULL, N, K, T, rdw1);
        free(dyt), free(lnt);
        for (int64_t n = 0; n < N; n++) {
            rdb1[n] = 0;
            for (int64_t t = 0; t < T; t++) rdb1[n] += hdy[t * N + n];
        }
        ty = TOL_LNL_Y, tdx = TOL_FP8_SPLIT, tw1 = TOL_LNL_WGRAD, tb1 = TOL_DBIAS, tw2 = 0;
    } else {
        /* forward: h1 = ln·W1ᵀ + b1; a = qdq(gelu(h1)); y = a·W2ᵀ + b2 */
        double *h1 = xmalloc(nh * 8), *a = xmalloc(nh * 8), *d = xmalloc(nh * 8), *da = xmalloc(nh * 8), dv;
        ref_gemm(ln, wdq[0], b1, T, F1, K, h1);
        for (size_t i = 0; i < nh; i++) a[i] = qdq(act_ref(act, h1[i], &dv), s_in2, e4);
        ref_gemm(a, wdq[1], b2, T, K, F1, ry);
        {   /* the stale-scale result, through the same chain */
            double *h1w = xmalloc(nh * 8), *aw = xmalloc(nh * 8);
            ref_gemm(ln, stale_w[0], b1, T, F1, K, h1w);
            for (size_t i = 0; i < nh; i++) aw[i] = qdq(act_ref(act, h1w[i], &dv), s_in2, e4);
            ref_gemm(aw, stale_w[1], b2, T, K, F1, rwrong);
            free(h1w), free(aw);
        }
        /* backward: da = dyq·W2; d = act'(h1)·da; dq = qdq(d); dln = dq·W1 */
        double *w2t = transposed(wdq[1], K, F1), *w1t = transposed(wdq[0], F1, K);
        ref_gemm(dyq, w2t, NULL, T, F1, K, da);
        for (size_t i = 0; i < nh; i++) {
            act_ref(act, h1[i], &dv);
            d[i] = dv * da[i];
        }
        for (int64_t f = 0; f < F1; f++) {
            rdb1[f] = 0;
            for (int64_t t = 0; t < T; t++) rdb1[f] += d[t * F1 + f];
        }
        for (size_t i = 0; i < nh; i++) d[i] = qdq(d[i], s_g2, gdt);
        ref_gemm(d, w1t, NULL, T, K, F1, rdln);
        double *dyt = transposed(dyq, T, K), *at = transposed(a, T, F1), *dt = transposed(d, T, F1);
        double *lnt = transposed(ln, T, K);
        rdw2 = xmalloc((size_t)(K * F1) * 8), rdw1 = xmalloc((size_t)(F1 * K) * 8);
        ref_gemm(dyt, at, NULL, K, F1, T, rdw2);
        ref_gemm(dt, lnt, NULL, F1, K, T, rdw1);
        free(h1), free(a), free(d), free(da), free(w2t), free(w1t), free(dyt), free(at), free(dt), free(lnt);
        ty = tdx = tw1 = tw2 = TOL_MLP_FP8, tb1 = TOL_MLP_DB1;
    }
    ref_norm_bwd(hx, T, K, gamma, mu, rs, rdln, rdx);
    check_ref(e, who, "y", gy, ry, ny, ty);
    double ewrong = rel_error(gy, rwrong, ny);
    CHECK(ewrong > 0.3, "%s: y is also near the stale-scale result (%.3g): the test lost its teeth", who, ewrong);
    check_ref(e, who, "dx", gdx, rdx, nx, tdx);
    for (int k = 0; k < np; k++) {
        const int q = param_quantity(ps[k]);
        if (q == Q_W) check_ref(e, who, mlp ? "fc1 wgrad" : "wgrad", gg[k], rdw1, (size_t)(mlp ? F1 * K : N * K), tw1);
        if (q == Q_W2) check_ref(e, who, "fc2 wgrad", gg[k], rdw2, (size_t)(K * F1), tw2);
        if (q == Q_B) check_ref(e, who, mlp ? "fc1 bias grad" : "bias grad", gg[k], rdb1, (size_t)F1, tb1);
    }

    f8_tensor *bufs[] = {&x, &y, &dy, &dx};
    for (int i = 0; i < NELEM(bufs); i++) f8_ctx_free(ctx, bufs[i]->data);
    for (int w = 0; w < nw; w++) free(codes1[w]), free(codes2[w]), free(wdq[w]), free(stale_w[w]);
    for (int k = 0; k < np; k++) free(pv[k]), free(gg[k]);
    free(hx), free(hdy), free(ln), free(mu), free(rs), free(dyq), free(ry), free(rwrong), free(rdln), free(rdx);
    free(rdw1), free(rdw2), free(rdb1), free(gy), free(gdx);
    mod_destroy(&p);
}

int main(void)
{
    const char *name = "test_cuda_modules";
    f8_recipe recipe = f8_recipe_default();
    recipe.amax_history_len = HISTORY_LEN;
    const char *quick = getenv("F8_TEST_QUICK");
    env e;
    memset(&e, 0, sizeof e);
    e.rng.s = 0x3D0D1E5ull;
    e.quick = quick && *quick && strcmp(quick, "0") != 0;
    int rc = test_ctx_pair(name, &recipe, e.ctx);
    if (rc) return rc;

    if (e.quick) printf("%s: F8_TEST_QUICK: the large cases left out\n", name);
    test_against_cpu(&e);
    test_odd_shapes(&e);
    for (int i = 0; i < 2; i++)
        for (int mlp = 0; mlp < 2; mlp++) workspace_regression(&e, i, mlp);
    printf("%s: worst err/tol by class:", name);
    for (int c = 0; c < C_COUNT; c++) printf(" %s %.3g%s", CLASS_NAME[c], e.worst[c], c + 1 < C_COUNT ? "," : "\n");

    f8_ctx_destroy(e.ctx[GPU]);
    f8_ctx_destroy(e.ctx[CPU]);
    return test_finish(name);
}
