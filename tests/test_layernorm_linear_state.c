/*
 * test_layernorm_linear_state.c — f8_layernorm_linear on the CPU backend
 * beyond its numerics (test_layernorm_linear.c): the slots TE writes (§2.5);
 * the #820 workspace regression; main_grad; zero tokens; bad input.
 */
#include "layernorm_linear_fixture.h"

/* TE §2.5: a FP8 forward + backward writes GEMM1_INPUT (amax of the norm
 * output), GEMM1_WEIGHT (amax of W) and GRAD_OUTPUT1 (amax of dy); the
 * GEMM1_OUTPUT and GRAD_INPUT1 slots keep amax 0 and, after the update, scale 1. */
static void test_slots(f8_ctx *ctx, f8_norm norm, int ret_ln)
{
    const int64_t T = 16, K = 32, N = 24;
    f8_layernorm_linear_config c = config(K, N, norm, 1, 1e-5f, ret_ln, F8_DTYPE_FP32, 1, T);
    fixture f = make(ctx, &c, 77 + (uint64_t)ret_ln);
    size_t nx = (size_t)(T * K), ny = (size_t)(T * N);
    float *x = fnew(nx), *dy = fnew(ny), *dln = ret_ln ? fnew(nx) : NULL;
    test_rng r = {3};
    make_input(&r, x, T, K);
    fill_normal(&r, dy, ny, 0.0, 0.1);
    if (dln) fill_normal(&r, dln, nx, 0.0, 0.1);
    f8_slot s[5];
    for (int i = 0; i < 3; i++) CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, i, &s[i]));
    for (int i = 0; i < 2; i++) CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_BACKWARD, i, &s[3 + i]));
    float a[5], sc[5];
    for (int i = 0; i < 5; i++) a[i] = slot_amax(ctx, s[i], &sc[i]);
    CHECK(a[0] == 0 && a[1] == 0 && a[2] == 0 && a[3] == 0 && a[4] == 0, "slots not empty at creation");
    outputs o;
    outputs_alloc(&o, &f, T);
    step(&f, T, x, dy, dln, F8_DTYPE_FP32, F8_MICROBATCH_NONE, &o);
    model m = model_of(&f, x, T);
    double *ln = dnew(nx), *y = dnew(ny);
    model_forward(&m, ln, y);
    for (int i = 0; i < 5; i++) a[i] = slot_amax(ctx, s[i], &sc[i]);
    double want_in = max_abs_d(ln, nx);
    CHECK(fabs(a[0] - want_in) <= 1e-5 * want_in, "ret_ln=%d: GEMM1_INPUT amax %g, max|norm(x)| %g", ret_ln,
          (double)a[0], want_in);
    CHECK(a[1] == max_abs_f(f.p.w, (size_t)(N * K)), "GEMM1_WEIGHT amax %g, max|W| %g", (double)a[1],
          (double)max_abs_f(f.p.w, (size_t)(N * K)));
    CHECK(a[2] == 0.0f, "GEMM1_OUTPUT written (amax %g)", (double)a[2]);
    CHECK(a[3] == max_abs_f(dy, ny), "GRAD_OUTPUT1 amax %g, max|dy| %g", (double)a[3], (double)max_abs_f(dy, ny));
    CHECK(a[4] == 0.0f, "GRAD_INPUT1 written (amax %g)", (double)a[4]);
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_BACKWARD));
    for (int i = 0; i < 5; i++) a[i] = slot_amax(ctx, s[i], &sc[i]);
    CHECK(sc[2] == 1.0f && sc[4] == 1.0f, "unused slots' scales moved: %g %g", (double)sc[2], (double)sc[4]);
    CHECK(sc[0] != 1.0f && sc[1] != 1.0f && sc[3] != 1.0f, "used slots' scales did not move");
    f8_slot extra;
    CHECK_STATUS(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, 3, &extra), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_slot(f.m, F8_DIR_BACKWARD, 2, &extra), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, -1, &extra), F8_ERR_INVALID_ARGUMENT);
    model_free(&m);
    outputs_free(&o);
    unmake(&f);
    free(x), free(dy), free(dln), free(ln), free(y);
}

/* TE #820: microbatch 1 (FIRST) casts W; the forward scale update changes
 * the weight slot's scale; microbatch 2 (NOT_FIRST, same x) must use the
 * workspace's microbatch-1 codes with ITS scale_inv, in y and in dgrad, and
 * must not write the weight slot's amax. */
static void test_workspace_regression(f8_ctx *ctx, f8_norm norm)
{
    const int64_t T = 16, K = 32, N = 16;
    f8_layernorm_linear_config c = config(K, N, norm, 0, 1e-5f, 0, F8_DTYPE_FP32, 1, T);
    fixture f = make(ctx, &c, 820);
    size_t nx = (size_t)(T * K), ny = (size_t)(T * N), nw = (size_t)(N * K);
    float *x = fnew(nx), *dy = fnew(ny);
    double *wq1 = dnew(nw), *wq2 = dnew(nw), *wbug = dnew(nw), *lnq = dnew(nx), *amb = dnew(nx), *err = dnew(nx);
    double *ln = dnew(nx), *y = dnew(ny), *gq = dnew(ny), *dyd = dnew(ny), *ybug = dnew(ny);
    uint8_t *c1 = (uint8_t *)xmalloc(nw), *c2 = (uint8_t *)xmalloc(nw);
    test_rng r = {820};
    make_input(&r, x, T, K);
    fill_normal(&r, dy, ny, 0.0, 1e-2);
    widen(dy, dyd, ny);
    f8_slot s_in, s_w, s_go;
    CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, 0, &s_in));
    CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, 1, &s_w));
    CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_BACKWARD, 0, &s_go));
    outputs o;
    outputs_alloc(&o, &f, T);

    float sw1, sw2, sin2, sgo, sinv1, sinv2;
    CHECK_OK(ctx, f8_slot_read(ctx, s_w, &sw1, NULL, NULL));
    step(&f, T, x, dy, NULL, F8_DTYPE_FP32, F8_MICROBATCH_FIRST, &o);
    workspace_host(&f, wq1, c1, &sinv1);
    CHECK(sinv1 == 1.0f / sw1, "workspace scale_inv %g after FIRST, expected %g", (double)sinv1, 1.0 / sw1);

    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
    CHECK_OK(ctx, f8_slot_read(ctx, s_w, &sw2, NULL, NULL));
    CHECK_OK(ctx, f8_slot_read(ctx, s_in, &sin2, NULL, NULL));
    CHECK_OK(ctx, f8_slot_read(ctx, s_go, &sgo, NULL, NULL));
    CHECK(sw2 != sw1, "the weight scale did not change (%g): the regression would prove nothing", (double)sw2);

    step(&f, T, x, dy, NULL, F8_DTYPE_FP32, F8_MICROBATCH_NOT_FIRST, &o);
    workspace_host(&f, wq2, c2, &sinv2);
    CHECK(memcmp(c1, c2, nw) == 0 && sinv2 == sinv1, "NOT_FIRST rewrote the workspace (scale_inv %g -> %g)",
          (double)sinv1, (double)sinv2);
    float w_amax = slot_amax(ctx, s_w, NULL), in_amax = slot_amax(ctx, s_in, NULL);
    CHECK(w_amax == 0.0f && in_amax > 0.0f, "NOT_FIRST: weight amax %g (want 0), input amax %g (want > 0)",
          (double)w_amax, (double)in_amax);

    model m = model_of(&f, x, T);
    model_forward(&m, ln, y);
    norm_error_bound(m.x, m.T, m.K, m.g, m.be, m.rms, m.zc, m.eps, ln, err);
    for (size_t i = 0; i < nx; i++) lnq[i] = fq_amb(ln[i], err[i], sin2, F8_DTYPE_E4M3, &amb[i]);
    for (size_t i = 0; i < ny; i++) gq[i] = fq(dy[i], sgo, f8_ctx_slot_dtype(ctx, F8_DIR_BACKWARD));
    oracle q;
    oracle_build(&m, lnq, amb, wq1, gq, NULL, dyd, &q);
    size_t wi, nb = over_bound(o.y, q.y, q.ybound, ny, &wi);
    CHECK(nb == 0, "microbatch 2: %zu y off the microbatch-1 weight oracle, y[%zu] %.9g vs %.9g (bound %g)", nb, wi,
          (double)o.y[wi], q.y[wi], q.ybound[wi]);
    CHECK(rel_error(o.dx, q.dx, nx) < 1e-4, "microbatch 2 dgrad rel err %g vs the microbatch-1 weight",
          rel_error(o.dx, q.dx, nx));
    /* The pre-#820 bug: microbatch-1 codes read with the new scale_inv. */
    for (size_t i = 0; i < nw; i++) wbug[i] = wq1[i] * sw1 / sw2;
    mm_nt(lnq, wbug, m.b, ybug, T, K, N, 0);
    CHECK(rel_error(o.y, ybug, ny) > 1e-2, "microbatch 2 matches the stale-scale bug (rel %g)",
          rel_error(o.y, ybug, ny));
    oracle_free(&q);
    model_free(&m);
    outputs_free(&o);
    unmake(&f);
    free(x), free(dy), free(wq1), free(wq2), free(wbug), free(lnq), free(amb), free(err), free(ln), free(y), free(gq);
    free(dyd), free(ybug), free(c1), free(c2);
}

/* main_grad per §4.3: FIRST overwrites, NOT_FIRST and NONE accumulate; the
 * weight has no gradient of its own (its view is the main_grad) while b,
 * gamma, beta accumulate in the module's. */
static void test_main_grad(f8_ctx *ctx, int fp8)
{
    const int64_t T = 16, K = 32, N = 16;
    f8_layernorm_linear_config c = config(K, N, F8_NORM_LAYERNORM, 0, 1e-5f, 0, F8_DTYPE_FP32, fp8, T);
    c.fuse_wgrad_accumulation = 1;
    fixture f = make(ctx, &c, 31);
    size_t nx = (size_t)(T * K), ny = (size_t)(T * N), nw = (size_t)(N * K);
    float *x = fnew(nx), *dy = fnew(ny), *mg = fnew(nw), *g[3];
    test_rng r = {31};
    make_input(&r, x, T, K);
    fill_normal(&r, dy, ny, 0.0, 0.1);
    for (size_t i = 0; i < nw; i++) mg[i] = 7.0f;
    void *mgb = put(ctx, mg, nw, F8_DTYPE_FP32);
    void *xb = put(ctx, x, nx, F8_DTYPE_FP32), *yb = put(ctx, NULL, ny, F8_DTYPE_FP32);
    void *dyb = put(ctx, dy, ny, F8_DTYPE_FP32);
    f8_tensor tx = f8_tensor_make(xb, F8_DTYPE_FP32, T, K), ty = f8_tensor_make(yb, F8_DTYPE_FP32, T, N);
    f8_tensor tdy = f8_tensor_make(dyb, F8_DTYPE_FP32, T, N);
    f8_saved *s = NULL;
    CHECK_OK(ctx, f8_module_saved_create(f.m, &s));
    CHECK_OK(ctx, f8_layernorm_linear_forward(f.m, &tx, &ty, NULL, F8_MICROBATCH_FIRST, s));
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(f.m, s, &tdy, NULL, NULL), F8_ERR_STATE); /* no main_grad */
    f8_tensor none;
    CHECK_STATUS(ctx, f8_module_param(f.m, F8_PARAM_WEIGHT, 1, &none), F8_ERR_STATE); /* no gradient yet */
    CHECK_OK(ctx, f8_module_set_main_grad(f.m, F8_PARAM_WEIGHT, (float *)mgb));
    const f8_microbatch mbs[3] = {F8_MICROBATCH_FIRST, F8_MICROBATCH_NOT_FIRST, F8_MICROBATCH_NONE};
    for (int i = 0; i < 3; i++) {
        g[i] = fnew(nw);
        if (i > 0) CHECK_OK(ctx, f8_layernorm_linear_forward(f.m, &tx, &ty, NULL, mbs[i], s));
        CHECK_OK(ctx, f8_layernorm_linear_backward(f.m, s, &tdy, NULL, NULL));
        load(ctx, mgb, F8_DTYPE_FP32, g[i], nw);
    }
    model m = model_of(&f, x, T);
    double *dyd = dnew(ny), *dx = dnew(nx), *dw = dnew(nw), *db = dnew((size_t)N), *dg = dnew((size_t)K);
    double *dbe = dnew((size_t)K);
    widen(dy, dyd, ny);
    model_backward(&m, dyd, NULL, dx, dw, db, dg, dbe);
    CHECK(rel_error(g[0], dw, nw) < (fp8 ? 0.12 : 1e-5), "fp8=%d: FIRST main_grad is not dW (rel %g): not overwritten?",
          fp8, rel_error(g[0], dw, nw));
    int acc = 1;
    for (size_t i = 0; i < nw; i++)
        acc &= fabsf(g[1][i] - 2 * g[0][i]) <= 1e-5f * (1 + fabsf(g[0][i])) &&
               fabsf(g[2][i] - 3 * g[0][i]) <= 1e-5f * (1 + fabsf(g[0][i]));
    CHECK(acc, "fp8=%d: NOT_FIRST / NONE did not accumulate into main_grad", fp8);
    params d;
    params_alloc(&d, &c);
    read_all(&f, 1, &d);
    int same = 1; /* no weight gradient of its own: the view is the main_grad */
    for (size_t i = 0; i < nw; i++) same &= d.w[i] == g[2][i];
    CHECK(same, "fp8=%d: the fused weight's gradient view is not its main_grad", fp8);
    for (int64_t n = 0; n < N; n++) db[n] *= 3;
    for (int64_t k = 0; k < K; k++) dg[k] *= 3, dbe[k] *= 3;
    CHECK(rel_error(d.b, db, (size_t)N) < 1e-5, "fp8=%d: bias gradient after 3 steps rel err %g", fp8,
          rel_error(d.b, db, (size_t)N));
    CHECK(rel_error(d.g, dg, (size_t)K) < (fp8 ? 0.12 : 1e-5), "fp8=%d: gamma gradient after 3 steps rel err %g", fp8,
          rel_error(d.g, dg, (size_t)K));
    CHECK(rel_error(d.be, dbe, (size_t)K) < (fp8 ? 0.12 : 1e-5), "fp8=%d: beta gradient after 3 steps rel err %g", fp8,
          rel_error(d.be, dbe, (size_t)K));
    params_free(&d);
    model_free(&m);
    f8_saved_destroy(s);
    f8_ctx_free(ctx, mgb), f8_ctx_free(ctx, xb), f8_ctx_free(ctx, yb), f8_ctx_free(ctx, dyb);
    unmake(&f);
    for (int i = 0; i < 3; i++) free(g[i]);
    free(x), free(dy), free(mg), free(dyd), free(dx), free(dw), free(db), free(dg), free(dbe);
}

/* T = 0: legal, writes nothing; gradients stay 0. */
static void test_zero_tokens(f8_ctx *ctx, int fp8, int ret_ln)
{
    const int64_t K = 32, N = 16;
    f8_layernorm_linear_config c = config(K, N, F8_NORM_LAYERNORM, 0, 1e-5f, ret_ln, F8_DTYPE_FP32, fp8, 8);
    fixture f = make(ctx, &c, 5);
    void *p = put(ctx, NULL, 16, F8_DTYPE_FP32);
    f8_tensor tx = f8_tensor_make(p, F8_DTYPE_FP32, 0, K), ty = f8_tensor_make(p, F8_DTYPE_FP32, 0, N);
    f8_tensor tl = f8_tensor_make(p, F8_DTYPE_FP32, 0, K), tdy = f8_tensor_make(p, F8_DTYPE_FP32, 0, N);
    f8_tensor tdl = tl, tdx = tl;
    f8_saved *s = NULL;
    CHECK_OK(ctx, f8_module_saved_create(f.m, &s));
    CHECK_OK(ctx, f8_layernorm_linear_forward(f.m, &tx, &ty, ret_ln ? &tl : NULL, F8_MICROBATCH_NONE, s));
    CHECK_OK(ctx, f8_layernorm_linear_backward(f.m, s, &tdy, ret_ln ? &tdl : NULL, &tdx));
    params d;
    params_alloc(&d, &c);
    read_all(&f, 1, &d);
    int zero = 1;
    for (int64_t i = 0; i < N * K; i++) zero &= d.w[i] == 0.0f;
    for (int64_t i = 0; i < N; i++) zero &= d.b[i] == 0.0f;
    for (int64_t i = 0; i < K; i++) zero &= d.g[i] == 0.0f && d.be[i] == 0.0f;
    CHECK(zero, "zero tokens changed the gradients (fp8=%d ret_ln=%d)", fp8, ret_ln);
    params_free(&d);
    f8_saved_destroy(s);
    f8_ctx_free(ctx, p);
    unmake(&f);
}

/* Everything a failed call must leave alone: the five slots, y, ln_out and
 * the gradients. */
typedef struct {
    float *slots; /* per slot: scale, scale_inv, history */
    float *y, *ln;
    params grads;
} snapshot;

static void snap(fixture *f, void *yb, void *lb, int64_t T, snapshot *s)
{
    int L = f8_ctx_recipe(f->ctx)->amax_history_len;
    int64_t K = f->c.in_features, N = f->c.out_features;
    s->slots = fnew((size_t)(5 * (L + 2)));
    for (int i = 0; i < 5; i++) {
        f8_slot sl;
        float *d = s->slots + i * (L + 2);
        CHECK_OK(f->ctx, f8_module_slot(f->m, i < 3 ? F8_DIR_FORWARD : F8_DIR_BACKWARD, i < 3 ? i : i - 3, &sl));
        CHECK_OK(f->ctx, f8_slot_read(f->ctx, sl, &d[0], &d[1], d + 2));
    }
    s->y = fnew((size_t)(T * N)), s->ln = fnew((size_t)(T * K));
    load(f->ctx, yb, F8_DTYPE_FP32, s->y, (size_t)(T * N));
    load(f->ctx, lb, F8_DTYPE_FP32, s->ln, (size_t)(T * K));
    params_alloc(&s->grads, &f->c);
    read_all(f, 1, &s->grads);
}

static int snap_equal(fixture *f, const snapshot *a, const snapshot *b, int64_t T)
{
    int L = f8_ctx_recipe(f->ctx)->amax_history_len;
    int64_t K = f->c.in_features, N = f->c.out_features;
    int same = memcmp(a->slots, b->slots, (size_t)(5 * (L + 2)) * 4) == 0;
    same &= memcmp(a->y, b->y, (size_t)(T * N) * 4) == 0 && memcmp(a->ln, b->ln, (size_t)(T * K) * 4) == 0;
    same &= memcmp(a->grads.w, b->grads.w, (size_t)(N * K) * 4) == 0 && memcmp(a->grads.b, b->grads.b, (size_t)N * 4) == 0;
    same &= memcmp(a->grads.g, b->grads.g, (size_t)K * 4) == 0 && memcmp(a->grads.be, b->grads.be, (size_t)K * 4) == 0;
    return same;
}

static void snap_free(snapshot *s)
{
    free(s->slots), free(s->y), free(s->ln);
    params_free(&s->grads);
}

/* Bad arguments return the documented status and change nothing. */
static void test_bad_input(f8_ctx *ctx)
{
    const int64_t T = 8, K = 16, N = 16;
    f8_layernorm_linear_config c = config(K, N, F8_NORM_LAYERNORM, 0, 1e-5f, 0, F8_DTYPE_FP32, 1, T);
    fixture f = make(ctx, &c, 1); /* FP8, no ln_out */
    c.return_layernorm_output = 1;
    fixture h = make(ctx, &c, 2); /* FP8 with ln_out */
    c = config(K, N, F8_NORM_RMSNORM, 0, 1e-5f, 0, F8_DTYPE_FP32, 0, T);
    c.bias = 0;
    fixture g = make(ctx, &c, 3); /* FP8 off, RMSNorm, no bias */
    float host[512];
    for (int i = 0; i < 512; i++) host[i] = 0.25f * (float)(i % 7) - 0.6f;
    void *xb = put(ctx, host, (size_t)(T * K), F8_DTYPE_FP32), *yb = put(ctx, host, (size_t)(T * N), F8_DTYPE_FP32);
    void *lb = put(ctx, host, (size_t)(T * K), F8_DTYPE_FP32), *x16 = put(ctx, host, (size_t)(T * K), F8_DTYPE_BF16);
    void *big = put(ctx, host, 512, F8_DTYPE_FP32);
    f8_tensor tx = f8_tensor_make(xb, F8_DTYPE_FP32, T, K), ty = f8_tensor_make(yb, F8_DTYPE_FP32, T, N);
    f8_tensor tl = f8_tensor_make(lb, F8_DTYPE_FP32, T, K), bad;
    f8_saved *sf = NULL, *sh = NULL, *sg = NULL;
    CHECK_OK(ctx, f8_module_saved_create(f.m, &sf));
    CHECK_OK(ctx, f8_module_saved_create(h.m, &sh));
    CHECK_OK(ctx, f8_module_saved_create(g.m, &sg));
    snapshot before, after;
    snap(&f, yb, lb, T, &before);

    const f8_microbatch none = F8_MICROBATCH_NONE;
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(NULL, &tx, &ty, NULL, none, sf), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, NULL, &ty, NULL, none, sf), F8_ERR_INVALID_ARGUMENT);
    CHECK(strlen(f8_ctx_last_error(ctx)) > 0, "no message for a NULL x");
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, &tx, NULL, NULL, none, sf), F8_ERR_INVALID_ARGUMENT);
    bad = tx, bad.data = NULL;
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, &bad, &ty, NULL, none, sf), F8_ERR_INVALID_ARGUMENT);
    bad = tx, bad.cols = K + 1;
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, &bad, &ty, NULL, none, sf), F8_ERR_SHAPE);
    bad = ty, bad.rows = T - 1;
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, &tx, &bad, NULL, none, sf), F8_ERR_SHAPE);
    bad = ty, bad.cols = N - 1;
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, &tx, &bad, NULL, none, sf), F8_ERR_SHAPE);
    {
        f8_tensor xbig = f8_tensor_make(big, F8_DTYPE_FP32, T + 1, K), ybig = f8_tensor_make(big, F8_DTYPE_FP32, T + 1, N);
        CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, &xbig, &ybig, NULL, none, sf), F8_ERR_SHAPE); /* > max_tokens */
    }
    bad = tx, bad.dtype = F8_DTYPE_E4M3, bad.scale_inv = (float *)big;
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, &bad, &ty, NULL, none, sf), F8_ERR_DTYPE);
    bad = ty, bad.dtype = F8_DTYPE_E5M2, bad.scale_inv = (float *)big;
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, &tx, &bad, NULL, none, sf), F8_ERR_DTYPE);
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, &tx, &ty, NULL, (f8_microbatch)7, sf), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, &tx, &ty, NULL, none, sh), F8_ERR_INVALID_ARGUMENT); /* h's saved */
    /* ln_out: given without return_layernorm_output, missing with it, misshapen, FP8. */
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(f.m, &tx, &ty, &tl, none, sf), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(h.m, &tx, &ty, NULL, none, sh), F8_ERR_INVALID_ARGUMENT);
    bad = tl, bad.cols = K - 1;
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(h.m, &tx, &ty, &bad, none, sh), F8_ERR_SHAPE);
    bad = tl, bad.dtype = F8_DTYPE_E4M3, bad.scale_inv = (float *)big;
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(h.m, &tx, &ty, &bad, none, sh), F8_ERR_DTYPE);
    /* FP8 off: x must be in param_dtype. */
    f8_tensor tx16 = f8_tensor_make(x16, F8_DTYPE_BF16, T, K);
    CHECK_STATUS(ctx, f8_layernorm_linear_forward(g.m, &tx16, &ty, NULL, none, sg), F8_ERR_DTYPE);
    /* Backward before any forward, or without saved state. */
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(f.m, sf, &ty, NULL, NULL), F8_ERR_STATE);
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(h.m, sh, &ty, &tl, NULL), F8_ERR_STATE);
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(f.m, NULL, &ty, NULL, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(NULL, sf, &ty, NULL, NULL), F8_ERR_INVALID_ARGUMENT);

    /* Views, slots, main_grad. */
    f8_tensor v;
    CHECK_STATUS(ctx, f8_module_param(g.m, F8_PARAM_LN_BIAS, 0, &v), F8_ERR_STATE); /* RMSNorm: no beta */
    CHECK_STATUS(ctx, f8_module_param(g.m, F8_PARAM_BIAS, 1, &v), F8_ERR_STATE);    /* bias = 0 */
    CHECK_STATUS(ctx, f8_module_param(f.m, F8_PARAM_FC1_WEIGHT, 0, &v), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_param(f.m, (f8_param)42, 0, &v), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_param(f.m, F8_PARAM_WEIGHT, 0, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_set_main_grad(f.m, F8_PARAM_WEIGHT, (float *)big), F8_ERR_STATE); /* not fused */
    CHECK(f8_module_weight_workspace(NULL, F8_PARAM_WEIGHT) == NULL, "workspace of NULL");

    /* Create. */
    f8_module *l2 = NULL;
    f8_layernorm_linear_config cc = f8_layernorm_linear_config_default(0, 4);
    CHECK_STATUS(ctx, f8_layernorm_linear_create(ctx, &cc, &l2), F8_ERR_SHAPE);
    cc = f8_layernorm_linear_config_default(4, 0);
    CHECK_STATUS(ctx, f8_layernorm_linear_create(ctx, &cc, &l2), F8_ERR_SHAPE);
    cc = f8_layernorm_linear_config_default(4, 4);
    cc.param_dtype = F8_DTYPE_E4M3;
    CHECK_STATUS(ctx, f8_layernorm_linear_create(ctx, &cc, &l2), F8_ERR_DTYPE);
    cc = f8_layernorm_linear_config_default(4, 4);
    cc.normalization = (f8_norm)5;
    CHECK_STATUS(ctx, f8_layernorm_linear_create(ctx, &cc, &l2), F8_ERR_INVALID_ARGUMENT);
    CHECK(l2 == NULL, "a failed create left an object");
    CHECK_STATUS(ctx, f8_layernorm_linear_create(ctx, NULL, &l2), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_layernorm_linear_create(NULL, &cc, &l2), F8_ERR_INVALID_ARGUMENT);

    snap(&f, yb, lb, T, &after);
    CHECK(snap_equal(&f, &before, &after, T), "a failed call changed y, ln_out, a slot or a gradient");
    snap_free(&after);

    /* A valid forward, then bad backwards change nothing and keep the saved state. */
    CHECK_OK(ctx, f8_layernorm_linear_forward(f.m, &tx, &ty, NULL, none, sf));
    CHECK_OK(ctx, f8_layernorm_linear_forward(h.m, &tx, &ty, &tl, none, sh));
    snap_free(&before);
    snap(&f, yb, lb, T, &before);
    f8_tensor dy = f8_tensor_make(big, F8_DTYPE_FP32, T, N), dx = f8_tensor_make(lb, F8_DTYPE_FP32, T, K);
    bad = dy, bad.cols = N + 1;
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(f.m, sf, &bad, NULL, &dx), F8_ERR_SHAPE);
    bad = dx, bad.rows = T - 1;
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(f.m, sf, &dy, NULL, &bad), F8_ERR_SHAPE);
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(f.m, sf, NULL, NULL, &dx), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(f.m, sf, &dy, &tl, &dx), F8_ERR_INVALID_ARGUMENT); /* no ln_out */
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(f.m, sh, &dy, NULL, &dx), F8_ERR_INVALID_ARGUMENT); /* h's saved */
    bad = tl, bad.cols = K + 1;
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(h.m, sh, &dy, &bad, NULL), F8_ERR_SHAPE);
    bad = dy, bad.dtype = F8_DTYPE_E5M2, bad.scale_inv = (float *)big;
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(f.m, sf, &bad, NULL, NULL), F8_ERR_DTYPE);
    snap(&f, yb, lb, T, &after);
    CHECK(snap_equal(&f, &before, &after, T), "a failed backward changed dx, a slot or a gradient");
    CHECK_OK(ctx, f8_layernorm_linear_backward(f.m, sf, &dy, NULL, &dx)); /* the saved state survived */
    CHECK_OK(ctx, f8_layernorm_linear_backward(h.m, sh, &dy, &tl, NULL));
    CHECK_STATUS(ctx, f8_layernorm_linear_backward(f.m, sf, &dy, NULL, &dx), F8_ERR_STATE); /* consumed */
    snap_free(&before), snap_free(&after);

    f8_saved_destroy(sf), f8_saved_destroy(sh), f8_saved_destroy(sg);
    f8_ctx_free(ctx, xb), f8_ctx_free(ctx, yb), f8_ctx_free(ctx, lb), f8_ctx_free(ctx, x16), f8_ctx_free(ctx, big);
    unmake(&f), unmake(&g), unmake(&h);
    f8_module_destroy(NULL);
    f8_saved_destroy(NULL);
}

int main(void)
{
    char why[256] = "";
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, NULL, why);
    if (!ctx) die(why, NULL);
    test_slots(ctx, F8_NORM_LAYERNORM, 0);
    test_slots(ctx, F8_NORM_RMSNORM, 1);
    test_workspace_regression(ctx, F8_NORM_LAYERNORM);
    test_workspace_regression(ctx, F8_NORM_RMSNORM);
    test_main_grad(ctx, 0);
    test_main_grad(ctx, 1);
    for (int fp8 = 0; fp8 < 2; fp8++)
        for (int ret = 0; ret < 2; ret++) test_zero_tokens(ctx, fp8, ret);
    test_bad_input(ctx);
    f8_ctx_destroy(ctx);
    return test_finish("test_layernorm_linear_state");
}
