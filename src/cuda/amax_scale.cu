/*
 * amax_scale.cu — current scaling's amax pass (f8i_amax_scale_args in
 * backend.h): the amax of the tensor about to be cast and, from it, the
 * slot's scale and scale_inv, in ONE launch and without a host read.
 *
 * Design note. A grid-stride max over 16-byte pieces (the tensor is usually
 * in L2 at these sizes: the cast that follows reads it again), one partial per
 * block into the ctx's partials buffer, then the classic "last block done"
 * finish: each block writes its partial, fences and takes a ticket; the block
 * that takes the last ticket reduces the partials, computes the scale with
 * f8i_current_scale (numerics.h, the expression the CPU oracle runs) and
 * resets the ticket to 0 for the next launch. The ticket and the partials
 * live in the CUDA ctx state (allocated with the ctx, zeroed once): ops of a
 * ctx run in stream order, so one pair serves every launch, eager or
 * replayed from a graph. fmaxf from 0 is exact and order-free (NaN ignored),
 * so the amax is bit-identical to the CPU's.
 */
#include <stdint.h>

#include "kernels_common.cuh"

#define AMAX_THREADS 512

/* Block-wide fmaxf; the result is valid in thread 0. Every thread calls it;
 * it ends with a barrier so `warp_max` may be reused. */
static __device__ __forceinline__ float block_max(float a, float *warp_max)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, o));
    if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = a;
    __syncthreads();
    float m = 0.0f;
    if (threadIdx.x == 0)
        for (int w = 0; w < AMAX_THREADS / 32; ++w) m = fmaxf(m, warp_max[w]);
    __syncthreads();
    return m;
}

/* Grid: at most F8I_AMAX_MAX_BLOCKS blocks, grid-stride; block AMAX_THREADS.
 * A thread owns the 16-byte pieces first, first + stride, ... below nvec
 * (nvec 0 when src is not 16-byte aligned), then the tail elements
 * nvec * VEC + first, ... below n. Thread 0 of each block writes its
 * partial and takes a ticket; thread 0 of the last block writes the scale,
 * scale_inv, amax and resets the ticket. */
template <int BF16>
static __global__ void __launch_bounds__(AMAX_THREADS)
    amax_scale_kernel(const void *__restrict__ src, int64_t n, int64_t nvec, float scaled_max, int pow2, float *scale,
                      float *scale_inv, float *amax, const float *noop, float *partials, unsigned int *ticket)
{
    constexpr int VEC = BF16 ? 8 : 4;
    __shared__ float warp_max[AMAX_THREADS / 32];
    __shared__ int last;
    if (noop_set(noop)) return;
    const int64_t stride = (int64_t)gridDim.x * AMAX_THREADS;
    const int64_t first = (int64_t)blockIdx.x * AMAX_THREADS + threadIdx.x;
    float a = 0.0f;
    for (int64_t i = first; i < nvec; i += stride) {
        const uint4 t = ((const uint4 *)src)[i];
        const uint32_t w[4] = {t.x, t.y, t.z, t.w};
        float v[VEC];
        decode16<BF16>(w, v);
#pragma unroll
        for (int j = 0; j < VEC; ++j) a = fmaxf(a, fabsf(v[j]));
    }
    for (int64_t i = nvec * VEC + first; i < n; i += stride) a = fmaxf(a, fabsf(load_elem<BF16>(src, i)));
    a = block_max(a, warp_max);
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = a;
        __threadfence(); /* the partial is visible before the ticket is */
        last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    float m = 0.0f;
    for (int b = threadIdx.x; b < (int)gridDim.x; b += AMAX_THREADS) m = fmaxf(m, ((volatile float *)partials)[b]);
    m = block_max(m, warp_max);
    if (threadIdx.x == 0) {
        const float s = f8i_current_scale(m, *scale, scaled_max, pow2);
        *scale = s;
        if (scale_inv != NULL) *scale_inv = 1.0f / s;
        if (amax != NULL) *amax = fmaxf(*amax, m);
        *ticket = 0u;
    }
}

f8_status f8i_cuda_amax_scale(f8_ctx *ctx, const f8i_amax_scale_args *a)
{
    if (!f8i_dtype_is_hp(a->src_dtype))
        return f8i_error(ctx, F8_ERR_DTYPE, "amax_scale: source dtype %s, expected fp32 or bf16",
                         f8_dtype_name(a->src_dtype));
    if (a->count < 0) return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "amax_scale: negative count %lld", (long long)a->count);
    f8i_cuda_state *s = f8i_cuda(ctx);
    const int bf16 = a->src_dtype == F8_DTYPE_BF16;
    const int64_t vec = bf16 ? 8 : 4;
    const int64_t nvec = (uintptr_t)a->src % 16 == 0 ? a->count / vec : 0;
    int blocks = grid_size(ctx, nvec > 0 ? nvec : a->count, AMAX_THREADS);
    if (blocks > F8I_AMAX_MAX_BLOCKS) blocks = F8I_AMAX_MAX_BLOCKS;
    cudaStream_t stream = f8i_stream(ctx);
    F8I_COUNT_LAUNCHES(ctx, 1);
    if (bf16)
        amax_scale_kernel<1><<<blocks, AMAX_THREADS, 0, stream>>>(a->src, a->count, nvec, a->scaled_max, a->pow2,
                                                                  a->scale, a->scale_inv, a->amax, a->noop,
                                                                  s->amax_partials, s->amax_ticket);
    else
        amax_scale_kernel<0><<<blocks, AMAX_THREADS, 0, stream>>>(a->src, a->count, nvec, a->scaled_max, a->pow2,
                                                                  a->scale, a->scale_inv, a->amax, a->noop,
                                                                  s->amax_partials, s->amax_ticket);
    return f8i_cuda_launch_check(ctx, "amax_scale_kernel");
}
