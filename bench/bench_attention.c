/*
 * bench_attention.c — f8_attention forward and backward on the GPU, BF16, at
 * the GPT trainer's two shapes: GPT-2 124M (B 16, 12 heads, S 1024, head_dim
 * 64) and the 1.3B configuration (B 8, 16 heads, S 1024, head_dim 128).
 *
 * Per call: the GPU time (median of CUDA-event intervals, bench_util.h) and
 * TFLOP/s with causal FLOPs counted as FlashAttention does: forward
 * 2·B·nh·S²·hd (the two S×S×hd products, half of the dense 4·B·nh·S²·hd),
 * backward 2.5× that (five products; the deterministic kernels run seven,
 * recomputing s and dP, so their own rate is 7/5 of the one printed). The
 * ceiling is a raw cuBLASLt BF16 GEMM (8192³) measured in the same run.
 * Targets on the H200: forward >= 300 TFLOP/s and backward >= 200 at
 * head_dim 128; as high as we can at 64. Inputs are random (never zeros);
 * every operand of these shapes is larger than L2 (qkv 75-100 MB).
 */
#include "bench_util.h"

typedef struct att_bench {
    f8_attention *a;
    f8_attention_saved *s;
    f8_tensor qkv, y, dy, dqkv;
    int64_t B, S;
    f8_ctx *ctx;
} att_bench;

static void fwd_call(void *p, int i)
{
    att_bench *b = p;
    (void)i;
    BENCH_F8(b->ctx, f8_attention_forward(b->a, &b->qkv, b->B, b->S, &b->y, b->s));
}

static void bwd_call(void *p, int i)
{
    att_bench *b = p;
    (void)i;
    BENCH_F8(b->ctx, f8_attention_backward(b->a, b->s, &b->dy, &b->dqkv));
}

typedef struct lt_arg {
    bench_lt *lt;
    void *a, *b, *d;
} lt_arg;

static void lt_call(void *p, int i)
{
    lt_arg *l = p;
    (void)i;
    if (bench_lt_run(l->lt, l->a, l->b, l->d) != 0) {
        fprintf(stderr, "cublasLtMatmul failed\n");
        exit(1);
    }
}

/* Raw cuBLASLt BF16 GEMM rate at 8192³ (TFLOP/s): the tensor-core ceiling. */
static double gemm_ceiling(void *stream)
{
    const int64_t n = 8192;
    lt_arg l;
    bench_lt_config c = {n, n, n, F8_DTYPE_BF16, F8_DTYPE_BF16, 0, (size_t)32 << 20, NULL, NULL};
    if (bench_lt_create(&c, stream, &l.lt) != 0) exit(1);
    l.a = bench_alloc_random(stream, F8_DTYPE_BF16, n * n, 11, 1.0f);
    l.b = bench_alloc_random(stream, F8_DTYPE_BF16, n * n, 12, 1.0f);
    BENCH_CUDA(cudaMalloc(&l.d, (size_t)(n * n) * 2));
    const bench_times t = bench_time(stream, lt_call, &l, 20);
    bench_lt_destroy(l.lt);
    BENCH_CUDA(cudaFree(l.a));
    BENCH_CUDA(cudaFree(l.b));
    BENCH_CUDA(cudaFree(l.d));
    return 2.0 * (double)n * n * n / (t.gpu_us * 1e-6) * 1e-12;
}

static void run_shape(f8_ctx *ctx, bench_log *log, int64_t B, int64_t nh, int64_t S, int64_t hd, double ceiling)
{
    void *stream = f8_ctx_stream(ctx);
    const int64_t T = B * S, C = nh * hd;
    att_bench b;
    memset(&b, 0, sizeof b);
    b.ctx = ctx;
    b.B = B;
    b.S = S;
    f8_attention_config cfg = f8_attention_config_default(nh, hd, B, S);
    BENCH_F8(ctx, f8_attention_create(ctx, &cfg, &b.a));
    BENCH_F8(ctx, f8_attention_saved_create(b.a, &b.s));
    void *qkv = bench_alloc_random(stream, F8_DTYPE_BF16, T * 3 * C, 1, 1.0f);
    void *dy = bench_alloc_random(stream, F8_DTYPE_BF16, T * C, 2, 1.0f);
    void *y = NULL, *dqkv = NULL;
    BENCH_CUDA(cudaMalloc(&y, (size_t)(T * C) * 2));
    BENCH_CUDA(cudaMalloc(&dqkv, (size_t)(T * 3 * C) * 2));
    b.qkv = f8_tensor_make(qkv, F8_DTYPE_BF16, T, 3 * C);
    b.dy = f8_tensor_make(dy, F8_DTYPE_BF16, T, C);
    b.y = f8_tensor_make(y, F8_DTYPE_BF16, T, C);
    b.dqkv = f8_tensor_make(dqkv, F8_DTYPE_BF16, T, 3 * C);

    const double fwd_flop = 2.0 * (double)B * nh * (double)S * S * hd, bwd_flop = 2.5 * fwd_flop;
    const bench_times tf = bench_time(stream, fwd_call, &b, 50);
    const bench_times tb = bench_time(stream, bwd_call, &b, 50);
    const double ff = fwd_flop / (tf.gpu_us * 1e-6) * 1e-12, fb = bwd_flop / (tb.gpu_us * 1e-6) * 1e-12;
    printf("B %2lld nh %2lld S %4lld hd %3lld | forward %8.1f us %6.1f TFLOP/s (%4.1f%% of GEMM) | backward %8.1f us %6.1f "
           "TFLOP/s (%4.1f%%) | fwd+bwd %8.1f us, host %.1f + %.1f us/call\n",
           (long long)B, (long long)nh, (long long)S, (long long)hd, tf.gpu_us, ff, 100 * ff / ceiling, tb.gpu_us, fb,
           100 * fb / ceiling, tf.gpu_us + tb.gpu_us, tf.host_us, tb.host_us);
    bench_json(log,
               "{\"bench\":\"attention\",\"B\":%lld,\"nh\":%lld,\"S\":%lld,\"hd\":%lld,\"fwd_us\":%.2f,\"fwd_tflops\":%.1f,"
               "\"bwd_us\":%.2f,\"bwd_tflops\":%.1f,\"gemm_tflops\":%.1f}",
               (long long)B, (long long)nh, (long long)S, (long long)hd, tf.gpu_us, ff, tb.gpu_us, fb, ceiling);
    f8_attention_saved_destroy(b.s);
    f8_attention_destroy(b.a);
    BENCH_CUDA(cudaFree(qkv));
    BENCH_CUDA(cudaFree(dy));
    BENCH_CUDA(cudaFree(y));
    BENCH_CUDA(cudaFree(dqkv));
}

int main(void)
{
    f8_ctx *ctx = bench_ctx_or_skip("bench_attention");
    if (!ctx) return 0;
    bench_print_device("bench_attention");
    bench_log log = {0};
    const double ceiling = gemm_ceiling(f8_ctx_stream(ctx));
    printf("ceiling: raw cuBLASLt BF16 GEMM 8192^3 %.1f TFLOP/s\n", ceiling);
    printf("causal FLOPs: forward 2*B*nh*S^2*hd, backward 2.5x forward; targets (hd 128): forward >= 300, backward >= 200\n");
    run_shape(ctx, &log, 16, 12, 1024, 64, ceiling);
    run_shape(ctx, &log, 8, 16, 1024, 128, ceiling);
    bench_log_flush(&log);
    f8_ctx_destroy(ctx);
    return 0;
}
