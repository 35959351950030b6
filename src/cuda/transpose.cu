/*
 * transpose.cu — byte transpose of FP8 data: dst [cols, rows] = src [rows, cols]
 * (backend.h transpose_u8), honouring the noop flag. Used for a qtensor's
 * cached transpose when the cast did not produce it.
 *
 * Design note. A block moves a 128 x 128-byte tile. A thread loads a 4-row x
 * 16-byte micro-block (four 16-byte loads, a warp reading 4 rows x 128
 * contiguous bytes), transposes its 4x4 byte blocks in registers with
 * __byte_perm and stores them to shared memory as 32-bit words, one word =
 * 4 consecutive rows of one column. The block then writes each transposed row
 * as eight 16-byte pieces (a warp writes 4 rows x 128 contiguous bytes). The
 * shared tile has no padding; instead the word position in a row is XORed
 * with (column / 16) * 4, which puts the 32 word stores of a warp in 32 banks
 * and keeps each 16-byte piece contiguous, so the read side uses 16-byte
 * shared loads without conflicts. Unaligned pointers or pitches fall back to
 * narrower accesses (access_width); tile edges move single bytes. Rows of
 * an odd length (any byte offset) would make those 1-byte accesses, 16
 * instructions a piece: such rows are read from their aligned chunks
 * (load16_any) and written as aligned pieces joined across the 8 lanes of
 * a transposed row (store_pieces_unaligned), kernels_common.cuh's helpers.
 */
#include <limits.h>
#include <stdint.h>

#include "kernels_common.cuh"

#define TR_THREADS 256
#define TR_TILE 128                   /* tile edge in bytes (rows and columns) */
#define TR_TX (TR_TILE / 16)          /* threads across a tile: 16 bytes each */
#define TR_TY (TR_THREADS / TR_TX)    /* threads down a tile: 4 rows each */
#define TR_PARTS (TR_TILE / 16)       /* 16-byte pieces per transposed row */

static_assert(TR_TY * 4 == TR_TILE, "one 4-row micro-block per thread covers the tile rows");
static_assert(TR_TX == 8, "the word swizzle assumes 8 column groups (3 bits)");
static_assert(TR_TILE * TR_PARTS % TR_THREADS == 0, "whole 16-byte pieces per thread");

typedef struct transpose_params {
    const uint8_t *src; /* (rows, cols) */
    uint8_t *dst;       /* (cols, rows) */
    int64_t rows, cols;
    const float *noop;  /* or NULL */
    int col_tiles;
    int w_src, w_dst;   /* access widths (bytes) for src rows and dst rows */
} transpose_params;

/* Word position, within the shared row of column c, of the word holding rows
 * 4*g .. 4*g+3 of the tile. */
static __device__ __forceinline__ int swizzle(int c, int g) { return g ^ (((c >> 4) & 7) << 2); }

/* ------------------------------------------------------------------------ */
/* Kernel                                                                    */
/* ------------------------------------------------------------------------ */

/* Transpose one TR_TILE x TR_TILE byte tile.
 * Grid: row_tiles * col_tiles blocks (1-D, column tiles fastest); block
 * TR_THREADS. Thread (tx = lane % 8, ty = 4 * warp + lane / 8) owns the
 * micro-block at rows 4ty..4ty+3, columns 16tx..16tx+15 of the tile; in the
 * write phase it owns pieces q = tid + k * TR_THREADS: transposed row q / 8,
 * rows 16 * (q % 8) .. +15. */
static __global__ void __launch_bounds__(TR_THREADS) transpose_u8_kernel(transpose_params p)
{
    __shared__ __align__(16) uint32_t tile_t[TR_TILE][TR_TILE / 4]; /* (column, row / 4), swizzled */

    if (noop_set(p.noop)) return;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int tx = lane % TR_TX;
    const int ty = warp * (32 / TR_TX) + lane / TR_TX;
    const int64_t row0 = (int64_t)(blockIdx.x / p.col_tiles) * TR_TILE;
    const int64_t col0 = (int64_t)(blockIdx.x % p.col_tiles) * TR_TILE;
    const int64_t col = col0 + tx * 16;
    const bool col_full = col + 16 <= p.cols;

    uint32_t raw[4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int64_t row = row0 + ty * 4 + r;
        const uint8_t *s = p.src + row * p.cols + col;
        if (row < p.rows && col_full && p.w_src > 4) {
            load_bytes<16>(raw[r], s, p.w_src);
        } else if (row < p.rows && col_full) {
            load16_any(raw[r], s, p.src, p.src + p.rows * p.cols);
        } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) raw[r][i] = 0;
            if (row < p.rows) {
#pragma unroll
                for (int b = 0; b < 16; ++b)
                    if (col + b < p.cols) raw[r][b / 4] |= (uint32_t)s[b] << (8 * (b % 4));
            }
        }
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const uint32_t rw[4] = {raw[0][k], raw[1][k], raw[2][k], raw[3][k]};
        uint32_t cw[4];
        transpose_4x4_bytes(rw, cw);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int c = tx * 16 + 4 * k + i;
            tile_t[c][swizzle(c, ty)] = cw[i];
        }
    }
    __syncthreads();

#pragma unroll
    for (int k = 0; k < TR_TILE * TR_PARTS / TR_THREADS; ++k) {
        const int q = tid + k * TR_THREADS;
        const int c = q / TR_PARTS, part = q % TR_PARTS;
        const uint4 t = *(const uint4 *)&tile_t[c][swizzle(c, part * 4)];
        const uint32_t w[4] = {t.x, t.y, t.z, t.w};
        const int64_t r = row0 + part * 16;
        uint8_t *d = p.dst + (col0 + c) * p.rows + r;
        if (p.w_dst < 16) { /* uniform; every lane stores (it shuffles) */
            const int64_t left = col0 + c < p.cols ? p.rows - r : 0;
            store_pieces_unaligned<16, TR_PARTS>(d, w, left >= 16 ? 16 : left > 0 ? (int)left : 0);
            continue;
        }
        if (col0 + c >= p.cols) continue;
        if (r + 16 <= p.rows) {
            store_bytes<16>(d, w, p.w_dst);
        } else {
#pragma unroll
            for (int b = 0; b < 16; ++b)
                if (r + b < p.rows) d[b] = (uint8_t)(w[b / 4] >> (8 * (b % 4)));
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Backend entry point                                                       */
/* ------------------------------------------------------------------------ */

f8_status f8i_cuda_transpose_u8(f8_ctx *ctx, const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols,
                                const float *noop)
{
    if (rows < 0 || cols < 0)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "transpose: negative shape [%lld, %lld]", (long long)rows,
                         (long long)cols);
    if (rows == 0 || cols == 0) return F8_OK;
    const int64_t row_tiles = (rows + TR_TILE - 1) / TR_TILE;
    const int64_t col_tiles = (cols + TR_TILE - 1) / TR_TILE;
    if (row_tiles > INT_MAX / col_tiles)
        return f8i_error(ctx, F8_ERR_UNSUPPORTED, "transpose: [%lld, %lld] has too many tiles for one launch",
                         (long long)rows, (long long)cols);

    transpose_params p;
    p.src = src;
    p.dst = dst;
    p.rows = rows;
    p.cols = cols;
    p.noop = noop;
    p.col_tiles = (int)col_tiles;
    p.w_src = access_width(src, cols, 16);
    p.w_dst = access_width(dst, rows, 16);
    F8I_COUNT_LAUNCHES(ctx, 1);
    transpose_u8_kernel<<<(unsigned)(row_tiles * col_tiles), TR_THREADS, 0, f8i_stream(ctx)>>>(p);
    return f8i_cuda_launch_check(ctx, "transpose_u8_kernel");
}
