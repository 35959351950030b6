/*
 * norm_fwd_fit_rowwise.cu — the LayerNorm / RMSNorm forward with row-wise
 * scaling's cast fused (backend.h's F8I_ROW_FUSED) for rows that the fit
 * layout covers (norm_fwd_fit.cu: BF16 x in 16-byte aligned rows of
 * 256·nw·KN columns, hidden sizes 1536, 2048, 3072, 4096, 6144 and 8192
 * among them), E4M3 or E5M2 codes, u rounded to BF16 (a BF16 model's hp
 * dtype). The entry point (norm_fwd.cu) runs it wherever it can; other
 * rows, and u in FP32, keep norm_fwd_rowwise.cu's kernel.
 *
 * Design note. norm_fwd_rowwise.cu's kernel is the registers kernel of
 * norm_fwd.cu with a second pass over the row; at the 1.3B GPT's shape
 * (8192 x 2048, codes, y_hp and column amaxes) it moved 46% of the H100's
 * copy bandwidth where the per-tensor fit kernel moves about all of it. This
 * is the fit kernel (its layout, cp.async ring, 768-thread blocks, launch
 * bounds and arithmetic: so mu, rsigma and the values v are the bits of
 * the row-group kernels, as its design note says) with the row-wise
 * kernel's outputs, bit for bit. Pass 1 takes v from the ring, rounds it to
 * BF16 (u: piece_values' HP_BF16) and writes u's bits over x in the
 * thread's own ring slots (x is not read again; the slots are refilled
 * after the last pass, as in the fit kernel), maxing |u| into the column
 * maxima (COLMAX). After the group's max, f8i_current_scale gives s; pass 2
 * reads u back: codes of u · s (fp8x4, the store's cvt), the bits
 * themselves as y_hp and the codes' telemetry. So pass 2 reads 16 bytes a
 * piece, no gamma/beta, and recomputes nothing. Cheaper than the row-wise
 * kernel's steps, with the same bits: the rounding is cvt.rn.bf16x2 (one
 * instruction for two values, where f8i_bf16_from_float takes about ten a
 * value), which differs only in a NaN's bits, so a piece holding a NaN
 * (its max.NaN is NaN) takes f8i_bf16_from_float instead; rounding is
 * monotone and odd, so the row's max |u| is its max |v| rounded, once a
 * row; and u without NaN maxes into the column maxima as its bits (a 16-bit
 * max a half). The bits written as y_hp are store_piece's since
 * f8i_bf16_from_float is idempotent on BF16 values, NaN included. u in FP32
 * would fill two slots a piece (and twice the column maxima): it keeps the
 * row-wise kernel. The column maxima are norm_fwd_rowwise.cu's (each
 * group's own BF16 slots, no atomics until the block's end), laid out like
 * the ring (piece k of thread t at uint4 k·FIT_THREADS + t: a warp's
 * 16-byte accesses conflict-free) and as large: with them two blocks still
 * fit a SM up to 3072 columns (RMSNorm: 6144), one past. 40 registers do
 * not spill because what the fit kernel did not carry across the rows'
 * loop lives in shared memory instead (1 / cols, each warp's amax and
 * telemetry counts, kept by its lane 0), the row index is 32-bit and each
 * of a row's three group reductions has its own red array (no index to
 * carry). Telemetry and the column maxima are template arguments, as in the
 * row-wise kernel.
 */
#include "norm_fwd.cuh"

/* max(a, b), NaN if either is (max.NaN; fmaxf returns the other). */
static __device__ __forceinline__ float max_nan(float a, float b)
{
    float d;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

/* A piece's 8 values v rounded to BF16 are bits ub (low half first) of
 * the hardware's cvt.rn.bf16x2, which rounds as f8i_bf16_from_float does
 * (to nearest even, subnormals kept) but gives NaN another bit pattern, and
 * their max |v| is pm of max.NaN. Where v holds a NaN (pm NaN), this makes
 * them f8i_bf16_from_float's bits (whose NaN keeps its sign) and fmaxf's
 * max (which ignores it). */
static __device__ __forceinline__ void piece_with_nan(const float (&v)[8], uint4 &ub, float &pm)
{
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
        w[i] = (uint32_t)f8i_bf16_from_float(v[2 * i]) | ((uint32_t)f8i_bf16_from_float(v[2 * i + 1]) << 16);
    ub = make_uint4(w[0], w[1], w[2], w[3]);
    pm = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) pm = fmaxf(pm, fabsf(v[j]));
}

/* cmax_piece<8, 1> at slot for a piece of u with no NaN, whose BF16 bits
 * are ub: on the bits, since non-negative BF16 values order as their bits
 * (a 16-bit max of |u|'s halves per word: fmaxf's bits). */
static __device__ __forceinline__ void cmax_bits(uint4 *slot, const uint4 &ub)
{
    const uint4 c = *slot;
    *slot = make_uint4(__vmaxu2(c.x, ub.x & 0x7FFF7FFFu), __vmaxu2(c.y, ub.y & 0x7FFF7FFFu),
                       __vmaxu2(c.z, ub.z & 0x7FFF7FFFu), __vmaxu2(c.w, ub.w & 0x7FFF7FFFu));
}

/* Grid, block and layout: norm_fwd_fit_kernel's (norm_fwd_fit.cu; lane l of
 * a group's warp w owns pieces 32·KN·w + 32k + l, k < KN, of every row the
 * group takes). Dynamic shared memory: its gain/beta planes and ring, then
 * with COLMAX the column maxima, piece k of thread t at uint4 k·FIT_THREADS
 * + t after the ring: 8 BF16 bit patterns, max |u| of the piece's columns
 * over the rows of t's group. The group's thread 0 writes mu, rsigma and
 * the row's scale_inv; each block adds its amax and telemetry with one
 * atomic, and its column maxima (the max over its groups) with one
 * atomicMax of the bits a column into col_amax (zeroed before the launch),
 * skipped where col_amax already holds as much (norm_fwd_row_kernel's end). */
template <int E5M2, int RMS, int KN, int NW, int COUNT, int COLMAX>
static __global__ void __launch_bounds__(FIT_THREADS, FIT_MIN_BLOCKS) norm_fwd_fit_row_kernel(norm_fwd_params p)
{
    constexpr int NPL = RMS ? 2 : 4; /* float4 planes per piece: gain, then beta */
    static_assert(NW > 1, "one-warp rows take the row-group kernels (f8i_norm_fwd_fit_kn)");
    extern __shared__ float4 gb[];
    /* [reduction][warp]: one array per reduction of a row (the sum, the
     * squares, the max), so that a warp writes one again only after two
     * barriers (group_total's rule) with no index to carry */
    __shared__ float red[3][FIT_THREADS / 32];
    constexpr int TPR = 32 * NW, GROUPS = FIT_THREADS / TPR;
    const int group = threadIdx.x / TPR, lane = threadIdx.x & 31, first = group * NW, bar = 1 + group;
    const int w = (threadIdx.x >> 5) - first; /* warp within the group */
    const int cols = (int)p.cols, np = cols >> 3;
    const int c0 = (32 * KN * w + lane) * 8;
    const float4 *gbt = gb + KN * w * NPL * 32 + lane; /* piece k plane h: gbt[(k·NPL + h)·32] */
    uint4 *ring = (uint4 *)(gb + np * NPL) + threadIdx.x;
    uint4 *cmt = ring + FIT_STAGES * KN * FIT_THREADS; /* COLMAX: piece k's maxima at cmt[k·FIT_THREADS] */
    /* row indices in 32 bits (one register less: f8i_norm_fwd_fit_row_fits keeps rows + stride in range) */
    const int rows = (int)p.rows, stride = (int)gridDim.x * GROUPS;
    const int64_t x_pitch = (int64_t)cols * 2;
    const char *xs = (const char *)p.x + c0 * 2; /* this thread's piece 0 of row 0 */
    int row = (int)blockIdx.x * GROUPS + group;

    /* The first rows' x, in flight while gamma/beta are fetched. */
#pragma unroll
    for (int s = 0; s < FIT_STAGES; ++s)
        fit_stage<KN>(ring + s * KN * FIT_THREADS, xs + (row + s * stride) * x_pitch, row + s * stride < rows);
    /* What the rows' loop keeps in shared memory rather than in every
     * thread's registers (which spilled), set before fill_params' barrier:
     * 1 / cols; for the block's atomics at the end, kept by each warp's lane
     * 0, the max of its group's rows' max |u| (the group's first warp's),
     * with COUNT the warp's saturated and flushed codes (each row's summed
     * over the warp); with COLMAX the column maxima, zeroed. */
    __shared__ float inv_n;
    __shared__ float amax_w[FIT_THREADS / 32];
    __shared__ unsigned tele[2][FIT_THREADS / 32];
    if (threadIdx.x == 0) inv_n = 1.0f / (float)cols;
    if (lane == 0) amax_w[threadIdx.x >> 5] = 0.0f;
    if (COUNT && lane == 0) tele[0][threadIdx.x >> 5] = tele[1][threadIdx.x >> 5] = 0u;
    if (COLMAX)
#pragma unroll
        for (int k = 0; k < KN; ++k) cmt[k * FIT_THREADS] = make_uint4(0u, 0u, 0u, 0u);
    fill_params<1, RMS, FIT_THREADS>(gb, p, cols, np);

    int stage = 0;
    for (; row < rows; row += stride) {
        uint4 *at = ring + stage * KN * FIT_THREADS;
        stage = stage + 1 == FIT_STAGES ? 0 : stage + 1;
        cp_async_wait<FIT_STAGES - 1>(); /* this row's group, the oldest */
        const int ahead = row + FIT_STAGES * stride; /* the row these slots take next */

        /* The statistics: norm_fwd_fit_kernel's, operation for operation. */
        float mu = 0.0f;
        if (!RMS) {
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int k = 0; k < KN; ++k)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[j % 4] += bf16_at(at[k * FIT_THREADS], j);
            const float sum = pairwise_sum(acc);
            mu = group_total(sum, NW, first, red[0], bar) * inv_n;
        }
        float q[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < KN; ++k)
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float d = RMS ? bf16_at(at[k * FIT_THREADS], j) : bf16_at(at[k * FIT_THREADS], j) - mu;
                q[j % 4] = __fmaf_rn(d, d, q[j % 4]);
            }
        const float m2 = pairwise_sum(q);
        const float rs = rsqrtf(group_total(m2, NW, first, red[1], bar) * inv_n + p.eps);

        /* Pass 1: u in BF16, the row's max |u| and the column maxima; u's
         * bits replace x in the slots. */
        float m = 0.0f; /* max |v| (NaN ignored): rounded to BF16 after the group's max */
#pragma unroll
        for (int k = 0; k < KN; ++k) {
            const uint4 x = at[k * FIT_THREADS];
            float v[8];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float4 g4 = gbt[(k * NPL + h) * 32];
                const float g[4] = {g4.x, g4.y, g4.z, g4.w};
                if (RMS) {
#pragma unroll
                    for (int i = 0; i < 4; ++i) v[4 * h + i] = (bf16_at(x, 4 * h + i) * rs) * g[i];
                } else {
                    const float4 b4 = gbt[(k * NPL + 2 + h) * 32];
                    const float b[4] = {b4.x, b4.y, b4.z, b4.w};
#pragma unroll
                    for (int i = 0; i < 4; ++i) v[4 * h + i] = __fmaf_rn((bf16_at(x, 4 * h + i) - mu) * rs, g[i], b[i]);
                }
            }
            float pm = 0.0f; /* the piece's max |v|, NaN where it holds one */
#pragma unroll
            for (int j = 0; j < 8; ++j) pm = max_nan(pm, fabsf(v[j]));
            uint4 ub = make_uint4(bf16x2(v[0], v[1]), bf16x2(v[2], v[3]), bf16x2(v[4], v[5]), bf16x2(v[6], v[7]));
            if (isnan(pm)) { /* rare: one branch for all of it (a max of its own was predicated: always paid) */
                piece_with_nan(v, ub, pm);
                if (COLMAX) { /* cmax_piece's fmaxf, which ignores the NaN */
                    float u[8];
#pragma unroll
                    for (int j = 0; j < 8; ++j) u[j] = bf16_at(ub, j);
                    cmax_piece<8, 1>((char *)(cmt + k * FIT_THREADS), u);
                }
            } else if (COLMAX) {
                cmax_bits(cmt + k * FIT_THREADS, ub);
            }
            m = fmaxf(m, pm);
            at[k * FIT_THREADS] = ub;
        }
        m = group_max(m, NW, first, red[2], bar);
        m = f8i_bf16_to_float(f8i_bf16_from_float(m)); /* max |u|: rounding is monotone and odd */
        const float s = f8i_current_scale(m, 1.0f, p.scaled_max, p.pow2);
        if (threadIdx.x == (unsigned)(first * 32)) {
            amax_w[first] = fmaxf(amax_w[first], m);
            if (!RMS && p.mu != NULL) p.mu[row] = mu;
            if (p.rsigma != NULL) p.rsigma[row] = rs;
            if (p.scale_inv != NULL) p.scale_inv[row] = 1.0f / s;
        }

        /* Pass 2: codes of u · s, u itself where asked, and the codes' telemetry. */
        char *yrow = (char *)p.y + (int64_t)row * cols + c0;
        unsigned sat = 0, flushed = 0;
#pragma unroll
        for (int k = 0; k < KN; ++k) {
            const uint4 ub = at[k * FIT_THREADS];
            float u[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) u[j] = bf16_at(ub, j);
            const uint32_t lo = fp8x4<E5M2>(u, s), hi = fp8x4<E5M2>(u + 4, s);
            *(uint2 *)(yrow + k * 256) = make_uint2(lo, hi);
            if (p.y_hp != NULL) *(uint4 *)((char *)p.y_hp + row * x_pitch + (c0 + k * 256) * 2) = ub;
            if (COUNT) /* the code of u·s alone is its byte of the pair's cvt: each half is rounded by itself */
#pragma unroll
                for (int j = 0; j < 8; ++j)
                    code_stats<E5M2>(u[j], s, ((j < 4 ? lo : hi) >> (8 * (j % 4))) & 0xFFu, sat, flushed);
        }
        if (COUNT) { /* at most 32·8·KN codes a warp and row: the sums do not wrap */
            sat = __reduce_add_sync(0xFFFFFFFFu, sat);
            flushed = __reduce_add_sync(0xFFFFFFFFu, flushed);
            if (lane == 0) tele[0][threadIdx.x >> 5] += sat, tele[1][threadIdx.x >> 5] += flushed;
        }
        fit_stage<KN>(at, xs + ahead * x_pitch, ahead < rows); /* pass 2 has read the slots: refill */
    }
    if (COLMAX) {
        __syncthreads(); /* every group's maxima final */
        const uint4 *cmx = (const uint4 *)(gb + np * NPL) + FIT_STAGES * KN * FIT_THREADS;
#pragma unroll 1
        for (int P = threadIdx.x; P < np; P += FIT_THREADS) {
            /* piece P is lane P % 32's piece k = (P / 32) % KN in warp P / (32·KN) of every group */
            const int t = (P / (32 * KN)) * 32 + P % 32, k = (P / 32) % KN;
            float cm[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 2
            for (int g = 0; g < GROUPS; ++g) { /* 2: all GROUPS' loads at once would spill */
                const uint4 v = cmx[k * FIT_THREADS + g * TPR + t];
#pragma unroll
                for (int j = 0; j < 8; ++j) cm[j] = fmaxf(cm[j], bf16_at(v, j));
            }
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                int *const to = (int *)p.col_amax + 8 * P + j;
                const int bits = __float_as_int(cm[j]); /* non-negative floats order as their bits */
                if (bits > __ldcg(to)) atomicMax(to, bits);
            }
        }
    }
    if (p.amax != NULL) block_amax_atomic<FIT_THREADS>(lane == 0 ? amax_w[threadIdx.x >> 5] : 0.0f, p.amax);
    if (COUNT) /* the warps' counts, from their lanes 0 */
        block_stats_atomic<FIT_THREADS>(lane == 0 ? tele[0][threadIdx.x >> 5] : 0u,
                                        lane == 0 ? tele[1][threadIdx.x >> 5] : 0u, p.stats, p.rows * p.cols,
                                        blockIdx.x == 0);
}

/* ------------------------------------------------------------------------ */
/* Launch                                                                    */
/* ------------------------------------------------------------------------ */

template <int E5M2, int RMS, int KN, int NW>
static f8_status fit_row_launch(f8_ctx *ctx, const norm_fwd_params *p)
{
    void (*kernel)(norm_fwd_params) =
        p->col_amax != NULL ? (p->stats != NULL ? norm_fwd_fit_row_kernel<E5M2, RMS, KN, NW, 1, 1>
                                                : norm_fwd_fit_row_kernel<E5M2, RMS, KN, NW, 0, 1>)
                            : (p->stats != NULL ? norm_fwd_fit_row_kernel<E5M2, RMS, KN, NW, 1, 0>
                                                : norm_fwd_fit_row_kernel<E5M2, RMS, KN, NW, 0, 0>);
    /* the planes, the ring and, with col_amax, the column maxima (as large as the ring) */
    const size_t np = (size_t)(p->cols / 8), ring = (size_t)FIT_STAGES * KN * FIT_THREADS * 16;
    const size_t smem = np * (RMS ? 2 : 4) * 16 + ring + (p->col_amax != NULL ? (size_t)KN * FIT_THREADS * 16 : 0);
    unsigned grid;
    F8I_TRY(f8i_norm_fwd_fit_grid(ctx, p, (const void *)kernel, smem, FIT_THREADS / (32 * NW), &grid));
    kernel<<<grid, FIT_THREADS, smem, f8i_stream(ctx)>>>(*p);
    return F8_OK;
}

template <int E5M2, int RMS, int KN>
static f8_status fit_row_launch_nw(f8_ctx *ctx, const norm_fwd_params *p)
{
    switch (p->tpr) {
    case 64: return fit_row_launch<E5M2, RMS, KN, 2>(ctx, p);
    case 128: return fit_row_launch<E5M2, RMS, KN, 4>(ctx, p);
    default: return fit_row_launch<E5M2, RMS, KN, 8>(ctx, p);
    }
}

template <int E5M2, int RMS>
static f8_status fit_row_launch_kn(f8_ctx *ctx, const norm_fwd_params *p)
{
    return f8i_norm_fwd_fit_kn(p) == 3 ? fit_row_launch_nw<E5M2, RMS, 3>(ctx, p)
                                       : fit_row_launch_nw<E5M2, RMS, 4>(ctx, p);
}

template <int E5M2>
static f8_status fit_row_launch_norm(f8_ctx *ctx, const norm_fwd_params *p)
{
    return p->rms ? fit_row_launch_kn<E5M2, 1>(ctx, p) : fit_row_launch_kn<E5M2, 0>(ctx, p);
}

/* ------------------------------------------------------------------------ */
/* Entry points (norm_fwd.cu)                                                */
/* ------------------------------------------------------------------------ */

int f8i_norm_fwd_fit_row_fits(const norm_fwd_params *p)
{
    if ((p->y_kind != Y_E4M3 && p->y_kind != Y_E5M2) || p->w_y < 8 || !p->hp_bf16) return 0;
    if (p->rows > INT32_MAX / 2) return 0; /* the kernel's row indices, and a grid's stride past them, in an int */
    if (p->y_hp != NULL && p->w_hp != 16) return 0;
    return f8i_norm_fwd_fit_kn(p) >= 3; /* 3 or 4 (f8i_norm_fwd_fit_kn): the instances here */
}

f8_status f8i_norm_fwd_fit_row_launch(f8_ctx *ctx, const norm_fwd_params *p)
{
    if (!f8i_norm_fwd_fit_row_fits(p)) /* the caller asks f8i_norm_fwd_fit_row_fits first */
        return f8i_error(ctx, F8_ERR_STATE, "row-wise norm forward: the fit kernel cannot run this shape");
    F8I_TRY(p->y_kind == Y_E5M2 ? fit_row_launch_norm<1>(ctx, p) : fit_row_launch_norm<0>(ctx, p));
    F8I_COUNT_LAUNCHES(ctx, 1);
    return f8i_cuda_launch_check(ctx, "norm_fwd_fit_row_kernel");
}
