/*
 * rowwise_cast.cu — the row-wise cast (f8i_rowwise_cast_args, core/rowwise.h):
 * FP32/BF16 -> E4M3/E5M2 with one FP32 scale per row (out) and, for the
 * column-wise copy, one per column of src (out_t = srcᵀ quantized on its
 * own), plus amax and FP8 telemetry, bit for bit what src/cpu/rowwise.c
 * computes.
 *
 * Design note. Two paths, the same bits (both held to the CPU by
 * test_cuda_rowwise).
 *
 * Rows (out). A row's scale needs its whole row: an fmaxf pass over the row
 * (exact and order-free, so the scale is the CPU's), the scale from
 * f8i_current_scale (numerics.h, the function the CPU calls), then a second
 * pass, from L1/L2, that writes the codes (4 values a load and one word of
 * 4 codes a store where the row pitch and pointers allow). With out_t this
 * pass also takes the column amaxes, and dbias's sums, where its shared
 * memory holds them (rowwise_colmax_kernel, below); otherwise it is one
 * kernel with a warp per row.
 *
 * Columns (out_t, and dbias). A column's scale needs the amax of all its
 * rows before any of its codes, so the column-wise copy is an amax pass and
 * a codes pass. The codes pass, and the amax pass where the row pass does
 * not take the amaxes, run over the same 2-D grid of 256-row x 128-column
 * blocks (a warp per 32 rows, a lane per 4 columns, 16-byte FP32 / 8-byte
 * BF16 loads where the pitch allows, else lane l on columns l + 32j):
 *  1. column amax (rwt_amax_kernel, where the row pass does not take it):
 *     each lane keeps the max (and the dbias sum, in row order) of its 4
 *     columns over its 32 rows; the block combines its 8 warps in order,
 *     then one atomicMax of the float's bits per column into scale_inv_t —
 *     max is order-free, so this is exact — and one dbias partial per
 *     column per block into the workspace;
 *  2. codes: each lane turns its 4 columns' scales from those amaxes and
 *     codes its 32 x 4 values, 8 rows at a time; each batch's 8 codes of a
 *     column (8 consecutive bytes of out_t's row) go into a 32 KiB shared
 *     tile of out_t (128 rows x 256 bytes, swizzled so neither side has
 *     bank conflicts), from which the block writes out_t in 16-byte pieces,
 *     a warp's store two 256-byte runs of out_t's rows. Where 128-row
 *     tiles of 128 (BF16) or 64 (FP32) columns cover the matrix and every
 *     access can be 16 bytes (the trainers' shapes), rwt_codes_tile_kernel
 *     takes this pass instead: cast_tile.cuh's layout (a thread's 8 rows
 *     of 16-byte loads in flight at once, 4 x 4 transposes in registers),
 *     one scale a column, the same codes;
 *  3. scale_inv_t = 1 / s over the amaxes, once kernel 2's blocks have all
 *     read them: by the last block of each stripe to finish (a ticket a
 *     stripe, rwt_last_block), and kernels_common.cuh's dbias_reduce_kernel
 *     sums the dbias partials in block order (deterministic; or
 *     rwc_dbias_reduce_kernel the row pass's sums, in the same order).
 * The amaxes accumulate from 0 in the ctx's column scratch (cuda_state.cuh:
 * 1 MiB, zero at rest; kernel 3's last blocks zero it again), so neither a
 * zeroing launch nor a finishing one runs: in a 1.3B row-wise microbatch
 * those were 576 launches of a few microseconds, 1.4% of its GPU time.
 * Without the scratch (more columns than it holds) they accumulate in
 * scale_inv_t itself: the warp-per-row kernel zeroes it for kernel 1, the
 * launch after it; an amax pass cannot zero what its own other blocks are
 * adding to (no order between blocks of one launch), so before
 * rowwise_colmax_kernel (and kernel 1 without out) a small kernel zeroes
 * it, and a small kernel 3 writes 1 / s after kernel 2. Every launch is
 * graph-legal (no allocation, no sync) and every kernel returns at once on
 * a set noop flag, so nothing is written (and the scratch stays zero: the
 * passes that would fill it return too).
 *
 * The row pass with the column amaxes. It reads every element anyway, so
 * taking the column maxima there saves kernel 1's read of src: src comes
 * from memory twice (row pass, codes pass) instead of three times. Its
 * blocks stay resident (2 an SM) and go down the matrix in rounds, each
 * taking an even share of a round's rows, so a column's max is kept in
 * shared memory over many rows and leaves once a block: one atomicMax a
 * column, skipped where scale_inv_t already holds as much (the word only
 * grows). A row lies across tx threads (the fewest, a power of two >= 32,
 * that cover its loads: short rows share a block), a column's slot of
 * shared memory belongs to the one thread that loads it for its row slot,
 * so the column maxima need no atomics; the row maxima, far fewer, cross
 * the warps (a shuffle, then shared memory: two barriers a round). A
 * thread holds as many rows in flight as fit 64 registers without spilling
 * (6 BF16, 3 FP32), fewer where a block's round would pass 64 KiB of src:
 * the round's second read then hits L1/L2 (2 x 132 x 64 KiB = 17 MB, inside
 * an H100's L2). Shared memory is 4 bytes a column (32 KiB at 8192); past
 * 16,384 columns the warp-per-row kernel and kernel 1 take the call.
 * dbias must keep kernel 1's bits, so its order: a lane sums its column
 * down a warp's 32 rows in row order, the block adds its 8 warps' sums in
 * order into a 256-row tile's partial, the reduction adds the tiles. The
 * row pass keeps the first step: with one row slot (rows of more than 1024
 * columns) each block takes whole 32-row chunks instead of rounds' shares,
 * walks them in row order (rounds of a power of two rows, so within a
 * chunk) and each thread sums its columns down a chunk in a second shared
 * slot, written out at the chunk's end ([rows / 32][cols] in the
 * workspace); rwc_dbias_reduce_kernel then adds a tile's 8 chunk sums in
 * order (kernel 1's partial, bit for bit) and the tiles as
 * dbias_reduce_kernel does. Shorter rows, or more than 8192 columns (the
 * two slots past 64 KiB), keep kernel 1.
 *
 * The row pass in registers (rowwise_reg_kernel, rowwise_reg.cuh). On the
 * trainers' tensors (BF16, rows of 1024 .. 8192 columns, aligned) the row
 * pass above ran at 52-60% of copy bandwidth (an H100 profile of a 1.3B
 * microbatch, session 17): its rounds end in two barriers, and its second
 * read and the stores run with no load in flight. This kernel holds a
 * row's pieces in registers (a thread's 2-4 pieces of 16 bytes, and the
 * next row's loads in flight while it codes this one), takes the row's and
 * the columns' maxima on the BF16 bits, and needs one barrier a row. It
 * writes the column amaxes where a fused norm or activation would (the
 * scratch), and the column path then runs as after one: kernel 2 alone, or
 * with dbias the tile kernel summing its chunks (so it takes dbias only
 * where that kernel fits). Same codes, scales, maxima, sums: the same bits.
 *
 * Why the codes kernel is built so. It moves 3 bytes an element (BF16) and
 * does a few instructions for it, so it is bound by memory, and what keeps
 * the memory busy is how many loads are in flight. Holding a column's 32
 * codes in registers until the end (32 words a lane) and storing them
 * straight to out_t took 128 registers, so 2 blocks (16 warps) a
 * multiprocessor, half the amax kernel's; and each such 16-byte store went
 * to 32 different out_t rows, one L2 request per lane. Parking each batch's
 * codes in shared memory leaves 8 words a lane, so 4 blocks (32 warps, as
 * the amax kernel, each with a batch of 8 rows' loads in flight) fit in 64
 * registers and 128 KiB of shared memory; and out_t's stores become whole
 * 128-byte lines, 8 times fewer requests. The batch loop is not unrolled so
 * that the compiler does not hoist every row's loads and spill.
 *
 * Kernels 1 and 2 walk their grid row-major (rwt_block), kernel 1 from the
 * last row tile back, kernel 2 from the first after kernel 1 and from the
 * last after rowwise_colmax_kernel (whose rounds go down the matrix): each
 * pass then starts on the rows the pass before read last, while the L2
 * still holds them (on an H100, tens of MB: most or all of a tensor of C =
 * 2048), where the stripe order started each pass on what the pass before
 * read first, long evicted. Which block does which tile, round or chunk
 * changes no result: dbias partials go to their tile's (chunk's) slot and
 * are summed in tile order, maxima and counts are order-free.
 *
 * The former one-launch cast (column blocks owning a 32-column stripe over
 * all rows, walked twice) stays as f8i_cuda_cast_rowwise_stripes, for the
 * old-against-new benchmark and for more than 65,535 x 128 columns (the
 * grid's y limit). The codes come from cvt.rn.satfinite of v * s (one FP32
 * multiply, -fmad=false), as cast.cu and block_cast.cu.
 *
 * amax and telemetry count each element once: from the row pass when
 * there is out, else from the column kernels (amax from kernel 1, codes
 * from kernel 2); stats[0] is added by one counting block.
 *
 * The column-only cast after a fused kernel (col_amax_in): the norm and
 * activation kernels that write the row-wise codes (backend.h's
 * F8I_ROW_FUSED) also take the column maxima of their output into
 * scale_inv_t, where kernel 1 would have put them, so that cast is kernels 2
 * and 3 alone, reading src once (kernel 3 by tickets: the stripe's last
 * block overwrites the amaxes). The stripes path (more than 65,535 x 128
 * columns) measures them again: the same bits. f8i_cuda_rowwise_col_amax is
 * kernels 0 and 1 alone, for the fused kernels' rows too wide for their
 * shared memory. The fused kernels' maxima start from 0 in the ctx's
 * scratch (f8i_cuda_col_amax_target), not in scale_inv_t after a zeroing
 * kernel (96 launches of a 1.3B row-wise microbatch, 0.26 ms on an H100):
 * marked pending for that scale_inv_t, read from the scratch by its
 * column-only cast (whose tickets' last blocks zero it, as after the row
 * pass), and moved into scale_inv_t first by anything else that could use
 * the scratch or look (f8i_cuda_rwt_settle: another cast or producer, a
 * download, synchronize, free or stream change).
 *
 * Given amaxes with dbias (the GELU backward's d with fc1's bias
 * gradient): dbias must keep kernel 1's order, whose only other reason to
 * read src was the amaxes. On BF16 whole tiles the codes pass sums it
 * instead (rwt_codes_tile_kernel's SUMS source: a warp holds one 32-row
 * chunk, its lane groups add their rows in order and hand the running sums
 * on by shuffles, the chunk's sums go to the workspace as the row pass's
 * do), and rwc_dbias_reduce_kernel adds them as kernel 1's partials would
 * have been: one read of src, the same bits. Elsewhere kernel 1 still runs,
 * for the partials only. (The forwards' copies could skip u likewise, the
 * codes pass computing it again from the forward's input: built and
 * measured in session 16, GELU's and SwiGLU's copies that way were slower
 * than reading u back, and the whole 1.3B step with them and the norms'
 * too; bench/RESULTS.md.)
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
 * (ceil(rows / 8), 0 without out) row blocks, then the stripes path's
 * ceil(cols / 32) column blocks (none on the 2-D path, or without out_t).
 * Block: 256 threads, as rw_rows and rw_cols say. zero_t (the 2-D path's
 * column-amax scratch, scale_inv_t) is zeroed by the grid, or NULL. */
template <int BF16, int E5M2, int VEC>
static __global__ void __launch_bounds__(RW_THREADS)
    rowwise_cast_kernel(f8i_rowwise_cast_args p, int64_t row_blocks, float *zero_t)
{
    if (noop_set(p.noop)) return;
    if (zero_t != NULL)
        for (int64_t i = (int64_t)blockIdx.x * RW_THREADS + threadIdx.x; i < p.cols; i += (int64_t)gridDim.x * RW_THREADS)
            zero_t[i] = 0.0f;
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

/* ------------------------------------------------------------------------ */
/* The 2-D column path                                                       */
/* ------------------------------------------------------------------------ */

#define RWT_WARP_ROWS 32                          /* rows of one warp */
#define RWT_ROWS (RWT_WARP_ROWS * RW_WARPS)       /* rows of one block: 256 */
#define RWT_COLS 128                              /* columns of one block: 4 a lane */
#define RWT_MAX_STRIPES 65535                     /* gridDim.y */
static_assert(RWT_WARP_ROWS == 32, "a column's 32 codes are 8 words of a lane");

/* Column j (0..3) of lane `lane` in the stripe from c0: VEC, 4 consecutive
 * columns a lane (one vector load per row); else lane + 32j (coalesced
 * scalar loads). Its index within the stripe: col - c0. */
template <int VEC>
static __device__ __forceinline__ int rwt_local(int lane, int j)
{
    return VEC ? 4 * lane + j : lane + 32 * j;
}

/* The 4 values of row r on this lane's columns (0 outside the matrix). */
template <int BF16, int VEC>
static __device__ __forceinline__ void rwt_load(const f8i_rowwise_cast_args &p, int64_t r, int64_t c0, int lane,
                                                float (&v)[4])
{
    if (VEC) {
        const int64_t c = c0 + 4 * lane; /* 4 | cols: the lane's 4 columns are all in or all out */
        if (c < p.cols) {
            rw_load4<BF16>(p.src, r * p.cols + c, v);
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) v[j] = 0.0f;
        }
    } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int64_t c = c0 + lane + 32 * j;
            v[j] = c < p.cols ? rw_load<BF16>(p.src, r * p.cols + c) : 0.0f;
        }
    }
}

/* This block's row tile and column stripe. The grid (row tiles, stripes) is
 * walked row-major (stripes fastest) from its last tile (back: the amax
 * pass, and the codes pass after the row pass) or its first (the codes pass
 * after the amax pass), so each pass starts where the one before it ended,
 * on what the L2 still holds (design note). */
static __device__ __forceinline__ void rwt_block(bool back, int64_t &tile, int64_t &stripe)
{
    int64_t i = (int64_t)blockIdx.y * gridDim.x + blockIdx.x;
    if (back) i = (int64_t)gridDim.x * gridDim.y - 1 - i;
    tile = i / gridDim.y, stripe = i % gridDim.y;
}

/* Kernel 3: the stripe tickets and, without them, its own kernel and the
 * zeroing one (rwt_last_block, rwt_finish_kernel, rwt_zero_kernel). */
#include "rowwise_finish.cuh"

/* Kernels 1 and 2 (rwt_amax_kernel, rwt_codes_kernel). */
#include "rowwise_cols.cuh"

/* Kernel 2 on whole tiles (rwt_codes_tile_kernel, rwtt_fits). */
#include "rowwise_codes_tile.cuh"

/* The row pass with the column amaxes (rowwise_colmax_kernel) and its dbias
 * reduction (rwc_dbias_reduce_kernel). */
#include "rowwise_colmax.cuh"

/* The row pass with the column amaxes on rows held in registers (rowwise_reg_kernel). */
#include "rowwise_reg.cuh"

/* ------------------------------------------------------------------------ */
/* Launchers                                                                 */
/* ------------------------------------------------------------------------ */

/* vector rows: 4 | cols, src rows 16-byte (FP32) or 8-byte (BF16) aligned */
static int src_vec(const f8i_rowwise_cast_args *a)
{
    const int bf16 = a->src_dtype == F8_DTYPE_BF16;
    return a->cols % 4 == 0 && access_width(a->src, a->cols * (bf16 ? 2 : 4), 16) >= (bf16 ? 8 : 16);
}

template <int BF16, int E5M2>
static f8_status launch_rows(f8_ctx *ctx, const f8i_rowwise_cast_args *a, int64_t row_blocks, unsigned blocks,
                             float *zero_t)
{
    /* out rows also 4-byte aligned for the word stores */
    const int vec = a->out != NULL && src_vec(a) && access_width(a->out, a->cols, 4) == 4;
    F8I_COUNT_LAUNCHES(ctx, 1);
    if (vec)
        rowwise_cast_kernel<BF16, E5M2, 1><<<blocks, RW_THREADS, 0, f8i_stream(ctx)>>>(*a, row_blocks, zero_t);
    else
        rowwise_cast_kernel<BF16, E5M2, 0><<<blocks, RW_THREADS, 0, f8i_stream(ctx)>>>(*a, row_blocks, zero_t);
    return f8i_cuda_launch_check(ctx, "rowwise_cast_kernel");
}

static f8_status launch_rows_any(f8_ctx *ctx, const f8i_rowwise_cast_args *a, int64_t row_blocks, unsigned blocks,
                                 float *zero_t)
{
    if (a->src_dtype == F8_DTYPE_BF16)
        return a->out_dtype == F8_DTYPE_E5M2 ? launch_rows<1, 1>(ctx, a, row_blocks, blocks, zero_t)
                                             : launch_rows<1, 0>(ctx, a, row_blocks, blocks, zero_t);
    return a->out_dtype == F8_DTYPE_E5M2 ? launch_rows<0, 1>(ctx, a, row_blocks, blocks, zero_t)
                                         : launch_rows<0, 0>(ctx, a, row_blocks, blocks, zero_t);
}

/* The codes kernel (kernel 2) of the column path; back: its walk; sums:
 * dbias's chunk sums written by the tile kernel (BF16 whole tiles: the
 * caller checked rwtt_fits), or NULL. */
template <int BF16, int VEC>
static f8_status launch_codes(f8_ctx *ctx, const f8i_rowwise_cast_args *a, dim3 grid, int back, rwt_fin fin,
                              float *sums)
{
    const int w_t = access_width(a->out_t, a->rows, 16);
    F8I_COUNT_LAUNCHES(ctx, 1);
    if (rwtt_fits(a)) {
        const dim3 tiles((unsigned)(a->rows / RWTT_ROWS), (unsigned)(a->cols / rwtt_shape<BF16>::TC));
        const int e5m2 = a->out_dtype == F8_DTYPE_E5M2;
        void (*kernel)(f8i_rowwise_cast_args, int, rwt_fin, float *) =
            e5m2 ? rwt_codes_tile_kernel<BF16, 1, RWT_SRC_PLAIN> : rwt_codes_tile_kernel<BF16, 0, RWT_SRC_PLAIN>;
        if constexpr (BF16)
            if (sums != NULL)
                kernel = e5m2 ? rwt_codes_tile_kernel<1, 1, RWT_SRC_SUMS> : rwt_codes_tile_kernel<1, 0, RWT_SRC_SUMS>;
        kernel<<<tiles, RW_THREADS, 0, f8i_stream(ctx)>>>(*a, back, fin, sums);
        return f8i_cuda_launch_check(ctx, "rwt_codes_tile_kernel");
    }
    if (a->out_dtype == F8_DTYPE_E5M2)
        rwt_codes_kernel<BF16, 1, VEC><<<grid, RW_THREADS, 0, f8i_stream(ctx)>>>(*a, w_t, back, fin);
    else
        rwt_codes_kernel<BF16, 0, VEC><<<grid, RW_THREADS, 0, f8i_stream(ctx)>>>(*a, w_t, back, fin);
    return f8i_cuda_launch_check(ctx, "rwt_codes_kernel");
}

/* How the column path runs after the row pass (if any): */
enum {
    RWT_PASS_AMAX_CODES, /* kernel 1 (the amaxes unless given; dbias's tile partials), then kernel 2 */
    RWT_PASS_CODES,      /* kernel 2 alone: the row pass or a fused kernel took the amaxes */
    RWT_PASS_CODES_SUMS  /* kernel 2 on BF16 tiles summing dbias's chunks: amaxes given with dbias */
};

/* Kernels 1 and 2 of the column path, or kernel 2 alone (walking back from
 * where the row pass, or the fused kernel's rows, ended). Kernel 1's amaxes
 * go where kernel 2 reads them (fin.amaxes); given amaxes (col_amax_in)
 * it leaves alone, running for dbias's partials only. */
template <int BF16, int VEC>
static f8_status launch_cols(f8_ctx *ctx, const f8i_rowwise_cast_args *a, dim3 grid, float *partial, int pass,
                             rwt_fin fin)
{
    if (pass == RWT_PASS_CODES) return launch_codes<BF16, VEC>(ctx, a, grid, 1, fin, NULL);
    if (pass == RWT_PASS_CODES_SUMS) return launch_codes<BF16, VEC>(ctx, a, grid, 1, fin, partial);
    f8i_rowwise_cast_args k1 = *a;
    k1.scale_inv_t = (float *)fin.amaxes;
    if (a->col_amax_in) k1.out_t = NULL; /* the amaxes are given: no atomicMax over them */
    F8I_COUNT_LAUNCHES(ctx, 1);
    rwt_amax_kernel<BF16, VEC><<<grid, RW_THREADS, 0, f8i_stream(ctx)>>>(k1, partial);
    F8I_TRY(f8i_cuda_launch_check(ctx, "rwt_amax_kernel"));
    if (a->out_t == NULL) return F8_OK;
    return launch_codes<BF16, VEC>(ctx, a, grid, 0, fin, NULL);
}

/* rowwise_colmax_kernel's threads a row: the fewest (a power of two, 32 ..
 * RWC_THREADS) that cover its loads (4 columns each, vec), so short rows
 * share a block. */
static int rwc_tx(const f8i_rowwise_cast_args *a, int vec)
{
    const int64_t loads = vec ? a->cols / 4 : a->cols;
    int tx = 32;
    while (tx < RWC_THREADS && tx < loads) tx *= 2;
    return tx;
}

/* Whether the row pass takes the column amaxes (and dbias's chunk sums):
 * out and out_t, and the columns' maxima (and sums) fit its shared memory;
 * with dbias, one row slot a block (over 256 loads a row: 1028 columns or
 * more, vec; 257, scalar). */
static int rwc_takes(const f8i_rowwise_cast_args *a, int vec)
{
    if (!a->out || !a->out_t) return 0;
    if (!a->dbias) return a->cols <= RWC_MAX_COLS;
    return a->cols <= RWC_MAX_COLS_DBIAS && rwc_tx(a, vec) == RWC_THREADS;
}

/* The row pass with the column amaxes (rwc_takes), scale_inv_t zeroed
 * before it; sums: dbias's chunk sums [ceil(rows / 32), cols] (the
 * workspace), or NULL. As many rows a slot (group, <= RWC_ROWS; with sums a
 * power of two) as keep a block's round within RWC_GROUP_BYTES of src. */
template <int BF16, int E5M2>
static f8_status launch_colmax_as(f8_ctx *ctx, const f8i_rowwise_cast_args *a, int vec, float *sums)
{
    const int tx = rwc_tx(a, vec), nty = RWC_THREADS / tx, most = RWC_ROWS(BF16, vec);
    const int64_t fit = RWC_GROUP_BYTES / (nty * a->cols * (BF16 ? 2 : 4));
    int group = fit < 1 ? 1 : fit > most ? most : (int)fit;
    if (sums) /* rounds within a 32-row chunk: a power of two */
        while (group & (group - 1)) group &= group - 1;
    /* the maxima [nty][cols] (and the sums [cols]): <= 64 KiB (RWC_MAX_COLS, RWC_MAX_COLS_DBIAS) or 8 KiB */
    const size_t smem = (size_t)(nty + (sums ? 1 : 0)) * (size_t)a->cols * sizeof(float);
    const int64_t work = sums ? (a->rows + RWT_WARP_ROWS - 1) / RWT_WARP_ROWS /* chunks */
                              : (a->rows + (int64_t)nty * group - 1) / ((int64_t)nty * group);
    const int64_t resident = (int64_t)RWC_BLOCKS_PER_SM * f8i_cuda(ctx)->sm_count;
    const unsigned grid = (unsigned)(work < resident ? work : resident < 1 ? 1 : resident);
    void (*kernel)(f8i_rowwise_cast_args, int, int, float *) =
        vec ? (sums ? rowwise_colmax_kernel<BF16, E5M2, 1, 1> : rowwise_colmax_kernel<BF16, E5M2, 1, 0>)
            : (sums ? rowwise_colmax_kernel<BF16, E5M2, 0, 1> : rowwise_colmax_kernel<BF16, E5M2, 0, 0>);
    /* past 32 KiB: the default limit of 48 KiB holds the kernel's static arrays too (and 48 KiB of maxima,
     * 12,288 columns or 6,144 with sums, left none for them: an invalid launch at the 1.3B qkv's dbias) */
    if (smem > 32 * 1024) F8I_TRY(f8i_cuda_smem_optin(ctx, (const void *)kernel, "rowwise cast: shared-memory opt-in"));
    F8I_COUNT_LAUNCHES(ctx, 1);
    kernel<<<grid, RWC_THREADS, smem, f8i_stream(ctx)>>>(*a, tx, group, sums);
    return f8i_cuda_launch_check(ctx, "rowwise_colmax_kernel");
}

static f8_status launch_colmax(f8_ctx *ctx, const f8i_rowwise_cast_args *a, int vec, float *sums)
{
    const int e5m2 = a->out_dtype == F8_DTYPE_E5M2;
    if (a->src_dtype == F8_DTYPE_BF16)
        return e5m2 ? launch_colmax_as<1, 1>(ctx, a, vec, sums) : launch_colmax_as<1, 0>(ctx, a, vec, sums);
    return e5m2 ? launch_colmax_as<0, 1>(ctx, a, vec, sums) : launch_colmax_as<0, 0>(ctx, a, vec, sums);
}

/* Whether rowwise_reg_kernel takes the row pass (and the column amaxes):
 * BF16 src, out and out_t, rows of RWR_MIN_COLS .. RWR_MAX_COLS columns,
 * 8 | cols, 16-byte src rows, 8-byte out rows, the amaxes' words 16-byte
 * aligned; with dbias only where the tile kernel then sums dbias's chunks
 * (rwtt_fits), as after a fused kernel. */
static int rwr_takes(const f8i_rowwise_cast_args *a, const float *amaxes)
{
    if (!a->out || !a->out_t || a->src_dtype != F8_DTYPE_BF16 || a->col_amax_in) return 0;
    if (a->cols < RWR_MIN_COLS || a->cols > RWR_MAX_COLS || a->cols % 8 != 0) return 0;
    if (access_width(a->src, a->cols * 2, 16) < 16 || access_width(a->out, a->cols, 8) < 8) return 0;
    if (access_width(amaxes, 16, 16) < 16) return 0;
    return !a->dbias || rwtt_fits(a);
}

/* rowwise_reg_kernel (rwr_takes) into amaxes (zero): rows of up to 4096
 * columns as 2 pieces a thread on the fewest threads (64 .. 256) that cover
 * them, wider ones on 256 threads of 3 or 4 pieces. */
template <int E5M2>
static f8_status launch_reg_as(f8_ctx *ctx, const f8i_rowwise_cast_args *a, float *amaxes)
{
    int per = 2, tx = 64;
    if (a->cols > 2 * 8 * RWR_MAX_TX) per = (int)((a->cols + 8 * RWR_MAX_TX - 1) / (8 * RWR_MAX_TX)), tx = RWR_MAX_TX;
    else while (2 * 8 * tx < a->cols) tx *= 2;
    const int threads = rwr_threads(per), blocks = rwr_blocks(per);
    const int64_t rounds = (a->rows + threads / tx - 1) / (threads / tx);
    const int64_t resident = (int64_t)blocks * f8i_cuda(ctx)->sm_count;
    const unsigned grid = (unsigned)(rounds < resident ? rounds : resident < 1 ? 1 : resident);
    void (*kernel)(f8i_rowwise_cast_args, float *) =
        per == 3   ? rowwise_reg_kernel<3, 256, E5M2>
        : per == 4 ? rowwise_reg_kernel<4, 256, E5M2>
        : tx == 64 ? rowwise_reg_kernel<2, 64, E5M2>
        : tx == 128 ? rowwise_reg_kernel<2, 128, E5M2>
                    : rowwise_reg_kernel<2, 256, E5M2>;
    F8I_COUNT_LAUNCHES(ctx, 1);
    kernel<<<grid, threads, 0, f8i_stream(ctx)>>>(*a, amaxes);
    return f8i_cuda_launch_check(ctx, "rowwise_reg_kernel");
}

/* Kernel 0 then kernel 1 of the column path alone, into col_amax (the
 * cast's scale_inv_t slot; out_t is set only to ask kernel 1 for the
 * amaxes, never written: no out, no amax, no dbias). */
f8_status f8i_cuda_rowwise_col_amax(f8_ctx *ctx, const void *src, f8_dtype src_dtype, int64_t rows, int64_t cols,
                                    float *col_amax)
{
    if (rows == 0 || cols == 0) return F8_OK;
    const int64_t stripes = (cols + RWT_COLS - 1) / RWT_COLS, row_tiles = (rows + RWT_ROWS - 1) / RWT_ROWS;
    if (stripes > RWT_MAX_STRIPES || row_tiles > INT_MAX)
        return f8i_error(ctx, F8_ERR_UNSUPPORTED, "rowwise column amaxes: [%lld, %lld] is past the 2-D grid",
                         (long long)rows, (long long)cols);
    /* out_t a marker: kernel 1 writes the amaxes where out_t is asked for */
    const f8i_rowwise_cast_args a = {src, src_dtype, rows, cols, F8_DTYPE_E4M3, NULL, NULL, (uint8_t *)col_amax,
                                     col_amax, 1.0f, 0, NULL, NULL, NULL, NULL, F8_DTYPE_FP32, 0, NULL, 0, 0};
    F8I_COUNT_LAUNCHES(ctx, 1);
    rwt_zero_kernel<<<(unsigned)((cols + 255) / 256), 256, 0, f8i_stream(ctx)>>>(a);
    F8I_TRY(f8i_cuda_launch_check(ctx, "rwt_zero_kernel"));
    const dim3 grid((unsigned)row_tiles, (unsigned)stripes);
    const int bf16 = src_dtype == F8_DTYPE_BF16, vec = src_vec(&a);
    F8I_COUNT_LAUNCHES(ctx, 1);
    if (bf16) {
        if (vec) rwt_amax_kernel<1, 1><<<grid, RW_THREADS, 0, f8i_stream(ctx)>>>(a, NULL);
        else rwt_amax_kernel<1, 0><<<grid, RW_THREADS, 0, f8i_stream(ctx)>>>(a, NULL);
    } else {
        if (vec) rwt_amax_kernel<0, 1><<<grid, RW_THREADS, 0, f8i_stream(ctx)>>>(a, NULL);
        else rwt_amax_kernel<0, 0><<<grid, RW_THREADS, 0, f8i_stream(ctx)>>>(a, NULL);
    }
    return f8i_cuda_launch_check(ctx, "rwt_amax_kernel");
}

/* The caller ran f8i_rowwise_cast_check. */
f8_status f8i_cuda_cast_rowwise_stripes(f8_ctx *ctx, const f8i_rowwise_cast_args *a)
{
    if (a->rows == 0 || a->cols == 0) return F8_OK; /* nothing is written (rowwise.h) */
    const int64_t row_blocks = a->out ? (a->rows + RW_WARPS - 1) / RW_WARPS : 0;
    const int64_t blocks = row_blocks + (a->out_t || a->dbias ? (a->cols + RW_STRIPE - 1) / RW_STRIPE : 0);
    if (blocks > INT_MAX)
        return f8i_error(ctx, F8_ERR_UNSUPPORTED, "rowwise cast: [%lld, %lld] needs too many blocks for one launch",
                         (long long)a->rows, (long long)a->cols);
    return launch_rows_any(ctx, a, row_blocks, (unsigned)blocks, NULL);
}

f8_status f8i_cuda_rwt_settle(f8_ctx *ctx)
{
    f8i_cuda_state *cs = f8i_cuda(ctx);
    if (cs == NULL || cs->rwt_pending == NULL) return F8_OK;
    float *to = cs->rwt_pending;
    const size_t bytes = (size_t)cs->rwt_pending_cols * sizeof(float);
    cs->rwt_pending = NULL;
    F8I_TRY(f8i_cuda_check(ctx, cudaMemcpyAsync(to, cs->rwt_colmax, bytes, cudaMemcpyDeviceToDevice, f8i_stream(ctx)),
                           "column maxima out of the scratch"));
    return f8i_cuda_check(ctx, cudaMemsetAsync(cs->rwt_colmax, 0, bytes, f8i_stream(ctx)), "column scratch zeroed");
}

f8_status f8i_cuda_col_amax_target(f8_ctx *ctx, float *col_amax, int64_t cols, float **target)
{
    f8i_cuda_state *cs = f8i_cuda(ctx);
    F8I_TRY(f8i_cuda_rwt_settle(ctx)); /* the scratch zero: another producer's maxima moved out */
    if (cols < 1 || cols > F8I_RWT_SCRATCH_COLS) {
        *target = col_amax;
        return f8i_cuda_fill_f32(ctx, col_amax, 0.0f, cols);
    }
    cs->rwt_pending = col_amax, cs->rwt_pending_cols = cols;
    *target = cs->rwt_colmax;
    return F8_OK;
}

/* The caller ran f8i_rowwise_cast_check. */
f8_status f8i_cuda_cast_rowwise(f8_ctx *ctx, const f8i_rowwise_cast_args *a)
{
    if (a->rows == 0 || a->cols == 0) return F8_OK; /* nothing is written (rowwise.h) */
    const int64_t stripes = (a->cols + RWT_COLS - 1) / RWT_COLS, row_tiles = (a->rows + RWT_ROWS - 1) / RWT_ROWS;
    const int stripes_path = stripes > RWT_MAX_STRIPES || row_tiles > INT_MAX;
    f8i_cuda_state *cs = f8i_cuda(ctx);
    /* given amaxes a fused kernel left in the scratch for this scale_inv_t: read there (and zeroed there by the
     * last blocks); any other cast first moves pending ones where they belong */
    const int pending = !stripes_path && a->col_amax_in && cs->rwt_pending != NULL &&
                        cs->rwt_pending == a->scale_inv_t && cs->rwt_pending_cols == a->cols &&
                        a->cols <= F8I_RWT_SCRATCH_COLS;
    if (pending) cs->rwt_pending = NULL;
    else F8I_TRY(f8i_cuda_rwt_settle(ctx));
    if (stripes_path) return f8i_cuda_cast_rowwise_stripes(ctx, a);
    const int64_t row_blocks = a->out ? (a->rows + RW_WARPS - 1) / RW_WARPS : 0;
    if (row_blocks > INT_MAX)
        return f8i_error(ctx, F8_ERR_UNSUPPORTED, "rowwise cast: [%lld, %lld] needs too many blocks for one launch",
                         (long long)a->rows, (long long)a->cols);
    /* row_tiles x cols dbias partials (kernel 1) or ceil(rows / 32) x cols chunk sums (the row pass): within
     * f8i_reduce_workspace_bytes' 2 per 16 rows */
    float *partial = NULL;
    if (a->dbias != NULL) {
        F8I_TRY(f8i_check_reduce_workspace(ctx, a->workspace, a->workspace_bytes, a->rows, a->cols, "rowwise cast"));
        partial = (float *)a->workspace;
    }
    /* The column amaxes start at 0 (design note): in the ctx's scratch, zero at rest, where it holds the
     * columns; else in scale_inv_t, zeroed by the row pass for kernel 1, or (no out; or the row pass takes
     * them itself, which must not race its own zeroing) by a small kernel before. col_amax_in (out NULL, no
     * dbias: f8i_rowwise_cast_check): a fused kernel left them in scale_inv_t, so neither the zeroing nor
     * kernel 1 runs; kernel 2 walks back from the end, where that kernel's grid-stride rows ended. Kernel 2
     * writes scale_inv_t by its stripes' tickets where the ctx has enough (always with the scratch). */
    const int given = a->col_amax_in;
    const int fits = a->out_t != NULL && a->cols <= F8I_RWT_SCRATCH_COLS;
    const int scratch = fits && (!given || pending); /* the amaxes are in the scratch: kernel 3 zeroes it */
    rwt_fin fin = {scratch ? cs->rwt_colmax : a->scale_inv_t, scratch ? cs->rwt_colmax : NULL,
                   fits ? cs->rwt_tickets : NULL};
    /* the row pass in registers takes the amaxes as a fused kernel would: the column path then runs as if
     * they were given */
    const int reg = rwr_takes(a, fin.amaxes);
    const int vec_rows = a->out && src_vec(a) && access_width(a->out, a->cols, 4) == 4;
    const int colmax = given || reg || rwc_takes(a, vec_rows);
    /* given amaxes with dbias: the BF16 tile kernel sums dbias's chunks as the row pass does (the same
     * order, so the same bits; one read of src); elsewhere kernel 1 runs for dbias's partials */
    const int sums = (given || reg) && a->dbias && a->src_dtype == F8_DTYPE_BF16 && rwtt_fits(a);
    const int pass = !colmax || (given && a->dbias && !sums) ? RWT_PASS_AMAX_CODES
                     : sums                                 ? RWT_PASS_CODES_SUMS
                                                            : RWT_PASS_CODES;
    const int chunk_sums = (colmax && !given) || sums; /* partial holds 32-row chunk sums, not tile partials */
    float *zero_t = a->out_t && !colmax && !scratch ? a->scale_inv_t : NULL;
    if (a->out_t && !given && !scratch && (colmax || !a->out)) {
        F8I_COUNT_LAUNCHES(ctx, 1);
        rwt_zero_kernel<<<(unsigned)((a->cols + 255) / 256), 256, 0, f8i_stream(ctx)>>>(*a);
        F8I_TRY(f8i_cuda_launch_check(ctx, "rwt_zero_kernel"));
    }
    if (reg) {
        F8I_TRY(a->out_dtype == F8_DTYPE_E5M2 ? launch_reg_as<1>(ctx, a, (float *)fin.amaxes)
                                              : launch_reg_as<0>(ctx, a, (float *)fin.amaxes));
    } else if (colmax && !given) {
        f8i_rowwise_cast_args rp = *a;
        rp.scale_inv_t = (float *)fin.amaxes;
        F8I_TRY(launch_colmax(ctx, &rp, vec_rows, partial));
    } else if (a->out) {
        F8I_TRY(launch_rows_any(ctx, a, row_blocks, (unsigned)row_blocks, zero_t));
    }
    if (!a->out_t && !a->dbias) return F8_OK;
    const dim3 grid((unsigned)row_tiles, (unsigned)stripes);
    const int bf16 = a->src_dtype == F8_DTYPE_BF16, vec = src_vec(a);
    const f8_status st = bf16 ? (vec ? launch_cols<1, 1>(ctx, a, grid, partial, pass, fin)
                                     : launch_cols<1, 0>(ctx, a, grid, partial, pass, fin))
                              : (vec ? launch_cols<0, 1>(ctx, a, grid, partial, pass, fin)
                                     : launch_cols<0, 0>(ctx, a, grid, partial, pass, fin));
    if (st != F8_OK) {
        /* the scratch must stay zero at rest: what a failed launch may have left (best effort) */
        if (scratch) (void)cudaMemsetAsync(cs->rwt_colmax, 0, (size_t)a->cols * sizeof(float), f8i_stream(ctx));
        return st;
    }
    if (a->out_t != NULL && fin.tickets == NULL) {
        F8I_COUNT_LAUNCHES(ctx, 1);
        rwt_finish_kernel<<<(unsigned)((a->cols + 255) / 256), 256, 0, f8i_stream(ctx)>>>(*a);
        F8I_TRY(f8i_cuda_launch_check(ctx, "rwt_finish_kernel"));
    }
    if (a->dbias == NULL) return F8_OK;
    const dim3 rgrid((unsigned)((a->cols + 31) / 32)), rblock(32, F8I_REDUCE_SPLIT);
    const int bf16_db = a->dbias_dtype == F8_DTYPE_BF16;
    F8I_COUNT_LAUNCHES(ctx, 1);
    if (chunk_sums) { /* the row pass's (or the tile kernel's) chunk sums */
        rwc_dbias_reduce_kernel<<<rgrid, dim3(32, RWC_REDUCE_TILES), 0, f8i_stream(ctx)>>>(
            partial, (a->rows + RWT_WARP_ROWS - 1) / RWT_WARP_ROWS, a->cols, a->dbias, bf16_db, a->dbias_accumulate,
            a->noop);
        return f8i_cuda_launch_check(ctx, "rwc_dbias_reduce_kernel");
    }
    dbias_reduce_kernel<<<rgrid, rblock, 0, f8i_stream(ctx)>>>(partial, row_tiles, a->cols, a->dbias, bf16_db,
                                                               a->dbias_accumulate, a->noop);
    return f8i_cuda_launch_check(ctx, "dbias_reduce_kernel");
}
