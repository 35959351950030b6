/*
 * test_layernorm_linear.c — f8_module on the CPU backend against
 * FP64 references: FP8 off to FP32 rounding (BF16 parameters within TE's BF16
 * tolerance) over an eps sweep, both norms and zero-centred gamma; central
 * finite differences of the FP64 forward against the module's backward; FP8
 * on against an oracle built from the FP8 operands (norm output cast with the
 * INPUT slot's scale, the dequantized weight workspace, dy cast with the
 * GRAD_OUTPUT scale) and within TE's FP8 tolerances of FP64;
 * return_layernorm_output with its gradient. The slots, the #820 workspace
 * regression, main_grad, zero tokens and bad input are in
 * test_layernorm_linear_state.c; the FP64 model and the fixture in
 * layernorm_linear_fixture.h.
 *
 * The FP8 oracle is interval-aware: the library computes the norm output in
 * FP32 and the host in FP64, so an element lying within FP32 rounding of an
 * FP8 rounding boundary may take either code. Such elements are found (the
 * cast of v ± its FP32 error bound differs) and the change they can cause is
 * carried through the GEMMs as an elementwise bound; everywhere else the
 * comparison is to FP32 accumulation error.
 */
#include "layernorm_linear_fixture.h"

static double model_loss(const model *m, const double *dy, const double *dln)
{
    int64_t T = m->T, K = m->K, N = m->N;
    double *ln = dnew((size_t)(T * K)), *y = dnew((size_t)(T * N)), s = 0;
    model_forward(m, ln, y);
    for (int64_t i = 0; i < T * N; i++) s += y[i] * dy[i];
    if (dln)
        for (int64_t i = 0; i < T * K; i++) s += ln[i] * dln[i];
    free(ln), free(y);
    return s;
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                     */
/* ------------------------------------------------------------------------ */

/* Module gradient vs central difference of the FP64 loss at one coordinate. */
static void fd_check(const char *name, int64_t i, double *coord, const model *m, const double *dy, const double *dln,
                     float analytic, double scale)
{
    double h = 1e-4 * (1.0 + fabs(*coord)), keep = *coord;
    *coord = keep + h;
    double lp = model_loss(m, dy, dln);
    *coord = keep - h;
    double lm = model_loss(m, dy, dln);
    *coord = keep;
    double fd = (lp - lm) / (2 * h);
    CHECK(fabs(fd - analytic) <= 1e-4 * (fabs(fd) + scale), "FD %s[%lld]: finite difference %.8g vs module %.8g", name,
          (long long)i, fd, (double)analytic);
}

/* FP8 off: y, ln_out and every gradient against FP64. FP32 parameters to
 * FP32 rounding (and TE's fp32 atol 2.5e-4), plus finite differences; BF16
 * within TE's bf16 tolerance. */
static void test_hp(f8_ctx *ctx, f8_norm norm, int zc, float eps, int ret_ln, f8_dtype pdt, int64_t T, int64_t K,
                    int64_t N)
{
    f8_layernorm_linear_config c = config(K, N, norm, zc, eps, ret_ln, pdt, 0, T);
    char tag[160];
    snprintf(tag, sizeof tag, "hp %s zc=%d eps=%g ret_ln=%d %s T=%lld K=%lld N=%lld", norm ? "rms" : "ln", zc,
             (double)eps, ret_ln, f8_dtype_name(pdt), (long long)T, (long long)K, (long long)N);
    fixture f = make(ctx, &c, 100 + (uint64_t)(T * K + N) + (uint64_t)norm * 7 + (uint64_t)zc);
    size_t nx = (size_t)(T * K), ny = (size_t)(T * N), nw = (size_t)(N * K);
    float *x = fnew(nx), *dy = fnew(ny), *dln = ret_ln ? fnew(nx) : NULL;
    test_rng r = {(uint64_t)(T * 31 + K * 7 + N) + (uint64_t)(eps * 1e7f)};
    make_input(&r, x, T, K);
    fill_normal(&r, dy, ny, 0.0, 1.0);
    if (dln) fill_normal(&r, dln, nx, 0.0, 0.5);
    as_stored(x, nx, pdt), as_stored(dy, ny, pdt);
    if (dln) as_stored(dln, nx, pdt);
    outputs o;
    outputs_alloc(&o, &f, T);
    step(&f, T, x, dy, dln, pdt, F8_MICROBATCH_NONE, &o);

    model m = model_of(&f, x, T);
    double *ln = dnew(nx), *y = dnew(ny), *dx = dnew(nx), *dw = dnew(nw), *db = dnew((size_t)N), *dg = dnew((size_t)K),
           *dbe = dnew((size_t)K), *dyd = dnew(ny), *dld = dln ? dnew(nx) : NULL;
    widen(dy, dyd, ny);
    if (dln) widen(dln, dld, nx);
    model_forward(&m, ln, y);
    model_backward(&m, dyd, dld, dx, dw, db, dg, dbe);

    size_t bi;
    if (pdt == F8_DTYPE_FP32) {
        /* FP32 rounding of sums of ~K terms, relative to the result's norm. */
        double tol = 1e-6 * sqrt((double)(K + N + T));
        CHECK(rel_error(o.y, y, ny) < tol, "%s: y rel err %g", tag, rel_error(o.y, y, ny));
        CHECK(te_misses(o.y, y, ny, 0.0, 2.5e-4, &bi) == 0, "%s: y[%zu] %g vs %g beyond atol 2.5e-4", tag, bi,
              (double)o.y[bi], y[bi]);
        if (ret_ln) CHECK(rel_error(o.ln, ln, nx) < tol, "%s: ln_out rel err %g", tag, rel_error(o.ln, ln, nx));
        CHECK(rel_error(o.dx, dx, nx) < tol, "%s: dx rel err %g", tag, rel_error(o.dx, dx, nx));
        CHECK(rel_error(o.d.w, dw, nw) < tol, "%s: dW rel err %g", tag, rel_error(o.d.w, dw, nw));
        CHECK(rel_error(o.d.b, db, (size_t)N) < tol, "%s: db rel err %g", tag, rel_error(o.d.b, db, (size_t)N));
        CHECK(rel_error(o.d.g, dg, (size_t)K) < tol, "%s: dgamma rel err %g", tag, rel_error(o.d.g, dg, (size_t)K));
        if (norm == F8_NORM_LAYERNORM)
            CHECK(rel_error(o.d.be, dbe, (size_t)K) < tol, "%s: dbeta rel err %g", tag,
                  rel_error(o.d.be, dbe, (size_t)K));

        /* Finite differences of the FP64 loss against the module's gradients. */
        double sx = rms_of(o.dx, nx), sw = rms_of(o.d.w, nw), sb = rms_of(o.d.b, (size_t)N);
        double sg = rms_of(o.d.g, (size_t)K), sbe = rms_of(o.d.be, (size_t)K);
        for (int trial = 0; trial < 3; trial++) {
            int64_t i = (int64_t)(rng_u64(&r) % nx), j = (int64_t)(rng_u64(&r) % nw);
            int64_t n = (int64_t)(rng_u64(&r) % (uint64_t)N), k = (int64_t)(rng_u64(&r) % (uint64_t)K);
            fd_check("dx", i, &m.x[i], &m, dyd, dld, o.dx[i], sx);
            fd_check("dW", j, &m.w[j], &m, dyd, dld, o.d.w[j], sw);
            fd_check("db", n, &m.b[n], &m, dyd, dld, o.d.b[n], sb);
            fd_check("dgamma", k, &m.g[k], &m, dyd, dld, o.d.g[k], sg);
            if (norm == F8_NORM_LAYERNORM) fd_check("dbeta", k, &m.be[k], &m, dyd, dld, o.d.be[k], sbe);
        }
    } else {
        /* TE's bf16 tolerance for outputs (atol 2e-2, torch's bf16 rtol
         * 1.6e-2); gradients to BF16 rounding of each stage. */
        CHECK(te_misses(o.y, y, ny, 1.6e-2, 2e-2, &bi) == 0, "%s: y[%zu] %g vs %g", tag, bi, (double)o.y[bi], y[bi]);
        if (ret_ln)
            CHECK(te_misses(o.ln, ln, nx, 1.6e-2, 2e-2, &bi) == 0, "%s: ln_out[%zu] %g vs %g", tag, bi,
                  (double)o.ln[bi], ln[bi]);
        CHECK(rel_error(o.y, y, ny) < 1e-2, "%s: y rel err %g", tag, rel_error(o.y, y, ny));
        CHECK(rel_error(o.dx, dx, nx) < 2e-2, "%s: dx rel err %g", tag, rel_error(o.dx, dx, nx));
        CHECK(rel_error(o.d.w, dw, nw) < 2e-2, "%s: dW rel err %g", tag, rel_error(o.d.w, dw, nw));
        CHECK(rel_error(o.d.b, db, (size_t)N) < 2e-2, "%s: db rel err %g", tag, rel_error(o.d.b, db, (size_t)N));
        CHECK(rel_error(o.d.g, dg, (size_t)K) < 2e-2, "%s: dgamma rel err %g", tag, rel_error(o.d.g, dg, (size_t)K));
        if (norm == F8_NORM_LAYERNORM)
            CHECK(rel_error(o.d.be, dbe, (size_t)K) < 2e-2, "%s: dbeta rel err %g", tag,
                  rel_error(o.d.be, dbe, (size_t)K));
    }
    if (ret_ln) {
        /* dln_out really reached dx: without it the reference differs. */
        double *dx0 = dnew(nx), *dw0 = dnew(nw), *db0 = dnew((size_t)N), *dg0 = dnew((size_t)K), *dbe0 = dnew((size_t)K);
        model_backward(&m, dyd, NULL, dx0, dw0, db0, dg0, dbe0);
        CHECK(rel_error(o.dx, dx0, nx) > 0.05, "%s: dx ignores dln_out (rel %g from the dy-only gradient)", tag,
              rel_error(o.dx, dx0, nx));
        free(dx0), free(dw0), free(db0), free(dg0), free(dbe0);
    }
    model_free(&m);
    outputs_free(&o);
    unmake(&f);
    free(x), free(dy), free(dln);
    free(ln), free(y), free(dx), free(dw), free(db), free(dg), free(dbe), free(dyd), free(dld);
}

/* Widen a bound by BF16 storage rounding of the result. */
static void bound_bf16(double *bound, const double *want, size_t n)
{
    for (size_t i = 0; i < n; i++) bound[i] += (fabs(want[i]) + bound[i]) * (1.0 / 256.0);
}

/* FP8 on, two steps (the second on amax-derived scales): the output and
 * gradients equal the FP8-operand oracle, y is within TE's FP8 tolerance of
 * FP64, and the gradients are close to FP64. */
static void test_fp8(f8_ctx *ctx, f8_norm norm, int zc, float eps, int ret_ln, f8_dtype pdt, int64_t T, int64_t K,
                     int64_t N)
{
    f8_layernorm_linear_config c = config(K, N, norm, zc, eps, ret_ln, pdt, 1, T);
    char tag[160];
    snprintf(tag, sizeof tag, "fp8 %s zc=%d eps=%g ret_ln=%d %s T=%lld K=%lld N=%lld", norm ? "rms" : "ln", zc,
             (double)eps, ret_ln, f8_dtype_name(pdt), (long long)T, (long long)K, (long long)N);
    fixture f = make(ctx, &c, 500 + (uint64_t)(T + K + N) + (uint64_t)norm * 3 + (uint64_t)zc);
    size_t nx = (size_t)(T * K), ny = (size_t)(T * N), nw = (size_t)(N * K);
    float *x = fnew(nx), *dy = fnew(ny), *dln = ret_ln ? fnew(nx) : NULL;
    double *lnq = dnew(nx), *amb = dnew(nx), *err = dnew(nx), *wq = dnew(nw), *gq = dnew(ny), *dyd = dnew(ny);
    double *dld = ret_ln ? dnew(nx) : NULL, *ln = dnew(nx), *y = dnew(ny), *dx = dnew(nx), *dw = dnew(nw);
    double *db = dnew((size_t)N), *dg = dnew((size_t)K), *dbe = dnew((size_t)K);
    uint8_t *codes = (uint8_t *)xmalloc(nw);
    f8_slot s_in, s_w, s_go;
    CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, 0, &s_in));
    CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_FORWARD, 1, &s_w));
    CHECK_OK(ctx, f8_module_slot(f.m, F8_DIR_BACKWARD, 0, &s_go));
    f8_dtype e4 = f8_ctx_slot_dtype(ctx, F8_DIR_FORWARD), e5 = f8_ctx_slot_dtype(ctx, F8_DIR_BACKWARD);
    test_rng r = {(uint64_t)(T * 5 + K * 3 + N) + (uint64_t)(eps * 1e7f)};
    int bf = pdt == F8_DTYPE_BF16;
    outputs o;
    outputs_alloc(&o, &f, T);
    for (int it = 0; it < 2; it++) {
        make_input(&r, x, T, K);
        fill_normal(&r, dy, ny, 0.0, 1e-2);
        if (dln) fill_normal(&r, dln, nx, 0.0, 1e-2);
        as_stored(x, nx, pdt), as_stored(dy, ny, pdt);
        if (dln) as_stored(dln, nx, pdt);
        float sc_in, sc_w, sc_go, sinv;
        CHECK_OK(ctx, f8_slot_read(ctx, s_in, &sc_in, NULL, NULL));
        CHECK_OK(ctx, f8_slot_read(ctx, s_w, &sc_w, NULL, NULL));
        CHECK_OK(ctx, f8_slot_read(ctx, s_go, &sc_go, NULL, NULL));
        if (it == 1) CHECK(sc_in != 1.0f && sc_w != 1.0f && sc_go != 1.0f, "%s: scales did not update", tag);
        /* Fresh gradients each step, so BF16 gradients carry one rounding. */
        CHECK_OK(ctx, f8_module_zero_grad(f.m));
        step(&f, T, x, dy, dln, pdt, F8_MICROBATCH_NONE, &o);

        /* The workspace is the cast of W with the weight slot's scale. */
        workspace_host(&f, wq, codes, &sinv);
        size_t bad = 0;
        for (size_t i = 0; i < nw; i++) bad += codes[i] != f8_fp8_from_float(f.p.w[i] * sc_w, e4);
        CHECK(bad == 0 && sinv == 1.0f / sc_w, "%s: workspace: %zu codes differ from the cast of W, scale_inv %g vs %g",
              tag, bad, (double)sinv, 1.0 / sc_w);

        model m = model_of(&f, x, T);
        widen(dy, dyd, ny);
        if (dln) widen(dln, dld, nx);
        model_forward(&m, ln, y);
        model_backward(&m, dyd, dld, dx, dw, db, dg, dbe);
        if (ret_ln) {
            /* The returned norm output is what is cast: exact codes, no ambiguity. */
            CHECK(rel_error(o.ln, ln, nx) < 1e-5, "%s: ln_out rel err %g", tag, rel_error(o.ln, ln, nx));
            for (size_t i = 0; i < nx; i++) lnq[i] = fq(o.ln[i], sc_in, e4), amb[i] = 0;
        } else {
            norm_error_bound(m.x, m.T, m.K, m.g, m.be, m.rms, m.zc, m.eps, ln, err);
            for (size_t i = 0; i < nx; i++) lnq[i] = fq_amb(ln[i], err[i], sc_in, e4, &amb[i]);
        }
        for (size_t i = 0; i < ny; i++) gq[i] = fq(dy[i], sc_go, e5);
        oracle q;
        oracle_build(&m, lnq, amb, wq, gq, dld, dyd, &q);
        if (bf) bound_bf16(q.ybound, q.y, ny), bound_bf16(q.dwbound, q.dw, nw);
        size_t wi, nb;
        nb = over_bound(o.y, q.y, q.ybound, ny, &wi);
        CHECK(nb == 0, "%s step %d: %zu y beyond the FP8-operand oracle, y[%zu] %.9g vs %.9g (bound %g); rel err %g", tag,
              it, nb, wi, (double)o.y[wi], q.y[wi], q.ybound[wi], rel_error(o.y, q.y, ny));
        nb = over_bound(o.d.w, q.dw, q.dwbound, nw, &wi);
        CHECK(nb == 0, "%s step %d: %zu dW beyond the oracle, dW[%zu] %.9g vs %.9g (bound %g)", tag, it, nb, wi,
              (double)o.d.w[wi], q.dw[wi], q.dwbound[wi]);
        double tg = bf ? 1e-2 : 1e-5;
        CHECK(rel_error(o.dx, q.dx, nx) < tg, "%s step %d: dx vs oracle rel err %g", tag, it, rel_error(o.dx, q.dx, nx));
        CHECK(rel_error(o.d.g, q.dg, (size_t)K) < tg, "%s step %d: dgamma vs oracle rel err %g", tag, it,
              rel_error(o.d.g, q.dg, (size_t)K));
        if (norm == F8_NORM_LAYERNORM)
            CHECK(rel_error(o.d.be, q.dbe, (size_t)K) < tg, "%s step %d: dbeta vs oracle rel err %g", tag, it,
                  rel_error(o.d.be, q.dbe, (size_t)K));
        CHECK(rel_error(o.d.b, q.db, (size_t)N) < (bf ? 1e-2 : 1e-5), "%s step %d: db (from unquantized dy) rel err %g",
              tag, it, rel_error(o.d.b, q.db, (size_t)N));
        /* Against FP64 of the unquantized model: TE's FP8 tolerance for y;
         * gradients through one E5M2 and one E4M3 operand, by norm. */
        size_t first;
        nb = te_misses(o.y, y, ny, 0.125, 0.0675, &first);
        CHECK(nb == 0, "%s step %d: %zu y outside TE's FP8 tolerance, y[%zu] %g vs fp64 %g", tag, it, nb, first,
              (double)o.y[first], y[first]);
        CHECK(rel_error(o.dx, dx, nx) < 0.15, "%s: dx vs fp64 rel err %g", tag, rel_error(o.dx, dx, nx));
        CHECK(rel_error(o.d.w, dw, nw) < 0.15, "%s: dW vs fp64 rel err %g", tag, rel_error(o.d.w, dw, nw));
        CHECK(rel_error(o.d.g, dg, (size_t)K) < 0.15, "%s: dgamma vs fp64 rel err %g", tag,
              rel_error(o.d.g, dg, (size_t)K));
        if (norm == F8_NORM_LAYERNORM)
            CHECK(rel_error(o.d.be, dbe, (size_t)K) < 0.15, "%s: dbeta vs fp64 rel err %g", tag,
                  rel_error(o.d.be, dbe, (size_t)K));
        if (getenv("F8_TEST_VERBOSE"))
            printf("%s step %d: y rel %.3g vs oracle, %.3g vs fp64 (TE ratio %.2f); dx %.3g/%.3g dW %.3g dg %.3g\n",
                   tag, it, rel_error(o.y, q.y, ny), rel_error(o.y, y, ny), te_ratio(o.y, y, ny, 0.125, 0.0675), rel_error(o.dx, q.dx, nx), rel_error(o.dx, dx, nx),
                   rel_error(o.d.w, dw, nw), rel_error(o.d.g, dg, (size_t)K));
        oracle_free(&q);
        model_free(&m);
        CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
        CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_BACKWARD));
    }
    outputs_free(&o);
    unmake(&f);
    free(x), free(dy), free(dln), free(codes);
    free(lnq), free(amb), free(err), free(wq), free(gq), free(dyd), free(dld), free(ln), free(y), free(dx), free(dw);
    free(db), free(dg), free(dbe);
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
    for (int norm = 0; norm < 2; norm++)
        for (int zc = 0; zc < 2; zc++) {
            for (int e = 0; e < 4; e++) test_hp(ctx, (f8_norm)norm, zc, eps_sweep[e], 0, F8_DTYPE_FP32, 16, 32, 24);
            test_hp(ctx, (f8_norm)norm, zc, 1e-5f, 1, F8_DTYPE_FP32, 13, 20, 7);
            test_hp(ctx, (f8_norm)norm, zc, 1e-5f, zc, F8_DTYPE_BF16, 32, 64, 48);
            test_fp8(ctx, (f8_norm)norm, zc, eps_sweep[(norm * 2 + zc) % 4], 0, F8_DTYPE_FP32, 32, 64, 48);
            test_fp8(ctx, (f8_norm)norm, zc, 1e-5f, 1, F8_DTYPE_FP32, 16, 32, 24);
        }
    test_hp(ctx, F8_NORM_LAYERNORM, 0, 1e-5f, 1, F8_DTYPE_FP32, 64, 128, 96);
    test_fp8(ctx, F8_NORM_LAYERNORM, 1, 1e-5f, 0, F8_DTYPE_BF16, 32, 64, 48);
    test_fp8(ctx, F8_NORM_RMSNORM, 0, 1e-3f, 0, F8_DTYPE_FP32, 13, 40, 24);
    f8_ctx_destroy(ctx);
    return test_finish("test_layernorm_linear");
}
