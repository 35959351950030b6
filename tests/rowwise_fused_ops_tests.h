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
 *    and scales (the kernels recompute u instead of reading it back);
 *  - the column amaxes the kernels take (col_amax, both runs; the buffer
 *    poisoned first) equal max |u| of each column of the plain kernel's u
 *    computed here, and the column-only cast of u with them
 *    (col_amax_in) writes the same column-wise copy, scale_inv_t and
 *    telemetry as the one that measures them, and as the CPU cast of u.
 * Norm: LayerNorm and RMSNorm, FP32/BF16 x and params (u rounded to the
 * param dtype), rows from 1 to 300 and 1 to 9000 columns (over FWD_MAX_COLS:
 * norm_fwd.cu's wide path, which needs y_hp); and BF16 rows of every width
 * the fit layout covers (1536 to 8192 columns, CUDA's fit kernel), up to
 * 6400 of them, with and without the column amaxes and telemetry, a NaN
 * gamma putting a NaN beside finite values of u. Activations: every one,
 * forward and backward, FP32/BF16, and two shapes whose column maxima pass
 * CUDA's shared memory (the column amax pass after the kernel, which needs
 * y_hp or dx), and BF16 shapes of whole 128 x 128 tiles. Also, bit for
 * bit: the column-only cast given the amaxes sums dbias as the one
 * measuring them does (and within rounding of the FP64 column sums).
 * E4M3 and E5M2, power-of-two scales or not, telemetry on and off, rows of
 * very different magnitudes with zero, inf, NaN and denormal rows planted
 * (rowwise_fixture.h).
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
    int nocol;            /* no column amaxes (col_amax NULL in both fused runs) */
    int nan_gamma;        /* norm: one gamma NaN (a NaN column of u beside finite values) */
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

/* Element i of host values h in dt (FP32 or BF16). */
static float fop_at(const void *h, f8_dtype dt, int64_t i)
{
    return dt == F8_DTYPE_BF16 ? f8_bf16_to_float(((const uint16_t *)h)[i]) : ((const float *)h)[i];
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
    /* CUDA rows past norm_fwd.cuh's FWD_MAX_COLS take the wide kernel into y_hp; activation rows whose column
     * maxima pass act_kernels.cuh's ACT_ROW_CMAX_MAX (64 KiB of 8-column pieces' slots) the column amax pass
     * over y_hp (dx) */
    const int64_t slots = (C + 7) / 8 * 8 * (Cout / C) * (int64_t)hs;
    const int wide = f8_ctx_backend(g) == F8_BACKEND_CUDA &&
                     (fc->op == FOP_NORM ? C > 8192 : slots > 64 * 1024);
    char name[192];
    snprintf(name, sizeof name, "%s %s [%lld, %lld] x %s hp %s -> %s pow2 %d stats %d%s%s",
             fc->op == FOP_NORM ? (fc->variant ? "RMSNorm" : "LayerNorm") : fc->op == FOP_ACT_FWD ? "act fwd" : "act bwd",
             fc->op == FOP_NORM ? "" : fop_act_name(fc->variant), (long long)R, (long long)C,
             f8_dtype_name(fc->xdt), f8_dtype_name(fc->hdt), f8_dtype_name(fc->out), fc->pow2, fc->stats,
             fc->nocol ? " no col_amax" : "", fc->nan_gamma ? " NaN gamma" : "");
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
    if (fc->op == FOP_NORM && fc->nan_gamma) gam[C / 5] = NAN;
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
    /* the column amaxes of runs 1 and 2, poisoned with a NaN no max replaces (the kernels must zero them) */
    uint32_t *poison = (uint32_t *)xmalloc((size_t)Cout * 4 + 4);
    for (int64_t c = 0; c < Cout; c++) poison[c] = 0x7FFFFFFFu;
    void *cam[2] = {fop_dev(g, (size_t)Cout * 4, poison), fop_dev(g, (size_t)Cout * 4, poison)};
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
                a.col_amax = fc->nocol ? NULL : (float *)cam[run - 1];
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
                a.col_amax = fc->nocol ? NULL : (float *)cam[run - 1];
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
                a.out = (uint8_t *)y, a.out_dtype = fc->out, a.col_amax = fc->nocol ? NULL : (float *)cam[run - 1];
                if (with_hp) a.amax = (float *)amax, a.stats = fc->stats ? (uint64_t *)stats : NULL;
            }
            st = f8i_op_act_bwd(g, &a);
        }
        if (wide && run == 2) { /* the wide norm, and the column amaxes after the activation, read y_hp (dx) */
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
    /* link 2: the CPU's row-wise cast of the plain kernel's u (both orientations: its counts are out's) */
    void *src = fop_dev(cpu, nout * hs, NULL);
    void *hsrc = xmalloc(nout * hs + 1);
    CHECK_OK(g, f8_ctx_download(g, hsrc, ref, nout * hs));
    CHECK_OK(cpu, f8_ctx_upload(cpu, src, hsrc, nout * hs));
    void *ccodes = fop_dev(cpu, nout, NULL), *csinv = fop_dev(cpu, (size_t)R * 4, NULL);
    void *ccodes_t = fop_dev(cpu, nout, NULL), *csinv_t = fop_dev(cpu, (size_t)Cout * 4, NULL);
    void *camax = fop_dev(cpu, 4, &amax0), *cstats = fop_dev(cpu, 24, stats0);
    f8i_rowwise_cast_args c = {src, fc->hdt, R, Cout, fc->out, (uint8_t *)ccodes, (float *)csinv, (uint8_t *)ccodes_t,
                               (float *)csinv_t, scaled_max, fc->pow2, (float *)camax,
                               fc->stats ? (uint64_t *)cstats : NULL, NULL, NULL, F8_DTYPE_FP32, 0, NULL, 0, 0};
    CHECK_OK(cpu, f8i_cpu_cast_rowwise(cpu, &c));
    ok &= fop_same(cpu, ccodes, g, codes[0], nout, "codes against the CPU cast of u", name);
    ok &= fop_same(cpu, csinv, g, sinv[0], (size_t)R * 4, "scale_inv against the CPU cast of u", name);
    ok &= fop_same(cpu, camax, g, amax, 4, "amax against the CPU cast of u", name);
    ok &= fop_same(cpu, cstats, g, stats, 24, "telemetry against the CPU cast of u", name);
    /* link 4: the column amaxes are max |u| of each column (fmaxf from 0: NaN ignored), here from u's bits */
    uint32_t *want = (uint32_t *)xmalloc((size_t)Cout * 4 + 4);
    for (int64_t col = 0; col < Cout; col++) {
        float m = 0.0f;
        for (int64_t r = 0; r < R; r++) m = fmaxf(m, fabsf(fop_at(hsrc, fc->hdt, r * Cout + col)));
        memcpy(&want[col], &m, 4);
    }
    void *hwant = fop_dev(g, (size_t)Cout * 4, fc->nocol ? poison : want); /* nocol: left as they were */
    ok &= fop_same(g, hwant, g, cam[0], (size_t)Cout * 4, "column amaxes (col_amax) against max |u|", name);
    if (!wide) ok &= fop_same(g, hwant, g, cam[1], (size_t)Cout * 4, "column amaxes without y_hp", name);
    /* link 5: the column-only cast of u (out NULL) measuring the amaxes (0) and given them (1, col_amax_in):
     * the same out_t, scale_inv_t and telemetry, and the CPU cast's */
    uint32_t *given = (uint32_t *)xmalloc((size_t)Cout * 4 + 4); /* the kernel's own col_amax (nocol: max |u|) */
    if (fc->nocol) memcpy(given, want, (size_t)Cout * 4);
    else CHECK_OK(g, f8_ctx_download(g, given, cam[0], (size_t)Cout * 4));
    void *ot[2] = {fop_dev(g, nout, NULL), fop_dev(g, nout, NULL)};
    void *st_[2] = {fop_dev(g, (size_t)Cout * 4, poison), fop_dev(g, (size_t)Cout * 4, given)};
    void *cs[2] = {fop_dev(g, 24, stats0), fop_dev(g, 24, stats0)};
    /* with dbias too (accumulated onto the same start): summed in the same order given the amaxes or not
     * (CUDA: the codes pass's chunk sums on BF16 tiles, kernel 1's tile partials elsewhere) */
    float *db0 = (float *)xmalloc((size_t)Cout * 4 + 4);
    for (int64_t col = 0; col < Cout; col++) db0[col] = 0.125f * (float)rng_normal(rng);
    void *hdb0 = fop_as(db0, Cout, fc->hdt);
    void *db[2] = {fop_dev(g, (size_t)Cout * hs, hdb0), fop_dev(g, (size_t)Cout * hs, hdb0)};
    const size_t wsb = f8i_reduce_workspace_bytes(R, Cout);
    void *wsd = fop_dev(g, wsb, NULL);
    for (int k = 0; k < 2; k++) {
        f8i_cast_args k8;
        memset(&k8, 0, sizeof k8);
        k8.src = ref, k8.src_dtype = fc->hdt, k8.rows = R, k8.cols = Cout, k8.out_dtype = fc->out;
        k8.out_t = (uint8_t *)ot[k], k8.scale_inv_t = (float *)st_[k], k8.mode = F8I_SCALING_ROW;
        k8.scaled_max = scaled_max, k8.pow2 = fc->pow2, k8.stats = (uint64_t *)cs[k], k8.col_amax_in = k;
        k8.dbias = db[k], k8.dbias_dtype = fc->hdt, k8.dbias_accumulate = 1, k8.workspace = wsd;
        k8.workspace_bytes = wsb;
        CHECK_OK(g, f8i_op_cast(g, &k8));
    }
    ok &= fop_same(g, ot[1], g, ot[0], nout, "the column copy given the amaxes", name);
    ok &= fop_same(g, st_[1], g, st_[0], (size_t)Cout * 4, "scale_inv_t given the amaxes", name);
    ok &= fop_same(g, cs[1], g, cs[0], 24, "the column copy's telemetry given the amaxes", name);
    ok &= fop_same(g, db[1], g, db[0], (size_t)Cout * hs, "dbias given the amaxes", name);
    /* and dbias is the column sums of u (FP64 here): within the FP32 sums' rounding, BF16's if it is stored so */
    float *hdb = (float *)xmalloc((size_t)Cout * hs + 4);
    CHECK_OK(g, f8_ctx_download(g, hdb, db[1], (size_t)Cout * hs));
    int db_bad = 0;
    for (int64_t col = 0; col < Cout; col++) {
        double sum = fop_at(hdb0, fc->hdt, col), mag = fabs(sum);
        for (int64_t r = 0; r < R; r++) {
            const double v = fop_at(hsrc, fc->hdt, r * Cout + col);
            sum += v, mag += fabs(v);
        }
        const double got = fop_at(hdb, fc->hdt, col);
        const double tol = mag * 1e-5 + (fc->hdt == F8_DTYPE_BF16 ? fabs(sum) / 128.0 : 0.0);
        if (isfinite(sum) && !(fabs(got - sum) <= tol) && db_bad++ == 0)
            fprintf(stderr, "  fused %s: dbias[%lld] %.9g, the column sum %.9g\n", name, (long long)col, got, sum);
    }
    ok &= db_bad == 0;
    free(db0), free(hdb0), free(hdb);
    f8_ctx_free(g, db[0]), f8_ctx_free(g, db[1]), f8_ctx_free(g, wsd);
    ok &= fop_same(cpu, ccodes_t, g, ot[1], nout, "the column copy given the amaxes against the CPU cast", name);
    ok &= fop_same(cpu, csinv_t, g, st_[1], (size_t)Cout * 4, "scale_inv_t given the amaxes against the CPU cast",
                   name);
    void *gall[] = {x, dy, gamma, beta, ref, hp, codes[0], codes[1], sinv[0], sinv[1], amax, stats,
                    stat[0][0], stat[0][1], stat[1][0], stat[1][1], cam[0], cam[1], hwant, ot[0], ot[1],
                    st_[0], st_[1], cs[0], cs[1]};
    for (size_t i = 0; i < sizeof gall / sizeof gall[0]; i++) f8_ctx_free(g, gall[i]);
    void *call[] = {src, ccodes, csinv, ccodes_t, csinv_t, camax, cstats};
    for (size_t i = 0; i < sizeof call / sizeof call[0]; i++) f8_ctx_free(cpu, call[i]);
    free(hx), free(hdy), free(hxq), free(hdyq), free(hg), free(hb), free(hsrc), free(poison), free(want), free(given);
    return ok;
}

/* col_amax_in is the column-only cast's: with out, without out_t (dbias
 * alone) or with amax the backend's cast refuses it, writing nothing. */
static void test_col_amax_refusals(f8_ctx *g)
{
    enum { R = 4, C = 6, WS = 4096 };
    float h[R * C];
    for (int i = 0; i < R * C; i++) h[i] = (float)(i - 7);
    const uint8_t poison8[R * C] = {0};
    const float one = 1.0f;
    void *src = fop_dev(g, sizeof h, h), *out = fop_dev(g, R * C, poison8), *out_t = fop_dev(g, R * C, poison8);
    void *si = fop_dev(g, R * 4, NULL), *si_t = fop_dev(g, C * 4, NULL), *db = fop_dev(g, C * 4, NULL);
    void *am = fop_dev(g, 4, &one), *wsd = fop_dev(g, WS, NULL);
    f8i_cast_args a;
    memset(&a, 0, sizeof a);
    a.src = src, a.src_dtype = F8_DTYPE_FP32, a.rows = R, a.cols = C, a.out_dtype = F8_DTYPE_E4M3;
    a.out_t = (uint8_t *)out_t, a.scale_inv_t = (float *)si_t, a.mode = F8I_SCALING_ROW, a.scaled_max = 448.0f;
    a.col_amax_in = 1;
    f8i_cast_args b = a;
    b.out = (uint8_t *)out, b.scale_inv = (float *)si;
    CHECK_STATUS(g, f8i_op_cast(g, &b), F8_ERR_INVALID_ARGUMENT);
    b = a, b.dbias = db, b.dbias_dtype = F8_DTYPE_FP32, b.workspace = wsd;
    b.workspace_bytes = f8i_reduce_workspace_bytes(R, C);
    CHECK(b.workspace_bytes <= WS, "the test's workspace fits");
    b.out_t = NULL, b.scale_inv_t = NULL; /* dbias alone: no column copy to make */
    CHECK_STATUS(g, f8i_op_cast(g, &b), F8_ERR_INVALID_ARGUMENT);
    b = a, b.amax = (float *)am;
    CHECK_STATUS(g, f8i_op_cast(g, &b), F8_ERR_INVALID_ARGUMENT);
    CHECK(strstr(f8_ctx_last_error(g), "col_amax_in") != NULL, "the refusal names col_amax_in: %s",
          f8_ctx_last_error(g));
    CHECK_OK(g, f8_ctx_synchronize(g));
    uint8_t got[2][R * C];
    CHECK_OK(g, f8_ctx_download(g, got[0], out, R * C));
    CHECK_OK(g, f8_ctx_download(g, got[1], out_t, R * C));
    CHECK(memcmp(got[0], poison8, R * C) == 0 && memcmp(got[1], poison8, R * C) == 0, "a refused cast wrote");
    void *all[] = {src, out, out_t, si, si_t, db, am, wsd};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) f8_ctx_free(g, all[i]);
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
                                              op == FOP_NORM ? v % 2 : v, (k / 5) % 2, 0, 0};
                    cases++;
                    bad += !fused_op_run(ctx, &fc, &rng);
                }
    /* rows whose column maxima pass CUDA's shared memory (FP32 u: 4 bytes a column; the gated backward's 2h) */
    const fused_op_case wide_act[] = {
        {FOP_ACT_FWD, 5, 16400, F8_DTYPE_BF16, F8_DTYPE_FP32, F8_DTYPE_E4M3, 0, F8_ACT_GELU, 1, 0, 0},
        {FOP_ACT_BWD, 3, 8200, F8_DTYPE_FP32, F8_DTYPE_FP32, F8_DTYPE_E5M2, 1, F8_ACT_SWIGLU, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof wide_act / sizeof wide_act[0]; i++) {
        cases++;
        bad += !fused_op_run(ctx, &wide_act[i], &rng);
    }
    /* BF16 x and u in rows the fit layout covers (CUDA: norm_fwd_fit_rowwise.cu): each of its widths, both
     * norms, E4M3 and E5M2, telemetry and the column amaxes each on and off (so every instance kind), NaN in
     * a column of u beside finite values; on CUDA enough rows that each row group of the persistent grid
     * takes several (at most 264 blocks of 3 to 12 groups on an H100), on the CPU a few */
    static const struct { int64_t R, C; int rms, e5m2, pow2, stats, nocol, nan_gamma; } fit[] = {
        {6400, 2048, 0, 0, 0, 1, 0, 0}, {6400, 2048, 1, 1, 1, 0, 1, 0}, {37, 2048, 0, 1, 0, 1, 1, 1},
        {2000, 1536, 1, 0, 1, 1, 0, 1}, {300, 1536, 0, 1, 0, 0, 1, 0}, {3300, 3072, 0, 0, 1, 0, 1, 0},
        {301, 3072, 1, 0, 0, 1, 0, 0},  {300, 4096, 1, 1, 0, 1, 1, 1}, {2000, 6144, 0, 0, 0, 1, 0, 1},
        {1000, 6144, 1, 0, 1, 0, 0, 0}, {1700, 8192, 0, 1, 1, 0, 1, 0}, {800, 8192, 1, 0, 0, 1, 0, 1},
    };
    const int on_cuda = f8_ctx_backend(ctx[1]) == F8_BACKEND_CUDA;
    for (size_t i = 0; i < sizeof fit / sizeof fit[0]; i++) {
        const fused_op_case fc = {FOP_NORM, on_cuda ? fit[i].R : 9, fit[i].C, F8_DTYPE_BF16, F8_DTYPE_BF16,
                                  fit[i].e5m2 ? F8_DTYPE_E5M2 : F8_DTYPE_E4M3, fit[i].pow2, fit[i].rms,
                                  fit[i].stats, fit[i].nocol, fit[i].nan_gamma};
        cases++;
        bad += !fused_op_run(ctx, &fc, &rng);
    }
    /* BF16 u in whole 128 x 128 tiles (CUDA: dbias's chunk sums summed by the codes pass given the amaxes,
     * link 5): both norms (one with a NaN gamma), every activation forward and backward, E4M3 and E5M2; on
     * the CPU the smallest shape */
    static const struct { int64_t R, C; } tiles[] = {{128, 128}, {256, 384}, {640, 2048}, {1280, 4096}};
    for (int op = FOP_NORM; op <= FOP_ACT_BWD; op++)
        for (int v = 0; v < (op == FOP_NORM ? 4 : 7); v++) {
            const int t = on_cuda ? (v + op) % (op == FOP_NORM ? 4 : 3) : 0;
            const fused_op_case fc = {op, tiles[t].R, tiles[t].C, F8_DTYPE_BF16, F8_DTYPE_BF16,
                                      (v + op) % 2 ? F8_DTYPE_E5M2 : F8_DTYPE_E4M3, v % 2,
                                      op == FOP_NORM ? v / 2 : v, (v / 2) % 2, 0, op == FOP_NORM && v == 3};
            cases++;
            bad += !fused_op_run(ctx, &fc, &rng);
        }
    /* BF16 x, dy and u in rows of up to 8192 columns (CUDA: act_row_reg_kernel, a row in registers, but for
     * the gated forward): every activation forward and backward, with and without the column amaxes, a
     * partial last piece, and on CUDA more rows than the grid's blocks (each takes several); 8200 columns go
     * back to act_row_kernel */
    static const int64_t reg_cols[] = {8192, 2999, 4100, 8200};
    for (int op = FOP_ACT_FWD; op <= FOP_ACT_BWD; op++)
        for (int v = 0; v < 7; v++) {
            const int t = v + op;
            const fused_op_case fc = {op, on_cuda ? 700 : 3, reg_cols[t % 4], F8_DTYPE_BF16, F8_DTYPE_BF16,
                                      t % 3 == 0 ? F8_DTYPE_E5M2 : F8_DTYPE_E4M3, v % 2, v, (t / 2) % 2, t % 2, 0};
            cases++;
            bad += !fused_op_run(ctx, &fc, &rng);
        }
    test_col_amax_refusals(ctx[1]);
    printf("  row-wise casts fused into the %s norm and activations: %d of %d cases bit for bit with the plain "
           "kernels and the CPU cast of their output, column amaxes and the column copy cast from them included\n",
           f8_ctx_backend(ctx[1]) == F8_BACKEND_CUDA ? "CUDA" : "CPU", cases - bad, cases);
    CHECK(bad == 0, "fused row-wise norm/activation casts: %d of %d cases differ", bad, cases);
}

#endif /* F8_TESTS_ROWWISE_FUSED_OPS_TESTS_H */
