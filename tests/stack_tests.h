/*
 * stack_tests.h — the workspace-system tests of a Linear → LayerNormLinear →
 * LayerNormMLP stack, run on one ctx: eager against graphed training (TE's
 * test_cuda_graphs), FP8 primary weights against high-precision ones (TE's
 * test_gpt_fp8_parameters tolerances), memory held and allocations made per
 * step. test_stack.c runs them on the CPU, test_cuda_stack.c on the GPU.
 */
#ifndef F8_TESTS_STACK_TESTS_H
#define F8_TESTS_STACK_TESTS_H

#include "stack.h"


/* TE's test_cuda_graphs, adapted: 3 steps × 2 microbatches with SGD, eager
 * (FIRST / NOT_FIRST) against a captured forward+backward replayed with the
 * ctx noop flag (0 on the first microbatch, 1 after). Scale updates run
 * outside the graph once per step, or inside it after every microbatch (and
 * then eagerly after every microbatch too). Parameters, gradients and the
 * last output must be bitwise equal. Also checks that the replays allocate
 * nothing and that the noop flag kept the workspaces of microbatch 1. */
static void test_graph_vs_eager(f8_ctx *e_ctx, f8_ctx *g_ctx, int fp8, int fp8_weights, int updates_inside)
{
    stack_cfg c = small_cfg(fp8, fp8_weights);
    stack E, G;
    stack_create(&E, e_ctx, &c);
    stack_create(&G, g_ctx, &c);
    const float lr = 0.05f;

    /* Warm G up eagerly (plans, lazy transposes), then undo what the warmup
     * changed: gradients and every slot of the ctx (as TE saves and restores
     * fp8_meta around its warmup). */
    const int L = f8_ctx_recipe(g_ctx)->amax_history_len;
    float *zero_hist = (float *)calloc((size_t)L, sizeof(float));
    CHECK_OK(g_ctx, f8_ctx_set_weight_noop(g_ctx, 1));
    stack_data(&G, 0, 0);
    CHECK_OK(g_ctx, stack_fwd_bwd(&G, F8_MICROBATCH_FIRST));
    stack_zero_grad(&G);
    for (int d = 0; d < 2; d++) {
        int n = d ? 4 : 6;
        for (int i = 0; i < n; i++) {
            f8_slot s;
            if (i < (d ? 2 : 3)) {
                f8_module_slot(G.lin, (f8_direction)d, i, &s);
                CHECK_OK(g_ctx, f8_slot_write(g_ctx, s, 1.0f, 1.0f, zero_hist));
                f8_module_slot(G.lnl, (f8_direction)d, i, &s);
                CHECK_OK(g_ctx, f8_slot_write(g_ctx, s, 1.0f, 1.0f, zero_hist));
            }
            f8_module_slot(G.mlp, (f8_direction)d, i, &s);
            CHECK_OK(g_ctx, f8_slot_write(g_ctx, s, 1.0f, 1.0f, zero_hist));
        }
    }
    free(zero_hist);

    /* Capture one microbatch's forward+backward (and the updates, if inside). */
    f8_graph *graph = NULL;
    CHECK_OK(g_ctx, f8_graph_begin(g_ctx));
    f8_status cst = stack_fwd_bwd(&G, F8_MICROBATCH_NOT_FIRST);
    if (cst == F8_OK && updates_inside) cst = stack_update_scales(&G);
    CHECK(cst == F8_OK, "capture: %s", f8_ctx_last_error(g_ctx));
    CHECK_OK(g_ctx, f8_graph_end(g_ctx, &graph));
    if (!graph) {
        stack_destroy(&E);
        stack_destroy(&G);
        return;
    }
    f8_ctx_counters before, after;
    f8_ctx_counters_read(g_ctx, &before);
    const f8_qtensor *ws = f8_module_weight_workspace(G.mlp, F8_PARAM_FC1_WEIGHT);
    const size_t wbytes = (size_t)(c.F * c.H);
    unsigned char *wmb0 = (unsigned char *)xmalloc(wbytes + 4), *wmb1 = (unsigned char *)xmalloc(wbytes + 4);
    int kept = 1;
    for (int step = 0; step < 3; step++) {
        stack_zero_grad(&E);
        stack_zero_grad(&G);
        for (int mb = 0; mb < 2; mb++) {
            stack_data(&E, step, mb);
            stack_data(&G, step, mb);
            CHECK_OK(e_ctx, stack_fwd_bwd(&E, mb == 0 ? F8_MICROBATCH_FIRST : F8_MICROBATCH_NOT_FIRST));
            if (updates_inside) CHECK_OK(e_ctx, stack_update_scales(&E));
            CHECK_OK(g_ctx, f8_ctx_set_noop_flag(g_ctx, mb == 0 ? 0.0f : 1.0f));
            CHECK_OK(g_ctx, f8_graph_replay(graph));
            const f8_recipe_kind rk = f8_ctx_recipe(g_ctx)->kind;
            if (fp8 && !fp8_weights && (rk == F8_RECIPE_DELAYED || rk == F8_RECIPE_CURRENT)) {
                /* the noop flag keeps microbatch 0's workspace, data and scale_inv (#820);
                 * a block- or row-scaled workspace has no per-tensor view to read */
                f8_tensor v;
                f8_qtensor_data(ws, &v);
                unsigned char *w = mb ? wmb1 : wmb0;
                CHECK_OK(g_ctx, f8_ctx_download(g_ctx, w, v.data, wbytes));
                CHECK_OK(g_ctx, f8_ctx_download(g_ctx, w + wbytes, v.scale_inv, 4));
                if (mb == 1) kept &= memcmp(wmb0, wmb1, wbytes + 4) == 0;
            }
        }
        if (!updates_inside) {
            CHECK_OK(e_ctx, stack_update_scales(&E));
            CHECK_OK(g_ctx, stack_update_scales(&G));
        }
        /* compare gradients and output before the optimizer step */
        size_t be, bg;
        unsigned char *se = stack_snapshot(&E, &be), *sg = stack_snapshot(&G, &bg);
        CHECK(be == bg && memcmp(se, sg, be) == 0,
              "graph vs eager (fp8 %d, fp8_weights %d, updates %s): step %d parameters/gradients/y differ", fp8,
              fp8_weights, updates_inside ? "inside" : "outside", step);
        free(se);
        free(sg);
        stack_sgd(&E, lr);
        stack_sgd(&G, lr);
    }
    CHECK(kept, "graph replay with the noop flag at 1 changed the fc1 workspace");
    free(wmb0);
    free(wmb1);
    f8_ctx_counters_read(g_ctx, &after);
    CHECK(after.allocations == before.allocations, "graph replays allocated %llu times",
          (unsigned long long)(after.allocations - before.allocations));
    size_t be, bg;
    unsigned char *se = stack_snapshot(&E, &be), *sg = stack_snapshot(&G, &bg);
    CHECK(be == bg && memcmp(se, sg, be) == 0, "graph vs eager: final parameters differ");
    free(se);
    free(sg);
    f8_graph_destroy(graph);
    CHECK_OK(g_ctx, f8_ctx_set_weight_noop(g_ctx, 0));
    CHECK_OK(g_ctx, f8_ctx_set_noop_flag(g_ctx, 0.0f));
    stack_destroy(&E);
    stack_destroy(&G);
}

/* |a - b| <= atol + rtol·|b| elementwise (torch.allclose), TE's FP8 tolerances. */
static int allclose(const float *a, const float *b, size_t n, double rtol, double atol, double *worst)
{
    int ok = 1;
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]), lim = atol + rtol * fabs((double)b[i]);
        if (d / lim > *worst) *worst = d / lim;
        if (!(d <= lim)) ok = 0;
    }
    return ok;
}

/* TE's test_gpt_fp8_parameters: the stack with FP8 primary weights against the
 * same stack with FP32 weights, one forward and backward: output, dx and all
 * parameter gradients within rtol 0.125, atol 0.0675. */
static void test_fp8_weights_vs_hp(f8_ctx *ctx)
{
    stack H, P;
    stack_cfg hc = small_cfg(1, 0), pc = small_cfg(1, 1);
    stack_create(&H, ctx, &hc);
    stack_create(&P, ctx, &pc);
    /* A few SGD steps first: at step 0 both quantize the same init with scale
     * 1 and agree exactly; later the weight scales are set at different
     * times (forward cast against post-optimizer write), as in TE. */
    for (int step = 0; step < 4; step++) {
        stack *both[2] = {&H, &P};
        for (int k = 0; k < 2; k++) {
            stack_zero_grad(both[k]);
            stack_data(both[k], step, 0);
            CHECK_OK(ctx, stack_fwd_bwd(both[k], F8_MICROBATCH_FIRST));
            CHECK_OK(ctx, stack_update_scales(both[k]));
            if (step < 3) stack_sgd(both[k], 0.01f);
        }
    }
    const size_t n = (size_t)(hc.T * hc.H);
    float *a = (float *)xmalloc(n * 4), *b = (float *)xmalloc(n * 4);
    double worst;
    float *outs[2][2] = {{H.y, P.y}, {H.dx, P.dx}};
    for (int k = 0; k < 2; k++) {
        f8_ctx_download(ctx, a, outs[k][1], n * 4);
        f8_ctx_download(ctx, b, outs[k][0], n * 4);
        CHECK(allclose(a, b, n, 0.125, 0.0675, &worst), "fp8 weights vs hp: %s worst ratio %g", k ? "dx" : "y", worst);
    }
    double worst_all = 0;
    for (int i = 0; i < STACK_NPARAM; i++) {
        f8_tensor gh, gp;
        stack_param(&H, i, 1, &gh);
        stack_param(&P, i, 1, &gp);
        size_t m = (size_t)(gh.rows * gh.cols);
        float *x = (float *)xmalloc(m * 4), *y = (float *)xmalloc(m * 4);
        f8_ctx_download(ctx, x, gp.data, m * 4);
        f8_ctx_download(ctx, y, gh.data, m * 4);
        CHECK(allclose(x, y, m, 0.125, 0.0675, &worst), "fp8 weights vs hp: gradient of param %d worst ratio %g", i,
              worst);
        if (worst > worst_all) worst_all = worst;
        free(x);
        free(y);
    }
    printf("  fp8 weights vs hp after 3 SGD steps: worst |diff|/(atol + rtol|ref|) over gradients %.3g\n", worst_all);
    CHECK(worst_all > 0, "FP8 primary and high-precision weights should differ a little after scale updates");
    free(a);
    free(b);
    stack_destroy(&H);
    stack_destroy(&P);
}

/* write_weight on an FP8 primary weight: codes = fp8(src · scale) with the
 * slot's current scale, the slot's amax recorded, scale_inv = 1/scale, the
 * transpose invalidated; f8_ctx_update_weight_scales then rolls only the
 * forward slots of FP8-weight modules. Oracle: f8_fp8_from_float on the host. */
static void test_write_weight(f8_ctx *ctx)
{
    f8_linear_config c = f8_linear_config_default(48, 32);
    c.fp8_weights = 1;
    c.max_tokens = 16;
    f8_module *l = NULL, *hp = NULL;
    CHECK_OK(ctx, f8_linear_create(ctx, &c, &l));
    c.fp8_weights = 0;
    CHECK_OK(ctx, f8_linear_create(ctx, &c, &hp));
    if (!l || !hp) return;
    f8_slot ws, hs;
    f8_module_slot(l, F8_DIR_FORWARD, 1, &ws);
    f8_module_slot(hp, F8_DIR_FORWARD, 1, &hs);
    const float scale = 3.0f;
    CHECK_OK(ctx, f8_slot_write(ctx, ws, scale, 1.0f / scale, NULL));
    const int n = 32 * 48;
    float *src = (float *)xmalloc(n * 4);
    test_rng r = {77};
    float amax = 0;
    for (int i = 0; i < n; i++) {
        src[i] = (float)(0.5 * rng_normal(&r));
        if (fabsf(src[i]) > amax) amax = fabsf(src[i]);
    }
    float *dev = stack_buf(ctx, n);
    f8_ctx_upload(ctx, dev, src, n * 4);
    f8_tensor t = f8_tensor_make(dev, F8_DTYPE_FP32, 32, 48);
    CHECK_OK(ctx, f8_module_write_weight(l, F8_PARAM_WEIGHT, &t));
    f8_tensor v;
    CHECK_OK(ctx, f8_module_param(l, F8_PARAM_WEIGHT, 0, &v));
    CHECK(v.dtype == F8_DTYPE_E4M3 && v.scale_inv != NULL, "FP8 primary param view is e4m3 with its scale_inv");
    uint8_t *codes = (uint8_t *)xmalloc(n);
    float sinv = 0, hist[1024];
    f8_ctx_download(ctx, codes, v.data, n);
    f8_ctx_download(ctx, &sinv, v.scale_inv, 4);
    int bad = 0;
    for (int i = 0; i < n; i++) bad += codes[i] != f8_fp8_from_float(src[i] * scale, F8_DTYPE_E4M3);
    CHECK(bad == 0, "write_weight: %d codes differ from fp8(src·scale)", bad);
    CHECK(sinv == 1.0f / scale, "write_weight: scale_inv %g, want %g", (double)sinv, (double)(1.0f / scale));
    CHECK(!f8_qtensor_transpose_valid(f8_module_weight_workspace(l, F8_PARAM_WEIGHT)), "write_weight invalidates the transpose");
    float sc;
    f8_slot_read(ctx, ws, &sc, NULL, hist);
    CHECK(hist[0] == amax, "write_weight records the amax: %g, want %g", (double)hist[0], (double)amax);
    /* the post-optimizer update: the FP8-weight module's weight slot rolls, the
     * high-precision module's slots (given an amax by hand) do not */
    CHECK_OK(ctx, f8_slot_write(ctx, hs, 1.0f, 1.0f, hist));
    CHECK_OK(ctx, f8_ctx_update_weight_scales(ctx));
    float hist2[1024];
    f8_slot_read(ctx, ws, &sc, NULL, hist2);
    CHECK(hist2[0] == 0.0f && sc == f8_scale_from_amax(amax, scale, 448.0f, 0),
          "update_weight_scales: weight slot scale %g (want %g), row 0 %g", (double)sc,
          (double)f8_scale_from_amax(amax, scale, 448.0f, 0), (double)hist2[0]);
    f8_slot_read(ctx, hs, &sc, NULL, hist2);
    CHECK(hist2[0] == amax && sc == 1.0f, "update_weight_scales left the high-precision module alone");
    /* bad input changes nothing */
    f8_tensor wrong = f8_tensor_make(dev, F8_DTYPE_FP32, 48, 32);
    CHECK_STATUS(ctx, f8_module_write_weight(l, F8_PARAM_WEIGHT, &wrong), F8_ERR_SHAPE);
    f8_linear_config bad_cfg = f8_linear_config_default(8, 8);
    bad_cfg.fp8 = 0;
    bad_cfg.fp8_weights = 1;
    f8_module *none = NULL;
    CHECK_STATUS(ctx, f8_linear_create(ctx, &bad_cfg, &none), F8_ERR_INVALID_ARGUMENT);
    free(src);
    free(codes);
    f8_ctx_free(ctx, dev);
    f8_module_destroy(l);
    f8_module_destroy(hp);
}

/* Memory: training with caching holds 2 bytes of workspace per weight
 * element (data + transpose, plus the 256-byte scale_inv block and padding),
 * inference 1 (no transpose allocated); FP8 primary weights report their
 * data as parameters; after the first step no step allocates. */
static void test_memory(f8_ctx *ctx)
{
    const int64_t H = 256, F = 512, T = 64;
    f8_layernorm_mlp_config c = f8_layernorm_mlp_config_default(H, F);
    c.max_tokens = T;
    f8_module *m = NULL;
    CHECK_OK(ctx, f8_layernorm_mlp_create(ctx, &c, &m));
    if (!m) return;
    const size_t P = (size_t)(2 * H * F); /* fc1 [F, H] + fc2 [H, F] */
    f8_memory_report rep;
    CHECK_OK(ctx, f8_module_memory(m, &rep));
    CHECK(rep.bytes[F8_MEM_WORKSPACE_TRANSPOSE] == 0, "no transpose before a training step: %zu",
          rep.bytes[F8_MEM_WORKSPACE_TRANSPOSE]);
    CHECK(rep.bytes[F8_MEM_WORKSPACE_DATA] >= P && rep.bytes[F8_MEM_WORKSPACE_DATA] <= P + 2 * 512,
          "workspace data %zu for %zu elements", rep.bytes[F8_MEM_WORKSPACE_DATA], P);
    CHECK(rep.bytes[F8_MEM_PARAMETERS] >= 4 * P && rep.bytes[F8_MEM_GRADIENTS] >= 4 * P, "fp32 params and grads");
    const int L = f8_ctx_recipe(ctx)->amax_history_len;
    CHECK(rep.bytes[F8_MEM_SCALING_STATE] == (size_t)10 * (L + 2) * 4, "10 slots of scaling state");
    size_t sum = 0;
    for (int k = 0; k < F8_MEM_COUNT; k++) sum += rep.bytes[k];
    CHECK(sum == rep.total, "total is the sum of the categories");

    float *x = stack_buf(ctx, (size_t)(T * H)), *y = stack_buf(ctx, (size_t)(T * H));
    f8_ctx_upload(ctx, x, x, 0);
    f8_tensor xt = f8_tensor_make(x, F8_DTYPE_FP32, T, H), yt = f8_tensor_make(y, F8_DTYPE_FP32, T, H);
    float *host = (float *)xmalloc((size_t)(T * H) * 4);
    for (int64_t i = 0; i < T * H; i++) host[i] = (float)((i % 17) - 8) * 0.125f;
    f8_ctx_upload(ctx, x, host, (size_t)(T * H) * 4);
    /* inference: still no transpose */
    CHECK_OK(ctx, f8_module_forward(m, &xt, &yt, F8_MICROBATCH_FIRST, NULL));
    CHECK_OK(ctx, f8_module_memory(m, &rep));
    CHECK(rep.bytes[F8_MEM_WORKSPACE_TRANSPOSE] == 0, "inference allocates no transpose: %zu",
          rep.bytes[F8_MEM_WORKSPACE_TRANSPOSE]);
    /* training: the first step allocates the transposes, later ones nothing */
    f8_saved *s = NULL;
    CHECK_OK(ctx, f8_module_saved_create(m, &s));
    f8_ctx_counters c0, c1;
    for (int step = 0; step < 4; step++) {
        if (step == 1) f8_ctx_counters_read(ctx, &c0);
        for (int mb = 0; mb < 2; mb++) {
            CHECK_OK(ctx, f8_module_forward(m, &xt, &yt, mb ? F8_MICROBATCH_NOT_FIRST : F8_MICROBATCH_FIRST, s));
            CHECK_OK(ctx, f8_module_backward(m, s, &yt, &xt));
        }
        CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD));
        CHECK_OK(ctx, f8_ctx_update_scales(ctx, F8_DIR_BACKWARD));
    }
    f8_ctx_counters_read(ctx, &c1);
    CHECK(c1.allocations == c0.allocations && c1.frees == c0.frees, "steps 2-4 allocated %llu, freed %llu",
          (unsigned long long)(c1.allocations - c0.allocations), (unsigned long long)(c1.frees - c0.frees));
    CHECK_OK(ctx, f8_module_memory(m, &rep));
    CHECK(rep.bytes[F8_MEM_WORKSPACE_TRANSPOSE] == P, "training holds the transposes: %zu, want %zu",
          rep.bytes[F8_MEM_WORKSPACE_TRANSPOSE], P);
    const size_t ws = rep.bytes[F8_MEM_WORKSPACE_DATA] + rep.bytes[F8_MEM_WORKSPACE_TRANSPOSE];
    CHECK(ws >= 2 * P && ws <= 2 * P + 2 * 512, "training with caching: %zu bytes of workspace for %zu elements", ws, P);
    CHECK(rep.bytes[F8_MEM_SAVED_ACTIVATIONS] > 0, "the saved-state object is reported");
    printf("  memory report of LayerNormMLP(H %lld, F %lld, T %lld), training:", (long long)H, (long long)F, (long long)T);
    for (int k = 0; k < F8_MEM_COUNT; k++) printf(" %s %zu", f8_mem_category_name((f8_mem_category)k), rep.bytes[k]);
    printf(" total %zu\n", rep.total);
    f8_memory_report ctx_rep;
    CHECK_OK(ctx, f8_ctx_memory(ctx, &ctx_rep));
    CHECK(ctx_rep.total >= rep.total - rep.bytes[F8_MEM_SCALING_STATE], "the ctx holds at least the module");
    f8_saved_destroy(s);
    CHECK_OK(ctx, f8_module_memory(m, &rep));
    CHECK(rep.bytes[F8_MEM_SAVED_ACTIVATIONS] == 0, "destroying the saved state returns its bytes");

    /* FP8 primary weights: the FP8 data is the parameter; no FP32 copy */
    c.fp8_weights = 1;
    f8_module *p = NULL;
    CHECK_OK(ctx, f8_layernorm_mlp_create(ctx, &c, &p));
    if (p) {
        CHECK_OK(ctx, f8_module_memory(p, &rep));
        CHECK(rep.bytes[F8_MEM_WORKSPACE_DATA] == 0, "an FP8 primary weight has no separate workspace");
        CHECK(rep.bytes[F8_MEM_PARAMETERS] < P + 4 * (size_t)(4 * H + F) + 4096,
              "FP8 primary: parameters %zu bytes, about 1 per weight element", rep.bytes[F8_MEM_PARAMETERS]);
        f8_module_destroy(p);
    }
    free(host);
    f8_ctx_free(ctx, x);
    f8_ctx_free(ctx, y);
    f8_module_destroy(m);
}

static uint64_t launches(f8_ctx *ctx)
{
    f8_ctx_counters k;
    f8_ctx_counters_read(ctx, &k);
    return k.launches;
}

/* Work items each module call issues (f8_ctx_counters.launches), for
 * microbatch FIRST, NOT_FIRST and NONE. On the CPU a work item is one backend
 * op, and the counts are exact, derived from the data flow:
 *   Linear fwd     weight cast+transpose (FIRST/NONE only), input cast, GEMM
 *   LNLinear fwd   weight cast (FIRST/NONE), norm→FP8, GEMM
 *   LNMLP fwd      2 weight casts (FIRST/NONE), norm→FP8, GEMM1, act→FP8, GEMM2
 *   Linear bwd     dy cast+transpose+dbias, dgrad, wgrad
 *   LNLinear bwd   + the norm output's transpose and the norm backward
 *   LNMLP bwd      dy cast, fc2 dgrad, fc2 wgrad, fused d-act cast, fc1 dgrad,
 *                  fc1 wgrad (after norm transpose), norm bwd (FP8: the forward's
 *                  activation op writes the transposed codes fc2's wgrad reads,
 *                  so the backward has no activation transpose: 8, not 9)
 *   FP8 off        GEMMs (bias folded in), norm and act ops; bgrad is a GEMM.
 * FP8 primary weights cast nothing; FIRST fills the transpose once.
 * On the GPU an op may be 2 launches (a bias epilogue, a dbias reduction),
 * so there it checks that caching removes exactly the weight casts, prints
 * the counts, and bounds them. */
static void test_launch_counts(f8_ctx *ctx, int exact)
{
    static const int want[3][3][6] = {
        /* lin fwd, lnl fwd, mlp fwd, mlp bwd, lnl bwd, lin bwd */
        {{3, 3, 6, 8, 5, 3}, {2, 2, 4, 8, 5, 3}, {3, 3, 6, 8, 5, 3}}, /* FP8, master weights */
        {{3, 3, 6, 8, 5, 3}, {2, 2, 4, 8, 5, 3}, {2, 2, 4, 8, 5, 3}}, /* FP8 primary weights */
        {{1, 2, 4, 8, 4, 3}, {1, 2, 4, 8, 4, 3}, {1, 2, 4, 8, 4, 3}}, /* FP8 off */
    };
    for (int v = 0; v < 3; v++) {
        stack_cfg c = small_cfg(v < 2, v == 1);
        stack s;
        stack_create(&s, ctx, &c);
        stack_data(&s, 0, 0);
        f8_tensor x = stack_t(&s, s.x), h0 = stack_t(&s, s.h0), h1 = stack_t(&s, s.h1), y = stack_t(&s, s.y);
        f8_tensor dy = stack_t(&s, s.dy), dh1 = stack_t(&s, s.dh1), dh0 = stack_t(&s, s.dh0), dx = stack_t(&s, s.dx);
        uint64_t got[3][6];
        for (int mb = 0; mb < 3; mb++) {
            f8_microbatch m = mb == 0 ? F8_MICROBATCH_FIRST : mb == 1 ? F8_MICROBATCH_NOT_FIRST : F8_MICROBATCH_NONE;
            uint64_t t[7];
            t[0] = launches(ctx);
            CHECK_OK(ctx, f8_module_forward(s.lin, &x, &h0, m, s.s0));
            t[1] = launches(ctx);
            CHECK_OK(ctx, f8_layernorm_linear_forward(s.lnl, &h0, &h1, NULL, m, s.s1));
            t[2] = launches(ctx);
            CHECK_OK(ctx, f8_module_forward(s.mlp, &h1, &y, m, s.s2));
            t[3] = launches(ctx);
            CHECK_OK(ctx, f8_module_backward(s.mlp, s.s2, &dy, &dh1));
            t[4] = launches(ctx);
            CHECK_OK(ctx, f8_layernorm_linear_backward(s.lnl, s.s1, &dh1, NULL, &dh0));
            t[5] = launches(ctx);
            CHECK_OK(ctx, f8_module_backward(s.lin, s.s0, &dh0, &dx));
            t[6] = launches(ctx);
            for (int k = 0; k < 6; k++) got[mb][k] = t[k + 1] - t[k];
            printf("  launches (%s, %s): fwd lin %llu lnl %llu mlp %llu | bwd mlp %llu lnl %llu lin %llu\n",
                   v == 0 ? "fp8" : v == 1 ? "fp8 weights" : "fp8 off", mb == 0 ? "FIRST" : mb == 1 ? "NOT_FIRST" : "NONE",
                   (unsigned long long)got[mb][0], (unsigned long long)got[mb][1], (unsigned long long)got[mb][2],
                   (unsigned long long)got[mb][3], (unsigned long long)got[mb][4], (unsigned long long)got[mb][5]);
        }
        for (int mb = 0; mb < 3; mb++)
            for (int k = 0; k < 6; k++) {
                if (exact)
                    CHECK(got[mb][k] == (uint64_t)want[v][mb][k], "variant %d microbatch %d call %d: %llu launches, want %d",
                          v, mb, k, (unsigned long long)got[mb][k], want[v][mb][k]);
                else
                    CHECK(got[mb][k] >= (uint64_t)want[v][mb][k] && got[mb][k] <= 2 * (uint64_t)want[v][mb][k],
                          "variant %d microbatch %d call %d: %llu launches, expected %d to %d", v, mb, k,
                          (unsigned long long)got[mb][k], want[v][mb][k], 2 * want[v][mb][k]);
            }
        if (v == 0) {
            /* a cached weight removes exactly its cast: one cast+transpose for
             * Linear/LNLinear, two for LNMLP */
            f8_qtensor *q = NULL;
            CHECK_OK(ctx, f8_qtensor_create(ctx, F8_DTYPE_E4M3, c.H, c.H, &q));
            f8_slot sl;
            f8_module_slot(s.lin, F8_DIR_FORWARD, 0, &sl);
            f8_tensor src = f8_tensor_make(s.x, F8_DTYPE_FP32, c.H, c.H);
            CHECK_OK(ctx, f8_qtensor_quantize(q, &src, sl, 1, NULL)); /* allocates the transpose */
            uint64_t a = launches(ctx);
            CHECK_OK(ctx, f8_qtensor_quantize(q, &src, sl, 1, NULL));
            const uint64_t cast = launches(ctx) - a;
            f8_qtensor_destroy(q);
            CHECK(got[0][0] - got[1][0] == cast && got[0][1] - got[1][1] == cast && got[0][2] - got[1][2] == 2 * cast,
                  "caching the weight saves exactly its casts (%llu launches each)", (unsigned long long)cast);
        }
        stack_destroy(&s);
    }
}

#endif /* F8_TESTS_STACK_TESTS_H */
