/*
 * act_kernels.cuh — the fused modules' activations (f8i_act_fwd_args and
 * f8i_act_bwd_args in backend.h): GELU (tanh form), ReLU, QGELU, SReLU and the
 * gated GEGLU, REGLU, SwiGLU, forward and backward, with FP8 outputs fused.
 *
 * Design note. Four kernels, all templated on the activation so each formula
 * compiles into its own straight-line code:
 *  - act_fwd_kernel: v = act(x) (or act(a)·b) streamed row piece by row
 *    piece, ACT_VEC outputs per piece (16-byte loads; a plain activation's
 *    thread has ACT_UNROLL pieces in flight, a gated one's two loads a
 *    piece), stored as FP32/BF16 or as FP8 codes with amax. Its grid is
 *    what is resident at once (ACT_FWD_BLOCKS per SM, fixed by its launch
 *    bounds): a grid-stride loop over more blocks than fit runs a partial
 *    second wave.
 *  - cast_tile.cuh's cast_tile_kernel with act_fwd_src as its values: the
 *    forward when the transposed codes are asked for too (fc2's wgrad
 *    operand, written here so the backward needs no transpose of its own:
 *    one read of x, the codes written twice instead of read back and
 *    rewritten), with act_fwd_kernel's arithmetic, so the same codes.
 *  - act_bwd_rows_kernel: the same walk for the backward when neither the
 *    transposed codes nor dbias are asked for: d to dx and/or FP8 codes.
 *  - cast_tile.cuh's cast_tile_kernel with act_bwd_src as its values: the
 *    fused dact + cast + transpose + dbias of TE's LayerNormMLP backward, one
 *    read of x and dy, d computed in registers as the tile is loaded and never
 *    stored unless dx is asked for. d's column c needs, for gated activations,
 *    a = x[r, c mod h], dy[r, c mod h] and (c < h) b = x[r, h + c]: a thread's
 *    VEC columns lie in one half (vector loads) unless they straddle h or the
 *    edge (element loads).
 *  - act_row_kernel: row-wise scaling's cast fused (backend.h's
 *    F8I_ROW_FUSED), forward or backward: a block per row, whose max |u|
 *    sets the row's scale before its codes are written; with col_amax,
 *    its COLMAX instances (the same code and one more step) also take
 *    each column's max over the block's rows (in shared memory, out with
 *    one atomic a column a block), which the column-wise cast after then
 *    need not measure.
 * Both tile sources also have a FULL kernel (cast_tile.cuh's design note)
 * for BF16 x, the dtype training uses (dy BF16 or FP32): whole tiles, widest
 * loads, no dx; it is what the layer runs, the generic one the rest.
 * The plain activations treat x as one flat row (rows = 1, h = rows·cols), the
 * gated ones walk (row, piece) with h = cols; a block is a power-of-two number
 * of threads across a row times the rest down, so narrow rows waste no lanes.
 * FP8 codes come from the same cvt as the cast (fp8x4 on v·scale), and the
 * backward's codes, amax and dbias are those of the FP32 d, as the CPU oracle
 * (cpu/act.c: it casts its FP32 d) does. Math is FP32; the exponentials and
 * reciprocals of GELU, SiLU and QGELU run on the special-function unit
 * (act_eval says how and why), so values differ from the oracle's libm
 * formulas in the last few bits: a tolerance, as the contract allows.
 *
 * The kernels and their per-activation launch code live in this header
 * (the tile sources in act_tile_src.cuh, act_row_kernel in
 * act_row_kernel.cuh, both included by it);
 * act_gelu.cu, act_silu.cu, act_relu.cu and act_srelu.cu each instantiate
 * them for one or two activations (about 100 kernels an activation), so the seven
 * compile in parallel (as one file they took three minutes); act.cu holds
 * the backend entry points, which fill an act_job and hand it to the right
 * file's runner. Only those files include this.
 */
#ifndef F8_CUDA_ACT_KERNELS_CUH
#define F8_CUDA_ACT_KERNELS_CUH

#include <stdint.h>

#include "cast_tile.cuh"

#define ACT_THREADS 256
#define ACT_VEC 8           /* row elements a rows-kernel thread handles per step */
#define ACT_MAX_BX_LOG2 8   /* at most ACT_THREADS threads across a row */
#define ACT_UNROLL 2        /* pieces a plain forward thread loads before using the first */
#define ACT_FWD_BLOCKS 5    /* forward blocks per SM: its launch bounds (<= 48 registers) and grid */

#define GELU_K 0.79788456f  /* sqrt(2/pi), as f8.h writes it */
#define GELU_C 0.044715f
#define QGELU_K 1.702f

static_assert((1 << ACT_MAX_BX_LOG2) == ACT_THREADS, "a block may lie along one row");

/* act_row_kernel's column maxima (COLMAX): at most ACT_ROW_CMAX_MAX bytes of
 * dynamic shared memory a block (wider rows take the column amax pass after
 * the kernel instead); its blocks an SM are act_row_cmax_blocks, or as many
 * as ACT_SMEM_SM holds with ACT_SMEM_BLOCK more each (the reserved 1 KiB
 * and the static arrays) where fewer. */
#define ACT_ROW_CMAX_MAX (64 * 1024)
/* COLMAX blocks an SM, its launch bounds: 6 (40 registers), 5 (48) for the
 * gated backward, whose pieces hold d_a and d_b (40 spilled) */
static __host__ __device__ constexpr int act_row_cmax_blocks(int two) { return two ? 5 : 6; }
#define ACT_SMEM_SM (228 * 1024) /* sm_90's shared memory an SM */
#define ACT_SMEM_BLOCK 2048

/* Bytes of those maxima: chunks·ACT_VEC slots (twice for the gated
 * backward's d_a and d_b) of BF16 bits (hp BF16) or FP32. */
static inline size_t act_row_cmax_bytes(int64_t chunks, int two, int hp_bf16)
{
    return (size_t)chunks * ACT_VEC * (two ? 2u : 1u) * (hp_bf16 ? 2u : 4u);
}

static __host__ __device__ constexpr int act_gated(int act)
{
    return act == F8_ACT_GEGLU || act == F8_ACT_REGLU || act == F8_ACT_SWIGLU;
}

/* The walk over (row, piece) shared by the two rows kernels. */
typedef struct act_rows_params {
    const void *x;      /* (rows, gated ? 2h : h) FP32/BF16 */
    const void *dy;     /* backward: (rows, h) FP32/BF16 */
    int64_t rows, h;    /* h: columns of v and dy */
    int64_t chunks;     /* pieces of ACT_VEC per row: ceil(h / ACT_VEC) */
    void *y;            /* forward: v (rows, h) in the y dtype; backward: dx (rows, cols_in) or NULL */
    int y_bf16;         /* backward: dx is BF16 */
    uint8_t *out;       /* backward: codes of d (rows, cols_in) or NULL */
    const float *scale; /* or NULL when no codes are written (then 1) */
    float *amax;        /* or NULL */
    float *scale_inv;   /* or NULL */
    int w_x, w_dy, w_y, w_out; /* access widths (bytes) */
    int bx_log2;        /* a block: (ACT_THREADS >> bx_log2) rows of (1 << bx_log2) threads */
} act_rows_params;

/* The row-wise fused kernel's (act_row_kernel): backend.h's F8I_ROW_FUSED
 * for the forward's v or the backward's d. cols: h (forward, and the plain
 * backward) or 2h (the gated backward: d_a then d_b). */
typedef struct act_row_params {
    const void *x;      /* (rows, gated ? 2h : h) FP32/BF16 */
    const void *dy;     /* backward: (rows, h) FP32/BF16 */
    int64_t rows, h;
    int64_t chunks;     /* pieces of ACT_VEC per row of h: ceil(h / ACT_VEC) */
    void *hp;           /* u (rows, cols) in the hp dtype (forward y_hp, backward dx), or NULL */
    int hp_bf16;
    uint8_t *out;       /* codes (rows, cols) */
    float *scale_inv;   /* (rows) or NULL */
    float *amax;        /* or NULL */
    unsigned long long *stats; /* telemetry [3] or NULL */
    float scaled_max;
    int pow2;
    int w_x, w_dy, w_hp, w_out; /* access widths (bytes) */
    float *col_amax;    /* (cols) max |u| of each column, zeroed before the launch, or NULL */
} act_row_params;

/* ------------------------------------------------------------------------ */
/* Device helpers                                                            */
/* ------------------------------------------------------------------------ */

/* 2^z and 1/y on the special-function unit: ex2.approx (2 ulp) and
 * rcp.approx (1 ulp), both flushing subnormal results to 0; 2^z is +inf
 * for large z and 1/inf is 0, which the formulas below rely on. */
static __device__ __forceinline__ float exp2_sfu(float z)
{
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(z));
    return r;
}

static __device__ __forceinline__ float rcp_sfu(float y)
{
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(y));
    return r;
}

#define LOG2E 1.44269504f

/* σ(a·x) = 1 / (1 + 2^(-a·log2(e)·x)), nl = -a·log2(e). */
static __device__ __forceinline__ float sigmoid_scaled(float x, float nl) { return rcp_sfu(1.0f + exp2_sfu(nl * x)); }

/* f = act(x) and/or df = act'(x) (pass NULL for the one not wanted; the gated
 * ones: the function applied to a). With t = tanh(u), u = k(x + c·x³):
 *   gelu  = 0.5x(1 + t)          gelu'  = 0.5(1 + t) + 0.5x(1 - t²)·k(1 + 3c·x²)
 *   relu  = max(x, 0)            relu'  = [x > 0]            (0 at the kink)
 *   silu  = x·s, s = σ(x)        silu'  = s + x·s(1 - s)
 *   qgelu = x·s, s = σ(1.702x)   qgelu' = s + 1.702x·s(1 - s)
 *   srelu = max(x, 0)²           srelu' = 2·max(x, 0)
 * tanh(u) for GELU is 2σ(2u) - 1, σ(a) = 1/(1 + 2^(-a·log2(e))), on the
 * special-function unit (exp2_sfu, rcp_sfu) instead of tanhf, whose
 * polynomial and IEEE steps ran the GELU forward at 56% of copy bandwidth,
 * bound by its arithmetic; σ is within a few ulps. u is computed exactly as
 * the CPU oracle does, and t, rounded to FP32 like any tanhf, then goes
 * through the oracle's own formulas: where t → -1 the oracle's 1 + t cancels
 * and is quantised to steps of 2^-24, and only the same FP32 t reproduces
 * that (an exact x·σ(2u) disagreed with it in 3% of BF16 codes; matching
 * costs the GELU forward 69% of copy bandwidth against 83%). SiLU and
 * QGELU use σ directly, as the oracle does (1/(1 + expf(-x))). For large
 * negative x, 2^z overflows to inf and 1/(1 + inf) = 0, as libm's forms give.
 * Every act(0) is 0, so the zeros padding a piece add nothing. */
template <int ACT>
static __device__ __forceinline__ void act_eval(float x, float *f, float *df)
{
    if constexpr (ACT == F8_ACT_GELU || ACT == F8_ACT_GEGLU) {
        const float x2 = x * x;
        const float u = GELU_K * (x + GELU_C * (x2 * x));
        const float t = __fmaf_rn(2.0f, sigmoid_scaled(u, -2.0f * LOG2E), -1.0f); /* 2σ(2u) - 1, one rounding */
        if (f) *f = 0.5f * x * (1.0f + t);
        /* 0.5(1 + t) as one fma: halving is exact and commutes with the
         * rounding, so the bits are those of 0.5f * (1.0f + t) (checked for
         * every FP32 t), one instruction fewer. */
        if (df) *df = __fmaf_rn(0.5f, t, 0.5f) + 0.5f * x * (1.0f - t * t) * (GELU_K * (1.0f + 3.0f * GELU_C * x2));
    } else if constexpr (ACT == F8_ACT_RELU || ACT == F8_ACT_REGLU) {
        if (f) *f = x > 0.0f ? x : 0.0f;
        if (df) *df = x > 0.0f ? 1.0f : 0.0f;
    } else if constexpr (ACT == F8_ACT_SWIGLU) {
        const float s = sigmoid_scaled(x, -LOG2E);
        if (f) *f = x * s;
        if (df) *df = s + x * s * (1.0f - s);
    } else if constexpr (ACT == F8_ACT_QGELU) {
        const float s = sigmoid_scaled(x, -QGELU_K * LOG2E);
        if (f) *f = x * s;
        if (df) *df = s + QGELU_K * x * s * (1.0f - s);
    } else {
        static_assert(ACT == F8_ACT_SRELU, "an f8_activation");
        const float p = x > 0.0f ? x : 0.0f;
        if (f) *f = p * p;
        if (df) *df = x > 0.0f ? 2.0f * x : 0.0f;
    }
}

/* Element j of a piece of words: FP32 bits, or BF16 halves (low first). */
template <int BF16>
static __device__ __forceinline__ void put_elem(uint32_t *w, int j, const void *base, int64_t i)
{
    if constexpr (BF16)
        w[j / 2] |= (uint32_t)((const uint16_t *)base)[i] << (16 * (j % 2));
    else
        w[j] = __float_as_uint(((const float *)base)[i]);
}

/* N elements from element i of base: one access of width wb when n == N,
 * else the first n one by one and zeros after. */
template <int BF16, int N>
static __device__ __forceinline__ void load_piece(uint32_t (&w)[N * (BF16 ? 2 : 4) / 4], const void *base,
                                                  int64_t i, int n, int wb)
{
    constexpr int ES = BF16 ? 2 : 4;
    if (n == N) {
        load_bytes<N * ES>(w, (const char *)base + i * ES, wb);
        return;
    }
#pragma unroll
    for (int k = 0; k < N * ES / 4; ++k) w[k] = 0;
#pragma unroll
    for (int j = 0; j < N; ++j)
        if (j < n) put_elem<BF16>(w, j, base, i + j);
}

template <int BF16, int N>
static __device__ __forceinline__ void decode_piece(const uint32_t (&w)[N * (BF16 ? 2 : 4) / 4], float (&v)[N])
{
#pragma unroll
    for (int j = 0; j < N; ++j)
        v[j] = BF16 ? __uint_as_float(j % 2 ? w[j / 2] & 0xFFFF0000u : w[j / 2] << 16) : __uint_as_float(w[j]);
}

/* v[0..n) to base[i..] as FP32 or BF16 (RNE): one access of width wb when n == N. */
template <int N>
static __device__ __forceinline__ void store_piece(void *base, int bf16, int64_t i, const float (&v)[N], int n,
                                                   int wb)
{
    if (bf16) {
        uint16_t *d = (uint16_t *)base + i;
        if (n == N) {
            uint32_t w[N / 2];
#pragma unroll
            for (int k = 0; k < N / 2; ++k)
                w[k] = (uint32_t)f8i_bf16_from_float(v[2 * k]) | ((uint32_t)f8i_bf16_from_float(v[2 * k + 1]) << 16);
            store_bytes<N * 2>(d, w, wb);
        } else {
#pragma unroll
            for (int j = 0; j < N; ++j)
                if (j < n) d[j] = f8i_bf16_from_float(v[j]);
        }
    } else {
        float *d = (float *)base + i;
        if (n == N) {
            uint32_t w[N];
#pragma unroll
            for (int k = 0; k < N; ++k) w[k] = __float_as_uint(v[k]);
            store_bytes<N * 4>(d, w, wb);
        } else {
#pragma unroll
            for (int j = 0; j < N; ++j)
                if (j < n) d[j] = v[j];
        }
    }
}

/* Codes of v[0..n) · s to base[i..]: one access of width wb when n == N. */
template <int E5M2, int N>
static __device__ __forceinline__ void store_codes(uint8_t *base, int64_t i, const float (&v)[N], float s, int n,
                                                   int wb)
{
    uint32_t code[N / 4];
#pragma unroll
    for (int k = 0; k < N / 4; ++k) code[k] = fp8x4<E5M2>(v + 4 * k, s);
    if (n == N) {
        store_bytes<N>(base + i, code, wb);
    } else {
#pragma unroll
        for (int j = 0; j < N; ++j)
            if (j < n) base[i + j] = (uint8_t)(code[j / 4] >> (8 * (j % 4)));
    }
}

/* The forward's and the fused backward's tile sources (act_fwd_src, act_bwd_src). */
#include "act_tile_src.cuh"

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

/* Activation forward, y = v (YK 0: FP32, 1: BF16) or codes of v · scale with
 * amax (YK 2: E4M3, 3: E5M2).
 * Grid (gx, gy), grid-stride both ways; block ACT_THREADS as BY rows of BX =
 * 1 << bx_log2 threads. Thread (tx, ty) owns pieces k = blockIdx.x·BX + tx
 * (+ gx·BX ...) — columns 8k .. 8k+7 of v — of rows blockIdx.y·BY + ty
 * (+ gy·BY ...), walked pieces first, U of them at a time: all their loads
 * are issued before the first is used (a plain activation's one 16-byte load
 * of BF16 x per piece kept too few bytes in flight). Thread 0 of block
 * (0, 0) writes scale_inv. */
template <int ACT, int XBF16, int YK>
static __global__ void __launch_bounds__(ACT_THREADS, ACT_FWD_BLOCKS) act_fwd_kernel(act_rows_params p)
{
    constexpr int GATED = act_gated(ACT), FP8 = YK >= 2;
    constexpr int U = GATED ? 1 : ACT_UNROLL; /* a gated piece is two loads already */
    constexpr int XW = ACT_VEC * (XBF16 ? 2 : 4) / 4;
    const int bx = 1 << p.bx_log2, by = ACT_THREADS >> p.bx_log2;
    const int tx = threadIdx.x & (bx - 1), ty = threadIdx.x >> p.bx_log2;
    const float s = FP8 ? *p.scale : 1.0f;
    if (FP8 && p.scale_inv != NULL && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0)
        *p.scale_inv = 1.0f / s;
    const int64_t xpitch = GATED ? 2 * p.h : p.h;
    const int64_t k0 = (int64_t)blockIdx.x * bx + tx, kstep = (int64_t)gridDim.x * bx;
    const int64_t rstep = (int64_t)gridDim.y * by;
    int64_t r = (int64_t)blockIdx.y * by + ty, k = k0;
    if (k0 >= p.chunks) r = p.rows; /* no piece in any row */

    float amax = 0.0f;
    while (r < p.rows) {
        int64_t ru[U], cu[U];
        int nu[U]; /* elements of piece u: 0 past the last row */
        uint32_t wa[U][XW], wb[U][GATED ? XW : 1];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            ru[u] = r;
            cu[u] = k * ACT_VEC;
            nu[u] = r >= p.rows ? 0 : cu[u] + ACT_VEC <= p.h ? ACT_VEC : (int)(p.h - cu[u]);
            load_piece<XBF16, ACT_VEC>(wa[u], p.x, r * xpitch + cu[u], nu[u], p.w_x);
            if constexpr (GATED) load_piece<XBF16, ACT_VEC>(wb[u], p.x, r * xpitch + p.h + cu[u], nu[u], p.w_x);
            k += kstep;
            if (k >= p.chunks) {
                k = k0;
                r += rstep;
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (nu[u] == 0) continue;
            float a[ACT_VEC], v[ACT_VEC];
            decode_piece<XBF16, ACT_VEC>(wa[u], a);
#pragma unroll
            for (int j = 0; j < ACT_VEC; ++j) act_eval<ACT>(a[j], &v[j], NULL);
            if constexpr (GATED) {
                float b[ACT_VEC];
                decode_piece<XBF16, ACT_VEC>(wb[u], b);
#pragma unroll
                for (int j = 0; j < ACT_VEC; ++j) v[j] = v[j] * b[j];
            }
            const int64_t at = ru[u] * p.h + cu[u];
            if constexpr (FP8) {
#pragma unroll
                for (int j = 0; j < ACT_VEC; ++j) amax = fmaxf(amax, fabsf(v[j]));
                store_codes<YK == 3, ACT_VEC>((uint8_t *)p.y, at, v, s, nu[u], p.w_y);
            } else {
                store_piece<ACT_VEC>(p.y, YK == 1, at, v, nu[u], p.w_y);
            }
        }
    }
    if (FP8 && p.amax != NULL) block_amax_atomic<ACT_THREADS>(amax, p.amax);
}

/* Activation backward without transpose or dbias: d to dx (FP32/BF16) and/or
 * codes of d · scale to out, amax of d. Grid, block and ownership as
 * act_fwd_kernel; a gated thread's piece k gives d_a at columns 8k.. and d_b
 * at h + 8k.. from one load of a, b and dy. Thread 0 of block (0, 0) writes
 * scale_inv. */
template <int ACT, int XBF16, int DYBF16, int E5M2>
static __global__ void __launch_bounds__(ACT_THREADS) act_bwd_rows_kernel(act_rows_params p)
{
    constexpr int GATED = act_gated(ACT);
    constexpr int XW = ACT_VEC * (XBF16 ? 2 : 4) / 4, DW = ACT_VEC * (DYBF16 ? 2 : 4) / 4;
    const int bx = 1 << p.bx_log2, by = ACT_THREADS >> p.bx_log2;
    const int tx = threadIdx.x & (bx - 1), ty = threadIdx.x >> p.bx_log2;
    const float s = p.scale != NULL ? *p.scale : 1.0f;
    if (p.scale_inv != NULL && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *p.scale_inv = 1.0f / s;
    const int64_t xpitch = GATED ? 2 * p.h : p.h;

    float amax = 0.0f;
    for (int64_t r = (int64_t)blockIdx.y * by + ty; r < p.rows; r += (int64_t)gridDim.y * by) {
        for (int64_t k = (int64_t)blockIdx.x * bx + tx; k < p.chunks; k += (int64_t)gridDim.x * bx) {
            const int64_t c = k * ACT_VEC;
            const int n = c + ACT_VEC <= p.h ? ACT_VEC : (int)(p.h - c);
            uint32_t wa[XW], wb[GATED ? XW : 1], wd[DW];
            load_piece<XBF16, ACT_VEC>(wa, p.x, r * xpitch + c, n, p.w_x);
            if constexpr (GATED) load_piece<XBF16, ACT_VEC>(wb, p.x, r * xpitch + p.h + c, n, p.w_x);
            load_piece<DYBF16, ACT_VEC>(wd, p.dy, r * p.h + c, n, p.w_dy);
            float a[ACT_VEC], dy[ACT_VEC], d[ACT_VEC];
            decode_piece<XBF16, ACT_VEC>(wa, a);
            decode_piece<DYBF16, ACT_VEC>(wd, dy);
            if constexpr (GATED) {
                float b[ACT_VEC], db[ACT_VEC];
                decode_piece<XBF16, ACT_VEC>(wb, b);
#pragma unroll
                for (int j = 0; j < ACT_VEC; ++j) {
                    float f, g;
                    act_eval<ACT>(a[j], &f, &g);
                    d[j] = g * b[j] * dy[j];
                    db[j] = f * dy[j];
                    amax = fmaxf(amax, fmaxf(fabsf(d[j]), fabsf(db[j])));
                }
                if (p.y != NULL) store_piece<ACT_VEC>(p.y, p.y_bf16, r * xpitch + p.h + c, db, n, p.w_y);
                if (p.out != NULL) store_codes<E5M2, ACT_VEC>(p.out, r * xpitch + p.h + c, db, s, n, p.w_out);
            } else {
#pragma unroll
                for (int j = 0; j < ACT_VEC; ++j) {
                    float g;
                    act_eval<ACT>(a[j], NULL, &g);
                    d[j] = g * dy[j];
                    amax = fmaxf(amax, fabsf(d[j]));
                }
            }
            if (p.y != NULL) store_piece<ACT_VEC>(p.y, p.y_bf16, r * xpitch + c, d, n, p.w_y);
            if (p.out != NULL) store_codes<E5M2, ACT_VEC>(p.out, r * xpitch + c, d, s, n, p.w_out);
        }
    }
    if (p.amax != NULL) block_amax_atomic<ACT_THREADS>(amax, p.amax);
}

#include "act_row_kernel.cuh" /* act_row_kernel: needs the helpers above */
#include "act_row_reg.cuh"    /* act_row_reg_kernel: needs act_row_kernel.cuh's */

/* ------------------------------------------------------------------------ */
/* Launchers                                                                 */
/* ------------------------------------------------------------------------ */

enum { ACT_OP_FWD, ACT_OP_FWD_TILE, ACT_OP_BWD_ROWS, ACT_OP_BWD_TILE, ACT_OP_ROW };

/* One launch: which kernel family, its dtypes and its parameters. */
typedef struct act_job {
    int op;
    int x_bf16, dy_bf16;
    int yk;    /* forward: 0 FP32, 1 BF16, 2 E4M3, 3 E5M2 */
    int e5m2;  /* the tile kernels' codes */
    act_rows_params rows;
    dim3 grid;
    /* ACT_OP_FWD_TILE (x, h, w_x) and ACT_OP_BWD_TILE */
    cast_tile_params tile;
    const void *x, *dy;
    int64_t h;
    void *dx;
    int dx_bf16;
    int w_x, w_dy, w_dx;
    /* ACT_OP_ROW: the row-wise fused kernel, forward or backward */
    act_row_params row;
    int backward, hp_bf16;
    int row_reg;     /* act_row_reg_kernel instead of act_row_kernel (act.cu's row_job decides) */
    size_t row_smem; /* with row.col_amax: the column maxima's dynamic shared memory (act_row_cmax_bytes) */
} act_job;

template <int ACT, int XBF16, int DYBF16, int V>
static act_bwd_src<ACT, XBF16, DYBF16, V> bwd_src(const act_job *j)
{
    act_bwd_src<ACT, XBF16, DYBF16, V> src;
    src.x = j->x;
    src.dy = j->dy;
    src.h = j->h;
    src.dx = j->dx;
    src.dx_bf16 = j->dx_bf16;
    src.w_x = j->w_x;
    src.w_dy = j->w_dy;
    src.w_dx = j->w_dx;
    return src;
}

/* The V = 8 FULL kernel where it exists and cast_tile_full holds for it,
 * else the V = 4 source (its FULL kernel or the generic one). */
template <int ACT, int XBF16, int DYBF16>
static f8_status launch_bwd_tile(f8_ctx *ctx, act_job *j)
{
    const char *op = "activation backward";
    cast_tile_params *t = &j->tile;
    if constexpr (act_bwd_vec8<ACT, XBF16, DYBF16>()) {
        t->w_out = t->out != NULL ? access_width(t->out, t->cols, 8) : 1;
        if (cast_tile_full(t, 8, j->w_x >= 16 && j->w_dy >= 16 && j->dx == NULL))
            return cast_tile_launch(ctx, t, bwd_src<ACT, XBF16, DYBF16, 8>(j), j->e5m2, 1, op);
    }
    t->w_out = t->out != NULL ? access_width(t->out, t->cols, 4) : 1;
    const int full_src = j->w_x >= 4 * (XBF16 ? 2 : 4) && j->w_dy >= 4 * (DYBF16 ? 2 : 4) && j->dx == NULL;
    return cast_tile_launch(ctx, t, bwd_src<ACT, XBF16, DYBF16, 4>(j), j->e5m2, full_src, op);
}

template <int ACT, int XBF16>
static f8_status launch_fwd_tile(f8_ctx *ctx, act_job *j)
{
    act_fwd_src<ACT, XBF16> src;
    src.x = j->x;
    src.h = j->h;
    src.w_x = j->w_x;
    j->tile.w_out = j->tile.out != NULL ? access_width(j->tile.out, j->tile.cols, src.VEC) : 1;
    const int full_src = j->w_x >= act_fwd_src<ACT, XBF16>::VEC * (XBF16 ? 2 : 4);
    return cast_tile_launch(ctx, &j->tile, src, j->e5m2, full_src, "activation forward");
}

template <int ACT, int XBF16, int DYBF16>
static void launch_bwd_rows(const act_job *j, cudaStream_t st)
{
    if (j->e5m2)
        act_bwd_rows_kernel<ACT, XBF16, DYBF16, 1><<<j->grid, ACT_THREADS, 0, st>>>(j->rows);
    else
        act_bwd_rows_kernel<ACT, XBF16, DYBF16, 0><<<j->grid, ACT_THREADS, 0, st>>>(j->rows);
}

template <int ACT, int XBF16>
static void launch_fwd(const act_job *j, cudaStream_t st)
{
    switch (j->yk) {
    case 0: act_fwd_kernel<ACT, XBF16, 0><<<j->grid, ACT_THREADS, 0, st>>>(j->rows); break;
    case 1: act_fwd_kernel<ACT, XBF16, 1><<<j->grid, ACT_THREADS, 0, st>>>(j->rows); break;
    case 2: act_fwd_kernel<ACT, XBF16, 2><<<j->grid, ACT_THREADS, 0, st>>>(j->rows); break;
    default: act_fwd_kernel<ACT, XBF16, 3><<<j->grid, ACT_THREADS, 0, st>>>(j->rows); break;
    }
}

/* One row-wise kernel: without col_amax the instance without the column
 * maxima (COLMAX 0, no dynamic shared memory: the code it always was), else
 * the COLMAX one with row_smem bytes (opted in past 32 KiB: the default
 * 48 KiB holds the static arrays too). */
template <int ACT, int XBF16, int DYBF16, int BWD, int HPBF16, int E5M2>
static f8_status launch_row_as(f8_ctx *ctx, const act_job *j, cudaStream_t st)
{
    if constexpr (XBF16 && HPBF16 && (DYBF16 || !BWD) && (BWD || !act_gated(ACT))) /* act.cu's row_reg */
        if (j->row_reg) {
            void (*kernel)(act_row_params) = j->row.col_amax == NULL ? act_row_reg_kernel<ACT, BWD, E5M2, 0>
                                                                      : act_row_reg_kernel<ACT, BWD, E5M2, 1>;
            if (j->row_smem > 32 * 1024)
                F8I_TRY(f8i_cuda_smem_optin(ctx, (const void *)kernel, "row-wise activation: shared-memory opt-in"));
            kernel<<<j->grid, ACT_THREADS, j->row_smem, st>>>(j->row);
            return F8_OK;
        }
    if (j->row.col_amax == NULL) {
        act_row_kernel<ACT, XBF16, DYBF16, BWD, HPBF16, E5M2, 0><<<j->grid, ACT_THREADS, 0, st>>>(j->row);
        return F8_OK;
    }
    void (*kernel)(act_row_params) = act_row_kernel<ACT, XBF16, DYBF16, BWD, HPBF16, E5M2, 1>;
    if (j->row_smem > 32 * 1024)
        F8I_TRY(f8i_cuda_smem_optin(ctx, (const void *)kernel, "row-wise activation: shared-memory opt-in"));
    kernel<<<j->grid, ACT_THREADS, j->row_smem, st>>>(j->row);
    return F8_OK;
}

template <int ACT, int XBF16, int DYBF16, int BWD>
static f8_status launch_row(f8_ctx *ctx, const act_job *j, cudaStream_t st)
{
    if (j->hp_bf16)
        return j->e5m2 ? launch_row_as<ACT, XBF16, DYBF16, BWD, 1, 1>(ctx, j, st)
                       : launch_row_as<ACT, XBF16, DYBF16, BWD, 1, 0>(ctx, j, st);
    return j->e5m2 ? launch_row_as<ACT, XBF16, DYBF16, BWD, 0, 1>(ctx, j, st)
                   : launch_row_as<ACT, XBF16, DYBF16, BWD, 0, 0>(ctx, j, st);
}

/* The row-wise kernel's dtype dispatch (the forward reads no dy). */
template <int ACT>
static f8_status launch_row_any(f8_ctx *ctx, const act_job *j, cudaStream_t st)
{
    const int xb = j->x_bf16, db = j->dy_bf16;
    if (!j->backward) return xb ? launch_row<ACT, 1, 0, 0>(ctx, j, st) : launch_row<ACT, 0, 0, 0>(ctx, j, st);
    if (xb) return db ? launch_row<ACT, 1, 1, 1>(ctx, j, st) : launch_row<ACT, 1, 0, 1>(ctx, j, st);
    return db ? launch_row<ACT, 0, 1, 1>(ctx, j, st) : launch_row<ACT, 0, 0, 1>(ctx, j, st);
}

/* The job with the activation as a template argument: dtype dispatch. */
template <int ACT>
static f8_status act_run(f8_ctx *ctx, act_job *j)
{
    cudaStream_t st = f8i_stream(ctx);
    const int xb = j->x_bf16, db = j->dy_bf16;
    switch (j->op) {
    case ACT_OP_FWD:
        xb ? launch_fwd<ACT, 1>(j, st) : launch_fwd<ACT, 0>(j, st);
        F8I_COUNT_LAUNCHES(ctx, 1);
        return f8i_cuda_launch_check(ctx, "act_fwd_kernel");
    case ACT_OP_ROW:
        F8I_TRY(launch_row_any<ACT>(ctx, j, st));
        F8I_COUNT_LAUNCHES(ctx, 1);
        return f8i_cuda_launch_check(ctx, "act_row_kernel");
    case ACT_OP_FWD_TILE: /* cast_tile_launch counts its own launch */
        return xb ? launch_fwd_tile<ACT, 1>(ctx, j) : launch_fwd_tile<ACT, 0>(ctx, j);
    case ACT_OP_BWD_ROWS:
        if (xb)
            db ? launch_bwd_rows<ACT, 1, 1>(j, st) : launch_bwd_rows<ACT, 1, 0>(j, st);
        else
            db ? launch_bwd_rows<ACT, 0, 1>(j, st) : launch_bwd_rows<ACT, 0, 0>(j, st);
        F8I_COUNT_LAUNCHES(ctx, 1);
        return f8i_cuda_launch_check(ctx, "act_bwd_rows_kernel");
    default: /* cast_tile_launch counts its own launches */
        if (xb) return db ? launch_bwd_tile<ACT, 1, 1>(ctx, j) : launch_bwd_tile<ACT, 1, 0>(ctx, j);
        return db ? launch_bwd_tile<ACT, 0, 1>(ctx, j) : launch_bwd_tile<ACT, 0, 0>(ctx, j);
    }
}


/* Run job j for activation `act`, one file per group (defined in
 * act_gelu.cu: GELU, GEGLU; act_silu.cu: SwiGLU, QGELU; act_relu.cu: ReLU,
 * REGLU; act_srelu.cu: SReLU); each returns F8_ERR_INVALID_ARGUMENT for
 * another one. */
f8_status f8i_cuda_act_run_gelu(f8_ctx *ctx, f8_activation act, act_job *j);
f8_status f8i_cuda_act_run_silu(f8_ctx *ctx, f8_activation act, act_job *j);
f8_status f8i_cuda_act_run_relu(f8_ctx *ctx, f8_activation act, act_job *j);
f8_status f8i_cuda_act_run_srelu(f8_ctx *ctx, f8_activation act, act_job *j);

#endif /* F8_CUDA_ACT_KERNELS_CUH */
