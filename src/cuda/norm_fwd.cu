/*
 * norm_fwd.cu — LayerNorm / RMSNorm forward (y FP32, BF16 or FP8 with amax),
 * the contract f8i_norm_fwd_args of backend.h.
 *
 * Design note. A row is reduced by a group of threads and never leaves
 * registers between the statistics and the output.
 *  - Rows up to FWD_MAX_COLS = 8192 columns (the common case): a persistent
 *    grid of FWD_THREADS-thread blocks, FWD_MIN_BLOCKS per SM (the launch
 *    bounds guarantee that many fit, so no occupancy query is needed), each
 *    block split into row groups of tpr threads (a power of two, 32..512:
 *    the fewest that cover the row with FWD_NV = 4 pieces each, a piece being
 *    the 16 bytes of x a thread moves at once: 8 BF16 or 4 FP32 elements). A
 *    group walks rows group, group + groups in the grid, ...; its threads
 *    keep x as the raw 16-byte words (BF16 stays 2 bytes an element) and
 *    convert each time they read it. The next row's x is loaded into a second
 *    register buffer before the current row's arithmetic starts, so every
 *    group always has a row in flight while it computes: without this the
 *    groups of an SM, which start together and take only ~8 rows each, loaded
 *    and computed in lockstep, and the kernel's time was roughly the sum of
 *    its memory time and its arithmetic time (50% of copy bandwidth at
 *    8192 x 4096 BF16 -> E4M3). Staging two rows ahead through shared
 *    memory (cp.async) instead was slower, and so was merging per-warp
 *    (count, mean, m2) with Chan's update to save a barrier: at this size
 *    the kernel is held back by its instruction count as much as by memory,
 *    so the per-row statistics use 1/cols once and rsqrtf rather than
 *    divisions. The row's sums are warp shuffles plus, for a
 *    multi-warp group, one word per warp through shared memory behind a named
 *    barrier of the group's threads only (bar.sync id, tpr), so groups never
 *    wait for each other. gamma (1 + gamma when zero centred) and beta are
 *    converted to FP32 into shared memory once per block, laid out so that a
 *    warp's 16-byte reads are conflict-free and a piece's place is a constant
 *    offset.
 *  - Wider rows, up to 16384 columns, take the older one-row-per-group
 *    kernel: a block of NORM_THREADS holds NORM_THREADS / tpr rows, each
 *    thread FWD_NV_LARGE pieces of NORM_VEC = 8 elements as floats; wider
 *    still, the "wide" kernel: a block per row streams it from memory once
 *    per pass, element by element.
 * In all of them the mean and the variance are two passes over the row (no
 * cancellation from E[x²] - E[x]²). Row sums are in FP32 in a fixed order
 * (butterfly within a warp, then warps in index order; a row-group thread
 * first keeps four partial sums, added pairwise, and accumulates the squared
 * deviations with fmaf): a re-run gives the same bits. The older kernels
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
#define FWD_THREADS 512      /* the row-group forward's block */
#define FWD_MIN_BLOCKS 2     /* its blocks per SM (launch bounds: <= 64 registers) */
#define FWD_NV 4             /* its pieces (16 bytes of x) per thread and row buffer */
#define FWD_MAX_COLS 8192    /* its widest row: at most 64 KB of gamma/beta in shared memory */
#define FWD_FILL 4           /* its pieces of gamma/beta per thread to fill, at most */
#define FWD_NV_LARGE 8       /* the older forward: pieces of NORM_VEC per thread, rows up to 16384 */

static_assert(NORM_THREADS % 32 == 0, "whole warps");
/* FP32 x (4 elements a piece) at FWD_MAX_COLS: tpr = FWD_THREADS, one group a
 * block, and the block fills FWD_MAX_COLS / 4 pieces of gamma/beta FWD_FILL a thread. */
static_assert(FWD_MAX_COLS <= FWD_THREADS * FWD_NV * 4, "a row group fits a block");
static_assert(FWD_MAX_COLS / 4 <= FWD_THREADS * FWD_FILL, "the gamma/beta fill covers the row");
static_assert(FWD_THREADS / 64 <= 15, "a named barrier (ids 1..15) per multi-warp group");
static_assert(FWD_MIN_BLOCKS * FWD_MAX_COLS * 2 * 4 <= 160 * 1024, "gamma/beta of the resident blocks fit an SM");

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
    float *mu, *rsigma;        /* (rows) or NULL */
    int tpr;                   /* threads per row */
    int w_x, w_y, w_p;         /* access widths (bytes) of x rows, y rows, gamma/beta */
} norm_fwd_params;

/* ------------------------------------------------------------------------ */
/* Device helpers                                                            */
/* ------------------------------------------------------------------------ */

/* The row-group forward's piece of x at element column c (E = 16 / sizeof(x)
 * elements): its raw 16 bytes, read with accesses of w bytes when whole, or
 * element by element at the row's end (zero words past it). */
template <int X_BF16>
static __device__ __forceinline__ uint4 load_raw(const void *row, int c, int cols, int w)
{
    constexpr int E = X_BF16 ? 8 : 4;
    uint32_t r[4];
    if (c + E <= cols) {
        load_bytes<16>(r, (const char *)row + (int64_t)c * (X_BF16 ? 2 : 4), w);
    } else if constexpr (X_BF16) {
        const uint16_t *h = (const uint16_t *)row;
#pragma unroll
        for (int i = 0; i < 4; ++i)
            r[i] = (c + 2 * i < cols ? (uint32_t)h[c + 2 * i] : 0u) |
                   (c + 2 * i + 1 < cols ? (uint32_t)h[c + 2 * i + 1] << 16 : 0u);
    } else {
        const uint32_t *f = (const uint32_t *)row;
#pragma unroll
        for (int i = 0; i < 4; ++i) r[i] = c + i < cols ? f[c + i] : 0u;
    }
    return make_uint4(r[0], r[1], r[2], r[3]);
}

/* A raw piece as its E floats (exact). */
template <int X_BF16>
static __device__ __forceinline__ void raw_floats(const uint4 &u, float (&v)[X_BF16 ? 8 : 4])
{
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
    decode16<X_BF16>(w, v);
}

/* E (4 or 8) elements of gamma or beta at column c, dtype chosen at run time
 * (a uniform branch): accesses of w bytes when whole, else element by element
 * (+0 past the row's end). */
template <int E>
static __device__ __forceinline__ void load_param_e(float (&v)[E], const void *p, int bf16, int c, int cols, int w)
{
    if (c + E <= cols) {
        if (bf16) {
            uint32_t r[E / 2];
            load_bytes<2 * E>(r, (const uint16_t *)p + c, w);
#pragma unroll
            for (int i = 0; i < E / 2; ++i) {
                v[2 * i] = __uint_as_float(r[i] << 16);
                v[2 * i + 1] = __uint_as_float(r[i] & 0xFFFF0000u);
            }
        } else {
            uint32_t r[E];
            load_bytes<4 * E>(r, (const float *)p + c, w);
#pragma unroll
            for (int j = 0; j < E; ++j) v[j] = __uint_as_float(r[j]);
        }
    } else {
#pragma unroll
        for (int j = 0; j < E; ++j) v[j] = c + j < cols ? load_one(p, bf16, c + j) : 0.0f;
    }
}

/* Store E outputs o at column c of a row of kind YK (FP8: codes of o · s),
 * with accesses of w bytes when whole, else element by element. */
template <int YK, int E>
static __device__ __forceinline__ void store_out(void *row, int c, int cols, const float (&o)[E], float s, int w)
{
    const bool whole = c + E <= cols;
    if constexpr (YK == Y_FP32) {
        float *d = (float *)row + c;
        uint32_t u[E];
#pragma unroll
        for (int j = 0; j < E; ++j) u[j] = __float_as_uint(o[j]);
        if (whole) {
            store_bytes<4 * E>(d, u, w);
        } else {
#pragma unroll
            for (int j = 0; j < E; ++j)
                if (c + j < cols) d[j] = o[j];
        }
    } else if constexpr (YK == Y_BF16) {
        uint16_t *d = (uint16_t *)row + c;
        uint32_t u[E / 2];
#pragma unroll
        for (int i = 0; i < E / 2; ++i)
            u[i] = (uint32_t)f8i_bf16_from_float(o[2 * i]) | ((uint32_t)f8i_bf16_from_float(o[2 * i + 1]) << 16);
        if (whole) {
            store_bytes<2 * E>(d, u, w);
        } else {
#pragma unroll
            for (int j = 0; j < E; ++j)
                if (c + j < cols) d[j] = (uint16_t)(u[j / 2] >> (16 * (j % 2)));
        }
    } else {
        uint8_t *d = (uint8_t *)row + c;
        uint32_t u[E / 4];
#pragma unroll
        for (int i = 0; i < E / 4; ++i) u[i] = fp8x4<YK == Y_E5M2>(o + 4 * i, s);
        if (whole) {
            store_bytes<E>(d, u, w);
        } else {
#pragma unroll
            for (int j = 0; j < E; ++j)
                if (c + j < cols) d[j] = (uint8_t)(u[j / 4] >> (8 * (j % 4)));
        }
    }
}

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

/* q[j % 4] += (x - m)² over a row-group thread's own columns of xr (fmaf). */
template <int X_BF16>
static __device__ __forceinline__ void deviations(float (&q)[4], const uint4 (&xr)[FWD_NV], float m, int c0, int cols,
                                                  int room)
{
    constexpr int E = X_BF16 ? 8 : 4;
#pragma unroll
    for (int k = 0; k < FWD_NV; ++k) {
        const int c = c0 + 32 * k * E;
        if (32 * k >= room) continue;
        float v[E];
        raw_floats<X_BF16>(xr[k], v);
        if (c + E <= cols) {
#pragma unroll
            for (int j = 0; j < E; ++j) {
                const float d = v[j] - m;
                q[j % 4] = __fmaf_rn(d, d, q[j % 4]);
            }
        } else {
#pragma unroll
            for (int j = 0; j < E; ++j) {
                const float d = v[j] - m;
                if (c + j < cols) q[j % 4] = __fmaf_rn(d, d, q[j % 4]);
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

/* The row group's FWD_NV pieces of x of row `row` (zero words where the
 * thread has no piece). room: see the kernel. */
template <int X_BF16>
static __device__ __forceinline__ void load_row(uint4 (&xr)[FWD_NV], const void *x, int64_t row, int cols, int c0,
                                                int room, int w)
{
    constexpr int E = X_BF16 ? 8 : 4;
    const char *xrow = (const char *)x + row * cols * (X_BF16 ? 2 : 4);
#pragma unroll
    for (int k = 0; k < FWD_NV; ++k)
        xr[k] = 32 * k < room ? load_raw<X_BF16>(xrow, c0 + 32 * k * E, cols, w) : make_uint4(0u, 0u, 0u, 0u);
}

/* Forward, rows up to FWD_MAX_COLS columns (the row-group kernel).
 * Grid: persistent, at most FWD_MIN_BLOCKS per SM (and no more than the rows
 * need); block FWD_THREADS, split into FWD_THREADS / tpr row groups of tpr
 * consecutive threads (nw = tpr / 32 warps). Group g of block b takes rows
 * b·groups + g, then every gridDim.x·groups rows after. Piece P of a row is
 * its columns E·P .. E·P + E-1 (E = 8 BF16 or 4 FP32: 16 bytes of x); of the
 * row's np pieces, warp w of the group owns the span of 32·kn starting at
 * 32·kn·w (kn = ceil(np / 32nw) <= FWD_NV), and its lane l the pieces
 * 32·kn·w + 32k + l, k < kn, that are < np: a warp reads 512 contiguous
 * bytes per k, and a piece's place depends on k only through a constant
 * offset. A thread holds x there as raw words (this row's in xr, the next
 * row's in xn), joins the row's two sums and writes those columns of y.
 * Dynamic shared memory: the FP32 gain (1 + gamma when zero centred) and, for
 * LayerNorm, beta, as NPL float4 planes per piece (gain elements 4h .. 4h+3
 * in plane h < E/4, beta's in plane E/4 + h), piece P plane h at float4
 * ((P / 32)·NPL + h)·32 + P % 32: a warp's reads are 512 contiguous bytes.
 * The group's thread 0 writes mu and rsigma; thread 0 of block 0 writes
 * scale_inv; each block adds its amax with one atomic. */
template <int X_BF16, int YK, int RMS>
static __global__ void __launch_bounds__(FWD_THREADS, FWD_MIN_BLOCKS) norm_fwd_rows_kernel(norm_fwd_params p)
{
    constexpr int E = X_BF16 ? 8 : 4;
    constexpr int YS = YK == Y_FP32 ? 4 : YK == Y_BF16 ? 2 : 1;
    constexpr int FP8 = YK == Y_E4M3 || YK == Y_E5M2;
    constexpr int NPL = (E / 4) * (RMS ? 1 : 2); /* float4 planes per piece */
    extern __shared__ float4 gb[];
    __shared__ float red[2][FWD_THREADS / 32]; /* [slot][warp] */
    const int tpr = p.tpr, group = threadIdx.x / tpr, lane = threadIdx.x & 31;
    const int groups = FWD_THREADS / tpr, nw = tpr >> 5, first = group * nw, bar = 1 + group;
    const int w = (threadIdx.x >> 5) - first; /* warp within the group */
    const int cols = (int)p.cols, np = (cols + E - 1) / E;
    const int kn = (np + 32 * nw - 1) / (32 * nw); /* pieces per lane, <= FWD_NV */
    const int p0 = 32 * kn * w + lane;           /* this thread's piece k is p0 + 32k */
    const int end = np < 32 * kn * (w + 1) ? np : 32 * kn * (w + 1);
    const int room = end - p0;                   /* piece k is ours iff 32k < room */
    const int c0 = p0 * E;                       /* its column is c0 + 32kE */
    const float4 *gbt = gb + (size_t)(kn * w * NPL) * 32 + lane; /* piece k plane h: gbt[(k·NPL + h)·32] */
    const float inv_n = 1.0f / (cols > 0 ? (float)cols : 1.0f); /* the statistics scale sums by it */
    const int64_t rows = p.rows;
    const int stride = (int)gridDim.x * groups; /* the launcher keeps the grid to what the GPU holds */
    int64_t row = (int64_t)blockIdx.x * groups + group;

    /* The first row's x, in flight while gamma/beta are fetched. */
    uint4 xr[FWD_NV], xn[FWD_NV];
    load_row<X_BF16>(xr, p.x, row < rows ? row : 0, cols, c0, row < rows ? room : 0, p.w_x);
#pragma unroll
    for (int k = 0; k < FWD_NV; ++k) xn[k] = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll 1
    for (int i = 0; i < FWD_FILL; ++i) {
        const int P = (int)threadIdx.x + i * FWD_THREADS;
        if (P >= np) break;
        float4 *at = gb + (size_t)((P >> 5) * NPL) * 32 + (P & 31); /* plane h at at[32h] */
        float g[E];
        load_param_e<E>(g, p.gamma, p.p_bf16, P * E, cols, p.w_p);
        if (p.zero_centered) /* gain 0 past the row's end all the same */
#pragma unroll
            for (int j = 0; j < E; ++j)
                if (P * E + j < cols) g[j] = 1.0f + g[j];
#pragma unroll
        for (int h = 0; h < E / 4; ++h) at[32 * h] = make_float4(g[4 * h], g[4 * h + 1], g[4 * h + 2], g[4 * h + 3]);
        if (!RMS) {
            float b[E];
            load_param_e<E>(b, p.beta, p.p_bf16, P * E, cols, p.w_p);
#pragma unroll
            for (int h = 0; h < E / 4; ++h)
                at[32 * (E / 4 + h)] = make_float4(b[4 * h], b[4 * h + 1], b[4 * h + 2], b[4 * h + 3]);
        }
    }
    __syncthreads();

    const float s = FP8 ? *p.scale : 1.0f;
    float amax = 0.0f;
    int slot = 0; /* which red array the next group_total uses */
    while (row < rows) {
        /* The next row's loads go out before this row's arithmetic. */
        const int64_t next = row + stride;
        if (next < rows) load_row<X_BF16>(xn, p.x, next, cols, c0, room, p.w_x);

        /* mu, then m2 = Σ (x - mu)² over the row's own columns (x² for
         * RMSNorm): group totals, two passes over the registers. */
        float mu = 0.0f;
        if (!RMS) {
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int k = 0; k < FWD_NV; ++k) {
                if (32 * k >= room) continue; /* zeros there anyway */
                float v[E];
                raw_floats<X_BF16>(xr[k], v);
#pragma unroll
                for (int j = 0; j < E; ++j) acc[j % 4] += v[j];
            }
            mu = group_total(pairwise_sum(acc), nw, first, red[slot], bar) * inv_n;
            slot ^= 1;
        }
        float q[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        deviations<X_BF16>(q, xr, mu, c0, cols, room);
        const float rs = rsqrtf(group_total(pairwise_sum(q), nw, first, red[slot], bar) * inv_n + p.eps);
        slot ^= 1;
        if (threadIdx.x == (unsigned)(first * 32)) {
            if (!RMS && p.mu != NULL) p.mu[row] = mu;
            if (p.rsigma != NULL) p.rsigma[row] = rs;
        }

        char *yrow = (char *)p.y + row * cols * YS;
#pragma unroll
        for (int k = 0; k < FWD_NV; ++k) {
            const int c = c0 + 32 * k * E;
            if (32 * k >= room) continue;
            float v[E], o[E];
            raw_floats<X_BF16>(xr[k], v);
#pragma unroll
            for (int h = 0; h < E / 4; ++h) {
                const float4 g4 = gbt[(k * NPL + h) * 32];
                const float g[4] = {g4.x, g4.y, g4.z, g4.w};
                if (RMS) {
#pragma unroll
                    for (int i = 0; i < 4; ++i) o[4 * h + i] = (v[4 * h + i] * rs) * g[i];
                } else {
                    const float4 b4 = gbt[(k * NPL + E / 4 + h) * 32];
                    const float b[4] = {b4.x, b4.y, b4.z, b4.w};
#pragma unroll
                    for (int i = 0; i < 4; ++i) o[4 * h + i] = __fmaf_rn((v[4 * h + i] - mu) * rs, g[i], b[i]);
                }
            }
            /* Past the row's end g = b = 0 and x = 0: o is ±0 or NaN there,
             * neither of which moves fmaxf. */
            if (FP8)
#pragma unroll
                for (int j = 0; j < E; ++j) amax = fmaxf(amax, fabsf(o[j]));
            store_out<YK, E>(yrow, c, cols, o, s, p.w_y);
        }
#pragma unroll
        for (int k = 0; k < FWD_NV; ++k) xr[k] = xn[k];
        row = next;
    }
    if (FP8) {
        if (p.scale_inv != NULL && blockIdx.x == 0 && threadIdx.x == 0) *p.scale_inv = 1.0f / s;
        if (p.amax != NULL) block_amax_atomic<FWD_THREADS>(amax, p.amax);
    }
}

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

/* The row-group forward: a persistent grid of FWD_MIN_BLOCKS blocks per SM
 * (all resident at once: the launch bounds cap the registers for that many,
 * and 2 x 64 KB of gamma/beta fit an SM), or fewer when the rows need fewer. */
template <int X_BF16, int YK, int RMS>
static cudaError_t launch_fwd_rows(const norm_fwd_params *p, int64_t blocks, size_t smem, int sm_count,
                                   cudaStream_t stream)
{
    void (*kernel)(norm_fwd_params) = norm_fwd_rows_kernel<X_BF16, YK, RMS>;
    if (smem > 48 * 1024) {
        const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (err != cudaSuccess) return err;
    }
    const int64_t cap = (int64_t)(sm_count > 0 ? sm_count : 1) * FWD_MIN_BLOCKS;
    const int64_t grid = blocks < cap ? blocks : cap;
    kernel<<<(unsigned)(grid > 0 ? grid : 1), FWD_THREADS, smem, stream>>>(*p);
    return cudaSuccess;
}

template <int X_BF16, int YK>
static cudaError_t launch_fwd_rows_n(const norm_fwd_params *p, int64_t blocks, size_t smem, int sm_count,
                                     cudaStream_t stream)
{
    return p->rms ? launch_fwd_rows<X_BF16, YK, 1>(p, blocks, smem, sm_count, stream)
                  : launch_fwd_rows<X_BF16, YK, 0>(p, blocks, smem, sm_count, stream);
}

template <int X_BF16>
static cudaError_t launch_fwd_rows_y(const norm_fwd_params *p, int64_t blocks, size_t smem, int sm_count,
                                     cudaStream_t stream)
{
    switch (p->y_kind) {
    case Y_FP32: return launch_fwd_rows_n<X_BF16, Y_FP32>(p, blocks, smem, sm_count, stream);
    case Y_BF16: return launch_fwd_rows_n<X_BF16, Y_BF16>(p, blocks, smem, sm_count, stream);
    case Y_E4M3: return launch_fwd_rows_n<X_BF16, Y_E4M3>(p, blocks, smem, sm_count, stream);
    default: return launch_fwd_rows_n<X_BF16, Y_E5M2>(p, blocks, smem, sm_count, stream);
    }
}

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
        /* Row groups: pieces of 16 bytes of x, FWD_NV a thread. */
        const int e = p.x_bf16 ? 8 : 4;
        const int64_t np = (a->cols + e - 1) / e;
        int tpr = 32;
        while ((int64_t)tpr * FWD_NV < np) tpr *= 2;
        p.tpr = tpr;
        p.w_y = access_width(a->y, a->cols * y_size, y_size * e < 16 ? y_size * e : 16);
        const int64_t groups = FWD_THREADS / tpr, blocks = (a->rows + groups - 1) / groups;
        /* gamma/beta planes: whole spans of 32 pieces (the layout's unit) */
        const size_t smem = (size_t)((np + 31) / 32 * 32) * e * sizeof(float) * (p.rms ? 1 : 2);
        const int sm_count = f8i_cuda(ctx)->sm_count;
        const cudaError_t err = p.x_bf16 ? launch_fwd_rows_y<1>(&p, blocks, smem, sm_count, stream)
                                         : launch_fwd_rows_y<0>(&p, blocks, smem, sm_count, stream);
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
