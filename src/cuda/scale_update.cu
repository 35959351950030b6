/*
 * scale_update.cu — the fused delayed-scaling update of every slot of one
 * direction (f8i_scale_update_args in backend.h; semantics in f8.h,
 * f8_ctx_update_scales), in one launch.
 *
 * Design note. The history is [L, ld] row-major with a slot per column, so a
 * block owns SU_COLS adjacent columns (threadIdx.x, coalesced along a row) and
 * spreads the L rows over SU_ROWS thread rows (threadIdx.y); a single thread
 * walking 1024 rows would be latency-bound. The roll h[i-1] = h[i] is done in
 * place, one chunk of SU_ROWS * SU_UNROLL rows at a time: every thread reads
 * its rows of the chunk into registers, the block synchronizes, then every
 * thread writes them one row up. A chunk writes only rows that this or an
 * earlier chunk has already read (before the barrier), and reads only rows no
 * one has written yet, so the in-place roll needs one barrier per chunk. The
 * window max is fmaxf from 0 (exact and order-free, NaN ignored), reduced over
 * the thread rows through shared memory; thread row 0 then writes h[L-1] =
 * last, h[0] = 0 and the scale pair with the same formula as the CPU backend.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "kernels_common.cuh"

#define SU_COLS 16  /* columns (slots) per block: 64-byte row segments */
#define SU_ROWS 32  /* threads along the history per column */
#define SU_UNROLL 8 /* history rows a thread holds per chunk */

/* ------------------------------------------------------------------------ */
/* Kernel                                                                    */
/* ------------------------------------------------------------------------ */

/* Delayed-scaling update of SU_COLS slots.
 * Grid: ceil(count / SU_COLS) blocks; block (SU_COLS, SU_ROWS). Thread (x, y)
 * owns column c = blockIdx.x * SU_COLS + x and, in the chunk starting at row
 * i0, rows i0 + u * SU_ROWS + y (u < SU_UNROLL). Thread (x, 0) writes the
 * column's h[0], h[L-1], scale and scale_inv. */
static __global__ void __launch_bounds__(SU_COLS * SU_ROWS) scale_update_kernel(f8i_scale_update_args a)
{
    __shared__ float win_max[SU_ROWS][SU_COLS + 1];
    const int x = threadIdx.x, y = threadIdx.y;
    const int64_t j = (int64_t)blockIdx.x * SU_COLS + x;
    const int64_t ld = a.ld;
    const int L = a.history_len;
    float *h = a.history;
    const bool valid = j < a.count;
    const int64_t c = !valid ? 0 : a.cols ? (int64_t)a.cols[j] : j; /* the slot's column */
    /* Every thread reads row 0 before the first barrier; it is written last. */
    const float last = valid ? h[c] : 0.0f;
    const bool roll = valid && last != 0.0f;

    float m = 0.0f;
    for (int i0 = 1; i0 < L; i0 += SU_ROWS * SU_UNROLL) { /* uniform trip count */
        float v[SU_UNROLL];
#pragma unroll
        for (int u = 0; u < SU_UNROLL; ++u) {
            const int i = i0 + u * SU_ROWS + y;
            v[u] = (roll && i < L) ? h[(int64_t)i * ld + c] : 0.0f;
            m = fmaxf(m, v[u]);
        }
        __syncthreads();
#pragma unroll
        for (int u = 0; u < SU_UNROLL; ++u) {
            const int i = i0 + u * SU_ROWS + y;
            if (roll && i >= 2 && i < L) h[(int64_t)(i - 1) * ld + c] = v[u]; /* old h[1] is dropped */
        }
    }
    win_max[y][x] = m;
    __syncthreads();
    if (y != 0 || !valid) return;

    float amax = 0.0f;
    if (roll) {
        for (int r = 0; r < SU_ROWS; ++r) amax = fmaxf(amax, win_max[r][x]);
        amax = fmaxf(amax, last);
        if (a.algo == F8_AMAX_MOST_RECENT) amax = last;
        h[(int64_t)(L - 1) * ld + c] = last; /* for L == 1 this is row 0, cleared next */
        h[c] = 0.0f;
    }
    float s = a.scale[c];
    if (isfinite(amax) && amax > 0.0f) s = a.scaled_max / amax;
    if (isinf(s)) s = FLT_MAX;
    a.scale[c] = s;
    a.scale_inv[c] = 1.0f / s;
}

/* FP8 telemetry's step boundary (f8i_telemetry_snap_args).
 * Grid: ceil(count / 256) blocks; block 256. Thread j owns slot j. */
static __global__ void __launch_bounds__(256) telemetry_snap_kernel(f8i_telemetry_snap_args a)
{
    const int j = blockIdx.x * 256 + threadIdx.x;
    if (j >= a.count) return;
    a.snap_f[2 * j] = a.amax[j];
    a.snap_f[2 * j + 1] = a.scale[j];
#pragma unroll
    for (int k = 0; k < 3; ++k) {
        a.snap_c[3 * j + k] = a.live[3 * j + k];
        a.live[3 * j + k] = 0;
    }
}

/* ------------------------------------------------------------------------ */
/* Backend entry points                                                      */
/* ------------------------------------------------------------------------ */

f8_status f8i_cuda_telemetry_snap(f8_ctx *ctx, const f8i_telemetry_snap_args *args)
{
    if (args->count <= 0) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1);
    telemetry_snap_kernel<<<(args->count + 255) / 256, 256, 0, f8i_stream(ctx)>>>(*args);
    return f8i_cuda_launch_check(ctx, "telemetry_snap_kernel");
}

f8_status f8i_cuda_scale_update(f8_ctx *ctx, const f8i_scale_update_args *args)
{
    if (args->count < 0 || args->history_len < 1 || args->ld < args->count)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "scale update: count %d, history_len %d, ld %lld",
                         args->count, args->history_len, (long long)args->ld);
    if (args->count == 0) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1);
    const unsigned blocks = (unsigned)((args->count + SU_COLS - 1) / SU_COLS);
    scale_update_kernel<<<blocks, dim3(SU_COLS, SU_ROWS), 0, f8i_stream(ctx)>>>(*args);
    return f8i_cuda_launch_check(ctx, "scale_update_kernel");
}
