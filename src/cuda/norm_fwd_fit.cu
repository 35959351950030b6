/*
 * norm_fwd_fit.cu — the LayerNorm / RMSNorm forward for rows that its layout
 * covers exactly: BF16 x in 16-byte aligned rows of 256·nw·KN columns
 * (nw = 2, 4 or 8 warps a row, KN = 2, 3 or 4 pieces a lane: hidden sizes
 * 1536, 2048, 3072, 4096, 6144 and 8192 among them; 1024 columns or fewer
 * keep norm_fwd.cu's kernels), y E4M3 (what a norm feeding an FP8 GEMM
 * writes) or BF16. The entry point (norm_fwd.cu) runs it wherever it can.
 *
 * Design note. Nsight Compute on the H200 found the row-group kernels of
 * norm_fwd.cu issue-bound at 8192 x 4096 BF16 -> E4M3, executing twice the
 * instructions per element that the arithmetic needs (bench/RESULTS.md has
 * the counts). The rest was their generality: a bounds check per piece
 * (`room`), a run-time access width behind every load and store,
 * partial-piece paths, 64-bit index arithmetic. This kernel is their
 * staged configuration with all of that settled at compile time: KN and the
 * group's warps are template arguments, every piece is whole, x arrives by
 * 16-byte cp.async into the thread's own ring slots (norm_fwd.cu says why the
 * ring needs no barrier), y leaves as 8 FP8 codes (or 8 BF16) per store:
 * about half the instructions an element. Then, no longer issue-bound, it
 * was limited by latency: 32 warps a SM and a 64-register row held across
 * the two barrier-separated reductions (spilling to L2). So every pass reads
 * its pieces from the ring again (an LDS.128 per 8 elements; the slots are
 * refilled after the last pass), which leaves 40 registers and no spill, and
 * 768-thread blocks run 48 warps a SM.
 * The arithmetic is the row-group kernels', operation for operation (four
 * partial sums added pairwise, group_total, Σ(x - mu)² with fmaf, rsqrtf,
 * fmaf((x - mu)·rs, g, beta) or (x·rs)·g, the cast's cvt), so it gives the
 * same bits as they do. A persistent grid of as many blocks as the SMs hold
 * (two a SM up to 8192 columns).
 */
#include "norm_fwd.cuh"

/* Grid: the persistent grid of f8i_norm_fwd_fit_launch; block FIT_THREADS,
 * split into groups of tpr = 32·NW threads. Group g of block b takes rows
 * b·groups + g, then every gridDim.x·groups rows after. Lane l of the
 * group's warp w owns pieces 32·KN·w + 32k + l (k < KN) of every row it
 * takes: columns c0 + 256k .. +7, c0 = 8·(32·KN·w + l). Dynamic shared
 * memory: the gain/beta planes of fill_params (piece P plane h at float4
 * ((P / 32)·NPL + h)·32 + P % 32), then the ring, stage s piece k of thread
 * t at slot (s·KN + k)·FIT_THREADS + t. */
template <int YK, int RMS, int KN, int NW>
static __global__ void __launch_bounds__(FIT_THREADS, FIT_MIN_BLOCKS) norm_fwd_fit_kernel(norm_fwd_params p)
{
    constexpr int NPL = RMS ? 2 : 4; /* float4 planes per piece: gain, then beta */
    constexpr int FP8 = YK == Y_E4M3 || YK == Y_E5M2, YS = FP8 ? 1 : 2;
    static_assert(YK != Y_FP32, "FP32 y takes the row-group kernels");
    static_assert(NW > 1, "one-warp rows take the row-group kernels (f8i_norm_fwd_fit_kn)");
    extern __shared__ float4 gb[];
    __shared__ float red[2][FIT_THREADS / 32]; /* [slot][warp] */
    constexpr int TPR = 32 * NW, GROUPS = FIT_THREADS / TPR;
    const int group = threadIdx.x / TPR, lane = threadIdx.x & 31, first = group * NW, bar = 1 + group;
    const int w = (threadIdx.x >> 5) - first; /* warp within the group */
    const int cols = (int)p.cols, np = cols >> 3;
    const int c0 = (32 * KN * w + lane) * 8;
    const float4 *gbt = gb + KN * w * NPL * 32 + lane; /* piece k plane h: gbt[(k·NPL + h)·32] */
    uint4 *ring = (uint4 *)(gb + np * NPL) + threadIdx.x;
    const float inv_n = 1.0f / (float)cols;
    const int64_t rows = p.rows, stride = (int64_t)gridDim.x * GROUPS;
    const int64_t x_pitch = (int64_t)cols * 2, y_pitch = (int64_t)cols * YS;
    const char *xs = (const char *)p.x + c0 * 2; /* this thread's piece 0 of row 0 */
    int64_t row = (int64_t)blockIdx.x * GROUPS + group;

    /* The first rows' x, in flight while gamma/beta are fetched. */
#pragma unroll
    for (int s = 0; s < FIT_STAGES; ++s)
        fit_stage<KN>(ring + s * KN * FIT_THREADS, xs + (row + s * stride) * x_pitch, row + s * stride < rows);
    fill_params<1, RMS, FIT_THREADS>(gb, p, cols, np);

    const float s = FP8 ? *p.scale : 1.0f;
    float amax = 0.0f;
    int slot = 0, stage = 0;
    for (; row < rows; row += stride) {
        uint4 *at = ring + stage * KN * FIT_THREADS;
        stage = stage + 1 == FIT_STAGES ? 0 : stage + 1;
        cp_async_wait<FIT_STAGES - 1>(); /* this row's group, the oldest */
        const int64_t ahead = row + FIT_STAGES * stride; /* the row these slots take next */

        float mu = 0.0f;
        if (!RMS) {
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int k = 0; k < KN; ++k)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[j % 4] += bf16_at(at[k * FIT_THREADS], j);
            const float sum = pairwise_sum(acc);
            mu = group_total(sum, NW, first, red[slot], bar) * inv_n;
            slot ^= 1;
        }
        float q[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < KN; ++k)
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float d = RMS ? bf16_at(at[k * FIT_THREADS], j) : bf16_at(at[k * FIT_THREADS], j) - mu; /* x - 0 is x */
                q[j % 4] = __fmaf_rn(d, d, q[j % 4]);
            }
        const float m2 = pairwise_sum(q);
        const float rs = rsqrtf(group_total(m2, NW, first, red[slot], bar) * inv_n + p.eps);
        slot ^= 1;
        if (threadIdx.x == (unsigned)(first * 32)) {
            if (!RMS && p.mu != NULL) p.mu[row] = mu;
            if (p.rsigma != NULL) p.rsigma[row] = rs;
        }

        char *yrow = (char *)p.y + row * y_pitch + c0 * YS;
#pragma unroll
        for (int k = 0; k < KN; ++k) {
            float o[8];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float4 g4 = gbt[(k * NPL + h) * 32];
                const float g[4] = {g4.x, g4.y, g4.z, g4.w};
                if (RMS) {
#pragma unroll
                    for (int i = 0; i < 4; ++i) o[4 * h + i] = (bf16_at(at[k * FIT_THREADS], 4 * h + i) * rs) * g[i];
                } else {
                    const float4 b4 = gbt[(k * NPL + 2 + h) * 32];
                    const float b[4] = {b4.x, b4.y, b4.z, b4.w};
#pragma unroll
                    for (int i = 0; i < 4; ++i) o[4 * h + i] = __fmaf_rn((bf16_at(at[k * FIT_THREADS], 4 * h + i) - mu) * rs, g[i], b[i]);
                }
            }
            if constexpr (FP8) {
#pragma unroll
                for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(o[j]));
                *(uint2 *)(yrow + k * 256) = make_uint2(fp8x4<YK == Y_E5M2>(o, s), fp8x4<YK == Y_E5M2>(o + 4, s));
            } else {
                uint32_t u[4];
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    u[i] = (uint32_t)f8i_bf16_from_float(o[2 * i]) | ((uint32_t)f8i_bf16_from_float(o[2 * i + 1]) << 16);
                *(uint4 *)(yrow + k * 512) = make_uint4(u[0], u[1], u[2], u[3]);
            }
        }
        fit_stage<KN>(at, xs + ahead * x_pitch, ahead < rows); /* the last pass has read the slots: refill */
    }
    if (FP8) {
        if (p.scale_inv != NULL && blockIdx.x == 0 && threadIdx.x == 0) *p.scale_inv = 1.0f / s;
        if (p.amax != NULL) block_amax_atomic<FIT_THREADS>(amax, p.amax);
    }
}

/* ------------------------------------------------------------------------ */
/* Launch                                                                    */
/* ------------------------------------------------------------------------ */

int f8i_norm_fwd_fit_kn(const norm_fwd_params *p)
{
    if (!p->x_bf16 || p->w_x != 16) return 0;
    /* One-warp rows (tpr 32: 1024 columns or fewer) need 64-79 registers
     * here, with no barrier to bound what the compiler keeps live, and
     * spilled at 40: they keep the row-group kernels. */
    if (p->cols <= 0 || p->cols > FWD_MAX_COLS || p->cols % 8 != 0 || p->tpr < 64 || p->tpr > 256) return 0;
    const int np = (int)(p->cols / 8), kn = np / p->tpr;
    return np == kn * p->tpr && kn >= 2 && kn <= 4 ? kn : 0;
}

f8_status f8i_norm_fwd_fit_grid(f8_ctx *ctx, const norm_fwd_params *p, const void *kernel, size_t smem, int groups,
                                unsigned *grid)
{
    /* The grid is what is resident at once: FIT_MIN_BLOCKS a SM (the launch
     * bounds fit their registers), fewer if their shared memory does not fit
     * (1 KB reserved and the static arrays beside the dynamic part). */
    int per_sm = FIT_MIN_BLOCKS;
    while (per_sm > 1 && (size_t)per_sm * (smem + 2048) > 228 * 1024) per_sm--;
    if (smem + 2048 > 48 * 1024) /* the static arrays count towards the 48 KB default */
        F8I_TRY(f8i_cuda_smem_optin(ctx, kernel, "norm forward: shared-memory opt-in"));
    const int sm_count = f8i_cuda(ctx)->sm_count;
    const int64_t need = (p->rows + groups - 1) / groups;
    const int64_t cap = (int64_t)(sm_count > 0 ? sm_count : 1) * per_sm;
    *grid = (unsigned)(need < cap ? need : cap);
    return F8_OK;
}

/* Pieces a lane when the fit kernel can run p, else 0. */
static int fit_kn(const norm_fwd_params *p)
{
    const int fp8 = p->y_kind == Y_E4M3 || p->y_kind == Y_E5M2;
    if (fp8 ? p->y_kind != Y_E4M3 || p->w_y < 8 : p->y_kind != Y_BF16 || p->w_y != 16) return 0;
    return f8i_norm_fwd_fit_kn(p);
}

int f8i_norm_fwd_fit_fits(const norm_fwd_params *p) { return fit_kn(p) != 0; }

template <int YK, int RMS, int KN, int NW>
static f8_status fit_launch(f8_ctx *ctx, const norm_fwd_params *p)
{
    void (*kernel)(norm_fwd_params) = norm_fwd_fit_kernel<YK, RMS, KN, NW>;
    const size_t np = (size_t)(p->cols / 8);
    const size_t smem = np * (RMS ? 2 : 4) * 16 + (size_t)FIT_STAGES * KN * FIT_THREADS * 16;
    unsigned grid;
    F8I_TRY(f8i_norm_fwd_fit_grid(ctx, p, (const void *)kernel, smem, FIT_THREADS / (32 * NW), &grid));
    kernel<<<grid, FIT_THREADS, smem, f8i_stream(ctx)>>>(*p);
    return F8_OK;
}

template <int YK, int RMS, int KN>
static f8_status fit_launch_nw(f8_ctx *ctx, const norm_fwd_params *p)
{
    switch (p->tpr) {
    case 64: return fit_launch<YK, RMS, KN, 2>(ctx, p);
    case 128: return fit_launch<YK, RMS, KN, 4>(ctx, p);
    default: return fit_launch<YK, RMS, KN, 8>(ctx, p);
    }
}

template <int YK, int RMS>
static f8_status fit_launch_kn(f8_ctx *ctx, const norm_fwd_params *p, int kn)
{
    switch (kn) {
    case 2: return fit_launch_nw<YK, RMS, 2>(ctx, p);
    case 3: return fit_launch_nw<YK, RMS, 3>(ctx, p);
    default: return fit_launch_nw<YK, RMS, 4>(ctx, p);
    }
}

template <int YK>
static f8_status fit_launch_y(f8_ctx *ctx, const norm_fwd_params *p, int kn)
{
    return p->rms ? fit_launch_kn<YK, 1>(ctx, p, kn) : fit_launch_kn<YK, 0>(ctx, p, kn);
}

f8_status f8i_norm_fwd_fit_launch(f8_ctx *ctx, const norm_fwd_params *p)
{
    const int kn = fit_kn(p);
    if (kn == 0) /* the caller asks f8i_norm_fwd_fit_fits first */
        return f8i_error(ctx, F8_ERR_STATE, "norm forward: the fit kernel cannot run this shape");
    return p->y_kind == Y_E4M3 ? fit_launch_y<Y_E4M3>(ctx, p, kn) : fit_launch_y<Y_BF16>(ctx, p, kn);
}
