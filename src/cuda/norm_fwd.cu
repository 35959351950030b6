/*
 * norm_fwd.cu — LayerNorm / RMSNorm forward (y FP32, BF16 or FP8 with amax),
 * the contract f8i_norm_fwd_args of backend.h.
 *
 * Design note. A row is reduced by a group of threads and never leaves
 * registers between the statistics and the output.
 *  - Rows up to FWD_MAX_COLS = 8192 columns (the common case): the
 *    row-group kernel, a persistent grid of blocks (as many as are resident
 *    at once: the launch bounds guarantee it, so no occupancy query is
 *    needed), each split into row groups of tpr threads (a power of two,
 *    32..512: the fewest that cover the row with FWD_NV = 4 pieces each, a
 *    piece being the 16 bytes of x a thread moves at once: 8 BF16 or 4 FP32
 *    elements). A group walks rows group, group + groups in the grid, ...;
 *    its threads keep x as the raw 16-byte words (BF16 stays 2 bytes an
 *    element) and convert each time they read it. x reaches the registers
 *    one of two ways. With one row loaded ahead into a second register
 *    buffer (FWD_CFG_REGS, the only way for rows that are not 16-byte
 *    aligned), an SM has 8 rows (64 KB) in flight. When x's rows are 16-byte
 *    aligned the kernel stages x through shared memory instead: every thread
 *    copies its own pieces of the row STAGES rows ahead with cp.async into
 *    its own slots of a ring, and refills a slot right after reading it into
 *    registers, so a group has STAGES rows in flight while it computes and
 *    needs no registers for them. A thread reads back only what it copied
 *    itself (cp.async.wait_group orders it), so the ring needs no barrier;
 *    a slot is refilled only after the row's first pass has consumed the
 *    registers read from it. Measured on the H200 at 8192 x 4096 BF16 ->
 *    E4M3 (us, LayerNorm / RMSNorm, the second of two runs): registers
 *    39.1 / 34.1 (the RMS build spills 24 bytes), 2 stages in 512-thread
 *    blocks 39.3 / 33.6, 2 stages in 1024-thread blocks 38.0 / 33.5, 3
 *    stages in 1024-thread blocks 40.0 / 34.4 (the first run agreed within
 *    5%); the register kernel before the staging, whose code
 *    norm_fwd_regs_kernel keeps (a shared kernel for both ways spilled 24
 *    bytes where it spills 8), took 31.7 us for RMSNorm. Staging gains a few
 *    percent at most for LayerNorm and a deeper ring loses: the bytes in
 *    flight are not what holds it near 60% of copy bandwidth; the per-row
 *    chain of three passes and two barrier-separated reductions is the
 *    likelier limit. So LayerNorm can also take its statistics from one
 *    merge (CHAN, where every thread holds the same number of elements):
 *    each thread's (Σx, Σ(x - its mean)²) over its registers, merged with
 *    Chan's formula in a butterfly over the warp and then over the group's
 *    warps behind one barrier (group_chan). Each norm has its default
 *    (FWD_DEFAULT_LN, FWD_DEFAULT_RMS); every configuration stays selectable
 *    (f8i_norm_fwd_args.variant) so the benchmark compares them on the
 *    device. The row's sums are warp shuffles plus, for a
 *    multi-warp group, one word per warp through shared memory behind a
 *    named barrier of the group's threads only (bar.sync id, tpr), so groups
 *    never wait for each other. gamma (1 + gamma when zero centred) and beta
 *    are converted to FP32 into shared memory once per block, laid out so
 *    that a warp's 16-byte reads are conflict-free and a piece's place is a
 *    constant offset. The per-row statistics use 1/cols once and rsqrtf
 *    rather than divisions.
 *  - Wider rows, up to 16384 columns, take the older one-row-per-group
 *    kernel: a block of NORM_THREADS holds NORM_THREADS / tpr rows, each
 *    thread FWD_NV_LARGE pieces of NORM_VEC = 8 elements as floats; wider
 *    still, the "wide" kernel: a block per row streams it from memory once
 *    per pass, element by element.
 * In all of them the mean and the variance are two passes over the row (no
 * cancellation from E[x²] - E[x]²). Row sums are in FP32 in a fixed order
 * (butterfly within a warp, then warps in index order; a row-group thread
 * first keeps four partial sums, added pairwise, and accumulates the squared
 * deviations with fmaf): a re-run gives the same bits, and every row-group
 * configuration but CHAN gives the same bits (CHAN rounds its M2 and mu
 * differently, within the tolerance the CPU oracle is held to). The older kernels
 * take rsigma = 1.0f / sqrtf(var + eps) with IEEE sqrt and division; the
 * row-group kernel mu = Σx · (1/cols) and rsigma = rsqrtf(Σ(x-mu)² · (1/cols)
 * + eps) (within 2 ulps). The elementwise steps follow the CPU oracle's
 * order (src/cpu/norm.c; the build passes -fmad=false), except that the
 * row-group kernel adds beta with one fmaf: y = fmaf((x - mu)·rs, g, beta).
 * FP8 codes are the cast's: cvt.rn.satfinite of v · scale.
 */
#include <limits.h>
#include <stdint.h>

#include "norm_fwd.cuh"

#define NORM_THREADS 256     /* the older forward's block (and the wide forward's) */
#define FWD_NV 4             /* row-group kernel: pieces (16 bytes of x) per thread and row */
#define FWD_NV_LARGE 8       /* the older forward: pieces of NORM_VEC per thread, rows up to 16384 */
#define FWD_SMEM_SM (228 * 1024) /* sm_90's shared memory per SM: the resident blocks share it */
#define FWD_SMEM_BLOCK 2048       /* what each block takes beside its dynamic part (1 KB reserved, static arrays) */

/* The row-group kernels' configurations (f8i_norm_fwd_args.variant; 0 picks
 * the default below), numbered as bench_modules prints them: block threads,
 * blocks per SM (1024 / threads, the launch bounds: <= 64 registers),
 * stages of x in shared memory (0: one row ahead in registers) and the
 * statistics (CHAN: one merge a row, LayerNorm only; RMSNorm runs the same
 * configuration without it, having one reduction anyway). */
enum {
    FWD_CFG_AUTO = 0,
    FWD_CFG_REGS,         /* 1 "regs":        512, registers */
    FWD_CFG_S2_512,       /* 2 "s2/512":      512, 2 stages */
    FWD_CFG_S2_1024,      /* 3 "s2/1024":     1024, 2 stages */
    FWD_CFG_S3_1024,      /* 4 "s3/1024":     1024, 3 stages */
    FWD_CFG_CHAN_REGS,    /* 5 "chan/regs":   1 with one merge */
    FWD_CFG_CHAN_S2_512,  /* 6 "chan/s2/512": 2 with one merge */
    FWD_CFG_CHAN_S2_1024, /* 7 "chan/s2/1024": 3 with one merge */
    FWD_CFG_FIT,          /* 8 "fit": norm_fwd_fit.cu, where it can run; else the norm's default below */
    FWD_CFG_COUNT
};

/* The defaults, one per norm: what variant 0 (the modules) runs where the
 * fit kernel (norm_fwd_fit.cu, variant 8) cannot: FP32 x or y, unaligned
 * rows, widths its layout does not cover. RMSNorm: registers (31.7 us, 75.5%
 * of copy on the H200 at 8192 x 4096). LayerNorm: 2 stages in 1024-thread
 * blocks, its fastest measured (38.0 us). A default that cannot run a shape
 * falls back (cfg_fallback). */
#define FWD_DEFAULT_LN FWD_CFG_S2_1024
#define FWD_DEFAULT_RMS FWD_CFG_REGS

static_assert(NORM_THREADS % 32 == 0, "whole warps");
/* FP32 x (4 elements a piece) at FWD_MAX_COLS: tpr = 512, one group a 512-thread block. */
static_assert(FWD_MAX_COLS <= 512 * FWD_NV * 4, "a row group fits a 512-thread block");
static_assert(512 / 64 <= 15, "a named barrier (ids 1..15) per multi-warp group of a 512-thread block");
static_assert(2 * FWD_MAX_COLS * 2 * 4 <= 160 * 1024, "gamma/beta of two resident 512-thread blocks fit an SM");

/* ------------------------------------------------------------------------ */
/* Device helpers                                                            */
/* ------------------------------------------------------------------------ */

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

/* Chan's merge of two equal-count parts, this lane's (sum S, squared
 * deviations from its own mean M) and lane ^ o's: with m elements a part
 * (inv_m = 1/m, half_m = m/2), M += M' + (m/2)·((S' - S)/m)², S += S'.
 * Symmetric in the two parts (a - b = -(b - a) exactly, sums commute), so
 * both lanes get the same bits. inv_m and half_m move on to the merged
 * part's count. */
static __device__ __forceinline__ void chan_merge(float &S, float &M, float &inv_m, float &half_m, int o)
{
    const float Sb = __shfl_xor_sync(0xFFFFFFFFu, S, o), Mb = __shfl_xor_sync(0xFFFFFFFFu, M, o);
    const float d = (Sb - S) * inv_m; /* the parts' mean difference, up to sign */
    M = __fmaf_rn(d * d, half_m, M + Mb);
    S = S + Sb;
    inv_m *= 0.5f;
    half_m *= 2.0f;
}

/* One-merge statistics (CHAN), for a row group in which every thread holds
 * nt elements (inv_nt = 1/nt, half_nt = nt/2). thread_chan: the thread's
 * (S, M) = (Σx, Σ(x - S/nt)²) over its registers, two passes that need no
 * row mean. group_chan: the row's (Σx, Σ(x - mean)²), merged by chan_merge
 * across the warp (butterfly), then for nw > 1 each warp's pair through
 * red[warp] and, after one named barrier (id bar, the group's threads),
 * across the group's warps: lane l takes warp l mod nw's pair and the
 * butterfly goes on over offsets < nw. Every merge joins equal counts, and
 * every thread of the group ends with the same bits. red alternates between
 * two arrays as in group_total. */
template <int X_BF16>
static __device__ __forceinline__ float2 thread_chan(const uint4 (&xr)[FWD_NV], int c0, int cols, int room,
                                                     float inv_nt)
{
    const float S = thread_sum<X_BF16>(xr, room);
    float q[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    deviations<X_BF16>(q, xr, S * inv_nt, c0, cols, room);
    return make_float2(S, pairwise_sum(q));
}

static __device__ __forceinline__ float2 group_chan(float2 sm, float inv_nt, float half_nt, int nw, int first,
                                                    float2 *red, int bar)
{
    float S = sm.x, M = sm.y, inv_m = inv_nt, half_m = half_nt;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) chan_merge(S, M, inv_m, half_m, o);
    if (nw == 1) return make_float2(S, M);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = make_float2(S, M);
    asm volatile("bar.sync %0, %1;" ::"r"(bar), "r"(nw * 32) : "memory");
    const float2 w = red[first + (threadIdx.x & (nw - 1))];
    S = w.x, M = w.y;
    for (int o = 1; o < nw; o <<= 1) chan_merge(S, M, inv_m, half_m, o);
    return make_float2(S, M);
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

/* y of the thread's pieces of a row (o = (x·rs)·g, or fmaf((x - mu)·rs, g,
 * beta)), and their amax. gbt: see the kernels. */
template <int X_BF16, int YK, int RMS>
static __device__ __forceinline__ void store_row(char *yrow, const uint4 (&xr)[FWD_NV], const float4 *gbt, float mu,
                                                 float rs, float s, float &amax, int c0, int cols, int room, int w)
{
    constexpr int E = X_BF16 ? 8 : 4, NPL = (E / 4) * (RMS ? 1 : 2);
    constexpr int FP8 = YK == Y_E4M3 || YK == Y_E5M2;
#pragma unroll
    for (int k = 0; k < FWD_NV; ++k) {
        const int c = c0 + 32 * k * E;
        if (32 * k >= room) continue;
        float v[E], o[E];
        raw_floats<X_BF16>(xr[k], v);
#pragma unroll
        for (int h = 0; h < E / 4; ++h) {
            const float4 g4 = gbt[(k * NPL + h) * 32];
            const float g[4] = {g4.x, g4.y, g4.z, g4.w};
            if (RMS) {
#pragma unroll
                for (int i = 0; i < 4; ++i) o[4 * h + i] = (v[4 * h + i] * rs) * g[i];
            } else {
                const float4 b4 = gbt[(k * NPL + E / 4 + h) * 32];
                const float b[4] = {b4.x, b4.y, b4.z, b4.w};
#pragma unroll
                for (int i = 0; i < 4; ++i) o[4 * h + i] = __fmaf_rn((v[4 * h + i] - mu) * rs, g[i], b[i]);
            }
        }
        /* Past the row's end g = b = 0 and x = 0: o is ±0 or NaN there,
         * neither of which moves fmaxf. */
        if (FP8)
#pragma unroll
            for (int j = 0; j < E; ++j) amax = fmaxf(amax, fabsf(o[j]));
        store_piece<YK, E, int>(yrow, c, cols, o, s, w);
    }
}

/* Stage row `row`'s pieces of this thread into its ring slots (slot: piece
 * 0's; piece k at slot + k·THREADS), then close the copy group. Rows are
 * 16-byte aligned and a whole number of pieces here. */
template <int X_BF16, int THREADS>
static __device__ __forceinline__ void stage_row(uint4 *slot, const void *x, int64_t row, int64_t rows, int cols,
                                                 int c0, int room)
{
    if (row < rows) {
        const char *src = (const char *)x + (row * cols + c0) * (X_BF16 ? 2 : 4);
#pragma unroll
        for (int k = 0; k < FWD_NV; ++k)
            if (32 * k < room) cp_async16(slot + k * THREADS, src + 32 * k * 16);
    }
    cp_async_commit(); /* one group per row, empty or not: the waits count them */
}

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

/* The row-group kernels' layout (both): block THREADS, split into THREADS /
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
 * writes scale_inv; each block adds its amax with one atomic. CHAN (LayerNorm
 * only; every thread holds kn full pieces): the statistics of group_chan,
 * one barrier a row instead of two. */
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

/* Forward, rows up to FWD_MAX_COLS columns, x one row ahead in registers
 * (FWD_CFG_REGS, FWD_CFG_CHAN_REGS). Layout: ROWS_LAYOUT, THREADS = 512; the
 * next row's x in xn. */
template <int X_BF16, int YK, int RMS, int CHAN>
static __global__ void __launch_bounds__(512, 2) norm_fwd_regs_kernel(norm_fwd_params p)
{
    constexpr int THREADS = 512, E = X_BF16 ? 8 : 4, YS = YK == Y_FP32 ? 4 : YK == Y_BF16 ? 2 : 1;
    constexpr int FP8 = YK == Y_E4M3 || YK == Y_E5M2;
    constexpr int NPL = (E / 4) * (RMS ? 1 : 2); /* float4 planes per piece */
    static_assert(!(CHAN && RMS), "one reduction is all RMSNorm has");
    extern __shared__ float4 gb[];
    [[maybe_unused]] __shared__ float red[2][THREADS / 32]; /* [slot][warp] */
    [[maybe_unused]] __shared__ float2 red2[CHAN ? 2 : 1][THREADS / 32];
    ROWS_LAYOUT;
    const float inv_nt = 1.0f / (float)(kn * E), half_nt = 0.5f * (float)(kn * E); /* CHAN */

    /* The first row's x, in flight while gamma/beta are fetched. */
    uint4 xr[FWD_NV], xn[FWD_NV];
    load_row<X_BF16>(xr, p.x, row < rows ? row : 0, cols, c0, row < rows ? room : 0, p.w_x);
#pragma unroll
    for (int k = 0; k < FWD_NV; ++k) xn[k] = make_uint4(0u, 0u, 0u, 0u);
    fill_params<X_BF16, RMS, THREADS>(gb, p, cols, np);

    const float s = FP8 ? *p.scale : 1.0f;
    float amax = 0.0f;
    int slot = 0; /* which red array the next group total uses */
    while (row < rows) {
        /* The next row's loads go out before this row's arithmetic. */
        const int64_t next = row + stride;
        if (next < rows) load_row<X_BF16>(xn, p.x, next, cols, c0, room, p.w_x);

        /* mu, then m2 = Σ (x - mu)² over the row's own columns (x² for
         * RMSNorm): group totals, two passes over the registers; or both
         * from one merge (CHAN). */
        float mu = 0.0f, rs;
        if constexpr (CHAN) {
            const float2 sm = group_chan(thread_chan<X_BF16>(xr, c0, cols, room, inv_nt), inv_nt, half_nt, nw, first,
                                         red2[slot], bar);
            mu = sm.x * inv_n;
            rs = rsqrtf(sm.y * inv_n + p.eps);
            slot ^= 1;
        } else {
            if (!RMS) {
                mu = group_total(thread_sum<X_BF16>(xr, room), nw, first, red[slot], bar) * inv_n;
                slot ^= 1;
            }
            float q[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            deviations<X_BF16>(q, xr, mu, c0, cols, room);
            rs = rsqrtf(group_total(pairwise_sum(q), nw, first, red[slot], bar) * inv_n + p.eps);
            slot ^= 1;
        }
        if (threadIdx.x == (unsigned)(first * 32)) {
            if (!RMS && p.mu != NULL) p.mu[row] = mu;
            if (p.rsigma != NULL) p.rsigma[row] = rs;
        }
        store_row<X_BF16, YK, RMS>((char *)p.y + row * cols * YS, xr, gbt, mu, rs, s, amax, c0, cols, room, p.w_y);
#pragma unroll
        for (int k = 0; k < FWD_NV; ++k) xr[k] = xn[k];
        row = next;
    }
    if (FP8) {
        if (p.scale_inv != NULL && blockIdx.x == 0 && threadIdx.x == 0) *p.scale_inv = 1.0f / s;
        if (p.amax != NULL) block_amax_atomic<THREADS>(amax, p.amax);
    }
}

/* Forward, rows up to FWD_MAX_COLS columns, x staged through shared memory
 * STAGES rows ahead (16-byte aligned rows). Layout: ROWS_LAYOUT; after the
 * gamma/beta planes the ring, STAGES x kn x THREADS slots of 16 bytes, stage
 * s piece k of thread t at slot (s·kn + k)·THREADS + t: a thread copies its
 * own pieces of the row STAGES ahead with cp.async and reads back only what
 * it copied (cp.async.wait_group orders it), so the ring needs no barrier. A
 * slot is refilled only after the row's first pass has consumed the
 * registers read from it. */
template <int X_BF16, int YK, int RMS, int THREADS, int STAGES, int CHAN>
static __global__ void __launch_bounds__(THREADS, 1024 / THREADS) norm_fwd_staged_kernel(norm_fwd_params p)
{
    constexpr int E = X_BF16 ? 8 : 4, YS = YK == Y_FP32 ? 4 : YK == Y_BF16 ? 2 : 1;
    constexpr int FP8 = YK == Y_E4M3 || YK == Y_E5M2;
    constexpr int NPL = (E / 4) * (RMS ? 1 : 2); /* float4 planes per piece */
    static_assert(STAGES >= 1, "the register kernel keeps x without a ring");
    static_assert(!(CHAN && RMS), "one reduction is all RMSNorm has");
    extern __shared__ float4 gb[];
    [[maybe_unused]] __shared__ float red[2][THREADS / 32]; /* [slot][warp] */
    [[maybe_unused]] __shared__ float2 red2[CHAN ? 2 : 1][THREADS / 32];
    ROWS_LAYOUT;
    const float inv_nt = 1.0f / (float)(kn * E), half_nt = 0.5f * (float)(kn * E); /* CHAN */
    uint4 *ring = (uint4 *)(gb + (size_t)((np + 31) / 32) * NPL * 32) + threadIdx.x; /* stage s: + s·kn·THREADS */

    /* The first rows' x, in flight while gamma/beta are fetched. */
#pragma unroll
    for (int s = 0; s < STAGES; ++s)
        stage_row<X_BF16, THREADS>(ring + s * kn * THREADS, p.x, row + (int64_t)s * stride, rows, cols, c0, room);
    fill_params<X_BF16, RMS, THREADS>(gb, p, cols, np);

    const float s = FP8 ? *p.scale : 1.0f;
    float amax = 0.0f;
    int slot = 0;  /* which red array the next group total uses */
    int stage = 0; /* the ring stage holding this row */
    while (row < rows) {
        uint4 xr[FWD_NV];
        uint4 *at = ring + stage * kn * THREADS;
        cp_async_wait<STAGES - 1>(); /* this row's group, the oldest of STAGES */
#pragma unroll
        for (int k = 0; k < FWD_NV; ++k) xr[k] = 32 * k < room ? at[k * THREADS] : make_uint4(0u, 0u, 0u, 0u);
        stage = stage + 1 == STAGES ? 0 : stage + 1;

        float mu = 0.0f, rs;
        if constexpr (CHAN) {
            const float2 t = thread_chan<X_BF16>(xr, c0, cols, room, inv_nt);
            stage_row<X_BF16, THREADS>(at, p.x, row + (int64_t)STAGES * stride, rows, cols, c0, room);
            const float2 sm = group_chan(t, inv_nt, half_nt, nw, first, red2[slot], bar);
            mu = sm.x * inv_n;
            rs = rsqrtf(sm.y * inv_n + p.eps);
            slot ^= 1;
        } else {
            if (!RMS) {
                const float sum = thread_sum<X_BF16>(xr, room);
                stage_row<X_BF16, THREADS>(at, p.x, row + (int64_t)STAGES * stride, rows, cols, c0, room);
                mu = group_total(sum, nw, first, red[slot], bar) * inv_n;
                slot ^= 1;
            }
            float q[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            deviations<X_BF16>(q, xr, mu, c0, cols, room);
            const float m2 = pairwise_sum(q);
            if (RMS) stage_row<X_BF16, THREADS>(at, p.x, row + (int64_t)STAGES * stride, rows, cols, c0, room);
            rs = rsqrtf(group_total(m2, nw, first, red[slot], bar) * inv_n + p.eps);
            slot ^= 1;
        }
        if (threadIdx.x == (unsigned)(first * 32)) {
            if (!RMS && p.mu != NULL) p.mu[row] = mu;
            if (p.rsigma != NULL) p.rsigma[row] = rs;
        }
        store_row<X_BF16, YK, RMS>((char *)p.y + row * cols * YS, xr, gbt, mu, rs, s, amax, c0, cols, room, p.w_y);
        row += stride;
    }
    if (FP8) {
        if (p.scale_inv != NULL && blockIdx.x == 0 && threadIdx.x == 0) *p.scale_inv = 1.0f / s;
        if (p.amax != NULL) block_amax_atomic<THREADS>(amax, p.amax);
    }
}
#undef ROWS_LAYOUT

/* Forward, rows wider than FWD_MAX_COLS, up to NORM_THREADS * NV * NORM_VEC
 * columns. Grid: ceil(rows / (NORM_THREADS / tpr)) blocks; block NORM_THREADS.
 * Thread t of a row's tpr-thread group owns pieces t, t + tpr, ... (NV of
 * them, columns 8(t + k·tpr) .. +7) of that row: it holds x there in
 * registers, joins the row's two sums and writes those columns of y. The
 * group's thread 0 writes mu and rsigma; thread 0 of block 0 writes scale_inv. */
template <int X_BF16, int YK, int NV>
static __global__ void __launch_bounds__(NORM_THREADS) norm_fwd_kernel(norm_fwd_params p)
{
    constexpr int FP8 = YK == Y_E4M3 || YK == Y_E5M2;
    __shared__ float red[1][32];
    const int tpr = p.tpr, t = threadIdx.x & (tpr - 1);
    const int64_t row = (int64_t)blockIdx.x * (NORM_THREADS / tpr) + threadIdx.x / tpr;
    const bool live = row < p.rows; /* uniform over the group */
    const int64_t cols = p.cols, base = (live ? row : 0) * cols;
    const void *xrow = (const char *)p.x + base * (X_BF16 ? 2 : 4);
    const float n = cols > 0 ? (float)cols : 1.0f;

    float v[NV][NORM_VEC];
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int64_t c = (int64_t)(t + k * tpr) * NORM_VEC;
        if (live && c < cols) {
            load_piece<X_BF16>(v[k], xrow, c, cols, p.w_x);
        } else {
#pragma unroll
            for (int j = 0; j < NORM_VEC; ++j) v[k][j] = 0.0f;
        }
    }

    float mu = 0.0f;
    if (!p.rms) {
        float s[1] = {0.0f};
#pragma unroll
        for (int k = 0; k < NV; ++k)
#pragma unroll
            for (int j = 0; j < NORM_VEC; ++j) s[0] += v[k][j];
        group_sum<1>(s, tpr, red);
        mu = s[0] / n;
    }
    /* Σ (x - mu)² (mu = 0 for RMS), over the row's own columns only. */
    float q[1] = {0.0f};
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int64_t c = (int64_t)(t + k * tpr) * NORM_VEC;
#pragma unroll
        for (int j = 0; j < NORM_VEC; ++j) {
            const float d = v[k][j] - mu;
            if (c + j < cols) q[0] += d * d;
        }
    }
    group_sum<1>(q, tpr, red);
    const float rs = 1.0f / sqrtf(q[0] / n + p.eps);
    if (live && t == 0) {
        if (p.mu != NULL && !p.rms) p.mu[row] = mu;
        if (p.rsigma != NULL) p.rsigma[row] = rs;
    }

    const float s = FP8 ? *p.scale : 1.0f;
    void *yrow = (char *)p.y + base * (YK == Y_FP32 ? 4 : YK == Y_BF16 ? 2 : 1);
    float a = 0.0f;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const int64_t c = (int64_t)(t + k * tpr) * NORM_VEC;
        if (!live || c >= cols) continue;
        float g[NORM_VEC], b[NORM_VEC], o[NORM_VEC];
        load_param(g, p.gamma, p.p_bf16, c, cols, p.w_p);
        if (!p.rms) load_param(b, p.beta, p.p_bf16, c, cols, p.w_p);
#pragma unroll
        for (int j = 0; j < NORM_VEC; ++j) {
            const float gj = p.zero_centered ? 1.0f + g[j] : g[j];
            o[j] = p.rms ? (v[k][j] * rs) * gj : ((v[k][j] - mu) * rs) * gj + b[j];
            if (FP8 && c + j < cols) a = fmaxf(a, fabsf(o[j]));
        }
        store_piece<YK>(yrow, c, cols, o, s, p.w_y);
    }
    if (FP8) {
        if (p.scale_inv != NULL && blockIdx.x == 0 && threadIdx.x == 0) *p.scale_inv = 1.0f / s;
        if (p.amax != NULL) block_amax_atomic<NORM_THREADS>(a, p.amax);
    }
}

/* Forward, any row length (rows longer than the register kernel holds).
 * Grid: rows blocks; block NORM_THREADS, one row. Thread t owns columns t,
 * t + NORM_THREADS, ... and reads them once per pass: the sum, the squared
 * deviations, the output. Dtypes are read at run time. */
static __global__ void __launch_bounds__(NORM_THREADS) norm_fwd_wide_kernel(norm_fwd_params p)
{
    __shared__ float red[1][32];
    const int64_t row = blockIdx.x, cols = p.cols, base = row * cols;
    const int fp8 = p.y_kind == Y_E4M3 || p.y_kind == Y_E5M2;
    const float n = cols > 0 ? (float)cols : 1.0f;
    float mu = 0.0f;
    if (!p.rms) {
        float s[1] = {0.0f};
        for (int64_t c = threadIdx.x; c < cols; c += NORM_THREADS) s[0] += load_one(p.x, p.x_bf16, base + c);
        group_sum<1>(s, NORM_THREADS, red);
        mu = s[0] / n;
    }
    float q[1] = {0.0f};
    for (int64_t c = threadIdx.x; c < cols; c += NORM_THREADS) {
        const float d = load_one(p.x, p.x_bf16, base + c) - mu;
        q[0] += d * d;
    }
    group_sum<1>(q, NORM_THREADS, red);
    const float rs = 1.0f / sqrtf(q[0] / n + p.eps);
    if (threadIdx.x == 0) {
        if (p.mu != NULL && !p.rms) p.mu[row] = mu;
        if (p.rsigma != NULL) p.rsigma[row] = rs;
    }
    const float s = fp8 ? *p.scale : 1.0f;
    float a = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += NORM_THREADS) {
        const float x = load_one(p.x, p.x_bf16, base + c);
        const float g0 = load_one(p.gamma, p.p_bf16, c);
        const float g = p.zero_centered ? 1.0f + g0 : g0;
        const float o = p.rms ? (x * rs) * g : ((x - mu) * rs) * g + load_one(p.beta, p.p_bf16, c);
        a = fmaxf(a, fabsf(o));
        store_one(p.y, p.y_kind, base + c, o, s);
    }
    if (fp8) {
        if (p.scale_inv != NULL && blockIdx.x == 0 && threadIdx.x == 0) *p.scale_inv = 1.0f / s;
        if (p.amax != NULL) block_amax_atomic<NORM_THREADS>(a, p.amax);
    }
}

/* ------------------------------------------------------------------------ */
/* ------------------------------------------------------------------------ */
/* Launchers                                                                 */
/* ------------------------------------------------------------------------ */

/* Threads, stages and statistics (1: CHAN) of a row-group configuration. */
static void cfg_shape(int cfg, int *threads, int *stages, int *chan)
{
    static const int shape[FWD_CFG_COUNT][3] = {{512, 0, 0}, {512, 0, 0},  {512, 2, 0},  {1024, 2, 0},
                                                {1024, 3, 0}, {512, 0, 1}, {512, 2, 1}, {1024, 2, 1}};
    *threads = shape[cfg][0];
    *stages = shape[cfg][1];
    *chan = shape[cfg][2];
}

/* What runs when configuration cfg cannot: CHAN -> the same without it, 3
 * stages -> 2, 1024 threads -> 512, 2 stages -> registers (which runs any
 * row up to FWD_MAX_COLS). */
static int cfg_fallback(int cfg)
{
    static const int next[FWD_CFG_COUNT] = {FWD_CFG_REGS,    FWD_CFG_REGS,   FWD_CFG_REGS,
                                            FWD_CFG_S2_512,  FWD_CFG_S2_1024, FWD_CFG_REGS,
                                            FWD_CFG_S2_512,  FWD_CFG_S2_1024};
    return next[cfg];
}

/* Dynamic shared memory of configuration cfg: gamma/beta planes (whole spans
 * of 32 pieces, the layout's unit) and the ring. */
static size_t cfg_smem(int cfg, int64_t np, int e, int rms, int kn)
{
    int threads, stages, chan;
    cfg_shape(cfg, &threads, &stages, &chan);
    return (size_t)((np + 31) / 32 * 32) * (size_t)e * sizeof(float) * (rms ? 1 : 2) +
           (size_t)stages * (size_t)kn * (size_t)threads * 16u;
}

/* Can configuration cfg run this launch? Staging needs 16-byte aligned
 * rows of whole pieces (w_x 16); a 1024-thread block needs a named barrier
 * per multi-warp group (ids 1..15: no 64-thread groups); CHAN needs
 * LayerNorm and every thread of a group holding kn whole pieces (np =
 * 32·nw·kn, cols = E·np: most hidden sizes, 4096 included); the blocks of an
 * SM must fit its shared memory. */
static int cfg_fits(int cfg, const norm_fwd_params *p, int64_t np, int e, int kn)
{
    int threads, stages, chan;
    cfg_shape(cfg, &threads, &stages, &chan);
    if (stages > 0 && p->w_x != 16) return 0;
    if (threads == 1024 && p->tpr == 64) return 0;
    if (chan && (p->rms || p->cols != np * e || np != (int64_t)p->tpr * kn)) return 0;
    return cfg_smem(cfg, np, e, p->rms, kn) <= (size_t)(FWD_SMEM_SM / (1024 / threads) - FWD_SMEM_BLOCK);
}

/* A persistent grid: as many blocks as are resident at once (1024 / threads
 * per SM), or fewer when the rows need fewer. */
static unsigned rows_grid(const norm_fwd_params *p, int threads, int sm_count)
{
    const int64_t groups = threads / p->tpr, blocks = (p->rows + groups - 1) / groups;
    const int64_t cap = (int64_t)(sm_count > 0 ? sm_count : 1) * (1024 / threads);
    const int64_t grid = blocks < cap ? blocks : cap;
    return (unsigned)(grid > 0 ? grid : 1);
}

/* Opt in to more than 48 KB of shared memory a block, counting the static
 * arrays beside the dynamic part (a 6144-column BF16 LayerNorm's 48 KB of
 * gamma/beta planes alone left the registers kernel unlaunchable). */
static f8_status set_smem(f8_ctx *ctx, void (*kernel)(norm_fwd_params), size_t smem)
{
    if (smem + FWD_SMEM_BLOCK <= 48 * 1024) return F8_OK;
    return f8i_cuda_smem_optin(ctx, (const void *)kernel, "norm forward: shared-memory opt-in");
}

template <int X_BF16, int YK, int RMS, int CHAN>
static f8_status launch_regs(f8_ctx *ctx, const norm_fwd_params *p, size_t smem)
{
    void (*kernel)(norm_fwd_params) = norm_fwd_regs_kernel<X_BF16, YK, RMS, CHAN>;
    const f8_status st = set_smem(ctx, kernel, smem);
    if (st != F8_OK) return st;
    kernel<<<rows_grid(p, 512, f8i_cuda(ctx)->sm_count), 512, smem, f8i_stream(ctx)>>>(*p);
    return F8_OK;
}

template <int X_BF16, int YK, int RMS, int THREADS, int STAGES, int CHAN>
static f8_status launch_staged(f8_ctx *ctx, const norm_fwd_params *p, size_t smem)
{
    void (*kernel)(norm_fwd_params) = norm_fwd_staged_kernel<X_BF16, YK, RMS, THREADS, STAGES, CHAN>;
    const f8_status st = set_smem(ctx, kernel, smem);
    if (st != F8_OK) return st;
    kernel<<<rows_grid(p, THREADS, f8i_cuda(ctx)->sm_count), THREADS, smem, f8i_stream(ctx)>>>(*p);
    return F8_OK;
}

/* cfg fits (CHAN configurations only with LayerNorm). */
template <int X_BF16, int YK, int RMS>
static f8_status launch_rows_cfg(f8_ctx *ctx, const norm_fwd_params *p, int cfg, size_t smem)
{
    constexpr int C = !RMS; /* CHAN where asked, LayerNorm only */
    switch (cfg) {
    case FWD_CFG_S2_512: return launch_staged<X_BF16, YK, RMS, 512, 2, 0>(ctx, p, smem);
    case FWD_CFG_S2_1024: return launch_staged<X_BF16, YK, RMS, 1024, 2, 0>(ctx, p, smem);
    case FWD_CFG_S3_1024: return launch_staged<X_BF16, YK, RMS, 1024, 3, 0>(ctx, p, smem);
    case FWD_CFG_CHAN_REGS: return launch_regs<X_BF16, YK, RMS, C>(ctx, p, smem);
    case FWD_CFG_CHAN_S2_512: return launch_staged<X_BF16, YK, RMS, 512, 2, C>(ctx, p, smem);
    case FWD_CFG_CHAN_S2_1024: return launch_staged<X_BF16, YK, RMS, 1024, 2, C>(ctx, p, smem);
    default: return launch_regs<X_BF16, YK, RMS, 0>(ctx, p, smem);
    }
}

template <int X_BF16, int YK>
static f8_status launch_rows_n(f8_ctx *ctx, const norm_fwd_params *p, int cfg, size_t smem)
{
    return p->rms ? launch_rows_cfg<X_BF16, YK, 1>(ctx, p, cfg, smem) : launch_rows_cfg<X_BF16, YK, 0>(ctx, p, cfg, smem);
}

template <int X_BF16>
static f8_status launch_rows_y(f8_ctx *ctx, const norm_fwd_params *p, int cfg, size_t smem)
{
    switch (p->y_kind) {
    case Y_FP32: return launch_rows_n<X_BF16, Y_FP32>(ctx, p, cfg, smem);
    case Y_BF16: return launch_rows_n<X_BF16, Y_BF16>(ctx, p, cfg, smem);
    case Y_E4M3: return launch_rows_n<X_BF16, Y_E4M3>(ctx, p, cfg, smem);
    default: return launch_rows_n<X_BF16, Y_E5M2>(ctx, p, cfg, smem);
    }
}

/* The older forward (rows wider than FWD_MAX_COLS). */
template <int X_BF16>
static void launch_fwd_y(const norm_fwd_params *p, unsigned blocks, cudaStream_t stream)
{
    switch (p->y_kind) {
    case Y_FP32: norm_fwd_kernel<X_BF16, Y_FP32, FWD_NV_LARGE><<<blocks, NORM_THREADS, 0, stream>>>(*p); break;
    case Y_BF16: norm_fwd_kernel<X_BF16, Y_BF16, FWD_NV_LARGE><<<blocks, NORM_THREADS, 0, stream>>>(*p); break;
    case Y_E4M3: norm_fwd_kernel<X_BF16, Y_E4M3, FWD_NV_LARGE><<<blocks, NORM_THREADS, 0, stream>>>(*p); break;
    default: norm_fwd_kernel<X_BF16, Y_E5M2, FWD_NV_LARGE><<<blocks, NORM_THREADS, 0, stream>>>(*p); break;
    }
}

/* ------------------------------------------------------------------------ */
/* Backend entry point                                                       */
/* ------------------------------------------------------------------------ */

f8_status f8i_cuda_norm_fwd(f8_ctx *ctx, const f8i_norm_fwd_args *a)
{
    const int fp8 = a->y_dtype == F8_DTYPE_E4M3 || a->y_dtype == F8_DTYPE_E5M2;
    if (!is_fp32_or_bf16(a->x_dtype) || !is_fp32_or_bf16(a->param_dtype) ||
        (!fp8 && !is_fp32_or_bf16(a->y_dtype)))
        return f8i_error(ctx, F8_ERR_DTYPE, "norm forward: dtypes x %s, params %s, y %s not supported",
                         f8_dtype_name(a->x_dtype), f8_dtype_name(a->param_dtype), f8_dtype_name(a->y_dtype));
    if (a->rows <= 0) {
        /* No rows: the FP8 output still gets its own scale_inv. */
        if (!fp8 || a->scale_inv == NULL) return F8_OK;
        return f8i_cuda_reciprocal(ctx, a->scale, a->scale_inv, NULL);
    }

    norm_fwd_params p;
    p.x = a->x;
    p.rows = a->rows;
    p.cols = a->cols;
    p.gamma = a->gamma;
    p.beta = a->beta;
    p.x_bf16 = a->x_dtype == F8_DTYPE_BF16;
    p.p_bf16 = a->param_dtype == F8_DTYPE_BF16;
    p.y_kind = a->y_dtype == F8_DTYPE_FP32 ? Y_FP32
               : a->y_dtype == F8_DTYPE_BF16 ? Y_BF16
               : a->y_dtype == F8_DTYPE_E4M3 ? Y_E4M3
                                             : Y_E5M2;
    p.rms = a->rms != 0;
    p.zero_centered = a->zero_centered != 0;
    p.eps = a->eps;
    p.y = a->y;
    p.scale = a->scale;
    p.amax = fp8 ? a->amax : NULL;
    p.scale_inv = fp8 ? a->scale_inv : NULL;
    p.mu = a->mu;
    p.rsigma = a->rsigma;
    const int y_size = p.y_kind == Y_FP32 ? 4 : p.y_kind == Y_BF16 ? 2 : 1;
    p.w_x = access_width(a->x, a->cols * (p.x_bf16 ? 2 : 4), 16);
    p.w_p = access_width(a->gamma, 0, 16);
    if (!p.rms && access_width(a->beta, 0, 16) < p.w_p) p.w_p = access_width(a->beta, 0, 16);
    cudaStream_t stream = f8i_stream(ctx);

    if (a->cols >= 0 && a->cols <= FWD_MAX_COLS) {
        /* Row groups: pieces of 16 bytes of x, FWD_NV a thread. */
        const int e = p.x_bf16 ? 8 : 4;
        const int64_t np = (a->cols + e - 1) / e;
        int tpr = 32;
        while ((int64_t)tpr * FWD_NV < np) tpr *= 2;
        p.tpr = tpr;
        p.w_y = access_width(a->y, a->cols * y_size, y_size * e < 16 ? y_size * e : 16);
        const int kn = (int)((np + tpr - 1) / tpr);
        /* The norm's default unless the caller names a configuration (a
         * benchmark); RMSNorm takes a CHAN configuration without CHAN; one
         * that cannot run the shape falls back until one can. */
        int cfg = a->variant > FWD_CFG_AUTO && a->variant < FWD_CFG_COUNT ? a->variant : FWD_CFG_FIT;
        if (cfg == FWD_CFG_FIT) {
            if (f8i_norm_fwd_fit_fits(&p)) {
                const f8_status st = f8i_norm_fwd_fit_launch(ctx, &p);
                if (st != F8_OK) return st;
                F8I_COUNT_LAUNCHES(ctx, 1);
                return f8i_cuda_launch_check(ctx, "norm_fwd_fit_kernel");
            }
            cfg = p.rms ? FWD_DEFAULT_RMS : FWD_DEFAULT_LN;
        }
        if (p.rms && cfg >= FWD_CFG_CHAN_REGS) cfg = cfg_fallback(cfg);
        while (cfg != FWD_CFG_REGS && !cfg_fits(cfg, &p, np, e, kn)) cfg = cfg_fallback(cfg);
        const size_t smem = cfg_smem(cfg, np, e, p.rms, kn);
        const f8_status st = p.x_bf16 ? launch_rows_y<1>(ctx, &p, cfg, smem) : launch_rows_y<0>(ctx, &p, cfg, smem);
        if (st != F8_OK) return st;
        F8I_COUNT_LAUNCHES(ctx, 1);
        return f8i_cuda_launch_check(ctx, "norm_fwd_rows_kernel");
    }

    p.w_y = access_width(a->y, a->cols * y_size, y_size * NORM_VEC < 16 ? y_size * NORM_VEC : 16);
    int tpr = 0; /* the older kernel's: the fewest threads (32..NORM_THREADS) whose pieces cover a row */
    for (int t = 32; t <= NORM_THREADS && tpr == 0; t *= 2)
        if ((int64_t)t * FWD_NV_LARGE * NORM_VEC >= a->cols) tpr = t;
    if (tpr == 0) {
        if (a->rows > INT_MAX)
            return f8i_error(ctx, F8_ERR_UNSUPPORTED, "norm forward: %lld rows in one launch", (long long)a->rows);
        p.tpr = NORM_THREADS;
        norm_fwd_wide_kernel<<<(unsigned)a->rows, NORM_THREADS, 0, stream>>>(p);
        F8I_COUNT_LAUNCHES(ctx, 1);
        return f8i_cuda_launch_check(ctx, "norm_fwd_wide_kernel");
    }
    p.tpr = tpr;
    const int64_t rows_per_block = NORM_THREADS / tpr;
    const int64_t blocks = (a->rows + rows_per_block - 1) / rows_per_block;
    if (blocks > INT_MAX)
        return f8i_error(ctx, F8_ERR_UNSUPPORTED, "norm forward: %lld rows in one launch", (long long)a->rows);
    if (p.x_bf16)
        launch_fwd_y<1>(&p, (unsigned)blocks, stream);
    else
        launch_fwd_y<0>(&p, (unsigned)blocks, stream);
    F8I_COUNT_LAUNCHES(ctx, 1);
    return f8i_cuda_launch_check(ctx, "norm_fwd_kernel");
}
