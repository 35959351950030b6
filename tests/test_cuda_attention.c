/*
 * test_cuda_attention.c — f8_attention on the GPU against the CPU backend
 * (the oracle, itself checked against FP64 in test_attention.c) on the same
 * inputs, FP32 and BF16:
 *  - y and dq, dk, dv over odd and prime shapes (S = 1, 7, 13, 33, head_dim
 *    1, 3, 5: the fallback GEMM and the narrow permutes) and model shapes
 *    (12 × 64 and 16 × 128 heads, S up to 1024), with and without a saved
 *    state (the in-place inference softmax);
 *  - bitwise: a second run, the causal mask (future tokens change no earlier
 *    output), a graph capture replayed over new inputs against the eager
 *    calls;
 *  - launch counts (forward 5, backward 8), no backend allocation per call,
 *    zero tokens.
 * Tolerances, per element, against the CPU: |gpu - cpu| <= t·(rms(cpu) +
 * |cpu|) with t = 1e-4 for FP32 (FP32 GEMM sums in another order, expf's
 * last bits) and t = 2e-2 for BF16 (P, y, dS and the gradients are stored in
 * BF16 by both backends; an FP32 value near a rounding boundary can land one
 * BF16 ulp, 2^-8, apart). F8_TEST_QUICK leaves out the model shapes. The
 * GPT-2 shape's time per forward + backward is printed (not checked).
 * Without a GPU (or in a CUDA=0 build) the program reports itself skipped.
 */
#include <time.h>

#include "check.h"

enum { CPU = 0, GPU = 1 };

typedef struct shape {
    int64_t B, S, nh, hd;
} shape;

static f8_ctx *g_ctx[2];

static float round_dt(float v, f8_dtype dt) { return dt == F8_DTYPE_BF16 ? f8_bf16_to_float(f8_bf16_from_float(v)) : v; }

static float *rand_vec(test_rng *r, size_t n, double amp, f8_dtype dt)
{
    float *v = (float *)xmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = round_dt((float)(amp * rng_normal(r)), dt);
    return v;
}

/* Backend buffer of n elements of dt from host floats (NULL: 0x5A bytes). */
static void *dev_put(f8_ctx *ctx, const float *v, size_t n, f8_dtype dt)
{
    const size_t es = f8_dtype_size(dt);
    uint8_t *h = (uint8_t *)xmalloc(n * es);
    if (!v) memset(h, 0x5A, n * es);
    for (size_t i = 0; v && i < n; i++) {
        if (dt == F8_DTYPE_BF16) {
            uint16_t b = f8_bf16_from_float(v[i]);
            memcpy(h + 2 * i, &b, 2);
        } else {
            memcpy(h + 4 * i, &v[i], 4);
        }
    }
    void *p = NULL;
    if (f8_ctx_alloc(ctx, n * es, &p) != F8_OK) die("f8_ctx_alloc", ctx);
    if (f8_ctx_upload(ctx, p, h, n * es) != F8_OK) die("f8_ctx_upload", ctx);
    free(h);
    return p;
}

static void dev_get(f8_ctx *ctx, const void *p, size_t n, f8_dtype dt, float *out)
{
    const size_t es = f8_dtype_size(dt);
    uint8_t *h = (uint8_t *)xmalloc(n * es);
    CHECK_OK(ctx, f8_ctx_download(ctx, h, p, n * es));
    for (size_t i = 0; i < n; i++) {
        if (dt == F8_DTYPE_BF16) {
            uint16_t b;
            memcpy(&b, h + 2 * i, 2);
            out[i] = f8_bf16_to_float(b);
        } else {
            memcpy(&out[i], h + 4 * i, 4);
        }
    }
    free(h);
}

static uint64_t counter(f8_ctx *ctx, int alloc)
{
    f8_ctx_counters c;
    memset(&c, 0, sizeof c);
    f8_ctx_counters_read(ctx, &c);
    return alloc ? c.allocations : c.launches;
}

/* One attention object with its buffers on one ctx. */
typedef struct rig {
    f8_ctx *ctx;
    shape sh;
    f8_dtype dt;
    f8_attention *a;
    f8_attention_saved *s;
    void *qkv, *dy, *y, *dqkv;
} rig;

static void rig_new(rig *g, f8_ctx *ctx, shape sh, f8_dtype dt, const float *qkv, const float *dy)
{
    const size_t T = (size_t)(sh.B * sh.S), C = (size_t)(sh.nh * sh.hd);
    memset(g, 0, sizeof *g);
    g->ctx = ctx;
    g->sh = sh;
    g->dt = dt;
    f8_attention_config cfg = f8_attention_config_default(sh.nh, sh.hd, sh.B, sh.S);
    cfg.dtype = dt;
    if (f8_attention_create(ctx, &cfg, &g->a) != F8_OK) die("f8_attention_create", ctx);
    if (f8_attention_saved_create(g->a, &g->s) != F8_OK) die("f8_attention_saved_create", ctx);
    g->qkv = dev_put(ctx, qkv, T * 3 * C, dt);
    g->dy = dev_put(ctx, dy, T * C, dt);
    g->y = dev_put(ctx, NULL, T * C, dt);
    g->dqkv = dev_put(ctx, NULL, T * 3 * C, dt);
}

static void rig_free(rig *g)
{
    f8_ctx_free(g->ctx, g->qkv);
    f8_ctx_free(g->ctx, g->dy);
    f8_ctx_free(g->ctx, g->y);
    f8_ctx_free(g->ctx, g->dqkv);
    f8_attention_saved_destroy(g->s);
    f8_attention_destroy(g->a);
}

static f8_tensor rig_t(rig *g, void *p, int wide)
{
    const int64_t C = g->sh.nh * g->sh.hd;
    return f8_tensor_make(p, g->dt, g->sh.B * g->sh.S, wide ? 3 * C : C);
}

/* Forward (saved or not) and, with saved, backward; results to host floats. */
static void rig_run(rig *g, int saved, float *y, float *dqkv)
{
    const size_t T = (size_t)(g->sh.B * g->sh.S), C = (size_t)(g->sh.nh * g->sh.hd);
    f8_tensor tq = rig_t(g, g->qkv, 1), ty = rig_t(g, g->y, 0), tdy = rig_t(g, g->dy, 0), tg = rig_t(g, g->dqkv, 1);
    CHECK_OK(g->ctx, f8_attention_forward(g->a, &tq, g->sh.B, g->sh.S, &ty, saved ? g->s : NULL));
    if (saved) CHECK_OK(g->ctx, f8_attention_backward(g->a, g->s, &tdy, &tg));
    if (y) dev_get(g->ctx, g->y, T * C, g->dt, y);
    if (saved && dqkv) dev_get(g->ctx, g->dqkv, T * 3 * C, g->dt, dqkv);
}

/* Per-element check of n values against the CPU's: |x - r| <= t·(rms(r) + |r|).
 * Returns the worst |x - r| / (rms + |r|). */
static double compare(const char *what, const float *x, const float *r, size_t n, double t)
{
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)r[i] * r[i];
    const double rms = n ? sqrt(ss / (double)n) : 0;
    double worst = 0;
    size_t bad = 0, first = n;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)x[i] - r[i]) / (rms + fabs((double)r[i]) + 1e-30);
        if (!(e <= t)) {
            if (!bad) first = i;
            bad++;
        }
        if (e > worst || e != e) worst = e;
    }
    CHECK(bad == 0, "%s: %zu of %zu elements off (first %zu: gpu %.7g, cpu %.7g, rms %.3g), worst %.3g > %.3g", what, bad, n,
          first, first < n ? x[first] : 0.0, first < n ? r[first] : 0.0, rms, worst, t);
    return worst;
}

static int same_bits(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof *a) == 0; }

/* GPU vs CPU on one shape, both dtypes' tolerance as the header says; plus
 * a second GPU run bitwise and the inference forward. */
static void test_shape(shape sh, f8_dtype dt, double amp, double *worst)
{
    const size_t T = (size_t)(sh.B * sh.S), C = (size_t)(sh.nh * sh.hd);
    const double t = dt == F8_DTYPE_FP32 ? 1e-4 : 2e-2;
    test_rng r = {(uint64_t)(sh.B * 1000003 + sh.S * 1009 + sh.nh * 31 + sh.hd + dt)};
    float *qkv = rand_vec(&r, T * 3 * C, amp, dt), *dy = rand_vec(&r, T * C, 1.0, dt);
    float *y[2], *g[2], *y2 = (float *)xmalloc(T * C * 4), *g2 = (float *)xmalloc(T * 3 * C * 4);
    rig rg[2];
    for (int i = 0; i < 2; i++) {
        y[i] = (float *)xmalloc(T * C * 4);
        g[i] = (float *)xmalloc(T * 3 * C * 4);
        rig_new(&rg[i], g_ctx[i], sh, dt, qkv, dy);
        rig_run(&rg[i], 1, y[i], g[i]);
    }
    char what[160];
    snprintf(what, sizeof what, "%s B%lld S%lld nh%lld hd%lld: y", f8_dtype_name(dt), (long long)sh.B, (long long)sh.S,
             (long long)sh.nh, (long long)sh.hd);
    double w = compare(what, y[GPU], y[CPU], T * C, t);
    if (w > *worst) *worst = w;
    /* dq, dk, dv column thirds of each row, compared as one array */
    what[strlen(what) - 1] = '\0';
    strcat(what, "dqkv");
    w = compare(what, g[GPU], g[CPU], T * 3 * C, t);
    if (w > *worst) *worst = w;

    rig_run(&rg[GPU], 1, y2, g2);
    CHECK(same_bits(y2, y[GPU], T * C) && same_bits(g2, g[GPU], T * 3 * C),
          "%s B%lld S%lld nh%lld hd%lld: a second GPU run is not bitwise the first", f8_dtype_name(dt), (long long)sh.B,
          (long long)sh.S, (long long)sh.nh, (long long)sh.hd);
    /* Inference: P in place over the scores; another GEMM plan (ld 2S for BF16), so a tolerance */
    rig_run(&rg[GPU], 0, y2, NULL);
    snprintf(what, sizeof what, "%s B%lld S%lld nh%lld hd%lld: y without saved state", f8_dtype_name(dt), (long long)sh.B,
             (long long)sh.S, (long long)sh.nh, (long long)sh.hd);
    compare(what, y2, y[CPU], T * C, t);
    for (int i = 0; i < 2; i++) {
        rig_free(&rg[i]);
        free(y[i]);
        free(g[i]);
    }
    free(qkv), free(dy), free(y2), free(g2);
}

/* Future tokens change no earlier output, bitwise (same shape, same GEMM
 * algorithms; masked P entries are exact zeros). */
static void test_causal(f8_dtype dt)
{
    const shape sh = {2, 40, 3, 16};
    const size_t T = 80, C = 48, S = 40, b = 1, i0 = 17;
    test_rng r = {4242};
    float *qkv = rand_vec(&r, T * 3 * C, 1.0, dt), *dy = rand_vec(&r, T * C, 1.0, dt);
    float *y0 = (float *)xmalloc(T * C * 4), *y1 = (float *)xmalloc(T * C * 4);
    float *g0 = (float *)xmalloc(T * 3 * C * 4), *g1 = (float *)xmalloc(T * 3 * C * 4);
    rig g;
    rig_new(&g, g_ctx[GPU], sh, dt, qkv, dy);
    rig_run(&g, 1, y0, g0);
    for (size_t i = i0 + 1; i < S; i++) {
        for (size_t c = 0; c < 3 * C; c++) qkv[(b * S + i) * 3 * C + c] = round_dt((float)rng_normal(&r), dt);
        for (size_t c = 0; c < C; c++) dy[(b * S + i) * C + c] = round_dt((float)rng_normal(&r), dt);
    }
    f8_ctx_free(g.ctx, g.qkv);
    f8_ctx_free(g.ctx, g.dy);
    g.qkv = dev_put(g.ctx, qkv, T * 3 * C, dt);
    g.dy = dev_put(g.ctx, dy, T * C, dt);
    rig_run(&g, 1, y1, g1);
    CHECK(same_bits(y0, y1, (b * S + i0 + 1) * C), "%s causal: y of earlier rows or sequences changed", f8_dtype_name(dt));
    int dq_same = 1;
    for (size_t i = 0; i <= i0; i++) dq_same &= same_bits(g0 + (b * S + i) * 3 * C, g1 + (b * S + i) * 3 * C, C);
    CHECK(dq_same, "%s causal: dq of rows <= %zu changed by later tokens", f8_dtype_name(dt), i0);
    rig_free(&g);
    free(qkv), free(dy), free(y0), free(y1), free(g0), free(g1);
}

/* Launch counts, allocations, zero tokens, and a graph replay vs eager. */
static void test_counts_and_graph(f8_dtype dt)
{
    const shape sh = {2, 24, 4, 32};
    const size_t T = 48, C = 128;
    test_rng r = {777};
    float *q0 = rand_vec(&r, T * 3 * C, 1.0, dt), *q1 = rand_vec(&r, T * 3 * C, 1.0, dt), *dy = rand_vec(&r, T * C, 1.0, dt);
    float *ye = (float *)xmalloc(T * C * 4), *ge = (float *)xmalloc(T * 3 * C * 4);
    float *yr = (float *)xmalloc(T * C * 4), *gr = (float *)xmalloc(T * 3 * C * 4);
    rig g;
    f8_ctx *ctx = g_ctx[GPU];
    rig_new(&g, ctx, sh, dt, q0, dy);
    rig_run(&g, 1, NULL, NULL); /* warm-up: plans */
    f8_tensor tq = rig_t(&g, g.qkv, 1), ty = rig_t(&g, g.y, 0), tdy = rig_t(&g, g.dy, 0), tg = rig_t(&g, g.dqkv, 1);
    const uint64_t l0 = counter(ctx, 0), a0 = counter(ctx, 1);
    CHECK_OK(ctx, f8_attention_forward(g.a, &tq, sh.B, sh.S, &ty, g.s));
    const uint64_t l1 = counter(ctx, 0);
    CHECK_OK(ctx, f8_attention_backward(g.a, g.s, &tdy, &tg));
    CHECK(l1 - l0 == 5, "%s: forward counted %llu launches, expected 5", f8_dtype_name(dt), (unsigned long long)(l1 - l0));
    CHECK(counter(ctx, 0) - l1 == 8, "%s: backward counted %llu launches, expected 8", f8_dtype_name(dt),
          (unsigned long long)(counter(ctx, 0) - l1));
    CHECK(counter(ctx, 1) == a0, "%s: forward/backward allocated backend memory", f8_dtype_name(dt));
    f8_tensor e3 = f8_tensor_make(NULL, dt, 0, 3 * (int64_t)C), e1 = f8_tensor_make(NULL, dt, 0, (int64_t)C);
    const uint64_t l2 = counter(ctx, 0);
    CHECK_OK(ctx, f8_attention_forward(g.a, &e3, 0, sh.S, &e1, NULL));
    CHECK(counter(ctx, 0) == l2, "%s: a zero-token forward issued work", f8_dtype_name(dt));

    /* eager on q1 */
    f8_ctx_free(ctx, g.qkv);
    g.qkv = dev_put(ctx, q1, T * 3 * C, dt);
    tq = rig_t(&g, g.qkv, 1);
    rig_run(&g, 1, ye, ge);
    /* capture over q0, replay after copying q1 in: the replay reads the buffers of its moment */
    const size_t es = f8_dtype_size(dt);
    void *src0 = dev_put(ctx, q0, T * 3 * C, dt), *src1 = dev_put(ctx, q1, T * 3 * C, dt);
    void *poison = dev_put(ctx, NULL, T * 3 * C, dt);
    CHECK_OK(ctx, f8_ctx_copy(ctx, g.qkv, src0, T * 3 * C * es));
    f8_graph *graph = NULL;
    CHECK_OK(ctx, f8_graph_begin(ctx));
    CHECK_OK(ctx, f8_attention_forward(g.a, &tq, sh.B, sh.S, &ty, g.s));
    CHECK_OK(ctx, f8_attention_backward(g.a, g.s, &tdy, &tg));
    f8_status st = f8_graph_end(ctx, &graph);
    CHECK(st == F8_OK, "%s graph: end -> %s: %s", f8_dtype_name(dt), f8_status_string(st), f8_ctx_last_error(ctx));
    if (graph) {
        CHECK_OK(ctx, f8_ctx_copy(ctx, g.qkv, src1, T * 3 * C * es));
        CHECK_OK(ctx, f8_ctx_copy(ctx, g.y, poison, T * C * es));
        CHECK_OK(ctx, f8_ctx_copy(ctx, g.dqkv, poison, T * 3 * C * es));
        const uint64_t l3 = counter(ctx, 0);
        CHECK_OK(ctx, f8_graph_replay(graph));
        CHECK(counter(ctx, 0) - l3 == 1, "%s graph: a replay counted %llu launches, expected 1", f8_dtype_name(dt),
              (unsigned long long)(counter(ctx, 0) - l3));
        dev_get(ctx, g.y, T * C, dt, yr);
        dev_get(ctx, g.dqkv, T * 3 * C, dt, gr);
        CHECK(same_bits(yr, ye, T * C), "%s graph: replayed y is not bitwise the eager y", f8_dtype_name(dt));
        CHECK(same_bits(gr, ge, T * 3 * C), "%s graph: replayed dqkv is not bitwise the eager dqkv", f8_dtype_name(dt));
        f8_graph_destroy(graph);
    }
    f8_ctx_free(ctx, src0);
    f8_ctx_free(ctx, src1);
    f8_ctx_free(ctx, poison);
    rig_free(&g);
    free(q0), free(q1), free(dy), free(ye), free(ge), free(yr), free(gr);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* GPT-2 124M's attention at batch 8: time per forward + backward (BF16). */
static void time_gpt2(void)
{
    const shape sh = {8, 1024, 12, 64};
    const size_t T = 8192, C = 768;
    test_rng r = {1};
    float *qkv = rand_vec(&r, T * 3 * C, 1.0, F8_DTYPE_BF16), *dy = rand_vec(&r, T * C, 1.0, F8_DTYPE_BF16);
    rig g;
    rig_new(&g, g_ctx[GPU], sh, F8_DTYPE_BF16, qkv, dy);
    rig_run(&g, 1, NULL, NULL);
    f8_tensor tq = rig_t(&g, g.qkv, 1), ty = rig_t(&g, g.y, 0), tdy = rig_t(&g, g.dy, 0), tg = rig_t(&g, g.dqkv, 1);
    CHECK_OK(g.ctx, f8_ctx_synchronize(g.ctx));
    const int reps = 10;
    double t0 = now_s();
    for (int i = 0; i < reps; i++) CHECK_OK(g.ctx, f8_attention_forward(g.a, &tq, sh.B, sh.S, &ty, g.s));
    CHECK_OK(g.ctx, f8_ctx_synchronize(g.ctx));
    double t1 = now_s();
    for (int i = 0; i < reps; i++) CHECK_OK(g.ctx, f8_attention_backward(g.a, g.s, &tdy, &tg));
    CHECK_OK(g.ctx, f8_ctx_synchronize(g.ctx));
    double t2 = now_s();
    /* causal FLOPs: 2 GEMMs forward, 4 backward, each 2·B·nh·S²·hd/2 */
    const double flop = 2.0 * 8 * 12 * 1024.0 * 1024.0 * 64 / 2;
    printf("  GPT-2 attention B8 S1024 12x64 bf16: forward %.3f ms (%.0f causal TFLOP/s), backward %.3f ms (%.0f)\n",
           1e3 * (t1 - t0) / reps, 2 * flop * reps / (t1 - t0) * 1e-12, 1e3 * (t2 - t1) / reps,
           4 * flop * reps / (t2 - t1) * 1e-12);
    rig_free(&g);
    free(qkv), free(dy);
}

int main(void)
{
    const int rc = test_ctx_pair("test_cuda_attention", NULL, g_ctx);
    if (rc) return rc;
    const int quick = getenv("F8_TEST_QUICK") != NULL;
    static const shape small[] = {{1, 1, 1, 1}, {3, 1, 2, 5},  {1, 7, 1, 1},  {2, 7, 3, 5},  {3, 13, 2, 8},
                                  {2, 33, 4, 3}, {1, 64, 2, 64}, {2, 100, 3, 32}, {4, 17, 2, 128}};
    static const shape model[] = {{2, 256, 12, 64}, {1, 1024, 4, 64}, {1, 256, 16, 128}};
    for (int k = 0; k < 2; k++) {
        const f8_dtype dt = k ? F8_DTYPE_BF16 : F8_DTYPE_FP32;
        double worst = 0;
        for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) {
            test_shape(small[i], dt, 1.0, &worst);
            test_shape(small[i], dt, 2.5, &worst);
        }
        for (size_t i = 0; !quick && i < sizeof model / sizeof model[0]; i++) test_shape(model[i], dt, 1.0, &worst);
        printf("  %s GPU vs CPU: worst |gpu - cpu| / (rms + |cpu|) = %.3g\n", f8_dtype_name(dt), worst);
        test_causal(dt);
        test_counts_and_graph(dt);
    }
    if (!quick) time_gpt2();
    f8_ctx_destroy(g_ctx[CPU]);
    f8_ctx_destroy(g_ctx[GPU]);
    return test_finish("test_cuda_attention");
}
