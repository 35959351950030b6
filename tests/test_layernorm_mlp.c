/*
 * test_layernorm_mlp.c — f8_module on the CPU backend against FP64
 * references: FP8 off to FP32 rounding (BF16 parameters within TE's 5e-2)
 * for all seven activations (the gated ones on fc1's [a | b] split) and both
 * norms, an eps sweep with zero-centred gamma, central finite differences of
 * the FP64 forward against the module's backward; FP8 on against an oracle
 * built from the FP8 operands (norm output cast with GEMM1_INPUT's scale, the
 * two dequantized weight workspaces, the activation output cast with
 * GEMM2_INPUT's scale, dy cast with GRAD_OUTPUT1's) and within TE's FP8
 * tolerances of FP64. The slots, the #820 workspace regression, main_grad,
 * zero tokens and bad input are in test_layernorm_mlp_state.c; the FP64 model
 * and the fixture in layernorm_mlp_fixture.h.
 *
 * The FP8 oracle is interval-aware as in test_layernorm_linear.c: where
 * FP32-vs-FP64 rounding could flip an FP8 code (of the norm output, or of the
 * activation output, whose input carries the fc1 GEMM's rounding and any
 * flipped norm codes), the possible change is carried to y as an elementwise
 * bound; elsewhere the comparison is to FP32 accumulation error.
 */
#include "layernorm_mlp_fixture.h"

static double model_loss(const model *m, const double *dy)
{
    double *y = dnew((size_t)(m->T * m->H)), s = 0;
    model_forward(m, NULL, NULL, NULL, y);
    for (int64_t i = 0; i < m->T * m->H; i++) s += y[i] * dy[i];
    free(y);
    return s;
}

/* Module gradient vs central difference of the FP64 loss at one coordinate. */
static void fd_check(const char *tag, const char *name, int64_t i, double *coord, const model *m, const double *dy,
                     float analytic, double scale)
{
    double h = 1e-4 * (1.0 + fabs(*coord)), keep = *coord;
    *coord = keep + h;
    double lp = model_loss(m, dy);
    *coord = keep - h;
    double lm = model_loss(m, dy);
    *coord = keep;
    double fd = (lp - lm) / (2 * h);
    CHECK(fabs(fd - analytic) <= 1e-4 * (fabs(fd) + scale), "%s: FD %s[%lld]: finite difference %.8g vs module %.8g",
          tag, name, (long long)i, fd, (double)analytic);
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                     */
/* ------------------------------------------------------------------------ */

/* FP8 off: y and every gradient against FP64. FP32 parameters to FP32
 * rounding (and TE's fp32 atol 5e-3) plus finite differences where the
 * activation is smooth; BF16 within TE's 5e-2. */
static void test_hp(f8_ctx *ctx, f8_norm norm, int zc, float eps, f8_activation act, f8_dtype pdt, int64_t T,
                    int64_t H, int64_t F)
{
    f8_layernorm_mlp_config c = config(H, F, norm, zc, eps, act, pdt, 0, T);
    char tag[160];
    snprintf(tag, sizeof tag, "hp %s %s zc=%d eps=%g %s T=%lld H=%lld F=%lld", act_name(act), norm ? "rms" : "ln", zc,
             (double)eps, f8_dtype_name(pdt), (long long)T, (long long)H, (long long)F);
    fixture f = make(ctx, &c, 40 + (uint64_t)act * 11 + (uint64_t)norm * 3 + (uint64_t)zc);
    size_t n = (size_t)(T * H), n1 = (size_t)(f.F1 * H), n2 = (size_t)(H * F);
    float *x = fnew(n), *dy = fnew(n);
    test_rng r = {(uint64_t)(T * 17 + H + F) + (uint64_t)act + (uint64_t)(eps * 1e7f)};
    make_input(&r, x, T, H);
    fill_normal(&r, dy, n, 0.0, 1.0);
    as_stored(x, n, pdt), as_stored(dy, n, pdt);
    outputs o;
    outputs_alloc(&o, &f, T);
    step(&f, T, x, dy, pdt, F8_MICROBATCH_NONE, &o);
    model m = model_of(&f, x, T);
    double *y = dnew(n), *dyd = dnew(n);
    widen(dy, dyd, n);
    model_forward(&m, NULL, NULL, NULL, y);
    grads64 d;
    grads64_alloc(&d, &m);
    model_backward(&m, dyd, &d);
    int fp32 = pdt == F8_DTYPE_FP32;
    /* FP32: sums of ~H and ~F terms through two GEMMs, an activation and the norm backward. */
    double tol = fp32 ? 2e-6 * sqrt((double)(H + F + T)) : 3e-2;
    size_t bi;
    CHECK(te_misses(o.y, y, n, fp32 ? 0.0 : 1.6e-2, fp32 ? 5e-3 : 5e-2, &bi) == 0, "%s: y[%zu] %g vs %g", tag, bi,
          (double)o.y[bi], y[bi]);
    CHECK_REL(tag, "y", o.y, y, n, fp32 ? tol : 1e-2);
    CHECK_REL(tag, "dx", o.dx, d.dx, n, tol);
    CHECK_REL(tag, "dgamma", o.d.v[F8_PARAM_LN_WEIGHT], d.g, (size_t)H, tol);
    if (norm == F8_NORM_LAYERNORM) CHECK_REL(tag, "dbeta", o.d.v[F8_PARAM_LN_BIAS], d.be, (size_t)H, tol);
    CHECK_REL(tag, "dW1", o.d.v[F8_PARAM_FC1_WEIGHT], d.w1, n1, tol);
    CHECK_REL(tag, "db1", o.d.v[F8_PARAM_FC1_BIAS], d.b1, (size_t)f.F1, tol);
    CHECK_REL(tag, "dW2", o.d.v[F8_PARAM_FC2_WEIGHT], d.w2, n2, tol);
    CHECK_REL(tag, "db2", o.d.v[F8_PARAM_FC2_BIAS], d.b2, (size_t)H, tol);
    if (getenv("F8_TEST_VERBOSE"))
        printf("%s: y %.3g dx %.3g dW1 %.3g db1 %.3g dW2 %.3g dg %.3g\n", tag, rel_error(o.y, y, n),
               rel_error(o.dx, d.dx, n), rel_error(o.d.v[F8_PARAM_FC1_WEIGHT], d.w1, n1),
               rel_error(o.d.v[F8_PARAM_FC1_BIAS], d.b1, (size_t)f.F1), rel_error(o.d.v[F8_PARAM_FC2_WEIGHT], d.w2, n2),
               rel_error(o.d.v[F8_PARAM_LN_WEIGHT], d.g, (size_t)H));

    /* Finite differences (not across relu's kink, which a step can cross). */
    if (fp32 && act != F8_ACT_RELU && act != F8_ACT_REGLU) {
        double sx = rms_of(o.dx, n), sg = rms_of(o.d.v[F8_PARAM_LN_WEIGHT], (size_t)H);
        double sbe = rms_of(o.d.v[F8_PARAM_LN_BIAS], (size_t)H), sw1 = rms_of(o.d.v[F8_PARAM_FC1_WEIGHT], n1);
        double sb1 = rms_of(o.d.v[F8_PARAM_FC1_BIAS], (size_t)f.F1), sw2 = rms_of(o.d.v[F8_PARAM_FC2_WEIGHT], n2);
        double sb2 = rms_of(o.d.v[F8_PARAM_FC2_BIAS], (size_t)H);
        for (int trial = 0; trial < 2; trial++) {
            int64_t i = (int64_t)(rng_u64(&r) % n), k = (int64_t)(rng_u64(&r) % (uint64_t)H);
            int64_t j1 = (int64_t)(rng_u64(&r) % n1), j2 = (int64_t)(rng_u64(&r) % n2);
            int64_t f1 = (int64_t)(rng_u64(&r) % (uint64_t)f.F1);
            fd_check(tag, "dx", i, &m.x[i], &m, dyd, o.dx[i], sx);
            fd_check(tag, "dgamma", k, &m.g[k], &m, dyd, o.d.v[F8_PARAM_LN_WEIGHT][k], sg);
            if (norm == F8_NORM_LAYERNORM) fd_check(tag, "dbeta", k, &m.be[k], &m, dyd, o.d.v[F8_PARAM_LN_BIAS][k], sbe);
            fd_check(tag, "dW1", j1, &m.w1[j1], &m, dyd, o.d.v[F8_PARAM_FC1_WEIGHT][j1], sw1);
            fd_check(tag, "db1", f1, &m.b1[f1], &m, dyd, o.d.v[F8_PARAM_FC1_BIAS][f1], sb1);
            fd_check(tag, "dW2", j2, &m.w2[j2], &m, dyd, o.d.v[F8_PARAM_FC2_WEIGHT][j2], sw2);
            fd_check(tag, "db2", k, &m.b2[k], &m, dyd, o.d.v[F8_PARAM_FC2_BIAS][k], sb2);
        }
    }
    grads64_free(&d);
    model_free(&m);
    outputs_free(&o);
    unmake(&f);
    free(x), free(dy), free(y), free(dyd);
}

static size_t count_nonzero(const double *v, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += v[i] != 0;
    return c;
}

/* FP8 on, two steps (the second on amax-derived scales): y equals the
 * FP8-operand oracle and is within TE's FP8 tolerance of FP64; dW2, db2 and
 * db1 equal their oracles; the other gradients are close to FP64. */
static void test_fp8(f8_ctx *ctx, f8_norm norm, int zc, float eps, f8_activation act, f8_dtype pdt, int64_t T,
                     int64_t H, int64_t F)
{
    f8_layernorm_mlp_config c = config(H, F, norm, zc, eps, act, pdt, 1, T);
    char tag[160];
    snprintf(tag, sizeof tag, "fp8 %s %s zc=%d eps=%g %s T=%lld H=%lld F=%lld", act_name(act), norm ? "rms" : "ln", zc,
             (double)eps, f8_dtype_name(pdt), (long long)T, (long long)H, (long long)F);
    fixture f = make(ctx, &c, 900 + (uint64_t)act * 5 + (uint64_t)norm * 2 + (uint64_t)zc);
    int64_t F1 = f.F1;
    size_t n = (size_t)(T * H), n1 = (size_t)(F1 * H), n2 = (size_t)(H * F), na = (size_t)(T * F);
    float *x = fnew(n), *dy = fnew(n);
    double *ln = dnew(n), *err = dnew(n), *lnq = dnew(n), *amb = dnew(n), *w1q = dnew(n1), *w2q = dnew(n2);
    double *y = dnew(n), *dyd = dnew(n), *gq = dnew(n), *dw2 = dnew(n2), *dw2b = dnew(n2), *tmp = dnew(n2);
    double *da = dnew(na), *dh = dnew((size_t)(T * F1)), *db1 = dnew((size_t)F1), *db2 = dnew((size_t)H);
    uint8_t *codes = (uint8_t *)xmalloc(n1 > n2 ? n1 : n2);
    f8_slot s_in, s_w1, s_act, s_w2, s_go;
    CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, 0, &s_in));
    CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, 1, &s_w1));
    CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, 3, &s_act));
    CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, 4, &s_w2));
    CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_BACKWARD, 0, &s_go));
    f8_dtype e4 = f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD), e5 = f8_ctx_slot_dtype(ctx, F8_DIR_BACKWARD);
    int bf = pdt == F8_DTYPE_BF16;
    test_rng r = {(uint64_t)(T * 3 + H * 5 + F) + (uint64_t)act * 101 + (uint64_t)(eps * 1e7f)};
    outputs o;
    outputs_alloc(&o, &f, T);
    for (int it = 0; it < 2; it++) {
        make_input(&r, x, T, H);
        fill_normal(&r, dy, n, 0.0, 1e-2);
        as_stored(x, n, pdt), as_stored(dy, n, pdt);
        float sc_in, sc_w1, sc_act, sc_w2, sc_go, sinv;
        CHECK_OK(ctx, f8_slot_read(ctx, s_in, &sc_in, NULL, NULL));
        CHECK_OK(ctx, f8_slot_read(ctx, s_w1, &sc_w1, NULL, NULL));
        CHECK_OK(ctx, f8_slot_read(ctx, s_act, &sc_act, NULL, NULL));
        CHECK_OK(ctx, f8_slot_read(ctx, s_w2, &sc_w2, NULL, NULL));
        CHECK_OK(ctx, f8_slot_read(ctx, s_go, &sc_go, NULL, NULL));
        if (it == 1)
            CHECK(sc_in != 1.0f && sc_w1 != 1.0f && sc_act != 1.0f && sc_w2 != 1.0f && sc_go != 1.0f,
                  "%s: scales did not update", tag);
        CHECK_OK(ctx, f8_module_zero_grad(f.m));
        step(&f, T, x, dy, pdt, F8_MICROBATCH_NONE, &o);

        /* Each workspace is the cast of its weight with its slot's scale. */
        for (int w = 0; w < 2; w++) {
            const float *wv = f.p.v[w ? F8_PARAM_FC2_WEIGHT : F8_PARAM_FC1_WEIGHT];
            float sc = w ? sc_w2 : sc_w1;
            size_t nw = w ? n2 : n1, bad = 0;
            workspace_host(&f, w, w ? w2q : w1q, codes, &sinv);
            for (size_t i = 0; i < nw; i++) bad += codes[i] != f8_fp8_from_float(wv[i] * sc, e4);
            CHECK(bad == 0 && sinv == 1.0f / sc, "%s: fc%d workspace: %zu codes differ from the cast, scale_inv %g vs %g",
                  tag, w + 1, bad, (double)sinv, 1.0 / sc);
        }

        model m = model_of(&f, x, T);
        widen(dy, dyd, n);
        model_forward(&m, ln, NULL, NULL, y);
        norm_error_bound(m.x, m.T, m.H, m.g, m.be, m.rms, m.zc, m.eps, ln, err);
        for (size_t i = 0; i < n; i++) lnq[i] = fq_amb(ln[i], err[i], sc_in, e4, &amb[i]);
        fwd_oracle q;
        fwd_oracle_build(&m, lnq, amb, w1q, w2q, sc_act, e4, bf, &q);
        size_t wi, nb = over_bound(o.y, q.y, q.ybound, n, &wi);
        CHECK(nb == 0, "%s step %d: %zu y beyond the FP8-operand oracle, y[%zu] %.9g vs %.9g (bound %g); rel err %g",
              tag, it, nb, wi, (double)o.y[wi], q.y[wi], q.ybound[wi], rel_error(o.y, q.y, n));
        size_t first;
        nb = te_misses(o.y, y, n, 0.125, 0.0675, &first);
        CHECK(nb == 0, "%s step %d: %zu y outside TE's FP8 tolerance, y[%zu] %g vs fp64 %g", tag, it, nb, first,
              (double)o.y[first], y[first]);

        /* Backward: fc2's gradients from dy's E5M2 codes and the FP8
         * activation output; db1 from the high-precision d-activation. */
        for (size_t i = 0; i < n; i++) gq[i] = fq(dy[i], sc_go, e5);
        mm_tn(gq, q.aq, dw2, H, T, F, 0);
        mm_tn(gq, q.aq, dw2b, H, T, F, 1);
        mm_tn(gq, q.amb, tmp, H, T, F, 1);
        for (size_t i = 0; i < n2; i++) {
            dw2b[i] = (2e-7 * (double)T + 1e-6) * dw2b[i] + tmp[i] + 1e-30;
            if (bf) dw2b[i] += (fabs(dw2[i]) + dw2b[i]) / 256.0;
        }
        nb = over_bound(o.d.v[F8_PARAM_FC2_WEIGHT], dw2, dw2b, n2, &wi);
        CHECK(nb == 0, "%s step %d: %zu dW2 beyond the oracle, dW2[%zu] %.9g vs %.9g (bound %g)", tag, it, nb, wi,
              (double)o.d.v[F8_PARAM_FC2_WEIGHT][wi], dw2[wi], dw2b[wi]);
        col_sums(dyd, db2, T, H);
        CHECK_REL(tag, "db2 (unquantized dy)", o.d.v[F8_PARAM_FC2_BIAS], db2, (size_t)H, bf ? 1e-2 : 1e-5);
        mm_nn(gq, w2q, da, T, H, F, 0);
        act_rows_bwd(act, q.h, da, dh, T, F);
        col_sums(dh, db1, T, F1);
        CHECK_REL(tag, "db1 vs oracle", o.d.v[F8_PARAM_FC1_BIAS], db1, (size_t)F1, bf ? 3e-2 : 1e-4);

        /* Through two E5M2 casts (dy, d-activation) and relu's gate moved by FP8 h. */
        grads64 d;
        grads64_alloc(&d, &m);
        model_backward(&m, dyd, &d);
        CHECK_REL(tag, "dx vs fp64", o.dx, d.dx, n, 0.3);
        CHECK_REL(tag, "dW1 vs fp64", o.d.v[F8_PARAM_FC1_WEIGHT], d.w1, n1, 0.3);
        CHECK_REL(tag, "dW2 vs fp64", o.d.v[F8_PARAM_FC2_WEIGHT], d.w2, n2, 0.3);
        CHECK_REL(tag, "dgamma vs fp64", o.d.v[F8_PARAM_LN_WEIGHT], d.g, (size_t)H, 0.3);
        if (norm == F8_NORM_LAYERNORM) CHECK_REL(tag, "dbeta vs fp64", o.d.v[F8_PARAM_LN_BIAS], d.be, (size_t)H, 0.3);
        if (getenv("F8_TEST_VERBOSE"))
            printf("%s step %d: y rel %.3g vs oracle (amb ln %zu act %zu), %.3g vs fp64 (TE ratio %.2f); db1 %.3g; "
                   "fp64: dx %.3g dW1 %.3g dW2 %.3g dg %.3g\n",
                   tag, it, rel_error(o.y, q.y, n), count_nonzero(amb, n), count_nonzero(q.amb, na),
                   rel_error(o.y, y, n), te_ratio(o.y, y, n, 0.125, 0.0675),
                   rel_error(o.d.v[F8_PARAM_FC1_BIAS], db1, (size_t)F1), rel_error(o.dx, d.dx, n),
                   rel_error(o.d.v[F8_PARAM_FC1_WEIGHT], d.w1, n1), rel_error(o.d.v[F8_PARAM_FC2_WEIGHT], d.w2, n2),
                   rel_error(o.d.v[F8_PARAM_LN_WEIGHT], d.g, (size_t)H));
        grads64_free(&d);
        fwd_oracle_free(&q);
        model_free(&m);
        CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
        CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_BACKWARD));
    }
    outputs_free(&o);
    unmake(&f);
    free(x), free(dy), free(ln), free(err), free(lnq), free(amb), free(w1q), free(w2q), free(y), free(dyd), free(gq);
    free(dw2), free(dw2b), free(tmp), free(da), free(dh), free(db1), free(db2), free(codes);
}

int main(void)
{
    char why[256];
    f8_ctx *ctx = test_ctx(F8_BACKEND_CPU, NULL, why);
    if (!ctx) {
        fprintf(stderr, "cannot create a CPU ctx: %s\n", why);
        return 1;
    }
    const float eps_sweep[4] = {1e-1f, 1e-3f, 1e-5f, 1e-7f};
    for (int norm = 0; norm < 2; norm++) {
        for (int act = 0; act < 7; act++) {
            test_hp(ctx, (f8_norm)norm, act & 1, 1e-5f, (f8_activation)act, F8_DTYPE_FP32, 16, 32, 48);
            test_fp8(ctx, (f8_norm)norm, act & 1, 1e-5f, (f8_activation)act, F8_DTYPE_FP32, 32, 64, 96);
        }
        for (int zc = 0; zc < 2; zc++)
            for (int e = 0; e < 4; e++) test_hp(ctx, (f8_norm)norm, zc, eps_sweep[e], F8_ACT_GELU, F8_DTYPE_FP32, 8, 24, 40);
        test_hp(ctx, (f8_norm)norm, 1, 1e-5f, F8_ACT_SWIGLU, F8_DTYPE_BF16, 32, 64, 96);
        test_fp8(ctx, (f8_norm)norm, 0, 1e-5f, F8_ACT_GEGLU, F8_DTYPE_BF16, 32, 64, 96);
    }
    f8_ctx_destroy(ctx);
    return test_finish("test_layernorm_mlp");
}
