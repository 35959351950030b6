/*
 * norm_common.cuh — what the norm forward (norm_fwd.cu) and backward
 * (norm_bwd.cu) kernels share: element and 8-element piece access to rows of
 * FP32/BF16 data with run-time access widths, the stores of each output kind,
 * and a block-wide sum. Only src/cuda/norm_*.cu include it.
 *
 * Design note. A piece is N consecutive elements of a row (NORM_VEC = 8 in
 * the backward, 16 bytes of x in the forward's row-group kernel: one set of
 * helpers, templated on N); it is moved whole with the widest access its
 * alignment allows (kernels_common.cuh's access_width), or element by element
 * at the row's end, where loads give +0 past the end and stores write nothing
 * there. The column index type I is the caller's: the forward's row-group
 * kernel passes int (its rows are at most FWD_MAX_COLS wide), which keeps
 * 64-bit arithmetic, and the registers it takes, out of its loop.
 */
#ifndef F8_CUDA_NORM_COMMON_CUH
#define F8_CUDA_NORM_COMMON_CUH

#include <stdint.h>

#include "kernels_common.cuh"

#define NORM_VEC 8 /* elements per piece */

enum { Y_FP32 = 0, Y_BF16 = 1, Y_E4M3 = 2, Y_E5M2 = 3 };

static __device__ __forceinline__ float load_one(const void *p, int bf16, int64_t i)
{
    return bf16 ? f8i_bf16_to_float(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* The raw words of the N elements at column c of a row (N a multiple of 4):
 * N/2 words of BF16 pairs (low element first) or N FP32 words; whole with
 * accesses of w bytes, or element by element at the row's end (+0 past it).
 * The backward moves pieces of NORM_VEC, the forward 16 bytes of x. */
template <int BF16, int N = NORM_VEC, typename I = int64_t>
static __device__ __forceinline__ void load_words(uint32_t (&r)[N * (BF16 ? 2 : 4) / 4], const void *row, I c, I cols,
                                                  int w)
{
    static_assert(N % 4 == 0, "whole words, 16-byte multiples of FP32");
    if (c + N <= cols) {
        load_bytes<N *(BF16 ? 2 : 4)>(r, (const char *)row + (int64_t)c * (BF16 ? 2 : 4), w);
    } else if constexpr (BF16) {
        const uint16_t *h = (const uint16_t *)row;
#pragma unroll
        for (int i = 0; i < N / 2; ++i)
            r[i] = (c + 2 * i < cols ? (uint32_t)h[c + 2 * i] : 0u) |
                   (c + 2 * i + 1 < cols ? (uint32_t)h[c + 2 * i + 1] << 16 : 0u);
    } else {
        const uint32_t *f = (const uint32_t *)row;
#pragma unroll
        for (int i = 0; i < N; ++i) r[i] = c + i < cols ? f[c + i] : 0u;
    }
}

/* Raw words as their N floats (exact). */
template <int BF16, int N = NORM_VEC>
static __device__ __forceinline__ void words_floats(const uint32_t (&r)[N * (BF16 ? 2 : 4) / 4], float (&v)[N])
{
    if constexpr (BF16) {
#pragma unroll
        for (int i = 0; i < N / 2; ++i) {
            v[2 * i] = __uint_as_float(r[i] << 16);
            v[2 * i + 1] = __uint_as_float(r[i] & 0xFFFF0000u);
        }
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) v[i] = __uint_as_float(r[i]);
    }
}

/* The N elements at column c as floats (load_words, then words_floats). */
template <int BF16, int N = NORM_VEC, typename I = int64_t>
static __device__ __forceinline__ void load_piece(float (&v)[N], const void *row, I c, I cols, int w)
{
    uint32_t r[N * (BF16 ? 2 : 4) / 4];
    load_words<BF16, N, I>(r, row, c, cols, w);
    words_floats<BF16, N>(r, v);
}

/* N elements of gamma or beta at column c, dtype chosen at run time (a
 * uniform branch). */
template <int N = NORM_VEC, typename I = int64_t>
static __device__ __forceinline__ void load_param(float (&v)[N], const void *p, int bf16, I c, I cols, int w)
{
    if (bf16)
        load_piece<1, N, I>(v, p, c, cols, w);
    else
        load_piece<0, N, I>(v, p, c, cols, w);
}

/* Store the N outputs o at column c of a row of kind YK (FP8: codes of
 * o · s), with accesses of w bytes when whole, else element by element. */
template <int YK, int N = NORM_VEC, typename I = int64_t>
static __device__ __forceinline__ void store_piece(void *row, I c, I cols, const float (&o)[N], float s, int w)
{
    static_assert(N % 4 == 0, "whole words of FP8 codes");
    const bool whole = c + N <= cols;
    if constexpr (YK == Y_FP32) {
        float *d = (float *)row + c;
        uint32_t u[N];
#pragma unroll
        for (int j = 0; j < N; ++j) u[j] = __float_as_uint(o[j]);
        if (whole) {
            store_bytes<4 * N>(d, u, w);
        } else {
#pragma unroll
            for (int j = 0; j < N; ++j)
                if (c + j < cols) d[j] = o[j];
        }
    } else if constexpr (YK == Y_BF16) {
        uint16_t *d = (uint16_t *)row + c;
        uint32_t u[N / 2];
#pragma unroll
        for (int i = 0; i < N / 2; ++i)
            u[i] = (uint32_t)f8i_bf16_from_float(o[2 * i]) | ((uint32_t)f8i_bf16_from_float(o[2 * i + 1]) << 16);
        if (whole) {
            store_bytes<2 * N>(d, u, w);
        } else {
#pragma unroll
            for (int j = 0; j < N; ++j)
                if (c + j < cols) d[j] = (uint16_t)(u[j / 2] >> (16 * (j % 2)));
        }
    } else {
        uint8_t *d = (uint8_t *)row + c;
        uint32_t u[N / 4];
#pragma unroll
        for (int i = 0; i < N / 4; ++i) u[i] = fp8x4<YK == Y_E5M2>(o + 4 * i, s);
        if (whole) {
            store_bytes<N>(d, u, w);
        } else {
#pragma unroll
            for (int j = 0; j < N; ++j)
                if (c + j < cols) d[j] = (uint8_t)(u[j / 4] >> (8 * (j % 4)));
        }
    }
}

/* FP8 telemetry of the N outputs o at column c (those before cols), as the
 * cast counts them: the code of o · s is recomputed (the same product and
 * rounding as the store), so only the counting launches pay for it. */
template <int YK, int N, typename I>
static __device__ __forceinline__ void piece_stats(const float (&o)[N], float s, I c, I cols, unsigned &sat,
                                                   unsigned &flushed)
{
    constexpr int E5M2 = YK == Y_E5M2;
#pragma unroll
    for (int j = 0; j < N; ++j)
        if (c + j < cols) code_stats<E5M2>(o[j], s, fp8x2<E5M2>(o[j] * s, 0.0f) & 0xFFu, sat, flushed);
}

/* One element of y of any kind (the wide kernels). */
static __device__ __forceinline__ void store_one(void *y, int kind, int64_t i, float v, float s)
{
    switch (kind) {
    case Y_FP32: ((float *)y)[i] = v; break;
    case Y_BF16: ((uint16_t *)y)[i] = f8i_bf16_from_float(v); break;
    case Y_E4M3: ((uint8_t *)y)[i] = (uint8_t)fp8x2<0>(v * s, 0.0f); break;
    default: ((uint8_t *)y)[i] = (uint8_t)fp8x2<1>(v * s, 0.0f); break;
    }
}

/* Each v[i] becomes the sum of v[i] over the tpr consecutive threads that
 * share a row (tpr a power of two, 32 .. blockDim.x): a butterfly within the
 * warp (every lane gets the same bits), then the group's warps in index
 * order through red. Every thread of the block calls it (it synchronises
 * unless tpr == 32). */
template <int N>
static __device__ __forceinline__ void group_sum(float (&v)[N], int tpr, float (*red)[32])
{
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v[i] += __shfl_xor_sync(0xFFFFFFFFu, v[i], o);
    if (tpr == 32) return;
    const int warp = threadIdx.x >> 5, nw = tpr >> 5, first = warp & ~(nw - 1);
    if ((threadIdx.x & 31) == 0)
#pragma unroll
        for (int i = 0; i < N; ++i) red[i][warp] = v[i];
    __syncthreads();
#pragma unroll
    for (int i = 0; i < N; ++i) {
        float s = 0.0f;
        for (int k = 0; k < nw; ++k) s += red[i][first + k];
        v[i] = s;
    }
    __syncthreads(); /* red is reused by the next call */
}

#endif /* F8_CUDA_NORM_COMMON_CUH */
