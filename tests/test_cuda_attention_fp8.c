/*
 * test_cuda_attention_fp8.c — f8_attention with fp8 = 1 on the GPU against
 * the CPU backend (the oracle, itself checked against FP64 in
 * test_attention_fp8.c), on the same inputs and slot scales:
 *  - y: f8's fallback kernel (F8I_ATTN_OWN) computes the CPU's chain in
 *    FP32 (its dot products FP32 where the CPU sums in double): every
 *    element within 3 E4M3 steps of O8 (or, at millions of elements, 99.99%
 *    bitwise equal with the CPU's whole-tensor error), 99% bitwise equal,
 *    dqkv within 0.1.
 *  - y: cuDNN's FP8 forward (attention_cudnn_fp8.cu; only where the loaded
 *    cuDNN is >= 9.19: 9.14's is wrong at training shapes) rounds P in its
 *    own blocked order, so it is held to what the chain itself achieves:
 *    against the BF16 attention of the same inputs, whole-tensor error
 *    within 1.25x the chain's + 0.01 and worst (query, head) row within
 *    2x the chain's + 0.05 (the probe's bounds, dev/cuda/fp8_sdpa_probe.cu),
 *    O's amax within 10%, dqkv (BF16 backward on its O and L) within 1.25x
 *    the chain's + 0.02. At the trainer's large shapes (124M, 1.3B at S
 *    1024, 4096, 8192) the chain is f8's FP8 kernel on the GPU (held to
 *    the CPU above) and the BF16 attention cuDNN's; these cases are skipped,
 *    saying why, when cuDNN is older than 9.19;
 *  - the slots: QKV's accumulator bitwise (the cast), S's 1 within 2^-7
 *    (row 0 of a causal call is P = 1), O's within 2^-4 relative;
 *  - dqkv (the BF16 backward on the dequantized codes) within t = 0.1 of
 *    rms + |cpu| (the BF16 attention test's measure; its y differs from the
 *    CPU's by the steps above, and D = Σ dy·y with it);
 *  - bitwise determinism (a second run), and the same bits after the ctx
 *    scratch was filled with 1e30 and after an earlier forward of other
 *    inputs into the same outputs and saved state (what a training step's
 *    forward meets); y finite and within O8's range;
 *  - the path each forward took, what f8_attention_query_path answers for it
 *    (CUDNN exactly where cuDNN ran it, forward and backward), launch counts
 *    (cast + kernel = 2 on f8's kernel; cast + prep + cuDNN + finish = 4).
 *  - GQA (f8's FP8 kernel): y, amaxes and dq bitwise those of the multi-head
 *    run with k and v copied to each query head, dk and dv their group sums.
 *  - the FP8 backward (fp8_backward = 1, check_bwd): cuDNN's FP8 backward
 *    graph (cuDNN >= 9.19, head_dim 128) against the CPU chain through the
 *    BF16 attention (1.25x the chain's error + 0.02), its dP and dQKV
 *    amaxes within 10%; f8's path (BF16 on the dequantized codes) within
 *    the BF16 backward's bound; bitwise repeatable; under both recipes;
 *  - current scaling (a second ctx pair, F8_RECIPE_CURRENT; O8 at the QKV
 *    scale): the same checks on f8's kernel and, required where the loaded
 *    cuDNN is >= 9.19, on cuDNN's FP8 forward (the delayed graph, with the
 *    delayed cases' bounds), the QKV scale bitwise the CPU's amax pass, S's
 *    448, one more launch (the amax pass). Its FP8 backward (O and dQKV in
 *    BF16) has no cuDNN engine below Blackwell: on Hopper (the device's
 *    name) the head_dim-128 cases must run on f8's path with the refusal's
 *    reason recorded (f8i_cuda_attn_info).
 * Inputs of amplitude 1 and 4 (peaked rows, as trained attention has).
 * Shapes: generic (head_dim 16, 32, S = 1, 7, 13), cuDNN's (head_dim 64
 * and 128, S = 1, 64, 129, 200, 1024; F8_TEST_QUICK: 256) and f8_train's
 * 50M attention (B16 S512 nh10 hd64, on the default path: f8's FP8 forward,
 * cuDNN's BF16 backward). Without a GPU (or in a CUDA=0
 * build) the program reports itself skipped.
 */
#include "attention_fp8_rig.h"
#include "core/backend.h"
#include "core/f8i.h"

enum { CPU = 0, GPU = 1 };

static f8_ctx *g_ctx[2];
static int g_cs; /* g_ctx is a current-scaling pair: O8 takes the QKV scale, the QKV cast has its amax pass */

static float *rand_bf16(test_rng *r, size_t n, double amp)
{
    float *v = (float *)xmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = f8_bf16_to_float(f8_bf16_from_float((float)(amp * rng_normal(r))));
    return v;
}

/* max over elements of |g - c| / (rms(c) + |c|) */
static double rel_to_rms(const float *g, const float *c, size_t n)
{
    double ss = 0.0, worst = 0.0;
    for (size_t i = 0; i < n; i++) ss += (double)c[i] * c[i];
    const double rms = sqrt(ss / (double)(n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)g[i] - c[i]) / (rms + fabs(c[i]) + 1e-30);
        if (e > worst || g[i] != g[i]) worst = g[i] != g[i] ? INFINITY : e;
    }
    return worst;
}

/* Fill the whole ctx scratch (where the FP8 forward keeps its scalars and
 * cuDNN's amax outputs) with 1e30f: a forward that reads anything there it
 * did not write first, such as an amax output cuDNN maxes into, shows it. */
static void poison_scratch(f8_ctx *ctx)
{
    const size_t n = ctx->scratch_bytes / sizeof(float);
    float *h = (float *)xmalloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = 1e30f;
    upload(ctx, ctx->scratch, h, n * sizeof *h);
    free(h);
}

/* The worst (query, head) row of y against ref: max over rows of
 * |g - ref| / |ref| (Euclidean over the head's hd values), leaving out rows
 * that reach O8's saturation (|ref| element above lim). A fault in a few
 * rows (a tile's edge, one batch or head) shows here while the whole-tensor
 * error hardly moves. *where gets the row (b·S + i)·nh + h. */
static double worst_row(const float *g, const float *ref, fp8_shape sh, float lim, int64_t *where)
{
    const int64_t rows = fp8_T(sh) * sh.nh, hd = sh.hd;
    double worst = 0.0;
    *where = -1;
    for (int64_t r = 0; r < rows; r++) {
        double e = 0.0, n = 0.0;
        int sat = 0;
        for (int64_t d = 0; d < hd; d++) {
            const double c = ref[r * hd + d], x = g[r * hd + d];
            sat |= fabs(c) > lim;
            e += (x - c) * (x - c), n += c * c;
        }
        const double v = n > 0.0 ? sqrt(e / n) : sqrt(e);
        if (!sat && (v > worst || v != v)) worst = v != v ? INFINITY : v, *where = r;
    }
    return worst;
}

/* The path of the forward (the backward, BF16, records its own after it). */
static int g_fwd_path;
static void note_fwd_path(f8_ctx *ctx) { g_fwd_path = f8i_cuda_attn_last_path(ctx); }

/* One shape: GPU (in the ctx's current mode) against the CPU, on inputs of
 * amplitude amp (1: scores of spread about 1, a near-uniform softmax; 4:
 * spread about 16, rows dominated by a few keys, as trained attention is).
 * want_cudnn: the forward must have taken cuDNN. Returns its path. */
static int check_shape_big(fp8_shape sh, int mode, int want_cudnn, double amp, int big)
{
    const int64_t T = fp8_T(sh), C = fp8_C(sh);
    const size_t n3 = (size_t)(T * 3 * C), n1 = (size_t)(T * C);
    test_rng r = {0xF8C0DE + (uint64_t)(sh.S * 31 + sh.hd) + (uint64_t)(amp * 1000)};
    float *qkv = rand_bf16(&r, n3, amp), *dy = rand_bf16(&r, n1, 1.0);
    float amax = 0.0f;
    for (size_t i = 0; i < n3; i++) amax = fmaxf(amax, fabsf(qkv[i]));
    const fp8_scales sc = {448.0f / amax, 448.0f, 448.0f / (1.5f * (float)amp)};
    fp8_run cpu, gpu, again;
    /* the chain: the CPU, or (big) f8's FP8 kernel on the GPU */
    if (big) f8i_cuda_attn_set_mode(g_ctx[GPU], F8I_ATTN_OWN);
    fp8_run_once(g_ctx[big ? GPU : CPU], sh, qkv, dy, sc, &cpu);
    if (big) f8i_cuda_attn_set_mode(g_ctx[GPU], mode);
    fp8_after_forward = note_fwd_path;
    fp8_run_once(g_ctx[GPU], sh, qkv, dy, sc, &gpu);
    fp8_after_forward = NULL;
    const int path = g_fwd_path;
    fp8_run_once(g_ctx[GPU], sh, qkv, dy, sc, &again);
    fp8_run dirty, reused;
    fp8_before_forward = poison_scratch;
    fp8_run_once(g_ctx[GPU], sh, qkv, dy, sc, &dirty);
    fp8_before_forward = NULL;
    float *other = rand_bf16(&r, n3, 2.0 * amp); /* another call's inputs, first, into the same outputs */
    fp8_earlier_qkv = other;
    fp8_run_once(g_ctx[GPU], sh, qkv, dy, sc, &reused);
    fp8_earlier_qkv = NULL;
    free(other);

    /* O8's scale: the O slot's, or (current scaling) the QKV scale the run took */
    fp8_scales osc = sc;
    if (g_cs) osc.o = cpu.used[0];
    double exact = 0.0;
    const double steps = fp8_compare(gpu.y, cpu.y, (int64_t)n1, osc, &exact);
    const double dg = rel_to_rms(gpu.dqkv, cpu.dqkv, n3);
    const int cudnn = path == F8I_ATTN_PATH_CUDNN;
    const char *name = cudnn ? "cudnn" : "own";
    /* Against the BF16 attention of the same inputs (its y and dqkv): how far
     * FP8 takes each path from what it approximates, over the y elements
     * O8 does not saturate (|y| below 448 / scale_o, with a step of room). */
    float *gb = NULL, *yb = fp8_bf16_run(g_ctx[big ? GPU : CPU], sh, qkv, dy, &gb);
    const float lim = (448.0f / osc.o) * (1.0f - 0x1p-4f);
    const double eg = fp8_rel_global(gpu.y, yb, n1, lim), ec = fp8_rel_global(cpu.y, yb, n1, lim);
    const double dgg = fp8_rel_global(gpu.dqkv, gb, n3, 0.0f), dgc = fp8_rel_global(cpu.dqkv, gb, n3, 0.0f);
    int64_t wg_at, wc_at;
    const double wg = worst_row(gpu.y, yb, sh, lim, &wg_at), wc = worst_row(cpu.y, yb, sh, lim, &wc_at);
    printf("  [%s] worst row of y against the BF16 attention: %.4f at row %lld (cpu chain %.4f at %lld)\n",
           path == F8I_ATTN_PATH_CUDNN ? "cudnn" : "own", wg, (long long)wg_at, wc, (long long)wc_at);
    printf("  [%s] B%lld S%lld nh%lld hd%lld amp %g: y %.3g steps (%.4f equal), dqkv %.3g; amax S %.9g O %.6g (cpu %.6g); "
           "relative error against the BF16 attention: y %.4f (cpu %.4f), dqkv %.4f (cpu %.4f)\n",
           name, (long long)sh.B, (long long)sh.S, (long long)sh.nh, (long long)sh.hd, amp, steps, exact, dg,
           (double)gpu.amax[1], (double)gpu.amax[2], (double)cpu.amax[2], eg, ec, dgg, dgc);
    CHECK(!want_cudnn || cudnn, "B%lld S%lld hd%lld: cuDNN did not take the FP8 call: %s", (long long)sh.B, (long long)sh.S,
          (long long)sh.hd, f8i_cuda_attn_info(g_ctx[GPU], NULL));
    CHECK(mode != F8I_ATTN_OWN || !cudnn, "F8I_ATTN_OWN but the call took cuDNN");
    /* The oracle and FP8 itself: the CPU chain within 10% (y) and 20% (dqkv) of
     * the BF16 attention (measured 4.5-6% and 5-16% on these shapes). */
    CHECK(sh.S == 1 || amp != 1.0 || (ec <= 0.1 && dgc <= 0.2), "[cpu] y %.3g, dqkv %.3g from the BF16 attention", ec,
          dgc);
    if (cudnn) {
        CHECK(eg <= 1.25 * ec + 0.01, "[cudnn] y error %.4f against the BF16 attention, chain %.4f", eg, ec);
        CHECK(wg <= 2.0 * wc + 0.05, "[cudnn] worst row of y %.4f at %lld, chain %.4f", wg, (long long)wg_at, wc);
        CHECK(dgg <= 1.25 * dgc + 0.02, "[cudnn] dqkv error %.4f against the BF16 attention, chain %.4f", dgg, dgc);
    } else {
        /* f8's kernel is the CPU's chain with FP32 dot products */
        /* At millions of elements the FP32 dot products (the CPU sums in
         * double) flip a few P8 roundings; each moves an O element by one P8
         * step times its v, many of that element's own E4M3 steps when O is
         * near 0 (seen: 12 steps at B16 S512 nh10, with every other element
         * bitwise equal and the whole-tensor error the CPU's to 4 digits). */
        CHECK(steps <= 3.0 || (exact >= 0.9999 && fabs(eg - ec) <= 1e-3 * ec), "[own] y %.3g E4M3 steps from the CPU",
              steps);
        CHECK(exact >= 0.99, "[own] only %.4f of y bitwise equal to the CPU", exact);
        CHECK(dg <= 0.1, "[own] dqkv %.3g from the CPU", dg);
    }
    free(yb), free(gb);
    CHECK(gpu.amax[0] == cpu.amax[0], "[%s] QKV amax %.9g, cpu %.9g", name, (double)gpu.amax[0], (double)cpu.amax[0]);
    CHECK(fabsf(gpu.amax[1] - 1.0f) <= 0x1p-7f, "[%s] S amax %.9g, expected 1", name, (double)gpu.amax[1]);
    CHECK(fabsf(gpu.amax[2] - cpu.amax[2]) <= (cudnn ? 0.1f : 0x1p-4f) * cpu.amax[2], "[%s] O amax %.9g, cpu %.9g", name,
          (double)gpu.amax[2], (double)cpu.amax[2]);
    CHECK(memcmp(gpu.y, again.y, n1 * sizeof(float)) == 0 && memcmp(gpu.dqkv, again.dqkv, n3 * sizeof(float)) == 0,
          "[%s] a second run differs", name);
    /* a scratch full of 1e30 changes nothing: not y, not dqkv, not the amaxes */
    CHECK(memcmp(gpu.y, dirty.y, n1 * sizeof(float)) == 0 && memcmp(gpu.dqkv, dirty.dqkv, n3 * sizeof(float)) == 0,
          "[%s] a run after the scratch was filled with 1e30 differs", name);
    /* a forward into outputs (y, the saved codes, O, L) that hold an earlier call's values: the same */
    CHECK(memcmp(gpu.y, reused.y, n1 * sizeof(float)) == 0, "[%s] y differs after an earlier forward into the same outputs",
          name);
    CHECK(memcmp(gpu.dqkv, reused.dqkv, n3 * sizeof(float)) == 0,
          "[%s] dqkv differs after an earlier forward into the same saved state (rms-relative %.3g)", name,
          rel_to_rms(reused.dqkv, gpu.dqkv, n3));
    CHECK(memcmp(gpu.amax, reused.amax, sizeof gpu.amax) == 0, "[%s] amaxes differ after an earlier forward", name);
    CHECK(memcmp(gpu.amax, dirty.amax, sizeof gpu.amax) == 0,
          "[%s] amaxes after the scratch was filled with 1e30: S %.9g O %.9g, clean S %.9g O %.9g", name,
          (double)dirty.amax[1], (double)dirty.amax[2], (double)gpu.amax[1], (double)gpu.amax[2]);
    /* saturated O8 stays finite (E4M3 has no infinity: an unsaturated overflow would be NaN) */
    size_t bad = 0;
    for (size_t i = 0; i < n1; i++) bad += !isfinite(gpu.y[i]) || fabsf(gpu.y[i]) > 448.0f / osc.o * 1.01f;
    CHECK(bad == 0, "[%s] %zu y elements not finite or beyond O8's range", name, bad);
    /* the scales the forward used: the QKV cast's (current scaling: its amax pass, bitwise the CPU's), S's */
    CHECK(gpu.used[0] == cpu.used[0] && gpu.used_inv[0] == cpu.used_inv[0], "[%s] QKV scale %.9g, cpu %.9g", name,
          (double)gpu.used[0], (double)cpu.used[0]);
    CHECK(!g_cs || (gpu.used[1] == 448.0f && gpu.used_inv[1] == 1.0f / 448.0f), "[%s] current scaling: S scale %.9g",
          name, (double)gpu.used[1]);
    fp8_run_free(&cpu), fp8_run_free(&gpu), fp8_run_free(&again), fp8_run_free(&dirty), fp8_run_free(&reused);
    free(qkv), free(dy);
    return path;
}

/* The FP8 backward (fp8_backward = 1) at sh on the GPU against the CPU's
 * chain (itself held to FP64 by test_attention_fp8.c), both at the scales
 * a second step would use (dO from dy's amax; dP and dQKV from a first CPU
 * pass's amaxes). cuDNN's FP8 backward (want_cudnn: cuDNN >= 9.19, head_dim
 * 128) rounds P8 and dS8 in its own block order, so it is held to what the
 * chain achieves against the BF16 attention of the same inputs (dqkv
 * within 1.25x the chain's error + 0.02, the probe's bound), its amaxes of
 * dP and dQKV within 10% of the chain's; f8's path (the BF16 backward of
 * the dequantized codes) is held to the BF16 backward's distance (0.2, at
 * amplitude 1) and records no dP or dQKV amax. (The CPU chain, measured at
 * B2 S256 nh2 hd128: 0.125 delayed, 0.081 current at amplitude 1; 0.93 and
 * 0.40 at amplitude 4, where O8's scale saturates and FP8's q, k steps move
 * a softmax of score spread ~16.) Both: dO's scale and amax bitwise the CPU's
 * (the cast), a second run bitwise equal, dqkv finite. want_cudnn < 0
 * (current scaling on Hopper, cuDNN >= 9.19): cuDNN must decline it (its
 * heuristics have no engine for O and dQKV in BF16 below Blackwell) and
 * the refusal be recorded; f8's path runs it. */
static void check_bwd(fp8_shape sh, int want_cudnn, double amp)
{
    const int64_t T = fp8_T(sh), C = fp8_C(sh);
    const size_t n3 = (size_t)(T * 3 * C), n1 = (size_t)(T * C);
    test_rng r = {0xB0C0 + (uint64_t)(sh.S * 7 + sh.hd) + (uint64_t)g_cs};
    float *qkv = rand_bf16(&r, n3, amp), *dy = rand_bf16(&r, n1, 1.0), aq = 0.0f, ady = 0.0f;
    for (size_t i = 0; i < n3; i++) aq = fmaxf(aq, fabsf(qkv[i]));
    for (size_t i = 0; i < n1; i++) ady = fmaxf(ady, fabsf(dy[i]));
    const f8_dtype gd = f8_ctx_slot_dtype(g_ctx[CPU], F8_DIR_BACKWARD);
    const float gmax = f8_fp8_max(gd);
    const fp8_scales sc = {448.0f / aq, 448.0f, g_cs ? 0.0f : 448.0f / (1.5f * (float)amp)};
    fp8_bscales bs = {gmax / ady, 1.0f, g_cs ? 0.0f : 1.0f};
    fp8_run cpu, gpu, again;
    fp8_bwd_on = 1;
    fp8_bwd_scales = bs;
    fp8_run_once(g_ctx[CPU], sh, qkv, dy, sc, &cpu);
    if (cpu.bamax[1] > 0.0f) bs.dP = gmax / cpu.bamax[1];
    if (!g_cs && cpu.bamax[2] > 0.0f) bs.dqkv = gmax / cpu.bamax[2];
    fp8_run_free(&cpu);
    fp8_bwd_scales = bs;
    fp8_run_once(g_ctx[CPU], sh, qkv, dy, sc, &cpu);
    fp8_run_once(g_ctx[GPU], sh, qkv, dy, sc, &gpu);
    const int path = f8i_cuda_attn_last_path(g_ctx[GPU]), cudnn = path == F8I_ATTN_PATH_CUDNN;
    fp8_run_once(g_ctx[GPU], sh, qkv, dy, sc, &again);
    fp8_bwd_on = 0;
    float *gb = NULL, *yb = fp8_bf16_run(g_ctx[GPU], sh, qkv, dy, &gb);
    const double eg = fp8_rel_global(gpu.dqkv, gb, n3, 0.0f), ec = fp8_rel_global(cpu.dqkv, gb, n3, 0.0f);
    const double ed = fp8_rel_global(gpu.dqkv, cpu.dqkv, n3, 0.0f);
    const char *name = cudnn ? "cudnn" : "own";
    printf("  [%s] FP8 backward%s B%lld S%lld nh%lld hd%lld amp %g (%s): dqkv against the BF16 attention %.4f (cpu chain "
           "%.4f), against the chain %.4f; amax dP %.6g (cpu %.6g) dQKV %.6g (cpu %.6g)\n",
           name, g_cs ? " (current scaling)" : "", (long long)sh.B, (long long)sh.S, (long long)sh.nh, (long long)sh.hd, amp,
           f8_dtype_name(gd), eg, ec, ed, (double)gpu.bamax[1], (double)cpu.bamax[1], (double)gpu.bamax[2],
           (double)cpu.bamax[2]);
    { /* what f8_attention_query_path answers for this backward: the path it took */
        f8_attention_config qc = f8_attention_config_default(sh.nh, sh.hd, sh.B, sh.S);
        qc.fp8 = 1, qc.fp8_backward = 1;
        f8_attention *qa = NULL;
        f8_attention_path qp = F8_ATTENTION_PATH_AUTO;
        CHECK_OK(g_ctx[GPU], f8_attention_create(g_ctx[GPU], &qc, &qa));
        CHECK_OK(g_ctx[GPU], f8_attention_query_path(qa, sh.B, sh.S, 1, &qp));
        CHECK((qp == F8_ATTENTION_PATH_CUDNN) == cudnn, "FP8 backward: the query says %d, it ran on %s", (int)qp, name);
        f8_attention_destroy(qa);
    }
    CHECK(want_cudnn <= 0 || cudnn, "FP8 backward B%lld S%lld hd%lld: cuDNN did not take it: %s", (long long)sh.B,
          (long long)sh.S, (long long)sh.hd, f8i_cuda_attn_info(g_ctx[GPU], NULL));
    if (want_cudnn < 0) {
        const char *info = f8i_cuda_attn_info(g_ctx[GPU], NULL);
        printf("  [%s] FP8 backward (current scaling) on Hopper, expected declined: %s\n", name, info);
        CHECK(!cudnn && strstr(info, "refused: FP8 backward (current scaling)") != NULL,
              "FP8 backward (current scaling) B%lld S%lld hd%lld ran on %s; expected cuDNN to decline it on Hopper (no "
              "engine for O and dQKV in BF16 below Blackwell) with the refusal recorded: %s",
              (long long)sh.B, (long long)sh.S, (long long)sh.hd, name, info);
    }
    /* at amplitude 4 (scores of spread ~16) FP8's q, k steps move the softmax itself: no absolute bound */
    CHECK(amp != 1.0 || ec <= 0.3, "[cpu] FP8 backward: dqkv %.4f from the BF16 attention", ec);
    if (cudnn) {
        CHECK(eg <= 1.25 * ec + 0.02, "[cudnn] FP8 backward: dqkv %.4f from the BF16 attention, chain %.4f", eg, ec);
        CHECK(fabsf(gpu.bamax[1] - cpu.bamax[1]) <= 0.1f * cpu.bamax[1], "[cudnn] dP amax %.6g, cpu %.6g",
              (double)gpu.bamax[1], (double)cpu.bamax[1]);
        CHECK(fabsf(gpu.bamax[2] - cpu.bamax[2]) <= 0.1f * cpu.bamax[2], "[cudnn] dQKV amax %.6g, cpu %.6g",
              (double)gpu.bamax[2], (double)cpu.bamax[2]);
    } else {
        CHECK(amp != 1.0 || eg <= 0.2, "[own] FP8 backward (BF16 on the dequantized codes): dqkv %.4f from the BF16 "
              "attention", eg);
        CHECK(gpu.bamax[1] == 0.0f && gpu.bamax[2] == 0.0f, "[own] recorded dP / dQKV amaxes %g %g", (double)gpu.bamax[1],
              (double)gpu.bamax[2]);
    }
    CHECK(gpu.bused[0] == cpu.bused[0] && gpu.bamax[0] == cpu.bamax[0], "[%s] dO scale %.9g amax %.9g, cpu %.9g %.9g", name,
          (double)gpu.bused[0], (double)gpu.bamax[0], (double)cpu.bused[0], (double)cpu.bamax[0]);
    CHECK(memcmp(gpu.dqkv, again.dqkv, n3 * sizeof(float)) == 0 && memcmp(gpu.bamax, again.bamax, sizeof gpu.bamax) == 0,
          "[%s] FP8 backward: a second run differs", name);
    size_t bad = 0;
    for (size_t i = 0; i < n3; i++) bad += !isfinite(gpu.dqkv[i]);
    CHECK(bad == 0, "[%s] FP8 backward: %zu dqkv elements not finite", name, bad);
    fp8_run_free(&cpu), fp8_run_free(&gpu), fp8_run_free(&again);
    free(yb), free(gb), free(qkv), free(dy);
}

/* The FP8 backward's shapes: cuDNN's (head_dim 128, S a multiple of 128)
 * held to want (check_bwd's want_cudnn), f8's path at head_dim 64 and for
 * a shape cuDNN's FP8 backward is not asked to take. */
static void check_bwd_cases(int want, int quick)
{
    f8i_cuda_attn_set_mode(g_ctx[GPU], F8I_ATTN_OWN);
    check_bwd((fp8_shape){2, 64, 2, 64}, 0, 1.0);
    check_bwd((fp8_shape){1, 256, 2, 128}, 0, 1.0);
    f8i_cuda_attn_set_mode(g_ctx[GPU], F8I_ATTN_AUTO);
    check_bwd((fp8_shape){2, 200, 3, 64}, 0, 1.0);
    check_bwd((fp8_shape){2, 256, 2, 128}, want, 1.0);
    check_bwd((fp8_shape){2, 256, 2, 128}, want, 4.0);
    check_bwd((fp8_shape){1, quick ? 256 : 1024, 4, 128}, want, 1.0);
    if (!quick) check_bwd((fp8_shape){4, 512, 5, 128}, want, 1.0);
}

static int check_shape_amp(fp8_shape sh, int mode, int want_cudnn, double amp)
{
    return check_shape_big(sh, mode, want_cudnn, amp, 0);
}
static int check_shape(fp8_shape sh, int mode, int want_cudnn) { return check_shape_amp(sh, mode, want_cudnn, 1.0); }

/* cuDNN's FP8 forward is taken (the query says so) where the loaded cuDNN
 * is >= 9.19 and head_dim is 64 or 128; *why says why not otherwise. */
static int cudnn_fp8_expected(char *why, size_t n)
{
    const char *info = f8i_cuda_attn_info(g_ctx[GPU], NULL);
    size_t v = 0;
    if (sscanf(info, "cuDNN %zu", &v) != 1) {
        snprintf(why, n, "cuDNN not loaded (%s)", info);
        return 0;
    }
    if (v < 91900) {
        snprintf(why, n, "the loaded cuDNN is %zu, older than 9.19 (91900), whose FP8 forward f8 needs", v);
        return 0;
    }
    return 1;
}

/* One FP8 attention's calls at sh: a forward is 2 launches (the cast and
 * f8's kernel) and allocates nothing; f8_attention_query_path against the
 * paths the calls take: the forward OWN, the backward (BF16) CUDNN exactly
 * where it ran on cuDNN (last_path after it). */
static void check_calls(fp8_shape sh)
{
    f8_ctx *ctx = g_ctx[GPU];
    const int64_t T = fp8_T(sh), C = fp8_C(sh);
    f8_attention *a = fp8_att_new(ctx, sh, 0);
    f8_attention_saved *sv = NULL;
    CHECK_OK(ctx, f8_attention_saved_create(a, &sv));
    f8_tensor tq = f8_tensor_make(balloc(ctx, (size_t)(T * 3 * C) * 2), F8_DTYPE_BF16, T, 3 * C);
    f8_tensor ty = f8_tensor_make(balloc(ctx, (size_t)(T * C) * 2), F8_DTYPE_BF16, T, C);
    f8_tensor tg = f8_tensor_make(balloc(ctx, (size_t)(T * 3 * C) * 2), F8_DTYPE_BF16, T, 3 * C);
    float *zero = (float *)calloc((size_t)(T * 3 * C), sizeof(float));
    upload(ctx, tq.data, zero, (size_t)(T * 3 * C) * 2);
    free(zero);
    f8_attention_path qf = F8_ATTENTION_PATH_AUTO, qb = F8_ATTENTION_PATH_AUTO;
    CHECK_OK(ctx, f8_attention_query_path(a, sh.B, sh.S, 0, &qf));
    CHECK_OK(ctx, f8_attention_query_path(a, sh.B, sh.S, 1, &qb));
    CHECK_OK(ctx, f8_attention_forward(a, &tq, sh.B, sh.S, &ty, sv));
    f8_ctx_counters c0, c1;
    CHECK_OK(ctx, f8_ctx_counters_read(ctx, &c0));
    CHECK_OK(ctx, f8_attention_forward(a, &tq, sh.B, sh.S, &ty, sv));
    CHECK_OK(ctx, f8_ctx_counters_read(ctx, &c1));
    const int pf = f8i_cuda_attn_last_path(ctx);
    const uint64_t got = c1.launches - c0.launches;
    const uint64_t want = (pf == F8I_ATTN_PATH_CUDNN ? 4 : 2) + (g_cs ? 1 : 0); /* current scaling: the amax pass */
    CHECK(got == want, "FP8 forward: %llu launches, expected %llu", (unsigned long long)got, (unsigned long long)want);
    CHECK(c1.allocations == c0.allocations, "FP8 forward allocated");
    CHECK_OK(ctx, f8_attention_backward(a, sv, &ty, &tg));
    const int pb = f8i_cuda_attn_last_path(ctx);
    CHECK((qf == F8_ATTENTION_PATH_CUDNN) == (pf == F8I_ATTN_PATH_CUDNN), "FP8 forward B%lld S%lld: query %d, ran %d",
          (long long)sh.B, (long long)sh.S, (int)qf, pf);
    CHECK((qb == F8_ATTENTION_PATH_CUDNN) == (pb == F8I_ATTN_PATH_CUDNN),
          "FP8 attention's backward B%lld S%lld: query says %s, it ran on %s (%s)", (long long)sh.B, (long long)sh.S,
          qb == F8_ATTENTION_PATH_CUDNN ? "cuDNN" : "own", pb == F8I_ATTN_PATH_CUDNN ? "cuDNN" : "own",
          f8i_cuda_attn_info(ctx, NULL));
    f8_ctx_free(ctx, tq.data);
    f8_ctx_free(ctx, ty.data);
    f8_ctx_free(ctx, tg.data);
    f8_attention_saved_destroy(sv);
    f8_attention_destroy(a);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines survive a timeout's kill */
    const int rc = test_ctx_pair("test_cuda_attention_fp8", NULL, g_ctx);
    if (rc) return rc;
    const int quick = getenv("F8_TEST_QUICK") != NULL;
    const fp8_shape generic[] = {{2, 7, 3, 16}, {1, 13, 2, 32}, {3, 1, 2, 16}};
    const fp8_shape fused[] = {{2, 64, 2, 64},  {1, 1, 2, 64},   {1, 129, 2, 128},
                               {2, 200, 3, 64}, {1, quick ? 256 : 1024, 4, 64}, {1, quick ? 256 : 1024, 2, 128}};
    /* f8's fallback kernel on every shape */
    f8i_cuda_attn_set_mode(g_ctx[GPU], F8I_ATTN_OWN);
    for (size_t i = 0; i < sizeof generic / sizeof generic[0]; i++) check_shape(generic[i], F8I_ATTN_OWN, 0);
    for (size_t i = 0; i < sizeof fused / sizeof fused[0]; i++) check_shape(fused[i], F8I_ATTN_OWN, 0);
    check_shape_amp(fused[0], F8I_ATTN_OWN, 0, 4.0);
    check_shape_amp(fused[4], F8I_ATTN_OWN, 0, 4.0);
    check_calls(fused[0]);
    /* GQA on f8's FP8 kernel against the multi-head run of copied k, v (cuDNN's FP8 forward takes no GQA) */
    (void)fp8_check_gqa(g_ctx[GPU], 2, 200, 8, 2, 64, 0x6A2);
    (void)fp8_check_gqa(g_ctx[GPU], 1, 129, 4, 1, 128, 0x6A3);
    /* AUTO: cuDNN's FP8 forward where the loaded cuDNN is >= 9.19 (hd 64, 128), else f8's kernel */
    f8i_cuda_attn_set_mode(g_ctx[GPU], F8I_ATTN_AUTO);
    const int first = check_shape(fused[0], F8I_ATTN_AUTO, 0); /* loads cuDNN */
    char why[256] = "";
    const int want = cudnn_fp8_expected(why, sizeof why);
    CHECK(want || first == F8I_ATTN_PATH_OWN, "FP8 attention took cuDNN: %s", why);
    if (!want) printf("  cuDNN FP8 forward cases skipped: %s\n", why);
    for (size_t i = 0; want && i < sizeof fused / sizeof fused[0]; i++)
        if (fused[i].S > 1) check_shape(fused[i], F8I_ATTN_AUTO, 1);
    check_shape_amp(fused[4], F8I_ATTN_AUTO, want, 4.0);
    { /* GQA: the query answers OWN for the forward (cuDNN's FP8 forward takes no GQA), as the call runs */
        f8_attention_config gc = f8_attention_config_default(8, 64, 2, 256);
        gc.fp8 = 1;
        gc.n_kv_head = 2;
        f8_attention *ga = NULL;
        f8_attention_path gp = F8_ATTENTION_PATH_AUTO;
        CHECK_OK(g_ctx[GPU], f8_attention_create(g_ctx[GPU], &gc, &ga));
        CHECK_OK(g_ctx[GPU], f8_attention_query_path(ga, 2, 256, 0, &gp));
        CHECK(gp == F8_ATTENTION_PATH_OWN, "FP8 GQA forward: the query says %d, not OWN", (int)gp);
        f8_attention_destroy(ga);
    }
    /* f8_train's 50M attention (batch 16, 10 heads of 64, seq 512) on the default path, against the CPU */
    const fp8_shape train50m = {quick ? 2 : 16, 512, 10, 64};
    check_shape_amp(train50m, F8I_ATTN_AUTO, want, 1.0);
    check_calls(fused[0]);
    check_calls(train50m);
    /* the trainer's larger shapes on cuDNN, against f8's FP8 kernel on the GPU:
     * 124M (B8 S1024 nh12 hd64), 1.3B (B8 S1024 nh16 hd128), S 4096 and 8192 */
    const fp8_shape large[] = {{8, 1024, 12, 64}, {8, 1024, 16, 128}, {2, 4096, 16, 128}, {1, 8192, 16, 128}};
    for (size_t i = 0; want && !quick && i < sizeof large / sizeof large[0]; i++) {
        check_shape_big(large[i], F8I_ATTN_AUTO, 1, 1.0, 1);
        if (i == 1) check_shape_big(large[i], F8I_ATTN_AUTO, 1, 4.0, 1);
        check_calls(large[i]);
    }
    check_bwd_cases(want, quick); /* the FP8 backward under delayed scaling (HYBRID: E5M2 gradients) */
    printf("  cuDNN: %s\n", f8i_cuda_attn_info(g_ctx[GPU], NULL));
    f8_ctx_destroy(g_ctx[CPU]);
    f8_ctx_destroy(g_ctx[GPU]);

    /* Current scaling (test_attention_fp8.c holds the CPU to FP64): O8 at
     * the QKV scale, so the forward is the delayed graph with other scales:
     * f8's kernel against the CPU, then cuDNN's FP8 forward, required where
     * the loaded cuDNN is >= 9.19 (want) and held to the delayed cases'
     * bounds, on a second pair. The FP8 backward under current scaling (O
     * and dQKV in BF16) has no cuDNN engine below Blackwell: on Hopper it
     * must decline to f8's path with the refusal recorded (-1). */
    f8_recipe rec = f8_recipe_default();
    rec.kind = F8_RECIPE_CURRENT;
    rec.amax_history_len = 1;
    if (test_ctx_pair("test_cuda_attention_fp8 (current scaling)", &rec, g_ctx)) return test_finish("test_cuda_attention_fp8");
    g_cs = 1;
    char dev[128] = "";
    const int hopper = f8i_cuda_device_name(0, dev, sizeof dev) == 0 &&
                       (strstr(dev, "H100") || strstr(dev, "H200") || strstr(dev, "H800") || strstr(dev, "GH200"));
    printf("  current scaling (%s%s):\n", dev, hopper ? ", Hopper" : "");
    f8i_cuda_attn_set_mode(g_ctx[GPU], F8I_ATTN_OWN);
    check_shape(generic[0], F8I_ATTN_OWN, 0);
    check_shape(fused[0], F8I_ATTN_OWN, 0);
    check_shape_amp(fused[4], F8I_ATTN_OWN, 0, 4.0);
    check_calls(fused[0]);
    f8i_cuda_attn_set_mode(g_ctx[GPU], F8I_ATTN_AUTO);
    check_shape(fused[0], F8I_ATTN_AUTO, want); /* loads cuDNN */
    for (size_t i = 1; want && i < sizeof fused / sizeof fused[0]; i++)
        if (fused[i].S > 1) check_shape(fused[i], F8I_ATTN_AUTO, 1);
    check_shape_amp(fused[0], F8I_ATTN_AUTO, want, 4.0);
    check_shape_amp(fused[4], F8I_ATTN_AUTO, want, 4.0);
    check_shape_amp(train50m, F8I_ATTN_AUTO, want, 1.0);
    check_calls(fused[0]);
    check_calls(train50m);
    for (size_t i = 0; want && !quick && i < sizeof large / sizeof large[0]; i++) {
        check_shape_big(large[i], F8I_ATTN_AUTO, 1, 1.0, 1);
        check_calls(large[i]);
    }
    check_bwd_cases(want ? (hopper ? -1 : 0) : 0, quick);
    printf("  cuDNN (current scaling): %s\n", f8i_cuda_attn_info(g_ctx[GPU], NULL));
    f8_ctx_destroy(g_ctx[CPU]);
    f8_ctx_destroy(g_ctx[GPU]);
    return test_finish("test_cuda_attention_fp8");
}
