/*
 * norm_bwd.cu — LayerNorm / RMSNorm backward (dx, dgamma, dbeta), the
 * contract f8i_norm_bwd_args of backend.h.
 *
 * Design note. A block walks a row block of rows_per_block rows one row at a
 * time; each thread owns the same columns in every row, keeps g for them and
 * their column sums Σ dy·xhat and Σ dy across the row block in registers, and
 * writes those once to the args' workspace as the row block's partial sums.
 * dbias_reduce_kernel (kernels_common.cuh) then adds the partials in row-block
 * order, so dgamma and dbeta are deterministic.
 *  - Rows up to BWD_THREADS · BWD_MAX_NV · 8 = 8192 columns: a block of tpr
 *    threads (32..BWD_THREADS), NV = 1 or 2 pieces of 8 columns a thread.
 *    The grid is sized so that every block is resident at once (the launch
 *    bounds fix how many fit) and the rows are split evenly among them: one
 *    wave, no tail, the fewest partial rows. A thread keeps its pieces of x
 *    and dy as raw words, and loads the next row's (with its mu and rsigma)
 *    into a second buffer before the current row's arithmetic, so a block
 *    always has a row in flight. The row's two sums are a butterfly within
 *    each warp, then one word per warp and sum through shared memory, read
 *    back by every lane and added by a second butterfly: one barrier a row
 *    (two alternating slots, as in norm_fwd.cu), and every thread gets the
 *    same bits. A BF16 dx is rounded by cvt.rn.bf16x2 (round to nearest
 *    even, as f8i_bf16_from_float, differing only in a NaN's payload).
 *  - Wider rows take the "wide" kernel: a block of BWD_WIDE_THREADS streams
 *    the row from memory twice (sums, then dx), element by element, and
 *    accumulates its column sums straight into its own partial row in the
 *    workspace (each address touched by one thread only).
 *  - The fast kernel (norm_bwd_fast_kernel) is the register kernel for what
 *    training passes: x BF16, rows of whole pieces (cols % 8 == 0), x, dy
 *    and dx 16-byte aligned at every row, a row block within 32-bit byte
 *    offsets. The register kernel is issue-bound (H200, 8192 x 4096 BF16:
 *    44 instructions an element where the arithmetic takes about 14): run-
 *    time access widths, edge checks and 64-bit indices on every access. The
 *    fast one has none of these (a piece is whole or past the row's end,
 *    known before the loop; uint4 moves at 32-bit offsets; RMS and the dtypes
 *    are template flags) and spends less on the row sums: the two butterflies
 *    run one sum per half-warp (lanes 0-15 Σ g·dy, 16-31 Σ g·dy·xhat), the
 *    cross-warp one over red padded with +0 to 16 warps, and each lane
 *    divides one sum. g is read 4 columns at a time, rsigma and mu are staged
 *    in shared memory per tpr rows. Grid, block, thread ownership and every
 *    rounding step are the register kernel's, so the bits are too (the
 *    comments at each difference say why): about 26 instructions an element.
 * With at most one row block per BWD_MIN_ROWS = 16 rows, the partials,
 * [2, row_blocks, cols] FP32, fit in f8i_reduce_workspace_bytes. Products and
 * sums are FP32 (the register kernel accumulates Σ g·dy·xhat, Σ dy·xhat with
 * fmaf); the elementwise dx follows the CPU oracle's order (src/cpu/norm.c).
 * dx_accumulate (f8_module_backward_add: the residual's gradient joins the
 * input gradient in the store) has every kernel read dx's piece where it is
 * about to store it and add it to the FP32 value before the one rounding,
 * as the oracle does: a uniform branch, no extra pass over dx.
 */
#include <limits.h>
#include <stdint.h>

#include "norm_common.cuh"

#define BWD_THREADS 512      /* the register kernel's largest block */
#define BWD_MAX_NV 2         /* its pieces of 8 columns per thread: rows up to 512 * 2 * 8 = 8192 */
#define BWD_WIDE_THREADS 512 /* the wide backward's block */
#define BWD_MIN_ROWS 16      /* rows per row block, at least on average (the workspace bound) */

/* Blocks of BWD_THREADS per SM the register kernel's launch bounds guarantee. */
#define BWD_MIN_BLOCKS(NV) ((NV) == 1 ? 2 : 1)

static_assert(BWD_THREADS % 32 == 0 && BWD_THREADS <= 1024 && BWD_THREADS / 32 <= 32, "whole warps, one block");
static_assert(BWD_MIN_ROWS >= 16, "f8i_reduce_workspace_bytes counts one partial row per 16 rows");

typedef struct norm_bwd_params {
    const void *dy, *x;        /* (rows, cols) FP32 or BF16 */
    int64_t rows, cols;
    const float *mu, *rsigma;  /* (rows); mu unused for RMS */
    const void *gamma;         /* (cols) param dtype */
    int x_bf16, dy_bf16, p_bf16, dx_bf16;
    int rms, zero_centered;
    void *dx;                  /* (rows, cols) or NULL */
    int dx_acc;                /* dx += the value (read in dx's dtype, FP32 add, one rounding) */
    float *partial;            /* (2, row_blocks, cols): Σ dy·xhat, then Σ dy; or NULL */
    int64_t row_blocks, rows_per_block;
    int w_x, w_dy, w_dx, w_p, w_part;
    int n_pow2;                /* cols is a power of two: inv_n = 1/cols exactly */
    float inv_n;
} norm_bwd_params;

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

/* dx's piece at column c: BF16 (cvt, 2 codes a word) or FP32. */
static __device__ __forceinline__ void store_dx(void *row, int bf16, int64_t c, int64_t cols,
                                                const float (&o)[NORM_VEC], int w)
{
    if (!bf16) {
        store_piece<Y_FP32>(row, c, cols, o, 1.0f, w);
        return;
    }
    uint16_t *d = (uint16_t *)row + c;
    uint32_t u[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) u[i] = bf16x2(o[2 * i], o[2 * i + 1]);
    if (c + NORM_VEC <= cols) {
        store_bytes<16>(d, u, w);
    } else {
#pragma unroll
        for (int j = 0; j < NORM_VEC; ++j)
            if (c + j < cols) d[j] = (uint16_t)(u[j / 2] >> (16 * (j % 2)));
    }
}

/* Backward, rows up to BWD_THREADS * NV * NORM_VEC columns.
 * Grid: row_blocks blocks, all resident at once; block tpr threads (a power
 * of two, 32 .. BWD_THREADS). Block b owns rows b·rows_per_block ..
 * +rows_per_block-1, taken one at a time. Thread t owns pieces t, t + tpr
 * (columns 8(t + k·tpr) .. +7) of every row: g there, the row's x and dy
 * (raw, with the next row's behind them), and the columns' sums Σ dy·xhat and
 * Σ dy over the block's rows, which it writes to partial rows b and
 * row_blocks + b at the end. */
template <int X_BF16, int DY_BF16, int NV>
static __global__ void __launch_bounds__(BWD_THREADS, BWD_MIN_BLOCKS(NV)) norm_bwd_kernel(norm_bwd_params p)
{
    constexpr int XW = X_BF16 ? 4 : 8, DW = DY_BF16 ? 4 : 8; /* words a piece */
    __shared__ float red[2][2][BWD_THREADS / 32];           /* [slot][sum][warp] */
    const int tpr = blockDim.x, t = threadIdx.x, lane = t & 31, nw = tpr >> 5;
    const int64_t cols = p.cols;
    const int64_t r0 = (int64_t)blockIdx.x * p.rows_per_block;
    const int64_t r1 = r0 + p.rows_per_block < p.rows ? r0 + p.rows_per_block : p.rows;
    const float n = (float)cols;

    uint32_t xc[NV][XW], dc[NV][DW], xn[NV][XW], dn[NV][DW]; /* this row's pieces, the next row's */
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int64_t c = (int64_t)(t + k * tpr) * NORM_VEC;
#pragma unroll
        for (int i = 0; i < XW; ++i) xc[k][i] = xn[k][i] = 0u;
#pragma unroll
        for (int i = 0; i < DW; ++i) dc[k][i] = dn[k][i] = 0u;
        if (c < cols) {
            load_words<X_BF16>(xc[k], (const char *)p.x + r0 * cols * (X_BF16 ? 2 : 4), c, cols, p.w_x);
            load_words<DY_BF16>(dc[k], (const char *)p.dy + r0 * cols * (DY_BF16 ? 2 : 4), c, cols, p.w_dy);
        }
    }
    float rs = p.rsigma[r0], mu = p.rms ? 0.0f : p.mu[r0]; /* x - 0 is x: the RMS xhat */

    /* g for this thread's columns, in shared memory (registers would spill):
     * gs[k][j][t], so that a warp's reads of one (k, j) are consecutive words */
    __shared__ float gs[NV][NORM_VEC][BWD_THREADS];
    float dg[NV][NORM_VEC], db[NV][NORM_VEC];
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int64_t c = (int64_t)(t + k * tpr) * NORM_VEC;
        float g[NORM_VEC];
        if (c < cols) {
            load_param(g, p.gamma, p.p_bf16, c, cols, p.w_p);
        } else {
#pragma unroll
            for (int j = 0; j < NORM_VEC; ++j) g[j] = 0.0f;
        }
#pragma unroll
        for (int j = 0; j < NORM_VEC; ++j) {
            gs[k][j][t] = p.zero_centered ? 1.0f + g[j] : g[j];
            dg[k][j] = 0.0f;
            db[k][j] = 0.0f;
        }
    }
    /* (each thread reads only what it wrote: no barrier needed) */

    int slot = 0;
    for (int64_t row = r0; row < r1; ++row) {
        /* The next row's loads go out before this row's arithmetic. */
        float rs_n = 0.0f, mu_n = 0.0f;
        if (row + 1 < r1) {
            const char *xrow = (const char *)p.x + (row + 1) * cols * (X_BF16 ? 2 : 4);
            const char *dyrow = (const char *)p.dy + (row + 1) * cols * (DY_BF16 ? 2 : 4);
#pragma unroll
            for (int k = 0; k < NV; ++k) {
                const int64_t c = (int64_t)(t + k * tpr) * NORM_VEC;
                if (c < cols) {
                    load_words<X_BF16>(xn[k], xrow, c, cols, p.w_x);
                    load_words<DY_BF16>(dn[k], dyrow, c, cols, p.w_dy);
                }
            }
            rs_n = p.rsigma[row + 1];
            mu_n = p.rms ? 0.0f : p.mu[row + 1];
        }

        /* Past the row's end dy = 0, so nothing there reaches a sum. */
        float m0 = 0.0f, m1 = 0.0f;
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            float x[NORM_VEC], dy[NORM_VEC];
            words_floats<X_BF16>(xc[k], x);
            words_floats<DY_BF16>(dc[k], dy);
#pragma unroll
            for (int j = 0; j < NORM_VEC; ++j) {
                const float xhat = (x[j] - mu) * rs;
                const float gdy = gs[k][j][t] * dy[j];
                m0 += gdy;
                m1 = __fmaf_rn(gdy, xhat, m1);
                dg[k][j] = __fmaf_rn(dy[j], xhat, dg[k][j]);
                db[k][j] += dy[j];
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            m0 += __shfl_xor_sync(0xFFFFFFFFu, m0, o);
            m1 += __shfl_xor_sync(0xFFFFFFFFu, m1, o);
        }
        if (nw > 1) { /* uniform: the block is one row group */
            if (lane == 0) {
                red[slot][0][t >> 5] = m0;
                red[slot][1][t >> 5] = m1;
            }
            __syncthreads();
            /* A warp writes red[slot] again two rows later, after the barrier
             * of the row between, which every thread reaches only after
             * these reads. */
            m0 = red[slot][0][lane & (nw - 1)];
            m1 = red[slot][1][lane & (nw - 1)];
            for (int o = nw >> 1; o > 0; o >>= 1) {
                m0 += __shfl_xor_sync(0xFFFFFFFFu, m0, o);
                m1 += __shfl_xor_sync(0xFFFFFFFFu, m1, o);
            }
            slot ^= 1;
        }

        if (p.dx != NULL) {
            const float mean_gdy = p.rms ? 0.0f : m0 / n;
            const float mean_gdy_xhat = m1 / n;
            void *dxrow = (char *)p.dx + row * cols * (p.dx_bf16 ? 2 : 4);
#pragma unroll
            for (int k = 0; k < NV; ++k) {
                const int64_t c = (int64_t)(t + k * tpr) * NORM_VEC;
                if (c >= cols) continue;
                float x[NORM_VEC], dy[NORM_VEC], o[NORM_VEC];
                words_floats<X_BF16>(xc[k], x);
                words_floats<DY_BF16>(dc[k], dy);
#pragma unroll
                for (int j = 0; j < NORM_VEC; ++j) {
                    const float xhat = (x[j] - mu) * rs;
                    const float gdy = gs[k][j][t] * dy[j];
                    o[j] = ((gdy - mean_gdy) - xhat * mean_gdy_xhat) * rs;
                }
                if (p.dx_acc) { /* the old dx joins before the rounding */
                    float old[NORM_VEC];
                    if (p.dx_bf16) load_piece<1>(old, dxrow, c, cols, p.w_dx);
                    else load_piece<0>(old, dxrow, c, cols, p.w_dx);
#pragma unroll
                    for (int j = 0; j < NORM_VEC; ++j) o[j] = o[j] + old[j];
                }
                store_dx(dxrow, p.dx_bf16, c, cols, o, p.w_dx);
            }
        }
#pragma unroll
        for (int k = 0; k < NV; ++k) {
#pragma unroll
            for (int i = 0; i < XW; ++i) xc[k][i] = xn[k][i];
#pragma unroll
            for (int i = 0; i < DW; ++i) dc[k][i] = dn[k][i];
        }
        rs = rs_n;
        mu = mu_n;
    }

    if (p.partial == NULL) return;
    float *pg = p.partial + (int64_t)blockIdx.x * cols;
    float *pb = p.partial + (p.row_blocks + blockIdx.x) * cols;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int64_t c = (int64_t)(t + k * tpr) * NORM_VEC;
        if (c >= cols) continue;
        store_piece<Y_FP32>(pg, c, cols, dg[k], 1.0f, p.w_part);
        store_piece<Y_FP32>(pb, c, cols, db[k], 1.0f, p.w_part);
    }
}

/* A piece of the fast kernel at p (16-byte aligned) as raw words: one uint4
 * of BF16, two of FP32. */
template <int BF16>
static __device__ __forceinline__ void load_fast(uint32_t (&r)[BF16 ? 4 : 8], const char *p)
{
#pragma unroll
    for (int i = 0; i < (BF16 ? 1 : 2); ++i) {
        const uint4 v = ((const uint4 *)p)[i];
        r[4 * i] = v.x;
        r[4 * i + 1] = v.y;
        r[4 * i + 2] = v.z;
        r[4 * i + 3] = v.w;
    }
}

/* Backward, the common case (the launcher's `fast`): x BF16, dy BF16 (DY_BF16)
 * or FP32, dx BF16 (DX_BF16) or FP32, RMS or LayerNorm.
 * Grid, block, what a thread owns and every rounding step are those of
 * norm_bwd_kernel<1, DY_BF16, NV>, and so are the bits; the design note says
 * what differs. A thread's piece k of row i lies i·pitch + (t + k·tpr)·16
 * bytes into the block's rows of BF16 (twice that for FP32). rm holds rsigma
 * and mu of the next tpr rows, one loaded by each thread. */
template <int DY_BF16, int DX_BF16, int NV, int RMS>
static __global__ void __launch_bounds__(BWD_THREADS, BWD_MIN_BLOCKS(NV)) norm_bwd_fast_kernel(norm_bwd_params p)
{
    constexpr int DW = DY_BF16 ? 4 : 8, YS = DY_BF16 ? 0 : 1, DS = DX_BF16 ? 0 : 1; /* dy words; FP32 shifts */
    __shared__ float red[2][2][BWD_THREADS / 32]; /* [slot][sum][warp] */
    __shared__ float4 gs[NV][2][BWD_THREADS];     /* g, 4 columns at a time */
    __shared__ float rm[2][BWD_THREADS];          /* [rsigma, mu][row - c0] */
    const int tpr = blockDim.x, t = threadIdx.x, lane = t & 31, cols = (int)p.cols;
    const int64_t r0 = (int64_t)blockIdx.x * p.rows_per_block;
    const int nrows = (int)(p.rows - r0 < p.rows_per_block ? p.rows - r0 : p.rows_per_block);
    const float n = (float)cols;
    const uint32_t pitch = (uint32_t)cols * 2, step = (uint32_t)tpr * 16;
    const char *xb = (const char *)p.x + r0 * pitch;
    const char *yb = (const char *)p.dy + (r0 * pitch << YS);
    char *dxb = (char *)p.dx + (r0 * pitch << DS);

    /* act[k]: piece k is in the row; else it lies past the row's end and,
     * as in norm_bwd_kernel, has x = dy = 0 and is neither read nor written. */
    bool act[NV];
    uint32_t xr[NV][4], dr[NV][DW]; /* raw x and dy of the row, then of the next */
    float dg[NV][NORM_VEC], db[NV][NORM_VEC];
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        act[k] = (t + k * tpr) * NORM_VEC < cols;
        const uint32_t o = (uint32_t)(t + k * tpr) * 16;
#pragma unroll
        for (int i = 0; i < 4; ++i) xr[k][i] = 0u;
#pragma unroll
        for (int i = 0; i < DW; ++i) dr[k][i] = 0u;
        float g[NORM_VEC];
#pragma unroll
        for (int j = 0; j < NORM_VEC; ++j) g[j] = 0.0f;
        if (act[k]) {
            load_fast<1>(xr[k], xb + o);
            load_fast<DY_BF16>(dr[k], yb + (o << YS));
            load_param(g, p.gamma, p.p_bf16, (int64_t)(t + k * tpr) * NORM_VEC, p.cols, p.w_p);
        }
#pragma unroll
        for (int j = 0; j < NORM_VEC; ++j) {
            g[j] = p.zero_centered ? 1.0f + g[j] : g[j];
            dg[k][j] = 0.0f;
            db[k][j] = 0.0f;
        }
        gs[k][0][t] = make_float4(g[0], g[1], g[2], g[3]);
        gs[k][1][t] = make_float4(g[4], g[5], g[6], g[7]);
    }
    /* The cross-warp butterfly always runs 4 levels; warps nw .. 15 add +0,
     * which changes no sum here (none is -0: each starts from +0, and x + y
     * is -0 only for two -0). */
    for (int e = t; e < 2 * 2 * (BWD_THREADS / 32); e += tpr) (&red[0][0][0])[e] = 0.0f;

    for (int c0 = 0; c0 < nrows; c0 += tpr) {
        const int c1 = nrows - c0 < tpr ? nrows : c0 + tpr;
        __syncthreads(); /* the last chunk's reads of rm are done */
        if (c0 + t < c1) {
            rm[0][t] = p.rsigma[r0 + c0 + t];
            if (!RMS) rm[1][t] = p.mu[r0 + c0 + t];
        }
        __syncthreads();
        for (int i = c0; i < c1; ++i) {
            const uint32_t o = (uint32_t)i * pitch + (uint32_t)t * 16; /* piece 0 of row i */
            const float rs = rm[0][i - c0], mu = RMS ? 0.0f : rm[1][i - c0];
            float m0 = 0.0f, m1 = 0.0f, xh[NV][NORM_VEC], gd[NV][NORM_VEC];
#pragma unroll
            for (int k = 0; k < NV; ++k) {
                float x[NORM_VEC], dy[NORM_VEC];
                words_floats<1>(xr[k], x);
                words_floats<DY_BF16>(dr[k], dy);
                const float4 g0 = gs[k][0][t], g1 = gs[k][1][t];
                const float g[NORM_VEC] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
                for (int j = 0; j < NORM_VEC; ++j) {
                    xh[k][j] = (x[j] - mu) * rs;
                    gd[k][j] = g[j] * dy[j];
                    m0 += gd[k][j];
                    m1 = __fmaf_rn(gd[k][j], xh[k][j], m1);
                    dg[k][j] = __fmaf_rn(dy[j], xh[k][j], dg[k][j]);
                    db[k][j] += dy[j];
                }
            }
            /* The next row's loads go into the words just unpacked; the
             * compiler issues them before this row's arithmetic. */
            if (i + 1 < nrows) {
#pragma unroll
                for (int k = 0; k < NV; ++k)
                    if (act[k]) {
                        load_fast<1>(xr[k], xb + (o + pitch + k * step));
                        load_fast<DY_BF16>(dr[k], yb + ((o + pitch + k * step) << YS));
                    }
            }

            /* norm_bwd_kernel's two butterflies, one sum per half-warp:
             * lanes 0-15 carry m0, 16-31 m1, and every add has the operands
             * it has there. */
            const bool hi = lane >= 16;
            float v = (hi ? m1 : m0) + __shfl_xor_sync(0xFFFFFFFFu, hi ? m0 : m1, 16);
#pragma unroll
            for (int s = 8; s > 0; s >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, s);
            /* red[i & 1] is written again two rows on, after the barrier of
             * the row between, which every thread passes after this read. */
            if ((lane & 15) == 0) red[i & 1][lane >> 4][t >> 5] = v;
            __syncthreads();
            v = red[i & 1][lane >> 4][lane & 15];
#pragma unroll
            for (int s = 8; s > 0; s >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, s);
            /* Sum / n, one division a lane; times the exact 1/n when n is a
             * power of two (the same quotient, rounded once either way). */
            v = p.n_pow2 ? v * p.inv_n : v / n;
            const float mean_gdy = RMS ? 0.0f : __shfl_sync(0xFFFFFFFFu, v, 0);
            const float mean_gdy_xhat = __shfl_sync(0xFFFFFFFFu, v, 16);

#pragma unroll
            for (int k = 0; k < NV; ++k) {
                if (!act[k]) continue;
                uint32_t y[NORM_VEC];
                uint4 *d = (uint4 *)(dxb + ((o + k * step) << DS));
                float old[NORM_VEC];
#pragma unroll
                for (int j = 0; j < NORM_VEC; ++j) old[j] = 0.0f;
                if (p.dx_acc) { /* the old dx joins before the rounding (the register kernel's order) */
                    uint32_t r[DX_BF16 ? 4 : 8];
                    load_fast<DX_BF16>(r, (const char *)d);
                    words_floats<DX_BF16>(r, old);
                }
#pragma unroll
                for (int j = 0; j < NORM_VEC; ++j) {
                    const float v = ((gd[k][j] - mean_gdy) - xh[k][j] * mean_gdy_xhat) * rs;
                    y[j] = __float_as_uint(p.dx_acc ? v + old[j] : v);
                }
                if (DX_BF16) {
                    d[0] = make_uint4(bf16x2(__uint_as_float(y[0]), __uint_as_float(y[1])),
                                      bf16x2(__uint_as_float(y[2]), __uint_as_float(y[3])),
                                      bf16x2(__uint_as_float(y[4]), __uint_as_float(y[5])),
                                      bf16x2(__uint_as_float(y[6]), __uint_as_float(y[7])));
                } else {
                    d[0] = make_uint4(y[0], y[1], y[2], y[3]);
                    d[1] = make_uint4(y[4], y[5], y[6], y[7]);
                }
            }
        }
    }

    if (p.partial == NULL) return;
    float *pg = p.partial + (int64_t)blockIdx.x * p.cols;
    float *pb = p.partial + (p.row_blocks + blockIdx.x) * p.cols;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int64_t c = (int64_t)(t + k * tpr) * NORM_VEC;
        if (!act[k]) continue;
        store_piece<Y_FP32>(pg, c, p.cols, dg[k], 1.0f, p.w_part);
        store_piece<Y_FP32>(pb, c, p.cols, db[k], 1.0f, p.w_part);
    }
}

/* Backward, any row length.
 * Grid: row_blocks blocks; block BWD_WIDE_THREADS. Block b owns the rows of
 * row block b, one at a time; thread t owns columns t, t + BWD_WIDE_THREADS,
 * ...: per row it reads them once for the two row sums, adding dy·xhat and
 * dy into its own entries of partial rows b and row_blocks + b (the first
 * row stores), and once more for dx. Dtypes are read at run time. */
static __global__ void __launch_bounds__(BWD_WIDE_THREADS) norm_bwd_wide_kernel(norm_bwd_params p)
{
    __shared__ float red[2][32];
    const int64_t cols = p.cols;
    const int64_t r0 = (int64_t)blockIdx.x * p.rows_per_block;
    const int64_t r1 = r0 + p.rows_per_block < p.rows ? r0 + p.rows_per_block : p.rows;
    const float n = (float)cols;
    float *pg = p.partial != NULL ? p.partial + (int64_t)blockIdx.x * cols : NULL;
    float *pb = p.partial != NULL ? p.partial + (p.row_blocks + blockIdx.x) * cols : NULL;

    for (int64_t row = r0; row < r1; ++row) {
        const int64_t base = row * cols;
        const float rs = p.rsigma[row];
        const float mu = p.rms ? 0.0f : p.mu[row];
        float m[2] = {0.0f, 0.0f};
        for (int64_t c = threadIdx.x; c < cols; c += BWD_WIDE_THREADS) {
            const float g0 = load_one(p.gamma, p.p_bf16, c);
            const float g = p.zero_centered ? 1.0f + g0 : g0;
            const float dy = load_one(p.dy, p.dy_bf16, base + c);
            const float xhat = (load_one(p.x, p.x_bf16, base + c) - mu) * rs;
            const float gdy = g * dy;
            m[0] += gdy;
            m[1] += gdy * xhat;
            if (pg != NULL) {
                pg[c] = (row == r0 ? 0.0f : pg[c]) + dy * xhat;
                pb[c] = (row == r0 ? 0.0f : pb[c]) + dy;
            }
        }
        group_sum<2>(m, BWD_WIDE_THREADS, red);
        if (p.dx == NULL) continue;
        const float mean_gdy = p.rms ? 0.0f : m[0] / n;
        const float mean_gdy_xhat = m[1] / n;
        for (int64_t c = threadIdx.x; c < cols; c += BWD_WIDE_THREADS) {
            const float g0 = load_one(p.gamma, p.p_bf16, c);
            const float g = p.zero_centered ? 1.0f + g0 : g0;
            const float xhat = (load_one(p.x, p.x_bf16, base + c) - mu) * rs;
            const float gdy = g * load_one(p.dy, p.dy_bf16, base + c);
            float v = ((gdy - mean_gdy) - xhat * mean_gdy_xhat) * rs;
            if (p.dx_acc) v = v + load_one(p.dx, p.dx_bf16, base + c); /* the old dx, before the rounding */
            store_one(p.dx, p.dx_bf16 ? Y_BF16 : Y_FP32, base + c, v, 1.0f);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Launchers                                                                 */
/* ------------------------------------------------------------------------ */

template <int NV>
static void launch_bwd(const norm_bwd_params *p, unsigned blocks, int tpr, cudaStream_t stream)
{
    if (p->x_bf16)
        p->dy_bf16 ? norm_bwd_kernel<1, 1, NV><<<blocks, tpr, 0, stream>>>(*p)
                   : norm_bwd_kernel<1, 0, NV><<<blocks, tpr, 0, stream>>>(*p);
    else
        p->dy_bf16 ? norm_bwd_kernel<0, 1, NV><<<blocks, tpr, 0, stream>>>(*p)
                   : norm_bwd_kernel<0, 0, NV><<<blocks, tpr, 0, stream>>>(*p);
}

template <int DY_BF16, int NV>
static void launch_bwd_fast(const norm_bwd_params *p, unsigned blocks, int tpr, cudaStream_t stream)
{
    if (p->dx_bf16)
        p->rms ? norm_bwd_fast_kernel<DY_BF16, 1, NV, 1><<<blocks, tpr, 0, stream>>>(*p)
               : norm_bwd_fast_kernel<DY_BF16, 1, NV, 0><<<blocks, tpr, 0, stream>>>(*p);
    else
        p->rms ? norm_bwd_fast_kernel<DY_BF16, 0, NV, 1><<<blocks, tpr, 0, stream>>>(*p)
               : norm_bwd_fast_kernel<DY_BF16, 0, NV, 0><<<blocks, tpr, 0, stream>>>(*p);
}

/* ------------------------------------------------------------------------ */
/* Backend entry point                                                       */
/* ------------------------------------------------------------------------ */

f8_status f8i_cuda_norm_bwd(f8_ctx *ctx, const f8i_norm_bwd_args *a)
{
    if (!f8i_dtype_is_hp(a->x_dtype) || !f8i_dtype_is_hp(a->dy_dtype) || !f8i_dtype_is_hp(a->param_dtype) ||
        (a->dx != NULL && !f8i_dtype_is_hp(a->dx_dtype)))
        return f8i_error(ctx, F8_ERR_DTYPE, "norm backward: dtypes x %s, dy %s, params %s, dx %s not supported",
                         f8_dtype_name(a->x_dtype), f8_dtype_name(a->dy_dtype), f8_dtype_name(a->param_dtype),
                         f8_dtype_name(a->dx_dtype));
    const int64_t rows = a->rows > 0 ? a->rows : 0, cols = a->cols;
    void *dbeta = a->rms ? NULL : a->dbeta;
    if (cols <= 0) return F8_OK;

    /* The register kernel's pieces per thread and block (the fewest threads,
     * a power of two >= 32, whose pieces cover the row), or the wide kernel. */
    const int nv = cols <= (int64_t)BWD_THREADS * NORM_VEC ? 1 : cols <= (int64_t)BWD_THREADS * BWD_MAX_NV * NORM_VEC ? 2 : 0;
    int tpr = 32;
    while (nv != 0 && (int64_t)tpr * nv * NORM_VEC < cols) tpr *= 2;
    /* Row blocks: as many as are resident at once (the register kernel's
     * launch bounds guarantee BWD_MIN_BLOCKS(nv) blocks of BWD_THREADS per
     * SM; the wide kernel is assumed to fit 2048 threads), at most one per
     * BWD_MIN_ROWS rows, the rows split evenly among them. */
    const int64_t sm = f8i_cuda(ctx)->sm_count > 0 ? f8i_cuda(ctx)->sm_count : 1;
    const int64_t resident = nv != 0 ? sm * BWD_MIN_BLOCKS(nv) * (BWD_THREADS / tpr) : sm * (2048 / BWD_WIDE_THREADS);
    int64_t target = (rows + BWD_MIN_ROWS - 1) / BWD_MIN_ROWS;
    if (target > resident) target = resident;
    if (target < 1) target = 1;
    const int64_t rows_per_block = rows > 0 ? (rows + target - 1) / target : 1;
    const int64_t row_blocks = (rows + rows_per_block - 1) / rows_per_block;
    if (row_blocks > INT_MAX)
        return f8i_error(ctx, F8_ERR_UNSUPPORTED, "norm backward: %lld rows in one launch", (long long)rows);

    norm_bwd_params p;
    p.dy = a->dy;
    p.x = a->x;
    p.rows = rows;
    p.cols = cols;
    p.mu = a->mu;
    p.rsigma = a->rsigma;
    p.gamma = a->gamma;
    p.x_bf16 = a->x_dtype == F8_DTYPE_BF16;
    p.dy_bf16 = a->dy_dtype == F8_DTYPE_BF16;
    p.p_bf16 = a->param_dtype == F8_DTYPE_BF16;
    p.dx_bf16 = a->dx_dtype == F8_DTYPE_BF16;
    p.rms = a->rms != 0;
    p.zero_centered = a->zero_centered != 0;
    p.dx = a->dx;
    p.dx_acc = a->dx != NULL && a->dx_accumulate != 0;
    p.partial = NULL;
    p.row_blocks = row_blocks;
    p.rows_per_block = rows_per_block;
    p.w_x = access_width(a->x, cols * (p.x_bf16 ? 2 : 4), 16);
    p.w_dy = access_width(a->dy, cols * (p.dy_bf16 ? 2 : 4), 16);
    p.w_dx = a->dx != NULL ? access_width(a->dx, cols * (p.dx_bf16 ? 2 : 4), 16) : 1;
    p.w_p = access_width(a->gamma, 0, 16);
    p.w_part = 1;
    p.n_pow2 = (cols & (cols - 1)) == 0;
    p.inv_n = 1.0f / (float)cols;

    if ((a->dgamma != NULL || dbeta != NULL) && row_blocks > 0) {
        /* The contract both backends check, before any launch, so a failing
         * call writes nothing. The partials ([2, row_blocks, cols], at most
         * one row block per 16 rows) fit in what it asks for. */
        F8I_TRY(f8i_check_reduce_workspace(ctx, a->workspace, a->workspace_bytes, rows, cols, "norm backward"));
        p.partial = (float *)a->workspace;
        p.w_part = access_width(p.partial, cols * 4, 16);
    }

    cudaStream_t stream = f8i_stream(ctx);
    if (row_blocks > 0 && (a->dx != NULL || p.partial != NULL)) {
        /* The fast kernel where it is safe: x BF16, dx wanted, whole
         * pieces, every row of x, dy and dx 16-byte aligned (access_width
         * folds the row pitch in), the row block within 32-bit byte offsets
         * (FP32 rows, one row to spare). Anything else: the kernels above. */
        const int fast = nv != 0 && p.x_bf16 && a->dx != NULL && cols % NORM_VEC == 0 && p.w_x == 16 &&
                         p.w_dy == 16 && p.w_dx == 16 && (rows_per_block + 1) * cols * 4 <= (int64_t)UINT32_MAX;
        if (fast)
            (nv == 1 ? (p.dy_bf16 ? launch_bwd_fast<1, 1> : launch_bwd_fast<0, 1>)
                     : (p.dy_bf16 ? launch_bwd_fast<1, 2> : launch_bwd_fast<0, 2>))(&p, (unsigned)row_blocks, tpr,
                                                                                  stream);
        else if (nv == 1)
            launch_bwd<1>(&p, (unsigned)row_blocks, tpr, stream);
        else if (nv == 2)
            launch_bwd<2>(&p, (unsigned)row_blocks, tpr, stream);
        else
            norm_bwd_wide_kernel<<<(unsigned)row_blocks, BWD_WIDE_THREADS, 0, stream>>>(p);
        F8I_COUNT_LAUNCHES(ctx, 1);
        F8I_TRY(f8i_cuda_launch_check(ctx, nv != 0 ? "norm_bwd_kernel" : "norm_bwd_wide_kernel"));
    }

    /* With no rows the column sums are 0: overwrite gives 0, accumulate keeps. */
    const unsigned rblocks = (unsigned)((cols + 31) / 32);
    const dim3 rthreads(32, F8I_REDUCE_SPLIT);
    if (a->dgamma != NULL) {
        dbias_reduce_kernel<<<rblocks, rthreads, 0, stream>>>(p.partial, row_blocks, cols, a->dgamma, p.p_bf16,
                                                              a->accumulate != 0, NULL);
        F8I_COUNT_LAUNCHES(ctx, 1);
        F8I_TRY(f8i_cuda_launch_check(ctx, "dbias_reduce_kernel (dgamma)"));
    }
    if (dbeta != NULL) {
        dbias_reduce_kernel<<<rblocks, rthreads, 0, stream>>>(p.partial + (p.partial ? row_blocks * cols : 0),
                                                              row_blocks, cols, dbeta, p.p_bf16, a->accumulate != 0,
                                                              NULL);
        F8I_COUNT_LAUNCHES(ctx, 1);
        return f8i_cuda_launch_check(ctx, "dbias_reduce_kernel (dbeta)");
    }
    return F8_OK;
}
