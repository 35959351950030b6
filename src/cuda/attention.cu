/*
 * attention.cu — causal self-attention on the GPU (attention.h has the
 * formulas and the args): strided-batched cuBLASLt GEMMs over the B·nh
 * (sequence, head) pairs, a fused scale + causal mask + softmax kernel, its
 * backward, and two permutes.
 *
 * Design note. The heads of qkv [B·S, 3C] are first copied head-major
 * ([3, B·nh, S, hd], one permute kernel), so every product is ONE strided-
 * batched GEMM with batch count B·nh (a head's q inside qkv is a strided view,
 * but the (b, h) pairs are two strides apart, which one cuBLASLt batch stride
 * cannot express; the permute moves 3·T·C elements, small next to the S²
 * scores). Per call:
 *   forward   permute qkv → q, k, v;  s = k·qᵀ (FP32);  softmax → P (dtype,
 *             saved, or in place over s for inference);  o = P·v;  permute o → y
 *   backward  permute qkv → q, k, v and dy → dO;  dP = dO·vᵀ (FP32, over s);
 *             dv = Pᵀ·dO;  dS in place over dP;  dq = dS·k;  dk = dSᵀ·q;
 *             permute dq, dk, dv → dqkv
 * 5 and 8 launches. In cuBLASLt's column-major terms a row-major [S, hd]
 * head is the hd×S matrix X' (ld hd) and a row-major [S, S] matrix M is M'
 * = Mᵀ (ld S), so s' = k'ᵀ·q' (TN), o' = v'·P' (NN), dv' = dO'·P'ᵀ (NT) and
 * the same for dq, dk with dS. The GEMMs compute the full S×S (the masked
 * half too: twice the causal FLOPs, dense tensor-core rate); the softmax
 * kernels read only j <= i and write the zeros.
 *
 * In place. dS overwrites the FP32 dP it is made from, in the first half of
 * each row for BF16 (ld 2S): one warp owns a row, and each 32-column step
 * reads its dP (bytes 128t..) before a __syncwarp and writes its dS (bytes
 * 64t.., already read) after it; the inference softmax does the same over
 * the scores. Nothing in these kernels is __restrict__ for that reason.
 *
 * Plans. cuBLASLt needs a handle, descriptors and an algorithm per shape.
 * gemm.cu's cache is private to that file, so each f8_attention object keeps
 * its own handle and plan list (the STATE_CREATE/DESTROY kinds); a plan is
 * built at the first call of its (B, S) (host memory and cuBLASLt's host
 * objects only: warm up before a graph capture) and looked up after. The
 * workspace is the first F8I_ATTN_WORKSPACE_BYTES of the ctx scratch.
 * Shapes or alignments cuBLASLt has no algorithm for (head_dim 1, odd S with
 * 2-byte strides, ...) run bgemm_fallback_kernel, a plain tiled FP32 GEMM.
 *
 * Determinism: cuBLASLt is run-to-run reproducible for a fixed algorithm and
 * GPU; the softmax sums are per-warp butterflies in a fixed order; there are
 * no atomics. Math is FP32 with expf (accurate, not __expf) and no FMA
 * contraction (-fmad=false), the CPU reference's operations in its order.
 */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "kernels_common.cuh"

#define SOFTMAX_THREADS 256 /* 8 warps: 8 rows per block */
#define COPY_THREADS 256
#define FB_TILE 16          /* fallback GEMM: 16×16 outputs per block, K step 16 */

/* ------------------------------------------------------------------------ */
/* Types                                                                     */
/* ------------------------------------------------------------------------ */

/* One strided-batched GEMM in cuBLASLt's column-major terms:
 * D_z(m×n) = op(A_z)·op(B_z) for z < batch, X_z = x + z·sx (elements);
 * op(A) = A stored k×m (lda) when ta, else A stored m×k; op(B) likewise
 * (stored n×k when tb, else k×n). Inputs of `in`, D of `out`. */
typedef struct bgemm {
    int ta, tb;
    int64_t m, n, k, batch;
    const void *a;
    int64_t lda, sa;
    const void *b;
    int64_t ldb, sb;
    void *d;
    int64_t ldd, sd;
    f8_dtype in, out;
} bgemm;

/* Everything a plan depends on; memset before filling (compared with memcmp). */
typedef struct plan_key {
    int64_t m, n, k, batch, lda, sa, ldb, sb, ldd, sd;
    int32_t ta, tb, in, out;
    uint32_t aligns; /* log2 alignment (0..8) of a, b, d with their batch strides */
} plan_key;

typedef struct attn_plan {
    plan_key key;
    int lt; /* 1: cuBLASLt algorithm; 0: bgemm_fallback_kernel */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
} attn_plan;

/* The per-object state (f8i_attn_*_args.state). */
typedef struct attn_state {
    cublasLtHandle_t lt;
    attn_plan *plans; /* (cap) count used */
    int count, cap;
} attn_state;

/* ------------------------------------------------------------------------ */
/* Device helpers                                                            */
/* ------------------------------------------------------------------------ */

/* T is float (FP32) or uint16_t (BF16 bits). */
template <typename T>
static __device__ __forceinline__ float load_t(const T *p, int64_t i)
{
    if constexpr (sizeof(T) == 2)
        return f8i_bf16_to_float(p[i]);
    else
        return p[i];
}

template <typename T>
static __device__ __forceinline__ void store_t(T *p, int64_t i, float v)
{
    if constexpr (sizeof(T) == 2)
        p[i] = f8i_bf16_from_float(v);
    else
        p[i] = v;
}

/* Butterflies: every lane ends with the same value (a + b == b + a). */
static __device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    return v;
}

static __device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    return v;
}

/* W bytes as one access (W = 16, 8, 4, 2, 1). */
template <int W> struct piece_t;
template <> struct piece_t<16> { typedef uint4 type; };
template <> struct piece_t<8> { typedef uint2 type; };
template <> struct piece_t<4> { typedef uint32_t type; };
template <> struct piece_t<2> { typedef uint16_t type; };
template <> struct piece_t<1> { typedef uint8_t type; };

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

/* Between token-major rows (row b·S + s of ld_bytes; part p of head h at byte
 * p·c_bytes + h·seg_bytes) and head-major [parts, B·nh, S, hd] (segment
 * ((p·B + b)·nh + h)·S + s of seg_bytes). TO_HEADS: token-major src → head-
 * major dst; else the reverse. Grid: 1-D, grid-stride. Block: COPY_THREADS.
 * A thread owns W-byte pieces u = global id + k·(grid size); consecutive
 * threads walk a segment, then the next s (contiguous head-major). */
template <int W, bool TO_HEADS>
static __global__ void __launch_bounds__(COPY_THREADS)
    heads_copy_kernel(const void *src, void *dst, int64_t parts, int64_t B, int64_t S, int64_t nh, int64_t seg_bytes,
                      int64_t ld_bytes, int64_t c_bytes)
{
    typedef typename piece_t<W>::type piece;
    const int64_t per_seg = seg_bytes / W;
    const int64_t total = parts * B * nh * S * per_seg;
    for (int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; u < total; u += (int64_t)gridDim.x * blockDim.x) {
        const int64_t seg = u / per_seg, off = (u - seg * per_seg) * W;
        int64_t r = seg / S;
        const int64_t s = seg - r * S;
        const int64_t h = r % nh;
        r /= nh;
        const int64_t b = r % B, p = r / B;
        const int64_t tok = (b * S + s) * ld_bytes + p * c_bytes + h * seg_bytes + off;
        const int64_t head = seg * seg_bytes + off;
        if (TO_HEADS)
            *(piece *)((char *)dst + head) = *(const piece *)((const char *)src + tok);
        else
            *(piece *)((char *)dst + tok) = *(const piece *)((const char *)src + head);
    }
}

/* Scale, causal mask and softmax of the FP32 scores s [B·nh, S, S] into P
 * (T, row (bh, i) at p + bh·p_stride + i·p_ld; p may be s itself, see the
 * design note):  x = s·scale, m = max_{j<=i} x, l = Σ_{j<=i} expf(x - m),
 * P = j <= i ? expf(x - m)·(1/l) : 0.
 * Grid: 1-D, grid-stride over rows (bh·S + i), 8 per block. Block:
 * SOFTMAX_THREADS; warp w owns one row, lane l its columns l, l + 32, .... */
template <typename T>
static __global__ void __launch_bounds__(SOFTMAX_THREADS)
    softmax_fwd_kernel(const float *s, T *p, int64_t rows, int64_t S, int64_t p_ld, int64_t p_stride, float scale)
{
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (SOFTMAX_THREADS / 32);
    for (int64_t row = (int64_t)blockIdx.x * (SOFTMAX_THREADS / 32) + (threadIdx.x >> 5); row < rows; row += warps) {
        const int64_t bh = row / S, i = row - bh * S;
        const float *x = s + row * S;
        T *out = p + bh * p_stride + i * p_ld;
        float m = -INFINITY;
        for (int64_t j = lane; j <= i; j += 32) m = fmaxf(m, x[j] * scale);
        m = warp_max(m);
        float l = 0.0f;
        for (int64_t j = lane; j <= i; j += 32) l += expf(x[j] * scale - m);
        const float inv = 1.0f / warp_sum(l);
        for (int64_t j0 = 0; j0 < S; j0 += 32) {
            const int64_t j = j0 + lane;
            const float v = j <= i ? expf(x[j] * scale - m) * inv : 0.0f;
            __syncwarp(); /* every lane has read its x before any P of this step lands */
            if (j < S) store_t(out, j, v);
        }
    }
}

/* Softmax backward, in place: s [B·nh, S, S] holds dP (FP32); P [B·nh, S, S]
 * (T, ld S) the forward's probabilities. Row (bh, i) gets
 *   dS[j] = j <= i ? P[j]·(dP[j] - Σ_{j'<=i} P[j']·dP[j'])·scale : 0
 * as T at the start of its own row (T* ld = S·4/sizeof(T)).
 * Grid, block and ownership as softmax_fwd_kernel. */
template <typename T>
static __global__ void __launch_bounds__(SOFTMAX_THREADS)
    softmax_bwd_kernel(const T *p, float *s, int64_t rows, int64_t S, float scale)
{
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (SOFTMAX_THREADS / 32);
    for (int64_t row = (int64_t)blockIdx.x * (SOFTMAX_THREADS / 32) + (threadIdx.x >> 5); row < rows; row += warps) {
        const int64_t i = row % S;
        const T *pr = p + row * S;
        float *dp = s + row * S;
        T *ds = (T *)dp;
        float dot = 0.0f;
        for (int64_t j = lane; j <= i; j += 32) dot += load_t(pr, j) * dp[j];
        dot = warp_sum(dot);
        for (int64_t j0 = 0; j0 < S; j0 += 32) {
            const int64_t j = j0 + lane;
            const float v = j <= i ? load_t(pr, j) * (dp[j] - dot) * scale : 0.0f;
            __syncwarp(); /* this step's dP is read before its dS overwrites bytes of it */
            if (j < S) store_t(ds, j, v);
        }
    }
}

/* The GEMMs cuBLASLt has no algorithm for (bgemm's formula), FP32 sums.
 * Grid: (column tiles, row tiles, batches), each grid-stride. Block:
 * FB_TILE×FB_TILE; thread (x, y) owns D(r0 + x, c0 + y) and loads one
 * element of each FB_TILE² operand tile per K step. */
template <typename TI, typename TO>
static __global__ void __launch_bounds__(FB_TILE * FB_TILE) bgemm_fallback_kernel(bgemm g)
{
    __shared__ float as[FB_TILE][FB_TILE + 1]; /* as[kk][r] = A(r0 + r, k0 + kk) */
    __shared__ float bs[FB_TILE][FB_TILE + 1]; /* bs[kk][c] = B(k0 + kk, c0 + c) */
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t tiles_m = (g.m + FB_TILE - 1) / FB_TILE, tiles_n = (g.n + FB_TILE - 1) / FB_TILE;
    for (int64_t z = blockIdx.z; z < g.batch; z += gridDim.z) {
        const TI *a = (const TI *)g.a + z * g.sa, *b = (const TI *)g.b + z * g.sb;
        TO *d = (TO *)g.d + z * g.sd;
        for (int64_t tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
            for (int64_t tn = blockIdx.x; tn < tiles_n; tn += gridDim.x) {
                const int64_t r0 = tm * FB_TILE, c0 = tn * FB_TILE;
                float acc = 0.0f;
                for (int64_t k0 = 0; k0 < g.k; k0 += FB_TILE) {
                    const int64_t ar = r0 + tx, ak = k0 + ty, bk = k0 + tx, bc = c0 + ty;
                    as[ty][tx] = ar < g.m && ak < g.k ? load_t(a, g.ta ? ak + ar * g.lda : ar + ak * g.lda) : 0.0f;
                    bs[tx][ty] = bk < g.k && bc < g.n ? load_t(b, g.tb ? bc + bk * g.ldb : bk + bc * g.ldb) : 0.0f;
                    __syncthreads();
#pragma unroll
                    for (int kk = 0; kk < FB_TILE; kk++) acc = __fmaf_rn(as[kk][tx], bs[kk][ty], acc);
                    __syncthreads();
                }
                const int64_t r = r0 + tx, c = c0 + ty;
                if (r < g.m && c < g.n) store_t(d, r + c * g.ldd, acc);
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Launchers                                                                 */
/* ------------------------------------------------------------------------ */

/* Permute `parts` parts between token-major `tok` (rows of ld elements, part
 * p at column p·C) and head-major `heads`. */
static f8_status heads_copy(f8_ctx *ctx, int to_heads, const void *src, void *dst, int64_t parts, int64_t B, int64_t S,
                            int64_t nh, int64_t hd, int64_t ld, f8_dtype dt)
{
    const int64_t es = (int64_t)f8_dtype_size(dt), seg = hd * es, C = nh * hd;
    const int w1 = access_width(src, seg, 16), w2 = access_width(dst, seg, 16);
    const int w = w1 < w2 ? w1 : w2;
    const int64_t units = parts * B * nh * S * (seg / w);
    const int grid = grid_size(ctx, units, COPY_THREADS);
    cudaStream_t st = f8i_stream(ctx);
    F8I_COUNT_LAUNCHES(ctx, 1);
#define HC(W)                                                                                          \
    do {                                                                                               \
        if (to_heads)                                                                                  \
            heads_copy_kernel<W, true><<<grid, COPY_THREADS, 0, st>>>(src, dst, parts, B, S, nh, seg, ld * es, C * es); \
        else                                                                                           \
            heads_copy_kernel<W, false><<<grid, COPY_THREADS, 0, st>>>(src, dst, parts, B, S, nh, seg, ld * es, C * es); \
    } while (0)
    switch (w) {
    case 16: HC(16); break;
    case 8: HC(8); break;
    case 4: HC(4); break;
    case 2: HC(2); break;
    default: HC(1); break;
    }
#undef HC
    return f8i_cuda_launch_check(ctx, "heads_copy_kernel");
}

static f8_status softmax_fwd(f8_ctx *ctx, const float *s, void *p, int64_t rows, int64_t S, int64_t p_ld, int64_t p_stride,
                             float scale, f8_dtype dt)
{
    const int grid = grid_size(ctx, rows * 32, SOFTMAX_THREADS);
    F8I_COUNT_LAUNCHES(ctx, 1);
    if (dt == F8_DTYPE_BF16)
        softmax_fwd_kernel<uint16_t><<<grid, SOFTMAX_THREADS, 0, f8i_stream(ctx)>>>(s, (uint16_t *)p, rows, S, p_ld, p_stride,
                                                                                    scale);
    else
        softmax_fwd_kernel<float><<<grid, SOFTMAX_THREADS, 0, f8i_stream(ctx)>>>(s, (float *)p, rows, S, p_ld, p_stride, scale);
    return f8i_cuda_launch_check(ctx, "softmax_fwd_kernel");
}

static f8_status softmax_bwd(f8_ctx *ctx, const void *p, float *s, int64_t rows, int64_t S, float scale, f8_dtype dt)
{
    const int grid = grid_size(ctx, rows * 32, SOFTMAX_THREADS);
    F8I_COUNT_LAUNCHES(ctx, 1);
    if (dt == F8_DTYPE_BF16)
        softmax_bwd_kernel<uint16_t><<<grid, SOFTMAX_THREADS, 0, f8i_stream(ctx)>>>((const uint16_t *)p, s, rows, S, scale);
    else
        softmax_bwd_kernel<float><<<grid, SOFTMAX_THREADS, 0, f8i_stream(ctx)>>>((const float *)p, s, rows, S, scale);
    return f8i_cuda_launch_check(ctx, "softmax_bwd_kernel");
}

static f8_status bgemm_fallback(f8_ctx *ctx, const bgemm *g)
{
    int64_t gx = (g->n + FB_TILE - 1) / FB_TILE, gy = (g->m + FB_TILE - 1) / FB_TILE, gz = g->batch;
    if (gx > 65535) gx = 65535;
    if (gy > 65535) gy = 65535;
    if (gz > 65535) gz = 65535;
    const dim3 grid((unsigned)gx, (unsigned)gy, (unsigned)gz), block(FB_TILE, FB_TILE);
    cudaStream_t st = f8i_stream(ctx);
    F8I_COUNT_LAUNCHES(ctx, 1);
    if (g->in == F8_DTYPE_BF16 && g->out == F8_DTYPE_BF16)
        bgemm_fallback_kernel<uint16_t, uint16_t><<<grid, block, 0, st>>>(*g);
    else if (g->in == F8_DTYPE_BF16)
        bgemm_fallback_kernel<uint16_t, float><<<grid, block, 0, st>>>(*g);
    else
        bgemm_fallback_kernel<float, float><<<grid, block, 0, st>>>(*g);
    return f8i_cuda_launch_check(ctx, "bgemm_fallback_kernel");
}

/* ------------------------------------------------------------------------ */
/* cuBLASLt plans                                                            */
/* ------------------------------------------------------------------------ */

static cudaDataType_t lt_type(f8_dtype t) { return t == F8_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

/* log2 of the largest power of two <= 256 dividing every batch's start. */
static uint32_t align_log2(const void *p, int64_t stride_bytes)
{
    const uint64_t u = (uint64_t)(uintptr_t)p | (uint64_t)stride_bytes | 256u;
    return (uint32_t)__builtin_ctzll((unsigned long long)u);
}

static plan_key make_key(const bgemm *g)
{
    plan_key key;
    memset(&key, 0, sizeof key);
    const int64_t ei = (int64_t)f8_dtype_size(g->in), eo = (int64_t)f8_dtype_size(g->out);
    key.m = g->m, key.n = g->n, key.k = g->k, key.batch = g->batch;
    key.lda = g->lda, key.sa = g->sa, key.ldb = g->ldb, key.sb = g->sb, key.ldd = g->ldd, key.sd = g->sd;
    key.ta = g->ta, key.tb = g->tb, key.in = (int32_t)g->in, key.out = (int32_t)g->out;
    key.aligns = align_log2(g->a, g->sa * ei) | align_log2(g->b, g->sb * ei) << 4 | align_log2(g->d, g->sd * eo) << 8;
    return key;
}

static void plan_release(attn_plan *p)
{
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->ld) cublasLtMatrixLayoutDestroy(p->ld);
    p->desc = NULL;
    p->la = p->lb = p->ld = NULL;
}

/* A batched layout: rows × cols, ld, batch `count` `stride` elements apart. */
static cublasStatus_t layout(cublasLtMatrixLayout_t *l, f8_dtype dt, int64_t rows, int64_t cols, int64_t ld, int64_t count,
                             int64_t stride)
{
    cublasStatus_t st = cublasLtMatrixLayoutCreate(l, lt_type(dt), (uint64_t)rows, (uint64_t)cols, ld);
    const int32_t n = (int32_t)count;
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof n);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
    return st;
}

/* Descriptor, layouts and the heuristic's first algorithm for g; p->lt = 0
 * (and CUBLAS_STATUS_SUCCESS) when cuBLASLt has none. */
static cublasStatus_t plan_build(attn_state *as, const bgemm *g, size_t ws_bytes, attn_plan *p)
{
    memset(p, 0, sizeof *p);
    p->key = make_key(g);
    const cublasOperation_t ta = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t st = cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = g->ta ? layout(&p->la, g->in, g->k, g->m, g->lda, g->batch, g->sa) : layout(&p->la, g->in, g->m, g->k, g->lda, g->batch, g->sa);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = g->tb ? layout(&p->lb, g->in, g->n, g->k, g->ldb, g->batch, g->sb) : layout(&p->lb, g->in, g->k, g->n, g->ldb, g->batch, g->sb);
    if (st == CUBLAS_STATUS_SUCCESS) st = layout(&p->ld, g->out, g->m, g->n, g->ldd, g->batch, g->sd);
    if (st != CUBLAS_STATUS_SUCCESS) return st;

    cublasLtMatmulPreference_t pref = NULL;
    st = cublasLtMatmulPreferenceCreate(&pref);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    const uint64_t ws = ws_bytes;
    const uint32_t al_a = 1u << (p->key.aligns & 15u), al_b = 1u << (p->key.aligns >> 4 & 15u),
                   al_d = 1u << (p->key.aligns >> 8 & 15u);
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d);
    if (st == CUBLAS_STATUS_SUCCESS) {
        cublasLtMatmulHeuristicResult_t res;
        int n_res = 0;
        memset(&res, 0, sizeof res);
        st = cublasLtMatmulAlgoGetHeuristic(as->lt, p->desc, p->la, p->lb, p->ld, p->ld, pref, 1, &res, &n_res);
        if (st == CUBLAS_STATUS_SUCCESS && n_res > 0 && res.state == CUBLAS_STATUS_SUCCESS && res.workspaceSize <= ws_bytes) {
            p->algo = res.algo;
            p->lt = 1;
        }
        /* "no algorithm for this configuration" is an answer: the fallback */
        if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE || st == CUBLAS_STATUS_ARCH_MISMATCH)
            st = CUBLAS_STATUS_SUCCESS;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    if (!p->lt) plan_release(p);
    return st;
}

static f8_status lt_error(f8_ctx *ctx, cublasStatus_t st, const char *what, const bgemm *g)
{
    return f8i_error(ctx, F8_ERR_CUBLAS, "attention: %s (batched GEMM m %lld, n %lld, k %lld, batch %lld, %s -> %s): %s",
                     what, (long long)g->m, (long long)g->n, (long long)g->k, (long long)g->batch, f8_dtype_name(g->in),
                     f8_dtype_name(g->out), cublasLtGetStatusName(st));
}

/* The plan of g: a cached one or a new one (built once per shape). */
static f8_status plan_find(f8_ctx *ctx, attn_state *as, const bgemm *g, size_t ws_bytes, attn_plan **out)
{
    const plan_key key = make_key(g);
    for (int i = 0; i < as->count; i++) {
        if (memcmp(&as->plans[i].key, &key, sizeof key) == 0) {
            *out = &as->plans[i];
            return F8_OK;
        }
    }
    if (as->count == as->cap) {
        const int cap = as->cap ? 2 * as->cap : 16;
        attn_plan *grown = (attn_plan *)realloc(as->plans, (size_t)cap * sizeof *grown);
        if (!grown) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "attention: no host memory for %d GEMM plans", cap);
        as->plans = grown;
        as->cap = cap;
    }
    attn_plan *p = &as->plans[as->count];
    const cublasStatus_t st = plan_build(as, g, ws_bytes, p);
    if (st != CUBLAS_STATUS_SUCCESS) {
        plan_release(p);
        return lt_error(ctx, st, "building the cuBLASLt plan", g);
    }
    as->count++;
    *out = p;
    return F8_OK;
}

/* D = op(A)·op(B), batched: cuBLASLt, or the fallback where it has no algorithm. */
static f8_status run_bgemm(f8_ctx *ctx, attn_state *as, const bgemm *g, void *ws, size_t ws_bytes)
{
    attn_plan *p = NULL;
    f8_status s = plan_find(ctx, as, g, ws_bytes, &p);
    if (s != F8_OK) return s;
    if (!p->lt) return bgemm_fallback(ctx, g);
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t st = cublasLtMatmul(as->lt, p->desc, &alpha, g->a, p->la, g->b, p->lb, &beta, g->d, p->ld, g->d,
                                             p->ld, &p->algo, ws, ws_bytes, f8i_stream(ctx));
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) { /* nothing enqueued; this shape uses the fallback from now on */
        plan_release(p);
        p->lt = 0;
        return bgemm_fallback(ctx, g);
    }
    if (st != CUBLAS_STATUS_SUCCESS) return lt_error(ctx, st, "cublasLtMatmul", g);
    F8I_COUNT_LAUNCHES(ctx, 1);
    return F8_OK;
}

/* A GEMM over the B·nh heads. */
static bgemm heads_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, int64_t batch, const void *a, int64_t lda,
                        int64_t sa, const void *b, int64_t ldb, int64_t sb, void *d, int64_t ldd, int64_t sd, f8_dtype in,
                        f8_dtype out)
{
    bgemm g;
    g.ta = ta, g.tb = tb, g.m = m, g.n = n, g.k = k, g.batch = batch;
    g.a = a, g.lda = lda, g.sa = sa, g.b = b, g.ldb = ldb, g.sb = sb, g.d = d, g.ldd = ldd, g.sd = sd;
    g.in = in, g.out = out;
    return g;
}

/* ------------------------------------------------------------------------ */
/* Entry points                                                              */
/* ------------------------------------------------------------------------ */

static f8_status forward(f8_ctx *ctx, const f8i_attn_fwd_args *a)
{
    attn_state *as = (attn_state *)a->state;
    const int64_t B = a->batch, S = a->seq, nh = a->n_head, hd = a->head_dim, C = nh * hd, BH = B * nh;
    const f8_dtype dt = a->dtype;
    const size_t es = f8_dtype_size(dt), part = (size_t)(BH * S * hd) * es;
    char *q = (char *)a->heads, *k = q + part, *v = k + part, *o = v + part;
    /* P: the saved buffer (ld S), or in place over the scores (ld S·4/es) */
    void *p = a->p ? a->p : (void *)a->s;
    const int64_t p_ld = a->p ? S : S * 4 / (int64_t)es;

    f8_status st = heads_copy(ctx, 1, a->qkv, q, 3, B, S, nh, hd, 3 * C, dt);
    bgemm g = heads_gemm(1, 0, S, S, hd, BH, k, hd, S * hd, q, hd, S * hd, a->s, S, S * S, dt, F8_DTYPE_FP32);
    if (st == F8_OK) st = run_bgemm(ctx, as, &g, a->workspace, a->workspace_bytes); /* s' = k'ᵀ·q' */
    if (st == F8_OK) st = softmax_fwd(ctx, a->s, p, BH * S, S, p_ld, p_ld * S, a->scale, dt);
    g = heads_gemm(0, 0, hd, S, S, BH, v, hd, S * hd, p, p_ld, p_ld * S, o, hd, S * hd, dt, dt);
    if (st == F8_OK) st = run_bgemm(ctx, as, &g, a->workspace, a->workspace_bytes); /* o' = v'·P' */
    if (st == F8_OK) st = heads_copy(ctx, 0, o, a->y, 1, B, S, nh, hd, C, dt);
    return st;
}

static f8_status backward(f8_ctx *ctx, const f8i_attn_bwd_args *a)
{
    attn_state *as = (attn_state *)a->state;
    const int64_t B = a->batch, S = a->seq, nh = a->n_head, hd = a->head_dim, C = nh * hd, BH = B * nh;
    const f8_dtype dt = a->dtype;
    const size_t es = f8_dtype_size(dt), part = (size_t)(BH * S * hd) * es;
    char *q = (char *)a->heads, *k = q + part, *v = k + part, *dO = v + part;
    char *dq = dO + part, *dk = dq + part, *dv = dk + part;
    const int64_t ds_ld = S * 4 / (int64_t)es; /* dS over dP: see the design note */
    void *ws = a->workspace;
    const size_t wsb = a->workspace_bytes;

    f8_status st = heads_copy(ctx, 1, a->qkv, q, 3, B, S, nh, hd, 3 * C, dt);
    if (st == F8_OK) st = heads_copy(ctx, 1, a->dy, dO, 1, B, S, nh, hd, C, dt);
    bgemm g = heads_gemm(1, 0, S, S, hd, BH, v, hd, S * hd, dO, hd, S * hd, a->s, S, S * S, dt, F8_DTYPE_FP32);
    if (st == F8_OK) st = run_bgemm(ctx, as, &g, ws, wsb); /* dP' = v'ᵀ·dO' */
    g = heads_gemm(0, 1, hd, S, S, BH, dO, hd, S * hd, a->p, S, S * S, dv, hd, S * hd, dt, dt);
    if (st == F8_OK) st = run_bgemm(ctx, as, &g, ws, wsb); /* dv' = dO'·P'ᵀ */
    if (st == F8_OK) st = softmax_bwd(ctx, a->p, a->s, BH * S, S, a->scale, dt);
    g = heads_gemm(0, 0, hd, S, S, BH, k, hd, S * hd, a->s, ds_ld, ds_ld * S, dq, hd, S * hd, dt, dt);
    if (st == F8_OK) st = run_bgemm(ctx, as, &g, ws, wsb); /* dq' = k'·dS' */
    g = heads_gemm(0, 1, hd, S, S, BH, q, hd, S * hd, a->s, ds_ld, ds_ld * S, dk, hd, S * hd, dt, dt);
    if (st == F8_OK) st = run_bgemm(ctx, as, &g, ws, wsb); /* dk' = q'·dS'ᵀ */
    if (st == F8_OK) st = heads_copy(ctx, 0, dq, a->dqkv, 3, B, S, nh, hd, 3 * C, dt);
    return st;
}

static f8_status state_create(f8_ctx *ctx, void **state)
{
    *state = NULL;
    attn_state *as = (attn_state *)calloc(1, sizeof *as);
    if (!as) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "f8_attention_create: out of host memory");
    const cublasStatus_t st = cublasLtCreate(&as->lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
        free(as);
        return f8i_error(ctx, F8_ERR_CUBLAS, "f8_attention_create: cublasLtCreate: %s", cublasLtGetStatusName(st));
    }
    *state = as;
    return F8_OK;
}

static void state_destroy(void **state)
{
    attn_state *as = (attn_state *)*state;
    *state = NULL;
    if (!as) return;
    for (int i = 0; i < as->count; i++) plan_release(&as->plans[i]);
    free(as->plans);
    cublasLtDestroy(as->lt);
    free(as);
}

f8_status f8i_cuda_attention_op(f8_ctx *ctx, int kind, const void *args)
{
    switch (kind) {
    case F8I_ATTN_STATE_CREATE: return state_create(ctx, ((const f8i_attn_state_args *)args)->state);
    case F8I_ATTN_STATE_DESTROY: state_destroy(((const f8i_attn_state_args *)args)->state); return F8_OK;
    case F8I_ATTN_FORWARD: {
        const f8i_attn_fwd_args *a = (const f8i_attn_fwd_args *)args;
        if (!a->state) return f8i_error(ctx, F8_ERR_STATE, "attention forward: the object has no CUDA state");
        return forward(ctx, a);
    }
    case F8I_ATTN_BACKWARD: {
        const f8i_attn_bwd_args *a = (const f8i_attn_bwd_args *)args;
        if (!a->state) return f8i_error(ctx, F8_ERR_STATE, "attention backward: the object has no CUDA state");
        return backward(ctx, a);
    }
    default: return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "train op %d: not an attention op", kind);
    }
}
