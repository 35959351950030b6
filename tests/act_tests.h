/*
 * act_tests.h — test_norm_act.c's activation half: the FP64 reference of
 * every activation (forward, backward, gated and not) and the checks of
 * the library's activation ops against it, on the helpers test_norm_act.c
 * defines before including this (cmp, typed, check_fp8, the worst table).
 * Included once, by test_norm_act.c.
 */
#ifndef F8_TESTS_ACT_TESTS_H
#define F8_TESTS_ACT_TESTS_H

/* ------------------------------------------------------------------------ */
/* Activations: FP64 reference                                               */
/* ------------------------------------------------------------------------ */

static const char *act_name[7] = {"gelu", "relu", "geglu", "reglu", "swiglu", "qgelu", "srelu"};

static int act_gated(f8_activation act) { return act == F8_ACT_GEGLU || act == F8_ACT_REGLU || act == F8_ACT_SWIGLU; }

/* The function applied elementwise (to a, for the gated ones). */
static double ref_f(f8_activation act, double x)
{
    switch (act) {
    case F8_ACT_GELU:
    case F8_ACT_GEGLU: return 0.5 * x * (1.0 + tanh(0.79788456 * (x + 0.044715 * x * x * x)));
    case F8_ACT_RELU:
    case F8_ACT_REGLU: return x > 0 ? x : 0.0;
    case F8_ACT_SWIGLU: return x / (1.0 + exp(-x));
    case F8_ACT_QGELU: return x / (1.0 + exp(-1.702 * x));
    case F8_ACT_SRELU: return x > 0 ? x * x : 0.0;
    }
    return NAN;
}

static double ref_df(f8_activation act, double x)
{
    switch (act) {
    case F8_ACT_GELU:
    case F8_ACT_GEGLU: {
        const double k = 0.79788456, c = 0.044715;
        double t = tanh(k * (x + c * x * x * x));
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * c * x * x);
    }
    case F8_ACT_RELU:
    case F8_ACT_REGLU: return x > 0 ? 1.0 : 0.0;
    case F8_ACT_SWIGLU: {
        double s = 1.0 / (1.0 + exp(-x));
        return s * (1.0 + x * (1.0 - s));
    }
    case F8_ACT_QGELU: {
        double s = 1.0 / (1.0 + exp(-1.702 * x));
        return s * (1.0 + 1.702 * x * (1.0 - s));
    }
    case F8_ACT_SRELU: return x > 0 ? 2.0 * x : 0.0;
    }
    return NAN;
}

static int act_has_kink(f8_activation act) { return act == F8_ACT_RELU || act == F8_ACT_REGLU || act == F8_ACT_SRELU; }

/* ------------------------------------------------------------------------ */
/* Activations: the tests                                                    */
/* ------------------------------------------------------------------------ */

static void test_act_case(f8_ctx *ctx, test_rng *rng, f8_activation act, f8_dtype xdt, int64_t rows, int64_t cols)
{
    const int gated = act_gated(act);
    const int64_t cin = gated ? 2 * cols : cols, nin = rows * cin, n = rows * cols;
    char name[96];
    snprintf(name, sizeof name, "%s x=%s %lldx%lld", act_name[act], f8_dtype_name(xdt), (long long)rows,
             (long long)cols);
    static const double special[] = {0.0, -0.0, 1e-4, -1e-4, 0.5, -0.5, 3.0, -3.0, 5.5, -5.5,
                                     10.0, -10.0, 20.0, -20.0, 50.0, -50.0, 100.0, -100.0};
    const int64_t nspecial = (int64_t)(sizeof special / sizeof special[0]);
    double *xd = xmalloc((size_t)nin * sizeof(double)), *dyd = xmalloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < nin; i++) xd[i] = i < nspecial ? special[i] : 2.5 * rng_normal(rng);
    /* Sprinkle specials over the gated halves too (b and the a of later rows). */
    for (int64_t i = nspecial; i < nin; i += 97) xd[i] = special[(i / 97) % nspecial];
    for (int64_t i = 0; i < n; i++) dyd[i] = rng_normal(rng);
    void *x = typed(xd, nin, xdt), *dy = typed(dyd, n, xdt);

    /* FP64 forward and backward; a(i), b(i) index x by output element. */
    double *vref = xmalloc((size_t)n * sizeof(double)), *vtol = xmalloc((size_t)n * sizeof(double));
    double *dref = xmalloc((size_t)nin * sizeof(double)), *dtol = xmalloc((size_t)nin * sizeof(double));
    double *dfd = xmalloc((size_t)nin * sizeof(double));
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            const int64_t i = r * cols + c, ia = r * cin + c, ib = r * cin + cols + c;
            const double a = xd[ia], b = gated ? xd[ib] : 1.0, d = dyd[i];
            /* Tolerances: 1e-5 relative, plus 1e-6·(1 + |a|) of the factors beside
             * act(a): cancellation in 1 + tanh and 1 - t² costs an FP32 ulp of
             * terms of size ~|a|. */
            vref[i] = ref_f(act, a) * b;
            vtol[i] = 1e-5 * fabs(vref[i]) + 1e-6 * (1 + fabs(a)) * fabs(b) + 1e-30;
            dref[ia] = ref_df(act, a) * b * d;
            dtol[ia] = 1e-5 * fabs(dref[ia]) + 1e-6 * (1 + fabs(a)) * fabs(b * d) + 1e-30;
            /* Central differences of the FP64 forward, h relative to |x|. */
            const double h = 1e-6 * (1 + fabs(a));
            dfd[ia] = (ref_f(act, a + h) - ref_f(act, a - h)) / (2 * h) * b * d;
            if (act_has_kink(act) && fabs(a) < 2 * h) dfd[ia] = NAN; /* skip the kink */
            if (gated) {
                const double hb = 1e-6 * (1 + fabs(b));
                dref[ib] = ref_f(act, a) * d;
                dtol[ib] = 1e-5 * fabs(dref[ib]) + 1e-6 * (1 + fabs(a)) * fabs(d) + 1e-30;
                dfd[ib] = ref_f(act, a) * ((b + hb) - (b - hb)) / (2 * hb) * d;
            }
        }
    }

    /* forward FP32 */
    float *y32 = zalloc((size_t)n * sizeof(float));
    f8i_act_fwd_args fa = {.act = act, .x = x, .x_dtype = xdt, .rows = rows, .cols = cols, .y = y32,
                           .y_dtype = F8_DTYPE_FP32};
    CHECK_OK(ctx, f8i_op_act_fwd(ctx, &fa));
    cmp cy = {0};
    for (int64_t i = 0; i < n; i++) cmp_add(&cy, W_ACT_FWD, i, y32[i], vref[i], vtol[i]);
    CHECK_CMP(cy, "fwd fp32", name);

    /* forward BF16: the FP32 y rounded. */
    uint16_t *ybf = zalloc((size_t)n * 2);
    fa.y = ybf;
    fa.y_dtype = F8_DTYPE_BF16;
    CHECK_OK(ctx, f8i_op_act_fwd(ctx, &fa));
    check_bf16_out(name, "fwd bf16", ybf, y32, n);

    /* forward FP8 */
    float ymax = 0.0f;
    for (int64_t i = 0; i < n; i++) ymax = fmaxf(ymax, fabsf(y32[i]));
    for (int f = 0; f < 2; f++) {
        f8_dtype dt = f ? F8_DTYPE_E5M2 : F8_DTYPE_E4M3;
        uint8_t *y8 = zalloc((size_t)n);
        float scale = f ? 300.0f : 2.5f, amax = 0.125f, sinv = -1.0f;
        uint64_t st[3] = {0, 0, 0};
        fa.y = y8;
        fa.y_dtype = dt;
        fa.scale = &scale;
        fa.amax = f ? NULL : &amax;
        fa.scale_inv = f ? NULL : &sinv;
        fa.stats = st;
        CHECK_OK(ctx, f8i_op_act_fwd(ctx, &fa));
        fa.stats = NULL;
        check_fp8_out(name, "act fwd fp8", y8, y32, vref, vtol, n, dt, scale, st, f ? NULL : &amax, &sinv, ymax);
        /* with the transposed codes (the module's training path): the same
         * codes, y_t[c, r] = y[r, c], and the same amax */
        uint8_t *y8b = zalloc((size_t)n), *y8t = zalloc((size_t)n);
        float amax2 = 0.125f;
        fa.y = y8b;
        fa.y_t = y8t;
        fa.amax = &amax2;
        CHECK_OK(ctx, f8i_op_act_fwd(ctx, &fa));
        int64_t t_bad = 0;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++)
                t_bad += y8b[r * cols + c] != y8[r * cols + c] || y8t[c * rows + r] != y8[r * cols + c];
        CHECK(t_bad == 0, "%s fwd %s with y_t: %lld codes differ", name, f8_dtype_name(dt), (long long)t_bad);
        CHECK(fbits(amax2) == fbits(fmaxf(0.125f, ymax)), "%s amax with y_t %.9g", name, amax2);
        fa.y_t = NULL;
        free(y8), free(y8b), free(y8t);
    }

    /* backward FP32 dx */
    float *dx32 = zalloc((size_t)nin * sizeof(float));
    f8i_act_bwd_args ba = {.act = act, .x = x, .x_dtype = xdt, .dy = dy, .dy_dtype = xdt, .rows = rows,
                           .cols = cols, .dx = dx32, .dx_dtype = F8_DTYPE_FP32};
    CHECK_OK(ctx, f8i_op_act_bwd(ctx, &ba));
    cmp cd = {0}, cfd = {0}, cfdref = {0};
    for (int64_t i = 0; i < nin; i++) {
        cmp_add(&cd, W_ACT_BWD, i, dx32[i], dref[i], dtol[i]);
        if (isnan(dfd[i])) continue;
        const double fderr = 1e-7 * fabs(dfd[i]) + 1e-9 * (1 + fabs(xd[i]) * fabs(xd[i]));
        cmp_add(&cfdref, W_ACT_FD, i, dref[i], dfd[i], fderr + 1e-30);
        cmp_add(&cfd, W_ACT_FD, i, dx32[i], dfd[i], dtol[i] + fderr);
    }
    CHECK_CMP(cd, "bwd fp32", name);
    CHECK_CMP(cfdref, "bwd (FP64 reference) vs finite differences", name);
    CHECK_CMP(cfd, "bwd vs finite differences", name);

    /* backward BF16 dx: the FP32 d rounded. */
    uint16_t *dxbf = zalloc((size_t)nin * 2);
    ba.dx = dxbf;
    ba.dx_dtype = F8_DTYPE_BF16;
    CHECK_OK(ctx, f8i_op_act_bwd(ctx, &ba));
    check_bf16_out(name, "bwd bf16", dxbf, dx32, nin);

    /* Fused cast of d, bit for bit against the cast op on the FP32 dx: once with
     * a BF16 dx beside it, once with no dx at all. */
    for (int variant = 0; variant < 4; variant++) {
        const f8_dtype odt = variant & 1 ? F8_DTYPE_E4M3 : F8_DTYPE_E5M2;
        const f8_dtype bdt = variant & 2 ? F8_DTYPE_BF16 : F8_DTYPE_FP32;
        const int acc = variant == 1 || variant == 2;
        const size_t bb = (size_t)cin * f8_dtype_size(bdt);
        float scale = variant & 1 ? 13.0f : 7000.0f;
        uint8_t *o1 = zalloc((size_t)nin), *t1 = zalloc((size_t)nin), *o2 = zalloc((size_t)nin),
                *t2 = zalloc((size_t)nin);
        double *bias0 = xmalloc((size_t)cin * sizeof(double));
        for (int64_t c = 0; c < cin; c++) bias0[c] = rng_normal(rng);
        void *db1 = typed(bias0, cin, bdt), *db2 = typed(bias0, cin, bdt);
        const size_t wsb = f8i_reduce_workspace_bytes(rows, cin);
        void *ws = zalloc(wsb);
        float am1 = 0.25f, am2 = 0.25f, si1 = -1, si2 = -1;
        ba.dx = variant < 2 ? (void *)dxbf : NULL;
        ba.dx_dtype = F8_DTYPE_BF16;
        ba.out = o1;
        ba.out_t = t1;
        ba.out_dtype = odt;
        ba.scale = &scale;
        ba.amax = &am1;
        ba.scale_inv = &si1;
        ba.dbias = db1;
        ba.dbias_dtype = bdt;
        ba.dbias_accumulate = acc;
        ba.workspace = ws;
        ba.workspace_bytes = wsb;
        uint64_t st1[3] = {0, 0, 0}, st2[3] = {0, 0, 0};
        ba.stats = st1;
        CHECK_OK(ctx, f8i_op_act_bwd(ctx, &ba));
        ba.stats = NULL;
        f8i_cast_args ca = {.src = dx32, .src_dtype = F8_DTYPE_FP32, .rows = rows, .cols = cin, .out_dtype = odt,
                            .out = o2, .out_t = t2, .scale = &scale, .amax = &am2, .scale_inv = &si2,
                            .dbias = db2, .dbias_dtype = bdt, .dbias_accumulate = acc, .noop = NULL,
                            .workspace = ws, .workspace_bytes = wsb, .stats = st2};
        CHECK_OK(ctx, f8i_op_cast(ctx, &ca));
        CHECK(memcmp(o1, o2, (size_t)nin) == 0 && memcmp(t1, t2, (size_t)nin) == 0,
              "%s fused %s out/out_t differ from the cast of dx", name, f8_dtype_name(odt));
        CHECK_STATS(st1, st2, "act bwd fused cast (against the cast op)", name);
        CHECK(fbits(am1) == fbits(am2) && fbits(si1) == fbits(si2), "%s fused amax %.9g/%.9g scale_inv %.9g/%.9g",
              name, am1, am2, si1, si2);
        CHECK(memcmp(db1, db2, bb) == 0, "%s fused dbias (%s, accumulate %d) differs from the cast's", name,
              f8_dtype_name(bdt), acc);
        if (variant < 2) {
            check_bf16_out(name, "fused: dx beside the cast", dxbf, dx32, nin);
        }
        free(o1), free(t1), free(o2), free(t2), free(bias0), free(db1), free(db2), free(ws);
    }

    free(xd), free(dyd), free(x), free(dy), free(vref), free(vtol), free(dref), free(dtol), free(dfd);
    free(y32), free(ybf), free(dx32), free(dxbf);
}

/* rows = 0: only scale_inv is written, as the cast. */
static void test_act_empty(f8_ctx *ctx)
{
    float x = 1, scale = 8, amax = 0.5f, sinv = -1, dbias[2] = {3, 3};
    uint8_t y = 0xAB, o = 0xAB;
    f8i_act_fwd_args fa = {.act = F8_ACT_SWIGLU, .x = &x, .x_dtype = F8_DTYPE_FP32, .rows = 0, .cols = 1,
                           .y = &y, .y_dtype = F8_DTYPE_E4M3, .scale = &scale, .amax = &amax, .scale_inv = &sinv};
    CHECK_OK(ctx, f8i_op_act_fwd(ctx, &fa));
    CHECK(y == 0xAB && amax == 0.5f && sinv == 0.125f, "act fwd rows=0: y %x amax %g scale_inv %g", y, amax, sinv);
    sinv = -1;
    f8i_act_bwd_args ba = {.act = F8_ACT_SWIGLU, .x = &x, .x_dtype = F8_DTYPE_FP32, .dy = &x,
                           .dy_dtype = F8_DTYPE_FP32, .rows = 0, .cols = 1, .dx = NULL, .out = &o,
                           .out_dtype = F8_DTYPE_E5M2, .scale = &scale, .amax = &amax, .scale_inv = &sinv,
                           .dbias = dbias, .dbias_dtype = F8_DTYPE_FP32, .dbias_accumulate = 0};
    CHECK_OK(ctx, f8i_op_act_bwd(ctx, &ba));
    CHECK(o == 0xAB && amax == 0.5f && sinv == 0.125f && dbias[0] == 3 && dbias[1] == 3,
          "act bwd rows=0 wrote more than scale_inv");
}

#endif /* F8_TESTS_ACT_TESTS_H */
