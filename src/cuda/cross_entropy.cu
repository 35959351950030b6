/*
 * cross_entropy.cu — softmax cross-entropy with its gradient, one block per
 * row (contract: f8i_cross_entropy_args in src/train/embed_xent_adamw.h).
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
 * the bits repeat run to run.
 *
 * The pipelined path (cross_entropy_smem_kernel), what GPT-2 shapes take
 * now. The register kernel ran at about half the H200's bandwidth (8.4 ms of
 * a 92 ms 124M step for 6.6 GB of logits read and written): its 1024-thread
 * block owns the SM, so while a row is reduced and its gradient computed
 * (two passes of exponentials) no load is in flight. This kernel is
 * persistent (one 1024-thread block per SM, rows r = block, block + grid,
 * ...) and keeps two rows in shared memory: row i+1 is copied in by
 * cp.async while row i is reduced and written, so the loads overlap the
 * arithmetic. Thread tid owns the same pieces (tid + j·CE_REG_THREADS) and
 * does the same operations in the same order as the register kernel, so the
 * two give the same bits; it is taken when two rows fit the shared memory a
 * block may opt in to (BF16 up to ~58K columns on the H200, FP32 ~29K).
 */
#include <math.h>
#include <stdint.h>

#include "embed_xent_adamw.cuh"

#define CE_THREADS 512
#define CE_REG_THREADS 1024
#define CE_REG_PIECES 8

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
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                v[2 * k] = __uint_as_float(w[k] << 16);
                v[2 * k + 1] = __uint_as_float(w[k] & 0xFFFF0000u);
            }
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
 * CE_REG_THREADS: shuffle tree within warps, then warp 0 over the warp values
 * in order. Every thread gets the result. red: CE_REG_THREADS / 32 floats. */
template <bool MAX>
static __device__ __forceinline__ float block_reduce(float v, float *red, float *out)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(0xFFFFFFFFu, v, o);
        v = MAX ? fmaxf(v, w) : v + w;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = red[lane]; /* CE_REG_THREADS / 32 == 32 values */
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

/* Grid: rows blocks; block CE_REG_THREADS. Block r owns row r; thread i owns
 * the 16-byte pieces i + j·CE_REG_THREADS, j < CE_REG_PIECES, held in
 * registers from the single read to the gradient's write. Launched only when
 * logits and dlogits (if any) share a dtype, are 16-byte aligned with an
 * aligned pitch, and the row fits (see the design note). */
template <int BF>
static __global__ void __launch_bounds__(CE_REG_THREADS, 1) cross_entropy_regs_kernel(f8i_cross_entropy_args a)
{
    __shared__ float red[CE_REG_THREADS / 32];
    __shared__ float s_out, s_xy;
    const int64_t r = blockIdx.x, V = a.vocab, Vp = a.cols;
    constexpr int per = BF ? 8 : 4, es = BF ? 2 : 4;
    const char *x = (const char *)a.logits + r * Vp * es;
    char *d = a.dlogits ? (char *)a.dlogits + r * Vp * es : NULL;
    const int32_t y = a.targets[r];
    const int tid = threadIdx.x;
    if (y < 0 || y >= V) { /* ignored row (uniform in the block) */
        if (tid == 0) a.losses[r] = 0.0f;
        if (!d) return;
        for (int64_t c = (int64_t)tid * per; c < Vp; c += (int64_t)CE_REG_THREADS * per)
            *(uint4 *)(d + c * es) = make_uint4(0u, 0u, 0u, 0u);
        return;
    }
    uint4 q[CE_REG_PIECES];
#pragma unroll
    for (int j = 0; j < CE_REG_PIECES; ++j) {
        const int64_t c = ((int64_t)j * CE_REG_THREADS + tid) * per;
        q[j] = c < Vp ? *(const uint4 *)(x + c * es) : make_uint4(0u, 0u, 0u, 0u);
    }
    if (tid == 0) s_xy = BF ? __uint_as_float((uint32_t)((const uint16_t *)x)[y] << 16) : ((const float *)x)[y];
    float m = -INFINITY;
#pragma unroll
    for (int j = 0; j < CE_REG_PIECES; ++j) {
        const int64_t c = ((int64_t)j * CE_REG_THREADS + tid) * per;
#pragma unroll
        for (int k = 0; k < 8; ++k)
            if (k < per && c + k < V) m = fmaxf(m, piece_at<BF>(q[j], k));
    }
    m = block_reduce<true>(m, red, &s_out); /* its barriers also order s_xy and every read before any write */
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < CE_REG_PIECES; ++j) {
        const int64_t c = ((int64_t)j * CE_REG_THREADS + tid) * per;
#pragma unroll
        for (int k = 0; k < 8; ++k)
            if (k < per && c + k < V) s += __expf(piece_at<BF>(q[j], k) - m);
    }
    s = block_reduce<false>(s, red, &s_out);
    if (tid == 0) a.losses[r] = logf(s) - (s_xy - m);
    if (!d) return;
    const float inv = 1.0f / s;
#pragma unroll
    for (int j = 0; j < CE_REG_PIECES; ++j) {
        const int64_t c = ((int64_t)j * CE_REG_THREADS + tid) * per;
        if (c >= Vp) break;
        float g[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const int64_t col = c + k;
            g[k] = k < per && col < V ? (__expf(piece_at<BF>(q[j], k) - m) * inv - (col == y ? 1.0f : 0.0f)) * a.grad_scale
                                      : 0.0f;
        }
        store_piece(d, BF, c, per, true, g);
    }
}

/* Copy row r's pieces into buf (16 bytes each, cp.async; nothing if r is
 * past the end). The caller commits the group. */
static __device__ __forceinline__ void ce_row_async(const char *x, int64_t r, int64_t rows, int64_t row_bytes,
                                                    int64_t pieces, char *buf)
{
    if (r >= rows) return;
    const char *src = x + r * row_bytes;
    const uint32_t dst = (uint32_t)__cvta_generic_to_shared(buf);
    for (int64_t p = threadIdx.x; p < pieces; p += CE_REG_THREADS)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst + (uint32_t)(p * 16)), "l"(src + p * 16));
}

/* Grid: min(rows, SMs) blocks of CE_REG_THREADS, 2 · row bytes (rounded to
 * 16) of dynamic shared memory. Launched only as the register kernel is
 * (same dtype, aligned rows), when two rows fit. See the design note. */
template <int BF>
static __global__ void __launch_bounds__(CE_REG_THREADS, 1) cross_entropy_smem_kernel(f8i_cross_entropy_args a)
{
    extern __shared__ uint4 ce_rows[];
    __shared__ float red[CE_REG_THREADS / 32];
    __shared__ float s_out;
    constexpr int per = BF ? 8 : 4, es = BF ? 2 : 4;
    const int64_t V = a.vocab, Vp = a.cols, rows = a.rows, row_bytes = Vp * es, pieces = row_bytes / 16;
    const int64_t buf_pieces = pieces; /* row_bytes is a multiple of 16 (aligned pitch) */
    const char *x = (const char *)a.logits;
    const int tid = threadIdx.x;
    int64_t r = blockIdx.x;
    ce_row_async(x, r, rows, row_bytes, pieces, (char *)ce_rows);
    asm volatile("cp.async.commit_group;\n" ::);
    for (int i = 0; r < rows; ++i, r += gridDim.x) {
        const uint4 *row = ce_rows + (i & 1) * buf_pieces;
        /* the next row streams in while this one is worked on (its buffer was
         * last read in iteration i - 1, which ended with a barrier) */
        ce_row_async(x, r + gridDim.x, rows, row_bytes, pieces, (char *)(ce_rows + ((i + 1) & 1) * buf_pieces));
        asm volatile("cp.async.commit_group;\n" ::);
        asm volatile("cp.async.wait_group 1;\n" ::);
        __syncthreads();
        const int32_t y = a.targets[r];
        char *d = a.dlogits ? (char *)a.dlogits + r * row_bytes : NULL;
        if (y < 0 || y >= V) { /* ignored row (uniform in the block) */
            if (tid == 0) a.losses[r] = 0.0f;
            if (d)
                for (int64_t p = tid; p < pieces; p += CE_REG_THREADS) ((uint4 *)d)[p] = make_uint4(0u, 0u, 0u, 0u);
        } else {
            const char *rb = (const char *)row;
            const float xy = BF ? __uint_as_float((uint32_t)((const uint16_t *)rb)[y] << 16) : ((const float *)rb)[y];
            float m = -INFINITY;
            for (int64_t p = tid; p < pieces; p += CE_REG_THREADS) {
                const uint4 q = row[p];
                const int64_t c = p * per;
#pragma unroll
                for (int k = 0; k < 8; ++k)
                    if (k < per && c + k < V) m = fmaxf(m, piece_at<BF>(q, k));
            }
            m = block_reduce<true>(m, red, &s_out);
            float s = 0.0f;
            for (int64_t p = tid; p < pieces; p += CE_REG_THREADS) {
                const uint4 q = row[p];
                const int64_t c = p * per;
#pragma unroll
                for (int k = 0; k < 8; ++k)
                    if (k < per && c + k < V) s += __expf(piece_at<BF>(q, k) - m);
            }
            s = block_reduce<false>(s, red, &s_out);
            if (tid == 0) a.losses[r] = logf(s) - (xy - m);
            if (d) {
                const float inv = 1.0f / s;
                for (int64_t p = tid; p < pieces; p += CE_REG_THREADS) {
                    const uint4 q = row[p];
                    const int64_t c = p * per;
                    float g[8];
#pragma unroll
                    for (int k = 0; k < 8; ++k) {
                        const int64_t col = c + k;
                        g[k] = k < per && col < V
                                   ? (__expf(piece_at<BF>(q, k) - m) * inv - (col == y ? 1.0f : 0.0f)) * a.grad_scale
                                   : 0.0f;
                    }
                    store_piece(d, BF, c, per, true, g);
                }
            }
        }
        __syncthreads(); /* every read of this buffer done before it is refilled */
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
}

f8_status f8i_cuda_cross_entropy(f8_ctx *ctx, const f8i_cross_entropy_args *a)
{
    const int xs = a->logits_dtype == F8_DTYPE_BF16 ? 2 : 4, ds = a->dlogits_dtype == F8_DTYPE_BF16 ? 2 : 4;
    const bool vec_x = (((uintptr_t)a->logits | (uintptr_t)(a->cols * xs)) & 15) == 0;
    const bool vec_d = a->dlogits && (((uintptr_t)a->dlogits | (uintptr_t)(a->cols * ds)) & 15) == 0;
    F8I_COUNT_LAUNCHES(ctx, 1);
    const int64_t pieces = (a->cols * xs + 15) / 16;
    const bool same = vec_x && (!a->dlogits || (vec_d && a->dlogits_dtype == a->logits_dtype));
    f8i_cuda_state *s = f8i_cuda(ctx);
    const size_t two_rows = 2 * (size_t)pieces * 16;
    if (same && !s->xent_force_regs && a->rows > 0 &&
        two_rows + (CE_REG_THREADS / 32 + 1) * sizeof(float) <= (size_t)s->smem_optin) {
        const void *fn = xs == 2 ? (const void *)cross_entropy_smem_kernel<1> : (const void *)cross_entropy_smem_kernel<0>;
        const f8_status st = f8i_cuda_smem_optin(ctx, fn, "cross_entropy_smem_kernel");
        if (st != F8_OK) return st;
        const unsigned grid = (unsigned)(a->rows < s->sm_count ? a->rows : s->sm_count);
        if (xs == 2) cross_entropy_smem_kernel<1><<<grid, CE_REG_THREADS, two_rows, f8i_stream(ctx)>>>(*a);
        else cross_entropy_smem_kernel<0><<<grid, CE_REG_THREADS, two_rows, f8i_stream(ctx)>>>(*a);
        return f8i_cuda_launch_check(ctx, "cross_entropy_smem_kernel");
    }
    if (same && pieces <= (int64_t)CE_REG_THREADS * CE_REG_PIECES) {
        if (xs == 2) cross_entropy_regs_kernel<1><<<(unsigned)a->rows, CE_REG_THREADS, 0, f8i_stream(ctx)>>>(*a);
        else cross_entropy_regs_kernel<0><<<(unsigned)a->rows, CE_REG_THREADS, 0, f8i_stream(ctx)>>>(*a);
        return f8i_cuda_launch_check(ctx, "cross_entropy_regs_kernel");
    }
    cross_entropy_kernel<<<(unsigned)a->rows, CE_THREADS, 0, f8i_stream(ctx)>>>(*a, vec_x, vec_d);
    return f8i_cuda_launch_check(ctx, "cross_entropy_kernel");
}

void f8i_cuda_xent_force_regs(f8_ctx *ctx, int force)
{
    if (ctx && ctx->kind == F8_BACKEND_CUDA && ctx->be_state) f8i_cuda(ctx)->xent_force_regs = force != 0;
}
