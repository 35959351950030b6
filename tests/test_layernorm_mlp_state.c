/*
 * test_layernorm_mlp_state.c — f8_layernorm_mlp on the CPU backend beyond its
 * numerics (test_layernorm_mlp.c): the slots TE writes (§2.5); the #820
 * workspace regression for fc1 and fc2; main_grad; zero tokens; bad input.
 */
#include "layernorm_mlp_fixture.h"

/* TE §2.5: a FP8 forward + backward writes forward slots 0 (norm output),
 * 1 (fc1 weight), 3 (activation output), 4 (fc2 weight) and backward slots
 * 0 (dy) and 2 (the d-activation, fc1's dY); slots 2 and 5 forward, 1 and 3
 * backward keep amax 0 and, after the update, scale 1. */
static void test_slots(f8_ctx *ctx, f8_norm norm, f8_activation act)
{
    const int64_t T = 16, H = 32, F = 48;
    f8_layernorm_mlp_config c = config(H, F, norm, 0, 1e-5f, act, F8_DTYPE_FP32, 1, T);
    fixture f = make(ctx, &c, 61 + (uint64_t)act);
    size_t n = (size_t)(T * H);
    float *x = fnew(n), *dy = fnew(n);
    test_rng r = {61};
    make_input(&r, x, T, H);
    fill_normal(&r, dy, n, 0.0, 0.1);
    f8_slot s[10];
    for (int i = 0; i < 6; i++) CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, i, &s[i]));
    for (int i = 0; i < 4; i++) CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_BACKWARD, i, &s[6 + i]));
    float a[10], sc[10];
    int empty = 1;
    for (int i = 0; i < 10; i++) empty &= slot_amax(ctx, s[i], &sc[i]) == 0.0f;
    CHECK(empty, "slots not empty at creation");
    outputs o;
    outputs_alloc(&o, &f, T);
    step(&f, T, x, dy, F8_DTYPE_FP32, F8_MICROBATCH_NONE, &o);
    for (int i = 0; i < 10; i++) a[i] = slot_amax(ctx, s[i], &sc[i]);
    model m = model_of(&f, x, T);
    double *ln = dnew(n), *h = dnew((size_t)(T * f.F1)), *av = dnew((size_t)(T * F)), *y = dnew(n);
    model_forward(&m, ln, h, av, y);
    /* The activation amax is of what the module computed: act of the fc1
     * output through the FP8 operands (slots at scale 1 in this first step). */
    double *err = dnew(n), *lnq = dnew(n), *amb = dnew(n), *w1q = dnew((size_t)(f.F1 * H)), *w2q = dnew((size_t)(H * F));
    norm_error_bound(m.x, m.T, m.H, m.g, m.be, m.rms, m.zc, m.eps, ln, err);
    for (size_t i = 0; i < n; i++) lnq[i] = fq_amb(ln[i], err[i], 1.0f, F8_DTYPE_E4M3, &amb[i]);
    workspace_host(&f, 0, w1q, NULL, NULL);
    workspace_host(&f, 1, w2q, NULL, NULL);
    fwd_oracle q;
    fwd_oracle_build(&m, lnq, amb, w1q, w2q, 1.0f, F8_DTYPE_E4M3, 0, &q);
    act_rows(act, q.h, av, T, F);
    double want_ln = max_abs_d(ln, n), want_act = max_abs_d(av, (size_t)(T * F));
    fwd_oracle_free(&q);
    free(err), free(lnq), free(amb), free(w1q), free(w2q);
    const float *w1 = f.p.v[F8_PARAM_FC1_WEIGHT], *w2 = f.p.v[F8_PARAM_FC2_WEIGHT];
    CHECK(fabs(a[0] - want_ln) <= 1e-5 * want_ln, "%s: GEMM1_INPUT amax %g, max|norm(x)| %g", act_name(act),
          (double)a[0], want_ln);
    CHECK(a[1] == max_abs_f(w1, (size_t)(f.F1 * H)), "GEMM1_WEIGHT amax %g, max|W1| %g", (double)a[1],
          (double)max_abs_f(w1, (size_t)(f.F1 * H)));
    CHECK(fabs(a[3] - want_act) <= 1e-4 * want_act, "%s: GEMM2_INPUT amax %g, max|act| %g", act_name(act),
          (double)a[3], want_act);
    CHECK(a[4] == max_abs_f(w2, (size_t)(H * F)), "GEMM2_WEIGHT amax %g, max|W2| %g", (double)a[4],
          (double)max_abs_f(w2, (size_t)(H * F)));
    CHECK(a[6] == max_abs_f(dy, n), "GRAD_OUTPUT1 amax %g, max|dy| %g", (double)a[6], (double)max_abs_f(dy, n));
    CHECK(a[8] > 0.0f, "%s: GRAD_OUTPUT2 (d-activation) not written", act_name(act));
    CHECK(a[2] == 0.0f && a[5] == 0.0f, "GEMM1_OUTPUT / GEMM2_OUTPUT written (amax %g, %g)", (double)a[2],
          (double)a[5]);
    CHECK(a[7] == 0.0f && a[9] == 0.0f, "GRAD_INPUT1 / GRAD_INPUT2 written (amax %g, %g)", (double)a[7], (double)a[9]);
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_BACKWARD));
    for (int i = 0; i < 10; i++) a[i] = slot_amax(ctx, s[i], &sc[i]);
    CHECK(sc[2] == 1.0f && sc[5] == 1.0f && sc[7] == 1.0f && sc[9] == 1.0f, "unused slots' scales moved");
    CHECK(sc[0] != 1.0f && sc[1] != 1.0f && sc[3] != 1.0f && sc[4] != 1.0f && sc[6] != 1.0f && sc[8] != 1.0f,
          "used slots' scales did not move");
    f8_slot extra;
    CHECK_STATUS(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, 6, &extra), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_slot(f.m, F8_DIR_BACKWARD, 4, &extra), F8_ERR_INVALID_ARGUMENT);
    model_free(&m);
    outputs_free(&o);
    unmake(&f);
    free(x), free(dy), free(ln), free(h), free(av), free(y);
}

/* TE #820 for both weights: microbatch 1 (FIRST) casts W1 and W2; the
 * forward scale update moves both weight scales; microbatch 2 (NOT_FIRST,
 * same x) must use both workspaces' microbatch-1 codes with their own
 * scale_inv, and write neither weight slot's amax. */
static void test_workspace_regression(f8_ctx *ctx, f8_activation act)
{
    const int64_t T = 16, H = 32, F = 48;
    f8_layernorm_mlp_config c = config(H, F, F8_NORM_LAYERNORM, 0, 1e-5f, act, F8_DTYPE_FP32, 1, T);
    fixture f = make(ctx, &c, 820);
    int64_t F1 = f.F1;
    size_t n = (size_t)(T * H), nw[2] = {(size_t)(F1 * H), (size_t)(H * F)};
    float *x = fnew(n), *dy = fnew(n);
    double *wq[2], *wq_after = dnew(nw[0] > nw[1] ? nw[0] : nw[1]), *wbug = dnew(nw[0] > nw[1] ? nw[0] : nw[1]);
    double *ln = dnew(n), *err = dnew(n), *lnq = dnew(n), *amb = dnew(n), *y = dnew(n);
    uint8_t *c1[2], *c2 = (uint8_t *)xmalloc(nw[0] > nw[1] ? nw[0] : nw[1]);
    float sinv1[2], sinv2, sw1[2], sw2[2], s_in2, s_act2;
    test_rng r = {820};
    make_input(&r, x, T, H);
    fill_normal(&r, dy, n, 0.0, 1e-2);
    f8_slot sl[5];
    for (int i = 0; i < 5; i++) CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, i, &sl[i]));
    outputs o;
    outputs_alloc(&o, &f, T);
    for (int w = 0; w < 2; w++) CHECK_OK(ctx, f8_slot_read(ctx, sl[w ? 4 : 1], &sw1[w], NULL, NULL));
    step(&f, T, x, dy, F8_DTYPE_FP32, F8_MICROBATCH_FIRST, &o);
    for (int w = 0; w < 2; w++) {
        wq[w] = dnew(nw[w]);
        c1[w] = (uint8_t *)xmalloc(nw[w]);
        workspace_host(&f, w, wq[w], c1[w], &sinv1[w]);
        CHECK(sinv1[w] == 1.0f / sw1[w], "fc%d workspace scale_inv %g after FIRST, expected %g", w + 1,
              (double)sinv1[w], 1.0 / sw1[w]);
    }
    CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
    for (int w = 0; w < 2; w++) {
        CHECK_OK(ctx, f8_slot_read(ctx, sl[w ? 4 : 1], &sw2[w], NULL, NULL));
        CHECK(sw2[w] != sw1[w], "fc%d weight scale did not change: the regression would prove nothing", w + 1);
    }
    CHECK_OK(ctx, f8_slot_read(ctx, sl[0], &s_in2, NULL, NULL));
    CHECK_OK(ctx, f8_slot_read(ctx, sl[3], &s_act2, NULL, NULL));

    step(&f, T, x, dy, F8_DTYPE_FP32, F8_MICROBATCH_NOT_FIRST, &o);
    for (int w = 0; w < 2; w++) {
        workspace_host(&f, w, wq_after, c2, &sinv2);
        CHECK(memcmp(c1[w], c2, nw[w]) == 0 && sinv2 == sinv1[w], "NOT_FIRST rewrote the fc%d workspace (scale_inv %g -> %g)",
              w + 1, (double)sinv1[w], (double)sinv2);
    }
    float am[5];
    for (int i = 0; i < 5; i++) am[i] = slot_amax(ctx, sl[i], NULL);
    CHECK(am[1] == 0.0f && am[4] == 0.0f && am[0] > 0.0f && am[3] > 0.0f,
          "NOT_FIRST: weight amaxes %g %g (want 0), input amaxes %g %g (want > 0)", (double)am[1], (double)am[4],
          (double)am[0], (double)am[3]);

    model m = model_of(&f, x, T);
    model_forward(&m, ln, NULL, NULL, y);
    norm_error_bound(m.x, m.T, m.H, m.g, m.be, m.rms, m.zc, m.eps, ln, err);
    for (size_t i = 0; i < n; i++) lnq[i] = fq_amb(ln[i], err[i], s_in2, F8_DTYPE_E4M3, &amb[i]);
    fwd_oracle q;
    fwd_oracle_build(&m, lnq, amb, wq[0], wq[1], s_act2, F8_DTYPE_E4M3, 0, &q);
    size_t wi, nb = over_bound(o.y, q.y, q.ybound, n, &wi);
    CHECK(nb == 0, "%s microbatch 2: %zu y off the microbatch-1 workspaces' oracle, y[%zu] %.9g vs %.9g (bound %g)",
          act_name(act), nb, wi, (double)o.y[wi], q.y[wi], q.ybound[wi]);
    /* The pre-#820 bug, one weight at a time: microbatch-1 codes with the new scale_inv. */
    for (int w = 0; w < 2; w++) {
        for (size_t i = 0; i < nw[w]; i++) wbug[i] = wq[w][i] * sw1[w] / sw2[w];
        fwd_oracle b;
        fwd_oracle_build(&m, lnq, amb, w ? wq[0] : wbug, w ? wbug : wq[1], s_act2, F8_DTYPE_E4M3, 0, &b);
        CHECK(rel_error(o.y, b.y, n) > 1e-2, "%s microbatch 2 matches the stale-scale bug of fc%d (rel %g)",
              act_name(act), w + 1, rel_error(o.y, b.y, n));
        fwd_oracle_free(&b);
    }
    fwd_oracle_free(&q);
    model_free(&m);
    outputs_free(&o);
    unmake(&f);
    for (int w = 0; w < 2; w++) free(wq[w]), free(c1[w]);
    free(x), free(dy), free(wq_after), free(wbug), free(ln), free(err), free(lnq), free(amb), free(y), free(c2);
}

/* main_grad per §4.3 for fc1 and fc2: FIRST overwrites, NOT_FIRST and NONE
 * accumulate; the module's weight gradients stay 0, the others accumulate. */
static void test_main_grad(f8_ctx *ctx, int fp8)
{
    const int64_t T = 16, H = 32, F = 48;
    f8_layernorm_mlp_config c = config(H, F, F8_NORM_LAYERNORM, 0, 1e-5f, F8_ACT_SWIGLU, F8_DTYPE_FP32, fp8, T);
    c.fuse_wgrad_accumulation = 1;
    fixture f = make(ctx, &c, 33);
    int64_t F1 = f.F1;
    size_t n = (size_t)(T * H), nw[2] = {(size_t)(F1 * H), (size_t)(H * F)};
    float *x = fnew(n), *dy = fnew(n), *g[2][3];
    test_rng r = {33};
    make_input(&r, x, T, H);
    fill_normal(&r, dy, n, 0.0, 0.1);
    void *mg[2];
    for (int w = 0; w < 2; w++) {
        float *seven = fnew(nw[w]);
        for (size_t i = 0; i < nw[w]; i++) seven[i] = 7.0f;
        mg[w] = put(ctx, seven, nw[w], F8_DTYPE_FP32);
        free(seven);
    }
    void *xb = put(ctx, x, n, F8_DTYPE_FP32), *yb = put(ctx, NULL, n, F8_DTYPE_FP32), *dyb = put(ctx, dy, n, F8_DTYPE_FP32);
    f8_tensor tx = f8_tensor_make(xb, F8_DTYPE_FP32, T, H), ty = f8_tensor_make(yb, F8_DTYPE_FP32, T, H);
    f8_tensor tdy = f8_tensor_make(dyb, F8_DTYPE_FP32, T, H);
    f8_saved *s = NULL;
    CHECK_OK(ctx, f8_module_saved_create(f.m, &s));
    CHECK_OK(ctx, f8_module_forward(f.m, &tx, &ty, F8_MICROBATCH_FIRST, s));
    CHECK_STATUS(ctx, f8_module_backward(f.m, s, &tdy, NULL), F8_ERR_STATE); /* no main_grad yet */
    f8_tensor none;
    CHECK_STATUS(ctx, f8_module_param(f.m, F8_PARAM_FC2_WEIGHT, 1, &none), F8_ERR_STATE); /* no gradient yet */
    CHECK_OK(ctx, f8_module_set_main_grad(f.m, F8_PARAM_FC1_WEIGHT, (float *)mg[0]));
    CHECK_OK(ctx, f8_module_set_main_grad(f.m, F8_PARAM_FC2_WEIGHT, (float *)mg[1]));
    const f8_microbatch mbs[3] = {F8_MICROBATCH_FIRST, F8_MICROBATCH_NOT_FIRST, F8_MICROBATCH_NONE};
    for (int i = 0; i < 3; i++) {
        if (i > 0) CHECK_OK(ctx, f8_module_forward(f.m, &tx, &ty, mbs[i], s));
        CHECK_OK(ctx, f8_module_backward(f.m, s, &tdy, NULL));
        for (int w = 0; w < 2; w++) {
            g[w][i] = fnew(nw[w]);
            load(ctx, mg[w], F8_DTYPE_FP32, g[w][i], nw[w]);
        }
    }
    model m = model_of(&f, x, T);
    double *dyd = dnew(n);
    widen(dy, dyd, n);
    grads64 d;
    grads64_alloc(&d, &m);
    model_backward(&m, dyd, &d);
    for (int w = 0; w < 2; w++) {
        double e = rel_error(g[w][0], w ? d.w2 : d.w1, nw[w]);
        CHECK(e < (fp8 ? 0.3 : 1e-5), "fp8=%d: FIRST fc%d main_grad is not dW (rel %g): not overwritten?", fp8, w + 1, e);
        int acc = 1;
        for (size_t i = 0; i < nw[w]; i++)
            acc &= fabsf(g[w][1][i] - 2 * g[w][0][i]) <= 1e-5f * (1 + fabsf(g[w][0][i])) &&
                   fabsf(g[w][2][i] - 3 * g[w][0][i]) <= 1e-5f * (1 + fabsf(g[w][0][i]));
        CHECK(acc, "fp8=%d: NOT_FIRST / NONE did not accumulate into fc%d's main_grad", fp8, w + 1);
    }
    params p;
    params_alloc(&p, &c);
    read_all(&f, 1, &p);
    int same = 1; /* no weight gradients of its own: the views are the main_grads */
    for (size_t i = 0; i < nw[0]; i++) same &= p.v[F8_PARAM_FC1_WEIGHT][i] == g[0][2][i];
    for (size_t i = 0; i < nw[1]; i++) same &= p.v[F8_PARAM_FC2_WEIGHT][i] == g[1][2][i];
    CHECK(same, "fp8=%d: the fused weights' gradient views are not their main_grads", fp8);
    for (int64_t i = 0; i < H; i++) d.b2[i] *= 3, d.g[i] *= 3, d.be[i] *= 3;
    for (int64_t i = 0; i < F1; i++) d.b1[i] *= 3;
    CHECK_REL("main_grad", "db2 after 3 steps", p.v[F8_PARAM_FC2_BIAS], d.b2, (size_t)H, 1e-5);
    CHECK_REL("main_grad", "db1 after 3 steps", p.v[F8_PARAM_FC1_BIAS], d.b1, (size_t)F1, fp8 ? 0.3 : 1e-5);
    CHECK_REL("main_grad", "dgamma after 3 steps", p.v[F8_PARAM_LN_WEIGHT], d.g, (size_t)H, fp8 ? 0.3 : 1e-5);
    CHECK_REL("main_grad", "dbeta after 3 steps", p.v[F8_PARAM_LN_BIAS], d.be, (size_t)H, fp8 ? 0.3 : 1e-5);
    params_free(&p);
    grads64_free(&d);
    model_free(&m);
    f8_saved_destroy(s);
    for (int w = 0; w < 2; w++) {
        f8_ctx_free(ctx, mg[w]);
        for (int i = 0; i < 3; i++) free(g[w][i]);
    }
    f8_ctx_free(ctx, xb), f8_ctx_free(ctx, yb), f8_ctx_free(ctx, dyb);
    unmake(&f);
    free(x), free(dy), free(dyd);
}

/* T = 0: legal, writes nothing; gradients stay 0. */
static void test_zero_tokens(f8_ctx *ctx, int fp8)
{
    const int64_t H = 32, F = 16;
    f8_layernorm_mlp_config c = config(H, F, F8_NORM_LAYERNORM, 0, 1e-5f, F8_ACT_GEGLU, F8_DTYPE_FP32, fp8, 8);
    fixture f = make(ctx, &c, 9);
    void *p = put(ctx, NULL, 16, F8_DTYPE_FP32);
    f8_tensor t0 = f8_tensor_make(p, F8_DTYPE_FP32, 0, H), y0 = t0, dy0 = t0, dx0 = t0;
    f8_saved *s = NULL;
    CHECK_OK(ctx, f8_module_saved_create(f.m, &s));
    CHECK_OK(ctx, f8_module_forward(f.m, &t0, &y0, F8_MICROBATCH_NONE, s));
    CHECK_OK(ctx, f8_module_backward(f.m, s, &dy0, &dx0));
    params d;
    params_alloc(&d, &c);
    read_all(&f, 1, &d);
    int zero = 1;
    for (int i = 0; i < 6; i++) {
        size_t cnt = param_count(&c, mlp_params[i]);
        for (size_t j = 0; j < cnt; j++) zero &= d.v[mlp_params[i]][j] == 0.0f;
    }
    CHECK(zero, "zero tokens changed the gradients (fp8=%d)", fp8);
    params_free(&d);
    f8_saved_destroy(s);
    f8_ctx_free(ctx, p);
    unmake(&f);
}

/* Everything a failed call must leave alone: all ten slots, y and the gradients. */
typedef struct {
    float *slots, *y;
    params grads;
} snapshot;

static void snap(fixture *f, void *yb, int64_t T, snapshot *s)
{
    int L = f8_ctx_recipe(f->ctx)->amax_history_len;
    s->slots = fnew((size_t)(10 * (L + 2)));
    for (int i = 0; i < 10; i++) {
        f8_slot sl;
        float *d = s->slots + i * (L + 2);
        CHECK_OK(f->ctx, f8_module_slot(f->m, i < 6 ? F8_DIR_FORWARD : F8_DIR_BACKWARD, i < 6 ? i : i - 6, &sl));
        CHECK_OK(f->ctx, f8_slot_read(f->ctx, sl, &d[0], &d[1], d + 2));
    }
    s->y = fnew((size_t)(T * f->c.hidden_size));
    load(f->ctx, yb, F8_DTYPE_FP32, s->y, (size_t)(T * f->c.hidden_size));
    params_alloc(&s->grads, &f->c);
    read_all(f, 1, &s->grads);
}

static int snap_equal(fixture *f, const snapshot *a, const snapshot *b, int64_t T)
{
    int L = f8_ctx_recipe(f->ctx)->amax_history_len;
    int same = memcmp(a->slots, b->slots, (size_t)(10 * (L + 2)) * 4) == 0;
    same &= memcmp(a->y, b->y, (size_t)(T * f->c.hidden_size) * 4) == 0;
    for (int i = 0; i < 6; i++)
        same &= memcmp(a->grads.v[mlp_params[i]], b->grads.v[mlp_params[i]], param_count(&f->c, mlp_params[i]) * 4) == 0;
    return same;
}

static void snap_free(snapshot *s)
{
    free(s->slots), free(s->y);
    params_free(&s->grads);
}

/* Bad arguments return the documented status and change nothing. */
static void test_bad_input(f8_ctx *ctx)
{
    const int64_t T = 8, H = 16, F = 24;
    f8_layernorm_mlp_config c = config(H, F, F8_NORM_LAYERNORM, 0, 1e-5f, F8_ACT_GELU, F8_DTYPE_FP32, 1, T);
    fixture f = make(ctx, &c, 1); /* FP8 */
    c = config(H, F, F8_NORM_RMSNORM, 0, 1e-5f, F8_ACT_REGLU, F8_DTYPE_FP32, 0, T);
    c.bias = 0;
    fixture g = make(ctx, &c, 2); /* FP8 off, RMSNorm, no biases */
    float host[512];
    for (int i = 0; i < 512; i++) host[i] = 0.25f * (float)(i % 7) - 0.6f;
    size_t n = (size_t)(T * H);
    void *xb = put(ctx, host, n, F8_DTYPE_FP32), *yb = put(ctx, host, n, F8_DTYPE_FP32);
    void *x16 = put(ctx, host, n, F8_DTYPE_BF16), *big = put(ctx, host, 512, F8_DTYPE_FP32);
    f8_tensor tx = f8_tensor_make(xb, F8_DTYPE_FP32, T, H), ty = f8_tensor_make(yb, F8_DTYPE_FP32, T, H), bad;
    f8_saved *sf = NULL, *sg = NULL;
    CHECK_OK(ctx, f8_module_saved_create(f.m, &sf));
    CHECK_OK(ctx, f8_module_saved_create(g.m, &sg));
    snapshot before, after;
    snap(&f, yb, T, &before);
    const f8_microbatch none = F8_MICROBATCH_NONE;
    CHECK_STATUS(ctx, f8_module_forward(NULL, &tx, &ty, none, sf), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_forward(f.m, NULL, &ty, none, sf), F8_ERR_INVALID_ARGUMENT);
    CHECK(strlen(f8_ctx_last_error(ctx)) > 0, "no message for a NULL x");
    CHECK_STATUS(ctx, f8_module_forward(f.m, &tx, NULL, none, sf), F8_ERR_INVALID_ARGUMENT);
    bad = tx, bad.data = NULL;
    CHECK_STATUS(ctx, f8_module_forward(f.m, &bad, &ty, none, sf), F8_ERR_INVALID_ARGUMENT);
    bad = tx, bad.cols = H + 1;
    CHECK_STATUS(ctx, f8_module_forward(f.m, &bad, &ty, none, sf), F8_ERR_SHAPE);
    bad = ty, bad.rows = T - 1;
    CHECK_STATUS(ctx, f8_module_forward(f.m, &tx, &bad, none, sf), F8_ERR_SHAPE);
    bad = ty, bad.cols = F;
    CHECK_STATUS(ctx, f8_module_forward(f.m, &tx, &bad, none, sf), F8_ERR_SHAPE);
    {
        f8_tensor xbig = f8_tensor_make(big, F8_DTYPE_FP32, T + 1, H), ybig = xbig;
        CHECK_STATUS(ctx, f8_module_forward(f.m, &xbig, &ybig, none, sf), F8_ERR_SHAPE); /* > max_tokens */
    }
    bad = tx, bad.dtype = F8_DTYPE_E4M3, bad.scale_inv = (float *)big;
    CHECK_STATUS(ctx, f8_module_forward(f.m, &bad, &ty, none, sf), F8_ERR_DTYPE);
    bad = ty, bad.dtype = F8_DTYPE_E4M3, bad.scale_inv = (float *)big;
    CHECK_STATUS(ctx, f8_module_forward(f.m, &tx, &bad, none, sf), F8_ERR_DTYPE);
    CHECK_STATUS(ctx, f8_module_forward(f.m, &tx, &ty, (f8_microbatch)3, sf), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_forward(f.m, &tx, &ty, none, sg), F8_ERR_INVALID_ARGUMENT); /* g's saved */
    f8_tensor tx16 = f8_tensor_make(x16, F8_DTYPE_BF16, T, H);
    CHECK_STATUS(ctx, f8_module_forward(g.m, &tx16, &ty, none, sg), F8_ERR_DTYPE); /* FP8 off: x in param dtype */
    CHECK_STATUS(ctx, f8_module_backward(f.m, sf, &ty, NULL), F8_ERR_STATE); /* no forward yet */
    CHECK_STATUS(ctx, f8_module_backward(f.m, NULL, &ty, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_backward(NULL, sf, &ty, NULL), F8_ERR_INVALID_ARGUMENT);

    f8_tensor v;
    CHECK_STATUS(ctx, f8_module_param(g.m, F8_PARAM_LN_BIAS, 0, &v), F8_ERR_STATE); /* RMSNorm */
    CHECK_STATUS(ctx, f8_module_param(g.m, F8_PARAM_FC1_BIAS, 0, &v), F8_ERR_STATE); /* bias = 0 */
    CHECK_STATUS(ctx, f8_module_param(g.m, F8_PARAM_FC2_BIAS, 1, &v), F8_ERR_STATE);
    CHECK_STATUS(ctx, f8_module_param(f.m, F8_PARAM_WEIGHT, 0, &v), F8_ERR_INVALID_ARGUMENT); /* LNLinear's */
    CHECK_STATUS(ctx, f8_module_param(f.m, (f8_param)42, 0, &v), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_param(f.m, F8_PARAM_FC1_WEIGHT, 0, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_set_main_grad(f.m, F8_PARAM_FC1_WEIGHT, (float *)big), F8_ERR_STATE); /* not fused */
    CHECK_STATUS(ctx, f8_module_set_main_grad(f.m, F8_PARAM_WEIGHT, (float *)big), F8_ERR_INVALID_ARGUMENT); /* not an MLP weight */
    CHECK(f8_module_weight_workspace(f.m, F8_PARAM_WEIGHT) == NULL, "an MLP has a WEIGHT workspace");
    CHECK(f8_module_weight_workspace(f.m, F8_PARAM_FC2_BIAS) == NULL, "a bias has a workspace");
    CHECK(f8_module_weight_workspace(NULL, F8_PARAM_FC1_WEIGHT) == NULL, "workspace of NULL");
    {
        /* fc1 is [2F, H] with a gated activation, fc2 [H, F] either way. */
        f8_tensor w1, w2;
        f8_layernorm_mlp_config cg = config(H, F, F8_NORM_LAYERNORM, 0, 1e-5f, F8_ACT_SWIGLU, F8_DTYPE_FP32, 1, T);
        f8_module *mg = NULL;
        CHECK_OK(ctx, f8_layernorm_mlp_create(ctx, &cg, &mg));
        CHECK_OK(ctx, f8_module_param(mg, F8_PARAM_FC1_WEIGHT, 0, &w1));
        CHECK_OK(ctx, f8_module_param(mg, F8_PARAM_FC2_WEIGHT, 0, &w2));
        CHECK(w1.rows == 2 * F && w1.cols == H && w2.rows == H && w2.cols == F, "gated shapes fc1 [%lld,%lld] fc2 [%lld,%lld]",
              (long long)w1.rows, (long long)w1.cols, (long long)w2.rows, (long long)w2.cols);
        f8_module_destroy(mg);
    }
    f8_module *m2 = NULL;
    f8_layernorm_mlp_config cc = f8_layernorm_mlp_config_default(0, 4);
    CHECK_STATUS(ctx, f8_layernorm_mlp_create(ctx, &cc, &m2), F8_ERR_SHAPE);
    cc = f8_layernorm_mlp_config_default(4, 0);
    CHECK_STATUS(ctx, f8_layernorm_mlp_create(ctx, &cc, &m2), F8_ERR_SHAPE);
    cc = f8_layernorm_mlp_config_default(4, 4);
    cc.param_dtype = F8_DTYPE_E5M2;
    CHECK_STATUS(ctx, f8_layernorm_mlp_create(ctx, &cc, &m2), F8_ERR_DTYPE);
    cc = f8_layernorm_mlp_config_default(4, 4);
    cc.activation = (f8_activation)9;
    CHECK_STATUS(ctx, f8_layernorm_mlp_create(ctx, &cc, &m2), F8_ERR_INVALID_ARGUMENT);
    cc = f8_layernorm_mlp_config_default(4, 4);
    cc.normalization = (f8_norm)2;
    CHECK_STATUS(ctx, f8_layernorm_mlp_create(ctx, &cc, &m2), F8_ERR_INVALID_ARGUMENT);
    CHECK(m2 == NULL, "a failed create left an object");
    CHECK_STATUS(ctx, f8_layernorm_mlp_create(ctx, NULL, &m2), F8_ERR_INVALID_ARGUMENT);
    snap(&f, yb, T, &after);
    CHECK(snap_equal(&f, &before, &after, T), "a failed call changed y, a slot or a gradient");
    snap_free(&after);

    /* A valid forward, then bad backwards change nothing and keep the saved state. */
    CHECK_OK(ctx, f8_module_forward(f.m, &tx, &ty, none, sf));
    snap_free(&before);
    snap(&f, yb, T, &before);
    f8_tensor dy = f8_tensor_make(big, F8_DTYPE_FP32, T, H), dx = f8_tensor_make(xb, F8_DTYPE_FP32, T, H);
    float *xkeep = fnew(n), *xnow = fnew(n);
    load(ctx, xb, F8_DTYPE_FP32, xkeep, n);
    bad = dy, bad.cols = H + 1;
    CHECK_STATUS(ctx, f8_module_backward(f.m, sf, &bad, NULL), F8_ERR_SHAPE);
    bad = dx, bad.rows = T - 1;
    CHECK_STATUS(ctx, f8_module_backward(f.m, sf, &dy, &bad), F8_ERR_SHAPE);
    bad = dy, bad.dtype = F8_DTYPE_E5M2, bad.scale_inv = (float *)big;
    CHECK_STATUS(ctx, f8_module_backward(f.m, sf, &bad, NULL), F8_ERR_DTYPE);
    CHECK_STATUS(ctx, f8_module_backward(f.m, sf, NULL, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ctx, f8_module_backward(g.m, sf, &dy, NULL), F8_ERR_INVALID_ARGUMENT); /* f's saved */
    snap(&f, yb, T, &after);
    load(ctx, xb, F8_DTYPE_FP32, xnow, n);
    CHECK(snap_equal(&f, &before, &after, T) && memcmp(xkeep, xnow, n * 4) == 0,
          "a failed backward changed dx, a slot or a gradient");
    CHECK_OK(ctx, f8_module_backward(f.m, sf, &dy, NULL)); /* the saved state survived */
    CHECK_STATUS(ctx, f8_module_backward(f.m, sf, &dy, NULL), F8_ERR_STATE); /* consumed */
    snap_free(&before), snap_free(&after);
    free(xkeep), free(xnow);
    f8_saved_destroy(sf), f8_saved_destroy(sg);
    f8_ctx_free(ctx, xb), f8_ctx_free(ctx, yb), f8_ctx_free(ctx, x16), f8_ctx_free(ctx, big);
    unmake(&f), unmake(&g);
    f8_module_destroy(NULL);
    f8_saved_destroy(NULL);
}

int main(void)
{
    char why[256] = "";
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, NULL, why);
    if (!ctx) die(why, NULL);
    test_slots(ctx, F8_NORM_LAYERNORM, F8_ACT_GELU);
    test_slots(ctx, F8_NORM_RMSNORM, F8_ACT_SWIGLU);
    test_workspace_regression(ctx, F8_ACT_GELU);
    test_workspace_regression(ctx, F8_ACT_REGLU);
    test_main_grad(ctx, 0);
    test_main_grad(ctx, 1);
    test_zero_tokens(ctx, 0);
    test_zero_tokens(ctx, 1);
    test_bad_input(ctx);
    f8_ctx_destroy(ctx);
    return test_finish("test_layernorm_mlp_state");
}
