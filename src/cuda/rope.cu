/*
 * rope.cu — rotary position embeddings on the GPU, in place on the q and k
 * heads of qkv rows (attention.h's f8i_rope_args has the formula).
 *
 * Design note. Memory-bound and tiny: one thread per (row, head, pair),
 * grid-stride, reading the pair's two elements and the table's cos and sin.
 * Products and sums are __fmul_rn / __fadd_rn so nothing is contracted into
 * a fused multiply-add: the results are the CPU reference's bit for bit.
 * Pairs of one head are contiguous in d, so a warp's loads of x[d] and
 * x[d + hd/2] are each coalesced.
 */
#include <stdint.h>

#include "kernels_common.cuh"

#define ROPE_THREADS 256

template <typename T>
static __device__ __forceinline__ float rope_load(const T *p, int64_t i)
{
    if constexpr (sizeof(T) == 2)
        return f8i_bf16_to_float(p[i]);
    else
        return p[i];
}

template <typename T>
static __device__ __forceinline__ void rope_store(T *p, int64_t i, float v)
{
    if constexpr (sizeof(T) == 2)
        p[i] = f8i_bf16_from_float(v);
    else
        p[i] = v;
}

template <typename T>
static __global__ void __launch_bounds__(ROPE_THREADS) rope_kernel(f8i_rope_args a, T *x)
{
    const int64_t half = a.head_dim / 2, heads = a.n_head + a.n_kv_head;
    const int64_t ld = (a.n_head + 2 * a.n_kv_head) * a.head_dim, n = a.rows * heads * half;
    const float *cos_t = a.table, *sin_t = a.table + a.table_rows * half;
    for (int64_t i = (int64_t)blockIdx.x * ROPE_THREADS + threadIdx.x; i < n; i += (int64_t)gridDim.x * ROPE_THREADS) {
        const int64_t d = i % half, rh = i / half, h = rh % heads, t = rh / heads, p = t % a.seq;
        const float c = cos_t[p * half + d], s = a.inverse ? -sin_t[p * half + d] : sin_t[p * half + d];
        const int64_t o = t * ld + h * a.head_dim + d;
        const float x1 = rope_load(x, o), x2 = rope_load(x, o + half);
        rope_store(x, o, __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)));
        rope_store(x, o + half, __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
    }
}

f8_status f8i_cuda_rope(f8_ctx *ctx, const f8i_rope_args *a)
{
    const int64_t n = a->rows * (a->n_head + a->n_kv_head) * (a->head_dim / 2);
    const int grid = grid_size(ctx, n, ROPE_THREADS);
    F8I_COUNT_LAUNCHES(ctx, 1);
    if (a->dtype == F8_DTYPE_BF16)
        rope_kernel<uint16_t><<<grid, ROPE_THREADS, 0, f8i_stream(ctx)>>>(*a, (uint16_t *)a->qkv);
    else
        rope_kernel<float><<<grid, ROPE_THREADS, 0, f8i_stream(ctx)>>>(*a, (float *)a->qkv);
    return f8i_cuda_launch_check(ctx, "rope_kernel");
}
