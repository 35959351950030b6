/*
 * embed_xent_adamw.cuh — what the CUDA embedding, cross-entropy and AdamW
 * ops (embedding.cu, cross_entropy.cu, adamw.cu) share: FP32/BF16 element
 * access by a runtime dtype flag, four elements at a time, and their launchers.
 *
 * Design note. These ops take FP32 or BF16 on each operand independently, so
 * the dtype is a uniform runtime flag rather than a template (a branch every
 * warp takes the same way costs nothing next to the memory traffic). Four
 * consecutive elements move as one 16-byte (FP32) or 8-byte (BF16) access when
 * the launcher found the pointer and the row pitch aligned for it (`vec`);
 * otherwise, and at a ragged end, element by element.
 */
#ifndef F8_CUDA_TRAIN_MISC_CUH
#define F8_CUDA_TRAIN_MISC_CUH

#include "kernels_common.cuh"
#include "nn/embed_xent_adamw.h"

static __device__ __forceinline__ float ld1(const void *p, int bf16, int64_t i)
{
    return bf16 ? __uint_as_float((uint32_t)((const uint16_t *)p)[i] << 16) : ((const float *)p)[i];
}

static __device__ __forceinline__ void st1(void *p, int bf16, int64_t i, float v)
{
    if (bf16) ((uint16_t *)p)[i] = f8i_bf16_from_float(v);
    else ((float *)p)[i] = v;
}

/* v[0..nv) = elements i..i+nv-1 (nv <= 4), v[nv..4) = 0. One access when vec
 * and nv == 4 (i a multiple of 4 on an aligned base). */
static __device__ __forceinline__ void ld4(const void *p, int bf16, int64_t i, int nv, bool vec, float (&v)[4])
{
    if (vec && nv == 4) {
        if (bf16) {
            const uint2 w = *(const uint2 *)((const uint16_t *)p + i);
            v[0] = __uint_as_float(w.x << 16);
            v[1] = __uint_as_float(w.x & 0xFFFF0000u);
            v[2] = __uint_as_float(w.y << 16);
            v[3] = __uint_as_float(w.y & 0xFFFF0000u);
        } else {
            const float4 f = *(const float4 *)((const float *)p + i);
            v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = j < nv ? ld1(p, bf16, i + j) : 0.0f;
}

/* Elements i..i+nv-1 = v[0..nv) (BF16: round to nearest even). */
static __device__ __forceinline__ void st4(void *p, int bf16, int64_t i, int nv, bool vec, const float (&v)[4])
{
    if (vec && nv == 4) {
        if (bf16) {
            uint2 w;
            w.x = (uint32_t)f8i_bf16_from_float(v[0]) | ((uint32_t)f8i_bf16_from_float(v[1]) << 16);
            w.y = (uint32_t)f8i_bf16_from_float(v[2]) | ((uint32_t)f8i_bf16_from_float(v[3]) << 16);
            *(uint2 *)((uint16_t *)p + i) = w;
        } else {
            *(float4 *)((float *)p + i) = make_float4(v[0], v[1], v[2], v[3]);
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j)
        if (j < nv) st1(p, bf16, i + j, v[j]);
}

/* 1 when 4-element groups starting at any multiple of 4 elements of p are
 * aligned for one access (16 bytes FP32, 8 bytes BF16). */
static inline bool vec4_ok(const void *p, f8_dtype dt)
{
    const uintptr_t a = dt == F8_DTYPE_BF16 ? 8 : 16;
    return ((uintptr_t)p & (a - 1)) == 0;
}

/* The launchers, one per op (each counts its launches), are declared in
 * cuda_state.cuh with the backend's other ops. */

#endif /* F8_CUDA_TRAIN_MISC_CUH */
