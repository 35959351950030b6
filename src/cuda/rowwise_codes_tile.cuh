/*
 * rowwise_codes_tile.cuh — kernel 2 of the row-wise cast's column path on
 * whole tiles (rwt_codes_tile_kernel) and the test of whether it takes a
 * call (rwtt_fits): a part of rowwise_cast.cu, included by it after the
 * helpers and constants it uses (rwt_block, RW_THREADS, RWT_MAX_STRIPES),
 * not on its own. Why the pass is built so: rowwise_cast.cu's design note.
 */
#ifndef F8_CUDA_ROWWISE_CODES_TILE_CUH
#define F8_CUDA_ROWWISE_CODES_TILE_CUH

/* Kernel 2 on whole tiles (rwtt_fits): cast_tile.cuh's layout with one
 * scale a column. A block codes a 128-row x TC tile, TC = 16 VEC (VEC 8
 * BF16 or 4 FP32 values: one 16-byte load a thread-row); thread (tx, ty)
 * owns columns tx VEC .. + VEC - 1 and rows 4ty .. + 3 and 64 + 4ty .. + 3,
 * loads all 8 of its rows before the first is used, transposes each 4 x 4
 * block of codes in registers and parks the words in tile_t[column][row /
 * 4] (33-word rows: a warp's word stores hit 32 banks); the block then
 * writes out_t as 16-byte pieces, 128 bytes an out_t row. The codes are
 * kernel 2's (cvt of v times the column's scale), the telemetry too. Block
 * (tile, stripe) from rwt_block(back) on a (ceil(rows / 128), cols / TC)
 * grid. */
#define RWTT_ROWS 128
#define RWTT_WORDS (RWTT_ROWS / 4 + 1)
#define RWTT_MAX ((int64_t)1 << 22) /* rows, cols: offsets inside a tile fit in 32 bits */

template <int BF16>
struct rwtt_shape {
    static constexpr int VEC = BF16 ? 8 : 4; /* values a 16-byte load */
    static constexpr int TC = 16 * VEC;      /* tile columns */
};

/* What the tile kernel codes (its SRC argument): src (PLAIN), or src with
 * dbias's 32-row chunk sums (SUMS, BF16 src: below). */
#define RWT_SRC_PLAIN 0
#define RWT_SRC_SUMS 1

/* SUMS: the 32-row chunk sums of dbias in rwt_amax_kernel's order (a
 * column's rows added one by one from 0, in row order), so that
 * rwc_dbias_reduce_kernel gives the bits of kernel 1's partials. On BF16
 * tiles (VEC 8) warp w holds rows 32·(w / 4) .. + 31 of each half m of
 * the tile (a whole chunk) for 32 columns, lane group q = lane / 4 rows
 * 4q .. 4q + 3 of it: the running sums go from group to group by a
 * shuffle, each group adding its 4 rows in order, and group 7 writes the
 * chunk's sums (sums [rows / 32, cols]). */
template <int BF16>
static __device__ __forceinline__ void rwtt_chunk_sums(const uint4 (&raw)[4], float *sums, int64_t chunk,
                                                       int64_t col, int64_t cols)
{
    static_assert(BF16, "chunk sums on BF16 tiles: a warp holds one chunk");
    const int q = (threadIdx.x & 31) >> 2;
    float run[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) run[j] = 0.0f;
#pragma unroll
    for (int step = 0; step < 8; ++step)
#pragma unroll
        for (int j = 0; j < 8; ++j) { /* one column at a time: no array of incoming sums held */
            const float in = __shfl_up_sync(0xFFFFFFFFu, run[j], 4);
            if (q == step) {
                float t = step == 0 ? 0.0f : in;
#pragma unroll
                for (int r = 0; r < 4; ++r) { /* element j of row r: BF16 half j % 2 of word j / 2 */
                    const uint32_t w[4] = {raw[r].x, raw[r].y, raw[r].z, raw[r].w};
                    t += __uint_as_float(j % 2 ? w[j / 2] & 0xFFFF0000u : w[j / 2] << 16);
                }
                run[j] = t;
            }
        }
    if (q == 7) {
        float4 *dst = (float4 *)(sums + chunk * cols + col);
        dst[0] = make_float4(run[0], run[1], run[2], run[3]);
        dst[1] = make_float4(run[4], run[5], run[6], run[7]);
    }
}

/* Blocks an SM (launch bounds): 4 (64 registers); 3 (80) for SUMS, whose
 * running sums spilled 180 bytes at 64. */
static __host__ __device__ constexpr int rwtt_blocks(int src) { return src == RWT_SRC_PLAIN ? 4 : 3; }

template <int BF16, int E5M2, int SRC>
static __global__ void __launch_bounds__(RW_THREADS, rwtt_blocks(SRC))
    rwt_codes_tile_kernel(f8i_rowwise_cast_args p, int back, rwt_fin fin, float *sums)
{
    constexpr int VEC = rwtt_shape<BF16>::VEC, TC = rwtt_shape<BF16>::TC, LX = 32 / VEC, PARTS = RWTT_ROWS / 16;
    __shared__ uint32_t tile_t[TC][RWTT_WORDS];
    if (noop_set(p.noop)) return;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int tx = (warp % (16 / LX)) * LX + lane % LX, ty = (warp / (16 / LX)) * VEC + lane / LX;
    int64_t tile, stripe;
    rwt_block(back != 0, tile, stripe);
    const int64_t row0 = tile * RWTT_ROWS, col0 = stripe * TC;
    const int cols = (int)p.cols, rows = (int)p.rows;
    const char *src = (const char *)p.src + ((row0 + ty * 4) * cols + col0 + tx * VEC) * (BF16 ? 2 : 4);
    uint4 raw[2][4];
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int r = 0; r < 4; ++r)
            raw[m][r] = *(const uint4 *)(src + (m * (RWTT_ROWS / 2) + r) * cols * (BF16 ? 2 : 4));
    float s[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j)
        s[j] = f8i_current_scale(fin.amaxes[col0 + tx * VEC + j], 1.0f, p.scaled_max, p.pow2);
    const bool count = p.out == NULL && p.stats != NULL; /* uniform */
    unsigned sat = 0, flushed = 0;
#pragma unroll
    for (int m = 0; m < 2; ++m) {
        uint32_t code[4][VEC / 4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const uint32_t w[4] = {raw[m][r].x, raw[m][r].y, raw[m][r].z, raw[m][r].w};
            float v[VEC];
            decode16<BF16>(w, v);
#pragma unroll
            for (int k = 0; k < VEC / 4; ++k)
                code[r][k] = fp8x2<E5M2>(v[4 * k] * s[4 * k], v[4 * k + 1] * s[4 * k + 1]) |
                             (fp8x2<E5M2>(v[4 * k + 2] * s[4 * k + 2], v[4 * k + 3] * s[4 * k + 3]) << 16);
            if (count)
#pragma unroll
                for (int j = 0; j < VEC; ++j) code_stats<E5M2>(v[j], s[j], (code[r][j / 4] >> (8 * (j % 4))) & 0xFFu, sat, flushed);
        }
        park_codes_t<VEC>(code, tile_t, tx * VEC, m * (RWTT_ROWS / 8) + ty);
        if constexpr (SRC == RWT_SRC_SUMS)
            rwtt_chunk_sums<BF16>(raw[m], sums, row0 / RWT_WARP_ROWS + 2 * m + warp / 4, col0 + tx * VEC, p.cols);
    }
    __syncthreads();
    uint8_t *const dst = p.out_t + col0 * p.rows + row0;
#pragma unroll
    for (int k = 0; k < TC * PARTS / RW_THREADS; ++k) {
        const int q = tid + k * RW_THREADS, c = q / PARTS, part = q % PARTS;
        const uint32_t w[4] = {tile_t[c][part * 4], tile_t[c][part * 4 + 1], tile_t[c][part * 4 + 2],
                               tile_t[c][part * 4 + 3]};
        store_bytes<16>(dst + (c * rows + part * 16), w, 16);
    }
    if (count) block_stats_atomic<RW_THREADS>(sat, flushed, (unsigned long long *)p.stats, p.rows * p.cols,
                                                blockIdx.x == 0 && blockIdx.y == 0);
    if (fin.tickets != NULL && rwt_last_block(fin, stripe, gridDim.x) && ty == 0)
#pragma unroll
        for (int j = 0; j < VEC; ++j) rwt_finish_col(p, fin, col0 + tx * VEC + j, s[j]);
}

/* Whether rwt_codes_tile_kernel takes a: whole tiles, 16-byte loads of src
 * and stores of out_t, offsets inside a tile in 32 bits, the grid's y. */
static int rwtt_fits(const f8i_rowwise_cast_args *a)
{
    const int bf16 = a->src_dtype == F8_DTYPE_BF16, tc = bf16 ? rwtt_shape<1>::TC : rwtt_shape<0>::TC;
    return a->rows % RWTT_ROWS == 0 && a->cols % tc == 0 && a->rows <= RWTT_MAX && a->cols <= RWTT_MAX &&
           a->cols / tc <= RWT_MAX_STRIPES &&
           access_width(a->src, a->cols * (bf16 ? 2 : 4), 16) == 16 && access_width(a->out_t, a->rows, 16) == 16;
}

#endif /* F8_CUDA_ROWWISE_CODES_TILE_CUH */
