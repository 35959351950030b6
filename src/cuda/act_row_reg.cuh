/*
 * act_row_reg.cuh — act_row_kernel's rows held in registers
 * (act_row_reg_kernel): a part of act_kernels.cuh, included by it after
 * act_row_kernel.cuh, whose helpers it uses (row_load, row_eval, row_codes,
 * cmax_*), not on its own.
 *
 * act_row_kernel walks a row twice, a piece at a time: its loop stores u
 * between one piece's load and the next, so a thread has one 16-byte load
 * in flight, and its second pass reads u back from hp (or computes it
 * again). On rows of up to ACT_THREADS · ACT_ROW_PER pieces (8192 columns)
 * with BF16 x, dy and hp (the trainers' case), this kernel issues all of a
 * thread's loads of a row before it uses the first (and, but for the gated
 * backward, the next row's while it works on this one), keeps u (BF16 bits,
 * two to a word) in registers through the row's max, and writes the codes
 * from them: the same values, maxima, scales and codes, bit for bit.
 */
#ifndef F8_CUDA_ACT_ROW_REG_CUH
#define F8_CUDA_ACT_ROW_REG_CUH

#define ACT_ROW_PER 4 /* pieces of a row a thread holds: rows of up to 4 · 256 · 8 columns */

/* Blocks an SM (its launch bounds and grid): registers for a piece's words
 * and its u grow with the gated x's b half and the backward's dy. */
static __host__ __device__ constexpr int act_row_reg_blocks(int gated, int bwd)
{
    return gated || bwd ? 2 : 3;
}

static __host__ __device__ constexpr int act_row_reg_fits(int64_t chunks)
{
    return chunks <= (int64_t)ACT_THREADS * ACT_ROW_PER;
}

/* A thread's pieces of row r (those within h). */
template <int ACT, int BWD>
static __device__ __forceinline__ void row_reg_load(const act_row_params &p, int64_t r,
                                                    row_words<ACT, 1, 1, BWD> (&w)[ACT_ROW_PER])
{
#pragma unroll
    for (int i = 0; i < ACT_ROW_PER; ++i) {
        const int64_t c = ((int64_t)threadIdx.x + i * ACT_THREADS) * ACT_VEC;
        if (c < p.h) row_load<ACT, 1, 1, BWD>(p, r, c, c + ACT_VEC <= p.h ? ACT_VEC : (int)(p.h - c), w[i]);
    }
}

/* As act_row_kernel (its grid, block, shared slots, outputs and telemetry),
 * for BF16 x, dy and hp and at most ACT_ROW_PER pieces a thread a row. The
 * row's max is one barrier (two red buffers taken in turn: a thread writes
 * one only after the barrier that follows every thread's read of it). */
template <int ACT, int BWD, int E5M2, int COLMAX>
static __global__ void __launch_bounds__(ACT_THREADS, act_row_reg_blocks(act_gated(ACT), BWD))
    act_row_reg_kernel(act_row_params p)
{
    constexpr int TWO = BWD && act_gated(ACT); /* d_a and d_b per piece */
    constexpr int KW = ACT_VEC / 2;           /* words of a piece's u in BF16 */
    __shared__ float red[2][ACT_THREADS / 32];
    const int64_t cols = TWO ? 2 * p.h : p.h;
    float amax = 0.0f;
    unsigned sat = 0, flushed = 0;
    if constexpr (COLMAX)
        for (int64_t k = threadIdx.x; k < p.chunks; k += ACT_THREADS) {
            cmax_zero<COLMAX, 1>(k * ACT_VEC);
            if (TWO) cmax_zero<COLMAX, 1>((p.chunks + k) * ACT_VEC);
        }
    /* the next row's loads go out before this row is computed and coded, and land meanwhile; not in the gated
     * backward, whose three words a piece would spill (ptxas -v) */
    constexpr int AHEAD = !TWO;
    int par = 0;
    row_words<ACT, 1, 1, BWD> w[ACT_ROW_PER], next[AHEAD ? ACT_ROW_PER : 1];
    if (AHEAD && blockIdx.x < p.rows) row_reg_load<ACT, BWD>(p, blockIdx.x, w);
    for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x, par ^= 1) {
        if constexpr (AHEAD) {
            if (r + gridDim.x < p.rows) row_reg_load<ACT, BWD>(p, r + gridDim.x, next);
        } else {
            row_reg_load<ACT, BWD>(p, r, w);
        }
        uint32_t keep[ACT_ROW_PER][TWO ? 2 * KW : KW];
        float m = 0.0f;
#pragma unroll
        for (int i = 0; i < ACT_ROW_PER; ++i) {
            const int64_t c = ((int64_t)threadIdx.x + i * ACT_THREADS) * ACT_VEC;
            if (c >= p.h) continue;
            const int n = c + ACT_VEC <= p.h ? ACT_VEC : (int)(p.h - c);
            float u[ACT_VEC], ub[ACT_VEC];
            row_eval<ACT, 1, 1, BWD, 1>(w[i], u, ub);
#pragma unroll
            for (int j = 0; j < ACT_VEC; ++j) m = fmaxf(m, fmaxf(fabsf(u[j]), fabsf(ub[j]))); /* zeros past n */
            if constexpr (COLMAX) {
                cmax_piece<COLMAX, 1>(c, u);
                if (TWO) cmax_piece<COLMAX, 1>(p.chunks * ACT_VEC + c, ub);
            }
            if (p.hp != NULL) {
                store_piece<ACT_VEC>(p.hp, 1, r * cols + c, u, n, p.w_hp);
                if (TWO) store_piece<ACT_VEC>(p.hp, 1, r * cols + p.h + c, ub, n, p.w_hp);
            }
#pragma unroll
            for (int j = 0; j < KW; ++j) { /* BF16-exact: the high halves are the values */
                keep[i][j] = (__float_as_uint(u[2 * j]) >> 16) | (__float_as_uint(u[2 * j + 1]) & 0xFFFF0000u);
                if (TWO) keep[i][KW + j] = (__float_as_uint(ub[2 * j]) >> 16) | (__float_as_uint(ub[2 * j + 1]) & 0xFFFF0000u);
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
        if ((threadIdx.x & 31) == 0) red[par][threadIdx.x >> 5] = m;
        __syncthreads();
        m = 0.0f;
#pragma unroll
        for (int v = 0; v < ACT_THREADS / 32; ++v) m = fmaxf(m, red[par][v]);
        const float s = f8i_current_scale(m, 1.0f, p.scaled_max, p.pow2);
        amax = fmaxf(amax, m);
        if (threadIdx.x == 0 && p.scale_inv != NULL) p.scale_inv[r] = 1.0f / s;
#pragma unroll
        for (int i = 0; i < ACT_ROW_PER; ++i) {
            const int64_t c = ((int64_t)threadIdx.x + i * ACT_THREADS) * ACT_VEC;
            if (c >= p.h) continue;
            const int n = c + ACT_VEC <= p.h ? ACT_VEC : (int)(p.h - c);
            float u[ACT_VEC], ub[ACT_VEC];
#pragma unroll
            for (int j = 0; j < KW; ++j) {
                u[2 * j] = __uint_as_float(keep[i][j] << 16), u[2 * j + 1] = __uint_as_float(keep[i][j] & 0xFFFF0000u);
                if (TWO) {
                    ub[2 * j] = __uint_as_float(keep[i][KW + j] << 16);
                    ub[2 * j + 1] = __uint_as_float(keep[i][KW + j] & 0xFFFF0000u);
                }
            }
            row_codes<E5M2>(p, r * cols + c, u, s, n, sat, flushed);
            if (TWO) row_codes<E5M2>(p, r * cols + p.h + c, ub, s, n, sat, flushed);
        }
        if constexpr (AHEAD)
#pragma unroll
            for (int i = 0; i < ACT_ROW_PER; ++i) w[i] = next[i];
    }
    if constexpr (COLMAX) cmax_flush<COLMAX, 1>(p, cols);
    if (p.amax != NULL) block_amax_atomic<ACT_THREADS>(amax, p.amax);
    if (p.stats != NULL) block_stats_atomic<ACT_THREADS>(sat, flushed, p.stats, p.rows * cols, blockIdx.x == 0);
}

#endif /* F8_CUDA_ACT_ROW_REG_CUH */
