/*
 * rowwise_reg.cuh — the row pass of the row-wise cast with its rows held in
 * registers (rowwise_reg_kernel): a part of rowwise_cast.cu, included by it
 * after the helpers it uses, not on its own. Why the pass is built so:
 * rowwise_cast.cu's design note.
 *
 * It serves BF16 sources with both orientations asked for (the trainers'
 * case: the attention output, the gradients into the residual and qkv, the
 * weights): rows of RWR_MIN_COLS .. RWR_MAX_COLS columns, 8 | cols, 16-byte
 * rows of src and 8-byte rows of out. Each row lies across tx threads (64,
 * 128 or 256), each thread holding PER 16-byte pieces of it (columns 8(x +
 * tx·i) ..); a block is rwr_threads(PER) / tx row slots of tx threads, each
 * on its own row. A thread loads its pieces of the slot's next row before it
 * works on this one, so two rows' loads of a thread are in flight while one
 * is coded. The row's max comes from the BF16 bits themselves (non-negative
 * BF16 values order as their bits; a NaN half is masked to 0, as fmaxf
 * ignores a NaN), so does each column's, kept in shared memory words only
 * its thread touches (the same columns every row: no atomics, no barrier;
 * in registers they spilled the wider rows) and flushed once a block with
 * one atomicMax a column where the word holds less. The codes are fp8x4 of
 * the values times the row's scale, as rw_rows and rowwise_colmax_kernel
 * write them: the same bits.
 */
#ifndef F8_CUDA_ROWWISE_REG_CUH
#define F8_CUDA_ROWWISE_REG_CUH

#define RWR_MIN_COLS 1024 /* narrower rows leave most of a slot idle: rowwise_colmax_kernel shares blocks */
#define RWR_MAX_COLS 8192 /* 256 threads x 4 pieces x 8 */
#define RWR_MAX_TX 256

/* A block's threads and blocks an SM (its launch bounds and grid) for PER
 * pieces a thread: the registers of two rows' pieces and the column maxima
 * (12 words a piece) without a spill (ptxas -v). */
static __host__ __device__ constexpr int rwr_threads(int per) { return per == 2 ? 512 : 256; }
static __host__ __device__ constexpr int rwr_blocks(int per) { return per == 2 ? 2 : per == 3 ? 4 : 3; }

/* |v| of a word's two BF16 halves as bits, a NaN half 0 (fmaxf's max drops it). */
static __device__ __forceinline__ uint32_t rwr_abs2(uint32_t w)
{
    const uint32_t a = w & 0x7FFF7FFFu;
    return a & ~__vcmpgtu2(a, 0x7F807F80u);
}

/* The row pass for BF16 src with out and out_t (rowwise_cast.cu's reg
 * path). Grid: at most what is resident; block rwr_threads(PER) as NTY =
 * threads / TX slots of TX threads; in round k slot ty of block b codes row
 * (k·gridDim.x + b)·NTY + ty, so the rounds go down the matrix. One barrier
 * a round: the warps' row maxima, in red[round parity] (a slot's warps read
 * theirs after that barrier and write the other buffer next round, so this
 * one is written again only after the next barrier). col_amax (the column
 * maxima, from 0: the ctx's scratch or a zeroed scale_inv_t) gets one
 * atomicMax a column a block. */
template <int PER, int TX, int E5M2>
static __global__ void __launch_bounds__(rwr_threads(PER), rwr_blocks(PER))
    rowwise_reg_kernel(f8i_rowwise_cast_args p, float *col_amax)
{
    constexpr int T = rwr_threads(PER), NTY = T / TX, WX = TX / 32;
    __shared__ uint32_t red[2][T / 32];
    __shared__ uint4 cmax[T * PER]; /* the column maxima, [ty][i][x]: a thread's own words until the end */
    if (noop_set(p.noop)) return;
    const int t = threadIdx.x, x = t % TX, ty = t / TX;
    const int64_t cols = p.cols, step = (int64_t)gridDim.x * NTY;
    const uint4 *src = (const uint4 *)((const uint16_t *)p.src + 8 * x); /* piece i of row r: src[r·cols/8 + TX·i] */
    uint2 *out = (uint2 *)(p.out + 8 * x);
    const int64_t pitch = cols / 8; /* pieces a row */
    bool in[PER]; /* which of this thread's pieces lie in the row */
#pragma unroll
    for (int i = 0; i < PER; ++i) in[i] = x + TX * i < pitch;
    uint4 w[PER], next[PER];
#pragma unroll
    for (int i = 0; i < PER; ++i) cmax[(ty * PER + i) * TX + x] = w[i] = make_uint4(0u, 0u, 0u, 0u);
    float amax = 0.0f;
    unsigned sat = 0, flushed = 0;
    int64_t r = (int64_t)blockIdx.x * NTY + ty;
#pragma unroll
    for (int i = 0; i < PER; ++i)
        if (r < p.rows && in[i]) w[i] = src[r * pitch + TX * i];
    int par = 0;
    for (int64_t r0 = (int64_t)blockIdx.x * NTY; r0 < p.rows; r0 += step, r += step, par ^= 1) { /* uniform */
        const bool live = r < p.rows;
        const bool more = r + step < p.rows;
#pragma unroll
        for (int i = 0; i < PER; ++i)
            if (more && in[i]) next[i] = src[(r + step) * pitch + TX * i];
        uint32_t rm = 0;
#pragma unroll
        for (int i = 0; i < PER; ++i) { /* zeros where the piece or the row is out */
            const uint32_t a0 = rwr_abs2(w[i].x), a1 = rwr_abs2(w[i].y), a2 = rwr_abs2(w[i].z), a3 = rwr_abs2(w[i].w);
            rm = __vmaxu2(rm, __vmaxu2(__vmaxu2(a0, a1), __vmaxu2(a2, a3)));
            uint4 *q = &cmax[(ty * PER + i) * TX + x];
            const uint4 c = *q;
            *q = make_uint4(__vmaxu2(c.x, a0), __vmaxu2(c.y, a1), __vmaxu2(c.z, a2), __vmaxu2(c.w, a3));
        }
        uint32_t mb = max(rm << 16, rm & 0xFFFF0000u); /* the larger half's float bits */
        mb = __reduce_max_sync(0xFFFFFFFFu, mb);
        if ((t & 31) == 0) red[par][t >> 5] = mb;
        __syncthreads();
        mb = 0;
#pragma unroll
        for (int v = 0; v < WX; ++v) mb = max(mb, red[par][ty * WX + v]);
        if (live) {
            const float m = __uint_as_float(mb);
            const float s = f8i_current_scale(m, 1.0f, p.scaled_max, p.pow2);
            amax = fmaxf(amax, m);
            if (x == 0) p.scale_inv[r] = 1.0f / s;
#pragma unroll
            for (int i = 0; i < PER; ++i) {
                if (!in[i]) continue;
                const uint32_t ws[4] = {w[i].x, w[i].y, w[i].z, w[i].w};
                float v[8];
                decode16<1>(ws, v);
                const uint2 code = make_uint2(fp8x4<E5M2>(v, s), fp8x4<E5M2>(v + 4, s));
                out[r * pitch + TX * i] = code;
                for (int j = 0; p.stats != NULL && j < 8; j++)
                    code_stats<E5M2>(v[j], s, ((j < 4 ? code.x : code.y) >> (8 * (j & 3))) & 0xFFu, sat, flushed);
            }
        }
#pragma unroll
        for (int i = 0; i < PER; ++i) w[i] = more && in[i] ? next[i] : make_uint4(0u, 0u, 0u, 0u);
    }
    /* the slots' column maxima into slot 0's, then out: one atomicMax a column (the word only grows, so one
     * already as large makes it moot; read at the L2, where the atomics are done) */
    __syncthreads();
    if (ty == 0)
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            if (!in[i]) continue;
            uint4 m = cmax[i * TX + x];
#pragma unroll
            for (int y = 1; y < NTY; ++y) {
                const uint4 o = cmax[(y * PER + i) * TX + x];
                m = make_uint4(__vmaxu2(m.x, o.x), __vmaxu2(m.y, o.y), __vmaxu2(m.z, o.z), __vmaxu2(m.w, o.w));
            }
            const uint32_t h[4] = {m.x, m.y, m.z, m.w};
            int *q = (int *)col_amax + 8 * (x + TX * i);
            const int4 c0 = __ldcg((const int4 *)q), c1 = __ldcg((const int4 *)q + 1);
            const int have[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const int bits = (int)(j & 1 ? h[j / 2] & 0xFFFF0000u : h[j / 2] << 16);
                if (bits > have[j]) atomicMax(q + j, bits);
            }
        }
    if (p.amax != NULL) block_amax_atomic<T>(amax, p.amax); /* uniform: every thread calls it */
    if (p.stats != NULL) block_stats_atomic<T>(sat, flushed, (unsigned long long *)p.stats, p.rows * p.cols,
                                               blockIdx.x == 0);
}

#endif /* F8_CUDA_ROWWISE_REG_CUH */
