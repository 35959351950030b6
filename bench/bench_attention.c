/*
 * bench_attention.c — f8_attention forward and backward on the GPU, BF16, at
 * the GPT trainer's two shapes: GPT-2 124M (B 16, 12 heads, S 1024, head_dim
 * 64) and the 1.3B configuration (B 8, 16 heads, S 1024, head_dim 128), and
 * two long-sequence ones (B 4 S 4096, B 2 S 8192; 16 heads, head_dim 128),
 * each on f8's own kernels, on cuDNN (deterministic backward: the default
 * path) and on cuDNN with its atomic backward, side by side; then FP8
 * attention (f8_attention_config.fp8, as `f8_train --fp8-attention on`):
 * the cast of qkv, cuDNN's FP8 forward where the loaded cuDNN is >= 9.19
 * (else f8's FP8 kernel; the row says which ran) and its finish kernel; the
 * backward the BF16 one on the dequantized codes; its ratios are to the
 * BF16 cuDNN row. Beside it: the FP8 forward split into its two ops (the
 * cast of qkv alone; the FP8 attention op alone: prep, cuDNN's FP8 graph,
 * finish), so the cost of the cast shows apart from cuDNN's; and the FP8
 * backward (fp8_backward = 1, TE's NVTE_FP8_DPA_BWD=1: the cast of dy, then
 * cuDNN's FP8 backward at head_dim 128 where cuDNN >= 9.19, else the BF16
 * backward of the dequantized codes; the row says which ran).
 *
 * Per call: the GPU time (median of CUDA-event intervals, bench_util.h) and
 * TFLOP/s with causal FLOPs counted as FlashAttention does: forward
 * 2·B·nh·S²·hd (the two S×S×hd products, half of the dense 4·B·nh·S²·hd),
 * backward 2.5× that (five products; the deterministic kernels run seven,
 * recomputing s and dP, so their own rate is 7/5 of the one printed). The
 * ceiling is a raw cuBLASLt BF16 GEMM (8192³) measured in the same run.
 * Targets on the H200: forward >= 300 TFLOP/s and backward >= 200 at
 * head_dim 128; as high as we can at 64. Inputs are random (never zeros);
 * every operand of these shapes is larger than L2 (qkv 75-100 MB). The
 * attention is configured as the GPT trainer configures it (output_kept: the
 * backward reads y, no copy of it is saved). tools/peer_attention.py times
 * PyTorch's cuDNN and FlashAttention-2 SDPA at the same shapes and prints
 * f8's ratio to cuDNN's from this program's JSON lines.
 */
#include <math.h>

#include "bench_util.h"
#include "core/backend.h"
#include "core/ops.h"

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

/* The FP8 forward's two ops, for timing each alone: the cast of qkv into
 * the saved codes and the FP8 attention op on them, with the args
 * f8_attention_forward builds (src/nn/attention.c; output_kept: no o). */
typedef struct fp8_ops {
    f8_ctx *ctx;
    f8i_cast_args cast;
    f8i_attn_fwd_args fwd;
} fp8_ops;

static void cast_call(void *p, int i)
{
    fp8_ops *o = p;
    (void)i;
    BENCH_F8(o->ctx, f8i_op_cast(o->ctx, &o->cast));
}

static void op_call(void *p, int i)
{
    fp8_ops *o = p;
    (void)i;
    BENCH_F8(o->ctx, f8i_op_attn_fwd(o->ctx, &o->fwd));
}

static void fp8_ops_of(att_bench *b, int64_t nh, int64_t hd, fp8_ops *o)
{
    f8_ctx *ctx = b->ctx;
    f8_slot sl[3];
    f8i_attn_saved_at at;
    BENCH_F8(ctx, f8_attention_fp8_slots(b->a, sl));
    f8i_attention_saved_parts(b->s, &at);
    memset(o, 0, sizeof *o);
    o->ctx = ctx;
    o->cast.src = b->qkv.data;
    o->cast.src_dtype = F8_DTYPE_BF16;
    o->cast.rows = b->B * b->S;
    o->cast.cols = 3 * nh * hd;
    o->cast.out_dtype = F8_DTYPE_E4M3;
    o->cast.out = at.qkv8;
    o->cast.scale = f8i_slot_scale(ctx, sl[0]);
    o->cast.amax = f8i_slot_amax(ctx, sl[0]);
    o->cast.scale_inv = at.qkv_scale_inv;
    f8i_attn_fwd_args *f = &o->fwd;
    f->batch = b->B, f->seq = b->S, f->n_head = nh, f->head_dim = hd, f->n_kv_head = nh, f->dtype = F8_DTYPE_BF16;
    f->scale = 1.0f / sqrtf((float)hd);
    f->scale_log2 = f->scale * 1.44269504088896341f;
    f->qkv = at.qkv8, f->y = b->y.data, f->lse = at.lse, f->fp8 = 1, f->qkv_scale_inv = at.qkv_scale_inv;
    f->s_scale = f8i_slot_scale(ctx, sl[1]), f->s_scale_inv = ctx->dir[F8_DIR_FORWARD].scale_inv + sl[1].index;
    f->o_scale = f8i_slot_scale(ctx, sl[2]), f->o_scale_inv = ctx->dir[F8_DIR_FORWARD].scale_inv + sl[2].index;
    f->s_amax = f8i_slot_amax(ctx, sl[1]), f->o_amax = f8i_slot_amax(ctx, sl[2]);
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

/* The rows of a shape: three BF16 paths. */
enum { N_ROWS = 3 };

static const char *mode_name(int row)
{
    return row == F8I_ATTN_OWN ? "f8-own" : row == F8I_ATTN_AUTO ? "cuDNN" : "cuDNN-nondet";
}

static const char *path_name(int path) { return path == F8I_ATTN_PATH_CUDNN ? "cuDNN" : path == F8I_ATTN_PATH_OWN ? "own" : "?"; }

/* One untimed forward and backward (plans are built on a shape's first
 * call), the paths they took, then both timed. */
static void time_calls(att_bench *b, void *stream, int *pf, int *pb, bench_times *tf, bench_times *tb)
{
    fwd_call(b, 0);
    *pf = f8i_cuda_attn_last_path(b->ctx);
    bwd_call(b, 0);
    *pb = f8i_cuda_attn_last_path(b->ctx);
    BENCH_CUDA(cudaStreamSynchronize((cudaStream_t)stream));
    *tf = bench_time(stream, fwd_call, b, 50);
    *tb = bench_time(stream, bwd_call, b, 50);
}

/* One shape on each path: f8's kernels, cuDNN (deterministic backward, the
 * default), cuDNN with its atomic backward (opt-in). The path each call
 * actually took is printed beside its times. */
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
    cfg.output_kept = 1; /* as the GPT trainer runs it: no copy of y saved for the backward */
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
    static const int modes[N_ROWS] = {F8I_ATTN_OWN, F8I_ATTN_AUTO, F8I_ATTN_CUDNN_NONDET};
    double ff_own = 0, fb_own = 0, tf_bf16 = 0, tb_bf16 = 0;
    for (int m = 0; m < N_ROWS; m++) {
        f8i_cuda_attn_set_mode(ctx, modes[m]);
        int pf, pb;
        bench_times tf, tb;
        time_calls(&b, stream, &pf, &pb, &tf, &tb);
        const double ff = fwd_flop / (tf.gpu_us * 1e-6) * 1e-12, fb = bwd_flop / (tb.gpu_us * 1e-6) * 1e-12;
        if (m == 0) ff_own = ff, fb_own = fb;
        if (modes[m] == F8I_ATTN_AUTO) tf_bf16 = tf.gpu_us, tb_bf16 = tb.gpu_us;
        printf("B %2lld nh %2lld S %4lld hd %3lld %-12s (ran fwd %-5s bwd %-5s) | forward %8.1f us %6.1f TFLOP/s (%4.1f%% "
               "of GEMM, %4.2fx own) | backward %8.1f us %6.1f TFLOP/s (%4.1f%%, %4.2fx own) | host %.1f + %.1f us/call\n",
               (long long)B, (long long)nh, (long long)S, (long long)hd, mode_name(modes[m]), path_name(pf), path_name(pb),
               tf.gpu_us, ff, 100 * ff / ceiling, ff / ff_own, tb.gpu_us, fb, 100 * fb / ceiling, fb / fb_own, tf.host_us,
               tb.host_us);
        if (modes[m] != F8I_ATTN_OWN && (pf != F8I_ATTN_PATH_CUDNN || pb != F8I_ATTN_PATH_CUDNN))
            printf("    cuDNN did not take every call: %s\n", f8i_cuda_attn_info(ctx, NULL));
        bench_json(log,
                   "{\"bench\":\"attention\",\"path\":\"%s\",\"ran_fwd\":\"%s\",\"ran_bwd\":\"%s\",\"B\":%lld,\"nh\":%lld,"
                   "\"S\":%lld,\"hd\":%lld,\"fwd_us\":%.2f,\"fwd_tflops\":%.1f,\"bwd_us\":%.2f,\"bwd_tflops\":%.1f,"
                   "\"gemm_tflops\":%.1f}",
                   mode_name(modes[m]), path_name(pf), path_name(pb), (long long)B, (long long)nh, (long long)S, (long long)hd,
                   tf.gpu_us, ff, tb.gpu_us, fb, ceiling);
    }
    printf("    %s\n", f8i_cuda_attn_info(ctx, NULL));
    f8i_cuda_attn_set_mode(ctx, -1);
    f8_attention_saved_destroy(b.s);
    f8_attention_destroy(b.a);

    /* FP8 attention, default path */
    cfg.fp8 = 1;
    BENCH_F8(ctx, f8_attention_create(ctx, &cfg, &b.a));
    BENCH_F8(ctx, f8_attention_saved_create(b.a, &b.s));
    int pf, pb;
    bench_times tf, tb;
    time_calls(&b, stream, &pf, &pb, &tf, &tb);
    const double ff = fwd_flop / (tf.gpu_us * 1e-6) * 1e-12, fb = bwd_flop / (tb.gpu_us * 1e-6) * 1e-12;
    printf("B %2lld nh %2lld S %4lld hd %3lld %-12s (ran fwd %-5s bwd %-5s) | forward %8.1f us %6.1f TFLOP/s (%4.2fx BF16 "
           "cuDNN) | backward %8.1f us %6.1f TFLOP/s (%4.2fx BF16 cuDNN)\n",
           (long long)B, (long long)nh, (long long)S, (long long)hd, "FP8", path_name(pf), path_name(pb), tf.gpu_us, ff,
           tf_bf16 / tf.gpu_us, tb.gpu_us, fb, tb_bf16 / tb.gpu_us);
    bench_json(log,
               "{\"bench\":\"attention\",\"path\":\"FP8\",\"ran_fwd\":\"%s\",\"ran_bwd\":\"%s\",\"B\":%lld,\"nh\":%lld,"
               "\"S\":%lld,\"hd\":%lld,\"fwd_us\":%.2f,\"fwd_tflops\":%.1f,\"bwd_us\":%.2f,\"bwd_tflops\":%.1f,"
               "\"fwd_x_bf16\":%.3f,\"bwd_x_bf16\":%.3f}",
               path_name(pf), path_name(pb), (long long)B, (long long)nh, (long long)S, (long long)hd, tf.gpu_us, ff, tb.gpu_us,
               fb, tf_bf16 / tf.gpu_us, tb_bf16 / tb.gpu_us);
    /* the same forward as its two ops, each alone */
    fp8_ops ops;
    fp8_ops_of(&b, nh, hd, &ops);
    const bench_times tc = bench_time(stream, cast_call, &ops, 50), to = bench_time(stream, op_call, &ops, 50);
    const double fo = fwd_flop / (to.gpu_us * 1e-6) * 1e-12;
    printf("    FP8 forward in parts: cast of qkv %8.1f us (%.0f GB/s: 3 bytes an element) | FP8 attention op %8.1f us "
           "%6.1f TFLOP/s (%4.2fx BF16 cuDNN; prep, %s, finish)\n",
           tc.gpu_us, (double)(b.B * b.S * 3 * nh * hd) * 3.0 / (tc.gpu_us * 1e-6) * 1e-9, to.gpu_us, fo,
           tf_bf16 / to.gpu_us, path_name(f8i_cuda_attn_last_path(ctx)));
    bench_json(log,
               "{\"bench\":\"attention\",\"path\":\"FP8 parts\",\"B\":%lld,\"nh\":%lld,\"S\":%lld,\"hd\":%lld,"
               "\"cast_us\":%.2f,\"op_us\":%.2f,\"op_tflops\":%.1f,\"op_x_bf16\":%.3f}",
               (long long)B, (long long)nh, (long long)S, (long long)hd, tc.gpu_us, to.gpu_us, fo, tf_bf16 / to.gpu_us);
    f8_attention_saved_destroy(b.s);
    f8_attention_destroy(b.a);

    /* the FP8 backward (fp8_backward = 1) */
    cfg.fp8_backward = 1;
    BENCH_F8(ctx, f8_attention_create(ctx, &cfg, &b.a));
    BENCH_F8(ctx, f8_attention_saved_create(b.a, &b.s));
    time_calls(&b, stream, &pf, &pb, &tf, &tb);
    const double fb8 = bwd_flop / (tb.gpu_us * 1e-6) * 1e-12;
    printf("B %2lld nh %2lld S %4lld hd %3lld %-12s (ran fwd %-5s bwd %-5s) | backward %8.1f us %6.1f TFLOP/s (%4.2fx BF16 "
           "cuDNN; with the cast of dy)\n",
           (long long)B, (long long)nh, (long long)S, (long long)hd, "FP8 bwd", path_name(pf), path_name(pb), tb.gpu_us, fb8,
           tb_bf16 / tb.gpu_us);
    bench_json(log,
               "{\"bench\":\"attention\",\"path\":\"FP8 bwd\",\"ran_bwd\":\"%s\",\"B\":%lld,\"nh\":%lld,\"S\":%lld,"
               "\"hd\":%lld,\"bwd_us\":%.2f,\"bwd_tflops\":%.1f,\"bwd_x_bf16\":%.3f}",
               path_name(pb), (long long)B, (long long)nh, (long long)S, (long long)hd, tb.gpu_us, fb8, tb_bf16 / tb.gpu_us);
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
    printf("paths: f8-own (attention_path OWN), cuDNN (the default: deterministic backward), cuDNN-nondet"
           " (attention_nondeterministic:"
           " atomic dQ, not reproducible); the cuDNN rates include f8's small L/O kernels around cuDNN's\n");
    run_shape(ctx, &log, 16, 12, 1024, 64, ceiling);
    run_shape(ctx, &log, 8, 16, 1024, 128, ceiling);
    run_shape(ctx, &log, 4, 16, 4096, 128, ceiling);
    run_shape(ctx, &log, 2, 16, 8192, 128, ceiling);
    bench_log_flush(&log);
    f8_ctx_destroy(ctx);
    return 0;
}
