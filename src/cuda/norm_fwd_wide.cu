/*
 * norm_fwd_wide.cu — the LayerNorm / RMSNorm forward for rows wider than the
 * row-group kernels of norm_fwd.cu hold (FWD_MAX_COLS), which calls it.
 *
 * Design note. Up to NORM_THREADS · FWD_NV_LARGE · NORM_VEC = 16384 columns
 * a row stays in registers: a block of NORM_THREADS holds NORM_THREADS / tpr
 * rows (tpr the fewest threads, 32 .. NORM_THREADS, that cover one), each
 * thread FWD_NV_LARGE pieces of NORM_VEC elements as floats. Wider still, the
 * "wide" kernel: a block per row streams it from memory once per pass, element
 * by element, with the dtypes read at run time. Both take the mean and the
 * variance in two passes (no cancellation from E[x²] - E[x]²), sums in FP32
 * in a fixed order (group_sum: butterfly within a warp, then warps in index
 * order), so a re-run gives the same bits; rsigma = 1.0f / sqrtf(var + eps)
 * with IEEE sqrt and division, and the elementwise steps in the CPU
 * oracle's order (src/cpu/norm.c; the build passes -fmad=false).
 */
#include <limits.h>
#include <stdint.h>

#include "norm_fwd.cuh"

#define NORM_THREADS 256 /* both kernels' block */
#define FWD_NV_LARGE 8   /* pieces of NORM_VEC per thread: rows up to 16384 in registers */

static_assert(NORM_THREADS % 32 == 0, "whole warps");

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */
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
    const bool counting = FP8 && p.stats != NULL; /* uniform */
    unsigned sat = 0, flushed = 0;
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
        if (FP8 && counting) piece_stats<YK, NORM_VEC, int64_t>(o, s, c, cols, sat, flushed);
    }
    if (FP8) {
        if (p.scale_inv != NULL && blockIdx.x == 0 && threadIdx.x == 0) *p.scale_inv = 1.0f / s;
        if (p.amax != NULL) block_amax_atomic<NORM_THREADS>(a, p.amax);
        if (counting) block_stats_atomic<NORM_THREADS>(sat, flushed, p.stats, p.rows * p.cols, blockIdx.x == 0);
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
    const bool counting = fp8 && p.stats != NULL; /* uniform */
    unsigned sat = 0, flushed = 0;
    for (int64_t c = threadIdx.x; c < cols; c += NORM_THREADS) {
        const float x = load_one(p.x, p.x_bf16, base + c);
        const float g0 = load_one(p.gamma, p.p_bf16, c);
        const float g = p.zero_centered ? 1.0f + g0 : g0;
        const float o = p.rms ? (x * rs) * g : ((x - mu) * rs) * g + load_one(p.beta, p.p_bf16, c);
        a = fmaxf(a, fabsf(o));
        store_one(p.y, p.y_kind, base + c, o, s);
        if (counting) {
            const int e5m2 = p.y_kind == Y_E5M2;
            const uint32_t code = (e5m2 ? fp8x2<1>(o * s, 0.0f) : fp8x2<0>(o * s, 0.0f)) & 0xFFu;
            if (e5m2) code_stats<1>(o, s, code, sat, flushed);
            else code_stats<0>(o, s, code, sat, flushed);
        }
    }
    if (fp8) {
        if (p.scale_inv != NULL && blockIdx.x == 0 && threadIdx.x == 0) *p.scale_inv = 1.0f / s;
        if (p.amax != NULL) block_amax_atomic<NORM_THREADS>(a, p.amax);
        if (counting) block_stats_atomic<NORM_THREADS>(sat, flushed, p.stats, p.rows * p.cols, blockIdx.x == 0);
    }
}

/* ------------------------------------------------------------------------ */
/* Launch                                                                    */
/* ------------------------------------------------------------------------ */

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

f8_status f8i_norm_fwd_wide_launch(f8_ctx *ctx, norm_fwd_params *p)
{
    const int y_size = p->y_kind == Y_FP32 ? 4 : p->y_kind == Y_BF16 ? 2 : 1;
    cudaStream_t stream = f8i_stream(ctx);
    p->w_y = access_width(p->y, p->cols * y_size, y_size * NORM_VEC < 16 ? y_size * NORM_VEC : 16);
    int tpr = 0; /* the fewest threads (32..NORM_THREADS) whose pieces cover a row */
    for (int t = 32; t <= NORM_THREADS && tpr == 0; t *= 2)
        if ((int64_t)t * FWD_NV_LARGE * NORM_VEC >= p->cols) tpr = t;
    if (tpr == 0) {
        if (p->rows > INT_MAX)
            return f8i_error(ctx, F8_ERR_UNSUPPORTED, "norm forward: %lld rows in one launch", (long long)p->rows);
        p->tpr = NORM_THREADS;
        norm_fwd_wide_kernel<<<(unsigned)p->rows, NORM_THREADS, 0, stream>>>(*p);
        F8I_COUNT_LAUNCHES(ctx, 1);
        return f8i_cuda_launch_check(ctx, "norm_fwd_wide_kernel");
    }
    p->tpr = tpr;
    const int64_t rows_per_block = NORM_THREADS / tpr;
    const int64_t blocks = (p->rows + rows_per_block - 1) / rows_per_block;
    if (blocks > INT_MAX)
        return f8i_error(ctx, F8_ERR_UNSUPPORTED, "norm forward: %lld rows in one launch", (long long)p->rows);
    if (p->x_bf16)
        launch_fwd_y<1>(p, (unsigned)blocks, stream);
    else
        launch_fwd_y<0>(p, (unsigned)blocks, stream);
    F8I_COUNT_LAUNCHES(ctx, 1);
    return f8i_cuda_launch_check(ctx, "norm_fwd_kernel");
}
