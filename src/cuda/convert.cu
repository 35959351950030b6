/*
 * convert.cu — element-wise conversions and small helpers of the CUDA backend:
 * convert (FP32/BF16/E4M3/E5M2 -> FP32/BF16, FP8 times its scale_inv), add
 * (dst += src), fill_f32 and reciprocal (a tensor's scale_inv = 1 / scale).
 *
 * Design note. The element-wise kernels move 8 elements per thread per step
 * (16-byte accesses for FP32 and BF16, 8 bytes for FP8 codes) in a grid-stride
 * loop when both pointers are 16-byte aligned, then single elements for the
 * tail; otherwise the whole array takes the single-element loop. The values
 * are those of the CPU backend, bit for bit: an FP8 code becomes its exact
 * value through the hardware cvt to f16x2 (every E4M3 and E5M2 value is an f16
 * value), then one FP32 multiply by *scale_inv; BF16 rounding is
 * f8i_bf16_from_float from numerics.h, shared with the CPU. FP32 -> FP32 is a
 * byte copy (cudaMemcpyAsync); BF16 -> BF16 goes through FP32 like the CPU
 * backend, which makes NaNs canonical (0x7FC0 | sign).
 */
#include <stdint.h>

#include "kernels_common.cuh"

#define EW_THREADS 256
#define EW_ELEMS 8 /* elements a thread moves per step on the vector path */

/* ------------------------------------------------------------------------ */
/* Device helpers                                                            */
/* ------------------------------------------------------------------------ */

/* Exact values of two FP8 codes (low byte first). */
template <int E5M2>
static __device__ __forceinline__ void fp8x2_decode(uint32_t codes, float &lo, float &hi)
{
    const unsigned short in = (unsigned short)codes;
    uint32_t h2;
    if (E5M2)
        asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h2) : "h"(in));
    else
        asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(in));
    const unsigned short l = (unsigned short)h2, u = (unsigned short)(h2 >> 16);
    asm("cvt.f32.f16 %0, %1;" : "=f"(lo) : "h"(l));
    asm("cvt.f32.f16 %0, %1;" : "=f"(hi) : "h"(u));
}

/* EW_ELEMS elements of chunk i as floats (FP8: times si). SRC is an f8_dtype. */
template <int SRC>
static __device__ __forceinline__ void load8(const void *src, int64_t i, float si, float (&v)[EW_ELEMS])
{
    if constexpr (SRC == F8_DTYPE_FP32) {
        const float4 a = ((const float4 *)src)[2 * i], b = ((const float4 *)src)[2 * i + 1];
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
        v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else if constexpr (SRC == F8_DTYPE_BF16) {
        const uint4 t = ((const uint4 *)src)[i];
        const uint32_t w[4] = {t.x, t.y, t.z, t.w};
        decode16<1>(w, v);
    } else {
        const uint2 t = ((const uint2 *)src)[i];
        const uint32_t w[2] = {t.x, t.y};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            float lo, hi;
            fp8x2_decode<SRC == F8_DTYPE_E5M2>(w[k / 2] >> (16 * (k % 2)), lo, hi);
            v[2 * k] = lo * si;
            v[2 * k + 1] = hi * si;
        }
    }
}

template <int SRC>
static __device__ __forceinline__ float load1(const void *src, int64_t i, float si)
{
    if constexpr (SRC == F8_DTYPE_FP32) {
        return ((const float *)src)[i];
    } else if constexpr (SRC == F8_DTYPE_BF16) {
        return f8i_bf16_to_float(((const uint16_t *)src)[i]);
    } else {
        float lo, hi;
        fp8x2_decode<SRC == F8_DTYPE_E5M2>(((const uint8_t *)src)[i], lo, hi);
        return lo * si;
    }
}

/* Store EW_ELEMS floats as chunk i of dst (FP32, or BF16 rounded RNE). */
template <int DST>
static __device__ __forceinline__ void store8(void *dst, int64_t i, const float (&v)[EW_ELEMS])
{
    if constexpr (DST == F8_DTYPE_FP32) {
        ((float4 *)dst)[2 * i] = make_float4(v[0], v[1], v[2], v[3]);
        ((float4 *)dst)[2 * i + 1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
        uint32_t w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k)
            w[k] = (uint32_t)f8i_bf16_from_float(v[2 * k]) | ((uint32_t)f8i_bf16_from_float(v[2 * k + 1]) << 16);
        ((uint4 *)dst)[i] = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

template <int DST>
static __device__ __forceinline__ void store1(void *dst, int64_t i, float v)
{
    if constexpr (DST == F8_DTYPE_FP32)
        ((float *)dst)[i] = v;
    else
        ((uint16_t *)dst)[i] = f8i_bf16_from_float(v);
}

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

/* dst[i] = DST(SRC(src[i]) * (FP8 ? *scale_inv : 1)) for i < n.
 * Grid: grid_size(...) blocks, grid-stride; block EW_THREADS. A thread owns
 * chunks j, j + stride, ... of EW_ELEMS elements (j < nchunk), then single
 * elements of the tail past nchunk * EW_ELEMS. */
template <int SRC, int DST>
static __global__ void __launch_bounds__(EW_THREADS)
    convert_kernel(const void *__restrict__ src, const float *scale_inv, void *__restrict__ dst, int64_t n,
                   int64_t nchunk)
{
    const float si = f8i_dtype_is_fp8((f8_dtype)SRC) ? *scale_inv : 1.0f;
    const int64_t stride = (int64_t)gridDim.x * EW_THREADS;
    const int64_t first = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x;
    for (int64_t j = first; j < nchunk; j += stride) {
        float v[EW_ELEMS];
        load8<SRC>(src, j, si, v);
        store8<DST>(dst, j, v);
    }
    for (int64_t i = nchunk * EW_ELEMS + first; i < n; i += stride) store1<DST>(dst, i, load1<SRC>(src, i, si));
}

/* dst[i] += src[i] for i < n (FP32, or BF16 summed in FP32 then rounded).
 * Grid, block and ownership as convert_kernel. */
template <int DT>
static __global__ void __launch_bounds__(EW_THREADS)
    add_kernel(void *__restrict__ dst, const void *__restrict__ src, int64_t n, int64_t nchunk)
{
    const int64_t stride = (int64_t)gridDim.x * EW_THREADS;
    const int64_t first = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x;
    for (int64_t j = first; j < nchunk; j += stride) {
        float d[EW_ELEMS], s[EW_ELEMS];
        load8<DT>(dst, j, 1.0f, d);
        load8<DT>(src, j, 1.0f, s);
#pragma unroll
        for (int k = 0; k < EW_ELEMS; ++k) d[k] += s[k];
        store8<DT>(dst, j, d);
    }
    for (int64_t i = nchunk * EW_ELEMS + first; i < n; i += stride)
        store1<DT>(dst, i, load1<DT>(dst, i, 1.0f) + load1<DT>(src, i, 1.0f));
}

/* dst[i] = value for i < n. Grid, block and ownership as convert_kernel. */
static __global__ void __launch_bounds__(EW_THREADS) fill_f32_kernel(float *dst, float value, int64_t n, int64_t nchunk)
{
    const int64_t stride = (int64_t)gridDim.x * EW_THREADS;
    const int64_t first = (int64_t)blockIdx.x * EW_THREADS + threadIdx.x;
    const float4 q = make_float4(value, value, value, value);
    for (int64_t j = first; j < nchunk; j += stride) {
        ((float4 *)dst)[2 * j] = q;
        ((float4 *)dst)[2 * j + 1] = q;
    }
    for (int64_t i = nchunk * EW_ELEMS + first; i < n; i += stride) dst[i] = value;
}

/* *dst = 1 / *src unless the noop flag is set. Grid 1, block 1. */
static __global__ void reciprocal_kernel(const float *src, float *dst, const float *noop)
{
    if (noop_set(noop)) return;
    *dst = 1.0f / *src;
}

/* ------------------------------------------------------------------------ */
/* Launchers                                                                 */
/* ------------------------------------------------------------------------ */

static int aligned16(const void *a, const void *b)
{
    return (uintptr_t)a % 16 == 0 && (uintptr_t)b % 16 == 0;
}

template <int SRC, int DST>
static f8_status launch_convert(f8_ctx *ctx, const void *src, const float *scale_inv, void *dst, int64_t n)
{
    const int64_t nchunk = aligned16(src, dst) ? n / EW_ELEMS : 0;
    const int blocks = grid_size(ctx, nchunk > 0 ? nchunk : n, EW_THREADS);
    convert_kernel<SRC, DST><<<blocks, EW_THREADS, 0, f8i_stream(ctx)>>>(src, scale_inv, dst, n, nchunk);
    return f8i_cuda_launch_check(ctx, "convert_kernel");
}

template <int DST>
static f8_status convert_to(f8_ctx *ctx, const void *src, f8_dtype src_dtype, const float *scale_inv, void *dst,
                            int64_t n)
{
    switch (src_dtype) {
    case F8_DTYPE_FP32: return launch_convert<F8_DTYPE_FP32, DST>(ctx, src, scale_inv, dst, n);
    case F8_DTYPE_BF16: return launch_convert<F8_DTYPE_BF16, DST>(ctx, src, scale_inv, dst, n);
    case F8_DTYPE_E4M3: return launch_convert<F8_DTYPE_E4M3, DST>(ctx, src, scale_inv, dst, n);
    case F8_DTYPE_E5M2: return launch_convert<F8_DTYPE_E5M2, DST>(ctx, src, scale_inv, dst, n);
    }
    return f8i_error(ctx, F8_ERR_DTYPE, "convert: source dtype %d", (int)src_dtype);
}

/* ------------------------------------------------------------------------ */
/* Backend entry points                                                      */
/* ------------------------------------------------------------------------ */

f8_status f8i_cuda_convert(f8_ctx *ctx, const void *src, f8_dtype src_dtype, const float *scale_inv, void *dst,
                           f8_dtype dst_dtype, int64_t count)
{
    const int fp8 = f8i_dtype_is_fp8(src_dtype);
    if (!fp8 && !f8i_dtype_is_hp(src_dtype))
        return f8i_error(ctx, F8_ERR_DTYPE, "convert: source dtype %s", f8_dtype_name(src_dtype));
    if (!f8i_dtype_is_hp(dst_dtype))
        return f8i_error(ctx, F8_ERR_DTYPE, "convert: destination dtype %s, expected fp32 or bf16",
                         f8_dtype_name(dst_dtype));
    if (fp8 && scale_inv == NULL)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "convert: %s source without scale_inv",
                         f8_dtype_name(src_dtype));
    if (count < 0) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "convert: negative count %lld", (long long)count);
    if (count == 0) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1); /* one memcpy or one kernel */
    if (src_dtype == F8_DTYPE_FP32 && dst_dtype == F8_DTYPE_FP32)
        return f8i_cuda_check(ctx,
                              cudaMemcpyAsync(dst, src, (size_t)count * sizeof(float), cudaMemcpyDeviceToDevice,
                                              f8i_stream(ctx)),
                              "convert: cudaMemcpyAsync");
    if (dst_dtype == F8_DTYPE_FP32) return convert_to<F8_DTYPE_FP32>(ctx, src, src_dtype, scale_inv, dst, count);
    return convert_to<F8_DTYPE_BF16>(ctx, src, src_dtype, scale_inv, dst, count);
}

f8_status f8i_cuda_add(f8_ctx *ctx, void *dst, const void *src, f8_dtype dtype, int64_t count)
{
    if (!f8i_dtype_is_hp(dtype))
        return f8i_error(ctx, F8_ERR_DTYPE, "add: dtype %s, expected fp32 or bf16", f8_dtype_name(dtype));
    if (count < 0) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "add: negative count %lld", (long long)count);
    if (count == 0) return F8_OK;
    const int64_t nchunk = aligned16(dst, src) ? count / EW_ELEMS : 0;
    const int blocks = grid_size(ctx, nchunk > 0 ? nchunk : count, EW_THREADS);
    F8I_COUNT_LAUNCHES(ctx, 1);
    if (dtype == F8_DTYPE_FP32)
        add_kernel<F8_DTYPE_FP32><<<blocks, EW_THREADS, 0, f8i_stream(ctx)>>>(dst, src, count, nchunk);
    else
        add_kernel<F8_DTYPE_BF16><<<blocks, EW_THREADS, 0, f8i_stream(ctx)>>>(dst, src, count, nchunk);
    return f8i_cuda_launch_check(ctx, "add_kernel");
}

f8_status f8i_cuda_fill_f32(f8_ctx *ctx, float *dst, float value, int64_t count)
{
    if (count < 0)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "fill_f32: negative count %lld", (long long)count);
    if (count == 0) return F8_OK;
    const int64_t nchunk = (uintptr_t)dst % 16 == 0 ? count / EW_ELEMS : 0;
    const int blocks = grid_size(ctx, nchunk > 0 ? nchunk : count, EW_THREADS);
    F8I_COUNT_LAUNCHES(ctx, 1);
    fill_f32_kernel<<<blocks, EW_THREADS, 0, f8i_stream(ctx)>>>(dst, value, count, nchunk);
    return f8i_cuda_launch_check(ctx, "fill_f32_kernel");
}

f8_status f8i_cuda_reciprocal(f8_ctx *ctx, const float *src, float *dst, const float *noop)
{
    F8I_COUNT_LAUNCHES(ctx, 1);
    reciprocal_kernel<<<1, 1, 0, f8i_stream(ctx)>>>(src, dst, noop);
    return f8i_cuda_launch_check(ctx, "reciprocal_kernel");
}
