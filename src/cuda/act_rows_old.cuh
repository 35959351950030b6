/*
 * act_rows_old.cuh — the rows kernels as they were before they took several
 * pieces' loads ahead (act_kernels.cuh's act_fwd_kernel and
 * act_bwd_rows_kernel), kept only so that one GPU call can time the two
 * side by side (bench_kernels act, the "_old" lines) and test_cuda_act can
 * compare their bytes; the CUDA ctx's test hook f8i_cuda_act_rows_old
 * (backend.h) sends BF16 jobs here, never the step path. Instantiated for
 * BF16 x (and dy) only. Delete this file, the hook and those lines once
 * bench/RESULTS.md records the comparison.
 *
 * Their walk, unchanged: the forward took ACT_OLD_UNROLL pieces at a time
 * for a plain activation and one (two 16-byte loads of BF16 x) for a gated
 * one, with ACT_OLD_FWD_BLOCKS blocks an SM; the backward one piece at a
 * time (its loads, then its use), no launch bounds' blocks, a grid of
 * F8I_BLOCKS_PER_SM blocks an SM, more than were resident.
 */
#ifndef F8_CUDA_ACT_ROWS_OLD_CUH
#define F8_CUDA_ACT_ROWS_OLD_CUH

#define ACT_OLD_UNROLL 2     /* pieces a plain forward thread loaded before using the first */
#define ACT_OLD_FWD_BLOCKS 5 /* forward blocks per SM: its launch bounds (<= 48 registers) and grid */

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
static __global__ void __launch_bounds__(ACT_THREADS, ACT_OLD_FWD_BLOCKS) act_fwd_old_kernel(act_rows_params p)
{
    constexpr int GATED = act_gated(ACT), FP8 = YK >= 2;
    constexpr int U = GATED ? 1 : ACT_OLD_UNROLL; /* a gated piece is two loads already */
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
 * act_fwd_old_kernel; a gated thread's piece k gives d_a at columns 8k.. and d_b
 * at h + 8k.. from one load of a, b and dy. Thread 0 of block (0, 0) writes
 * scale_inv. */
template <int ACT, int XBF16, int DYBF16, int E5M2>
static __global__ void __launch_bounds__(ACT_THREADS) act_bwd_rows_old_kernel(act_rows_params p)
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

#endif /* F8_CUDA_ACT_ROWS_OLD_CUH */
