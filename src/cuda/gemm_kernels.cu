/*
 * gemm_kernels.cu — the CUDA kernels of the backend GEMM (gemm.cu drives
 * them; cuda_state.cuh declares their launchers): the fallback GEMM for what
 * cuBLASLt cannot take, the bias after a GEMM, and the pad and slice passes
 * of odd FP8 shapes.
 *
 * Design note. These are the GEMM's memory-bound helpers and its slow
 * path; gemm.cu's note says when each runs and why (the byte estimates of
 * the padded path are there). The pad and slice kernels move whole aligned
 * 16-byte chunks at any layout, so they run near copy bandwidth: the padded
 * side is always 16-byte aligned and 16 wide, and where a row of the
 * unpadded side (an odd K's operand, an odd N's D) starts inside a chunk its
 * bytes are read by the aligned 16-byte loads of the chunks that hold them,
 * shifted into place (kernels_common.cuh's load16_any and bytes_at), and
 * the slice writes D's own chunks whole, only a row's two ragged ends
 * element by element. The fallback is a plain tiled FP32 GEMM that decodes
 * FP8 codes exactly.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_state.cuh"
#include "core/numerics.h"
#include "gemm_lt.cuh"
#include "kernels_common.cuh"

/* Fallback tiling: gemm_lt.cuh's (F8I_FB_*). */
#define FB_THREADS F8I_FB_THREADS
#define FB_TILE F8I_FB_TILE
#define FB_K F8I_FB_K

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

/* Fallback GEMM, D[m, n] = alpha·Σ_k A(i, k)·B(j, k) (+ D) (+ bias[j]).
 * Grid: x over 64-column tiles of D, y over 64-row tiles (grid-stride in both,
 * so any m, n fits the grid limits). Block: 16×16 threads. Thread (tx, ty)
 * owns D rows i0 + ty + 16·r and columns j0 + tx + 16·c, r, c < 4, and loads 4
 * elements of each 64×16 operand tile per K step, walking the operand's
 * contiguous dimension across neighbouring threads (coalesced either way). */
template <int ADT, int BDT>
static __global__ void __launch_bounds__(FB_THREADS * FB_THREADS) gemm_fallback_kernel(fallback_params p)
{
    __shared__ f8i_fb_stage as, bs; /* as[kk][i] = A(i0 + i, k0 + kk), bs[kk][j] = B(j0 + j, k0 + kk) */
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tid = ty * FB_THREADS + tx;
    float alpha = 1.0f;
    if (p.fp8) alpha = (p.a_scale_inv ? *p.a_scale_inv : 1.0f) * (p.b_scale_inv ? *p.b_scale_inv : 1.0f);
    int64_t i0, j0; /* this block's tiles of D, grid-stride in both dimensions */
    for (int64_t t = 0; f8i_fb_tile(p.m, p.n, t, &i0, &j0); t++) {
        f8i_fb_acc acc;
        f8i_fb_zero(acc);

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
            f8i_fb_mac(as, bs, acc, tx, ty);
            __syncthreads();
        }

        f8i_fb_store(p.d, p.d_dtype, NULL, p.bias, p.bias_dtype, p.accumulate, p.m, p.n, i0, j0, tx, ty, alpha, acc);
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
        const float old = overwrite ? 0.0f : f8i_lt_load(d, idx, d_dtype);
        f8i_lt_store(d, idx, d_dtype, old + f8i_lt_load(bias, idx % n, bias_dtype));
    }
}

/* Zero-padded copy of an FP8 operand: dst [dst_rows, dst_cols] (dst_cols a
 * multiple of 16, dst 16-byte aligned) = src [rows, cols] with zeros in
 * columns >= cols and rows >= rows. V (4, 8 or 16) divides cols and src's
 * address, so each V-byte piece of a row is one aligned load. V = 0 (any
 * other cols or src: odd K, the common odd case): the 16 bytes at the row's
 * offset come from the aligned 16-byte chunks that hold them (load16_any),
 * and the bytes past the row's end are cleared. (Word or byte loads cost 5
 * or 16 load instructions per chunk, each touching a 512-byte span across
 * the warp: L1-bound at about half of HBM bandwidth.) The source's last
 * bytes, where a 16-byte read would run past its end, are read one by one.
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
} pad_chunk;

template <int V>
static __global__ void __launch_bounds__(256) gemm_pad_kernel(pad_job j)
{
    static_assert(V == 0 || V == 4 || V == 8 || V == 16, "V: 16, 8 or 4-byte pieces, or 0 for shifted chunks");
    const int64_t per_row = j.dst_cols / 16, total = j.dst_rows * per_row;
    const uint8_t *end = j.src + j.rows * j.cols;
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
                const int nvalid = left < 16 ? (int)left : 16;
                if (s + 16 <= end) {
                    load16_any(u.w, s, j.src, end); /* may hold the next row's first bytes */
                } else {
#pragma unroll
                    for (int b = 0; b < 16; b++)
                        if (b < nvalid) u.w[b / 4] |= (uint32_t)s[b] << (8 * (b % 4));
                }
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int keep = nvalid - 4 * i; /* bytes of this word inside the row */
                    if (keep <= 0) u.w[i] = 0u;
                    else if (keep < 4) u.w[i] &= (1u << (8 * keep)) - 1u;
                }
            } else {
#pragma unroll
                for (int t = 0; t < 16 / (V ? V : 16); t++) {
                    if (col0 + t * V >= j.cols) break; /* V divides cols: a piece is all in or all out */
                    if (V == 8) u.q[t] = *(const unsigned long long *)(s + 8 * t);
                    if (V == 4) u.w[t] = *(const uint32_t *)(s + 4 * t);
                }
            }
        }
        *(uint4 *)(j.dst + c * 16) = u.v;
    }
}

/* NB bytes (8, 16 or 32) at p (2-byte aligned, any offset in its 16-byte
 * chunk; [p, p + NB) inside [lo, hi)) as little-endian words, from aligned
 * 16-byte loads of the chunks that hold them, shifted into place. Where one
 * of those chunks reaches outside [lo, hi) (the first or last bytes of a
 * buffer not 16-byte aligned at that end) the bytes come 2 at a time. */
template <int NB>
static __device__ __forceinline__ void load_span(uint32_t (&w)[NB / 4], const uint8_t *p, const uint8_t *lo,
                                                 const uint8_t *hi)
{
    static_assert(NB == 8 || NB == 16 || NB == 32, "8, 16 or 32 bytes");
    constexpr int WIN = (NB + 15) / 16, NC = WIN + 1; /* 16-byte windows; chunks they can touch */
    const unsigned s = (unsigned)((uintptr_t)p & 15);
    const uint8_t *c = p - s;
    const int need = (int)(s + NB + 15) / 16; /* chunks holding [p, p + NB) */
    if (c < lo || c + 16 * need > hi) {
#pragma unroll
        for (int q = 0; q < NB / 8; ++q) {
            uint32_t t[2];
            load_bytes<8>(t, p + 8 * q, 2);
            w[2 * q] = t[0];
            w[2 * q + 1] = t[1];
        }
        return;
    }
    uint32_t x[4 * NC];
#pragma unroll
    for (int q = 0; q < NC; ++q) {
        uint4 t = make_uint4(0u, 0u, 0u, 0u);
        if (q < need) t = *(const uint4 *)(c + 16 * q);
        x[4 * q] = t.x;
        x[4 * q + 1] = t.y;
        x[4 * q + 2] = t.z;
        x[4 * q + 3] = t.w;
    }
#pragma unroll
    for (int h = 0; h < WIN; ++h) {
        const uint32_t y[8] = {x[4 * h], x[4 * h + 1], x[4 * h + 2], x[4 * h + 3],
                               x[4 * h + 4], x[4 * h + 5], x[4 * h + 6], x[4 * h + 7]};
        uint32_t o[4];
        bytes_at<4>(y, s, o);
#pragma unroll
        for (int i = 0; i < 4; ++i)
            if (4 * h + i < NB / 4) w[4 * h + i] = o[i];
    }
}

/* E consecutive BF16 or FP32 values held in words w, as FP32 (exact). */
template <int E, int BF16>
static __device__ __forceinline__ void decode_values(float (&v)[E], const uint32_t *w)
{
#pragma unroll
    for (int t = 0; t < E; ++t) {
        if constexpr (BF16) v[t] = __uint_as_float(t % 2 ? w[t / 2] & 0xFFFF0000u : w[t / 2] << 16);
        else v[t] = __uint_as_float(w[t]);
    }
}

/* E consecutive BF16 or FP32 values at p, any element offset (load_span). */
template <int E, int BF16>
static __device__ __forceinline__ void load_values(float (&v)[E], const uint8_t *p, const uint8_t *lo,
                                                   const uint8_t *hi)
{
    uint32_t w[E * (BF16 ? 2 : 4) / 4];
    load_span<E * (BF16 ? 2 : 4)>(w, p, lo, hi);
    decode_values<E, BF16>(v, w);
}

/* Element i of a BF16 or FP32 array, as FP32: the ragged ends' loads. */
template <int BF16>
static __device__ __forceinline__ float value_at(const void *p, int64_t i)
{
    if constexpr (BF16) return f8i_bf16_to_float(((const uint16_t *)p)[i]);
    else return ((const float *)p)[i];
}

/* The slice back from a padded D (f8i_gemm_slice_args): d[i, j] = dp[i, j]
 * (+ d[i, j] if accumulate) (+ bias[j]) over D [m, cols]: the epilogue
 * order of cuBLASLt and of the fallback (alpha·ΣAB + D + bias), in FP32,
 * rounded once to D's dtype (DBF: BF16, else FP32; PBF: dp's).
 * D's rows start at any element offset (ld n odd), so the work is D's own
 * aligned 16-byte chunks, E = 16 / sizeof(D) elements each: one 16-byte
 * store, and one 16-byte load of D for the accumulate. dp (rows 16-byte
 * aligned) and the bias are read at the chunk's first column, wherever that
 * falls in their chunks: aligned 16-byte loads shifted into place
 * (load_span; a warp's neighbours load each chunk twice, the second time
 * from L1). A chunk that the row fills only partly (its first and last, the
 * rest being another row's or outside the slice) goes element by element.
 * In place (dp == d, same layout: run_lt's bias after a strided GEMM) the
 * shift is 0, so a thread reads only the bytes it writes.
 * Grid: 1-D, grid-stride over m·cpr chunk slots (cpr: the most chunks a row
 * of cols elements can touch; a slot past its row's end does nothing), so
 * a tall-thin D and a short-wide one fill the SMs alike. Block: 256
 * threads. A thread owns slots c + 256·u (u < SLICE_UNROLL) of each step,
 * slot c being row c / cpr, chunk c % cpr of that row, and loads all of its
 * chunks' inputs before it stores any (the bytes in flight). */
#define SLICE_UNROLL 2
template <int DBF, int PBF>
static __global__ void __launch_bounds__(256) gemm_slice_kernel(f8i_gemm_slice_args a, int64_t cpr)
{
    constexpr int DS = DBF ? 2 : 4, PS = PBF ? 2 : 4, E = 16 / DS;
    const int bias_bf16 = a.bias_dtype == F8_DTYPE_BF16;
    uint8_t *const d = (uint8_t *)a.d;
    const uint8_t *const dp = (const uint8_t *)a.dp, *const bias = (const uint8_t *)a.bias;
    const uint8_t *const dp_hi = dp + ((a.m - 1) * a.ldp + a.cols) * PS;
    const uint8_t *const bias_hi = bias ? bias + a.cols * (bias_bf16 ? 2 : 4) : NULL;
    const int64_t total = a.m * cpr, step = (int64_t)gridDim.x * (256 * SLICE_UNROLL);
    const bool idx32 = total <= (int64_t)UINT32_MAX; /* 32-bit division when it fits */
    for (int64_t base = (int64_t)blockIdx.x * (256 * SLICE_UNROLL) + threadIdx.x; base < total; base += step) {
        float v[SLICE_UNROLL][E];
        int64_t row[SLICE_UNROLL], e0[SLICE_UNROLL]; /* the chunk's row and first column (< 0: before the row) */
        int kind[SLICE_UNROLL];                      /* 0 nothing, 1 whole chunk, 2 part of one */
#pragma unroll
        for (int u = 0; u < SLICE_UNROLL; ++u) {
            const int64_t c = base + 256 * u;
            kind[u] = 0;
            row[u] = e0[u] = 0;
            if (c >= total) continue;
            const int64_t i = idx32 ? (int64_t)((uint32_t)c / (uint32_t)cpr) : c / cpr;
            const int64_t k = c - i * cpr;
            const int ph = (int)((uintptr_t)(d + i * a.ldd * DS) & 15); /* the row's offset in its chunk */
            if (16 * k >= ph + a.cols * DS) continue;                   /* past the row's last chunk */
            const int64_t j0 = (16 * k - ph) / DS;
            row[u] = i;
            e0[u] = j0;
            if (j0 >= 0 && j0 + E <= a.cols) {
                kind[u] = 1;
                load_values<E, PBF>(v[u], dp + (i * a.ldp + j0) * PS, dp, dp_hi);
                if (a.accumulate) {
                    const uint4 q = *(const uint4 *)(d + (i * a.ldd + j0) * DS); /* the chunk itself: aligned */
                    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
                    float o[E];
                    decode_values<E, DBF>(o, w);
#pragma unroll
                    for (int t = 0; t < E; ++t) v[u][t] = v[u][t] + o[t];
                }
                if (bias) {
                    float b[E];
                    if (bias_bf16) load_values<E, 1>(b, bias + j0 * 2, bias, bias_hi);
                    else load_values<E, 0>(b, bias + j0 * 4, bias, bias_hi);
#pragma unroll
                    for (int t = 0; t < E; ++t) v[u][t] = v[u][t] + b[t];
                }
            } else {
                kind[u] = 2;
#pragma unroll
                for (int t = 0; t < E; ++t) {
                    const int64_t j = j0 + t;
                    if (j < 0 || j >= a.cols) continue;
                    float x = value_at<PBF>(dp, i * a.ldp + j);
                    if (a.accumulate) x = x + value_at<DBF>(d, i * a.ldd + j);
                    if (bias) x = x + (bias_bf16 ? value_at<1>(bias, j) : value_at<0>(bias, j));
                    v[u][t] = x;
                }
            }
        }
#pragma unroll
        for (int u = 0; u < SLICE_UNROLL; ++u) {
            const int64_t at = row[u] * a.ldd + e0[u]; /* D's element at the chunk's start */
            if (kind[u] == 1) {
                uint32_t w[4];
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    if constexpr (DBF)
                        w[q] = (uint32_t)f8i_bf16_from_float(v[u][2 * q]) |
                               ((uint32_t)f8i_bf16_from_float(v[u][2 * q + 1]) << 16);
                    else w[q] = __float_as_uint(v[u][q]);
                }
                *(uint4 *)(d + at * DS) = make_uint4(w[0], w[1], w[2], w[3]);
            } else if (kind[u] == 2) {
#pragma unroll
                for (int t = 0; t < E; ++t) {
                    if (e0[u] + t < 0 || e0[u] + t >= a.cols) continue;
                    if constexpr (DBF) ((uint16_t *)d)[at + t] = f8i_bf16_from_float(v[u][t]);
                    else ((float *)d)[at + t] = v[u][t];
                }
            }
        }
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
    else gemm_pad_kernel<0><<<grid, 256, 0, s>>>(j); /* odd or 2 mod 4 cols, or src not 4-byte aligned */
    return f8i_cuda_launch_check(ctx, "gemm_pad_kernel");
}

f8_status f8i_cuda_gemm_slice(f8_ctx *ctx, const f8i_gemm_slice_args *args)
{
    if (args->m == 0 || args->cols == 0) return F8_OK;
    const int dbf = args->d_dtype == F8_DTYPE_BF16, pbf = args->dp_dtype == F8_DTYPE_BF16;
    const int64_t ds = dbf ? 2 : 4;
    /* a row starting at the last element slot of a chunk touches the most */
    const int64_t cpr = (16 - ds + args->cols * ds + 15) / 16;
    const unsigned grid = grid_1d(ctx, (args->m * cpr + SLICE_UNROLL - 1) / SLICE_UNROLL);
    cudaStream_t s = f8i_stream(ctx);
    F8I_COUNT_LAUNCHES(ctx, 1);
    if (dbf && pbf) gemm_slice_kernel<1, 1><<<grid, 256, 0, s>>>(*args, cpr);
    else if (dbf) gemm_slice_kernel<1, 0><<<grid, 256, 0, s>>>(*args, cpr);
    else if (pbf) gemm_slice_kernel<0, 1><<<grid, 256, 0, s>>>(*args, cpr);
    else gemm_slice_kernel<0, 0><<<grid, 256, 0, s>>>(*args, cpr);
    return f8i_cuda_launch_check(ctx, "gemm_slice_kernel");
}
