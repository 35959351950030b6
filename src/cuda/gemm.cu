/*
 * gemm.cu — the backend GEMM (f8i_gemm_args, backend.h) on cuBLASLt, with one
 * cached plan per shape, zero-padded copies for odd FP8 shapes, and a plain
 * CUDA kernel for what cuBLASLt cannot take.
 *
 * Design note.
 *
 * Row-major contract, column-major cuBLASLt. cuBLASLt computes
 * D' = alpha·op(A')·op(B') + beta·C' on column-major matrices. Our row-major
 * D[m, n] is, byte for byte, the column-major D' = Dᵀ with n rows, m columns,
 * ld n. From D(i, j) = Σ_k A(i, k)·B(j, k):
 *     D'(j, i) = Σ_k B(j, k)·A(i, k),  i.e.  D'[n×m] = B[n×k] · Aᵀ[k×m].
 * So cuBLASLt's A' is our b, its B' is our a, and (M, N, K) = (n, m, k):
 *   A' = b   b_trans 0: b is [n, k] = column-major k×n, ld k; op(A') = T
 *            b_trans 1: b is [k, n] = column-major n×k, ld n; op(A') = N
 *   B' = a   a_trans 0: a is [m, k] = column-major k×m, ld k; op(B') = N
 *            a_trans 1: a is [k, m] = column-major m×k, ld m; op(B') = T
 *   C' = D' = d: column-major n×m, ld n (one layout for both: in place).
 * A_SCALE_POINTER therefore gets b_scale_inv and B_SCALE_POINTER a_scale_inv.
 * bias[n] is per column of D = per row of D', which is what
 * CUBLASLT_EPILOGUE_BIAS broadcasts. Our FP8 "TN" (a_trans = b_trans = 0, both
 * K-contiguous) is exactly cuBLASLt's FP8 "TN" (op(A') = T, op(B') = N).
 *
 * Numerics. CUBLAS_COMPUTE_32F, scale type FP32, for every input type. For
 * FP32 inputs that means true FP32 products (no TF32: COMPUTE_32F_FAST_TF32 is
 * never asked for; we want FP32 accuracy from FP32 operands). FP8:
 * D = sA·sB·ΣAB with the operands' own scale_inv device pointers, alpha = 1,
 * FAST_ACCUM = !split_accum. accumulate is beta = 1 with C = D.
 *
 * Addend (f8i_gemm_args.c, the residual of f8_module_forward_add). c == d
 * is the accumulate. A distinct c is beta = 1 with C' = c under D's layout
 * (cuBLASLt allows C != D with ldc == ldd and one type): the sum is FP32 in
 * the epilogue and D is rounded once. The plan key tells it apart from the
 * accumulate (a flag and c's alignment class, which the heuristic reads as
 * MIN_ALIGNMENT_C_BYTES). Wherever cuBLASLt does not run the call as it is
 * (k == 0, a padded odd shape, the fallback kernel, a NOT_SUPPORTED matmul)
 * C is first copied into D (one cudaMemcpyAsync, exact) and the call runs
 * as an accumulate: the same formula with the same single rounding, for one
 * extra pass over D on those slow paths only, and no addend logic in
 * run_padded, the slice or the fallback kernel.
 *
 * FP8 eligibility (cuBLAS docs, cublasLtMatmul, "To use tensor- or
 * block-scaled FP8 kernels": TN only on sm_90, COMPUTE_32F, scale 32F, and
 * "all matrix dimensions must meet the optimal requirements listed in Tensor
 * Core Usage", §2.1.11: (op_A == N ? M : K)·sizeA, (op_B == N ? K : N)·sizeB,
 * M·sizeC, lda·sizeA, ldb·sizeB, ldc·sizeC all % 16 == 0 and A, B, C 16-byte
 * aligned). With TN, M = n, lda = ldb = k, ldc = n, that is:
 *     k % 16 == 0,  n·sizeof(D) % 16 == 0,  a, b, d 16-byte aligned;
 * and the FP8 heuristic is stricter than that page: its log says "M must be
 * divisible by 16" (so n % 16 == 0 whatever D's size; PyTorch's _scaled_mm
 * asks the same of its output columns), which is the rule gemm.cu keeps.
 * m is free. The same page's FP8 type table allows E4M3×E4M3, E4M3×E5M2 and
 * E5M2×E4M3 (never E5M2×E5M2) with C = D = BF16 or FP32, bias BF16 for both.
 * The non-FP8 table allows BF16×BF16 -> BF16 (bias BF16) or FP32 (bias FP32),
 * and FP32×FP32 -> FP32 only (bias FP32).
 *
 * Bias. Fused through CUBLASLT_EPILOGUE_BIAS when the table allows the
 * caller's bias dtype (FP8: BF16; otherwise: bias dtype == D dtype). Otherwise
 * the GEMM runs without epilogue and gemm_bias_kernel adds the bias after it on
 * the same stream: one extra launch, but the bias keeps its full precision
 * (converting an FP32 bias to BF16 would need a kernel per call anyway and
 * would round it). For a BF16 D this rounds twice (GEMM, then + bias); a
 * module that wants the fused path passes a BF16 bias.
 *
 * Odd FP8 shapes (issue 16). An FP8 TN shape outside the rule (k % 16:
 * fprop's in, dgrad's out, wgrad's T; n % 16: the output features) runs on
 * zero-padded copies in a workspace its caller lays out (f8i_gemm_args'
 * workspace, sized by backend.h's f8i_gemm_workspace_bytes, 0 for aligned
 * shapes; run_padded): gemm_pad_kernel copies A to [m, k16] and B to
 * [n16, k16] (zeros in the new rows and columns, so every sum gains exact
 * zeros and nothing else) and cuBLASLt runs the padded shape under an
 * ordinary plan of its own. An odd n needs D's help too, as cuBLASLt cannot
 * write M % 16 != 0. Where D's rows are 16-byte aligned anyway (n·sizeof(D)
 * % 16 == 0: n = 4104, say) the GEMM is split: cuBLASLt writes columns
 * [0, n & ~15) in place (leading dimension n, with the accumulate and the
 * bias) and only the last < 16 columns go through a 16-wide padded D and
 * gemm_slice_kernel. Otherwise (odd n) the whole D is padded [m, n16] and
 * sliced back, the slice adding D (accumulate) and a bias the epilogue
 * could not take (a BF16 bias is copied padded and fused: one rounding, as
 * unpadded). Either way, when k is inside the rule B is not copied: the
 * main GEMM reads its first n & ~15 rows in place and a 16-row tail GEMM
 * the copied rest. A shape whose only fault is D asks the heuristic for itself
 * first, in case a cuBLASLt takes it. Everything runs on
 * the stream from pointers the caller laid out: graphs capture it.
 *
 * Why this design, by bytes moved (FP8 Linear fwd+bwd, BF16 x/y/dy/dx and
 * parameters, as bench_linear runs it, at ~4 TB/s; the next aligned shape's
 * time in brackets). Extra traffic of the padded path:
 *   T 4096, K = N = 4104 [~0.38 ms]: operands X8, W8 (fprop), G8, W8ᵀ
 *     (dgrad), 16.8 MB each read + written = 134 MB; D splits (tails of 8
 *     columns, < 1 MB): ~34 us, ~1.09x.
 *   T 4096, K = N = 4095 [~0.38 ms]: the same 134 MB, and D cannot split: y
 *     and dx sliced (+67 MB each: read the padded D, write D), dW sliced
 *     with the accumulate (+135 MB: FP32 pad read, dW read and written):
 *     403 MB, ~0.10 ms, ~1.27x.
 *   T 8192, K 768, N 50257 [~1.98 ms]: y sliced (+1.65 GB), dgrad's G8
 *     (+824 MB) and W8ᵀ (+77 MB): 2.55 GB, ~0.64 ms, ~1.32x.
 * That is every pass at copy bandwidth, which the pad and the slice are
 * written for: whatever byte offset a row of the unpadded side starts at,
 * a thread moves whole aligned 16-byte chunks (the slice: D's chunks,
 * stored whole, the padded D and the bias read by aligned 16-byte loads
 * shifted into place; only a row's two ragged ends element by element;
 * gemm_kernels.cu). The first slice, one element per thread with 2- or
 * 4-byte accesses, ran at about a third of copy bandwidth, the bulk of what
 * kept 4095 and 50257 near 1.9x of their aligned shapes (bench/RESULTS.md,
 * "Odd FP8 shapes").
 * Against the slow kernel (47-75x) that is the bulk of the issue; what is
 * left is mostly odd n's slice, which no padding of the operands removes: y,
 * dx and dW are the caller's and the parameters' tensors with leading
 * dimension n, which cuBLASLt cannot write for odd n (only a GEMM with its
 * own epilogue, or a heuristic that takes odd n, writes them in place; even
 * an L2-sized chunking of the slice leaves its D write unoverlapped with the
 * GEMM). The alternative of padded leading dimensions written by the
 * producers (the casts, norms and activations write operands
 * [rows, round16(cols)] with zeros; f8i_gemm_args gains lda/ldb) saves the
 * operand copies only (134 MB of 4095's 403; 0.9 GB of the LM head's
 * 2.55 GB) and touches every kernel that writes an FP8 operand, the weight
 * workspace (a public qtensor), the transposes and the CPU oracle: the next
 * step if measurement says the operand copies matter, not one to make
 * without a GPU to test it on. Caching the weight's padded copies per
 * workspace refresh saves W8's and W8ᵀ's copies on NOT_FIRST microbatches
 * only (bench_linear casts every forward): it waits for the same numbers.
 *
 * Fallback. What cuBLASLt cannot take even padded (E5M2×E5M2, FP8 not TN,
 * FP32×FP32 -> BF16), an odd FP8 shape without a large enough workspace (or
 * an operand pointer not 16-byte aligned that the formula did not count),
 * no algorithm from the heuristic, or NOT_SUPPORTED from the matmul, runs
 * gemm_fallback_kernel: a tiled shared-memory FP32 GEMM that decodes FP8
 * codes exactly, honours the trans flags, and does scale, bias and
 * accumulate in its epilogue (alpha·ΣAB (+ D) (+ bias), cuBLASLt's order).
 * It is slow (no tensor cores) but exact in its inputs: legal shapes are
 * never an error. m or n == 0: nothing; k == 0: D = (accumulate ? D : 0) +
 * (bias or 0), by gemm_bias_kernel or a memset, no cuBLASLt.
 *
 * Plans. A plan (matmul descriptor, three layouts since C = D, the algorithm;
 * or "pad", or "use the fallback") is made once per distinct key and kept in
 * the ctx's plan cache (plan_cache.cuh; built at capture too: host memory and
 * descriptors only). The key is (m, n, k, D's leading dimension (n, but for
 * the split above), a/b/d dtypes, bias dtype or none, a_trans, b_trans,
 * accumulate, split_accum for FP8, and the alignment class — the largest power
 * of two up to 256 dividing the address — of a, b, d and bias), because the
 * heuristic's choice depends on alignment (MIN_ALIGNMENT_*_BYTES, and the bias
 * pointer's value). After the first call of a key, a call builds the key,
 * finds the plan, re-sets the scale and bias pointer attributes only when they
 * differ from the ones the descriptor holds (cheap host calls), and calls
 * cublasLtMatmul on the ctx stream with the cuBLASLt part of the GEMM op's own
 * workspace (F8I_GEMM_OP_WORKSPACE_BYTES). Nothing is created on a hit.
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

#define GEMM_WORKSPACE_BYTES F8I_GEMM_LT_WORKSPACE_BYTES /* cuBLASLt's part of the op's workspace */

/* ------------------------------------------------------------------------ */
/* Types                                                                     */
/* ------------------------------------------------------------------------ */

/* A plan's key: f8i_gemm_key (gemm_lt.cuh) with ldd D's leading dimension
 * (n, or wider: run_padded's split), types = a | b << 4 | d << 8 |
 * (bias ? dtype + 1 : 0) << 12 | flags << 16, aligns of a, b, d, bias, c. */
typedef f8i_gemm_key gemm_key;

/* PLAN_PAD: an FP8 TN shape outside the rule, run on padded copies in the
 * caller's workspace (run_padded), whose own plan is an ordinary PLAN_LT. */
typedef enum plan_mode { PLAN_LT = 0, PLAN_FALLBACK = 1, PLAN_PAD = 2 } plan_mode;
typedef enum bias_mode { BIAS_NONE = 0, BIAS_FUSED = 1, BIAS_AFTER = 2 } bias_mode;

typedef struct gemm_plan { /* a plan cache body (plan_cache.cuh); its key is a gemm_key */
    plan_mode mode;
    plan_mode otherwise;            /* what mode becomes if cublasLtMatmul says NOT_SUPPORTED */
    bias_mode bias;                 /* PLAN_LT only; the fallback does bias itself */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t lay_a;   /* cuBLASLt's A' = our b */
    cublasLtMatrixLayout_t lay_b;   /* cuBLASLt's B' = our a */
    cublasLtMatrixLayout_t lay_d;   /* C' = D' */
    cublasLtMatmulAlgo_t algo;
    const void *set_a_scale;        /* pointer attributes the descriptor holds now */
    const void *set_b_scale;
    const void *set_bias;
    int tuned;                      /* f8_ctx_set_gemm_tune has chosen algo (PLAN_LT) */
} gemm_plan;

/* The GEMM op's state: the cuBLASLt handle and the op's one workspace
 * (F8I_GEMM_OP_WORKSPACE_BYTES, cuda_state.cuh), carved into cuBLASLt's
 * scratch and the block path's relaid scale grids. Its plans are in the
 * ctx's plan cache. */
struct f8i_gemm_cache {
    cublasLtHandle_t lt;
    void *workspace;    /* (F8I_GEMM_OP_WORKSPACE_BYTES) device */
};

/* ------------------------------------------------------------------------ */
/* Plans                                                                     */
/* ------------------------------------------------------------------------ */

static f8_status lt_error(f8_ctx *ctx, cublasStatus_t st, const char *what, const f8i_gemm_args *g)
{
    return f8i_error(ctx, F8_ERR_CUBLAS, "gemm %s (m %lld, n %lld, k %lld, %s x %s -> %s): %s", what, (long long)g->m,
                     (long long)g->n, (long long)g->k, f8_dtype_name(g->a_dtype), f8_dtype_name(g->b_dtype),
                     f8_dtype_name(g->d_dtype), cublasLtGetStatusName(st));
}

static size_t dtype_bytes(f8_dtype t) { return t == F8_DTYPE_FP32 ? 4 : t == F8_DTYPE_BF16 ? 2 : 1; }

static gemm_key make_key(const f8i_gemm_args *g, int64_t ldd)
{
    const int fp8 = f8i_dtype_is_fp8(g->a_dtype);
    const uint32_t bias = g->bias ? (uint32_t)g->bias_dtype + 1u : 0u;
    const uint32_t flags = (g->a_trans ? 1u : 0u) | (g->b_trans ? 2u : 0u) | (g->accumulate || g->c ? 4u : 0u) |
                           (fp8 && g->split_accum ? 8u : 0u) | (g->c ? 16u : 0u); /* 16: C is the addend, not D */
    const void *const ptrs[5] = {g->a, g->b, g->d, g->bias, g->c};
    return f8i_gemm_key_of(g->m, g->n, g->k, ldd,
                           (uint32_t)g->a_dtype | (uint32_t)g->b_dtype << 4 | (uint32_t)g->d_dtype << 8 | bias << 12 |
                               flags << 16,
                           f8i_lt_aligns(ptrs, 5));
}

/* Can cuBLASLt take these operands at all (the type tables and the FP8 rule
 * of the design note)? The heuristic is the second, final judge. */
static int lt_eligible(const f8i_gemm_args *g)
{
    if (f8i_dtype_is_fp8(g->a_dtype)) {
        if (g->a_dtype == F8_DTYPE_E5M2 && g->b_dtype == F8_DTYPE_E5M2) return 0;
        if (g->a_trans || g->b_trans) return 0;
        if (g->k % 16 != 0 || g->n % 16 != 0) return 0;
        if (g->c && f8i_lt_align_log2(g->c) < 4) return 0; /* C, like D, 16-byte aligned */
        return f8i_lt_align_log2(g->a) >= 4 && f8i_lt_align_log2(g->b) >= 4 && f8i_lt_align_log2(g->d) >= 4;
    }
    if (g->a_dtype == F8_DTYPE_FP32 && g->d_dtype != F8_DTYPE_FP32) return 0;
    return 1;
}

/* An FP8 GEMM cuBLASLt could take once padded: TN and a type pair it has. */
static int pad_eligible(const f8i_gemm_args *g)
{
    if (!f8i_dtype_is_fp8(g->a_dtype) || g->a_trans || g->b_trans) return 0;
    return !(g->a_dtype == F8_DTYPE_E5M2 && g->b_dtype == F8_DTYPE_E5M2);
}

/* Called for a shape outside the rule: is D its only fault (n % 16 or d's
 * alignment)? Then cuBLASLt's heuristic is asked for it as it is before D is
 * padded: if it takes it, no slice pass is needed. */
static int only_d_unaligned(const f8i_gemm_args *g)
{
    return pad_eligible(g) && g->k % 16 == 0 && f8i_lt_align_log2(g->a) >= 4 && f8i_lt_align_log2(g->b) >= 4;
}

static void plan_release(gemm_plan *p)
{
    f8i_lt_release(&p->desc, &p->lay_a, &p->lay_b, &p->lay_d);
}

/* A matmul descriptor for g, with or without the bias epilogue. The scale and
 * bias pointers are this call's: the heuristic reads the bias pointer's value
 * for its alignment. */
static cublasStatus_t desc_create(gemm_plan *p, const f8i_gemm_args *g, int fuse_bias)
{
    const cublasOperation_t op_a = g->b_trans ? CUBLAS_OP_N : CUBLAS_OP_T;
    const cublasOperation_t op_b = g->a_trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasLtEpilogue_t epi = fuse_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    cublasLtMatmulDesc_t d = NULL;
    cublasStatus_t st = cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    p->desc = d;
    st = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    if (st == CUBLAS_STATUS_SUCCESS && f8i_dtype_is_fp8(g->a_dtype)) {
        const int8_t fast = g->split_accum ? 0 : 1;
        st = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
        /* A' = b, B' = a: the scale pointers swap with the operands. */
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g->b_scale_inv,
                                                sizeof g->b_scale_inv);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g->a_scale_inv,
                                                sizeof g->a_scale_inv);
        p->set_a_scale = g->b_scale_inv;
        p->set_b_scale = g->a_scale_inv;
    }
    if (st == CUBLAS_STATUS_SUCCESS && fuse_bias) {
        st = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias);
        p->set_bias = g->bias;
        if (st == CUBLAS_STATUS_SUCCESS && f8i_dtype_is_fp8(g->a_dtype)) {
            const int32_t bt = CUDA_R_16BF; /* the only FP8 bias type for BF16 or FP32 D */
            st = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
        }
    }
    return st;
}

/* Ask the heuristic for one algorithm for p's descriptor and layouts.
 * *found = 0 (and CUBLAS_STATUS_SUCCESS) when cuBLASLt has none for it. */
static cublasStatus_t plan_query(f8i_gemm_cache *c, gemm_plan *p, const f8i_gemm_args *g, int *found)
{
    uint32_t al[4];
    f8i_lt_query_aligns(g->a, g->b, g->c, g->d, al);
    return f8i_lt_heuristic(c->lt, p->desc, p->lay_a, p->lay_b, p->lay_d, GEMM_WORKSPACE_BYTES, al[0], al[1], al[2],
                            al[3], &p->algo, found);
}

/* Fill *p for the key of g: layouts, descriptor and algorithm, or the
 * fallback. With a bias the table allows, the fused epilogue is tried first;
 * if the heuristic has nothing for it, a fresh descriptor without epilogue is
 * tried (bias added after), then the fallback. */
static f8_status plan_build(f8_ctx *ctx, f8i_gemm_cache *c, const f8i_gemm_args *g, int64_t ldd, gemm_plan *p)
{
    /* what a shape cuBLASLt will not take runs: padded if it can be, else the kernel */
    const plan_mode none = pad_eligible(g) ? PLAN_PAD : PLAN_FALLBACK;
    p->mode = none;
    p->otherwise = none;
    p->bias = BIAS_NONE;
    if (!lt_eligible(g) && !only_d_unaligned(g)) return F8_OK;

    /* A' = b, B' = a, D' = d: see the mapping in the design note. */
    const char *what = "cublasLtMatrixLayoutCreate";
    const uint64_t m = (uint64_t)g->m, n = (uint64_t)g->n, k = (uint64_t)g->k;
    cublasStatus_t st = g->b_trans ? cublasLtMatrixLayoutCreate(&p->lay_a, f8i_lt_type(g->b_dtype), n, k, g->n)
                                   : cublasLtMatrixLayoutCreate(&p->lay_a, f8i_lt_type(g->b_dtype), k, n, g->k);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = g->a_trans ? cublasLtMatrixLayoutCreate(&p->lay_b, f8i_lt_type(g->a_dtype), m, k, g->m)
                        : cublasLtMatrixLayoutCreate(&p->lay_b, f8i_lt_type(g->a_dtype), k, m, g->k);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&p->lay_d, f8i_lt_type(g->d_dtype), n, m, ldd);

    const int fusable =
        g->bias && (f8i_dtype_is_fp8(g->a_dtype) ? g->bias_dtype == F8_DTYPE_BF16 : g->bias_dtype == g->d_dtype);
    int found = 0;
    for (int fuse = fusable; fuse >= 0 && st == CUBLAS_STATUS_SUCCESS && !found; fuse--) {
        if (p->desc) cublasLtMatmulDescDestroy(p->desc);
        p->desc = NULL;
        what = "cublasLtMatmulDescCreate/SetAttribute";
        st = desc_create(p, g, fuse);
        if (st != CUBLAS_STATUS_SUCCESS) break;
        what = "cublasLtMatmulAlgoGetHeuristic";
        st = plan_query(c, p, g, &found);
        p->bias = fuse ? BIAS_FUSED : g->bias ? BIAS_AFTER : BIAS_NONE;
    }
    if (st != CUBLAS_STATUS_SUCCESS) {
        plan_release(p);
        return lt_error(ctx, st, what, g);
    }
    if (found) {
        p->mode = PLAN_LT;
    } else {
        p->mode = none;
        plan_release(p);
        p->bias = BIAS_NONE;
    }
    return F8_OK;
}

/* The plan cache's view of this file's plans (plan_cache.cuh): built at
 * capture too (host memory and descriptors only), no buffer of their own. */
typedef struct gemm_build_arg {
    f8i_gemm_cache *c;
    const f8i_gemm_args *g;
    int64_t ldd;
} gemm_build_arg;

static f8_status kind_build(f8_ctx *ctx, void *body, const void *arg, size_t *buf_bytes)
{
    const gemm_build_arg *a = (const gemm_build_arg *)arg;
    (void)buf_bytes;
    return plan_build(ctx, a->c, a->g, a->ldd, (gemm_plan *)body);
}

static void kind_release(f8_ctx *ctx, void *body)
{
    (void)ctx;
    plan_release((gemm_plan *)body);
}

static void kind_describe(const void *arg, char *out, size_t size)
{
    const f8i_gemm_args *g = ((const gemm_build_arg *)arg)->g;
    snprintf(out, size, "m %lld, n %lld, k %lld, %s x %s -> %s", (long long)g->m, (long long)g->n, (long long)g->k,
             f8_dtype_name(g->a_dtype), f8_dtype_name(g->b_dtype), f8_dtype_name(g->d_dtype));
}

static const f8i_plan_kind gemm_kind = {"gemm", sizeof(gemm_plan), 1, kind_build, kind_release, kind_describe};

/* The plan for g's key with D's leading dimension ldd (g->n but in
 * run_padded's split), from the ctx's plan cache. */
static f8_status plan_find(f8_ctx *ctx, f8i_gemm_cache *c, const f8i_gemm_args *g, int64_t ldd, gemm_plan **out)
{
    const gemm_key key = make_key(g, ldd);
    const gemm_build_arg arg = {c, g, ldd};
    f8i_plan *p = NULL;
    *out = NULL;
    F8I_TRY(f8i_plan_get(ctx, &gemm_kind, &key, sizeof key, &arg, &p));
    *out = (gemm_plan *)p->body;
    return F8_OK;
}

/* Point the descriptor at this call's scale_inv and bias (only if changed). */
static cublasStatus_t plan_set_pointers(gemm_plan *p, const f8i_gemm_args *g)
{
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (f8i_dtype_is_fp8(g->a_dtype)) {
        if (p->set_a_scale != (const void *)g->b_scale_inv) {
            st = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g->b_scale_inv,
                                                sizeof g->b_scale_inv);
            if (st != CUBLAS_STATUS_SUCCESS) return st;
            p->set_a_scale = g->b_scale_inv;
        }
        if (p->set_b_scale != (const void *)g->a_scale_inv) {
            st = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g->a_scale_inv,
                                                sizeof g->a_scale_inv);
            if (st != CUBLAS_STATUS_SUCCESS) return st;
            p->set_b_scale = g->a_scale_inv;
        }
    }
    if (p->bias == BIAS_FUSED && p->set_bias != g->bias) {
        st = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
        p->set_bias = g->bias;
    }
    return st;
}

/* ------------------------------------------------------------------------ */
/* Entry points                                                              */
/* ------------------------------------------------------------------------ */

f8_status f8i_cuda_gemm_create(f8_ctx *ctx)
{
    f8i_cuda_state *cs = f8i_cuda(ctx);
    f8i_gemm_cache *c = (f8i_gemm_cache *)calloc(1, sizeof *c);
    if (!c) return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "gemm: no host memory for the GEMM op's state");
    cublasStatus_t st = cublasLtCreate(&c->lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
        free(c);
        return f8i_error(ctx, F8_ERR_CUBLAS, "gemm: cublasLtCreate: %s", cublasLtGetStatusName(st));
    }
    const cudaError_t err = cudaMalloc(&c->workspace, F8I_GEMM_OP_WORKSPACE_BYTES);
    if (err != cudaSuccess) {
        (void)cudaGetLastError(); /* a failed allocation must not leak into later launch checks */
        cublasLtDestroy(c->lt);
        free(c);
        if (err == cudaErrorMemoryAllocation)
            return f8i_error(ctx, F8_ERR_OUT_OF_MEMORY, "gemm: cudaMalloc of the GEMM op's %zu-byte workspace failed",
                             F8I_GEMM_OP_WORKSPACE_BYTES);
        return f8i_cuda_check(ctx, err, "gemm: cudaMalloc of the GEMM op's workspace");
    }
    cs->gemm = c;
    return F8_OK;
}

/* After f8i_plan_cache_destroy (the plans hold no pointer into this). */
void f8i_cuda_gemm_destroy(f8_ctx *ctx)
{
    if (!ctx || !ctx->be_state) return;
    f8i_gemm_cache *c = f8i_cuda(ctx)->gemm;
    if (!c) return;
    if (c->workspace) cudaFree(c->workspace);
    if (c->lt) cublasLtDestroy(c->lt);
    free(c);
    f8i_cuda(ctx)->gemm = NULL;
}

f8_status f8i_cuda_gemm_lt(f8_ctx *ctx, void **handle, void **workspace, size_t *workspace_bytes)
{
    f8i_gemm_cache *c = f8i_cuda(ctx)->gemm;
    if (!c) return f8i_error(ctx, F8_ERR_STATE, "gemm: the CUDA state has no GEMM op (f8i_cuda_gemm_create not run)");
    *handle = (void *)c->lt;
    *workspace = c->workspace;
    *workspace_bytes = GEMM_WORKSPACE_BYTES;
    return F8_OK;
}

f8_status f8i_cuda_gemm_block_scales(f8_ctx *ctx, void **scales)
{
    f8i_gemm_cache *c = f8i_cuda(ctx)->gemm;
    if (!c) return f8i_error(ctx, F8_ERR_STATE, "gemm: the CUDA state has no GEMM op (f8i_cuda_gemm_create not run)");
    *scales = (char *)c->workspace + GEMM_WORKSPACE_BYTES;
    return F8_OK;
}

/* Run g on its PLAN_LT plan p, D with leading dimension ldd. *unsupported
 * = 1 when cublasLtMatmul says NOT_SUPPORTED: nothing was enqueued, and the
 * plan becomes p->otherwise for good (the caller then runs g that way). */
static f8_status run_lt(f8_ctx *ctx, gemm_plan *p, const f8i_gemm_args *g, int64_t ldd,
                        int *unsupported)
{
    *unsupported = 0;
    cublasStatus_t st = plan_set_pointers(p, g);
    if (st != CUBLAS_STATUS_SUCCESS) return lt_error(ctx, st, "cublasLtMatmulDescSetAttribute", g);
    /* C: the addend under D's layout, or D itself (accumulate): beta 1 */
    const f8i_lt_call call = {p->desc, p->lay_a, p->lay_b, p->lay_d, &p->algo, g->a, g->b,
                              g->c ? g->c : g->accumulate ? g->d : NULL, g->d};
    F8I_TRY(f8i_lt_tune(ctx, &call, (size_t)g->m * (size_t)ldd * dtype_bytes(g->d_dtype), &p->algo, &p->tuned));
    F8I_TRY(f8i_lt_matmul(ctx, &call, "gemm", g->m, g->n, g->k, unsupported));
    if (*unsupported) {
        plan_release(p);
        p->mode = p->otherwise;
        p->bias = BIAS_NONE;
        return F8_OK;
    }
    if (p->bias != BIAS_AFTER) return F8_OK;
    if (ldd == g->n) return f8i_cuda_gemm_bias(ctx, g, 0);
    /* a strided D (run_padded's split): the slice kernel in place adds it */
    const f8i_gemm_slice_args sl = {g->d, g->d_dtype, ldd, g->d, g->d_dtype, ldd, g->bias, g->bias_dtype, g->m, g->n, 0};
    return f8i_cuda_gemm_slice(ctx, &sl);
}

/* g (FP8 TN, outside the rule or refused by the heuristic) on zero-padded
 * copies in g's workspace, laid out as f8i_gemm_workspace_bytes says (A,
 * then B, then D, then the bias), then cuBLASLt on the padded shape under
 * an ordinary plan of its own. When n is off the rule, either
 *   split: D's rows are 16-byte aligned anyway (n·sizeof(D) % 16 == 0, d
 *     aligned, no FP32 bias): cuBLASLt writes columns [0, n0 = n & ~15) of
 *     D in place (ld n, with the accumulate and a BF16 bias), and only the
 *     last n - n0 < 16 columns go through a 16-wide FP32 D and a slice; B
 *     is copied whole only when k is odd, else just its last rows;
 *   full: D [m, n16] (and a BF16 bias [n16], fused: one rounding, as
 *     unpadded) in the workspace, sliced back with the accumulate and any
 *     other bias.
 * The slow kernel runs g instead when the workspace is missing or short, or
 * cuBLASLt has no plan for the padded shapes either; nothing is written to
 * D before every plan is known and the padded GEMMs have been accepted. */
static f8_status run_padded(f8_ctx *ctx, f8i_gemm_cache *c, const f8i_gemm_args *g)
{
    const size_t ds = dtype_bytes(g->d_dtype);
    const int pad_k = g->k % 16 != 0;
    const int pad_d = g->n % 16 != 0 || f8i_lt_align_log2(g->d) < 4;
    const int pad_a = pad_k || f8i_lt_align_log2(g->a) < 4;
    const int64_t k16 = (g->k + 15) / 16 * 16, n16 = (g->n + 15) / 16 * 16;
    const int split = pad_d && g->n > 16 && ((size_t)g->n * ds) % 16 == 0 && f8i_lt_align_log2(g->d) >= 4 &&
                      (!g->bias || g->bias_dtype == F8_DTYPE_BF16);
    /* with k inside the rule, B is not copied for an odd n: the main GEMM
     * reads its first n0 rows in place and a 16-row tail GEMM the rest */
    const int b_tail = pad_d && !pad_k && g->n > 16 && f8i_lt_align_log2(g->b) >= 4;
    const int two = split || b_tail; /* a main GEMM over n0 columns and a 16-wide tail */
    const int64_t n0 = two ? g->n / 16 * 16 : g->n;
    const int full_b = !b_tail && (pad_k || f8i_lt_align_log2(g->b) < 4 || pad_d);
    const int64_t b_rows = full_b ? (pad_d ? n16 : g->n) : b_tail ? 16 : 0;
    const int fuse = pad_d && !split && g->bias && g->bias_dtype == F8_DTYPE_BF16 && !g->accumulate;
    const f8_dtype dp_dtype = (split || g->accumulate || (g->bias && !fuse) || g->d_dtype == F8_DTYPE_FP32)
                                  ? F8_DTYPE_FP32
                                  : F8_DTYPE_BF16;
    const int64_t dp_cols = split ? 16 : n16;
    const size_t a_bytes = pad_a ? f8i_align256((size_t)(g->m * k16)) : 0;
    const size_t b_bytes = b_rows ? f8i_align256((size_t)(b_rows * k16)) : 0;
    const size_t d_bytes = pad_d ? f8i_align256((size_t)(g->m * dp_cols) * dtype_bytes(dp_dtype)) : 0;
    const size_t bias_bytes = fuse ? f8i_align256((size_t)n16 * 2) : 0;
    if (!g->workspace || f8i_lt_align_log2(g->workspace) < 4 || a_bytes + b_bytes + d_bytes + bias_bytes > g->workspace_bytes)
        return f8i_cuda_gemm_fallback(ctx, g);

    uint8_t *ws = (uint8_t *)g->workspace, *bp = ws + a_bytes, *dp = bp + b_bytes;
    f8i_gemm_args e = *g; /* the main padded GEMM, inside the rule */
    e.workspace = NULL;
    e.workspace_bytes = 0;
    e.k = k16;
    if (pad_a) e.a = ws;
    if (full_b) e.b = bp;
    int64_t ldd = g->n;
    const uint8_t *pbias = dp + d_bytes; /* the padded BF16 bias (fuse) */
    if (pad_d && !split) {
        e.n = two ? n0 : n16;
        ldd = n16;
        e.d = dp;
        e.d_dtype = dp_dtype;
        e.accumulate = 0;
        e.bias = fuse ? (const void *)pbias : NULL;
    } else {
        e.n = n0;
    }
    /* the tail: columns n0..n0+15 of the padded D (the split's own 16-wide
     * FP32 one), from B's rows n0.. */
    f8i_gemm_args t = e;
    int64_t ldt = ldd;
    t.n = 16;
    t.b = full_b ? bp + n0 * k16 : bp;
    if (split) {
        t.d = dp;
        t.d_dtype = F8_DTYPE_FP32;
        t.accumulate = 0;
        t.bias = NULL;
        ldt = 16;
    } else {
        t.d = dp + n0 * (int64_t)dtype_bytes(dp_dtype);
        t.bias = fuse ? (const void *)(pbias + n0 * 2) : NULL;
    }
    gemm_plan *p = NULL, *pt = NULL;
    F8I_TRY(plan_find(ctx, c, &e, ldd, &p));
    if (two) F8I_TRY(plan_find(ctx, c, &t, ldt, &pt)); /* plans never move: p stays valid */
    if (p->mode != PLAN_LT || (two && pt->mode != PLAN_LT)) return f8i_cuda_gemm_fallback(ctx, g);

    if (pad_a) F8I_TRY(f8i_cuda_gemm_pad(ctx, (const uint8_t *)g->a, g->m, g->k, (uint8_t *)e.a, g->m, k16));
    if (full_b) F8I_TRY(f8i_cuda_gemm_pad(ctx, (const uint8_t *)g->b, g->n, g->k, bp, b_rows, k16));
    if (b_tail) /* B's last rows, zeros below */
        F8I_TRY(f8i_cuda_gemm_pad(ctx, (const uint8_t *)g->b + n0 * g->k, g->n - n0, g->k, bp, 16, k16));
    if (fuse) /* the bias as one row of bytes, zeros past n */
        F8I_TRY(f8i_cuda_gemm_pad(ctx, (const uint8_t *)g->bias, 1, g->n * 2, (uint8_t *)pbias, 1, n16 * 2));
    int unsupported = 0;
    if (two) F8I_TRY(run_lt(ctx, pt, &t, ldt, &unsupported)); /* D untouched so far */
    if (!unsupported) F8I_TRY(run_lt(ctx, p, &e, ldd, &unsupported));
    if (unsupported) return f8i_cuda_gemm_fallback(ctx, g); /* D untouched: the copies were harmless */
    if (!pad_d) return F8_OK;
    f8i_gemm_slice_args sl = {g->d, g->d_dtype, g->n, dp, dp_dtype, dp_cols, fuse ? NULL : g->bias, g->bias_dtype,
                              g->m, g->n, g->accumulate};
    if (split) { /* columns n0..n-1 from the tail's 16 */
        sl.d = (uint8_t *)g->d + n0 * (int64_t)ds;
        sl.bias = g->bias ? (const uint8_t *)g->bias + n0 * 2 : NULL; /* split has BF16 biases only */
        sl.cols = g->n - n0;
    }
    return f8i_cuda_gemm_slice(ctx, &sl);
}

/* A distinct addend where cuBLASLt does not take it (the design note): D = C
 * (an exact copy on the stream), then *e is g as an accumulate. */
static f8_status addend_into_d(f8_ctx *ctx, const f8i_gemm_args *g, f8i_gemm_args *e)
{
    const size_t bytes = (size_t)g->m * (size_t)g->n * dtype_bytes(g->d_dtype);
    const void *src = g->c;
    *e = *g;
    e->c = NULL;
    e->accumulate = 1;
    F8I_COUNT_LAUNCHES(ctx, 1);
    return f8i_cuda_check(ctx, cudaMemcpyAsync(e->d, src, bytes, cudaMemcpyDeviceToDevice, f8i_stream(ctx)),
                          "gemm: cudaMemcpyAsync of the addend C into D");
}

f8_status f8i_cuda_gemm(f8_ctx *ctx, const f8i_gemm_args *args)
{
    if (args->a_mode == F8I_SCALING_ROW || args->b_mode == F8I_SCALING_ROW) return f8i_cuda_gemm_rowwise_op(ctx, args);
    if (args->a_mode != F8I_SCALING_TENSOR || args->b_mode != F8I_SCALING_TENSOR) return f8i_cuda_gemm_block(ctx, args);
    f8i_gemm_args e;
    const f8i_gemm_args *g = args;
    if (args->c && args->c == args->d) { /* D + D's own addend: the accumulate */
        e = *args;
        e.c = NULL;
        e.accumulate = 1;
        g = &e;
    }
    if (g->m == 0 || g->n == 0) return F8_OK;
    if (g->c && g->k == 0) {
        F8I_TRY(addend_into_d(ctx, g, &e));
        g = &e;
    }
    if (g->k == 0) {
        /* D = (accumulate ? D : 0) + bias, without cuBLASLt. */
        if (g->bias) return f8i_cuda_gemm_bias(ctx, g, !g->accumulate);
        if (g->accumulate) return F8_OK;
        const size_t bytes = (size_t)g->m * (size_t)g->n * dtype_bytes(g->d_dtype);
        F8I_COUNT_LAUNCHES(ctx, 1);
        return f8i_cuda_check(ctx, cudaMemsetAsync(g->d, 0, bytes, f8i_stream(ctx)), "gemm: cudaMemsetAsync of D (k = 0)");
    }

    f8i_gemm_cache *c = f8i_cuda(ctx)->gemm;
    if (!c) return f8i_error(ctx, F8_ERR_STATE, "gemm: the CUDA state has no GEMM op (f8i_cuda_gemm_create not run)");
    gemm_plan *p = NULL;
    F8I_TRY(plan_find(ctx, c, g, g->n, &p));
    if (p->mode == PLAN_LT) {
        int unsupported = 0;
        const f8_status s = run_lt(ctx, p, g, g->n, &unsupported);
        if (s != F8_OK || !unsupported) return s; /* else nothing was enqueued; p->mode is the way now */
    }
    const plan_mode mode = p->mode;
    if (g->c) {
        F8I_TRY(addend_into_d(ctx, g, &e));
        g = &e;
    }
    return mode == PLAN_PAD ? run_padded(ctx, c, g) : f8i_cuda_gemm_fallback(ctx, g);
}
