/*
 * norm_fwd.cu — LayerNorm / RMSNorm forward (y FP32, BF16 or FP8 with amax),
 * the contract f8i_norm_fwd_args of backend.h: the backend entry point and
 * the row-group kernels. Which kernel runs a call:
 *  - BF16 x in 16-byte aligned rows that its layout covers exactly, E4M3 or
 *    BF16 y: norm_fwd_fit.cu's kernel;
 *  - other rows up to FWD_MAX_COLS = 8192 columns: the row-group kernels
 *    here;
 *  - wider rows: norm_fwd_wide.cu.
 * Row-wise codes (F8I_ROW_FUSED): norm_fwd_fit_rowwise.cu's kernel on the
 * fit kernel's rows with u in BF16, norm_fwd_rowwise.cu's on the other rows
 * up to FWD_MAX_COLS, the wide kernel and the row-wise cast past them.
 *
 * Design note. A row is reduced by a group of threads and never leaves
 * registers between the statistics and the output. The row-group kernels
 * run a persistent grid of blocks (as many as are resident at once: the
 * launch bounds guarantee it, so no occupancy query is needed), each split
 * into row groups of tpr threads (a power of two, 32..512: the fewest that
 * cover the row with FWD_NV = 4 pieces each, a piece being the 16 bytes of x
 * a thread moves at once: 8 BF16 or 4 FP32 elements). A group walks rows
 * group, group + groups in the grid, ...; its threads keep x as the raw
 * 16-byte words (BF16 stays 2 bytes an element) and convert each time they
 * read it. x reaches the registers one of two ways, each norm taking the
 * one measured faster for it on the H200 (bench/RESULTS.md). RMSNorm, and
 * LayerNorm where rows are not 16-byte aligned (the only way there):
 * norm_fwd_regs_kernel loads the next row into a second register buffer
 * before the current row's arithmetic (an SM has 8 rows, 64 KB, in flight).
 * LayerNorm with 16-byte aligned rows: norm_fwd_staged_kernel stages x
 * through shared memory instead. Every thread copies its own pieces of the
 * row FWD_STAGES rows ahead with cp.async into its own slots of a ring, and
 * refills a slot right after reading it into registers, so a group has
 * FWD_STAGES rows in flight while it computes and needs no registers for
 * them. A thread reads back only what it copied itself (cp.async.wait_group
 * orders it), so the ring needs no barrier; a slot is refilled only after
 * the row's first pass has consumed the registers read from it. Two kernels
 * rather than one for both ways, which spilled more registers. The row's
 * sums are warp shuffles plus, for a multi-warp group, one word per warp
 * through shared memory behind a named barrier of the group's threads only
 * (bar.sync id, tpr), so groups never wait for each other. gamma (1 + gamma
 * when zero centred) and beta are converted to FP32 into shared memory once
 * per block, laid out so that a warp's 16-byte reads are conflict-free and a
 * piece's place is a constant offset.
 * The mean and the variance are two passes over the row (no cancellation
 * from E[x²] - E[x]²). Row sums are in FP32 in a fixed order (butterfly
 * within a warp, then warps in index order; a thread first keeps four
 * partial sums, added pairwise, and accumulates the squared deviations with
 * fmaf), and the statistics use 1/cols once and rsqrtf rather than
 * divisions: mu = Σx · (1/cols), rsigma = rsqrtf(Σ(x-mu)² · (1/cols) + eps)
 * (within 2 ulps). So a re-run gives the same bits, and both row-group
 * kernels and the fit kernel give the same bits for a row (the tests hold
 * them to it). The elementwise steps follow the CPU oracle's order
 * (src/cpu/norm.c; the build passes -fmad=false), except that beta is added
 * with one fmaf: y = fmaf((x - mu)·rs, g, beta). FP8 codes are the cast's:
 * cvt.rn.satfinite of v · scale.
 */
#include <stdint.h>

#include "norm_fwd.cuh"
#include "core/rowwise.h"

#define FWD_STAGES 2              /* rows of x in the staged kernel's ring */
#define FWD_SMEM_SM (228 * 1024)  /* sm_90's shared memory per SM: the resident blocks share it */
#define FWD_SMEM_BLOCK 2048       /* what each block takes beside its dynamic part (1 KB reserved, static arrays) */

/* FP32 x (4 elements a piece) at FWD_MAX_COLS: tpr = 512, one group a 512-thread block. */
static_assert(FWD_MAX_COLS <= 512 * FWD_NV * 4, "a row group fits a 512-thread block");
static_assert(512 / 64 <= 15, "a named barrier (ids 1..15) per multi-warp group of a 512-thread block");
static_assert(2 * FWD_MAX_COLS * 2 * 4 <= 160 * 1024, "gamma/beta of two resident 512-thread blocks fit an SM");

/* ------------------------------------------------------------------------ */
/* Device helpers                                                            */
/* ------------------------------------------------------------------------ */

/* y of the thread's pieces of a row (piece_values), and their amax. gbt:
 * see the kernels. */
template <int X_BF16, int YK, int RMS>
static __device__ __forceinline__ void store_row(char *yrow, const uint4 (&xr)[FWD_NV], const float4 *gbt, float mu,
                                                 float rs, float s, float &amax, int c0, int cols, int room, int w,
                                                 bool counting, unsigned &sat, unsigned &flushed)
{
    constexpr int E = X_BF16 ? 8 : 4;
    constexpr int FP8 = YK == Y_E4M3 || YK == Y_E5M2;
#pragma unroll
    for (int k = 0; k < FWD_NV; ++k) {
        const int c = c0 + 32 * k * E;
        if (32 * k >= room) continue;
        float o[E];
        piece_values<X_BF16, RMS, 0>(o, xr[k], gbt, k, mu, rs);
        /* Past the row's end g = b = 0 and x = 0: o is ±0 or NaN there,
         * neither of which moves fmaxf. */
        if (FP8)
#pragma unroll
            for (int j = 0; j < E; ++j) amax = fmaxf(amax, fabsf(o[j]));
        store_piece<YK, E, int>(yrow, c, cols, o, s, w);
        if (FP8 && counting) piece_stats<YK, E, int>(o, s, c, cols, sat, flushed);
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


/* Forward, rows up to FWD_MAX_COLS columns, x one row ahead in registers
 * (RMSNorm; LayerNorm where the staged kernel cannot run). Layout:
 * ROWS_LAYOUT, THREADS = 512; the next row's x in xn. */
template <int X_BF16, int YK, int RMS, int COUNT>
static __global__ void __launch_bounds__(512, 2) norm_fwd_regs_kernel(norm_fwd_params p)
{
    constexpr int THREADS = 512, E = X_BF16 ? 8 : 4, YS = YK == Y_FP32 ? 4 : YK == Y_BF16 ? 2 : 1;
    constexpr int FP8 = YK == Y_E4M3 || YK == Y_E5M2;
    constexpr int NPL = (E / 4) * (RMS ? 1 : 2); /* float4 planes per piece */
    extern __shared__ float4 gb[];
    __shared__ float red[2][THREADS / 32]; /* [slot][warp] */
    ROWS_LAYOUT;

    uint4 xr[FWD_NV], xn[FWD_NV]; /* this row's x, and the next row's */
    regs_start<X_BF16, RMS, THREADS>(xr, xn, gb, p, row, cols, c0, room, np);

    const float s = FP8 ? *p.scale : 1.0f;
    float amax = 0.0f;
    constexpr bool counting = FP8 && COUNT; /* telemetry: its own instances (no registers taken from the others) */
    unsigned sat = 0, flushed = 0;
    int slot = 0; /* which red array the next group total uses */
    while (row < rows) {
        /* The next row's loads go out before this row's arithmetic. */
        const int64_t next = row + stride;
        if (next < rows) load_row<X_BF16>(xn, p.x, next, cols, c0, room, p.w_x);

        const float2 st = row_stats<X_BF16, RMS>(xr, red, slot, nw, first, bar, c0, cols, room, inv_n, p.eps);
        const float mu = st.x, rs = st.y;
        if (threadIdx.x == (unsigned)(first * 32)) {
            if (!RMS && p.mu != NULL) p.mu[row] = mu;
            if (p.rsigma != NULL) p.rsigma[row] = rs;
        }
        store_row<X_BF16, YK, RMS>((char *)p.y + row * cols * YS, xr, gbt, mu, rs, s, amax, c0, cols, room, p.w_y,
                                   counting, sat, flushed);
#pragma unroll
        for (int k = 0; k < FWD_NV; ++k) xr[k] = xn[k];
        row = next;
    }
    if (FP8) {
        if (p.scale_inv != NULL && blockIdx.x == 0 && threadIdx.x == 0) *p.scale_inv = 1.0f / s;
        if (p.amax != NULL) block_amax_atomic<THREADS>(amax, p.amax);
        if (counting) block_stats_atomic<THREADS>(sat, flushed, p.stats, p.rows * p.cols, blockIdx.x == 0);
    }
}

/* LayerNorm forward, rows up to FWD_MAX_COLS columns, x staged through
 * shared memory FWD_STAGES rows ahead (16-byte aligned rows). Layout:
 * ROWS_LAYOUT; after the gamma/beta planes the ring, FWD_STAGES x kn x
 * THREADS slots of 16 bytes, stage s piece k of thread t at slot (s·kn +
 * k)·THREADS + t: a thread copies its own pieces of the row FWD_STAGES ahead
 * with cp.async and reads back only what it copied (cp.async.wait_group
 * orders it), so the ring needs no barrier. A slot is refilled only after
 * the row's first pass has consumed the registers read from it. */
template <int X_BF16, int YK, int THREADS, int COUNT>
static __global__ void __launch_bounds__(THREADS, 1024 / THREADS) norm_fwd_staged_kernel(norm_fwd_params p)
{
    constexpr int E = X_BF16 ? 8 : 4, YS = YK == Y_FP32 ? 4 : YK == Y_BF16 ? 2 : 1;
    constexpr int FP8 = YK == Y_E4M3 || YK == Y_E5M2;
    constexpr int NPL = (E / 4) * 2; /* float4 planes per piece: gain, then beta */
    extern __shared__ float4 gb[];
    __shared__ float red[2][THREADS / 32]; /* [slot][warp] */
    ROWS_LAYOUT;
    uint4 *ring = (uint4 *)(gb + (size_t)((np + 31) / 32) * NPL * 32) + threadIdx.x; /* stage s: + s·kn·THREADS */

    /* The first rows' x, in flight while gamma/beta are fetched. */
#pragma unroll
    for (int s = 0; s < FWD_STAGES; ++s)
        stage_row<X_BF16, THREADS>(ring + s * kn * THREADS, p.x, row + (int64_t)s * stride, rows, cols, c0, room);
    fill_params<X_BF16, 0, THREADS>(gb, p, cols, np);

    const float s = FP8 ? *p.scale : 1.0f;
    float amax = 0.0f;
    constexpr bool counting = FP8 && COUNT; /* telemetry: its own instances (no registers taken from the others) */
    unsigned sat = 0, flushed = 0;
    int slot = 0;  /* which red array the next group total uses */
    int stage = 0; /* the ring stage holding this row */
    while (row < rows) {
        uint4 xr[FWD_NV];
        uint4 *at = ring + stage * kn * THREADS;
        cp_async_wait<FWD_STAGES - 1>(); /* this row's group, the oldest of FWD_STAGES */
#pragma unroll
        for (int k = 0; k < FWD_NV; ++k) xr[k] = 32 * k < room ? at[k * THREADS] : make_uint4(0u, 0u, 0u, 0u);
        stage = stage + 1 == FWD_STAGES ? 0 : stage + 1;

        const float sum = thread_sum<X_BF16>(xr, room);
        stage_row<X_BF16, THREADS>(at, p.x, row + (int64_t)FWD_STAGES * stride, rows, cols, c0, room);
        const float mu = group_total(sum, nw, first, red[slot], bar) * inv_n;
        slot ^= 1;
        float q[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        deviations<X_BF16>(q, xr, mu, c0, cols, room);
        const float rs = rsqrtf(group_total(pairwise_sum(q), nw, first, red[slot], bar) * inv_n + p.eps);
        slot ^= 1;
        if (threadIdx.x == (unsigned)(first * 32)) {
            if (p.mu != NULL) p.mu[row] = mu;
            if (p.rsigma != NULL) p.rsigma[row] = rs;
        }
        store_row<X_BF16, YK, 0>((char *)p.y + row * cols * YS, xr, gbt, mu, rs, s, amax, c0, cols, room, p.w_y,
                                 counting, sat, flushed);
        row += stride;
    }
    if (FP8) {
        if (p.scale_inv != NULL && blockIdx.x == 0 && threadIdx.x == 0) *p.scale_inv = 1.0f / s;
        if (p.amax != NULL) block_amax_atomic<THREADS>(amax, p.amax);
        if (counting) block_stats_atomic<THREADS>(sat, flushed, p.stats, p.rows * p.cols, blockIdx.x == 0);
    }
}

/* ------------------------------------------------------------------------ */
/* Launchers                                                                 */
/* ------------------------------------------------------------------------ */

/* Dynamic shared memory of a row-group launch: the gamma/beta planes (whole
 * spans of 32 pieces, the layout's unit) and, for the staged kernel in
 * blocks of `staged` threads, its ring (0: the registers kernel). */
static size_t rows_smem(int64_t np, int e, int rms, int kn, int staged)
{
    return (size_t)((np + 31) / 32 * 32) * (size_t)e * sizeof(float) * (rms ? 1 : 2) +
           (size_t)(staged ? FWD_STAGES : 0) * (size_t)kn * (size_t)staged * 16u;
}

/* The staged kernel's block for this launch, or 0 for the registers kernel.
 * LayerNorm stages x where its rows are 16-byte aligned (so whole pieces):
 * in 1024-thread blocks, its fastest, or 512 where a 1024-thread block
 * would need a named barrier per 64-thread group (ids 1..15: too few), and
 * only where the blocks an SM holds (1024 / threads) fit its shared memory.
 * RMSNorm keeps x in registers. */
static int staged_threads(const norm_fwd_params *p, int64_t np, int e, int kn)
{
    if (p->rms || p->w_x != 16) return 0;
    for (int threads = p->tpr == 64 ? 512 : 1024; threads >= 512; threads /= 2)
        if (rows_smem(np, e, 0, kn, threads) <= (size_t)(FWD_SMEM_SM / (1024 / threads) - FWD_SMEM_BLOCK))
            return threads;
    return 0;
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

template <int X_BF16, int YK, int RMS, int COUNT>
static f8_status launch_regs(f8_ctx *ctx, const norm_fwd_params *p, size_t smem)
{
    void (*kernel)(norm_fwd_params) = norm_fwd_regs_kernel<X_BF16, YK, RMS, COUNT>;
    F8I_TRY(set_smem(ctx, kernel, smem));
    kernel<<<rows_grid(p, 512, f8i_cuda(ctx)->sm_count), 512, smem, f8i_stream(ctx)>>>(*p);
    return F8_OK;
}

template <int X_BF16, int YK, int THREADS, int COUNT>
static f8_status launch_staged(f8_ctx *ctx, const norm_fwd_params *p, size_t smem)
{
    void (*kernel)(norm_fwd_params) = norm_fwd_staged_kernel<X_BF16, YK, THREADS, COUNT>;
    F8I_TRY(set_smem(ctx, kernel, smem));
    kernel<<<rows_grid(p, THREADS, f8i_cuda(ctx)->sm_count), THREADS, smem, f8i_stream(ctx)>>>(*p);
    return F8_OK;
}

/* staged: staged_threads' choice. COUNT: FP8 telemetry (p->stats). */
template <int X_BF16, int YK, int COUNT>
static f8_status launch_rows(f8_ctx *ctx, const norm_fwd_params *p, int staged, size_t smem)
{
    if (staged == 1024) return launch_staged<X_BF16, YK, 1024, COUNT>(ctx, p, smem);
    if (staged == 512) return launch_staged<X_BF16, YK, 512, COUNT>(ctx, p, smem);
    return p->rms ? launch_regs<X_BF16, YK, 1, COUNT>(ctx, p, smem) : launch_regs<X_BF16, YK, 0, COUNT>(ctx, p, smem);
}

template <int X_BF16>
static f8_status launch_rows_y(f8_ctx *ctx, const norm_fwd_params *p, int staged, size_t smem)
{
    switch (p->y_kind) {
    case Y_FP32: return launch_rows<X_BF16, Y_FP32, 0>(ctx, p, staged, smem);
    case Y_BF16: return launch_rows<X_BF16, Y_BF16, 0>(ctx, p, staged, smem);
    case Y_E4M3:
        return p->stats ? launch_rows<X_BF16, Y_E4M3, 1>(ctx, p, staged, smem)
                        : launch_rows<X_BF16, Y_E4M3, 0>(ctx, p, staged, smem);
    default:
        return p->stats ? launch_rows<X_BF16, Y_E5M2, 1>(ctx, p, staged, smem)
                        : launch_rows<X_BF16, Y_E5M2, 0>(ctx, p, staged, smem);
    }
}

/* ------------------------------------------------------------------------ */
/* Backend entry point                                                       */
/* ------------------------------------------------------------------------ */

/* F8I_ROW_FUSED rows wider than FWD_MAX_COLS: the norm into y_hp, then the
 * row-wise cast of it (out only), the unfused path's two launches (and,
 * with col_amax, the column amax pass's two). */
static f8_status row_fwd_wide(f8_ctx *ctx, const f8i_norm_fwd_args *a)
{
    if (a->y_hp == NULL)
        return f8i_error(ctx, F8_ERR_UNSUPPORTED, "norm forward: row-wise codes of rows wider than %d columns (%lld) "
                                                  "need y_hp", FWD_MAX_COLS, (long long)a->cols);
    f8i_norm_fwd_args n = *a;
    n.y = a->y_hp;
    n.y_dtype = a->hp_dtype;
    n.mode = F8I_SCALING_TENSOR;
    n.scale = NULL;
    n.amax = NULL;
    n.scale_inv = NULL;
    n.stats = NULL;
    F8I_TRY(f8i_cuda_norm_fwd(ctx, &n));
    f8i_rowwise_cast_args c = {a->y_hp, a->hp_dtype, a->rows, a->cols, a->y_dtype, (uint8_t *)a->y, a->scale_inv,
                               NULL, NULL, a->scaled_max, a->pow2, a->amax, a->stats, NULL, NULL, F8_DTYPE_FP32,
                               0, NULL, 0, 0};
    F8I_TRY(f8i_cuda_cast_rowwise(ctx, &c));
    /* col_amax: the column cast's amax pass over y_hp, the unfused path's */
    return a->col_amax != NULL ? f8i_cuda_rowwise_col_amax(ctx, a->y_hp, a->hp_dtype, a->rows, a->cols, a->col_amax)
                               : F8_OK;
}

f8_status f8i_cuda_norm_fwd(f8_ctx *ctx, const f8i_norm_fwd_args *a)
{
    const int fp8 = f8i_dtype_is_fp8(a->y_dtype);
    const int row = fp8 && a->mode == F8I_SCALING_ROW; /* F8I_ROW_FUSED (backend.h) */
    if (row && (a->rows <= 0 || a->cols <= 0)) return F8_OK; /* nothing to write */
    if (row && a->cols > FWD_MAX_COLS) return row_fwd_wide(ctx, a);
    if (!f8i_dtype_is_hp(a->x_dtype) || !f8i_dtype_is_hp(a->param_dtype) || (!fp8 && !f8i_dtype_is_hp(a->y_dtype)))
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
    p.stats = fp8 ? (unsigned long long *)a->stats : NULL;
    p.mu = a->mu;
    p.rsigma = a->rsigma;
    p.scaled_max = a->scaled_max;
    p.pow2 = a->pow2;
    p.y_hp = row ? a->y_hp : NULL;
    p.hp_bf16 = a->hp_dtype == F8_DTYPE_BF16;
    p.w_hp = 1;
    p.col_amax = row ? a->col_amax : NULL;
    const int y_size = p.y_kind == Y_FP32 ? 4 : p.y_kind == Y_BF16 ? 2 : 1;
    p.w_x = access_width(a->x, a->cols * (p.x_bf16 ? 2 : 4), 16);
    p.w_p = access_width(a->gamma, 0, 16);
    if (!p.rms && access_width(a->beta, 0, 16) < p.w_p) p.w_p = access_width(a->beta, 0, 16);


    if (a->cols >= 0 && a->cols <= FWD_MAX_COLS) {
        /* Row groups: pieces of 16 bytes of x, FWD_NV a thread. */
        const int e = p.x_bf16 ? 8 : 4;
        const int64_t np = (a->cols + e - 1) / e;
        int tpr = 32;
        while ((int64_t)tpr * FWD_NV < np) tpr *= 2;
        p.tpr = tpr;
        p.w_y = access_width(a->y, a->cols * y_size, y_size * e < 16 ? y_size * e : 16);
        if (row) { /* norm_fwd_fit_rowwise.cu on the fit layout, else norm_fwd_rowwise.cu's registers kernel */
            const int hs = p.hp_bf16 ? 2 : 4;
            p.w_hp = p.y_hp != NULL ? access_width(p.y_hp, a->cols * hs, hs * e < 16 ? hs * e : 16) : 1;
            if (f8i_norm_fwd_fit_row_fits(&p)) {
                if (p.col_amax != NULL) F8I_TRY(f8i_cuda_col_amax_target(ctx, p.col_amax, a->cols, &p.col_amax));
                return f8i_norm_fwd_fit_row_launch(ctx, &p);
            }
            const int kn = (int)((np + tpr - 1) / tpr);
            size_t smem = rows_smem(np, e, p.rms, kn, 0);
            unsigned grid = rows_grid(&p, 512, f8i_cuda(ctx)->sm_count);
            if (p.col_amax != NULL) { /* the column maxima after the planes, zeroed before the kernel */
                smem += norm_row_cmax_bytes(np, e, tpr, p.hp_bf16);
                /* one block an SM where two do not fit: the persistent grid is what is resident */
                const unsigned sms = (unsigned)(f8i_cuda(ctx)->sm_count > 0 ? f8i_cuda(ctx)->sm_count : 1);
                if (2 * (smem + FWD_SMEM_BLOCK) > FWD_SMEM_SM && grid > sms) grid = sms;
                F8I_TRY(f8i_cuda_col_amax_target(ctx, p.col_amax, a->cols, &p.col_amax));
            }
            return f8i_norm_fwd_row_launch(ctx, &p, smem, grid);
        }
        if (p.stats == NULL && f8i_norm_fwd_fit_fits(&p)) { /* the fit kernel does not count telemetry */
            F8I_TRY(f8i_norm_fwd_fit_launch(ctx, &p));
            F8I_COUNT_LAUNCHES(ctx, 1);
            return f8i_cuda_launch_check(ctx, "norm_fwd_fit_kernel");
        }
        const int kn = (int)((np + tpr - 1) / tpr);
        const int staged = staged_threads(&p, np, e, kn);
        const size_t smem = rows_smem(np, e, p.rms, kn, staged);
        F8I_TRY(p.x_bf16 ? launch_rows_y<1>(ctx, &p, staged, smem) : launch_rows_y<0>(ctx, &p, staged, smem));
        F8I_COUNT_LAUNCHES(ctx, 1);
        return f8i_cuda_launch_check(ctx, "norm_fwd_rows_kernel");
    }
    return f8i_norm_fwd_wide_launch(ctx, &p);
}
