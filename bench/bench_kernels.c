/*
 * bench_kernels.c — achieved bandwidth of f8's memory-bound CUDA kernels,
 * called through the backend table (ctx->be) exactly as the modules call
 * them, against the device's measured device-to-device copy bandwidth.
 * Target on the H200: casts and transposes >= 80% of copy bandwidth when
 * they move >= 64 MB.
 *
 * The row-wise cast (issue 30) runs at the 124M and 1.3B trainers' shapes
 * (tokens x d and x 4d), both orientations, through the backend table (the
 * 2-D column path) and, marked "_old", through the former one-launch
 * stripes kernel (f8i_cuda_cast_rowwise_stripes), so one call compares
 * them; `bench_kernels rowwise` runs those lines alone. Beside them, the
 * LayerNorm (BF16 x and params) with the row-wise cast fused (backend.h's
 * F8I_ROW_FUSED): codes alone (inference), codes and u in BF16 (training:
 * the column-wise copy's source), against the unfused path's norm in BF16
 * then the row-wise cast (bytes counted as the fused line's, the same
 * result, so the GB/s compare the two ways). The training path with the
 * column-wise copy too: the fused norm also taking the column amaxes
 * (col_amax) then the column-only cast given them (col_amax_in), against
 * the fused norm then the column-only cast that measures them again.
 * Then the activations with the row-wise cast fused (act_row_kernel,
 * f8i_op_act_fwd/bwd as layernorm_mlp.c's training calls them without
 * fc1's bias) at the 1.3B/Llama-1B MLP, 8192 tokens by an FFN of 8192
 * (the shape column is x's: SwiGLU's is 8192 x 16384), and GELU at the
 * 124M one's, 65536 tokens by 3072 (rows of few pieces): the forward from
 * BF16 x to codes, per-row scale_inv, u (BF16) and the column amaxes; the
 * backward from BF16 x and dy to d's codes, per-row scale_inv, dx (BF16)
 * and its column amaxes; `bench_kernels rowwise` runs these too. Their
 * backward's "+t_db" lines add the column-wise copy and fc1's dbias as the
 * layer makes them now (the cast given the column amaxes), "+t_db_old" as
 * before (the amaxes measured again for dbias's order); `bench_kernels
 * tdb` runs those pairs alone, `bench_kernels act` every activation line.
 *
 * `bench_kernels adamw` times the AdamW step (f8_adamw_step: the norm pass,
 * the finalize and the update) over one BF16 parameter of the 1.3B
 * trainer's size with FP32, BF16 and FP8 moments; its bytes are the norm
 * pass's read of the gradient and the update's read of parameter, gradient
 * and moments and write of parameter and moments (FP8: codes and per-128
 * scale_invs).
 *
 * Bytes are the fewest each op must move: every input read once, every output
 * written once (the dbias scratch partials and the amax atomics are not
 * counted: they are the kernel's own overhead). Inputs are random and rotate
 * through enough sets to exceed L2 several times over.
 */
#include "bench_util.h"
#include "core/f8i.h"
#include "core/ops.h"
#include "core/rowwise.h"

#define MAX_SETS 16
#define TARGET 0.80
#define TARGET_BYTES (64e6)

enum op {
    OP_CAST, OP_CAST_T, OP_CAST_T_DBIAS, OP_TRANSPOSE, OP_CONVERT, OP_SCALE_UPDATE, OP_ROW, OP_ROW_T, OP_ROW_T_DBIAS,
    OP_NORM_ROW, OP_NORM_ROW_HP, OP_NORM_THEN_ROW, /* LayerNorm with row-wise codes: fused, fused + u, unfused */
    OP_NORM_ROW_COLS, OP_NORM_ROW_THEN_COLS, /* + the column copy: amaxes taken by the norm, or by the cast */
    OP_ADAMW,  /* f8_adamw_step; dst: the moments' dtype */
    OP_ACT_ROW /* the row-wise fused activation lines (run_act_row) */
};

typedef struct kcase {
    const char *name;
    enum op op;
    f8_dtype src, dst; /* cast: FP8 dst; transpose: E4M3 bytes */
    int row;           /* 0: the 8192² and 2048² shapes; row-wise casts at the trainers' shapes:
                          1 through the backend (2-D column path), 2 the former stripes kernel */
} kcase;

/* What one timed call touches; set i % nsets is used by call i. */
typedef struct karg {
    f8_ctx *ctx;
    const kcase *kc;
    int64_t rows, cols;
    int nsets;
    void *src[MAX_SETS], *dst[MAX_SETS], *dst_t[MAX_SETS], *col_t[MAX_SETS]; /* col_t: the norm's column copy */
    float *scale, *amax, *scale_inv, *dbias;
    float *row_si, *row_si_t; /* row-wise: [rows], [cols] */
    void *gamma, *beta;       /* the norm lines: BF16 [cols] */
    float *mu, *rsigma;       /* the norm lines: [rows] */
    /* scale update */
    float *hist, *row0;
    int history_len, count;
} karg;

static void kcall(void *p, int i)
{
    karg *k = p;
    f8_ctx *ctx = k->ctx;
    int s = i % k->nsets;
    const int64_t n = k->rows * k->cols;
    switch (k->kc->op) {
    case OP_TRANSPOSE:
        BENCH_F8(ctx, f8i_op_transpose_u8(ctx, k->src[s], k->dst[s], k->rows, k->cols, NULL));
        break;
    case OP_CONVERT:
        BENCH_F8(ctx, f8i_op_convert(ctx, k->src[s], k->kc->src, k->scale_inv, k->dst[s], k->kc->dst, n));
        break;
    case OP_SCALE_UPDATE: {
        f8i_scale_update_args a = {.history = k->hist, .ld = k->count, .history_len = k->history_len,
                                   .count = k->count, .scale = k->scale, .scale_inv = k->scale_inv,
                                   .scaled_max = 448.0f, .algo = F8_AMAX_MAX};
        BENCH_F8(ctx, f8i_op_scale_update(ctx, &a));
        break;
    }
    case OP_ROW:
    case OP_ROW_T:
    case OP_ROW_T_DBIAS: {
        f8i_cast_args a = {.src = k->src[s], .src_dtype = k->kc->src, .rows = k->rows, .cols = k->cols,
                           .out_dtype = k->kc->dst, .out = k->dst[s], .amax = k->amax, .scale_inv = k->row_si,
                           .mode = F8I_SCALING_ROW, .scaled_max = f8_fp8_max(k->kc->dst)};
        if (k->kc->op != OP_ROW) a.out_t = k->dst_t[s], a.scale_inv_t = k->row_si_t;
        if (k->kc->op == OP_ROW_T_DBIAS)
            a.dbias = k->dbias, a.dbias_dtype = F8_DTYPE_FP32, a.workspace = ctx->scratch,
            a.workspace_bytes = ctx->scratch_bytes;
        if (k->kc->row != 2) {
            BENCH_F8(ctx, f8i_op_cast(ctx, &a));
        } else {
            const f8i_rowwise_cast_args r = f8i_rowwise_cast_from(&a);
            BENCH_F8(ctx, f8i_cuda_cast_rowwise_stripes(ctx, &r));
        }
        break;
    }
    case OP_NORM_ROW:
    case OP_NORM_ROW_HP:
    case OP_NORM_THEN_ROW: { /* u in BF16 (the param dtype) lands in dst_t */
        f8i_norm_fwd_args a = {.x = k->src[s], .x_dtype = k->kc->src, .rows = k->rows, .cols = k->cols,
                               .gamma = k->gamma, .beta = k->beta, .param_dtype = F8_DTYPE_BF16, .eps = 1e-5f,
                               .mu = k->mu, .rsigma = k->rsigma};
        if (k->kc->op == OP_NORM_THEN_ROW) { /* the unfused path: the norm in BF16, then the row-wise cast */
            a.y = k->dst_t[s], a.y_dtype = F8_DTYPE_BF16;
            BENCH_F8(ctx, f8i_op_norm_fwd(ctx, &a));
            f8i_cast_args c = {.src = k->dst_t[s], .src_dtype = F8_DTYPE_BF16, .rows = k->rows, .cols = k->cols,
                               .out_dtype = k->kc->dst, .out = k->dst[s], .amax = k->amax, .scale_inv = k->row_si,
                               .mode = F8I_SCALING_ROW, .scaled_max = f8_fp8_max(k->kc->dst)};
            BENCH_F8(ctx, f8i_op_cast(ctx, &c));
            break;
        }
        a.y = k->dst[s], a.y_dtype = k->kc->dst, a.amax = k->amax, a.scale_inv = k->row_si;
        a.mode = F8I_SCALING_ROW, a.scaled_max = f8_fp8_max(k->kc->dst);
        if (k->kc->op == OP_NORM_ROW_HP) a.y_hp = k->dst_t[s], a.hp_dtype = F8_DTYPE_BF16;
        BENCH_F8(ctx, f8i_op_norm_fwd(ctx, &a));
        break;
    }
    case OP_NORM_ROW_COLS:
    case OP_NORM_ROW_THEN_COLS: { /* the modules' training path: codes, u, then u's column copy */
        const int given = k->kc->op == OP_NORM_ROW_COLS;
        f8i_norm_fwd_args a = {.x = k->src[s], .x_dtype = k->kc->src, .rows = k->rows, .cols = k->cols,
                               .gamma = k->gamma, .beta = k->beta, .param_dtype = F8_DTYPE_BF16, .eps = 1e-5f,
                               .mu = k->mu, .rsigma = k->rsigma, .y = k->dst[s], .y_dtype = k->kc->dst,
                               .amax = k->amax, .scale_inv = k->row_si, .mode = F8I_SCALING_ROW,
                               .scaled_max = f8_fp8_max(k->kc->dst), .y_hp = k->dst_t[s],
                               .hp_dtype = F8_DTYPE_BF16, .col_amax = given ? k->row_si_t : NULL};
        BENCH_F8(ctx, f8i_op_norm_fwd(ctx, &a));
        f8i_cast_args c = {.src = k->dst_t[s], .src_dtype = F8_DTYPE_BF16, .rows = k->rows, .cols = k->cols,
                           .out_dtype = k->kc->dst, .out_t = k->col_t[s], .scale_inv_t = k->row_si_t,
                           .mode = F8I_SCALING_ROW, .scaled_max = f8_fp8_max(k->kc->dst), .col_amax_in = given};
        BENCH_F8(ctx, f8i_op_cast(ctx, &c));
        break;
    }
    default: {
        f8i_cast_args a = {.src = k->src[s], .src_dtype = k->kc->src, .rows = k->rows, .cols = k->cols,
                           .out_dtype = k->kc->dst, .out = k->dst[s], .scale = k->scale, .amax = k->amax,
                           .scale_inv = k->scale_inv};
        if (k->kc->op != OP_CAST) a.out_t = k->dst_t[s];
        if (k->kc->op == OP_CAST_T_DBIAS)
            a.dbias = k->dbias, a.dbias_dtype = F8_DTYPE_FP32, a.workspace = ctx->scratch,
            a.workspace_bytes = ctx->scratch_bytes;
        BENCH_F8(ctx, f8i_op_cast(ctx, &a));
    }
    }
}

/* The update rolls only slots whose row 0 (this step's amax) is non-zero and
 * then clears it; a real step's casts refill it. Refill it before each call,
 * outside the timing, so every call does a full step's work. */
static void refill_row0(void *p, int i)
{
    karg *k = p;
    (void)i;
    BENCH_CUDA(cudaMemcpyAsync(k->hist, k->row0, (size_t)k->count * 4, cudaMemcpyDeviceToDevice,
                               (cudaStream_t)f8_ctx_stream(k->ctx)));
}

static double op_bytes(const kcase *kc, int64_t rows, int64_t cols)
{
    const double n = (double)rows * (double)cols, ss = (double)f8_dtype_size(kc->src);
    switch (kc->op) {
    case OP_CAST: return n * ss + n;
    case OP_ROW: return n * ss + n + 4.0 * (double)rows;
    case OP_CAST_T: return n * ss + 2 * n;
    case OP_ROW_T: return n * ss + 2 * n + 4.0 * (double)(rows + cols);
    case OP_CAST_T_DBIAS: return n * ss + 2 * n + 4.0 * (double)cols;
    case OP_ROW_T_DBIAS: return n * ss + 2 * n + 4.0 * (double)(rows + 2 * cols);
    /* x, the codes, mu, rsigma, scale_inv; with u (BF16): the same result, fused or not */
    case OP_NORM_ROW: return n * ss + n + 12.0 * (double)rows;
    case OP_NORM_ROW_HP:
    case OP_NORM_THEN_ROW: return n * ss + 3 * n + 12.0 * (double)rows;
    /* and u read back once for the column copy, its codes and scale_inv_t: the same result both ways */
    case OP_NORM_ROW_COLS:
    case OP_NORM_ROW_THEN_COLS: return n * ss + 6 * n + 12.0 * (double)rows + 4.0 * (double)cols;
    case OP_TRANSPOSE: return 2 * n;
    case OP_CONVERT: return n * ss + n * (double)f8_dtype_size(kc->dst);
    default: return 0;
    }
}

static void report(bench_log *log, const kcase *kc, int64_t d0, int64_t d1, double bytes, bench_times t,
                   double copy_gbps)
{
    double gbps = bytes / (t.gpu_us * 1e-6) / 1e9, frac = gbps / copy_gbps;
    int judged = bytes >= TARGET_BYTES && kc->op != OP_CONVERT && kc->op != OP_SCALE_UPDATE && kc->op != OP_ADAMW;
    char dt[32], shape[48];
    snprintf(dt, sizeof dt, "%s->%s", f8_dtype_name(kc->src), f8_dtype_name(kc->dst));
    if (kc->op == OP_SCALE_UPDATE)
        snprintf(shape, sizeof shape, "L%lld x %lld", (long long)d0, (long long)d1);
    else
        snprintf(shape, sizeof shape, "%lldx%lld", (long long)d0, (long long)d1);
    printf("%-21s %-10s %-12s %9.1f %9.2f %8.1f %7.1f%%  %s\n", kc->name, kc->op == OP_SCALE_UPDATE ? "fp32" : dt,
           shape, bytes / 1e6, t.gpu_us, gbps, 100 * frac,
           judged ? (frac >= TARGET ? "ok (>= 80%)" : "MISS (< 80%)") : "");
    bench_json(log,
               "{\"bench\":\"%s\",\"src\":\"%s\",\"dst\":\"%s\",\"shape\":[%lld,%lld],\"bytes\":%.0f,"
               "\"gpu_us\":%.3f,\"host_us\":%.3f,\"wall_us\":%.3f,\"gbps\":%.1f,\"copy_gbps\":%.1f,"
               "\"frac_copy\":%.4f%s}",
               kc->name, f8_dtype_name(kc->src), f8_dtype_name(kc->dst), (long long)d0, (long long)d1, bytes, t.gpu_us,
               t.host_us, t.wall_us, gbps, copy_gbps, frac,
               judged ? (frac >= TARGET ? ",\"target\":0.8,\"meets\":true" : ",\"target\":0.8,\"meets\":false") : "");
}

static void run_layout(f8_ctx *ctx, bench_log *log, const kcase *kc, int64_t rows, int64_t cols, double copy_gbps)
{
    void *stream = f8_ctx_stream(ctx);
    const double bytes = op_bytes(kc, rows, cols);
    const int64_t n = rows * cols;
    karg k = {.ctx = ctx, .kc = kc, .rows = rows, .cols = cols};
    k.nsets = (int)(512e6 / bytes) + 1;
    if (k.nsets < 2) k.nsets = 2;
    if (k.nsets > MAX_SETS) k.nsets = MAX_SETS;
    const int fp8_src = f8i_dtype_is_fp8(kc->src);
    const size_t dst_bytes = (size_t)n * (kc->op == OP_CONVERT ? f8_dtype_size(kc->dst) : 1);
    for (int s = 0; s < k.nsets; s++) {
        k.src[s] = bench_alloc_random(stream, kc->src, n, 100 + (uint64_t)s, fp8_src ? 1.0f : 3.0f);
        BENCH_CUDA(cudaMalloc(&k.dst[s], dst_bytes));
        if (kc->op == OP_CAST_T || kc->op == OP_CAST_T_DBIAS || kc->op == OP_ROW_T || kc->op == OP_ROW_T_DBIAS)
            BENCH_CUDA(cudaMalloc(&k.dst_t[s], (size_t)n));
        if (kc->op == OP_NORM_ROW_HP || kc->op == OP_NORM_THEN_ROW || kc->op == OP_NORM_ROW_COLS ||
            kc->op == OP_NORM_ROW_THEN_COLS)
            BENCH_CUDA(cudaMalloc(&k.dst_t[s], (size_t)n * 2));
        if (kc->op == OP_NORM_ROW_COLS || kc->op == OP_NORM_ROW_THEN_COLS) BENCH_CUDA(cudaMalloc(&k.col_t[s], (size_t)n));
    }
    /* scale 64: N(0, 9) inputs land across E4M3's range; scale_inv of the codes */
    const float scalars[4] = {64.0f, 0.0f, 1.0f / 64.0f, 0.0f};
    float *dev = NULL;
    BENCH_CUDA(cudaMalloc((void **)&dev, sizeof scalars));
    BENCH_CUDA(cudaMemcpy(dev, scalars, sizeof scalars, cudaMemcpyHostToDevice));
    k.scale = dev, k.amax = dev + 1, k.scale_inv = dev + 2;
    BENCH_CUDA(cudaMalloc((void **)&k.dbias, (size_t)cols * 4));
    BENCH_CUDA(cudaMalloc((void **)&k.row_si, (size_t)rows * 4));
    BENCH_CUDA(cudaMalloc((void **)&k.row_si_t, (size_t)cols * 4));
    k.gamma = bench_alloc_random(stream, F8_DTYPE_BF16, cols, 5, 1.0f);
    k.beta = bench_alloc_random(stream, F8_DTYPE_BF16, cols, 6, 1.0f);
    BENCH_CUDA(cudaMalloc((void **)&k.mu, (size_t)rows * 4));
    BENCH_CUDA(cudaMalloc((void **)&k.rsigma, (size_t)rows * 4));
    BENCH_CUDA(cudaStreamSynchronize((cudaStream_t)stream));

    int reps = bench_reps(bytes / 3e3, 40, 20, 200); /* ~3 TB/s guess for the pass length */
    report(log, kc, rows, cols, bytes, bench_time(stream, kcall, &k, reps), copy_gbps);
    /* column maxima a fused op left pending in the ctx's scratch go to their buffer before it is freed */
    BENCH_F8(k.ctx, f8_ctx_synchronize(k.ctx));

    for (int s = 0; s < k.nsets; s++) {
        BENCH_CUDA(cudaFree(k.src[s]));
        BENCH_CUDA(cudaFree(k.dst[s]));
        if (k.dst_t[s]) BENCH_CUDA(cudaFree(k.dst_t[s]));
        if (k.col_t[s]) BENCH_CUDA(cudaFree(k.col_t[s]));
    }
    BENCH_CUDA(cudaFree(dev));
    BENCH_CUDA(cudaFree(k.dbias));
    BENCH_CUDA(cudaFree(k.row_si));
    BENCH_CUDA(cudaFree(k.row_si_t));
    BENCH_CUDA(cudaFree(k.gamma));
    BENCH_CUDA(cudaFree(k.beta));
    BENCH_CUDA(cudaFree(k.mu));
    BENCH_CUDA(cudaFree(k.rsigma));
}

/* The fused update of `count` slots with history L: reads the window and
 * scale, writes the rolled history, scale and scale_inv. */
static void run_scale_update(f8_ctx *ctx, bench_log *log, int count, int L, double copy_gbps)
{
    static const kcase kc = {"scale_update", OP_SCALE_UPDATE, F8_DTYPE_FP32, F8_DTYPE_FP32, 0};
    void *stream = f8_ctx_stream(ctx);
    karg k = {.ctx = ctx, .kc = &kc, .nsets = 1, .history_len = L, .count = count};
    /* |N(0,1)| amaxes (the sign does not matter to the update's cost) */
    k.hist = bench_alloc_random(stream, F8_DTYPE_FP32, (int64_t)L * count, 7, 1.0f);
    k.row0 = bench_alloc_random(stream, F8_DTYPE_FP32, count, 8, 1.0f);
    k.scale = bench_alloc_random(stream, F8_DTYPE_FP32, count, 9, 1.0f);
    BENCH_CUDA(cudaMalloc((void **)&k.scale_inv, (size_t)count * 4));
    BENCH_CUDA(cudaStreamSynchronize((cudaStream_t)stream));
    const double bytes = 2.0 * 4.0 * (double)L * count + 3.0 * 4.0 * count;
    bench_times t = bench_time_prep(stream, refill_row0, kcall, &k, bench_reps(bytes / 3e3, 30, 20, 150));
    report(log, &kc, L, count, bytes, t, copy_gbps);
    BENCH_CUDA(cudaFree(k.hist));
    BENCH_CUDA(cudaFree(k.row0));
    BENCH_CUDA(cudaFree(k.scale));
    BENCH_CUDA(cudaFree(k.scale_inv));
}

/* AdamW: one step of f8_adamw_step per call (the parameter changes each step;
 * the cost does not depend on its values). */
typedef struct awarg {
    f8_ctx *ctx;
    f8_adamw *o;
} awarg;

static void awcall(void *p, int i)
{
    awarg *a = p;
    (void)i;
    BENCH_F8(a->ctx, f8_adamw_step(a->o));
}

static void run_adamw(f8_ctx *ctx, bench_log *log, f8_adamw_moments moments, int64_t rows, int64_t cols,
                      double copy_gbps)
{
    static const kcase kc[3] = {{"adamw_fp32_moments", OP_ADAMW, F8_DTYPE_BF16, F8_DTYPE_FP32, 0},
                                {"adamw_bf16_moments", OP_ADAMW, F8_DTYPE_BF16, F8_DTYPE_BF16, 0},
                                {"adamw_fp8_moments", OP_ADAMW, F8_DTYPE_BF16, F8_DTYPE_E4M3, 0}};
    const int which = moments == F8_ADAMW_MOMENTS_FP32 ? 0 : moments == F8_ADAMW_MOMENTS_BF16 ? 1 : 2;
    void *stream = f8_ctx_stream(ctx);
    const int64_t n = rows * cols;
    void *param = bench_alloc_random(stream, F8_DTYPE_BF16, n, 11, 0.02f);
    void *grad = bench_alloc_random(stream, F8_DTYPE_BF16, n, 12, 1e-3f);
    f8_tensor pt = f8_tensor_make(param, F8_DTYPE_BF16, rows, cols), gt = f8_tensor_make(grad, F8_DTYPE_BF16, rows, cols);
    f8_adamw_config cfg = f8_adamw_config_default();
    cfg.moments = moments;
    awarg a = {.ctx = ctx, .o = NULL};
    BENCH_F8(ctx, f8_adamw_create(ctx, &cfg, &a.o));
    BENCH_F8(ctx, f8_adamw_add(a.o, &pt, &gt, 1));
    BENCH_CUDA(cudaStreamSynchronize((cudaStream_t)stream));
    /* per element: gradient read twice (norm, update), parameter read and
     * written, each moment read and written (FP8: a byte and 8/128 bytes of
     * scale_inv per block of 128) */
    const double mom = which == 0 ? 4.0 : which == 1 ? 2.0 : 1.0 + 4.0 / 128.0;
    const double bytes = (double)n * (2.0 + 2.0 + 2.0 * 2.0 + 2.0 * 2.0 * mom);
    bench_times t = bench_time(stream, awcall, &a, bench_reps(bytes / 3e3, 300, 10, 40));
    report(log, &kc[which], rows, cols, bytes, t, copy_gbps);
    f8_adamw_destroy(a.o);
    BENCH_CUDA(cudaFree(param));
    BENCH_CUDA(cudaFree(grad));
}

/* The row-wise fused activation lines: one call of act_fwd or act_bwd on x
 * [rows, cols_in] (cols_in = 2·cols gated) and dy [rows, cols]. */
typedef struct acase {
    const char *name;
    f8_activation act;
    int bwd;
    int64_t rows, cols; /* tokens, FFN (cols of v and dy) */
    /* the backward with the column-wise copy and fc1's BF16 dbias as the layer makes them: 0 neither; 1 now
     * (the cast given the column amaxes with dbias); 2 as before (the cast measures the amaxes again, for
     * dbias's order) */
    int cols_copy;
} acase;

typedef struct aarg {
    f8_ctx *ctx;
    const acase *ac;
    int nsets;
    void *x[MAX_SETS], *dy[MAX_SETS], *codes[MAX_SETS], *hp[MAX_SETS]; /* hp: u or dx (BF16) */
    void *codes_t[MAX_SETS];                                            /* the column-wise copy */
    float *amax, *row_si, *col_amax;
    void *dbias, *ws; /* the backward's copy: fc1's dbias (BF16) and its workspace */
    size_t ws_bytes;
} aarg;

/* The backward's column-only cast of d after the fused kernel, with dbias (as f8i_module_quantize_cols). */
static void acols(aarg *k, int s, int given)
{
    const acase *ac = k->ac;
    const int64_t ci = f8_activation_gated(ac->act) ? 2 * ac->cols : ac->cols;
    const f8_dtype dt = F8_DTYPE_E5M2;
    f8i_cast_args c = {.src = k->hp[s], .src_dtype = F8_DTYPE_BF16, .rows = ac->rows, .cols = ci, .out_dtype = dt,
                       .out_t = k->codes_t[s], .mode = F8I_SCALING_ROW, .scaled_max = f8_fp8_max(dt),
                       .scale_inv_t = k->col_amax, .col_amax_in = given, .dbias = k->dbias,
                       .dbias_dtype = F8_DTYPE_BF16, .dbias_accumulate = 1, .workspace = k->ws,
                       .workspace_bytes = k->ws_bytes};
    BENCH_F8(k->ctx, f8i_op_cast(k->ctx, &c));
}

static void acall(void *p, int i)
{
    aarg *k = p;
    const acase *ac = k->ac;
    const int s = i % k->nsets;
    const f8_dtype bf = F8_DTYPE_BF16, e4 = F8_DTYPE_E4M3;
    if (!ac->bwd) {
        f8i_act_fwd_args a = {.act = ac->act, .x = k->x[s], .x_dtype = bf, .rows = ac->rows, .cols = ac->cols,
                              .y = k->codes[s], .y_dtype = e4, .amax = k->amax, .scale_inv = k->row_si,
                              .mode = F8I_SCALING_ROW, .scaled_max = f8_fp8_max(e4), .y_hp = k->hp[s],
                              .hp_dtype = bf, .col_amax = k->col_amax};
        BENCH_F8(k->ctx, f8i_op_act_fwd(k->ctx, &a));
        return;
    }
    const f8_dtype e5 = F8_DTYPE_E5M2, dt = ac->cols_copy ? e5 : e4; /* the layer's gradient codes are E5M2 */
    f8i_act_bwd_args a = {.act = ac->act, .x = k->x[s], .x_dtype = bf, .dy = k->dy[s], .dy_dtype = bf,
                          .rows = ac->rows, .cols = ac->cols, .dx = k->hp[s], .dx_dtype = bf, .out = k->codes[s],
                          .out_dtype = dt, .amax = k->amax, .scale_inv = k->row_si, .mode = F8I_SCALING_ROW,
                          .scaled_max = f8_fp8_max(dt), .col_amax = ac->cols_copy == 2 ? NULL : k->col_amax};
    BENCH_F8(k->ctx, f8i_op_act_bwd(k->ctx, &a));
    if (ac->cols_copy) acols(k, s, ac->cols_copy == 1);
}

static void run_act_row(f8_ctx *ctx, bench_log *log, const acase *ac, double copy_gbps)
{
    void *stream = f8_ctx_stream(ctx);
    const int64_t rows = ac->rows, cols = ac->cols;
    const int64_t ci = f8_activation_gated(ac->act) ? 2 * cols : cols, n = rows * cols, ni = rows * ci;
    const int64_t nout = ac->bwd ? ni : n; /* the codes and u (dx) */
    /* x, dy, the codes, u (dx), scale_inv, the column amaxes; with the copy, its codes and one more read (of u,
     * or of x again): the same bytes for the old and the new way of a pair, so their GB/s compare as times */
    const double bytes = 2.0 * (double)ni + (ac->bwd ? 2.0 * (double)n : 0.0) + 3.0 * (double)nout +
                         4.0 * (double)rows + 4.0 * (double)(ac->bwd ? ci : cols) +
                         (ac->cols_copy ? 3.0 * (double)nout : 0.0);
    aarg k = {.ctx = ctx, .ac = ac};
    k.nsets = (int)(512e6 / bytes) + 1;
    if (k.nsets < 2) k.nsets = 2;
    if (k.nsets > MAX_SETS) k.nsets = MAX_SETS;
    for (int s = 0; s < k.nsets; s++) {
        k.x[s] = bench_alloc_random(stream, F8_DTYPE_BF16, ni, 200 + (uint64_t)s, 3.0f);
        k.dy[s] = ac->bwd ? bench_alloc_random(stream, F8_DTYPE_BF16, n, 300 + (uint64_t)s, 1.0f) : NULL;
        BENCH_CUDA(cudaMalloc(&k.codes[s], (size_t)nout));
        BENCH_CUDA(cudaMalloc(&k.hp[s], (size_t)nout * 2));
        k.codes_t[s] = NULL;
        if (ac->cols_copy) BENCH_CUDA(cudaMalloc(&k.codes_t[s], (size_t)nout));
    }
    k.ws_bytes = ac->bwd && ac->cols_copy ? f8i_reduce_workspace_bytes(rows, ci) : 0;
    k.dbias = k.ws = NULL;
    if (k.ws_bytes) {
        BENCH_CUDA(cudaMalloc(&k.ws, k.ws_bytes));
        BENCH_CUDA(cudaMalloc(&k.dbias, (size_t)ci * 2));
        BENCH_CUDA(cudaMemset(k.dbias, 0, (size_t)ci * 2));
    }
    BENCH_CUDA(cudaMalloc((void **)&k.amax, 4));
    BENCH_CUDA(cudaMemset(k.amax, 0, 4));
    BENCH_CUDA(cudaMalloc((void **)&k.row_si, (size_t)rows * 4));
    BENCH_CUDA(cudaMalloc((void **)&k.col_amax, (size_t)ci * 4));
    BENCH_CUDA(cudaStreamSynchronize((cudaStream_t)stream));

    const bench_times t = bench_time(stream, acall, &k, bench_reps(bytes / 3e3, 40, 20, 200));
    const kcase kc = {ac->name, OP_ACT_ROW, F8_DTYPE_BF16, F8_DTYPE_E4M3, 1};
    report(log, &kc, rows, ci, bytes, t, copy_gbps);
    /* column maxima a fused op left pending in the ctx's scratch go to their buffer before it is freed */
    BENCH_F8(k.ctx, f8_ctx_synchronize(k.ctx));

    for (int s = 0; s < k.nsets; s++) {
        BENCH_CUDA(cudaFree(k.x[s]));
        if (k.dy[s]) BENCH_CUDA(cudaFree(k.dy[s]));
        BENCH_CUDA(cudaFree(k.codes[s]));
        BENCH_CUDA(cudaFree(k.hp[s]));
        if (k.codes_t[s]) BENCH_CUDA(cudaFree(k.codes_t[s]));
    }
    if (k.ws) BENCH_CUDA(cudaFree(k.ws));
    if (k.dbias) BENCH_CUDA(cudaFree(k.dbias));
    BENCH_CUDA(cudaFree(k.amax));
    BENCH_CUDA(cudaFree(k.row_si));
    BENCH_CUDA(cudaFree(k.col_amax));
}

int main(int argc, char **argv)
{
    const int rowwise_only = argc > 1 && strcmp(argv[1], "rowwise") == 0;
    const int adamw_only = argc > 1 && strcmp(argv[1], "adamw") == 0;
    /* the GELU backward's column copy with dbias alone, now against before */
    const int tdb_only = argc > 1 && strcmp(argv[1], "tdb") == 0;
    /* the row-wise fused activation lines alone */
    const int act_only = argc > 1 && strcmp(argv[1], "act") == 0;
    f8_ctx *ctx = bench_ctx_or_skip("bench_kernels");
    if (!ctx) return 0;
    void *stream = f8_ctx_stream(ctx);
    bench_print_device("bench_kernels");
    /* the dbias casts work in their args' workspace; the ctx scratch serves as one
     * (the row-wise [65536, 3072] cast's is f8i_reduce_workspace_bytes: ~101 MB) */
    BENCH_F8(ctx, f8i_scratch_reserve(ctx, f8i_reduce_workspace_bytes(65536, 3072)));
    const double copy = bench_copy_gbps(stream);
    printf("device-to-device copy: %.1f GB/s (1 GiB cudaMemcpyAsync, read + write)\n\n", copy);

    static const kcase cases[] = {
        {"cast", OP_CAST, F8_DTYPE_BF16, F8_DTYPE_E4M3, 0},
        {"cast", OP_CAST, F8_DTYPE_FP32, F8_DTYPE_E4M3, 0},
        {"cast_transpose", OP_CAST_T, F8_DTYPE_BF16, F8_DTYPE_E4M3, 0},
        {"cast_transpose", OP_CAST_T, F8_DTYPE_FP32, F8_DTYPE_E4M3, 0},
        {"cast_transpose_dbias", OP_CAST_T_DBIAS, F8_DTYPE_BF16, F8_DTYPE_E5M2, 0},
        {"transpose", OP_TRANSPOSE, F8_DTYPE_E4M3, F8_DTYPE_E4M3, 0},
        {"dequantize", OP_CONVERT, F8_DTYPE_E4M3, F8_DTYPE_BF16, 0},
        {"convert", OP_CONVERT, F8_DTYPE_FP32, F8_DTYPE_BF16, 0},
        {"convert", OP_CONVERT, F8_DTYPE_BF16, F8_DTYPE_FP32, 0},
        {"rowwise", OP_ROW, F8_DTYPE_BF16, F8_DTYPE_E4M3, 1},
        {"rowwise_t", OP_ROW_T, F8_DTYPE_BF16, F8_DTYPE_E4M3, 1},
        {"rowwise_t_old", OP_ROW_T, F8_DTYPE_BF16, F8_DTYPE_E4M3, 2},
        {"rowwise_t", OP_ROW_T, F8_DTYPE_FP32, F8_DTYPE_E4M3, 1},
        {"rowwise_t_old", OP_ROW_T, F8_DTYPE_FP32, F8_DTYPE_E4M3, 2},
        {"rowwise_t_dbias", OP_ROW_T_DBIAS, F8_DTYPE_BF16, F8_DTYPE_E5M2, 1},
        {"rowwise_t_dbias_old", OP_ROW_T_DBIAS, F8_DTYPE_BF16, F8_DTYPE_E5M2, 2},
        {"norm_rowwise", OP_NORM_ROW, F8_DTYPE_BF16, F8_DTYPE_E4M3, 1},
        {"norm_rowwise_u", OP_NORM_ROW_HP, F8_DTYPE_BF16, F8_DTYPE_E4M3, 1},
        {"norm+rowwise", OP_NORM_THEN_ROW, F8_DTYPE_BF16, F8_DTYPE_E4M3, 1},
        {"norm_rowwise_colmax+t", OP_NORM_ROW_COLS, F8_DTYPE_BF16, F8_DTYPE_E4M3, 1},
        {"norm_rowwise_u+t", OP_NORM_ROW_THEN_COLS, F8_DTYPE_BF16, F8_DTYPE_E4M3, 1},
    };
    static const int64_t shapes[2][2] = {{8192, 8192}, {2048, 2048}};
    /* the row-wise casts at the trainers' shapes: 124M (65,536 tokens a
     * microbatch, d 768) and 1.3B (8,192 tokens, d 2048), d, 3d (qkv's gradient) and 4d wide */
    static const int64_t row_shapes[5][2] = {{65536, 768}, {65536, 3072}, {8192, 2048}, {8192, 6144}, {8192, 8192}};
    bench_log log = {NULL, 0, 0};
    printf("%-21s %-10s %-12s %9s %9s %8s %8s  %s\n", "kernel", "dtypes", "shape", "MB moved", "GPU us", "GB/s",
           "of copy", "target");
    if (adamw_only) { /* 1.3B parameters' worth (the GPT preset's 1.31e9) in one tensor */
        run_adamw(ctx, &log, F8_ADAMW_MOMENTS_FP32, 16384, 80000, copy);
        run_adamw(ctx, &log, F8_ADAMW_MOMENTS_BF16, 16384, 80000, copy);
        run_adamw(ctx, &log, F8_ADAMW_MOMENTS_FP8, 16384, 80000, copy);
    }
    for (int s = 0; s < 2 && !rowwise_only && !adamw_only && !tdb_only && !act_only; s++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            if (!cases[c].row) run_layout(ctx, &log, &cases[c], shapes[s][0], shapes[s][1], copy);
    for (int s = 0; s < 5 && !adamw_only && !tdb_only && !act_only; s++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            if (cases[c].row) run_layout(ctx, &log, &cases[c], row_shapes[s][0], row_shapes[s][1], copy);
    static const acase acases[] = {
        {"gelu_fwd_row", F8_ACT_GELU, 0, 8192, 8192, 0},
        {"gelu_bwd_row", F8_ACT_GELU, 1, 8192, 8192, 0},
        {"swiglu_fwd_row", F8_ACT_SWIGLU, 0, 8192, 8192, 0},
        {"swiglu_bwd_row", F8_ACT_SWIGLU, 1, 8192, 8192, 0},
        {"gelu_fwd_row", F8_ACT_GELU, 0, 65536, 3072, 0},
        {"gelu_bwd_row", F8_ACT_GELU, 1, 65536, 3072, 0},
        /* the backward with the column copy and fc1's dbias, now against before, at the 1.3B and 124M shapes */
        {"gelu_bwd_row+t_db", F8_ACT_GELU, 1, 8192, 8192, 1},
        {"gelu_bwd_row+t_db_old", F8_ACT_GELU, 1, 8192, 8192, 2},
        {"gelu_bwd_row+t_db", F8_ACT_GELU, 1, 65536, 3072, 1},
        {"gelu_bwd_row+t_db_old", F8_ACT_GELU, 1, 65536, 3072, 2},
    };
    for (size_t c = 0; c < sizeof acases / sizeof acases[0] && !adamw_only; c++)
        if (!tdb_only || acases[c].cols_copy) run_act_row(ctx, &log, &acases[c], copy);
    if (!rowwise_only && !adamw_only && !tdb_only && !act_only) {
        run_scale_update(ctx, &log, 16384, 1024, copy); /* 128 MB moved: bandwidth */
        run_scale_update(ctx, &log, 96, 1024, copy);    /* a small model's slots: latency */
    }

    printf("\n");
    bench_json(&log, "{\"bench\":\"copy\",\"bytes\":%.0f,\"gbps\":%.1f}", 2.0 * (1u << 30), copy);
    bench_log_flush(&log);
    f8_ctx_destroy(ctx);
    return 0;
}
