/*
 * rowwise_cols.cuh — kernels 1 and 2 of the row-wise cast's 2-D column
 * path: the column amax pass (rwt_amax_kernel, with dbias's tile partials)
 * and the codes pass on any shape (rwt_codes_kernel; whole tiles take
 * rowwise_codes_tile.cuh's kernel). A part of rowwise_cast.cu, included by
 * it after the helpers and constants they use (rwt_load, rwt_block,
 * rwt_local, the RWT_ sizes, rowwise_finish.cuh), not on its own; why the
 * passes are built so: rowwise_cast.cu's design note.
 */
#ifndef F8_CUDA_ROWWISE_COLS_CUH
#define F8_CUDA_ROWWISE_COLS_CUH

#define RWT_BATCH 8 /* rows loaded before the first is used: 8 loads in flight a lane */

/* Rows r0 + b .. r0 + b + 7 of this lane's columns, those below nr (0 past). */
template <int BF16, int VEC>
static __device__ __forceinline__ void rwt_load_batch(const f8i_rowwise_cast_args &p, int64_t r0, int b, int64_t nr,
                                                      int64_t c0, int lane, float (&v)[RWT_BATCH][4])
{
#pragma unroll
    for (int k = 0; k < RWT_BATCH; ++k) {
        if (b + k < nr) {
            rwt_load<BF16, VEC>(p, r0 + b + k, c0, lane, v[k]);
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) v[k][j] = 0.0f;
        }
    }
}

/* Kernel 1: column amaxes (atomicMax of the bits into scale_inv_t, when
 * out_t), dbias partials (partial[tile * cols + c], when dbias) and,
 * without out, the tensor's amax. Grid (ceil(rows / 256), ceil(cols / 128)),
 * block (tile, stripe) from rwt_block(true, ..): from the last tile. */
template <int BF16, int VEC>
static __global__ void __launch_bounds__(RW_THREADS) rwt_amax_kernel(f8i_rowwise_cast_args p, float *partial)
{
    __shared__ float red_m[RW_WARPS][RWT_COLS], red_s[RW_WARPS][RWT_COLS];
    if (noop_set(p.noop)) return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int64_t tile, stripe;
    rwt_block(true, tile, stripe);
    const int64_t c0 = stripe * RWT_COLS, r0 = tile * RWT_ROWS + warp * RWT_WARP_ROWS;
    const int64_t nr = p.rows - r0; /* rows of this warp: min(32, nr), none when nr <= 0 */
    float m[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int b = 0; b < RWT_WARP_ROWS; b += RWT_BATCH) {
        float v[RWT_BATCH][4];
        rwt_load_batch<BF16, VEC>(p, r0, b, nr, c0, lane, v);
#pragma unroll
        for (int k = 0; k < RWT_BATCH; ++k)
#pragma unroll
            for (int j = 0; j < 4; ++j) m[j] = fmaxf(m[j], fabsf(v[k][j])), sum[j] += v[k][j]; /* rows in order; 0 past nr */
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) red_m[warp][rwt_local<VEC>(lane, j)] = m[j], red_s[warp][rwt_local<VEC>(lane, j)] = sum[j];
    __syncthreads();
    if (threadIdx.x < RWT_COLS) {
        const int64_t c = c0 + threadIdx.x;
        float cm = 0.0f, cs = 0.0f;
#pragma unroll
        for (int w = 0; w < RW_WARPS; ++w) cm = fmaxf(cm, red_m[w][threadIdx.x]), cs += red_s[w][threadIdx.x];
        if (c < p.cols && p.out_t != NULL) atomicMax((int *)p.scale_inv_t + c, __float_as_int(cm));
        if (c < p.cols && partial != NULL) partial[tile * p.cols + c] = cs;
    }
    if (p.out == NULL && p.amax != NULL) /* uniform: every thread calls it */
        block_amax_atomic<RW_THREADS>(fmaxf(fmaxf(m[0], m[1]), fmaxf(m[2], m[3])), p.amax);
}

/* The codes kernel's tile of out_t: its 128 rows (src columns) x 256 bytes
 * (src rows), as 16 chunks of 16 bytes a row. Chunk k of row col sits at
 * k ^ rwt_swizzle(col): the 8 lanes of a quarter warp then hit 8 different
 * 16-byte bank groups both when they write one chunk of 8 rows (the codes
 * pass: lane l on row 4l + j or l + 32j, so col's swizzle is l & 7) and when
 * they read 8 chunks of one row (the store pass). 32 KiB. */
#define RWT_CHUNKS (RWT_ROWS / 16)
template <int VEC>
static __device__ __forceinline__ int rwt_swizzle(int col)
{
    return (VEC ? col >> 2 : col) & 7;
}

/* Blocks of 256 threads a multiprocessor the codes kernel is built for: 4
 * (64 registers a thread, 128 KiB of tiles) for BF16; FP32's batch of
 * loads holds twice the registers, so 3 (85). */
#define RWT_CODES_BLOCKS(BF16) ((BF16) ? 4 : 3)

/* Kernel 2: out_t's codes. Block (tile, stripe) from rwt_block(back); lane l of
 * warp w codes columns rwt_local(l, j) of rows tile * 256 + 32w .. + 31 and
 * puts each batch's 8 codes of a column (one 8-byte half chunk) into the
 * shared tile; then thread t writes chunk t & 15 of tile rows t / 16 + 16i,
 * so a warp stores two 256-byte runs of out_t rows. Counts the telemetry
 * when there is no out (count). Same grid as kernel 1; w_t: the access width
 * of out_t's rows (16 at most); back: the walk, from the pass before. */
template <int BF16, int E5M2, int VEC>
static __global__ void __launch_bounds__(RW_THREADS, RWT_CODES_BLOCKS(BF16))
    rwt_codes_kernel(f8i_rowwise_cast_args p, int w_t, int back, rwt_fin fin)
{
    __shared__ uint4 tile_t[RWT_COLS][RWT_CHUNKS];
    if (noop_set(p.noop)) return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int64_t tile, stripe;
    rwt_block(back != 0, tile, stripe);
    const int64_t c0 = stripe * RWT_COLS, rb = tile * RWT_ROWS, r0 = rb + warp * RWT_WARP_ROWS;
    const int64_t nr = p.rows - r0;
    const bool count = p.out == NULL && p.stats != NULL; /* uniform */
    float s[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int64_t c = c0 + rwt_local<VEC>(lane, j);
        s[j] = f8i_current_scale(c < p.cols ? fin.amaxes[c] : 0.0f, 1.0f, p.scaled_max, p.pow2);
    }
    unsigned sat = 0, flushed = 0;
#pragma unroll 1 /* a batch's loads in flight, not all 32 rows' (registers: occupancy) */
    for (int b = 0; b < RWT_WARP_ROWS; b += RWT_BATCH) {
        float v[RWT_BATCH][4];
        rwt_load_batch<BF16, VEC>(p, r0, b, nr, c0, lane, v);
        uint32_t q[4][RWT_BATCH / 4] = {}; /* column j's codes of rows b .. b + 7, byte k row b + k */
#pragma unroll
        for (int k = 0; k < RWT_BATCH; ++k) {
            const int rr = b + k;
            const uint32_t lo = fp8x2<E5M2>(v[k][0] * s[0], v[k][1] * s[1]);
            const uint32_t hi = fp8x2<E5M2>(v[k][2] * s[2], v[k][3] * s[3]);
            const uint32_t code[4] = {lo & 0xFFu, lo >> 8, hi & 0xFFu, hi >> 8};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                q[j][k / 4] |= code[j] << (8 * (k % 4)); /* rows past nr are not stored */
                if (count && rr < nr && c0 + rwt_local<VEC>(lane, j) < p.cols)
                    code_stats<E5M2>(v[k][j], s[j], code[j], sat, flushed);
            }
        }
        static_assert(RWT_BATCH == 8, "a batch's codes of a column are one half chunk");
        const int chunk = (warp * RWT_WARP_ROWS + b) / 16, half = (b / 8) & 1;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int col = rwt_local<VEC>(lane, j);
            ((uint2 *)&tile_t[col][chunk ^ rwt_swizzle<VEC>(col)])[half] = make_uint2(q[j][0], q[j][1]);
        }
    }
    __syncthreads();
    const int k = threadIdx.x & 15;
    const int64_t n = p.rows - rb - 16 * k; /* rows of chunk k inside the matrix */
#pragma unroll
    for (int i = 0; i < RWT_COLS / (RW_THREADS / 16); ++i) {
        const int col = i * (RW_THREADS / 16) + (threadIdx.x >> 4);
        const int64_t c = c0 + col;
        if (n <= 0 || c >= p.cols) continue;
        const uint4 x = tile_t[col][k ^ rwt_swizzle<VEC>(col)];
        const uint32_t w[4] = {x.x, x.y, x.z, x.w};
        uint8_t *dst = p.out_t + c * p.rows + rb + 16 * k;
        if (n >= 16) {
            store_bytes<16>(dst, w, w_t);
        } else {
            for (int e = 0; e < n; ++e) dst[e] = (uint8_t)(w[e / 4] >> (8 * (e % 4)));
        }
    }
    if (count) block_stats_atomic<RW_THREADS>(sat, flushed, (unsigned long long *)p.stats, p.rows * p.cols,
                                                blockIdx.x == 0 && blockIdx.y == 0);
    if (fin.tickets != NULL && rwt_last_block(fin, stripe, gridDim.x) && warp == 0)
#pragma unroll
        for (int j = 0; j < 4; ++j) rwt_finish_col(p, fin, c0 + rwt_local<VEC>(lane, j), s[j]);
}

#endif /* F8_CUDA_ROWWISE_COLS_CUH */
