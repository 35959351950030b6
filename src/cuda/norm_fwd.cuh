/*
 * norm_fwd.cuh — what the norm forward's files share (norm_fwd.cu: the
 * entry point and the row-group kernels; norm_fwd_fit.cu: the kernel for
 * rows that fit its layout exactly; norm_fwd_rowwise.cu and
 * norm_fwd_fit_rowwise.cu: the same two with row-wise scaling's cast fused;
 * norm_fwd_wide.cu: rows wider than FWD_MAX_COLS): the launch parameters,
 * the row-group sums and maxima, the gamma/beta planes in shared memory,
 * the cp.async helpers, the fit layout's constants and the launchers the
 * entry point calls. Only those five files include this.
 */
#ifndef F8_CUDA_NORM_FWD_CUH
#define F8_CUDA_NORM_FWD_CUH

#include <stdint.h>

#include "norm_common.cuh"

#define FWD_MAX_COLS 8192 /* the row-group kernels' widest row: at most 64 KB of gamma/beta in shared memory */

typedef struct norm_fwd_params {
    const void *x;             /* (rows, cols) FP32 or BF16 */
    int64_t rows, cols;
    const void *gamma, *beta;  /* (cols) param dtype; beta unused for RMS */
    int x_bf16, p_bf16, y_kind; /* dtypes (the wide kernel reads them at run time) */
    int rms, zero_centered;
    float eps;
    void *y;                   /* (rows, cols) */
    const float *scale;        /* FP8 y */
    float *amax, *scale_inv;   /* FP8 y, or NULL */
    unsigned long long *stats; /* FP8 y: telemetry [3] (f8i_norm_fwd_args.stats) or NULL */
    float *mu, *rsigma;        /* (rows) or NULL */
    int tpr;                   /* threads per row */
    int w_x, w_y, w_p;         /* access widths (bytes) of x rows, y rows, gamma/beta */
    /* F8I_ROW_FUSED (backend.h; norm_fwd_rowwise.cu): y's codes row by row */
    float scaled_max;
    int pow2;
    void *y_hp;                /* (rows, cols) in the hp dtype, or NULL */
    int hp_bf16, w_hp;         /* the hp dtype; y_hp's access width */
    float *col_amax;           /* (cols) max |u| of each column, zeroed before the launch, or NULL */
} norm_fwd_params;

/* a[0] becomes the sum of a[0..N-1], added pairwise in a fixed order. */
template <int N>
static __device__ __forceinline__ float pairwise_sum(float (&a)[N])
{
#pragma unroll
    for (int h = N / 2; h > 0; h >>= 1)
#pragma unroll
        for (int j = 0; j < h; ++j) a[j] += a[j + h];
    return a[0];
}

/* The sum of v over a row group of nw warps (warps first .. first + nw - 1 of
 * the block): a butterfly within the warp (every lane gets the same bits),
 * then, for nw > 1, each warp's total through red[warp] and the group's
 * warps added in index order after a named barrier (id bar, the group's
 * threads only). Every thread of the group calls it. A caller alternates
 * between two red arrays: a warp writes red again only two calls later,
 * after the barrier of the call between, which every thread reaches only
 * after reading this call's words. */
static __device__ __forceinline__ float group_total(float v, int nw, int first, float *red, int bar)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    if (nw == 1) return v;
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    asm volatile("bar.sync %0, %1;" ::"r"(bar), "r"(nw * 32) : "memory");
    float s = 0.0f;
    for (int k = 0; k < nw; ++k) s += red[first + k];
    return s;
}

/* gamma (1 + gamma when zero centred) and, for LayerNorm, beta of the row's
 * np pieces into gb as FP32 planes (the kernels' layout), then a barrier. */
template <int X_BF16, int RMS, int THREADS>
static __device__ __forceinline__ void fill_params(float4 *gb, const norm_fwd_params &p, int cols, int np)
{
    constexpr int E = X_BF16 ? 8 : 4, NPL = (E / 4) * (RMS ? 1 : 2);
    constexpr int FILL = (FWD_MAX_COLS / 4 + THREADS - 1) / THREADS; /* pieces a thread fills, at most */
#pragma unroll 1
    for (int i = 0; i < FILL; ++i) {
        const int P = (int)threadIdx.x + i * THREADS;
        if (P >= np) break;
        float4 *at = gb + (size_t)((P >> 5) * NPL) * 32 + (P & 31); /* plane h at at[32h] */
        float g[E];
        load_param<E, int>(g, p.gamma, p.p_bf16, P * E, cols, p.w_p);
        if (p.zero_centered) /* gain 0 past the row's end all the same */
#pragma unroll
            for (int j = 0; j < E; ++j)
                if (P * E + j < cols) g[j] = 1.0f + g[j];
#pragma unroll
        for (int h = 0; h < E / 4; ++h) at[32 * h] = make_float4(g[4 * h], g[4 * h + 1], g[4 * h + 2], g[4 * h + 3]);
        if (!RMS) {
            float b[E];
            load_param<E, int>(b, p.beta, p.p_bf16, P * E, cols, p.w_p);
#pragma unroll
            for (int h = 0; h < E / 4; ++h)
                at[32 * (E / 4 + h)] = make_float4(b[4 * h], b[4 * h + 1], b[4 * h + 2], b[4 * h + 3]);
        }
    }
    __syncthreads();
}

/* 16 bytes from global to shared memory, asynchronously (cached in L2 only:
 * x is read once), and the group bookkeeping of those copies. */
static __device__ __forceinline__ void cp_async16(void *smem, const void *gmem)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}

static __device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

/* Wait until at most N of this thread's committed groups are still in flight. */
template <int N>
static __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* ------------------------------------------------------------------------ */
/* The fit kernels' layout (norm_fwd_fit.cu, norm_fwd_fit_rowwise.cu)       */
/* ------------------------------------------------------------------------ */

/* The block, the rows of x in flight per row group beside the one being
 * computed, and the blocks per SM the launch bounds ask for (registers:
 * 65536 / (threads · blocks) a thread: 42 here). */
#define FIT_THREADS 768  /* the fastest measured (bench/RESULTS.md): 48 warps a SM; a multiple of 256 */
#define FIT_STAGES 1     /* one row ahead: two measured slower, their ring leaving room for fewer blocks */
#define FIT_MIN_BLOCKS 2 /* two 768-thread blocks a SM: 42 registers, no spill */

static_assert(FIT_THREADS % 256 == 0, "whole groups of every width");
static_assert(FIT_THREADS / 64 <= 15, "a named barrier (ids 1..15) per multi-warp group");

/* Copy this thread's KN pieces of one row (src: its piece 0; piece k 512
 * bytes on) into its ring slots (slot: piece 0's; piece k at slot +
 * k·FIT_THREADS), then close the copy group: one per row, empty past the last
 * row, since the waits count groups. */
template <int KN>
static __device__ __forceinline__ void fit_stage(uint4 *slot, const char *src, bool valid)
{
    if (valid) {
#pragma unroll
        for (int k = 0; k < KN; ++k) cp_async16(slot + k * FIT_THREADS, src + k * 512);
    }
    cp_async_commit();
}

/* Element j of a piece of 8 BF16 (low half first), exactly. */
static __device__ __forceinline__ float bf16_at(const uint4 &u, int j)
{
    const uint32_t w = j < 2 ? u.x : j < 4 ? u.y : j < 6 ? u.z : u.w;
    return __uint_as_float(j % 2 ? w & 0xFFFF0000u : w << 16);
}

/* ------------------------------------------------------------------------ */
/* The row-group kernels' helpers (norm_fwd.cu, norm_fwd_rowwise.cu)          */
/* ------------------------------------------------------------------------ */

#define FWD_NV 4 /* pieces (16 bytes of x) per thread and row */

/* A piece of x (16 bytes) as its E floats (exact). */
template <int X_BF16>
static __device__ __forceinline__ void raw_floats(const uint4 &u, float (&v)[X_BF16 ? 8 : 4])
{
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
    words_floats<X_BF16, X_BF16 ? 8 : 4>(w, v);
}

/* Σx over a row-group thread's pieces of xr: four partial sums, added
 * pairwise (zeros where it has no piece). */
template <int X_BF16>
static __device__ __forceinline__ float thread_sum(const uint4 (&xr)[FWD_NV], int room)
{
    constexpr int E = X_BF16 ? 8 : 4;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int k = 0; k < FWD_NV; ++k) {
        if (32 * k >= room) continue; /* zeros there anyway */
        float v[E];
        raw_floats<X_BF16>(xr[k], v);
#pragma unroll
        for (int j = 0; j < E; ++j) acc[j % 4] += v[j];
    }
    return pairwise_sum(acc);
}

/* q[j % 4] += (x - m)² over a row-group thread's own columns of xr (fmaf). */
template <int X_BF16>
static __device__ __forceinline__ void deviations(float (&q)[4], const uint4 (&xr)[FWD_NV], float m, int c0, int cols,
                                                  int room)
{
    constexpr int E = X_BF16 ? 8 : 4;
#pragma unroll
    for (int k = 0; k < FWD_NV; ++k) {
        const int c = c0 + 32 * k * E;
        if (32 * k >= room) continue;
        float v[E];
        raw_floats<X_BF16>(xr[k], v);
        if (c + E <= cols) {
#pragma unroll
            for (int j = 0; j < E; ++j) {
                const float d = v[j] - m;
                q[j % 4] = __fmaf_rn(d, d, q[j % 4]);
            }
        } else {
#pragma unroll
            for (int j = 0; j < E; ++j) {
                const float d = v[j] - m;
                if (c + j < cols) q[j % 4] = __fmaf_rn(d, d, q[j % 4]);
            }
        }
    }
}


/* The row group's FWD_NV pieces of x of row `row` into registers (zero
 * words where the thread has no piece). room: see the kernels. */
template <int X_BF16>
static __device__ __forceinline__ void load_row(uint4 (&xr)[FWD_NV], const void *x, int64_t row, int cols, int c0,
                                                int room, int w)
{
    constexpr int E = X_BF16 ? 8 : 4;
    const char *xrow = (const char *)x + row * cols * (X_BF16 ? 2 : 4);
#pragma unroll
    for (int k = 0; k < FWD_NV; ++k) {
        if (32 * k < room) {
            uint32_t r[4];
            load_words<X_BF16, E, int>(r, xrow, c0 + 32 * k * E, cols, w);
            xr[k] = make_uint4(r[0], r[1], r[2], r[3]);
        } else {
            xr[k] = make_uint4(0u, 0u, 0u, 0u);
        }
    }
}


/* The row-group kernels' layout (norm_fwd.cu's two, norm_fwd_rowwise.cu's): block THREADS, split into THREADS /
 * tpr row groups of tpr consecutive threads (nw = tpr / 32 warps). Group g of
 * block b takes rows b·groups + g, then every gridDim.x·groups rows after (a
 * persistent grid: at most 1024 / THREADS blocks per SM, no more than the
 * rows need). Piece P of a row is its columns E·P .. E·P + E-1 (E = 8 BF16
 * or 4 FP32: 16 bytes of x); of the row's np pieces, warp w of the group
 * owns the span of 32·kn starting at 32·kn·w (kn = ceil(np / 32nw) <=
 * FWD_NV), and its lane l the pieces 32·kn·w + 32k + l, k < kn, that are <
 * np: a warp reads 512 contiguous bytes per k, and a piece's place depends
 * on k only through a constant offset. A thread holds x there as raw words
 * (this row's in xr), joins the row's statistics and writes those columns
 * of y. Dynamic shared memory: the FP32 gain (1 + gamma when zero centred)
 * and, for LayerNorm, beta, as NPL float4 planes per piece (gain elements
 * 4h .. 4h+3 in plane h < E/4, beta's in plane E/4 + h), piece P plane h at
 * float4 ((P / 32)·NPL + h)·32 + P % 32: a warp's reads are 512 contiguous
 * bytes. The group's thread 0 writes mu and rsigma; thread 0 of block 0
 * writes scale_inv; each block adds its amax with one atomic. */
#define ROWS_LAYOUT                                                                                                    \
    const int tpr = p.tpr, group = threadIdx.x / tpr, lane = threadIdx.x & 31;                                         \
    const int groups = THREADS / tpr, nw = tpr >> 5, first = group * nw, bar = 1 + group;                              \
    const int w = (threadIdx.x >> 5) - first; /* warp within the group */                                              \
    const int cols = (int)p.cols, np = (cols + E - 1) / E;                                                             \
    const int kn = (np + 32 * nw - 1) / (32 * nw); /* pieces per lane, <= FWD_NV */                                    \
    const int p0 = 32 * kn * w + lane;             /* this thread's piece k is p0 + 32k */                             \
    const int end = np < 32 * kn * (w + 1) ? np : 32 * kn * (w + 1);                                                   \
    const int room = end - p0; /* piece k is ours iff 32k < room */                                                    \
    const int c0 = p0 * E;     /* its column is c0 + 32kE */                                                           \
    const float4 *gbt = gb + (size_t)(kn * w * NPL) * 32 + lane; /* piece k plane h: gbt[(k·NPL + h)·32] */            \
    const float inv_n = 1.0f / (cols > 0 ? (float)cols : 1.0f);  /* the statistics scale sums by it */                 \
    const int64_t rows = p.rows;                                                                                       \
    const int stride = (int)gridDim.x * groups; /* the launcher keeps the grid to what the GPU holds */               \
    int64_t row = (int64_t)blockIdx.x * groups + group

/* The outputs u of a row-group thread's piece k (x in raw words; gbt: see
 * ROWS_LAYOUT): (x·rs)·g, or fmaf((x - mu)·rs, g, beta), in the CPU
 * oracle's order; rounded to BF16 and back when HP_BF16 (the row-wise
 * kernel's values, store_piece's RNE, so a BF16 store of them is exact). */
template <int X_BF16, int RMS, int HP_BF16>
static __device__ __forceinline__ void piece_values(float (&u)[X_BF16 ? 8 : 4], const uint4 &x, const float4 *gbt,
                                                    int k, float mu, float rs)
{
    constexpr int E = X_BF16 ? 8 : 4, NPL = (E / 4) * (RMS ? 1 : 2);
    float v[E];
    raw_floats<X_BF16>(x, v);
#pragma unroll
    for (int h = 0; h < E / 4; ++h) {
        const float4 g4 = gbt[(k * NPL + h) * 32];
        const float g[4] = {g4.x, g4.y, g4.z, g4.w};
        if (RMS) {
#pragma unroll
            for (int i = 0; i < 4; ++i) u[4 * h + i] = (v[4 * h + i] * rs) * g[i];
        } else {
            const float4 b4 = gbt[(k * NPL + E / 4 + h) * 32];
            const float b[4] = {b4.x, b4.y, b4.z, b4.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) u[4 * h + i] = __fmaf_rn((v[4 * h + i] - mu) * rs, g[i], b[i]);
        }
    }
    if (HP_BF16)
#pragma unroll
        for (int j = 0; j < E; ++j) u[j] = f8i_bf16_to_float(f8i_bf16_from_float(u[j]));
}

/* The registers kernels' start (norm_fwd.cu's, norm_fwd_rowwise.cu's): the
 * group's first row of x into xr, in flight while the block fills the
 * gamma/beta planes gb; xn (the next row's) zeroed. */
template <int X_BF16, int RMS, int THREADS>
static __device__ __forceinline__ void regs_start(uint4 (&xr)[FWD_NV], uint4 (&xn)[FWD_NV], float4 *gb,
                                                  const norm_fwd_params &p, int64_t row, int cols, int c0, int room,
                                                  int np)
{
    const bool live = row < p.rows;
    load_row<X_BF16>(xr, p.x, live ? row : 0, cols, c0, live ? room : 0, p.w_x);
#pragma unroll
    for (int k = 0; k < FWD_NV; ++k) xn[k] = make_uint4(0u, 0u, 0u, 0u);
    fill_params<X_BF16, RMS, THREADS>(gb, p, cols, np);
}

/* mu (LayerNorm; 0 for RMSNorm) and rsigma of the row a row-group thread
 * holds in xr: group totals of Σx, then of Σ(x - mu)² (x² for RMSNorm), two
 * passes over the registers. red: the kernel's two red arrays ([2][warps]),
 * slot the one the next total uses (advanced). */
template <int X_BF16, int RMS, int W>
static __device__ __forceinline__ float2 row_stats(const uint4 (&xr)[FWD_NV], float (&red)[2][W], int &slot, int nw,
                                                   int first, int bar, int c0, int cols, int room, float inv_n,
                                                   float eps)
{
    float mu = 0.0f;
    if (!RMS) {
        mu = group_total(thread_sum<X_BF16>(xr, room), nw, first, red[slot], bar) * inv_n;
        slot ^= 1;
    }
    float q[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    deviations<X_BF16>(q, xr, mu, c0, cols, room);
    const float rs = rsqrtf(group_total(pairwise_sum(q), nw, first, red[slot], bar) * inv_n + eps);
    slot ^= 1;
    return make_float2(mu, rs);
}

/* ------------------------------------------------------------------------ */
/* Row-wise scaling's helpers (norm_fwd_rowwise.cu, norm_fwd_fit_rowwise.cu) */
/* ------------------------------------------------------------------------ */

/* The max of v over a row group (group_total's layout and barrier; max is
 * exact in any order, so every group member gets the same bits). */
static __device__ __forceinline__ float group_max(float v, int nw, int first, float *red, int bar)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    if (nw == 1) return v;
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    asm volatile("bar.sync %0, %1;" ::"r"(bar), "r"(nw * 32) : "memory");
    float m = 0.0f;
    for (int k = 0; k < nw; ++k) m = fmaxf(m, red[first + k]);
    return m;
}

/* The column maxima of one piece (E columns) at slot: zeroed, and
 * max(themselves, |u|) (fmaxf: NaN ignored, as the cast's amax). As BF16
 * bits where u is BF16 (HP_BF16: its max is one of its values, exact; half
 * the bytes: E/2 words, 8 or 16 bytes), else E floats (16 or 32 bytes). */
template <int E, int HP_BF16>
static __device__ __forceinline__ void cmax_zero(char *slot)
{
    if constexpr (HP_BF16 && E == 8) *(uint4 *)slot = make_uint4(0u, 0u, 0u, 0u);
    else if constexpr (HP_BF16) *(uint2 *)slot = make_uint2(0u, 0u);
    else
#pragma unroll
        for (int h = 0; h < E / 4; ++h) ((float4 *)slot)[h] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

template <int E, int HP_BF16>
static __device__ __forceinline__ void cmax_piece(char *slot, const float (&u)[E])
{
    if constexpr (HP_BF16) {
        uint32_t x[E / 2];
        if constexpr (E == 8) {
            const uint4 w = *(const uint4 *)slot;
            x[0] = w.x, x[1] = w.y, x[2] = w.z, x[3] = w.w;
        } else {
            const uint2 w = *(const uint2 *)slot;
            x[0] = w.x, x[1] = w.y;
        }
#pragma unroll
        for (int i = 0; i < E / 2; ++i) { /* u is BF16-exact: so is the max, and >> 16 loses nothing */
            const float lo = fmaxf(__uint_as_float(x[i] << 16), fabsf(u[2 * i]));
            const float hi = fmaxf(__uint_as_float(x[i] & 0xFFFF0000u), fabsf(u[2 * i + 1]));
            x[i] = (__float_as_uint(lo) >> 16) | (__float_as_uint(hi) & 0xFFFF0000u);
        }
        if constexpr (E == 8) *(uint4 *)slot = make_uint4(x[0], x[1], x[2], x[3]);
        else *(uint2 *)slot = make_uint2(x[0], x[1]);
    } else {
#pragma unroll
        for (int h = 0; h < E / 4; ++h) {
            float4 m = ((float4 *)slot)[h];
            m.x = fmaxf(m.x, fabsf(u[4 * h])), m.y = fmaxf(m.y, fabsf(u[4 * h + 1]));
            m.z = fmaxf(m.z, fabsf(u[4 * h + 2])), m.w = fmaxf(m.w, fabsf(u[4 * h + 3]));
            ((float4 *)slot)[h] = m;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Launchers                                                                 */
/* ------------------------------------------------------------------------ */

/* The fit layout's pieces a lane (KN) for p's x, or 0 where the layout does
 * not cover it: BF16 x in 16-byte aligned rows of 256·nw·KN columns, nw =
 * p->tpr / 32 = 2, 4 or 8 warps, KN <= 4. p->tpr must be the row-group
 * kernels' choice: the fewest threads that cover the row with FWD_NV pieces
 * each, so that KN is 3 or 4 (KN = 2 would have taken half the threads). */
int f8i_norm_fwd_fit_kn(const norm_fwd_params *p);

/* A fit kernel's persistent grid for p: as many blocks of FIT_THREADS as are
 * resident at once, FIT_MIN_BLOCKS a SM or fewer where smem bytes of dynamic
 * shared memory a block do not fit them, or fewer when the rows need fewer
 * (groups: row groups a block). Opts `kernel` in to more than 48 KB. */
f8_status f8i_norm_fwd_fit_grid(f8_ctx *ctx, const norm_fwd_params *p, const void *kernel, size_t smem, int groups,
                                unsigned *grid);

/* The fit kernel (norm_fwd_fit.cu): 1 when it can run p (the fit layout's
 * x, E4M3 or BF16 y), and its launch. */
int f8i_norm_fwd_fit_fits(const norm_fwd_params *p);
f8_status f8i_norm_fwd_fit_launch(f8_ctx *ctx, const norm_fwd_params *p);

/* The row-wise fused forward on the fit layout (norm_fwd_fit_rowwise.cu):
 * 1 when it can run p (the fit layout's x, E4M3 or E5M2 codes in 8-byte
 * aligned rows, u rounded to BF16, y_hp NULL or 16-byte aligned), and its
 * launch, which checks the launch (col_amax, if set, zeroed before it). */
int f8i_norm_fwd_fit_row_fits(const norm_fwd_params *p);
f8_status f8i_norm_fwd_fit_row_launch(f8_ctx *ctx, const norm_fwd_params *p);

/* The row-wise fused forward (norm_fwd_rowwise.cu) of p, its row-group
 * layout set (tpr; kn pieces a lane) with dynamic shared memory smem for
 * the gamma/beta planes (the registers kernel's) and, with col_amax, the
 * column maxima after them (norm_row_cmax_bytes), on a grid of `grid`
 * blocks of 512 threads. */
f8_status f8i_norm_fwd_row_launch(f8_ctx *ctx, const norm_fwd_params *p, size_t smem, unsigned grid);

/* Bytes of the row-wise kernel's column maxima (col_amax): a slot a column
 * of its np pieces of e for each of its 512 / tpr row groups, BF16 bits
 * (hp BF16) or FP32. */
static inline size_t norm_row_cmax_bytes(int64_t np, int e, int tpr, int hp_bf16)
{
    return (size_t)(512 / tpr) * (size_t)np * (size_t)e * (hp_bf16 ? 2u : 4u);
}

/* Rows wider than FWD_MAX_COLS (norm_fwd_wide.cu): picks the kernel, sets
 * p->tpr and p->w_y, launches and checks the launch. */
f8_status f8i_norm_fwd_wide_launch(f8_ctx *ctx, norm_fwd_params *p);

#endif /* F8_CUDA_NORM_FWD_CUH */
