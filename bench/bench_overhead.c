/*
 * bench_overhead.c — what the host costs, eagerly and under f8 graphs: a
 * stack of 12 f8_module layers [T, H] -> [T, H] (bias on, param_dtype BF16,
 * BF16 activations, microbatch NONE so every forward casts its weight), FP8
 * on and off, at (T, H) = (64, 1024) and (2048, 4096); plus one
 * LayerNormLinear (H -> H) and one LayerNormMLP (H -> 4H -> H, GELU) eagerly.
 *
 * Measured, with the GPU kept busy where host time is taken (bench_util.h):
 *  - eager host time of one module call (forward; backward, with its forward
 *    queued untimed before it), its launches from f8_ctx_counters, and the
 *    floor of those launches measured in this run: for each GEMM call a bare
 *    cached cublasLtMatmul at that GEMM's own shape (E4M3 for FP8 pairs, BF16
 *    otherwise) + the other launches x an empty kernel launch. Target: host
 *    time <= floor + 2 us. Also shown: the floor with every GEMM at the
 *    64x1024x1024 bare call (bench_util's), and the nodes a raw capture of
 *    the call holds (a cuBLASLt call may launch several kernels).
 *  - a captured step (12 forwards, 12 backwards in reverse, and with FP8 the
 *    two scale updates) replayed with f8_graph_replay: host time of the
 *    replay call / 12 (target <= 0.5 us per layer) and GPU time; and the
 *    step graph's node census (kernels, those with thread-block clusters,
 *    memsets, memcpys), since replay host cost depends on what the graph
 *    holds.
 *  - at (64, 1024): GPU time per layer under replay against the sum of its
 *    kernels' own times (target <= 1.3x). A kernel's own time: the step is
 *    captured again with every backend op but the k-th of each layer turned
 *    into a no-op (a filtering copy of the backend table under the capture),
 *    so the graph holds that op of all 12 layers back to back; its replay GPU
 *    time / 12 is op k's own time per layer. The scale updates form one more
 *    such group.
 *  - at (2048, 4096): the whole graphed step, FP8 against BF16 (target: FP8
 *    no slower).
 * Ends with the table of targets, met or missed, and JSON lines.
 */
#include "bench_util.h"
#include "core/f8i.h"

#define LAYERS 12

/* ---- a filtering, counting copy of the backend table ----------------------- */

/* File-scope state is fine in a benchmark program (the library keeps none):
 * the wrappers have no other way to find it. period 0: every op runs;
 * period p > 0: op i of a step runs only if i < p * LAYERS and i % p == keep,
 * or i >= p * LAYERS (the scale updates) and keep == p. */
#define MAX_REC 8

typedef struct tap {
    const f8i_backend *real;
    f8i_backend table;
    long op;          /* work ops seen since the last reset */
    int period, keep;
    long gemm_calls;  /* GEMM calls run */
    int nrec;         /* the first MAX_REC of them */
    f8i_gemm_args rec[MAX_REC];
} tap;
static tap g_tap;

static int tap_pass(void)
{
    const long i = g_tap.op++;
    if (g_tap.period <= 0) return 1;
    if (i < (long)g_tap.period * LAYERS) return i % g_tap.period == g_tap.keep;
    return g_tap.keep == g_tap.period;
}

/* Every work op through the filter; GEMMs counted and recorded. */
static f8_status tap_run(f8_ctx *c, f8i_op_kind kind, const void *args)
{
    if (!tap_pass()) return F8_OK;
    if (kind == F8I_OP_GEMM) {
        g_tap.gemm_calls++;
        if (g_tap.nrec < MAX_REC) g_tap.rec[g_tap.nrec++] = *(const f8i_gemm_args *)args;
    }
    return g_tap.real->run(c, kind, args);
}

static void tap_install(f8_ctx *ctx, int period, int keep)
{
    g_tap.real = ctx->be;
    g_tap.table = *ctx->be;
    g_tap.table.run = tap_run;
    g_tap.op = 0, g_tap.period = period, g_tap.keep = keep, g_tap.gemm_calls = 0, g_tap.nrec = 0;
    ctx->be = &g_tap.table;
}

static void tap_remove(f8_ctx *ctx) { ctx->be = g_tap.real; }

/* ---- floors per GEMM shape, and what a captured call holds ------------------- */

/* Host time of a bare cached cublasLtMatmul at one GEMM's shape (E4M3 for
 * any FP8 pair, BF16 otherwise; D BF16), measured once per shape. */
typedef struct ltfloor {
    int64_t m, n, k;
    int fp8;
    double host_us;
} ltfloor;
static ltfloor g_lt[32];
static int g_nlt;

static double lt_floor(void *stream, const f8i_gemm_args *g)
{
    const int fp8 = f8i_dtype_is_fp8(g->a_dtype);
    for (int i = 0; i < g_nlt; i++)
        if (g_lt[i].m == g->m && g_lt[i].n == g->n && g_lt[i].k == g->k && g_lt[i].fp8 == fp8) return g_lt[i].host_us;
    const f8_dtype ab = fp8 ? F8_DTYPE_E4M3 : F8_DTYPE_BF16;
    float *sc = bench_alloc_random(stream, F8_DTYPE_FP32, 1, 5, 1.0f);
    bench_floor_arg f = {stream, NULL, NULL, NULL, NULL};
    bench_lt_config c = {g->m, g->n, g->k, ab, F8_DTYPE_BF16, 1, (size_t)32 << 20, fp8 ? sc : NULL, fp8 ? sc : NULL};
    if (bench_lt_create(&c, stream, &f.lt) != 0) { /* no bare plan for it: the fixed floor stands in */
        BENCH_CUDA(cudaFree(sc));
        if (g_nlt < 32) g_lt[g_nlt++] = (ltfloor){g->m, g->n, g->k, fp8, -1.0};
        return -1.0;
    }
    f.a = bench_alloc_random(stream, ab, g->m * g->k, 6, 1.0f);
    f.b = bench_alloc_random(stream, ab, g->n * g->k, 7, 1.0f);
    BENCH_CUDA(cudaMalloc(&f.d, (size_t)(g->m * g->n) * 2));
    const double us = bench_time(stream, bench_floor_lt_call, &f, 100).host_us;
    bench_lt_destroy(f.lt);
    BENCH_CUDA(cudaFree(sc));
    BENCH_CUDA(cudaFree(f.a));
    BENCH_CUDA(cudaFree(f.b));
    BENCH_CUDA(cudaFree(f.d));
    if (g_nlt < 32) g_lt[g_nlt++] = (ltfloor){g->m, g->n, g->k, fp8, us};
    return us;
}

/* Nodes of a raw stream capture of `call` (relaxed mode, as f8 graphs):
 * kernels (and how many carry a thread-block cluster), memsets, memcpys,
 * others. -1 if the capture failed. */
typedef struct census {
    int kernels, clustered, memsets, memcpys, others;
} census;

static int graph_census(void *stream, bench_call call, void *arg, census *c)
{
    cudaStream_t s = (cudaStream_t)stream;
    cudaGraph_t g = NULL;
    memset(c, 0, sizeof *c);
    BENCH_CUDA(cudaStreamSynchronize(s));
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    call(arg, 0);
    if (cudaStreamEndCapture(s, &g) != cudaSuccess || !g) {
        (void)cudaGetLastError();
        return -1;
    }
    size_t n = 0;
    BENCH_CUDA(cudaGraphGetNodes(g, NULL, &n));
    cudaGraphNode_t *nodes = malloc(sizeof(cudaGraphNode_t) * (n ? n : 1));
    if (!nodes) exit(1);
    BENCH_CUDA(cudaGraphGetNodes(g, nodes, &n));
    for (size_t i = 0; i < n; i++) {
        enum cudaGraphNodeType t;
        BENCH_CUDA(cudaGraphNodeGetType(nodes[i], &t));
        if (t == cudaGraphNodeTypeKernel) {
            c->kernels++;
            cudaKernelNodeAttrValue v;
            memset(&v, 0, sizeof v);
            if (cudaGraphKernelNodeGetAttribute(nodes[i], cudaKernelNodeAttributeClusterDimension, &v) == cudaSuccess &&
                v.clusterDim.x * v.clusterDim.y * v.clusterDim.z > 1)
                c->clustered++;
            (void)cudaGetLastError();
        } else if (t == cudaGraphNodeTypeMemset) {
            c->memsets++;
        } else if (t == cudaGraphNodeTypeMemcpy) {
            c->memcpys++;
        } else if (t != cudaGraphNodeTypeEmpty) {
            c->others++;
        }
    }
    free(nodes);
    BENCH_CUDA(cudaGraphDestroy(g));
    return 0;
}

static int census_nodes(const census *c) { return c->kernels + c->memsets + c->memcpys + c->others; }

/* ---- layers and the stack --------------------------------------------------- */

typedef enum kind { K_LINEAR, K_LNLINEAR, K_LNMLP } kind;
static const char *const kind_name[3] = {"Linear", "LayerNormLinear", "LayerNormMLP"};

typedef struct layer {
    kind k;
    void *mod, *saved;
} layer;

static void layer_create(f8_ctx *ctx, layer *l, kind k, int64_t T, int64_t H, int fp8, uint64_t seed)
{
    l->k = k;
    if (k == K_LINEAR) {
        f8_linear_config c = f8_linear_config_default(H, H);
        c.param_dtype = F8_DTYPE_BF16, c.fp8 = fp8, c.max_tokens = T, c.seed = seed;
        BENCH_F8(ctx, f8_linear_create(ctx, &c, (f8_module **)&l->mod));
        BENCH_F8(ctx, f8_module_saved_create(l->mod, (f8_saved **)&l->saved));
    } else if (k == K_LNLINEAR) {
        f8_layernorm_linear_config c = f8_layernorm_linear_config_default(H, H);
        c.param_dtype = F8_DTYPE_BF16, c.fp8 = fp8, c.max_tokens = T, c.seed = seed;
        BENCH_F8(ctx, f8_layernorm_linear_create(ctx, &c, (f8_module **)&l->mod));
        BENCH_F8(ctx, f8_module_saved_create(l->mod, (f8_saved **)&l->saved));
    } else {
        f8_layernorm_mlp_config c = f8_layernorm_mlp_config_default(H, 4 * H);
        c.param_dtype = F8_DTYPE_BF16, c.fp8 = fp8, c.max_tokens = T, c.seed = seed;
        BENCH_F8(ctx, f8_layernorm_mlp_create(ctx, &c, (f8_module **)&l->mod));
        BENCH_F8(ctx, f8_module_saved_create(l->mod, (f8_saved **)&l->saved));
    }
}

static void layer_destroy(layer *l)
{
    if (l->k == K_LINEAR) {
        f8_saved_destroy(l->saved);
        f8_module_destroy(l->mod);
    } else if (l->k == K_LNLINEAR) {
        f8_saved_destroy(l->saved);
        f8_module_destroy(l->mod);
    } else {
        f8_saved_destroy(l->saved);
        f8_module_destroy(l->mod);
    }
}

static f8_status layer_forward(layer *l, const f8_tensor *x, f8_tensor *y)
{
    if (l->k == K_LINEAR) return f8_module_forward(l->mod, x, y, F8_MICROBATCH_NONE, l->saved);
    if (l->k == K_LNLINEAR) return f8_layernorm_linear_forward(l->mod, x, y, NULL, F8_MICROBATCH_NONE, l->saved);
    return f8_module_forward(l->mod, x, y, F8_MICROBATCH_NONE, l->saved);
}

static f8_status layer_backward(layer *l, const f8_tensor *dy, f8_tensor *dx)
{
    if (l->k == K_LINEAR) return f8_module_backward(l->mod, l->saved, dy, dx);
    if (l->k == K_LNLINEAR) return f8_layernorm_linear_backward(l->mod, l->saved, dy, NULL, dx);
    return f8_module_backward(l->mod, l->saved, dy, dx);
}

/* n layers; act[i] is layer i's input, act[i + 1] its output; grad[i] the
 * gradient with respect to act[i]. */
typedef struct stack {
    f8_ctx *ctx;
    int n, fp8;
    int64_t T, H;
    layer L[LAYERS];
    f8_tensor act[LAYERS + 1], grad[LAYERS + 1];
    f8_graph *graph;
} stack;

static void stack_create(stack *s, f8_ctx *ctx, kind k, int n, int64_t T, int64_t H, int fp8)
{
    memset(s, 0, sizeof *s);
    s->ctx = ctx, s->n = n, s->fp8 = fp8, s->T = T, s->H = H;
    void *stream = f8_ctx_stream(ctx);
    for (int i = 0; i < n; i++) layer_create(ctx, &s->L[i], k, T, H, fp8, 1 + (uint64_t)i);
    for (int i = 0; i <= n; i++) {
        /* Small values: 12 layers of N(0, 0.02²) weights keep them finite. */
        s->act[i] = f8_tensor_make(bench_alloc_random(stream, F8_DTYPE_BF16, T * H, 100 + (uint64_t)i, 1.0f),
                                   F8_DTYPE_BF16, T, H);
        s->grad[i] = f8_tensor_make(bench_alloc_random(stream, F8_DTYPE_BF16, T * H, 200 + (uint64_t)i, 0.01f),
                                    F8_DTYPE_BF16, T, H);
    }
}

static void stack_destroy(stack *s)
{
    f8_graph_destroy(s->graph);
    for (int i = 0; i < s->n; i++) layer_destroy(&s->L[i]);
    for (int i = 0; i <= s->n; i++) {
        BENCH_CUDA(cudaFree(s->act[i].data));
        BENCH_CUDA(cudaFree(s->grad[i].data));
    }
}

/* One training step: every forward, every backward in reverse, and with FP8
 * both scale updates. Returns the first failing status (a capture must not
 * exit with the stream in capture mode). */
static f8_status stack_step(stack *s)
{
    f8_status st = F8_OK;
    for (int i = 0; i < s->n && st == F8_OK; i++) st = layer_forward(&s->L[i], &s->act[i], &s->act[i + 1]);
    for (int i = s->n - 1; i >= 0 && st == F8_OK; i--) st = layer_backward(&s->L[i], &s->grad[i + 1], &s->grad[i]);
    if (s->fp8 && st == F8_OK) st = f8_ctx_update_scales(s->ctx, F8_DIR_FORWARD);
    if (s->fp8 && st == F8_OK) st = f8_ctx_update_scales(s->ctx, F8_DIR_BACKWARD);
    return st;
}

static f8_graph *stack_capture(stack *s)
{
    f8_graph *g = NULL;
    BENCH_F8(s->ctx, f8_graph_begin(s->ctx));
    f8_status st = stack_step(s);
    f8_status end = f8_graph_end(s->ctx, &g);
    BENCH_F8(s->ctx, st);
    BENCH_F8(s->ctx, end);
    return g;
}

/* bench_call shapes: call i works on layer i % n. */
static void fwd_call(void *p, int i)
{
    stack *s = p;
    const int m = i % s->n;
    BENCH_F8(s->ctx, layer_forward(&s->L[m], &s->act[m], &s->act[m + 1]));
}

static void bwd_call(void *p, int i)
{
    stack *s = p;
    const int m = i % s->n;
    BENCH_F8(s->ctx, layer_backward(&s->L[m], &s->grad[m + 1], &s->grad[m]));
}

static void step_call(void *p, int i)
{
    stack *s = p;
    (void)i;
    BENCH_F8(s->ctx, stack_step(s));
}

static void replay_call(void *p, int i)
{
    stack *s = p;
    (void)i;
    BENCH_F8(s->ctx, f8_graph_replay(s->graph));
}

/* ---- eager host time of one call against its floor ---------------------------- */

typedef struct eager {
    double host_us, gpu_us, floor_us, floor_fixed_us;
    long launches, gemms;
    int nodes; /* graph nodes of one call (raw capture); -1 if it failed */
} eager;

static eager measure_call(stack *s, const bench_floor *fl, int backward, int reps)
{
    void *stream = f8_ctx_stream(s->ctx);
    eager e;
    /* Launches and GEMM calls of one call (layer 0), through the tap. */
    BENCH_F8(s->ctx, layer_forward(&s->L[0], &s->act[0], &s->act[1]));
    f8_ctx_counters c0, c1;
    tap_install(s->ctx, 0, 0);
    f8_ctx_counters_read(s->ctx, &c0);
    if (backward) bwd_call(s, 0);
    else fwd_call(s, 0);
    f8_ctx_counters_read(s->ctx, &c1);
    tap_remove(s->ctx);
    e.launches = (long)(c1.launches - c0.launches);
    e.gemms = g_tap.gemm_calls;
    const int nrec = g_tap.nrec;
    f8i_gemm_args rec[MAX_REC];
    memcpy(rec, g_tap.rec, sizeof rec);
    e.floor_fixed_us = e.gemms * fl->lt_matmul_us + (e.launches - e.gemms) * fl->empty_launch_us;
    e.floor_us = (e.launches - e.gemms) * fl->empty_launch_us;
    for (int j = 0; j < nrec; j++) {
        const double us = lt_floor(stream, &rec[j]);
        e.floor_us += us >= 0 ? us : fl->lt_matmul_us;
    }
    e.floor_us += (e.gemms - nrec) * fl->lt_matmul_us; /* beyond MAX_REC (never, here) */
    census c;
    if (backward) BENCH_F8(s->ctx, layer_forward(&s->L[0], &s->act[0], &s->act[1]));
    e.nodes = graph_census(stream, backward ? bwd_call : fwd_call, s, &c) == 0 ? census_nodes(&c) : -1;
    bench_times t = backward ? bench_time_prep(stream, fwd_call, bwd_call, s, reps) : bench_time(stream, fwd_call, s, reps);
    e.host_us = t.host_us;
    e.gpu_us = t.gpu_us;
    return e;
}

/* ---- the targets table --------------------------------------------------------- */

typedef struct target {
    char what[96];
    double value, limit;
    const char *unit;
} target;

#define MAX_TARGETS 32
static target g_targets[MAX_TARGETS];
static int g_ntargets;

static void add_target(const char *what, double value, double limit, const char *unit)
{
    if (g_ntargets == MAX_TARGETS) return;
    target *t = &g_targets[g_ntargets++];
    snprintf(t->what, sizeof t->what, "%s", what);
    t->value = value, t->limit = limit, t->unit = unit;
}

/* ---- runs ------------------------------------------------------------------------ */

/* Eager calls of one module kind: forward and backward host time vs floor. */
static void run_eager(f8_ctx *ctx, const bench_floor *fl, kind k, int n, int64_t T, int64_t H, int fp8, bench_log *log)
{
    stack s;
    stack_create(&s, ctx, k, n, T, H, fp8);
    BENCH_F8(ctx, stack_step(&s)); /* plans, lazily made buffers */
    BENCH_F8(ctx, f8_ctx_synchronize(ctx));
    for (int b = 0; b < 2; b++) {
        eager e = measure_call(&s, fl, b, T * H > 64 * 1024 ? 40 : 120);
        const double over = e.host_us - e.floor_us;
        printf("%-16s %5lldx%-5lld %-4s %-8s %8ld %5d %6ld %9.2f %9.2f %+8.2f %9.2f %10.1f\n", kind_name[k],
               (long long)T, (long long)H, fp8 ? "fp8" : "bf16", b ? "backward" : "forward", e.launches, e.nodes,
               e.gemms, e.host_us, e.floor_us, over, e.floor_fixed_us, e.gpu_us);
        bench_json(log,
                   "{\"bench\":\"overhead_eager\",\"module\":\"%s\",\"shape\":[%lld,%lld],\"mode\":\"%s\",\"pass\":\"%s\","
                   "\"launches\":%ld,\"graph_nodes\":%d,\"gemm_calls\":%ld,\"host_us\":%.3f,\"floor_us\":%.3f,"
                   "\"over_us\":%.3f,\"floor_fixed_us\":%.3f,\"gpu_us\":%.3f,\"meets\":%s}",
                   kind_name[k], (long long)T, (long long)H, fp8 ? "fp8" : "bf16", b ? "backward" : "forward",
                   e.launches, e.nodes, e.gemms, e.host_us, e.floor_us, over, e.floor_fixed_us, e.gpu_us,
                   over <= 2.0 ? "true" : "false");
        char what[96];
        snprintf(what, sizeof what, "eager %s %s %s %lldx%lld, host - floor", kind_name[k], b ? "bwd" : "fwd",
                 fp8 ? "fp8" : "bf16", (long long)T, (long long)H);
        add_target(what, over, 2.0, "us");
    }
    stack_destroy(&s);
}

typedef struct stepres {
    bench_times eager, replay;
    double own_sum_us; /* (64, 1024) only: sum of the ops' own GPU times, per step */
    int period;
} stepres;

/* The 12-layer Linear step: eager and replayed; at small sizes the own time
 * of each op. */
static stepres run_step(f8_ctx *ctx, int64_t T, int64_t H, int fp8, int own, bench_log *log)
{
    void *stream = f8_ctx_stream(ctx);
    stack s;
    stack_create(&s, ctx, K_LINEAR, LAYERS, T, H, fp8);
    BENCH_F8(ctx, stack_step(&s));
    BENCH_F8(ctx, f8_ctx_synchronize(ctx));
    stepres r;
    memset(&r, 0, sizeof r);
    const int reps = T * H > 64 * 1024 ? 8 : 40;
    r.eager = bench_time(stream, step_call, &s, reps);
    s.graph = stack_capture(&s);
    r.replay = bench_time(stream, replay_call, &s, reps);
    census c;
    if (graph_census(stream, step_call, &s, &c) == 0) {
        printf("  step graph %s %lldx%lld: %d kernel nodes (%d with thread-block clusters), %d memset, %d memcpy, "
               "%d other\n",
               fp8 ? "fp8" : "bf16", (long long)T, (long long)H, c.kernels, c.clustered, c.memsets, c.memcpys,
               c.others);
        bench_json(log, "{\"bench\":\"overhead_step_nodes\",\"shape\":[%lld,%lld],\"mode\":\"%s\",\"kernels\":%d,"
                        "\"clustered\":%d,\"memsets\":%d,\"memcpys\":%d,\"others\":%d}",
                   (long long)T, (long long)H, fp8 ? "fp8" : "bf16", c.kernels, c.clustered, c.memsets, c.memcpys,
                   c.others);
    }

    if (own) {
        /* Ops per layer: one layer's forward + backward through the tap. */
        tap_install(ctx, 0, 0);
        fwd_call(&s, 0);
        bwd_call(&s, 0);
        tap_remove(ctx);
        r.period = (int)g_tap.op;
        f8_graph *full = s.graph;
        for (int k = 0; k <= (fp8 ? r.period : r.period - 1); k++) {
            tap_install(ctx, r.period, k);
            s.graph = stack_capture(&s);
            tap_remove(ctx);
            bench_times t = bench_time(stream, replay_call, &s, 40);
            f8_graph_destroy(s.graph);
            r.own_sum_us += t.gpu_us;
            printf("  own time, %s %lldx%lld, op %d%s of each layer: %.2f us per layer\n", fp8 ? "fp8" : "bf16",
                   (long long)T, (long long)H, k, k == r.period ? " (the scale updates)" : "", t.gpu_us / LAYERS);
            bench_json(log, "{\"bench\":\"overhead_own\",\"shape\":[%lld,%lld],\"mode\":\"%s\",\"op\":%d,"
                            "\"gpu_us_per_layer\":%.3f}",
                       (long long)T, (long long)H, fp8 ? "fp8" : "bf16", k, t.gpu_us / LAYERS);
        }
        s.graph = full;
    }
    stack_destroy(&s);
    return r;
}

int main(void)
{
    f8_ctx *ctx = bench_ctx_or_skip("bench_overhead");
    if (!ctx) return 0;
    bench_print_device("bench_overhead");
    bench_log log = {NULL, 0, 0};
    bench_floor fl = bench_report_floor(f8_ctx_stream(ctx), &log);
    static const int64_t sizes[2][2] = {{64, 1024}, {2048, 4096}};

    printf("Eager module calls (host time with the GPU busy). floor = each GEMM call's bare cached cublasLtMatmul "
           "at its own shape + the other launches x empty launch; 'fixed' = the same with every GEMM at the "
           "64x1024x1024 floor. nodes: what a raw capture of the call holds (cuBLASLt may launch more than one "
           "kernel per call)\n");
    printf("%-16s %-11s %-4s %-8s %8s %5s %6s %9s %9s %8s %9s %10s\n", "module", "T x H", "mode", "pass", "launches",
           "nodes", "GEMMs", "host us", "floor us", "over", "fixed us", "GPU us");
    for (int z = 0; z < 2; z++)
        for (int fp8 = 1; fp8 >= 0; fp8--) {
            run_eager(ctx, &fl, K_LINEAR, LAYERS, sizes[z][0], sizes[z][1], fp8, &log);
            run_eager(ctx, &fl, K_LNLINEAR, 1, sizes[z][0], sizes[z][1], fp8, &log);
            run_eager(ctx, &fl, K_LNMLP, 1, sizes[z][0], sizes[z][1], fp8, &log);
        }

    printf("\n12-layer Linear step (12 fwd + 12 bwd, fp8: + 2 scale updates), eager vs f8_graph_replay\n");
    stepres r[2][2]; /* [size][fp8] */
    for (int z = 0; z < 2; z++)
        for (int fp8 = 1; fp8 >= 0; fp8--) {
            const int64_t T = sizes[z][0], H = sizes[z][1];
            stepres *q = &r[z][fp8];
            *q = run_step(ctx, T, H, fp8, z == 0, &log);
            printf("%5lldx%-5lld %-4s eager: host %9.1f us, GPU %9.1f us, wall %9.1f us | replay: host %6.2f us "
                   "(%.3f us/layer), GPU %9.1f us (%.2f us/layer), wall %9.1f us\n",
                   (long long)T, (long long)H, fp8 ? "fp8" : "bf16", q->eager.host_us, q->eager.gpu_us,
                   q->eager.wall_us, q->replay.host_us, q->replay.host_us / LAYERS, q->replay.gpu_us,
                   q->replay.gpu_us / LAYERS, q->replay.wall_us);
            bench_json(&log,
                       "{\"bench\":\"overhead_step\",\"shape\":[%lld,%lld],\"mode\":\"%s\",\"eager_host_us\":%.3f,"
                       "\"eager_gpu_us\":%.3f,\"eager_wall_us\":%.3f,\"replay_host_us\":%.3f,\"replay_gpu_us\":%.3f,"
                       "\"replay_wall_us\":%.3f,\"own_sum_us\":%.3f}",
                       (long long)T, (long long)H, fp8 ? "fp8" : "bf16", q->eager.host_us, q->eager.gpu_us,
                       q->eager.wall_us, q->replay.host_us, q->replay.gpu_us, q->replay.wall_us, q->own_sum_us);
            char what[96];
            snprintf(what, sizeof what, "replay host per layer %s %lldx%lld", fp8 ? "fp8" : "bf16", (long long)T,
                     (long long)H);
            add_target(what, q->replay.host_us / LAYERS, 0.5, "us");
            if (z == 0) {
                printf("%11s %-4s replay GPU per layer %.2f us; sum of its ops' own times %.2f us; ratio %.3f\n", "",
                       fp8 ? "fp8" : "bf16", q->replay.gpu_us / LAYERS, q->own_sum_us / LAYERS,
                       q->replay.gpu_us / q->own_sum_us);
                snprintf(what, sizeof what, "replay GPU / own kernels per layer %s 64x1024", fp8 ? "fp8" : "bf16");
                add_target(what, q->replay.gpu_us / q->own_sum_us, 1.3, "x");
            }
        }
    const double step_ratio = r[1][1].replay.gpu_us / r[1][0].replay.gpu_us;
    printf("graphed step at 2048x4096: fp8 %.1f us, bf16 %.1f us, fp8/bf16 %.3f\n", r[1][1].replay.gpu_us,
           r[1][0].replay.gpu_us, step_ratio);
    add_target("graphed step GPU fp8 / bf16 2048x4096", step_ratio, 1.0, "x");

    printf("\nTargets\n%-58s %10s %8s  %s\n", "what", "value", "limit", "");
    int met = 0;
    for (int i = 0; i < g_ntargets; i++) {
        const target *t = &g_targets[i];
        const int ok = t->value <= t->limit;
        met += ok;
        printf("%-58s %8.3f %-2s %6.2f %-2s %s\n", t->what, t->value, t->unit, t->limit, t->unit, ok ? "met" : "MISSED");
        bench_json(&log, "{\"bench\":\"overhead_target\",\"what\":\"%s\",\"value\":%.4f,\"limit\":%.4f,\"met\":%s}",
                   t->what, t->value, t->limit, ok ? "true" : "false");
    }
    printf("%d of %d targets met\n\n", met, g_ntargets);
    bench_log_flush(&log);
    f8_ctx_destroy(ctx);
    return 0;
}
