/*
 * cross_entropy.cu — softmax cross-entropy with its gradient, one block per
 * row (contract: f8i_cross_entropy_args in src/nn/embed_xent_adamw.h).
 *
 * Design note. At GPT-2 shapes a row is 50304 logits (100 KB in BF16) and
 * there are 16k rows, so the kernel is a streaming pass: a block reads its row
 * once for the statistics and once more to write the gradient (the second
 * read mostly hits L2), in 16-byte pieces (4 FP32 or 8 BF16 logits) when the
 * row pitch allows. The statistics are an online softmax: each thread keeps a
 * running (max, sum of exp(x - max)) and rescales the sum when the max grows,
 * so one read gives both; the pairs are merged by a fixed shuffle tree and
 * then in warp order, so the loss is the same bits every run. Padding columns
 * (c >= vocab) never enter the statistics and get a zero gradient. In place
 * (dlogits == logits) is safe: the target's logit is read before the block's
 * barrier, and pass 2 reads each element before the same thread writes it.
 *
 * The fast path (cross_entropy_regs_kernel) keeps the whole row in registers
 * when it fits (16-byte pieces, logits and dlogits of one dtype, at most
 * CE_REG_PIECES pieces per thread of a CE_REG_THREADS block: 65536 BF16 or
 * 32768 FP32 columns), so the row is read from memory once: the max first,
 * then the sum of exponentials, then the gradient, all from the registers.
 * Its exponentials are __expf (ex2.approx of x·log2(e), relative error about
 * 2^-21, next to the CPU's expf): the loss and gradient stay within 1e-5
 * relative of the CPU reference, and the reductions keep a fixed order, so
 * the bits repeat run to run. It is what GPT-2 shapes take.
 *
 * Rows too long for one block's registers (Llama 3's 128256 BF16 columns,
 * 256 KB) go to cross_entropy_cluster_kernel when they fit a cluster's:
 * the row is split over a thread-block cluster of 4 (or 8) CTAs of
 * CE_CL_THREADS, each holding its share in registers exactly as the
 * one-block kernel does, and the CTAs exchange their partial max and then
 * their partial sum through distributed shared memory, each combining the
 * cluster's partials in rank order (so every CTA, and every run, gets the
 * same bits). That moves the minimum, one read and one write of the row,
 * where the generic kernel reads it twice (a 256 KB row per block, hundreds
 * of blocks in flight: the second read misses L2) and spends an accurate
 * expf, often two, per value in the online pass, then another and a
 * division in the gradient pass. Its CTAs are half an SM's registers, so
 * two run per SM and one's load phase overlaps the other's arithmetic,
 * which a 1024-thread block alone on its SM cannot. The arithmetic is the
 * one-block kernel's (the same bound against the CPU); only the reduction
 * tree differs, by the cluster's last level.
 *
 * What bounds it (H200, 2026-12-01). At the 124M step's head passes (8192
 * rows of 50304 BF16) a pass takes 1.05-1.08 ms, about half the HBM rate,
 * and that is not load latency: a persistent variant that kept two rows in
 * shared memory and copied row i+1 in with cp.async while row i was worked
 * on (same bits) measured the same 1.08 ms under ncu. At ~17 us a row per
 * SM against ~8 us of bytes, the three passes over 49 values per thread
 * (bounds checks, unpacking, two __expf, the BF16 rounding of each
 * gradient) are the cost: fewer instructions per value is the lever.
 * Pulling it (2026-12-02: no bounds checks on whole pieces, the one-hot
 * only in the target's piece, hardware BF16 pair rounding) made the whole
 * 124M step 1.035x faster (FP8; BF16 1.032x) in one H200 call against the
 * build before; the kernel alone was not timed.
 */
#include <math.h>
#include <stdint.h>

#include <cooperative_groups.h>

#include "embed_xent_adamw.cuh"

#define CE_THREADS 512
#define CE_REG_THREADS 1024
#define CE_REG_PIECES 8
/* The cluster kernel: CTAs of CE_CL_THREADS, 2 per SM, clusters of 4 or
 * CE_CL_MAX (the portable maximum). Clusters need sm_90; the build targets
 * one architecture, which __CUDA_ARCH_LIST__ names in the host pass too. */
#define CE_CL_THREADS 512
#define CE_CL_MAX 8
#if defined(__CUDA_ARCH_LIST__) && __CUDA_ARCH_LIST__ >= 900
#define CE_CLUSTERS 1
#else
#define CE_CLUSTERS 0
#endif

/* Running (m, s) with one more value x. */
static __device__ __forceinline__ void online_add(float &m, float &s, float x)
{
    if (x > m) {
        s = s * expf(m - x) + 1.0f;
        m = x;
    } else if (x != -INFINITY) {
        s += expf(x - m);
    }
}

/* (m, s) merged with (m2, s2). */
static __device__ __forceinline__ void online_merge(float &m, float &s, float m2, float s2)
{
    const float M = fmaxf(m, m2);
    if (M == -INFINITY) return;
    s = (m == -INFINITY ? 0.0f : s * expf(m - M)) + (m2 == -INFINITY ? 0.0f : s2 * expf(m2 - M));
    m = M;
}

/* Up to 8 consecutive logits starting at column c (16 bytes when vec). */
static __device__ __forceinline__ int load_piece(const void *row, int bf16, int64_t c, int64_t end, bool vec, float (&v)[8])
{
    const int per = bf16 ? 8 : 4;
    const int nv = end - c < per ? (int)(end - c) : per;
    if (vec && nv == per) {
        uint32_t w[4];
        const uint4 q = *(const uint4 *)((const char *)row + c * (bf16 ? 2 : 4));
        w[0] = q.x, w[1] = q.y, w[2] = q.z, w[3] = q.w;
        if (bf16) {
            decode16<1>(w, v);
        } else {
#pragma unroll
            for (int k = 0; k < 4; ++k) v[k] = __uint_as_float(w[k]);
        }
    } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = k < nv ? ld1(row, bf16, c + k) : 0.0f;
    }
    return nv;
}

static __device__ __forceinline__ void store_piece(void *row, int bf16, int64_t c, int nv, bool vec, const float (&v)[8])
{
    const int per = bf16 ? 8 : 4;
    if (vec && nv == per) {
        uint4 q;
        if (bf16) {
            uint32_t w[4];
#pragma unroll
            for (int k = 0; k < 4; ++k)
                w[k] = (uint32_t)f8i_bf16_from_float(v[2 * k]) | ((uint32_t)f8i_bf16_from_float(v[2 * k + 1]) << 16);
            q = make_uint4(w[0], w[1], w[2], w[3]);
        } else {
            q = make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
        }
        *(uint4 *)((char *)row + c * (bf16 ? 2 : 4)) = q;
        return;
    }
#pragma unroll
    for (int k = 0; k < 8; ++k)
        if (k < nv) st1(row, bf16, c + k, v[k]);
}

/* Grid: rows blocks; block CE_THREADS. Block r owns row r; thread i owns the
 * pieces i, i + CE_THREADS, ... of it (a piece = 4 FP32 or 8 BF16 columns).
 * vec_x / vec_d: the logits / dlogits rows are 16-byte aligned pieces. */
static __global__ void __launch_bounds__(CE_THREADS) cross_entropy_kernel(f8i_cross_entropy_args a, bool vec_x, bool vec_d)
{
    __shared__ float red_m[CE_THREADS / 32], red_s[CE_THREADS / 32];
    __shared__ float s_xy;
    const int64_t r = blockIdx.x, V = a.vocab, Vp = a.cols;
    const int xb = a.logits_dtype == F8_DTYPE_BF16, db = a.dlogits_dtype == F8_DTYPE_BF16;
    const int per_x = xb ? 8 : 4, per_d = db ? 8 : 4;
    const void *x = (const char *)a.logits + r * Vp * (xb ? 2 : 4);
    void *d = a.dlogits ? (char *)a.dlogits + r * Vp * (db ? 2 : 4) : NULL;
    const int32_t y = a.targets[r];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    if (y < 0 || y >= V) { /* ignored row: loss 0, zero gradient (uniform in the block) */
        if (tid == 0) a.losses[r] = 0.0f;
        if (!d) return;
        float z[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        for (int64_t c = (int64_t)tid * per_d; c < Vp; c += (int64_t)CE_THREADS * per_d)
            store_piece(d, db, c, Vp - c < per_d ? (int)(Vp - c) : per_d, vec_d, z);
        return;
    }
    if (tid == 0) s_xy = ld1(x, xb, y);

    float m = -INFINITY, s = 0.0f, v[8];
    for (int64_t c = (int64_t)tid * per_x; c < V; c += (int64_t)CE_THREADS * per_x) {
        const int nv = load_piece(x, xb, c, V, vec_x, v);
#pragma unroll
        for (int k = 0; k < 8; ++k)
            if (k < nv) online_add(m, s, v[k]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xFFFFFFFFu, m, o), s2 = __shfl_xor_sync(0xFFFFFFFFu, s, o);
        online_merge(m, s, m2, s2);
    }
    if (lane == 0) red_m[warp] = m, red_s[warp] = s;
    __syncthreads(); /* also orders s_xy before any write of pass 2 */
    m = red_m[0];
    s = red_s[0];
#pragma unroll
    for (int w = 1; w < CE_THREADS / 32; ++w) online_merge(m, s, red_m[w], red_s[w]);
    if (tid == 0) a.losses[r] = logf(s) - (s_xy - m);
    if (!d) return;

    for (int64_t c = (int64_t)tid * per_d; c < Vp; c += (int64_t)CE_THREADS * per_d) {
        const int nv = Vp - c < per_d ? (int)(Vp - c) : per_d;
        float g[8];
        /* dlogits and logits share a dtype when they alias, so the pieces coincide. */
        if (per_d == per_x) {
            load_piece(x, xb, c, Vp, vec_x, v);
        } else {
#pragma unroll
            for (int k = 0; k < 8; ++k) v[k] = k < nv ? ld1(x, xb, c + k) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const int64_t col = c + k;
            g[k] = col < V ? (expf(v[k] - m) / s - (col == y ? 1.0f : 0.0f)) * a.grad_scale : 0.0f;
        }
        store_piece(d, db, c, nv, vec_d, g);
    }
}

/* Fixed-order block reduction of one float per thread (op: max or sum) over
 * a block of THREADS (a multiple of 32, at most 1024): shuffle tree within
 * warps, then warp 0 over the warp values in order (lanes past the last
 * warp hold the op's identity, -inf or 0, which leave the result's bits as
 * they are). Every thread gets the result. red: THREADS / 32 floats. */
template <int THREADS, bool MAX>
static __device__ __forceinline__ float block_reduce(float v, float *red, float *out)
{
    constexpr int NW = THREADS / 32;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(0xFFFFFFFFu, v, o);
        v = MAX ? fmaxf(v, w) : v + w;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = NW == 32 || lane < NW ? red[lane] : MAX ? -INFINITY : 0.0f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float w = __shfl_xor_sync(0xFFFFFFFFu, v, o);
            v = MAX ? fmaxf(v, w) : v + w;
        }
        if (lane == 0) *out = v;
    }
    __syncthreads();
    return *out;
}

/* Element k (0..per-1, a compile-time index after unrolling) of a 16-byte
 * piece held as 4 words. */
template <int BF>
static __device__ __forceinline__ float piece_at(const uint4 &q, int k)
{
    const int wi = BF ? k >> 1 : k;
    const uint32_t w = wi == 0 ? q.x : wi == 1 ? q.y : wi == 2 ? q.z : q.w;
    if (!BF) return __uint_as_float(w);
    return (k & 1) ? __uint_as_float(w & 0xFFFF0000u) : __uint_as_float(w << 16);
}

/* Barriers of the whole cluster (sm_90): arrive releases this thread's
 * prior memory operations, wait acquires those of every thread that
 * arrived; between them a thread may do other work. */
static __device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive;" ::: "memory"); }
static __device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait;" ::: "memory"); }

/* The value `part` that thread 0 of each CTA of the cluster of CL wrote to
 * its own *slot, combined (max or sum) in rank order, so every CTA gets the
 * same bits. A cluster barrier first (it also orders each CTA's earlier
 * reads of its row before any CTA's writes). */
template <int CL, bool MAX>
static __device__ __forceinline__ float cluster_combine(float *slot)
{
    cluster_arrive();
    cluster_wait();
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    float v = *cl.map_shared_rank(slot, 0);
#pragma unroll
    for (int q = 1; q < CL; ++q) {
        const float w = *cl.map_shared_rank(slot, q);
        v = MAX ? fmaxf(v, w) : v + w;
    }
    return v;
}

/* One row (or, with CL > 1, the share `rank` of a row split over a cluster
 * of CL CTAs) held in registers. Block of THREADS; the CTA's thread i owns
 * the 16-byte pieces base + i + j·THREADS, j < CE_REG_PIECES, base = rank ·
 * THREADS · CE_REG_PIECES, held in registers from the single read to the
 * gradient's write. Launched only when logits and dlogits (if any) share a
 * dtype, are 16-byte aligned with an aligned pitch, and the row fits in the
 * CL CTAs (see the design note); so columns fit in 32 bits. Per value it
 * does as little as it can, since instructions are what bound it: a piece
 * wholly inside the vocabulary (all but one per row) skips the per-column
 * bounds checks, the target's piece alone subtracts the one-hot (x - 0 is
 * x, so the others' bits are unchanged), and a BF16 gradient is rounded two
 * at a time by the hardware's cvt.rn.bf16x2 when the row's statistics and
 * grad_scale are finite (then no gradient is NaN, and the two roundings
 * agree), else by f8i_bf16_from_float. With CL > 1 each CTA reduces its
 * share, then every CTA combines the CL partial maxima, and later sums, from
 * the CTAs' shared memory in rank order (the same bits in every CTA and
 * every run), and waits at a last cluster barrier before it exits so that
 * no CTA's shared memory goes away while a peer may still read it. */
template <int BF, int THREADS, int CL>
static __device__ __forceinline__ void ce_regs_row(const f8i_cross_entropy_args &a, int64_t r, int rank)
{
    __shared__ float red[THREADS / 32];
    __shared__ float s_out, s_xy;
    __shared__ float s_part[2]; /* this CTA's max and sum, read by the cluster */
    const int V = (int)a.vocab, Vp = (int)a.cols;
    constexpr int per = BF ? 8 : 4, es = BF ? 2 : 4;
    const char *x = (const char *)a.logits + r * Vp * es;
    char *d = a.dlogits ? (char *)a.dlogits + r * Vp * es : NULL;
    const int32_t y = a.targets[r];
    const int tid = threadIdx.x, base = rank * THREADS * CE_REG_PIECES;
    if (y < 0 || y >= V) { /* ignored row (uniform in the block and the cluster; no cluster barrier taken) */
        if (tid == 0 && rank == 0) a.losses[r] = 0.0f;
        if (!d) return;
#pragma unroll
        for (int j = 0; j < CE_REG_PIECES; ++j) {
            const int c = (base + j * THREADS + tid) * per;
            if (c < Vp) *(uint4 *)(d + (int64_t)c * es) = make_uint4(0u, 0u, 0u, 0u);
        }
        return;
    }
    uint4 q[CE_REG_PIECES];
#pragma unroll
    for (int j = 0; j < CE_REG_PIECES; ++j) {
        const int c = (base + j * THREADS + tid) * per;
        q[j] = c < Vp ? *(const uint4 *)(x + (int64_t)c * es) : make_uint4(0u, 0u, 0u, 0u);
    }
    if (tid == 0 && rank == 0)
        s_xy = BF ? __uint_as_float((uint32_t)((const uint16_t *)x)[y] << 16) : ((const float *)x)[y];
    float m = -INFINITY;
#pragma unroll
    for (int j = 0; j < CE_REG_PIECES; ++j) {
        const int c = (base + j * THREADS + tid) * per;
        if (c + per <= V) {
#pragma unroll
            for (int k = 0; k < per; ++k) m = fmaxf(m, piece_at<BF>(q[j], k));
        } else {
#pragma unroll
            for (int k = 0; k < per; ++k)
                if (c + k < V) m = fmaxf(m, piece_at<BF>(q[j], k));
        }
    }
    m = block_reduce<THREADS, true>(m, red, &s_out); /* its barriers also order s_xy and every read before any write */
    if constexpr (CL > 1) {
        if (tid == 0) s_part[0] = m;
        m = cluster_combine<CL, true>(&s_part[0]); /* its barrier orders every CTA's reads before any write */
    }
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < CE_REG_PIECES; ++j) {
        const int c = (base + j * THREADS + tid) * per;
        if (c + per <= V) {
#pragma unroll
            for (int k = 0; k < per; ++k) s += __expf(piece_at<BF>(q[j], k) - m);
        } else {
#pragma unroll
            for (int k = 0; k < per; ++k)
                if (c + k < V) s += __expf(piece_at<BF>(q[j], k) - m);
        }
    }
    s = block_reduce<THREADS, false>(s, red, &s_out);
    if constexpr (CL > 1) {
        if (tid == 0) s_part[1] = s;
        s = cluster_combine<CL, false>(&s_part[1]);
        cluster_arrive(); /* this thread is done with the peers' shared memory; the matching wait is at the end */
    }
    if (tid == 0 && rank == 0) a.losses[r] = logf(s) - (s_xy - m);
    if (d) {
        const float inv = 1.0f / s, gs = a.grad_scale;
        const bool fast_round = isfinite(m) && isfinite(s) && isfinite(gs); /* uniform in the cluster */
#pragma unroll
        for (int j = 0; j < CE_REG_PIECES; ++j) {
            const int c = (base + j * THREADS + tid) * per;
            if (c >= Vp) break;
            float g[8];
            if (c + per <= V) {
#pragma unroll
                for (int k = 0; k < per; ++k) g[k] = __expf(piece_at<BF>(q[j], k) - m) * inv * gs;
            } else {
#pragma unroll
                for (int k = 0; k < per; ++k) g[k] = c + k < V ? __expf(piece_at<BF>(q[j], k) - m) * inv * gs : 0.0f;
            }
            if ((unsigned)(y - c) < (unsigned)per) { /* the target's piece: its one-hot, in the general order */
#pragma unroll
                for (int k = 0; k < per; ++k)
                    if (c + k == y) g[k] = (__expf(piece_at<BF>(q[j], k) - m) * inv - 1.0f) * gs;
            }
            if (BF && fast_round) {
                *(uint4 *)(d + (int64_t)c * es) =
                    make_uint4(bf16x2(g[0], g[1]), bf16x2(g[2], g[3]), bf16x2(g[4], g[5]), bf16x2(g[6], g[7]));
            } else {
                store_piece(d, BF, c, per, true, g);
            }
        }
    }
    if constexpr (CL > 1) cluster_wait();
}

/* Grid: rows blocks; block CE_REG_THREADS. Block r owns row r, whole. */
template <int BF>
static __global__ void __launch_bounds__(CE_REG_THREADS, 1) cross_entropy_regs_kernel(f8i_cross_entropy_args a)
{
    ce_regs_row<BF, CE_REG_THREADS, 1>(a, blockIdx.x, 0);
}

#if CE_CLUSTERS
/* Grid: rows · CL blocks of CE_CL_THREADS, clusters of CL. Cluster r owns
 * row r; its CTA of rank k, the k-th CE_CL_THREADS · CE_REG_PIECES pieces. */
template <int BF, int CL>
static __global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(CE_CL_THREADS, 2)
    cross_entropy_cluster_kernel(f8i_cross_entropy_args a)
{
    ce_regs_row<BF, CE_CL_THREADS, CL>(a, blockIdx.x / CL, (int)cooperative_groups::this_cluster().block_rank());
}
#endif

f8_status f8i_cuda_cross_entropy(f8_ctx *ctx, const f8i_cross_entropy_args *a)
{
    const int xs = a->logits_dtype == F8_DTYPE_BF16 ? 2 : 4, ds = a->dlogits_dtype == F8_DTYPE_BF16 ? 2 : 4;
    const bool vec_x = (((uintptr_t)a->logits | (uintptr_t)(a->cols * xs)) & 15) == 0;
    const bool vec_d = a->dlogits && (((uintptr_t)a->dlogits | (uintptr_t)(a->cols * ds)) & 15) == 0;
    F8I_COUNT_LAUNCHES(ctx, 1);
    const int64_t pieces = (a->cols * xs + 15) / 16;
    if (vec_x && (!a->dlogits || (vec_d && a->dlogits_dtype == a->logits_dtype)) &&
        pieces <= (int64_t)CE_REG_THREADS * CE_REG_PIECES) {
        if (xs == 2) cross_entropy_regs_kernel<1><<<(unsigned)a->rows, CE_REG_THREADS, 0, f8i_stream(ctx)>>>(*a);
        else cross_entropy_regs_kernel<0><<<(unsigned)a->rows, CE_REG_THREADS, 0, f8i_stream(ctx)>>>(*a);
        return f8i_cuda_launch_check(ctx, "cross_entropy_regs_kernel");
    }
#if CE_CLUSTERS
    if (vec_x && (!a->dlogits || (vec_d && a->dlogits_dtype == a->logits_dtype)) &&
        pieces <= (int64_t)CE_CL_MAX * CE_CL_THREADS * CE_REG_PIECES && a->rows <= INT32_MAX / CE_CL_MAX) {
        const unsigned g4 = (unsigned)a->rows * 4u, g8 = (unsigned)a->rows * 8u;
        const bool four = pieces <= (int64_t)4 * CE_CL_THREADS * CE_REG_PIECES;
        if (xs == 2) {
            if (four) cross_entropy_cluster_kernel<1, 4><<<g4, CE_CL_THREADS, 0, f8i_stream(ctx)>>>(*a);
            else cross_entropy_cluster_kernel<1, 8><<<g8, CE_CL_THREADS, 0, f8i_stream(ctx)>>>(*a);
        } else {
            if (four) cross_entropy_cluster_kernel<0, 4><<<g4, CE_CL_THREADS, 0, f8i_stream(ctx)>>>(*a);
            else cross_entropy_cluster_kernel<0, 8><<<g8, CE_CL_THREADS, 0, f8i_stream(ctx)>>>(*a);
        }
        return f8i_cuda_launch_check(ctx, "cross_entropy_cluster_kernel");
    }
#endif
    cross_entropy_kernel<<<(unsigned)a->rows, CE_THREADS, 0, f8i_stream(ctx)>>>(*a, vec_x, vec_d);
    return f8i_cuda_launch_check(ctx, "cross_entropy_kernel");
}
