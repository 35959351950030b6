/*
 * graph_tests.h — f8 graphs (f8_graph_begin/end/replay/destroy) tested on one
 * backend; test_graph.c runs them on the CPU, test_cuda_graph.c on the GPU.
 *
 *  - edges: end without begin, begin twice, an empty graph, NULL arguments,
 *    replay inside a capture, a ctx destroyed while capturing;
 *  - replay against eager: a quantize + f8_module forward/backward + both
 *    scale updates, captured once and replayed over new inputs, bitwise equal
 *    to the same calls run eagerly on a second ctx built the same way (every
 *    output, gradient, workspace and slot), the capture itself issuing no
 *    work, and the replayed cast checked against f8_fp8_from_float with the
 *    slot's scale of that moment (the replay reads device scales, not the
 *    capture's);
 *  - the noop flag under replay: 1 leaves the weight workspace (data,
 *    transpose, scale_inv, the slot's amax) bitwise as it was, 0 re-casts it
 *    from the new master weight; a flag set inside the capture is replayed;
 *  - refused calls: each host-talking call made during a capture returns
 *    F8_ERR_STATE, spoils the capture (end fails with it, no graph), leaves
 *    every buffer as before and the ctx usable;
 *  - launch counts of single calls, exact, and of replays (CUDA: 1).
 */
#ifndef F8_TESTS_GRAPH_TESTS_H
#define F8_TESTS_GRAPH_TESTS_H

#include "check.h"

#define G_HIST 4 /* amax history rows: short, so rolls show */

static f8_ctx *g_ctx(f8_backend be)
{
    f8_recipe r = f8_recipe_default();
    r.amax_history_len = G_HIST;
    char why[256] = "";
    f8_ctx *ctx = test_ctx(be, &r, why);
    if (!ctx) {
        fprintf(stderr, "cannot create a ctx: %s\n", why);
        exit(1);
    }
    return ctx;
}

static uint64_t g_launches(const f8_ctx *ctx)
{
    f8_ctx_counters c;
    memset(&c, 0, sizeof c);
    f8_ctx_counters_read(ctx, &c);
    return c.launches;
}

/* ---- host snapshots of backend state ------------------------------------- */

typedef struct gbuf {
    uint8_t *p;
    size_t n, cap;
} gbuf;

static void *gbuf_tail(gbuf *b, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = 2 * (b->n + n) + 256;
        b->p = (uint8_t *)realloc(b->p, b->cap);
        if (!b->p) die("host realloc", NULL);
    }
    void *t = b->p + b->n;
    b->n += n;
    return t;
}

static void gbuf_download(gbuf *b, f8_ctx *ctx, const void *src, size_t n)
{
    if (n) CHECK_OK(ctx, f8_ctx_download(ctx, gbuf_tail(b, n), src, n));
}

static void gbuf_tensor(gbuf *b, f8_ctx *ctx, const f8_tensor *t)
{
    gbuf_download(b, ctx, t->data, (size_t)(t->rows * t->cols) * f8_dtype_size(t->dtype));
    if (t->scale_inv) gbuf_download(b, ctx, t->scale_inv, sizeof(float));
}

static void gbuf_slot(gbuf *b, f8_ctx *ctx, f8_slot s)
{
    float *f = (float *)gbuf_tail(b, (2 + G_HIST) * sizeof(float));
    CHECK_OK(ctx, f8_slot_read(ctx, s, &f[0], &f[1], &f[2]));
}

static void gbuf_qtensor(gbuf *b, f8_ctx *ctx, const f8_qtensor *q)
{
    f8_tensor v;
    CHECK_OK(ctx, f8_qtensor_data(q, &v));
    gbuf_tensor(b, ctx, &v);
    if (f8_qtensor_transpose_valid(q) && f8_qtensor_transpose_data(q, &v) == F8_OK) gbuf_tensor(b, ctx, &v);
}

/* Both snapshots bitwise equal; names the first differing byte. */
static void gbuf_same(const gbuf *a, const gbuf *b, const char *what)
{
    size_t i = 0;
    if (a->n == b->n)
        while (i < a->n && a->p[i] == b->p[i]) i++;
    CHECK(a->n == b->n && i == a->n, "%s: snapshots differ (%zu vs %zu bytes, first difference at byte %zu)", what,
          a->n, b->n, i);
}

/* ---- the captured sequence -------------------------------------------------- */

/* A quantized tensor with its own slot, and a Linear with its saved state,
 * on one ctx: what the replay-vs-eager test runs. */
typedef struct seq {
    f8_ctx *ctx;
    int fp8;
    f8_dtype adt; /* x, y, dy, dx: FP32 with FP8, else BF16 (= param_dtype) */
    int64_t T, K, N;
    f8_module *lin;
    f8_saved *saved;
    f8_qtensor *q;
    f8_slot qslot;
    void *x, *xq, *y, *dy, *dx; /* backend buffers; xq FP32 [T, K] */
} seq;

static void *g_alloc(f8_ctx *ctx, size_t bytes)
{
    void *p = NULL;
    if (f8_ctx_alloc(ctx, bytes, &p) != F8_OK) die("f8_ctx_alloc", ctx);
    return p;
}

static void seq_create(seq *s, f8_ctx *ctx, int fp8)
{
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    s->fp8 = fp8;
    s->adt = fp8 ? F8_DTYPE_FP32 : F8_DTYPE_BF16;
    s->T = 160; /* more than one 128-row tile: the dbias cast reduces on CUDA */
    s->K = 128;
    s->N = 96;
    f8_linear_config c = f8_linear_config_default(s->K, s->N);
    c.fp8 = fp8;
    c.param_dtype = fp8 ? F8_DTYPE_FP32 : F8_DTYPE_BF16;
    c.max_tokens = s->T;
    c.seed = 11;
    if (f8_linear_create(ctx, &c, &s->lin) != F8_OK) die("f8_linear_create", ctx);
    if (f8_module_saved_create(s->lin, &s->saved) != F8_OK) die("f8_module_saved_create", ctx);
    if (f8_ctx_slots_create(ctx, F8_DIR_FORWARD, 1, &s->qslot) != F8_OK) die("f8_ctx_slots_create", ctx);
    if (f8_qtensor_create(ctx, F8_DTYPE_E4M3, s->T, s->K, &s->q) != F8_OK) die("f8_qtensor_create", ctx);
    const size_t es = f8_dtype_size(s->adt);
    s->x = g_alloc(ctx, (size_t)(s->T * s->K) * es);
    s->xq = g_alloc(ctx, (size_t)(s->T * s->K) * 4);
    s->y = g_alloc(ctx, (size_t)(s->T * s->N) * es);
    s->dy = g_alloc(ctx, (size_t)(s->T * s->N) * es);
    s->dx = g_alloc(ctx, (size_t)(s->T * s->K) * es);
}

static void seq_destroy(seq *s)
{
    f8_ctx_free(s->ctx, s->x);
    f8_ctx_free(s->ctx, s->xq);
    f8_ctx_free(s->ctx, s->y);
    f8_ctx_free(s->ctx, s->dy);
    f8_ctx_free(s->ctx, s->dx);
    f8_qtensor_destroy(s->q);
    f8_saved_destroy(s->saved);
    f8_module_destroy(s->lin);
}

static void upload_values(f8_ctx *ctx, void *dst, f8_dtype dt, const float *v, size_t n)
{
    if (dt == F8_DTYPE_FP32) {
        CHECK_OK(ctx, f8_ctx_upload(ctx, dst, v, n * 4));
        return;
    }
    uint16_t *h = (uint16_t *)xmalloc(n * 2);
    for (size_t i = 0; i < n; i++) h[i] = f8_bf16_from_float(v[i]);
    CHECK_OK(ctx, f8_ctx_upload(ctx, dst, h, n * 2));
    free(h);
}

/* The host inputs of step `step` (the same on every ctx), xq returned. Each
 * step has another magnitude, so amaxes and scales move. */
static float *seq_inputs(seq *s, int step)
{
    const size_t nx = (size_t)(s->T * s->K), ny = (size_t)(s->T * s->N);
    float *x = (float *)xmalloc(nx * 4), *xq = (float *)xmalloc(nx * 4), *dy = (float *)xmalloc(ny * 4);
    test_rng r = {1000u + (uint64_t)step};
    const double mag = 1.0 + 0.75 * step;
    for (size_t i = 0; i < nx; i++) x[i] = (float)(mag * rng_normal(&r));
    for (size_t i = 0; i < nx; i++) xq[i] = (float)(3.0 * mag * rng_normal(&r));
    for (size_t i = 0; i < ny; i++) dy[i] = (float)(0.01 * mag * rng_normal(&r));
    upload_values(s->ctx, s->x, s->adt, x, nx);
    upload_values(s->ctx, s->xq, F8_DTYPE_FP32, xq, nx);
    upload_values(s->ctx, s->dy, s->adt, dy, ny);
    free(x);
    free(dy);
    return xq;
}

/* The sequence: quantize (with transpose), forward, backward, both scale
 * updates. Returns the first failing status. */
static f8_status seq_run(seq *s)
{
    f8_tensor xq = f8_tensor_make(s->xq, F8_DTYPE_FP32, s->T, s->K);
    f8_tensor x = f8_tensor_make(s->x, s->adt, s->T, s->K), y = f8_tensor_make(s->y, s->adt, s->T, s->N);
    f8_tensor dy = f8_tensor_make(s->dy, s->adt, s->T, s->N), dx = f8_tensor_make(s->dx, s->adt, s->T, s->K);
    f8_status st = f8_qtensor_quantize(s->q, &xq, s->qslot, 1, NULL);
    if (st == F8_OK) st = f8_module_forward(s->lin, &x, &y, F8_MICROBATCH_NONE, s->saved);
    if (st == F8_OK) st = f8_module_backward(s->lin, s->saved, &dy, &dx);
    if (st == F8_OK) st = f8_ctx_update_scales(s->ctx, F8_DIR_FORWARD);
    if (st == F8_OK) st = f8_ctx_update_scales(s->ctx, F8_DIR_BACKWARD);
    return st;
}

/* Everything the sequence writes, as host bytes. */
static void seq_snapshot(seq *s, gbuf *b)
{
    f8_ctx *ctx = s->ctx;
    b->n = 0;
    f8_tensor v = f8_tensor_make(s->y, s->adt, s->T, s->N);
    gbuf_tensor(b, ctx, &v);
    v = f8_tensor_make(s->dx, s->adt, s->T, s->K);
    gbuf_tensor(b, ctx, &v);
    CHECK_OK(ctx, f8_module_param(s->lin, F8_PARAM_WEIGHT, 0, &v));
    gbuf_tensor(b, ctx, &v);
    CHECK_OK(ctx, f8_module_param(s->lin, F8_PARAM_WEIGHT, 1, &v));
    gbuf_tensor(b, ctx, &v);
    CHECK_OK(ctx, f8_module_param(s->lin, F8_PARAM_BIAS, 1, &v));
    gbuf_tensor(b, ctx, &v);
    gbuf_qtensor(b, ctx, s->q);
    if (s->fp8) gbuf_qtensor(b, ctx, f8_module_weight_workspace(s->lin, F8_PARAM_WEIGHT));
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < (d ? 2 : 3); i++) {
            f8_slot sl;
            CHECK_OK(ctx, f8_module_slot(s->lin, (f8_direction)d, i, &sl));
            gbuf_slot(b, ctx, sl);
        }
    gbuf_slot(b, ctx, s->qslot);
}

/* ---- tests -------------------------------------------------------------------- */

static void test_edges(f8_backend be)
{
    f8_ctx *ctx = g_ctx(be);
    f8_graph *g = (f8_graph *)&g; /* not NULL: end must clear it */

    CHECK_STATUS(ctx, f8_graph_end(ctx, &g), F8_ERR_STATE);
    CHECK(g == NULL, "end without begin left *graph set");
    CHECK(f8_ctx_capturing(ctx) == 0, "capturing after a failed end");
    CHECK(f8_ctx_capturing(NULL) == 0, "f8_ctx_capturing(NULL)");
    CHECK_STATUS(NULL, f8_graph_begin(NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(NULL, f8_graph_end(NULL, &g), F8_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(NULL, f8_graph_replay(NULL), F8_ERR_INVALID_ARGUMENT);
    f8_graph_destroy(NULL);

    /* Begin twice: refused, the first capture goes on intact. */
    CHECK_OK(ctx, f8_graph_begin(ctx));
    CHECK(f8_ctx_capturing(ctx) == 1, "not capturing after begin");
    CHECK_STATUS(ctx, f8_graph_begin(ctx), F8_ERR_STATE);
    CHECK(f8_ctx_capturing(ctx) == 1, "a second begin ended the capture");
    const uint64_t l0 = g_launches(ctx);
    CHECK_OK(ctx, f8_graph_end(ctx, &g)); /* an empty capture is a graph */
    CHECK(g != NULL && f8_ctx_capturing(ctx) == 0, "empty capture: graph %p, capturing %d", (void *)g,
          f8_ctx_capturing(ctx));
    CHECK_OK(ctx, f8_graph_replay(g));
    CHECK_OK(ctx, f8_graph_replay(g));
    CHECK(g_launches(ctx) == l0, "an empty graph's replays counted %llu launches",
          (unsigned long long)(g_launches(ctx) - l0));

    /* end(ctx, NULL): the capture is abandoned, not left open. */
    CHECK_OK(ctx, f8_graph_begin(ctx));
    CHECK_STATUS(ctx, f8_graph_end(ctx, NULL), F8_ERR_INVALID_ARGUMENT);
    CHECK(f8_ctx_capturing(ctx) == 0, "end(ctx, NULL) left the ctx capturing");

    /* Replay inside a capture: refused and that capture spoiled. */
    CHECK_OK(ctx, f8_graph_begin(ctx));
    CHECK_STATUS(ctx, f8_graph_replay(g), F8_ERR_STATE);
    f8_graph *g2 = NULL;
    CHECK_STATUS(ctx, f8_graph_end(ctx, &g2), F8_ERR_STATE);
    CHECK(g2 == NULL && f8_ctx_capturing(ctx) == 0, "spoiled by a replay: graph %p, capturing %d", (void *)g2,
          f8_ctx_capturing(ctx));
    CHECK_OK(ctx, f8_graph_replay(g)); /* and the graph still works outside */
    f8_graph_destroy(g);

    /* A ctx destroyed in the middle of a capture ends it (no leak, no crash:
     * the sanitizer build checks). */
    float *buf = (float *)g_alloc(ctx, 64);
    CHECK_OK(ctx, f8_graph_begin(ctx));
    CHECK_OK(ctx, f8_ctx_set_noop_flag(ctx, 1.0f));
    CHECK_OK(ctx, f8_ctx_copy(ctx, buf, f8_ctx_noop_flag(ctx), 4));
    f8_ctx_free(ctx, buf); /* deferred to the end of the capture: here, the destroy */
    f8_ctx_destroy(ctx);
}

/* Replay against eager on a second, identical ctx. */
static void test_replay_vs_eager(f8_backend be, int fp8, const char *name)
{
    f8_ctx *ca = g_ctx(be), *cb = g_ctx(be);
    seq A, B;
    seq_create(&A, ca, fp8);
    seq_create(&B, cb, fp8);
    gbuf sa = {0}, sb = {0}, s0 = {0};

    /* Step 0, eagerly on both: plans, lazy transposes, first scales. */
    free(seq_inputs(&A, 0));
    free(seq_inputs(&B, 0));
    CHECK_OK(ca, seq_run(&A));
    CHECK_OK(cb, seq_run(&B));
    seq_snapshot(&A, &sa);
    seq_snapshot(&B, &sb);
    gbuf_same(&sa, &sb, "step 0 (both eager)");

    /* Capture: nothing runs, nothing allocates, nothing is counted. */
    f8_ctx_counters c0, c1;
    f8_ctx_counters_read(ca, &c0);
    f8_graph *g = NULL;
    CHECK_OK(ca, f8_graph_begin(ca));
    CHECK_OK(ca, seq_run(&A));
    CHECK_OK(ca, f8_graph_end(ca, &g));
    f8_ctx_counters_read(ca, &c1);
    CHECK(c1.launches == c0.launches && c1.allocations == c0.allocations,
          "%s: the capture counted %llu launches, %llu allocations", name,
          (unsigned long long)(c1.launches - c0.launches), (unsigned long long)(c1.allocations - c0.allocations));
    seq_snapshot(&A, &s0);
    gbuf_same(&s0, &sa, "the capture changed backend memory");

    for (int step = 1; step <= 3 && g; step++) {
        float *xq = seq_inputs(&A, step);
        free(seq_inputs(&B, step));
        float qscale = 0;
        CHECK_OK(ca, f8_slot_read(ca, A.qslot, &qscale, NULL, NULL));

        const uint64_t la = g_launches(ca), lb = g_launches(cb);
        CHECK_OK(ca, f8_graph_replay(g));
        CHECK_OK(cb, seq_run(&B));
        const uint64_t dla = g_launches(ca) - la, dlb = g_launches(cb) - lb;
        if (be == F8_BACKEND_CUDA)
            CHECK(dla == 1, "%s: a replay counted %llu launches, not 1", name, (unsigned long long)dla);
        else
            CHECK(dla == dlb, "%s: a CPU replay counted %llu ops, the eager calls %llu", name,
                  (unsigned long long)dla, (unsigned long long)dlb);
        if (step == 1)
            printf("  %s: eager sequence %llu launches, replay %llu\n", name, (unsigned long long)dlb,
                   (unsigned long long)dla);

        seq_snapshot(&A, &sa);
        seq_snapshot(&B, &sb);
        char what[96];
        snprintf(what, sizeof what, "%s: step %d replayed vs eager", name, step);
        gbuf_same(&sa, &sb, what);

        /* The replayed cast against the host encoder, with the scale of the
         * moment (the step's scale update ran after it). */
        const size_t n = (size_t)(A.T * A.K);
        uint8_t *codes = (uint8_t *)xmalloc(n);
        f8_tensor v;
        CHECK_OK(ca, f8_qtensor_data(A.q, &v));
        CHECK_OK(ca, f8_ctx_download(ca, codes, v.data, n));
        float sinv = 0;
        CHECK_OK(ca, f8_ctx_download(ca, &sinv, v.scale_inv, 4));
        size_t bad = n;
        for (size_t i = 0; i < n && bad == n; i++)
            if (codes[i] != f8_fp8_from_float(xq[i] * qscale, F8_DTYPE_E4M3)) bad = i;
        CHECK(bad == n, "%s step %d: replayed cast code %zu is 0x%02x, fp8(%g * %g) = 0x%02x", name, step, bad,
              bad < n ? codes[bad] : 0, bad < n ? xq[bad] : 0, qscale,
              bad < n ? f8_fp8_from_float(xq[bad] * qscale, F8_DTYPE_E4M3) : 0);
        CHECK(sinv == 1.0f / qscale, "%s step %d: scale_inv %g, 1/scale %g", name, step, sinv, 1.0f / qscale);
        CHECK(step == 1 || qscale != 1.0f, "%s step %d: the scale never moved", name, step);
        free(codes);
        free(xq);
    }
    f8_graph_destroy(g);
    free(sa.p);
    free(sb.p);
    free(s0.p);
    seq_destroy(&A);
    seq_destroy(&B);
    f8_ctx_destroy(ca);
    f8_ctx_destroy(cb);
}

/* Host copy of the Linear's weight workspace (data, transpose, scale_inv)
 * and its weight slot (scale, scale_inv, history). */
static void workspace_snapshot(f8_ctx *ctx, f8_module *lin, gbuf *b)
{
    b->n = 0;
    gbuf_qtensor(b, ctx, f8_module_weight_workspace(lin, F8_PARAM_WEIGHT));
    f8_slot ws;
    CHECK_OK(ctx, f8_module_slot(lin, F8_DIR_FORWARD, 1, &ws));
    gbuf_slot(b, ctx, ws);
}

static void set_weight(f8_ctx *ctx, f8_module *lin, float *w, size_t n, uint64_t seed)
{
    test_rng r = {seed};
    for (size_t i = 0; i < n; i++) w[i] = (float)(0.05 * rng_normal(&r));
    f8_tensor v;
    CHECK_OK(ctx, f8_module_param(lin, F8_PARAM_WEIGHT, 0, &v));
    CHECK_OK(ctx, f8_ctx_upload(ctx, v.data, w, n * 4));
}

/* Graph mode of the weight workspace: the flag decides on each replay. */
static void test_noop_flag(f8_backend be)
{
    f8_ctx *ctx = g_ctx(be);
    seq s;
    seq_create(&s, ctx, 1);
    const size_t nw = (size_t)(s.N * s.K);
    float *w = (float *)xmalloc(nw * 4);
    free(seq_inputs(&s, 0));
    CHECK_OK(ctx, f8_ctx_set_weight_noop(ctx, 1));
    f8_tensor x = f8_tensor_make(s.x, s.adt, s.T, s.K), y = f8_tensor_make(s.y, s.adt, s.T, s.N);
    f8_tensor dy = f8_tensor_make(s.dy, s.adt, s.T, s.N), dx = f8_tensor_make(s.dx, s.adt, s.T, s.K);
    CHECK_OK(ctx, f8_module_forward(s.lin, &x, &y, F8_MICROBATCH_FIRST, s.saved)); /* fills the workspace */
    CHECK_OK(ctx, f8_module_backward(s.lin, s.saved, &dy, &dx));

    f8_graph *g = NULL;
    CHECK_OK(ctx, f8_graph_begin(ctx));
    CHECK_OK(ctx, f8_module_forward(s.lin, &x, &y, F8_MICROBATCH_NONE, s.saved));
    CHECK_OK(ctx, f8_module_backward(s.lin, s.saved, &dy, &dx));
    CHECK_OK(ctx, f8_graph_end(ctx, &g));

    /* New master weight; flag 1: the workspace and its slot stay bitwise. */
    set_weight(ctx, s.lin, w, nw, 77);
    gbuf before = {0}, after = {0};
    workspace_snapshot(ctx, s.lin, &before);
    CHECK_OK(ctx, f8_ctx_set_noop_flag(ctx, 1.0f));
    CHECK_OK(ctx, f8_graph_replay(g));
    workspace_snapshot(ctx, s.lin, &after);
    gbuf_same(&before, &after, "noop flag 1: weight workspace and slot");

    /* Flag 0: re-cast from the new weight, through the slot's scale. */
    f8_slot ws;
    CHECK_OK(ctx, f8_module_slot(s.lin, F8_DIR_FORWARD, 1, &ws));
    float scale = 0, hist[G_HIST];
    CHECK_OK(ctx, f8_slot_read(ctx, ws, &scale, NULL, hist));
    CHECK_OK(ctx, f8_ctx_set_noop_flag(ctx, 0.0f));
    CHECK_OK(ctx, f8_graph_replay(g));
    const f8_qtensor *wq = f8_module_weight_workspace(s.lin, F8_PARAM_WEIGHT);
    f8_tensor v, vt;
    CHECK_OK(ctx, f8_qtensor_data(wq, &v));
    CHECK_OK(ctx, f8_qtensor_transpose_data(wq, &vt));
    uint8_t *codes = (uint8_t *)xmalloc(nw), *tcodes = (uint8_t *)xmalloc(nw);
    float sinv = 0, hist2[G_HIST];
    CHECK_OK(ctx, f8_ctx_download(ctx, codes, v.data, nw));
    CHECK_OK(ctx, f8_ctx_download(ctx, tcodes, vt.data, nw));
    CHECK_OK(ctx, f8_ctx_download(ctx, &sinv, v.scale_inv, 4));
    CHECK_OK(ctx, f8_slot_read(ctx, ws, NULL, NULL, hist2));
    size_t bad = nw;
    float amax = 0;
    for (size_t i = 0; i < nw; i++) {
        amax = fmaxf(amax, fabsf(w[i]));
        const int64_t r = (int64_t)i / s.K, c = (int64_t)i % s.K;
        if (bad == nw && (codes[i] != f8_fp8_from_float(w[i] * scale, F8_DTYPE_E4M3) || tcodes[c * s.N + r] != codes[i]))
            bad = i;
    }
    CHECK(bad == nw, "noop flag 0: workspace code %zu is not fp8(w * scale) or its transpose", bad);
    CHECK(sinv == 1.0f / scale, "noop flag 0: workspace scale_inv %g, 1/scale %g", sinv, 1.0f / scale);
    CHECK(hist2[0] == fmaxf(hist[0], amax), "noop flag 0: weight amax %g, expected max(%g, %g)", hist2[0], hist[0],
          amax);

    /* A flag set inside the capture is part of the graph. */
    f8_graph *g2 = NULL;
    CHECK_OK(ctx, f8_graph_begin(ctx));
    CHECK_OK(ctx, f8_ctx_set_noop_flag(ctx, 1.0f));
    CHECK_OK(ctx, f8_module_forward(s.lin, &x, &y, F8_MICROBATCH_NONE, s.saved));
    CHECK_OK(ctx, f8_graph_end(ctx, &g2));
    CHECK_OK(ctx, f8_ctx_set_noop_flag(ctx, 0.0f));
    set_weight(ctx, s.lin, w, nw, 78);
    workspace_snapshot(ctx, s.lin, &before);
    CHECK_OK(ctx, f8_graph_replay(g2));
    workspace_snapshot(ctx, s.lin, &after);
    gbuf_same(&before, &after, "noop flag set inside the graph: weight workspace and slot");
    float flag = 0;
    CHECK_OK(ctx, f8_ctx_download(ctx, &flag, f8_ctx_noop_flag(ctx), 4));
    CHECK(flag == 1.0f, "the replayed f8_ctx_set_noop_flag left the flag %g", flag);

    f8_graph_destroy(g);
    f8_graph_destroy(g2);
    free(before.p);
    free(after.p);
    free(codes);
    free(tcodes);
    free(w);
    seq_destroy(&s);
    f8_ctx_destroy(ctx);
}

/* The calls a capture refuses. */
enum { R_UPLOAD, R_DOWNLOAD, R_SYNC, R_SLOT_READ, R_SLOT_WRITE, R_ALLOC, R_QTENSOR, R_LAZY, R_FREE, R_STREAM, R_COUNT };
static const char *const refused_name[R_COUNT] = {
    "f8_ctx_upload", "f8_ctx_download", "f8_ctx_synchronize", "f8_slot_read", "f8_slot_write", "f8_ctx_alloc",
    "f8_qtensor_create", "quantize allocating a lazy transpose", "f8_ctx_free", "f8_ctx_set_stream"};

static void test_refused(f8_backend be)
{
    f8_ctx *ctx = g_ctx(be);
    seq s;
    seq_create(&s, ctx, 1);
    free(seq_inputs(&s, 0));
    CHECK_OK(ctx, seq_run(&s));
    f8_qtensor *fresh = NULL; /* never given a transpose */
    CHECK_OK(ctx, f8_qtensor_create(ctx, F8_DTYPE_E4M3, s.T, s.K, &fresh));
    gbuf before = {0}, after = {0};
    float host[4] = {1, 2, 3, 4};

    for (int k = 0; k < R_COUNT; k++) {
        if (k == R_STREAM && be != F8_BACKEND_CUDA) continue; /* a CPU ctx has no stream (UNSUPPORTED) */
        void *spare = g_alloc(ctx, 64);
        f8_memory_report m0, m1;
        f8_ctx_memory(ctx, &m0);
        free(seq_inputs(&s, k + 1));
        seq_snapshot(&s, &before);

        /* Work recorded before and after the refused call. */
        CHECK_OK(ctx, f8_graph_begin(ctx));
        CHECK_OK(ctx, seq_run(&s));
        f8_status st = F8_OK;
        void *p = NULL;
        f8_qtensor *q2 = NULL;
        f8_tensor xq = f8_tensor_make(s.xq, F8_DTYPE_FP32, s.T, s.K);
        switch (k) {
        case R_UPLOAD: st = f8_ctx_upload(ctx, spare, host, sizeof host); break;
        case R_DOWNLOAD: st = f8_ctx_download(ctx, host, spare, sizeof host); break;
        case R_SYNC: st = f8_ctx_synchronize(ctx); break;
        case R_SLOT_READ: st = f8_slot_read(ctx, s.qslot, &host[0], NULL, NULL); break;
        case R_SLOT_WRITE: st = f8_slot_write(ctx, s.qslot, 2.0f, 0.5f, NULL); break;
        case R_ALLOC: st = f8_ctx_alloc(ctx, 64, &p); break;
        case R_QTENSOR: st = f8_qtensor_create(ctx, F8_DTYPE_E4M3, 4, 4, &q2); break;
        case R_LAZY: st = f8_qtensor_quantize(fresh, &xq, s.qslot, 1, NULL); break;
        case R_FREE:
            f8_ctx_free(ctx, spare);
            st = F8_ERR_STATE; /* void: the spoil shows at end */
            spare = NULL;
            break;
        case R_STREAM: st = f8_ctx_set_stream(ctx, NULL); break;
        }
        CHECK(st == F8_ERR_STATE, "%s during a capture -> %s, wanted F8_ERR_STATE", refused_name[k],
              f8_status_string(st));
        CHECK(p == NULL && q2 == NULL, "%s during a capture returned an object", refused_name[k]);
        CHECK(f8_ctx_capturing(ctx) == 1, "%s ended the capture", refused_name[k]);
        CHECK_OK(ctx, seq_run(&s));
        f8_graph *g = (f8_graph *)&g;
        st = f8_graph_end(ctx, &g);
        CHECK(st == F8_ERR_STATE && g == NULL, "%s: end -> %s, graph %p (wanted F8_ERR_STATE, NULL)", refused_name[k],
              f8_status_string(st), (void *)g);
        CHECK(f8_ctx_capturing(ctx) == 0, "%s: still capturing after end", refused_name[k]);
        if (k == 0) printf("  a spoiled end says: %s\n", f8_ctx_last_error(ctx));

        /* Nothing half-done: no recorded or captured work ran. */
        seq_snapshot(&s, &after);
        gbuf_same(&before, &after, refused_name[k]);
        f8_ctx_memory(ctx, &m1);
        CHECK(m1.total == m0.total - (k == R_FREE ? 64 : 0), "%s: memory %zu -> %zu", refused_name[k], m0.total,
              m1.total);

        /* And the ctx works on: eagerly, and capturing again. (With the
         * transpose: the host's "transpose valid" mark of s.q stays as the
         * sequence leaves it, so the next snapshots have the same shape.) */
        const uint64_t l0 = g_launches(ctx);
        CHECK_OK(ctx, f8_qtensor_quantize(s.q, &xq, s.qslot, 1, NULL));
        CHECK(g_launches(ctx) - l0 == 1, "%s: an eager quantize after it counted %llu", refused_name[k],
              (unsigned long long)(g_launches(ctx) - l0));
        CHECK_OK(ctx, f8_graph_begin(ctx));
        CHECK_OK(ctx, f8_qtensor_quantize(s.q, &xq, s.qslot, 1, NULL));
        CHECK_OK(ctx, f8_graph_end(ctx, &g));
        CHECK_OK(ctx, f8_graph_replay(g));
        f8_graph_destroy(g);
        f8_ctx_free(ctx, spare);
    }
    free(before.p);
    free(after.p);
    f8_qtensor_destroy(fresh);
    seq_destroy(&s);
    f8_ctx_destroy(ctx);
}

/* One call's launch count, printed and checked against `want` (-1: print
 * only). */
#define COUNT_CALL(ctx, call, want, what)                                                          \
    do {                                                                                           \
        const uint64_t l_ = g_launches(ctx);                                                       \
        CHECK_OK(ctx, call);                                                                       \
        const long long d_ = (long long)(g_launches(ctx) - l_);                                    \
        printf("  launches %-44s %lld\n", what, d_);                                               \
        CHECK((want) < 0 || d_ == (want), "%s counted %lld launches, expected %d", what, d_, (int)(want)); \
    } while (0)

/* Launch counts of single calls: the same on both backends for these (each
 * CPU op counts one; each CUDA launcher here makes one launch or memcpy),
 * 0 for the calls that put no work on the stream. Linear: CPU forward 3 ops
 * (weight cast, input cast, GEMM), backward 3 (gradient cast with dbias,
 * dgrad, wgrad); CUDA backward 6 (the dbias cast of 200 rows is a tile
 * kernel and a reduce; the wgrad's K is the 200 tokens, not a multiple of
 * 16, so both its operands are padded first, one launch each:
 * gemm_kernels.cu's odd-shape path), forward 3 or 4 (cuBLASLt may not fuse
 * the bias). */
static void test_counts(f8_backend be)
{
    f8_ctx *ctx = g_ctx(be);
    COUNT_CALL(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD), 0, "f8_ctx_update_scales, no slots");

    const int64_t R = 200, C = 96; /* 2 row tiles of a CUDA tile kernel */
    f8_slot sl;
    CHECK_OK(ctx, f8_ctx_slots_create(ctx, F8_DIR_FORWARD, 1, &sl));
    f8_qtensor *q = NULL, *q0 = NULL;
    CHECK_OK(ctx, f8_qtensor_create(ctx, F8_DTYPE_E4M3, R, C, &q));
    CHECK_OK(ctx, f8_qtensor_create(ctx, F8_DTYPE_E5M2, 0, C, &q0));
    const size_t n = (size_t)(R * C);
    float *host = (float *)xmalloc(n * 4);
    test_rng r = {5};
    for (size_t i = 0; i < n; i++) host[i] = (float)rng_normal(&r);
    void *a = g_alloc(ctx, n * 4), *b = g_alloc(ctx, n * 4), *t8 = g_alloc(ctx, n), *s = g_alloc(ctx, 4);
    f8_tensor src = f8_tensor_make(a, F8_DTYPE_FP32, R, C), src0 = f8_tensor_make(a, F8_DTYPE_FP32, 0, C);
    f8_tensor f32 = f8_tensor_make(b, F8_DTYPE_FP32, R, C), bf16 = f8_tensor_make(b, F8_DTYPE_BF16, R, C);
    f8_tensor tq = f8_tensor_make(t8, F8_DTYPE_E4M3, C, R);
    tq.scale_inv = (float *)s;

    COUNT_CALL(ctx, f8_ctx_upload(ctx, a, host, n * 4), 0, "f8_ctx_upload");
    COUNT_CALL(ctx, f8_ctx_download(ctx, host, a, n * 4), 0, "f8_ctx_download");
    COUNT_CALL(ctx, f8_ctx_synchronize(ctx), 0, "f8_ctx_synchronize");
    COUNT_CALL(ctx, f8_qtensor_quantize(q, &src, sl, 0, NULL), 1, "f8_qtensor_quantize");
    COUNT_CALL(ctx, f8_qtensor_quantize(q, &src, sl, 1, NULL), 1, "f8_qtensor_quantize, with transpose");
    COUNT_CALL(ctx, f8_qtensor_quantize(q, &src, sl, 1, f8_ctx_noop_flag(ctx)), 1,
               "f8_qtensor_quantize, transpose + noop flag");
    COUNT_CALL(ctx, f8_qtensor_quantize(q0, &src0, sl, 0, NULL), 1, "f8_qtensor_quantize, 0 rows (scale_inv)");
    COUNT_CALL(ctx, f8_qtensor_transpose(q, NULL), 0, "f8_qtensor_transpose, cached");
    COUNT_CALL(ctx, f8_qtensor_transpose(q, f8_ctx_noop_flag(ctx)), 1, "f8_qtensor_transpose, noop flag");
    COUNT_CALL(ctx, f8_qtensor_transpose_into(q, &tq), 2, "f8_qtensor_transpose_into (+ scale_inv copy)");
    COUNT_CALL(ctx, f8_qtensor_dequantize(q, &f32), 1, "f8_qtensor_dequantize");
    COUNT_CALL(ctx, f8_tensor_convert(ctx, &src, &bf16), 1, "f8_tensor_convert fp32 -> bf16");
    COUNT_CALL(ctx, f8_tensor_convert(ctx, &src, &f32), 1, "f8_tensor_convert fp32 -> fp32");
    COUNT_CALL(ctx, f8_ctx_copy(ctx, b, a, n * 4), 1, "f8_ctx_copy");
    COUNT_CALL(ctx, f8_ctx_copy(ctx, b, a, 0), 0, "f8_ctx_copy, 0 bytes");
    COUNT_CALL(ctx, f8_ctx_set_noop_flag(ctx, 0.0f), 1, "f8_ctx_set_noop_flag");
    COUNT_CALL(ctx, f8_ctx_update_scales(ctx, F8_DIR_FORWARD), 1, "f8_ctx_update_scales");

    /* A Linear's calls. */
    f8_linear_config lc = f8_linear_config_default(C, 64);
    lc.max_tokens = R;
    f8_module *lin = NULL;
    f8_saved *sv = NULL;
    CHECK_OK(ctx, f8_linear_create(ctx, &lc, &lin));
    CHECK_OK(ctx, f8_module_saved_create(lin, &sv));
    void *y = g_alloc(ctx, (size_t)(R * 64) * 4);
    f8_tensor ty = f8_tensor_make(y, F8_DTYPE_FP32, R, 64), tdx = f8_tensor_make(b, F8_DTYPE_FP32, R, C);
    const int cuda = be == F8_BACKEND_CUDA;
    COUNT_CALL(ctx, f8_module_forward(lin, &src, &ty, F8_MICROBATCH_FIRST, sv), -1, "f8_module_forward (first)");
    const uint64_t l0 = g_launches(ctx);
    COUNT_CALL(ctx, f8_module_forward(lin, &src, &ty, F8_MICROBATCH_NONE, sv), cuda ? -1 : 3,
               "f8_module_forward (FP8, bias, saved)");
    const long long fwd = (long long)(g_launches(ctx) - l0);
    CHECK(fwd == 3 || (cuda && fwd == 4), "f8_module_forward counted %lld, expected 3 (CUDA: 3 or 4)", fwd);
    COUNT_CALL(ctx, f8_module_forward(lin, &src, &ty, F8_MICROBATCH_NOT_FIRST, sv), fwd - 1,
               "f8_module_forward (NOT_FIRST: no weight cast)");
    COUNT_CALL(ctx, f8_module_backward(lin, sv, &ty, &tdx), cuda ? 6 : 3, "f8_module_backward (FP8, bias)");
    CHECK_OK(ctx, f8_module_forward(lin, &src, &ty, F8_MICROBATCH_NOT_FIRST, sv)); /* backward consumed sv */
    COUNT_CALL(ctx, f8_module_backward(lin, sv, &ty, NULL), cuda ? 5 : 2, "f8_module_backward, no dx");

    f8_ctx_free(ctx, y);
    f8_saved_destroy(sv);
    f8_module_destroy(lin);
    f8_ctx_free(ctx, a);
    f8_ctx_free(ctx, b);
    f8_ctx_free(ctx, t8);
    f8_ctx_free(ctx, s);
    free(host);
    f8_qtensor_destroy(q);
    f8_qtensor_destroy(q0);
    f8_ctx_destroy(ctx);
}

#endif /* F8_TESTS_GRAPH_TESTS_H */
