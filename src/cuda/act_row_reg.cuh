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
 * with BF16 x, dy and hp (the trainers' case; the gated forward, slower so
 * on an H100, stays with act_row_kernel), this kernel issues all of a
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

/* max(a, b), NaN if either is (max.NaN; fmaxf returns the other). */
static __device__ __forceinline__ float act_max_nan(float a, float b)
{
    float d;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

/* A piece's values v, unrounded, made u: rounded to BF16 (bits in kw, two
 * a word, low first; v the values again) as row_eval's HPBF16 does, written
 * to hp at element e (n of them), maxed into the column slots at slot
 * (COLMAX) and the row's max m. Without a NaN in the piece (its max.NaN is
 * not NaN) the rounding is cvt.rn.bf16x2 (bf16x2: f8i_bf16_from_float's
 * bits but a NaN's) and the slots' max is on the bits (non-negative BF16
 * values order as their bits); with one, f8i_bf16_from_float and
 * cmax_piece, whose fmaxf ignores NaN as the row's max does. */
template <int COLMAX>
static __device__ __forceinline__ void reg_piece(const act_row_params &p, float (&v)[ACT_VEC],
                                                 uint32_t (&kw)[ACT_VEC / 2], int64_t slot, int64_t e, int n, float &m)
{
    float pm = 0.0f;
#pragma unroll
    for (int j = 0; j < ACT_VEC; ++j) pm = act_max_nan(pm, fabsf(v[j]));
    const bool nan = pm != pm;
#pragma unroll
    for (int k = 0; k < ACT_VEC / 2; ++k)
        kw[k] = nan ? (uint32_t)f8i_bf16_from_float(v[2 * k]) | ((uint32_t)f8i_bf16_from_float(v[2 * k + 1]) << 16)
                    : bf16x2(v[2 * k], v[2 * k + 1]);
    decode_piece<1, ACT_VEC>(kw, v);
#pragma unroll
    for (int j = 0; j < ACT_VEC; ++j) m = fmaxf(m, fabsf(v[j])); /* zeros past n */
    if constexpr (COLMAX) {
        extern __shared__ uint4 act_cmax[];
        if (nan) {
            cmax_piece<COLMAX, 1>(slot, v);
        } else {
            uint4 *q = (uint4 *)((uint16_t *)act_cmax + slot);
            const uint4 c = *q;
            *q = make_uint4(__vmaxu2(c.x, kw[0] & 0x7FFF7FFFu), __vmaxu2(c.y, kw[1] & 0x7FFF7FFFu),
                            __vmaxu2(c.z, kw[2] & 0x7FFF7FFFu), __vmaxu2(c.w, kw[3] & 0x7FFF7FFFu));
        }
    }
    if (p.hp != NULL) {
        if (n == ACT_VEC) {
            store_bytes<2 * ACT_VEC>((uint16_t *)p.hp + e, kw, p.w_hp);
        } else {
#pragma unroll
            for (int j = 0; j < ACT_VEC; ++j)
                if (j < n) ((uint16_t *)p.hp)[e + j] = (uint16_t)(kw[j / 2] >> (16 * (j % 2)));
        }
    }
}

/* The first column of a thread's piece i of a row, and the piece's elements. */
static __device__ __forceinline__ int64_t reg_col(int i) { return ((int64_t)threadIdx.x + i * ACT_THREADS) * ACT_VEC; }
static __device__ __forceinline__ int reg_n(const act_row_params &p, int64_t c)
{
    return c + ACT_VEC <= p.h ? ACT_VEC : (int)(p.h - c);
}

/* A thread's pieces of row r (those within h). */
template <int ACT, int BWD>
static __device__ __forceinline__ void row_reg_load(const act_row_params &p, int64_t r,
                                                    row_words<ACT, 1, 1, BWD> (&w)[ACT_ROW_PER])
{
#pragma unroll
    for (int i = 0; i < ACT_ROW_PER; ++i) {
        const int64_t c = reg_col(i);
        if (c < p.h) row_load<ACT, 1, 1, BWD>(p, r, c, reg_n(p, c), w[i]);
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
        uint32_t keep[ACT_ROW_PER][KW], keepb[TWO ? ACT_ROW_PER : 1][KW]; /* u, ub as BF16 bits */
        float m = 0.0f;
#pragma unroll
        for (int i = 0; i < ACT_ROW_PER; ++i) {
            const int64_t c = reg_col(i);
            if (c >= p.h) continue;
            const int n = reg_n(p, c);
            float u[ACT_VEC], ub[ACT_VEC];
            row_eval<ACT, 1, 1, BWD, 0>(w[i], u, ub); /* unrounded: reg_piece rounds them */
            reg_piece<COLMAX>(p, u, keep[i], c, r * cols + c, n, m);
            if constexpr (TWO) reg_piece<COLMAX>(p, ub, keepb[i], p.chunks * ACT_VEC + c, r * cols + p.h + c, n, m);
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
            const int64_t c = reg_col(i);
            if (c >= p.h) continue;
            const int n = reg_n(p, c);
            float u[ACT_VEC];
            decode_piece<1, ACT_VEC>(keep[i], u);
            row_codes<E5M2>(p, r * cols + c, u, s, n, sat, flushed);
            if constexpr (TWO) {
                decode_piece<1, ACT_VEC>(keepb[i], u);
                row_codes<E5M2>(p, r * cols + p.h + c, u, s, n, sat, flushed);
            }
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
