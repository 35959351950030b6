/*
 * block_cast.cu — the block-scaled cast (f8i_cast_args in a block mode, backend.h):
 * FP32/BF16 -> E4M3/E5M2 with one FP32 scale per 1x128 tile (activations,
 * gradients; the column-wise copy quantized on its own from 128x1 tiles) or
 * per 128x128 block (weights), plus amax, dbias and FP8 telemetry, bit for
 * bit what src/cpu/block.c computes.
 *
 * Design note. One kernel reads src once: a block owns one 128x128 tile of
 * src, loads it into shared memory as FP32 (exact for both source dtypes),
 * and from there finds every amax it needs — the 128 row amaxes (1x128
 * tiles of out), the 128 column amaxes (128x1 tiles of out_t), or the whole
 * tile's (128x128 blocks) — each an fmaxf reduction, exact and order-free,
 * so the scales are the CPU's. Then it writes the codes row-major (out) and
 * transposed (out_t) from shared memory, both as 4-byte words of 4 codes
 * where the row pitch and pointer allow (coalesced either way: consecutive
 * threads own consecutive columns of out, consecutive rows of out_t). The
 * codes come from cvt.rn.satfinite applied to v * s (one FP32 multiply,
 * -fmad=false), as in cast.cu; the scale s = f8i_current_scale(amax, 1, ...)
 * and scale_inv = 1.0f / s are the same device/host function the CPU calls.
 * A 128x128 block's out_t codes are recomputed from the same v and s, so they
 * equal the out codes by construction.
 *
 * dbias follows cast.cu's deterministic scheme: each block sums its tile's
 * columns in a fixed order (two halves of 64 rows, then their sum) and
 * writes one partial row per row tile into the args' workspace, which
 * kernels_common.cuh's dbias_reduce_kernel adds in row-tile order (one row
 * tile: the block writes dbias itself). The workspace check comes before any
 * launch, as the CPU's, so a failing call writes nothing.
 *
 * Shared memory: the tile (128 x 129 FP32, padded so that column walks hit
 * 32 banks) and small per-row/per-column arrays, ~68 KB: above the 48 KB
 * default, so the kernels opt in once per ctx (f8i_cuda_smem_optin).
 */
#include <limits.h>
#include <stdint.h>

#include "kernels_common.cuh"

#define BC_THREADS 256
#define BC_TILE F8I_BLOCK      /* tile edge: rows and columns */
#define BC_PITCH (BC_TILE + 1) /* shared-memory row pitch (floats) */
#define BC_WARPS (BC_THREADS / 32)
static_assert(BC_TILE == 128 && BC_THREADS == 2 * BC_TILE, "a thread pair per column in the column pass");

/* Floats of dynamic shared memory: tile, srow, scol, cmax[2], csum[2]. */
#define BC_SMEM_FLOATS (BC_TILE * BC_PITCH + 6 * BC_TILE)

typedef struct block_cast_params {
    const void *src;       /* (rows, cols) FP32 or BF16 */
    int64_t rows, cols;
    int64_t nbr, nbc;      /* row tiles ceil(rows/128), column tiles ceil(cols/128) */
    float scaled_max;
    int pow2;
    uint8_t *out;          /* (rows, cols) or NULL */
    float *scale_inv;      /* out's grid or NULL */
    uint8_t *out_t;        /* (cols, rows) or NULL */
    float *scale_inv_t;    /* out_t's grid or NULL */
    float *amax;
    float *partial;        /* (nbr, cols) dbias partials in the workspace, or NULL */
    void *dbias;           /* (cols) or NULL */
    int dbias_bf16, dbias_accumulate;
    unsigned long long *stats;
    const float *noop;
    int w_out, w_out_t;    /* 4: word stores of out / out_t are aligned, else 1 */
} block_cast_params;

/* ------------------------------------------------------------------------ */
/* Device helpers                                                            */
/* ------------------------------------------------------------------------ */

template <int BF16>
static __device__ __forceinline__ float bc_load(const void *src, int64_t i)
{
    if (BF16) return f8i_bf16_to_float(((const uint16_t *)src)[i]);
    return ((const float *)src)[i];
}

static __device__ __forceinline__ float warp_max(float a)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, o));
    return a;
}

/* A tile's scale (backend.h): f8i_current_scale with 1 as the kept value. */
static __device__ __forceinline__ float bc_scale(float amax, float scaled_max, int pow2)
{
    return f8i_current_scale(amax, 1.0f, scaled_max, pow2);
}

/* Codes of 4 values v[i] * s[i] (n of them valid) packed little-endian; the
 * valid ones are counted into sat/flushed when COUNT. */
template <int E5M2>
static __device__ __forceinline__ uint32_t bc_codes4(const float (&v)[4], const float (&s)[4], int n, bool count,
                                                     unsigned &sat, unsigned &flushed)
{
    uint32_t w = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const uint32_t q = fp8x2<E5M2>(v[i] * s[i], 0.0f) & 0xFFu;
        w |= q << (8 * i);
        if (count && i < n) code_stats<E5M2>(v[i], s[i], q, sat, flushed);
    }
    return w;
}

/* 4 codes at p (n of them inside the tensor): one word store when all 4 are
 * inside and the address is aligned (w == 4), bytes otherwise. */
static __device__ __forceinline__ void bc_store4(uint8_t *p, uint32_t w, int n, int wide)
{
    if (n == 4 && wide) {
        *(uint32_t *)p = w;
        return;
    }
    for (int i = 0; i < n; ++i) p[i] = (uint8_t)(w >> (8 * i));
}

/* ------------------------------------------------------------------------ */
/* Kernel                                                                    */
/* ------------------------------------------------------------------------ */

/* The block-scaled cast of one 128x128 tile of src per block.
 * Grid: nbr * nbc blocks (tile br = blockIdx.x / nbc, bc = blockIdx.x % nbc).
 * Block: 256 threads. Loading, a thread owns elements tid, tid + 256, ... of
 * the tile in row-major order; row amaxes: warp w owns rows w, w + 8, ...;
 * column amaxes and sums: thread t owns column t % 128, rows of half t / 128;
 * writing out: a thread owns 4 consecutive columns of one row per step; out_t:
 * 4 consecutive rows of one column per step. BLK: 128x128 blocks (one scale). */
template <int BF16, int E5M2, int BLK>
static __global__ void __launch_bounds__(BC_THREADS) block_cast_kernel(block_cast_params p)
{
    extern __shared__ float bc_smem[];
    float *tile = bc_smem;                       /* (128, BC_PITCH) */
    float *srow = tile + BC_TILE * BC_PITCH;     /* (128) row amax, then row scale */
    float *scol = srow + BC_TILE;                /* (128) column scale */
    float *cmax = scol + BC_TILE;                /* (2, 128) column amax per half */
    float *csum = cmax + 2 * BC_TILE;            /* (2, 128) column sum per half */
    __shared__ float warp_amax[BC_WARPS];
    if (noop_set(p.noop)) return;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t br = blockIdx.x / p.nbc, bc = blockIdx.x % p.nbc;
    const int64_t row0 = br * BC_TILE, col0 = bc * BC_TILE;
    const int nr = (int)(p.rows - row0 < BC_TILE ? p.rows - row0 : BC_TILE);
    const int nc = (int)(p.cols - col0 < BC_TILE ? p.cols - col0 : BC_TILE);

    /* Elements outside the tensor load as +0: no effect on amax or sums. */
    for (int e = tid; e < BC_TILE * BC_TILE; e += BC_THREADS) {
        const int r = e / BC_TILE, c = e % BC_TILE;
        float v = 0.0f;
        if (r < nr && c < nc) v = bc_load<BF16>(p.src, (row0 + r) * p.cols + col0 + c);
        tile[r * BC_PITCH + c] = v;
    }
    __syncthreads();

    /* Row amaxes (their max is the tile's amax). */
    float tmax = 0.0f;
    for (int r = warp; r < BC_TILE; r += BC_WARPS) {
        float m = 0.0f;
#pragma unroll
        for (int j = 0; j < BC_TILE / 32; ++j) m = fmaxf(m, fabsf(tile[r * BC_PITCH + lane + 32 * j]));
        m = warp_max(m);
        if (lane == 0) srow[r] = m;
        tmax = fmaxf(tmax, m);
    }
    if (lane == 0) warp_amax[warp] = tmax;

    /* Column amaxes (1x128 tiles of out_t) and column sums (dbias), each
     * thread over 64 rows in order. */
    const bool want_cols = (!BLK && p.out_t != NULL) || p.dbias != NULL; /* uniform */
    if (want_cols) {
        const int c = tid % BC_TILE, h = tid / BC_TILE;
        float m = 0.0f, s = 0.0f;
        for (int r = h * (BC_TILE / 2); r < (h + 1) * (BC_TILE / 2); ++r) {
            const float v = tile[r * BC_PITCH + c];
            m = fmaxf(m, fabsf(v));
            s += v;
        }
        cmax[h * BC_TILE + c] = m;
        csum[h * BC_TILE + c] = s;
    }
    __syncthreads();

    float amax_tile = 0.0f;
#pragma unroll
    for (int w = 0; w < BC_WARPS; ++w) amax_tile = fmaxf(amax_tile, warp_amax[w]);

    /* Scales, scale grids and the dbias partials. */
    if (tid < BC_TILE) {
        float sr, sc;
        if (BLK) {
            sr = sc = bc_scale(amax_tile, p.scaled_max, p.pow2);
        } else {
            sr = bc_scale(srow[tid], p.scaled_max, p.pow2);
            sc = bc_scale(fmaxf(cmax[tid], cmax[BC_TILE + tid]), p.scaled_max, p.pow2);
        }
        srow[tid] = sr;
        scol[tid] = sc;
        if (BLK) {
            if (tid == 0 && p.scale_inv != NULL) p.scale_inv[br * p.nbc + bc] = 1.0f / sr;
            if (tid == 0 && p.scale_inv_t != NULL) p.scale_inv_t[bc * p.nbr + br] = 1.0f / sr;
        } else {
            /* each grid is written with its codes only (the CPU's rowwise/colwise) */
            if (p.out != NULL && p.scale_inv != NULL && tid < nr) p.scale_inv[(row0 + tid) * p.nbc + bc] = 1.0f / sr;
            if (p.out_t != NULL && p.scale_inv_t != NULL && tid < nc)
                p.scale_inv_t[(col0 + tid) * p.nbr + br] = 1.0f / sc;
        }
        if (p.dbias != NULL && tid < nc) {
            const float sum = csum[tid] + csum[BC_TILE + tid];
            if (p.partial != NULL)
                p.partial[br * p.cols + col0 + tid] = sum;
            else
                dbias_write(p.dbias, p.dbias_bf16, p.dbias_accumulate, col0 + tid, sum);
        }
    }
    __syncthreads();

    /* Statistics count each element once: its out code, or its out_t code
     * when there is no out. */
    unsigned sat = 0, flushed = 0;
    const bool counting = p.stats != NULL;
    /* A 128x128 cast with neither orientation still counts its codes (the CPU's blockwise encodes each element). */
    if (p.out != NULL || (BLK && counting && p.out_t == NULL)) {
        for (int e = tid; e < BC_TILE * (BC_TILE / 4); e += BC_THREADS) {
            const int r = e / (BC_TILE / 4), c = 4 * (e % (BC_TILE / 4));
            if (r >= nr || c >= nc) continue;
            const int n = nc - c < 4 ? nc - c : 4;
            float v[4], s[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                v[i] = tile[r * BC_PITCH + c + i];
                s[i] = srow[r];
            }
            const uint32_t w = bc_codes4<E5M2>(v, s, n, counting, sat, flushed);
            if (p.out != NULL) bc_store4(p.out + (row0 + r) * p.cols + col0 + c, w, n, p.w_out == 4);
        }
    }
    if (p.out_t != NULL) {
        const bool count_t = counting && p.out == NULL;
        for (int e = tid; e < BC_TILE * (BC_TILE / 4); e += BC_THREADS) {
            const int c = e / (BC_TILE / 4), r = 4 * (e % (BC_TILE / 4));
            if (c >= nc || r >= nr) continue;
            const int n = nr - r < 4 ? nr - r : 4;
            float v[4], s[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                v[i] = tile[(r + i) * BC_PITCH + c];
                s[i] = scol[c];
            }
            const uint32_t w = bc_codes4<E5M2>(v, s, n, count_t, sat, flushed);
            bc_store4(p.out_t + (col0 + c) * p.rows + row0 + r, w, n, p.w_out_t == 4);
        }
    }

    /* one atomic per block: every thread holds the tile's amax */
    if (p.amax != NULL && tid == 0) atomicMax((int *)p.amax, __float_as_int(amax_tile));
    if (counting) block_stats_atomic<BC_THREADS>(sat, flushed, p.stats, p.rows * p.cols, blockIdx.x == 0);
}

/* ------------------------------------------------------------------------ */
/* Launchers                                                                 */
/* ------------------------------------------------------------------------ */

template <int BF16, int E5M2, int BLK>
static f8_status launch_one(f8_ctx *ctx, const block_cast_params &p, unsigned blocks)
{
    const void *fn = (const void *)block_cast_kernel<BF16, E5M2, BLK>;
    F8I_TRY(f8i_cuda_smem_optin(ctx, fn, "block cast"));
    F8I_COUNT_LAUNCHES(ctx, 1);
    block_cast_kernel<BF16, E5M2, BLK>
        <<<blocks, BC_THREADS, BC_SMEM_FLOATS * sizeof(float), f8i_stream(ctx)>>>(p);
    return f8i_cuda_launch_check(ctx, "block_cast_kernel");
}

static f8_status launch_cast(f8_ctx *ctx, const block_cast_params &p, int bf16, int e5m2, int blk, unsigned blocks)
{
    const int sel = bf16 * 4 + e5m2 * 2 + blk;
    switch (sel) {
    case 0: return launch_one<0, 0, 0>(ctx, p, blocks);
    case 1: return launch_one<0, 0, 1>(ctx, p, blocks);
    case 2: return launch_one<0, 1, 0>(ctx, p, blocks);
    case 3: return launch_one<0, 1, 1>(ctx, p, blocks);
    case 4: return launch_one<1, 0, 0>(ctx, p, blocks);
    case 5: return launch_one<1, 0, 1>(ctx, p, blocks);
    case 6: return launch_one<1, 1, 0>(ctx, p, blocks);
    default: return launch_one<1, 1, 1>(ctx, p, blocks);
    }
}

/* ------------------------------------------------------------------------ */
/* Backend entry point                                                       */
/* ------------------------------------------------------------------------ */

/* cast.cu's f8i_cuda_cast checked the dtypes and the shape. */
f8_status f8i_cuda_cast_block(f8_ctx *ctx, const f8i_cast_args *a)
{
    if (a->rows == 0 || a->cols == 0) return F8_OK; /* nothing is written (backend.h) */

    block_cast_params p;
    p.src = a->src;
    p.rows = a->rows;
    p.cols = a->cols;
    p.nbr = (a->rows + BC_TILE - 1) / BC_TILE;
    p.nbc = (a->cols + BC_TILE - 1) / BC_TILE;
    if (p.nbr > INT_MAX / p.nbc)
        return f8i_error(ctx, F8_ERR_UNSUPPORTED, "block cast: [%lld, %lld] has too many tiles for one launch",
                         (long long)a->rows, (long long)a->cols);
    p.scaled_max = a->scaled_max;
    p.pow2 = a->pow2;
    p.out = a->out;
    p.scale_inv = a->scale_inv;
    p.out_t = a->out_t;
    p.scale_inv_t = a->scale_inv_t;
    p.amax = a->amax;
    p.partial = NULL;
    p.dbias = a->dbias;
    p.dbias_bf16 = a->dbias_dtype == F8_DTYPE_BF16;
    p.dbias_accumulate = a->dbias_accumulate != 0;
    p.stats = (unsigned long long *)a->stats;
    p.noop = a->noop;
    p.w_out = a->out != NULL ? access_width(a->out, a->cols, 4) : 1;
    p.w_out_t = a->out_t != NULL ? access_width(a->out_t, a->rows, 4) : 1;
    if (a->dbias != NULL) {
        F8I_TRY(f8i_check_reduce_workspace(ctx, a->workspace, a->workspace_bytes, a->rows, a->cols, "block cast"));
        if (p.nbr > 1) p.partial = (float *)a->workspace; /* nbr * cols floats: within the formula's bound */
    }

    const unsigned blocks = (unsigned)(p.nbr * p.nbc);
    f8_status st = launch_cast(ctx, p, a->src_dtype == F8_DTYPE_BF16, a->out_dtype == F8_DTYPE_E5M2,
                               a->mode == F8I_SCALING_BLOCK_128X128, blocks);
    if (st != F8_OK || p.partial == NULL) return st;

    const unsigned rblocks = (unsigned)((a->cols + 31) / 32);
    F8I_COUNT_LAUNCHES(ctx, 1);
    dbias_reduce_kernel<<<rblocks, dim3(32, F8I_REDUCE_SPLIT), 0, f8i_stream(ctx)>>>(
        p.partial, p.nbr, a->cols, a->dbias, p.dbias_bf16, p.dbias_accumulate, a->noop);
    return f8i_cuda_launch_check(ctx, "dbias_reduce_kernel");
}
