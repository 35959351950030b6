/*
 * norm_fwd.cuh — what the norm forward's files share (norm_fwd.cu: the
 * entry point and the row-group kernels; norm_fwd_fit.cu: the kernel for
 * rows that fit its layout exactly; norm_fwd_wide.cu: rows wider than
 * FWD_MAX_COLS): the launch parameters, the row-group sums, the gamma/beta
 * planes in shared memory, the cp.async helpers and the launchers the entry
 * point calls. Only those three files include this.
 */
#ifndef F8_CUDA_NORM_FWD_CUH
#define F8_CUDA_NORM_FWD_CUH

#include <stdint.h>

#include "norm_common.cuh"

#define FWD_MAX_COLS 8192 /* the row-group kernels' widest row: at most 64 KB of gamma/beta in shared memory */

typedef struct norm_fwd_params {
    const void *x;             /* (rows, cols) FP32 or BF16 */
    int64_t rows, cols;
    const void *gamma, *beta;  /* (cols) param dtype; beta unused for RMS */
    int x_bf16, p_bf16, y_kind; /* dtypes (the wide kernel reads them at run time) */
    int rms, zero_centered;
    float eps;
    void *y;                   /* (rows, cols) */
    const float *scale;        /* FP8 y */
    float *amax, *scale_inv;   /* FP8 y, or NULL */
    unsigned long long *stats; /* FP8 y: telemetry [3] (f8i_norm_fwd_args.stats) or NULL */
    float *mu, *rsigma;        /* (rows) or NULL */
    int tpr;                   /* threads per row */
    int w_x, w_y, w_p;         /* access widths (bytes) of x rows, y rows, gamma/beta */
} norm_fwd_params;

/* a[0] becomes the sum of a[0..N-1], added pairwise in a fixed order. */
template <int N>
static __device__ __forceinline__ float pairwise_sum(float (&a)[N])
{
#pragma unroll
    for (int h = N / 2; h > 0; h >>= 1)
#pragma unroll
        for (int j = 0; j < h; ++j) a[j] += a[j + h];
    return a[0];
}

/* The sum of v over a row group of nw warps (warps first .. first + nw - 1 of
 * the block): a butterfly within the warp (every lane gets the same bits),
 * then, for nw > 1, each warp's total through red[warp] and the group's
 * warps added in index order after a named barrier (id bar, the group's
 * threads only). Every thread of the group calls it. A caller alternates
 * between two red arrays: a warp writes red again only two calls later,
 * after the barrier of the call between, which every thread reaches only
 * after reading this call's words. */
static __device__ __forceinline__ float group_total(float v, int nw, int first, float *red, int bar)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    if (nw == 1) return v;
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    asm volatile("bar.sync %0, %1;" ::"r"(bar), "r"(nw * 32) : "memory");
    float s = 0.0f;
    for (int k = 0; k < nw; ++k) s += red[first + k];
    return s;
}

/* gamma (1 + gamma when zero centred) and, for LayerNorm, beta of the row's
 * np pieces into gb as FP32 planes (the kernels' layout), then a barrier. */
template <int X_BF16, int RMS, int THREADS>
static __device__ __forceinline__ void fill_params(float4 *gb, const norm_fwd_params &p, int cols, int np)
{
    constexpr int E = X_BF16 ? 8 : 4, NPL = (E / 4) * (RMS ? 1 : 2);
    constexpr int FILL = (FWD_MAX_COLS / 4 + THREADS - 1) / THREADS; /* pieces a thread fills, at most */
#pragma unroll 1
    for (int i = 0; i < FILL; ++i) {
        const int P = (int)threadIdx.x + i * THREADS;
        if (P >= np) break;
        float4 *at = gb + (size_t)((P >> 5) * NPL) * 32 + (P & 31); /* plane h at at[32h] */
        float g[E];
        load_param<E, int>(g, p.gamma, p.p_bf16, P * E, cols, p.w_p);
        if (p.zero_centered) /* gain 0 past the row's end all the same */
#pragma unroll
            for (int j = 0; j < E; ++j)
                if (P * E + j < cols) g[j] = 1.0f + g[j];
#pragma unroll
        for (int h = 0; h < E / 4; ++h) at[32 * h] = make_float4(g[4 * h], g[4 * h + 1], g[4 * h + 2], g[4 * h + 3]);
        if (!RMS) {
            float b[E];
            load_param<E, int>(b, p.beta, p.p_bf16, P * E, cols, p.w_p);
#pragma unroll
            for (int h = 0; h < E / 4; ++h)
                at[32 * (E / 4 + h)] = make_float4(b[4 * h], b[4 * h + 1], b[4 * h + 2], b[4 * h + 3]);
        }
    }
    __syncthreads();
}

/* 16 bytes from global to shared memory, asynchronously (cached in L2 only:
 * x is read once), and the group bookkeeping of those copies. */
static __device__ __forceinline__ void cp_async16(void *smem, const void *gmem)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}

static __device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

/* Wait until at most N of this thread's committed groups are still in flight. */
template <int N>
static __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* The fit kernel (norm_fwd_fit.cu): 1 when it can run p (BF16 x in 16-byte
 * aligned rows that its layout covers exactly, FP8 or BF16 y), and its
 * launch. p->tpr must be the row-group kernels' choice. */
int f8i_norm_fwd_fit_fits(const norm_fwd_params *p);
f8_status f8i_norm_fwd_fit_launch(f8_ctx *ctx, const norm_fwd_params *p);

/* Rows wider than FWD_MAX_COLS (norm_fwd_wide.cu): picks the kernel, sets
 * p->tpr and p->w_y, launches and checks the launch. */
f8_status f8i_norm_fwd_wide_launch(f8_ctx *ctx, norm_fwd_params *p);

#endif /* F8_CUDA_NORM_FWD_CUH */
