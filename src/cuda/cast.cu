/*
 * cast.cu — the FP8 cast (f8i_cast_args in backend.h): FP32/BF16 -> E4M3/E5M2
 * with amax and the tensor's own scale_inv, optionally also the transposed
 * codes and the bias gradient (column sums of the input), in one read of the
 * input.
 *
 * Design note. Two kernels, picked by the launcher:
 *  - flat (no transpose, no dbias): the tensor is a flat array; a thread
 *    converts 16 elements per step (16-byte loads, one 16-byte store of codes)
 *    in a grid-stride loop, single elements for the tail; used as a whole
 *    scalar loop when a pointer is not 16-byte aligned.
 *  - tile (transpose and/or dbias): a block casts a TILE_ROWS x TC tile, TC =
 *    16 elements of 16 source bytes each (64 FP32 or 128 BF16 columns). Each
 *    thread loads two 4-row micro-blocks (8 loads in flight), writes their codes
 *    row-major, transposes each 4x4 code block in registers and parks it in
 *    shared memory as words; the block then writes the transposed tile as
 *    16-byte pieces, 128 bytes per output row. Warp lanes are laid out so the
 *    word stores into the padded shared tile hit 32 different banks.
 * Codes come from the hardware cvt.rn.satfinite.{e4m3,e5m2}x2.f32 applied to
 * v * scale (one FP32 multiply; the build passes -fmad=false), which is what
 * the CPU oracle's f8i_fp8_encode reproduces bit for bit. amax is an fmaxf
 * reduction (exact, order-free, NaN ignored) ending in one atomicMax on the
 * float's bits per block. dbias is deterministic: each row tile writes its
 * column sums to ctx scratch [row_tiles, cols] (FP32), and a second kernel adds
 * them in row-tile order; with a single row tile the first kernel writes dbias
 * itself. Nothing here allocates: the scratch must have been reserved
 * (f8i_cuda_dbias_scratch_bytes).
 */
#include <limits.h>
#include <stdint.h>

#include "kernels_common.cuh"

#define CAST_THREADS 256
#define FLAT_ELEMS 16                  /* elements a flat-kernel thread converts per step */
#define TILE_ROWS 128                  /* rows of a tile; fixes the dbias scratch size */
#define TILE_TX 16                     /* threads across a tile (16 source bytes each) */
#define TILE_TY 16                     /* threads down a tile (two 4-row micro-blocks each) */
#define TILE_WORDS (TILE_ROWS / 4 + 1) /* words per transposed-tile row in shared memory (+1 pad) */

static_assert(TILE_TX * TILE_TY == CAST_THREADS, "one thread per (tx, ty) of a tile");
static_assert(TILE_TY * 4 * 2 == TILE_ROWS, "two 4-row micro-blocks per thread cover the tile rows");
static_assert(TILE_ROWS % 16 == 0, "the transposed tile is written in 16-byte pieces");
static_assert(TILE_TX * 4 * (TILE_ROWS / 16) % CAST_THREADS == 0, "whole 16-byte pieces per thread");

typedef struct cast_tile_params {
    const void *src;     /* (rows, cols) FP32 or BF16 */
    int64_t rows, cols;
    uint8_t *out;        /* (rows, cols) or NULL */
    uint8_t *out_t;      /* (cols, rows) or NULL */
    const float *scale;
    float *amax;         /* or NULL */
    float *scale_inv;    /* or NULL */
    const float *noop;   /* or NULL */
    void *dbias;         /* (cols) FP32 or BF16, or NULL */
    int dbias_bf16;
    int dbias_accumulate;
    float *partial;      /* (row_tiles, cols) scratch, or NULL: write dbias directly */
    int col_tiles;
    int w_src, w_out, w_out_t; /* access widths (bytes) for src rows, out rows, out_t rows */
} cast_tile_params;

/* ------------------------------------------------------------------------ */
/* Device helpers                                                            */
/* ------------------------------------------------------------------------ */

template <int BF16>
static __device__ __forceinline__ float load_elem(const void *src, int64_t i)
{
    if (BF16) return f8i_bf16_to_float(((const uint16_t *)src)[i]);
    return ((const float *)src)[i];
}

/* The row piece at (row, col) of a tile edge: elements inside the tensor are
 * loaded one by one, the rest are +0 (no effect on amax or sums). */
template <int BF16>
static __device__ __forceinline__ void load_edge(uint32_t (&w)[4], const void *src, int64_t row, int64_t col,
                                                 int64_t rows, int64_t cols)
{
    constexpr int VEC = BF16 ? 8 : 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = 0;
    if (row >= rows) return;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
        if (col + j < cols) {
            const int64_t i = row * cols + col + j;
            if constexpr (BF16)
                w[j / 2] |= (uint32_t)((const uint16_t *)src)[i] << (16 * (j % 2));
            else
                w[j] = __float_as_uint(((const float *)src)[i]);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

/* Flat cast of n elements (no transpose, no dbias).
 * Grid: grid_size(...) blocks, grid-stride; block CAST_THREADS.
 * A thread owns chunks i, i + stride, ... of FLAT_ELEMS elements (i < nchunk;
 * 16-byte loads, one 16-byte store), then elements nchunk*16 + i, ... of the
 * tail. nchunk is 0 when src or out is not 16-byte aligned. Thread 0 of
 * block 0 writes scale_inv. */
template <int BF16, int E5M2>
static __global__ void __launch_bounds__(CAST_THREADS)
    cast_flat_kernel(const void *__restrict__ src, uint8_t *__restrict__ out, int64_t n, int64_t nchunk,
                     const float *scale, float *amax, float *scale_inv, const float *noop)
{
    constexpr int LOADS = BF16 ? 2 : 4; /* 16-byte loads per chunk */
    if (noop_set(noop)) return;
    const float s = *scale;
    if (scale_inv != NULL && blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = 1.0f / s;

    const int64_t stride = (int64_t)gridDim.x * CAST_THREADS;
    const int64_t first = (int64_t)blockIdx.x * CAST_THREADS + threadIdx.x;
    float a = 0.0f;
    for (int64_t i = first; i < nchunk; i += stride) {
        const uint4 *p = (const uint4 *)src + i * LOADS;
        float v[FLAT_ELEMS];
#pragma unroll
        for (int l = 0; l < LOADS; ++l) {
            uint4 t = p[l];
            uint32_t w[4] = {t.x, t.y, t.z, t.w};
            float *vl = v + l * (FLAT_ELEMS / LOADS);
            float d[BF16 ? 8 : 4];
            decode16<BF16>(w, d);
#pragma unroll
            for (int j = 0; j < FLAT_ELEMS / LOADS; ++j) vl[j] = d[j];
        }
        uint32_t code[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) code[k] = fp8x4<E5M2>(v + 4 * k, s);
#pragma unroll
        for (int j = 0; j < FLAT_ELEMS; ++j) a = fmaxf(a, fabsf(v[j]));
        if (out != NULL) ((uint4 *)out)[i] = make_uint4(code[0], code[1], code[2], code[3]);
    }
    for (int64_t i = nchunk * FLAT_ELEMS + first; i < n; i += stride) {
        float v = load_elem<BF16>(src, i);
        a = fmaxf(a, fabsf(v));
        if (out != NULL) out[i] = (uint8_t)fp8x2<E5M2>(v * s, 0.0f);
    }
    if (amax != NULL) block_amax_atomic<CAST_THREADS>(a, amax);
}

/* Cast + transpose (+ dbias sums) of one TILE_ROWS x TC tile, TC = 16 * VEC.
 * Grid: row_tiles * col_tiles blocks (1-D, column tiles fastest); block
 * CAST_THREADS. Thread (tx, ty) owns columns tx*VEC .. tx*VEC+VEC-1 of the tile
 * in two micro-blocks of 4 rows (rows 4ty.. and 64+4ty..): it loads them,
 * writes their codes to out, and stores their transposed code words in
 * tile_t[column][row / 4]. Then the block writes out_t: piece q (c = q / 8,
 * part = q % 8) is rows 16*part .. 16*part+15 of output row col0 + c. With
 * DBIAS, thread t < TC adds column t's 16 per-thread sums (fixed order) and
 * writes the tile's partial sum, or dbias itself when partial is NULL.
 * Thread 0 of block 0 writes scale_inv. */
template <int BF16, int E5M2, int DBIAS>
static __global__ void __launch_bounds__(CAST_THREADS) cast_tile_kernel(cast_tile_params p)
{
    constexpr int VEC = BF16 ? 8 : 4;           /* elements per 16 source bytes */
    constexpr int ES = BF16 ? 2 : 4;            /* source element bytes */
    constexpr int TC = TILE_TX * VEC;           /* tile columns */
    constexpr int LX = 32 / VEC;                /* warp lanes across columns */
    constexpr int PARTS = TILE_ROWS / 16;       /* 16-byte pieces per transposed row */
    __shared__ uint32_t tile_t[TC][TILE_WORDS]; /* (TC, TILE_ROWS/4 + 1) code words */
    __shared__ float col_sum[DBIAS ? TILE_TY : 1][DBIAS ? TC + 1 : 1]; /* (TILE_TY, TC + 1) */

    if (noop_set(p.noop)) return;
    const float s = *p.scale;
    if (p.scale_inv != NULL && blockIdx.x == 0 && threadIdx.x == 0) *p.scale_inv = 1.0f / s;

    /* A warp covers LX column groups x VEC row groups: with the 33-word
     * row pitch of tile_t its word stores fall in 32 different banks. */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int tx = (warp % (TILE_TX / LX)) * LX + lane % LX;
    const int ty = (warp / (TILE_TX / LX)) * VEC + lane / LX;
    const int64_t row_tile = blockIdx.x / p.col_tiles;
    const int64_t row0 = row_tile * TILE_ROWS;
    const int64_t col0 = (int64_t)(blockIdx.x % p.col_tiles) * TC;
    const int64_t col = col0 + tx * VEC;
    const bool col_full = col + VEC <= p.cols;

    /* All eight row loads are issued before any is used. */
    uint32_t raw[2][4][4];
#pragma unroll
    for (int m = 0; m < 2; ++m) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int64_t row = row0 + m * (TILE_ROWS / 2) + ty * 4 + r;
            if (row < p.rows && col_full)
                load_bytes<16>(raw[m][r], (const char *)p.src + (row * p.cols + col) * ES, p.w_src);
            else
                load_edge<BF16>(raw[m][r], p.src, row, col, p.rows, p.cols);
        }
    }

    float a = 0.0f;
    float dsum[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) dsum[j] = 0.0f;
#pragma unroll
    for (int m = 0; m < 2; ++m) {
        uint32_t code[4][VEC / 4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            float v[VEC];
            decode16<BF16>(raw[m][r], v);
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                a = fmaxf(a, fabsf(v[j]));
                if (DBIAS) dsum[j] += v[j];
            }
#pragma unroll
            for (int k = 0; k < VEC / 4; ++k) code[r][k] = fp8x4<E5M2>(v + 4 * k, s);
            const int64_t row = row0 + m * (TILE_ROWS / 2) + ty * 4 + r;
            if (p.out != NULL && row < p.rows) {
                uint8_t *dst = p.out + row * p.cols + col;
                if (col_full) {
                    store_bytes<VEC>(dst, code[r], p.w_out);
                } else {
#pragma unroll
                    for (int j = 0; j < VEC; ++j)
                        if (col + j < p.cols) dst[j] = (uint8_t)(code[r][j / 4] >> (8 * (j % 4)));
                }
            }
        }
        if (p.out_t != NULL) {
#pragma unroll
            for (int k = 0; k < VEC / 4; ++k) {
                const uint32_t rw[4] = {code[0][k], code[1][k], code[2][k], code[3][k]};
                uint32_t cw[4];
                transpose_4x4_bytes(rw, cw);
#pragma unroll
                for (int i = 0; i < 4; ++i) tile_t[tx * VEC + 4 * k + i][m * (TILE_ROWS / 8) + ty] = cw[i];
            }
        }
    }
    if (DBIAS) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) col_sum[ty][tx * VEC + j] = dsum[j];
    }
    if (p.out_t != NULL || DBIAS) __syncthreads(); /* uniform: kernel arguments */

    if (p.out_t != NULL) {
#pragma unroll
        for (int k = 0; k < TC * PARTS / CAST_THREADS; ++k) {
            const int q = tid + k * CAST_THREADS;
            const int c = q / PARTS, part = q % PARTS;
            if (col0 + c >= p.cols) continue;
            uint32_t w[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) w[i] = tile_t[c][part * 4 + i];
            const int64_t r = row0 + part * 16;
            uint8_t *dst = p.out_t + (col0 + c) * p.rows + r;
            if (r + 16 <= p.rows) {
                store_bytes<16>(dst, w, p.w_out_t);
            } else {
#pragma unroll
                for (int b = 0; b < 16; ++b)
                    if (r + b < p.rows) dst[b] = (uint8_t)(w[b / 4] >> (8 * (b % 4)));
            }
        }
    }
    if (DBIAS && tid < TC && col0 + tid < p.cols) {
        float sum = 0.0f;
#pragma unroll
        for (int y = 0; y < TILE_TY; ++y) sum += col_sum[y][tid];
        if (p.partial != NULL)
            p.partial[row_tile * p.cols + col0 + tid] = sum;
        else
            dbias_write(p.dbias, p.dbias_bf16, p.dbias_accumulate, col0 + tid, sum);
    }
    if (p.amax != NULL) block_amax_atomic<CAST_THREADS>(a, p.amax);
}

/* ------------------------------------------------------------------------ */
/* Launchers                                                                 */
/* ------------------------------------------------------------------------ */

template <int BF16, int E5M2>
static void launch_flat(const f8i_cast_args *a, int64_t n, int64_t nchunk, int blocks, cudaStream_t stream)
{
    cast_flat_kernel<BF16, E5M2><<<blocks, CAST_THREADS, 0, stream>>>(a->src, a->out, n, nchunk, a->scale, a->amax,
                                                                     a->scale_inv, a->noop);
}

template <int BF16, int E5M2>
static void launch_tile(const cast_tile_params *p, unsigned blocks, cudaStream_t stream)
{
    if (p->dbias != NULL)
        cast_tile_kernel<BF16, E5M2, 1><<<blocks, CAST_THREADS, 0, stream>>>(*p);
    else
        cast_tile_kernel<BF16, E5M2, 0><<<blocks, CAST_THREADS, 0, stream>>>(*p);
}

static f8_status cast_flat(f8_ctx *ctx, const f8i_cast_args *a, int bf16, int e5m2)
{
    const int64_t n = a->rows * a->cols;
    const int aligned = (uintptr_t)a->src % 16 == 0 && (a->out == NULL || (uintptr_t)a->out % 16 == 0);
    const int64_t nchunk = aligned ? n / FLAT_ELEMS : 0;
    const int blocks = grid_size(ctx, nchunk > 0 ? nchunk : n, CAST_THREADS);
    cudaStream_t stream = f8i_stream(ctx);
    if (bf16)
        e5m2 ? launch_flat<1, 1>(a, n, nchunk, blocks, stream) : launch_flat<1, 0>(a, n, nchunk, blocks, stream);
    else
        e5m2 ? launch_flat<0, 1>(a, n, nchunk, blocks, stream) : launch_flat<0, 0>(a, n, nchunk, blocks, stream);
    return f8i_cuda_launch_check(ctx, "cast_flat_kernel");
}

static f8_status cast_tiled(f8_ctx *ctx, const f8i_cast_args *a, int bf16, int e5m2)
{
    const int vec = bf16 ? 8 : 4, tc = TILE_TX * vec;
    const int64_t row_tiles = (a->rows + TILE_ROWS - 1) / TILE_ROWS;
    const int64_t col_tiles = (a->cols + tc - 1) / tc;
    if (row_tiles > INT_MAX / col_tiles)
        return f8i_error(ctx, F8_ERR_UNSUPPORTED, "cast: [%lld, %lld] has too many tiles for one launch",
                         (long long)a->rows, (long long)a->cols);

    cast_tile_params p;
    p.src = a->src;
    p.rows = a->rows;
    p.cols = a->cols;
    p.out = a->out;
    p.out_t = a->out_t;
    p.scale = a->scale;
    p.amax = a->amax;
    p.scale_inv = a->scale_inv;
    p.noop = a->noop;
    p.dbias = a->dbias;
    p.dbias_bf16 = a->dbias_dtype == F8_DTYPE_BF16;
    p.dbias_accumulate = a->dbias_accumulate != 0;
    p.partial = NULL;
    p.col_tiles = (int)col_tiles;
    p.w_src = access_width(a->src, a->cols * (bf16 ? 2 : 4), 16);
    p.w_out = a->out != NULL ? access_width(a->out, a->cols, vec) : 1;
    p.w_out_t = a->out_t != NULL ? access_width(a->out_t, a->rows, 16) : 1;

    if (a->dbias != NULL && row_tiles > 1) {
        /* Checked before any launch, so a failing call writes nothing. */
        const size_t need = (size_t)row_tiles * (size_t)a->cols * sizeof(float);
        if (ctx->scratch == NULL || ctx->scratch_bytes < need)
            return f8i_error(ctx, F8_ERR_STATE,
                             "cast with dbias of [%lld, %lld] needs %zu bytes of ctx scratch, %zu reserved "
                             "(reserve f8i_cuda_dbias_scratch_bytes at creation)",
                             (long long)a->rows, (long long)a->cols, need, ctx->scratch_bytes);
        p.partial = (float *)ctx->scratch;
    }

    cudaStream_t stream = f8i_stream(ctx);
    const unsigned blocks = (unsigned)(row_tiles * col_tiles);
    if (bf16)
        e5m2 ? launch_tile<1, 1>(&p, blocks, stream) : launch_tile<1, 0>(&p, blocks, stream);
    else
        e5m2 ? launch_tile<0, 1>(&p, blocks, stream) : launch_tile<0, 0>(&p, blocks, stream);
    f8_status st = f8i_cuda_launch_check(ctx, "cast_tile_kernel");
    if (st != F8_OK || p.partial == NULL) return st;

    const unsigned rblocks = (unsigned)((a->cols + 31) / 32);
    dbias_reduce_kernel<<<rblocks, dim3(32, F8I_REDUCE_SPLIT), 0, stream>>>(p.partial, row_tiles, a->cols, a->dbias,
                                                                        p.dbias_bf16, p.dbias_accumulate, a->noop);
    return f8i_cuda_launch_check(ctx, "dbias_reduce_kernel");
}

/* ------------------------------------------------------------------------ */
/* Backend entry points                                                      */
/* ------------------------------------------------------------------------ */

size_t f8i_cuda_dbias_scratch_bytes(int64_t rows, int64_t cols)
{
    if (rows <= 0 || cols <= 0) return 256;
    return (size_t)((rows + TILE_ROWS - 1) / TILE_ROWS) * (size_t)cols * sizeof(float) + 256;
}

f8_status f8i_cuda_cast(f8_ctx *ctx, const f8i_cast_args *a)
{
    if (a->src_dtype != F8_DTYPE_FP32 && a->src_dtype != F8_DTYPE_BF16)
        return f8i_error(ctx, F8_ERR_DTYPE, "cast: source dtype %s, expected fp32 or bf16",
                         f8_dtype_name(a->src_dtype));
    if (a->out_dtype != F8_DTYPE_E4M3 && a->out_dtype != F8_DTYPE_E5M2)
        return f8i_error(ctx, F8_ERR_DTYPE, "cast: output dtype %s, expected e4m3 or e5m2",
                         f8_dtype_name(a->out_dtype));
    if (a->dbias != NULL && a->dbias_dtype != F8_DTYPE_FP32 && a->dbias_dtype != F8_DTYPE_BF16)
        return f8i_error(ctx, F8_ERR_DTYPE, "cast: dbias dtype %s, expected fp32 or bf16",
                         f8_dtype_name(a->dbias_dtype));
    if (a->rows < 0 || a->cols < 0)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "cast: negative shape [%lld, %lld]", (long long)a->rows,
                         (long long)a->cols);

    if (a->rows == 0 || a->cols == 0) {
        /* An empty tensor still gets its own scale_inv (unless noop). */
        if (a->scale_inv == NULL) return F8_OK;
        return f8i_cuda_reciprocal(ctx, a->scale, a->scale_inv, a->noop);
    }
    const int bf16 = a->src_dtype == F8_DTYPE_BF16;
    const int e5m2 = a->out_dtype == F8_DTYPE_E5M2;
    if (a->out_t == NULL && a->dbias == NULL) return cast_flat(ctx, a, bf16, e5m2);
    return cast_tiled(ctx, a, bf16, e5m2);
}
