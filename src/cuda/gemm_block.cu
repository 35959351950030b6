/*
 * gemm_block.cu — the block-scaled FP8 GEMM (f8i_gemm_args in block modes, backend.h):
 * cuBLASLt's block-scaled matmul where it takes the shape, an own CUDA-core
 * kernel everywhere else, chosen once per shape and cached.
 *
 * Design note.
 *
 * cuBLASLt (CUDA 12.9+, sm_90). CUBLASLT_MATMUL_DESC_A/B_SCALE_MODE set to
 * CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F (one FP32 per 128 elements along
 * K: our 1x128 tiles) or ..._BLK128x128_32F (one FP32 per 128x128 block),
 * with A/B_SCALE_POINTER at the scale tensors: D = Σ_kb (sA·sB)·P_kb, the
 * contract's two-level sum. The row-major/column-major mapping is gemm.cu's:
 * cuBLASLt's A' is our b (n x k, op T), its B' our a (m x k, op N), D' = D
 * (n x m, ld n), so A' takes b's scales and B' a's.
 *
 * Scale layout. cuBLASLt does not read f8's grid ([ceil(rows/br), nkb]
 * row-major, nkb = ceil(k/128)). It wants (cuBLAS docs, "scaling factors
 * layouts", as quoted in PyTorch PR 166752; and what TransformerEngine's
 * Float8BlockQuantizer stores as "GEMM-ready", TE's get_scale_shape):
 *   1x128 (VEC128): [nkb, rows] row-major — the operand's rows contiguous
 *                   (TE pads rows to a multiple of 4, PyTorch does not, so
 *                   this path takes only rows % 4 == 0, where both agree);
 *   128x128 (BLK):  [ceil(rows/128), roundup(nkb, 4)] row-major — f8's grid
 *                   with each row padded to a multiple of 4 (16 bytes).
 * Rather than a second scale layout through the cast, the qtensor and the
 * modules, each call relayouts both grids with one small kernel
 * (gemm_block_scales_kernel: a few KB to a few MB, far below the GEMM's own
 * traffic) into the scale part (BG_SCALE_BYTES) of the GEMM op's workspace
 * (cuda_state.cuh: one formula, the op's own; the GEMM op's calls run one at
 * a time on the ctx's stream). The scale pointers are then
 * fixed per ctx and set once per plan, and a captured graph replays the
 * relayout with the step's scales.
 *
 * Which path each case takes (plan_build):
 *  - cuBLASLt: both operands FP8 and not E5M2 x E5M2 (cuBLASLt's FP8 type
 *    table), n·sizeof(D) % 16 == 0, a, b, d 16-byte aligned (gemm.cu's TN
 *    rule), k % 128 == 0 (whole K-blocks: what every documented use of
 *    these modes has; a partial last block is left to the own kernel), the
 *    rows of a 1x128 operand % 4 == 0 (above), the two relaid grids fit
 *    BG_SCALE_BYTES, and the
 *    heuristic returns an algorithm (FAST_ACCUM off: cuBLASLt has no fast
 *    accumulation with block scales). A BF16 bias is the epilogue's
 *    (CUBLASLT_EPILOGUE_BIAS: cuBLASLt's FP8 table has BF16 as the one bias
 *    type, for BF16 and FP32 D; alpha·ΣAB + C + bias in FP32, D rounded
 *    once) when the heuristic has an algorithm for it; an FP32 bias, or a
 *    shape without such an algorithm, gets the plain matmul and
 *    gemm_block_bias_kernel after it (one launch more, D rounded before
 *    the bias is added); accumulate is beta = 1 with C = D,
 *    the addend c (f8_module_forward_add's residual) beta = 1 with C = c
 *    (one FP32 sum in the epilogue, as gemm.cu's), so no copy of it.
 *  - the fallback kernel (gemm_block_fallback_kernel) for everything else:
 *    k not a multiple of 128, odd n or token counts (the CUDA module
 *    tests' 1/17/33/250 features), E5M2 x E5M2, huge scale grids, k == 0,
 *    and any shape cuBLASLt refuses (no
 *    algorithm, or NOT_SUPPORTED from the matmul itself: the plan then turns
 *    to the fallback for good). It evaluates the contract's formula
 *    literally: per 128-deep K-block an FP32 partial sum of decoded codes,
 *    promoted into the FP32 accumulator times sa·sb. CUDA cores, no tensor
 *    cores: correct for every shape, slow for big ones.
 *
 * Plans are kept per key (m, n, k, dtypes, block rows, accumulate, the
 * alignment class of a, b, d) in the ctx's plan cache (plan_cache.cuh), as
 * gemm.cu's: host memory and descriptors once per shape, built at capture
 * too, nothing created on a hit.
 */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_state.cuh"
#include "gemm_lt.cuh"
#include "plan_cache.cuh"
#include "core/numerics.h"

#define BG_SCALE_BYTES F8I_GEMM_BLOCK_SCALE_BYTES /* the op workspace's part for the relaid grids (cuda_state.cuh) */

/* Fallback tiling: gemm_lt.cuh's (F8I_FB_*), stepping K by 16 inside each
 * 128-deep K-block. */
#define BG_THREADS F8I_FB_THREADS
#define BG_TILE F8I_FB_TILE
#define BG_PER F8I_FB_PER
#define BG_K F8I_FB_K
static_assert(F8I_BLOCK % BG_K == 0, "K steps never straddle a K-block");

/* ------------------------------------------------------------------------ */
/* Types                                                                     */
/* ------------------------------------------------------------------------ */

/* A plan's key: f8i_gemm_key (gemm_lt.cuh), ldd = n, types = a | b << 4 |
 * d << 8 | (a_br == 1) << 12 | (b_br == 1) << 13 | accumulate << 14 |
 * c << 15 | (bias ? dtype + 1 : 0) << 16, aligns of a, b, d, c, bias. */
typedef f8i_gemm_key bg_key;

typedef struct bg_plan { /* a plan cache body (plan_cache.cuh); its key is a bg_key */
    int lt;                        /* 1: cuBLASLt, 0: the fallback kernel */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t lay_a;  /* cuBLASLt's A' = our b */
    cublasLtMatrixLayout_t lay_b;  /* cuBLASLt's B' = our a */
    cublasLtMatrixLayout_t lay_d;  /* C' = D' */
    cublasLtMatmulAlgo_t algo;
    int tuned;                    /* f8_ctx_set_gemm_tune has chosen algo */
    int bias_fused;                /* the bias is cuBLASLt's epilogue (else gemm_block_bias_kernel's) */
    const void *set_bias;          /* the bias pointer the descriptor holds */
} bg_plan;

typedef struct bg_params {
    const uint8_t *a, *b;          /* [m, k], [n, k] codes */
    const float *sa, *sb;          /* f8 grids [ceil(m/a_br), nkb], [ceil(n/b_br), nkb] */
    int a_br, b_br;
    void *d;                       /* [m, n] */
    const void *c;                 /* [m, n] addend in d's dtype, or NULL */
    const void *bias;              /* [n] or NULL */
    int64_t m, n, k, nkb;
    f8_dtype d_dtype, bias_dtype;
    int accumulate;
} bg_params;

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

/* The contract's formula on CUDA cores: D = Σ_kb P_kb·(sa·sb) (+ D) (+ bias).
 * Grid: x over 64-column tiles of D, y over 64-row tiles (grid-stride in
 * both). Block: 16x16 threads. Thread (tx, ty) owns D rows i0 + ty + 16·r and
 * columns j0 + tx + 16·c (r, c < 4): one FP32 partial per K-block and one
 * accumulator each; it loads 4 codes of each 64x16 operand tile per K step,
 * k fastest across neighbouring threads (both operands are K-contiguous). */
template <int AE5, int BE5>
static __global__ void __launch_bounds__(BG_THREADS *BG_THREADS) gemm_block_fallback_kernel(bg_params p)
{
    __shared__ f8i_fb_stage as, bs; /* as[kk][i] = A(i0 + i, k0 + kk), bs[kk][j] = B(j0 + j, k0 + kk) */
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * BG_THREADS + tx;
    int64_t i0, j0; /* this block's tiles of D, grid-stride in both dimensions */
    for (int64_t t = 0; f8i_fb_tile(p.m, p.n, t, &i0, &j0); t++) {
        f8i_fb_acc acc;
        f8i_fb_zero(acc);

        for (int64_t kb = 0; kb < p.nkb; kb++) {
            f8i_fb_acc part;
            f8i_fb_zero(part);
            const int64_t k_end = (kb + 1) * F8I_BLOCK < p.k ? (kb + 1) * F8I_BLOCK : p.k;
            for (int64_t k0 = kb * F8I_BLOCK; k0 < k_end; k0 += BG_K) {
#pragma unroll
                for (int l = 0; l < 4; l++) {
                    const int e = tid + l * BG_THREADS * BG_THREADS;
                    const int ii = e / BG_K, kk = e % BG_K;
                    const int64_t gk = k0 + kk, gi = i0 + ii, gj = j0 + ii;
                    as[kk][ii] = gi < p.m && gk < p.k ? f8i_fp8_decode(p.a[gi * p.k + gk], AE5) : 0.0f;
                    bs[kk][ii] = gj < p.n && gk < p.k ? f8i_fp8_decode(p.b[gj * p.k + gk], BE5) : 0.0f;
                }
                __syncthreads();
                f8i_fb_mac(as, bs, part, tx, ty);
                __syncthreads();
            }
            /* promote: acc += P · (sa · sb), a product then a sum (-fmad=false) */
            float sa[BG_PER], sb[BG_PER];
#pragma unroll
            for (int r = 0; r < BG_PER; r++) {
                const int64_t i = i0 + ty + BG_THREADS * r;
                sa[r] = i < p.m ? p.sa[(i / p.a_br) * p.nkb + kb] : 0.0f;
            }
#pragma unroll
            for (int c = 0; c < BG_PER; c++) {
                const int64_t j = j0 + tx + BG_THREADS * c;
                sb[c] = j < p.n ? p.sb[(j / p.b_br) * p.nkb + kb] : 0.0f;
            }
#pragma unroll
            for (int r = 0; r < BG_PER; r++)
#pragma unroll
                for (int c = 0; c < BG_PER; c++) acc[r][c] = acc[r][c] + part[r][c] * (sa[r] * sb[c]);
        }

        f8i_fb_store(p.d, p.d_dtype, p.c, p.bias, p.bias_dtype, p.accumulate, p.m, p.n, i0, j0, tx, ty, 1.0f, acc);
    }
}

/* One operand's relaid grid size in floats (the design note's layouts). */
static __host__ __device__ __forceinline__ int64_t lt_scale_count(int64_t rows, int br, int64_t nkb)
{
    if (br == 1) return nkb * ((rows + 3) / 4 * 4);
    return (rows + F8I_BLOCK - 1) / F8I_BLOCK * ((nkb + 3) / 4 * 4);
}

/* Element `e` of one operand's relaid grid from its f8 grid; padding
 * entries (never read by cuBLASLt) get 1. */
static __device__ __forceinline__ float lt_scale_at(const float *src, int64_t rows, int br, int64_t nkb, int64_t e)
{
    if (br == 1) {
        const int64_t ld = (rows + 3) / 4 * 4, kb = e / ld, i = e % ld;
        return i < rows ? src[i * nkb + kb] : 1.0f;
    }
    const int64_t ld = (nkb + 3) / 4 * 4, rb = e / ld, kb = e % ld;
    return kb < nkb ? src[rb * nkb + kb] : 1.0f;
}

/* Both operands' scale grids into cuBLASLt's layout.
 * Grid: 1-D, grid-stride. Block: 256 threads. A thread owns elements
 * idx = global id + s·(grid size) of the concatenation [a's | b's]. */
static __global__ void __launch_bounds__(256)
    gemm_block_scales_kernel(const float *sa, float *da, int64_t m, int a_br, const float *sb, float *db, int64_t n,
                             int b_br, int64_t nkb)
{
    const int64_t na = lt_scale_count(m, a_br, nkb), total = na + lt_scale_count(n, b_br, nkb);
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        if (idx < na)
            da[idx] = lt_scale_at(sa, m, a_br, nkb, idx);
        else
            db[idx - na] = lt_scale_at(sb, n, b_br, nkb, idx - na);
    }
}

/* d[i, j] += bias[j] over D[m, n] after the cuBLASLt matmul.
 * Grid: 1-D, grid-stride. Block: 256 threads. A thread owns elements
 * idx = global id + s·(grid size). */
static __global__ void __launch_bounds__(256)
    gemm_block_bias_kernel(void *d, f8_dtype d_dtype, const void *bias, f8_dtype bias_dtype, int64_t m, int64_t n)
{
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < m * n;
         idx += (int64_t)gridDim.x * blockDim.x)
        f8i_lt_store(d, idx, d_dtype, f8i_lt_load(d, idx, d_dtype) + f8i_lt_load(bias, idx % n, bias_dtype));
}

/* ------------------------------------------------------------------------ */
/* Launchers                                                                 */
/* ------------------------------------------------------------------------ */

static unsigned grid_1d(const f8_ctx *ctx, int64_t work)
{
    int64_t blocks = (work + 255) / 256;
    const int64_t cap = (int64_t)(f8i_cuda(ctx)->sm_count > 0 ? f8i_cuda(ctx)->sm_count : 132) * 16;
    if (blocks > cap) blocks = cap;
    return blocks < 1 ? 1u : (unsigned)blocks;
}

static f8_status launch_fallback(f8_ctx *ctx, const f8i_gemm_args *g)
{
    bg_params p;
    p.a = (const uint8_t *)g->a;
    p.b = (const uint8_t *)g->b;
    p.c = g->c;
    p.sa = g->a_scale_inv;
    p.sb = g->b_scale_inv;
    p.a_br = f8i_mode_block_rows(g->a_mode);
    p.b_br = f8i_mode_block_rows(g->b_mode);
    p.d = g->d;
    p.bias = g->bias;
    p.m = g->m;
    p.n = g->n;
    p.k = g->k;
    p.nkb = (g->k + F8I_BLOCK - 1) / F8I_BLOCK;
    p.d_dtype = g->d_dtype;
    p.bias_dtype = g->bias_dtype;
    p.accumulate = g->accumulate;
    F8I_COUNT_LAUNCHES(ctx, 1);
    F8I_FB_LAUNCH(gemm_block_fallback_kernel, g->a_dtype, g->b_dtype, f8i_fb_grid(g->m, g->n, BG_TILE),
                  dim3(BG_THREADS, BG_THREADS), f8i_stream(ctx), p);
    return f8i_cuda_launch_check(ctx, "gemm_block_fallback_kernel");
}

/* ------------------------------------------------------------------------ */
/* Plans                                                                     */
/* ------------------------------------------------------------------------ */

static size_t round256(size_t b) { return (b + 255u) & ~(size_t)255u; }

static bg_key make_key(const f8i_gemm_args *g)
{
    const uint32_t types = (uint32_t)g->a_dtype | (uint32_t)g->b_dtype << 4 | (uint32_t)g->d_dtype << 8 |
                           (uint32_t)(f8i_mode_block_rows(g->a_mode) == 1) << 12 |
                           (uint32_t)(f8i_mode_block_rows(g->b_mode) == 1) << 13 | (uint32_t)(g->accumulate != 0) << 14 |
                           (uint32_t)(g->c != NULL) << 15 | (g->bias ? (uint32_t)g->bias_dtype + 1u : 0u) << 16;
    const void *const ptrs[5] = {g->a, g->b, g->d, g->c, g->bias};
    return f8i_gemm_key_of(g->m, g->n, g->k, g->n, types, f8i_lt_aligns(ptrs, 5));
}

/* Bytes of the two relaid grids: a's at the start of the tail, b's after. */
static size_t scale_bytes_a(const f8i_gemm_args *g)
{
    return round256((size_t)lt_scale_count(g->m, f8i_mode_block_rows(g->a_mode), (g->k + F8I_BLOCK - 1) / F8I_BLOCK) * 4);
}
static size_t scale_bytes_b(const f8i_gemm_args *g)
{
    return round256((size_t)lt_scale_count(g->n, f8i_mode_block_rows(g->b_mode), (g->k + F8I_BLOCK - 1) / F8I_BLOCK) * 4);
}

static int lt_eligible(const f8i_gemm_args *g)
{
    const int64_t dsize = g->d_dtype == F8_DTYPE_BF16 ? 2 : 4;
    if (g->m == 0 || g->n == 0 || g->k == 0) return 0;
    if (g->a_dtype == F8_DTYPE_E5M2 && g->b_dtype == F8_DTYPE_E5M2) return 0;
    if (f8i_mode_block_rows(g->a_mode) != 1 && f8i_mode_block_rows(g->b_mode) != 1) return 0;
    if (g->k % F8I_BLOCK != 0 || (g->n * dsize) % 16 != 0) return 0;
    /* a 1x128 operand's rows % 4 == 0: its padded and unpadded layouts coincide */
    if ((f8i_mode_block_rows(g->a_mode) == 1 && g->m % 4 != 0) || (f8i_mode_block_rows(g->b_mode) == 1 && g->n % 4 != 0)) return 0;
    if (f8i_lt_align_log2(g->a) < 4 || f8i_lt_align_log2(g->b) < 4 || f8i_lt_align_log2(g->d) < 4) return 0;
    if (g->c && f8i_lt_align_log2(g->c) < 4) return 0; /* C, like D, 16-byte aligned */
    return scale_bytes_a(g) + scale_bytes_b(g) <= BG_SCALE_BYTES;
}

static void plan_release(bg_plan *p)
{
    f8i_lt_release(&p->desc, &p->lay_a, &p->lay_b, &p->lay_d);
    p->lt = 0;
}

/* What a cuBLASLt block GEMM uses of the GEMM op's state: the handle, the
 * cuBLASLt part of the op's workspace and its scale part, split into a's
 * grid then b's. */
typedef struct bg_res {
    void *handle, *ws;
    size_t ws_bytes;
    float *scale_a, *scale_b;
} bg_res;

static f8_status res_get(f8_ctx *ctx, const f8i_gemm_args *g, bg_res *r)
{
    void *sc = NULL;
    memset(r, 0, sizeof *r);
    F8I_TRY(f8i_cuda_gemm_lt(ctx, &r->handle, &r->ws, &r->ws_bytes));
    F8I_TRY(f8i_cuda_gemm_block_scales(ctx, &sc));
    r->scale_a = (float *)sc;
    r->scale_b = (float *)((char *)sc + scale_bytes_a(g));
    return F8_OK;
}

/* g's descriptor and layouts, with the bias epilogue if fuse, and the
 * heuristic's algorithm: *found 1, or 0 with all of it released (cuBLASLt
 * refused the description or has no algorithm). The scale pointers are
 * the scale buffer's, the same for every call; the bias pointer is this
 * call's (run_lt points the descriptor at each call's). */
static f8_status plan_describe(f8_ctx *ctx, const f8i_gemm_args *g, const bg_res *r, int fuse, bg_plan *p, int *found)
{
    *found = 0;
    const float *scale_a = r->scale_a; /* our a's: cuBLASLt's B' */
    const float *scale_b = r->scale_b; /* our b's: its A' */
    const uint64_t m = (uint64_t)g->m, n = (uint64_t)g->n, k = (uint64_t)g->k;
    cublasStatus_t st = cublasLtMatrixLayoutCreate(&p->lay_a, f8i_lt_type(g->b_dtype), k, n, g->k);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&p->lay_b, f8i_lt_type(g->a_dtype), k, m, g->k);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&p->lay_d, f8i_lt_type(g->d_dtype), n, m, g->n);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
    const int8_t fast = 0;
    const cublasLtEpilogue_t epi = fuse ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    const int32_t bias_type = CUDA_R_16BF; /* the one bias type with FP8 operands, for BF16 and FP32 D */
    const int32_t mode_a = f8i_mode_block_rows(g->b_mode) == 1 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                                : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const int32_t mode_b = f8i_mode_block_rows(g->a_mode) == 1 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                                : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const struct {
        cublasLtMatmulDescAttributes_t attr;
        const void *value;
        size_t bytes;
    } attrs[] = {{CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof op_t},
                 {CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof op_n},
                 {CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast},
                 {CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode_a, sizeof mode_a},
                 {CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode_b, sizeof mode_b},
                 {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_b, sizeof scale_b},
                 {CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_a, sizeof scale_a},
                 {CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi},
                 {CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type}, /* these two: fuse only */
                 {CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias}};
    const size_t n_attrs = sizeof attrs / sizeof attrs[0] - (fuse ? 0 : 2);
    for (size_t i = 0; i < n_attrs && st == CUBLAS_STATUS_SUCCESS; i++)
        st = cublasLtMatmulDescSetAttribute(p->desc, attrs[i].attr, attrs[i].value, attrs[i].bytes);
    /* Any refusal while describing a block-scaled matmul (an older cuBLASLt
     * without the scale modes answers INVALID_VALUE) means: the fallback. */
    if (st != CUBLAS_STATUS_SUCCESS) {
        plan_release(p);
        return F8_OK;
    }

    uint32_t al[4];
    f8i_lt_query_aligns(g->a, g->b, g->c, g->d, al);
    p->set_bias = fuse ? g->bias : NULL;
    st = f8i_lt_heuristic((cublasLtHandle_t)r->handle, p->desc, p->lay_a, p->lay_b, p->lay_d, r->ws_bytes, al[0], al[1], al[2],
                          al[3], &p->algo, found);
    if (st != CUBLAS_STATUS_SUCCESS) {
        plan_release(p);
        return f8i_error(ctx, F8_ERR_CUBLAS, "block gemm %lldx%lldx%lld: cublasLt preference/heuristic: %s",
                         (long long)g->m, (long long)g->n, (long long)g->k, cublasLtGetStatusName(st));
    }
    if (!*found) plan_release(p);
    return F8_OK;
}

/* The plan of g: cuBLASLt (p->lt) or the fallback kernel. A BF16 bias
 * goes into the epilogue when the heuristic has an algorithm for it (one
 * rounding of D, no bias launch); otherwise the plain matmul, and
 * gemm_block_bias_kernel adds the bias after it. */
static f8_status plan_build(f8_ctx *ctx, const f8i_gemm_args *g, bg_plan *p)
{
    if (!lt_eligible(g)) return F8_OK;
    bg_res r;
    F8I_TRY(res_get(ctx, g, &r));
    int found = 0;
    if (g->bias && g->bias_dtype == F8_DTYPE_BF16) {
        F8I_TRY(plan_describe(ctx, g, &r, 1, p, &found));
        p->bias_fused = found;
    }
    if (!found) F8I_TRY(plan_describe(ctx, g, &r, 0, p, &found));
    p->lt = found;
    return F8_OK;
}

static f8_status kind_build(f8_ctx *ctx, void *body, const void *arg, size_t *buf_bytes)
{
    (void)buf_bytes;
    return plan_build(ctx, (const f8i_gemm_args *)arg, (bg_plan *)body);
}

static void kind_release(f8_ctx *ctx, void *body)
{
    (void)ctx;
    plan_release((bg_plan *)body);
}

static void kind_describe(const void *arg, char *out, size_t size)
{
    const f8i_gemm_args *g = (const f8i_gemm_args *)arg;
    snprintf(out, size, "m %lld, n %lld, k %lld, %s x %s -> %s", (long long)g->m, (long long)g->n, (long long)g->k,
             f8_dtype_name(g->a_dtype), f8_dtype_name(g->b_dtype), f8_dtype_name(g->d_dtype));
}

/* Built at capture too: host memory and descriptors; the scale buffer is
 * the GEMM op's. */
static const f8i_plan_kind block_kind = {"block gemm", sizeof(bg_plan), 1, kind_build, kind_release, kind_describe};

static f8_status plan_find(f8_ctx *ctx, const f8i_gemm_args *g, bg_plan **out)
{
    const bg_key key = make_key(g);
    f8i_plan *p = NULL;
    *out = NULL;
    F8I_TRY(f8i_plan_get(ctx, &block_kind, &key, sizeof key, g, &p));
    *out = (bg_plan *)p->body;
    return F8_OK;
}

/* The cuBLASLt path: relayout the scales, matmul, bias. NOT_SUPPORTED from
 * the matmul (nothing enqueued by it) is reported in *refused. */
static f8_status run_lt(f8_ctx *ctx, bg_plan *p, const f8i_gemm_args *g, int *refused)
{
    *refused = 0;
    bg_res r;
    F8I_TRY(res_get(ctx, g, &r));
    if (p->bias_fused && p->set_bias != g->bias) { /* host-side: nothing enqueued yet on failure */
        const cublasStatus_t bs =
            cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias);
        if (bs != CUBLAS_STATUS_SUCCESS)
            return f8i_error(ctx, F8_ERR_CUBLAS, "block gemm: setting the bias pointer: %s", cublasLtGetStatusName(bs));
        p->set_bias = g->bias;
    }
    float *scale_a = r.scale_a, *scale_b = r.scale_b;
    const int64_t nkb = (g->k + F8I_BLOCK - 1) / F8I_BLOCK;
    const int64_t total = lt_scale_count(g->m, f8i_mode_block_rows(g->a_mode), nkb) + lt_scale_count(g->n, f8i_mode_block_rows(g->b_mode), nkb);
    cudaStream_t s = f8i_stream(ctx);
    F8I_COUNT_LAUNCHES(ctx, 1);
    gemm_block_scales_kernel<<<grid_1d(ctx, total), 256, 0, s>>>(g->a_scale_inv, scale_a, g->m, f8i_mode_block_rows(g->a_mode),
                                                                g->b_scale_inv, scale_b, g->n, f8i_mode_block_rows(g->b_mode), nkb);
    F8I_TRY(f8i_cuda_launch_check(ctx, "gemm_block_scales_kernel"));
    /* C: D itself (accumulate) or the addend c, beta 1: the FP32 sum in the epilogue, D rounded once */
    const f8i_lt_call call = {p->desc, p->lay_a, p->lay_b, p->lay_d, &p->algo, g->a, g->b,
                              g->c ? g->c : g->accumulate ? g->d : NULL, g->d};
    F8I_TRY(f8i_lt_tune(ctx, &call, (size_t)g->m * (size_t)g->n * f8_dtype_size(g->d_dtype), &p->algo, &p->tuned));
    F8I_TRY(f8i_lt_matmul(ctx, &call, "block gemm", g->m, g->n, g->k, refused));
    if (*refused) return F8_OK;
    if (!g->bias || p->bias_fused) return F8_OK;
    F8I_COUNT_LAUNCHES(ctx, 1);
    gemm_block_bias_kernel<<<grid_1d(ctx, g->m * g->n), 256, 0, s>>>(g->d, g->d_dtype, g->bias, g->bias_dtype, g->m,
                                                                     g->n);
    return f8i_cuda_launch_check(ctx, "gemm_block_bias_kernel");
}

/* ------------------------------------------------------------------------ */
/* Entry points                                                              */
/* ------------------------------------------------------------------------ */

f8_status f8i_cuda_gemm_block(f8_ctx *ctx, const f8i_gemm_args *args)
{
    f8i_gemm_args e = *args;
    if (e.c && e.c == e.d) e.c = NULL, e.accumulate = 1; /* D's own addend: the accumulate */
    const f8i_gemm_args *g = &e;
    if (!f8i_dtype_is_fp8(g->a_dtype) || !f8i_dtype_is_fp8(g->b_dtype))
        return f8i_error(ctx, F8_ERR_DTYPE, "block gemm: operands %s x %s, expected e4m3/e5m2",
                         f8_dtype_name(g->a_dtype), f8_dtype_name(g->b_dtype));
    if (f8i_mode_block_rows(g->a_mode) == 0 || f8i_mode_block_rows(g->b_mode) == 0)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "block gemm: scaling modes %d x %d, expected block modes",
                         (int)g->a_mode, (int)g->b_mode);
    f8i_cuda_state *c = f8i_cuda(ctx);
    c->gemm_block_last_path = 0; /* nothing to do: no path */
    if (g->m == 0 || g->n == 0) return F8_OK;
    if (g->k == 0 && !g->bias && g->accumulate) return F8_OK;
    bg_plan *p = NULL;
    F8I_TRY(plan_find(ctx, g, &p));
    if (p->lt && !c->gemm_block_force_fallback) {
        int refused = 0;
        const f8_status st = run_lt(ctx, p, g, &refused);
        if (st != F8_OK || !refused) {
            c->gemm_block_last_path = 2;
            return st;
        }
        plan_release(p); /* NOT_SUPPORTED: this key takes the fallback from now on */
    }
    c->gemm_block_last_path = 1;
    return launch_fallback(ctx, g);
}

void f8i_cuda_gemm_block_force_fallback(f8_ctx *ctx, int force)
{
    if (ctx && ctx->kind == F8_BACKEND_CUDA && ctx->be_state) f8i_cuda(ctx)->gemm_block_force_fallback = force;
}

int f8i_cuda_gemm_block_last_path(const f8_ctx *ctx)
{
    if (!ctx || ctx->kind != F8_BACKEND_CUDA || !ctx->be_state) return 0;
    return f8i_cuda(ctx)->gemm_block_last_path;
}
