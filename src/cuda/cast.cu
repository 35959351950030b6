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
 *  - tile (transpose and/or dbias): cast_tile.cuh's cast_tile_kernel with
 *    the source tensor as its values (cast_src below): a block casts a
 *    128-row tile of 16 pieces of 16 source bytes (64 FP32 or 128 BF16
 *    columns), writing the codes row-major and, through shared memory, the
 *    transposed codes as 16-byte pieces.
 * Codes come from the hardware cvt.rn.satfinite.{e4m3,e5m2}x2.f32 applied to
 * v * scale (one FP32 multiply; the build passes -fmad=false), which is what
 * the CPU oracle's f8i_fp8_encode reproduces bit for bit. amax is an fmaxf
 * reduction (exact, order-free, NaN ignored) ending in one atomicMax on the
 * float's bits per block. dbias is deterministic (per-row-tile partial sums in
 * the args' workspace, added in row-tile order: cast_tile.cuh). Nothing here
 * allocates: the partials go to the args' workspace (f8i_reduce_workspace_bytes).
 */
#include <stdint.h>

#include "cast_tile.cuh"
#include "core/rowwise.h"

#define FLAT_ELEMS 16 /* elements a flat-kernel thread converts per step */

/* The tile kernel's values are the source tensor itself: 16 source bytes
 * (4 FP32 or 8 BF16 values) per thread-row, both micro-blocks loaded ahead.
 * SHIFTED: rows aligned to 4 bytes or less (odd cols), read from their
 * aligned chunks (tile_load); a kernel of its own, as the second chunk of
 * every row piece in flight takes ~30 more registers (~90 -> 128), which
 * would cost aligned sources occupancy. */
template <int BF16, int SHIFTED>
struct cast_src {
    static constexpr int VEC = BF16 ? 8 : 4;
    static constexpr int AHEAD = 2;
    static constexpr int FULL = SHIFTED ? 0 : 1;
    typedef uint32_t raw_t[4];
    const void *src; /* (rows, cols) FP32 or BF16 */
    int w_src;       /* access width (bytes) for src rows */
};

/* ------------------------------------------------------------------------ */
/* Device helpers                                                            */
/* ------------------------------------------------------------------------ */

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

/* cast_tile.cuh's three source functions for cast_src: the row piece at
 * (row, col) as 16 raw bytes (one 16-byte load inside the tensor, load_edge
 * at its edges; FULL: always one 16-byte load), decoded exactly; no extra
 * output. SHIFTED reads the piece from its aligned chunks (load16_any): 2
 * loads where 4-byte accesses take 4 and 2-byte ones 8. */
template <int FULL, int BF16, int SHIFTED>
static __device__ __forceinline__ void tile_load(const cast_src<BF16, SHIFTED> &s, uint32_t (&w)[4], tile_at at,
                                                 int64_t rows, int64_t cols)
{
    constexpr int VEC = BF16 ? 8 : 4, ES = BF16 ? 2 : 4;
    if constexpr (FULL) {
        const char *tile = (const char *)s.src + (at.row0 * cols + at.col0) * ES;
        load_bytes<16>(w, tile + (int64_t)(at.r * (int)cols + at.c) * ES, 16);
        return;
    }
    const int64_t row = at.row0 + at.r, col = at.col0 + at.c;
    if (row < rows && col + VEC <= cols && SHIFTED)
        load16_any(w, (const char *)s.src + (row * cols + col) * ES, s.src, (const char *)s.src + rows * cols * ES);
    else if (row < rows && col + VEC <= cols)
        load_bytes<16>(w, (const char *)s.src + (row * cols + col) * ES, s.w_src);
    else
        load_edge<BF16>(w, s.src, row, col, rows, cols);
}

template <int FULL, int BF16, int SHIFTED>
static __device__ __forceinline__ void tile_values(const cast_src<BF16, SHIFTED> &, const uint32_t (&w)[4], int64_t,
                                                   float (&v)[BF16 ? 8 : 4])
{
    decode16<BF16>(w, v);
}

template <int FULL, int BF16, int SHIFTED>
static __device__ __forceinline__ void tile_store(const cast_src<BF16, SHIFTED> &, const float (&)[BF16 ? 8 : 4], tile_at,
                                                  int64_t, int64_t)
{
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
                     const float *scale, float *amax, float *scale_inv, const float *noop,
                     unsigned long long *stats)
{
    constexpr int LOADS = BF16 ? 2 : 4; /* 16-byte loads per chunk */
    if (noop_set(noop)) return;
    const float s = *scale;
    if (scale_inv != NULL && blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = 1.0f / s;

    const int64_t stride = (int64_t)gridDim.x * CAST_THREADS;
    const int64_t first = (int64_t)blockIdx.x * CAST_THREADS + threadIdx.x;
    float a = 0.0f;
    unsigned sat = 0, flushed = 0;
    const bool counting = stats != NULL; /* uniform */
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
        if (counting) {
#pragma unroll
            for (int j = 0; j < FLAT_ELEMS; ++j) code_stats<E5M2>(v[j], s, code[j / 4] >> (8 * (j % 4)), sat, flushed);
        }
        if (out != NULL) ((uint4 *)out)[i] = make_uint4(code[0], code[1], code[2], code[3]);
    }
    for (int64_t i = nchunk * FLAT_ELEMS + first; i < n; i += stride) {
        float v = load_elem<BF16>(src, i);
        a = fmaxf(a, fabsf(v));
        const uint32_t code = fp8x2<E5M2>(v * s, 0.0f) & 0xFFu;
        if (counting) code_stats<E5M2>(v, s, code, sat, flushed);
        if (out != NULL) out[i] = (uint8_t)code;
    }
    if (amax != NULL) block_amax_atomic<CAST_THREADS>(a, amax);
    if (counting) block_stats_atomic<CAST_THREADS>(sat, flushed, stats, n, blockIdx.x == 0);
}

/* ------------------------------------------------------------------------ */
/* Launchers                                                                 */
/* ------------------------------------------------------------------------ */

template <int BF16, int E5M2>
static void launch_flat(const f8i_cast_args *a, int64_t n, int64_t nchunk, int blocks, cudaStream_t stream)
{
    cast_flat_kernel<BF16, E5M2><<<blocks, CAST_THREADS, 0, stream>>>(a->src, a->out, n, nchunk, a->scale, a->amax,
                                                                     a->scale_inv, a->noop,
                                                                     (unsigned long long *)a->stats);
}

static f8_status cast_flat(f8_ctx *ctx, const f8i_cast_args *a, int bf16, int e5m2)
{
    const int64_t n = a->rows * a->cols;
    const int aligned = (uintptr_t)a->src % 16 == 0 && (a->out == NULL || (uintptr_t)a->out % 16 == 0);
    const int64_t nchunk = aligned ? n / FLAT_ELEMS : 0;
    const int blocks = grid_size(ctx, nchunk > 0 ? nchunk : n, CAST_THREADS);
    cudaStream_t stream = f8i_stream(ctx);
    F8I_COUNT_LAUNCHES(ctx, 1);
    if (bf16)
        e5m2 ? launch_flat<1, 1>(a, n, nchunk, blocks, stream) : launch_flat<1, 0>(a, n, nchunk, blocks, stream);
    else
        e5m2 ? launch_flat<0, 1>(a, n, nchunk, blocks, stream) : launch_flat<0, 0>(a, n, nchunk, blocks, stream);
    return f8i_cuda_launch_check(ctx, "cast_flat_kernel");
}

static f8_status cast_tiled(f8_ctx *ctx, const f8i_cast_args *a, int bf16, int e5m2)
{
    cast_tile_params p;
    p.rows = a->rows;
    p.cols = a->cols;
    p.out = a->out;
    p.out_t = a->out_t;
    p.scale = a->scale;
    p.amax = a->amax;
    p.scale_inv = a->scale_inv;
    p.noop = a->noop;
    p.stats = (unsigned long long *)a->stats;
    p.dbias = a->dbias;
    p.dbias_bf16 = a->dbias_dtype == F8_DTYPE_BF16;
    p.dbias_accumulate = a->dbias_accumulate != 0;
    p.workspace = a->workspace;
    p.workspace_bytes = a->workspace_bytes;
    p.w_out = a->out != NULL ? access_width(a->out, a->cols, bf16 ? 8 : 4) : 1;
    p.w_out_t = a->out_t != NULL ? access_width(a->out_t, a->rows, 16) : 1;
    const int w_src = access_width(a->src, a->cols * (bf16 ? 2 : 4), 16);
    const int full_src = w_src == 16;
    if (w_src <= 4 && bf16) return cast_tile_launch(ctx, &p, cast_src<1, 1>{a->src, w_src}, e5m2, 0, "cast");
    if (w_src <= 4) return cast_tile_launch(ctx, &p, cast_src<0, 1>{a->src, w_src}, e5m2, 0, "cast");
    if (bf16) return cast_tile_launch(ctx, &p, cast_src<1, 0>{a->src, w_src}, e5m2, full_src, "cast");
    return cast_tile_launch(ctx, &p, cast_src<0, 0>{a->src, w_src}, e5m2, full_src, "cast");
}

/* ------------------------------------------------------------------------ */
/* Backend entry points                                                      */
/* ------------------------------------------------------------------------ */

f8_status f8i_cuda_cast(f8_ctx *ctx, const f8i_cast_args *a)
{
    if (!f8i_dtype_is_hp(a->src_dtype))
        return f8i_error(ctx, F8_ERR_DTYPE, "cast: source dtype %s, expected fp32 or bf16",
                         f8_dtype_name(a->src_dtype));
    if (!f8i_dtype_is_fp8(a->out_dtype))
        return f8i_error(ctx, F8_ERR_DTYPE, "cast: output dtype %s, expected e4m3 or e5m2",
                         f8_dtype_name(a->out_dtype));
    if (a->dbias != NULL && !f8i_dtype_is_hp(a->dbias_dtype))
        return f8i_error(ctx, F8_ERR_DTYPE, "cast: dbias dtype %s, expected fp32 or bf16",
                         f8_dtype_name(a->dbias_dtype));
    if (a->rows < 0 || a->cols < 0)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "cast: negative shape [%lld, %lld]", (long long)a->rows,
                         (long long)a->cols);
    if (a->mode == F8I_SCALING_BLOCK_1X128 || a->mode == F8I_SCALING_BLOCK_128X128) return f8i_cuda_cast_block(ctx, a);
    if (a->mode == F8I_SCALING_ROW) {
        const f8i_rowwise_cast_args r = f8i_rowwise_cast_from(a);
        F8I_TRY(f8i_rowwise_cast_check(ctx, &r));
        return f8i_cuda_cast_rowwise(ctx, &r);
    }
    if (a->mode != F8I_SCALING_TENSOR)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "cast: scaling mode %d unknown", (int)a->mode);

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
