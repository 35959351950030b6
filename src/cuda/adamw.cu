/*
 * adamw.cu — the AdamW step over every registered parameter in three
 * launches (contract: f8i_adamw_step_args in src/nn/embed_xent_adamw.h).
 *
 * Design note. The parameters are a device array of descriptors (param, grad,
 * m, v, count, dtypes, decay), so the step does not grow with the number of
 * tensors: each kernel walks the descriptors in order and, within a tensor,
 * 4-element groups in a grid-stride loop.
 *   1. adamw_norm_kernel: F8I_ADAMW_NORM_BLOCKS blocks; thread i of block b
 *      sums g² of its groups of every tensor in order, the block reduces by a
 *      fixed tree and writes partials[b]. The grid is a constant, not a
 *      function of the device, so the layout (and the norm's bits) is fixed.
 *   2. adamw_finalize_kernel: one block adds the partials in a fixed order,
 *      then thread 0 computes norm, lr, clip factor and bias corrections from
 *      the device step counter (the shared f8i_adamw_* formulas) and advances
 *      it. Nothing is read back: a replayed graph walks the schedule itself.
 *   3. adamw_update_kernel: every element through f8i_adamw_update (the same
 *      function the CPU backend runs) with the values of step 2, its FP32 or
 *      BF16 moments loaded and stored beside the parameter; with FP8 moments
 *      adamw_update_fp8_kernel instead: a warp owns one block of
 *      F8_ADAMW_FP8_BLOCK (= 32 lanes x 4 elements), updates it, takes the
 *      block's amax by a shuffle (a max: any order gives the same bits) and
 *      writes codes and scale_invs with the formulas of adamw_moments.h,
 *      the codes rounded stochastically by its f8i_adamw_fp8_encode_sr (the
 *      CPU's function: integer and exact FP32 steps, the same bits), the
 *      step st.step being the finalize kernel's advanced count, the CPU's t
 *      (its mix f8i_adamw_sr_step taken once per thread).
 */
#include <math.h>
#include <stdint.h>

#include "embed_xent_adamw.cuh"

#define AW_THREADS 256

/* Fixed-order sum of one float per thread of a block of AW_THREADS: shuffle
 * tree within warps, then warp 0 adds the warp sums in order. Valid in thread 0. */
static __device__ __forceinline__ float block_sum(float v)
{
    __shared__ float warp_sum[AW_THREADS / 32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    if ((threadIdx.x & 31) == 0) warp_sum[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = 0.0f;
    if (threadIdx.x == 0) {
#pragma unroll
        for (int w = 0; w < AW_THREADS / 32; ++w) s += warp_sum[w];
    }
    return s;
}

/* 1 when p is aligned for 4-element accesses of its dtype. */
static __device__ __forceinline__ bool dev_vec4(const void *p, int bf16)
{
    return ((uintptr_t)p & (bf16 ? 7u : 15u)) == 0;
}

/* Grid: F8I_ADAMW_NORM_BLOCKS; block AW_THREADS. Thread i of block b owns the
 * 4-element groups (b·AW_THREADS + i) + k·(grid·AW_THREADS) of every tensor. */
static __global__ void __launch_bounds__(AW_THREADS) adamw_norm_kernel(f8i_adamw_step_args a)
{
    float acc = 0.0f;
    const int64_t first = ((int64_t)blockIdx.x * AW_THREADS + threadIdx.x) * 4, stride = (int64_t)gridDim.x * AW_THREADS * 4;
    for (int k = 0; k < a.n_tensors; ++k) {
        const f8i_adamw_tensor d = a.tensors[k];
        const int gb = d.grad_dtype == F8_DTYPE_BF16;
        const bool vec = dev_vec4(d.grad, gb);
        for (int64_t i0 = first; i0 < d.n; i0 += 2 * stride) {
            /* both groups' loads first; the sum keeps the order i0, i0 + stride */
            float g[2][4];
#pragma unroll
            for (int u = 0; u < 2; ++u) {
                const int64_t i = i0 + u * stride;
                ld4(d.grad, gb, i, i >= d.n ? 0 : d.n - i < 4 ? (int)(d.n - i) : 4, vec, g[u]);
            }
#pragma unroll
            for (int u = 0; u < 2; ++u)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc += g[u][j] * g[u][j];
        }
    }
    const float s = block_sum(acc);
    if (threadIdx.x == 0) a.partials[blockIdx.x] = s;
}

/* Grid: 1 block of AW_THREADS. Thread i adds partials i, i + AW_THREADS, ...
 * in order; thread 0 then writes the step's values into the state. */
static __global__ void __launch_bounds__(AW_THREADS) adamw_finalize_kernel(f8i_adamw_step_args a)
{
    float acc = 0.0f;
    for (int i = threadIdx.x; i < F8I_ADAMW_NORM_BLOCKS && a.mode != F8I_ADAMW_UPDATE; i += AW_THREADS)
        acc += a.partials[i];
    float total = block_sum(acc);
    if (threadIdx.x != 0) return;
    if (a.mode == F8I_ADAMW_NORM) { /* a shard's part of the global sum: the comm adds the rest */
        *a.sumsq = total;
        return;
    }
    if (a.mode == F8I_ADAMW_UPDATE) total = *a.sumsq;
    f8i_adamw_state *st = a.state;
    const int64_t step = st->step, t = step + 1;
    const float norm = sqrtf(total);
    st->lr = f8i_adamw_lr(a.lr_max, a.lr_min, a.warmup_steps, a.total_steps, step);
    st->grad_norm = norm;
    st->clip = f8i_adamw_clip(a.grad_clip, norm);
    st->bc1 = f8i_adamw_bias_correction(a.beta1, t);
    st->bc2 = f8i_adamw_bias_correction(a.beta2, t);
    st->step = t;
}

/* Grid: grid_size blocks of AW_THREADS. A thread owns 4-element groups of
 * every tensor as in adamw_norm_kernel (the grid may differ: elementwise).
 * Two groups (i and i + stride) are loaded before either is computed, so a
 * thread keeps 96 bytes in flight instead of 48: the update is a pure stream
 * (22 bytes per BF16 parameter) and needs that depth to reach HBM speed. The
 * register cap (64: 4 resident blocks) spills a few loop-invariant words to
 * L1, which costs less than the fourth block's 24 KB of loads in flight. */
static __global__ void __launch_bounds__(AW_THREADS, 4) adamw_update_kernel(f8i_adamw_step_args a)
{
    const f8i_adamw_state st = *a.state;
    const float b1 = a.beta1, b2 = a.beta2, omb1 = 1.0f - a.beta1, omb2 = 1.0f - a.beta2;
    const int64_t first = ((int64_t)blockIdx.x * AW_THREADS + threadIdx.x) * 4, stride = (int64_t)gridDim.x * AW_THREADS * 4;
    for (int k = 0; k < a.n_tensors; ++k) {
        const f8i_adamw_tensor d = a.tensors[k];
        const int pb = d.param_dtype == F8_DTYPE_BF16, gb = d.grad_dtype == F8_DTYPE_BF16;
        const int mb = a.moments == F8_ADAMW_MOMENTS_BF16;
        const bool vp = dev_vec4(d.param, pb), vg = dev_vec4(d.grad, gb);
        for (int64_t i0 = first; i0 < d.n; i0 += 2 * stride) {
            float p[2][4], g[2][4], m[2][4], v[2][4];
            int nv[2];
#pragma unroll
            for (int u = 0; u < 2; ++u) {
                const int64_t i = i0 + u * stride;
                nv[u] = i >= d.n ? 0 : d.n - i < 4 ? (int)(d.n - i) : 4;
                if (nv[u] == 0) continue;
                ld4(d.param, pb, i, nv[u], vp, p[u]);
                ld4(d.grad, gb, i, nv[u], vg, g[u]);
                ld4(d.m, mb, i, nv[u], true, m[u]); /* moments: 256-byte aligned, v at a 256-byte offset */
                ld4(d.v, mb, i, nv[u], true, v[u]);
            }
#pragma unroll
            for (int u = 0; u < 2; ++u) {
                if (nv[u] == 0) continue;
                const int64_t i = i0 + u * stride;
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    f8i_adamw_update(&p[u][j], g[u][j], &m[u][j], &v[u][j], st.clip, st.lr, b1, omb1, b2, omb2, st.bc1,
                                     st.bc2, a.eps, d.weight_decay);
                st4(d.param, pb, i, nv[u], vp, p[u]);
                st4(d.m, mb, i, nv[u], true, m[u]);
                st4(d.v, mb, i, nv[u], true, v[u]);
            }
        }
    }
}

/* Largest of v over the 32 lanes of a warp (every lane gets it). */
static __device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    return v;
}

/* nv (<= 4) FP8 codes at element i of c (4 at once when nv == 4: i is a
 * multiple of 4 on a 256-byte aligned base); the rest 0. */
static __device__ __forceinline__ uint32_t ld_codes(const uint8_t *c, int64_t i, int nv)
{
    if (nv == 4) return *(const uint32_t *)(c + i);
    uint32_t w = 0;
    for (int j = 0; j < nv; ++j) w |= (uint32_t)c[i + j] << (8 * j);
    return w;
}

static __device__ __forceinline__ void st_codes(uint8_t *c, int64_t i, int nv, uint32_t w)
{
    if (nv == 4) {
        *(uint32_t *)(c + i) = w;
        return;
    }
    for (int j = 0; j < nv; ++j) c[i + j] = (uint8_t)(w >> (8 * j));
}

static_assert(F8_ADAMW_FP8_BLOCK == 32 * 4, "a warp of 32 lanes x 4 elements owns one FP8 moments block");

/* One FP8 moments block's inputs for one lane: its 4 elements (nv of them
 * inside the tensor), their parameter and gradient values, the codes of m
 * and sqrt(v) and the block's two scale_invs. */
typedef struct fp8_lane {
    float p[4], g[4];
    uint32_t mw, vw;
    float msi, vsi;
    int nv;
} fp8_lane;

static __device__ __forceinline__ void fp8_load(const f8i_adamw_tensor &d, int64_t blk, int lane, bool vp, bool vg, int pb,
                                                int gb, fp8_lane &x)
{
    const int64_t i = blk * F8_ADAMW_FP8_BLOCK + 4 * lane;
    x.nv = i >= d.n ? 0 : d.n - i < 4 ? (int)(d.n - i) : 4;
    x.msi = d.m_scale_inv[blk], x.vsi = d.v_scale_inv[blk];
    x.mw = ld_codes((const uint8_t *)d.m, i, x.nv), x.vw = ld_codes((const uint8_t *)d.v, i, x.nv);
    ld4(d.param, pb, i, x.nv, vp, x.p);
    ld4(d.grad, gb, i, x.nv, vg, x.g);
}

/* Update the lane's elements of block blk (x from fp8_load), then the
 * block's new scales (shuffles: every lane of the warp calls it) and its
 * codes, parameters and scale_invs stored. */
static __device__ __forceinline__ void fp8_update(const f8i_adamw_step_args &a, const f8i_adamw_state &st, uint64_t sr_step,
                                                  const f8i_adamw_tensor &d, int64_t blk, int lane, bool vp, int pb,
                                                  fp8_lane &x)
{
    const float b1 = a.beta1, b2 = a.beta2, omb1 = 1.0f - a.beta1, omb2 = 1.0f - a.beta2;
    const int64_t i = blk * F8_ADAMW_FP8_BLOCK + 4 * lane;
    float m[4], s[4];
    float am = 0.0f, as = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        m[j] = 0.0f, s[j] = 0.0f;
        if (j >= x.nv) continue;
        m[j] = f8i_adamw_m_from_fp8((uint8_t)(x.mw >> (8 * j)), x.msi);
        float v = f8i_adamw_v_from_fp8((uint8_t)(x.vw >> (8 * j)), x.vsi);
        f8i_adamw_update(&x.p[j], x.g[j], &m[j], &v, st.clip, st.lr, b1, omb1, b2, omb2, st.bc1, st.bc2, a.eps,
                         d.weight_decay);
        s[j] = sqrtf(v);
        am = fmaxf(am, fabsf(m[j]));
        as = fmaxf(as, s[j]);
    }
    const float sm = f8i_adamw_fp8_scale(warp_max(am)), sv = f8i_adamw_fp8_scale(warp_max(as));
    if (x.nv) {
        uint32_t cm = 0, cv = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (j >= x.nv) continue;
            const int64_t at = d.first + i + j; /* the element's index in its parameter */
            cm |= (uint32_t)f8i_adamw_fp8_encode_sr(m[j] * sm, f8i_adamw_sr_bits(at, sr_step, 0)) << (8 * j);
            cv |= (uint32_t)f8i_adamw_fp8_encode_sr(s[j] * sv, f8i_adamw_sr_bits(at, sr_step, 1)) << (8 * j);
        }
        st4(d.param, pb, i, x.nv, vp, x.p);
        st_codes((uint8_t *)d.m, i, x.nv, cm);
        st_codes((uint8_t *)d.v, i, x.nv, cv);
    }
    if (lane == 0) { /* every lane read the old scale_invs before the shuffles */
        d.m_scale_inv[blk] = 1.0f / sm;
        d.v_scale_inv[blk] = 1.0f / sv;
    }
}

/* Grid: grid_size blocks of AW_THREADS. Warp w of the grid owns FP8 blocks
 * w, w + warps, ... of every tensor in order; lane l of it owns elements
 * 4l .. 4l+3 of the block (fewer or none in a tensor's short last block). The
 * loop bound is the same for the 32 lanes, so all of them reach the shuffles.
 * The kernel is bound by instruction issue, not memory (the stochastic
 * rounding's hashes and the update's divisions; bench_kernels adamw): the
 * cap of 64 registers (4 resident blocks, 32 warps an SM, where 70 gave 3)
 * hides more of each warp's latencies and leaves no partial last wave of
 * the grid; loading a second block before updating the first needs more
 * registers than that cap and measured slower (bench/RESULTS.md). */
static __global__ void __launch_bounds__(AW_THREADS, 4) adamw_update_fp8_kernel(f8i_adamw_step_args a)
{
    const f8i_adamw_state st = *a.state;
    const uint64_t sr_step = f8i_adamw_sr_step(st.step); /* FP8 moments' rounding bits: the step's part */
    const int lane = threadIdx.x & 31;
    const int64_t warp = ((int64_t)blockIdx.x * AW_THREADS + threadIdx.x) >> 5, warps = (int64_t)gridDim.x * (AW_THREADS / 32);
    for (int k = 0; k < a.n_tensors; ++k) {
        const f8i_adamw_tensor d = a.tensors[k];
        const int pb = d.param_dtype == F8_DTYPE_BF16, gb = d.grad_dtype == F8_DTYPE_BF16;
        const bool vp = dev_vec4(d.param, pb), vg = dev_vec4(d.grad, gb);
        const int64_t blocks = F8I_ADAMW_FP8_BLOCKS(d.n);
        for (int64_t blk = warp; blk < blocks; blk += warps) {
            fp8_lane x;
            fp8_load(d, blk, lane, vp, vg, pb, gb, x);
            fp8_update(a, st, sr_step, d, blk, lane, vp, pb, x);
        }
    }
}

f8_status f8i_cuda_adamw_step(f8_ctx *ctx, const f8i_adamw_step_args *a)
{
    cudaStream_t s = f8i_stream(ctx);
    const int norm = a->mode != F8I_ADAMW_UPDATE, update = a->mode != F8I_ADAMW_NORM;
    F8I_COUNT_LAUNCHES(ctx, norm + 1 + update);
    if (norm) {
        adamw_norm_kernel<<<F8I_ADAMW_NORM_BLOCKS, AW_THREADS, 0, s>>>(*a);
        F8I_TRY(f8i_cuda_launch_check(ctx, "adamw_norm_kernel"));
    }
    adamw_finalize_kernel<<<1, AW_THREADS, 0, s>>>(*a);
    F8I_TRY(f8i_cuda_launch_check(ctx, "adamw_finalize_kernel"));
    if (!update) return F8_OK;
    if (a->moments == F8_ADAMW_MOMENTS_FP8) {
        adamw_update_fp8_kernel<<<grid_size(ctx, INT64_MAX / 2, AW_THREADS), AW_THREADS, 0, s>>>(*a);
        return f8i_cuda_launch_check(ctx, "adamw_update_fp8_kernel");
    }
    adamw_update_kernel<<<grid_size(ctx, INT64_MAX / 2, AW_THREADS), AW_THREADS, 0, s>>>(*a);
    return f8i_cuda_launch_check(ctx, "adamw_update_kernel");
}
