/*
 * norm_fwd_rowwise.cu — the LayerNorm / RMSNorm forward with row-wise
 * scaling's cast fused (backend.h's F8I_ROW_FUSED): FP8 codes of each row
 * with the row's own power-of-two or FP32 scale, for rows up to
 * FWD_MAX_COLS that norm_fwd_fit_rowwise.cu's kernel does not take (that
 * one runs BF16 x and u on the fit layout's rows; norm_fwd.cu sends rows
 * past FWD_MAX_COLS through its wide kernel into y_hp and the row-wise cast
 * after, the unfused path's two launches).
 *
 * Design note. A token row of the norm output is one norm row, and the
 * row-group kernels hold a row in registers between its statistics and its
 * store: the row's amax is one more group reduction, so the row-wise codes
 * cost no extra pass over memory. The kernel is norm_fwd.cu's registers
 * kernel (the same layout, loads, sums and statistics in the same order,
 * so the same values bit for bit: the unfused path may run the staged or
 * the fit kernel, which give those bits too) with its store split in two
 * passes over the registers: the values, rounded to the high-precision
 * dtype (u: what the unfused path stores and its cast reads back), and
 * their max |u| taken by the group (fmaxf: exact in any order); then the
 * scale from f8i_current_scale (numerics.h, the function the row-wise cast
 * and the CPU call) and the codes of u · s, with the high-precision copy
 * y_hp written beside them when asked for (the column-wise copy's source).
 * So the codes, scale_inv, amax and telemetry are the row-wise cast's of
 * u, bit for bit (test_cuda_rowwise.c holds them to the CPU's cast of the
 * kernel's own y_hp, and the modules to the unfused path). Telemetry is a
 * template argument, as in the per-tensor kernels: a run-time flag spilled
 * twice the registers (ptxas -v) in the instances that run without it.
 * The column amaxes (col_amax: the column-wise cast's first pass, so that
 * the cast after reads u once) are one more template argument for the same
 * reason: pass 1 also maxes each piece into the group's shared slots, which
 * leave the block with one atomic a column at its end.
 */
#include <stdint.h>

#include "norm_fwd.cuh"

/* Forward with the row-wise cast fused. Layout: ROWS_LAYOUT (norm_fwd.cuh),
 * THREADS = 512, the next row's x in xn, as norm_fwd_regs_kernel. The
 * group's thread 0 writes mu, rsigma and the row's scale_inv; each block
 * adds its amax (and telemetry) with one atomic. COLMAX (col_amax set):
 * pass 1 also takes each column's max |u| over the group's rows, in the
 * group's own slots after the planes (cmax [groups][np·E], BF16 bits or
 * FP32: norm_row_cmax_bytes; a thread's pieces' slots are read and written
 * by it alone, the groups' rows being disjoint and their columns the same,
 * so no atomics); at the end the block takes the max over its groups and
 * adds it with one atomicMax of the bits a column into col_amax (zeroed
 * before the launch), skipped where col_amax already holds as much (read
 * from the L2, where the atomics are done: the word only grows). */
template <int X_BF16, int E5M2, int RMS, int HP_BF16, int COUNT, int COLMAX>
static __global__ void __launch_bounds__(512, 2) norm_fwd_row_kernel(norm_fwd_params p)
{
    constexpr int THREADS = 512, E = X_BF16 ? 8 : 4, YK = E5M2 ? Y_E5M2 : Y_E4M3, HK = HP_BF16 ? Y_BF16 : Y_FP32;
    constexpr int NPL = (E / 4) * (RMS ? 1 : 2), CS = HP_BF16 ? 2 : 4; /* CS: bytes of a column's slot */
    extern __shared__ float4 gb[];
    __shared__ float red[2][THREADS / 32]; /* [slot][warp] */
    ROWS_LAYOUT;

    uint4 xr[FWD_NV], xn[FWD_NV]; /* this row's x, and the next row's */
    regs_start<X_BF16, RMS, THREADS>(xr, xn, gb, p, row, cols, c0, room, np);
    /* COLMAX: the maxima after the planes; this thread's piece k at cmt + 32·k·E·CS */
    char *const cmx = (char *)(gb + (size_t)((np + 31) / 32) * NPL * 32);
    char *const cmt = cmx + ((size_t)group * np * E + c0) * CS;
    if (COLMAX)
#pragma unroll
        for (int k = 0; k < FWD_NV; ++k)
            if (32 * k < room) cmax_zero<E, HP_BF16>(cmt + 32 * k * E * CS);

    constexpr bool counting = COUNT; /* telemetry: its own instances (fewer registers spilled without) */
    float amax = 0.0f;
    unsigned sat = 0, flushed = 0;
    int slot = 0;
    while (row < rows) {
        const int64_t next = row + stride;
        if (next < rows) load_row<X_BF16>(xn, p.x, next, cols, c0, room, p.w_x);
        const float2 st = row_stats<X_BF16, RMS>(xr, red, slot, nw, first, bar, c0, cols, room, inv_n, p.eps);
        const float mu = st.x, rs = st.y;
        /* Pass 1: the row's max |u|. Past the row's end g = b = 0 and x = 0:
         * u is ±0 or NaN there, neither of which moves fmaxf. */
        float m = 0.0f;
#pragma unroll
        for (int k = 0; k < FWD_NV; ++k) {
            if (32 * k >= room) continue;
            float u[E];
            piece_values<X_BF16, RMS, HP_BF16>(u, xr[k], gbt, k, mu, rs);
#pragma unroll
            for (int j = 0; j < E; ++j) m = fmaxf(m, fabsf(u[j]));
            if (COLMAX) cmax_piece<E, HP_BF16>(cmt + 32 * k * E * CS, u); /* slots past cols are never read */
        }
        m = group_max(m, nw, first, red[slot], bar);
        slot ^= 1;
        const float s = f8i_current_scale(m, 1.0f, p.scaled_max, p.pow2);
        amax = fmaxf(amax, m);
        if (threadIdx.x == (unsigned)(first * 32)) {
            if (!RMS && p.mu != NULL) p.mu[row] = mu;
            if (p.rsigma != NULL) p.rsigma[row] = rs;
            if (p.scale_inv != NULL) p.scale_inv[row] = 1.0f / s;
        }
        /* Pass 2: codes of u · s, and u itself where asked. */
        char *yrow = (char *)p.y + row * cols;
        char *hrow = p.y_hp != NULL ? (char *)p.y_hp + row * cols * (HP_BF16 ? 2 : 4) : NULL;
#pragma unroll
        for (int k = 0; k < FWD_NV; ++k) {
            const int c = c0 + 32 * k * E;
            if (32 * k >= room) continue;
            float u[E];
            piece_values<X_BF16, RMS, HP_BF16>(u, xr[k], gbt, k, mu, rs);
            store_piece<YK, E, int>(yrow, c, cols, u, s, p.w_y);
            if (p.y_hp != NULL) store_piece<HK, E, int>(hrow, c, cols, u, 1.0f, p.w_hp);
            if (counting) piece_stats<YK, E, int>(u, s, c, cols, sat, flushed);
        }
#pragma unroll
        for (int k = 0; k < FWD_NV; ++k) xr[k] = xn[k];
        row = next;
    }
    if (COLMAX) {
        __syncthreads(); /* every group's slots final */
#pragma unroll 4
        for (int c = threadIdx.x; c < cols; c += THREADS) {
            float m = 0.0f;
            for (int g = 0; g < groups; ++g) {
                const char *at = cmx + ((size_t)g * np * E + c) * CS;
                m = fmaxf(m, HP_BF16 ? __uint_as_float((uint32_t)*(const uint16_t *)at << 16) : *(const float *)at);
            }
            const int bits = __float_as_int(m); /* non-negative floats order as their bits */
            if (bits > __ldcg((const int *)p.col_amax + c)) atomicMax((int *)p.col_amax + c, bits);
        }
    }
    if (p.amax != NULL) block_amax_atomic<THREADS>(amax, p.amax);
    if (counting) block_stats_atomic<THREADS>(sat, flushed, p.stats, p.rows * p.cols, blockIdx.x == 0);
}

template <int X_BF16, int E5M2, int RMS, int HP_BF16>
static f8_status launch(f8_ctx *ctx, const norm_fwd_params *p, size_t smem, unsigned grid)
{
    void (*kernel)(norm_fwd_params) =
        p->col_amax != NULL ? (p->stats != NULL ? norm_fwd_row_kernel<X_BF16, E5M2, RMS, HP_BF16, 1, 1>
                                                : norm_fwd_row_kernel<X_BF16, E5M2, RMS, HP_BF16, 0, 1>)
                            : (p->stats != NULL ? norm_fwd_row_kernel<X_BF16, E5M2, RMS, HP_BF16, 1, 0>
                                                : norm_fwd_row_kernel<X_BF16, E5M2, RMS, HP_BF16, 0, 0>);
    if (smem + 2048 > 48 * 1024) /* the static arrays beside the planes, as norm_fwd.cu counts them */
        F8I_TRY(f8i_cuda_smem_optin(ctx, (const void *)kernel, "row-wise norm forward: shared-memory opt-in"));
    kernel<<<grid, 512, smem, f8i_stream(ctx)>>>(*p);
    return F8_OK;
}

template <int X_BF16, int E5M2>
static f8_status launch_norm(f8_ctx *ctx, const norm_fwd_params *p, size_t smem, unsigned grid)
{
    if (p->rms)
        return p->hp_bf16 ? launch<X_BF16, E5M2, 1, 1>(ctx, p, smem, grid) : launch<X_BF16, E5M2, 1, 0>(ctx, p, smem, grid);
    return p->hp_bf16 ? launch<X_BF16, E5M2, 0, 1>(ctx, p, smem, grid) : launch<X_BF16, E5M2, 0, 0>(ctx, p, smem, grid);
}

f8_status f8i_norm_fwd_row_launch(f8_ctx *ctx, const norm_fwd_params *p, size_t smem, unsigned grid)
{
    const int e5m2 = p->y_kind == Y_E5M2;
    f8_status st;
    if (p->x_bf16) st = e5m2 ? launch_norm<1, 1>(ctx, p, smem, grid) : launch_norm<1, 0>(ctx, p, smem, grid);
    else st = e5m2 ? launch_norm<0, 1>(ctx, p, smem, grid) : launch_norm<0, 0>(ctx, p, smem, grid);
    if (st != F8_OK) return st;
    F8I_COUNT_LAUNCHES(ctx, 1);
    return f8i_cuda_launch_check(ctx, "norm_fwd_row_kernel");
}
