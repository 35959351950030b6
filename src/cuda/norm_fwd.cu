/*
 * norm_fwd.cu — LayerNorm / RMSNorm forward (y FP32, BF16 or FP8 with amax),
 * the contract f8i_norm_fwd_args of backend.h.
 *
 * Design note. A row is reduced by a group of threads and never leaves
 * registers between the statistics and the output.
 *  - Rows up to FWD_MAX_COLS = 8192 columns (the common case): the
 *    row-group kernels of norm_fwd_rows.cu (their design note there).
 *  - Wider rows, up to 16384 columns, take the older one-row-per-group
 *    kernel: a block of NORM_THREADS holds NORM_THREADS / tpr rows, each
 *    thread FWD_NV_LARGE pieces of NORM_VEC = 8 elements as floats; wider
 *    still, the "wide" kernel: a block per row streams it from memory once
 *    per pass, element by element.
 * In all of them the mean and the variance are two passes over the row (no
 * cancellation from E[x²] - E[x]²). Row sums are in FP32 in a fixed order
 * (butterfly within a warp, then warps in index order; a row-group thread
 * first keeps four partial sums, added pairwise, and accumulates the squared
 * deviations with fmaf): a re-run gives the same bits, and every row-group
 * configuration but CHAN gives the same bits (CHAN rounds its M2 and mu
 * differently, within the tolerance the CPU oracle is held to). The older kernels
 * take rsigma = 1.0f / sqrtf(var + eps) with IEEE sqrt and division; the
 * row-group kernel mu = Σx · (1/cols) and rsigma = rsqrtf(Σ(x-mu)² · (1/cols)
 * + eps) (within 2 ulps). The elementwise steps follow the CPU oracle's
 * order (src/cpu/norm.c; the build passes -fmad=false), except that the
 * row-group kernel adds beta with one fmaf: y = fmaf((x - mu)·rs, g, beta).
 * FP8 codes are the cast's: cvt.rn.satfinite of v · scale.
 */
#include <limits.h>
#include <stdint.h>

#include "norm_common.cuh"

#define NORM_THREADS 256     /* the older forward's block (and the wide forward's) */
#define FWD_NV_LARGE 8       /* the older forward: pieces of NORM_VEC per thread, rows up to 16384 */

static_assert(NORM_THREADS % 32 == 0, "whole warps");


/* Forward, rows wider than FWD_MAX_COLS, up to NORM_THREADS * NV * NORM_VEC
 * columns. Grid: ceil(rows / (NORM_THREADS / tpr)) blocks; block NORM_THREADS.
 * Thread t of a row's tpr-thread group owns pieces t, t + tpr, ... (NV of
 * them, columns 8(t + k·tpr) .. +7) of that row: it holds x there in
 * registers, joins the row's two sums and writes those columns of y. The
 * group's thread 0 writes mu and rsigma; thread 0 of block 0 writes scale_inv. */
template <int X_BF16, int YK, int NV>
static __global__ void __launch_bounds__(NORM_THREADS) norm_fwd_kernel(norm_fwd_params p)
{
    constexpr int FP8 = YK == Y_E4M3 || YK == Y_E5M2;
    __shared__ float red[1][32];
    const int tpr = p.tpr, t = threadIdx.x & (tpr - 1);
    const int64_t row = (int64_t)blockIdx.x * (NORM_THREADS / tpr) + threadIdx.x / tpr;
    const bool live = row < p.rows; /* uniform over the group */
    const int64_t cols = p.cols, base = (live ? row : 0) * cols;
    const void *xrow = (const char *)p.x + base * (X_BF16 ? 2 : 4);
    const float n = cols > 0 ? (float)cols : 1.0f;

    float v[NV][NORM_VEC];
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int64_t c = (int64_t)(t + k * tpr) * NORM_VEC;
        if (live && c < cols) {
            load_piece<X_BF16>(v[k], xrow, c, cols, p.w_x);
        } else {
#pragma unroll
            for (int j = 0; j < NORM_VEC; ++j) v[k][j] = 0.0f;
        }
    }

    float mu = 0.0f;
    if (!p.rms) {
        float s[1] = {0.0f};
#pragma unroll
        for (int k = 0; k < NV; ++k)
#pragma unroll
            for (int j = 0; j < NORM_VEC; ++j) s[0] += v[k][j];
        group_sum<1>(s, tpr, red);
        mu = s[0] / n;
    }
    /* Σ (x - mu)² (mu = 0 for RMS), over the row's own columns only. */
    float q[1] = {0.0f};
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int64_t c = (int64_t)(t + k * tpr) * NORM_VEC;
#pragma unroll
        for (int j = 0; j < NORM_VEC; ++j) {
            const float d = v[k][j] - mu;
            if (c + j < cols) q[0] += d * d;
        }
    }
    group_sum<1>(q, tpr, red);
    const float rs = 1.0f / sqrtf(q[0] / n + p.eps);
    if (live && t == 0) {
        if (p.mu != NULL && !p.rms) p.mu[row] = mu;
        if (p.rsigma != NULL) p.rsigma[row] = rs;
    }

    const float s = FP8 ? *p.scale : 1.0f;
    void *yrow = (char *)p.y + base * (YK == Y_FP32 ? 4 : YK == Y_BF16 ? 2 : 1);
    float a = 0.0f;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int64_t c = (int64_t)(t + k * tpr) * NORM_VEC;
        if (!live || c >= cols) continue;
        float g[NORM_VEC], b[NORM_VEC], o[NORM_VEC];
        load_param(g, p.gamma, p.p_bf16, c, cols, p.w_p);
        if (!p.rms) load_param(b, p.beta, p.p_bf16, c, cols, p.w_p);
#pragma unroll
        for (int j = 0; j < NORM_VEC; ++j) {
            const float gj = p.zero_centered ? 1.0f + g[j] : g[j];
            o[j] = p.rms ? (v[k][j] * rs) * gj : ((v[k][j] - mu) * rs) * gj + b[j];
            if (FP8 && c + j < cols) a = fmaxf(a, fabsf(o[j]));
        }
        store_piece<YK>(yrow, c, cols, o, s, p.w_y);
    }
    if (FP8) {
        if (p.scale_inv != NULL && blockIdx.x == 0 && threadIdx.x == 0) *p.scale_inv = 1.0f / s;
        if (p.amax != NULL) block_amax_atomic<NORM_THREADS>(a, p.amax);
    }
}

/* Forward, any row length (rows longer than the register kernel holds).
 * Grid: rows blocks; block NORM_THREADS, one row. Thread t owns columns t,
 * t + NORM_THREADS, ... and reads them once per pass: the sum, the squared
 * deviations, the output. Dtypes are read at run time. */
static __global__ void __launch_bounds__(NORM_THREADS) norm_fwd_wide_kernel(norm_fwd_params p)
{
    __shared__ float red[1][32];
    const int64_t row = blockIdx.x, cols = p.cols, base = row * cols;
    const int fp8 = p.y_kind == Y_E4M3 || p.y_kind == Y_E5M2;
    const float n = cols > 0 ? (float)cols : 1.0f;
    float mu = 0.0f;
    if (!p.rms) {
        float s[1] = {0.0f};
        for (int64_t c = threadIdx.x; c < cols; c += NORM_THREADS) s[0] += load_one(p.x, p.x_bf16, base + c);
        group_sum<1>(s, NORM_THREADS, red);
        mu = s[0] / n;
    }
    float q[1] = {0.0f};
    for (int64_t c = threadIdx.x; c < cols; c += NORM_THREADS) {
        const float d = load_one(p.x, p.x_bf16, base + c) - mu;
        q[0] += d * d;
    }
    group_sum<1>(q, NORM_THREADS, red);
    const float rs = 1.0f / sqrtf(q[0] / n + p.eps);
    if (threadIdx.x == 0) {
        if (p.mu != NULL && !p.rms) p.mu[row] = mu;
        if (p.rsigma != NULL) p.rsigma[row] = rs;
    }
    const float s = fp8 ? *p.scale : 1.0f;
    float a = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += NORM_THREADS) {
        const float x = load_one(p.x, p.x_bf16, base + c);
        const float g0 = load_one(p.gamma, p.p_bf16, c);
        const float g = p.zero_centered ? 1.0f + g0 : g0;
        const float o = p.rms ? (x * rs) * g : ((x - mu) * rs) * g + load_one(p.beta, p.p_bf16, c);
        a = fmaxf(a, fabsf(o));
        store_one(p.y, p.y_kind, base + c, o, s);
    }
    if (fp8) {
        if (p.scale_inv != NULL && blockIdx.x == 0 && threadIdx.x == 0) *p.scale_inv = 1.0f / s;
        if (p.amax != NULL) block_amax_atomic<NORM_THREADS>(a, p.amax);
    }
}

/* ------------------------------------------------------------------------ */
/* Launchers                                                                 */
/* ------------------------------------------------------------------------ */

/* The older forward (rows wider than FWD_MAX_COLS). */
template <int X_BF16>
static void launch_fwd_y(const norm_fwd_params *p, unsigned blocks, cudaStream_t stream)
{
    switch (p->y_kind) {
    case Y_FP32: norm_fwd_kernel<X_BF16, Y_FP32, FWD_NV_LARGE><<<blocks, NORM_THREADS, 0, stream>>>(*p); break;
    case Y_BF16: norm_fwd_kernel<X_BF16, Y_BF16, FWD_NV_LARGE><<<blocks, NORM_THREADS, 0, stream>>>(*p); break;
    case Y_E4M3: norm_fwd_kernel<X_BF16, Y_E4M3, FWD_NV_LARGE><<<blocks, NORM_THREADS, 0, stream>>>(*p); break;
    default: norm_fwd_kernel<X_BF16, Y_E5M2, FWD_NV_LARGE><<<blocks, NORM_THREADS, 0, stream>>>(*p); break;
    }
}

/* ------------------------------------------------------------------------ */
/* Backend entry point                                                       */
/* ------------------------------------------------------------------------ */

f8_status f8i_cuda_norm_fwd(f8_ctx *ctx, const f8i_norm_fwd_args *a)
{
    const int fp8 = a->y_dtype == F8_DTYPE_E4M3 || a->y_dtype == F8_DTYPE_E5M2;
    if (!is_fp32_or_bf16(a->x_dtype) || !is_fp32_or_bf16(a->param_dtype) ||
        (!fp8 && !is_fp32_or_bf16(a->y_dtype)))
        return f8i_error(ctx, F8_ERR_DTYPE, "norm forward: dtypes x %s, params %s, y %s not supported",
                         f8_dtype_name(a->x_dtype), f8_dtype_name(a->param_dtype), f8_dtype_name(a->y_dtype));
    if (a->rows <= 0) {
        /* No rows: the FP8 output still gets its own scale_inv. */
        if (!fp8 || a->scale_inv == NULL) return F8_OK;
        return f8i_cuda_reciprocal(ctx, a->scale, a->scale_inv, NULL);
    }

    norm_fwd_params p;
    p.x = a->x;
    p.rows = a->rows;
    p.cols = a->cols;
    p.gamma = a->gamma;
    p.beta = a->beta;
    p.x_bf16 = a->x_dtype == F8_DTYPE_BF16;
    p.p_bf16 = a->param_dtype == F8_DTYPE_BF16;
    p.y_kind = a->y_dtype == F8_DTYPE_FP32 ? Y_FP32
               : a->y_dtype == F8_DTYPE_BF16 ? Y_BF16
               : a->y_dtype == F8_DTYPE_E4M3 ? Y_E4M3
                                             : Y_E5M2;
    p.rms = a->rms != 0;
    p.zero_centered = a->zero_centered != 0;
    p.eps = a->eps;
    p.y = a->y;
    p.scale = a->scale;
    p.amax = fp8 ? a->amax : NULL;
    p.scale_inv = fp8 ? a->scale_inv : NULL;
    p.mu = a->mu;
    p.rsigma = a->rsigma;
    const int y_size = p.y_kind == Y_FP32 ? 4 : p.y_kind == Y_BF16 ? 2 : 1;
    p.w_x = access_width(a->x, a->cols * (p.x_bf16 ? 2 : 4), 16);
    p.w_p = access_width(a->gamma, 0, 16);
    if (!p.rms && access_width(a->beta, 0, 16) < p.w_p) p.w_p = access_width(a->beta, 0, 16);
    cudaStream_t stream = f8i_stream(ctx);

    if (a->cols >= 0 && a->cols <= FWD_MAX_COLS) {
        const cudaError_t err = f8i_cuda_norm_fwd_rows(&p, a->variant, f8i_cuda(ctx)->sm_count, stream);
        if (err != cudaSuccess) return f8i_cuda_check(ctx, err, "norm_fwd_rows_kernel setup");
        F8I_COUNT_LAUNCHES(ctx, 1);
        return f8i_cuda_launch_check(ctx, "norm_fwd_rows_kernel");
    }

    p.w_y = access_width(a->y, a->cols * y_size, y_size * NORM_VEC < 16 ? y_size * NORM_VEC : 16);
    int tpr = 0; /* the older kernel's: the fewest threads (32..NORM_THREADS) whose pieces cover a row */
    for (int t = 32; t <= NORM_THREADS && tpr == 0; t *= 2)
        if ((int64_t)t * FWD_NV_LARGE * NORM_VEC >= a->cols) tpr = t;
    if (tpr == 0) {
        if (a->rows > INT_MAX)
            return f8i_error(ctx, F8_ERR_UNSUPPORTED, "norm forward: %lld rows in one launch", (long long)a->rows);
        p.tpr = NORM_THREADS;
        norm_fwd_wide_kernel<<<(unsigned)a->rows, NORM_THREADS, 0, stream>>>(p);
        F8I_COUNT_LAUNCHES(ctx, 1);
        return f8i_cuda_launch_check(ctx, "norm_fwd_wide_kernel");
    }
    p.tpr = tpr;
    const int64_t rows_per_block = NORM_THREADS / tpr;
    const int64_t blocks = (a->rows + rows_per_block - 1) / rows_per_block;
    if (blocks > INT_MAX)
        return f8i_error(ctx, F8_ERR_UNSUPPORTED, "norm forward: %lld rows in one launch", (long long)a->rows);
    if (p.x_bf16)
        launch_fwd_y<1>(&p, (unsigned)blocks, stream);
    else
        launch_fwd_y<0>(&p, (unsigned)blocks, stream);
    F8I_COUNT_LAUNCHES(ctx, 1);
    return f8i_cuda_launch_check(ctx, "norm_fwd_kernel");
}
