/*
 * bench_modules.c — the fused modules' kernels and f8_module on the GPU.
 *
 * 1. Memory-bound kernels, called through the backend table (ctx->be) with the
 *    dtypes the modules use, against the measured device-to-device copy
 *    bandwidth: the norm forward with FP8 output (x BF16 8192 x 4096, gamma/
 *    beta BF16, mu and rsigma written; target >= 75% of copy), the norm
 *    backward (dy BF16 as both modules pass it with BF16 parameters, FP32
 *    as with FP32 ones or LayerNormLinear's return_layernorm_output), the
 *    activation forward with FP8 output (alone, and with the transposed
 *    codes as the layer writes them when training) and the fused
 *    activation backward (h1 BF16 and da BF16 in; d as E5M2 codes, their
 *    transpose, amax, scale_inv and the BF16 bias gradient out) at the MLP's
 *    8192 tokens x ffn 16384, GELU and SwiGLU; and, for the layer's time
 *    budget, its other non-GEMM ops (a weight's cast + transpose, dy's cast +
 *    transpose + dbias, the transposes of the activation and the norm
 *    output). Bytes are the fewest each op must move: every input read once,
 *    every output written once. Times: the per-call event pair and calls
 *    back to back (bench_util.h); GB/s and the verdict from the latter,
 *    since the event pair adds a few us that are not the kernel's.
 * 2. f8_module forward and forward+backward at hidden 4096, ffn 16384,
 *    tokens 8192, GELU and SwiGLU (fc1 32768 wide), FP8 (param BF16) against
 *    the BF16 path (param BF16, fp8 = 0); x, y, dy, dx BF16; microbatch NONE,
 *    so each forward casts both weights; and FP8 once more with microbatch
 *    NOT_FIRST (row "fp8c"): the cached workspaces, as every microbatch but
 *    the first of a step runs under gradient accumulation. The ratio to the GEMM-only lower
 *    bound: the GEMMs the module itself issued, recorded by a tap on
 *    f8i_op_gemm and replayed alone. The layer call and the replay are
 *    timed in alternation (pairs, the order flipping each pair, CUDA events
 *    around each, the GPU kept busy so no host gap is timed): timed one after
 *    the other, the replay's time moved by 5-20% between runs (clocks under
 *    sustained FP8 GEMM load), enough to flip the verdict. Reported: the
 *    median layer and replay times over the pairs and the median of the
 *    per-pair ratios (with its range); wall time per call from bench_time.
 *    Targets on the H200: FP8 forward+backward >= 1.5x the BF16 path and
 *    within 15% of its GEMM-only bound.
 * 3. Where the FP8 layer's time goes: every backend op of one forward+
 *    backward between CUDA events (a tap on the whole backend table), the
 *    median over a few calls, per op: GEMMs and the rest, their sums, and
 *    what is left of the layer's time (gaps between kernels, the GEMMs
 *    running slower beside the memory-bound ops).
 * Inputs are random (never zeros); at these sizes every operand is several
 * times L2, so no rotation is needed. Runs in well under two minutes.
 *
 * Usage: bench_modules [kernels] [norm] [gelu] [swiglu]   (no argument: all
 * three parts; `norm`: only the norm forward rows;
 * `gelu`/`swiglu` select the f8_module runs). F8_BENCH_RECIPE=current|block
 * runs the same under another recipe (bench_util.h); the op table then names
 * the amax passes, the block casts and, per block GEMM, the path it took
 * (lt: cuBLASLt's block-scaled matmul, own: f8's CUDA-core kernel). Under
 * block the GEMM-only replay has nothing to replay (it records per-tensor
 * GEMMs only): read the op table, not the ratio.
 */
#include "bench_util.h"
#include "core/f8i.h"
#include "core/ops.h"

#define MAX_REC 16
#define NORM_TARGET 0.75
#define SPEEDUP_TARGET 1.5
#define BOUND_TARGET 1.15

/* ------------------------------------------------------------------------ */
/* GEMM tap                                                                  */
/* ------------------------------------------------------------------------ */

/* The backend table with gemm wrapped to record its arguments. File-scope
 * state is fine in a benchmark program (the library keeps none): the wrapper
 * has no other way to find it. */
#define MAX_OPS 60 /* backend ops of one timed layer call, at most */

typedef struct tap {
    const f8i_backend *real;
    f8i_backend table;
    int nrec;
    f8i_gemm_args rec[MAX_REC];
    /* timing mode: an event pair around every op */
    int timing, nops;
    cudaStream_t stream;
    cudaEvent_t ev[2 * MAX_OPS];
    char what[MAX_OPS][64];
} tap;
static tap g_tap;

/* Timing mode: the op's name and shape, and its event before. */
static void op_begin(const char *what)
{
    if (!g_tap.timing || g_tap.nops >= MAX_OPS) return;
    snprintf(g_tap.what[g_tap.nops], sizeof g_tap.what[0], "%s", what);
    BENCH_CUDA(cudaEventRecord(g_tap.ev[2 * g_tap.nops], g_tap.stream));
}

static void op_end(void)
{
    if (!g_tap.timing || g_tap.nops >= MAX_OPS) return;
    BENCH_CUDA(cudaEventRecord(g_tap.ev[2 * g_tap.nops + 1], g_tap.stream));
    g_tap.nops++;
}

/* The op's label for the timing table (its name and shape); NULL for the
 * ops not timed (add, fill, scale updates, training ops), which just run. */
static const char *tap_label(f8i_op_kind kind, const void *args, char *w, size_t n)
{
    switch (kind) {
    case F8I_OP_GEMM: {
        const f8i_gemm_args *a = (const f8i_gemm_args *)args;
        if (a->a_mode != F8I_SCALING_TENSOR) {
            snprintf(w, n, "gemm_block %lldx%lldx%lld %dx%d", (long long)a->m, (long long)a->n, (long long)a->k,
                     f8i_mode_block_rows(a->a_mode), f8i_mode_block_rows(a->b_mode));
            return w;
        }
        if (g_tap.nrec < MAX_REC) g_tap.rec[g_tap.nrec] = *a;
        g_tap.nrec++;
        snprintf(w, n, "gemm %lldx%lldx%lld %s", (long long)a->m, (long long)a->n, (long long)a->k,
                 f8_dtype_name(a->d_dtype));
        return w;
    }
    case F8I_OP_CAST: {
        const f8i_cast_args *a = (const f8i_cast_args *)args;
        if (a->mode != F8I_SCALING_TENSOR) {
            snprintf(w, n, "block_cast%s%s%s %lldx%lld /%d", a->out ? "" : " (t only)", a->out_t ? "+t" : "",
                     a->dbias ? "+dbias" : "", (long long)a->rows, (long long)a->cols, f8i_mode_block_rows(a->mode));
            return w;
        }
        snprintf(w, n, "cast%s%s %lldx%lld", a->out_t ? "+t" : "", a->dbias ? "+dbias" : "", (long long)a->rows,
                 (long long)a->cols);
        return w;
    }
    case F8I_OP_TRANSPOSE_U8: {
        const f8i_transpose_u8_args *a = (const f8i_transpose_u8_args *)args;
        snprintf(w, n, "transpose %lldx%lld", (long long)a->rows, (long long)a->cols);
        return w;
    }
    case F8I_OP_AMAX_SCALE: return "amax_scale";
    case F8I_OP_NORM_FWD: return "norm_fwd";
    case F8I_OP_NORM_BWD:
        return ((const f8i_norm_bwd_args *)args)->dy_dtype == F8_DTYPE_BF16 ? "norm_bwd (dy bf16)"
                                                                             : "norm_bwd (dy fp32)";
    case F8I_OP_ACT_FWD: return ((const f8i_act_fwd_args *)args)->y_t ? "act_fwd +t" : "act_fwd";
    case F8I_OP_ACT_BWD:
        return ((const f8i_act_bwd_args *)args)->dy_dtype == F8_DTYPE_BF16 ? "act_bwd (dy bf16)" : "act_bwd (dy fp32)";
    case F8I_OP_CONVERT: return "convert";
    case F8I_OP_RECIPROCAL: return "reciprocal";
    case F8I_OP_MEMSET_ZERO: return "memset";
    case F8I_OP_COPY: return "copy";
    default: return NULL;
    }
}

static f8_status tap_run(f8_ctx *c, f8i_op_kind kind, const void *args)
{
    char w[64];
    const char *what = tap_label(kind, args, w, sizeof w);
    if (!what) return g_tap.real->run(c, kind, args);
    op_begin(what);
    f8_status st = g_tap.real->run(c, kind, args);
    op_end();
    /* which path a block GEMM took: cuBLASLt (lt) or the CUDA-core fallback (own) */
    if (kind == F8I_OP_GEMM && ((const f8i_gemm_args *)args)->a_mode != F8I_SCALING_TENSOR && g_tap.timing && g_tap.nops > 0) {
        const int path = f8i_cuda_gemm_block_last_path(c);
        char *lab = g_tap.what[g_tap.nops - 1];
        const size_t used = strlen(lab);
        snprintf(lab + used, sizeof g_tap.what[0] - used, "%s", path == 2 ? " lt" : path == 1 ? " own" : "");
    }
    return st;
}

static void tap_install(f8_ctx *ctx)
{
    g_tap.real = ctx->be;
    g_tap.table = *ctx->be;
    g_tap.table.run = tap_run;
    g_tap.nrec = 0;
    g_tap.timing = 0;
    ctx->be = &g_tap.table;
}

static void tap_remove(f8_ctx *ctx) { ctx->be = g_tap.real; }

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

enum kop { K_NORM_FWD, K_NORM_BWD, K_ACT_FWD, K_ACT_BWD, K_CAST_T, K_TRANSPOSE };

typedef struct kcase {
    const char *name;
    enum kop op;
    int rms;              /* norms */
    f8_activation act;    /* activations */
    int64_t rows, cols;   /* cols: the norm's width, or the activation's output width (ffn) */
    int dbias;            /* K_CAST_T: with the BF16 dbias (dy's cast) */
    int bf16_dy;          /* K_NORM_BWD, K_ACT_BWD: dy BF16 (else FP32) */
    int with_t;           /* K_ACT_FWD: the transposed codes too */
} kcase;

typedef struct karg {
    f8_ctx *ctx;
    const kcase *kc;
    void *in[2], *in2[2], *out[2], *out_t[2]; /* two sets, call i uses set i % 2 */
    void *gamma, *beta, *dgamma, *dbeta, *dbias;
    float *mu, *rsigma, *scalars; /* scalars: scale, amax, scale_inv */
} karg;

static void kcall(void *p, int i)
{
    karg *k = p;
    f8_ctx *ctx = k->ctx;
    const kcase *kc = k->kc;
    const int s = i & 1;
    switch (kc->op) {
    case K_NORM_FWD: {
        f8i_norm_fwd_args a = {.x = k->in[s], .x_dtype = F8_DTYPE_BF16, .rows = kc->rows, .cols = kc->cols,
                               .gamma = k->gamma, .beta = k->beta, .param_dtype = F8_DTYPE_BF16, .rms = kc->rms,
                               .eps = 1e-5f, .y = k->out[s], .y_dtype = F8_DTYPE_E4M3, .scale = k->scalars,
                               .amax = k->scalars + 1, .scale_inv = k->scalars + 2,
                               .mu = kc->rms ? NULL : k->mu, .rsigma = k->rsigma};
        BENCH_F8(ctx, f8i_op_norm_fwd(ctx, &a));
        break;
    }
    case K_NORM_BWD: {
        /* as the modules call it: dln BF16 (or FP32: FP32 parameters, return_layernorm_output), x BF16, dx BF16,
         * BF16 grads accumulated */
        f8i_norm_bwd_args a = {.dy = k->in2[s], .dy_dtype = kc->bf16_dy ? F8_DTYPE_BF16 : F8_DTYPE_FP32,
                               .x = k->in[s], .x_dtype = F8_DTYPE_BF16,
                               .rows = kc->rows, .cols = kc->cols, .mu = kc->rms ? NULL : k->mu,
                               .rsigma = k->rsigma, .gamma = k->gamma, .param_dtype = F8_DTYPE_BF16,
                               .rms = kc->rms, .dx = k->out[s], .dx_dtype = F8_DTYPE_BF16, .dgamma = k->dgamma,
                               .dbeta = kc->rms ? NULL : k->dbeta, .accumulate = 1,
                               .workspace = ctx->scratch, .workspace_bytes = ctx->scratch_bytes};
        BENCH_F8(ctx, f8i_op_norm_bwd(ctx, &a));
        break;
    }
    case K_ACT_FWD: {
        f8i_act_fwd_args a = {.act = kc->act, .x = k->in[s], .x_dtype = F8_DTYPE_BF16, .rows = kc->rows,
                              .cols = kc->cols, .y = k->out[s], .y_dtype = F8_DTYPE_E4M3,
                              .y_t = kc->with_t ? k->out_t[s] : NULL, .scale = k->scalars,
                              .amax = k->scalars + 1, .scale_inv = k->scalars + 2};
        BENCH_F8(ctx, f8i_op_act_fwd(ctx, &a));
        break;
    }
    case K_CAST_T: {
        f8i_cast_args a = {.src = k->in[s], .src_dtype = F8_DTYPE_BF16, .rows = kc->rows, .cols = kc->cols,
                           .out_dtype = kc->dbias ? F8_DTYPE_E5M2 : F8_DTYPE_E4M3, .out = k->out[s],
                           .out_t = k->out_t[s], .scale = k->scalars, .amax = k->scalars + 1,
                           .scale_inv = k->scalars + 2, .dbias = kc->dbias ? k->dbias : NULL,
                           .dbias_dtype = F8_DTYPE_BF16, .dbias_accumulate = 0,
                           .workspace = ctx->scratch, .workspace_bytes = ctx->scratch_bytes};
        BENCH_F8(ctx, f8i_op_cast(ctx, &a));
        break;
    }
    case K_TRANSPOSE:
        BENCH_F8(ctx, f8i_op_transpose_u8(ctx, k->in[s], k->out[s], kc->rows, kc->cols, NULL));
        break;
    default: {
        f8i_act_bwd_args a = {.act = kc->act, .x = k->in[s], .x_dtype = F8_DTYPE_BF16, .dy = k->in2[s],
                              .dy_dtype = kc->bf16_dy ? F8_DTYPE_BF16 : F8_DTYPE_FP32, .rows = kc->rows, .cols = kc->cols, .out = k->out[s],
                              .out_t = k->out_t[s], .out_dtype = F8_DTYPE_E5M2, .scale = k->scalars,
                              .amax = k->scalars + 1, .scale_inv = k->scalars + 2, .dbias = k->dbias,
                              .dbias_dtype = F8_DTYPE_BF16, .dbias_accumulate = 1,
                              .workspace = ctx->scratch, .workspace_bytes = ctx->scratch_bytes};
        BENCH_F8(ctx, f8i_op_act_bwd(ctx, &a));
    }
    }
}

/* Fewest bytes: inputs read once, outputs written once (the reduction
 * partials and the amax atomics are the kernel's own overhead). */
static double kbytes(const kcase *kc)
{
    const double R = (double)kc->rows, C = (double)kc->cols, n = R * C;
    const double cin = f8_activation_gated(kc->act) ? 2 * C : C, dys = kc->bf16_dy ? 2 : 4;
    switch (kc->op) {
    case K_NORM_FWD: return 2 * n + n + (kc->rms ? 4 : 8) * R + (kc->rms ? 2 : 4) * C;
    case K_NORM_BWD: return dys * n + 2 * n + 2 * n + (kc->rms ? 4 : 8) * R + (kc->rms ? 6 : 10) * C;
    case K_ACT_FWD: return 2 * R * cin + (kc->with_t ? 2 : 1) * n;
    case K_ACT_BWD: return 2 * R * cin + dys * n + 2 * R * cin + 4 * cin;
    case K_CAST_T: return 2 * n + 2 * n + (kc->dbias ? 2 * C : 0);
    default: return 2 * n; /* K_TRANSPOSE */
    }
}

/* Times kc, prints its row and logs it. */
static void run_kernel(f8_ctx *ctx, bench_log *log, const kcase *kc, double copy_gbps)
{
    void *stream = f8_ctx_stream(ctx);
    const int64_t R = kc->rows, C = kc->cols, Ci = kc->op >= K_ACT_FWD && f8_activation_gated(kc->act) ? 2 * C : C;
    karg k = {.ctx = ctx, .kc = kc};
    for (int s = 0; s < 2; s++) {
        k.in[s] = bench_alloc_random(stream, F8_DTYPE_BF16, R * Ci, 10 + (uint64_t)s, 2.0f);
        if (kc->op == K_NORM_BWD || kc->op == K_ACT_BWD)
            k.in2[s] = bench_alloc_random(stream, kc->bf16_dy ? F8_DTYPE_BF16 : F8_DTYPE_FP32, R * C,
                                          20 + (uint64_t)s, 1.0f);
        const size_t out_bytes = (size_t)(R * (kc->op == K_ACT_BWD ? Ci : C)) * (kc->op == K_NORM_BWD ? 2 : 1);
        BENCH_CUDA(cudaMalloc(&k.out[s], out_bytes));
        if (kc->op == K_ACT_BWD || kc->op == K_CAST_T || (kc->op == K_ACT_FWD && kc->with_t))
            BENCH_CUDA(cudaMalloc(&k.out_t[s], out_bytes));
    }
    k.gamma = bench_alloc_random(stream, F8_DTYPE_BF16, C, 30, 1.0f);
    k.beta = bench_alloc_random(stream, F8_DTYPE_BF16, C, 31, 0.3f);
    k.dgamma = bench_alloc_random(stream, F8_DTYPE_BF16, C, 32, 1.0f);
    k.dbeta = bench_alloc_random(stream, F8_DTYPE_BF16, C, 33, 1.0f);
    k.dbias = bench_alloc_random(stream, F8_DTYPE_BF16, Ci, 34, 1.0f);
    k.mu = bench_alloc_random(stream, F8_DTYPE_FP32, R, 35, 0.1f);
    k.rsigma = bench_alloc_random(stream, F8_DTYPE_FP32, R, 36, 0.1f); /* |rsigma| ~ 0.1: finite outputs */
    const float scalars[3] = {16.0f, 0.0f, 1.0f / 16.0f};
    BENCH_CUDA(cudaMalloc((void **)&k.scalars, sizeof scalars));
    BENCH_CUDA(cudaMemcpy(k.scalars, scalars, sizeof scalars, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaStreamSynchronize((cudaStream_t)stream));

    const double bytes = kbytes(kc);
    bench_times t = bench_time(stream, kcall, &k, bench_reps(bytes / 3e3, 40, 10, 100));
    /* Judged on the back-to-back time: the per-call event pair adds a few us
     * (bench_util.h), which is not the kernel's; both are printed. */
    const double gbps = bytes / (t.b2b_us * 1e-6) / 1e9, frac = gbps / copy_gbps;
    const int judged = kc->op == K_NORM_FWD;
    const char *verdict = judged ? (frac >= NORM_TARGET ? "ok (>= 75%)" : "MISS (< 75%)") : "";
    char variant[32];
    if (kc->op >= K_CAST_T)
        snprintf(variant, sizeof variant, "%s", kc->op == K_TRANSPOSE ? "e4m3" : kc->dbias ? "e5m2+db" : "e4m3");
    else if (kc->op >= K_ACT_FWD)
        snprintf(variant, sizeof variant, "%s%s%s", kc->act == F8_ACT_SWIGLU ? "swiglu" : "gelu",
                 kc->with_t ? "+t" : "", kc->bf16_dy ? "/bf16" : "");
    else if (kc->op == K_NORM_FWD)
        snprintf(variant, sizeof variant, "%s", kc->rms ? "rms" : "ln");
    else
        snprintf(variant, sizeof variant, "%s/%s", kc->rms ? "rms" : "ln", kc->bf16_dy ? "bf16" : "fp32");
    printf("%-22s %-12s %5lldx%-6lld %9.1f %9.1f %9.1f %8.1f %7.1f%%  %s\n", kc->name, variant, (long long)R,
           (long long)C, bytes / 1e6, t.gpu_us, t.b2b_us, gbps, 100 * frac, verdict);
    bench_json(log,
               "{\"bench\":\"%s\",\"variant\":\"%s\",\"shape\":[%lld,%lld],\"bytes\":%.0f,\"gpu_us\":%.3f,"
               "\"b2b_us\":%.3f,\"gbps\":%.1f,\"copy_gbps\":%.1f,\"frac_copy\":%.4f%s}",
               kc->name, variant, (long long)R, (long long)C, bytes, t.gpu_us, t.b2b_us, gbps, copy_gbps, frac,
               judged ? (frac >= NORM_TARGET ? ",\"target\":0.75,\"meets\":true" : ",\"target\":0.75,\"meets\":false")
                      : "");
    for (int s = 0; s < 2; s++) {
        void *bufs[] = {k.in[s], k.in2[s], k.out[s], k.out_t[s]};
        for (int j = 0; j < 4; j++)
            if (bufs[j]) BENCH_CUDA(cudaFree(bufs[j]));
    }
    void *rest[] = {k.gamma, k.beta, k.dgamma, k.dbeta, k.dbias, k.mu, k.rsigma, k.scalars};
    for (int j = 0; j < 8; j++) BENCH_CUDA(cudaFree(rest[j]));
}

/* ------------------------------------------------------------------------ */
/* LayerNormMLP                                                              */
/* ------------------------------------------------------------------------ */

typedef struct marg {
    f8_ctx *ctx;
    f8_module *mlp;
    f8_saved *saved;
    f8_tensor x, y, dy, dx;
    int backward;
    f8_microbatch mb; /* NONE: every forward casts both weights; NOT_FIRST: the cached workspaces */
    f8i_gemm_args rec[2][MAX_REC]; /* [backward]: the GEMMs one call issued */
    int nrec[2];
} marg;

static void mlp_call(void *p, int i)
{
    marg *m = p;
    (void)i;
    BENCH_F8(m->ctx, f8_module_forward(m->mlp, &m->x, &m->y, m->mb, m->saved));
    if (m->backward) BENCH_F8(m->ctx, f8_module_backward(m->mlp, m->saved, &m->dy, &m->dx));
}

static void gemms_call(void *p, int i)
{
    marg *m = p;
    (void)i;
    for (int j = 0; j < m->nrec[m->backward]; j++) BENCH_F8(m->ctx, f8i_op_gemm(m->ctx, &m->rec[m->backward][j]));
}

/* One (layer call, GEMM-only replay) timing over `pairs` pairs. */
typedef struct ptimes {
    double layer_us, gemm_us;        /* medians over the pairs */
    double ratio, ratio_lo, ratio_hi; /* median, min and max of layer/gemm per pair */
    int pairs;
} ptimes;

/* The layer call and its GEMM-only replay in alternation: pair i runs the
 * layer first when i is even, the replay first when odd, each between a CUDA
 * event pair. A spin queued first lets the host run ahead; every call then
 * queues far faster than the GPU runs it, so no host gap is timed. */
static ptimes time_pairs(void *stream, marg *m, int pairs)
{
    cudaStream_t s = (cudaStream_t)stream;
    double *lay = malloc(sizeof(double) * (size_t)pairs), *gem = malloc(sizeof(double) * (size_t)pairs);
    double *rat = malloc(sizeof(double) * (size_t)pairs);
    cudaEvent_t *ev = malloc(sizeof(cudaEvent_t) * 4 * (size_t)pairs);
    if (!lay || !gem || !rat || !ev) exit(1);
    for (int i = 0; i < 4 * pairs; i++) BENCH_CUDA(cudaEventCreate(&ev[i]));
    mlp_call(m, 0); /* warm: one of each */
    gemms_call(m, 0);
    BENCH_CUDA(cudaStreamSynchronize(s));
    bench_gpu_spin(stream, 3000);
    for (int i = 0; i < pairs; i++) {
        const int layer_first = i % 2 == 0;
        BENCH_CUDA(cudaEventRecord(ev[4 * i], s));
        (layer_first ? mlp_call : gemms_call)(m, i);
        BENCH_CUDA(cudaEventRecord(ev[4 * i + 1], s));
        BENCH_CUDA(cudaEventRecord(ev[4 * i + 2], s));
        (layer_first ? gemms_call : mlp_call)(m, i);
        BENCH_CUDA(cudaEventRecord(ev[4 * i + 3], s));
    }
    BENCH_CUDA(cudaStreamSynchronize(s));
    ptimes r;
    r.pairs = pairs;
    r.ratio_lo = 1e30, r.ratio_hi = 0;
    for (int i = 0; i < pairs; i++) {
        float a = 0, b = 0;
        BENCH_CUDA(cudaEventElapsedTime(&a, ev[4 * i], ev[4 * i + 1]));
        BENCH_CUDA(cudaEventElapsedTime(&b, ev[4 * i + 2], ev[4 * i + 3]));
        lay[i] = 1e3 * (i % 2 == 0 ? a : b);
        gem[i] = 1e3 * (i % 2 == 0 ? b : a);
        rat[i] = lay[i] / gem[i];
        if (rat[i] < r.ratio_lo) r.ratio_lo = rat[i];
        if (rat[i] > r.ratio_hi) r.ratio_hi = rat[i];
    }
    r.layer_us = bench_median(lay, pairs);
    r.gemm_us = bench_median(gem, pairs);
    r.ratio = bench_median(rat, pairs);
    for (int i = 0; i < 4 * pairs; i++) BENCH_CUDA(cudaEventDestroy(ev[i]));
    free(lay), free(gem), free(rat), free(ev);
    return r;
}

typedef struct mresult {
    bench_times layer[2]; /* [backward]: bench_time of the layer call (wall, host) */
    ptimes pair[2];       /* [backward]: layer vs GEMM-only, interleaved */
    int ngemm[2];
    /* FP8 forward+backward, op by op (op_breakdown) */
    int nops;
    char what[MAX_OPS][64];
    double op_us[MAX_OPS]; /* median GPU time of each op */
    double span_us;        /* median from the first op's start to the last op's end */
} mresult;

#define BREAKDOWN_CALLS 7

/* Every backend op of one layer call (forward + backward) between CUDA
 * events, BREAKDOWN_CALLS times, each behind a spin so the host has queued
 * the call before the GPU starts it: the median of each op's time. */
static void op_breakdown(f8_ctx *ctx, marg *m, mresult *r)
{
    static double t[MAX_OPS][BREAKDOWN_CALLS], span[BREAKDOWN_CALLS];
    void *stream = f8_ctx_stream(ctx);
    tap_install(ctx);
    g_tap.timing = 1;
    g_tap.stream = (cudaStream_t)stream;
    for (int i = 0; i < 2 * MAX_OPS; i++) BENCH_CUDA(cudaEventCreate(&g_tap.ev[i]));
    m->backward = 1;
    r->nops = 0;
    for (int c = 0; c < BREAKDOWN_CALLS; c++) {
        g_tap.nops = 0;
        bench_gpu_spin(stream, 3000);
        mlp_call(m, 0);
        BENCH_CUDA(cudaStreamSynchronize(g_tap.stream));
        r->nops = g_tap.nops;
        for (int i = 0; i < g_tap.nops; i++) {
            float ms = 0;
            BENCH_CUDA(cudaEventElapsedTime(&ms, g_tap.ev[2 * i], g_tap.ev[2 * i + 1]));
            t[i][c] = 1e3 * ms;
        }
        float ms = 0;
        if (g_tap.nops > 0) BENCH_CUDA(cudaEventElapsedTime(&ms, g_tap.ev[0], g_tap.ev[2 * g_tap.nops - 1]));
        span[c] = 1e3 * ms;
    }
    for (int i = 0; i < r->nops; i++) {
        memcpy(r->what[i], g_tap.what[i], sizeof r->what[i]);
        r->op_us[i] = bench_median(t[i], BREAKDOWN_CALLS);
    }
    r->span_us = bench_median(span, BREAKDOWN_CALLS);
    for (int i = 0; i < 2 * MAX_OPS; i++) BENCH_CUDA(cudaEventDestroy(g_tap.ev[i]));
    tap_remove(ctx);
}

static void print_breakdown(bench_log *log, const char *an, const mresult *r)
{
    double gemm = 0, other = 0;
    printf("%-7s fp8 fwd+bwd op by op (GPU us, median of %d calls, each op between events):\n", an, BREAKDOWN_CALLS);
    for (int i = 0; i < r->nops; i++) {
        const int is_gemm = strncmp(r->what[i], "gemm", 4) == 0;
        if (is_gemm)
            gemm += r->op_us[i];
        else
            other += r->op_us[i];
        printf("  %2d %-40s %9.1f\n", i, r->what[i], r->op_us[i]);
        bench_json(log, "{\"bench\":\"layernorm_mlp_op\",\"act\":\"%s\",\"index\":%d,\"op\":\"%s\",\"gpu_us\":%.3f}", an,
                   i, r->what[i], r->op_us[i]);
    }
    printf("  GEMMs %.1f, other ops %.1f (%.1f%% of the GEMMs), sum %.1f; first op start to last op end %.1f "
           "(gaps %.1f)\n",
           gemm, other, 100 * other / (gemm > 0 ? gemm : 1), gemm + other, r->span_us, r->span_us - gemm - other);
    bench_json(log,
               "{\"bench\":\"layernorm_mlp_ops\",\"act\":\"%s\",\"gemm_us\":%.3f,\"other_us\":%.3f,\"span_us\":%.3f}",
               an, gemm, other, r->span_us);
}

static mresult run_mlp(f8_ctx *ctx, int64_t T, int64_t H, int64_t F, f8_activation act, int fp8, f8_microbatch mb)
{
    void *stream = f8_ctx_stream(ctx);
    static marg m; /* large (recorded GEMM args) */
    memset(&m, 0, sizeof m);
    m.ctx = ctx;
    f8_layernorm_mlp_config cfg = f8_layernorm_mlp_config_default(H, F);
    cfg.activation = act, cfg.param_dtype = F8_DTYPE_BF16, cfg.fp8 = fp8, cfg.max_tokens = T;
    BENCH_F8(ctx, f8_layernorm_mlp_create(ctx, &cfg, &m.mlp));
    BENCH_F8(ctx, f8_module_saved_create(m.mlp, &m.saved));
    static const f8_param biases[2] = {F8_PARAM_FC1_BIAS, F8_PARAM_FC2_BIAS};
    for (int b = 0; b < 2; b++) { /* non-zero biases, as in training */
        f8_tensor v;
        BENCH_F8(ctx, f8_module_param(m.mlp, biases[b], 0, &v));
        BENCH_CUDA((cudaError_t)bench_fill_random(stream, v.data, v.dtype, v.rows * v.cols, 40 + (uint64_t)b, 0.1f));
    }
    m.x = f8_tensor_make(bench_alloc_random(stream, F8_DTYPE_BF16, T * H, 50, 1.0f), F8_DTYPE_BF16, T, H);
    m.dy = f8_tensor_make(bench_alloc_random(stream, F8_DTYPE_BF16, T * H, 51, 1.0f), F8_DTYPE_BF16, T, H);
    m.y = f8_tensor_make(bench_alloc_random(stream, F8_DTYPE_BF16, T * H, 52, 1.0f), F8_DTYPE_BF16, T, H);
    m.dx = f8_tensor_make(bench_alloc_random(stream, F8_DTYPE_BF16, T * H, 53, 1.0f), F8_DTYPE_BF16, T, H);

    /* Warm up (plans, lazily made buffers; a FIRST call fills the workspaces
     * that NOT_FIRST calls reuse), then record the GEMMs of each pass. */
    m.backward = 1;
    m.mb = mb == F8_MICROBATCH_NOT_FIRST ? F8_MICROBATCH_FIRST : mb;
    mlp_call(&m, 0);
    m.mb = mb;
    BENCH_F8(ctx, f8_ctx_synchronize(ctx));
    mresult r;
    memset(&r, 0, sizeof r);
    tap_install(ctx);
    for (int bwd = 0; bwd < 2; bwd++) {
        m.backward = bwd;
        g_tap.nrec = 0;
        mlp_call(&m, 0);
        if (g_tap.nrec > MAX_REC) {
            fprintf(stderr, "bench_modules: %d GEMMs in one call, more than %d recorded\n", g_tap.nrec, MAX_REC);
            exit(1);
        }
        m.nrec[bwd] = r.ngemm[bwd] = g_tap.nrec;
        memcpy(m.rec[bwd], g_tap.rec, sizeof g_tap.rec);
    }
    tap_remove(ctx);
    BENCH_F8(ctx, f8_ctx_synchronize(ctx));

    const int64_t F1 = f8_activation_gated(act) ? 2 * F : F;
    const double flop = 2.0 * (double)T * (double)H * (double)(F1 + F);
    for (int bwd = 0; bwd < 2; bwd++) {
        m.backward = bwd;
        const double est = (bwd ? 3 : 1) * flop / (fp8 ? 1.1e9 : 0.6e9) + 50.0; /* us */
        r.layer[bwd] = bench_time(stream, mlp_call, &m, bench_reps(est, 80, 5, 30));
        r.pair[bwd] = time_pairs(stream, &m, bench_reps(2 * est, 400, 15, 41));
    }
    if (fp8 && mb == F8_MICROBATCH_NONE) op_breakdown(ctx, &m, &r);
    f8_tensor *t[] = {&m.x, &m.y, &m.dy, &m.dx};
    for (int j = 0; j < 4; j++) BENCH_CUDA(cudaFree(t[j]->data));
    f8_saved_destroy(m.saved);
    f8_module_destroy(m.mlp);
    return r;
}

/* 1 when no argument is given or one of them is `word`. */
static int wanted(int argc, char **argv, const char *word)
{
    if (argc < 2) return 1;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], word) == 0) return 1;
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* each line as it is printed, even into a file */
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "kernels") && strcmp(argv[i], "norm") && strcmp(argv[i], "gelu") &&
            strcmp(argv[i], "swiglu")) {
            fprintf(stderr, "usage: bench_modules [kernels] [norm] [gelu] [swiglu]\n");
            return 2;
        }
    f8_ctx *ctx = bench_ctx_or_skip("bench_modules");
    if (!ctx) return 0;
    void *stream = f8_ctx_stream(ctx);
    bench_print_device("bench_modules");
    bench_log log = {NULL, 0, 0};
    const double copy = bench_copy_gbps(stream);
    printf("device-to-device copy: %.1f GB/s (1 GiB cudaMemcpyAsync, read + write)\n\n", copy);
    bench_json(&log, "{\"bench\":\"copy\",\"bytes\":%.0f,\"gbps\":%.1f}", 2.0 * (1u << 30), copy);

    /* the reductions (dgamma/dbeta, dbias) take a workspace; the ctx scratch serves as one */
    BENCH_F8(ctx, f8i_scratch_reserve(ctx, f8i_reduce_workspace_bytes(8192, 32768)));
#define NF(rms_) {.name = "norm_fwd_fp8", .op = K_NORM_FWD, .rms = rms_, .rows = 8192, .cols = 4096}
#define NB(rms_, b_) {.name = "norm_bwd", .op = K_NORM_BWD, .rms = rms_, .rows = 8192, .cols = 4096, .bf16_dy = b_}
#define AF(act_, t_) {.name = "act_fwd_fp8", .op = K_ACT_FWD, .act = act_, .rows = 8192, .cols = 16384, .with_t = t_}
#define AB(act_, b_) {.name = "act_bwd_fused", .op = K_ACT_BWD, .act = act_, .rows = 8192, .cols = 16384, .bf16_dy = b_}
    static const kcase kernels[] = {
        NF(0), NF(1), /* the judged rows */
        NB(0, 0), NB(1, 0), NB(0, 1), NB(1, 1),
        AF(F8_ACT_GELU, 0), AF(F8_ACT_SWIGLU, 0), AF(F8_ACT_GELU, 1), AF(F8_ACT_SWIGLU, 1),
        AB(F8_ACT_GELU, 0), AB(F8_ACT_SWIGLU, 0), AB(F8_ACT_GELU, 1), AB(F8_ACT_SWIGLU, 1),
        /* the layer's other non-GEMM ops (cast.cu, transpose.cu), for its time budget */
        {.name = "(mlp) weight cast_t", .op = K_CAST_T, .rows = 16384, .cols = 4096},
        {.name = "(mlp) dy cast_t_dbias", .op = K_CAST_T, .rows = 8192, .cols = 4096, .dbias = 1},
        {.name = "(mlp) act transpose", .op = K_TRANSPOSE, .rows = 8192, .cols = 16384},
        {.name = "(mlp) ln transpose", .op = K_TRANSPOSE, .rows = 8192, .cols = 4096},
    };
#undef NF
#undef NB
#undef AF
#undef AB
    const int all = wanted(argc, argv, "kernels"); /* every kernel, or (`norm`) the norm forward's */
    if (all || wanted(argc, argv, "norm")) {
        printf("(GPU us: an event pair around each call; b2b us: calls back to back, one event pair around them "
               "all; GB/s and %% of copy from b2b)\n");
        printf("%-22s %-12s %-12s %9s %9s %9s %8s %8s  %s\n", "kernel", "variant", "shape", "MB moved", "GPU us",
               "b2b us", "GB/s", "of copy", "target");
        for (size_t c = 0; c < sizeof kernels / sizeof kernels[0]; c++)
            if (all || kernels[c].op == K_NORM_FWD) run_kernel(ctx, &log, &kernels[c], copy);
    }

    const int64_t T = 8192, H = 4096, F = 16384;
    static const f8_activation acts[2] = {F8_ACT_GELU, F8_ACT_SWIGLU};
    static const char *pass[2] = {"fwd", "fwd+bwd"};
    int header = 0;
    for (int a = 0; a < 2; a++) {
        const char *an = acts[a] == F8_ACT_GELU ? "gelu" : "swiglu";
        if (!wanted(argc, argv, an)) continue;
        if (!header++) {
            printf("\nf8_layernorm_mlp, tokens %lld, hidden %lld, ffn %lld, param bf16, microbatch NONE "
                   "(fp8c: FP8 with cached weights, NOT_FIRST)\n",
                   (long long)T, (long long)H, (long long)F);
            printf("(GPU us, GEMM-only and the ratio from interleaved layer/replay pairs: medians, ratio range)\n");
            printf("%-7s %-4s %-8s %10s %10s %9s %6s %10s %9s %17s\n", "act", "mode", "pass", "GPU us", "wall us",
                   "TFLOP/s", "GEMMs", "GEMM-only", "GPU/GEMM", "range (pairs)");
        }
        const int64_t F1 = f8_activation_gated(acts[a]) ? 2 * F : F;
        const double flop = 2.0 * (double)T * (double)H * (double)(F1 + F);
        mresult r[3]; /* [fp8], then [2]: FP8 with cached weights (microbatch NOT_FIRST) */
        for (int k = 2; k >= 0; k--) {
            const int fp8 = k >= 1;
            r[k] = run_mlp(ctx, T, H, F, acts[a], fp8, k == 2 ? F8_MICROBATCH_NOT_FIRST : F8_MICROBATCH_NONE);
            for (int b = 0; b < 2; b++) {
                const ptimes *q = &r[k].pair[b];
                const bench_times *t = &r[k].layer[b];
                const double tf = (b ? 3 : 1) * flop / (q->layer_us * 1e-6) / 1e12;
                printf("%-7s %-4s %-8s %10.1f %10.1f %9.1f %6d %10.1f %9.3f %7.3f-%5.3f (%d)\n", an,
                       k == 2 ? "fp8c" : fp8 ? "fp8" : "bf16", pass[b], q->layer_us, t->wall_us, tf, r[k].ngemm[b],
                       q->gemm_us, q->ratio, q->ratio_lo, q->ratio_hi, q->pairs);
                bench_json(&log,
                           "{\"bench\":\"layernorm_mlp\",\"act\":\"%s\",\"shape\":[%lld,%lld,%lld],\"mode\":\"%s\","
                           "\"pass\":\"%s\",\"gpu_us\":%.3f,\"wall_us\":%.3f,\"host_us\":%.3f,\"tflops\":%.2f,"
                           "\"gemms\":%d,\"gemm_only_us\":%.3f,\"ratio_gpu\":%.4f,\"ratio_lo\":%.4f,"
                           "\"ratio_hi\":%.4f,\"pairs\":%d}",
                           an, (long long)T, (long long)H, (long long)F, k == 2 ? "fp8_cached" : fp8 ? "fp8" : "bf16",
                           pass[b], q->layer_us, t->wall_us, t->host_us, tf, r[k].ngemm[b], q->gemm_us, q->ratio, q->ratio_lo,
                           q->ratio_hi, q->pairs);
            }
        }
        print_breakdown(&log, an, &r[1]);
        for (int b = 0; b < 2; b++)
            printf("%-7s fp8 speedup over bf16, %s: %.2fx GPU, %.2fx wall\n", an, pass[b],
                   r[0].pair[b].layer_us / r[1].pair[b].layer_us, r[0].layer[b].wall_us / r[1].layer[b].wall_us);
        const double sp = r[0].pair[1].layer_us / r[1].pair[1].layer_us;
        const double over = r[1].pair[1].ratio;
        printf("%-7s target fp8 fwd+bwd >= %.1fx bf16: %.2fx %s; within %.0f%% of its %d GEMMs: %.3f %s\n", an,
               SPEEDUP_TARGET, sp, sp >= SPEEDUP_TARGET ? "ok" : "MISS", 100 * (BOUND_TARGET - 1), r[1].ngemm[1], over,
               over <= BOUND_TARGET ? "ok" : "MISS");
        printf("%-7s with cached weights (microbatch NOT_FIRST, the weight casts skipped): %.3f of its GEMMs %s\n", an,
               r[2].pair[1].ratio, r[2].pair[1].ratio <= BOUND_TARGET ? "ok" : "MISS");
        bench_json(&log,
                   "{\"bench\":\"layernorm_mlp_targets\",\"act\":\"%s\",\"shape\":[%lld,%lld,%lld],"
                   "\"fp8_over_bf16\":%.4f,\"meets_1_5x\":%s,\"over_gemms\":%.4f,\"meets_15pct\":%s}",
                   an, (long long)T, (long long)H, (long long)F, sp, sp >= SPEEDUP_TARGET ? "true" : "false", over,
                   over <= BOUND_TARGET ? "true" : "false");
    }
    printf("\n");
    bench_log_flush(&log);
    f8_ctx_destroy(ctx);
    return 0;
}
