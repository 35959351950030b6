/*
 * bench_util.h — what every benchmark shares: exits on a failed CUDA or f8
 * call, timing, the measured copy bandwidth, the host-time floor, graph-node
 * counts and JSON lines; plus the declarations of bench_util.cu, the small
 * nvcc-compiled helpers (an empty kernel, a GPU spin, random fill, a raw
 * cuBLASLt matmul with a cached plan).
 *
 * How a call is timed (bench_time). Three passes over `reps` calls, after a
 * warm-up, each reported as a median or a mean per call:
 *  - GPU time: a CUDA event pair around each call, with a spin kernel queued
 *    first so the host enqueues every call before the GPU reaches it; the
 *    event interval is then the call's GPU time without host gaps (the
 *    median over calls).
 *  - host time: clock_gettime around each call, no synchronization inside,
 *    again behind a spin so no call waits for the GPU (median).
 *  - back-to-back GPU time: one event pair around `reps` calls queued behind
 *    a spin, elapsed / reps: the per-call event overhead (a few us, which
 *    matters for kernels of tens of us) amortised, the gaps between
 *    consecutive kernels kept (any `prep` work included).
 *  - wall time: `reps` calls back to back, one synchronize, elapsed / reps:
 *    what an eager loop of this call achieves (max of host and GPU, roughly;
 *    it includes any `prep` work).
 * Calls get an index so they can rotate through input sets larger than L2.
 */
#ifndef F8_BENCH_UTIL_H
#define F8_BENCH_UTIL_H

#include <stdint.h>

#include "f8.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- bench_util.cu ------------------------------------------------------ */

/* Launch an empty kernel <<<1, 1>>> on stream (a cudaStream_t); no check, so
 * that timing it measures the launch alone (check cudaGetLastError after). */
void bench_empty_launch(void *stream);

/* Queue a kernel that spins for `microseconds` of GPU time (%globaltimer). */
void bench_gpu_spin(void *stream, double microseconds);

/* dst[i] = N(0, stddev^2) for i < count, hashed from (seed, i), stored as
 * dtype (FP32, BF16, or FP8 with satfinite: never NaN or inf). Asynchronous;
 * returns a cudaError_t as int. */
int bench_fill_random(void *stream, void *dst, f8_dtype dtype, int64_t count, uint64_t seed, float stddev);

/* A raw cuBLASLt matmul in f8's row-major convention, D[m, n] =
 * sa·sb·Σ_k A[m, k]·B[n, k] ("TN"), made once: handle, descriptors, layouts,
 * the heuristic's first algorithm and its own workspace, so that
 * bench_lt_run is one bare cublasLtMatmul call. */
typedef struct bench_lt bench_lt;
typedef struct bench_lt_config {
    int64_t m, n, k;
    f8_dtype ab_dtype;          /* E4M3 (FP8) or BF16 */
    f8_dtype d_dtype;           /* BF16 or FP32 */
    int fast_accum;             /* FP8 only */
    size_t workspace_bytes;
    const float *a_scale_inv;   /* FP8: device scalars; NULL otherwise */
    const float *b_scale_inv;
} bench_lt_config;

/* 0 on success; otherwise prints the failing call and returns non-zero. */
int bench_lt_create(const bench_lt_config *cfg, void *stream, bench_lt **lt);
/* One cublasLtMatmul; returns its cublasStatus_t. */
int bench_lt_run(bench_lt *lt, const void *a, const void *b, void *d);
void bench_lt_destroy(bench_lt *lt);

#ifdef __cplusplus
}
#endif

/* ---- C helpers, for the bench programs ---------------------------------- */
#ifndef __CUDACC__

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#define BENCH_CUDA(call)                                                                        \
    do {                                                                                        \
        cudaError_t e_ = (call);                                                                \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

#define BENCH_F8(ctx, call)                                                                     \
    do {                                                                                        \
        f8_status s_ = (call);                                                                  \
        if (s_ != F8_OK) {                                                                      \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call, f8_status_string(s_), \
                    f8_ctx_last_error(ctx));                                                    \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

static inline double bench_now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n) (sorts v). */
static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A CUDA ctx on device 0, or NULL after printing why the bench is skipped
 * (no GPU: the caller exits 0). Any other failure exits 1. */
static inline f8_ctx *bench_ctx_or_skip(const char *name)
{
    char why[256] = "";
    f8_ctx_config cfg = f8_ctx_config_default();
    cfg.backend = F8_BACKEND_CUDA;
    /* F8_BENCH_RECIPE=current|block: the same benches under another recipe */
    const char *rk = getenv("F8_BENCH_RECIPE");
    if (rk && strcmp(rk, "current") == 0) cfg.recipe.kind = F8_RECIPE_CURRENT;
    if (rk && strcmp(rk, "block") == 0) cfg.recipe.kind = F8_RECIPE_BLOCK;
    f8_ctx *ctx = NULL;
    f8_status st = f8_ctx_create(&cfg, &ctx, why, sizeof why);
    if (st == F8_ERR_NO_DEVICE) {
        printf("%s: SKIPPED (%s)\n", name, why);
        return NULL;
    }
    if (st != F8_OK) {
        fprintf(stderr, "%s: f8_ctx_create: %s: %s\n", name, f8_status_string(st), why);
        exit(1);
    }
    return ctx;
}

static inline void bench_print_device(const char *name)
{
    int dev = 0;
    struct cudaDeviceProp p;
    BENCH_CUDA(cudaGetDevice(&dev));
    BENCH_CUDA(cudaGetDeviceProperties(&p, dev));
    printf("%s on %s (sm_%d%d, %d SMs, %.1f GiB)\n", name, p.name, p.major, p.minor, p.multiProcessorCount,
           (double)p.totalGlobalMem / (1u << 30));
}

/* Device memory filled with random data (never zeros: METHOD.md). */
static inline void *bench_alloc_random(void *stream, f8_dtype dtype, int64_t count, uint64_t seed, float stddev)
{
    void *p = NULL;
    size_t bytes = (size_t)count * f8_dtype_size(dtype);
    BENCH_CUDA(cudaMalloc(&p, bytes ? bytes : 1));
    BENCH_CUDA((cudaError_t)bench_fill_random(stream, p, dtype, count, seed, stddev));
    return p;
}

typedef void (*bench_call)(void *arg, int i); /* issue call i on the stream; exit on error */

typedef struct bench_times {
    double gpu_us, host_us, wall_us, b2b_us;
} bench_times;

/* `prep` (may be NULL) runs before every call, outside the host timing and
 * the event pair: setup a call needs but that is not the call (e.g. refilling
 * an accumulator the call consumes). */
static inline bench_times bench_time_prep(void *stream, bench_call prep, bench_call call, void *arg, int reps)
{
    cudaStream_t s = (cudaStream_t)stream;
    bench_times r;
    double *v = malloc(sizeof(double) * (size_t)reps);
    cudaEvent_t *ev = malloc(sizeof(cudaEvent_t) * 2 * (size_t)reps);
    if (!v || !ev) exit(1);
    for (int i = 0; i < 3; i++) {
        if (prep) prep(arg, i);
        call(arg, i);
    }
    BENCH_CUDA(cudaStreamSynchronize(s));
    if (prep) prep(arg, 3);
    double t0 = bench_now_us();
    call(arg, 3);
    double est = bench_now_us() - t0; /* host cost of one call, to size the spins */
    BENCH_CUDA(cudaStreamSynchronize(s));

    bench_gpu_spin(stream, 1.5 * reps * (est + 5) + 2000);
    for (int i = 0; i < reps; i++) {
        if (prep) prep(arg, i);
        t0 = bench_now_us();
        call(arg, i);
        v[i] = bench_now_us() - t0;
    }
    BENCH_CUDA(cudaStreamSynchronize(s));
    r.host_us = bench_median(v, reps);

    for (int i = 0; i < 2 * reps; i++) BENCH_CUDA(cudaEventCreate(&ev[i]));
    bench_gpu_spin(stream, 1.5 * reps * (r.host_us + 10) + 2000); /* + two event records and prep */
    for (int i = 0; i < reps; i++) {
        if (prep) prep(arg, i);
        BENCH_CUDA(cudaEventRecord(ev[2 * i], s));
        call(arg, i);
        BENCH_CUDA(cudaEventRecord(ev[2 * i + 1], s));
    }
    BENCH_CUDA(cudaStreamSynchronize(s));
    for (int i = 0; i < reps; i++) {
        float ms = 0;
        BENCH_CUDA(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        v[i] = 1e3 * ms;
    }
    r.gpu_us = bench_median(v, reps);

    bench_gpu_spin(stream, 1.5 * reps * (r.host_us + 10) + 2000);
    BENCH_CUDA(cudaEventRecord(ev[0], s));
    for (int i = 0; i < reps; i++) {
        if (prep) prep(arg, i);
        call(arg, i);
    }
    BENCH_CUDA(cudaEventRecord(ev[1], s));
    BENCH_CUDA(cudaStreamSynchronize(s));
    float b2b_ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&b2b_ms, ev[0], ev[1]));
    r.b2b_us = 1e3 * b2b_ms / reps;
    for (int i = 0; i < 2 * reps; i++) BENCH_CUDA(cudaEventDestroy(ev[i]));

    t0 = bench_now_us();
    for (int i = 0; i < reps; i++) {
        if (prep) prep(arg, i);
        call(arg, i);
    }
    BENCH_CUDA(cudaStreamSynchronize(s));
    r.wall_us = (bench_now_us() - t0) / reps;
    BENCH_CUDA(cudaGetLastError());
    free(v);
    free(ev);
    return r;
}

static inline bench_times bench_time(void *stream, bench_call call, void *arg, int reps)
{
    return bench_time_prep(stream, NULL, call, arg, reps);
}

/* Repetitions so that one pass takes about `budget_ms` of `us_per_call`;
 * F8_BENCH_REPS=n forces n (a profiler run wants few). */
static inline int bench_reps(double us_per_call, double budget_ms, int lo, int hi)
{
    const char *force = getenv("F8_BENCH_REPS");
    if (force && atoi(force) > 0) return atoi(force);
    int n = (int)(budget_ms * 1e3 / (us_per_call > 0.1 ? us_per_call : 0.1));
    return n < lo ? lo : (n > hi ? hi : n);
}

/* Device-to-device copy bandwidth, counting bytes read plus written, of a
 * 1 GiB cudaMemcpyAsync (median of 10): the ceiling for memory-bound kernels. */
static inline double bench_copy_gbps(void *stream)
{
    const size_t bytes = (size_t)1 << 30;
    cudaStream_t s = (cudaStream_t)stream;
    void *src = bench_alloc_random(stream, F8_DTYPE_FP32, (int64_t)(bytes / 4), 99, 1.0f), *dst = NULL;
    BENCH_CUDA(cudaMalloc(&dst, bytes));
    cudaEvent_t a, b;
    BENCH_CUDA(cudaEventCreate(&a));
    BENCH_CUDA(cudaEventCreate(&b));
    double v[10];
    for (int i = -2; i < 10; i++) {
        BENCH_CUDA(cudaEventRecord(a, s));
        BENCH_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
        BENCH_CUDA(cudaEventRecord(b, s));
        BENCH_CUDA(cudaEventSynchronize(b));
        float ms = 0;
        BENCH_CUDA(cudaEventElapsedTime(&ms, a, b));
        if (i >= 0) v[i] = 2.0 * (double)bytes / (ms * 1e-3) / 1e9;
    }
    BENCH_CUDA(cudaEventDestroy(a));
    BENCH_CUDA(cudaEventDestroy(b));
    BENCH_CUDA(cudaFree(src));
    BENCH_CUDA(cudaFree(dst));
    return bench_median(v, 10);
}

/* Nodes of a graph captured from `n` calls on stream: kernels and the rest
 * (memset, memcpy, ...). Returns 0, or -1 if the capture failed (then the
 * error is cleared and the counts are 0). */
static inline int bench_capture_count(void *stream, bench_call call, void *arg, int n, int *kernels, int *others)
{
    cudaStream_t s = (cudaStream_t)stream;
    cudaGraph_t g = NULL;
    *kernels = *others = 0;
    BENCH_CUDA(cudaStreamSynchronize(s));
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    for (int i = 0; i < n; i++) call(arg, i);
    if (cudaStreamEndCapture(s, &g) != cudaSuccess || !g) {
        (void)cudaGetLastError();
        return -1;
    }
    size_t count = 0;
    BENCH_CUDA(cudaGraphGetNodes(g, NULL, &count));
    cudaGraphNode_t *nodes = malloc(sizeof(cudaGraphNode_t) * (count ? count : 1));
    if (!nodes) exit(1);
    BENCH_CUDA(cudaGraphGetNodes(g, nodes, &count));
    for (size_t i = 0; i < count; i++) {
        enum cudaGraphNodeType t;
        BENCH_CUDA(cudaGraphNodeGetType(nodes[i], &t));
        if (t == cudaGraphNodeTypeKernel)
            (*kernels)++;
        else if (t != cudaGraphNodeTypeEmpty)
            (*others)++;
    }
    free(nodes);
    BENCH_CUDA(cudaGraphDestroy(g));
    return 0;
}

/* The floor of host time: one empty kernel launch, and one bare cuBLASLt
 * FP8 matmul call with a cached plan at (m, n, k) = (64, 1024, 1024), the
 * shape of the eager layer benchmarked against it; both medians of host time
 * with the GPU kept busy. lt_nodes: graph nodes one such matmul call makes. */
typedef struct bench_floor {
    double empty_launch_us, lt_matmul_us;
    int lt_nodes;
} bench_floor;

typedef struct bench_floor_arg {
    void *stream;
    bench_lt *lt;
    void *a, *b, *d;
} bench_floor_arg;

static inline void bench_floor_empty_call(void *p, int i)
{
    (void)i;
    bench_empty_launch(((bench_floor_arg *)p)->stream);
}

static inline void bench_floor_lt_call(void *p, int i)
{
    bench_floor_arg *f = p;
    (void)i;
    if (bench_lt_run(f->lt, f->a, f->b, f->d) != 0) {
        fprintf(stderr, "bare cublasLtMatmul failed\n");
        exit(1);
    }
}

static inline bench_floor bench_host_floor(void *stream)
{
    bench_floor r;
    bench_floor_arg f = {stream, NULL, NULL, NULL, NULL};
    r.empty_launch_us = bench_time(stream, bench_floor_empty_call, &f, 300).host_us;
    float *sc = bench_alloc_random(stream, F8_DTYPE_FP32, 1, 5, 1.0f);
    bench_lt_config c = {64, 1024, 1024, F8_DTYPE_E4M3, F8_DTYPE_BF16, 1, (size_t)32 << 20, sc, sc};
    if (bench_lt_create(&c, stream, &f.lt) != 0) exit(1);
    f.a = bench_alloc_random(stream, F8_DTYPE_E4M3, 64 * 1024, 6, 1.0f);
    f.b = bench_alloc_random(stream, F8_DTYPE_E4M3, 1024 * 1024, 7, 1.0f);
    BENCH_CUDA(cudaMalloc(&f.d, 64 * 1024 * 2));
    r.lt_matmul_us = bench_time(stream, bench_floor_lt_call, &f, 200).host_us;
    int others = 0;
    if (bench_capture_count(stream, bench_floor_lt_call, &f, 1, &r.lt_nodes, &others) != 0) r.lt_nodes = 1;
    r.lt_nodes += others;
    bench_lt_destroy(f.lt);
    BENCH_CUDA(cudaFree(sc));
    BENCH_CUDA(cudaFree(f.a));
    BENCH_CUDA(cudaFree(f.b));
    BENCH_CUDA(cudaFree(f.d));
    return r;
}

/* JSON lines, collected while the table prints and written after it. */
typedef struct bench_log {
    char *buf;
    size_t len, cap;
} bench_log;

static inline void bench_json(bench_log *l, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n > sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    if (l->len + (size_t)n + 1 > l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8192;
        while (cap < l->len + (size_t)n + 1) cap *= 2;
        char *b = realloc(l->buf, cap);
        if (!b) exit(1);
        l->buf = b;
        l->cap = cap;
    }
    memcpy(l->buf + l->len, line, (size_t)n);
    l->len += (size_t)n;
    l->buf[l->len] = 0;
}

static inline void bench_log_flush(bench_log *l)
{
    if (l->buf) fputs(l->buf, stdout);
    free(l->buf);
    l->buf = NULL;
    l->len = l->cap = 0;
}

/* Measure the host-time floor and print it as a line and a JSON record. */
static inline bench_floor bench_report_floor(void *stream, bench_log *log)
{
    bench_floor fl = bench_host_floor(stream);
    printf("host-time floor: empty kernel launch %.2f us; bare cached cublasLtMatmul (fp8 64x1024x1024) %.2f us, "
           "%d graph node(s) per call\n\n",
           fl.empty_launch_us, fl.lt_matmul_us, fl.lt_nodes);
    bench_json(log, "{\"bench\":\"host_floor\",\"empty_launch_us\":%.3f,\"lt_matmul_us\":%.3f,\"lt_nodes\":%d}",
               fl.empty_launch_us, fl.lt_matmul_us, fl.lt_nodes);
    return fl;
}

#endif /* !__CUDACC__ */

#endif /* F8_BENCH_UTIL_H */
