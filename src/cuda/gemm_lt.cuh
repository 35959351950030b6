/*
 * gemm_lt.cuh — the cuBLASLt set-up both GEMM paths share (gemm.cu: the
 * per-tensor operands; gemm_block.cu: the block-scaled ones): dtype and
 * alignment classes, the release of a plan's descriptor and layouts, and the
 * one heuristic query, the element access of the fallback kernels. Only
 * src/cuda/gemm*.cu include it.
 */
#ifndef F8_CUDA_GEMM_LT_CUH
#define F8_CUDA_GEMM_LT_CUH

#include <cublasLt.h>
#include <string.h>

#include "core/f8i.h"
#include "core/numerics.h"

/* log2 of the largest power of two <= 256 dividing the address (8 for
 * NULL): the alignment class a plan key holds, since the heuristic's choice
 * depends on it (MIN_ALIGNMENT_*_BYTES). */
static inline uint32_t f8i_lt_align_log2(const void *p)
{
    const uintptr_t u = (uintptr_t)p;
    if (u == 0) return 8;
    const uint32_t tz = (uint32_t)__builtin_ctzll((unsigned long long)u);
    return tz > 8 ? 8 : tz;
}

static inline cudaDataType_t f8i_lt_type(f8_dtype t)
{
    switch (t) {
    case F8_DTYPE_BF16: return CUDA_R_16BF;
    case F8_DTYPE_E4M3: return CUDA_R_8F_E4M3;
    case F8_DTYPE_E5M2: return CUDA_R_8F_E5M2;
    default: return CUDA_R_32F;
    }
}

/* Destroy a plan's descriptor and three layouts (C = D shares D's); any may
 * be NULL. All four are NULL after. */
static inline void f8i_lt_release(cublasLtMatmulDesc_t *desc, cublasLtMatrixLayout_t *lay_a,
                                  cublasLtMatrixLayout_t *lay_b, cublasLtMatrixLayout_t *lay_d)
{
    if (*desc) cublasLtMatmulDescDestroy(*desc);
    if (*lay_a) cublasLtMatrixLayoutDestroy(*lay_a);
    if (*lay_b) cublasLtMatrixLayoutDestroy(*lay_b);
    if (*lay_d) cublasLtMatrixLayoutDestroy(*lay_d);
    *desc = NULL;
    *lay_a = *lay_b = *lay_d = NULL;
}

/* One algorithm from the heuristic for (desc, A', B', D' as C' and D'), at
 * most ws workspace bytes, with the operands' alignments in bytes (al_*:
 * cuBLASLt's A' = our b, B' = our a). *found = 0 (and SUCCESS) when cuBLASLt
 * has none for it: "no algorithm for this configuration" is an answer, not
 * an error. */
static inline cublasStatus_t f8i_lt_heuristic(cublasLtHandle_t lt, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t lay_a,
                                              cublasLtMatrixLayout_t lay_b, cublasLtMatrixLayout_t lay_d, uint64_t ws,
                                              uint32_t al_a, uint32_t al_b, uint32_t al_c, uint32_t al_d,
                                              cublasLtMatmulAlgo_t *algo, int *found)
{
    *found = 0;
    cublasLtMatmulPreference_t pref = NULL;
    cublasStatus_t st = cublasLtMatmulPreferenceCreate(&pref);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d);
    /* No in-place split-K: its counters need a memset before every matmul,
     * which costs a graph node (and host time) per GEMM on each replay. */
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_MASK & ~(uint32_t)CUBLASLT_REDUCTION_SCHEME_INPLACE;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                  sizeof schemes);
    if (st == CUBLAS_STATUS_SUCCESS) {
        cublasLtMatmulHeuristicResult_t res;
        int n_res = 0;
        memset(&res, 0, sizeof res);
        st = cublasLtMatmulAlgoGetHeuristic(lt, desc, lay_a, lay_b, lay_d, lay_d, pref, 1, &res, &n_res);
        if (st == CUBLAS_STATUS_SUCCESS && n_res > 0 && res.state == CUBLAS_STATUS_SUCCESS && res.workspaceSize <= ws) {
            *algo = res.algo;
            *found = 1;
        }
        if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE || st == CUBLAS_STATUS_ARCH_MISMATCH)
            st = CUBLAS_STATUS_SUCCESS;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    return st;
}

/* D, C and bias elements of the fallback kernels, FP32 or BF16 (BF16 stores
 * round to nearest even). */
static __device__ __forceinline__ float f8i_lt_load(const void *p, int64_t i, f8_dtype dt)
{
    return dt == F8_DTYPE_BF16 ? f8i_bf16_to_float(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static __device__ __forceinline__ void f8i_lt_store(void *p, int64_t i, f8_dtype dt, float v)
{
    if (dt == F8_DTYPE_BF16)
        ((uint16_t *)p)[i] = f8i_bf16_from_float(v);
    else
        ((float *)p)[i] = v;
}

#endif /* F8_CUDA_GEMM_LT_CUH */
