/*
 * act_row_kernel.cuh — row-wise scaling's cast fused into the activation
 * (act_row_kernel, backend.h's F8I_ROW_FUSED): a part of act_kernels.cuh,
 * included by it after the element helpers and tile sources it uses
 * (act_eval, load_piece, decode_piece, store_piece, act_row_params), not
 * on its own.
 */
#ifndef F8_CUDA_ACT_ROW_KERNEL_CUH
#define F8_CUDA_ACT_ROW_KERNEL_CUH

/* The words of a piece as loaded: x's (a), the gated x's b half, the
 * backward's dy; zeros past the piece's n elements. */
template <int ACT, int XBF16, int DYBF16, int BWD>
struct row_words {
    static constexpr int XW = ACT_VEC * (XBF16 ? 2 : 4) / 4, DW = ACT_VEC * (DYBF16 ? 2 : 4) / 4;
    uint32_t a[XW], b[act_gated(ACT) ? XW : 1], d[BWD ? DW : 1];
};

/* Load piece k (columns c = 8k.. of h) of row r: n elements. */
template <int ACT, int XBF16, int DYBF16, int BWD>
static __device__ __forceinline__ void row_load(const act_row_params &p, int64_t r, int64_t c, int n,
                                                row_words<ACT, XBF16, DYBF16, BWD> &w)
{
    const int64_t xpitch = act_gated(ACT) ? 2 * p.h : p.h;
    load_piece<XBF16, ACT_VEC>(w.a, p.x, r * xpitch + c, n, p.w_x);
    if constexpr (act_gated(ACT)) load_piece<XBF16, ACT_VEC>(w.b, p.x, r * xpitch + p.h + c, n, p.w_x);
    if constexpr (BWD) load_piece<DYBF16, ACT_VEC>(w.d, p.dy, r * p.h + c, n, p.w_dy);
}

/* A loaded piece's values, rounded to the hp dtype: the forward's v, or the
 * backward's d (gated: d_a in u, d_b in ub), with act_fwd_kernel's and
 * act_bwd_rows_kernel's arithmetic, so the values those kernels store. */
template <int ACT, int XBF16, int DYBF16, int BWD, int HPBF16>
static __device__ __forceinline__ void row_eval(const row_words<ACT, XBF16, DYBF16, BWD> &w, float (&u)[ACT_VEC],
                                                float (&ub)[ACT_VEC])
{
    constexpr int GATED = act_gated(ACT);
    float a[ACT_VEC], b[ACT_VEC];
    decode_piece<XBF16, ACT_VEC>(w.a, a);
    if constexpr (GATED) decode_piece<XBF16, ACT_VEC>(w.b, b);
    if constexpr (BWD) {
        float dy[ACT_VEC];
        decode_piece<DYBF16, ACT_VEC>(w.d, dy);
#pragma unroll
        for (int j = 0; j < ACT_VEC; ++j) {
            if constexpr (GATED) {
                float f, g;
                act_eval<ACT>(a[j], &f, &g);
                u[j] = g * b[j] * dy[j];
                ub[j] = f * dy[j];
            } else {
                float g;
                act_eval<ACT>(a[j], NULL, &g);
                u[j] = g * dy[j];
                ub[j] = 0.0f;
            }
        }
    } else {
#pragma unroll
        for (int j = 0; j < ACT_VEC; ++j) {
            act_eval<ACT>(a[j], &u[j], NULL);
            if constexpr (GATED) u[j] = u[j] * b[j];
            ub[j] = 0.0f;
        }
    }
    if (HPBF16)
#pragma unroll
        for (int j = 0; j < ACT_VEC; ++j) {
            u[j] = f8i_bf16_to_float(f8i_bf16_from_float(u[j]));
            ub[j] = f8i_bf16_to_float(f8i_bf16_from_float(ub[j]));
        }
}

/* Values of piece k (columns 8k.. of h) of row r (row_load, then row_eval). n: the piece's elements. */
template <int ACT, int XBF16, int DYBF16, int BWD, int HPBF16>
static __device__ __forceinline__ void row_piece(const act_row_params &p, int64_t r, int64_t c, int n,
                                                 float (&u)[ACT_VEC], float (&ub)[ACT_VEC])
{
    row_words<ACT, XBF16, DYBF16, BWD> w;
    row_load<ACT, XBF16, DYBF16, BWD>(p, r, c, n, w);
    row_eval<ACT, XBF16, DYBF16, BWD, HPBF16>(w, u, ub);
}

/* The codes of n values u · s at element i of out, and their telemetry. */
template <int E5M2>
static __device__ __forceinline__ void row_codes(const act_row_params &p, int64_t i, const float (&u)[ACT_VEC],
                                                 float s, int n, unsigned &sat, unsigned &flushed)
{
    store_codes<E5M2, ACT_VEC>(p.out, i, u, s, n, p.w_out);
    if (p.stats != NULL)
#pragma unroll
        for (int j = 0; j < ACT_VEC; ++j)
            if (j < n) code_stats<E5M2>(u[j], s, fp8x2<E5M2>(u[j] * s, 0.0f) & 0xFFu, sat, flushed);
}

/* COLMAX (col_amax, F8I_ROW_FUSED): the block's column maxima of u in
 * dynamic shared memory, ACT_VEC slots a piece: piece k's columns 8k.. at
 * slot 8k, the gated backward's d_b half after all chunks·8 of d_a's. A
 * slot holds BF16 bits where u is BF16 (HPBF16: its max is one of its
 * values, so exact; half the bytes) or FP32. Only the thread that owns the
 * piece reads or writes its slots (so no atomics, no barrier) until
 * cmax_flush. Each does nothing without COLMAX. */
template <int COLMAX, int HPBF16>
static __device__ __forceinline__ void cmax_zero(int64_t slot)
{
    if constexpr (COLMAX) {
        extern __shared__ uint4 act_cmax[];
        if (HPBF16) {
            ((uint4 *)((uint16_t *)act_cmax + slot))[0] = make_uint4(0u, 0u, 0u, 0u);
        } else {
            float4 *q = (float4 *)((float *)act_cmax + slot);
            q[0] = make_float4(0.0f, 0.0f, 0.0f, 0.0f), q[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }
}

/* slot .. slot + 7 = max(themselves, |u|) (fmaxf: NaN ignored, as the cast's amax). */
template <int COLMAX, int HPBF16>
static __device__ __forceinline__ void cmax_piece(int64_t slot, const float (&u)[ACT_VEC])
{
    static_assert(ACT_VEC == 8, "a piece's slots are one 16-byte BF16 word or two FP32 ones");
    if constexpr (COLMAX) {
        extern __shared__ uint4 act_cmax[];
        if (HPBF16) {
            uint4 *q = (uint4 *)((uint16_t *)act_cmax + slot);
            const uint4 w = *q;
            uint32_t x[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) { /* u is BF16-exact: so is the max, and >> 16 loses nothing */
                const float lo = fmaxf(__uint_as_float(x[i] << 16), fabsf(u[2 * i]));
                const float hi = fmaxf(__uint_as_float(x[i] & 0xFFFF0000u), fabsf(u[2 * i + 1]));
                x[i] = (__float_as_uint(lo) >> 16) | (__float_as_uint(hi) & 0xFFFF0000u);
            }
            *q = make_uint4(x[0], x[1], x[2], x[3]);
        } else {
            float4 *q = (float4 *)((float *)act_cmax + slot);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float4 m = q[h];
                m.x = fmaxf(m.x, fabsf(u[4 * h])), m.y = fmaxf(m.y, fabsf(u[4 * h + 1]));
                m.z = fmaxf(m.z, fabsf(u[4 * h + 2])), m.w = fmaxf(m.w, fabsf(u[4 * h + 3]));
                q[h] = m;
            }
        }
    }
}

/* The block's maxima out (every thread, after the last row): column c of
 * cols (h, or 2h: d_a's then d_b's) with one atomicMax of its bits into
 * col_amax[c] (zeroed before the launch; non-negative floats order as their
 * bits), skipped where col_amax already holds as much: the word only grows,
 * so a value read from it (L2, where the atomics are done: __ldcg) that is
 * not smaller makes the atomic moot. The loads are independent, so several
 * are in flight. */
template <int COLMAX, int HPBF16>
static __device__ __forceinline__ void cmax_flush(const act_row_params &p, int64_t cols)
{
    if constexpr (COLMAX) {
        extern __shared__ uint4 act_cmax[];
        __syncthreads(); /* every owner's slots final */
        const int64_t half = p.chunks * ACT_VEC; /* the d_b half's first slot */
#pragma unroll 4
        for (int64_t c = threadIdx.x; c < cols; c += ACT_THREADS) {
            const int64_t e = c < p.h ? c : half + (c - p.h);
            const float m = HPBF16 ? __uint_as_float((uint32_t)((const uint16_t *)act_cmax)[e] << 16)
                                   : ((const float *)act_cmax)[e];
            const int bits = __float_as_int(m);
            if (bits > __ldcg((const int *)p.col_amax + c)) atomicMax((int *)p.col_amax + c, bits);
        }
    }
}

/* Row-wise scaling fused into the activation (backend.h's F8I_ROW_FUSED):
 * forward (BWD 0) v = act(x), or backward d. Grid: rows (at most what is
 * resident; a grid-stride loop over more), block ACT_THREADS: a block owns
 * a row at a time, thread t its pieces t, t + ACT_THREADS, ... (columns 8k..
 * of h; the gated backward's d_b at h + 8k..). Pass 1: u (row_piece), its
 * max |u| and, where asked, u into hp; the block's max (warp shuffles, then
 * the warps through shared memory: exact in any order) gives the row's
 * scale (f8i_current_scale, as the row-wise cast). Pass 2: u again (read
 * back from hp, which this thread wrote, or recomputed: the same bits) and
 * its codes. Thread 0 writes the row's scale_inv; each block adds its amax
 * and telemetry with one atomic. COLMAX (col_amax set): pass 1 also takes
 * each column's max |u| over the block's rows in its shared slots (cmax_*),
 * out with one atomic a column at the block's end; dynamic shared memory
 * chunks·8 (x2 for the gated backward) slots of 2 (HPBF16) or 4 bytes; its
 * launch bounds keep act_row_cmax_blocks an SM resident, so a grid of
 * that many (fewer where the slots fill the shared memory) is what runs at
 * once. Without COLMAX no minimum (0: none given), the code it always was. */
template <int ACT, int XBF16, int DYBF16, int BWD, int HPBF16, int E5M2, int COLMAX>
static __global__ void __launch_bounds__(ACT_THREADS, COLMAX ? act_row_cmax_blocks(BWD && act_gated(ACT)) : 0)
    act_row_kernel(act_row_params p)
{
    constexpr int TWO = BWD && act_gated(ACT); /* d_a and d_b per piece */
    __shared__ float red[ACT_THREADS / 32];
    const int64_t cols = TWO ? 2 * p.h : p.h;
    float amax = 0.0f;
    unsigned sat = 0, flushed = 0;
    if constexpr (COLMAX)
        for (int64_t k = threadIdx.x; k < p.chunks; k += ACT_THREADS) {
            cmax_zero<COLMAX, HPBF16>(k * ACT_VEC);
            if (TWO) cmax_zero<COLMAX, HPBF16>((p.chunks + k) * ACT_VEC);
        }
    for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
        float m = 0.0f;
        for (int64_t k = threadIdx.x; k < p.chunks; k += ACT_THREADS) {
            const int64_t c = k * ACT_VEC;
            const int n = c + ACT_VEC <= p.h ? ACT_VEC : (int)(p.h - c);
            float u[ACT_VEC], ub[ACT_VEC];
            row_piece<ACT, XBF16, DYBF16, BWD, HPBF16>(p, r, c, n, u, ub);
#pragma unroll
            for (int j = 0; j < ACT_VEC; ++j) m = fmaxf(m, fmaxf(fabsf(u[j]), fabsf(ub[j]))); /* zeros past n */
            if constexpr (COLMAX) {
                cmax_piece<COLMAX, HPBF16>(c, u); /* slots past h are never flushed */
                if (TWO) cmax_piece<COLMAX, HPBF16>(p.chunks * ACT_VEC + c, ub);
            }
            if (p.hp != NULL) {
                store_piece<ACT_VEC>(p.hp, HPBF16, r * cols + c, u, n, p.w_hp);
                if (TWO) store_piece<ACT_VEC>(p.hp, HPBF16, r * cols + p.h + c, ub, n, p.w_hp);
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
        __syncthreads();
        m = 0.0f;
#pragma unroll
        for (int w = 0; w < ACT_THREADS / 32; ++w) m = fmaxf(m, red[w]);
        __syncthreads(); /* red is written again by the next row */
        const float s = f8i_current_scale(m, 1.0f, p.scaled_max, p.pow2);
        amax = fmaxf(amax, m);
        if (threadIdx.x == 0 && p.scale_inv != NULL) p.scale_inv[r] = 1.0f / s;
        for (int64_t k = threadIdx.x; k < p.chunks; k += ACT_THREADS) {
            const int64_t c = k * ACT_VEC;
            const int n = c + ACT_VEC <= p.h ? ACT_VEC : (int)(p.h - c);
            float u[ACT_VEC], ub[ACT_VEC];
            if (p.hp != NULL) {
                uint32_t w[ACT_VEC * (HPBF16 ? 2 : 4) / 4];
                load_piece<HPBF16, ACT_VEC>(w, p.hp, r * cols + c, n, p.w_hp);
                decode_piece<HPBF16, ACT_VEC>(w, u);
                if (TWO) {
                    load_piece<HPBF16, ACT_VEC>(w, p.hp, r * cols + p.h + c, n, p.w_hp);
                    decode_piece<HPBF16, ACT_VEC>(w, ub);
                }
            } else {
                row_piece<ACT, XBF16, DYBF16, BWD, HPBF16>(p, r, c, n, u, ub);
            }
            row_codes<E5M2>(p, r * cols + c, u, s, n, sat, flushed);
            if (TWO) row_codes<E5M2>(p, r * cols + p.h + c, ub, s, n, sat, flushed);
        }
    }
    if constexpr (COLMAX) cmax_flush<COLMAX, HPBF16>(p, cols);
    if (p.amax != NULL) block_amax_atomic<ACT_THREADS>(amax, p.amax);
    if (p.stats != NULL) block_stats_atomic<ACT_THREADS>(sat, flushed, p.stats, p.rows * cols, blockIdx.x == 0);
}

#endif /* F8_CUDA_ACT_ROW_KERNEL_CUH */
