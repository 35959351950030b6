/*
 * gemm_rowwise.cu — the row-wise scaled FP8 GEMM (f8i_rowwise_gemm_args,
 * core/rowwise.h): cuBLASLt's outer-vector scale mode where it takes the
 * shape, an own CUDA-core kernel everywhere else, chosen once per plan.
 *
 * Design note.
 *
 * cuBLASLt (cuBLAS 12.9+, sm_90 only: the outer-vector, VEC128 and
 * BLK128x128 modes are Hopper's; Blackwell has the MX modes instead).
 * CUBLASLT_MATMUL_DESC_A/B_SCALE_MODE = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F
 * makes A/B_SCALE_POINTER vectors of M and N FP32 values, and element
 * (i, j) of op(A)·op(B) is multiplied by sA[i]·sB[j]: exactly the
 * contract's P(i, j)·(sa[i]·sb[j]). The row-major mapping is gemm.cu's
 * (cuBLASLt's A' is our b, n x k, op T; its B' our a, op N; D' = D,
 * n x m, ld n), so A' takes b_scale_inv (n values: our b's rows) and B'
 * a_scale_inv (m values), the same swap as the per-tensor pointers, and
 * both vectors are in f8's own layout: no relayout kernel (unlike the
 * block modes' grids). The scale pointers are the call's and are set on
 * the plan's descriptor before each matmul (host-side, cheap); a captured
 * graph keeps the pointers of its capture, as gemm.cu's plans do.
 *
 * Epilogue. The addend (c, or d itself as the accumulate) is beta = 1 with
 * C = c: one FP32 sum in the epilogue, D rounded once. A BF16 bias is fused
 * with CUBLASLT_EPILOGUE_BIAS (the FP8 type table's only bias type); an
 * FP32 bias, or a BF16 one the heuristic will not fuse with these scale
 * modes, is added after the matmul by gemm.cu's bias kernel
 * (f8i_cuda_gemm_bias), one launch more.
 *
 * Eligibility for cuBLASLt: m, n, k > 0, not E5M2 x E5M2, gemm.cu's FP8 TN
 * rule (k % 16 == 0, n % 16 == 0, a, b, d and c 16-byte aligned), both
 * scale vectors 16-byte aligned, and an algorithm from the heuristic.
 * Everything else, and a matmul that answers NOT_SUPPORTED, takes the
 * fallback kernel: the contract's formula on CUDA cores, FP32 sums of
 * decoded codes in k order, for odd shapes (the CPU tests' 17 x 33 x 129)
 * and the E5M2 x E5M2 pair. If cuBLASLt on some build refuses the outer-
 * vector mode altogether, every plan lands here: correct, slow; the
 * cheapest exact fast alternative is then a per-tensor FP8 matmul with unit
 * scales into an FP32 D and one epilogue kernel applying sa[i]·sb[j], C and
 * bias (the products and their FP32 sum are the same; only the scaling
 * moves out of the tensor-core epilogue).
 */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_state.cuh"
#include "gemm_lt.cuh"
#include "plan_cache.cuh"
#include "core/rowwise.h"

#define RG_TILE 16 /* fallback: a 16x16 block computes a 16x16 tile of D, K in steps of 16 */

/* A plan's key: f8i_gemm_key (gemm_lt.cuh), ldd = n, types = a | b << 4 |
 * d << 8 | bias dtype << 12 | has bias << 16 | has c << 17 | c == d << 18 |
 * split << 19, aligns of a, b, d, c, sa, sb. */
typedef f8i_gemm_key rg_key;

struct f8i_rowwise_plan {
    rg_key key;
    int lt;                        /* 1: cuBLASLt, 0: the fallback kernel */
    int fused_bias;                /* the bias rides CUBLASLT_EPILOGUE_BIAS */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t lay_a;  /* cuBLASLt's A' = our b */
    cublasLtMatrixLayout_t lay_b;  /* cuBLASLt's B' = our a */
    cublasLtMatrixLayout_t lay_d;  /* C' = D' */
    cublasLtMatmulAlgo_t algo;
    int tuned;                     /* f8_ctx_set_gemm_tune has chosen algo */
};

/* ------------------------------------------------------------------------ */
/* Kernel                                                                    */
/* ------------------------------------------------------------------------ */

/* D = P·(sa[i]·sb[j]) (+ C) (+ bias) on CUDA cores.
 * Grid: x over 16-column tiles of D, y over 16-row tiles (grid-stride).
 * Block: 16x16; thread (tx, ty) owns D(i0 + ty, j0 + tx) and loads one code
 * of each operand's 16x16 K-slice into shared memory per step. */
template <int AE5, int BE5>
static __global__ void __launch_bounds__(RG_TILE *RG_TILE) gemm_rowwise_fallback_kernel(f8i_rowwise_gemm_args g)
{
    __shared__ float sa_tile[RG_TILE][RG_TILE + 1]; /* [row of A][k] */
    __shared__ float sb_tile[RG_TILE][RG_TILE + 1]; /* [row of B][k] */
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (int64_t i0 = (int64_t)blockIdx.y * RG_TILE; i0 < g.m; i0 += (int64_t)gridDim.y * RG_TILE)
        for (int64_t j0 = (int64_t)blockIdx.x * RG_TILE; j0 < g.n; j0 += (int64_t)gridDim.x * RG_TILE) {
            const int64_t i = i0 + ty, j = j0 + tx;
            float acc = 0.0f;
            for (int64_t k0 = 0; k0 < g.k; k0 += RG_TILE) {
                const int64_t kk = k0 + tx, ra = i0 + ty, rb = j0 + ty;
                sa_tile[ty][tx] = ra < g.m && kk < g.k ? f8i_fp8_decode(g.a[ra * g.k + kk], AE5) : 0.0f;
                sb_tile[ty][tx] = rb < g.n && kk < g.k ? f8i_fp8_decode(g.b[rb * g.k + kk], BE5) : 0.0f;
                __syncthreads();
#pragma unroll
                for (int t = 0; t < RG_TILE; t++) acc = __fmaf_rn(sa_tile[ty][t], sb_tile[tx][t], acc);
                __syncthreads();
            }
            if (i >= g.m || j >= g.n) continue;
            float v = g.k ? acc * (g.a_scale_inv[i] * g.b_scale_inv[j]) : 0.0f; /* k = 0: no scales read */
            if (g.c) v = v + f8i_lt_load(g.c, i * g.n + j, g.d_dtype);
            if (g.bias) v = v + f8i_lt_load(g.bias, j, g.bias_dtype);
            f8i_lt_store(g.d, i * g.n + j, g.d_dtype, v);
        }
}

static f8_status launch_fallback(f8_ctx *ctx, const f8i_rowwise_gemm_args *g)
{
    F8I_COUNT_LAUNCHES(ctx, 1);
    F8I_FB_LAUNCH(gemm_rowwise_fallback_kernel, g->a_dtype, g->b_dtype, f8i_fb_grid(g->m, g->n, RG_TILE),
                  dim3(RG_TILE, RG_TILE), f8i_stream(ctx), *g);
    return f8i_cuda_launch_check(ctx, "gemm_rowwise_fallback_kernel");
}

/* ------------------------------------------------------------------------ */
/* Plans                                                                     */
/* ------------------------------------------------------------------------ */

static rg_key make_key(const f8i_rowwise_gemm_args *g)
{
    const uint32_t types = (uint32_t)g->a_dtype | (uint32_t)g->b_dtype << 4 | (uint32_t)g->d_dtype << 8 |
                           (uint32_t)(g->bias ? g->bias_dtype : 0) << 12 | (uint32_t)(g->bias != NULL) << 16 |
                           (uint32_t)(g->c != NULL) << 17 | (uint32_t)(g->c != NULL && g->c == g->d) << 18 |
                           (uint32_t)(g->split_accum != 0) << 19;
    const void *const ptrs[6] = {g->a, g->b, g->d, g->c, g->a_scale_inv, g->b_scale_inv};
    return f8i_gemm_key_of(g->m, g->n, g->k, g->n, types, f8i_lt_aligns(ptrs, 6));
}

static int lt_eligible(const f8i_rowwise_gemm_args *g)
{
    if (g->m == 0 || g->n == 0 || g->k == 0) return 0;
    if (g->a_dtype == F8_DTYPE_E5M2 && g->b_dtype == F8_DTYPE_E5M2) return 0;
    if (g->k % 16 != 0 || g->n % 16 != 0) return 0;
    if (f8i_lt_align_log2(g->a) < 4 || f8i_lt_align_log2(g->b) < 4 || f8i_lt_align_log2(g->d) < 4) return 0;
    if (g->c && f8i_lt_align_log2(g->c) < 4) return 0;
    return f8i_lt_align_log2(g->a_scale_inv) >= 4 && f8i_lt_align_log2(g->b_scale_inv) >= 4;
}

/* One attribute of desc, unless an earlier one failed (*st). */
static void set_attr(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void *value, size_t bytes,
                     cublasStatus_t *st)
{
    if (*st == CUBLAS_STATUS_SUCCESS) *st = cublasLtMatmulDescSetAttribute(desc, attr, value, bytes);
}

/* Descriptor for g, the bias fused or not; scale and bias pointers are g's. */
static cublasStatus_t desc_build(f8i_rowwise_plan *p, const f8i_rowwise_gemm_args *g, int fuse_bias)
{
    cublasStatus_t st = cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
    const int8_t fast = g->split_accum ? 0 : 1;
    const int32_t vec = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, bias_type = CUDA_R_16BF;
    const cublasLtEpilogue_t epi = fuse_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof op_t, &st);
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof op_n, &st);
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast, &st);
    /* A' = our b: its scale vector has n entries, B' = our a: m */
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &vec, sizeof vec, &st);
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &vec, sizeof vec, &st);
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g->b_scale_inv, sizeof g->b_scale_inv, &st);
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g->a_scale_inv, sizeof g->a_scale_inv, &st);
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi, &st);
    if (fuse_bias) {
        set_attr(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias, &st);
        set_attr(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type, &st);
    }
    return st;
}

/* Layouts, descriptor and algorithm, or p->lt = 0. A refusal while
 * describing the matmul (a cuBLASLt without the mode: INVALID_VALUE) is an
 * answer: the fallback. */
static f8_status plan_build(f8_ctx *ctx, const f8i_rowwise_gemm_args *g, f8i_rowwise_plan *p)
{
    void *handle = NULL, *ws = NULL;
    size_t ws_bytes = 0;
    f8_status fs = f8i_cuda_gemm_lt(ctx, &handle, &ws, &ws_bytes);
    if (fs != F8_OK) return fs;
    const uint64_t m = (uint64_t)g->m, n = (uint64_t)g->n, k = (uint64_t)g->k;
    cublasStatus_t st = cublasLtMatrixLayoutCreate(&p->lay_a, f8i_lt_type(g->b_dtype), k, n, g->k);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&p->lay_b, f8i_lt_type(g->a_dtype), k, m, g->k);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&p->lay_d, f8i_lt_type(g->d_dtype), n, m, g->n);
    uint32_t al[4];
    f8i_lt_query_aligns(g->a, g->b, g->c, g->d, al);
    const uint32_t al_a = al[0], al_b = al[1], al_c = al[2], al_d = al[3];
    /* a BF16 bias fused if the heuristic takes it, else the bias kernel after */
    for (int fuse = g->bias && g->bias_dtype == F8_DTYPE_BF16; fuse >= 0 && st == CUBLAS_STATUS_SUCCESS; fuse--) {
        if (p->desc) cublasLtMatmulDescDestroy(p->desc);
        p->desc = NULL;
        st = desc_build(p, g, fuse);
        int found = 0;
        if (st == CUBLAS_STATUS_SUCCESS)
            st = f8i_lt_heuristic((cublasLtHandle_t)handle, p->desc, p->lay_a, p->lay_b, p->lay_d, ws_bytes, al_a, al_b,
                                  al_c, al_d, &p->algo, &found);
        else
            st = CUBLAS_STATUS_SUCCESS, fuse = 0; /* the mode refused: no second try */
        if (st != CUBLAS_STATUS_SUCCESS) {
            f8i_lt_release(&p->desc, &p->lay_a, &p->lay_b, &p->lay_d);
            return f8i_error(ctx, F8_ERR_CUBLAS, "rowwise gemm %lldx%lldx%lld: cublasLt heuristic: %s",
                             (long long)g->m, (long long)g->n, (long long)g->k, cublasLtGetStatusName(st));
        }
        if (found) {
            p->lt = 1;
            p->fused_bias = fuse;
            return F8_OK;
        }
    }
    f8i_lt_release(&p->desc, &p->lay_a, &p->lay_b, &p->lay_d);
    return F8_OK;
}

/* p (zeroed) for g: its key, and cuBLASLt's plan unless fallback_only or
 * the shape is not eligible. */
static f8_status plan_fill(f8_ctx *ctx, const f8i_rowwise_gemm_args *g, int fallback_only, f8i_rowwise_plan *p)
{
    p->key = make_key(g);
    return !fallback_only && lt_eligible(g) ? plan_build(ctx, g, p) : F8_OK;
}

f8_status f8i_cuda_rowwise_plan_create(f8_ctx *ctx, const f8i_rowwise_gemm_args *g, int fallback_only,
                                       f8i_rowwise_plan **plan)
{
    *plan = NULL;
    f8i_rowwise_plan *p = (f8i_rowwise_plan *)calloc(1, sizeof *p);
    if (!p) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "rowwise gemm: no host memory for a plan");
    const f8_status st = plan_fill(ctx, g, fallback_only, p);
    if (st != F8_OK) {
        free(p);
        return st;
    }
    *plan = p;
    return F8_OK;
}

/* The plan of a call without a caller's plan: the ctx's plan cache
 * (plan_cache.cuh), built at capture too (host memory and descriptors). */
static f8_status kind_build(f8_ctx *ctx, void *body, const void *arg, size_t *buf_bytes)
{
    (void)buf_bytes;
    return plan_fill(ctx, (const f8i_rowwise_gemm_args *)arg, 0, (f8i_rowwise_plan *)body);
}

static void kind_release(f8_ctx *ctx, void *body)
{
    f8i_rowwise_plan *p = (f8i_rowwise_plan *)body;
    (void)ctx;
    f8i_lt_release(&p->desc, &p->lay_a, &p->lay_b, &p->lay_d);
}

static void kind_describe(const void *arg, char *out, size_t size)
{
    const f8i_rowwise_gemm_args *g = (const f8i_rowwise_gemm_args *)arg;
    snprintf(out, size, "m %lld, n %lld, k %lld", (long long)g->m, (long long)g->n, (long long)g->k);
}

static const f8i_plan_kind rowwise_kind = {"rowwise gemm", sizeof(f8i_rowwise_plan), 1, kind_build, kind_release,
                                           kind_describe};

void f8i_cuda_rowwise_plan_destroy(f8i_rowwise_plan *p)
{
    if (!p) return;
    f8i_lt_release(&p->desc, &p->lay_a, &p->lay_b, &p->lay_d);
    free(p);
}

/* The matmul of a cuBLASLt plan, then the bias it did not fuse. NOT_SUPPORTED
 * from the matmul (nothing enqueued) is reported in *refused. */
static f8_status run_lt(f8_ctx *ctx, f8i_rowwise_plan *p, const f8i_rowwise_gemm_args *g, int *refused)
{
    *refused = 0;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g->b_scale_inv, sizeof g->b_scale_inv, &st);
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g->a_scale_inv, sizeof g->a_scale_inv, &st);
    if (p->fused_bias) set_attr(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias, &st);
    if (st != CUBLAS_STATUS_SUCCESS)
        return f8i_error(ctx, F8_ERR_CUBLAS, "rowwise gemm %lldx%lldx%lld: setting the scale and bias pointers: %s",
                         (long long)g->m, (long long)g->n, (long long)g->k, cublasLtGetStatusName(st));
    const f8i_lt_call call = {p->desc, p->lay_a, p->lay_b, p->lay_d, &p->algo, g->a, g->b, g->c, g->d};
    F8I_TRY(f8i_lt_tune(ctx, &call, (size_t)g->m * (size_t)g->n * f8_dtype_size(g->d_dtype), &p->algo, &p->tuned));
    F8I_TRY(f8i_lt_matmul(ctx, &call, "rowwise gemm", g->m, g->n, g->k, refused));
    if (*refused) return F8_OK;
    if (!g->bias || p->fused_bias) return F8_OK;
    f8i_gemm_args b;
    memset(&b, 0, sizeof b);
    b.m = g->m;
    b.n = g->n;
    b.d = g->d;
    b.d_dtype = g->d_dtype;
    b.bias = g->bias;
    b.bias_dtype = g->bias_dtype;
    return f8i_cuda_gemm_bias(ctx, &b, 0);
}

/* ------------------------------------------------------------------------ */
/* Entry point                                                               */
/* ------------------------------------------------------------------------ */

/* The caller ran f8i_rowwise_gemm_check. */
f8_status f8i_cuda_gemm_rowwise(f8_ctx *ctx, const f8i_rowwise_gemm_args *g, f8i_rowwise_plan *plan, int *last_path)
{
    if (last_path) *last_path = 0;
    if (g->m == 0 || g->n == 0) return F8_OK;
    if (!plan) {
        const rg_key key = make_key(g);
        f8i_plan *cached = NULL;
        F8I_TRY(f8i_plan_get(ctx, &rowwise_kind, &key, sizeof key, g, &cached));
        plan = (f8i_rowwise_plan *)cached->body;
    } else {
        const rg_key key = make_key(g);
        if (memcmp(&key, &plan->key, sizeof key) != 0)
            return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT,
                             "rowwise gemm %lldx%lldx%lld: the plan was built for another shape, dtype or alignment",
                             (long long)g->m, (long long)g->n, (long long)g->k);
    }
    f8_status st = F8_OK;
    int refused = 1;
    if (plan->lt) {
        st = run_lt(ctx, plan, g, &refused);
        if (st == F8_OK && refused) f8i_lt_release(&plan->desc, &plan->lay_a, &plan->lay_b, &plan->lay_d), plan->lt = 0;
        if (st == F8_OK && !refused && last_path) *last_path = 2;
    }
    if (st == F8_OK && refused) {
        st = launch_fallback(ctx, g);
        if (st == F8_OK && last_path) *last_path = 1;
    }
    return st;
}

/* ------------------------------------------------------------------------ */
/* The backend table's GEMM op for mode ROW (gemm.cu dispatches here)        */
/* ------------------------------------------------------------------------ */

f8_status f8i_cuda_gemm_rowwise_op(f8_ctx *ctx, const f8i_gemm_args *args)
{
    if (args->a_mode != F8I_SCALING_ROW || args->b_mode != F8I_SCALING_ROW || args->a_trans || args->b_trans)
        return f8i_error(ctx, F8_ERR_INVALID_ARGUMENT, "gemm: a row-wise operand needs a row-wise partner, TN");
    const f8i_rowwise_gemm_args g = f8i_rowwise_gemm_from(args);
    F8I_TRY(f8i_rowwise_gemm_check(ctx, &g));
    /* no caller plan: the ctx's plan cache holds one per key (rowwise_kind) */
    return f8i_cuda_gemm_rowwise(ctx, &g, NULL, NULL);
}
