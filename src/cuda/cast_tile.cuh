/*
 * cast_tile.cuh — the tiled FP8 cast + transpose (+ dbias) kernel, shared by
 * the cast (cast.cu: the tile's values are the source tensor) and the fused
 * activation backward (act_kernels.cuh: the values are d = act'(x)·dy, computed as the
 * tile is loaded). Only src/cuda/ includes this.
 *
 * Design note. A block casts a TILE_ROWS x TC tile, TC = 16 * VEC columns.
 * Each thread loads two 4-row micro-blocks of VEC values, writes their codes
 * row-major, transposes each 4x4 code block in registers and parks it in
 * shared memory as words; the block then writes the transposed tile as
 * 16-byte pieces, 128 bytes per output row. Warp lanes are laid out so the
 * word stores into the padded shared tile hit 32 different banks. dbias is
 * deterministic: each row tile writes its column sums to the args' workspace
 * [row_tiles, cols] (FP32), and kernels_common.cuh's dbias_reduce_kernel
 * adds them in row-tile order; with a single row tile the tile kernel writes dbias itself.
 *
 * Where the values come from is the kernel's SRC template argument: a plain
 * struct (data only) naming the inputs, with
 *   SRC::VEC    values per thread-row (4 or 8),
 *   SRC::AHEAD  micro-blocks loaded before the first is used (1 or 2),
 *   SRC::raw_t  what one thread-row load holds until it is decoded,
 *   SRC::FULL   0: only the generic kernels, 1: also the FULL ones below,
 *               2: only FULL ones (its caller has checked cast_tile_full),
 * and three functions the including file defines for its SRC type before it
 * launches (found by argument-dependent lookup at instantiation), each with
 * the kernel's FULL flag as its template argument:
 *   tile_load<FULL>(src, raw, at, rows, cols)   load row at.row0 + at.r,
 *       columns at.col0 + at.c .. +VEC-1 (zeros outside [rows, cols], which
 *       add nothing to amax or the sums);
 *   tile_values<FULL>(src, raw, col, v)         decode/compute the VEC values;
 *   tile_store<FULL>(src, v, at, rows, cols)    extra per-value output (the
 *       activation's dx), or nothing.
 *
 * The FULL path. The generic kernel pays on every access for what only edges
 * and odd pointers need: a runtime width switch (load_bytes, store_bytes),
 * a bounds check per row and per piece, 64-bit index arithmetic, and a
 * division for the tile coordinates. Measured on an H200 this made the fused
 * GELU backward issue-bound (~50 instructions per element against ~30 of
 * arithmetic and packing). So each SRC also compiles a FULL kernel (FULL = 1,
 * for the dtypes training uses: SRC::FULL) that the launcher picks when it
 * can prove every access is a whole, widest one: the tiles cover the matrix
 * exactly (rows % TILE_ROWS == 0, cols % TC == 0), both out and out_t are
 * asked for (no per-row checks) and take VEC-byte and 16-byte stores, the
 * source says its own inputs take their widest loads (the caller's
 * `full_src`), and rows, cols <= TILE_FULL_MAX so offsets inside a tile fit
 * in 32 bits (the tile's origin stays 64-bit). It runs on a 2-D grid (column
 * tiles x, row tiles y: the same block order, no division) and does the same
 * arithmetic in the same order as the generic kernel, so its codes, amax
 * and dbias are bit-identical; only the addressing and the checks differ.
 * Everything else (edges, odd pointers, FP32 activation inputs, dx) runs
 * the generic kernel, unchanged.
 *
 * Unaligned rows (issue 16: an odd cols, or an odd rows for out_t, leaves
 * the rows of out or out_t at any byte offset). Written thread-row by
 * thread-row with 1-byte stores, each touching as many lines as a 16-byte
 * one, the generic kernel was bound by its store instructions at about a
 * third of its aligned bandwidth. So where out's rows are not VEC-aligned
 * (w_out < VEC) the block parks its codes row-major in dynamic shared memory
 * (cast_tile_stage_bytes) and writes each tile row's TC bytes as 16-byte
 * pieces through kernels_common.cuh's store_pieces_unaligned: aligned
 * 16-byte stores, narrow ones only at the tile row's two ends; where out_t's
 * rows are not 16-byte aligned its pieces go the same way. Aligned rows keep
 * the code paths above unchanged (and no dynamic shared memory).
 */
#ifndef F8_CUDA_CAST_TILE_CUH
#define F8_CUDA_CAST_TILE_CUH

#include <limits.h>
#include <stdint.h>

#include "kernels_common.cuh"

#define CAST_THREADS 256
/* Blocks per SM the FULL kernels' launch bounds ask for (registers: 65536 / (256 · blocks) a thread). */
#define CAST_FULL_MIN_BLOCKS 4 /* best overall against 1 (the compiler's choice), 5 and 6 (bench/RESULTS.md) */
#define TILE_ROWS 128                  /* rows of a tile; fixes the dbias workspace size */
#define TILE_TX 16                     /* threads across a tile (VEC columns each) */
#define TILE_TY 16                     /* threads down a tile (two 4-row micro-blocks each) */
#define TILE_WORDS (TILE_ROWS / 4 + 1) /* words per transposed-tile row in shared memory (+1 pad) */

static_assert(TILE_TX * TILE_TY == CAST_THREADS, "one thread per (tx, ty) of a tile");
static_assert(TILE_TY * 4 * 2 == TILE_ROWS, "two 4-row micro-blocks per thread cover the tile rows");
static_assert(TILE_ROWS % 16 == 0, "the transposed tile is written in 16-byte pieces");
/* dbias partials: one FP32 row per TILE_ROWS rows, where f8i_reduce_workspace_bytes
 * (backend.h, the one sizing formula) counts two per 16 rows. */
static_assert(TILE_ROWS >= 16, "f8i_reduce_workspace_bytes bounds the dbias partials (one row per 16 rows)");
static_assert(TILE_TX * 4 * (TILE_ROWS / 16) % CAST_THREADS == 0, "whole 16-byte pieces per thread");
static_assert(TILE_ROWS * TILE_TX * 4 / 16 % CAST_THREADS == 0, "whole staged 16-byte pieces per thread");

/* Row pitch (bytes) of the staged codes for a tile of TC columns: TC + 8
 * puts the 4 rows (4 apart) of a half-warp's 8-byte stores and the 2 rows
 * of a half-warp's 8-byte loads in different banks (for TC = 128). */
#define TILE_STAGE_PITCH(TC) ((TC) + 8)

/* The FULL kernels' bound on rows and cols: an offset inside a tile, at most
 * TILE_ROWS rows of a row pitch of up to 2 * cols elements (a gated x), or
 * TC rows of out_t, then fits in a signed 32-bit int. */
#define TILE_FULL_MAX ((int64_t)1 << 22)
static_assert(TILE_ROWS * 2 * TILE_FULL_MAX < ((int64_t)1 << 31) - 1, "32-bit offsets inside a FULL tile");
static_assert(TILE_FULL_MAX / TILE_ROWS <= 65535, "a FULL grid's row tiles fit gridDim.y");

/* Where a thread-row lies: the tile's origin (row0, col0) and the row r and
 * column c inside the tile. */
typedef struct tile_at {
    int64_t row0, col0;
    int r, c;
} tile_at;

/* The outputs of a tiled cast of a (rows, cols) matrix of values. */
typedef struct cast_tile_params {
    int64_t rows, cols;
    uint8_t *out;        /* (rows, cols) or NULL */
    uint8_t *out_t;      /* (cols, rows) or NULL */
    const float *scale;  /* or NULL when no codes are written (then 1) */
    float *amax;         /* or NULL */
    float *scale_inv;    /* or NULL */
    const float *noop;   /* or NULL */
    void *dbias;         /* (cols) FP32 or BF16, or NULL */
    int dbias_bf16;
    int dbias_accumulate;
    void *workspace;     /* the op's args' workspace (dbias only) */
    size_t workspace_bytes;
    float *partial;      /* (row_tiles, cols) in workspace, or NULL: write dbias directly */
    int col_tiles;
    int w_out, w_out_t;  /* access widths (bytes) for out rows, out_t rows */
    unsigned long long *stats; /* FP8 telemetry [3] (f8i_cast_args.stats) or NULL */
} cast_tile_params;

/* Declared only so that `tile_load<FULL>(src, ...)` parses as a template
 * call in C++17; the SRC's own overloads are found by argument-dependent
 * lookup. */
template <int FULL> void tile_load();
template <int FULL> void tile_values();
template <int FULL> void tile_store();

/* 1 when out's rows take narrower stores than a thread-row's VEC codes: the
 * generic kernel then stages them (the design note). */
static inline int cast_tile_stages(const cast_tile_params *p, int vec) { return p->out != NULL && p->w_out < vec; }

/* Dynamic shared memory of the generic kernel for p: the staged codes,
 * (TILE_ROWS, TILE_STAGE_PITCH(TC)) bytes, or none. */
static inline size_t cast_tile_stage_bytes(const cast_tile_params *p, int vec)
{
    return cast_tile_stages(p, vec) ? (size_t)TILE_ROWS * TILE_STAGE_PITCH(TILE_TX * vec) : 0;
}

/* Cast + transpose (+ dbias sums) of one TILE_ROWS x TC tile, TC = 16 * VEC.
 * Grid: row_tiles * col_tiles blocks (1-D, column tiles fastest; FULL: 2-D,
 * (col_tiles, row_tiles)); block CAST_THREADS. Thread (tx, ty) owns columns
 * tx*VEC .. tx*VEC+VEC-1 of the tile
 * in two micro-blocks of 4 rows (rows 4ty.. and 64+4ty..): it loads them,
 * writes their codes to out, and stores their transposed code words in
 * tile_t[column][row / 4]. Then the block writes out_t: piece q (c = q / 8,
 * part = q % 8) is rows 16*part .. 16*part+15 of output row col0 + c. With
 * DBIAS, thread t < TC adds column t's 16 per-thread sums (fixed order) and
 * writes the tile's partial sum, or dbias itself when partial is NULL.
 * Thread 0 of block 0 writes scale_inv. FULL: the tile lies inside the
 * matrix and every access is the widest (the design note). Staged out
 * (cast_tile_stages): the thread parks its codes in stage[row][column]
 * instead, and the block writes tile row q / G, piece q % G (G = TC / 16
 * pieces of 16 bytes a row) for q = tid + k * CAST_THREADS. */
template <typename SRC, int E5M2, int DBIAS, int FULL>
static __global__ void __launch_bounds__(CAST_THREADS, FULL ? CAST_FULL_MIN_BLOCKS : 1)
    cast_tile_kernel(cast_tile_params p, SRC src)
{
    constexpr int VEC = SRC::VEC;               /* values per thread-row */
    constexpr int TC = TILE_TX * VEC;           /* tile columns */
    constexpr int LX = 32 / VEC;                /* warp lanes across columns */
    constexpr int PARTS = TILE_ROWS / 16;       /* 16-byte pieces per transposed row */
    static_assert(VEC == 4 || VEC == 8, "a thread-row is 4 or 8 values");
    static_assert(SRC::AHEAD == 1 || SRC::AHEAD == 2, "one or both micro-blocks loaded ahead");
    __shared__ uint32_t tile_t[TC][TILE_WORDS]; /* (TC, TILE_ROWS/4 + 1) code words */
    __shared__ float col_sum[DBIAS ? TILE_TY : 1][DBIAS ? TC + 1 : 1]; /* (TILE_TY, TC + 1) */
    extern __shared__ __align__(16) uint8_t cast_tile_stage[]; /* staged: (TILE_ROWS, STAGE_PITCH) codes */
    constexpr int STAGE_PITCH = TILE_STAGE_PITCH(TC);
    const bool stage_out = !FULL && p.out != NULL && p.w_out < VEC; /* cast_tile_stages: uniform */

    if (noop_set(p.noop)) return;
    const float s = p.scale != NULL ? *p.scale : 1.0f;
    const bool block0 = FULL ? blockIdx.x == 0 && blockIdx.y == 0 : blockIdx.x == 0;
    if (p.scale_inv != NULL && block0 && threadIdx.x == 0) *p.scale_inv = 1.0f / s;

    /* A warp covers LX column groups x VEC row groups: with the 33-word
     * row pitch of tile_t its word stores fall in 32 different banks. */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int tx = (warp % (TILE_TX / LX)) * LX + lane % LX;
    const int ty = (warp / (TILE_TX / LX)) * VEC + lane / LX;
    const int64_t row_tile = FULL ? (int64_t)blockIdx.y : blockIdx.x / p.col_tiles;
    const int64_t row0 = row_tile * TILE_ROWS;
    const int64_t col0 = (int64_t)(FULL ? blockIdx.x : blockIdx.x % p.col_tiles) * TC;
    const int64_t col = col0 + tx * VEC;
    const bool col_full = FULL || col + VEC <= p.cols;
    /* FULL: the thread's first code in out (rows 4ty.., 64-bit once, then
     * 32-bit steps of a row) and the tile's first in out_t. */
    uint8_t *const out_thread = FULL ? p.out + (row0 + ty * 4) * p.cols + col : NULL;
    uint8_t *const out_t_tile = FULL ? p.out_t + col0 * p.rows + row0 : NULL;

    /* The first AHEAD micro-blocks' row loads are issued before any is used. */
    typename SRC::raw_t raw[2][4];
#pragma unroll
    for (int m = 0; m < SRC::AHEAD; ++m) {
#pragma unroll
        for (int r = 0; r < 4; ++r)
            tile_load<FULL>(src, raw[m][r], tile_at{row0, col0, m * (TILE_ROWS / 2) + ty * 4 + r, tx * VEC}, p.rows,
                            p.cols);
    }

    float a = 0.0f;
    unsigned sat = 0, flushed = 0;
    const bool counting = p.stats != NULL; /* uniform */
    float dsum[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) dsum[j] = 0.0f;
#pragma unroll
    for (int m = 0; m < 2; ++m) {
        if (m >= SRC::AHEAD) {
#pragma unroll
            for (int r = 0; r < 4; ++r)
                tile_load<FULL>(src, raw[m][r], tile_at{row0, col0, m * (TILE_ROWS / 2) + ty * 4 + r, tx * VEC},
                                p.rows, p.cols);
        }
        uint32_t code[4][VEC / 4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const tile_at at = {row0, col0, m * (TILE_ROWS / 2) + ty * 4 + r, tx * VEC};
            const int64_t row = row0 + at.r;
            float v[VEC];
            tile_values<FULL>(src, raw[m][r], col, v);
            tile_store<FULL>(src, v, at, p.rows, p.cols);
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                a = fmaxf(a, fabsf(v[j]));
                if (DBIAS) dsum[j] += v[j];
            }
#pragma unroll
            for (int k = 0; k < VEC / 4; ++k) code[r][k] = fp8x4<E5M2>(v + 4 * k, s);
            if (counting) { /* values outside the matrix are +0: neither saturated nor flushed */
#pragma unroll
                for (int j = 0; j < VEC; ++j) code_stats<E5M2>(v[j], s, code[r][j / 4] >> (8 * (j % 4)), sat, flushed);
            }
            if constexpr (FULL) {
                store_bytes<VEC>(out_thread + (m * (TILE_ROWS / 2) + r) * (int)p.cols, code[r], VEC);
            } else if (stage_out) {
                store_bytes<VEC>(cast_tile_stage + at.r * STAGE_PITCH + at.c, code[r], VEC);
            } else if (p.out != NULL && row < p.rows) {
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
        if (FULL || p.out_t != NULL) park_codes_t<VEC>(code, tile_t, tx * VEC, m * (TILE_ROWS / 8) + ty);
    }
    if (DBIAS) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) col_sum[ty][tx * VEC + j] = dsum[j];
    }
    if (FULL || p.out_t != NULL || DBIAS || stage_out) __syncthreads(); /* uniform: kernel arguments */

    /* The unaligned writes are not unrolled: unrolled, their shuffles and
     * shifts raised the generic kernel from ~80 to 128 registers. */
    if (stage_out) {
        constexpr int G = TC / 16; /* 16-byte pieces per tile row */
#pragma unroll 1
        for (int k = 0; k < TILE_ROWS * G / CAST_THREADS; ++k) {
            const int q = tid + k * CAST_THREADS;
            const int tr = q / G, piece = q % G;
            const int64_t row = row0 + tr, c = col0 + piece * 16;
            uint32_t w[4];
            load_bytes<16>(w, cast_tile_stage + tr * STAGE_PITCH + piece * 16, 8);
            const int64_t left = row < p.rows ? p.cols - c : 0;
            const int valid = left >= 16 ? 16 : left > 0 ? (int)left : 0;
            store_pieces_unaligned<16, G>(p.out + row * p.cols + c, w, valid);
        }
    }

    if (!FULL && p.out_t != NULL && p.w_out_t < 16) { /* uniform: every lane stores (it shuffles) */
#pragma unroll 1
        for (int k = 0; k < TC * PARTS / CAST_THREADS; ++k) {
            const int q = tid + k * CAST_THREADS;
            const int c = q / PARTS, part = q % PARTS;
            uint32_t w[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) w[i] = tile_t[c][part * 4 + i];
            const int64_t r = row0 + part * 16, left = col0 + c < p.cols ? p.rows - r : 0;
            const int valid = left >= 16 ? 16 : left > 0 ? (int)left : 0;
            store_pieces_unaligned<16, PARTS>(p.out_t + (col0 + c) * p.rows + r, w, valid);
        }
    } else if (FULL || p.out_t != NULL) {
#pragma unroll
        for (int k = 0; k < TC * PARTS / CAST_THREADS; ++k) {
            const int q = tid + k * CAST_THREADS;
            const int c = q / PARTS, part = q % PARTS;
            if (!FULL && col0 + c >= p.cols) continue;
            uint32_t w[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) w[i] = tile_t[c][part * 4 + i];
            if constexpr (FULL) {
                store_bytes<16>(out_t_tile + (c * (int)p.rows + part * 16), w, 16);
                continue;
            }
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
    if (DBIAS && tid < TC && (FULL || col0 + tid < p.cols)) {
        float sum = 0.0f;
#pragma unroll
        for (int y = 0; y < TILE_TY; ++y) sum += col_sum[y][tid];
        if (p.partial != NULL)
            p.partial[row_tile * p.cols + col0 + tid] = sum;
        else
            dbias_write(p.dbias, p.dbias_bf16, p.dbias_accumulate, col0 + tid, sum);
    }
    if (p.amax != NULL) block_amax_atomic<CAST_THREADS>(a, p.amax);
    if (counting) block_stats_atomic<CAST_THREADS>(sat, flushed, p.stats, p.rows * p.cols, block0);
}

/* Row tiles of a tiled cast over `rows`. */
static inline int64_t cast_tile_row_tiles(int64_t rows) { return (rows + TILE_ROWS - 1) / TILE_ROWS; }

/* The tile kernel for e5m2 and whether p asks for dbias, on `grid`. */
template <typename SRC, int FULL>
static void cast_tile_kernel_launch(const cast_tile_params *p, const SRC &src, int e5m2, dim3 grid,
                                    cudaStream_t stream)
{
    /* FULL never stages (cast_tile_full asks for w_out >= VEC) */
    const size_t smem = FULL ? 0 : cast_tile_stage_bytes(p, SRC::VEC);
    if (p->dbias != NULL && e5m2)
        cast_tile_kernel<SRC, 1, 1, FULL><<<grid, CAST_THREADS, smem, stream>>>(*p, src);
    else if (p->dbias != NULL)
        cast_tile_kernel<SRC, 0, 1, FULL><<<grid, CAST_THREADS, smem, stream>>>(*p, src);
    else if (e5m2)
        cast_tile_kernel<SRC, 1, 0, FULL><<<grid, CAST_THREADS, smem, stream>>>(*p, src);
    else
        cast_tile_kernel<SRC, 0, 0, FULL><<<grid, CAST_THREADS, smem, stream>>>(*p, src);
}

/* 1 when the FULL kernel may cast p: the tiles cover [rows, cols] exactly,
 * offsets inside a tile fit in 32 bits, both out and out_t are asked for
 * (as every training call does) and take their widest stores, and
 * (full_src, the caller's word) the source's inputs their widest loads. */
static inline int cast_tile_full(const cast_tile_params *p, int vec, int full_src)
{
    return full_src && p->rows % TILE_ROWS == 0 && p->cols % (TILE_TX * vec) == 0 && p->rows <= TILE_FULL_MAX &&
           p->cols <= TILE_FULL_MAX && p->out != NULL && p->w_out >= vec && p->out_t != NULL && p->w_out_t >= 16;
}

/* Launch the tile kernel for p (rows, cols > 0; out, out_t, amax, scale_inv,
 * noop, dbias, dbias_bf16, dbias_accumulate, w_out and w_out_t filled in)
 * and src, then dbias_reduce_kernel when there are several row tiles. The
 * FULL kernel runs when SRC has one and cast_tile_full(p, VEC, full_src)
 * holds; full_src says that every source access can be its widest (the
 * SRC's own widths at their maximum). A FULL-only source (SRC::FULL 2)
 * where it does not hold: F8_ERR_UNSUPPORTED, nothing launched. Fills p->col_tiles and p->partial (from
 * p->workspace; with dbias, F8_ERR_STATE before any launch unless the
 * workspace holds f8i_reduce_workspace_bytes(rows, cols)). `op` names the
 * operation in messages. Counts its own launches (1, or 2 with the
 * reduce) in f8_ctx_counters: callers must not count them again. */
template <typename SRC>
static f8_status cast_tile_launch(f8_ctx *ctx, cast_tile_params *p, const SRC &src, int e5m2, int full_src,
                                  const char *op)
{
    constexpr int TC = TILE_TX * SRC::VEC;
    const int64_t row_tiles = cast_tile_row_tiles(p->rows);
    const int64_t col_tiles = (p->cols + TC - 1) / TC;
    if (row_tiles > INT_MAX / col_tiles)
        return f8i_error(ctx, F8_ERR_UNSUPPORTED, "%s: [%lld, %lld] has too many tiles for one launch", op,
                         (long long)p->rows, (long long)p->cols);
    p->col_tiles = (int)col_tiles;
    p->partial = NULL;
    if (p->dbias != NULL) {
        /* The contract both backends check (even when one row tile needs no
         * partials), before any launch, so a failing call writes nothing. */
        F8I_TRY(f8i_check_reduce_workspace(ctx, p->workspace, p->workspace_bytes, p->rows, p->cols, op));
        if (row_tiles > 1) p->partial = (float *)p->workspace;
    }

    cudaStream_t stream = f8i_stream(ctx);
    const int full = SRC::FULL && cast_tile_full(p, SRC::VEC, full_src);
    if (SRC::FULL == 2 && !full)
        return f8i_error(ctx, F8_ERR_UNSUPPORTED, "%s: [%lld, %lld] launched on a FULL-only source (internal)", op,
                         (long long)p->rows, (long long)p->cols);
    F8I_COUNT_LAUNCHES(ctx, 1);
    if constexpr (SRC::FULL) {
        /* row_tiles <= TILE_FULL_MAX / TILE_ROWS fits the grid's y. */
        if (full)
            cast_tile_kernel_launch<SRC, 1>(p, src, e5m2, dim3((unsigned)col_tiles, (unsigned)row_tiles), stream);
    }
    if constexpr (SRC::FULL != 2) {
        if (!full) cast_tile_kernel_launch<SRC, 0>(p, src, e5m2, dim3((unsigned)(row_tiles * col_tiles)), stream);
    }
    f8_status st = f8i_cuda_launch_check(ctx, "cast_tile_kernel");
    if (st != F8_OK || p->partial == NULL) return st;

    const unsigned rblocks = (unsigned)((p->cols + 31) / 32);
    F8I_COUNT_LAUNCHES(ctx, 1);
    dbias_reduce_kernel<<<rblocks, dim3(32, F8I_REDUCE_SPLIT), 0, stream>>>(p->partial, row_tiles, p->cols, p->dbias,
                                                                        p->dbias_bf16, p->dbias_accumulate, p->noop);
    return f8i_cuda_launch_check(ctx, "dbias_reduce_kernel");
}

#endif /* F8_CUDA_CAST_TILE_CUH */
