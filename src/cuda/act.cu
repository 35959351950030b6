/*
 * act.cu — the fused modules' activations (f8i_act_fwd_args and
 * f8i_act_bwd_args in backend.h): GELU (tanh form), ReLU, QGELU, SReLU and the
 * gated GEGLU, REGLU, SwiGLU, forward and backward, with FP8 outputs fused.
 *
 * Design note. Three kernels, all templated on the activation so each formula
 * compiles into its own straight-line code:
 *  - act_fwd_kernel: v = act(x) (or act(a)·b) streamed row piece by row
 *    piece, ACT_VEC outputs per thread step (16-byte loads), stored as
 *    FP32/BF16 or as FP8 codes with amax.
 *  - act_bwd_rows_kernel: the same walk for the backward when neither the
 *    transposed codes nor dbias are asked for: d to dx and/or FP8 codes.
 *  - cast_tile.cuh's cast_tile_kernel with act_bwd_src as its values: the
 *    fused dact + cast + transpose + dbias of TE's LayerNormMLP backward, one
 *    read of x and dy, d computed in registers as the tile is loaded and never
 *    stored unless dx is asked for. d's column c needs, for gated activations,
 *    a = x[r, c mod h], dy[r, c mod h] and (c < h) b = x[r, h + c]: a thread's
 *    VEC columns lie in one half (vector loads) unless they straddle h or the
 *    edge (element loads).
 * The plain activations treat x as one flat row (rows = 1, h = rows·cols), the
 * gated ones walk (row, piece) with h = cols; a block is a power-of-two number
 * of threads across a row times the rest down, so narrow rows waste no lanes.
 * FP8 codes come from the same cvt as the cast (fp8x4 on v·scale), and the
 * backward's codes, amax and dbias are those of the FP32 d, as the CPU oracle
 * (cpu/act.c: it casts its FP32 d) does. Math is FP32 with the IEEE expf and
 * tanhf (no fast-math; -fmad=false keeps each product rounded as written, in
 * the oracle's order); libm differs in the last bits, hence the tolerance.
 */
#include <stdint.h>

#include "cast_tile.cuh"

#define ACT_THREADS 256
#define ACT_VEC 8           /* row elements a rows-kernel thread handles per step */
#define ACT_MAX_BX_LOG2 8   /* at most ACT_THREADS threads across a row */

#define GELU_K 0.79788456f  /* sqrt(2/pi), as f8.h writes it */
#define GELU_C 0.044715f
#define QGELU_K 1.702f

static_assert((1 << ACT_MAX_BX_LOG2) == ACT_THREADS, "a block may lie along one row");

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

/* ------------------------------------------------------------------------ */
/* Device helpers                                                            */
/* ------------------------------------------------------------------------ */

static __device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* f = act(x) and/or df = act'(x) (pass NULL for the one not wanted; the gated
 * ones: the function applied to a). With t = tanh(u), u = k(x + c·x³):
 *   gelu  = 0.5x(1 + t)          gelu'  = 0.5(1 + t) + 0.5x(1 - t²)·k(1 + 3c·x²)
 *   relu  = max(x, 0)            relu'  = [x > 0]            (0 at the kink)
 *   silu  = x·s, s = σ(x)        silu'  = s + x·s(1 - s)
 *   qgelu = x·s, s = σ(1.702x)   qgelu' = s + 1.702x·s(1 - s)
 *   srelu = max(x, 0)²           srelu' = 2·max(x, 0)
 * Every act(0) is 0, so the zeros padding a piece add nothing. */
template <int ACT>
static __device__ __forceinline__ void act_eval(float x, float *f, float *df)
{
    if constexpr (ACT == F8_ACT_GELU || ACT == F8_ACT_GEGLU) {
        const float x2 = x * x;
        const float t = tanhf(GELU_K * (x + GELU_C * (x2 * x)));
        if (f) *f = 0.5f * x * (1.0f + t);
        if (df) *df = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * (GELU_K * (1.0f + 3.0f * GELU_C * x2));
    } else if constexpr (ACT == F8_ACT_RELU || ACT == F8_ACT_REGLU) {
        if (f) *f = x > 0.0f ? x : 0.0f;
        if (df) *df = x > 0.0f ? 1.0f : 0.0f;
    } else if constexpr (ACT == F8_ACT_SWIGLU) {
        const float s = sigmoid(x);
        if (f) *f = x * s;
        if (df) *df = s + x * s * (1.0f - s);
    } else if constexpr (ACT == F8_ACT_QGELU) {
        const float s = sigmoid(QGELU_K * x);
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

/* ------------------------------------------------------------------------ */
/* The fused backward's tile source (cast_tile.cuh)                          */
/* ------------------------------------------------------------------------ */

/* The tile's values are d [rows, cols_in]. VEC = 8 when x and dy are both
 * BF16 (16-byte loads), else 4 (16-byte FP32 loads, 8-byte BF16 ones). The
 * gated sources hold three pieces per thread-row, so they load one
 * micro-block ahead (registers); the plain ones both. */
template <int ACT, int XBF16, int DYBF16>
struct act_bwd_src {
    static constexpr int GATED = act_gated(ACT);
    static constexpr int VEC = XBF16 && DYBF16 ? 8 : 4;
    static constexpr int AHEAD = GATED ? 1 : 2;
    static constexpr int XW = VEC * (XBF16 ? 2 : 4) / 4, DW = VEC * (DYBF16 ? 2 : 4) / 4; /* words */
    struct raw_t {
        uint32_t a[XW], b[GATED ? XW : 1], dy[DW];
    };
    const void *x;  /* (rows, cols_in) */
    const void *dy; /* (rows, h) */
    int64_t h;      /* cols_in / 2 (gated) or cols_in */
    void *dx;       /* (rows, cols_in) FP32/BF16, or NULL */
    int dx_bf16;
    int w_x, w_dy, w_dx; /* access widths (bytes) */
};

template <int ACT, int XBF16, int DYBF16>
static __device__ __forceinline__ void tile_load(const act_bwd_src<ACT, XBF16, DYBF16> &s,
                                                 typename act_bwd_src<ACT, XBF16, DYBF16>::raw_t &raw, int64_t row,
                                                 int64_t col, int64_t rows, int64_t cols)
{
    typedef act_bwd_src<ACT, XBF16, DYBF16> S;
    constexpr int VEC = S::VEC;
    const int64_t h = s.h;
    const bool second = S::GATED && col >= h; /* d_b columns: no b needed */
    if (row < rows && (col + VEC <= h || (second && col + VEC <= cols))) {
        const int64_t ca = second ? col - h : col;
        load_piece<XBF16, VEC>(raw.a, s.x, row * cols + ca, VEC, s.w_x);
        if constexpr (S::GATED) {
            if (second) {
#pragma unroll
                for (int k = 0; k < S::XW; ++k) raw.b[k] = 0;
            } else {
                load_piece<XBF16, VEC>(raw.b, s.x, row * cols + h + ca, VEC, s.w_x);
            }
        }
        load_piece<DYBF16, VEC>(raw.dy, s.dy, row * h + ca, VEC, s.w_dy);
        return;
    }
    /* An edge or a piece straddling the halves: element by element. */
#pragma unroll
    for (int k = 0; k < S::XW; ++k) raw.a[k] = raw.b[S::GATED ? k : 0] = 0;
#pragma unroll
    for (int k = 0; k < S::DW; ++k) raw.dy[k] = 0;
    if (row >= rows) return;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
        const int64_t c = col + j;
        if (c < cols) {
            const int64_t ca = c < h ? c : c - h;
            put_elem<XBF16>(raw.a, j, s.x, row * cols + ca);
            if (S::GATED && c < h) put_elem<XBF16>(raw.b, j, s.x, row * cols + h + ca);
            put_elem<DYBF16>(raw.dy, j, s.dy, row * h + ca);
        }
    }
}

/* plain: d = act'(x)·dy; gated: d_a = act'(a)·b·dy (c < h), d_b = act(a)·dy. */
template <int ACT, int XBF16, int DYBF16>
static __device__ __forceinline__ void tile_values(const act_bwd_src<ACT, XBF16, DYBF16> &s,
                                                   const typename act_bwd_src<ACT, XBF16, DYBF16>::raw_t &raw,
                                                   int64_t col, float (&v)[act_bwd_src<ACT, XBF16, DYBF16>::VEC])
{
    typedef act_bwd_src<ACT, XBF16, DYBF16> S;
    constexpr int VEC = S::VEC;
    float a[VEC], dy[VEC];
    decode_piece<XBF16, VEC>(raw.a, a);
    decode_piece<DYBF16, VEC>(raw.dy, dy);
    if constexpr (S::GATED) {
        float b[VEC];
        decode_piece<XBF16, VEC>(raw.b, b);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            float g;
            if (col + j < s.h) {
                act_eval<ACT>(a[j], NULL, &g);
                v[j] = g * b[j] * dy[j];
            } else {
                act_eval<ACT>(a[j], &g, NULL);
                v[j] = g * dy[j];
            }
        }
    } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            float g;
            act_eval<ACT>(a[j], NULL, &g);
            v[j] = g * dy[j];
        }
    }
}

/* dx, when asked for: d as FP32/BF16. */
template <int ACT, int XBF16, int DYBF16>
static __device__ __forceinline__ void tile_store(const act_bwd_src<ACT, XBF16, DYBF16> &s,
                                                  const float (&v)[act_bwd_src<ACT, XBF16, DYBF16>::VEC], int64_t row,
                                                  int64_t col, int64_t rows, int64_t cols)
{
    constexpr int VEC = act_bwd_src<ACT, XBF16, DYBF16>::VEC;
    if (s.dx == NULL || row >= rows || col >= cols) return;
    const int n = col + VEC <= cols ? VEC : (int)(cols - col);
    store_piece<VEC>(s.dx, s.dx_bf16, row * cols + col, v, n, s.w_dx);
}

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

/* Activation forward, y = v (YK 0: FP32, 1: BF16) or codes of v · scale with
 * amax (YK 2: E4M3, 3: E5M2).
 * Grid (gx, gy), grid-stride both ways; block ACT_THREADS as BY rows of BX =
 * 1 << bx_log2 threads. Thread (tx, ty) owns pieces k = blockIdx.x·BX + tx
 * (+ gx·BX ...) — columns 8k .. 8k+7 of v — of rows blockIdx.y·BY + ty
 * (+ gy·BY ...). Thread 0 of block (0, 0) writes scale_inv. */
template <int ACT, int XBF16, int YK>
static __global__ void __launch_bounds__(ACT_THREADS) act_fwd_kernel(act_rows_params p)
{
    constexpr int GATED = act_gated(ACT), FP8 = YK >= 2;
    constexpr int XW = ACT_VEC * (XBF16 ? 2 : 4) / 4;
    const int bx = 1 << p.bx_log2, by = ACT_THREADS >> p.bx_log2;
    const int tx = threadIdx.x & (bx - 1), ty = threadIdx.x >> p.bx_log2;
    const float s = FP8 ? *p.scale : 1.0f;
    if (FP8 && p.scale_inv != NULL && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0)
        *p.scale_inv = 1.0f / s;
    const int64_t xpitch = GATED ? 2 * p.h : p.h;

    float amax = 0.0f;
    for (int64_t r = (int64_t)blockIdx.y * by + ty; r < p.rows; r += (int64_t)gridDim.y * by) {
        for (int64_t k = (int64_t)blockIdx.x * bx + tx; k < p.chunks; k += (int64_t)gridDim.x * bx) {
            const int64_t c = k * ACT_VEC;
            const int n = c + ACT_VEC <= p.h ? ACT_VEC : (int)(p.h - c);
            uint32_t wa[XW], wb[GATED ? XW : 1];
            load_piece<XBF16, ACT_VEC>(wa, p.x, r * xpitch + c, n, p.w_x);
            if constexpr (GATED) load_piece<XBF16, ACT_VEC>(wb, p.x, r * xpitch + p.h + c, n, p.w_x);
            float a[ACT_VEC], v[ACT_VEC];
            decode_piece<XBF16, ACT_VEC>(wa, a);
#pragma unroll
            for (int j = 0; j < ACT_VEC; ++j) act_eval<ACT>(a[j], &v[j], NULL);
            if constexpr (GATED) {
                float b[ACT_VEC];
                decode_piece<XBF16, ACT_VEC>(wb, b);
#pragma unroll
                for (int j = 0; j < ACT_VEC; ++j) v[j] = v[j] * b[j];
            }
            if constexpr (FP8) {
#pragma unroll
                for (int j = 0; j < ACT_VEC; ++j) amax = fmaxf(amax, fabsf(v[j]));
                store_codes<YK == 3, ACT_VEC>((uint8_t *)p.y, r * p.h + c, v, s, n, p.w_y);
            } else {
                store_piece<ACT_VEC>(p.y, YK == 1, r * p.h + c, v, n, p.w_y);
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

/* ------------------------------------------------------------------------ */
/* Launchers                                                                 */
/* ------------------------------------------------------------------------ */

enum { ACT_OP_FWD, ACT_OP_BWD_ROWS, ACT_OP_BWD_TILE };

/* One launch: which kernel family, its dtypes and its parameters. */
typedef struct act_job {
    int op;
    int x_bf16, dy_bf16;
    int yk;    /* forward: 0 FP32, 1 BF16, 2 E4M3, 3 E5M2 */
    int e5m2;  /* backward codes */
    act_rows_params rows;
    dim3 grid;
    /* ACT_OP_BWD_TILE */
    cast_tile_params tile;
    const void *x, *dy;
    int64_t h;
    void *dx;
    int dx_bf16;
    int w_x, w_dy, w_dx;
} act_job;

/* The rows kernels' block shape and grid: a power of two of threads across
 * (enough for the pieces of a row, at most ACT_THREADS), the rest down; at
 * most F8I_BLOCKS_PER_SM blocks per SM in all. rows, chunks >= 1. */
static void rows_geometry(const f8_ctx *ctx, act_rows_params *p, dim3 *grid)
{
    int l = 0;
    while (l < ACT_MAX_BX_LOG2 && ((int64_t)1 << l) < p->chunks) ++l;
    p->bx_log2 = l;
    const int64_t bx = (int64_t)1 << l, by = ACT_THREADS >> l;
    int64_t cap = (int64_t)f8i_cuda(ctx)->sm_count * F8I_BLOCKS_PER_SM;
    if (cap < 1) cap = 1;
    int64_t gx = (p->chunks + bx - 1) / bx, gy = (p->rows + by - 1) / by;
    if (gx > cap) gx = cap;
    const int64_t gy_cap = cap / gx > 0 ? cap / gx : 1;
    if (gy > gy_cap) gy = gy_cap;
    if (gy > 65535) gy = 65535;
    *grid = dim3((unsigned)gx, (unsigned)gy, 1);
}

template <int ACT, int XBF16, int DYBF16>
static f8_status launch_bwd_tile(f8_ctx *ctx, act_job *j)
{
    act_bwd_src<ACT, XBF16, DYBF16> src;
    src.x = j->x;
    src.dy = j->dy;
    src.h = j->h;
    src.dx = j->dx;
    src.dx_bf16 = j->dx_bf16;
    src.w_x = j->w_x;
    src.w_dy = j->w_dy;
    src.w_dx = j->w_dx;
    j->tile.w_out = j->tile.out != NULL ? access_width(j->tile.out, j->tile.cols, src.VEC) : 1;
    return cast_tile_launch(ctx, &j->tile, src, j->e5m2, "activation backward", "f8i_reduce_scratch_bytes");
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

/* The job with the activation as a template argument: dtype dispatch. */
template <int ACT>
static f8_status act_run(f8_ctx *ctx, act_job *j)
{
    cudaStream_t st = f8i_stream(ctx);
    const int xb = j->x_bf16, db = j->dy_bf16;
    switch (j->op) {
    case ACT_OP_FWD:
        xb ? launch_fwd<ACT, 1>(j, st) : launch_fwd<ACT, 0>(j, st);
        return f8i_cuda_launch_check(ctx, "act_fwd_kernel");
    case ACT_OP_BWD_ROWS:
        if (xb)
            db ? launch_bwd_rows<ACT, 1, 1>(j, st) : launch_bwd_rows<ACT, 1, 0>(j, st);
        else
            db ? launch_bwd_rows<ACT, 0, 1>(j, st) : launch_bwd_rows<ACT, 0, 0>(j, st);
        return f8i_cuda_launch_check(ctx, "act_bwd_rows_kernel");
    default:
        if (xb) return db ? launch_bwd_tile<ACT, 1, 1>(ctx, j) : launch_bwd_tile<ACT, 1, 0>(ctx, j);
        return db ? launch_bwd_tile<ACT, 0, 1>(ctx, j) : launch_bwd_tile<ACT, 0, 0>(ctx, j);
    }
}

static f8_status act_dispatch(f8_ctx *ctx, f8_activation act, act_job *j)
{
    switch (act) {
    case F8_ACT_GELU: return act_run<F8_ACT_GELU>(ctx, j);
    case F8_ACT_RELU: return act_run<F8_ACT_RELU>(ctx, j);
    case F8_ACT_GEGLU: return act_run<F8_ACT_GEGLU>(ctx, j);
    case F8_ACT_REGLU: return act_run<F8_ACT_REGLU>(ctx, j);
    case F8_ACT_SWIGLU: return act_run<F8_ACT_SWIGLU>(ctx, j);
    case F8_ACT_QGELU: return act_run<F8_ACT_QGELU>(ctx, j);
    case F8_ACT_SRELU: return act_run<F8_ACT_SRELU>(ctx, j);
    }
    return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "activation: unknown f8_activation %d", (int)act);
}

static int hp_dtype(f8_dtype d) { return d == F8_DTYPE_FP32 || d == F8_DTYPE_BF16; }
static int fp8_dtype(f8_dtype d) { return d == F8_DTYPE_E4M3 || d == F8_DTYPE_E5M2; }
static int dtype_bytes(f8_dtype d) { return d == F8_DTYPE_FP32 ? 4 : d == F8_DTYPE_BF16 ? 2 : 1; }

/* *scale_inv = 1 / *scale for an empty tensor (1 when there is no scale, as
 * the kernels take it). */
static f8_status empty_scale_inv(f8_ctx *ctx, const float *scale, float *scale_inv)
{
    if (scale_inv == NULL) return F8_OK;
    if (scale == NULL) return f8i_cuda_fill_f32(ctx, scale_inv, 1.0f, 1);
    return f8i_cuda_reciprocal(ctx, scale, scale_inv, NULL);
}

/* ------------------------------------------------------------------------ */
/* Backend entry points                                                      */
/* ------------------------------------------------------------------------ */

f8_status f8i_cuda_act_fwd(f8_ctx *ctx, const f8i_act_fwd_args *a)
{
    if (!hp_dtype(a->x_dtype) || (!hp_dtype(a->y_dtype) && !fp8_dtype(a->y_dtype)))
        return f8i_error(ctx, F8_ERR_DTYPE, "activation forward: x %s, y %s; expected fp32/bf16 x", 
                         f8_dtype_name(a->x_dtype), f8_dtype_name(a->y_dtype));
    if (a->rows < 0 || a->cols < 0)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "activation forward: negative shape [%lld, %lld]",
                         (long long)a->rows, (long long)a->cols);
    const int fp8 = fp8_dtype(a->y_dtype);
    if (a->rows == 0 || a->cols == 0) return fp8 ? empty_scale_inv(ctx, a->scale, a->scale_inv) : F8_OK;

    const int gated = act_gated(a->act), xes = dtype_bytes(a->x_dtype), yes = dtype_bytes(a->y_dtype);
    act_job j;
    j.op = ACT_OP_FWD;
    j.x_bf16 = a->x_dtype == F8_DTYPE_BF16;
    j.dy_bf16 = 0;
    j.yk = a->y_dtype == F8_DTYPE_FP32 ? 0 : a->y_dtype == F8_DTYPE_BF16 ? 1 : a->y_dtype == F8_DTYPE_E4M3 ? 2 : 3;
    j.e5m2 = 0;
    act_rows_params *p = &j.rows;
    /* Plain activations: one flat row (pitches then never matter). */
    p->rows = gated ? a->rows : 1;
    p->h = gated ? a->cols : a->rows * a->cols;
    p->chunks = (p->h + ACT_VEC - 1) / ACT_VEC;
    p->x = a->x;
    p->dy = NULL;
    p->y = a->y;
    p->y_bf16 = 0;
    p->out = NULL;
    p->scale = fp8 ? a->scale : NULL;
    p->amax = fp8 ? a->amax : NULL;
    p->scale_inv = fp8 ? a->scale_inv : NULL;
    p->w_x = access_width(a->x, gated ? p->h * xes : 0, 16);
    p->w_dy = 1;
    p->w_y = access_width(a->y, gated ? p->h * yes : 0, 16);
    p->w_out = 1;
    rows_geometry(ctx, p, &j.grid);
    return act_dispatch(ctx, a->act, &j);
}

f8_status f8i_cuda_act_bwd(f8_ctx *ctx, const f8i_act_bwd_args *a)
{
    const int want_codes = a->out != NULL || a->out_t != NULL;
    if (!hp_dtype(a->x_dtype) || !hp_dtype(a->dy_dtype) || (a->dx != NULL && !hp_dtype(a->dx_dtype)) ||
        (want_codes && !fp8_dtype(a->out_dtype)) || (a->dbias != NULL && !hp_dtype(a->dbias_dtype)))
        return f8i_error(ctx, F8_ERR_DTYPE,
                         "activation backward: x %s, dy %s, dx %s, out %s, dbias %s; expected fp32/bf16 "
                         "x, dy, dx, dbias and e4m3/e5m2 out",
                         f8_dtype_name(a->x_dtype), f8_dtype_name(a->dy_dtype), f8_dtype_name(a->dx_dtype),
                         f8_dtype_name(a->out_dtype), f8_dtype_name(a->dbias_dtype));
    if (a->rows < 0 || a->cols < 0)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "activation backward: negative shape [%lld, %lld]",
                         (long long)a->rows, (long long)a->cols);
    if (a->rows == 0 || a->cols == 0) return empty_scale_inv(ctx, a->scale, a->scale_inv);

    const int gated = act_gated(a->act);
    const int64_t h = a->cols, cols_in = gated ? 2 * h : h;
    const int xes = dtype_bytes(a->x_dtype), dyes = dtype_bytes(a->dy_dtype);
    const int dxes = a->dx != NULL ? dtype_bytes(a->dx_dtype) : 1;
    act_job j;
    j.x_bf16 = a->x_dtype == F8_DTYPE_BF16;
    j.dy_bf16 = a->dy_dtype == F8_DTYPE_BF16;
    j.yk = 0;
    j.e5m2 = want_codes && a->out_dtype == F8_DTYPE_E5M2;

    if (a->out_t != NULL || a->dbias != NULL) {
        /* The fused tile: d's codes row-major and transposed, amax, dbias, dx. */
        j.op = ACT_OP_BWD_TILE;
        cast_tile_params *t = &j.tile;
        t->rows = a->rows;
        t->cols = cols_in;
        t->out = a->out;
        t->out_t = a->out_t;
        t->scale = a->scale;
        t->amax = a->amax;
        t->scale_inv = a->scale_inv;
        t->noop = NULL;
        t->dbias = a->dbias;
        t->dbias_bf16 = a->dbias_dtype == F8_DTYPE_BF16;
        t->dbias_accumulate = a->dbias_accumulate != 0;
        t->w_out_t = a->out_t != NULL ? access_width(a->out_t, a->rows, 16) : 1;
        j.x = a->x;
        j.dy = a->dy;
        j.h = h;
        j.dx = a->dx;
        j.dx_bf16 = a->dx != NULL && a->dx_dtype == F8_DTYPE_BF16;
        j.w_x = access_width(a->x, h * xes, 16);
        j.w_dy = access_width(a->dy, h * dyes, 16);
        j.w_dx = a->dx != NULL ? access_width(a->dx, cols_in * dxes, 16) : 1;
        return act_dispatch(ctx, a->act, &j);
    }
    if (a->dx == NULL && a->out == NULL && a->amax == NULL) return empty_scale_inv(ctx, a->scale, a->scale_inv);

    /* Row pieces: dx and/or codes, amax. */
    j.op = ACT_OP_BWD_ROWS;
    act_rows_params *p = &j.rows;
    p->rows = gated ? a->rows : 1;
    p->h = gated ? h : a->rows * h;
    p->chunks = (p->h + ACT_VEC - 1) / ACT_VEC;
    p->x = a->x;
    p->dy = a->dy;
    p->y = a->dx;
    p->y_bf16 = a->dx != NULL && a->dx_dtype == F8_DTYPE_BF16;
    p->out = a->out;
    p->scale = a->scale;
    p->amax = a->amax;
    p->scale_inv = a->scale_inv;
    p->w_x = access_width(a->x, gated ? h * xes : 0, 16);
    p->w_dy = access_width(a->dy, gated ? h * dyes : 0, 16);
    p->w_y = a->dx != NULL ? access_width(a->dx, gated ? h * dxes : 0, 16) : 1;
    p->w_out = a->out != NULL ? access_width(a->out, gated ? h : 0, ACT_VEC) : 1;
    rows_geometry(ctx, p, &j.grid);
    return act_dispatch(ctx, a->act, &j);
}
