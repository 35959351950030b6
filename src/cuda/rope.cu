/*
 * rope.cu — rotary position embeddings on the GPU, in place on the q and k
 * heads of qkv rows (attention.h's f8i_rope_args has the formula).
 *
 * Design note. Memory-bound: each element is read once and written once, so
 * the aim is full 16-byte accesses covering contiguous memory, many of them
 * in flight, and few instructions per element. The fast kernel
 * (rope_vec_kernel) gives a thread one row, one 16-byte chunk of the pair
 * index d (8 BF16 or 4 FP32 pairs) and every ROPE_LANES-th q or k head: it
 * loads that chunk's cos and sin once (a row's position is the same for all
 * its heads), then loads ROPE_UNROLL heads' two halves before storing any,
 * so eight 16-byte loads per thread are outstanding. Chunk varies fastest
 * across threads, then the head lane, so a warp's load pair covers whole
 * consecutive heads of one row; a thread per (row, chunk) over a run of
 * consecutive heads was slower, its warps touching 64 bytes in each of 8
 * rows. The integer work (row, lane, chunk, position) is done once per
 * thread, in 32 bits where it can, not per element as in the
 * one-thread-per-pair kernel (five 64-bit divisions, each a long software
 * sequence, and 2-byte accesses, for every pair). The fast kernel runs when
 * a head's half is whole chunks and qkv and the table are 16-byte aligned;
 * rope_kernel, one thread per (row, head, pair), takes the rest.
 * Products and sums are __fmul_rn / __fadd_rn so nothing is contracted into
 * a fused multiply-add, in the CPU's order, each output rounded once as the
 * CPU does (f8i_bf16_from_float): both kernels give the CPU reference's
 * results bit for bit.
 */
#include <stdint.h>

#include "kernels_common.cuh"

#define ROPE_THREADS 256
#define ROPE_UNROLL 4
#define ROPE_LANES 8 /* threads of rope_vec_kernel across a row's heads */

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
        const float x1 = load_t(x, o), x2 = load_t(x, o + half);
        store_t(x, o, __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)));
        store_t(x, o + half, __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
    }
}

template <typename T>
static __device__ __forceinline__ uint4 rope_pack(const float (&v)[16 / sizeof(T)])
{
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        if constexpr (sizeof(T) == 2)
            w[k] = (uint32_t)f8i_bf16_from_float(v[2 * k]) | ((uint32_t)f8i_bf16_from_float(v[2 * k + 1]) << 16);
        else
            w[k] = __float_as_uint(v[k]);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* Grid: ceil(rows / tpb) blocks, tpb = ROPE_THREADS / (ROPE_LANES · chunks)
 * rows a block (at least 1; threads past tpb · ROPE_LANES · chunks idle),
 * chunks = (hd/2) / VEC. Thread (row t, lane l, chunk j), j fastest, owns
 * the pairs d of chunk j in the q and k heads l, l + ROPE_LANES, ...; so a
 * warp's loads cover whole heads of one row, contiguous memory. Launched
 * only when hd/2 is a multiple of VEC, tpb >= 1, and qkv and the table are
 * 16-byte aligned; then so is every chunk (row pitch and head offsets are
 * multiples of hd, hence of 2·VEC elements = 32 bytes; the sin table starts
 * table_rows·hd/2 floats, a multiple of 4, after the cos table). */
template <typename T>
static __global__ void __launch_bounds__(ROPE_THREADS) rope_vec_kernel(f8i_rope_args a, T *x)
{
    constexpr int VEC = 16 / sizeof(T);
    const int64_t half = a.head_dim / 2, heads = a.n_head + a.n_kv_head;
    const int64_t ld = (a.n_head + 2 * a.n_kv_head) * a.head_dim;
    const unsigned chunks = (unsigned)(half / VEC), per_row = ROPE_LANES * chunks, tpb = ROPE_THREADS / per_row;
    const unsigned sub = threadIdx.x / per_row, rem = threadIdx.x - sub * per_row, lane = rem / chunks;
    const int64_t t = (int64_t)blockIdx.x * tpb + sub, d = (int64_t)(rem - lane * chunks) * VEC;
    if (sub >= tpb || t >= a.rows || lane >= heads) return;
    const int64_t p = t % a.seq;
    float c[VEC], s[VEC];
    const float *cp = a.table + p * half + d, *sp = cp + a.table_rows * half;
#pragma unroll
    for (int k = 0; k < VEC; k += 4) {
        const float4 cq = *(const float4 *)(cp + k), sq = *(const float4 *)(sp + k);
        c[k] = cq.x, c[k + 1] = cq.y, c[k + 2] = cq.z, c[k + 3] = cq.w;
        s[k] = sq.x, s[k + 1] = sq.y, s[k + 2] = sq.z, s[k + 3] = sq.w;
    }
    if (a.inverse) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) s[k] = -s[k];
    }
    T *row = x + t * ld + d;
    for (int64_t h0 = lane; h0 < heads; h0 += ROPE_UNROLL * ROPE_LANES) {
        uint4 q1[ROPE_UNROLL], q2[ROPE_UNROLL];
        /* all the loads first: the stores may alias nothing loaded here, but
         * the compiler cannot know that, so this order is what keeps them in flight */
#pragma unroll
        for (int u = 0; u < ROPE_UNROLL; ++u) {
            if (h0 + u * ROPE_LANES < heads) {
                const T *hp = row + (h0 + u * ROPE_LANES) * a.head_dim;
                q1[u] = *(const uint4 *)hp;
                q2[u] = *(const uint4 *)(hp + half);
            }
        }
#pragma unroll
        for (int u = 0; u < ROPE_UNROLL; ++u) {
            if (h0 + u * ROPE_LANES < heads) {
                const uint32_t w1[4] = {q1[u].x, q1[u].y, q1[u].z, q1[u].w};
                const uint32_t w2[4] = {q2[u].x, q2[u].y, q2[u].z, q2[u].w};
                float x1[VEC], x2[VEC], y1[VEC], y2[VEC];
                decode16<sizeof(T) == 2>(w1, x1);
                decode16<sizeof(T) == 2>(w2, x2);
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    y1[k] = __fsub_rn(__fmul_rn(x1[k], c[k]), __fmul_rn(x2[k], s[k]));
                    y2[k] = __fadd_rn(__fmul_rn(x2[k], c[k]), __fmul_rn(x1[k], s[k]));
                }
                T *hp = row + (h0 + u * ROPE_LANES) * a.head_dim;
                *(uint4 *)hp = rope_pack<T>(y1);
                *(uint4 *)(hp + half) = rope_pack<T>(y2);
            }
        }
    }
}

f8_status f8i_cuda_rope(f8_ctx *ctx, const f8i_rope_args *a)
{
    const int64_t half = a->head_dim / 2, vec = a->dtype == F8_DTYPE_BF16 ? 8 : 4;
    F8I_COUNT_LAUNCHES(ctx, 1);
    if (half > 0 && half % vec == 0 && (((uintptr_t)a->qkv | (uintptr_t)a->table) & 15) == 0) {
        const int64_t tpb = ROPE_THREADS / (ROPE_LANES * (half / vec)), blocks = tpb ? (a->rows + tpb - 1) / tpb : 0;
        if (blocks > 0 && blocks <= INT32_MAX) {
            const unsigned grid = (unsigned)blocks;
            if (a->dtype == F8_DTYPE_BF16)
                rope_vec_kernel<uint16_t><<<grid, ROPE_THREADS, 0, f8i_stream(ctx)>>>(*a, (uint16_t *)a->qkv);
            else
                rope_vec_kernel<float><<<grid, ROPE_THREADS, 0, f8i_stream(ctx)>>>(*a, (float *)a->qkv);
            return f8i_cuda_launch_check(ctx, "rope_vec_kernel");
        }
    }
    const int64_t n = a->rows * (a->n_head + a->n_kv_head) * half;
    const int grid = grid_size(ctx, n, ROPE_THREADS);
    if (a->dtype == F8_DTYPE_BF16)
        rope_kernel<uint16_t><<<grid, ROPE_THREADS, 0, f8i_stream(ctx)>>>(*a, (uint16_t *)a->qkv);
    else
        rope_kernel<float><<<grid, ROPE_THREADS, 0, f8i_stream(ctx)>>>(*a, (float *)a->qkv);
    return f8i_cuda_launch_check(ctx, "rope_kernel");
}
