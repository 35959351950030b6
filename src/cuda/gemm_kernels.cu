/*
 * gemm_kernels.cu — the CUDA kernels of the backend GEMM (gemm.cu drives
 * them; cuda_state.cuh declares their launchers): the fallback GEMM for what
 * cuBLASLt cannot take, the bias after a GEMM, and the pad and slice passes
 * of odd FP8 shapes.
 *
 * Design note. These are the GEMM's memory-bound helpers and its slow
 * path; gemm.cu's note says when each runs and why (the byte estimates of
 * the padded path are there). The pad and slice kernels move whole 16-byte
 * pieces where the layout allows (the padded side is always 16-byte aligned
 * and 16 wide), so they run near copy bandwidth; the fallback is a plain
 * tiled FP32 GEMM that decodes FP8 codes exactly.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_state.cuh"
#include "core/numerics.h"

/* Fallback tiling: a 16×16 block computes a 64×64 tile of D, each thread a
 * 4×4 sub-tile (rows ty + 16·r, cols tx + 16·c), stepping K by 16. */
#define FB_THREADS 16
#define FB_TILE 64
#define FB_PER_THREAD (FB_TILE / FB_THREADS)
#define FB_K 16
static_assert(FB_TILE * FB_K == 4 * FB_THREADS * FB_THREADS, "each thread loads 4 elements of a tile");

typedef struct fallback_params {
    const void *a, *b;
    const float *a_scale_inv, *b_scale_inv; /* NULL = 1; read only for FP8 */
    void *d;
    const void *bias;                       /* NULL = none */
    int64_t m, n, k;
    f8_dtype d_dtype, bias_dtype;
    int a_trans, b_trans, accumulate, fp8;
} fallback_params;

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

/* One operand element as FP32; DT is an f8_dtype. FP8 and BF16 decode exactly. */
template <int DT>
static __device__ __forceinline__ float load_operand(const void *p, int64_t i)
{
    if (DT == F8_DTYPE_FP32) return ((const float *)p)[i];
    if (DT == F8_DTYPE_BF16) return f8i_bf16_to_float(((const uint16_t *)p)[i]);
    return f8i_fp8_decode(((const uint8_t *)p)[i], DT == F8_DTYPE_E5M2);
}

/* D / bias element access for FP32 or BF16 (BF16 stores round to nearest even). */
static __device__ __forceinline__ float load_vec(const void *p, int64_t i, f8_dtype dt)
{
    return dt == F8_DTYPE_BF16 ? f8i_bf16_to_float(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static __device__ __forceinline__ void store_vec(void *p, int64_t i, f8_dtype dt, float v)
{
    if (dt == F8_DTYPE_BF16)
        ((uint16_t *)p)[i] = f8i_bf16_from_float(v);
    else
        ((float *)p)[i] = v;
}

/* Fallback GEMM, D[m, n] = alpha·Σ_k A(i, k)·B(j, k) (+ D) (+ bias[j]).
 * Grid: x over 64-column tiles of D, y over 64-row tiles (grid-stride in both,
 * so any m, n fits the grid limits). Block: 16×16 threads. Thread (tx, ty)
 * owns D rows i0 + ty + 16·r and columns j0 + tx + 16·c, r, c < 4, and loads 4
 * elements of each 64×16 operand tile per K step, walking the operand's
 * contiguous dimension across neighbouring threads (coalesced either way). */
template <int ADT, int BDT>
static __global__ void __launch_bounds__(FB_THREADS * FB_THREADS) gemm_fallback_kernel(fallback_params p)
{
    __shared__ float as[FB_K][FB_TILE + 1]; /* as[kk][i] = A(i0 + i, k0 + kk) */
    __shared__ float bs[FB_K][FB_TILE + 1]; /* bs[kk][j] = B(j0 + j, k0 + kk) */
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tid = ty * FB_THREADS + tx;
    float alpha = 1.0f;
    if (p.fp8) alpha = (p.a_scale_inv ? *p.a_scale_inv : 1.0f) * (p.b_scale_inv ? *p.b_scale_inv : 1.0f);
    const int64_t tiles_m = (p.m + FB_TILE - 1) / FB_TILE, tiles_n = (p.n + FB_TILE - 1) / FB_TILE;

    for (int64_t tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
        for (int64_t tn = blockIdx.x; tn < tiles_n; tn += gridDim.x) {
            const int64_t i0 = tm * FB_TILE, j0 = tn * FB_TILE;
            float acc[FB_PER_THREAD][FB_PER_THREAD];
#pragma unroll
            for (int r = 0; r < FB_PER_THREAD; r++)
#pragma unroll
                for (int c = 0; c < FB_PER_THREAD; c++) acc[r][c] = 0.0f;

            for (int64_t k0 = 0; k0 < p.k; k0 += FB_K) {
                for (int l = 0; l < 4; l++) {
                    const int e = tid + l * FB_THREADS * FB_THREADS;
                    /* K-contiguous operands walk k fastest, the others walk i/j. */
                    int ii = p.a_trans ? e % FB_TILE : e / FB_K;
                    int kk = p.a_trans ? e / FB_TILE : e % FB_K;
                    int64_t gi = i0 + ii, gk = k0 + kk;
                    float v = 0.0f;
                    if (gi < p.m && gk < p.k) v = load_operand<ADT>(p.a, p.a_trans ? gk * p.m + gi : gi * p.k + gk);
                    as[kk][ii] = v;
                    ii = p.b_trans ? e % FB_TILE : e / FB_K;
                    kk = p.b_trans ? e / FB_TILE : e % FB_K;
                    gi = j0 + ii;
                    gk = k0 + kk;
                    v = 0.0f;
                    if (gi < p.n && gk < p.k) v = load_operand<BDT>(p.b, p.b_trans ? gk * p.n + gi : gi * p.k + gk);
                    bs[kk][ii] = v;
                }
                __syncthreads();
#pragma unroll
                for (int kk = 0; kk < FB_K; kk++) {
                    float av[FB_PER_THREAD], bv[FB_PER_THREAD];
#pragma unroll
                    for (int r = 0; r < FB_PER_THREAD; r++) av[r] = as[kk][ty + FB_THREADS * r];
#pragma unroll
                    for (int c = 0; c < FB_PER_THREAD; c++) bv[c] = bs[kk][tx + FB_THREADS * c];
#pragma unroll
                    for (int r = 0; r < FB_PER_THREAD; r++)
#pragma unroll
                        for (int c = 0; c < FB_PER_THREAD; c++) acc[r][c] = __fmaf_rn(av[r], bv[c], acc[r][c]);
                }
                __syncthreads();
            }

#pragma unroll
            for (int r = 0; r < FB_PER_THREAD; r++) {
                const int64_t i = i0 + ty + FB_THREADS * r;
#pragma unroll
                for (int c = 0; c < FB_PER_THREAD; c++) {
                    const int64_t j = j0 + tx + FB_THREADS * c;
                    if (i >= p.m || j >= p.n) continue;
                    float v = alpha * acc[r][c];
                    if (p.accumulate) v = v + load_vec(p.d, i * p.n + j, p.d_dtype);
                    if (p.bias) v = v + load_vec(p.bias, j, p.bias_dtype);
                    store_vec(p.d, i * p.n + j, p.d_dtype, v);
                }
            }
        }
    }
}

/* d[i, j] = (overwrite ? 0 : d[i, j]) + bias[j] over D[m, n]: the bias when the
 * cuBLASLt epilogue cannot take its dtype, and k == 0.
 * Grid: 1-D, grid-stride. Block: 256 threads. A thread owns elements
 * idx = global thread id + s·(grid size). */
static __global__ void __launch_bounds__(256)
    gemm_bias_kernel(void *d, f8_dtype d_dtype, const void *bias, f8_dtype bias_dtype, int64_t m, int64_t n,
                    int overwrite)
{
    const int64_t total = m * n;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const float old = overwrite ? 0.0f : load_vec(d, idx, d_dtype);
        store_vec(d, idx, d_dtype, old + load_vec(bias, idx % n, bias_dtype));
    }
}

/* Zero-padded copy of an FP8 operand: dst [dst_rows, dst_cols] (dst_cols a
 * multiple of 16, dst 16-byte aligned) = src [rows, cols] with zeros in
 * columns >= cols and rows >= rows. V (2, 4, 8 or 16) divides cols and
 * src's address, so each V-byte piece of a row is one aligned load. V = 0
 * (cols odd, the common odd case, src 4-byte aligned): the 16 bytes come
 * from the up to 5 aligned words that hold them, joined by funnel shifts,
 * bytes past the row's end cleared; a word is loaded only if it holds a
 * byte of the row, so no load leaves the 4-byte-aligned span of the data.
 * (Byte loads would cost 16 load instructions per chunk, each touching a
 * 512-byte span across the warp: L1-bound at about half of HBM bandwidth.)
 * V = 1: byte loads, for a source not 4-byte aligned.
 * Grid: 1-D, grid-stride. Block: 256 threads. A thread owns one 16-byte
 * chunk of dst (row r, columns col0..col0+15) per step and stores it whole. */
typedef struct pad_job {
    const uint8_t *src;
    int64_t rows, cols;
    uint8_t *dst;
    int64_t dst_rows, dst_cols;
} pad_job;

typedef union pad_chunk {
    uint4 v;
    unsigned long long q[2];
    uint32_t w[4];
    uint16_t h[8];
    uint8_t b[16];
} pad_chunk;

/* The chunk of row bytes s[0 .. nvalid) (nvalid in 1..16), zeros after; s
 * lies in a source that starts 4-byte aligned and ends at `end`. The last
 * word of a source whose size is not a multiple of 4 is read byte by byte,
 * so nothing past `end` is touched. */
static __device__ __forceinline__ void pad_shifted(pad_chunk *u, const uint8_t *s, int nvalid, const uint8_t *end)
{
    const uintptr_t a = (uintptr_t)s;
    const uint8_t *w = (const uint8_t *)(a & ~(uintptr_t)3);
    const unsigned sh = (unsigned)(a & 3) * 8;
    const int need = (int)((a & 3) + (unsigned)nvalid + 3) / 4; /* words holding s[0 .. nvalid) */
    uint32_t x[5];
#pragma unroll
    for (int q = 0; q < 5; q++) {
        x[q] = 0u;
        if (q >= need) continue;
        const uint8_t *p = w + 4 * q;
        if (p + 4 <= end) {
            x[q] = *(const uint32_t *)p;
        } else {
            for (int b = 0; p + b < end; b++) x[q] |= (uint32_t)p[b] << (8 * b);
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        /* bytes sh/8.. of x[i] continued by x[i + 1] (little-endian): a funnel shift */
        uint32_t v = (uint32_t)((((unsigned long long)x[i + 1] << 32) | x[i]) >> sh);
        const int keep = nvalid - 4 * i; /* bytes of this word inside the row */
        if (keep <= 0) v = 0u;
        else if (keep < 4) v &= (1u << (8 * keep)) - 1u;
        u->w[i] = v;
    }
}

template <int V>
static __global__ void __launch_bounds__(256) gemm_pad_kernel(pad_job j)
{
    const int64_t per_row = j.dst_cols / 16, total = j.dst_rows * per_row;
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < total; c += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = c / per_row, col0 = (c - r * per_row) * 16;
        pad_chunk u;
        u.v = make_uint4(0u, 0u, 0u, 0u);
        if (r < j.rows && col0 < j.cols) {
            const uint8_t *s = j.src + r * j.cols + col0;
            if (V == 16) {
                u.v = *(const uint4 *)s;
            } else if (V == 0) {
                const int64_t left = j.cols - col0;
                pad_shifted(&u, s, left < 16 ? (int)left : 16, j.src + j.rows * j.cols);
            } else {
#pragma unroll
                for (int t = 0; t < 16 / (V > 0 && V < 16 ? V : 16); t++) {
                    if (col0 + t * V >= j.cols) break; /* V divides cols: a piece is all in or all out */
                    if (V == 8) u.q[t] = *(const unsigned long long *)(s + 8 * t);
                    if (V == 4) u.w[t] = *(const uint32_t *)(s + 4 * t);
                    if (V == 2) u.h[t] = *(const uint16_t *)(s + 2 * t);
                    if (V == 1) u.b[t] = s[t];
                }
            }
        }
        *(uint4 *)(j.dst + c * 16) = u.v;
    }
}

/* The slice back from a padded D (f8i_gemm_slice_args): d[i, j] = dp[i, j]
 * (+ d[i, j] if accumulate) (+ bias[j]) over D [m, cols]: the epilogue
 * order of cuBLASLt and of the fallback (alpha·ΣAB + D + bias).
 * Grid: x over SLICE_STRIP-column strips, y over rows (grid-stride in both).
 * Block: 256 threads; a thread owns columns j + 256·u (u < 4) of its strip in
 * rows i = blockIdx.y + s·gridDim.y, loading all four before it stores (odd
 * n leaves rows unaligned, so the bytes in flight come from ILP, not width). */
#define SLICE_STRIP 1024
static __global__ void __launch_bounds__(256) gemm_slice_kernel(f8i_gemm_slice_args a)
{
    for (int64_t i = blockIdx.y; i < a.m; i += gridDim.y) {
        for (int64_t j0 = (int64_t)blockIdx.x * SLICE_STRIP + threadIdx.x; j0 < a.cols;
             j0 += (int64_t)gridDim.x * SLICE_STRIP) {
            float v[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int64_t j = j0 + 256 * u;
                v[u] = 0.0f;
                if (j >= a.cols) continue;
                v[u] = load_vec(a.dp, i * a.ldp + j, a.dp_dtype);
                if (a.accumulate) v[u] = v[u] + load_vec(a.d, i * a.ldd + j, a.d_dtype);
                if (a.bias) v[u] = v[u] + load_vec(a.bias, j, a.bias_dtype);
            }
#pragma unroll
            for (int u = 0; u < 4; u++)
                if (j0 + 256 * u < a.cols) store_vec(a.d, i * a.ldd + j0 + 256 * u, a.d_dtype, v[u]);
        }
    }
}

/* The same slice for a narrow D (cols < 256: the split's tail of < 16
 * columns), where a block per row would leave most threads idle.
 * Grid: 1-D, grid-stride. Block: 256 threads. A thread owns element
 * e = global thread id + s·(grid size) of the m x cols slice, row e / cols. */
static __global__ void __launch_bounds__(256) gemm_slice_narrow_kernel(f8i_gemm_slice_args a)
{
    const int64_t total = a.m * a.cols;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = e / a.cols, j = e - i * a.cols;
        float v = load_vec(a.dp, i * a.ldp + j, a.dp_dtype);
        if (a.accumulate) v = v + load_vec(a.d, i * a.ldd + j, a.d_dtype);
        if (a.bias) v = v + load_vec(a.bias, j, a.bias_dtype);
        store_vec(a.d, i * a.ldd + j, a.d_dtype, v);
    }
}

/* ------------------------------------------------------------------------ */
/* Launchers                                                                 */
/* ------------------------------------------------------------------------ */

/* Blocks of 256 threads for `items`, at most 16 per SM (grid-stride kernels). */
static unsigned grid_1d(f8_ctx *ctx, int64_t items)
{
    int64_t blocks = (items + 255) / 256;
    const int64_t cap = (int64_t)(f8i_cuda(ctx)->sm_count > 0 ? f8i_cuda(ctx)->sm_count : 132) * 16;
    if (blocks > cap) blocks = cap;
    return (unsigned)(blocks > 0 ? blocks : 1);
}

f8_status f8i_cuda_gemm_bias(f8_ctx *ctx, const f8i_gemm_args *g, int overwrite)
{
    F8I_COUNT_LAUNCHES(ctx, 1);
    gemm_bias_kernel<<<grid_1d(ctx, g->m * g->n), 256, 0, f8i_stream(ctx)>>>(g->d, g->d_dtype, g->bias, g->bias_dtype,
                                                                           g->m, g->n, overwrite);
    return f8i_cuda_launch_check(ctx, "gemm_bias_kernel");
}

f8_status f8i_cuda_gemm_fallback(f8_ctx *ctx, const f8i_gemm_args *g)
{
    fallback_params p;
    p.a = g->a;
    p.b = g->b;
    p.a_scale_inv = g->a_scale_inv;
    p.b_scale_inv = g->b_scale_inv;
    p.d = g->d;
    p.bias = g->bias;
    p.m = g->m;
    p.n = g->n;
    p.k = g->k;
    p.d_dtype = g->d_dtype;
    p.bias_dtype = g->bias_dtype;
    p.a_trans = g->a_trans;
    p.b_trans = g->b_trans;
    p.accumulate = g->accumulate;
    p.fp8 = f8i_dtype_is_fp8(g->a_dtype);

    int64_t gx = (g->n + FB_TILE - 1) / FB_TILE, gy = (g->m + FB_TILE - 1) / FB_TILE;
    if (gx > 65535) gx = 65535;
    if (gy > 65535) gy = 65535;
    const dim3 grid((unsigned)gx, (unsigned)gy), block(FB_THREADS, FB_THREADS);
    cudaStream_t s = f8i_stream(ctx);
    const int pair = (int)g->a_dtype * 4 + (int)g->b_dtype;
    F8I_COUNT_LAUNCHES(ctx, 1); /* (the default case below launches nothing; it is an error anyway) */
    switch (pair) {
    case F8_DTYPE_FP32 * 4 + F8_DTYPE_FP32: gemm_fallback_kernel<F8_DTYPE_FP32, F8_DTYPE_FP32><<<grid, block, 0, s>>>(p); break;
    case F8_DTYPE_BF16 * 4 + F8_DTYPE_BF16: gemm_fallback_kernel<F8_DTYPE_BF16, F8_DTYPE_BF16><<<grid, block, 0, s>>>(p); break;
    case F8_DTYPE_E4M3 * 4 + F8_DTYPE_E4M3: gemm_fallback_kernel<F8_DTYPE_E4M3, F8_DTYPE_E4M3><<<grid, block, 0, s>>>(p); break;
    case F8_DTYPE_E4M3 * 4 + F8_DTYPE_E5M2: gemm_fallback_kernel<F8_DTYPE_E4M3, F8_DTYPE_E5M2><<<grid, block, 0, s>>>(p); break;
    case F8_DTYPE_E5M2 * 4 + F8_DTYPE_E4M3: gemm_fallback_kernel<F8_DTYPE_E5M2, F8_DTYPE_E4M3><<<grid, block, 0, s>>>(p); break;
    case F8_DTYPE_E5M2 * 4 + F8_DTYPE_E5M2: gemm_fallback_kernel<F8_DTYPE_E5M2, F8_DTYPE_E5M2><<<grid, block, 0, s>>>(p); break;
    default:
        return f8i_error(ctx, F8_ERR_DTYPE, "gemm: operand dtypes %s x %s are not one class (FP8, FP32 or BF16)",
                         f8_dtype_name(g->a_dtype), f8_dtype_name(g->b_dtype));
    }
    return f8i_cuda_launch_check(ctx, "gemm_fallback_kernel");
}

f8_status f8i_cuda_gemm_pad(f8_ctx *ctx, const uint8_t *src, int64_t rows, int64_t cols, uint8_t *dst,
                           int64_t dst_rows, int64_t dst_cols)
{
    const pad_job j = {src, rows, cols, dst, dst_rows, dst_cols};
    const unsigned grid = grid_1d(ctx, dst_rows * (dst_cols / 16));
    const uintptr_t u = (uintptr_t)src | (uintptr_t)cols; /* V: the widest piece dividing both */
    cudaStream_t s = f8i_stream(ctx);
    F8I_COUNT_LAUNCHES(ctx, 1);
    if (u % 16 == 0) gemm_pad_kernel<16><<<grid, 256, 0, s>>>(j);
    else if (u % 8 == 0) gemm_pad_kernel<8><<<grid, 256, 0, s>>>(j);
    else if (u % 4 == 0) gemm_pad_kernel<4><<<grid, 256, 0, s>>>(j);
    else if ((uintptr_t)src % 4 == 0) gemm_pad_kernel<0><<<grid, 256, 0, s>>>(j); /* odd or 2 mod 4 cols */
    else if (u % 2 == 0) gemm_pad_kernel<2><<<grid, 256, 0, s>>>(j);
    else gemm_pad_kernel<1><<<grid, 256, 0, s>>>(j);
    return f8i_cuda_launch_check(ctx, "gemm_pad_kernel");
}

f8_status f8i_cuda_gemm_slice(f8_ctx *ctx, const f8i_gemm_slice_args *args)
{
    if (args->m == 0 || args->cols == 0) return F8_OK;
    if (args->cols < 256) {
        F8I_COUNT_LAUNCHES(ctx, 1);
        gemm_slice_narrow_kernel<<<grid_1d(ctx, args->m * args->cols), 256, 0, f8i_stream(ctx)>>>(*args);
        return f8i_cuda_launch_check(ctx, "gemm_slice_narrow_kernel");
    }
    int64_t gx = (args->cols + SLICE_STRIP - 1) / SLICE_STRIP, gy = args->m;
    if (gx > 16) gx = 16;
    if (gy > 65535) gy = 65535;
    F8I_COUNT_LAUNCHES(ctx, 1);
    gemm_slice_kernel<<<dim3((unsigned)gx, (unsigned)gy), 256, 0, f8i_stream(ctx)>>>(*args);
    return f8i_cuda_launch_check(ctx, "gemm_slice_kernel");
}
