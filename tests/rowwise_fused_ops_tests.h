/*
 * rowwise_fused_ops_tests.h — the row-wise cast fused into the norm forward
 * and activation forward/backward (backend.h's F8I_ROW_FUSED), op by op on
 * one backend: CUDA in test_cuda_rowwise.c, the CPU in test_rowwise.c (the
 * same links, the CPU's own plain kernels). The CUDA norm and activations
 * agree with the CPU within a tolerance only (their sums and
 * transcendentals), so the chain is held link by link, each BIT FOR BIT:
 *  - the fused kernel's high-precision output u (y_hp, or dx) equals what
 *    the plain CUDA kernel stores in that dtype (the unfused path's first
 *    launch), and the norm's mu and rsigma equal the plain kernel's;
 *  - its codes, per-row scale_inv, amax and telemetry equal the CPU oracle's
 *    row-wise cast (src/cpu/rowwise.c) of that u: the unfused path's second
 *    launch, whose CUDA version test_cast holds to the same oracle;
 *  - the same call without the high-precision output writes the same codes
 *    and scales (the kernels recompute u instead of reading it back).
 * Norm: LayerNorm and RMSNorm, FP32/BF16 x and params (u rounded to the
 * param dtype), rows from 1 to 300 and 1 to 9000 columns (over FWD_MAX_COLS:
 * norm_fwd.cu's wide path, which needs y_hp). Activations: every one,
 * forward and backward, FP32/BF16. E4M3 and E5M2, power-of-two scales or
 * not, telemetry on and off, rows of very different magnitudes with zero,
 * inf, NaN and denormal rows planted (rowwise_fixture.h).
 */
#ifndef F8_TESTS_ROWWISE_FUSED_OPS_TESTS_H
#define F8_TESTS_ROWWISE_FUSED_OPS_TESTS_H

#include "core/ops.h"
#include "rowwise_fixture.h"

enum { FOP_NORM = 0, FOP_ACT_FWD = 1, FOP_ACT_BWD = 2 };

typedef struct fused_op_case {
    int op;
    int64_t R, C;         /* C: the output's columns of h (the gated backward writes 2C) */
    f8_dtype xdt, hdt, out;
    int pow2, variant;    /* norm: rms; activations: the f8_activation */
    int stats;
} fused_op_case;

static const char *fop_act_name(int act)
{
    static const char *const names[] = {"GELU", "ReLU", "GEGLU", "ReGLU", "SwiGLU", "QGELU", "SReLU"};
    return act >= 0 && act < 7 ? names[act] : "?";
}

static void *fop_dev(f8_ctx *ctx, size_t bytes, const void *host)
{
    void *p = NULL;
    if (f8_ctx_alloc(ctx, bytes ? bytes : 1, &p) != F8_OK) die("device alloc", ctx);
    if (host && bytes) CHECK_OK(ctx, f8_ctx_upload(ctx, p, host, bytes));
    return p;
}

/* n FP32 values as dt (FP32 or BF16) bytes, host. */
static void *fop_as(const float *v, int64_t n, f8_dtype dt)
{
    void *h = xmalloc((size_t)n * 4 + 1);
    for (int64_t i = 0; i < n; i++) {
        if (dt == F8_DTYPE_BF16) ((uint16_t *)h)[i] = f8_bf16_from_float(v[i]);
        else ((float *)h)[i] = v[i];
    }
    return h;
}

/* Backend bytes a (ctx ca) and b (ctx cb) equal; names the first differing byte. */
static int fop_same(f8_ctx *ca, const void *a, f8_ctx *cb, const void *b, size_t bytes, const char *what,
                    const char *name)
{
    unsigned char *x = (unsigned char *)xmalloc(bytes + 1), *y = (unsigned char *)xmalloc(bytes + 1);
    if (bytes) CHECK_OK(ca, f8_ctx_download(ca, x, a, bytes));
    if (bytes) CHECK_OK(cb, f8_ctx_download(cb, y, b, bytes));
    size_t at = 0;
    while (at < bytes && x[at] == y[at]) at++;
    if (at < bytes)
        fprintf(stderr, "  fused %s: %s differs at byte %zu of %zu (%02x against %02x)\n", name, what, at, bytes, x[at],
                y[at]);
    free(x), free(y);
    return at == bytes;
}

/* One case on ctx[1] (the backend under test), the oracle's cast on ctx[0]
 * (the CPU); 1 when every link holds. */
static int fused_op_run(f8_ctx *ctx[2], const fused_op_case *fc, test_rng *rng)
{
    f8_ctx *g = ctx[1], *cpu = ctx[0];
    const int gated = fc->op != FOP_NORM && f8_activation_gated((f8_activation)fc->variant);
    const int64_t R = fc->R, C = fc->C, Cin = gated ? 2 * C : C, Cout = fc->op == FOP_ACT_BWD && gated ? 2 * C : C;
    const size_t hs = f8_dtype_size(fc->hdt), xs = f8_dtype_size(fc->xdt);
    /* CUDA rows past norm_fwd.cuh's FWD_MAX_COLS take the wide kernel into y_hp */
    const int wide = fc->op == FOP_NORM && C > 8192 && f8_ctx_backend(g) == F8_BACKEND_CUDA;
    char name[192];
    snprintf(name, sizeof name, "%s %s [%lld, %lld] x %s hp %s -> %s pow2 %d stats %d",
             fc->op == FOP_NORM ? (fc->variant ? "RMSNorm" : "LayerNorm") : fc->op == FOP_ACT_FWD ? "act fwd" : "act bwd",
             fc->op == FOP_NORM ? "" : fop_act_name(fc->variant), (long long)R, (long long)C,
             f8_dtype_name(fc->xdt), f8_dtype_name(fc->hdt), f8_dtype_name(fc->out), fc->pow2, fc->stats);
    float *hx = (float *)xmalloc((size_t)(R * Cin) * 4 + 4), *hdy = (float *)xmalloc((size_t)(R * C) * 4 + 4);
    rowwise_fill(hx, R, Cin, rng, 1);
    if (fc->op != FOP_NORM) /* activations of moderate inputs: the magnitudes come from the rows of dy */
        for (int64_t i = 0; i < R * Cin; i++) hx[i] = isfinite(hx[i]) ? ldexpf(hx[i], -8) : hx[i];
    rowwise_fill(hdy, R, C, rng, 1);
    float gam[9000 + 1], bet[9000 + 1];
    for (int64_t c = 0; c < C && fc->op == FOP_NORM; c++) {
        gam[c] = 1.0f + 0.25f * (float)rng_normal(rng);
        bet[c] = 0.1f * (float)rng_normal(rng);
    }
    void *hxq = fop_as(hx, R * Cin, fc->xdt), *hdyq = fop_as(hdy, R * C, fc->xdt);
    void *hg = fop_as(gam, fc->op == FOP_NORM ? C : 1, fc->hdt), *hb = fop_as(bet, fc->op == FOP_NORM ? C : 1, fc->hdt);
    const float amax0 = 0.25f;
    const uint64_t stats0[3] = {3, 1, 2};
    const size_t nout = (size_t)(R * Cout);
    void *x = fop_dev(g, (size_t)(R * Cin) * xs, hxq), *dy = fop_dev(g, (size_t)(R * C) * xs, hdyq);
    void *gamma = fop_dev(g, (size_t)C * hs, fc->op == FOP_NORM ? hg : NULL);
    void *beta = fop_dev(g, (size_t)C * hs, fc->op == FOP_NORM ? hb : NULL);
    void *ref = fop_dev(g, nout * hs, NULL), *hp = fop_dev(g, nout * hs, NULL);
    void *codes[2] = {fop_dev(g, nout, NULL), fop_dev(g, nout, NULL)};
    void *sinv[2] = {fop_dev(g, (size_t)R * 4, NULL), fop_dev(g, (size_t)R * 4, NULL)};
    void *amax = fop_dev(g, 4, &amax0), *stats = fop_dev(g, 24, stats0);
    void *stat[2][2] = {{fop_dev(g, (size_t)R * 4, NULL), fop_dev(g, (size_t)R * 4, NULL)},
                        {fop_dev(g, (size_t)R * 4, NULL), fop_dev(g, (size_t)R * 4, NULL)}}; /* [run][mu, rsigma] */
    const float scaled_max = f8_fp8_max(fc->out);
    int ok = 1;
    /* run 0: the plain kernel into ref; runs 1 and 2: fused with and without u */
    for (int run = 0; run < 3; run++) {
        const int fused = run > 0, with_hp = run == 1;
        void *y = fused ? codes[run - 1] : ref;
        float *si = fused ? (float *)sinv[run - 1] : NULL;
        f8_status st;
        if (fc->op == FOP_NORM) {
            f8i_norm_fwd_args a;
            memset(&a, 0, sizeof a);
            a.x = x, a.x_dtype = fc->xdt, a.rows = R, a.cols = C, a.gamma = gamma, a.beta = beta;
            a.param_dtype = fc->hdt, a.rms = fc->variant, a.eps = 1e-5f, a.y = y;
            a.y_dtype = fused ? fc->out : fc->hdt;
            if (run < 2) a.mu = (float *)stat[run][0], a.rsigma = (float *)stat[run][1]; /* plain, fused */
            if (fused) {
                a.mode = F8I_SCALING_ROW, a.scaled_max = scaled_max, a.pow2 = fc->pow2, a.scale_inv = si;
                a.y_hp = with_hp ? hp : NULL, a.hp_dtype = fc->hdt;
                if (with_hp) a.amax = (float *)amax, a.stats = fc->stats ? (uint64_t *)stats : NULL;
            }
            st = f8i_op_norm_fwd(g, &a);
        } else if (fc->op == FOP_ACT_FWD) {
            f8i_act_fwd_args a;
            memset(&a, 0, sizeof a);
            a.act = (f8_activation)fc->variant, a.x = x, a.x_dtype = fc->xdt, a.rows = R, a.cols = C, a.y = y;
            a.y_dtype = fused ? fc->out : fc->hdt;
            if (fused) {
                a.mode = F8I_SCALING_ROW, a.scaled_max = scaled_max, a.pow2 = fc->pow2, a.scale_inv = si;
                a.y_hp = with_hp ? hp : NULL, a.hp_dtype = fc->hdt;
                if (with_hp) a.amax = (float *)amax, a.stats = fc->stats ? (uint64_t *)stats : NULL;
            }
            st = f8i_op_act_fwd(g, &a);
        } else {
            f8i_act_bwd_args a;
            memset(&a, 0, sizeof a);
            a.act = (f8_activation)fc->variant, a.x = x, a.x_dtype = fc->xdt, a.dy = dy, a.dy_dtype = fc->xdt;
            a.rows = R, a.cols = C, a.dx = fused && !with_hp ? NULL : fused ? hp : ref, a.dx_dtype = fc->hdt;
            if (fused) {
                a.mode = F8I_SCALING_ROW, a.scaled_max = scaled_max, a.pow2 = fc->pow2, a.scale_inv = si;
                a.out = (uint8_t *)y, a.out_dtype = fc->out;
                if (with_hp) a.amax = (float *)amax, a.stats = fc->stats ? (uint64_t *)stats : NULL;
            }
            st = f8i_op_act_bwd(g, &a);
        }
        if (wide && run == 2) { /* rows past FWD_MAX_COLS take the wide kernel into y_hp, then the cast */
            CHECK(st == F8_ERR_UNSUPPORTED, "fused %s without y_hp: %s, want F8_ERR_UNSUPPORTED", name,
                  f8_status_string(st));
        } else if (st != F8_OK) {
            fprintf(stderr, "  fused %s: run %d -> %s: %s\n", name, run, f8_status_string(st), f8_ctx_last_error(g));
            ok = 0;
        }
    }
    CHECK_OK(g, f8_ctx_synchronize(g));
    /* link 1: u is the plain kernel's output, and the statistics are its */
    ok &= fop_same(g, hp, g, ref, nout * hs, "u (the high-precision output) against the plain kernel's", name);
    if (fc->op == FOP_NORM) {
        ok &= fop_same(g, stat[1][1], g, stat[0][1], (size_t)R * 4, "rsigma against the plain kernel's", name);
        if (!fc->variant) ok &= fop_same(g, stat[1][0], g, stat[0][0], (size_t)R * 4, "mu against the plain kernel's", name);
    }
    /* link 3: without u, the same codes and scales */
    if (!wide) ok &= fop_same(g, codes[1], g, codes[0], nout, "codes without y_hp", name);
    if (!wide) ok &= fop_same(g, sinv[1], g, sinv[0], (size_t)R * 4, "scale_inv without y_hp", name);
    /* link 2: the CPU's row-wise cast of the plain kernel's u */
    void *src = fop_dev(cpu, nout * hs, NULL);
    void *hsrc = xmalloc(nout * hs + 1);
    CHECK_OK(g, f8_ctx_download(g, hsrc, ref, nout * hs));
    CHECK_OK(cpu, f8_ctx_upload(cpu, src, hsrc, nout * hs));
    void *ccodes = fop_dev(cpu, nout, NULL), *csinv = fop_dev(cpu, (size_t)R * 4, NULL);
    void *camax = fop_dev(cpu, 4, &amax0), *cstats = fop_dev(cpu, 24, stats0);
    f8i_rowwise_cast_args c = {src, fc->hdt, R, Cout, fc->out, (uint8_t *)ccodes, (float *)csinv, NULL, NULL,
                               scaled_max, fc->pow2, (float *)camax, fc->stats ? (uint64_t *)cstats : NULL, NULL, NULL,
                               F8_DTYPE_FP32, 0, NULL, 0};
    CHECK_OK(cpu, f8i_cpu_cast_rowwise(cpu, &c));
    ok &= fop_same(cpu, ccodes, g, codes[0], nout, "codes against the CPU cast of u", name);
    ok &= fop_same(cpu, csinv, g, sinv[0], (size_t)R * 4, "scale_inv against the CPU cast of u", name);
    ok &= fop_same(cpu, camax, g, amax, 4, "amax against the CPU cast of u", name);
    ok &= fop_same(cpu, cstats, g, stats, 24, "telemetry against the CPU cast of u", name);
    void *gall[] = {x, dy, gamma, beta, ref, hp, codes[0], codes[1], sinv[0], sinv[1], amax, stats,
                    stat[0][0], stat[0][1], stat[1][0], stat[1][1]};
    for (size_t i = 0; i < sizeof gall / sizeof gall[0]; i++) f8_ctx_free(g, gall[i]);
    void *call[] = {src, ccodes, csinv, camax, cstats};
    for (size_t i = 0; i < sizeof call / sizeof call[0]; i++) f8_ctx_free(cpu, call[i]);
    free(hx), free(hdy), free(hxq), free(hdyq), free(hg), free(hb), free(hsrc);
    return ok;
}

static void test_fused_ops(f8_ctx *ctx[2])
{
    static const int64_t rows[] = {1, 7, 37, 300}, cols[] = {1, 20, 129, 1000, 4096, 9000};
    enum { NR = sizeof rows / sizeof rows[0], NC = sizeof cols / sizeof cols[0] };
    test_rng rng = {42};
    int cases = 0, bad = 0;
    for (int op = FOP_NORM; op <= FOP_ACT_BWD; op++)
        for (int i = 0; i < NR; i++)
            for (int j = 0; j < NC; j++)
                for (int v = 0; v < (op == FOP_NORM ? 4 : 7); v++) {
                    if (op != FOP_NORM && cols[j] > 4096) continue; /* the activations have no wide path */
                    const int k = i + j + v;
                    const fused_op_case fc = {op, rows[i], cols[j], k % 2 ? F8_DTYPE_BF16 : F8_DTYPE_FP32,
                                              (k / 2) % 2 ? F8_DTYPE_BF16 : F8_DTYPE_FP32,
                                              (v + i) % 3 == 2 ? F8_DTYPE_E5M2 : F8_DTYPE_E4M3, (k / 3) % 2,
                                              op == FOP_NORM ? v % 2 : v, (k / 5) % 2};
                    cases++;
                    bad += !fused_op_run(ctx, &fc, &rng);
                }
    printf("  row-wise casts fused into the %s norm and activations: %d of %d cases bit for bit with the plain "
           "kernels and the CPU cast of their output\n", f8_ctx_backend(ctx[1]) == F8_BACKEND_CUDA ? "CUDA" : "CPU",
           cases - bad, cases);
    CHECK(bad == 0, "fused row-wise norm/activation casts: %d of %d cases differ", bad, cases);
}

#endif /* F8_TESTS_ROWWISE_FUSED_OPS_TESTS_H */
