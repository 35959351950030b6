/*
 * rowwise_cast.cu — the row-wise cast (f8i_rowwise_cast_args, core/rowwise.h):
 * FP32/BF16 -> E4M3/E5M2 with one FP32 scale per row (out) and, for the
 * column-wise copy, one per column of src (out_t = srcᵀ quantized on its
 * own), plus amax and FP8 telemetry, bit for bit what src/cpu/rowwise.c
 * computes.
 *
 * Design note. One launch with two kinds of blocks. Row blocks (when out is
 * asked for) give each warp one row: an fmaxf pass over the row (exact and
 * order-free, so the scale is the CPU's; 4 values per lane and one word
 * of 4 codes per store where the row pitch and pointers allow), the scale
 * from f8i_current_scale (numerics.h, the same function the CPU calls),
 * then a second pass that
 * writes the codes; the row's second read comes from L1/L2. Column blocks
 * (when out_t is) own a stripe of 32 columns over all rows: a first walk
 * takes each column's amax, then 32x32 tiles go through shared memory so
 * that out_t's rows (src's columns) are written with consecutive threads
 * on consecutive bytes. A stripe walks every row twice, so the column-wise
 * copy costs three reads of src per launch at most; fusing it into the norm
 * and activation kernels, and splitting tall stripes over several blocks,
 * is the performance work left (issue 30). The codes come from
 * cvt.rn.satfinite of v * s (one FP32 multiply, -fmad=false), as cast.cu
 * and block_cast.cu.
 *
 * dbias (a gradient cast's column sums) rides the column blocks' amax walk,
 * which reads every element of its columns anyway: FP32 partials per warp,
 * summed over the warps in order (deterministic), one store per column.
 *
 * amax and telemetry count each element once: from the row blocks when
 * there is out, else from the column blocks; stats[0] is added by block 0,
 * which is always one of the counting kind.
 */
#include <limits.h>
#include <stdint.h>

#include "kernels_common.cuh"
#include "core/rowwise.h"

#define RW_THREADS 256
#define RW_WARPS (RW_THREADS / 32)
#define RW_STRIPE 32 /* columns of one column block, rows of one of its tiles */
static_assert(RW_STRIPE == 32, "a lane per column of the stripe");


template <int BF16>
static __device__ __forceinline__ float rw_load(const void *src, int64_t i)
{
    if (BF16) return f8i_bf16_to_float(((const uint16_t *)src)[i]);
    return ((const float *)src)[i];
}

static __device__ __forceinline__ float rw_warp_max(float a)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, o));
    return a;
}

/* Four consecutive values at element i (16-byte FP32 or 8-byte BF16 loads:
 * the caller checked the alignment). */
template <int BF16>
static __device__ __forceinline__ void rw_load4(const void *src, int64_t i, float (&v)[4])
{
    if (BF16) {
        const uint2 w = *(const uint2 *)((const uint16_t *)src + i);
        v[0] = __uint_as_float(w.x << 16), v[1] = __uint_as_float(w.x & 0xFFFF0000u);
        v[2] = __uint_as_float(w.y << 16), v[3] = __uint_as_float(w.y & 0xFFFF0000u);
    } else {
        const float4 w = *(const float4 *)((const float *)src + i);
        v[0] = w.x, v[1] = w.y, v[2] = w.z, v[3] = w.w;
    }
}

/* Rows: warp w of row block b owns row b·8 + w. VEC: lane l owns columns
 * 4l .. 4l + 3, then + 128, ... (vector loads, one word of 4 codes per
 * store); else columns l, l + 32, ... */
template <int BF16, int E5M2, int VEC>
static __device__ __forceinline__ void rw_rows(const f8i_rowwise_cast_args &p, float &amax, unsigned &sat, unsigned &flushed)
{
    const int lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * RW_WARPS + (threadIdx.x >> 5);
    if (r >= p.rows) return;
    const int64_t base = r * p.cols;
    float m = 0.0f;
    if (VEC) {
        for (int64_t c = 4 * lane; c < p.cols; c += 128) {
            float v[4];
            rw_load4<BF16>(p.src, base + c, v);
            m = fmaxf(fmaxf(m, fmaxf(fabsf(v[0]), fabsf(v[1]))), fmaxf(fabsf(v[2]), fabsf(v[3])));
        }
    } else {
        for (int64_t c = lane; c < p.cols; c += 32) m = fmaxf(m, fabsf(rw_load<BF16>(p.src, base + c)));
    }
    m = rw_warp_max(m);
    amax = m;
    const float s = f8i_current_scale(m, 1.0f, p.scaled_max, p.pow2);
    if (lane == 0) p.scale_inv[r] = 1.0f / s;
    if (VEC) {
        for (int64_t c = 4 * lane; c < p.cols; c += 128) {
            float v[4];
            rw_load4<BF16>(p.src, base + c, v);
            const uint32_t w = fp8x4<E5M2>(v, s);
            *(uint32_t *)(p.out + base + c) = w;
            for (int i = 0; p.stats != NULL && i < 4; i++) code_stats<E5M2>(v[i], s, (w >> (8 * i)) & 0xFFu, sat, flushed);
        }
    } else {
        for (int64_t c = lane; c < p.cols; c += 32) {
            const float v = rw_load<BF16>(p.src, base + c);
            const uint32_t q = fp8x2<E5M2>(v * s, 0.0f) & 0xFFu;
            p.out[base + c] = (uint8_t)q;
            if (p.stats != NULL) code_stats<E5M2>(v, s, q, sat, flushed);
        }
    }
}

/* Column stripe `stripe`: lane l owns column c0 + l for the amax (warp w over
 * rows w, w + 8, ...); per 32-row tile, warp w loads tile rows w + 8i, then
 * writes out_t rows (src columns) w + 8i, lane l at tile row l. */
template <int BF16, int E5M2>
static __device__ __forceinline__ void rw_cols(const f8i_rowwise_cast_args &p, int64_t stripe, bool count, float &amax,
                                               unsigned &sat, unsigned &flushed)
{
    __shared__ float part[RW_WARPS][RW_STRIPE];
    __shared__ float psum[RW_WARPS][RW_STRIPE];
    __shared__ float scol[RW_STRIPE];
    __shared__ float tile[RW_STRIPE][RW_STRIPE + 1];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t c0 = stripe * RW_STRIPE, c = c0 + lane;
    float m = 0.0f, sum = 0.0f;
    for (int64_t r = warp; c < p.cols && r < p.rows; r += RW_WARPS) {
        const float v = rw_load<BF16>(p.src, r * p.cols + c);
        m = fmaxf(m, fabsf(v));
        sum += v; /* the bias gradient's partial, in a fixed order: deterministic */
    }
    part[warp][lane] = m;
    psum[warp][lane] = sum;
    __syncthreads();
    if (warp == 0) {
        float cm = 0.0f, cs = 0.0f;
#pragma unroll
        for (int w = 0; w < RW_WARPS; ++w) cm = fmaxf(cm, part[w][lane]), cs += psum[w][lane];
        const float s = f8i_current_scale(cm, 1.0f, p.scaled_max, p.pow2);
        scol[lane] = s;
        if (c < p.cols && p.out_t != NULL) p.scale_inv_t[c] = 1.0f / s;
        if (c < p.cols && p.dbias != NULL) {
            const bool bf = p.dbias_dtype == F8_DTYPE_BF16;
            const float prev = !p.dbias_accumulate ? 0.0f : bf ? rw_load<1>(p.dbias, c) : rw_load<0>(p.dbias, c);
            if (bf) ((uint16_t *)p.dbias)[c] = f8i_bf16_from_float(prev + cs);
            else ((float *)p.dbias)[c] = prev + cs;
        }
        if (count) amax = rw_warp_max(cm);
    }
    __syncthreads();
    for (int64_t r0 = 0; p.out_t != NULL && r0 < p.rows; r0 += RW_STRIPE) {
#pragma unroll
        for (int i = 0; i < RW_STRIPE / RW_WARPS; ++i) {
            const int tr = warp + RW_WARPS * i;
            const int64_t r = r0 + tr;
            tile[tr][lane] = r < p.rows && c < p.cols ? rw_load<BF16>(p.src, r * p.cols + c) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < RW_STRIPE / RW_WARPS; ++i) {
            const int tc = warp + RW_WARPS * i;
            const int64_t col = c0 + tc, r = r0 + lane;
            if (col >= p.cols || r >= p.rows) continue;
            const float v = tile[lane][tc], s = scol[tc];
            const uint32_t q = fp8x2<E5M2>(v * s, 0.0f) & 0xFFu;
            p.out_t[col * p.rows + r] = (uint8_t)q;
            if (count) code_stats<E5M2>(v, s, q, sat, flushed);
        }
        __syncthreads();
    }
}

/* The row-wise cast (p: the caller's args, by value). Grid: row_blocks
 * (ceil(rows / 8), 0 without out) row
 * blocks, then ceil(cols / 32) column blocks (none without out_t). Block:
 * 256 threads, as rw_rows and rw_cols say. */
template <int BF16, int E5M2, int VEC>
static __global__ void __launch_bounds__(RW_THREADS) rowwise_cast_kernel(f8i_rowwise_cast_args p, int64_t row_blocks)
{
    if (noop_set(p.noop)) return;
    float amax = 0.0f;
    unsigned sat = 0, flushed = 0;
    const bool row_block = (int64_t)blockIdx.x < row_blocks;
    const bool count = row_block || (p.out == NULL && p.out_t != NULL); /* uniform over the block */
    if (row_block)
        rw_rows<BF16, E5M2, VEC>(p, amax, sat, flushed);
    else
        rw_cols<BF16, E5M2>(p, (int64_t)blockIdx.x - row_blocks, count, amax, sat, flushed);
    if (!count) return;
    if (p.amax != NULL) block_amax_atomic<RW_THREADS>(amax, p.amax);
    if (p.stats != NULL) block_stats_atomic<RW_THREADS>(sat, flushed, (unsigned long long *)p.stats, p.rows * p.cols, blockIdx.x == 0);
}

template <int BF16, int E5M2>
static f8_status launch(f8_ctx *ctx, const f8i_rowwise_cast_args *a, int64_t row_blocks, unsigned blocks)
{
    /* vector rows: 4 | cols, src rows 16-byte (FP32) or 8-byte (BF16) aligned, out rows 4-byte aligned */
    const int vec = a->out != NULL && a->cols % 4 == 0 && access_width(a->src, a->cols * (BF16 ? 2 : 4), 16) >= (BF16 ? 8 : 16) &&
                    access_width(a->out, a->cols, 4) == 4;
    F8I_COUNT_LAUNCHES(ctx, 1);
    if (vec)
        rowwise_cast_kernel<BF16, E5M2, 1><<<blocks, RW_THREADS, 0, f8i_stream(ctx)>>>(*a, row_blocks);
    else
        rowwise_cast_kernel<BF16, E5M2, 0><<<blocks, RW_THREADS, 0, f8i_stream(ctx)>>>(*a, row_blocks);
    return f8i_cuda_launch_check(ctx, "rowwise_cast_kernel");
}

/* The caller ran f8i_rowwise_cast_check. */
f8_status f8i_cuda_cast_rowwise(f8_ctx *ctx, const f8i_rowwise_cast_args *a)
{
    if (a->rows == 0 || a->cols == 0) return F8_OK; /* nothing is written (rowwise.h) */
    const int64_t row_blocks = a->out ? (a->rows + RW_WARPS - 1) / RW_WARPS : 0;
    const int64_t blocks = row_blocks + (a->out_t || a->dbias ? (a->cols + RW_STRIPE - 1) / RW_STRIPE : 0);
    if (blocks > INT_MAX)
        return f8i_error(ctx, F8_ERR_UNSUPPORTED, "rowwise cast: [%lld, %lld] needs too many blocks for one launch",
                         (long long)a->rows, (long long)a->cols);
    const unsigned nb = (unsigned)blocks;
    if (a->src_dtype == F8_DTYPE_BF16)
        return a->out_dtype == F8_DTYPE_E5M2 ? launch<1, 1>(ctx, a, row_blocks, nb) : launch<1, 0>(ctx, a, row_blocks, nb);
    return a->out_dtype == F8_DTYPE_E5M2 ? launch<0, 1>(ctx, a, row_blocks, nb) : launch<0, 0>(ctx, a, row_blocks, nb);
}
